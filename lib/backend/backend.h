/* backend.h - the contract between the trainer and a compute device.
 *
 * Owns: the interface every backend implements (cpu on oneDNN, cuda on
 * cuDNN/cuBLAS).  Never does: input decoding, scheduling, metrics or file
 * I/O; a backend only computes on tensors it owns.
 *
 * Execution model (CUDA semantics; the CPU backend is the degenerate case)
 * ------------------------------------------------------------------------
 * Every call below except create/destroy/restore/sync and the event queries
 * is *enqueued* on the backend's stream and may return before the device
 * has done the work.  Work executes in call order.  The host learns that
 * work finished only through events (record, then query or sync) or
 * through td_backend_sync().  A typical step:
 *
 *   upload(batch)          copy n*h*w*c uint8 (NHWC) + n int32 labels to
 *                          the device; the host buffer must stay untouched
 *                          until an event recorded after upload completes
 *   record(ev_h2d)
 *   train_step(lr, t)      on the device: cast+normalise to float, forward,
 *                          softmax cross-entropy, backward, optimizer update;
 *                          accumulates loss sum and correct count
 *   record(ev_compute)
 *   read_stats(&host)      async copy of the accumulated counters and
 *                          reset of the counters; `host` is filled by
 *                          the time an event recorded after read_stats
 *                          is seen completed (below)
 *   record(ev_d2h)
 * and the trainer looks at step k-1's events and stats while step k runs.
 *
 * read_stats's `host` must stay valid until then, and is valid (holds the
 * counters) once this backend's event_sync of an event recorded after the
 * read_stats has returned 0, its event_query of such an event has
 * returned 1, or td_backend_sync has returned 0 (the trainer reads step
 * k's statistics after its event_sync on ev_d2h).  Before that the
 * backend may write it at any time.  Reads not yet seen completed when
 * the backend is destroyed are dropped.  (The CPU backend fills `host`
 * before read_stats returns, which satisfies this.)
 * Snapshots are the same: snapshot(host_buf) enqueues a copy of parameters,
 * optimizer state and batch-norm running statistics; the buffer is valid
 * once an event recorded after it completes.  On a GPU the stream-ordered
 * copy makes the snapshot consistent with the step boundary at which it was
 * enqueued, while training continues.
 *
 * The CPU backend executes every call synchronously on the calling thread
 * (with its oneDNN/OpenMP team of `threads`), so its events have completed
 * when record() returns and carry the host time of that moment.
 *
 * All calls on one backend must come from one thread (the trainer), with
 * one exception: event_sync (and event_query) of an event the trainer has
 * recorded and then handed over may be called from another thread (the
 * checkpoint writer waits so for a snapshot's copy); the trainer must not
 * record or destroy that event again until the other thread is done.
 * Host tensors exchanged with the backend (parameters, snapshots, tensor
 * reads for tests) are fp32 in the canonical layouts of model.h whatever
 * the device's compute type; `dtype` chooses the device's compute type.
 *
 * Snapshot layout: float32, concatenated in this order:
 *   parameters (model order, m->param_count floats),
 *   optimizer slot 0 for all parameters (SGD momentum buffer / AdamW m),
 *   optimizer slot 1 (AdamW v),
 *   state tensors (batch-norm running mean, running var, in model order).
 * td_backend_snapshot_floats() gives the total.
 */
#ifndef TD_BACKEND_H
#define TD_BACKEND_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include "input/batch.h"
#include "loss_scale.h"
#include "model/model.h"
#include "model/optim.h"

/* The compute type of activations (and of the products' inputs); the
 * weights' master copy, gradients and optimizer state stay fp32.  TD_F16:
 * the CUDA backend only (the CPU backend refuses it). */
enum td_dtype { TD_F32 = 0, TD_BF16 = 1, TD_F16 = 2 };

/* Where a GPU backend keeps the layers' values and gradients
 * (docs/cuda.md "The arena and the plan").  0 is the plan, so that a
 * configuration made with memset gets what jobs get. */
