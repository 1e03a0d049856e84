/* cuda_plan.c - the CUDA backend's activation region, from the memory plan.
 *
 * Owns: the plan of the region (memplan.h's td_memplan_build with the
 * backend's batch, element size, optimizer slots and real cuDNN
 * workspace; placement by liveness with ReLU in place, or one buffer per
 * layer when cfg.mem_layout is TD_MEM_PER_LAYER), every layer's y, dy and
 * dropout mask pointed at region + its buffer's offset, the batch norms'
 * saved statistics at the region's end (as the plan bills them), fused
 * batch norms' reserve spaces where the plan placed them, the
 * number of summands each gradient receives in a backward pass, and which
 * values and gradients a step leaves in memory (read_tensor refuses the
 * others: under the plan a buffer is reused after its last read).
 * Never does: allocate (cuda_arena.c carves the region out of the arena),
 * or touch a stream.
 *
 * Sharing is safe because the step's order is the plan's clock
 * (cuda_step.c): layer L's forward at L, the loss at N, layer L's backward
 * at 2N - L; a gradient's first summand is written by its last reader's
 * backward, the first to run, which is where the plan starts its
 * lifetime; evaluation runs the forward times only, so it reads nothing
 * the training step's plan lets another buffer overwrite first.
 */
#include <stdio.h>
#include <stdlib.h>

#include "backend/cuda/cuda_int.h"
#include "base/error.h"

/* Channels of the widest batch norm kept in inference mode (bn_eval). */
static int td__bn_eval_channels(const td__cuda *be)
{
    const td_model *m = be->base.model;
    int most = 0;
    for (int L = 0; L < m->nlayers; L++)
        if (td__cuda_bn_eval(be, L) && m->layers[L].out.c > most)
            most = m->layers[L].out.c;
    return most;
}

/* Does layer M's backward write a gradient into its input i?  Every layer
 * does, but a convolution or dense layer reading the batch itself. */
static int td__writes_dx(const td__cuda *be, int M, int i)
{
    const td_layer *l = &be->base.model->layers[M];
    if (l->kind == TD_L_FLATTEN)
        return 0; /* an alias: its reader writes the root's gradient */
    return !((l->kind == TD_L_CONV || l->kind == TD_L_DENSE) &&
             be->gl[l->in[i]].root == 0);
}

/* gl[].nsum: the summands td__target hands out for each root. */
static void td__summands(td__cuda *be)
{
    const td_model *m = be->base.model;
    for (int L = 0; L < m->nlayers; L++)
        be->gl[L].nsum = 0;
    be->gl[be->gl[m->nlayers - 1].root].nsum = 1; /* the loss */
    for (int M = 1; M < m->nlayers; M++)
        for (int i = 0; i < 2 && m->layers[M].in[i] >= 0; i++)
            if (td__writes_dx(be, M, i))
                be->gl[be->gl[m->layers[M].in[i]].root].nsum++;
}

/* When buffer b is written by a step (train 1, evaluation 0): the first
 * and last times on the step clock, or -1, -1 when it is not. */
static void td__writes(const td__cuda *be, const td_membuf *b, int train,
                       int *lo, int *hi)
{
    const td_model *m = be->base.model;
    const int N = m->nlayers, L = b->layer;
    *lo = *hi = -1;
    if (b->kind == TD_MB_Y) {
        *lo = *hi = L;
        return;
    }
    if (!train)
        return; /* evaluation writes values only */
    if (b->kind == TD_MB_MASK || b->kind == TD_MB_RESERVE) {
        *lo = *hi = b->first; /* written by the (fused) forward */
        return;
    }
    int first = 2 * N + 1, last = -1;
    if (be->gl[N - 1].root == L)
        first = last = N; /* the loss */
    for (int M = 1; M < N; M++)
        for (int i = 0; i < 2 && m->layers[M].in[i] >= 0; i++)
            if (be->gl[m->layers[M].in[i]].root == L &&
                td__writes_dx(be, M, i)) {
                first = 2 * N - M < first ? 2 * N - M : first;
                last = 2 * N - M > last ? 2 * N - M : last;
            }
    if (last < 0) /* nothing reads layer L: zeroed at its own backward */
        first = last = 2 * N - L;
    *lo = first, *hi = last;
}

/* Is buffer x still what the step wrote into it once the step is over:
 * written, and no buffer sharing a byte with it written after? */
static int td__kept(const td__cuda *be, int x, int train)
{
    const td_memplan *p = &be->plan;
    const td_membuf *a = &p->bufs[x];
    int lo, hi;
    td__writes(be, a, train, &lo, &hi);
    if (lo < 0)
        return 0;
    for (int z = 0; z < p->nbufs; z++) {
        const td_membuf *b = &p->bufs[z];
        int zlo, zhi;
        if (z == x || b->offset >= a->offset + a->bytes ||
            a->offset >= b->offset + b->bytes)
            continue;
        td__writes(be, b, train, &zlo, &zhi);
        if (zhi >= lo)
            return 0;
    }
    return 1;
}

