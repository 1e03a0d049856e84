/* sim_stream.c - simulated streams, events, host functions, device-wide
 * synchronisation and the entry for kernels and library work.
 *
 * Owns: one worker thread per stream that runs the stream's queue in
 * order (each device's legacy default stream is created on first use);
 * the legacy stream's implicit synchronisation with blocking streams
 * (streams created without cudaStreamNonBlocking wait for it and it waits
 * for them); events (record, query, synchronize, elapsed time, waits from
 * other streams, which capture the most recent record at the time of the
 * wait); the vector clocks the race detector reads (a stream's clock
 * grows at each operation, takes the host's knowledge at each enqueue and
 * an event's clock at each cudaStreamWaitEvent; the host's clock takes a
 * stream's or event's at each completed synchronisation); jitter
 * (TD_SIM_JITTER: random delays before operations, seeded per stream);
 * injected kernel faults (TD_SIM_FAULT_KERNEL), after which the device's
 * sticky error skips all its later work; event times moved on by
 * td_sim_advance_clock; counts of host functions and whole-stream syncs.
 * Never does: run device work on the calling thread, or let a host
 * function call CUDA (cudaErrorNotPermitted, as documented).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sim_int.h"

__thread int td__sim_in_hostfn;

static uint64_t td__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void td__sim_join(uint64_t *dst, const uint64_t *src)
{
    for (int i = 0; i < td__sim.nstreams; i++)
        if (src[i] > dst[i])
            dst[i] = src[i];
}

static uint64_t td__rand(uint64_t *s)
{
    uint64_t x = *s += 0x9E3779B97F4A7C15u; /* splitmix64 */
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9u;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBu;
    return x ^ (x >> 31);
}

/* ---- workers ---------------------------------------------------------------- */

static void td__jitter(struct CUstream_st *s)
{
    uint64_t r = td__rand(&s->rng);
    if (r % 3 != 0)
        return;
    struct timespec ts = {0, (long)((r >> 16) % 1500000)}; /* < 1.5 ms */
    nanosleep(&ts, NULL);
}

static void *td__worker(void *p)
{
    struct CUstream_st *s = p;
    pthread_mutex_lock(&td__sim.mu);
    for (;;) {
        while (!s->head && !s->quit)
            pthread_cond_wait(&td__sim.cv, &td__sim.mu);
        td_sim_op *op = s->head;
        if (!op)
            break;
        if (op->kind == TD_SIM_OP_WAIT) {
            while (op->ws->done < op->wseq)
                pthread_cond_wait(&td__sim.cv, &td__sim.mu);
        } else {
            for (int i = 0; op->after && i < td__sim.nstreams; i++)
                while (td__sim.streams[i]->done < op->after[i])
                    pthread_cond_wait(&td__sim.cv, &td__sim.mu);
            int jitter = td__sim.jitter != 0;
            pthread_mutex_unlock(&td__sim.mu);
            if (jitter)
                td__jitter(s);
            pthread_mutex_lock(&td__sim.mu);
            td_sim_dev *dv = &td__sim.dev[s->dev];
            if (op->kind == TD_SIM_OP_RECORD) {
                if (op->ev->s == s && op->ev->seq == op->seq)
                    op->ev->t_ns = td__now_ns() + td__sim.clock_skew;
            } else if (op->fault && !dv->sticky) {
                cudaError_t f = op->fault == 1 ? td__sim.fault_error
                                               : cudaErrorIllegalAddress;
                td__sim_say("%s: %s makes a sticky %s on device %d",
                            op->what, op->fault == 1
                            ? "the injected fault (TD_SIM_FAULT_KERNEL)"
                            : "a pointer outside its memory",
                            cudaGetErrorName(f), s->dev);
                dv->sticky = f;
            } else if (!dv->sticky && op->run) {
                pthread_mutex_unlock(&td__sim.mu);
                td__sim_in_hostfn = op->hostfn;
                op->run(op->ctx);
                td__sim_in_hostfn = 0;
                pthread_mutex_lock(&td__sim.mu);
            }
        }
        s->head = op->next;
        if (!s->head)
            s->tail = NULL;
        s->done = op->seq;
        pthread_cond_broadcast(&td__sim.cv);
        struct td_sim_body *body = op->body;
        int last = body && td__sim_body_unref(body);
        pthread_mutex_unlock(&td__sim.mu);
        if (op->drop)
            op->drop(op->ctx);
        if (last)
            td__sim_body_free(body);
        free(op->after);
        free(op);
        pthread_mutex_lock(&td__sim.mu);
    }
    pthread_mutex_unlock(&td__sim.mu);
    return NULL;
}

