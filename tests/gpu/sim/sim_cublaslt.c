/* sim_cublaslt.c - the simulated cuBLASLt: the subset the CUDA backend's
 * dense layers use (lib/backend/cuda/cuda_blaslt.c).
 *
 * Owns: cublasLtCreate/Destroy; matmul descriptors (compute type, scale
 * type, TRANSA/TRANSB, pointer mode, EPILOGUE, BIAS_POINTER,
 * BIAS_DATA_TYPE; set and get); matrix layouts (type, rows, cols, ld:
 * column-major, no batches); preferences (MAX_WORKSPACE_BYTES,
 * MIN_ALIGNMENT_{A,B,C,D}_BYTES); cublasLtMatmulAlgoGetHeuristic, which
 * returns one algorithm; cublasLtMatmul through the stream path
 * (td_sim_submit: the race detector, stream capture, the out-of-memory
 * injection see it like any cuBLAS call).
 * Numerics, as sim_cublas.c's GEMMs:
 *   D = epilogue(alpha * op(A) op(B) + beta * C)
 * products summed in double, the sum rounded to float (the fp32
 * accumulator), CUBLAS_COMPUTE_32F_FAST_TF32 rounding fp32 A and B to
 * TF32 first (kernels/tf32.h), 16-bit inputs read exactly; then the
 * epilogue in float: BIAS adds bias[row] (D's rows: the vector's length
 * is D's row count, broadcast over the columns, added after the scaling
 * as cublasLt.h defines it), RELU_BIAS adds it then takes max(x, 0),
 * RELU that alone (as documented, x := max(x, 0): a NaN becomes 0, an
 * assumption: cuDNN's ReLU with CUDNN_PROPAGATE_NAN keeps it), and D is
 * rounded to its type.  BGRADA /
 * BGRADB write the bias gradient: per row of op(A) / per column of op(B)
 * the sum over the GEMM's k of the elements as stored (no TF32 rounding:
 * an assumption, see docs/cuda.md), in double, rounded to float, stored
 * in the bias type.  When beta is 0, C is not read.
 * Strict refusals (each with a diagnostic), stricter than the library
 * where the documentation is silent: compute types other than 32F,
 * 32F_PEDANTIC and 32F_FAST_TF32 (FAST_TF32 with fp32 A and B only, and
 * only on compute capability 8.0+), a scale type other than CUDA_R_32F,
 * type combinations outside GemmEx's (A = B in 32F, 16F or 16BF; C = D
 * in A's type or 32F), bf16 below 8.0, device pointer mode, layouts
 * whose shapes do not make a GEMM, C's layout other than D's, epilogues
 * other than DEFAULT, BIAS, RELU, RELU_BIAS, BGRADA and BGRADB (no AUX
 * outputs, no GELU), a bias type other than
 * D's (cublasLt.h: the bias and the bias gradient are in the output
 * type, but for IMMA and fp8 kernels), an epilogue without its bias
 * pointer, a bias gradient with alpha other than 1 (the documentation
 * does not say whether alpha scales it), a matmul descriptor changed
 * since the algorithm was chosen (epilogue, compute type), a pointer
 * less aligned than the algorithm was chosen for (the preference's
 * MIN_ALIGNMENT, 256 bytes by default; the bias pointer's alignment at
 * the heuristic), a workspace smaller than the algorithm's, and D
 * overlapping A or B (or C unless C is D), the bias gradient
 * overlapping any matrix.
 * Never does: batches, other epilogues (GELU, AUX, DRELU), IMMA or fp8,
 * layout attributes (ORDER, BATCH_COUNT), several algorithms.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>

#include "sim_blas_int.h"
#include "sim_lt.h"

#define TD__LT_MAGIC 0x4c7453696dULL /* "LtSim" */
/* what the simulated algorithm asks for when the preference allows it
 * (a split-k reduction's scratch on the real library) */
