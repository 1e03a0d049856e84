/* cpu_wino4.c - the transforms of Winograd F(4x4, 3x3) for cpu_wino.c's
 * fp32 nChw8c convolutions on AVX2 + FMA (cpu_wino.h for what the plan
 * computes; cpu_wino.c runs the blocks, the products and the threads).
 *
 * Owns: the 6x6 input patch transform V = B^T d B, the weights' U = G g
 * G^T, the 4x4 output's Y = A^T M A, and for the weight gradient the
 * output gradient's A dY A^T and dW = G^T dU G, each for 8 channels (one
 * ymm) at a time, as a pass over the rows then one over the columns (a
 * 1-D transform of 6 or 4 vectors, the rest on the stack).
 *
 * The interpolation points are 0, 1, -1, 2, -1/2 and infinity (Toom-Cook;
 * scripts/wino_error.py derives the same matrices and measures their
 * error):
 *   B^T = [1  3/2 -2   -3/2  1   0]     G = [ 1      0     0   ]
 *         [0 -1   -5/2 -1/2  1   0]         [-1/3  -1/3  -1/3  ]
 *         [0  1    1/2 -5/2  1   0]         [ 1/3  -1/3   1/3  ]
 *         [0 -1/2 -1    1/2  1   0]         [ 1/15  2/15  4/15 ]
 *         [0  2   -1   -2    1   0]         [-16/15 8/15 -4/15 ]
 *         [0  1    3/2 -2   -3/2 1]         [ 0      0     1   ]
 *   A^T = [1 1  1 1    1     0]
 *         [0 1 -1 2   -1/2   0]
 *         [0 1  1 4    1/4   0]
 *         [0 1 -1 8   -1/8   1]
 * The points 0, +-1, +-2 measured 2.4-2.8x this error (docs/compute.md,
 * scripts/wino_error.py).
 * Never does: pick the tile (cpu_wino.c), the products, threads.
 */
#include "backend/cpu/cpu_wino_int.h"

#define TD__S(x) _mm256_set1_ps(x)

/* ---- 1-D transforms ------------------------------------------------- */

/* The 6 values of G (g0, g1, g2). */
TD__IN void td__g6(__m256 g0, __m256 g1, __m256 g2, __m256 u[6])
{
    __m256 s = _mm256_add_ps(g0, g2);
    u[0] = g0;
    u[1] = _mm256_mul_ps(TD__S(-1.0f / 3), _mm256_add_ps(s, g1));
    u[2] = _mm256_mul_ps(TD__S(1.0f / 3), _mm256_sub_ps(s, g1));
    u[3] = _mm256_mul_ps(TD__S(1.0f / 15),
                         _mm256_fmadd_ps(TD__S(4), g2,
                                         _mm256_fmadd_ps(TD__S(2), g1, g0)));
    u[4] = _mm256_mul_ps(TD__S(-4.0f / 15),
                         _mm256_fmadd_ps(TD__S(4), g0,
                                         _mm256_fmadd_ps(TD__S(-2), g1, g2)));
    u[5] = g2;
}

/* B^T d of 6 values. */
TD__IN void td__bt6(const __m256 d[6], __m256 v[6])
{
    __m256 a = _mm256_sub_ps(d[4], d[2]), b = _mm256_sub_ps(d[1], d[3]);
    v[0] = _mm256_fmadd_ps(TD__S(1.5f), b,
                           _mm256_fmadd_ps(TD__S(-2), d[2],
                                           _mm256_add_ps(d[0], d[4])));
    v[1] = _mm256_fmadd_ps(TD__S(-0.5f), d[3],
                           _mm256_fmadd_ps(TD__S(-2.5f), d[2],
                                           _mm256_sub_ps(d[4], d[1])));
    v[2] = _mm256_fmadd_ps(TD__S(-2.5f), d[3],
                           _mm256_fmadd_ps(TD__S(0.5f), d[2],
                                           _mm256_add_ps(d[4], d[1])));
    v[3] = _mm256_fmadd_ps(TD__S(-0.5f), b, a);
    v[4] = _mm256_fmadd_ps(TD__S(2), b, a);
    v[5] = _mm256_fmadd_ps(TD__S(-1.5f), a,
                           _mm256_fmadd_ps(TD__S(-2), d[3],
                                           _mm256_add_ps(d[1], d[5])));
}

