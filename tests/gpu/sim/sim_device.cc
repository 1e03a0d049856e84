/* sim_device.cc - the CUDA backend's device probe and self-test kernel
 * (cuda_device.cu), compiled by g++ as C++ for the simulated device (see
 * sim_kernels.cc). */
#include "backend/cuda/cuda_device.cu"