#define TD__LT_ALGO_WS ((size_t)1 << 20)

struct cublasLtContext {
    int dev;
};

typedef struct td__ltop {
    uint64_t magic;
    int32_t compute, scale, pmode, ta, tb, bias_type;
    uint32_t epi;
    const void *bias;
} td__ltop;

typedef struct td__ltlay {
    uint64_t magic;
    int32_t type;
    uint64_t rows, cols;
    int64_t ld;
} td__ltlay;

typedef struct td__ltpref {
    uint64_t magic;
    uint64_t max_ws;
    uint32_t align[4]; /* A, B, C, D */
} td__ltpref;

/* ---- counters and the test switch (sim_lt.h) ---- */

/* matmuls by epilogue: DEFAULT, BIAS, BGRADA/B, RELU_BIAS, RELU */
static long td__lt_runs[5], td__lt_all;
static int td__lt_none;

static int td__epi_slot(int epi)
{
    return epi == CUBLASLT_EPILOGUE_BIAS        ? 1
           : epi == CUBLASLT_EPILOGUE_BGRADA ||
                   epi == CUBLASLT_EPILOGUE_BGRADB ? 2
           : epi == CUBLASLT_EPILOGUE_RELU_BIAS   ? 3
           : epi == CUBLASLT_EPILOGUE_RELU        ? 4 : 0;
}

long td_sim_blaslt_matmuls(int epi)
{
    if (epi < 0)
        return __atomic_load_n(&td__lt_all, __ATOMIC_RELAXED);
    return __atomic_load_n(&td__lt_runs[td__epi_slot(epi)],
                           __ATOMIC_RELAXED);
}

void td_sim_blaslt_no_algo(int on)
{
    __atomic_store_n(&td__lt_none, on, __ATOMIC_RELAXED);
}

/* ---- handle, descriptors ---- */

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h)
{
    int dev;
    if (!h)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (td__sim_blas_open(&dev) != 0)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    struct cublasLtContext *c = calloc(1, sizeof *c);
    if (!c)
        return CUBLAS_STATUS_ALLOC_FAILED;
    c->dev = dev;
    *h = c;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t h)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    free(h);
    return CUBLAS_STATUS_SUCCESS;
}

/* A descriptor's Destroy: CUBLAS_STATUS_INVALID_VALUE for no live
 * descriptor (d NULL), else its magic cleared (a later use is refused)
 * and d freed. */
static cublasStatus_t td__lt_destroy(void *d, uint64_t *magic)
{
    if (!d)
        return CUBLAS_STATUS_INVALID_VALUE;
    *magic = 0;
    free(d);
    return CUBLAS_STATUS_SUCCESS;
}

static td__ltop *td__op_of(cublasLtMatmulDesc_t d)
{
    td__ltop *o = (td__ltop *)(void *)d;
    return o && o->magic == TD__LT_MAGIC ? o : NULL;
}

static td__ltlay *td__lay_of(cublasLtMatrixLayout_t l)
{
    td__ltlay *y = (td__ltlay *)(void *)l;
    return y && y->magic == TD__LT_MAGIC ? y : NULL;
}

static td__ltpref *td__pref_of(cublasLtMatmulPreference_t p)
{
    td__ltpref *r = (td__ltpref *)(void *)p;
    return r && r->magic == TD__LT_MAGIC ? r : NULL;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d,
                                        cublasComputeType_t compute,
                                        cudaDataType_t scale)
{
    if (!d)
        return CUBLAS_STATUS_INVALID_VALUE;
    td__ltop *o = calloc(1, sizeof *o);
    if (!o)
        return CUBLAS_STATUS_ALLOC_FAILED;
    *o = (td__ltop){TD__LT_MAGIC, (int32_t)compute, (int32_t)scale,
                    CUBLASLT_POINTER_MODE_HOST, CUBLAS_OP_N, CUBLAS_OP_N, -1,
                    CUBLASLT_EPILOGUE_DEFAULT, NULL};
    *d = (cublasLtMatmulDesc_t)(void *)o;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d)
{
    td__ltop *o = td__op_of(d);
    return td__lt_destroy(o, o ? &o->magic : NULL);
}