/* A new stream on device dev (mutex held). */
static struct CUstream_st *td__stream_new(int dev, unsigned flags, int legacy,
                                          cudaError_t *e)
{
    if (td__sim.nstreams == TD_SIM_MAX_STREAMS) {
        td__sim_say("more than %d streams since the last reset",
                    TD_SIM_MAX_STREAMS);
        *e = cudaErrorMemoryAllocation;
        return NULL;
    }
    struct CUstream_st *s = calloc(1, sizeof *s);
    if (!s) {
        *e = cudaErrorMemoryAllocation;
        return NULL;
    }
    s->id = td__sim.nstreams;
    s->dev = dev;
    s->flags = flags;
    s->legacy = legacy;
    s->rng = td__sim.jitter * 0x2545F4914F6CDD1Du + (uint64_t)s->id;
    if (pthread_create(&s->th, NULL, td__worker, s)) {
        free(s);
        *e = cudaErrorMemoryAllocation;
        return NULL;
    }
    td__sim.streams[td__sim.nstreams++] = s;
    return s;
}

struct CUstream_st *td__sim_stream(cudaStream_t h)
{
    int d = td__sim_cur();
    if (!h || h == cudaStreamLegacy || h == cudaStreamPerThread) {
        if (!td__sim.dev[d].legacy) {
            cudaError_t e;
            td__sim.dev[d].legacy = td__stream_new(d, 0, 1, &e);
        }
        return td__sim.dev[d].legacy;
    }
    for (int i = 0; i < td__sim.nstreams; i++)
        if (td__sim.streams[i] == h) {
            if (h->dead) {
                td__sim_say("use of a destroyed stream");
                return NULL;
            }
            if (h->dev != d) {
                td__sim_say("stream of device %d used while device %d is "
                            "current", h->dev, d);
                return NULL;
            }
            return h;
        }
    td__sim_say("%p is not a stream", (void *)h);
    return NULL;
}

struct CUstream_st *td__sim_gate_stream(cudaStream_t h, cudaError_t *e)
{
    *e = td__sim_gate();
    struct CUstream_st *s = *e == cudaSuccess ? td__sim_stream(h) : NULL;
    if (*e == cudaSuccess && !s)
        *e = cudaErrorInvalidResourceHandle;
    return s;
}

/* ---- operations --------------------------------------------------------------- */

void td__sim_op_push(struct CUstream_st *s, td_sim_op *op)
{
    if (s->race_pending) {
        s->race_pending = 0;
        op->after = malloc(sizeof s->race_after);
        if (!op->after)
            abort(); /* test tool */
        memcpy(op->after, s->race_after, sizeof s->race_after);
        memset(s->race_after, 0, sizeof s->race_after);
    }
    if (s->tail)
        s->tail->next = op;
    else
        s->head = op;
    s->tail = op;
    pthread_cond_broadcast(&td__sim.cv);
}

static td_sim_op *td__op_alloc(struct CUstream_st *s,
                               enum td_sim_op_kind kind)
{
    td_sim_op *op = calloc(1, sizeof *op);
    if (!op)
        abort(); /* test tool: no way to report this through CUDA */
    op->kind = kind;
    op->seq = ++s->enq;
    s->vc[s->id] = s->enq;
    return op;
}

static void td__implicit_wait(struct CUstream_st *s, struct CUstream_st *on)
{
    td__sim_join(s->vc, on->vc);
    if (on->done >= on->enq)
        return;
    td_sim_op *w = td__op_alloc(s, TD_SIM_OP_WAIT);
    w->ws = on;
    w->wseq = on->enq;
    w->what = "legacy stream";
    td__sim_op_push(s, w);
}

