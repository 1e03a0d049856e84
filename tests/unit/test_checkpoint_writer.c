/* test_checkpoint_writer.c - the writer thread: hand-off without blocking,
 * one running + one pending then -EBUSY, completion and failure through
 * the callback, and a failed write that does not stop the next one.
 * Synchronises on condition variables, never on sleeps; runs under TSan. */
#include <errno.h>
#include <pthread.h>

#include "base/error.h"
#include "ckpt_helpers.h"

/* What the callbacks saw, plus a gate that holds writes inside write(). */
struct probe {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int results, statuses[8];
    int64_t steps[8];
    const td_ckpt_snapshot *snaps[8];
    int gate_closed, in_write, fail_first;
    char err0[512];          /* the first result's message */
};

static void probe_init(struct probe *p)
{
    memset(p, 0, sizeof *p);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
}

static void probe_destroy(struct probe *p)
{
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
}

static void on_done(void *user, const td_ckpt_result *r)
{
    struct probe *p = user;
    pthread_mutex_lock(&p->mu);
    if (p->results < 8) {
        p->statuses[p->results] = r->status;
        p->steps[p->results] = r->step;
        p->snaps[p->results] = r->snap;
    }
    if (p->results == 0)
        snprintf(p->err0, sizeof p->err0, "%s", r->err);
    p->results++;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

static ssize_t gated_write(void *user, int fd, const void *buf, size_t n)
{
    struct probe *p = user;
    pthread_mutex_lock(&p->mu);
    p->in_write++;
    pthread_cond_broadcast(&p->cv);
    while (p->gate_closed)
        pthread_cond_wait(&p->cv, &p->mu);
    int fail = p->fail_first > 0;
    if (fail)
        p->fail_first--;
    pthread_mutex_unlock(&p->mu);
    if (fail) {
        errno = ENOSPC;
        return -1;
    }
    return write(fd, buf, n);
}

static void wait_results(struct probe *p, int n)
{
    pthread_mutex_lock(&p->mu);
    while (p->results < n)
        pthread_cond_wait(&p->cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

START_TEST(test_write_and_report)
{
    char dir[64], err[512];
    struct probe p;
    td_ckpt_snapshot s;
    td_ckpt_writer *w;
    td_ckpt_file *f;
    td_ckpt_writer_stats st;
    probe_init(&p);
    scratch_dir(dir, sizeof dir);
    make_snapshot(&s, 42);
    td_ckpt_writer_config cfg = {.dir = dir, .keep = 2, .done = on_done,
                                 .user = &p, .job = 7};
    ck_assert_int_eq(td_ckpt_writer_start(&w, &cfg), 0);
    ck_assert_int_eq(td_ckpt_writer_submit(w, &s), 0);
    wait_results(&p, 1);
    ck_assert_int_eq(p.statuses[0], 0);
    ck_assert_int_eq(p.steps[0], 42);
    ck_assert_ptr_eq(p.snaps[0], &s);
    td_ckpt_writer_get_stats(w, &st); /* counted before the callback */
    ck_assert_uint_eq(st.written, 1);
    ck_assert_uint_eq(st.failed, 0);
    td_ckpt_writer_stop(w); /* joins: in_flight bookkeeping done */
    ck_assert_int_eq(td_ckpt_load_latest(dir, &f, NULL, 0, err, sizeof err),
                     0);
    ck_assert_int_eq(td_ckpt_file_meta(f)->step, 42);
    td_ckpt_close(f);
    td_ckpt_snapshot_destroy(&s);
    probe_destroy(&p);
    rm_tree(dir);
}
END_TEST

START_TEST(test_one_pending_then_busy)
{
    char dir[64];
    struct probe p;
    td_ckpt_snapshot a, b, c;
    td_ckpt_writer *w;
    td_ckpt_writer_stats st;
    probe_init(&p);
    p.gate_closed = 1;
    scratch_dir(dir, sizeof dir);
    make_snapshot(&a, 1);
    make_snapshot(&b, 2);
    make_snapshot(&c, 3);
    td_ckpt_io io = {gated_write, NULL, &p};
    td_ckpt_writer_config cfg = {.dir = dir, .keep = 5, .done = on_done,
                                 .user = &p, .io = &io};
    ck_assert_int_eq(td_ckpt_writer_start(&w, &cfg), 0);
    ck_assert_int_eq(td_ckpt_writer_submit(w, &a), 0);
    pthread_mutex_lock(&p.mu); /* wait until a's write is held in write() */
    while (p.in_write == 0)
        pthread_cond_wait(&p.cv, &p.mu);
    pthread_mutex_unlock(&p.mu);
    /* these return at once although the writer is stuck */
    ck_assert_int_eq(td_ckpt_writer_submit(w, &b), 0);
    ck_assert_int_eq(td_ckpt_writer_submit(w, &c), -EBUSY);
    ck_assert_int_eq(td_ckpt_writer_in_flight(w), 2);
    td_ckpt_writer_get_stats(w, &st);
    ck_assert_uint_eq(st.busy, 1);
    ck_assert_uint_eq(st.written, 0);
    pthread_mutex_lock(&p.mu);
    p.gate_closed = 0;
    pthread_cond_broadcast(&p.cv);
    pthread_mutex_unlock(&p.mu);
    wait_results(&p, 2);
    td_ckpt_writer_stop(w);
    ck_assert_int_eq(p.results, 2);
    ck_assert_int_eq(p.steps[0], 1); /* in order */
    ck_assert_int_eq(p.steps[1], 2);
    ck_assert_int_eq(count_files(dir, ".safetensors"), 2);
    td_ckpt_snapshot_destroy(&a);
    td_ckpt_snapshot_destroy(&b);
    td_ckpt_snapshot_destroy(&c);
    probe_destroy(&p);
    rm_tree(dir);
}
END_TEST

START_TEST(test_failure_reported_and_next_succeeds)
{
    char dir[64];
    struct probe p;
    td_ckpt_snapshot a, b;
    td_ckpt_writer *w;
    td_ckpt_writer_stats st;
    probe_init(&p);
    p.fail_first = 1;
    scratch_dir(dir, sizeof dir);
    make_snapshot(&a, 1);
    make_snapshot(&b, 2);
    td_ckpt_io io = {gated_write, NULL, &p};
    td_ckpt_writer_config cfg = {.dir = dir, .keep = 5, .done = on_done,
                                 .user = &p, .io = &io};
    ck_assert_int_eq(td_ckpt_writer_start(&w, &cfg), 0);
    ck_assert_int_eq(td_ckpt_writer_submit(w, &a), 0);
    wait_results(&p, 1);
    ck_assert_int_eq(p.statuses[0], -ENOSPC);
    ck_assert_int_eq(td_ckpt_writer_submit(w, &b), 0);
    wait_results(&p, 2);
    ck_assert_int_eq(p.statuses[1], 0);
    td_ckpt_writer_get_stats(w, &st);
    ck_assert_uint_eq(st.failed, 1);
    ck_assert_uint_eq(st.written, 1);
    ck_assert_uint_eq(st.bytes, b.used);
    td_ckpt_writer_stop(w);
    ck_assert_int_eq(count_files(dir, ".safetensors"), 1);
    ck_assert_int_eq(count_files(dir, ".tmp"), 0);
    td_ckpt_snapshot_destroy(&a);
    td_ckpt_snapshot_destroy(&b);
    probe_destroy(&p);
    rm_tree(dir);
}
END_TEST

START_TEST(test_stop_finishes_queued_writes)
{
    char dir[64];
    struct probe p;
    td_ckpt_snapshot a, b;
    td_ckpt_writer *w;
    probe_init(&p);
    scratch_dir(dir, sizeof dir);
    make_snapshot(&a, 1);
    make_snapshot(&b, 2);
    td_ckpt_writer_config cfg = {.dir = dir, .keep = 0, .done = on_done,
                                 .user = &p};
    ck_assert_int_eq(td_ckpt_writer_start(&w, &cfg), 0);
    ck_assert_int_eq(td_ckpt_writer_submit(w, &a), 0);
    int rb = td_ckpt_writer_submit(w, &b); /* 0, or -EBUSY if a is pending */
    ck_assert(rb == 0 || rb == -EBUSY);
    td_ckpt_writer_stop(w);
    ck_assert_int_eq(p.results, rb == 0 ? 2 : 1);
    ck_assert_int_eq(count_files(dir, ".safetensors"), p.results);
    td_ckpt_snapshot_destroy(&a);
    td_ckpt_snapshot_destroy(&b);
    probe_destroy(&p);
    rm_tree(dir);
}
END_TEST

/* A snapshot's ready callback: the data "arrives" (tensor w's first value
 * becomes 9.5) only when the writer asks, as a device copy would; fails
 * when told to. */
struct arrival {
    td_ckpt_snapshot *s;
    int calls, fail;
};

static int arrive(void *arg, char *err, size_t errcap)
{
    struct arrival *a = arg;
    a->calls++;
    if (a->fail) {
        snprintf(err, errcap, "the copy from the device failed");
        return TD_E_DEVICE;
    }
    ((float *)(void *)a->s->data)[0] = 9.5f; /* w comes first */
    return 0;
}

/* Issue 14 finding 8: the writer waits for the snapshot (its ready
 * callback) before it reads the data, on its own thread; a failed wait is
 * a failed checkpoint with its message, and nothing is written. */
START_TEST(test_ready_is_waited_for_before_the_write)
{
    char dir[64], err[512];
    struct probe p;
    td_ckpt_snapshot a, b;
    td_ckpt_writer *w;
    td_ckpt_file *f;
    float v[6];
    probe_init(&p);
    scratch_dir(dir, sizeof dir);
    make_snapshot(&a, 1);
    make_snapshot(&b, 2);
    struct arrival ra = {&a, 0, 1}, rb = {&b, 0, 0};
    a.ready = arrive;
    a.ready_arg = &ra;
    b.ready = arrive;
    b.ready_arg = &rb;
    td_ckpt_writer_config cfg = {.dir = dir, .keep = 5, .done = on_done,
                                 .user = &p};
    ck_assert_int_eq(td_ckpt_writer_start(&w, &cfg), 0);
    ck_assert_int_eq(td_ckpt_writer_submit(w, &a), 0);
    wait_results(&p, 1);
    ck_assert_int_eq(p.statuses[0], TD_E_DEVICE);
    ck_assert_str_eq(p.err0, "the copy from the device failed");
    ck_assert_int_eq(count_files(dir, ".safetensors"), 0);
    ck_assert_int_eq(td_ckpt_writer_submit(w, &b), 0);
    wait_results(&p, 2);
    ck_assert_int_eq(p.statuses[1], 0);
    td_ckpt_writer_stop(w);
    ck_assert_int_eq(ra.calls, 1);
    ck_assert_int_eq(rb.calls, 1);
    ck_assert_int_eq(td_ckpt_load_latest(dir, &f, NULL, 0, err, sizeof err),
                     0);
    ck_assert_int_eq(td_ckpt_file_read(f, "w", TD_DT_F32, v, sizeof v, err,
                                       sizeof err), 0);
    ck_assert(v[0] == 9.5f); /* read after the callback, not before */
    ck_assert(v[1] == -0.5f);
    td_ckpt_close(f);
    td_ckpt_snapshot_destroy(&a);
    td_ckpt_snapshot_destroy(&b);
    probe_destroy(&p);
    rm_tree(dir);
}
END_TEST

START_TEST(test_bad_config)
{
    td_ckpt_writer *w;
    td_ckpt_writer_config cfg = {.dir = NULL};
    ck_assert_int_eq(td_ckpt_writer_start(&w, &cfg), -EINVAL);
    ck_assert_ptr_null(w);
    cfg.dir = "";
    ck_assert_int_eq(td_ckpt_writer_start(&w, &cfg), -EINVAL);
    cfg.dir = "/tmp";
    cfg.keep = -1;
    ck_assert_int_eq(td_ckpt_writer_start(&w, &cfg), -EINVAL);
}
END_TEST

static Suite *writer_suite(void)
{
    Suite *s = suite_create("checkpoint_writer");
    TCase *tc = tcase_create("writer");
    tcase_add_test(tc, test_write_and_report);
    tcase_add_test(tc, test_one_pending_then_busy);
    tcase_add_test(tc, test_failure_reported_and_next_succeeds);
    tcase_add_test(tc, test_stop_finishes_queued_writes);
    tcase_add_test(tc, test_ready_is_waited_for_before_the_write);
    tcase_add_test(tc, test_bad_config);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(writer_suite)
