/* cpu_step.c - one training or evaluation step on the CPU backend:
 * normalise, forward, loss, backward and the optimizer update, run through
 * the oneDNN primitives cpu_plan.c built, the plain-C kernels of kernels/
 * (the same split as cuda/cuda_step.c in the CUDA backend) and, in the
 * bf16 channels-last plan, cpu_bn.c's batch norm (a batch norm fused with
 * an add runs at the add's position: td__run_at).
 *
 * Owns: the order of the primitives within a step and the bf16 weight
 * refresh after an update (through cpu_wmap.c's maps, else reorders).
 * Never does: allocate, log, or touch anything outside the td__cpu it is
 * given.
 */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cpu/cpu_bn.h"
#include "backend/cpu/cpu_bn8.h"
#include "backend/cpu/cpu_bwdw.h"
#include "backend/cpu/cpu_cfwd.h"
#include "backend/cpu/cpu_int.h"
#include "backend/cpu/cpu_pool.h"
#include "backend/cpu/cpu_sbw.h"
#include "backend/cpu/cpu_wino.h"
#include "base/clock.h"
#include "base/error.h"
#include "backend/cpu/caps.h"
#include "bf16.h"
#include "bn_nhwc.h"
#include "loss_scale.h"
#include "normalize.h"
#include "optim_update.h"
#include "softmax_xent.h"

static float *td__f(dnnl_memory_t m) { return td__mem_ptr(m); }

static int td__reorder(td__cpu *be, dnnl_primitive_t r, dnnl_memory_t src,
                       dnnl_memory_t dst)
{
    TD__RUN(be, r, "reorder", {DNNL_ARG_FROM, src}, {DNNL_ARG_TO, dst});
    return 0;
}

/* cpu_cfwd.c's weight tiles (forward and backward data) of every layer
 * from the fp32 masters, one parallel region. */
static void td__cfwd_weights(td__cpu *be)
{
    int nl = be->base.model->nlayers;
#pragma omp parallel
    for (int L = 1; L < nl; L++)
        for (int d = 0; d < 2; d++) {
            struct td_cfwd *p = d ? be->cl[L].cbd : be->cl[L].cf;
            if (!p)
                continue;
            const float *w = td__f(be->cl[L].w);
            long n = (long)td_cfwd_weight_count(p);
#pragma omp for schedule(static) nowait
            for (long b = 0; b < n; b += 1024)
                td_cfwd_weights_range(p, w, (size_t)b,
                                      (size_t)(b + 1024 < n ? b + 1024 : n));
        }
}

/* cpu_wino.c's transformed weights of every layer from the fp32 masters
 * (each call one parallel region). */
static void td__wino_weights(td__cpu *be)
{
    for (int L = 1; L < be->base.model->nlayers; L++) {
        const td__cl *c = &be->cl[L];
        if (c->wf)
            td_wino_weights(c->wf, td__f(c->w));
        if (c->wbd)
            td_wino_weights_flip(c->wbd, td__f(c->w));
    }
}

/* Weights into the layouts the primitives use, after any change. */
int td__refresh_weights(td__cpu *be)
{
    int rc;
    if (!be->weights_dirty)
        return 0;
    td__wmap_weights(be);
    td__cfwd_weights(be);
    td__wino_weights(be);
    td__bwdd_flip(be);
    if ((rc = td__bd2_weights(be)))
        return rc;
    for (int L = 1; L < be->base.model->nlayers; L++) {
        td__cl *c = &be->cl[L];
        if (c->r_w_f && !c->m_f &&
            (rc = td__reorder(be, c->r_w_f, c->w, c->w_f)))
            return rc;
        if (c->r_w_bd && !c->m_bd &&
            (rc = td__reorder(be, c->r_w_bd, c->w_flip ? c->w_flip : c->w,
                              c->w_bd)))
            return rc;
    }
    be->weights_dirty = 0;
    return 0;
}

static void td__bn_running(td__cpu *be, int L)
{
    const td_layer *l = &be->base.model->layers[L];
    td__cl *c = &be->cl[L];
    const float *mean = td__f(c->mean), *var = td__f(c->var);
    float *rm = td__f(c->rmean), *rv = td__f(c->rvar);
    double cnt = (double)be->batch * l->out.h * l->out.w;
    float unbias = cnt > 1 ? (float)(cnt / (cnt - 1)) : 1.0f;
    float mo = l->momentum;
    for (int i = 0; i < l->out.c; i++) {
        rm[i] = (1 - mo) * rm[i] + mo * mean[i];
        rv[i] = (1 - mo) * rv[i] + mo * var[i] * unbias;
    }
}

