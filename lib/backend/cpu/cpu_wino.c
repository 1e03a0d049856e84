/* cpu_wino.c - fp32 3x3 convolutions by Winograd F(mh x mw, 3x3) on AVX2
 * + FMA in nChw8c (cpu_wino.h for what it computes and why).
 *
 * Owns: the plan and its tile classes, the matrix products, the blocking
 * and the threads (cpu_wino_tr.c has the transforms).  The output is cut
 * into tiles of 4 or 2 rows by 4 or 2 columns: per side as many 4s as
 * fit, then one 2 where 1 or 2 rows (columns) are left, or one more 4
 * where 3 are (td__split: 14 = 4+4+4+2, the products per side 6+6+6+4
 * instead of 4 tiles' 24); the tiles of one shape form a class with its
 * own transformed weights, up to four classes per convolution, run one
 * after the other on the plan's shared scratch.  A block is up to tb
 * tiles of one class (a multiple of 6, sized so that its transformed
 * input V [np][tb][ic] and products M [np][tb][oc] stay in a thread's
 * L2; np = (mh+2)(mw+2) positions), numbered across the whole batch; per
 * block a thread transforms the input patches (one ymm = the 8 channels
 * of one pixel), runs the np products (6 tiles x 16 output channels in 12
 * accumulators, the input broadcast), and transforms the products back
 * into the output.  Where U is large (td__big: over 4 MiB, 128 x 256
 * channels and up) the blocks grow to 120 tiles and all the threads
 * share each one, split by runs of tiles for the transforms and by
 * position for the products (td__fwd_shared), so that U is read once
 * per 120 tiles, not per 6.
 * The weight gradient runs on one class of square tiles (td__wtile): its
 * products accumulate per group of tiles in the group's own [np][oc][ic]
 * sums (6 output channels x 16 input channels in 12 accumulators), over
 * blocks of tbw tiles, larger than the forward's (the sums are read and
 * written once per block), reduced in group order at the end; eight
 * groups, fewer where large sums would see few tiles per block
 * (td__groups, the shape's rule); the groups split over as many threads,
 * and on more every group's block b runs at once, split by tile and by
 * position (td__wide), with the same sums in the same order.
 * The scratch and the sums live in one working buffer per plan, which a
 * model's plans can share (td_wino_share_work: the CPU backend's
 * scratchpad; resnet18 at batch 16 peaked at 1.73 GB with a buffer per
 * plan, 1.38 GB shared).
 * Never does: decide where it is used (cpu_kplan.c), anything with oneDNN.
 */
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/cpu/cpu_fold.h"
#include "backend/cpu/cpu_wino_int.h"

enum {
    TD__GROUPS = 8,             /* the weight gradient's groups, at most */
    TD__BLOCK_BYTES = 160 << 10, /* V and M of a forward block */
    TD__WBLOCK_BYTES = 640 << 10, /* V and D of a weight gradient's */
    TD__BIG = 1 << 20,          /* a group's sums above: fewer groups,
                                 * larger blocks (td__big) */
    TD__UBIG = 4 << 20,         /* a class's U above: shared blocks */
    TD__RUN = 6,                /* tiles per run of a shared block */
    TD__CLASSES = 4
};

/* A convolution: the forward's tile classes, the weight gradient's one
 * class, their shared buffers. */
struct td_wino {
    int ic, oc, ncls;
    int nt;         /* outputs by non-temporal stores (td__ntstore) */
    int shared;     /* forward blocks run by all the threads (td__big) */
    td__wc cls[TD__CLASSES];
    td__wc wcls;    /* the weight gradient's (no u) */
    float *scr, *part, *tsum; /* in work */
    float *work;    /* scratch, then sums, then tile sums */
    size_t nscr, npart, ntsum; /* their floats, each a multiple of 16 */
    int own;        /* work is the plan's (not td_wino_share_work's) */
    float *mom;     /* per forward block (shared: per run of a block):
                     * [3][oc] (td__t_output) and the count of its
                     * outputs (td_wino_want_moments) */
    long nblk;      /* forward blocks (shared: runs), every class's */
    size_t bytes;   /* held: U, scratch, sums (td_wino_bytes) */
    char desc[64];  /* the forward's classes, for logs */
};

