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
    td_buf syn;      /* the cut-out JPEG of the restart-segment path */
    td_buf marks;    /* size_t offsets of the restart segments */
    const uint8_t *src; /* the JPEG whose header was read */
    size_t src_len, sos_end; /* its length, where its entropy data starts */
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
    td_buf_free(&d->syn);
    td_buf_free(&d->marks);
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
    d->src = data;
    d->src_len = len;
    d->sos_end = (size_t)(d->ci.src->next_input_byte - data);
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

static int td__region_plain(td_decoder *d, int x, int y, int bw, int bh,
                            int min_w, int min_h, int c, int flags,
                            td_region *out)
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
    out->cut = 0;
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

/* ---- Restart segments: entropy-decode only the MCUs a box needs --------
 * A baseline JPEG whose restart interval R divides the MCUs of a row
 * (`trainctl pack --restart`) is a grid of independently coded segments of
 * R MCUs: Huffman state and DC predictors restart at each.  For a box we
 * copy the headers (SOF's size patched), the segments covering it with
 * their markers renumbered in order, and an EOI into a small JPEG of its
 * own, and decode that: rows above and columns beside the box are never
 * entropy-decoded.  Anything unexpected falls back to the plain path. */

struct td__grid {
    int mcu_w, mcu_h, R, spr; /* MCU in pixels, MCUs/segment, segments/row */
    int r0, r1, s0, s1;       /* the cut: MCU rows, segment columns */
};

static int td__grid_init(const struct jpeg_decompress_struct *ci,
                         struct td__grid *g)
{
    if (ci->progressive_mode || ci->arith_code || ci->restart_interval == 0 ||
        ci->data_precision != 8 ||
        (ci->num_components > 1 && ci->comps_in_scan != ci->num_components))
        return 0;
    int one = ci->num_components == 1;
    g->mcu_w = one ? DCTSIZE : ci->max_h_samp_factor * DCTSIZE;
    g->mcu_h = one ? DCTSIZE : ci->max_v_samp_factor * DCTSIZE;
    int mpr = ((int)ci->image_width + g->mcu_w - 1) / g->mcu_w;
    g->R = (int)ci->restart_interval;
    if (mpr % g->R)
        return 0;
    g->spr = mpr / g->R;
    return 1;
}

/* Finds segments 0..need-1 of the entropy data: marks[2k] is where
 * segment k starts, marks[2k+1] where its marker begins.  0, 1 when the
 * markers are not where they should be, -ENOMEM. */
static int td__find_segments(td_decoder *d, size_t need)
{
    if (td_buf_reserve(&d->marks, need * 2 * sizeof(size_t)))
        return -ENOMEM;
    size_t *m = (size_t *)(void *)d->marks.p, pos = d->sos_end, k = 0;
    const uint8_t *p = d->src;
    m[0] = pos;
    while (k < need) {
        const uint8_t *f = memchr(p + pos, 0xff, d->src_len - pos);
        if (!f || (size_t)(f - p) + 1 >= d->src_len)
            return 1;
        size_t at = (size_t)(f - p);
        uint8_t b = p[at + 1];
        if (b == 0x00 || b == 0xff) { /* stuffed zero, fill byte */
            pos = at + (b == 0x00 ? 2 : 1);
            continue;
        }
        m[2 * k + 1] = at;
        int rst = b >= 0xd0 && b <= 0xd7;
        if (rst && b != 0xd0 + (k & 7))
            return 1;
        if (!rst && k + 1 < need) /* EOI or another marker too early */
            return 1;
        if (++k < need)
            m[2 * k] = pos = at + 2;
    }
    return 0;
}

/* Offset of the SOF0/SOF1 marker in the headers, or 0. */
static size_t td__find_sof(const uint8_t *p, size_t end)
{
    size_t pos = 2;
    while (pos + 9 <= end && p[pos] == 0xff) {
        if (p[pos + 1] == 0xff) {
            pos++;
            continue;
        }
        if (p[pos + 1] == 0xc0 || p[pos + 1] == 0xc1)
            return pos;
        pos += 2 + ((size_t)p[pos + 2] << 8 | p[pos + 3]);
    }
    return 0;
}

/* Writes the cut-out JPEG of g's segments to d->syn; its size in *cw, *ch
 * given the source's W x H.  0, 1 (no SOF found), -ENOMEM. */
