/* tally.h - how far a long operation on one thread has got, for another
 * thread to show while it runs.
 *
 * A daemon's submit lists and checks every file of a job's datasets on a
 * threadpool thread (a million files on a network disk take minutes);
 * the loop thread reads the tally twice a second and sends it to the
 * client, whose progress line shows it.  The worker names its stage
 * (static text: "listing data.train") and counts; the reader sees a
 * recent count, never a torn one.  A stage's count starts at 0.  Relaxed
 * atomics: nothing else is ordered by them.
 *
 * Every function takes NULL for "nobody watches", so code that counts
 * need not ask.
 *
 * A counting thread that must say how far it is itself (a job's start
 * lists its dataset on the trainer thread, and its log is what `trainctl
 * watch` shows then) sets tick: td_tally_add calls it on the counting
 * thread, at most once per tick_every_ns (looking at the clock once per
 * 1024 counts).
 */
#ifndef TD_BASE_TALLY_H
#define TD_BASE_TALLY_H

#include <stdatomic.h>
#include <stdint.h>

#include "base/clock.h"

typedef struct td_tally {
    const char *_Atomic stage; /* static text, or NULL before any */
    const char *_Atomic unit;  /* static text: "samples", "files" */
    _Atomic uint64_t done;
    _Atomic uint64_t total;    /* 0: not known */
    /* optional, the counting thread's alone: */
    void (*tick)(struct td_tally *t, void *user);
    void *tick_user;
    int64_t tick_every_ns;
    int64_t tick_last_ns;      /* 0: from the stage's start */
} td_tally;

/* A new stage: done back to 0, total (0: not known) of unit. */
static inline void td_tally_stage(td_tally *t, const char *stage,
                                  const char *unit, uint64_t total)
{
    if (!t)
        return;
    atomic_store_explicit(&t->done, 0, memory_order_relaxed);
    atomic_store_explicit(&t->total, total, memory_order_relaxed);
    atomic_store_explicit(&t->unit, unit, memory_order_relaxed);
    atomic_store_explicit(&t->stage, stage, memory_order_relaxed);
    if (t->tick)
        t->tick_last_ns = td_now_ns();
}

static inline void td_tally_add(td_tally *t, uint64_t n)
{
    if (!t)
        return;
    uint64_t was = atomic_fetch_add_explicit(&t->done, n,
                                             memory_order_relaxed);
    if (t->tick && (was >> 10) != ((was + n) >> 10)) {
        int64_t now = td_now_ns();
        if (now - t->tick_last_ns >= t->tick_every_ns) {
            t->tick_last_ns = now;
            t->tick(t, t->tick_user);
        }
    }
}

/* A copy for the reader (stage NULL: nothing started yet). */
typedef struct td_tally_seen {
    const char *stage, *unit;
    uint64_t done, total;
} td_tally_seen;

static inline td_tally_seen td_tally_read(td_tally *t)
{
    td_tally_seen s = {
        atomic_load_explicit(&t->stage, memory_order_relaxed),
        atomic_load_explicit(&t->unit, memory_order_relaxed),
        atomic_load_explicit(&t->done, memory_order_relaxed),
        atomic_load_explicit(&t->total, memory_order_relaxed)};
    return s;
}

#endif
