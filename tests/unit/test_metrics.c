/* test_metrics.c - phase attribution, windows, verdicts and their two-window
 * hysteresis, late device times, epochs and exports, all with synthetic
 * step timings (no clocks, no sleeps). */
#include <math.h>
#include <string.h>

#include "base/error.h"
#include "base/rng.h"
#include "obs/metrics.h"
#include "tdtest.h"

#define MS 1000000LL

/* A step of `total` ms: phases in ms, compute in ms (< 0: not reported). */
static td_step_times st(int64_t step, double total, double dw, double h2d,
                        double d2h, double ckpt, double compute)
{
    td_step_times t = {
        .step = step, .epoch = 0, .total_ns = (int64_t)(total * MS),
        .data_wait_ns = (int64_t)(dw * MS), .h2d_ns = (int64_t)(h2d * MS),
        .d2h_ns = (int64_t)(d2h * MS), .checkpoint_ns = (int64_t)(ckpt * MS),
        .samples = 32, .compute_ns = compute < 0 ? -1 : (int64_t)(compute * MS),
        .copy_ns = -1, .loss = NAN};
    return t;
}

static td_metrics *mk(int warmup, int window, int lag)
{
    td_metrics *m;
    td_metrics_config cfg = {warmup, window, lag, TD_ADVICE_MIXED};
    ck_assert_int_eq(td_metrics_create(&m, &cfg), 0);
    return m;
}

static double jnum(const json_t *o, const char *k)
{
    const json_t *v = json_object_get(o, k);
    ck_assert_msg(json_is_number(v), "%s is not a number", k);
    return json_number_value(v);
}

