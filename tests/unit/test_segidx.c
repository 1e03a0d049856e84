/* test_segidx.c - td_pack_segment_info, the per restart segment bit index,
 * checked against the bytes of the file itself: the entropy-coded bytes
 * between the markers (unstuffed), the DC codes read with the file's own
 * DHT tables (parsed here from the marker bytes, independently of
 * libjpeg), and the DC values of the coefficient arrays. */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

#include "base/error.h"
#include "input/pack.h"
#include "support/jpeggen.h"
#include "tdtest.h"

/* ---- the file's markers, parsed by hand -------------------------------- */

struct huff {
    int n;               /* codes */
    uint8_t len[256];    /* per code, canonical order */
    uint16_t code[256];
    uint8_t sym[256];
};

struct jfile {
    int w, h, nc, hmax, vmax, dri;
    int id[4], hs[4], vs[4];
    int ns, sc[4], td[4], ta[4]; /* scan: frame index, DC/AC table */
    struct huff dc[4], ac[4];
    size_t ecs;                  /* first byte of the entropy-coded data */
};

static void huff_build(struct huff *t, const uint8_t *cnt, const uint8_t *val)
{
    unsigned code = 0;
    int k = 0;
    for (int l = 1; l <= 16; l++) {
        for (int i = 0; i < cnt[l - 1]; i++, k++) {
            t->len[k] = (uint8_t)l;
            t->code[k] = (uint16_t)code++;
            t->sym[k] = val[k];
        }
        code <<= 1;
    }
    t->n = k;
}

static void parse(const uint8_t *j, size_t n, struct jfile *f)
{
    memset(f, 0, sizeof *f);
    ck_assert(n > 4 && j[0] == 0xff && j[1] == 0xd8);
    size_t p = 2;
    for (;;) {
        ck_assert(p + 4 <= n && j[p] == 0xff);
        int m = j[p + 1];
        size_t l = (size_t)j[p + 2] << 8 | j[p + 3];
        const uint8_t *s = j + p + 4;
        ck_assert(p + 2 + l <= n);
        if (m == 0xc0 || m == 0xc1) {
            f->h = s[1] << 8 | s[2];
            f->w = s[3] << 8 | s[4];
            f->nc = s[5];
            ck_assert(f->nc >= 1 && f->nc <= 4);
            for (int c = 0; c < f->nc; c++) {
                f->id[c] = s[6 + 3 * c];
                f->hs[c] = s[7 + 3 * c] >> 4;
                f->vs[c] = s[7 + 3 * c] & 15;
                f->hmax = f->hs[c] > f->hmax ? f->hs[c] : f->hmax;
                f->vmax = f->vs[c] > f->vmax ? f->vs[c] : f->vmax;
            }
        } else if (m == 0xc4) {
            for (size_t q = 0; q < l - 2;) {
                int tc = s[q] >> 4, th = s[q] & 15, k = 0;
                ck_assert(th < 4);
                for (int i = 0; i < 16; i++)
                    k += s[q + 1 + (size_t)i];
                huff_build(tc ? &f->ac[th] : &f->dc[th], s + q + 1,
                           s + q + 17);
                q += 17 + (size_t)k;
            }
        } else if (m == 0xdd) {
            f->dri = s[0] << 8 | s[1];
        } else if (m == 0xda) {
            f->ns = s[0];
            for (int i = 0; i < f->ns; i++) {
                int c = 0;
                while (c < f->nc && f->id[c] != s[1 + 2 * i])
                    c++;
                ck_assert_int_lt(c, f->nc);
                f->sc[i] = c;
                f->td[i] = s[2 + 2 * i] >> 4;
                f->ta[i] = s[2 + 2 * i] & 15;
            }
            f->ecs = p + 2 + l;
            return;
        } else {
            ck_assert(m != 0xc2 && m != 0xd9); /* baseline, has a scan */
        }
        p += 2 + l;
    }
}

/* The entropy-coded segments, unstuffed: seg[k] at buf + off[k], len[k]
 * bytes.  Returns the count. */
static size_t split(const uint8_t *j, size_t n, size_t p, uint8_t *buf,
                    size_t *off, size_t *len, size_t cap)
{
    size_t ns = 0, o = 0;
    off[0] = 0;
    for (;;) {
        ck_assert(p < n);
        if (j[p] != 0xff) {
            buf[o++] = j[p++];
            continue;
        }
        ck_assert(p + 1 < n);
        if (j[p + 1] == 0x00) {
            buf[o++] = 0xff;
            p += 2;
            continue;
        }
        ck_assert_uint_lt(ns, cap);
        len[ns] = o - off[ns];
        ns++;
        if (j[p + 1] == 0xd9)
            return ns;
        ck_assert(j[p + 1] >= 0xd0 && j[p + 1] <= 0xd7);
        ck_assert_int_eq(j[p + 1] - 0xd0, (int)((ns - 1) % 8)); /* RSTn */
        off[ns] = o;
        p += 2;
    }
}

