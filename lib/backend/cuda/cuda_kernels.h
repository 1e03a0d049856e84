/* backend_cuda_kernels.h - launchers of the CUDA backend's kernels.
 *
 * Owns: the C interface of backend_cuda_kernels.cu.  Each launcher
 * enqueues one kernel on stream s and returns cudaGetLastError().
 * Included by the .cu file itself so C and C++ agree on every signature.
 * Activation tensors (void *) are stored in the type `dt` (TD_KDT_*, the
 * values of enum td_dtype, checked in cuda.c): fp32, bf16 or fp16; the
 * kernels load them into float, compute in float and round each stored
 * element to the type (kernels/bf16.h, kernels/fp16.h).  Parameters,
 * gradients of parameters and optimizer state are always fp32.
 * Never does: pull in cuBLAS, cuDNN or anything C++.
 */
#ifndef TD_BACKEND_CUDA_KERNELS_H
#define TD_BACKEND_CUDA_KERNELS_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "layout.h"
#include "loss_scale.h"
#include "stats.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Storage types of activations: the values of enum td_dtype (backend.h,
 * which this header does not include; cuda.c asserts they agree). */
#define TD_KDT_F32 0
#define TD_KDT_BF16 1
#define TD_KDT_F16 2

/* The step scalars: what changes from one training step to the next,
 * read by the kernels from device memory (one copy from pinned memory per
 * step, cuda_graph.c), so that a step captured as a CUDA graph replays
 * with each step's values.  On the device this header is followed by one
 * float per run of equal lr multipliers: that run's lr (the step's lr
 * times the multiplier, computed on the host in float). */
typedef struct td_step_scalars {
    uint64_t step;   /* dropout draws: the global step (t - 1) */
    int64_t t;       /* the optimizer step, 1-based (loss scaling) */
    float c1, c2;    /* AdamW bias corrections of step t */
} td_step_scalars;

/* y = the normalised batch: NCHW when cp is 0, else NHWC with cp >= c
 * channels, the pad channels zero (the padded stem, layout.h). */
cudaError_t td__k_normalize(cudaStream_t s, const uint8_t *nhwc, void *y,
                            int n, int c, int h, int w, int cp,
                            const float *scale, const float *bias, int dt);
/* Filters between the fp32 master's KCRS and cuDNN's KRSC (layout.h):
 * to_krsc narrows k x c x rs fp32 weights into dst (type dt, k x rs x cp,
 * pad channels zero); from_krsc widens a k x rs x cp gradient of type dt
 * (TD_KDT_F32 too: a dense layer's) into fp32 KCRS, pad channels left
 * out.  Dense weights over a flattened NHWC tensor are the case rs = hw. */
cudaError_t td__k_to_krsc(cudaStream_t s, const float *src, void *dst,
                          int dt, int k, int c, int cp, size_t rs);
cudaError_t td__k_from_krsc(cudaStream_t s, const void *src, int dt,
                            float *dst, int k, int c, int cp, size_t rs);
cudaError_t td__k_xent(cudaStream_t s, const float *z, int k,
                       const int32_t *labels, int n, int rows, float smooth,
                       float inv_n, float *grad, double *row_loss,
                       int *row_ok);
cudaError_t td__k_stats(cudaStream_t s, td_dev_stats *acc,
                        const double *row_loss, const int *row_ok, int n);
/* The fused updates of the fp32 master weights w.  lr: the run's lr in
 * the step scalars (device memory).  ls: NULL without loss scaling; else
 * the update does nothing when ls->step.skip, multiplies gradients by
 * ls->step.inv_scale, and AdamW takes ls->step.corr instead of sc's c1, c2
 * (kernels/loss_scale.h).  When low is not NULL they also write each
 * updated weight rounded to type low_dt into the copy starting at low
 * (the one the convolutions and GEMMs of a bf16 or fp16 job read), w[i]
 * at td_lowp_index(map, map->at + i) (kernels/layout.h: the filters
 * straight in KRSC; map NULL: at i).  The map is copied into the launch
 * (by value: a captured graph keeps it). */
cudaError_t td__k_sgd(cudaStream_t s, float *w, float *v, const float *g,
                      size_t count, const float *lr, float mu, float wd,
                      int nesterov, const td_ls_dev *ls, void *low,
                      const td_lowp_map *map, int low_dt);
/* sc: the step scalars (bias corrections c1, c2) */
cudaError_t td__k_adamw(cudaStream_t s, float *w, float *m, float *v,
                        const float *g, size_t count, const float *lr,
                        float b1, float b2, float eps, float wd,
                        const td_step_scalars *sc, const td_ls_dev *ls,
                        void *low, const td_lowp_map *map, int low_dt);
/* dst = src in another type: widen (type dt -> fp32, exact) and narrow
 * (fp32 -> type dt, rounded to nearest even). */
cudaError_t td__k_widen(cudaStream_t s, const void *src, int dt, float *dst,
                        size_t count);
cudaError_t td__k_narrow(cudaStream_t s, const float *src, void *dst, int dt,
                         size_t count);
cudaError_t td__k_add(cudaStream_t s, const void *a, const void *b, void *y,
                      size_t count, int dt);
cudaError_t td__k_accum(cudaStream_t s, void *d, const void *src,
                        size_t count, int accumulate, int dt);
/* y (type dt) += b (fp32) per column; db (fp32) = column sums of dy. */
cudaError_t td__k_bias_add(cudaStream_t s, void *y, const float *b,
                           int rows, int out, int dt);
cudaError_t td__k_bias_grad(cudaStream_t s, const void *dy, float *db,
                            int rows, int out, int dt);
/* Draws counter sc->step * count + e of (seed, stream) for element i,
 * e its NCHW index: i itself when c is 0, else x is NHWC with c channels
 * and hw pixels per sample (layout.h), so the masks are the NCHW path's
 * and the CPU's.  The mask is stored in x's order. */
cudaError_t td__k_dropout_fwd(cudaStream_t s, const void *x, void *y,
                              uint8_t *mask, size_t count, uint64_t seed,
                              uint64_t stream, const td_step_scalars *sc,
                              float keep, int c, size_t hw, int dt);
cudaError_t td__k_dropout_bwd(cudaStream_t s, const void *dy, void *dx,
                              const uint8_t *mask, size_t count, float keep,
                              int accumulate, int dt);
/* The backward of batch norm in inference mode (kernels/bn_eval.h) on an
 * n x c x (hw) tensor, NCHW, or NHWC when nhwc (16-bit types only): dgamma, dbeta (overwritten) and, when dx is
 * not NULL, dx (summed into it when accumulate); part is scratch of
 * 2 * n * c floats; x, dy and dx of type dt, the rest fp32. */
cudaError_t td__k_bn_eval_bwd(cudaStream_t s, const void *x, const void *dy,
                              void *dx, const float *gamma, const float *mean,
                              const float *var, float eps, float *dgamma,
                              float *dbeta, float *part, int n, int c,
                              size_t hw, int accumulate, int nhwc, int dt);

#ifdef __cplusplus
}
#endif

#endif
