/* test_sim_graphs.c - the CUDA backend's training step captured as CUDA
 * graphs (issue 15), and the simulator's stream capture, on the simulated
 * device.
 *
 * What is checked:
 *  - graphs on and off give BITWISE the same per-step losses, parameters,
 *    optimizer state and running statistics over 10 steps whose lr
 *    changes every step, then a short batch (evaluated, eagerly): SGD with
 *    Nesterov momentum, dropout (its draws move with the step) and lr
 *    multipliers (one run frozen); AdamW (its bias corrections move with
 *    t) with label smoothing and the warm-up step at create;
 *  - one capture per batch buffer, one graph launch per full step with
 *    lr > 0; a step at lr 0 and the short batch run eagerly;
 *  - auto: the first eager steps are timed and the rule decides;
 *  - upload k+2 waits for the whole step k under graphs (consumed[] is
 *    recorded after the launch): measured with the simulator's clock;
 *  - the race detector (strict here) stays quiet;
 *  - the simulator refuses what stream capture forbids, one test each,
 *    and replays a graph with the values of capture time.
 * Each test runs in its own process (Check forks).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cuda/backend_cuda.h"
#include "base/error.h"
#include "base/rng.h"
#include "model/model.h"
#include "sim.h"
#include "ref_models.h"
#include "tdtest.h"

enum { BATCH = 6, STEPS = 10, SHORT = 4 };

typedef struct run {
    td_model *m;
    td_backend *be;
    float *mult;
    double loss[STEPS + 1];
    float *snap;
    size_t nsnap;
    td_cuda_graph_info gi;
    td_ls_state ls; /* the scaler after the last training step */
} run;

/* The compute type and loss scaling of config() (test_16_bit_and_loss_
 * scaling_bitwise changes them). */
static enum td_dtype g_dt = TD_F32;
static float g_loss_scale;
static int64_t g_poison;

static td_backend_config config(enum td_optim_type opt, int graphs)
{
    td_backend_config c;
    memset(&c, 0, sizeof c);
    c.batch = BATCH;
    c.threads = 1;
    c.dtype = g_dt;
    c.loss_scale = g_loss_scale;
    c.ls_poison_step = g_poison;
    for (int i = 0; i < 4; i++) {
        c.mean[i] = 0.45f;
        c.std[i] = 0.25f;
    }
    c.seed = 23;
    td_optim_defaults(&c.optim, opt);
    if (opt == TD_OPT_SGD) {
        c.optim.momentum = 0.9;
        c.optim.nesterov = 1;
        c.optim.weight_decay = 5e-4;
    } else {
        c.optim.weight_decay = 0.01;
        c.label_smoothing = 0.1f;
    }
    c.cuda_graphs = graphs;
    return c;
}

static void batch(td_batch *b, uint8_t *px, int32_t *lab, int n, int k,
                  uint64_t salt)
{
    for (size_t i = 0; i < (size_t)n * 2 * 9 * 9; i++)
        px[i] = (uint8_t)td_rng_below(salt, 1, i, 256);
    for (int i = 0; i < n; i++)
        lab[i] = (int32_t)td_rng_below(salt, 2, (uint64_t)i, (uint64_t)k);
    *b = (td_batch){.data = px, .labels = lab, .n = n, .h = 9, .w = 9,
                    .c = 2, .layout = TD_LAYOUT_NHWC};
}

/* The lr of step t (1-based): a new value every step. */
static float lr_at(enum td_optim_type opt, int64_t t)
{
    float base = opt == TD_OPT_SGD ? 0.02f : 2e-3f;
    return base * (1.0f - 0.07f * (float)t);
}

/* STEPS full steps (lr0_step: that step at lr 0; 0 none) and a short
 * last batch of SHORT samples; every step's loss, then a snapshot of
 * parameters, optimizer slots and running statistics. */
