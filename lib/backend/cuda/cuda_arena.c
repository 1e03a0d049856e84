/* cuda_arena.c - the CUDA backend's device arena: every buffer a step
 * needs (parameters, gradients, optimizer slots, running statistics,
 * batch buffers, the step's scratch, the cuDNN and cuBLAS workspaces, and
 * the activation region: values, gradients and masks placed by the memory
 * plan, cuda_plan.c) laid out once from the model and the batch, sized
 * with headroom for what the CUDA libraries allocate at first use,
 * checked against cudaMemGetInfo and allocated in one cudaMalloc (see
 * cuda.c for the backend's lifecycle).
 *
 * Owns: the layout (td__carve, run twice: once to size, once to place),
 * the check that it is exactly what the plan bills (memplan.h: total
 * less headroom), and the out-of-memory message that names the sizes.
 * Never does: allocate after create, or touch a stream.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "backend/cuda/cuda_int.h"
#include "base/error.h"
#include "base/log.h"

typedef struct td__cursor {
    char *base; /* NULL while sizing */
    size_t off;
} td__cursor;

static void *td__take(td__cursor *c, size_t bytes)
{
    void *p = c->base ? c->base + c->off : NULL;
    c->off += (bytes + 255) & ~(size_t)255;
    return p;
}

size_t td__cuda_state_count(const td_model *m)
{
    size_t n = 0;
    for (int s = 0; s < m->nstate; s++)
        n += m->state[s].count;
    return n;
}

size_t td__cuda_param_off(const td_model *m, int p)
{
    size_t off = 0;
    for (int i = 0; i < p; i++)
        off += m->params[i].count;
    return off;
}

/* Which layers own buffers (flatten aliases its input) and their sizes. */
void td__cuda_roots(td__cuda *be)
{
    const td_model *m = be->base.model;
    for (int L = 0; L < m->nlayers; L++) {
        const td_layer *l = &m->layers[L];
        td__gl *g = &be->gl[L];
        g->root = l->kind == TD_L_FLATTEN ? be->gl[l->in[0]].root : L;
        g->nelem = (size_t)be->batch * l->out.c * l->out.h * l->out.w;
    }
    /* 16-bit: the batch's channels padded for the stem (memplan.h) */
    be->stem_c = td_memplan_stem_channels(m, (int)be->esz);
}

/* Floats of scratch the bn_eval backward needs: 2 per (sample, channel)
 * of the widest batch norm kept in inference mode; 0 without any. */
static size_t td__bn_part_count(const td__cuda *be)
{
    const td_model *m = be->base.model;
    size_t most = 0;
    for (int L = 0; L < m->nlayers; L++) {
        size_t k = 2 * (size_t)be->batch * (size_t)m->layers[L].out.c;
        if (td__cuda_bn_eval(be, L) && k > most)
            most = k;
    }
    return most;
}

/* Lays everything out from c->base (sizing pass when it is NULL). */
static void td__carve(td__cuda *be, td__cursor *c)
{
    const td_model *m = be->base.model;
    const td_shape in = m->layers[0].out;
    size_t pc = m->param_count, per = (size_t)in.c * in.h * in.w;
    size_t f = sizeof(float), e = be->esz; /* activations: the compute type */
    size_t logits = (size_t)be->batch * (size_t)m->classes;
    int low = td__cuda_lowp(be);
    /* 16-bit: the padded stem filters after the copy (memplan.h) */
    size_t lpc = pc + td_memplan_stem_extra(m, (int)e), tail = pc;
    be->params = td__take(c, pc * f);
    be->grads = td__take(c, pc * f);
    be->slots = td__take(c, be->nslots * pc * f);
    be->state = td__take(c, be->nstate * f);
    be->shadow = td__take(c, be->nsnap * f);
    be->lowp = low ? td__take(c, lpc * e) : NULL;
    be->lgrad = low ? td__take(c, lpc * e) : NULL;
    be->xz = low ? td__take(c, logits * f) : NULL;
    be->xg = low ? td__take(c, logits * f) : NULL;
    be->dwt = td__take(c, td_memplan_dense_scratch(m, (int)e) * f);
    for (int i = 0; i < TD__NBUF; i++) {
        be->pixels[i] = td__take(c, per * (size_t)be->batch);
        be->labels[i] = td__take(c, sizeof(int32_t) * (size_t)be->batch);
    }
    be->row_loss = td__take(c, sizeof(double) * (size_t)be->batch);
    be->row_ok = td__take(c, sizeof(int) * (size_t)be->batch);
    be->bn_part = td__take(c, td__bn_part_count(be) * f);
    be->acc = td__take(c, sizeof(td_dev_stats));
    be->ls = td__take(c, sizeof(td_ls_dev));
    be->scal = td__take(c, td__scal_bytes(be));
    be->scal_lr = be->scal ? (float *)(be->scal + 1) : NULL;
    be->work = td__take(c, be->work_bytes);
    be->blas_ws = td__take(c, TD__BLAS_WS);
    /* values, gradients, masks and the batch norms' saved statistics */
    td__cuda_place_acts(be, td__take(c, be->plan.activations));
    for (int L = 0; L < m->nlayers; L++) {
        const td_layer *l = &m->layers[L];
        td__gl *g = &be->gl[L];
        if (c->base && l->param0 >= 0) {
            size_t off = td__cuda_param_off(m, l->param0);
            g->w = be->params + off;
            g->dw = be->grads + off;
            size_t at = off;
            if (low && l->kind == TD_L_CONV && l->in[0] == 0 &&
                be->stem_c != in.c) { /* a padded stem filter (layout.h) */
                at = tail;
                tail += (size_t)l->channels * (size_t)l->kernel *
                        (size_t)l->kernel * (size_t)be->stem_c;
            }
            g->wl = low ? (char *)be->lowp + at * e : (void *)g->w;
            g->dwl = low ? (char *)be->lgrad + at * e : (void *)g->dw;
            if (l->kind == TD_L_BN || l->bias) {
                off += m->params[l->param0].count;
                g->b = be->params + off;
                g->db = be->grads + off;
                g->bl = low ? (char *)be->lowp + off * e : (void *)g->b;
                g->dbl = low ? (char *)be->lgrad + off * e : (void *)g->db;
            }
        }
        if (c->base && l->kind == TD_L_BN) {
            size_t off = 0;
            for (int s = 0; s < l->state0; s++)
                off += m->state[s].count;
            g->rmean = be->state + off;
            g->rvar = be->state + off + (size_t)l->out.c;
        }
    }
}

