/* backend_cuda_kernels.cu - the CUDA backend's own kernels.
 *
 * Owns: the launch code (grid shapes, index mapping) around the per-element
 * arithmetic in kernels/ (normalize.h, softmax_xent.h, optim_update.h, loss_scale.h,
 * eltwise.h, stats.h, bn_eval.h), which the host tests check against double
 * references.  Each launcher enqueues on the given stream and returns
 * cudaGetLastError(); the caller turns a failure into a job error.  Every
 * launch goes through TD_LAUNCH (cuda_launch.h), so the simulated device
 * of the tests (tests/gpu/sim/) runs these same kernel bodies.
 * Never does: allocate, synchronise, or contain arithmetic of its own
 * beyond indexing (that lives in the shared headers).
 */
#include <stdint.h>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_launch.h"

extern "C" {
#include "bn_eval.h"
#include "eltwise.h"
#include "loss_scale.h"
#include "normalize.h"
#include "optim_update.h"
#include "softmax_xent.h"
#include "stats.h"
}

namespace {

const int kBlock = 256;

/* Grid for `count` elements with a grid-stride loop; capped so huge
 * tensors do not make huge grids. */
unsigned grid_for(size_t count)
{
    size_t g = (count + kBlock - 1) / kBlock;
    if (g < 1)
        g = 1;
    return g > 65535u * 4u ? 65535u * 4u : (unsigned)g;
}

#define TD__GRID_LOOP(i, count)                                              \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;           \
         i < (count); i += (size_t)gridDim.x * blockDim.x)

struct Norm {
    float scale[4], bias[4];
};

__global__ void normalize_k(const uint8_t *nhwc, float *y, size_t total,
                            int c, int h, int w, Norm nm)
{
    TD__GRID_LOOP(o, total)
    y[o] = td_normalize_elem(nhwc, o, c, h, w, nm.scale, nm.bias);
}

/* One thread per row; rows >= n (padding of a short batch) get a zero
 * gradient and do not count. */
__global__ void xent_k(const float *z, int k, const int32_t *labels, int n,
                       int rows, float smooth, float inv_n, float *grad,
                       double *row_loss, int *row_ok)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows)
        return;
    float *g = grad ? grad + (size_t)i * k : nullptr;
    if (i >= n) {
        for (int j = 0; g && j < k; j++)
            g[j] = 0.0f;
        return;
    }
    int ok = 0;
    row_loss[i] = td_xent_row(z + (size_t)i * k, k, labels[i], smooth, inv_n,
                              g, &ok);
    row_ok[i] = ok;
}

__global__ void stats_k(td_dev_stats *acc, const double *row_loss,
                        const int *row_ok, int n)
{
    if (blockIdx.x == 0 && threadIdx.x == 0)
        td_stats_reduce(acc, row_loss, row_ok, n);
}

/* ls (loss scaling, loss_scale.h): skip, 1/scale and AdamW's corrections
 * from the device; NULL without it. */
__global__ void sgd_k(float *w, float *v, const float *g, size_t count,
                      const float *lrp, float mu, float wd, int nesterov,
                      const td_ls_dev *ls)
{
    if (ls && ls->step.skip)
        return;
    float inv = ls ? ls->step.inv_scale : 1.0f;
    float lr = *lrp; /* the step scalars: changes every step */
    TD__GRID_LOOP(i, count)
    td_sgd_elem(&w[i], v ? &v[i] : nullptr, g[i] * inv, lr, mu, wd,
                nesterov);
}

__global__ void adamw_k(float *w, float *m, float *v, const float *g,
                        size_t count, const float *lrp, float b1, float b2,
                        float eps, float wd, const td_step_scalars *sc,
                        const td_ls_dev *ls)
{
    if (ls && ls->step.skip)
        return;
    float inv = ls ? ls->step.inv_scale : 1.0f;
    float lr = *lrp; /* the step scalars: change every step */
    td_adamw_corr c;
    c.c1 = sc->c1;
    c.c2 = sc->c2;
    if (ls) /* the step count without skipped steps */
        c = ls->step.corr;
    TD__GRID_LOOP(i, count)
    td_adamw_elem(&w[i], &m[i], &v[i], g[i] * inv, lr, b1, b2, eps, wd, c);
}

