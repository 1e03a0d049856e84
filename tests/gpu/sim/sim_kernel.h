/* sim_kernel.h - what the project's CUDA kernels need to run on the host
 * in the simulated build (TD_CUDA_SIM), where g++ compiles the .cu files
 * as C++ (`-x c++` or a .cc file that includes them).
 *
 * Owns: threadIdx, blockIdx, blockDim and gridDim as thread-local
 * variables, and TD_LAUNCH, which turns a launch into a closure queued on
 * the stream (td_sim_launch): the stream's worker runs every thread of
 * every block in turn, one after the other.  That is exact for kernels
 * without __shared__ memory, __syncthreads or warp intrinsics (the
 * project's kernels use none: keep it so, or extend this header).  The
 * kernel's pointer arguments (typed by the kernel's own parameters: const
 * means read, otherwise written) go to the device check and the race
 * detector.  __global__, __device__, __host__, dim3 and uint3 come from
 * the real <cuda_runtime.h>, which compiles as plain C++.
 * Never does: exist outside the simulated build (cuda_launch.h picks this
 * header only under TD_CUDA_SIM).
 */
#ifndef TD_SIM_KERNEL_H
#define TD_SIM_KERNEL_H

#include <cuda_runtime.h>

#include "sim.h"

namespace td_sim {

inline thread_local uint3 thread_idx, block_idx;
inline thread_local dim3 block_dim, grid_dim;

template <typename T> inline void arg(td_sim_range *, int *, T) {}
template <typename T> inline void arg(td_sim_range *r, int *n, const T *p)
{
    r[(*n)++] = td_sim_range{p, sizeof(T), 0};
}
template <typename T> inline void arg(td_sim_range *r, int *n, T *p)
{
    r[(*n)++] = td_sim_range{p, sizeof(T), 1};
}

template <typename F> struct closure {
    F body;
    dim3 grid, block;
};

template <typename F> void run(void *p)
{
    closure<F> *c = static_cast<closure<F> *>(p);
    grid_dim = c->grid;
    block_dim = c->block;
    for (unsigned bz = 0; bz < c->grid.z; bz++)
        for (unsigned by = 0; by < c->grid.y; by++)
            for (unsigned bx = 0; bx < c->grid.x; bx++) {
                block_idx = make_uint3(bx, by, bz);
                for (unsigned tz = 0; tz < c->block.z; tz++)
                    for (unsigned ty = 0; ty < c->block.y; ty++)
                        for (unsigned tx = 0; tx < c->block.x; tx++) {
                            thread_idx = make_uint3(tx, ty, tz);
                            c->body();
                        }
            }
}

template <typename F> void drop(void *p)
{
    delete static_cast<closure<F> *>(p);
}

template <typename... P, typename... A>
inline void launch(const char *name, dim3 grid, dim3 block, size_t smem,
                   cudaStream_t s, const void *caller, void (*k)(P...),
                   A... a)
{
    static_assert(sizeof...(P) == sizeof...(A), "kernel argument count");
    auto body = [=]() { k(a...); };
    auto *c = new closure<decltype(body)>{body, grid, block};
    td_sim_range r[sizeof...(A) + 1];
    int n = 0;
    (arg(r, &n, static_cast<P>(a)), ...);
    td_sim_grid g = {grid.x, grid.y, grid.z, block.x, block.y, block.z, smem};
    (void)td_sim_launch(&g, s, name, &run<decltype(body)>,
                        &drop<decltype(body)>, c, r, n, caller);
}

} // namespace td_sim

#define threadIdx td_sim::thread_idx
#define blockIdx td_sim::block_idx
#define blockDim td_sim::block_dim
#define gridDim td_sim::grid_dim

/* Launches kernel on stream with grid x block threads (see above); its
 * errors reach cudaGetLastError, as a <<<>>> launch's do. */
#define TD_LAUNCH(kernel, grid, block, smem, stream, ...)                    \
    td_sim::launch(#kernel, dim3(grid), dim3(block), (smem), (stream),       \
                   __builtin_return_address(0), kernel, __VA_ARGS__)

#endif
