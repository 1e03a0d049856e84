/* cpu_wino_tr.c - the transforms of Winograd F(mh x mw, 3x3), mh and mw
 * each 2 or 4, for cpu_wino.c's fp32 nChw8c convolutions on AVX2 + FMA
 * (cpu_wino.h for what the plan computes; cpu_wino.c runs the classes,
 * the blocks, the products and the threads).
 *
 * Owns: for a tile of mh x mw outputs, the (mh+2) x (mw+2) input patch
 * transform V = B_h^T d B_w, the weights' U = G_h g G_w^T, the output's
 * Y = A_h^T M A_w, and for the weight gradient the output gradient's
 * A_h dY A_w^T and dW = G_h^T dU G_w, each for 8 channels (one ymm) at a
 * time, as a pass over the rows (the 1-D transform of the columns' size)
 * then one over the columns (the rows' size), the rest on the stack.  A
 * 1-D transform is F(4, 3)'s on 6 values or F(2, 3)'s on 4; each entry
 * point dispatches on the class's shape to a body whose sizes are
 * constants.
 *
 * F(4, 3): interpolation points 0, 1, -1, 2, -1/2 and infinity
 * (Toom-Cook; scripts/wino_error.py derives the same matrices and
 * measures their error):
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
 * scripts/wino_error.py).  F(2, 3): points 0, 1, -1 and infinity,
 *   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1],
 *   G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1],
 *   A^T = [1 1 1 0; 0 1 -1 -1].
 * Never does: pick the classes (cpu_wino.c), the products, threads.
 */
#include "backend/cpu/cpu_fold.h"
#include "backend/cpu/cpu_wino_int.h"

#define TD__S(x) _mm256_set1_ps(x)

/* p, opaque to the optimizer.  A transform touches a tile's np positions
 * of a [np][tb][channels] buffer, one vector each, np strides apart; left
 * alone, GCC keeps one pointer per position across the loop over the
 * tiles and channel blocks (36 for 6x6 tiles), on the stack, loaded and
 * incremented there each time: 2 memory operations more per vector stored
 * or loaded.  Walking a hidden pointer by the stride instead costs an add
 * in a register (the input transform: 56 -> 48 ns per tile and 8
 * channels, a microbenchmark with its data in cache). */
#define TD__HIDE(p) __asm__("" : "+r"(p))

/* ---- 1-D transforms: F(4, 3) on 6 values ---------------------------- */


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

/* ---- 1-D transforms: F(2, 3) on 4 values ---------------------------- */

/* The 4 values of G (g0, g1, g2). */
TD__IN void td__g4(__m256 g0, __m256 g1, __m256 g2, __m256 u[4])
{
    __m256 e = _mm256_add_ps(g0, g2);
    u[0] = g0;
    u[1] = _mm256_mul_ps(TD__S(0.5f), _mm256_add_ps(e, g1));
    u[2] = _mm256_mul_ps(TD__S(0.5f), _mm256_sub_ps(e, g1));
    u[3] = g2;
}

/* B^T d of 4 values. */
TD__IN void td__bt4(const __m256 d[4], __m256 v[4])
{
    v[0] = _mm256_sub_ps(d[0], d[2]);
    v[1] = _mm256_add_ps(d[1], d[2]);
    v[2] = _mm256_sub_ps(d[2], d[1]);
    v[3] = _mm256_sub_ps(d[1], d[3]);
}

/* A^T m of 4 values: 2. */
TD__IN void td__at4(const __m256 m[4], __m256 o[2])
{
    o[0] = _mm256_add_ps(_mm256_add_ps(m[0], m[1]), m[2]);
    o[1] = _mm256_sub_ps(_mm256_sub_ps(m[1], m[2]), m[3]);
}

/* A e of 2 values (the adjoint of td__at4): 4. */
TD__IN void td__a4(const __m256 e[2], __m256 m[4])
{
    m[0] = e[0];
    m[1] = _mm256_add_ps(e[0], e[1]);
    m[2] = _mm256_sub_ps(e[0], e[1]);
    m[3] = _mm256_sub_ps(_mm256_setzero_ps(), e[1]);
}

