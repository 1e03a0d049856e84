/* cpu_wino.c - fp32 3x3 convolutions by Winograd F(2x2, 3x3) or F(4x4,
 * 3x3) on AVX2 + FMA in nChw8c (cpu_wino.h for what it computes and why).
 *
 * Owns: the plan and its tile choice, the F(2x2) transforms (cpu_wino4.c
 * has the F(4x4) ones), the matrix products, the blocking and the
 * threads.  A block is up to tb tiles (a multiple of 6, sized so that its
 * transformed input V [np][tb][ic] and products M [np][tb][oc] stay in a
 * thread's L2; np = 16 or 36 positions), numbered across the whole batch;
 * per block a thread transforms the input patches (one ymm = the 8
 * channels of one pixel), runs the np products (6 tiles x 16 output
 * channels in 12 accumulators, the input broadcast), and transforms the
 * products back into the output.  The input and output-gradient reads
 * prefetch the rows the next row of tiles reads first (on 16 channels the
 * transforms waited on memory as long as the products ran).  The weight
 * gradient's products accumulate per group of tiles in the group's own
 * [np][oc][ic] sums (6 output channels x 16 input channels in 12
 * accumulators), over blocks of tbw tiles, larger than the forward's (the
 * sums are read and written once per block), reduced in group order at
 * the end; the groups split over up to eight threads, and on more every
 * group's block b runs at once, split by tile and by position (td__wide),
 * with the same sums in the same order.
 * Never does: decide where it is used (cpu_kplan.c), anything with oneDNN.
 */
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_wino_int.h"

