/* memplan.h - the device memory a training step needs, planned on the host.
 *
 * Owns: the liveness of every activation (y), gradient (dy) and dropout
 * mask of a model over one training step, their placement in one arena
 * (buffers whose lifetimes do not overlap share memory; ReLU runs in place
 * on the output of a convolution, batch norm, dense or add that nothing
 * else reads), and the bill of the whole device allocation: parameters,
 * gradients, optimizer state, the low-precision weight copy, batch
 * buffers, workspaces and headroom.  It needs no device, so a user can ask
 * before submitting whether a batch fits a 40 or 80 GB card
 * (`trainctl plan`), and the tests can check the plan without a GPU.
 * Never does: allocate device memory or know a device's real cuDNN
 * workspace (the caller passes its figure; the backend logs the real one).
 *
 * The step's clock: layer L's forward runs at time L (the batch, layer 0,
 * at 0), the loss at N = nlayers, layer L's backward at 2N - L.  A buffer
 * is live over [first, last] of those times, both ends included.  The
 * batch (layer 0) has a gradient buffer only when a layer other than a
 * convolution or a dense layer reads it (theirs skip the input gradient).
 * Evaluation runs the forward times 0..N only, a subset of the step.
 */
#ifndef TD_MEMPLAN_H
#define TD_MEMPLAN_H

#include <stddef.h>
#include <stdint.h>

#include "model/model.h"

typedef struct td_memplan_config {
    int batch;
    int act_bytes;        /* bytes per activation/gradient element: 4 for
                             fp32 and tf32, 2 for bf16 and fp16 */
    int optim_slots;      /* fp32 tensors of optimizer state per parameter:
                             0 plain SGD, 1 momentum, 2 AdamW */
    int reuse;            /* 0: every layer keeps its own y and dy for the
                             whole step (the CUDA backend before the plan);
                             1: placement by liveness, ReLU in place */
    int nbuf;             /* batch buffers on the device (double buffering) */
    size_t workspace;     /* cuDNN workspace bytes (largest algorithm) */
    size_t blas_workspace;
    int bn_eval_channels; /* channels of the widest batch norm kept in
                             inference mode while training (the job's
                             freeze_bn_stats; its backward's scratch), or
                             0 */
    size_t step_bytes;    /* the device's per-step values: the step scalars
                             (cuda_graph.c) and the loss scaler; the CUDA
                             backend passes its figure, planners before
                             create leave 0 (a few hundred bytes) */
    const size_t *bn_reserve; /* per layer: bytes of a batch norm's
                             reserve space (cuDNN's fused batch norm +
                             ReLU, docs/cuda.md "NHWC"), a buffer
                             (TD_MB_RESERVE) live from the fused forward
                             (the batch norm's, or at a block's end the
                             add's) to the fused backward, and the value of the
                             ReLU in place on it kept to its backward,
                             which reads it; for a batch norm ending a
                             residual block (td_memplan_bn_add_relu) the
                             add's value kept to the add's backward and
                             the batch norm's input gradient written from
                             the add's backward on (the fused backward
                             runs there); NULL: none */
    size_t headroom_min;  /* at least this much left for what the runtime,
                             cuBLAS and cuDNN allocate lazily; the plan
                             keeps max(headroom_min, 5% of the rest) */
} td_memplan_config;

/* TD_MB_RESERVE: a fused batch norm's reserve space (bn_reserve), live
 * from its fused forward to its fused backward. */
enum td_membuf_kind { TD_MB_Y = 0, TD_MB_DY, TD_MB_MASK, TD_MB_RESERVE };

typedef struct td_membuf {
    enum td_membuf_kind kind;
    int layer;            /* the layer whose output (or mask) this is */
    int alias;            /* index of the buffer this one shares memory
                             with in place (ReLU), or -1 */
    size_t bytes;
    size_t offset;        /* in the activation region */
    int first, last;      /* live over [first, last] (step clock above) */
} td_membuf;

typedef struct td_memplan {
    size_t params;        /* fp32 master weights */
    size_t grads;         /* parameter gradients in fp32, and with a 16-bit
                             compute type the 16-bit ones convolutions
                             write before they are widened */
    size_t optim;         /* optimizer state, fp32 */
    size_t weights_lp;    /* the low-precision copy convolutions read */
    size_t state;         /* batch-norm running statistics, fp32 */
    size_t shadow;        /* the snapshot copy (checkpoints), fp32 */
    size_t batches;       /* nbuf x (uint8 pixels + int32 labels) */
    size_t activations;   /* the activation region: y, dy, masks, BN saves
                             (the CUDA backend allocates exactly this) */
    size_t bn_saves;      /* of which the batch norms' saved statistics,
                             at its end: per batch norm, 256-aligned, C
                             means then C inverse deviations (fp32) */
    size_t workspace;     /* cuDNN + cuBLAS */
    size_t scratch;       /* the step's per-sample loss and correctness
                             rows, its counters, the bn_eval scratch, the
                             per-step values (step_bytes), and with a
                             16-bit compute type the loss's fp32 logits and
                             gradient */
    size_t headroom;
    size_t total;
    size_t activations_sum; /* every buffer on its own (no reuse) */
    int nbufs;
    td_membuf *bufs;
} td_memplan;

