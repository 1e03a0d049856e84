/* backend_cpu.c - the CPU backend: runs the oneDNN plan of
 * backend_cpu_plan.c and the plain-C kernels of kernels/ (see backend.h for
 * the contract and backend_cpu.h for the data layout).
 *
 * Owns: the step (normalise, forward, loss, backward, update), evaluation,
 * snapshots and events on the CPU.  Every call runs synchronously on the
 * calling thread with an OpenMP team of cfg.threads threads, so events
 * complete when recorded.
 * Never does: allocate during a step (everything is planned at create),
 * log per step, or touch the batch after upload returns.
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_int.h"
#include "base/clock.h"
#include "base/error.h"
#include "backend/cpu/caps.h"
#include "base/rng.h"
#include "bf16.h"
#include "normalize.h"
#include "optim_update.h"
#include "softmax_xent.h"

struct td_event {
    int64_t t;
    int recorded;
};

#define TD__ARGS(...) ((dnnl_exec_arg_t[]){__VA_ARGS__})
#define TD__NARGS(...)                                                       \
    ((int)(sizeof((dnnl_exec_arg_t[]){__VA_ARGS__}) / sizeof(dnnl_exec_arg_t)))
#define TD__RUN(be, prim, what, ...)                                         \
    TD__DNNL(be, dnnl_primitive_execute(prim, (be)->strm,                    \
                                        TD__NARGS(__VA_ARGS__),              \
                                        TD__ARGS(__VA_ARGS__)),              \
             what, NULL)

static float *td__f(dnnl_memory_t m)
{
    void *p = NULL;
    dnnl_memory_get_data_handle(m, &p);
    return p;
}

static td__cpu *td__be(td_backend *b) { return (td__cpu *)b; }

static int td__is_bf16(const td__cpu *be) { return be->adt == dnnl_bf16; }

static int td__reorder(td__cpu *be, dnnl_primitive_t r, dnnl_memory_t src,
                       dnnl_memory_t dst)
{
    TD__RUN(be, r, "reorder", {DNNL_ARG_FROM, src}, {DNNL_ARG_TO, dst});
    return 0;
}

/* Weights into the layouts the primitives use, after any change. */
static int td__refresh_weights(td__cpu *be)
{
    int rc;
    if (!be->weights_dirty)
        return 0;
    for (int L = 1; L < be->base.model->nlayers; L++) {
        td__cl *c = &be->cl[L];
        if (c->r_w_f && (rc = td__reorder(be, c->r_w_f, c->w, c->w_f)))
            return rc;
        if (c->r_w_bd && (rc = td__reorder(be, c->r_w_bd, c->w, c->w_bd)))
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

/* dst[i] = mask[i] ? src[i] * scale : 0 in the activation type (bf16:
 * the product in fp32, rounded once). */
static void td__masked_scale(const td__cpu *be, const uint8_t *mask,
                             const void *src, void *dst, size_t n,
                             float scale)
{
    if (td__is_bf16(be)) {
        const td_bf16 *x = src;
        td_bf16 *y = dst;
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++)
            y[i] = mask[i] ? td_bf16_from_f32(td_bf16_to_f32(x[i]) * scale)
                           : 0;
        return;
    }
    const float *x = src;
    float *y = dst;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++)
        y[i] = mask[i] ? x[i] * scale : 0.0f;
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
    uint64_t stream = td_rng_stream(TD_RNG_DROPOUT, (uint64_t)L);
    uint64_t base = (uint64_t)be->step * c->nelem;
    float keep = 1.0f - l->rate;
    uint64_t seed = be->base.cfg.seed;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < c->nelem; i++)
        c->mask[i] = td_rng_uniform(seed, stream, base + i) < keep;
    td__masked_scale(be, c->mask, x, y, c->nelem, 1.0f / keep);
}

