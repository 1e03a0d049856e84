/* sim_cudnn_norm.c - the simulated cuDNN's batch norm, activation and
 * pooling, from the definitions in cuDNN's documentation, with plain
 * loops and double accumulators.
 *
 * Owns: batch norm in spatial mode (training with the running averages
 * updated as
 *   running = (1 - factor) running + factor batch,
 * the variance's running average unbiased, saved mean and inverse
 * standard deviation; inference; backward), ReLU forward and backward,
 * max and average pooling (including or excluding padding) forward and
 * backward: their calls' checks and their arithmetic.  They are queued,
 * run and blended as sim_cudnn_ops.c's convolutions are (see its top:
 * y = alpha * result + beta * y, y read only when beta is not 0, no
 * operand overlapping an output, 16-bit data through exact fp32 copies
 * with every element stored rounded to the 16-bit type), always in fp32
 * (not matrix products).  The only in-place operation cuDNN documents
 * among them, and the only one accepted: cudnnActivationForward
 * (x == y) and cudnnActivationBackward (dy == dx), each with identical
 * descriptors.  Batch norm's scale, bias, mean and variance tensors must
 * be FLOAT for 16-bit data, as cuDNN documents.
 * Never does: share code with the backends or the reference layers in
 * tests/ (those check this file), or support doubles.
 */
#include <math.h>
#include <stdlib.h>

#include "sim_cudnn_int.h"

/* ---- batch norm (spatial) ---------------------------------------------------- */

static void td__moments(const td__dop *o, int c, double *mean, double *var)
{
    double m = 0, v = 0, cnt = (double)o->x.n * o->x.h * o->x.w;
    for (int n = 0; n < o->x.n; n++)
        for (int h = 0; h < o->x.h; h++)
            for (int w = 0; w < o->x.w; w++)
                m += o->X[AT(o->x, n, c, h, w)];
    m /= cnt;
    for (int n = 0; n < o->x.n; n++)
        for (int h = 0; h < o->x.h; h++)
            for (int w = 0; w < o->x.w; w++) {
                double d = o->X[AT(o->x, n, c, h, w)] - m;
                v += d * d;
            }
    *mean = m;
    *var = v / cnt;
}

void td__dnn_bn_fwd(td__dop *o)
{
    double cnt = (double)o->x.n * o->x.h * o->x.w;
    for (int c = 0; c < o->x.c; c++) {
        size_t pc = AT(o->p, 0, c, 0, 0);
        double mean, var;
        if (o->kind == OP_BN_TRAIN) {
            td__moments(o, c, &mean, &var);
            if (o->RM) {
                double f = o->factor;
                o->RM[pc] = (float)((1 - f) * o->RM[pc] + f * mean);
                o->RV[pc] = (float)((1 - f) * o->RV[pc] +
                                    f * var * cnt / (cnt > 1 ? cnt - 1 : 1));
            }
            if (o->SM) {
                o->SM[pc] = (float)mean;
                o->SI[pc] = (float)(1.0 / sqrt(var + o->eps));
            }
        } else {
            mean = o->M[pc];
            var = o->V[pc];
        }
        double inv = 1.0 / sqrt(var + o->eps);
        for (int n = 0; n < o->x.n; n++)
            for (int h = 0; h < o->x.h; h++)
                for (int w = 0; w < o->x.w; w++) {
                    double xv = o->X[AT(o->x, n, c, h, w)];
                    float *d = &o->OUT[AT(o->y, n, c, h, w)];
                    *d = td__dnn_blend(o->alpha,
                                       o->S[pc] * (xv - mean) * inv + o->B[pc],
                                       o->beta, d);
                }
    }
}

