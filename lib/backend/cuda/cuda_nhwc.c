/* cuda_nhwc.c - the CUDA backend's 16-bit layout (docs/cuda.md "NHWC").
 *
 * Owns: with a 16-bit compute type (bf16, fp16), everything that follows
 * from activations being NHWC and convolution filters KRSC
 * (kernels/layout.h) while the fp32 master weights, their gradients and
 * snapshots stay in the canonical KCRS / [out][c,h,w] orders of model.h:
 *   - where the update kernel writes each 16-bit weight (td__cuda_lowp_map,
 *     kernels/layout.h): the filters straight in KRSC, the padded stem's
 *     after the copy, so a step writes the copy once;
 *   - the whole copy's filters written in KRSC from the masters where the
 *     copy is rebuilt (create, load, a precision change on resume: after
 *     td__k_narrow wrote it in canonical order), the padded stem filters
 *     with their zero pad channels, which no update touches after;
 *   - cuDNN's KRSC 16-bit weight gradients widened into KCRS fp32;
 *   - dense layers over a flattened NHWC tensor: their 16-bit weights
 *     permuted to [out][h,w,c] the same way, so the GEMMs read the NHWC
 *     input as it is, and their fp32 weight gradient (in that order)
 *     permuted back (through be->dwt);
 *   - 16-bit value and gradient tensors converted to NCHW floats for
 *     read_tensor, and a layer's 16-bit weights read as stored
 *     (td_backend_cuda_read_lowp, for tests).
 * Everything runs on the compute stream from device memory (the update's
 * map is a kernel argument by value, the same every step), so a step
 * captured as a CUDA graph replays it, and a step skipped by loss scaling
 * (the update does nothing) leaves the copy of unchanged masters as it
 * is.
 * Never does: anything in fp32 (all calls are no-ops there), allocate on
 * the device, or change cuda_step.c's dense functions.
 */
#include <stdlib.h>

#include "backend/cuda/cuda_int.h"
#include "base/error.h"
#include "bf16.h"
#include "fp16.h"
#include "layout.h"

/* Channels layer R's buffer stores (the batch: padded). */
static int td__stored_c(const td__cuda *be, int R)
{
    return R == 0 ? be->stem_c : be->base.model->layers[R].out.c;
}

/* The spatial shape a dense layer L reads (through flattens). */
static const td_shape *td__dense_in(const td__cuda *be, int L)
{
    const td_model *m = be->base.model;
    int R = m->layers[L].in[0];
    while (m->layers[R].kind == TD_L_FLATTEN)
        R = m->layers[R].in[0];
    return &m->layers[R].out;
}

/* Layer L's weights when the 16-bit copy stores them permuted (a
 * convolution's filter, a dense layer's over an NHWC input): 1 with *s
 * filled (master elements, place in the copy, channels), else 0. */
static int td__lowp_seg(const td__cuda *be, int L, td_lowp_seg *s)
{
    const td_model *m = be->base.model;
    const td_layer *l = &m->layers[L];
    const td__gl *g = &be->gl[L];
    if (l->kind == TD_L_CONV) {
        s->c = m->layers[l->in[0]].out.c;
        s->cp = td__stored_c(be, be->gl[l->in[0]].root);
        s->rs = (size_t)l->kernel * l->kernel;
    } else if (l->kind == TD_L_DENSE &&
               td_memplan_dense_nhwc(m, L, (int)be->esz)) {
        const td_shape *in = td__dense_in(be, L);
        s->c = s->cp = in->c;
        s->rs = (size_t)in->h * in->w;
    } else {
        return 0;
    }
    s->lo = td__cuda_param_off(m, l->param0);
    s->end = s->lo + (size_t)l->channels * (size_t)s->c * s->rs;
    s->dst = (size_t)((const char *)g->wl - (const char *)be->lowp) /
             be->esz;
    return 1;
}

size_t td__cuda_lowp_map(const td__cuda *be, size_t at, size_t end,
                         td_lowp_map *map)
{
    const td_model *m = be->base.model;
    map->at = at;
    map->n = 0;
    if (!td__cuda_nhwc(be))
        return end - at;
    /* layers own consecutive parameters in layer order (model.h), so the
     * segments come sorted; a run of the update never cuts one */
    for (int L = 1; L < m->nlayers; L++) {
        td_lowp_seg s;
        if (!td__lowp_seg(be, L, &s) || s.lo < at || s.end > end)
            continue;
        if (map->n == TD_LOWP_SEGS)
            return s.lo - at; /* the next launch starts at this one */
        map->s[map->n++] = s;
    }
    return end - at;
}

