/* test_sim_lowp.c - bf16 and fp16 compute on the CUDA backend (issue 15:
 * 16-bit activations on tensor cores, fp32 master weights) on the
 * simulated device, against the CPU backend.
 *
 * What is checked:
 *   - the libraries' calls: every convolution of a bf16 (fp16) job has
 *     bf16 (fp16) tensors and CUDNN_TENSOR_OP_MATH, every GEMM bf16
 *     (fp16) inputs (cublasGemmEx), none fp32; bf16 refused below compute
 *     capability 8.0 at create, fp16 runs on 7.5 and is refused on 6.1 at
 *     submit;
 *   - the simulator's refusals of what cuDNN and cuBLAS document as
 *     unsupported (fp16 accumulation, mixed types, batch norm's parameters
 *     in 16 bits, bf16 below 8.0) and its GemmEx rounding by hand;
 *   - forward values layer by layer after one step (fmnist-cnn, resnet20
 *     on 3x16x16), each element exactly a value of the type (activations
 *     are stored in it), against the CPU's fp32 forward; the tolerances
 *     are in forward_case's table with why;
 *   - loss curves over 20 steps (fmnist-cnn) and 5 (resnet20), against the
 *     CPU in fp32 and, where the CPU has bf16 (AVX512_BF16 or AMX), the
 *     CPU's bf16;
 *   - the master weights are fp32: a step too small to move a bf16 weight
 *     still moves the fp32 master;
 *   - batch norms kept in inference mode (freeze_bn_stats) in bf16 and
 *     fp16: losses against the CPU, running statistics untouched;
 *   - dropout in bf16 and fp16: the same masks as the CPU's, losses;
 *   - checkpoints: a bf16 job's snapshot restored at fp32 and an fp32
 *     job's at bf16 (the 16-bit copy rebuilt from the master weights).
 * LOWP_VERBOSE=1 prints every measured figure.
 * Each test configures the simulator through the environment and
 * td_sim_reset, in its own process (Check's fork mode).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cudnn.h>

#include "backend/backend.h"
#include "backend/cpu/caps.h"
#include "backend/cuda/backend_cuda.h"
#include "base/error.h"
#include "base/rng.h"
#include "bf16.h"
#include "fp16.h"
#include "job/device.h"
#include "job/precision.h"
#include "job/spec.h"
#include "model/model.h"
#include "ref_models.h"
#include "sim.h"
#include "sim_testkit.h"
#include "tdtest.h"

/* as test_sim_precision.c: stable SGD on fmnist-cnn at batch 4 */

static void run_steps(const char *kind, const td_model *m, int n,
                      enum td_dtype dt, int steps, double *loss)
{
    st_batch b = {0};
    td_backend_config c = st_config(n, dt, TD_MATH_FP32);
    c.allow_slow_bf16 = 0;
    td_backend *be = st_make(kind, m, &c);
    for (int s = 0; s < steps; s++)
        loss[s] = st_step(be, m, &b, n, 100 + (uint64_t)s, ST_LR, s + 1);
    td_backend_destroy(be);
    st_batch_free(&b);
}

/* ---- the libraries' calls --------------------------------------------- */

typedef struct calls {
    long convs, tensor_op, conv_t, conv_f32, gemms, gemm_t, gemm_f32;
} calls;

static calls calls_now(int t)
{
    return (calls){td_sim_dnn_convs(-1),
                   td_sim_dnn_convs(CUDNN_TENSOR_OP_MATH),
                   td_sim_dnn_typed(t), td_sim_dnn_typed(TD_SIM_F32),
                   td_sim_blas_gemms(-1), td_sim_blas_typed(t),
                   td_sim_blas_typed(TD_SIM_F32)};
}

static void check_calls_of(enum td_dtype dt)
{
    int t = dt == TD_BF16 ? TD_SIM_BF16 : TD_SIM_F16;
    double loss[3];
    td_model *m = ref_load_model("tiny-all", (td_shape){2, 9, 9}, 5);
    calls a = calls_now(t);
    run_steps("cuda:0", m, 6, dt, 3, loss);
    calls b = calls_now(t);
    long convs = b.convs - a.convs, gemms = b.gemms - a.gemms;
    ck_assert_int_gt(convs, 0);
    ck_assert_int_gt(gemms, 0);
    ck_assert_msg(b.tensor_op - a.tensor_op == convs &&
                  b.conv_t - a.conv_t == convs && b.conv_f32 == a.conv_f32,
                  "%s: %ld convolutions, %ld tensor-op, %ld of the type, "
                  "%ld fp32", st_dt_name(dt), convs, b.tensor_op - a.tensor_op,
                  b.conv_t - a.conv_t, b.conv_f32 - a.conv_f32);
    ck_assert_msg(b.gemm_t - a.gemm_t == gemms && b.gemm_f32 == a.gemm_f32,
                  "%s: %ld GEMMs, %ld of the type, %ld fp32", st_dt_name(dt),
                  gemms, b.gemm_t - a.gemm_t, b.gemm_f32 - a.gemm_f32);
    for (int s = 0; s < 3; s++)
        ck_assert(isfinite(loss[s]));
    td_model_free(m);
}

START_TEST(test_bf16_job_runs_bf16_tensor_ops)
{
    td_cuda_register();
    check_calls_of(TD_BF16);
}
END_TEST

/* fp16 from Volta on: runs on a 7.5 device (Turing, fp16 tensor cores) */
START_TEST(test_fp16_job_runs_fp16_tensor_ops)
{
    st_sim_env("TD_SIM_CC", "7.5");
    td_cuda_register();
    check_calls_of(TD_F16);
}
END_TEST

/* bf16 on 7.5: refused at create and at submit naming the GPU, fp16
 * accepted there (Volta and newer); both accepted on 8.0; fp16 refused
 * below 7.0 naming the GPU. */
