/* test_prom.c - the Prometheus exposition: format, names, labels, values,
 * and the checker that the live tests use. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "obs/prom.h"
#include "obs_check.h"
#include "tdtest.h"

static const char *const states[] = {"pending", "running", "suspended",
                                     "completed", "cancelled", "failed"};

static void job(td_prom_job *j, long id, int pipeline)
{
    memset(j, 0, sizeof *j);
    j->job = id;
    strcpy(j->device, "cpu");
    j->mc.steps_total = 120;
    j->mc.samples_total = 120 * 64;
    j->mc.phase_seconds_total[TD_PHASE_DATA_WAIT] = 1.5;
    j->mc.phase_seconds_total[TD_PHASE_OTHER] = 0.25;
    j->mc.step_seconds_total = 6.0;
    j->mc.samples_per_s = 1234.5;
    j->mc.device_idle_known = 1;
    j->mc.device_idle_ratio = 0.3;
    j->mc.input_wait_ratio = 0.25;
    j->mc.verdict = TD_VERDICT_INPUT_BOUND;
    j->mc.severity = TD_SEV_HIGH;
    j->has_pipeline = pipeline;
    j->workers = 3;
    j->prefetch = 6;
    j->bad_samples = 2;
    j->ckpt_written = 4;
    j->ckpt_write_s = 0.75;
    j->lr = 0.05;
    j->train_loss = 0.625;
    j->epoch_train_loss = 0.75;
    j->epoch_train_acc = 0.5;
    j->val_loss = NAN; /* no validation set */
    j->val_acc = NAN;
}

static char *render(const td_prom_job *jobs, int n)
{
    td_prom_process p = {.uptime_s = 12.5, .jobs = {1, 1, 0, 3, 0, 1},
                         .state_names = states, .nstates = 6, .clients = 2,
                         .scrapes = 7};
    char *buf = malloc(1 << 16);
    int rc = td_prom_render(jobs, n, &p, buf, 1 << 16);
    ck_assert_int_gt(rc, 0);
    ck_assert_uint_eq(strlen(buf), (size_t)rc);
    return buf;
}

START_TEST(test_render_is_valid_exposition)
{
    td_prom_job j[2];
    char err[256];
    job(&j[0], 3, 1);
    job(&j[1], 4, 0);
    strcpy(j[1].device, "cuda:0");
    char *t = render(j, 2);
    ck_assert_msg(oc_prom_check(t, err, sizeof err) == 0, "%s\n%s", err, t);
    free(t);
}
END_TEST

START_TEST(test_design_names_with_job_and_device_labels)
{
    td_prom_job j;
    job(&j, 3, 1);
    char *t = render(&j, 1);
    ck_assert_double_eq(oc_prom_value(t, "traind_samples_total{job=\"3\","
                                         "device=\"cpu\"}"), 7680);
    ck_assert_double_eq(oc_prom_value(t, "traind_step_phase_seconds_total{"
                                         "job=\"3\",device=\"cpu\","
                                         "phase=\"data_wait\"}"), 1.5);
    ck_assert_double_eq(oc_prom_value(t, "traind_step_duration_seconds_count"
                                         "{job=\"3\",device=\"cpu\"}"), 120);
    ck_assert_double_eq(oc_prom_value(t, "traind_device_idle_ratio{job=\"3\","
                                         "device=\"cpu\"}"), 0.3);
    ck_assert_double_eq(oc_prom_value(t, "traind_input_wait_ratio{job=\"3\","
                                         "device=\"cpu\"}"), 0.25);
    ck_assert_double_eq(oc_prom_value(t, "traind_bottleneck_info{job=\"3\","
                                         "device=\"cpu\",verdict=\"input_bound"
                                         "\",severity=\"high\"}"), 1);
    ck_assert_double_eq(oc_prom_value(t, "traind_input_workers{job=\"3\","
                                         "device=\"cpu\"}"), 3);
    ck_assert_double_eq(oc_prom_value(t, "traind_input_ring_depth{job=\"3\","
                                         "device=\"cpu\"}"), 6);
    ck_assert_double_eq(oc_prom_value(t, "traind_bad_samples_total{job=\"3\","
                                         "device=\"cpu\"}"), 2);
    ck_assert_double_eq(oc_prom_value(t, "traind_checkpoint_write_seconds_"
                                         "total{job=\"3\",device=\"cpu\"}"),
                        0.75);
    ck_assert_double_eq(oc_prom_value(t, "traind_jobs{state=\"completed\"}"),
                        3);
    ck_assert_double_eq(oc_prom_value(t, "traind_clients"), 2);
    free(t);
}
END_TEST

