/* backend_cuda_dnn.c - every cuDNN call of the CUDA backend.
 *
 * Owns: the cuDNN handle, per-layer descriptors (tensors, filters,
 * convolutions - one per direction -,
 * activations, pooling), the choice of convolution algorithms at create
 * (heuristics size the workspace, then cudnnFind*Ex measures each shape
 * and direction once per process, cached; only documented-deterministic
 * algorithms when the configuration asks), the math type of every
 * convolution descriptor (the backend's fp32 math, cuda_prec.c: strict
 * CUDNN_FMA_MATH, so results match the CPU backend, or TF32 with
 * CUDNN_TENSOR_OP_MATH; never the search result's own; bf16 and fp16
 * always CUDNN_TENSOR_OP_MATH), the data types (activations, filters and
 * convolution biases in the compute type, convolutions computing in fp32
 * - the descriptor's compute type is CUDNN_DATA_FLOAT whatever the data
 * type: cuDNN's PSEUDO_HALF and PSEUDO_BFLOAT16 configurations -, batch
 * norm's scale, bias and statistics fp32 as cuDNN requires for 16-bit
 * data), the layouts (NCHW tensors and KCRS filters for fp32; NHWC
 * tensors and KRSC filters for the 16-bit types, the batch's channels
 * padded to be->stem_c: cuda_nhwc.c, docs/cuda.md "NHWC"), and the forward
 * and backward calls of
 * conv2d, batch norm (training with running statistics, inference - also
 * while training for layers kept in inference mode, whose backward is a
 * kernel of ours, cuda_step.c -, backward), relu and the pools.  Gradient summation into a shared input
 * uses cuDNN's beta = 1.
 * Never does: allocate device memory (the workspace comes from the arena),
 * synchronise, or call anything but cuDNN.
 *
 * cuDNN 9 marks this "legacy" API deprecated in favour of the graph
 * (backend) API.  Its warnings are opt-in (CUDNN_WARN_DEPRECATED); the
 * build defines that macro for every CUDA source so any other file using
 * the legacy API fails to compile, and this file - the only one allowed -
 * silences -Wdeprecated-declarations locally, below.  Moving to the graph
 * API (conv + bias + relu fusions, runtime-compiled kernels) is confined
 * to this file.
 */
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The legacy API is this file's purpose; see the comment above.  The
 * header's own declarations already use the deprecated types, so the
 * scope starts before it. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#include <cudnn.h>

#include "backend/cuda/cuda_int.h"
#include "base/error.h"
#include "base/log.h"

struct td__dnn_layer {
    cudnnTensorDescriptor_t x, y;  /* input and output, [batch, C, H, W] */
    cudnnTensorDescriptor_t chan;  /* [1, C_out, 1, 1]: bias (compute type),
                                      bn params (fp32) */
    cudnnFilterDescriptor_t wf;
    /* one convolution descriptor per direction (forward, backward data,
     * backward filter), each with the backend's math type (td__math) */
    cudnnConvolutionDescriptor_t cf, cd, cw;
    cudnnActivationDescriptor_t act;
    cudnnPoolingDescriptor_t pool;
    cudnnConvolutionFwdAlgo_t fa;
    cudnnConvolutionBwdDataAlgo_t da;
    cudnnConvolutionBwdFilterAlgo_t wa;
};

struct td__dnn {
    cudnnHandle_t h;
    cudnnDataType_t dt;
    td__dnn_layer *l;    /* one per model layer */
    size_t ws_cap;       /* largest workspace a single algorithm may take */
    int nperf[3];        /* results an algorithm query may return, per
                            direction (forward, backward data, filter) */
    void *perf;          /* room for the longest list of results */
};

#define TD__DNN(be, call)                                                    \
    do {                                                                     \
        cudnnStatus_t td__s = (call);                                        \
        if (td__s != CUDNN_STATUS_SUCCESS)                                   \
            return td__cuda_fail((be), __FILE__, __LINE__, #call,            \
                                 cudnnGetErrorString(td__s));                \
    } while (0)

static const float td__one = 1.0f, td__zero = 0.0f;

static const float *td__beta(int accumulate)
{
    return accumulate ? &td__one : &td__zero;
}

/* Activations' and filters' format: NHWC (filters KRSC) for the 16-bit
 * types, NCHW for fp32 (docs/cuda.md "NHWC"). */
static cudnnTensorFormat_t td__fmt(const td__cuda *be)
{
    return td__cuda_nhwc(be) ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
}

static int td__tensor(td__cuda *be, cudnnTensorDescriptor_t *d, int n,
                      td_shape s, cudnnDataType_t dt)
{
    TD__DNN(be, cudnnCreateTensorDescriptor(d));
    TD__DNN(be, cudnnSetTensor4dDescriptor(*d, td__fmt(be), dt, n, s.c, s.h,
                                           s.w));
    return 0;
}

/* Layer L's input as stored: the batch with its padded channels
 * (be->stem_c, 16-bit NHWC only). */