START_TEST(test_refusals)
{
    char err[512] = "";
    st_sim_env("TD_SIM_CC", "7.5");
    td_cuda_register();
    td_model *m = ref_load_model("tiny-all", (td_shape){2, 9, 9}, 5);
    st_create_refused(m, TD_BF16, TD_MATH_FP32, err, sizeof err);
    ck_assert_msg(strstr(err, "precision: bf16 needs a GPU of compute "
                         "capability 8.0 or newer (Ampere tensor cores)") &&
                  strstr(err, "cuda:0 is traind simulated GPU 0, compute "
                         "capability 7.5") && strstr(err, "use fp16, fp32 "
                         "or auto"), "%s", err);
    td_device_info info;
    td_job_spec s;
    memset(&s, 0, sizeof s);
    s.device = "cuda:0";
    ck_assert_int_eq(td_device_probe(&info), 0);
    s.precision = TD_PREC_BF16;
    ck_assert_int_eq(td_precision_check_job(&s, &info, err, sizeof err),
                     TD_E_NOTSUP);
    ck_assert_msg(strstr(err, "capability 7.5"), "%s", err);
    s.precision = TD_PREC_FP16;
    ck_assert_int_eq(td_precision_check_job(&s, &info, err, sizeof err), 0);
    ck_assert_int_eq(td_sim_reset(), 0);
    st_sim_env("TD_SIM_CC", "6.1");
    ck_assert_int_eq(td_device_probe(&info), 0);
    ck_assert_int_eq(td_precision_check_job(&s, &info, err, sizeof err),
                     TD_E_NOTSUP);
    ck_assert_msg(strstr(err, "precision: fp16 needs a GPU of compute "
                         "capability 7.0 or newer") &&
                  strstr(err, "capability 6.1"), "%s", err);
    ck_assert_int_eq(td_sim_reset(), 0);
    st_sim_env("TD_SIM_CC", "8.0");
    ck_assert_int_eq(td_device_probe(&info), 0);
    s.precision = TD_PREC_BF16;
    ck_assert_int_eq(td_precision_check_job(&s, &info, err, sizeof err), 0);
    s.precision = TD_PREC_FP16;
    ck_assert_int_eq(td_precision_check_job(&s, &info, err, sizeof err), 0);
    td_model_free(m);
}
END_TEST

/* ---- the simulator's own rules ----------------------------------------- */

/* C (1x1, type ct) = A (1x2, type at) B (2x1, type bt) by cublasGemmEx
 * with the compute type given; its status. */
static cublasStatus_t gemm_1x1x2(cublasHandle_t h, const void *a,
                                 cudaDataType at, const void *b,
                                 cudaDataType bt, void *c, cudaDataType ct,
                                 cublasComputeType_t compute)
{
    const float one = 1.0f, zero = 0.0f;
    return cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 2, &one, a, at, 1,
                        b, bt, 2, &zero, c, ct, 1, compute,
                        CUBLAS_GEMM_DEFAULT);
}

/* cublasGemmEx: what cuBLAS documents, and the rounding of C by hand. */
START_TEST(test_sim_gemmex_rules)
{
    cublasHandle_t h;
    td_bf16 *a, *b, *c16;
    float *c32;
    ck_assert_int_eq(cudaMalloc((void **)&a, 4 * sizeof *a), cudaSuccess);
    ck_assert_int_eq(cudaMalloc((void **)&b, 4 * sizeof *b), cudaSuccess);
    ck_assert_int_eq(cudaMalloc((void **)&c16, 4 * sizeof *c16), cudaSuccess);
    ck_assert_int_eq(cudaMalloc((void **)&c32, 4 * sizeof *c32), cudaSuccess);
    ck_assert_int_eq(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
    /* A = [1 + 2^-7, 1], B = [1, 2^-8] (1x2 times 2x1): the product is
     * 1 + 2^-7 + 2^-8, exact in fp32; in bf16 (8 significant bits) it is
     * halfway between 1 + 2^-7 and 1 + 2^-6: ties to even, 1 + 2^-6 */
    td_bf16 ha[2] = {td_bf16_from_f32(1.0f + 0x1p-7f), td_bf16_from_f32(1)};
    td_bf16 hb[2] = {td_bf16_from_f32(1.0f), td_bf16_from_f32(0x1p-8f)};
    ck_assert_int_eq(cudaMemcpy(a, ha, sizeof ha, cudaMemcpyHostToDevice),
                     cudaSuccess);
    ck_assert_int_eq(cudaMemcpy(b, hb, sizeof hb, cudaMemcpyHostToDevice),
                     cudaSuccess);
    ck_assert_int_eq(gemm_1x1x2(h, a, CUDA_R_16BF, b, CUDA_R_16BF, c32,
                                CUDA_R_32F, CUBLAS_COMPUTE_32F),
                     CUBLAS_STATUS_SUCCESS);
    ck_assert_int_eq(gemm_1x1x2(h, a, CUDA_R_16BF, b, CUDA_R_16BF, c16,
                                CUDA_R_16BF, CUBLAS_COMPUTE_32F),
                     CUBLAS_STATUS_SUCCESS);
    ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess);
    float f32;
    td_bf16 f16;
    ck_assert_int_eq(cudaMemcpy(&f32, c32, 4, cudaMemcpyDeviceToHost),
                     cudaSuccess);
    ck_assert_int_eq(cudaMemcpy(&f16, c16, 2, cudaMemcpyDeviceToHost),
                     cudaSuccess);
    ck_assert_float_eq(f32, 1.0f + 0x1p-7f + 0x1p-8f);
    ck_assert_float_eq(td_bf16_to_f32(f16), 1.0f + 0x1p-6f);
    /* refused: fp16 accumulation, mixed input types, 16-bit C of another
     * 16-bit type, a TF32 compute type for 16-bit inputs */
    const struct {
        cudaDataType at, bt;
        void *c;
        cudaDataType ct;
        cublasComputeType_t compute;
    } refused[] = {
        {CUDA_R_16F, CUDA_R_16F, c16, CUDA_R_16F, CUBLAS_COMPUTE_16F},
        {CUDA_R_16BF, CUDA_R_16F, c32, CUDA_R_32F, CUBLAS_COMPUTE_32F},
        {CUDA_R_16BF, CUDA_R_16BF, c16, CUDA_R_16F, CUBLAS_COMPUTE_32F},
        {CUDA_R_16BF, CUDA_R_16BF, c32, CUDA_R_32F,
         CUBLAS_COMPUTE_32F_FAST_TF32},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        cublasStatus_t st = gemm_1x1x2(h, a, refused[i].at, b, refused[i].bt,
                                       refused[i].c, refused[i].ct,
                                       refused[i].compute);
        ck_assert_msg(st == CUBLAS_STATUS_NOT_SUPPORTED,
                      "refusal %zu: status %d, not NOT_SUPPORTED", i,
                      (int)st);
    }
    cublasDestroy(h);
    cudaFree(a), cudaFree(b), cudaFree(c16), cudaFree(c32);
    /* bf16 below 8.0 */
    st_sim_env("TD_SIM_CC", "7.5");
    ck_assert_int_eq(cudaMalloc((void **)&a, 4 * sizeof *a), cudaSuccess);
    ck_assert_int_eq(cudaMalloc((void **)&c32, 4 * sizeof *c32), cudaSuccess);
    ck_assert_int_eq(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
    ck_assert_int_eq(gemm_1x1x2(h, a, CUDA_R_16BF, a, CUDA_R_16BF, c32,
                                CUDA_R_32F, CUBLAS_COMPUTE_32F),
                     CUBLAS_STATUS_ARCH_MISMATCH);
    cublasDestroy(h);
    cudaFree(a), cudaFree(c32);
}
END_TEST

static cudnnTensorDescriptor_t tensor(cudnnDataType_t dt, int n, int c,
                                      int h, int w)
{
    cudnnTensorDescriptor_t d;
    ck_assert_int_eq(cudnnCreateTensorDescriptor(&d), CUDNN_STATUS_SUCCESS);
    ck_assert_int_eq(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, dt, n,
                                                c, h, w),
                     CUDNN_STATUS_SUCCESS);
    return d;
}

