/* test_sim_blaslt.c - the CUDA backend's dense layers on cuBLASLt with
 * bias epilogues (issue 15), on the simulated device.
 *
 * What is checked (tests/data/lt-mlp.json: a convolution into three
 * dense layers, d1 and d3 with a bias, d2 without; batch 4):
 *   - the simulated cuBLASLt by hand: BIAS adds the bias after the
 *     product, RELU_BIAS then clamps at 0, BGRADB sums B over k, a bf16
 *     D is rounded once;
 *   - its refusals, one check each (sim_cublaslt.c's list);
 *   - the calls of a step: per dense layer three cublasLtMatmul (forward
 *     with BIAS when it has a bias, RELU_BIAS or RELU when an in-place
 *     ReLU follows, weight gradient with BGRADB, input
 *     gradient plain: every dense layer of lt-mlp has one), no cuBLAS
 *     GEMM, and two kernel launches fewer per biased layer than the old
 *     path (the bias add and bias gradient kernels), one per fused ReLU;
 *   - a dense layer reading the batch: no input gradient GEMM, the CPU's
 *     losses (tests/data/lt-linear.json);
 *   - the old path as the fallback when cuBLASLt has no algorithm
 *     (td_sim_blaslt_no_algo), said in a log line;
 *   - fp32 strict: Lt against the old path (cuBLAS GEMM + our bias
 *     kernels) after one step: the loss, every weight gradient and input
 *     gradient bitwise equal (the simulator sums a GEMM the same way on
 *     both paths and adds the bias in float to the float sum, as the
 *     bias kernel does), the bias gradients within the fp32 rounding of
 *     the kernel's sum (bound per element in check_bias_grads); the same
 *     under the memory plan with the ReLUs in the epilogues;
 *   - tf32, bf16, fp16: loss curves against the CPU backend in fp32
 *     (test_sim_precision.c's and test_sim_lowp.c's tolerances); tf32's
 *     first loss bitwise the old path's;
 *   - a graph-captured run bitwise equal to an eager one.
 * LT_VERBOSE=1 prints every measured figure.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>

#include "backend/backend.h"
#include "backend/cuda/backend_cuda.h"
#include "base/error.h"
#include "base/log.h"
#include "base/rng.h"
#include "bf16.h"
#include "model/model.h"
#include "ref_models.h"
#include "sim.h"
#include "sim_testkit.h"
#include "sim_lt.h"
#include "tdtest.h"

/* as test_sim_precision.c: a small stable SGD step */
#define N 4

static td_model *model(void)
{
    return ref_load_model("lt-mlp", (td_shape){2, 9, 9}, 5);
}

/* ---- the simulated cuBLASLt by hand ----------------------------------- */

typedef struct ltcase {
    cublasLtHandle_t h;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulAlgo_t algo;
    size_t ws;
} ltcase;

/* D (m x n, fp32 or dt) = op(A)^T B, A stored k x m (TRANSA T), B k x n,
 * epilogue epi with bias pointer bias (type of D), the algorithm of the
 * heuristic (default preference but the workspace: 4 MiB). */
