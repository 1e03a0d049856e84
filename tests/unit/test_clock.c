/* test_clock.c - monotonic clock helpers. */
#include "base/clock.h"
#include "tdtest.h"

START_TEST(test_monotonic_and_sleep)
{
    int64_t a = td_now_ns();
    td_sleep_ns(15 * TD_NS_PER_MS);
    int64_t b = td_now_ns();
    ck_assert_int_ge(b - a, 15 * TD_NS_PER_MS);
    ck_assert_double_ge(td_elapsed_s(a), 0.015);
    td_sleep_ns(-5); /* negative sleeps return at once */
    td_sleep_ns(0);
    for (int i = 0; i < 1000; i++) {
        int64_t c = td_now_ns();
        ck_assert_int_ge(c, b);
        b = c;
    }
}
END_TEST

START_TEST(test_conversions)
{
    ck_assert_double_eq(td_ns_to_s(1500000000), 1.5);
    ck_assert_int_eq(td_s_to_ns(0.25), 250000000);
    struct timespec ts = td_deadline_ts(2 * TD_NS_PER_S);
    int64_t dl = (int64_t)ts.tv_sec * TD_NS_PER_S + ts.tv_nsec;
    int64_t now = td_now_ns();
    ck_assert_int_gt(dl, now + TD_NS_PER_S);
    ck_assert_int_le(dl, now + 2 * TD_NS_PER_S);
    ck_assert_int_lt(ts.tv_nsec, TD_NS_PER_S);
    ck_assert_int_gt(td_wall_ns(), INT64_C(1600000000) * TD_NS_PER_S);
}
END_TEST

static Suite *clock_suite(void)
{
    Suite *s = suite_create("clock");
    TCase *tc = tcase_create("clock");
    tcase_add_test(tc, test_monotonic_and_sleep);
    tcase_add_test(tc, test_conversions);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(clock_suite)
