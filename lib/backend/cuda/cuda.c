/* cuda.c - the CUDA backend: lifecycle, streams, events, uploads,
 * statistics and snapshots (see backend.h for the contract and cuda_int.h
 * for how the files divide the work).
 *
 * Owns: one device arena sized and allocated at create (its size is logged
 * and offered by td_backend_cuda_arena_bytes; a model that does not fit
 * fails create with the sizes in the message), three streams (copy,
 * compute, snapshot), double-buffered device batches, the pinned ring that
 * read_stats copies through (delivered to the caller after an event wait,
 * never by a host function) (cuda_pinned.c makes the batch slots,
 * cuda_err.c words the failures, cuda_mem.c holds the shadow copies and the warm-up
 * step, cuda_arena.c lays out and allocates the arena).
 * Never does: synchronise the whole device (only this backend's streams,
 * and only in create, restore, sync, destroy and the test accessors),
 * allocate after create, or exit: a device error fails the job, not the
 * daemon (a sticky CUDA error leaves the GPU unusable for this process).
 *
 * Step pipeline: upload(k) waits (on the copy stream) until step k-2 has
 * read the buffer it reuses, copies, and records copied[buf]; the compute
 * stream waits for that event, so the copy of batch k+1 overlaps step k.
 * Per-upload events (copy start/end, compute start/end) are kept for the
 * last TD_CUDA_TIMES_KEPT uploads and read with cudaEventQuery.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_int.h"
#include "base/error.h"
#include "base/log.h"
#include "bf16.h"
#include "fp16.h"
#include "normalize.h"

#if defined(__has_include)
#if __has_include(<nvtx3/nvToolsExt.h>)
#include <nvtx3/nvToolsExt.h>
#define TD__HAVE_NVTX 1
#endif
#endif

struct td_event {
    cudaEvent_t c, x, s; /* on the compute, copy and snapshot streams */
    int recorded;
};

static const td_backend_ops td__cuda_ops;

/* The backend's GPU becomes the calling thread's current device (CUDA
 * keeps it per thread); cheap when it already is. */
static td__cuda *td__be(td_backend *b)
{
    td__cuda *be = (td__cuda *)b;
    if (be->compute)
        (void)cudaSetDevice(be->dev);
    return be;
}

size_t td__cuda_esize(enum td_dtype t) { return t == TD_F32 ? 4 : 2; }

/* the kernels' storage types are enum td_dtype's values */
_Static_assert(TD_KDT_F32 == TD_F32 && TD_KDT_BF16 == TD_BF16 &&
                   TD_KDT_F16 == TD_F16,
               "cuda_kernels.h's TD_KDT_* must equal enum td_dtype");

void td__nvtx_push(const char *name)
{
#ifdef TD__HAVE_NVTX
    nvtxRangePushA(name);
#else
    (void)name;
#endif
}

void td__nvtx_pop(void)
{
#ifdef TD__HAVE_NVTX
    nvtxRangePop();
#endif
}

/* Initial parameters, optimizer state and running statistics. */
static int td__init_values(td__cuda *be)
{
    const td_model *m = be->base.model;
    size_t pc = m->param_count;
    float *h = malloc((pc > be->nstate ? pc : be->nstate) * sizeof *h + 1);
    if (!h)
        return -ENOMEM;
    td_model_init_params(m, be->base.cfg.seed, h);
    cudaError_t e = cudaMemcpy(be->params, h, pc * sizeof *h,
                               cudaMemcpyHostToDevice);
    float *s = h;
    for (int i = 0; i < m->nstate; i++)
        for (size_t j = 0; j < m->state[i].count; j++)
            *s++ = m->state[i].init;
    if (e == cudaSuccess && be->nstate)
        e = cudaMemcpy(be->state, h, be->nstate * sizeof *h,
                       cudaMemcpyHostToDevice);
    free(h);
    TD__CU(be, e);
    TD__CU(be, cudaMemset(be->grads, 0, pc * sizeof(float)));
    if (be->nslots)
        TD__CU(be, cudaMemset(be->slots, 0, be->nslots * pc * sizeof(float)));
    TD__CU(be, cudaMemset(be->acc, 0, sizeof(td_dev_stats)));
    /* values, gradients and masks (cuda_plan.c) */
    TD__CU(be, cudaMemset(be->acts, 0, be->plan.activations));
    /* the weights' 16-bit copy; the compute stream does not wait for the
     * legacy default stream's copies above */
    TD__CU(be, cudaDeviceSynchronize());
    TD__TRY(td__cuda_narrow_params(be));
    TD__CU(be, cudaStreamSynchronize(be->compute));
    return 0;
}