static cublasStatus_t lt_setup(ltcase *c, cudaDataType at, cudaDataType dt,
                               int m, int n, int k, uint32_t epi,
                               const void *bias, cublasComputeType_t ct)
{
    int32_t ta = CUBLAS_OP_T;
    uint64_t ws = 4u << 20;
    cublasLtMatmulPreference_t p;
    cublasLtMatmulHeuristicResult_t r;
    int got = 0;
    ck_assert_int_eq(cublasLtCreate(&c->h), CUBLAS_STATUS_SUCCESS);
    ck_assert_int_eq(cublasLtMatmulDescCreate(&c->op, ct, CUDA_R_32F),
                     CUBLAS_STATUS_SUCCESS);
    ck_assert_int_eq(cublasLtMatmulDescSetAttribute(c->op,
                     CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta),
                     CUBLAS_STATUS_SUCCESS);
    ck_assert_int_eq(cublasLtMatmulDescSetAttribute(c->op,
                     CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi),
                     CUBLAS_STATUS_SUCCESS);
    ck_assert_int_eq(cublasLtMatmulDescSetAttribute(c->op,
                     CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias),
                     CUBLAS_STATUS_SUCCESS);
    ck_assert_int_eq(cublasLtMatrixLayoutCreate(&c->a, at, (uint64_t)k,
                     (uint64_t)m, k), CUBLAS_STATUS_SUCCESS);
    ck_assert_int_eq(cublasLtMatrixLayoutCreate(&c->b, at, (uint64_t)k,
                     (uint64_t)n, k), CUBLAS_STATUS_SUCCESS);
    ck_assert_int_eq(cublasLtMatrixLayoutCreate(&c->d, dt, (uint64_t)m,
                     (uint64_t)n, m), CUBLAS_STATUS_SUCCESS);
    ck_assert_int_eq(cublasLtMatmulPreferenceCreate(&p), CUBLAS_STATUS_SUCCESS);
    ck_assert_int_eq(cublasLtMatmulPreferenceSetAttribute(p,
                     CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
                     CUBLAS_STATUS_SUCCESS);
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(c->h, c->op, c->a,
                                                       c->b, c->d, c->d, p, 1,
                                                       &r, &got);
    cublasLtMatmulPreferenceDestroy(p);
    if (st == CUBLAS_STATUS_SUCCESS) {
        ck_assert_int_eq(got, 1);
        c->algo = r.algo;
        c->ws = r.workspaceSize;
    }
    return st;
}

static void lt_free(ltcase *c)
{
    cublasLtMatrixLayoutDestroy(c->a);
    cublasLtMatrixLayoutDestroy(c->b);
    cublasLtMatrixLayoutDestroy(c->d);
    cublasLtMatmulDescDestroy(c->op);
    cublasLtDestroy(c->h);
}

static cublasStatus_t lt_run(ltcase *c, const void *A, const void *B,
                             void *D, void *ws, size_t wsb)
{
    static const float one = 1.0f, zero = 0.0f;
    return cublasLtMatmul(c->h, c->op, &one, A, c->a, B, c->b, &zero, D,
                          c->d, D, c->d, &c->algo, ws, wsb, NULL);
}

static void *dev(size_t bytes, const void *host)
{
    void *p = NULL;
    ck_assert_int_eq(cudaMalloc(&p, bytes), cudaSuccess);
    if (host)
        ck_assert_int_eq(cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice),
                         cudaSuccess);
    return p;
}

/* D (2 x 2) = A^T B + bias, A = [[1 2] [3 4]] stored 2 x 2 (k x m), B =
 * [[1 0] [0 1]] (k x n): D = A^T + bias per row; and BGRADB of the same
 * GEMM: the column sums of B (k the reduction). */