static td_shape td__in_stored(const td__cuda *be, int L)
{
    const td_model *m = be->base.model;
    td_shape s = m->layers[m->layers[L].in[0]].out;
    if (be->gl[m->layers[L].in[0]].root == 0)
        s.c = be->stem_c;
    return s;
}

static const td_shape *td__in_shape(const td__cuda *be, int L)
{
    const td_model *m = be->base.model;
    return &m->layers[m->layers[L].in[0]].out;
}

/* ---- convolution: descriptors and algorithms ------------------------------ */

/* Sets pick to the first of got cuDNN perf results that ran, fits the
 * workspace cap and, when the configuration asks for determinism
 * (td_backend_config.deterministic), is documented deterministic;
 * preferring in a first pass results of the backend's math (FMA for
 * strict fp32, a tensor-op or default math type for TF32); -1 if none.
 * The three *AlgoPerf_t types share these fields.  Whatever the pick's
 * mathType, the descriptor keeps the backend's math type (td__math): a
 * strict job never runs TF32 because a search preferred it. */
#define TD__PICK_ALGO(pf, got, cap, det, tf32, pick)                          \
    do {                                                                      \
        (pick) = -1;                                                          \
        for (int pass_ = 0; pass_ < 2 && (pick) < 0; pass_++)                 \
            for (int i_ = 0; i_ < (got) && (pick) < 0; i_++)                  \
                if ((pf)[i_].status == CUDNN_STATUS_SUCCESS &&                \
                    (pf)[i_].memory <= (cap) &&                               \
                    (!(det) ||                                                \
                     (pf)[i_].determinism == CUDNN_DETERMINISTIC) &&          \
                    (pass_ || ((pf)[i_].mathType == CUDNN_FMA_MATH) ==        \
                                  !(tf32)))                                   \
                    (pick) = i_;                                              \
    } while (0)

/* Tensor cores: TF32 for fp32, and always for bf16 and fp16. */
static int td__tensor_op(const td__cuda *be)
{
    return be->tf32 || td__cuda_lowp(be);
}

/* The math type every convolution descriptor carries. */
static cudnnMathType_t td__math(const td__cuda *be)
{
    return td__tensor_op(be) ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH;
}

static int td__no_algo(td__cuda *be, int L, const char *dir)
{
    snprintf(be->base.err, sizeof be->base.err, "cuda:%d: layer %s: no "
             "%s%s convolution algorithm fits a workspace of %.1f MiB",
             be->dev, be->base.model->layers[L].name,
             be->base.cfg.deterministic ? "deterministic " : "", dir,
             be->dnn->ws_cap / 1048576.0);
    return TD_E_DEVICE;
}

static int td__pick_fwd(td__cuda *be, int L, td__dnn_layer *d, size_t *ws)
{
    cudnnConvolutionFwdAlgoPerf_t *pf = be->dnn->perf;
    int got = 0, pick = -1;
    TD__DNN(be, cudnnGetConvolutionForwardAlgorithm_v7(be->dnn->h, d->x,
            d->wf, d->cf, d->y, be->dnn->nperf[0], &got, pf));
    TD__PICK_ALGO(pf, got, be->dnn->ws_cap, be->base.cfg.deterministic,
                  td__tensor_op(be), pick);
    if (pick < 0)
        return td__no_algo(be, L, "forward");
    d->fa = pf[pick].algo;
    size_t b = 0;
    TD__DNN(be, cudnnGetConvolutionForwardWorkspaceSize(be->dnn->h, d->x,
            d->wf, d->cf, d->y, d->fa, &b));
    *ws = b > *ws ? b : *ws;
    return 0;
}

static int td__pick_bwd_data(td__cuda *be, int L, td__dnn_layer *d,
                             size_t *ws)
{
    cudnnConvolutionBwdDataAlgoPerf_t *pf = be->dnn->perf;
    int got = 0, pick = -1;
    TD__DNN(be, cudnnGetConvolutionBackwardDataAlgorithm_v7(be->dnn->h,
            d->wf, d->y, d->cd, d->x, be->dnn->nperf[1], &got, pf));
    TD__PICK_ALGO(pf, got, be->dnn->ws_cap, be->base.cfg.deterministic,
                  td__tensor_op(be), pick);
    if (pick < 0)
        return td__no_algo(be, L, "backward-data");
    d->da = pf[pick].algo;
    size_t b = 0;
    TD__DNN(be, cudnnGetConvolutionBackwardDataWorkspaceSize(be->dnn->h,
            d->wf, d->y, d->cd, d->x, d->da, &b));
    *ws = b > *ws ? b : *ws;
    return 0;
}

static int td__pick_bwd_filter(td__cuda *be, int L, td__dnn_layer *d,
                               size_t *ws)
{
    cudnnConvolutionBwdFilterAlgoPerf_t *pf = be->dnn->perf;
    int got = 0, pick = -1;
    TD__DNN(be, cudnnGetConvolutionBackwardFilterAlgorithm_v7(be->dnn->h,
            d->x, d->y, d->cw, d->wf, be->dnn->nperf[2], &got, pf));
    TD__PICK_ALGO(pf, got, be->dnn->ws_cap, be->base.cfg.deterministic,
                  td__tensor_op(be), pick);
    if (pick < 0)
        return td__no_algo(be, L, "backward-filter");
    d->wa = pf[pick].algo;
    size_t b = 0;
    TD__DNN(be, cudnnGetConvolutionBackwardFilterWorkspaceSize(be->dnn->h,
            d->x, d->y, d->cw, d->wf, d->wa, &b));
    *ws = b > *ws ? b : *ws;
    return 0;
}