int td_wino_cpu(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

int td_wino_ok(int k, int stride, int pad, int ic, int oc)
{
    return k == 3 && stride == 1 && pad == 1 && ic > 0 && oc > 0 &&
           ic % 16 == 0 && oc % 16 == 0 && td_wino_cpu();
}

static void *td__alloc(size_t floats)
{
    size_t b = (floats * sizeof(float) + 63) / 64 * 64;
    return aligned_alloc(64, b ? b : 64);
}

/* Tiles per block: as many as fit V and M (or D) in `bytes`, a multiple
 * of 6 from 6 to TD__TB_MAX, at most `tiles` rounded up to 6. */
static int td__block(const td__wc *p, long bytes, long tiles)
{
    long tb = bytes / (p->np * (long)sizeof(float) * (p->ic + p->oc));
    long need = (tiles + 5) / 6 * 6;
    tb = tb / 6 * 6;
    tb = tb < 6 ? 6 : tb > TD__TB_MAX ? TD__TB_MAX : tb;
    return (int)(tb < need ? tb : need);
}

/* Is an np x ic x oc matrix of floats (a class's U, a group's sums)
 * larger than `above` bytes (TD__UBIG, TD__BIG)?  Then a block of 6
 * tiles reads (or writes) more of it than of its own data: resnet18's
 * 7x7 512->512 forward streamed its 38 MB of U once per 6 tiles and ran
 * at 0.7x oneDNN's speed, its weight gradient (eight groups' 38 MB sums,
 * read and written per block of 6) at 0.37x (bench_wino 3 2 16
 * resnet18).  U of 128 x 128 channels (2.4 MB) still came fast enough
 * from the L3 cache: shared blocks took 1.12x the time there. */
static int td__big(int np, int ic, int oc, size_t above)
{
    return (size_t)np * ic * oc * sizeof(float) > above;
}

/* Tiles per block where the matrix is big: ic oc / (ic + oc), where the
 * matrix's traffic per block (ic x oc per position) equals the block's
 * own (ic + oc per position and tile); a multiple of 6 up to
 * TD__TB_MAX, at most `tiles` rounded up to 6. */
static int td__block_big(int ic, int oc, long tiles)
{
    long t = ((long)ic * oc / (ic + oc) + 5) / 6 * 6;
    long need = (tiles + 5) / 6 * 6;
    t = t < 6 ? 6 : t > TD__TB_MAX ? TD__TB_MAX : t;
    return (int)(t < need ? t : need);
}

/* The weight gradient's groups: eight, halved while a group would hold
 * fewer tiles than td__block_big wants where its sums are big (its sums
 * are read and written once per block, and every group's are read at
 * the end).  The shape's alone, never the thread count's: the same
 * groups, the same bits on any number of threads. */
static int td__groups(long tiles, int np, int ic, int oc)
{
    int g = TD__GROUPS;
    if (!td__big(np, ic, oc, TD__BIG))
        return g;
    while (g > 1 && tiles / g < td__block_big(ic, oc, TD__TB_MAX))
        g /= 2;
    return g;
}

/* One side of n outputs: *n4 tiles of 4 then *n2 of 2.  m 4 or 2: that
 * tile alone (the last one past the side where it does not divide n);
 * m 0: the fewest products, 6 per 4-tile and 4 per 2-tile: as many 4s as
 * fit, then a 2 for 1 or 2 outputs left, a 4 for 3. */
static void td__split(int n, int m, int *n4, int *n2)
{
    if (m == 4 || m == 2) {
        *n4 = m == 4 ? (n + 3) / 4 : 0;
        *n2 = m == 2 ? (n + 1) / 2 : 0;
        return;
    }
    *n4 = n / 4 + (n % 4 == 3);
    *n2 = n % 4 == 1 || n % 4 == 2;
}

int td_wino_tile_for(int h, int w)
{
    const char *e = getenv("TD_CPU_WINO_TILE");
    (void)h;
    (void)w;
    if (e && (strcmp(e, "2") == 0 || strcmp(e, "4") == 0))
        return *e - '0';
    return 0;
}

void td_wino_destroy(td_wino *p)
{
    if (!p)
        return;
    for (int c = 0; c < p->ncls; c++)
        free(p->cls[c].u);
    if (p->own)
        free(p->work);
    free(p->mom);
    free(p);
}

/* The outputs of an n x h x w x oc convolution go by non-temporal
 * stores: TD_CPU_NTSTORE=1 or 0 in the environment, else when they are
 * larger than the L2 caches of the threads that write them.  They are
 * read back from memory anyway, and a store that misses reads the line
 * first: the output transforms waited on those reads (resnet20's step
 * took 1.05-1.09x as long without them; the same stores in cpu_bn8.c's
 * outputs made it slower, docs/compute.md). */
static int td__ntstore(int n, int h, int w, int oc, int threads)
{
    const char *e = getenv("TD_CPU_NTSTORE");
    if (e && (strcmp(e, "0") == 0 || strcmp(e, "1") == 0))
        return *e == '1';
    long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    double bytes = (double)n * h * w * oc * sizeof(float);
    return bytes > (double)(l2 > 0 ? l2 : 1L << 20) * threads;
}

/* Class p: tiles mh x mw from (ry0, rx0), th x tw per image; its blocks
 * (shared: a forward block for all the threads, up to TD__TB_MAX tiles)
 * and the floats of a block's scratch; with grad the weight gradient's
 * groups and blocks instead. */
static void td__class(td__wc *p, int n, int h, int w, int ic, int oc,
                      int threads, int mh, int mw, int ry0, int rx0, int th,
                      int tw, int grad, int shared)
{
    *p = (td__wc){.h = h, .w = w, .ic = ic, .oc = oc, .threads = threads,
                  .mh = mh, .mw = mw, .np = (mh + 2) * (mw + 2), .ry0 = ry0,
                  .rx0 = rx0, .th = th, .tw = tw};
    p->tiles = (long)n * th * tw;
    if (grad) { /* a group's block: larger than the forward's (the
                 * products add into its [np][oc][ic] sums once per block) */
        p->groups = td__groups(p->tiles, p->np, ic, oc);
        long per = (p->tiles + p->groups - 1) / p->groups;
        p->tbw = td__block(p, TD__WBLOCK_BYTES, per);
        if (td__big(p->np, ic, oc, TD__BIG) &&
            p->tbw < td__block_big(ic, oc, per))
            p->tbw = td__block_big(ic, oc, per);
    } else {
        p->tb = td__block(p, shared ? TD__TB_MAX * TD__BLOCK_BYTES
                                    : TD__BLOCK_BYTES,
                          p->tiles);
    }
    p->scr_per = (size_t)p->np * (grad ? p->tbw : p->tb) * (size_t)(ic + oc);
}

/* The tiles of class p's block from tile g0. */
static int td__cnt(const td__wc *p, long g0)
{
    return (int)(p->tiles - g0 < p->tb ? p->tiles - g0 : p->tb);
}

/* The weight gradient's square tile side: m when forced, else the one
 * with fewer products per image, 2 on a tie.  Its cost is also the
 * groups' sums, np x ic x oc each, written per block and read once per
 * call: a class of few tiles costs them all the same (on fmnist-cnn's
 * 14x14 layers the four classes of the forward took 1.09-1.10x the time
 * of 4x4 tiles alone, bench_wino), so it keeps one class. */
static int td__wtile(int h, int w, int m)
{
    if (m == 2 || m == 4)
        return m;
    long p4 = 36L * ((h + 3) / 4) * ((w + 3) / 4);
    long p2 = 16L * ((h + 1) / 2) * ((w + 1) / 2);
    return p4 < p2 ? 4 : 2;
}

/* The plan; with grad, the weight gradient's class and sums too. */
/* n floats rounded up to a multiple of 16 (64 bytes). */
static size_t td__up16(size_t n) { return (n + 15) / 16 * 16; }

/* The plan's working buffers (and its classes') in w: scratch, sums,
 * tile sums. */
static void td__bind(td_wino *P, float *w)
{
    P->scr = w;
    P->part = P->npart ? w + P->nscr : NULL;
    P->tsum = P->npart ? w + P->nscr + P->npart : NULL;
    for (int c = 0; c <= P->ncls; c++) {
        td__wc *p = c < P->ncls ? &P->cls[c] : &P->wcls;
        p->scr = P->scr;
        p->part = P->part;
        p->tsum = P->tsum;
    }
}

static td_wino *td__create(int n, int h, int w, int ic, int oc, int threads,
                           int m, int grad)
{
    if (n < 1 || h < 1 || w < 1 || threads < 1 ||
        (m != 0 && m != 2 && m != 4) || !td_wino_ok(3, 1, 1, ic, oc))
        return NULL;
    td_wino *P = calloc(1, sizeof *P);
    if (!P)
        return NULL;
    P->ic = ic;
    P->oc = oc;
    P->nt = td__ntstore(n, h, w, oc, threads);
    int nh[2], nw[2]; /* tiles of 4, of 2 per side */
    td__split(h, m, &nh[0], &nh[1]);
    td__split(w, m, &nw[0], &nw[1]);
    P->shared = td__big(nh[0] && nw[0] ? 36 : nh[0] || nw[0] ? 24 : 16, ic,
                        oc, TD__UBIG);
    size_t scr_per = 0, wscr_per = 0;
    int len = 0;
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++) {
            if (!nh[a] || !nw[b])
                continue;
            td__wc *p = &P->cls[P->ncls++];
            td__class(p, n, h, w, ic, oc, threads, 4 - 2 * a, 4 - 2 * b,
                      a ? 4 * nh[0] : 0, b ? 4 * nw[0] : 0, nh[a], nw[b], 0,
                      P->shared);
            scr_per = p->scr_per > scr_per ? p->scr_per : scr_per;
            if (!(p->u = td__alloc((size_t)p->np * ic * oc))) {
                td_wino_destroy(P);
                return NULL;
            }
            P->bytes += (size_t)p->np * ic * oc * sizeof(float);
            for (long g0 = 0; g0 < p->tiles; g0 += p->tb) /* moments' */
                P->nblk += P->shared ? (td__cnt(p, g0) + TD__RUN - 1) /
                                           TD__RUN
                                     : 1;
            len += snprintf(P->desc + len, sizeof P->desc - (size_t)len,
                            "%sF(%dx%d, 3x3)", P->ncls > 1 ? " + " : "",
                            p->mh, p->mw);
        }
    /* scratch: a block per thread, or one shared; the weight gradient's
     * per thread up to its groups (td__group), per group (td__wide) */
    size_t floats = scr_per * (P->shared ? 1 : (size_t)threads);
    if (grad) {
        td__wc *q = &P->wcls;
        int t = td__wtile(h, w, m);
        td__class(q, n, h, w, ic, oc, threads, t, t, 0, 0, (h + t - 1) / t,
                  (w + t - 1) / t, 1, 0);
        wscr_per = q->scr_per;
        size_t wf = wscr_per * (size_t)(threads < q->groups ? threads
                                                             : q->groups);
        floats = wf > floats ? wf : floats;
        P->npart = td__up16((size_t)q->groups * (q->np * (size_t)ic + 1) *
                            oc);
        P->ntsum = td__up16((size_t)q->groups * q->tbw * oc);
    }
    P->nscr = td__up16(floats);
    if (!(P->work = td__alloc(P->nscr + P->npart + P->ntsum))) {
        td_wino_destroy(P);
        return NULL;
    }
    P->own = 1;
    P->bytes += td_wino_work_bytes(P);
    for (int c = 0; c <= P->ncls; c++) {
        td__wc *p = c < P->ncls ? &P->cls[c] : &P->wcls;
        p->scr_per = c < P->ncls ? scr_per : wscr_per;
    }
    td__bind(P, P->work);
    return P;
}

