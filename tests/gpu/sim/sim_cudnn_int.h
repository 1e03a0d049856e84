/* sim_cudnn_int.h - the simulated cuDNN's descriptors, shared by
 * sim_cudnn.c (handles, descriptors, algorithm queries),
 * sim_cudnn_ops.c (the arithmetic of convolutions and adds, and how every
 * operation is queued and run) and sim_cudnn_norm.c (batch norm,
 * activation and pooling), with sim_cudnn_bnex.c.
 *
 * Owns: the descriptor structures (cuDNN keeps them opaque), the
 * workspace each convolution algorithm needs, which the queries report and
 * the calls enforce, and the queued operation record of sim_cudnn_ops.c
 * and sim_cudnn_norm.c with the helpers both use to build and submit one.
 * Never does: anything outside the simulator.
 */
#ifndef TD_SIM_CUDNN_INT_H
#define TD_SIM_CUDNN_INT_H

#include <cudnn.h>

#include "sim_int.h"

struct cudnnContext {
    int dev;
    cudaStream_t s;
};

struct cudnnTensorStruct {
    int set;
    cudnnDataType_t dt;
    int n, c, h, w;
    int ns, cs, hs, ws; /* strides in elements */
};

struct cudnnFilterStruct {
    int set;
    cudnnDataType_t dt;
    cudnnTensorFormat_t fmt;
    int k, c, h, w;
};

struct cudnnConvolutionStruct {
    int set;
    int ph, pw, u, v, dh, dw;
    cudnnConvolutionMode_t mode;
    cudnnDataType_t dt;
    cudnnMathType_t math;
};

struct cudnnActivationStruct {
    int set;
    cudnnActivationMode_t mode;
    cudnnNanPropagation_t nan;
    double coef;
};

struct cudnnPoolingStruct {
    int set;
    cudnnPoolingMode_t mode;
    cudnnNanPropagation_t nan;
    int wh, ww, ph, pw, sh, sw;
};

/* Bytes of one element of type dt; elements and bytes a tensor's
 * elements span. */
size_t td__dnn_esize(cudnnDataType_t dt);
size_t td__dnn_elems(const struct cudnnTensorStruct *t);
size_t td__dnn_span(const struct cudnnTensorStruct *t);
size_t td__dnn_fspan(const struct cudnnFilterStruct *f);

/* Index of filter element (k, c, r, s) in memory: KCRS for a filter in
 * CUDNN_TENSOR_NCHW format, KRSC for CUDNN_TENSOR_NHWC. */
static inline size_t td__dnn_widx(const struct cudnnFilterStruct *f, int k,
                                  int c, int r, int s)
{
    if (f->fmt == CUDNN_TENSOR_NHWC)
        return (((size_t)k * f->h + r) * f->w + s) * f->c + c;
    return (((size_t)k * f->c + c) * f->h + r) * f->w + s;
}

/* An accepted convolution's layout, counted (td_sim_dnn_nhwc,
 * td_sim_dnn_unaligned). */
void td__dnn_count_layout(const struct cudnnTensorStruct *x,
                          const struct cudnnFilterStruct *w,
                          const struct cudnnTensorStruct *y);

/* Checks x, w, conv, y for a convolution: 0 or a cuDNN status (with a
 * diagnostic naming what is wrong). */
cudnnStatus_t td__dnn_conv_check(const char *call,
                                 const struct cudnnTensorStruct *x,
                                 const struct cudnnFilterStruct *w,
                                 const struct cudnnConvolutionStruct *c,
                                 const struct cudnnTensorStruct *y);

/* Workspace of each algorithm for that shape; -1 when the algorithm does
 * not support it.  dir: 0 forward, 1 backward data, 2 backward filter. */
long long td__dnn_ws(int dir, int algo, const struct cudnnTensorStruct *x,
                     const struct cudnnFilterStruct *w,
                     const struct cudnnConvolutionStruct *c,
                     const struct cudnnTensorStruct *y);

/* Whether cuDNN documents algorithm `algo` of direction dir (0 forward,
 * 1 backward data, 2 backward filter) as deterministic; convolutions run
 * with one that is not, counted (td_sim_dnn_nondeterministic). */
int td__dnn_deterministic(int dir, int algo);
extern long td__dnn_nondet;

/* 1 (with a diagnostic naming the call and the operands) when an output
 * of r[0..n) shares a byte with another operand.  cuDNN documents
 * in-place operation only for some routines, each time as the same
 * address with identical descriptors: ok_in/ok_out name that one
 * permitted pair (NULL: none); anything else overlapping is refused. */
int td__dnn_aliased(const char *call, const td_sim_range *r, int n,
                    const void *ok_in, const void *ok_out);

