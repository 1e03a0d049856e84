/* cpu_wino.h - the CPU backend's fp32 3x3 convolutions by Winograd's
 * minimal filtering F(2x2, 3x3), on AVX2 + FMA, in oneDNN's nChw8c layout
 * (the one its AVX2 kernels choose for fp32).
 *
 * Owns: for a 3x3, stride 1, pad 1 convolution of fp32 x [n][ic/8][h][w][8]
 * into y [n][oc/8][h][w][8]: the forward (y = conv(x, W) + bias), the
 * backward data as the forward of the flipped, channel-swapped weights
 * (td_wino_weights_flip), and the backward weights (dW, db from x and dy).
 * The output is cut into 2x2 tiles; a tile's 4x4 input patch d becomes
 * V = B^T d B, the weights U = G g G^T (both 16 values per channel), and
 * the tile's output Y = A^T (sum over ic of U . V) A: 16 products per
 * input channel for 4 outputs instead of 36, each of the 16 positions one
 * matrix product [tiles x ic] . [ic x oc] over a block of tiles.  The
 * weight gradient is the chain rule through the same linear maps:
 * dU = sum over tiles of (A dY A^T) . V, dW = G^T dU G.  The transforms'
 * coefficients are 0, +-1 and +-1/2: the rounding stays that of a few
 * additions per value (test_wino.c states the bound it holds to).
 * Threads split the tiles; a tile's outputs come from one thread, and the
 * weight gradient is summed in eight fixed groups of tiles, the groups in
 * group order: results do not depend on the thread count (exact resumes).
 * Never does: other kernels, strides or paddings, channel counts that are
 * not multiples of 16, anything with oneDNN, allocate per call.
 */
#ifndef TD_BACKEND_CPU_WINO_H
#define TD_BACKEND_CPU_WINO_H

#include <stddef.h>

typedef struct td_wino td_wino;

/* This process may run the kernel: the CPU has AVX2 and FMA. */
int td_wino_cpu(void);

/* The kernel computes this convolution: k 3, stride 1, pad 1, ic and oc
 * multiples of 16, and td_wino_cpu(). */
int td_wino_ok(int k, int stride, int pad, int ic, int oc);

/* A plan for x [n][ic/8][h][w][8] into y [n][oc/8][h][w][8], run by up to
 * `threads` threads; NULL when the shape is not td_wino_ok or out of
 * memory. */
td_wino *td_wino_create(int n, int h, int w, int ic, int oc, int threads);
void td_wino_destroy(td_wino *p);

/* The plan's transformed weights from fp32 w[oc][ic][3][3]; or, for the
 * plan of a convolution's backward data (created with ic and oc swapped),
 * from that convolution's weights w[i][o][3][3] (dx = conv(dy, the
 * weights flipped and their channels swapped)).  Parallel (OpenMP). */
void td_wino_weights(td_wino *p, const float *w);
void td_wino_weights_flip(td_wino *p, const float *w);

/* y = conv(x, weights) + bias (bias may be NULL).  Parallel (OpenMP). */
void td_wino_fwd(td_wino *p, const float *x, float *y, const float *bias);

/* dw[oc][ic][3][3] = dL/dW and db[oc] = dL/dbias (db may be NULL) from x
 * and dy [n][oc/8][h][w][8], both overwritten.  Parallel (OpenMP). */
void td_wino_bwdw(td_wino *p, const float *x, const float *dy, float *dw,
                  float *db);

#endif
