/* test_error.c - error codes and their strings. */
#include <string.h>

#include "base/error.h"
#include "tdtest.h"

START_TEST(test_success_and_errno)
{
    ck_assert_str_eq(td_strerror(0), "success");
    ck_assert_str_eq(td_errname(0), "OK");
    ck_assert_str_eq(td_strerror(-ENOENT), "No such file or directory");
    ck_assert_str_eq(td_errname(-ENOENT), "ENOENT");
    ck_assert_str_eq(td_errname(-ENOSPC), "ENOSPC");
    ck_assert_str_eq(td_strerror(-ENOSPC), "No space left on device");
}
END_TEST

START_TEST(test_traind_codes)
{
    ck_assert_str_eq(td_strerror(TD_E_SPEC),
                     "invalid job spec or model definition");
    ck_assert_str_eq(td_errname(TD_E_CRC), "TD_E_CRC");
    ck_assert_str_eq(td_strerror(TD_E_TIMEDOUT), "timed out");
    /* Every traind code has a distinct name and a message. */
    for (int e = TD_E_BASE; e >= TD_E_LAST; e--) {
        ck_assert_str_ne(td_errname(e), "UNKNOWN");
        ck_assert_str_ne(td_strerror(e), "unknown error");
        for (int f = e - 1; f >= TD_E_LAST; f--)
            ck_assert_str_ne(td_errname(e), td_errname(f));
    }
    /* traind codes never collide with errno values. */
    ck_assert_int_lt(TD_E_BASE, -4096);
}
END_TEST

START_TEST(test_unknown_codes)
{
    ck_assert_str_eq(td_strerror(TD_E_LAST - 1), "unknown error");
    ck_assert_str_eq(td_errname(TD_E_LAST - 1), "UNKNOWN");
    ck_assert_str_eq(td_strerror(12345), "unknown error");
    ck_assert_ptr_nonnull(td_strerror(-4000));
}
END_TEST

static Suite *error_suite(void)
{
    Suite *s = suite_create("error");
    TCase *tc = tcase_create("strings");
    tcase_add_test(tc, test_success_and_errno);
    tcase_add_test(tc, test_traind_codes);
    tcase_add_test(tc, test_unknown_codes);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(error_suite)