int td__cuda_krsc_weights(td__cuda *be)
{
    const td_model *m = be->base.model;
    if (!td__cuda_nhwc(be))
        return 0;
    for (int L = 1; L < m->nlayers; L++) {
        td_lowp_seg s;
        if (!td__lowp_seg(be, L, &s))
            continue;
        TD__CU(be, td__k_to_krsc(be->compute, be->gl[L].w, be->gl[L].wl,
                                 be->dt, m->layers[L].channels, s.c, s.cp,
                                 s.rs));
    }
    return 0;
}

int td__cuda_conv_grad_kcrs(td__cuda *be, int L)
{
    const td_model *m = be->base.model;
    const td_layer *l = &m->layers[L];
    td__gl *g = &be->gl[L];
    int c = m->layers[l->in[0]].out.c;
    int cp = td__stored_c(be, be->gl[l->in[0]].root);
    TD__CU(be, td__k_from_krsc(be->compute, g->dwl, be->dt, g->dw,
                               l->channels, c, cp,
                               (size_t)l->kernel * l->kernel));
    if (l->bias)
        TD__CU(be, td__k_widen(be->compute, g->dbl, be->dt, g->db,
                               (size_t)l->channels));
    return 0;
}

int td__cuda_dense_bwd_nhwc(td__cuda *be, int L, void *dx, int accumulate,
                            int (*bwd)(td__cuda *, int, void *, int))
{
    const td_layer *l = &be->base.model->layers[L];
    const td_shape *s = td__dense_in(be, L);
    td__gl *g = &be->gl[L];
    float *dw = g->dw;
    g->dw = be->dwt; /* the GEMM writes [out][h,w,c] there */
    int rc = bwd(be, L, dx, accumulate);
    g->dw = dw;
    TD__TRY(rc);
    TD__CU(be, td__k_from_krsc(be->compute, be->dwt, TD_KDT_F32, dw,
                               l->channels, s->c, s->c,
                               (size_t)s->h * s->w));
    return 0;
}

int td__cuda_read_act(td__cuda *be, int L, const void *src, float *host,
                      size_t n)
{
    const td_model *m = be->base.model;
    int R = be->gl[L].root;
    const td_shape *s = &m->layers[R].out;
    int cp = td__stored_c(be, R);
    size_t hw = (size_t)s->h * s->w;
    size_t stored = (size_t)be->batch * hw * (size_t)cp;
    if (n != (size_t)be->batch * hw * (size_t)s->c) {
        snprintf(be->base.err, sizeof be->base.err, "read_tensor: layer %s "
                 "has %zu elements, %zu asked", m->layers[L].name,
                 (size_t)be->batch * hw * (size_t)s->c, n);
        return -EINVAL;
    }
    uint16_t *t = malloc(stored * sizeof *t + 1);
    if (!t)
        return -ENOMEM;
    cudaError_t e = cudaMemcpyAsync(t, src, stored * sizeof *t,
                                    cudaMemcpyDeviceToHost, be->compute);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(be->compute);
    for (size_t o = 0; e == cudaSuccess && o < n; o++) {
        uint16_t v = t[td_nchw_to_nhwc(o, s->c, cp, hw)];
        host[o] = be->dt == TD_BF16 ? td_bf16_to_f32(v) : td_f16_to_f32(v);
    }
    free(t);
    TD__CU(be, e);
    return 0;
}

long td_backend_cuda_read_lowp(td_backend *b, int layer, uint16_t *out,
                               size_t cap)
{
    if (!td_backend_cuda_plan(b) || layer < 1 || layer >= b->model->nlayers)
        return -EINVAL; /* not a CUDA backend (or no such layer) */
    td__cuda *be = (td__cuda *)b;
    const td_layer *l = &b->model->layers[layer];
    if (!td__cuda_lowp(be) || (l->kind != TD_L_CONV && l->kind != TD_L_DENSE))
        return -EINVAL;
    td_lowp_seg s;
    size_t n = td__lowp_seg(be, layer, &s)
                   ? (size_t)l->channels * s.rs * (size_t)s.cp
                   : b->model->params[l->param0].count;
    if (n > cap)
        return -ENOSPC;
    TD__CU(be, cudaMemcpyAsync(out, be->gl[layer].wl, n * sizeof *out,
                               cudaMemcpyDeviceToHost, be->compute));
    TD__CU(be, cudaStreamSynchronize(be->compute));
    return (long)n;
}
