/* cuda_int.h - internals shared by the CUDA backend's files.
 *
 * Owns: the CUDA backend's data structures and the contracts between its
 * files:
 *   cuda.c                  lifecycle, streams, events, uploads,
 *                           statistics, snapshots, the ops table
 *   cuda_arena.c            the device arena: layout, size, allocation
 *   cuda_plan.c             the activation region from the memory plan
 *                           (memplan.h): where every y, dy and mask
 *                           lives, and what a step leaves readable
 *   cuda_step.c             one step: forward, loss, backward, update
 *                           (cuBLASLt for dense layers, kernels for the rest)
 *   cuda_blaslt.c           the dense layers' cuBLASLt GEMMs: descriptors,
 *                           bias epilogues, the algorithms chosen at create
 *   cuda_dnn.c              every cuDNN call (convolution, batch norm,
 *                           pooling, activation); the only file that uses
 *                           cuDNN's deprecated legacy API
 *   cuda_kernels.cu         the CUDA kernels, over the arithmetic in kernels/
 *   cuda_lscale.c           loss scaling's place in a step (scale, check,
 *                           decision on the device), its state at resume
 *   cuda_lscale.cu          loss scaling's kernels (kernels/loss_scale.h)
 *   cuda_err.c              failure messages; sticky errors mark the GPU
 *   cuda_mem.c              shadow copies of the state; the warm-up step
 *   cuda_pinned.c           the page-locked host batch slots
 *   cuda_prec.c             the compute type (fp32 strict or TF32, bf16,
 *                           fp16) by compute capability
 *   cuda_graph.c            the step scalars; the training step captured
 *                           as a CUDA graph per batch buffer and replayed
 *   cuda_nhwc.c             the 16-bit layout: the KRSC weight copy, the
 *                           gradients back to KCRS, dense layers over
 *                           NHWC inputs, tensors to NCHW for read_tensor
 * Nothing outside these files may include this header.
 *
 * Data: activations and their gradients are in the compute type
 * (cfg.dtype: fp32, bf16 or fp16; the type of every cuDNN activation
 * descriptor, element sizes from td__cuda_esize), NCHW for fp32 and NHWC
 * for the 16-bit types (kernels/layout.h; the batch's channels padded to
 * be->stem_c, convolution filters of the 16-bit copy in KRSC:
 * cuda_nhwc.c).  Parameters (the fp32
 * master weights), their gradients, optimizer slots and running statistics
 * are fp32 flat arrays in the canonical layouts of model.h, so snapshots
 * and tests need no reordering.  With a 16-bit compute type the arena
 * also holds `lowp`, the master weights rounded to that type (written by
 * the update kernel, rebuilt by td__cuda_narrow_params wherever the
 * master weights are set otherwise), which convolutions and GEMMs read,
 * and `lgrad`, where cuDNN writes convolution weight and bias gradients
 * in the compute type before they are widened into the fp32 gradients
 * (docs/cuda.md "Precision").  Everything on the device lives in one
 * arena allocated at create; the layers' values, gradients and dropout
 * masks in its activation region, placed by the memory plan (cuda_plan.c:
 * buffers share memory when their lifetimes in the step do not overlap,
 * ReLU runs in place), or one per layer (cfg.mem_layout).
 *
 * Streams: `copy` carries host-to-device batch copies, `compute` the steps,
 * `snap` the device-to-host snapshot copies.  Two device batch buffers
 * alternate so the copy of batch k+1 overlaps the step of batch k.
 */
#ifndef TD_BACKEND_CUDA_INT_H
#define TD_BACKEND_CUDA_INT_H

/* cublasLt.h declares cublasLtLoggerForceDisable() without a prototype
 * (CUDA 13): silenced around it only, for C (-Wstrict-prototypes is C's) */
#ifndef __cplusplus
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#endif
#include <cublasLt.h>
#ifndef __cplusplus
#pragma GCC diagnostic pop
#endif
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <pthread.h>

#include "backend/backend.h"
#include "backend/cuda/backend_cuda.h"
#include "backend/memplan.h"
#include "backend/cuda/cuda_kernels.h"
#include "stats.h"

