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

/* Text with bytes that are not UTF-8 (a Latin-1 file name in an error)
 * becomes a JSON string all the same, those bytes as \xNN; UTF-8 text
 * stays as it is.  jansson alone refuses it (and json_pack returns NULL,
 * which lost a failed job's report). */
START_TEST(test_text_not_utf8_still_a_string)
{
    json_t *j = td_json_text("bad sample caf\xe9.jpg: \xc3\xa9t\xc3\xa9");
    ck_assert_ptr_nonnull(j);
    ck_assert_str_eq(json_string_value(j),
                     "bad sample caf\\xe9.jpg: \xc3\xa9t\xc3\xa9");
    json_decref(j);
    ck_assert_ptr_null(json_string("caf\xe9"));
    j = td_json_text("\xf0\x9f\x98\x80 ok"); /* 4 bytes, valid */
    ck_assert_str_eq(json_string_value(j), "\xf0\x9f\x98\x80 ok");
    json_decref(j);
    j = td_json_text("\xed\xa0\x80|\xc0\xaf|\xf4\x90\x80\x80");
    ck_assert_str_eq(json_string_value(j), "\\xed\\xa0\\x80|\\xc0\\xaf|"
                                           "\\xf4\\x90\\x80\\x80");
    json_decref(j);
    ck_assert_int_eq(td_utf8_seq((const unsigned char *)"\xe2\x82", 2), 0);
    ck_assert_int_eq(td_utf8_seq((const unsigned char *)"\xe2\x82\xac", 3),
                     3);
}
END_TEST

static Suite *json_suite(void)
{
    Suite *s = suite_create("json");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_every_type_has_its_name);
    tcase_add_test(tc, test_out_of_range_type_is_named_not_crashed);
    tcase_add_test(tc, test_text_not_utf8_still_a_string);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(json_suite)
