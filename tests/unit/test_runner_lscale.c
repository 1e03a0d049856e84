/* test_runner_lscale.c - loss scaling through td_runner (job/runner.c) on
 * synthetic input and the CPU backend (issue 15): the spec's loss_scale
 * reaches the backend, an overflow injected at step 4 (the runner's test
 * option ls_poison_step, the backend's hook) shows in the step events
 * ("skipped", "loss_scale" halved, "skipped_steps" cumulative), in the
 * window events and in the Prometheus snapshot (traind_loss_scale,
 * traind_skipped_steps_total); the checkpoint carries the scaler
 * ("traind.loss_scale") and a paused job resumes into the uninterrupted
 * run's scale, skipped count and (AdamW, whose step count leaves skipped
 * steps out) bitwise its losses; a job resumed with another loss_scale or
 * at another precision starts the scale fresh and keeps the skipped
 * count; "off" reports none of it. */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/error.h"
#include "job/runner.h"
#include "job/spec.h"
#include "obs/prom.h"
#include "store/checkpoint.h"
#include "support/jpeggen.h"
#include "tdtest.h"

enum { EPOCHS = 2, PER_EPOCH = 6, WINDOW = 4, ALL = EPOCHS * PER_EPOCH,
       POISON = 4 };

static char *tmp;

static void setup(void) { tmp = td_test_tmpdir("runner_lscale"); }

static void teardown(void)
{
    td_test_rmtree(tmp);
    free(tmp);
}

/* 8x8 grey synthetic input, conv + relu + dense, AdamW. */
static void parse_spec_at(td_job_spec *spec, json_t *loss_scale,
                          const char *precision)
{
    char err[512];
    json_t *js = json_pack(
        "{s:s, s:{s:i}, s:{s:[i,i], s:i, s:s},"
        " s:{s:[{s:s, s:s, s:i, s:i, s:i}, {s:s, s:s}, {s:s, s:s},"
        "       {s:s, s:s, s:s}]},"
        " s:{s:s, s:f, s:f}, s:i, s:i, s:i, s:i, s:{s:i, s:i},"
        " s:{s:i, s:b}, s:o}",
        "name", "t", "data", "classes", 4, "input", "size", 8, 8, "channels",
        1, "source", "synthetic", "model", "layers", "type", "conv2d", "name",
        "c1", "channels", 4, "kernel", 3, "pad", 1, "type", "relu", "name",
        "r1", "type", "flatten", "name", "f", "type", "dense", "name", "fc",
        "units", "classes", "optimizer", "type", "adamw", "lr", 0.01,
        "weight_decay", 0.01, "batch_size", 8, "epochs", EPOCHS, "seed", 5,
        "threads", 1, "metrics", "warmup_steps", 0, "window_steps", WINDOW,
        "checkpoint", "every_steps", 0, "at_epoch_end", 1, "loss_scale",
        loss_scale);
    ck_assert_ptr_nonnull(js);
    json_object_set_new(js, "precision", json_string(precision));
    ck_assert_msg(td_spec_parse(js, NULL, spec, err, sizeof err) == 0, "%s",
                  err);
    json_decref(js);
}

static void parse_spec(td_job_spec *spec, json_t *loss_scale)
{
    parse_spec_at(spec, loss_scale, "fp32");
}

typedef struct seen {
    pthread_mutex_t mu;
    int steps, windows, has_scale, stop_at;
    double loss[ALL + 1], scale[ALL + 1]; /* by step, 1-based */
    int skipped[ALL + 1];
    int64_t skipped_total[ALL + 1];
    double win_scale;
    int64_t win_skipped;
    char prom[16384];  /* the latest Prometheus rendering */
    td_runner *r;
} seen;

static void on_event(void *user, const char *kind, json_t *data)
{
    seen *s = user;
    pthread_mutex_lock(&s->mu);
    json_int_t step = json_integer_value(json_object_get(data, "step"));
    json_t *ls = json_object_get(data, "loss_scale");
    if (strcmp(kind, "step") == 0 && step >= 1 && step <= ALL) {
        s->steps++;
        s->loss[step] = json_number_value(json_object_get(data, "loss"));
        s->has_scale |= ls != NULL;
        s->scale[step] = json_number_value(ls);
        s->skipped[step] = json_is_true(json_object_get(data, "skipped"));
        s->skipped_total[step] = json_integer_value(
            json_object_get(data, "skipped_steps"));
        if (s->stop_at && step == s->stop_at)
            td_runner_stop(s->r, TD_STOP_PAUSE);
    } else if (strcmp(kind, "window") == 0) {
        s->windows++;
        s->win_scale = json_number_value(ls);
        s->win_skipped = json_integer_value(
            json_object_get(data, "skipped_steps"));
    }
    pthread_mutex_unlock(&s->mu);
    json_decref(data);
}

