/* test_idx.c - the IDX reader (idx.c) on hand-made files: the bytes of
 * each file are written out here as the format defines them (magic 0 0
 * type ndims, big-endian u32 sizes, data), and gzip'd by the gzip program,
 * not by the code under test's zlib calls; every refusal names the file
 * and what is wrong. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "input/idx.h"
#include "support/jpeggen.h"
#include "tdtest.h"

static char *tmp;
static char path[4200];

static void setup(void) { tmp = td_test_tmpdir("idx"); }

static void teardown(void)
{
    td_test_rmtree(tmp);
    free(tmp);
}

/* tmp/name gets the n bytes; path names it. */
static void put(const char *name, const void *bytes, size_t n)
{
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    td_test_write_file(path, bytes, n);
}

/* 2 images of 2 x 3 RGB pixels (n x h x w x 3), bytes 0..35. */
static const uint8_t rgb[] = {
    0, 0, 0x08, 4,  0, 0, 0, 2,  0, 0, 0, 2,  0, 0, 0, 3,  0, 0, 0, 3,
    0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 16, 17,
    18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35,
};

static void check_rgb(const td_idx *im)
{
    ck_assert_int_eq(im->ndims, 4);
    ck_assert_uint_eq(im->dims[0], 2);
    ck_assert_uint_eq(im->dims[1], 2);
    ck_assert_uint_eq(im->dims[2], 3);
    ck_assert_uint_eq(im->dims[3], 3);
    ck_assert_uint_eq(im->bytes, 36);
    for (int i = 0; i < 36; i++)
        ck_assert_int_eq(im->data[i], i);
}

START_TEST(test_loads_plain_and_gzip)
{
    td_idx im;
    put("rgb.idx", rgb, sizeof rgb);
    ck_assert_int_eq(td_idx_load(path, &im, NULL, 0), 0);
    check_rgb(&im);
    td_idx_free(&im);
    ck_assert_ptr_null(im.data);
    /* the same file compressed by gzip(1), under a name without .gz: the
     * content decides */
    char *cmd = NULL;
    ck_assert_int_ge(asprintf(&cmd, "gzip -c '%s' > '%s/rgb.bin'", path, tmp),
                     0);
    ck_assert_int_eq(system(cmd), 0);
    free(cmd);
    snprintf(path, sizeof path, "%s/rgb.bin", tmp);
    ck_assert_int_eq(td_idx_load(path, &im, NULL, 0), 0);
    check_rgb(&im);
    td_idx_free(&im);
    /* labels: one dimension */
    static const uint8_t lab[] = {0, 0, 8, 1, 0, 0, 0, 3, 9, 0, 4};
    put("lab.idx", lab, sizeof lab);
    ck_assert_int_eq(td_idx_load(path, &im, NULL, 0), 0);
    ck_assert_int_eq(im.ndims, 1);
    ck_assert_uint_eq(im.dims[0], 3);
    ck_assert_uint_eq(im.bytes, 3);
    ck_assert_int_eq(im.data[0], 9);
    ck_assert_int_eq(im.data[2], 4);
    td_idx_free(&im);
}
END_TEST

/* Each damaged file: TD_E_CORRUPT (or the errno), nothing allocated, and
 * err naming the file and, in its words, the problem. */
START_TEST(test_refusals_name_file_and_problem)
{
    static const struct {
        const char *name;
        uint8_t bytes[24];
        size_t n;
        const char *why;
    } bad[] = {
        {"empty.idx", {0}, 0, "bad magic"},
        {"magic.idx", {1, 0, 8, 1, 0, 0, 0, 1, 7}, 9, "bad magic"},
        {"float.idx", {0, 0, 0x0d, 1, 0, 0, 0, 1, 0, 0, 0, 0}, 12,
         "unsupported IDX type"},
        {"dims0.idx", {0, 0, 8, 0, 7}, 5, "unsupported IDX type"},
        {"dims5.idx", {0, 0, 8, 5, 0, 0, 0, 1, 0, 0, 0, 1}, 12,
         "unsupported IDX type"},
        {"zero.idx", {0, 0, 8, 2, 0, 0, 0, 2, 0, 0, 0, 0}, 12,
         "dimension of 0"},
        /* 2^32-1 cubed bytes: refused before any allocation */
        {"huge.idx",
         {0, 0, 8, 3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
          0xff, 0xff, 0xff},
         16, "implausibly large"},
        {"head.idx", {0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 2}, 12,
         "truncated IDX header"},
        {"short.idx", {0, 0, 8, 2, 0, 0, 0, 2, 0, 0, 0, 3, 1, 2, 3}, 15,
         "shorter than its IDX dims"},
        {"long.idx", {0, 0, 8, 1, 0, 0, 0, 2, 1, 2, 3}, 11,
         "trailing bytes"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[512] = "";
        td_idx im;
        memset(&im, 0x5a, sizeof im);
        put(bad[i].name, bad[i].bytes, bad[i].n);
        ck_assert_int_eq(td_idx_load(path, &im, err, sizeof err),
                         TD_E_CORRUPT);
        ck_assert_ptr_null(im.data);
        ck_assert_msg(strstr(err, path) == err && strstr(err, bad[i].why),
                      "%s: \"%s\" lacks the path or \"%s\"", bad[i].name, err,
                      bad[i].why);
    }
    char err[512];
    td_idx im;
    snprintf(path, sizeof path, "%s/nothere.idx", tmp);
    ck_assert_int_eq(td_idx_load(path, &im, err, sizeof err), -ENOENT);
    ck_assert_ptr_nonnull(strstr(err, "nothere.idx"));
    ck_assert_int_eq(td_idx_load(NULL, &im, err, sizeof err), -EINVAL);
}
END_TEST

/* A gzip stream damaged after its header: an error, never a partial
 * load. */
START_TEST(test_damaged_gzip)
{
    put("rgb.idx", rgb, sizeof rgb);
    char *cmd = NULL;
    ck_assert_int_ge(asprintf(&cmd, "gzip -c '%s' > '%s/rgb.gz'", path, tmp),
                     0);
    ck_assert_int_eq(system(cmd), 0);
    free(cmd);
    snprintf(path, sizeof path, "%s/rgb.gz", tmp);
    FILE *f = fopen(path, "r+b");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    uint8_t *b = malloc((size_t)n);
    fseek(f, 0, SEEK_SET);
    ck_assert_uint_eq(fread(b, 1, (size_t)n, f), (size_t)n);
    for (long i = 12; i < n - 8; i++) /* the deflate data, not the header */
        b[i] ^= 0xa5;
    fseek(f, 0, SEEK_SET);
    fwrite(b, 1, (size_t)n, f);
    fclose(f);
    free(b);
    char err[512] = "";
    td_idx im;
    int rc = td_idx_load(path, &im, err, sizeof err);
    ck_assert_msg(rc == -EIO || rc == TD_E_CORRUPT, "rc %d", rc);
    ck_assert_ptr_null(im.data);
    ck_assert_ptr_nonnull(strstr(err, "rgb.gz"));
}
END_TEST

static Suite *idx_suite(void)
{
    Suite *s = suite_create("idx");
    TCase *tc = tcase_create("idx");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_loads_plain_and_gzip);
    tcase_add_test(tc, test_refusals_name_file_and_problem);
    tcase_add_test(tc, test_damaged_gzip);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(idx_suite)