/* Where attribute a lives in o and its size; NULL: not simulated. */
static void *td__attr(td__ltop *o, cublasLtMatmulDescAttributes_t a,
                      size_t *size)
{
    *size = sizeof(int32_t);
    switch (a) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: return &o->compute;
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE: return &o->scale;
    case CUBLASLT_MATMUL_DESC_POINTER_MODE: return &o->pmode;
    case CUBLASLT_MATMUL_DESC_TRANSA: return &o->ta;
    case CUBLASLT_MATMUL_DESC_TRANSB: return &o->tb;
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return &o->bias_type;
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
        *size = sizeof(uint32_t);
        return &o->epi;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
        *size = sizeof(void *);
        return &o->bias;
    default:
        return NULL;
    }
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d,
                                              cublasLtMatmulDescAttributes_t a,
                                              const void *buf, size_t bytes)
{
    td__ltop *o = td__op_of(d);
    size_t size;
    void *p = o ? td__attr(o, a, &size) : NULL;
    if (!o || !buf)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (!p) {
        td__sim_say("cublasLtMatmulDescSetAttribute: attribute %d is not "
                    "simulated", (int)a);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (bytes != size) {
        td__sim_say("cublasLtMatmulDescSetAttribute: attribute %d takes %zu "
                    "bytes, not %zu", (int)a, size, bytes);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    memcpy(p, buf, size);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t d,
                                              cublasLtMatmulDescAttributes_t a,
                                              void *buf, size_t bytes,
                                              size_t *written)
{
    td__ltop *o = td__op_of(d);
    size_t size;
    void *p = o ? td__attr(o, a, &size) : NULL;
    if (!o || !p)
        return o ? CUBLAS_STATUS_NOT_SUPPORTED : CUBLAS_STATUS_INVALID_VALUE;
    if (bytes == 0) {
        if (!written)
            return CUBLAS_STATUS_INVALID_VALUE;
        *written = size;
        return CUBLAS_STATUS_SUCCESS;
    }
    if (!buf || bytes != size)
        return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(buf, p, size);
    if (written)
        *written = size;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l,
                                          cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld)
{
    if (!l)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (ld < (int64_t)(rows > 1 ? rows : 1)) {
        td__sim_say("cublasLtMatrixLayoutCreate: ld %lld < rows %llu "
                    "(column-major)", (long long)ld,
                    (unsigned long long)rows);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    td__ltlay *y = calloc(1, sizeof *y);
    if (!y)
        return CUBLAS_STATUS_ALLOC_FAILED;
    *y = (td__ltlay){TD__LT_MAGIC, (int32_t)type, rows, cols, ld};
    *l = (cublasLtMatrixLayout_t)(void *)y;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l)
{
    td__ltlay *y = td__lay_of(l);
    return td__lt_destroy(y, y ? &y->magic : NULL);
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p)
{
    if (!p)
        return CUBLAS_STATUS_INVALID_VALUE;
    td__ltpref *r = calloc(1, sizeof *r);
    if (!r)
        return CUBLAS_STATUS_ALLOC_FAILED;
    *r = (td__ltpref){TD__LT_MAGIC, 0, {256, 256, 256, 256}};
    *p = (cublasLtMatmulPreference_t)(void *)r;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p)
{
    td__ltpref *r = td__pref_of(p);
    return td__lt_destroy(r, r ? &r->magic : NULL);
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(
    cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t a,
    const void *buf, size_t bytes)
{
    td__ltpref *r = td__pref_of(p);
    if (!r || !buf)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (a == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) {
        if (bytes != sizeof(uint64_t))
            return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&r->max_ws, buf, bytes);
        return CUBLAS_STATUS_SUCCESS;
    }
    int i = a == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES   ? 0
            : a == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES ? 1
            : a == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES ? 2
            : a == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES ? 3 : -1;
    if (i < 0) {
        td__sim_say("cublasLtMatmulPreferenceSetAttribute: attribute %d is "
                    "not simulated", (int)a);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (bytes != sizeof(uint32_t))
        return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(&r->align[i], buf, bytes);
    return CUBLAS_STATUS_SUCCESS;
}

/* ---- the operation's validity ---- */

static int td__lt_type(int32_t t)
{
    return t == CUDA_R_32F ? TD__F32 : t == CUDA_R_16BF ? TD__BF16
                           : t == CUDA_R_16F ? TD__F16 : -1;
}

/* The GEMM a descriptor and its layouts describe. */
typedef struct td__ltshape {
    int m, n, k, at, ct, tf32;
} td__ltshape;

static int td__epi_known(uint32_t e)
{
    return e == CUBLASLT_EPILOGUE_DEFAULT || e == CUBLASLT_EPILOGUE_BIAS ||
           e == CUBLASLT_EPILOGUE_RELU || e == CUBLASLT_EPILOGUE_RELU_BIAS ||
           e == CUBLASLT_EPILOGUE_BGRADA || e == CUBLASLT_EPILOGUE_BGRADB;
}

/* CUBLAS_STATUS_SUCCESS and the shape, or a refusal said. */
static cublasStatus_t td__check(cublasLtHandle_t h, const char *call,
                                const td__ltop *o, const td__ltlay *A,
                                const td__ltlay *B, const td__ltlay *C,
                                const td__ltlay *D, td__ltshape *s)
{
    if (!h || !o || !A || !B || !C || !D)
        return !h ? CUBLAS_STATUS_NOT_INITIALIZED
                  : CUBLAS_STATUS_INVALID_VALUE;
    int at = td__lt_type(A->type), ct = td__lt_type(D->type);
    int cc = td__sim_cc(h->dev);
    if (o->compute != CUBLAS_COMPUTE_32F &&
        o->compute != CUBLAS_COMPUTE_32F_PEDANTIC &&
        o->compute != CUBLAS_COMPUTE_32F_FAST_TF32) {
        td__sim_say("%s: compute type %d: the simulator takes "
                    "CUBLAS_COMPUTE_32F, _32F_PEDANTIC, _32F_FAST_TF32",
                    call, (int)o->compute);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (o->scale != CUDA_R_32F) {
        td__sim_say("%s: scale type %d with an fp32 compute type: cuBLASLt "
                    "documents CUDA_R_32F", call, (int)o->scale);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (at < 0 || B->type != A->type || ct < 0 || C->type != D->type ||
        (ct != at && ct != TD__F32)) {
        td__sim_say("%s: types A %d, B %d, C %d, D %d are not a combination "
                    "cuBLASLt documents for CUBLAS_COMPUTE_32F (A = B in "
                    "32F, 16F or 16BF; C = D in A's type or 32F)", call,
                    (int)A->type, (int)B->type, (int)C->type, (int)D->type);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (o->compute == CUBLAS_COMPUTE_32F_FAST_TF32 && at != TD__F32) {
        td__sim_say("%s: CUBLAS_COMPUTE_32F_FAST_TF32 with 16-bit A and B: "
                    "TF32 is for fp32 inputs", call);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if ((at == TD__BF16 || o->compute == CUBLAS_COMPUTE_32F_FAST_TF32) &&
        cc < 80) {
        td__sim_say("%s: %s on a device of compute capability %d.%d: the "
                    "simulator asks for 8.0", call, at == TD__BF16
                    ? "CUDA_R_16BF" : "CUBLAS_COMPUTE_32F_FAST_TF32",
                    cc / 10, cc % 10);
        return CUBLAS_STATUS_ARCH_MISMATCH;
    }
    if (o->pmode != CUBLASLT_POINTER_MODE_HOST) {
        td__sim_say("%s: pointer mode %d: the simulator reads alpha and "
                    "beta from host memory only", call, (int)o->pmode);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    int tA = o->ta != CUBLAS_OP_N, tB = o->tb != CUBLAS_OP_N;
    if ((o->ta != CUBLAS_OP_N && o->ta != CUBLAS_OP_T) ||
        (o->tb != CUBLAS_OP_N && o->tb != CUBLAS_OP_T))
        return CUBLAS_STATUS_INVALID_VALUE;
    uint64_t m = tA ? A->cols : A->rows, k = tA ? A->rows : A->cols;
    uint64_t kb = tB ? B->cols : B->rows, n = tB ? B->rows : B->cols;
    if (k != kb || D->rows != m || D->cols != n || C->rows != D->rows ||
        C->cols != D->cols || C->ld != D->ld || m > INT32_MAX ||
        n > INT32_MAX || k > INT32_MAX) {
        td__sim_say("%s: layouts A %llux%llu%s, B %llux%llu%s, C %llux%llu "
                    "ld %lld, D %llux%llu ld %lld make no GEMM", call,
                    (unsigned long long)A->rows, (unsigned long long)A->cols,
                    tA ? " (T)" : "", (unsigned long long)B->rows,
                    (unsigned long long)B->cols, tB ? " (T)" : "",
                    (unsigned long long)C->rows, (unsigned long long)C->cols,
                    (long long)C->ld, (unsigned long long)D->rows,
                    (unsigned long long)D->cols, (long long)D->ld);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (!td__epi_known(o->epi)) {
        td__sim_say("%s: epilogue %u: the simulator implements DEFAULT, "
                    "BIAS, RELU, RELU_BIAS, BGRADA and BGRADB", call,
                    (unsigned)o->epi);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (o->epi != CUBLASLT_EPILOGUE_DEFAULT &&
        o->epi != CUBLASLT_EPILOGUE_RELU && o->bias_type != -1 &&
        o->bias_type != D->type) {
        td__sim_say("%s: bias type %d with D of type %d: cuBLASLt documents "
                    "the bias (and bias gradient) in D's type but for IMMA "
                    "and fp8 kernels", call, (int)o->bias_type,
                    (int)D->type);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    *s = (td__ltshape){(int)m, (int)n, (int)k, at, ct,
                       o->compute == CUBLAS_COMPUTE_32F_FAST_TF32};
    return CUBLAS_STATUS_SUCCESS;
}

static uint32_t td__align_of(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    if (!a)
        return 256;
    a &= -a;
    return a > 256 ? 256 : (uint32_t)a;
}

/* The algorithm: data[0] magic, [1] workspace, [2..5] alignment assumed
 * for A, B, C, D, [6] the epilogue, [7] the compute type and the bias
 * pointer's alignment. */
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a,
    cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
    cublasLtMatrixLayout_t dd, cublasLtMatmulPreference_t p, int want,
    cublasLtMatmulHeuristicResult_t res[], int *got)
{
    const char *call = "cublasLtMatmulAlgoGetHeuristic";
    td__ltop *o = td__op_of(d);
    td__ltpref *r = td__pref_of(p);
    td__ltshape s;
    if (want <= 0 || !res || !got || !r)
        return CUBLAS_STATUS_INVALID_VALUE;
    *got = 0;
    cublasStatus_t st = td__check(h, call, o, td__lay_of(a), td__lay_of(b),
                                  td__lay_of(c), td__lay_of(dd), &s);
    if (st != CUBLAS_STATUS_SUCCESS)
        return st;
    if (__atomic_load_n(&td__lt_none, __ATOMIC_RELAXED))
        return CUBLAS_STATUS_NOT_SUPPORTED; /* td_sim_blaslt_no_algo */
    memset(&res[0], 0, sizeof res[0]);
    size_t ws = r->max_ws >= TD__LT_ALGO_WS ? TD__LT_ALGO_WS : 0;
    uint64_t *q = res[0].algo.data;
    q[0] = TD__LT_MAGIC;
    q[1] = ws;
    for (int i = 0; i < 4; i++)
        q[2 + i] = r->align[i] ? r->align[i] : 1;
    q[6] = o->epi;
    q[7] = (uint64_t)(uint32_t)o->compute << 32 | td__align_of(o->bias);
    res[0].workspaceSize = ws;
    res[0].state = CUBLAS_STATUS_SUCCESS;
    res[0].wavesCount = 1.0f;
    *got = 1;
    return CUBLAS_STATUS_SUCCESS;
}

/* ---- the matmul ---- */

typedef struct td__ltrun {
    td__ltshape s;
    int ta, tb;
    uint32_t epi;
    float alpha, beta;
    const void *A, *B, *C, *bias;
    void *D, *bgrad;
    int lda, ldb, ldc;
} td__ltrun;

static void td__bgrad(const td__ltrun *g)
{
    const td__ltshape *s = &g->s;
    int byA = g->epi == CUBLASLT_EPILOGUE_BGRADA;
    int len = byA ? s->m : s->n;
    for (int v = 0; v < len; v++) {
        double acc = 0;
        for (int l = 0; l < s->k; l++)
            acc += byA ? td__op(g->A, s->at, g->lda, g->ta, v, l, 0)
                       : td__op(g->B, s->at, g->ldb, g->tb, l, v, 0);
        td__st(g->bgrad, s->ct, (size_t)v, (float)acc);
    }
}

static void td__lt_run(void *p)
{
    const td__ltrun *g = p;
    const td__ltshape *s = &g->s;
    for (int j = 0; j < s->n; j++)
        for (int i = 0; i < s->m; i++) {
            double acc = 0;
            for (int l = 0; g->alpha != 0.0f && l < s->k; l++)
                acc += (double)td__op(g->A, s->at, g->lda, g->ta, i, l,
                                      s->tf32) *
                       td__op(g->B, s->at, g->ldb, g->tb, l, j, s->tf32);
            size_t c = (size_t)j * g->ldc + i;
            double v = (double)g->alpha * acc;
            if (g->beta != 0.0f)
                v += (double)g->beta * td__ld(g->C, s->ct, c);
            float f = (float)v; /* the fp32 accumulator, scaled */
            if (g->epi == CUBLASLT_EPILOGUE_BIAS ||
                g->epi == CUBLASLT_EPILOGUE_RELU_BIAS)
                f += td__ld(g->bias, s->ct, (size_t)i);
            if (g->epi == CUBLASLT_EPILOGUE_RELU ||
                g->epi == CUBLASLT_EPILOGUE_RELU_BIAS)
                f = f > 0.0f ? f : 0.0f; /* max(x, 0): NaN gives 0 */
            td__st(g->D, s->ct, c, f);
        }
    if (g->epi == CUBLASLT_EPILOGUE_BGRADA ||
        g->epi == CUBLASLT_EPILOGUE_BGRADB)
        td__bgrad(g);
}

static size_t td__span(const td__ltlay *l, int t)
{
    if (l->rows == 0 || l->cols == 0)
        return 0;
    return ((size_t)(l->cols - 1) * (size_t)l->ld + l->rows) * td__esize(t);
}

static int td__overlap(const td_sim_range *x, const td_sim_range *y)
{
    const char *a = x->p, *b = y->p;
    return x->bytes && y->bytes && a < b + y->bytes && b < a + x->bytes;
}

/* The algorithm's assumptions against this call's pointers and
 * descriptor; CUBLAS_STATUS_SUCCESS or a refusal said. */
static cublasStatus_t td__algo_ok(const char *call, const td__ltop *o,
                                  const cublasLtMatmulAlgo_t *algo,
                                  const void *const ptr[4], size_t ws_given,
                                  const void *ws)
{
    const uint64_t *q = algo ? algo->data : NULL;
    if (!q || q[0] != TD__LT_MAGIC) {
        td__sim_say("%s: no algorithm from cublasLtMatmulAlgoGetHeuristic "
                    "(the simulator does not choose one itself)", call);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (q[6] != o->epi || (int32_t)(q[7] >> 32) != o->compute) {
        td__sim_say("%s: the descriptor's epilogue %u / compute type %d are "
                    "not those the algorithm was chosen for (%u / %d)", call,
                    (unsigned)o->epi, (int)o->compute, (unsigned)q[6],
                    (int)(q[7] >> 32));
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    static const char nm[] = "ABCD";
    for (int i = 0; i < 4; i++)
        if (td__align_of(ptr[i]) < q[2 + i]) {
            td__sim_say("%s: %c (%p) is %u-byte aligned; the algorithm was "
                        "chosen for %u (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_"
                        "%c_BYTES)", call, nm[i], ptr[i],
                        td__align_of(ptr[i]), (unsigned)q[2 + i], nm[i]);
            return CUBLAS_STATUS_INVALID_VALUE;
        }
    if (o->bias && td__align_of(o->bias) < (uint32_t)q[7]) {
        td__sim_say("%s: the bias pointer %p is %u-byte aligned, the "
                    "algorithm was chosen with one %u-byte aligned", call,
                    o->bias, td__align_of(o->bias), (unsigned)(uint32_t)q[7]);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (ws_given < q[1] || (q[1] && !ws)) {
        td__sim_say("%s: workspace of %zu bytes given, the algorithm needs "
                    "%zu", call, ws ? ws_given : 0, (size_t)q[1]);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    return CUBLAS_STATUS_SUCCESS;
}

/* D overlapping A, B or C (but C == D), the bias gradient any matrix. */
static cublasStatus_t td__overlaps(const char *call, const td_sim_range *r,
                                   int bgrad, const void *C, const void *D)
{
    static const char *nm[] = {"A", "B", "C", "D", "the bias gradient"};
    for (int i = 0; i < 3; i++)
        if (!(i == 2 && C == D) && td__overlap(&r[3], &r[i])) {
            td__sim_say("%s: D (%p, %zu bytes) overlaps %s (%p, %zu bytes)",
                        call, r[3].p, r[3].bytes, nm[i], r[i].p, r[i].bytes);
            return CUBLAS_STATUS_INVALID_VALUE;
        }
    for (int i = 0; bgrad && i < 4; i++)
        if (td__overlap(&r[4], &r[i])) {
            td__sim_say("%s: %s (%p) overlaps %s", call, nm[4], r[4].p,
                        nm[i]);
            return CUBLAS_STATUS_INVALID_VALUE;
        }
    return CUBLAS_STATUS_SUCCESS;
}

static void td__count(const td__ltop *o, int at, int tf32)
{
    __atomic_add_fetch(&td__lt_all, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&td__lt_runs[td__epi_slot((int)o->epi)], 1,
                       __ATOMIC_RELAXED);
    /* and among cuBLAS's GEMMs (td_sim_blas_gemms, _typed, _tf32): the
     * math a cuBLAS handle would have had for this compute type */
    td__sim_blas_count(o->compute == CUBLAS_COMPUTE_32F_FAST_TF32
                           ? CUBLAS_TF32_TENSOR_OP_MATH
                           : CUBLAS_DEFAULT_MATH, tf32, at);
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d,
                              const void *alpha, const void *A,
                              cublasLtMatrixLayout_t a, const void *B,
                              cublasLtMatrixLayout_t b, const void *beta,
                              const void *C, cublasLtMatrixLayout_t c,
                              void *D, cublasLtMatrixLayout_t dd,
                              const cublasLtMatmulAlgo_t *algo, void *ws,
                              size_t ws_bytes, cudaStream_t stream)
{
    const char *call = "cublasLtMatmul";
    const td__ltop *o = td__op_of(d);
    const td__ltlay *la = td__lay_of(a), *lb = td__lay_of(b),
                    *lc = td__lay_of(c), *ld = td__lay_of(dd);
    td__ltshape s;
    cublasStatus_t st = td__check(h, call, o, la, lb, lc, ld, &s);
    if (st != CUBLAS_STATUS_SUCCESS)
        return st;
    if (!alpha || !beta)
        return CUBLAS_STATUS_INVALID_VALUE;
    int bias = o->epi == CUBLASLT_EPILOGUE_BIAS ||
               o->epi == CUBLASLT_EPILOGUE_RELU_BIAS;
    int bgrad = o->epi == CUBLASLT_EPILOGUE_BGRADA ||
                o->epi == CUBLASLT_EPILOGUE_BGRADB;
    if ((bias || bgrad) && !o->bias) {
        td__sim_say("%s: epilogue %u without CUBLASLT_MATMUL_DESC_BIAS_"
                    "POINTER", call, (unsigned)o->epi);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (bgrad && *(const float *)alpha != 1.0f) {
        td__sim_say("%s: a bias gradient with alpha %g: the documentation "
                    "does not say whether alpha scales it; the simulator "
                    "takes alpha 1", call, (double)*(const float *)alpha);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    const void *ptr[4] = {A, B, C, D};
    st = td__algo_ok(call, o, algo, ptr, ws_bytes, ws);
    if (st != CUBLAS_STATUS_SUCCESS)
        return st;
    td__sim_lock();
    int cur = td__sim_cur();
    td__sim_unlock();
    if (cur != h->dev) {
        td__sim_say("%s: handle of device %d used while device %d is "
                    "current", call, h->dev, cur);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    float al = *(const float *)alpha, be = *(const float *)beta;
    size_t blen = (size_t)(o->epi == CUBLASLT_EPILOGUE_BGRADB ? s.n : s.m);
    td_sim_range r[6] = {
        {A, al != 0.0f ? td__span(la, s.at) : 0, 0},
        {B, al != 0.0f ? td__span(lb, s.at) : 0, 0},
        {C, be != 0.0f ? td__span(lc, s.ct) : 0, 0},
        {D, td__span(ld, s.ct), 1},
        {o->bias, (bias || bgrad) ? blen * td__esize(s.ct) : 0, bgrad},
        {ws, (size_t)algo->data[1], 1}};
    st = td__overlaps(call, r, bgrad, C, D);
    if (st != CUBLAS_STATUS_SUCCESS)
        return st;
    td_sim_range used[6];
    int nr = 0;
    for (int i = 0; i < 6; i++)
        if (r[i].bytes)
            used[nr++] = r[i];
    if (s.m == 0 || s.n == 0)
        return CUBLAS_STATUS_SUCCESS;
    td__ltrun *g = malloc(sizeof *g);
    if (!g)
        return CUBLAS_STATUS_ALLOC_FAILED;
    *g = (td__ltrun){s, o->ta != CUBLAS_OP_N, o->tb != CUBLAS_OP_N, o->epi,
                     al, be, A, B, C, o->bias, D,
                     bgrad ? (void *)(uintptr_t)o->bias : NULL,
                     (int)la->ld, (int)lb->ld, (int)lc->ld};
    cudaError_t e = td_sim_submit(stream, call, td__lt_run, free, g, used,
                                  nr, __builtin_return_address(0));
    if (e == cudaSuccess)
        td__count(o, s.at, s.tf32);
    if (e == cudaErrorInvalidValue)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (e == cudaErrorMemoryAllocation) /* td_sim_oom_launch_in */
        return CUBLAS_STATUS_ALLOC_FAILED;
    return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS
                            : CUBLAS_STATUS_EXECUTION_FAILED;
}
