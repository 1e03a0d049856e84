/* sim_copy.c - the simulated CUDA runtime's copies and memsets:
 * cudaMemcpy, cudaMemcpyAsync, cudaMemset and cudaMemsetAsync.
 *
 * Owns: each side of a copy found in sim_runtime.c's tables (device
 * memory of the current device, within one allocation, or host memory,
 * pinned or pageable), the kind checked against what the pointers make
 * it, the copy or memset queued on its stream (or captured into a graph,
 * sim_graph.c) with its accesses shown to the race detector, the
 * pageable copies counted (td_sim_pageable_d2h, td_sim_pageable_h2d),
 * and the documented host synchronisation of every copy ("API
 * synchronization behavior" in the CUDA runtime documentation):
 *   cudaMemcpy       H2D from pageable memory: waits for the legacy
 *                    stream, stages the source, returns before the DMA;
 *                    H2D from pinned memory, D2H, H2H: synchronous;
 *                    D2D: asynchronous
 *   cudaMemcpyAsync  D2H into pageable memory: returns once copied;
 *                    H2D from pageable memory: stages the source at the
 *                    call; otherwise asynchronous
 *   cudaMemset(Async) of device memory: asynchronous
 * Never does: let a copy name memory of another device than the current
 * one, or run outside tests.
 */
#include <stdlib.h>
#include <string.h>

#include "sim_int.h"

/* ---- copies and memsets ------------------------------------------------------ */

typedef struct td__copy {
    void *dst;
    const void *src;
    size_t n;
    void *stage;       /* pageable source copied at the call */
    int set, val;      /* memset */
} td__copy;

static void td__copy_run(void *p)
{
    td__copy *c = p;
    if (c->set)
        memset(c->dst, c->val, c->n);
    else
        memcpy(c->dst, c->stage ? c->stage : c->src, c->n);
}

static void td__copy_drop(void *p)
{
    td__copy *c = p;
    free(c->stage);
    free(c);
}

static const char *td__kind_name(enum cudaMemcpyKind k)
{
    switch (k) {
    case cudaMemcpyHostToHost: return "HostToHost";
    case cudaMemcpyHostToDevice: return "HostToDevice";
    case cudaMemcpyDeviceToHost: return "DeviceToHost";
    case cudaMemcpyDeviceToDevice: return "DeviceToDevice";
    default: return "Default";
    }
}

/* Device allocation of p..p+n on the current device: 1, host memory: 0,
 * an error (overrun, other device): -1 with a diagnostic. */
static int td__side(const char *call, const char *name, const void *p,
                    size_t n, td_sim_alloc **a)
{
    *a = td__sim_dstart(p);
    if (!*a)
        return 0;
    if ((size_t)((const char *)p - (*a)->base) + n > (*a)->bytes) {
        td__sim_say("%s: %s %p + %zu bytes overruns its device allocation "
                    "of %zu bytes", call, name, p, n, (*a)->bytes);
        return -1;
    }
    if ((*a)->dev != td__sim_cur()) {
        td__sim_say("%s: %s %p is memory of device %d, the current device "
                    "is %d", call, name, p, (*a)->dev, td__sim_cur());
        return -1;
    }
    return 1;
}

