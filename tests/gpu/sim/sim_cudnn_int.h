/* sim_cudnn_int.h - the simulated cuDNN's descriptors, shared by
 * sim_cudnn.c (handles, descriptors, algorithm queries) and
 * sim_cudnn_ops.c (the arithmetic).
 *
 * Owns: the descriptor structures (cuDNN keeps them opaque) and the
 * workspace each convolution algorithm needs, which the queries report and
 * the calls enforce.
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

#endif
