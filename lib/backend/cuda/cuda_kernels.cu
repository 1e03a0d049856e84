/* backend_cuda_kernels.cu - the CUDA backend's own kernels.
 *
 * Owns: the launch code (grid shapes, index mapping) around the per-element
 * arithmetic in kernels/ (normalize.h, softmax_xent.h, optim_update.h, loss_scale.h,
 * eltwise.h, stats.h, bn_eval.h), which the host tests check against double
 * references.  Each launcher enqueues on the given stream and returns
 * cudaGetLastError(); the caller turns a failure into a job error.  Every
 * launch goes through TD_LAUNCH (cuda_launch.h), so the simulated device
 * of the tests (tests/gpu/sim/) runs these same kernel bodies.
 * Activations are stored as float, bf16 or fp16 (the launchers' dt): each
 * kernel is a template over the storage type, loading elements into float
 * and rounding what it stores (ld/st below, over kernels/bf16.h and
 * kernels/fp16.h); the arithmetic is the same float code for all three.
 * Never does: allocate, synchronise, or contain arithmetic of its own
 * beyond indexing (that lives in the shared headers; the one loop here is
 * the dense bias gradient's column sum for 16-bit storage, in the order
 * of td_bias_grad_col).
 */
#include <stdint.h>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_launch.h"

extern "C" {
#include "bf16.h"
#include "bn_eval.h"
#include "eltwise.h"
#include "fp16.h"
#include "loss_scale.h"
#include "layout.h"
#include "normalize.h"
#include "optim_update.h"
#include "softmax_xent.h"
#include "stats.h"
}

