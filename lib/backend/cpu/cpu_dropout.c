/* cpu_dropout.c - the CPU backend's dropout draws: which elements of a
 * layer's output survive, whatever physical layout oneDNN gave the tensor.
 *
 * Math: element (n, ch, p) of an n x c x h x w output (p the pixel, hw =
 * h * w; a 2-D n x c tensor has hw = 1) is kept when
 *   Philox(seed, stream(TD_RNG_DROPOUT, L), step * count + e) < 1 - rate
 * with e = (n * c + ch) * hw + p, its canonical NCHW index, and count the
 * tensor's logical element count (n * c * h * w): the CUDA backend's draw
 * (cuda_kernels.cu's dropout_fwd_k), so a job's masks are the same in fp32
 * (oneDNN's blocked nChw16c / nChw8c), bf16 (channels-last nhwc on AMX),
 * plain nchw / nc, and on the GPU, and by global step (a resumed job
 * continues them).  The mask holds one byte per physical element (what
 * cpu_step.c's masked scale reads); channels padding a blocked tensor's
 * last block are never kept.
 *
 * Speed: the layout is read from the oneDNN memory descriptor as nested
 * loops over physical memory (axes by physical stride, each with its
 * logical stride; the innermost the channel block or the axis of
 * physical stride 1).  Each thread walks a contiguous share of the runs
 * with an odometer that steps the logical index by additions, and the
 * draws (Philox, the cost: ~all of it) run 64 at a time as loops over
 * lanes the compiler vectorises (AVX-512 / AVX2 clones), tested bitwise
 * against the scalar td_dropout_keep.
 *
 * Owns: the layout-to-index mapping and the mask fill.
 * Never does: allocate, log outside planning, or apply the mask.
 */
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "backend/cpu/cpu_int.h"
#include "base/error.h"
#include "base/log.h"
#include "base/rng.h"
#include "eltwise.h"
#include "philox.h"

enum { TD__DAXES = 4 };

typedef struct td__daxis {
    size_t ext; /* extent */
    size_t ps;  /* physical stride, elements */
    size_t ls;  /* logical (NCHW) stride */
    int chan;   /* the channel (block) axis */
} td__daxis;

/* A tensor's layout as nested loops over its physical memory: axes
 * outermost first, the last one the run of physically adjacent elements
 * (the channel block, or the axis of physical stride 1). */
typedef struct td__dmap {
    int nax;
    td__daxis ax[TD__DAXES + 1];
    int chax;         /* the axis of channel blocks (blk > 1), else -1 */
    size_t total;     /* product of the extents */
    size_t blk;       /* channels per block (1: not blocked) */
    size_t c;         /* logical channels */
    size_t count;     /* logical elements */
    size_t hw;        /* pixels per channel (1: a 2-D tensor) */
} td__dmap;

/* Reads md (2-D n x c or 4-D n x c x h x w, plain or with one inner block
 * of channels) into m; -1 with `why` set for anything else. */
static int td__dmap_of(const dnnl_memory_desc_t *md, td__dmap *m, char *why,
                       size_t cap)
{
    const dnnl_blocking_desc_t *b = &md->format_desc.blocking;
    int nd = md->ndims;
    memset(m, 0, sizeof *m);
    if (md->format_kind != dnnl_blocked || (nd != 2 && nd != 4) ||
        md->offset0 != 0) {
        snprintf(why, cap, "%d-D tensor, format kind %d, offset %lld: not a "
                 "plain or blocked 2-D or 4-D layout", nd,
                 (int)md->format_kind, (long long)md->offset0);
        return -1;
    }
    m->blk = 1;
    if (b->inner_nblks > 1 ||
        (b->inner_nblks == 1 && b->inner_idxs[0] != 1)) {
        snprintf(why, cap, "%d inner blocks (the first on dim %lld): only "
                 "one block of channels is supported", b->inner_nblks,
                 (long long)b->inner_idxs[0]);
        return -1;
    }
    if (b->inner_nblks == 1)
        m->blk = (size_t)b->inner_blks[0];
    for (int d = 0; d < nd; d++)
        if (d != 1 && md->padded_dims[d] != md->dims[d]) {
            snprintf(why, cap, "dim %d padded (%lld of %lld): only channels "
                     "may be", d, (long long)md->dims[d],
                     (long long)md->padded_dims[d]);
            return -1;
        }
    size_t hw = nd == 4 ? (size_t)md->dims[2] * (size_t)md->dims[3] : 1;
    m->c = (size_t)md->dims[1];
    m->hw = hw;
    m->count = (size_t)md->dims[0] * m->c * hw;
    size_t ls[4] = {m->c * hw, m->blk * hw, nd == 4 ? (size_t)md->dims[3] : 1,
                    1};
    td__daxis ax[TD__DAXES + 1];
    int na = 0;
    for (int d = 0; d < nd; d++)
        ax[na++] = (td__daxis){
            d == 1 ? (size_t)md->padded_dims[1] / m->blk
                   : (size_t)md->dims[d],
            (size_t)b->strides[d], ls[d], d == 1};
    /* the run: the channel block, else the axis of physical stride 1 */
    td__daxis run = {1, 1, 1, 0};
    if (m->blk > 1) {
        run = (td__daxis){m->blk, 1, hw, 1};
    } else {
        for (int i = 0; i < na; i++)
            if (ax[i].ps == 1 && ax[i].ext > 1) {
                run = ax[i];
                ax[i] = ax[--na];
                break;
            }
    }
    /* outer axes by physical stride, largest first (insertion sort) */
    for (int i = 1; i < na; i++)
        for (int j = i; j > 0 && ax[j].ps > ax[j - 1].ps; j--) {
            td__daxis t = ax[j];
            ax[j] = ax[j - 1];
            ax[j - 1] = t;
        }
    m->chax = -1;
    m->total = run.ext;
    for (int i = 0; i < na; i++) {
        m->ax[i] = ax[i];
        m->total *= ax[i].ext;
        if (ax[i].chan && m->blk > 1)
            m->chax = i;
    }
    m->ax[na] = run;
    m->nax = na + 1;
    return 0;
}

