/* eltwise.h - small per-element operations the CUDA backend runs itself
 * because cuDNN and cuBLAS have no call that fits them exactly.
 *
 * Math:
 *   add (residual):        y = a + b
 *   gradient summation:    d = (accumulate ? d : 0) + s
 *   dense bias:            y[i][o] += b[o]
 *   dense bias gradient:   db[o] = sum over rows i of dy[i][o], summed in
 *                          row order (fixed order: results do not depend on
 *                          the launch configuration)
 *   dropout:               keep element e with probability 1 - rate, the
 *                          draw being Philox(seed, stream, base + e) < keep,
 *                          kept values scaled by 1 / keep (inverted dropout);
 *                          e is the element's NCHW index on both backends
 *                          whatever the memory layout (NHWC, oneDNN's
 *                          blocked nChw16c: cpu/cpu_dropout.c)
 * One element (or one output column) per call, so a CUDA kernel maps one
 * thread to one call and the host tests exercise the same code.
 * Never does: allocation, launching, anything with more than one output.
 */
#ifndef TD_KERNELS_ELTWISE_H
#define TD_KERNELS_ELTWISE_H

#include <stddef.h>
#include <stdint.h>

#include "hd.h"
#include "philox.h"

TD_HD static inline float td_add_elem(float a, float b) { return a + b; }

TD_HD static inline float td_accum_elem(float d, float s, int accumulate)
{
    return accumulate ? d + s : s;
}

TD_HD static inline float td_bias_add_elem(const float *y, const float *b,
                                           size_t e, int out)
{
    return y[e] + b[e % (size_t)out];
}

TD_HD static inline float td_bias_grad_col(const float *dy, int rows,
                                           int out, int o)
{
    float s = 0.0f;
    for (int i = 0; i < rows; i++)
        s += dy[(size_t)i * out + o];
    return s;
}

/* 1 when element `index` survives dropout with keep probability `keep`. */
TD_HD static inline int td_dropout_keep(uint64_t seed, uint64_t stream,
                                        uint64_t index, float keep)
{
    return td_rng_uniform(seed, stream, index) < keep;
}

/* td_dropout_keep's test in integers, for SIMD loops (the CPU backend):
 * the uniform is u = (bits >> 11) * 2^-53 exactly, so u < keep exactly
 * when (bits >> 11) < ceil(keep * 2^53), the threshold below (keep * 2^53
 * is exact in a double: a power-of-two scaling).  Bitwise the same
 * decision as td_dropout_keep for every index and keep in [0, 1]. */
TD_HD static inline uint64_t td_dropout_threshold(float keep)
{
    double x = (double)keep * 9007199254740992.0; /* 2^53 */
    uint64_t t = (uint64_t)x;
    return (double)t < x ? t + 1 : t;
}

TD_HD static inline int td_dropout_keep_thr(uint64_t seed, uint64_t stream,
                                            uint64_t index, uint64_t thr)
{
    return (td_rng_u64(seed, stream, index) >> 11) < thr;
}

TD_HD static inline float td_dropout_elem(float x, int kept, float keep)
{
    return kept ? x * (1.0f / keep) : 0.0f;
}

#endif
