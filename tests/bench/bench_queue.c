/* bench_queue.c - hand-off rate through td_queue with 1..4 producer and
 * consumer threads.  Prints figures; never fails on speed. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

#include "base/clock.h"
#include "base/queue.h"

enum { ITEMS = 400000 };

struct arg { td_queue *q; long n; };

static void *prod(void *p)
{
    struct arg *a = p;
    for (long i = 0; i < a->n; i++)
        td_queue_push(a->q, (void *)(uintptr_t)(i + 1));
    return NULL;
}

static void *cons(void *p)
{
    struct arg *a = p;
    void *it;
    while (td_queue_pop(a->q, &it) == 0)
        ;
    return NULL;
}

int main(void)
{
    for (int t = 1; t <= 4; t *= 2) {
        td_queue q;
        pthread_t pt[4], ct[4];
        struct arg pa = {&q, ITEMS / t};
        td_queue_init(&q, 64);
        int64_t t0 = td_now_ns();
        for (int i = 0; i < t; i++) {
            pthread_create(&ct[i], NULL, cons, &pa);
            pthread_create(&pt[i], NULL, prod, &pa);
        }
        for (int i = 0; i < t; i++)
            pthread_join(pt[i], NULL);
        td_queue_close(&q);
        for (int i = 0; i < t; i++)
            pthread_join(ct[i], NULL);
        double s = td_elapsed_s(t0);
        printf("queue %d producer(s) x %d consumer(s): %.2f M items/s\n", t, t,
               (double)(pa.n * t) / s / 1e6);
        td_queue_destroy(&q);
    }
    return 0;
}
