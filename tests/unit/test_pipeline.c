/* test_pipeline.c - the worker pool and ring end to end: order and
 * determinism across worker counts, resume, eval order, bad samples,
 * live worker changes, the allocator, stats, error paths. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "base/error.h"
#include "base/log.h"
#include "input/pack.h"
#include "input/pipeline.h"
#include "support/jpeggen.h"
#include "tdtest.h"

static char *tmp;
static char shards[4096], folder[4096];

#define NSAMPLES 200

/* A packed IDX subset: 200 28x28 gray images, labels i % 10. */
static void setup(void)
{
    char im[4096], lb[4096], err[256];
    tmp = td_test_tmpdir("pipeline");
    uint8_t *px = malloc(NSAMPLES * 784), lab[NSAMPLES];
    for (int i = 0; i < NSAMPLES; i++) {
        td_test_photo(px + (size_t)i * 784, 28, 28, 1, (uint32_t)i);
        lab[i] = (uint8_t)(i % 10);
    }
    uint32_t d3[3] = {NSAMPLES, 28, 28}, d1[1] = {NSAMPLES};
    snprintf(im, sizeof im, "%s/im.gz", tmp);
    snprintf(lb, sizeof lb, "%s/lb.gz", tmp);
    td_test_write_idx(im, 1, 3, d3, px);
    td_test_write_idx(lb, 1, 1, d1, lab);
    free(px);
    snprintf(shards, sizeof shards, "%s/shards", tmp);
    td_pack_options o;
    td_pack_options_default(&o);
    o.shard_bytes = 100 * 1024;
    td_pack_result r;
    ck_assert_int_eq(td_pack_idx(im, lb, shards, &o, &r, err, sizeof err), 0);
    snprintf(folder, sizeof folder, "%s/tree", tmp);
}

static void teardown(void)
{
    td_test_rmtree(tmp);
    free(tmp);
}

static void fmnist_config(td_pipeline_config *c, int workers)
{
    td_pipeline_config_default(c);
    c->data = shards;
    c->size[0] = c->size[1] = 28;
    c->channels = 1;
    c->batch_size = 32;
    c->workers = workers;
    c->prefetch = 3;
    c->seed = 11;
    td_augment_default(&c->augment[0], TD_AUG_PAD_CROP);
    c->augment[0].pad = 2;
    td_augment_default(&c->augment[1], TD_AUG_FLIP);
    c->n_augment = 2;
}

/* CRC of a batch's pixels and labels. */
static uint32_t batch_crc(const td_batch *b)
{
    uLong crc = crc32(0, NULL, 0);
    crc = crc32(crc, b->data, (uInt)((size_t)b->n * (size_t)b->h *
                                      (size_t)b->w * (size_t)b->c));
    crc = crc32(crc, (const Bytef *)b->labels, (uInt)(b->n * 4));
    return (uint32_t)crc;
}

/* Takes `count` batches from (epoch, step); records CRCs; between batches
 * may change the worker count (script[i] > 0) or the prefetch depth
 * (script[i] < 0: depth -script[i]). */
static void run(td_pipeline_config *c, int64_t epoch, int64_t step, int count,
                uint32_t *crcs, const int *script)
{
    td_pipeline *p;
    char err[256];
    ck_assert_int_eq(td_pipeline_create(c, &p, err, sizeof err), 0);
    ck_assert_int_eq(td_pipeline_start(p, epoch, step), 0);
    for (int i = 0; i < count; i++) {
        td_batch b;
        if (script && script[i] > 0)
            ck_assert_int_eq(td_pipeline_set_workers(p, script[i]), 0);
        if (script && script[i] < 0)
            ck_assert_int_eq(td_pipeline_set_prefetch(p, -script[i]), 0);
        ck_assert_int_eq(td_pipeline_next(p, &b, NULL), 0);
        int64_t seq = epoch * 6 + step + i;
        ck_assert_int_eq(b.epoch, seq / 6);
        ck_assert_int_eq(b.step, seq % 6);
        ck_assert_int_eq(b.last_in_epoch, seq % 6 == 5);
        ck_assert_int_eq(b.n, 32);
        crcs[i] = batch_crc(&b);
        td_pipeline_release(p, &b);
    }
    td_pipeline_destroy(p);
}

