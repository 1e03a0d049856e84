/* cpu_bn.c - the bf16 channels-last batch norm of the CPU backend's AMX
 * plan (cpu_bn.h), in AVX-512F.
 *
 * Owns: the vector loops.  A tensor is [rows][C] bf16; a chunk is
 * TD_BN_NHWC_ROWS rows, and within a chunk the channels go by groups of up
 * to 64 (four 16-float vectors, the accumulators of a group stay in
 * registers).  bf16 -> fp32 is a shift; fp32 -> bf16 rounds to nearest
 * even with integer operations, NaN kept quiet, exactly kernels/bf16.h's
 * td_bf16_from_f32 (the AVX512_BF16 conversion would flush subnormals to
 * zero, which the rest of the project's bf16 does not).  Passes: forward
 * training 2 (statistics; normalise [+ add] [+ relu]), inference 1,
 * backward 2 (the sums, writing the shortcut's gradient; dx), reading the
 * gradient as one tensor or as the sum of two (td_bn_nhwc_bwd2); a
 * training call is one OpenMP parallel region (the per-channel reduction
 * between its passes, barriers between them).  Also the
 * sum of two bf16 gradients (a residual block's input gets two), the
 * vector form of kernels/bf16.h's td_bf16_add_n.
 * Never does: allocate, decide whether it is used (cpu_plan.c), running
 * statistics (cpu_step.c), anything with oneDNN.
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "backend/cpu/cpu_bn.h"
#include "backend/cpu/cpu_bn_geo.h"
#include "bn_nhwc.h"

#define TD__IN static inline __attribute__((always_inline, target("avx512f")))
#define TD__AVX static __attribute__((target("avx512f")))

int td_bn_nhwc_ok(int C)
{
    __builtin_cpu_init();
    return C > 0 && C % 16 == 0 && __builtin_cpu_supports("avx512f");
}

/* [chunks][2][C] partial sums, then 4*C floats of per-channel values. */
size_t td_bn_nhwc_part_floats(size_t rows, int C, size_t hw)
{
    td__geo g = {rows, hw, C, 16};
    return (2 * td__nchunks(g) + 4) * (size_t)C;
}

TD__IN __m512 td__ld(const td_bf16 *p)
{
    __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)p);
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* v rounded to bf16 (td_bf16_from_f32, 16 lanes), as fp32 bit patterns
 * whose low 16 bits are 0. */
TD__IN __m512i td__rnd(__m512 v)
{
    __m512i u = _mm512_castps_si512(v);
    __m512i top = _mm512_set1_epi32((int)0xffff0000u);
    __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16),
                                   _mm512_set1_epi32(1));
    __m512i r = _mm512_and_si512(
        _mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff))),
        top);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(
        _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
        _mm512_set1_epi32(0x7f800000));
    return _mm512_mask_or_epi32(r, nan, _mm512_and_si512(u, top),
                                _mm512_set1_epi32(0x00400000));
}

TD__IN void td__st(td_bf16 *p, __m512 v)
{
    _mm256_storeu_si256((__m256i *)(void *)p,
                        _mm512_cvtepi32_epi16(
                            _mm512_srli_epi32(td__rnd(v), 16)));
}

/* v already holds bf16 values (a masked gradient): truncation is exact. */
TD__IN void td__st_exact(td_bf16 *p, __m512 v)
{
    __m512i hi = _mm512_srli_epi32(_mm512_castps_si512(v), 16);
    _mm256_storeu_si256((__m256i *)(void *)p, _mm512_cvtepi32_epi16(hi));
}

/* The element offsets of a chunk's channel group [c0, c0 + 16*nv) at its
 * row 0. */
#define TD__VOFF(k, c0, nv, vo)                                              \
    size_t vo[4];                                                            \
    _Pragma("GCC unroll 4") for (int v = 0; v < (nv); v++) vo[v] =           \
        (k).off + (size_t)((c0) + 16 * v) * (k).cs

/* Chunk k, channels [c0, c0 + 16*nv): o1 = sum (x - sh),
 * o2 = sum (x - sh)^2. */
TD__IN void td__stats_blk(const td_bf16 *x, td__ck k, int c0, int nv,
                          const float *sh, float *o1, float *o2)
{
    __m512 K[4], s1[4], s2[4];
    TD__VOFF(k, c0, nv, vo);
#pragma GCC unroll 4
    for (int v = 0; v < nv; v++) {
        K[v] = _mm512_loadu_ps(sh + c0 + 16 * v);
        s1[v] = s2[v] = _mm512_setzero_ps();
    }
    TD__ROWS(k, ro) {
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) {
            __m512 d = _mm512_sub_ps(td__ld(x + vo[v] + ro), K[v]);
            s1[v] = _mm512_add_ps(s1[v], d);
            s2[v] = _mm512_fmadd_ps(d, d, s2[v]);
        }
    }