static void train(run *r, const char *model, enum td_optim_type opt,
                  int graphs, int use_mult, int warmup, int lr0_step)
{
    char err[256] = "";
    uint8_t px[BATCH * 2 * 9 * 9];
    int32_t lab[BATCH];
    td_batch b;
    memset(r, 0, sizeof *r);
    r->m = ref_load_model(model, (td_shape){2, 9, 9}, 5);
    td_backend_config c = config(opt, graphs);
    c.warmup = warmup;
    if (use_mult) { /* three runs: 0.5, frozen, 2 */
        r->mult = malloc(sizeof *r->mult * (size_t)r->m->nparams);
        for (int q = 0; q < r->m->nparams; q++)
            r->mult[q] = q < 2 ? 0.5f : q < 4 ? 0.0f : 2.0f;
        c.lr_mult = r->mult;
    }
    td_cuda_register();
    ck_assert_msg(td_backend_create("cuda:0", r->m, &c, &r->be, err,
                                    sizeof err) == 0, "%s", err);
    for (int64_t t = 1; t <= STEPS + 1; t++) {
        int n = t <= STEPS ? BATCH : SHORT;
        td_step_stats st;
        batch(&b, px, lab, n, r->m->classes, 500 + (uint64_t)t);
        ck_assert_msg(td_backend_upload(r->be, &b) == 0, "%s", r->be->err);
        float lr = t == lr0_step ? 0.0f : lr_at(opt, t);
        /* train_step takes full batches only (the trainer drops a short
         * last one): the short batch is an evaluation, always eager */
        if (n < BATCH)
            ck_assert_msg(td_backend_eval_step(r->be) == 0, "%s",
                          r->be->err);
        else
            ck_assert_msg(td_backend_train_step(r->be, lr, t) == 0,
                          "step %lld: %s", (long long)t, r->be->err);
        ck_assert_int_eq(td_backend_read_stats(r->be, &st), 0);
        ck_assert_int_eq(td_backend_sync(r->be), 0);
        ck_assert_int_eq(st.samples, n);
        r->loss[t - 1] = st.loss_sum;
        if (n == BATCH)
            r->ls = st.ls;
    }
    r->nsnap = td_backend_snapshot_floats(r->m, &c.optim);
    r->snap = malloc(r->nsnap * sizeof *r->snap);
    ck_assert_int_eq(td_backend_snapshot(r->be, r->snap, r->nsnap), 0);
    ck_assert_int_eq(td_backend_sync(r->be), 0);
    ck_assert_int_eq(td_backend_cuda_graph_info(r->be, &r->gi), 0);
}

static void run_free(run *r)
{
    td_backend_destroy(r->be);
    td_model_free(r->m);
    free(r->mult);
    free(r->snap);
}

/* Bitwise: every loss and every float of the snapshot. */
static void same(const run *a, const run *b)
{
    for (int i = 0; i <= STEPS; i++)
        ck_assert_msg(memcmp(&a->loss[i], &b->loss[i], sizeof(double)) == 0,
                      "step %d: loss %.17g without graphs, %.17g with", i + 1,
                      a->loss[i], b->loss[i]);
    ck_assert_uint_eq(a->nsnap, b->nsnap);
    for (size_t i = 0; i < a->nsnap; i++)
        ck_assert_msg(memcmp(&a->snap[i], &b->snap[i], sizeof(float)) == 0,
                      "snapshot float %zu of %zu: %.9g without graphs, %.9g "
                      "with", i, a->nsnap, (double)a->snap[i],
                      (double)b->snap[i]);
}

