/* test_trace.c - the timeline recorder: arming, zero recording when off,
 * overflow, step layout, device tracks, the Chrome trace JSON, and
 * concurrent appenders. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "job/runner.h"
#include "obs/trace.h"
#include "obs_check.h"
#include "tdtest.h"

static td_trace *mk(size_t cap)
{
    td_trace *t = NULL;
    ck_assert_int_eq(td_trace_create(&t, cap), 0);
    return t;
}

START_TEST(test_create_rejects_tiny_cap)
{
    td_trace *t = (td_trace *)1;
    ck_assert_int_eq(td_trace_create(&t, 8), -EINVAL);
    ck_assert_ptr_null(t);
}
END_TEST

START_TEST(test_off_records_nothing)
{
    td_trace *t = mk(64);
    ck_assert(!td_trace_on(t));
    ck_assert(!td_trace_on(NULL));
    td_trace_slice(t, TD_TRACK_TRAINER, "x", 0, 10, 1);
    td_trace_counter(t, "c", 5, 1.0);
    td_trace_instant(t, TD_TRACK_TRAINER, "i", 5, NULL, -1);
    ck_assert_int_eq(td_trace_arm(t), 0);
    ck_assert(td_trace_on(t));
    ck_assert_uint_eq(td_trace_count(t), 0);
    td_trace_disarm(t);
    td_trace_slice(t, TD_TRACK_TRAINER, "after", 0, 10, 1);
    ck_assert_uint_eq(td_trace_count(t), 0);
    td_trace_free(t);
}
END_TEST

START_TEST(test_arm_twice_is_busy_and_rearm_clears)
{
    td_trace *t = mk(64);
    ck_assert_int_eq(td_trace_arm(t), 0);
    ck_assert_int_eq(td_trace_arm(t), -EBUSY);
    td_trace_slice(t, TD_TRACK_TRAINER, "a", 0, 10, 1);
    td_trace_disarm(t);
    ck_assert_uint_eq(td_trace_count(t), 1);
    ck_assert_int_eq(td_trace_arm(t), 0);
    td_trace_disarm(t);
    ck_assert_uint_eq(td_trace_count(t), 0);
    td_trace_free(t);
}
END_TEST

START_TEST(test_full_buffer_drops_and_counts)
{
    td_trace *t = mk(16);
    ck_assert_int_eq(td_trace_arm(t), 0);
    for (int i = 0; i < 20; i++)
        td_trace_slice(t, TD_TRACK_TRAINER, "s", i * 10, i * 10 + 5, i);
    td_trace_disarm(t);
    ck_assert_uint_eq(td_trace_count(t), 16);
    ck_assert_uint_eq(td_trace_dropped(t), 4);
    json_t *j = td_trace_json(t, "p", 1, 0);
    ck_assert_int_eq(json_integer_value(json_object_get(
                         json_object_get(j, "otherData"), "dropped")), 4);
    json_decref(j);
    td_trace_free(t);
}
END_TEST

/* The X slices of track tid, in order, as (name, ts, dur). */
static json_t *slices(json_t *tr, int tid)
{
    json_t *out = json_array(), *e;
    size_t i;
    json_array_foreach(json_object_get(tr, "traceEvents"), i, e)
        if (strcmp(json_string_value(json_object_get(e, "ph")), "X") == 0 &&
            json_integer_value(json_object_get(e, "tid")) == tid)
            json_array_append(out, e);
    return out;
}

static const char *nm(json_t *a, size_t i)
{
    return json_string_value(json_object_get(json_array_get(a, i), "name"));
}

static double num(json_t *a, size_t i, const char *k)
{
    return json_number_value(json_object_get(json_array_get(a, i), k));
}

