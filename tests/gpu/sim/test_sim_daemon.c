/* test_sim_daemon.c - the daemon on simulated GPUs (issue 14): traind_sim
 * is traind linked with the CUDA backend on the simulated device, started
 * and driven over its socket like the live suites do.
 *   - a cuda:0 job end to end: step events with device times, windows
 *     with verdicts, checkpoints (into page-locked buffers: no copy from
 *     the device blocked the trainer), pause, resume, completion, cancel;
 *   - two devices: a cuda:1 job never touches device 0 (the simulator's
 *     per-device activity, written at exit through TD_SIM_REPORT);
 *   - out of memory at create fails the job clearly, the next job runs;
 *   - a sticky error from kernel N fails the job with a message that says
 *     the GPU is unusable, and the daemon exits with TD_EXIT_GPU_LOST (75)
 *     so that systemd restarts it (Restart=on-failure); the job queued
 *     behind it stays pending and completes after the restart;
 *   - a fine-tuning job on cuda:0 (freeze, freeze_bn_stats, lr_mult):
 *     its checkpoints hold the frozen tensors and statistics unchanged.
 * Each test starts its own daemon; the environment reaches it as well
 * (TD_SIM_RACE=strict from meson: any stream-order race aborts it). */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "daemon_harness.h"
#include "jpeggen.h"
#include "store/checkpoint.h"
#include "tdtest.h"

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* th_spec on a named device. */
static json_t *spec_on(const char *device, int epochs, int every)
{
    json_t *s = th_spec(epochs, every, 8, 4);
    json_object_set_new(s, "device", json_string(device));
    return s;
}

static void subscribe(int fd)
{
    json_t *r = th_request(fd, "subscribe",
                           json_pack("{s:i}", "every_steps", 1));
    ck_assert_ptr_nonnull(th_ok(r));
    json_decref(r);
}

static void request_ok(int fd, const char *cmd, int64_t job)
{
    json_t *r = th_job_request(fd, cmd, job);
    ck_assert_msg(th_ok(r) != NULL, "%s %lld refused", cmd, (long long)job);
    json_decref(r);
}

/* The job's `show` record (a new reference). */
static json_t *show(int fd, int64_t job)
{
    json_t *r = th_job_request(fd, "show", job);
    json_t *j = json_incref(json_object_get(th_ok(r), "job"));
    json_decref(r);
    ck_assert_ptr_nonnull(j);
    return j;
}

/* Waits up to timeout_ms for the daemon to exit on its own; its status. */
static int wait_exit(td_harness *h, int timeout_ms)
{
    int st;
    for (int t = 0; t < timeout_ms; t += 20) {
        if (waitpid(h->pid, &st, WNOHANG) == h->pid) {
            h->pid = 0;
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        }
        sleep_ms(20);
    }
    return -1;
}

/* TD_SIM_REPORT's line for device dev: calls, launches, peak bytes, and
 * device-to-host copies into pageable memory (they blocked the caller). */
static long g_pageable_d2h;

static int report(const char *path, int dev, long *calls, long *launches,
                  long *peak)
{
    FILE *f = fopen(path, "r");
    char line[256];
    int found = 0;
    if (!f)
        return 0;
    while (fgets(line, sizeof line, f)) {
        int d;
        long c, l, p, pg;
        if (sscanf(line, "device %d calls %ld launches %ld peak_bytes %ld "
                   "pageable_d2h %ld", &d, &c, &l, &p, &pg) == 5 &&
            d == dev) {
            *calls = c, *launches = l, *peak = p;
            g_pageable_d2h = pg;
            found = 1;
        }
    }
    fclose(f);
    return found;
}

/* TD_SIM_REPORT's host line: page-locking calls, ranges still locked. */
static int report_host(const char *path, long *locked, long *live)
{
    FILE *f = fopen(path, "r");
    char line[256];
    int found = 0;
    if (!f)
        return 0;
    while (fgets(line, sizeof line, f))
        found |= sscanf(line, "host page_locked %ld live %ld", locked,
                        live) == 2;
    fclose(f);
    return found;
}

