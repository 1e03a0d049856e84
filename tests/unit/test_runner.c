/* test_runner.c - one job end to end through td_runner (job/runner.c),
 * on synthetic input and the CPU backend, against what runner.h and
 * docs/job-spec.md say a job of that spec does: the step, window and epoch
 * events it reports (counted and numbered), the checkpoints it takes
 * (every N steps, at each epoch end, a final one, `keep` left on disk),
 * the model's forward FLOPs computed here by hand, a pause that resumes
 * into exactly the losses of an uninterrupted run, a cancel that takes no
 * final checkpoint, and spec errors that name the field. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "base/error.h"
#include "job/runner.h"
#include "job/spec.h"
#include "store/checkpoint.h"
#include "support/jpeggen.h"
#include "tdtest.h"

enum { EPOCHS = 2, PER_EPOCH = 10, WINDOW = 4, EVERY = 3, KEEP = 2 };

static char *tmp;

static void setup(void) { tmp = td_test_tmpdir("runner"); }

static void teardown(void)
{
    td_test_rmtree(tmp);
    free(tmp);
}

/* An 8x8 grey input, conv 3x3 -> 4 channels (pad 1), relu, flatten,
 * dense to 4 classes: forward FLOPs 2 * 9 * 4 * 64 (conv) + 2 * 256 * 4
 * (dense) = 6656.  With `hidden`, a dense layer of that many units before
 * the last, and batches of 1 (fast steps). */
static void parse_spec(td_job_spec *spec, int every, int hidden)
{
    char err[512];
    json_t *js = json_pack(
        "{s:s, s:{s:i}, s:{s:[i,i], s:i, s:s},"
        " s:{s:[{s:s, s:s, s:i, s:i, s:i}, {s:s, s:s}, {s:s, s:s},"
        "       {s:s, s:s, s:s}]},"
        " s:{s:s, s:f, s:f}, s:i, s:i, s:i, s:i, s:{s:i, s:i},"
        " s:{s:i, s:i, s:b}}",
        "name", "t", "data", "classes", 4, "input", "size", 8, 8, "channels",
        1, "source", "synthetic", "model", "layers", "type", "conv2d", "name",
        "c1", "channels", 4, "kernel", 3, "pad", 1, "type", "relu", "name",
        "r1", "type", "flatten", "name", "f", "type", "dense", "name", "fc",
        "units", "classes", "optimizer", "type", "sgd", "lr", 0.05,
        "momentum", 0.9, "batch_size", 8, "epochs", EPOCHS, "seed", 3,
        "threads", 1, "metrics", "warmup_steps", 0, "window_steps", WINDOW,
        "checkpoint", "every_steps", every, "keep", KEEP, "at_epoch_end", 1);
    ck_assert_ptr_nonnull(js);
    if (hidden) {
        json_t *layers = json_object_get(json_object_get(js, "model"),
                                         "layers");
        json_array_insert_new(layers, 3,
                              json_pack("{s:s, s:s, s:i}", "type", "dense",
                                        "name", "h", "units", hidden));
        json_object_set_new(js, "batch_size", json_integer(1));
    }
    ck_assert_msg(td_spec_parse(js, NULL, spec, err, sizeof err) == 0, "%s",
                  err);
    json_decref(js);
}

typedef struct seen {
    pthread_mutex_t mu;
    int steps, windows, epochs, ckpts, bad_order;
    int64_t last_step;
    double loss[EPOCHS * PER_EPOCH + 1]; /* by step number, 1-based */
    double lr[EPOCHS * PER_EPOCH + 1];   /* the same */
    int64_t epoch_step[EPOCHS];
    double epoch_loss[EPOCHS], epoch_acc[EPOCHS], epoch_train_s[EPOCHS];
    int hist_events, hist_len;       /* "history" events (a resume) */
    double hist_loss0;               /* their epoch 0 train_loss */
    int64_t ckpt_step[32];
    td_runner *r;          /* for stops from the step event */
    int stop_at;           /* 0: never */
    enum td_stop_reason stop_why;
    int hold_writer_until; /* 0: never; else the first checkpoint event
                              (on the writer thread) waits for this step */
    int snaps;             /* Prometheus snapshots (opts.snapshot) */
    double snap_ep_loss, snap_ep_acc; /* the first one's last epoch */
} seen;

static void on_snapshot(void *user, const td_prom_job *p)
{
    seen *s = user;
    pthread_mutex_lock(&s->mu);
    if (s->snaps++ == 0) {
        s->snap_ep_loss = p->epoch_train_loss;
        s->snap_ep_acc = p->epoch_train_acc;
    }
    pthread_mutex_unlock(&s->mu);
}

