/* test_decode.c - crop-and-scale JPEG decoding and the uint8 augmentations:
 * colour spaces, crops against full decodes, the crop-decode error bound,
 * the draws, pad/flip/centre/jitter/layout, corrupt input. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>
#include <jpeglib.h>

#include <jansson.h>

#include "base/error.h"
#include "input/augment.h"
#include "input/decode.h"
#include "input/pack.h"
#include "support/jpeggen.h"
#include "tdtest.h"

/* Full reference decode with TurboJPEG (islow; fancy upsampling unless
 * fast). */
static uint8_t *tj_decode_f(const uint8_t *j, size_t n, int w, int h, int c,
                            int fast)
{
    tjhandle tj = tjInitDecompress();
    uint8_t *px = malloc((size_t)w * (size_t)h * (size_t)c);
    ck_assert_int_eq(tjDecompress2(tj, j, n, px, w, 0, h,
                                   c == 1 ? TJPF_GRAY : TJPF_RGB,
                                   fast ? TJFLAG_FASTUPSAMPLE : 0), 0);
    tjDestroy(tj);
    return px;
}

static uint8_t *tj_decode(const uint8_t *j, size_t n, int w, int h, int c)
{
    return tj_decode_f(j, n, w, h, c, 0);
}

static const struct {
    enum td_test_cs cs;
    int sub, prog, c;
} kinds[] = {
    {TD_TEST_RGB, 444, 0, 3}, {TD_TEST_RGB, 422, 0, 3},
    {TD_TEST_RGB, 420, 0, 3}, {TD_TEST_RGB, 420, 1, 3},
    {TD_TEST_GRAY, 444, 0, 1}, {TD_TEST_GRAY, 444, 1, 3},
    {TD_TEST_RGB, 420, 0, 1},
};

/* Full-scale decode of the whole image equals TurboJPEG's. */
START_TEST(test_full_decode_matches_turbojpeg)
{
    uint8_t *j;
    size_t n;
    int w = 61, h = 47, iw, ih, c = kinds[_i].c;
    td_test_jpeg(w, h, kinds[_i].cs, kinds[_i].sub, 90, kinds[_i].prog, 7,
                 &j, &n);
    uint8_t *ref = tj_decode(j, n, w, h, c);
    td_decoder *d;
    td_region r;
    ck_assert_int_eq(td_decoder_create(&d), 0);
    ck_assert_int_eq(td_decoder_header(d, j, n, &iw, &ih), 0);
    ck_assert_int_eq(iw, w);
    ck_assert_int_eq(ih, h);
    ck_assert_int_eq(td_decoder_region(d, 0, 0, w, h, w, h, c,
                                       TD_DECODE_FORCE_FULL_SCALE, &r), 0);
    ck_assert_int_eq(r.x0, 0);
    ck_assert_int_eq(r.w, w);
    ck_assert_int_eq(r.h, h);
    for (int y = 0; y < h; y++)
        ck_assert_mem_eq(r.px + (size_t)y * r.stride,
                         ref + (size_t)y * (size_t)w * (size_t)c,
                         (size_t)w * (size_t)c);
    td_decoder_destroy(d);
    free(ref);
    free(j);
}
END_TEST

/* A crop decoded with crop_scanline + skip_scanlines has the same pixels
 * as the same rectangle of the full decode, with fancy upsampling (even
 * loop indices) and without (odd ones: merged upsampling for 4:2:x). */
START_TEST(test_crop_equals_full_decode_rectangle)
{
    uint8_t *j;
    size_t n;
    int k = _i / 2, fast = _i % 2;
    int w = 203, h = 157, iw, ih, c = kinds[k].c;
    td_test_jpeg(w, h, kinds[k].cs, kinds[k].sub, 90, kinds[k].prog, 9,
                 &j, &n);
    uint8_t *ref = tj_decode_f(j, n, w, h, c, fast);
    td_decoder *d;
    td_region r;
    ck_assert_int_eq(td_decoder_create(&d), 0);
    const int boxes[][4] = {{37, 51, 90, 60}, {0, 0, 20, 20},
                            {150, 100, 53, 57}, {100, 3, 103, 150}};
    for (int b = 0; b < 4; b++) {
        ck_assert_int_eq(td_decoder_header(d, j, n, &iw, &ih), 0);
        ck_assert_int_eq(td_decoder_region(d, boxes[b][0], boxes[b][1],
                                           boxes[b][2], boxes[b][3], 1, 1, c,
                                           TD_DECODE_FORCE_FULL_SCALE |
                                               (fast ? TD_DECODE_NO_FANCY : 0),
                                           &r), 0);
        ck_assert_int_le(r.x0, boxes[b][0]);
        ck_assert_int_ge(r.x0 + r.w, boxes[b][0] + boxes[b][2]);
        ck_assert_int_le(r.y0, boxes[b][1]);
        ck_assert_int_ge(r.y0 + r.h, boxes[b][1] + boxes[b][3]);
        ck_assert_int_lt(r.h, h); /* rows outside the box were skipped */
        /* Within the box plus the one pixel bilinear taps reach. */
        int maxd = 0, bx0 = boxes[b][0] - 1, by0 = boxes[b][1] - 1;
        int bx1 = boxes[b][0] + boxes[b][2] + 1;
        int by1 = boxes[b][1] + boxes[b][3] + 1;
        for (int y = by0 < 0 ? 0 : by0; y < (by1 > h ? h : by1); y++)
            for (int x = (bx0 < 0 ? 0 : bx0) * c; x < (bx1 > w ? w : bx1) * c;
                 x++) {
                int a = r.px[(size_t)(y - r.y0) * r.stride +
                             (size_t)(x - r.x0 * c)];
                int e = ref[(size_t)y * (size_t)w * (size_t)c + (size_t)x];
                maxd = abs(a - e) > maxd ? abs(a - e) : maxd;
            }
        ck_assert_int_le(maxd, 1);
    }
    td_decoder_destroy(d);
    free(ref);
    free(j);
}
END_TEST

/* CMYK and YCCK (Adobe, inverted) become RGB: R = C*K/255 etc. */
START_TEST(test_cmyk_and_ycck_to_rgb)
{
    for (int k = 0; k < 2; k++) {
        uint8_t *j, src[40 * 32 * 4];
        size_t n;
        int iw, ih;
        td_test_jpeg(40, 32, k ? TD_TEST_YCCK : TD_TEST_CMYK, 444, 95, 0, 3,
                     &j, &n);
        td_test_photo(src, 40, 32, 4, 3);
        td_decoder *d;
        td_region r;
        ck_assert_int_eq(td_decoder_create(&d), 0);
        ck_assert_int_eq(td_decoder_header(d, j, n, &iw, &ih), 0);
        ck_assert_int_eq(td_decoder_region(d, 0, 0, 40, 32, 40, 32, 3, 0, &r),
                         0);
        double err = 0;
        for (int y = 0; y < 32; y++)
            for (int x = 0; x < 40; x++)
                for (int ch = 0; ch < 3; ch++) {
                    const uint8_t *s = src + (y * 40 + x) * 4;
                    double e = s[ch] * s[3] / 255.0;
                    err += fabs(r.px[(size_t)y * r.stride + (size_t)x * 3 +
                                     (size_t)ch] - e);
                }
        ck_assert_double_lt(err / (40 * 32 * 3), 4.0);
        td_decoder_destroy(d);
        free(j);
    }
}
END_TEST

START_TEST(test_pick_scale)
{
    ck_assert_int_eq(td_decode_pick_scale(400, 400, 224, 224), 8);
    ck_assert_int_eq(td_decode_pick_scale(448, 448, 224, 224), 4);
    ck_assert_int_eq(td_decode_pick_scale(447, 900, 224, 224), 8);
    ck_assert_int_eq(td_decode_pick_scale(1000, 900, 224, 224), 2);
    ck_assert_int_eq(td_decode_pick_scale(1800, 1800, 224, 224), 1);
    ck_assert_int_eq(td_decode_pick_scale(100, 100, 224, 224), 8);
}
END_TEST