static int td__events(td__cuda *be)
{
    unsigned fl = cudaEventDisableTiming;
    for (int i = 0; i < TD__NBUF; i++) {
        TD__CU(be, cudaEventCreateWithFlags(&be->copied[i], fl));
        TD__CU(be, cudaEventCreateWithFlags(&be->consumed[i], fl));
    }
    TD__CU(be, cudaEventCreateWithFlags(&be->snap_ready, fl));
    TD__CU(be, cudaEventCreateWithFlags(&be->snap_done, fl));
    TD__CU(be, cudaEventCreate(&be->t0));
    for (int i = 0; i < TD_CUDA_TIMES_KEPT; i++) {
        td__times_ev *t = &be->times[i];
        t->step = -1;
        TD__CU(be, cudaEventCreate(&t->c0));
        TD__CU(be, cudaEventCreate(&t->c1));
        TD__CU(be, cudaEventCreate(&t->k0));
        TD__CU(be, cudaEventCreate(&t->k1));
    }
    TD__CU(be, cudaHostAlloc((void **)&be->stat,
                             TD__NSTAT * sizeof *be->stat,
                             cudaHostAllocDefault));
    memset(be->stat, 0, TD__NSTAT * sizeof *be->stat);
    for (int i = 0; i < TD__NSTAT; i++)
        TD__CU(be, cudaEventCreateWithFlags(&be->stat[i].done, fl));
    return 0;
}

/* 1 when `archs` (gpu_arch: "sm_80 sm_90 compute_90") has code that runs
 * on compute capability major.minor.  Machine code sm_XY runs on X.y for
 * y >= Y (the same major); PTX compute_XY is compiled by the driver for
 * X.Y and any later GPU; arch-specific code (sm_90a) runs on X.Y only. */
int td__cuda_arch_ok(const char *archs, int major, int minor)
{
    const char *p = archs;
    int cc = major * 10 + minor;
    while (*p) {
        int ptx = strncmp(p, "compute_", 8) == 0;
        int sm = strncmp(p, "sm_", 3) == 0;
        char *end = (char *)p;
        long num = -1;
        if (ptx || sm)
            num = strtol(p + (ptx ? 8 : 3), &end, 10);
        int exact = *end == 'a';
        if (num > 0) {
            if (ptx ? cc >= num
                    : exact ? cc == num
                            : major == num / 10 && minor >= num % 10)
                return 1;
        }
        p = end;
        while (*p && *p != ' ')
            p++;
        while (*p == ' ')
            p++;
    }
    return 0;
}

/* A GPU the kernels were not built for fails here, not at the first
 * launch with "no kernel image is available" (finding 11). */
static int td__check_arch(td__cuda *be)
{
    struct cudaDeviceProp p;
    TD__CU(be, cudaGetDeviceProperties(&p, be->dev));
    if (td__cuda_arch_ok(TD_CUDA_ARCHS, p.major, p.minor))
        return 0;
    snprintf(be->base.err, sizeof be->base.err, "cuda:%d: %.48s has compute "
             "capability %d.%d and this traind has no kernel image for it "
             "(built for %s; rebuild with -Dgpu_arch=sm_%d%d)", be->dev,
             p.name, p.major, p.minor, TD_CUDA_ARCHS, p.major, p.minor);
    return TD_E_DEVICE;
}

/* Device, streams, handles, plan, arena, values: everything create does
 * after checking the configuration. */
static int td__cuda_init(td__cuda *be)
{
    const td_model *m = be->base.model;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || be->dev >= count) {
        snprintf(be->base.err, sizeof be->base.err, "device cuda:%d is not "
                 "available: %s", be->dev, e != cudaSuccess
                 ? cudaGetErrorString(e) : "no GPU with that index");
        (void)cudaGetLastError();
        return TD_E_DEVICE;
    }
    TD__TRY(td__check_arch(be));
    TD__CU(be, cudaSetDevice(be->dev));
    /* host waits (event and stream syncs) sleep instead of spinning a core
     * the decode workers need; process-wide for this GPU */
    TD__CU(be, cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync));
    TD__CU(be, cudaStreamCreateWithFlags(&be->compute, cudaStreamNonBlocking));
    TD__CU(be, cudaStreamCreateWithFlags(&be->copy, cudaStreamNonBlocking));
    TD__CU(be, cudaStreamCreateWithFlags(&be->snap, cudaStreamNonBlocking));
    TD__TRY(td__events(be));
    TD__BLAS(be, cublasCreate(&be->blas));
    TD__BLAS(be, cublasSetStream(be->blas, be->compute));
    /* strict fp32 or TF32, by the job and the compute capability; sets
     * the cuBLAS math mode (cuda_prec.c) */
    TD__TRY(td__cuda_precision(be));
    be->gl = calloc((size_t)m->nlayers, sizeof *be->gl);
    if (!be->gl)
        return -ENOMEM;
    td__cuda_roots(be);
    TD__TRY(td__dnn_create(be, &be->work_bytes));
    TD__TRY(td__cuda_arena(be));
    /* cuBLAS's scratch comes from the arena too: nothing allocates later */
    TD__BLAS(be, cublasSetWorkspace(be->blas, be->blas_ws, TD__BLAS_WS));
    TD__TRY(td__blaslt_create(be)); /* dense layers (cuda_blaslt.c) */
    TD__TRY(td__dnn_find(be));
    TD__TRY(td__init_values(be));
    TD__TRY(td__cuda_ls_init(be));
    const td_shape in = m->layers[0].out;
    for (int c = 0; c < in.c; c++)
        td_normalize_coeffs(be->base.cfg.mean[c], be->base.cfg.std[c],
                            &be->nscale[c], &be->nbias[c]);
    TD__TRY(td__graph_init(be)); /* the step scalars' pinned slots */
    if (be->base.cfg.warmup) { /* and the scaler as if it had not run */
        TD__TRY(td__warmup(be));
        TD__TRY(td__cuda_ls_init(be));
    }
    TD__CU(be, cudaEventRecord(be->t0, be->compute));
    TD__CU(be, cudaDeviceSynchronize()); /* create only */
    return 0;
}

