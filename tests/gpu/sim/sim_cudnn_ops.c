/* sim_cudnn_ops.c - the simulated cuDNN's arithmetic, from the definitions
 * in cuDNN's documentation, with plain loops and double accumulators:
 * convolutions and tensor adds, and how every operation runs.
 *
 * Owns: convolution forward, backward data, backward filter and bias
 * (cross-correlation or convolution mode, padding, stride, dilation),
 * cudnnAddTensor (broadcasting A's size-1 dimensions), and what every
 * operation shares with sim_cudnn_norm.c's (batch norm, activation,
 * pooling): the operation record and its submission (sim_cudnn_int.h),
 * the overlap check, the 16-bit operands' fp32 copies and the dispatch
 * to each operation's arithmetic.  Every call blends
 * y = alpha * result + beta * y and reads y only when beta is not 0
 * (cuDNN's rule, which lets y hold NaN).
 * Scalars and descriptors are copied at the call, as cuDNN does; the
 * convolution's workspace must be at least what the algorithm needs
 * (sim_cudnn.c) and is scribbled on, so a workspace shared between
 * streams shows up in the race detector.
 * Operands may not overlap an output (td__dnn_aliased): cuDNN's API
 * reference allows in-place operation only where a routine says so -
 * here cudnnActivationForward (x == y) and cudnnActivationBackward
 * (dy == dx), each with identical descriptors (sim_cudnn_norm.c) -, so
 * any other overlap, and a partial one anywhere, is refused with
 * CUDNN_STATUS_BAD_PARAM and a diagnostic (a GPU would compute garbage
 * without a word).
 * Convolutions compute in TF32 when the descriptor's math type allows
 * tensor cores (CUDNN_TENSOR_OP_MATH, _ALLOW_CONVERSION, and
 * CUDNN_DEFAULT_MATH, which cuDNN documents as permitting TF32 on Ampere)
 * on a device of compute capability 8.0 or newer: both inputs of every
 * product are rounded to TF32 (kernels/tf32.h, the one piece shared with
 * the project; its unit test checks it by hand), the sums stay as below.
 * CUDNN_FMA_MATH, or an older device, computes on the fp32 values.  Every
 * convolution is counted by its math type (td_sim_dnn_convs,
 * td_sim_dnn_tf32).  Bias, batch norm, activations and pools are not
 * matrix products: always fp32.
 * 16-bit data (CUDNN_DATA_HALF, CUDNN_DATA_BFLOAT16; the convolutions'
 * configurations PSEUDO_HALF and PSEUDO_BFLOAT16, sim_cudnn.c): every
 * 16-bit operand is widened exactly to fp32 before the arithmetic above
 * runs unchanged (products of 16-bit values are exact in fp32, sums as
 * above), and every element stored is rounded to the 16-bit type
 * (kernels/bf16.h, fp16.h: to nearest even); the blend's old value is
 * read from the 16-bit tensor.  bf16 convolutions need compute
 * capability 8.0 (ARCH_MISMATCH below); convolutions are also counted by
 * data type (td_sim_dnn_typed).
 * Never does: share code with the backends or the reference layers in
 * tests/ (those check this file), or support doubles.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "fp16.h"
#include "sim_cudnn_int.h"
#include "tf32.h"

static int td__is16(cudnnDataType_t dt)
{
    return dt == CUDNN_DATA_HALF || dt == CUDNN_DATA_BFLOAT16;
}

/* Operand `slot` is n elements of type dt (nothing to do for fp32). */
void td__dnn_mark(td__dop *o, int slot, cudnnDataType_t dt, size_t n)
{
    if (td__is16(dt))
        o->lt[slot] = dt, o->ln[slot] = n;
}

static float *td__widen(const void *p, cudnnDataType_t dt, size_t n)
{
    float *f = malloc(n * sizeof *f + 1);
    if (!f)
        abort();
    for (size_t i = 0; i < n; i++)
        f[i] = dt == CUDNN_DATA_HALF ? td_f16_to_f32(((const td_f16 *)p)[i])
                                     : td_bf16_to_f32(((const td_bf16 *)p)[i]);
    return f;
}

static void td__narrow(const float *f, void *p, cudnnDataType_t dt, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (dt == CUDNN_DATA_HALF)
            ((td_f16 *)p)[i] = td_f16_from_f32(f[i]);
        else
            ((td_bf16 *)p)[i] = td_bf16_from_f32(f[i]);
    }
}