static unsigned getbit(const uint8_t *b, uint64_t i)
{
    return b[i >> 3] >> (7 - (i & 7)) & 1u;
}

static int cat_of(int v)
{
    int a = v < 0 ? -v : v, n = 0;
    for (; a; a >>= 1)
        n++;
    return n;
}

/* ---- the coefficients, read with libjpeg -------------------------------- */

struct coefs {
    struct jpeg_decompress_struct d;
    struct jpeg_error_mgr e;
    jvirt_barray_ptr *v;
};

static void coefs_open(struct coefs *c, const uint8_t *j, size_t n)
{
    c->d.err = jpeg_std_error(&c->e);
    jpeg_create_decompress(&c->d);
    jpeg_mem_src(&c->d, j, (unsigned long)n);
    jpeg_read_header(&c->d, TRUE);
    c->v = jpeg_read_coefficients(&c->d);
}

static int dc_at(struct coefs *c, int comp, int by, int bx)
{
    JBLOCKARRAY a = (*c->d.mem->access_virt_barray)(
        (j_common_ptr)&c->d, c->v[comp], (JDIMENSION)by, 1, FALSE);
    return a[0][bx][0];
}

static void coefs_close(struct coefs *c)
{
    jpeg_finish_decompress(&c->d);
    jpeg_destroy_decompress(&c->d);
}

/* ---- the checks ----------------------------------------------------------- */

/* Everything the index claims about file j, checked against the file. */
static void check_index(const uint8_t *j, size_t n)
{
    struct jfile f;
    parse(j, n, &f);
    ck_assert_int_eq(f.ns, f.nc); /* one interleaved scan */
    td_seg_info *si;
    size_t nseg;
    char err[200];
    int rc = td_pack_segment_info(j, n, &si, &nseg, err, sizeof err);
    ck_assert_msg(rc == 0, "td_pack_segment_info: %d %s", rc, err);

    /* The MCU grid as the JPEG standard defines it (A.2). */
    int one = f.nc == 1;
    int mcuw = one ? 8 : 8 * f.hmax, mcuh = one ? 8 : 8 * f.vmax;
    size_t mpr = (size_t)(f.w + mcuw - 1) / (size_t)mcuw;
    size_t mrows = (size_t)(f.h + mcuh - 1) / (size_t)mcuh;
    size_t total = mpr * mrows, r = f.dri ? (size_t)f.dri : total;
    ck_assert_uint_eq(nseg, (total + r - 1) / r);

    uint8_t *buf = malloc(n);
    size_t *off = malloc((nseg + 1) * sizeof *off);
    size_t *len = malloc((nseg + 1) * sizeof *len);
    ck_assert_uint_eq(split(j, n, f.ecs, buf, off, len, nseg + 1), nseg);

    struct coefs co;
    coefs_open(&co, j, n);
    for (size_t s = 0; s < nseg; s++) {
        const uint8_t *b = buf + off[s];
        /* The byte count and the 1-bit padding after the last code. */
        ck_assert_msg((si[s].bits + 7) / 8 == len[s],
                      "segment %zu: %u bits, %zu bytes", s,
                      (unsigned)si[s].bits, len[s]);
        for (uint64_t i = si[s].bits; i < 8 * (uint64_t)len[s]; i++)
            ck_assert_uint_eq(getbit(b, i), 1);

        size_t m0 = s * r, m1 = (s + 1) * r < total ? (s + 1) * r - 1
                                                    : total - 1;
        for (int k = 0; k < f.ns; k++) {
            int c = f.sc[k];
            int hs = one ? 1 : f.hs[c], vs = one ? 1 : f.vs[c];
            int wib = ((f.w * f.hs[c] + f.hmax - 1) / f.hmax + 7) / 8;
            int hib = ((f.h * f.vs[c] + f.vmax - 1) / f.vmax + 7) / 8;
            /* First block: the top-left one of the segment's first MCU. */
            int by = (int)(m0 / mpr) * vs, bx = (int)(m0 % mpr) * hs;
            ck_assert_int_eq(si[s].dc_first[c], dc_at(&co, c, by, bx));
            /* Last: the last block inside the image of its last MCU. */
            int ly = -1, lx = -1;
            for (int y = 0; y < vs; y++)
                for (int x = 0; x < hs; x++) {
                    int yy = (int)(m1 / mpr) * vs + y;
                    int xx = (int)(m1 % mpr) * hs + x;
                    if (yy < hib && xx < wib) {
                        ly = yy;
                        lx = xx;
                    }
                }
            ck_assert_int_ge(ly, 0);
            ck_assert_int_eq(si[s].dc_last[c], dc_at(&co, c, ly, lx));

            /* The DC code at dc_off, read with the file's DHT table. */
            const struct huff *t = &f.dc[f.td[k]];
            uint64_t p = si[s].dc_off[c];
            unsigned code = 0;
            int l = 0, sym = -1;
            while (sym < 0 && l < 16) {
                code = code << 1 | getbit(b, p++);
                l++;
                for (int q = 0; q < t->n; q++)
                    if (t->len[q] == l && t->code[q] == code)
                        sym = t->sym[q];
            }
            ck_assert_int_eq(sym, cat_of(si[s].dc_first[c]));
            int v = 0;
            for (int q = 0; q < sym; q++)
                v = v << 1 | (int)getbit(b, p++);
            if (sym && v < 1 << (sym - 1))
                v -= (1 << sym) - 1;
            ck_assert_int_eq(v, si[s].dc_first[c]);
            ck_assert_int_eq(si[s].dc_len[c], l + sym);
            ck_assert_uint_le(p, si[s].bits);
        }
        /* The first component's first DC code opens the segment; each
         * following one starts after the previous component's blocks of
         * the first MCU, so the offsets grow in scan order. */
        ck_assert_uint_eq(si[s].dc_off[f.sc[0]], 0);
        for (int k = 1; k < f.ns; k++)
            ck_assert_uint_gt(si[s].dc_off[f.sc[k]],
                              si[s].dc_off[f.sc[k - 1]]);
    }
    coefs_close(&co);
    free(len);
    free(off);
    free(buf);
    free(si);
}