__global__ void add_k(const float *a, const float *b, float *y, size_t count)
{
    TD__GRID_LOOP(i, count)
    y[i] = td_add_elem(a[i], b[i]);
}

__global__ void accum_k(float *d, const float *s, size_t count,
                        int accumulate)
{
    TD__GRID_LOOP(i, count)
    d[i] = td_accum_elem(d[i], s[i], accumulate);
}

__global__ void bias_add_k(float *y, const float *b, size_t count, int out)
{
    TD__GRID_LOOP(i, count)
    y[i] = td_bias_add_elem(y, b, i, out);
}

__global__ void bias_grad_k(const float *dy, float *db, int rows, int out)
{
    int o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o < out)
        db[o] = td_bias_grad_col(dy, rows, out, o);
}

__global__ void dropout_fwd_k(const float *x, float *y, uint8_t *mask,
                              size_t count, uint64_t seed, uint64_t stream,
                              const td_step_scalars *sc, float keep)
{
    uint64_t base = sc->step * count; /* the step scalars */
    TD__GRID_LOOP(i, count)
    {
        int k = td_dropout_keep(seed, stream, base + i, keep);
        mask[i] = (uint8_t)k;
        y[i] = td_dropout_elem(x[i], k, keep);
    }
}

__global__ void dropout_bwd_k(const float *dy, float *dx,
                              const uint8_t *mask, size_t count, float keep,
                              int accumulate)
{
    TD__GRID_LOOP(i, count)
    dx[i] = td_accum_elem(dx[i], td_dropout_elem(dy[i], mask[i], keep),
                          accumulate);
}

/* Inference-mode batch norm backward (bn_eval.h): partial sums per
 * (sample, channel) plane, then per channel, then dx element-wise. */
__global__ void bn_eval_plane_k(const float *x, const float *dy,
                                const float *mean, float *part,
                                size_t planes, int c, size_t hw)
{
    TD__GRID_LOOP(p, planes)
    td_bn_eval_plane(x, dy, mean, part, p, c, hw);
}

__global__ void bn_eval_chan_k(const float *part, const float *var,
                               float eps, float *dgamma, float *dbeta, int n,
                               int c)
{
    int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch < c)
        td_bn_eval_chan(part, var, eps, dgamma, dbeta, n, c, ch);
}

__global__ void bn_eval_dx_k(const float *dy, float *dx, const float *gamma,
                             const float *var, float eps, size_t count,
                             int c, size_t hw, int accumulate)
{
    TD__GRID_LOOP(i, count)
    {
        size_t ch = (i / hw) % (size_t)c;
        dx[i] = td_accum_elem(dx[i], td_bn_eval_dx(dy[i], gamma[ch],
                              td_bn_eval_inv(var[ch], eps)), accumulate);
    }
}

} // namespace

extern "C" cudaError_t td__k_normalize(cudaStream_t s, const uint8_t *nhwc,
                                       float *y, int n, int c, int h, int w,
                                       const float *scale, const float *bias)
{
    Norm nm;
    for (int i = 0; i < 4; i++) {
        nm.scale[i] = i < c ? scale[i] : 0.0f;
        nm.bias[i] = i < c ? bias[i] : 0.0f;
    }
    size_t total = (size_t)n * c * h * w;
    TD_LAUNCH(normalize_k, grid_for(total), kBlock, 0, s, nhwc, y, total, c, h,
              w, nm);
    return cudaGetLastError();
}

extern "C" cudaError_t td__k_xent(cudaStream_t s, const float *z, int k,
                                  const int32_t *labels, int n, int rows,
                                  float smooth, float inv_n, float *grad,
                                  double *row_loss, int *row_ok)
{
    const int b = 128;
    TD_LAUNCH(xent_k, (rows + b - 1) / b, b, 0, s, z, k, labels, n, rows,
              smooth, inv_n, grad, row_loss, row_ok);
    return cudaGetLastError();
}