namespace {

const int kBlock = 256;

/* The update kernels take the copy's map by value: CUDA's limit on a
 * kernel's parameters is 4 KB (before CUDA 12.1 and Volta) */
static_assert(sizeof(td_lowp_map) + 128 <= 4096,
              "td_lowp_map too large for a kernel parameter");

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

/* 16-bit storage types, distinct for overloading (both hold a uint16_t). */
struct Bf16 {
    uint16_t v;
};
struct F16 {
    uint16_t v;
};

__host__ __device__ inline float ld(const float *p, size_t i) { return p[i]; }
__host__ __device__ inline float ld(const Bf16 *p, size_t i)
{
    return td_bf16_to_f32(p[i].v);
}
__host__ __device__ inline float ld(const F16 *p, size_t i)
{
    return td_f16_to_f32(p[i].v);
}
__host__ __device__ inline void st(float *p, size_t i, float v) { p[i] = v; }
__host__ __device__ inline void st(Bf16 *p, size_t i, float v)
{
    p[i].v = td_bf16_from_f32(v);
}
__host__ __device__ inline void st(F16 *p, size_t i, float v)
{
    p[i].v = td_f16_from_f32(v);
}

struct Norm {
    float scale[4], bias[4];
};

template <typename T>
__global__ void normalize_k(const uint8_t *nhwc, T *y, size_t total, int c,
                            int h, int w, Norm nm)
{
    TD__GRID_LOOP(o, total)
    st(y, o, td_normalize_elem(nhwc, o, c, h, w, nm.scale, nm.bias));
}

/* NHWC output with cp >= c channels, the pad channels zero. */
template <typename T>
__global__ void normalize_nhwc_k(const uint8_t *nhwc, T *y, size_t total,
                                 int c, int cp, Norm nm)
{
    TD__GRID_LOOP(o, total)
    st(y, o, td_normalize_nhwc_elem(nhwc, o, c, cp, nm.scale, nm.bias));
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

/* The updates: lr from the step scalars; ls (loss scaling, loss_scale.h):
 * skip, 1/scale and AdamW's corrections from the device, NULL without
 * it; they write the low-precision weight copy (when there is one, low:
 * its first element) from the fp32 master value they have just computed,
 * at the place map gives (layout.h: KRSC filters), once per step. */
template <typename T>
__global__ void sgd_k(float *w, float *v, const float *g, size_t count,
                      const float *lrp, float mu, float wd, int nesterov,
                      const td_ls_dev *ls, T *low, td_lowp_map map)
{
    if (ls && ls->step.skip)
        return;
    float inv = ls ? ls->step.inv_scale : 1.0f;
    float lr = *lrp; /* the step scalars: changes every step */
    TD__GRID_LOOP(i, count)
    {
        td_sgd_elem(&w[i], v ? &v[i] : nullptr, g[i] * inv, lr, mu, wd,
                    nesterov);
        if (low)
            st(low, td_lowp_index(&map, map.at + i), w[i]);
    }
}

template <typename T>
__global__ void adamw_k(float *w, float *m, float *v, const float *g,
                        size_t count, const float *lrp, float b1, float b2,
                        float eps, float wd, const td_step_scalars *sc,
                        const td_ls_dev *ls, T *low, td_lowp_map map)
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
    {
        td_adamw_elem(&w[i], &m[i], &v[i], g[i] * inv, lr, b1, b2, eps, wd,
                      c);
        if (low)
            st(low, td_lowp_index(&map, map.at + i), w[i]);
    }
}

template <typename T>
__global__ void widen_k(const T *src, float *dst, size_t count)
{
    TD__GRID_LOOP(i, count)
    dst[i] = ld(src, i);
}

template <typename T>
__global__ void narrow_k(const float *src, T *dst, size_t count)
{
    TD__GRID_LOOP(i, count)
    st(dst, i, src[i]);
}

template <typename T>
__global__ void add_k(const T *a, const T *b, T *y, size_t count)
{
    TD__GRID_LOOP(i, count)
    st(y, i, td_add_elem(ld(a, i), ld(b, i)));
}

template <typename T>
__global__ void accum_k(T *d, const T *s, size_t count, int accumulate)
{
    TD__GRID_LOOP(i, count)
    st(d, i, td_accum_elem(accumulate ? ld(d, i) : 0.0f, ld(s, i),
                           accumulate));
}

template <typename T>
__global__ void bias_add_k(T *y, const float *b, size_t count, int out)
{
    TD__GRID_LOOP(i, count)
    st(y, i, td_add_elem(ld(y, i), b[i % (size_t)out]));
}

__global__ void bias_grad_k(const float *dy, float *db, int rows, int out)
{
    int o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o < out)
        db[o] = td_bias_grad_col(dy, rows, out, o);
}

/* 16-bit dy: td_bias_grad_col's sum, in its (row) order, in float. */
template <typename T>
__global__ void bias_grad_lp_k(const T *dy, float *db, int rows, int out)
{
    int o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= out)
        return;
    float s = 0.0f;
    for (int i = 0; i < rows; i++)
        s = td_add_elem(s, ld(dy, (size_t)i * out + o));
    db[o] = s;
}

template <typename T>
__global__ void dropout_fwd_k(const T *x, T *y, uint8_t *mask, size_t count,
                              uint64_t seed, uint64_t stream,
                              const td_step_scalars *sc, float keep, int c,
                              size_t hw)
{
    uint64_t base = sc->step * count; /* the step scalars */
    TD__GRID_LOOP(i, count)
    {
        /* the draw of the element's NCHW index (c > 0: x is NHWC) */
        size_t e = c > 0 ? td_nhwc_to_nchw(i, c, c, hw) : i;
        int k = td_dropout_keep(seed, stream, base + e, keep);
        mask[i] = (uint8_t)k;
        st(y, i, td_dropout_elem(ld(x, i), k, keep));
    }
}