/* ---- upload, steps ------------------------------------------------------------ */

static int td__check_batch(td__cuda *be, const td_batch *bt)
{
    const td_model *m = be->base.model;
    const td_shape in = m->layers[0].out;
    if (bt->layout != TD_LAYOUT_NHWC || bt->c != in.c || bt->h != in.h ||
        bt->w != in.w || bt->n < 1 || bt->n > be->batch) {
        snprintf(be->base.err, sizeof be->base.err, "upload: batch of %d "
                 "%dx%dx%d (%s) does not fit the model's %dx%dx%d NHWC input, "
                 "batch <= %d", bt->n, bt->c, bt->h, bt->w,
                 bt->layout == TD_LAYOUT_NHWC ? "NHWC" : "NCHW", in.c, in.h,
                 in.w, be->batch);
        return -EINVAL;
    }
    for (int i = 0; i < bt->n; i++)
        if (bt->labels[i] < 0 || bt->labels[i] >= m->classes) {
            snprintf(be->base.err, sizeof be->base.err, "upload: label %d of "
                     "sample %d is outside 0..%d", (int)bt->labels[i], i,
                     m->classes - 1);
            return -EINVAL;
        }
    return 0;
}

static int td__copy_batch(td__cuda *be, const td_batch *bt, int buf,
                          td__times_ev *t)
{
    const td_shape in = be->base.model->layers[0].out;
    size_t per = (size_t)in.c * in.h * in.w;
    /* the step that last used this buffer must have read its pixels (the
     * cast) and its labels (the loss) */
    TD__CU(be, cudaStreamWaitEvent(be->copy, be->consumed[buf], 0));
    TD__CU(be, cudaEventRecord(t->c0, be->copy));
    TD__CU(be, cudaMemcpyAsync(be->pixels[buf], bt->data, per * (size_t)bt->n,
                               cudaMemcpyHostToDevice, be->copy));
    if (bt->n < be->batch)
        TD__CU(be, cudaMemsetAsync(be->pixels[buf] + per * (size_t)bt->n, 0,
                                   per * (size_t)(be->batch - bt->n),
                                   be->copy));
    TD__CU(be, cudaMemcpyAsync(be->labels[buf], bt->labels,
                               sizeof(int32_t) * (size_t)bt->n,
                               cudaMemcpyHostToDevice, be->copy));
    /* c1 first: the compute stream waits for copied, so its step can
     * never start before the copy's end marker */
    TD__CU(be, cudaEventRecord(t->c1, be->copy));
    TD__CU(be, cudaEventRecord(be->copied[buf], be->copy));
    TD__CU(be, cudaStreamWaitEvent(be->compute, be->copied[buf], 0));
    return 0;
}

/* Step times keep their resolution however long the job runs (finding
 * 11): cudaEventElapsedTime gives float milliseconds, 2 ms apart once the
 * interval passes 4.7 h, so times are not measured from t0.  Each upload's
 * copy start is placed after the previous upload's (a short interval,
 * exact to about a microsecond) and the sum is kept in double; a step's
 * other marks are measured from its own copy start.  Never blocks: stops
 * at the first copy start not yet completed.  Only when an upload has left
 * the ring before its copy started (the host more than TD_CUDA_TIMES_KEPT
 * uploads ahead of the copy stream) does one link go back to t0, at a
 * float's resolution. */
static void td__chain(td__cuda *be)
{
    const int64_t K = TD_CUDA_TIMES_KEPT;
    while (be->chain + 1 < be->uploads) {
        int64_t j = be->chain + 1;
        td__times_ev *t = &be->times[j % K];
        if (t->step != j) {
            if (j >= be->uploads - K)
                return; /* being recorded */
            be->chain = be->uploads - K - 1; /* lost: the oldest kept */
            continue;
        }
        if (!td__cuda_ready(cudaEventQuery(t->c0)))
            return; /* not yet (an error shows in the caller's calls) */
        const td__times_ev *p = be->chain >= 0
                                    ? &be->times[be->chain % K] : NULL;
        int linked = p && p->step == be->chain && p->based;
        float ms = 0;
        if (!td__cuda_ready(cudaEventElapsedTime(
                &ms, linked ? p->c0 : be->t0, t->c0)))
            return;
        t->base_ms = (linked ? p->base_ms : 0.0) + (double)ms;
        t->based = 1;
        be->chain = j;
    }
}