/* The CUDA backend's 16-bit layout (act_bytes 2; docs/cuda.md "NHWC"):
 * activations NHWC, convolution filters KRSC.  The batch (layer 0) is
 * stored with td_memplan_stem_channels channels: its channels rounded up
 * to a multiple of 8 (cuDNN's rule for fp16/bf16 tensor-core
 * convolutions in NHWC) when every layer reading it is a convolution,
 * else its own; the pad channels are zero.  Each convolution reading the
 * batch then has a padded KRSC filter of K x R x S x that many channels,
 * stored beside the 16-bit weight copy (and its gradient beside the
 * 16-bit gradients): td_memplan_stem_extra elements in all.  A dense
 * layer whose input (through flattens) is a spatial tensor with several
 * channels reads it in NHWC order (td_memplan_dense_nhwc): its 16-bit
 * weights are permuted the same way and its fp32 weight gradient comes
 * out permuted into a scratch of td_memplan_dense_scratch floats. */
int td_memplan_stem_channels(const td_model *m, int act_bytes);
size_t td_memplan_stem_extra(const td_model *m, int act_bytes);
int td_memplan_dense_nhwc(const td_model *m, int L, int act_bytes);
size_t td_memplan_dense_scratch(const td_model *m, int act_bytes);

/* The ReLU that is batch norm layer P's only reader (nothing else, no
 * flatten, reads P), which the plan runs in place on P's output when
 * reuse is on; 0 when there is none. */
int td_memplan_bn_relu(const td_model *m, int P);

/* The residual block's end: batch norm layer P read only by an add (*A)
 * whose only reader is a ReLU (returned) the plan runs in place on the
 * add's output, P's input read by P alone, and the add's other input
 * read by no layer after the add (so the add's gradient summand into it
 * is its first); 0 when P is not such a batch norm. */
int td_memplan_bn_add_relu(const td_model *m, int P, int *A);

/* The batch norms the CUDA backend's fp16 training fuses with cuDNN's
 * extended calls (docs/cuda.md "NHWC"; cuda_dnn.c decides by this
 * function, the host planners bill by it): batch norm L with C a multiple
 * of 4, not kept in inference mode (bn_eval[L]; NULL: none), read only by
 * a ReLU (BN_ACTIVATION: returns the ReLU, *A = 0) or, unless no_add,
 * ending a residual block (td_memplan_bn_add_relu: returns the ReLU after
 * the add, *A the add) whose add no earlier batch norm so placed takes
 * (an add fuses one: the first in layer order); 0: unfused.  The backend
 * also needs an fp16 job with the memory plan's placement (not
 * TD_MEM_PER_LAYER). */
int td_memplan_bn_fuse(const td_model *m, int L, const uint8_t *bn_eval,
                       int no_add, int *A);
/* A fused batch norm's reserve space over `elems` (n x c x h x w)
 * elements as the simulated cuDNN sizes it: a 64-byte tag and a bit per
 * element (y's ReLU mask).  cuDNN documents no formula (the backend asks
 * cudnnGetBatchNormalizationTrainingExReserveSpaceSize): on a real GPU
 * the arena may differ from a host plan by the difference. */
size_t td_memplan_bn_reserve_size(size_t elems);
/* Per layer (m->nlayers entries), the reserve-space bytes an fp16 job of
 * this batch bills for its fused batch norms (0 for the other layers):
 * what td_memplan_config.bn_reserve takes in a host plan of an fp16 job
 * (`trainctl plan --precision fp16`). */
void td_memplan_fp16_bn_reserves(const td_model *m, int batch,
                                 const uint8_t *bn_eval, size_t *out);

/* Plans model m.  0, or -EINVAL/-ENOMEM with a message in err. */
int td_memplan_build(const td_model *m, const td_memplan_config *c,
                     td_memplan *out, char *err, size_t errcap);
void td_memplan_free(td_memplan *p);
/* A host plan (`trainctl plan`, the daemon's bill at submit): c as given
 * and, for an fp16 job (fp16 != 0), the reserve spaces of the batch
 * norms the backend fuses (td_memplan_fp16_bn_reserves), as the arena
 * holds them.  Returns as td_memplan_build. */
int td_memplan_build_host(const td_model *m, const td_memplan_config *c,
                          int fp16, td_memplan *out, char *err,
                          size_t errcap);

/* Whether buffers a and b of a plan may be live at the same time. */
int td_membuf_overlap_in_time(const td_membuf *a, const td_membuf *b);

#endif
