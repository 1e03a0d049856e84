/* test_feeder.c - the in-memory batch source: order, positioning,
 * augmentation, and reading IDX files (plain and gzipped) with errors that
 * name the file. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zlib.h>

#include "base/error.h"
#include "feeder.h"
#include "tdtest.h"

static void make(td_dataset_mem *d, int n, int h, int w)
{
    d->n = n, d->h = h, d->w = w, d->c = 1, d->classes = 10;
    d->images = malloc((size_t)n * h * w);
    d->labels = malloc(sizeof *d->labels * (size_t)n);
    for (int i = 0; i < n; i++) {
        for (int p = 0; p < h * w; p++)
            d->images[(size_t)i * h * w + p] = (uint8_t)(i + p);
        d->labels[i] = i; /* the label names the sample */
    }
}

START_TEST(test_epoch_covers_each_sample_once)
{
    td_dataset_mem d;
    make(&d, 103, 2, 2);
    td_feeder *f;
    td_feeder_config c = {.batch = 10, .seed = 1, .shuffle = 1};
    ck_assert_int_eq(td_feeder_create(&d, &c, &f), 0);
    td_batch_source s = td_feeder_source(f);
    ck_assert_int_eq(td_feeder_batches_per_epoch(f), 11);
    int seen[103], order0[103], k = 0;
    td_batch b;
    for (int ep = 0; ep < 2; ep++) {
        memset(seen, 0, sizeof seen);
        int got = 0, moved = 0;
        for (int i = 0; i < 11; i++) {
            ck_assert_int_eq(s.next(s.self, &b, NULL), 0);
            ck_assert_int_eq(b.epoch, ep);
            ck_assert_int_eq(b.step, i);
            ck_assert_int_eq(b.last_in_epoch, i == 10);
            ck_assert_int_eq(b.n, i == 10 ? 3 : 10);
            for (int j = 0; j < b.n; j++) {
                int id = b.labels[j];
                ck_assert_int_eq(seen[id]++, 0);
                ck_assert_int_eq(b.data[j * 4], (uint8_t)id);
                if (ep == 0)
                    order0[k++] = id;
                else
                    moved += order0[got] != id;
                got++;
            }
            s.release(s.self, &b);
        }
        ck_assert_int_eq(got, 103);
        if (ep == 1)
            ck_assert_int_gt(moved, 50); /* a new order each epoch */
    }
    td_feeder_free(f);
    td_dataset_mem_free(&d);
}
END_TEST

START_TEST(test_start_positions_and_drop_last)
{
    td_dataset_mem d;
    make(&d, 50, 2, 2);
    td_feeder *f, *g;
    td_feeder_config c = {.batch = 8, .seed = 5, .shuffle = 1,
                          .drop_last = 1};
    ck_assert_int_eq(td_feeder_create(&d, &c, &f), 0);
    ck_assert_int_eq(td_feeder_create(&d, &c, &g), 0);
    ck_assert_int_eq(td_feeder_batches_per_epoch(f), 6);
    td_batch_source a = td_feeder_source(f), b = td_feeder_source(g);
    td_batch x, y;
    /* walk a to epoch 2, step 3; position b there directly */
    for (int i = 0; i < 2 * 6 + 3; i++)
        a.next(a.self, &x, NULL);
    ck_assert_int_eq(b.start(b.self, 2, 3), 0);
    a.next(a.self, &x, NULL);
    int32_t want[8];
    memcpy(want, x.labels, sizeof want);
    b.next(b.self, &y, NULL);
    ck_assert_int_eq(y.epoch, 2);
    ck_assert_int_eq(y.step, 3);
    ck_assert_mem_eq(y.labels, want, sizeof want);
    ck_assert_int_eq(b.start(b.self, 0, 6), -EINVAL);
    td_feeder_free(f);
    td_feeder_free(g);
    td_dataset_mem_free(&d);
}
END_TEST

START_TEST(test_flip_and_pad_crop)
{
    td_dataset_mem d;
    make(&d, 64, 1, 4); /* one row: values i + 0..3 */
    td_feeder *f;
    td_feeder_config c = {.batch = 64, .seed = 2, .flip = 1};
    ck_assert_int_eq(td_feeder_create(&d, &c, &f), 0);
    td_batch_source s = td_feeder_source(f);
    td_batch b;
    s.next(s.self, &b, NULL);
    int flipped = 0;
    for (int j = 0; j < 64; j++) {
        const uint8_t *p = b.data + j * 4;
        int id = b.labels[j];
        int fl = p[0] == (uint8_t)(id + 3);
        for (int x = 0; x < 4; x++)
            ck_assert_int_eq(p[x], (uint8_t)(id + (fl ? 3 - x : x)));
        flipped += fl;
    }
    ck_assert(flipped > 16 && flipped < 48);
    td_feeder_free(f);
    c.flip = 0;
    c.pad_crop = 1;
    ck_assert_int_eq(td_feeder_create(&d, &c, &f), 0);
    s = td_feeder_source(f);
    s.next(s.self, &b, NULL);
    int shifted = 0;
    for (int j = 0; j < 64; j++) {
        const uint8_t *p = b.data + j * 4;
        int id = b.labels[j];
        /* a row shifted by -1, 0 or 1 with zero fill, or all zero when
         * the one row moved out vertically */
        if (p[1] == 0 && p[2] == 0)
            continue;
        int dx = p[1] - (id + 1);
        ck_assert(dx >= -1 && dx <= 1);
        for (int x = 0; x < 4; x++) {
            int sx = x + dx;
            ck_assert_int_eq(p[x], sx < 0 || sx > 3 ? 0 : (uint8_t)(id + sx));
        }
        shifted += dx != 0;
    }
    ck_assert_int_gt(shifted, 10);
    td_feeder_free(f);
    td_dataset_mem_free(&d);
}
END_TEST

