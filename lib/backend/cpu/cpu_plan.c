/* cpu_plan.c - builds the CPU backend's oneDNN primitives.
 *
 * Owns: turning a td_model into primitives, memories and reorders, once,
 * for the configured batch size.  Activations keep the layout the first
 * convolution chooses (format "any"); every later primitive is told that
 * layout for its source and gradient, so no reorders happen between
 * layers.  Weights are given to primitives as "any" and reordered from the
 * canonical arrays when the chosen layout differs.  In bf16 (be->adt) the
 * activations and the weights the primitives read are bf16, the weight
 * gradients, biases and batch-norm parameters fp32 (cpu_int.h).
 * Never does: execute primitives (cpu_step.c does).
 * Everything created here is recorded in be->cl and released by
 * td__cpu_unplan, which is the single cleanup path (also after a failure
 * half-way through planning).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <oneapi/dnnl/dnnl_debug.h>

#include "backend/cpu/cpu_bn.h"
#include "backend/cpu/cpu_bn8.h"
#include "backend/cpu/cpu_int.h"
#include "backend/cpu/cpu_pool.h"
#include "backend/cpu/cpu_wino.h"
#include "base/error.h"
#include "base/log.h"

int td__cpu_fail(td__cpu *be, dnnl_status_t st, const char *what,
                 const char *layer)
{
    snprintf(be->base.err, sizeof be->base.err, "oneDNN %s%s%s: %s", what,
             layer ? " for layer " : "", layer ? layer : "",
             dnnl_status2str(st));
    return TD_E_DEVICE;
}

void td__mdt(dnnl_memory_desc_t *md, int nd, const dnnl_dim_t *dims,
             dnnl_format_tag_t tag, dnnl_data_type_t dt)
{
    dnnl_dims_t d = {0};
    memcpy(d, dims, (size_t)nd * sizeof d[0]);
    dnnl_memory_desc_init_by_tag(md, nd, d, dt, tag);
}

/* fp32: parameters, their gradients, statistics, the plain logits. */
static void td__md(dnnl_memory_desc_t *md, int nd, const dnnl_dim_t *dims,
                   dnnl_format_tag_t tag)
{
    td__mdt(md, nd, dims, tag, dnnl_f32);
}

/* A memory wrapping host floats (not owned) or allocating its own. */
int td__mem(td__cpu *be, const dnnl_memory_desc_t *md, void *ptr,
            dnnl_memory_t *out, const char *layer)
{
    TD__DNNL(be, dnnl_memory_create(out, md, be->eng,
                                    ptr ? ptr : DNNL_MEMORY_ALLOCATE),
             "memory", layer);
    return 0;
}

int td__pd(td__cpu *be, const void *op, const_dnnl_primitive_desc_t hint,
           dnnl_primitive_desc_t *pd, dnnl_primitive_t *prim,
           const char *what, const char *layer)
{
    TD__DNNL(be, dnnl_primitive_desc_create(pd, op, be->attr, be->eng, hint),
             what, layer);
    size_t sp = dnnl_memory_desc_get_size(
        dnnl_primitive_desc_query_md(*pd, dnnl_query_scratchpad_md, 0));
    if (sp > be->scratch_bytes)
        be->scratch_bytes = sp;
    TD__DNNL(be, dnnl_primitive_create(prim, *pd), what, layer);
    const char *impl = NULL;
    dnnl_primitive_desc_query(*pd, dnnl_query_impl_info_str, 0, &impl);
    td_debug("cpu backend: %s %s: %s", layer, what, impl ? impl : "?");
    /* bf16 only where oneDNN has a native kernel: its reference loops are
     * 10-100x slower than fp32 (e.g. backward weights of a convolution
     * with 3 inputs and 8 outputs), a silent slow path */
    if (be->adt == dnnl_bf16 && impl && strncmp(impl, "ref", 3) == 0 &&
        !be->base.cfg.allow_slow_bf16) {
        snprintf(be->base.err, sizeof be->base.err, "bf16: oneDNN has only "
                 "a reference (slow) kernel for %s of layer %s on this CPU "
                 "(%s): use precision fp32 for this model", what, layer,
                 impl);
        return TD_E_NOTSUP;
    }
    return 0;
}

const dnnl_memory_desc_t *td__q(const_dnnl_primitive_desc_t pd,
                                dnnl_query_t what, int index)
{
    return dnnl_primitive_desc_query_md(pd, what, index);
}

/* A reorder primitive from one layout to another; `what` names it in
 * errors. */
static int td__reorder_prim(td__cpu *be, const dnnl_memory_desc_t *from,
                            const dnnl_memory_desc_t *to, dnnl_primitive_t *r,
                            const char *what, const char *layer)
{
    dnnl_primitive_desc_t pd;
    TD__DNNL(be, dnnl_reorder_primitive_desc_create(&pd, from, be->eng, to,
             be->eng, NULL), what, layer);
    dnnl_status_t st = dnnl_primitive_create(r, pd);
    dnnl_primitive_desc_destroy(pd);
    TD__DNNL(be, st, what, layer);
    return 0;
}

/* If the primitive wants weights in another layout than `plain`, makes a
 * memory in its layout and a reorder between them (direction: plain to
 * primitive when to_prim, else back). */
int td__wlayout(td__cpu *be, const dnnl_memory_desc_t *want,
                dnnl_memory_t plain, int to_prim, dnnl_memory_t *mem,
                dnnl_primitive_t *reorder, const char *layer)
{
    const dnnl_memory_desc_t *have;
    dnnl_memory_get_memory_desc(plain, &have);
    if (dnnl_memory_desc_equal(want, have))
        return 0;
    int rc = td__mem(be, want, NULL, mem, layer);
    if (rc)
        return rc;
    return td__reorder_prim(be, to_prim ? have : want, to_prim ? want : have,
                            reorder, "weight reorder", layer);
}

