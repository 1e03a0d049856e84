/* test_runner_plan.c - a bf16 job's kernel choices through td_runner
 * (job/runner.c, runner_ckpt.c) on synthetic input and the CPU backend:
 * every checkpoint carries the plan's text ("traind.plan"), and a resumed
 * job plans with it again, so it continues bit for bit as the run that
 * stopped even where its own fresh plan would choose other kernels.
 *
 * The choices of the first run are forced by environment switches
 * (TD_CPU_BWDW, TD_CPU_BWDD) to the opposite of the fixed rules' for the
 * second convolution, and the resumed run has no switch and
 * "deterministic": true (the fixed rules, no measurement), so its own
 * plan differs for certain.  A measured job (the default) records its
 * text too, and resumed it does not time its choices again (the
 * checkpoint's are planned) and continues with the uninterrupted run's
 * losses.  Skipped without bf16.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "backend/cpu/caps.h"
#include "base/log.h"
#include "job/runner.h"
#include "job/spec.h"
#include "store/checkpoint.h"
#include "support/jpeggen.h"
#include "tdtest.h"

enum { EPOCHS = 2, PER_EPOCH = 5, ALL = EPOCHS * PER_EPOCH, PAUSE = 4 };

static char *tmp;

static void setup(void) { tmp = td_test_tmpdir("runner_plan"); }

static void teardown(void)
{
    td_test_rmtree(tmp);
    free(tmp);
}

/* 8x8 grey input; c1 (16 channels, reads the input), c2 (16 -> 16, 3x3),
 * dense; bf16, SGD. */
static void parse_spec(td_job_spec *spec, int deterministic)
{
    char err[512];
    json_t *js = json_pack(
        "{s:s, s:{s:i}, s:{s:[i,i], s:i, s:s},"
        " s:{s:[{s:s, s:s, s:i, s:i, s:i}, {s:s, s:s},"
        "       {s:s, s:s, s:i, s:i, s:i}, {s:s, s:s}, {s:s, s:s},"
        "       {s:s, s:s, s:s}]},"
        " s:{s:s, s:f, s:f}, s:i, s:i, s:i, s:i, s:{s:i, s:i},"
        " s:{s:i, s:b}, s:s, s:b}",
        "name", "t", "data", "classes", 4, "input", "size", 8, 8, "channels",
        1, "source", "synthetic", "model", "layers", "type", "conv2d", "name",
        "c1", "channels", 16, "kernel", 3, "pad", 1, "type", "relu", "name",
        "r1", "type", "conv2d", "name", "c2", "channels", 16, "kernel", 3,
        "pad", 1, "type", "relu", "name", "r2", "type", "flatten", "name",
        "f", "type", "dense", "name", "fc", "units", "classes", "optimizer",
        "type", "sgd", "lr", 0.05, "momentum", 0.9, "batch_size", 8,
        "epochs", EPOCHS, "seed", 5, "threads", 1, "metrics", "warmup_steps",
        0, "window_steps", 2, "checkpoint", "every_steps", 0, "at_epoch_end",
        1, "precision", "bf16", "deterministic", deterministic);
    ck_assert_ptr_nonnull(js);
    ck_assert_msg(td_spec_parse(js, NULL, spec, err, sizeof err) == 0, "%s",
                  err);
    json_decref(js);
}

static int g_measured; /* "plan measured" log lines */

static void sink(void *user, int level, long job, const char *line)
{
    (void)user;
    (void)level;
    (void)job;
    if (strstr(line, "cpu backend: plan measured in"))
        __atomic_add_fetch(&g_measured, 1, __ATOMIC_SEQ_CST);
}

typedef struct seen {
    pthread_mutex_t mu;
    double loss[ALL + 1]; /* by step, 1-based */
    int stop_at;
    td_runner *r;
} seen;

static void on_event(void *user, const char *kind, json_t *data)
{
    seen *s = user;
    pthread_mutex_lock(&s->mu);
    json_int_t step = json_integer_value(json_object_get(data, "step"));
    if (strcmp(kind, "step") == 0 && step >= 1 && step <= ALL) {
        s->loss[step] = json_number_value(json_object_get(data, "loss"));
        if (s->stop_at && step == s->stop_at)
            td_runner_stop(s->r, TD_STOP_PAUSE);
    }
    pthread_mutex_unlock(&s->mu);
    json_decref(data);
}

static seen *run_job(const td_job_spec *spec, const char *sub, int resume,
                     int stop_at, td_runner_result *res)
{
    char dir[4200], err[512] = "";
    seen *s = calloc(1, sizeof *s);
    pthread_mutex_init(&s->mu, NULL);
    s->stop_at = stop_at;
    snprintf(dir, sizeof dir, "%s/%s", tmp, sub);
    td_runner_opts o = {.spec = spec, .job = 3, .ckpt_dir = dir,
                        .resume = resume, .synthetic_steps = PER_EPOCH,
                        .event = on_event, .user = s};
    td_runner *r;
    ck_assert_msg(td_runner_create(&o, &r, err, sizeof err) == 0, "%s", err);
    s->r = r;
    ck_assert_msg(td_runner_run(r, res, err, sizeof err) == 0, "%s", err);
    td_runner_free(r);
    return s;
}

