/* test_sim_findings.c - issue 14's findings 7, 9 and the remaining parts
 * of 11, on the simulated device (what only it can arrange or count).
 *
 * Owns: one test per fix, each failing before it:
 *   7  evaluation overlaps its copies with compute: no whole-stream sync
 *      per validation batch (td_sim_stream_syncs), and the validation loss
 *      and accuracy are the CPU backend's, bitwise the same with the
 *      simulator's jitter on, read from pinned slots that the source
 *      poisons as soon as they are given back;
 *   9  statistics come back without a host function per step
 *      (td_sim_host_funcs), valid once an event recorded after read_stats
 *      has completed;
 *   11 pinned batch slots are made and freed on the job's GPU, not on the
 *      calling thread's current device; page-locking that fails falls back
 *      to pageable memory with a warning (and the simulator stages copies
 *      from it); a GPU whose compute capability the build has no kernel
 *      image for fails create, naming both; step times keep their
 *      resolution hours after create.
 * Never does: share a process between tests (Check forks each; the
 * simulator is configured through the environment and td_sim_reset).
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cuda/backend_cuda.h"
#include "base/error.h"
#include "base/log.h"
#include "base/rng.h"
#include "job/device.h"
#include "job/train.h"
#include "model/model.h"
#include "sim.h"
#include "tdtest.h"

enum { B = 6, C = 2, HW = 9, CLASSES = 5, PER = C * HW * HW };

static void sim_env(const char *name, const char *value)
{
    setenv(name, value, 1);
    ck_assert_int_eq(td_sim_reset(), 0);
}

static td_model *tiny_model(void)
{
    char path[4096], err[256] = "";
    const char *root = getenv("TD_SOURCE_ROOT");
    td_model *m = NULL;
    snprintf(path, sizeof path, "%s/tests/data/tiny-all.json",
             root ? root : ".");
    ck_assert_msg(td_model_load(NULL, path, (td_shape){C, HW, HW}, CLASSES,
                                &m, err, sizeof err) == 0, "%s", err);
    return m;
}

static td_backend_config tiny_config(void)
{
    td_backend_config c;
    memset(&c, 0, sizeof c);
    c.batch = B;
    c.threads = 1;
    c.dtype = TD_F32;
    for (int i = 0; i < 4; i++)
        c.mean[i] = 0.5f, c.std[i] = 0.25f;
    c.seed = 3;
    td_optim_defaults(&c.optim, TD_OPT_SGD);
    c.optim.lr = 0.05;
    return c;
}

static void fill(uint8_t *px, int32_t *labels, int n, uint64_t seed,
                 uint64_t batch)
{
    for (size_t i = 0; i < (size_t)n * PER; i++)
        px[i] = (uint8_t)td_rng_below(seed, batch, i, 256);
    for (int i = 0; i < n; i++)
        labels[i] = (int32_t)td_rng_below(seed + 1, batch, (uint64_t)i,
                                          CLASSES);
}

/* ---- a batch source over a few slots, poisoned when given back -------- */

enum { NSLOT = 3 };

typedef struct memsrc {
    int nbatch, last_n;         /* batches per epoch, samples in the last */
    uint64_t seed;
    int per_epoch;              /* new data each epoch (training) */
    td_slot_allocator al;
    uint8_t *px[NSLOT];
    int32_t *lb[NSLOT];
    int busy[NSLOT];
    int64_t epoch, pos;
    int starved;                /* next() found every slot still held */
} memsrc;

static int src_start(void *self, int64_t epoch, int64_t step)
{
    memsrc *s = self;
    s->epoch = epoch;
    s->pos = step;
    return 0;
}