static int td__plan_conv(td__cuda *be, int L, td__dnn_layer *d, size_t *ws)
{
    const td_layer *l = &be->base.model->layers[L];
    td_shape in = td__in_stored(be, L);
    int n, c, h, w;
    TD__DNN(be, cudnnCreateFilterDescriptor(&d->wf));
    /* KRSC for the 16-bit types: the format must match the tensors' */
    TD__DNN(be, cudnnSetFilter4dDescriptor(d->wf, be->dnn->dt, td__fmt(be),
            l->channels, in.c, l->kernel, l->kernel));
    cudnnConvolutionDescriptor_t *dirs[3] = {&d->cf, &d->cd, &d->cw};
    for (int i = 0; i < 3; i++) {
        TD__DNN(be, cudnnCreateConvolutionDescriptor(dirs[i]));
        /* fp32 accumulation for every data type */
        TD__DNN(be, cudnnSetConvolution2dDescriptor(*dirs[i], l->pad, l->pad,
                l->stride, l->stride, 1, 1, CUDNN_CROSS_CORRELATION,
                CUDNN_DATA_FLOAT));
        /* before the queries: their results and workspaces are for it */
        TD__DNN(be, cudnnSetConvolutionMathType(*dirs[i], td__math(be)));
    }
    TD__DNN(be, cudnnGetConvolution2dForwardOutputDim(d->cf, d->x, d->wf,
                                                      &n, &c, &h, &w));
    if (c != l->out.c || h != l->out.h || w != l->out.w) {
        snprintf(be->base.err, sizeof be->base.err, "layer %s: cuDNN makes "
                 "%dx%dx%d, the model says %dx%dx%d", l->name, c, h, w,
                 l->out.c, l->out.h, l->out.w);
        return TD_E_DEVICE;
    }
    TD__TRY(td__pick_fwd(be, L, d, ws));
    TD__TRY(td__pick_bwd_filter(be, L, d, ws));
    if (be->gl[l->in[0]].root != 0) /* the batch itself needs no gradient */
        TD__TRY(td__pick_bwd_data(be, L, d, ws));
    td_debug("cuda backend: %s algorithms fwd %d bwd-data %d bwd-filter %d%s",
             l->name, (int)d->fa, (int)d->da, (int)d->wa,
             be->base.cfg.deterministic ? " (deterministic)" : "");
    return 0;
}

static int td__plan_pool(td__cuda *be, int L, td__dnn_layer *d)
{
    const td_layer *l = &be->base.model->layers[L];
    const td_shape *in = td__in_shape(be, L);
    cudnnPoolingMode_t mode = l->kind == TD_L_MAXPOOL
                                  ? CUDNN_POOLING_MAX_DETERMINISTIC
                                  : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
    int kh = l->kernel, kw = l->kernel, pad = l->pad, st = l->stride;
    int n, c, h, w;
    if (l->kind == TD_L_GAP)
        kh = in->h, kw = in->w, pad = 0, st = 1;
    TD__DNN(be, cudnnCreatePoolingDescriptor(&d->pool));
    TD__DNN(be, cudnnSetPooling2dDescriptor(d->pool, mode, CUDNN_PROPAGATE_NAN,
            kh, kw, pad, pad, st, st));
    TD__DNN(be, cudnnGetPooling2dForwardOutputDim(d->pool, d->x, &n, &c, &h,
                                                  &w));
    if (c != l->out.c || h != l->out.h || w != l->out.w) {
        snprintf(be->base.err, sizeof be->base.err, "layer %s: cuDNN pools "
                 "to %dx%dx%d, the model says %dx%dx%d", l->name, c, h, w,
                 l->out.c, l->out.h, l->out.w);
        return TD_E_DEVICE;
    }
    return 0;
}

static int td__plan_layer(td__cuda *be, int L, size_t *ws)
{
    const td_layer *l = &be->base.model->layers[L];
    td__dnn_layer *d = &be->dnn->l[L];
    switch (l->kind) {
    case TD_L_CONV: case TD_L_BN: case TD_L_RELU:
    case TD_L_MAXPOOL: case TD_L_AVGPOOL: case TD_L_GAP:
        break;
    default:
        return 0; /* dense, add, dropout, flatten: not cuDNN's */
    }
    cudnnDataType_t dt = be->dnn->dt;
    TD__TRY(td__tensor(be, &d->x, be->batch, td__in_stored(be, L), dt));
    TD__TRY(td__tensor(be, &d->y, be->batch, l->out, dt));
    /* batch norm's per-channel tensors are fp32 for every data type */
    TD__TRY(td__tensor(be, &d->chan, 1, (td_shape){l->out.c, 1, 1},
                       l->kind == TD_L_BN ? CUDNN_DATA_FLOAT : dt));
    switch (l->kind) {
    case TD_L_CONV:
        return td__plan_conv(be, L, d, ws);
    case TD_L_RELU:
        TD__DNN(be, cudnnCreateActivationDescriptor(&d->act));
        TD__DNN(be, cudnnSetActivationDescriptor(d->act, CUDNN_ACTIVATION_RELU,
                                                 CUDNN_PROPAGATE_NAN, 0.0));
        return 0;
    case TD_L_BN:
        return 0;
    default:
        return td__plan_pool(be, L, d);
    }
}

