/* normalize.h - uint8 pixels to normalised floats (cast + normalise).
 *
 * Math: y = (x / 255 - mean[c]) / std[c] = x * scale[c] + bias[c] with
 * scale = 1 / (255 std) and bias = -mean / std.  The batch arrives as
 * uint8 NHWC; the output is float NCHW (what the first convolution reads).
 * One element per call so a CUDA kernel maps one thread to one output
 * element; td_normalize_batch is the host loop over the same function.
 * Batches that arrive planar (NCHW) use td_normalize_planar.
 * Never does: allocation, augmentation.
 */
#ifndef TD_KERNELS_NORMALIZE_H
#define TD_KERNELS_NORMALIZE_H

#include <stddef.h>
#include <stdint.h>

#include "hd.h"

TD_HD static inline void td_normalize_coeffs(float mean, float std,
                                             float *scale, float *bias)
{
    *scale = 1.0f / (255.0f * std);
    *bias = -mean / std;
}

/* Output element o (NCHW index) of an n x c x h x w batch. */
TD_HD static inline float td_normalize_elem(const uint8_t *nhwc, size_t o,
                                            int c, int h, int w,
                                            const float *scale,
                                            const float *bias)
{
    size_t hw = (size_t)h * w;
    size_t x = o % hw;
    size_t ch = (o / hw) % (size_t)c;
    size_t nn = o / (hw * (size_t)c);
    uint8_t v = nhwc[(nn * hw + x) * (size_t)c + ch];
    return (float)v * scale[ch] + bias[ch];
}

/* Output element o of an NHWC batch with cp >= c channels (the CUDA
 * backend's 16-bit layout; the pad channels c..cp-1 are zero, for the
 * padded stem): the input is NHWC already, so o walks it in order. */
TD_HD static inline float td_normalize_nhwc_elem(const uint8_t *nhwc,
                                                 size_t o, int c, int cp,
                                                 const float *scale,
                                                 const float *bias)
{
    size_t ch = o % (size_t)cp, pix = o / (size_t)cp;
    if (ch >= (size_t)c)
        return 0.0f;
    return (float)nhwc[pix * (size_t)c + ch] * scale[ch] + bias[ch];
}

/* Host loop: the whole batch, plane by plane. */
static inline void td_normalize_batch(const uint8_t *nhwc, float *nchw, int n,
                                      int c, int h, int w, const float *scale,
                                      const float *bias)
{
    size_t hw = (size_t)h * w;
    for (int i = 0; i < n; i++)
        for (int ch = 0; ch < c; ch++) {
            const uint8_t *src = nhwc + (size_t)i * hw * c + ch;
            float *dst = nchw + ((size_t)i * c + ch) * hw;
            float s = scale[ch], b = bias[ch];
            for (size_t x = 0; x < hw; x++)
                dst[x] = (float)src[x * c] * s + b;
        }
}

/* Host loop for batches that arrive planar (NCHW uint8). */
static inline void td_normalize_planar(const uint8_t *nchw, float *out, int n,
                                       int c, int h, int w,
                                       const float *scale, const float *bias)
{
    size_t hw = (size_t)h * w;
    for (int i = 0; i < n; i++)
        for (int ch = 0; ch < c; ch++) {
            const uint8_t *src = nchw + ((size_t)i * c + ch) * hw;
            float *dst = out + ((size_t)i * c + ch) * hw;
            float s = scale[ch], b = bias[ch];
            for (size_t x = 0; x < hw; x++)
                dst[x] = (float)src[x] * s + b;
        }
}

#endif
