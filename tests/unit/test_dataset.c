/* test_dataset.c - IDX reading, tar headers, packing shards and reading
 * datasets back (ImageFolder and tar shards, index cache), error paths. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <turbojpeg.h>
#include <unistd.h>

#include "base/tally.h"
#include "base/error.h"
#include "input/dataset.h"
#include "input/idx.h"
#include "input/pack.h"
#include "input/tar.h"
#include "support/jpeggen.h"
#include "tdtest.h"

static char *tmp;
static char path[4096], path2[4096];

static void setup(void) { tmp = td_test_tmpdir("dataset"); }
static void teardown(void)
{
    td_test_rmtree(tmp);
    free(tmp);
}

/* n 28x28 gray images (photo-like) and labels i % 10 as IDX files. */
static uint8_t *make_idx(int n, int gz)
{
    uint8_t *px = malloc((size_t)n * 784), *lb = malloc((size_t)n);
    for (int i = 0; i < n; i++) {
        td_test_photo(px + (size_t)i * 784, 28, 28, 1, (uint32_t)i);
        lb[i] = (uint8_t)(i % 10);
    }
    uint32_t d3[3] = {(uint32_t)n, 28, 28}, d1[1] = {(uint32_t)n};
    snprintf(path, sizeof path, "%s/img.idx%s", tmp, gz ? ".gz" : "");
    td_test_write_idx(path, gz, 3, d3, px);
    snprintf(path2, sizeof path2, "%s/lbl.idx%s", tmp, gz ? ".gz" : "");
    td_test_write_idx(path2, gz, 1, d1, lb);
    free(lb);
    return px;
}

/* td_dataset_read into one of four buffers kept for the test: a shard's
 * sample is a copy too, so two samples compared need two buffers. */
static int read_sample(const td_dataset *ds, size_t i, const uint8_t **d,
                       size_t *n)
{
    static td_buf ring[4];
    static unsigned next;
    return td_dataset_read(ds, i, &ring[next++ % 4], d, n);
}

START_TEST(test_idx_roundtrip_gz_and_plain)
{
    for (int gz = 0; gz < 2; gz++) {
        uint8_t *px = make_idx(7, gz);
        td_idx im;
        ck_assert_int_eq(td_idx_load(path, &im, NULL, 0), 0);
        ck_assert_int_eq(im.ndims, 3);
        ck_assert_uint_eq(im.dims[0], 7);
        ck_assert_uint_eq(im.dims[2], 28);
        ck_assert_uint_eq(im.bytes, 7 * 784);
        ck_assert_mem_eq(im.data, px, 7 * 784);
        td_idx_free(&im);
        free(px);
    }
}
END_TEST

START_TEST(test_idx_errors_name_the_file)
{
    char err[256];
    td_idx im;
    snprintf(path, sizeof path, "%s/missing.idx", tmp);
    ck_assert_int_eq(td_idx_load(path, &im, err, sizeof err), -ENOENT);
    ck_assert_ptr_nonnull(strstr(err, "missing.idx"));
    snprintf(path, sizeof path, "%s/bad.idx", tmp);
    td_test_write_file(path, "\x01\x02\x08\x01\0\0\0\1x", 9);
    ck_assert_int_eq(td_idx_load(path, &im, err, sizeof err), TD_E_CORRUPT);
    ck_assert_ptr_nonnull(strstr(err, "magic"));
    /* Dims promise 100 bytes, the file has 3. */
    td_test_write_file(path, "\0\0\x08\x01\0\0\0\x64xyz", 11);
    ck_assert_int_eq(td_idx_load(path, &im, err, sizeof err), TD_E_CORRUPT);
    ck_assert_ptr_nonnull(strstr(err, "shorter"));
    ck_assert_ptr_null(im.data);
}
END_TEST

START_TEST(test_idx_huge_dims_short_file_is_corrupt_not_oom)
{
    /* 65536 x 65536 x 256 bytes (1 TiB, the limit) promised, 3 given:
     * the file is short, and nothing near a terabyte may be allocated for
     * it first (that failed as "out of memory", or aborted under ASan) */
    char err[256];
    td_idx im;
    snprintf(path, sizeof path, "%s/huge.idx", tmp);
    td_test_write_file(path, "\0\0\x08\x03\0\x01\0\0\0\x01\0\0\0\0\x01\0xyz",
                       19);
    ck_assert_int_eq(td_idx_load(path, &im, err, sizeof err), TD_E_CORRUPT);
    ck_assert_ptr_nonnull(strstr(err, "shorter"));
    ck_assert_ptr_null(im.data);
}
END_TEST

static int collect(void *user, const char *name, uint64_t off, uint64_t size)
{
    char *names = user;
    strcat(names, name);
    strcat(names, "|");
    (void)off;
    (void)size;
    return 0;
}

