/* test_obs.c - the observability exports of a live traind: the trace
 * command and `trainctl trace` against a job that decodes real JPEGs, the
 * Prometheus endpoint scraped during a job, and `trainctl top`. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon_harness.h"
#include "obs_check.h"
#include "support/jpeggen.h"
#include "tdtest.h"

static td_harness H;
static char data_dir[64], conf[96];
static int port;

/* A free TCP port on the loopback (bound, read back, released). */
static void start_with(const char *listen)
{
    snprintf(data_dir, sizeof data_dir, "/tmp/td_obs_data_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(data_dir));
    td_test_make_folder(data_dir, 4, 32, 48, 48);
    snprintf(conf, sizeof conf, "%s/traind.conf", data_dir);
    FILE *f = fopen(conf, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "metrics_listen = %s\n", listen);
    fclose(f);
    const char *args[] = {"--config", conf, NULL};
    ck_assert_int_eq(th_start(&H, args), 0);
}

static void setup(void)
{
    char listen[64];
    port = th_free_port();
    snprintf(listen, sizeof listen, "127.0.0.1:%d", port);
    start_with(listen);
}

/* Cancels what still runs, so stopping writes no final checkpoint. */
static void cancel_running(void)
{
    int fd = th_connect(&H, NULL);
    json_t *r = th_request(fd, "list", json_pack("{s:s}", "state",
                                                 "running")), *j;
    size_t i;
    json_array_foreach(json_object_get(th_ok(r), "jobs"), i, j) {
        json_int_t id = json_integer_value(json_object_get(j, "id"));
        json_t *c = th_job_request(fd, "cancel", id);
        char *cs = json_dumps(c, 0);
        json_decref(c);
        if (!th_wait_state(fd, id, "cancelled", 30000)) {
            json_t *sh = th_job_request(fd, "show", id);
            char *t = json_dumps(sh, 0);
            ck_abort_msg("cancel %s; then %.600s", cs, t);
        }
        free(cs);
    }
    json_decref(r);
    close(fd);
}

static void teardown(void)
{
    cancel_running();
    int st = th_stop(&H);
    th_cleanup(&H);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", data_dir);
    ck_assert_int_eq(system(cmd), 0);
    ck_assert_msg(st == 0, "traind exited with status %d", st);
}

/* A job that decodes the JPEG folder with 2 workers for `epochs` epochs
 * (8 steps each); no checkpoints (the disk is not what these tests
 * watch). */
static json_t *folder_spec(int epochs)
{
    return json_pack(
        "{s:s, s:{s:s, s:i}, s:{s:[i,i], s:i, s:i, s:{s:[f,f,f], s:[f,f,f]}},"
        " s:{s:[{s:s, s:s, s:i, s:i, s:i}, {s:s, s:s}, {s:s, s:s},"
        "       {s:s, s:s, s:s}]},"
        " s:{s:s, s:f, s:f}, s:i, s:i, s:i, s:i, s:{s:i, s:i},"
        " s:{s:i, s:b}}",
        "name", "folder", "data", "train", data_dir, "classes", 4, "input",
        "size", 32, 32, "channels", 3, "workers", 2, "normalize", "mean", 0.5,
        0.5, 0.5, "std", 0.25, 0.25, 0.25, "model", "layers", "type",
        "conv2d", "name", "c1", "channels", 8, "kernel", 3, "pad", 1, "type",
        "relu", "name", "r1", "type", "flatten", "name", "f", "type", "dense",
        "name", "fc", "units", "classes", "optimizer", "type", "sgd", "lr",
        0.01, "momentum", 0.9, "batch_size", 16, "epochs", epochs, "seed", 1,
        "threads", 1, "metrics", "warmup_steps", 2, "window_steps", 8,
        "checkpoint", "every_steps", 0, "at_epoch_end", 0);
}

/* The folder job, running until it is cancelled. */
static int64_t submit_folder_job(int fd)
{
    json_t *spec = folder_spec(100000);
    ck_assert_ptr_nonnull(spec);
    int64_t id = th_submit(fd, spec);
    ck_assert(th_wait_state(fd, id, "running", 20000));
    return id;
}

/* The trace_progress events of the last trace_request: their steps, in
 * order, and whether one came after a trace_part or named another
 * request size. */
static long long progress[64];
static int nprogress, progress_bad;

/* Sends a trace request and reads until its reply, concatenating the
 * trace_part events.  *text is malloc'd. */
static json_t *trace_request(int fd, json_t *args, char **text)
{
    json_int_t want = json_integer_value(json_object_get(args, "steps"));
    nprogress = progress_bad = 0;
    char *line;
    json_t *req = json_pack("{s:i, s:s, s:o}", "id", 77, "cmd", "trace",
                            "args", args);
    char *s = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    size_t cap = 1 << 20, len = 0;
    *text = calloc(1, cap);
    ck_assert_int_eq(th_send_raw(fd, s, strlen(s)), 0);
    ck_assert_int_eq(th_send_raw(fd, "\n", 1), 0);
    free(s);
    long next = 0;
    while ((line = th_read_line(fd, 60000))) {
        json_t *o = json_loads(line, 0, NULL);
        free(line);
        ck_assert_ptr_nonnull(o);
        if (json_integer_value(json_object_get(o, "id")) == 77)
            return o;
        const char *ev = json_string_value(json_object_get(o, "event"));
        json_t *pd = json_object_get(o, "data");
        if (ev && strcmp(ev, "trace_progress") == 0) {
            if (nprogress < 64)
                progress[nprogress++] =
                    json_integer_value(json_object_get(pd, "steps"));
            progress_bad |= next > 0 || json_integer_value(json_object_get(
                                            pd, "requested")) != want;
        }
        if (ev && strcmp(ev, "trace_part") == 0) {
            json_t *d = json_object_get(o, "data");
            const char *t = json_string_value(json_object_get(d, "text"));
            ck_assert_int_eq(json_integer_value(json_object_get(d, "part")),
                             next++);
            size_t n = strlen(t);
            while (len + n + 1 > cap)
                *text = realloc(*text, cap *= 2);
            memcpy(*text + len, t, n + 1);
            len += n;
        }
        json_decref(o);
    }
    ck_abort_msg("no reply to the trace request");
    return NULL;
}

/* Counts X slices named `name` (any track when tid < 0). */
static int count_x(json_t *tr, const char *name, long tid)
{
    json_t *e;
    size_t i;
    int n = 0;
    json_array_foreach(json_object_get(tr, "traceEvents"), i, e) n +=
        strcmp(json_string_value(json_object_get(e, "ph")), "X") == 0 &&
        strcmp(json_string_value(json_object_get(e, "name")), name) == 0 &&
        (tid < 0 || json_integer_value(json_object_get(e, "tid")) == tid);
    return n;
}

static int count_named(json_t *tr, const char *ph, const char *name)
{
    json_t *e;
    size_t i;
    int n = 0;
    json_array_foreach(json_object_get(tr, "traceEvents"), i, e) n +=
        strcmp(json_string_value(json_object_get(e, "ph")), ph) == 0 &&
        strcmp(json_string_value(json_object_get(e, "name")), name) == 0;
    return n;
}

START_TEST(test_trace_of_a_running_job)
{
    char err[512], *text;
    int fd = th_connect(&H, NULL), nsteps = 0;
    int64_t id = submit_folder_job(fd);
    json_t *r = trace_request(fd, json_pack("{s:I, s:i}", "job",
                                            (json_int_t)id, "steps", 12),
                              &text);
    json_t *ok = th_ok(r);
    ck_assert_ptr_nonnull(ok);
    ck_assert_int_eq(json_integer_value(json_object_get(ok, "steps")), 12);
    ck_assert(json_is_true(json_object_get(ok, "complete")));
    ck_assert_int_eq(json_integer_value(json_object_get(ok, "bytes")),
                     (json_int_t)strlen(text));
    /* how far it was while the reply waited: 0 when armed, then at each
     * tenth, rising, before the trace's parts */
    ck_assert_int_ge(nprogress, 10);
    ck_assert_int_eq(progress[0], 0);
    for (int i = 1; i < nprogress; i++)
        ck_assert_int_gt(progress[i], progress[i - 1]);
    ck_assert_int_eq(progress[nprogress - 1], 11);
    ck_assert_int_eq(progress_bad, 0);
    json_error_t je;
    json_t *tr = json_loads(text, 0, &je);
    ck_assert_msg(tr != NULL, "trace is not JSON: %s", je.text);
    ck_assert_msg(oc_trace_check(tr, 1e-3, err, sizeof err) == 0, "%s", err);
    /* phases per step sum to the step time, within 1 us of rounding */
    ck_assert_msg(oc_trace_phases_check(tr, 1.0, &nsteps, err, sizeof err)
                      == 0, "%s", err);
    ck_assert_int_eq(nsteps, 12);
    ck_assert_int_eq(count_x(tr, "step", -1), 12);
    ck_assert_int_ge(count_x(tr, "compute", 3), 12); /* device compute */
    ck_assert_int_ge(count_x(tr, "copy", 2), 1);     /* device copy */
    ck_assert_int_gt(count_x(tr, "decode", -1), 0);  /* decode workers */
    ck_assert_int_gt(count_x(tr, "read", -1), 0);
    ck_assert_int_gt(count_x(tr, "augment", -1), 0);
    ck_assert_int_gt(count_named(tr, "C", "ready_batches"), 0);
    ck_assert_int_eq(count_named(tr, "C", "samples_per_s"), 12);
    ck_assert_int_eq(count_named(tr, "M", "process_name"), 1);
    ck_assert_int_ge(count_named(tr, "M", "thread_name"), 5);
    json_decref(tr);
    json_decref(r);
    free(text);
    close(fd);
}
END_TEST

START_TEST(test_trace_errors)
{
    char *text;
    int fd = th_connect(&H, NULL);
    json_t *r = th_request(fd, "trace", json_pack("{s:i}", "job", 42));
    ck_assert_str_eq(th_err_class(r), "not_found");
    json_decref(r);
    int64_t id = submit_folder_job(fd);
    r = th_request(fd, "trace", json_pack("{s:I, s:i}", "job", (json_int_t)id,
                                          "steps", 0));
    ck_assert_str_eq(th_err_class(r), "invalid_args");
    ck_assert_ptr_nonnull(strstr(json_string_value(json_object_get(
                              json_object_get(r, "error"), "desc")), "steps"));
    json_decref(r);
    r = th_request(fd, "trace", json_pack("{s:I, s:s}", "job", (json_int_t)id,
                                          "path", "/tmp/x"));
    ck_assert_str_eq(th_err_class(r), "invalid_args");
    json_decref(r);
    /* a pending job cannot be traced */
    int64_t id2 = th_submit(fd, th_tiny_spec(1, 0));
    r = th_job_request(fd, "trace", id2);
    ck_assert_str_eq(th_err_class(r), "conflict");
    json_decref(r);
    /* the running job still traces after the errors */
    r = trace_request(fd, json_pack("{s:I, s:i}", "job", (json_int_t)id,
                                    "steps", 2), &text);
    ck_assert_ptr_nonnull(th_ok(r));
    json_decref(r);
    free(text);
    close(fd);
}
END_TEST

/* A job that ends before its steps are recorded answers with what there
 * is, marked incomplete. */
START_TEST(test_trace_outlived_by_the_job)
{
    char *text;
    int fd = th_connect(&H, NULL);
    int64_t id = submit_folder_job(fd);
    json_t *r = th_job_request(fd, "subscribe", id);
    json_decref(r);
    int fd2 = th_connect(&H, NULL);
    char *s = NULL;
    ck_assert_int_ge(asprintf(&s, "{\"id\":5,\"cmd\":\"trace\",\"args\":"
                              "{\"job\":%lld,\"steps\":10000}}\n",
                              (long long)id), 0);
    ck_assert_int_eq(th_send_raw(fd2, s, strlen(s)), 0);
    free(s);
    usleep(200000);
    r = th_job_request(fd, "cancel", id);
    json_decref(r);
    r = NULL;
    (void)text;
    char *line;
    while (!r && (line = th_read_line(fd2, 30000))) {
        json_t *o = json_loads(line, 0, NULL);
        free(line);
        if (json_integer_value(json_object_get(o, "id")) == 5)
            r = o;
        else
            json_decref(o);
    }
    json_t *ok = th_ok(r);
    ck_assert_ptr_nonnull(ok);
    ck_assert(json_is_false(json_object_get(ok, "complete")));
    ck_assert_int_lt(json_integer_value(json_object_get(ok, "steps")), 10000);
    json_decref(r);
    close(fd2);
    close(fd);
}
END_TEST

START_TEST(test_trainctl_trace_writes_the_file)
{
    char *out = NULL, *err = NULL, path[160], bad[160];
    int fd = th_connect(&H, NULL);
    int64_t id = submit_folder_job(fd);
    char job[32];
    snprintf(job, sizeof job, "%lld", (long long)id);
    snprintf(path, sizeof path, "%s/t.json", data_dir);
    const char *argv[] = {"trace", job, "--steps", "5", "-o", path, NULL};
    int st = th_cli(&H, &out, &err, argv);
    ck_assert_msg(st == 0, "exit %d: %s", st, err);
    ck_assert_ptr_nonnull(strstr(out, "5 step(s) traced"));
    json_t *tr = json_load_file(path, 0, NULL);
    ck_assert_ptr_nonnull(json_object_get(tr, "traceEvents"));
    json_decref(tr);
    free(out);
    free(err);
    /* an unwritable output is refused before anything is recorded */
    snprintf(bad, sizeof bad, "%s/no/such/dir/t.json", data_dir);
    const char *argv2[] = {"trace", job, "-o", bad, NULL};
    st = th_cli(&H, &out, &err, argv2);
    ck_assert_int_eq(st, 1);
    ck_assert_ptr_nonnull(strstr(err, "cannot write"));
    free(out);
    free(err);
    const char *argv3[] = {"trace", job, NULL};
    st = th_cli(&H, &out, &err, argv3);
    ck_assert_int_eq(st, 2);
    ck_assert_ptr_nonnull(strstr(err, "-o FILE"));
    free(out);
    free(err);
    close(fd);
}
END_TEST

/* ---- Prometheus ------------------------------------------------------- */

/* GET (or another method) over HTTP/1.0 to the metrics port. */
static char *http(const char *method, const char *path)
{
    return th_http(port, method, path);
}

static const char *body(const char *resp)
{
    const char *b = strstr(resp, "\r\n\r\n");
    ck_assert_ptr_nonnull(b);
    return b + 4;
}

/* Every counter sample of a, in b at least as large. */
static void assert_monotonic(const char *a, const char *b)
{
    char fam[128] = "";
    int checked = 0;
    for (const char *p = a; *p;) {
        const char *nl = strchr(p, '\n');
        if (strncmp(p, "# TYPE ", 7) == 0) {
            const char *sp = strchr(p + 7, ' ');
            if (strncmp(sp + 1, "counter", 7) == 0)
                snprintf(fam, sizeof fam, "%.*s", (int)(sp - p - 7), p + 7);
            else
                fam[0] = '\0';
        } else if (p[0] != '#' && fam[0] &&
                   strncmp(p, fam, strlen(fam)) == 0) {
            char series[512];
            const char *sp = memrchr(p, ' ', (size_t)(nl - p));
            ck_assert_ptr_nonnull(sp);
            snprintf(series, sizeof series, "%.*s", (int)(sp - p), p);
            double va = strtod(sp + 1, NULL), vb = oc_prom_value(b, series);
            ck_assert_msg(vb >= va, "%s went from %g to %g", series, va, vb);
            checked++;
        }
        p = nl + 1;
    }
    ck_assert_int_gt(checked, 10);
}

START_TEST(test_metrics_scraped_during_a_job)
{
    char err[512], series[128];
    int fd = th_connect(&H, NULL);
    int64_t id = submit_folder_job(fd);
    snprintf(series, sizeof series,
             "traind_steps_total{job=\"%lld\",device=\"cpu\"}", (long long)id);
    char *a = NULL;
    for (int i = 0; i < 100; i++) { /* until the first snapshot is there */
        free(a);
        a = http("GET", "/metrics");
        if (oc_prom_value(body(a), series) > 0)
            break;
        usleep(100000);
    }
    ck_assert_ptr_nonnull(strstr(a, "HTTP/1.0 200") ? a : strstr(a, " 200 "));
    ck_assert_ptr_nonnull(strstr(a, "text/plain; version=0.0.4"));
    ck_assert_msg(oc_prom_check(body(a), err, sizeof err) == 0, "%s\n%s", err,
                  body(a));
    /* the reference parser (python3-prometheus-client) agrees, where it
     * is installed (test_prom_parser says when it is not) */
    char path[160], cmd[512];
    snprintf(path, sizeof path, "%s/scrape.txt", data_dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(body(a), f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tests/support/"
             "prom_families.py < %s", getenv("TD_SOURCE_ROOT"), path);
    int st;
    char *parsed = td_test_capture(cmd, &st);
    ck_assert_msg(st == 0 || st == 77, "the parser says:\n%s", parsed);
    free(parsed);
    usleep(1500000); /* more than the trainer's 1 s refresh */
    char *b = http("GET", "/metrics");
    ck_assert_msg(oc_prom_check(body(b), err, sizeof err) == 0, "%s", err);
    ck_assert_double_gt(oc_prom_value(body(b), series),
                        oc_prom_value(body(a), series));
    assert_monotonic(body(a), body(b));
    char w[128];
    snprintf(w, sizeof w, "traind_input_workers{job=\"%lld\",device=\"cpu\"}",
             (long long)id);
    ck_assert_double_eq(oc_prom_value(body(b), w), 2);
    /* the learning curve's gauges: the spec's constant learning rate, a
     * window's mean loss */
    snprintf(w, sizeof w, "traind_learning_rate{job=\"%lld\",device=\"cpu\"}",
             (long long)id);
    ck_assert_msg(oc_prom_value(body(b), w) > 0, "%s", body(b));
    snprintf(w, sizeof w, "traind_train_loss{job=\"%lld\",device=\"cpu\"}",
             (long long)id);
    ck_assert_msg(oc_prom_value(body(b), w) > 0, "%s", body(b));
    ck_assert_double_eq(oc_prom_value(body(b), "traind_jobs{state=\"running\"}"),
                        1);
    free(a);
    free(b);
    close(fd);
}
END_TEST

/* The value of series name{job,device="cpu"[,extra]} in text. */
static double job_value(const char *text, const char *name, int64_t id,
                        const char *extra)
{
    char series[256];
    snprintf(series, sizeof series, "%s{job=\"%lld\",device=\"cpu\"%s%s}",
             name, (long long)id, extra ? "," : "", extra ? extra : "");
    return oc_prom_value(text, series);
}

/* A job run to its end: the events a watcher got (what trainctl watch
 * --json prints), the scrape and the job's record say the same. */
START_TEST(test_watch_metrics_and_record_agree_at_the_end)
{
    char err[512], extra[128];
    int sub = th_connect(&H, NULL), fd = th_connect(&H, NULL);
    json_t *r = th_request(sub, "subscribe", json_pack("{s:i}",
                                                       "every_steps", 1));
    ck_assert_ptr_nonnull(th_ok(r));
    json_decref(r);
    json_t *spec = folder_spec(3);
    ck_assert_ptr_nonnull(spec);
    int64_t id = th_submit(fd, spec);
    json_t *log = json_array();
    json_t *done = th_wait_event(sub, "state", id, "completed", 90000, log);
    ck_assert_ptr_nonnull(done);
    json_decref(done);
    int64_t last_step = 0, windows = 0;
    json_t *last_window = NULL, *ev;
    size_t i;
    json_array_foreach(log, i, ev) {
        const char *k = json_string_value(json_object_get(ev, "event"));
        json_t *d = json_object_get(ev, "data");
        if (json_integer_value(json_object_get(ev, "job")) != id)
            continue;
        if (strcmp(k, "step") == 0)
            last_step = json_integer_value(json_object_get(d, "step"));
        if (strcmp(k, "window") == 0) {
            windows++;
            last_window = d;
        }
    }
    ck_assert_int_eq(last_step, 24);
    /* a short job's windows: 5 of (24 - 2) / 5 steps (metrics.md) */
    ck_assert_int_eq(windows, 5);
    ck_assert_ptr_nonnull(last_window);
    const char *verdict = json_string_value(json_object_get(last_window,
                                                            "verdict"));
    double wsps = json_number_value(json_object_get(last_window,
                                                    "samples_per_s"));
    json_t *rec = th_show_job(fd, id);
    json_t *res = json_object_get(rec, "result");
    ck_assert_int_eq(json_integer_value(json_object_get(rec, "step")), 24);
    ck_assert_int_eq(json_integer_value(json_object_get(res, "steps")), 24);
    ck_assert_str_eq(json_string_value(json_object_get(res, "verdict")),
                     verdict);
    json_t *curve = json_object_get(rec, "curve");
    json_t *pt = json_array_get(curve, json_array_size(curve) - 1);
    ck_assert_double_eq_tol(json_number_value(json_object_get(
                                pt, "samples_per_s")), wsps, 1e-9 * wsps);
    char *a = http("GET", "/metrics");
    const char *t = body(a);
    ck_assert_msg(oc_prom_check(t, err, sizeof err) == 0, "%s", err);
    ck_assert_double_eq(job_value(t, "traind_steps_total", id, NULL), 24);
    ck_assert_double_eq(job_value(t, "traind_samples_total", id, NULL),
                        24 * 16);
    ck_assert_double_eq(job_value(t, "traind_windows_total", id, NULL),
                        (double)windows);
    ck_assert_double_eq(job_value(t, "traind_job_steps_planned", id, NULL),
                        24);
    ck_assert_double_eq_tol(job_value(t, "traind_samples_per_second", id,
                                      NULL), wsps, 1e-7 * wsps);
    ck_assert_double_eq_tol(job_value(t, "traind_input_wait_ratio", id,
                                      NULL),
                            json_number_value(json_object_get(
                                last_window, "input_wait_ratio")), 1e-8);
    const char *sev = json_string_value(json_object_get(last_window,
                                                        "severity"));
    snprintf(extra, sizeof extra, "verdict=\"%s\",severity=\"%s\"",
             verdict, sev ? sev : "");
    ck_assert_msg(job_value(t, "traind_bottleneck_info", id, extra) == 1,
                  "%s not in\n%s", extra, t);
    free(a);
    json_decref(rec);
    json_decref(log);
    close(fd);
    close(sub);
}
END_TEST

START_TEST(test_metrics_other_paths_and_methods)
{
    char *r = http("GET", "/");
    ck_assert_ptr_nonnull(strstr(r, " 404 "));
    ck_assert_ptr_nonnull(strstr(r, "traind serves GET /metrics and "
                                    "/dashboard"));
    free(r);
    r = http("POST", "/metrics");
    ck_assert_ptr_nonnull(strstr(r, " 405 "));
    free(r);
    r = http("POST", "/dashboard");
    ck_assert_ptr_nonnull(strstr(r, " 405 "));
    free(r);
    r = http("GET", "/dashboard/");
    ck_assert_ptr_nonnull(strstr(r, " 404 "));
    free(r);
    r = http("GET", "/metrics");
    ck_assert_ptr_nonnull(strstr(r, " 200 "));
    ck_assert_ptr_nonnull(strstr(r, "traind_uptime_seconds "));
    free(r);
}
END_TEST

/* ---- the dashboard (the browser's view: test_dashboard.c) ------------ */

START_TEST(test_dashboard_page_and_data)
{
    char *r = http("GET", "/dashboard");
    ck_assert_ptr_nonnull(strstr(r, " 200 "));
    ck_assert_ptr_nonnull(strstr(r, "text/html; charset=utf-8"));
    ck_assert_ptr_nonnull(strstr(r, "Content-Security-Policy: default-src "
                                    "'none'"));
    const char *page = body(r);
    ck_assert_ptr_nonnull(strstr(page, "<svg") ? page
                                               : strstr(page, "SVGNS"));
    ck_assert_ptr_nonnull(strstr(page, "dashboard/data.json"));
    /* self-contained: no URL of any other place, no asset tags */
    ck_assert_msg(!strcasestr(page, "http://") && !strcasestr(page, "https://")
                  && !strstr(page, "//fonts") && !strcasestr(page, "<link")
                  && !strcasestr(page, "src=") && !strcasestr(page, "@import")
                  && !strcasestr(page, "url("),
                  "the page refers to something outside it");
    free(r);

    r = http("GET", "/dashboard/data.json");
    ck_assert_ptr_nonnull(strstr(r, " 200 "));
    ck_assert_ptr_nonnull(strstr(r, "application/json"));
    json_t *o = json_loads(body(r), 0, NULL);
    ck_assert_ptr_nonnull(o);
    ck_assert(json_is_array(json_object_get(o, "jobs")));
    ck_assert_int_eq(json_array_size(json_object_get(o, "jobs")), 0);
    json_decref(o);
    free(r);

    /* a running job's curves show up, its state with them */
    int fd = th_connect(&H, NULL);
    int64_t id = submit_folder_job(fd);
    json_t *job = NULL;
    for (int i = 0; i < 300 && !job; i++) { /* until a window is in */
        r = http("GET", "/dashboard/data.json");
        o = json_loads(body(r), 0, NULL);
        ck_assert_msg(o != NULL, "not JSON: %.300s", body(r));
        free(r);
        json_t *j0 = json_array_get(json_object_get(o, "jobs"), 0);
        if (json_array_size(json_object_get(j0, "curve")) > 0)
            job = json_incref(j0);
        json_decref(o);
        if (!job)
            usleep(100000);
    }
    ck_assert_ptr_nonnull(job);
    ck_assert_int_eq(json_integer_value(json_object_get(job, "id")), id);
    ck_assert_str_eq(json_string_value(json_object_get(job, "name")),
                     "folder");
    ck_assert_str_eq(json_string_value(json_object_get(job, "state")),
                     "running");
    ck_assert(json_is_array(json_object_get(job, "history")));
    json_t *pt = json_array_get(json_object_get(job, "curve"), 0);
    ck_assert(json_is_number(json_object_get(pt, "step")));
    ck_assert(json_is_number(json_object_get(pt, "samples_per_s")));
    ck_assert(json_is_string(json_object_get(pt, "verdict")));
    json_decref(job);
    json_t *c = th_job_request(fd, "cancel", id);
    json_decref(c);
    ck_assert(th_wait_state(fd, id, "cancelled", 30000));
    r = http("GET", "/dashboard/data.json");
    o = json_loads(body(r), 0, NULL);
    ck_assert_ptr_nonnull(o);
    ck_assert_str_eq(json_string_value(json_object_get(
                         json_array_get(json_object_get(o, "jobs"), 0),
                         "state")),
                     "cancelled");
    json_decref(o);
    free(r);
    close(fd);
}
END_TEST

START_TEST(test_bad_metrics_listen_keeps_the_daemon_up)
{
    /* restart the fixture's daemon with an unusable address */
    ck_assert_int_eq(th_stop(&H), 0);
    th_cleanup(&H);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", data_dir);
    ck_assert_int_eq(system(cmd), 0);
    start_with("not-an-address");
    int fd = th_connect(&H, NULL);
    json_t *r = th_request(fd, "version", NULL);
    ck_assert_ptr_nonnull(th_ok(r));
    json_decref(r);
    close(fd);
}
END_TEST

/* ---- top -------------------------------------------------------------- */

START_TEST(test_top_snapshot)
{
    char *out = NULL, *err = NULL;
    int fd = th_connect(&H, NULL);
    int64_t id = submit_folder_job(fd);
    const char *argv[] = {"top", "--json", NULL};
    ck_assert_int_eq(th_cli(&H, &out, &err, argv), 0);
    json_t *o = json_loads(out, 0, NULL);
    ck_assert_ptr_nonnull(o);
    json_t *j = json_array_get(json_object_get(o, "jobs"), 0);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "id")), id);
    ck_assert_str_eq(json_string_value(json_object_get(j, "state")),
                     "running");
    json_decref(o);
    free(out);
    free(err);
    const char *argv2[] = {"top", "--once", NULL}; /* not a tty: one table */
    ck_assert_int_eq(th_cli(&H, &out, &err, argv2), 0);
    ck_assert_ptr_nonnull(strstr(out, "SAMPLES/S"));
    ck_assert_ptr_nonnull(strstr(out, "folder"));
    ck_assert_ptr_nonnull(strstr(out, "running"));
    free(out);
    free(err);
    const char *argv3[] = {"top", "--interval", "0", NULL};
    ck_assert_int_eq(th_cli(&H, &out, &err, argv3), 2);
    free(out);
    free(err);
    close(fd);
}
END_TEST

static Suite *obs_suite(void)
{
    Suite *s = suite_create("obs");
    TCase *tc = tcase_create("live");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_trace_of_a_running_job);
    tcase_add_test(tc, test_trace_errors);
    tcase_add_test(tc, test_trace_outlived_by_the_job);
    tcase_add_test(tc, test_trainctl_trace_writes_the_file);
    tcase_add_test(tc, test_metrics_scraped_during_a_job);
    tcase_add_test(tc, test_metrics_other_paths_and_methods);
    tcase_add_test(tc, test_watch_metrics_and_record_agree_at_the_end);
    tcase_add_test(tc, test_dashboard_page_and_data);
    tcase_add_test(tc, test_bad_metrics_listen_keeps_the_daemon_up);
    tcase_add_test(tc, test_top_snapshot);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(obs_suite)