static int td__cuda_upload(td_backend *b, const td_batch *bt)
{
    td__cuda *be = td__be(b);
    TD__TRY(td__check_batch(be, bt));
    int buf = (int)(be->uploads % TD__NBUF);
    td__times_ev *t = &be->times[be->uploads % TD_CUDA_TIMES_KEPT];
    td__chain(be); /* before the slot's events are reused */
    t->step = -1; /* invalid until both events are recorded */
    t->based = 0;
    td__nvtx_push("upload");
    int rc = td__copy_batch(be, bt, buf, t);
    td__nvtx_pop();
    if (rc)
        return rc;
    t->step = be->uploads++;
    t->computed = 0;
    be->cur = buf;
    be->n = bt->n;
    return 0;
}

static td__times_ev *td__cur_times(td__cuda *be)
{
    if (be->uploads == 0)
        return NULL;
    td__times_ev *t = &be->times[(be->uploads - 1) % TD_CUDA_TIMES_KEPT];
    return t->step == be->uploads - 1 && !t->computed ? t : NULL;
}

/* A full training step as one CUDA graph launch (cuda_graph.c); the
 * buffer may be refilled only once the whole step has run. */
static int td__run_graph(td__cuda *be, td__times_ev *tv)
{
    TD__TRY(td__graph_launch(be));
    if (tv) {
        TD__CU(be, cudaEventRecord(tv->k1, be->compute));
        tv->computed = 1;
    }
    TD__CU(be, cudaEventRecord(be->consumed[be->cur], be->compute));
    return 0;
}

static int td__run(td__cuda *be, int train, float lr, int64_t t)
{
    td__times_ev *tv = td__cur_times(be);
    int graph = train && td__graph_use(be, lr);
    if (tv)
        TD__CU(be, cudaEventRecord(tv->k0, be->compute));
    be->last_train = train; /* what read_tensor may still read */
    if (train)
        TD__TRY(td__step_scalars(be, lr, t));
    if (graph)
        return td__run_graph(be, tv);
    td__nvtx_push("forward");
    int rc = td__cuda_forward(be, train);
    if (!rc)
        rc = td__cuda_loss(be, train);
    td__nvtx_pop();
    if (!rc && train) {
        td__nvtx_push("backward");
        rc = td__cuda_backward(be);
        td__nvtx_pop();
    }
    if (!rc && train && lr > 0) {
        td__nvtx_push("update");
        rc = td__cuda_update(be);
        td__nvtx_pop();
    }
    if (rc)
        return rc;
    if (tv) {
        TD__CU(be, cudaEventRecord(tv->k1, be->compute));
        tv->computed = 1;
    }
    if (train)
        td__graph_eager_done(be);
    return 0;
}

static int td__cuda_train_step(td_backend *b, float lr, int64_t t)
{
    td__cuda *be = td__be(b);
    if (be->uploads == 0 || be->n != be->batch) {
        snprintf(b->err, sizeof b->err, "train_step: the batch has %d "
                 "samples, the backend was planned for %d", be->n, be->batch);
        return -EINVAL;
    }
    /* dropout draws by the global step (as the CPU backend): a resumed
     * job continues the masks of an uninterrupted one */
    be->step = t > 0 ? t - 1 : 0;
    TD__TRY(td__run(be, 1, lr, t));
    return 0;
}

static int td__cuda_eval_step(td_backend *b)
{
    td__cuda *be = td__be(b);
    if (be->uploads == 0) {
        snprintf(b->err, sizeof b->err, "eval_step: nothing uploaded");
        return -EINVAL;
    }
    return td__run(be, 0, 0.0f, 0);
}

/* ---- statistics: a pinned ring, read after an event wait --------------
 *
 * read_stats copies the device's counters into the next slot of a pinned
 * ring and records the slot's `done` event, on the compute stream.  The
 * caller's td_step_stats is filled when the host learns that the copy has
 * completed: in event_sync, in event_query returning 1 and in sync (an
 * event recorded after read_stats completes after `done`), oldest slot
 * first.  No host function on the stream (finding 9: one per step stalled
 * the compute stream until a driver thread had run it).  The checkpoint
 * writer may call event_sync from its thread: the ring is under stat_mu,
 * and a caller reads its stats only after its own event_sync, which takes
 * stat_mu after any other thread's delivery. */

/* Delivers every completed slot, oldest first; never blocks. */
static void td__stats_deliver(td__cuda *be)
{
    pthread_mutex_lock(&be->stat_mu);
    while (be->stat_busy > 0) {
        td__stat_slot *s = &be->stat[be->stat_old];
        if (!td__cuda_ready(cudaEventQuery(s->done)))
            break; /* not yet; an error is reported by the caller's call */
        *s->dst = (td_step_stats){.loss_sum = s->val.loss_sum,
                                  .correct = s->val.correct,
                                  .samples = s->val.samples,
                                  .ls = s->ls};
        s->busy = 0;
        be->stat_old = (be->stat_old + 1) % TD__NSTAT;
        be->stat_busy--;
    }
    pthread_mutex_unlock(&be->stat_mu);
}

