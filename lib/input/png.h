/* png.h - PNG samples: the whole image decoded with libpng into a buffer
 * that only grows, handed to the augment stage as a td_region at full
 * scale (PNG has no DCT scales and no crop index: a crop decodes the
 * whole image).
 *
 * Grey, grey+alpha, RGB, RGBA and palette files, 1-16 bits, interlaced or
 * not, as Pillow decodes them: the stored values (gAMA, sRGB, iCCP and
 * cHRM chunks ignored), 16 bits to their high byte; output is 1 (grey
 * from colour by td_luma601, Pillow's convert('L')) or 3 (RGB) channels;
 * an alpha channel (or tRNS) is composited over white in the stored
 * values, as Pillow's alpha_composite over white and a browser on a white
 * page show it (Pillow's convert('RGB') alone drops the alpha instead).
 * Owns: the buffers.  Never: keeps the file's bytes.
 */
#ifndef TD_PNG_H
#define TD_PNG_H

#include <stddef.h>
#include <stdint.h>

#include "input/augment.h"
#include "input/batch.h"
#include "input/decode.h"

/* The most pixels a PNG sample may have (decoded whole: 192 MB in RGB). */
#define TD_PNG_MAX_PIXELS (UINT64_C(1) << 26)

typedef struct td_png {
    uint8_t *px;
    size_t cap;
    uint8_t *raw; /* the file's samples before conversion, when needed */
    size_t rawcap;
    char msg[128];
} td_png;

/* 1 if data starts with the PNG signature. */
int td_png_is(const uint8_t *data, size_t len);
/* Width and height from the header; TD_E_CORRUPT (msg says why: also
 * for an image over TD_PNG_MAX_PIXELS, or larger than the file's size
 * can hold). */
int td_png_header(td_png *p, const uint8_t *data, size_t len, int *w,
                  int *h);
/* Decodes the whole image with c channels into out (valid until the next
 * call).  0, TD_E_CORRUPT, -ENOMEM. */
int td_png_decode(td_png *p, const uint8_t *data, size_t len, int c,
                  td_region *out);
void td_png_free(td_png *p);
/* Encodes w x h x c (1 or 3) pixels as a PNG (lossless) into *buf, grown
 * as needed (*cap); *len gets its size.  0, TD_E_CORRUPT, -ENOMEM. */
/* td_preprocess_jpeg (preprocess.h) for a PNG: the same plan and
 * resampling, the whole image decoded. */
int td_preprocess_png(td_png *p, td_resampler *rs, const td_augment *ops,
                      int n_ops, int train, uint64_t seed, int64_t epoch,
                      uint64_t sample, const uint8_t *data, size_t len,
                      int ow, int oh, int c, enum td_layout layout,
                      uint8_t *dst, int64_t *decoded_ns, const char **msg);
int td_png_encode(const uint8_t *px, int w, int h, int c, uint8_t **buf,
                  size_t *cap, size_t *len);

#endif
