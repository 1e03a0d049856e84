/* cuda_graph.c - the step scalars, and the training step captured as a
 * CUDA graph (docs/cuda.md, "CUDA graphs").
 *
 * Owns: the step scalars (td_step_scalars and one lr per run of equal
 * multipliers, in the arena), written before every training step, eager
 * or captured, by one cudaMemcpyAsync on the compute stream from a ring
 * of TD__NSCAL pinned slots (a slot is rewritten only after its copy's
 * event has completed; pageable when page-locking fails: the copy is
 * then staged at the call); the graph mode (cfg.cuda_graphs: off, on, auto)
 * and the auto rule; one executable graph per batch buffer, captured at
 * the buffer's first full training step (thread-local capture mode, so
 * other threads - the checkpoint writer - may keep synchronising on
 * their own events) and launched for every later one.
 * What a graph holds: normalise, forward, loss with its statistics,
 * backward and update of one batch buffer, with the batch size, the
 * layers' pointers, bn_eval, label smoothing and the lr multipliers'
 * runs fixed; everything that changes per step is read from the step
 * scalars.  Outside it, around each launch: the wait for copied[buf]
 * (upload), the scalars' copy, the timing events k0/k1 and consumed[buf],
 * recorded after the whole step (eager steps record it after the loss).
 * Steps that differ from the captured one run eagerly, uncaptured: a
 * short batch (n < batch), an lr <= 0 (no update launched).
 * Never does: capture evaluation steps, synchronise (except to reuse a
 * pinned slot still in flight), or allocate device memory.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_int.h"
#include "base/error.h"
#include "base/log.h"
#include "optim_update.h"

/* auto: eager steps timed before deciding, and the rule */
#define TD__GRAPH_PROBES 3

size_t td__scal_bytes(const td__cuda *be)
{
    return sizeof(td_step_scalars) +
           (size_t)td__cuda_lr_runs(be, 0.0f, NULL) * sizeof(float);
}

int td__graph_init(td__cuda *be)
{
    size_t sz = td__scal_bytes(be);
    be->nruns = td__cuda_lr_runs(be, 0.0f, NULL);
    cudaError_t e = cudaHostAlloc((void **)&be->scal_host, sz * TD__NSCAL,
                                  cudaHostAllocDefault);
    if (e != cudaSuccess) {
        /* the driver's page-locked limit: from pageable memory the copy
         * is staged at the call, which is as safe (never captured) */
        (void)cudaGetLastError();
        be->scal_host = malloc(sz * TD__NSCAL);
        if (!be->scal_host)
            return -ENOMEM;
        be->scal_pageable = 1;
        td_info("cuda:%d: step scalars from pageable memory (%s)", be->dev,
                cudaGetErrorString(e));
    }
    for (int i = 0; i < TD__NSCAL; i++)
        TD__CU(be, cudaEventCreateWithFlags(&be->scal_done[i],
                                            cudaEventDisableTiming));
    int mode = be->base.cfg.cuda_graphs;
    be->graph_on = mode == TD_GRAPHS_AUTO ? -1 : mode == TD_GRAPHS_ON;
    be->probe_upload = -1;
    return 0;
}

void td__graph_destroy(td__cuda *be)
{
    for (int i = 0; i < TD__NBUF; i++)
        if (be->gexec[i])
            (void)cudaGraphExecDestroy(be->gexec[i]);
    for (int i = 0; i < TD__NSCAL; i++)
        if (be->scal_done[i])
            cudaEventDestroy(be->scal_done[i]);
    if (be->scal_host && be->scal_pageable)
        free(be->scal_host);
    else if (be->scal_host)
        cudaFreeHost(be->scal_host);
}

int td__step_scalars(td__cuda *be, float lr, int64_t t)
{
    size_t sz = td__scal_bytes(be);
    int i = be->scal_next;
    char *h = be->scal_host + sz * (size_t)i;
    if (be->scal_used[i]) /* TD__NSCAL steps ago: normally long done */
        TD__CU(be, cudaEventSynchronize(be->scal_done[i]));
    const td_optim_config *o = &be->base.cfg.optim;
    td_adamw_corr c = {1.0f, 1.0f};
    if (o->type == TD_OPT_ADAMW)
        c = td_adamw_corrections(o->beta1, o->beta2, t);
    td_step_scalars s = {.step = (uint64_t)be->step, .t = t, .c1 = c.c1,
                         .c2 = c.c2};
    memcpy(h, &s, sizeof s);
    (void)td__cuda_lr_runs(be, lr, (float *)(h + sizeof s));
    TD__CU(be, cudaMemcpyAsync(be->scal, h, sz, cudaMemcpyHostToDevice,
                               be->compute));
    TD__CU(be, cudaEventRecord(be->scal_done[i], be->compute));
    be->scal_used[i] = 1;
    be->scal_next = (i + 1) % TD__NSCAL;
    return 0;
}

