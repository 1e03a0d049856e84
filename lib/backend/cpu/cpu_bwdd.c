/* cpu_bwdd.c - a convolution's backward data as a forward convolution.
 *
 * Owns: which convolutions' backward data runs as a forward convolution
 * (td__bwdd_ok), the index of the flip and channel swap of their weights,
 * and the fp32 flip when no weight map writes the primitive's copy.  For
 * a stride-1 convolution with a k x k kernel (k odd), padding (k - 1) / 2
 * on every side and one group,
 *     dx = conv_fwd(dy, W'),  W'[ic][oc][kh][kw] = W[oc][ic][k-1-kh][k-1-kw]
 * with the same padding and no bias: each dx element sums the same
 * products dy * W as the backward data does, in another order.  oneDNN
 * 2.6 on AMX runs that forward with its brgemm kernel
 * (brgconv:avx512_core_amx_bf16), faster than its backward-data kernel
 * (jit:avx512_core_amx_bf16) for the same shape (docs/compute.md).
 * The fixed rule: only in the bf16 channels-last plan (where that was
 * measured); a measured plan chooses per layer (cpu_tune.c);
 * TD_CPU_BWDD=0 in the environment keeps the backward-data primitive
 * everywhere, TD_CPU_BWDD=1 forces this path in every plan (A/B runs).
 * Never does: plan the primitive (cpu_plan.c), run it (cpu_step.c) or
 * write the bf16 weights through the maps (cpu_wmap.c).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_bwdd.h"
#include "backend/cpu/cpu_int.h"
#include "base/error.h"
#include "layout.h"

int td__bwdd_ok(const td__cpu *be, int L)
{
    const td_layer *l = &be->base.model->layers[L];
    int k = l->kernel;
    int shape = l->kind == TD_L_CONV && !be->cl[L].no_dsrc &&
                l->stride == 1 && k % 2 == 1 && l->pad == (k - 1) / 2;
    return shape && td__choice(be, L, TD__CH_BWDD,
                               td__is_bf16(be) && be->atag == dnnl_nhwc);
}

size_t td__bwdd_flip_index(const td__cpu *be, int L, size_t i)
{
    const td_model *m = be->base.model;
    const td_layer *l = &m->layers[L];
    return td_conv_flip_index(i, (size_t)l->channels,
                              (size_t)m->layers[l->in[0]].out.c,
                              (size_t)l->kernel);
}

static size_t td__wcount(const td__cpu *be, int L)
{
    const td_model *m = be->base.model;
    const td_layer *l = &m->layers[L];
    return (size_t)l->channels * (size_t)m->layers[l->in[0]].out.c *
           (size_t)l->kernel * (size_t)l->kernel;
}

void td__bwdd_flip(td__cpu *be)
{
    for (int L = 1; L < be->base.model->nlayers; L++) {
        const td__cl *c = &be->cl[L];
        if (!c->bdf || c->m_bd)
            continue;
        const float *w = td__mem_ptr(c->w);
        float *f = td__mem_ptr(c->w_flip);
        size_t n = td__wcount(be, L);
        for (size_t i = 0; i < n; i++)
            f[td__bwdd_flip_index(be, L, i)] = w[i];
    }
}

int td_cpu_bwdd_weights(td_backend *b, int layer, float *out, size_t n)
{
    td__cpu *be = td__be(b);
    if (layer < 1 || layer >= b->model->nlayers || !be->cl[layer].bdf)
        return -ENOENT;
    if (n != td__wcount(be, layer))
        return -EINVAL;
    const td__cl *c = &be->cl[layer];
    dnnl_memory_t src = c->w_bd ? c->w_bd : c->w_flip;
    const dnnl_memory_desc_t *have, *plain;
    dnnl_memory_get_memory_desc(src, &have);
    dnnl_memory_get_memory_desc(c->w_flip, &plain);
    dnnl_status_t st = td__reorder_now(be, have, td__mem_ptr(src), plain,
                                       out);
    if (st != dnnl_success)
        return td__cpu_fail(be, st, "flipped weights read back",
                            b->model->layers[layer].name);
    return 0;
}