enum td_mem_layout {
    TD_MEM_PLANNED = 0,   /* placed by liveness over one step
                           * (backend/memplan.h, reuse on): buffers whose
                           * lifetimes do not overlap share memory, ReLU
                           * runs in place.  A value or gradient is kept
                           * only until its last use in the step, and
                           * read_tensor refuses one the step overwrote */
    TD_MEM_PER_LAYER = 1, /* every layer keeps its own value and gradient
                           * for the whole step (the layout before the
                           * plan): tests that read every layer's tensors,
                           * and the comparison with the plan */
};

/* How fp32 matrix products (convolutions, dense layers) may compute on a
 * GPU (docs/cuda.md "Precision").  0 is strict so that a configuration
 * made with memset (the tests that compare backends) stays exact; a job's
 * precision (lib/job/precision.c) sets it. */
enum td_fp32_math {
    TD_MATH_FP32 = 0,  /* strict: FMA on fp32 values, no tensor cores */
    TD_MATH_TF32 = 1,  /* TF32 tensor cores: inputs rounded to 10 mantissa
                        * bits, fp32 accumulation; needs compute capability
                        * 8.0 (refused below) */
    TD_MATH_AUTO = 2,  /* TF32 on 8.0 and newer, strict below */
};
#define TD_TF32_MIN_CC_MAJOR 8 /* TF32 tensor cores: Ampere (8.0) on */
#define TD_BF16_MIN_CC_MAJOR 8 /* bf16 tensor cores: Ampere (8.0) on */
#define TD_F16_MIN_CC_MAJOR 7  /* fp16 tensor cores: Volta (7.0) on */

/* td_backend_config.plan */
enum td_plan_mode {
    TD_PLAN_FIXED = 0,   /* the rules of the code, no measurement */
    TD_PLAN_MEASURE = 1, /* kernels timed at create, the faster kept */
};

/* CUDA: the training step captured as a CUDA graph (docs/cuda.md). */
enum td_cuda_graphs {
    TD_GRAPHS_OFF = 0,  /* every step launched kernel by kernel */
    TD_GRAPHS_ON = 1,   /* full-batch steps replay a captured graph */
    TD_GRAPHS_AUTO = 2, /* on when the measured eager step is short */
};

