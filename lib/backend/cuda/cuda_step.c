/* backend_cuda_step.c - one step of the CUDA backend on the compute stream.
 *
 * Owns: the order of a step (cast + normalise, every layer's forward, the
 * softmax cross-entropy with its gradient and counters, every layer's
 * backward in reverse, the fused optimizer update - per run of equal
 * learning-rate multipliers, skipping frozen parameters -; with loss
 * scaling the loss gradient's scaling after the loss and the overflow
 * check and decision before the update, both in cuda_lscale.c), the dense
 * layers (on cuBLASLt with the bias, and an in-place ReLU reading them,
 * in the GEMMs' epilogues, cuda_blaslt.c; a GEMM cuBLASLt has no
 * algorithm for on cuBLAS, with our bias kernels),
 * a ReLU (and residual add) its batch norm computes with it in training
 * (cuDNN's fused BN_ACTIVATION and BN_ADD_ACTIVATION, cuda_dnn.c: the
 * ReLU's own passes skipped; for the add, the fused forward at the add's
 * forward and the fused backward at the add's backward, the batch
 * norm's own passes skipped),
 * and the layers that are ours (add, dropout, flatten,
 * and the backward of a batch norm kept in inference mode, bn_eval).
 * Gradient summation: a layer output read by several layers (residual
 * blocks) receives one summand per reader; the first writes (beta = 0),
 * later ones add (beta = 1), as in the CPU backend, so no buffer is ever
 * cleared (but the gradient of a layer nothing reads, zeroed at its own
 * backward).  The first summand is the first write of that memory in the
 * step: the memory plan (cuda_plan.c) starts a gradient's lifetime at
 * its last reader's backward, so what the buffer held before (another
 * buffer's data, when they share memory) is never added to.
 * With a 16-bit compute type (bf16, fp16: docs/cuda.md "Precision") the
 * dense layers are cublasGemmEx with A and B in that type and fp32
 * accumulation (CUBLAS_COMPUTE_32F), the weight gradient written in fp32
 * straight into the gradients, the loss widens the logits to fp32,
 * computes there and narrows its gradient (scaled first, with loss
 * scaling), convolution weight gradients (cuDNN writes them in the
 * compute type) are widened into the fp32 gradients, and the update
 * writes the weights' 16-bit copy.
 * What changes from step to step (each run's lr, AdamW's bias corrections,
 * the dropout draws) is read by the kernels from the step scalars in
 * device memory (cuda_graph.c writes them), never passed as a kernel
 * argument, so the same calls can be captured once as a CUDA graph.
 * Never does: synchronise, allocate, or talk to the copy stream (the
 * batch buffer it reads was made ready by the upload's event).
 *
 * cuBLAS is column-major; our row-major [rows, cols] arrays are its
 * [cols, rows].  With x [n, in], W [out, in] and y [n, out] row-major:
 *   y^T  = W * x^T        gemm(T, N, out, n, in,  W (ld in),  x (ld in))
 *   dx^T = W^T * dy^T     gemm(N, N, in,  n, out, W (ld in),  dy (ld out))
 *   dW^T = x^T * dy       gemm(N, T, in,  out, n, x (ld in),  dy (ld out))
 */
#include <stdio.h>

#include "backend/cuda/cuda_int.h"
#include "base/error.h"
#include "base/rng.h"
#include "optim_update.h"

static const float td__one = 1.0f, td__zero = 0.0f;

static int td__root(const td__cuda *be, int L) { return be->gl[L].root; }

static const void *td__x(const td__cuda *be, int L, int i)
{
    return be->gl[td__root(be, be->base.model->layers[L].in[i])].y;
}

/* cuBLAS's name of the compute type. */
static cudaDataType td__blas_type(const td__cuda *be)
{
    return be->dt == TD_BF16 ? CUDA_R_16BF
           : be->dt == TD_F16 ? CUDA_R_16F : CUDA_R_32F;
}

/* C = op(A) op(B) + beta C, column-major (see the top): fp32 is
 * cublasSgemm (the handle's math: strict or TF32); a 16-bit compute type
 * is cublasGemmEx with A and B in that type, C in that type or, when
 * c32, fp32 (weight gradients), products accumulated in fp32. */
