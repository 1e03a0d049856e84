/* bn_nhwc.h - the per-channel and per-element math of the CPU backend's
 * hand-written bf16 channels-last batch norm (lib/backend/cpu/cpu_bn.c),
 * fused with the relu, or the residual add and relu, that follow it.
 *
 * Math, per channel c over the M = N*H*W rows of an NHWC tensor, with the
 * batch statistics mean[c] and the biased variance var[c] (training) or
 * the running ones (inference), rstd = 1 / sqrt(var + eps):
 *   forward   v = gamma*(x - mean)*rstd + beta
 *             [v = bf16(v) + s]   (s: the shortcut of a fused add; the
 *             batch norm's output rounded as the unfused layers store it)
 *             y = relu(v) (when fused), rounded to bf16
 *   written   y = (x - mean)*a + beta [+ s] with a = gamma*rstd
 *             (td_bn_nhwc_fwd_coef; one subtraction and one fused
 *             multiply-add per element: the folded x*a + (beta - mean*a)
 *             cancels when |mean| is large against the spread, and moved
 *             one bf16 rounding in a few hundred enough to put
 *             test_backend_bf16's resnet20 and fmnist-cnn losses 1.1-1.3e-3
 *             off the bf16 reference, over its 1e-3)
 *   backward  g = dy * (y > 0) when a relu is fused, else dy; g is also the
 *             shortcut's gradient when an add is fused
 *             dbeta = sum g,  dgamma = rstd * sum g*(x - mean)
 *             dx = a*(g - dbeta/M) - (x - mean) * a*rstd*dgamma/M
 *   written   dx = g*a - (x - mean)*k + d with k = a*rstd*dgamma/M and
 *             d = -a*dbeta/M (td_bn_nhwc_bwd_coef)
 * which are oneDNN's definitions of diff_scale and diff_shift (the values
 * the optimizer consumes) and its training-mode backward.
 *
 * The statistics are sums over a shift (the first row's value of the
 * channel): with the channel's values close to it the sum of squares does
 * not cancel the way sum x^2 - M*mean^2 does (td_bn_nhwc_stats).
 * Never does: loops over tensors, threads or vector code (cpu_bn.c);
 * running statistics (the backend's td__bn_running).
 */
#ifndef TD_KERNELS_BN_NHWC_H
#define TD_KERNELS_BN_NHWC_H

#include <math.h>

#include "bf16.h"
#include "hd.h"

/* Mean and biased variance of a channel from the shifted sums over its
 * m rows: s1 = sum (x - shift), s2 = sum (x - shift)^2. */
TD_HD static inline void td_bn_nhwc_stats(double s1, double s2, double m,
                                          float shift, float *mean,
                                          float *var)
{
    double d = s1 / m, v = s2 / m - d * d;
    *mean = (float)(shift + d);
    *var = (float)(v > 0 ? v : 0);
}

TD_HD static inline float td_bn_nhwc_rstd(float var, float eps)
{
    return 1.0f / sqrtf(var + eps);
}

/* Forward scale of one channel: y = (x - mean)*a + beta (+ shortcut). */
TD_HD static inline float td_bn_nhwc_fwd_coef(float gamma, float var,
                                              float eps)
{
    return gamma * td_bn_nhwc_rstd(var, eps);
}

/* One output element before its final rounding: (x - mean)*a + beta,
 * with a fused add first rounded to bf16 (the batch norm's own output,
 * as the unfused layers store it) and plus the shortcut s, then relu'd
 * when relu.  The fused path thus rounds where the unfused one does. */
TD_HD static inline float td_bn_nhwc_y(float x, float s, float mean, float a,
                                       float beta, int relu, int add)
{
    float v = fmaf(x - mean, a, beta);
    if (add)
        v = td_bf16_round(v) + s;
    return relu && !(v > 0.0f) ? 0.0f : v;
}

/* The same in fp32 (cpu_bn8.c): the batch norm's output is not rounded
 * before the add, as the unfused fp32 layers keep it in fp32. */
TD_HD static inline float td_bn_f32_y(float x, float s, float mean, float a,
                                      float beta, int relu, int add)
{
    float v = fmaf(x - mean, a, beta);
    if (add)
        v += s;
    return relu && !(v > 0.0f) ? 0.0f : v;
}

/* The gradient through the fused relu: dy where the saved output y is
 * positive (dy itself without a relu). */
TD_HD static inline float td_bn_nhwc_g(float dy, float y, int relu)
{
    return relu && !(y > 0.0f) ? 0.0f : dy;
}

/* Backward of one channel from the sums sg = sum g and sgx = sum
 * g*(x - mean) over m rows: dgamma, dbeta and the coefficients of
 * dx = g*a - (x - mean)*k + d. */
TD_HD static inline void td_bn_nhwc_bwd_coef(float sg, float sgx, float m,
                                             float gamma, float var,
                                             float eps,
                                             float *dgamma, float *dbeta,
                                             float *a, float *k, float *d)
{
    float rstd = td_bn_nhwc_rstd(var, eps);
    *dgamma = sgx * rstd;
    *dbeta = sg;
    *a = gamma * rstd;
    *k = *a * rstd * *dgamma / m;
    *d = -*a * sg / m;
}

TD_HD static inline float td_bn_nhwc_dx(float g, float x, float mean,
                                        float a, float k, float d)
{
    return fmaf(g, a, fmaf(mean - x, k, d));
}

#endif