static int src_next(void *self, td_batch *b, int64_t *wait)
{
    memsrc *s = self;
    int k = 0;
    while (k < NSLOT && s->busy[k])
        k++;
    if (k == NSLOT) {
        s->starved = 1;
        return -ENOBUFS;
    }
    s->busy[k] = 1;
    int n = s->pos == s->nbatch - 1 ? s->last_n : B;
    fill(s->px[k], s->lb[k], n, s->seed,
         (uint64_t)(s->per_epoch ? s->epoch * s->nbatch : 0) +
             (uint64_t)s->pos);
    *b = (td_batch){.data = s->px[k], .labels = s->lb[k], .n = n, .h = HW,
                    .w = HW, .c = C, .layout = TD_LAYOUT_NHWC,
                    .epoch = s->epoch, .step = s->pos,
                    .last_in_epoch = s->pos == s->nbatch - 1,
                    .slot = &s->busy[k]};
    if (++s->pos == s->nbatch) {
        s->pos = 0;
        s->epoch++;
    }
    if (wait)
        *wait = 0;
    return 0;
}

/* A slot given back while its copy still reads it would send these bytes
 * to the device: the results would change. */
static void src_release(void *self, td_batch *b)
{
    memsrc *s = self;
    int k = (int)((int *)b->slot - s->busy);
    memset(s->px[k], 0xa5, (size_t)B * PER);
    for (int i = 0; i < B; i++)
        s->lb[k][i] = CLASSES - 1 - s->lb[k][i] % CLASSES;
    s->busy[k] = 0;
}

static void src_open(memsrc *s, td_slot_allocator al, int nbatch, int last_n,
                     uint64_t seed, int per_epoch, td_batch_source *out)
{
    memset(s, 0, sizeof *s);
    s->nbatch = nbatch;
    s->last_n = last_n;
    s->seed = seed;
    s->per_epoch = per_epoch;
    s->al = al;
    for (int k = 0; k < NSLOT; k++) {
        s->px[k] = al.alloc(al.user, (size_t)B * PER);
        s->lb[k] = al.alloc(al.user, sizeof(int32_t) * B);
        ck_assert_ptr_nonnull(s->px[k]);
        ck_assert_ptr_nonnull(s->lb[k]);
    }
    *out = (td_batch_source){src_start, src_next, src_release, s};
}

static void src_close(memsrc *s)
{
    for (int k = 0; k < NSLOT; k++) {
        ck_assert_int_eq(s->busy[k], 0); /* every slot given back */
        s->al.free(s->al.user, s->px[k]);
        s->al.free(s->al.user, s->lb[k]);
    }
}

static void *heap_alloc(void *user, size_t n)
{
    (void)user;
    return malloc(n);
}

static void heap_free(void *user, void *p)
{
    (void)user;
    free(p);
}

/* ---- finding 7: evaluation --------------------------------------------- */

enum { EPOCHS = 2, TRAIN_BATCHES = 4, VAL_BATCHES = 5, VAL_LAST = 4 };

typedef struct run_out {
    double val_loss[EPOCHS], val_acc[EPOCHS], train_loss[EPOCHS];
    int64_t val_samples[EPOCHS];
    int epochs;
    long syncs;             /* whole-stream syncs during the run */
} run_out;

static int on_epoch(void *user, td_trainer *t, const td_epoch_info *e)
{
    (void)t;
    run_out *o = user;
    if (o->epochs < EPOCHS) {
        o->val_loss[o->epochs] = e->val_loss;
        o->val_acc[o->epochs] = e->val_acc;
        o->train_loss[o->epochs] = e->train_loss;
        o->val_samples[o->epochs] = e->val_samples;
    }
    o->epochs++;
    return 0;
}

/* Two epochs of training, each followed by an evaluation of 5 batches
 * (the last one partial), on `device`; the slots are pinned on the GPU. */
