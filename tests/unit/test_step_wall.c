/* test_step_wall.c - do the step times add up to the wall clock?
 *
 * A job through td_runner (synthetic input, CPU backend) whose checkpoint
 * snapshots cost a tenth of a step or so (a 4M-parameter dense layer,
 * batches of 1, a checkpoint every step: the writer skips some), timed
 * from outside with this process's own CLOCK_MONOTONIC at the events it
 * reports.  Every moment of
 * training belongs to some step (docs/design.md, "Where each metric comes
 * from": "step time: from one step's start to the next step's start (so
 * boundary work counts)"), evaluation excepted, so an epoch's wall_s plus
 * its eval_s, and the windows' wall_s, must cover what the outside clock
 * saw.  The bounds are ratios that a loaded 2-core machine cannot break:
 * both clocks see the same preemptions, and the ends of what each
 * measures differ by a few function calls. */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "job/runner.h"
#include "job/spec.h"
#include "support/jpeggen.h"
#include "tdtest.h"

enum { EPOCHS = 2, PER_EPOCH = 40, WINDOW = 10, EVERY = 1 };

static char *tmp;

static void setup(void) { tmp = td_test_tmpdir("stepwall"); }

static void teardown(void)
{
    td_test_rmtree(tmp);
    free(tmp);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

typedef struct seen {
    pthread_mutex_t mu;
    int steps, windows, epochs, misnumbered;
    int64_t step_no;         /* the last step event's "step" */
    double first_step_at, last_step_at, first_step_s;
    double window_wall_s, window_samples, ckpt_s, phase_gap;
    double epoch_at[EPOCHS], epoch_wall_s[EPOCHS], epoch_eval_s[EPOCHS];
} seen;

static double num(json_t *o, const char *k)
{
    return json_number_value(json_object_get(o, k));
}

static void on_event(void *user, const char *kind, json_t *d)
{
    seen *s = user;
    double at = now_s();
    pthread_mutex_lock(&s->mu);
    if (strcmp(kind, "step") == 0) {
        json_t *ph = json_object_get(d, "phases_s");
        double sum = 0;
        const char *k;
        json_t *v;
        json_object_foreach(ph, k, v)
            sum += json_number_value(v);
        double gap = fabs(sum - num(d, "step_s"));
        s->phase_gap = gap > s->phase_gap ? gap : s->phase_gap;
        s->ckpt_s += num(ph, "checkpoint");
        if (s->steps++ == 0) {
            s->first_step_at = at;
            s->first_step_s = num(d, "step_s");
        }
        s->last_step_at = at;
        s->step_no = json_integer_value(json_object_get(d, "step"));
    } else if (strcmp(kind, "window") == 0) {
        s->windows++;
        s->window_wall_s += num(d, "wall_s");
        s->window_samples += num(d, "samples");
        /* a window closes as its last step is reported: its extent is
         * numbered as the step events are */
        json_int_t last = json_integer_value(json_object_get(d,
                                                             "last_step"));
        s->misnumbered += last != s->step_no ||
                          json_integer_value(json_object_get(
                              d, "first_step")) != last - WINDOW + 1;
    } else if (strcmp(kind, "epoch") == 0 && s->epochs < EPOCHS) {
        s->epoch_at[s->epochs] = at;
        s->epoch_wall_s[s->epochs] = num(d, "wall_s");
        s->epoch_eval_s[s->epochs] = num(d, "eval_s");
        s->epochs++;
    }
    pthread_mutex_unlock(&s->mu);
    json_decref(d);
}

/* 64x64 grey input, flatten, dense 1024 (4.2M weights: with momentum a
 * 34 MB snapshot), dense 4; batches of 1, one thread. */
static void parse_spec(td_job_spec *spec)
{
    char err[512];
    json_t *js = json_pack(
        "{s:s, s:{s:i}, s:{s:[i,i], s:i, s:s},"
        " s:{s:[{s:s, s:s}, {s:s, s:s, s:i}, {s:s, s:s, s:s}]},"
        " s:{s:s, s:f, s:f}, s:i, s:i, s:i, s:i, s:{s:i, s:i},"
        " s:{s:i, s:i, s:b}}",
        "name", "wall", "data", "classes", 4, "input", "size", 64, 64,
        "channels", 1, "source", "synthetic", "model", "layers", "type",
        "flatten", "name", "f", "type", "dense", "name", "h", "units", 1024,
        "type", "dense", "name", "fc", "units", "classes", "optimizer",
        "type", "sgd", "lr", 0.01, "momentum", 0.9, "batch_size", 1,
        "epochs", EPOCHS, "seed", 5, "threads", 1, "metrics", "warmup_steps",
        0, "window_steps", WINDOW, "checkpoint", "every_steps", EVERY,
        "keep", 1, "at_epoch_end", 1);
    ck_assert_ptr_nonnull(js);
    ck_assert_msg(td_spec_parse(js, NULL, spec, err, sizeof err) == 0, "%s",
                  err);
    json_decref(js);
}

START_TEST(test_step_times_cover_the_wall_clock)
{
    td_job_spec spec;
    parse_spec(&spec);
    seen s;
    memset(&s, 0, sizeof s);
    pthread_mutex_init(&s.mu, NULL);
    char dir[4200], err[512] = "";
    snprintf(dir, sizeof dir, "%s/ck", tmp);
    td_runner_opts o = {.spec = &spec, .ckpt_dir = dir,
                        .synthetic_steps = PER_EPOCH, .event = on_event,
                        .user = &s};
    td_runner *r;
    td_runner_result res;
    ck_assert_msg(td_runner_create(&o, &r, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(td_runner_run(r, &res, err, sizeof err) == 0, "%s", err);
    td_runner_free(r);
    td_spec_free(&spec);
    ck_assert_int_eq(s.steps, EPOCHS * PER_EPOCH);
    ck_assert_int_eq(s.windows, EPOCHS * PER_EPOCH / WINDOW);
    ck_assert_int_eq(s.misnumbered, 0);
    ck_assert_int_eq(s.epochs, EPOCHS);
    ck_assert_int_gt(res.checkpoints_written, 0);
    /* the phases sum to the step (attribution) */
    ck_assert_double_le(s.phase_gap, 1e-6);
    /* the second epoch: from the first epoch's event to its own, the
     * outside clock saw the epoch's steps, its evaluation, and the
     * boundary work in between */
    double outside = s.epoch_at[1] - s.epoch_at[0];
    double inside = s.epoch_wall_s[1] + s.epoch_eval_s[1];
    /* the windows: every step from the second to the last, as seen from
     * the first step event to the last */
    double outside_w = s.last_step_at - s.first_step_at;
    double inside_w = s.window_wall_s - s.first_step_s +
                      s.epoch_eval_s[0] + s.epoch_eval_s[1];
    printf("epoch 2: %.4f s of steps+eval, %.4f s outside (%.3f); job: "
           "%.4f s in windows, %.4f s outside (%.3f); checkpoint phase "
           "%.4f s\n", inside, outside, inside / outside, inside_w,
           outside_w, inside_w / outside_w, s.ckpt_s);
    /* a checkpoint in no step's wall time left out about 8% here */
    ck_assert_msg(inside >= 0.96 * outside && inside <= 1.04 * outside,
                  "epoch 2: wall_s + eval_s = %.4f s, the outside clock "
                  "%.4f s", inside, outside);
    ck_assert_msg(inside_w >= 0.96 * outside_w &&
                  inside_w <= 1.04 * outside_w,
                  "windows: wall_s = %.4f s, the outside clock %.4f s",
                  inside_w, outside_w);
    /* the job's samples/s (its result, the record's) and the windows'
     * count the same samples over the same time (warm-up 0, no
     * evaluation) */
    double wsps = s.window_samples / s.window_wall_s;
    ck_assert_msg(res.samples_per_s >= 0.96 * wsps &&
                  res.samples_per_s <= 1.04 * wsps,
                  "the job's %.1f samples/s, its windows' %.1f",
                  res.samples_per_s, wsps);
}
END_TEST

static Suite *step_wall_suite(void)
{
    Suite *s = suite_create("step_wall");
    TCase *tc = tcase_create("wall");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_step_times_cover_the_wall_clock);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(step_wall_suite)
