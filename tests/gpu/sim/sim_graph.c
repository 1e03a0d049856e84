/* sim_graph.c - stream capture and CUDA graphs on the simulated device.
 *
 * Owns: cudaStreamBeginCapture / EndCapture / IsCapturing and
 * cudaThreadExchangeStreamCaptureMode; the graph being captured (work
 * enqueued on a capturing stream - kernels, cuBLAS and cuDNN calls,
 * cudaMemcpyAsync, cudaMemsetAsync - becomes a node instead of running;
 * every node keeps the closure made at the call, so kernel arguments and
 * library scalars are the ones of capture time, as on a GPU);
 * cudaGraphInstantiate, cudaGraphLaunch (the nodes replayed in capture
 * order on the launch stream, one stream operation each, so the race
 * detector, the clocks and TD_SIM_FAULT_KERNEL see every node as an
 * ordinary launch), cudaGraphExecDestroy, cudaGraphDestroy; fork and join
 * of other streams through events recorded in the capture; and what
 * capture forbids, refused with a "td-sim:" line naming the call:
 *   - synchronous calls on a capturing stream or its events
 *     (cudaStreamSynchronize, cudaStreamQuery: cudaErrorStreamCapture-
 *     Unsupported; cudaEventSynchronize, cudaEventQuery of an event last
 *     recorded in a capture: cudaErrorCapturedEvent);
 *   - "potentially unsafe" calls (cudaMalloc, cudaFree, cudaMemcpy,
 *     cudaMemset, cudaDeviceSynchronize) from a thread with a capture not
 *     begun in relaxed mode, or from any thread while another thread has
 *     a global-mode capture: cudaErrorStreamCaptureUnsupported;
 *   - cudaMemcpyAsync with pageable host memory on a capturing stream:
 *     cudaErrorStreamCaptureUnsupported;
 *   - a capturing stream waiting on an event recorded outside the
 *     capture: cudaErrorStreamCaptureIsolation (cudaEventWaitExternal
 *     external-event nodes are not simulated: refused too);
 *   - cudaStreamEndCapture with a forked stream not joined back (the
 *     origin waited on an event recorded on it after its last captured
 *     work): cudaErrorStreamCaptureUnjoined; from another thread than
 *     the one that began a non-relaxed capture: ...WrongThread;
 *   - host functions, graph launches and legacy streams inside a capture
 *     (legal on a GPU, not simulated: refused).
 * A refusal invalidates the capture: later work on its streams fails with
 * cudaErrorStreamCaptureInvalidated and cudaStreamEndCapture returns that
 * error and no graph.
 * Never does: run a node at capture time, reorder nodes (a graph's
 * branches run one after the other here: races between the branches of
 * one graph are not detected), or model launch overhead.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "sim_int.h"

typedef struct td_sim_node {
    void (*run)(void *);
    void (*drop)(void *);
    void *ctx;
    const char *what;
    const void *caller;
    td_sim_range *r;
    int nr;
    int fault;  /* 2: a kernel pointer outside the device's memory */
    int kernel; /* counts as a kernel launch (TD_SIM_FAULT_KERNEL) */
} td_sim_node;

/* The nodes, shared by the graph, its instances and queued replays. */
typedef struct td_sim_body {
    td_sim_node *node;
    int n, cap;
    int refs;
} td_sim_body;

struct td_sim_capture {
    uint64_t id;
    struct CUstream_st *origin;
    enum cudaStreamCaptureMode mode;
    pthread_t thread;
    int invalid;
    td_sim_body *body;
};

struct CUgraph_st {
    int dev;
    td_sim_body *body;
};

struct CUgraphExec_st {
    int dev;
    td_sim_body *body;
};

#define TD__MAX_CAPTURES 16
static struct td_sim_capture *td__caps[TD__MAX_CAPTURES];
static uint64_t td__cap_ids;
static __thread enum cudaStreamCaptureMode td__thread_mode =
    cudaStreamCaptureModeGlobal;

/* ---- bodies ------------------------------------------------------------------ */

void td__sim_body_free(td_sim_body *b)
{
    for (int i = 0; i < b->n; i++) {
        if (b->node[i].drop)
            b->node[i].drop(b->node[i].ctx);
        free(b->node[i].r);
    }
    free(b->node);
    free(b);
}

int td__sim_body_unref(td_sim_body *b) { return --b->refs == 0; }

static void td__unref_now(td_sim_body *b)
{
    if (td__sim_body_unref(b))
        td__sim_body_free(b); /* no replay queued: no worker runs it */
}

