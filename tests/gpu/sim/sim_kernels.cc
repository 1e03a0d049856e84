/* sim_kernels.cc - the CUDA backend's kernels (cuda_kernels.cu), compiled
 * by g++ as C++ for the simulated device: under TD_CUDA_SIM, TD_LAUNCH
 * queues each launch on a simulated stream (sim_kernel.h).  Meson picks a
 * compiler by file extension, so this file includes the .cu file. */
#include "backend/cuda/cuda_kernels.cu"