enum {
    TD__GROUPS = 8,             /* fixed groups of the weight gradient */
    TD__BLOCK_BYTES = 160 << 10, /* V and M of a forward block */
    TD__WBLOCK_BYTES = 640 << 10 /* V and D of a weight gradient's */
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
static int td__block(const td_wino *p, long bytes, long tiles)
{
    long tb = bytes / (p->np * (long)sizeof(float) * (p->ic + p->oc));
    long need = (tiles + 5) / 6 * 6;
    tb = tb / 6 * 6;
    tb = tb < 6 ? 6 : tb > TD__TB_MAX ? TD__TB_MAX : tb;
    return (int)(tb < need ? tb : need);
}

/* The plan; with grad, the weight gradient's sums and blocks too. */
static td_wino *td__create(int n, int h, int w, int ic, int oc, int threads,
                           int m, int grad)
{
    if (n < 1 || h < 1 || w < 1 || threads < 1 || (m != 2 && m != 4) ||
        !td_wino_ok(3, 1, 1, ic, oc))
        return NULL;
    td_wino *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    *p = (td_wino){.h = h, .w = w, .ic = ic, .oc = oc, .threads = threads,
                   .m = m, .np = (m + 2) * (m + 2), .th = (h + m - 1) / m,
                   .tw = (w + m - 1) / m};
    p->tiles = (long)n * p->th * p->tw;
    p->tb = td__block(p, TD__BLOCK_BYTES, p->tiles);
    /* a group of the weight gradient: a larger block (the products add
     * into the group's [np][oc][ic] sums once per block) */
    p->tbw = grad ? td__block(p, TD__WBLOCK_BYTES,
                              (p->tiles + TD__GROUPS - 1) / TD__GROUPS)
                  : 0;
    p->scr_per = (size_t)p->np * (p->tb > p->tbw ? p->tb : p->tbw) *
                 (size_t)(ic + oc);
    p->u = td__alloc((size_t)p->np * ic * oc);
    p->scr = td__alloc(p->scr_per * (size_t)threads);
    if (grad) {
        p->part = td__alloc((size_t)TD__GROUPS * (p->np * (size_t)ic + 1) *
                            oc);
        p->tsum = td__alloc((size_t)TD__GROUPS * p->tbw * oc);
    }
    if (!p->u || !p->scr || (grad && (!p->part || !p->tsum))) {
        td_wino_destroy(p);
        return NULL;
    }
    return p;
}

int td_wino_tile_for(int h, int w)
{
    const char *e = getenv("TD_CPU_WINO_TILE");
    if (e && (strcmp(e, "2") == 0 || strcmp(e, "4") == 0))
        return *e - '0';
    /* the products per image: 36 per 4x4 tile against 16 per 2x2 one;
     * on a tie the smaller tile (its transforms cost less) */
    long p4 = 36L * ((h + 3) / 4) * ((w + 3) / 4);
    long p2 = 16L * ((h + 1) / 2) * ((w + 1) / 2);
    return p4 < p2 ? 4 : 2;
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

int td_wino_tile(const td_wino *p) { return p->m; }

void td_wino_destroy(td_wino *p)
{
    if (!p)
        return;
    free(p->u);
    free(p->scr);
    free(p->part);
    free(p->tsum);
    free(p);
}

/* ---- weights -------------------------------------------------------- */

/* u = G g G^T, G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1], for 8
 * weights at once. */
TD__IN void td__ggt(const __m256 g[9], __m256 u[16])
{
    __m256 h = _mm256_set1_ps(0.5f), t[4][3];
#pragma GCC unroll 16
    for (int j = 0; j < 3; j++) {
        __m256 e = _mm256_add_ps(g[j], g[6 + j]);
        t[0][j] = g[j];
        t[1][j] = _mm256_mul_ps(h, _mm256_add_ps(e, g[3 + j]));
        t[2][j] = _mm256_mul_ps(h, _mm256_sub_ps(e, g[3 + j]));
        t[3][j] = g[6 + j];
    }
#pragma GCC unroll 16
    for (int r = 0; r < 4; r++) {
        __m256 e = _mm256_add_ps(t[r][0], t[r][2]);
        u[r * 4] = t[r][0];
        u[r * 4 + 1] = _mm256_mul_ps(h, _mm256_add_ps(e, t[r][1]));
        u[r * 4 + 2] = _mm256_mul_ps(h, _mm256_sub_ps(e, t[r][1]));
        u[r * 4 + 3] = t[r][2];
    }
}

/* U [16][C][K] for output channels k0 .. k0 + 7 (8 weights gathered per
 * input channel and tap). */
TD__AVX void td__weights8(td_wino *p, const float *w, int flip, int k0)
{
    int C = p->ic, K = p->oc;
    size_t plane = (size_t)C * K;
    for (int c = 0; c < C; c++) {
        __m256 g[9], u[16];
        td__taps8(w, flip, C, K, k0, c, g);
        td__ggt(g, u);
#pragma GCC unroll 16
        for (int x = 0; x < 16; x++)
            _mm256_store_ps(p->u + x * plane + (size_t)c * K + k0, u[x]);
    }
}

static void td__weights(td_wino *p, const float *w, int flip)
{
#pragma omp parallel for schedule(static)
    for (int k0 = 0; k0 < p->oc; k0 += 8) {
        if (p->m == 4)
            td__w4_weights8(p, w, flip, k0);
        else
            td__weights8(p, w, flip, k0);
    }
}

void td_wino_weights(td_wino *p, const float *w) { td__weights(p, w, 0); }

void td_wino_weights_flip(td_wino *p, const float *w)
{
    td__weights(p, w, 1);
}

/* ---- transforms ------------------------------------------------------ */

/* The 4x4 patch at (y0, x0) of one 8-channel plane [h][w][8], zero
 * outside. */
TD__IN void td__patch(const float *pl, int H, int W, int y0, int x0,
                      __m256 d[16])
{
    if (y0 >= 0 && y0 + 4 <= H && x0 >= 0 && x0 + 4 <= W) {
#pragma GCC unroll 16
        for (int r = 0; r < 4; r++)
#pragma GCC unroll 16
            for (int c = 0; c < 4; c++)
                d[r * 4 + c] =
                    _mm256_loadu_ps(pl + ((size_t)(y0 + r) * W + x0 + c) * 8);
        return;
    }
#pragma GCC unroll 16
    for (int r = 0; r < 4; r++)
#pragma GCC unroll 16
        for (int c = 0; c < 4; c++) {
            int y = y0 + r, x = x0 + c;
            d[r * 4 + c] = y >= 0 && y < H && x >= 0 && x < W
                               ? _mm256_loadu_ps(pl + ((size_t)y * W + x) * 8)
                               : _mm256_setzero_ps();
        }
}

/* v = B^T d B, B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]. */
TD__IN void td__bt(const __m256 d[16], __m256 v[16])
{
    __m256 t[16];
#pragma GCC unroll 16
    for (int j = 0; j < 4; j++) {
        t[j] = _mm256_sub_ps(d[j], d[8 + j]);
        t[4 + j] = _mm256_add_ps(d[4 + j], d[8 + j]);
        t[8 + j] = _mm256_sub_ps(d[8 + j], d[4 + j]);
        t[12 + j] = _mm256_sub_ps(d[4 + j], d[12 + j]);
    }
#pragma GCC unroll 16
    for (int r = 0; r < 16; r += 4) {
        v[r] = _mm256_sub_ps(t[r], t[r + 2]);
        v[r + 1] = _mm256_add_ps(t[r + 1], t[r + 2]);
        v[r + 2] = _mm256_sub_ps(t[r + 2], t[r + 1]);
        v[r + 3] = _mm256_sub_ps(t[r + 1], t[r + 3]);
    }
}

/* The 2x2 outputs A^T m A, A^T = [1 1 1 0; 0 1 -1 -1]: o[0] (0, 0),
 * o[1] (0, 1), o[2] (1, 0), o[3] (1, 1). */
TD__IN void td__at(const __m256 m[16], __m256 o[4])
{
    __m256 s0[4], s1[4];
#pragma GCC unroll 16
    for (int j = 0; j < 4; j++) {
        s0[j] = _mm256_add_ps(_mm256_add_ps(m[j], m[4 + j]), m[8 + j]);
        s1[j] = _mm256_sub_ps(_mm256_sub_ps(m[4 + j], m[8 + j]), m[12 + j]);
    }
    o[0] = _mm256_add_ps(_mm256_add_ps(s0[0], s0[1]), s0[2]);
    o[1] = _mm256_sub_ps(_mm256_sub_ps(s0[1], s0[2]), s0[3]);
    o[2] = _mm256_add_ps(_mm256_add_ps(s1[0], s1[1]), s1[2]);
    o[3] = _mm256_sub_ps(_mm256_sub_ps(s1[1], s1[2]), s1[3]);
}

/* m = A e A^T for the 2x2 output gradient e (as td__at's o), A = [1 0;
 * 1 1; 1 -1; 0 -1]. */
TD__IN void td__a_dy(const __m256 e[4], __m256 m[16])
{
    __m256 z = _mm256_setzero_ps(), r[4][2];
#pragma GCC unroll 16
    for (int j = 0; j < 2; j++) {
        r[0][j] = e[j];
        r[1][j] = _mm256_add_ps(e[j], e[2 + j]);
        r[2][j] = _mm256_sub_ps(e[j], e[2 + j]);
        r[3][j] = _mm256_sub_ps(z, e[2 + j]);
    }
#pragma GCC unroll 16
    for (int q = 0; q < 4; q++) {
        m[q * 4] = r[q][0];
        m[q * 4 + 1] = _mm256_add_ps(r[q][0], r[q][1]);
        m[q * 4 + 2] = _mm256_sub_ps(r[q][0], r[q][1]);
        m[q * 4 + 3] = _mm256_sub_ps(z, r[q][1]);
    }
}

static void td__coords(const td_wino *p, long g0, int cnt, int tb,
                       td__tiles *t)
{
    t->tb = tb;
    long per = (long)p->th * p->tw, r = g0 % per;
    int n = (int)(g0 / per), ty = (int)(r / p->tw), tx = (int)(r % p->tw);
    for (int i = 0; i < cnt; i++) {
        t->n[i] = n;
        t->y[i] = p->m * ty;
        t->x[i] = p->m * tx;
        if (++tx == p->tw) {
            tx = 0;
            if (++ty == p->th) {
                ty = 0;
                n++;
            }
        }
    }
}

/* Prefetches the two rows from y of a plane that the next row of tiles
 * reads and this one does not, over this tile's columns (x0 even: the
 * cache line of positions x0, x0 + 1, and with wide the one of x0 + 2,
 * x0 + 3): hardware prefetch alone left the input transform waiting on
 * memory (it took as long as the products on 16 channels). */
TD__IN void td__ahead(const float *pl, int H, int W, int y, int x0,
                      int wide)
{
    for (int r = y; r < y + 2 && r < H; r++) {
        const char *a = (const char *)(pl + ((size_t)r * W + x0) * 8);
        _mm_prefetch(a, _MM_HINT_T0);
        if (wide && x0 + 2 < W)
            _mm_prefetch(a + 64, _MM_HINT_T0);
    }
}

/* A tile's 16 transformed vectors into the 16 planes (stride s floats)
 * of a block's [16][tb][n] buffer. */
TD__IN void td__put16(float *o, size_t s, const __m256 v[16])
{
#pragma GCC unroll 16
    for (int k = 0; k < 16; k++)
        _mm256_store_ps(o + k * s, v[k]);
}

/* Rows i0 .. i1 - 1 of V [16][tb][C]: the tiles t of x (C channels). */
TD__AVX void td__input(const td_wino *p, const td__tiles *t,
                       const float *x, int C, int i0, int i1, float *V)
{
    size_t plane = (size_t)p->h * p->w * 8, xs = (size_t)t->tb * C;
    for (int i = i0; i < i1; i++) /* a tile's row of V at a time */
        for (int cb = 0; cb < C / 8; cb++) {
            __m256 d[16], v[16];
            const float *pl = x + ((size_t)t->n[i] * (C / 8) + cb) * plane;
            td__ahead(pl, p->h, p->w, t->y[i] + 3, t->x[i], 1);
            td__patch(pl, p->h, p->w, t->y[i] - 1, t->x[i] - 1, d);
            td__bt(d, v);
            td__put16(V + (size_t)i * C + (size_t)cb * 8, xs, v);
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

/* The outputs of the block's cnt tiles t from M [16][tb][K]. */
TD__AVX void td__output(const td_wino *p, const td__tiles *t, const float *M,
                        float *y, const float *bias, int cnt)
{
    int K = p->oc;
    size_t plane = (size_t)p->h * p->w * 8, ms = (size_t)t->tb * K;
    for (int i = 0; i < cnt; i++)
        for (int kb = 0; kb < K / 8; kb++) {
            int n = t->n[i], y0 = t->y[i], x0 = t->x[i];
            __m256 m[16], o[4];
            const float *s = M + (size_t)i * K + (size_t)kb * 8;
#pragma GCC unroll 16
            for (int k = 0; k < 16; k++)
                m[k] = _mm256_load_ps(s + k * ms);
            td__at(m, o);
            __m256 b = bias ? _mm256_loadu_ps(bias + kb * 8)
                            : _mm256_setzero_ps();
            float *pl = y + ((size_t)n * (K / 8) + kb) * plane;
#pragma GCC unroll 16
            for (int q = 0; q < 4; q++) {
                int yy = y0 + q / 2, xx = x0 + q % 2;
                if (yy < p->h && xx < p->w)
                    _mm256_storeu_ps(pl + ((size_t)yy * p->w + xx) * 8,
                                     _mm256_add_ps(o[q], b));
            }
        }
}

TD__AVX void td__fwd_block(const td_wino *p, const float *x, float *y,
                           const float *bias, long g0, int cnt, float *V,
                           float *M)
{
    int C = p->ic, K = p->oc, tb = p->tb, rows = (cnt + 5) / 6 * 6;
    td__tiles t;
    td__coords(p, g0, cnt, tb, &t);
    if (p->m == 4)
        td__w4_input(p, &t, x, C, 0, cnt, V);
    else
        td__input(p, &t, x, C, 0, cnt, V);
    td__pad6(V, (size_t)tb * C, p->np, cnt, C);
    for (int k = 0; k < p->np; k++)
        td__gemm(V + (size_t)k * tb * C, p->u + (size_t)k * C * K,
                 M + (size_t)k * tb * K, rows, C, K);
    if (p->m == 4)
        td__w4_output(p, &t, M, y, bias, cnt);
    else
        td__output(p, &t, M, y, bias, cnt);
}

static int td__nthreads(const td_wino *p, int cap)
{
    int nt = omp_get_max_threads();
    if (nt > p->threads)
        nt = p->threads;
    return nt > cap ? cap : nt < 1 ? 1 : nt;
}

void td_wino_fwd(td_wino *p, const float *x, float *y, const float *bias)
{
    long nb = (p->tiles + p->tb - 1) / p->tb;
    int nt = td__nthreads(p, nb < p->threads ? (int)nb : p->threads);
#pragma omp parallel num_threads(nt)
    {
        int me = omp_get_thread_num(), all = omp_get_num_threads();
        float *V = p->scr + (size_t)me * p->scr_per;
        float *M = V + (size_t)p->np * p->tb * p->ic;
        for (long b = nb * me / all; b < nb * (me + 1) / all; b++) {
            long g0 = b * p->tb;
            long cnt = p->tiles - g0 < p->tb ? p->tiles - g0 : p->tb;
            td__fwd_block(p, x, y, bias, g0, (int)cnt, V, M);
        }
    }
}

/* ---- backward weights ------------------------------------------------ */

/* Rows i0 .. i1 - 1 of D [16][tb][K] = A e A^T of the output gradient's
 * tiles; db[K] += each tile's sum of the gradient, or, with per_tile, the
 * tile i's sum into db + i * K. */
TD__AVX void td__dy(const td_wino *p, const td__tiles *t, const float *dy,
                    int i0, int i1, float *D, float *db, int per_tile)
{
    int K = p->oc;
    size_t plane = (size_t)p->h * p->w * 8, ds = (size_t)t->tb * K;
    for (int i = i0; i < i1; i++)
        for (int kb = 0; kb < K / 8; kb++) {
            int y0 = t->y[i], x0 = t->x[i];
            const float *pl = dy + ((size_t)t->n[i] * (K / 8) + kb) * plane;
            __m256 e[4], m[16];
            td__ahead(pl, p->h, p->w, y0 + 2, x0, 0);
#pragma GCC unroll 16
            for (int q = 0; q < 4; q++) {
                int yy = y0 + q / 2, xx = x0 + q % 2;
                e[q] = yy < p->h && xx < p->w
                           ? _mm256_loadu_ps(pl +
                                             ((size_t)yy * p->w + xx) * 8)
                           : _mm256_setzero_ps();
            }
            __m256 s = _mm256_add_ps(_mm256_add_ps(e[0], e[1]),
                                     _mm256_add_ps(e[2], e[3]));
            td__dbsum(db, per_tile, i, K, kb, s);
            td__a_dy(e, m);
            td__put16(D + (size_t)i * K + (size_t)kb * 8, ds, m);
        }
}

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
static void td__group(td_wino *p, const float *x, const float *dy, int g,
                      float *V, float *D)
{
    int C = p->ic, K = p->oc, tb = p->tbw, np = p->np;
    size_t ps = (size_t)K * C;
    float *P = p->part + (size_t)g * np * ps;
    float *db = p->part + (size_t)TD__GROUPS * np * ps + (size_t)g * K;
    memset(db, 0, (size_t)K * sizeof(float));
    long t0 = p->tiles * g / TD__GROUPS, t1 = p->tiles * (g + 1) / TD__GROUPS;
    if (t0 == t1) /* no tiles (fewer than groups): its first block zeroes */
        memset(P, 0, np * ps * sizeof(float));
    for (long g0 = t0; g0 < t1; g0 += tb) {
        int cnt = (int)(t1 - g0 < tb ? t1 - g0 : tb);
        td__tiles t;
        td__coords(p, g0, cnt, tb, &t);
        if (np == 36) {
            td__w4_input(p, &t, x, C, 0, cnt, V);
            td__w4_dy(p, &t, dy, 0, cnt, D, db, 0);
        } else {
            td__input(p, &t, x, C, 0, cnt, V);
            td__dy(p, &t, dy, 0, cnt, D, db, 0);
        }
        td__pad6(V, (size_t)tb * C, np, cnt, C);
        td__pad6(D, (size_t)tb * K, np, cnt, K);
        for (int k = 0; k < np; k++)
            td__gw(D + (size_t)k * tb * K, V + (size_t)k * tb * C,
                   P + k * ps, cnt, C, K, g0 == t0);
    }
}

/* The tiles of group g's block b (0 when it has fewer blocks) and its
 * first tile in *g0. */
static int td__gblock(const td_wino *p, int g, long b, long *g0)
{
    long t0 = p->tiles * g / TD__GROUPS, t1 = p->tiles * (g + 1) / TD__GROUPS;
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
static void td__wide(td_wino *p, const float *x, const float *dy,
                     td__tiles *tl)
{
    int C = p->ic, K = p->oc, tb = p->tbw, np = p->np, G = TD__GROUPS;
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
            if (np == 36) {
                td__w4_input(p, &tl[g], x, C, i, i + 1, V);
                td__w4_dy(p, &tl[g], dy, i, i + 1, D, ts, 1);
            } else {
                td__input(p, &tl[g], x, C, i, i + 1, V);
                td__dy(p, &tl[g], dy, i, i + 1, D, ts, 1);
            }
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

/* g = G^T u G (3x3 from 4x4), G^T = [1 1/2 1/2 0; 0 1/2 -1/2 0;
 * 0 1/2 1/2 1], for 8 gradients at once. */
TD__IN void td__gtug(const __m256 u[16], __m256 g[9])
{
    __m256 h = _mm256_set1_ps(0.5f), q[3][4];
#pragma GCC unroll 16
    for (int j = 0; j < 4; j++) {
        __m256 e = _mm256_mul_ps(h, _mm256_add_ps(u[4 + j], u[8 + j]));
        q[0][j] = _mm256_add_ps(u[j], e);
        q[1][j] = _mm256_mul_ps(h, _mm256_sub_ps(u[4 + j], u[8 + j]));
        q[2][j] = _mm256_add_ps(e, u[12 + j]);
    }
#pragma GCC unroll 16
    for (int r = 0; r < 3; r++) {
        __m256 e = _mm256_mul_ps(h, _mm256_add_ps(q[r][1], q[r][2]));
        g[r * 3] = _mm256_add_ps(q[r][0], e);
        g[r * 3 + 1] = _mm256_mul_ps(h, _mm256_sub_ps(q[r][1], q[r][2]));
        g[r * 3 + 2] = _mm256_add_ps(e, q[r][3]);
    }
}

/* dw of the 8 (output, input) channel pairs kc .. kc + 7 of [K][C]: the
 * groups' sums in group order, then G^T . G. */
TD__AVX void td__reduce8(const td_wino *p, size_t kc, float *dw)
{
    size_t ps = (size_t)p->oc * p->ic;
    __m256 u[16], g[9];
    float t[9][8];
#pragma GCC unroll 16
    for (int x = 0; x < 16; x++) {
        __m256 a = _mm256_load_ps(p->part + (size_t)x * ps + kc);
        for (int gr = 1; gr < TD__GROUPS; gr++)
            a = _mm256_add_ps(
                a, _mm256_load_ps(p->part + ((size_t)gr * 16 + x) * ps + kc));
        u[x] = a;
    }
    td__gtug(u, g);
#pragma GCC unroll 16
    for (int q = 0; q < 9; q++)
        _mm256_storeu_ps(t[q], g[q]);
    for (int j = 0; j < 8; j++)
        for (int q = 0; q < 9; q++)
            dw[(kc + (size_t)j) * 9 + q] = t[q][j];
}

void td_wino_bwdw(td_wino *p, const float *x, const float *dy, float *dw,
                  float *db)
{
    int C = p->ic, K = p->oc;
    size_t ps = (size_t)K * C;
    if (!p->part) /* a forward-only plan (td_wino_create_fwd) */
        return;
    int nt = td__nthreads(p, p->threads);
    td__tiles tl[TD__GROUPS];
#pragma omp parallel num_threads(nt)
    {
        int me = omp_get_thread_num(), all = omp_get_num_threads();
        float *V = p->scr + (size_t)me * p->scr_per;
        float *D = V + (size_t)p->np * p->tbw * C;
        if (all > TD__GROUPS) /* the groups alone would leave threads idle */
            td__wide(p, x, dy, tl);
        else
            for (int g = me; g < TD__GROUPS; g += all)
                td__group(p, x, dy, g, V, D);
#pragma omp barrier
#pragma omp for schedule(static)
        for (long kc = 0; kc < (long)ps; kc += 8) {
            if (p->m == 4)
                td__w4_reduce8(p, (size_t)kc, dw, TD__GROUPS);
            else
                td__reduce8(p, (size_t)kc, dw);
        }
    }
    if (db) {
        const float *b = p->part + (size_t)TD__GROUPS * p->np * ps;
        for (int k = 0; k < K; k++) {
            float s = 0;
            for (int g = 0; g < TD__GROUPS; g++)
                s += b[(size_t)g * K + k];
            db[k] = s;
        }
    }
}
