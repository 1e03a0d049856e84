/* sim_cublas.c - the simulated cuBLAS: handles, Sgemm and GemmEx.
 *
 * Owns: cublasCreate/Destroy/SetStream/GetStream/SetMathMode/SetWorkspace
 * and cublasSgemm exactly as documented: column-major,
 *   C = alpha * op(A) * op(B) + beta * C,   op(A) m x k, op(B) k x n,
 * A with leading dimension lda >= max(1, rows of A as stored), likewise B
 * and C (ldc >= max(1, m)); when beta is 0, C is not read (it may hold
 * NaN), and when alpha is 0 neither are A and B.  Scalars are read at
 * the call (host pointer mode).  The handle's workspace
 * (cublasSetWorkspace) counts as written by every GEMM, so the race
 * detector sees a workspace shared between streams.
 * The handle's math mode decides the numerics: CUBLAS_TF32_TENSOR_OP_MATH
 * on a device of compute capability 8.0 or newer rounds every A and B
 * element to TF32 (kernels/tf32.h: 10 mantissa bits, to nearest even)
 * before the products, as tensor cores read fp32 inputs; any other mode,
 * or an older device (no TF32 units), computes on the fp32 values.  Every
 * GEMM is counted by its mode (td_sim_blas_gemms, td_sim_blas_tf32).
 * C overlapping A or B is refused (CUBLAS_STATUS_INVALID_VALUE, with a
 * diagnostic): cuBLAS documents no in-place GEMM.
 * cublasGemmEx takes the combinations of the documented table the backend
 * can use with computeType CUBLAS_COMPUTE_32F (or _32F_PEDANTIC): A and B
 * both CUDA_R_32F, CUDA_R_16F or CUDA_R_16BF, C the same type or
 * CUDA_R_32F (fp32 C with 32F inputs only); every other combination,
 * computeType and algorithm is CUBLAS_STATUS_NOT_SUPPORTED /
 * INVALID_VALUE with a diagnostic; bf16 needs compute capability 8.0
 * here (stricter than cuBLAS, which emulates it on older GPUs).  16-bit
 * elements are read exactly (kernels/bf16.h, fp16.h), products summed as
 * below and the result rounded to C's type when C is 16-bit.  GemmEx
 * calls are counted by their inputs' type (td_sim_blas_typed).
 * Never does: anything but these calls; sums in double (the real library
 * sums in float in an unspecified order, fp32 accumulators in TF32 mode
 * too).
 */
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>

#include "sim_blas_int.h"

struct cublasContext {
    int dev;
    cudaStream_t s;
    void *ws;
    size_t ws_bytes;
    cublasMath_t math;
};

cublasStatus_t cublasCreate(cublasHandle_t *h)
{
    int dev;
    if (!h)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (td__sim_blas_open(&dev) != 0)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    struct cublasContext *c = calloc(1, sizeof *c);
    if (!c)
        return CUBLAS_STATUS_ALLOC_FAILED;
    c->dev = dev;
    *h = c;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t h)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    free(h);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    h->s = s;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetStream(cublasHandle_t h, cudaStream_t *s)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!s)
        return CUBLAS_STATUS_INVALID_VALUE;
    *s = h->s;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    h->math = m;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void *ws, size_t bytes)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (bytes && !ws)
        return CUBLAS_STATUS_INVALID_VALUE;
    h->ws = ws;
    h->ws_bytes = bytes;
    return CUBLAS_STATUS_SUCCESS;
}

/* Element types: fp32, bf16, fp16 (cudaDataType CUDA_R_32F, _16BF, _16F). */
typedef struct td__gemm {
    int ta, tb, m, n, k, lda, ldb, ldc;
    int tf32;
    int at, ct;               /* A's and B's type, C's type */
    float alpha, beta;
    const void *A, *B;
    void *C;
} td__gemm;

