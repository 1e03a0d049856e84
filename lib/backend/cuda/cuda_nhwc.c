/* cuda_nhwc.c - the CUDA backend's 16-bit layout (docs/cuda.md "NHWC").
 *
 * Owns: with a 16-bit compute type (bf16, fp16), everything that follows
 * from activations being NHWC and convolution filters KRSC
 * (kernels/layout.h) while the fp32 master weights, their gradients and
 * snapshots stay in the canonical KCRS / [out][c,h,w] orders of model.h:
 *   - the 16-bit weight copy's convolution filters rewritten in KRSC from
 *     the masters after every update and rebuild (the update kernel
 *     writes the whole copy in canonical order first; this overwrites the
 *     filters' part), the padded stem filters with zero pad channels;
 *   - cuDNN's KRSC 16-bit weight gradients widened into KCRS fp32;
 *   - dense layers over a flattened NHWC tensor: their 16-bit weights
 *     permuted to [out][h,w,c] the same way, so the GEMMs read the NHWC
 *     input as it is, and their fp32 weight gradient (in that order)
 *     permuted back (through be->dwt);
 *   - 16-bit value and gradient tensors converted to NCHW floats for
 *     read_tensor.
 * Everything runs on the compute stream from device memory, so a step
 * captured as a CUDA graph replays it and a step skipped by loss scaling
 * (the update does nothing) rewrites the same copy from the same masters.
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

int td__cuda_krsc_weights(td__cuda *be)
{
    const td_model *m = be->base.model;
    if (!td__cuda_nhwc(be))
        return 0;
    for (int L = 1; L < m->nlayers; L++) {
        const td_layer *l = &m->layers[L];
        td__gl *g = &be->gl[L];
        if (l->kind == TD_L_CONV) {
            int c = m->layers[l->in[0]].out.c;
            int cp = td__stored_c(be, be->gl[l->in[0]].root);
            TD__CU(be, td__k_to_krsc(be->compute, g->w, g->wl, be->dt,
                                     l->channels, c, cp,
                                     (size_t)l->kernel * l->kernel));
        } else if (td_memplan_dense_nhwc(m, L, (int)be->esz)) {
            const td_shape *s = td__dense_in(be, L);
            TD__CU(be, td__k_to_krsc(be->compute, g->w, g->wl, be->dt,
                                     l->channels, s->c, s->c,
                                     (size_t)s->h * s->w));
        }
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