/* Device memory left free beside the arena (issue 14 finding 3): with
 * lazy module loading (the default since CUDA 12.2) our kernels' modules,
 * cuBLAS and cuDNN's runtime-compiled engines take device memory at their
 * first use, outside the arena.  1/32 of the GPU, at least 512 MiB. */
#define TD__HEADROOM_MIN ((size_t)512 << 20)

static size_t td__headroom(size_t total)
{
    size_t h = total / 32;
    return h > TD__HEADROOM_MIN ? h : TD__HEADROOM_MIN;
}

static int td__no_room(td__cuda *be, size_t free_b, size_t total_b)
{
    snprintf(be->base.err, sizeof be->base.err, "cuda:%d: the model needs "
             "a device arena of %.1f MiB at batch %d and %.1f MiB of "
             "headroom; %.1f MiB of %.1f MiB are free (try a smaller "
             "batch_size)", be->dev, be->arena_bytes / 1048576.0, be->batch,
             be->headroom / 1048576.0, free_b / 1048576.0,
             total_b / 1048576.0);
    be->arena = NULL;
    return TD_E_DEVICE;
}

int td__cuda_arena(td__cuda *be)
{
    td__cursor c = {NULL, 0};
    size_t free_b = 0, total_b = 0;
    TD__TRY(td__cuda_plan(be));
    td__carve(be, &c);
    be->arena_bytes = c.off;
    if (be->arena_bytes != be->plan.total - be->plan.headroom) {
        snprintf(be->base.err, sizeof be->base.err, "cuda:%d: the arena "
                 "takes %zu bytes, the memory plan bills %zu (memplan.c "
                 "and cuda_arena.c disagree)", be->dev, be->arena_bytes,
                 be->plan.total - be->plan.headroom);
        return TD_E_DEVICE;
    }
    TD__CU(be, cudaMemGetInfo(&free_b, &total_b));
    be->free_before = free_b;
    be->headroom = td__headroom(total_b);
    if (free_b < be->headroom || free_b - be->headroom < be->arena_bytes)
        return td__no_room(be, free_b, total_b);
    cudaError_t e = cudaMalloc((void **)&be->arena, be->arena_bytes);
    if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        cudaMemGetInfo(&free_b, &total_b);
        return td__no_room(be, free_b, total_b);
    }
    TD__CU(be, e);
    c.base = be->arena;
    c.off = 0;
    td__carve(be, &c);
    td_info("cuda:%d: device arena %.1f MiB (batch %d, cuDNN workspace "
            "%.1f MiB, activations %.1f MiB %s)", be->dev,
            be->arena_bytes / 1048576.0, be->batch,
            be->work_bytes / 1048576.0, be->plan.activations / 1048576.0,
            be->base.cfg.mem_layout == TD_MEM_PER_LAYER
                ? "one buffer per layer" : "placed by the memory plan");
    return 0;
}

