/* sim_cublas.c - the simulated cuBLAS: handles and Sgemm.
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
 * Never does: anything but these calls; sums in double (the real library
 * sums in float in an unspecified order, fp32 accumulators in TF32 mode
 * too).
 */
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>

#include "sim_int.h"
#include "tf32.h"

struct cublasContext {
    int dev;
    cudaStream_t s;
    void *ws;
    size_t ws_bytes;
    cublasMath_t math;
};

cublasStatus_t cublasCreate(cublasHandle_t *h)
{
    int n = 0;
    if (!h)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    td__sim_lock();
    cudaError_t e = td__sim_gate();
    int dev = td__sim_cur();
    td__sim_unlock();
    if (e != cudaSuccess)
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

typedef struct td__gemm {
    int ta, tb, m, n, k, lda, ldb, ldc;
    int tf32;
    float alpha, beta;
    const float *A, *B;
    float *C;
} td__gemm;

/* Element (i, j) of op(X) for X stored column-major with leading dim ld,
 * as a tensor core in TF32 math reads it when tf32. */
static float td__op(const float *X, int ld, int t, int i, int j, int tf32)
{
    float v = t ? X[(size_t)i * ld + j] : X[(size_t)j * ld + i];
    return tf32 ? td_tf32_round(v) : v;
}

static void td__gemm_run(void *p)
{
    td__gemm *g = p;
    for (int j = 0; j < g->n; j++)
        for (int i = 0; i < g->m; i++) {
            double acc = 0;
            for (int l = 0; g->alpha != 0.0f && l < g->k; l++)
                acc += (double)td__op(g->A, g->lda, g->ta, i, l, g->tf32) *
                       td__op(g->B, g->ldb, g->tb, l, j, g->tf32);
            float *c = &g->C[(size_t)j * g->ldc + i];
            double v = (double)g->alpha * acc;
            if (g->beta != 0.0f)
                v += (double)g->beta * *c;
            *c = (float)v;
        }
}

/* Bytes spanned by a column-major rows x cols matrix with leading dim ld. */
static size_t td__span(int rows, int cols, int ld)
{
    if (rows == 0 || cols == 0)
        return 0;
    return ((size_t)(cols - 1) * ld + rows) * sizeof(float);
}

cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta,
                           cublasOperation_t tb, int m, int n, int k,
                           const float *alpha, const float *A, int lda,
                           const float *B, int ldb, const float *beta,
                           float *C, int ldc)
{
    const void *caller = __builtin_return_address(0);
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
        td__sim_say("cublasSgemm: handle of device %d used while device %d "
                    "is current", h->dev, cur);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (m == 0 || n == 0)
        return CUBLAS_STATUS_SUCCESS;
    td__gemm *g = malloc(sizeof *g);
    if (!g)
        return CUBLAS_STATUS_ALLOC_FAILED;
    int tf32 = (h->math & 15) == CUBLAS_TF32_TENSOR_OP_MATH &&
               td__sim_cc(h->dev) >= 80;
    *g = (td__gemm){tA, tB, m, n, k, lda, ldb, ldc, tf32, *alpha, *beta, A,
                    B, C};
    td_sim_range r[4];
    int nr = 0;
    if (k > 0) {
        r[nr++] = (td_sim_range){A, td__span(arows, acols, lda), 0};
        r[nr++] = (td_sim_range){B, td__span(brows, bcols, ldb), 0};
    }
    r[nr++] = (td_sim_range){C, td__span(m, n, ldc), 1};
    for (int i = 0; i + 1 < nr; i++) {
        const char *p = r[i].p, *c = (const char *)C;
        if (p < c + r[nr - 1].bytes && c < p + r[i].bytes) {
            /* cuBLAS documents no in-place GEMM: C is written while A
             * and B are read */
            td__sim_say("cublasSgemm: C (%p, %zu bytes) overlaps %s (%p, "
                        "%zu bytes)", (const void *)C, r[nr - 1].bytes,
                        i ? "B" : "A", r[i].p, r[i].bytes);
            free(g);
            return CUBLAS_STATUS_INVALID_VALUE;
        }
    }
    if (h->ws_bytes)
        r[nr++] = (td_sim_range){h->ws, h->ws_bytes, 1};
    cudaError_t e = td_sim_submit(h->s, "cublasSgemm", td__gemm_run, free, g,
                                  r, nr, caller);
    if (e == cudaSuccess)
        td__sim_math_count(1, (int)h->math, tf32);
    if (e == cudaErrorInvalidValue)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (e == cudaErrorMemoryAllocation) /* td_sim_oom_launch_in */
        return CUBLAS_STATUS_ALLOC_FAILED;
    return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS
                            : CUBLAS_STATUS_EXECUTION_FAILED;
}