START_TEST(test_corrupt_inputs_fail_cleanly)
{
    uint8_t *j;
    size_t n;
    int iw, ih;
    td_region r;
    td_decoder *d;
    ck_assert_int_eq(td_decoder_create(&d), 0);
    ck_assert_int_eq(td_decoder_header(d, (const uint8_t *)"GIF89a..", 8,
                                       &iw, &ih), TD_E_CORRUPT);
    ck_assert_ptr_nonnull(strstr(td_decoder_message(d), "not a JPEG"));
    td_test_jpeg(300, 200, TD_TEST_RGB, 420, 90, 0, 1, &j, &n);
    /* Truncated inside the scan: the rows after the cut are missing. */
    ck_assert_int_eq(td_decoder_header(d, j, n / 2, &iw, &ih), 0);
    ck_assert_int_eq(td_decoder_region(d, 0, 0, 300, 200, 300, 200, 3, 0, &r),
                     TD_E_CORRUPT);
    /* Truncated in the headers. */
    ck_assert_int_eq(td_decoder_header(d, j, 100, &iw, &ih), TD_E_CORRUPT);
    /* Garbage in the headers. */
    memset(j + 20, 0xff, 200);
    ck_assert_int_eq(td_decoder_header(d, j, n, &iw, &ih) != 0 ||
                     td_decoder_region(d, 0, 0, 300, 200, 300, 200, 3, 0,
                                       &r) != 0, 1);
    /* The decoder is still usable afterwards. */
    free(j);
    td_test_jpeg(30, 20, TD_TEST_RGB, 420, 90, 0, 1, &j, &n);
    ck_assert_int_eq(td_decoder_header(d, j, n, &iw, &ih), 0);
    ck_assert_int_eq(td_decoder_region(d, 0, 0, 30, 20, 30, 20, 3, 0, &r), 0);
    td_decoder_destroy(d);
    free(j);
}
END_TEST

/* ---- restart markers (trainctl pack --restart) ------------------------- */

/* The restart interval a JPEG declares (its DRI marker), 0 if none. */
static int dri_of(const uint8_t *j, size_t n)
{
    for (size_t p = 2; p + 6 <= n && j[p] == 0xff && j[p + 1] != 0xda;
         p += 2 + ((size_t)j[p + 2] << 8 | j[p + 3]))
        if (j[p + 1] == 0xdd)
            return j[p + 4] << 8 | j[p + 5];
    return 0;
}

START_TEST(test_restart_interval_divides_the_row)
{
    ck_assert_int_eq(td_pack_restart_interval(30, 4), 3);
    ck_assert_int_eq(td_pack_restart_interval(28, 4), 4);
    ck_assert_int_eq(td_pack_restart_interval(13, 4), 1);
    ck_assert_int_eq(td_pack_restart_interval(2, 4), 2);
    ck_assert_int_eq(td_pack_restart_interval(14, 1000), 14);
}
END_TEST

/* The rewrite keeps every pixel (same coefficients, progressive becomes
 * baseline) and declares the interval asked for; with a crop index
 * (_i >= nk) it has no restart markers and the index in APP15 right after
 * SOI. */
START_TEST(test_restart_transcode_is_lossless)
{
    int nk = (int)(sizeof kinds / sizeof kinds[0]), ix = _i >= nk;
    int k = _i % nk, w = 229, h = 157, c = kinds[k].c;
    uint8_t *j, *t;
    size_t n, tn;
    td_test_jpeg(w, h, kinds[k].cs, kinds[k].sub, 90, kinds[k].prog, 5, &j,
                 &n);
    ck_assert_int_eq(ix ? td_pack_add_index(j, n, 2, &t, &tn)
                        : td_pack_add_restarts(j, n, 4, &t, &tn), 0);
    int mcu_w = kinds[k].cs == TD_TEST_GRAY || kinds[k].sub == 444 ? 8 : 16;
    ck_assert_int_eq(dri_of(t, tn),
                     ix ? 0
                        : td_pack_restart_interval((w + mcu_w - 1) / mcu_w, 4));
    if (ix)
        ck_assert(t[2] == 0xff && t[3] == 0xef &&
                  memcmp(t + 6, "TDIX", 4) == 0);
    ck_assert_int_eq(dri_of(j, n), 0);
    uint8_t *a = tj_decode(j, n, w, h, c), *b = tj_decode(t, tn, w, h, c);
    ck_assert_mem_eq(a, b, (size_t)w * (size_t)h * (size_t)c);
    free(a);
    free(b);
    free(t);
    free(j);
}
END_TEST

/* Boxes decoded through the cut-out of restart segments have exactly the
 * pixels of the plain path on the same file, at every scale, with and
 * without fancy upsampling, for 1..4 MCUs per segment and whole rows. */
/* td_decoder_header + td_decoder_region on j, asserting both succeed. */
static void decode_box(td_decoder *d, const uint8_t *j, size_t n, int x,
                       int y, int bw, int bh, int mw, int mh, int c,
                       int flags, td_region *r)
{
    int iw, ih;
    ck_assert_int_eq(td_decoder_header(d, j, n, &iw, &ih), 0);
    ck_assert_int_eq(td_decoder_region(d, x, y, bw, bh, mw, mh, c, flags, r),
                     0);
}

/* decode_box, with the pixels copied out of the decoder (its next decode
 * reuses the buffer): r->px points into the returned malloc'd copy. */
static uint8_t *decode_box_copy(td_decoder *d, const uint8_t *j, size_t n,
                                int x, int y, int bw, int bh, int mw, int mh,
                                int c, int flags, td_region *r)
{
    decode_box(d, j, n, x, y, bw, bh, mw, mh, c, flags, r);
    size_t rn = r->stride * (size_t)r->h;
    uint8_t *copy = malloc(rn);
    memcpy(copy, r->px, rn);
    r->px = copy;
    return copy;
}

/* The two rewrites that make cut-outs possible: restart markers (mode 0,
 * td_region.cut 1) and the crop index (mode 1, td_region.cut 2). */
static int rewrite(int mode, const uint8_t *j, size_t n, int max_mcus,
                   uint8_t **t, size_t *tn)
{
    return mode ? td_pack_add_index(j, n, max_mcus, t, tn)
                : td_pack_add_restarts(j, n, max_mcus, t, tn);
}