/* A^T m of 6 values: 4. */
TD__IN void td__at6(const __m256 m[6], __m256 o[4])
{
    __m256 p = _mm256_add_ps(m[1], m[2]), q = _mm256_sub_ps(m[1], m[2]);
    o[0] = _mm256_add_ps(_mm256_add_ps(p, m[3]), _mm256_add_ps(m[4], m[0]));
    o[1] = _mm256_fmadd_ps(TD__S(-0.5f), m[4],
                           _mm256_fmadd_ps(TD__S(2), m[3], q));
    o[2] = _mm256_fmadd_ps(TD__S(0.25f), m[4],
                           _mm256_fmadd_ps(TD__S(4), m[3], p));
    o[3] = _mm256_add_ps(_mm256_fmadd_ps(TD__S(-0.125f), m[4],
                                         _mm256_fmadd_ps(TD__S(8), m[3], q)),
                         m[5]);
}

/* A e of 4 values (the adjoint of td__at6): 6. */
TD__IN void td__a6(const __m256 e[4], __m256 m[6])
{
    __m256 s = _mm256_add_ps(e[0], e[2]), t = _mm256_add_ps(e[1], e[3]);
    m[0] = e[0];
    m[1] = _mm256_add_ps(s, t);
    m[2] = _mm256_sub_ps(s, t);
    m[3] = _mm256_fmadd_ps(TD__S(8), e[3],
                           _mm256_fmadd_ps(TD__S(4), e[2],
                                           _mm256_fmadd_ps(TD__S(2), e[1],
                                                           e[0])));
    m[4] = _mm256_fmadd_ps(TD__S(-0.125f), e[3],
                           _mm256_fmadd_ps(TD__S(0.25f), e[2],
                                           _mm256_fmadd_ps(TD__S(-0.5f), e[1],
                                                           e[0])));
    m[5] = e[3];
}

/* G^T u of 6 values (the adjoint of td__g6): 3. */
TD__IN void td__gt6(const __m256 u[6], __m256 g[3])
{
    __m256 dm = _mm256_sub_ps(u[2], u[1]), sm = _mm256_add_ps(u[1], u[2]);
    g[0] = _mm256_fmadd_ps(TD__S(-16.0f / 15), u[4],
                           _mm256_fmadd_ps(TD__S(1.0f / 15), u[3],
                                           _mm256_fmadd_ps(TD__S(1.0f / 3),
                                                           dm, u[0])));
    g[1] = _mm256_fmadd_ps(TD__S(8.0f / 15), u[4],
                           _mm256_fmadd_ps(TD__S(-1.0f / 3), sm,
                                           _mm256_mul_ps(TD__S(2.0f / 15),
                                                         u[3])));
    g[2] = _mm256_fmadd_ps(TD__S(-4.0f / 15), u[4],
                           _mm256_fmadd_ps(TD__S(4.0f / 15), u[3],
                                           _mm256_fmadd_ps(TD__S(1.0f / 3),
                                                           dm, u[5])));
}

/* ---- weights -------------------------------------------------------- */

void TD__AVXG td__w4_weights8(td_wino *p, const float *w, int flip, int k0)
{
    int C = p->ic, K = p->oc;
    size_t plane = (size_t)C * K;
    for (int c = 0; c < C; c++) {
        __m256 g[9], r[3][6], u[6];
        td__taps8(w, flip, C, K, k0, c, g);
#pragma GCC unroll 3
        for (int a = 0; a < 3; a++) /* g G^T: each kernel row */
            td__g6(g[a * 3], g[a * 3 + 1], g[a * 3 + 2], r[a]);
#pragma GCC unroll 6
        for (int j = 0; j < 6; j++) { /* G (g G^T): each column */
            td__g6(r[0][j], r[1][j], r[2][j], u);
#pragma GCC unroll 6
            for (int i = 0; i < 6; i++)
                _mm256_store_ps(p->u + (size_t)(i * 6 + j) * plane +
                                    (size_t)c * K + k0,
                                u[i]);
        }
    }
}

