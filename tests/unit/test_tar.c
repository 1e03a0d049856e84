/* test_tar.c - the ustar layer (tar.c) against GNU tar, the independent
 * reference: the headers td_tar_header writes are GNU tar's own (byte for
 * byte but for the device numbers GNU tar fills in), GNU tar extracts the
 * archives they make, and td_tar_walk finds the names, offsets and sizes
 * of archives GNU tar wrote in its ustar, gnu (long names in 'L' records)
 * and pax (long names in 'x' records) formats, directories and links
 * stepped over.  Needs `tar` on the PATH (GNU tar). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/error.h"
#include "input/tar.h"
#include "support/jpeggen.h"
#include "tdtest.h"

static char *tmp;

static void setup(void) { tmp = td_test_tmpdir("tar"); }

static void teardown(void)
{
    td_test_rmtree(tmp);
    free(tmp);
}

/* A file of `size` bytes (a pattern of the size) at tmp/name, its folders
 * made; returns its bytes. */
static uint8_t *make_file(const char *name, size_t size)
{
    char path[4200];
    uint8_t *p = malloc(size + 1);
    for (size_t i = 0; i < size; i++)
        p[i] = (uint8_t)(i * 7 + size);
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    for (char *s = strchr(path + strlen(tmp) + 1, '/'); s;
         s = strchr(s + 1, '/')) {
        *s = '\0';
        mkdir(path, 0755);
        *s = '/';
    }
    td_test_write_file(path, p, size);
    return p;
}

/* The header checksum as POSIX defines it: the sum of the header's bytes
 * with the checksum field taken as eight spaces, stored as octal. */
static int checksum_ok(const uint8_t *h)
{
    unsigned sum = 0;
    for (int i = 0; i < 512; i++)
        sum += i >= 148 && i < 156 ? ' ' : h[i];
    return strtoul((const char *)h + 148, NULL, 8) == sum;
}

/* A name of 142 bytes with two slashes, both legal ustar split points
 * (the prefix takes the longest part that fits, as GNU tar splits). */
static void two_slash_name(char *out)
{
    memset(out, 'A', 60);
    out[60] = '/';
    memset(out + 61, 'B', 50);
    out[111] = '/';
    memset(out + 112, 'C', 30);
    out[142] = '\0';
}

START_TEST(test_header_is_gnu_tars)
{
    char split[200];
    two_slash_name(split);
    const char *names[] = {"a.txt", "k/000000042.jpg", split};
    const size_t sizes[] = {0, 5, 512, 1000};
    const int64_t mtime = 1700000000;
    for (size_t n = 0; n < 3; n++)
        for (size_t s = 0; s < 4; s++) {
            free(make_file(names[n], sizes[s]));
            td_test_sh(tmp, "tar --format=ustar --owner=0 --group=0 --numeric-owner "
                "--mode=0644 --mtime=@%lld -cf gnu.tar '%s'",
                (long long)mtime, names[n]);
            size_t len;
            uint8_t *gnu = td_test_slurp(tmp, "gnu.tar", &len), ours[TD_TAR_BLOCK];
            ck_assert_uint_ge(len, 3 * TD_TAR_BLOCK);
            ck_assert_int_eq(td_tar_header(ours, names[n], sizes[s], mtime),
                             0);
            ck_assert(checksum_ok(gnu));
            ck_assert(checksum_ok(ours));
            /* everything but the checksum and devmajor/devminor (GNU tar
             * writes "0000000"; ours are empty, as for files POSIX
             * allows) */
            for (int i = 0; i < TD_TAR_BLOCK; i++)
                if (!(i >= 148 && i < 156) && !(i >= 329 && i < 345))
                    ck_assert_msg(gnu[i] == ours[i],
                                  "%s, %zu bytes: byte %d is %#x, GNU "
                                  "tar's %#x", names[n], sizes[s], i,
                                  ours[i], gnu[i]);
            free(gnu);
        }
}
END_TEST

/* An archive made of our headers (data padded, two zero blocks) is one
 * GNU tar lists and extracts, names, sizes and bytes intact. */
