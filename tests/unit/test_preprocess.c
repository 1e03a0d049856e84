/* test_preprocess.c - one JPEG to one sample, the single path behind the
 * pipeline's samples and `trainctl predict`: checked against TurboJPEG's
 * own decode (same size: byte for byte; 4x smaller: close to the area
 * average of the full decode), the planar layout, a deterministic flip,
 * and a clear refusal of data that is not a JPEG. */
#include <math.h>
#include <stdlib.h>

#include "base/error.h"
#include "decode_check.h"
#include "input/preprocess.h"
#include "tdtest.h"

static td_decoder *dec;
static td_resampler rs;

static void setup(void) { ck_assert_int_eq(td_decoder_create(&dec), 0); }

static void teardown(void)
{
    td_resampler_free(&rs);
    td_decoder_destroy(dec);
}

static uint8_t *sample(const uint8_t *j, size_t n, const td_augment *ops,
                       int nops, int train, uint64_t idx, int ow, int oh,
                       int c, enum td_layout lay)
{
    uint8_t *out = malloc((size_t)ow * oh * c);
    const char *msg = NULL;
    int64_t t = 0;
    ck_assert_int_eq(td_resampler_init(&rs, ow, oh, c), 0);
    int rc = td_preprocess_jpeg(dec, &rs, ops, nops, train, 7, 0, idx, j, n,
                                ow, oh, c, lay, out, &t, &msg);
    ck_assert_msg(rc == 0, "preprocess: %d %s", rc, msg ? msg : "");
    ck_assert_int_gt(t, 0);
    td_resampler_free(&rs);
    return out;
}

START_TEST(test_same_size_is_turbojpegs_decode)
{
    /* Every colour space and subsampling the decode suites know. */
    const struct td_test_kind *k = &kinds[_i];
    uint8_t *j;
    size_t n;
    td_test_jpeg(64, 48, k->cs, k->sub, 90, k->prog, 11 + (uint32_t)_i, &j,
                 &n);
    uint8_t *got = sample(j, n, NULL, 0, 0, 0, 64, 48, k->c, TD_LAYOUT_NHWC);
    uint8_t *want = tj_decode(j, n, 64, 48, k->c);
    ck_assert_mem_eq(got, want, (size_t)64 * 48 * k->c);
    free(got);
    free(want);
    free(j);
}
END_TEST

START_TEST(test_downscale_matches_the_area_average)
{
    /* 256x192 -> 64x48: decoded at 1/4 scale by the IDCT, so the pixels
     * are each a 4x4 block's average up to the codec's rounding. */
    uint8_t *j;
    size_t n;
    td_test_jpeg(256, 192, TD_TEST_RGB, 444, 95, 0, 5, &j, &n);
    uint8_t *got = sample(j, n, NULL, 0, 0, 0, 64, 48, 3, TD_LAYOUT_NHWC);
    uint8_t *full = tj_decode(j, n, 256, 192, 3);
    double sum = 0;
    int worst = 0;
    for (int y = 0; y < 48; y++)
        for (int x = 0; x < 64; x++)
            for (int ch = 0; ch < 3; ch++) {
                int acc = 0;
                for (int dy = 0; dy < 4; dy++)
                    for (int dx = 0; dx < 4; dx++)
                        acc += full[((y * 4 + dy) * 256 + x * 4 + dx) * 3 +
                                    ch];
                int d = abs(got[(y * 64 + x) * 3 + ch] - (acc + 8) / 16);
                sum += d;
                worst = d > worst ? d : worst;
            }
    double mean = sum / (64.0 * 48 * 3);
    ck_assert_msg(mean < 2.0 && worst < 48,
                  "mean |diff| %.2f, worst %d against the 4x4 average",
                  mean, worst);
    free(got);
    free(full);
    free(j);
}
END_TEST