void td__dnn_bn_bwd(td__dop *o)
{
    double cnt = (double)o->x.n * o->x.h * o->x.w;
    for (int c = 0; c < o->x.c; c++) {
        size_t pc = AT(o->p, 0, c, 0, 0);
        double mean, inv, var;
        if (o->M && o->V) {
            mean = o->M[pc];
            inv = o->V[pc]; /* saved inverse standard deviation */
        } else {
            td__moments(o, c, &mean, &var);
            inv = 1.0 / sqrt(var + o->eps);
        }
        double sdy = 0, sdyx = 0;
        for (int n = 0; n < o->x.n; n++)
            for (int h = 0; h < o->x.h; h++)
                for (int w = 0; w < o->x.w; w++) {
                    double dy = o->DY[AT(o->y, n, c, h, w)];
                    sdy += dy;
                    sdyx += dy * (o->X[AT(o->x, n, c, h, w)] - mean) * inv;
                }
        for (int n = 0; n < o->x.n; n++)
            for (int h = 0; h < o->x.h; h++)
                for (int w = 0; w < o->x.w; w++) {
                    double xh = (o->X[AT(o->x, n, c, h, w)] - mean) * inv;
                    double dy = o->DY[AT(o->y, n, c, h, w)];
                    float *d = &o->OUT[AT(o->x, n, c, h, w)];
                    *d = td__dnn_blend(o->alpha, o->S[pc] * inv *
                                       (dy - sdy / cnt - xh * sdyx / cnt),
                                       o->beta, d);
                }
        o->DS[pc] = td__dnn_blend(o->alpha2, sdyx, o->beta2, &o->DS[pc]);
        o->DB[pc] = td__dnn_blend(o->alpha2, sdy, o->beta2, &o->DB[pc]);
    }
}

/* ---- activation, pooling ------------------------------------------------------- */

void td__dnn_act(td__dop *o)
{
    int prop = o->act.nan == CUDNN_PROPAGATE_NAN;
    for (int n = 0; n < o->x.n; n++)
        for (int c = 0; c < o->x.c; c++)
            for (int h = 0; h < o->x.h; h++)
                for (int w = 0; w < o->x.w; w++) {
                    float xv = o->X[AT(o->x, n, c, h, w)];
                    double r;
                    if (o->kind == OP_ACT_FWD)
                        r = xv > 0 || (prop && isnan(xv)) ? xv : 0.0;
                    else
                        r = xv > 0 ? o->DY[AT(o->y, n, c, h, w)] : 0.0;
                    float *d = &o->OUT[AT(o->kind == OP_ACT_FWD ? o->y : o->x,
                                          n, c, h, w)];
                    *d = td__dnn_blend(o->alpha, r, o->beta, d);
                }
}

/* Forward into OUT (y), or backward: dy scattered into a dense buffer of
 * x's size, then blended into OUT (dx). */
void td__dnn_pool(td__dop *o)
{
    const struct cudnnPoolingStruct *P = &o->pool;
    int bwd = o->kind == OP_POOL_BWD, max = P->mode == CUDNN_POOLING_MAX ||
                                           P->mode ==
                                               CUDNN_POOLING_MAX_DETERMINISTIC;
    int incl = P->mode == CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING;
    size_t nx = (size_t)o->x.n * o->x.c * o->x.h * o->x.w;
    double *g = bwd ? calloc(nx, sizeof *g) : NULL;
    if (bwd && !g)
        abort();
#define IDX(i0, i1, i2, i3) ((((size_t)(i0) * o->x.c + (i1)) * o->x.h + (i2)) * o->x.w + (i3))
    for (int n = 0; n < o->y.n; n++)
        for (int c = 0; c < o->y.c; c++)
            for (int p = 0; p < o->y.h; p++)
                for (int q = 0; q < o->y.w; q++) {
                    int h0 = p * P->sh - P->ph, w0 = q * P->sw - P->pw;
                    double sum = 0, best = -INFINITY;
                    int cnt = 0, bh = -1, bw = -1;
                    for (int h = h0; h < h0 + P->wh; h++)
                        for (int w = w0; w < w0 + P->ww; w++) {
                            if (h < 0 || h >= o->x.h || w < 0 || w >= o->x.w)
                                continue;
                            double v = o->X[AT(o->x, n, c, h, w)];
                            sum += v;
                            cnt++;
                            if (bh < 0 || v > best ||
                                (P->nan == CUDNN_PROPAGATE_NAN && isnan(v) &&
                                 !isnan(best)))
                                best = v, bh = h, bw = w;
                        }
                    int div = incl ? P->wh * P->ww : cnt;
                    if (!bwd) {
                        double r = max ? (bh < 0 ? 0.0 : best)
                                       : (div ? sum / div : 0.0);
                        float *d = &o->OUT[AT(o->y, n, c, p, q)];
                        *d = td__dnn_blend(o->alpha, r, o->beta, d);
                        continue;
                    }
                    double dy = o->DY[AT(o->y, n, c, p, q)];
                    if (max) {
                        if (bh >= 0)
                            g[IDX(n, c, bh, bw)] += dy;
                        continue;
                    }
                    for (int h = h0; div && h < h0 + P->wh; h++)
                        for (int w = w0; w < w0 + P->ww; w++)
                            if (h >= 0 && h < o->x.h && w >= 0 && w < o->x.w)
                                g[IDX(n, c, h, w)] += dy / div;
                }
    if (bwd)
        for (int n = 0; n < o->x.n; n++)
            for (int c = 0; c < o->x.c; c++)
                for (int h = 0; h < o->x.h; h++)
                    for (int w = 0; w < o->x.w; w++) {
                        float *d = &o->OUT[AT(o->x, n, c, h, w)];
                        *d = td__dnn_blend(o->alpha, g[IDX(n, c, h, w)],
                                           o->beta, d);
                    }
#undef IDX
    free(g);
}

