/* sim_cudnn_bnex.c - the simulated cuDNN's extended batch norm training
 * calls: cudnnBatchNormalizationForwardTrainingEx and BackwardEx with
 * their workspace and reserve-space size queries.
 *
 * Owns: the fused operations bnOps CUDNN_BATCHNORM_OPS_BN_ACTIVATION
 * (y = relu(bn(x))) and CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION
 * (y = relu(bn(x) + z)) and their backward (the ReLU's mask taken from y,
 * dz = the masked dy for the add, then batch norm's backward of the
 * masked dy), the conditions under which they are accepted, and the
 * reserve space's contents.
 *
 * Conditions (issue 15's reading of the cuDNN 8.x API reference for the
 * semi-persistent NHWC kernel; the reference's text could not be read
 * from this workplace, the conditions are the ones it was remembered to
 * state, docs/cuda.md): for bnOps other than CUDNN_BATCHNORM_OPS_BN,
 *   - mode CUDNN_BATCHNORM_SPATIAL_PERSISTENT,
 *   - x, y, z, dy, dz, dx fully packed NHWC (C stride 1) with identical
 *     shapes, of type CUDNN_DATA_HALF (BFLOAT16 refused: not listed),
 *   - C a multiple of 4,
 *   - a workspace and a reserve space of at least the queried sizes,
 *   - an activation descriptor, of mode CUDNN_ACTIVATION_RELU (the
 *     simulator's subset, as cudnnActivationForward's);
 * anything else is CUDNN_STATUS_NOT_SUPPORTED (or BAD_PARAM for missing
 * or mismatched operands) with a diagnostic naming what is wrong.
 * bnOps CUDNN_BATCHNORM_OPS_BN is the non-extended call (whatever the
 * workspace), as documented for a NULL workspace.
 *
 * Numerics: the batch norm's sums, statistics and running averages are
 * exactly sim_cudnn_norm.c's (same loops, same order, double
 * accumulators), so BN_ACTIVATION's y equals batch norm then ReLU
 * bitwise (the ReLU of a rounded value is the rounded ReLU).  The fused
 * kernel rounds once: y = half(relu(float(bn) + z)), where the unfused
 * sequence rounds bn's output to half before the add; BN_ADD_ACTIVATION
 * can therefore differ from the sequence by the rounding of bn's output.
 * The backward equals ReLU backward, the add's pass-through and batch
 * norm backward bitwise (masking a half by 0 is exact).
 *
 * Reserve space: the forward writes a tag (magic, bnOps, x's address)
 * and the ReLU mask of y, one bit per element; the backward checks the
 * tag and that the mask is y's, and on any mismatch says so, counts it
 * (td_sim_bnex_bad_reserve) and fills dx with NaN: a backward given a
 * reserve space its forward did not write computes garbage on a GPU.
 *
 * Never does: share code with the backends, or any other bnOps mode
 * (per-activation), or doubles.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fp16.h"
#include "sim_bnex.h"
#include "sim_cudnn_int.h"

typedef struct cudnnTensorStruct td__t;

#define TD__BNEX_MAGIC 0x58454e42u /* "BNEX" */
#define TD__BNEX_HDR 64            /* tag, then the mask */

typedef struct td__bnex_tag {
    uint32_t magic;
    uint32_t ops;
    const void *x;
} td__bnex_tag;

static long td__bnex_n[2];
static long td__bnex_bad;

long td_sim_bnex_calls(int bwd)
{
    return __atomic_load_n(&td__bnex_n[bwd ? 1 : 0], __ATOMIC_RELAXED);
}

long td_sim_bnex_bad_reserve(void)
{
    return __atomic_load_n(&td__bnex_bad, __ATOMIC_RELAXED);
}

/* ---- conditions -------------------------------------------------------- */

static int td__nhwc_packed(const td__t *t)
{
    return t->set && t->cs == 1 && t->ws == t->c && t->hs == t->w * t->c &&
           t->ns == t->h * t->w * t->c;
}

