/* decode.c - crop-and-scale JPEG decoding with libjpeg(-turbo) (see
 * decode.h).  libjpeg reports fatal errors through error_exit, which
 * longjmps back here; the decompressor is then aborted and reused. */
#include "decode.h"

#include <errno.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>

#include "dataset.h"
#include "error.h"

struct td__jerr {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    int bad_warning;
};

struct td_decoder {
    struct jpeg_decompress_struct ci;
    struct td__jerr jerr;
    td_buf rows;     /* decoded box */
    td_buf line;     /* one CMYK line before conversion */
    int have_header;
    char msg[JMSG_LENGTH_MAX];
};

static void td__error_exit(j_common_ptr ci)
{
    struct td__jerr *e = (struct td__jerr *)ci->err;
    longjmp(e->jb, 1);
}

/* Warnings: truncated data and corrupt entropy segments make the sample
 * bad; other warnings (e.g. extraneous bytes before a marker) do not. */
static void td__emit_message(j_common_ptr ci, int level)
{
    struct td__jerr *e = (struct td__jerr *)ci->err;
    if (level < 0 && (e->pub.msg_code == JWRN_JPEG_EOF ||
                      e->pub.msg_code == JWRN_HIT_MARKER ||
                      e->pub.msg_code == JWRN_MUST_RESYNC ||
                      e->pub.msg_code == JWRN_NOT_SEQUENTIAL))
        e->bad_warning = 1;
}

int td_decoder_create(td_decoder **out)
{
    td_decoder *d = calloc(1, sizeof *d);
    if (!d)
        return -ENOMEM;
    d->ci.err = jpeg_std_error(&d->jerr.pub);
    d->jerr.pub.error_exit = td__error_exit;
    d->jerr.pub.emit_message = td__emit_message;
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

int td_decoder_header(td_decoder *d, const uint8_t *data, size_t len, int *w,
                      int *h)
{
    d->msg[0] = '\0';
    d->have_header = 0;
    d->jerr.bad_warning = 0;
    if (len < 4 || data[0] != 0xff || data[1] != 0xd8) {
        snprintf(d->msg, sizeof d->msg, "not a JPEG (no SOI marker)");
        return TD_E_CORRUPT;
    }
    if (setjmp(d->jerr.jb))
        return td__fail(d);
    jpeg_mem_src(&d->ci, data, (unsigned long)len);
    jpeg_read_header(&d->ci, TRUE);
    if (d->jerr.bad_warning) {
        snprintf(d->msg, sizeof d->msg, "truncated or corrupt headers");
        jpeg_abort_decompress(&d->ci);
        return TD_E_CORRUPT;
    }
    *w = (int)d->ci.image_width;
    *h = (int)d->ci.image_height;
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
            *out++ = (uint8_t)((77 * r + 150 * g + 29 * b + 128) >> 8);
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

int td_decoder_region(td_decoder *d, int x, int y, int bw, int bh, int min_w,
                      int min_h, int c, int flags, td_region *out)
{
    struct jpeg_decompress_struct *ci = &d->ci;
    struct td__box b;
    if (!d->have_header || (c != 1 && c != 3))
        return -EINVAL;
    int W = (int)ci->image_width, H = (int)ci->image_height;
    /* Clip the box to the image (pad_crop boxes stick out). */
    int x1 = x + bw, y1 = y + bh;
    x = x < 0 ? 0 : x > W - 1 ? W - 1 : x;
    y = y < 0 ? 0 : y > H - 1 ? H - 1 : y;
    x1 = x1 > W ? W : x1 <= x ? x + 1 : x1;
    y1 = y1 > H ? H : y1 <= y ? y + 1 : y1;
    b.m = (flags & TD_DECODE_FORCE_FULL_SCALE)
              ? 8 : td_decode_pick_scale(bw, bh, min_w, min_h);
    b.cmyk = ci->jpeg_color_space == JCS_CMYK ||
             ci->jpeg_color_space == JCS_YCCK;
    b.c = c;
    int rc = td__start(d, &b, !(flags & TD_DECODE_NO_FANCY));
    if (rc)
        return rc;
    out->scaled_w = (int)ci->output_width;
    out->scaled_h = (int)ci->output_height;
    out->scale_num = b.m;
    out->c = c;
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
    if (rc == 0 && d->jerr.bad_warning) {
        snprintf(d->msg, sizeof d->msg, "truncated or corrupt data");
        rc = TD_E_CORRUPT;
    }
    if (rc != TD_E_CORRUPT || d->have_header)
        jpeg_abort_decompress(ci);
    d->have_header = 0;
    return rc;
}