/* ---- checks and operands ------------------------------------------------ */

static int td__same(const td__t *a, const td__t *b)
{
    return a && b && a->set && b->set && a->n == b->n && a->c == b->c &&
           a->h == b->h && a->w == b->w;
}

/* Identical descriptors, as in-place operation requires: type, sizes and
 * strides. */
static int td__ident(const td__t *a, const td__t *b)
{
    return td__same(a, b) && a->dt == b->dt && a->ns == b->ns &&
           a->cs == b->cs && a->hs == b->hs && a->ws == b->ws;
}

/* In place (out == in) is allowed with identical descriptors only. */
static int td__inplace_ok(const char *call, const void *in, const td__t *id,
                          const void *out, const td__t *od)
{
    if (in != out || td__ident(id, od))
        return 1;
    td__sim_say("%s: in place (%p) with descriptors that are not identical "
                "(%dx%dx%dx%d strides %d,%d,%d,%d against %dx%dx%dx%d "
                "strides %d,%d,%d,%d): cuDNN requires identical ones", call,
                out, id->n, id->c, id->h, id->w, id->ns, id->cs, id->hs,
                id->ws, od->n, od->c, od->h, od->w, od->ns, od->cs, od->hs,
                od->ws);
    return 0;
}

/* n per-channel tensors of pb bytes, all read or all written, in s in
 * that order (a NULL one is not an operand). */
static void td__use_params(td__sub *s, size_t pb, int write, int n,
                           const void *const *p)
{
    for (int i = 0; i < n; i++)
        td__dnn_use(s, p[i], pb, write);
}

/* A backward call's y, dy and x (read) and dx (written): the marks of x,
 * dy and dx, and the four spans in s in that order. */
static void td__y_dy_x_dx(td__dop *o, td__sub *s, const td__t *yd,
                          const void *y, const td__t *dyd, const void *dy,
                          const td__t *xd, const void *x, const td__t *dxd,
                          const void *dx)
{
    td__dnn_mark(o, LP_X, xd->dt, td__dnn_elems(xd));
    td__dnn_mark(o, LP_DY, dyd->dt, td__dnn_elems(dyd));
    td__dnn_mark(o, LP_OUT, dxd->dt, td__dnn_elems(dxd));
    td__dnn_use(s, y, td__dnn_span(yd), 0);
    td__dnn_use(s, dy, td__dnn_span(dyd), 0);
    td__dnn_use(s, x, td__dnn_span(xd), 0);
    td__dnn_use(s, dx, td__dnn_span(dxd), 1);
}

/* ---- batch norm ------------------------------------------------------------------- */