static int td__cuda_read_stats(td_backend *b, td_step_stats *host)
{
    td__cuda *be = td__be(b);
    td__stat_slot *s = &be->stat[be->stat_next];
    pthread_mutex_lock(&be->stat_mu); /* another thread may deliver it */
    int busy = s->busy;
    pthread_mutex_unlock(&be->stat_mu);
    if (busy) { /* only when TD__NSTAT reads are still undelivered */
        TD__CU(be, cudaEventSynchronize(s->done));
        td__stats_deliver(be);
    }
    TD__CU(be, cudaMemcpyAsync(&s->val, be->acc, sizeof s->val,
                               cudaMemcpyDeviceToHost, be->compute));
    TD__CU(be, cudaMemsetAsync(be->acc, 0, sizeof(td_dev_stats),
                               be->compute));
    if (td__cuda_ls(be))
        TD__CU(be, cudaMemcpyAsync(&s->ls, &be->ls->st, sizeof s->ls,
                                   cudaMemcpyDeviceToHost, be->compute));
    else
        s->ls = (td_ls_state){0, 0, 0};
    TD__CU(be, cudaEventRecord(s->done, be->compute));
    pthread_mutex_lock(&be->stat_mu);
    s->dst = host;
    s->busy = 1;
    be->stat_busy++;
    be->stat_next = (be->stat_next + 1) % TD__NSTAT;
    pthread_mutex_unlock(&be->stat_mu);
    return 0;
}

/* ---- snapshots ----------------------------------------------------------------- */

static int td__snap_check(td__cuda *be, size_t nfloats, const char *what)
{
    if (nfloats == be->nsnap)
        return 0;
    snprintf(be->base.err, sizeof be->base.err, "%s: buffer of %zu floats, "
             "this model and optimizer need %zu", what, nfloats, be->nsnap);
    return -EINVAL;
}

/* Parameters, slots and state into the device shadow on the compute
 * stream (a fast device copy, consistent with the step boundary), then to
 * the host on the snapshot stream while training goes on.  `host` should
 * be pinned (td_cuda_pinned_allocator) for the copy to be asynchronous. */
static int td__cuda_snapshot(td_backend *b, float *host, size_t nfloats)
{
    td__cuda *be = td__be(b);
    size_t f = sizeof(float);
    TD__TRY(td__snap_check(be, nfloats, "snapshot"));
    td__nvtx_push("snapshot");
    if (be->snap_pending)
        TD__CU(be, cudaStreamWaitEvent(be->compute, be->snap_done, 0));
    TD__TRY(td__to_shadow(be));
    TD__CU(be, cudaEventRecord(be->snap_ready, be->compute));
    TD__CU(be, cudaStreamWaitEvent(be->snap, be->snap_ready, 0));
    TD__CU(be, cudaMemcpyAsync(host, be->shadow, nfloats * f,
                               cudaMemcpyDeviceToHost, be->snap));
    TD__CU(be, cudaEventRecord(be->snap_done, be->snap));
    be->snap_pending = 1;
    td__nvtx_pop();
    return 0;
}

static int td__sync_streams(td__cuda *be)
{
    TD__CU(be, cudaStreamSynchronize(be->copy));
    TD__CU(be, cudaStreamSynchronize(be->compute));
    TD__CU(be, cudaStreamSynchronize(be->snap));
    return 0;
}

static int td__cuda_restore(td_backend *b, const float *host, size_t nfloats)
{
    td__cuda *be = td__be(b);
    size_t pc = b->model->param_count, f = sizeof(float);
    TD__TRY(td__snap_check(be, nfloats, "restore"));
    TD__TRY(td__sync_streams(be));
    /* on the compute stream: a plain cudaMemcpy from pageable memory may
     * return before its DMA ends, and the compute stream does not wait for
     * the legacy default stream */
    TD__CU(be, cudaMemcpyAsync(be->params, host, pc * f,
                               cudaMemcpyHostToDevice, be->compute));
    if (be->nslots)
        TD__CU(be, cudaMemcpyAsync(be->slots, host + pc, be->nslots * pc * f,
                                   cudaMemcpyHostToDevice, be->compute));
    if (be->nstate)
        TD__CU(be, cudaMemcpyAsync(be->state, host + pc * (1 + be->nslots),
                                   be->nstate * f, cudaMemcpyHostToDevice,
                                   be->compute));
    /* a snapshot holds the fp32 master weights only: the 16-bit copy is
     * rebuilt from them (so a job resumes at another precision) */
    TD__TRY(td__cuda_narrow_params(be));
    TD__CU(be, cudaStreamSynchronize(be->compute));
    return 0;
}

/* ---- test access (synchronous) --------------------------------------------- */

/* n 16-bit activations (the compute type) to fp32 on the host, exact. */
static int td__read_16(td__cuda *be, const void *src, float *host, size_t n)
{
    uint16_t *t = malloc(n * sizeof *t + 1);
    if (!t)
        return -ENOMEM;
    cudaError_t e = cudaMemcpyAsync(t, src, n * sizeof *t,
                                    cudaMemcpyDeviceToHost, be->compute);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(be->compute);
    for (size_t i = 0; e == cudaSuccess && i < n; i++)
        host[i] = be->dt == TD_BF16 ? td_bf16_to_f32(t[i])
                                    : td_f16_to_f32(t[i]);
    free(t);
    TD__CU(be, e);
    return 0;
}

