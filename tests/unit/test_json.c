/* test_json.c - one wording per JSON type, the same in every error message
 * (the protocol, job specs and model graphs all say it this way). */
#include <jansson.h>

#include "base/json.h"
#include "tdtest.h"

START_TEST(test_every_type_has_its_name)
{
    static const struct {
        const char *text;
        const char *name;
    } cases[] = {
        {"{}", "an object"},     {"[]", "an array"},
        {"\"x\"", "a string"},   {"3", "an integer"},
        {"3.5", "a number"},     {"true", "true or false"},
        {"false", "true or false"}, {"null", "null"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_error_t e;
        json_t *v = json_loads(cases[i].text, JSON_DECODE_ANY, &e);
        ck_assert_msg(v != NULL, "%s: %s", cases[i].text, e.text);
        ck_assert_str_eq(td_json_type_name(json_typeof(v)), cases[i].name);
        json_decref(v);
    }
}
END_TEST

START_TEST(test_out_of_range_type_is_named_not_crashed)
{
    ck_assert_str_eq(td_json_type_name((json_type)99),
                     "an unknown JSON type");
}
END_TEST

static Suite *json_suite(void)
{
    Suite *s = suite_create("json");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_every_type_has_its_name);
    tcase_add_test(tc, test_out_of_range_type_is_named_not_crashed);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(json_suite)
