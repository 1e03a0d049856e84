/* png.c - see png.h.  libpng's simplified API (png_image_*): it checks
 * CRCs and sizes, converts every colour type and depth, and reports
 * errors as text instead of longjmp-ing through our frames. */
#include "input/png.h"

#include <errno.h>
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

static int td__begin(td_png *p, png_image *im, const uint8_t *data,
                     size_t len)
{
    memset(im, 0, sizeof *im);
    im->version = PNG_IMAGE_VERSION;
    p->msg[0] = '\0';
    if (!td_png_is(data, len)) {
        snprintf(p->msg, sizeof p->msg, "not a PNG (no signature)");
        return TD_E_CORRUPT;
    }
    if (!png_image_begin_read_from_memory(im, data, len)) {
        snprintf(p->msg, sizeof p->msg, "PNG: %s", im->message);
        png_image_free(im);
        return TD_E_CORRUPT;
    }
    /* The image is decoded whole into a buffer that stays, sized from the
     * header before a byte of data is read: a 200-byte file claiming
     * 30000 x 30000 took 2.7 GB (found by fuzz_png).  Its data must be
     * able to hold the rows (at least a filter byte and 1 bit a pixel
     * each, deflated at most 1032:1), and the image must fit the limit. */
    uint64_t px = (uint64_t)im->width * im->height;
    uint64_t raw = (uint64_t)im->height * (1 + ((uint64_t)im->width + 7) / 8);
    if (px > TD_PNG_MAX_PIXELS)
        snprintf(p->msg, sizeof p->msg, "PNG: %u x %u pixels: more than the "
                 "%llu a sample may have", (unsigned)im->width,
                 (unsigned)im->height, (unsigned long long)TD_PNG_MAX_PIXELS);
    else if (raw > (uint64_t)len * 1032)
        snprintf(p->msg, sizeof p->msg, "PNG: %u x %u pixels cannot be in "
                 "%zu bytes (truncated?)", (unsigned)im->width,
                 (unsigned)im->height, len);
    else
        return 0;
    png_image_free(im);
    return TD_E_CORRUPT;
}

int td_png_header(td_png *p, const uint8_t *data, size_t len, int *w, int *h)
{
    png_image im;
    int rc = td__begin(p, &im, data, len);
    if (rc)
        return rc;
    *w = (int)im.width;
    *h = (int)im.height;
    png_image_free(&im);
    return 0;
}

int td_png_decode(td_png *p, const uint8_t *data, size_t len, int c,
                  td_region *out)
{
    png_image im;
    int rc = td__begin(p, &im, data, len);
    if (rc)
        return rc;
    im.format = c == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
    size_t need = PNG_IMAGE_SIZE(im);
    if (need > p->cap) {
        uint8_t *q = realloc(p->px, need);
        if (!q) {
            png_image_free(&im);
            return -ENOMEM;
        }
        p->px = q;
        p->cap = need;
    }
    png_color white = {255, 255, 255};
    if (!png_image_finish_read(&im, &white, p->px, 0, NULL)) {
        snprintf(p->msg, sizeof p->msg, "PNG: %s", im.message);
        png_image_free(&im);
        return TD_E_CORRUPT;
    }
    *out = (td_region){.px = p->px, .stride = (size_t)PNG_IMAGE_ROW_STRIDE(im),
                       .x0 = 0, .y0 = 0, .w = (int)im.width,
                       .h = (int)im.height, .scaled_w = (int)im.width,
                       .scaled_h = (int)im.height, .scale_num = 8, .c = c,
                       .cut = 0};
    return 0;
}

void td_png_free(td_png *p)
{
    free(p->px);
    p->px = NULL;
    p->cap = 0;
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
