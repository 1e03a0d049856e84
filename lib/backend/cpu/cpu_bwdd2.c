/* cpu_bwdd2.c - a stride-2 convolution's backward data as four stride-1
 * forward convolutions, one per parity of the input position.
 *
 * Owns: which layers take it (chosen: td__choice, TD_CPU_BWDD2=1 in the
 * environment or a measured plan; bf16, dy and dx dense in the plan's
 * layout, every phase non-empty), the four
 * phases' geometry, weights, primitives and outputs, and the interleave
 * of their outputs into dx.  For a convolution of stride 2, kernel K and
 * padding P, input position p = 2i + a (a = 0 or 1) receives
 *     dx[p] = sum over k with (a + P - k) even of dy[i + (a + P - k)/2] w[k]
 * per axis: a correlation of dy with the taps of that parity, i.e. a
 * stride-1 forward convolution of dy (channels swapped) with a kernel of
 * ceil(K/2) or floor(K/2) taps and its own padding.  The four phases
 * (row parity x column parity) together do exactly the backward data's
 * products, each element's in another order (3x3: kernels 1x1, 1x2, 2x1,
 * 2x2).  oneDNN 2.6's AVX512_BF16 backward-data kernel for stride 2
 * measured 2.2x slower per call than for stride 1 at the same input size
 * on an AMD EPYC Zen 5 (docs/compute.md); off in the fixed rules, taken
 * where a measured plan (cpu_tune.c) finds it faster.
 * Never does: plan the layer's other primitives (cpu_plan.c), the
 * gradient bookkeeping around it (cpu_step.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_int.h"
#include "base/error.h"
#include "base/log.h"

typedef struct td__ph {
    int kh, kw;                 /* the phase's kernel */
    int oh, ow;                 /* its output: dx rows p = 2i + a, ... */
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dnnl_memory_t wplain;       /* fp32 [ic][oc][kh][kw] */
    dnnl_memory_t wprim;        /* the primitive's layout (bf16) */
    dnnl_primitive_t rw;        /* wplain -> wprim */
    dnnl_memory_t y;            /* the phase's dx elements */
    dnnl_memory_t sp;           /* its view of the shared scratchpad */
    size_t *tap;                /* wplain element -> master weight index */
} td__ph;

struct td__bd2 {
    td__ph ph[4];               /* [a * 2 + b]: row parity a, column b */
    int blocked;                /* nChw16c, else nhwc */
};