td_sim_op *td__sim_op_new(struct CUstream_st *s, enum td_sim_op_kind kind)
{
    td__sim_join(s->vc, td__sim.host);
    if (s->legacy) {
        for (int i = 0; i < td__sim.nstreams; i++) {
            struct CUstream_st *b = td__sim.streams[i];
            if (b != s && b->dev == s->dev && !b->dead &&
                !(b->flags & cudaStreamNonBlocking))
                td__implicit_wait(s, b);
        }
    } else if (!(s->flags & cudaStreamNonBlocking) &&
               td__sim.dev[s->dev].legacy) {
        td__implicit_wait(s, td__sim.dev[s->dev].legacy);
    }
    return td__op_alloc(s, kind);
}

void td__sim_wait(struct CUstream_st *s, uint64_t seq, const uint64_t *vc,
                  int spin)
{
    if (s->done < seq && spin)
        td__sim.spin_waits++;
    while (s->done < seq)
        pthread_cond_wait(&td__sim.cv, &td__sim.mu);
    if (vc)
        td__sim_join(td__sim.host, vc);
}

/* Whether a host wait on device dev would busy-wait (no blocking-sync
 * flag on the event or the device). */
static int td__spins(int dev, const struct CUevent_st *ev)
{
    if (td__sim.dev[dev].flags & cudaDeviceScheduleBlockingSync)
        return 0;
    return !ev || !(ev->flags & cudaEventBlockingSync);
}

void td__sim_drain_dev(int dev)
{
    for (int i = 0; i < td__sim.nstreams; i++) {
        struct CUstream_st *s = td__sim.streams[i];
        if (s->dev == dev && !s->dead) {
            td_sim_vc vc;
            memcpy(vc, s->vc, sizeof vc);
            td__sim_wait(s, s->enq, vc, 0);
        }
    }
}

/* ---- streams ------------------------------------------------------------------- */

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *out, unsigned flags)
{
    td__sim_lock();
    cudaError_t e = td__sim_gate();
    if (e == cudaSuccess && (!out || (flags & ~cudaStreamNonBlocking)))
        e = cudaErrorInvalidValue;
    if (e == cudaSuccess)
        *out = td__stream_new(td__sim_cur(), flags, 0, &e);
    td__sim_unlock();
    return td__sim_err(e);
}

cudaError_t cudaStreamCreate(cudaStream_t *out)
{
    return cudaStreamCreateWithFlags(out, cudaStreamDefault);
}

/* Waits for the stream's work, then ends its worker (the real call
 * returns at once and releases the stream later; the handle is invalid
 * either way). */
cudaError_t cudaStreamDestroy(cudaStream_t h)
{
    td__sim_lock();
    cudaError_t e = td__sim_gate();
    if (e == cudaErrorNotPermitted)
        goto out;
    struct CUstream_st *s = td__sim_stream(h);
    if (!s || s->legacy) {
        e = cudaErrorInvalidResourceHandle;
        goto out;
    }
    s->quit = 1;
    s->dead = 1;
    pthread_cond_broadcast(&td__sim.cv);
    td__sim_unlock();
    pthread_join(s->th, NULL);
    return td__sim_err(e);
out:
    td__sim_unlock();
    return td__sim_err(e);
}

/* Mutex held.  td__sim_gate_stream() for a call a capturing stream
 * refuses: NULL with *e set also when h is capturing (the capture then
 * invalidated, td__sim_cap_refuse). */
static struct CUstream_st *td__stream_idle(cudaStream_t h, const char *call,
                                           cudaError_t *e)
{
    struct CUstream_st *s = td__sim_gate_stream(h, e);
    if (s && s->cap) {
        *e = td__sim_cap_refuse(s, call, "the stream is capturing",
                                cudaErrorStreamCaptureUnsupported);
        s = NULL;
    }
    return s;
}

cudaError_t cudaStreamSynchronize(cudaStream_t h)
{
    td__sim_lock();
    cudaError_t e;
    struct CUstream_st *s = td__stream_idle(h, "cudaStreamSynchronize", &e);
    if (s) {
        td_sim_vc vc;
        td__sim.stream_syncs++;
        memcpy(vc, s->vc, sizeof vc);
        td__sim_wait(s, s->enq, vc, td__spins(s->dev, NULL));
        e = td__sim.dev[s->dev].sticky; /* an error of the work waited for */
    }
    td__sim_unlock();
    return td__sim_err(e);
}