/* A 1x1x1x1 filter of type dt (NCHW) and a 1x1 cross-correlation (no
 * padding, stride and dilation 1, fp32 compute). */
static void conv_1x1(cudnnDataType_t dt, cudnnFilterDescriptor_t *wf,
                     cudnnConvolutionDescriptor_t *cv)
{
    ck_assert_int_eq(cudnnCreateFilterDescriptor(wf), CUDNN_STATUS_SUCCESS);
    ck_assert_int_eq(cudnnSetFilter4dDescriptor(*wf, dt, CUDNN_TENSOR_NCHW, 1,
                                                1, 1, 1),
                     CUDNN_STATUS_SUCCESS);
    ck_assert_int_eq(cudnnCreateConvolutionDescriptor(cv),
                     CUDNN_STATUS_SUCCESS);
    ck_assert_int_eq(cudnnSetConvolution2dDescriptor(*cv, 0, 0, 1, 1, 1, 1,
                     CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
                     CUDNN_STATUS_SUCCESS);
}

/* cuDNN: PSEUDO_HALF runs, TRUE_HALF (fp16 accumulation) and mixed types
 * are refused, batch norm wants fp32 parameters for 16-bit data, NHWC
 * 16-bit tensors are read through their strides, bf16 convolutions need
 * 8.0. */
START_TEST(test_sim_cudnn_rules)
{
    cudnnHandle_t h;
    cudnnFilterDescriptor_t wf;
    cudnnConvolutionDescriptor_t cv;
    td_f16 *x, *y, *w;
    float *p;
    const float one = 1.0f, zero = 0.0f;
    ck_assert_int_eq(cudnnCreate(&h), CUDNN_STATUS_SUCCESS);
    cudnnTensorDescriptor_t xd = tensor(CUDNN_DATA_HALF, 1, 1, 2, 2);
    cudnnTensorDescriptor_t yd = tensor(CUDNN_DATA_HALF, 1, 1, 2, 2);
    cudnnTensorDescriptor_t pf = tensor(CUDNN_DATA_FLOAT, 1, 1, 1, 1);
    cudnnTensorDescriptor_t ph = tensor(CUDNN_DATA_HALF, 1, 1, 1, 1);
    conv_1x1(CUDNN_DATA_HALF, &wf, &cv);
    ck_assert_int_eq(cudnnSetConvolutionMathType(cv, CUDNN_TENSOR_OP_MATH),
                     CUDNN_STATUS_SUCCESS);
    ck_assert_int_eq(cudaMalloc((void **)&x, 8), cudaSuccess);
    ck_assert_int_eq(cudaMalloc((void **)&y, 8), cudaSuccess);
    ck_assert_int_eq(cudaMalloc((void **)&w, 2), cudaSuccess);
    ck_assert_int_eq(cudaMalloc((void **)&p, 64), cudaSuccess);
    /* x = [1, 2, 3, 2049], w = 1 + 2^-10: y = x w rounded to fp16 (11
     * bits): 2049 is odd at 2^11 (spacing 2 there) and 2049 (1 + 2^-10)
     * = 2051.0009...: 2052; 3 (1 + 2^-10) = 3.0029...: spacing 2^-9 at 3,
     * 3 + 3 * 2^-10 rounds to 3 + 2^-8 (3.0039) */
    td_f16 hx[4] = {td_f16_from_f32(1), td_f16_from_f32(2), td_f16_from_f32(3),
                    td_f16_from_f32(2048)};
    td_f16 hw = td_f16_from_f32(1.0f + 0x1p-10f), hy[4];
    ck_assert_int_eq(cudaMemcpy(x, hx, 8, cudaMemcpyHostToDevice),
                     cudaSuccess);
    ck_assert_int_eq(cudaMemcpy(w, &hw, 2, cudaMemcpyHostToDevice),
                     cudaSuccess);
    ck_assert_int_eq(cudnnConvolutionForward(h, &one, xd, x, wf, w, cv,
                     CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, NULL, 0, &zero,
                     yd, y), CUDNN_STATUS_SUCCESS);
    ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess);
    ck_assert_int_eq(cudaMemcpy(hy, y, 8, cudaMemcpyDeviceToHost),
                     cudaSuccess);
    ck_assert_float_eq(td_f16_to_f32(hy[0]), 1.0f + 0x1p-10f);
    ck_assert_float_eq(td_f16_to_f32(hy[2]), 3.0f + 0x1p-8f);
    /* 2048 (1 + 2^-10) = 2050: exactly representable (spacing 2) */
    ck_assert_float_eq(td_f16_to_f32(hy[3]), 2050.0f);
    /* TRUE_HALF_CONFIG (compute type HALF): refused */
    ck_assert_int_eq(cudnnSetConvolution2dDescriptor(cv, 0, 0, 1, 1, 1, 1,
                     CUDNN_CROSS_CORRELATION, CUDNN_DATA_HALF),
                     CUDNN_STATUS_SUCCESS);
    ck_assert_int_eq(cudnnConvolutionForward(h, &one, xd, x, wf, w, cv,
                     CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, NULL, 0, &zero,
                     yd, y), CUDNN_STATUS_NOT_SUPPORTED);
    /* mixed: fp32 output of fp16 data */
    cudnnTensorDescriptor_t yf = tensor(CUDNN_DATA_FLOAT, 1, 1, 2, 2);
    ck_assert_int_eq(cudnnSetConvolution2dDescriptor(cv, 0, 0, 1, 1, 1, 1,
                     CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
                     CUDNN_STATUS_SUCCESS);
    ck_assert_int_eq(cudnnConvolutionForward(h, &one, xd, x, wf, w, cv,
                     CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, NULL, 0, &zero,
                     yf, p), CUDNN_STATUS_NOT_SUPPORTED);
    /* batch norm of fp16 data: parameters FLOAT, not HALF */
    ck_assert_int_eq(cudnnBatchNormalizationForwardInference(h,
                     CUDNN_BATCHNORM_SPATIAL, &one, &zero, xd, x, yd, y, ph, p,
                     p, p, p, 1e-5), CUDNN_STATUS_BAD_PARAM);
    float hp[4] = {1, 0, 0, 1}; /* scale, bias, mean, var */
    ck_assert_int_eq(cudaMemcpy(p, hp, sizeof hp, cudaMemcpyHostToDevice),
                     cudaSuccess);
    ck_assert_int_eq(cudnnBatchNormalizationForwardInference(h,
                     CUDNN_BATCHNORM_SPATIAL, &one, &zero, xd, x, yd, y, pf, p,
                     p + 1, p + 2, p + 3, 1e-5), CUDNN_STATUS_SUCCESS);
    ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess);
    /* NHWC bf16 (strides c = 1): a relu over [1, 2, 1, 2] stored as
     * (w0: c0 c1)(w1: c0 c1), and a max pool over w, per channel */
    cudnnTensorDescriptor_t nx, ny, np;
    cudnnActivationDescriptor_t act;
    cudnnPoolingDescriptor_t pool;
    ck_assert_int_eq(cudnnCreateTensorDescriptor(&nx), CUDNN_STATUS_SUCCESS);
    ck_assert_int_eq(cudnnCreateTensorDescriptor(&ny), CUDNN_STATUS_SUCCESS);
    ck_assert_int_eq(cudnnCreateTensorDescriptor(&np), CUDNN_STATUS_SUCCESS);
    ck_assert_int_eq(cudnnSetTensor4dDescriptor(nx, CUDNN_TENSOR_NHWC,
                     CUDNN_DATA_BFLOAT16, 1, 2, 1, 2), CUDNN_STATUS_SUCCESS);
    ck_assert_int_eq(cudnnSetTensor4dDescriptor(ny, CUDNN_TENSOR_NHWC,
                     CUDNN_DATA_BFLOAT16, 1, 2, 1, 2), CUDNN_STATUS_SUCCESS);
    ck_assert_int_eq(cudnnSetTensor4dDescriptor(np, CUDNN_TENSOR_NHWC,
                     CUDNN_DATA_BFLOAT16, 1, 2, 1, 1), CUDNN_STATUS_SUCCESS);
    ck_assert_int_eq(cudnnCreateActivationDescriptor(&act),
                     CUDNN_STATUS_SUCCESS);
    ck_assert_int_eq(cudnnSetActivationDescriptor(act, CUDNN_ACTIVATION_RELU,
                     CUDNN_PROPAGATE_NAN, 0.0), CUDNN_STATUS_SUCCESS);
    ck_assert_int_eq(cudnnCreatePoolingDescriptor(&pool),
                     CUDNN_STATUS_SUCCESS);
    ck_assert_int_eq(cudnnSetPooling2dDescriptor(pool, CUDNN_POOLING_MAX,
                     CUDNN_PROPAGATE_NAN, 1, 2, 0, 0, 1, 2),
                     CUDNN_STATUS_SUCCESS);
    td_bf16 hn[4] = {td_bf16_from_f32(-1.0f), td_bf16_from_f32(0.5f),
                     td_bf16_from_f32(3.0f), td_bf16_from_f32(-2.0f)};
    td_bf16 hr[4], hm[2];
    ck_assert_int_eq(cudaMemcpy(x, hn, 8, cudaMemcpyHostToDevice),
                     cudaSuccess);
    ck_assert_int_eq(cudnnActivationForward(h, act, &one, nx, x, &zero, ny,
                                            y), CUDNN_STATUS_SUCCESS);
    ck_assert_int_eq(cudnnPoolingForward(h, pool, &one, nx, x, &zero, np, p),
                     CUDNN_STATUS_SUCCESS);
    ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess);
    ck_assert_int_eq(cudaMemcpy(hr, y, 8, cudaMemcpyDeviceToHost),
                     cudaSuccess);
    ck_assert_int_eq(cudaMemcpy(hm, p, 4, cudaMemcpyDeviceToHost),
                     cudaSuccess);
    ck_assert_float_eq(td_bf16_to_f32(hr[0]), 0.0f);
    ck_assert_float_eq(td_bf16_to_f32(hr[1]), 0.5f);
    ck_assert_float_eq(td_bf16_to_f32(hr[2]), 3.0f);
    ck_assert_float_eq(td_bf16_to_f32(hr[3]), 0.0f);
    ck_assert_float_eq(td_bf16_to_f32(hm[0]), 3.0f);  /* channel 0 */
    ck_assert_float_eq(td_bf16_to_f32(hm[1]), 0.5f);  /* channel 1 */
    cudnnDestroyTensorDescriptor(nx);
    cudnnDestroyTensorDescriptor(ny);
    cudnnDestroyTensorDescriptor(np);
    cudnnDestroyActivationDescriptor(act);
    cudnnDestroyPoolingDescriptor(pool);
    cudnnDestroyTensorDescriptor(yf);
    cudnnDestroyTensorDescriptor(xd);
    cudnnDestroyTensorDescriptor(yd);
    cudnnDestroyTensorDescriptor(pf);
    cudnnDestroyTensorDescriptor(ph);
    cudnnDestroyFilterDescriptor(wf);
    cudnnDestroyConvolutionDescriptor(cv);
    cudnnDestroy(h);
    cudaFree(x), cudaFree(y), cudaFree(w), cudaFree(p);
    /* bf16 convolutions below 8.0 */
    st_sim_env("TD_SIM_CC", "7.5");
    ck_assert_int_eq(cudnnCreate(&h), CUDNN_STATUS_SUCCESS);
    xd = tensor(CUDNN_DATA_BFLOAT16, 1, 1, 2, 2);
    yd = tensor(CUDNN_DATA_BFLOAT16, 1, 1, 2, 2);
    conv_1x1(CUDNN_DATA_BFLOAT16, &wf, &cv);
    ck_assert_int_eq(cudaMalloc((void **)&x, 8), cudaSuccess);
    ck_assert_int_eq(cudaMalloc((void **)&y, 8), cudaSuccess);
    ck_assert_int_eq(cudaMalloc((void **)&w, 2), cudaSuccess);
    ck_assert_int_eq(cudnnConvolutionForward(h, &one, xd, x, wf, w, cv,
                     CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, NULL, 0, &zero,
                     yd, y), CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH);
    cudnnDestroyTensorDescriptor(xd);
    cudnnDestroyTensorDescriptor(yd);
    cudnnDestroyFilterDescriptor(wf);
    cudnnDestroyConvolutionDescriptor(cv);
    cudnnDestroy(h);
    cudaFree(x), cudaFree(y), cudaFree(w);
}
END_TEST