START_TEST(test_gnu_tar_extracts_ours)
{
    char split[200];
    two_slash_name(split);
    const char *names[] = {"000000000.jpg", "000000000.cls", "empty", split};
    const size_t sizes[] = {700, 1, 0, 512};
    char path[4200];
    snprintf(path, sizeof path, "%s/ours.tar", tmp);
    FILE *f = fopen(path, "wb");
    uint8_t *data[4], hdr[TD_TAR_BLOCK], zero[2 * TD_TAR_BLOCK] = {0};
    uint64_t total = 0;
    for (int k = 0; k < 4; k++) {
        data[k] = malloc(sizes[k] + 1);
        for (size_t i = 0; i < sizes[k]; i++)
            data[k][i] = (uint8_t)(i * 13 + (size_t)k);
        ck_assert_int_eq(td_tar_header(hdr, names[k], sizes[k], 1600000000),
                         0);
        fwrite(hdr, 1, sizeof hdr, f);
        fwrite(data[k], 1, sizes[k], f);
        fwrite(zero, 1, (TD_TAR_BLOCK - sizes[k] % TD_TAR_BLOCK) %
                            TD_TAR_BLOCK, f);
        total += td_tar_member_bytes(sizes[k]);
    }
    fwrite(zero, 1, sizeof zero, f);
    fclose(f);
    ck_assert_uint_eq(total, (512 + 1024) + (512 + 512) + 512 + (512 + 512));
    td_test_sh(tmp, "mkdir x && tar -xf ours.tar -C x && tar -tf ours.tar > list.txt");
    size_t len;
    char *list = (char *)td_test_slurp(tmp, "list.txt", &len);
    list[len] = '\0';
    char want[1024];
    snprintf(want, sizeof want, "%s\n%s\n%s\n%s\n", names[0], names[1],
             names[2], names[3]);
    ck_assert_str_eq(list, want);
    free(list);
    for (int k = 0; k < 4; k++) {
        char x[4200];
        snprintf(x, sizeof x, "x/%s", names[k]);
        uint8_t *got = td_test_slurp(tmp, x, &len);
        ck_assert_uint_eq(len, sizes[k]);
        ck_assert(memcmp(got, data[k], len) == 0);
        free(got);
        free(data[k]);
    }
    struct stat st;
    snprintf(path, sizeof path, "%s/x/000000000.jpg", tmp);
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_int_eq((int)st.st_mtime, 1600000000);
    ck_assert_int_eq((int)(st.st_mode & 0777), 0644);
}
END_TEST

struct seen {
    int n;
    char name[8][300];
    uint64_t off[8], size[8];
};

static int collect(void *user, const char *name, uint64_t off, uint64_t size)
{
    struct seen *s = user;
    ck_assert_int_lt(s->n, 8);
    snprintf(s->name[s->n], sizeof s->name[0], "%s", name);
    s->off[s->n] = off;
    s->size[s->n] = size;
    s->n++;
    return 0;
}

/* The regular files of archives GNU tar wrote, in each format, with a
 * long name of each kind (180 bytes without a slash: 'L' or pax 'path';
 * 142 with slashes: the ustar prefix), an empty file, a folder and a
 * symbolic link (stepped over): names, sizes and the bytes at the
 * offsets. */
START_TEST(test_walk_reads_gnu_archives)
{
    static const char *formats[] = {"ustar", "gnu", "pax"};
    char lng[181], split[200];
    memset(lng, 'L', 180);
    lng[180] = '\0';
    two_slash_name(split);
    uint8_t *small = make_file("s.cls", 3), *big = make_file("b.jpg", 1500);
    free(make_file("e", 0));
    uint8_t *pl = make_file(lng, 40), *ps = make_file(split, 513);
    td_test_sh(tmp, "mkdir -p dir && ln -s s.cls link");
    for (int fm = 0; fm < 3; fm++) {
        int ustar = fm == 0; /* ustar cannot hold the 180-byte name */
        td_test_sh(tmp, "rm -f t.tar && tar --format=%s -cf t.tar s.cls dir b.jpg link e "
            "'%s' %s%s%s", formats[fm], split, ustar ? "" : "'",
            ustar ? "" : lng, ustar ? "" : "'");
        size_t len;
        uint8_t *t = td_test_slurp(tmp, "t.tar", &len);
        struct seen s = {0};
        uint64_t at = 7;
        ck_assert_int_eq(td_tar_walk(t, len, collect, &s, &at), 0);
        ck_assert_int_eq(s.n, ustar ? 4 : 5);
        const char *want[] = {"s.cls", "b.jpg", "e", split, lng};
        const uint8_t *bytes[] = {small, big, NULL, ps, pl};
        const uint64_t sizes[] = {3, 1500, 0, 513, 40};
        for (int k = 0; k < s.n; k++) {
            ck_assert_str_eq(s.name[k], want[k]);
            ck_assert_uint_eq(s.size[k], sizes[k]);
            ck_assert_uint_eq(s.off[k] % TD_TAR_BLOCK, 0);
            ck_assert_uint_le(s.off[k] + s.size[k], len);
            if (sizes[k])
                ck_assert(memcmp(t + s.off[k], bytes[k], sizes[k]) == 0);
        }
        free(t);
    }
    free(small);
    free(big);
    free(pl);
    free(ps);
}
END_TEST

