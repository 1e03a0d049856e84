/* cpu_sbw.c - fp32 backward weights of a planar-input convolution into
 * nChw8c, AVX2 + FMA (cpu_sbw.h for what it computes and why).
 *
 * Owns: the loops.  Per (image, 8-output-channel block, input channel) a
 * pass over the output rows: the k*k accumulators (one ymm per tap, lanes
 * the 8 output channels) start from the image group's running sums;
 * positions whose taps are all inside the input run without bounds
 * checks, the border ones with them.  Groups of images go to threads
 * round-robin; each group's sums live in its own slice of `part`, reduced
 * in group order into dw (and db) at the end.
 * Never does: decide where it is used (cpu_kplan.c), anything with
 * oneDNN.
 */
#include <immintrin.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_sbw.h"

#define TD__IN static inline __attribute__((always_inline, target("avx2,fma")))
#define TD__AVX static __attribute__((target("avx2,fma")))

enum { TD__GROUPS = 8, TD__KMAX = 3 };

struct td_sbw {
    int n, ic, h, w, oc, oh, ow, k, stride, pad, threads;
    size_t gs;   /* floats of one group's sums: oc*ic*k*k + oc */
    float *part; /* [TD__GROUPS][oc/8][ic][k*k][8] then [oc/8][8] */
};