/* ---- batch norm + ReLU fused (docs/cuda.md "NHWC") ----------------------- */

static const cudnnBatchNormMode_t td__bnfuse_mode =
    CUDNN_BATCHNORM_SPATIAL_PERSISTENT;
static cudnnBatchNormOps_t td__bnfuse_ops(const td__gl *g)
{
    return g->bnadd ? CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION
                    : CUDNN_BATCHNORM_OPS_BN_ACTIVATION;
}

/* The ReLU batch norm layer L's training passes may compute with it: an
 * fp16 job (cuDNN's fused kernel takes HALF data, fully packed NHWC, C a
 * multiple of 4) with the memory plan's placement, and the batch norm
 * td_memplan_bn_fuse says (memplan.h: read only by a ReLU the plan runs
 * in place on its output, or ending a residual block at add *A; the same
 * function by which `trainctl plan` bills the reserve spaces); 0: none.
 * TD_TEST_NO_BNFUSE (tests only) turns fusion off, TD_TEST_NO_BNADD the
 * residual form only. */
static int td__bnfuse_relu(const td__cuda *be, int L, int *A)
{
    *A = 0;
    if (be->dt != TD_F16 || be->base.cfg.mem_layout == TD_MEM_PER_LAYER ||
        getenv("TD_TEST_NO_BNFUSE"))
        return 0;
    return td_memplan_bn_fuse(be->base.model, L, be->base.cfg.bn_eval,
                              getenv("TD_TEST_NO_BNADD") != NULL, A);
}

/* At create, after every layer's descriptors: which batch norms are
 * fused (gl[].bnfuse), their reserve spaces' sizes (gl[].rsb, placed by
 * the memory plan) and the workspace grown to what the fused calls ask. */
static int td__bnfuse_plan(td__cuda *be, size_t *ws)
{
    const td_model *m = be->base.model;
    cudnnHandle_t h = be->dnn->h;
    int fused[2] = {0, 0};
    for (int L = 1; L < m->nlayers; L++) {
        int A, R = td__bnfuse_relu(be, L, &A);
        if (!R || (A && be->gl[A].bnfuse_of))
            continue; /* an add takes one batch norm (the first) along */
        td__gl *g = &be->gl[L];
        g->bnfuse = R, g->bnadd = A;
        const td__dnn_layer *d = &be->dnn->l[L];
        cudnnTensorDescriptor_t z = A ? d->y : NULL;
        cudnnActivationDescriptor_t a = be->dnn->l[R].act;
        size_t fw = 0, bw = 0, rs = 0;
        TD__DNN(be, cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
                h, td__bnfuse_mode, td__bnfuse_ops(g), d->x, z, d->y,
                d->chan, a, &fw));
        TD__DNN(be, cudnnGetBatchNormalizationBackwardExWorkspaceSize(
                h, td__bnfuse_mode, td__bnfuse_ops(g), d->x, d->y, d->y, z,
                d->x, d->chan, a, &bw));
        TD__DNN(be, cudnnGetBatchNormalizationTrainingExReserveSpaceSize(
                h, td__bnfuse_mode, td__bnfuse_ops(g), a, d->x, &rs));
        *ws = fw > *ws ? fw : *ws;
        *ws = bw > *ws ? bw : *ws;
        g->rsb = rs;
        be->gl[R].bnfuse_of = L;
        if (A)
            be->gl[A].bnfuse_of = L;
        fused[A != 0]++;
    }
    if (fused[0] + fused[1])
        td_info("cuda:%d: batch norms fused by cuDNN: %d with the ReLU "
                "after them (BN_ACTIVATION), %d with the residual add and "
                "ReLU after them (BN_ADD_ACTIVATION)", be->dev, fused[0],
                fused[1]);
    return 0;
}

int td__dnn_fused_relu(const td__cuda *be, int L)
{
    return be->base.model->layers[L].kind == TD_L_RELU &&
           be->gl[L].bnfuse_of != 0;
}

/* z: the add's other input's value (BN_ADD_ACTIVATION), or NULL. */
static int td__bnfuse_fwd(td__cuda *be, int L, const void *x, const void *z)
{
    const td_layer *l = &be->base.model->layers[L];
    const td__dnn_layer *d = &be->dnn->l[L];
    td__gl *g = &be->gl[L];
    /* y is the ReLU's (in place: the same buffer), never bn's own value */
    TD__DNN(be, cudnnBatchNormalizationForwardTrainingEx(be->dnn->h,
            td__bnfuse_mode, td__bnfuse_ops(g), &td__one, &td__zero, d->x, x,
            z ? d->y : NULL, z, d->y, be->gl[g->bnfuse].y, d->chan, g->w, g->b,
            (double)l->momentum, g->rmean, g->rvar, (double)l->eps,
            g->smean, g->sinv, be->dnn->l[g->bnfuse].act, be->work,
            be->work_bytes, g->reserve, g->rsb));
    return 0;
}