static int td__forward_layer(td__cpu *be, int L, int train)
{
    const td_layer *l = &be->base.model->layers[L];
    td__cl *c = &be->cl[L];
    dnnl_memory_t x = be->cl[be->cl[l->in[0]].root].y;
    switch (l->kind) {
    case TD_L_CONV:
    case TD_L_DENSE:
        TD__RUN(be, c->fwd, l->name, {DNNL_ARG_SCRATCHPAD, c->sp[0]},
                {DNNL_ARG_SRC, x}, {DNNL_ARG_WEIGHTS, c->w_f ? c->w_f : c->w},
                {DNNL_ARG_BIAS, c->b}, {DNNL_ARG_DST, c->y});
        break;
    case TD_L_BN:
        if (!train) {
            TD__RUN(be, c->inf, l->name, {DNNL_ARG_SCRATCHPAD, c->sp[1]},
                    {DNNL_ARG_SRC, x},
                    {DNNL_ARG_MEAN, c->rmean}, {DNNL_ARG_VARIANCE, c->rvar},
                    {DNNL_ARG_SCALE, c->w}, {DNNL_ARG_SHIFT, c->b},
                    {DNNL_ARG_DST, c->y});
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
        if (td__is_bf16(be))
            td_bf16_from_f32_n(x + i * per,
                               (td_bf16 *)td__f(be->cl[0].y) + i * per, per);
    }
    for (int L = 1; L < be->base.model->nlayers; L++)
        if (be->cl[L].root == L && (rc = td__forward_layer(be, L, train)))
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

static void td__settle(td__cpu *be, int r)
{
    td__cl *c = &be->cl[r];
    if (c->written++ == 0)
        return;
    if (td__is_bf16(be)) {
        td_bf16 *d = (td_bf16 *)td__f(c->dy);
        const td_bf16 *a = (const td_bf16 *)td__f(c->acc);
        size_t chunk = 4096;
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < c->nelem; i += chunk)
            td_bf16_add_n(d + i, a + i,
                          c->nelem - i < chunk ? c->nelem - i : chunk);
        return;
    }
    float *d = td__f(c->dy);
    const float *a = td__f(c->acc);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < c->nelem; i++)
        d[i] += a[i];
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

static int td__backward_layer(td__cpu *be, int L)
{
    const td_layer *l = &be->base.model->layers[L];
    td__cl *c = &be->cl[L];
    int r = be->cl[l->in[0]].root;
    dnnl_memory_t x = be->cl[r].y, t = td__target(be, r);
    int rc;
    switch (l->kind) {
    case TD_L_CONV:
    case TD_L_DENSE:
        TD__RUN(be, c->bwd_w, l->name, {DNNL_ARG_SCRATCHPAD, c->sp[3]},
                {DNNL_ARG_SRC, x},
                {DNNL_ARG_DIFF_DST, c->dy},
                {DNNL_ARG_DIFF_WEIGHTS, c->dw_bw ? c->dw_bw : c->dw},
                {DNNL_ARG_DIFF_BIAS, c->db});
        if (c->r_dw && (rc = td__reorder(be, c->r_dw, c->dw_bw, c->dw)))
            return rc;
        if (c->no_dsrc)
            return 0;
        TD__RUN(be, c->bwd_d, l->name, {DNNL_ARG_SCRATCHPAD, c->sp[2]},
                {DNNL_ARG_DIFF_DST, c->dy},
                {DNNL_ARG_WEIGHTS, c->w_bd ? c->w_bd : c->w},
                {DNNL_ARG_DIFF_SRC, t});
        break;
    case TD_L_BN:
        TD__RUN(be, c->bwd_d, l->name, {DNNL_ARG_SCRATCHPAD, c->sp[2]},
                {DNNL_ARG_SRC, x}, {DNNL_ARG_MEAN, c->mean}, {DNNL_ARG_VARIANCE, c->var},
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
        be->cl[L].written = 0;
    for (int L = m->nlayers - 1; L >= 1; L--)
        if (be->cl[L].root == L && (rc = td__backward_layer(be, L)))
            return rc;
    return 0;
}

/* The optimizer on parameter elements [lo, lo + cnt). */
static void td__update_range(td__cpu *be, float lr, int64_t t, size_t lo,
                             size_t cnt)
{
    const td_optim_config *o = &be->base.cfg.optim;
    size_t n = be->base.model->param_count;
    float *w = be->params + lo, *g = be->grads + lo;
    float *s0 = be->slots ? be->slots + lo : NULL;
    float wd = (float)o->weight_decay, mu = (float)o->momentum;
    if (o->type == TD_OPT_ADAMW) {
        float *s1 = be->slots + n + lo;
        td_adamw_corr c = td_adamw_corrections(o->beta1, o->beta2, t);
        float b1 = (float)o->beta1, b2 = (float)o->beta2;
        float eps = (float)o->eps;
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < cnt; i++)
            td_adamw_elem(&w[i], &s0[i], &s1[i], g[i], lr, b1, b2, eps, wd,
                          c);
    } else {
        int nest = o->nesterov;
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < cnt; i++)
            td_sgd_elem(&w[i], s0 ? &s0[i] : NULL, g[i], lr, mu, wd, nest);
    }
}

/* Every parameter, each at the step's lr times its multiplier; frozen
 * ones (multiplier 0) are not touched at all. */
static void td__update(td__cpu *be, float lr, int64_t t)
{
    const td_model *m = be->base.model;
    const float *mult = be->base.cfg.lr_mult;
    if (!mult) {
        td__update_range(be, lr, t, 0, m->param_count);
    } else {
        size_t off = 0;
        for (int p = 0; p < m->nparams; off += m->params[p++].count)
            if (mult[p] != 0.0f)
                td__update_range(be, lr * mult[p], t, off,
                                 m->params[p].count);
    }
    be->weights_dirty = 1;
}

static int td__cpu_train_step(td_backend *b, float lr, int64_t t)
{
    td__cpu *be = td__be(b);
    int rc;
    if (be->n != be->batch) {
        snprintf(b->err, sizeof b->err, "train_step: the batch has %d "
                 "samples, the backend was planned for %d", be->n, be->batch);
        return -EINVAL;
    }
    omp_set_num_threads(be->threads);
    if ((rc = td__forward(be, 1)) || (rc = td__loss(be, 1)) ||
        (rc = td__backward(be)))
        return rc;
    if (lr > 0)
        td__update(be, lr, t);
    be->step++;
    dnnl_stream_wait(be->strm);
    return 0;
}

static int td__cpu_eval_step(td_backend *b)
{
    td__cpu *be = td__be(b);
    int rc;
    omp_set_num_threads(be->threads);
    if ((rc = td__forward(be, 0)) || (rc = td__loss(be, 0)))
        return rc;
    dnnl_stream_wait(be->strm);
    return 0;
}

static int td__cpu_upload(td_backend *b, const td_batch *bt)
{
    td__cpu *be = td__be(b);
    const td_model *m = b->model;
    const td_shape in = m->layers[0].out;
    int known = bt->layout == TD_LAYOUT_NHWC || bt->layout == TD_LAYOUT_NCHW;
    if (!known || bt->c != in.c || bt->h != in.h ||
        bt->w != in.w || bt->n < 1 || bt->n > be->batch) {
        snprintf(b->err, sizeof b->err, "upload: batch of %d %dx%dx%d (%s) "
                 "does not fit the model's %dx%dx%d input, batch <= %d",
                 bt->n, bt->c, bt->h, bt->w,
                 !known ? "unknown layout" : bt->layout == TD_LAYOUT_NHWC
                 ? "NHWC" : "NCHW", in.c, in.h, in.w, be->batch);
        return -EINVAL;
    }
    for (int i = 0; i < bt->n; i++)
        if (bt->labels[i] < 0 || bt->labels[i] >= m->classes) {
            snprintf(b->err, sizeof b->err, "upload: label %d of sample %d "
                     "is outside 0..%d", (int)bt->labels[i], i,
                     m->classes - 1);
            return -EINVAL;
        }
    size_t per = (size_t)in.c * in.h * in.w;
    memcpy(be->pixels, bt->data, per * (size_t)bt->n);
    memset(be->pixels + per * (size_t)bt->n, 0,
           per * (size_t)(be->batch - bt->n));
    memcpy(be->labels, bt->labels, sizeof *be->labels * (size_t)bt->n);
    be->n = bt->n;
    be->layout = bt->layout;
    return 0;
}

static int td__cpu_read_stats(td_backend *b, td_step_stats *host)
{
    td__cpu *be = td__be(b);
    *host = be->acc;
    memset(&be->acc, 0, sizeof be->acc);
    return 0;
}

static int td__snap_check(td__cpu *be, size_t nfloats, const char *what)
{
    size_t want = td_backend_snapshot_floats(be->base.model,
                                             &be->base.cfg.optim);
    if (nfloats == want)
        return 0;
    snprintf(be->base.err, sizeof be->base.err, "%s: buffer of %zu floats, "
             "this model and optimizer need %zu", what, nfloats, want);
    return -EINVAL;
}

/* memcpy of n floats; nothing at all when n is 0 (plain SGD has no
 * optimizer slots and a model without batch norm no state: their pointers
 * are NULL, which memcpy may not be given even for 0 bytes). */
static void td__copy(float *dst, const float *src, size_t n)
{
    if (n)
        memcpy(dst, src, n * sizeof *dst);
}

static int td__cpu_snapshot(td_backend *b, float *host, size_t nfloats)
{
    td__cpu *be = td__be(b);
    size_t pc = b->model->param_count;
    int rc = td__snap_check(be, nfloats, "snapshot");
    if (rc)
        return rc;
    td__copy(host, be->params, pc);
    td__copy(host + pc, be->slots, be->nslots * pc);
    /* nfloats is the whole snapshot (checked): the state is the rest. */
    td__copy(host + pc * (1 + be->nslots), be->state,
             nfloats - pc * (1 + be->nslots));
    return 0;
}

static int td__cpu_restore(td_backend *b, const float *host, size_t nfloats)
{
    td__cpu *be = td__be(b);
    size_t pc = b->model->param_count;
    int rc = td__snap_check(be, nfloats, "restore");
    if (rc)
        return rc;
    td__copy(be->params, host, pc);
    td__copy(be->slots, host + pc, be->nslots * pc);
    td__copy(be->state, host + pc * (1 + be->nslots),
             nfloats - pc * (1 + be->nslots));
    be->weights_dirty = 1;
    return 0;
}

static size_t td__param_off(const td_model *m, int p)
{
    size_t off = 0;
    for (int i = 0; i < p; i++)
        off += m->params[i].count;
    return off;
}

/* A layer's value or gradient, reordered into plain NCHW (or NC). */
static int td__read_act(td__cpu *be, int L, int grad, float *host,
                        size_t nfloats)
{
    const td_model *m = be->base.model;
    const td__cl *c = &be->cl[be->cl[L].root];
    if (m->layers[L].kind == TD_L_BN && be->cl[L].fused) {
        snprintf(be->base.err, sizeof be->base.err, "layer %s: fused with "
                 "its relu, its own output does not exist",
                 m->layers[L].name);
        return TD_E_NOTSUP;
    }
    dnnl_memory_desc_t plain;
    dnnl_memory_desc_init_by_tag(&plain, c->md.ndims, c->md.dims, dnnl_f32,
                                 c->md.ndims == 2 ? dnnl_nc : dnnl_nchw);
    if (nfloats * sizeof(float) != dnnl_memory_desc_get_size(&plain)) {
        snprintf(be->base.err, sizeof be->base.err, "read_tensor: layer %s "
                 "has %zu floats, not %zu", m->layers[L].name,
                 dnnl_memory_desc_get_size(&plain) / sizeof(float), nfloats);
        return -EINVAL;
    }
    dnnl_memory_t dst = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t r = NULL;
    dnnl_status_t st = dnnl_memory_create(&dst, &plain, be->eng, host);
    if (st == dnnl_success)
        st = dnnl_reorder_primitive_desc_create(&pd, &c->md, be->eng, &plain,
                                                be->eng, NULL);
    if (st == dnnl_success)
        st = dnnl_primitive_create(&r, pd);
    if (st == dnnl_success)
        st = dnnl_primitive_execute(r, be->strm, 2, TD__ARGS(
            {DNNL_ARG_FROM, grad ? c->dy : c->y}, {DNNL_ARG_TO, dst}));
    if (r)
        dnnl_primitive_destroy(r);
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    if (dst)
        dnnl_memory_destroy(dst);
    if (st != dnnl_success)
        return td__cpu_fail(be, st, "read_tensor", m->layers[L].name);
    return 0;
}

static int td__cpu_read_tensor(td_backend *b, enum td_tensor_kind kind,
                               int index, float *host, size_t nfloats)
{
    td__cpu *be = td__be(b);
    const td_model *m = b->model;
    if (kind == TD_T_VALUE || kind == TD_T_GRAD) {
        if (index < 0 || index >= m->nlayers)
            return -EINVAL;
        return td__read_act(be, index, kind == TD_T_GRAD, host, nfloats);
    }
    if (index < 0 || index >= m->nparams || nfloats != m->params[index].count)
        return -EINVAL;
    const float *src = kind == TD_T_PARAM ? be->params : be->grads;
    memcpy(host, src + td__param_off(m, index), nfloats * sizeof *host);
    return 0;
}

static int td__cpu_write_param(td_backend *b, int index, const float *host,
                               size_t nfloats)
{
    td__cpu *be = td__be(b);
    const td_model *m = b->model;
    if (index < 0 || index >= m->nparams || nfloats != m->params[index].count)
        return -EINVAL;
    memcpy(be->params + td__param_off(m, index), host,
           nfloats * sizeof *host);
    be->weights_dirty = 1;
    return 0;
}

/* ---- events: the CPU has finished by the time it records ---------------- */

static td_event *td__cpu_event_create(td_backend *b)
{
    return calloc(1, sizeof(td_event));
}

static void td__cpu_event_destroy(td_backend *b, td_event *ev) { free(ev); }

static int td__cpu_event_record(td_backend *b, td_event *ev)
{
    ev->t = td_now_ns();
    ev->recorded = 1;
    return 0;
}

static int td__cpu_event_query(td_backend *b, td_event *ev)
{
    return ev->recorded ? 1 : 0;
}

static int td__cpu_event_sync(td_backend *b, td_event *ev)
{
    return ev->recorded ? 0 : -EINVAL;
}

static int td__cpu_event_elapsed(td_backend *b, td_event *a, td_event *e,
                                 int64_t *ns)
{
    if (!a->recorded || !e->recorded)
        return -EINVAL;
    *ns = e->t - a->t;
    return 0;
}

static int td__cpu_sync(td_backend *b)
{
    dnnl_stream_wait(td__be(b)->strm);
    return 0;
}

static void td__cpu_destroy(td_backend *b)
{
    td__cpu *be = td__be(b);
    td__cpu_unplan(be);
    if (be->strm)
        dnnl_stream_destroy(be->strm);
    if (be->eng)
        dnnl_engine_destroy(be->eng);
    free(be->params);
    free(be->grads);
    free(be->slots);
    free(be->state);
    free(be->pixels);
    free(be->labels);
    free(be->xin);
    free(be);
}

static const td_backend_ops td__cpu_ops = {
    .name = "cpu",
    .destroy = td__cpu_destroy,
    .upload = td__cpu_upload,
    .train_step = td__cpu_train_step,
    .eval_step = td__cpu_eval_step,
    .read_stats = td__cpu_read_stats,
    .snapshot = td__cpu_snapshot,
    .restore = td__cpu_restore,
    .read_tensor = td__cpu_read_tensor,
    .write_param = td__cpu_write_param,
    .event_create = td__cpu_event_create,
    .event_destroy = td__cpu_event_destroy,
    .event_record = td__cpu_event_record,
    .event_query = td__cpu_event_query,
    .event_sync = td__cpu_event_sync,
    .event_elapsed_ns = td__cpu_event_elapsed,
    .sync = td__cpu_sync,
};

static int td__cpu_alloc(td__cpu *be)
{
    const td_model *m = be->base.model;
    const td_shape in = m->layers[0].out;
    size_t pc = m->param_count, sc = td_model_state_count(m);
    be->nslots = (size_t)td_optim_slots(&be->base.cfg.optim);
    be->params = malloc(pc * sizeof(float));
    be->grads = calloc(pc, sizeof(float));
    be->slots = be->nslots ? calloc(pc * be->nslots, sizeof(float)) : NULL;
    be->state = malloc((sc ? sc : 1) * sizeof(float));
    be->pixels = calloc((size_t)be->batch * in.c * in.h * in.w, 1);
    be->labels = calloc((size_t)be->batch, sizeof *be->labels);
    if (td__is_bf16(be))
        be->xin = malloc((size_t)be->batch * in.c * in.h * in.w *
                         sizeof(float));
    if (!be->params || !be->grads || (be->nslots && !be->slots) ||
        !be->state || !be->pixels || !be->labels ||
        (td__is_bf16(be) && !be->xin))
        return -ENOMEM;
    td_model_init_params(m, be->base.cfg.seed, be->params);
    float *s = be->state;
    for (int i = 0; i < m->nstate; i++)
        for (size_t j = 0; j < m->state[i].count; j++)
            *s++ = m->state[i].init;
    for (int c = 0; c < in.c; c++)
        td_normalize_coeffs(be->base.cfg.mean[c], be->base.cfg.std[c],
                            &be->nscale[c], &be->nbias[c]);
    be->weights_dirty = 1;
    return 0;
}

static int td__cpu_check(const td_model *m, const td_backend_config *cfg,
                         char *err, size_t errcap)
{
    if (cfg->dtype == TD_BF16 && !td_cpu_caps_get()->bf16) {
        char d[256];
        td_cpu_caps_describe(td_cpu_caps_get(), d, sizeof d);
        snprintf(err, errcap, "cpu backend: bf16 needs AVX512_BF16 or "
                 "AMX-BF16 used by oneDNN; this CPU: %s", d);
        return TD_E_NOTSUP;
    }
    if (cfg->dtype != TD_F32 && cfg->dtype != TD_BF16) {
        snprintf(err, errcap, "cpu backend: compute type %d: only fp32 and "
                 "bf16 exist", (int)cfg->dtype);
        return TD_E_NOTSUP;
    }
    if (cfg->threads < 0 || cfg->threads > 1024) {
        snprintf(err, errcap, "threads: must be 0..1024");
        return -EINVAL;
    }
    return td_backend_check_config(m, cfg, err, errcap);
}

int td_backend_cpu_create(const td_model *model, const td_backend_config *cfg,
                          td_backend **out, char *err, size_t errcap)
{
    td__cpu *be = NULL;
    int rc = td__cpu_check(model, cfg, err, errcap);
    *out = NULL;
    if (rc)
        return rc;
    be = calloc(1, sizeof *be);
    if (!be)
        return -ENOMEM;
    be->base.ops = &td__cpu_ops;
    be->base.model = model;
    be->base.cfg = *cfg;
    be->batch = cfg->batch;
    be->adt = cfg->dtype == TD_BF16 ? dnnl_bf16 : dnnl_f32;
    be->esize = cfg->dtype == TD_BF16 ? sizeof(td_bf16) : sizeof(float);
    /* auto: OMP_NUM_THREADS when set (read here: an earlier job's
     * omp_set_num_threads on this thread must not decide), else one per
     * CPU */
    const char *ont = getenv("OMP_NUM_THREADS");
    int env_threads = ont ? atoi(ont) : 0;
    be->threads = cfg->threads      ? cfg->threads
                  : env_threads > 0 ? env_threads
                                    : omp_get_num_procs();
    omp_set_num_threads(be->threads);
    if ((rc = td__cpu_alloc(be)))
        goto fail;
    if (dnnl_engine_create(&be->eng, dnnl_cpu, 0) != dnnl_success ||
        dnnl_stream_create(&be->strm, be->eng, dnnl_stream_default_flags) !=
            dnnl_success) {
        snprintf(be->base.err, sizeof be->base.err, "oneDNN: no CPU engine");
        rc = TD_E_DEVICE;
        goto fail;
    }
    if ((rc = td__cpu_plan(be)))
        goto fail;
    *out = &be->base;
    return 0;
fail:
    snprintf(err, errcap, "%s", rc == -ENOMEM ? "out of memory"
                                              : be->base.err);
    td__cpu_destroy(&be->base);
    return rc;
}