START_TEST(test_sim_lt_by_hand)
{
    float ha[4] = {1, 2, 3, 4}, hb[4] = {1, 0, 0, 1}, hbias[2] = {10, 20};
    float *A = dev(sizeof ha, ha), *B = dev(sizeof hb, hb);
    float *bias = dev(sizeof hbias, hbias), *D = dev(16, NULL);
    void *ws = dev(4u << 20, NULL);
    float hd[4], hg[2];
    ltcase c;
    ck_assert_int_eq(lt_setup(&c, CUDA_R_32F, CUDA_R_32F, 2, 2, 2,
                              CUBLASLT_EPILOGUE_BIAS, bias,
                              CUBLAS_COMPUTE_32F), CUBLAS_STATUS_SUCCESS);
    long before = td_sim_blaslt_matmuls(CUBLASLT_EPILOGUE_BIAS);
    ck_assert_int_eq(lt_run(&c, A, B, D, ws, 4u << 20),
                     CUBLAS_STATUS_SUCCESS);
    st_get(hd, D, sizeof hd);
    /* column-major D: D(i, j) = A(j, i) + bias[i]: A^T = [[1 2] [3 4]]^T */
    ck_assert_float_eq(hd[0], 1 + 10); /* D(0,0) = A(0,0) */
    ck_assert_float_eq(hd[1], 3 + 20); /* D(1,0) = A(0,1) = ha[2] */
    ck_assert_float_eq(hd[2], 2 + 10); /* D(0,1) = A(1,0) = ha[1] */
    ck_assert_float_eq(hd[3], 4 + 20);
    ck_assert_int_eq(td_sim_blaslt_matmuls(CUBLASLT_EPILOGUE_BIAS),
                     before + 1);
    lt_free(&c);
    /* RELU_BIAS: the bias, then max(x, 0): bias -2, -3 gives
     * [-1 0 0 1] before the ReLU */
    float hneg[2] = {-2, -3};
    ck_assert_int_eq(cudaMemcpy(bias, hneg, sizeof hneg,
                                cudaMemcpyHostToDevice), cudaSuccess);
    ck_assert_int_eq(lt_setup(&c, CUDA_R_32F, CUDA_R_32F, 2, 2, 2,
                              CUBLASLT_EPILOGUE_RELU_BIAS, bias,
                              CUBLAS_COMPUTE_32F), CUBLAS_STATUS_SUCCESS);
    ck_assert_int_eq(lt_run(&c, A, B, D, ws, 4u << 20),
                     CUBLAS_STATUS_SUCCESS);
    st_get(hd, D, sizeof hd);
    ck_assert_float_eq(hd[0], 0); /* 1 - 2 */
    ck_assert_float_eq(hd[1], 0); /* 3 - 3 */
    ck_assert_float_eq(hd[2], 0); /* 2 - 2 */
    ck_assert_float_eq(hd[3], 1); /* 4 - 3 */
    lt_free(&c);
    /* bias gradient over B's k: B = [[1 0] [0 1]] has column sums 1, 1;
     * take B = A instead: column sums of [1 2 | 3 4] are 3 and 7 */
    float *G = dev(sizeof hg, NULL);
    ck_assert_int_eq(lt_setup(&c, CUDA_R_32F, CUDA_R_32F, 2, 2, 2,
                              CUBLASLT_EPILOGUE_BGRADB, G,
                              CUBLAS_COMPUTE_32F), CUBLAS_STATUS_SUCCESS);
    ck_assert_int_eq(lt_run(&c, B, A, D, ws, 4u << 20),
                     CUBLAS_STATUS_SUCCESS);
    st_get(hg, G, sizeof hg);
    ck_assert_float_eq(hg[0], 1 + 2);
    ck_assert_float_eq(hg[1], 3 + 4);
    lt_free(&c);
    /* bf16 D, rounded once after the bias: A = [1 + 2^-7, 1], B = [1,
     * 2^-8] (k = 2), bias -2^-9, all exact in bf16 (8 significant bits,
     * spacing 2^-7 above 1).  Once: 1 + 2^-7 + 2^-8 - 2^-9 = 1 + 2^-7 +
     * 2^-9 rounds to 1 + 2^-7.  The old path rounds the product first:
     * 1 + 2^-7 + 2^-8 is halfway, ties to even 1 + 2^-6, minus 2^-9
     * rounds back to 1 + 2^-6. */
    td_bf16 a1[2] = {td_bf16_from_f32(1.0f + 0x1p-7f), td_bf16_from_f32(1)};
    td_bf16 b1[2] = {td_bf16_from_f32(1), td_bf16_from_f32(0x1p-8f)};
    td_bf16 bb = td_bf16_from_f32(-0x1p-9f), d1;
    void *A1 = dev(sizeof a1, a1), *B1 = dev(sizeof b1, b1);
    void *BB = dev(2, &bb), *D1 = dev(2, NULL);
    ck_assert_int_eq(lt_setup(&c, CUDA_R_16BF, CUDA_R_16BF, 1, 1, 2,
                              CUBLASLT_EPILOGUE_BIAS, BB,
                              CUBLAS_COMPUTE_32F), CUBLAS_STATUS_SUCCESS);
    ck_assert_int_eq(lt_run(&c, A1, B1, D1, ws, 4u << 20),
                     CUBLAS_STATUS_SUCCESS);
    st_get(&d1, D1, 2);
    ck_assert_float_eq(td_bf16_to_f32(d1), 1.0f + 0x1p-7f);
    lt_free(&c);
    cudaFree(A), cudaFree(B), cudaFree(bias), cudaFree(D), cudaFree(ws);
    cudaFree(G), cudaFree(A1), cudaFree(B1), cudaFree(BB), cudaFree(D1);
}
END_TEST

/* A 2x2x2 fp32 case with epilogue epi and bias set up, then refused at
 * the run (CUBLAS_STATUS_INVALID_VALUE). */
static void run_refused(uint32_t epi, const void *bias, const void *A,
                        const void *B, void *D, void *ws)
{
    ltcase c;
    ck_assert_int_eq(lt_setup(&c, CUDA_R_32F, CUDA_R_32F, 2, 2, 2, epi, bias,
                              CUBLAS_COMPUTE_32F), CUBLAS_STATUS_SUCCESS);
    ck_assert_int_eq(lt_run(&c, A, B, D, ws, 4u << 20),
                     CUBLAS_STATUS_INVALID_VALUE);
    lt_free(&c);
}

/* A 2x2x2 case (A and B of type at, D of dt, no bias) refused at its
 * setup (CUBLAS_STATUS_NOT_SUPPORTED). */
static void setup_refused(cudaDataType at, cudaDataType dt, uint32_t epi,
                          cublasComputeType_t ct)
{
    ltcase c;
    ck_assert_int_eq(lt_setup(&c, at, dt, 2, 2, 2, epi, NULL, ct),
                     CUBLAS_STATUS_NOT_SUPPORTED);
    lt_free(&c);
}

