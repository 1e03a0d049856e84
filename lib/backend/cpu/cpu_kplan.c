/* cpu_kplan.c - plans the CPU backend's hand-written convolution kernels
 * into a layer: cpu_bwdw.c's backward weights, cpu_cfwd.c's forward and
 * backward data (off unless TD_CPU_CFWD=1), cpu_wino.c's fp32 Winograd
 * passes, each where the kernel computes the layer exactly and the
 * layouts are the dense ones it reads.
 *
 * Owns: the decision per layer (environment switches, the layouts' exact
 * check) and the kernels' plans in td__cl (bw, cf, cbd, wf, wbd).
 * Never does: the oneDNN primitives of the same layers (cpu_plan.c plans
 * them, and they stay the fallback), run anything per step.
 */
#include <errno.h>
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
#include "base/log.h"

/* Dense channels-last: [rows][C] with C contiguous (nhwc, or nc). */
int td__nhwc_dense(const dnnl_memory_desc_t *md)
{
    const dnnl_blocking_desc_t *b = &md->format_desc.blocking;
    if (md->format_kind != dnnl_blocked || b->inner_nblks != 0 ||
        b->strides[1] != 1 || md->data_type != dnnl_bf16)
        return 0;
    return (size_t)dnnl_memory_desc_get_size(md) ==
           (size_t)md->dims[0] * (size_t)md->dims[1] *
               (md->ndims == 4 ? (size_t)(md->dims[2] * md->dims[3]) : 1) *
               sizeof(uint16_t);
}

/* Dense nChw<blk>c of type dt: [n][c / blk][h][w][blk], c a multiple of
 * blk (no padded channels), nothing else blocked. */
static int td__blocked_dense(const dnnl_memory_desc_t *md, int blk,
                             dnnl_data_type_t dt)
{
    const dnnl_blocking_desc_t *b = &md->format_desc.blocking;
    if (md->format_kind != dnnl_blocked || md->ndims != 4 ||
        md->data_type != dt || md->offset0 != 0 ||
        b->inner_nblks != 1 || b->inner_blks[0] != blk ||
        b->inner_idxs[0] != 1 || md->dims[1] % blk != 0)
        return 0;
    for (int i = 0; i < 4; i++)
        if (md->padded_dims[i] != md->dims[i])
            return 0;
    dnnl_dim_t hw = md->dims[2] * md->dims[3];
    return b->strides[3] == blk && b->strides[2] == blk * md->dims[3] &&
           b->strides[1] == blk * hw && b->strides[0] == md->dims[1] * hw;
}

/* Dense nChw16c bf16 (oneDNN's aBcd16b). */
int td__blocked16_dense(const dnnl_memory_desc_t *md)
{
    return td__blocked_dense(md, 16, dnnl_bf16);
}

int td__blocked_f32_dense(const dnnl_memory_desc_t *md)
{
    return td__blocked_dense(md, 8, dnnl_f32)    ? 8
           : td__blocked_dense(md, 16, dnnl_f32) ? 16
                                                 : 0;
}

const char *td__bn_layout(const td__cpu *be)
{
    return be->atag == dnnl_nChw16c  ? "nChw16c"
           : be->atag == dnnl_nChw8c ? "nChw8c"
                                     : "nhwc";
}

int td__bn_dense(const td__cpu *be, const dnnl_memory_desc_t *md)
{
    return be->atag == dnnl_nChw16c  ? td__blocked16_dense(md)
           : be->atag == dnnl_nChw8c ? td__blocked_f32_dense(md) == 8
                                     : td__nhwc_dense(md);
}

size_t td__bn_hw(const td__cpu *be, int L)
{
    const td_layer *l = &be->base.model->layers[L];
    return be->atag == dnnl_nChw16c || be->atag == dnnl_nChw8c
               ? (size_t)l->out.h * (size_t)l->out.w
               : 0;
}

/* cpu_wino.c for an fp32 3x3 stride-1 convolution in nChw8c (oneDNN's
 * AVX2 layout) with at least TD__WINO_MIN input and output channels:
 * its forward and backward weights, and its backward data where it has
 * one.  TD_CPU_WINO=0 in the environment turns it off, TD_CPU_WINO=<c>
 * sets the channel minimum, anything else keeps the default
 * (docs/compute.md has the measurements). */
#define TD__WINO_MIN 16

/* Convolution L of ic input channels is one cpu_wino.c computes and the
 * rule (TD_CPU_WINO) gives it, its layouts aside. */