/* G^T u of 4 values (the adjoint of td__g4): 3. */
TD__IN void td__gt4(const __m256 u[4], __m256 g[3])
{
    __m256 e = _mm256_mul_ps(TD__S(0.5f), _mm256_add_ps(u[1], u[2]));
    g[0] = _mm256_add_ps(u[0], e);
    g[1] = _mm256_mul_ps(TD__S(0.5f), _mm256_sub_ps(u[1], u[2]));
    g[2] = _mm256_add_ps(e, u[3]);
}

/* ---- by size (n: 6 or 4 values, a constant after inlining) ----------- */

TD__IN void td__g_n(const int n, __m256 g0, __m256 g1, __m256 g2,
                    __m256 *u)
{
    if (n == 6)
        td__g6(g0, g1, g2, u);
    else
        td__g4(g0, g1, g2, u);
}

/* name(n, in, out): the 6-value transform T6 or the 4-value one T4. */
#define TD__BY_SIZE(name, T6, T4)                                            \
    TD__IN void name(const int n, const __m256 *in, __m256 *out)             \
    {                                                                        \
        if (n == 6)                                                          \
            T6(in, out);                                                     \
        else                                                                 \
            T4(in, out);                                                     \
    }

TD__BY_SIZE(td__bt_n, td__bt6, td__bt4)
TD__BY_SIZE(td__at_n, td__at6, td__at4)
TD__BY_SIZE(td__a_n, td__a6, td__a4)
TD__BY_SIZE(td__gt_n, td__gt6, td__gt4)

/* The entry point F's body B for the class's shape: B(args, mh, mw) with
 * mh and mw constants. */
#define TD__SHAPES(p, B, ...)                                                \
    do {                                                                     \
        if ((p)->mh == 4 && (p)->mw == 4)                                    \
            B(__VA_ARGS__, 4, 4);                                            \
        else if ((p)->mh == 4)                                               \
            B(__VA_ARGS__, 4, 2);                                            \
        else if ((p)->mw == 4)                                               \
            B(__VA_ARGS__, 2, 4);                                            \
        else                                                                 \
            B(__VA_ARGS__, 2, 2);                                            \
    } while (0)

/* ---- weights -------------------------------------------------------- */

/* U of output channels k0 .. k0 + 15 (k0 a multiple of 16), per input
 * channel and half; with nt both halves' np vectors first, then each
 * position's 64 bytes (a whole cache line) at once by non-temporal
 * stores (a half line so stored costs a memory transaction of its own);
 * without, each vector as it comes. */
TD__IN void td__weights_b(td__wc *p, const float *w, int flip, int k0,
                          const int nt, const int mh, const int mw)
{
    const int ph = mh + 2, pw = mw + 2, np = ph * pw;
    int C = p->ic, K = p->oc;
    size_t plane = (size_t)C * K;
    for (int c = 0; c < C; c++) {
        __m256 t[2][36];
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m256 g[9], r[3][6], u[6];
            td__taps8(w, flip, C, K, k0 + 8 * h, c, g);
#pragma GCC unroll 3
            for (int a = 0; a < 3; a++) /* g G_w^T: each kernel row */
                td__g_n(pw, g[a * 3], g[a * 3 + 1], g[a * 3 + 2], r[a]);
#pragma GCC unroll 6
            for (int j = 0; j < pw; j++) { /* G_h (g G_w^T): each column */
                td__g_n(ph, r[0][j], r[1][j], r[2][j], u);
#pragma GCC unroll 6
                for (int i = 0; i < ph; i++) {
                    if (nt)
                        t[h][i * pw + j] = u[i];
                    else
                        _mm256_store_ps(p->u + (size_t)(i * pw + j) * plane +
                                            (size_t)c * K + k0 + 8 * h,
                                        u[i]);
                }
            }
        }
        float *o = p->u + (size_t)c * K + k0;
        for (int k = 0; nt && k < np; k++, o += plane) {
            _mm256_stream_ps(o, t[0][k]);
            _mm256_stream_ps(o + 8, t[1][k]);
        }
    }
}

void TD__AVXG td__t_weights16(td__wc *p, const float *w, int flip, int k0,
                              int nt)
{
    if (nt)
        TD__SHAPES(p, td__weights_b, p, w, flip, k0, 1);
    else
        TD__SHAPES(p, td__weights_b, p, w, flip, k0, 0);
}

/* ---- input ---------------------------------------------------------- */

