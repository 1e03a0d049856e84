/* trace.c - the timeline recorder (see trace.h).
 *
 * Owns: the event array, the append cursor and the in-flight count.
 * An append is: in_flight++, check `on`, claim an index with fetch_add,
 * fill the event, in_flight--.  Disarm clears `on` and then waits until
 * in_flight is zero, so every claimed event is complete afterwards (an
 * appender that saw `on` before the store still finishes its event;
 * one that increments after it sees `on` == 0 and leaves).
 * Never: takes a lock on the append path, allocates while armed.
 */
#define _GNU_SOURCE
#include "obs/trace.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct td__tev {
    int64_t ts_ns, dur_ns, step;
    const char *name, *detail;
    double value;
    int32_t track;
    char ph;                   /* 'X', 'i', 'C' */
} td__tev;

struct td_trace {
    td_trace_head head;        /* first: td_trace_on() reads it */
    atomic_int in_flight;
    _Atomic size_t next;
    _Atomic uint64_t dropped;
    size_t cap;
    td__tev *ev;
    int64_t copy_end, compute_end; /* td_trace_step's device tracks */
};

int td_trace_create(td_trace **out, size_t cap)
{
    td_trace *t;
    *out = NULL;
    if (cap < 16)
        return -EINVAL;
    if (!(t = calloc(1, sizeof *t)))
        return -ENOMEM;
    if (!(t->ev = calloc(cap, sizeof *t->ev))) {
        free(t);
        return -ENOMEM;
    }
    t->cap = cap;
    *out = t;
    return 0;
}

void td_trace_free(td_trace *t)
{
    if (!t)
        return;
    td_trace_disarm(t);
    free(t->ev);
    free(t);
}

int td_trace_arm(td_trace *t)
{
    if (atomic_load(&t->head.on))
        return -EBUSY;
    atomic_store(&t->next, 0);
    atomic_store(&t->dropped, 0);
    t->copy_end = t->compute_end = 0;
    atomic_store(&t->head.on, 1);
    return 0;
}

void td_trace_disarm(td_trace *t)
{
    atomic_store(&t->head.on, 0);
    while (atomic_load(&t->in_flight) > 0)
        sched_yield();
}

static td__tev *td__claim(td_trace *t)
{
    atomic_fetch_add(&t->in_flight, 1);
    if (!atomic_load(&t->head.on)) {
        atomic_fetch_sub(&t->in_flight, 1);
        return NULL;
    }
    size_t i = atomic_fetch_add_explicit(&t->next, 1, memory_order_relaxed);
    if (i >= t->cap) {
        atomic_fetch_add_explicit(&t->dropped, 1, memory_order_relaxed);
        atomic_fetch_sub(&t->in_flight, 1);
        return NULL;
    }
    return &t->ev[i];
}

static void td__release(td_trace *t)
{
    atomic_fetch_sub(&t->in_flight, 1);
}

void td_trace_slice(td_trace *t, int track, const char *name,
                    int64_t start_ns, int64_t end_ns, int64_t step)
{
    td__tev *e;
    if (!td_trace_on(t) || !(e = td__claim(t)))
        return;
    *e = (td__tev){.ts_ns = start_ns,
                   .dur_ns = end_ns > start_ns ? end_ns - start_ns : 0,
                   .step = step, .name = name, .track = track, .ph = 'X'};
    td__release(t);
}

void td_trace_instant(td_trace *t, int track, const char *name,
                      int64_t ts_ns, const char *detail, int64_t step)
{
    td__tev *e;
    if (!td_trace_on(t) || !(e = td__claim(t)))
        return;
    *e = (td__tev){.ts_ns = ts_ns, .step = step, .name = name,
                   .detail = detail, .track = track, .ph = 'i'};
    td__release(t);
}

void td_trace_counter(td_trace *t, const char *name, int64_t ts_ns,
                      double value)
{
    td__tev *e;
    if (!td_trace_on(t) || !(e = td__claim(t)))
        return;
    *e = (td__tev){.ts_ns = ts_ns, .step = -1, .name = name, .value = value,
                   .track = TD_TRACK_TRAINER, .ph = 'C'};
    td__release(t);
}

static int64_t td__grant(int64_t want, int64_t *left)
{
    int64_t d = want < 0 ? 0 : want < *left ? want : *left;
    *left -= d;
    return d;
}

void td_trace_add_step(td_trace *t, const td_trace_step *s)
{
    enum { CK, DW, H2D, D2H, COMP, OTHER, N };
    static const char *names[N] = {"checkpoint", "data_wait", "h2d", "d2h",
                                   "compute", "other"};
    static const int order[N] = {CK, DW, H2D, COMP, D2H, OTHER};
    int64_t d[N], left = s->step_ns > 0 ? s->step_ns : 0;
    if (!td_trace_on(t))
        return;
    d[CK] = td__grant(s->checkpoint_ns, &left);
    d[DW] = td__grant(s->data_wait_ns, &left);
    d[H2D] = td__grant(s->h2d_ns, &left);
    d[D2H] = td__grant(s->d2h_ns, &left);
    d[COMP] = td__grant(s->compute_ns, &left);
    d[OTHER] = left;
    td_trace_slice(t, TD_TRACK_STEPS, "step", s->start_ns,
                   s->start_ns + (s->step_ns > 0 ? s->step_ns : 0), s->step);
    int64_t at = s->start_ns;
    for (int i = 0; i < N; i++) {
        int k = order[i];
        if (d[k] > 0)
            td_trace_slice(t, TD_TRACK_TRAINER, names[k], at, at + d[k],
                           s->step);
        at += d[k];
    }
    int64_t c0 = s->start_ns + d[CK] + d[DW];
    if (s->copy_ns > 0) {
        c0 = c0 > t->copy_end ? c0 : t->copy_end;
        td_trace_slice(t, TD_TRACK_DEV_COPY, "copy", c0, c0 + s->copy_ns,
                       s->step);
        t->copy_end = c0 + s->copy_ns;
    }
    int64_t k0 = s->start_ns + d[CK] + d[DW] + d[H2D];
    if (s->compute_ns > 0) {
        k0 = k0 > t->compute_end ? k0 : t->compute_end;
        td_trace_slice(t, TD_TRACK_DEV_COMPUTE, "compute", k0,
                       k0 + s->compute_ns, s->step);
        t->compute_end = k0 + s->compute_ns;
    }
}