/* A GNU archive cut short inside a member's data, or inside a header, is
 * TD_E_CORRUPT with the offset of the header whose member does not fit;
 * one cut on a block boundary after a member ends cleanly. */
START_TEST(test_walk_truncated)
{
    free(make_file("a", 600));  /* header 0, data 512..1112, pad to 1536 */
    free(make_file("b", 100));  /* header 1536, data 2048.. */
    td_test_sh(tmp, "tar --format=gnu -cf t.tar a b");
    size_t len;
    uint8_t *t = td_test_slurp(tmp, "t.tar", &len);
    struct seen s = {0};
    uint64_t at = 0;
    ck_assert_int_eq(td_tar_walk(t, 1000, collect, &s, &at), TD_E_CORRUPT);
    ck_assert_uint_eq(at, 0);
    memset(&s, 0, sizeof s);
    ck_assert_int_eq(td_tar_walk(t, 2048 + 50, collect, &s, &at),
                     TD_E_CORRUPT);
    ck_assert_uint_eq(at, 1536);
    ck_assert_int_eq(s.n, 1);
    memset(&s, 0, sizeof s);
    ck_assert_int_eq(td_tar_walk(t, 1536 + 100, collect, &s, &at),
                     TD_E_CORRUPT); /* half a header */
    ck_assert_uint_eq(at, 1536);
    memset(&s, 0, sizeof s);
    ck_assert_int_eq(td_tar_walk(t, 1536, collect, &s, &at), 0);
    ck_assert_int_eq(s.n, 1);
    free(t);
}
END_TEST

/* A size in GNU's base-256 form (first byte 0x80, then big-endian), as
 * GNU tar writes sizes of 8 GiB and more, hand-made with a small size. */
START_TEST(test_walk_base256_size)
{
    uint8_t t[4 * TD_TAR_BLOCK] = {0};
    ck_assert_int_eq(td_tar_header(t, "big.bin", 0, 0), 0);
    memset(t + 124, 0, 12);
    t[124] = 0x80;
    t[134] = 0x02; /* 0x258 = 600 */
    t[135] = 0x58;
    memset(t + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < TD_TAR_BLOCK; i++)
        sum += t[i];
    snprintf((char *)t + 148, 8, "%06o", sum);
    struct seen s = {0};
    ck_assert_int_eq(td_tar_walk(t, sizeof t, collect, &s, NULL), 0);
    ck_assert_int_eq(s.n, 1);
    ck_assert_uint_eq(s.size[0], 600);
    ck_assert_uint_eq(s.off[0], TD_TAR_BLOCK);
}
END_TEST

/* Bytes per member: the 512-byte header and the data rounded up to
 * whole blocks. */
START_TEST(test_member_bytes_and_limits)
{
    ck_assert_uint_eq(td_tar_member_bytes(0), 512);
    ck_assert_uint_eq(td_tar_member_bytes(1), 1024);
    ck_assert_uint_eq(td_tar_member_bytes(512), 1024);
    ck_assert_uint_eq(td_tar_member_bytes(513), 1536);
    ck_assert_uint_eq(td_tar_member_bytes(UINT64_C(5) << 30),
                      512 + (UINT64_C(5) << 30));
    uint8_t h[TD_TAR_BLOCK];
    /* ustar's 11 octal digits hold sizes below 8 GiB */
    ck_assert_int_eq(td_tar_header(h, "x", (UINT64_C(8) << 30) - 1, 0), 0);
    ck_assert_str_eq((const char *)h + 124, "77777777777");
    ck_assert_int_eq(td_tar_header(h, "x", UINT64_C(8) << 30, 0), -EFBIG);
    char name[300];
    memset(name, 'n', 101); /* 101 bytes and no slash: cannot be split */
    name[101] = '\0';
    ck_assert_int_eq(td_tar_header(h, name, 1, 0), -ENAMETOOLONG);
    memset(name, 'n', 256);
    name[100] = '/';
    name[256] = '\0'; /* over TD_TAR_NAME_MAX */
    ck_assert_int_eq(td_tar_header(h, name, 1, 0), -ENAMETOOLONG);
}
END_TEST

static Suite *tar_suite(void)
{
    Suite *s = suite_create("tar");
    TCase *tc = tcase_create("tar");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_header_is_gnu_tars);
    tcase_add_test(tc, test_gnu_tar_extracts_ours);
    tcase_add_test(tc, test_walk_reads_gnu_archives);
    tcase_add_test(tc, test_walk_truncated);
    tcase_add_test(tc, test_walk_base256_size);
    tcase_add_test(tc, test_member_bytes_and_limits);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(tar_suite)