/* Output memories of a root layer, with descriptor md. */
static int td__output(td__cpu *be, int L, const dnnl_memory_desc_t *md)
{
    td__cl *c = &be->cl[L];
    const char *name = be->base.model->layers[L].name;
    int rc;
    c->md = *md;
    c->nelem = dnnl_memory_desc_get_size(md) / be->esize;
    if ((rc = td__mem(be, md, NULL, &c->y, name)) ||
        (rc = td__mem(be, md, NULL, &c->dy, name)))
        return rc;
    memset(td__mem_ptr(c->y), 0, c->nelem * be->esize);
    memset(td__mem_ptr(c->dy), 0, c->nelem * be->esize);
    return 0;
}

/* Views of layer L's parameters inside the flat arrays. */
static int td__param_views(td__cpu *be, int L, const dnnl_memory_desc_t *wmd,
                           const dnnl_memory_desc_t *bmd)
{
    const td_model *m = be->base.model;
    td__cl *c = &be->cl[L];
    const td_layer *l = &m->layers[L];
    size_t off = 0;
    int rc;
    for (int p = 0; p < l->param0; p++)
        off += m->params[p].count;
    if ((rc = td__mem(be, wmd, be->params + off, &c->w, l->name)) ||
        (rc = td__mem(be, wmd, be->grads + off, &c->dw, l->name)))
        return rc;
    if (!bmd)
        return 0;
    off += m->params[l->param0].count;
    if ((rc = td__mem(be, bmd, be->params + off, &c->b, l->name)) ||
        (rc = td__mem(be, bmd, be->grads + off, &c->db, l->name)))
        return rc;
    return 0;
}

static int td__root(const td__cpu *be, int L) { return be->cl[L].root; }

static const dnnl_memory_desc_t *td__in_md(const td__cpu *be, int L, int i)
{
    return &be->cl[td__root(be, be->base.model->layers[L].in[i])].md;
}

/* cpu_bwdd.c's backward data: a forward convolution from dy (src) to dx
 * (dst) with the flipped, channel-swapped weights (plain in w_flip, the
 * primitive's layout in w_bd), held in pd[2] and bwd_d.  Training
 * propagation: oneDNN 2.6 picks the same kernel and weight layout for
 * inference, which measured no faster (docs/compute.md). */
static int td__plan_conv_bdf(td__cpu *be, int L,
                             const dnnl_memory_desc_t *src)
{
    const td_layer *l = &be->base.model->layers[L];
    td__cl *c = &be->cl[L];
    dnnl_dim_t wd[4] = {src->dims[1], l->channels, l->kernel, l->kernel};
    dnnl_dims_t st = {1, 1}, pad = {l->pad, l->pad};
    dnnl_memory_desc_t wany, wflip;
    dnnl_convolution_desc_t d;
    int rc;
    td__mdt(&wany, 4, wd, dnnl_format_tag_any, be->adt);
    td__md(&wflip, 4, wd, dnnl_oihw);
    TD__DNNL(be, dnnl_convolution_forward_desc_init(&d,
             dnnl_forward_training, dnnl_convolution_direct, &c->md, &wany,
             NULL, src, st, pad, pad), "convolution backward data as "
             "forward", l->name);
    if ((rc = td__pd(be, &d, NULL, &c->pd[2], &c->bwd_d, "conv bwd data as "
                     "fwd", l->name)) ||
        (rc = td__mem(be, &wflip, NULL, &c->w_flip, l->name)))
        return rc;
    return td__wlayout(be, td__q(c->pd[2], dnnl_query_weights_md, 0),
                       c->w_flip, 1, &c->w_bd, &c->r_w_bd, l->name);
}

/* The layout asked of a convolution's or pooling's output of C channels:
 * the plan's, except that a blocked layout (nChw16c, nChw8c) is asked
 * only of whole blocks (a padded block can leave oneDNN 2.6 with
 * reference kernels, and cpu_bn.c and cpu_bn8.c do not read it): "any"
 * chooses then. */
static dnnl_format_tag_t td__out_tag(const td__cpu *be, int C)
{
    return (be->atag == dnnl_nChw16c && C % 16) ||
                   (be->atag == dnnl_nChw8c && C % 8)
               ? dnnl_format_tag_any
               : be->atag;
}

static int td__is_ref(const_dnnl_primitive_desc_t pd)
{
    const char *impl = NULL;
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    return impl && strncmp(impl, "ref", 3) == 0;
}

/* A convolution whose backward weights got oneDNN's reference kernel in
 * the activations' layout asks again in channels-last, its source and
 * output gradient reordered into it each step.  fp32 on AVX2: a 1-channel
 * input (planar) with blocked nChw8c outputs has no jit kernel, and the
 * reference one took 1.7 s a step for Fashion-MNIST's first layer, where
 * channels-last takes 2 ms (plus ~3 ms of reorders). */
static int td__bwdw_nhwc(td__cpu *be, int L, const dnnl_memory_desc_t *src,
                         const dnnl_memory_desc_t *wgrad,
                         const dnnl_memory_desc_t *bias)
{
    const td_layer *l = &be->base.model->layers[L];
    td__cl *c = &be->cl[L];
    dnnl_dims_t st = {l->stride, l->stride}, pad = {l->pad, l->pad};
    dnnl_memory_desc_t xs, ys;
    dnnl_convolution_desc_t d;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t p;
    int rc;
    if (!td__is_ref(c->pd[3]))
        return 0;
    td__mdt(&xs, 4, src->dims, dnnl_nhwc, be->adt);
    td__mdt(&ys, 4, c->md.dims, dnnl_nhwc, be->adt);
    if (dnnl_convolution_backward_weights_desc_init(&d,
            dnnl_convolution_direct, &xs, wgrad, bias, &ys, st, pad, pad) !=
            dnnl_success ||
        td__pd(be, &d, c->pd[0], &pd, &p, "conv bwd weights (nhwc)",
               l->name) != 0)
        return 0; /* keep the reference kernel */
    if (td__is_ref(pd)) {
        dnnl_primitive_destroy(p);
        dnnl_primitive_desc_destroy(pd);
        return 0;
    }
    dnnl_primitive_destroy(c->bwd_w);
    dnnl_primitive_desc_destroy(c->pd[3]);
    c->pd[3] = pd;
    c->bwd_w = p;
    if ((rc = td__mem(be, &xs, NULL, &c->bw_x, l->name)) ||
        (rc = td__mem(be, &ys, NULL, &c->bw_dy, l->name)) ||
        (rc = td__reorder_prim(be, src, &xs, &c->r_bw_x, "reorder",
                               l->name)) ||
        (rc = td__reorder_prim(be, &c->md, &ys, &c->r_bw_dy, "reorder",
                               l->name)))
        return rc;
    return 0;
}