static int td__fdiv(int a, int b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

/* One axis of parity a: K taps, padding P, dy of length n_in, dx of
 * length n_out.  The taps are k = a + P - 2d for d in [dmin, dmin + *kk):
 * tap t is k = a + P - 2 (dmin + t).  *pl, *pr: the forward convolution's
 * padding; *n: its output length.  0 when the phase is empty or would need
 * a negative padding. */
static int td__axis(int K, int P, int a, int n_in, int n_out, int *kk,
                    int *pl, int *pr, int *n, int *dmin)
{
    int lo = -td__fdiv(-(a + P - K + 1), 2), hi = td__fdiv(a + P, 2);
    *kk = hi - lo + 1;
    *dmin = lo;
    *pl = -lo;
    *n = (n_out - a + 1) / 2;
    *pr = *n - 1 + *kk - n_in - *pl;
    return *kk > 0 && *n > 0 && *pl >= 0 && *pr >= 0;
}

static int td__ok(const td__cpu *be, int L, const dnnl_memory_desc_t *src)
{
    const td_layer *l = &be->base.model->layers[L];
    const td__cl *c = &be->cl[L];
    if (l->kind != TD_L_CONV || c->no_dsrc || l->stride != 2 ||
        !td__is_bf16(be) ||
        !td__choice(be, L, TD__CH_BWDD, 0))
        return 0;
    int blk = td__blocked16_dense(src) && td__blocked16_dense(&c->md);
    int nhwc = td__nhwc_dense(src) && td__nhwc_dense(&c->md);
    return blk || nhwc;
}

/* Phase (a, b)'s primitive; 1 when oneDNN has only a reference kernel
 * for it that the backend refuses (td__pd; the layer then keeps the
 * backward-data primitive). */
static int td__plan_phase(td__cpu *be, int L, const dnnl_memory_desc_t *src,
                          struct td__bd2 *d, int a, int b)
{
    const td_model *m = be->base.model;
    const td_layer *l = &m->layers[L];
    td__cl *c = &be->cl[L];
    td__ph *ph = &d->ph[a * 2 + b];
    int kh, kw, plh, plw, prh, prw, dh, dw, OC = l->channels;
    int IC = (int)src->dims[1], H = (int)src->dims[2], W = (int)src->dims[3];
    if (!td__axis(l->kernel, l->pad, a, l->out.h, H, &kh, &plh, &prh,
                  &ph->oh, &dh) ||
        !td__axis(l->kernel, l->pad, b, l->out.w, W, &kw, &plw, &prw,
                  &ph->ow, &dw))
        return 1;
    ph->kh = kh;
    ph->kw = kw;
    dnnl_dim_t wd[4] = {IC, OC, kh, kw};
    dnnl_dim_t yd[4] = {src->dims[0], IC, ph->oh, ph->ow};
    dnnl_dims_t st = {1, 1}, pl = {plh, plw}, pr = {prh, prw};
    dnnl_memory_desc_t wany, wplain, ymd;
    dnnl_convolution_desc_t cd;
    td__mdt(&wany, 4, wd, dnnl_format_tag_any, be->adt);
    td__mdt(&wplain, 4, wd, dnnl_oihw, dnnl_f32);
    td__mdt(&ymd, 4, yd, d->blocked ? dnnl_nChw16c : dnnl_nhwc, be->adt);
    char what[64];
    snprintf(what, sizeof what, "conv bwd data phase %d%d (%dx%d)", a, b, kh,
             kw);
    TD__DNNL(be, dnnl_convolution_forward_desc_init(&cd,
             dnnl_forward_training, dnnl_convolution_direct, &c->md, &wany,
             NULL, &ymd, st, pl, pr), what, l->name);
    int rc = td__pd(be, &cd, NULL, &ph->pd, &ph->prim, what, l->name);
    if (rc == TD_E_NOTSUP) { /* a reference kernel: not here */
        be->base.err[0] = 0;
        return 1;
    }
    if (rc ||
        (rc = td__mem(be, &wplain, NULL, &ph->wplain, l->name)) ||
        (rc = td__mem(be, &ymd, NULL, &ph->y, l->name)) ||
        (rc = td__wlayout(be, td__q(ph->pd, dnnl_query_weights_md, 0),
                          ph->wplain, 1, &ph->wprim, &ph->rw, l->name)))
        return rc;
    size_t n = (size_t)IC * OC * kh * kw;
    if (!(ph->tap = malloc(n * sizeof *ph->tap)))
        return -ENOMEM;
    /* W'[ic][oc][t][u] = W[oc][ic][a + P - 2 (dh + t)][b + P - 2 (dw + u)] */
    size_t K = (size_t)l->kernel, i = 0;
    for (int ic = 0; ic < IC; ic++)
        for (int oc = 0; oc < OC; oc++)
            for (int t = 0; t < kh; t++)
                for (int u = 0; u < kw; u++) {
                    size_t kr = (size_t)(a + l->pad - 2 * (dh + t));
                    size_t kc = (size_t)(b + l->pad - 2 * (dw + u));
                    ph->tap[i++] = (((size_t)oc * IC + ic) * K + kr) * K + kc;
                }
    return 0;
}

int td__bd2_plan(td__cpu *be, int L, const dnnl_memory_desc_t *src)
{
    td__cl *c = &be->cl[L];
    if (!td__ok(be, L, src))
        return 0;
    struct td__bd2 *d = calloc(1, sizeof *d);
    if (!d)
        return -ENOMEM;
    d->blocked = td__blocked16_dense(src);
    c->bd2 = d;
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++) {
            int rc = td__plan_phase(be, L, src, d, a, b);
            if (rc) { /* > 0: not here, the primitive plans instead */
                td__bd2_free(c);
                return rc < 0 ? rc : 0;
            }
        }
    td_debug("cpu backend: %s conv bwd data as four phases",
             be->base.model->layers[L].name);
    return 0;
}

