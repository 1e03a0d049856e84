/* cuda_lscale.c - loss scaling on the CUDA backend (kernels/loss_scale.h,
 * docs/cuda.md "Loss scaling").
 *
 * Owns: where the scaler's work goes in a step, all of it on the compute
 * stream with the scale read from device memory: the loss's gradient
 * times the scale (after the softmax cross-entropy), then after the
 * backward the inf/NaN check of every updated parameter's gradient into
 * the device flag and the one-thread kernel that decides the step (skip,
 * 1/scale, AdamW's corrections at the step count without skipped steps)
 * and advances the scaler, before the fused update kernels read it.  The
 * scaler's state at create and at resume (set_loss_scale).
 * Never does: synchronise in a step, or read the flag on the host (the
 * state reaches the host with the statistics, cuda.c read_stats).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>

#include "backend/cuda/cuda_int.h"
#include "backend/cuda/cuda_lscale.h"
#include "base/error.h"

const td_ls_dev *td__cuda_ls(const td__cuda *be)
{
    return be->base.cfg.loss_scale > 0 ? be->ls : NULL;
}

int td__cuda_ls_init(td__cuda *be)
{
    td_ls_dev d = {.st = {be->base.cfg.loss_scale, 0, 0}};
    if (!td__cuda_ls(be))
        return 0;
    TD__CU(be, cudaMemcpy(be->ls, &d, sizeof d, cudaMemcpyHostToDevice));
    return 0;
}

int td__cuda_ls_scale_loss(td__cuda *be, float *dlogits, size_t count)
{
    const td_ls_dev *ls = td__cuda_ls(be);
    if (ls)
        TD__CU(be, td__k_ls_scale(be->compute, dlogits, count, ls));
    return 0;
}

int td__cuda_ls_decide(td__cuda *be)
{
    const td_optim_config *o = &be->base.cfg.optim;
    if (!td__cuda_ls(be))
        return 0;
    /* the runs the update touches (td__cuda_update's, frozen ones left
     * out): the test poison into the first updated element (the kernel
     * compares the step scalars' t with the poisoned step on the device,
     * so a captured step poisons the right one too), then the check */
    int poison = be->base.cfg.ls_poison_step > 0;
    for (td__prun s = TD__RUN_FIRST; poison && td__cuda_next_run(be, &s);)
        if (s.mult != 0.0f && s.count > 0) {
            TD__CU(be, td__k_ls_poison(be->compute, be->grads + s.lo,
                                       &be->scal->t,
                                       be->base.cfg.ls_poison_step));
            poison = 0;
        }
    for (td__prun s = TD__RUN_FIRST; td__cuda_next_run(be, &s);)
        if (s.mult != 0.0f)
            TD__CU(be, td__k_ls_check(be->compute, be->grads + s.lo, s.count,
                                      be->ls));
    TD__CU(be, td__k_ls_prepare(be->compute, be->ls,
                                td_backend_ls_interval(&be->base.cfg),
                                o->beta1, o->beta2, &be->scal->t));
    return 0;
}

int td__cuda_set_loss_scale(td_backend *b, const td_ls_state *st)
{
    td__cuda *be = (td__cuda *)b;
    if (!td__cuda_ls(be) || !(st->scale > 0 && isfinite(st->scale)) ||
        st->good < 0 || st->skipped < 0) {
        snprintf(b->err, sizeof b->err, "set_loss_scale: %s",
                 td__cuda_ls(be) ? "scale, good steps or skipped steps out "
                 "of range" : "loss scaling is off");
        return -EINVAL;
    }
    /* pageable source: staged at the call, in stream order after the
     * steps already enqueued (and the flag is clear between steps) */
    TD__CU(be, cudaMemcpyAsync(&be->ls->st, st, sizeof *st,
                               cudaMemcpyHostToDevice, be->compute));
    return 0;
}