static void compare(const char *model, enum td_optim_type opt, int use_mult,
                    int warmup)
{
    run off, on;
    long cap0 = td_sim_graph_captures(), launch0 = td_sim_graph_launches();
    train(&off, model, opt, TD_GRAPHS_OFF, use_mult, warmup, 0);
    ck_assert_int_eq(td_sim_graph_launches(), launch0);
    train(&on, model, opt, TD_GRAPHS_ON, use_mult, warmup, 0);
    same(&off, &on);
    /* one graph per batch buffer; every full step a launch, the short
     * last batch eager */
    ck_assert_int_eq(on.gi.captures, 2);
    ck_assert_int_eq(on.gi.launches, STEPS);
    ck_assert_int_eq(td_sim_graph_captures() - cap0, 2);
    ck_assert_int_eq(td_sim_graph_launches() - launch0, STEPS);
    ck_assert_int_eq(off.gi.captures, 0);
    ck_assert_int_eq(td_sim_races(), 0);
    /* with loss scaling, the injected overflow was skipped either way;
     * fp16 may overflow for real too (tiny-dropout does at 2^16: its
     * scaled gradients pass 65504 once), each skip halving the scale */
    ck_assert(memcmp(&off.ls, &on.ls, sizeof on.ls) == 0);
    if (g_poison)
        ck_assert_msg(on.ls.skipped >= 1 && (g_dt == TD_F16 ||
                                              on.ls.skipped == 1) &&
                      on.ls.scale == ldexpf(g_loss_scale,
                                            -(int)on.ls.skipped),
                      "skipped %lld, scale %g", (long long)on.ls.skipped,
                      (double)on.ls.scale);
    if (g_poison)
        printf("%s %s: %lld step(s) skipped, loss scale %g\n", model,
               g_dt == TD_F16 ? "fp16" : g_dt == TD_BF16 ? "bf16" : "fp32",
               (long long)on.ls.skipped, (double)on.ls.scale);
    printf("%s: graphs on/off bitwise equal over %d steps + a short batch "
           "(last loss %.9g, %zu state floats)\n", model, STEPS,
           on.loss[STEPS], on.nsnap);
    run_free(&off);
    run_free(&on);
}

START_TEST(test_sgd_dropout_lr_mult_bitwise)
{
    compare("tiny-dropout", TD_OPT_SGD, 1, 0);
}
END_TEST

START_TEST(test_adamw_warmup_bitwise)
{
    compare("tiny-all", TD_OPT_ADAMW, 0, 1);
}
END_TEST

/* fp32, bf16 and fp16 (16-bit activations, the update writing the
 * weights' 16-bit copy) with dynamic loss scaling and an overflow injected
 * at step 4: the captured step scales, checks, skips and corrects from
 * device memory like the eager one, bitwise. */
START_TEST(test_16_bit_and_loss_scaling_bitwise)
{
    enum td_dtype dts[3] = {TD_F32, TD_BF16, TD_F16};
    for (int k = 0; k < 3; k++) {
        g_dt = dts[k];
        g_loss_scale = 65536.0f;
        g_poison = 4;
        compare("tiny-all", TD_OPT_ADAMW, 0, 1);
        compare("tiny-dropout", TD_OPT_SGD, 1, 0);
    }
    g_dt = TD_F32;
    g_loss_scale = 0.0f;
    g_poison = 0;
}
END_TEST

/* A step at lr 0 launches no update: it runs eagerly, not as the graph. */
START_TEST(test_lr_zero_runs_eagerly)
{
    run off, on;
    train(&off, "tiny-dropout", TD_OPT_SGD, TD_GRAPHS_OFF, 0, 0, 3);
    train(&on, "tiny-dropout", TD_OPT_SGD, TD_GRAPHS_ON, 0, 0, 3);
    same(&off, &on);
    ck_assert_int_eq(on.gi.launches, STEPS - 1);
    ck_assert_int_eq(on.gi.captures, 2);
    run_free(&off);
    run_free(&on);
}
END_TEST

/* auto: 3 eager steps timed (the test syncs every step, so each is
 * timed at the next), then graphs iff the shortest was under the
 * threshold; the results stay those of graphs off either way. */
START_TEST(test_auto_decides_by_eager_time)
{
    run off, au;
    train(&off, "tiny-dropout", TD_OPT_SGD, TD_GRAPHS_OFF, 1, 0, 0);
    train(&au, "tiny-dropout", TD_OPT_SGD, TD_GRAPHS_AUTO, 1, 0, 0);
    same(&off, &au);
    ck_assert_int_eq(off.gi.on, 0);
    ck_assert_int_ne(au.gi.on, -1);
    ck_assert(au.gi.eager_ms > 0.0);
    ck_assert_int_eq(au.gi.on, au.gi.eager_ms < TD_CUDA_GRAPH_SHORT_MS);
    /* steps 1-3 timed, decided at step 4 */
    ck_assert_int_eq(au.gi.launches, au.gi.on ? STEPS - 3 : 0);
    printf("auto: shortest eager step %.3f ms on the simulator: graphs "
           "%s\n", au.gi.eager_ms, au.gi.on ? "on" : "off");
    run_free(&off);
    run_free(&au);
}
END_TEST

