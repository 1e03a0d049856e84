/* softmax_xent.h - softmax cross-entropy loss, its gradient, accuracy.
 *
 * Math, per sample with logits z[0..k) and label y:
 *   m = max z,  s = sum exp(z_j - m),  p_j = exp(z_j - m) / s
 *   loss = log s + m - z_y
 *   d loss_mean / d z_j = (p_j - [j == y]) * inv_n    (inv_n = 1 / batch)
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

/* Loss of one row; writes the gradient row (scaled by inv_n) when grad is
 * not NULL and sets *correct to 0 or 1. */
TD_HD static inline double td_xent_row(const float *z, int k, int label,
                                       float inv_n, float *grad, int *correct)
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
            grad[j] = (float)((p - (j == label ? 1.0 : 0.0)) * inv_n);
        }
    }
    *correct = arg == label;
    return log(s) + (double)m - (double)z[label];
}

#endif
