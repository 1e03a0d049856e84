/* test_sim_libs.c - the simulated device's cuBLAS and cuDNN, checked
 * against definitions independent of them: cublasSgemm matches a naive
 * column-major GEMM for every transpose combination; cuDNN's convolution
 * matches the reference layers (tests/ref/ref_layers.c) forward, and
 * backward through the definition of the gradient (a derivative of the
 * reference forward per element).  The device itself (streams, memory,
 * races, faults): test_sim.c. */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref_layers.h"
#include "sim.h"
#include "tdtest.h"

#define CU(call) ck_assert_int_eq((call), cudaSuccess)
#define BL(call) ck_assert_int_eq((call), CUBLAS_STATUS_SUCCESS)
#define DN(call) ck_assert_int_eq((call), CUDNN_STATUS_SUCCESS)

/* ---- cuBLAS ---------------------------------------------------------------------------- */

static float rnd(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

/* C = alpha op(A) op(B) + beta C, column-major, straight from the
 * definition, for one transpose combination; lda etc. padded by 2. */
static void gemm_case(cublasHandle_t h, int ta, int tb, float beta)
{
    const int m = 5, n = 4, k = 3;
    int ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
    int lda = ar + 2, ldb = br + 2, ldc = m + 2;
    float A[64], B[64], C[64], out[64];
    float alpha = 0.75f;
    uint32_t s = 1234u + (uint32_t)(ta * 2 + tb);
    for (int i = 0; i < 64; i++) {
        A[i] = rnd(&s);
        B[i] = rnd(&s);
        C[i] = rnd(&s);
    }
    float *dA, *dB, *dC;
    CU(cudaMalloc((void **)&dA, sizeof A));
    CU(cudaMalloc((void **)&dB, sizeof B));
    CU(cudaMalloc((void **)&dC, sizeof C));
    CU(cudaMemcpy(dA, A, sizeof A, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(dB, B, sizeof B, cudaMemcpyHostToDevice));
    if (beta != 0.0f) /* else C keeps its NaN poison: it must not be read */
        CU(cudaMemcpy(dC, C, sizeof C, cudaMemcpyHostToDevice));
    CU(cudaDeviceSynchronize());
    BL(cublasSgemm(h, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                   tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &alpha, dA, lda,
                   dB, ldb, &beta, dC, ldc));
    CU(cudaDeviceSynchronize());
    CU(cudaMemcpy(out, dC, sizeof out, cudaMemcpyDeviceToHost));
    (void)ac;
    (void)bc;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double ref = 0;
            for (int l = 0; l < k; l++) {
                double a = ta ? A[i * lda + l] : A[l * lda + i];
                double b = tb ? B[l * ldb + j] : B[j * ldb + l];
                ref += a * b;
            }
            ref = alpha * ref + (beta != 0.0f ? beta * C[j * ldc + i] : 0.0);
            ck_assert_msg(fabs(out[j * ldc + i] - ref) <= 1e-5,
                          "op %c%c C(%d,%d) = %g, expected %g", ta ? 'T' : 'N',
                          tb ? 'T' : 'N', i, j, out[j * ldc + i], ref);
        }
    CU(cudaFree(dA));
    CU(cudaFree(dB));
    CU(cudaFree(dC));
}

START_TEST(test_sgemm_all_transposes)
{
    cublasHandle_t h;
    cudaStream_t s;
    BL(cublasCreate(&h));
    CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    BL(cublasSetStream(h, s));
    BL(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            gemm_case(h, ta, tb, 0.0f);
            gemm_case(h, ta, tb, 0.5f);
        }
    float one = 1, *d = NULL;
    ck_assert_int_eq(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one,
                                 d, 3, d, 4, &one, d, 4),
                     CUBLAS_STATUS_INVALID_VALUE); /* lda < m */
    BL(cublasDestroy(h));
    CU(cudaStreamDestroy(s));
}
END_TEST

/* ---- cuDNN convolution vs the reference layers ----------------------------------------- */

enum { N = 2, C = 3, H = 7, W = 6, K = 4, R = 3, PAD = 1, STR = 2 };
enum { OH = (H + 2 * PAD - R) / STR + 1, OW = (W + 2 * PAD - R) / STR + 1 };
#define NX (N * C * H * W)
#define NW (K * C * R * R)
#define NY (N * K * OH * OW)

