/* cpu_split.c - a convolution's backward weights split by batch halves.
 *
 * Owns: the optional "split" plan of a convolution's backward-weights
 * primitive in bf16 channels-last with two threads.  oneDNN 2.6's AMX
 * backward weights (jit:avx512_core_amx_bf16) splits one call across the
 * OpenMP team with barriers and scales poorly from one thread to two; the
 * split plan instead runs two single-threaded primitives, each on one half
 * of the batch (in nhwc the halves are contiguous, so they are views), at
 * the same time on the two threads, into two fp32 gradient buffers, and
 * adds the second into the first (the weight gradient is a sum over the
 * batch: the same sum in another order, fp32).  Off unless the
 * environment sets TD_CPU_SPLIT_BW=1.  Alternated runs on a Sapphire
 * Rapids (docs/compute.md): resnet20 bf16 samples/s split / whole-batch
 * 1.09x median over 24 pairs at load average 2-6 (under load the
 * whole-batch AMX kernel's barriers sometimes collapse a step), but 0.93x
 * over 8 pairs at load average 1.1-1.3; fmnist-cnn about 1.0x either way.
 * Timing both ways at plan time was tried and picked worse than either
 * (5 calls on a shared machine are noise).
 * Never does: plan the layer's other primitives (cpu_plan.c) or decide
 * anything about other layer kinds.
 */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_int.h"
#include "base/error.h"
#include "base/log.h"

struct td__split {
    dnnl_primitive_desc_t hint, pd; /* half-batch forward, backward w */
    dnnl_primitive_t prim;          /* created with one OpenMP thread */
    dnnl_stream_t strm[2];
    dnnl_memory_t src[2], ddst[2];  /* views of the halves (handles set
                                       per call) */
    dnnl_memory_t dw1, db1;         /* the second half's gradients */
    dnnl_memory_t sp[2];            /* a scratchpad per half */
    void *scratch[2];
    size_t half_src, half_dst;      /* bytes of one half */
    size_t nw, nb;                  /* floats in the weight, bias grads */
};

/* Off unless the environment sets TD_CPU_SPLIT_BW=1. */
static int td__split_on(void)
{
    const char *e = getenv("TD_CPU_SPLIT_BW");
    return e && atoi(e) == 1;
}

void td__split_free(td__split *s)
{
    if (!s)
        return;
    if (s->prim)
        dnnl_primitive_destroy(s->prim);
    if (s->pd)
        dnnl_primitive_desc_destroy(s->pd);
    if (s->hint)
        dnnl_primitive_desc_destroy(s->hint);
    dnnl_memory_t mems[] = {s->src[0], s->src[1], s->ddst[0], s->ddst[1],
                            s->dw1, s->db1, s->sp[0], s->sp[1]};
    for (size_t i = 0; i < sizeof mems / sizeof mems[0]; i++)
        if (mems[i])
            dnnl_memory_destroy(mems[i]);
    for (int k = 0; k < 2; k++) {
        if (s->strm[k])
            dnnl_stream_destroy(s->strm[k]);
        free(s->scratch[k]);
    }
    free(s);
}

/* md with its batch (dims[0]) halved; channels-last keeps its strides. */
static dnnl_memory_desc_t td__half(const dnnl_memory_desc_t *md)
{
    dnnl_memory_desc_t h = *md;
    h.dims[0] /= 2;
    h.padded_dims[0] /= 2;
    return h;
}

static int td__is_nhwc(const dnnl_memory_desc_t *md)
{
    dnnl_memory_desc_t n;
    dnnl_memory_desc_init_by_tag(&n, 4, md->dims, md->data_type, dnnl_nhwc);
    return dnnl_memory_desc_equal(&n, md);
}

