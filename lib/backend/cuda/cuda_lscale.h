/* cuda_lscale.h - launchers of the loss-scaling kernels (cuda_lscale.cu).
 *
 * Owns: the C interface of cuda_lscale.cu.  Each launcher enqueues on
 * stream s and returns cudaGetLastError().  Included by the .cu file so
 * C and C++ agree on every signature.
 * Never does: pull in cuBLAS, cuDNN or anything C++.
 */
#ifndef TD_BACKEND_CUDA_LSCALE_H
#define TD_BACKEND_CUDA_LSCALE_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "loss_scale.h"

#ifdef __cplusplus
extern "C" {
#endif

/* g[0..count) *= d->st.scale (the loss's gradient, before the backward) */
cudaError_t td__k_ls_scale(cudaStream_t s, float *g, size_t count,
                           const td_ls_dev *d);
/* d->found = 1 when some g[0..count) is inf or NaN (never cleared here) */
cudaError_t td__k_ls_check(cudaStream_t s, const float *g, size_t count,
                           td_ls_dev *d);
/* One thread: td_ls_prepare(d, interval, b1, b2, *t); t in device memory
 * (the step scalars), so a captured step reads each step's own. */
cudaError_t td__k_ls_prepare(cudaStream_t s, td_ls_dev *d, int interval,
                             double b1, double b2, const int64_t *t);
/* Tests: *g = +inf (an injected overflow) when *t == at. */
cudaError_t td__k_ls_poison(cudaStream_t s, float *g, const int64_t *t,
                            int64_t at);

#ifdef __cplusplus
}
#endif

#endif