/* ---- convolution ------------------------------------------------------------ */

/* A convolution's input value as its math reads it. */
static inline float td__in(const td__dop *o, float v)
{
    return o->tf32 ? td_tf32_round(v) : v;
}

/* Outputs p in [*lo, *hi) whose input row p * stride - pad + off lies in
 * [0, in): the loops below never test bounds per product. */
static void td__range(int out, int stride, int pad, int off, int in, int *lo,
                      int *hi)
{
    int a = pad - off, b = in - 1 + pad - off;
    *lo = a <= 0 ? 0 : (a + stride - 1) / stride;
    *hi = b < 0 ? 0 : b / stride + 1;
    if (*hi > out)
        *hi = out;
}

/* Visits every product of the convolution for (n, k, c, r, s): BODY sees
 * p, q, ih, iw and wv (the filter value, flipped in CUDNN_CONVOLUTION
 * mode). */
#define TD__CONV_LOOP(o, BODY)                                               \
    for (int n = 0; n < (o)->x.n; n++)                                       \
        for (int k = 0; k < (o)->w.k; k++)                                   \
            for (int c = 0; c < (o)->x.c; c++)                               \
                for (int r = 0; r < (o)->w.h; r++)                           \
                    for (int s = 0; s < (o)->w.w; s++) {                     \
                        int fr = (o)->c.mode == CUDNN_CONVOLUTION            \
                                     ? (o)->w.h - 1 - r : r;                 \
                        int fs = (o)->c.mode == CUDNN_CONVOLUTION            \
                                     ? (o)->w.w - 1 - s : s;                 \
                        size_t wi = td__dnn_widx(&(o)->w, k, c, fr, fs);     \
                        int p0, p1, q0, q1;                                  \
                        td__range((o)->y.h, (o)->c.u, (o)->c.ph,             \
                                  r * (o)->c.dh, (o)->x.h, &p0, &p1);        \
                        td__range((o)->y.w, (o)->c.v, (o)->c.pw,             \
                                  s * (o)->c.dw, (o)->x.w, &q0, &q1);        \
                        for (int p = p0; p < p1; p++) {                      \
                            int ih = p * (o)->c.u - (o)->c.ph + r * (o)->c.dh; \
                            for (int q = q0; q < q1; q++) {                  \
                                int iw = q * (o)->c.v - (o)->c.pw +          \
                                         s * (o)->c.dw;                      \
                                BODY                                         \
                            }                                                \
                        }                                                    \
                    }

/* n zeroed double accumulators (the process aborts without memory). */
static double *td__acc_new(size_t n)
{
    double *acc = calloc(n, sizeof *acc);
    if (!acc)
        abort();
    return acc;
}

/* OUT, laid out as t, = alpha * acc + beta * OUT; acc is dense NCHW in
 * t's dimensions.  Frees acc. */
static void td__blend_acc(td__dop *o, const td__t *t, double *acc)
{
#define IDX(i0, i1, i2, i3) ((((size_t)(i0) * t->c + (i1)) * t->h + (i2)) * t->w + (i3))
    for (int n = 0; n < t->n; n++)
        for (int c = 0; c < t->c; c++)
            for (int h = 0; h < t->h; h++)
                for (int w = 0; w < t->w; w++) {
                    float *d = &o->OUT[AT(*t, n, c, h, w)];
                    *d = td__dnn_blend(o->alpha, acc[IDX(n, c, h, w)],
                                       o->beta, d);
                }
#undef IDX
    free(acc);
}

static void td__conv_fwd(td__dop *o)
{
    double *acc = td__acc_new((size_t)o->y.n * o->y.c * o->y.h * o->y.w);
#define IDX(i0, i1, i2, i3) ((((size_t)(i0) * o->y.c + (i1)) * o->y.h + (i2)) * o->y.w + (i3))
    TD__CONV_LOOP(o, { acc[IDX(n, k, p, q)] +=
                           (double)td__in(o, o->W[wi]) *
                           td__in(o, o->X[AT(o->x, n, c, ih, iw)]); })
#undef IDX
    td__blend_acc(o, &o->y, acc);
}