static void on_event(void *user, const char *kind, json_t *data)
{
    seen *s = user;
    pthread_mutex_lock(&s->mu);
    json_int_t step = json_integer_value(json_object_get(data, "step"));
    if (strcmp(kind, "step") == 0) {
        s->bad_order |= step != s->last_step + 1;
        s->last_step = step;
        if (step >= 1 && step <= EPOCHS * PER_EPOCH) {
            s->loss[step] = json_number_value(json_object_get(data, "loss"));
            s->lr[step] = json_number_value(json_object_get(data, "lr"));
        }
        s->steps++;
        if (s->stop_at && step == s->stop_at)
            td_runner_stop(s->r, s->stop_why);
    } else if (strcmp(kind, "window") == 0) {
        s->windows++;
    } else if (strcmp(kind, "epoch") == 0) {
        if (s->epochs < EPOCHS) {
            s->epoch_step[s->epochs] = step;
            s->epoch_loss[s->epochs] = json_number_value(
                json_object_get(data, "train_loss"));
            s->epoch_acc[s->epochs] = json_number_value(
                json_object_get(data, "train_acc"));
            s->epoch_train_s[s->epochs] = json_number_value(
                json_object_get(data, "train_s"));
        }
        s->epochs++;
    } else if (strcmp(kind, "history") == 0) {
        json_t *h = json_object_get(data, "history");
        s->hist_events++;
        s->hist_len = (int)json_array_size(h);
        s->hist_loss0 = json_number_value(json_object_get(
            json_array_get(h, 0), "train_loss"));
    } else if (strcmp(kind, "checkpoint") == 0) {
        if (s->ckpts < 32 && json_is_true(json_object_get(data, "ok")))
            s->ckpt_step[s->ckpts] = step;
        int hold = s->hold_writer_until && s->ckpts == 0;
        s->ckpts++;
        pthread_mutex_unlock(&s->mu);
        /* The writer thread stalls here (at most 60 s) while training
         * goes on, so both snapshot buffers fill up whatever the speed of
         * the build (a sanitizer's or not). */
        for (int ms = 0; hold && ms < 60000; ms++) {
            pthread_mutex_lock(&s->mu);
            hold = s->last_step < s->hold_writer_until;
            pthread_mutex_unlock(&s->mu);
            if (hold)
                usleep(1000);
        }
        json_decref(data);
        return;
    }
    pthread_mutex_unlock(&s->mu);
    json_decref(data);
}

static int count_files(const char *dir, const char *suffix)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name), k = strlen(suffix);
        n += l > k && strcmp(e->d_name + l - k, suffix) == 0;
    }
    closedir(d);
    return n;
}

/* Runs the spec with checkpoints into tmp/<sub>; events into *s. */
static int run_job(const td_job_spec *spec, const char *sub, int resume,
                   seen *s, td_runner_result *res, char *err, size_t cap)
{
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/%s", tmp, sub);
    td_runner_opts o = {.spec = spec, .ckpt_dir = dir, .resume = resume,
                        .synthetic_steps = PER_EPOCH, .event = on_event,
                        .snapshot = on_snapshot, .user = s};
    td_runner *r;
    int rc = td_runner_create(&o, &r, err, cap);
    if (rc)
        return rc;
    s->r = r;
    ck_assert_int_eq(td_runner_steps_total(r), EPOCHS * PER_EPOCH);
    rc = td_runner_run(r, res, err, cap);
    td_runner_free(r);
    return rc;
}

static void seen_init(seen *s)
{
    memset(s, 0, sizeof *s);
    pthread_mutex_init(&s->mu, NULL);
}

/* Runs the spec in tmp/<sub> (s fresh) until a pause asked after step
 * `at`: the paused run's result in *res. */
static void run_paused(const td_job_spec *spec, const char *sub, int at,
                       seen *s, td_runner_result *res)
{
    char err[512] = "";
    seen_init(s);
    s->stop_at = at;
    s->stop_why = TD_STOP_PAUSE;
    ck_assert_msg(run_job(spec, sub, 0, s, res, err, sizeof err) == 0, "%s",
                  err);
    ck_assert_int_eq(res->stopped, TD_STOP_PAUSE);
}

/* Resumes the job in tmp/<sub> (c fresh) from the pause whose result is
 * *res, which then holds the resumed run's. */
static void run_resumed(const td_job_spec *spec, const char *sub, seen *c,
                        td_runner_result *res)
{
    char err[512] = "";
    seen_init(c);
    c->last_step = res->steps;
    ck_assert_msg(run_job(spec, sub, 1, c, res, err, sizeof err) == 0, "%s",
                  err);
}