START_TEST(test_same_batches_for_any_worker_count)
{
    td_pipeline_config c;
    uint32_t ref[12], got[12];
    fmnist_config(&c, 1);
    run(&c, 0, 0, 12, ref, NULL); /* 2 epochs of 6 batches */
    for (int k = 0; k < 11; k++)
        ck_assert_uint_ne(ref[k], ref[k + 1]);
    c.workers = 3;
    c.prefetch = 5;
    run(&c, 0, 0, 12, got, NULL);
    ck_assert_mem_eq(ref, got, sizeof ref);
    /* Live changes of the worker count and the depth, up and down. */
    const int script[12] = {0, 4, -1, 1, 0, -4, 2, 0, 1, 3, -2, 0};
    c.workers = 2;
    c.prefetch = 2;
    c.max_prefetch = 4;
    run(&c, 0, 0, 12, got, script);
    ck_assert_mem_eq(ref, got, sizeof ref);
}
END_TEST

START_TEST(test_resume_matches_uninterrupted)
{
    td_pipeline_config c;
    uint32_t ref[12], got[5];
    fmnist_config(&c, 2);
    run(&c, 0, 0, 12, ref, NULL);
    run(&c, 1, 2, 4, got, NULL);
    ck_assert_mem_eq(ref + 8, got, 4 * sizeof *got);
    run(&c, 0, 5, 5, got, NULL); /* crosses the epoch boundary */
    ck_assert_mem_eq(ref + 5, got, 5 * sizeof *got);
    /* A different seed gives different batches. */
    c.seed = 12;
    run(&c, 0, 0, 1, got, NULL);
    ck_assert_uint_ne(got[0], ref[0]);
}
END_TEST

START_TEST(test_epoch_is_a_permutation)
{
    td_pipeline_config c;
    td_pipeline *p;
    char err[256];
    fmnist_config(&c, 2);
    c.drop_last = 0; /* 200 = 6 x 32 + 8 */
    ck_assert_int_eq(td_pipeline_create(&c, &p, err, sizeof err), 0);
    ck_assert_int_eq(td_pipeline_batches_per_epoch(p), 7);
    ck_assert_int_eq(td_pipeline_classes(p), 10);
    ck_assert_int_eq(td_pipeline_start(p, 0, 0), 0);
    for (int e = 0; e < 2; e++) {
        int count[10] = {0}, total = 0, first_labels[32];
        for (int s = 0; s < 7; s++) {
            td_batch b;
            ck_assert_int_eq(td_pipeline_next(p, &b, NULL), 0);
            ck_assert_int_eq(b.n, s == 6 ? 8 : 32);
            for (int i = 0; i < b.n; i++)
                count[b.labels[i]]++;
            if (s == 0)
                memcpy(first_labels, b.labels, sizeof first_labels);
            total += b.n;
            td_pipeline_release(p, &b);
        }
        ck_assert_int_eq(total, NSAMPLES);
        for (int k = 0; k < 10; k++)
            ck_assert_int_eq(count[k], NSAMPLES / 10);
        /* Shuffled: not the stored order 0,1,2,...,9,0,... */
        int inorder = 0;
        for (int i = 0; i < 32; i++)
            inorder += first_labels[i] == i % 10;
        ck_assert_int_lt(inorder, 20);
    }
    td_pipeline_destroy(p);
}
END_TEST

