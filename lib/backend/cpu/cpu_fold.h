/* cpu_fold.h - a batch norm and its relu folded into the layers that read
 * their output, in the CPU backend's fp32 AVX2 plan (nChw8c).
 *
 * Owns: the description of the fold and the per-vector arithmetic.  The
 * batch norm's forward computes its statistics and scale only; its
 * output relu((x - mean) * a + b) is never written: each consumer (a
 * Winograd convolution's input transforms, the 2x2 max pooling) reads
 * the batch norm's input x and applies it to every element it loads, with
 * the same operations as cpu_bn8.c's output pass, so the values, and
 * what follows from them, are bit for bit those of the unfolded plan.
 * Never does: decide where it applies (cpu_kplan.c), statistics.
 */
#ifndef TD_BACKEND_CPU_FOLD_H
#define TD_BACKEND_CPU_FOLD_H

#include <immintrin.h>

/* Per channel c of C: y = relu((x - mean[c]) * a[c] + b[c]). */
typedef struct td_fold {
    const float *mean, *a, *b;
    int C;
} td_fold;

/* The folded value of 8 channels' x (m, a, b: those channels'); max's
 * second operand is 0, so a NaN becomes 0 as in cpu_bn8.c. */
static inline __attribute__((always_inline, target("avx2,fma"))) __m256
td_fold8(__m256 x, __m256 m, __m256 a, __m256 b)
{
    return _mm256_max_ps(_mm256_fmadd_ps(_mm256_sub_ps(x, m), a, b),
                         _mm256_setzero_ps());
}

#endif
