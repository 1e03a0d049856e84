/* test_loss_scale.c - the loss scaler's state machine (kernels/
 * loss_scale.h) on the host, against sequences worked out by hand: back
 * off on overflow, growth after `interval` good steps, the ceiling and
 * the floor, a static scale, and the step parameters td_ls_prepare hands
 * the optimizer (1/scale of the scale the loss used, AdamW's step count
 * without the skipped steps). */
#include <math.h>

#include "loss_scale.h"
#include "optim_update.h"
#include "tdtest.h"

START_TEST(test_ls_bad)
{
    ck_assert_int_eq(td_ls_bad(0.0f), 0);
    ck_assert_int_eq(td_ls_bad(-3.4e38f), 0);
    ck_assert_int_eq(td_ls_bad(1e-45f), 0); /* subnormal is finite */
    ck_assert_int_eq(td_ls_bad(INFINITY), 1);
    ck_assert_int_eq(td_ls_bad(-INFINITY), 1);
    ck_assert_int_eq(td_ls_bad(NAN), 1);
}
END_TEST

/* interval 3 from 2^16: overflow, 3 good (grow), 2 good, overflow, ... */
START_TEST(test_ls_sequence)
{
    td_ls_state s = {TD_LS_INIT, 0, 0};
    /* found flags and the scale, good count and skipped total after each */
    const int found[] = {1, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0};
    const float scale[] = {32768, 32768, 32768, 65536, 65536, 65536,
                           32768, 16384, 16384, 16384, 32768};
    const int good[] = {0, 1, 2, 0, 1, 2, 0, 0, 1, 2, 0};
    const int skipped[] = {1, 1, 1, 1, 1, 1, 2, 3, 3, 3, 3};
    for (int i = 0; i < (int)(sizeof found / sizeof *found); i++) {
        int skip = td_ls_advance(&s, found[i], 3);
        ck_assert_int_eq(skip, found[i]);
        ck_assert_msg(s.scale == scale[i], "step %d: scale %g, want %g", i,
                      (double)s.scale, (double)scale[i]);
        ck_assert_int_eq(s.good, good[i]);
        ck_assert_int_eq(s.skipped, skipped[i]);
    }
}
END_TEST

/* The default interval: 1999 good steps leave the scale, the 2000th
 * doubles it. */
START_TEST(test_ls_default_interval)
{
    td_ls_state s = {TD_LS_INIT, 0, 0};
    for (int i = 0; i < TD_LS_INTERVAL - 1; i++)
        td_ls_advance(&s, 0, TD_LS_INTERVAL);
    ck_assert(s.scale == 65536.0f);
    ck_assert_int_eq(s.good, TD_LS_INTERVAL - 1);
    td_ls_advance(&s, 0, TD_LS_INTERVAL);
    ck_assert(s.scale == 131072.0f);
    ck_assert_int_eq(s.good, 0);
}
END_TEST

START_TEST(test_ls_ceiling_and_floor)
{
    td_ls_state s = {TD_LS_MAX / 2, 0, 0};
    td_ls_advance(&s, 0, 1);
    ck_assert(s.scale == TD_LS_MAX);
    td_ls_advance(&s, 0, 1); /* stays at the ceiling */
    ck_assert(s.scale == TD_LS_MAX);
    ck_assert(TD_LS_MAX == 16777216.0f);
    s = (td_ls_state){2.0f, 0, 0};
    td_ls_advance(&s, 1, 1);
    ck_assert(s.scale == 1.0f);
    ck_assert_int_eq(td_ls_advance(&s, 1, 1), 1); /* still skipped */
    ck_assert(s.scale == TD_LS_MIN);
    ck_assert_int_eq(s.skipped, 2);
    /* from 2^16, 16 overflows in a row reach the floor, no further */
    s = (td_ls_state){TD_LS_INIT, 0, 0};
    for (int i = 0; i < 20; i++)
        td_ls_advance(&s, 1, TD_LS_INTERVAL);
    ck_assert(s.scale == 1.0f);
    ck_assert_int_eq(s.skipped, 20);
}
END_TEST

/* interval 0: a static scale; overflowing steps are skipped all the same */
START_TEST(test_ls_static)
{
    td_ls_state s = {1000.0f, 0, 0};
    for (int i = 0; i < 5000; i++)
        ck_assert_int_eq(td_ls_advance(&s, i == 7, 0), i == 7);
    ck_assert(s.scale == 1000.0f);
    ck_assert_int_eq(s.good, 0);
    ck_assert_int_eq(s.skipped, 1);
}
END_TEST

/* prepare: the update of step t reads 1/scale of the scale before the
 * step, the AdamW corrections at t minus the steps skipped before it, and
 * the flag is cleared for the next step. */
START_TEST(test_ls_prepare)
{
    const double b1 = 0.9, b2 = 0.999;
    td_ls_dev d = {{TD_LS_INIT, 0, 0}, 0, {0, 0.0f, {0, 0}}};
    td_ls_prepare(&d, 2, b1, b2, 1);
    ck_assert_int_eq(d.step.skip, 0);
    ck_assert(d.step.inv_scale == 0x1p-16f);
    td_adamw_corr c1 = td_adamw_corrections(b1, b2, 1);
    ck_assert(d.step.corr.c1 == c1.c1 && d.step.corr.c2 == c1.c2);
    d.found = 1; /* step 2 overflows: skipped, the scale halves */
    td_ls_prepare(&d, 2, b1, b2, 2);
    ck_assert_int_eq(d.step.skip, 1);
    ck_assert(d.step.inv_scale == 0x1p-16f); /* the scale step 2 used */
    ck_assert(d.st.scale == 32768.0f);
    ck_assert_int_eq(d.found, 0);
    ck_assert_int_eq(d.st.skipped, 1);
    td_ls_prepare(&d, 2, b1, b2, 3); /* AdamW's second update */
    ck_assert_int_eq(d.step.skip, 0);
    ck_assert(d.step.inv_scale == 0x1p-15f);
    td_adamw_corr c2 = td_adamw_corrections(b1, b2, 2);
    ck_assert(d.step.corr.c1 == c2.c1 && d.step.corr.c2 == c2.c2);
    td_ls_prepare(&d, 2, b1, b2, 4); /* 2 good steps: grows back */
    ck_assert(d.step.inv_scale == 0x1p-15f);
    ck_assert(d.st.scale == 65536.0f);
}
END_TEST

/* Scaling by a power of two and unscaling is exact for fp32 values in
 * the normal range: the reason fp32 runs with and without loss scaling
 * are bitwise equal. */
START_TEST(test_ls_power_of_two_exact)
{
    for (int i = 0; i < 100000; i++) {
        float g = (float)ldexp(1.0 + i / 99991.0, i % 200 - 100);
        float scaled = g * TD_LS_INIT;
        ck_assert(scaled * (1.0f / TD_LS_INIT) == g);
    }
}
END_TEST

static Suite *loss_scale_suite(void)
{
    Suite *s = suite_create("loss_scale");
    TCase *tc = tcase_create("loss_scale");
    tcase_add_test(tc, test_ls_bad);
    tcase_add_test(tc, test_ls_sequence);
    tcase_add_test(tc, test_ls_default_interval);
    tcase_add_test(tc, test_ls_ceiling_and_floor);
    tcase_add_test(tc, test_ls_static);
    tcase_add_test(tc, test_ls_prepare);
    tcase_add_test(tc, test_ls_power_of_two_exact);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(loss_scale_suite)
