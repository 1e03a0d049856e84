/* cpu_wino.h - the CPU backend's fp32 3x3 convolutions by Winograd's
 * minimal filtering, F(2x2, 3x3) or F(4x4, 3x3), on AVX2 + FMA, in
 * oneDNN's nChw8c layout (the one its AVX2 kernels choose for fp32).
 *
 * Owns: for a 3x3, stride 1, pad 1 convolution of fp32 x [n][ic/8][h][w][8]
 * into y [n][oc/8][h][w][8]: the forward (y = conv(x, W) + bias), the
 * backward data as the forward of the flipped, channel-swapped weights
 * (td_wino_weights_flip), and the backward weights (dW, db from x and dy).
 * The output is cut into tiles of mh x mw outputs (each 2 or 4); a
 * tile's (mh+2) x (mw+2) input patch d becomes V = B_h^T d B_w, the
 * weights U = G_h g G_w^T (both (mh+2)(mw+2) values per channel), and the
 * tile's output Y = A_h^T (sum over ic of U . V) A_w: 36 products per
 * input channel for 16 outputs (F(4x4)), 24 for 8 (F(4x2), F(2x4)) or 16
 * for 4 (F(2x2)) instead of 9 per output, each of the positions one
 * matrix product [tiles x ic] . [ic x oc] over a block of tiles.  Per
 * side as many tiles of 4 as fit, then one of 2 where 1 or 2 outputs are
 * left (one more of 4 where 3 are): 14x14 takes 3x3 F(4x4) tiles, 3
 * F(4x2), 3 F(2x4) and one F(2x2), 484 products per channel pair against
 * 576 for 4x4 tiles of 4x4.  The weight gradient is the chain rule
 * through the same linear maps: dU = sum over tiles of (A_h dY A_w^T) .
 * V, dW = G_h^T dU G_w, on square tiles alone (of 4, or of 2 where they
 * take fewer products: the per-class sums cost more than the edge tiles
 * save).  F(2)'s coefficients are 0, +-1 and +-1/2,
 * F(4)'s (points 0, +-1, 2, -1/2) up to 8 and 16/15: the rounding stays
 * that of a few more additions per value, about 10x more with F(4)
 * (test_wino.c states the bounds).
 * Threads split the tiles; a tile's outputs come from one thread, and the
 * weight gradient is summed in up to eight fixed groups of tiles (fewer
 * where the groups' sums would outweigh their tiles: a rule of the shape
 * alone), the groups in group order: results do not depend on the thread
 * count (exact resumes).  Where a tile shape's transformed weights
 * outgrow the caches (over 1 MiB: 128 x 128 channels and up), the
 * forward's blocks are shared by all the threads, split by position for
 * the products, so that each block of up to 120 tiles reads them once.
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

/* The same for a plan that only runs td_wino_fwd (a convolution's
 * backward data): without the weight gradient's buffers (up to eight
 * groups of (m+2)^2 x ic x oc sums: 9.4 MB each for F(4x4) on 256
 * channels).
 * td_wino_bwdw on it leaves dw and db as they are. */
td_wino *td_wino_create_fwd(int n, int h, int w, int ic, int oc,
                            int threads);

/* The same with the tiles m: 2 or 4, tiles of m x m alone (the last
 * ones past the image where m does not divide its sides), or 0, the
 * tiles of 4 and 2 above; NULL for any other m.  td_wino_create takes
 * td_wino_tile_for(h, w): TD_CPU_WINO_TILE=2 or 4 in the environment,
 * else 0. */
td_wino *td_wino_create_tile(int n, int h, int w, int ic, int oc,
                             int threads, int m);
int td_wino_tile_for(int h, int w);

/* The plan's largest tile side, 2 or 4; its tile shapes as text, e.g.
 * "F(4x4, 3x3) + F(4x2, 3x3) + F(2x4, 3x3) + F(2x2, 3x3)"; the products
 * per image and channel pair (484 on 14x14, 576 with m = 4). */
int td_wino_tile(const td_wino *p);
const char *td_wino_tiles(const td_wino *p);
long td_wino_products(const td_wino *p);

/* The weight gradient's groups (0 for a forward-only plan); whether the
 * forward's blocks are shared by the threads; the bytes the plan holds
 * (transformed weights, scratch, sums). */
int td_wino_groups(const td_wino *p);
int td_wino_shared(const td_wino *p);
size_t td_wino_bytes(const td_wino *p);

/* The bytes of the plan's working buffers: the blocks' scratch and the
 * weight gradient's sums.  They hold nothing from one call to the next,
 * so the plans of a model (which run one at a time) can share one
 * buffer: td_wino_share_work frees the plan's own and runs it in w
 * from then on (64-byte aligned, td_wino_work_bytes at least, owned by
 * the caller and kept until the plan is destroyed; the plan's
 * td_wino_bytes no longer counts it).  The transformed weights and the
 * moments stay the plan's own. */
size_t td_wino_work_bytes(const td_wino *p);
void td_wino_share_work(td_wino *p, void *w);

/* The plan's transformed weights from fp32 w[oc][ic][3][3]; or, for the
 * plan of a convolution's backward data (created with ic and oc swapped),
 * from that convolution's weights w[i][o][3][3] (dx = conv(dy, the
 * weights flipped and their channels swapped)).  Parallel (OpenMP). */
void td_wino_weights(td_wino *p, const float *w);
void td_wino_weights_flip(td_wino *p, const float *w);

/* A batch norm and relu folded into the convolution's input (cpu_fold.h):
 * with fold, x is the batch norm's input and the convolution's the
 * folded values, bit for bit as if written out; NULL: x as it is. */
typedef struct td_fold td_fold;

/* y = conv(x, weights) + bias (bias may be NULL).  Parallel (OpenMP). */
void td_wino_fwd(td_wino *p, const float *x, float *y, const float *bias,
                 const td_fold *fold);

/* Moments of the forward's outputs for a batch norm that reads them (its
 * statistics pass saved): from the next td_wino_fwd on, each block of
 * tiles keeps per output channel the sums of (y - shift) and (y -
 * shift)^2 about a shift of its own (its first output), as it stores y;
 * td_wino_moments merges them in block order into the mean and the
 * biased variance of every channel over the batch (fixed blocks: the
 * same bits on any thread count).  want: -1 out of memory. */
int td_wino_want_moments(td_wino *p);
void td_wino_moments(const td_wino *p, float *mean, float *var);

/* dw[oc][ic][3][3] = dL/dW and db[oc] = dL/dbias (db may be NULL) from x
 * and dy [n][oc/8][h][w][8], both overwritten; with fold, of x folded
 * as td_wino_fwd reads it.  Parallel (OpenMP). */
void td_wino_bwdw(td_wino *p, const float *x, const float *dy, float *dw,
                  float *db, const td_fold *fold);

#endif
