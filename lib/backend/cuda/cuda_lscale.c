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

/* The runs of parameters the update touches (multiplier not 0), as
 * td__cuda_update groups them: fn on each, stopping at an error. */
static int td__each_updated(td__cuda *be,
                            int (*fn)(td__cuda *, size_t, size_t))
{
    const td_model *m = be->base.model;
    const float *mult = be->base.cfg.lr_mult;
    if (!mult)
        return fn(be, 0, m->param_count);
    size_t off = 0;
    for (int p = 0; p < m->nparams; off += m->params[p++].count)
        if (mult[p] != 0.0f)
            TD__TRY(fn(be, off, m->params[p].count));
    return 0;
}

static int td__check(td__cuda *be, size_t lo, size_t cnt)
{
    TD__CU(be, td__k_ls_check(be->compute, be->grads + lo, cnt, be->ls));
    return 0;
}

/* The kernel compares the step scalars' t with the poisoned step on the
 * device, so a captured step (cuda_graph.c) poisons the right one too. */
static int td__poison(td__cuda *be, size_t lo, size_t cnt)
{
    if (cnt > 0)
        TD__CU(be, td__k_ls_poison(be->compute, be->grads + lo, &be->scal->t,
                                   be->base.cfg.ls_poison_step));
    return 1; /* the first updated element only: stop here */
}

int td__cuda_ls_decide(td__cuda *be)
{
    const td_optim_config *o = &be->base.cfg.optim;
    if (!td__cuda_ls(be))
        return 0;
    if (be->base.cfg.ls_poison_step > 0) {
        int rc = td__each_updated(be, td__poison);
        if (rc < 0)
            return rc;
    }
    TD__TRY(td__each_updated(be, td__check));
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
