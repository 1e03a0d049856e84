/* decode.c - crop-and-scale JPEG decoding with libjpeg(-turbo) (see
 * decode.h).  libjpeg reports fatal errors through error_exit, which
 * longjmps back here (jpegerr.h); the decompressor is then aborted and
 * reused.  A box of a file with a crop index or a restart grid is decoded
 * from a cut-out JPEG jpegidx_cut.c builds, like any JPEG, and its pixels
 * put back where they sit in the source.
 * Owns: the decompressor, the decoded rows.  Never: parses the entropy-
 * coded data itself (jpegidx_cut.c does), allocates per image once the
 * buffers have grown.
 */
#include "input/decode.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/error.h"
#include "input/jpegerr.h"
#include "input/jpegidx.h"

struct td_decoder {
    struct jpeg_decompress_struct ci;
    td_jpeg_err jerr;
    td_buf rows;          /* decoded box */
    td_buf line;          /* one CMYK line before conversion */
    td_jpegidx_reader ix; /* the file's markers, the cut-out scratch */
    int have_header;
    char msg[JMSG_LENGTH_MAX];
};

/* A crop request: the box in source pixels (x, y, w x h; clipped to the
 * image when decoded, pad_crop boxes stick out), the size it must keep
 * after scaling, the channels wanted (1 or 3), TD_DECODE_* flags. */
struct td__crop {
    int x, y, w, h;
    int min_w, min_h;
    int c, flags;
};

int td_decoder_create(td_decoder **out)
{
    td_decoder *d = calloc(1, sizeof *d);
    if (!d)
        return -ENOMEM;
    d->ci.err = td_jpeg_err_init(&d->jerr);
    if (setjmp(d->jerr.jb)) {
        free(d);
        return -ENOMEM;
    }
    jpeg_create_decompress(&d->ci);
    *out = d;
    return 0;
}

void td_decoder_destroy(td_decoder *d)
{
    if (!d)
        return;
    jpeg_destroy_decompress(&d->ci);
    td_buf_free(&d->rows);
    td_buf_free(&d->line);
    td_jpegidx_free(&d->ix);
    free(d);
}

const char *td_decoder_message(const td_decoder *d) { return d->msg; }

static int td__fail(td_decoder *d)
{
    d->jerr.pub.format_message((j_common_ptr)&d->ci, d->msg);
    jpeg_abort_decompress(&d->ci);
    d->have_header = 0;
    return TD_E_CORRUPT;
}

/* The formats photos come in besides JPEG and PNG, by signature: a file
 * saved as .jpg from a web page is often WebP, an iPhone's HEIC. */
static const char *td__other_format(const uint8_t *p, size_t len)
{
    if (len >= 12 && memcmp(p, "RIFF", 4) == 0 &&
        memcmp(p + 8, "WEBP", 4) == 0)
        return "a WebP image";
    if (len >= 12 && memcmp(p + 4, "ftyp", 4) == 0) {
        if (memcmp(p + 8, "avif", 4) == 0 || memcmp(p + 8, "avis", 4) == 0)
            return "an AVIF image";
        if (memcmp(p + 8, "hei", 3) == 0 || memcmp(p + 8, "hev", 3) == 0 ||
            memcmp(p + 8, "mif1", 4) == 0 || memcmp(p + 8, "msf1", 4) == 0)
            return "a HEIF/HEIC image";
    }
    if (len >= 6 &&
        (memcmp(p, "GIF87a", 6) == 0 || memcmp(p, "GIF89a", 6) == 0))
        return "a GIF image";
    if (len >= 14 && p[0] == 'B' && p[1] == 'M')
        return "a BMP image";
    if (len >= 4 && (memcmp(p, "II*\0", 4) == 0 || memcmp(p, "MM\0*", 4) == 0))
        return "a TIFF image";
    return NULL;
}