START_TEST(test_step_phases_in_order_and_sum_to_the_step)
{
    td_trace *t = mk(64);
    ck_assert_int_eq(td_trace_arm(t), 0);
    td_trace_step s = {.step = 7, .start_ns = 1000000, .step_ns = 100000,
                       .data_wait_ns = 10000, .h2d_ns = 5000,
                       .compute_ns = 60000, .d2h_ns = 2000,
                       .checkpoint_ns = 3000, .copy_ns = 4000};
    td_trace_add_step(t, &s);
    td_trace_disarm(t);
    json_t *tr = td_trace_json(t, "p", 1, 1000000);
    json_t *a = slices(tr, TD_TRACK_TRAINER);
    /* the checkpoint the step pays for was taken at the boundary before
     * it, which its wall time starts with */
    const char *want[] = {"checkpoint", "data_wait", "h2d", "compute", "d2h",
                          "other"};
    double dur[] = {3, 10, 5, 60, 2, 20}, at = 0;
    ck_assert_uint_eq(json_array_size(a), 6);
    for (size_t i = 0; i < 6; i++) {
        ck_assert_str_eq(nm(a, i), want[i]);
        ck_assert_double_eq_tol(num(a, i, "ts"), at, 1e-6);
        ck_assert_double_eq_tol(num(a, i, "dur"), dur[i], 1e-6);
        at += dur[i];
    }
    json_t *st = slices(tr, TD_TRACK_STEPS);
    ck_assert_uint_eq(json_array_size(st), 1);
    ck_assert_double_eq_tol(num(st, 0, "dur"), 100, 1e-6);
    int n = 0;
    char err[256];
    ck_assert_msg(oc_trace_phases_check(tr, 1e-3, &n, err, sizeof err) == 0,
                  "%s", err);
    ck_assert_int_eq(n, 1);
    json_decref(a);
    json_decref(st);
    json_decref(tr);
    td_trace_free(t);
}
END_TEST

/* A GPU step's device compute may outlast its host step: host phases are
 * granted by priority and never exceed the step. */
START_TEST(test_step_phases_clamped_by_priority)
{
    td_trace *t = mk(64);
    ck_assert_int_eq(td_trace_arm(t), 0);
    td_trace_step s = {.step = 0, .start_ns = 0, .step_ns = 100,
                       .data_wait_ns = 50, .h2d_ns = 40, .compute_ns = 500,
                       .d2h_ns = 5, .checkpoint_ns = 30};
    td_trace_add_step(t, &s);
    td_trace_disarm(t);
    json_t *tr = td_trace_json(t, "p", 1, 0);
    json_t *a = slices(tr, TD_TRACK_TRAINER);
    /* checkpoint 30, data_wait 50, h2d 20; nothing left for the rest */
    ck_assert_uint_eq(json_array_size(a), 3);
    ck_assert_str_eq(nm(a, 0), "checkpoint");
    ck_assert_double_eq_tol(num(a, 0, "dur"), 0.030, 1e-9);
    ck_assert_str_eq(nm(a, 1), "data_wait");
    ck_assert_double_eq_tol(num(a, 1, "ts"), 0.030, 1e-9);
    ck_assert_double_eq_tol(num(a, 1, "dur"), 0.050, 1e-9);
    ck_assert_str_eq(nm(a, 2), "h2d");
    ck_assert_double_eq_tol(num(a, 2, "dur"), 0.020, 1e-9);
    /* the device track keeps the device's own time */
    json_t *dev = slices(tr, TD_TRACK_DEV_COMPUTE);
    ck_assert_double_eq_tol(num(dev, 0, "dur"), 0.500, 1e-9);
    json_decref(dev);
    json_decref(a);
    json_decref(tr);
    td_trace_free(t);
}
END_TEST

START_TEST(test_device_slices_never_overlap)
{
    td_trace *t = mk(64);
    char err[256];
    ck_assert_int_eq(td_trace_arm(t), 0);
    for (int k = 0; k < 3; k++) { /* device busier than the host steps */
        td_trace_step s = {.step = k, .start_ns = k * 100, .step_ns = 100,
                           .h2d_ns = 10, .compute_ns = 250, .copy_ns = 150};
        td_trace_add_step(t, &s);
    }
    td_trace_disarm(t);
    json_t *tr = td_trace_json(t, "p", 1, 0);
    ck_assert_msg(oc_trace_check(tr, 1e-6, err, sizeof err) == 0, "%s", err);
    json_t *dev = slices(tr, TD_TRACK_DEV_COMPUTE);
    ck_assert_uint_eq(json_array_size(dev), 3);
    ck_assert_double_eq_tol(num(dev, 1, "ts"), 0.250 + 0.010, 1e-9);
    ck_assert_double_eq_tol(num(dev, 2, "ts"), 0.510, 1e-9);
    json_decref(dev);
    json_decref(tr);
    td_trace_free(t);
}
END_TEST