static void on_snapshot(void *user, const td_prom_job *pj)
{
    seen *s = user;
    pthread_mutex_lock(&s->mu);
    ck_assert_int_ge(td_prom_render(pj, 1, NULL, s->prom, sizeof s->prom),
                     0);
    pthread_mutex_unlock(&s->mu);
}

static seen *run_job(const td_job_spec *spec, const char *sub, int resume,
                     int stop_at, int64_t poison, td_runner_result *res)
{
    char dir[4200], err[512] = "";
    seen *s = calloc(1, sizeof *s);
    pthread_mutex_init(&s->mu, NULL);
    s->stop_at = stop_at;
    snprintf(dir, sizeof dir, "%s/%s", tmp, sub);
    td_runner_opts o = {.spec = spec, .job = 7, .ckpt_dir = dir,
                        .resume = resume, .synthetic_steps = PER_EPOCH,
                        .event = on_event, .snapshot = on_snapshot,
                        .user = s, .ls_poison_step = poison};
    td_runner *r;
    ck_assert_msg(td_runner_create(&o, &r, err, sizeof err) == 0, "%s", err);
    s->r = r;
    ck_assert_msg(td_runner_run(r, res, err, sizeof err) == 0, "%s", err);
    td_runner_free(r);
    return s;
}

/* The line of metric `name` in s->prom, its value in *v; 0 if absent. */
static int prom_value(const seen *s, const char *name, double *v)
{
    char key[128];
    snprintf(key, sizeof key, "\n%s{job=\"7\",device=\"cpu\"} ", name);
    const char *p = strstr(s->prom, key);
    if (!p)
        return 0;
    *v = strtod(p + strlen(key), NULL);
    return 1;
}

START_TEST(test_overflow_in_events_and_metrics)
{
    td_job_spec off, dyn;
    td_runner_result res;
    parse_spec(&off, json_string("off"));
    parse_spec(&dyn, json_string("dynamic"));
    seen *a = run_job(&off, "off", 0, 0, POISON, &res);
    seen *b = run_job(&dyn, "dyn", 0, 0, POISON, &res);
    ck_assert_int_eq(res.steps, ALL);
    /* off: no loss scaling anywhere, the hook does nothing */
    ck_assert_int_eq(a->has_scale, 0);
    double v;
    ck_assert_int_eq(prom_value(a, "traind_loss_scale", &v), 0);
    ck_assert_int_eq(prom_value(a, "traind_skipped_steps_total", &v), 0);
    for (int st = 1; st <= ALL; st++) {
        ck_assert_msg(b->scale[st] == (st < POISON ? 65536 : 32768),
                      "step %d: loss_scale %g", st, b->scale[st]);
        ck_assert_int_eq(b->skipped[st], st == POISON);
        ck_assert_int_eq(b->skipped_total[st], st >= POISON);
        /* up to the skipped step's own forward the parameters are those
         * of the unscaled run (power-of-two scaling is exact in fp32) */
        if (st <= POISON)
            ck_assert_msg(b->loss[st] == a->loss[st], "step %d: %.9g vs "
                          "%.9g", st, b->loss[st], a->loss[st]);
    }
    /* the step after the skipped one starts from other parameters */
    ck_assert(b->loss[POISON + 1] != a->loss[POISON + 1]);
    ck_assert_int_ge(b->windows, 2);
    ck_assert(b->win_scale == 32768);
    ck_assert_int_eq(b->win_skipped, 1);
    ck_assert_int_eq(prom_value(b, "traind_loss_scale", &v), 1);
    ck_assert(v == 32768);
    ck_assert_int_eq(prom_value(b, "traind_skipped_steps_total", &v), 1);
    ck_assert(v == 1);
    ck_assert_msg(strstr(b->prom, "# TYPE traind_skipped_steps_total "
                         "counter"), "%s", b->prom);
    /* the final checkpoint carries the scaler */
    char dir[4200], path[4200], e[256];
    td_ckpt_file *f = NULL;
    snprintf(dir, sizeof dir, "%s/dyn", tmp);
    ck_assert_int_eq(td_ckpt_load_latest(dir, &f, path, sizeof path, e,
                                         sizeof e), 0);
    const char *m = td_ckpt_file_meta_str(f, "traind.loss_scale");
    ck_assert_ptr_nonnull(m);
    json_t *j = json_loads(m, 0, NULL);
    ck_assert(json_number_value(json_object_get(j, "scale")) == 32768);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "skipped")), 1);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "good")),
                     ALL - POISON);
    ck_assert_str_eq(json_string_value(json_object_get(j, "mode")),
                     "dynamic");
    json_decref(j);
    td_ckpt_close(f);
    free(a);
    free(b);
    td_spec_free(&off);
    td_spec_free(&dyn);
}
END_TEST