#pragma GCC unroll 4
    for (int v = 0; v < nv; v++) {
        _mm512_storeu_ps(o1 + c0 + 16 * v, s1[v]);
        _mm512_storeu_ps(o2 + c0 + 16 * v, s2[v]);
    }
}

/* y = [relu]((x - mean)*a + b [rounded, + s]) on a chunk's channel
 * group (td_bn_nhwc_y). */
TD__IN void td__apply_blk(const td_bf16 *x, const td_bf16 *s, td_bf16 *y,
                          td__ck k, int c0, int nv, const float *mean,
                          const float *a, const float *b, int relu)
{
    __m512 M[4], A[4], B[4], z = _mm512_setzero_ps();
    TD__VOFF(k, c0, nv, vo);
#pragma GCC unroll 4
    for (int v = 0; v < nv; v++) {
        M[v] = _mm512_loadu_ps(mean + c0 + 16 * v);
        A[v] = _mm512_loadu_ps(a + c0 + 16 * v);
        B[v] = _mm512_loadu_ps(b + c0 + 16 * v);
    }
    TD__ROWS(k, ro) {
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) {
            size_t o = vo[v] + ro;
            __m512 t = _mm512_fmadd_ps(
                _mm512_sub_ps(td__ld(x + o), M[v]), A[v], B[v]);
            if (s)
                t = _mm512_add_ps(_mm512_castsi512_ps(td__rnd(t)),
                                  td__ld(s + o));
            if (relu) /* max(NaN, 0) is 0, as !(v > 0) in td_bn_nhwc_y */
                t = _mm512_max_ps(t, z);
            td__st(y + o, t);
        }
    }
}

/* g = dy * (y > 0) (dy without relu), dy = bf16(dy + dy2) when dy2 (the
 * second gradient summand of a root, td_bf16_add_n's rounding). */
TD__IN __m512 td__g(const td_bf16 *dy, const td_bf16 *dy2, const td_bf16 *y,
                    size_t o, int relu)
{
    __m512 g = td__ld(dy + o);
    if (dy2)
        g = _mm512_castsi512_ps(td__rnd(_mm512_add_ps(g, td__ld(dy2 + o))));
    if (!relu)
        return g;
    __mmask16 pos = _mm512_cmp_ps_mask(td__ld(y + o), _mm512_setzero_ps(),
                                       _CMP_GT_OQ);
    return _mm512_maskz_mov_ps(pos, g);
}

/* Backward sums of a chunk's channel group: o1 = sum g, o2 = sum
 * g*(x - mean); g into ds when not NULL. */
TD__IN void td__bsum_blk(const td_bf16 *x, const td_bf16 *y,
                         const td_bf16 *dy, const td_bf16 *dy2, td_bf16 *ds,
                         td__ck k, int c0, int nv, const float *mean,
                         int relu, float *o1, float *o2)
{
    __m512 M[4], s1[4], s2[4];
    TD__VOFF(k, c0, nv, vo);
#pragma GCC unroll 4
    for (int v = 0; v < nv; v++) {
        M[v] = _mm512_loadu_ps(mean + c0 + 16 * v);
        s1[v] = s2[v] = _mm512_setzero_ps();
    }
    TD__ROWS(k, ro) {
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) {
            size_t o = vo[v] + ro;
            __m512 g = td__g(dy, dy2, y, o, relu);
            if (ds)
                td__st_exact(ds + o, g);
            s1[v] = _mm512_add_ps(s1[v], g);
            s2[v] = _mm512_fmadd_ps(
                g, _mm512_sub_ps(td__ld(x + o), M[v]), s2[v]);
        }
    }
#pragma GCC unroll 4
    for (int v = 0; v < nv; v++) {
        _mm512_storeu_ps(o1 + c0 + 16 * v, s1[v]);
        _mm512_storeu_ps(o2 + c0 + 16 * v, s2[v]);
    }
}

/* dx = g*a - (x - mean)*k + d on a chunk's channel group; g from ds
 * when given. */