static int td__plan_conv(td__cpu *be, int L)
{
    const td_layer *l = &be->base.model->layers[L];
    td__cl *c = &be->cl[L];
    const dnnl_memory_desc_t *src = td__in_md(be, L, 0);
    int ic = (int)src->dims[1];
    dnnl_dim_t wd[4] = {l->channels, ic, l->kernel, l->kernel};
    dnnl_dim_t dd[4] = {be->batch, l->out.c, l->out.h, l->out.w};
    dnnl_dim_t bd[1] = {l->channels};
    dnnl_dims_t st = {l->stride, l->stride}, pad = {l->pad, l->pad};
    dnnl_memory_desc_t wany, dany, bmd, wplain, wgrad;
    dnnl_convolution_desc_t d;
    int rc;
    td__mdt(&wany, 4, wd, dnnl_format_tag_any, be->adt);
    td__mdt(&dany, 4, dd, td__out_tag(be, l->out.c), be->adt);
    td__md(&wgrad, 4, wd, dnnl_format_tag_any); /* fp32 gradients */
    td__md(&bmd, 1, bd, dnnl_a);
    td__md(&wplain, 4, wd, dnnl_oihw);
    const dnnl_memory_desc_t *bias = l->bias ? &bmd : NULL;
    TD__DNNL(be, dnnl_convolution_forward_desc_init(&d, dnnl_forward_training,
             dnnl_convolution_direct, src, &wany, bias, &dany, st, pad, pad),
             "convolution", l->name);
    if ((rc = td__pd(be, &d, NULL, &c->pd[0], &c->fwd, "conv fwd", l->name)) ||
        (rc = td__output(be, L, td__q(c->pd[0], dnnl_query_dst_md, 0))) ||
        (rc = td__param_views(be, L, &wplain, bias)) ||
        (rc = td__plan_cfwd(be, L, src, ic)) ||
        (rc = td__plan_cbd(be, L, src, ic)) ||
        (rc = td__plan_wino(be, L, src, ic)))
        return rc;
    /* cpu_cfwd.c's and cpu_wino.c's plans hold their own weights: the
     * primitives they replace keep their descriptors but get no weight
     * copy to refresh */
    if (!c->cf && !c->wf &&
        (rc = td__wlayout(be, td__q(c->pd[0], dnnl_query_weights_md, 0), c->w,
                          1, &c->w_f, &c->r_w_f, l->name)))
        return rc;
    if (c->no_dsrc || c->cbd || c->wbd) {
        /* no backward data, or cpu_cfwd.c's or cpu_wino.c's */
    } else if ((c->bdf = td__bwdd_ok(be, L))) {
        if ((rc = td__plan_conv_bdf(be, L, src)))
            return rc;
    } else if ((rc = td__bd2_plan(be, L, src))) {
        return rc;
    } else if (!c->bd2) {
        TD__DNNL(be, dnnl_convolution_backward_data_desc_init(&d,
                 dnnl_convolution_direct, src, &wany, &c->md, st, pad, pad),
                 "convolution backward data", l->name);
        if ((rc = td__pd(be, &d, c->pd[0], &c->pd[2], &c->bwd_d, "conv bwd "
                         "data", l->name)) ||
            (rc = td__wlayout(be, td__q(c->pd[2], dnnl_query_weights_md, 0),
                              c->w, 1, &c->w_bd, &c->r_w_bd, l->name)))
            return rc;
    }
    if (c->wf || (rc = td__plan_bwdw(be, L, src, ic)) || c->bw)
        return rc;
    TD__DNNL(be, dnnl_convolution_backward_weights_desc_init(&d,
             dnnl_convolution_direct, src, &wgrad, bias, &c->md, st, pad, pad),
             "convolution backward weights", l->name);
    if ((rc = td__pd(be, &d, c->pd[0], &c->pd[3], &c->bwd_w, "conv bwd "
                     "weights", l->name)))
        return rc;
    /* oneDNN's reference kernel only: cpu_sbw.c where it computes the
     * layer (the primitive stays, unused), else channels-last */
    if (td__is_ref(c->pd[3]) &&
        ((rc = td__plan_sbw(be, L, src, ic)) || c->sbw))
        return rc;
    if ((rc = td__bwdw_nhwc(be, L, src, &wgrad, bias)))
        return rc;
    return td__wlayout(be, td__q(c->pd[3], dnnl_query_diff_weights_md, 0),
                       c->dw, 0, &c->dw_bw, &c->r_dw, l->name);
}

/* The running statistics: views into the state array. */
static int td__bn_running_views(td__cpu *be, int L,
                                const dnnl_memory_desc_t *vmd)
{
    const td_model *m = be->base.model;
    const td_layer *l = &m->layers[L];
    td__cl *c = &be->cl[L];
    size_t off = 0;
    int rc;
    for (int s = 0; s < l->state0; s++)
        off += m->state[s].count;
    if ((rc = td__mem(be, vmd, be->state + off, &c->rmean, l->name)) ||
        (rc = td__mem(be, vmd, be->state + off + (size_t)l->out.c, &c->rvar,
                      l->name)))
        return rc;
    return 0;
}

/* After planning every layer: the shortcuts of fused adds are dense nhwc
 * too (one may be planned after its batch norm, as resnet's 1x1 ones). */
