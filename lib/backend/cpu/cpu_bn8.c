/* cpu_bn8.c - the fp32 nChw8c batch norm of the CPU backend's AVX2 plan
 * (cpu_bn8.h), in AVX2 with FMA.
 *
 * Owns: the vector loops.  Within a chunk (cpu_bn_geo.h) the channels go
 * by groups of up to 32 (four 8-float vectors, the accumulators of a group
 * in registers).  Passes: forward training 2 (statistics; normalise
 * [+ add] [+ relu]), inference 1, backward 2 (the sums, writing the
 * shortcut's gradient; dx), the gradient read as one tensor or as the sum
 * of two; a training call is one OpenMP parallel region (the per-channel
 * reduction between its passes, barriers between them), or, where the
 * 8-channel blocks split evenly over the threads, each thread runs both
 * passes over its own channels with no barrier (td__split; the same sums in
 * the same order, so the same bits).  The structure is cpu_bn.c's (bf16,
 * AVX-512) with fp32 elements, so no rounding.  A batch norm folded into
 * its consumers (cpu_fold.h) runs the forward's statistics alone and a
 * backward that takes the relu's signs from x.
 * Never does: allocate, decide whether it is used (cpu_plan.c), running
 * statistics (cpu_step.c), anything with oneDNN.
 */
#include <immintrin.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "backend/cpu/cpu_bn8.h"
#include "backend/cpu/cpu_bn_geo.h"
#include "bn_nhwc.h"

#define TD__IN static inline __attribute__((always_inline, target("avx2,fma")))
#define TD__AVX static __attribute__((target("avx2,fma")))

int td_bn8_ok(int C)
{
    __builtin_cpu_init();
    return C > 0 && C % 8 == 0 && __builtin_cpu_supports("avx2") &&
           __builtin_cpu_supports("fma");
}

/* The element offsets of a chunk's channel group [c0, c0 + 8*nv) at its
 * row 0. */
#define TD__VOFF(k, c0, nv, vo)                                              \
    size_t vo[4];                                                            \
    _Pragma("GCC unroll 4") for (int v = 0; v < (nv); v++) vo[v] =           \
        (k).off + (size_t)((c0) + 8 * v) * (k).cs

/* Chunk k, channels [c0, c0 + 8*nv): o1 = sum (x - sh),
 * o2 = sum (x - sh)^2. */
TD__IN void td__stats_blk(const float *x, td__ck k, int c0, int nv,
                          const float *sh, float *o1, float *o2)
{
    __m256 K[4], s1[4], s2[4];
    TD__VOFF(k, c0, nv, vo);
#pragma GCC unroll 4
    for (int v = 0; v < nv; v++) {
        K[v] = _mm256_loadu_ps(sh + c0 + 8 * v);
        s1[v] = s2[v] = _mm256_setzero_ps();
    }
    TD__ROWS(k, ro) {
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) {
            __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x + vo[v] + ro), K[v]);
            s1[v] = _mm256_add_ps(s1[v], d);
            s2[v] = _mm256_fmadd_ps(d, d, s2[v]);
        }
    }
#pragma GCC unroll 4
    for (int v = 0; v < nv; v++) {
        _mm256_storeu_ps(o1 + c0 + 8 * v, s1[v]);
        _mm256_storeu_ps(o2 + c0 + 8 * v, s2[v]);
    }
}

/* y = [relu]((x - mean)*a + b [+ s]) on a chunk's channel group
 * (td_bn_f32_y). */
