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
 * Speed: the layout is read from the oneDNN memory descriptor as outer
 * axes (physical stride, logical stride) plus one innermost run of
 * physically adjacent elements (the channel block, or the axis of
 * physical stride 1); the logical index is computed once per run and
 * stepped by the run's logical stride, and the run's draws are one SIMD
 * loop (an integer threshold instead of a double compare: kernels/
 * eltwise.h td_dropout_keep_thr).
 *
 * Owns: the layout-to-index mapping and the mask fill.
 * Never does: allocate, log outside planning, or apply the mask.
 */
#include <stdio.h>
#include <string.h>

#include "backend/cpu/cpu_int.h"
#include "base/error.h"
#include "base/log.h"
#include "base/rng.h"
#include "eltwise.h"

enum { TD__DAXES = 4 };

typedef struct td__daxis {
    size_t ext; /* extent */
    size_t ps;  /* physical stride, elements */
    size_t ls;  /* logical (NCHW) stride */
    int chan;   /* the channel (block) axis */
} td__daxis;

/* A tensor's layout as loops: outer axes outermost first, then a run of
 * `run` physically adjacent elements `run_ls` apart logically. */
typedef struct td__dmap {
    int nout;
    td__daxis out[TD__DAXES];
    size_t outer;     /* product of the outer extents */
    size_t run, run_ls;
    int run_chan;     /* the run is the channel block (cut at c) */
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
        m->run_chan = 1;
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
    m->nout = na;
    m->outer = 1;
    for (int i = 0; i < na; i++) {
        m->out[i] = ax[i];
        m->outer *= ax[i].ext;
    }
    m->run = run.ext;
    m->run_ls = run.ls;
    return 0;
}

static const char *td__dmap_name(const td__dmap *m)
{
    if (m->blk > 1)
        return "blocked by channels";
    if (m->run == m->c && m->run_ls == m->hw && m->hw > 1)
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
             "NCHW index", l->name, td__dmap_name(&m), m.blk, m.run);
    return 0;
}

/* n draws for logical indices first, first + ls, ... into mask[0..n). */
static void td__draw_run(uint8_t *mask, size_t n, uint64_t seed,
                         uint64_t stream, uint64_t first, uint64_t ls,
                         uint64_t thr)
{
#pragma omp simd
    for (size_t k = 0; k < n; k++)
        mask[k] = (uint8_t)td_dropout_keep_thr(seed, stream, first + k * ls,
                                               thr);
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
#pragma omp parallel for schedule(static)
    for (size_t j = 0; j < m.outer; j++) {
        size_t rest = j, pos = 0, lid = 0, cb = 0;
        for (int a = m.nout - 1; a >= 0; a--) {
            size_t i = rest % m.out[a].ext;
            rest /= m.out[a].ext;
            pos += i * m.out[a].ps;
            lid += i * m.out[a].ls;
            if (m.out[a].chan)
                cb = i;
        }
        size_t n = m.run;
        if (m.run_chan) /* the last block's pad channels: never kept */
            n = cb * m.blk >= m.c ? 0 : m.c - cb * m.blk < n
                                            ? m.c - cb * m.blk
                                            : n;
        td__draw_run(mask + pos, n, seed, stream, base + lid, m.run_ls, thr);
        if (n < m.run)
            memset(mask + pos + n, 0, m.run - n);
    }
}