static td_bf16 *td__h(dnnl_memory_t m) { return (td_bf16 *)td__f(m); }

/* A batch norm on cpu_bn.c's kernels (bf16 nhwc or nChw16c) or cpu_bn8.c's
 * (fp32 nChw8c), with its fused relu, or add and relu: training
 * statistics and the running ones' update, or the running statistics
 * when !train. */
static void td__bn_fast_fwd(td__cpu *be, int L, int train)
{
    const td_layer *l = &be->base.model->layers[L];
    td__cl *c = &be->cl[L];
    const td_layer *add = c->add ? &be->base.model->layers[c->add] : NULL;
    dnnl_memory_t xm = be->cl[be->cl[l->in[0]].root].y;
    dnnl_memory_t sm = add ? be->cl[be->cl[add->in[1]].root].y : NULL;
    const td_bf16 *x = td__h(xm), *s = sm ? td__h(sm) : NULL;
    int C = l->out.c;
    size_t rows = c->nelem / (size_t)C, hw = td__bn_hw(be, L);
    if (c->fold) { /* statistics and scale; the readers apply them */
        const float *mean = td__f(train ? c->mean : c->rmean);
        if (train && !c->wsrc) {
            td_bn8_stats(td__f(xm), rows, C, hw, td__f(c->w), l->eps,
                         td__f(c->mean), td__f(c->var), c->fscale, c->part);
        } else {
            const float *g = td__f(c->w), *v = td__f(train ? c->var
                                                            : c->rvar);
            if (train) /* the moments the Winograd forward kept */
                td_wino_moments(be->cl[c->wsrc].wf, td__f(c->mean),
                                td__f(c->var));
            for (int i = 0; i < C; i++)
                c->fscale[i] = td_bn_nhwc_fwd_coef(g[i], v[i], l->eps);
        }
        if (train)
            td__bn_running(be, L);
        c->fd = (td_fold){mean, c->fscale, td__f(c->b), C};
        return;
    }
    if (!td__is_bf16(be)) {
        const float *xf = td__f(xm), *sf = sm ? td__f(sm) : NULL;
        if (!train) {
            td_bn8_infer(xf, sf, td__f(c->y), rows, C, hw, td__f(c->w),
                         td__f(c->b), td__f(c->rmean), td__f(c->rvar),
                         l->eps, c->fused, c->part);
            return;
        }
        td_bn8_fwd(xf, sf, td__f(c->y), c->rmask, rows, C, hw,
                   td__f(c->w), td__f(c->b), l->eps, c->fused,
                   td__f(c->mean), td__f(c->var), c->part);
        td__bn_running(be, L);
        return;
    }
    if (!train) {
        td_bn_nhwc_infer(x, s, td__h(c->y), rows, C, hw, td__f(c->w),
                         td__f(c->b), td__f(c->rmean), td__f(c->rvar),
                         l->eps, c->fused, c->part);
        return;
    }
    td_bn_nhwc_fwd(x, s, td__h(c->y), rows, C, hw, td__f(c->w), td__f(c->b),
                   l->eps, c->fused, td__f(c->mean), td__f(c->var), c->part);
    td__bn_running(be, L);
}

/* dst[i] = mask[i] ? src[i] * scale : 0 in the activation type (bf16:
 * the product in fp32, rounded once).  The product's bits ANDed with
 * 0 - mask (mask 0 or 1): no branch (a random mask mispredicted half the
 * time, 38% of a dropout-heavy step under perf), and a dropped element is
 * +0 whatever its input (inf, NaN). */
static void td__masked_scale(const td__cpu *be, const uint8_t *mask,
                             const void *src, void *dst, size_t n,
                             float scale)
{
    if (td__is_bf16(be)) {
        const td_bf16 *x = src;
        td_bf16 *y = dst;
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++)
            y[i] = td_bf16_from_f32(td_bf16_to_f32(x[i]) * scale) &
                   (td_bf16)(0u - mask[i]);
        return;
    }
    const float *x = src;
    float *y = dst;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        float v = x[i] * scale;
        memcpy(&u, &v, sizeof u);
        u &= 0u - (uint32_t)mask[i];
        memcpy(&y[i], &u, sizeof u);
    }
}