static int td__same_shape(const td__t *a, const td__t *b)
{
    return a->set && b->set && a->n == b->n && a->c == b->c &&
           a->h == b->h && a->w == b->w && a->dt == b->dt &&
           a->ns == b->ns && a->cs == b->cs && a->hs == b->hs &&
           a->ws == b->ws;
}

/* One data operand of a fused call: 0 or a status, with a diagnostic. */
static cudnnStatus_t td__operand(const char *call, const char *name,
                                 const td__t *t, const td__t *x)
{
    if (!t || !t->set) {
        td__sim_say("%s: %s has no descriptor", call, name);
        return CUDNN_STATUS_BAD_PARAM;
    }
    if (t->dt != CUDNN_DATA_HALF) {
        td__sim_say("%s: %s is of type %d: the fused NHWC batch norm takes "
                    "CUDNN_DATA_HALF only", call, name, (int)t->dt);
        return CUDNN_STATUS_NOT_SUPPORTED;
    }
    if (!td__nhwc_packed(t)) {
        td__sim_say("%s: %s (%dx%dx%dx%d strides %d,%d,%d,%d) is not fully "
                    "packed NHWC, as the fused batch norm requires", call,
                    name, t->n, t->c, t->h, t->w, t->ns, t->cs, t->hs, t->ws);
        return CUDNN_STATUS_NOT_SUPPORTED;
    }
    if (x && !td__same_shape(t, x)) {
        td__sim_say("%s: %s's descriptor differs from xDesc's", call, name);
        return CUDNN_STATUS_BAD_PARAM;
    }
    return CUDNN_STATUS_SUCCESS;
}

/* The conditions common to the fused calls and their size queries. */
static cudnnStatus_t td__fused_ok(const char *call, cudnnBatchNormMode_t mode,
                                  cudnnBatchNormOps_t ops, const td__t *x,
                                  const td__t *p,
                                  const struct cudnnActivationStruct *a)
{
    if (ops != CUDNN_BATCHNORM_OPS_BN_ACTIVATION &&
        ops != CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION) {
        td__sim_say("%s: bnOps %d is not one of BN, BN_ACTIVATION, "
                    "BN_ADD_ACTIVATION", call, (int)ops);
        return CUDNN_STATUS_BAD_PARAM;
    }
    if (mode != CUDNN_BATCHNORM_SPATIAL_PERSISTENT) {
        td__sim_say("%s: bnOps %d needs mode CUDNN_BATCHNORM_SPATIAL_"
                    "PERSISTENT (mode is %d)", call, (int)ops, (int)mode);
        return CUDNN_STATUS_NOT_SUPPORTED;
    }
    cudnnStatus_t st = td__operand(call, "xDesc", x, NULL);
    if (st)
        return st;
    if (x->c % 4) {
        td__sim_say("%s: C = %d is not a multiple of 4, as bnOps %d "
                    "requires", call, x->c, (int)ops);
        return CUDNN_STATUS_NOT_SUPPORTED;
    }
    if (p && (!p->set || p->n != 1 || p->c != x->c || p->h != 1 ||
              p->w != 1 || p->dt != CUDNN_DATA_FLOAT)) {
        td__sim_say("%s: the scale/bias descriptor must be FLOAT 1x%dx1x1",
                    call, x->c);
        return CUDNN_STATUS_BAD_PARAM;
    }
    if (!a || !a->set) {
        td__sim_say("%s: bnOps %d needs an activation descriptor", call,
                    (int)ops);
        return CUDNN_STATUS_BAD_PARAM;
    }
    if (a->mode != CUDNN_ACTIVATION_RELU) {
        td__sim_say("%s: activation mode %d: the simulator fuses ReLU only",
                    call, (int)a->mode);
        return CUDNN_STATUS_NOT_SUPPORTED;
    }
    return CUDNN_STATUS_SUCCESS;
}

static size_t td__elems(const td__t *x)
{
    return (size_t)x->n * x->c * x->h * x->w;
}

/* The simulator's own figures: per-channel partial sums (two doubles a
 * channel, 256 blocks) for the workspace; the tag and one mask bit an
 * element for the reserve space. */