size_t td_wino_work_bytes(const td_wino *p)
{
    return (p->nscr + p->npart + p->ntsum) * sizeof(float);
}

void td_wino_share_work(td_wino *p, void *w)
{
    if (p->own) {
        free(p->work);
        p->bytes -= td_wino_work_bytes(p);
    }
    p->own = 0;
    p->work = w;
    td__bind(p, w);
}

td_wino *td_wino_create_tile(int n, int h, int w, int ic, int oc,
                             int threads, int m)
{
    return td__create(n, h, w, ic, oc, threads, m, 1);
}

td_wino *td_wino_create(int n, int h, int w, int ic, int oc, int threads)
{
    return td__create(n, h, w, ic, oc, threads, td_wino_tile_for(h, w), 1);
}

td_wino *td_wino_create_fwd(int n, int h, int w, int ic, int oc,
                            int threads)
{
    return td__create(n, h, w, ic, oc, threads, td_wino_tile_for(h, w), 0);
}

int td_wino_tile(const td_wino *p)
{
    int m = 2;
    for (int c = 0; c < p->ncls; c++) {
        m = p->cls[c].mh > m ? p->cls[c].mh : m;
        m = p->cls[c].mw > m ? p->cls[c].mw : m;
    }
    return m;
}

const char *td_wino_tiles(const td_wino *p) { return p->desc; }