START_TEST(test_planar_layout_is_the_transpose)
{
    uint8_t *j;
    size_t n;
    td_test_jpeg(40, 30, TD_TEST_RGB, 420, 85, 0, 3, &j, &n);
    uint8_t *hwc = sample(j, n, NULL, 0, 0, 0, 32, 24, 3, TD_LAYOUT_NHWC);
    uint8_t *chw = sample(j, n, NULL, 0, 0, 0, 32, 24, 3, TD_LAYOUT_NCHW);
    for (int ch = 0; ch < 3; ch++)
        for (int p = 0; p < 32 * 24; p++)
            ck_assert_uint_eq(chw[ch * 32 * 24 + p], hwc[p * 3 + ch]);
    free(hwc);
    free(chw);
    free(j);
}
END_TEST

START_TEST(test_flip_is_the_mirror_and_eval_draws_nothing)
{
    uint8_t *j;
    size_t n;
    td_test_jpeg(48, 48, TD_TEST_RGB, 444, 90, 0, 9, &j, &n);
    td_augment flip;
    td_augment_default(&flip, TD_AUG_FLIP);
    flip.p = 1.0;
    uint8_t *plain = sample(j, n, NULL, 0, 0, 0, 48, 48, 3, TD_LAYOUT_NHWC);
    uint8_t *ev = sample(j, n, &flip, 1, 0, 0, 48, 48, 3, TD_LAYOUT_NHWC);
    uint8_t *tr = sample(j, n, &flip, 1, 1, 0, 48, 48, 3, TD_LAYOUT_NHWC);
    ck_assert_mem_eq(ev, plain, (size_t)48 * 48 * 3);
    for (int y = 0; y < 48; y++)
        for (int x = 0; x < 48; x++)
            for (int ch = 0; ch < 3; ch++)
                ck_assert_uint_eq(tr[(y * 48 + x) * 3 + ch],
                                  plain[(y * 48 + 47 - x) * 3 + ch]);
    free(plain);
    free(ev);
    free(tr);
    free(j);
}
END_TEST

START_TEST(test_not_a_jpeg_is_corrupt_with_a_message)
{
    static const uint8_t png_magic[] = {0x89, 'P', 'N', 'G', '\r', '\n',
                                        0x1a, '\n', 0, 0, 0, 13};
    uint8_t out[16 * 16 * 3];
    const char *msg = NULL;
    int64_t t = 0;
    ck_assert_int_eq(td_resampler_init(&rs, 16, 16, 3), 0);
    int rc = td_preprocess_jpeg(dec, &rs, NULL, 0, 0, 1, 0, 0, png_magic,
                                sizeof png_magic, 16, 16, 3, TD_LAYOUT_NHWC,
                                out, &t, &msg);
    ck_assert_int_eq(rc, TD_E_CORRUPT);
    ck_assert_ptr_nonnull(msg);
    ck_assert_int_gt((int)strlen(msg), 0);
    ck_assert_int_gt(t, 0); /* the decode time is stamped on failure too */

    /* A JPEG cut short in its header. */
    uint8_t *j;
    size_t n;
    td_test_jpeg(32, 32, TD_TEST_RGB, 420, 90, 0, 1, &j, &n);
    msg = NULL;
    rc = td_preprocess_jpeg(dec, &rs, NULL, 0, 0, 1, 0, 0, j, 20, 16, 16, 3,
                            TD_LAYOUT_NHWC, out, NULL, &msg);
    ck_assert_int_eq(rc, TD_E_CORRUPT);
    ck_assert_ptr_nonnull(msg);
    free(j);
}
END_TEST

static Suite *preprocess_suite(void)
{
    Suite *s = suite_create("preprocess");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_loop_test(tc, test_same_size_is_turbojpegs_decode, 0,
                        (int)(sizeof kinds / sizeof kinds[0]));
    tcase_add_test(tc, test_downscale_matches_the_area_average);
    tcase_add_test(tc, test_planar_layout_is_the_transpose);
    tcase_add_test(tc, test_flip_is_the_mirror_and_eval_draws_nothing);
    tcase_add_test(tc, test_not_a_jpeg_is_corrupt_with_a_message);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(preprocess_suite)
