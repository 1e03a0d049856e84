/* test_queue.c - the bounded MPMC queue: order, bounds, timeouts, close,
 * and no lost or duplicated items under contention (run under TSan too). */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/queue.h"
#include "tdtest.h"

#define ITEM(i) ((void *)(uintptr_t)(i))

START_TEST(test_fifo_and_bounds)
{
    td_queue q;
    void *it;
    ck_assert_int_eq(td_queue_init(&q, 3), 0);
    ck_assert_int_eq(td_queue_try_pop(&q, &it), -EAGAIN);
    for (int i = 1; i <= 3; i++)
        ck_assert_int_eq(td_queue_try_push(&q, ITEM(i)), 0);
    ck_assert_int_eq(td_queue_try_push(&q, ITEM(4)), -EAGAIN);
    ck_assert_uint_eq(td_queue_len(&q), 3);
    for (int i = 1; i <= 3; i++) {
        ck_assert_int_eq(td_queue_pop(&q, &it), 0);
        ck_assert_ptr_eq(it, ITEM(i));
    }
    /* Wrap around the ring several times. */
    for (int round = 0; round < 10; round++) {
        ck_assert_int_eq(td_queue_push(&q, ITEM(100 + round)), 0);
        ck_assert_int_eq(td_queue_push(&q, ITEM(200 + round)), 0);
        ck_assert_int_eq(td_queue_pop(&q, &it), 0);
        ck_assert_ptr_eq(it, ITEM(100 + round));
        ck_assert_int_eq(td_queue_pop(&q, &it), 0);
        ck_assert_ptr_eq(it, ITEM(200 + round));
    }
    td_queue_destroy(&q);
}
END_TEST

START_TEST(test_init_errors)
{
    td_queue q;
    ck_assert_int_eq(td_queue_init(&q, 0), -EINVAL);
    ck_assert_int_eq(td_queue_init(NULL, 4), -EINVAL);
}
END_TEST

START_TEST(test_timed_waits)
{
    td_queue q;
    void *it;
    ck_assert_int_eq(td_queue_init(&q, 1), 0);
    int64_t t0 = td_now_ns();
    ck_assert_int_eq(td_queue_pop_timed(&q, &it, 30 * TD_NS_PER_MS),
                     TD_E_TIMEDOUT);
    ck_assert_int_ge(td_now_ns() - t0, 30 * TD_NS_PER_MS);
    ck_assert_int_eq(td_queue_push_timed(&q, ITEM(1), TD_NS_PER_MS), 0);
    t0 = td_now_ns();
    ck_assert_int_eq(td_queue_push_timed(&q, ITEM(2), 20 * TD_NS_PER_MS),
                     TD_E_TIMEDOUT);
    ck_assert_int_ge(td_now_ns() - t0, 20 * TD_NS_PER_MS);
    ck_assert_int_eq(td_queue_pop_timed(&q, &it, 0), 0);
    ck_assert_ptr_eq(it, ITEM(1));
    td_queue_destroy(&q);
}
END_TEST

START_TEST(test_close_drains_then_fails)
{
    td_queue q;
    void *it;
    ck_assert_int_eq(td_queue_init(&q, 4), 0);
    ck_assert_int_eq(td_queue_push(&q, ITEM(1)), 0);
    ck_assert_int_eq(td_queue_push(&q, ITEM(2)), 0);
    td_queue_close(&q);
    ck_assert_int_eq(td_queue_push(&q, ITEM(3)), TD_E_CLOSED);
    ck_assert_int_eq(td_queue_try_push(&q, ITEM(3)), TD_E_CLOSED);
    ck_assert_int_eq(td_queue_pop(&q, &it), 0);
    ck_assert_ptr_eq(it, ITEM(1));
    ck_assert_int_eq(td_queue_try_pop(&q, &it), 0);
    ck_assert_ptr_eq(it, ITEM(2));
    ck_assert_int_eq(td_queue_pop(&q, &it), TD_E_CLOSED);
    ck_assert_int_eq(td_queue_pop_timed(&q, &it, TD_NS_PER_S), TD_E_CLOSED);
    td_queue_destroy(&q);
}
END_TEST

static void *pop_until_closed(void *arg)
{
    void *it;
    return (void *)(intptr_t)td_queue_pop((td_queue *)arg, &it);
}

START_TEST(test_close_wakes_blocked_waiters)
{
    td_queue q;
    pthread_t t[3];
    void *res;
    ck_assert_int_eq(td_queue_init(&q, 2), 0);
    for (int i = 0; i < 3; i++)
        pthread_create(&t[i], NULL, pop_until_closed, &q);
    td_sleep_ns(20 * TD_NS_PER_MS); /* let them block */
    td_queue_close(&q);
    for (int i = 0; i < 3; i++) {
        pthread_join(t[i], &res);
        ck_assert_int_eq((int)(intptr_t)res, TD_E_CLOSED);
    }
    td_queue_destroy(&q);
}
END_TEST