/* ---- forward values layer by layer ------------------------------------ */

/* Tolerances, relative to each layer's largest value, in units of the
 * type's unit roundoff u: one rounding to bf16 (8 significant bits) is at
 * most u = 2^-8 = 3.9e-3 of a value, to fp16 (11 bits) u = 2^-11 =
 * 4.9e-4.  The input and the first weights are rounded (2 u, doubled for
 * room: 4), and each matrix product on the way rounds its weights and its
 * output (2 u more each), an error every later layer passes on (batch
 * norm divides by a batch standard deviation computed from rounded
 * values, relu and pooling keep it): u (4 + 2 k) after k products.  The
 * measured worst is about a third of that (docs/cuda.md "Precision"). */
#define TOL_UNITS(k) (4.0 + 2.0 * (k))

static int representable(float v, enum td_dtype dt)
{
    return dt == TD_BF16 ? td_bf16_round(v) == v : td_f16_round(v) == v;
}

/* After one step from the same initial weights on the same batch, each
 * layer's output on the GPU in dt against the CPU in fp32: the largest
 * difference relative to the layer's largest value, at most
 * u (4 + 2 k), u the type's unit roundoff and k the convolutions and
 * dense layers up to this layer (see TOL_UNITS); every GPU value a
 * value of the type. */
