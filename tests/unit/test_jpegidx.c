/* test_jpegidx.c - the crop index (jpegidx.{c,h}): td_pack_add_index's
 * rewrite and decoding boxes through indexed cut-outs, which must give
 * exactly the plain path's pixels; DC categories the file's table lacks,
 * an index in several chunks, re-packing, and damaged, hostile or fuzzed
 * indexes, which must fall back to the plain path or fail cleanly. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>
#include <jpeglib.h>

#include "base/error.h"
#include "input/decode.h"
#include "input/pack.h"
#include "support/decode_check.h"
#include "support/jpeggen.h"
#include "tdtest.h"

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

/* A small file whose SOF claims more than TD_PACK_MAX_PIXELS is not
 * rewritten (pack copies it as it is): libjpeg would allocate every
 * coefficient first, 2 GB for the 500 bytes fuzz_pack found claiming
 * 51782 x 18758.  Just under the limit the header alone does not refuse
 * it: the missing data does. */
START_TEST(test_rewrite_refuses_huge_header)
{
    uint8_t *j, *t;
    size_t n, tn;
    td_test_jpeg(16, 16, TD_TEST_GRAY, 444, 80, 0, 9, &j, &n);
    size_t sof = 2;
    while (!(j[sof] == 0xff && j[sof + 1] == 0xc0))
        sof += 2 + ((size_t)j[sof + 2] << 8 | j[sof + 3]);
    /* height, width: 50000 x 20000, then 8192 x 8192 */
    static const uint8_t dims[2][4] = {{0xc3, 0x50, 0x4e, 0x20},
                                       {0x20, 0x00, 0x20, 0x00}};
    for (int k = 0; k < 2; k++) {
        memcpy(j + sof + 5, dims[k], 4);
        int want = k ? TD_E_CORRUPT : TD_E_NOTSUP;
        ck_assert_int_eq(td_pack_add_index(j, n, 1, &t, &tn), want);
        ck_assert_ptr_null(t);
        ck_assert_int_eq(td_pack_add_restarts(j, n, 1, &t, &tn), want);
        ck_assert_ptr_null(t);
    }
    free(j);
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
    printf("flipped index bytes: %d of 300 decodes went on, %d refused as "
           "corrupt\n", ok, bad);
    free(g);
    td_decoder_destroy(d);
    free(t);
    free(j);
}
END_TEST


static Suite *jpegidx_suite(void)
{
    Suite *s = suite_create("jpegidx");
    TCase *tc = tcase_create("jpegidx");
    tcase_add_test(tc, test_index_codes_dc_categories_the_file_lacks);
    tcase_add_test(tc, test_index_damaged);
    tcase_add_test(tc, test_rewrite_refuses_huge_header);
    tcase_add_test(tc, test_index_in_several_chunks);
    tcase_add_test(tc, test_index_fuzz);
    tcase_add_test(tc, test_index_repack_drops_the_old_index);
    tcase_add_test(tc, test_index_huge_length_is_refused);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(jpegidx_suite)
