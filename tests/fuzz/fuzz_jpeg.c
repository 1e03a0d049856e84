/* fuzz_jpeg.c - a sample's JPEG bytes decoded the way a worker does:
 * header, then one crop box, through the crop index (APP15, jpegidx.h)
 * or the restart-segment cut-out when the file has one (lib/decode.c).
 *
 * Input: 8 bytes choosing the box and options, then the JPEG:
 *   0, 1  x, y as a share of the width, height (v/256)
 *   2, 3  box width, height as a share (1 + v/256)
 *   4, 5  min_w, min_h: 1 + v % 64 (picks the DCT scale)
 *   6     bit 0: gray output (else RGB); bit 1: TD_DECODE_NO_FANCY;
 *         bit 2: TD_DECODE_FORCE_FULL_SCALE; bit 3: TD_DECODE_NO_CUT
 *   7     bit 0: decode a second box (the whole image) with the same
 *         decoder, as a worker's next sample would
 * Images over 2^20 pixels only have their header read (decoding them is
 * slow, not more interesting).  A region that decodes must lie inside the
 * scaled image and have every pixel readable.
 */
#include <string.h>

#include "input/decode.h"
#include "base/error.h"
#include "fuzz.h"

#define TD__FUZZ_MAX_PIXELS (1 << 20)

static void td__check_region(const td_region *r, int c)
{
    TD_FUZZ_CHECK(r->px != NULL && r->c == c);
    TD_FUZZ_CHECK(r->w > 0 && r->h > 0 && r->x0 >= 0 && r->y0 >= 0);
    TD_FUZZ_CHECK(r->x0 + r->w <= r->scaled_w && r->y0 + r->h <= r->scaled_h);
    TD_FUZZ_CHECK(r->stride >= (size_t)r->w * (size_t)c);
    TD_FUZZ_CHECK(r->scale_num == 1 || r->scale_num == 2 ||
                  r->scale_num == 4 || r->scale_num == 8);
    for (int y = 0; y < r->h; y++)
        td_fuzz_touch(r->px + (size_t)y * r->stride, (size_t)r->w * (size_t)c);
}

static td_decoder *td__dec;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 8)
        return 0;
    if (!td__dec)
        TD_FUZZ_CHECK(td_decoder_create(&td__dec) == 0);
    td_decoder *d = td__dec;
    const uint8_t *p = data;
    int w, h;
    if (td_decoder_header(d, data + 8, size - 8, &w, &h) != 0)
        return 0;
    TD_FUZZ_CHECK(w > 0 && h > 0);
    if ((int64_t)w * h > TD__FUZZ_MAX_PIXELS) {
        /* forget the header: the next input starts afresh */
        td_region r;
        td_decoder_region(d, 0, 0, 1, 1, 1, 1, 7, 0, &r);
        return 0;
    }
    int c = p[6] & 1 ? 1 : 3;
    int flags = (p[6] & 2 ? TD_DECODE_NO_FANCY : 0) |
                (p[6] & 4 ? TD_DECODE_FORCE_FULL_SCALE : 0) |
                (p[6] & 8 ? TD_DECODE_NO_CUT : 0);
    int x = (int)((int64_t)w * p[0] / 256), y = (int)((int64_t)h * p[1] / 256);
    int bw = 1 + (int)((int64_t)w * p[2] / 256);
    int bh = 1 + (int)((int64_t)h * p[3] / 256);
    td_region r;
    int rc = td_decoder_region(d, x, y, bw, bh, 1 + p[4] % 64, 1 + p[5] % 64,
                               c, flags, &r);
    TD_FUZZ_CHECK(rc == 0 || rc == TD_E_CORRUPT || rc == -ENOMEM);
    if (rc == 0)
        td__check_region(&r, c);
    if (p[7] & 1 &&
        td_decoder_header(d, data + 8, size - 8, &w, &h) == 0 &&
        td_decoder_region(d, 0, 0, w, h, w, h, c, 0, &r) == 0)
        td__check_region(&r, c);
    return 0;
}