/* 2 epochs of 10 steps, windows of 4, a checkpoint every 3 steps and at
 * each epoch end, keep 2. */
START_TEST(test_job_does_what_the_spec_says)
{
    td_job_spec spec;
    parse_spec(&spec, EVERY, 0);
    seen s;
    seen_init(&s);
    td_runner_result res;
    char err[512] = "";
    ck_assert_msg(run_job(&spec, "ck", 0, &s, &res, err, sizeof err) == 0,
                  "%s", err);
    ck_assert_int_eq(res.steps, EPOCHS * PER_EPOCH);
    ck_assert_int_eq(res.epochs, EPOCHS);
    ck_assert_int_eq(res.stopped, TD_STOP_NONE);
    /* one step event per step, numbered 1.. in order */
    ck_assert_int_eq(s.steps, EPOCHS * PER_EPOCH);
    ck_assert_int_eq(s.bad_order, 0);
    /* a window every WINDOW steps after the (empty) warm-up */
    ck_assert_int_eq(s.windows, EPOCHS * PER_EPOCH / WINDOW);
    ck_assert_int_eq(s.epochs, EPOCHS);
    ck_assert_int_eq(s.epoch_step[0], PER_EPOCH);
    ck_assert_int_eq(s.epoch_step[1], 2 * PER_EPOCH);
    /* due: the boundaries after steps 3, 6, 9, 12, 15, 18 and the epoch
     * end 10, each written or skipped (the writer busy), and the final
     * checkpoint after step 20, never skipped */
    ck_assert_int_eq(res.checkpoints_failed, 0);
    ck_assert_int_ge(res.checkpoints_written, 2);
    ck_assert_int_eq(res.checkpoints_written + res.checkpoints_skipped, 8);
    ck_assert_int_eq(s.ckpts, (int)res.checkpoints_written);
    ck_assert_int_eq(s.ckpt_step[s.ckpts - 1], 2 * PER_EPOCH);
    for (int k = 0; k < s.ckpts; k++) {
        int64_t st = s.ckpt_step[k];
        ck_assert_msg(st % EVERY == 0 || st % PER_EPOCH == 0,
                      "checkpoint at step %lld", (long long)st);
    }
    char dir[4200], name[256];
    snprintf(dir, sizeof dir, "%s/ck", tmp);
    ck_assert_int_eq(count_files(dir, ".safetensors"), KEEP);
    /* The older kept checkpoint holds its epoch's sums so far, the step in
     * flight when it was taken included: (step mod 10) batches of 8. */
    int64_t older = s.ckpt_step[s.ckpts - 2];
    char path[4500];
    td_ckpt_filename(older, name, sizeof name);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    td_ckpt_file *f;
    ck_assert_msg(td_ckpt_open(path, &f, err, sizeof err) == 0, "%s", err);
    const td_ckpt_meta *m = td_ckpt_file_meta(f);
    int64_t done = older % PER_EPOCH;
    double want = 0;
    for (int64_t st = older - done + 1; st <= older; st++)
        want += 8 * s.loss[st];
    ck_assert_int_eq(m->has_epoch_sums, 1);
    ck_assert_int_eq(m->epoch_samples, 8 * done);
    ck_assert_int_le(m->epoch_correct, m->epoch_samples);
    ck_assert_msg(fabs(m->epoch_loss_sum - want) <= 1e-5 * (1 + want),
                  "step %lld: loss sum %.9g, steps' losses give %.9g",
                  (long long)older, m->epoch_loss_sum, want);
    td_ckpt_close(f);
    td_ckpt_filename(2 * PER_EPOCH, name, sizeof name);
    ck_assert_ptr_nonnull(strstr(res.last_checkpoint, name));
    ck_assert_int_eq(access(res.last_checkpoint, R_OK), 0);
    /* no validation data: no validation figures */
    ck_assert(isnan(res.val_loss) && isnan(res.val_acc));
    ck_assert_int_eq(res.bad_samples, 0);
    ck_assert_double_eq_tol(res.model_mflop, 6656e-6, 1e-12);
    ck_assert(res.samples_per_s > 0);
    ck_assert_str_ne(res.verdict, "");
    td_spec_free(&spec);
}
END_TEST

/* A run with room for one window of metrics.window_steps after its
 * warm-up gets smaller ones, at least TD_RUN_MIN_WINDOWS (5): 20 steps,
 * warm-up 2, windows of 10 closed one window (a 198-step job with the
 * defaults closed one, at step 120, and plotted one point); and a run
 * shorter than warm-up + window, 5 windows too, not 2. */
