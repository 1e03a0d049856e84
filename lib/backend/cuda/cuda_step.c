/* backend_cuda_step.c - one step of the CUDA backend on the compute stream.
 *
 * Owns: the order of a step (cast + normalise, every layer's forward, the
 * softmax cross-entropy with its gradient and counters, every layer's
 * backward in reverse, the fused optimizer update - per run of equal
 * learning-rate multipliers, skipping frozen parameters -; with loss
 * scaling the loss gradient's scaling after the loss and the overflow
 * check and decision before the update, both in cuda_lscale.c), the dense
 * layers on cuBLAS, and the layers that are ours (add, dropout, flatten,
 * and the backward of a batch norm kept in inference mode, bn_eval).
 * Gradient summation: a layer output read by several layers (residual
 * blocks) receives one summand per reader; the first writes (beta = 0),
 * later ones add (beta = 1), as in the CPU backend, so no buffer is ever
 * cleared (but the gradient of a layer nothing reads, zeroed at its own
 * backward).  The first summand is the first write of that memory in the
 * step: the memory plan (cuda_plan.c) starts a gradient's lifetime at
 * its last reader's backward, so what the buffer held before (another
 * buffer's data, when they share memory) is never added to.
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

static const float *td__x(const td__cuda *be, int L, int i)
{
    return be->gl[td__root(be, be->base.model->layers[L].in[i])].y;
}

static int td__dense_fwd(td__cuda *be, int L)
{
    const td_layer *l = &be->base.model->layers[L];
    const td_shape *s = &be->base.model->layers[l->in[0]].out;
    int in = s->c * s->h * s->w, out = l->channels;
    td__gl *g = &be->gl[L];
    TD__BLAS(be, cublasSgemm(be->blas, CUBLAS_OP_T, CUBLAS_OP_N, out,
                             be->batch, in, &td__one, g->w, in,
                             td__x(be, L, 0), in, &td__zero, g->y, out));
    if (l->bias)
        TD__CU(be, td__k_bias_add(be->compute, g->y, g->b, be->batch, out));
    return 0;
}

static int td__dense_bwd(td__cuda *be, int L, float *dx, int accumulate)
{
    const td_layer *l = &be->base.model->layers[L];
    const td_shape *s = &be->base.model->layers[l->in[0]].out;
    int in = s->c * s->h * s->w, out = l->channels;
    td__gl *g = &be->gl[L];
    TD__BLAS(be, cublasSgemm(be->blas, CUBLAS_OP_N, CUBLAS_OP_T, in, out,
                             be->batch, &td__one, td__x(be, L, 0), in, g->dy,
                             out, &td__zero, g->dw, in));
    if (l->bias)
        TD__CU(be, td__k_bias_grad(be->compute, g->dy, g->db, be->batch,
                                   out));
    if (dx)
        TD__BLAS(be, cublasSgemm(be->blas, CUBLAS_OP_N, CUBLAS_OP_N, in,
                                 be->batch, out, &td__one, g->w, in, g->dy,
                                 out, accumulate ? &td__one : &td__zero, dx,
                                 in));
    return 0;
}

/* The inference-mode backward of a batch norm kept in inference mode
 * (bn_eval): cuDNN's backward is the training-mode one only. */
static int td__bn_eval_bwd(td__cuda *be, int L, float *dx, int accumulate)
{
    const td_layer *l = &be->base.model->layers[L];
    td__gl *g = &be->gl[L];
    TD__CU(be, td__k_bn_eval_bwd(be->compute, td__x(be, L, 0), g->dy, dx,
                                 g->w, g->rmean, g->rvar, l->eps, g->dw,
                                 g->db, be->bn_part, be->batch, l->out.c,
                                 (size_t)l->out.h * l->out.w, accumulate));
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
        TD__CU(be, td__k_add(be->compute, td__x(be, L, 0), td__x(be, L, 1),
                             g->y, g->nelem));
        return 0;
    case TD_L_DROPOUT:
        if (!train || l->rate <= 0.0f) {
            TD__CU(be, cudaMemcpyAsync(g->y, td__x(be, L, 0),
                                       g->nelem * sizeof(float),
                                       cudaMemcpyDeviceToDevice,
                                       be->compute));
            return 0;
        }
        TD__CU(be, td__k_dropout_fwd(be->compute, td__x(be, L, 0), g->y,
                                     g->mask, g->nelem, be->base.cfg.seed,
                                     td_rng_stream(TD_RNG_DROPOUT,
                                                   (uint64_t)L),
                                     be->scal, 1.0f - l->rate));
        return 0;
    case TD_L_FLATTEN:
        return 0; /* an alias of its input (NCHW is already C,H,W order) */
    default:
        return td__dnn_forward(be, L, train);
    }
}

int td__cuda_forward(td__cuda *be, int train)
{
    const td_model *m = be->base.model;
    const td_shape in = m->layers[0].out;
    TD__CU(be, td__k_normalize(be->compute, be->pixels[be->cur], be->gl[0].y,
                               be->batch, in.c, in.h, in.w, be->nscale,
                               be->nbias));
    for (int L = 1; L < m->nlayers; L++)
        if (td__root(be, L) == L)
            TD__TRY(td__forward_layer(be, L, train));
    return 0;
}