/* ... and so do boxes through an indexed cut-out (_i >= 2 * nk). */
START_TEST(test_restart_cut_equals_plain_decode)
{
    int nk = (int)(sizeof kinds / sizeof kinds[0]), mode = _i / (2 * nk);
    int k = _i / 2 % nk, w = _i % 2 ? 229 : 224, h = 157, c = kinds[k].c;
    uint8_t *j, *t;
    size_t n, tn;
    td_test_jpeg(w, h, kinds[k].cs, kinds[k].sub, 90, kinds[k].prog, 11, &j,
                 &n);
    td_decoder *d;
    ck_assert_int_eq(td_decoder_create(&d), 0);
    const int boxes[][4] = {{37, 51, 90, 60}, {0, 0, 20, 20},
                            {150, 100, 70, 57}, {100, 3, 120, 150},
                            {60, 90, 33, 40}, {145, 97, 40, 30}};
    const int maxr[] = {1, 2, 4, 1000};
    int cuts = 0;
    for (int q = 0; q < 4; q++) {
        ck_assert_int_eq(rewrite(mode, j, n, maxr[q], &t, &tn), 0);
        for (int b = 0; b < 6; b++) /* the last starts 1 px past an MCU */
            for (int f = 0; f < 4; f++) {
                int flags = (f & 1 ? TD_DECODE_NO_FANCY : 0) |
                            (f & 2 ? 0 : TD_DECODE_FORCE_FULL_SCALE);
                int mw = boxes[b][2] / 4, mh = boxes[b][3] / 4;
                td_region p, r;
                uint8_t *pp = decode_box_copy(d, t, tn, boxes[b][0],
                    boxes[b][1], boxes[b][2], boxes[b][3], mw, mh, c,
                    flags | TD_DECODE_NO_CUT, &p);
                ck_assert_int_eq(p.cut, 0);
                decode_box(d, t, tn, boxes[b][0], boxes[b][1], boxes[b][2],
                           boxes[b][3], mw, mh, c, flags, &r);
                ck_assert(r.cut == 0 || r.cut == mode + 1);
                cuts += r.cut != 0;
                ck_assert_int_eq(r.scale_num, p.scale_num);
                ck_assert_int_eq(r.scaled_w, p.scaled_w);
                ck_assert_int_eq(r.scaled_h, p.scaled_h);
                int m = r.scale_num;
                int x0 = boxes[b][0] * m / 8 - 1, y0 = boxes[b][1] * m / 8 - 1;
                int x1 = ((boxes[b][0] + boxes[b][2]) * m + 7) / 8 + 1;
                int y1 = ((boxes[b][1] + boxes[b][3]) * m + 7) / 8 + 1;
                x0 = x0 < 0 ? 0 : x0;
                y0 = y0 < 0 ? 0 : y0;
                x1 = x1 > r.scaled_w ? r.scaled_w : x1;
                y1 = y1 > r.scaled_h ? r.scaled_h : y1;
                ck_assert_int_le(r.x0, x0);
                ck_assert_int_le(r.y0, y0);
                ck_assert_int_ge(r.x0 + r.w, x1);
                ck_assert_int_ge(r.y0 + r.h, y1);
                for (int y = y0; y < y1; y++)
                    ck_assert_mem_eq(
                        r.px + (size_t)(y - r.y0) * r.stride +
                            (size_t)(x0 - r.x0) * (size_t)c,
                        pp + (size_t)(y - p.y0) * p.stride +
                            (size_t)(x0 - p.x0) * (size_t)c,
                        (size_t)(x1 - x0) * (size_t)c);
                free(pp);
            }
        free(t);
    }
    ck_assert_int_gt(cuts, 40); /* most boxes went through a cut-out */
    td_decoder_destroy(d);
    free(j);
}
END_TEST

/* Photo-sized 4:2:0 images with restart markers every 4 MCUs (dozens of
 * segments per row, where the test above has a few), large boxes,
 * box-filtered chroma as the pipeline decodes (NO_FANCY, libjpeg-turbo's
 * merged upsampler): the plain crop decode and the cut-out both give
 * exactly tjDecompress2's pixels (TJFLAG_FASTUPSAMPLE, full image). */
START_TEST(test_restart_cut_no_fancy_large)
{
    static const int sizes[][2] = {{505, 337}, {460, 368}, {339, 339}};
    int mode = _i;
    td_decoder *d;
    ck_assert_int_eq(td_decoder_create(&d), 0);
    int checked = 0;
    for (int k = 0; k < 3; k++) {
        int W = sizes[k][0], H = sizes[k][1];
        uint8_t *j, *t;
        size_t n, tn;
        td_test_jpeg(W, H, TD_TEST_RGB, 420, 90, 0, 50 + k, &j, &n);
        ck_assert_int_eq(rewrite(mode, j, n, 4, &t, &tn), 0);
        uint8_t *full = tj_decode_f(t, tn, W, H, 3, 1);
        for (int b = 0; b < 12; b++) {
            int bw = W / 2 + (b * 37) % (W / 2), bh = H / 2 + (b * 53) % (H / 2);
            int x = (b * 29) % (W - bw + 1), y = (b * 17) % (H - bh + 1);
            const int flags = TD_DECODE_NO_FANCY | TD_DECODE_FORCE_FULL_SCALE;
            td_region p, r;
            uint8_t *pp = decode_box_copy(d, t, tn, x, y, bw, bh, 224, 224,
                                          3, flags | TD_DECODE_NO_CUT, &p);
            decode_box(d, t, tn, x, y, bw, bh, 224, 224, 3, flags, &r);
            checked += r.cut == mode + 1;
            for (int yy = y; yy < y + bh; yy++) {
                const uint8_t *fr = full + ((size_t)yy * W + (size_t)x) * 3;
                ck_assert_msg(memcmp(pp + (size_t)(yy - p.y0) * p.stride +
                                         (size_t)(x - p.x0) * 3,
                                     fr, (size_t)bw * 3) == 0,
                              "plain: %dx%d box %d,%d %dx%d: row %d differs",
                              W, H, x, y, bw, bh, yy);
                ck_assert_msg(memcmp(r.px + (size_t)(yy - r.y0) * r.stride +
                                         (size_t)(x - r.x0) * 3,
                                     fr, (size_t)bw * 3) == 0,
                              "cut: %dx%d box %d,%d %dx%d: row %d differs",
                              W, H, x, y, bw, bh, yy);
            }
            free(pp);
        }
        free(full);
        free(t);
        free(j);
    }
    ck_assert_int_gt(checked, 20);
    td_decoder_destroy(d);
}
END_TEST

/* The first 2/3 of a 320x240 rewrite t: a box in the missing part is
 * TD_E_CORRUPT, one above it decodes; returns how (td_region.cut). */
static int truncated_box_cut(td_decoder *d, const uint8_t *t, size_t tn)
{
    int iw, ih;
    td_region r;
    ck_assert_int_eq(td_decoder_header(d, t, tn * 2 / 3, &iw, &ih), 0);
    ck_assert_int_eq(td_decoder_region(d, 100, 200, 100, 40, 50, 20, 3, 0,
                                       &r), TD_E_CORRUPT);
    ck_assert_int_eq(td_decoder_header(d, t, tn * 2 / 3, &iw, &ih), 0);
    ck_assert_int_eq(td_decoder_region(d, 100, 20, 100, 40, 50, 20, 3, 0,
                                       &r), 0);
    return r.cut;
}

/* Damaged input: not rewritten (TD_E_CORRUPT, nothing returned); a
 * restart file truncated inside a box's segments is TD_E_CORRUPT, while a
 * box above the damage still decodes. */
START_TEST(test_restart_damaged_inputs)
{
    uint8_t *j, *t = (uint8_t *)"x";
    size_t n, tn = 7;
    td_test_jpeg(320, 240, TD_TEST_RGB, 420, 90, 0, 3, &j, &n);
    ck_assert_int_eq(td_pack_add_restarts(j, n / 2, 4, &t, &tn),
                     TD_E_CORRUPT);
    ck_assert_ptr_null(t);
    ck_assert_int_eq(tn, 0);
    ck_assert_int_eq(td_pack_add_restarts((const uint8_t *)"GIF89a..", 8, 4,
                                          &t, &tn), TD_E_CORRUPT);
    ck_assert_int_eq(td_pack_add_restarts(j, n, 4, &t, &tn), 0);
    td_decoder *d;
    ck_assert_int_eq(td_decoder_create(&d), 0);
    ck_assert_int_eq(truncated_box_cut(d, t, tn), 1);
    td_decoder_destroy(d);
    free(t);
    free(j);
}
END_TEST

/* ---- crop index -------------------------------------------------------- */

/* Boxes of an indexed file through the cut-out (td_region.cut 2) equal the
 * plain decode; returns how many went through it minus how many should
 * have: all but those whose MCU rows start at the top and span the width
 * (segw = R MCUs in pixels; 4 = the decoder's margin at full scale). */