static int td__cut(td_decoder *d, const struct td__grid *g, int W, int H,
                   size_t *len, int *cw, int *ch)
{
    const size_t *m = (const size_t *)(const void *)d->marks.p;
    size_t sof = td__find_sof(d->src, d->sos_end), n = d->sos_end + 2;
    if (!sof)
        return 1;
    for (int r = g->r0; r < g->r1; r++)
        for (int s = g->s0; s < g->s1; s++) {
            size_t k = (size_t)r * (size_t)g->spr + (size_t)s;
            n += m[2 * k + 1] - m[2 * k] + 2;
        }
    if (td_buf_reserve(&d->syn, n))
        return -ENOMEM;
    uint8_t *o = d->syn.p;
    memcpy(o, d->src, d->sos_end);
    int segw = g->R * g->mcu_w;
    *cw = (g->s1 * segw < W ? g->s1 * segw : W) - g->s0 * segw;
    *ch = (g->r1 * g->mcu_h < H ? g->r1 * g->mcu_h : H) - g->r0 * g->mcu_h;
    o[sof + 5] = (uint8_t)(*ch >> 8);
    o[sof + 6] = (uint8_t)*ch;
    o[sof + 7] = (uint8_t)(*cw >> 8);
    o[sof + 8] = (uint8_t)*cw;
    size_t at = d->sos_end;
    unsigned count = 0;
    for (int r = g->r0; r < g->r1; r++)
        for (int s = g->s0; s < g->s1; s++) {
            size_t k = (size_t)r * (size_t)g->spr + (size_t)s;
            size_t sl = m[2 * k + 1] - m[2 * k];
            if (count++)
                o[at++] = 0xff, o[at++] = (uint8_t)(0xd0 + ((count - 2) & 7));
            memcpy(o + at, d->src + m[2 * k], sl);
            at += sl;
        }
    o[at++] = 0xff;
    o[at++] = 0xd9;
    *len = at;
    return 0;
}

/* The box through a cut-out JPEG: 0 or an error as td_decoder_region, 1
 * when the image has no usable restart grid or the box needs all of it. */
static int td__region_cut(td_decoder *d, int x, int y, int bw, int bh,
                          int min_w, int min_h, int c, int flags,
                          td_region *out)
{
    struct td__grid g;
    struct jpeg_decompress_struct *ci = &d->ci;
    if (!td__grid_init(ci, &g))
        return 1;
    int W = (int)ci->image_width, H = (int)ci->image_height;
    int m = (flags & TD_DECODE_FORCE_FULL_SCALE)
                ? 8 : td_decode_pick_scale(bw, bh, min_w, min_h);
    int mg = 16 / m + 2; /* 2 scaled pixels of margin, in source pixels */
    int x0 = x - mg < 0 ? 0 : x - mg, y0 = y - mg < 0 ? 0 : y - mg;
    int x1 = x + bw + mg > W ? W : x + bw + mg;
    int y1 = y + bh + mg > H ? H : y + bh + mg;
    int segw = g.R * g.mcu_w;
    if (x0 >= W || y0 >= H || x1 <= x0 || y1 <= y0)
        return 1;
    g.r0 = y0 / g.mcu_h;
    g.r1 = (y1 + g.mcu_h - 1) / g.mcu_h;
    g.s0 = x0 / segw;
    g.s1 = (x1 + segw - 1) / segw;
    if (g.r0 == 0 && g.s0 == 0 && g.s1 == g.spr)
        return 1; /* whole rows from the top: nothing to skip */
    size_t len;
    int cw, ch, rc = td__find_segments(d, (size_t)(g.r1 - 1) * (size_t)g.spr +
                                              (size_t)g.s1);
    if (rc == 0)
        rc = td__cut(d, &g, W, H, &len, &cw, &ch);
    if (rc)
        return rc;
    jpeg_abort_decompress(ci);
    int X0 = g.s0 * segw, Y0 = g.r0 * g.mcu_h, sw, sh;
    if ((rc = td_decoder_header(d, d->syn.p, len, &sw, &sh)) != 0)
        return rc;
    rc = td__region_plain(d, x - X0, y - Y0, bw, bh, min_w, min_h, c, flags,
                          out);
    if (rc == 0) {
        out->cut = 1;
        out->x0 += X0 * out->scale_num / 8;
        out->y0 += Y0 * out->scale_num / 8;
        out->scaled_w = (int)(((int64_t)W * out->scale_num + 7) / 8);
        out->scaled_h = (int)(((int64_t)H * out->scale_num + 7) / 8);
    }
    return rc;
}

int td_decoder_region(td_decoder *d, int x, int y, int bw, int bh, int min_w,
                      int min_h, int c, int flags, td_region *out)
{
    if (!d->have_header || (c != 1 && c != 3))
        return -EINVAL;
    if (!(flags & TD_DECODE_NO_CUT)) {
        int rc = td__region_cut(d, x, y, bw, bh, min_w, min_h, c, flags, out);
        if (rc != 1)
            return rc;
    }
    return td__region_plain(d, x, y, bw, bh, min_w, min_h, c, flags, out);
}