/* ---- input ---------------------------------------------------------- */

/* Prefetches rows y .. y + 3 of a plane over the 4 positions from x0
 * (two cache lines): what the next row of tiles reads and this one does
 * not (cpu_wino.c's td__ahead for the smaller tile). */
TD__IN void td__ahead4(const float *pl, int H, int W, int y, int x0)
{
    for (int r = y; r < y + 4 && r < H; r++) {
        const char *a = (const char *)(pl + ((size_t)r * W + x0) * 8);
        _mm_prefetch(a, _MM_HINT_T0);
        if (x0 + 2 < W)
            _mm_prefetch(a + 64, _MM_HINT_T0);
    }
}

/* The patch's row at image row y, columns x0 .. x0 + 5: d[6], zero
 * outside the image (inside: the whole patch is in it). */
TD__IN void td__row6(const float *pl, int H, int W, int y, int x0,
                     int inside, __m256 d[6])
{
    if (inside) {
        const float *s = pl + ((size_t)y * W + x0) * 8;
#pragma GCC unroll 6
        for (int c = 0; c < 6; c++)
            d[c] = _mm256_loadu_ps(s + c * 8);
        return;
    }
#pragma GCC unroll 6
    for (int c = 0; c < 6; c++) {
        int x = x0 + c;
        d[c] = y >= 0 && y < H && x >= 0 && x < W
                   ? _mm256_loadu_ps(pl + ((size_t)y * W + x) * 8)
                   : _mm256_setzero_ps();
    }
}

void TD__AVXG td__w4_input(const td_wino *p, const td__tiles *t,
                           const float *x, int C, int i0, int i1, float *V)
{
    int H = p->h, W = p->w;
    size_t plane = (size_t)H * W * 8, xs = (size_t)t->tb * C;
    for (int i = i0; i < i1; i++) {
        int y0 = t->y[i] - 1, x0 = t->x[i] - 1;
        int inside = y0 >= 0 && y0 + 6 <= H && x0 >= 0 && x0 + 6 <= W;
        for (int cb = 0; cb < C / 8; cb++) {
            const float *pl = x + ((size_t)t->n[i] * (C / 8) + cb) * plane;
            __m256 r[6][6], d[6], v[6];
            td__ahead4(pl, H, W, y0 + 6, x0 + 1);
#pragma GCC unroll 6
            for (int a = 0; a < 6; a++) { /* d B: each row */
                td__row6(pl, H, W, y0 + a, x0, inside, d);
                td__bt6(d, r[a]);
            }
            float *o = V + (size_t)i * C + (size_t)cb * 8;
#pragma GCC unroll 6
            for (int j = 0; j < 6; j++) { /* B^T (d B): each column */
#pragma GCC unroll 6
                for (int a = 0; a < 6; a++)
                    d[a] = r[a][j];
                td__bt6(d, v);
#pragma GCC unroll 6
                for (int k = 0; k < 6; k++)
                    _mm256_store_ps(o + (size_t)(k * 6 + j) * xs, v[k]);
            }
        }
    }
}

/* ---- output --------------------------------------------------------- */

void TD__AVXG td__w4_output(const td_wino *p, const td__tiles *t,
                            const float *M, float *y, const float *bias,
                            int cnt)
{
    int K = p->oc, H = p->h, W = p->w;
    size_t plane = (size_t)H * W * 8, ms = (size_t)t->tb * K;
    for (int i = 0; i < cnt; i++) {
        int y0 = t->y[i], x0 = t->x[i];
        int inside = y0 + 4 <= H && x0 + 4 <= W;
        for (int kb = 0; kb < K / 8; kb++) {
            const float *s = M + (size_t)i * K + (size_t)kb * 8;
            __m256 r[6][4], m[6], o[4];
#pragma GCC unroll 6
            for (int a = 0; a < 6; a++) { /* M A: each row */
#pragma GCC unroll 6
                for (int j = 0; j < 6; j++)
                    m[j] = _mm256_load_ps(s + (size_t)(a * 6 + j) * ms);
                td__at6(m, r[a]);
            }
            __m256 b = bias ? _mm256_loadu_ps(bias + kb * 8)
                            : _mm256_setzero_ps();
            float *pl = y + ((size_t)t->n[i] * (K / 8) + kb) * plane;
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++) { /* A^T (M A): each column */
#pragma GCC unroll 6
                for (int a = 0; a < 6; a++)
                    m[a] = r[a][j];
                td__at6(m, o);
#pragma GCC unroll 4
                for (int q = 0; q < 4; q++) {
                    int yy = y0 + q, xx = x0 + j;
                    if (inside || (yy < H && xx < W))
                        _mm256_storeu_ps(pl + ((size_t)yy * W + xx) * 8,
                                         _mm256_add_ps(o[q], b));
                }
            }
        }
    }
}