static int td__cuda_read_tensor(td_backend *b, enum td_tensor_kind kind,
                                int index, float *host, size_t nfloats)
{
    td__cuda *be = td__be(b);
    const td_model *m = b->model;
    const void *src;
    size_t n, esz = sizeof(float);
    if (kind == TD_T_VALUE || kind == TD_T_GRAD) {
        if (index < 0 || index >= m->nlayers)
            return -EINVAL;
        const td__gl *g = &be->gl[be->gl[index].root];
        TD__TRY(td__cuda_readable(be, index, kind == TD_T_GRAD));
        src = kind == TD_T_VALUE ? g->y : g->dy;
        n = g->nelem;
        esz = be->esz;
        if (nfloats == n && esz != sizeof(float)) /* NHWC to NCHW */
            return td__cuda_read_act(be, index, src, host, n);
    } else {
        if (index < 0 || index >= m->nparams)
            return -EINVAL;
        src = (kind == TD_T_PARAM ? be->params : be->grads) +
              td__cuda_param_off(m, index);
        n = m->params[index].count;
    }
    if (nfloats != n) {
        snprintf(b->err, sizeof b->err, "read_tensor: %zu floats asked, the "
                 "tensor has %zu", nfloats, n);
        return -EINVAL;
    }
    if (esz == sizeof(float)) {
        TD__CU(be, cudaMemcpyAsync(host, src, n * sizeof *host,
                                   cudaMemcpyDeviceToHost, be->compute));
        TD__CU(be, cudaStreamSynchronize(be->compute));
        return 0;
    }
    return td__read_16(be, src, host, n);
}

static int td__cuda_write_param(td_backend *b, int index, const float *host,
                                size_t nfloats)
{
    td__cuda *be = td__be(b);
    const td_model *m = b->model;
    if (index < 0 || index >= m->nparams || nfloats != m->params[index].count)
        return -EINVAL;
    TD__CU(be, cudaMemcpyAsync(be->params + td__cuda_param_off(m, index), host,
                               nfloats * sizeof *host, cudaMemcpyHostToDevice,
                               be->compute));
    TD__TRY(td__cuda_narrow_params(be));
    TD__CU(be, cudaStreamSynchronize(be->compute));
    return 0;
}

/* ---- events: one per stream, so an event covers copies and snapshots;
 * elapsed time is measured on the compute stream ------------------------- */

static void td__cuda_event_destroy(td_backend *b, td_event *ev)
{
    if (!ev)
        return;
    if (ev->c)
        cudaEventDestroy(ev->c);
    if (ev->x)
        cudaEventDestroy(ev->x);
    if (ev->s)
        cudaEventDestroy(ev->s);
    free(ev);
}

static td_event *td__cuda_event_create(td_backend *b)
{
    (void)td__be(b); /* events belong to the current device: the backend's */
    td_event *ev = calloc(1, sizeof *ev);
    if (!ev)
        return NULL;
    if (cudaEventCreate(&ev->c) != cudaSuccess ||
        cudaEventCreateWithFlags(&ev->x, cudaEventDisableTiming) !=
            cudaSuccess ||
        cudaEventCreateWithFlags(&ev->s, cudaEventDisableTiming) !=
            cudaSuccess) {
        snprintf(b->err, sizeof b->err, "cuda: cannot create an event: %s",
                 cudaGetErrorString(cudaGetLastError()));
        td__cuda_event_destroy(b, ev);
        return NULL;
    }
    return ev;
}

static int td__cuda_event_record(td_backend *b, td_event *ev)
{
    td__cuda *be = td__be(b);
    TD__CU(be, cudaEventRecord(ev->c, be->compute));
    TD__CU(be, cudaEventRecord(ev->x, be->copy));
    TD__CU(be, cudaEventRecord(ev->s, be->snap));
    ev->recorded = 1;
    return 0;
}

static int td__query(td__cuda *be, cudaEvent_t e)
{
    cudaError_t r = cudaEventQuery(e);
    if (td__cuda_ready(r))
        return 1;
    if (r == cudaErrorNotReady) /* not an error, and not sticky */
        return 0;
    TD__CU(be, r);
    return 1;
}

static int td__cuda_event_query(td_backend *b, td_event *ev)
{
    td__cuda *be = td__be(b);
    int r;
    if (!ev->recorded)
        return 0;
    if ((r = td__query(be, ev->c)) != 1 || (r = td__query(be, ev->x)) != 1 ||
        (r = td__query(be, ev->s)) != 1)
        return r;
    td__stats_deliver(be);
    return 1;
}

static int td__cuda_event_sync(td_backend *b, td_event *ev)
{
    td__cuda *be = td__be(b);
    if (!ev->recorded)
        return -EINVAL;
    TD__CU(be, cudaEventSynchronize(ev->c));
    TD__CU(be, cudaEventSynchronize(ev->x));
    TD__CU(be, cudaEventSynchronize(ev->s));
    td__stats_deliver(be);
    return 0;
}