int td_wino_groups(const td_wino *p) { return p->part ? p->wcls.groups : 0; }

int td_wino_shared(const td_wino *p) { return p->shared; }

size_t td_wino_bytes(const td_wino *p) { return p->bytes; }

long td_wino_products(const td_wino *p)
{
    long s = 0;
    for (int c = 0; c < p->ncls; c++)
        s += (long)p->cls[c].np * p->cls[c].th * p->cls[c].tw;
    return s;
}

/* ---- weights -------------------------------------------------------- */

/* Big U (td__big) by non-temporal stores: all the plans' transforms run
 * before the step's first layer, so by a layer's turn its U has left the
 * caches anyway, and a store that misses reads the line first.  resnet18
 * rewrites 400 MB of U per step at batch 16. */
static void td__weights(td_wino *P, const float *w, int flip)
{
    for (int c = 0; c < P->ncls; c++) {
        td__wc *p = &P->cls[c];
        int nt = td__big(p->np, p->ic, p->oc, TD__UBIG);
#pragma omp parallel
        {
#pragma omp for schedule(static)
            for (int k0 = 0; k0 < p->oc; k0 += 16)
                td__t_weights16(p, w, flip, k0, nt);
            if (nt)
                _mm_sfence();
        }
    }
}

void td_wino_weights(td_wino *p, const float *w) { td__weights(p, w, 0); }

void td_wino_weights_flip(td_wino *p, const float *w)
{
    td__weights(p, w, 1);
}