static const char *jstr(const json_t *o, const char *k)
{
    const json_t *v = json_object_get(o, k);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

/* One window of n identical steps; returns its payload. */
static json_t *one_window(int n, double total, double dw, double h2d,
                          double ckpt, double compute)
{
    td_metrics *m = mk(0, n, 0);
    int closed = 0;
    for (int i = 0; i < n; i++) {
        td_step_times t = st(i, total, dw, h2d, 0, ckpt, compute);
        closed += td_metrics_step(m, &t);
    }
    ck_assert_int_eq(closed, 1);
    json_t *w = td_metrics_window_json(m);
    td_metrics_destroy(m);
    return w;
}

static void expect_raw(json_t *w, const char *verdict, const char *sev)
{
    ck_assert_str_eq(jstr(w, "raw_verdict"), verdict);
    ck_assert_str_eq(jstr(w, "verdict"), verdict); /* first window */
    if (sev)
        ck_assert_str_eq(jstr(w, "severity"), sev);
    else
        ck_assert(json_is_null(json_object_get(w, "severity")));
    ck_assert_ptr_nonnull(jstr(w, "advice"));
    ck_assert_int_gt(strlen(jstr(w, "advice")), 20);
    json_decref(w);
}

START_TEST(test_attribution_priority)
{
    td_metrics *m = mk(0, 100, 0);
    /* overlapping measurements: 30 + 60 + 50 + 5 > 100 */
    td_step_times t = st(0, 100, 60, 50, 5, 30, -1);
    ck_assert_int_eq(td_metrics_step(m, &t), 0);
    json_t *j = td_metrics_step_json(m);
    json_t *ph = json_object_get(j, "phases_s");
    ck_assert_double_eq_tol(jnum(ph, "checkpoint"), 0.030, 1e-12);
    ck_assert_double_eq_tol(jnum(ph, "data_wait"), 0.060, 1e-12);
    ck_assert_double_eq_tol(jnum(ph, "h2d"), 0.010, 1e-12);
    ck_assert_double_eq_tol(jnum(ph, "d2h"), 0.0, 1e-12);
    ck_assert_double_eq_tol(jnum(ph, "other"), 0.0, 1e-12);
    json_decref(j);
    td_metrics_destroy(m);
}
END_TEST

/* Random phase times: the attributed phases always sum to the step. */
START_TEST(test_attribution_sums_exactly)
{
    td_metrics *m = mk(0, 1000, 0);
    td_metrics_counters c;
    int64_t total_ns = 0;
    for (int i = 0; i < 500; i++) {
        td_step_times t = st(i, 0, 0, 0, 0, 0, -1);
        uint64_t s = td_rng_stream(TD_RNG_TEST, 7);
        t.total_ns = 1 + (int64_t)td_rng_below(1, s, 6 * i, 50 * MS);
        t.checkpoint_ns = (int64_t)td_rng_below(1, s, 6 * i + 1, 20 * MS);
        t.data_wait_ns = (int64_t)td_rng_below(1, s, 6 * i + 2, 40 * MS);
        t.h2d_ns = (int64_t)td_rng_below(1, s, 6 * i + 3, 20 * MS);
        t.d2h_ns = (int64_t)td_rng_below(1, s, 6 * i + 4, 10 * MS);
        total_ns += t.total_ns;
        ck_assert_int_eq(td_metrics_step(m, &t), 0);
        json_t *j = td_metrics_step_json(m);
        json_t *ph = json_object_get(j, "phases_s");
        double sum = 0;
        const char *k;
        json_t *v;
        json_object_foreach(ph, k, v) {
            ck_assert_double_ge(json_number_value(v), 0);
            sum += json_number_value(v);
        }
        ck_assert_double_eq_tol(sum, (double)t.total_ns / 1e9, 1e-12);
        json_decref(j);
    }
    td_metrics_get_counters(m, &c);
    double sum = 0;
    for (int p = 0; p < TD_PHASE_COUNT; p++)
        sum += c.phase_seconds_total[p];
    ck_assert_double_eq_tol(sum, (double)total_ns / 1e9, 1e-9);
    ck_assert_double_eq_tol(c.step_seconds_total, (double)total_ns / 1e9,
                            1e-9);
    td_metrics_destroy(m);
}
END_TEST

START_TEST(test_warmup_excluded)
{
    td_metrics *m = mk(5, 10, 0);
    int closed = 0;
    for (int i = 0; i < 5; i++) { /* slow warm-up steps */
        td_step_times t = st(100 + i, 1000, 500, 0, 0, 0, 100);
        closed += td_metrics_step(m, &t);
    }
    for (int i = 5; i < 15; i++) {
        td_step_times t = st(100 + i, 10, 0, 0, 0, 0, 10);
        closed += td_metrics_step(m, &t);
    }
    ck_assert_int_eq(closed, 1);
    json_t *w = td_metrics_window_json(m);
    ck_assert_int_eq((int)jnum(w, "first_step"), 105);
    ck_assert_int_eq((int)jnum(w, "last_step"), 114);
    ck_assert_int_eq((int)jnum(w, "samples"), 320);
    ck_assert_double_eq_tol(jnum(w, "samples_per_s"), 3200, 1e-6);
    ck_assert_double_eq_tol(jnum(w, "input_wait_ratio"), 0, 1e-12);
    ck_assert_double_eq_tol(jnum(json_object_get(w, "step_time_s"), "max"),
                            0.010, 1e-12);
    td_metrics_counters c;
    td_metrics_get_counters(m, &c);
    ck_assert_uint_eq(c.steps_total, 15); /* counters include warm-up */
    ck_assert_uint_eq(c.samples_total, 15 * 32);
    json_decref(w);
    td_metrics_destroy(m);
}
END_TEST

START_TEST(test_window_maths)
{
    td_metrics *m = mk(0, 10, 0);
    for (int i = 0; i < 10; i++) { /* steps of 1..10 ms, half compute */
        double ms = i + 1;
        td_step_times t = st(i, ms, 0.1 * ms, 0.05 * ms, 0.02 * ms, 0,
                             0.5 * ms);
        t.copy_ns = (int64_t)(0.01 * ms * MS);
        td_metrics_step(m, &t);
    }
    json_t *w = td_metrics_window_json(m);
    json_t *stt = json_object_get(w, "step_time_s");
    ck_assert_double_eq_tol(jnum(w, "wall_s"), 0.055, 1e-12);
    ck_assert_double_eq_tol(jnum(stt, "mean"), 0.0055, 1e-12);
    ck_assert_double_eq_tol(jnum(stt, "p50"), 0.005, 1e-12);
    ck_assert_double_eq_tol(jnum(stt, "p90"), 0.009, 1e-12);
    ck_assert_double_eq_tol(jnum(stt, "max"), 0.010, 1e-12);
    ck_assert_double_eq_tol(jnum(w, "samples_per_s"), 320 / 0.055, 1e-6);
    ck_assert_double_eq_tol(jnum(w, "device_busy_s"), 0.0275, 1e-12);
    ck_assert_double_eq_tol(jnum(w, "device_copy_s"), 0.00055, 1e-12);
    ck_assert_double_eq_tol(jnum(w, "device_idle_ratio"), 0.5, 1e-9);
    ck_assert_double_eq_tol(jnum(w, "input_wait_ratio"), 0.15, 1e-9);
    ck_assert_double_eq_tol(jnum(w, "unattributed_idle_ratio"), 0.35, 1e-9);
    json_t *sh = json_object_get(w, "phase_shares");
    ck_assert_double_eq_tol(jnum(sh, "data_wait"), 0.10, 1e-9);
    ck_assert_double_eq_tol(jnum(sh, "d2h"), 0.02, 1e-9);
    ck_assert_double_eq_tol(jnum(sh, "other"), 0.83, 1e-9);
    ck_assert(json_is_true(json_object_get(w, "device_idle_is_lower_bound")));
    ck_assert(json_is_true(json_object_get(w, "device_times_complete")));
    json_decref(w);
    td_metrics_destroy(m);
}
END_TEST

START_TEST(test_verdict_checkpoint_stall)
{
    expect_raw(one_window(10, 100, 0, 0, 6, 94), "checkpoint_stall", NULL);
}
END_TEST

/* More than 10 steps that are > 2x the median and mostly checkpoint, in a
 * window where the checkpoint share stays under 5%. */
START_TEST(test_verdict_checkpoint_outliers)
{
    for (int outliers = 10; outliers <= 11; outliers++) {
        td_metrics *m = mk(0, 1000, 0);
        for (int i = 0; i < 1000; i++) {
            int o = i % 90 == 0 && i / 90 < outliers;
            td_step_times t = o ? st(i, 30, 0, 0, 0, 20, 10)
                                : st(i, 10, 0, 0, 0, 0, 10);
            td_metrics_step(m, &t);
        }
        json_t *w = td_metrics_window_json(m);
        ck_assert_double_lt(jnum(w, "checkpoint_ratio"), 0.05);
        ck_assert_int_eq((int)jnum(w, "checkpoint_outlier_steps"), outliers);
        ck_assert_str_eq(jstr(w, "raw_verdict"), outliers > 10
                                                     ? "checkpoint_stall"
                                                     : "compute_bound");
        json_decref(w);
        td_metrics_destroy(m);
    }
}
END_TEST

START_TEST(test_verdict_input_bound)
{
    expect_raw(one_window(10, 100, 25, 0, 0, 75), "input_bound", "high");
    expect_raw(one_window(10, 100, 10, 0, 0, 90), "input_bound", "moderate");
    expect_raw(one_window(10, 100, 19.9, 0, 0, 80), "input_bound",
               "moderate");
}
END_TEST

START_TEST(test_verdict_h2d_bound)
{
    expect_raw(one_window(10, 100, 1, 25, 0, 74), "h2d_bound", "high");
    expect_raw(one_window(10, 100, 0.5, 6, 0, 93), "h2d_bound", "moderate");
    /* h2d is 80% of the input wait: plain input_bound */
    expect_raw(one_window(10, 100, 5, 20, 0, 75), "input_bound", "high");
}
END_TEST

START_TEST(test_verdict_host_bound)
{
    expect_raw(one_window(10, 100, 0, 0, 0, 60), "host_bound", "high");
    expect_raw(one_window(10, 100, 0, 0, 0, 90), "host_bound", "moderate");
}
END_TEST

START_TEST(test_verdict_compute_bound)
{
    expect_raw(one_window(10, 100, 0, 0, 0, 98), "compute_bound", NULL);
}
END_TEST

/* compute_bound's advice names mixed precision only where it would help:
 * not for a job in bf16 or fp16 already, nor on a device where fp32 is
 * the fastest precision (a CPU without bf16); other verdicts' advice does
 * not depend on it. */
START_TEST(test_compute_bound_advice_by_precision)
{
    const char *said[3];
    for (int p = TD_ADVICE_MIXED; p <= TD_ADVICE_NO_FASTER; p++) {
        td_metrics *m;
        td_metrics_config cfg = {0, 10, 0, (enum td_precision_advice)p};
        ck_assert_int_eq(td_metrics_create(&m, &cfg), 0);
        for (int i = 0; i < 10; i++) {
            td_step_times t = st(i, 100, 0, 0, 0, 0, 98);
            td_metrics_step(m, &t);
        }
        json_t *w = td_metrics_window_json(m);
        ck_assert_str_eq(jstr(w, "verdict"), "compute_bound");
        said[p] = strdup(jstr(w, "advice"));
        ck_assert_str_eq(said[p], td_verdict_advice_for(
            TD_VERDICT_COMPUTE_BOUND, TD_SEV_NONE,
            (enum td_precision_advice)p));
        json_decref(w);
        td_metrics_destroy(m);
    }
    ck_assert_ptr_nonnull(strstr(said[TD_ADVICE_MIXED], "mixed precision "
                                 "(\"precision\": \"bf16\""));
    ck_assert_ptr_nonnull(strstr(said[TD_ADVICE_IN_USE], "in mixed "
                                 "precision already"));
    ck_assert_ptr_null(strstr(said[TD_ADVICE_IN_USE], "bf16"));
    ck_assert_ptr_nonnull(strstr(said[TD_ADVICE_NO_FASTER], "no precision "
                                 "faster than fp32"));
    ck_assert_ptr_null(strstr(said[TD_ADVICE_NO_FASTER], "mixed"));
    for (int p = 0; p < 3; p++)
        free((void *)said[p]);
    ck_assert_str_eq(td_verdict_advice_for(TD_VERDICT_INPUT_BOUND,
                                           TD_SEV_HIGH, TD_ADVICE_NO_FASTER),
                     td_verdict_advice(TD_VERDICT_INPUT_BOUND, TD_SEV_HIGH));
}
END_TEST

START_TEST(test_verdict_unattributed_idle)
{
    /* 6% idle, 4% of it input wait (below 5%), 2% unexplained (below 3%) */
    expect_raw(one_window(10, 100, 4, 0, 0, 94), "unattributed_idle", NULL);
}
END_TEST

START_TEST(test_verdict_undetermined_without_device_times)
{
    json_t *w = one_window(10, 100, 0, 0, 0, -1);
    ck_assert(json_is_null(json_object_get(w, "device_idle_ratio")));
    ck_assert(json_is_false(json_object_get(w, "device_times_complete")));
    expect_raw(w, "undetermined", NULL);
}
END_TEST

/* Feeds one window of a given kind; returns the reported verdict. */
static const char *feed(td_metrics *m, int64_t *step, int input_bound)
{
    static char out[64];
    for (int i = 0; i < 10; i++) {
        td_step_times t = input_bound ? st(*step, 100, 30, 0, 0, 0, 70)
                                      : st(*step, 100, 0, 0, 0, 0, 99);
        (*step)++;
        td_metrics_step(m, &t);
    }
    td_metrics_counters c;
    td_metrics_get_counters(m, &c);
    snprintf(out, sizeof out, "%s", td_verdict_name(c.verdict));
    return out;
}

START_TEST(test_hysteresis_two_windows)
{
    td_metrics *m = mk(0, 10, 0);
    int64_t step = 0;
    ck_assert_str_eq(feed(m, &step, 0), "compute_bound"); /* first: taken */
    ck_assert_str_eq(feed(m, &step, 1), "compute_bound"); /* one says input */
    json_t *w = td_metrics_window_json(m);
    ck_assert_str_eq(jstr(w, "raw_verdict"), "input_bound");
    ck_assert_str_eq(jstr(w, "verdict"), "compute_bound");
    json_decref(w);
    ck_assert_str_eq(feed(m, &step, 0), "compute_bound");
    ck_assert_str_eq(feed(m, &step, 1), "compute_bound"); /* not consecutive */
    ck_assert_str_eq(feed(m, &step, 1), "input_bound");   /* two agree */
    w = td_metrics_window_json(m);
    ck_assert_str_eq(jstr(w, "severity"), "high");
    ck_assert_str_eq(jstr(w, "advice"),
                     td_verdict_advice(TD_VERDICT_INPUT_BOUND, TD_SEV_HIGH));
    json_decref(w);
    ck_assert_str_eq(feed(m, &step, 0), "input_bound");
    ck_assert_str_eq(feed(m, &step, 0), "compute_bound");
    td_metrics_destroy(m);
}
END_TEST

START_TEST(test_late_device_times)
{
    td_metrics *m = mk(0, 10, 8);
    for (int i = 0; i < 10; i++) {
        td_step_times t = st(i, 10, 0, 0, 0, 0, -1);
        ck_assert_int_eq(td_metrics_step(m, &t), 0);
    }
    ck_assert_ptr_null(td_metrics_window_json(m)); /* waits for the device */
    td_step_times t = st(10, 10, 0, 0, 0, 0, -1);
    ck_assert_int_eq(td_metrics_step(m, &t), 0);
    for (int i = 0; i < 9; i++)
        ck_assert_int_eq(td_metrics_device(m, i, 9 * MS, 0), 0);
    ck_assert_int_eq(td_metrics_device(m, 10, 9 * MS, 0), 0); /* next window */
    ck_assert_int_eq(td_metrics_device(m, 9, 9 * MS, 0), 1);  /* completes */
    json_t *w = td_metrics_window_json(m);
    ck_assert(json_is_true(json_object_get(w, "device_times_complete")));
    ck_assert_double_eq_tol(jnum(w, "device_idle_ratio"), 0.1, 1e-9);
    ck_assert_str_eq(jstr(w, "raw_verdict"), "host_bound");
    json_decref(w);
    td_metrics_destroy(m);
}
END_TEST

START_TEST(test_overdue_device_times)
{
    td_metrics *m = mk(0, 10, 3);
    td_metrics_counters c;
    int closed = 0;
    for (int i = 0; i < 13; i++) {
        td_step_times t = st(i, 10, 0, 0, 0, 0, -1);
        closed += td_metrics_step(m, &t);
        if (i == 11)
            ck_assert_int_eq(closed, 0); /* 2 steps late: still waits */
    }
    ck_assert_int_eq(closed, 1); /* 3 steps late: closed without them */
    ck_assert_int_eq(td_metrics_device(m, 2, 9 * MS, 0), 0);
    td_metrics_get_counters(m, &c);
    ck_assert_uint_eq(c.late_device_reports, 1);
    ck_assert_double_eq_tol(c.device_busy_seconds_total, 0.009, 1e-12);
    ck_assert_int_eq(c.verdict, TD_VERDICT_UNDETERMINED);
    td_metrics_destroy(m);
}
END_TEST

START_TEST(test_errors)
{
    td_metrics *m;
    td_metrics_config bad = {20, 0, 8, TD_ADVICE_MIXED};
    ck_assert_int_eq(td_metrics_create(&m, &bad), -EINVAL);
    bad.window_steps = 10;
    bad.warmup_steps = -1;
    ck_assert_int_eq(td_metrics_create(&m, &bad), -EINVAL);
    bad.warmup_steps = 0;
    bad.precision = (enum td_precision_advice)3;
    ck_assert_int_eq(td_metrics_create(&m, &bad), -EINVAL);
    m = mk(0, 10, 2);
    td_step_times t = st(5, 10, -1, 0, 0, 0, 1);
    ck_assert_int_eq(td_metrics_step(m, &t), -EINVAL);
    t = st(5, 10, 0, 0, 0, 0, -1);
    ck_assert_int_eq(td_metrics_step(m, &t), 0);
    t.step = 7; /* skips 6 */
    ck_assert_int_eq(td_metrics_step(m, &t), -EINVAL);
    ck_assert_int_eq(td_metrics_device(m, 6, MS, 0), -EINVAL); /* future */
    ck_assert_int_eq(td_metrics_device(m, 4, MS, 0), -EINVAL); /* before */
    ck_assert_int_eq(td_metrics_device(m, 5, -1, 0), -EINVAL);
    ck_assert_int_eq(td_metrics_device(m, 5, MS, 0), 0);
    ck_assert_int_eq(td_metrics_device(m, 5, MS, 0), -EINVAL); /* twice */
    td_metrics_counters c;
    td_metrics_get_counters(m, &c);
    ck_assert_uint_eq(c.steps_total, 1); /* rejected steps left no trace */
    td_metrics_destroy(m);
}
END_TEST

START_TEST(test_epochs)
{
    td_metrics *m = mk(2, 10, 0);
    for (int i = 0; i < 12; i++) {
        td_step_times t = st(i, 20, 5, 0, 0, 0, 10);
        td_metrics_step(m, &t);
    }
    json_t *e = td_metrics_end_epoch(m);
    ck_assert_int_eq((int)jnum(e, "epoch"), 0);
    ck_assert_int_eq((int)jnum(e, "steps"), 10); /* warm-up excluded */
    ck_assert_int_eq((int)jnum(e, "samples"), 320);
    ck_assert_double_eq_tol(jnum(e, "samples_per_s"), 1600, 1e-6);
    ck_assert_double_eq_tol(jnum(e, "input_wait_ratio"), 0.25, 1e-9);
    ck_assert_double_eq_tol(jnum(e, "device_idle_ratio"), 0.5, 1e-9);
    ck_assert_str_eq(jstr(e, "verdict"), "input_bound");
    json_decref(e);
    for (int i = 12; i < 17; i++) {
        td_step_times t = st(i, 10, 0, 0, 0, 0, 10);
        t.epoch = 1;
        td_metrics_step(m, &t);
    }
    e = td_metrics_end_epoch(m);
    ck_assert_int_eq((int)jnum(e, "epoch"), 1);
    ck_assert_int_eq((int)jnum(e, "steps"), 5);
    ck_assert_double_eq_tol(jnum(e, "samples_per_s"), 3200, 1e-6);
    json_decref(e);
    td_metrics_destroy(m);
}
END_TEST

/* An epoch wholly inside the warm-up (16 steps of batch 64 with 20
 * warm-up steps; or the rest of an epoch after a resume) measured no
 * step: its throughput and input wait are unknown, null as the idle
 * ratio, not 0 (trainctl history printed 0.0 samples/s and 0.0% wait). */
START_TEST(test_epoch_in_warmup)
{
    td_metrics *m = mk(20, 100, 0);
    for (int i = 0; i < 16; i++) {
        td_step_times t = st(i, 20, 5, 0, 0, 0, 10);
        td_metrics_step(m, &t);
    }
    json_t *e = td_metrics_end_epoch(m);
    ck_assert_int_eq((int)jnum(e, "steps"), 0);
    ck_assert(json_is_null(json_object_get(e, "samples_per_s")));
    ck_assert(json_is_null(json_object_get(e, "input_wait_ratio")));
    ck_assert(json_is_null(json_object_get(e, "device_idle_ratio")));
    json_decref(e);
    for (int i = 16; i < 32; i++) { /* 4 of warm-up, 12 measured */
        td_step_times t = st(i, 20, 5, 0, 0, 0, 10);
        t.epoch = 1;
        td_metrics_step(m, &t);
    }
    e = td_metrics_end_epoch(m);
    ck_assert_int_eq((int)jnum(e, "steps"), 12);
    ck_assert_double_eq_tol(jnum(e, "samples_per_s"), 1600, 1e-6);
    ck_assert_double_eq_tol(jnum(e, "input_wait_ratio"), 0.25, 1e-9);
    json_decref(e);
    td_metrics_destroy(m);
}
END_TEST

START_TEST(test_step_json)
{
    td_metrics *m = mk(0, 10, 0);
    td_step_times t = st(3, 50, 10, 0, 0, 0, 40);
    t.epoch = 2;
    t.loss = 0.25;
    td_metrics_step(m, &t);
    json_t *j = td_metrics_step_json(m);
    ck_assert_int_eq((int)jnum(j, "step"), 3);
    ck_assert_int_eq((int)jnum(j, "epoch"), 2);
    ck_assert_double_eq_tol(jnum(j, "loss"), 0.25, 1e-12);
    ck_assert_double_eq_tol(jnum(j, "step_s"), 0.05, 1e-12);
    ck_assert_double_eq_tol(jnum(j, "samples_per_s"), 640, 1e-9);
    ck_assert_double_eq_tol(jnum(j, "device_busy_s"), 0.04, 1e-12);
    json_decref(j);
    t = st(4, 50, 10, 0, 0, 0, -1); /* no loss, no device time */
    td_metrics_step(m, &t);
    j = td_metrics_step_json(m);
    ck_assert_ptr_null(json_object_get(j, "loss"));
    ck_assert_ptr_null(json_object_get(j, "device_busy_s"));
    json_decref(j);
    td_metrics_destroy(m);
}
END_TEST

START_TEST(test_prometheus)
{
    char buf[4096], small[64];
    td_metrics *m = mk(0, 10, 0);
    for (int i = 0; i < 10; i++) {
        td_step_times t = st(i, 100, 30, 0, 0, 1, 69);
        td_metrics_step(m, &t);
    }
    int n = td_metrics_prometheus(m, 7, buf, sizeof buf);
    ck_assert_int_gt(n, 0);
    ck_assert_int_eq(n, (int)strlen(buf));
    ck_assert_ptr_nonnull(strstr(buf, "traind_samples_total{job=\"7\"} 320\n"));
    ck_assert_ptr_nonnull(strstr(buf, "traind_steps_total{job=\"7\"} 10\n"));
    ck_assert_ptr_nonnull(strstr(buf, "traind_step_phase_seconds_total{job="
                                      "\"7\",phase=\"data_wait\"} 0.3\n"));
    ck_assert_ptr_nonnull(strstr(buf, "traind_checkpoint_stall_seconds_total"
                                      "{job=\"7\"} 0.01\n"));
    ck_assert_ptr_nonnull(strstr(buf, "traind_step_duration_seconds_count"
                                      "{job=\"7\"} 10\n"));
    ck_assert_ptr_nonnull(strstr(buf, "traind_device_idle_ratio{job=\"7\"} "
                                      "0.31"));
    ck_assert_ptr_nonnull(strstr(buf, "traind_bottleneck_info{job=\"7\","
                                      "verdict=\"input_bound\","
                                      "severity=\"high\"} 1\n"));
    ck_assert_int_eq(td_metrics_prometheus(m, 7, small, sizeof small),
                     -ENOSPC);
    td_metrics_destroy(m);
}
END_TEST

START_TEST(test_names_and_thresholds)
{
    const td_metrics_thresholds *th = td_metrics_get_thresholds();
    ck_assert_double_eq(th->checkpoint_ratio, 0.05);
    ck_assert_double_eq(th->input_high, 0.20);
    ck_assert_double_eq(th->input_moderate, 0.05);
    ck_assert_double_eq(th->h2d_share, 0.90);
    ck_assert_double_eq(th->host_high, 0.15);
    ck_assert_double_eq(th->host_moderate, 0.03);
    ck_assert_double_eq(th->compute_idle, 0.05);
    ck_assert_int_eq(th->checkpoint_outliers, 10);
    for (int v = 0; v < TD_VERDICT_COUNT; v++) {
        ck_assert_str_ne(td_verdict_name((enum td_verdict)v), "?");
        ck_assert_int_gt(strlen(td_verdict_advice((enum td_verdict)v,
                                                  TD_SEV_HIGH)), 10);
    }
    ck_assert_str_eq(td_phase_name(TD_PHASE_DATA_WAIT), "data_wait");
    ck_assert_str_ne(td_verdict_advice(TD_VERDICT_INPUT_BOUND, TD_SEV_HIGH),
                     td_verdict_advice(TD_VERDICT_INPUT_BOUND,
                                       TD_SEV_MODERATE));
}
END_TEST

static Suite *metrics_suite(void)
{
    Suite *s = suite_create("metrics");
    TCase *tc = tcase_create("metrics");
    tcase_add_test(tc, test_attribution_priority);
    tcase_add_test(tc, test_attribution_sums_exactly);
    tcase_add_test(tc, test_warmup_excluded);
    tcase_add_test(tc, test_window_maths);
    tcase_add_test(tc, test_verdict_checkpoint_stall);
    tcase_add_test(tc, test_verdict_checkpoint_outliers);
    tcase_add_test(tc, test_verdict_input_bound);
    tcase_add_test(tc, test_verdict_h2d_bound);
    tcase_add_test(tc, test_verdict_host_bound);
    tcase_add_test(tc, test_verdict_compute_bound);
    tcase_add_test(tc, test_compute_bound_advice_by_precision);
    tcase_add_test(tc, test_verdict_unattributed_idle);
    tcase_add_test(tc, test_verdict_undetermined_without_device_times);
    tcase_add_test(tc, test_hysteresis_two_windows);
    tcase_add_test(tc, test_late_device_times);
    tcase_add_test(tc, test_overdue_device_times);
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_epochs);
    tcase_add_test(tc, test_epoch_in_warmup);
    tcase_add_test(tc, test_step_json);
    tcase_add_test(tc, test_prometheus);
    tcase_add_test(tc, test_names_and_thresholds);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(metrics_suite)