static void td__dropout_fwd(td__cpu *be, int L, int train)
{
    const td_layer *l = &be->base.model->layers[L];
    td__cl *c = &be->cl[L];
    const void *x = td__f(be->cl[be->cl[l->in[0]].root].y);
    void *y = td__f(c->y);
    if (!train) {
        memcpy(y, x, c->nelem * be->esize);
        return;
    }
    float keep = 1.0f - l->rate;
    td__dropout_draw(be, L); /* by NCHW index, whatever the layout */
    td__masked_scale(be, c->mask, x, y, c->nelem, 1.0f / keep);
}

/* cpu_pool.c's channel planes of pooling L: batch x channel blocks. */
static size_t td__planes(const td__cpu *be, int L)
{
    return (size_t)be->batch *
           (size_t)(be->base.model->layers[L].out.c / be->cl[L].pblk);
}

/* What layer L reads as its input: its input's root's output, or, when
 * that root is a fold, the batch norm's input, with the fold to apply
 * (*fold; NULL otherwise). */
static dnnl_memory_t td__input(const td__cpu *be, int L, const td_fold **fold)
{
    const td_layer *l = &be->base.model->layers[L];
    int r = be->cl[l->in[0]].root;
    *fold = NULL;
    if (!be->cl[r].fold)
        return be->cl[r].y;
    *fold = &be->cl[r].fd;
    return be->cl[be->cl[be->base.model->layers[r].in[0]].root].y;
}

static int td__forward_layer(td__cpu *be, int L, int train)
{
    const td_layer *l = &be->base.model->layers[L];
    td__cl *c = &be->cl[L];
    dnnl_memory_t x = be->cl[be->cl[l->in[0]].root].y;
    switch (l->kind) {
    case TD_L_CONV:
    case TD_L_DENSE:
        if (c->cf) {
            td_cfwd_run(c->cf, td__h(x), td__h(c->y),
                        c->b ? td__f(c->b) : NULL);
            break;
        }
        if (c->wf) {
            const td_fold *f;
            dnnl_memory_t in = td__input(be, L, &f);
            td_wino_fwd(c->wf, td__f(in), td__f(c->y),
                        c->b ? td__f(c->b) : NULL, f);
            break;
        }
        TD__RUN(be, c->fwd, l->name, {DNNL_ARG_SCRATCHPAD, c->sp[0]},
                {DNNL_ARG_SRC, x}, {DNNL_ARG_WEIGHTS, c->w_f ? c->w_f : c->w},
                {DNNL_ARG_BIAS, c->b}, {DNNL_ARG_DST, c->y});
        break;
    case TD_L_BN:
        if (c->fast) {
            td__bn_fast_fwd(be, L, train);
            break;
        }
        if (!train) {
            TD__RUN(be, c->inf, l->name, {DNNL_ARG_SCRATCHPAD, c->sp[1]},
                    {DNNL_ARG_SRC, x},
                    {DNNL_ARG_MEAN, c->rmean}, {DNNL_ARG_VARIANCE, c->rvar},
                    {DNNL_ARG_SCALE, c->w}, {DNNL_ARG_SHIFT, c->b},
                    {DNNL_ARG_DST, c->y});
            break;
        }
        if (td__bn_eval(be, L)) { /* frozen: the running statistics */
            TD__RUN(be, c->fwd, l->name, {DNNL_ARG_SCRATCHPAD, c->sp[0]},
                    {DNNL_ARG_SRC, x},
                    {DNNL_ARG_MEAN, c->rmean}, {DNNL_ARG_VARIANCE, c->rvar},
                    {DNNL_ARG_SCALE, c->w}, {DNNL_ARG_SHIFT, c->b},
                    {DNNL_ARG_WORKSPACE, c->ws}, {DNNL_ARG_DST, c->y});
            break;
        }
        TD__RUN(be, c->fwd, l->name, {DNNL_ARG_SCRATCHPAD, c->sp[0]},
                {DNNL_ARG_SRC, x},
                {DNNL_ARG_MEAN, c->mean}, {DNNL_ARG_VARIANCE, c->var},
                {DNNL_ARG_SCALE, c->w}, {DNNL_ARG_SHIFT, c->b},
                {DNNL_ARG_WORKSPACE, c->ws}, {DNNL_ARG_DST, c->y});
        td__bn_running(be, L);
        break;
    case TD_L_RELU:
        TD__RUN(be, c->fwd, l->name, {DNNL_ARG_SCRATCHPAD, c->sp[0]},
                {DNNL_ARG_SRC, x}, {DNNL_ARG_DST, c->y});
        break;
    case TD_L_MAXPOOL:
    case TD_L_AVGPOOL:
    case TD_L_GAP:
        if (c->pmask) {
            const td_fold *f;
            dnnl_memory_t in = td__input(be, L, &f);
            td_maxpool_fwd(l->kernel, td__f(in), td__f(c->y), c->pmask,
                           td__planes(be, L), c->ph, c->pw, c->pblk, f);
            break;
        }
        TD__RUN(be, c->fwd, l->name, {DNNL_ARG_SCRATCHPAD, c->sp[0]},
                {DNNL_ARG_SRC, x}, {DNNL_ARG_DST, c->y},
                {DNNL_ARG_WORKSPACE, c->ws});
        break;
    case TD_L_ADD:
        TD__RUN(be, c->fwd, l->name, {DNNL_ARG_SCRATCHPAD, c->sp[0]},
                {DNNL_ARG_SRC_0, x},
                {DNNL_ARG_SRC_1, be->cl[be->cl[l->in[1]].root].y},
                {DNNL_ARG_DST, c->y});
        break;
    case TD_L_DROPOUT:
        td__dropout_fwd(be, L, train);
        break;
    default:
        break;
    }
    return 0;
}