typedef struct td_backend_config {
    int batch;             /* largest batch; smaller eval batches are fine */
    int threads;           /* CPU: OpenMP/oneDNN threads (0 = all cores) */
    enum td_dtype dtype;   /* compute type: TD_BF16 = mixed precision (CPU:
                            * AVX512_BF16/AMX; see docs/compute.md; CUDA:
                            * compute capability 8.0), TD_F16 (CUDA, 7.0;
                            * docs/cuda.md "Precision") */
    float mean[4], std[4]; /* per-channel normalisation, pixel/255 units */
    uint64_t seed;         /* initialisation and dropout draws */
    td_optim_config optim;
    float label_smoothing; /* training loss only; evaluation is plain CE */
    enum td_fp32_math fp32_math; /* CUDA, dtype TD_F32; CPU: ignored (its
                            * fp32 is always strict) */
    int allow_slow_bf16;   /* CPU tests only: accept oneDNN's reference
                            * bf16 kernels (refused otherwise) */
    /* Per parameter (model order): that parameter's lr is the step's lr
     * times this; 0 freezes it (no update at all: no decay, no momentum,
     * its values stay bitwise the same).  NULL = 1 everywhere.  Borrowed;
     * must outlive the backend.  Both backends (cuda: one fused update
     * launch per run of equal multipliers, frozen runs skipped). */
    const float *lr_mult;
    /* Per layer (model order): 1 for a batch norm that runs in inference
     * mode during training too: it normalises with its running
     * statistics, leaves them bitwise unchanged, and its backward is the
     * inference-mode one (the job's freeze_bn_stats).  NULL = none.
     * Borrowed, like lr_mult.  Both backends (cuda: cuDNN's inference
     * forward, the backward a kernel of kernels/bn_eval.h). */
    const uint8_t *bn_eval;
    /* CUDA: run one step at create (lr 0; parameters, optimizer state and
     * running statistics put back after), so what the CUDA libraries load
     * and allocate at first use fails create, not step 1.  The runner sets
     * it; tests that only size big models leave it 0.  CPU: ignored. */
    int warmup;
    /* Bitwise-repeatable runs: CUDA picks only convolution algorithms cuDNN
     * documents as deterministic (no atomics in backward data and filter),
     * at some cost in speed.  CPU: ignored (deterministic for a fixed
     * thread count). */
    int deterministic;
    /* Loss scaling (kernels/loss_scale.h, docs/compute.md "Loss
     * scaling"): 0 = off; > 0 = the loss's gradient is multiplied by a
     * scale starting at this value, parameter gradients by its inverse
     * before the update, and a step whose updated parameters' gradients
     * hold an inf or NaN is skipped (parameters, optimizer state and
     * AdamW's step count unchanged).  Both backends (cuda: the check, the
     * decision and the scale's update run on the device, no host sync). */
    float loss_scale;
    /* Good steps before the scale doubles (TD_LS_INTERVAL when 0); < 0: a
     * static scale that never changes. */
    int loss_scale_interval;
    /* Tests only: at the train step with this t (1-based), after the
     * backward, the first gradient element of the first updated parameter
     * becomes +inf, an injected overflow.  0 = never. */
    int64_t ls_poison_step;
    /* CUDA: enum td_cuda_graphs (0, the zero config, is off; jobs default
     * to auto).  CPU: ignored. */
    int cuda_graphs;
    /* CUDA: the activation layout above (identical results either way,
     * bitwise: test_sim_memplan).  CPU: ignored (oneDNN keeps every
     * layer's tensors). */
    enum td_mem_layout mem_layout;
    /* CPU, bf16: how the plan picks each convolution's backward-weights
     * and backward-data kernels (docs/compute.md "Plan choices by
     * measurement").  0 (the zero config, tests): fixed rules, the same
     * plan on every run; TD_PLAN_MEASURE (jobs, unless "deterministic"):
     * both sides of each choice (layout, batch norms, kernels) timed on
     * this machine at create and the faster kept.  CUDA: ignored
     * (cuDNN's algorithms are searched anyway, see docs/cuda.md
     * "Numerics"). */
    enum td_plan_mode plan;
    /* The job the backend's progress lines at create belong to (the
     * job's log and its watchers see them); 0: the daemon's log only. */
    long log_job;
} td_backend_config;

/* The interval td_ls_advance takes for a configuration (0: static). */
static inline int td_backend_ls_interval(const td_backend_config *c)
{
    return c->loss_scale_interval < 0    ? 0
           : c->loss_scale_interval == 0 ? TD_LS_INTERVAL
                                         : c->loss_scale_interval;
}

/* Counters accumulated on the device since the last read_stats. */
typedef struct td_step_stats {
    double loss_sum;       /* sum of per-sample cross-entropy */
    int64_t correct;       /* samples whose arg-max matched the label */
    int64_t samples;
    /* The loss scaler after the latest train step (scale 0: off): its
     * scale, good steps and steps skipped so far, copied with the counters
     * (no extra synchronisation). */
    td_ls_state ls;
} td_step_stats;

enum td_tensor_kind {
    TD_T_VALUE = 0,        /* a layer's output (forward) */
    TD_T_GRAD = 1,         /* d loss / d (layer output) */
    TD_T_PARAM = 2,        /* a parameter's value (index = param index) */
    TD_T_PARAM_GRAD = 3,   /* its gradient from the last backward */
};

typedef struct td_backend td_backend;
typedef struct td_event td_event;

/* The operations a backend provides.  Implementations fill every slot
 * not marked optional. */