START_TEST(test_short_run_gets_several_windows)
{
    static const int warm_win[][2] = {{2, 10}, {20, 100}};
    for (int k = 0; k < 2; k++) {
        td_job_spec spec;
        parse_spec(&spec, 0, 0);
        spec.metrics.warmup_steps = warm_win[k][0];
        spec.metrics.window_steps = warm_win[k][1];
        seen s;
        seen_init(&s);
        td_runner_result res;
        char err[512] = "", sub[8];
        snprintf(sub, sizeof sub, "w%d", k);
        ck_assert_msg(run_job(&spec, sub, 0, &s, &res, err, sizeof err) == 0,
                      "%s", err);
        ck_assert_msg(s.windows >= 5, "warm-up %d, window %d: %d windows",
                      warm_win[k][0], warm_win[k][1], s.windows);
        td_spec_free(&spec);
    }
}
END_TEST

/* The cosine schedule ends at optimizer.schedule.min_lr: every step's lr
 * between min_lr and lr, falling, the last within 1% of (lr - min_lr)
 * above min_lr (it ended at 0 whatever min_lr said). */
START_TEST(test_cosine_ends_at_min_lr)
{
    td_job_spec spec;
    parse_spec(&spec, 1000, 0);
    spec.optimizer.schedule.type = TD_SCHED_COSINE;
    spec.optimizer.schedule.warmup_steps = 0;
    spec.optimizer.schedule.min_lr = 0.02;
    seen s;
    seen_init(&s);
    td_runner_result res;
    char err[512] = "";
    ck_assert_msg(run_job(&spec, "cos", 0, &s, &res, err, sizeof err) == 0,
                  "%s", err);
    int n = EPOCHS * PER_EPOCH;
    ck_assert_int_eq(res.steps, n);
    ck_assert_double_eq_tol(s.lr[1], 0.05, 1e-9);
    for (int k = 2; k <= n; k++) {
        ck_assert_msg(s.lr[k] <= s.lr[k - 1] && s.lr[k] >= 0.02,
                      "step %d: lr %.9g after %.9g", k, s.lr[k],
                      s.lr[k - 1]);
    }
    ck_assert_msg(s.lr[n] < 0.02 + 0.01 * 0.03, "last lr %.9g", s.lr[n]);
    td_spec_free(&spec);
}
END_TEST

/* A pause asked for in step 7's event (the trainer reports a step while
 * the next one runs, so it stops after step 7 or 8) takes a checkpoint
 * there; resuming from it gives the remaining steps the losses of the
 * uninterrupted run (runner.h, Resume). */
START_TEST(test_pause_then_resume_matches_uninterrupted)
{
    td_job_spec spec;
    parse_spec(&spec, 0, 0); /* only epoch ends and the stops */
    char err[512] = "";
    td_runner_result res;
    seen *a = malloc(sizeof *a), *b = malloc(sizeof *b),
         *c = malloc(sizeof *c);
    seen_init(a);
    ck_assert_msg(run_job(&spec, "a", 0, a, &res, err, sizeof err) == 0,
                  "%s", err);
    seen_init(b);
    b->stop_at = 7;
    b->stop_why = TD_STOP_PAUSE;
    ck_assert_msg(run_job(&spec, "b", 0, b, &res, err, sizeof err) == 0,
                  "%s", err);
    ck_assert_int_eq(res.stopped, TD_STOP_PAUSE);
    int at = (int)res.steps;
    ck_assert(at == 7 || at == 8);
    ck_assert_int_eq(b->steps, at);
    ck_assert_int_eq(b->ckpt_step[b->ckpts - 1], at);
    for (int st = 1; st <= at; st++)
        ck_assert_double_eq(b->loss[st], a->loss[st]);
    seen_init(c);
    c->last_step = at;
    ck_assert_msg(run_job(&spec, "b", 1, c, &res, err, sizeof err) == 0,
                  "%s", err);
    ck_assert_int_eq(res.stopped, TD_STOP_NONE);
    ck_assert_int_eq(res.steps, EPOCHS * PER_EPOCH);
    ck_assert_int_eq(c->steps, EPOCHS * PER_EPOCH - at);
    ck_assert_int_eq(c->bad_order, 0);
    for (int st = at + 1; st <= EPOCHS * PER_EPOCH; st++)
        ck_assert_msg(c->loss[st] == a->loss[st],
                      "step %d: loss %.9g resumed, %.9g uninterrupted", st,
                      c->loss[st], a->loss[st]);
    /* The interrupted epoch's train loss and accuracy cover all of it:
     * the checkpoint carried the sums of the steps before the pause. */
    ck_assert_int_eq(c->epochs, EPOCHS);
    ck_assert_msg(c->epoch_loss[0] == a->epoch_loss[0],
                  "epoch 1 train loss %.9g resumed, %.9g uninterrupted",
                  c->epoch_loss[0], a->epoch_loss[0]);
    ck_assert(c->epoch_acc[0] == a->epoch_acc[0]);
    ck_assert(c->epoch_loss[1] == a->epoch_loss[1]);
    free(a);
    free(b);
    free(c);
    td_spec_free(&spec);
}
END_TEST

