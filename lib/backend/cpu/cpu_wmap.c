/* cpu_wmap.c - the CPU backend's weight layout maps.
 *
 * Owns: for every convolution or dense weight whose primitive layout
 * differs from the canonical one (oihw / oi: the flat parameter arrays),
 * the offset of each canonical element in the primitive's layout (the
 * forward's weights w_f, the backward data's w_bd, the backward weights'
 * gradient dw_bw), found once at plan time by oneDNN's own reorder of an
 * index-coded fp32 tensor (so the map is oneDNN's layout, blocked, padded
 * or vnni-interleaved alike; for a convolution whose backward data is a
 * forward convolution, cpu_bwdd.c, the map of w_bd goes through the flip
 * and channel swap of its weights); and the two per-step passes through
 * them:
 * the weights after an update into w_f and w_bd (bf16: rounded to nearest
 * even, td_bf16_from_f32, as oneDNN's reorder rounds), the weight
 * gradients after the backward into the flat gradient array.  Each pass is
 * one parallel region over all layers instead of one oneDNN reorder per
 * weight and direction (resnet20: 44 + 22 calls per step, each a fork and
 * join of the thread team).  TD_CPU_WMAP=0 keeps oneDNN's reorders (the
 * test's reference).
 * Never does: choose the layouts (cpu_plan.c), run the update or decide
 * when the weights are stale (cpu_step.c).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_int.h"
#include "base/log.h"
#include "bf16.h"

dnnl_status_t td__reorder_now(td__cpu *be, const dnnl_memory_desc_t *from,
                              void *src, const dnnl_memory_desc_t *to,
                              void *dst)
{
    dnnl_memory_t ms = NULL, md = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t r = NULL;
    dnnl_status_t st = dnnl_memory_create(&ms, from, be->eng, src);
    if (st == dnnl_success)
        st = dnnl_memory_create(&md, to, be->eng, dst);
    if (st == dnnl_success)
        st = dnnl_reorder_primitive_desc_create(&pd, from, be->eng, to,
                                                be->eng, NULL);
    if (st == dnnl_success)
        st = dnnl_primitive_create(&r, pd);
    if (st == dnnl_success)
        st = dnnl_primitive_execute(r, be->strm, 2, TD__ARGS(
            {DNNL_ARG_FROM, ms}, {DNNL_ARG_TO, md}));
    if (st == dnnl_success)
        st = dnnl_stream_wait(be->strm);
    if (r)
        dnnl_primitive_destroy(r);
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    if (md)
        dnnl_memory_destroy(md);
    if (ms)
        dnnl_memory_destroy(ms);
    return st;
}

/* oneDNN's reorder from plain (fp32, values i + 1) to prim's layout in
 * fp32 into dst (zeroed first: padding stays 0). */
static dnnl_status_t td__index_reorder(td__cpu *be,
                                       const dnnl_memory_desc_t *plain,
                                       const dnnl_memory_desc_t *prim,
                                       float *src, float *dst, size_t psize)
{
    memset(dst, 0, psize * sizeof *dst);
    return td__reorder_now(be, plain, src, prim, dst);
}

/* The map of mem's layout from the canonical weight w, or NULL when it
 * cannot be built (the caller keeps oneDNN's reorder): not a plain blocked
 * layout, or too many elements for an fp32-coded index. */
static uint32_t *td__map(td__cpu *be, dnnl_memory_t w, dnnl_memory_t mem)
{
    const dnnl_memory_desc_t *plain, *want;
    dnnl_memory_get_memory_desc(w, &plain);
    dnnl_memory_get_memory_desc(mem, &want);
    dnnl_memory_desc_t prim = *want;
    if (prim.format_kind != dnnl_blocked || prim.extra.flags != 0)
        return NULL;
    prim.data_type = dnnl_f32; /* strides count elements, not bytes */
    size_t n = dnnl_memory_desc_get_size(plain) / sizeof(float);
    size_t psize = dnnl_memory_desc_get_size(&prim) / sizeof(float);
    if (n == 0 || n >= (1u << 24) || psize > UINT32_MAX)
        return NULL;
    float *src = malloc(n * sizeof *src), *dst = malloc(psize * sizeof *dst);
    uint32_t *map = malloc(n * sizeof *map);
    size_t found = 0;
    if (src && dst && map) {
        for (size_t i = 0; i < n; i++)
            src[i] = (float)(i + 1);
        memset(map, 0xff, n * sizeof *map);
        if (td__index_reorder(be, plain, &prim, src, dst, psize) ==
            dnnl_success)
            for (size_t p = 0; p < psize; p++) {
                size_t i = (size_t)dst[p];
                if (dst[p] == 0.0f)
                    continue; /* padding */
                if (i < 1 || i > n || map[i - 1] != UINT32_MAX ||
                    (float)i != dst[p])
                    break;
                map[i - 1] = (uint32_t)p;
                found++;
            }
    }
    free(src);
    free(dst);
    if (found != n) {
        free(map);
        return NULL;
    }
    /* the padding of the primitive's copy is never written again */
    memset(td__mem_ptr(mem), 0, dnnl_memory_desc_get_size(want));
    return map;
}