static int td__wino_rule(const td__cpu *be, int L, int ic)
{
    const td_layer *l = &be->base.model->layers[L];
    const char *e = getenv("TD_CPU_WINO");
    char *end = NULL;
    long min = e ? strtol(e, &end, 10) : TD__WINO_MIN;
    if (!e || end == e || *end) /* unset or not a number ("default") */
        min = TD__WINO_MIN;
    return min > 0 && ic >= min && l->channels >= min && !td__is_bf16(be) &&
           td_wino_ok(l->kernel, l->stride, l->pad, ic, l->channels);
}

/* Batch norm L's only consumer is an add taking it as first input (a
 * residual block's end). */
static int td__bn_feeds_add(const td_model *m, int L)
{
    if (m->layers[L].consumers != 1)
        return 0;
    for (int A = L + 1; A < m->nlayers; A++)
        if (m->layers[A].kind == TD_L_ADD && m->layers[A].in[0] == L)
            return 1;
    return 0;
}

/* Batch norm L can run a hand-written kernel: cpu_bn.c's in bf16
 * channels-last (the AMX plan) or blocked nChw16c (the AVX512_BF16 plan),
 * channels a multiple of 16 on an AVX-512 CPU; cpu_bn8.c's in fp32 nChw8c
 * (the AVX2 plan), channels a multiple of 8, where it feeds an add (which
 * then fuses into it, with the relu after).  Batch norm and relu alone
 * stay oneDNN's: its backward takes 0.85 of cpu_bn8.c's time per call,
 * its forward 1.2 times (bench_bn8), and whole steps with every batch
 * norm on cpu_bn8.c came out even (docs/compute.md); TD_CPU_BN8=all
 * takes every one.  Training statistics (not frozen), and
 * in a blocked plan not on the model's input (planar). */
int td__bn_can_fast(const td__cpu *be, int L)
{
    const td_layer *l = &be->base.model->layers[L];
    if (l->kind != TD_L_BN || td__bn_eval(be, L) ||
        (l->in[0] == 0 && be->atag != dnnl_nhwc))
        return 0;
    if (td__is_bf16(be))
        return (be->atag == dnnl_nhwc || be->atag == dnnl_nChw16c) &&
               td_bn_nhwc_ok(l->out.c);
    const char *e = getenv("TD_CPU_BN8");
    return be->atag == dnnl_nChw8c && td_bn8_ok(l->out.c) &&
           ((e && strcmp(e, "all") == 0) ||
            td__bn_feeds_add(be->base.model, L) || td__bn_folds(be, L));
}

/* The relu reading batch norm L alone, or -1. */
static int td__bn_relu(const td_model *m, int L)
{
    if (m->layers[L].consumers != 1)
        return -1;
    for (int R = L + 1; R < m->nlayers; R++)
        if (m->layers[R].in[0] == L || m->layers[R].in[1] == L)
            return m->layers[R].kind == TD_L_RELU && m->layers[R].in[0] == L
                       ? R
                       : -1;
    return -1;
}

/* Layer A reads relu R as a fold's reader: planned (planned: a
 * cpu_wino.c convolution, a cpu_pool.c pooling in nChw8c) or, before
 * planning, by the rules that give those. */
static int td__fold_reader(const td__cpu *be, int A, int R, int planned)
{
    const td_model *m = be->base.model;
    const td_layer *a = &m->layers[A];
    if (a->in[0] != R || a->in[1] == R)
        return 0;
    if (a->kind == TD_L_CONV)
        return planned ? be->cl[A].wf != NULL
                       : td__wino_rule(be, A, m->layers[R].out.c);
    if (a->kind != TD_L_MAXPOOL)
        return 0;
    if (planned)
        return be->cl[A].pmask != NULL && be->cl[A].pblk == 8;
    const td_shape *in = &m->layers[R].out;
    return td__pool_blk() >= 8 &&
           td_maxpool_ok(a->kernel, a->stride, a->pad, in->h, in->w, 8);
}

/* Every reader of batch norm L's relu is a fold's reader. */
static int td__fold_readers(const td__cpu *be, int L, int planned)
{
    const td_model *m = be->base.model;
    int R = td__bn_relu(m, L), n = 0;
    if (R < 0)
        return 0;
    for (int A = R + 1; A < m->nlayers; A++) {
        if (m->layers[A].in[0] != R && m->layers[A].in[1] != R)
            continue;
        if (!td__fold_reader(be, A, R, planned))
            return 0;
        n++;
    }
    return n > 0;
}