/* Cast + normalise the uploaded batch, then every layer in order. */
static int td__forward(td__cpu *be, int train)
{
    const td_shape in = be->base.model->layers[0].out;
    int rc = td__refresh_weights(be);
    if (rc)
        return rc;
    float *x = td__is_bf16(be) ? be->xin : td__f(be->cl[0].y);
    size_t per = (size_t)in.c * in.h * in.w;
    int planar = be->layout == TD_LAYOUT_NCHW;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < be->batch; i++) {
        if (planar)
            td_normalize_planar(be->pixels + i * per, x + i * per, 1, in.c,
                                in.h, in.w, be->nscale, be->nbias);
        else
            td_normalize_batch(be->pixels + i * per, x + i * per, 1, in.c,
                               in.h, in.w, be->nscale, be->nbias);
        if (td__is_bf16(be) && !be->r_in)
            td_bf16_from_f32_n(x + i * per,
                               (td_bf16 *)td__f(be->cl[0].y) + i * per, per);
    }
    if (be->r_in && (rc = td__reorder(be, be->r_in, be->xin_m,
                                      be->cl[0].y)))
        return rc;
    for (int L = 1, r; L < be->base.model->nlayers; L++)
        if ((r = td__run_at(be, L)) >= 0 &&
            (rc = td__forward_layer(be, r, train)))
            return rc;
    return 0;
}

/* Loss, correct count and (when train) the logits' gradient. */
static int td__loss(td__cpu *be, int train)
{
    const td_model *m = be->base.model;
    td__cl *last = &be->cl[be->cl[m->nlayers - 1].root];
    int k = m->classes, rc;
    if (be->r_logits && (rc = td__reorder(be, be->r_logits, last->y,
                                          be->logits)))
        return rc;
    const float *z = td__f(be->r_logits ? be->logits : last->y);
    float *g = td__f(be->r_logits ? be->dlogits : last->dy);
    float inv_n = 1.0f / (float)be->n;
    float smooth = train ? be->base.cfg.label_smoothing : 0.0f;
    double loss = 0;
    int64_t correct = 0;
#pragma omp parallel for schedule(static) reduction(+ : loss, correct)
    for (int i = 0; i < be->batch; i++) {
        int ok = 0;
        if (i >= be->n) {
            if (train)
                memset(g + (size_t)i * k, 0, (size_t)k * sizeof *g);
            continue;
        }
        loss += td_xent_row(z + (size_t)i * k, k, be->labels[i], smooth,
                            inv_n, train ? g + (size_t)i * k : NULL, &ok);
        correct += ok;
    }
    be->acc.loss_sum += loss;
    be->acc.correct += correct;
    be->acc.samples += be->n;
    if (train && be->ls.scale > 0) { /* loss scaling: d(scale * loss) */
        float sc = be->ls.scale;
        size_t all = (size_t)be->batch * k;
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < all; i++)
            g[i] *= sc;
    }
    if (train && be->r_dlogits)
        return td__reorder(be, be->r_dlogits, be->dlogits, last->dy);
    return 0;
}

