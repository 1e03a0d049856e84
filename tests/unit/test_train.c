/* test_train.c - the step loop: it learns, reports every step with its
 * timing and learning rate, evaluates per epoch, stops on request, runs
 * on synthetic input, and resumes from a snapshot to the same result.
 * One OpenMP thread; data are generated (10 classes, 12x12 images). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "base/rng.h"
#include "feeder.h"
#include "job/train.h"
#include "model/model.h"
#include "tdtest.h"

enum { S = 12 };

/* Class k: a bright 3x3 blob at one of 10 places, shifted by up to one
 * pixel, on noise. */
static void gen(td_dataset_mem *d, int n, uint64_t seed)
{
    d->n = n;
    d->h = d->w = S;
    d->c = 1;
    d->classes = 10;
    d->images = malloc((size_t)n * S * S);
    d->labels = malloc(sizeof *d->labels * (size_t)n);
    for (int i = 0; i < n; i++) {
        int k = (int)td_rng_below(seed, 1, (uint64_t)i, 10);
        int cy = 2 + (k / 5) * 6 + (int)td_rng_below(seed, 2, (uint64_t)i, 3);
        int cx = 1 + (k % 5) * 2 + (int)td_rng_below(seed, 3, (uint64_t)i, 2);
        uint8_t *img = d->images + (size_t)i * S * S;
        for (int p = 0; p < S * S; p++)
            img[p] = (uint8_t)td_rng_below(seed, 4, (uint64_t)i * 256 + p, 90);
        for (int y = cy - 1; y <= cy + 1; y++)
            for (int x = cx - 1; x <= cx + 1; x++)
                if (y >= 0 && y < S && x >= 0 && x < S)
                    img[y * S + x] = 230;
        d->labels[i] = k;
    }
}

typedef struct rig {
    td_model *m;
    td_dataset_mem tr, va;
    td_feeder *ftr, *fva;
    td_batch_source str, sva;
    td_train_config cfg;
} rig;

static void rig_init(rig *r, int ntrain, int epochs)
{
    char err[256] = "", path[4096];
    const char *root = getenv("TD_SOURCE_ROOT");
    memset(r, 0, sizeof *r);
    snprintf(path, sizeof path, "%s/config/models/fmnist-cnn.json",
             root ? root : ".");
    int rc = td_model_load(NULL, path, (td_shape){1, S, S}, 10, &r->m, err,
                           sizeof err);
    ck_assert_msg(rc == 0, "%s", err);
    gen(&r->tr, ntrain, 1);
    gen(&r->va, 250, 2);
    td_feeder_config fc = {.batch = 32, .seed = 3, .shuffle = 1,
                           .drop_last = 1};
    ck_assert_int_eq(td_feeder_create(&r->tr, &fc, &r->ftr), 0);
    fc.shuffle = fc.drop_last = 0;
    /* 250 = 7 * 32 + 26: the last validation batch is partial */
    ck_assert_int_eq(td_feeder_create(&r->va, &fc, &r->fva), 0);
    r->str = td_feeder_source(r->ftr);
    r->sva = td_feeder_source(r->fva);
    r->cfg = (td_train_config){
        .model = r->m, .device = "cpu", .epochs = epochs,
        .steps_per_epoch = td_feeder_batches_per_epoch(r->ftr),
        .warmup_steps = 5,
        .backend = {.batch = 32, .threads = 1, .seed = 4, .mean = {0.2f},
                    .std = {0.3f}}};
    td_optim_defaults(&r->cfg.backend.optim, TD_OPT_SGD);
    r->cfg.backend.optim.lr = 0.05;
    r->cfg.backend.optim.weight_decay = 5e-4;
    r->cfg.backend.optim.schedule.type = TD_SCHED_COSINE;
    r->cfg.backend.optim.schedule.warmup_steps = 10;
}