static int index_boxes_equal_plain(td_decoder *d, const uint8_t *t, size_t tn,
                                   int W, int H, int c, int nbox, int mcu_h,
                                   int segw)
{
    int cuts = 0;
    for (int b = 0; b < nbox; b++) {
        int bw = 8 + (b * 37) % (W - 8), bh = 8 + (b * 53) % (H - 8);
        int x = (b * 29) % (W - bw + 1), y = (b * 17 + 16) % (H - bh + 1);
        td_region p, r;
        uint8_t *pp = decode_box_copy(d, t, tn, x, y, bw, bh, bw, bh, c,
                                      TD_DECODE_NO_CUT, &p);
        decode_box(d, t, tn, x, y, bw, bh, bw, bh, c, 0, &r);
        ck_assert_int_eq(r.scale_num, 8);
        cuts += r.cut == 2;
        int whole = (y - 4) / mcu_h <= 0 && (x - 4) / segw <= 0 &&
                    (x + bw + 4 + segw - 1) / segw >= (W + segw - 1) / segw;
        cuts -= !whole;
        for (int yy = y; yy < y + bh; yy++)
            ck_assert_msg(memcmp(r.px + (size_t)(yy - r.y0) * r.stride +
                                     (size_t)(x - r.x0) * (size_t)c,
                                 pp + (size_t)(yy - p.y0) * p.stride +
                                     (size_t)(x - p.x0) * (size_t)c,
                                 (size_t)bw * (size_t)c) == 0,
                          "box %d,%d %dx%d: row %d differs", x, y, bw, bh,
                          yy);
        free(pp);
    }
    return cuts;
}

/* A gray image whose MCU rows are flat, each a step lighter than the one
 * above: the file codes DC differences of 0, of one step and the first
 * block's, so its optimized DC table lacks most categories, and a cut-out
 * starting lower down must code differences the file never does.  Those
 * get codes appended to the table (in the cut-out's own DHT): every box
 * still goes through the cut-out and equals the plain decode. */
START_TEST(test_index_codes_dc_categories_the_file_lacks)
{
    int W = 96, H = 160;
    uint8_t *px = malloc((size_t)W * H), *jpg = NULL, *t;
    for (int y = 0; y < H; y++)
        memset(px + (size_t)y * W, 12 + 24 * (y / 16), (size_t)W);
    unsigned long jn = 0;
    size_t tn;
    tjhandle tj = tjInitCompress();
    ck_assert_int_eq(tjCompress2(tj, px, W, 0, H, TJPF_GRAY, &jpg, &jn,
                                 TJSAMP_GRAY, 90, 0), 0);
    tjDestroy(tj);
    ck_assert_int_eq(td_pack_add_index(jpg, jn, 1, &t, &tn), 0);
    /* The rewrite's DC table: few categories. */
    struct jpeg_decompress_struct ci;
    struct jpeg_error_mgr je;
    ci.err = jpeg_std_error(&je);
    jpeg_create_decompress(&ci);
    jpeg_mem_src(&ci, t, (unsigned long)tn);
    jpeg_read_header(&ci, TRUE);
    int ncat = 0;
    for (int l = 1; l <= 16; l++)
        ncat += ci.dc_huff_tbl_ptrs[0]->bits[l];
    jpeg_destroy_decompress(&ci);
    ck_assert_int_le(ncat, 4);
    td_decoder *d;
    ck_assert_int_eq(td_decoder_create(&d), 0);
    ck_assert_int_eq(index_boxes_equal_plain(d, t, tn, W, H, 1, 24, 8, 8), 0);
    td_decoder_destroy(d);
    free(t);
    free(jpg);
    free(px);
}
END_TEST

/* Re-packing an indexed file (or giving it restart markers) drops its old
 * index instead of carrying two. */
START_TEST(test_index_repack_drops_the_old_index)
{
    uint8_t *j, *t, *t2;
    size_t n, tn, tn2;
    td_test_jpeg(1200, 800, TD_TEST_RGB, 444, 90, 0, 4, &j, &n);
    ck_assert_int_eq(td_pack_add_index(j, n, 1, &t, &tn), 0); /* 2+ chunks */
    for (int mode = 0; mode < 2; mode++) {
        ck_assert_int_eq(mode ? td_pack_add_restarts(t, tn, 4, &t2, &tn2)
                              : td_pack_add_index(t, tn, 4, &t2, &tn2), 0);
        int tdix = 0;
        for (size_t p = 0; p + 4 <= tn2; p++)
            tdix += memcmp(t2 + p, "TDIX", 4) == 0;
        ck_assert_int_eq(tdix, mode ? 0 : 1);
        if (!mode) {
            td_decoder *d;
            ck_assert_int_eq(td_decoder_create(&d), 0);
            td_region r;
            decode_box(d, t2, tn2, 500, 300, 300, 200, 300, 200, 3, 0, &r);
            ck_assert_int_eq(r.cut, 2);
            td_decoder_destroy(d);
        }
        free(t2);
    }
    free(t);
    free(j);
}
END_TEST

/* This process's virtual memory size (KiB), from /proc. */
static long vm_kib(void)
{
    char line[256];
    long v = -1;
    FILE *f = fopen("/proc/self/status", "r");
    ck_assert_ptr_nonnull(f);
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmSize: %ld", &v) == 1)
            break;
    fclose(f);
    ck_assert_int_ge(v, 0);
    return v;
}

/* A checkpoint whose bit length says ~4 Gbit (a damaged or hostile index)
 * is refused before anything is allocated for it: the plain path decodes
 * the box (the decoder used to reserve that much, or fail with -ENOMEM,
 * which stops a pipeline). */
START_TEST(test_index_huge_length_is_refused)
{
    uint8_t *j, *t;
    size_t n, tn;
    td_test_jpeg(320, 240, TD_TEST_RGB, 420, 90, 0, 6, &j, &n);
    ck_assert_int_eq(td_pack_add_index(j, n, 1, &t, &tn), 0);
    ck_assert(t[2] == 0xff && t[3] == 0xef);
    size_t plen = ((size_t)t[4] << 8 | t[5]) - 2; /* one chunk */
    const uint8_t *pay = t + 6, *blob = pay + 20;
    ck_assert_int_eq(pay[6], 1);
    int nc = pay[7], rows = pay[12] << 8 | pay[13];
    size_t tab = (size_t)(rows + 1) * (size_t)(9 + 2 * nc), old = 1;
    while (blob[tab + old - 1] & 0x80) /* row 0's first checkpoint's len */
        old++;
    const uint8_t huge[5] = {0x80, 0x80, 0x80, 0x80, 0x0f};
    size_t delta = 5 - old, nlen = tn + delta;
    uint8_t *g = malloc(nlen), *o = g;
    memcpy(o, t, 6 + 20 + tab); /* SOI, marker, header, row table */
    o[4] = (uint8_t)((plen + delta + 2) >> 8);
    o[5] = (uint8_t)(plen + delta + 2);
    for (int r = 1; r <= rows; r++) { /* later rows' stream offsets */
        uint8_t *a = o + 26 + (size_t)r * (size_t)(9 + 2 * nc) + 5;
        uint32_t v = (uint32_t)a[0] << 24 | (uint32_t)a[1] << 16 |
                     (uint32_t)a[2] << 8 | a[3];
        v += (uint32_t)delta;
        a[0] = (uint8_t)(v >> 24);
        a[1] = (uint8_t)(v >> 16);
        a[2] = (uint8_t)(v >> 8);
        a[3] = (uint8_t)v;
    }
    o += 26 + tab;
    memcpy(o, huge, 5);
    o += 5;
    memcpy(o, blob + tab + old, tn - (size_t)(blob + tab + old - t));
    td_decoder *d;
    ck_assert_int_eq(td_decoder_create(&d), 0);
    int iw, ih;
    td_region r;
    long vm0 = vm_kib();
    ck_assert_int_eq(td_decoder_header(d, g, nlen, &iw, &ih), 0);
    ck_assert_int_eq(td_decoder_region(d, 2, 4, 200, 40, 200, 40, 3, 0, &r),
                     0);
    ck_assert_int_eq(r.cut, 0);
    /* the decoder's buffers (kept until it is destroyed) did not grow to
     * what the length claims (~1 GiB of room for the cut-out) */
    ck_assert_int_lt(vm_kib() - vm0, 256 * 1024);
    /* ... while the same box of the intact file goes through the index. */
    decode_box(d, t, tn, 2, 4, 200, 40, 200, 40, 3, 0, &r);
    ck_assert_int_eq(r.cut, 2);
    td_decoder_destroy(d);
    free(g);
    free(t);
    free(j);
}
END_TEST