static void train_and_evaluate(const char *device, run_out *o)
{
    char err[512] = "";
    td_model *m = tiny_model();
    td_train_config cfg = {.model = m, .device = device, .epochs = EPOCHS,
                           .steps_per_epoch = TRAIN_BATCHES,
                           .warmup_steps = 0, .backend = tiny_config()};
    const td_gpu_backend *gpu = td_backend_gpu();
    int dev = strncmp(device, "cuda", 4) == 0;
    td_slot_allocator al = {heap_alloc, heap_free, NULL};
    if (dev)
        al = gpu->pinned_allocator(0);
    memsrc tr, va;
    td_batch_source str, sva;
    src_open(&tr, al, TRAIN_BATCHES, B, 21, 1, &str);
    src_open(&va, al, VAL_BATCHES, VAL_LAST, 22, 0, &sva);
    td_trainer *t = NULL;
    ck_assert_msg(td_trainer_create(&cfg, &t, err, sizeof err) == 0, "%s",
                  err);
    td_train_callbacks cb = {.on_epoch = on_epoch, .user = o};
    td_train_result res;
    memset(o, 0, sizeof *o);
    long s0 = td_sim_stream_syncs();
    ck_assert_msg(td_trainer_run(t, &str, &sva, &cb, &res, err,
                                 sizeof err) == 0, "%s", err);
    o->syncs = td_sim_stream_syncs() - s0;
    ck_assert_int_eq(o->epochs, EPOCHS);
    ck_assert_int_eq(tr.starved, 0);
    ck_assert_int_eq(va.starved, 0);
    td_trainer_free(t);
    src_close(&tr);
    src_close(&va);
    td_model_free(m);
}

START_TEST(test_evaluation_overlaps_and_matches_the_cpu)
{
    run_out cpu, gpu, jit;
    td_cuda_register();
    train_and_evaluate("cpu", &cpu);
    ck_assert_int_eq(cpu.syncs, 0);
    train_and_evaluate("cuda:0", &gpu);
    for (int e = 0; e < EPOCHS; e++) {
        ck_assert_int_eq(gpu.val_samples[e],
                         (VAL_BATCHES - 1) * B + VAL_LAST);
        ck_assert_int_eq(cpu.val_samples[e], gpu.val_samples[e]);
        ck_assert_msg(fabs(gpu.val_loss[e] - cpu.val_loss[e]) <=
                          1e-4 * fabs(cpu.val_loss[e]),
                      "epoch %d: validation loss %.9g on the GPU, %.9g on "
                      "the CPU", e, gpu.val_loss[e], cpu.val_loss[e]);
        ck_assert_msg(fabs(gpu.val_acc[e] - cpu.val_acc[e]) <=
                          1.0 / (double)cpu.val_samples[e] + 1e-12,
                      "epoch %d: validation accuracy %.6f on the GPU, %.6f "
                      "on the CPU", e, gpu.val_acc[e], cpu.val_acc[e]);
    }
    /* One td_backend_sync per evaluation (3 streams), none per batch:
     * the serial evaluation synchronised 3 streams per batch. */
    ck_assert_msg(gpu.syncs <= 3 * EPOCHS, "%ld whole-stream syncs in %d "
                  "evaluations of %d batches", gpu.syncs, EPOCHS,
                  VAL_BATCHES);
    /* stream work delayed at random: the same numbers, bitwise */
    sim_env("TD_SIM_JITTER", "5");
    train_and_evaluate("cuda:0", &jit);
    for (int e = 0; e < EPOCHS; e++) {
        ck_assert_msg(jit.val_loss[e] == gpu.val_loss[e] &&
                      jit.val_acc[e] == gpu.val_acc[e] &&
                      jit.train_loss[e] == gpu.train_loss[e],
                      "epoch %d under jitter: validation loss %.9g acc %.6f "
                      "train loss %.9g; without: %.9g %.6f %.9g", e,
                      jit.val_loss[e], jit.val_acc[e], jit.train_loss[e],
                      gpu.val_loss[e], gpu.val_acc[e], gpu.train_loss[e]);
    }
    ck_assert_int_eq(td_sim_races(), 0);
}
END_TEST

/* ---- finding 9: statistics ------------------------------------------ */

/* Steps as the trainer makes them: the statistics of step s are read
 * after the event recorded behind read_stats completed, one step late. */