/* ---- captures ---------------------------------------------------------------- */

static void td__cap_end(struct td_sim_capture *c)
{
    for (int i = 0; i < td__sim.nstreams; i++)
        if (td__sim.streams[i]->cap == c)
            td__sim.streams[i]->cap = NULL;
    for (int i = 0; i < TD__MAX_CAPTURES; i++)
        if (td__caps[i] == c)
            td__caps[i] = NULL;
    if (c->body)
        td__unref_now(c->body);
    free(c);
}

cudaError_t td__sim_cap_refuse(struct CUstream_st *s, const char *call,
                               const char *why, cudaError_t e)
{
    td__sim_say("%s during stream capture: %s (%s; the capture is "
                "invalidated)", call, why, cudaGetErrorName(e));
    if (s->cap)
        s->cap->invalid = 1;
    return e;
}

cudaError_t td__sim_unsafe(const char *call)
{
    pthread_t me = pthread_self();
    cudaError_t e = cudaSuccess;
    for (int i = 0; i < TD__MAX_CAPTURES; i++) {
        struct td_sim_capture *c = td__caps[i];
        if (!c)
            continue;
        int mine = pthread_equal(c->thread, me);
        if ((mine && c->mode != cudaStreamCaptureModeRelaxed &&
             td__thread_mode != cudaStreamCaptureModeRelaxed) ||
            (!mine && c->mode == cudaStreamCaptureModeGlobal &&
             td__thread_mode == cudaStreamCaptureModeGlobal)) {
            if (e == cudaSuccess)
                td__sim_say("%s while %s a %s-mode stream capture: a "
                            "potentially unsafe call, prohibited "
                            "(cudaErrorStreamCaptureUnsupported; the "
                            "capture is invalidated)", call,
                            mine ? "this thread has" : "another thread has",
                            c->mode == cudaStreamCaptureModeGlobal
                                ? "global" : "thread-local");
            c->invalid = 1;
            e = cudaErrorStreamCaptureUnsupported;
        }
    }
    return e;
}

cudaError_t td__sim_cap_node(struct CUstream_st *s, const char *what,
                             void (*run)(void *), void (*drop)(void *),
                             void *ctx, const td_sim_range *r, int n,
                             int fault, int kernel, const void *caller)
{
    struct td_sim_capture *c = s->cap;
    if (c->invalid)
        return cudaErrorStreamCaptureInvalidated;
    td_sim_body *b = c->body;
    if (b->n == b->cap) {
        int nc = b->cap ? b->cap * 2 : 64;
        td_sim_node *g = realloc(b->node, (size_t)nc * sizeof *g);
        if (!g)
            return cudaErrorMemoryAllocation;
        b->node = g;
        b->cap = nc;
    }
    td_sim_node *d = &b->node[b->n];
    memset(d, 0, sizeof *d);
    if (n > 0) {
        d->r = malloc((size_t)n * sizeof *r);
        if (!d->r)
            return cudaErrorMemoryAllocation;
        memcpy(d->r, r, (size_t)n * sizeof *r);
    }
    d->nr = n;
    d->run = run;
    d->drop = drop;
    d->ctx = ctx;
    d->what = what;
    d->caller = caller;
    d->fault = fault;
    d->kernel = kernel;
    b->n++;
    s->cap_ops++;
    return cudaSuccess;
}

cudaError_t td__sim_cap_copy(struct CUstream_st *s, const char *call,
                             void (*run)(void *), void (*drop)(void *),
                             void *ctx, const void *dst, const void *src,
                             size_t n, const void *caller)
{
    td_sim_range r[2] = {{dst, dst ? n : 0, 1}, {src, src ? n : 0, 0}};
    cudaError_t e = td__sim_cap_node(s, call, run, drop, ctx, r, 2, 0, 0,
                                     caller);
    if (e != cudaSuccess)
        drop(ctx);
    return e;
}

cudaError_t td__sim_cap_record(struct CUevent_st *ev,
                               struct CUstream_st *s)
{
    if (s->cap->invalid)
        return cudaErrorStreamCaptureInvalidated;
    ev->cap_id = s->cap->id;
    ev->cap_s = s;
    ev->cap_pos = s->cap_ops;
    return cudaSuccess;
}