/* The handle's device is current and its stream usable. */
cudnnStatus_t td__dnn_handle(cudnnHandle_t h, const char *call);

/* ---- sim_cudnn_ops.c and sim_cudnn_norm.c: queued operations ---------- */

typedef struct cudnnTensorStruct td__t;

/* Element (n, c, h, w) of tensor t, by its strides. */
#define AT(t, n, c, h, w)                                                    \
    ((size_t)(n) * (t).ns + (size_t)(c) * (t).cs + (size_t)(h) * (t).hs +    \
     (size_t)(w) * (t).ws)

/* An operation of either file: its operands and parameters, copied at
 * the call, run by sim_cudnn_ops.c (16-bit operands through fp32
 * copies, then the arithmetic of its kind). */
enum { OP_CONV_FWD, OP_CONV_BWD_DATA, OP_CONV_BWD_FILTER, OP_CONV_BIAS,
       OP_ADD, OP_BN_TRAIN, OP_BN_INFER, OP_BN_BWD, OP_ACT_FWD, OP_ACT_BWD,
       OP_POOL_FWD, OP_POOL_BWD };

typedef struct td__dop {
    int kind;
    td__t x, y, p;            /* data in, data out, per-channel params */
    struct cudnnFilterStruct w;
    struct cudnnConvolutionStruct c;
    struct cudnnActivationStruct act;
    struct cudnnPoolingStruct pool;
    float alpha, beta, alpha2, beta2;
    double eps, factor;
    const float *X, *Y, *W, *DY, *S, *B, *M, *V;
    float *OUT, *RM, *RV, *SM, *SI, *DS, *DB;
    void *ws;
    size_t wsb;
    int tf32;                 /* convolutions: products of TF32 inputs */
    /* X, W, DY, OUT held as 16-bit data (td__dnn_mark): their type and
     * element count; 0 = fp32 */
    cudnnDataType_t lt[4];
    size_t ln[4];
} td__dop;

enum { LP_X, LP_W, LP_DY, LP_OUT };

/* The operands of one call as the race detector and the overlap check
 * see them (td__dnn_use). */
typedef struct td__sub {
    td_sim_range r[12];
    int n;
    const void *ok_in, *ok_out; /* the documented in-place pair, if any */
} td__sub;

/* y = alpha * r + beta * *old, *old read only when beta is not 0. */
static inline float td__dnn_blend(float alpha, double r, float beta,
                                  const float *old)
{
    double v = (double)alpha * r;
    if (beta != 0.0f)
        v += (double)beta * *old;
    return (float)v;
}

/* The common start of a call: the handle checked, alpha and beta
 * given. */
#define TD__START(call)                                                      \
    cudnnStatus_t st_ = td__dnn_handle(h, call);                             \
    if (st_)                                                                 \
        return st_;                                                          \
    if (!alpha || !beta)                                                     \
        return CUDNN_STATUS_BAD_PARAM

/* Operand `slot` of o is n elements of 16-bit type dt (nothing to do for
 * fp32). */
void td__dnn_mark(td__dop *o, int slot, cudnnDataType_t dt, size_t n);
/* p..p+bytes as an operand of the call (none when p is NULL or bytes 0),
 * written or read. */
void td__dnn_use(td__sub *s, const void *p, size_t bytes, int write);
/* Queues o on the handle's stream with the operands in s (refused when
 * an output overlaps another operand); o is freed on refusal. */
cudnnStatus_t td__dnn_submit(cudnnHandle_t h, const char *what,
                             td__dop *o, td__sub *s, const void *caller);
/* Data the simulator computes on: fp32, or 16-bit through fp32 copies. */
int td__dnn_data(const td__t *t);
/* Descriptor of per-channel parameters for data tensor x: 1 x C x 1 x 1. */
int td__dnn_chan(const td__t *p, const td__t *x);
/* A new operation of kind with alpha and beta copied; NULL without
 * memory. */
td__dop *td__dnn_new(int kind, const void *alpha, const void *beta);
/* x (read) and y (written) as operands of o: their 16-bit marks, and
 * their spans in s in that order. */
void td__dnn_xy(td__dop *o, td__sub *s, const td__t *xd, const void *x,
                const td__t *yd, const void *y);

/* sim_cudnn_norm.c: the arithmetic of OP_BN_TRAIN and OP_BN_INFER,
 * OP_BN_BWD, OP_ACT_FWD and OP_ACT_BWD, OP_POOL_FWD and OP_POOL_BWD, on
 * fp32 operands. */
void td__dnn_bn_fwd(td__dop *o);
void td__dnn_bn_bwd(td__dop *o);
void td__dnn_act(td__dop *o);
void td__dnn_pool(td__dop *o);

#endif