static void td__conv_bwd_data(td__dop *o)
{
    double *acc = td__acc_new((size_t)o->x.n * o->x.c * o->x.h * o->x.w);
#define IDX(i0, i1, i2, i3) ((((size_t)(i0) * o->x.c + (i1)) * o->x.h + (i2)) * o->x.w + (i3))
    TD__CONV_LOOP(o, { acc[IDX(n, c, ih, iw)] +=
                           (double)td__in(o, o->W[wi]) *
                           td__in(o, o->DY[AT(o->y, n, k, p, q)]); })
#undef IDX
    td__blend_acc(o, &o->x, acc);
}

static void td__conv_bwd_filter(td__dop *o)
{
    size_t nw = (size_t)o->w.k * o->w.c * o->w.h * o->w.w;
    double *acc = td__acc_new(nw);
    TD__CONV_LOOP(o, { acc[wi] +=
                           (double)td__in(o, o->DY[AT(o->y, n, k, p, q)]) *
                           td__in(o, o->X[AT(o->x, n, c, ih, iw)]); })
    for (size_t i = 0; i < nw; i++)
        o->OUT[i] = td__dnn_blend(o->alpha, acc[i], o->beta, &o->OUT[i]);
    free(acc);
}

static void td__conv_bias(td__dop *o)
{
    for (int k = 0; k < o->y.c; k++) {
        double acc = 0;
        for (int n = 0; n < o->y.n; n++)
            for (int p = 0; p < o->y.h; p++)
                for (int q = 0; q < o->y.w; q++)
                    acc += o->DY[AT(o->y, n, k, p, q)];
        float *d = &o->OUT[AT(o->p, 0, k, 0, 0)];
        *d = td__dnn_blend(o->alpha, acc, o->beta, d);
    }
}

/* y (= C) = alpha * A + beta * C; A's size-1 dimensions broadcast. */
static void td__add(td__dop *o)
{
    for (int n = 0; n < o->y.n; n++)
        for (int c = 0; c < o->y.c; c++)
            for (int h = 0; h < o->y.h; h++)
                for (int w = 0; w < o->y.w; w++) {
                    float a = o->X[AT(o->x, o->x.n == 1 ? 0 : n,
                                      o->x.c == 1 ? 0 : c,
                                      o->x.h == 1 ? 0 : h,
                                      o->x.w == 1 ? 0 : w)];
                    float *d = &o->OUT[AT(o->y, n, c, h, w)];
                    *d = td__dnn_blend(o->alpha, a, o->beta, d);
                }
}

static void td__compute(td__dop *o);

/* 16-bit operands through fp32 copies (see the top), then td__compute.
 * The operation's own pointers are put back after: a graph node (stream
 * capture, sim_graph.c) runs the same operation again at every launch. */
static void td__run(void *p)
{
    td__dop *o = p;
    const float **in[3] = {&o->X, &o->W, &o->DY};
    const float *orig[3] = {o->X, o->W, o->DY};
    float *tmp[4] = {NULL, NULL, NULL, NULL};
    void *out = o->OUT;
    if (o->ws && o->wsb) /* the algorithm's scratch */
        memset(o->ws, 0xa5, o->wsb < 65536 ? o->wsb : 65536);
    for (int i = 0; i < 3; i++)
        if (o->lt[i])
            *in[i] = tmp[i] = td__widen(*in[i], o->lt[i], o->ln[i]);
    if (o->lt[LP_OUT])
        o->OUT = tmp[LP_OUT] = td__widen(out, o->lt[LP_OUT], o->ln[LP_OUT]);
    td__compute(o);
    if (o->lt[LP_OUT])
        td__narrow(tmp[LP_OUT], out, o->lt[LP_OUT], o->ln[LP_OUT]);
    for (int i = 0; i < 3; i++)
        *in[i] = orig[i];
    o->OUT = out;
    for (int i = 0; i < 4; i++)
        free(tmp[i]);
}

static void td__compute(td__dop *o)
{
    switch (o->kind) {
    case OP_CONV_FWD: td__conv_fwd(o); break;
    case OP_CONV_BWD_DATA: td__conv_bwd_data(o); break;
    case OP_CONV_BWD_FILTER: td__conv_bwd_filter(o); break;
    case OP_CONV_BIAS: td__conv_bias(o); break;
    case OP_ADD: td__add(o); break;
    case OP_BN_TRAIN: case OP_BN_INFER: td__dnn_bn_fwd(o); break;
    case OP_BN_BWD: td__dnn_bn_bwd(o); break;
    case OP_ACT_FWD: case OP_ACT_BWD: td__dnn_act(o); break;
    default: td__dnn_pool(o); break;
    }
}