/* A checkpoint keeps the curves of the epochs before it
 * (traind.history), and a job resumed from it hands them back in a
 * "history" event: what the daemon restores when an epoch's record had
 * not reached the disk before a kill -9. */
START_TEST(test_checkpoint_carries_history)
{
    td_job_spec spec;
    parse_spec(&spec, 0, 0);
    char err[512] = "";
    td_runner_result res;
    seen *a = malloc(sizeof *a), *c = malloc(sizeof *c);
    run_paused(&spec, "h", 13, a, &res); /* in the second epoch */
    ck_assert_int_eq(a->epochs, 1);
    td_ckpt_file *f;
    ck_assert_msg(td_ckpt_open(res.last_checkpoint, &f, err, sizeof err) == 0,
                  "%s", err);
    const char *txt = td_ckpt_file_meta_str(f, "traind.history");
    ck_assert_ptr_nonnull(txt);
    json_t *h = json_loads(txt, 0, NULL);
    ck_assert_int_eq(json_array_size(h), 1);
    json_t *e0 = json_array_get(h, 0);
    ck_assert_int_eq(json_integer_value(json_object_get(e0, "epoch")), 0);
    ck_assert_int_eq(json_integer_value(json_object_get(e0, "step")),
                     PER_EPOCH);
    ck_assert(json_number_value(json_object_get(e0, "train_loss")) ==
              a->epoch_loss[0]);
    ck_assert_ptr_nonnull(json_object_get(e0, "lr"));
    json_decref(h);
    td_ckpt_close(f);
    run_resumed(&spec, "h", c, &res);
    ck_assert_int_eq(c->hist_events, 1);
    ck_assert_int_eq(c->hist_len, 1);
    ck_assert(c->hist_loss0 == a->epoch_loss[0]);
    free(a);
    free(c);
    td_spec_free(&spec);
}
END_TEST

/* A cancel stops at a step boundary (after step 4 or 5, as above) and
 * takes no checkpoint. */
START_TEST(test_cancel_takes_no_final_checkpoint)
{
    td_job_spec spec;
    parse_spec(&spec, 0, 0);
    seen s;
    seen_init(&s);
    s.stop_at = 4;
    s.stop_why = TD_STOP_CANCEL;
    td_runner_result res;
    char err[512] = "", dir[4200];
    ck_assert_msg(run_job(&spec, "x", 0, &s, &res, err, sizeof err) == 0,
                  "%s", err);
    ck_assert_int_eq(res.stopped, TD_STOP_CANCEL);
    ck_assert(res.steps == 4 || res.steps == 5);
    ck_assert_int_eq(res.checkpoints_written, 0);
    ck_assert_str_eq(res.last_checkpoint, "");
    snprintf(dir, sizeof dir, "%s/x", tmp);
    ck_assert_int_eq(count_files(dir, ".safetensors"), 0);
    td_spec_free(&spec);
}
END_TEST

/* A checkpoint every step, and a writer held up: the first checkpoint's
 * event (on the writer thread) waits until training has reached step 18.
 * So when the job ends both snapshot buffers are busy or just freed, and
 * the steps in between found them busy.  Each due checkpoint is written
 * or skipped once: the boundaries after steps 1..19 and the final one
 * after step 20 (the step loop has no boundary after its last step),
 * which is waited for if need be, and waiting is neither a skip nor
 * another count (the final one waits for a free buffer,
 * docs/checkpoints.md). */
