/* cpu_bn.h - the CPU backend's hand-written bf16 batch norm over
 * channels-last (NHWC) or oneDNN's blocked nChw16c activations, fused with
 * the relu, or the residual add and relu, after it.
 *
 * Owns: the loops over a bf16 tensor of rows = N*H*W rows of C channels,
 * laid out [rows][C] (nhwc, hw = 0) or [N][C/16][H*W][16] (nChw16c, hw =
 * H*W), AVX-512, parallel with OpenMP over fixed chunks of up to
 * TD_BN_NHWC_ROWS rows (in nChw16c whole images, or parts of one larger
 * image; one parallel region per training call).  Sums
 * are per chunk in fp32, then over the chunks in chunk order in double:
 * the results do not depend on the thread count or on which thread ran a
 * chunk (bitwise equal runs, hence exact resumes).  The per-channel and
 * per-element math is kernels/bn_nhwc.h's.  Used by the bf16 plan on
 * AMX (channels-last activations) and the blocked bf16 plan (AVX512_BF16
 * without AMX) instead of oneDNN 2.6's bnorm_jit:avx512_core_bf16 with
 * separate eltwise and binary primitives (docs/compute.md).
 * Never does: allocate, running statistics, anything with oneDNN.
 */
#ifndef TD_BACKEND_CPU_BN_H
#define TD_BACKEND_CPU_BN_H

#include <stddef.h>

#include "bf16.h"

#define TD_BN_NHWC_ROWS 256

/* This CPU runs the kernels (AVX-512F) and C is a multiple of 16. */
int td_bn_nhwc_ok(int C);

/* Floats of the scratch `part` the calls below need. */
size_t td_bn_nhwc_part_floats(size_t rows, int C, size_t hw);

/* Training forward: the batch mean and biased variance of every channel
 * into mean[C], var[C], and y = [relu](gamma*(x-mean)*rstd + beta [+ s])
 * in bf16 (s: the shortcut of a fused add, NULL without one). */
void td_bn_nhwc_fwd(const td_bf16 *x, const td_bf16 *s, td_bf16 *y,
                    size_t rows, int C, size_t hw, const float *gamma,
                    const float *beta, float eps, int relu, float *mean,
                    float *var, float *part);

/* Inference forward: the same with the given (running) mean and var. */
void td_bn_nhwc_infer(const td_bf16 *x, const td_bf16 *s, td_bf16 *y,
                      size_t rows, int C, size_t hw, const float *gamma,
                      const float *beta, const float *mean, const float *var,
                      float eps, int relu, float *part);

/* Training backward from the forward's x, output y (the relu's mask),
 * mean and var: g = dy * (y > 0) (dy without relu) into ds when not NULL
 * (the shortcut's gradient of a fused add), dgamma[C], dbeta[C] (fp32)
 * and dx in bf16.  ds may not alias dy, x or dx. */
void td_bn_nhwc_bwd(const td_bf16 *x, const td_bf16 *y, const td_bf16 *dy,
                    td_bf16 *dx, td_bf16 *ds, size_t rows, int C, size_t hw,
                    const float *gamma, const float *mean, const float *var,
                    float eps, int relu, float *dgamma, float *dbeta,
                    float *part);

/* The same with the gradient the sum of two summands, dy = bf16(dy +
 * dy2) (td_bf16_add_n's rounding), never stored: a root with two gradient
 * contributions (a residual block's input) saves the separate sum pass.
 * dy2 NULL is td_bn_nhwc_bwd; dy2 may not alias ds or dx. */
void td_bn_nhwc_bwd2(const td_bf16 *x, const td_bf16 *y, const td_bf16 *dy,
                     const td_bf16 *dy2, td_bf16 *dx, td_bf16 *ds,
                     size_t rows, int C, size_t hw, const float *gamma,
                     const float *mean, const float *var, float eps,
                     int relu, float *dgamma, float *dbeta, float *part);

/* dst[i] = bf16(dst[i] + add[i]), the sum in fp32: td_bf16_add_n's
 * results, 16 lanes at a time where the CPU has AVX-512F.  One thread. */
void td_bf16_add_n_fast(td_bf16 *dst, const td_bf16 *add, size_t n);

#endif