static void forward_case(const char *model, td_shape in, int classes, int n,
                         enum td_dtype dt)
{
    double u = dt == TD_BF16 ? 0x1p-8 : 0x1p-11, ratio = 0;
    int k = 0;
    td_model *m = ref_load_model(model, in, classes);
    td_backend_config c32 = st_config(n, TD_F32, TD_MATH_FP32);
    td_backend_config clo = st_config(n, dt, TD_MATH_FP32);
    /* every layer's value after the step: one buffer per layer (the
     * memory plan lets later buffers overwrite them; sim_memplan) */
    clo.mem_layout = TD_MEM_PER_LAYER;
    td_backend *cpu = st_make("cpu", m, &c32);
    td_backend *gpu = st_make("cuda:0", m, &clo);
    st_batch b = {0};
    st_step(cpu, m, &b, n, 100, ST_LR, 1);
    st_step(gpu, m, &b, n, 100, ST_LR, 1);
    double worst = 0;
    for (int L = 1; L < m->nlayers; L++) {
        const td_shape *s = &m->layers[L].out;
        k += m->layers[L].kind == TD_L_CONV || m->layers[L].kind == TD_L_DENSE;
        double tol = u * TOL_UNITS(k);
        size_t cnt = (size_t)n * s->c * s->h * s->w;
        float *a = malloc(cnt * sizeof *a), *g = malloc(cnt * sizeof *g);
        ck_assert(a && g);
        int rc = cpu->ops->read_tensor(cpu, TD_T_VALUE, L, a, cnt);
        if (rc == TD_E_NOTSUP) { /* a batch norm fused with its relu */
            free(a);
            free(g);
            continue;
        }
        ck_assert_msg(rc == 0, "cpu layer %d: %s", L, cpu->err);
        ck_assert_int_eq(gpu->ops->read_tensor(gpu, TD_T_VALUE, L, g, cnt),
                         0);
        double big = 0, diff = 0;
        size_t off = 0;
        for (size_t i = 0; i < cnt; i++) {
            big = fmax(big, fabs(a[i]));
            diff = fmax(diff, fabs((double)g[i] - a[i]));
            off += !representable(g[i], dt);
        }
        double rel = diff / fmax(big, 1e-30);
        worst = fmax(worst, rel);
        ratio = fmax(ratio, rel / tol);
        if (st_verbose("LOWP_VERBOSE"))
            printf("%s %s layer %2d %-10s max|x| %9.4f max diff %.3e "
                   "relative %.3e (%.1f u, tolerance %.1f u)\n", model,
                   st_dt_name(dt), L, m->layers[L].name, big, diff, rel,
                   rel / u, tol / u);
        ck_assert_msg(off == 0, "%s %s layer %s: %zu of %zu values are not "
                      "%s values", model, st_dt_name(dt), m->layers[L].name,
                      off, cnt, st_dt_name(dt));
        ck_assert_msg(rel <= tol, "%s %s layer %s: %.3e of the largest "
                      "value off (tolerance %.1e)", model, st_dt_name(dt),
                      m->layers[L].name, rel, tol);
        free(a);
        free(g);
    }
    printf("%s %s forward: worst layer %.3e of its largest value, at most "
           "%.2f of its tolerance\n", model, st_dt_name(dt), worst, ratio);
    /* the precision is really modelled: not the fp32 values */
    ck_assert_double_gt(worst, 0);
    td_backend_destroy(cpu);
    td_backend_destroy(gpu);
    st_batch_free(&b);
    td_model_free(m);
}