static void rig_free(rig *r)
{
    td_feeder_free(r->ftr);
    td_feeder_free(r->fva);
    td_dataset_mem_free(&r->tr);
    td_dataset_mem_free(&r->va);
    td_model_free(r->m);
}

typedef struct log_t {
    int steps, epochs, stop_at;
    double first_loss, last_loss[20];
    td_step_info info[400];
    td_epoch_info ep[8];
    double rss_mb[8];
} log_t;

static double rss_mb(void)
{
    long pages = 0, rss = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fscanf(f, "%ld %ld", &pages, &rss), 2);
    fclose(f);
    return (double)rss * 4096.0 / (1 << 20);
}

static int on_step(void *user, td_trainer *t, const td_step_info *s)
{
    log_t *l = user;
    if (l->steps == 0)
        l->first_loss = s->loss;
    l->last_loss[l->steps % 20] = s->loss;
    if (l->steps < 400)
        l->info[l->steps] = *s;
    l->steps++;
    return l->stop_at && l->steps >= l->stop_at;
}

static int on_epoch(void *user, td_trainer *t, const td_epoch_info *e)
{
    log_t *l = user;
    l->rss_mb[l->epochs % 8] = rss_mb();
    l->ep[l->epochs++ % 8] = *e;
    return 0;
}

START_TEST(test_learns_and_evaluates)
{
    rig r;
    rig_init(&r, 1600, 3); /* 50 steps per epoch */
    td_trainer *t;
    char err[256] = "";
    ck_assert_int_eq(td_trainer_create(&r.cfg, &t, err, sizeof err), 0);
    static log_t l;
    memset(&l, 0, sizeof l);
    td_train_callbacks cb = {.on_step = on_step, .on_epoch = on_epoch,
                             .user = &l};
    td_train_result res;
    int rc = td_trainer_run(t, &r.str, &r.sva, &cb, &res, err, sizeof err);
    ck_assert_msg(rc == 0, "%s", err);
    ck_assert_int_eq(res.steps, 150);
    ck_assert_int_eq(res.epochs, 3);
    ck_assert_int_eq(l.steps, 150);
    ck_assert_int_eq(l.epochs, 3);
    double tail = 0;
    for (int i = 0; i < 20; i++)
        tail += l.last_loss[i] / 20;
    ck_assert_double_gt(l.first_loss, 1.5); /* about ln 10 */
    ck_assert_double_lt(tail, 0.3 * l.first_loss);
    ck_assert_int_eq(l.ep[2].val_samples, 250); /* partial batch counted */
    ck_assert_double_gt(res.val_acc, 0.8);      /* chance is 0.1 */
    ck_assert_double_eq(res.val_acc, l.ep[2].val_acc);
    ck_assert_double_gt(res.samples_per_s, 0);
    ck_assert_int_eq(res.samples, (150 - 5) * 32);
    ck_assert(!res.stopped);
    /* no memory growth once running: epochs 2 and 3 end at the same RSS
     * (not under ASan, whose quarantine keeps the memory oneDNN allocates
     * and frees inside every primitive execution) */
#ifndef __SANITIZE_ADDRESS__
    ck_assert_double_lt(fabs(l.rss_mb[2] - l.rss_mb[1]), 1.0);
#endif
    td_trainer_free(t);
    rig_free(&r);
}
END_TEST