/* dz: the add's other input's gradient (BN_ADD_ACTIVATION, written,
 * never summed into: cuDNN's dz has no blend), or NULL. */
static int td__bnfuse_bwd(td__cuda *be, int L, const void *x, void *dx,
                          const float *beta, void *dz)
{
    const td_layer *l = &be->base.model->layers[L];
    const td__dnn_layer *d = &be->dnn->l[L];
    td__gl *g = &be->gl[L];
    const td__gl *r = &be->gl[g->bnfuse];
    /* the ReLU's output and the gradient its readers summed into it */
    TD__DNN(be, cudnnBatchNormalizationBackwardEx(be->dnn->h,
            td__bnfuse_mode, td__bnfuse_ops(g), &td__one, beta, &td__one,
            &td__zero, d->x, x, d->y, r->y, d->y, r->dy, dz ? d->y : NULL,
            dz, d->x,
            dx, d->chan, g->w, g->b, g->dw, g->db, (double)l->eps, g->smean,
            g->sinv, be->dnn->l[g->bnfuse].act, be->work, be->work_bytes,
            g->reserve, g->rsb));
    return 0;
}

/* How long a list of results each direction's algorithm queries (v7
 * heuristics and cudnnFind*Ex) may return, and room for the longest.  Not
 * the CUDNN_CONVOLUTION_*_ALGO_COUNT: cuDNN lists "CUDNN_TENSOR_OP_MATH
 * and CUDNN_DEFAULT_MATH versions of algorithms where CUDNN_TENSOR_OP_MATH
 * may be available" (cuDNN Developer Guide,
 * cudnnFindConvolutionForwardAlgorithm), up to
 * cudnnGetConvolution*AlgorithmMaxCount results, so asking for the
 * algorithm count cut the list and hid the fitting, deterministic or
 * matching-math results past it. */
static int td__perf_room(td__cuda *be)
{
    cudnnHandle_t h = be->dnn->h;
    int *n = be->dnn->nperf, most = 0;
    TD__DNN(be, cudnnGetConvolutionForwardAlgorithmMaxCount(h, &n[0]));
    TD__DNN(be, cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &n[1]));
    TD__DNN(be, cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h,
                                                                   &n[2]));
    static const int floor[3] = {CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                 CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
                                 CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT};
    for (int i = 0; i < 3; i++) {
        n[i] = n[i] < floor[i] ? floor[i] : n[i];
        most = n[i] > most ? n[i] : most;
    }
    size_t sz = sizeof(cudnnConvolutionFwdAlgoPerf_t);
    if (sizeof(cudnnConvolutionBwdDataAlgoPerf_t) > sz)
        sz = sizeof(cudnnConvolutionBwdDataAlgoPerf_t);
    if (sizeof(cudnnConvolutionBwdFilterAlgoPerf_t) > sz)
        sz = sizeof(cudnnConvolutionBwdFilterAlgoPerf_t);
    be->dnn->perf = calloc((size_t)most, sz);
    return be->dnn->perf ? 0 : -ENOMEM;
}

int td__dnn_create(td__cuda *be, size_t *ws)
{
    const td_model *m = be->base.model;
    size_t free_b = 0, total_b = 0;
    be->dnn = calloc(1, sizeof *be->dnn);
    if (!be->dnn)
        return -ENOMEM;
    be->dnn->l = calloc((size_t)m->nlayers, sizeof *be->dnn->l);
    if (!be->dnn->l)
        return -ENOMEM;
    be->dnn->dt = be->dt == TD_BF16 ? CUDNN_DATA_BFLOAT16
                  : be->dt == TD_F16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
    TD__DNN(be, cudnnCreate(&be->dnn->h));
    TD__DNN(be, cudnnSetStream(be->dnn->h, be->compute));
    TD__TRY(td__perf_room(be));
    TD__CU(be, cudaMemGetInfo(&free_b, &total_b));
    /* one algorithm may use up to an eighth of free memory, at most 1 GiB */
    be->dnn->ws_cap = free_b / 8 < ((size_t)1 << 30) ? free_b / 8
                                                     : ((size_t)1 << 30);
    *ws = 0;
    for (int L = 1; L < m->nlayers; L++)
        TD__TRY(td__plan_layer(be, L, ws));
    return td__bnfuse_plan(be, ws);
}

/* ---- measured choice: cudnnFind once per shape, cached ------------------ */

static const void *td__x(const td__cuda *be, int L);

/* What a search found for one convolution shape and direction on one GPU,
 * kept for the life of the process (the next job with the same layers
 * does not search again).  Found results are only used when they fit the
 * workspace the heuristics sized; otherwise the heuristic choice stays. */
