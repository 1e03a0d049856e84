/* memplan.c - device memory planned on the host (see memplan.h). */
#include "backend/memplan.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "stats.h" /* kernels/: the step's counters on the device */

#define TD__ALIGN ((size_t)256) /* cudaMalloc's and cuDNN's alignment */

static size_t td__align(size_t n)
{
    return (n + TD__ALIGN - 1) / TD__ALIGN * TD__ALIGN;
}

static int td__max(int a, int b) { return a > b ? a : b; }
static int td__min(int a, int b) { return a < b ? a : b; }

/* Does layer kind k read its input's value in its backward pass? */
static int td__bwd_reads_input(enum td_layer_kind k)
{
    switch (k) {
    case TD_L_CONV: case TD_L_DENSE: case TD_L_BN: case TD_L_RELU:
    case TD_L_MAXPOOL: case TD_L_AVGPOOL: case TD_L_GAP:
        return 1;
    default:
        return 0; /* add, dropout (its mask), flatten (an alias) */
    }
}

/* ... and its own output (cuDNN's activation and pooling backward)? */
static int td__bwd_reads_output(enum td_layer_kind k)
{
    return k == TD_L_RELU || k == TD_L_MAXPOOL || k == TD_L_AVGPOOL ||
           k == TD_L_GAP;
}

/* May a ReLU overwrite this layer's output in place?  Only when nothing
 * else reads it and the layer's own backward does not need it. */
static int td__inplace_ok(enum td_layer_kind k)
{
    return k == TD_L_CONV || k == TD_L_BN || k == TD_L_ADD ||
           k == TD_L_DENSE;
}

/* Does any layer other than a convolution or a dense layer (their
 * backward skips the input gradient of the batch) read the batch? */
static int td__batch_grad(const td_model *m, const int *root)
{
    for (int L = 1; L < m->nlayers; L++) {
        const td_layer *l = &m->layers[L];
        if (l->kind == TD_L_FLATTEN || l->kind == TD_L_CONV ||
            l->kind == TD_L_DENSE)
            continue;
        for (int i = 0; i < 2 && l->in[i] >= 0; i++)
            if (root[l->in[i]] == 0)
                return 1;
    }
    return 0;
}

/* Layers reading root P's buffers: its consumers and, through flatten
 * (an alias), the flatten's. */
static int td__readers(const td_model *m, const int *root, int P)
{
    int k = 0;
    for (int L = 1; L < m->nlayers; L++) {
        const td_layer *l = &m->layers[L];
        if (l->kind == TD_L_FLATTEN)
            continue;
        for (int i = 0; i < 2 && l->in[i] >= 0; i++)
            k += root[l->in[i]] == P;
    }
    return k;
}

int td_membuf_overlap_in_time(const td_membuf *a, const td_membuf *b)
{
    return a->first <= b->last && b->first <= a->last;
}

static int td__by_size(const void *pa, const void *pb)
{
    const td_membuf *a = *(td_membuf *const *)pa, *b = *(td_membuf *const *)pb;
    if (a->bytes != b->bytes)
        return a->bytes < b->bytes ? 1 : -1;
    return a->first - b->first;
}

static int td__by_offset(const void *pa, const void *pb)
{
    const td_membuf *a = *(td_membuf *const *)pa, *b = *(td_membuf *const *)pb;
    return a->offset < b->offset ? -1 : a->offset > b->offset;
}

/* First fit by descending size: each buffer goes at the lowest offset
 * where it overlaps no placed buffer that is live at the same time. */
static int td__place(td_membuf *bufs, int n, size_t *end)
{
    td_membuf **order = malloc(sizeof *order * (size_t)(n ? n : 1));
    td_membuf **live = malloc(sizeof *live * (size_t)(n ? n : 1));
    if (!order || !live) {
        free(order);
        free(live);
        return -ENOMEM;
    }
    int k = 0;
    for (int i = 0; i < n; i++)
        if (bufs[i].alias < 0)
            order[k++] = &bufs[i];
    qsort(order, (size_t)k, sizeof *order, td__by_size);
    *end = 0;
    for (int i = 0; i < k; i++) {
        int nl = 0;
        for (int j = 0; j < i; j++)
            if (td_membuf_overlap_in_time(order[i], order[j]))
                live[nl++] = order[j];
        qsort(live, (size_t)nl, sizeof *live, td__by_offset);
        size_t off = 0, need = td__align(order[i]->bytes);
        for (int j = 0; j < nl; j++) {
            if (live[j]->offset >= off + need)
                break;
            size_t e = live[j]->offset + td__align(live[j]->bytes);
            if (e > off)
                off = e;
        }
        order[i]->offset = off;
        if (off + need > *end)
            *end = off + need;
    }
    free(order);
    free(live);
    return 0;
}

