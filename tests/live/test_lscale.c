/* test_lscale.c - loss scaling on a live traind (issue 15): a job whose
 * spec asks for "loss_scale": "dynamic" (on the CPU backend, fp32: legal,
 * unnecessary) shows its scale and skipped steps on the Prometheus
 * endpoint (traind_loss_scale, traind_skipped_steps_total, in a rendering
 * that passes the format check), in `trainctl top` and in `trainctl
 * watch`.  (A job without loss scaling shows none of it: the
 * runner-level test, test_runner_lscale.c.  The overflow
 * itself is injected in the runner-level and backend tests: a live daemon
 * has no hook for it.) */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon_harness.h"
#include "obs_check.h"
#include "tdtest.h"

static td_harness H;
static char dir[64], conf[96];
static int port;

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/td_lscale_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(conf, sizeof conf, "%s/traind.conf", dir);
    port = th_free_port();
    FILE *f = fopen(conf, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "metrics_listen = 127.0.0.1:%d\n", port);
    fclose(f);
    const char *args[] = {"--config", conf, NULL};
    ck_assert_int_eq(th_start(&H, args), 0);
}

static void teardown(void)
{
    int fd = th_connect(&H, NULL);
    json_t *r = th_request(fd, "list", json_pack("{s:s}", "state",
                                                 "running")), *j;
    size_t i;
    json_array_foreach(json_object_get(th_ok(r), "jobs"), i, j) {
        json_int_t id = json_integer_value(json_object_get(j, "id"));
        json_decref(th_job_request(fd, "cancel", id));
        th_wait_state(fd, id, "cancelled", 30000);
    }
    json_decref(r);
    close(fd);
    int st = th_stop(&H);
    th_cleanup(&H);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
    ck_assert_msg(st == 0, "traind exited with status %d", st);
}

/* Synthetic 8x8 input, a conv and a dense layer; `epochs` long. */
static int64_t submit(int fd, const char *name, const char *loss_scale,
                      int epochs)
{
    json_t *spec = json_pack(
        "{s:s, s:{s:i}, s:{s:[i,i], s:i, s:s},"
        " s:{s:[{s:s, s:s, s:i, s:i, s:i}, {s:s, s:s}, {s:s, s:s},"
        "       {s:s, s:s, s:s}]},"
        " s:{s:s, s:f}, s:i, s:i, s:i, s:{s:i, s:i}, s:{s:i, s:b}, s:s}",
        "name", name, "data", "classes", 4, "input", "size", 8, 8,
        "channels", 1, "source", "synthetic", "model", "layers", "type",
        "conv2d", "name", "c1", "channels", 4, "kernel", 3, "pad", 1, "type",
        "relu", "name", "r1", "type", "flatten", "name", "f", "type", "dense",
        "name", "fc", "units", "classes", "optimizer", "type", "adamw", "lr",
        0.001, "batch_size", 8, "epochs", epochs, "threads", 1, "metrics",
        "warmup_steps", 2, "window_steps", 8, "checkpoint", "every_steps", 0,
        "at_epoch_end", 0, "loss_scale", loss_scale);
    ck_assert_ptr_nonnull(spec);
    int64_t id = th_submit(fd, spec);
    ck_assert(th_wait_state(fd, id, "running", 20000));
    return id;
}

/* The body of GET path on the metrics port. */
static char *http_get(const char *path)
{
    char *buf = th_http(port, "GET", path);
    const char *b = strstr(buf, "\r\n\r\n");
    ck_assert_ptr_nonnull(b);
    memmove(buf, b + 4, strlen(b + 4) + 1);
    return buf;
}

START_TEST(test_metrics_top_and_watch)
{
    char err[512], scale[128], skipped[128];
    int fd = th_connect(&H, NULL);
    int64_t id = submit(fd, "scaled", "dynamic", 100000);
    snprintf(scale, sizeof scale,
             "traind_loss_scale{job=\"%lld\",device=\"cpu\"}", (long long)id);
    snprintf(skipped, sizeof skipped,
             "traind_skipped_steps_total{job=\"%lld\",device=\"cpu\"}",
             (long long)id);
    char *m = NULL;
    for (int i = 0; i < 100; i++) { /* until the first snapshot is there */
        free(m);
        m = http_get("/metrics");
        if (strstr(m, scale))
            break;
        usleep(100000);
    }
    ck_assert_msg(oc_prom_check(m, err, sizeof err) == 0, "%s\n%s", err, m);
    /* fp32: nothing overflows, the scale stays at 2^16 for 2000 steps */
    ck_assert_msg(oc_prom_value(m, scale) == 65536, "%s", m);
    ck_assert_msg(oc_prom_value(m, skipped) == 0, "%s", m);
    free(m);
    /* top: the scaled job's line says so */
    char *out = NULL, *e = NULL;
    const char *top[] = {"top", "--once", NULL};
    for (int i = 0; i < 100; i++) { /* until its first window */
        ck_assert_int_eq(th_cli(&H, &out, &e, top), 0);
        if (strstr(out, "loss scale"))
            break;
        free(out);
        free(e);
        out = e = NULL;
        usleep(100000);
    }
    /* 65536, or doubled if 2000 more good steps ran before top looked (a
     * fast CPU runs this job at ~200,000 samples/s) */
    const char *ls = strstr(out, "(loss scale ");
    ck_assert_msg(ls, "%s", out);
    char *end = NULL;
    double v = strtod(ls + 12, &end);
    ck_assert_msg(v >= 65536 && v == ldexp(1.0, ilogb(v)) &&
                      strncmp(end, ", 0 skipped)", 12) == 0, "%s", out);
    free(out);
    free(e);
    json_decref(th_job_request(fd, "cancel", id));
    ck_assert(th_wait_state(fd, id, "cancelled", 30000));
    close(fd);
}
END_TEST

/* A short job followed to its end: watch's plain lines carry the scale,
 * in a window's line, or (when the job ended before watch attached) in
 * the completion summary. */
START_TEST(test_watch_plain)
{
    int fd = th_connect(&H, NULL);
    int64_t id = submit(fd, "short", "dynamic", 1);
    char ids[32], *out = NULL, *e = NULL;
    snprintf(ids, sizeof ids, "%lld", (long long)id);
    const char *watch[] = {"watch", ids, NULL};
    ck_assert_int_eq(th_cli(&H, &out, &e, watch), 0);
    ck_assert_msg(strstr(out, "loss scale 65536, skipped steps 0\n"), "%s",
                  out);
    free(out);
    free(e);
    close(fd);
}
END_TEST

static Suite *lscale_suite(void)
{
    Suite *s = suite_create("lscale_live");
    TCase *tc = tcase_create("live");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_metrics_top_and_watch);
    tcase_add_test(tc, test_watch_plain);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(lscale_suite)