static cudnnStatus_t td__bn_check(cudnnBatchNormMode_t mode, const td__t *x,
                                  const td__t *y, const td__t *p, double eps)
{
    if (mode != CUDNN_BATCHNORM_SPATIAL)
        return CUDNN_STATUS_NOT_SUPPORTED; /* the simulator's subset */
    if (!td__same(x, y) || !td__dnn_chan(p, x) || !td__dnn_data(x) ||
        y->dt != x->dt || eps < CUDNN_BN_MIN_EPSILON)
        return CUDNN_STATUS_BAD_PARAM;
    if (p->dt != CUDNN_DATA_FLOAT) {
        td__sim_say("batch norm: bnScaleBiasMeanVarDesc must be FLOAT for "
                    "FLOAT, HALF and BFLOAT16 data (it is type %d)",
                    (int)p->dt);
        return CUDNN_STATUS_BAD_PARAM;
    }
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBatchNormalizationForwardTraining(
    cudnnHandle_t h, cudnnBatchNormMode_t mode, const void *alpha,
    const void *beta, const cudnnTensorDescriptor_t xd, const void *x,
    const cudnnTensorDescriptor_t yd, void *y,
    const cudnnTensorDescriptor_t pd, const void *scale, const void *bias,
    double factor, void *rmean, void *rvar, double eps, void *smean,
    void *sinv)
{
    TD__START("cudnnBatchNormalizationForwardTraining");
    cudnnStatus_t st = td__bn_check(mode, xd, yd, pd, eps);
    if (st)
        return st;
    if (!scale || !bias || !rmean != !rvar || !smean != !sinv)
        return CUDNN_STATUS_BAD_PARAM;
    td__dop *o = td__dnn_new(OP_BN_TRAIN, alpha, beta);
    if (!o)
        return CUDNN_STATUS_ALLOC_FAILED;
    o->x = *xd, o->y = *yd, o->p = *pd, o->factor = factor, o->eps = eps;
    o->X = x, o->OUT = y, o->S = scale, o->B = bias;
    o->RM = rmean, o->RV = rvar, o->SM = smean, o->SI = sinv;
    size_t pb = td__dnn_span(pd);
    td__sub s = {.n = 0};
    td__dnn_xy(o, &s, xd, x, yd, y);
    td__use_params(&s, pb, 0, 2, (const void *[]){scale, bias});
    td__use_params(&s, pb, 1, 4, (const void *[]){rmean, rvar, smean, sinv});
    return td__dnn_submit(h, "cudnnBatchNormalizationForwardTraining", o, &s,
                          __builtin_return_address(0));
}

cudnnStatus_t cudnnBatchNormalizationForwardInference(
    cudnnHandle_t h, cudnnBatchNormMode_t mode, const void *alpha,
    const void *beta, const cudnnTensorDescriptor_t xd, const void *x,
    const cudnnTensorDescriptor_t yd, void *y,
    const cudnnTensorDescriptor_t pd, const void *scale, const void *bias,
    const void *mean, const void *var, double eps)
{
    TD__START("cudnnBatchNormalizationForwardInference");
    cudnnStatus_t st = td__bn_check(mode, xd, yd, pd, eps);
    if (st)
        return st;
    if (!scale || !bias || !mean || !var)
        return CUDNN_STATUS_BAD_PARAM;
    td__dop *o = td__dnn_new(OP_BN_INFER, alpha, beta);
    if (!o)
        return CUDNN_STATUS_ALLOC_FAILED;
    o->x = *xd, o->y = *yd, o->p = *pd, o->eps = eps;
    o->X = x, o->OUT = y, o->S = scale, o->B = bias, o->M = mean, o->V = var;
    size_t pb = td__dnn_span(pd);
    td__sub s = {.n = 0};
    td__dnn_xy(o, &s, xd, x, yd, y);
    td__use_params(&s, pb, 0, 4, (const void *[]){scale, bias, mean, var});
    return td__dnn_submit(h, "cudnnBatchNormalizationForwardInference", o, &s,
                          __builtin_return_address(0));
}

cudnnStatus_t cudnnBatchNormalizationBackward(
    cudnnHandle_t h, cudnnBatchNormMode_t mode, const void *alpha,
    const void *beta, const void *alpha2, const void *beta2,
    const cudnnTensorDescriptor_t xd, const void *x,
    const cudnnTensorDescriptor_t dyd, const void *dy,
    const cudnnTensorDescriptor_t dxd, void *dx,
    const cudnnTensorDescriptor_t pd, const void *scale, void *dscale,
    void *dbias, double eps, const void *smean, const void *sinv)
{
    TD__START("cudnnBatchNormalizationBackward");
    cudnnStatus_t st = td__bn_check(mode, xd, dyd, pd, eps);
    if (st)
        return st;
    if (!td__same(xd, dxd) || dxd->dt != xd->dt || !alpha2 || !beta2 ||
        !scale || !dscale ||
        !dbias || !dx || !smean != !sinv)
        return CUDNN_STATUS_BAD_PARAM;
    td__dop *o = td__dnn_new(OP_BN_BWD, alpha, beta);
    if (!o)
        return CUDNN_STATUS_ALLOC_FAILED;
    o->alpha2 = *(const float *)alpha2, o->beta2 = *(const float *)beta2;
    o->x = *xd, o->y = *dyd, o->p = *pd, o->eps = eps;
    o->X = x, o->DY = dy, o->OUT = dx, o->S = scale, o->DS = dscale;
    o->DB = dbias, o->M = smean, o->V = sinv;
    td__dnn_mark(o, LP_X, xd->dt, td__dnn_elems(xd));
    td__dnn_mark(o, LP_DY, dyd->dt, td__dnn_elems(dyd));
    td__dnn_mark(o, LP_OUT, dxd->dt, td__dnn_elems(dxd));
    size_t pb = td__dnn_span(pd);
    td__sub s = {.n = 0};
    td__dnn_use(&s, x, td__dnn_span(xd), 0);
    td__dnn_use(&s, dy, td__dnn_span(dyd), 0);
    td__dnn_use(&s, dx, td__dnn_span(dxd), 1);
    td__dnn_use(&s, scale, pb, 0);
    td__use_params(&s, pb, 1, 2, (const void *[]){dscale, dbias});
    td__use_params(&s, pb, 0, 2, (const void *[]){smean, sinv});
    return td__dnn_submit(h, "cudnnBatchNormalizationBackward", o, &s,
                          __builtin_return_address(0));
}

/* ---- activation, pooling ------------------------------------------------------------ */

cudnnStatus_t cudnnActivationForward(cudnnHandle_t h,
                                     cudnnActivationDescriptor_t ad,
                                     const void *alpha,
                                     const cudnnTensorDescriptor_t xd,
                                     const void *x, const void *beta,
                                     const cudnnTensorDescriptor_t yd, void *y)
{
    TD__START("cudnnActivationForward");
    if (!ad || !ad->set || !td__same(xd, yd) || !td__dnn_data(xd) ||
        yd->dt != xd->dt)
        return CUDNN_STATUS_BAD_PARAM;
    if (ad->mode != CUDNN_ACTIVATION_RELU)
        return CUDNN_STATUS_NOT_SUPPORTED; /* the simulator's subset */
    if (!td__inplace_ok("cudnnActivationForward", x, xd, y, yd))
        return CUDNN_STATUS_BAD_PARAM;
    td__dop *o = td__dnn_new(OP_ACT_FWD, alpha, beta);
    if (!o)
        return CUDNN_STATUS_ALLOC_FAILED;
    o->act = *ad, o->x = *xd, o->y = *yd, o->X = x, o->OUT = y;
    td__sub s = {.n = 0, .ok_in = x, .ok_out = y};
    td__dnn_xy(o, &s, xd, x, yd, y);
    return td__dnn_submit(h, "cudnnActivationForward", o, &s,
                          __builtin_return_address(0));
}

cudnnStatus_t cudnnActivationBackward(
    cudnnHandle_t h, cudnnActivationDescriptor_t ad, const void *alpha,
    const cudnnTensorDescriptor_t yd, const void *y,
    const cudnnTensorDescriptor_t dyd, const void *dy,
    const cudnnTensorDescriptor_t xd, const void *x, const void *beta,
    const cudnnTensorDescriptor_t dxd, void *dx)
{
    TD__START("cudnnActivationBackward");
    if (!ad || !ad->set || !td__same(xd, yd) || !td__same(xd, dyd) ||
        !td__same(xd, dxd) || !td__dnn_data(xd) || yd->dt != xd->dt ||
        dyd->dt != xd->dt || dxd->dt != xd->dt)
        return CUDNN_STATUS_BAD_PARAM;
    if (ad->mode != CUDNN_ACTIVATION_RELU)
        return CUDNN_STATUS_NOT_SUPPORTED;
    if (!td__inplace_ok("cudnnActivationBackward", dy, dyd, dx, dxd))
        return CUDNN_STATUS_BAD_PARAM;
    td__dop *o = td__dnn_new(OP_ACT_BWD, alpha, beta);
    if (!o)
        return CUDNN_STATUS_ALLOC_FAILED;
    o->act = *ad, o->x = *xd, o->y = *dyd;
    o->X = x, o->DY = dy, o->OUT = dx;
    td__sub s = {.n = 0, .ok_in = dy, .ok_out = dx};
    td__y_dy_x_dx(o, &s, yd, y, dyd, dy, xd, x, dxd, dx);
    return td__dnn_submit(h, "cudnnActivationBackward", o, &s,
                          __builtin_return_address(0));
}

static cudnnStatus_t td__pool_check(const struct cudnnPoolingStruct *p,
                                    const td__t *x, const td__t *y)
{
    int n, c, hh, ww;
    if (!p || !p->set || !x || !y || !x->set || !y->set || !td__dnn_data(x) ||
        y->dt != x->dt ||
        cudnnGetPooling2dForwardOutputDim((cudnnPoolingDescriptor_t)p,
                                          (cudnnTensorDescriptor_t)x, &n, &c,
                                          &hh, &ww) ||
        y->n != n || y->c != c || y->h != hh || y->w != ww)
        return CUDNN_STATUS_BAD_PARAM;
    if (p->mode != CUDNN_POOLING_MAX &&
        p->mode != CUDNN_POOLING_MAX_DETERMINISTIC &&
        p->mode != CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING &&
        p->mode != CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING)
        return CUDNN_STATUS_NOT_SUPPORTED;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnPoolingForward(cudnnHandle_t h,
                                  const cudnnPoolingDescriptor_t pd,
                                  const void *alpha,
                                  const cudnnTensorDescriptor_t xd,
                                  const void *x, const void *beta,
                                  const cudnnTensorDescriptor_t yd, void *y)
{
    TD__START("cudnnPoolingForward");
    cudnnStatus_t st = td__pool_check(pd, xd, yd);
    if (st)
        return st;
    td__dop *o = td__dnn_new(OP_POOL_FWD, alpha, beta);
    if (!o)
        return CUDNN_STATUS_ALLOC_FAILED;
    o->pool = *pd, o->x = *xd, o->y = *yd, o->X = x, o->OUT = y;
    td__sub s = {.n = 0};
    td__dnn_xy(o, &s, xd, x, yd, y);
    return td__dnn_submit(h, "cudnnPoolingForward", o, &s,
                          __builtin_return_address(0));
}

cudnnStatus_t cudnnPoolingBackward(
    cudnnHandle_t h, const cudnnPoolingDescriptor_t pd, const void *alpha,
    const cudnnTensorDescriptor_t yd, const void *y,
    const cudnnTensorDescriptor_t dyd, const void *dy,
    const cudnnTensorDescriptor_t xd, const void *x, const void *beta,
    const cudnnTensorDescriptor_t dxd, void *dx)
{
    TD__START("cudnnPoolingBackward");
    cudnnStatus_t st = td__pool_check(pd, xd, yd);
    if (st)
        return st;
    if (!td__same(yd, dyd) || !td__same(xd, dxd) || dyd->dt != xd->dt ||
        dxd->dt != xd->dt)
        return CUDNN_STATUS_BAD_PARAM;
    td__dop *o = td__dnn_new(OP_POOL_BWD, alpha, beta);
    if (!o)
        return CUDNN_STATUS_ALLOC_FAILED;
    o->pool = *pd, o->x = *xd, o->y = *dyd;
    o->X = x, o->DY = dy, o->OUT = dx;
    td__sub s = {.n = 0};
    td__y_dy_x_dx(o, &s, yd, y, dyd, dy, xd, x, dxd, dx);
    return td__dnn_submit(h, "cudnnPoolingBackward", o, &s,
                          __builtin_return_address(0));
}