static int td__check_fused_adds(td__cpu *be)
{
    const td_model *m = be->base.model;
    for (int L = 1; L < m->nlayers; L++) {
        int A = be->cl[L].add;
        if (A && !td__bn_dense(be, td__in_md(be, A, 1))) {
            snprintf(be->base.err, sizeof be->base.err, "add %s: the "
                     "batch norm kernel needs a dense %s %s shortcut",
                     m->layers[A].name, td__bn_layout(be),
                     td__is_bf16(be) ? "bf16" : "fp32");
            return TD_E_NOTSUP;
        }
    }
    return 0;
}

/* A batch norm on cpu_bn.c's or cpu_bn8.c's kernels: memories and
 * scratch, no oneDNN primitive. */
static int td__plan_bn_fast(td__cpu *be, int L)
{
    const td_layer *l = &be->base.model->layers[L];
    td__cl *c = &be->cl[L];
    const dnnl_memory_desc_t *src = td__in_md(be, L, 0);
    dnnl_dim_t cd[1] = {l->out.c};
    dnnl_memory_desc_t vmd;
    int rc;
    if (!td__bn_dense(be, src)) {
        snprintf(be->base.err, sizeof be->base.err, "batch norm %s: the "
                 "kernel needs dense %s %s inputs", l->name,
                 td__bn_layout(be), td__is_bf16(be) ? "bf16" : "fp32");
        return TD_E_NOTSUP;
    }
    td__md(&vmd, 1, cd, dnnl_a);
    if ((rc = td__output(be, L, src)) ||
        (rc = td__param_views(be, L, &vmd, &vmd)) ||
        (rc = td__mem(be, &vmd, NULL, &c->mean, l->name)) ||
        (rc = td__mem(be, &vmd, NULL, &c->var, l->name)) ||
        (rc = td__bn_running_views(be, L, &vmd)))
        return rc;
    c->part = malloc(td_bn_nhwc_part_floats(c->nelem / (size_t)l->out.c,
                                            l->out.c, td__bn_hw(be, L)) *
                     sizeof(float));
    if (!td__is_bf16(be) && c->fused)
        c->rmask = malloc(td_bn8_mask_bytes(c->nelem / (size_t)l->out.c,
                                            l->out.c));
    if (!c->part || (!td__is_bf16(be) && c->fused && !c->rmask))
        return -ENOMEM;
    td_debug("cpu backend: %s batch norm: %s (%s %s)%s", l->name,
             td__is_bf16(be) ? "cpu_bn" : "cpu_bn8",
             td__is_bf16(be) ? "bf16" : "fp32", td__bn_layout(be),
             c->add ? " + add + relu" : c->fused ? " + relu" : "");
    return 0;
}

static int td__plan_bn(td__cpu *be, int L)
{
    const td_model *m = be->base.model;
    const td_layer *l = &m->layers[L];
    td__cl *c = &be->cl[L];
    const dnnl_memory_desc_t *src = td__in_md(be, L, 0);
    dnnl_dim_t cd[1] = {l->out.c};
    dnnl_memory_desc_t vmd;
    dnnl_batch_normalization_desc_t d;
    unsigned fl = dnnl_use_scale | dnnl_use_shift;
    int rc;
    if (c->fast)
        return td__plan_bn_fast(be, L);
    if (c->fused)
        fl |= dnnl_fuse_norm_relu;
    /* Frozen statistics: training-mode forward and backward on the
     * running mean and variance (inputs), as in inference. */
    unsigned tfl = td__bn_eval(be, L) ? fl | dnnl_use_global_stats : fl;
    td__md(&vmd, 1, cd, dnnl_a);
    TD__DNNL(be, dnnl_batch_normalization_forward_desc_init(&d,
             dnnl_forward_training, src, l->eps, tfl), "batch norm",
             l->name);
    if ((rc = td__pd(be, &d, NULL, &c->pd[0], &c->fwd, "bn fwd", l->name)) ||
        (rc = td__output(be, L, td__q(c->pd[0], dnnl_query_dst_md, 0))) ||
        (rc = td__param_views(be, L, &vmd, &vmd)) ||
        (rc = td__mem(be, &vmd, NULL, &c->mean, l->name)) ||
        (rc = td__mem(be, &vmd, NULL, &c->var, l->name)))
        return rc;
    if ((rc = td__bn_running_views(be, L, &vmd)))
        return rc;
    if (c->fused &&
        (rc = td__mem(be, td__q(c->pd[0], dnnl_query_workspace_md, 0), NULL,
                      &c->ws, l->name)))
        return rc;
    TD__DNNL(be, dnnl_batch_normalization_forward_desc_init(&d,
             dnnl_forward_inference, src, l->eps, fl | dnnl_use_global_stats),
             "batch norm inference", l->name);
    if ((rc = td__pd(be, &d, NULL, &c->pd[1], &c->inf, "bn inference",
                     l->name)))
        return rc;
    TD__DNNL(be, dnnl_batch_normalization_backward_desc_init(&d,
             dnnl_backward, &c->md, src, l->eps, tfl), "batch norm backward",
             l->name);
    return td__pd(be, &d, c->pd[0], &c->pd[2], &c->bwd_d, "bn bwd", l->name);
}

static int td__plan_relu(td__cpu *be, int L)
{
    const td_layer *l = &be->base.model->layers[L];
    td__cl *c = &be->cl[L];
    const dnnl_memory_desc_t *src = td__in_md(be, L, 0);
    dnnl_eltwise_desc_t d;
    int rc;
    TD__DNNL(be, dnnl_eltwise_forward_desc_init(&d, dnnl_forward_training,
             dnnl_eltwise_relu, src, 0.0f, 0.0f), "relu", l->name);
    if ((rc = td__pd(be, &d, NULL, &c->pd[0], &c->fwd, "relu fwd", l->name)) ||
        (rc = td__output(be, L, td__q(c->pd[0], dnnl_query_dst_md, 0))))
        return rc;
    TD__DNNL(be, dnnl_eltwise_backward_desc_init(&d, dnnl_eltwise_relu,
             &c->md, src, 0.0f, 0.0f), "relu backward", l->name);
    return td__pd(be, &d, c->pd[0], &c->pd[2], &c->bwd_d, "relu bwd",
                  l->name);
}