/* A job reading JPEGs from an ImageFolder under dir (3 classes, 8 images
 * each for training, 2 for validation, 16x16): its batch slots are
 * page-locked (the pinned allocator) and its evaluation runs on the GPU. */
static json_t *files_spec(const char *dir, const char *device, int epochs)
{
    char train[160], val[160];
    snprintf(train, sizeof train, "%s/train", dir);
    snprintf(val, sizeof val, "%s/val", dir);
    td_test_make_folder(train, 3, 8, 16, 16);
    td_test_make_folder(val, 3, 2, 16, 16);
    json_t *spec = spec_on(device, epochs, 0);
    json_t *data = json_object_get(spec, "data");
    json_object_del(data, "classes");
    json_object_set_new(data, "train", json_string(train));
    json_object_set_new(data, "val", json_string(val));
    json_t *in = json_object_get(spec, "input");
    json_object_set_new(in, "source", json_string("files"));
    json_object_set_new(in, "size", json_pack("[i,i]", 16, 16));
    json_object_set_new(in, "channels", json_integer(3));
    json_object_set_new(in, "workers", json_integer(1));
    json_object_set_new(in, "normalize", json_pack("{s:[f,f,f], s:[f,f,f]}",
                                                   "mean", 0.5, 0.5, 0.5,
                                                   "std", 0.25, 0.25, 0.25));
    json_object_set_new(spec, "batch_size", json_integer(4));
    return spec;
}

/* Reads events until job's state is `state`; checks the step events on
 * the way (device time measured and within the step) and counts windows
 * with a verdict and successful checkpoints. */
typedef struct seen {
    int64_t last_step;
    int steps_timed, windows, checkpoints;
} seen;

static int follow(int fd, int64_t job, const char *state, int timeout_ms,
                  seen *s)
{
    json_t *log = json_array();
    json_t *end = th_wait_event(fd, "state", job, state, timeout_ms, log);
    size_t i;
    json_t *ev;
    json_array_foreach(log, i, ev) {
        const char *k = json_string_value(json_object_get(ev, "event"));
        json_t *d = json_object_get(ev, "data");
        if (json_integer_value(json_object_get(ev, "job")) != job)
            continue;
        if (strcmp(k, "step") == 0) {
            int64_t step = json_integer_value(json_object_get(d, "step"));
            ck_assert_int_gt(step, s->last_step);
            s->last_step = step;
            ck_assert(isfinite(json_number_value(json_object_get(d,
                                                                 "loss"))));
            json_t *busy = json_object_get(d, "device_busy_s");
            if (busy) {
                double b = json_number_value(busy);
                ck_assert_msg(b > 0 && b < 60, "device_busy_s %g", b);
                s->steps_timed++;
            }
        } else if (strcmp(k, "window") == 0) {
            const char *v = json_string_value(json_object_get(d, "verdict"));
            ck_assert_ptr_nonnull(v);
            s->windows++;
        } else if (strcmp(k, "checkpoint") == 0 &&
                   json_is_true(json_object_get(d, "ok"))) {
            s->checkpoints++;
        }
    }
    json_decref(log);
    json_decref(end);
    return end != NULL;
}

/* Starts traind with env (its second entry free), then restarts it with
 * TD_SIM_REPORT=<h->dir>/sim-report.txt there (the report goes into the
 * harness's folder, known only once it started); that path in rep. */
static void start_reporting(td_harness *h, const char **env, char *rep,
                            size_t n)
{
    static char report_env[160];
    ck_assert_int_eq(th_start_env(h, NULL, env), 0);
    snprintf(rep, n, "%s/sim-report.txt", h->dir);
    snprintf(report_env, sizeof report_env, "TD_SIM_REPORT=%s", rep);
    env[1] = report_env;
    ck_assert_int_eq(th_restart(h), 0);
}