cudaError_t td__sim_cap_wait(struct CUstream_st *s, struct CUevent_st *ev,
                             unsigned flags, int *handled)
{
    *handled = 0;
    if (!s->cap && !ev->cap_id)
        return cudaSuccess; /* an ordinary wait */
    *handled = 1;
    if (s->cap && s->cap->invalid)
        return cudaErrorStreamCaptureInvalidated;
    struct td_sim_capture *c = NULL;
    for (int i = 0; i < TD__MAX_CAPTURES; i++)
        if (td__caps[i] && td__caps[i]->id == ev->cap_id)
            c = td__caps[i];
    if (s->cap && flags & cudaEventWaitExternal)
        return td__sim_cap_refuse(s, "cudaStreamWaitEvent", "external "
                                  "event nodes (cudaEventWaitExternal) are "
                                  "not simulated",
                                  cudaErrorStreamCaptureUnsupported);
    if (s->cap && !c)
        return td__sim_cap_refuse(s, "cudaStreamWaitEvent", "the event was "
                                  "recorded outside this capture; only "
                                  "in-stream order may cross the capture "
                                  "boundary",
                                  cudaErrorStreamCaptureIsolation);
    if (!c) { /* an event of a finished capture, waited on outside one */
        td__sim_say("cudaStreamWaitEvent: the event was last recorded in a "
                    "stream capture that has ended "
                    "(cudaErrorCapturedEvent)");
        return cudaErrorCapturedEvent;
    }
    if (s->cap && s->cap != c)
        return td__sim_cap_refuse(s, "cudaStreamWaitEvent", "the event "
                                  "belongs to another capture",
                                  cudaErrorStreamCaptureMerge);
    if (!s->cap) { /* fork: s joins the capture */
        s->cap = c;
        s->cap_ops = 0;
        s->cap_joined = 0;
        return cudaSuccess;
    }
    /* join: the origin waits for everything ev's stream captured */
    if (s == c->origin && ev->cap_s != s && ev->cap_pos >= ev->cap_s->cap_ops)
        ev->cap_s->cap_joined = 1;
    return cudaSuccess;
}

/* ---- the API --------------------------------------------------------------- */

cudaError_t cudaStreamBeginCapture(cudaStream_t hs,
                                   enum cudaStreamCaptureMode mode)
{
    td__sim_lock();
    cudaError_t e;
    struct CUstream_st *s = td__sim_gate_stream(hs, &e);
    if (e == cudaSuccess && (unsigned)mode > cudaStreamCaptureModeRelaxed)
        e = cudaErrorInvalidValue;
    if (e == cudaSuccess && s->legacy) {
        td__sim_say("cudaStreamBeginCapture: the legacy default stream "
                    "cannot be captured");
        e = cudaErrorStreamCaptureUnsupported;
    }
    if (e == cudaSuccess && s->cap) {
        td__sim_say("cudaStreamBeginCapture: the stream is already "
                    "capturing");
        e = cudaErrorIllegalState;
    }
    int slot = -1;
    for (int i = 0; e == cudaSuccess && i < TD__MAX_CAPTURES; i++)
        if (!td__caps[i]) {
            slot = i;
            break;
        }
    if (e == cudaSuccess && slot < 0)
        e = cudaErrorMemoryAllocation;
    struct td_sim_capture *c = NULL;
    if (e == cudaSuccess) {
        c = calloc(1, sizeof *c);
        if (c)
            c->body = calloc(1, sizeof *c->body);
        if (!c || !c->body) {
            free(c);
            e = cudaErrorMemoryAllocation;
        }
    }
    if (e == cudaSuccess) {
        c->id = ++td__cap_ids;
        c->origin = s;
        c->mode = mode;
        c->thread = pthread_self();
        c->body->refs = 1;
        td__caps[slot] = c;
        s->cap = c;
        s->cap_ops = 0;
        s->cap_joined = 1;
    }
    td__sim_unlock();
    return td__sim_err(e);
}