/* ---- the 16-bit NHWC layout (memplan.h) --------------------------------- */

int td_memplan_stem_channels(const td_model *m, int act_bytes)
{
    int c = m->layers[0].out.c, readers = 0;
    if (act_bytes != 2)
        return c;
    for (int L = 1; L < m->nlayers; L++)
        for (int i = 0; i < 2 && m->layers[L].in[i] >= 0; i++)
            if (m->layers[L].in[i] == 0) {
                if (m->layers[L].kind != TD_L_CONV)
                    return c;
                readers++;
            }
    return readers ? (c + 7) / 8 * 8 : c;
}

size_t td_memplan_stem_extra(const td_model *m, int act_bytes)
{
    int cp = td_memplan_stem_channels(m, act_bytes);
    size_t n = 0;
    if (cp == m->layers[0].out.c)
        return 0;
    for (int L = 1; L < m->nlayers; L++) {
        const td_layer *l = &m->layers[L];
        if (l->kind == TD_L_CONV && l->in[0] == 0)
            n += (size_t)l->channels * (size_t)l->kernel * (size_t)l->kernel *
                 (size_t)cp;
    }
    return n;
}

int td_memplan_dense_nhwc(const td_model *m, int L, int act_bytes)
{
    const td_layer *l = &m->layers[L];
    if (act_bytes != 2 || l->kind != TD_L_DENSE)
        return 0;
    int R = l->in[0];
    while (m->layers[R].kind == TD_L_FLATTEN)
        R = m->layers[R].in[0];
    const td_shape *s = &m->layers[R].out;
    return s->c > 1 && s->h * s->w > 1;
}

int td_memplan_bn_relu(const td_model *m, int P)
{
    if (P < 1 || P >= m->nlayers || m->layers[P].kind != TD_L_BN)
        return 0;
    int R = 0, readers = 0;
    for (int L = P + 1; L < m->nlayers; L++)
        for (int i = 0; i < 2 && m->layers[L].in[i] >= 0; i++)
            if (m->layers[L].in[i] == P)
                readers++, R = L;
    return readers == 1 && m->layers[R].kind == TD_L_RELU &&
                   m->layers[R].in[1] < 0
               ? R
               : 0;
}

/* Layers reading layer P's output through in[]. */
static int td__nreaders(const td_model *m, int P, int *last)
{
    int n = 0;
    *last = 0;
    for (int L = 1; L < m->nlayers; L++)
        for (int i = 0; i < 2 && m->layers[L].in[i] >= 0; i++)
            if (m->layers[L].in[i] == P)
                n++, *last = L;
    return n;
}

int td_memplan_bn_add_relu(const td_model *m, int P, int *A)
{
    int a, r, last;
    if (P < 1 || P >= m->nlayers || m->layers[P].kind != TD_L_BN ||
        td__nreaders(m, P, &a) != 1 || m->layers[a].kind != TD_L_ADD ||
        td__nreaders(m, a, &r) != 1 || m->layers[r].kind != TD_L_RELU ||
        m->layers[r].in[1] >= 0)
        return 0;
    int X = m->layers[P].in[0];
    int Q = m->layers[a].in[0] == P ? m->layers[a].in[1]
                                    : m->layers[a].in[0];
    if (Q == P || X < 1 || m->layers[X].kind == TD_L_FLATTEN ||
        td__nreaders(m, X, &last) != 1 ||
        m->layers[Q].kind == TD_L_FLATTEN)
        return 0;
    td__nreaders(m, Q, &last);
    if (last != a)
        return 0;
    *A = a;
    return r;
}