START_TEST(test_final_checkpoint_wait_is_not_a_skip)
{
    td_job_spec spec;
    parse_spec(&spec, 1, 256);
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/e", tmp);
    seen s;
    seen_init(&s);
    s.hold_writer_until = EPOCHS * PER_EPOCH - 2;
    td_runner_result res;
    char err[512] = "";
    ck_assert_msg(run_job(&spec, "e", 0, &s, &res, err, sizeof err) == 0,
                  "%s", err);
    ck_assert_int_eq(res.steps, EPOCHS * PER_EPOCH);
    ck_assert_int_eq(res.checkpoints_failed, 0);
    ck_assert_int_eq(s.ckpt_step[s.ckpts - 1], EPOCHS * PER_EPOCH);
    ck_assert_int_gt(res.checkpoints_skipped, 0); /* the writer was held */
    ck_assert_msg(res.checkpoints_written + res.checkpoints_skipped ==
                      EPOCHS * PER_EPOCH,
                  "%lld written + %lld skipped for %d due",
                  (long long)res.checkpoints_written,
                  (long long)res.checkpoints_skipped, EPOCHS * PER_EPOCH);
    ck_assert_int_eq(count_files(dir, ".safetensors"), KEEP);
    td_spec_free(&spec);
}
END_TEST

/* A checkpoint folder that cannot be created (its parent is a file here;
 * a read-only or vanished state folder in the field).  Every due
 * checkpoint failed with only "checkpoint writer: Not a directory" in the
 * job's log, was neither counted as failed nor sent as a failed
 * checkpoint event, and the job ended with "the checkpoint was not
 * written": no folder named, no reason. */