START_TEST(test_json_has_metadata_and_required_fields)
{
    td_trace *t = mk(64);
    char err[256];
    ck_assert_int_eq(td_trace_arm(t), 0);
    td_trace_slice(t, TD_TRACK_WORKER0 + 1, "decode", 2000, 5000, -1);
    td_trace_counter(t, "ready_batches", 3000, 2);
    td_trace_instant(t, TD_TRACK_WRITER, "checkpoint written", 4000, NULL, 9);
    td_trace_disarm(t);
    json_t *tr = td_trace_json(t, "traind job 3", 3, 1000);
    ck_assert_msg(oc_trace_check(tr, 1e-6, err, sizeof err) == 0, "%s", err);
    json_t *evs = json_object_get(tr, "traceEvents"), *e;
    size_t i;
    int procname = 0, worker = 0, writer = 0, x = 0, c = 0, in = 0;
    json_array_foreach(evs, i, e) {
        const char *ph = json_string_value(json_object_get(e, "ph"));
        const char *n = json_string_value(json_object_get(e, "name"));
        const char *an = json_string_value(json_object_get(
            json_object_get(e, "args"), "name"));
        ck_assert_int_eq(json_integer_value(json_object_get(e, "pid")), 3);
        if (strcmp(ph, "M") == 0 && strcmp(n, "process_name") == 0)
            procname += strcmp(an, "traind job 3") == 0;
        if (strcmp(ph, "M") == 0 && strcmp(n, "thread_name") == 0) {
            worker += strcmp(an, "decode 1") == 0;
            writer += strcmp(an, "checkpoint writer") == 0;
        }
        if (strcmp(ph, "X") == 0) {
            x++;
            ck_assert_double_eq_tol(
                json_number_value(json_object_get(e, "ts")), 1.0, 1e-9);
            ck_assert_double_eq_tol(
                json_number_value(json_object_get(e, "dur")), 3.0, 1e-9);
        }
        if (strcmp(ph, "C") == 0)
            c += json_number_value(json_object_get(
                     json_object_get(e, "args"), "value")) == 2;
        if (strcmp(ph, "i") == 0)
            in += json_integer_value(json_object_get(
                      json_object_get(e, "args"), "step")) == 9;
    }
    ck_assert_int_eq(procname, 1);
    ck_assert_int_eq(worker, 1);
    ck_assert_int_eq(writer, 1);
    ck_assert_int_eq(x, 1);
    ck_assert_int_eq(c, 1);
    ck_assert_int_eq(in, 1);
    json_decref(tr);
    td_trace_free(t);
}
END_TEST

START_TEST(test_checker_catches_overlap)
{
    json_t *tr = json_pack(
        "{s:[{s:s,s:s,s:i,s:i,s:f,s:f},{s:s,s:s,s:i,s:i,s:f,s:f}]}",
        "traceEvents", "name", "a", "ph", "X", "pid", 1, "tid", 0, "ts", 0.0,
        "dur", 10.0, "name", "b", "ph", "X", "pid", 1, "tid", 0, "ts", 5.0,
        "dur", 1.0);
    char err[256];
    ck_assert_int_eq(oc_trace_check(tr, 0, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "overlaps"));
    json_decref(tr);
}
END_TEST

/* ---- threads ---------------------------------------------------------- */

enum { NTH = 4, PER = 2000 };

typedef struct {
    td_trace *t;
    int id;
} arg_t;

static void *appender(void *p)
{
    arg_t *a = p;
    for (int i = 0; i < PER; i++)
        td_trace_slice(a->t, TD_TRACK_WORKER0 + a->id, "work", i * 10,
                       i * 10 + 9, i);
    return NULL;
}

START_TEST(test_concurrent_appenders_keep_every_event)
{
    td_trace *t = mk(NTH * PER);
    pthread_t th[NTH];
    arg_t a[NTH];
    char err[256];
    ck_assert_int_eq(td_trace_arm(t), 0);
    for (int i = 0; i < NTH; i++) {
        a[i] = (arg_t){t, i};
        ck_assert_int_eq(pthread_create(&th[i], NULL, appender, &a[i]), 0);
    }
    for (int i = 0; i < NTH; i++)
        pthread_join(th[i], NULL);
    td_trace_disarm(t);
    ck_assert_uint_eq(td_trace_count(t), NTH * PER);
    ck_assert_uint_eq(td_trace_dropped(t), 0);
    json_t *tr = td_trace_json(t, "p", 1, 0);
    ck_assert_msg(oc_trace_check(tr, 1e-6, err, sizeof err) == 0, "%s", err);
    json_decref(tr);
    td_trace_free(t);
}
END_TEST

