/* cpu_sbw.h - the CPU backend's fp32 backward weights for a stem
 * convolution: a planar (NCHW) input of few channels into oneDNN's
 * blocked nChw8c output, on AVX2 + FMA.
 *
 * Owns: dW[oc][ic][k][k] and db[oc] from x [n][ic][h][w] and dy
 * [n][oc/8][oh][ow][8], for k <= 3, any stride and padding.  oneDNN 2.6
 * has no AVX2 backward weights kernel for a planar input against a
 * blocked output (its reference one took 1.7 s a step for Fashion-MNIST's
 * first layer); the plan used to retry it channels-last, reordering dy
 * into nhwc every step (docs/compute.md).  Per image, output-channel block
 * and input channel, one pass over the output positions keeps the k*k
 * weight gradients of 8 output channels in registers (the input value
 * broadcast, dy's 8 channels one vector).  Images are summed in eight
 * fixed groups, the groups in group order at the end: results do not
 * depend on the thread count (exact resumes).
 * Never does: other layouts, kernels above 3, anything with oneDNN,
 * allocate per call.
 */
#ifndef TD_BACKEND_CPU_SBW_H
#define TD_BACKEND_CPU_SBW_H

typedef struct td_sbw td_sbw;

/* The kernel computes this convolution's backward weights: k 1 to 3,
 * stride >= 1, 0 <= pad < k, ic >= 1, oc a multiple of 8, on a CPU with
 * AVX2 and FMA. */
int td_sbw_ok(int k, int stride, int pad, int ic, int oc);

/* A plan for x [n][ic][h][w] and dy [n][oc/8][oh][ow][8] (oh, ow the
 * convolution's output size), run by up to `threads` threads; NULL when
 * not td_sbw_ok or out of memory. */
td_sbw *td_sbw_create(int n, int ic, int h, int w, int oc, int oh, int ow,
                      int k, int stride, int pad, int threads);
void td_sbw_destroy(td_sbw *p);

/* dw[oc][ic][k][k] = dL/dW and db[oc] = dL/dbias (db may be NULL), both
 * overwritten.  Parallel (OpenMP). */
void td_sbw_run(td_sbw *p, const float *x, const float *dy, float *dw,
                float *db);

#endif