/* Tiles g0 .. g0 + cnt - 1 of class p: sample and output position. */
static void td__coords(const td__wc *p, long g0, int cnt, int tb,
                       td__tiles *t)
{
    t->tb = tb;
    long per = (long)p->th * p->tw, r = g0 % per;
    int n = (int)(g0 / per), ty = (int)(r / p->tw), tx = (int)(r % p->tw);
    for (int i = 0; i < cnt; i++) {
        t->n[i] = n;
        t->y[i] = p->ry0 + p->mh * ty;
        t->x[i] = p->rx0 + p->mw * tx;
        if (++tx == p->tw) {
            tx = 0;
            if (++ty == p->th) {
                ty = 0;
                n++;
            }
        }
    }
}

/* ---- forward --------------------------------------------------------- */

/* M [rows][K] = V [rows][C] . U [C][K], rows a multiple of 6. */
TD__IN void td__gemm(const float *V, const float *U, float *M, int rows,
                     int C, int K)
{
    for (int k0 = 0; k0 < K; k0 += 16)
        for (int i0 = 0; i0 < rows; i0 += 6) {
            __m256 a[6][2];
#pragma GCC unroll 6
            for (int r = 0; r < 6; r++)
                a[r][0] = a[r][1] = _mm256_setzero_ps();
            const float *v = V + (size_t)i0 * C, *u = U + k0;
#pragma GCC unroll 4
            for (int c = 0; c < C; c++, u += K) {
                __m256 u0 = _mm256_load_ps(u), u1 = _mm256_load_ps(u + 8);
#pragma GCC unroll 6
                for (int r = 0; r < 6; r++) {
                    __m256 b = _mm256_broadcast_ss(v + (size_t)r * C + c);
                    a[r][0] = _mm256_fmadd_ps(b, u0, a[r][0]);
                    a[r][1] = _mm256_fmadd_ps(b, u1, a[r][1]);
                }
            }
            float *m = M + (size_t)i0 * K + k0;
#pragma GCC unroll 6
            for (int r = 0; r < 6; r++) {
                _mm256_store_ps(m + (size_t)r * K, a[r][0]);
                _mm256_store_ps(m + (size_t)r * K + 8, a[r][1]);
            }
        }
}


/* Position k's product of a block (V, M: its [np][tb][...] buffers). */
TD__AVX void td__gemm_at(const td__wc *p, const float *V, float *M,
                         int rows, int k)
{
    int C = p->ic, K = p->oc, tb = p->tb;
    td__gemm(V + (size_t)k * tb * C, p->u + (size_t)k * C * K,
             M + (size_t)k * tb * K, rows, C, K);
}

/* The outputs of tiles i0 .. i1 - 1 of t inside the image. */
static long td__inside(const td__wc *p, const td__tiles *t, int i0, int i1)
{
    long n = 0;
    for (int i = i0; i < i1; i++)
        n += (long)(p->h - t->y[i] < p->mh ? p->h - t->y[i] : p->mh) *
             (p->w - t->x[i] < p->mw ? p->w - t->x[i] : p->mw);
    return n;
}

TD__AVX void td__fwd_block(const td__wc *p, const float *x,
                           const td_fold *f, float *y, const float *bias,
                           long g0, int cnt, float *V, float *M, int nt,
                           float *mom)
{
    int C = p->ic, K = p->oc, tb = p->tb, rows = (cnt + 5) / 6 * 6;
    td__tiles t;
    td__coords(p, g0, cnt, tb, &t);
    td__t_input(p, &t, x, C, 0, cnt, V, f);
    td__pad6(V, (size_t)tb * C, p->np, cnt, C);
    for (int k = 0; k < p->np; k++)
        td__gemm_at(p, V, M, rows, k);
    td__t_output(p, &t, M, y, bias, 0, cnt, nt, mom);
    if (mom)
        mom[3 * K] = (float)td__inside(p, &t, 0, cnt);
}

static int td__nthreads(const td__wc *p, int cap)
{
    int nt = omp_get_max_threads();
    if (nt > p->threads)
        nt = p->threads;
    return nt > cap ? cap : nt < 1 ? 1 : nt;
}

/* Shared blocks (big U): every thread on each block, the input and
 * output transforms split by runs of TD__RUN tiles, the products by
 * position: each position's U is read once per block of up to
 * TD__TB_MAX tiles.  The moments per run, in run order. */