/* Disarming while threads append: every event kept is whole. */
START_TEST(test_disarm_during_appends_keeps_whole_events)
{
    td_trace *t = mk(NTH * PER);
    pthread_t th[NTH];
    arg_t a[NTH];
    char err[256];
    ck_assert_int_eq(td_trace_arm(t), 0);
    for (int i = 0; i < NTH; i++) {
        a[i] = (arg_t){t, i};
        ck_assert_int_eq(pthread_create(&th[i], NULL, appender, &a[i]), 0);
    }
    td_trace_disarm(t);
    json_t *tr = td_trace_json(t, "p", 1, 0);
    ck_assert_msg(oc_trace_check(tr, 1e-6, err, sizeof err) == 0, "%s", err);
    json_decref(tr);
    for (int i = 0; i < NTH; i++)
        pthread_join(th[i], NULL);
    td_trace_free(t);
}
END_TEST

/* ---- through the runner ----------------------------------------------- */

typedef struct {
    json_t *trace; /* the "trace" event's payload */
    int traces;
    /* the first trace's "trace_progress" events: steps recorded */
    long long progress[64];
    int nprogress, bad_requested;
} seen_t;

static void on_event(void *user, const char *kind, json_t *data)
{
    seen_t *s = user;
    if (strcmp(kind, "trace_progress") == 0 && s->traces == 0) {
        if (s->nprogress < 64)
            s->progress[s->nprogress++] =
                json_integer_value(json_object_get(data, "steps"));
        s->bad_requested |= json_integer_value(json_object_get(
                                data, "requested")) != 12;
    }
    if (strcmp(kind, "trace") == 0) {
        s->traces++;
        json_decref(s->trace);
        s->trace = data;
        return;
    }
    json_decref(data);
}

static int has(json_t *tr, const char *ph, const char *name, long tid)
{
    json_t *e;
    size_t i;
    int n = 0;
    json_array_foreach(json_object_get(tr, "traceEvents"), i, e) n +=
        strcmp(json_string_value(json_object_get(e, "ph")), ph) == 0 &&
        strcmp(json_string_value(json_object_get(e, "name")), name) == 0 &&
        (tid < 0 || json_integer_value(json_object_get(e, "tid")) == tid);
    return n;
}

/* A synthetic job of 40 steps with checkpoints every 4 steps: a trace of
 * 12 steps comes once, whole, with the trainer's phases and the device
 * tracks, after its progress events; a trace the job outlives comes at its end, with the checkpoint
 * writer's slices. */