/* Random damage to indexed files of every kind (index bytes, anything
 * after it, random bytes anywhere, truncation), random boxes, scales,
 * channel counts and upsampling: the decoder returns 0 or TD_E_CORRUPT and
 * the rows it returns are readable (ASan and UBSan run this). */
static uint32_t xs32(uint32_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 17;
    *x ^= *x << 5;
    return *x;
}

START_TEST(test_index_fuzz)
{
    static const int cs[] = {TD_TEST_RGB, TD_TEST_RGB, TD_TEST_RGB,
                             TD_TEST_GRAY};
    static const int sub[] = {444, 422, 420, 444};
    uint32_t x = 2463534242u;
    volatile unsigned sink = 0;
    td_decoder *d;
    ck_assert_int_eq(td_decoder_create(&d), 0);
    int ok = 0;
    for (int img = 0; img < 12; img++) {
        int k = img % 4, W = 40 + (int)(xs32(&x) % 300);
        int H = 30 + (int)(xs32(&x) % 260), q = 60 + (int)(xs32(&x) % 40);
        int every = 1 + (int)(xs32(&x) % 4);
        uint8_t *j, *t;
        size_t n, tn;
        td_test_jpeg(W, H, cs[k], sub[k], q, img % 5 == 0, (uint32_t)img, &j,
                     &n);
        ck_assert_int_eq(td_pack_add_index(j, n, every, &t, &tn), 0);
        size_t ixend = 2;
        while (ixend + 4 < tn && t[ixend] == 0xff && t[ixend + 1] == 0xef)
            ixend += 2 + ((size_t)t[ixend + 2] << 8 | t[ixend + 3]);
        uint8_t *g = malloc(tn);
        for (int it = 0; it < 300; it++) {
            memcpy(g, t, tn);
            int mode = (int)(xs32(&x) % 4), nf = 1 + (int)(xs32(&x) % 4);
            for (int f = 0; f < nf; f++) {
                size_t at = mode == 0   ? 6 + xs32(&x) % (ixend - 6)
                            : mode == 1 ? ixend + xs32(&x) % (tn - ixend)
                                        : xs32(&x) % tn;
                if (mode == 3)
                    g[at] = (uint8_t)xs32(&x);
                else
                    g[at] ^= (uint8_t)(1u << (xs32(&x) % 8));
            }
            size_t len = xs32(&x) % 8 == 0 ? tn - xs32(&x) % (tn / 2) : tn;
            int iw, ih;
            td_region r;
            if (td_decoder_header(d, g, len, &iw, &ih))
                continue;
            int bw = 1 + (int)(xs32(&x) % (unsigned)W);
            int bh = 1 + (int)(xs32(&x) % (unsigned)H);
            int bx = (int)(xs32(&x) % (unsigned)W) - (int)(xs32(&x) % 8);
            int by = (int)(xs32(&x) % (unsigned)H);
            int mw = 1 + (int)(xs32(&x) % 224), mh = 1 + (int)(xs32(&x) % 224);
            int c = xs32(&x) % 2 ? 3 : 1;
            int flags = xs32(&x) % 4 ? 0 : TD_DECODE_NO_FANCY;
            int rc = td_decoder_region(d, bx, by, bw, bh, mw, mh, c, flags,
                                       &r);
            ck_assert_msg(rc == 0 || rc == TD_E_CORRUPT, "rc %d", rc);
            if (rc == 0) {
                for (int yy = 0; yy < r.h; yy++)
                    sink += r.px[(size_t)yy * r.stride +
                                 (size_t)(r.w * r.c - 1)];
                ok++;
            }
        }
        free(g);
        free(t);
        free(j);
    }
    (void)sink;
    ck_assert_int_gt(ok, 1000);
    td_decoder_destroy(d);
}
END_TEST

/* An index over several APP15 chunks (a large 4:4:4 image, a checkpoint
 * per MCU) is put back together: boxes anywhere equal the plain decode. */
START_TEST(test_index_in_several_chunks)
{
    int W = 1200, H = 800;
    uint8_t *j, *t;
    size_t n, tn;
    td_test_jpeg(W, H, TD_TEST_RGB, 444, 90, 0, 9, &j, &n);
    ck_assert_int_eq(td_pack_add_index(j, n, 1, &t, &tn), 0);
    int chunks = 0;
    for (size_t p = 2; p + 4 < tn && t[p] == 0xff && t[p + 1] == 0xef;
         p += 2 + ((size_t)t[p + 2] << 8 | t[p + 3]))
        chunks++;
    ck_assert_int_ge(chunks, 2);
    td_decoder *d;
    ck_assert_int_eq(td_decoder_create(&d), 0);
    ck_assert_int_eq(index_boxes_equal_plain(d, t, tn, W, H, 3, 6, 8, 8), 0);
    td_decoder_destroy(d);
    free(t);
    free(j);
}
END_TEST

/* Damage: a truncated indexed file no longer matches its index (the plain
 * path then finds the damage: TD_E_CORRUPT below it, pixels above it); an
 * index with changed geometry is ignored; changed entries never crash the
 * decoder (0 or TD_E_CORRUPT; ASan and valgrind check the rest). */
START_TEST(test_index_damaged)
{
    int W = 320, H = 240, iw, ih;
    uint8_t *j, *t;
    size_t n, tn;
    td_region r;
    td_test_jpeg(W, H, TD_TEST_RGB, 420, 90, 0, 3, &j, &n);
    ck_assert_int_eq(td_pack_add_index(j, n / 2, 2, &t, &tn), TD_E_CORRUPT);
    ck_assert_ptr_null(t);
    ck_assert_int_eq(td_pack_add_index(j, n, 2, &t, &tn), 0);
    td_decoder *d;
    ck_assert_int_eq(td_decoder_create(&d), 0);
    ck_assert_int_eq(truncated_box_cut(d, t, tn), 0);
    /* Geometry: R (bytes 8-9 of the payload, at file offset 6). */
    uint8_t *g = malloc(tn);
    memcpy(g, t, tn);
    g[6 + 9] ^= 1;
    ck_assert_int_eq(td_decoder_header(d, g, tn, &iw, &ih), 0);
    ck_assert_int_eq(td_decoder_region(d, 100, 60, 100, 40, 100, 40, 3, 0,
                                       &r), 0);
    ck_assert_int_eq(r.cut, 0);
    /* Entries: flip bytes all over the index. */
    size_t plen = (size_t)t[4] << 8 | t[5];
    uint32_t x = 12345;
    int ok = 0, bad = 0;
    for (int k = 0; k < 300; k++) {
        memcpy(g, t, tn);
        for (int f = 0; f < 1 + k % 3; f++) {
            x = x * 1103515245u + 12345u;
            size_t at = 6 + 20 + (x >> 8) % (plen - 22);
            g[at] ^= (uint8_t)(1u << (x >> 4) % 8);
        }
        ck_assert_int_eq(td_decoder_header(d, g, tn, &iw, &ih), 0);
        int rc = td_decoder_region(d, (k * 37) % 200, (k * 23) % 150, 100, 80,
                                   100, 80, 3, 0, &r);
        ck_assert_msg(rc == 0 || rc == TD_E_CORRUPT, "rc %d", rc);
        ok += rc == 0;
        bad += rc != 0;
    }
    ck_assert_int_gt(ok, 0);
    free(g);
    td_decoder_destroy(d);
    free(t);
    free(j);
}
END_TEST