static void stats_run(const char *kind, int steps, td_step_stats *out)
{
    char err[256] = "";
    td_model *m = tiny_model();
    td_backend_config c = tiny_config();
    td_backend *be = NULL;
    uint8_t px[B * PER];
    int32_t lb[B];
    td_step_stats st[2];
    td_event *ev[2];
    ck_assert_msg(td_backend_create(kind, m, &c, &be, err, sizeof err) == 0,
                  "%s", err);
    for (int i = 0; i < 2; i++)
        ck_assert_ptr_nonnull(ev[i] = be->ops->event_create(be));
    for (int s = 0; s <= steps; s++) {
        if (s < steps) {
            fill(px, lb, B, 31, (uint64_t)s);
            td_batch b = {.data = px, .labels = lb, .n = B, .h = HW, .w = HW,
                          .c = C, .layout = TD_LAYOUT_NHWC};
            ck_assert_int_eq(td_backend_upload(be, &b), 0);
            ck_assert_int_eq(td_backend_train_step(be, 0.05f, s + 1), 0);
            memset(&st[s % 2], 0xff, sizeof st[s % 2]);
            ck_assert_int_eq(td_backend_read_stats(be, &st[s % 2]), 0);
            ck_assert_int_eq(be->ops->event_record(be, ev[s % 2]), 0);
        }
        if (s > 0) { /* the step before, as td__finish reads it */
            ck_assert_int_eq(be->ops->event_sync(be, ev[(s - 1) % 2]), 0);
            out[s - 1] = st[(s - 1) % 2];
        }
    }
    /* and once more through td_backend_sync */
    ck_assert_int_eq(td_backend_read_stats(be, &st[0]), 0); /* zero */
    ck_assert_int_eq(td_backend_sync(be), 0);
    ck_assert_int_eq(st[0].samples, 0);
    for (int i = 0; i < 2; i++)
        be->ops->event_destroy(be, ev[i]);
    td_backend_destroy(be);
    td_model_free(m);
}

START_TEST(test_statistics_without_host_functions)
{
    enum { STEPS = 6 };
    td_step_stats cpu[STEPS], gpu[STEPS], jit[STEPS];
    td_cuda_register();
    stats_run("cpu", STEPS, cpu);
    long before = td_sim_host_funcs();
    stats_run("cuda:0", STEPS, gpu);
    ck_assert_msg(td_sim_host_funcs() == before, "%ld host functions for "
                  "%d steps", td_sim_host_funcs() - before, STEPS);
    sim_env("TD_SIM_JITTER", "7");
    stats_run("cuda:0", STEPS, jit);
    ck_assert_int_eq(td_sim_host_funcs(), 0);
    for (int s = 0; s < STEPS; s++) {
        ck_assert_int_eq(gpu[s].samples, B);
        ck_assert_int_eq(gpu[s].correct, cpu[s].correct);
        ck_assert_msg(fabs(gpu[s].loss_sum - cpu[s].loss_sum) <=
                          1e-4 * cpu[s].loss_sum, "step %d: loss sum %.9g "
                      "on the GPU, %.9g on the CPU", s, gpu[s].loss_sum,
                      cpu[s].loss_sum);
        ck_assert(memcmp(&gpu[s], &jit[s], sizeof gpu[s]) == 0);
    }
}
END_TEST

/* ---- finding 11: pinned slots on the job's GPU, and their fallback ---- */

typedef struct pin_job {
    int dev;
    void *p;
    int pinned;
} pin_job;

static void *pin_on_fresh_thread(void *arg)
{
    pin_job *j = arg;
    td_slot_allocator a = td_backend_gpu()->pinned_allocator(j->dev);
    j->p = a.alloc(a.user, 4096);
    j->pinned = j->p && td_sim_is_pinned(j->p, 4096);
    if (j->p)
        a.free(a.user, j->p);
    return NULL;
}

/* A cuda:1 job's pipeline allocates its slots on the runner's thread,
 * whose current device is 0 unless someone set it: cudaHostAlloc there
 * makes a context on GPU 0. */
START_TEST(test_pinned_slots_are_made_on_the_jobs_gpu)
{
    pthread_t th;
    pin_job j = {.dev = 1};
    sim_env("TD_SIM_DEVICES", "2");
    td_cuda_register();
    ck_assert_int_eq(pthread_create(&th, NULL, pin_on_fresh_thread, &j), 0);
    pthread_join(th, NULL);
    ck_assert_ptr_nonnull(j.p);
    ck_assert_int_eq(j.pinned, 1);
    ck_assert_int_gt(td_sim_calls(1), 0);
    ck_assert_msg(td_sim_calls(0) == 0, "%ld calls with device 0 current",
                  td_sim_calls(0));
}
END_TEST