TD__IN void td__dx_blk(const td_bf16 *x, const td_bf16 *y,
                       const td_bf16 *dy, const td_bf16 *dy2,
                       const td_bf16 *ds, td_bf16 *dx, td__ck ck, int c0,
                       int nv, const float *mean, const float *a,
                       const float *k, const float *d, int relu)
{
    __m512 M[4], A[4], K[4], D[4];
    TD__VOFF(ck, c0, nv, vo);
#pragma GCC unroll 4
    for (int v = 0; v < nv; v++) {
        M[v] = _mm512_loadu_ps(mean + c0 + 16 * v);
        A[v] = _mm512_loadu_ps(a + c0 + 16 * v);
        K[v] = _mm512_loadu_ps(k + c0 + 16 * v);
        D[v] = _mm512_loadu_ps(d + c0 + 16 * v);
    }
    TD__ROWS(ck, ro) {
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) {
            size_t o = vo[v] + ro;
            __m512 g = ds ? td__ld(ds + o) : td__g(dy, dy2, y, o, relu);
            __m512 t = _mm512_fmadd_ps(
                _mm512_sub_ps(M[v], td__ld(x + o)), K[v], D[v]);
            td__st(dx + o, _mm512_fmadd_ps(g, A[v], t));
        }
    }
}

/* The channel groups of one chunk: nv a constant in each call, so the
 * always-inline blocks keep their accumulators in registers. */
#define TD__GROUPS(C, CALL)                                                  \
    for (int c0 = 0; c0 < (C); c0 += 64) {                                   \
        switch ((C) - c0 >= 64 ? 4 : ((C) - c0) / 16) {                      \
        case 4: { const int nv = 4; CALL; } break;                           \
        case 3: { const int nv = 3; CALL; } break;                           \
        case 2: { const int nv = 2; CALL; } break;                           \
        default: { const int nv = 1; CALL; } break;                          \
        }                                                                    \
    }

/* One chunk of each pass, compiled for AVX-512 and called from the
 * parallel regions below. The regions themselves hold no vector code:
 * clang 14 outlines an OpenMP region into a function without its
 * enclosing function's target attribute and then cannot lower 512-bit
 * operations inlined into it ("Do not know how to split the result of
 * this operator"); gcc copes either way. */
TD__AVX void td__stats_chunk(const td_bf16 *x, td__geo g, long ch,
                             const float *sh, float *part)
{
    td__ck k = td__chunk(g, ch);
    float *o = part + (size_t)ch * 2 * (size_t)g.C;
    TD__GROUPS(g.C, td__stats_blk(x, k, c0, nv, sh, o, o + g.C));
}

TD__AVX void td__apply_chunk(const td_bf16 *x, const td_bf16 *s,
                             td_bf16 *y, td__geo g, long ch,
                             const float *mean, const float *a,
                             const float *b, int relu)
{
    td__ck k = td__chunk(g, ch);
    TD__GROUPS(g.C, td__apply_blk(x, s, y, k, c0, nv, mean, a, b, relu));
}

TD__AVX void td__bsum_chunk(const td_bf16 *x, const td_bf16 *y,
                            const td_bf16 *dy, const td_bf16 *dy2,
                            td_bf16 *ds, td__geo g, long ch,
                            const float *mean, int relu, float *part)
{
    td__ck k = td__chunk(g, ch);
    float *o = part + (size_t)ch * 2 * (size_t)g.C;
    TD__GROUPS(g.C, td__bsum_blk(x, y, dy, dy2, ds, k, c0, nv, mean, relu,
                                 o, o + g.C));
}

TD__AVX void td__dx_chunk(const td_bf16 *x, const td_bf16 *y,
                          const td_bf16 *dy, const td_bf16 *dy2,
                          const td_bf16 *ds, td_bf16 *dx, td__geo g, long ch,
                          const float *mean, const float *a, const float *k,
                          const float *d, int relu)
{
    td__ck ck = td__chunk(g, ch);
    TD__GROUPS(g.C, td__dx_blk(x, y, dy, dy2, ds, dx, ck, c0, nv, mean, a,
                               k, d, relu));
}

/* Training forward in one parallel region (one fork and join instead of
 * two, the threads passing the loops' barriers): the chunks' statistics,
 * per channel mean, var and scale, then the output. */
TD__AVX void td__fwd_train(const td_bf16 *x, const td_bf16 *s, td_bf16 *y,
                           td__geo g, const float *gamma, const float *beta,
                           float eps, int relu, float *mean, float *var,
                           float *part)
{
    size_t nch = td__nchunks(g), rows = g.rows;
    int C = g.C;
    long n = (long)nch;
    float *a = part + 2 * nch * (size_t)C, *sh = a + C;
#pragma omp parallel
    {
#pragma omp for schedule(static)
        for (long ch = 0; ch < n; ch++)
            td__stats_chunk(x, g, ch, sh, part);
#pragma omp for schedule(static)
        for (int c = 0; c < C; c++)
            td__fwd_coefs(part, nch, C, c, rows, sh, gamma, eps, mean, var,
                          a);
#pragma omp for schedule(static)
        for (long ch = 0; ch < n; ch++)
            td__apply_chunk(x, s, y, g, ch, mean, a, beta, relu);
    }
}