START_TEST(test_eval_keeps_order_and_draws_nothing)
{
    td_pipeline_config c;
    td_pipeline *p;
    char err[256];
    fmnist_config(&c, 2);
    c.train = 0;
    c.drop_last = 0;
    ck_assert_int_eq(td_pipeline_create(&c, &p, err, sizeof err), 0);
    uint32_t crc0 = 0;
    for (int e = 0; e < 2; e++) {
        ck_assert_int_eq(td_pipeline_start(p, e, 0), 0);
        int seen = 0;
        for (int s = 0; s < 7; s++) {
            td_batch b;
            ck_assert_int_eq(td_pipeline_next(p, &b, NULL), 0);
            for (int i = 0; i < b.n; i++)
                ck_assert_int_eq(b.labels[i], (seen + i) % 10);
            if (s == 0 && e == 0)
                crc0 = batch_crc(&b);
            else if (s == 0) /* epochs differ in nothing */
                ck_assert_uint_eq(batch_crc(&b), crc0);
            seen += b.n;
            td_pipeline_release(p, &b);
        }
        ck_assert_int_eq(seen, NSAMPLES);
    }
    td_pipeline_destroy(p);
}
END_TEST

static int allocs, frees;
static void *count_alloc(void *user, size_t n)
{
    (void)user;
    __atomic_add_fetch(&allocs, 1, __ATOMIC_RELAXED);
    return malloc(n);
}
static void count_free(void *user, void *ptr)
{
    (void)user;
    __atomic_add_fetch(&frees, 1, __ATOMIC_RELAXED);
    free(ptr);
}

START_TEST(test_allocator_stats_and_batch_source)
{
    td_pipeline_config c;
    td_pipeline *p;
    char err[256];
    fmnist_config(&c, 2);
    c.alloc = (td_slot_allocator){count_alloc, count_free, NULL};
    ck_assert_int_eq(td_pipeline_create(&c, &p, err, sizeof err), 0);
    ck_assert_int_eq(allocs, 2 * c.prefetch); /* pixels + labels per slot */
    td_batch_source src = td_pipeline_source(p);
    ck_assert_int_eq(src.start(src.self, 0, 0), 0);
    for (int i = 0; i < 6; i++) {
        td_batch b;
        int64_t w = -1;
        ck_assert_int_eq(src.next(src.self, &b, &w), 0);
        ck_assert_int_ge(w, 0);
        src.release(src.self, &b);
    }
    td_pipeline_stats st;
    td_pipeline_stats_get(p, &st);
    ck_assert_int_eq(st.batches, 6);
    /* the first batch was asked for as soon as the workers started */
    ck_assert_int_gt(st.starved_ns, 0);
    ck_assert_int_le(st.starved_ns, st.consumer_wait_ns);
    ck_assert_int_ge(st.samples, 6 * 32);
    ck_assert_int_gt(st.decode_ns, 0);
    ck_assert_int_gt(st.augment_ns, 0);
    ck_assert_int_gt(st.decoded_bytes, 6 * 32 * 100);
    ck_assert_int_eq(st.bad_samples, 0);
    ck_assert_int_eq(st.workers, 2);
    td_pipeline_destroy(p);
    ck_assert_int_eq(frees, allocs);
}
END_TEST

START_TEST(test_lifecycle_errors)
{
    td_pipeline_config c;
    td_pipeline *p;
    td_batch b, b2;
    char err[256];
    fmnist_config(&c, 1);
    ck_assert_int_eq(td_pipeline_create(&c, &p, err, sizeof err), 0);
    ck_assert_int_eq(td_pipeline_next(p, &b, NULL), -EINVAL); /* no start */
    ck_assert_int_eq(td_pipeline_start(p, 0, 6), -EINVAL);
    ck_assert_int_eq(td_pipeline_start(p, 0, 0), 0);
    ck_assert_int_eq(td_pipeline_next(p, &b, NULL), 0);
    ck_assert_int_eq(td_pipeline_start(p, 0, 0), -EBUSY);
    ck_assert_int_eq(td_pipeline_next(p, &b2, NULL), 0); /* two held */
    ck_assert_ptr_ne(b.data, b2.data);
    td_pipeline_release(p, &b);
    td_pipeline_release(p, &b2);
    ck_assert_int_eq(td_pipeline_set_workers(p, 0), -EINVAL);
    ck_assert_int_eq(td_pipeline_set_workers(p, 65), -EINVAL);
    ck_assert_int_eq(td_pipeline_set_prefetch(p, 0), -EINVAL);
    ck_assert_int_eq(td_pipeline_set_prefetch(p, c.prefetch + 1), -EINVAL);
    ck_assert_int_eq(td_pipeline_set_prefetch(p, 1), 0);
    td_pipeline_stats st;
    td_pipeline_stats_get(p, &st);
    ck_assert_int_eq(st.prefetch, 1);
    td_pipeline_stop(p);
    ck_assert_int_eq(td_pipeline_next(p, &b, NULL), TD_E_CLOSED);
    td_pipeline_destroy(p);
}
END_TEST

