/* cuda_lscale.cu - the loss-scaling kernels of the CUDA backend.
 *
 * Owns: the launch code around kernels/loss_scale.h: scaling the loss's
 * gradient by the device's current scale, the inf/NaN check of the
 * parameter gradients into the device flag, and the one-thread kernel that
 * turns the flag into the step's update parameters and advances the
 * scaler.  Everything reads the scale from device memory, so a step with
 * loss scaling needs no host synchronisation.  Every launch goes through
 * TD_LAUNCH (cuda_launch.h): the simulated device runs these bodies.
 * Never does: allocate, synchronise, or arithmetic of its own beyond
 * indexing (that lives in kernels/loss_scale.h).
 */
#include <stdint.h>

#include "backend/cuda/cuda_launch.h"
#include "backend/cuda/cuda_lscale.h"

extern "C" {
#include "loss_scale.h"
}

namespace {

const int kLsBlock = 256;

unsigned ls_grid(size_t count)
{
    size_t g = (count + kLsBlock - 1) / kLsBlock;
    if (g < 1)
        g = 1;
    return g > 65535u * 4u ? 65535u * 4u : (unsigned)g;
}

#define TD__LS_LOOP(i, count)                                                \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;           \
         i < (count); i += (size_t)gridDim.x * blockDim.x)

__global__ void ls_scale_k(float *g, size_t count, const td_ls_dev *d)
{
    float sc = d->st.scale;
    TD__LS_LOOP(i, count)
    g[i] *= sc;
}

/* Every thread that sees a bad element writes the same 1: a benign race
 * on a GPU, no atomics needed. */
__global__ void ls_check_k(const float *g, size_t count, td_ls_dev *d)
{
    int bad = 0;
    TD__LS_LOOP(i, count)
    bad |= td_ls_bad(g[i]);
    if (bad)
        d->found = 1;
}

__global__ void ls_prepare_k(td_ls_dev *d, int interval, double b1,
                             double b2, const int64_t *t)
{
    if (blockIdx.x == 0 && threadIdx.x == 0)
        td_ls_prepare(d, interval, b1, b2, *t);
}

__global__ void ls_poison_k(float *g, const int64_t *t, long long at)
{
    if (blockIdx.x == 0 && threadIdx.x == 0 && *t == (int64_t)at)
        *g = INFINITY;
}

} // namespace

extern "C" cudaError_t td__k_ls_scale(cudaStream_t s, float *g, size_t count,
                                      const td_ls_dev *d)
{
    TD_LAUNCH(ls_scale_k, ls_grid(count), kLsBlock, 0, s, g, count, d);
    return cudaGetLastError();
}

extern "C" cudaError_t td__k_ls_check(cudaStream_t s, const float *g,
                                      size_t count, td_ls_dev *d)
{
    TD_LAUNCH(ls_check_k, ls_grid(count), kLsBlock, 0, s, g, count, d);
    return cudaGetLastError();
}

extern "C" cudaError_t td__k_ls_prepare(cudaStream_t s, td_ls_dev *d,
                                        int interval, double b1, double b2,
                                        const int64_t *t)
{
    TD_LAUNCH(ls_prepare_k, 1, 1, 0, s, d, interval, b1, b2, t);
    return cudaGetLastError();
}

extern "C" cudaError_t td__k_ls_poison(cudaStream_t s, float *g,
                                       const int64_t *t, int64_t at)
{
    TD_LAUNCH(ls_poison_k, 1, 1, 0, s, g, t, (long long)at);
    return cudaGetLastError();
}