cudaError_t cudaStreamQuery(cudaStream_t h)
{
    td__sim_lock();
    cudaError_t e;
    struct CUstream_st *s = td__stream_idle(h, "cudaStreamQuery", &e);
    if (s) {
        if (s->done < s->enq)
            e = cudaErrorNotReady;
        else
            td__sim_join(td__sim.host, s->vc);
    }
    td__sim_unlock();
    /* Kept as the thread's last error like any other, as PyTorch's stream
     * and event queries assume (they clear it): a kernel launcher's
     * cudaGetLastError after a query left "not ready" would fail. */
    return td__sim_err(e);
}

cudaError_t cudaDeviceSynchronize(void)
{
    td__sim_lock();
    cudaError_t e = td__sim_gate();
    if (e == cudaSuccess)
        e = td__sim_unsafe("cudaDeviceSynchronize");
    if (e == cudaSuccess) {
        int d = td__sim_cur();
        td__sim.stream_syncs++;
        if (td__spins(d, NULL))
            for (int i = 0; i < td__sim.nstreams; i++) {
                struct CUstream_st *s = td__sim.streams[i];
                if (s->dev == d && s->done < s->enq) {
                    td__sim.spin_waits++;
                    break;
                }
            }
        td__sim_drain_dev(d);
        e = td__sim.dev[d].sticky;
    }
    td__sim_unlock();
    return td__sim_err(e);
}

/* ---- events ---------------------------------------------------------------------- */

static struct CUevent_st *td__event(cudaEvent_t h)
{
    for (int i = 0; i < td__sim.nevents; i++)
        if (td__sim.events[i] == h)
            return h->dead ? NULL : h;
    return NULL;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *out, unsigned flags)
{
    unsigned known = cudaEventBlockingSync | cudaEventDisableTiming |
                     cudaEventInterprocess;
    td__sim_lock();
    cudaError_t e = td__sim_gate();
    if (e == cudaSuccess && (!out || (flags & ~known)))
        e = cudaErrorInvalidValue;
    if (e != cudaSuccess)
        goto out;
    if (td__sim.nevents == td__sim.capevents) {
        int nc = td__sim.capevents ? td__sim.capevents * 2 : 64;
        struct CUevent_st **g = realloc(td__sim.events,
                                        (size_t)nc * sizeof *g);
        if (!g) {
            e = cudaErrorMemoryAllocation;
            goto out;
        }
        td__sim.events = g;
        td__sim.capevents = nc;
    }
    struct CUevent_st *ev = calloc(1, sizeof *ev);
    if (!ev) {
        e = cudaErrorMemoryAllocation;
        goto out;
    }
    ev->dev = td__sim_cur();
    ev->flags = flags;
    td__sim.events[td__sim.nevents++] = ev;
    *out = ev;
out:
    td__sim_unlock();
    return td__sim_err(e);
}