int td__pool_blk(void)
{
    /* "0": oneDNN's pooling; "1": cpu_pool.c in nChw16c too (AVX-512
     * plans: not measured there, so not the default) */
    const char *e = getenv("TD_CPU_POOL");
    return e && strcmp(e, "0") == 0 ? 0 : e && strcmp(e, "1") == 0 ? 16 : 8;
}

static int td__plan_pool(td__cpu *be, int L)
{
    const td_layer *l = &be->base.model->layers[L];
    td__cl *c = &be->cl[L];
    const dnnl_memory_desc_t *src = td__in_md(be, L, 0);
    dnnl_dim_t dd[4] = {be->batch, l->out.c, l->out.h, l->out.w};
    dnnl_dims_t k = {l->kernel, l->kernel}, st = {l->stride, l->stride};
    dnnl_dims_t pad = {l->pad, l->pad};
    dnnl_alg_kind_t alg = l->kind == TD_L_MAXPOOL ? dnnl_pooling_max
                                                  : dnnl_pooling_avg;
    dnnl_memory_desc_t dany;
    dnnl_pooling_desc_t d;
    int rc;
    if (l->kind == TD_L_GAP) {
        k[0] = src->dims[2];
        k[1] = src->dims[3];
        st[0] = st[1] = 1;
        pad[0] = pad[1] = 0;
    }
    td__mdt(&dany, 4, dd, td__out_tag(be, l->out.c), be->adt);
    TD__DNNL(be, dnnl_pooling_forward_desc_init(&d, dnnl_forward_training,
             alg, src, &dany, st, k, pad, pad), "pooling", l->name);
    if ((rc = td__pd(be, &d, NULL, &c->pd[0], &c->fwd, "pool fwd", l->name)) ||
        (rc = td__output(be, L, td__q(c->pd[0], dnnl_query_dst_md, 0))))
        return rc;
    int pool = td__pool_blk();
    if (l->kind == TD_L_MAXPOOL && !td__is_bf16(be) && pool &&
        (c->pblk = td__blocked_f32_dense(src)) && c->pblk <= pool &&
        td__blocked_f32_dense(&c->md) == c->pblk &&
        td_maxpool_ok(l->kernel, l->stride, l->pad, (int)src->dims[2],
                      (int)src->dims[3], c->pblk)) {
        /* cpu_pool.c: its masks instead of the workspace, no bwd_d */
        size_t planes = (size_t)be->batch * (size_t)(l->out.c / c->pblk);
        size_t mb = td_maxpool_mask_bytes(l->kernel, planes, l->out.h,
                                          l->out.w, c->pblk);
        c->ph = (int)src->dims[2];
        c->pw = (int)src->dims[3];
        if (!(c->pmask = malloc(mb ? mb : 1))) {
            snprintf(be->base.err, sizeof be->base.err, "%s: out of memory "
                     "for the pooling's masks", l->name);
            return -ENOMEM;
        }
        td_debug("cpu backend: %s max pool: cpu_pool (%dx%d, AVX2, nChw%dc)",
                 l->name, l->kernel, l->kernel, c->pblk);
        return 0;
    }
    if (alg == dnnl_pooling_max &&
        (rc = td__mem(be, td__q(c->pd[0], dnnl_query_workspace_md, 0), NULL,
                      &c->ws, l->name)))
        return rc;
    TD__DNNL(be, dnnl_pooling_backward_desc_init(&d, alg, src, &c->md, st, k,
             pad, pad), "pooling backward", l->name);
    return td__pd(be, &d, c->pd[0], &c->pd[2], &c->bwd_d, "pool bwd",
                  l->name);
}

static int td__plan_dense(td__cpu *be, int L)
{
    const td_layer *l = &be->base.model->layers[L];
    td__cl *c = &be->cl[L];
    const dnnl_memory_desc_t *src = td__in_md(be, L, 0);
    int nd = src->ndims;
    dnnl_dim_t wd[4] = {l->channels, src->dims[1], 1, 1};
    dnnl_dim_t dd[2] = {be->batch, l->channels}, bd[1] = {l->channels};
    dnnl_memory_desc_t wany, dmd, bmd, wplain, wgrad;
    dnnl_inner_product_desc_t d;
    int rc;
    if (nd == 4) {
        wd[2] = src->dims[2];
        wd[3] = src->dims[3];
    }
    td__mdt(&wany, nd, wd, dnnl_format_tag_any, be->adt);
    td__md(&wgrad, nd, wd, dnnl_format_tag_any); /* fp32 gradients */
    td__md(&wplain, nd, wd, nd == 4 ? dnnl_oihw : dnnl_oi);
    td__mdt(&dmd, 2, dd, dnnl_nc, be->adt);
    td__md(&bmd, 1, bd, dnnl_a);
    const dnnl_memory_desc_t *bias = l->bias ? &bmd : NULL;
    TD__DNNL(be, dnnl_inner_product_forward_desc_init(&d,
             dnnl_forward_training, src, &wany, bias, &dmd), "dense",
             l->name);
    if ((rc = td__pd(be, &d, NULL, &c->pd[0], &c->fwd, "dense fwd",
                     l->name)) ||
        (rc = td__output(be, L, td__q(c->pd[0], dnnl_query_dst_md, 0))) ||
        (rc = td__param_views(be, L, &wplain, bias)) ||
        (rc = td__wlayout(be, td__q(c->pd[0], dnnl_query_weights_md, 0), c->w,
                          1, &c->w_f, &c->r_w_f, l->name)))
        return rc;
    if (!c->no_dsrc) {
        TD__DNNL(be, dnnl_inner_product_backward_data_desc_init(&d, src,
                 &wany, &c->md), "dense backward data", l->name);
        if ((rc = td__pd(be, &d, c->pd[0], &c->pd[2], &c->bwd_d, "dense bwd "
                         "data", l->name)) ||
            (rc = td__wlayout(be, td__q(c->pd[2], dnnl_query_weights_md, 0),
                              c->w, 1, &c->w_bd, &c->r_w_bd, l->name)))
            return rc;
    }
    TD__DNNL(be, dnnl_inner_product_backward_weights_desc_init(&d, src,
             &wgrad, bias, &c->md), "dense backward weights", l->name);
    if ((rc = td__pd(be, &d, c->pd[0], &c->pd[3], &c->bwd_w, "dense bwd "
                     "weights", l->name)))
        return rc;
    return td__wlayout(be, td__q(c->pd[3], dnnl_query_diff_weights_md, 0),
                       c->dw, 0, &c->dw_bw, &c->r_dw, l->name);
}