cudaError_t cudaStreamEndCapture(cudaStream_t hs, cudaGraph_t *out)
{
    td__sim_lock();
    cudaError_t e = td__sim_gate();
    struct CUstream_st *s = e == cudaSuccess ? td__sim_stream(hs) : NULL;
    if (e == cudaSuccess && (!s || !out))
        e = s ? cudaErrorInvalidValue : cudaErrorInvalidResourceHandle;
    if (e == cudaSuccess)
        *out = NULL;
    if (e == cudaSuccess && !s->cap) {
        td__sim_say("cudaStreamEndCapture: the stream is not capturing");
        e = cudaErrorIllegalState;
    } else if (e == cudaSuccess && s->cap->origin != s) {
        td__sim_say("cudaStreamEndCapture: the capture was not begun on "
                    "this stream (a forked stream)");
        e = cudaErrorStreamCaptureUnmatched;
    }
    if (e != cudaSuccess)
        goto out;
    struct td_sim_capture *c = s->cap;
    if (c->mode != cudaStreamCaptureModeRelaxed &&
        !pthread_equal(c->thread, pthread_self())) {
        td__sim_say("cudaStreamEndCapture: from another thread than the "
                    "one that began this non-relaxed capture");
        e = cudaErrorStreamCaptureWrongThread;
        c->invalid = 1;
    }
    for (int i = 0; e == cudaSuccess && i < td__sim.nstreams; i++) {
        struct CUstream_st *f = td__sim.streams[i];
        if (f->cap == c && f != s && !f->cap_joined) {
            td__sim_say("cudaStreamEndCapture: stream %d forked into the "
                        "capture was not joined back (the origin stream "
                        "never waited on an event recorded on it after "
                        "its last captured work)", f->id);
            e = cudaErrorStreamCaptureUnjoined;
        }
    }
    if (e == cudaSuccess && c->invalid)
        e = cudaErrorStreamCaptureInvalidated;
    struct CUgraph_st *g = NULL;
    if (e == cudaSuccess && !(g = calloc(1, sizeof *g)))
        e = cudaErrorMemoryAllocation;
    if (e == cudaSuccess) {
        g->dev = s->dev;
        g->body = c->body;
        c->body = NULL; /* the graph takes the capture's reference */
        td__sim.graph_captures++;
        *out = g;
    }
    td__cap_end(c);
out:
    td__sim_unlock();
    return td__sim_err(e);
}

cudaError_t cudaStreamIsCapturing(cudaStream_t hs,
                                  enum cudaStreamCaptureStatus *st)
{
    td__sim_lock();
    cudaError_t e = td__sim_gate();
    struct CUstream_st *s = e == cudaSuccess ? td__sim_stream(hs) : NULL;
    if (e == cudaSuccess && (!s || !st))
        e = s ? cudaErrorInvalidValue : cudaErrorInvalidResourceHandle;
    if (e == cudaSuccess)
        *st = !s->cap ? cudaStreamCaptureStatusNone
              : s->cap->invalid ? cudaStreamCaptureStatusInvalidated
                                : cudaStreamCaptureStatusActive;
    td__sim_unlock();
    return td__sim_err(e);
}

cudaError_t cudaThreadExchangeStreamCaptureMode(
    enum cudaStreamCaptureMode *mode)
{
    if (!mode || (unsigned)*mode > cudaStreamCaptureModeRelaxed)
        return td__sim_err(cudaErrorInvalidValue);
    enum cudaStreamCaptureMode old = td__thread_mode;
    td__thread_mode = *mode;
    *mode = old;
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *out, cudaGraph_t g,
                                 unsigned long long flags)
{
    td__sim_lock();
    cudaError_t e = td__sim_gate();
    if (e == cudaSuccess && (!out || !g || !g->body))
        e = cudaErrorInvalidValue;
    if (e == cudaSuccess && flags) {
        td__sim_say("cudaGraphInstantiate: flags %#llx are not simulated "
                    "(0 only)", flags);
        e = cudaErrorInvalidValue;
    }
    struct CUgraphExec_st *x = NULL;
    if (e == cudaSuccess && !(x = calloc(1, sizeof *x)))
        e = cudaErrorMemoryAllocation;
    if (e == cudaSuccess) {
        x->dev = g->dev;
        x->body = g->body;
        x->body->refs++;
        *out = x;
    }
    td__sim_unlock();
    return td__sim_err(e);
}