int td__bn_folds(const td__cpu *be, int L)
{
    const td_layer *l = &be->base.model->layers[L];
    const char *e = getenv("TD_CPU_FOLD");
    if ((e && strcmp(e, "0") == 0) || l->kind != TD_L_BN ||
        td__is_bf16(be) || be->atag != dnnl_nChw8c || td__bn_eval(be, L) ||
        l->in[0] == 0 || !td_bn8_ok(l->out.c))
        return 0;
    return td__fold_readers(be, L, 0);
}

int td__fold_plan(td__cpu *be)
{
    const td_model *m = be->base.model;
    for (int L = 1; L < m->nlayers; L++) {
        td__cl *c = &be->cl[L];
        const td_layer *l = &m->layers[L];
        if (!c->fast || !c->fused || c->add || td__is_bf16(be) ||
            !td__bn_folds(be, L) || !td__fold_readers(be, L, 1))
            continue;
        if (!(c->fscale = calloc((size_t)l->out.c, sizeof(float)))) {
            snprintf(be->base.err, sizeof be->base.err, "%s: out of memory",
                     l->name);
            return -ENOMEM;
        }
        c->fold = 1;
        /* its statistics from the Winograd forward writing its input,
         * where nothing else reads that (TD_CPU_WSTATS=0: its own pass) */
        int P = l->in[0];
        const char *ws = getenv("TD_CPU_WSTATS");
        if (be->cl[P].root == P && be->cl[P].wf && m->layers[P].consumers == 1 &&
            !(ws && strcmp(ws, "0") == 0)) {
            if (td_wino_want_moments(be->cl[P].wf)) {
                snprintf(be->base.err, sizeof be->base.err, "%s: out of "
                         "memory", m->layers[P].name);
                return -ENOMEM;
            }
            c->wsrc = P;
        }
        td_debug("cpu backend: %s batch norm + relu folded into the layers "
                 "reading it (their input transforms apply it; its output "
                 "is not written)%s",
                 l->name, c->wsrc ? "; its statistics from the Winograd "
                 "outputs" : "");
    }
    return 0;
}

const char *td__choice_forced(const td__cpu *be, int L, int bit)
{
    if (bit == TD__CH_BNDNN) {
        const char *b = getenv("TD_CPU_BN");
        return b && strcmp(b, "onednn") == 0 ? "1" : NULL;
    }
    const char *e = getenv(bit == TD__CH_BWDW ? "TD_CPU_BWDW"
                           : be->base.model->layers[L].stride == 2
                               ? "TD_CPU_BWDD2"
                               : "TD_CPU_BWDD");
    return e && (strcmp(e, "1") == 0 || strcmp(e, "0") == 0) ? e : NULL;
}

int td__choice(const td__cpu *be, int L, int bit, int dflt)
{
    const char *e = td__choice_forced(be, L, bit);
    if (e)
        return e[0] == '1';
    return be->choice_set ? (be->choice[L] & bit) != 0 : dflt;
}

int td__choice_taken(const td__cpu *be, int L)
{
    const td__cl *c = &be->cl[L];
    if (be->base.model->layers[L].kind == TD_L_BN)
        return td__bn_can_fast(be, L) && !c->fast ? TD__CH_BNDNN : 0;
    if (be->base.model->layers[L].kind != TD_L_CONV || c->root != L)
        return 0;
    return (c->bw ? TD__CH_BWDW : 0) | (c->bdf || c->bd2 ? TD__CH_BWDD : 0);
}

/* cpu_bwdw.c's backward weights for a bf16 convolution it computes, with
 * x and dy channels-last (AMX plan) or nChw16c (AVX512_BF16 plan), unless
 * the choice (td__choice, TD_CPU_BWDW) says oneDNN's.  The fixed rule:
 * every such convolution in the channels-last plan, stride-2 ones only in
 * the blocked plan (on an Intel proxy oneDNN's jit_bf16 stride-1 kernels
 * were up to 2x faster, its stride-2 ones at times took a second per call
 * under load; docs/compute.md). */