/* One check per refusal of sim_cublaslt.c. */
START_TEST(test_sim_lt_refusals)
{
    float *A = dev(256, NULL), *B = dev(256, NULL), *D = dev(256, NULL);
    float *bias = dev(256, NULL);
    void *ws = dev(4u << 20, NULL);
    ltcase c;
    /* a bias type other than D's (bf16 bias, fp32 D) */
    ck_assert_int_eq(lt_setup(&c, CUDA_R_32F, CUDA_R_32F, 2, 2, 2,
                              CUBLASLT_EPILOGUE_BIAS, bias,
                              CUBLAS_COMPUTE_32F), CUBLAS_STATUS_SUCCESS);
    int32_t bt = CUDA_R_16BF;
    ck_assert_int_eq(cublasLtMatmulDescSetAttribute(c.op,
                     CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt),
                     CUBLAS_STATUS_SUCCESS);
    ck_assert_int_eq(lt_run(&c, A, B, D, ws, 4u << 20),
                     CUBLAS_STATUS_NOT_SUPPORTED);
    bt = -1;
    ck_assert_int_eq(cublasLtMatmulDescSetAttribute(c.op,
                     CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt),
                     CUBLAS_STATUS_SUCCESS);
    ck_assert_int_eq(lt_run(&c, A, B, D, ws, 4u << 20),
                     CUBLAS_STATUS_SUCCESS); /* the control */
    /* a pointer less aligned than the algorithm was chosen for (256) */
    ck_assert_int_eq(lt_run(&c, A + 1, B, D, ws, 4u << 20),
                     CUBLAS_STATUS_INVALID_VALUE);
    /* a workspace smaller than the algorithm's */
    ck_assert_uint_gt(c.ws, 0);
    ck_assert_int_eq(lt_run(&c, A, B, D, ws, c.ws - 1),
                     CUBLAS_STATUS_INVALID_VALUE);
    /* D overlapping A */
    ck_assert_int_eq(lt_run(&c, A, B, A, ws, 4u << 20),
                     CUBLAS_STATUS_INVALID_VALUE);
    /* the epilogue changed since the algorithm was chosen */
    uint32_t epi = CUBLASLT_EPILOGUE_DEFAULT;
    ck_assert_int_eq(cublasLtMatmulDescSetAttribute(c.op,
                     CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi),
                     CUBLAS_STATUS_SUCCESS);
    ck_assert_int_eq(lt_run(&c, A, B, D, ws, 4u << 20),
                     CUBLAS_STATUS_INVALID_VALUE);
    lt_free(&c);
    /* an epilogue that needs the bias pointer without it */
    run_refused(CUBLASLT_EPILOGUE_BIAS, NULL, A, B, D, ws);
    /* the bias gradient overlapping D */
    run_refused(CUBLASLT_EPILOGUE_BGRADB, D, A, B, D, ws);
    /* an epilogue the simulator does not implement (RELU_AUX) */
    setup_refused(CUDA_R_32F, CUDA_R_32F, CUBLASLT_EPILOGUE_RELU_AUX,
                  CUBLAS_COMPUTE_32F);
    /* TF32 compute with 16-bit inputs */
    setup_refused(CUDA_R_16BF, CUDA_R_16BF, CUBLASLT_EPILOGUE_DEFAULT,
                  CUBLAS_COMPUTE_32F_FAST_TF32);
    /* a 16-bit D of a type other than A's (bf16 A, fp16 D) */
    setup_refused(CUDA_R_16BF, CUDA_R_16F, CUBLASLT_EPILOGUE_DEFAULT,
                  CUBLAS_COMPUTE_32F);
    /* fp16 accumulation */
    setup_refused(CUDA_R_16F, CUDA_R_16F, CUBLASLT_EPILOGUE_DEFAULT,
                  CUBLAS_COMPUTE_16F);
    /* no algorithm when told so (the backend's fallback) */
    td_sim_blaslt_no_algo(1);
    setup_refused(CUDA_R_32F, CUDA_R_32F, CUBLASLT_EPILOGUE_DEFAULT,
                  CUBLAS_COMPUTE_32F);
    td_sim_blaslt_no_algo(0);
    cudaFree(A), cudaFree(B), cudaFree(D), cudaFree(bias), cudaFree(ws);
}
END_TEST

/* ---- the backend's calls ---------------------------------------------- */

typedef struct counts {
    long lt, bias, relu_bias, relu, bgrad, plain, gemms, launches;
} counts;

