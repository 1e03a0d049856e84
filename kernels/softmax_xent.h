/* softmax_xent.h - softmax cross-entropy loss, its gradient, accuracy.
 *
 * Math, per sample with logits z[0..k), label y and label smoothing e
 * (0 <= e < 1; the target is (1 - e) on y plus e / k on every class):
 *   m = max z,  s = sum exp(z_j - m),  p_j = exp(z_j - m) / s
 *   q_j = (1 - e) [j == y] + e / k
 *   loss = -sum q_j log p_j = log s + m - (1 - e) z_y - e mean(z)
 *   d loss_mean / d z_j = (p_j - q_j) * inv_n    (inv_n = 1 / batch)
 * With e = 0 this is plain cross-entropy, computed exactly as before
 * smoothing existed.
 *   correct = (arg max z == y), ties going to the lowest index
 * One sample per call: a CUDA kernel maps one sample (row) to a thread or
 * a warp; the host loops over rows.  Loss is returned in double so sums
 * over a validation split stay exact enough.
 * Never does: allocation; labels outside [0, k) are the caller's to reject.
 */
#ifndef TD_KERNELS_SOFTMAX_XENT_H
#define TD_KERNELS_SOFTMAX_XENT_H

#include <math.h>

#include "hd.h"

/* Loss of one row (smooth = e above); writes the gradient row (scaled by
 * inv_n) when grad is not NULL and sets *correct to 0 or 1. */
TD_HD static inline double td_xent_row(const float *z, int k, int label,
                                       float smooth, float inv_n,
                                       float *grad, int *correct)
{
    float m = z[0];
    int arg = 0;
    for (int j = 1; j < k; j++)
        if (z[j] > m) {
            m = z[j];
            arg = j;
        }
    double s = 0.0;
    for (int j = 0; j < k; j++)
        s += exp((double)(z[j] - m));
    if (grad) {
        double inv_s = 1.0 / s;
        for (int j = 0; j < k; j++) {
            double p = exp((double)(z[j] - m)) * inv_s;
            double q = (j == label ? 1.0 - (double)smooth : 0.0) +
                       (double)smooth / k;
            grad[j] = (float)((p - q) * inv_n);
        }
    }
    *correct = arg == label;
    if (smooth == 0.0f)
        return log(s) + (double)m - (double)z[label];
    double mean = 0.0;
    for (int j = 0; j < k; j++)
        mean += (double)z[j];
    mean /= k;
    return log(s) + (double)m - (1.0 - (double)smooth) * (double)z[label] -
           (double)smooth * mean;
}

#endif