static void td__fwd_shared(td_wino *P, const float *x, float *y,
                           const float *bias, const td_fold *f, int nt)
{
    size_t ms = 3 * (size_t)P->oc + 1; /* floats per run's moments */
#pragma omp parallel num_threads(td__nthreads(&P->cls[0], 1 << 30))
    {
        long run = 0; /* the runs before this block */
        for (int c = 0; c < P->ncls; c++) {
            const td__wc *p = &P->cls[c];
            int C = p->ic, K = p->oc, tb = p->tb, np = p->np;
            float *V = p->scr, *M = V + (size_t)np * tb * C;
            for (long g0 = 0; g0 < p->tiles; g0 += tb) {
                int cnt = td__cnt(p, g0), rows = (cnt + 5) / 6 * 6;
                int nr = (cnt + TD__RUN - 1) / TD__RUN;
                td__tiles t;
                td__coords(p, g0, cnt, tb, &t);
#pragma omp single nowait
                td__pad6(V, (size_t)tb * C, np, cnt, C);
#pragma omp for schedule(static)
                for (int r = 0; r < nr; r++) {
                    int i1 = (r + 1) * TD__RUN;
                    td__t_input(p, &t, x, C, r * TD__RUN,
                                i1 < cnt ? i1 : cnt, V, f);
                }
#pragma omp for schedule(static)
                for (int k = 0; k < np; k++)
                    td__gemm_at(p, V, M, rows, k);
#pragma omp for schedule(static)
                for (int r = 0; r < nr; r++) {
                    int i0 = r * TD__RUN, i1 = i0 + TD__RUN;
                    i1 = i1 < cnt ? i1 : cnt;
                    float *mom = P->mom ? P->mom + (size_t)(run + r) * ms
                                        : NULL;
                    td__t_output(p, &t, M, y, bias, i0, i1, nt, mom);
                    if (mom)
                        mom[3 * K] = (float)td__inside(p, &t, i0, i1);
                }
                run += nr;
            }
        }
        if (nt) /* the stores visible before the region ends */
            _mm_sfence();
    }
}

/* Every class's blocks in one parallel region, each thread a run of
 * them holding its share of the work (a block's positions x tiles; a
 * block goes to the thread whose share holds its middle): the classes'
 * outputs are disjoint, so no barrier between them. */
void td_wino_fwd(td_wino *P, const float *x, float *y, const float *bias,
                 const td_fold *f)
{
    if (P->shared) {
        td__fwd_shared(P, x, y, bias, f,
                       P->nt && ((uintptr_t)y & 31) == 0);
        return;
    }
    long work = 0; /* positions x tiles, every class's */
    for (int c = 0; c < P->ncls; c++)
        work += (long)P->cls[c].np * P->cls[c].tiles;
    int nth = td__nthreads(&P->cls[0], P->nblk < P->cls[0].threads
                                           ? (int)P->nblk
                                           : P->cls[0].threads);
    int nt = P->nt && ((uintptr_t)y & 31) == 0; /* aligned: they need 32 */
#pragma omp parallel num_threads(nth)
    {
        int me = omp_get_thread_num(), all = omp_get_num_threads();
        long done = 0, b = 0; /* the work and blocks before this one */
        size_t ms = 3 * (size_t)P->oc + 1; /* floats per block's moments */
        for (int c = 0; c < P->ncls; c++) {
            const td__wc *p = &P->cls[c];
            float *V = p->scr + (size_t)me * p->scr_per;
            float *M = V + (size_t)p->np * p->tb * p->ic;
            for (long g0 = 0; g0 < p->tiles; g0 += p->tb, b++) {
                long cnt = p->tiles - g0 < p->tb ? p->tiles - g0 : p->tb;
                long mid = done + p->np * cnt / 2;
                done += p->np * cnt;
                if (mid * all / work == me)
                    td__fwd_block(p, x, f, y, bias, g0, (int)cnt, V, M,
                                  nt, P->mom ? P->mom + (size_t)b * ms
                                             : NULL);
            }
        }
        if (nt) /* the stores visible before the region ends */
            _mm_sfence();
    }
}

int td_wino_want_moments(td_wino *p)
{
    if (!p->mom) {
        size_t n = (size_t)p->nblk * (3 * (size_t)p->oc + 1);
        if ((p->mom = td__alloc(n)))
            p->bytes += n * sizeof(float);
    }
    return p->mom ? 0 : -1;
}

void td_wino_moments(const td_wino *p, float *mean, float *var)
{
    int K = p->oc;
    size_t ms = 3 * (size_t)K + 1;
    for (int c = 0; c < K; c++) {
        /* the blocks' shifted sums merged in block order (Chan et al.):
         * the total, then the squares about the total's mean */
        double n = 0, s = 0, m2 = 0;
        for (long b = 0; b < p->nblk; b++) {
            const float *q = p->mom + (size_t)b * ms;
            n += q[3 * K];
            s += (double)q[3 * K] * q[c] + q[K + c];
        }
        double mu = s / n;
        for (long b = 0; b < p->nblk; b++) {
            const float *q = p->mom + (size_t)b * ms;
            double nb = q[3 * K], d = q[K + c] / nb;
            double e = (double)q[c] + d - mu;
            m2 += (double)q[2 * K + c] - nb * d * d + nb * e * e;
        }
        mean[c] = (float)mu;
        var[c] = (float)(m2 / n > 0 ? m2 / n : 0);
    }
}