typedef struct td_backend_ops {
    const char *name;
    void (*destroy)(td_backend *be);
    int (*upload)(td_backend *be, const td_batch *b);
    /* lr for this step, t = 1-based optimizer step (AdamW bias correction) */
    int (*train_step)(td_backend *be, float lr, int64_t t);
    /* forward and loss only, batch norm in inference mode, no update */
    int (*eval_step)(td_backend *be);
    /* host: see "read_stats's host" above (valid after an event wait) */
    int (*read_stats)(td_backend *be, td_step_stats *host);
    int (*snapshot)(td_backend *be, float *host, size_t nfloats);
    int (*restore)(td_backend *be, const float *host, size_t nfloats);
    /* test and debugging access, synchronous, canonical NCHW layout; a
     * CUDA backend with the memory plan (mem_layout) refuses a layer's
     * value or gradient whose memory the latest step reused */
    int (*read_tensor)(td_backend *be, enum td_tensor_kind kind, int index,
                       float *host, size_t nfloats);
    int (*write_param)(td_backend *be, int index, const float *host,
                       size_t nfloats);
    td_event *(*event_create)(td_backend *be);
    void (*event_destroy)(td_backend *be, td_event *ev);
    int (*event_record)(td_backend *be, td_event *ev);
    /* 1 when completed, 0 when not yet, < 0 on error */
    int (*event_query)(td_backend *be, td_event *ev);
    int (*event_sync)(td_backend *be, td_event *ev);
    /* device time between two completed events */
    int (*event_elapsed_ns)(td_backend *be, td_event *a, td_event *b,
                            int64_t *ns);
    int (*sync)(td_backend *be);
    /* Optional (NULL: not needed).  Makes host memory [p, p + bytes) a
     * buffer the device copies to and from asynchronously (CUDA:
     * cudaHostRegister, so a snapshot's device-to-host copy no longer
     * blocks the trainer) until host_unregister, which must come before
     * the memory is freed and before destroy.  0, or a negative code with
     * err set: the buffer still works, synchronously. */
    int (*host_register)(td_backend *be, void *p, size_t bytes);
    void (*host_unregister)(td_backend *be, void *p);
    /* Loss scaling on (cfg.loss_scale > 0): makes *st the scaler's state
     * (a resumed job's), ordered after the work already enqueued; `st`
     * may be reused at return.  -EINVAL when loss scaling is off or the
     * scale is not positive and finite.  NULL only in backends without
     * loss scaling. */
    int (*set_loss_scale)(td_backend *be, const td_ls_state *st);
    /* Optional (NULL: the backend's plan has no choices to record).
     * plan_get: the plan's kernel choices as text (docs/compute.md "Plan
     * choices by measurement") that plan_set makes again, so a resumed
     * job computes bit for bit what it would have; -ENOSPC when cap is
     * too small.  plan_set: plans again with those choices, between
     * steps (parameters, optimizer state and statistics are kept);
     * -EINVAL with err set when they do not fit this model, CPU or
     * configuration, the backend then keeping a working plan as close
     * to them as it can. */
    int (*plan_get)(td_backend *be, char *out, size_t cap);
    int (*plan_set)(td_backend *be, const char *choices);
} td_backend_ops;

/* Every backend struct starts with this header. */
struct td_backend {
    const td_backend_ops *ops;
    const td_model *model;  /* borrowed; must outlive the backend */
    td_backend_config cfg;
    char err[256];          /* last error, for people */
};

/* Creates a backend: kind "cpu" (or "cuda" when built with it).  The
 * parameters start from td_model_init_params(model, cfg->seed).  On error
 * returns a negative code and a message in err. */
int td_backend_create(const char *kind, const td_model *model,
                      const td_backend_config *cfg, td_backend **out,
                      char *err, size_t errcap);

/* Implementations: backend/cpu (always built) and backend/cuda (its own
 * library, linked only into programs that drive GPUs; it registers itself
 * through td_backend_register_gpu, see below). */