START_TEST(test_cuda0_job_end_to_end)
{
    td_harness h;
    char rep[128];
    static const char *env[] = {"TD_SIM_DEVICES=1", NULL, NULL};
    start_reporting(&h, env, rep, sizeof rep);
    json_t *hello = NULL;
    int sub = th_connect(&h, &hello), fd = th_connect(&h, NULL);
    ck_assert_msg(strstr(json_string_value(json_object_get(json_object_get(
                      hello, "hello"), "device")), "simulated GPU 0"),
                  "the daemon does not see the simulated GPU");
    json_decref(hello);
    subscribe(sub);
    int64_t id = th_submit(fd, spec_on("cuda:0", 4, 50));
    seen s = {0};
    /* running: wait for some steps, then pause at a step boundary */
    for (int t = 0; t < 600 && s.last_step < 120; t++) {
        json_t *ev = th_wait_event(sub, "step", id, NULL, 100, NULL);
        if (ev)
            s.last_step = json_integer_value(json_object_get(
                json_object_get(ev, "data"), "step"));
        json_decref(ev);
    }
    ck_assert_int_ge(s.last_step, 120);
    request_ok(fd, "pause", id);
    ck_assert(follow(sub, id, "suspended", 60000, &s));
    int64_t paused_at = s.last_step;
    ck_assert_msg(paused_at < 400, "the job ended before the pause");
    request_ok(fd, "resume", id);
    ck_assert(follow(sub, id, "completed", 300000, &s));
    ck_assert_int_eq(s.last_step, 400);
    /* step events may be coalesced under load; windows never are */
    ck_assert_msg(s.steps_timed >= 20, "only %d step events carried device "
                  "times", s.steps_timed);
    ck_assert_int_ge(s.windows, 20);
    ck_assert_int_ge(s.checkpoints, 4);
    ck_assert_msg(th_log_has(fd, id, "device: cuda:0 traind simulated GPU 0"),
                  "the job did not run on cuda:0");
    ck_assert_msg(th_log_has(fd, id, "resumed from "), "no resume after pause");
    json_t *j = show(fd, id);
    ck_assert_str_eq(json_string_value(json_object_get(j, "state")),
                     "completed");
    ck_assert_int_ge(json_array_size(json_object_get(j, "checkpoints")), 1);
    json_decref(j);
    /* a second job, cancelled while it runs */
    int64_t id2 = th_submit(fd, spec_on("cuda:0", 50, 0));
    ck_assert(th_wait_state(fd, id2, "running", 30000));
    request_ok(fd, "cancel", id2);
    ck_assert(th_wait_state(fd, id2, "cancelled", 60000));
    close(fd);
    close(sub);
    ck_assert_int_eq(th_stop(&h), 0);
    long calls = 0, launches = 0, peak = 0;
    ck_assert_msg(report(rep, 0, &calls, &launches, &peak), "no %s", rep);
    ck_assert_int_gt(launches, 0);
    ck_assert_int_gt(peak, 0);
    /* finding 8: snapshots go into page-locked checkpoint buffers, so no
     * device-to-host copy blocked the trainer (statistics use a pinned
     * ring already) */
    ck_assert_msg(g_pageable_d2h == 0, "%ld device-to-host copies into "
                  "pageable memory blocked the trainer", g_pageable_d2h);
    th_cleanup(&h);
}
END_TEST

START_TEST(test_cuda1_job_never_touches_device0)
{
    td_harness h;
    char rep[128];
    static const char *env[] = {"TD_SIM_DEVICES=2", NULL, NULL};
    start_reporting(&h, env, rep, sizeof rep);
    int fd = th_connect(&h, NULL);
    int64_t id = th_submit(fd, spec_on("cuda:1", 1, 40));
    ck_assert(th_wait_state(fd, id, "completed", 300000));
    ck_assert(th_log_has(fd, id, "device: cuda:1 traind simulated GPU 1"));
    close(fd);
    ck_assert_int_eq(th_stop(&h), 0);
    long c0 = -1, l0 = -1, p0 = -1, c1 = 0, l1 = 0, p1 = 0;
    ck_assert_msg(report(rep, 0, &c0, &l0, &p0) &&
                  report(rep, 1, &c1, &l1, &p1), "no report in %s", rep);
    ck_assert_msg(c0 == 0 && l0 == 0 && p0 == 0, "device 0 was touched: %ld "
                  "calls, %ld launches, %ld bytes", c0, l0, p0);
    ck_assert_int_gt(c1, 0);
    ck_assert_int_gt(l1, 0);
    ck_assert_int_gt(p1, 0);
    th_cleanup(&h);
}
END_TEST