static atomic_int g_warnings;
static char g_warning[TD_LOG_LINE_MAX];

static void sink(void *user, int level, long job, const char *line)
{
    (void)user;
    (void)job;
    if (level == TD_LOG_WARN && strstr(line, "page-lock") &&
        atomic_fetch_add(&g_warnings, 1) == 0)
        snprintf(g_warning, sizeof g_warning, "%s", line);
}

/* Pinning fails (the driver's limit): the slots come from malloc, a
 * warning says so once, and the simulator stages the copies from them as
 * from any pageable memory (the upload returns once the bytes are staged,
 * so the slot may go back at once). */
START_TEST(test_pinning_failure_falls_back_to_pageable)
{
    char err[256] = "";
    /* one page: the backend's statistics ring, not the batch slots */
    sim_env("TD_SIM_PINNED_KB", "4");
    td_cuda_register();
    td_log_set_sink(sink, NULL);
    td_model *m = tiny_model();
    td_backend_config c = tiny_config();
    td_backend *be = NULL, *cpu = NULL;
    td_step_stats sg, sc;
    ck_assert_msg(td_backend_create("cuda:0", m, &c, &be, err, sizeof err) ==
                  0, "%s", err);
    ck_assert_int_eq(td_backend_create("cpu", m, &c, &cpu, err, sizeof err),
                     0);
    td_slot_allocator a = td_backend_gpu()->pinned_allocator(0);
    uint8_t *px = a.alloc(a.user, B * PER);
    int32_t *lb = a.alloc(a.user, sizeof(int32_t) * B);
    ck_assert_ptr_nonnull(px);
    ck_assert_ptr_nonnull(lb);
    ck_assert_int_eq((uintptr_t)px % 64, 0);
    ck_assert_int_eq(td_sim_is_pinned(px, B * PER), 0);
    ck_assert_int_eq(atomic_load(&g_warnings), 1); /* once per process */
    ck_assert_msg(strstr(g_warning, "pageable"), "%s", g_warning);
    /* the backend uploads from them: staged copies, and correct ones */
    fill(px, lb, B, 41, 0);
    td_batch b = {.data = px, .labels = lb, .n = B, .h = HW, .w = HW, .c = C,
                  .layout = TD_LAYOUT_NHWC};
    long staged = td_sim_pageable_h2d(0);
    ck_assert_int_eq(td_backend_upload(be, &b), 0);
    ck_assert_int_eq(td_sim_pageable_h2d(0) - staged, 2); /* pixels, labels */
    ck_assert_int_eq(td_backend_upload(cpu, &b), 0);
    memset(px, 0xa5, B * PER); /* the slot is free again at once */
    ck_assert_int_eq(td_backend_eval_step(be), 0);
    ck_assert_int_eq(td_backend_eval_step(cpu), 0);
    ck_assert_int_eq(td_backend_read_stats(be, &sg), 0);
    ck_assert_int_eq(td_backend_read_stats(cpu, &sc), 0);
    ck_assert_int_eq(td_backend_sync(be), 0);
    ck_assert_int_eq(sg.samples, B);
    ck_assert_int_eq(sg.correct, sc.correct);
    ck_assert(fabs(sg.loss_sum - sc.loss_sum) <= 1e-4 * sc.loss_sum);
    a.free(a.user, px);
    a.free(a.user, lb);
    td_backend_destroy(be);
    td_backend_destroy(cpu);
    td_model_free(m);
    td_log_set_sink(NULL, NULL);
    ck_assert_int_eq(td_sim_reset(), 0); /* nothing left page-locked */
}
END_TEST

/* ---- finding 11: compute capability ------------------------------------ */

/* The simulated build embeds sm_75, sm_80 and sm_90 code and compute_90
 * PTX (the default build's, meson_options.txt, and a Turing image:
 * tests/gpu/sim/meson.build): a 7.0 card has no kernel image; 8.6 runs the
 * sm_80 code, 12.0 JIT-compiles the PTX. */