START_TEST(test_bad_mode_refused)
{
    char err[256] = "";
    td_model *m = ref_load_model("tiny-dropout", (td_shape){2, 9, 9}, 5);
    td_backend_config c = config(TD_OPT_SGD, 3);
    td_backend *be = NULL;
    td_cuda_register();
    ck_assert_int_eq(td_backend_create("cuda:0", m, &c, &be, err,
                                       sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "cuda_graphs 3"), "%s", err);
    td_model_free(m);
}
END_TEST

/* The host runs ahead (no sync between steps): under graphs the copy of
 * batch k+2 starts only after step k has ended (consumed[] after the
 * whole step); eagerly it may start once step k's loss has run. */
static int overlaps(int graphs, double *gap_ms)
{
    enum { N = TD_CUDA_TIMES_KEPT };
    char err[256] = "";
    uint8_t px[N][BATCH * 2 * 9 * 9];
    int32_t lab[N][BATCH];
    td_step_stats st[N];
    td_batch b;
    td_model *m = ref_load_model("tiny-all", (td_shape){2, 9, 9}, 5);
    td_backend_config c = config(TD_OPT_SGD, graphs);
    td_backend *be = NULL;
    td_cuda_register();
    ck_assert_msg(td_backend_create("cuda:0", m, &c, &be, err,
                                    sizeof err) == 0, "%s", err);
    for (int k = 0; k < N; k++) {
        batch(&b, px[k], lab[k], BATCH, m->classes, 900 + (uint64_t)k);
        ck_assert_msg(td_backend_upload(be, &b) == 0, "%s", be->err);
        ck_assert_int_eq(td_backend_train_step(be, 0.01f, k + 1), 0);
        ck_assert_int_eq(td_backend_read_stats(be, &st[k]), 0);
    }
    ck_assert_int_eq(td_backend_sync(be), 0);
    td_cuda_step_times t[N];
    for (int k = 0; k < N; k++)
        ck_assert_int_eq(td_backend_cuda_step_times(be, k, &t[k]), 0);
    int early = 0;
    *gap_ms = 1e300;
    for (int k = 2; k < N; k++) {
        double gap = t[k].copy_start - t[k - 2].compute_end;
        early += gap < 0;
        if (gap < *gap_ms)
            *gap_ms = gap;
    }
    td_backend_destroy(be);
    td_model_free(m);
    return early;
}

START_TEST(test_upload_waits_for_whole_step)
{
    double eager_gap, graph_gap;
    int eager = overlaps(TD_GRAPHS_OFF, &eager_gap);
    int graph = overlaps(TD_GRAPHS_ON, &graph_gap);
    printf("uploads k+2 started before step k ended: eager %d of %d "
           "(smallest gap %.3f ms), graphs %d of %d (smallest gap %.3f "
           "ms)\n", eager, TD_CUDA_TIMES_KEPT - 2, eager_gap, graph,
           TD_CUDA_TIMES_KEPT - 2, graph_gap);
    ck_assert_int_eq(graph, 0);
    ck_assert_int_eq(td_sim_races(), 0);
}
END_TEST

/* ---- the simulator's stream capture ----------------------------------------- */

typedef struct cap {
    cudaStream_t s, s2;
    float *d;
    float *pinned;
} cap;