static counts counts_now(void)
{
    return (counts){td_sim_blaslt_matmuls(-1),
                    td_sim_blaslt_matmuls(CUBLASLT_EPILOGUE_BIAS),
                    td_sim_blaslt_matmuls(CUBLASLT_EPILOGUE_RELU_BIAS),
                    td_sim_blaslt_matmuls(CUBLASLT_EPILOGUE_RELU),
                    td_sim_blaslt_matmuls(CUBLASLT_EPILOGUE_BGRADB),
                    td_sim_blaslt_matmuls(CUBLASLT_EPILOGUE_DEFAULT),
                    td_sim_blas_gemms(-1), td_sim_launches(0)};
}

static counts counts_diff(counts b, counts a)
{
    return (counts){b.lt - a.lt, b.bias - a.bias, b.relu_bias - a.relu_bias,
                    b.relu - a.relu, b.bgrad - a.bgrad, b.plain - a.plain,
                    b.gemms - a.gemms, b.launches - a.launches};
}

static char logged[4096];

static void sink(void *user, int level, long job, const char *line)
{
    (void)user, (void)level, (void)job;
    size_t n = strlen(logged);
    snprintf(logged + n, sizeof logged - n, "%s\n", line);
}

/* The second training step's calls (the first and the warm-up are the
 * same, but a step is what a job repeats). */
static counts step_calls(int no_algo)
{
    td_model *m = model();
    td_backend_config c = st_config(N, TD_F32, TD_MATH_FP32);
    st_batch b = {0};
    td_sim_blaslt_no_algo(no_algo);
    td_backend *be = st_make("cuda:0", m, &c);
    st_step(be, m, &b, N, 100, ST_LR, 1);
    counts a = counts_now();
    st_step(be, m, &b, N, 101, ST_LR, 2);
    counts d = counts_diff(counts_now(), a);
    td_backend_destroy(be);
    td_sim_blaslt_no_algo(0);
    free(b.px), free(b.labels);
    td_model_free(m);
    return d;
}

START_TEST(test_step_calls_lt_with_epilogues)
{
    td_cuda_register();
    td_log_set_sink(sink, NULL);
    counts lt = step_calls(0);
    ck_assert_ptr_null(strstr(logged, "no algorithm"));
    ck_assert_msg(strstr(logged, "3 dense layers on cuBLASLt (bias in the "
                         "epilogues), 2 ReLUs in them, 0 GEMMs on cuBLAS"),
                  "%s", logged);
    counts old = step_calls(1);
    td_log_set_sink(NULL, NULL);
    printf("per step: cuBLASLt %ld (BIAS %ld, RELU_BIAS %ld, RELU %ld, "
           "BGRADB %ld, plain %ld), GEMMs %ld, launches %ld; without "
           "cuBLASLt: cuBLASLt %ld, GEMMs %ld, launches %ld\n", lt.lt,
           lt.bias, lt.relu_bias, lt.relu, lt.bgrad, lt.plain, lt.gemms,
           lt.launches, old.lt, old.gemms, old.launches);
    /* d1 and d3 have a bias, d2 not; d1 and d2 feed in-place ReLUs (the
     * memory plan's), d3 the loss; every one has an input gradient */
    ck_assert_int_eq(lt.relu_bias, 1); /* d1 + r2 */
    ck_assert_int_eq(lt.relu, 1);      /* d2 + r3 */
    ck_assert_int_eq(lt.bias, 1);      /* d3 */
    ck_assert_int_eq(lt.bgrad, 2);
    ck_assert_int_eq(lt.plain, 1 + 3); /* d2's dW, 3 dx */
    ck_assert_int_eq(lt.lt, 9);
    ck_assert_int_eq(lt.gemms, 9); /* no cuBLAS GEMM beside them */
    /* the fallback: the same GEMMs on cuBLAS, said in a log line */
    ck_assert_int_eq(old.lt, 0);
    ck_assert_int_eq(old.gemms, 9);
    ck_assert_msg(strstr(logged, "cuBLASLt has no algorithm for its "
                         "forward GEMM") &&
                  strstr(logged, "cuBLAS GEMM and bias kernel instead"),
                  "%s", logged);
    /* two kernels fewer per biased layer (bias add and bias gradient)
     * and one cuDNN call per fused ReLU (its forward) */
    ck_assert_int_eq(old.launches - lt.launches, 2 * 2 + 2);
}
END_TEST

/* A dense layer reading the batch (tests/data/lt-linear.json): two
 * calls a step (BIAS forward, BGRADB weight gradient; no input gradient
 * GEMM), and the losses of 3 fp32 steps within test_sim_precision.c's
 * strict fp32 tolerance of the CPU's (1e-4 relative; only summation
 * order differs). */
