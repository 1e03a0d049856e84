/* decode.c - crop-and-scale JPEG decoding with libjpeg(-turbo) (see
 * decode.h).  libjpeg reports fatal errors through error_exit, which
 * longjmps back here; the decompressor is then aborted and reused. */
#include "input/decode.h"

#include <errno.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>

#include "base/error.h"
#include "base/buf.h"
#include "input/jpegidx.h"

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
    td_buf unst;     /* unstuffed entropy data of one row of a crop */
    td_buf ixb;      /* a crop index in several chunks, put together */
    td_buf ixrows;   /* the layout of a tall cut-out's rows */
    const uint8_t *src; /* the JPEG whose header was read */
    size_t src_len, sos_end; /* its length, where its entropy data starts */
    size_t sof_at, sos_at;   /* its SOF0/1 and SOS markers (0: none) */
    const uint8_t *ix[256];  /* crop index chunks by number (cropidx.h) */
    size_t ix_len[256];      /* their payload lengths */
    int ix_n;                /* chunks seen (0: no index) */
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
    td_buf_free(&d->unst);
    td_buf_free(&d->ixb);
    td_buf_free(&d->ixrows);
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

/* Walks the header markers libjpeg has parsed (SOI to the end of SOS) for
 * what the cut-outs need: where SOF and SOS are, and the crop index. */
static void td__scan_header(td_decoder *d)
{
    const uint8_t *p = d->src;
    size_t pos = 2, end = d->sos_end;
    d->sof_at = d->sos_at = 0;
    d->ix_n = 0;
    while (pos + 4 <= end && p[pos] == 0xff) {
        uint8_t m = p[pos + 1];
        if (m == 0xff) {
            pos++;
            continue;
        }
        size_t l = (size_t)p[pos + 2] << 8 | p[pos + 3];
        if (l < 2 || pos + 2 + l > end)
            break;
        const uint8_t *q = p + pos + 4;
        if (m == 0xc0 || m == 0xc1)
            d->sof_at = pos;
        else if (m == 0xda)
            d->sos_at = pos;
        else if (m == TD_CROPIDX_MARKER && l - 2 >= TD_CROPIDX_HEAD &&
                 memcmp(q, "TDIX", 4) == 0 && q[4] == TD_CROPIDX_VERSION &&
                 q[5] < q[6] && !d->ix[q[5]]) {
            d->ix[q[5]] = q;
            d->ix_len[q[5]] = l - 2;
            d->ix_n++;
        }
        pos += 2 + l;
    }
}