int td__plan_bwdw(td__cpu *be, int L, const dnnl_memory_desc_t *src, int ic)
{
    const td_layer *l = &be->base.model->layers[L];
    td__cl *c = &be->cl[L];
    td_bwdw_layout ly;
    if (!td__is_bf16(be) ||
        !td_bwdw_ok(l->kernel, l->stride, l->pad, ic, l->channels))
        return 0;
    if (td__nhwc_dense(src) && td__nhwc_dense(&c->md) &&
        td__choice(be, L, TD__CH_BWDW, 1))
        ly = TD_BWDW_NHWC;
    else if (td__blocked16_dense(src) && td__blocked16_dense(&c->md) &&
             td__choice(be, L, TD__CH_BWDW, l->stride == 2))
        ly = TD_BWDW_NCHW16C;
    else
        return 0;
    c->bw = td_bwdw_create_layout(be->batch, (int)src->dims[2],
                                  (int)src->dims[3], ic, l->channels,
                                  l->kernel, l->stride, l->pad, be->threads,
                                  ly);
    if (!c->bw) {
        snprintf(be->base.err, sizeof be->base.err, "%s: out of memory for "
                 "the backward weights' buffers", l->name);
        return -ENOMEM;
    }
    td_debug("cpu backend: %s conv bwd weights: cpu_bwdw (%s) %s", l->name,
             strcmp(td_bwdw_path(c->bw), "amx") == 0 ? "AMX tiles"
                                                     : "AVX512_BF16",
             ly == TD_BWDW_NHWC ? "nhwc" : "nChw16c");
    return 0;
}

/* cpu_cfwd.c is off unless TD_CPU_CFWD=1: in whole resnet20 steps it
 * measured 5-10 % slower than oneDNN's brgconv (docs/compute.md). */
static int td__cfwd_on(void)
{
    const char *env = getenv("TD_CPU_CFWD");
    return env && strcmp(env, "1") == 0;
}

/* cpu_cfwd.c's forward for a bf16 channels-last convolution it computes
 * (AMX; with TD_CPU_CFWD=1). */
int td__plan_cfwd(td__cpu *be, int L, const dnnl_memory_desc_t *src, int ic)
{
    const td_layer *l = &be->base.model->layers[L];
    td__cl *c = &be->cl[L];
    if (!td__cfwd_on() || !td__is_bf16(be) ||
        !td_cfwd_ok(l->kernel, l->stride, l->pad, ic, l->channels) ||
        !td__nhwc_dense(src) || !td__nhwc_dense(&c->md))
        return 0;
    c->cf = td_cfwd_create(be->batch, l->out.h, l->out.w, ic, l->channels,
                           l->kernel, be->threads);
    if (!c->cf) {
        snprintf(be->base.err, sizeof be->base.err, "%s: out of memory for "
                 "the forward's buffers", l->name);
        return -ENOMEM;
    }
    td_cfwd_weights(c->cf, td__mem_ptr(c->w));
    td_debug("cpu backend: %s conv fwd: cpu_cfwd (AMX tiles)", l->name);
    return 0;
}

/* The backward data of a stride-1 "same" convolution on cpu_cfwd.c: dx =
 * conv(dy, flipped weights), channels swapped (with TD_CPU_CFWD=1, unless
 * TD_CPU_CFWD_BWD=0). */
int td__plan_cbd(td__cpu *be, int L, const dnnl_memory_desc_t *src, int ic)
{
    const td_layer *l = &be->base.model->layers[L];
    td__cl *c = &be->cl[L];
    const char *e2 = getenv("TD_CPU_CFWD_BWD");
    if (!td__cfwd_on() || (e2 && strcmp(e2, "0") == 0) ||
        c->no_dsrc || !td__is_bf16(be) ||
        !td_cfwd_ok(l->kernel, l->stride, l->pad, l->channels, ic) ||
        !td__nhwc_dense(src) || !td__nhwc_dense(&c->md))
        return 0;
    c->cbd = td_cfwd_create(be->batch, l->out.h, l->out.w, l->channels, ic,
                            l->kernel, be->threads);
    if (!c->cbd) {
        snprintf(be->base.err, sizeof be->base.err, "%s: out of memory for "
                 "the backward data's buffers", l->name);
        return -ENOMEM;
    }
    td_cfwd_weights_flip(c->cbd, td__mem_ptr(c->w));
    td_debug("cpu backend: %s conv bwd data: cpu_cfwd (AMX tiles, flipped "
             "weights)", l->name);
    return 0;
}

