/* test_eta.c - the time-left estimate: from the first step, with the
 * evaluations still to come, following a change of speed. */
#include "job/eta.h"
#include "tdtest.h"

START_TEST(test_from_the_first_step_with_evaluations)
{
    td_eta e;
    /* 3 epochs of 10 steps, 6 validation batches per evaluation. */
    td_eta_init(&e, 30, 10, 3, 6);
    ck_assert_double_lt(td_eta_left(&e, 0, -1), 0); /* nothing timed */
    td_eta_step(&e, 0, 0.5);
    /* 29 steps x 0.5 s + 3 evaluations x 6 batches x 0.5 / 3 s */
    ck_assert_double_eq_tol(td_eta_left(&e, 1, -1), 14.5 + 3.0, 1e-9);
    for (int s = 1; s < 9; s++)
        td_eta_step(&e, s, 0.5);
    /* The epoch's last step holds the evaluation: not a step time. */
    td_eta_step(&e, 9, 4.0);
    ck_assert_double_eq_tol(e.step_s, 0.5, 1e-12);
    td_eta_eval(&e, 3.5);
    /* Epoch 0 evaluated: 20 steps + 2 evaluations of 3.5 s. */
    ck_assert_double_eq_tol(td_eta_left(&e, 10, 0), 10.0 + 7.0, 1e-9);
    ck_assert_double_eq_tol(td_eta_left(&e, 30, 2), 0.0, 1e-12);
}
END_TEST

START_TEST(test_no_validation_and_speed_changes)
{
    td_eta e;
    td_eta_init(&e, 1000, 1000, 1, 0);
    for (int s = 0; s < 100; s++)
        td_eta_step(&e, s, 1.0);
    ck_assert_double_eq_tol(td_eta_left(&e, 100, -1), 900.0, 1e-9);
    /* Twice as fast from here: the moving mean follows within ~200 steps
     * where a plain average would still say 0.67 s. */
    for (int s = 100; s < 300; s++)
        td_eta_step(&e, s, 0.5);
    ck_assert_double_lt(e.step_s, 0.52);
    ck_assert_double_gt(e.step_s, 0.5);
}
END_TEST

static Suite *eta_suite(void)
{
    Suite *s = suite_create("eta");
    TCase *tc = tcase_create("eta");
    tcase_add_test(tc, test_from_the_first_step_with_evaluations);
    tcase_add_test(tc, test_no_validation_and_speed_changes);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(eta_suite)