static int td__split_build(td__cpu *be, td__split *s, const td_layer *l,
                           const dnnl_memory_desc_t *src,
                           const dnnl_memory_desc_t *dst,
                           const dnnl_memory_desc_t *dw_full, int bias)
{
    dnnl_memory_desc_t hs = td__half(src), hd = td__half(dst), wany, wgrad,
                       bmd;
    dnnl_dims_t wd = {l->channels, src->dims[1], l->kernel, l->kernel};
    dnnl_dims_t bd = {l->channels};
    dnnl_dims_t st = {l->stride, l->stride}, pad = {l->pad, l->pad};
    dnnl_convolution_desc_t d;
    dnnl_memory_desc_init_by_tag(&wany, 4, wd, be->adt, dnnl_format_tag_any);
    dnnl_memory_desc_init_by_tag(&wgrad, 4, wd, dnnl_f32,
                                 dnnl_format_tag_any);
    dnnl_memory_desc_init_by_tag(&bmd, 1, bd, dnnl_f32, dnnl_a);
    const dnnl_memory_desc_t *b = bias ? &bmd : NULL;
    TD__DNNL(be, dnnl_convolution_forward_desc_init(&d, dnnl_forward_training,
             dnnl_convolution_direct, &hs, &wany, b, &hd, st, pad, pad),
             "split convolution", l->name);
    TD__DNNL(be, dnnl_primitive_desc_create(&s->hint, &d, NULL, be->eng,
                                            NULL), "split hint", l->name);
    TD__DNNL(be, dnnl_convolution_backward_weights_desc_init(&d,
             dnnl_convolution_direct, &hs, &wgrad, b, &hd, st, pad, pad),
             "split backward weights", l->name);
    TD__DNNL(be, dnnl_primitive_desc_create(&s->pd, &d, be->attr, be->eng,
                                            s->hint), "split backward "
             "weights", l->name);
    const dnnl_memory_desc_t *w = dnnl_primitive_desc_query_md(s->pd,
        dnnl_query_diff_weights_md, 0);
    const char *impl = NULL;
    dnnl_primitive_desc_query(s->pd, dnnl_query_impl_info_str, 0, &impl);
    if (!impl || strncmp(impl, "ref", 3) == 0 ||
        !dnnl_memory_desc_equal(w, dw_full))
        return TD_E_NOTSUP; /* not worth it / gradients not addable */
    TD__DNNL(be, dnnl_primitive_create(&s->prim, s->pd), "split backward "
             "weights", l->name);
    s->half_src = dnnl_memory_desc_get_size(&hs);
    s->half_dst = dnnl_memory_desc_get_size(&hd);
    s->nw = dnnl_memory_desc_get_size(w) / sizeof(float);
    s->nb = bias ? (size_t)l->channels : 0;
    const dnnl_memory_desc_t *spmd = dnnl_primitive_desc_query_md(s->pd,
        dnnl_query_scratchpad_md, 0);
    size_t spb = (dnnl_memory_desc_get_size(spmd) + 4095) / 4096 * 4096;
    for (int k = 0; k < 2; k++) {
        TD__DNNL(be, dnnl_stream_create(&s->strm[k], be->eng,
                                        dnnl_stream_default_flags),
                 "split stream", l->name);
        TD__DNNL(be, dnnl_memory_create(&s->src[k], &hs, be->eng,
                                        DNNL_MEMORY_NONE), "split", l->name);
        TD__DNNL(be, dnnl_memory_create(&s->ddst[k], &hd, be->eng,
                                        DNNL_MEMORY_NONE), "split", l->name);
        if (!spb)
            continue;
        if (!(s->scratch[k] = aligned_alloc(4096, spb)))
            return -ENOMEM;
        TD__DNNL(be, dnnl_memory_create(&s->sp[k], spmd, be->eng,
                                        s->scratch[k]), "split", l->name);
    }
    TD__DNNL(be, dnnl_memory_create(&s->dw1, w, be->eng,
                                    DNNL_MEMORY_ALLOCATE), "split", l->name);
    if (bias)
        TD__DNNL(be, dnnl_memory_create(&s->db1, &bmd, be->eng,
                                        DNNL_MEMORY_ALLOCATE), "split",
                 l->name);
    return 0;
}