START_TEST(test_dense_on_the_batch)
{
    td_cuda_register();
    td_model *m = ref_load_model("lt-linear", (td_shape){2, 9, 9}, 5);
    td_backend_config c = st_config(N, TD_F32, TD_MATH_FP32);
    td_backend *cpu = st_make("cpu", m, &c), *gpu = st_make("cuda:0", m, &c);
    st_batch b = {0};
    double worst = 0;
    for (int s = 0; s < 3; s++) {
        double lc = st_step(cpu, m, &b, N, 100 + (uint64_t)s, ST_LR, s + 1);
        counts a = counts_now();
        double lg = st_step(gpu, m, &b, N, 100 + (uint64_t)s, ST_LR, s + 1);
        counts d = counts_diff(counts_now(), a);
        ck_assert_int_eq(d.lt, 2);
        ck_assert_int_eq(d.bias, 1);
        ck_assert_int_eq(d.bgrad, 1);
        double e = fabs(lg - lc) / fmax(lc, 1);
        worst = fmax(worst, e);
        ck_assert_msg(e <= 1e-4, "step %d: gpu %.9f, cpu %.9f", s, lg, lc);
    }
    printf("dense on the batch: 2 cuBLASLt calls a step, losses within "
           "%.2e of the CPU's\n", worst);
    td_backend_destroy(cpu);
    td_backend_destroy(gpu);
    free(b.px), free(b.labels);
    td_model_free(m);
}
END_TEST

/* ---- numerics --------------------------------------------------------- */

typedef struct run {
    double loss[5];
    float *grad[16];  /* parameter gradients after the last step */
    float *dy[16];    /* layer gradients (TD_T_GRAD) */
    float *snap;
    size_t nsnap;
} run;

static void run_free(run *r, const td_model *m)
{
    for (int p = 0; p < m->nparams; p++)
        free(r->grad[p]);
    for (int L = 0; L < m->nlayers; L++)
        free(r->dy[L]);
    free(r->snap);
}

/* `steps` steps of the CUDA backend (or CPU), keeping what the
 * comparisons read; with `layout` TD_MEM_PER_LAYER every gradient is
 * readable, with the plan (the default) the ReLUs run in place and those
 * after a dense layer are fused into its epilogue. */
static void train(const char *kind, enum td_dtype dt, enum td_fp32_math math,
                  int no_algo, int graphs, int steps, run *r,
                  enum td_mem_layout layout)
{
    td_model *m = model();
    td_backend_config c = st_config(N, dt, math);
    c.mem_layout = layout;
    c.cuda_graphs = graphs;
    st_batch b = {0};
    memset(r, 0, sizeof *r);
    td_sim_blaslt_no_algo(no_algo);
    td_backend *be = st_make(kind, m, &c);
    for (int s = 0; s < steps; s++)
        r->loss[s] = st_step(be, m, &b, N, 100 + (uint64_t)s, ST_LR, s + 1);
    for (int p = 0; p < m->nparams; p++) {
        size_t n = m->params[p].count;
        r->grad[p] = malloc(n * sizeof(float));
        ck_assert_int_eq(be->ops->read_tensor(be, TD_T_PARAM_GRAD, p,
                                              r->grad[p], n), 0);
    }
    for (int L = 1; L < m->nlayers; L++) {
        const td_shape *s = &m->layers[L].out;
        size_t n = (size_t)N * s->c * s->h * s->w;
        r->dy[L] = malloc(n * sizeof(float));
        if (be->ops->read_tensor(be, TD_T_GRAD, L, r->dy[L], n) != 0) {
            free(r->dy[L]); /* a fused layer of the CPU backend */
            r->dy[L] = NULL;
        }
    }
    r->nsnap = td_backend_snapshot_floats(m, &c.optim);
    r->snap = malloc(r->nsnap * sizeof(float));
    ck_assert_int_eq(td_backend_snapshot(be, r->snap, r->nsnap), 0);
    ck_assert_int_eq(td_backend_sync(be), 0);
    td_backend_destroy(be);
    td_sim_blaslt_no_algo(0);
    free(b.px), free(b.labels);
    td_model_free(m);
}

/* Dense layer L's bias gradient (parameter p + 1) on the two paths (dy
 * from `dys`, a run with every gradient readable): the
 * kernel sums the batch's N values of dy in float, in row order (N - 1
 * roundings, each at most 2^-24 of the partial sum, which is at most the
 * sum of |dy|); the simulated BGRADB sums in double and rounds once
 * (2^-24 of the result): per element |lt - kernel| <= N 2^-24 sum|dy|. */