/* Prefetches rows y .. y + n - 1 of a plane at positions x0 .. x0 + 3
 * (two cache lines, with wide) or x0 .. x0 + 1: what the next row of
 * tiles reads and this one does not (hardware prefetch alone left the
 * transforms waiting on memory: on 16 channels as long as the products
 * ran). */
TD__IN void td__ahead(const float *pl, int H, int W, int y, int x0, int n,
                      int wide)
{
    for (int r = y; r < y + n && r < H; r++) {
        const char *a = (const char *)(pl + ((size_t)r * W + x0) * 8);
        _mm_prefetch(a, _MM_HINT_T0);
        if (wide && x0 + 2 < W)
            _mm_prefetch(a + 64, _MM_HINT_T0);
    }
}

/* The patch's row at image row y, columns x0 .. x0 + n - 1: d[n], zero
 * outside the image (inside: the whole patch is in it); with fl each
 * value inside folded (fm, fa, fb: the 8 channels' mean, scale, shift). */
TD__IN void td__row(const float *pl, int H, int W, int y, int x0,
                    int inside, __m256 *d, const int n, const int fl,
                    __m256 fm, __m256 fa, __m256 fb)
{
    if (inside) {
        const float *s = pl + ((size_t)y * W + x0) * 8;
#pragma GCC unroll 6
        for (int c = 0; c < n; c++) {
            d[c] = _mm256_loadu_ps(s + c * 8);
            if (fl)
                d[c] = td_fold8(d[c], fm, fa, fb);
        }
        return;
    }
#pragma GCC unroll 6
    for (int c = 0; c < n; c++) {
        int x = x0 + c;
        if (y >= 0 && y < H && x >= 0 && x < W) {
            d[c] = _mm256_loadu_ps(pl + ((size_t)y * W + x) * 8);
            if (fl)
                d[c] = td_fold8(d[c], fm, fa, fb);
        } else {
            d[c] = _mm256_setzero_ps();
        }
    }
}

TD__IN void td__input_b(const td__wc *p, const td__tiles *t, const float *x,
                        int C, int i0, int i1, float *V, const td_fold *f,
                        const int fl, const int mh, const int mw)
{
    const int ph = mh + 2, pw = mw + 2;
    int H = p->h, W = p->w;
    size_t plane = (size_t)H * W * 8, xs = (size_t)t->tb * C;
    for (int i = i0; i < i1; i++) {
        int y0 = t->y[i] - 1, x0 = t->x[i] - 1;
        int inside = y0 >= 0 && y0 + ph <= H && x0 >= 0 && x0 + pw <= W;
        for (int cb = 0; cb < C / 8; cb++) {
            const float *pl = x + ((size_t)t->n[i] * (C / 8) + cb) * plane;
            __m256 r[6][6], d[6], v[6], fm, fa, fb;
            fm = fa = fb = _mm256_setzero_ps();
            if (fl) {
                fm = _mm256_loadu_ps(f->mean + cb * 8);
                fa = _mm256_loadu_ps(f->a + cb * 8);
                fb = _mm256_loadu_ps(f->b + cb * 8);
            }
            td__ahead(pl, H, W, y0 + ph, x0 + 1, mh, 1);
#pragma GCC unroll 6
            for (int a = 0; a < ph; a++) { /* d B_w: each row */
                td__row(pl, H, W, y0 + a, x0, inside, d, pw, fl, fm, fa, fb);
                td__bt_n(pw, d, r[a]);
            }
            float *o = V + (size_t)i * C + (size_t)cb * 8;
            TD__HIDE(o);
#pragma GCC unroll 6
            for (int j = 0; j < pw; j++) { /* B_h^T (d B_w): each column */
#pragma GCC unroll 6
                for (int a = 0; a < ph; a++)
                    d[a] = r[a][j];
                td__bt_n(ph, d, v);
                float *q = o + (size_t)j * xs;
#pragma GCC unroll 6
                for (int k = 0; k < ph; k++, q += (size_t)pw * xs) {
                    TD__HIDE(q);
                    _mm256_store_ps(q, v[k]);
                }
            }
        }
    }
}

void TD__AVXG td__t_input(const td__wc *p, const td__tiles *t,
                          const float *x, int C, int i0, int i1, float *V,
                          const td_fold *f)
{
    if (f)
        TD__SHAPES(p, td__input_b, p, t, x, C, i0, i1, V, f, 1);
    else
        TD__SHAPES(p, td__input_b, p, t, x, C, i0, i1, V, f, 0);
}

