/* png.c - see png.h.  libpng's own reading API with only the transforms
 * asked for here: palette and low bit depths expanded, tRNS made alpha,
 * 16 bits to their high byte, Adam7 passes combined.  No colour
 * management: gAMA, sRGB, iCCP and cHRM are ignored, as Pillow, OpenCV
 * and torchvision ignore them (and as JPEG ICC profiles are ignored).
 * libpng's simplified API, used before, converted every file to sRGB from
 * its gAMA chunk (or from linear light for 16-bit files without one), made
 * grey and composited alpha in linear light: 16-bit files, files with a
 * gAMA chunk, grey from colour and transparent pixels came out up to 83
 * levels away from every other tool (tests/unit/test_image_kinds.c).
 * libpng reports errors by longjmp: each call into it is inside one
 * setjmp here, with every piece of state in the caller's frame.
 */
#include "input/png.h"

#include <errno.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <png.h>

#include "base/clock.h"
#include "base/error.h"

int td_png_is(const uint8_t *data, size_t len)
{
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a,
                                   '\n'};
    return len >= 8 && memcmp(data, sig, 8) == 0;
}

/* One read of one file: libpng's structs and where it is in the bytes. */
typedef struct td__rd {
    td_png *p;
    const uint8_t *data;
    size_t len, off;
    png_structp png;
    png_infop info;
    png_uint_32 w, h;
} td__rd;

static void td__error(png_structp png, png_const_charp msg)
{
    td__rd *rd = png_get_error_ptr(png);
    snprintf(rd->p->msg, sizeof rd->p->msg, "PNG: %s", msg);
    png_longjmp(png, 1);
}

static void td__warning(png_structp png, png_const_charp msg)
{
    (void)png; /* damaged ancillary chunks: libpng drops them */
    (void)msg;
}

static void td__read(png_structp png, png_bytep out, size_t n)
{
    td__rd *rd = png_get_io_ptr(png);
    if (n > rd->len - rd->off)
        png_error(png, "the file ends inside the image (truncated?)");
    memcpy(out, rd->data + rd->off, n);
    rd->off += n;
}

/* Reads the header into rd (its structs to be freed by td__end).  The
 * image is decoded whole into a buffer that stays, sized from the header
 * before a byte of data is read: a 200-byte file claiming 30000 x 30000
 * took 2.7 GB (found by fuzz_png).  Its data must be able to hold the
 * rows (at least a filter byte and 1 bit a pixel each, deflated at most
 * 1032:1), and the image must fit the limit. */
static int td__begin(td__rd *rd)
{
    td_png *p = rd->p;
    p->msg[0] = '\0';
    if (!td_png_is(rd->data, rd->len)) {
        snprintf(p->msg, sizeof p->msg, "not a PNG (no signature)");
        return TD_E_CORRUPT;
    }
    rd->png = png_create_read_struct(PNG_LIBPNG_VER_STRING, rd, td__error,
                                     td__warning);
    if (!rd->png || !(rd->info = png_create_info_struct(rd->png)))
        return -ENOMEM;
    if (setjmp(png_jmpbuf(rd->png)))
        return TD_E_CORRUPT;
    png_set_read_fn(rd->png, rd, td__read);
    png_set_user_limits(rd->png, 0x7fffffff, 0x7fffffff); /* ours below */
    png_read_info(rd->png, rd->info);
    rd->w = png_get_image_width(rd->png, rd->info);
    rd->h = png_get_image_height(rd->png, rd->info);
    uint64_t px = (uint64_t)rd->w * rd->h;
    uint64_t raw = (uint64_t)rd->h * (1 + ((uint64_t)rd->w + 7) / 8);
    if (px > TD_PNG_MAX_PIXELS)
        snprintf(p->msg, sizeof p->msg, "PNG: %u x %u pixels: more than the "
                 "%llu a sample may have", (unsigned)rd->w, (unsigned)rd->h,
                 (unsigned long long)TD_PNG_MAX_PIXELS);
    else if (raw > (uint64_t)rd->len * 1032)
        snprintf(p->msg, sizeof p->msg, "PNG: %u x %u pixels cannot be in "
                 "%zu bytes (truncated?)", (unsigned)rd->w, (unsigned)rd->h,
                 rd->len);
    else
        return 0;
    return TD_E_CORRUPT;
}

static void td__end(td__rd *rd)
{
    if (rd->png)
        png_destroy_read_struct(&rd->png, rd->info ? &rd->info : NULL, NULL);
}

int td_png_header(td_png *p, const uint8_t *data, size_t len, int *w, int *h)
{
    td__rd rd = {.p = p, .data = data, .len = len};
    int rc = td__begin(&rd);
    if (rc == 0) {
        *w = (int)rd.w;
        *h = (int)rd.h;
    }
    td__end(&rd);
    return rc;
}

static int td__reserve(uint8_t **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    uint8_t *q = realloc(*buf, need);
    if (!q)
        return -ENOMEM;
    *buf = q;
    *cap = need;
    return 0;
}

/* (v * a + 255 * (255 - a)) / 255, rounded: v over white, as Pillow's
 * alpha_composite and a browser on a white page do it (in the stored,
 * gamma-encoded values). */
static uint8_t td__over_white(unsigned v, unsigned a)
{
    return (uint8_t)((v * a + 255u * (255u - a) + 127u) / 255u);
}

/* n pixels of sc channels (grey, grey+alpha, RGB, RGBA) to c (1 or 3):
 * alpha over white, grey from RGB as Pillow's convert('L'). */