static size_t td__ws_bytes(const td__t *x)
{
    return (size_t)x->c * 2 * sizeof(double) * 256;
}

static size_t td__rs_bytes(const td__t *x)
{
    return TD__BNEX_HDR + (td__elems(x) + 7) / 8;
}

cudnnStatus_t cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
    cudnnHandle_t h, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t ops,
    const cudnnTensorDescriptor_t xd, const cudnnTensorDescriptor_t zd,
    const cudnnTensorDescriptor_t yd, const cudnnTensorDescriptor_t pd,
    const cudnnActivationDescriptor_t ad, size_t *bytes)
{
    const char *call = "cudnnGetBatchNormalizationForwardTrainingExWork"
                       "spaceSize";
    cudnnStatus_t st = td__dnn_handle(h, call);
    if (st)
        return st;
    if (!bytes || !xd)
        return CUDNN_STATUS_BAD_PARAM;
    if (ops == CUDNN_BATCHNORM_OPS_BN) {
        *bytes = 0;
        return CUDNN_STATUS_SUCCESS;
    }
    if ((st = td__fused_ok(call, mode, ops, xd, pd, ad)) ||
        (st = td__operand(call, "yDesc", yd, xd)) ||
        (ops == CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION &&
         (st = td__operand(call, "zDesc", zd, xd))))
        return st;
    *bytes = td__ws_bytes(xd);
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetBatchNormalizationBackwardExWorkspaceSize(
    cudnnHandle_t h, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t ops,
    const cudnnTensorDescriptor_t xd, const cudnnTensorDescriptor_t yd,
    const cudnnTensorDescriptor_t dyd, const cudnnTensorDescriptor_t dzd,
    const cudnnTensorDescriptor_t dxd, const cudnnTensorDescriptor_t pd,
    const cudnnActivationDescriptor_t ad, size_t *bytes)
{
    const char *call = "cudnnGetBatchNormalizationBackwardExWorkspaceSize";
    cudnnStatus_t st = td__dnn_handle(h, call);
    if (st)
        return st;
    if (!bytes || !xd)
        return CUDNN_STATUS_BAD_PARAM;
    if (ops == CUDNN_BATCHNORM_OPS_BN) {
        *bytes = 0;
        return CUDNN_STATUS_SUCCESS;
    }
    if ((st = td__fused_ok(call, mode, ops, xd, pd, ad)) ||
        (st = td__operand(call, "yDesc", yd, xd)) ||
        (st = td__operand(call, "dyDesc", dyd, xd)) ||
        (st = td__operand(call, "dxDesc", dxd, xd)) ||
        (ops == CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION &&
         (st = td__operand(call, "dzDesc", dzd, xd))))
        return st;
    *bytes = td__ws_bytes(xd);
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetBatchNormalizationTrainingExReserveSpaceSize(
    cudnnHandle_t h, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t ops,
    const cudnnActivationDescriptor_t ad, const cudnnTensorDescriptor_t xd,
    size_t *bytes)
{
    const char *call = "cudnnGetBatchNormalizationTrainingExReserveSpace"
                       "Size";
    cudnnStatus_t st = td__dnn_handle(h, call);
    if (st)
        return st;
    if (!bytes || !xd)
        return CUDNN_STATUS_BAD_PARAM;
    if (ops == CUDNN_BATCHNORM_OPS_BN) {
        *bytes = 0;
        return CUDNN_STATUS_SUCCESS;
    }
    if ((st = td__fused_ok(call, mode, ops, xd, NULL, ad)))
        return st;
    *bytes = td__rs_bytes(xd);
    return CUDNN_STATUS_SUCCESS;
}

/* The workspace and reserve space a fused call was given. */
static cudnnStatus_t td__spaces(const char *call, const td__t *x,
                                const void *ws, size_t wsb, const void *rs,
                                size_t rsb)
{
    if (!ws || wsb < td__ws_bytes(x)) {
        td__sim_say("%s: workspace %p of %zu bytes: the fused batch norm "
                    "needs one of %zu bytes (the ...WorkspaceSize query)",
                    call, ws, wsb, td__ws_bytes(x));
        return CUDNN_STATUS_BAD_PARAM;
    }
    if (!rs || rsb < td__rs_bytes(x)) {
        td__sim_say("%s: reserve space %p of %zu bytes: it needs %zu "
                    "(cudnnGetBatchNormalizationTrainingExReserveSpaceSize)",
                    call, rs, rsb, td__rs_bytes(x));
        return CUDNN_STATUS_BAD_PARAM;
    }
    return CUDNN_STATUS_SUCCESS;
}

/* ---- the operation ----------------------------------------------------- */

typedef struct td__bnop {
    int bwd, add;
    uint32_t ops;
    td__t x;                  /* every data operand has x's descriptor */
    size_t ne;
    int c;
    float alpha, beta, alpha2, beta2;
    double factor, eps;
    const void *X, *Z, *Y_in, *DY;
    void *Y, *DZ, *DX;
    const float *S, *B, *M, *V;
    float *RM, *RV, *SM, *SI, *DS, *DB;
    void *ws, *rs;
    size_t wsb;
} td__bnop;

static float *td__widen(const void *p, size_t n)
{
    float *f = malloc(n * sizeof *f + 1);
    if (!f)
        abort();
    for (size_t i = 0; i < n; i++)
        f[i] = p ? td_f16_to_f32(((const td_f16 *)p)[i]) : 0.0f;
    return f;
}

/* NHWC packed: element (pixel i, channel c) is at i * C + c; the pixels
 * are visited in n, h, w order, as sim_cudnn_norm.c visits them. */
static void td__moments(const float *x, size_t pix, int C, int c,
                        double *mean, double *var)
{
    double m = 0, v = 0;
    for (size_t i = 0; i < pix; i++)
        m += x[i * C + c];
    m /= (double)pix;
    for (size_t i = 0; i < pix; i++) {
        double d = x[i * C + c] - m;
        v += d * d;
    }
    *mean = m;
    *var = v / (double)pix;
}

static float td__blend(float alpha, double r, float beta, float old)
{
    double v = (double)alpha * r;
    if (beta != 0.0f)
        v += (double)beta * old;
    return (float)v;
}

static void td__fwd(td__bnop *o)
{
    size_t pix = o->ne / (size_t)o->c;
    float *x = td__widen(o->X, o->ne);
    float *z = td__widen(o->add ? o->Z : NULL, o->ne);
    float *old = td__widen(o->beta != 0.0f ? o->Y : NULL, o->ne);
    td_f16 *y = o->Y;
    unsigned char *mask = (unsigned char *)o->rs + TD__BNEX_HDR;
    memset(mask, 0, (o->ne + 7) / 8);
    double cnt = (double)pix;
    for (int c = 0; c < o->c; c++) {
        double mean, var;
        td__moments(x, pix, o->c, c, &mean, &var);
        if (o->RM) {
            double f = o->factor;
            o->RM[c] = (float)((1 - f) * o->RM[c] + f * mean);
            o->RV[c] = (float)((1 - f) * o->RV[c] +
                               f * var * cnt / (cnt > 1 ? cnt - 1 : 1));
        }
        if (o->SM) {
            o->SM[c] = (float)mean;
            o->SI[c] = (float)(1.0 / sqrt(var + o->eps));
        }
        double inv = 1.0 / sqrt(var + o->eps);
        for (size_t i = 0; i < pix; i++) {
            size_t e = i * o->c + c;
            /* batch norm's fp32 result as sim_cudnn_norm.c blends it with
             * alpha 1, then the add and the ReLU in fp32, one rounding */
            float t = (float)(o->S[c] * (x[e] - mean) * inv + o->B[c]);
            if (o->add)
                t += z[e];
            float r = t > 0 ? t : 0.0f;
            td_f16 v = td_f16_from_f32(td__blend(o->alpha, r, o->beta,
                                                 old[e]));
            y[e] = v;
            if (td_f16_to_f32(v) > 0)
                mask[e / 8] |= (unsigned char)(1u << (e % 8));
        }
    }
    td__bnex_tag tag = {TD__BNEX_MAGIC, o->ops, o->X};
    memcpy(o->rs, &tag, sizeof tag);
    free(x);
    free(z);
    free(old);
}

/* The reserve space is the one this backward's forward wrote. */
static int td__reserve_ok(const td__bnop *o, const float *y)
{
    td__bnex_tag tag;
    memcpy(&tag, o->rs, sizeof tag);
    if (tag.magic != TD__BNEX_MAGIC || tag.ops != o->ops || tag.x != o->X) {
        td__sim_say("cudnnBatchNormalizationBackwardEx: the reserve space "
                    "%p was not written by a ForwardTrainingEx of this x "
                    "(%p) and bnOps %u", o->rs, o->X, o->ops);
        return 0;
    }
    const unsigned char *mask = (const unsigned char *)o->rs + TD__BNEX_HDR;
    for (size_t e = 0; e < o->ne; e++)
        if (!!(mask[e / 8] & (1u << (e % 8))) != (y[e] > 0)) {
            td__sim_say("cudnnBatchNormalizationBackwardEx: the reserve "
                        "space's ReLU mask differs from y at element %zu: "
                        "y changed since the forward", e);
            return 0;
        }
    return 1;
}

static void td__bwd(td__bnop *o)
{
    size_t pix = o->ne / (size_t)o->c;
    float *x = td__widen(o->X, o->ne);
    float *y = td__widen(o->Y_in, o->ne);
    float *dy = td__widen(o->DY, o->ne);
    float *old = td__widen(o->beta != 0.0f ? o->DX : NULL, o->ne);
    td_f16 *dx = o->DX;
    if (!td__reserve_ok(o, y)) {
        __atomic_add_fetch(&td__bnex_bad, 1, __ATOMIC_RELAXED);
        for (size_t e = 0; e < o->ne; e++)
            dx[e] = 0x7e00; /* NaN */
        goto out;
    }
    for (size_t e = 0; e < o->ne; e++) /* the ReLU's backward, from y */
        dy[e] = y[e] > 0 ? dy[e] : 0.0f;
    if (o->add)
        for (size_t e = 0; e < o->ne; e++)
            ((td_f16 *)o->DZ)[e] = td_f16_from_f32(dy[e]); /* exact */
    double cnt = (double)pix;
    for (int c = 0; c < o->c; c++) {
        double mean, inv, var;
        if (o->M && o->V) {
            mean = o->M[c];
            inv = o->V[c];
        } else {
            td__moments(x, pix, o->c, c, &mean, &var);
            inv = 1.0 / sqrt(var + o->eps);
        }
        double sdy = 0, sdyx = 0;
        for (size_t i = 0; i < pix; i++) {
            size_t e = i * o->c + c;
            sdy += dy[e];
            sdyx += dy[e] * (x[e] - mean) * inv;
        }
        for (size_t i = 0; i < pix; i++) {
            size_t e = i * o->c + c;
            double xh = (x[e] - mean) * inv;
            dx[e] = td_f16_from_f32(td__blend(
                o->alpha, o->S[c] * inv * (dy[e] - sdy / cnt - xh * sdyx / cnt),
                o->beta, old[e]));
        }
        o->DS[c] = td__blend(o->alpha2, sdyx, o->beta2, o->DS[c]);
        o->DB[c] = td__blend(o->alpha2, sdy, o->beta2, o->DB[c]);
    }
out:
    free(x);
    free(y);
    free(dy);
    free(old);
}

static void td__run(void *p)
{
    td__bnop *o = p;
    if (o->ws && o->wsb) /* the kernel's scratch */
        memset(o->ws, 0xa5, o->wsb < 65536 ? o->wsb : 65536);
    if (o->bwd)
        td__bwd(o);
    else
        td__fwd(o);
}

typedef struct td__rng {
    td_sim_range r[16];
    int n;
} td__rng;

static void td__use(td__rng *s, const void *p, size_t bytes, int write)
{
    if (p && bytes)
        s->r[s->n++] = (td_sim_range){p, bytes, write};
}

static cudnnStatus_t td__submit(cudnnHandle_t h, const char *call,
                                td__bnop *o, td__rng *s, const void *caller)
{
    if (td__dnn_aliased(call, s->r, s->n, NULL, NULL)) {
        free(o);
        return CUDNN_STATUS_BAD_PARAM;
    }
    int bwd = o->bwd; /* o belongs to the stream once submitted */
    cudaError_t e = td_sim_submit(h->s, call, td__run, free, o, s->r, s->n,
                                  caller);
    if (e == cudaSuccess) {
        __atomic_add_fetch(&td__bnex_n[bwd], 1, __ATOMIC_RELAXED);
        return CUDNN_STATUS_SUCCESS;
    }
    if (e == cudaErrorMemoryAllocation)
        return CUDNN_STATUS_ALLOC_FAILED;
    return e == cudaErrorInvalidValue ? CUDNN_STATUS_BAD_PARAM
                                      : CUDNN_STATUS_EXECUTION_FAILED;
}

static td__bnop *td__new(const td__t *x, cudnnBatchNormOps_t ops,
                         const void *alpha, const void *beta)
{
    td__bnop *o = calloc(1, sizeof *o);
    if (!o)
        return NULL;
    o->ops = (uint32_t)ops;
    o->add = ops == CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION;
    o->x = *x;
    o->ne = td__elems(x);
    o->c = x->c;
    o->alpha = *(const float *)alpha;
    o->beta = *(const float *)beta;
    return o;
}

cudnnStatus_t cudnnBatchNormalizationForwardTrainingEx(
    cudnnHandle_t h, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t ops,
    const void *alpha, const void *beta, const cudnnTensorDescriptor_t xd,
    const void *x, const cudnnTensorDescriptor_t zd, const void *z,
    const cudnnTensorDescriptor_t yd, void *y,
    const cudnnTensorDescriptor_t pd, const void *scale, const void *bias,
    double factor, void *rmean, void *rvar, double eps, void *smean,
    void *sinv, cudnnActivationDescriptor_t ad, void *ws, size_t wsb,
    void *rs, size_t rsb)
{
    const char *call = "cudnnBatchNormalizationForwardTrainingEx";
    if (ops == CUDNN_BATCHNORM_OPS_BN) /* the non-extended function */
        return cudnnBatchNormalizationForwardTraining(
            h, mode, alpha, beta, xd, x, yd, y, pd, scale, bias, factor,
            rmean, rvar, eps, smean, sinv);
    cudnnStatus_t st = td__dnn_handle(h, call);
    if (st)
        return st;
    if (!alpha || !beta || !xd || !x || !y || !scale || !bias ||
        !rmean != !rvar || !smean != !sinv || eps < CUDNN_BN_MIN_EPSILON)
        return CUDNN_STATUS_BAD_PARAM;
    int add = ops == CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION;
    if ((st = td__fused_ok(call, mode, ops, xd, pd, ad)) ||
        (st = td__operand(call, "yDesc", yd, xd)) ||
        (add && (st = td__operand(call, "zDesc", zd, xd))) ||
        (st = td__spaces(call, xd, ws, wsb, rs, rsb)))
        return st;
    if (add && !z) {
        td__sim_say("%s: BN_ADD_ACTIVATION without zData", call);
        return CUDNN_STATUS_BAD_PARAM;
    }
    td__bnop *o = td__new(xd, ops, alpha, beta);
    if (!o)
        return CUDNN_STATUS_ALLOC_FAILED;
    o->factor = factor, o->eps = eps;
    o->X = x, o->Z = add ? z : NULL, o->Y = y, o->S = scale, o->B = bias;
    o->RM = rmean, o->RV = rvar, o->SM = smean, o->SI = sinv;
    o->ws = ws, o->wsb = wsb, o->rs = rs;
    size_t db = td__dnn_span(xd), pb = td__dnn_span(pd);
    td__rng s = {.n = 0};
    td__use(&s, x, db, 0);
    if (add)
        td__use(&s, z, db, 0);
    td__use(&s, y, db, 1);
    td__use(&s, scale, pb, 0);
    td__use(&s, bias, pb, 0);
    td__use(&s, rmean, pb, 1);
    td__use(&s, rvar, pb, 1);
    td__use(&s, smean, pb, 1);
    td__use(&s, sinv, pb, 1);
    td__use(&s, ws, wsb, 1);
    td__use(&s, rs, td__rs_bytes(xd), 1);
    return td__submit(h, call, o, &s, __builtin_return_address(0));
}

cudnnStatus_t cudnnBatchNormalizationBackwardEx(
    cudnnHandle_t h, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t ops,
    const void *alpha, const void *beta, const void *alpha2,
    const void *beta2, const cudnnTensorDescriptor_t xd, const void *x,
    const cudnnTensorDescriptor_t yd, const void *y,
    const cudnnTensorDescriptor_t dyd, const void *dy,
    const cudnnTensorDescriptor_t dzd, void *dz,
    const cudnnTensorDescriptor_t dxd, void *dx,
    const cudnnTensorDescriptor_t pd, const void *scale, const void *bias,
    void *dscale, void *dbias, double eps, const void *smean,
    const void *sinv, cudnnActivationDescriptor_t ad, void *ws, size_t wsb,
    void *rs, size_t rsb)
{
    const char *call = "cudnnBatchNormalizationBackwardEx";
    if (ops == CUDNN_BATCHNORM_OPS_BN) /* the non-extended function */
        return cudnnBatchNormalizationBackward(
            h, mode, alpha, beta, alpha2, beta2, xd, x, dyd, dy, dxd, dx, pd,
            scale, dscale, dbias, eps, smean, sinv);
    cudnnStatus_t st = td__dnn_handle(h, call);
    if (st)
        return st;
    if (!alpha || !beta || !alpha2 || !beta2 || !xd || !x || !dy || !dx ||
        !scale || !bias || !dscale || !dbias || !smean != !sinv ||
        eps < CUDNN_BN_MIN_EPSILON)
        return CUDNN_STATUS_BAD_PARAM;
    int add = ops == CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION;
    if ((st = td__fused_ok(call, mode, ops, xd, pd, ad)) ||
        (st = td__operand(call, "yDesc", yd, xd)) ||
        (st = td__operand(call, "dyDesc", dyd, xd)) ||
        (st = td__operand(call, "dxDesc", dxd, xd)) ||
        (add && (st = td__operand(call, "dzDesc", dzd, xd))) ||
        (st = td__spaces(call, xd, ws, wsb, rs, rsb)))
        return st;
    if (!y || (add && !dz)) {
        td__sim_say("%s: bnOps %d needs yData%s", call, (int)ops,
                    add ? " and dzData" : "");
        return CUDNN_STATUS_BAD_PARAM;
    }
    td__bnop *o = td__new(xd, ops, alpha, beta);
    if (!o)
        return CUDNN_STATUS_ALLOC_FAILED;
    o->bwd = 1, o->eps = eps;
    o->alpha2 = *(const float *)alpha2, o->beta2 = *(const float *)beta2;
    o->X = x, o->Y_in = y, o->DY = dy, o->DZ = add ? dz : NULL, o->DX = dx;
    o->S = scale, o->B = bias, o->DS = dscale, o->DB = dbias;
    o->M = smean, o->V = sinv, o->ws = ws, o->wsb = wsb, o->rs = rs;
    size_t db = td__dnn_span(xd), pb = td__dnn_span(pd);
    td__rng s = {.n = 0};
    td__use(&s, x, db, 0);
    td__use(&s, y, db, 0);
    td__use(&s, dy, db, 0);
    if (add)
        td__use(&s, dz, db, 1);
    td__use(&s, dx, db, 1);
    td__use(&s, scale, pb, 0);
    td__use(&s, bias, pb, 0);
    td__use(&s, dscale, pb, 1);
    td__use(&s, dbias, pb, 1);
    td__use(&s, smean, pb, 0);
    td__use(&s, sinv, pb, 0);
    td__use(&s, ws, wsb, 1);
    td__use(&s, rs, td__rs_bytes(xd), 0);
    return td__submit(h, call, o, &s, __builtin_return_address(0));
}
