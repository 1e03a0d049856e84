/* cuda_blaslt.c - the dense layers' GEMMs on cuBLASLt, with the bias in
 * their epilogues (docs/cuda.md "Dense layers on cuBLASLt").
 *
 * Owns: the backend's cublasLtHandle_t; per dense layer, made once at
 * create, the matmul descriptors, matrix layouts and chosen algorithm of
 * its three GEMMs (the products of cuda_step.c's top comment):
 *   forward   y^T  = W * x^T   + b   epilogue BIAS (b: D's rows, `out`)
 *   weights   dW^T = x^T * dy        epilogue BGRADB (db: D's columns,
 *                                    the sum of dy over the batch, k)
 *   input     dx^T = W^T * dy^T      no epilogue (beta 1 to accumulate)
 * and, when the dense layer's only reader is a ReLU the memory plan runs
 * in place (its y is the dense layer's y), the forward's epilogue is
 * RELU_BIAS (RELU without a bias) and the ReLU's forward is skipped; its
 * backward is cuDNN's as before, reading the same buffer (y > 0 exactly
 * where x > 0), so no auxiliary mask is needed.
 * in the job's types (A and B in the compute type; D in it too but for
 * dW, fp32 into the gradients), compute type CUBLAS_COMPUTE_32F, or
 * _32F_FAST_TF32 when the fp32 math is TF32 (be->tf32, cuda_prec.c),
 * scale type fp32, alpha and beta host constants (nothing per step, so
 * a graph captures them).  The bias is in D's type as cublasLt.h
 * documents: the 16-bit copy of the bias (bl) with a 16-bit compute
 * type; the bias gradient in fp32 (dW's type).  Each algorithm is the
 * first of cublasLtMatmulAlgoGetHeuristic under a preference with the
 * cuBLAS workspace of the arena (TD__BLAS_WS) and the alignment of the
 * layer's own pointers (fixed at create: the arena and the memory plan
 * place them once).  A GEMM with no algorithm keeps no descriptors and
 * is run by cuda_step.c the old way (cuBLAS GEMM, our bias kernels),
 * said in a log line.
 * Never does: allocate device memory, synchronise, or choose per step.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/cuda/cuda_int.h"
#include "base/error.h"
#include "base/log.h"

typedef struct td__ltg {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, d; /* C is D (beta 0, or 1 in place) */
    cublasLtMatmulAlgo_t algo;
    size_t ws;                      /* what the algorithm asks for */
    int ok;                         /* an algorithm was found */
} td__ltg;

struct td__lt {
    td__ltg g[TD__LT_N];
    int relu;     /* dense: the ReLU its forward epilogue computes, or 0 */
    int fused;    /* ReLU: computed by its input's epilogue, skipped */
};

static const float td__one = 1.0f, td__zero = 0.0f;
static const char *const td__lt_name[TD__LT_N] = {"forward", "weight "
                                                  "gradient", "input "
                                                  "gradient"};

/* cuBLASLt statuses are cuBLAS's (cublasStatus_t). */
#define TD__LT(be, call) TD__BLAS(be, call)

static cudaDataType td__lt_type(const td__cuda *be)
{
    return be->dt == TD_BF16 ? CUDA_R_16BF
           : be->dt == TD_F16 ? CUDA_R_16F : CUDA_R_32F;
}

static uint32_t td__lt_align(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    if (!a)
        return 256;
    a &= -a;
    return a > 256 ? 256 : (uint32_t)a;
}

/* The pointers and shapes of GEMM `which` of dense layer L. */
typedef struct td__ltspec {
    cublasOperation_t ta, tb;
    uint64_t ar, ac, br, bc, dr, dc;   /* stored rows x cols (ld = rows) */
    cudaDataType at, dt;
    const void *A, *B, *bias;
    void *D;
    uint32_t epi;
} td__ltspec;

static td__ltspec td__lt_spec(const td__cuda *be, int L, int which)
{
    const td_model *m = be->base.model;
    const td_layer *l = &m->layers[L];
    const td_shape *s = &m->layers[l->in[0]].out;
    uint64_t in = (uint64_t)s->c * s->h * s->w, out = (uint64_t)l->channels;
    uint64_t n = (uint64_t)be->batch;
    const td__gl *g = &be->gl[L];
    const void *x = be->gl[be->gl[l->in[0]].root].y;
    void *dx = be->gl[be->gl[l->in[0]].root].dy;
    cudaDataType t = td__lt_type(be);
    switch (which) {
    case TD__LT_FWD: {
        int relu = be->lt && be->lt[L].relu;
        uint32_t epi = l->bias ? (relu ? CUBLASLT_EPILOGUE_RELU_BIAS
                                       : CUBLASLT_EPILOGUE_BIAS)
                               : (relu ? CUBLASLT_EPILOGUE_RELU
                                       : CUBLASLT_EPILOGUE_DEFAULT);
        return (td__ltspec){CUBLAS_OP_T, CUBLAS_OP_N, in, out, in, n, out,
                            n, t, t, g->wl, x, l->bias ? g->bl : NULL, g->y,
                            epi};
    }
    case TD__LT_WGRAD:
        return (td__ltspec){CUBLAS_OP_N, CUBLAS_OP_T, in, n, out, n, in, out,
                            t, CUDA_R_32F, x, g->dy, l->bias ? g->db : NULL,
                            g->dw, l->bias ? CUBLASLT_EPILOGUE_BGRADB
                                           : CUBLASLT_EPILOGUE_DEFAULT};
    default:
        return (td__ltspec){CUBLAS_OP_N, CUBLAS_OP_N, in, out, out, n, in, n,
                            t, t, g->wl, g->dy, NULL, dx,
                            CUBLASLT_EPILOGUE_DEFAULT};
    }
}

