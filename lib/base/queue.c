/* queue.c - bounded MPMC queue (see queue.h). */
#include "base/queue.h"

#include <errno.h>
#include <stdlib.h>

#include "base/clock.h"
#include "base/error.h"

int td_queue_init(td_queue *q, size_t cap)
{
    pthread_condattr_t ca;
    int rc;
    if (!q || cap == 0)
        return -EINVAL;
    q->items = calloc(cap, sizeof *q->items);
    if (!q->items)
        return -ENOMEM;
    q->cap = cap;
    q->head = q->len = 0;
    q->closed = 0;
    rc = pthread_mutex_init(&q->mu, NULL);
    if (rc)
        goto fail_mu;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    rc = pthread_cond_init(&q->not_empty, &ca);
    if (rc)
        goto fail_ne;
    rc = pthread_cond_init(&q->not_full, &ca);
    if (rc)
        goto fail_nf;
    pthread_condattr_destroy(&ca);
    return 0;
fail_nf:
    pthread_cond_destroy(&q->not_empty);
fail_ne:
    pthread_condattr_destroy(&ca);
    pthread_mutex_destroy(&q->mu);
fail_mu:
    free(q->items);
    q->items = NULL;
    return -rc;
}

void td_queue_destroy(td_queue *q)
{
    if (!q || !q->items)
        return;
    pthread_cond_destroy(&q->not_full);
    pthread_cond_destroy(&q->not_empty);
    pthread_mutex_destroy(&q->mu);
    free(q->items);
    q->items = NULL;
}

/* Is the queue ready for a push (for_pop == 0) or a pop (for_pop == 1)?
 * Closing makes both ready, so that waiters wake up and see it. */
static int td__ready(const td_queue *q, int for_pop)
{
    if (q->closed)
        return 1;
    return for_pop ? q->len > 0 : q->len < q->cap;
}

/* With q->mu held, waits until td__ready(q, for_pop).  mode: 0 never
 * waits, < 0 waits forever, > 0 waits until the deadline dl.  Returns 0
 * when ready, else -EAGAIN (mode 0) or TD_E_TIMEDOUT. */
static int td__wait(td_queue *q, int for_pop, int mode,
                    const struct timespec *dl)
{
    pthread_cond_t *cv = for_pop ? &q->not_empty : &q->not_full;
    while (!td__ready(q, for_pop)) {
        if (mode == 0)
            return -EAGAIN;
        if (mode < 0)
            pthread_cond_wait(cv, &q->mu);
        else if (pthread_cond_timedwait(cv, &q->mu, dl) == ETIMEDOUT &&
                 !td__ready(q, for_pop))
            return TD_E_TIMEDOUT;
    }
    return 0;
}

static int td__push(td_queue *q, void *item, int mode, int64_t timeout_ns)
{
    struct timespec dl = mode > 0 ? td_deadline_ts(timeout_ns)
                                  : (struct timespec){0, 0};
    int rc;
    pthread_mutex_lock(&q->mu);
    rc = td__wait(q, 0, mode, &dl);
    if (rc == 0 && q->closed)
        rc = TD_E_CLOSED;
    if (rc == 0) {
        q->items[(q->head + q->len) % q->cap] = item;
        q->len++;
        pthread_cond_signal(&q->not_empty);
    }
    pthread_mutex_unlock(&q->mu);
    return rc;
}

static int td__pop(td_queue *q, void **item, int mode, int64_t timeout_ns)
{
    struct timespec dl = mode > 0 ? td_deadline_ts(timeout_ns)
                                  : (struct timespec){0, 0};
    int rc;
    pthread_mutex_lock(&q->mu);
    rc = td__wait(q, 1, mode, &dl);
    if (rc == 0 && q->len == 0)
        rc = TD_E_CLOSED;
    if (rc == 0) {
        *item = q->items[q->head];
        q->head = (q->head + 1) % q->cap;
        q->len--;
        pthread_cond_signal(&q->not_full);
    }
    pthread_mutex_unlock(&q->mu);
    return rc;
}

int td_queue_push(td_queue *q, void *item) { return td__push(q, item, -1, 0); }
int td_queue_try_push(td_queue *q, void *item)
{
    return td__push(q, item, 0, 0);
}
int td_queue_push_timed(td_queue *q, void *item, int64_t timeout_ns)
{
    return td__push(q, item, 1, timeout_ns);
}
int td_queue_pop(td_queue *q, void **item) { return td__pop(q, item, -1, 0); }
int td_queue_try_pop(td_queue *q, void **item)
{
    return td__pop(q, item, 0, 0);
}
int td_queue_pop_timed(td_queue *q, void **item, int64_t timeout_ns)
{
    return td__pop(q, item, 1, timeout_ns);
}

size_t td_queue_drain(td_queue *q, void **items, size_t max)
{
    size_t n = 0;
    pthread_mutex_lock(&q->mu);
    while (n < max && q->len > 0) {
        items[n++] = q->items[q->head];
        q->head = (q->head + 1) % q->cap;
        q->len--;
    }
    if (n)
        pthread_cond_broadcast(&q->not_full);
    pthread_mutex_unlock(&q->mu);
    return n;
}

void td_queue_close(td_queue *q)
{
    pthread_mutex_lock(&q->mu);
    q->closed = 1;
    pthread_cond_broadcast(&q->not_empty);
    pthread_cond_broadcast(&q->not_full);
    pthread_mutex_unlock(&q->mu);
}

size_t td_queue_len(td_queue *q)
{
    pthread_mutex_lock(&q->mu);
    size_t n = q->len;
    pthread_mutex_unlock(&q->mu);
    return n;
}