/* ---- submission --------------------------------------------------------------- */

static int td__overlaps(const td_sim_range *a, const td_sim_range *b)
{
    const char *pa = a->p, *pb = b->p;
    return pa < pb + b->bytes && pb < pa + a->bytes;
}

int td__dnn_aliased(const char *call, const td_sim_range *r, int n,
                    const void *ok_in, const void *ok_out)
{
    for (int i = 0; i < n; i++) {
        if (!r[i].write || !r[i].p || !r[i].bytes)
            continue;
        for (int j = 0; j < n; j++) {
            if (j == i || !r[j].p || !r[j].bytes ||
                !td__overlaps(&r[i], &r[j]))
                continue;
            if (ok_out && ok_in == ok_out && r[i].p == ok_out &&
                r[j].p == ok_in && r[i].bytes == r[j].bytes)
                continue; /* the routine's documented in-place case */
            td__sim_say("%s: output operand %d (%p, %zu bytes) overlaps "
                        "operand %d (%p, %zu bytes): cuDNN documents no "
                        "in-place operation for these operands", call, i,
                        r[i].p, r[i].bytes, j, r[j].p, r[j].bytes);
            return 1;
        }
    }
    return 0;
}

void td__dnn_use(td__sub *s, const void *p, size_t bytes, int write)
{
    if (p && bytes)
        s->r[s->n++] = (td_sim_range){p, bytes, write};
}

cudnnStatus_t td__dnn_submit(cudnnHandle_t h, const char *what,
                             td__dop *o, td__sub *s, const void *caller)
{
    if (td__dnn_aliased(what, s->r, s->n, s->ok_in, s->ok_out)) {
        free(o);
        return CUDNN_STATUS_BAD_PARAM;
    }
    cudaError_t e = td_sim_submit(h->s, what, td__run, free, o, s->r, s->n,
                                  caller);
    if (e == cudaSuccess)
        return CUDNN_STATUS_SUCCESS;
    if (e == cudaErrorMemoryAllocation) /* td_sim_oom_launch_in */
        return CUDNN_STATUS_ALLOC_FAILED;
    return e == cudaErrorInvalidValue ? CUDNN_STATUS_BAD_PARAM
                                      : CUDNN_STATUS_EXECUTION_FAILED;
}

/* Data the simulator computes on: fp32, or 16-bit through fp32 copies. */
int td__dnn_data(const td__t *t)
{
    return t->dt == CUDNN_DATA_FLOAT || td__is16(t->dt);
}

/* Descriptor of per-channel parameters for data tensor x: 1 x C x 1 x 1. */
int td__dnn_chan(const td__t *p, const td__t *x)
{
    return p && p->set && p->n == 1 && p->c == x->c && p->h == 1 &&
           p->w == 1;
}

td__dop *td__dnn_new(int kind, const void *alpha, const void *beta)
{
    td__dop *o = calloc(1, sizeof *o);
    if (o) {
        o->kind = kind;
        o->alpha = *(const float *)alpha;
        o->beta = *(const float *)beta;
    }
    return o;
}

/* Convolutions by data type (td_sim_dnn_typed). */
static long td__dnn_typed[3];

long td_sim_dnn_typed(int t)
{
    return t >= 0 && t < 3 ? __atomic_load_n(&td__dnn_typed[t],
                                             __ATOMIC_RELAXED)
                           : 0;
}