static int td__plan_add(td__cpu *be, int L)
{
    const td_layer *l = &be->base.model->layers[L];
    td__cl *c = &be->cl[L];
    const dnnl_memory_desc_t *s0 = td__in_md(be, L, 0);
    const dnnl_memory_desc_t *s1 = td__in_md(be, L, 1);
    dnnl_binary_desc_t d;
    int rc;
    TD__DNNL(be, dnnl_binary_desc_init(&d, dnnl_binary_add, s0, s1, s0),
             "add", l->name);
    if ((rc = td__pd(be, &d, NULL, &c->pd[0], &c->fwd, "add", l->name)) ||
        (rc = td__output(be, L, s0)))
        return rc;
    if (dnnl_memory_desc_equal(s0, s1))
        return 0;
    return td__reorder_prim(be, s0, s1, &c->r_src1, "add gradient reorder",
                            l->name);
}

static int td__plan_dropout(td__cpu *be, int L)
{
    td__cl *c = &be->cl[L];
    int rc = td__output(be, L, td__in_md(be, L, 0));
    if (rc || (rc = td__dropout_check(be, L)))
        return rc;
    c->mask = calloc(c->nelem, 1);
    return c->mask ? 0 : -ENOMEM;
}

/* ... and does, unless the choice (cpu_tune.c; TD_CPU_BN=onednn in the
 * environment forces it) says oneDNN's. */
static int td__bn_fast(const td__cpu *be, int L)
{
    return td__bn_can_fast(be, L) && !td__choice(be, L, TD__CH_BNDNN, 0);
}

/* Add L fuses into the fast batch norm before it: the batch norm is its
 * first input and only feeds it, a relu is the add's only consumer, and
 * the shortcut's gradient goes to another root than the batch norm's
 * input's (the kernel writes both in one call). */
static int td__add_fuses(const td__cpu *be, int L)
{
    const td_model *m = be->base.model;
    const td_layer *l = &m->layers[L];
    int bn = l->in[0];
    if (l->kind != TD_L_ADD || !be->cl[bn].fast ||
        be->cl[bn].root != bn || m->layers[bn].consumers != 1 ||
        l->consumers != 1 ||
        be->cl[l->in[1]].root == be->cl[m->layers[bn].in[0]].root)
        return 0;
    for (int R = L + 1; R < m->nlayers; R++)
        if (m->layers[R].kind == TD_L_RELU && m->layers[R].in[0] == L)
            return 1;
    return 0;
}

/* Which layers alias another's memory, and how many gradient summands
 * each root receives.  Needs be->atag (td__plan_input_md). */
static void td__wire(td__cpu *be)
{
    const td_model *m = be->base.model;
    for (int L = 0; L < m->nlayers; L++) {
        const td_layer *l = &m->layers[L];
        td__cl *c = &be->cl[L];
        c->root = L;
        c->fast = td__bn_fast(be, L);
        if (l->kind == TD_L_FLATTEN)
            c->root = be->cl[l->in[0]].root;
        if (l->kind == TD_L_RELU && m->layers[l->in[0]].kind == TD_L_BN &&
            m->layers[l->in[0]].consumers == 1) {
            be->cl[l->in[0]].fused = 1;
            c->root = be->cl[l->in[0]].root;
        }
        if (td__add_fuses(be, L)) {
            be->cl[l->in[0]].fused = 1;
            be->cl[l->in[0]].add = L;
            c->root = l->in[0];
        }
        if (l->kind == TD_L_RELU && m->layers[l->in[0]].kind == TD_L_ADD &&
            be->cl[l->in[0]].root != l->in[0]) /* after a fused add */
            c->root = be->cl[l->in[0]].root;
        if ((l->kind == TD_L_CONV || l->kind == TD_L_DENSE) && l->in[0] == 0)
            c->no_dsrc = 1;
    }
    for (int L = 1; L < m->nlayers; L++) {
        const td_layer *l = &m->layers[L];
        int r = be->cl[L].root;
        if (be->cl[L].no_dsrc)
            continue;
        if (r != L) { /* a fused add: its shortcut's gradient */
            if (be->cl[r].add == L)
                be->cl[be->cl[l->in[1]].root].sources++;
            continue;
        }
        for (int i = 0; i < 2; i++)
            if (l->in[i] >= 0)
                be->cl[be->cl[l->in[i]].root].sources++;
    }
}

static int td__plan_logits(td__cpu *be)
{
    const td_model *m = be->base.model;
    td__cl *c = &be->cl[be->cl[m->nlayers - 1].root];
    dnnl_dim_t d[4] = {be->batch, m->classes, 1, 1};
    dnnl_memory_desc_t plain;
    int rc;
    td__md(&plain, c->md.ndims, d, c->md.ndims == 2 ? dnnl_nc : dnnl_nchw);
    if (dnnl_memory_desc_equal(&plain, &c->md))
        return 0;
    if ((rc = td__mem(be, &plain, NULL, &be->logits, "logits")) ||
        (rc = td__mem(be, &plain, NULL, &be->dlogits, "logits")))
        return rc;
    if ((rc = td__reorder_prim(be, &c->md, &plain, &be->r_logits,
                               "logits reorder", NULL)))
        return rc;
    return td__reorder_prim(be, &plain, &c->md, &be->r_dlogits,
                            "logits reorder", NULL);
}

/* One scratchpad buffer, viewed through each primitive's descriptor:
 * oneDNN's own would be allocated (and page-faulted) per execution. */