START_TEST(test_fmnist_forward_layers)
{
    td_cuda_register();
    forward_case("fmnist-cnn", (td_shape){1, 28, 28}, 10, 4, TD_BF16);
    forward_case("fmnist-cnn", (td_shape){1, 28, 28}, 10, 4, TD_F16);
}
END_TEST

START_TEST(test_resnet20_forward_layers)
{
    td_cuda_register();
    forward_case("resnet20", (td_shape){3, 16, 16}, 10, 4, TD_BF16);
    forward_case("resnet20", (td_shape){3, 16, 16}, 10, 4, TD_F16);
}
END_TEST

/* ---- loss curves ------------------------------------------------------ */

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TD__STEPS 2 /* the sanitizer builds: the paths, not the numerics */
#else
#define TD__STEPS 20
#endif

static void losses_case(const char *model, td_shape in, int n, int steps,
                        double tol_bf16, double tol_f16)
{
    double cpu[TD__STEPS], bf[TD__STEPS], hf[TD__STEPS], cbf[TD__STEPS];
    double wb = 0, wh = 0, wc = 0;
    int cpu_bf16 = td_cpu_caps_get()->bf16;
    td_model *m = ref_load_model(model, in, 10);
    run_steps("cpu", m, n, TD_F32, steps, cpu);
    run_steps("cuda:0", m, n, TD_BF16, steps, bf);
    run_steps("cuda:0", m, n, TD_F16, steps, hf);
    if (cpu_bf16)
        run_steps("cpu", m, n, TD_BF16, steps, cbf);
    else
        printf("%s: the CPU has no bf16 oneDNN uses (AVX512_BF16, AMX): "
               "GPU bf16 against CPU bf16 skipped\n", model);
    for (int s = 0; s < steps; s++) {
        double eb = st_loss_err(bf[s], cpu[s]);
        double eh = st_loss_err(hf[s], cpu[s]);
        double ec = cpu_bf16 ? st_loss_err(bf[s], cbf[s]) : 0;
        wb = fmax(wb, eb), wh = fmax(wh, eh), wc = fmax(wc, ec);
        if (st_verbose("LOWP_VERBOSE"))
            printf("%s step %2d cpu %.6f gpu bf16 %.6f (%.2e) fp16 %.6f "
                   "(%.2e) cpu bf16 %.6f (%.2e)\n", model, s, cpu[s], bf[s],
                   eb, hf[s], eh, cpu_bf16 ? cbf[s] : 0.0, ec);
        ck_assert_msg(eb <= tol_bf16, "%s step %d: bf16 loss %.6f, cpu "
                      "%.6f (%.2e)", model, s, bf[s], cpu[s], eb);
        ck_assert_msg(eh <= tol_f16, "%s step %d: fp16 loss %.6f, cpu %.6f "
                      "(%.2e)", model, s, hf[s], cpu[s], eh);
        /* two bf16 computations that round at different points (oneDNN
         * keeps some sums in fp32 that cuDNN rounds, and back): as far
         * apart as each is from fp32 (measured alike) */
        ck_assert_msg(ec <= tol_bf16, "%s step %d: gpu bf16 %.6f, cpu "
                      "bf16 %.6f (%.2e)", model, s, bf[s], cbf[s], ec);
    }
    printf("%s over %d steps: worst loss difference gpu bf16 %.2e, gpu "
           "fp16 %.2e against cpu fp32; gpu bf16 against cpu bf16 %.2e\n",
           model, steps, wb, wh, wc);
    if (steps >= 20) { /* it learns */
        ck_assert_double_lt(bf[steps - 1], bf[0]);
        ck_assert_double_lt(hf[steps - 1], hf[0]);
    }
    ck_assert_msg(wb > 0 && wh > 0, "16-bit losses are the fp32 ones");
    td_model_free(m);
}

