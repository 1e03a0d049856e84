/* test_pack.c - the packers (pack.c) checked from outside: GNU tar lists
 * and extracts the shards they write (the independent reader), TurboJPEG
 * decodes the samples, the file system shows the shard sizes, the index
 * caches and no leftovers.  test_dataset.c reads packs back through
 * td_dataset; this suite does not use it. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <turbojpeg.h>

#include "base/error.h"
#include "input/pack.h"
#include "support/jpeggen.h"
#include "tdtest.h"

static char *tmp;

static void setup(void) { tmp = td_test_tmpdir("pack"); }

static void teardown(void)
{
    td_test_rmtree(tmp);
    free(tmp);
}

/* Writes n images of h x w x c (c 1 or 3) and their labels (i * 3 % 7)
 * as IDX files tmp/im.idx, tmp/lb.idx; returns the pixels. */
static uint8_t *write_idx(int n, int h, int w, int c)
{
    size_t per = (size_t)h * (size_t)w * (size_t)c;
    uint8_t *px = malloc((size_t)n * per), *lb = malloc((size_t)n);
    for (int i = 0; i < n; i++) {
        td_test_photo(px + (size_t)i * per, w, h, c, (uint32_t)i + 1);
        lb[i] = (uint8_t)(i * 3 % 7);
    }
    uint32_t dims[4] = {(uint32_t)n, (uint32_t)h, (uint32_t)w, 3};
    char p[4200];
    snprintf(p, sizeof p, "%s/im.idx", tmp);
    td_test_write_idx(p, 0, c == 3 ? 4 : 3, dims, px);
    snprintf(p, sizeof p, "%s/lb.idx", tmp);
    td_test_write_idx(p, 0, 1, dims, lb);
    free(lb);
    return px;
}

static int pack_idx(const td_pack_options *o, td_pack_result *r, char *err,
                    size_t cap)
{
    char im[4200], lb[4200], out[4200];
    snprintf(im, sizeof im, "%s/im.idx", tmp);
    snprintf(lb, sizeof lb, "%s/lb.idx", tmp);
    snprintf(out, sizeof out, "%s/out", tmp);
    return td_pack_idx(im, lb, out, o, r, err, cap);
}

/* Names in tmp/out, sorted, one per line. */
static char *listing(void)
{
    td_test_sh(tmp, "ls -1 out > ls.txt");
    size_t n;
    return (char *)td_test_slurp(tmp, "ls.txt", &n);
}

/* RGB IDX images: shards named <prefix>-NNNNNN.tar, each within the cap,
 * each with its .tdidx and no .tmp left; GNU tar lists NNNNNNNNN.jpg and
 * .cls pairs in sample order across the shards; the .cls files hold the
 * labels in decimal, the .jpg files are 4:2:0 JPEGs of the pixels. */