cudaError_t cudaEventCreate(cudaEvent_t *out)
{
    return cudaEventCreateWithFlags(out, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t h)
{
    td__sim_lock();
    cudaError_t e = td__sim_gate();
    struct CUevent_st *ev = td__event(h);
    if (e != cudaErrorNotPermitted && ev)
        ev->dead = 1; /* freed at reset: queued records may still name it */
    else if (e == cudaSuccess)
        e = cudaErrorInvalidResourceHandle;
    td__sim_unlock();
    return td__sim_err(e);
}

cudaError_t cudaEventRecord(cudaEvent_t h, cudaStream_t hs)
{
    td__sim_lock();
    cudaError_t e = td__sim_gate();
    struct CUevent_st *ev = td__event(h);
    struct CUstream_st *s = e == cudaSuccess ? td__sim_stream(hs) : NULL;
    if (e == cudaSuccess && (!ev || !s || ev->dev != s->dev)) {
        if (ev && s)
            td__sim_say("cudaEventRecord: event of device %d, stream of "
                        "device %d", ev->dev, s->dev);
        e = cudaErrorInvalidResourceHandle;
    }
    if (e == cudaSuccess && s->cap) { /* a dependency of the capture */
        e = td__sim_cap_record(ev, s);
        goto out;
    }
    if (e == cudaSuccess) {
        ev->cap_id = 0;
        td_sim_op *op = td__sim_op_new(s, TD_SIM_OP_RECORD);
        op->ev = ev;
        op->what = "cudaEventRecord";
        ev->s = s;
        ev->seq = op->seq;
        memcpy(ev->vc, s->vc, sizeof ev->vc);
        td__sim_op_push(s, op);
    }
out:
    td__sim_unlock();
    return td__sim_err(e);
}

/* cudaErrorCapturedEvent for an event last recorded in a capture. */
static cudaError_t td__captured(const struct CUevent_st *ev, const char *call)
{
    if (!ev->cap_id)
        return cudaSuccess;
    td__sim_say("%s: the event was last recorded in a stream capture "
                "(cudaErrorCapturedEvent)", call);
    return cudaErrorCapturedEvent;
}

cudaError_t cudaEventQuery(cudaEvent_t h)
{
    td__sim_lock();
    cudaError_t e = td__sim_gate();
    struct CUevent_st *ev = td__event(h);
    if (e == cudaSuccess && !ev)
        e = cudaErrorInvalidResourceHandle;
    if (e == cudaSuccess)
        e = td__captured(ev, "cudaEventQuery");
    if (e == cudaSuccess && ev->s) {
        if (ev->s->done < ev->seq)
            e = cudaErrorNotReady;
        else
            td__sim_join(td__sim.host, ev->vc);
    }
    td__sim_unlock();
    /* Kept as the thread's last error like any other, as PyTorch's stream
     * and event queries assume (they clear it): a kernel launcher's
     * cudaGetLastError after a query left "not ready" would fail. */
    return td__sim_err(e);
}

cudaError_t cudaEventSynchronize(cudaEvent_t h)
{
    td__sim_lock();
    cudaError_t e = td__sim_gate();
    struct CUevent_st *ev = td__event(h);
    if (e == cudaSuccess && !ev)
        e = cudaErrorInvalidResourceHandle;
    if (e == cudaSuccess)
        e = td__captured(ev, "cudaEventSynchronize");
    if (e == cudaSuccess && ev->s) {
        td__sim_wait(ev->s, ev->seq, ev->vc, td__spins(ev->dev, ev));
        e = td__sim.dev[ev->dev].sticky;
    }
    td__sim_unlock();
    return td__sim_err(e);
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
    td__sim_lock();
    cudaError_t e = td__sim_gate();
    struct CUevent_st *x = td__event(a), *y = td__event(b);
    if (e == cudaSuccess && !ms)
        e = cudaErrorInvalidValue;
    else if (e == cudaSuccess &&
             (!x || !y || !x->s || !y->s ||
              ((x->flags | y->flags) & cudaEventDisableTiming)))
        e = cudaErrorInvalidResourceHandle;
    else if (e == cudaSuccess &&
             (x->s->done < x->seq || y->s->done < y->seq))
        e = cudaErrorNotReady;
    if (e == cudaSuccess)
        *ms = (float)(((double)y->t_ns - (double)x->t_ns) / 1e6);
    td__sim_unlock();
    /* Kept as the thread's last error like any other, as PyTorch's stream
     * and event queries assume (they clear it): a kernel launcher's
     * cudaGetLastError after a query left "not ready" would fail. */
    return td__sim_err(e);
}

cudaError_t cudaStreamWaitEvent(cudaStream_t hs, cudaEvent_t h,
                                unsigned flags)
{
    td__sim_lock();
    cudaError_t e = td__sim_gate();
    struct CUevent_st *ev = td__event(h);
    struct CUstream_st *s = e == cudaSuccess ? td__sim_stream(hs) : NULL;
    if (e == cudaSuccess && (!ev || !s))
        e = cudaErrorInvalidResourceHandle;
    int handled = 0;
    if (e == cudaSuccess)
        e = td__sim_cap_wait(s, ev, flags, &handled);
    if (e == cudaSuccess && !handled && ev->s) {
        /* never recorded: nothing to wait for */
        td_sim_op *op = td__sim_op_new(s, TD_SIM_OP_WAIT);
        op->ws = ev->s;
        op->wseq = ev->seq;
        op->what = "cudaStreamWaitEvent";
        td__sim_join(s->vc, ev->vc);
        td__sim_op_push(s, op);
    }
    td__sim_unlock();
    return td__sim_err(e);
}

cudaError_t cudaLaunchHostFunc(cudaStream_t hs, cudaHostFn_t fn, void *data)
{
    td__sim_lock();
    cudaError_t e;
    struct CUstream_st *s = td__sim_gate_stream(hs, &e);
    if (e == cudaSuccess && !fn)
        e = cudaErrorInvalidValue;
    if (e == cudaSuccess && s->cap)
        e = td__sim_cap_refuse(s, "cudaLaunchHostFunc", "host nodes are not "
                               "simulated",
                               cudaErrorStreamCaptureUnsupported);
    if (e == cudaSuccess) {
        td_sim_op *op = td__sim_op_new(s, TD_SIM_OP_RUN);
        op->run = fn;
        op->ctx = data;
        op->hostfn = 1;
        op->what = "cudaLaunchHostFunc";
        td__sim.host_funcs++;
        td__sim_op_push(s, op);
    }
    td__sim_unlock();
    return td__sim_err(e);
}

/* ---- kernels and library work --------------------------------------------------- */

static int td__grid_ok(const td_sim_grid *g)
{
    unsigned long threads = (unsigned long)g->bx * g->by * g->bz;
    return g->gx >= 1 && g->gy >= 1 && g->gz >= 1 && g->bx >= 1 &&
           g->by >= 1 && g->bz >= 1 && threads <= 1024 && g->bz <= 64 &&
           g->gy <= 65535 && g->gz <= 65535 && g->gx <= 0x7fffffffu &&
           g->smem <= 48 << 10;
}

/* Under the mutex, once per kernel or library launch: whether this is
 * the launch td_sim_oom_launch_in armed. */
static int td__oom_launch(void)
{
    return td__sim.oom_launch_in > 0 && --td__sim.oom_launch_in == 0;
}

void td_sim_oom_launch_in(long n)
{
    td__sim_lock();
    td__sim.oom_launch_in = n > 0 ? n : 0;
    td__sim_unlock();
}

/* A kernel launch on a capturing stream: its pointers checked as at a
 * launch (a fault shows at each replay), then a node of the graph. */
static cudaError_t td__sim_launch_capture(struct CUstream_st *s,
                                          const char *name,
                                          void (*run)(void *),
                                          void (*drop)(void *), void *ctx,
                                          const td_sim_range *args,
                                          int nargs, const void *caller)
{
    int fault = 0;
    for (int i = 0; i < nargs; i++) {
        td_sim_alloc *a = args[i].p ? td__sim_dfind(args[i].p, 1) : NULL;
        if (args[i].p && (!a || a->dev != s->dev)) {
            td__sim_say("kernel %s: pointer argument %d (%p) is not memory "
                        "of device %d: illegal address", name, i,
                        args[i].p, s->dev);
            fault = 2;
        }
    }
    return td__sim_cap_node(s, name, run, drop, ctx, args, nargs, fault, 1,
                            caller);
}

cudaError_t td_sim_launch(const td_sim_grid *g, cudaStream_t hs,
                          const char *name, void (*run)(void *),
                          void (*drop)(void *), void *ctx,
                          const td_sim_range *args, int nargs,
                          const void *caller)
{
    td__sim_lock();
    cudaError_t e;
    struct CUstream_st *s = td__sim_gate_stream(hs, &e);
    if (e == cudaSuccess && !td__grid_ok(g)) {
        td__sim_say("kernel %s: invalid configuration <<<(%u,%u,%u), "
                    "(%u,%u,%u), %zu>>>", name, g->gx, g->gy, g->gz, g->bx,
                    g->by, g->bz, g->smem);
        e = cudaErrorInvalidConfiguration;
    }
    if (e == cudaSuccess && td__oom_launch())
        e = cudaErrorMemoryAllocation;
    if (e != cudaSuccess) {
        td__sim_unlock();
        if (drop)
            drop(ctx);
        return td__sim_err(e);
    }
    if (s->cap) {
        e = td__sim_launch_capture(s, name, run, drop, ctx, args, nargs,
                                   caller);
        td__sim_unlock();
        if (e != cudaSuccess && drop)
            drop(ctx);
        return td__sim_err(e);
    }
    td_sim_op *op = td__sim_op_new(s, TD_SIM_OP_RUN);
    op->run = run;
    op->drop = drop;
    op->ctx = ctx;
    op->what = name;
    op->fault = ++td__sim.launches == td__sim.fault_kernel;
    td__sim.dev[s->dev].launches++;
    td__sim_count_kernel(name);
    for (int i = 0; i < nargs; i++) {
        const char *p = args[i].p;
        if (!p)
            continue;
        td_sim_alloc *a = td__sim_dfind(p, 1);
        if (!a || a->dev != s->dev) {
            td__sim_say("kernel %s: pointer argument %d (%p) is not memory "
                        "of device %d: illegal address", name, i,
                        (const void *)p, s->dev);
            op->fault = 2;
            continue;
        }
        size_t left = a->bytes - (size_t)(p - a->base);
        td__sim_race(a, p, args[i].bytes < left ? args[i].bytes : left,
                     args[i].write, s, name, caller);
    }
    td__sim_op_push(s, op);
    td__sim_unlock();
    return cudaSuccess;
}

cudaError_t td_sim_submit(cudaStream_t hs, const char *what,
                          void (*run)(void *), void (*drop)(void *),
                          void *ctx, const td_sim_range *r, int n,
                          const void *caller)
{
    td__sim_lock();
    cudaError_t e;
    struct CUstream_st *s = td__sim_gate_stream(hs, &e);
    for (int i = 0; e == cudaSuccess && i < n; i++) {
        td_sim_alloc *a = r[i].p ? td__sim_dfind(r[i].p, r[i].bytes) : NULL;
        if (!a || a->dev != s->dev) {
            td__sim_say("%s: operand %d (%p, %zu bytes) is not within memory "
                        "of device %d", what, i, r[i].p, r[i].bytes, s->dev);
            e = cudaErrorInvalidValue;
        }
    }
    if (e == cudaSuccess && td__oom_launch())
        e = cudaErrorMemoryAllocation;
    if (e == cudaSuccess && s->cap)
        e = td__sim_cap_node(s, what, run, drop, ctx, r, n, 0, 0, caller);
    if (e != cudaSuccess || s->cap) {
        td__sim_unlock();
        if (e != cudaSuccess && drop)
            drop(ctx);
        return td__sim_err(e);
    }
    td_sim_op *op = td__sim_op_new(s, TD_SIM_OP_RUN);
    op->run = run;
    op->drop = drop;
    op->ctx = ctx;
    op->what = what;
    td__sim.dev[s->dev].launches++;
    for (int i = 0; i < n; i++)
        td__sim_race(td__sim_dfind(r[i].p, r[i].bytes), r[i].p, r[i].bytes,
                     r[i].write, s, what, caller);
    td__sim_op_push(s, op);
    td__sim_unlock();
    return cudaSuccess;
}

/* ---- control ---------------------------------------------------------------------- */

int td_sim_reset(void)
{
    td__sim_lock();
    for (int i = 0; i < td__sim.nstreams; i++)
        if (!td__sim.streams[i]->dead && !td__sim.streams[i]->legacy) {
            td__sim_unlock();
            return -EBUSY;
        }
    if (td__sim.ndmem || td__sim.nhmem) {
        td__sim_unlock();
        return -EBUSY;
    }
    for (int i = 0; i < td__sim.nstreams; i++) {
        struct CUstream_st *s = td__sim.streams[i];
        if (!s->legacy)
            continue;
        s->quit = 1;
        pthread_cond_broadcast(&td__sim.cv);
        td__sim_unlock();
        pthread_join(s->th, NULL);
        td__sim_lock();
    }
    for (int i = 0; i < td__sim.nstreams; i++)
        free(td__sim.streams[i]);
    td__sim.nstreams = 0;
    for (int i = 0; i < td__sim.nevents; i++)
        free(td__sim.events[i]);
    free(td__sim.events);
    td__sim.events = NULL;
    td__sim.nevents = td__sim.capevents = 0;
    td__sim.init = 0;
    td__sim_unlock();
    td__sim_lock(); /* configures again */
    td__sim_unlock();
    return 0;
}

long td_sim_races(void)
{
    td__sim_lock();
    long n = td__sim.races;
    td__sim_unlock();
    return n;
}

long td_sim_host_funcs(void)
{
    td__sim_lock();
    long n = td__sim.host_funcs;
    td__sim_unlock();
    return n;
}

long td_sim_stream_syncs(void)
{
    td__sim_lock();
    long n = td__sim.stream_syncs;
    td__sim_unlock();
    return n;
}

void td_sim_advance_clock(uint64_t ns)
{
    td__sim_lock();
    td__sim.clock_skew += ns;
    td__sim_unlock();
}

long td_sim_spin_waits(void)
{
    td__sim_lock();
    long n = td__sim.spin_waits;
    td__sim_unlock();
    return n;
}