TD__IN void td__apply_blk(const float *x, const float *s, float *y,
                          uint8_t *mask, td__ck k, int c0, int nv,
                          const float *mean, const float *a, const float *b,
                          int relu)
{
    __m256 M[4], A[4], B[4], z = _mm256_setzero_ps();
    TD__VOFF(k, c0, nv, vo);
#pragma GCC unroll 4
    for (int v = 0; v < nv; v++) {
        M[v] = _mm256_loadu_ps(mean + c0 + 8 * v);
        A[v] = _mm256_loadu_ps(a + c0 + 8 * v);
        B[v] = _mm256_loadu_ps(b + c0 + 8 * v);
    }
    TD__ROWS(k, ro) {
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) {
            size_t o = vo[v] + ro;
            __m256 t = _mm256_fmadd_ps(
                _mm256_sub_ps(_mm256_loadu_ps(x + o), M[v]), A[v], B[v]);
            if (s)
                t = _mm256_add_ps(t, _mm256_loadu_ps(s + o));
            if (relu) /* max(NaN, 0) is 0 (the second operand), as
                         !(v > 0) in td_bn_f32_y */
                t = _mm256_max_ps(t, z);
            if (mask)
                mask[o / 8] = (uint8_t)_mm256_movemask_ps(
                    _mm256_cmp_ps(t, z, _CMP_GT_OQ));
            _mm256_storeu_ps(y + o, t);
        }
    }
}

/* g = (dy [+ dy2]) * (y > 0), the output's signs from the forward's bit
 * mask (lane i of the 8 at element o is bit i of mask[o / 8]); without
 * the mask when it is NULL (no relu). */
TD__IN __m256 td__g(const float *dy, const float *dy2, const uint8_t *mask,
                    size_t o)
{
    __m256 g = _mm256_loadu_ps(dy + o);
    if (dy2)
        g = _mm256_add_ps(g, _mm256_loadu_ps(dy2 + o));
    if (!mask)
        return g;
    __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    __m256i on = _mm256_and_si256(_mm256_set1_epi32(mask[o / 8]), bit);
    return _mm256_and_ps(
        _mm256_castsi256_ps(_mm256_cmpeq_epi32(on, bit)), g);
}

/* g where the folded output (cpu_fold.h) of x is > 0, d = x - mean of
 * channels c .. c + 7 (fa, fb: the forward's scale, shift): the same
 * operations as the forward's, so the same signs as its mask's. */
TD__IN __m256 td__gfold(__m256 g, __m256 d, const float *fa, const float *fb,
                        int c)
{
    __m256 t = _mm256_fmadd_ps(d, _mm256_loadu_ps(fa + c),
                               _mm256_loadu_ps(fb + c));
    return _mm256_and_ps(g, _mm256_cmp_ps(t, _mm256_setzero_ps(),
                                          _CMP_GT_OQ));
}

/* Backward sums of a chunk's channel group: o1 = sum g, o2 = sum
 * g*(x - mean); g into ds when not NULL; with fa, the relu's signs from
 * x (td__gfold) instead of a mask. */
TD__IN void td__bsum_blk(const float *x, const uint8_t *mask,
                         const float *fa, const float *fb, const float *dy,
                         const float *dy2, float *ds, td__ck k, int c0,
                         int nv, const float *mean, float *o1, float *o2)
{
    __m256 M[4], s1[4], s2[4];
    TD__VOFF(k, c0, nv, vo);
#pragma GCC unroll 4
    for (int v = 0; v < nv; v++) {
        M[v] = _mm256_loadu_ps(mean + c0 + 8 * v);
        s1[v] = s2[v] = _mm256_setzero_ps();
    }
    TD__ROWS(k, ro) {
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) {
            size_t o = vo[v] + ro;
            __m256 g = td__g(dy, dy2, mask, o);
            __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x + o), M[v]);
            if (fa)
                g = td__gfold(g, d, fa, fb, c0 + 8 * v);
            if (ds)
                _mm256_storeu_ps(ds + o, g);
            s1[v] = _mm256_add_ps(s1[v], g);
            s2[v] = _mm256_fmadd_ps(g, d, s2[v]);
        }
    }
#pragma GCC unroll 4
    for (int v = 0; v < nv; v++) {
        _mm256_storeu_ps(o1 + c0 + 8 * v, s1[v]);
        _mm256_storeu_ps(o2 + c0 + 8 * v, s2[v]);
    }
}