static cudnnStatus_t td__conv(cudnnHandle_t h, int kind, const char *call,
                              const void *alpha, const void *beta,
                              const td__t *x, const struct cudnnFilterStruct *w,
                              const struct cudnnConvolutionStruct *c,
                              const td__t *y, int dir, int algo, void *ws,
                              size_t wsb, const void *in1, const void *in2,
                              void *out, const void *caller)
{
    TD__START(call);
    cudnnStatus_t st = td__dnn_conv_check(call, x, w, c, y);
    if (st)
        return st;
    long long need = td__dnn_ws(dir, algo, x, w, c, y);
    if (need < 0) {
        td__sim_say("%s: algorithm %d does not support this shape", call,
                    algo);
        return CUDNN_STATUS_NOT_SUPPORTED;
    }
    if ((size_t)need > wsb || (need > 0 && !ws)) {
        td__sim_say("%s: algorithm %d needs a workspace of %lld bytes, got "
                    "%zu", call, algo, need, wsb);
        return CUDNN_STATUS_BAD_PARAM;
    }
    if (x->dt == CUDNN_DATA_BFLOAT16 && td__sim_cc(h->dev) < 80) {
        td__sim_say("%s: BFLOAT16 convolutions need compute capability 8.0; "
                    "device %d is %d.%d", call, h->dev,
                    td__sim_cc(h->dev) / 10, td__sim_cc(h->dev) % 10);
        return CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH;
    }
    td__dop *o = td__dnn_new(kind, alpha, beta);
    if (!o)
        return CUDNN_STATUS_ALLOC_FAILED;
    if (!td__dnn_deterministic(dir, algo))
        __atomic_add_fetch(&td__dnn_nondet, 1, __ATOMIC_RELAXED);
    o->x = *x, o->w = *w, o->c = *c, o->y = *y;
    o->ws = ws, o->wsb = (size_t)need;
    /* TF32 rounds fp32 inputs; 16-bit inputs are exact in a tensor core */
    o->tf32 = c->math != CUDNN_FMA_MATH && td__sim_cc(h->dev) >= 80 &&
              x->dt == CUDNN_DATA_FLOAT;
    size_t nx = td__dnn_elems(x), ny = td__dnn_elems(y);
    size_t nw = (size_t)w->k * w->c * w->h * w->w;
    td__sub s = {.n = 0};
    td__dnn_use(&s, ws, (size_t)need, 1);
    if (kind == OP_CONV_FWD) {
        o->X = in1, o->W = in2, o->OUT = out;
        td__dnn_mark(o, LP_X, x->dt, nx), td__dnn_mark(o, LP_W, w->dt, nw);
        td__dnn_mark(o, LP_OUT, y->dt, ny);
        td__dnn_use(&s, in1, td__dnn_span(x), 0);
        td__dnn_use(&s, in2, td__dnn_fspan(w), 0);
        td__dnn_use(&s, out, td__dnn_span(y), 1);
    } else if (kind == OP_CONV_BWD_DATA) {
        o->W = in1, o->DY = in2, o->OUT = out;
        td__dnn_mark(o, LP_W, w->dt, nw), td__dnn_mark(o, LP_DY, y->dt, ny);
        td__dnn_mark(o, LP_OUT, x->dt, nx);
        td__dnn_use(&s, in1, td__dnn_fspan(w), 0);
        td__dnn_use(&s, in2, td__dnn_span(y), 0);
        td__dnn_use(&s, out, td__dnn_span(x), 1);
    } else {
        o->X = in1, o->DY = in2, o->OUT = out;
        td__dnn_mark(o, LP_X, x->dt, nx), td__dnn_mark(o, LP_DY, y->dt, ny);
        td__dnn_mark(o, LP_OUT, w->dt, nw);
        td__dnn_use(&s, in1, td__dnn_span(x), 0);
        td__dnn_use(&s, in2, td__dnn_span(y), 0);
        td__dnn_use(&s, out, td__dnn_fspan(w), 1);
    }
    int tf32 = o->tf32;
    cudnnStatus_t rs = td__dnn_submit(h, call, o, &s, caller);
    if (rs == CUDNN_STATUS_SUCCESS) {
        td__sim_math_count(0, (int)c->math, tf32);
        int t = x->dt == CUDNN_DATA_BFLOAT16 ? TD_SIM_BF16
                : x->dt == CUDNN_DATA_HALF ? TD_SIM_F16 : TD_SIM_F32;
        __atomic_add_fetch(&td__dnn_typed[t], 1, __ATOMIC_RELAXED);
        td__dnn_count_layout(x, w, y);
    }
    return rs;
}

cudnnStatus_t cudnnConvolutionForward(
    cudnnHandle_t h, const void *alpha, const cudnnTensorDescriptor_t xd,
    const void *x, const cudnnFilterDescriptor_t wd, const void *w,
    const cudnnConvolutionDescriptor_t cd, cudnnConvolutionFwdAlgo_t algo,
    void *ws, size_t wsb, const void *beta, const cudnnTensorDescriptor_t yd,
    void *y)
{
    return td__conv(h, OP_CONV_FWD, "cudnnConvolutionForward", alpha, beta,
                    xd, wd, cd, yd, 0, algo, ws, wsb, x, w, y,
                    __builtin_return_address(0));
}

