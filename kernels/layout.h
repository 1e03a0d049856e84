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
 * The fused optimizer update writes the 16-bit copy of the fp32 master
 * weights (flat, canonical) straight in that copy's layout through a
 * td_lowp_map: the permuted segments (a convolution's filter, a dense
 * layer's weights over an NHWC input) of the elements one launch updates,
 * each stored at its own place in the copy (dst: the padded stem's filter
 * lives after the copy), every other element at its own index.
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

/* At most this many permuted segments per update launch: the map is a
 * kernel argument by value (CUDA's 4 KB of kernel parameters; one launch
 * per TD_LOWP_SEGS filters, cuda_step.c). */
#define TD_LOWP_SEGS 24

/* Master elements [lo, end) hold a k x c x rs KCRS tensor (k = (end -
 * lo) / (c * rs)) the copy stores in KRSC with cp >= c channels from
 * element dst on (the pad channels are not the update's: zero). */
typedef struct td_lowp_seg {
    size_t lo, end, dst, rs;
    int c, cp;
} td_lowp_seg;

/* The permuted segments among master elements [at, ...) of one launch,
 * sorted by lo, not overlapping; element i of the launch is master
 * element at + i. */
typedef struct td_lowp_map {
    size_t at;
    int n;
    td_lowp_seg s[TD_LOWP_SEGS];
} td_lowp_map;

/* The index in the 16-bit copy of master element e: its KRSC place when
 * a segment of m holds it, else e itself. */
TD_HD static inline size_t td_lowp_index(const td_lowp_map *m, size_t e)
{
    int lo = 0, hi = m->n; /* the first segment with s.lo > e */
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (m->s[mid].lo <= e)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0 || e >= m->s[lo - 1].end)
        return e;
    const td_lowp_seg *s = &m->s[lo - 1];
    return s->dst + td_nchw_to_nhwc(e - s->lo, s->c, s->cp, s->rs);
}

/* The index, in the weights of the convolution computing a stride-1
 * "same" convolution's backward data (kc x k x r x r: channels swapped,
 * kernel flipped), of element i of that convolution's k x c x r x r
 * filter (KCRS): W'[ch][kc][r-1-y][r-1-x] = W[kc][ch][y][x].  Its own
 * inverse with k and c swapped. */
TD_HD static inline size_t td_conv_flip_index(size_t i, size_t k, size_t c,
                                              size_t r)
{
    size_t x = i % r, y = i / r % r, ch = i / (r * r) % c, kc = i / (r * r * c);
    return ((ch * k + kc) * r + (r - 1 - y)) * r + (r - 1 - x);
}

#endif