/* dx = g*a - (x - mean)*k + d (td_bn_nhwc_dx) on a chunk's channel
 * group; g from ds when given.  The coefficients stay in memory (four
 * per vector would take all 16 registers); their loads hit L1. */
TD__IN void td__dx_blk(const float *x, const uint8_t *mask, const float *fa,
                       const float *fb, const float *dy, const float *dy2,
                       const float *ds, float *dx, td__ck ck, int c0, int nv,
                       const float *mean, const float *a, const float *k,
                       const float *d)
{
    TD__VOFF(ck, c0, nv, vo);
    TD__ROWS(ck, ro) {
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) {
            size_t o = vo[v] + ro, c = (size_t)(c0 + 8 * v);
            __m256 g = ds ? _mm256_loadu_ps(ds + o)
                          : td__g(dy, dy2, mask, o);
            if (fa)
                g = td__gfold(g,
                              _mm256_sub_ps(_mm256_loadu_ps(x + o),
                                            _mm256_loadu_ps(mean + c)),
                              fa, fb, (int)c);
            __m256 t = _mm256_fmadd_ps(
                _mm256_sub_ps(_mm256_loadu_ps(mean + c),
                              _mm256_loadu_ps(x + o)),
                _mm256_loadu_ps(k + c), _mm256_loadu_ps(d + c));
            _mm256_storeu_ps(dx + o,
                             _mm256_fmadd_ps(g, _mm256_loadu_ps(a + c), t));
        }
    }
}

/* The channel groups [lo, hi) of one chunk by up to 32 channels: nv a
 * constant in each call, so the always-inline blocks keep their
 * accumulators in registers. */
#define TD__GROUPS(lo, hi, CALL)                                             \
    for (int c0 = (lo); c0 < (hi); c0 += 32) {                               \
        switch ((hi) - c0 >= 32 ? 4 : ((hi) - c0) / 8) {                      \
        case 4: { const int nv = 4; CALL; } break;                           \
        case 3: { const int nv = 3; CALL; } break;                           \
        case 2: { const int nv = 2; CALL; } break;                           \
        default: { const int nv = 1; CALL; } break;                          \
        }                                                                    \
    }

/* One chunk of each pass, compiled for AVX2 and called from the parallel
 * regions below, which hold no vector code (see cpu_bn.c: clang outlines
 * a region without its function's target attribute). */
TD__AVX void td__stats_chunk(const float *x, td__geo g, long ch, int lo,
                             int hi, const float *sh, float *part)
{
    td__ck k = td__chunk(g, ch);
    float *o = part + (size_t)ch * 2 * (size_t)g.C;
    TD__GROUPS(lo, hi, td__stats_blk(x, k, c0, nv, sh, o, o + g.C));
}

TD__AVX void td__apply_chunk(const float *x, const float *s, float *y,
                             uint8_t *mask, td__geo g, long ch, int lo,
                             int hi, const float *mean, const float *a,
                             const float *b, int relu)
{
    td__ck k = td__chunk(g, ch);
    TD__GROUPS(lo, hi, td__apply_blk(x, s, y, mask, k, c0, nv, mean, a, b,
                                     relu));
}

TD__AVX void td__bsum_chunk(const float *x, const uint8_t *mask,
                            const float *fa, const float *fb,
                            const float *dy, const float *dy2, float *ds,
                            td__geo g, long ch, int lo, int hi,
                            const float *mean, float *part)
{
    td__ck k = td__chunk(g, ch);
    float *o = part + (size_t)ch * 2 * (size_t)g.C;
    TD__GROUPS(lo, hi, td__bsum_blk(x, mask, fa, fb, dy, dy2, ds, k, c0, nv,
                                    mean, o, o + g.C));
}