/* The newest checkpoint's "traind.plan" in tmp/sub (NULL: none). */
static char *plan_of(const char *sub)
{
    char dir[4200], path[4200], err[512];
    td_ckpt_file *f;
    snprintf(dir, sizeof dir, "%s/%s", tmp, sub);
    ck_assert_msg(td_ckpt_load_latest(dir, &f, path, sizeof path, err,
                                      sizeof err) == 0, "%s", err);
    const char *p = td_ckpt_file_meta_str(f, "traind.plan");
    char *out = p ? strdup(p) : NULL;
    td_ckpt_close(f);
    return out;
}

/* The character of layer L in a plan's text. */
static char at(const char *plan, int L)
{
    const char *s = strchr(plan + 3, ' ');
    ck_assert_ptr_nonnull(s);
    ck_assert_int_gt((int)strlen(s + 1), L);
    return s[1 + L];
}

START_TEST(test_resume_plans_the_checkpoints_choices)
{
    enum { C2 = 3 }; /* input, c1, r1, c2 */
    td_job_spec det, measured;
    td_runner_result res;
    parse_spec(&det, 1);
    parse_spec(&measured, 0);
    /* the fixed rules' plan */
    free(run_job(&det, "f", 0, 0, &res));
    char *rule = plan_of("f");
    ck_assert_ptr_nonnull(rule);
    ck_assert_msg(strncmp(rule, "v2 ", 3) == 0, "%s", rule);
    int bits = at(rule, C2) - '0';
    ck_assert_msg(bits >= 0 && bits <= 3, "%s", rule);
    /* A uninterrupted and B paused, both forced the other way */
    setenv("TD_CPU_BWDW", bits & 1 ? "0" : "1", 1);
    setenv("TD_CPU_BWDD", bits & 2 ? "0" : "1", 1);
    seen *a = run_job(&det, "a", 0, 0, &res);
    seen *b = run_job(&det, "b", 0, PAUSE, &res);
    unsetenv("TD_CPU_BWDW");
    unsetenv("TD_CPU_BWDD");
    ck_assert_int_eq(res.stopped, TD_STOP_PAUSE);
    int64_t paused = res.steps;
    char *forced = plan_of("b");
    ck_assert_ptr_nonnull(forced);
    ck_assert_msg(at(forced, C2) - '0' == (3 - bits),
                  "forced %s against the rules' %s", forced, rule);
    for (int st = 1; st <= paused; st++)
        ck_assert_double_eq(b->loss[st], a->loss[st]);
    /* C resumes B without the switches: the checkpoint's choices */
    seen *c = run_job(&det, "b", 1, 0, &res);
    ck_assert_int_eq(res.stopped, TD_STOP_NONE);
    ck_assert_int_eq(res.steps, ALL);
    char *after = plan_of("b");
    ck_assert_ptr_nonnull(after);
    ck_assert_str_eq(after, forced);
    for (int st = (int)paused + 1; st <= ALL; st++)
        ck_assert_msg(c->loss[st] == a->loss[st],
                      "step %d: loss %.9g resumed, %.9g uninterrupted", st,
                      c->loss[st], a->loss[st]);
    /* a measured job records its choices as well */
    seen *u = run_job(&measured, "m", 0, 0, &res);
    char *m = plan_of("m");
    ck_assert_ptr_nonnull(m);
    /* (its layout may be the other one: under a sanitizer the timings
     * differ) */
    ck_assert_msg(strncmp(m, "v2 ", 3) == 0 && strchr(m + 3, ' ') &&
                      strlen(strchr(m + 3, ' ')) ==
                          strlen(strchr(rule + 3, ' ')),
                  "measured %s, rules %s", m, rule);
    /* and, paused and resumed, does not time them again: the
     * checkpoint's are planned (here the same, from the process's cache
     * of times), and the losses are the uninterrupted run's */
    free(run_job(&measured, "p", 0, PAUSE, &res));
    paused = res.steps;
    g_measured = 0;
    td_log_set_sink(sink, NULL);
    seen *q = run_job(&measured, "p", 1, 0, &res);
    td_log_set_sink(NULL, NULL);
    ck_assert_int_eq(g_measured, 0);
    char *pm = plan_of("p");
    ck_assert_str_eq(pm, m);
    for (int st = (int)paused + 1; st <= ALL; st++)
        ck_assert_double_eq(q->loss[st], u->loss[st]);
    free(u);
    free(q);
    free(pm);
    free(a);
    free(b);
    free(c);
    free(rule);
    free(forced);
    free(after);
    free(m);
    td_spec_free(&det);
    td_spec_free(&measured);
}
END_TEST

static Suite *runner_plan_suite(void)
{
    Suite *s = suite_create("runner_plan");
    TCase *tc = tcase_create("runner_plan");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_resume_plans_the_checkpoints_choices);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    if (!td_cpu_caps_get()->bf16) {
        printf("SKIP: no bf16 on this CPU\n");
        return TD_TEST_SKIP;
    }
    return td_test_run(runner_plan_suite());
}