static void td__gemm_run(void *p)
{
    td__gemm *g = p;
    for (int j = 0; j < g->n; j++)
        for (int i = 0; i < g->m; i++) {
            double acc = 0;
            for (int l = 0; g->alpha != 0.0f && l < g->k; l++)
                acc += (double)td__op(g->A, g->at, g->lda, g->ta, i, l,
                                      g->tf32) *
                       td__op(g->B, g->at, g->ldb, g->tb, l, j, g->tf32);
            size_t c = (size_t)j * g->ldc + i;
            double v = (double)g->alpha * acc;
            if (g->beta != 0.0f)
                v += (double)g->beta * td__ld(g->C, g->ct, c);
            td__st(g->C, g->ct, c, (float)v);
        }
}

/* Bytes spanned by a column-major rows x cols matrix with leading dim ld
 * of elements of type t. */
static size_t td__span(int rows, int cols, int ld, int t)
{
    if (rows == 0 || cols == 0)
        return 0;
    return ((size_t)(cols - 1) * ld + rows) * td__esize(t);
}

/* GEMMs by their inputs' type (td_sim_blas_typed). */
static long td__typed[3];

long td_sim_blas_typed(int t)
{
    return t >= 0 && t < 3 ? __atomic_load_n(&td__typed[t], __ATOMIC_RELAXED)
                           : 0;
}

static cublasStatus_t td__gemm_submit(cublasHandle_t h, const char *call,
                                      cublasOperation_t ta,
                                      cublasOperation_t tb, int m, int n,
                                      int k, const float *alpha,
                                      const void *A, int at, int lda,
                                      const void *B, int ldb,
                                      const float *beta, void *C, int ct,
                                      int ldc, const void *caller);

void td__sim_blas_count(int math, int tf32, int at)
{
    td__sim_math_count(1, math, tf32);
    __atomic_add_fetch(&td__typed[at], 1, __ATOMIC_RELAXED);
}

cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta,
                           cublasOperation_t tb, int m, int n, int k,
                           const float *alpha, const float *A, int lda,
                           const float *B, int ldb, const float *beta,
                           float *C, int ldc)
{
    return td__gemm_submit(h, "cublasSgemm", ta, tb, m, n, k, alpha, A,
                           TD__F32, lda, B, ldb, beta, C, TD__F32, ldc,
                           __builtin_return_address(0));
}