typedef struct td__dnn td__dnn;          /* backend_cuda_dnn.c */
typedef struct td__dnn_layer td__dnn_layer;
typedef struct td__lt td__lt;            /* cuda_blaslt.c */

typedef struct td__gl {
    int root;          /* layer whose buffers hold this output (flatten) */
    int written;       /* gradient summands written this backward */
    int nsum;          /* summands a backward writes into dy (roots; 0:
                          nothing reads this layer, dy is zeroed at its
                          own backward) */
    unsigned char kept_y[2], kept_dy; /* y still in memory after an
                          evaluation [0] or a training [1] step, dy after
                          a training step (cuda_plan.c) */
    size_t nelem;      /* batch * c * h * w */
    void *y, *dy;      /* value and gradient (roots only), compute type */
    float *w, *dw, *b, *db; /* views into params / grads (conv, dense, bn) */
    void *wl, *bl;     /* conv, dense: the weights as the products read
                          them (lowp views; fp32: w, b themselves) */
    void *dwl, *dbl;   /* conv: where cuDNN writes dW, db (lgrad views;
                          fp32: dw, db themselves) */
    float *rmean, *rvar;    /* batch norm: views into the state array */
    float *smean, *sinv;    /* batch norm: saved batch mean, 1/sqrt(var+eps) */
    int bnfuse;             /* batch norm: the in-place ReLU its training
                               forward and backward compute with it
                               (cuDNN's Ex calls, cuda_dnn.c); 0: none */
    int bnadd;              /* ... and the add between them (BN_ADD_
                               ACTIVATION: the residual block's end); 0:
                               BN_ACTIVATION */
    int bnfuse_of;          /* ReLU or add: the batch norm whose fused
                               call computes it in training; 0: none */
    size_t rsb;             /* ... and the reserve space's bytes */
    void *reserve;          /* ... placed by the plan (TD_MB_RESERVE) */
    uint8_t *mask;          /* dropout keep mask */
    td__dnn_layer *dnn;     /* cuDNN descriptors (conv, bn, relu, pools) */
} td__gl;

#define TD__NBUF 2 /* device batch buffers (double buffering) */

typedef struct td__times_ev {
    cudaEvent_t c0, c1, k0, k1; /* copy start/end, compute start/end */
    int64_t step;               /* -1: unused */
    int computed;               /* a train/eval step recorded k0/k1 */
    int based;                  /* base_ms is known (td__chain) */
    double base_ms;             /* c0 in ms since t0 */
} td__times_ev;

typedef struct td__stat_slot {
    td_dev_stats val;       /* pinned: the device writes it */
    td_step_stats *dst;     /* the caller's struct, filled on delivery */
    td_ls_state ls;         /* pinned: the loss scaler, copied with val */
    cudaEvent_t done;       /* recorded after the copy into val */
    int busy;               /* enqueued, not yet delivered */
} td__stat_slot;

#define TD__NSTAT 16
#define TD__NSCAL 16 /* pinned step-scalar slots in flight */
#define TD__BLAS_WS ((size_t)32 << 20) /* what cuBLAS asks for on Hopper */