START_TEST(test_config_and_dataset_errors)
{
    td_pipeline_config c;
    td_pipeline *p = NULL;
    char err[512];
    fmnist_config(&c, 1);
    c.channels = 2;
    ck_assert_int_eq(td_pipeline_create(&c, &p, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "channels"));
    fmnist_config(&c, 1);
    c.batch_size = 500; /* more than the 200 samples, with drop_last */
    ck_assert_int_eq(td_pipeline_create(&c, &p, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "fewer than one batch"));
    fmnist_config(&c, 1);
    c.data = folder; /* does not exist yet */
    ck_assert_int_eq(td_pipeline_create(&c, &p, err, sizeof err), -ENOENT);
    ck_assert_ptr_nonnull(strstr(err, "tree"));
    ck_assert_ptr_null(p);
}
END_TEST

/* ---- bad samples ------------------------------------------------------ */

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static char logbuf[16384];

static void sink(void *user, int level, long job, const char *line)
{
    (void)user;
    (void)job;
    pthread_mutex_lock(&log_mu);
    if (level <= TD_LOG_WARN && strlen(logbuf) + strlen(line) + 2 <
                                    sizeof logbuf) {
        strcat(logbuf, line);
        strcat(logbuf, "\n");
    }
    pthread_mutex_unlock(&log_mu);
}

static int count_in_log(const char *what)
{
    int n = 0;
    for (const char *q = logbuf; (q = strstr(q, what)); q++)
        n++;
    return n;
}

/* A 4-class tree of 10 images each, three of them bad. */
static void bad_tree(void)
{
    char p[4200];
    uint8_t *j;
    size_t n;
    td_test_make_folder(folder, 4, 10, 48, 40);
    td_test_jpeg(48, 40, TD_TEST_RGB, 420, 90, 0, 99, &j, &n);
    snprintf(p, sizeof p, "%s/class1/img003.jpg", folder);
    td_test_write_file(p, j, n / 3); /* truncated */
    snprintf(p, sizeof p, "%s/class2/img005.jpg", folder);
    td_test_write_file(p, "<html>not a jpeg</html>", 23);
    free(j);
    td_test_jpeg(300, 200, TD_TEST_RGB, 420, 90, 0, 98, &j, &n);
    snprintf(p, sizeof p, "%s/class3/img007.jpg", folder);
    td_test_write_file(p, j, n / 2); /* cut inside the scan data */
    free(j);
}

static void bad_run(int workers, uint32_t *crcs, int64_t *bad)
{
    td_pipeline_config c;
    td_pipeline *p;
    char err[256];
    td_pipeline_config_default(&c);
    c.data = folder;
    c.size[0] = c.size[1] = 32;
    c.batch_size = 8;
    c.workers = workers;
    c.max_bad_ratio = 0.1;
    /* Whole-image resize: a crop could miss the cut-off rows. */
    td_augment_default(&c.augment[0], TD_AUG_FLIP);
    td_augment_default(&c.augment[1], TD_AUG_COLOR_JITTER);
    c.n_augment = 2;
    ck_assert_int_eq(td_pipeline_create(&c, &p, err, sizeof err), 0);
    ck_assert_int_eq(td_pipeline_start(p, 0, 0), 0);
    for (int i = 0; i < 10; i++) { /* two epochs of 5 batches */
        td_batch b;
        ck_assert_int_eq(td_pipeline_next(p, &b, NULL), 0);
        ck_assert_int_eq(b.n, 8);
        crcs[i] = batch_crc(&b);
        td_pipeline_release(p, &b);
    }
    td_pipeline_stats st;
    td_pipeline_stats_get(p, &st);
    *bad = st.bad_samples;
    td_pipeline_destroy(p);
}