/* A forward-as-backward-data layer's (bdf) map: canonical element i goes
 * where the map of w_bd from the plain flipped tensor (w_flip) puts
 * flipped element td__bwdd_flip_index(i); the per-step pass is then the
 * same as for any w_bd. */
static uint32_t *td__flip_map(td__cpu *be, int L)
{
    td__cl *c = &be->cl[L];
    uint32_t *flipped = td__map(be, c->w_flip, c->w_bd);
    uint32_t *map = flipped ? malloc(c->wn * sizeof *map) : NULL;
    if (map)
        for (size_t i = 0; i < c->wn; i++)
            map[i] = flipped[td__bwdd_flip_index(be, L, i)];
    free(flipped);
    return map;
}

int td__wmap_plan(td__cpu *be, int L)
{
    td__cl *c = &be->cl[L];
    const char *env = getenv("TD_CPU_WMAP");
    if (env && strcmp(env, "0") == 0)
        return 0;
    const dnnl_memory_desc_t *plain;
    dnnl_memory_get_memory_desc(c->w, &plain);
    c->wn = dnnl_memory_desc_get_size(plain) / sizeof(float);
    if (c->w_f && !(c->m_f = td__map(be, c->w, c->w_f)))
        return 0;
    if (c->w_bd && !(c->m_bd = c->bdf ? td__flip_map(be, L)
                                      : td__map(be, c->w, c->w_bd)))
        return 0;
    if (c->dw_bw)
        c->m_dw = td__map(be, c->dw, c->dw_bw);
    td_debug("cpu backend: %s weights through layout maps:%s%s%s",
             be->base.model->layers[L].name, c->m_f ? " forward" : "",
             c->m_bd ? (c->bdf ? " flipped backward-data"
                               : " backward-data") : "",
             c->m_dw ? " gradient" : "");
    return 0;
}

void td__wmap_free(td__cl *c)
{
    free(c->m_f);
    free(c->m_bd);
    free(c->m_dw);
    c->m_f = c->m_bd = c->m_dw = NULL;
}

/* w_f and w_bd of one layer from its fp32 master, elements [lo, hi). */
static void td__put(const td__cl *c, int bf16, size_t lo, size_t hi)
{
    const float *w = td__mem_ptr(c->w);
    void *f = c->m_f ? td__mem_ptr(c->w_f) : NULL;
    void *bd = c->m_bd ? td__mem_ptr(c->w_bd) : NULL;
    for (size_t i = lo; i < hi; i++) {
        if (bf16) {
            td_bf16 v = td_bf16_from_f32(w[i]);
            if (f)
                ((td_bf16 *)f)[c->m_f[i]] = v;
            if (bd)
                ((td_bf16 *)bd)[c->m_bd[i]] = v;
        } else {
            if (f)
                ((float *)f)[c->m_f[i]] = w[i];
            if (bd)
                ((float *)bd)[c->m_bd[i]] = w[i];
        }
    }
}

void td__wmap_weights(td__cpu *be)
{
    int nl = be->base.model->nlayers, bf16 = td__is_bf16(be);
#pragma omp parallel
    for (int L = 1; L < nl; L++) {
        const td__cl *c = &be->cl[L];
        if (!c->m_f && !c->m_bd)
            continue;
        long n = (long)c->wn;
#pragma omp for schedule(static) nowait
        for (long b = 0; b < n; b += 1024)
            td__put(c, bf16, (size_t)b,
                    (size_t)(b + 1024 < n ? b + 1024 : n));
    }
}

void td__wmap_grads(td__cpu *be)
{
    int nl = be->base.model->nlayers;
#pragma omp parallel
    for (int L = 1; L < nl; L++) {
        const td__cl *c = &be->cl[L];
        if (!c->m_dw)
            continue;
        const float *src = td__mem_ptr(c->dw_bw);
        float *g = td__mem_ptr(c->dw);
        const uint32_t *m = c->m_dw;
        long n = (long)c->wn;
#pragma omp for schedule(static) nowait
        for (long i = 0; i < n; i++)
            g[i] = src[m[i]];
    }
}
