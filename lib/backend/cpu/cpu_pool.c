/* cpu_pool.c - fp32 2x2 stride-2 and 3x3 stride-2 pad-1 max pooling on
 * AVX2 in nChw8c / nChw16c (cpu_pool.h for what it computes).
 *
 * Owns: the vector loops.  A ymm is 8 channels of one position; per
 * output position and 8 channels the window's inputs (with a fold, their
 * folded values: cpu_fold.h) are compared in window order with a strict
 * greater-than (an equal later value does not win), the winner's
 * position kept as four 8-bit lane masks (2x2) or a byte per lane (3x3,
 * whose backward sums, per input, the windows it won).
 * Never does: decide where it is used (cpu_plan.c).
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "backend/cpu/cpu_fold.h"
#include "backend/cpu/cpu_pool.h"

#define TD__AVX static __attribute__((target("avx2,fma")))
#define TD__IN static inline __attribute__((always_inline, target("avx2,fma")))

int td_maxpool_ok(int kernel, int stride, int pad, int h, int w, int blk)
{
    __builtin_cpu_init();
    int ok2 = kernel == 2 && stride == 2 && pad == 0 && h % 2 == 0 &&
              w % 2 == 0;
    int ok3 = kernel == 3 && stride == 2 && pad == 1;
    return (ok2 || ok3) && h > 0 && w > 0 && (blk == 8 || blk == 16) &&
           __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

size_t td_maxpool_mask_bytes(int kernel, size_t planes, int oh, int ow,
                             int blk)
{
    /* 2x2: four bit masks per 8 channels; 3x3: a byte per channel */
    return planes * (size_t)oh * (size_t)ow *
           (kernel == 3 ? (size_t)blk : (size_t)(blk / 8) * 4);
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


/* ---- 3x3 windows, stride 2, padding 1 --------------------------------- */

/* Output row i, column j, channels v*8 ..: the maximum of the window's
 * positions inside the image in window order (strict greater-than: the
 * first maximum wins), its position (0..8, row-major) per lane as a
 * byte. */
TD__IN void td__win3(const float *x, float *y, uint8_t *m, int h, int w,
                     int blk, int i, int j, int v, size_t o, const int fold,
                     __m256 fm, __m256 fa, __m256 fb)
{
    int r0 = 2 * i - 1, c0 = 2 * j - 1;
    __m256 mx = _mm256_setzero_ps(), at = _mm256_setzero_ps();
    int first = 1;
#pragma GCC unroll 3
    for (int a = 0; a < 3; a++) {
        if (r0 + a < 0 || r0 + a >= h)
            continue;
#pragma GCC unroll 3
        for (int b = 0; b < 3; b++) {
            if (c0 + b < 0 || c0 + b >= w)
                continue;
            __m256 e = td__in(x + ((size_t)(r0 + a) * w + c0 + b) * blk +
                                  v * 8,
                              fold, fm, fa, fb);
            __m256 pos = _mm256_set1_ps((float)(a * 3 + b));
            if (first) {
                mx = e, at = pos, first = 0;
                continue;
            }
            __m256 g = _mm256_cmp_ps(e, mx, _CMP_GT_OQ);
            mx = _mm256_blendv_ps(mx, e, g);
            at = _mm256_blendv_ps(at, pos, g);
        }
    }
    _mm256_storeu_ps(y + o * 8, mx);
    __m256i k = _mm256_cvttps_epi32(at); /* 0..8 per lane */
    k = _mm256_packus_epi32(k, k);       /* 16-bit: lanes 0-3 | 4-7 */
    k = _mm256_packus_epi16(k, k);       /* bytes */
    uint32_t lo = (uint32_t)_mm256_extract_epi32(k, 0);
    uint32_t hi = (uint32_t)_mm256_extract_epi32(k, 4);
    memcpy(m + o * 8, &lo, 4);
    memcpy(m + o * 8 + 4, &hi, 4);
}

TD__IN void td__fwd3_b(const float *x, float *y, uint8_t *m, int h, int w,
                       int blk, const int fold, __m256 fm, __m256 fa,
                       __m256 fb)
{
    int oh = (h - 1) / 2 + 1, ow = (w - 1) / 2 + 1, nv = blk / 8;
    for (int i = 0; i < oh; i++)
        for (int j = 0; j < ow; j++)
            for (int v = 0; v < nv; v++)
                td__win3(x, y, m, h, w, blk, i, j, v,
                         ((size_t)i * ow + j) * nv + v, fold, fm, fa, fb);
}


/* The windows (up to 2) whose rows (or columns) hold input row r: from
 * *i0, *n of them; r's position in the first is r - 2 * *i0 + 1. */