template <typename T>
__global__ void dropout_bwd_k(const T *dy, T *dx, const uint8_t *mask,
                              size_t count, float keep, int accumulate)
{
    TD__GRID_LOOP(i, count)
    st(dx, i, td_accum_elem(accumulate ? ld(dx, i) : 0.0f,
                            td_dropout_elem(ld(dy, i), mask[i], keep),
                            accumulate));
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

/* 16-bit x and dy: td_bn_eval_plane's loop on values loaded as float. */
template <typename T>
__global__ void bn_eval_plane_lp_k(const T *x, const T *dy,
                                   const float *mean, float *part,
                                   size_t planes, int c, size_t hw, int nhwc)
{
    TD__GRID_LOOP(p, planes)
    {
        float m = mean[p % (size_t)c], sdy = 0.0f, sdyx = 0.0f;
        for (size_t j = 0; j < hw; j++) {
            size_t i = td_bn_eval_at(p, j, c, hw, nhwc);
            td_bn_eval_acc(ld(x, i), ld(dy, i), m, &sdy, &sdyx);
        }
        part[2 * p] = sdy;
        part[2 * p + 1] = sdyx;
    }
}

__global__ void bn_eval_chan_k(const float *part, const float *var,
                               float eps, float *dgamma, float *dbeta, int n,
                               int c)
{
    int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch < c)
        td_bn_eval_chan(part, var, eps, dgamma, dbeta, n, c, ch);
}

template <typename T>
__global__ void bn_eval_dx_k(const T *dy, T *dx, const float *gamma,
                             const float *var, float eps, size_t count,
                             int c, size_t hw, int accumulate, int nhwc)
{
    TD__GRID_LOOP(i, count)
    {
        size_t ch = nhwc ? i % (size_t)c : (i / hw) % (size_t)c;
        st(dx, i, td_accum_elem(accumulate ? ld(dx, i) : 0.0f,
                                td_bn_eval_dx(ld(dy, i), gamma[ch],
                                              td_bn_eval_inv(var[ch], eps)),
                                accumulate));
    }
}

/* fp32 KCRS weights narrowed into the type's KRSC copy (layout.h), the
 * cp - c pad channels zero. */
template <typename T>
__global__ void to_krsc_k(const float *src, T *dst, size_t total, int c,
                          int cp, size_t rs)
{
    TD__GRID_LOOP(i, total)
    {
        size_t o = td_nhwc_to_nchw(i, c, cp, rs);
        st(dst, i, o == (size_t)-1 ? 0.0f : src[o]);
    }
}

/* A KRSC gradient (type T, cp channels) widened into fp32 KCRS; the pad
 * channels' gradients are not read. */
template <typename T>
__global__ void from_krsc_k(const T *src, float *dst, size_t total, int c,
                            int cp, size_t rs)
{
    TD__GRID_LOOP(o, total)
    dst[o] = ld(src, td_nchw_to_nhwc(o, c, cp, rs));
}

template <typename T>
cudaError_t to_krsc_t(cudaStream_t s, const float *src, void *dst, int k,
                      int c, int cp, size_t rs)
{
    size_t total = (size_t)k * rs * (size_t)cp;
    TD_LAUNCH(to_krsc_k<T>, grid_for(total), kBlock, 0, s, src,
              static_cast<T *>(dst), total, c, cp, rs);
    return cudaGetLastError();
}

template <typename T>
cudaError_t from_krsc_t(cudaStream_t s, const void *src, float *dst, int k,
                        int c, int cp, size_t rs)
{
    size_t total = (size_t)k * (size_t)c * rs;
    TD_LAUNCH(from_krsc_k<T>, grid_for(total), kBlock, 0, s,
              static_cast<const T *>(src), dst, total, c, cp, rs);
    return cudaGetLastError();
}

template <typename T>
cudaError_t normalize_nhwc_t(cudaStream_t s, const uint8_t *nhwc, void *y,
                             size_t total, int c, int cp, Norm nm)
{
    TD_LAUNCH(normalize_nhwc_k<T>, grid_for(total), kBlock, 0, s, nhwc,
              static_cast<T *>(y), total, c, cp, nm);
    return cudaGetLastError();
}