typedef struct td__cuda {
    td_backend base;
    int dev;
    int batch, n;                /* planned batch, samples uploaded */
    int cur;                     /* buffer of the latest upload */
    int64_t uploads, step;       /* uploads done; this train step, 0-based
                                    global (t - 1): the dropout draws */
    cudaStream_t compute, copy, snap;
    cudaEvent_t copied[TD__NBUF], consumed[TD__NBUF];
    cudaEvent_t snap_ready, snap_done, t0;
    int snap_pending;
    cublasHandle_t blas;
    cublasLtHandle_t blaslt;     /* dense layers (cuda_blaslt.c) */
    td__lt *lt;                  /* per layer: their GEMMs' descriptors */
    int tf32;                    /* fp32 math: TF32 tensor cores (cuda_prec.c) */
    enum td_dtype dt;            /* activations' type (cfg.dtype) */
    size_t esz;                  /* its element size */
    td__dnn *dnn;
    td__gl *gl;
    /* the arena and what is carved from it */
    char *arena;
    size_t arena_bytes;
    size_t free_before;          /* cudaMemGetInfo before the arena */
    size_t headroom;             /* kept free beside it (td__headroom) */
    td_memplan plan;             /* the activation region's layout */
    char *acts;                  /* the activation region, plan.activations
                                    bytes */
    int last_train;              /* the latest step: 1 training, 0
                                    evaluation, -1 none yet */
    float *params, *grads, *slots, *state, *shadow;
    void *lowp, *lgrad;          /* 16-bit compute types only (see Data) */
    float *xz, *xg;              /* 16-bit: the loss's fp32 logits and
                                    their gradient, batch x classes */
    int stem_c;                  /* channels layer 0 is stored with (NHWC:
                                    padded, td_memplan_stem_channels) */
    float *dwt;                  /* 16-bit: a dense layer's permuted fp32
                                    weight gradient (cuda_nhwc.c) */
    size_t nslots, nstate, nsnap;
    uint8_t *pixels[TD__NBUF];
    int32_t *labels[TD__NBUF];
    double *row_loss;
    int *row_ok;
    float *bn_part;              /* scratch of the bn_eval backward */
    td_dev_stats *acc;
    td_ls_dev *ls;               /* the loss scaler (cfg.loss_scale > 0) */
    void *work;
    size_t work_bytes;          /* cuDNN workspace (max over layers) */
    void *blas_ws;              /* cuBLAS workspace, TD__BLAS_WS bytes */
    float nscale[4], nbias[4];
    td__stat_slot *stat;         /* pinned ring for read_stats */
    int stat_next;               /* the slot the next read_stats takes */
    int stat_old, stat_busy;     /* oldest undelivered slot, how many */
    pthread_mutex_t stat_mu;     /* the ring: event_sync may deliver from
                                    the checkpoint writer's thread */
    td__times_ev times[TD_CUDA_TIMES_KEPT];
    /* the step scalars (cuda_graph.c): td_step_scalars then nruns floats
     * on the device; a pinned ring of host copies, each reused after its
     * `scal_done` event */
    td_step_scalars *scal;
    float *scal_lr;
    int nruns;
    char *scal_host;             /* TD__NSCAL slots of td__scal_bytes */
    int scal_pageable;           /* page-locking failed: malloc */
    cudaEvent_t scal_done[TD__NSCAL];
    int scal_used[TD__NSCAL], scal_next;
    /* CUDA graphs: one executable graph per batch buffer */
    cudaGraphExec_t gexec[TD__NBUF];
    int capturing;               /* the step is being captured: no
                                    consumed[] record inside */
    int graph_on;                /* -1 undecided (auto), 0 eager, 1 graphs */
    int64_t probe_upload;        /* auto: the eager step being timed */
    int probes;                  /* auto: eager steps timed */
    double eager_ms;             /* auto: shortest eager step measured */
    long graph_caps, graph_runs; /* captures made, graph launches */
    int64_t chain;               /* the latest upload whose base_ms is
                                    known; -1: none (t0 is the anchor) */
} td__cuda;

/* ---- errors: every CUDA, cuBLAS and cuDNN status goes through these ---- */

/* Writes "file:line: call: message" into be->base.err; returns TD_E_DEVICE.
 * When the thread's last CUDA error is sticky (td__cuda_sticky: a cuBLAS
 * or cuDNN failure can hide one), the message says instead that the GPU
 * is unusable, and the GPU is marked so (td_device_mark_unusable). */
int td__cuda_fail(td__cuda *be, const char *file, int line, const char *call,
                  const char *msg);
/* The same for a CUDA runtime status e. */
int td__cuda_fail_rt(td__cuda *be, const char *file, int line,
                     const char *call, cudaError_t e);
/* 1 for the errors after which, as the CUDA runtime documents, "any
 * further CUDA work will return the same error" until the process ends. */
int td__cuda_sticky(cudaError_t e);
/* 1 when a query (cudaEventQuery, cudaStreamQuery, cudaEventElapsedTime)
 * returned cudaSuccess.  Its cudaErrorNotReady, which is no error, is
 * taken off the thread's last error (the runtime keeps it there, as
 * PyTorch's queries assume: the next kernel launcher's cudaGetLastError
 * would return it as its own); any other error stays there for the
 * caller's next checked call to report. */
int td__cuda_ready(cudaError_t r);
const char *td__cublas_str(cublasStatus_t s);