/* The first cudaMalloc of the process (the arena) fails: the job fails
 * with the sizes and what to do, and the GPU is fine for the next job. */
START_TEST(test_out_of_memory_at_create_fails_the_job)
{
    td_harness h;
    static const char *env[] = {"TD_SIM_OOM_AT=1", NULL};
    ck_assert_int_eq(th_start_env(&h, NULL, env), 0);
    int fd = th_connect(&h, NULL);
    int64_t a = th_submit(fd, spec_on("cuda:0", 1, 0));
    ck_assert(th_wait_state(fd, a, "failed", 60000));
    json_t *j = show(fd, a);
    const char *why = json_string_value(json_object_get(j, "reason"));
    ck_assert_msg(why && strstr(why, "device arena") &&
                  strstr(why, "try a smaller batch_size"), "reason: %s",
                  why ? why : "(none)");
    json_decref(j);
    int64_t b = th_submit(fd, spec_on("cuda:0", 1, 0));
    ck_assert(th_wait_state(fd, b, "completed", 300000));
    close(fd);
    ck_assert_int_eq(th_stop(&h), 0); /* out of memory is not sticky */
    th_cleanup(&h);
}
END_TEST

/* Kernel 300 (a few steps in) faults with a sticky illegal address. */
START_TEST(test_sticky_error_fails_the_job_and_daemon_exits)
{
    td_harness h;
    static const char *env[] = {"TD_SIM_FAULT_KERNEL=300", NULL};
    ck_assert_int_eq(th_start_env(&h, NULL, env), 0);
    int fd = th_connect(&h, NULL);
    int64_t a = th_submit(fd, spec_on("auto", 2, 0));
    int64_t b = th_submit(fd, spec_on("auto", 1, 0)); /* queued behind */
    close(fd);
    int st = wait_exit(&h, 120000);
    ck_assert_msg(st == 75, "traind exited with %d, not 75 (EX_TEMPFAIL)",
                  st);
    /* restarted (as systemd would) on a healthy GPU */
    env[0] = "TD_SIM_FAULT_KERNEL=0";
    ck_assert_int_eq(th_restart(&h), 0);
    fd = th_connect(&h, NULL);
    json_t *j = show(fd, a);
    const char *state = json_string_value(json_object_get(j, "state"));
    const char *why = json_string_value(json_object_get(j, "reason"));
    ck_assert_str_eq(state, "failed");
    ck_assert_msg(why && strstr(why, "illegal memory access") &&
                  strstr(why, "unusable until traind restarts") &&
                  strstr(why, "docs/cuda.md#sticky-errors"), "reason: %s",
                  why ? why : "(none)");
    json_decref(j);
    ck_assert(th_wait_state(fd, b, "completed", 300000));
    ck_assert(th_log_has(fd, b, "device: cuda:0"));
    close(fd);
    ck_assert_int_eq(th_stop(&h), 0);
    th_cleanup(&h);
}
END_TEST

/* The real input path on the GPU: decoded batches in page-locked slots,
 * uploaded while the previous step computes, a validation pass each
 * epoch; at exit every page-locked range (slots, statistics ring,
 * checkpoint buffers) has been given back. */
START_TEST(test_files_job_on_cuda0_with_validation)
{
    td_harness h;
    char rep[128];
    static const char *env[] = {"TD_SIM_DEVICES=1", NULL, NULL};
    start_reporting(&h, env, rep, sizeof rep);
    int fd = th_connect(&h, NULL);
    int64_t id = th_submit(fd, files_spec(h.dir, "cuda:0", 2));
    ck_assert(th_wait_state(fd, id, "completed", 300000));
    json_t *j = show(fd, id);
    json_t *acc = json_object_get(json_object_get(j, "result"), "val_acc");
    ck_assert_msg(json_is_number(acc), "no validation accuracy");
    ck_assert(json_number_value(acc) >= 0 && json_number_value(acc) <= 1);
    json_decref(j);
    close(fd);
    ck_assert_int_eq(th_stop(&h), 0);
    long locked = 0, live = -1, c = 0, l = 0, p = 0;
    ck_assert_msg(report_host(rep, &locked, &live) &&
                  report(rep, 0, &c, &l, &p), "no report in %s", rep);
    ck_assert_msg(locked > 2, "%ld page-locked ranges: the batch slots are "
                  "not pinned", locked);
    ck_assert_msg(live == 0, "%ld page-locked ranges left at exit", live);
    ck_assert_msg(g_pageable_d2h == 0, "%ld device-to-host copies into "
                  "pageable memory", g_pageable_d2h);
    th_cleanup(&h);
}
END_TEST