typedef struct td__found {
    int dev, dir, det, tf32, dt;
    int x[4], w[4], pad, stride;
    int algo;
    size_t memory;
} td__found;

#define TD__FOUND_MAX 512
static pthread_mutex_t td__found_mu = PTHREAD_MUTEX_INITIALIZER;
static td__found td__found_tab[TD__FOUND_MAX];
static int td__nfound;

static td__found td__found_key(const td__cuda *be, int L, int dir)
{
    const td_layer *l = &be->base.model->layers[L];
    const td_shape in = td__in_stored(be, L);
    td__found k;
    memset(&k, 0, sizeof k); /* compared with memcmp: no stray padding */
    k.dev = be->dev, k.dir = dir, k.det = be->base.cfg.deterministic != 0;
    k.tf32 = be->tf32, k.dt = (int)be->dt;
    k.x[0] = be->batch, k.x[1] = in.c, k.x[2] = in.h, k.x[3] = in.w;
    k.w[0] = l->channels, k.w[1] = in.c, k.w[2] = k.w[3] = l->kernel;
    k.pad = l->pad, k.stride = l->stride;
    return k;
}

static int td__found_get(td__found *k)
{
    size_t key = offsetof(td__found, algo);
    int hit = 0;
    pthread_mutex_lock(&td__found_mu);
    for (int i = 0; i < td__nfound && !hit; i++)
        if (memcmp(&td__found_tab[i], k, key) == 0) {
            *k = td__found_tab[i];
            hit = 1;
        }
    pthread_mutex_unlock(&td__found_mu);
    return hit;
}

static void td__found_put(const td__found *k)
{
    pthread_mutex_lock(&td__found_mu);
    if (td__nfound < TD__FOUND_MAX)
        td__found_tab[td__nfound++] = *k;
    pthread_mutex_unlock(&td__found_mu);
}

/* Runs the search of direction dir for layer L on the arena's buffers. */
static int td__search(td__cuda *be, int L, int dir, td__found *k)
{
    const td__dnn_layer *d = &be->dnn->l[L];
    const td__gl *g = &be->gl[L];
    const void *x = td__x(be, L);
    void *dx = be->gl[be->gl[be->base.model->layers[L].in[0]].root].dy;
    cudnnHandle_t h = be->dnn->h;
    int got = 0, pick = -1, det = be->base.cfg.deterministic;
    size_t cap = be->work_bytes;
    int want = be->dnn->nperf[dir];
    if (dir == 0) {
        cudnnConvolutionFwdAlgoPerf_t *pf = be->dnn->perf;
        TD__DNN(be, cudnnFindConvolutionForwardAlgorithmEx(h, d->x, x, d->wf,
                g->wl, d->cf, d->y, g->y, want, &got, pf, be->work,
                be->work_bytes));
        TD__PICK_ALGO(pf, got, cap, det, td__tensor_op(be), pick);
        if (pick >= 0)
            k->algo = pf[pick].algo, k->memory = pf[pick].memory;
    } else if (dir == 1) {
        cudnnConvolutionBwdDataAlgoPerf_t *pf = be->dnn->perf;
        TD__DNN(be, cudnnFindConvolutionBackwardDataAlgorithmEx(h, d->wf,
                g->wl, d->y, g->dy, d->cd, d->x, dx, want, &got, pf,
                be->work, be->work_bytes));
        TD__PICK_ALGO(pf, got, cap, det, td__tensor_op(be), pick);
        if (pick >= 0)
            k->algo = pf[pick].algo, k->memory = pf[pick].memory;
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t *pf = be->dnn->perf;
        TD__DNN(be, cudnnFindConvolutionBackwardFilterAlgorithmEx(h, d->x, x,
                d->y, g->dy, d->cw, d->wf, g->dwl, want, &got, pf, be->work,
                be->work_bytes));
        TD__PICK_ALGO(pf, got, cap, det, td__tensor_op(be), pick);
        if (pick >= 0)
            k->algo = pf[pick].algo, k->memory = pf[pick].memory;
    }
    return pick >= 0;
}

/* Whether the found algorithm runs, with the layer's own descriptors, in
 * the workspace the heuristics sized.  A result's `memory` is that of the
 * result's own mathType, and the list mixes CUDNN_TENSOR_OP_MATH and
 * CUDNN_DEFAULT_MATH versions of the same algorithm (see td__perf_room);
 * the descriptor keeps the backend's math (td__math), and what a call
 * needs is what cudnnGetConvolution*WorkspaceSize says for the
 * descriptors it is given (cuDNN API reference, cudnnConvolutionForward:
 * the workspace "needed to able to execute the specified algorithm").
 * An algorithm the descriptor's math cannot run is not taken either. */