/* Loss tolerances (|16-bit - fp32| / max(fp32, 1)).  Step 0's loss
 * differs by the forward's rounding alone (measured 5.7e-3 bf16, 5.0e-4
 * fp16 on fmnist-cnn: the logits' error of a few u); each later step adds
 * what 16-bit gradients did to the weights, so the curves drift apart:
 * over 20 fmnist-cnn steps the worst measured was 2.1e-2 (bf16, step 15)
 * and 9.3e-3 (fp16), GPU bf16 against CPU bf16 2.3e-2; resnet20's 5
 * steps 8.3e-3, 1.3e-3 and 8.8e-3.  About 2.5 x that: */
#define LOSS_TOL_BF16 5e-2
#define LOSS_TOL_F16 2.5e-2

START_TEST(test_fmnist_losses_track_cpu)
{
    td_cuda_register();
    losses_case("fmnist-cnn", (td_shape){1, 28, 28}, 4, TD__STEPS,
                LOSS_TOL_BF16, LOSS_TOL_F16);
}
END_TEST

/* resnet20 on 3x16x16 over 5 steps (19 convolutions and batch norms
 * deep: more roundings on the way, the same tolerances hold). */
START_TEST(test_resnet20_losses_track_cpu)
{
    td_cuda_register();
    losses_case("resnet20", (td_shape){3, 16, 16}, 4,
                TD__STEPS < 5 ? TD__STEPS : 5, LOSS_TOL_BF16, LOSS_TOL_F16);
}
END_TEST

/* tiny-dropout (rate 0.5) over 5 steps in bf16 and fp16: the masks are
 * Philox draws by index on both backends, so wherever the dropout's input
 * is not zero on either (its relu input can round across zero in 16
 * bits), its output is zero exactly where the CPU's is; the losses stay
 * within the tolerances above. */
START_TEST(test_dropout_in_16_bits)
{
    td_cuda_register();
    td_model *m = ref_load_model("tiny-dropout", (td_shape){2, 9, 9}, 5);
    int drop = -1;
    for (int L = 0; L < m->nlayers; L++)
        if (m->layers[L].kind == TD_L_DROPOUT)
            drop = L;
    ck_assert_int_ge(drop, 0);
    size_t cnt = (size_t)8 * m->layers[drop].out.c;
    int in = m->layers[drop].in[0];
    enum td_dtype dts[2] = {TD_BF16, TD_F16};
    for (int k = 0; k < 2; k++) {
        td_backend_config c32 = st_config(8, TD_F32, TD_MATH_FP32);
        td_backend_config clo = st_config(8, dts[k], TD_MATH_FP32);
        clo.mem_layout = TD_MEM_PER_LAYER; /* reads the dropout's input */
        td_backend *cpu = st_make("cpu", m, &c32);
        td_backend *gpu = st_make("cuda:0", m, &clo);
        st_batch b = {0};
        size_t zeros = 0, differ = 0;
        for (int s = 0; s < 5; s++) {
            double lc = st_step(cpu, m, &b, 8,
                                500 + (uint64_t)s, 0.05f, s + 1);
            double lg = st_step(gpu, m, &b, 8,
                                500 + (uint64_t)s, 0.05f, s + 1);
            double tol = dts[k] == TD_BF16 ? LOSS_TOL_BF16 : LOSS_TOL_F16;
            ck_assert_msg(st_loss_err(lg, lc) <= tol, "%s step %d: %.6f, cpu "
                          "%.6f", st_dt_name(dts[k]), s, lg, lc);
            st_masks_compare(cpu, gpu, drop, in, cnt, &zeros, &differ);
        }
        if (st_verbose("LOWP_VERBOSE"))
            printf("tiny-dropout %s: %zu outputs of nonzero inputs dropped "
                   "on the CPU (of %zu), %zu differ\n", st_dt_name(dts[k]),
                   zeros, 5 * cnt, differ);
        ck_assert_uint_eq(differ, 0);
        ck_assert_uint_gt(zeros, 5 * cnt / 8); /* rate 0.5 */
        td_backend_destroy(cpu);
        td_backend_destroy(gpu);
        st_batch_free(&b);
    }
    td_model_free(m);
}
END_TEST

/* ---- fp32 master weights ---------------------------------------------- */

/* A step at lr 1e-6 moves fmnist-cnn's weights by far less than half a
 * bf16 spacing (2^-9 of a weight ~0.05 is ~1e-4): a bf16 weight could
 * not change, the fp32 master must. */
START_TEST(test_master_weights_stay_fp32)
{
    td_cuda_register();
    td_model *m = ref_load_model("fmnist-cnn", (td_shape){1, 28, 28}, 10);
    td_backend_config c = st_config(4, TD_BF16, TD_MATH_FP32);
    td_backend *be = st_make("cuda:0", m, &c);
    st_batch b = {0};
    size_t cnt = m->params[0].count; /* conv1.weight */
    float *w0 = malloc(cnt * sizeof *w0), *w1 = malloc(cnt * sizeof *w1);
    ck_assert(w0 && w1);
    ck_assert_int_eq(be->ops->read_tensor(be, TD_T_PARAM, 0, w0, cnt), 0);
    st_step(be, m, &b, 4, 100, 1e-6f, 1);
    ck_assert_int_eq(be->ops->read_tensor(be, TD_T_PARAM, 0, w1, cnt), 0);
    size_t moved = 0, sub_ulp = 0, off_grid = 0;
    for (size_t i = 0; i < cnt; i++) {
        moved += w1[i] != w0[i];
        sub_ulp += w1[i] != w0[i] && td_bf16_round(w1[i]) ==
                                         td_bf16_round(w0[i]);
        off_grid += td_bf16_round(w1[i]) != w1[i];
    }
    if (st_verbose("LOWP_VERBOSE"))
        printf("conv1.weight: %zu of %zu moved, %zu by less than a bf16 "
               "step, %zu not bf16 values\n", moved, cnt, sub_ulp, off_grid);
    ck_assert_uint_gt(moved, cnt / 2);
    ck_assert_uint_gt(sub_ulp, cnt / 2);
    ck_assert_uint_gt(off_grid, cnt / 2);
    free(w0);
    free(w1);
    st_batch_free(&b);
    td_backend_destroy(be);
    td_model_free(m);
}
END_TEST