int td__split_plan(td__cpu *be, int L)
{
    const td_layer *l = &be->base.model->layers[L];
    td__cl *c = &be->cl[L];
    const dnnl_memory_desc_t *src = dnnl_primitive_desc_query_md(c->pd[3],
        dnnl_query_src_md, 0);
    const dnnl_memory_desc_t *dst = dnnl_primitive_desc_query_md(c->pd[3],
        dnnl_query_diff_dst_md, 0);
    const dnnl_memory_desc_t *dw = dnnl_primitive_desc_query_md(c->pd[3],
        dnnl_query_diff_weights_md, 0);
    if (!td__split_on() || be->threads != 2 || be->batch % 2 ||
        !td__is_bf16(be) || !td__is_nhwc(src) || !td__is_nhwc(dst))
        return 0;
    td__split *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    /* one thread while creating: the primitive's work split is fixed at
     * creation and it runs inside a two-thread parallel region */
    omp_set_num_threads(1);
    int rc = td__split_build(be, s, l, src, dst, dw, l->bias);
    omp_set_num_threads(be->threads);
    if (rc) { /* no split for this layer: the whole-batch call runs */
        td__split_free(s);
        if (rc == -ENOMEM)
            return rc;
        td_debug("cpu backend: %s conv bwd weights: no split (%s)", l->name,
                 be->base.err[0] ? be->base.err : "not addable");
        be->base.err[0] = '\0';
        return 0;
    }
    c->split = s;
    td_debug("cpu backend: %s conv bwd weights: split by batch halves",
             l->name);
    return 0;
}

static char *td__hptr(dnnl_memory_t m)
{
    void *p = NULL;
    dnnl_memory_get_data_handle(m, &p);
    return p;
}

int td__split_run(td__cpu *be, int L, dnnl_memory_t x, dnnl_memory_t dy,
                  dnnl_memory_t dw, dnnl_memory_t db)
{
    td__split *s = be->cl[L].split;
    const char *name = be->base.model->layers[L].name;
    char *xs = td__hptr(x), *ds = td__hptr(dy);
    dnnl_memory_t dws[2] = {dw, s->dw1}, dbs[2] = {db, s->db1};
    dnnl_status_t st[2] = {dnnl_success, dnnl_success};
    for (int k = 0; k < 2; k++) {
        TD__DNNL(be, dnnl_memory_set_data_handle(s->src[k],
                 xs + k * s->half_src), "split", name);
        TD__DNNL(be, dnnl_memory_set_data_handle(s->ddst[k],
                 ds + k * s->half_dst), "split", name);
    }
#pragma omp parallel num_threads(2)
    {
        /* one half per thread; both in turn if the team has one */
        int nt = omp_get_num_threads();
        for (int k = omp_get_thread_num(); k < 2; k += nt) {
            int n = 3;
            dnnl_exec_arg_t a[5] = {{DNNL_ARG_SRC, s->src[k]},
                                    {DNNL_ARG_DIFF_DST, s->ddst[k]},
                                    {DNNL_ARG_DIFF_WEIGHTS, dws[k]}};
            if (dbs[k])
                a[n++] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_BIAS, dbs[k]};
            if (s->sp[k])
                a[n++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, s->sp[k]};
            st[k] = dnnl_primitive_execute(s->prim, s->strm[k], n, a);
            if (st[k] == dnnl_success)
                st[k] = dnnl_stream_wait(s->strm[k]);
        }
    }
    for (int k = 0; k < 2; k++)
        TD__DNNL(be, st[k], "split backward weights", name);
    float *w0 = (float *)td__hptr(dw), *w1 = (float *)td__hptr(s->dw1);
    for (size_t i = 0; i < s->nw; i++)
        w0[i] += w1[i];
    if (s->nb) {
        float *b0 = (float *)td__hptr(db), *b1 = (float *)td__hptr(s->db1);
        for (size_t i = 0; i < s->nb; i++)
            b0[i] += b1[i];
    }
    return 0;
}