typedef struct convs {
    cudnnHandle_t h;
    cudnnTensorDescriptor_t x, y, b;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t c;
    float *dx, *dw, *dy, *db, *ws;
    size_t wsb;
} convs;

static void convs_open(convs *v)
{
    DN(cudnnCreate(&v->h));
    DN(cudnnCreateTensorDescriptor(&v->x));
    DN(cudnnCreateTensorDescriptor(&v->y));
    DN(cudnnCreateTensorDescriptor(&v->b));
    DN(cudnnCreateFilterDescriptor(&v->w));
    DN(cudnnCreateConvolutionDescriptor(&v->c));
    DN(cudnnSetTensor4dDescriptor(v->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                  N, C, H, W));
    DN(cudnnSetFilter4dDescriptor(v->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW,
                                  K, C, R, R));
    DN(cudnnSetConvolution2dDescriptor(v->c, PAD, PAD, STR, STR, 1, 1,
                                       CUDNN_CROSS_CORRELATION,
                                       CUDNN_DATA_FLOAT));
    DN(cudnnSetConvolutionMathType(v->c, CUDNN_FMA_MATH));
    int n, k, oh, ow;
    DN(cudnnGetConvolution2dForwardOutputDim(v->c, v->x, v->w, &n, &k, &oh,
                                             &ow));
    ck_assert_int_eq(n * k * oh * ow, NY);
    ck_assert_int_eq(oh, OH);
    DN(cudnnSetTensor4dDescriptor(v->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                  N, K, OH, OW));
    DN(cudnnSetTensor4dDescriptor(v->b, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                  1, K, 1, 1));
    CU(cudaMalloc((void **)&v->dx, NX * sizeof(float)));
    CU(cudaMalloc((void **)&v->dw, NW * sizeof(float)));
    CU(cudaMalloc((void **)&v->dy, NY * sizeof(float)));
    CU(cudaMalloc((void **)&v->db, K * sizeof(float)));
    v->wsb = (size_t)1 << 20;
    CU(cudaMalloc((void **)&v->ws, v->wsb));
}

static void convs_close(convs *v)
{
    float *p[] = {v->dx, v->dw, v->dy, v->db, v->ws};
    for (int i = 0; i < 5; i++)
        CU(cudaFree(p[i]));
    cudnnDestroyTensorDescriptor(v->x);
    cudnnDestroyTensorDescriptor(v->y);
    cudnnDestroyTensorDescriptor(v->b);
    cudnnDestroyFilterDescriptor(v->w);
    cudnnDestroyConvolutionDescriptor(v->c);
    DN(cudnnDestroy(v->h));
}

static void put(float *d, const double *h, int n)
{
    float f[512];
    for (int i = 0; i < n; i++)
        f[i] = (float)h[i];
    CU(cudaMemcpy(d, f, (size_t)n * sizeof(float), cudaMemcpyHostToDevice));
}

static void get(const float *d, float *h, int n)
{
    CU(cudaMemcpy(h, d, (size_t)n * sizeof(float), cudaMemcpyDeviceToHost));
}

static void fill(double *a, int n, uint32_t seed)
{
    for (int i = 0; i < n; i++)
        a[i] = rnd(&seed);
}

static void close_all(const float *got, const double *ref, int n,
                      const char *what)
{
    double scale = 1e-6;
    for (int i = 0; i < n; i++)
        scale = fmax(scale, fabs(ref[i]));
    for (int i = 0; i < n; i++)
        ck_assert_msg(fabs(got[i] - ref[i]) <= 1e-5 * scale,
                      "%s[%d] = %.9g, reference %.9g", what, i, got[i],
                      ref[i]);
}

