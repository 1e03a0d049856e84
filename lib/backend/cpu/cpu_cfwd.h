/* cpu_cfwd.h - the CPU backend's hand-written bf16 channels-last
 * convolution forward on AMX tiles.
 *
 * Owns: y = conv(x, W) (+ bias) for a k x k, stride 1, "same" padding
 * ((k - 1) / 2) convolution of NHWC bf16 x into NHWC bf16 y, products
 * summed in fp32 on AMX tiles (tdpbf16ps) and rounded once to bf16
 * (td_bf16_from_f32's rounding).  Per sample a thread copies x into a
 * zero-bordered buffer (h + 2p rows of w + 2p positions); output position
 * (i, j) is then grid position i * (w + 2p) + j and tap (kh, kw) reads
 * grid position + kh * (w + 2p) + kw: every tap is one matrix product
 * over the same 16-position blocks at a shifted start (A: 16 positions x
 * 32 channels, B: the tap's weights in pairs of input channels, C: 16
 * positions x 16 output channels in fp32 for the whole sum), the two
 * grid columns past each row computed and dropped.  Samples are split
 * between threads: no sums across threads, results independent of the
 * thread count.  The weights live in the plan, in the tiles' layout,
 * written by td_cfwd_weights from fp32 masters after each update.  The
 * CPU backend also runs a stride-1 convolution's backward data on it
 * (td_cfwd_weights_flip).
 * Never does: strides other than 1, channel counts that are not multiples
 * of 16, anything with oneDNN, allocate per call.
 */
#ifndef TD_BACKEND_CPU_CFWD_H
#define TD_BACKEND_CPU_CFWD_H

#include <stddef.h>

#include "bf16.h"

typedef struct td_cfwd td_cfwd;

/* The kernel computes this convolution: k odd <= 7, stride 1, pad (k-1)/2,
 * ic and oc multiples of 16, and AMX usable (td_bwdw_amx()). */
int td_cfwd_ok(int k, int stride, int pad, int ic, int oc);

/* A plan for x [n][h][w][ic] into y [n][h][w][oc], run by up to `threads`
 * threads; NULL when !td_cfwd_ok or out of memory. */
td_cfwd *td_cfwd_create(int n, int h, int w, int ic, int oc, int k,
                        int threads);
void td_cfwd_destroy(td_cfwd *p);

/* The plan's bf16 weights from fp32 w[oc][ic][kh][kw] (rounded to
 * nearest even).  Parallel (OpenMP). */
void td_cfwd_weights(td_cfwd *p, const float *w);

/* The same from the weights w[i][o][kh][kw] of the convolution whose
 * backward data this plan computes (ic and oc swapped, kernel flipped: for
 * stride 1 and "same" padding, dx = conv(dy, flipped weights)). */
void td_cfwd_weights_flip(td_cfwd *p, const float *w);

/* The same in pieces, for a caller's parallel loop: source weights [lo,
 * hi) of td_cfwd_weight_count, from the layout the last td_cfwd_weights
 * or td_cfwd_weights_flip call chose.  No OpenMP inside. */
size_t td_cfwd_weight_count(const td_cfwd *p);
void td_cfwd_weights_range(td_cfwd *p, const float *w, size_t lo,
                           size_t hi);

/* y = conv(x, weights) + bias (bias may be NULL).  Parallel (OpenMP). */
void td_cfwd_run(td_cfwd *p, const td_bf16 *x, td_bf16 *y,
                 const float *bias);

#endif