extern "C" cudaError_t td__k_stats(cudaStream_t s, td_dev_stats *acc,
                                   const double *row_loss, const int *row_ok,
                                   int n)
{
    TD_LAUNCH(stats_k, 1, 1, 0, s, acc, row_loss, row_ok, n);
    return cudaGetLastError();
}

extern "C" cudaError_t td__k_sgd(cudaStream_t s, float *w, float *v,
                                 const float *g, size_t count,
                                 const float *lr, float mu, float wd,
                                 int nesterov, const td_ls_dev *ls)
{
    TD_LAUNCH(sgd_k, grid_for(count), kBlock, 0, s, w, v, g, count, lr, mu, wd,
              nesterov, ls);
    return cudaGetLastError();
}

extern "C" cudaError_t td__k_adamw(cudaStream_t s, float *w, float *m,
                                   float *v, const float *g, size_t count,
                                   const float *lr, float b1, float b2,
                                   float eps, float wd,
                                   const td_step_scalars *sc,
                                   const td_ls_dev *ls)
{
    TD_LAUNCH(adamw_k, grid_for(count), kBlock, 0, s, w, m, v, g, count, lr,
              b1, b2, eps, wd, sc, ls);
    return cudaGetLastError();
}

extern "C" cudaError_t td__k_add(cudaStream_t s, const float *a,
                                 const float *b, float *y, size_t count)
{
    TD_LAUNCH(add_k, grid_for(count), kBlock, 0, s, a, b, y, count);
    return cudaGetLastError();
}

extern "C" cudaError_t td__k_accum(cudaStream_t s, float *d, const float *src,
                                   size_t count, int accumulate)
{
    TD_LAUNCH(accum_k, grid_for(count), kBlock, 0, s, d, src, count,
              accumulate);
    return cudaGetLastError();
}

extern "C" cudaError_t td__k_bias_add(cudaStream_t s, float *y,
                                      const float *b, int rows, int out)
{
    size_t count = (size_t)rows * out;
    TD_LAUNCH(bias_add_k, grid_for(count), kBlock, 0, s, y, b, count, out);
    return cudaGetLastError();
}

extern "C" cudaError_t td__k_bias_grad(cudaStream_t s, const float *dy,
                                       float *db, int rows, int out)
{
    TD_LAUNCH(bias_grad_k, (out + kBlock - 1) / kBlock, kBlock, 0, s, dy, db,
              rows, out);
    return cudaGetLastError();
}

extern "C" cudaError_t td__k_dropout_fwd(cudaStream_t s, const float *x,
                                         float *y, uint8_t *mask,
                                         size_t count, uint64_t seed,
                                         uint64_t stream,
                                         const td_step_scalars *sc,
                                         float keep)
{
    TD_LAUNCH(dropout_fwd_k, grid_for(count), kBlock, 0, s, x, y, mask, count,
              seed, stream, sc, keep);
    return cudaGetLastError();
}

extern "C" cudaError_t td__k_dropout_bwd(cudaStream_t s, const float *dy,
                                         float *dx, const uint8_t *mask,
                                         size_t count, float keep,
                                         int accumulate)
{
    TD_LAUNCH(dropout_bwd_k, grid_for(count), kBlock, 0, s, dy, dx, mask,
              count, keep, accumulate);
    return cudaGetLastError();
}

extern "C" cudaError_t td__k_bn_eval_bwd(cudaStream_t s, const float *x,
                                         const float *dy, float *dx,
                                         const float *gamma,
                                         const float *mean, const float *var,
                                         float eps, float *dgamma,
                                         float *dbeta, float *part, int n,
                                         int c, size_t hw, int accumulate)
{
    size_t planes = (size_t)n * c, count = planes * hw;
    TD_LAUNCH(bn_eval_plane_k, grid_for(planes), kBlock, 0, s, x, dy, mean,
              part, planes, c, hw);
    TD_LAUNCH(bn_eval_chan_k, (c + kBlock - 1) / kBlock, kBlock, 0, s, part,
              var, eps, dgamma, dbeta, n, c);
    if (dx)
        TD_LAUNCH(bn_eval_dx_k, grid_for(count), kBlock, 0, s, dy, dx, gamma,
                  var, eps, count, c, hw, accumulate);
    return cudaGetLastError();
}