int td_memplan_bn_fuse(const td_model *m, int L, const uint8_t *bn_eval,
                       int no_add, int *A)
{
    int a, a2;
    *A = 0;
    if (L < 1 || L >= m->nlayers || m->layers[L].kind != TD_L_BN ||
        m->layers[L].out.c % 4 || (bn_eval && bn_eval[L]))
        return 0;
    int R = td_memplan_bn_relu(m, L);
    if (R || no_add || !(R = td_memplan_bn_add_relu(m, L, &a)))
        return R;
    /* an add takes one batch norm along: the first that qualifies */
    for (int i = 0; i < 2; i++) {
        int B = m->layers[a].in[i];
        if (B >= 1 && B < L && m->layers[B].kind == TD_L_BN &&
            m->layers[B].out.c % 4 == 0 && !(bn_eval && bn_eval[B]) &&
            td_memplan_bn_add_relu(m, B, &a2) && a2 == a)
            return 0;
    }
    *A = a;
    return R;
}

size_t td_memplan_bn_reserve_size(size_t elems)
{
    return 64 + (elems + 7) / 8;
}

void td_memplan_fp16_bn_reserves(const td_model *m, int batch,
                                 const uint8_t *bn_eval, size_t *out)
{
    for (int L = 0; L < m->nlayers; L++) {
        const td_shape *s = &m->layers[L].out;
        int A;
        out[L] = td_memplan_bn_fuse(m, L, bn_eval, 0, &A)
                     ? td_memplan_bn_reserve_size((size_t)batch * s->c *
                                                  s->h * s->w)
                     : 0;
    }
}

size_t td_memplan_dense_scratch(const td_model *m, int act_bytes)
{
    size_t most = 0;
    for (int L = 1; L < m->nlayers; L++)
        if (td_memplan_dense_nhwc(m, L, act_bytes)) {
            const td_shape *s = &m->layers[m->layers[L].in[0]].out;
            size_t k = (size_t)m->layers[L].channels * (size_t)s->c *
                       (size_t)s->h * (size_t)s->w;
            most = k > most ? k : most;
        }
    return most;
}

