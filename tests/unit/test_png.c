/* test_png.c - PNG samples (lib/input/png.c): exact pixels for grey and
 * RGB, alpha over white, damage reported; IDX packs losslessly by default
 * and the pipeline reads those shards back to the exact pixels. */
#include <png.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "base/error.h"
#include "input/dataset.h"
#include "input/pack.h"
#include "input/pipeline.h"
#include "input/png.h"
#include "jpeggen.h"
#include "tdtest.h"

static void pixels(uint8_t *px, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        px[i] = (uint8_t)(seed >> 24);
    }
}

START_TEST(test_grey_and_rgb_exact)
{
    uint8_t grey[7 * 5], rgb[7 * 5 * 3], *buf = NULL;
    size_t cap = 0, len;
    pixels(grey, sizeof grey, 1);
    pixels(rgb, sizeof rgb, 2);
    td_png p = {0};
    td_region r;
    int w, h;
    ck_assert_int_eq(td_png_encode(grey, 7, 5, 1, &buf, &cap, &len), 0);
    ck_assert(td_png_is(buf, len));
    ck_assert_int_eq(td_png_header(&p, buf, len, &w, &h), 0);
    ck_assert_int_eq(w, 7);
    ck_assert_int_eq(h, 5);
    ck_assert_int_eq(td_png_decode(&p, buf, len, 1, &r), 0);
    for (int y = 0; y < 5; y++)
        ck_assert_mem_eq(r.px + (size_t)y * r.stride, grey + y * 7, 7);
    /* Grey to RGB: the same value in each channel. */
    ck_assert_int_eq(td_png_decode(&p, buf, len, 3, &r), 0);
    ck_assert_int_eq(r.px[3 * 8 + 1], grey[8]);
    ck_assert_int_eq(r.px[3 * 8 + 2], grey[8]);
    ck_assert_int_eq(td_png_encode(rgb, 7, 5, 3, &buf, &cap, &len), 0);
    ck_assert_int_eq(td_png_decode(&p, buf, len, 3, &r), 0);
    for (int y = 0; y < 5; y++)
        ck_assert_mem_eq(r.px + (size_t)y * r.stride, rgb + y * 21, 21);
    /* Damage: a clear error, not a crash. */
    buf[len / 2] ^= 0x55;
    int rc = td_png_decode(&p, buf, len, 3, &r);
    ck_assert_int_eq(rc, TD_E_CORRUPT);
    ck_assert_msg(strncmp(p.msg, "PNG: ", 5) == 0, "%s", p.msg);
    ck_assert_int_eq(td_png_header(&p, (const uint8_t *)"\xff\xd8\xff", 3, &w,
                                   &h), TD_E_CORRUPT);
    free(buf);
    td_png_free(&p);
}
END_TEST

START_TEST(test_alpha_over_white)
{
    uint8_t rgba[2 * 4] = {10, 20, 30, 255, 10, 20, 30, 0};
    png_image im;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    im.width = 2;
    im.height = 1;
    im.format = PNG_FORMAT_RGBA;
    uint8_t out[512];
    png_alloc_size_t n = sizeof out;
    ck_assert(png_image_write_to_memory(&im, out, &n, 0, rgba, 0, NULL));
    td_png p = {0};
    td_region r;
    ck_assert_int_eq(td_png_decode(&p, out, n, 3, &r), 0);
    ck_assert_int_eq(r.px[0], 10); /* opaque: as it is */
    ck_assert_int_eq(r.px[2], 30);
    ck_assert_int_eq(r.px[3], 255); /* transparent: white */
    ck_assert_int_eq(r.px[5], 255);
    td_png_free(&p);
}
END_TEST

/* IDX -> pack (default: lossless) -> pipeline in eval mode at the images'
 * own size: the batches hold exactly the IDX pixels. */
/* Sets the IHDR's width and height (and its CRC) of the PNG in buf. */
static void set_size(uint8_t *buf, uint32_t w, uint32_t h)
{
    uint8_t *ihdr = buf + 8; /* length, "IHDR", 13 bytes, CRC */
    for (int i = 0; i < 4; i++) {
        ihdr[8 + i] = (uint8_t)(w >> (24 - 8 * i));
        ihdr[12 + i] = (uint8_t)(h >> (24 - 8 * i));
    }
    uint32_t crc = (uint32_t)crc32(0, ihdr + 4, 17);
    for (int i = 0; i < 4; i++)
        ihdr[21 + i] = (uint8_t)(crc >> (24 - 8 * i));
}