void td__bd2_free(td__cl *c)
{
    struct td__bd2 *d = c->bd2;
    if (!d)
        return;
    for (int i = 0; i < 4; i++) {
        td__ph *ph = &d->ph[i];
        dnnl_memory_t mems[] = {ph->wplain, ph->wprim, ph->y, ph->sp};
        for (size_t k = 0; k < sizeof mems / sizeof mems[0]; k++)
            if (mems[k])
                dnnl_memory_destroy(mems[k]);
        if (ph->prim)
            dnnl_primitive_destroy(ph->prim);
        if (ph->rw)
            dnnl_primitive_destroy(ph->rw);
        if (ph->pd)
            dnnl_primitive_desc_destroy(ph->pd);
        free(ph->tap);
    }
    free(d);
    c->bd2 = NULL;
}

int td__bd2_scratch(td__cpu *be, td__cl *c, const char *layer)
{
    int rc = 0;
    for (int i = 0; c->bd2 && i < 4 && rc == 0; i++)
        rc = td__scratch_view(be, c->bd2->ph[i].pd, &c->bd2->ph[i].sp,
                              layer);
    return rc;
}

int td__bd2_weights(td__cpu *be)
{
    for (int L = 1; L < be->base.model->nlayers; L++) {
        td__cl *c = &be->cl[L];
        if (!c->bd2)
            continue;
        const float *w = td__mem_ptr(c->w);
        for (int i = 0; i < 4; i++) {
            td__ph *ph = &c->bd2->ph[i];
            float *p = td__mem_ptr(ph->wplain);
            const dnnl_memory_desc_t *md;
            dnnl_memory_get_memory_desc(ph->wplain, &md);
            size_t n = dnnl_memory_desc_get_size(md) / sizeof(float);
            for (size_t e = 0; e < n; e++)
                p[e] = w[ph->tap[e]];
            if (ph->rw)
                TD__RUN(be, ph->rw, "conv bwd data phase weights",
                        {DNNL_ARG_FROM, ph->wplain},
                        {DNNL_ARG_TO, ph->wprim});
        }
    }
    return 0;
}

/* Phase (a, b)'s output into dx: each (image, [channel block,] row,
 * column) a run of `run` bf16 values, 16 (nChw16c) or C (nhwc). */
static void td__interleave(const struct td__bd2 *d, int a, int b,
                           const uint16_t *y, uint16_t *dx, size_t outer,
                           size_t H, size_t W, size_t run)
{
    const td__ph *ph = &d->ph[a * 2 + b];
    size_t oh = (size_t)ph->oh, ow = (size_t)ph->ow;
    long rows = (long)(outer * oh);
#pragma omp parallel for schedule(static)
    for (long r = 0; r < rows; r++) {
        size_t o = (size_t)r / oh, i = (size_t)r % oh;
        const uint16_t *src = y + (o * oh + i) * ow * run;
        uint16_t *dst = dx + (o * H + 2 * i + (size_t)a) * W * run;
        for (size_t j = 0; j < ow; j++)
            memcpy(dst + (2 * j + (size_t)b) * run, src + j * run,
                   run * sizeof *dst);
    }
}

int td__bd2_run(td__cpu *be, int L, dnnl_memory_t t)
{
    const td_layer *l = &be->base.model->layers[L];
    td__cl *c = &be->cl[L];
    struct td__bd2 *d = c->bd2;
    const dnnl_memory_desc_t *md;
    dnnl_memory_get_memory_desc(t, &md);
    size_t N = (size_t)md->dims[0], C = (size_t)md->dims[1];
    size_t H = (size_t)md->dims[2], W = (size_t)md->dims[3];
    for (int i = 0; i < 4; i++) {
        td__ph *ph = &d->ph[i];
        TD__RUN(be, ph->prim, l->name, {DNNL_ARG_SCRATCHPAD, ph->sp},
                {DNNL_ARG_SRC, c->dy},
                {DNNL_ARG_WEIGHTS, ph->wprim ? ph->wprim : ph->wplain},
                {DNNL_ARG_DST, ph->y});
        td__interleave(d, i / 2, i % 2, td__mem_ptr(ph->y), td__mem_ptr(t),
                       d->blocked ? N * (C / 16) : N, H, W,
                       d->blocked ? 16 : C);
    }
    return 0;
}