static int td__cuda_event_elapsed(td_backend *b, td_event *a, td_event *e,
                                  int64_t *ns)
{
    td__cuda *be = td__be(b);
    float ms = 0;
    if (!a->recorded || !e->recorded)
        return -EINVAL;
    cudaError_t r = cudaEventElapsedTime(&ms, a->c, e->c);
    if (!td__cuda_ready(r) && r == cudaErrorNotReady) /* asked too early: */
        return -EAGAIN;                               /* not a failure */
    TD__CU(be, r);
    *ns = (int64_t)((double)ms * 1e6);
    return 0;
}

static int td__cuda_sync(td_backend *b)
{
    td__cuda *be = td__be(b);
    TD__TRY(td__sync_streams(be));
    td__stats_deliver(be);
    return 0;
}

/* Page-locks a host buffer (checkpoint snapshots: finding 8), portable
 * across devices like the pinned batch slots. */
static int td__cuda_host_register(td_backend *b, void *p, size_t bytes)
{
    td__cuda *be = td__be(b);
    TD__CU(be, cudaHostRegister(p, bytes, cudaHostRegisterPortable));
    return 0;
}

static void td__cuda_host_unregister(td_backend *b, void *p)
{
    (void)td__be(b);
    if (cudaHostUnregister(p) != cudaSuccess)
        (void)cudaGetLastError(); /* the memory is the caller's either way */
}

static void td__cuda_destroy(td_backend *b)
{
    td__cuda *be = td__be(b);
    if (be->compute)
        (void)td__sync_streams(be);
    td__dnn_destroy(be);
    td__graph_destroy(be);
    td__blaslt_destroy(be);
    if (be->blas)
        cublasDestroy(be->blas);
    for (int i = 0; i < TD__NBUF; i++) {
        if (be->copied[i])
            cudaEventDestroy(be->copied[i]);
        if (be->consumed[i])
            cudaEventDestroy(be->consumed[i]);
    }
    cudaEvent_t one[] = {be->snap_ready, be->snap_done, be->t0};
    for (size_t i = 0; i < sizeof one / sizeof one[0]; i++)
        if (one[i])
            cudaEventDestroy(one[i]);
    for (int i = 0; i < TD_CUDA_TIMES_KEPT; i++) {
        td__times_ev *t = &be->times[i];
        cudaEvent_t four[] = {t->c0, t->c1, t->k0, t->k1};
        for (int j = 0; j < 4; j++)
            if (four[j])
                cudaEventDestroy(four[j]);
    }
    if (be->stat) {
        for (int i = 0; i < TD__NSTAT; i++)
            if (be->stat[i].done)
                cudaEventDestroy(be->stat[i].done);
        cudaFreeHost(be->stat);
    }
    if (be->arena)
        cudaFree(be->arena);
    cudaStream_t st[] = {be->compute, be->copy, be->snap};
    for (int i = 0; i < 3; i++)
        if (st[i])
            cudaStreamDestroy(st[i]);
    (void)cudaGetLastError();
    pthread_mutex_destroy(&be->stat_mu);
    td_memplan_free(&be->plan);
    free(be->gl);
    free(be);
}

static const td_backend_ops td__cuda_ops = {
    .name = "cuda",
    .destroy = td__cuda_destroy,
    .upload = td__cuda_upload,
    .train_step = td__cuda_train_step,
    .eval_step = td__cuda_eval_step,
    .read_stats = td__cuda_read_stats,
    .snapshot = td__cuda_snapshot,
    .restore = td__cuda_restore,
    .read_tensor = td__cuda_read_tensor,
    .write_param = td__cuda_write_param,
    .event_create = td__cuda_event_create,
    .event_destroy = td__cuda_event_destroy,
    .event_record = td__cuda_event_record,
    .event_query = td__cuda_event_query,
    .event_sync = td__cuda_event_sync,
    .event_elapsed_ns = td__cuda_event_elapsed,
    .sync = td__cuda_sync,
    .host_register = td__cuda_host_register,
    .host_unregister = td__cuda_host_unregister,
    .set_loss_scale = td__cuda_set_loss_scale,
};

/* ---- create ------------------------------------------------------------------- */

static int td__cuda_check(const td_model *m, const td_backend_config *cfg,
                          int device, char *err, size_t errcap)
{
    if ((unsigned)cfg->dtype > TD_F16) {
        snprintf(err, errcap, "cuda backend: dtype %d is not one of fp32, "
                 "bf16, fp16", (int)cfg->dtype);
        return -EINVAL;
    }
    if ((unsigned)cfg->cuda_graphs > TD_GRAPHS_AUTO) {
        snprintf(err, errcap, "cuda backend: cuda_graphs %d is not one of "
                 "off (0), on (1), auto (2)", cfg->cuda_graphs);
        return -EINVAL;
    }
    if ((unsigned)cfg->mem_layout > TD_MEM_PER_LAYER) {
        snprintf(err, errcap, "cuda backend: mem_layout %d is not one of "
                 "planned, per_layer", (int)cfg->mem_layout);
        return -EINVAL;
    }
    if ((unsigned)cfg->fp32_math > TD_MATH_AUTO) {
        snprintf(err, errcap, "cuda backend: fp32_math %d is not one of "
                 "fp32, tf32, auto", (int)cfg->fp32_math);
        return -EINVAL;
    }
    if (device < 0) {
        snprintf(err, errcap, "device cuda:%d: the index must be >= 0",
                 device);
        return -EINVAL;
    }
    if (m->layers[0].out.c > 4) {
        snprintf(err, errcap, "input.channels: the cuda backend takes 1..4");
        return -EINVAL;
    }
    return td_backend_check_config(m, cfg, err, errcap);
}

