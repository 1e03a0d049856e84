/* cpu_pool.h - the CPU backend's fp32 2x2, stride-2 max pooling (and the
 * 3x3, stride-2, pad-1 one of ResNet stems) on AVX2 in oneDNN's blocked
 * layouts (nChw8c, nChw16c).
 *
 * Owns: y = the maximum of each 2x2 window of x, and the gradient dx = dy
 * at each window's maximum, 0 elsewhere.  The winner of a window is its
 * first maximum in the order (0, 0), (0, 1), (1, 0), (1, 1) (ties go to
 * the earliest, as oneDNN's and the reference layers'); the forward keeps
 * per 8 output channels four bit masks (one per window position, a bit per
 * channel: 4 bytes where oneDNN keeps a byte per output), which the
 * backward expands: every input element gets dy or 0, no zeroing pass.
 * The 3x3 one (below) keeps a byte per channel and sums overlapping
 * windows.  Parallel (OpenMP) over channel planes; results do not depend
 * on the thread count.
 * Never does: other kernels, strides or paddings, odd sizes for 2x2,
 * other data types, anything with oneDNN.
 */
#ifndef TD_BACKEND_CPU_POOL_H
#define TD_BACKEND_CPU_POOL_H

#include <stddef.h>
#include <stdint.h>

/* The kernel computes this pooling: kernel 2, stride 2, no padding, an
 * even input size; or kernel 3, stride 2, padding 1 (ResNet's stem:
 * 112x112 -> 56x56), any input size; channels in blocks of blk = 8 or
 * 16, AVX2 and FMA present. */
int td_maxpool_ok(int kernel, int stride, int pad, int h, int w, int blk);

/* Mask bytes for an output of `planes` = n * c / blk blocks of oh x ow
 * of the kernel x kernel pooling. */
size_t td_maxpool_mask_bytes(int kernel, size_t planes, int oh, int ow,
                             int blk);

/* x [planes][h][w][blk] -> y [planes][oh][ow][blk] (2x2: oh = h / 2;
 * 3x3: oh = (h - 1) / 2 + 1), mask; with fold (blk 8 only; plane p holds
 * channels (p mod C/8) * 8 ..), the pooling of x's folded values
 * (cpu_fold.h), bit for bit the pooling of the unfolded batch norm's
 * output.  3x3: output (i, j) is the maximum over input rows 2i-1 ..
 * 2i+1 and columns 2j-1 .. 2j+1 inside the image, its first maximum in
 * row-major window order the winner (as oneDNN's), kept as a byte per
 * channel. */
typedef struct td_fold td_fold;
void td_maxpool_fwd(int kernel, const float *x, float *y, uint8_t *mask,
                    size_t planes, int h, int w, int blk,
                    const td_fold *fold);

/* dy [planes][oh][ow][blk], mask -> dx [planes][h][w][blk]; 3x3: every
 * input gets the sum of dy over the windows it won (windows overlap by a
 * row and a column), in window order, each dx written once. */
void td_maxpool_bwd(int kernel, const float *dy, const uint8_t *mask,
                    float *dx, size_t planes, int h, int w, int blk);

#endif
