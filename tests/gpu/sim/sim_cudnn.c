/* sim_cudnn.c - the simulated cuDNN: handles, descriptors, output shapes
 * and the v7 algorithm queries.
 *
 * Owns: the legacy (v7-style) descriptor calls the backend makes, with
 * their documented checks (positive sizes, known data types and formats),
 * the output-dimension formulas
 *   convolution: 1 + (in + 2 pad - ((k - 1) dilation + 1)) / stride
 *   pooling:     1 + (in + 2 pad - window) / stride
 * and the algorithm queries: results ordered by an invented speed, with
 * realistic, non-zero workspaces for the preferred algorithms (im2col
 * buffers, precomputed indices, Winograd tiles), each result's determinism
 * as cuDNN documents it (backward-data ALGO_0, backward-filter ALGO_0 and
 * ALGO_3 are non-deterministic) and the descriptor's math type.  The same
 * sizes are enforced when a convolution runs (sim_cudnn_ops.c).
 * And the cudnnFind*AlgorithmEx searches (at the end: blocking, output and
 * workspace overwritten, counted).
 * Never does: pick algorithms for anyone, or model real timings.
 */
#include <stdlib.h>
#include <string.h>

#include "sim_cudnn_int.h"

const char *cudnnGetErrorString(cudnnStatus_t s)
{
    switch (s) {
    case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_NOT_INITIALIZED: return "CUDNN_STATUS_NOT_INITIALIZED";
    case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_BAD_PARAM_NULL_POINTER:
        return "CUDNN_STATUS_BAD_PARAM_NULL_POINTER";
    case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
    case CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH:
        return "CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH";
    case CUDNN_STATUS_INTERNAL_ERROR: return "CUDNN_STATUS_INTERNAL_ERROR";
    case CUDNN_STATUS_EXECUTION_FAILED: return "CUDNN_STATUS_EXECUTION_FAILED";
    case CUDNN_STATUS_ALLOC_FAILED: return "CUDNN_STATUS_ALLOC_FAILED";
    default: return "CUDNN_STATUS_UNKNOWN";
    }
}

size_t cudnnGetVersion(void) { return CUDNN_VERSION; }

