/* cpu_bwdw.h - the CPU backend's hand-written bf16 channels-last
 * convolution backward weights on AMX tiles.
 *
 * Owns: dW of a k x k convolution (stride 1 or 2, any padding) from
 * NHWC bf16 x and dy, accumulated in fp32 on AMX tiles (tdpbf16ps).  The
 * reduction runs over the positions of a zero-bordered grid holding dy
 * and x: dW[tap] = xT[ic][q + off(tap)] . dy[q][oc] summed over q, dy
 * zero on the border, so every tap is one matrix product over the same
 * positions at a shifted start (no im2col).  With stride 2, x is split
 * into its four phases (even/odd rows and columns), each on the grid of
 * dy: a tap reads one phase at a shift.  Per chunk of samples a thread
 * lays out x transposed (channel rows, the tiles' A operand) and dy
 * pair-interleaved (the B operand) in its own L2-sized buffers.  Chunks
 * are summed in four fixed groups, the groups in group order: the result
 * does not depend on the thread count (exact resumes), and at most four
 * threads work on one call.  Used by the bf16 plan on AMX instead of
 * oneDNN 2.6's jit:avx512_core_amx_bf16 backward weights, 2-4x slower on
 * resnet's small images (docs/compute.md).
 * Never does: strides over 2, channel counts that are not multiples of
 * 16 (except fewer than 16 input channels), anything with oneDNN,
 * allocate per call.
 */
#ifndef TD_BACKEND_CPU_BWDW_H
#define TD_BACKEND_CPU_BWDW_H

#include <stddef.h>

#include "bf16.h"

typedef struct td_bwdw td_bwdw;

/* This process may use AMX bf16 tiles: the CPU has them, oneDNN's
 * effective ISA is avx512_core_amx (ONEDNN_MAX_CPU_ISA below it turns
 * this off too) and the kernel granted the tile state (asked once). */
int td_bwdw_amx(void);

/* The kernel computes this convolution: k <= 7, stride 1 or 2, pad < k,
 * ic below 16 (a stem) or a multiple of 16, oc a multiple of 16, and
 * td_bwdw_amx(). */
int td_bwdw_ok(int k, int stride, int pad, int ic, int oc);

/* A plan for x [n][h][w][ic] and dy [n][oh][ow][oc] run by up to `threads`
 * threads (buffers for each); NULL when !td_bwdw_ok or out of memory. */
td_bwdw *td_bwdw_create(int n, int h, int w, int ic, int oc, int k,
                        int stride, int pad, int threads);
void td_bwdw_destroy(td_bwdw *p);

/* dw[oc][ic][kh][kw] (fp32, overwritten) and, when db is not NULL,
 * db[oc] = the sum of dy over all positions.  Parallel (OpenMP). */
void td_bwdw_run(td_bwdw *p, const td_bf16 *x, const td_bf16 *dy, float *dw,
                 float *db);

#endif