static double dot(const double *a, const double *b, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

START_TEST(test_conv_forward_matches_reference)
{
    convs v;
    double x[NX], w[NW], y[NY];
    float got[NY];
    cudnnConvolutionFwdAlgoPerf_t pf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int count = 0;
    convs_open(&v);
    fill(x, NX, 1);
    fill(w, NW, 2);
    put(v.dx, x, NX);
    put(v.dw, w, NW);
    DN(cudnnGetConvolutionForwardAlgorithm_v7(
        v.h, v.x, v.w, v.c, v.y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count,
        pf));
    ck_assert_int_ge(count, 1);
    ck_assert_int_eq(pf[0].status, CUDNN_STATUS_SUCCESS);
    ck_assert_uint_gt(pf[0].memory, 0); /* realistic: the best needs scratch */
    ck_assert_int_eq(pf[0].mathType, CUDNN_FMA_MATH);
    size_t need = 0;
    DN(cudnnGetConvolutionForwardWorkspaceSize(v.h, v.x, v.w, v.c, v.y,
                                               pf[0].algo, &need));
    ck_assert_uint_eq(need, pf[0].memory);
    float one = 1, zero = 0;
    /* too little workspace is refused */
    ck_assert_int_eq(cudnnConvolutionForward(v.h, &one, v.x, v.dx, v.w, v.dw,
                                             v.c, pf[0].algo, v.ws, need - 1,
                                             &zero, v.y, v.dy),
                     CUDNN_STATUS_BAD_PARAM);
    DN(cudnnConvolutionForward(v.h, &one, v.x, v.dx, v.w, v.dw, v.c,
                               pf[0].algo, v.ws, v.wsb, &zero, v.y, v.dy));
    get(v.dy, got, NY);
    td_ref_conv_fwd(x, N, C, H, W, w, NULL, K, R, STR, PAD, y, OH, OW);
    close_all(got, y, NY, "y");
    convs_close(&v);
}
END_TEST

/* dx_i = sum_o dy_o d y_o / d x_i: the reference forward of a unit
 * vector (the convolution is linear in x and in w); beta = 1 adds. */
START_TEST(test_conv_backward_matches_reference)
{
    convs v;
    static double x[NX], w[NW], dy[NY], dx0[NX], e[NX > NW ? NX : NW],
        y[NY], ref[NX];
    float got[NX];
    float one = 1, zero = 0;
    convs_open(&v);
    fill(x, NX, 3);
    fill(w, NW, 4);
    fill(dy, NY, 5);
    fill(dx0, NX, 6);
    put(v.dw, w, NW);
    put(v.dy, dy, NY);
    put(v.dx, dx0, NX);
    DN(cudnnConvolutionBackwardData(v.h, &one, v.w, v.dw, v.y, v.dy, v.c,
                                    CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, v.ws,
                                    v.wsb, &one, v.x, v.dx));
    get(v.dx, got, NX);
    for (int i = 0; i < NX; i++) {
        memset(e, 0, sizeof e);
        e[i] = 1;
        td_ref_conv_fwd(e, N, C, H, W, w, NULL, K, R, STR, PAD, y, OH, OW);
        ref[i] = dx0[i] + dot(y, dy, NY);
    }
    close_all(got, ref, NX, "dx");
    /* filter gradient, overwritten (beta = 0 on NaN-free memory) */
    put(v.dx, x, NX);
    DN(cudnnConvolutionBackwardFilter(v.h, &one, v.x, v.dx, v.y, v.dy, v.c,
                                      CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1,
                                      v.ws, v.wsb, &zero, v.w, v.dw));
    get(v.dw, got, NW);
    for (int j = 0; j < NW; j++) {
        memset(e, 0, sizeof e);
        e[j] = 1;
        td_ref_conv_fwd(x, N, C, H, W, e, NULL, K, R, STR, PAD, y, OH, OW);
        ref[j] = dot(y, dy, NY);
    }
    close_all(got, ref, NW, "dw");
    /* bias gradient: the reference forward with a unit bias */
    DN(cudnnConvolutionBackwardBias(v.h, &one, v.y, v.dy, &zero, v.b, v.db));
    get(v.db, got, K);
    for (int k = 0; k < K; k++) {
        double b[K] = {0};
        b[k] = 1;
        memset(e, 0, sizeof e);
        td_ref_conv_fwd(e, N, C, H, W, w, b, K, R, STR, PAD, y, OH, OW);
        ref[k] = dot(y, dy, NY);
    }
    close_all(got, ref, K, "db");
    convs_close(&v);
}
END_TEST

static Suite *sim_libs_suite(void)
{
    Suite *s = suite_create("sim_libs");
    TCase *tc = tcase_create("cublas");
    tcase_add_test(tc, test_sgemm_all_transposes);
    suite_add_tcase(s, tc);
    tc = tcase_create("cudnn");
    tcase_add_test(tc, test_conv_forward_matches_reference);
    tcase_add_test(tc, test_conv_backward_matches_reference);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(sim_libs_suite)