int td_memplan_build(const td_model *m, const td_memplan_config *c,
                     td_memplan *out, char *err, size_t errcap)
{
    memset(out, 0, sizeof *out);
    if (c->batch < 1 || (c->act_bytes != 2 && c->act_bytes != 4) ||
        c->optim_slots < 0 || c->optim_slots > 2 || c->nbuf < 1 ||
        c->bn_eval_channels < 0)
        return td_set_error(err, errcap, -EINVAL, "memory plan: batch %d, "
                            "%d-byte activations, %d optimizer slots, %d "
                            "batch buffers, %d bn_eval channels: out of "
                            "range", c->batch, c->act_bytes, c->optim_slots,
                            c->nbuf, c->bn_eval_channels);
    const int N = m->nlayers;
    int *root = malloc(sizeof *root * (size_t)N);
    int *iy = malloc(sizeof *iy * (size_t)N), *idy = malloc(sizeof *idy *
                                                            (size_t)N);
    /* y, dy and a mask (dropout) or reserve space (batch norm) a layer */
    td_membuf *b = calloc((size_t)N * 3, sizeof *b);
    if (!root || !iy || !idy || !b) {
        free(root), free(iy), free(idy), free(b);
        return td_set_error(err, errcap, -ENOMEM, "memory plan: out of "
                            "memory");
    }
    int n = 0;
    size_t bn_saves = 0;
    for (int L = 0; L < N; L++) {
        const td_layer *l = &m->layers[L];
        root[L] = l->kind == TD_L_FLATTEN ? root[l->in[0]] : L;
        iy[L] = idy[L] = -1;
    }
    for (int L = 0; L < N; L++) {
        const td_layer *l = &m->layers[L];
        if (root[L] != L)
            continue;
        /* the batch: with its padded channels (td_memplan_stem_channels) */
        int ch = L == 0 ? td_memplan_stem_channels(m, c->act_bytes)
                        : l->out.c;
        size_t elems = (size_t)c->batch * (size_t)ch * (size_t)l->out.h *
                       (size_t)l->out.w;
        b[n] = (td_membuf){TD_MB_Y, L, -1, elems * (size_t)c->act_bytes, 0,
                           L, L};
        iy[L] = n++;
        if (L >= 1 || td__batch_grad(m, root)) {
            /* first: when the first consumer's backward writes it (set
             * below); last: this layer's own backward reads it. */
            b[n] = (td_membuf){TD_MB_DY, L, -1, elems * (size_t)c->act_bytes,
                               0, 2 * N, 2 * N - L};
            idy[L] = n++;
        }
        if (l->kind == TD_L_DROPOUT)
            b[n++] = (td_membuf){TD_MB_MASK, L, -1, elems, 0, L, 2 * N - L};
        if (l->kind == TD_L_BN) /* saved mean and inverse deviation */
            bn_saves += td__align(2 * (size_t)l->out.c * sizeof(float));
        if (l->kind == TD_L_BN && c->bn_reserve && c->bn_reserve[L]) {
            /* fused: forward and backward at the batch norm's, or at a
             * block's end at the add's (cuda_step.c) */
            int A = 0, at = L;
            if (!td_memplan_bn_relu(m, L) && td_memplan_bn_add_relu(m, L, &A))
                at = A;
            b[n++] = (td_membuf){TD_MB_RESERVE, L, -1, c->bn_reserve[L], 0,
                                 at, 2 * N - at};
        }
    }
    for (int L = 1; L < N; L++) {
        const td_layer *l = &m->layers[L];
        if (l->kind == TD_L_FLATTEN)
            continue;
        int bwd = 2 * N - L;
        for (int i = 0; i < 2 && l->in[i] >= 0; i++) {
            td_membuf *y = &b[iy[root[l->in[i]]]];
            y->last = td__max(y->last, L);
            if (td__bwd_reads_input(l->kind))
                y->last = td__max(y->last, bwd);
            if (idy[root[l->in[i]]] >= 0) {
                td_membuf *dy = &b[idy[root[l->in[i]]]];
                dy->first = td__min(dy->first, bwd);
            }
        }
        if (td__bwd_reads_output(l->kind))
            b[iy[L]].last = td__max(b[iy[L]].last, bwd);
    }
    /* The loss reads the logits at N and writes their gradient. */
    int top = root[N - 1];
    b[iy[top]].last = td__max(b[iy[top]].last, N);
    if (idy[top] >= 0)
        b[idy[top]].first = N;
    /* A gradient nothing writes (a layer no one reads) still exists: give
     * it a lifetime of its own backward alone. */
    for (int i = 0; i < n; i++)
        if (b[i].first > b[i].last)
            b[i].first = b[i].last;
    if (c->reuse) {
        /* ReLU in place: y and dy of the ReLU share its input's buffers. */
        for (int L = 1; L < N; L++) {
            const td_layer *l = &m->layers[L];
            if (l->kind != TD_L_RELU || root[L] != L)
                continue;
            int P = root[l->in[0]];
            if (P < 1 || !td__inplace_ok(m->layers[P].kind) ||
                td__readers(m, root, P) != 1)
                continue;
            td_membuf *yp = &b[iy[P]], *yr = &b[iy[L]];
            td_membuf *dp = &b[idy[P]], *dr = &b[idy[L]];
            yp->last = td__max(yp->last, yr->last);
            /* a fused batch norm (its reserve space billed) reads the
             * ReLU's output at its own backward */
            if (c->bn_reserve && c->bn_reserve[P])
                yp->last = td__max(yp->last, 2 * N - P);
            /* an add ending a residual block whose batch norm is fused:
             * the fused backward runs at the add's backward, reading this
             * value and writing the batch norm's input gradient */
            for (int i = 0; m->layers[P].kind == TD_L_ADD && i < 2; i++) {
                /* (the backend fuses one batch norm per add: only that
                 * one has a reserve space) */
                int B = m->layers[P].in[i], A = 0;
                if (c->bn_reserve && B >= 0 && c->bn_reserve[B] &&
                    td_memplan_bn_add_relu(m, B, &A) == L && A == P) {
                    yp->last = td__max(yp->last, 2 * N - P);
                    td_membuf *dx = &b[idy[m->layers[B].in[0]]];
                    dx->first = td__min(dx->first, 2 * N - P);
                }
            }
            yr->alias = iy[P];
            dp->first = td__min(dp->first, dr->first);
            dp->last = td__max(dp->last, dr->last);
            dr->alias = idy[P];
        }
        size_t end = 0;
        int rc = td__place(b, n, &end);
        if (rc) {
            free(root), free(iy), free(idy), free(b);
            return td_set_error(err, errcap, rc, "memory plan: out of "
                                "memory");
        }
        for (int i = 0; i < n; i++)
            if (b[i].alias >= 0)
                b[i].offset = b[b[i].alias].offset;
        out->activations = end;
    } else {
        size_t off = 0;
        for (int i = 0; i < n; i++) {
            b[i].offset = off;
            off += td__align(b[i].bytes);
        }
        out->activations = off;
    }
    for (int i = 0; i < n; i++)
        if (b[i].alias < 0)
            out->activations_sum += td__align(b[i].bytes);
    out->activations += bn_saves;
    out->activations_sum += bn_saves;
    out->bn_saves = bn_saves;

    const size_t pc = m->param_count, f = sizeof(float);
    const size_t ns = td_model_state_count(m);
    const td_shape in = m->layers[0].out;
    out->params = td__align(pc * f);
    /* fp32 gradients (the update reads them); with a 16-bit compute type
     * also the 16-bit ones cuDNN writes for convolutions before they are
     * widened (cuda_arena.c's lgrad) */
    /* (16-bit: with the padded stem filters, td_memplan_stem_extra) */
    const size_t lpc = pc + td_memplan_stem_extra(m, c->act_bytes);
    out->grads = td__align(pc * f) +
                 (c->act_bytes < 4 ? td__align(lpc * (size_t)c->act_bytes)
                                   : 0);
    out->optim = td__align(pc * f * (size_t)c->optim_slots);
    out->weights_lp = c->act_bytes < 4
                          ? td__align(lpc * (size_t)c->act_bytes) : 0;
    out->state = td__align(ns * f);
    out->shadow = td__align((pc * (1 + (size_t)c->optim_slots) + ns) * f);
    out->batches = (size_t)c->nbuf *
                   (td__align((size_t)c->batch * (size_t)in.c *
                              (size_t)in.h * (size_t)in.w) +
                    td__align((size_t)c->batch * sizeof(int32_t)));
    out->workspace = td__align(c->workspace) + td__align(c->blas_workspace);
    out->scratch = td__align((size_t)c->batch * sizeof(double)) +
                   td__align((size_t)c->batch * sizeof(int)) +
                   td__align(sizeof(td_dev_stats)) +
                   td__align(2 * (size_t)c->batch *
                             (size_t)c->bn_eval_channels * sizeof(float)) +
                   td__align(c->step_bytes) +
                   /* 16-bit compute: the logits widened to fp32 and the
                    * loss's fp32 gradient (cuda_arena.c's xz, xg) */
                   (c->act_bytes < 4 ? 2 * td__align((size_t)c->batch *
                                                     (size_t)m->classes * f)
                                     : 0) +
                   /* a dense layer's permuted fp32 weight gradient */
                   td__align(td_memplan_dense_scratch(m, c->act_bytes) * f);
    size_t sub = out->params + out->grads + out->optim + out->weights_lp +
                 out->state + out->shadow + out->batches + out->activations +
                 out->workspace + out->scratch;
    out->headroom = sub / 20 > c->headroom_min ? sub / 20 : c->headroom_min;
    out->total = sub + out->headroom;
    out->nbufs = n;
    out->bufs = b;
    free(root);
    free(iy);
    free(idy);
    return 0;
}

void td_memplan_free(td_memplan *p)
{
    free(p->bufs);
    memset(p, 0, sizeof *p);
}

int td_memplan_build_host(const td_model *m, const td_memplan_config *c,
                          int fp16, td_memplan *out, char *err,
                          size_t errcap)
{
    if (!fp16)
        return td_memplan_build(m, c, out, err, errcap);
    size_t *rsv = calloc((size_t)m->nlayers, sizeof *rsv);
    if (!rsv) {
        memset(out, 0, sizeof *out);
        return td_set_error(err, errcap, -ENOMEM, "memory plan: out of "
                            "memory");
    }
    td_memplan_fp16_bn_reserves(m, c->batch, NULL, rsv);
    td_memplan_config cf = *c;
    cf.bn_reserve = rsv;
    int rc = td_memplan_build(m, &cf, out, err, errcap);
    free(rsv);
    return rc;
}
