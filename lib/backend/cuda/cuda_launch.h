/* cuda_launch.h - the one way the CUDA backend launches a kernel.
 *
 * TD_LAUNCH(kernel, grid, block, smem, stream, args...) is nvcc's
 * kernel<<<grid, block, smem, stream>>>(args...) in the CUDA build.  In
 * the simulated build (TD_CUDA_SIM, tests only: tests/gpu/sim/), where g++
 * compiles the .cu files as C++, it queues the same kernel body on the
 * simulated stream, which runs every block and thread of the grid on the
 * host (sim_kernel.h).  For that to stay exact the kernels use no
 * __shared__ memory, __syncthreads or warp intrinsics.
 * Never does: anything else; launch errors reach cudaGetLastError in both
 * builds.
 */
#ifndef TD_CUDA_LAUNCH_H
#define TD_CUDA_LAUNCH_H

#ifdef TD_CUDA_SIM
#include "sim_kernel.h"
#else
#include <cuda_runtime.h>
#define TD_LAUNCH(kernel, grid, block, smem, stream, ...)                    \
    kernel<<<(grid), (block), (smem), (stream)>>>(__VA_ARGS__)
#endif

#endif