TD__AVX void td__fwd_apply(const td_bf16 *x, const td_bf16 *s, td_bf16 *y,
                           td__geo g, const float *mean, const float *a,
                           const float *b, int relu)
{
    long n = (long)td__nchunks(g);
#pragma omp parallel for schedule(static)
    for (long ch = 0; ch < n; ch++)
        td__apply_chunk(x, s, y, g, ch, mean, a, b, relu);
}

/* Training backward in one parallel region: the chunks' sums (writing the
 * shortcut's gradient), per channel dgamma, dbeta and coefficients, dx. */
TD__AVX void td__bwd_train(const td_bf16 *x, const td_bf16 *y,
                           const td_bf16 *dy, const td_bf16 *dy2,
                           td_bf16 *dx, td_bf16 *ds, td__geo g,
                           const float *gamma, const float *mean,
                           const float *var, float eps, int relu,
                           float *dgamma, float *dbeta, float *part)
{
    size_t nch = td__nchunks(g), rows = g.rows;
    int C = g.C;
    long n = (long)nch;
    float *a = part + 2 * nch * (size_t)C, *k = a + C, *d = k + C;
#pragma omp parallel
    {
#pragma omp for schedule(static)
        for (long ch = 0; ch < n; ch++)
            td__bsum_chunk(x, y, dy, dy2, ds, g, ch, mean, relu, part);
#pragma omp for schedule(static)
        for (int c = 0; c < C; c++)
            td__bwd_coefs(part, nch, C, c, rows, gamma, var, eps, dgamma,
                          dbeta, a, k, d);
#pragma omp for schedule(static)
        for (long ch = 0; ch < n; ch++)
            td__dx_chunk(x, y, dy, dy2, ds, dx, g, ch, mean, a, k, d, relu);
    }
}

TD__AVX void td__add_n(td_bf16 *d, const td_bf16 *a, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        td__st(d + i, _mm512_add_ps(td__ld(d + i), td__ld(a + i)));
    td_bf16_add_n(d + i, a + i, n - i);
}

void td_bf16_add_n_fast(td_bf16 *d, const td_bf16 *a, size_t n)
{
    if (td_bn_nhwc_ok(16))
        td__add_n(d, a, n);
    else
        td_bf16_add_n(d, a, n);
}

void td_bn_nhwc_fwd(const td_bf16 *x, const td_bf16 *s, td_bf16 *y,
                    size_t rows, int C, size_t hw, const float *gamma,
                    const float *beta, float eps, int relu, float *mean,
                    float *var, float *part)
{
    td__geo g = {rows, hw, C, 16};
    float *sh = part + 2 * td__nchunks(g) * (size_t)C + C;
    if (rows == 0)
        return;
    for (int c = 0; c < C; c++) /* the first row's value of channel c */
        sh[c] = td_bf16_to_f32(x[td__first(g, c)]);
    td__fwd_train(x, s, y, g, gamma, beta, eps, relu, mean, var, part);
}

void td_bn_nhwc_infer(const td_bf16 *x, const td_bf16 *s, td_bf16 *y,
                      size_t rows, int C, size_t hw, const float *gamma,
                      const float *beta, const float *mean, const float *var,
                      float eps, int relu, float *part)
{
    td__geo g = {rows, hw, C, 16};
    float *a = part + 2 * td__nchunks(g) * (size_t)C;
    for (int c = 0; c < C; c++)
        a[c] = td_bn_nhwc_fwd_coef(gamma[c], var[c], eps);
    td__fwd_apply(x, s, y, g, mean, a, beta, relu);
}

void td_bn_nhwc_bwd(const td_bf16 *x, const td_bf16 *y, const td_bf16 *dy,
                    td_bf16 *dx, td_bf16 *ds, size_t rows, int C, size_t hw,
                    const float *gamma, const float *mean, const float *var,
                    float eps, int relu, float *dgamma, float *dbeta,
                    float *part)
{
    td_bn_nhwc_bwd2(x, y, dy, NULL, dx, ds, rows, C, hw, gamma, mean, var,
                    eps, relu, dgamma, dbeta, part);
}

void td_bn_nhwc_bwd2(const td_bf16 *x, const td_bf16 *y, const td_bf16 *dy,
                     const td_bf16 *dy2, td_bf16 *dx, td_bf16 *ds,
                     size_t rows, int C, size_t hw, const float *gamma,
                     const float *mean, const float *var, float eps,
                     int relu, float *dgamma, float *dbeta, float *part)
{
    td__geo g = {rows, hw, C, 16};
    if (rows == 0)
        return;
    td__bwd_train(x, y, dy, dy2, dx, ds, g, gamma, mean, var, eps, relu,
                  dgamma, dbeta, part);
}
