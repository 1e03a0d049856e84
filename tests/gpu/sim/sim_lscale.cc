/* sim_lscale.cc - the CUDA backend's loss-scaling kernels (cuda_lscale.cu),
 * compiled by g++ as C++ for the simulated device (see sim_kernels.cc). */
#include "backend/cuda/cuda_lscale.cu"