static const char *td__dmap_name(const td__dmap *m)
{
    const td__daxis *run = &m->ax[m->nax - 1];
    if (m->blk > 1)
        return "blocked by channels";
    if (run->chan && m->hw > 1)
        return "channels-last";
    return "plain";
}

int td__dropout_check(td__cpu *be, int L)
{
    const td_layer *l = &be->base.model->layers[L];
    td__dmap m;
    char why[160];
    if (td__dmap_of(&be->cl[L].md, &m, why, sizeof why)) {
        snprintf(be->base.err, sizeof be->base.err, "dropout %.64s: a "
                 "layout the CPU backend cannot map to NCHW indices "
                 "(%.120s)", l->name, why);
        return TD_E_NOTSUP;
    }
    td_debug("cpu backend: %s dropout: %s (block %zu, run %zu), draws by "
             "NCHW index", l->name, td__dmap_name(&m), m.blk,
             m.ax[m.nax - 1].ext);
    return 0;
}

enum { TD__LANES = 64 };

/* keep[k] = td_dropout_keep_thr(seed, stream, idx[k], thr) for all
 * TD__LANES k: Philox4x32-10 (kernels/philox.h) with one lane per draw,
 * written as loops over the lanes so that the compiler vectorises them
 * (the scalar function is latency-bound: 10 dependent multiply rounds);
 * bitwise the same decisions (test_dropord compares every mask with
 * td_dropout_keep). */
static inline __attribute__((always_inline)) void
td__keep_lanes(const uint64_t *idx, uint64_t seed, uint64_t stream,
               uint64_t thr, uint8_t *keep)
{
    uint32_t c0[TD__LANES], c1[TD__LANES], c2[TD__LANES], c3[TD__LANES];
    for (int j = 0; j < TD__LANES; j++) {
        c0[j] = (uint32_t)idx[j];
        c1[j] = (uint32_t)(idx[j] >> 32);
        c2[j] = (uint32_t)stream;
        c3[j] = (uint32_t)(stream >> 32);
    }
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        for (int j = 0; j < TD__LANES; j++) {
            uint64_t p0 = (uint64_t)TD_PHILOX_M0 * c0[j];
            uint64_t p1 = (uint64_t)TD_PHILOX_M1 * c2[j];
            uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1[j] ^ k0;
            uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3[j] ^ k1;
            c1[j] = (uint32_t)p1;
            c3[j] = (uint32_t)p0;
            c0[j] = n0;
            c2[j] = n2;
        }
        k0 += TD_PHILOX_W0;
        k1 += TD_PHILOX_W1;
    }
    /* the 64 bits (c1 c0) >> 11 below thr, as (c1 c0) < thr << 11 */
    uint32_t all = thr >= (UINT64_C(1) << 53);
    uint64_t t = all ? 0 : thr << 11;
    uint32_t th = (uint32_t)(t >> 32), tl = (uint32_t)t;
    for (int j = 0; j < TD__LANES; j++)
        keep[j] = (uint8_t)(all | (c1[j] < th) | ((c1[j] == th) &
                                                  (c0[j] < tl)));
}

/* The lanes compiled for AVX-512, AVX2 and the baseline, chosen per call
 * by the CPU (not target_clones: its ifunc resolver runs before the
 * sanitizers' runtimes start, and ThreadSanitizer builds crash there). */
__attribute__((target("avx512f"))) static void
td__keep_lanes_avx512(const uint64_t *idx, uint64_t seed, uint64_t stream,
                      uint64_t thr, uint8_t *keep)
{
    td__keep_lanes(idx, seed, stream, thr, keep);
}

__attribute__((target("avx2"))) static void
td__keep_lanes_avx2(const uint64_t *idx, uint64_t seed, uint64_t stream,
                    uint64_t thr, uint8_t *keep)
{
    td__keep_lanes(idx, seed, stream, thr, keep);
}

