/* test_restart_cut.c - the restart-marker rewrite (td_pack_add_restarts,
 * jpegidx.c) and decoding boxes through cut-outs of restart segments
 * (jpegidx_cut.c): the rewrite is lossless and declares the interval
 * asked for, cut-outs give exactly the plain path's pixels, damaged input
 * fails cleanly. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#include "base/error.h"
#include "input/decode.h"
#include "input/pack.h"
#include "support/decode_check.h"
#include "support/jpeggen.h"
#include "tdtest.h"

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
 * without fancy upsampling, for 1..4 MCUs per segment and whole rows;
 * and so do boxes through an indexed cut-out (_i >= 2 * nk). */
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


static Suite *restart_cut_suite(void)
{
    Suite *s = suite_create("restart_cut");
    TCase *tc = tcase_create("restart_cut");
    int nk = (int)(sizeof kinds / sizeof kinds[0]);
    tcase_add_loop_test(tc, test_restart_cut_no_fancy_large, 0, 2);
    tcase_add_test(tc, test_restart_interval_divides_the_row);
    tcase_add_loop_test(tc, test_restart_transcode_is_lossless, 0, 2 * nk);
    tcase_add_loop_test(tc, test_restart_cut_equals_plain_decode, 0, 4 * nk);
    tcase_add_test(tc, test_restart_damaged_inputs);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(restart_cut_suite)