TD__AVX void td__dx_chunk(const float *x, const uint8_t *mask,
                          const float *fa, const float *fb, const float *dy,
                          const float *dy2, const float *ds, float *dx,
                          td__geo g, long ch, int lo, int hi,
                          const float *mean, const float *a, const float *k,
                          const float *d)
{
    td__ck ck = td__chunk(g, ch);
    TD__GROUPS(lo, hi, td__dx_blk(x, mask, fa, fb, dy, dy2, ds, dx, ck, c0,
                                  nv, mean, a, k, d));
}

/* Thread me of nt's share of a training call: the chunks [c0, c1) and
 * channels [lo, hi) of its two chunk passes, the channels [k0, k1) of the
 * per-channel step between them.  Where the 8-channel blocks split evenly
 * over the threads, each owns whole blocks (own): every chunk, and the
 * step, for its channels alone, so no other thread's sums and no barrier
 * between the passes (oneDNN's split where there are at least as many
 * blocks as threads).  Else the threads split the chunks, all channels
 * each, and the step's channels, with barriers between the passes.  The
 * chunks' sums and their order are the same either way, so are the
 * results. */
typedef struct td__share {
    long c0, c1;
    int lo, hi, k0, k1, own;
} td__share;

static td__share td__split(int C, long n, int me, int nt)
{
    int nb = C / 8;
    if (nt >= 1 && nb >= nt && nb % nt == 0) {
        int lo = nb * me / nt * 8, hi = nb * (me + 1) / nt * 8;
        return (td__share){0, n, lo, hi, lo, hi, 1};
    }
    return (td__share){n * me / nt, n * (me + 1) / nt, 0, C, C * me / nt,
                       C * (me + 1) / nt, 0};
}

size_t td_bn8_mask_bytes(size_t rows, int C)
{
    return rows * (size_t)C / 8;
}

/* The training forward; without y only the statistics, with scale the
 * per-channel scale a copied out. */
static void td__fwd(const float *x, const float *s, float *y, uint8_t *mask,
                    size_t rows, int C, size_t hw, const float *gamma,
                    const float *beta, float eps, int relu, float *mean,
                    float *var, float *part, float *scale)
{
    td__geo g = {rows, hw, C, 8};
    size_t nch = td__nchunks(g);
    long n = (long)nch;
    float *a = part + 2 * nch * (size_t)C, *sh = a + C;
    if (rows == 0)
        return;
    for (int c = 0; c < C; c++) /* the first row's value of channel c */
        sh[c] = x[td__first(g, c)];
    uint8_t *mk = relu ? mask : NULL;
#pragma omp parallel
    {
        td__share t = td__split(C, n, omp_get_thread_num(),
                                omp_get_num_threads());
        for (long ch = t.c0; ch < t.c1; ch++)
            td__stats_chunk(x, g, ch, t.lo, t.hi, sh, part);
        if (!t.own) {
#pragma omp barrier
        }
        for (int c = t.k0; c < t.k1; c++)
            td__fwd_coefs(part, nch, C, c, rows, sh, gamma, eps, mean, var,
                          a);
        if (!t.own && y) {
#pragma omp barrier
        }
        for (long ch = t.c0; y && ch < t.c1; ch++)
            td__apply_chunk(x, s, y, mk, g, ch, t.lo, t.hi, mean, a, beta,
                            relu);
    }
    if (scale)
        memcpy(scale, a, (size_t)C * sizeof *scale);
}

void td_bn8_fwd(const float *x, const float *s, float *y, uint8_t *mask,
                size_t rows, int C, size_t hw, const float *gamma,
                const float *beta, float eps, int relu, float *mean,
                float *var, float *part)
{
    td__fwd(x, s, y, mask, rows, C, hw, gamma, beta, eps, relu, mean, var,
            part, NULL);
}