cudnnStatus_t td__dnn_handle(cudnnHandle_t h, const char *call)
{
    if (!h)
        return CUDNN_STATUS_NOT_INITIALIZED;
    td__sim_lock();
    int cur = td__sim_cur();
    cudaError_t e = td__sim_gate();
    td__sim_unlock();
    if (e != cudaSuccess)
        return CUDNN_STATUS_EXECUTION_FAILED;
    if (cur != h->dev) {
        td__sim_say("%s: handle of device %d used while device %d is "
                    "current", call, h->dev, cur);
        return CUDNN_STATUS_BAD_PARAM;
    }
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreate(cudnnHandle_t *h)
{
    int n = 0;
    if (!h)
        return CUDNN_STATUS_BAD_PARAM;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0)
        return CUDNN_STATUS_NOT_INITIALIZED;
    td__sim_lock();
    int dev = td__sim_cur();
    cudaError_t e = td__sim_gate();
    td__sim_unlock();
    if (e != cudaSuccess)
        return CUDNN_STATUS_NOT_INITIALIZED;
    struct cudnnContext *c = calloc(1, sizeof *c);
    if (!c)
        return CUDNN_STATUS_ALLOC_FAILED;
    c->dev = dev;
    *h = c;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroy(cudnnHandle_t h)
{
    if (!h)
        return CUDNN_STATUS_BAD_PARAM;
    free(h);
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetStream(cudnnHandle_t h, cudaStream_t s)
{
    if (!h)
        return CUDNN_STATUS_BAD_PARAM;
    h->s = s;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetStream(cudnnHandle_t h, cudaStream_t *s)
{
    if (!h || !s)
        return CUDNN_STATUS_BAD_PARAM;
    *s = h->s;
    return CUDNN_STATUS_SUCCESS;
}

/* ---- descriptors ------------------------------------------------------------ */

#define TD__DESC(Name, Struct)                                               \
    cudnnStatus_t cudnnCreate##Name##Descriptor(struct Struct **d)           \
    {                                                                        \
        if (!d)                                                              \
            return CUDNN_STATUS_BAD_PARAM;                                   \
        *d = calloc(1, sizeof **d);                                          \
        return *d ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_ALLOC_FAILED;        \
    }                                                                        \
    cudnnStatus_t cudnnDestroy##Name##Descriptor(struct Struct *d)           \
    {                                                                        \
        free(d);                                                             \
        return CUDNN_STATUS_SUCCESS;                                         \
    }

TD__DESC(Tensor, cudnnTensorStruct)
TD__DESC(Filter, cudnnFilterStruct)
TD__DESC(Convolution, cudnnConvolutionStruct)
TD__DESC(Activation, cudnnActivationStruct)
TD__DESC(Pooling, cudnnPoolingStruct)

static int td__known_dt(cudnnDataType_t dt)
{
    return dt == CUDNN_DATA_FLOAT || dt == CUDNN_DATA_DOUBLE ||
           dt == CUDNN_DATA_HALF || dt == CUDNN_DATA_BFLOAT16;
}

cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d,
                                         cudnnTensorFormat_t fmt,
                                         cudnnDataType_t dt, int n, int c,
                                         int h, int w)
{
    if (!d || n <= 0 || c <= 0 || h <= 0 || w <= 0 || !td__known_dt(dt))
        return CUDNN_STATUS_BAD_PARAM;
    if (fmt != CUDNN_TENSOR_NCHW && fmt != CUDNN_TENSOR_NHWC)
        return CUDNN_STATUS_NOT_SUPPORTED;
    *d = (struct cudnnTensorStruct){.set = 1, .dt = dt, .n = n, .c = c,
                                    .h = h, .w = w};
    if (fmt == CUDNN_TENSOR_NCHW) {
        d->ws = 1, d->hs = w, d->cs = h * w, d->ns = c * h * w;
    } else {
        d->cs = 1, d->ws = c, d->hs = w * c, d->ns = h * w * c;
    }
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetTensor4dDescriptorEx(cudnnTensorDescriptor_t d,
                                           cudnnDataType_t dt, int n, int c,
                                           int h, int w, int ns, int cs,
                                           int hs, int ws)
{
    if (!d || n <= 0 || c <= 0 || h <= 0 || w <= 0 || ns <= 0 || cs <= 0 ||
        hs <= 0 || ws <= 0 || !td__known_dt(dt))
        return CUDNN_STATUS_BAD_PARAM;
    *d = (struct cudnnTensorStruct){1, dt, n, c, h, w, ns, cs, hs, ws};
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d,
                                         cudnnDataType_t dt,
                                         cudnnTensorFormat_t fmt, int k,
                                         int c, int h, int w)
{
    if (!d || k <= 0 || c <= 0 || h <= 0 || w <= 0 || !td__known_dt(dt))
        return CUDNN_STATUS_BAD_PARAM;
    /* KCRS (NCHW) or KRSC (NHWC); not NCHW_VECT_C (int8 only) */
    if (fmt != CUDNN_TENSOR_NCHW && fmt != CUDNN_TENSOR_NHWC)
        return CUDNN_STATUS_NOT_SUPPORTED; /* the simulator's limit */
    *d = (struct cudnnFilterStruct){1, dt, fmt, k, c, h, w};
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d,
                                              int ph, int pw, int u, int v,
                                              int dh, int dw,
                                              cudnnConvolutionMode_t mode,
                                              cudnnDataType_t dt)
{
    if (!d || ph < 0 || pw < 0 || u <= 0 || v <= 0 || dh <= 0 || dw <= 0 ||
        (mode != CUDNN_CONVOLUTION && mode != CUDNN_CROSS_CORRELATION) ||
        !td__known_dt(dt))
        return CUDNN_STATUS_BAD_PARAM;
    cudnnMathType_t math = d->set ? d->math : CUDNN_DEFAULT_MATH;
    *d = (struct cudnnConvolutionStruct){1, ph, pw, u, v, dh, dw, mode, dt,
                                         math};
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d,
                                          cudnnMathType_t m)
{
    if (!d || (m != CUDNN_DEFAULT_MATH && m != CUDNN_TENSOR_OP_MATH &&
               m != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION &&
               m != CUDNN_FMA_MATH))
        return CUDNN_STATUS_BAD_PARAM;
    d->math = m;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionMathType(cudnnConvolutionDescriptor_t d,
                                          cudnnMathType_t *m)
{
    if (!d || !m)
        return CUDNN_STATUS_BAD_PARAM;
    *m = d->math;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetActivationDescriptor(cudnnActivationDescriptor_t d,
                                           cudnnActivationMode_t mode,
                                           cudnnNanPropagation_t nan,
                                           double coef)
{
    if (!d || (nan != CUDNN_PROPAGATE_NAN && nan != CUDNN_NOT_PROPAGATE_NAN))
        return CUDNN_STATUS_BAD_PARAM;
    *d = (struct cudnnActivationStruct){1, mode, nan, coef};
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetPooling2dDescriptor(cudnnPoolingDescriptor_t d,
                                          cudnnPoolingMode_t mode,
                                          cudnnNanPropagation_t nan, int wh,
                                          int ww, int ph, int pw, int sh,
                                          int sw)
{
    if (!d || wh <= 0 || ww <= 0 || ph < 0 || pw < 0 || sh <= 0 ||
        sw <= 0 || (nan != CUDNN_PROPAGATE_NAN &&
                    nan != CUDNN_NOT_PROPAGATE_NAN))
        return CUDNN_STATUS_BAD_PARAM;
    *d = (struct cudnnPoolingStruct){1, mode, nan, wh, ww, ph, pw, sh, sw};
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolution2dForwardOutputDim(
    const cudnnConvolutionDescriptor_t c, const cudnnTensorDescriptor_t x,
    const cudnnFilterDescriptor_t w, int *n, int *k, int *h, int *wo)
{
    if (!c || !x || !w || !c->set || !x->set || !w->set || !n || !k || !h ||
        !wo || x->c != w->c)
        return CUDNN_STATUS_BAD_PARAM;
    int eh = (w->h - 1) * c->dh + 1, ew = (w->w - 1) * c->dw + 1;
    if (x->h + 2 * c->ph < eh || x->w + 2 * c->pw < ew)
        return CUDNN_STATUS_BAD_PARAM;
    *n = x->n;
    *k = w->k;
    *h = 1 + (x->h + 2 * c->ph - eh) / c->u;
    *wo = 1 + (x->w + 2 * c->pw - ew) / c->v;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetPooling2dForwardOutputDim(
    const cudnnPoolingDescriptor_t p, const cudnnTensorDescriptor_t x, int *n,
    int *c, int *h, int *w)
{
    if (!p || !x || !p->set || !x->set || !n || !c || !h || !w ||
        x->h + 2 * p->ph < p->wh || x->w + 2 * p->pw < p->ww)
        return CUDNN_STATUS_BAD_PARAM;
    *n = x->n;
    *c = x->c;
    *h = 1 + (x->h + 2 * p->ph - p->wh) / p->sh;
    *w = 1 + (x->w + 2 * p->pw - p->ww) / p->sw;
    return CUDNN_STATUS_SUCCESS;
}

/* ---- shapes and workspaces ------------------------------------------------------ */

size_t td__dnn_esize(cudnnDataType_t dt)
{
    return dt == CUDNN_DATA_DOUBLE ? 8
           : dt == CUDNN_DATA_HALF || dt == CUDNN_DATA_BFLOAT16 ? 2 : 4;
}

size_t td__dnn_elems(const struct cudnnTensorStruct *t)
{
    return (size_t)(t->n - 1) * t->ns + (size_t)(t->c - 1) * t->cs +
           (size_t)(t->h - 1) * t->hs + (size_t)(t->w - 1) * t->ws + 1;
}

size_t td__dnn_span(const struct cudnnTensorStruct *t)
{
    return td__dnn_elems(t) * td__dnn_esize(t->dt);
}

size_t td__dnn_fspan(const struct cudnnFilterStruct *f)
{
    return (size_t)f->k * f->c * f->h * f->w * td__dnn_esize(f->dt);
}

static const char *td__dt_name(cudnnDataType_t dt)
{
    return dt == CUDNN_DATA_FLOAT ? "FLOAT" : dt == CUDNN_DATA_HALF ? "HALF"
           : dt == CUDNN_DATA_BFLOAT16 ? "BFLOAT16"
           : dt == CUDNN_DATA_DOUBLE ? "DOUBLE" : "another type";
}

/* Whether t's strides are those of a fully packed tensor in the NHWC
 * (nhwc 1) or NCHW (0) layout; the stride of a dimension of size 1 is
 * never looked at (both layouts fit it). */
static int td__packed_as(const struct cudnnTensorStruct *t, int nhwc)
{
    int cs = nhwc ? 1 : t->h * t->w, ws = nhwc ? t->c : 1;
    int hs = nhwc ? t->w * t->c : t->w;
    return (t->c == 1 || t->cs == cs) && (t->w == 1 || t->ws == ws) &&
           (t->h == 1 || t->hs == hs);
}

static long td__dnn_nhwc_n, td__dnn_unaligned_n;

long td_sim_dnn_nhwc(void)
{
    return __atomic_load_n(&td__dnn_nhwc_n, __ATOMIC_RELAXED);
}

long td_sim_dnn_unaligned(void)
{
    return __atomic_load_n(&td__dnn_unaligned_n, __ATOMIC_RELAXED);
}

void td__dnn_count_layout(const struct cudnnTensorStruct *x,
                          const struct cudnnFilterStruct *w,
                          const struct cudnnTensorStruct *y)
{
    int t16 = x->dt == CUDNN_DATA_HALF || x->dt == CUDNN_DATA_BFLOAT16;
    if (w->fmt == CUDNN_TENSOR_NHWC)
        __atomic_add_fetch(&td__dnn_nhwc_n, 1, __ATOMIC_RELAXED);
    if (t16 && w->fmt == CUDNN_TENSOR_NHWC && (x->c % 8 || y->c % 8))
        __atomic_add_fetch(&td__dnn_unaligned_n, 1, __ATOMIC_RELAXED);
}

cudnnStatus_t td__dnn_conv_check(const char *call,
                                 const struct cudnnTensorStruct *x,
                                 const struct cudnnFilterStruct *w,
                                 const struct cudnnConvolutionStruct *c,
                                 const struct cudnnTensorStruct *y)
{
    int n, k, h, wo;
    if (!x || !w || !c || !y || !y->set)
        return CUDNN_STATUS_BAD_PARAM;
    if (cudnnGetConvolution2dForwardOutputDim(
            (cudnnConvolutionDescriptor_t)c, (cudnnTensorDescriptor_t)x,
            (cudnnFilterDescriptor_t)w, &n, &k, &h, &wo) !=
            CUDNN_STATUS_SUCCESS ||
        y->n != n || y->c != k || y->h != h || y->w != wo) {
        td__sim_say("%s: tensor shapes do not agree (x %dx%dx%dx%d, w "
                    "%dx%dx%dx%d, y %dx%dx%dx%d)", call, x->n, x->c, x->h,
                    x->w, w->k, w->c, w->h, w->w, y->n, y->c, y->h, y->w);
        return CUDNN_STATUS_BAD_PARAM;
    }
    /* One layout for x, y and the filter: NCHW tensors with a KCRS
     * filter or fully packed NHWC tensors with a KRSC one.  cuDNN's
     * tables list its supported layouts per configuration; mixing them
     * is refused here whether or not a given cuDNN version accepts it
     * (stricter, never more lenient). */
    int wn = w->fmt == CUDNN_TENSOR_NHWC;
    if (!td__packed_as(x, wn) || !td__packed_as(y, wn)) {
        td__sim_say("%s: x and y are not both packed %s, as their %s filter "
                    "is: the tensors and the filter must share one layout "
                    "(NCHW with KCRS, NHWC with KRSC)", call,
                    wn ? "NHWC" : "NCHW", wn ? "KRSC (NHWC)" : "KCRS (NCHW)");
        return CUDNN_STATUS_NOT_SUPPORTED;
    }
    /* cuDNN's configurations the simulator models: FLOAT_CONFIG (all
     * fp32), PSEUDO_HALF_CONFIG and PSEUDO_BFLOAT16_CONFIG (x, w, y in
     * the 16-bit type, the convolution's compute type fp32).  Not:
     * TRUE_HALF_CONFIG (fp16 accumulation), doubles, mixed types. */
    int t16 = x->dt == CUDNN_DATA_HALF || x->dt == CUDNN_DATA_BFLOAT16;
    if ((x->dt != CUDNN_DATA_FLOAT && !t16) || w->dt != x->dt ||
        y->dt != x->dt || c->dt != CUDNN_DATA_FLOAT) {
        td__sim_say("%s: x %s, w %s, y %s with compute type %s is not a "
                    "configuration the simulator models (FLOAT, "
                    "PSEUDO_HALF, PSEUDO_BFLOAT16: one data type, compute "
                    "type FLOAT)", call, td__dt_name(x->dt),
                    td__dt_name(w->dt), td__dt_name(y->dt),
                    td__dt_name(c->dt));
        return CUDNN_STATUS_NOT_SUPPORTED;
    }
    return CUDNN_STATUS_SUCCESS;
}

static size_t td__r256(size_t b) { return (b + 255) & ~(size_t)255; }

long long td__dnn_ws(int dir, int algo, const struct cudnnTensorStruct *x,
                     const struct cudnnFilterStruct *w,
                     const struct cudnnConvolutionStruct *c,
                     const struct cudnnTensorStruct *y)
{
    size_t N = (size_t)x->n, C = (size_t)x->c, K = (size_t)w->k;
    size_t RS = (size_t)w->h * w->w, PQ = (size_t)y->h * y->w;
    int wino = w->h == 3 && w->w == 3 && c->u == 1 && c->v == 1 &&
               c->dh == 1 && c->dw == 1;
    size_t tiles = (size_t)((y->h + 3) / 4) * ((y->w + 3) / 4);
    size_t wino_ws = td__r256(36 * tiles * N * (C + K) * 4);
    if (dir == 0) {
        switch (algo) {
        case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM: return 0;
        case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM:
            return (long long)td__r256(C * RS * 8 + 256);
        case CUDNN_CONVOLUTION_FWD_ALGO_GEMM:
            return (long long)td__r256(N * C * RS * PQ * 4);
        case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED:
            return wino ? (long long)wino_ws : -1;
        default: return -1;
        }
    }
    if (dir == 1) {
        switch (algo) {
        case CUDNN_CONVOLUTION_BWD_DATA_ALGO_0: return 0;
        case CUDNN_CONVOLUTION_BWD_DATA_ALGO_1:
            return (long long)td__r256(K * C * RS * 4 + 256);
        case CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED:
            return wino ? (long long)wino_ws : -1;
        default: return -1;
        }
    }
    switch (algo) {
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0: return 0;
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1:
        return (long long)td__r256(C * RS * PQ * 4);
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3:
        return (long long)td__r256(K * C * RS * 4 * 4);
    default: return -1;
    }
}

/* ---- the v7 queries ----------------------------------------------------------------- */

/* Preference order per direction, and which algorithms are deterministic. */
static const int td__rank[3][4] = {
    {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
     CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED,
     CUDNN_CONVOLUTION_FWD_ALGO_GEMM, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM},
    {CUDNN_CONVOLUTION_BWD_DATA_ALGO_1,
     CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED,
     CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, -1},
    {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1,
     CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, -1},
};
static const int td__count[3] = {CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                 CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
                                 CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT};

long td__dnn_nondet;

long td_sim_dnn_nondeterministic(void)
{
    return __atomic_load_n(&td__dnn_nondet, __ATOMIC_RELAXED);
}

int td__dnn_deterministic(int dir, int algo)
{
    if (dir == 1)
        return algo != CUDNN_CONVOLUTION_BWD_DATA_ALGO_0;
    if (dir == 2)
        return algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
    return 1;
}

typedef struct td__perf {
    int algo;
    cudnnStatus_t status;
    float time;
    size_t memory;
    cudnnDeterminism_t det;
    cudnnMathType_t math;
} td__perf;

/* Results a query leaves out for want < what there is (the caller asked
 * for fewer than cudnnGetConvolution*AlgorithmMaxCount). */
long td__dnn_truncated;

long td_sim_dnn_truncated(void)
{
    return __atomic_load_n(&td__dnn_truncated, __ATOMIC_RELAXED);
}

/* Whether the queries also list each algorithm's tensor-core version:
 * the descriptor permits tensor ops and the device has tensor cores. */
static int td__tc_versions(cudnnHandle_t h,
                           const struct cudnnConvolutionStruct *c)
{
    return (c->math == CUDNN_TENSOR_OP_MATH ||
            c->math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) &&
           td__sim_cc(h->dev) >= 70;
}

/* Fills up to want results in preference order, then the unsupported.
 * As cuDNN's Developer Guide says of cudnnFindConvolutionForwardAlgorithm
 * (and of the v7 heuristics), the list has "CUDNN_TENSOR_OP_MATH and
 * CUDNN_DEFAULT_MATH versions of algorithms where CUDNN_TENSOR_OP_MATH may
 * be available" (tc): the tensor-op versions first (faster), then the
 * same algorithms in CUDNN_DEFAULT_MATH; its length is at most
 * cudnnGetConvolution*AlgorithmMaxCount, more than the algorithm count. */
static int td__query(int dir, const struct cudnnTensorStruct *x,
                     const struct cudnnFilterStruct *w,
                     const struct cudnnConvolutionStruct *c,
                     const struct cudnnTensorStruct *y, int want,
                     td__perf *out, int tc)
{
    int got = 0, avail = 0, used[16] = {0};
    for (int v = 0; v < (tc ? 2 : 1); v++)
        for (int i = 0; i < 4; i++) {
            int a = td__rank[dir][i];
            long long ws = a < 0 ? -1 : td__dnn_ws(dir, a, x, w, c, y);
            if (ws < 0)
                continue;
            used[a] = 1;
            avail++;
            if (got == want)
                continue;
            out[got] = (td__perf){a, CUDNN_STATUS_SUCCESS,
                                  0.1f * (float)(got + 1), (size_t)ws,
                                  td__dnn_deterministic(dir, a)
                                      ? CUDNN_DETERMINISTIC
                                      : CUDNN_NON_DETERMINISTIC,
                                  v ? CUDNN_DEFAULT_MATH : c->math};
            got++;
        }
    for (int a = 0; a < td__count[dir]; a++) {
        if (used[a])
            continue;
        avail++;
        if (got < want)
            out[got++] = (td__perf){a, CUDNN_STATUS_NOT_SUPPORTED, -1.0f, 0,
                                    CUDNN_NON_DETERMINISTIC, c->math};
    }
    if (got < avail)
        __atomic_add_fetch(&td__dnn_truncated, 1, __ATOMIC_RELAXED);
    return got;
}

static cudnnStatus_t td__max_count(cudnnHandle_t h, int dir, int *count)
{
    cudnnStatus_t st = td__dnn_handle(h, "algorithm max count");
    if (st)
        return st;
    if (!count)
        return CUDNN_STATUS_BAD_PARAM;
    *count = td__count[dir] * (td__sim_cc(h->dev) >= 70 ? 2 : 1);
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionForwardAlgorithmMaxCount(cudnnHandle_t h,
                                                          int *count)
{
    return td__max_count(h, 0, count);
}

cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithmMaxCount(
    cudnnHandle_t h, int *count)
{
    return td__max_count(h, 1, count);
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(
    cudnnHandle_t h, int *count)
{
    return td__max_count(h, 2, count);
}

#define TD__V7(dir, pf, want, got, x, w, c, y)                               \
    do {                                                                     \
        td__perf tmp_[16];                                                   \
        cudnnStatus_t st_ = td__dnn_handle(h, "algorithm query");            \
        if (st_)                                                             \
            return st_;                                                      \
        if (!(got) || !(pf) || (want) < 1)                                   \
            return CUDNN_STATUS_BAD_PARAM;                                   \
        st_ = td__dnn_conv_check("algorithm query", x, w, c, y);             \
        if (st_)                                                             \
            return st_;                                                      \
        *(got) = td__query(dir, x, w, c, y, (want) < 16 ? (want) : 16, tmp_,  \
                           td__tc_versions(h, c));                       \
        for (int i_ = 0; i_ < *(got); i_++) {                                \
            memset(&(pf)[i_], 0, sizeof (pf)[i_]);                           \
            (pf)[i_].algo = tmp_[i_].algo;                                   \
            (pf)[i_].status = tmp_[i_].status;                               \
            (pf)[i_].time = tmp_[i_].time;                                   \
            (pf)[i_].memory = tmp_[i_].memory;                               \
            (pf)[i_].determinism = tmp_[i_].det;                             \
            (pf)[i_].mathType = tmp_[i_].math;                               \
        }                                                                    \
        return CUDNN_STATUS_SUCCESS;                                         \
    } while (0)

cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(
    cudnnHandle_t h, const cudnnTensorDescriptor_t x,
    const cudnnFilterDescriptor_t w, const cudnnConvolutionDescriptor_t c,
    const cudnnTensorDescriptor_t y, const int want, int *got,
    cudnnConvolutionFwdAlgoPerf_t *pf)
{
    TD__V7(0, pf, want, got, x, w, c, y);
}

cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(
    cudnnHandle_t h, const cudnnFilterDescriptor_t w,
    const cudnnTensorDescriptor_t dy, const cudnnConvolutionDescriptor_t c,
    const cudnnTensorDescriptor_t dx, const int want, int *got,
    cudnnConvolutionBwdDataAlgoPerf_t *pf)
{
    TD__V7(1, pf, want, got, dx, w, c, dy);
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(
    cudnnHandle_t h, const cudnnTensorDescriptor_t x,
    const cudnnTensorDescriptor_t dy, const cudnnConvolutionDescriptor_t c,
    const cudnnFilterDescriptor_t dw, const int want, int *got,
    cudnnConvolutionBwdFilterAlgoPerf_t *pf)
{
    TD__V7(2, pf, want, got, x, dw, c, dy);
}

static cudnnStatus_t td__ws_query(int dir, int algo,
                                  const struct cudnnTensorStruct *x,
                                  const struct cudnnFilterStruct *w,
                                  const struct cudnnConvolutionStruct *c,
                                  const struct cudnnTensorStruct *y,
                                  size_t *bytes)
{
    if (!bytes)
        return CUDNN_STATUS_BAD_PARAM;
    cudnnStatus_t st = td__dnn_conv_check("workspace query", x, w, c, y);
    if (st)
        return st;
    long long ws = td__dnn_ws(dir, algo, x, w, c, y);
    if (ws < 0)
        return CUDNN_STATUS_NOT_SUPPORTED;
    *bytes = (size_t)ws;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(
    cudnnHandle_t h, const cudnnTensorDescriptor_t x,
    const cudnnFilterDescriptor_t w, const cudnnConvolutionDescriptor_t c,
    const cudnnTensorDescriptor_t y, cudnnConvolutionFwdAlgo_t algo,
    size_t *bytes)
{
    cudnnStatus_t st = td__dnn_handle(h, "cudnnGetConvolutionForwardWorkspaceSize");
    return st ? st : td__ws_query(0, algo, x, w, c, y, bytes);
}

cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(
    cudnnHandle_t h, const cudnnFilterDescriptor_t w,
    const cudnnTensorDescriptor_t dy, const cudnnConvolutionDescriptor_t c,
    const cudnnTensorDescriptor_t dx, cudnnConvolutionBwdDataAlgo_t algo,
    size_t *bytes)
{
    cudnnStatus_t st = td__dnn_handle(h, "cudnnGetConvolutionBackwardDataWorkspaceSize");
    return st ? st : td__ws_query(1, algo, dx, w, c, dy, bytes);
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(
    cudnnHandle_t h, const cudnnTensorDescriptor_t x,
    const cudnnTensorDescriptor_t dy, const cudnnConvolutionDescriptor_t c,
    const cudnnFilterDescriptor_t dw, cudnnConvolutionBwdFilterAlgo_t algo,
    size_t *bytes)
{
    cudnnStatus_t st = td__dnn_handle(h, "cudnnGetConvolutionBackwardFilterWorkspaceSize");
    return st ? st : td__ws_query(2, algo, x, dw, c, dy, bytes);
}

/* ---- cudnnFind*AlgorithmEx ---------------------------------------------------- */

/* What cuDNN documents for the Ex searches: they run every algorithm on
 * the caller's buffers and workspace, blocking until done, and leave the
 * output (y, dx or dw) and the workspace overwritten; an algorithm that
 * needs more workspace than given is not run (status
 * CUDNN_STATUS_ALLOC_FAILED).  Here the run is one operation on the
 * handle's stream that poisons output and workspace (so a caller relying
 * on them afterwards sees NaN), the race detector sees every operand, and
 * the times are the invented ones of the v7 queries. */
long td__dnn_finds;

long td_sim_dnn_finds(void)
{
    return __atomic_load_n(&td__dnn_finds, __ATOMIC_RELAXED);
}

typedef struct td__poison {
    void *out, *ws;
    size_t out_bytes, ws_bytes;
} td__poison;

static void td__poison_run(void *p)
{
    td__poison *z = p;
    memset(z->out, 0xff, z->out_bytes);
    if (z->ws)
        memset(z->ws, 0xff, z->ws_bytes);
}

static cudnnStatus_t td__find(cudnnHandle_t h, int dir, const char *call,
                              const struct cudnnTensorStruct *x,
                              const struct cudnnFilterStruct *w,
                              const struct cudnnConvolutionStruct *c,
                              const struct cudnnTensorStruct *y,
                              const void *in1, size_t in1_bytes,
                              const void *in2, size_t in2_bytes, void *out,
                              size_t out_bytes, void *ws, size_t wsb,
                              int want, int *got, td__perf *res,
                              const void *caller)
{
    cudnnStatus_t st = td__dnn_handle(h, call);
    if (st)
        return st;
    if (!got || !res || want < 1 || !in1 || !in2 || !out || (wsb && !ws))
        return CUDNN_STATUS_BAD_PARAM;
    if ((st = td__dnn_conv_check(call, x, w, c, y)))
        return st;
    td__poison *z = malloc(sizeof *z);
    if (!z)
        return CUDNN_STATUS_ALLOC_FAILED;
    *z = (td__poison){out, wsb ? ws : NULL, out_bytes, wsb};
    td_sim_range r[4] = {{in1, in1_bytes, 0}, {in2, in2_bytes, 0},
                         {out, out_bytes, 1}, {ws, wsb, 1}};
    if (td__dnn_aliased(call, r, wsb ? 4 : 3, NULL, NULL)) {
        free(z);
        return CUDNN_STATUS_BAD_PARAM;
    }
    cudaError_t e = td_sim_submit(h->s, call, td__poison_run, free, z, r,
                                  wsb ? 4 : 3, caller);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(h->s); /* the search blocks the host */
    if (e == cudaErrorMemoryAllocation) /* td_sim_oom_launch_in */
        return CUDNN_STATUS_ALLOC_FAILED;
    if (e != cudaSuccess)
        return e == cudaErrorInvalidValue ? CUDNN_STATUS_BAD_PARAM
                                          : CUDNN_STATUS_EXECUTION_FAILED;
    __atomic_add_fetch(&td__dnn_finds, 1, __ATOMIC_RELAXED);
    *got = td__query(dir, x, w, c, y, want < 16 ? want : 16, res,
                     td__tc_versions(h, c));
    for (int i = 0; i < *got; i++)
        if (res[i].status == CUDNN_STATUS_SUCCESS && res[i].memory > wsb)
            res[i].status = CUDNN_STATUS_ALLOC_FAILED;
    return CUDNN_STATUS_SUCCESS;
}

#define TD__COPY_PERF(pf, got, tmp)                                          \
    for (int i_ = 0; i_ < (got); i_++) {                                     \
        memset(&(pf)[i_], 0, sizeof (pf)[i_]);                               \
        (pf)[i_].algo = (tmp)[i_].algo;                                      \
        (pf)[i_].status = (tmp)[i_].status;                                  \
        (pf)[i_].time = (tmp)[i_].time;                                      \
        (pf)[i_].memory = (tmp)[i_].memory;                                  \
        (pf)[i_].determinism = (tmp)[i_].det;                                \
        (pf)[i_].mathType = (tmp)[i_].math;                                  \
    }

cudnnStatus_t cudnnFindConvolutionForwardAlgorithmEx(
    cudnnHandle_t h, const cudnnTensorDescriptor_t xd, const void *x,
    const cudnnFilterDescriptor_t wd, const void *w,
    const cudnnConvolutionDescriptor_t cd, const cudnnTensorDescriptor_t yd,
    void *y, const int want, int *got, cudnnConvolutionFwdAlgoPerf_t *pf,
    void *ws, size_t wsb)
{
    td__perf tmp[16];
    if (!xd || !wd || !yd || !pf)
        return CUDNN_STATUS_BAD_PARAM;
    cudnnStatus_t st = td__find(h, 0, "cudnnFindConvolutionForwardAlgorithmEx",
        xd, wd, cd, yd, x, td__dnn_span(xd), w, td__dnn_fspan(wd), y,
        td__dnn_span(yd), ws, wsb, want, got, tmp,
        __builtin_return_address(0));
    if (st)
        return st;
    TD__COPY_PERF(pf, *got, tmp);
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnFindConvolutionBackwardDataAlgorithmEx(
    cudnnHandle_t h, const cudnnFilterDescriptor_t wd, const void *w,
    const cudnnTensorDescriptor_t dyd, const void *dy,
    const cudnnConvolutionDescriptor_t cd, const cudnnTensorDescriptor_t dxd,
    void *dx, const int want, int *got, cudnnConvolutionBwdDataAlgoPerf_t *pf,
    void *ws, size_t wsb)
{
    td__perf tmp[16];
    if (!wd || !dyd || !dxd || !pf)
        return CUDNN_STATUS_BAD_PARAM;
    cudnnStatus_t st = td__find(h, 1,
        "cudnnFindConvolutionBackwardDataAlgorithmEx", dxd, wd, cd, dyd, w,
        td__dnn_fspan(wd), dy, td__dnn_span(dyd), dx, td__dnn_span(dxd), ws,
        wsb, want, got, tmp, __builtin_return_address(0));
    if (st)
        return st;
    TD__COPY_PERF(pf, *got, tmp);
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnFindConvolutionBackwardFilterAlgorithmEx(
    cudnnHandle_t h, const cudnnTensorDescriptor_t xd, const void *x,
    const cudnnTensorDescriptor_t dyd, const void *dy,
    const cudnnConvolutionDescriptor_t cd, const cudnnFilterDescriptor_t dwd,
    void *dw, const int want, int *got,
    cudnnConvolutionBwdFilterAlgoPerf_t *pf, void *ws, size_t wsb)
{
    td__perf tmp[16];
    if (!xd || !dyd || !dwd || !pf)
        return CUDNN_STATUS_BAD_PARAM;
    cudnnStatus_t st = td__find(h, 2,
        "cudnnFindConvolutionBackwardFilterAlgorithmEx", xd, dwd, cd, dyd, x,
        td__dnn_span(xd), dy, td__dnn_span(dyd), dw, td__dnn_fspan(dwd), ws,
        wsb, want, got, tmp, __builtin_return_address(0));
    if (st)
        return st;
    TD__COPY_PERF(pf, *got, tmp);
    return CUDNN_STATUS_SUCCESS;
}