START_TEST(test_compute_capability_checked_at_create)
{
    char err[512] = "";
    td_model *m = tiny_model();
    td_backend_config c = tiny_config();
    td_backend *be = NULL;
    sim_env("TD_SIM_DEVICES", "3");
    sim_env("TD_SIM_CC", "7.0,8.6,12.0");
    td_cuda_register();
    long launches = td_sim_launches(0);
    ck_assert_int_eq(td_backend_create("cuda:0", m, &c, &be, err,
                                       sizeof err), TD_E_DEVICE);
    ck_assert_ptr_null(be);
    ck_assert_msg(strstr(err, "cuda:0") && strstr(err, "7.0") &&
                  strstr(err, "sm_80") && strstr(err, "gpu_arch"), "%s",
                  err);
    ck_assert_int_eq(td_sim_launches(0), launches); /* failed before work */
    ck_assert_uint_eq(td_sim_used(0), 0);
    ck_assert_int_eq(td_device_first_unusable(NULL, 0), -1);
    for (int d = 1; d <= 2; d++) {
        char kind[16];
        snprintf(kind, sizeof kind, "cuda:%d", d);
        ck_assert_msg(td_backend_create(kind, m, &c, &be, err, sizeof err) ==
                      0, "%s: %s", kind, err);
        td_backend_destroy(be);
    }
    td_model_free(m);
}
END_TEST

/* ---- finding 11: step times hours after create ------------------------- */

/* 5 h after create, a float of milliseconds since create has a 2 ms
 * resolution: a copy of a few hundred bytes and a tiny step would take 0
 * or 2 ms.  Every interval must still be positive and in order. */
START_TEST(test_step_times_keep_resolution_after_hours)
{
    enum { STEPS = 2 * TD_CUDA_TIMES_KEPT };
    char err[256] = "";
    td_model *m = tiny_model();
    td_backend_config c = tiny_config();
    td_backend *be = NULL;
    uint8_t px[B * PER];
    int32_t lb[B];
    td_cuda_register();
    ck_assert_msg(td_backend_create("cuda:0", m, &c, &be, err, sizeof err) ==
                  0, "%s", err);
    td_sim_advance_clock((uint64_t)5 * 3600 * 1000000000);
    fill(px, lb, B, 51, 0);
    td_batch b = {.data = px, .labels = lb, .n = B, .h = HW, .w = HW, .c = C,
                  .layout = TD_LAYOUT_NHWC};
    double prev_end = 0;
    for (int s = 0; s < STEPS; s++) {
        td_cuda_step_times t;
        ck_assert_int_eq(td_backend_upload(be, &b), 0);
        ck_assert_int_eq(td_backend_train_step(be, 0.05f, s + 1), 0);
        ck_assert_int_eq(td_backend_sync(be), 0);
        ck_assert_int_eq(td_backend_cuda_step_times(be, s, &t), 0);
        ck_assert_msg(t.copy_start > 5 * 3600e3 - 1 &&
                      t.copy_start < 5 * 3600e3 + 60e3, "step %d: copy at "
                      "%.3f ms", s, t.copy_start);
        ck_assert_msg(t.copy_end > t.copy_start &&
                      t.compute_start >= t.copy_end &&
                      t.compute_end > t.compute_start &&
                      t.copy_start >= prev_end,
                      "step %d: copy %.6f..%.6f ms, compute %.6f..%.6f ms, "
                      "the step before ended at %.6f ms", s, t.copy_start,
                      t.copy_end, t.compute_start, t.compute_end, prev_end);
        prev_end = t.compute_end;
    }
    td_backend_destroy(be);
    td_model_free(m);
}
END_TEST

static Suite *sim_findings_suite(void)
{
    Suite *s = suite_create("sim_findings");
    TCase *tc = tcase_create("findings");
    tcase_add_test(tc, test_evaluation_overlaps_and_matches_the_cpu);
    tcase_add_test(tc, test_statistics_without_host_functions);
    tcase_add_test(tc, test_pinned_slots_are_made_on_the_jobs_gpu);
    tcase_add_test(tc, test_pinning_failure_falls_back_to_pageable);
    tcase_add_test(tc, test_compute_capability_checked_at_create);
    tcase_add_test(tc, test_step_times_keep_resolution_after_hours);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(sim_findings_suite)