static int td__lt_attr(td__cuda *be, cublasLtMatmulDesc_t op,
                       cublasLtMatmulDescAttributes_t a, const void *v,
                       size_t n)
{
    TD__LT(be, cublasLtMatmulDescSetAttribute(op, a, v, n));
    return 0;
}

/* Descriptors, layouts and the algorithm of one GEMM; *found 0 when the
 * heuristic has none (descriptors then destroyed by the caller). */
static int td__lt_make(td__cuda *be, const td__ltspec *p, td__ltg *q)
{
    cublasComputeType_t ct = be->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                      : CUBLAS_COMPUTE_32F;
    int32_t ta = p->ta, tb = p->tb, btype = p->dt;
    TD__LT(be, cublasLtMatmulDescCreate(&q->op, ct, CUDA_R_32F));
    TD__TRY(td__lt_attr(be, q->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta,
                        sizeof ta));
    TD__TRY(td__lt_attr(be, q->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb,
                        sizeof tb));
    TD__TRY(td__lt_attr(be, q->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &p->epi,
                        sizeof p->epi));
    if (p->bias) {
        TD__TRY(td__lt_attr(be, q->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                            &p->bias, sizeof p->bias));
        TD__TRY(td__lt_attr(be, q->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                            &btype, sizeof btype));
    }
    TD__LT(be, cublasLtMatrixLayoutCreate(&q->a, p->at, p->ar, p->ac,
                                          (int64_t)p->ar));
    TD__LT(be, cublasLtMatrixLayoutCreate(&q->b, p->at, p->br, p->bc,
                                          (int64_t)p->br));
    TD__LT(be, cublasLtMatrixLayoutCreate(&q->d, p->dt, p->dr, p->dc,
                                          (int64_t)p->dr));
    cublasLtMatmulPreference_t pref = NULL;
    TD__LT(be, cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = TD__BLAS_WS;
    uint32_t al[4] = {td__lt_align(p->A), td__lt_align(p->B),
                      td__lt_align(p->D), td__lt_align(p->D)};
    cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    for (int i = 0; i < 4 && st == CUBLAS_STATUS_SUCCESS; i++)
        st = cublasLtMatmulPreferenceSetAttribute(
            pref, (cublasLtMatmulPreferenceAttributes_t)(
                      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES + i),
            &al[i], sizeof al[i]);
    cublasLtMatmulHeuristicResult_t res;
    int got = 0;
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulAlgoGetHeuristic(be->blaslt, q->op, q->a, q->b,
                                            q->d, q->d, pref, 1, &res, &got);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st == CUBLAS_STATUS_NOT_SUPPORTED ||
        (st == CUBLAS_STATUS_SUCCESS &&
         (got < 1 || res.state != CUBLAS_STATUS_SUCCESS)))
        return 0; /* no algorithm: q->ok stays 0 */
    TD__LT(be, st);
    q->algo = res.algo;
    q->ws = res.workspaceSize;
    q->ok = 1;
    return 0;
}

static void td__lt_free(td__ltg *q)
{
    if (q->a)
        cublasLtMatrixLayoutDestroy(q->a);
    if (q->b)
        cublasLtMatrixLayoutDestroy(q->b);
    if (q->d)
        cublasLtMatrixLayoutDestroy(q->d);
    if (q->op)
        cublasLtMatmulDescDestroy(q->op);
    *q = (td__ltg){0};
}

/* The ReLU that dense layer L's forward epilogue may compute: L's only
 * reader, run in place on L's buffers by the memory plan; 0: none. */
static int td__lt_relu_of(const td__cuda *be, int L)
{
    const td_model *m = be->base.model;
    int reader = 0, readers = 0;
    for (int R = L + 1; R < m->nlayers; R++) {
        if (be->gl[R].root != R)
            continue; /* an alias (flatten): its readers are counted */
        for (int i = 0; i < 2; i++) {
            int in = m->layers[R].in[i];
            if (in >= 0 && be->gl[in].root == L)
                reader = R, readers++;
        }
    }
    if (readers != 1 || m->layers[reader].kind != TD_L_RELU ||
        be->gl[reader].y != be->gl[L].y || be->gl[reader].dy != be->gl[L].dy)
        return 0;
    return reader;
}