/* A header is checked against the file before the image is allocated
 * (fuzz_png: 200 bytes claiming 2560 x 393216 took 3 GB): a size the
 * file's data cannot hold, or over TD_PNG_MAX_PIXELS, is refused with
 * the header's numbers; a size that fits goes on to libpng's own
 * error on the missing data. */
START_TEST(test_header_larger_than_file)
{
    uint8_t grey[8 * 8], *buf = NULL;
    size_t cap = 0, len;
    td_png p = {0};
    td_region r;
    int w, h;
    pixels(grey, sizeof grey, 3);
    ck_assert_int_eq(td_png_encode(grey, 8, 8, 1, &buf, &cap, &len), 0);
    set_size(buf, 2560, 393216);
    ck_assert_int_eq(td_png_header(&p, buf, len, &w, &h), TD_E_CORRUPT);
    ck_assert_str_eq(p.msg, "PNG: 2560 x 393216 pixels: more than the "
                            "67108864 a sample may have");
    set_size(buf, 4000, 4000);
    ck_assert_int_eq(td_png_decode(&p, buf, len, 3, &r), TD_E_CORRUPT);
    ck_assert_msg(strstr(p.msg, "PNG: 4000 x 4000 pixels cannot be in "),
                  "%s", p.msg);
    ck_assert_uint_eq(p.cap, 0); /* nothing allocated */
    set_size(buf, 40, 40);
    ck_assert_int_eq(td_png_header(&p, buf, len, &w, &h), 0);
    ck_assert_int_eq(td_png_decode(&p, buf, len, 3, &r), TD_E_CORRUPT);
    ck_assert_msg(strncmp(p.msg, "PNG: ", 5) == 0, "%s", p.msg);
    free(buf);
    td_png_free(&p);
}
END_TEST

START_TEST(test_idx_pack_is_lossless)
{
    char dir[64] = "/tmp/td-png-XXXXXX", path[200], out[200], err[512];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    enum { N = 16, S = 28 };
    uint8_t *px = malloc(N * S * S), lb[N];
    for (int i = 0; i < N; i++) {
        td_test_photo(px + i * S * S, S, S, 1, (uint32_t)i);
        lb[i] = (uint8_t)(i % 4);
    }
    uint32_t d3[3] = {N, S, S}, d1[1] = {N};
    snprintf(path, sizeof path, "%s/i.idx", dir);
    td_test_write_idx(path, 0, 3, d3, px);
    char lpath[200];
    snprintf(lpath, sizeof lpath, "%s/l.idx", dir);
    td_test_write_idx(lpath, 0, 1, d1, lb);
    snprintf(out, sizeof out, "%s/o", dir);
    td_pack_options o;
    td_pack_options_default(&o);
    ck_assert_int_eq(o.quality, 0);
    td_pack_result r;
    ck_assert_int_eq(td_pack_idx(path, lpath, out, &o, &r, err, sizeof err),
                     0);
    td_pipeline_config c;
    td_pipeline_config_default(&c);
    c.data = out;
    c.size[0] = c.size[1] = S;
    c.channels = 1;
    c.batch_size = N;
    c.workers = 1;
    c.train = 0;
    c.drop_last = 0;
    td_pipeline *p;
    ck_assert_int_eq(td_pipeline_create(&c, &p, err, sizeof err), 0);
    ck_assert_int_eq(td_pipeline_start(p, 0, 0), 0);
    td_batch b;
    ck_assert_int_eq(td_pipeline_next(p, &b, NULL), 0);
    ck_assert_int_eq(b.n, N);
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(b.labels[i], lb[i]);
        ck_assert_msg(memcmp(b.data + (size_t)i * S * S, px + i * S * S,
                             S * S) == 0, "image %d differs", i);
    }
    td_pipeline_release(p, &b);
    td_pipeline_destroy(p);
    free(px);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

static Suite *png_suite(void)
{
    Suite *s = suite_create("png");
    TCase *tc = tcase_create("png");
    tcase_add_test(tc, test_grey_and_rgb_exact);
    tcase_add_test(tc, test_alpha_over_white);
    tcase_add_test(tc, test_header_larger_than_file);
    tcase_add_test(tc, test_idx_pack_is_lossless);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(png_suite)