/* Where a gradient summand for root r goes: straight into r's gradient if
 * it is the first this step, else into r's scratch (td__settle adds it). */
static dnnl_memory_t td__target(td__cpu *be, int r)
{
    td__cl *c = &be->cl[r];
    return c->written ? c->acc : c->dy;
}

/* dy += acc (bf16: the sum in fp32, rounded once). */
static void td__sum_acc(td__cpu *be, td__cl *c)
{
    if (td__is_bf16(be)) {
        td_bf16 *d = (td_bf16 *)td__f(c->dy);
        const td_bf16 *a = (const td_bf16 *)td__f(c->acc);
        size_t chunk = 4096;
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < c->nelem; i += chunk)
            td_bf16_add_n_fast(d + i, a + i,
                               c->nelem - i < chunk ? c->nelem - i : chunk);
        return;
    }
    float *d = td__f(c->dy);
    const float *a = td__f(c->acc);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < c->nelem; i++)
        d[i] += a[i];
}

/* A gradient summand for root r is written.  The second of exactly two
 * into a fast batch norm stays in acc (deferred): the batch norm's
 * backward reads dy + acc (td_bn_nhwc_bwd2), one pass fewer. */
static void td__settle(td__cpu *be, int r)
{
    td__cl *c = &be->cl[r];
    if (c->written++ == 0)
        return;
    if (c->fast && c->sources == 2) {
        c->deferred = 1;
        return;
    }
    td__sum_acc(be, c);
}

void td__cpu_settle_deferred(td__cpu *be, int r)
{
    td__cl *c = &be->cl[r];
    if (!c->deferred)
        return;
    omp_set_num_threads(be->threads);
    td__sum_acc(be, c);
    c->deferred = 0;
}

static int td__backward_add(td__cpu *be, int L)
{
    const td_layer *l = &be->base.model->layers[L];
    td__cl *c = &be->cl[L];
    for (int i = 0; i < 2; i++) {
        int r = be->cl[l->in[i]].root;
        dnnl_memory_t t = td__target(be, r);
        if (i == 1 && c->r_src1) {
            int rc = td__reorder(be, c->r_src1, c->dy, t);
            if (rc)
                return rc;
        } else {
            memcpy(td__f(t), td__f(c->dy), c->nelem * be->esize);
        }
        td__settle(be, r);
    }
    return 0;
}

/* The fast batch norm's backward: dx into its input's root and, with a
 * fused add, the shortcut's gradient into the add's second input's root
 * (two different roots, td__wire). */
static void td__bn_fast_bwd(td__cpu *be, int L)
{
    const td_layer *l = &be->base.model->layers[L];
    td__cl *c = &be->cl[L];
    int r = be->cl[l->in[0]].root, rs = -1;
    void *ds = NULL; /* bf16 or fp32 */
    int C = l->out.c;
    if (c->add) {
        rs = be->cl[be->base.model->layers[c->add].in[1]].root;
        ds = td__f(td__target(be, rs));
    }
    if (c->fold)
        td_bn8_bwd_fold(td__f(be->cl[r].y), c->fscale, td__f(c->b),
                        td__f(c->dy), c->deferred ? td__f(c->acc) : NULL,
                        td__f(td__target(be, r)), c->nelem / (size_t)C, C,
                        td__bn_hw(be, L), td__f(c->w), td__f(c->mean),
                        td__f(c->var), l->eps, td__f(c->dw), td__f(c->db),
                        c->part);
    else if (!td__is_bf16(be))
        td_bn8_bwd(td__f(be->cl[r].y), c->fused ? c->rmask : NULL,
                   td__f(c->dy), c->deferred ? td__f(c->acc) : NULL,
                   td__f(td__target(be, r)), ds, c->nelem / (size_t)C, C,
                   td__bn_hw(be, L), td__f(c->w), td__f(c->mean),
                   td__f(c->var), l->eps, td__f(c->dw), td__f(c->db),
                   c->part);
    else
        td_bn_nhwc_bwd2(td__h(be->cl[r].y), td__h(c->y), td__h(c->dy),
                        c->deferred ? td__h(c->acc) : NULL,
                        td__h(td__target(be, r)), ds, c->nelem / (size_t)C,
                        C, td__bn_hw(be, L), td__f(c->w), td__f(c->mean),
                        td__f(c->var), l->eps, c->fused, td__f(c->dw),
                        td__f(c->db), c->part);
    if (rs >= 0)
        td__settle(be, rs);
    td__settle(be, r);
}

