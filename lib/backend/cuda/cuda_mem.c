/* cuda_mem.c - the CUDA backend's device copies of its whole state and the
 * warm-up step at create (issue 14 finding 3).
 *
 * Owns: the shadow copies (parameters, optimizer slots and running
 * statistics into the arena's shadow and back, on the compute stream) that
 * snapshots and the warm-up use, and the warm-up step itself: every
 * kernel, cuBLAS and cuDNN call of a training and an evaluation step runs
 * once at create, so what they load or allocate at first use (lazy module
 * loading, cuDNN's runtime-compiled engines) happens while a failure can
 * still fail create; then cudaMemGetInfo is logged.
 * Never does: leave a trace of the warm-up in the model (values, optimizer
 * state, running statistics, counters and gradients are as before it).
 */
#include <stdio.h>
#include <string.h>

#include "backend/cuda/cuda_int.h"
#include "base/log.h"

/* Parameters, optimizer slots and running statistics into the device
 * shadow, on the compute stream (snapshots, the warm-up step). */
int td__to_shadow(td__cuda *be)
{
    size_t pc = be->base.model->param_count, f = sizeof(float);
    TD__CU(be, cudaMemcpyAsync(be->shadow, be->params, pc * f,
                               cudaMemcpyDeviceToDevice, be->compute));
    if (be->nslots)
        TD__CU(be, cudaMemcpyAsync(be->shadow + pc, be->slots,
                                   be->nslots * pc * f,
                                   cudaMemcpyDeviceToDevice, be->compute));
    if (be->nstate)
        TD__CU(be, cudaMemcpyAsync(be->shadow + pc * (1 + be->nslots),
                                   be->state, be->nstate * f,
                                   cudaMemcpyDeviceToDevice, be->compute));
    return 0;
}

int td__from_shadow(td__cuda *be)
{
    size_t pc = be->base.model->param_count, f = sizeof(float);
    TD__CU(be, cudaMemcpyAsync(be->params, be->shadow, pc * f,
                               cudaMemcpyDeviceToDevice, be->compute));
    if (be->nslots)
        TD__CU(be, cudaMemcpyAsync(be->slots, be->shadow + pc,
                                   be->nslots * pc * f,
                                   cudaMemcpyDeviceToDevice, be->compute));
    if (be->nstate)
        TD__CU(be, cudaMemcpyAsync(be->state, be->shadow + pc * (1 + be->nslots),
                                   be->nstate * f, cudaMemcpyDeviceToDevice,
                                   be->compute));
    return td__cuda_narrow_params(be); /* the weights' 16-bit copy */
}

/* One training step (forward, loss, backward, update with lr 0) and one
 * evaluation forward on a zero batch at create (finding 3), so that every
 * kernel, cuBLAS and cuDNN call of a step has run once: what they load or
 * allocate at first use does it now, and a failure fails create, which
 * leaves the GPU to the next job.  Parameters, optimizer slots and running
 * statistics go through the shadow and come back unchanged; counters and
 * gradients start from zero as if nothing had run.  Then cudaMemGetInfo
 * says what the libraries took beside the arena. */
int td__warmup(td__cuda *be)
{
    const td_shape in = be->base.model->layers[0].out;
    size_t per = (size_t)in.c * in.h * in.w, free_b = 0, total_b = 0;
    /* the initial values were set on the legacy default stream, which the
     * non-blocking compute stream does not wait for (create only) */
    TD__CU(be, cudaDeviceSynchronize());
    TD__TRY(td__to_shadow(be));
    TD__CU(be, cudaMemsetAsync(be->pixels[0], 0, per * (size_t)be->batch,
                               be->compute));
    TD__CU(be, cudaMemsetAsync(be->labels[0], 0,
                               sizeof(int32_t) * (size_t)be->batch,
                               be->compute));
    be->cur = 0;
    be->n = be->batch;
    TD__TRY(td__cuda_forward(be, 1));
    TD__TRY(td__cuda_loss(be, 1));
    TD__TRY(td__cuda_backward(be));
    TD__TRY(td__step_scalars(be, 0.0f, 1));
    TD__TRY(td__cuda_update(be));
    TD__TRY(td__cuda_forward(be, 0));
    TD__TRY(td__cuda_loss(be, 0));
    TD__TRY(td__from_shadow(be));
    TD__CU(be, cudaMemsetAsync(be->grads, 0, be->base.model->param_count *
                               sizeof(float), be->compute));
    TD__CU(be, cudaMemsetAsync(be->acc, 0, sizeof(td_dev_stats),
                               be->compute));
    TD__CU(be, cudaStreamSynchronize(be->compute));
    be->n = 0;
    be->step = 0;
    TD__CU(be, cudaMemGetInfo(&free_b, &total_b));
    size_t took = be->free_before > free_b + be->arena_bytes
                  ? be->free_before - free_b - be->arena_bytes : 0;
    td_info("cuda:%d: after the warm-up step: %.1f MiB of %.1f MiB free "
            "(arena %.1f MiB; the CUDA libraries took %.1f MiB at first use)",
            be->dev, free_b / 1048576.0, total_b / 1048576.0,
            be->arena_bytes / 1048576.0, took / 1048576.0);
    if (free_b < be->headroom / 4)
        td_warn("cuda:%d: only %.1f MiB free after the warm-up step: "
                "another process on this GPU, or libraries that need more "
                "than the %.1f MiB of headroom, may make a later step run "
                "out of memory", be->dev, free_b / 1048576.0,
                be->headroom / 1048576.0);
    return 0;
}

