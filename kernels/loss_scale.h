/* loss_scale.h - dynamic loss scaling's state machine (fp16 training).
 *
 * The training loss (its gradient, the logits' dlogits) is multiplied by
 * `scale` before the backward pass, so that small gradients stay above
 * fp16's smallest normal number; the optimizer multiplies every parameter
 * gradient by 1 / scale before using it.  After each backward:
 *   some updated parameter gradient is inf or NaN (an overflow):
 *       the step is skipped (no change at all to parameters, optimizer
 *       state or the AdamW step count), skipped += 1, good = 0,
 *       scale = max(scale * TD_LS_BACKOFF, TD_LS_MIN)
 *   else:
 *       good += 1; when good reaches `interval`:
 *       scale = min(scale * TD_LS_GROWTH, TD_LS_MAX), good = 0
 * interval 0 is a static scale: it never changes (overflowing steps are
 * still skipped).  These are PyTorch's GradScaler defaults (init 2^16,
 * growth 2, backoff 0.5, interval 2000), plus a ceiling (2^24: the scaled
 * gradients of a normal step would overflow fp16 far below it anyway)
 * and a floor (1: a scale below 1 only loses small gradients; a job that
 * overflows at scale 1 is broken, not badly scaled).  With powers of two
 * the scale stays a power of two and scaling and unscaling are exact in
 * every binary float format, so fp32 training with loss scaling gives
 * bitwise the result of fp32 training without it (docs/compute.md).
 *
 * One state per run: on the CUDA backend it lives in device memory and
 * td_ls_prepare runs in a one-thread kernel, so the step needs no host
 * synchronisation; the CPU backend calls the same functions on the host.
 * Never does: look at gradients in bulk (the backends reduce them into
 * one flag with td_ls_bad), allocate, or decide when scaling is on.
 */
#ifndef TD_KERNELS_LOSS_SCALE_H
#define TD_KERNELS_LOSS_SCALE_H

#include <math.h>
#include <stdint.h>

#include "hd.h"
#include "optim_update.h"

#define TD_LS_INIT 65536.0f       /* 2^16, the initial scale of "dynamic" */
#define TD_LS_INTERVAL 2000       /* good steps before the scale doubles */
#define TD_LS_GROWTH 2.0f
#define TD_LS_BACKOFF 0.5f
#define TD_LS_MAX 16777216.0f     /* 2^24 */
#define TD_LS_MIN 1.0f

typedef struct td_ls_state {
    float scale;        /* the loss's multiplier; 0: loss scaling is off */
    int32_t good;       /* finite steps since the scale last changed */
    int64_t skipped;    /* steps skipped since the run began */
} td_ls_state;

/* What the optimizer update of one step reads (computed on the device). */
typedef struct td_ls_step {
    int32_t skip;       /* 1: the update does nothing at all */
    float inv_scale;    /* gradients are multiplied by this */
    td_adamw_corr corr; /* AdamW bias corrections at step t - skipped */
} td_ls_step;

/* The device's copy: the state, the overflow flag the gradient check
 * sets, and the current step's update parameters. */
typedef struct td_ls_dev {
    td_ls_state st;
    int32_t found;      /* set to 1 by td_ls_bad's callers; cleared by
                           td_ls_prepare */
    td_ls_step step;
} td_ls_dev;

/* 1 for an element that makes the step overflow (inf or NaN). */
TD_HD static inline int td_ls_bad(float g) { return !isfinite(g); }

/* The state machine above; returns 1 when the step is skipped. */
TD_HD static inline int td_ls_advance(td_ls_state *s, int found,
                                      int interval)
{
    if (found) {
        s->skipped++;
        s->good = 0;
        if (interval > 0) {
            float b = s->scale * TD_LS_BACKOFF;
            s->scale = b < TD_LS_MIN ? TD_LS_MIN : b;
        }
        return 1;
    }
    if (interval > 0 && ++s->good >= interval) {
        float g = s->scale * TD_LS_GROWTH;
        s->scale = g > TD_LS_MAX ? TD_LS_MAX : g;
        s->good = 0;
    }
    return 0;
}

/* After the gradient check of step t (1-based, skipped steps counted):
 * the step's update parameters from the state before it (inv_scale of the
 * scale the loss was multiplied by; AdamW's step count excludes the steps
 * skipped before this one), then the state advanced and the flag cleared.
 * b1, b2: AdamW's betas (anything for SGD, which ignores corr). */
TD_HD static inline void td_ls_prepare(td_ls_dev *d, int interval, double b1,
                                       double b2, int64_t t)
{
    d->step.skip = d->found != 0;
    d->step.inv_scale = 1.0f / d->st.scale;
    if (!d->step.skip)
        d->step.corr = td_adamw_corrections(b1, b2, t - d->st.skipped);
    td_ls_advance(&d->st, d->found, interval);
    d->found = 0;
}

#endif