int td_decoder_header(td_decoder *d, const uint8_t *data, size_t len, int *w,
                      int *h)
{
    if (d->have_header) /* a header read without a region after it */
        jpeg_abort_decompress(&d->ci);
    if (d->ix_n) /* forget the previous image's index */
        memset(d->ix, 0, sizeof d->ix);
    d->ix_n = 0;
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
    td__scan_header(d);
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

/* The MCU of a single-scan image in pixels (one block for a single
 * component, else the largest sampling factors' blocks); the MCUs per row. */
static int td__mcu_size(const struct jpeg_decompress_struct *ci, int *mcu_w,
                        int *mcu_h)
{
    int one = ci->num_components == 1;
    *mcu_w = one ? DCTSIZE : ci->max_h_samp_factor * DCTSIZE;
    *mcu_h = one ? DCTSIZE : ci->max_v_samp_factor * DCTSIZE;
    return ((int)ci->image_width + *mcu_w - 1) / *mcu_w;
}

static int td__grid_init(const struct jpeg_decompress_struct *ci,
                         struct td__grid *g)
{
    if (ci->progressive_mode || ci->arith_code || ci->restart_interval == 0 ||
        ci->data_precision != 8 ||
        (ci->num_components > 1 && ci->comps_in_scan != ci->num_components))
        return 0;
    int mpr = td__mcu_size(ci, &g->mcu_w, &g->mcu_h);
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

/* Writes the cut-out JPEG of g's segments to d->syn; its size in *cw, *ch
 * given the source's W x H.  0, 1 (no SOF found), -ENOMEM. */
static int td__cut(td_decoder *d, const struct td__grid *g, int W, int H,
                   size_t *len, int *cw, int *ch)
{
    const size_t *m = (const size_t *)(const void *)d->marks.p;
    size_t sof = d->sof_at, n = d->sos_end + 2;
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

static int td__decode_cut(td_decoder *d, size_t len, int X0, int Y0, int W,
                          int H, int x, int y, int bw, int bh, int min_w,
                          int min_h, int c, int flags, int kind,
                          td_region *out);

/* What a cut-out for the box needs, with 2 scaled pixels of margin: MCU
 * rows span[0]..span[1]-1 (mcu_h pixels each) and columns span[2]..
 * span[3]-1 of segw pixels.  1 when the box is empty. */
static int td__cut_span(const struct jpeg_decompress_struct *ci, int x, int y,
                        int bw, int bh, int min_w, int min_h, int flags,
                        int mcu_h, int segw, int span[4])
{
    int W = (int)ci->image_width, H = (int)ci->image_height;
    int m = (flags & TD_DECODE_FORCE_FULL_SCALE)
                ? 8 : td_decode_pick_scale(bw, bh, min_w, min_h);
    int mg = 16 / m + 2; /* 2 scaled pixels of margin, in source pixels */
    int x0 = x - mg < 0 ? 0 : x - mg, y0 = y - mg < 0 ? 0 : y - mg;
    int x1 = x + bw + mg > W ? W : x + bw + mg;
    int y1 = y + bh + mg > H ? H : y + bh + mg;
    if (x0 >= W || y0 >= H || x1 <= x0 || y1 <= y0)
        return 1;
    span[0] = y0 / mcu_h;
    span[1] = (y1 + mcu_h - 1) / mcu_h;
    span[2] = x0 / segw;
    span[3] = (x1 + segw - 1) / segw;
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
    int segw = g.R * g.mcu_w, span[4];
    if (td__cut_span(ci, x, y, bw, bh, min_w, min_h, flags, g.mcu_h, segw,
                     span))
        return 1;
    g.r0 = span[0];
    g.r1 = span[1];
    g.s0 = span[2];
    g.s1 = span[3];
    if (g.r0 == 0 && g.s0 == 0 && g.s1 == g.spr)
        return 1; /* whole rows from the top: nothing to skip */
    size_t len;
    int cw, ch, rc = td__find_segments(d, (size_t)(g.r1 - 1) * (size_t)g.spr +
                                              (size_t)g.s1);
    if (rc == 0)
        rc = td__cut(d, &g, W, H, &len, &cw, &ch);
    if (rc)
        return rc;
    return td__decode_cut(d, len, g.s0 * segw, g.r0 * g.mcu_h, W, H, x, y,
                          bw, bh, min_w, min_h, c, flags, 1, out);
}

/* ---- Crop index: start anywhere on the fast Huffman path ---------------
 * A JPEG that carries a crop index (cropidx.h, `trainctl pack`) has no
 * restart markers, so libjpeg-turbo decodes it on its fast Huffman path,
 * which restart markers turn off.  For a box we build a cut-out JPEG of
 * the MCUs it covers: per MCU row, the bits between two checkpoints,
 * copied with a 56-bit shift (the rows' bits do not start on byte
 * boundaries) and with each component's first DC difference re-coded
 * against the predictor the previous row of the cut-out leaves.  The new
 * difference may need a DC category the file's (optimized) table has no
 * code for; such categories get codes appended after the table's longest
 * ones (existing codes keep their bits), in a DHT of the cut-out's own. */

/* jdhuff.c: decode_mcu uses the fast path only while bytes_in_buffer >=
 * BUFSIZE (DCTSIZE2 * 8) * blocks_in_MCU (at most D_MAX_BLOCKS_IN_MCU). */
#define TD__FAST_TAIL (DCTSIZE2 * 8 * D_MAX_BLOCKS_IN_MCU)
/* MCU rows of a cut-out whose layout fits on the stack. */
#define TD__IX_ROWS 64

static inline uint64_t td__be64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return __builtin_bswap64(v);
}

/* One DC Huffman table: canonical decoding and encoding, extended. */
struct td__dct {
    int32_t maxcode[17], valoff[17];
    uint8_t bits[17], val[32];
    int nval, extended;
    uint16_t ecode[16];
    uint8_t esize[16];
};

static int td__dct_build(const JHUFF_TBL *t, struct td__dct *o)
{
    int32_t code = 0;
    int k = 0, lmax = 0;
    memset(o, 0, sizeof *o);
    if (!t)
        return 1;
    /* (a table without codes gets lmax 0 and is refused below) */
    for (int l = 1; l <= 16; l++) {
        o->bits[l] = t->bits[l];
        o->valoff[l] = k - code;
        o->maxcode[l] = t->bits[l] ? code + t->bits[l] - 1 : -1;
        for (int i = 0; i < t->bits[l]; i++, k++, code++) {
            if (k >= 16 || t->huffval[k] > 15)
                return 1; /* not a DC table */
            o->val[k] = t->huffval[k];
            o->ecode[t->huffval[k]] = (uint16_t)code;
            o->esize[t->huffval[k]] = (uint8_t)l;
        }
        if (code >= (1 << l)) /* all ones: libjpeg refuses it too */
            return 1;
        if (t->bits[l])
            lmax = l;
        if (l < 16)
            code <<= 1;
    }
    o->nval = k;
    if (!lmax)
        return 1;
    /* code: the next free code of length 16; back to length lmax. */
    uint32_t next = (uint32_t)code >> (16 - lmax);
    int l = lmax;
    for (int cat = 0; cat <= 11; cat++) {
        if (o->esize[cat])
            continue;
        next <<= 1; /* one length longer: never all ones */
        if (++l > 16 || next >= (1u << l) - 1)
            break;
        o->ecode[cat] = (uint16_t)next;
        o->esize[cat] = (uint8_t)l;
        o->bits[l]++;
        o->val[o->nval++] = (uint8_t)cat;
        o->extended = 1;
        next++;
    }
    return 0;
}

/* Decodes the DC difference coded at bit p of u (8 readable bytes past
 * it): 0 and its value and length, or 1. */
static int td__dc_decode(const struct td__dct *t, const uint8_t *u,
                         uint64_t p, int *diff, int *len)
{
    uint64_t v = td__be64(u + (p >> 3)) << (p & 7);
    for (int l = 1; l <= 16; l++) {
        int32_t code = (int32_t)(v >> (64 - l));
        if (code > t->maxcode[l])
            continue;
        int cat = t->val[code + t->valoff[l]];
        if (cat > 11)
            return 1;
        int e = cat ? (int)((v << l) >> (64 - cat)) : 0;
        *diff = cat && e < (1 << (cat - 1)) ? e - (1 << cat) + 1 : e;
        *len = l + cat;
        return 0;
    }
    return 1;
}

/* Bit writer with byte stuffing; at most 7 bits pending between calls. */
struct td__bw {
    uint8_t *o;
    uint64_t acc;
    int n;
};

static inline void td__bw_byte(struct td__bw *w, unsigned b)
{
    *w->o++ = (uint8_t)b;
    if (b == 0xff)
        *w->o++ = 0;
}

static inline void td__bw_put(struct td__bw *w, uint32_t v, int len)
{
    w->acc = (w->acc << len) | (v & ((UINT64_C(1) << len) - 1));
    w->n += len;
    while (w->n >= 8) {
        w->n -= 8;
        td__bw_byte(w, (unsigned)(w->acc >> w->n) & 0xff);
    }
}

/* Appends bits [f, f + n) of u (8 readable bytes past them). */
static void td__bw_copy(struct td__bw *w, const uint8_t *u, uint64_t f,
                        uint64_t n)
{
    const uint64_t m56 = (UINT64_C(1) << 56) - 1;
    const uint64_t ones = UINT64_C(0x0101010101010101);
    const uint64_t highs = UINT64_C(0x8080808080808080);
    while (n >= 56) {
        uint64_t v = (td__be64(u + (f >> 3)) << (f & 7)) >> 8;
        uint64_t t = (w->acc << 56) | v;
        uint64_t out = (t >> w->n) & m56;
        /* A 0xff byte among the 7 needs a stuffed zero after it. */
        uint64_t x = (~out & m56) | ~m56;
        if (((x - ones) & ~x & highs) == 0) {
            uint64_t be = __builtin_bswap64(out << 8);
            memcpy(w->o, &be, 8);
            w->o += 7;
        } else {
            for (int i = 48; i >= 0; i -= 8)
                td__bw_byte(w, (unsigned)(out >> i) & 0xff);
        }
        w->acc = t;
        f += 56;
        n -= 56;
    }
    while (n > 0) {
        int k = n > 24 ? 24 : (int)n;
        uint64_t v = td__be64(u + (f >> 3)) << (f & 7);
        td__bw_put(w, (uint32_t)(v >> (64 - k)), k);
        f += (uint64_t)k;
        n -= (uint64_t)k;
    }
}

/* Unstuffs up to n bytes of s from a into u (fewer at the end of s); the
 * count, or (size_t)-1 on a marker. */
static size_t td__unstuff(const uint8_t *s, size_t a, size_t n, size_t slen,
                          uint8_t *u)
{
    size_t k = 0;
    while (k < n && a < slen) {
        size_t want = n - k < slen - a ? n - k : slen - a;
        const uint8_t *f = memchr(s + a, 0xff, want);
        size_t q = f ? (size_t)(f - s) : a + want;
        memcpy(u + k, s + a, q - a);
        k += q - a;
        if (!f)
            break;
        if (q + 1 >= slen || s[q + 1] != 0x00)
            return (size_t)-1;
        u[k++] = 0xff;
        a = q + 2;
    }
    return k;
}

struct td__ix {
    int nc, R, spr, rows;
    size_t rsz, slen, nstream;
    const uint8_t *table, *stream, *scan;
};

/* A varint of p[*at..end); 1 if it runs past end or over 32 bits. */
static inline int td__ix_varint(const uint8_t *p, size_t *at, size_t end,
                                uint32_t *v)
{
    if (*at < end && p[*at] < 0x80) { /* most are one byte */
        *v = p[(*at)++];
        return 0;
    }
    uint32_t x = 0;
    for (int sh = 0; sh < 35; sh += 7) {
        if (*at >= end)
            return 1;
        uint8_t b = p[(*at)++];
        x |= (uint32_t)(b & 0x7f) << sh;
        if (!(b & 0x80)) {
            *v = x;
            return 0;
        }
    }
    return 1;
}

/* Validates the index against the file and puts its pieces together
 * (d->ixb when there are several); 1 if it does not describe the file. */
static int td__ix_init(td_decoder *d, struct td__ix *x, int *mcu_w,
                       int *mcu_h)
{
    const struct jpeg_decompress_struct *ci = &d->ci;
    const uint8_t *h = d->ix[0];
    if (!d->ix_n || !h || d->ix_n != h[6] || !d->sof_at || !d->sos_at ||
        ci->progressive_mode || ci->arith_code || ci->restart_interval ||
        ci->data_precision != 8 || ci->comps_in_scan != ci->num_components ||
        ci->comps_in_scan != h[7] || ci->comps_in_scan > 4)
        return 1;
    x->nc = h[7];
    x->R = (int)td_cropidx_u16(h + 8);
    x->spr = (int)td_cropidx_u16(h + 10);
    x->rows = (int)td_cropidx_u16(h + 12);
    x->slen = td_cropidx_u32(h + 16);
    x->rsz = (size_t)TD_CROPIDX_ROW(x->nc);
    x->scan = d->src + d->sos_end;
    int mpr = td__mcu_size(ci, mcu_w, mcu_h);
    int mrows = ((int)ci->image_height + *mcu_h - 1) / *mcu_h;
    if (x->R < 1 || (int64_t)x->R * x->spr != mpr || x->rows != mrows ||
        d->src_len < d->sos_end + 2 ||
        x->slen != d->src_len - 2 - d->sos_end ||
        d->src[d->src_len - 2] != 0xff || d->src[d->src_len - 1] != 0xd9)
        return 1;
    size_t total = 0;
    for (int c = 0; c < d->ix_n; c++) {
        if (!d->ix[c] || memcmp(d->ix[c] + 6, h + 6, 14) != 0)
            return 1;
        total += d->ix_len[c] - TD_CROPIDX_HEAD;
    }
    const uint8_t *blob = h + TD_CROPIDX_HEAD;
    if (d->ix_n > 1) { /* pieces in chunk order, one after the other */
        if (td_buf_reserve(&d->ixb, total))
            return 1;
        for (int c = 0, at = 0; c < d->ix_n; c++) {
            size_t n = d->ix_len[c] - TD_CROPIDX_HEAD;
            memcpy(d->ixb.p + at, d->ix[c] + TD_CROPIDX_HEAD, n);
            at += (int)n;
        }
        blob = d->ixb.p;
    }
    size_t tlen = ((size_t)x->rows + 1) * x->rsz;
    if (total < tlen)
        return 1;
    x->table = blob;
    x->stream = blob + tlen;
    x->nstream = total - tlen;
    return 0;
}

/* Where row r's bits from checkpoint s0 to s1 are: the stuffed offset of
 * the byte holding the first and that bit's position in it, the bit
 * count, the first blocks' offsets (off[c], from the first bit), and the
 * DC predictors at both ends.  1 if the index says something impossible. */
struct td__ixrow {
    size_t byte;
    unsigned bit;
    uint64_t nbits;
    uint32_t off[4];
    int pred0[4], pred1[4];
};

static int td__ix_row(const struct td__ix *x, int r, int s0, int s1,
                      struct td__ixrow *o)
{
    const uint8_t *rec = x->table + (size_t)r * x->rsz;
    const uint8_t *nxt = rec + x->rsz;
    size_t at = td_cropidx_u32(rec + 5), end = td_cropidx_u32(nxt + 5);
    if (at > end || end > x->nstream || rec[4] > 7)
        return 1;
    int pred[4];
    for (int c = 0; c < x->nc; c++)
        pred[c] = (int16_t)td_cropidx_u16(rec + 9 + 2 * c);
    uint64_t pos = 0, start = 0, zs = 0, zstart = 0;
    for (int s = 0; s <= s1 && s < x->spr; s++) {
        uint32_t len, z, off[4] = {0}, dp;
        if (td__ix_varint(x->stream, &at, end, &len) ||
            td__ix_varint(x->stream, &at, end, &z))
            return 1;
        for (int c = 1; c < x->nc; c++) {
            if (td__ix_varint(x->stream, &at, end, &dp))
                return 1;
            off[c] = off[c - 1] + dp;
        }
        for (int c = 0; s > 0 && c < x->nc; c++) {
            if (td__ix_varint(x->stream, &at, end, &dp))
                return 1;
            /* int16 arithmetic, as the writer's predictors (no overflow) */
            pred[c] = (int16_t)(uint16_t)((uint32_t)pred[c] +
                                          ((dp >> 1) ^ -(dp & 1)));
        }
        if (s == s0) {
            start = pos;
            zstart = zs;
            memcpy(o->off, off, sizeof off);
            memcpy(o->pred0, pred, sizeof pred);
        }
        if (s == s1)
            break;
        pos += len;
        zs += z;
    }
    if (s1 == x->spr) /* the next row's first checkpoint */
        for (int c = 0; c < x->nc; c++)
            pred[c] = (int16_t)td_cropidx_u16(nxt + 9 + 2 * c);
    memcpy(o->pred1, pred, sizeof pred);
    uint64_t first = rec[4] + start;
    uint64_t byte = td_cropidx_u32(rec) + (first >> 3) + zstart;
    o->byte = (size_t)byte;
    o->bit = (unsigned)(first & 7);
    o->nbits = pos - start;
    /* the bits must lie in the scan (unstuffed bytes <= stuffed ones):
     * this bounds what td__region_index allocates for them */
    return byte >= x->slen ||
           (o->bit + o->nbits + 7) / 8 > x->slen - byte;
}

/* Writes the cut-out's headers: the source's without the index, SOF's
 * size patched, extended DC tables, SOS.  Returns the end. */
static uint8_t *td__ix_headers(td_decoder *d, uint8_t *o, int cw, int ch,
                               const struct td__dct *dct, const int *used)
{
    const uint8_t *p = d->src;
    size_t pos = 2;
    o[0] = 0xff;
    o[1] = 0xd8;
    o += 2;
    while (pos < d->sos_at) {
        size_t l = (size_t)p[pos + 2] << 8 | p[pos + 3];
        if (p[pos + 1] == 0xff) {
            pos++;
            continue;
        }
        if (p[pos + 1] != TD_CROPIDX_MARKER) {
            memcpy(o, p + pos, l + 2);
            if (pos == d->sof_at) {
                o[5] = (uint8_t)(ch >> 8);
                o[6] = (uint8_t)ch;
                o[7] = (uint8_t)(cw >> 8);
                o[8] = (uint8_t)cw;
            }
            o += l + 2;
        }
        pos += l + 2;
    }
    size_t dl = 2;
    for (int t = 0; t < NUM_HUFF_TBLS; t++)
        if (used[t] && dct[t].extended)
            dl += 17 + (size_t)dct[t].nval;
    if (dl > 2) {
        *o++ = 0xff;
        *o++ = 0xc4;
        *o++ = (uint8_t)(dl >> 8);
        *o++ = (uint8_t)dl;
        for (int t = 0; t < NUM_HUFF_TBLS; t++) {
            if (!used[t] || !dct[t].extended)
                continue;
            *o++ = (uint8_t)t; /* class 0 (DC), table t */
            memcpy(o, dct[t].bits + 1, 16);
            o += 16;
            memcpy(o, dct[t].val, (size_t)dct[t].nval);
            o += dct[t].nval;
        }
    }
    memcpy(o, p + d->sos_at, d->sos_end - d->sos_at);
    return o + (d->sos_end - d->sos_at);
}

/* Decodes a cut-out in d->syn (len bytes) holding the source's pixels
 * from (X0, Y0): the box as td_decoder_region, in source coordinates. */
static int td__decode_cut(td_decoder *d, size_t len, int X0, int Y0, int W,
                          int H, int x, int y, int bw, int bh, int min_w,
                          int min_h, int c, int flags, int kind,
                          td_region *out)
{
    int sw, sh, rc;
    jpeg_abort_decompress(&d->ci);
    if ((rc = td_decoder_header(d, d->syn.p, len, &sw, &sh)) != 0)
        return rc;
    rc = td__region_plain(d, x - X0, y - Y0, bw, bh, min_w, min_h, c, flags,
                          out);
    if (rc == 0) {
        out->cut = kind;
        out->x0 += X0 * out->scale_num / 8;
        out->y0 += Y0 * out->scale_num / 8;
        out->scaled_w = (int)(((int64_t)W * out->scale_num + 7) / 8);
        out->scaled_h = (int)(((int64_t)H * out->scale_num + 7) / 8);
    }
    return rc;
}

/* The box through an indexed cut-out: as td__region_cut. */
static int td__region_index(td_decoder *d, int x, int y, int bw, int bh,
                            int min_w, int min_h, int c, int flags,
                            td_region *out)
{
    struct jpeg_decompress_struct *ci = &d->ci;
    struct td__ix ix;
    int mcu_w, mcu_h;
    if (td__ix_init(d, &ix, &mcu_w, &mcu_h))
        return 1;
    int W = (int)ci->image_width, H = (int)ci->image_height;
    int segw = ix.R * mcu_w, span[4];
    if (td__cut_span(ci, x, y, bw, bh, min_w, min_h, flags, mcu_h, segw,
                     span))
        return 1;
    int r0 = span[0], r1 = span[1], s0 = span[2], s1 = span[3];
    if (r0 == 0 && s0 == 0 && s1 == ix.spr)
        return 1; /* whole rows from the top: nothing to skip */
    struct td__dct dct[NUM_HUFF_TBLS];
    int used[NUM_HUFF_TBLS] = {0}, tbl[4];
    for (int i = 0; i < ix.nc; i++) {
        int t = ci->cur_comp_info[i]->dc_tbl_no;
        if (t < 0 || t >= NUM_HUFF_TBLS)
            return 1;
        if (!used[t] && td__dct_build(ci->dc_huff_tbl_ptrs[t], &dct[t]))
            return 1;
        used[t] = 1;
        tbl[i] = t;
    }
    /* Room: the headers, twice each row's bytes (restuffing), slack. */
    size_t need = d->sos_end + 4 + NUM_HUFF_TBLS * (4 + 17 + 32) + 16 +
                  TD__FAST_TAIL;
    size_t umax = 0, tot = 0;
    if (r1 - r0 > TD__IX_ROWS && td_buf_reserve(&d->ixrows,
            (size_t)(r1 - r0) * sizeof(struct td__ixrow)))
        return -ENOMEM;
    struct td__ixrow rowbuf[TD__IX_ROWS];
    struct td__ixrow *rows = r1 - r0 > TD__IX_ROWS
                                 ? (struct td__ixrow *)(void *)d->ixrows.p
                                 : rowbuf;
    for (int r = r0; r < r1; r++) {
        struct td__ixrow *q = &rows[r - r0];
        if (td__ix_row(&ix, r, s0, s1, q))
            return 1;
        size_t nb = (size_t)((q->bit + q->nbits + 7) >> 3);
        /* rows of the cut are disjoint in the scan (but for a byte
         * shared by neighbours): the cut-out is at most about 2 scans */
        tot += nb;
        if (tot > ix.slen + (size_t)(r - r0 + 1))
            return 1;
        need += 2 * (nb + 8) + 16;
        umax = nb > umax ? nb : umax;
    }
    if (td_buf_reserve(&d->syn, need) || td_buf_reserve(&d->unst, umax + 16))
        return -ENOMEM;
    int cw = (s1 * segw < W ? s1 * segw : W) - s0 * segw;
    int ch = (r1 * mcu_h < H ? r1 * mcu_h : H) - r0 * mcu_h;
    struct td__bw w = {td__ix_headers(d, d->syn.p, cw, ch, dct, used), 0, 0};
    int pred[4] = {0};
    uint8_t *u = d->unst.p;
    for (int r = r0; r < r1; r++) {
        const struct td__ixrow *q = &rows[r - r0];
        uint64_t at = q->bit, end = q->bit + q->nbits;
        size_t nb = (size_t)((end + 7) >> 3);
        size_t n = td__unstuff(ix.scan, q->byte, nb, ix.slen, u);
        if (n == (size_t)-1 || n < nb)
            return 1;
        memset(u + n, 0, 16);
        for (int i = 0; i < ix.nc; i++) {
            uint64_t off = (uint64_t)q->bit + q->off[i];
            int diff, len;
            if (off < at || off >= end ||
                td__dc_decode(&dct[tbl[i]], u, off, &diff, &len) ||
                off + (uint64_t)len > end)
                return 1;
            int v = q->pred0[i] + diff - pred[i];
            unsigned a_ = (unsigned)(v < 0 ? -v : v);
            int cat = a_ ? 32 - __builtin_clz(a_) : 0;
            if (cat > 11 || !dct[tbl[i]].esize[cat])
                return 1;
            td__bw_copy(&w, u, at, off - at);
            td__bw_put(&w, dct[tbl[i]].ecode[cat], dct[tbl[i]].esize[cat]);
            if (cat)
                td__bw_put(&w, (uint32_t)(v < 0 ? v - 1 : v), cat);
            at = off + (uint64_t)len;
        }
        td__bw_copy(&w, u, at, end - at);
        memcpy(pred, q->pred1, sizeof pred);
    }
    if (w.n)
        td__bw_put(&w, 0x7f, 8 - w.n); /* pad with 1 bits */
    *w.o++ = 0xff;
    *w.o++ = 0xd9;
    /* libjpeg-turbo takes its fast Huffman path only while the source
     * holds more than TD__FAST_TAIL bytes; zeros after EOI keep it there
     * to the last MCU (libjpeg stops reading at EOI). */
    memset(w.o, 0, TD__FAST_TAIL);
    w.o += TD__FAST_TAIL;
    return td__decode_cut(d, (size_t)(w.o - d->syn.p), s0 * segw, r0 * mcu_h,
                          W, H, x, y, bw, bh, min_w, min_h, c, flags, 2, out);
}

int td_decoder_region(td_decoder *d, int x, int y, int bw, int bh, int min_w,
                      int min_h, int c, int flags, td_region *out)
{
    if (!d->have_header || (c != 1 && c != 3))
        return -EINVAL;
    if (!(flags & TD_DECODE_NO_CUT)) {
        int rc = td__region_index(d, x, y, bw, bh, min_w, min_h, c, flags,
                                  out);
        if (rc == 1)
            rc = td__region_cut(d, x, y, bw, bh, min_w, min_h, c, flags, out);
        if (rc != 1)
            return rc;
    }
    return td__region_plain(d, x, y, bw, bh, min_w, min_h, c, flags, out);
}