int td_sbw_ok(int k, int stride, int pad, int ic, int oc)
{
    __builtin_cpu_init();
    return k >= 1 && k <= TD__KMAX && stride >= 1 && pad >= 0 && pad < k &&
           ic >= 1 && oc >= 8 && oc % 8 == 0 &&
           __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

td_sbw *td_sbw_create(int n, int ic, int h, int w, int oc, int oh, int ow,
                      int k, int stride, int pad, int threads)
{
    if (n < 1 || h < 1 || w < 1 || oh < 1 || ow < 1 || threads < 1 ||
        !td_sbw_ok(k, stride, pad, ic, oc))
        return NULL;
    td_sbw *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    *p = (td_sbw){.n = n, .ic = ic, .h = h, .w = w, .oc = oc, .oh = oh,
                  .ow = ow, .k = k, .stride = stride, .pad = pad,
                  .threads = threads};
    p->gs = (size_t)oc * ic * k * k + (size_t)oc;
    size_t bytes = ((size_t)TD__GROUPS * p->gs * sizeof(float) + 63) / 64 * 64;
    p->part = aligned_alloc(64, bytes);
    if (!p->part) {
        free(p);
        return NULL;
    }
    return p;
}

void td_sbw_destroy(td_sbw *p)
{
    if (!p)
        return;
    free(p->part);
    free(p);
}

/* Output columns [lo, hi) of a row whose taps all fall inside the input:
 * ox*s - pad >= 0 and ox*s - pad + k - 1 <= w - 1. */
static void td__inner_cols(const td_sbw *p, int *lo, int *hi)
{
    int s = p->stride, a = (p->pad + s - 1) / s;
    int b = p->w - p->k + p->pad; /* largest ox*s allowed */
    int h = b < 0 ? 0 : b / s + 1;
    *lo = a < p->ow ? a : p->ow;
    *hi = h > p->ow ? p->ow : h < *lo ? *lo : h;
}

/* x at (iy, ix) of one input plane, 0 outside it. */
TD__IN __m256 td__xat(const float *xc, int H, int W, int iy, int ix)
{
    return iy >= 0 && iy < H && ix >= 0 && ix < W
               ? _mm256_broadcast_ss(xc + (size_t)iy * W + ix)
               : _mm256_setzero_ps();
}

/* One (image, block, input channel): acc[i*K + j] += sum over output
 * positions of x[iy][ix] * dy[oy][ox] (8 output channels), and with db
 * the gradient's sum.  K the kernel size, a constant where inlined, so
 * that the accumulators stay in registers (every loop over the taps
 * unrolled; the border positions read 0 outside the input instead of
 * skipping taps). */
TD__IN void td__pass(const td_sbw *p, const float *xc, const float *dyb,
                     __m256 *acc, __m256 *db, const int K)
{
    int s = p->stride, pad = p->pad, W = p->w, H = p->h, lo, hi;
    __m256 a[TD__KMAX * TD__KMAX], b = *db;
    td__inner_cols(p, &lo, &hi);
#pragma GCC unroll 9
    for (int t = 0; t < K * K; t++)
        a[t] = acc[t];
    for (int oy = 0; oy < p->oh; oy++) {
        int y0 = oy * s - pad;
        const float *g = dyb + (size_t)oy * p->ow * 8;
        int rows_in = y0 >= 0 && y0 + K <= H;
        for (int ox = 0; ox < p->ow; ox++) {
            __m256 d = _mm256_loadu_ps(g + (size_t)ox * 8);
            int x0 = ox * s - pad;
            b = _mm256_add_ps(b, d);
            if (rows_in && ox >= lo && ox < hi) {
                const float *r = xc + (size_t)y0 * W + x0;
#pragma GCC unroll 9
                for (int i = 0; i < K; i++)
#pragma GCC unroll 9
                    for (int j = 0; j < K; j++)
                        a[i * K + j] = _mm256_fmadd_ps(
                            _mm256_broadcast_ss(r + (size_t)i * W + j), d,
                            a[i * K + j]);
            } else {
#pragma GCC unroll 9
                for (int i = 0; i < K; i++)
#pragma GCC unroll 9
                    for (int j = 0; j < K; j++)
                        a[i * K + j] = _mm256_fmadd_ps(
                            td__xat(xc, H, W, y0 + i, x0 + j), d,
                            a[i * K + j]);
            }
        }
    }
#pragma GCC unroll 9
    for (int t = 0; t < K * K; t++)
        acc[t] = a[t];
    *db = b;
}

/* Group g's sums over its images [n0, n1), in image order. */
TD__AVX void td__group(td_sbw *p, const float *x, const float *dy, int g)
{
    int K = p->k, kk = K * K, C = p->ic, KB = p->oc / 8;
    float *P = p->part + (size_t)g * p->gs;
    float *B = P + (size_t)p->oc * C * kk;
    int n0 = (int)((long)p->n * g / TD__GROUPS);
    int n1 = (int)((long)p->n * (g + 1) / TD__GROUPS);
    memset(P, 0, p->gs * sizeof(float));
    size_t xplane = (size_t)p->h * p->w, dplane = (size_t)p->oh * p->ow * 8;
    for (int n = n0; n < n1; n++)
        for (int kb = 0; kb < KB; kb++) {
            const float *dyb = dy + ((size_t)n * KB + kb) * dplane;
            __m256 db = _mm256_load_ps(B + (size_t)kb * 8);
            for (int c = 0; c < C; c++) {
                __m256 acc[TD__KMAX * TD__KMAX];
                float *a = P + (((size_t)kb * C + c) * kk) * 8;
                const float *xc = x + ((size_t)n * C + c) * xplane;
                for (int t = 0; t < kk; t++)
                    acc[t] = _mm256_load_ps(a + (size_t)t * 8);
                /* the bias gradient from the first channel's pass */
                __m256 dbc = c == 0 ? db : _mm256_setzero_ps();
                if (K == 3)
                    td__pass(p, xc, dyb, acc, &dbc, 3);
                else if (K == 2)
                    td__pass(p, xc, dyb, acc, &dbc, 2);
                else
                    td__pass(p, xc, dyb, acc, &dbc, 1);
                if (c == 0)
                    db = dbc;
                for (int t = 0; t < kk; t++)
                    _mm256_store_ps(a + (size_t)t * 8, acc[t]);
            }
            _mm256_store_ps(B + (size_t)kb * 8, db);
        }
}

void td_sbw_run(td_sbw *p, const float *x, const float *dy, float *dw,
                float *db)
{
    int nt = omp_get_max_threads();
    nt = nt > p->threads ? p->threads : nt;
    nt = nt > TD__GROUPS ? TD__GROUPS : nt < 1 ? 1 : nt;
    int kk = p->k * p->k, C = p->ic;
    size_t nw = (size_t)p->oc * C * kk;
#pragma omp parallel num_threads(nt)
    {
        int me = omp_get_thread_num(), all = omp_get_num_threads();
        for (int g = me; g < TD__GROUPS; g += all)
            td__group(p, x, dy, g);
#pragma omp barrier
#pragma omp for schedule(static)
        for (long o = 0; o < (long)nw; o++) {
            /* dw[k][c][t] from part [.][k/8][c][t][k%8] */
            size_t k = (size_t)o / ((size_t)C * kk);
            size_t r = (size_t)o % ((size_t)C * kk);
            size_t at = ((k / 8 * C + r / kk) * kk + r % kk) * 8 + k % 8;
            float s = 0;
            for (int g = 0; g < TD__GROUPS; g++)
                s += p->part[(size_t)g * p->gs + at];
            dw[o] = s;
        }
    }
    if (db)
        for (int k = 0; k < p->oc; k++) {
            float s = 0;
            for (int g = 0; g < TD__GROUPS; g++)
                s += p->part[(size_t)g * p->gs + nw + (size_t)k];
            db[k] = s;
        }
}