int td__scratch_view(td__cpu *be, const_dnnl_primitive_desc_t pd,
                     dnnl_memory_t *sp, const char *layer)
{
    if (!pd)
        return 0;
    const dnnl_memory_desc_t *md =
        dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    if (dnnl_memory_desc_get_size(md) == 0)
        return 0;
    return td__mem(be, md, be->scratch, sp, layer);
}

static int td__plan_scratch(td__cpu *be)
{
    size_t bytes = (be->scratch_bytes + 4095) / 4096 * 4096;
    if (!bytes)
        return 0;
    be->scratch = aligned_alloc(4096, bytes);
    if (!be->scratch)
        return -ENOMEM;
    for (int L = 0; L < be->base.model->nlayers; L++) {
        td__cl *c = &be->cl[L];
        const char *name = be->base.model->layers[L].name;
        int rc = 0;
        for (int i = 0; i < 4 && rc == 0; i++)
            rc = td__scratch_view(be, c->pd[i], &c->sp[i], name);
        if (rc || (rc = td__bd2_scratch(be, c, name)))
            return rc;
        if (c->wf) /* cpu_wino.c's working buffers: between calls, nothing */
            td_wino_share_work(c->wf, be->scratch);
        if (c->wbd)
            td_wino_share_work(c->wbd, be->scratch);
    }
    return 0;
}

/* The convolution to ask for the activations' layout: the first one not
 * reading the input (its 1-3 channels make it atypical), else the first. */
static int td__typical_conv(const td_model *m)
{
    int first = -1;
    for (int L = 1; L < m->nlayers; L++) {
        if (m->layers[L].kind != TD_L_CONV)
            continue;
        if (m->layers[L].in[0] != 0)
            return L;
        if (first < 0)
            first = L;
    }
    return first;
}

const char *td__layout_forced(void)
{
    const char *e = getenv("TD_CPU_NHWC");
    return e && (strcmp(e, "0") == 0 || strcmp(e, "1") == 0) ? e : NULL;
}

/* The input's layout.  fp32 keeps plain NCHW, which the normalisation
 * writes directly.  bf16 asks a typical convolution which activation
 * layout it prefers ("any") and makes the input channels-last (nhwc) when
 * that one is: on AMX, oneDNN 2.6's AMX kernels take nothing else, and
 * from a planar NCHW input the first convolution would choose the blocked
 * nChw16c layout and every later layer would run the slower AVX512_BF16
 * kernels.  When it prefers nChw16c (AVX512_BF16 without AMX) every
 * convolution and pooling output is asked for in nChw16c, the layout
 * cpu_bn.c's blocked batch norm reads.  TD_CPU_NHWC=1 (or 0) in the
 * environment overrides oneDNN's answer, for trying the channels-last
 * plan on a CPU without AMX (and the blocked one with AMX); else
 * be->layout_pick, when cpu_tune.c measured or was given a layout.
 * be->layout_rule keeps oneDNN's answer.  *reorder is set when xin needs
 * a reorder into it. */
static int td__plan_input_md(td__cpu *be, const dnnl_dim_t *d,
                             dnnl_memory_desc_t *md, int *reorder)
{
    const td_model *m = be->base.model;
    dnnl_memory_desc_t src, w, dst;
    dnnl_convolution_desc_t cd;
    dnnl_primitive_desc_t pd;
    int L = td__typical_conv(m);
    td__mdt(md, 4, d, dnnl_nchw, be->adt);
    be->atag = dnnl_format_tag_any;
    be->layout_rule = TD__LY_ANY;
    *reorder = 0;
    if (L < 0)
        return 0;
    const td_layer *l = &m->layers[L];
    const td_shape in = m->layers[l->in[0]].out;
    dnnl_dim_t sd[4] = {be->batch, in.c, in.h, in.w};
    dnnl_dim_t wd[4] = {l->channels, in.c, l->kernel, l->kernel};
    dnnl_dim_t dd[4] = {be->batch, l->out.c, l->out.h, l->out.w};
    dnnl_dims_t st = {l->stride, l->stride}, pad = {l->pad, l->pad};
    td__mdt(&src, 4, sd, dnnl_format_tag_any, be->adt);
    td__mdt(&w, 4, wd, dnnl_format_tag_any, be->adt);
    td__mdt(&dst, 4, dd, dnnl_format_tag_any, be->adt);
    /* a probe that fails leaves the planar input: the layer's own plan
     * then reports what is wrong with it */
    if (dnnl_convolution_forward_desc_init(&cd, dnnl_forward_training,
            dnnl_convolution_direct, &src, &w, NULL, &dst, st, pad, pad) !=
            dnnl_success ||
        dnnl_primitive_desc_create(&pd, &cd, be->attr, be->eng, NULL) !=
            dnnl_success)
        return 0;
    const dnnl_memory_desc_t *want = td__q(pd, dnnl_query_src_md, 0);
    int nhwc = want->format_kind == dnnl_blocked &&
               want->format_desc.blocking.inner_nblks == 0 &&
               want->format_desc.blocking.strides[1] == 1;
    int blk = want->format_kind == dnnl_blocked &&
                      want->format_desc.blocking.inner_nblks == 1 &&
                      want->format_desc.blocking.inner_idxs[0] == 1
                  ? (int)want->format_desc.blocking.inner_blks[0]
                  : 0;
    int blk16 = blk == 16;
    dnnl_primitive_desc_destroy(pd);
    if (!td__is_bf16(be)) { /* fp32: AVX2's nChw8c for every later layer
                               (cpu_bn8.c's batch norm reads it); any
                               other layout as the primitives choose */
        if (blk == 8)
            be->atag = dnnl_nChw8c;
        return 0;
    }
    be->layout_rule = nhwc ? TD__LY_NHWC : blk16 ? TD__LY_BLK16 : TD__LY_ANY;
    const char *force = td__layout_forced();
    if (force) {
        nhwc = force[0] == '1';
    } else if (be->layout_pick != TD__LY_RULE) { /* cpu_tune.c's choice */
        nhwc = be->layout_pick == TD__LY_NHWC;
        blk16 = be->layout_pick == TD__LY_BLK16;
    }
    if (nhwc) { /* "any" would still pick a reference kernel for some
                   first convolutions (1 input channel, AMX) */
        td__mdt(md, 4, d, dnnl_nhwc, be->adt);
        be->atag = dnnl_nhwc;
        *reorder = 1;
    } else if (blk16) { /* every later layer in the layout the kernels
                           chose (cpu_bn.c's batch norm reads it) */
        be->atag = dnnl_nChw16c;
    }
    return 0;
}