/* ---- augmentation ----------------------------------------------------- */

/* Runs plan -> region decode -> apply, as the pipeline does. */
static void run_sample(td_decoder *d, td_resampler *rs, const uint8_t *j,
                       size_t n, const td_aug_plan *pl, int ow, int oh, int c,
                       int flags, enum td_layout lay, uint8_t *out)
{
    int iw, ih;
    td_region r;
    ck_assert_int_eq(td_decoder_header(d, j, n, &iw, &ih), 0);
    int bx = (int)floor(pl->x), by = (int)floor(pl->y);
    int bw = (int)ceil(pl->x + pl->w) - bx, bh = (int)ceil(pl->y + pl->h) - by;
    ck_assert_int_eq(td_decoder_region(d, bx, by, bw, bh, ow, oh, c, flags,
                                       &r), 0);
    ck_assert_int_eq(td_augment_apply(rs, &r, iw, ih, pl, lay, out), 0);
}

/* The bound: a random_resized_crop to 224 decoded at a reduced DCT scale
 * (1/2 or 1/4) without fancy upsampling differs from the same crop
 * resampled from a full-scale, fancy-upsampled decode by a mean absolute
 * error below 2 levels and a 99th percentile below 12 levels (photo-like
 * 500-1100 px images, quality 90, 4:2:0; measured: 1.33 and 6, max 83
 * at a few edge pixels). */
START_TEST(test_crop_decode_error_is_bounded)
{
    td_augment ops[1];
    td_augment_default(&ops[0], TD_AUG_RANDOM_RESIZED_CROP);
    td_decoder *d;
    td_resampler rs;
    ck_assert_int_eq(td_decoder_create(&d), 0);
    ck_assert_int_eq(td_resampler_init(&rs, 224, 224, 3), 0);
    uint8_t *a = malloc(224 * 224 * 3), *b = malloc(224 * 224 * 3);
    long hist[256] = {0}, total = 0;
    double sum = 0;
    int reduced = 0;
    for (uint32_t s = 0; s < 400 && reduced < 12; s++) {
        int w = 500 + (int)(s * 37 % 600), h = 500 + (int)(s * 53 % 600);
        td_aug_plan pl;
        td_augment_plan(ops, 1, 1, 5, 0, s, w, h, 224, 224, &pl);
        if (td_decode_pick_scale((int)ceil(pl.w), (int)ceil(pl.h), 224,
                                 224) == 8)
            continue;
        reduced++;
        uint8_t *j;
        size_t n;
        td_test_jpeg(w, h, TD_TEST_RGB, 420, 90, 0, s, &j, &n);
        run_sample(d, &rs, j, n, &pl, 224, 224, 3, TD_DECODE_NO_FANCY,
                   TD_LAYOUT_NHWC, a);
        run_sample(d, &rs, j, n, &pl, 224, 224, 3,
                   TD_DECODE_FORCE_FULL_SCALE, TD_LAYOUT_NHWC, b);
        for (int i = 0; i < 224 * 224 * 3; i++) {
            int e = abs(a[i] - b[i]);
            hist[e]++;
            sum += e;
            total++;
        }
        free(j);
    }
    long acc = 0;
    int p99 = 0;
    while (acc + hist[p99] < total * 99 / 100)
        acc += hist[p99++];
    int mx = 255;
    while (mx > 0 && hist[mx] == 0)
        mx--;
    fprintf(stderr, "crop decode at reduced scale vs full decode: mean |d| "
            "%.3f, p99 %d, max %d over %d images\n", sum / (double)total,
            p99, mx, reduced);
    ck_assert_int_eq(reduced, 12);
    ck_assert_double_lt(sum / (double)total, 2.0);
    ck_assert_int_lt(p99, 12);
    free(a);
    free(b);
    td_resampler_free(&rs);
    td_decoder_destroy(d);
}
END_TEST

START_TEST(test_rrc_draws_follow_torchvision_ranges)
{
    td_augment ops[1];
    td_augment_default(&ops[0], TD_AUG_RANDOM_RESIZED_CROP);
    int differ = 0;
    td_aug_plan prev = {0};
    for (uint64_t s = 0; s < 2000; s++) {
        td_aug_plan p, q;
        td_augment_plan(ops, 1, 1, 42, 3, s, 500, 375, 224, 224, &p);
        td_augment_plan(ops, 1, 1, 42, 3, s, 500, 375, 224, 224, &q);
        ck_assert_mem_eq(&p, &q, sizeof p); /* a pure function */
        ck_assert(p.x >= 0 && p.y >= 0 && p.x + p.w <= 500 &&
                  p.y + p.h <= 375);
        double area = p.w * p.h / (500.0 * 375.0), ar = p.w / p.h;
        ck_assert(area > 0.075 && area <= 1.0);
        ck_assert(ar > 0.74 && ar < 1.35);
        differ += memcmp(&p, &prev, sizeof p) != 0;
        prev = p;
    }
    ck_assert_int_eq(differ, 2000);
    /* Eval: the ratio-clamped centre crop of the whole image. */
    td_aug_plan e;
    td_augment_plan(ops, 1, 0, 42, 3, 9, 800, 400, 224, 224, &e);
    ck_assert_double_eq_tol(e.w, 400 * 4.0 / 3.0, 1);
    ck_assert_double_eq(e.h, 400);
    ck_assert_double_eq_tol(e.x, (800 - e.w) / 2, 1);
}
END_TEST

/* pad_crop of a 28x28 gray image: a shifted copy with zero borders. */
START_TEST(test_pad_crop_is_a_shift_with_zeros)
{
    uint8_t src[28 * 28], out[28 * 28], *j;
    size_t n;
    for (int i = 0; i < 28 * 28; i++)
        src[i] = (uint8_t)(40 + (i * 7) % 200);
    td_test_jpeg_from(src, 28, 28, 1, 100, &j, &n);
    uint8_t *ref = tj_decode(j, n, 28, 28, 1);
    td_augment ops[1];
    td_augment_default(&ops[0], TD_AUG_PAD_CROP);
    ops[0].pad = 2;
    td_decoder *d;
    td_resampler rs;
    ck_assert_int_eq(td_decoder_create(&d), 0);
    ck_assert_int_eq(td_resampler_init(&rs, 28, 28, 1), 0);
    int shifts = 0;
    for (uint64_t s = 0; s < 40; s++) {
        td_aug_plan p;
        td_augment_plan(ops, 1, 1, 1, 0, s, 28, 28, 28, 28, &p);
        ck_assert(p.x >= -2 && p.x <= 2 && p.y >= -2 && p.y <= 2);
        ck_assert_double_eq(p.x, floor(p.x));
        shifts += p.x != 0 || p.y != 0;
        run_sample(d, &rs, j, n, &p, 28, 28, 1, 0, TD_LAYOUT_NHWC, out);
        for (int y = 0; y < 28; y++)
            for (int x = 0; x < 28; x++) {
                int sx = x + (int)p.x, sy = y + (int)p.y;
                int e = (sx < 0 || sy < 0 || sx >= 28 || sy >= 28)
                            ? 0 : ref[sy * 28 + sx];
                ck_assert_int_eq(out[y * 28 + x], e);
            }
    }
    ck_assert_int_gt(shifts, 20);
    free(ref);
    free(j);
    td_resampler_free(&rs);
    td_decoder_destroy(d);
}
END_TEST