/* ---- batch norms kept in inference mode (freeze_bn_stats) ----------- */

/* tiny-all with every batch norm in inference mode, 5 SGD steps: the GPU
 * in bf16 and fp16 against the CPU in fp32 (the loss tolerances above),
 * and the running statistics bitwise untouched. */
START_TEST(test_bn_eval_in_16_bits)
{
    td_cuda_register();
    td_model *m = ref_load_model("tiny-all", (td_shape){2, 9, 9}, 5);
    uint8_t bn_eval[64] = {0};
    ck_assert_int_le(m->nlayers, 64);
    for (int L = 0; L < m->nlayers; L++)
        bn_eval[L] = m->layers[L].kind == TD_L_BN;
    enum td_dtype dts[3] = {TD_F32, TD_BF16, TD_F16};
    double loss[3][5];
    size_t n = 0;
    float *snap = NULL;
    for (int k = 0; k < 3; k++) {
        td_backend_config c = st_config(6, dts[k], TD_MATH_FP32);
        c.bn_eval = bn_eval;
        td_backend *be = st_make(k == 0 ? "cpu" : "cuda:0", m, &c);
        st_batch b = {0};
        for (int s = 0; s < 5; s++)
            loss[k][s] = st_step(be, m, &b, 6,
                                 300 + (uint64_t)s, 0.05f, s + 1);
        n = td_backend_snapshot_floats(m, &c.optim);
        snap = realloc(snap, n * sizeof *snap);
        ck_assert_ptr_nonnull(snap);
        ck_assert_int_eq(td_backend_snapshot(be, snap, n), 0);
        ck_assert_int_eq(td_backend_sync(be), 0);
        /* the state tensors (running mean 0, running var 1) at the end */
        size_t at = n;
        for (int i = m->nstate - 1; i >= 0; i--)
            at -= m->state[i].count;
        for (int i = 0; i < m->nstate; i++)
            for (size_t e = 0; e < m->state[i].count; e++, at++)
                ck_assert_msg(snap[at] == m->state[i].init, "%s: state %d "
                              "element %zu is %g", st_dt_name(dts[k]), i, e,
                              snap[at]);
        td_backend_destroy(be);
        st_batch_free(&b);
    }
    for (int s = 0; s < 5; s++) {
        double eb = st_loss_err(loss[1][s], loss[0][s]);
        double eh = st_loss_err(loss[2][s], loss[0][s]);
        if (st_verbose("LOWP_VERBOSE"))
            printf("bn_eval step %d cpu %.6f bf16 %.6f (%.2e) fp16 %.6f "
                   "(%.2e)\n", s, loss[0][s], loss[1][s], eb, loss[2][s],
                   eh);
        ck_assert_msg(eb <= LOSS_TOL_BF16 && eh <= LOSS_TOL_F16, "step %d: "
                      "cpu %.6f bf16 %.6f fp16 %.6f", s, loss[0][s],
                      loss[1][s], loss[2][s]);
    }
    free(snap);
    td_model_free(m);
}
END_TEST

/* ---- checkpoints across precisions ------------------------------------ */

/* A snapshot (fp32 master weights, slots, statistics) of a job at `from`,
 * restored into a new backend at `to`: the snapshot comes back bitwise,
 * and the evaluation loss after the restore is the first job's (within
 * the 16-bit tolerance) and not the initial weights' (the 16-bit copy was
 * rebuilt from the restored master weights). */
static void resume_case(enum td_dtype from, enum td_dtype to)
{
    td_model *m = ref_load_model("tiny-all", (td_shape){2, 9, 9}, 5);
    st_batch b = {0};
    /* within 3% of the first job's loss, and 10x farther from the
     * initial weights' */
    td_backend *b2 = st_resume_check(m, from, to, 6, 0.05f, &b, 3e-2, 10,
                                     "", "LOWP_VERBOSE");
    /* and it trains on */
    double l = st_step(b2, m, &b, 6, 200, 0.05f, 7);
    ck_assert(isfinite(l));
    st_batch_free(&b);
    td_backend_destroy(b2);
    td_model_free(m);
}

START_TEST(test_bf16_checkpoint_resumes_at_fp32)
{
    td_cuda_register();
    resume_case(TD_BF16, TD_F32);
    resume_case(TD_F16, TD_F32);
}
END_TEST

START_TEST(test_fp32_checkpoint_resumes_at_bf16)
{
    td_cuda_register();
    resume_case(TD_F32, TD_BF16);
    resume_case(TD_F32, TD_F16);
}
END_TEST

static Suite *sim_lowp_suite(void)
{
    Suite *s = suite_create("sim_lowp");
    TCase *tc = tcase_create("calls");
    tcase_add_test(tc, test_bf16_job_runs_bf16_tensor_ops);
    tcase_add_test(tc, test_fp16_job_runs_fp16_tensor_ops);
    tcase_add_test(tc, test_refusals);
    tcase_add_test(tc, test_sim_gemmex_rules);
    tcase_add_test(tc, test_sim_cudnn_rules);
    suite_add_tcase(s, tc);
    tc = tcase_create("numerics");
    tcase_add_test(tc, test_fmnist_forward_layers);
    tcase_add_test(tc, test_resnet20_forward_layers);
    tcase_add_test(tc, test_fmnist_losses_track_cpu);
    tcase_add_test(tc, test_resnet20_losses_track_cpu);
    tcase_add_test(tc, test_master_weights_stay_fp32);
    tcase_add_test(tc, test_bn_eval_in_16_bits);
    tcase_add_test(tc, test_dropout_in_16_bits);
    suite_add_tcase(s, tc);
    tc = tcase_create("resume");
    tcase_add_test(tc, test_bf16_checkpoint_resumes_at_fp32);
    tcase_add_test(tc, test_fp32_checkpoint_resumes_at_bf16);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(sim_lowp_suite)