static void cap_open(cap *c, enum cudaStreamCaptureMode mode)
{
    ck_assert_int_eq(cudaSetDevice(0), cudaSuccess);
    ck_assert_int_eq(cudaStreamCreateWithFlags(&c->s,
                                               cudaStreamNonBlocking), 0);
    ck_assert_int_eq(cudaStreamCreateWithFlags(&c->s2,
                                               cudaStreamNonBlocking), 0);
    ck_assert_int_eq(cudaMalloc((void **)&c->d, 1024), cudaSuccess);
    ck_assert_int_eq(cudaHostAlloc((void **)&c->pinned, 1024, 0), 0);
    ck_assert_int_eq(cudaMemsetAsync(c->d, 0, 1024, c->s), cudaSuccess);
    ck_assert_int_eq(cudaStreamSynchronize(c->s), cudaSuccess);
    ck_assert_int_eq(cudaStreamBeginCapture(c->s, mode), cudaSuccess);
}

/* Ends the capture expecting `want`; a graph only on success. */
static void cap_end(cap *c, cudaError_t want)
{
    cudaGraph_t g = (cudaGraph_t)1;
    ck_assert_int_eq(cudaStreamEndCapture(c->s, &g), want);
    if (want == cudaSuccess) {
        ck_assert_ptr_nonnull(g);
        ck_assert_int_eq(cudaGraphDestroy(g), cudaSuccess);
    } else {
        ck_assert_ptr_null(g);
    }
    (void)cudaGetLastError();
}

static void cap_refused(cudaError_t got, cudaError_t want, cap *c)
{
    ck_assert_msg(got == want, "got %s, want %s", cudaGetErrorName(got),
                  cudaGetErrorName(want));
    /* the capture is invalidated: later work and the end say so */
    ck_assert_int_eq(cudaMemsetAsync(c->d, 1, 4, c->s),
                     cudaErrorStreamCaptureInvalidated);
    cap_end(c, cudaErrorStreamCaptureInvalidated);
}

START_TEST(test_refuses_stream_sync)
{
    cap c;
    cap_open(&c, cudaStreamCaptureModeThreadLocal);
    cap_refused(cudaStreamSynchronize(c.s),
                cudaErrorStreamCaptureUnsupported, &c);
}
END_TEST

START_TEST(test_refuses_stream_query)
{
    cap c;
    cap_open(&c, cudaStreamCaptureModeThreadLocal);
    cap_refused(cudaStreamQuery(c.s), cudaErrorStreamCaptureUnsupported,
                &c);
}
END_TEST

START_TEST(test_refuses_device_sync)
{
    cap c;
    cap_open(&c, cudaStreamCaptureModeGlobal);
    cap_refused(cudaDeviceSynchronize(), cudaErrorStreamCaptureUnsupported,
                &c);
}
END_TEST

START_TEST(test_refuses_sync_memcpy)
{
    cap c;
    float h[4];
    cap_open(&c, cudaStreamCaptureModeThreadLocal);
    cap_refused(cudaMemcpy(h, c.d, sizeof h, cudaMemcpyDeviceToHost),
                cudaErrorStreamCaptureUnsupported, &c);
}
END_TEST

START_TEST(test_refuses_malloc_global)
{
    cap c;
    void *p = NULL;
    cap_open(&c, cudaStreamCaptureModeGlobal);
    cap_refused(cudaMalloc(&p, 64), cudaErrorStreamCaptureUnsupported, &c);
}
END_TEST

START_TEST(test_refuses_free_global)
{
    cap c;
    void *p = NULL;
    ck_assert_int_eq(cudaSetDevice(0), cudaSuccess);
    ck_assert_int_eq(cudaMalloc(&p, 64), cudaSuccess);
    cap_open(&c, cudaStreamCaptureModeGlobal);
    cap_refused(cudaFree(p), cudaErrorStreamCaptureUnsupported, &c);
}
END_TEST

/* Relaxed mode allows the "unsafe" calls, as documented. */
START_TEST(test_relaxed_allows_malloc)
{
    cap c;
    void *p = NULL;
    cap_open(&c, cudaStreamCaptureModeRelaxed);
    ck_assert_int_eq(cudaMalloc(&p, 64), cudaSuccess);
    ck_assert_int_eq(cudaMemsetAsync(c.d, 1, 4, c.s), cudaSuccess);
    cap_end(&c, cudaSuccess);
    ck_assert_int_eq(cudaFree(p), cudaSuccess);
}
END_TEST