#define TD__CU(be, call)                                                     \
    do {                                                                     \
        cudaError_t td__e = (call);                                          \
        if (td__e != cudaSuccess)                                            \
            return td__cuda_fail_rt((be), __FILE__, __LINE__, #call, td__e); \
    } while (0)

#define TD__BLAS(be, call)                                                   \
    do {                                                                     \
        cublasStatus_t td__s = (call);                                       \
        if (td__s != CUBLAS_STATUS_SUCCESS)                                  \
            return td__cuda_fail((be), __FILE__, __LINE__, #call,            \
                                 td__cublas_str(td__s));                     \
    } while (0)

/* Plain return-code propagation. */
#define TD__TRY(expr)                                                        \
    do {                                                                     \
        int td__rc = (expr);                                                 \
        if (td__rc)                                                          \
            return td__rc;                                                   \
    } while (0)

size_t td__cuda_esize(enum td_dtype t);
/* 1 when the gpu_arch list `archs` has code for compute capability
 * major.minor (cuda.c) */
int td__cuda_arch_ok(const char *archs, int major, int minor);

/* cuda_arena.c: the state tensors' floats, a parameter's offset in the
 * flat parameter block, each layer's root (the layer whose buffers it
 * shares), and the arena laid out and allocated (0 or negative errno,
 * with the sizes in the error when the model does not fit). */
size_t td__cuda_state_count(const td_model *m);
size_t td__cuda_param_off(const td_model *m, int p);
void td__cuda_roots(td__cuda *be);
int td__cuda_arena(td__cuda *be);

/* cuda_plan.c: the plan of the activation region for this model, batch,
 * element size and cfg.mem_layout, the summands of every gradient and
 * what each step kind leaves in memory (0, or an error in be->base.err);
 * the layers' y, dy, mask, smean and sinv pointed into the region at
 * `acts` (NULL: nothing to point yet); whether layer L's value (grad 0)
 * or gradient (grad 1) still holds what the latest step computed (0, or
 * -EINVAL with the reason in be->base.err). */
int td__cuda_plan(td__cuda *be);
void td__cuda_place_acts(td__cuda *be, char *acts);
int td__cuda_readable(td__cuda *be, int L, int grad);

/* Layer L is a batch norm kept in inference mode while training
 * (cfg.bn_eval, the job's freeze_bn_stats): its forward normalises with
 * the running statistics and leaves them alone, its backward is the
 * inference-mode one (kernels/bn_eval.h). */
static inline int td__cuda_bn_eval(const td__cuda *be, int L)
{
    return be->base.cfg.bn_eval && be->base.cfg.bn_eval[L] &&
           be->base.model->layers[L].kind == TD_L_BN;
}

/* ---- cuda_nhwc.c: the 16-bit NHWC layout (docs/cuda.md "NHWC") ----------- */
/* 1 when activations are NHWC (the 16-bit types). */
static inline int td__cuda_nhwc(const td__cuda *be) { return be->dt != TD_F32; }
/* The 16-bit copy's convolution (and NHWC-reading dense) weights
 * rewritten in KRSC from the fp32 masters, on the compute stream,
 * wherever the copy is rebuilt (td__cuda_narrow_params: create, load,
 * resume; never in a step, whose update writes them in KRSC itself).
 * No-op in fp32. */
int td__cuda_krsc_weights(td__cuda *be);
/* The update kernel's map (kernels/layout.h) for master elements [at,
 * end) (a run's, or what is left of it): the permuted segments there, at
 * most TD_LOWP_SEGS; returns how many elements from at the map covers
 * (end - at, or less when more filters follow: the next launch's map
 * starts there).  fp32: an empty map, end - at. */
size_t td__cuda_lowp_map(const td__cuda *be, size_t at, size_t end,
                         td_lowp_map *map);
/* After cuDNN wrote conv layer L's KRSC 16-bit weight gradient into
 * dwl: widened into the fp32 KCRS gradient (bias widened as is). */
int td__cuda_conv_grad_kcrs(td__cuda *be, int L);
/* The dense layer L's backward when it reads an NHWC tensor: the weight
 * gradient goes to be->dwt (td__dense_bwd unchanged) and is permuted back
 * into the canonical gradient. */
int td__cuda_dense_bwd_nhwc(td__cuda *be, int L, void *dx, int accumulate,
                            int (*bwd)(td__cuda *, int, void *, int));
/* A value or gradient tensor of layer L (the root's buffer, n floats
 * canonical) converted to NCHW floats on the host. */
int td__cuda_read_act(td__cuda *be, int L, const void *src, float *host,
                      size_t n);

/* ---- NVTX ranges (no-ops when the header is missing) --------------------- */
void td__nvtx_push(const char *name);
void td__nvtx_pop(void);

/* ---- cuda_blaslt.c: the dense layers on cuBLASLt -------------------------- */
/* The GEMMs of a dense layer: forward (bias epilogue), weight gradient
 * (bias-gradient epilogue), input gradient. */
enum { TD__LT_FWD, TD__LT_WGRAD, TD__LT_DGRAD, TD__LT_N };
/* The handle and every dense layer's descriptors and algorithms, after
 * the arena (its pointers decide the alignment asked for); destroy
 * undoes it (also after a partial create). */
int td__blaslt_create(td__cuda *be);
void td__blaslt_destroy(td__cuda *be);
/* 1 when GEMM `which` of dense layer L runs on cuBLASLt; 0: cuBLASLt had
 * no algorithm for it, cuda_step.c runs the cuBLAS GEMM (and bias
 * kernel) instead. */
int td__blaslt_has(const td__cuda *be, int L, int which);
/* 1 when ReLU layer L is computed by its dense input's forward epilogue
 * (RELU_BIAS): its forward is skipped, its backward is cuDNN's. */
int td__blaslt_fused_relu(const td__cuda *be, int L);
/* y = W x + b; dW and db from one call; dx (beta 1 when accumulate). */
int td__blaslt_fwd(td__cuda *be, int L);
int td__blaslt_wgrad(td__cuda *be, int L);
int td__blaslt_dgrad(td__cuda *be, int L, void *dx, int accumulate);

/* ---- cuda_prec.c ------------------------------------------------------------ */
/* Resolves cfg.dtype and cfg.fp32_math against the GPU's compute
 * capability into be->dt, be->esz and be->tf32 and sets the cuBLAS
 * handle's math mode; TD_E_NOTSUP (message in be->base.err) for tf32 or
 * bf16 below compute capability 8.0 and fp16 below 7.0. */
int td__cuda_precision(td__cuda *be);
/* 1 when activations are 16-bit (bf16 or fp16). */
static inline int td__cuda_lowp(const td__cuda *be) { return be->dt != TD_F32; }
/* With a 16-bit compute type: lowp = the master weights rounded, on the
 * compute stream (after anything that set them other than the update). */
int td__cuda_narrow_params(td__cuda *be);

/* ---- cuda_mem.c ------------------------------------------------------------- */
/* Parameters, optimizer slots and running statistics into the shadow and
 * back, on the compute stream. */
int td__to_shadow(td__cuda *be);
int td__from_shadow(td__cuda *be);
/* One training and one evaluation step on a zero batch at create, the
 * state put back after; logs cudaMemGetInfo.  Ends synchronised. */
int td__warmup(td__cuda *be);

/* ---- backend_cuda_dnn.c ---------------------------------------------------- */
/* Handle on the compute stream; descriptors and algorithm choice per layer
 * (once per shape); *ws receives the largest workspace any layer needs. */
int td__dnn_create(td__cuda *be, size_t *ws);
void td__dnn_destroy(td__cuda *be);
/* Once the arena exists: measures the convolution algorithms of every
 * shape and direction not measured before in this process (cudnnFind*Ex
 * on the arena's buffers and workspace; it overwrites outputs, gradients
 * and the workspace, so it runs before the initial values are set) and
 * takes the fastest that fits the workspace (and is deterministic when
 * asked); the heuristic choice stays where none fits. */
int td__dnn_find(td__cuda *be);
/* 1 when ReLU layer L is computed by its batch norm's fused training
 * forward and backward (gl[].bnfuse): both its own passes are skipped in
 * a training step, its gradient summand counted as written. */
int td__dnn_fused_relu(const td__cuda *be, int L);
/* An add ending a residual block whose batch norm is fused
 * (BN_ADD_ACTIVATION): in training its forward is the fused forward
 * (the batch norm's own is skipped), its backward the fused backward,
 * which writes both its inputs' summands and the batch norm's input
 * gradient (the batch norm's own backward is skipped). */
int td__dnn_bnadd_fwd(td__cuda *be, int A);
int td__dnn_bnadd_bwd(td__cuda *be, int A, void *dz, int acc_z, void *dx,
                      int acc_x);
/* conv, bn, relu, pools: forward of layer L (train selects batch-norm
 * batch statistics and updates the running ones). */
int td__dnn_forward(td__cuda *be, int L, int train);
/* backward of layer L: parameter gradients (overwritten) and, when dx is
 * not NULL, the input gradient into dx (summed into it when accumulate). */
int td__dnn_backward(td__cuda *be, int L, void *dx, int accumulate);

/* ---- backend_cuda_step.c --------------------------------------------------- */
int td__cuda_forward(td__cuda *be, int train);
int td__cuda_loss(td__cuda *be, int train);
int td__cuda_backward(td__cuda *be);
/* The optimizer update at the lrs of the step scalars. */
int td__cuda_update(td__cuda *be);
/* A run of consecutive parameters with equal lr multipliers (cfg.lr_mult;
 * the whole model, multiplier 1, without them): run r, its multiplier
 * (0: frozen), elements [lo, lo + count) of the flat parameter block, and
 * parameters [p, q).  The unit of the fused update, of the loss scaler's
 * check and of the step scalars' lrs. */
typedef struct td__prun {
    int r, p, q;
    size_t lo, count;
    float mult;
} td__prun;
#define TD__RUN_FIRST ((td__prun){.r = -1})
/* Advances s (from TD__RUN_FIRST) to the next run, frozen ones included;
 * 0 after the last.  for (td__prun s = TD__RUN_FIRST;
 * td__cuda_next_run(be, &s);) visits them all. */
int td__cuda_next_run(const td__cuda *be, td__prun *s);
/* How many runs td__cuda_update launches per (frozen ones count), and
 * with out (one float per run) each run's lr for the step's lr. */
int td__cuda_lr_runs(const td__cuda *be, float lr, float *out);

/* ---- cuda_graph.c ---------------------------------------------------------- */
/* Bytes of the device step scalars (td_step_scalars, then one lr per
 * run); the arena carves them. */
size_t td__scal_bytes(const td__cuda *be);
/* The pinned slots and their events; the graph mode from the config. */
int td__graph_init(td__cuda *be);
void td__graph_destroy(td__cuda *be);
/* This training step's scalars (lr, t, be->step) into the device block:
 * one cudaMemcpyAsync from a pinned slot on the compute stream. */
int td__step_scalars(td__cuda *be, float lr, int64_t t);
/* Whether this training step runs as a graph (full batch, lr > 0, graphs
 * on or auto having decided so); auto times eager steps first. */
int td__graph_use(td__cuda *be, float lr);
/* The step (forward, loss, backward, update, statistics) of buffer cur:
 * captured at its first use, then launched on the compute stream. */
int td__graph_launch(td__cuda *be);
/* An eager full training step was enqueued (auto mode times it). */
void td__graph_eager_done(td__cuda *be);

/* ---- cuda_lscale.c: loss scaling (cfg.loss_scale > 0) ---------------------- */
/* be->ls when loss scaling is on, else NULL (what the kernels take). */
const td_ls_dev *td__cuda_ls(const td__cuda *be);
/* The scaler at its initial state (create, after the warm-up); sync. */
int td__cuda_ls_init(td__cuda *be);
/* The loss's gradient (count floats) times the device's scale. */
int td__cuda_ls_scale_loss(td__cuda *be, float *dlogits, size_t count);
/* After the backward of step t: the test poison (cfg.ls_poison_step),
 * the inf/NaN check of the updated gradients and the one-thread decision
 * the update kernels read. */
int td__cuda_ls_decide(td__cuda *be);
/* The td_backend_ops set_loss_scale. */
int td__cuda_set_loss_scale(td_backend *b, const td_ls_state *st);

/* ---- backend_cuda_kernels.cu: see backend_cuda_kernels.h ------------- */

#endif