static int td__lt_layer(td__cuda *be, int L, int *fell)
{
    const td_model *m = be->base.model;
    const td_layer *l = &m->layers[L];
    int in_root = be->gl[l->in[0]].root;
    be->lt[L].relu = td__lt_relu_of(be, L);
    for (int w = 0; w < TD__LT_N; w++) {
        if (w == TD__LT_DGRAD && in_root == 0)
            continue; /* the batch itself needs no gradient */
        td__ltspec p = td__lt_spec(be, L, w);
        td__ltg *q = &be->lt[L].g[w];
        TD__TRY(td__lt_make(be, &p, q));
        if (!q->ok && w == TD__LT_FWD && be->lt[L].relu) {
            /* no algorithm with the ReLU: without it, the ReLU on cuDNN */
            td__lt_free(q);
            be->lt[L].relu = 0;
            p = td__lt_spec(be, L, w);
            TD__TRY(td__lt_make(be, &p, q));
        }
        if (w == TD__LT_FWD && q->ok && be->lt[L].relu)
            be->lt[be->lt[L].relu].fused = 1;
        if (q->ok)
            continue;
        td__lt_free(q);
        (*fell)++;
        td_info("cuda:%d: dense layer %s: cuBLASLt has no algorithm for "
                "its %s GEMM (%llux%llu from %llux%llu and %llux%llu): "
                "cuBLAS GEMM%s instead", be->dev, l->name, td__lt_name[w],
                (unsigned long long)p.dr, (unsigned long long)p.dc,
                (unsigned long long)p.ar, (unsigned long long)p.ac,
                (unsigned long long)p.br, (unsigned long long)p.bc,
                p.epi != CUBLASLT_EPILOGUE_DEFAULT ? " and bias kernel" : "");
    }
    return 0;
}

int td__blaslt_create(td__cuda *be)
{
    const td_model *m = be->base.model;
    int dense = 0, fell = 0, relus = 0;
    TD__LT(be, cublasLtCreate(&be->blaslt));
    be->lt = calloc((size_t)m->nlayers, sizeof *be->lt);
    if (!be->lt)
        return -ENOMEM;
    for (int L = 1; L < m->nlayers; L++)
        if (m->layers[L].kind == TD_L_DENSE && be->gl[L].root == L) {
            TD__TRY(td__lt_layer(be, L, &fell));
            dense++;
            relus += be->lt[L].relu != 0;
        }
    if (dense)
        td_info("cuda:%d: %d dense layer%s on cuBLASLt (bias in the "
                "epilogues%s), %d ReLU%s in them, %d GEMM%s on cuBLAS",
                be->dev, dense, dense == 1 ? "" : "s",
                be->tf32 ? ", TF32" : "", relus, relus == 1 ? "" : "s",
                fell, fell == 1 ? "" : "s");
    return 0;
}

void td__blaslt_destroy(td__cuda *be)
{
    if (be->lt) {
        for (int L = 0; L < be->base.model->nlayers; L++)
            for (int w = 0; w < TD__LT_N; w++)
                td__lt_free(&be->lt[L].g[w]);
        free(be->lt);
        be->lt = NULL;
    }
    if (be->blaslt)
        cublasLtDestroy(be->blaslt);
    be->blaslt = NULL;
}

int td__blaslt_has(const td__cuda *be, int L, int which)
{
    return be->lt && be->lt[L].g[which].ok;
}

int td__blaslt_fused_relu(const td__cuda *be, int L)
{
    return be->lt && be->lt[L].fused;
}

/* GEMM `which` of layer L; D (dx for the input gradient) and beta as
 * given: C is D. */
static int td__lt_run(td__cuda *be, int L, int which, void *D,
                      const float *beta)
{
    const td__ltg *q = &be->lt[L].g[which];
    td__ltspec p = td__lt_spec(be, L, which);
    TD__LT(be, cublasLtMatmul(be->blaslt, q->op, &td__one, p.A, q->a, p.B,
                              q->b, beta, D, q->d, D, q->d, &q->algo,
                              be->blas_ws, TD__BLAS_WS, be->compute));
    return 0;
}

int td__blaslt_fwd(td__cuda *be, int L)
{
    return td__lt_run(be, L, TD__LT_FWD, be->gl[L].y, &td__zero);
}

int td__blaslt_wgrad(td__cuda *be, int L)
{
    return td__lt_run(be, L, TD__LT_WGRAD, be->gl[L].dw, &td__zero);
}

int td__blaslt_dgrad(td__cuda *be, int L, void *dx, int accumulate)
{
    return td__lt_run(be, L, TD__LT_DGRAD, dx,
                      accumulate ? &td__one : &td__zero);
}