START_TEST(test_bad_samples_skipped_counted_named_once)
{
    uint32_t a[10], b[10];
    int64_t bad_a, bad_b;
    bad_tree();
    td_log_set_sink(sink, NULL);
    bad_run(1, a, &bad_a);
    ck_assert_int_eq(bad_a, 3);
    ck_assert_int_eq(count_in_log("class1/img003.jpg"), 1);
    ck_assert_int_eq(count_in_log("class2/img005.jpg"), 1);
    ck_assert_int_eq(count_in_log("class3/img007.jpg"), 1);
    ck_assert_int_eq(count_in_log("bad sample"), 3);
    bad_run(3, b, &bad_b);
    td_log_set_sink(NULL, NULL);
    ck_assert_int_eq(bad_b, 3);
    ck_assert_mem_eq(a, b, sizeof a); /* replacements are deterministic */
}
END_TEST

START_TEST(test_bad_ratio_fails_the_pipeline)
{
    td_pipeline_config c;
    td_pipeline *p;
    char err[256];
    bad_tree();
    td_pipeline_config_default(&c);
    c.data = folder;
    c.size[0] = c.size[1] = 32;
    c.batch_size = 8;
    c.max_bad_ratio = 0.05; /* 2 of 40 allowed, 3 are bad */
    ck_assert_int_eq(td_pipeline_create(&c, &p, err, sizeof err), 0);
    ck_assert_int_eq(td_pipeline_start(p, 0, 0), 0);
    int rc = 0;
    for (int i = 0; i < 10 && rc == 0; i++) {
        td_batch b;
        rc = td_pipeline_next(p, &b, NULL);
        if (rc == 0)
            td_pipeline_release(p, &b);
    }
    ck_assert_int_eq(rc, TD_E_BADDATA);
    td_pipeline_destroy(p);
}
END_TEST

START_TEST(test_nchw_is_nhwc_transposed)
{
    td_pipeline_config c;
    td_pipeline *p, *q;
    char err[256];
    td_test_make_folder(folder, 2, 8, 64, 48);
    td_pipeline_config_default(&c);
    c.data = folder;
    c.size[0] = 24;
    c.size[1] = 32;
    c.batch_size = 4;
    td_augment_default(&c.augment[0], TD_AUG_RANDOM_RESIZED_CROP);
    td_augment_default(&c.augment[1], TD_AUG_FLIP);
    c.n_augment = 2;
    ck_assert_int_eq(td_pipeline_create(&c, &p, err, sizeof err), 0);
    c.layout = TD_LAYOUT_NCHW;
    ck_assert_int_eq(td_pipeline_create(&c, &q, err, sizeof err), 0);
    ck_assert_int_eq(td_pipeline_start(p, 0, 0), 0);
    ck_assert_int_eq(td_pipeline_start(q, 0, 0), 0);
    for (int s = 0; s < 4; s++) {
        td_batch a, b;
        ck_assert_int_eq(td_pipeline_next(p, &a, NULL), 0);
        ck_assert_int_eq(td_pipeline_next(q, &b, NULL), 0);
        ck_assert_int_eq(b.layout, TD_LAYOUT_NCHW);
        for (int n = 0; n < 4; n++)
            for (int y = 0; y < 24; y++)
                for (int x = 0; x < 32; x++)
                    for (int k = 0; k < 3; k++)
                        ck_assert_int_eq(
                            a.data[((n * 24 + y) * 32 + x) * 3 + k],
                            b.data[((n * 3 + k) * 24 + y) * 32 + x]);
        td_pipeline_release(p, &a);
        td_pipeline_release(q, &b);
    }
    td_pipeline_destroy(p);
    td_pipeline_destroy(q);
}
END_TEST

