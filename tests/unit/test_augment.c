/* test_augment.c - the uint8 augmentations (augment.c): the
 * random_resized_crop draws, pad/flip/centre crop/jitter/layouts against
 * straightforward references, the AVX2 resampler against the scalar one,
 * parsing and validation, tiny images through every op. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/error.h"
#include "input/augment.h"
#include "input/decode.h"
#include "support/decode_check.h"
#include "support/jpeggen.h"
#include "tdtest.h"

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


/* The resampling against a straightforward float bilinear written here
 * from augment.h's contract: output pixel i of n samples source
 * coordinate x + (i + .5) * w / n - .5 (mirrored when flipped), the two
 * nearest pixels weighted by distance, clamped at the image's edges,
 * zero outside them (pad); then rounded.  The library's two fixed-point
 * passes may differ by at most 2 levels (each pass rounds, weights are
 * 1/256ths) and by far less on average.  Region pixels made by hand (no
 * JPEG), every geometric op and the flip, HWC and CHW, scalar and AVX2. */
static double ref_axis(double start, double len, int n, int i, int img,
                       int *k0, int *k1)
{
    double s = start + (i + 0.5) * len / n - 0.5;
    if (s < -0.5 || s > img - 0.5)
        return -1;
    int k = (int)floor(s);
    double fr = s - k;
    if (k < 0) {
        k = 0;
        fr = 0;
    } else if (k >= img - 1) {
        k = img - 1;
        fr = 0;
    }
    *k0 = k;
    *k1 = k + 1 < img ? k + 1 : k;
    return fr;
}

START_TEST(test_resample_matches_float_bilinear)
{
    enum { W = 57, H = 43, OW = 24, OH = 20 };
    static const enum td_aug_op geo[] = {TD_AUG_RANDOM_RESIZED_CROP,
                                         TD_AUG_PAD_CROP, TD_AUG_CENTER_CROP,
                                         TD_AUG_RESIZE};
    for (int c = 1; c <= 3; c += 2) {
        uint8_t *src = malloc((size_t)W * H * (size_t)c);
        uint32_t x = 12345u + (uint32_t)c;
        for (int i = 0; i < W * H * c; i++) { /* noise: the hardest case */
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            src[i] = (uint8_t)(x >> 11);
        }
        td_region reg = {src, (size_t)W * (size_t)c, 0, 0, W, H, W, H, 8, c,
                         0};
        td_resampler rs;
        ck_assert_int_eq(td_resampler_init(&rs, OW, OH, c), 0);
        uint8_t out[OW * OH * 3];
        long checked = 0, sumd = 0;
        for (int g = 0; g < 4; g++)
            for (int avx = 0; avx < 2; avx++)
                for (int lay = 0; lay < 2; lay++)
                    for (uint64_t smp = 0; smp < 12; smp++) {
                        if (td_resampler_use_avx2(&rs, avx) != avx)
                            continue; /* no AVX2 on this CPU */
                        td_augment ops[2];
                        td_augment_default(&ops[0], geo[g]);
                        td_augment_default(&ops[1], TD_AUG_FLIP);
                        ops[0].pad = 6;
                        ops[0].resize = 30;
                        td_aug_plan p;
                        td_augment_plan(ops, 2, 1, 7, 0, smp, W, H, OW, OH,
                                        &p);
                        ck_assert_int_eq(td_augment_apply(&rs, &reg, W, H,
                                                          &p, lay, out), 0);
                        for (int oy = 0; oy < OH; oy++)
                            for (int ox = 0; ox < OW; ox++) {
                                int x0, x1, y0, y1;
                                int sx = p.flip ? OW - 1 - ox : ox;
                                double fx = ref_axis(p.x, p.w, OW, sx, W, &x0,
                                                     &x1);
                                double fy = ref_axis(p.y, p.h, OH, oy, H, &y0,
                                                     &y1);
                                for (int k = 0; k < c; k++) {
                                    double v = 0;
                                    if (fx >= 0 && fy >= 0) {
#define PX(yy, xx)                                                           \
    src[((size_t)(yy) * W + (size_t)(xx)) * (size_t)c + (size_t)k]
                                        v = (1 - fy) * ((1 - fx) * PX(y0, x0) +
                                                        fx * PX(y0, x1)) +
                                            fy * ((1 - fx) * PX(y1, x0) +
                                                  fx * PX(y1, x1));
#undef PX
                                    }
                                    size_t at = lay == TD_LAYOUT_NCHW
                                        ? (size_t)k * OW * OH +
                                              (size_t)oy * OW + (size_t)ox
                                        : ((size_t)oy * OW + (size_t)ox) *
                                                  (size_t)c + (size_t)k;
                                    int d = abs(out[at] - (int)lround(v));
                                    ck_assert_msg(d <= 2,
                                                  "op %d c %d sample %d "
                                                  "(%d, %d): %d, want %.2f",
                                                  g, c, (int)smp, ox, oy,
                                                  out[at], v);
                                    sumd += d;
                                    checked++;
                                }
                            }
                    }
        ck_assert_int_ge(checked, 4L * 12 * 2 * OW * OH * c);
        ck_assert_msg((double)sumd / (double)checked < 0.3,
                      "mean difference %.3f", (double)sumd / (double)checked);
        td_resampler_free(&rs);
        free(src);
    }
}
END_TEST

static Suite *augment_suite(void)
{
    Suite *s = suite_create("augment");
    TCase *tc = tcase_create("augment");
    tcase_add_test(tc, test_rrc_draws_follow_torchvision_ranges);
    tcase_add_test(tc, test_pad_crop_is_a_shift_with_zeros);
    tcase_add_test(tc, test_flip_mirrors_and_chw_transposes);
    tcase_add_test(tc, test_avx2_resampler_matches_scalar);
    tcase_add_test(tc, test_center_crop_box);
    tcase_add_test(tc, test_color_jitter);
    tcase_add_test(tc, test_parse_and_validate);
    tcase_add_test(tc, test_augment_from_json);
    tcase_add_test(tc, test_tiny_images_every_op);
    tcase_add_test(tc, test_resample_matches_float_bilinear);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(augment_suite)