int td__conv_bwd_weights(td__cpu *be, int L)
{
    const td_layer *l = &be->base.model->layers[L];
    td__cl *c = &be->cl[L];
    dnnl_memory_t x = be->cl[be->cl[l->in[0]].root].y, dy = c->dy;
    int rc;
    if (c->r_bw_x) { /* td__bwdw_nhwc: a channels-last kernel */
        if ((rc = td__reorder(be, c->r_bw_x, x, c->bw_x)) ||
            (rc = td__reorder(be, c->r_bw_dy, dy, c->bw_dy)))
            return rc;
        x = c->bw_x;
        dy = c->bw_dy;
    }
    if (c->wf) {
        const td_fold *f;
        dnnl_memory_t in = td__input(be, L, &f);
        td_wino_bwdw(c->wf, td__f(in), td__f(dy), td__f(c->dw),
                     c->db ? td__f(c->db) : NULL, f);
    } else if (c->bw)
        td_bwdw_run(c->bw, td__h(x), td__h(dy), td__f(c->dw),
                    c->db ? td__f(c->db) : NULL);
    else if (c->sbw)
        td_sbw_run(c->sbw, td__f(x), td__f(dy), td__f(c->dw),
                   c->db ? td__f(c->db) : NULL);
    else
        TD__RUN(be, c->bwd_w, l->name, {DNNL_ARG_SCRATCHPAD, c->sp[3]},
                {DNNL_ARG_SRC, x}, {DNNL_ARG_DIFF_DST, dy},
                {DNNL_ARG_DIFF_WEIGHTS, c->dw_bw ? c->dw_bw : c->dw},
                {DNNL_ARG_DIFF_BIAS, c->db});
    if (c->r_dw && !c->m_dw)
        return td__reorder(be, c->r_dw, c->dw_bw, c->dw);
    return 0;
}

int td__conv_bwd_data(td__cpu *be, int L, dnnl_memory_t t)
{
    const td_layer *l = &be->base.model->layers[L];
    td__cl *c = &be->cl[L];
    if (c->cbd) { /* cpu_cfwd.c: dy -> dx, flipped weights */
        td_cfwd_run(c->cbd, td__h(c->dy), td__h(t), NULL);
        return 0;
    }
    if (c->wbd) { /* cpu_wino.c: dy -> dx, flipped weights */
        td_wino_fwd(c->wbd, td__f(c->dy), td__f(t), NULL, NULL);
        return 0;
    }
    if (c->bd2) /* cpu_bwdd2.c: four stride-1 phases dy -> dx */
        return td__bd2_run(be, L, t);
    if (c->bdf) { /* cpu_bwdd.c: a forward convolution dy -> dx */
        TD__RUN(be, c->bwd_d, l->name, {DNNL_ARG_SCRATCHPAD, c->sp[2]},
                {DNNL_ARG_SRC, c->dy},
                {DNNL_ARG_WEIGHTS, c->w_bd ? c->w_bd : c->w_flip},
                {DNNL_ARG_DST, t});
        return 0;
    }
    TD__RUN(be, c->bwd_d, l->name, {DNNL_ARG_SCRATCHPAD, c->sp[2]},
            {DNNL_ARG_DIFF_DST, c->dy},
            {DNNL_ARG_WEIGHTS, c->w_bd ? c->w_bd : c->w},
            {DNNL_ARG_DIFF_SRC, t});
    return 0;
}