START_TEST(test_step_reports)
{
    rig r;
    rig_init(&r, 640, 2); /* 20 steps per epoch */
    td_trainer *t;
    char err[256] = "";
    ck_assert_int_eq(td_trainer_create(&r.cfg, &t, err, sizeof err), 0);
    static log_t l;
    memset(&l, 0, sizeof l);
    td_train_callbacks cb = {.on_step = on_step, .user = &l};
    td_train_result res;
    ck_assert_int_eq(td_trainer_run(t, &r.str, NULL, &cb, &res, err,
                                    sizeof err), 0);
    ck_assert_int_eq(l.steps, 40);
    for (int i = 0; i < 40; i++) {
        const td_step_info *s = &l.info[i];
        ck_assert_int_eq(s->step, i);
        ck_assert_int_eq(s->epoch, i / 20);
        ck_assert_int_eq(s->step_in_epoch, i % 20);
        ck_assert_int_eq(s->n, 32);
        ck_assert_double_eq_tol(s->lr, td_schedule_lr(&r.cfg.backend.optim,
                                                      i, 40), 1e-12);
        ck_assert_int_gt(s->compute_ns, 0);
        ck_assert_int_ge(s->data_wait_ns, 0);
        ck_assert_int_ge(s->step_ns, s->compute_ns + s->h2d_ns);
        ck_assert(s->correct >= 0 && s->correct <= 32);
    }
    ck_assert(isnan(res.val_acc)); /* no validation source */
    td_trainer_free(t);
    rig_free(&r);
}
END_TEST

START_TEST(test_stop_at_step_boundary)
{
    rig r;
    rig_init(&r, 640, 2);
    td_trainer *t;
    char err[256] = "";
    ck_assert_int_eq(td_trainer_create(&r.cfg, &t, err, sizeof err), 0);
    static log_t l;
    memset(&l, 0, sizeof l);
    l.stop_at = 7;
    td_train_callbacks cb = {.on_step = on_step, .user = &l};
    td_train_result res;
    ck_assert_int_eq(td_trainer_run(t, &r.str, NULL, &cb, &res, err,
                                    sizeof err), 0);
    ck_assert(res.stopped);
    /* the request came while step 8 was in flight; it completes */
    ck_assert_int_eq(res.steps, 8);
    ck_assert_int_eq(l.steps, 8);
    td_trainer_free(t);
    rig_free(&r);
}
END_TEST

START_TEST(test_synthetic_input)
{
    rig r;
    rig_init(&r, 640, 2);
    r.cfg.synthetic = 1;
    r.cfg.steps_per_epoch = 6;
    td_trainer *t;
    char err[256] = "";
    ck_assert_int_eq(td_trainer_create(&r.cfg, &t, err, sizeof err), 0);
    static log_t l;
    memset(&l, 0, sizeof l);
    td_train_callbacks cb = {.on_step = on_step, .on_epoch = on_epoch,
                             .user = &l};
    td_train_result res;
    ck_assert_int_eq(td_trainer_run(t, NULL, NULL, &cb, &res, err,
                                    sizeof err), 0);
    ck_assert_int_eq(res.steps, 12);
    ck_assert_int_eq(l.epochs, 2);
    for (int i = 0; i < 12; i++)
        ck_assert_int_eq(l.info[i].data_wait_ns, 0);
    /* the same batch every step: its loss falls */
    ck_assert_double_lt(l.info[11].loss, l.info[0].loss);
    td_trainer_free(t);
    rig_free(&r);
}
END_TEST

static float *final_state(td_trainer *t, size_t *n)
{
    *n = td_trainer_snapshot_floats(t);
    float *s = malloc(*n * sizeof *s);
    ck_assert_int_eq(td_trainer_snapshot(t, s, *n), 0);
    return s;
}

/* fmnist-cnn with a dropout layer before its head, for _i == 1. */
static void use_dropout_model(rig *r)
{
    char path[] = "/tmp/td-dropout-model-XXXXXX.json", err[256] = "";
    int fd = mkstemps(path, 5);
    ck_assert_int_ge(fd, 0);
    static const char txt[] =
        "{\"name\": \"drop\", \"layers\": ["
        "{\"type\": \"conv2d\", \"name\": \"c1\", \"channels\": 8, "
        "\"kernel\": 3, \"pad\": 1}, {\"type\": \"relu\", \"name\": \"r1\"},"
        "{\"type\": \"maxpool\", \"name\": \"p1\", \"kernel\": 2},"
        "{\"type\": \"flatten\", \"name\": \"f\"},"
        "{\"type\": \"dropout\", \"name\": \"d\", \"rate\": 0.5},"
        "{\"type\": \"dense\", \"name\": \"fc\", \"units\": \"classes\"}]}";
    ck_assert_int_eq(write(fd, txt, sizeof txt - 1), (ssize_t)(sizeof txt - 1));
    close(fd);
    td_model_free(r->m);
    int rc = td_model_load(NULL, path, (td_shape){1, S, S}, 10, &r->m, err,
                           sizeof err);
    unlink(path);
    ck_assert_msg(rc == 0, "%s", err);
    r->cfg.model = r->m;
}