START_TEST(test_runner_trace_with_checkpoints)
{
    char dir[] = "/tmp/td_trace_run_XXXXXX", err[512];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    json_t *js = json_pack(
        "{s:s, s:{s:i}, s:{s:[i,i], s:i, s:s, s:{s:[f], s:[f]}},"
        " s:{s:[{s:s, s:s, s:i, s:i, s:i}, {s:s, s:s}, {s:s, s:s},"
        "       {s:s, s:s, s:s}]},"
        " s:{s:s, s:f, s:f}, s:i, s:i, s:i, s:i, s:{s:i, s:i},"
        " s:{s:i, s:i}}",
        "name", "t", "data", "classes", 4, "input", "size", 8, 8, "channels",
        1, "source", "synthetic", "normalize", "mean", 0.5, "std", 0.25,
        "model", "layers", "type", "conv2d", "name", "c1", "channels", 4,
        "kernel", 3, "pad", 1, "type", "relu", "name", "r1", "type",
        "flatten", "name", "f", "type", "dense", "name", "fc", "units",
        "classes", "optimizer", "type", "sgd", "lr", 0.01, "momentum", 0.9,
        "batch_size", 8,
        "epochs", 1, "seed", 1, "threads", 1, "metrics", "warmup_steps", 0,
        "window_steps", 4, "checkpoint", "every_steps", 4, "keep", 2);
    td_job_spec spec;
    ck_assert_msg(td_spec_parse(js, NULL, &spec, err, sizeof err) == 0, "%s",
                  err);
    json_decref(js);
    seen_t seen = {0};
    td_runner_opts o = {.spec = &spec, .ckpt_dir = dir, .synthetic_steps = 40,
                        .event = on_event, .user = &seen};
    td_runner *r;
    td_runner_result res;
    ck_assert_msg(td_runner_create(&o, &r, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(td_runner_trace(r, 0), -EINVAL);
    ck_assert_int_eq(td_runner_trace(r, 12), 0);
    ck_assert_int_eq(td_runner_trace(r, 5), -EBUSY);
    ck_assert_int_eq(td_runner_run(r, &res, err, sizeof err), 0);
    td_runner_free(r);
    ck_assert_int_eq(seen.traces, 1);
    /* its progress: 0 when armed, then at each tenth (and every 100 ms),
     * rising, below the 12 requested (the trace itself says 12) */
    ck_assert_int_ge(seen.nprogress, 10);
    ck_assert_int_eq(seen.progress[0], 0);
    for (int i = 1; i < seen.nprogress; i++)
        ck_assert_int_gt(seen.progress[i], seen.progress[i - 1]);
    ck_assert_int_eq(seen.progress[seen.nprogress - 1], 11);
    ck_assert_int_eq(seen.bad_requested, 0);
    json_t *first = json_incref(seen.trace);
    o.resume = 0;
    ck_assert_msg(td_runner_create(&o, &r, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(td_runner_trace(r, 10000), 0);
    ck_assert_int_eq(td_runner_run(r, &res, err, sizeof err), 0);
    td_runner_free(r);
    ck_assert_int_eq(seen.traces, 2);
    json_t *last = seen.trace;
    seen.trace = first;
    ck_assert_int_eq(json_integer_value(json_object_get(seen.trace, "steps")),
                     12);
    ck_assert(json_is_true(json_object_get(seen.trace, "complete")));
    json_t *tr = json_object_get(seen.trace, "trace");
    int n = 0;
    ck_assert_msg(oc_trace_check(tr, 1e-3, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(oc_trace_phases_check(tr, 1.0, &n, err, sizeof err) == 0,
                  "%s", err);
    ck_assert_int_eq(n, 12);
    ck_assert_int_eq(has(tr, "X", "compute", TD_TRACK_DEV_COMPUTE), 12);
    ck_assert_int_ge(has(tr, "X", "checkpoint", TD_TRACK_TRAINER), 1);
    ck_assert_int_ge(has(tr, "i", "checkpoint taken", TD_TRACK_TRAINER), 1);
    ck_assert_int_ge(has(tr, "C", "device_idle_ratio", -1), 2);
    /* the job outlived the second trace: all of it, writes included */
    ck_assert(json_is_false(json_object_get(last, "complete")));
    ck_assert_int_eq(json_integer_value(json_object_get(last, "steps")), 40);
    tr = json_object_get(last, "trace");
    ck_assert_msg(oc_trace_check(tr, 1e-3, err, sizeof err) == 0, "%s", err);
    ck_assert_int_ge(has(tr, "X", "checkpoint write", TD_TRACK_WRITER), 1);
    ck_assert_int_ge(has(tr, "i", "checkpoint written", TD_TRACK_WRITER), 1);
    json_decref(last);
    json_decref(seen.trace);
    td_spec_free(&spec);
    char cmd[96];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

static Suite *trace_suite(void)
{
    Suite *s = suite_create("trace");
    TCase *tc = tcase_create("recorder");
    tcase_add_test(tc, test_create_rejects_tiny_cap);
    tcase_add_test(tc, test_off_records_nothing);
    tcase_add_test(tc, test_arm_twice_is_busy_and_rearm_clears);
    tcase_add_test(tc, test_full_buffer_drops_and_counts);
    tcase_add_test(tc, test_step_phases_in_order_and_sum_to_the_step);
    tcase_add_test(tc, test_step_phases_clamped_by_priority);
    tcase_add_test(tc, test_device_slices_never_overlap);
    tcase_add_test(tc, test_json_has_metadata_and_required_fields);
    tcase_add_test(tc, test_checker_catches_overlap);
    tcase_add_test(tc, test_concurrent_appenders_keep_every_event);
    tcase_add_test(tc, test_disarm_during_appends_keeps_whole_events);
    suite_add_tcase(s, tc);
    tc = tcase_create("runner");
    tcase_add_test(tc, test_runner_trace_with_checkpoints);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(trace_suite)