TD__IN void td__wins(int r, int on, int *i0, int *n)
{
    if (r % 2 == 0) {
        *i0 = r / 2;
        *n = 1;
    } else {
        *i0 = (r - 1) / 2;
        *n = (r + 1) / 2 < on ? 2 : 1;
    }
}

/* dx at every input: the sum of dy over the windows whose winner it is
 * (up to four windows hold it; every element written once, no zeroing). */
TD__AVX void td__bwd3_plane(const float *dy, const uint8_t *m, float *dx,
                            int h, int w, int blk)
{
    int oh = (h - 1) / 2 + 1, ow = (w - 1) / 2 + 1, nv = blk / 8;
    for (int r = 0; r < h; r++) {
        int i0, ni;
        td__wins(r, oh, &i0, &ni);
        for (int c = 0; c < w; c++) {
            int j0, nj;
            td__wins(c, ow, &j0, &nj);
            for (int v = 0; v < nv; v++) {
                __m256 s = _mm256_setzero_ps();
                for (int di = 0; di < ni; di++)
                    for (int dj = 0; dj < nj; dj++) {
                        int i = i0 + di, j = j0 + dj;
                        int pos = (r - 2 * i + 1) * 3 + (c - 2 * j + 1);
                        size_t o = ((size_t)i * ow + j) * nv + v;
                        __m256i k = _mm256_cvtepu8_epi32(
                            _mm_loadl_epi64((const __m128i *)(m + o * 8)));
                        __m256 hit = _mm256_castsi256_ps(_mm256_cmpeq_epi32(
                            k, _mm256_set1_epi32(pos)));
                        s = _mm256_add_ps(
                            s, _mm256_and_ps(hit, _mm256_loadu_ps(dy + o * 8)));
                    }
                _mm256_storeu_ps(dx + ((size_t)r * w + c) * blk + v * 8, s);
            }
        }
    }
}

/* ---- both: the planes over the threads --------------------------------- */

/* One plane of the k x k pooling's forward; with f (blk 8 only), folded
 * with the channels of block cb. */
TD__AVX void td__fwd_plane(int k, const float *x, float *y, uint8_t *m,
                           int h, int w, int blk, const td_fold *f,
                           size_t cb)
{
    __m256 z = _mm256_setzero_ps();
    if (!f) {
        if (k == 3)
            td__fwd3_b(x, y, m, h, w, blk, 0, z, z, z);
        else
            td__fwd_b(x, y, m, h, w, blk, 0, z, z, z);
        return;
    }
    __m256 fm = _mm256_loadu_ps(f->mean + cb * 8);
    __m256 fa = _mm256_loadu_ps(f->a + cb * 8);
    __m256 fb = _mm256_loadu_ps(f->b + cb * 8);
    if (k == 3)
        td__fwd3_b(x, y, m, h, w, 8, 1, fm, fa, fb);
    else
        td__fwd_b(x, y, m, h, w, 8, 1, fm, fa, fb);
}

/* A k x k pooling's sizes per plane: input, output floats and mask
 * bytes. */
static void td__sizes(int k, int h, int w, int blk, size_t *xs, size_t *ys,
                      size_t *ms)
{
    int oh = k == 3 ? (h - 1) / 2 + 1 : h / 2;
    int ow = k == 3 ? (w - 1) / 2 + 1 : w / 2;
    *xs = (size_t)h * w * blk;
    *ys = (size_t)oh * ow * blk;
    *ms = td_maxpool_mask_bytes(k, 1, oh, ow, blk);
}

void td_maxpool_fwd(int k, const float *x, float *y, uint8_t *mask,
                    size_t planes, int h, int w, int blk, const td_fold *f)
{
    size_t xs, ys, ms, cbs = f ? (size_t)f->C / 8 : 1; /* channel blocks */
    td__sizes(k, h, w, blk, &xs, &ys, &ms);
#pragma omp parallel for schedule(static)
    for (long p = 0; p < (long)planes; p++)
        td__fwd_plane(k, x + (size_t)p * xs, y + (size_t)p * ys,
                      mask + (size_t)p * ms, h, w, blk, f, (size_t)p % cbs);
}

void td_maxpool_bwd(int k, const float *dy, const uint8_t *mask, float *dx,
                    size_t planes, int h, int w, int blk)
{
    size_t xs, ys, ms;
    td__sizes(k, h, w, blk, &xs, &ys, &ms);
#pragma omp parallel for schedule(static)
    for (long p = 0; p < (long)planes; p++)
        (k == 3 ? td__bwd3_plane : td__bwd_plane)(
            dy + (size_t)p * ys, mask + (size_t)p * ms, dx + (size_t)p * xs,
            h, w, blk);
}