/* bf16 with a non-NCHW input: xin (fp32 NCHW) into the input's memory,
 * converting (round to nearest even) and laying out in one reorder. */
static int td__plan_input_reorder(td__cpu *be, const dnnl_dim_t *d)
{
    dnnl_memory_desc_t plain;
    td__md(&plain, 4, d, dnnl_nchw);
    int rc = td__mem(be, &plain, be->xin, &be->xin_m, "input");
    if (rc)
        return rc;
    return td__reorder_prim(be, &plain, &be->cl[0].md, &be->r_in,
                            "input reorder", NULL);
}

int td__cpu_plan(td__cpu *be)
{
    const td_model *m = be->base.model;
    const td_shape in = m->layers[0].out;
    dnnl_dim_t d[4] = {be->batch, in.c, in.h, in.w};
    dnnl_memory_desc_t md;
    int rc = 0;
    be->cl = calloc((size_t)m->nlayers, sizeof *be->cl);
    if (!be->cl)
        return -ENOMEM;
    TD__DNNL(be, dnnl_primitive_attr_create(&be->attr), "attributes", NULL);
    TD__DNNL(be, dnnl_primitive_attr_set_scratchpad_mode(be->attr,
             dnnl_scratchpad_mode_user), "attributes", NULL);
    int reorder_in;
    if ((rc = td__plan_input_md(be, d, &md, &reorder_in)))
        return rc;
    td__wire(be);
    if ((rc = td__output(be, 0, &md)) ||
        (reorder_in && (rc = td__plan_input_reorder(be, d))))
        return rc;
    for (int L = 1; L < m->nlayers && rc == 0; L++) {
        if (be->cl[L].root != L)
            continue;
        switch (m->layers[L].kind) {
        case TD_L_CONV:
            rc = td__plan_conv(be, L);
            if (rc == 0)
                rc = td__wmap_plan(be, L);
            break;
        case TD_L_BN:
            rc = td__plan_bn(be, L);
            break;
        case TD_L_RELU:
            rc = td__plan_relu(be, L);
            break;
        case TD_L_MAXPOOL:
        case TD_L_AVGPOOL:
        case TD_L_GAP:
            rc = td__plan_pool(be, L);
            break;
        case TD_L_DENSE:
            rc = td__plan_dense(be, L);
            if (rc == 0)
                rc = td__wmap_plan(be, L);
            break;
        case TD_L_ADD:
            rc = td__plan_add(be, L);
            break;
        case TD_L_DROPOUT:
            rc = td__plan_dropout(be, L);
            break;
        default:
            rc = TD_E_NOTSUP;
        }
        if (rc == 0 && be->cl[L].sources > 1)
            rc = td__mem(be, &be->cl[L].md, NULL, &be->cl[L].acc,
                         m->layers[L].name);
    }
    if (rc == 0)
        rc = td__check_fused_adds(be);
    if (rc == 0)
        rc = td__fold_plan(be);
    if (rc == 0 && be->cl[0].sources > 1)
        rc = td__mem(be, &be->cl[0].md, NULL, &be->cl[0].acc, "input");
    if (rc == 0)
        rc = td__plan_logits(be);
    if (rc == 0)
        rc = td__plan_scratch(be);
    return rc;
}

void td__cpu_unplan(td__cpu *be)
{
    if (!be->cl)
        return;
    for (int L = 0; L < be->base.model->nlayers; L++) {
        td__cl *c = &be->cl[L];
        dnnl_primitive_t prims[] = {c->fwd, c->inf, c->bwd_d, c->bwd_w,
                                    c->r_w_f, c->r_w_bd, c->r_dw, c->r_src1,
                                    c->r_bw_x, c->r_bw_dy};
        dnnl_memory_t mems[] = {c->y, c->dy, c->acc, c->ws, c->mean,
                                c->var, c->rmean, c->rvar, c->w, c->dw,
                                c->b, c->db, c->w_f, c->w_bd, c->dw_bw,
                                c->w_flip, c->bw_x, c->bw_dy};
        for (size_t i = 0; i < sizeof prims / sizeof prims[0]; i++)
            if (prims[i])
                dnnl_primitive_destroy(prims[i]);
        for (size_t i = 0; i < sizeof mems / sizeof mems[0]; i++)
            if (mems[i])
                dnnl_memory_destroy(mems[i]);
        for (int i = 0; i < 4; i++) {
            if (c->pd[i])
                dnnl_primitive_desc_destroy(c->pd[i]);
            if (c->sp[i])
                dnnl_memory_destroy(c->sp[i]);
        }
        free(c->mask);
        free(c->part);
        free(c->rmask);
        td__kplan_free(c);
        td__wmap_free(c);
        td__bd2_free(c);
    }
    if (be->r_in)
        dnnl_primitive_destroy(be->r_in);
    if (be->xin_m)
        dnnl_memory_destroy(be->xin_m);
    be->r_in = NULL;
    be->xin_m = NULL;
    if (be->r_logits)
        dnnl_primitive_destroy(be->r_logits);
    if (be->r_dlogits)
        dnnl_primitive_destroy(be->r_dlogits);
    if (be->logits)
        dnnl_memory_destroy(be->logits);
    if (be->dlogits)
        dnnl_memory_destroy(be->dlogits);
    be->r_logits = be->r_dlogits = NULL;
    be->logits = be->dlogits = NULL;
    free(be->cl);
    be->cl = NULL;
    free(be->scratch);
    be->scratch = NULL;
    if (be->attr)
        dnnl_primitive_attr_destroy(be->attr);
    be->attr = NULL;
}