size_t td_trace_count(const td_trace *t)
{
    size_t n = atomic_load(&t->next);
    return n < t->cap ? n : t->cap;
}

uint64_t td_trace_dropped(const td_trace *t)
{
    return atomic_load(&t->dropped);
}

void td_trace_track_name(int track, char *buf, size_t cap)
{
    switch (track) {
    case TD_TRACK_TRAINER:
        snprintf(buf, cap, "trainer");
        break;
    case TD_TRACK_WRITER:
        snprintf(buf, cap, "checkpoint writer");
        break;
    case TD_TRACK_DEV_COPY:
        snprintf(buf, cap, "device copy");
        break;
    case TD_TRACK_DEV_COMPUTE:
        snprintf(buf, cap, "device compute");
        break;
    case TD_TRACK_STEPS:
        snprintf(buf, cap, "steps");
        break;
    default:
        snprintf(buf, cap, "decode %d", track - TD_TRACK_WORKER0);
    }
}

/* ---- Chrome trace JSON ------------------------------------------------ */

static double td__us(int64_t ns) { return (double)ns / 1e3; }

static json_t *td__meta(const char *what, long pid, long tid,
                        const char *name)
{
    return json_pack("{s:s, s:s, s:I, s:I, s:{s:s}}", "name", what, "ph", "M",
                     "pid", (json_int_t)pid, "tid", (json_int_t)tid, "args",
                     "name", name);
}

static json_t *td__event(const td__tev *e, long pid, int64_t origin_ns)
{
    json_t *o = json_pack("{s:s, s:s, s:I, s:I, s:f}", "name", e->name, "ph",
                          (char[2]){e->ph, 0}, "pid", (json_int_t)pid, "tid",
                          (json_int_t)e->track, "ts",
                          td__us(e->ts_ns - origin_ns));
    json_t *args = json_object();
    if (!o || !args) {
        json_decref(o);
        json_decref(args);
        return NULL;
    }
    if (e->ph == 'X')
        json_object_set_new(o, "dur", json_real(td__us(e->dur_ns)));
    if (e->ph == 'i')
        json_object_set_new(o, "s", json_string("t"));
    if (e->ph == 'C')
        json_object_set_new(args, "value", json_real(e->value));
    if (e->step >= 0)
        json_object_set_new(args, "step", json_integer(e->step));
    if (e->detail)
        json_object_set_new(args, "detail", json_string(e->detail));
    json_object_set_new(o, "args", args);
    return o;
}

/* Event order in the file: by time, ties in the order recorded (a step's
 * slices are recorded when it is reported, after the instants of the
 * boundary that followed it). */
typedef struct td__ord {
    int64_t ts_ns;
    size_t i;
} td__ord;

static int td__by_time(const void *a, const void *b)
{
    const td__ord *x = a, *y = b;
    if (x->ts_ns != y->ts_ns)
        return (x->ts_ns > y->ts_ns) - (x->ts_ns < y->ts_ns);
    return (x->i > y->i) - (x->i < y->i);
}

json_t *td_trace_json(const td_trace *t, const char *process, long pid,
                      int64_t origin_ns)
{
    size_t n = td_trace_count(t);
    json_t *evs = json_array();
    json_t *root = json_pack("{s:o, s:s, s:{s:I}}", "traceEvents", evs,
                             "displayTimeUnit", "ms", "otherData", "dropped",
                             (json_int_t)td_trace_dropped(t));
    char name[64];
    uint8_t seen[256] = {0};
    if (!root)
        return NULL;
    /* A slice may have begun before the recording was armed (a decode in
     * flight, a step whose wall time starts where the settled one before
     * it ended): the time line starts at the earliest, never below 0. */
    for (size_t i = 0; i < n; i++)
        if (t->ev[i].ts_ns < origin_ns)
            origin_ns = t->ev[i].ts_ns;
    json_array_append_new(evs, td__meta("process_name", pid, 0, process));
    for (size_t i = 0; i < n; i++) {
        int tr = t->ev[i].track;
        if (t->ev[i].ph == 'C' || tr < 0 || tr >= 256 || seen[tr])
            continue;
        seen[tr] = 1;
        td_trace_track_name(tr, name, sizeof name);
        json_array_append_new(evs, td__meta("thread_name", pid, tr, name));
        json_array_append_new(
            evs, json_pack("{s:s, s:s, s:I, s:I, s:{s:i}}", "name",
                           "thread_sort_index", "ph", "M", "pid",
                           (json_int_t)pid, "tid", (json_int_t)tr, "args",
                           "sort_index", tr));
    }
    td__ord *ord = malloc((n ? n : 1) * sizeof *ord);
    if (!ord) {
        json_decref(root);
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        ord[i] = (td__ord){t->ev[i].ts_ns, i};
    qsort(ord, n, sizeof *ord, td__by_time);
    for (size_t i = 0; i < n; i++) {
        json_t *e = td__event(&t->ev[ord[i].i], pid, origin_ns);
        if (!e || json_array_append_new(evs, e)) {
            free(ord);
            json_decref(root);
            return NULL;
        }
    }
    free(ord);
    return root;
}