int td__cuda_loss(td__cuda *be, int train)
{
    const td_model *m = be->base.model;
    td__gl *last = &be->gl[td__root(be, m->nlayers - 1)];
    TD__CU(be, td__k_xent(be->compute, last->y, m->classes,
                          be->labels[be->cur], be->n, be->batch,
                          train ? be->base.cfg.label_smoothing : 0.0f,
                          1.0f / (float)be->n, train ? last->dy : NULL,
                          be->row_loss, be->row_ok));
    if (train) /* loss scaling (cuda_lscale.c): no-op when off */
        TD__TRY(td__cuda_ls_scale_loss(be, last->dy,
                                       (size_t)be->batch * m->classes));
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
static float *td__target(td__cuda *be, int L, int i, int *accumulate)
{
    td__gl *r = &be->gl[td__root(be, be->base.model->layers[L].in[i])];
    *accumulate = r->written++ > 0;
    return r->dy;
}

static int td__backward_layer(td__cuda *be, int L)
{
    const td_layer *l = &be->base.model->layers[L];
    td__gl *g = &be->gl[L];
    int acc = 0, acc1 = 0;
    float *dx;
    switch (l->kind) {
    case TD_L_FLATTEN:
        return 0;
    case TD_L_ADD:
        dx = td__target(be, L, 0, &acc);
        TD__CU(be, td__k_accum(be->compute, dx, g->dy, g->nelem, acc));
        dx = td__target(be, L, 1, &acc1);
        TD__CU(be, td__k_accum(be->compute, dx, g->dy, g->nelem, acc1));
        return 0;
    case TD_L_DROPOUT:
        dx = td__target(be, L, 0, &acc);
        if (l->rate <= 0.0f)
            TD__CU(be, td__k_accum(be->compute, dx, g->dy, g->nelem, acc));
        else
            TD__CU(be, td__k_dropout_bwd(be->compute, g->dy, dx, g->mask,
                                         g->nelem, 1.0f - l->rate, acc));
        return 0;
    case TD_L_DENSE:
    case TD_L_CONV:
        /* layers reading the batch itself need no input gradient */
        dx = td__root(be, l->in[0]) == 0 ? NULL
                                           : td__target(be, L, 0, &acc);
        if (l->kind == TD_L_DENSE)
            return td__dense_bwd(be, L, dx, acc);
        return td__dnn_backward(be, L, dx, acc);
    case TD_L_BN:
        dx = td__target(be, L, 0, &acc);
        if (td__cuda_bn_eval(be, L))
            return td__bn_eval_bwd(be, L, dx, acc);
        return td__dnn_backward(be, L, dx, acc);
    default:
        dx = td__target(be, L, 0, &acc);
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
 * the lr the step scalars hold for run r. */
static int td__update_range(td__cuda *be, int r, size_t lo, size_t cnt)
{
    const td_optim_config *o = &be->base.cfg.optim;
    size_t n = be->base.model->param_count;
    float wd = (float)o->weight_decay;
    const float *lr = be->scal_lr + r;
    if (o->type == TD_OPT_ADAMW) {
        TD__CU(be, td__k_adamw(be->compute, be->params + lo, be->slots + lo,
                               be->slots + n + lo, be->grads + lo, cnt, lr,
                               (float)o->beta1, (float)o->beta2,
                               (float)o->eps, wd, be->scal,
                               td__cuda_ls(be)));
        return 0;
    }
    TD__CU(be, td__k_sgd(be->compute, be->params + lo,
                         be->nslots ? be->slots + lo : NULL, be->grads + lo,
                         cnt, lr, (float)o->momentum, wd, o->nesterov,
                         td__cuda_ls(be)));
    return 0;
}

/* Every parameter at the step's lr times its multiplier (cfg.lr_mult),
 * as the CPU backend: one launch per run of consecutive parameters with
 * the same multiplier, so without multipliers, or with all of them 1,
 * the whole model is one fused launch; runs with multiplier 0 (frozen)
 * are not touched at all: no decay, no momentum or Adam state change.
 * Run r's lr is scal_lr[r] (td__cuda_lr_runs). */
int td__cuda_update(td__cuda *be)
{
    const td_model *m = be->base.model;
    const float *mult = be->base.cfg.lr_mult;
    TD__TRY(td__cuda_ls_decide(be)); /* loss scaling (cuda_lscale.c) */
    if (!mult)
        return td__update_range(be, 0, 0, m->param_count);
    size_t off = 0;
    int r = 0;
    for (int p = 0; p < m->nparams; r++) {
        size_t lo = off;
        int q = p;
        while (q < m->nparams && mult[q] == mult[p])
            off += m->params[q++].count;
        if (mult[p] != 0.0f)
            TD__TRY(td__update_range(be, r, lo, off - lo));
        p = q;
    }
    return 0;
}

int td__cuda_lr_runs(const td__cuda *be, float lr, float *out)
{
    const td_model *m = be->base.model;
    const float *mult = be->base.cfg.lr_mult;
    int r = 0;
    if (!mult) {
        if (out)
            out[0] = lr;
        return 1;
    }
    for (int p = 0; p < m->nparams; r++) {
        int q = p;
        while (q < m->nparams && mult[q] == mult[p])
            q++;
        if (out)
            out[r] = lr * mult[p]; /* in float, as before the scalars */
        p = q;
    }
    return r;
}
