/* layout.h - element indices between the canonical NCHW / KCRS orders and
 * the NHWC / KRSC ones the CUDA backend keeps 16-bit tensors in.
 *
 * Math: an n x c x h x w activation tensor (hw = h * w) holds element
 * (n, c, p) (p the pixel, 0 <= p < hw) at
 *   NCHW  (n * c + ch) * hw + p        (the model's order: model.h, the CPU
 *                                       backend, snapshots, tests)
 *   NHWC  (n * hw + p) * cp + ch       with cp >= c channels stored, the
 *                                       ones past c zero (the padded stem)
 * A convolution's k x c x r x s filter (rs = r * s) holds (k, ch, q) at
 *   KCRS  (k * c + ch) * rs + q        (the fp32 master weights)
 *   KRSC  (k * rs + q) * cp + ch       (cuDNN's CUDNN_TENSOR_NHWC filter
 *                                       format; the 16-bit copy)
 * which is the same mapping with n = k and hw = rs.  A dense layer
 * reading a flattened NHWC tensor sees its columns in (p, ch) order: its
 * weights [out][c * hw] are permuted the same way (k = out, rs = hw).
 * One index per call so a CUDA kernel maps one thread to one element and
 * the host tests exercise the same code.
 * Never does: allocation, launching, touch data.
 */
#ifndef TD_KERNELS_LAYOUT_H
#define TD_KERNELS_LAYOUT_H

#include <stddef.h>

#include "hd.h"

/* The NCHW index of element i of an NHWC tensor with cp >= c stored
 * channels; (size_t)-1 for a pad channel (ch >= c). */
TD_HD static inline size_t td_nhwc_to_nchw(size_t i, int c, int cp,
                                           size_t hw)
{
    size_t ch = i % (size_t)cp, pix = i / (size_t)cp;
    size_t p = pix % hw, n = pix / hw;
    if (ch >= (size_t)c)
        return (size_t)-1;
    return (n * (size_t)c + ch) * hw + p;
}

/* The NHWC index (cp stored channels) of element o of an NCHW tensor. */
TD_HD static inline size_t td_nchw_to_nhwc(size_t o, int c, int cp,
                                           size_t hw)
{
    size_t p = o % hw, ch = (o / hw) % (size_t)c, n = o / (hw * (size_t)c);
    return (n * hw + p) * (size_t)cp + ch;
}

#endif
