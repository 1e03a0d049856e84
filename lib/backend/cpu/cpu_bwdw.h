/* cpu_bwdw.h - the CPU backend's hand-written bf16 convolution backward
 * weights on AMX tiles or, without AMX, on AVX512_BF16 (vdpbf16ps).
 *
 * Owns: dW of a k x k convolution (stride 1 or 2, any padding) from
 * bf16 x and dy, channels-last (NHWC) or blocked (nChw16c, the layout
 * oneDNN's AVX512_BF16 kernels choose), accumulated in fp32 on AMX tiles
 * (tdpbf16ps) or in zmm registers (vdpbf16ps, same products, same
 * accumulator layout).  The
 * reduction runs over the positions of a zero-bordered grid holding dy
 * and x: dW[tap] = xT[ic][q] . dy[q - off(tap)][oc] summed over q, zero on
 * the border, so every tap is one matrix product over the same positions
 * with dy at a shifted start (no im2col).  With stride 2, x is split
 * into its four phases (even/odd rows and columns), each on the grid of
 * dy: a tap reads one phase at a shift.  Per chunk of samples a thread
 * lays out x transposed (channel rows, the tiles' A operand) and dy
 * pair-interleaved (the B operand) in its own L2-sized buffers.  Chunks
 * are summed in four fixed groups, the groups in group order: the result
 * does not depend on the thread count (exact resumes), and at most four
 * threads work on one call.  Used by the bf16 plan on AMX instead of
 * oneDNN 2.6's jit:avx512_core_amx_bf16 backward weights, 2-4x slower on
 * resnet's small images, and (opt-in, TD_CPU_BWDW=1) by the blocked
 * AVX512_BF16 plan instead of oneDNN's jit_bf16:avx512_core_bf16
 * (docs/compute.md).
 * Never does: strides over 2, channel counts that are not multiples of
 * 16 (except fewer than 16 input channels, channels-last only), anything
 * with oneDNN, allocate per call.
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

/* This process may use AVX512_BF16 (vdpbf16ps): cpuid leaf 7 subleaf 1
 * says so and oneDNN's effective ISA runs bf16 natively
 * (avx512_core_bf16 or above). */
int td_bwdw_avx512(void);

/* The path plans created now take: "amx" when td_bwdw_amx(), else
 * "avx512_bf16" when td_bwdw_avx512(), else NULL (no kernel).  The
 * environment's TD_BWDW_ISA=avx512_bf16 (or =amx) asks for that path only
 * (NULL when this process cannot run it); read at every call. */
const char *td_bwdw_isa(void);

/* The kernel computes this convolution: k <= 7, stride 1 or 2, pad < k,
 * ic below 16 (a stem) or a multiple of 16, oc a multiple of 16, and
 * td_bwdw_isa() is not NULL. */
int td_bwdw_ok(int k, int stride, int pad, int ic, int oc);

typedef enum td_bwdw_layout {
    TD_BWDW_NHWC,    /* [n][h][w][c] */
    TD_BWDW_NCHW16C, /* [n][c / 16][h][w][16] (oneDNN's aBcd16b) */
} td_bwdw_layout;

/* A plan for x [n][h][w][ic] and dy [n][oh][ow][oc] (both in `layout`;
 * NCHW16C needs ic a multiple of 16) run by up to `threads` threads
 * (buffers for each) on td_bwdw_isa()'s path; NULL when !td_bwdw_ok or
 * out of memory.  td_bwdw_create is the NHWC one. */
td_bwdw *td_bwdw_create_layout(int n, int h, int w, int ic, int oc, int k,
                               int stride, int pad, int threads,
                               td_bwdw_layout layout);
td_bwdw *td_bwdw_create(int n, int h, int w, int ic, int oc, int k,
                        int stride, int pad, int threads);

/* The path p runs: "amx" or "avx512_bf16". */
const char *td_bwdw_path(const td_bwdw *p);
void td_bwdw_destroy(td_bwdw *p);

/* dw[oc][ic][kh][kw] (fp32, overwritten) and, when db is not NULL,
 * db[oc] = the sum of dy over all positions.  Parallel (OpenMP). */
void td_bwdw_run(td_bwdw *p, const td_bf16 *x, const td_bf16 *dy, float *dw,
                 float *db);

#endif