/* ---- backward weights ----------------------------------------------- */

void TD__AVXG td__w4_dy(const td_wino *p, const td__tiles *t,
                        const float *dy, int i0, int i1, float *D, float *db,
                        int per_tile)
{
    int K = p->oc, H = p->h, W = p->w;
    size_t plane = (size_t)H * W * 8, ds = (size_t)t->tb * K;
    for (int i = i0; i < i1; i++) {
        int y0 = t->y[i], x0 = t->x[i];
        int inside = y0 + 4 <= H && x0 + 4 <= W;
        for (int kb = 0; kb < K / 8; kb++) {
            const float *pl = dy + ((size_t)t->n[i] * (K / 8) + kb) * plane;
            __m256 r[4][6], e[4], m[6], s = _mm256_setzero_ps();
            td__ahead4(pl, H, W, y0 + 4, x0);
#pragma GCC unroll 4
            for (int a = 0; a < 4; a++) { /* e A^T: each row */
#pragma GCC unroll 4
                for (int j = 0; j < 4; j++) {
                    int yy = y0 + a, xx = x0 + j;
                    e[j] = inside || (yy < H && xx < W)
                               ? _mm256_loadu_ps(pl +
                                                 ((size_t)yy * W + xx) * 8)
                               : _mm256_setzero_ps();
                }
                s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(e[0], e[1]),
                                                   _mm256_add_ps(e[2], e[3])));
                td__a6(e, r[a]);
            }
            td__dbsum(db, per_tile, i, K, kb, s);
            float *o = D + (size_t)i * K + (size_t)kb * 8;
#pragma GCC unroll 6
            for (int j = 0; j < 6; j++) { /* A (e A^T): each column */
#pragma GCC unroll 4
                for (int a = 0; a < 4; a++)
                    e[a] = r[a][j];
                td__a6(e, m);
#pragma GCC unroll 6
                for (int k = 0; k < 6; k++)
                    _mm256_store_ps(o + (size_t)(k * 6 + j) * ds, m[k]);
            }
        }
    }
}

void TD__AVXG td__w4_reduce8(const td_wino *p, size_t kc, float *dw,
                             int groups)
{
    size_t ps = (size_t)p->oc * p->ic;
    __m256 u[6], r[6][3], g[3];
    float t[9][8];
#pragma GCC unroll 6
    for (int a = 0; a < 6; a++) { /* the groups' sums, then dU G: a row */
#pragma GCC unroll 6
        for (int j = 0; j < 6; j++) {
            size_t x = (size_t)(a * 6 + j);
            __m256 s = _mm256_load_ps(p->part + x * ps + kc);
            for (int gr = 1; gr < groups; gr++)
                s = _mm256_add_ps(
                    s, _mm256_load_ps(p->part + ((size_t)gr * 36 + x) * ps +
                                      kc));
            u[j] = s;
        }
        td__gt6(u, r[a]);
    }
#pragma GCC unroll 3
    for (int j = 0; j < 3; j++) { /* G^T (dU G): each column */
#pragma GCC unroll 6
        for (int a = 0; a < 6; a++)
            u[a] = r[a][j];
        td__gt6(u, g);
#pragma GCC unroll 3
        for (int q = 0; q < 3; q++)
            _mm256_storeu_ps(t[q * 3 + j], g[q]);
    }
    for (int j = 0; j < 8; j++)
        for (int q = 0; q < 9; q++)
            dw[(kc + (size_t)j) * 9 + q] = t[q][j];
}