static void *other_malloc(void *arg)
{
    void *p = NULL;
    cudaError_t *e = arg;
    (void)cudaSetDevice(0);
    *e = cudaMalloc(&p, 64);
    if (*e == cudaSuccess)
        (void)cudaFree(p);
    return NULL;
}

/* Another thread: prohibited by a global-mode capture, not by a
 * thread-local one (what the backend uses, for the checkpoint writer). */
START_TEST(test_global_mode_binds_other_threads)
{
    cap c;
    pthread_t th;
    cudaError_t e = cudaSuccess;
    cap_open(&c, cudaStreamCaptureModeThreadLocal);
    pthread_create(&th, NULL, other_malloc, &e);
    pthread_join(th, NULL);
    ck_assert_int_eq(e, cudaSuccess);
    cap_end(&c, cudaSuccess);
    cap_open(&c, cudaStreamCaptureModeGlobal);
    pthread_create(&th, NULL, other_malloc, &e);
    pthread_join(th, NULL);
    ck_assert_int_eq(e, cudaErrorStreamCaptureUnsupported);
    cap_end(&c, cudaErrorStreamCaptureInvalidated);
}
END_TEST

START_TEST(test_refuses_captured_event_sync_and_query)
{
    cap c;
    cudaEvent_t ev;
    ck_assert_int_eq(cudaSetDevice(0), cudaSuccess);
    ck_assert_int_eq(cudaEventCreate(&ev), cudaSuccess);
    cap_open(&c, cudaStreamCaptureModeThreadLocal);
    ck_assert_int_eq(cudaEventRecord(ev, c.s), cudaSuccess);
    ck_assert_int_eq(cudaEventQuery(ev), cudaErrorCapturedEvent);
    ck_assert_int_eq(cudaEventSynchronize(ev), cudaErrorCapturedEvent);
    cap_end(&c, cudaSuccess);
    /* still last recorded in a capture; recorded again outside: fine */
    ck_assert_int_eq(cudaEventQuery(ev), cudaErrorCapturedEvent);
    ck_assert_int_eq(cudaEventRecord(ev, c.s), cudaSuccess);
    ck_assert_int_eq(cudaEventSynchronize(ev), cudaSuccess);
}
END_TEST

START_TEST(test_refuses_pageable_memcpy_async)
{
    cap c;
    float h[4] = {0};
    cap_open(&c, cudaStreamCaptureModeThreadLocal);
    ck_assert_int_eq(cudaMemcpyAsync(c.d, c.pinned, 16,
                                     cudaMemcpyHostToDevice, c.s),
                     cudaSuccess);
    cap_refused(cudaMemcpyAsync(c.d, h, sizeof h, cudaMemcpyHostToDevice,
                                c.s),
                cudaErrorStreamCaptureUnsupported, &c);
}
END_TEST

START_TEST(test_refuses_wait_on_outside_event)
{
    cap c;
    cudaEvent_t ev;
    ck_assert_int_eq(cudaSetDevice(0), cudaSuccess);
    ck_assert_int_eq(cudaEventCreate(&ev), cudaSuccess);
    ck_assert_int_eq(cudaStreamCreateWithFlags(&c.s2,
                                               cudaStreamNonBlocking), 0);
    ck_assert_int_eq(cudaEventRecord(ev, c.s2), cudaSuccess);
    cap_open(&c, cudaStreamCaptureModeThreadLocal);
    cap_refused(cudaStreamWaitEvent(c.s, ev, 0),
                cudaErrorStreamCaptureIsolation, &c);
}
END_TEST