static int td__backward_layer(td__cpu *be, int L)
{
    const td_layer *l = &be->base.model->layers[L];
    td__cl *c = &be->cl[L];
    int r = be->cl[l->in[0]].root;
    dnnl_memory_t x = be->cl[r].y, t = td__target(be, r);
    int rc;
    switch (l->kind) {
    case TD_L_CONV:
    case TD_L_DENSE: {
        int64_t t0 = be->prof ? td_now_ns() : 0;
        if ((rc = td__conv_bwd_weights(be, L)))
            return rc;
        if (be->prof) {
            int64_t t1 = td_now_ns();
            be->prof[2 * L] = t1 - t0;
            t0 = t1;
        }
        if (c->no_dsrc)
            return 0;
        if ((rc = td__conv_bwd_data(be, L, t)))
            return rc;
        if (be->prof)
            be->prof[2 * L + 1] = td_now_ns() - t0;
        break;
    }
    case TD_L_BN:
        if (c->fast) {
            td__bn_fast_bwd(be, L);
            return 0;
        }
        TD__RUN(be, c->bwd_d, l->name, {DNNL_ARG_SCRATCHPAD, c->sp[2]},
                {DNNL_ARG_SRC, x},
                {DNNL_ARG_MEAN, td__bn_eval(be, L) ? c->rmean : c->mean},
                {DNNL_ARG_VARIANCE, td__bn_eval(be, L) ? c->rvar : c->var},
                {DNNL_ARG_SCALE, c->w}, {DNNL_ARG_SHIFT, c->b},
                {DNNL_ARG_WORKSPACE, c->ws}, {DNNL_ARG_DIFF_DST, c->dy},
                {DNNL_ARG_DIFF_SRC, t}, {DNNL_ARG_DIFF_SCALE, c->dw},
                {DNNL_ARG_DIFF_SHIFT, c->db});
        break;
    case TD_L_RELU:
        TD__RUN(be, c->bwd_d, l->name, {DNNL_ARG_SCRATCHPAD, c->sp[2]},
                {DNNL_ARG_SRC, x}, {DNNL_ARG_DIFF_DST, c->dy},
                {DNNL_ARG_DIFF_SRC, t});
        break;
    case TD_L_MAXPOOL:
    case TD_L_AVGPOOL:
    case TD_L_GAP:
        if (c->pmask) {
            td_maxpool_bwd(l->kernel, td__f(c->dy), c->pmask, td__f(t),
                           td__planes(be, L), c->ph, c->pw, c->pblk);
            break;
        }
        TD__RUN(be, c->bwd_d, l->name, {DNNL_ARG_SCRATCHPAD, c->sp[2]},
                {DNNL_ARG_DIFF_DST, c->dy}, {DNNL_ARG_WORKSPACE, c->ws},
                {DNNL_ARG_DIFF_SRC, t});
        break;
    case TD_L_DROPOUT:
        td__masked_scale(be, c->mask, td__f(c->dy), td__f(t), c->nelem,
                         1.0f / (1.0f - l->rate));
        break;
    case TD_L_ADD:
        return td__backward_add(be, L);
    default:
        return 0;
    }
    td__settle(be, r);
    return 0;
}

static int td__backward(td__cpu *be)
{
    const td_model *m = be->base.model;
    int rc;
    for (int L = 0; L < m->nlayers; L++)
        be->cl[L].written = be->cl[L].deferred = 0;
    for (int L = m->nlayers - 1, r; L >= 1; L--)
        if ((r = td__run_at(be, L)) >= 0 && (rc = td__backward_layer(be, r)))
            return rc;
    td__wmap_grads(be);
    return 0;
}

/* The optimizer on parameter elements [lo, lo + cnt), gradients times
 * ls->inv_scale (1 without loss scaling), AdamW's corrections ls->corr. */
static void td__update_range(td__cpu *be, float lr, const td_ls_step *ls,
                             size_t lo, size_t cnt)
{
    const td_optim_config *o = &be->base.cfg.optim;
    size_t n = be->base.model->param_count;
    float *w = be->params + lo, *g = be->grads + lo;
    float *s0 = be->slots ? be->slots + lo : NULL;
    float wd = (float)o->weight_decay, mu = (float)o->momentum;
    float inv = ls->inv_scale;
    if (o->type == TD_OPT_ADAMW) {
        float *s1 = be->slots + n + lo;
        td_adamw_corr c = ls->corr;
        float b1 = (float)o->beta1, b2 = (float)o->beta2;
        float eps = (float)o->eps;
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < cnt; i++)
            td_adamw_elem(&w[i], &s0[i], &s1[i], g[i] * inv, lr, b1, b2, eps,
                          wd, c);
    } else {
        int nest = o->nesterov;
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < cnt; i++)
            td_sgd_elem(&w[i], s0 ? &s0[i] : NULL, g[i] * inv, lr, mu, wd,
                        nest);
    }
}

