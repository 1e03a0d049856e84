/* optim_update.h - the fused per-element optimizer updates.
 *
 * SGD (PyTorch's torch.optim.SGD semantics), with g the gradient:
 *   g += wd * w
 *   v = mu * v + g                       (the first step too; v starts at 0)
 *   w -= lr * (nesterov ? g + mu * v : v)
 * With mu == 0 there is no state and w -= lr * g.
 * AdamW (decoupled weight decay, Loshchilov & Hutter), t = 1-based step:
 *   w -= lr * wd * w
 *   m = b1 m + (1 - b1) g,  v = b2 v + (1 - b2) g^2
 *   w -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
 * One element per call so a CUDA kernel maps one thread to one parameter
 * element; the host loops.  The bias corrections are computed once per
 * step by the caller (td_adamw_corr).
 * Never does: allocation, schedule evaluation (see lib/optim.h).
 */
#ifndef TD_KERNELS_OPTIM_UPDATE_H
#define TD_KERNELS_OPTIM_UPDATE_H

#include <math.h>
#include <stdint.h>

#include "hd.h"

TD_HD static inline void td_sgd_elem(float *w, float *v, float g, float lr,
                                     float mu, float wd, int nesterov)
{
    g += wd * *w;
    if (v) {
        float vv = mu * *v + g;
        *v = vv;
        g = nesterov ? g + mu * vv : vv;
    }
    *w -= lr * g;
}

typedef struct td_adamw_corr {
    float c1, c2; /* 1 / (1 - b1^t), 1 / (1 - b2^t) */
} td_adamw_corr;

TD_HD static inline td_adamw_corr td_adamw_corrections(double b1, double b2,
                                                       int64_t t)
{
    td_adamw_corr c;
    c.c1 = (float)(1.0 / (1.0 - pow(b1, (double)t)));
    c.c2 = (float)(1.0 / (1.0 - pow(b2, (double)t)));
    return c;
}

TD_HD static inline void td_adamw_elem(float *w, float *m, float *v, float g,
                                       float lr, float b1, float b2,
                                       float eps, float wd, td_adamw_corr c)
{
    float ww = *w * (1.0f - lr * wd);
    float mm = b1 * *m + (1.0f - b1) * g;
    float vv = b2 * *v + (1.0f - b2) * g * g;
    *m = mm;
    *v = vv;
    *w = ww - lr * (mm * c.c1) / (sqrtf(vv * c.c2) + eps);
}

#endif