/* A stream forked into the capture must be joined back before the end. */
START_TEST(test_refuses_unjoined_fork)
{
    cap c;
    cudaEvent_t fork, join;
    ck_assert_int_eq(cudaSetDevice(0), cudaSuccess);
    ck_assert_int_eq(cudaEventCreateWithFlags(&fork, 0), cudaSuccess);
    ck_assert_int_eq(cudaEventCreateWithFlags(&join, 0), cudaSuccess);
    cap_open(&c, cudaStreamCaptureModeThreadLocal);
    ck_assert_int_eq(cudaEventRecord(fork, c.s), cudaSuccess);
    ck_assert_int_eq(cudaStreamWaitEvent(c.s2, fork, 0), cudaSuccess);
    ck_assert_int_eq(cudaMemsetAsync(c.d + 8, 2, 16, c.s2), cudaSuccess);
    cap_end(&c, cudaErrorStreamCaptureUnjoined);
    /* joined: accepted, both streams' work in the graph */
    cap_open(&c, cudaStreamCaptureModeThreadLocal);
    ck_assert_int_eq(cudaEventRecord(fork, c.s), cudaSuccess);
    ck_assert_int_eq(cudaStreamWaitEvent(c.s2, fork, 0), cudaSuccess);
    ck_assert_int_eq(cudaMemsetAsync(c.d + 8, 2, 16, c.s2), cudaSuccess);
    ck_assert_int_eq(cudaEventRecord(join, c.s2), cudaSuccess);
    ck_assert_int_eq(cudaStreamWaitEvent(c.s, join, 0), cudaSuccess);
    cap_end(&c, cudaSuccess);
    enum cudaStreamCaptureStatus st;
    ck_assert_int_eq(cudaStreamIsCapturing(c.s2, &st), cudaSuccess);
    ck_assert_int_eq(st, cudaStreamCaptureStatusNone);
}
END_TEST

static void *other_end(void *arg)
{
    cap *c = arg;
    cudaGraph_t g = NULL;
    (void)cudaSetDevice(0);
    ck_assert_int_eq(cudaStreamEndCapture(c->s, &g),
                     cudaErrorStreamCaptureWrongThread);
    ck_assert_ptr_null(g);
    return NULL;
}

/* A non-relaxed capture ends on the thread that began it. */
START_TEST(test_refuses_end_from_other_thread)
{
    cap c;
    pthread_t th;
    cap_open(&c, cudaStreamCaptureModeThreadLocal);
    ck_assert_int_eq(cudaMemsetAsync(c.d, 1, 4, c.s), cudaSuccess);
    pthread_create(&th, NULL, other_end, &c);
    pthread_join(th, NULL);
    enum cudaStreamCaptureStatus st;
    ck_assert_int_eq(cudaStreamIsCapturing(c.s, &st), cudaSuccess);
    ck_assert_int_eq(st, cudaStreamCaptureStatusNone);
}
END_TEST

/* Work on a capturing stream is recorded, not run; each launch replays
 * it with the values of capture time, in stream order. */
START_TEST(test_graph_replays_captured_values)
{
    cap c;
    cudaGraph_t g;
    cudaGraphExec_t x;
    float h[4];
    enum cudaStreamCaptureStatus st;
    cap_open(&c, cudaStreamCaptureModeThreadLocal);
    ck_assert_int_eq(cudaStreamIsCapturing(c.s, &st), cudaSuccess);
    ck_assert_int_eq(st, cudaStreamCaptureStatusActive);
    c.pinned[0] = 1.5f;
    ck_assert_int_eq(cudaMemcpyAsync(c.d, c.pinned, 4,
                                     cudaMemcpyHostToDevice, c.s), 0);
    ck_assert_int_eq(cudaMemcpyAsync(c.d + 1, c.d, 4,
                                     cudaMemcpyDeviceToDevice, c.s), 0);
    ck_assert_int_eq(cudaMemsetAsync(c.d + 2, 0x3f, 4, c.s), 0);
    ck_assert_int_eq(cudaStreamEndCapture(c.s, &g), cudaSuccess);
    ck_assert_int_eq(cudaGraphInstantiate(&x, g, 0), cudaSuccess);
    ck_assert_int_eq(cudaGraphDestroy(g), cudaSuccess);
    /* nothing ran at capture */
    ck_assert_int_eq(cudaMemcpy(h, c.d, sizeof h, cudaMemcpyDeviceToHost),
                     cudaSuccess);
    ck_assert(h[0] == 0.0f && h[1] == 0.0f && h[2] == 0.0f);
    long n0 = td_sim_graph_launches();
    for (int i = 0; i < 2; i++) {
        c.pinned[0] = 2.5f + (float)i; /* a memcpy node reads it at run */
        ck_assert_int_eq(cudaGraphLaunch(x, c.s), cudaSuccess);
        ck_assert_int_eq(cudaStreamSynchronize(c.s), cudaSuccess);
        ck_assert_int_eq(cudaMemcpy(h, c.d, sizeof h,
                                    cudaMemcpyDeviceToHost), cudaSuccess);
        ck_assert(h[0] == 2.5f + (float)i && h[1] == h[0]);
        uint32_t bits;
        memcpy(&bits, &h[2], 4);
        ck_assert_uint_eq(bits, 0x3f3f3f3fu);
    }
    ck_assert_int_eq(td_sim_graph_launches() - n0, 2);
    ck_assert_int_eq(cudaGraphExecDestroy(x), cudaSuccess);
}
END_TEST