static size_t td__round256(size_t n) { return (n + 255) & ~(size_t)255; }

int td__cuda_plan(td__cuda *be)
{
    const td_model *m = be->base.model;
    td_memplan_config c = {
        .batch = be->batch,
        .act_bytes = (int)td__cuda_esize(be->base.cfg.dtype),
        .optim_slots = (int)be->nslots,
        .reuse = be->base.cfg.mem_layout != TD_MEM_PER_LAYER,
        .nbuf = TD__NBUF,
        .workspace = be->work_bytes,
        .blas_workspace = TD__BLAS_WS,
        .bn_eval_channels = td__bn_eval_channels(be),
        /* the loss scaler and the step scalars, as cuda_arena.c takes
         * them (each rounded to 256 bytes) */
        .step_bytes = td__round256(sizeof(td_ls_dev)) +
                      td__round256(td__scal_bytes(be)),
        .headroom_min = 0, /* the backend's own: td__headroom, of the GPU */
    };
    /* the fused batch norms' reserve spaces (cuda_dnn.c sized them) */
    size_t *rsb = calloc((size_t)m->nlayers, sizeof *rsb);
    if (!rsb) {
        snprintf(be->base.err, sizeof be->base.err, "cuda:%d: out of host "
                 "memory planning the device's", be->dev);
        return -ENOMEM;
    }
    for (int L = 0; L < m->nlayers; L++)
        rsb[L] = be->gl[L].rsb;
    c.bn_reserve = rsb;
    char err[200];
    int rc = td_memplan_build(m, &c, &be->plan, err, sizeof err);
    free(rsb);
    if (rc) {
        snprintf(be->base.err, sizeof be->base.err, "cuda:%d: %s", be->dev,
                 err);
        return rc;
    }
    td__summands(be);
    for (int i = 0; i < be->plan.nbufs; i++) {
        const td_membuf *b = &be->plan.bufs[i];
        td__gl *g = &be->gl[b->layer];
        if (b->kind == TD_MB_Y) {
            g->kept_y[0] = (unsigned char)td__kept(be, i, 0);
            g->kept_y[1] = (unsigned char)td__kept(be, i, 1);
        } else if (b->kind == TD_MB_DY) {
            g->kept_dy = (unsigned char)td__kept(be, i, 1);
        }
    }
    return 0;
}

void td__cuda_place_acts(td__cuda *be, char *acts)
{
    const td_model *m = be->base.model;
    be->acts = acts;
    if (!acts)
        return;
    for (int i = 0; i < be->plan.nbufs; i++) {
        const td_membuf *b = &be->plan.bufs[i];
        td__gl *g = &be->gl[b->layer];
        char *p = acts + b->offset;
        if (b->kind == TD_MB_Y)
            g->y = (float *)(void *)p;
        else if (b->kind == TD_MB_DY)
            g->dy = (float *)(void *)p;
        else if (b->kind == TD_MB_RESERVE)
            g->reserve = p;
        else
            g->mask = (uint8_t *)p;
    }
    /* the saved statistics, as memplan.c bills them: per batch norm in
     * layer order, C means then C inverse deviations, 256-aligned */
    size_t off = be->plan.activations - be->plan.bn_saves;
    for (int L = 0; L < m->nlayers; L++) {
        if (m->layers[L].kind != TD_L_BN)
            continue;
        size_t C = (size_t)m->layers[L].out.c;
        be->gl[L].smean = (float *)(void *)(acts + off);
        be->gl[L].sinv = be->gl[L].smean + C;
        off += td__round256(2 * C * sizeof(float));
    }
}

int td__cuda_readable(td__cuda *be, int L, int grad)
{
    const td_model *m = be->base.model;
    const td__gl *g = &be->gl[be->gl[L].root];
    if (grad && !g->dy) {
        snprintf(be->base.err, sizeof be->base.err, "read_tensor: layer "
                 "%.40s has no gradient on the device (the batch's is "
                 "computed only for a layer other than a convolution or a "
                 "dense layer)", m->layers[L].name);
        return -EINVAL;
    }
    if (!grad && g->bnfuse && be->last_train == 1) {
        snprintf(be->base.err, sizeof be->base.err, "read_tensor: value of "
                 "%.40s not computed by a training step: the batch norm "
                 "runs fused with its ReLU (cuDNN BN_ACTIVATION), only the "
                 "ReLU's output is stored", m->layers[L].name);
        return -EINVAL;
    }
    if (be->base.cfg.mem_layout == TD_MEM_PER_LAYER || be->last_train < 0)
        return 0;
    int ok = grad ? be->last_train && g->kept_dy
                  : g->kept_y[be->last_train];
    if (ok)
        return 0;
    snprintf(be->base.err, sizeof be->base.err, "read_tensor: %s of "
             "%.40s not kept after %s step (memory plan; mem_layout "
             "TD_MEM_PER_LAYER keeps every layer's)",
             grad ? "gradient" : "value", m->layers[L].name,
             be->last_train ? "a training" : "an evaluation");
    return -EINVAL;
}