static char dir[64];

static void write_idx(const char *name, int gz, const uint8_t *hdr, int hl,
                      const uint8_t *data, int n)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s%s", dir, name, gz ? ".gz" : "");
    if (gz) {
        gzFile f = gzopen(path, "wb");
        gzwrite(f, hdr, (unsigned)hl);
        gzwrite(f, data, (unsigned)n);
        gzclose(f);
    } else {
        FILE *f = fopen(path, "wb");
        fwrite(hdr, 1, (size_t)hl, f);
        fwrite(data, 1, (size_t)n, f);
        fclose(f);
    }
}

static void setup_dir(void)
{
    snprintf(dir, sizeof dir, "/tmp/td_feeder_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    const uint8_t ih[16] = {0, 0, 8, 3, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 2};
    const uint8_t lh[8] = {0, 0, 8, 1, 0, 0, 0, 3};
    const uint8_t lh2[8] = {0, 0, 8, 1, 0, 0, 0, 2};
    uint8_t px[12], lab[3] = {4, 0, 9};
    for (int i = 0; i < 12; i++)
        px[i] = (uint8_t)(i * 20);
    write_idx("a-images-idx3-ubyte", 1, ih, 16, px, 12);
    write_idx("a-labels-idx1-ubyte", 0, lh, 8, lab, 3);
    write_idx("short-images-idx3-ubyte", 0, ih, 16, px, 11);
    write_idx("short-labels-idx1-ubyte", 0, lh, 8, lab, 3);
    write_idx("odd-images-idx3-ubyte", 0, ih, 16, px, 12);
    write_idx("odd-labels-idx1-ubyte", 0, lh2, 8, lab, 2);
}

static void teardown_dir(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}

START_TEST(test_idx_load)
{
    td_dataset_mem d;
    char prefix[128], err[256] = "";
    snprintf(prefix, sizeof prefix, "%s/a", dir);
    ck_assert_int_eq(td_feeder_load_idx(prefix, 0, &d, err, sizeof err), 0);
    ck_assert_int_eq(d.n, 3);
    ck_assert_int_eq(d.h, 2);
    ck_assert_int_eq(d.w, 2);
    ck_assert_int_eq(d.classes, 10);
    ck_assert_int_eq(d.labels[2], 9);
    ck_assert_int_eq(d.images[5], 100);
    td_dataset_mem_free(&d);
    ck_assert_int_eq(td_feeder_load_idx(prefix, 2, &d, err, sizeof err), 0);
    ck_assert_int_eq(d.n, 2);
    td_dataset_mem_free(&d);
}
END_TEST

START_TEST(test_idx_errors)
{
    td_dataset_mem d;
    char prefix[128], err[256] = "", want[256];
    snprintf(prefix, sizeof prefix, "%s/none", dir);
    ck_assert_int_eq(td_feeder_load_idx(prefix, 0, &d, err, sizeof err), -ENOENT);
    snprintf(want, sizeof want, "%s-images-idx3-ubyte[.gz]: cannot open",
             prefix);
    ck_assert_str_eq(err, want);
    snprintf(prefix, sizeof prefix, "%s/short", dir);
    ck_assert_int_eq(td_feeder_load_idx(prefix, 0, &d, err, sizeof err),
                     TD_E_CORRUPT);
    ck_assert_ptr_nonnull(strstr(err, "short-images-idx3-ubyte: file shorter than its IDX dims "
                                  "say"));
    ck_assert_ptr_null(d.images);
    snprintf(prefix, sizeof prefix, "%s/odd", dir);
    ck_assert_int_eq(td_feeder_load_idx(prefix, 0, &d, err, sizeof err),
                     TD_E_CORRUPT);
    ck_assert_ptr_nonnull(strstr(err, "3 images but 2 labels"));
}
END_TEST

static Suite *feeder_suite(void)
{
    Suite *s = suite_create("feeder");
    TCase *tc = tcase_create("feeder");
    tcase_add_test(tc, test_epoch_covers_each_sample_once);
    tcase_add_test(tc, test_start_positions_and_drop_last);
    tcase_add_test(tc, test_flip_and_pad_crop);
    suite_add_tcase(s, tc);
    TCase *io = tcase_create("idx");
    tcase_add_checked_fixture(io, setup_dir, teardown_dir);
    tcase_add_test(io, test_idx_load);
    tcase_add_test(io, test_idx_errors);
    suite_add_tcase(s, io);
    return s;
}

TD_TEST_MAIN(feeder_suite)
