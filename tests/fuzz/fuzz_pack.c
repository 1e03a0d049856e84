/* fuzz_pack.c - a user's JPEG as `trainctl pack` rewrites it into a
 * shard (lib/input/jpegidx.c): td_pack_add_index (a crop index) or
 * td_pack_add_restarts (restart markers), then read back as a worker
 * reads the result (lib/input/decode.c's cut-outs).
 *
 * Input: 5 bytes of options, then the JPEG (any bytes a folder can hold):
 *   0     bits 0-2: max MCUs per checkpoint or segment - 1; bit 3: the
 *         restart rewrite (else the crop index)
 *   1, 2  box x, y as a share of the width, height (v/256)
 *   3, 4  box width, height as a share (1 + v/256)
 * pack.h promises a lossless rewrite: the output is a JPEG that decodes
 * without a warning to the input's pixels (block smoothing off: see
 * td__decode), and (what the index and the restart grid are for) a box
 * decoded through its cut-out equals the same box decoded whole.  Images
 * over 2^18 pixels are only rewritten (decoding them is slow, not more
 * interesting).
 */
#include <errno.h>
#include <string.h>

#include "base/error.h"
#include "fuzz.h"
#include "input/decode.h"
#include "input/jpegerr.h"
#include "input/pack.h"

#define TD__MAX_PIXELS (1 << 18)

static td_decoder *td__dec;

/* libjpeg's full decode of j (islow IDCT, colours as libjpeg converts
 * them by default) into a malloc'd buffer; NULL if it fails or warns.
 * Without block smoothing: a progressive file whose scans leave bits of
 * some coefficients unsent is smoothed, its baseline rewrite (the same
 * coefficients, all sent) cannot be, and what pack promises is the
 * coefficients. */
static uint8_t *td__decode(const uint8_t *j, size_t n, int *w, int *h,
                           int *c)
{
    struct jpeg_decompress_struct d;
    td_jpeg_err e;
    uint8_t *volatile px = NULL;
    d.err = td_jpeg_err_init(&e);
    jpeg_create_decompress(&d);
    if (setjmp(e.jb)) {
        free(px);
        jpeg_destroy_decompress(&d);
        return NULL;
    }
    jpeg_mem_src(&d, j, (unsigned long)n);
    jpeg_read_header(&d, TRUE);
    *w = (int)d.image_width;
    *h = (int)d.image_height;
    if ((int64_t)*w * *h > TD__MAX_PIXELS) {
        jpeg_destroy_decompress(&d);
        return NULL;
    }
    d.dct_method = JDCT_ISLOW;
    d.do_block_smoothing = FALSE;
    jpeg_start_decompress(&d);
    *c = d.output_components;
    size_t row = (size_t)d.output_width * (size_t)*c;
    px = malloc(row * d.output_height + 1);
    TD_FUZZ_CHECK(px != NULL);
    while (d.output_scanline < d.output_height) {
        JSAMPROW r = px + row * d.output_scanline;
        jpeg_read_scanlines(&d, &r, 1);
    }
    jpeg_finish_decompress(&d);
    jpeg_destroy_decompress(&d);
    if (e.warned) {
        free(px);
        return NULL;
    }
    return px;
}

/* The box through the cut-out equals the box decoded whole. */
static void td__boxes(const uint8_t *j, size_t n, const uint8_t *opt)
{
    td_decoder *d = td__dec;
    int w, h;
    td_region r, p;
    if (td_decoder_header(d, j, n, &w, &h) != 0)
        return;
    if ((int64_t)w * h > TD__MAX_PIXELS)
        return;
    int x = (int)((int64_t)w * opt[1] / 256);
    int y = (int)((int64_t)h * opt[2] / 256);
    int bw = 1 + (int)((int64_t)w * opt[3] / 256);
    int bh = 1 + (int)((int64_t)h * opt[4] / 256);
    if (td_decoder_region(d, x, y, bw, bh, bw, bh, 3,
                          TD_DECODE_NO_CUT | TD_DECODE_FORCE_FULL_SCALE,
                          &p) != 0)
        return;
    size_t row = (size_t)p.w * 3;
    uint8_t *plain = malloc(row * (size_t)p.h + 1);
    TD_FUZZ_CHECK(plain != NULL);
    for (int yy = 0; yy < p.h; yy++)
        memcpy(plain + (size_t)yy * row, p.px + (size_t)yy * p.stride, row);
    int px0 = p.x0, py0 = p.y0, pw = p.w, ph = p.h;
    TD_FUZZ_CHECK(td_decoder_header(d, j, n, &w, &h) == 0);
    int rc = td_decoder_region(d, x, y, bw, bh, bw, bh, 3,
                               TD_DECODE_FORCE_FULL_SCALE, &r);
    TD_FUZZ_CHECK(rc == 0);
    /* both hold the box [x, x + bw) x [y, y + bh), clipped */
    int x1 = x + bw < w ? x + bw : w, y1 = y + bh < h ? y + bh : h;
    TD_FUZZ_CHECK(r.x0 <= x && r.y0 <= y && r.x0 + r.w >= x1 &&
                  r.y0 + r.h >= y1);
    TD_FUZZ_CHECK(px0 <= x && py0 <= y && px0 + pw >= x1 && py0 + ph >= y1);
    for (int yy = y; yy < y1; yy++)
        TD_FUZZ_CHECK(memcmp(r.px + (size_t)(yy - r.y0) * r.stride +
                                 (size_t)(x - r.x0) * 3,
                             plain + (size_t)(yy - py0) * row +
                                 (size_t)(x - px0) * 3,
                             (size_t)(x1 - x) * 3) == 0);
    free(plain);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 5)
        return 0;
    if (!td__dec)
        TD_FUZZ_CHECK(td_decoder_create(&td__dec) == 0);
    const uint8_t *opt = data, *in = data + 5;
    size_t len = size - 5;
    int every = 1 + (opt[0] & 7), restart = (opt[0] & 8) != 0;
    uint8_t *out = NULL;
    size_t olen = 0;
    int rc = restart ? td_pack_add_restarts(in, len, every, &out, &olen)
                     : td_pack_add_index(in, len, every, &out, &olen);
    if (rc) {
        TD_FUZZ_CHECK(rc == TD_E_CORRUPT || rc == TD_E_NOTSUP ||
                      rc == -ENOMEM);
        TD_FUZZ_CHECK(out == NULL && olen == 0);
        return 0;
    }
    TD_FUZZ_CHECK(out != NULL && olen > 4);
    td_fuzz_touch(out, olen);
    int w0 = 0, h0 = 0, c0 = 0, w1 = 0, h1 = 0, c1 = 0;
    uint8_t *a = td__decode(in, len, &w0, &h0, &c0);
    uint8_t *b = td__decode(out, olen, &w1, &h1, &c1);
    TD_FUZZ_CHECK(w1 > 0 && h1 > 0); /* its header reads */
    if ((int64_t)w1 * h1 <= TD__MAX_PIXELS) {
        /* the rewrite is a JPEG that decodes cleanly, to the pixels */
        TD_FUZZ_CHECK(b != NULL);
        if (a) {
            TD_FUZZ_CHECK(w0 == w1 && h0 == h1 && c0 == c1);
            TD_FUZZ_CHECK(memcmp(a, b, (size_t)w0 * (size_t)h0 *
                                           (size_t)c0) == 0);
        }
        td__boxes(out, olen, opt);
    }
    free(a);
    free(b);
    free(out);
    return 0;
}