int td__plan_wino(td__cpu *be, int L, const dnnl_memory_desc_t *src, int ic)
{
    const td_layer *l = &be->base.model->layers[L];
    td__cl *c = &be->cl[L];
    if (!td__wino_rule(be, L, ic) || td__blocked_f32_dense(src) != 8 ||
        td__blocked_f32_dense(&c->md) != 8)
        return 0;
    c->wf = td_wino_create(be->batch, l->out.h, l->out.w, ic, l->channels,
                           be->threads);
    if (!c->wf || (!c->no_dsrc &&
                   !(c->wbd = td_wino_create_fwd(be->batch, l->out.h,
                                                 l->out.w, l->channels, ic,
                                                 be->threads)))) {
        snprintf(be->base.err, sizeof be->base.err, "%s: out of memory for "
                 "the Winograd convolution's buffers", l->name);
        return -ENOMEM;
    }
    td_wino_weights(c->wf, td__mem_ptr(c->w));
    if (c->wbd)
        td_wino_weights_flip(c->wbd, td__mem_ptr(c->w));
    /* their working buffers: in the shared scratchpad (td__plan_scratch) */
    for (int i = 0; i < 2; i++) {
        td_wino *p = i ? c->wbd : c->wf;
        size_t b = p ? td_wino_work_bytes(p) : 0;
        be->scratch_bytes = b > be->scratch_bytes ? b : be->scratch_bytes;
    }
    td_debug("cpu backend: %s conv fwd, bwd weights%s: cpu_wino (%s, AVX2)",
             l->name, c->wbd ? ", bwd data" : "", td_wino_tiles(c->wf));
    return 0;
}

/* Dense planar NCHW fp32 (oneDNN's abcd): the model's input in an fp32
 * plan. */
static int td__nchw_dense(const dnnl_memory_desc_t *md)
{
    const dnnl_blocking_desc_t *b = &md->format_desc.blocking;
    if (md->format_kind != dnnl_blocked || md->ndims != 4 ||
        md->data_type != dnnl_f32 || md->offset0 != 0 ||
        b->inner_nblks != 0)
        return 0;
    dnnl_dim_t hw = md->dims[2] * md->dims[3];
    return b->strides[3] == 1 && b->strides[2] == md->dims[3] &&
           b->strides[1] == hw && b->strides[0] == md->dims[1] * hw;
}

/* cpu_sbw.c for the backward weights of an fp32 convolution from a
 * planar input into nChw8c, where oneDNN 2.6 has only its reference
 * kernel (cpu_plan.c asks: fmnist-cnn's conv1, one input channel, on
 * AVX2), unless TD_CPU_SBW=0.  resnet's 3-channel stem gets oneDNN's
 * jit:avx2 kernel, which took 1.2 ms a step against cpu_sbw.c's 1.5-2.2
 * (docs/compute.md). */
int td__plan_sbw(td__cpu *be, int L, const dnnl_memory_desc_t *src, int ic)
{
    const td_layer *l = &be->base.model->layers[L];
    td__cl *c = &be->cl[L];
    const char *e = getenv("TD_CPU_SBW");
    if ((e && strcmp(e, "0") == 0) || td__is_bf16(be) ||
        !td_sbw_ok(l->kernel, l->stride, l->pad, ic, l->channels) ||
        !td__nchw_dense(src) || td__blocked_f32_dense(&c->md) != 8)
        return 0;
    c->sbw = td_sbw_create(be->batch, ic, (int)src->dims[2],
                           (int)src->dims[3], l->channels, l->out.h,
                           l->out.w, l->kernel, l->stride, l->pad,
                           be->threads);
    if (!c->sbw) {
        snprintf(be->base.err, sizeof be->base.err, "%s: out of memory for "
                 "the backward weights' buffers", l->name);
        return -ENOMEM;
    }
    td_debug("cpu backend: %s conv bwd weights: cpu_sbw (AVX2, planar "
             "input, nChw8c)", l->name);
    return 0;
}

void td__kplan_free(td__cl *c)
{
    td_bwdw_destroy(c->bw);
    td_cfwd_destroy(c->cf);
    td_cfwd_destroy(c->cbd);
    td_wino_destroy(c->wf);
    td_wino_destroy(c->wbd);
    td_sbw_destroy(c->sbw);
    c->sbw = NULL;
    free(c->pmask);
    c->pmask = NULL;
    c->bw = NULL;
    c->cf = c->cbd = NULL;
    c->wf = c->wbd = NULL;
    free(c->fscale);
    c->fscale = NULL;
    c->fold = c->wsrc = 0;
}
