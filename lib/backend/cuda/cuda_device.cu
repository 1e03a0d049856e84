/* device_cuda.cu - GPU discovery through the CUDA runtime, and a self-test
 * kernel that runs the shared Philox arithmetic on the device.
 *
 * Without a driver, cudaGetDeviceCount returns cudaErrorInsufficientDriver
 * (or cudaErrorNoDevice): that means "no GPU", reported in info->reason.
 */
#include <stdio.h>
#include <string.h>

#include "backend/cuda/cuda_launch.h"

extern "C" {
#include "base/error.h"
#include "job/device.h"
#include "philox.h"
}

extern "C" int td__cuda_probe(td_device_info *info)
{
    int n = 0, rt = 0;
    if (cudaRuntimeGetVersion(&rt) == cudaSuccess)
        info->cuda_runtime = rt;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        snprintf(info->reason, sizeof info->reason, "no usable GPU: %s",
                 cudaGetErrorString(e));
        (void)cudaGetLastError(); /* clear the sticky-free error state */
        info->cuda_count = 0;
        return 0;
    }
    if (n == 0) {
        snprintf(info->reason, sizeof info->reason, "no GPU found");
        info->cuda_count = 0;
        return 0;
    }
    if (n > TD_MAX_GPUS)
        n = TD_MAX_GPUS;
    for (int i = 0; i < n; i++) {
        cudaDeviceProp p;
        if (cudaGetDeviceProperties(&p, i) != cudaSuccess) {
            n = i;
            break;
        }
        snprintf(info->gpus[i].name, sizeof info->gpus[i].name, "%s", p.name);
        info->gpus[i].mem_bytes = (uint64_t)p.totalGlobalMem;
        info->gpus[i].cc_major = p.major;
        info->gpus[i].cc_minor = p.minor;
    }
    info->cuda_count = n;
    if (n == 0)
        snprintf(info->reason, sizeof info->reason,
                 "GPUs present but their properties could not be read");
    return 0;
}

__global__ void td__philox_kernel(uint64_t seed, uint64_t stream,
                                  uint32_t *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        td_philox_ctr r = td_rng4(seed, stream, (uint64_t)i);
        for (int w = 0; w < 4; w++)
            out[4 * i + w] = r.v[w];
    }
}

#define TD__CU(call)                                                         \
    do {                                                                     \
        cudaError_t e_ = (call);                                             \
        if (e_ != cudaSuccess) {                                             \
            snprintf(err, errcap, "%s:%d: %s: %s", __FILE__, __LINE__,       \
                     #call, cudaGetErrorString(e_));                         \
            rc = TD_E_DEVICE;                                                \
            goto out;                                                        \
        }                                                                    \
    } while (0)

extern "C" int td__cuda_philox_selftest(int dev, uint64_t seed,
                                        uint64_t stream, uint32_t *out, int n,
                                        char *err, size_t errcap)
{
    int rc = 0;
    uint32_t *d = NULL;
    size_t bytes = (size_t)n * 4 * sizeof(uint32_t);
    TD__CU(cudaSetDevice(dev));
    TD__CU(cudaMalloc((void **)&d, bytes));
    TD_LAUNCH(td__philox_kernel, (n + 255) / 256, 256, 0, 0, seed, stream, d,
              n);
    TD__CU(cudaGetLastError());
    TD__CU(cudaMemcpy(out, d, bytes, cudaMemcpyDeviceToHost));
out:
    if (d)
        cudaFree(d);
    return rc;
}