/* Shards packed with restart markers or with a crop index (decoded
 * through cut-outs of the segments / MCUs a crop covers) give
 * bit-identical batches to the same images copied as they are (decoded by
 * skipping rows). */
START_TEST(test_restart_packed_gives_same_batches)
{
    char plain[4200], rst[4200], ix[4200], err[256];
    td_test_make_folder(folder, 2, 16, 160, 120);
    snprintf(plain, sizeof plain, "%s/plain", tmp);
    snprintf(rst, sizeof rst, "%s/rst", tmp);
    snprintf(ix, sizeof ix, "%s/ix", tmp);
    td_pack_options o;
    td_pack_result r;
    td_pack_options_default(&o);
    ck_assert_int_eq(td_pack_folder(folder, plain, &o, &r, err, sizeof err),
                     0);
    ck_assert_uint_eq(r.rewritten, 0);
    o.restart = 4;
    ck_assert_int_eq(td_pack_folder(folder, rst, &o, &r, err, sizeof err), 0);
    ck_assert_uint_eq(r.rewritten, 32);
    o.restart = 0;
    o.index = 1;
    ck_assert_int_eq(td_pack_folder(folder, ix, &o, &r, err, sizeof err), 0);
    ck_assert_uint_eq(r.rewritten, 32);
    uint32_t crc[3][8];
    for (int k = 0; k < 3; k++) {
        td_pipeline_config c;
        td_pipeline *p;
        td_pipeline_config_default(&c);
        c.data = k == 2 ? ix : k ? rst : plain;
        c.size[0] = c.size[1] = 40;
        c.batch_size = 8;
        c.workers = 2;
        td_augment_default(&c.augment[0], TD_AUG_RANDOM_RESIZED_CROP);
        td_augment_default(&c.augment[1], TD_AUG_FLIP);
        c.n_augment = 2;
        ck_assert_int_eq(td_pipeline_create(&c, &p, err, sizeof err), 0);
        ck_assert_int_eq(td_pipeline_start(p, 0, 0), 0);
        for (int i = 0; i < 8; i++) { /* two epochs of 4 */
            td_batch b;
            ck_assert_int_eq(td_pipeline_next(p, &b, NULL), 0);
            crc[k][i] = batch_crc(&b);
            td_pipeline_release(p, &b);
        }
        td_pipeline_stats st;
        td_pipeline_stats_get(p, &st);
        ck_assert_int_eq(st.bad_samples, 0);
        td_pipeline_destroy(p);
    }
    ck_assert_uint_ne(crc[0][0], crc[0][4]);
    ck_assert_mem_eq(crc[0], crc[1], sizeof crc[0]);
    ck_assert_mem_eq(crc[0], crc[2], sizeof crc[0]);
}
END_TEST

static Suite *pipeline_suite(void)
{
    Suite *s = suite_create("pipeline");
    TCase *tc = tcase_create("pipeline");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_same_batches_for_any_worker_count);
    tcase_add_test(tc, test_resume_matches_uninterrupted);
    tcase_add_test(tc, test_epoch_is_a_permutation);
    tcase_add_test(tc, test_eval_keeps_order_and_draws_nothing);
    tcase_add_test(tc, test_allocator_stats_and_batch_source);
    tcase_add_test(tc, test_lifecycle_errors);
    tcase_add_test(tc, test_config_and_dataset_errors);
    tcase_add_test(tc, test_bad_samples_skipped_counted_named_once);
    tcase_add_test(tc, test_bad_ratio_fails_the_pipeline);
    tcase_add_test(tc, test_nchw_is_nhwc_transposed);
    tcase_add_test(tc, test_restart_packed_gives_same_batches);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(pipeline_suite)
