/* test_jsontext.c - td_json_dumps: shortest exact reals, nothing else
 * touched. */
#include <string.h>

#include "base/jsontext.h"
#include "tdtest.h"

static void expect(json_t *o, const char *want)
{
    char *s = td_json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
    ck_assert_ptr_nonnull(s);
    ck_assert_str_eq(s, want);
    free(s);
    json_decref(o);
}

START_TEST(test_shortest_reals)
{
    /* jansson alone prints 0.34999999999999998 */
    expect(json_pack("{s:f}", "p", 0.35), "{\"p\":0.35}");
    expect(json_pack("[f,f,f,i]", 1.0, -2.5, 1e-300, 7),
           "[1.0,-2.5,1e-300,7]");
    expect(json_pack("[f]", 0.1 + 0.2), "[0.30000000000000004]");
    /* Numbers inside strings are text, escapes included. */
    expect(json_pack("{s:s}", "n", "0.34999999999999998 \"1.10\""),
           "{\"n\":\"0.34999999999999998 \\\"1.10\\\"\"}");
}
END_TEST

START_TEST(test_reads_back_exactly)
{
    json_t *a = json_array();
    uint64_t x = 12345;
    for (int i = 0; i < 2000; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        double v;
        memcpy(&v, &x, sizeof v);
        if (v != v || v - v != 0) /* NaN, inf: not JSON */
            continue;
        json_array_append_new(a, json_real(v));
        json_array_append_new(a, json_real((double)(x >> 11) / 1e6));
    }
    char *s = td_json_dumps(a, JSON_COMPACT);
    json_t *b = json_loads(s, 0, NULL);
    ck_assert_ptr_nonnull(b);
    ck_assert_int_eq(json_array_size(b), json_array_size(a));
    for (size_t i = 0; i < json_array_size(a); i++)
        ck_assert_msg(json_real_value(json_array_get(a, i)) ==
                      json_real_value(json_array_get(b, i)), "%zu", i);
    free(s);
    json_decref(a);
    json_decref(b);
}
END_TEST

static Suite *jsontext_suite(void)
{
    Suite *s = suite_create("jsontext");
    TCase *tc = tcase_create("jsontext");
    tcase_add_test(tc, test_shortest_reals);
    tcase_add_test(tc, test_reads_back_exactly);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(jsontext_suite)