static void check_bias_grads(const td_model *m, const run *lt,
                             const run *old, const run *dys)
{
    for (int L = 1; L < m->nlayers; L++) {
        const td_layer *l = &m->layers[L];
        if (l->kind != TD_L_DENSE || !l->bias)
            continue;
        int out = l->channels, p = l->param0 + 1;
        double worst = 0;
        for (int o = 0; o < out; o++) {
            double s = 0;
            for (int i = 0; i < N; i++)
                s += fabs(dys->dy[L][(size_t)i * out + o]);
            double d = fabs((double)lt->grad[p][o] - old->grad[p][o]);
            double bound = N * 0x1p-24 * s;
            worst = fmax(worst, s > 0 ? d / bound : 0);
            ck_assert_msg(d <= bound, "%s db[%d]: cuBLASLt %.9g, kernel "
                          "%.9g (bound %.3g)", l->name, o, lt->grad[p][o],
                          old->grad[p][o], bound);
        }
        printf("fp32 %s bias gradient: cuBLASLt against the kernel, worst "
               "%.2f of the rounding bound\n", l->name, worst);
    }
}

/* Parameter gradients bitwise equal but the dense biases'. */
static void same_weight_grads(const td_model *m, const run *a, const run *b)
{
    for (int p = 0; p < m->nparams; p++) {
        const td_param *q = &m->params[p];
        const td_layer *l = &m->layers[q->layer];
        if (l->kind == TD_L_DENSE && l->bias && p == l->param0 + 1)
            continue;
        ck_assert_msg(memcmp(a->grad[p], b->grad[p],
                             q->count * sizeof(float)) == 0,
                      "parameter %d's gradient differs", p);
    }
}

START_TEST(test_fp32_lt_matches_gemm_and_kernels)
{
    td_cuda_register();
    td_model *m = model();
    run lt, old, ltp, oldp;
    train("cuda:0", TD_F32, TD_MATH_FP32, 0, TD_GRAPHS_OFF, 1, &lt,
          TD_MEM_PER_LAYER);
    train("cuda:0", TD_F32, TD_MATH_FP32, 1, TD_GRAPHS_OFF, 1, &old,
          TD_MEM_PER_LAYER);
    ck_assert_msg(lt.loss[0] == old.loss[0], "loss %.17g, old path %.17g",
                  lt.loss[0], old.loss[0]);
    for (int L = 1; L < m->nlayers; L++)
        if (lt.dy[L]) {
            const td_shape *s = &m->layers[L].out;
            size_t n = (size_t)N * s->c * s->h * s->w;
            ck_assert_msg(memcmp(lt.dy[L], old.dy[L], n * 4) == 0,
                          "layer %s's gradient differs", m->layers[L].name);
        }
    same_weight_grads(m, &lt, &old);
    check_bias_grads(m, &lt, &old, &lt);
    /* under the memory plan, with the ReLUs in the epilogues: the same */
    train("cuda:0", TD_F32, TD_MATH_FP32, 0, TD_GRAPHS_OFF, 1, &ltp,
          TD_MEM_PLANNED);
    train("cuda:0", TD_F32, TD_MATH_FP32, 1, TD_GRAPHS_OFF, 1, &oldp,
          TD_MEM_PLANNED);
    ck_assert_msg(ltp.loss[0] == lt.loss[0] && oldp.loss[0] == lt.loss[0],
                  "loss %.17g with fused ReLUs, old path %.17g",
                  ltp.loss[0], oldp.loss[0]);
    same_weight_grads(m, &ltp, &oldp);
    same_weight_grads(m, &ltp, &lt);
    check_bias_grads(m, &ltp, &oldp, &lt);
    printf("fp32: loss %.9f on both paths, with and without the ReLUs in "
           "the epilogues; weight and input gradients bitwise equal\n",
           lt.loss[0]);
    run_free(&lt, m);
    run_free(&old, m);
    run_free(&ltp, m);
    run_free(&oldp, m);
    td_model_free(m);
}
END_TEST