int td_decoder_header(td_decoder *d, const uint8_t *data, size_t len, int *w,
                      int *h)
{
    if (d->have_header) /* a header read without a region after it */
        jpeg_abort_decompress(&d->ci);
    td_jpegidx_forget(&d->ix); /* the previous image's index */
    d->msg[0] = '\0';
    d->have_header = 0;
    td_jpeg_err_clear(&d->jerr);
    if (len < 4 || data[0] != 0xff || data[1] != 0xd8) {
        const char *kind = td__other_format(data, len);
        if (kind)
            snprintf(d->msg, sizeof d->msg, "%s, not a JPEG (traind reads "
                     "JPEG and PNG files: convert it)", kind);
        else
            snprintf(d->msg, sizeof d->msg, "not a JPEG (no SOI marker)");
        return TD_E_CORRUPT;
    }
    if (setjmp(d->jerr.jb))
        return td__fail(d);
    jpeg_mem_src(&d->ci, data, (unsigned long)len);
    jpeg_read_header(&d->ci, TRUE);
    if (d->jerr.damaged) {
        snprintf(d->msg, sizeof d->msg, "truncated or corrupt headers");
        jpeg_abort_decompress(&d->ci);
        return TD_E_CORRUPT;
    }
    *w = (int)d->ci.image_width;
    *h = (int)d->ci.image_height;
    td_jpegidx_scan(&d->ix, data, len,
                    (size_t)(d->ci.src->next_input_byte - data));
    d->have_header = 1;
    return 0;
}

int td_decode_pick_scale(int bw, int bh, int min_w, int min_h)
{
    static const int scales[] = {1, 2, 4};
    for (int i = 0; i < 3; i++) {
        int m = scales[i];
        if ((int64_t)bw * m >= (int64_t)min_w * 8 &&
            (int64_t)bh * m >= (int64_t)min_h * 8)
            return m;
    }
    return 8;
}

/* CMYK (4 bytes/pixel) -> RGB or gray; Adobe files store inverted ink. */
static void td__from_cmyk(const uint8_t *in, uint8_t *out, int n, int c,
                          int inverted)
{
    for (int i = 0; i < n; i++, in += 4) {
        unsigned cc = in[0], m = in[1], y = in[2], k = in[3];
        if (!inverted) {
            cc = 255 - cc;
            m = 255 - m;
            y = 255 - y;
            k = 255 - k;
        }
        unsigned r = (cc * k + 127) / 255, g = (m * k + 127) / 255,
                 b = (y * k + 127) / 255;
        if (c == 3) {
            out[0] = (uint8_t)r;
            out[1] = (uint8_t)g;
            out[2] = (uint8_t)b;
            out += 3;
        } else {
            *out++ = td_luma601(r, g, b);
        }
    }
}

static int td__floor_scaled(int v, int m) { return (int)((int64_t)v * m / 8); }
static int td__ceil_scaled(int v, int m)
{
    return (int)(((int64_t)v * m + 7) / 8);
}

static int td__read_rows(td_decoder *d, td_region *out, int c, int cmyk,
                         int rows)
{
    int inc = cmyk ? 4 : c;
    size_t stride = (size_t)out->w * (size_t)c;
    if (td_buf_reserve(&d->rows, stride * (size_t)rows) ||
        (cmyk && td_buf_reserve(&d->line, (size_t)out->w * 4)))
        return -ENOMEM;
    (void)inc;
    for (int r = 0; r < rows; r++) {
        uint8_t *dst = d->rows.p + stride * (size_t)r;
        JSAMPROW row = cmyk ? d->line.p : dst;
        if (jpeg_read_scanlines(&d->ci, &row, 1) != 1)
            return TD_E_CORRUPT;
        if (cmyk)
            td__from_cmyk(d->line.p, dst, out->w, c,
                          d->ci.saw_Adobe_marker);
    }
    out->px = d->rows.p;
    out->stride = stride;
    out->h = rows;
    return 0;
}

/* The box to decode, in scaled pixels. */
struct td__box {
    int m, cmyk, c;
    JDIMENSION xoff, cw;
    int sy0, sy1;
};