static int td__found_fits(td__cuda *be, const td__dnn_layer *d, int dir,
                          const td__found *k)
{
    cudnnHandle_t h = be->dnn->h;
    size_t need = 0;
    cudnnStatus_t st;
    if (dir == 0)
        st = cudnnGetConvolutionForwardWorkspaceSize(h, d->x, d->wf, d->cf,
                d->y, (cudnnConvolutionFwdAlgo_t)k->algo, &need);
    else if (dir == 1)
        st = cudnnGetConvolutionBackwardDataWorkspaceSize(h, d->wf, d->y,
                d->cd, d->x, (cudnnConvolutionBwdDataAlgo_t)k->algo, &need);
    else
        st = cudnnGetConvolutionBackwardFilterWorkspaceSize(h, d->x, d->y,
                d->cw, d->wf, (cudnnConvolutionBwdFilterAlgo_t)k->algo,
                &need);
    return st == CUDNN_STATUS_SUCCESS && need <= be->work_bytes;
}

int td__dnn_find(td__cuda *be)
{
    const td_model *m = be->base.model;
    int searched = 0, cached = 0;
    for (int L = 1; L < m->nlayers; L++) {
        const td_layer *l = &m->layers[L];
        td__dnn_layer *d = &be->dnn->l[L];
        if (l->kind != TD_L_CONV)
            continue;
        for (int dir = 0; dir < 3; dir++) {
            if (dir == 1 && be->gl[l->in[0]].root == 0)
                continue; /* the batch itself needs no gradient */
            td__found k = td__found_key(be, L, dir);
            int ok = td__found_get(&k);
            if (ok) {
                cached++;
            } else {
                int r = td__search(be, L, dir, &k);
                if (r < 0)
                    return r;
                searched++;
                if (!(ok = r))
                    continue; /* nothing fits: the heuristic choice stays */
                td__found_put(&k);
            }
            if (k.memory > be->work_bytes || !td__found_fits(be, d, dir, &k))
                continue;
            if (dir == 0)
                d->fa = (cudnnConvolutionFwdAlgo_t)k.algo;
            else if (dir == 1)
                d->da = (cudnnConvolutionBwdDataAlgo_t)k.algo;
            else
                d->wa = (cudnnConvolutionBwdFilterAlgo_t)k.algo;
        }
        td_debug("cuda backend: %s algorithms fwd %d bwd-data %d bwd-filter "
                 "%d (measured%s)", l->name, (int)d->fa, (int)d->da,
                 (int)d->wa, be->base.cfg.deterministic
                 ? ", deterministic" : "");
    }
    td_info("cuda:%d: convolution algorithms measured (cudnnFind) for %d "
            "shape%s and direction%s, %d from earlier searches", be->dev,
            searched, searched == 1 ? "" : "s", searched == 1 ? "" : "s",
            cached);
    return 0;
}

void td__dnn_destroy(td__cuda *be)
{
    if (!be->dnn)
        return;
    for (int L = 0; be->dnn->l && L < be->base.model->nlayers; L++) {
        td__dnn_layer *d = &be->dnn->l[L];
        if (d->x)
            cudnnDestroyTensorDescriptor(d->x);
        if (d->y)
            cudnnDestroyTensorDescriptor(d->y);
        if (d->chan)
            cudnnDestroyTensorDescriptor(d->chan);
        if (d->wf)
            cudnnDestroyFilterDescriptor(d->wf);
        cudnnConvolutionDescriptor_t dirs[3] = {d->cf, d->cd, d->cw};
        for (int i = 0; i < 3; i++)
            if (dirs[i])
                cudnnDestroyConvolutionDescriptor(dirs[i]);
        if (d->act)
            cudnnDestroyActivationDescriptor(d->act);
        if (d->pool)
            cudnnDestroyPoolingDescriptor(d->pool);
    }
    if (be->dnn->h)
        cudnnDestroy(be->dnn->h);
    free(be->dnn->perf);
    free(be->dnn->l);
    free(be->dnn);
    be->dnn = NULL;
}

/* ---- execution -------------------------------------------------------------- */

static const void *td__x(const td__cuda *be, int L)
{
    const td_model *m = be->base.model;
    return be->gl[be->gl[m->layers[L].in[0]].root].y;
}

