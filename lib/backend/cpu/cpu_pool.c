/* cpu_pool.c - fp32 2x2 stride-2 max pooling on AVX2 in nChw8c / nChw16c
 * (cpu_pool.h for what it computes).
 *
 * Owns: the vector loops.  A ymm is 8 channels of one position; per
 * output position and 8 channels the four inputs (with a fold, their
 * folded values: cpu_fold.h) are compared in window order with a strict
 * greater-than (an equal later value does not win), the winner's
 * position kept as four 8-bit lane masks.
 * Never does: decide where it is used (cpu_plan.c).
 */
#include <immintrin.h>
#include <stdint.h>

#include "backend/cpu/cpu_fold.h"
#include "backend/cpu/cpu_pool.h"

#define TD__AVX static __attribute__((target("avx2,fma")))
#define TD__IN static inline __attribute__((always_inline, target("avx2,fma")))

int td_maxpool2_ok(int kernel, int stride, int pad, int h, int w, int blk)
{
    __builtin_cpu_init();
    return kernel == 2 && stride == 2 && pad == 0 && h > 0 && w > 0 &&
           h % 2 == 0 && w % 2 == 0 && (blk == 8 || blk == 16) &&
           __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

size_t td_maxpool2_mask_bytes(size_t planes, int oh, int ow, int blk)
{
    return planes * (size_t)oh * (size_t)ow * (size_t)(blk / 8) * 4;
}

/* The input at p, folded when fold (channels' m, a, b). */
TD__IN __m256 td__in(const float *p, int fold, __m256 m, __m256 a, __m256 b)
{
    __m256 x = _mm256_loadu_ps(p);
    return fold ? td_fold8(x, m, a, b) : x;
}

/* One plane; with fold (blk 8 only), the channels' m, a, b. */
TD__IN void td__fwd_b(const float *x, float *y, uint8_t *m, int h, int w,
                      int blk, const int fold, __m256 fm, __m256 fa,
                      __m256 fb)
{
    int oh = h / 2, ow = w / 2, nv = blk / 8;
    for (int i = 0; i < oh; i++)
        for (int j = 0; j < ow; j++)
            for (int v = 0; v < nv; v++) {
                const float *p = x + ((size_t)(2 * i) * w + 2 * j) * blk +
                                 v * 8;
                size_t rs = (size_t)w * blk;
                __m256 a = td__in(p, fold, fm, fa, fb);
                __m256 b = td__in(p + blk, fold, fm, fa, fb);
                __m256 c = td__in(p + rs, fold, fm, fa, fb);
                __m256 d = td__in(p + rs + blk, fold, fm, fa, fb);
                __m256 g1 = _mm256_cmp_ps(b, a, _CMP_GT_OQ);
                __m256 mx = _mm256_blendv_ps(a, b, g1);
                __m256 g2 = _mm256_cmp_ps(c, mx, _CMP_GT_OQ);
                mx = _mm256_blendv_ps(mx, c, g2);
                __m256 g3 = _mm256_cmp_ps(d, mx, _CMP_GT_OQ);
                mx = _mm256_blendv_ps(mx, d, g3);
                /* the winner: the last position that beat all before */
                int k3 = _mm256_movemask_ps(g3);
                int k2 = _mm256_movemask_ps(g2) & ~k3;
                int k1 = _mm256_movemask_ps(g1) & ~k3 & ~k2;
                int k0 = 0xff & ~k1 & ~k2 & ~k3;
                size_t o = ((size_t)i * ow + j) * nv + v;
                _mm256_storeu_ps(y + o * 8, mx);
                m[o * 4] = (uint8_t)k0;
                m[o * 4 + 1] = (uint8_t)k1;
                m[o * 4 + 2] = (uint8_t)k2;
                m[o * 4 + 3] = (uint8_t)k3;
            }
}

TD__AVX void td__fwd_plane(const float *x, float *y, uint8_t *m, int h,
                           int w, int blk, const td_fold *f, size_t cb)
{
    __m256 z = _mm256_setzero_ps();
    if (f)
        td__fwd_b(x, y, m, h, w, 8, 1, _mm256_loadu_ps(f->mean + cb * 8),
                  _mm256_loadu_ps(f->a + cb * 8),
                  _mm256_loadu_ps(f->b + cb * 8));
    else
        td__fwd_b(x, y, m, h, w, blk, 0, z, z, z);
}

void td_maxpool2_fwd(const float *x, float *y, uint8_t *mask, size_t planes,
                     int h, int w, int blk, const td_fold *fold)
{
    size_t xs = (size_t)h * w * blk, ys = xs / 4;
    size_t ms = td_maxpool2_mask_bytes(1, h / 2, w / 2, blk);
    size_t cbs = fold ? (size_t)fold->C / 8 : 1; /* channel blocks */
#pragma omp parallel for schedule(static)
    for (long p = 0; p < (long)planes; p++)
        td__fwd_plane(x + (size_t)p * xs, y + (size_t)p * ys,
                      mask + (size_t)p * ms, h, w, blk, fold,
                      (size_t)p % cbs);
}

/* Lane i of the result is all ones where bit i of k is set. */
TD__AVX __m256 td__lanes(int k)
{
    const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    __m256i b = _mm256_and_si256(_mm256_set1_epi32(k), bit);
    return _mm256_castsi256_ps(_mm256_cmpeq_epi32(b, bit));
}

TD__AVX void td__bwd_plane(const float *dy, const uint8_t *m, float *dx,
                           int h, int w, int blk)
{
    int oh = h / 2, ow = w / 2, nv = blk / 8;
    for (int i = 0; i < oh; i++)
        for (int j = 0; j < ow; j++)
            for (int v = 0; v < nv; v++) {
                size_t o = ((size_t)i * ow + j) * nv + v;
                __m256 g = _mm256_loadu_ps(dy + o * 8);
                float *p = dx + ((size_t)(2 * i) * w + 2 * j) * blk + v * 8;
                size_t rs = (size_t)w * blk;
                _mm256_storeu_ps(p, _mm256_and_ps(g, td__lanes(m[o * 4])));
                _mm256_storeu_ps(p + blk,
                                 _mm256_and_ps(g, td__lanes(m[o * 4 + 1])));
                _mm256_storeu_ps(p + rs,
                                 _mm256_and_ps(g, td__lanes(m[o * 4 + 2])));
                _mm256_storeu_ps(p + rs + blk,
                                 _mm256_and_ps(g, td__lanes(m[o * 4 + 3])));
            }
}

void td_maxpool2_bwd(const float *dy, const uint8_t *mask, float *dx,
                     size_t planes, int h, int w, int blk)
{
    size_t xs = (size_t)h * w * blk, ys = xs / 4;
    size_t ms = td_maxpool2_mask_bytes(1, h / 2, w / 2, blk);
#pragma omp parallel for schedule(static)
    for (long p = 0; p < (long)planes; p++)
        td__bwd_plane(dy + (size_t)p * ys, mask + (size_t)p * ms,
                      dx + (size_t)p * xs, h, w, blk);
}
