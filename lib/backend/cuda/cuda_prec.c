/* cuda_prec.c - the CUDA backend's compute type and fp32 math: strict
 * fp32 or TF32, bf16 or fp16.
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
 *   bf16    cfg.dtype TD_BF16: compute capability 8.0 (Ampere: bf16 tensor
 *   fp16    cores) or newer; TD_F16: 7.0 (Volta) or newer; refused below,
 *           naming the GPU.  Both: cuDNN CUDNN_TENSOR_OP_MATH with fp32
 *           accumulation, cuBLAS cublasGemmEx with CUBLAS_COMPUTE_32F
 *           under the handle's CUBLAS_DEFAULT_MATH (tensor cores are
 *           always allowed for 16-bit inputs since CUDA 11).
 * NVIDIA_TF32_OVERRIDE=0 in the environment still disables TF32 inside
 * both libraries (documented by NVIDIA); traind does not read it.
 * Never does: numerics of its own; anything after create.
 */
#include <stdio.h>

#include "backend/cuda/cuda_int.h"
#include "base/error.h"
#include "base/log.h"

/* bf16 needs 8.0, fp16 7.0: TD_E_NOTSUP naming the GPU below. */
static int td__check_lowp(td__cuda *be, const struct cudaDeviceProp *p)
{
    int bf16 = be->dt == TD_BF16;
    int need = bf16 ? TD_BF16_MIN_CC_MAJOR : TD_F16_MIN_CC_MAJOR;
    if (be->dt == TD_F32 || p->major >= need)
        return 0;
    snprintf(be->base.err, sizeof be->base.err, "precision: %s needs a GPU "
             "of compute capability %d.0 or newer (%s tensor cores); "
             "cuda:%d is %.80s, compute capability %d.%d: use %s",
             bf16 ? "bf16" : "fp16", need, bf16 ? "Ampere" : "Volta",
             be->dev, p->name, p->major, p->minor,
             bf16 && p->major >= TD_F16_MIN_CC_MAJOR ? "fp16, fp32 or auto"
                                                     : "fp32 or auto");
    return TD_E_NOTSUP;
}

int td__cuda_precision(td__cuda *be)
{
    struct cudaDeviceProp p;
    enum td_fp32_math want = be->base.cfg.fp32_math;
    TD__CU(be, cudaGetDeviceProperties(&p, be->dev));
    be->dt = be->base.cfg.dtype;
    be->esz = td__cuda_esize(be->dt);
    TD__TRY(td__check_lowp(be, &p));
    int ampere = p.major >= TD_TF32_MIN_CC_MAJOR;
    if (be->dt != TD_F32) {
        /* no fp32 products: cuBLAS's default math lets GemmEx use tensor
         * cores for 16-bit inputs (cuda_step.c), cuDNN gets
         * CUDNN_TENSOR_OP_MATH (cuda_dnn.c) */
        be->tf32 = 0;
        TD__BLAS(be, cublasSetMathMode(be->blas, CUBLAS_DEFAULT_MATH));
        td_info("cuda:%d: %s compute (tensor cores, fp32 accumulation, fp32 "
                "master weights; %s, compute capability %d.%d)", be->dev,
                be->dt == TD_BF16 ? "bf16" : "fp16", p.name, p.major,
                p.minor);
        return 0;
    }
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