int td__dnn_forward(td__cuda *be, int L, int train)
{
    const td_layer *l = &be->base.model->layers[L];
    const td__dnn_layer *d = &be->dnn->l[L];
    td__gl *g = &be->gl[L];
    cudnnHandle_t h = be->dnn->h;
    const void *x = td__x(be, L);
    switch (l->kind) {
    case TD_L_CONV:
        TD__DNN(be, cudnnConvolutionForward(h, &td__one, d->x, x, d->wf,
                g->wl, d->cf, d->fa, be->work, be->work_bytes, &td__zero,
                d->y, g->y));
        if (l->bias)
            TD__DNN(be, cudnnAddTensor(h, &td__one, d->chan, g->bl, &td__one,
                                       d->y, g->y));
        return 0;
    case TD_L_BN:
        /* evaluation, and training with the layer kept in inference mode
         * (bn_eval): the running statistics, read only */
        if (!train || td__cuda_bn_eval(be, L)) {
            TD__DNN(be, cudnnBatchNormalizationForwardInference(h,
                    CUDNN_BATCHNORM_SPATIAL, &td__one, &td__zero, d->x, x,
                    d->y, g->y, d->chan, g->w, g->b, g->rmean, g->rvar,
                    (double)l->eps));
            return 0;
        }
        if (g->bnfuse && g->bnadd)
            return 0; /* at its add's forward (td__dnn_bnadd_fwd) */
        if (g->bnfuse) /* with its ReLU (cuDNN's Ex call) */
            return td__bnfuse_fwd(be, L, x, NULL);
        /* running statistics as PyTorch: factor = momentum, unbiased
         * variance; saved mean and inverse std for the backward */
        TD__DNN(be, cudnnBatchNormalizationForwardTraining(h,
                CUDNN_BATCHNORM_SPATIAL, &td__one, &td__zero, d->x, x, d->y,
                g->y, d->chan, g->w, g->b, (double)l->momentum, g->rmean,
                g->rvar, (double)l->eps, g->smean, g->sinv));
        return 0;
    case TD_L_RELU:
        /* in place (x == y) under the memory plan when nothing else reads
         * the input: cuDNN allows it, with identical descriptors (d->x
         * and d->y describe the same shape) */
        TD__DNN(be, cudnnActivationForward(h, d->act, &td__one, d->x, x,
                                           &td__zero, d->y, g->y));
        return 0;
    case TD_L_MAXPOOL: case TD_L_AVGPOOL: case TD_L_GAP:
        TD__DNN(be, cudnnPoolingForward(h, d->pool, &td__one, d->x, x,
                                        &td__zero, d->y, g->y));
        return 0;
    default:
        snprintf(be->base.err, sizeof be->base.err, "layer %s: not a cuDNN "
                 "layer", l->name);
        return TD_E_NOTSUP;
    }
}

int td__dnn_backward(td__cuda *be, int L, void *dx, int accumulate)
{
    const td_layer *l = &be->base.model->layers[L];
    const td__dnn_layer *d = &be->dnn->l[L];
    td__gl *g = &be->gl[L];
    cudnnHandle_t h = be->dnn->h;
    const void *x = td__x(be, L);
    const float *beta = td__beta(accumulate);
    switch (l->kind) {
    case TD_L_CONV:
        if (l->bias)
            TD__DNN(be, cudnnConvolutionBackwardBias(h, &td__one, d->y, g->dy,
                                                     &td__zero, d->chan,
                                                     g->dbl));
        TD__DNN(be, cudnnConvolutionBackwardFilter(h, &td__one, d->x, x, d->y,
                g->dy, d->cw, d->wa, be->work, be->work_bytes, &td__zero,
                d->wf, g->dwl));
        if (dx)
            TD__DNN(be, cudnnConvolutionBackwardData(h, &td__one, d->wf, g->wl,
                    d->y, g->dy, d->cd, d->da, be->work, be->work_bytes,
                    beta, d->x, dx));
        return 0;
    case TD_L_BN:
        if (g->bnfuse)
            return td__bnfuse_bwd(be, L, x, dx, beta, NULL);
        TD__DNN(be, cudnnBatchNormalizationBackward(h, CUDNN_BATCHNORM_SPATIAL,
                &td__one, beta, &td__one, &td__zero, d->x, x, d->y, g->dy,
                d->x, dx, d->chan, g->w, g->dw, g->db, (double)l->eps,
                g->smean, g->sinv));
        return 0;
    case TD_L_RELU:
        /* in place too (dx == dy, and x == y: ReLU's derivative is the
         * same read from its output, y > 0 exactly where x > 0) */
        TD__DNN(be, cudnnActivationBackward(h, d->act, &td__one, d->y, g->y,
                d->y, g->dy, d->x, x, beta, d->x, dx));
        return 0;
    case TD_L_MAXPOOL: case TD_L_AVGPOOL: case TD_L_GAP:
        TD__DNN(be, cudnnPoolingBackward(h, d->pool, &td__one, d->y, g->y,
                d->y, g->dy, d->x, x, beta, d->x, dx));
        return 0;
    default:
        snprintf(be->base.err, sizeof be->base.err, "layer %s: not a cuDNN "
                 "layer", l->name);
        return TD_E_NOTSUP;
    }
}

/* The add's other input (not its batch norm P). */
static int td__bnadd_other(const td__cuda *be, int A, int P)
{
    const td_layer *a = &be->base.model->layers[A];
    return a->in[0] == P ? a->in[1] : a->in[0];
}

int td__dnn_bnadd_fwd(td__cuda *be, int A)
{
    int P = be->gl[A].bnfuse_of;
    int Q = td__bnadd_other(be, A, P);
    return td__bnfuse_fwd(be, P, td__x(be, P),
                          be->gl[be->gl[Q].root].y);
}

int td__dnn_bnadd_bwd(td__cuda *be, int A, void *dz, int acc_z, void *dx,
                      int acc_x)
{
    int P = be->gl[A].bnfuse_of;
    if (acc_z) { /* td_memplan_bn_add_relu rules it out */
        snprintf(be->base.err, sizeof be->base.err, "internal: the fused "
                 "batch norm %s's dz would be summed into",
                 be->base.model->layers[P].name);
        return TD_E_DEVICE;
    }
    return td__bnfuse_bwd(be, P, td__x(be, P), dx, td__beta(acc_x), dz);
}

#pragma GCC diagnostic pop