/* One replayed node: a new operation on s, checked as its launch was. */
static void td__replay(struct CUstream_st *s, td_sim_body *b, int i)
{
    const td_sim_node *d = &b->node[i];
    td_sim_op *op = td__sim_op_new(s, TD_SIM_OP_RUN);
    op->run = d->run;
    op->ctx = d->ctx;
    op->what = d->what;
    op->body = b;
    b->refs++;
    op->fault = d->fault;
    if (d->kernel && ++td__sim.launches == td__sim.fault_kernel)
        op->fault = 1;
    if (d->kernel)
        td__sim_count_kernel(d->what);
    td__sim.dev[s->dev].launches++;
    for (int k = 0; k < d->nr; k++) {
        td_sim_alloc *a = d->r[k].p ? td__sim_dfind(d->r[k].p, 1) : NULL;
        if (!a) {
            if (d->r[k].p && !op->fault) {
                td__sim_say("graph node %s: operand %p was freed since the "
                            "capture: illegal address", d->what, d->r[k].p);
                op->fault = 2;
            }
            continue;
        }
        size_t left = a->bytes - (size_t)((const char *)d->r[k].p - a->base);
        td__sim_race(a, d->r[k].p, d->r[k].bytes < left ? d->r[k].bytes
                                                        : left,
                     d->r[k].write, s, d->what, d->caller);
    }
    td__sim_op_push(s, op);
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t x, cudaStream_t hs)
{
    td__sim_lock();
    cudaError_t e;
    struct CUstream_st *s = td__sim_gate_stream(hs, &e);
    if (e == cudaSuccess && (!x || !x->body))
        e = cudaErrorInvalidValue;
    if (e == cudaSuccess && s->cap)
        e = td__sim_cap_refuse(s, "cudaGraphLaunch", "child graphs are not "
                               "simulated", cudaErrorStreamCaptureUnsupported);
    if (e == cudaSuccess && x->dev != s->dev) {
        td__sim_say("cudaGraphLaunch: graph of device %d on a stream of "
                    "device %d", x->dev, s->dev);
        e = cudaErrorInvalidValue;
    }
    if (e == cudaSuccess) {
        td__sim.graph_launches++;
        for (int i = 0; i < x->body->n; i++)
            td__replay(s, x->body, i);
    }
    td__sim_unlock();
    return td__sim_err(e);
}

/* Destroying an instance with launches in flight is allowed: the queued
 * replays hold their own references to the nodes. */
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t x)
{
    td__sim_lock();
    cudaError_t e = td__sim_gate(); /* a sticky error still frees */
    if (e != cudaErrorNotPermitted && (!x || !x->body))
        e = cudaErrorInvalidValue;
    else if (e != cudaErrorNotPermitted) {
        td__unref_now(x->body);
        x->body = NULL;
        free(x);
    }
    td__sim_unlock();
    return td__sim_err(e);
}

cudaError_t cudaGraphDestroy(cudaGraph_t g)
{
    td__sim_lock();
    cudaError_t e = td__sim_gate(); /* a sticky error still frees */
    if (e != cudaErrorNotPermitted && (!g || !g->body))
        e = cudaErrorInvalidValue;
    else if (e != cudaErrorNotPermitted) {
        td__unref_now(g->body);
        g->body = NULL;
        free(g);
    }
    td__sim_unlock();
    return td__sim_err(e);
}

const char *td__sim_cap_error(cudaError_t e, int name)
{
    static const struct {
        cudaError_t e;
        const char *name, *text;
    } t[] = {
        {cudaErrorStreamCaptureUnsupported,
         "cudaErrorStreamCaptureUnsupported",
         "operation not permitted when stream is capturing"},
        {cudaErrorStreamCaptureInvalidated,
         "cudaErrorStreamCaptureInvalidated",
         "operation failed due to a previous error during capture"},
        {cudaErrorStreamCaptureMerge, "cudaErrorStreamCaptureMerge",
         "operation would result in a merge of separate capture sequences"},
        {cudaErrorStreamCaptureUnmatched, "cudaErrorStreamCaptureUnmatched",
         "capture was not ended in the same stream as it began"},
        {cudaErrorStreamCaptureUnjoined, "cudaErrorStreamCaptureUnjoined",
         "capturing stream has unjoined work"},
        {cudaErrorStreamCaptureIsolation, "cudaErrorStreamCaptureIsolation",
         "dependency created on uncaptured work in another stream"},
        {cudaErrorStreamCaptureImplicit, "cudaErrorStreamCaptureImplicit",
         "operation would make the legacy stream depend on a capturing "
         "blocking stream"},
        {cudaErrorCapturedEvent, "cudaErrorCapturedEvent",
         "operation not permitted on an event last recorded in a capturing "
         "stream"},
        {cudaErrorStreamCaptureWrongThread,
         "cudaErrorStreamCaptureWrongThread",
         "attempt to terminate a thread-local capture sequence from another "
         "thread"},
        {cudaErrorIllegalState, "cudaErrorIllegalState",
         "the operation is not permitted in the current state"},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (t[i].e == e)
            return name ? t[i].name : t[i].text;
    return name ? "cudaErrorUnknown" : "unknown error";
}

long td_sim_graph_captures(void)
{
    td__sim_lock();
    long n = td__sim.graph_captures;
    td__sim_unlock();
    return n;
}

long td_sim_graph_launches(void)
{
    td__sim_lock();
    long n = td__sim.graph_launches;
    td__sim_unlock();
    return n;
}
