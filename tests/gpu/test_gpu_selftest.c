/* test_gpu_selftest.c - GPU-only: the Philox arithmetic run by a CUDA
 * kernel equals the host's, word for word.  Skips (exit 77, shown by meson
 * as SKIP) when this build has no CUDA or the machine has no usable GPU. */
#include <string.h>

#include "backend/cuda/backend_cuda.h"
#include "base/rng.h"
#include "job/device.h"
#include "td_config.h"
#include "tdtest.h"

int main(void)
{
#if !TD_HAVE_CUDA
    printf("SKIP: this build has no CUDA backend (meson -Dcuda=enabled)\n");
    return TD_TEST_SKIP;
#else
    td_device_info info;
    td_device_probe(&info);
    if (info.cuda_count == 0) {
        printf("SKIP: GPU test needs a CUDA device: %s\n", info.reason);
        return TD_TEST_SKIP;
    }
    enum { N = 4096 };
    static uint32_t dev[4 * N];
    char err[256];
    uint64_t stream = td_rng_stream(TD_RNG_TEST, 3);
    if (td__cuda_philox_selftest(0, 1234, stream, dev, N, err, sizeof err)) {
        printf("FAIL: %s\n", err);
        return 1;
    }
    for (int i = 0; i < N; i++) {
        td_philox_ctr h = td_rng4(1234, stream, (uint64_t)i);
        if (memcmp(h.v, dev + 4 * i, sizeof h.v) != 0) {
            printf("FAIL: philox block %d differs between host and %s\n", i,
                   info.gpus[0].name);
            return 1;
        }
    }
    printf("1 passed, 0 failed: philox on %s matches the host\n",
           info.gpus[0].name);
    return 0;
#endif
}