/* A launched graph is stream-ordered for the race detector: another
 * stream reading what it wrote, unordered, is reported. */
START_TEST(test_race_detector_sees_graph_nodes)
{
    cap c;
    cudaGraph_t g;
    cudaGraphExec_t x;
    setenv("TD_SIM_RACE", "report", 1);
    ck_assert_int_eq(td_sim_reset(), 0);
    cap_open(&c, cudaStreamCaptureModeThreadLocal);
    ck_assert_int_eq(cudaMemsetAsync(c.d, 1, 64, c.s), cudaSuccess);
    ck_assert_int_eq(cudaStreamEndCapture(c.s, &g), cudaSuccess);
    ck_assert_int_eq(cudaGraphInstantiate(&x, g, 0), cudaSuccess);
    long r0 = td_sim_races();
    ck_assert_int_eq(cudaGraphLaunch(x, c.s), cudaSuccess);
    ck_assert_int_eq(cudaMemcpyAsync(c.pinned, c.d, 64,
                                     cudaMemcpyDeviceToHost, c.s2), 0);
    ck_assert_int_eq(td_sim_races() - r0, 1);
    ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess);
    ck_assert_int_eq(cudaGraphExecDestroy(x), cudaSuccess);
    ck_assert_int_eq(cudaGraphDestroy(g), cudaSuccess);
}
END_TEST

static Suite *sim_graphs_suite(void)
{
    Suite *s = suite_create("sim_graphs");
    TCase *tc = tcase_create("backend");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_sgd_dropout_lr_mult_bitwise);
    tcase_add_test(tc, test_adamw_warmup_bitwise);
    tcase_add_test(tc, test_16_bit_and_loss_scaling_bitwise);
    tcase_add_test(tc, test_lr_zero_runs_eagerly);
    tcase_add_test(tc, test_auto_decides_by_eager_time);
    tcase_add_test(tc, test_bad_mode_refused);
    tcase_add_test(tc, test_upload_waits_for_whole_step);
    suite_add_tcase(s, tc);
    TCase *cc = tcase_create("capture");
    tcase_add_test(cc, test_refuses_stream_sync);
    tcase_add_test(cc, test_refuses_stream_query);
    tcase_add_test(cc, test_refuses_device_sync);
    tcase_add_test(cc, test_refuses_sync_memcpy);
    tcase_add_test(cc, test_refuses_malloc_global);
    tcase_add_test(cc, test_refuses_free_global);
    tcase_add_test(cc, test_relaxed_allows_malloc);
    tcase_add_test(cc, test_global_mode_binds_other_threads);
    tcase_add_test(cc, test_refuses_captured_event_sync_and_query);
    tcase_add_test(cc, test_refuses_pageable_memcpy_async);
    tcase_add_test(cc, test_refuses_wait_on_outside_event);
    tcase_add_test(cc, test_refuses_unjoined_fork);
    tcase_add_test(cc, test_refuses_end_from_other_thread);
    tcase_add_test(cc, test_graph_replays_captured_values);
    tcase_add_test(cc, test_race_detector_sees_graph_nodes);
    suite_add_tcase(s, cc);
    return s;
}

TD_TEST_MAIN(sim_graphs_suite)