/* Two epochs straight, or one epoch, a snapshot, a new trainer restored
 * from it and the second epoch: the same state, bit for bit.  _i 1: with
 * dropout, whose masks follow the global step (a restored trainer must not
 * draw step 0's masks again). */
START_TEST(test_resume_from_snapshot)
{
    rig r;
    rig_init(&r, 320, 2); /* 10 steps per epoch */
    if (_i == 1)
        use_dropout_model(&r);
    r.cfg.backend.optim.type = TD_OPT_ADAMW;
    r.cfg.backend.optim.lr = 1e-3;
    char err[256] = "";
    td_trainer *a, *b;
    td_train_result res;
    size_t n;
    ck_assert_int_eq(td_trainer_create(&r.cfg, &a, err, sizeof err), 0);
    ck_assert_int_eq(td_trainer_run(a, &r.str, NULL, NULL, &res, err,
                                    sizeof err), 0);
    float *want = final_state(a, &n);
    td_trainer_free(a);

    r.cfg.epochs = 1;
    ck_assert_int_eq(td_trainer_create(&r.cfg, &a, err, sizeof err), 0);
    ck_assert_int_eq(td_trainer_run(a, &r.str, NULL, NULL, &res, err,
                                    sizeof err), 0);
    float *mid = final_state(a, &n);
    td_trainer_free(a);
    r.cfg.epochs = 2;
    ck_assert_int_eq(td_trainer_create(&r.cfg, &b, err, sizeof err), 0);
    const td_train_position at = {.steps = 10, .epoch = 1};
    ck_assert_int_eq(td_trainer_restore(b, mid, n, &at), 0);
    ck_assert_int_eq(td_trainer_run(b, &r.str, NULL, NULL, &res, err,
                                    sizeof err), 0);
    ck_assert_int_eq(res.steps, 20);
    float *got = final_state(b, &n);
    ck_assert_mem_eq(got, want, n * sizeof *got);
    ck_assert(memcmp(mid, want, n * sizeof *mid) != 0);
    free(want);
    free(mid);
    free(got);
    td_trainer_free(b);
    rig_free(&r);
}
END_TEST

START_TEST(test_config_errors)
{
    rig r;
    rig_init(&r, 320, 0);
    td_trainer *t = (td_trainer *)1;
    char err[256] = "";
    ck_assert_int_eq(td_trainer_create(&r.cfg, &t, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "epochs: must be >= 1");
    r.cfg.epochs = 1;
    r.cfg.device = "quantum";
    ck_assert_int_ne(td_trainer_create(&r.cfg, &t, err, sizeof err), 0);
    ck_assert_ptr_null(t);
    ck_assert_str_eq(err, "device: unknown backend \"quantum\"");
    rig_free(&r);
}
END_TEST

static Suite *train_suite(void)
{
    Suite *s = suite_create("train");
    TCase *tc = tcase_create("train");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_learns_and_evaluates);
    tcase_add_test(tc, test_step_reports);
    tcase_add_test(tc, test_stop_at_step_boundary);
    tcase_add_test(tc, test_synthetic_input);
    tcase_add_loop_test(tc, test_resume_from_snapshot, 0, 2);
    tcase_add_test(tc, test_config_errors);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(train_suite)