START_TEST(test_idx_rgb_shards_read_by_gnu_tar)
{
    enum { N = 12, H = 20, W = 24, C = 3 };
    uint8_t *px = write_idx(N, H, W, C);
    td_pack_options o;
    td_pack_options_default(&o);
    o.quality = 95; /* JPEG members (the default, 0, stores PNG) */
    o.prefix = "rgb";
    o.shard_bytes = 6 * 1024;
    td_pack_result r;
    char err[512] = "";
    ck_assert_msg(pack_idx(&o, &r, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(r.samples, N);
    ck_assert_int_eq(r.width, W);
    ck_assert_int_eq(r.height, H);
    ck_assert_int_eq(r.channels, 3);
    ck_assert_int_eq(r.classes, 7); /* labels 0..6 */
    ck_assert_int_gt(r.shards, 1);
    char *ls = listing(), want[4096] = "";
    for (int s = 0; s < r.shards; s++) {
        char line[128];
        snprintf(line, sizeof line, "rgb-%06d.tar\nrgb-%06d.tar.tdidx\n", s,
                 s);
        strcat(want, line);
    }
    ck_assert_str_eq(ls, want);
    free(ls);
    uint64_t bytes = 0;
    int next = 0;
    tjhandle tj = tjInitDecompress(), enc = tjInitCompress();
    for (int s = 0; s < r.shards; s++) {
        char shard[64];
        struct stat st;
        snprintf(shard, sizeof shard, "out/rgb-%06d.tar", s);
        char full[4200];
        snprintf(full, sizeof full, "%s/%s", tmp, shard);
        ck_assert_int_eq(stat(full, &st), 0);
        ck_assert_int_le(st.st_size, (off_t)o.shard_bytes);
        bytes += (uint64_t)st.st_size;
        td_test_sh(tmp, "rm -rf x && mkdir x && tar -xf %s -C x && tar -tf %s > t.txt",
            shard, shard);
        size_t n;
        char *names = (char *)td_test_slurp(tmp, "t.txt", &n);
        for (char *line = strtok(names, "\n"); line;
             line = strtok(NULL, "\n")) {
            char jpg[32], cls[32];
            snprintf(jpg, sizeof jpg, "%09d.jpg", next);
            snprintf(cls, sizeof cls, "%09d.cls", next);
            ck_assert_str_eq(line, jpg);
            line = strtok(NULL, "\n");
            ck_assert_ptr_nonnull(line);
            ck_assert_str_eq(line, cls);
            char rel[64];
            snprintf(rel, sizeof rel, "x/%s", cls);
            char *label = (char *)td_test_slurp(tmp, rel, &n);
            char lw[8];
            snprintf(lw, sizeof lw, "%d", next * 3 % 7);
            ck_assert_str_eq(label, lw);
            free(label);
            snprintf(rel, sizeof rel, "x/%s", jpg);
            uint8_t *j = td_test_slurp(tmp, rel, &n), dec[H * W * C];
            int w, h, sub, cs;
            ck_assert_int_eq(tjDecompressHeader3(tj, j, (unsigned long)n, &w,
                                                 &h, &sub, &cs), 0);
            ck_assert_int_eq(w, W);
            ck_assert_int_eq(h, H);
            ck_assert_int_eq(sub, TJSAMP_420);
            ck_assert_int_eq(tjDecompress2(tj, j, (unsigned long)n, dec, W,
                                           0, H, TJPF_RGB, 0), 0);
            /* the pixels as TurboJPEG encodes them at quality 95, 4:2:0 */
            const uint8_t *src = px + (size_t)next * H * W * C;
            unsigned char *ref = NULL;
            unsigned long rn = 0;
            uint8_t want_px[H * W * C];
            ck_assert_int_eq(tjCompress2(enc, src, W, 0, H, TJPF_RGB, &ref,
                                         &rn, TJSAMP_420, 95, 0), 0);
            ck_assert_int_eq(tjDecompress2(tj, ref, rn, want_px, W, 0, H,
                                           TJPF_RGB, 0), 0);
            ck_assert(memcmp(dec, want_px, sizeof dec) == 0);
            tjFree(ref);
            double mad = 0; /* and close to the IDX pixels */
            for (int k = 0; k < H * W * C; k++)
                mad += abs(dec[k] - src[k]);
            ck_assert_double_lt(mad / (H * W * C), 10.0);
            free(j);
            next++;
        }
        free(names);
    }
    tjDestroy(tj);
    tjDestroy(enc);
    ck_assert_int_eq(next, N);
    ck_assert_uint_eq(r.bytes, bytes);
    free(px);
}
END_TEST

/* A cap below one sample: each sample gets a shard of its own. */
START_TEST(test_oversize_samples_one_per_shard)
{
    free(write_idx(5, 8, 8, 1));
    td_pack_options o;
    td_pack_options_default(&o);
    o.quality = 95; /* JPEG members (the default, 0, stores PNG) */
    o.shard_bytes = 100;
    td_pack_result r;
    char err[512] = "";
    ck_assert_msg(pack_idx(&o, &r, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(r.shards, 5);
    ck_assert_int_eq(r.channels, 1);
    for (int s = 0; s < 5; s++) {
        td_test_sh(tmp, "tar -tf out/shard-%06d.tar > t.txt", s);
        size_t n;
        char *t = (char *)td_test_slurp(tmp, "t.txt", &n), want[64];
        snprintf(want, sizeof want, "%09d.jpg\n%09d.cls\n", s, s);
        ck_assert_str_eq(t, want);
        free(t);
    }
}
END_TEST

struct prog {
    size_t calls, last, total;
    int monotone;
};

static void on_progress(void *user, size_t done, size_t total)
{
    struct prog *p = user;
    p->monotone &= done > p->last || p->calls == 0;
    p->calls++;
    p->last = done;
    p->total = total;
}

/* Progress: increasing counts, the last call at done == total. */
START_TEST(test_progress_reaches_total)
{
    free(write_idx(1030, 4, 4, 1));
    struct prog p = {0, 0, 0, 1};
    td_pack_options o;
    td_pack_options_default(&o);
    o.progress = on_progress;
    o.user = &p;
    td_pack_result r;
    char err[512] = "";
    ck_assert_msg(pack_idx(&o, &r, err, sizeof err) == 0, "%s", err);
    ck_assert(p.monotone);
    ck_assert_uint_eq(p.last, 1030);
    ck_assert_uint_eq(p.total, 1030);
    ck_assert_uint_ge(p.calls, 3); /* 512, 1024, 1030 */
    ck_assert_uint_le(p.calls, 1030 / 100);
}
END_TEST

/* An ImageFolder packed with a crop index: each sample starts with SOI
 * and an APP15 "TDIX" segment, decodes to exactly the source's pixels
 * (lossless), and carries its class; classes.txt lists the folders in
 * label order. */
START_TEST(test_folder_index_is_lossless)
{
    char root[4200], out[4200], err[512] = "";
    snprintf(root, sizeof root, "%s/tree", tmp);
    snprintf(out, sizeof out, "%s/out", tmp);
    td_test_make_folder(root, 3, 2, 64, 48);
    td_pack_options o;
    td_pack_options_default(&o);
    o.index = 2;
    o.threads = 2;
    td_pack_result r;
    ck_assert_msg(td_pack_folder(root, out, &o, &r, err, sizeof err) == 0,
                  "%s", err);
    ck_assert_uint_eq(r.samples, 6);
    ck_assert_uint_eq(r.rewritten, 6);
    ck_assert_int_eq(r.classes, 3);
    ck_assert_int_eq(r.width, 0); /* IDX only */
    size_t n;
    char *classes = (char *)td_test_slurp(tmp, "out/classes.txt", &n);
    ck_assert_str_eq(classes, "class0\nclass1\nclass2\n");
    free(classes);
    td_test_sh(tmp, "mkdir x && tar -xf out/shard-000000.tar -C x");
    tjhandle tj = tjInitDecompress();
    static uint8_t a[64 * 48 * 3], b[64 * 48 * 3];
    for (int i = 0; i < 6; i++) {
        char rel[64], src[64];
        snprintf(rel, sizeof rel, "x/%09d.jpg", i);
        snprintf(src, sizeof src, "tree/class%d/img%03d.jpg", i / 2, i % 2);
        uint8_t *j = td_test_slurp(tmp, rel, &n);
        size_t sn;
        uint8_t *s = td_test_slurp(tmp, src, &sn);
        ck_assert(j[0] == 0xff && j[1] == 0xd8 && j[2] == 0xff &&
                  j[3] == TD_JPEGIDX_MARKER && memcmp(j + 6, "TDIX", 4) == 0);
        ck_assert_int_eq(tjDecompress2(tj, j, (unsigned long)n, a, 64, 0, 48,
                                       TJPF_RGB, 0), 0);
        ck_assert_int_eq(tjDecompress2(tj, s, (unsigned long)sn, b, 64, 0,
                                       48, TJPF_RGB, 0), 0);
        ck_assert(memcmp(a, b, sizeof a) == 0);
        snprintf(rel, sizeof rel, "x/%09d.cls", i);
        char *cls = (char *)td_test_slurp(tmp, rel, &n), want[8];
        snprintf(want, sizeof want, "%d", i / 2);
        ck_assert_str_eq(cls, want);
        free(cls);
        free(j);
        free(s);
    }
    tjDestroy(tj);
}
END_TEST

/* Refusals name the file or folder and the problem. */
START_TEST(test_refusals)
{
    char err[512], im[4200], lb[4200], out[4200];
    td_pack_options o;
    td_pack_options_default(&o);
    td_pack_result r;
    snprintf(im, sizeof im, "%s/im.idx", tmp);
    snprintf(lb, sizeof lb, "%s/lb.idx", tmp);
    snprintf(out, sizeof out, "%s/out", tmp);
    /* images of 2 dimensions */
    uint32_t d2[2] = {3, 4};
    uint8_t z[12] = {0};
    td_test_write_idx(im, 0, 2, d2, z);
    td_test_write_idx(lb, 0, 1, d2, z);
    ck_assert_int_eq(td_pack_idx(im, lb, out, &o, &r, err, sizeof err),
                     TD_E_CORRUPT);
    ck_assert_ptr_nonnull(strstr(err, im));
    ck_assert_ptr_nonnull(strstr(err, "n x h x w"));
    /* labels of 2 dimensions */
    uint32_t d3[3] = {3, 2, 2};
    td_test_write_idx(im, 0, 3, d3, z);
    td_test_write_idx(lb, 0, 2, d2, z);
    ck_assert_int_eq(td_pack_idx(im, lb, out, &o, &r, err, sizeof err),
                     TD_E_CORRUPT);
    ck_assert_ptr_nonnull(strstr(err, "labels file has 2 dimensions"));
    /* an output path that is a file */
    td_test_write_idx(lb, 0, 1, d3, z);
    td_test_write_file(out, "x", 1);
    ck_assert_int_eq(td_pack_idx(im, lb, out, &o, &r, err, sizeof err),
                     -ENOTDIR);
    ck_assert_ptr_nonnull(strstr(err, out));
    /* quality out of range */
    o.quality = 101;
    ck_assert_int_eq(td_pack_idx(im, lb, out, &o, &r, err, sizeof err),
                     -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "101"));
    /* a folder of shards is not an ImageFolder tree */
    td_pack_options_default(&o);
    snprintf(out, sizeof out, "%s/shards", tmp);
    ck_assert_int_eq(td_pack_idx(im, lb, out, &o, &r, err, sizeof err), 0);
    char again[4200];
    snprintf(again, sizeof again, "%s/again", tmp);
    ck_assert_int_eq(td_pack_folder(out, again, &o, &r, err, sizeof err),
                     -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "holds tar shards already"));
    ck_assert_uint_eq(r.samples, 0);
}
END_TEST

static Suite *pack_suite(void)
{
    Suite *s = suite_create("pack");
    TCase *tc = tcase_create("pack");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_idx_rgb_shards_read_by_gnu_tar);
    tcase_add_test(tc, test_oversize_samples_one_per_shard);
    tcase_add_test(tc, test_progress_reaches_total);
    tcase_add_test(tc, test_folder_index_is_lossless);
    tcase_add_test(tc, test_refusals);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(pack_suite)
