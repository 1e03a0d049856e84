/* decode.h - JPEG decoding of just the part of an image a sample needs.
 *
 * One decoder per worker thread: a libjpeg decompressor and scratch
 * buffers that only grow, so steady state allocates nothing.  Use:
 *   td_decoder *d;
 *   td_decoder_create(&d);
 *   td_decoder_header(d, jpeg, len, &w, &h);          parse the headers
 *   td_decoder_region(d, x, y, bw, bh, min_w, min_h, c, flags, &reg);
 *                       decode the box (x, y, bw x bh) of that image
 *   ... reg.px holds reg.h rows of reg.w * c bytes, reg.stride apart
 *   td_decoder_destroy(d);
 * A header is good for one region call.  The region call picks the
 * smallest DCT scale M/8, M in {1, 2, 4, 8} (the scales libjpeg-turbo has
 * SIMD IDCTs for), that keeps the box at least min_w x min_h pixels,
 * decodes only the box's columns (jpeg_crop_scanline, widened to iMCU
 * boundaries) and rows (jpeg_skip_scanlines), and stops after the box's
 * last row (jpeg_abort_decompress).  Output is 1 (gray) or
 * 3 (RGB) channels whatever the file holds: gray, YCbCr, RGB, CMYK and
 * YCCK (Adobe-inverted or not) JPEGs, baseline or progressive.
 * Files with a crop index (jpegidx.h; `trainctl pack`, the default) are
 * decoded through a cut-out JPEG of just the MCUs covering the box, built
 * from the index (td_jpegidx_cut_index); baseline files with restart
 * markers every R MCUs, R dividing the MCUs of a row (`trainctl pack
 * --restart`), through a cut-out of just the restart segments covering it
 * (td_jpegidx_cut_restart).  Either way the entropy data of rows above and
 * columns beside the box is not decoded at all, and the pixels are
 * exactly the plain path's.
 * Owns: libjpeg state and its error recovery (setjmp).  Never: allocates
 * per image once the scratch has grown to the largest box seen.
 */
#ifndef TD_DECODE_H
#define TD_DECODE_H

#include <stddef.h>
#include <stdint.h>

typedef struct td_decoder td_decoder;

/* How td_decoder_region decoded a box (td_region.cut). */
typedef enum td_cut_kind {
    TD_CUT_NONE = 0,    /* the file itself, rows above the box skipped */
    TD_CUT_RESTART = 1, /* a cut-out of the restart segments covering it */
    TD_CUT_INDEX = 2,   /* a cut-out built from the crop index */
} td_cut_kind;

/* The decoded part of an image, in scaled pixel coordinates. */
typedef struct td_region {
    const uint8_t *px;  /* rows of w * c bytes, `stride` apart */
    size_t stride;
    int x0, y0, w, h;   /* where these pixels sit in the scaled image */
    int scaled_w, scaled_h; /* the whole image at this scale */
    int scale_num;      /* M of M/8 */
    int c;
    int cut;            /* the path it took, a td_cut_kind (an int, so
                           it compares with ints without sign warnings) */
} td_region;

enum {
    TD_DECODE_FORCE_FULL_SCALE = 1, /* always 8/8 (reference decodes) */
    TD_DECODE_NO_FANCY = 2,         /* box-filter chroma upsampling */
    TD_DECODE_NO_CUT = 4,           /* no cut-outs (tests) */
};

int td_decoder_create(td_decoder **out);
void td_decoder_destroy(td_decoder *d);

/* Parses the headers.  TD_E_CORRUPT for data that is not a JPEG or is
 * damaged (the message is kept: td_decoder_message). */
int td_decoder_header(td_decoder *d, const uint8_t *data, size_t len, int *w,
                      int *h);

/* Decodes the box (x, y, bw, bh in source pixels, clipped to the image)
 * of the image whose header was just read.  flags: TD_DECODE_*.
 * Returns 0, TD_E_CORRUPT (damaged or truncated data inside the box),
 * -ENOMEM, or -EINVAL (no header read, c not 1 or 3). */
int td_decoder_region(td_decoder *d, int x, int y, int bw, int bh, int min_w,
                      int min_h, int c, int flags, td_region *out);

/* Grey from RGB as Pillow's convert('L') (ITU-R 601-2 luma, in 16-bit
 * fixed point, rounded): L = R * 299/1000 + G * 587/1000 + B * 114/1000.
 * What a 1-channel job gets from an RGB PNG or a CMYK or YCCK JPEG; a
 * YCbCr JPEG gives its own luma Y (the same formula, before the encoder's
 * rounding and chroma subsampling), as torchvision's decode_jpeg(mode=GRAY).
 */
static inline uint8_t td_luma601(unsigned r, unsigned g, unsigned b)
{
    return (uint8_t)((r * 19595u + g * 38470u + b * 7471u + 0x8000u) >> 16);
}

/* libjpeg's message for the last failure ("" if none). */
const char *td_decoder_message(const td_decoder *d);

/* The scale M in {1,2,4,8} the decoder would pick for a box of bw x bh
 * that must keep at least min_w x min_h pixels. */
int td_decode_pick_scale(int bw, int bh, int min_w, int min_h);

#endif