int td_backend_cuda_create(const td_model *model, const td_backend_config *cfg,
                           int device, td_backend **out, char *err,
                           size_t errcap)
{
    td__cuda *be = NULL;
    int rc = td__cuda_check(model, cfg, device, err, errcap);
    *out = NULL;
    if (rc)
        return rc;
    be = calloc(1, sizeof *be);
    if (!be)
        return -ENOMEM;
    pthread_mutex_init(&be->stat_mu, NULL);
    be->base.ops = &td__cuda_ops;
    be->base.model = model;
    be->base.cfg = *cfg;
    be->dev = device;
    be->chain = -1;
    be->last_train = -1;
    be->batch = cfg->batch;
    be->nslots = (size_t)td_optim_slots(&cfg->optim);
    be->nstate = td__cuda_state_count(model);
    be->nsnap = td_backend_snapshot_floats(model, &cfg->optim);
    td__nvtx_push("cuda create");
    rc = td__cuda_init(be);
    td__nvtx_pop();
    if (rc) {
        snprintf(err, errcap, "%s", rc == -ENOMEM ? "out of memory"
                                                  : be->base.err);
        td__cuda_destroy(&be->base);
        return rc;
    }
    *out = &be->base;
    return 0;
}

/* ---- the CUDA-only API (backend_cuda.h) ---------------------------------- */

void td_cuda_register(void)
{
    static const td_gpu_backend gpu = {
        .name = "cuda",
        .create = td_backend_cuda_create,
        .pinned_allocator = td_cuda_pinned_allocator,
    };
    td_backend_register_gpu(&gpu);
    td_device_register_probe(td__cuda_probe);
}

size_t td_backend_cuda_arena_bytes(const td_backend *b)
{
    if (!b || b->ops != &td__cuda_ops)
        return 0;
    return ((const td__cuda *)b)->arena_bytes;
}

const td_memplan *td_backend_cuda_plan(const td_backend *b)
{
    if (!b || b->ops != &td__cuda_ops)
        return NULL;
    return &((const td__cuda *)b)->plan;
}

long long td_backend_cuda_act_offset(const td_backend *b,
                                     enum td_tensor_kind kind, int layer)
{
    if (!b || b->ops != &td__cuda_ops || layer < 0 ||
        layer >= b->model->nlayers ||
        (kind != TD_T_VALUE && kind != TD_T_GRAD))
        return -1;
    const td__cuda *be = (const td__cuda *)b;
    const td__gl *g = &be->gl[be->gl[layer].root];
    const char *p = kind == TD_T_VALUE ? (const char *)g->y
                                       : (const char *)g->dy;
    return p ? (long long)(p - be->acts) : -1;
}

/* e in ms since t0: the step's copy start (base_ms) and a short float. */
static int td__ms(td__cuda *be, const td__times_ev *t, cudaEvent_t e,
                  double *ms)
{
    float f = 0;
    TD__CU(be, cudaEventElapsedTime(&f, t->c0, e));
    *ms = t->base_ms + (double)f;
    return 0;
}

int td_backend_cuda_step_times(td_backend *b, int64_t step,
                               td_cuda_step_times *out)
{
    if (!b || b->ops != &td__cuda_ops || step < 0)
        return -EINVAL;
    td__cuda *be = td__be(b);
    td__times_ev *t = &be->times[step % TD_CUDA_TIMES_KEPT];
    if (t->step != step)
        return -ENOENT;
    if (!t->computed)
        return -EAGAIN;
    int r = td__query(be, t->c1);
    if (r == 1)
        r = td__query(be, t->k1);
    if (r <= 0)
        return r < 0 ? r : -EAGAIN;
    td__chain(be);
    if (!t->based)
        return -EAGAIN;
    out->step = step;
    out->copy_start = t->base_ms;
    TD__TRY(td__ms(be, t, t->c1, &out->copy_end));
    TD__TRY(td__ms(be, t, t->k0, &out->compute_start));
    TD__TRY(td__ms(be, t, t->k1, &out->compute_end));
    return 0;
}

int td_backend_cuda_copy_done(td_backend *b, int64_t upload)
{
    if (!b || b->ops != &td__cuda_ops || upload < 0)
        return -EINVAL;
    td__cuda *be = td__be(b);
    td__times_ev *t = &be->times[upload % TD_CUDA_TIMES_KEPT];
    if (t->step != upload)
        return -ENOENT;
    return td__query(be, t->c1);
}