START_TEST(test_tar_header_walk_and_checksum)
{
    uint8_t buf[6 * TD_TAR_BLOCK] = {0};
    char longn[200], names[1024] = "";
    memset(longn, 'a', sizeof longn);
    memcpy(longn + 120, "/", 1);
    longn[199] = '\0';
    ck_assert_int_eq(td_tar_header(buf, "x.cls", 1, 0), 0);
    buf[TD_TAR_BLOCK] = '7';
    ck_assert_int_eq(td_tar_header(buf + 2 * TD_TAR_BLOCK, longn, 0, 0), 0);
    ck_assert_int_eq(td_tar_walk(buf, sizeof buf, collect, names, NULL), 0);
    ck_assert_ptr_nonnull(strstr(names, "x.cls|"));
    ck_assert_ptr_nonnull(strstr(names, longn));
    uint64_t at = 99;
    buf[2 * TD_TAR_BLOCK + 3] ^= 1; /* breaks the second header's checksum */
    ck_assert_int_eq(td_tar_walk(buf, sizeof buf, collect, names, &at),
                     TD_E_CORRUPT);
    ck_assert_uint_eq(at, 2 * TD_TAR_BLOCK);
    memset(longn, 'b', sizeof longn); /* 199 chars, no '/' to split at */
    longn[199] = '\0';
    ck_assert_int_eq(td_tar_header(buf, longn, 0, 0), -ENAMETOOLONG);
}
END_TEST

/* Replaces the size field of the header at h with raw bytes and fixes the
 * checksum. */
static void set_size_field(uint8_t *h, const uint8_t field[12])
{
    memcpy(h + 124, field, 12);
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < TD_TAR_BLOCK; i++)
        sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
}