/* Evaluation of a checkpoint as a job on the GPU (issue 16: eval
 * through the daemon on its device): the same top-1 over the same samples
 * as the same job on the CPU. */
START_TEST(test_eval_job_on_cuda0)
{
    td_harness h;
    static const char *env[] = {"TD_SIM_DEVICES=1", NULL};
    ck_assert_int_eq(th_start_env(&h, NULL, env), 0);
    int fd = th_connect(&h, NULL);
    int64_t id = th_submit(fd, files_spec(h.dir, "cpu", 1));
    ck_assert(th_wait_state(fd, id, "completed", 300000));
    json_t *j = show(fd, id);
    /* Evaluation of its checkpoint as a job on the GPU (issue 16): the
     * same top-1 over the same samples as on the CPU. */
    char val[200];
    snprintf(val, sizeof val, "%s/val", h.dir);
    const char *ck = json_string_value(json_object_get(
        json_object_get(j, "result"), "last_checkpoint"));
    ck_assert_ptr_nonnull(ck);
    int64_t eg = th_submit(fd, json_pack("{s:s, s:s, s:s, s:s}", "task",
                                         "eval", "checkpoint", ck, "data",
                                         val, "device", "cuda:0"));
    int64_t ec = th_submit(fd, json_pack("{s:s, s:s, s:s, s:s}", "task",
                                         "eval", "checkpoint", ck, "data",
                                         val, "device", "cpu"));
    ck_assert(th_wait_state(fd, eg, "completed", 120000));
    ck_assert(th_wait_state(fd, ec, "completed", 120000));
    json_t *jg = show(fd, eg), *jc = show(fd, ec);
    json_t *rg = json_object_get(jg, "result");
    json_t *rc = json_object_get(jc, "result");
    ck_assert_int_eq(json_integer_value(json_object_get(rg, "samples")), 6);
    ck_assert_int_eq(json_integer_value(json_object_get(rc, "samples")), 6);
    ck_assert_msg(json_equal(json_object_get(rg, "top1"),
                             json_object_get(rc, "top1")),
                  "top-1 %g on cuda:0, %g on the CPU",
                  json_number_value(json_object_get(rg, "top1")),
                  json_number_value(json_object_get(rc, "top1")));
    json_decref(jg);
    json_decref(jc);
    json_decref(j);
    close(fd);
    ck_assert_int_eq(th_stop(&h), 0);
    th_cleanup(&h);
}
END_TEST

/* A sticky error in a job reading files: the job fails, the daemon exits
 * with 75, and its page-locked batch slots were given back first. */
START_TEST(test_sticky_error_with_pinned_slots)
{
    td_harness h;
    char rep[128];
    static const char *env[] = {"TD_SIM_FAULT_KERNEL=300", NULL, NULL};
    start_reporting(&h, env, rep, sizeof rep);
    int fd = th_connect(&h, NULL);
    th_submit(fd, files_spec(h.dir, "cuda:0", 50)); /* 300 steps */
    close(fd);
    ck_assert_int_eq(wait_exit(&h, 120000), 75);
    long locked = 0, live = -1;
    ck_assert_msg(report_host(rep, &locked, &live), "no report in %s", rep);
    ck_assert_int_gt(locked, 2);
    ck_assert_msg(live == 0, "%ld page-locked ranges left at exit", live);
    th_cleanup(&h);
}
END_TEST

/* Whether tensor `name` of checkpoint a has the same bytes in b. */
static int ckpt_same(td_ckpt_file *a, td_ckpt_file *b, const char *name)
{
    const td_ckpt_tensor *x = td_ckpt_file_find(a, name);
    const td_ckpt_tensor *y = td_ckpt_file_find(b, name);
    ck_assert_msg(x && y, "no tensor %s", name);
    return x->nbytes == y->nbytes &&
           memcmp(td_ckpt_file_data(a, x), td_ckpt_file_data(b, y),
                  x->nbytes) == 0;
}