START_TEST(test_flip_mirrors_and_chw_transposes)
{
    uint8_t *j, a[32 * 24 * 3], b[32 * 24 * 3], cc[32 * 24 * 3];
    size_t n;
    td_test_jpeg(64, 48, TD_TEST_RGB, 444, 90, 0, 2, &j, &n);
    td_decoder *d;
    td_resampler rs;
    ck_assert_int_eq(td_decoder_create(&d), 0);
    ck_assert_int_eq(td_resampler_init(&rs, 32, 24, 3), 0);
    td_aug_plan p = {0, 0, 64, 48, 0, 0, 1, 1, 1};
    run_sample(d, &rs, j, n, &p, 32, 24, 3, 0, TD_LAYOUT_NHWC, a);
    p.flip = 1;
    run_sample(d, &rs, j, n, &p, 32, 24, 3, 0, TD_LAYOUT_NHWC, b);
    p.flip = 0;
    run_sample(d, &rs, j, n, &p, 32, 24, 3, 0, TD_LAYOUT_NCHW, cc);
    for (int y = 0; y < 24; y++)
        for (int x = 0; x < 32; x++)
            for (int k = 0; k < 3; k++) {
                ck_assert_int_eq(a[(y * 32 + x) * 3 + k],
                                 b[(y * 32 + 31 - x) * 3 + k]);
                ck_assert_int_eq(a[(y * 32 + x) * 3 + k],
                                 cc[k * 32 * 24 + y * 32 + x]);
            }
    /* Flip draws: about half of the samples, only in train mode. */
    td_augment ops[1];
    td_augment_default(&ops[0], TD_AUG_FLIP);
    int flips = 0, eval_flips = 0;
    for (uint64_t s = 0; s < 1000; s++) {
        td_augment_plan(ops, 1, 1, 1, 0, s, 64, 48, 32, 24, &p);
        flips += p.flip;
        td_augment_plan(ops, 1, 0, 1, 0, s, 64, 48, 32, 24, &p);
        eval_flips += p.flip;
    }
    ck_assert(flips > 430 && flips < 570);
    ck_assert_int_eq(eval_flips, 0);
    free(j);
    td_resampler_free(&rs);
    td_decoder_destroy(d);
}
END_TEST

/* The AVX2 passes give the same bytes as the SSE2/scalar ones: random
 * crops (pad and flip included), RGB and gray, widths that leave every
 * tail length, HWC and CHW. */
START_TEST(test_avx2_resampler_matches_scalar)
{
    td_resampler probe;
    ck_assert_int_eq(td_resampler_init(&probe, 8, 8, 3), 0);
    int have = probe.avx2;
    td_resampler_free(&probe);
    if (!have) {
        fprintf(stderr, "skipped: this CPU has no AVX2\n");
        return;
    }
    static const int sizes[][2] = {{224, 224}, {37, 29}, {11, 16}, {64, 3}};
    td_decoder *d;
    ck_assert_int_eq(td_decoder_create(&d), 0);
    for (int c = 1; c <= 3; c += 2)
        for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
            int ow = sizes[k][0], oh = sizes[k][1];
            uint8_t *j, *a = malloc((size_t)ow * oh * 3),
                        *b = malloc((size_t)ow * oh * 3);
            size_t n;
            td_test_jpeg(300 + 17 * (int)k, 260, c == 3 ? TD_TEST_RGB
                                                         : TD_TEST_GRAY,
                         420, 90, 0, (int)k, &j, &n);
            td_augment ops[3];
            td_augment_default(&ops[0], k % 2 ? TD_AUG_PAD_CROP
                                              : TD_AUG_RANDOM_RESIZED_CROP);
            ops[0].pad = 5;
            td_augment_default(&ops[1], TD_AUG_FLIP);
            td_resampler rs;
            ck_assert_int_eq(td_resampler_init(&rs, ow, oh, c), 0);
            for (uint64_t s = 0; s < 24; s++)
                for (int lay = 0; lay < 2; lay++) {
                    enum td_layout l = lay ? TD_LAYOUT_NCHW : TD_LAYOUT_NHWC;
                    td_aug_plan p;
                    td_augment_plan(ops, 2, 1, 7, 0, s, 300 + 17 * (int)k,
                                    260, k % 2 ? 300 + 17 * (int)k : ow,
                                    k % 2 ? 260 : oh, &p);
                    if (k % 2) { /* pad_crop keeps the input size: */
                        p.w = ow; /* take an ow x oh window of it */
                        p.h = oh;
                    }
                    ck_assert_int_eq(td_resampler_use_avx2(&rs, 1), 1);
                    run_sample(d, &rs, j, n, &p, ow, oh, c, 0, l, a);
                    ck_assert_int_eq(td_resampler_use_avx2(&rs, 0), 0);
                    run_sample(d, &rs, j, n, &p, ow, oh, c, 0, l, b);
                    ck_assert_msg(memcmp(a, b, (size_t)ow * oh * c) == 0,
                                  "%dx%dx%d sample %d layout %d differs",
                                  ow, oh, c, (int)s, lay);
                }
            td_resampler_free(&rs);
            free(a);
            free(b);
            free(j);
        }
    td_decoder_destroy(d);
}
END_TEST

START_TEST(test_center_crop_box)
{
    td_augment ops[1];
    td_augment_default(&ops[0], TD_AUG_CENTER_CROP);
    ops[0].resize = 256;
    td_aug_plan p;
    td_augment_plan(ops, 1, 1, 1, 0, 0, 512, 384, 224, 224, &p);
    /* 384 -> 256 is a factor 2/3: 224 out = 336 source px, centred. */
    ck_assert_double_eq_tol(p.w, 336, 1e-9);
    ck_assert_double_eq_tol(p.h, 336, 1e-9);
    ck_assert_double_eq_tol(p.x, 88, 1e-9);
    ck_assert_double_eq_tol(p.y, 24, 1e-9);
}
END_TEST

START_TEST(test_color_jitter)
{
    uint8_t *j, plain[16 * 16 * 3], out[16 * 16 * 3];
    size_t n;
    td_test_jpeg(16, 16, TD_TEST_RGB, 444, 95, 0, 4, &j, &n);
    td_decoder *d;
    td_resampler rs;
    ck_assert_int_eq(td_decoder_create(&d), 0);
    ck_assert_int_eq(td_resampler_init(&rs, 16, 16, 3), 0);
    td_aug_plan p = {0, 0, 16, 16, 0, 0, 1, 1, 1};
    run_sample(d, &rs, j, n, &p, 16, 16, 3, 0, TD_LAYOUT_NHWC, plain);
    p.jitter = 1;
    p.brightness = 0.5f;
    run_sample(d, &rs, j, n, &p, 16, 16, 3, 0, TD_LAYOUT_NHWC, out);
    for (int i = 0; i < 16 * 16 * 3; i++)
        ck_assert_int_le(abs(out[i] - (int)lround(plain[i] * 0.5)), 1);
    p.brightness = 1;
    p.saturation = 0; /* fully desaturated: grey */
    run_sample(d, &rs, j, n, &p, 16, 16, 3, 0, TD_LAYOUT_NHWC, out);
    for (int i = 0; i < 16 * 16; i++) {
        ck_assert_int_le(abs(out[3 * i] - out[3 * i + 1]), 1);
        ck_assert_int_le(abs(out[3 * i] - out[3 * i + 2]), 1);
    }
    p.saturation = 1;
    p.contrast = 0; /* no contrast: every pixel the mean grey */
    run_sample(d, &rs, j, n, &p, 16, 16, 3, 0, TD_LAYOUT_NHWC, out);
    for (int i = 1; i < 16 * 16 * 3; i++)
        ck_assert_int_le(abs(out[i] - out[0]), 1);
    td_augment ops[1];
    td_augment_default(&ops[0], TD_AUG_COLOR_JITTER);
    td_augment_plan(ops, 1, 1, 1, 0, 3, 16, 16, 16, 16, &p);
    ck_assert_int_eq(p.jitter, 1);
    ck_assert(p.brightness >= 0.6f && p.brightness <= 1.4f);
    ck_assert(p.contrast != 1.0f && p.saturation != 1.0f);
    free(j);
    td_resampler_free(&rs);
    td_decoder_destroy(d);
}
END_TEST