START_TEST(test_tar_base256_sizes_over_64_bits_refused)
{
    uint8_t buf[4 * TD_TAR_BLOCK] = {0};
    char names[1024] = "";
    uint64_t at = 99;
    ck_assert_int_eq(td_tar_header(buf, "x.cls", 1, 0), 0);
    buf[TD_TAR_BLOCK] = '7';
    /* base-256 1: a GNU tar large-file header for a small size is fine */
    static const uint8_t one[12] = {0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    set_size_field(buf, one);
    ck_assert_int_eq(td_tar_walk(buf, sizeof buf, collect, names, NULL), 0);
    ck_assert_str_eq(names, "x.cls|");
    /* 2^64 + 1 must not wrap to 1 */
    static const uint8_t big[12] = {0x80, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1};
    set_size_field(buf, big);
    names[0] = '\0';
    ck_assert_int_eq(td_tar_walk(buf, sizeof buf, collect, names, &at),
                     TD_E_CORRUPT);
    ck_assert_uint_eq(at, 0);
    ck_assert_str_eq(names, "");
    /* nor may a negative size (sign bit set) read as a positive one */
    static const uint8_t neg[12] = {0xc0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    set_size_field(buf, neg);
    ck_assert_int_eq(td_tar_walk(buf, sizeof buf, collect, names, &at),
                     TD_E_CORRUPT);
    ck_assert_str_eq(names, "");
}
END_TEST

/* Gives the header at h member type t and fixes its checksum. */
static void retype(uint8_t *h, char t)
{
    h[156] = (uint8_t)t;
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < TD_TAR_BLOCK; i++)
        sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
}

START_TEST(test_tar_pax_length_wrapping_ends)
{
    /* pax records "10 a=bcde\n" and one whose length, 2^64 - 10, takes
     * the walk from offset 10 back to 0: it looped forever */
    static const char pax[] = "10 a=bcde\n18446744073709551606 \n";
    uint8_t buf[6 * TD_TAR_BLOCK] = {0};
    char names[1024] = "";
    ck_assert_int_eq(td_tar_header(buf, "PaxHeader/x", sizeof pax - 1, 0), 0);
    retype(buf, 'x');
    memcpy(buf + TD_TAR_BLOCK, pax, sizeof pax - 1);
    ck_assert_int_eq(td_tar_header(buf + 2 * TD_TAR_BLOCK, "x.cls", 1, 0), 0);
    buf[3 * TD_TAR_BLOCK] = '1';
    ck_assert_int_eq(td_tar_walk(buf, sizeof buf, collect, names, NULL), 0);
    ck_assert_str_eq(names, "x.cls|");
}
END_TEST

START_TEST(test_tar_pax_length_shorter_than_its_digits)
{
    /* a pax header whose data "1 p" ends the image, right before a page
     * that cannot be read: the record length 1 (less than "1 " itself)
     * made the key/value length wrap and memcmp read 5 bytes from past
     * the end (a fault here; ASan: heap-buffer-overflow) */
    long pg = sysconf(_SC_PAGESIZE);
    uint8_t *map = mmap(NULL, (size_t)pg * 2, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(map, MAP_FAILED);
    ck_assert_int_eq(mprotect(map + pg, (size_t)pg, PROT_NONE), 0);
    uint8_t *buf = map + pg - (TD_TAR_BLOCK + 3);
    ck_assert_int_eq(td_tar_header(buf, "PaxHeader/x", 3, 0), 0);
    retype(buf, 'x');
    memcpy(buf + TD_TAR_BLOCK, "1 p", 3);
    char names[64] = "";
    ck_assert_int_eq(td_tar_walk(buf, TD_TAR_BLOCK + 3, collect, names, NULL),
                     TD_E_CORRUPT); /* truncated: no end blocks */
    ck_assert_str_eq(names, "");
    munmap(map, (size_t)pg * 2);
}
END_TEST

START_TEST(test_pack_idx_shards_read_back)
{
    uint8_t *px = make_idx(60, 1);
    char out[4096], err[256] = "";
    snprintf(out, sizeof out, "%s/out", tmp);
    td_pack_options opt;
    td_pack_options_default(&opt);
    opt.quality = 95; /* the JPEG path (the default, PNG: test_png) */
    opt.shard_bytes = 20 * 1024; /* forces several shards */
    td_pack_result r;
    ck_assert_int_eq(td_pack_idx(path, path2, out, &opt, &r, err, sizeof err),
                     0);
    ck_assert_uint_eq(r.samples, 60);
    ck_assert_int_gt(r.shards, 2);
    ck_assert_int_eq(r.classes, 10);
    td_dataset *ds;
    td_tally t = {0}; /* what a submit shows while it lists */
    td_tally_stage(&t, "listing data.train", "samples", 0);
    ck_assert_int_eq(td_dataset_open_tally(out, &t, &ds, err, sizeof err), 0);
    ck_assert_int_eq(td_dataset_kind(ds), TD_DATASET_SHARDS);
    ck_assert_uint_eq(td_dataset_count(ds), 60);
    ck_assert_uint_eq(td_tally_read(&t).done, 60);
    ck_assert_str_eq(td_tally_read(&t).stage, "listing data.train");
    ck_assert_int_eq(td_dataset_classes(ds), 10);
    tjhandle tj = tjInitDecompress();
    uint8_t dec[784];
    for (size_t i = 0; i < 60; i++) {
        const uint8_t *d;
        size_t n;
        ck_assert_int_eq(td_dataset_label(ds, i), (int)(i % 10));
        ck_assert_int_eq(read_sample(ds, i, &d, &n), 0);
        ck_assert_int_eq(tjDecompress2(tj, d, n, dec, 28, 0, 28, TJPF_GRAY,
                                       0), 0);
        int maxd = 0; /* quality 95: every pixel within a few levels */
        for (int k = 0; k < 784; k++) {
            int dd = abs(dec[k] - px[i * 784 + (size_t)k]);
            maxd = dd > maxd ? dd : maxd;
        }
        ck_assert_int_le(maxd, 24);
    }
    tjDestroy(tj);
    td_dataset_close(ds);
    free(px);
}
END_TEST

START_TEST(test_pack_refuses_mismatch_and_existing)
{
    char out[4096], err[256] = "";
    td_pack_options opt;
    td_pack_options_default(&opt);
    td_pack_result r;
    free(make_idx(5, 0));
    uint32_t d1[1] = {4};
    uint8_t lb[4] = {0};
    td_test_write_idx(path2, 0, 1, d1, lb);
    snprintf(out, sizeof out, "%s/o1", tmp);
    ck_assert_int_eq(td_pack_idx(path, path2, out, &opt, &r, err, sizeof err),
                     TD_E_CORRUPT);
    ck_assert_ptr_nonnull(strstr(err, "5 images"));
    ck_assert_ptr_nonnull(strstr(err, "4 labels"));
    free(make_idx(5, 0));
    ck_assert_int_eq(td_pack_idx(path, path2, out, &opt, &r, err, sizeof err),
                     0);
    ck_assert_int_eq(td_pack_idx(path, path2, out, &opt, &r, err, sizeof err),
                     -EEXIST);
    ck_assert_ptr_nonnull(strstr(err, "already holds"));
    opt.quality = 101; /* 0 is lossless PNG, 1..100 JPEG */
    ck_assert_int_eq(td_pack_idx(path, path2, out, &opt, &r, err, sizeof err),
                     -EINVAL);
}
END_TEST

START_TEST(test_folder_classes_sorted)
{
    char err[256];
    td_dataset *ds;
    snprintf(path, sizeof path, "%s/tree", tmp);
    td_test_make_folder(path, 3, 4, 40, 30);
    /* A file that is not a JPEG by name is ignored; a dot dir too. */
    snprintf(path2, sizeof path2, "%s/tree/class1/notes.txt", tmp);
    td_test_write_file(path2, "x", 1);
    td_tally t = {0};
    ck_assert_int_eq(td_dataset_open_tally(path, &t, &ds, err, sizeof err), 0);
    ck_assert_int_eq(td_dataset_kind(ds), TD_DATASET_FOLDER);
    ck_assert_uint_eq(td_dataset_count(ds), 12);
    ck_assert_uint_eq(td_tally_read(&t).done, 12); /* samples, not notes */
    ck_assert_int_eq(td_dataset_classes(ds), 3);
    ck_assert_str_eq(td_dataset_class_name(ds, 2), "class2");
    ck_assert_int_eq(td_dataset_label(ds, 5), 1);
    char name[512];
    td_dataset_sample_name(ds, 5, name, sizeof name);
    ck_assert_ptr_nonnull(strstr(name, "class1/img001.jpg"));
    td_buf b = {0};
    const uint8_t *d;
    size_t n;
    ck_assert_int_eq(td_dataset_read(ds, 5, &b, &d, &n), 0);
    ck_assert_int_gt((int)n, 100);
    ck_assert_int_eq(d[0], 0xff);
    ck_assert_int_eq(d[1], 0xd8);
    ck_assert_int_eq(td_dataset_read(ds, 12, &b, &d, &n), -ERANGE);
    td_buf_free(&b);
    td_dataset_close(ds);
}
END_TEST

START_TEST(test_open_errors_are_clear)
{
    char err[512];
    td_dataset *ds = NULL;
    snprintf(path, sizeof path, "%s/nothing", tmp);
    ck_assert_int_eq(td_dataset_open(path, &ds, err, sizeof err), -ENOENT);
    ck_assert_ptr_nonnull(strstr(err, "nothing"));
    snprintf(path, sizeof path, "%s/tree", tmp);
    td_test_make_folder(path, 2, 1, 16, 16);
    snprintf(path2, sizeof path2, "%s/tree/empty", tmp);
    ck_assert_int_eq(mkdir(path2, 0755), 0);
    ck_assert_int_eq(td_dataset_open(path, &ds, err, sizeof err), -ENODATA);
    ck_assert_ptr_nonnull(strstr(err, "tree/empty"));
    ck_assert_ptr_nonnull(strstr(err, "empty class"));
    snprintf(path, sizeof path, "%s/no-*.tar", tmp);
    ck_assert_int_eq(td_dataset_open(path, &ds, err, sizeof err), -ENOENT);
    snprintf(path, sizeof path, "%s/junk.tar", tmp);
    td_test_write_file(path, "this is not a tar file at all", 29);
    ck_assert_int_eq(td_dataset_open(path, &ds, err, sizeof err),
                     TD_E_CORRUPT);
    ck_assert_ptr_nonnull(strstr(err, "junk.tar"));
    ck_assert_ptr_null(ds);
}
END_TEST

/* Writes a tar of members (name, content) pairs. */
static void write_tar(const char *p, const char *const *m, int n)
{
    FILE *f = fopen(p, "wb");
    uint8_t hdr[TD_TAR_BLOCK], pad[TD_TAR_BLOCK] = {0};
    for (int i = 0; i < n; i++) {
        size_t len = strlen(m[2 * i + 1]);
        td_tar_header(hdr, m[2 * i], len, 0);
        fwrite(hdr, 1, sizeof hdr, f);
        fwrite(m[2 * i + 1], 1, len, f);
        fwrite(pad, 1, (TD_TAR_BLOCK - len % TD_TAR_BLOCK) % TD_TAR_BLOCK, f);
    }
    fwrite(pad, 1, sizeof pad, f);
    fwrite(pad, 1, sizeof pad, f);
    fclose(f);
}

START_TEST(test_shard_sample_without_label)
{
    char err[512];
    td_dataset *ds = NULL;
    const char *m[] = {"a.jpg", "xx", "a.cls", "3", "b.jpg", "yy",
                       "c.jpg", "zz", "c.cls", "1"};
    snprintf(path, sizeof path, "%s/s.tar", tmp);
    write_tar(path, m, 5);
    ck_assert_int_eq(td_dataset_open(path, &ds, err, sizeof err),
                     TD_E_CORRUPT);
    ck_assert_ptr_nonnull(strstr(err, "'b'"));
    ck_assert_ptr_nonnull(strstr(err, "no .cls"));
    const char *m2[] = {"a.jpg", "xx", "a.cls", "three"};
    write_tar(path, m2, 2);
    ck_assert_int_eq(td_dataset_open(path, &ds, err, sizeof err),
                     TD_E_CORRUPT);
    ck_assert_ptr_nonnull(strstr(err, "a.cls"));
}
END_TEST

START_TEST(test_shard_glob_order_and_index_cache)
{
    char err[512];
    const char *m1[] = {"d/k1.jpg", "one", "d/k1.cls", "4", "d/k1.json", "{}"};
    const char *m2[] = {"k2.jpeg", "two", "k2.cls", " 7\n"};
    snprintf(path, sizeof path, "%s/p-1.tar", tmp);
    write_tar(path, m2, 2);
    snprintf(path, sizeof path, "%s/p-0.tar", tmp);
    write_tar(path, m1, 3);
    for (int pass = 0; pass < 3; pass++) {
        td_dataset *ds;
        if (pass == 2) { /* a stale cache (shard changed) is not used */
            const char *m3[] = {"k1.jpg", "uno", "k1.cls", "5", "k1.txt",
                                "{}"}; /* same size: only mtime differs */
            write_tar(path, m3, 3);
            struct timespec ts[2] = {{0, UTIME_NOW}, {12345, 0}};
            utimensat(AT_FDCWD, path, ts, 0);
        }
        snprintf(path2, sizeof path2, "%s/p-*.tar", tmp);
        ck_assert_int_eq(td_dataset_open(path2, &ds, err, sizeof err), 0);
        ck_assert_uint_eq(td_dataset_count(ds), 2);
        const uint8_t *d;
        size_t n;
        read_sample(ds, 0, &d, &n);
        ck_assert_uint_eq(n, 3);
        ck_assert_mem_eq(d, pass == 2 ? "uno" : "one", 3);
        ck_assert_int_eq(td_dataset_label(ds, 0), pass == 2 ? 5 : 4);
        ck_assert_int_eq(td_dataset_label(ds, 1), 7);
        read_sample(ds, 1, &d, &n);
        ck_assert_mem_eq(d, "two", 3);
        char name[512];
        td_dataset_sample_name(ds, 1, name, sizeof name);
        ck_assert_ptr_nonnull(strstr(name, "p-1.tar:k2.jpeg"));
        td_dataset_close(ds);
        struct stat st;
        snprintf(path2, sizeof path2, "%s/p-0.tar.tdidx", tmp);
        ck_assert_int_eq(stat(path2, &st), 0); /* cache written */
    }
}
END_TEST

/* Overwrites the first entry of shard's .tdidx cache (after its 40-byte
 * head: u64 data offset, u32 length, i32 label), leaving the shard as it
 * is, so the cache still matches its size and mtime. */
static void patch_cache_entry(const char *shard, uint64_t off, uint32_t len,
                              int32_t label)
{
    char p[4200];
    snprintf(p, sizeof p, "%s.tdidx", shard);
    int fd = open(p, O_WRONLY);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(pwrite(fd, &off, 8, 40), 8);
    ck_assert_int_eq(pwrite(fd, &len, 4, 48), 4);
    ck_assert_int_eq(pwrite(fd, &label, 4, 52), 4);
    close(fd);
}

/* Opens path and checks it holds the one sample "xx" labelled 3. */
static void check_one_sample(const char *shard)
{
    char err[512], name[512];
    td_dataset *ds;
    const uint8_t *d;
    size_t n;
    ck_assert_int_eq(td_dataset_open(shard, &ds, err, sizeof err), 0);
    ck_assert_uint_eq(td_dataset_count(ds), 1);
    ck_assert_int_eq(read_sample(ds, 0, &d, &n), 0);
    ck_assert_uint_eq(n, 2);
    ck_assert_mem_eq(d, "xx", 2);
    ck_assert_int_eq(td_dataset_label(ds, 0), 3);
    ck_assert_int_eq(td_dataset_classes(ds), 4);
    td_dataset_sample_name(ds, 0, name, sizeof name);
    ck_assert_ptr_nonnull(strstr(name, "s.tar:a.jpg"));
    td_dataset_close(ds);
}

START_TEST(test_shard_cache_entry_outside_the_data_ignored)
{
    const char *m[] = {"a.jpg", "xx", "a.cls", "3"};
    snprintf(path, sizeof path, "%s/s.tar", tmp);
    write_tar(path, m, 2);
    check_one_sample(path); /* writes the cache */
    /* offset + length wrapping past 2^64 to "inside the shard" */
    patch_cache_entry(path, UINT64_MAX - 100, 200, 3);
    check_one_sample(path);
    /* data at offset 0, where the first header is (the name is read
     * from the 512 bytes before the data) */
    patch_cache_entry(path, 0, 2, 3);
    check_one_sample(path);
    /* not on a block boundary */
    patch_cache_entry(path, 513, 1, 3);
    check_one_sample(path);
}
END_TEST

START_TEST(test_shard_cache_label_int32_max_ignored)
{
    /* the walk refuses labels >= INT32_MAX (the class count is 1 + the
     * largest label, an int); a cache may not bring one in */
    const char *m[] = {"a.jpg", "xx", "a.cls", "3"};
    snprintf(path, sizeof path, "%s/s.tar", tmp);
    write_tar(path, m, 2);
    check_one_sample(path);
    patch_cache_entry(path, TD_TAR_BLOCK, 2, INT32_MAX);
    check_one_sample(path);
}
END_TEST

START_TEST(test_pack_folder_copies_bytes)
{
    char out[4096], err[512] = "";
    snprintf(path, sizeof path, "%s/tree", tmp);
    td_test_make_folder(path, 2, 3, 24, 20);
    snprintf(out, sizeof out, "%s/shards", tmp);
    td_pack_options opt;
    td_pack_options_default(&opt);
    td_pack_result r;
    ck_assert_int_eq(td_pack_folder(path, out, &opt, &r, err, sizeof err), 0);
    ck_assert_uint_eq(r.samples, 6);
    ck_assert_int_eq(r.shards, 1);
    td_dataset *a, *b;
    ck_assert_int_eq(td_dataset_open(path, &a, err, sizeof err), 0);
    ck_assert_int_eq(td_dataset_open(out, &b, err, sizeof err), 0);
    td_buf buf = {0};
    for (size_t i = 0; i < 6; i++) {
        const uint8_t *da, *db;
        size_t na, nb;
        td_dataset_read(a, i, &buf, &da, &na);
        read_sample(b, i, &db, &nb);
        ck_assert_uint_eq(na, nb);
        ck_assert_mem_eq(da, db, na);
        ck_assert_int_eq(td_dataset_label(a, i), td_dataset_label(b, i));
    }
    td_buf_free(&buf);
    td_dataset_close(a);
    td_dataset_close(b);
}
END_TEST

/* path = tmp/tree: `classes` folders of `per` w x h JPEGs, and
 * class1/zz.jpg, 10 bytes that are not a JPEG. */
static void tree_with_bad_file(int classes, int per, int w, int h)
{
    char bad[4200];
    snprintf(path, sizeof path, "%s/tree", tmp);
    td_test_make_folder(path, classes, per, w, h);
    snprintf(bad, sizeof bad, "%s/tree/class1/zz.jpg", tmp);
    td_test_write_file(bad, "not a jpeg", 10);
}

/* --restart: every JPEG rewritten with restart markers and the same
 * pixels; a file that is not a JPEG is copied as it is (it stays a bad
 * sample for the pipeline to report). */
START_TEST(test_pack_folder_restart_markers)
{
    char out[4096], err[512] = "";
    tree_with_bad_file(2, 3, 100, 60);
    snprintf(out, sizeof out, "%s/shards", tmp);
    td_pack_options opt;
    td_pack_options_default(&opt);
    opt.restart = 4;
    td_pack_result r;
    ck_assert_int_eq(td_pack_folder(path, out, &opt, &r, err, sizeof err), 0);
    ck_assert_uint_eq(r.samples, 7);
    ck_assert_uint_eq(r.rewritten, 6);
    td_dataset *a, *b;
    ck_assert_int_eq(td_dataset_open(path, &a, err, sizeof err), 0);
    ck_assert_int_eq(td_dataset_open(out, &b, err, sizeof err), 0);
    td_buf buf = {0};
    tjhandle tj = tjInitDecompress();
    uint8_t pa[100 * 60 * 3], pb[100 * 60 * 3];
    for (size_t i = 0; i < 7; i++) {
        const uint8_t *da, *db;
        size_t na, nb;
        td_dataset_read(a, i, &buf, &da, &na);
        read_sample(b, i, &db, &nb);
        ck_assert_int_eq(td_dataset_label(a, i), td_dataset_label(b, i));
        if (na == 10) { /* the bad file */
            ck_assert_uint_eq(nb, 10);
            ck_assert_mem_eq(da, db, 10);
            continue;
        }
        /* A DRI marker (FF DD 00 04 00 R) with R = 4 MCUs of 16 px
         * (100 px = 7 MCUs: 7 is prime, so R = 1). */
        ck_assert_ptr_nonnull(memmem(db, nb, "\xff\xdd\x00\x04\x00\x01", 6));
        ck_assert_ptr_null(memmem(da, na, "\xff\xdd", 2));
        ck_assert_int_eq(tjDecompress2(tj, da, na, pa, 100, 0, 60, TJPF_RGB,
                                       0), 0);
        ck_assert_int_eq(tjDecompress2(tj, db, nb, pb, 100, 0, 60, TJPF_RGB,
                                       0), 0);
        ck_assert_mem_eq(pa, pb, sizeof pa);
    }
    tjDestroy(tj);
    td_buf_free(&buf);
    td_dataset_close(a);
    td_dataset_close(b);
}
END_TEST

/* Rewriting on several threads gives exactly the samples (bytes, labels,
 * order) one thread gives, a bad file (copied as it is) included. */
START_TEST(test_pack_folder_threads_same_shards)
{
    char out[4200], err[512] = "";
    tree_with_bad_file(3, 20, 90, 70);
    td_dataset *ds[3];
    static const int threads[3] = {1, 2, 5};
    for (int k = 0; k < 3; k++) {
        td_pack_options opt;
        td_pack_options_default(&opt);
        opt.index = 2;
        opt.threads = threads[k];
        td_pack_result r;
        snprintf(out, sizeof out, "%s/shards%d", tmp, k);
        ck_assert_int_eq(td_pack_folder(path, out, &opt, &r, err, sizeof err),
                         0);
        ck_assert_uint_eq(r.samples, 61);
        ck_assert_uint_eq(r.rewritten, 60);
        ck_assert_int_eq(td_dataset_open(out, &ds[k], err, sizeof err), 0);
    }
    for (size_t i = 0; i < 61; i++) {
        const uint8_t *d0, *d;
        size_t n0, n;
        ck_assert_int_eq(read_sample(ds[0], i, &d0, &n0), 0);
        for (int k = 1; k < 3; k++) {
            ck_assert_int_eq(read_sample(ds[k], i, &d, &n), 0);
            ck_assert_uint_eq(n, n0);
            ck_assert_mem_eq(d, d0, n);
            ck_assert_int_eq(td_dataset_label(ds[k], i),
                             td_dataset_label(ds[0], i));
        }
    }
    for (int k = 0; k < 3; k++)
        td_dataset_close(ds[k]);
}
END_TEST

/* Cut short within a page: samples past the new end but in its page read
 * as zeros (no fault), so the pipeline asks td_dataset_shrunk when one
 * fails to decode, to name the cut instead of "not a JPEG".  A job's
 * reason said "not a JPEG (no SOI marker)" or "cut short" depending on
 * which samples it read first (test_failures' shard test, now and then). */
START_TEST(test_shard_cut_short_within_a_page)
{
    char err[512];
    const char *m[] = {"a.jpg", "\xff\xd8 first", "a.cls", "0",
                       "b.jpg", "\xff\xd8 second", "b.cls", "1"};
    snprintf(path, sizeof path, "%s/p.tar", tmp);
    write_tar(path, m, 4);
    td_dataset *ds;
    ck_assert_int_eq(td_dataset_open(path, &ds, err, sizeof err), 0);
    ck_assert_uint_eq(td_dataset_count(ds), 2);
    ck_assert_int_eq(td_dataset_shrunk(ds, 0), 0);
    ck_assert_int_eq(td_dataset_shrunk(ds, 1), 0);
    /* a.jpg's header and data are blocks 0-1, b.jpg's 4-5 (after
     * a.cls): cut after a.jpg's data, in the same 4 KiB page */
    ck_assert_int_eq(truncate(path, 1024), 0);
    const uint8_t *d;
    size_t n;
    ck_assert_int_eq(read_sample(ds, 1, &d, &n), 0); /* zeros, no fault */
    ck_assert_int_eq(d[0], 0);
    ck_assert_int_eq(td_dataset_shrunk(ds, 0), 0);
    ck_assert_int_eq(td_dataset_shrunk(ds, 1), 1);
    ck_assert_int_eq(td_dataset_shrunk(ds, 2), 0); /* out of range */
    td_dataset_close(ds);
}
END_TEST

/* A shard cut short in place while it is open (cp over it, a rewrite):
 * its map faults past the new end (SIGBUS).  Those samples are
 * TD_E_SHRUNK and named by their byte offset; a sample still inside reads
 * as before; a SIGBUS outside td_dataset_read still kills the process. */
START_TEST(test_shard_cut_short_while_open)
{
    char err[512], name[512];
    static char big[3][8192];
    for (int i = 0; i < 3; i++)
        memset(big[i], 'a' + i, sizeof big[i] - 1);
    const char *m[] = {"a.jpg", big[0], "a.cls", "0", "b.jpg", big[1],
                       "b.cls", "1", "c.jpg", big[2], "c.cls", "1"};
    snprintf(path, sizeof path, "%s/s.tar", tmp);
    write_tar(path, m, 6);
    td_dataset *ds;
    ck_assert_int_eq(td_dataset_open(path, &ds, err, sizeof err), 0);
    ck_assert_uint_eq(td_dataset_count(ds), 3);
    const uint8_t *d;
    size_t n;
    ck_assert_int_eq(read_sample(ds, 2, &d, &n), 0);
    ck_assert_uint_eq(n, 8191);
    ck_assert_int_eq(d[8190], 'c');
    /* a small member first, then cut inside b's data */
    ck_assert_int_eq(truncate(path, 4096 * 4), 0);
    ck_assert_int_eq(read_sample(ds, 0, &d, &n), 0);
    ck_assert_int_eq(d[0], 'a');
    ck_assert_int_eq(read_sample(ds, 1, &d, &n), TD_E_SHRUNK);
    ck_assert_int_eq(read_sample(ds, 2, &d, &n), TD_E_SHRUNK);
    ck_assert_ptr_nonnull(strstr(td_strerror(TD_E_SHRUNK), "cut short"));
    td_dataset_sample_name(ds, 1, name, sizeof name);
    ck_assert_msg(strstr(name, "s.tar:b.jpg"), "%s", name); /* before cut */
    td_dataset_sample_name(ds, 2, name, sizeof name);
    ck_assert_msg(strstr(name, "s.tar:member at byte 19456"), "%s", name);
    /* the handler catches the copy's faults only */
    int fd = open(path, O_RDONLY);
    ck_assert_int_ge(fd, 0);
    const volatile uint8_t *map = mmap(NULL, 8192 * 3, PROT_READ, MAP_SHARED,
                                       fd, 0);
    ck_assert(map != MAP_FAILED);
    close(fd);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        uint8_t x = map[4096 * 5]; /* past the end */
        (void)x;
        _exit(100); /* survived: wrong */
    }
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    /* SIGABRT (ASan) or exit status 66 (TSan): a sanitizer's handler,
     * there before ours, reported the signal */
    ck_assert_msg((WIFSIGNALED(st) && (WTERMSIG(st) == SIGBUS ||
                                       WTERMSIG(st) == SIGABRT)) ||
                      (WIFEXITED(st) && WEXITSTATUS(st) == 66),
                  "status %d", st);
    munmap((void *)map, 8192 * 3);
    td_dataset_close(ds);
}
END_TEST

/* A user's own data must not make the daemon hang or allocate without
 * bound: a sample file swapped for a FIFO after the scan blocked a decode
 * worker in open() forever (the job could not end and held the device),
 * and a sparse "jpg" of many GB was read whole into memory.  Both are bad
 * samples now, at once and without the allocation. */
START_TEST(test_sample_fifo_and_huge_file_are_bad_samples)
{
    char err[512], p[4200];
    td_dataset *ds = NULL;
    const uint8_t *d;
    size_t n;
    snprintf(path, sizeof path, "%s/ds", tmp);
    td_test_make_folder(path, 2, 2, 8, 8);
    ck_assert_int_eq(td_dataset_open(path, &ds, err, sizeof err), 0);
    alarm(10); /* a blocked open ends the test */
    td_dataset_file(ds, 0, p, sizeof p);
    ck_assert_int_eq(unlink(p), 0);
    ck_assert_int_eq(mkfifo(p, 0644), 0);
    ck_assert_int_eq(read_sample(ds, 0, &d, &n), TD_E_NOTREG);
    td_dataset_file(ds, 1, p, sizeof p);
    ck_assert_int_eq(truncate(p, (off_t)TD_DATASET_SAMPLE_MAX + 1), 0);
    ck_assert_int_eq(read_sample(ds, 1, &d, &n), -EFBIG);
    ck_assert_int_eq(read_sample(ds, 2, &d, &n), 0); /* the others read */
    td_dataset_close(ds);
    /* A shard member declaring as much (the shard sparse). */
    snprintf(path, sizeof path, "%s/big.tar", tmp);
    FILE *f = fopen(path, "wb");
    uint8_t hdr[TD_TAR_BLOCK], pad[TD_TAR_BLOCK] = {0};
    size_t big = (size_t)TD_DATASET_SAMPLE_MAX + 1;
    td_tar_header(hdr, "a.jpg", big, 0);
    fwrite(hdr, 1, sizeof hdr, f);
    fseek(f, (long)((big + TD_TAR_BLOCK - 1) / TD_TAR_BLOCK * TD_TAR_BLOCK),
          SEEK_CUR);
    td_tar_header(hdr, "a.cls", 1, 0);
    fwrite(hdr, 1, sizeof hdr, f);
    pad[0] = '1';
    fwrite(pad, 1, sizeof pad, f);
    pad[0] = 0;
    fwrite(pad, 1, sizeof pad, f);
    fwrite(pad, 1, sizeof pad, f);
    fclose(f);
    ck_assert_int_eq(td_dataset_open(path, &ds, err, sizeof err), 0);
    ck_assert_int_eq(read_sample(ds, 0, &d, &n), -EFBIG);
    td_dataset_close(ds);
    alarm(0);
}
END_TEST

static Suite *dataset_suite(void)
{
    Suite *s = suite_create("dataset");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_idx_roundtrip_gz_and_plain);
    tcase_add_test(tc, test_idx_errors_name_the_file);
    tcase_add_test(tc, test_idx_huge_dims_short_file_is_corrupt_not_oom);
    tcase_add_test(tc, test_tar_header_walk_and_checksum);
    tcase_add_test(tc, test_tar_base256_sizes_over_64_bits_refused);
    tcase_add_test(tc, test_pack_idx_shards_read_back);
    tcase_add_test(tc, test_pack_refuses_mismatch_and_existing);
    tcase_add_test(tc, test_folder_classes_sorted);
    tcase_add_test(tc, test_open_errors_are_clear);
    tcase_add_test(tc, test_shard_sample_without_label);
    tcase_add_test(tc, test_shard_glob_order_and_index_cache);
    tcase_add_test(tc, test_shard_cache_entry_outside_the_data_ignored);
    tcase_add_test(tc, test_shard_cache_label_int32_max_ignored);
    tcase_add_test(tc, test_shard_cut_short_while_open);
    tcase_add_test(tc, test_shard_cut_short_within_a_page);
    tcase_add_test(tc, test_pack_folder_copies_bytes);
    tcase_add_test(tc, test_pack_folder_restart_markers);
    tcase_add_test(tc, test_pack_folder_threads_same_shards);
    tcase_add_test(tc, test_sample_fifo_and_huge_file_are_bad_samples);
    suite_add_tcase(s, tc);
    /* header walks over hostile bytes: a loop that never ends fails fast */
    tc = tcase_create("tar");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_tar_pax_length_wrapping_ends);
    tcase_add_test(tc, test_tar_pax_length_shorter_than_its_digits);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(dataset_suite)