static int td__start(td_decoder *d, const struct td__box *b, int fancy)
{
    struct jpeg_decompress_struct *ci = &d->ci;
    ci->scale_num = (unsigned)b->m;
    ci->scale_denom = 8;
    ci->out_color_space = b->cmyk ? JCS_CMYK
                          : b->c == 3 ? JCS_RGB : JCS_GRAYSCALE;
    ci->do_fancy_upsampling = fancy ? TRUE : FALSE;
    ci->dct_method = JDCT_ISLOW; /* as fast as IFAST with AVX2 (measured) */
    /* libjpeg-turbo 2.1 leaves cconvert pointing at the previous image's
     * (freed) color converter when this image uses the merged upsampler
     * (no fancy upsampling), and jpeg_skip_scanlines then writes through
     * it (valgrind: invalid write after a fancy decode then a plain one on
     * the same decompressor).  Neither module exists until
     * jpeg_start_decompress makes them, so clear the stale pointers. */
    ci->cconvert = NULL;
    ci->cquantize = NULL;
    if (setjmp(d->jerr.jb))
        return td__fail(d);
    jpeg_start_decompress(ci);
    return 0;
}

static int td__crop_read(td_decoder *d, struct td__box *b, td_region *out)
{
    struct jpeg_decompress_struct *ci = &d->ci;
    if (setjmp(d->jerr.jb))
        return td__fail(d);
    if (b->cw < ci->output_width)
        jpeg_crop_scanline(ci, &b->xoff, &b->cw);
    out->x0 = (int)b->xoff;
    out->w = (int)b->cw;
    out->y0 = b->sy0;
    if (b->sy0 > 0 && jpeg_skip_scanlines(ci, (JDIMENSION)b->sy0) !=
                          (JDIMENSION)b->sy0)
        return td__fail(d);
    return td__read_rows(d, out, b->c, b->cmyk, b->sy1 - b->sy0);
}

/* The scale M of M/8 a request is decoded at. */
static int td__scale(const struct td__crop *q)
{
    return (q->flags & TD_DECODE_FORCE_FULL_SCALE)
               ? 8 : td_decode_pick_scale(q->w, q->h, q->min_w, q->min_h);
}

/* The box decoded from the file whose header was read, rows above it
 * skipped (jpeg_skip_scanlines), columns beside it cropped away. */
static int td__region_plain(td_decoder *d, const struct td__crop *q,
                            td_region *out)
{
    struct jpeg_decompress_struct *ci = &d->ci;
    struct td__box b;
    if (!d->have_header || (q->c != 1 && q->c != 3))
        return -EINVAL;
    int W = (int)ci->image_width, H = (int)ci->image_height;
    /* Clip the box to the image (pad_crop boxes stick out). */
    int x = q->x, y = q->y, x1 = q->x + q->w, y1 = q->y + q->h;
    x = x < 0 ? 0 : x > W - 1 ? W - 1 : x;
    y = y < 0 ? 0 : y > H - 1 ? H - 1 : y;
    x1 = x1 > W ? W : x1 <= x ? x + 1 : x1;
    y1 = y1 > H ? H : y1 <= y ? y + 1 : y1;
    b.m = td__scale(q);
    b.cmyk = ci->jpeg_color_space == JCS_CMYK ||
             ci->jpeg_color_space == JCS_YCCK;
    b.c = q->c;
    int rc = td__start(d, &b, !(q->flags & TD_DECODE_NO_FANCY));
    if (rc)
        return rc;
    out->scaled_w = (int)ci->output_width;
    out->scaled_h = (int)ci->output_height;
    out->scale_num = b.m;
    out->c = q->c;
    out->cut = TD_CUT_NONE;
    /* The box in scaled pixels with two pixels of margin: bilinear taps
     * reach one pixel out, and the outermost decoded column of a crop is
     * upsampled without its neighbour (it differs from a full decode). */
    int sx0 = td__floor_scaled(x, b.m) - 2, sy0 = td__floor_scaled(y, b.m) - 2;
    int sx1 = td__ceil_scaled(x1, b.m) + 2, sy1 = td__ceil_scaled(y1, b.m) + 2;
    sx0 = sx0 < 0 ? 0 : sx0;
    b.sy0 = sy0 < 0 ? 0 : sy0;
    sx1 = sx1 > out->scaled_w ? out->scaled_w : sx1;
    b.sy1 = sy1 > out->scaled_h ? out->scaled_h : sy1;
    b.xoff = (JDIMENSION)sx0;
    b.cw = (JDIMENSION)(sx1 - sx0);
    rc = td__crop_read(d, &b, out);
    if (rc == 0 && d->jerr.damaged) {
        snprintf(d->msg, sizeof d->msg, "truncated or corrupt data");
        rc = TD_E_CORRUPT;
    }
    if (rc != TD_E_CORRUPT || d->have_header)
        jpeg_abort_decompress(ci);
    d->have_header = 0;
    return rc;
}


