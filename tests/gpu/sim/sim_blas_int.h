/* sim_blas_int.h - what the simulated cuBLAS (sim_cublas.c) and cuBLASLt
 * (sim_cublaslt.c) share: the element types of their matrices, reading
 * and writing an element as fp32, an element of op(X) as a tensor core
 * reads it, and the checks of a handle's creation.
 * Owns: those inline helpers only.
 * Never does: exist outside the simulator library.
 */
#ifndef TD_SIM_BLAS_INT_H
#define TD_SIM_BLAS_INT_H

#include <stddef.h>

#include "bf16.h"
#include "fp16.h"
#include "sim_int.h"
#include "tf32.h"

/* Element types of the simulated GEMMs (CUDA_R_32F, _16BF, _16F). */
enum { TD__F32, TD__BF16, TD__F16 };

static inline size_t td__esize(int t) { return t == TD__F32 ? 4 : 2; }

static inline float td__ld(const void *X, int t, size_t i)
{
    if (t == TD__BF16)
        return td_bf16_to_f32(((const td_bf16 *)X)[i]);
    if (t == TD__F16)
        return td_f16_to_f32(((const td_f16 *)X)[i]);
    return ((const float *)X)[i];
}

/* X[i] = v rounded to nearest even in type t. */
static inline void td__st(void *X, int t, size_t i, float v)
{
    if (t == TD__BF16)
        ((td_bf16 *)X)[i] = td_bf16_from_f32(v);
    else if (t == TD__F16)
        ((td_f16 *)X)[i] = td_f16_from_f32(v);
    else
        ((float *)X)[i] = v;
}

/* Element (i, j) of op(X) for X stored column-major with leading dim ld
 * (transposed when t), as a tensor core in TF32 math reads it when tf32. */
static inline float td__op(const void *X, int xt, int ld, int t, int i,
                           int j, int tf32)
{
    float v = td__ld(X, xt, t ? (size_t)i * ld + j : (size_t)j * ld + i);
    return tf32 ? td_tf32_round(v) : v;
}

/* A handle's creation: 0 with the current device in *dev, or -1 (no
 * device, or a sticky error: the libraries' NOT_INITIALIZED). */
static inline int td__sim_blas_open(int *dev)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0)
        return -1;
    td__sim_lock();
    cudaError_t e = td__sim_gate();
    *dev = td__sim_cur();
    td__sim_unlock();
    return e == cudaSuccess ? 0 : -1;
}

#endif
