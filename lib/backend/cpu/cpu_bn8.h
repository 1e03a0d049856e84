/* cpu_bn8.h - the CPU backend's hand-written fp32 batch norm over oneDNN's
 * blocked nChw8c activations (the layout its AVX2 kernels pick), fused
 * with the relu, or the residual add and relu, after it.
 *
 * Owns: the loops over an fp32 tensor of rows = N*H*W rows of C channels,
 * laid out [N][C/8][H*W][8] (hw = H*W) or [rows][C] (hw = 0), AVX2 with
 * FMA, parallel with OpenMP over cpu_bn_geo.h's fixed chunks (one
 * parallel region per training call).  Sums are per chunk in fp32, then
 * over the chunks in chunk order in double: the results do not depend on
 * the thread count (bitwise equal runs, hence exact resumes).  The
 * per-channel and per-element math is kernels/bn_nhwc.h's (td_bn_f32_y
 * for the output).  Used by the fp32 plan where oneDNN picks nChw8c, i.e.
 * CPUs without AVX-512, instead of oneDNN 2.6's bnorm_jit:avx2 with
 * separate eltwise (relu) and binary (add) primitives (docs/compute.md).
 * The scratch `part` is td_bn_nhwc_part_floats(rows, C, hw) floats.
 * Never does: allocate, running statistics, anything with oneDNN.
 */
#ifndef TD_BACKEND_CPU_BN8_H
#define TD_BACKEND_CPU_BN8_H

#include <stddef.h>
#include <stdint.h>

/* This CPU runs the kernels (AVX2 and FMA) and C is a multiple of 8. */
int td_bn8_ok(int C);

/* Bytes of the relu's sign mask of a tensor (one bit per element). */
size_t td_bn8_mask_bytes(size_t rows, int C);

/* Training forward: the batch mean and biased variance of every channel
 * into mean[C], var[C], and y = [relu](gamma*(x-mean)*rstd + beta [+ s])
 * (s: the shortcut of a fused add, NULL without one); with relu, y > 0 as
 * bits into mask (td_bn8_mask_bytes; bit i of byte j is element 8*j + i
 * in memory order), which the backward reads instead of y. */
void td_bn8_fwd(const float *x, const float *s, float *y, uint8_t *mask,
                size_t rows, int C, size_t hw, const float *gamma,
                const float *beta, float eps, int relu, float *mean,
                float *var, float *part);

/* A fold's training forward (cpu_fold.h): mean, var and the scale
 * gamma*rstd of every channel into scale[C], no output. */
void td_bn8_stats(const float *x, size_t rows, int C, size_t hw,
                  const float *gamma, float eps, float *mean, float *var,
                  float *scale, float *part);

/* y = relu((x - mean) * a + b), the fold's output written out (reads of
 * it). */
void td_bn8_apply(const float *x, float *y, size_t rows, int C, size_t hw,
                  const float *mean, const float *a, const float *b);

/* Inference forward: the same with the given (running) mean and var, no
 * mask. */
void td_bn8_infer(const float *x, const float *s, float *y, size_t rows,
                  int C, size_t hw, const float *gamma, const float *beta,
                  const float *mean, const float *var, float eps, int relu,
                  float *part);

/* Training backward from the forward's x, relu mask (NULL: no relu),
 * mean and var, the gradient dy + dy2 (dy2 NULL: dy alone; a root with
 * two gradient summands, a residual block's input, saves the sum pass):
 * g = (dy + dy2) * (y > 0) (the mask's bits) into ds when not NULL (the
 * shortcut's gradient of a fused add), dgamma[C], dbeta[C] and dx.  ds
 * may not alias dy, dy2, x or dx; dx may alias neither dy2 nor ds. */
void td_bn8_bwd(const float *x, const uint8_t *mask, const float *dy,
                const float *dy2, float *dx, float *ds, size_t rows, int C,
                size_t hw, const float *gamma, const float *mean,
                const float *var, float eps, float *dgamma, float *dbeta,
                float *part);

/* The same for a fold: the relu's signs from x, (x - mean) * scale + beta
 * > 0 as the consumers computed it, no mask, no add. */
void td_bn8_bwd_fold(const float *x, const float *scale, const float *beta,
                     const float *dy, const float *dy2, float *dx,
                     size_t rows, int C, size_t hw, const float *gamma,
                     const float *mean, const float *var, float eps,
                     float *dgamma, float *dbeta, float *part);

#endif