/* Host launchers per storage type; the extern "C" ones pick by dt. */
template <typename T>
cudaError_t bn_eval_bwd_t(cudaStream_t s, const void *x, const void *dy,
                          void *dx, const float *gamma, const float *mean,
                          const float *var, float eps, float *dgamma,
                          float *dbeta, float *part, int n, int c, size_t hw,
                          int accumulate, int nhwc)
{
    size_t planes = (size_t)n * c, count = planes * hw;
    const T *tx = static_cast<const T *>(x), *tdy = static_cast<const T *>(dy);
    if (sizeof(T) == sizeof(float))
        TD_LAUNCH(bn_eval_plane_k, grid_for(planes), kBlock, 0, s,
                  reinterpret_cast<const float *>(tx),
                  reinterpret_cast<const float *>(tdy), mean, part, planes,
                  c, hw);
    else
        TD_LAUNCH(bn_eval_plane_lp_k<T>, grid_for(planes), kBlock, 0, s, tx,
                  tdy, mean, part, planes, c, hw, nhwc);
    TD_LAUNCH(bn_eval_chan_k, (c + kBlock - 1) / kBlock, kBlock, 0, s, part,
              var, eps, dgamma, dbeta, n, c);
    if (dx)
        TD_LAUNCH(bn_eval_dx_k<T>, grid_for(count), kBlock, 0, s, tdy,
                  static_cast<T *>(dx), gamma, var, eps, count, c, hw,
                  accumulate, nhwc);
    return cudaGetLastError();
}

template <typename T>
cudaError_t normalize_t(cudaStream_t s, const uint8_t *nhwc, void *y,
                        size_t total, int c, int h, int w, Norm nm)
{
    TD_LAUNCH(normalize_k<T>, grid_for(total), kBlock, 0, s, nhwc,
              static_cast<T *>(y), total, c, h, w, nm);
    return cudaGetLastError();
}

template <typename T>
cudaError_t sgd_t(cudaStream_t s, float *w, float *v, const float *g,
                  size_t count, const float *lr, float mu, float wd,
                  int nesterov, const td_ls_dev *ls, void *low,
                  const td_lowp_map &map)
{
    TD_LAUNCH(sgd_k<T>, grid_for(count), kBlock, 0, s, w, v, g, count, lr, mu,
              wd, nesterov, ls, static_cast<T *>(low), map);
    return cudaGetLastError();
}

template <typename T>
cudaError_t adamw_t(cudaStream_t s, float *w, float *m, float *v,
                    const float *g, size_t count, const float *lr, float b1,
                    float b2, float eps, float wd, const td_step_scalars *sc,
                    const td_ls_dev *ls, void *low, const td_lowp_map &map)
{
    TD_LAUNCH(adamw_k<T>, grid_for(count), kBlock, 0, s, w, m, v, g, count,
              lr, b1, b2, eps, wd, sc, ls, static_cast<T *>(low), map);
    return cudaGetLastError();
}

template <typename T>
cudaError_t widen_t(cudaStream_t s, const void *src, float *dst,
                    size_t count)
{
    TD_LAUNCH(widen_k<T>, grid_for(count), kBlock, 0, s,
              static_cast<const T *>(src), dst, count);
    return cudaGetLastError();
}

template <typename T>
cudaError_t narrow_t(cudaStream_t s, const float *src, void *dst,
                     size_t count)
{
    TD_LAUNCH(narrow_k<T>, grid_for(count), kBlock, 0, s, src,
              static_cast<T *>(dst), count);
    return cudaGetLastError();
}

template <typename T>
cudaError_t add_t(cudaStream_t s, const void *a, const void *b, void *y,
                  size_t count)
{
    TD_LAUNCH(add_k<T>, grid_for(count), kBlock, 0, s,
              static_cast<const T *>(a), static_cast<const T *>(b),
              static_cast<T *>(y), count);
    return cudaGetLastError();
}