/* ---- Cut-outs (jpegidx_cut.c builds them) ----------------------------- */

/* The source pixels a cut-out must hold for the request: the box with 2
 * scaled pixels of margin (bilinear taps reach one pixel out, and the
 * outermost column of a crop is upsampled without its neighbour), clipped.
 * 0, or TD_CUT_FALLBACK when nothing of it is inside the image. */
static int td__cut_need(const struct jpeg_decompress_struct *ci,
                        const struct td__crop *q, td_pixbox *need)
{
    int W = (int)ci->image_width, H = (int)ci->image_height;
    int mg = 16 / td__scale(q) + 2; /* in source pixels */
    int x0 = q->x - mg < 0 ? 0 : q->x - mg, y0 = q->y - mg < 0 ? 0 : q->y - mg;
    int x1 = q->x + q->w + mg > W ? W : q->x + q->w + mg;
    int y1 = q->y + q->h + mg > H ? H : q->y + q->h + mg;
    if (x0 >= W || y0 >= H || x1 <= x0 || y1 <= y0)
        return TD_CUT_FALLBACK;
    *need = (td_pixbox){x0, y0, x1, y1};
    return 0;
}

/* Decodes the cut-out as the request asks, in the source's coordinates
 * (the source was W x H pixels): as td_decoder_region. */
static int td__decode_cut(td_decoder *d, const td_jpegidx_cut *cut,
                          td_cut_kind kind, int W, int H,
                          const struct td__crop *q, td_region *out)
{
    int sw, sh, rc;
    jpeg_abort_decompress(&d->ci);
    if ((rc = td_decoder_header(d, cut->jpeg, cut->len, &sw, &sh)) != 0)
        return rc;
    struct td__crop in = *q;
    in.x -= cut->x0;
    in.y -= cut->y0;
    rc = td__region_plain(d, &in, out);
    if (rc == 0) {
        out->cut = (int)kind;
        out->x0 += cut->x0 * out->scale_num / 8;
        out->y0 += cut->y0 * out->scale_num / 8;
        out->scaled_w = (int)(((int64_t)W * out->scale_num + 7) / 8);
        out->scaled_h = (int)(((int64_t)H * out->scale_num + 7) / 8);
    }
    return rc;
}

/* The box through a cut-out: from the crop index when the file has one,
 * else from its restart segments.  0 or an error as td_decoder_region;
 * TD_CUT_FALLBACK when neither fits (decode the file itself). */
static int td__region_cut(td_decoder *d, const struct td__crop *q,
                          td_region *out)
{
    const struct jpeg_decompress_struct *ci = &d->ci;
    int W = (int)ci->image_width, H = (int)ci->image_height;
    td_cut_kind kind = TD_CUT_INDEX;
    td_pixbox need;
    td_jpegidx_cut cut;
    if (td__cut_need(ci, q, &need))
        return TD_CUT_FALLBACK;
    int rc = td_jpegidx_cut_index(&d->ix, ci, &need, &cut);
    if (rc == TD_CUT_FALLBACK) {
        kind = TD_CUT_RESTART;
        rc = td_jpegidx_cut_restart(&d->ix, ci, &need, &cut);
    }
    if (rc)
        return rc;
    return td__decode_cut(d, &cut, kind, W, H, q, out);
}

int td_decoder_region(td_decoder *d, int x, int y, int bw, int bh, int min_w,
                      int min_h, int c, int flags, td_region *out)
{
    const struct td__crop q = {x, y, bw, bh, min_w, min_h, c, flags};
    if (!d->have_header || (c != 1 && c != 3))
        return -EINVAL;
    if (!(flags & TD_DECODE_NO_CUT)) {
        int rc = td__region_cut(d, &q, out);
        if (rc != TD_CUT_FALLBACK)
            return rc;
    }
    return td__region_plain(d, &q, out);
}