static const struct {
    enum td_test_cs cs;
    int sub, prog;
} kinds[] = {
    {TD_TEST_RGB, 444, 0}, {TD_TEST_RGB, 422, 0}, {TD_TEST_RGB, 420, 0},
    {TD_TEST_GRAY, 444, 0}, {TD_TEST_CMYK, 444, 0}, {TD_TEST_RGB, 420, 1},
};

/* Widths and heights on and off the MCU grid, down to one pixel. */
static const int sizes[][2] = {
    {229, 157}, {224, 160}, {17, 9}, {8, 8}, {1, 1}, {300, 37}, {33, 250},
};

START_TEST(test_index_matches_the_file)
{
    int nsz = (int)(sizeof sizes / sizeof sizes[0]);
    int k = _i / nsz, w = sizes[_i % nsz][0], h = sizes[_i % nsz][1];
    uint8_t *j, *t;
    size_t n, tn;
    td_test_jpeg(w, h, kinds[k].cs, kinds[k].sub, 90, kinds[k].prog,
                 (uint32_t)_i + 1, &j, &n);
    const int maxr[] = {1, 2, 4, 1000};
    for (int q = 0; q < 4; q++) {
        ck_assert_int_eq(td_pack_add_restarts(j, n, maxr[q], &t, &tn), 0);
        check_index(t, tn);
        free(t);
    }
    if (!kinds[k].prog) /* no restart markers: one segment */
        check_index(j, n);
    free(j);
}
END_TEST

/* Progressive files, damaged files and non-JPEGs are refused cleanly. */
START_TEST(test_refuses_what_it_cannot_index)
{
    uint8_t *j, *t;
    size_t n, tn, nseg = 9;
    td_seg_info *si = (td_seg_info *)&nseg;
    char err[200];
    td_test_jpeg(64, 48, TD_TEST_RGB, 420, 90, 1, 3, &j, &n);
    ck_assert_int_eq(td_pack_segment_info(j, n, &si, &nseg, err, sizeof err),
                     TD_E_NOTSUP);
    ck_assert_ptr_null(si);
    ck_assert_uint_eq(nseg, 0);
    ck_assert_int_ne(err[0], 0);
    ck_assert_int_eq(td_pack_add_restarts(j, n, 2, &t, &tn), 0);
    ck_assert_int_eq(td_pack_segment_info(t, tn / 2, &si, &nseg, err,
                                          sizeof err), TD_E_CORRUPT);
    ck_assert_ptr_null(si);
    ck_assert_int_eq(td_pack_segment_info((const uint8_t *)"GIF89a..", 8, &si,
                                          &nseg, err, sizeof err),
                     TD_E_CORRUPT);
    ck_assert_int_eq(td_pack_segment_info(t, tn, &si, &nseg, err, sizeof err),
                     0);
    ck_assert_uint_eq(nseg, 4 * 3 / 2); /* 4 x 3 MCUs, 2 per segment */
    free(si);
    free(t);
    free(j);
}
END_TEST

static Suite *segidx_suite(void)
{
    Suite *s = suite_create("segidx");
    TCase *tc = tcase_create("segidx");
    int nk = (int)(sizeof kinds / sizeof kinds[0]);
    int nsz = (int)(sizeof sizes / sizeof sizes[0]);
    tcase_add_loop_test(tc, test_index_matches_the_file, 0, nk * nsz);
    tcase_add_test(tc, test_refuses_what_it_cannot_index);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(segidx_suite)