START_TEST(test_parse_and_validate)
{
    td_augment ops[TD_AUG_MAX];
    char err[256];
    ck_assert_int_eq(td_augment_parse_list("random_resized_crop,flip", ops,
                                           TD_AUG_MAX, err, sizeof err), 2);
    ck_assert_int_eq(ops[0].op, TD_AUG_RANDOM_RESIZED_CROP);
    ck_assert_int_eq(ops[1].op, TD_AUG_FLIP);
    ck_assert_int_eq(td_augment_validate(ops, 2, err, sizeof err), 0);
    ck_assert_int_eq(td_augment_parse_list("flip,rotate", ops, TD_AUG_MAX,
                                           err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "'rotate'"));
    td_augment_default(&ops[0], TD_AUG_PAD_CROP);
    td_augment_default(&ops[1], TD_AUG_CENTER_CROP);
    ck_assert_int_eq(td_augment_validate(ops, 2, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "only one"));
    td_augment_default(&ops[0], TD_AUG_RANDOM_RESIZED_CROP);
    ops[0].scale[0] = 0;
    ck_assert_int_eq(td_augment_validate(ops, 1, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "random_resized_crop"));
}
END_TEST

START_TEST(test_augment_from_json)
{
    td_augment ops[TD_AUG_MAX];
    char err[256];
    json_t *j = json_loads("[{\"op\": \"pad_crop\", \"pad\": 2}, {\"op\": "
                           "\"flip\"}, {\"op\": \"random_resized_crop\", "
                           "\"scale\": [0.25, 1], \"ratio\": [0.5, 2]}]",
                           0, NULL);
    ck_assert_int_eq(td_augment_from_json(j, ops, TD_AUG_MAX, err,
                                          sizeof err), 3);
    ck_assert_int_eq(ops[0].op, TD_AUG_PAD_CROP);
    ck_assert_int_eq(ops[0].pad, 2);
    ck_assert_double_eq(ops[1].p, 0.5); /* default kept */
    ck_assert_double_eq(ops[2].scale[0], 0.25);
    ck_assert_double_eq(ops[2].ratio[1], 2);
    json_decref(j);
    j = json_loads("[{\"op\": \"flip\"}, {\"op\": \"pad_crop\", "
                   "\"padding\": 2}]", 0, NULL);
    ck_assert_int_eq(td_augment_from_json(j, ops, TD_AUG_MAX, err,
                                          sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "augment[1].padding"));
    json_decref(j);
    j = json_loads("[{\"op\": \"rotate\"}]", 0, NULL);
    ck_assert_int_eq(td_augment_from_json(j, ops, TD_AUG_MAX, err,
                                          sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "augment[0].op: unknown op 'rotate'"));
    json_decref(j);
}
END_TEST

/* Tiny and thin images through every geometric op, both layouts. */
START_TEST(test_tiny_images_every_op)
{
    static const int sizes[][2] = {{1, 1}, {1, 17}, {17, 1}, {3, 5},
                                   {16, 16}, {33, 9}};
    static const enum td_aug_op geo[] = {TD_AUG_RANDOM_RESIZED_CROP,
                                         TD_AUG_PAD_CROP, TD_AUG_CENTER_CROP,
                                         TD_AUG_RESIZE};
    td_decoder *d;
    td_resampler rs;
    uint8_t out[12 * 10 * 3];
    ck_assert_int_eq(td_decoder_create(&d), 0);
    ck_assert_int_eq(td_resampler_init(&rs, 12, 10, 3), 0);
    for (int si = 0; si < 6; si++)
        for (int g = 0; g < 4; g++)
            for (uint64_t sample = 0; sample < 4; sample++) {
                int w = sizes[si][0], h = sizes[si][1];
                uint8_t *j;
                size_t n;
                td_test_jpeg(w, h, TD_TEST_RGB, 420, 90, 0, (uint32_t)si, &j,
                             &n);
                td_augment ops[2];
                td_augment_default(&ops[0], geo[g]);
                td_augment_default(&ops[1], TD_AUG_FLIP);
                td_aug_plan pl;
                td_augment_plan(ops, 2, 1, 1, 0, sample, w, h, 12, 10, &pl);
                memset(out, 0xab, sizeof out);
                run_sample(d, &rs, j, n, &pl, 12, 10, 3, 0,
                           sample % 2 ? TD_LAYOUT_NCHW : TD_LAYOUT_NHWC, out);
                if (g != 1) { /* no padding: no byte left untouched */
                    int untouched = 0;
                    for (size_t i = 0; i < sizeof out; i++)
                        untouched += out[i] == 0xab;
                    ck_assert_int_lt(untouched, (int)sizeof out / 4);
                }
                free(j);
            }
    td_resampler_free(&rs);
    td_decoder_destroy(d);
}
END_TEST

static Suite *decode_suite(void)
{
    Suite *s = suite_create("decode");
    TCase *tc = tcase_create("decode");
    int nk = (int)(sizeof kinds / sizeof kinds[0]);
    tcase_add_loop_test(tc, test_restart_cut_no_fancy_large, 0, 2);
    tcase_add_loop_test(tc, test_full_decode_matches_turbojpeg, 0, nk);
    tcase_add_loop_test(tc, test_crop_equals_full_decode_rectangle, 0,
                        2 * nk);
    tcase_add_test(tc, test_cmyk_and_ycck_to_rgb);
    tcase_add_test(tc, test_pick_scale);
    tcase_add_test(tc, test_corrupt_inputs_fail_cleanly);
    tcase_add_test(tc, test_crop_decode_error_is_bounded);
    tcase_add_test(tc, test_restart_interval_divides_the_row);
    tcase_add_loop_test(tc, test_restart_transcode_is_lossless, 0, 2 * nk);
    tcase_add_loop_test(tc, test_restart_cut_equals_plain_decode, 0, 4 * nk);
    tcase_add_test(tc, test_restart_damaged_inputs);
    tcase_add_test(tc, test_index_codes_dc_categories_the_file_lacks);
    tcase_add_test(tc, test_index_damaged);
    tcase_add_test(tc, test_index_in_several_chunks);
    tcase_add_test(tc, test_index_fuzz);
    tcase_add_test(tc, test_index_repack_drops_the_old_index);
    tcase_add_test(tc, test_index_huge_length_is_refused);
    suite_add_tcase(s, tc);
    TCase *ta = tcase_create("augment");
    tcase_add_test(ta, test_rrc_draws_follow_torchvision_ranges);
    tcase_add_test(ta, test_pad_crop_is_a_shift_with_zeros);
    tcase_add_test(ta, test_flip_mirrors_and_chw_transposes);
    tcase_add_test(ta, test_avx2_resampler_matches_scalar);
    tcase_add_test(ta, test_center_crop_box);
    tcase_add_test(ta, test_color_jitter);
    tcase_add_test(ta, test_parse_and_validate);
    tcase_add_test(ta, test_augment_from_json);
    tcase_add_test(ta, test_tiny_images_every_op);
    suite_add_tcase(s, ta);
    return s;
}

TD_TEST_MAIN(decode_suite)
