/* trace.h - a timeline recorder for Chrome trace JSON
 * (docs/design.md#where-each-metric-comes-from, docs/observability.md).
 *
 * Owns: a fixed array of events that any thread appends to while the
 * recorder is armed, and the conversion of those events into a Chrome
 * trace object (`traceEvents` with X slices, C counters, i instants and M
 * metadata naming the process and its tracks; `ts`/`dur` in microseconds).
 *
 * Cost: when disarmed every hook is one relaxed atomic load
 * (td_trace_on).  When armed an event costs two atomic increments and one
 * decrement (no lock); a full buffer drops further events and counts them.
 * Disarming waits for appends in flight, so the reader sees whole events.
 *
 * Tracks: the trainer thread, each decode worker, the checkpoint writer,
 * and two device tracks (copy, compute) built from the backend's event
 * times.  Each track's slices must not overlap: the writer of a track is
 * one thread that appends its slices in time order.
 *
 * Never: allocates while armed, blocks an appending thread, writes files.
 */
#ifndef TD_TRACE_H
#define TD_TRACE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

enum td_trace_track {
    TD_TRACK_TRAINER = 0,
    TD_TRACK_WRITER = 1,       /* checkpoint writer thread */
    TD_TRACK_DEV_COPY = 2,     /* device: host-to-device copies */
    TD_TRACK_DEV_COMPUTE = 3,  /* device: forward+backward+optimizer */
    TD_TRACK_STEPS = 4,        /* one slice per training step */
    TD_TRACK_WORKER0 = 16,     /* decode worker i: TD_TRACK_WORKER0 + i */
};

/* Public only for the inline test below; use the functions. */
typedef struct td_trace_head {
    atomic_int on;
} td_trace_head;

typedef struct td_trace td_trace;

/* cap: events kept per recording (>= 16). */
int td_trace_create(td_trace **out, size_t cap);
void td_trace_free(td_trace *t);

/* Is a recording under way?  One relaxed load; t may be NULL. */
static inline int td_trace_on(const td_trace *t)
{
    return t && atomic_load_explicit(&((const td_trace_head *)(const void *)t)
                                          ->on,
                                      memory_order_relaxed);
}

/* Starts a recording (events of an earlier one are dropped).  -EBUSY when
 * one is under way. */
int td_trace_arm(td_trace *t);
/* Stops appending and waits for appends in flight.  Idempotent. */
void td_trace_disarm(td_trace *t);

/* Appenders (any thread, while armed; no-ops otherwise).  Names and
 * details are static strings (they are kept by pointer).  step < 0: none. */
void td_trace_slice(td_trace *t, int track, const char *name,
                    int64_t start_ns, int64_t end_ns, int64_t step);
void td_trace_instant(td_trace *t, int track, const char *name,
                      int64_t ts_ns, const char *detail, int64_t step);
void td_trace_counter(td_trace *t, const char *name, int64_t ts_ns,
                      double value);

/* One training step as the trainer measured it (train.h's td_step_info
 * plus the checkpoint time the runner spent in it). */
typedef struct td_trace_step {
    int64_t step, start_ns, step_ns;
    int64_t data_wait_ns, h2d_ns, compute_ns, d2h_ns, checkpoint_ns;
    int64_t copy_ns;           /* device copy time; <= 0: none */
} td_trace_step;

/* Trainer thread: a "step" slice on the steps track, and the step's
 * phases end to end on the trainer track in the order they happen
 * (data_wait, h2d, compute, d2h, other, checkpoint).  They sum to step_ns
 * exactly: host phases are granted in the metrics' priority (checkpoint >
 * data_wait > h2d > d2h), then compute, and `other` is the rest.  Device
 * copy and compute slices are anchored at their host enqueue times, and
 * start no earlier than the end of the previous slice on their track. */
void td_trace_add_step(td_trace *t, const td_trace_step *s);

/* After disarm: events kept and events dropped for lack of room. */
size_t td_trace_count(const td_trace *t);
uint64_t td_trace_dropped(const td_trace *t);

/* After disarm: the Chrome trace object (new reference), timestamps in µs
 * relative to origin_ns, or to the earliest event when one began before it
 * (no timestamp is negative).  `process` names the process; `pid` is its id in
 * the trace.  NULL on allocation failure. */
json_t *td_trace_json(const td_trace *t, const char *process, long pid,
                      int64_t origin_ns);

/* The track's name ("trainer", "decode 0", "device copy"...). */
void td_trace_track_name(int track, char *buf, size_t cap);

#endif