static cudaError_t td__memcpy(void *dst, const void *src, size_t n,
                              enum cudaMemcpyKind kind, cudaStream_t hs,
                              int async, const void *caller)
{
    const char *call = async ? "cudaMemcpyAsync" : "cudaMemcpy";
    td_sim_alloc *da, *sa;
    td_sim_vc vc;
    td__sim_lock();
    cudaError_t e = td__sim_gate();
    if (e != cudaSuccess)
        goto out;
    if (!async && (e = td__sim_unsafe(call)) != cudaSuccess)
        goto out;
    struct CUstream_st *s = td__sim_stream(async ? hs : NULL);
    if (!s) {
        e = cudaErrorInvalidResourceHandle;
        goto out;
    }
    if (n == 0)
        goto out;
    int dd = dst ? td__side(call, "dst", dst, n, &da) : -1;
    int sd = src ? td__side(call, "src", src, n, &sa) : -1;
    if (dd < 0 || sd < 0) {
        e = cudaErrorInvalidValue;
        goto out;
    }
    enum cudaMemcpyKind real = dd ? (sd ? cudaMemcpyDeviceToDevice
                                        : cudaMemcpyHostToDevice)
                                  : (sd ? cudaMemcpyDeviceToHost
                                        : cudaMemcpyHostToHost);
    if (kind != cudaMemcpyDefault && kind != real) {
        td__sim_say("%s: kind %s, but dst %p and src %p make it %s", call,
                    td__kind_name(kind), dst, (const void *)src,
                    td__kind_name(real));
        e = cudaErrorInvalidValue;
        goto out;
    }
    int src_pinned = !sd && td__sim_hfind(src, n);
    int dst_pinned = !dd && td__sim_hfind(dst, n);
    if (s->cap && ((!sd && !src_pinned) || (!dd && !dst_pinned))) {
        e = td__sim_cap_refuse(s, call, "pageable host memory cannot be "
                               "captured (page-lock it)",
                               cudaErrorStreamCaptureUnsupported);
        goto out;
    }
    td__copy *c = calloc(1, sizeof *c);
    if (!c) {
        e = cudaErrorMemoryAllocation;
        goto out;
    }
    c->dst = dst;
    c->src = src;
    c->n = n;
    if (real == cudaMemcpyHostToDevice && !src_pinned) {
        if (!async) /* "a stream sync is performed before the copy" */
            td__sim_wait(s, s->enq, s->vc, 0);
        c->stage = malloc(n);
        if (!c->stage) {
            free(c);
            e = cudaErrorMemoryAllocation;
            goto out;
        }
        memcpy(c->stage, src, n);
    }
    if (s->cap) {
        e = td__sim_cap_copy(s, call, td__copy_run, td__copy_drop, c,
                             dd ? dst : NULL, sd ? src : NULL, n, caller);
        goto out;
    }
    td_sim_op *op = td__sim_op_new(s, TD_SIM_OP_RUN);
    op->run = td__copy_run;
    op->drop = td__copy_drop;
    op->ctx = c;
    op->what = call;
    if (dd)
        td__sim_race(da, dst, n, 1, s, call, caller);
    if (sd)
        td__sim_race(sa, src, n, 0, s, call, caller);
    memcpy(vc, s->vc, sizeof vc);
    uint64_t seq = op->seq;
    td__sim_op_push(s, op);
    int wait;
    if (async) {
        wait = real == cudaMemcpyDeviceToHost && !dst_pinned;
        td__sim.dev[s->dev].pageable_d2h += wait;
        td__sim.dev[s->dev].pageable_h2d +=
            real == cudaMemcpyHostToDevice && !src_pinned;
    }
    else
        wait = real == cudaMemcpyDeviceToHost ||
               real == cudaMemcpyHostToHost ||
               (real == cudaMemcpyHostToDevice && src_pinned);
    if (wait)
        td__sim_wait(s, seq, vc, 0);
out:
    td__sim_unlock();
    return td__sim_err(e);
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n,
                       enum cudaMemcpyKind kind)
{
    return td__memcpy(dst, src, n, kind, NULL, 0,
                      __builtin_return_address(0));
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n,
                            enum cudaMemcpyKind kind, cudaStream_t s)
{
    return td__memcpy(dst, src, n, kind, s, 1, __builtin_return_address(0));
}

static cudaError_t td__memset(void *p, int v, size_t n, cudaStream_t hs,
                              int async, const void *caller)
{
    const char *call = async ? "cudaMemsetAsync" : "cudaMemset";
    td_sim_alloc *a;
    td__sim_lock();
    cudaError_t e = td__sim_gate();
    if (e == cudaSuccess && !async)
        e = td__sim_unsafe(call);
    if (e != cudaSuccess)
        goto out;
    struct CUstream_st *s = td__sim_stream(async ? hs : NULL);
    if (!s) {
        e = cudaErrorInvalidResourceHandle;
        goto out;
    }
    if (n == 0)
        goto out;
    if (!p || td__side(call, "ptr", p, n, &a) != 1) {
        td__sim_say("%s: %p is not device memory", call, p);
        e = cudaErrorInvalidValue;
        goto out;
    }
    td__copy *c = calloc(1, sizeof *c);
    if (!c) {
        e = cudaErrorMemoryAllocation;
        goto out;
    }
    c->dst = p;
    c->n = n;
    c->set = 1;
    c->val = v;
    if (s->cap) {
        e = td__sim_cap_copy(s, call, td__copy_run, td__copy_drop, c, p,
                             NULL, n, caller);
        goto out;
    }
    td_sim_op *op = td__sim_op_new(s, TD_SIM_OP_RUN);
    op->run = td__copy_run;
    op->drop = td__copy_drop;
    op->ctx = c;
    op->what = call;
    td__sim_race(a, p, n, 1, s, call, caller);
    td__sim_op_push(s, op);
out:
    td__sim_unlock();
    return td__sim_err(e);
}

cudaError_t cudaMemset(void *p, int v, size_t n)
{
    return td__memset(p, v, n, NULL, 0, __builtin_return_address(0));
}

cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s)
{
    return td__memset(p, v, n, s, 1, __builtin_return_address(0));
}