static void td__keep_lanes_any(const uint64_t *idx, uint64_t seed,
                               uint64_t stream, uint64_t thr, uint8_t *keep)
{
    if (__builtin_cpu_supports("avx512f"))
        td__keep_lanes_avx512(idx, seed, stream, thr, keep);
    else if (__builtin_cpu_supports("avx2"))
        td__keep_lanes_avx2(idx, seed, stream, thr, keep);
    else
        td__keep_lanes(idx, seed, stream, thr, keep);
}

/* An odometer over the map's outer axes (all but the run): their
 * indices, the physical position and logical (NCHW) index of the run's
 * first element. */
typedef struct td__dodo {
    size_t i[TD__DAXES];
    size_t pos, lid;
} td__dodo;

static void td__dodo_at(const td__dmap *m, size_t run, td__dodo *o)
{
    o->pos = o->lid = 0;
    for (int a = m->nax - 2; a >= 0; a--) {
        o->i[a] = run % m->ax[a].ext;
        run /= m->ax[a].ext;
        o->pos += o->i[a] * m->ax[a].ps;
        o->lid += o->i[a] * m->ax[a].ls;
    }
}

static void td__dodo_next(const td__dmap *m, td__dodo *o)
{
    for (int a = m->nax - 2; a >= 0; a--) {
        const td__daxis *x = &m->ax[a];
        o->pos += x->ps;
        o->lid += x->ls;
        if (++o->i[a] < x->ext)
            return;
        o->i[a] = 0;
        o->pos -= x->ext * x->ps;
        o->lid -= x->ext * x->ls;
    }
}

/* Elements of the run that are not pad channels of a blocked tensor's
 * last block. */
static size_t td__dodo_valid(const td__dmap *m, const td__dodo *o)
{
    size_t n = m->ax[m->nax - 1].ext;
    if (m->chax < 0)
        return n;
    size_t ch = o->i[m->chax] * m->blk;
    return ch >= m->c ? 0 : m->c - ch < n ? m->c - ch : n;
}

typedef struct td__lanes {
    int n;
    uint64_t idx[TD__LANES];
    size_t pos[TD__LANES];
    uint8_t keep[TD__LANES];
} td__lanes;

static void td__flush(td__lanes *b, uint8_t *mask, uint64_t seed,
                      uint64_t stream, uint64_t thr)
{
    for (int k = b->n; k < TD__LANES; k++)
        b->idx[k] = 0; /* unused lanes: defined inputs */
    td__keep_lanes_any(b->idx, seed, stream, thr, b->keep);
    for (int k = 0; k < b->n; k++)
        mask[b->pos[k]] = b->keep[k];
    b->n = 0;
}

/* Runs [lo, hi) of the physical walk, drawn TD__LANES at a time; pad
 * channels are never kept. */
static void td__draw_runs(const td__dmap *m, size_t lo, size_t hi,
                          uint8_t *mask, uint64_t seed, uint64_t stream,
                          uint64_t base, uint64_t thr)
{
    const td__daxis *run = &m->ax[m->nax - 1];
    td__lanes b;
    td__dodo o;
    b.n = 0;
    td__dodo_at(m, lo, &o);
    for (size_t r = lo; r < hi; r++, td__dodo_next(m, &o)) {
        size_t nv = td__dodo_valid(m, &o);
        if (nv < run->ext)
            memset(mask + o.pos + nv, 0, run->ext - nv);
        uint64_t lid = base + o.lid;
        for (size_t k = 0; k < nv; k++, lid += run->ls) {
            if (b.n == TD__LANES)
                td__flush(&b, mask, seed, stream, thr);
            b.idx[b.n] = lid;
            b.pos[b.n++] = o.pos + k;
        }
    }
    if (b.n)
        td__flush(&b, mask, seed, stream, thr);
}

void td__dropout_draw(td__cpu *be, int L)
{
    const td_layer *l = &be->base.model->layers[L];
    td__cl *c = &be->cl[L];
    td__dmap m;
    char why[160];
    if (td__dmap_of(&c->md, &m, why, sizeof why))
        return; /* refused at plan (td__dropout_check) */
    uint64_t stream = td_rng_stream(TD_RNG_DROPOUT, (uint64_t)L);
    uint64_t base = (uint64_t)be->step * m.count;
    uint64_t seed = be->base.cfg.seed;
    uint64_t thr = td_dropout_threshold(1.0f - l->rate);
    uint8_t *mask = c->mask;
#pragma omp parallel
    {
        size_t nt = (size_t)omp_get_num_threads();
        size_t t = (size_t)omp_get_thread_num();
        size_t runs = m.total / m.ax[m.nax - 1].ext;
        td__draw_runs(&m, runs * t / nt, runs * (t + 1) / nt, mask, seed,
                      stream, base, thr);
    }
}