/* ---- backward weights ------------------------------------------------ */

/* P [K][C] += D^T [K][rows] . V [rows][C] (P = ... when first) for
 * output channels k0 .. k0 + R - 1 and input channels c0 .. c0 + 15. */
TD__IN void td__gw_rows(const float *D, const float *V, float *P, int rows,
                        int C, int K, int k0, int c0, const int R, int first)
{
    __m256 a[6][2];
#pragma GCC unroll 6
    for (int r = 0; r < R; r++) {
        a[r][0] = first ? _mm256_setzero_ps()
                        : _mm256_load_ps(P + (size_t)(k0 + r) * C + c0);
        a[r][1] = first ? _mm256_setzero_ps()
                        : _mm256_load_ps(P + (size_t)(k0 + r) * C + c0 + 8);
    }
    const float *v = V + c0, *d = D + k0;
    for (int t = 0; t < rows; t++, v += C, d += K) {
        __m256 v0 = _mm256_load_ps(v), v1 = _mm256_load_ps(v + 8);
#pragma GCC unroll 6
        for (int r = 0; r < R; r++) {
            __m256 b = _mm256_broadcast_ss(d + r);
            a[r][0] = _mm256_fmadd_ps(b, v0, a[r][0]);
            a[r][1] = _mm256_fmadd_ps(b, v1, a[r][1]);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < R; r++) {
        _mm256_store_ps(P + (size_t)(k0 + r) * C + c0, a[r][0]);
        _mm256_store_ps(P + (size_t)(k0 + r) * C + c0 + 8, a[r][1]);
    }
}

TD__AVX void td__gw(const float *D, const float *V, float *P, int rows,
                    int C, int K, int first)
{
    for (int c0 = 0; c0 < C; c0 += 16) {
        int k0 = 0;
        for (; k0 + 6 <= K; k0 += 6)
            td__gw_rows(D, V, P, rows, C, K, k0, c0, 6, first);
        if (K - k0 == 4)
            td__gw_rows(D, V, P, rows, C, K, k0, c0, 4, first);
        else if (K - k0 == 2)
            td__gw_rows(D, V, P, rows, C, K, k0, c0, 2, first);
    }
}

/* Group g's sums: its part [np][K][C] and db [K] over its tiles. */
static void td__group(td__wc *p, const float *x, const td_fold *f,
                      const float *dy, int g, float *V, float *D)
{
    int C = p->ic, K = p->oc, tb = p->tbw, np = p->np;
    size_t ps = (size_t)K * C;
    float *P = p->part + (size_t)g * np * ps;
    float *db = p->part + (size_t)p->groups * np * ps + (size_t)g * K;
    memset(db, 0, (size_t)K * sizeof(float));
    long t0 = p->tiles * g / p->groups, t1 = p->tiles * (g + 1) / p->groups;
    if (t0 == t1) /* no tiles (fewer than groups): its first block zeroes */
        memset(P, 0, np * ps * sizeof(float));
    for (long g0 = t0; g0 < t1; g0 += tb) {
        int cnt = (int)(t1 - g0 < tb ? t1 - g0 : tb);
        td__tiles t;
        td__coords(p, g0, cnt, tb, &t);
        td__t_input(p, &t, x, C, 0, cnt, V, f);
        td__t_dy(p, &t, dy, 0, cnt, D, db, 0);
        td__pad6(V, (size_t)tb * C, np, cnt, C);
        td__pad6(D, (size_t)tb * K, np, cnt, K);
        for (int k = 0; k < np; k++)
            td__gw(D + (size_t)k * tb * K, V + (size_t)k * tb * C,
                   P + k * ps, cnt, C, K, g0 == t0);
    }
}

/* The tiles of group g's block b (0 when it has fewer blocks) and its
 * first tile in *g0. */
static int td__gblock(const td__wc *p, int g, long b, long *g0)
{
    long t0 = p->tiles * g / p->groups, t1 = p->tiles * (g + 1) / p->groups;
    *g0 = t0 + b * p->tbw;
    return *g0 < t1 ? (int)(t1 - *g0 < p->tbw ? t1 - *g0 : p->tbw) : 0;
}

/* Every group's sums as td__group's, on more threads than groups (inside
 * the parallel region; tl: the groups' tile lists, shared): the groups'
 * block b at once, the transforms split by (group, tile), the products by
 * (group, position), the bias gradient by group.  Each (group, position)
 * sum runs over the same tiles in the same order as td__group's, and
 * each bias gradient adds the same per-tile sums in the same order: the
 * same bits. */
static void td__wide(td__wc *p, const float *x, const td_fold *f,
                     const float *dy, td__tiles *tl)
{
    int C = p->ic, K = p->oc, tb = p->tbw, np = p->np, G = p->groups;
    size_t ps = (size_t)K * C;
    float *dbs = p->part + (size_t)G * np * ps;
    long nblk = 0, g0; /* the most blocks of a group */
    for (int g = 0; g < G; g++) {
        long t0 = p->tiles * g / G, t1 = p->tiles * (g + 1) / G;
        long nb = (t1 - t0 + tb - 1) / tb;
        nblk = nb > nblk ? nb : nblk;
    }
#pragma omp for schedule(static)
    for (int g = 0; g < G; g++) {
        memset(dbs + (size_t)g * K, 0, (size_t)K * sizeof(float));
        if (!td__gblock(p, g, 0, &g0)) /* no tiles: its sums are zeros */
            memset(p->part + (size_t)g * np * ps, 0,
                   np * ps * sizeof(float));
    }
    for (long b = 0; b < nblk; b++) {
#pragma omp for schedule(static)
        for (int g = 0; g < G; g++) {
            int cnt = td__gblock(p, g, b, &g0);
            float *V = p->scr + (size_t)g * p->scr_per;
            if (!cnt)
                continue;
            td__coords(p, g0, cnt, tb, &tl[g]);
            td__pad6(V, (size_t)tb * C, np, cnt, C);
            td__pad6(V + (size_t)np * tb * C, (size_t)tb * K, np, cnt, K);
        }
#pragma omp for schedule(static)
        for (long it = 0; it < (long)G * tb; it++) {
            int g = (int)(it / tb), i = (int)(it % tb);
            if (i >= td__gblock(p, g, b, &g0))
                continue;
            float *V = p->scr + (size_t)g * p->scr_per;
            float *D = V + (size_t)np * tb * C;
            float *ts = p->tsum + (size_t)g * tb * K;
            td__t_input(p, &tl[g], x, C, i, i + 1, V, f);
            td__t_dy(p, &tl[g], dy, i, i + 1, D, ts, 1);
        }
#pragma omp for schedule(static)
        for (long it = 0; it < (long)G * (np + 1); it++) {
            int g = (int)(it / (np + 1)), k = (int)(it % (np + 1));
            int cnt = td__gblock(p, g, b, &g0);
            float *V = p->scr + (size_t)g * p->scr_per;
            float *D = V + (size_t)np * tb * C;
            if (!cnt)
                continue;
            if (k == np) { /* the bias gradient: the tiles' sums in order */
                const float *ts = p->tsum + (size_t)g * tb * K;
                float *db = dbs + (size_t)g * K;
                for (int i = 0; i < cnt; i++)
                    for (int c = 0; c < K; c++)
                        db[c] += ts[(size_t)i * K + c];
            } else {
                td__gw(D + (size_t)k * tb * K, V + (size_t)k * tb * C,
                       p->part + ((size_t)g * np + k) * ps, cnt, C, K,
                       b == 0);
            }
        }
    }
}

/* Class p's dw [K][C][9] and db [K] (NULL: not), overwritten. */
static void td__cls_bwdw(td__wc *p, const float *x, const td_fold *f,
                         const float *dy, float *dw, float *db)
{
    int C = p->ic, K = p->oc;
    size_t ps = (size_t)K * C;
    int nt = td__nthreads(p, p->threads);
    td__tiles tl[TD__GROUPS];
#pragma omp parallel num_threads(nt)
    {
        int me = omp_get_thread_num(), all = omp_get_num_threads();
        float *V = p->scr + (size_t)me * p->scr_per;
        float *D = V + (size_t)p->np * p->tbw * C;
        if (all > p->groups) /* the groups alone would leave threads idle */
            td__wide(p, x, f, dy, tl);
        else
            for (int g = me; g < p->groups; g += all)
                td__group(p, x, f, dy, g, V, D);
#pragma omp barrier
#pragma omp for schedule(static)
        for (long kc = 0; kc < (long)ps; kc += 8)
            td__t_reduce8(p, (size_t)kc, dw, p->groups);
    }
    if (db) {
        const float *b = p->part + (size_t)p->groups * p->np * ps;
        for (int k = 0; k < K; k++) {
            float s = 0;
            for (int g = 0; g < p->groups; g++)
                s += b[(size_t)g * K + k];
            db[k] = s;
        }
    }
}

void td_wino_bwdw(td_wino *p, const float *x, const float *dy, float *dw,
                  float *db, const td_fold *f)
{
    if (!p->part) /* a forward-only plan (td_wino_create_fwd) */
        return;
    td__cls_bwdw(&p->wcls, x, f, dy, dw, db);
}