/* ---- output --------------------------------------------------------- */

/* An output vector at o: a non-temporal store with nt (o 32-byte
 * aligned), which does not read the line first. */
TD__IN void td__put(float *o, __m256 v, const int nt)
{
    if (nt)
        _mm256_stream_ps(o, v);
    else
        _mm256_storeu_ps(o, v);
}

TD__IN void td__output_b(const td__wc *p, const td__tiles *t, const float *M,
                         float *y, const float *bias, int i0, int i1,
                         const int nt, float *mom, const int st,
                         const int mh, const int mw)
{
    const int ph = mh + 2, pw = mw + 2;
    int K = p->oc, H = p->h, W = p->w;
    size_t plane = (size_t)H * W * 8, ms = (size_t)t->tb * K;
    for (int i = i0; i < i1; i++) {
        int y0 = t->y[i], x0 = t->x[i];
        int inside = y0 + mh <= H && x0 + mw <= W;
        for (int kb = 0; kb < K / 8; kb++) {
            const float *s = M + (size_t)i * K + (size_t)kb * 8;
            __m256 r[6][4], m[6], o[4];
            TD__HIDE(s);
#pragma GCC unroll 6
            for (int a = 0; a < ph; a++) { /* M A_w: each row */
#pragma GCC unroll 6
                for (int j = 0; j < pw; j++, s += ms) {
                    TD__HIDE(s);
                    m[j] = _mm256_load_ps(s);
                }
                td__at_n(pw, m, r[a]);
            }
            __m256 b = bias ? _mm256_loadu_ps(bias + kb * 8)
                            : _mm256_setzero_ps();
            float *pl = y + ((size_t)t->n[i] * (K / 8) + kb) * plane;
            __m256 sh = _mm256_setzero_ps(), s1 = sh, s2 = sh;
#pragma GCC unroll 4
            for (int j = 0; j < mw; j++) { /* A_h^T (M A_w): each column */
#pragma GCC unroll 6
                for (int a = 0; a < ph; a++)
                    m[a] = r[a][j];
                td__at_n(ph, m, o);
#pragma GCC unroll 4
                for (int q = 0; q < mh; q++) {
                    int yy = y0 + q, xx = x0 + j;
                    __m256 v = _mm256_add_ps(o[q], b);
                    if (!(inside || (yy < H && xx < W)))
                        continue;
                    td__put(pl + ((size_t)yy * W + xx) * 8, v, nt);
                    if (st) { /* the shift: tile i0's first output */
                        if (j == 0 && q == 0)
                            sh = i == i0 ? v
                                        : _mm256_loadu_ps(mom + kb * 8);
                        __m256 d = _mm256_sub_ps(v, sh);
                        s1 = _mm256_add_ps(s1, d);
                        s2 = _mm256_fmadd_ps(d, d, s2);
                    }
                }
            }
            if (st) {
                float *m1 = mom + K + kb * 8, *m2 = mom + 2 * K + kb * 8;
                if (i == i0) {
                    _mm256_storeu_ps(mom + kb * 8, sh);
                    _mm256_storeu_ps(m1, s1);
                    _mm256_storeu_ps(m2, s2);
                } else {
                    _mm256_storeu_ps(m1, _mm256_add_ps(_mm256_loadu_ps(m1),
                                                       s1));
                    _mm256_storeu_ps(m2, _mm256_add_ps(_mm256_loadu_ps(m2),
                                                       s2));
                }
            }
        }
    }
}

void TD__AVXG td__t_output(const td__wc *p, const td__tiles *t,
                           const float *M, float *y, const float *bias,
                           int i0, int i1, int nt, float *mom)
{
    if (nt && mom)
        TD__SHAPES(p, td__output_b, p, t, M, y, bias, i0, i1, 1, mom, 1);
    else if (nt)
        TD__SHAPES(p, td__output_b, p, t, M, y, bias, i0, i1, 1, mom, 0);
    else if (mom)
        TD__SHAPES(p, td__output_b, p, t, M, y, bias, i0, i1, 0, mom, 1);
    else
        TD__SHAPES(p, td__output_b, p, t, M, y, bias, i0, i1, 0, mom, 0);
}

/* ---- backward weights ----------------------------------------------- */