START_TEST(test_unknown_idle_and_synthetic_input_leave_series_out)
{
    td_prom_job j;
    job(&j, 5, 0);
    j.mc.device_idle_known = 0;
    char *t = render(&j, 1);
    ck_assert(isnan(oc_prom_value(t, "traind_device_idle_ratio{job=\"5\","
                                     "device=\"cpu\"}")));
    ck_assert(isnan(oc_prom_value(t, "traind_input_workers{job=\"5\","
                                     "device=\"cpu\"}")));
    ck_assert_ptr_nonnull(strstr(t, "# TYPE traind_device_idle_ratio gauge"));
    free(t);
}
END_TEST

/* The learning curves: known values as gauges, no validation set no
 * validation series (not a 0 that would read as a perfect loss). */
START_TEST(test_curve_series)
{
    td_prom_job j[2];
    char err[256];
    job(&j[0], 6, 1);
    job(&j[1], 7, 1);
    j[1].val_loss = 0.25;
    j[1].val_acc = 0.875;
    char *t = render(j, 2);
    ck_assert_msg(oc_prom_check(t, err, sizeof err) == 0, "%s\n%s", err, t);
    ck_assert_double_eq(oc_prom_value(t, "traind_learning_rate{job=\"6\","
                                         "device=\"cpu\"}"), 0.05);
    ck_assert_double_eq(oc_prom_value(t, "traind_train_loss{job=\"6\","
                                         "device=\"cpu\"}"), 0.625);
    ck_assert_double_eq(oc_prom_value(t, "traind_epoch_train_loss{job=\"6\","
                                         "device=\"cpu\"}"), 0.75);
    ck_assert_double_eq(oc_prom_value(t, "traind_epoch_train_accuracy{job="
                                         "\"6\",device=\"cpu\"}"), 0.5);
    ck_assert(isnan(oc_prom_value(t, "traind_val_loss{job=\"6\","
                                     "device=\"cpu\"}")));
    ck_assert_double_eq(oc_prom_value(t, "traind_val_loss{job=\"7\","
                                         "device=\"cpu\"}"), 0.25);
    ck_assert_double_eq(oc_prom_value(t, "traind_val_accuracy{job=\"7\","
                                         "device=\"cpu\"}"), 0.875);
    free(t);
}
END_TEST

START_TEST(test_small_buffer_is_enospc)
{
    td_prom_job j;
    char buf[64];
    job(&j, 1, 1);
    ck_assert_int_eq(td_prom_render(&j, 1, NULL, buf, sizeof buf), -ENOSPC);
    ck_assert_int_eq(td_prom_render(&j, 1, NULL, NULL, 0), -ENOSPC);
}
END_TEST

/* The checker itself must reject what Prometheus would. */
START_TEST(test_checker_rejects_bad_text)
{
    char err[256];
    ck_assert_int_eq(oc_prom_check("x_total 1\n", err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "without HELP"));
    ck_assert_int_eq(oc_prom_check("# HELP x h\n# TYPE x counter\nx 1\n", err,
                                   sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "_total"));
    ck_assert_int_eq(oc_prom_check("# HELP x h\n# TYPE x gauge\nx{a=b} 1\n",
                                   err, sizeof err), -1);
    ck_assert_int_eq(oc_prom_check("# HELP x h\n# TYPE x gauge\nx one\n", err,
                                   sizeof err), -1);
    ck_assert_int_eq(oc_prom_check("# HELP x h\n# TYPE x gauge\nx 1\nx 2\n",
                                   err, sizeof err), -1);
    ck_assert_int_eq(oc_prom_check("# HELP x h\n# TYPE x gauge\nx 1", err,
                                   sizeof err), -1);
    ck_assert_int_eq(oc_prom_check("# HELP x h\n# TYPE x gauge\nx{a=\"b\"} 1\n",
                                   err, sizeof err), 0);
    /* two families' samples interleaved (as traind_input_samples_total
     * and traind_input_bytes_total once were) */
    ck_assert_int_eq(oc_prom_check("# HELP x h\n# TYPE x gauge\n# HELP y h\n"
                                   "# TYPE y gauge\nx 1\ny 1\n", err,
                                   sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "one group"));
}
END_TEST

static Suite *prom_suite(void)
{
    Suite *s = suite_create("prom");
    TCase *tc = tcase_create("render");
    tcase_add_test(tc, test_render_is_valid_exposition);
    tcase_add_test(tc, test_design_names_with_job_and_device_labels);
    tcase_add_test(tc, test_unknown_idle_and_synthetic_input_leave_series_out);
    tcase_add_test(tc, test_curve_series);
    tcase_add_test(tc, test_small_buffer_is_enospc);
    tcase_add_test(tc, test_checker_rejects_bad_text);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(prom_suite)
