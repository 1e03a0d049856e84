/* bn_eval.h - the backward of a batch norm kept in inference mode while
 * the model trains (td_backend_config.bn_eval, the job's freeze_bn_stats).
 *
 * Math, per channel c with the running statistics m[c], v[c] (inputs, not
 * functions of x) and inv[c] = 1 / sqrt(v[c] + eps):
 *   forward      y = gamma[c] * (x - m[c]) * inv[c] + beta[c]
 *   dx           = dy * gamma[c] * inv[c]
 *   dgamma[c]    = inv[c] * sum over n, h, w of dy * (x - m[c])
 *   dbeta[c]     = sum over n, h, w of dy
 * (the training-mode backward's mean and variance terms are absent: the
 * statistics do not depend on the batch).  These are the CPU backend's
 * values (oneDNN's backward with global statistics), computed in fp32.
 *
 * Reductions in a fixed order, so results do not depend on the launch
 * configuration: td_bn_eval_plane sums one (sample, channel) plane over
 * h*w in index order; td_bn_eval_chan sums a channel's planes in sample
 * order.  The CUDA kernels map one thread to one plane, one channel or one
 * element; tests run the same functions on the host.
 * Never does: allocation, launching, touch the running statistics.
 */
#ifndef TD_KERNELS_BN_EVAL_H
#define TD_KERNELS_BN_EVAL_H

#include <math.h>
#include <stddef.h>

#include "hd.h"

TD_HD static inline float td_bn_eval_inv(float var, float eps)
{
    return 1.0f / sqrtf(var + eps);
}

/* dx of one element whose channel has scale gamma and 1/std inv. */
TD_HD static inline float td_bn_eval_dx(float dy, float gamma, float inv)
{
    return dy * (gamma * inv);
}

/* One element's share of a plane's sums (td_bn_eval_plane; the CUDA
 * kernel for 16-bit tensors calls it on values loaded as float). */
TD_HD static inline void td_bn_eval_acc(float x, float dy, float m,
                                        float *sdy, float *sdyx)
{
    *sdy += dy;
    *sdyx += dy * (x - m);
}

/* Element j of plane p = n * C + c (hw elements) in an NCHW tensor or,
 * when nhwc, an NHWC one (the CUDA backend's 16-bit layout). */
TD_HD static inline size_t td_bn_eval_at(size_t p, size_t j, int C,
                                         size_t hw, int nhwc)
{
    if (!nhwc)
        return p * hw + j;
    size_t n = p / (size_t)C, c = p % (size_t)C;
    return (n * hw + j) * (size_t)C + c;
}

/* Plane p = n * C + c of an NCHW tensor with hw elements per plane:
 * part[2p] = sum dy, part[2p + 1] = sum dy * (x - mean). */
TD_HD static inline void td_bn_eval_plane(const float *x, const float *dy,
                                          const float *mean, float *part,
                                          size_t p, int C, size_t hw)
{
    const float *xp = x + p * hw, *gp = dy + p * hw;
    float m = mean[p % (size_t)C], sdy = 0.0f, sdyx = 0.0f;
    for (size_t i = 0; i < hw; i++)
        td_bn_eval_acc(xp[i], gp[i], m, &sdy, &sdyx);
    part[2 * p] = sdy;
    part[2 * p + 1] = sdyx;
}

/* Channel c: the n planes' partial sums, in sample order, into dgamma[c]
 * and dbeta[c]. */
TD_HD static inline void td_bn_eval_chan(const float *part, const float *var,
                                         float eps, float *dgamma,
                                         float *dbeta, int n, int C, int c)
{
    float sdy = 0.0f, sdyx = 0.0f;
    for (int i = 0; i < n; i++) {
        size_t p = (size_t)i * C + c;
        sdy += part[2 * p];
        sdyx += part[2 * p + 1];
    }
    dgamma[c] = sdyx * td_bn_eval_inv(var[c], eps);
    dbeta[c] = sdy;
}

#endif