static int td__gemm(td__cuda *be, cublasOperation_t ta, cublasOperation_t tb,
                    int m, int n, int k, const void *A, int lda,
                    const void *B, int ldb, const float *beta, void *C,
                    int ldc, int c32)
{
    if (!td__cuda_lowp(be)) {
        TD__BLAS(be, cublasSgemm(be->blas, ta, tb, m, n, k, &td__one, A, lda,
                                 B, ldb, beta, C, ldc));
        return 0;
    }
    cudaDataType t = td__blas_type(be);
    TD__BLAS(be, cublasGemmEx(be->blas, ta, tb, m, n, k, &td__one, A, t, lda,
                              B, t, ldb, beta, C, c32 ? CUDA_R_32F : t, ldc,
                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return 0;
}

static int td__dense_fwd(td__cuda *be, int L)
{
    const td_layer *l = &be->base.model->layers[L];
    const td_shape *s = &be->base.model->layers[l->in[0]].out;
    int in = s->c * s->h * s->w, out = l->channels;
    td__gl *g = &be->gl[L];
    if (td__blaslt_has(be, L, TD__LT_FWD))
        return td__blaslt_fwd(be, L); /* y = W x + b in one call */
    TD__TRY(td__gemm(be, CUBLAS_OP_T, CUBLAS_OP_N, out, be->batch, in, g->wl,
                     in, td__x(be, L, 0), in, &td__zero, g->y, out, 0));
    if (l->bias)
        TD__CU(be, td__k_bias_add(be->compute, g->y, g->b, be->batch, out,
                                  be->dt));
    return 0;
}

static int td__dense_bwd(td__cuda *be, int L, void *dx, int accumulate)
{
    const td_layer *l = &be->base.model->layers[L];
    const td_shape *s = &be->base.model->layers[l->in[0]].out;
    int in = s->c * s->h * s->w, out = l->channels;
    td__gl *g = &be->gl[L];
    if (td__blaslt_has(be, L, TD__LT_WGRAD)) {
        TD__TRY(td__blaslt_wgrad(be, L)); /* dW and db in one call */
    } else {
        TD__TRY(td__gemm(be, CUBLAS_OP_N, CUBLAS_OP_T, in, out, be->batch,
                         td__x(be, L, 0), in, g->dy, out, &td__zero, g->dw,
                         in, 1));
        if (l->bias)
            TD__CU(be, td__k_bias_grad(be->compute, g->dy, g->db, be->batch,
                                       out, be->dt));
    }
    if (dx && td__blaslt_has(be, L, TD__LT_DGRAD))
        return td__blaslt_dgrad(be, L, dx, accumulate);
    if (dx)
        TD__TRY(td__gemm(be, CUBLAS_OP_N, CUBLAS_OP_N, in, be->batch, out,
                         g->wl, in, g->dy, out,
                         accumulate ? &td__one : &td__zero, dx, in, 0));
    return 0;
}

/* A convolution's backward; with a 16-bit compute type cuDNN wrote its
 * weight (KRSC) and bias gradient in that type into lgrad: widened into
 * the fp32 gradients the update reads. */
static int td__conv_bwd(td__cuda *be, int L, void *dx, int accumulate)
{
    TD__TRY(td__dnn_backward(be, L, dx, accumulate));
    if (!td__cuda_lowp(be))
        return 0;
    return td__cuda_conv_grad_kcrs(be, L); /* KRSC (cuda_nhwc.c) */
}

/* The inference-mode backward of a batch norm kept in inference mode
 * (bn_eval): cuDNN's backward is the training-mode one only. */
static int td__bn_eval_bwd(td__cuda *be, int L, void *dx, int accumulate)
{
    const td_layer *l = &be->base.model->layers[L];
    td__gl *g = &be->gl[L];
    TD__CU(be, td__k_bn_eval_bwd(be->compute, td__x(be, L, 0), g->dy, dx,
                                 g->w, g->rmean, g->rvar, l->eps, g->dw,
                                 g->db, be->bn_part, be->batch, l->out.c,
                                 (size_t)l->out.h * l->out.w, accumulate,
                                 td__cuda_nhwc(be), be->dt));
    return 0;
}

static int td__forward_layer(td__cuda *be, int L, int train)
{
    const td_layer *l = &be->base.model->layers[L];
    td__gl *g = &be->gl[L];
    switch (l->kind) {
    case TD_L_DENSE:
        return td__dense_fwd(be, L);
    case TD_L_ADD:
        if (train && g->bnfuse_of) /* with its batch norm and ReLU */
            return td__dnn_bnadd_fwd(be, L);
        TD__CU(be, td__k_add(be->compute, td__x(be, L, 0), td__x(be, L, 1),
                             g->y, g->nelem, be->dt));
        return 0;
    case TD_L_DROPOUT:
        if (!train || l->rate <= 0.0f) {
            TD__CU(be, cudaMemcpyAsync(g->y, td__x(be, L, 0),
                                       g->nelem * be->esz,
                                       cudaMemcpyDeviceToDevice,
                                       be->compute));
            return 0;
        }
        TD__CU(be, td__k_dropout_fwd(be->compute, td__x(be, L, 0), g->y,
                                     g->mask, g->nelem, be->base.cfg.seed,
                                     td_rng_stream(TD_RNG_DROPOUT,
                                                   (uint64_t)L),
                                     be->scal, 1.0f - l->rate,
                                     /* NHWC: draws by the NCHW index */
                                     td__cuda_nhwc(be) ? l->out.c : 0,
                                     (size_t)l->out.h * l->out.w, be->dt));
        return 0;
    case TD_L_FLATTEN:
        return 0; /* an alias of its input (NCHW is already C,H,W order) */
    case TD_L_RELU:
        if (td__blaslt_fused_relu(be, L))
            return 0; /* its dense input's epilogue computed it */
        if (train && td__dnn_fused_relu(be, L))
            return 0; /* its batch norm's fused forward computed it */
        return td__dnn_forward(be, L, train);
    default:
        return td__dnn_forward(be, L, train);
    }
}

int td__cuda_forward(td__cuda *be, int train)
{
    const td_model *m = be->base.model;
    const td_shape in = m->layers[0].out;
    TD__CU(be, td__k_normalize(be->compute, be->pixels[be->cur], be->gl[0].y,
                               be->batch, in.c, in.h, in.w,
                               td__cuda_nhwc(be) ? be->stem_c : 0,
                               be->nscale, be->nbias, be->dt));
    for (int L = 1; L < m->nlayers; L++)
        if (td__root(be, L) == L)
            TD__TRY(td__forward_layer(be, L, train));
    return 0;
}

/* The loss in fp32: with a 16-bit compute type the logits are widened
 * into xz first and the gradient (xg) narrowed into the last layer's dy
 * after. */
int td__cuda_loss(td__cuda *be, int train)
{
    const td_model *m = be->base.model;
    td__gl *last = &be->gl[td__root(be, m->nlayers - 1)];
    int low = td__cuda_lowp(be);
    size_t nz = (size_t)be->batch * (size_t)m->classes;
    if (low)
        TD__CU(be, td__k_widen(be->compute, last->y, be->dt, be->xz, nz));
    float *grad = !train ? NULL : low ? be->xg : (float *)last->dy;
    TD__CU(be, td__k_xent(be->compute, low ? be->xz : (const float *)last->y,
                          m->classes, be->labels[be->cur], be->n, be->batch,
                          train ? be->base.cfg.label_smoothing : 0.0f,
                          1.0f / (float)be->n, grad, be->row_loss,
                          be->row_ok));
    if (train) /* loss scaling (cuda_lscale.c): no-op when off; in fp32,
                * before a 16-bit gradient is rounded */
        TD__TRY(td__cuda_ls_scale_loss(be, grad, nz));
    if (low && train)
        TD__CU(be, td__k_narrow(be->compute, be->xg, last->dy, be->dt, nz));
    /* the batch buffer may be refilled once the loss has read its labels
     * (the cast read its pixels earlier): upload k+2 waits for this; a
     * captured step records it after the graph's launch instead */
    if (!be->capturing)
        TD__CU(be, cudaEventRecord(be->consumed[be->cur], be->compute));
    TD__CU(be, td__k_stats(be->compute, be->acc, be->row_loss, be->row_ok,
                           be->n));
    return 0;
}

/* Gradient target of input i of layer L, and whether to add into it. */
static void *td__target(td__cuda *be, int L, int i, int *accumulate)
{
    td__gl *r = &be->gl[td__root(be, be->base.model->layers[L].in[i])];
    *accumulate = r->written++ > 0;
    return r->dy;
}

/* The backward of an add ending a residual block whose batch norm P is
 * fused (BN_ADD_ACTIVATION): one cuDNN call writes the add's other
 * input's summand (dz) and P's input gradient; P's own summand (never
 * materialised) and P's backward's summand are counted here, P's
 * backward is skipped. */
static int td__bnadd_bwd(td__cuda *be, int A)
{
    const td_layer *l = &be->base.model->layers[A];
    int P = be->gl[A].bnfuse_of, acc_z = 0, acc_x = 0, unused;
    void *dz = NULL;
    for (int i = 0; i < 2; i++) {
        if (l->in[i] == P)
            (void)td__target(be, A, i, &unused);
        else
            dz = td__target(be, A, i, &acc_z);
    }
    void *dx = td__target(be, P, 0, &acc_x);
    return td__dnn_bnadd_bwd(be, A, dz, acc_z, dx, acc_x);
}

static int td__backward_layer(td__cuda *be, int L)
{
    const td_layer *l = &be->base.model->layers[L];
    td__gl *g = &be->gl[L];
    int acc = 0, acc1 = 0;
    void *dx;
    switch (l->kind) {
    case TD_L_FLATTEN:
        return 0;
    case TD_L_ADD:
        if (g->bnfuse_of)
            return td__bnadd_bwd(be, L);
        dx = td__target(be, L, 0, &acc);
        TD__CU(be, td__k_accum(be->compute, dx, g->dy, g->nelem, acc,
                               be->dt));
        dx = td__target(be, L, 1, &acc1);
        TD__CU(be, td__k_accum(be->compute, dx, g->dy, g->nelem, acc1,
                               be->dt));
        return 0;
    case TD_L_DROPOUT:
        dx = td__target(be, L, 0, &acc);
        if (l->rate <= 0.0f)
            TD__CU(be, td__k_accum(be->compute, dx, g->dy, g->nelem, acc,
                                   be->dt));
        else
            TD__CU(be, td__k_dropout_bwd(be->compute, g->dy, dx, g->mask,
                                         g->nelem, 1.0f - l->rate, acc,
                                         be->dt));
        return 0;
    case TD_L_DENSE:
    case TD_L_CONV:
        /* layers reading the batch itself need no input gradient */
        dx = td__root(be, l->in[0]) == 0 ? NULL
                                           : td__target(be, L, 0, &acc);
        if (l->kind == TD_L_DENSE &&
            td_memplan_dense_nhwc(be->base.model, L, (int)be->esz))
            return td__cuda_dense_bwd_nhwc(be, L, dx, acc, td__dense_bwd);
        if (l->kind == TD_L_DENSE)
            return td__dense_bwd(be, L, dx, acc);
        return td__conv_bwd(be, L, dx, acc);
    case TD_L_BN:
        if (g->bnfuse && g->bnadd)
            return 0; /* its add's backward ran it (td__bnadd_bwd) */
        dx = td__target(be, L, 0, &acc);
        if (td__cuda_bn_eval(be, L))
            return td__bn_eval_bwd(be, L, dx, acc);
        return td__dnn_backward(be, L, dx, acc);
    default:
        dx = td__target(be, L, 0, &acc);
        if (l->kind == TD_L_RELU && td__dnn_fused_relu(be, L))
            return 0; /* its batch norm's fused backward reads its dy, y;
                       * the summand is counted (dx is that same buffer,
                       * in place) */
        return td__dnn_backward(be, L, dx, acc);
    }
}

int td__cuda_backward(td__cuda *be)
{
    const td_model *m = be->base.model;
    for (int L = 0; L < m->nlayers; L++)
        be->gl[L].written = 0;
    be->gl[td__root(be, m->nlayers - 1)].written = 1; /* the loss wrote it */
    for (int L = m->nlayers - 1; L >= 1; L--) {
        if (td__root(be, L) != L)
            continue;
        /* a layer nothing reads has a zero gradient; its memory may hold
         * another buffer's data under the memory plan (cuda_plan.c) */
        if (be->gl[L].nsum == 0)
            TD__CU(be, cudaMemsetAsync(be->gl[L].dy, 0, be->gl[L].nelem *
                                       td__cuda_esize(be->base.cfg.dtype),
                                       be->compute));
        TD__TRY(td__backward_layer(be, L));
    }
    /* each gradient got the summands the plan's lifetimes count on */
    for (int L = 0; L < m->nlayers; L++)
        if (td__root(be, L) == L && be->gl[L].written != be->gl[L].nsum) {
            snprintf(be->base.err, sizeof be->base.err, "internal: the "
                     "gradient of %s got %d summands, the memory plan "
                     "counts %d", m->layers[L].name, be->gl[L].written,
                     be->gl[L].nsum);
            return TD_E_DEVICE;
        }
    return 0;
}

/* The fused optimizer kernel on parameter elements [lo, lo + cnt), at
 * the lr the step scalars hold for run r; with a 16-bit compute type it
 * writes the weights' 16-bit copy too, filters straight in KRSC (one
 * launch per TD_LOWP_SEGS of them: the map is a kernel argument,
 * td__cuda_lowp_map). */
static int td__update_range(td__cuda *be, int r, size_t lo, size_t cnt)
{
    const td_optim_config *o = &be->base.cfg.optim;
    size_t n = be->base.model->param_count;
    float wd = (float)o->weight_decay;
    const float *lr = be->scal_lr + r;
    td_lowp_map map;
    for (size_t end = lo + cnt, k; lo < end; lo += k) {
        k = td__cuda_lowp_map(be, lo, end, &map);
        if (o->type == TD_OPT_ADAMW) {
            TD__CU(be, td__k_adamw(be->compute, be->params + lo,
                                   be->slots + lo, be->slots + n + lo,
                                   be->grads + lo, k, lr, (float)o->beta1,
                                   (float)o->beta2, (float)o->eps, wd,
                                   be->scal, td__cuda_ls(be), be->lowp, &map,
                                   be->dt));
            continue;
        }
        TD__CU(be, td__k_sgd(be->compute, be->params + lo,
                             be->nslots ? be->slots + lo : NULL,
                             be->grads + lo, k, lr, (float)o->momentum, wd,
                             o->nesterov, td__cuda_ls(be), be->lowp, &map,
                             be->dt));
    }
    return 0;
}

/* Every parameter at the step's lr times its multiplier (cfg.lr_mult),
 * as the CPU backend: one launch per run of consecutive parameters with
 * the same multiplier, so without multipliers, or with all of them 1,
 * the whole model is one fused launch (per TD_LOWP_SEGS filters with a
 * 16-bit copy); runs with multiplier 0 (frozen) are not touched at all:
 * no decay, no momentum or Adam state change, their 16-bit copy left as
 * it is (the masters did not change).  Run r's lr is scal_lr[r]
 * (td__cuda_lr_runs).  The 16-bit copy is written once, by the update:
 * nothing rewrites its filters after it. */
int td__cuda_update(td__cuda *be)
{
    TD__TRY(td__cuda_ls_decide(be)); /* loss scaling (cuda_lscale.c) */
    for (td__prun s = TD__RUN_FIRST; td__cuda_next_run(be, &s);)
        if (s.mult != 0.0f)
            TD__TRY(td__update_range(be, s.r, s.lo, s.count));
    return 0;
}

int td__cuda_next_run(const td__cuda *be, td__prun *s)
{
    const td_model *m = be->base.model;
    const float *mult = be->base.cfg.lr_mult;
    s->r++;
    s->p = s->q;
    s->lo += s->count;
    if (!mult) { /* the whole model, once */
        if (s->r > 0)
            return 0;
        s->q = m->nparams;
        s->count = m->param_count;
        s->mult = 1.0f;
        return 1;
    }
    if (s->p >= m->nparams)
        return 0;
    s->count = 0;
    s->mult = mult[s->p];
    for (s->q = s->p; s->q < m->nparams && mult[s->q] == s->mult; s->q++)
        s->count += m->params[s->q].count;
    return 1;
}

int td__cuda_lr_runs(const td__cuda *be, float lr, float *out)
{
    td__prun s = TD__RUN_FIRST;
    while (td__cuda_next_run(be, &s))
        if (out) /* in float, as before the scalars (x 1 is exact) */
            out[s.r] = lr * s.mult;
    return s.r;
}

int td__cuda_narrow_params(td__cuda *be)
{
    if (td__cuda_lowp(be))
        TD__CU(be, td__k_narrow(be->compute, be->params, be->lowp, be->dt,
                                be->base.model->param_count));
    return td__cuda_krsc_weights(be); /* 16-bit filters in KRSC */
}