template <typename T>
cudaError_t accum_t(cudaStream_t s, void *d, const void *src, size_t count,
                    int accumulate)
{
    TD_LAUNCH(accum_k<T>, grid_for(count), kBlock, 0, s, static_cast<T *>(d),
              static_cast<const T *>(src), count, accumulate);
    return cudaGetLastError();
}

template <typename T>
cudaError_t bias_add_t(cudaStream_t s, void *y, const float *b, size_t count,
                       int out)
{
    TD_LAUNCH(bias_add_k<T>, grid_for(count), kBlock, 0, s,
              static_cast<T *>(y), b, count, out);
    return cudaGetLastError();
}

template <typename T>
cudaError_t bias_grad_lp_t(cudaStream_t s, const void *dy, float *db,
                           int rows, int out)
{
    TD_LAUNCH(bias_grad_lp_k<T>, (out + kBlock - 1) / kBlock, kBlock, 0, s,
              static_cast<const T *>(dy), db, rows, out);
    return cudaGetLastError();
}

template <typename T>
cudaError_t dropout_fwd_t(cudaStream_t s, const void *x, void *y,
                          uint8_t *mask, size_t count, uint64_t seed,
                          uint64_t stream, const td_step_scalars *sc,
                          float keep, int c, size_t hw)
{
    TD_LAUNCH(dropout_fwd_k<T>, grid_for(count), kBlock, 0, s,
              static_cast<const T *>(x), static_cast<T *>(y), mask, count,
              seed, stream, sc, keep, c, hw);
    return cudaGetLastError();
}

template <typename T>
cudaError_t dropout_bwd_t(cudaStream_t s, const void *dy, void *dx,
                          const uint8_t *mask, size_t count, float keep,
                          int accumulate)
{
    TD_LAUNCH(dropout_bwd_k<T>, grid_for(count), kBlock, 0, s,
              static_cast<const T *>(dy), static_cast<T *>(dx), mask, count,
              keep, accumulate);
    return cudaGetLastError();
}

} // namespace

/* F<storage type of dt>(args...) */
#define TD__BY_DT(dt, F, ...)                                                 \
    ((dt) == TD_KDT_BF16  ? F<Bf16>(__VA_ARGS__)                              \
     : (dt) == TD_KDT_F16 ? F<F16>(__VA_ARGS__)                               \
                          : F<float>(__VA_ARGS__))


extern "C" cudaError_t td__k_normalize(cudaStream_t s, const uint8_t *nhwc,
                                       void *y, int n, int c, int h, int w,
                                       int cp, const float *scale,
                                       const float *bias, int dt)
{
    Norm nm;
    for (int i = 0; i < 4; i++) {
        nm.scale[i] = i < c ? scale[i] : 0.0f;
        nm.bias[i] = i < c ? bias[i] : 0.0f;
    }
    if (cp > 0)
        return TD__BY_DT(dt, normalize_nhwc_t, s, nhwc, y,
                         (size_t)n * h * w * cp, c, cp, nm);
    size_t total = (size_t)n * c * h * w;
    return TD__BY_DT(dt, normalize_t, s, nhwc, y, total, c, h, w, nm);
}

extern "C" cudaError_t td__k_to_krsc(cudaStream_t s, const float *src,
                                     void *dst, int dt, int k, int c, int cp,
                                     size_t rs)
{
    return TD__BY_DT(dt, to_krsc_t, s, src, dst, k, c, cp, rs);
}

extern "C" cudaError_t td__k_from_krsc(cudaStream_t s, const void *src,
                                       int dt, float *dst, int k, int c,
                                       int cp, size_t rs)
{
    return TD__BY_DT(dt, from_krsc_t, s, src, dst, k, c, cp, rs);
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
                                 int nesterov, const td_ls_dev *ls, void *low,
                                 const td_lowp_map *map, int low_dt)
{
    td_lowp_map none = {};
    return TD__BY_DT(low_dt, sgd_t, s, w, v, g, count, lr, mu, wd, nesterov,
                     ls, low, map ? *map : none);
}