static int td__blas_type(cudaDataType t)
{
    return t == CUDA_R_32F ? TD__F32 : t == CUDA_R_16BF ? TD__BF16
                           : t == CUDA_R_16F ? TD__F16 : -1;
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta,
                            cublasOperation_t tb, int m, int n, int k,
                            const void *alpha, const void *A,
                            cudaDataType Atype, int lda, const void *B,
                            cudaDataType Btype, int ldb, const void *beta,
                            void *C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t compute,
                            cublasGemmAlgo_t algo)
{
    int at = td__blas_type(Atype), ct = td__blas_type(Ctype);
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (compute != CUBLAS_COMPUTE_32F &&
        compute != CUBLAS_COMPUTE_32F_PEDANTIC) {
        td__sim_say("cublasGemmEx: computeType %d: the simulator takes "
                    "CUBLAS_COMPUTE_32F (fp32 accumulation) only", compute);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (at < 0 || Atype != Btype || ct < 0 ||
        (ct != at && ct != TD__F32)) {
        td__sim_say("cublasGemmEx: types A %d, B %d, C %d are not a "
                    "combination cuBLAS documents for CUBLAS_COMPUTE_32F "
                    "(A = B in 32F, 16F or 16BF; C = A's type or 32F)",
                    (int)Atype, (int)Btype, (int)Ctype);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (algo != CUBLAS_GEMM_DEFAULT && algo != CUBLAS_GEMM_DEFAULT_TENSOR_OP) {
        td__sim_say("cublasGemmEx: algorithm %d: the simulator takes "
                    "CUBLAS_GEMM_DEFAULT only", (int)algo);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (at == TD__BF16 && td__sim_cc(h->dev) < 80) {
        td__sim_say("cublasGemmEx: CUDA_R_16BF on a device of compute "
                    "capability %d.%d: the simulator asks for 8.0 (bf16 "
                    "tensor cores)", td__sim_cc(h->dev) / 10,
                    td__sim_cc(h->dev) % 10);
        return CUBLAS_STATUS_ARCH_MISMATCH;
    }
    return td__gemm_submit(h, "cublasGemmEx", ta, tb, m, n, k, alpha, A, at,
                           lda, B, ldb, beta, C, ct, ldc,
                           __builtin_return_address(0));
}

static cublasStatus_t td__gemm_submit(cublasHandle_t h, const char *call,
                                      cublasOperation_t ta,
                                      cublasOperation_t tb, int m, int n,
                                      int k, const float *alpha,
                                      const void *A, int at, int lda,
                                      const void *B, int ldb,
                                      const float *beta, void *C, int ct,
                                      int ldc, const void *caller)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    int tA = ta != CUBLAS_OP_N, tB = tb != CUBLAS_OP_N;
    int arows = tA ? k : m, acols = tA ? m : k;
    int brows = tB ? n : k, bcols = tB ? k : n;
    if ((ta != CUBLAS_OP_N && ta != CUBLAS_OP_T) ||
        (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T) || m < 0 || n < 0 ||
        k < 0 || lda < (arows > 1 ? arows : 1) ||
        ldb < (brows > 1 ? brows : 1) || ldc < (m > 1 ? m : 1) || !alpha ||
        !beta)
        return CUBLAS_STATUS_INVALID_VALUE;
    td__sim_lock();
    int cur = td__sim_cur();
    td__sim_unlock();
    if (cur != h->dev) {
        td__sim_say("%s: handle of device %d used while device %d is "
                    "current", call, h->dev, cur);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (m == 0 || n == 0)
        return CUBLAS_STATUS_SUCCESS;
    td__gemm *g = malloc(sizeof *g);
    if (!g)
        return CUBLAS_STATUS_ALLOC_FAILED;
    /* TF32 rounds fp32 inputs only: 16-bit ones are exact in a tensor core */
    int tf32 = (h->math & 15) == CUBLAS_TF32_TENSOR_OP_MATH &&
               td__sim_cc(h->dev) >= 80 && at == TD__F32;
    *g = (td__gemm){tA, tB, m, n, k, lda, ldb, ldc, tf32, at, ct, *alpha,
                    *beta, A, B, C};
    td_sim_range r[4];
    int nr = 0;
    if (k > 0) {
        r[nr++] = (td_sim_range){A, td__span(arows, acols, lda, at), 0};
        r[nr++] = (td_sim_range){B, td__span(brows, bcols, ldb, at), 0};
    }
    r[nr++] = (td_sim_range){C, td__span(m, n, ldc, ct), 1};
    for (int i = 0; i + 1 < nr; i++) {
        const char *p = r[i].p, *c = (const char *)C;
        if (p < c + r[nr - 1].bytes && c < p + r[i].bytes) {
            /* cuBLAS documents no in-place GEMM: C is written while A
             * and B are read */
            td__sim_say("%s: C (%p, %zu bytes) overlaps %s (%p, %zu "
                        "bytes)", call, (const void *)C, r[nr - 1].bytes,
                        i ? "B" : "A", r[i].p, r[i].bytes);
            free(g);
            return CUBLAS_STATUS_INVALID_VALUE;
        }
    }
    if (h->ws_bytes)
        r[nr++] = (td_sim_range){h->ws, h->ws_bytes, 1};
    cudaError_t e = td_sim_submit(h->s, call, td__gemm_run, free, g, r, nr,
                                  caller);
    if (e == cudaSuccess)
        td__sim_blas_count((int)h->math, tf32, at);
    if (e == cudaErrorInvalidValue)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (e == cudaErrorMemoryAllocation) /* td_sim_oom_launch_in */
        return CUBLAS_STATUS_ALLOC_FAILED;
    return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS
                            : CUBLAS_STATUS_EXECUTION_FAILED;
}