TD__IN void td__dy_b(const td__wc *p, const td__tiles *t, const float *dy,
                     int i0, int i1, float *D, float *db, int per_tile,
                     const int mh, const int mw)
{
    const int ph = mh + 2, pw = mw + 2;
    int K = p->oc, H = p->h, W = p->w;
    size_t plane = (size_t)H * W * 8, ds = (size_t)t->tb * K;
    for (int i = i0; i < i1; i++) {
        int y0 = t->y[i], x0 = t->x[i];
        int inside = y0 + mh <= H && x0 + mw <= W;
        for (int kb = 0; kb < K / 8; kb++) {
            const float *pl = dy + ((size_t)t->n[i] * (K / 8) + kb) * plane;
            __m256 r[4][6], e[4], m[6], s = _mm256_setzero_ps();
            td__ahead(pl, H, W, y0 + mh, x0, mh, mw == 4);
#pragma GCC unroll 4
            for (int a = 0; a < mh; a++) { /* e A_w^T: each row */
#pragma GCC unroll 4
                for (int j = 0; j < mw; j++) {
                    int yy = y0 + a, xx = x0 + j;
                    e[j] = inside || (yy < H && xx < W)
                               ? _mm256_loadu_ps(pl +
                                                 ((size_t)yy * W + xx) * 8)
                               : _mm256_setzero_ps();
                }
                __m256 rs = _mm256_add_ps(e[0], e[1]);
                if (mw == 4)
                    rs = _mm256_add_ps(rs, _mm256_add_ps(e[2], e[3]));
                s = _mm256_add_ps(s, rs);
                td__a_n(pw, e, r[a]);
            }
            td__dbsum(db, per_tile, i, K, kb, s);
            float *o = D + (size_t)i * K + (size_t)kb * 8;
            TD__HIDE(o);
#pragma GCC unroll 6
            for (int j = 0; j < pw; j++) { /* A_h (e A_w^T): each column */
#pragma GCC unroll 4
                for (int a = 0; a < mh; a++)
                    e[a] = r[a][j];
                td__a_n(ph, e, m);
                float *q = o + (size_t)j * ds;
#pragma GCC unroll 6
                for (int k = 0; k < ph; k++, q += (size_t)pw * ds) {
                    TD__HIDE(q);
                    _mm256_store_ps(q, m[k]);
                }
            }
        }
    }
}

void TD__AVXG td__t_dy(const td__wc *p, const td__tiles *t, const float *dy,
                       int i0, int i1, float *D, float *db, int per_tile)
{
    TD__SHAPES(p, td__dy_b, p, t, dy, i0, i1, D, db, per_tile);
}

TD__IN void td__reduce_b(const td__wc *p, size_t kc, float *dw, int groups,
                         const int mh, const int mw)
{
    const int ph = mh + 2, pw = mw + 2, np = ph * pw;
    size_t ps = (size_t)p->oc * p->ic;
    __m256 u[6], r[6][3], g[3];
    float t[9][8];
#pragma GCC unroll 6
    for (int a = 0; a < ph; a++) { /* the groups' sums, then dU G_w */
#pragma GCC unroll 6
        for (int j = 0; j < pw; j++) {
            size_t x = (size_t)(a * pw + j);
            __m256 s = _mm256_load_ps(p->part + x * ps + kc);
            for (int gr = 1; gr < groups; gr++)
                s = _mm256_add_ps(
                    s, _mm256_load_ps(p->part + ((size_t)gr * np + x) * ps +
                                      kc));
            u[j] = s;
        }
        td__gt_n(pw, u, r[a]);
    }
#pragma GCC unroll 3
    for (int j = 0; j < 3; j++) { /* G_h^T (dU G_w): each column */
#pragma GCC unroll 6
        for (int a = 0; a < ph; a++)
            u[a] = r[a][j];
        td__gt_n(ph, u, g);
#pragma GCC unroll 3
        for (int q = 0; q < 3; q++)
            _mm256_storeu_ps(t[q * 3 + j], g[q]);
    }
    for (int j = 0; j < 8; j++)
        for (int q = 0; q < 9; q++)
            dw[(kc + (size_t)j) * 9 + q] = t[q][j];
}

void TD__AVXG td__t_reduce8(const td__wc *p, size_t kc, float *dw,
                            int groups)
{
    TD__SHAPES(p, td__reduce_b, p, kc, dw, groups);
}