extern "C" cudaError_t td__k_adamw(cudaStream_t s, float *w, float *m,
                                   float *v, const float *g, size_t count,
                                   const float *lr, float b1, float b2,
                                   float eps, float wd,
                                   const td_step_scalars *sc,
                                   const td_ls_dev *ls, void *low,
                                   const td_lowp_map *map, int low_dt)
{
    td_lowp_map none = {};
    return TD__BY_DT(low_dt, adamw_t, s, w, m, v, g, count, lr, b1, b2, eps,
                     wd, sc, ls, low, map ? *map : none);
}

extern "C" cudaError_t td__k_widen(cudaStream_t s, const void *src, int dt,
                                   float *dst, size_t count)
{
    return TD__BY_DT(dt, widen_t, s, src, dst, count);
}

extern "C" cudaError_t td__k_narrow(cudaStream_t s, const float *src,
                                    void *dst, int dt, size_t count)
{
    return TD__BY_DT(dt, narrow_t, s, src, dst, count);
}

extern "C" cudaError_t td__k_add(cudaStream_t s, const void *a,
                                 const void *b, void *y, size_t count, int dt)
{
    return TD__BY_DT(dt, add_t, s, a, b, y, count);
}

extern "C" cudaError_t td__k_accum(cudaStream_t s, void *d, const void *src,
                                   size_t count, int accumulate, int dt)
{
    return TD__BY_DT(dt, accum_t, s, d, src, count, accumulate);
}

extern "C" cudaError_t td__k_bias_add(cudaStream_t s, void *y,
                                      const float *b, int rows, int out,
                                      int dt)
{
    return TD__BY_DT(dt, bias_add_t, s, y, b, (size_t)rows * out, out);
}

extern "C" cudaError_t td__k_bias_grad(cudaStream_t s, const void *dy,
                                       float *db, int rows, int out, int dt)
{
    if (dt != TD_KDT_F32)
        return dt == TD_KDT_BF16 ? bias_grad_lp_t<Bf16>(s, dy, db, rows, out)
                                 : bias_grad_lp_t<F16>(s, dy, db, rows, out);
    TD_LAUNCH(bias_grad_k, (out + kBlock - 1) / kBlock, kBlock, 0, s,
              static_cast<const float *>(dy), db, rows, out);
    return cudaGetLastError();
}

extern "C" cudaError_t td__k_dropout_fwd(cudaStream_t s, const void *x,
                                         void *y, uint8_t *mask,
                                         size_t count, uint64_t seed,
                                         uint64_t stream,
                                         const td_step_scalars *sc,
                                         float keep, int c, size_t hw,
                                         int dt)
{
    return TD__BY_DT(dt, dropout_fwd_t, s, x, y, mask, count, seed, stream,
                     sc, keep, c, hw);
}

extern "C" cudaError_t td__k_dropout_bwd(cudaStream_t s, const void *dy,
                                         void *dx, const uint8_t *mask,
                                         size_t count, float keep,
                                         int accumulate, int dt)
{
    return TD__BY_DT(dt, dropout_bwd_t, s, dy, dx, mask, count, keep,
                     accumulate);
}

extern "C" cudaError_t td__k_bn_eval_bwd(cudaStream_t s, const void *x,
                                         const void *dy, void *dx,
                                         const float *gamma,
                                         const float *mean, const float *var,
                                         float eps, float *dgamma,
                                         float *dbeta, float *part, int n,
                                         int c, size_t hw, int accumulate,
                                         int nhwc, int dt)
{
    return TD__BY_DT(dt, bn_eval_bwd_t, s, x, dy, dx, gamma, mean, var, eps,
                     dgamma, dbeta, part, n, c, hw, accumulate, nhwc);
}
