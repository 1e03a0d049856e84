/* cuda_prec.c - the CUDA backend's fp32 math: strict fp32 or TF32.
 *
 * Owns: resolving td_backend_config.fp32_math against the GPU's compute
 * capability at create (auto: TF32 from 8.0, Ampere, on; strict below;
 * TF32 asked for below 8.0 is refused naming the GPU and its capability),
 * and the cuBLAS math mode that follows from it.  The cuDNN side
 * (cuda_dnn.c) reads be->tf32 when it sets each convolution descriptor's
 * math type.
 *
 * The library settings (docs/cuda.md "Precision"):
 *   strict  cuDNN CUDNN_FMA_MATH ("restricted to kernels that use FMA
 *           instructions": no tensor cores, no TF32) on every convolution
 *           descriptor; cuBLAS CUBLAS_DEFAULT_MATH, whose fp32 GEMMs keep
 *           at least fp32's mantissa and exponent (TF32 is only used when
 *           the handle says CUBLAS_TF32_TENSOR_OP_MATH; PEDANTIC would in
 *           addition forbid the split-K reductions fp32 results do not
 *           depend on, at a cost in speed).
 *   tf32    cuDNN CUDNN_TENSOR_OP_MATH (tensor cores permitted, fp32
 *           inputs read as TF32; no down-conversion to fp16, which
 *           CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION would allow), chosen
 *           over CUDNN_DEFAULT_MATH because the latter's meaning depends
 *           on the GPU generation and TF32 is what the job asked for;
 *           cuBLAS CUBLAS_TF32_TENSOR_OP_MATH.
 * NVIDIA_TF32_OVERRIDE=0 in the environment still disables TF32 inside
 * both libraries (documented by NVIDIA); traind does not read it.
 * Never does: numerics of its own; anything after create.
 */
#include <stdio.h>

#include "backend/cuda/cuda_int.h"
#include "base/error.h"
#include "base/log.h"

int td__cuda_precision(td__cuda *be)
{
    struct cudaDeviceProp p;
    enum td_fp32_math want = be->base.cfg.fp32_math;
    TD__CU(be, cudaGetDeviceProperties(&p, be->dev));
    int ampere = p.major >= TD_TF32_MIN_CC_MAJOR;
    if (want == TD_MATH_TF32 && !ampere) {
        snprintf(be->base.err, sizeof be->base.err, "precision: tf32 needs "
                 "a GPU of compute capability %d.0 or newer (Ampere); cuda:%d "
                 "is %.80s, compute capability %d.%d: use fp32 or auto",
                 TD_TF32_MIN_CC_MAJOR, be->dev, p.name, p.major, p.minor);
        return TD_E_NOTSUP;
    }
    be->tf32 = want == TD_MATH_TF32 || (want == TD_MATH_AUTO && ampere);
    TD__BLAS(be, cublasSetMathMode(be->blas, be->tf32
                                                 ? CUBLAS_TF32_TENSOR_OP_MATH
                                                 : CUBLAS_DEFAULT_MATH));
    td_info("cuda:%d: fp32 math %s (%s; %s, compute capability %d.%d)",
            be->dev, be->tf32 ? "tf32 tensor cores" : "strict fp32 (FMA)",
            want == TD_MATH_AUTO ? "auto" : want == TD_MATH_TF32
                                                ? "asked tf32" : "asked fp32",
            p.name, p.major, p.minor);
    return 0;
}