/* Paused after the skipped step, resumed: the scaler comes back. */
START_TEST(test_resume_restores_the_scaler)
{
    td_job_spec dyn, stat;
    td_runner_result res;
    parse_spec(&dyn, json_string("dynamic"));
    parse_spec(&stat, json_real(1024));
    seen *a = run_job(&dyn, "a", 0, 0, POISON, &res);
    seen *b = run_job(&dyn, "b", 0, POISON + 2, POISON, &res);
    int at = (int)res.steps;
    ck_assert_int_ge(at, POISON + 2);
    ck_assert_int_lt(at, ALL);
    seen *b2 = run_job(&dyn, "b2", 0, POISON + 2, POISON, &res);
    ck_assert_int_eq(res.steps, at);
    seen *b3 = run_job(&dyn, "b3", 0, POISON + 2, POISON, &res);
    ck_assert_int_eq(res.steps, at);
    /* no poison on resume: the checkpoint's state alone */
    seen *c = run_job(&dyn, "b", 1, 0, 0, &res);
    ck_assert_int_eq(res.steps, ALL);
    ck_assert_int_eq(c->steps, ALL - at);
    for (int st = at + 1; st <= ALL; st++) {
        ck_assert(c->scale[st] == 32768);
        ck_assert_int_eq(c->skipped_total[st], 1);
        ck_assert_int_eq(c->skipped[st], 0);
        ck_assert_msg(c->loss[st] == a->loss[st], "step %d: loss %.9g "
                      "resumed, %.9g uninterrupted", st, c->loss[st],
                      a->loss[st]);
    }
    /* the same checkpoint resumed with a static scale: fresh scale, the
     * skipped count kept (the hash leaves loss_scale out) */
    seen *d = run_job(&stat, "b2", 1, 0, 0, &res);
    ck_assert_int_eq(res.steps, ALL);
    ck_assert_int_eq(d->steps, ALL - at);
    for (int st = at + 1; st <= ALL; st++) {
        ck_assert_msg(d->scale[st] == 1024, "step %d: %g", st, d->scale[st]);
        ck_assert_int_eq(d->skipped_total[st], 1);
    }
    /* resumed at another precision (tf32: fp32 on the CPU): the scale
     * starts fresh at 2^16, the skipped count is kept */
    td_job_spec tf32;
    parse_spec_at(&tf32, json_string("dynamic"), "tf32");
    seen *e = run_job(&tf32, "b3", 1, 0, 0, &res);
    ck_assert_int_eq(res.steps, ALL);
    ck_assert_int_eq(e->steps, ALL - at);
    for (int st = at + 1; st <= ALL; st++) {
        ck_assert_msg(e->scale[st] == 65536, "step %d: %g", st, e->scale[st]);
        ck_assert_int_eq(e->skipped_total[st], 1);
    }
    free(b3);
    free(e);
    td_spec_free(&tf32);
    free(a);
    free(b);
    free(b2);
    free(c);
    free(d);
    td_spec_free(&dyn);
    td_spec_free(&stat);
}
END_TEST

static Suite *runner_lscale_suite(void)
{
    Suite *s = suite_create("runner_lscale");
    TCase *tc = tcase_create("runner_lscale");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_overflow_in_events_and_metrics);
    tcase_add_test(tc, test_resume_restores_the_scaler);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(runner_lscale_suite)