/* Issue 16: freeze, freeze_bn_stats and lr_mult on cuda:0 (the backend
 * refused them before).  Between the job's first and last checkpoint the
 * frozen convolution and batch norm and the batch norm's statistics keep
 * their bytes, the head (lr x 10) trains; the running statistics are
 * still their initial 0 and 1, the frozen weights' momentum still 0. */
START_TEST(test_finetune_job_on_cuda0)
{
    td_harness h;
    char err[256];
    ck_assert_int_eq(th_start_env(&h, NULL, NULL), 0);
    int fd = th_connect(&h, NULL);
    json_t *spec = spec_on("cuda:0", 1, 10);
    json_array_insert_new(json_object_get(json_object_get(spec, "model"),
                                          "layers"), 1,
                          json_pack("{s:s, s:s}", "type", "batchnorm",
                                    "name", "bn"));
    json_object_set_new(spec, "freeze", json_pack("[s, s]", "c1.*", "bn.*"));
    json_object_set_new(spec, "freeze_bn_stats", json_true());
    json_object_set_new(spec, "lr_mult", json_pack("{s:f}", "fc.*", 10.0));
    int64_t id = th_submit(fd, spec);
    ck_assert(th_wait_state(fd, id, "completed", 300000));
    ck_assert(th_log_has(fd, id, "device: cuda:0 traind simulated GPU 0"));
    json_t *j = show(fd, id), *cks = json_object_get(j, "checkpoints");
    size_t n = json_array_size(cks);
    ck_assert_uint_ge(n, 2);
    const char *first = json_string_value(json_object_get(
        json_array_get(cks, 0), "path"));
    const char *last = json_string_value(json_object_get(
        json_array_get(cks, n - 1), "path"));
    td_ckpt_file *a, *b;
    ck_assert_msg(td_ckpt_open(first, &a, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(td_ckpt_open(last, &b, err, sizeof err) == 0, "%s", err);
    const char *kept[] = {"c1.weight", "bn.weight", "bn.bias",
                          "bn.running_mean", "bn.running_var"};
    for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++)
        ck_assert_msg(ckpt_same(a, b, kept[i]), "%s changed", kept[i]);
    ck_assert_msg(!ckpt_same(a, b, "fc.weight"), "fc.weight did not train");
    const char *init[] = {"bn.running_mean", "bn.running_var",
                          "optimizer.momentum_buffer.c1.weight"};
    const float want[] = {0.0f, 1.0f, 0.0f};
    for (int i = 0; i < 3; i++) {
        const td_ckpt_tensor *t = td_ckpt_file_find(b, init[i]);
        ck_assert_msg(t != NULL, "no tensor %s", init[i]);
        const float *v = td_ckpt_file_data(b, t);
        for (size_t k = 0; k < t->nbytes / sizeof *v; k++)
            ck_assert_msg(v[k] == want[i], "%s[%zu] = %g", init[i], k,
                          v[k]);
    }
    td_ckpt_close(a);
    td_ckpt_close(b);
    json_decref(j);
    close(fd);
    ck_assert_int_eq(th_stop(&h), 0);
    th_cleanup(&h);
}
END_TEST

static Suite *sim_daemon_suite(void)
{
    Suite *s = suite_create("sim_daemon");
    TCase *tc = tcase_create("daemon");
    tcase_set_timeout(tc, 500);
    tcase_add_test(tc, test_cuda0_job_end_to_end);
    tcase_add_test(tc, test_cuda1_job_never_touches_device0);
    tcase_add_test(tc, test_out_of_memory_at_create_fails_the_job);
    tcase_add_test(tc, test_sticky_error_fails_the_job_and_daemon_exits);
    tcase_add_test(tc, test_files_job_on_cuda0_with_validation);
    tcase_add_test(tc, test_eval_job_on_cuda0);
    tcase_add_test(tc, test_sticky_error_with_pinned_slots);
    tcase_add_test(tc, test_finetune_job_on_cuda0);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(sim_daemon_suite)