void td_bn8_stats(const float *x, size_t rows, int C, size_t hw,
                  const float *gamma, float eps, float *mean, float *var,
                  float *scale, float *part)
{
    td__fwd(x, NULL, NULL, NULL, rows, C, hw, gamma, NULL, eps, 0, mean, var,
            part, scale);
}

/* The output pass alone, every chunk in one parallel loop, no mask. */
static void td__apply(const float *x, const float *s, float *y, td__geo g,
                      const float *mean, const float *a, const float *b,
                      int relu)
{
    long n = (long)td__nchunks(g);
#pragma omp parallel for schedule(static)
    for (long ch = 0; ch < n; ch++)
        td__apply_chunk(x, s, y, NULL, g, ch, 0, g.C, mean, a, b, relu);
}

void td_bn8_apply(const float *x, float *y, size_t rows, int C, size_t hw,
                  const float *mean, const float *a, const float *b)
{
    td__apply(x, NULL, y, (td__geo){rows, hw, C, 8}, mean, a, b, 1);
}

void td_bn8_infer(const float *x, const float *s, float *y, size_t rows,
                  int C, size_t hw, const float *gamma, const float *beta,
                  const float *mean, const float *var, float eps, int relu,
                  float *part)
{
    td__geo g = {rows, hw, C, 8};
    float *a = part + 2 * td__nchunks(g) * (size_t)C;
    for (int c = 0; c < C; c++)
        a[c] = td_bn_nhwc_fwd_coef(gamma[c], var[c], eps);
    td__apply(x, s, y, g, mean, a, beta, relu);
}

/* The training backward; with fa the relu's signs from x (a fold). */
static void td__bwd(const float *x, const uint8_t *mask, const float *fa,
                    const float *fb, const float *dy, const float *dy2,
                    float *dx, float *ds, size_t rows, int C, size_t hw,
                    const float *gamma, const float *mean, const float *var,
                    float eps, float *dgamma, float *dbeta, float *part)
{
    td__geo g = {rows, hw, C, 8};
    size_t nch = td__nchunks(g);
    long n = (long)nch;
    float *a = part + 2 * nch * (size_t)C, *k = a + C, *d = k + C;
    if (rows == 0)
        return;
#pragma omp parallel
    {
        td__share t = td__split(C, n, omp_get_thread_num(),
                                omp_get_num_threads());
        for (long ch = t.c0; ch < t.c1; ch++)
            td__bsum_chunk(x, mask, fa, fb, dy, dy2, ds, g, ch, t.lo, t.hi,
                           mean, part);
        if (!t.own) {
#pragma omp barrier
        }
        for (int c = t.k0; c < t.k1; c++)
            td__bwd_coefs(part, nch, C, c, rows, gamma, var, eps, dgamma,
                          dbeta, a, k, d);
        if (!t.own) {
#pragma omp barrier
        }
        for (long ch = t.c0; ch < t.c1; ch++)
            td__dx_chunk(x, mask, fa, fb, dy, dy2, ds, dx, g, ch, t.lo, t.hi,
                         mean, a, k, d);
    }
}

void td_bn8_bwd(const float *x, const uint8_t *mask, const float *dy,
                const float *dy2, float *dx, float *ds, size_t rows, int C,
                size_t hw, const float *gamma, const float *mean,
                const float *var, float eps, float *dgamma, float *dbeta,
                float *part)
{
    td__bwd(x, mask, NULL, NULL, dy, dy2, dx, ds, rows, C, hw, gamma, mean,
            var, eps, dgamma, dbeta, part);
}

void td_bn8_bwd_fold(const float *x, const float *scale, const float *beta,
                     const float *dy, const float *dy2, float *dx,
                     size_t rows, int C, size_t hw, const float *gamma,
                     const float *mean, const float *var, float eps,
                     float *dgamma, float *dbeta, float *part)
{
    td__bwd(x, NULL, scale, beta, dy, dy2, dx, NULL, rows, C, hw, gamma,
            mean, var, eps, dgamma, dbeta, part);
}