int td_backend_cpu_create(const td_model *model, const td_backend_config *cfg,
                          td_backend **out, char *err, size_t errcap);

/* A GPU backend plugged into libtraind at run time, so that programs that
 * never drive a GPU (trainctl) do not link its runtime.  traind calls
 * td_cuda_register() (backend/cuda/backend_cuda.h) at start. */
typedef struct td_gpu_backend {
    const char *name; /* "cuda" */
    /* GPU `device` (the N of "cuda:N").  Fails with TD_E_DEVICE and the
     * runtime's reason when that GPU is absent or the model does not fit
     * in its memory. */
    int (*create)(const td_model *model, const td_backend_config *cfg,
                  int device, td_backend **out, char *err, size_t errcap);
    /* Batch slots the copy engine of GPU `device` reads directly
     * (page-locked, made with that GPU current, never GPU 0's context for
     * another GPU's job); pageable memory, with a warning, when
     * page-locking fails. */
    td_slot_allocator (*pinned_allocator)(int device);
} td_gpu_backend;

/* Registers the GPU backend (one; a later call replaces it) and returns
 * the one registered, or NULL when the program has none. */
void td_backend_register_gpu(const td_gpu_backend *gpu);
const td_gpu_backend *td_backend_gpu(void);

/* The checks every backend makes of its configuration (batch size,
 * normalisation, optimizer); each adds its own.  -EINVAL/TD_E_SPEC with a
 * message naming the job field. */
int td_backend_check_config(const td_model *m, const td_backend_config *cfg,
                            char *err, size_t errcap);

/* Floats in a snapshot for this model and optimizer. */
size_t td_backend_snapshot_floats(const td_model *m, const td_optim_config *o);

/* One tensor of a snapshot, for writers that name tensors (safetensors):
 * "conv1.weight", "conv1.weight.momentum_buffer" (SGD),
 * "conv1.weight.exp_avg" and ".exp_avg_sq" (AdamW), "bn1.running_mean". */
typedef struct td_snapshot_entry {
    char name[TD_NAME_MAX + 32];
    int ndims;
    int dims[4];
    size_t offset;   /* in floats from the start of the snapshot */
    size_t count;
} td_snapshot_entry;

/* Number of entries (params * (1 + slots) + state); fills at most cap. */
int td_backend_snapshot_layout(const td_model *m, const td_optim_config *o,
                               td_snapshot_entry *out, int cap);

/* Thin wrappers, so callers read as prose. */
static inline void td_backend_destroy(td_backend *be)
{
    if (be)
        be->ops->destroy(be);
}
static inline int td_backend_upload(td_backend *be, const td_batch *b)
{
    return be->ops->upload(be, b);
}
static inline int td_backend_train_step(td_backend *be, float lr, int64_t t)
{
    return be->ops->train_step(be, lr, t);
}
static inline int td_backend_eval_step(td_backend *be)
{
    return be->ops->eval_step(be);
}
static inline int td_backend_read_stats(td_backend *be, td_step_stats *s)
{
    return be->ops->read_stats(be, s);
}
static inline int td_backend_snapshot(td_backend *be, float *h, size_t n)
{
    return be->ops->snapshot(be, h, n);
}
static inline int td_backend_restore(td_backend *be, const float *h, size_t n)
{
    return be->ops->restore(be, h, n);
}
static inline int td_backend_sync(td_backend *be)
{
    return be->ops->sync(be);
}
/* -ENOTSUP when the backend has no plan choices. */
static inline int td_backend_plan_get(td_backend *be, char *out, size_t cap)
{
    return be->ops->plan_get ? be->ops->plan_get(be, out, cap) : -ENOTSUP;
}
static inline int td_backend_plan_set(td_backend *be, const char *choices)
{
    return be->ops->plan_set ? be->ops->plan_set(be, choices) : -ENOTSUP;
}

#endif