/* auto: the eager compute time (k0 to k1) of the step being timed, once
 * its events have completed (never blocks); decides after
 * TD__GRAPH_PROBES of them: graphs when the shortest is below
 * TD_CUDA_GRAPH_SHORT_MS, where launching the step's kernels one by one
 * costs the host a share of the step worth saving. */
static void td__graph_probe(td__cuda *be)
{
    if (be->probe_upload < 0)
        return;
    td__times_ev *t = &be->times[be->probe_upload % TD_CUDA_TIMES_KEPT];
    float ms = 0;
    if (t->step != be->probe_upload || !t->computed) {
        be->probe_upload = -1; /* left the ring: time another */
        return;
    }
    if (!td__cuda_ready(cudaEventQuery(t->k1)) ||
        !td__cuda_ready(cudaEventElapsedTime(&ms, t->k0, t->k1)))
        return; /* not yet; a real error shows in the next checked call */
    be->probe_upload = -1;
    if (be->probes++ == 0 || ms < be->eager_ms)
        be->eager_ms = ms;
    if (be->probes < TD__GRAPH_PROBES)
        return;
    be->graph_on = be->eager_ms < TD_CUDA_GRAPH_SHORT_MS;
    td_info("cuda:%d: eager training step %.3f ms (shortest of %d): CUDA "
            "graphs %s (cuda_graphs auto: on below %.1f ms)", be->dev,
            be->eager_ms, be->probes, be->graph_on ? "on" : "off",
            TD_CUDA_GRAPH_SHORT_MS);
}

int td__graph_use(td__cuda *be, float lr)
{
    if (be->n != be->batch || lr <= 0.0f)
        return 0;
    if (be->graph_on < 0)
        td__graph_probe(be);
    return be->graph_on == 1;
}

void td__graph_eager_done(td__cuda *be)
{
    if (be->graph_on < 0 && be->probe_upload < 0 && be->n == be->batch)
        be->probe_upload = be->uploads - 1;
}

/* The step's calls on the capturing compute stream. */
static int td__graph_body(td__cuda *be)
{
    TD__TRY(td__cuda_forward(be, 1));
    TD__TRY(td__cuda_loss(be, 1));
    TD__TRY(td__cuda_backward(be));
    return td__cuda_update(be);
}

static int td__graph_capture(td__cuda *be, cudaGraphExec_t *out)
{
    cudaGraph_t g = NULL;
    td__nvtx_push("graph capture");
    TD__CU(be, cudaStreamBeginCapture(be->compute,
                                      cudaStreamCaptureModeThreadLocal));
    be->capturing = 1;
    int rc = td__graph_body(be);
    be->capturing = 0;
    /* ends the capture even after a failure, or the stream stays in it */
    cudaError_t e = cudaStreamEndCapture(be->compute, &g);
    td__nvtx_pop();
    if (rc) {
        if (g)
            (void)cudaGraphDestroy(g);
        return rc;
    }
    TD__CU(be, e);
    e = cudaGraphInstantiate(out, g, 0);
    (void)cudaGraphDestroy(g); /* the executable graph keeps what it needs */
    TD__CU(be, e);
    be->graph_caps++;
    return 0;
}

int td__graph_launch(td__cuda *be)
{
    if (!be->gexec[be->cur])
        TD__TRY(td__graph_capture(be, &be->gexec[be->cur]));
    TD__CU(be, cudaGraphLaunch(be->gexec[be->cur], be->compute));
    be->graph_runs++;
    return 0;
}

int td_backend_cuda_graph_info(td_backend *b, td_cuda_graph_info *out)
{
    if (!b || strcmp(b->ops->name, "cuda") != 0 || !out)
        return -EINVAL;
    const td__cuda *be = (const td__cuda *)b;
    *out = (td_cuda_graph_info){.mode = be->base.cfg.cuda_graphs,
                                .on = be->graph_on,
                                .eager_ms = be->probes ? be->eager_ms : -1.0,
                                .captures = be->graph_caps,
                                .launches = be->graph_runs};
    return 0;
}