START_TEST(test_uncreatable_checkpoint_folder_is_named)
{
    td_job_spec spec;
    parse_spec(&spec, EVERY, 0);
    char file[4200], err[1024] = "";
    snprintf(file, sizeof file, "%s/afile", tmp);
    FILE *f = fopen(file, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    seen s;
    seen_init(&s);
    td_runner_result res;
    ck_assert_int_eq(run_job(&spec, "afile/ck", 0, &s, &res, err,
                             sizeof err), -EIO);
    ck_assert_msg(strstr(err, "afile/ck") && strstr(err, "Not a directory"),
                  "the error names neither the folder nor why: %s", err);
    ck_assert_msg(res.checkpoints_failed > 0, "%lld failed",
                  (long long)res.checkpoints_failed);
    ck_assert_int_eq(res.checkpoints_written, 0);
    ck_assert_int_eq(s.ckpts, (int)res.checkpoints_failed); /* ok: false */
    td_spec_free(&spec);
}
END_TEST

/* A pause whose boundary never comes: asked at the job's last step, after
 * which only the last epoch's end and evaluation remain.  The job has
 * done everything, so it is complete, with its final checkpoint; before,
 * the result said paused (the daemon showed it `suspended` with nothing
 * left to train, until a `resume` found its final checkpoint). */
START_TEST(test_pause_at_the_last_step_completes)
{
    td_job_spec spec;
    parse_spec(&spec, 0, 0);
    seen s;
    seen_init(&s);
    s.stop_at = EPOCHS * PER_EPOCH;
    s.stop_why = TD_STOP_PAUSE;
    td_runner_result res;
    char err[512] = "";
    ck_assert_msg(run_job(&spec, "z", 0, &s, &res, err, sizeof err) == 0,
                  "%s", err);
    ck_assert_int_eq(res.steps, EPOCHS * PER_EPOCH);
    ck_assert_int_eq(res.epochs, EPOCHS);
    ck_assert_msg(res.stopped == TD_STOP_NONE, "a job with every step "
                  "done ended stopped (%d), not completed", res.stopped);
    ck_assert_int_eq(s.ckpt_step[s.ckpts - 1], EPOCHS * PER_EPOCH);
    td_spec_free(&spec);
}
END_TEST

/* A resumed job's Prometheus figures of the last finished epoch (train
 * loss and accuracy, validation when there is one) are those of the epoch
 * before its checkpoint, from its first snapshot on.  Before, they were
 * unknown (absent from /metrics) until the resumed job finished an epoch
 * of its own. */
START_TEST(test_resume_keeps_the_last_epochs_figures)
{
    td_job_spec spec;
    parse_spec(&spec, 0, 0);
    td_runner_result res;
    seen *a = malloc(sizeof *a), *c = malloc(sizeof *c);
    run_paused(&spec, "p", 13, a, &res); /* in the second epoch */
    ck_assert_int_eq(a->epochs, 1);
    run_resumed(&spec, "p", c, &res);
    ck_assert_int_gt(c->snaps, 0);
    ck_assert_msg(c->snap_ep_loss == a->epoch_loss[0],
                  "the resumed job's first snapshot: last epoch's train "
                  "loss %g, epoch 1 had %g", c->snap_ep_loss,
                  a->epoch_loss[0]);
    ck_assert(c->snap_ep_acc == a->epoch_acc[0]);
    free(a);
    free(c);
    td_spec_free(&spec);
}
END_TEST

/* A job resumed with fewer steps left than its metrics warm-up measures
 * no throughput of its own: its result gives the last measured epoch's
 * samples/s and verdict, not none (the daemon's reason said "2 epochs,
 * 0.0 samples/s, ..., verdict none"). */
START_TEST(test_resume_near_the_end_keeps_a_throughput)
{
    td_job_spec spec;
    parse_spec(&spec, 0, 0);
    spec.metrics.warmup_steps = 5;
    td_runner_result res;
    seen *a = malloc(sizeof *a), *c = malloc(sizeof *c);
    run_paused(&spec, "n", EPOCHS * PER_EPOCH - 3, a, &res);
    ck_assert_int_gt(res.steps, EPOCHS * PER_EPOCH - 5); /* < a warm-up */
    run_resumed(&spec, "n", c, &res);
    ck_assert_int_eq(res.stopped, TD_STOP_NONE);
    ck_assert_msg(isfinite(res.samples_per_s) && res.samples_per_s > 0,
                  "samples/s %g", res.samples_per_s);
    ck_assert_msg(strcmp(res.verdict, "none") != 0, "verdict %s",
                  res.verdict);
    free(a);
    free(c);
    td_spec_free(&spec);
}
END_TEST

/* An epoch that spans a pause: its train_s is its whole training time,
 * the part before the pause (the checkpoint keeps it, in
 * traind.epoch_train_s) and the part after the resume, without the time
 * in between.  Before, it was the part after the resume only (a pause at
 * 90% of an epoch gave a tenth of its time). */
START_TEST(test_resumed_epoch_train_s_covers_the_epoch)
{
    td_job_spec spec;
    parse_spec(&spec, 0, 0);
    char err[512] = "";
    td_runner_result res;
    seen *a = malloc(sizeof *a), *c = malloc(sizeof *c);
    run_paused(&spec, "s", 7, a, &res);
    ck_assert_int_eq(a->epochs, 0);
    td_ckpt_file *f;
    ck_assert_msg(td_ckpt_open(res.last_checkpoint, &f, err, sizeof err) == 0,
                  "%s", err);
    const char *txt = td_ckpt_file_meta_str(f, "traind.epoch_train_s");
    ck_assert_msg(txt != NULL, "the checkpoint does not keep the epoch's "
                  "training time so far");
    double before = strtod(txt, NULL);
    td_ckpt_close(f);
    ck_assert(before > 0);
    run_resumed(&spec, "s", c, &res);
    ck_assert_int_eq(c->epochs, EPOCHS);
    ck_assert_msg(c->epoch_train_s[0] > before, "epoch 1 train_s %g, %g of "
                  "it before the pause", c->epoch_train_s[0], before);
    free(a);
    free(c);
    td_spec_free(&spec);
}
END_TEST

/* What td_runner_create refuses names the part of the spec at fault. */
START_TEST(test_create_errors_name_the_field)
{
    char err[512] = "", models[4200];
    json_error_t je;
    td_job_spec spec;
    td_runner *r;
    snprintf(models, sizeof models, "%s/none", tmp);
    json_t *js = json_loads(
        "{\"model\": \"no-such-model\", \"input\": {\"source\": "
        "\"synthetic\", \"size\": 8, \"channels\": 1}, \"data\": "
        "{\"classes\": 4}, \"optimizer\": {\"lr\": 0.1}, \"threads\": 1}",
        0, &je);
    ck_assert_msg(td_spec_parse(js, NULL, &spec, err, sizeof err) == 0, "%s",
                  err);
    json_decref(js);
    td_runner_opts o = {.spec = &spec, .models_dir = models};
    ck_assert_int_ne(td_runner_create(&o, &r, err, sizeof err), 0);
    ck_assert_msg(strncmp(err, "model", 5) == 0 &&
                      strstr(err, "no-such-model"),
                  "%s", err);
    td_spec_free(&spec);
    char data[4200];
    snprintf(data, sizeof data, "%s/nothing-here", tmp);
    js = json_pack("{s:s, s:{s:s}, s:{s:i, s:i}, s:{s:f}, s:i}", "model",
                   "fmnist-cnn", "data", "train", data, "input", "size", 28,
                   "channels", 1, "optimizer", "lr", 0.1, "threads", 1);
    ck_assert_msg(td_spec_parse(js, NULL, &spec, err, sizeof err) == 0, "%s",
                  err);
    json_decref(js);
    const char *root = getenv("TD_SOURCE_ROOT");
    snprintf(models, sizeof models, "%s/config/models", root ? root : ".");
    ck_assert_int_ne(td_runner_create(&o, &r, err, sizeof err), 0);
    ck_assert_msg(strncmp(err, "data.train", 10) == 0 &&
                      strstr(err, "nothing-here"),
                  "%s", err);
    td_spec_free(&spec);
}
END_TEST

/* spec with `set` (td_spec_apply_set) applied. */
static void respec(const td_job_spec *a, const char *set, td_job_spec *b)
{
    char err[512];
    json_t *js = td_spec_to_json(a);
    ck_assert_msg(td_spec_apply_set(js, set, err, sizeof err) == 0, "%s",
                  err);
    ck_assert_msg(td_spec_parse(js, NULL, b, err, sizeof err) == 0, "%s",
                  err);
    json_decref(js);
}

/* How a job runs is not what it trains: a paused job resumes with more
 * threads, another metrics window, checkpoint cadence and name (before,
 * "checkpoint ... belongs to another job spec"), and trains the same
 * batches to the same losses; another learning rate is still refused. */
START_TEST(test_resume_with_other_run_knobs)
{
    td_job_spec spec, t2, w, k, n, lr;
    parse_spec(&spec, 0, 0);
    respec(&spec, "threads=2", &t2);
    ck_assert_uint_eq(td_spec_hash(&t2), td_spec_hash(&spec));
    /* The ThreadSanitizer run keeps one OpenMP thread (scripts/test.sh:
     * libgomp is not instrumented, its barriers look like races): it
     * resumes with the other knobs only. */
    const char *omp = getenv("OMP_NUM_THREADS");
    respec(omp && atoi(omp) == 1 ? &spec : &t2, "metrics.window_steps=5",
           &w);
    respec(&w, "checkpoint.keep=5", &k);
    respec(&k, "name=renamed", &n);
    respec(&spec, "optimizer.lr=0.07", &lr);
    ck_assert_uint_eq(td_spec_hash(&n), td_spec_hash(&spec));
    ck_assert_uint_ne(td_spec_hash(&lr), td_spec_hash(&spec));
    char err[512] = "";
    td_runner_result res;
    seen *a = malloc(sizeof *a), *c = malloc(sizeof *c);
    seen_init(a);
    ck_assert_msg(run_job(&spec, "ka", 0, a, &res, err, sizeof err) == 0,
                  "%s", err);
    run_paused(&spec, "kb", 7, c, &res);
    int at = (int)res.steps;
    seen_init(c);
    c->last_step = at;
    ck_assert_int_eq(run_job(&lr, "kb", 1, c, &res, err, sizeof err),
                     TD_E_SPEC);
    ck_assert_msg(strstr(err, "belongs to another job spec"), "%s", err);
    run_resumed(&n, "kb", c, &res);
    ck_assert_int_eq(res.steps, EPOCHS * PER_EPOCH);
    ck_assert_int_eq(c->steps, EPOCHS * PER_EPOCH - at);
    /* 2 threads may sum in another order: the same batches, not bitwise */
    for (int st = at + 1; st <= EPOCHS * PER_EPOCH; st++)
        ck_assert_msg(fabs(c->loss[st] - a->loss[st]) <=
                          1e-4 * fabs(a->loss[st]),
                      "step %d: loss %.9g resumed, %.9g uninterrupted", st,
                      c->loss[st], a->loss[st]);
    free(a);
    free(c);
    td_spec_free(&spec);
    td_spec_free(&t2);
    td_spec_free(&w);
    td_spec_free(&k);
    td_spec_free(&n);
    td_spec_free(&lr);
}
END_TEST

static Suite *runner_suite(void)
{
    Suite *s = suite_create("runner");
    TCase *tc = tcase_create("runner");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_job_does_what_the_spec_says);
    tcase_add_test(tc, test_short_run_gets_several_windows);
    tcase_add_test(tc, test_cosine_ends_at_min_lr);
    tcase_add_test(tc, test_pause_then_resume_matches_uninterrupted);
    tcase_add_test(tc, test_resume_with_other_run_knobs);
    tcase_add_test(tc, test_checkpoint_carries_history);
    tcase_add_test(tc, test_cancel_takes_no_final_checkpoint);
    tcase_add_test(tc, test_final_checkpoint_wait_is_not_a_skip);
    tcase_add_test(tc, test_uncreatable_checkpoint_folder_is_named);
    tcase_add_test(tc, test_create_errors_name_the_field);
    tcase_add_test(tc, test_pause_at_the_last_step_completes);
    tcase_add_test(tc, test_resume_keeps_the_last_epochs_figures);
    tcase_add_test(tc, test_resume_near_the_end_keeps_a_throughput);
    tcase_add_test(tc, test_resumed_epoch_train_s_covers_the_epoch);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(runner_suite)