/* |gpu - cpu| / max(cpu, 1) per step, at most tol. */
static void curves(const char *what, enum td_dtype dt, enum td_fp32_math math,
                   double tol)
{
    td_model *m = model();
    run cpu, lt, old;
    train("cpu", TD_F32, TD_MATH_FP32, 0, TD_GRAPHS_OFF, 5, &cpu,
          TD_MEM_PLANNED);
    train("cuda:0", dt, math, 0, TD_GRAPHS_OFF, 5, &lt, TD_MEM_PLANNED);
    train("cuda:0", dt, math, 1, TD_GRAPHS_OFF, 5, &old, TD_MEM_PLANNED);
    double worst = 0, worst_old = 0;
    for (int s = 0; s < 5; s++) {
        double e = fabs(lt.loss[s] - cpu.loss[s]) / fmax(cpu.loss[s], 1);
        double eo = fabs(old.loss[s] - cpu.loss[s]) / fmax(cpu.loss[s], 1);
        if (st_verbose("LT_VERBOSE"))
            printf("%s step %d: cpu %.6f cuBLASLt %.6f (%.2e) old path "
                   "%.6f (%.2e)\n", what, s, cpu.loss[s], lt.loss[s], e,
                   old.loss[s], eo);
        worst = fmax(worst, e), worst_old = fmax(worst_old, eo);
        ck_assert_msg(e <= tol, "%s step %d: %.6f, cpu %.6f", what, s,
                      lt.loss[s], cpu.loss[s]);
    }
    printf("%s: 5 steps, worst loss difference to the CPU %.2e with "
           "cuBLASLt, %.2e on the old path (tolerance %.0e)\n", what, worst,
           worst_old, tol);
    ck_assert_double_gt(worst, 0); /* really not fp32 */
    /* TF32: the first step's forward rounds the same inputs on both paths
     * and adds the bias in float to the same float sum: bitwise */
    if (dt == TD_F32)
        ck_assert_msg(lt.loss[0] == old.loss[0], "tf32 step 0: %.17g, old "
                      "path %.17g", lt.loss[0], old.loss[0]);
    run_free(&cpu, m);
    run_free(&lt, m);
    run_free(&old, m);
    td_model_free(m);
}

/* test_sim_precision.c's tf32 tolerance (2e-2; measured 6e-3 there) */
START_TEST(test_tf32_tracks_cpu)
{
    td_cuda_register();
    long tf = td_sim_blas_tf32();
    curves("tf32", TD_F32, TD_MATH_TF32, 2e-2);
    ck_assert_int_gt(td_sim_blas_tf32(), tf);
}
END_TEST

/* test_sim_lowp.c's loss tolerances: bf16 5e-2, fp16 2.5e-2 */
START_TEST(test_bf16_tracks_cpu)
{
    td_cuda_register();
    curves("bf16", TD_BF16, TD_MATH_FP32, 5e-2);
}
END_TEST

START_TEST(test_fp16_tracks_cpu)
{
    td_cuda_register();
    curves("fp16", TD_F16, TD_MATH_FP32, 2.5e-2);
}
END_TEST

/* A run captured as CUDA graphs equals an eager one, bit for bit. */
START_TEST(test_graph_step_equals_eager)
{
    td_cuda_register();
    td_model *m = model();
    run eager, graph;
    long launches = td_sim_graph_launches();
    train("cuda:0", TD_F32, TD_MATH_TF32, 0, TD_GRAPHS_OFF, 4, &eager,
          TD_MEM_PLANNED);
    ck_assert_int_eq(td_sim_graph_launches(), launches);
    train("cuda:0", TD_F32, TD_MATH_TF32, 0, TD_GRAPHS_ON, 4, &graph,
          TD_MEM_PLANNED);
    ck_assert_int_gt(td_sim_graph_launches(), launches);
    for (int s = 0; s < 4; s++)
        ck_assert_msg(eager.loss[s] == graph.loss[s], "step %d: %.17g "
                      "eager, %.17g graph", s, eager.loss[s], graph.loss[s]);
    ck_assert_uint_eq(eager.nsnap, graph.nsnap);
    ck_assert(memcmp(eager.snap, graph.snap, eager.nsnap * 4) == 0);
    printf("graphs: %ld graph launches, 4 losses and the state bitwise "
           "equal to eager\n", td_sim_graph_launches() - launches);
    run_free(&eager, m);
    run_free(&graph, m);
    td_model_free(m);
}
END_TEST

static Suite *sim_blaslt_suite(void)
{
    Suite *s = suite_create("sim_blaslt");
    TCase *tc = tcase_create("sim");
    tcase_add_test(tc, test_sim_lt_by_hand);
    tcase_add_test(tc, test_sim_lt_refusals);
    suite_add_tcase(s, tc);
    tc = tcase_create("backend");
    tcase_add_test(tc, test_step_calls_lt_with_epilogues);
    tcase_add_test(tc, test_dense_on_the_batch);
    tcase_add_test(tc, test_fp32_lt_matches_gemm_and_kernels);
    tcase_add_test(tc, test_tf32_tracks_cpu);
    tcase_add_test(tc, test_bf16_tracks_cpu);
    tcase_add_test(tc, test_fp16_tracks_cpu);
    tcase_add_test(tc, test_graph_step_equals_eager);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(sim_blaslt_suite)