static void td__convert(const uint8_t *in, int sc, uint8_t *out, int c,
                        size_t n)
{
    for (size_t i = 0; i < n; i++, in += sc) {
        unsigned r, g, b;
        if (sc <= 2) {
            r = g = b = sc == 2 ? td__over_white(in[0], in[1]) : in[0];
        } else if (sc == 4) {
            r = td__over_white(in[0], in[3]);
            g = td__over_white(in[1], in[3]);
            b = td__over_white(in[2], in[3]);
        } else {
            r = in[0];
            g = in[1];
            b = in[2];
        }
        if (c == 1) {
            *out++ = sc <= 2 ? (uint8_t)r : td_luma601(r, g, b);
        } else {
            *out++ = (uint8_t)r;
            *out++ = (uint8_t)g;
            *out++ = (uint8_t)b;
        }
    }
}

/* Decodes the image whose header td__begin read into p->px, c channels:
 * straight into it when the file's samples are what c asks for (grey
 * replicated by libpng), else through p->raw (one row, or the whole image
 * when Adam7 passes must be combined) and td__convert. */
static int td__pixels(td__rd *rd, int c)
{
    td_png *p = rd->p;
    png_structp png = rd->png;
    if (setjmp(png_jmpbuf(png)))
        return TD_E_CORRUPT;
    png_set_expand(png); /* palette, 1-4 bit grey, tRNS -> alpha */
    png_set_strip_16(png); /* the high byte, as Pillow and OpenCV */
    int ct = png_get_color_type(png, rd->info);
    int alpha = (ct & PNG_COLOR_MASK_ALPHA) ||
                png_get_valid(png, rd->info, PNG_INFO_tRNS);
    int colour = (ct & PNG_COLOR_MASK_COLOR) != 0;
    int direct = !alpha && (colour ? c == 3 : 1);
    if (direct && !colour && c == 3)
        png_set_gray_to_rgb(png);
    int passes = png_set_interlace_handling(png);
    png_read_update_info(png, rd->info);
    int sc = png_get_channels(png, rd->info);
    size_t row = png_get_rowbytes(png, rd->info), out_row = rd->w * (size_t)c;
    size_t rows = passes > 1 ? rd->h : 1;
    if (td__reserve(&p->px, &p->cap, out_row * rd->h) ||
        (!direct && td__reserve(&p->raw, &p->rawcap, row * rows)))
        return -ENOMEM;
    if (direct && row != out_row)
        png_error(png, "unexpected row size");
    for (int pass = 0; pass < passes; pass++)
        for (png_uint_32 y = 0; y < rd->h; y++) {
            uint8_t *dst = direct ? p->px + out_row * y
                                  : p->raw + row * (rows > 1 ? y : 0);
            png_read_row(png, dst, NULL);
            if (!direct && pass == passes - 1)
                td__convert(dst, sc, p->px + out_row * y, c, rd->w);
        }
    return 0;
}

int td_png_decode(td_png *p, const uint8_t *data, size_t len, int c,
                  td_region *out)
{
    td__rd rd = {.p = p, .data = data, .len = len};
    int rc = td__begin(&rd);
    if (rc == 0)
        rc = td__pixels(&rd, c);
    if (rc == 0)
        *out = (td_region){.px = p->px, .stride = rd.w * (size_t)c,
                           .x0 = 0, .y0 = 0, .w = (int)rd.w, .h = (int)rd.h,
                           .scaled_w = (int)rd.w, .scaled_h = (int)rd.h,
                           .scale_num = 8, .c = c, .cut = 0};
    td__end(&rd);
    return rc;
}

void td_png_free(td_png *p)
{
    free(p->px);
    free(p->raw);
    p->px = p->raw = NULL;
    p->cap = p->rawcap = 0;
}

int td_png_encode(const uint8_t *px, int w, int h, int c, uint8_t **buf,
                  size_t *cap, size_t *len)
{
    png_image im;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    im.width = (png_uint_32)w;
    im.height = (png_uint_32)h;
    im.format = c == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
    size_t most = PNG_IMAGE_PNG_SIZE_MAX(im); /* one pass, no size probe */
    if (most > *cap) {
        uint8_t *q = realloc(*buf, most);
        if (!q)
            return -ENOMEM;
        *buf = q;
        *cap = most;
    }
    png_alloc_size_t n = *cap;
    if (!png_image_write_to_memory(&im, *buf, &n, 0, px, 0, NULL))
        return TD_E_CORRUPT;
    *len = n;
    return 0;
}

int td_preprocess_png(td_png *p, td_resampler *rs, const td_augment *ops,
                      int n_ops, int train, uint64_t seed, int64_t epoch,
                      uint64_t sample, const uint8_t *data, size_t len,
                      int ow, int oh, int c, enum td_layout layout,
                      uint8_t *dst, int64_t *decoded_ns, const char **msg)
{
    td_aug_plan plan;
    td_region reg;
    int iw, ih;
    int rc = td_png_header(p, data, len, &iw, &ih);
    if (rc == 0) { /* the plan as for a JPEG; the whole image decoded */
        td_augment_plan(ops, n_ops, train, seed, epoch, sample, iw, ih, ow,
                        oh, &plan);
        rc = td_png_decode(p, data, len, c, &reg);
    }
    if (decoded_ns)
        *decoded_ns = td_now_ns();
    if (rc) {
        *msg = rc == -ENOMEM ? "out of memory" : p->msg;
        return rc;
    }
    rc = td_augment_apply(rs, &reg, iw, ih, &plan, layout, dst);
    if (rc)
        *msg = "out of memory";
    return rc;
}