START_TEST(test_drain)
{
    td_queue q;
    void *out[8];
    ck_assert_int_eq(td_queue_init(&q, 8), 0);
    for (int i = 0; i < 5; i++)
        td_queue_push(&q, ITEM(i + 1));
    ck_assert_uint_eq(td_queue_drain(&q, out, 3), 3);
    ck_assert_ptr_eq(out[0], ITEM(1));
    ck_assert_ptr_eq(out[2], ITEM(3));
    ck_assert_uint_eq(td_queue_drain(&q, out, 8), 2);
    ck_assert_ptr_eq(out[1], ITEM(5));
    ck_assert_uint_eq(td_queue_drain(&q, out, 8), 0);
    td_queue_destroy(&q);
}
END_TEST

/* ---- contention -------------------------------------------------------- */

enum { PRODUCERS = 4, CONSUMERS = 4, PER_PRODUCER = 20000 };

struct contention {
    td_queue q;
    unsigned char *seen; /* one byte per item; items never repeat */
    pthread_mutex_t mu;
    long popped;
};

struct producer_arg {
    struct contention *c;
    int id;
};

static void *producer(void *arg)
{
    struct producer_arg *p = arg;
    for (int i = 0; i < PER_PRODUCER; i++) {
        uintptr_t item = (uintptr_t)p->id * PER_PRODUCER + (uintptr_t)i + 1;
        /* Mix blocking and timed pushes to exercise both paths. */
        int rc = (i & 1) ? td_queue_push(&p->c->q, ITEM(item))
                         : td_queue_push_timed(&p->c->q, ITEM(item),
                                               10 * TD_NS_PER_S);
        if (rc)
            return (void *)1;
    }
    return NULL;
}

static void *consumer(void *arg)
{
    struct contention *c = arg;
    void *it;
    long mine = 0;
    int rc;
    while ((rc = td_queue_pop(&c->q, &it)) == 0) {
        uintptr_t v = (uintptr_t)it - 1;
        pthread_mutex_lock(&c->mu);
        c->seen[v]++;
        pthread_mutex_unlock(&c->mu);
        mine++;
    }
    pthread_mutex_lock(&c->mu);
    c->popped += mine;
    pthread_mutex_unlock(&c->mu);
    return rc == TD_E_CLOSED ? NULL : (void *)1;
}

START_TEST(test_contention_no_loss_no_dup)
{
    struct contention c;
    pthread_t pt[PRODUCERS], ct[CONSUMERS];
    struct producer_arg pa[PRODUCERS];
    void *res;
    const long total = (long)PRODUCERS * PER_PRODUCER;
    memset(&c, 0, sizeof c);
    ck_assert_int_eq(td_queue_init(&c.q, 16), 0); /* small: forces waits */
    c.seen = calloc((size_t)total, 1);
    pthread_mutex_init(&c.mu, NULL);
    for (int i = 0; i < CONSUMERS; i++)
        pthread_create(&ct[i], NULL, consumer, &c);
    for (int i = 0; i < PRODUCERS; i++) {
        pa[i] = (struct producer_arg){&c, i};
        pthread_create(&pt[i], NULL, producer, &pa[i]);
    }
    for (int i = 0; i < PRODUCERS; i++) {
        pthread_join(pt[i], &res);
        ck_assert_ptr_null(res);
    }
    td_queue_close(&c.q);
    for (int i = 0; i < CONSUMERS; i++) {
        pthread_join(ct[i], &res);
        ck_assert_ptr_null(res);
    }
    ck_assert_int_eq(c.popped, total);
    for (long i = 0; i < total; i++)
        ck_assert_int_eq(c.seen[i], 1);
    free(c.seen);
    pthread_mutex_destroy(&c.mu);
    td_queue_destroy(&c.q);
}
END_TEST

/* Per-producer order is preserved with one consumer (FIFO). */
START_TEST(test_fifo_per_producer)
{
    struct contention c;
    pthread_t pt[2];
    struct producer_arg pa[2];
    uintptr_t last[2] = {0, 0};
    void *it;
    memset(&c, 0, sizeof c);
    ck_assert_int_eq(td_queue_init(&c.q, 4), 0);
    for (int i = 0; i < 2; i++) {
        pa[i] = (struct producer_arg){&c, i};
        pthread_create(&pt[i], NULL, producer, &pa[i]);
    }
    for (long n = 0; n < 2L * PER_PRODUCER; n++) {
        ck_assert_int_eq(td_queue_pop(&c.q, &it), 0);
        uintptr_t v = (uintptr_t)it - 1;
        int who = (int)(v / PER_PRODUCER);
        ck_assert(v >= last[who]);
        last[who] = v;
    }
    for (int i = 0; i < 2; i++)
        pthread_join(pt[i], NULL);
    td_queue_destroy(&c.q);
}
END_TEST

static Suite *queue_suite(void)
{
    Suite *s = suite_create("queue");
    TCase *tc = tcase_create("single_thread");
    tcase_add_test(tc, test_fifo_and_bounds);
    tcase_add_test(tc, test_init_errors);
    tcase_add_test(tc, test_timed_waits);
    tcase_add_test(tc, test_close_drains_then_fails);
    tcase_add_test(tc, test_drain);
    suite_add_tcase(s, tc);
    tc = tcase_create("threads");
    tcase_add_test(tc, test_close_wakes_blocked_waiters);
    tcase_add_test(tc, test_contention_no_loss_no_dup);
    tcase_add_test(tc, test_fifo_per_producer);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(queue_suite)