/* Calls fn on every run [lo, lo + cnt) of parameters the update touches
 * (multiplier not 0), with its multiplier. */
static void td__updated_runs(td__cpu *be,
                             void (*fn)(td__cpu *, float, size_t, size_t,
                                        void *),
                             void *arg)
{
    const td_model *m = be->base.model;
    const float *mult = be->base.cfg.lr_mult;
    if (!mult) {
        fn(be, 1.0f, 0, m->param_count, arg);
        return;
    }
    size_t off = 0;
    for (int p = 0; p < m->nparams; off += m->params[p++].count)
        if (mult[p] != 0.0f)
            fn(be, mult[p], off, m->params[p].count, arg);
}

struct td__upd {
    float lr;
    const td_ls_step *ls;
};

static void td__update_run(td__cpu *be, float mult, size_t lo, size_t cnt,
                           void *arg)
{
    const struct td__upd *u = arg;
    td__update_range(be, u->lr * mult, u->ls, lo, cnt);
}

/* Loss scaling: sets *found when a gradient of the run is inf or NaN. */
static void td__check_run(td__cpu *be, float mult, size_t lo, size_t cnt,
                          void *arg)
{
    const float *g = be->grads + lo;
    int bad = 0;
    (void)mult;
#pragma omp parallel for schedule(static) reduction(| : bad)
    for (size_t i = 0; i < cnt; i++)
        bad |= td_ls_bad(g[i]);
    *(int *)arg |= bad;
}

/* The test hook cfg.ls_poison_step: +inf into the first updated element. */
static void td__poison_run(td__cpu *be, float mult, size_t lo, size_t cnt,
                           void *arg)
{
    int *done = arg;
    (void)mult;
    if (!*done && cnt > 0) {
        be->grads[lo] = INFINITY;
        *done = 1;
    }
}

/* Every parameter, each at the step's lr times its multiplier; frozen
 * ones (multiplier 0) are not touched at all.  With loss scaling the
 * updated parameters' gradients are checked first (the step is skipped,
 * nothing touched, on an inf or NaN) and the scaler advances. */
static void td__update(td__cpu *be, float lr, int64_t t)
{
    const td_optim_config *o = &be->base.cfg.optim;
    td_ls_dev d = {.st = be->ls};
    if (be->ls.scale > 0) {
        int poisoned = 0, found = 0;
        if (t == be->base.cfg.ls_poison_step)
            td__updated_runs(be, td__poison_run, &poisoned);
        td__updated_runs(be, td__check_run, &found);
        d.found = found;
    } else {
        d.st.scale = 1.0f; /* inv_scale 1, nothing skipped */
    }
    td_ls_prepare(&d, td_backend_ls_interval(&be->base.cfg), o->beta1,
                  o->beta2, t);
    if (be->ls.scale > 0)
        be->ls = d.st;
    if (d.step.skip)
        return;
    struct td__upd u = {lr, &d.step};
    td__updated_runs(be, td__update_run, &u);
    be->weights_dirty = 1;
}

int td__cpu_train_step(td_backend *b, float lr, int64_t t)
{
    td__cpu *be = td__be(b);
    int rc;
    if (be->n != be->batch) {
        snprintf(b->err, sizeof b->err, "train_step: the batch has %d "
                 "samples, the backend was planned for %d", be->n, be->batch);
        return -EINVAL;
    }
    omp_set_num_threads(be->threads);
    /* dropout draws by the global step: a resumed job continues the masks
     * of an uninterrupted one */
    be->step = t > 0 ? t - 1 : 0;
    if ((rc = td__forward(be, 1)) || (rc = td__loss(be, 1)) ||
        (rc = td__backward(be)))
        return rc;
    if (lr > 0)
        td__update(be, lr, t);
    dnnl_stream_wait(be->strm);
    return 0;
}

int td__cpu_eval_step(td_backend *b)
{
    td__cpu *be = td__be(b);
    int rc;
    omp_set_num_threads(be->threads);
    if ((rc = td__forward(be, 0)) || (rc = td__loss(be, 0)))
        return rc;
    dnnl_stream_wait(be->strm);
    return 0;
}
