/* fuzz_png.c - a sample's PNG bytes as a worker decodes them
 * (lib/input/png.c): the header, the whole image, then the augment stage
 * on it (td_preprocess_png), as the pipeline does for a PNG in a shard.
 *
 * Input: 1 byte of options, then the PNG:
 *   bit 0  grey output (else RGB)
 *   bit 1  train mode with random_resized_crop and flip (else a plain
 *          resize)
 *   bit 2  planar output (NCHW) instead of NHWC
 *   bits 3-6  the sample number (the random draws)
 *   bit 7  keep the chunks' CRCs as they are; else each chunk that fits
 *          gets its right CRC first, so that mutations reach what libpng
 *          reads after the check (libpng is not instrumented: the fuzzer
 *          could not learn a CRC)
 * A decoded image has the size its header says, every row readable
 * inside the decoder's buffer; the preprocessed sample fills the output
 * size and nothing past it.  A refused file says why in msg.
 */
#include <errno.h>
#include <string.h>

#include <zlib.h>

#include "base/error.h"
#include "fuzz.h"
#include "input/png.h"

#define TD__OUT 12

static td_png td__png;
static td_resampler td__rs[2];

/* Sets each chunk's CRC (over its type and data) to the right one. */
static void td__fix_crcs(uint8_t *p, size_t len)
{
    for (size_t at = 8; at + 12 <= len;) {
        uint32_t n = (uint32_t)p[at] << 24 | (uint32_t)p[at + 1] << 16 |
                     (uint32_t)p[at + 2] << 8 | p[at + 3];
        if (n > len - at - 12)
            break;
        uint32_t crc = (uint32_t)crc32(0, p + at + 4, n + 4);
        uint8_t *c = p + at + 8 + n;
        c[0] = (uint8_t)(crc >> 24);
        c[1] = (uint8_t)(crc >> 16);
        c[2] = (uint8_t)(crc >> 8);
        c[3] = (uint8_t)crc;
        at += 12 + (size_t)n;
    }
}

static void td__one(uint8_t opt, const uint8_t *png, size_t len)
{
    int c = opt & 1 ? 1 : 3, w = 0, h = 0;
    td_png *p = &td__png;
    int rc = td_png_header(p, png, len, &w, &h);
    if (rc) {
        TD_FUZZ_CHECK(rc == TD_E_CORRUPT && p->msg[0] != '\0');
        return;
    }
    TD_FUZZ_CHECK(w > 0 && h > 0);
    td_region r;
    rc = td_png_decode(p, png, len, c, &r);
    if (rc) {
        TD_FUZZ_CHECK(rc == TD_E_CORRUPT || rc == -ENOMEM);
        TD_FUZZ_CHECK(rc == -ENOMEM || p->msg[0] != '\0');
        return;
    }
    TD_FUZZ_CHECK(r.px == p->px && r.c == c && r.x0 == 0 && r.y0 == 0);
    TD_FUZZ_CHECK(r.w == w && r.h == h && r.scaled_w == w && r.scaled_h == h);
    TD_FUZZ_CHECK(r.stride == (size_t)w * (size_t)c);
    TD_FUZZ_CHECK((size_t)h * r.stride <= p->cap);
    for (int y = 0; y < h; y++)
        td_fuzz_touch(r.px + (size_t)y * r.stride, r.stride);

    /* The augment stage on it, as a worker's next step. */
    td_augment ops[2];
    int n_ops = 0, train = (opt & 2) != 0;
    if (train) {
        td_augment_default(&ops[n_ops++], TD_AUG_RANDOM_RESIZED_CROP);
        td_augment_default(&ops[n_ops++], TD_AUG_FLIP);
    }
    td_resampler *rs = &td__rs[c == 1];
    if (rs->out_w == 0)
        TD_FUZZ_CHECK(td_resampler_init(rs, TD__OUT, TD__OUT, c) == 0);
    uint8_t dst[TD__OUT * TD__OUT * 3 + 1];
    memset(dst, 0xa5, sizeof dst);
    const char *msg = NULL;
    rc = td_preprocess_png(p, rs, ops, n_ops, train, 7, 0, opt >> 3 & 15, png,
                           len, TD__OUT, TD__OUT, c,
                           opt & 4 ? TD_LAYOUT_NCHW : TD_LAYOUT_NHWC, dst,
                           NULL, &msg);
    TD_FUZZ_CHECK(rc == 0 || rc == -ENOMEM); /* it decoded above */
    if (rc == 0) {
        TD_FUZZ_CHECK(dst[TD__OUT * TD__OUT * (size_t)c] == 0xa5);
        td_fuzz_touch(dst, TD__OUT * TD__OUT * (size_t)c);
    } else {
        TD_FUZZ_CHECK(msg != NULL && msg[0] != '\0');
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t opt = data[0];
    size_t len = size - 1;
    uint8_t *png = malloc(len + 1);
    TD_FUZZ_CHECK(png != NULL);
    memcpy(png, data + 1, len);
    if (!(opt & 128))
        td__fix_crcs(png, len);
    td__one(opt, png, len);
    free(png);
    return 0;
}
