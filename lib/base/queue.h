/* queue.h - a bounded multi-producer/multi-consumer queue of pointers.
 *
 * The hand-off between traind's threads: decode workers -> trainer,
 * trainer -> checkpoint writer, any thread -> the loop (with uv_async_send).
 * A mutex and two condition variables on CLOCK_MONOTONIC; FIFO order.
 *
 * Closing wakes every waiter: further pushes fail with TD_E_CLOSED, pops
 * still drain what is queued and then fail with TD_E_CLOSED.  The queue
 * never owns the items; whoever pops one owns it.
 */
#ifndef TD_QUEUE_H
#define TD_QUEUE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

typedef struct td_queue {
    pthread_mutex_t mu;
    pthread_cond_t not_empty;
    pthread_cond_t not_full;
    void **items;
    size_t cap, head, len;
    int closed;
} td_queue;

/* cap >= 1.  Returns 0, -EINVAL or -ENOMEM. */
int td_queue_init(td_queue *q, size_t cap);
/* Frees the storage; no thread may be using the queue. */
void td_queue_destroy(td_queue *q);

/* Blocks while full.  0, or TD_E_CLOSED. */
int td_queue_push(td_queue *q, void *item);
/* Never blocks.  0, -EAGAIN when full, or TD_E_CLOSED. */
int td_queue_try_push(td_queue *q, void *item);
/* Waits at most timeout_ns.  0, TD_E_TIMEDOUT, or TD_E_CLOSED. */
int td_queue_push_timed(td_queue *q, void *item, int64_t timeout_ns);

/* Blocks while empty.  0, or TD_E_CLOSED once closed and drained. */
int td_queue_pop(td_queue *q, void **item);
/* Never blocks.  0, -EAGAIN when empty, or TD_E_CLOSED. */
int td_queue_try_pop(td_queue *q, void **item);
/* Waits at most timeout_ns.  0, TD_E_TIMEDOUT, or TD_E_CLOSED. */
int td_queue_pop_timed(td_queue *q, void **item, int64_t timeout_ns);

/* Pops up to max items without blocking (for draining after a wake-up).
 * Returns the number popped. */
size_t td_queue_drain(td_queue *q, void **items, size_t max);

void td_queue_close(td_queue *q);
size_t td_queue_len(td_queue *q);

#endif