cudnnStatus_t cudnnConvolutionBackwardData(
    cudnnHandle_t h, const void *alpha, const cudnnFilterDescriptor_t wd,
    const void *w, const cudnnTensorDescriptor_t dyd, const void *dy,
    const cudnnConvolutionDescriptor_t cd, cudnnConvolutionBwdDataAlgo_t algo,
    void *ws, size_t wsb, const void *beta, const cudnnTensorDescriptor_t dxd,
    void *dx)
{
    return td__conv(h, OP_CONV_BWD_DATA, "cudnnConvolutionBackwardData",
                    alpha, beta, dxd, wd, cd, dyd, 1, algo, ws, wsb, w, dy,
                    dx, __builtin_return_address(0));
}

cudnnStatus_t cudnnConvolutionBackwardFilter(
    cudnnHandle_t h, const void *alpha, const cudnnTensorDescriptor_t xd,
    const void *x, const cudnnTensorDescriptor_t dyd, const void *dy,
    const cudnnConvolutionDescriptor_t cd,
    cudnnConvolutionBwdFilterAlgo_t algo, void *ws, size_t wsb,
    const void *beta, const cudnnFilterDescriptor_t dwd, void *dw)
{
    return td__conv(h, OP_CONV_BWD_FILTER, "cudnnConvolutionBackwardFilter",
                    alpha, beta, xd, dwd, cd, dyd, 2, algo, ws, wsb, x, dy,
                    dw, __builtin_return_address(0));
}

cudnnStatus_t cudnnConvolutionBackwardBias(cudnnHandle_t h, const void *alpha,
                                           const cudnnTensorDescriptor_t dyd,
                                           const void *dy, const void *beta,
                                           const cudnnTensorDescriptor_t dbd,
                                           void *db)
{
    TD__START("cudnnConvolutionBackwardBias");
    if (!dyd || !dyd->set || !td__dnn_chan(dbd, dyd) || !td__dnn_data(dyd) ||
        dbd->dt != dyd->dt)
        return CUDNN_STATUS_BAD_PARAM;
    td__dop *o = td__dnn_new(OP_CONV_BIAS, alpha, beta);
    if (!o)
        return CUDNN_STATUS_ALLOC_FAILED;
    o->y = *dyd, o->p = *dbd, o->DY = dy, o->OUT = db;
    td__dnn_mark(o, LP_DY, dyd->dt, td__dnn_elems(dyd));
    td__dnn_mark(o, LP_OUT, dbd->dt, td__dnn_elems(dbd));
    td__sub s = {.n = 0};
    td__dnn_use(&s, dy, td__dnn_span(dyd), 0);
    td__dnn_use(&s, db, td__dnn_span(dbd), 1);
    return td__dnn_submit(h, "cudnnConvolutionBackwardBias", o, &s,
                          __builtin_return_address(0));
}

/* x (read) and y (written) as operands of o: their 16-bit marks, and
 * their spans in s in that order. */
void td__dnn_xy(td__dop *o, td__sub *s, const td__t *xd, const void *x,
                const td__t *yd, const void *y)
{
    td__dnn_mark(o, LP_X, xd->dt, td__dnn_elems(xd));
    td__dnn_mark(o, LP_OUT, yd->dt, td__dnn_elems(yd));
    td__dnn_use(s, x, td__dnn_span(xd), 0);
    td__dnn_use(s, y, td__dnn_span(yd), 1);
}

cudnnStatus_t cudnnAddTensor(cudnnHandle_t h, const void *alpha,
                             const cudnnTensorDescriptor_t ad, const void *A,
                             const void *beta,
                             const cudnnTensorDescriptor_t cd, void *C)
{
    TD__START("cudnnAddTensor");
    if (!ad || !cd || !ad->set || !cd->set || !td__dnn_data(cd) ||
        ad->dt != cd->dt ||
        (ad->n != cd->n && ad->n != 1) || (ad->c != cd->c && ad->c != 1) ||
        (ad->h != cd->h && ad->h != 1) || (ad->w != cd->w && ad->w != 1))
        return CUDNN_STATUS_BAD_PARAM;
    td__dop *o = td__dnn_new(OP_ADD, alpha, beta);
    if (!o)
        return CUDNN_STATUS_ALLOC_FAILED;
    o->x = *ad, o->y = *cd, o->X = A, o->OUT = C;
    td__sub s = {.n = 0};
    td__dnn_xy(o, &s, ad, A, cd, C);
    return td__dnn_submit(h, "cudnnAddTensor", o, &s,
                          __builtin_return_address(0));
}
