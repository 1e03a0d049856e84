/* runner_trace.c - a job's timeline recording (trainctl trace, the
 * daemon's "trace" request; docs/observability.md): armed at a step
 * boundary when asked for, the requested steps' slices and counters
 * added as the trainer reports them, and the Chrome trace JSON handed on
 * as a "trace" event.
 *
 * Owns: the recording's state in td_runner (tracing, trace_from,
 * trace_done, trace_origin_ns, trace_verdict; trace_want is the request,
 * set from any thread), its "trace_progress" events.
 * Never does: record anything itself (obs/trace.c does), block the
 * trainer.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>

#include "base/clock.h"
#include "base/log.h"
#include "job/runner_int.h"
#include "obs/metrics.h"
#include "obs/trace.h"

/* Trainer thread: how far the recording is, as a "trace_progress" event
 * {"steps": recorded, "requested"} for whoever waits for the trace (the
 * daemon passes it on): when it is armed, at each tenth of the request
 * (every step of a short one) and at most every 100 ms between, never
 * more than the steps' own rate. */
static void td__trace_progress(td_runner *r, int want, int armed)
{
    int64_t now = td_now_ns(), done = r->trace_done;
    int tenth = want > 0 && done * 10 / want != (done - 1) * 10 / want;
    if (!armed && !tenth && now - r->trace_progress_ns < 100000000)
        return;
    r->trace_progress_ns = now;
    td__runner_emit(r, "trace_progress",
                    json_pack("{s:I, s:i}", "steps", (json_int_t)done,
                              "requested", want));
}

/* Trainer thread, at a step boundary: arms a requested recording, so it
 * starts with a whole step. */
void td__runner_trace_boundary(td_runner *r, const td_train_position *pos)
{
    if (r->tracing || !atomic_load_explicit(&r->trace_want,
                                            memory_order_relaxed))
        return;
    if (td_trace_arm(r->trace) != 0)
        return;
    r->tracing = 1;
    r->trace_from = pos->steps;
    r->trace_done = 0;
    r->trace_origin_ns = td_now_ns();
    td_metrics_counters mc;
    td_metrics_get_counters(r->metrics, &mc);
    r->trace_verdict = mc.verdict;
    td__trace_progress(r, atomic_load(&r->trace_want), 1);
}

/* Trainer thread: ends the recording and hands the timeline on. */
void td__runner_trace_finish(td_runner *r)
{
    int want = atomic_load(&r->trace_want);
    if (!r->tracing) {
        if (!want || td_trace_arm(r->trace)) /* requested, never started */
            return;
        r->trace_done = 0;
        r->trace_origin_ns = td_now_ns();
    }
    td_trace_disarm(r->trace);
    r->tracing = 0;
    char name[64];
    int64_t t0 = td_now_ns();
    snprintf(name, sizeof name, "traind job %ld", r->o.job);
    json_t *tr = td_trace_json(r->trace, name, r->o.job > 0 ? r->o.job : 1,
                               r->trace_origin_ns);
    json_t *ev = json_pack("{s:I, s:i, s:b, s:I, s:I, s:o}", "steps",
                           (json_int_t)r->trace_done, "requested", want,
                           "complete", r->trace_done >= want, "events",
                           (json_int_t)td_trace_count(r->trace), "dropped",
                           (json_int_t)td_trace_dropped(r->trace), "trace",
                           tr ? tr : json_null());
    atomic_store(&r->trace_want, 0);
    td_logf(TD_LOG_DEBUG, r->o.job, "trace of %" PRId64 " step(s): %zu "
            "events, built in %.2f ms", r->trace_done,
            td_trace_count(r->trace), (double)(td_now_ns() - t0) / 1e6);
    td__runner_emit(r, "trace", ev);
}

/* Trainer thread, per reported step: its slices and counters. */
void td__runner_trace_step(td_runner *r, const td_step_info *s,
                           int64_t ckpt_ns, int closed)
{
    if (!r->tracing || s->step < r->trace_from)
        return;
    /* numbered from 1, as the step events and checkpoints number them */
    td_trace_step ts = {.step = s->step + 1, .start_ns = s->start_ns,
                        .step_ns = s->step_ns,
                        .data_wait_ns = s->data_wait_ns, .h2d_ns = s->h2d_ns,
                        .compute_ns = s->compute_ns, .d2h_ns = s->d2h_ns,
                        .checkpoint_ns = ckpt_ns, .copy_ns = s->copy_ns};
    td_trace_add_step(r->trace, &ts);
    int64_t end = s->start_ns + s->step_ns;
    if (s->step_ns > 0)
        td_trace_counter(r->trace, "samples_per_s", end,
                         (double)s->n / ((double)s->step_ns / 1e9));
    if (closed > 0) {
        td_metrics_counters mc;
        td_metrics_get_counters(r->metrics, &mc);
        if (mc.device_idle_known)
            td_trace_counter(r->trace, "device_idle_ratio", end,
                             mc.device_idle_ratio);
        if (mc.verdict != r->trace_verdict)
            td_trace_instant(r->trace, TD_TRACK_TRAINER, "verdict changed",
                             end, td_verdict_name(mc.verdict), s->step + 1);
        r->trace_verdict = mc.verdict;
    }
    int want = atomic_load(&r->trace_want);
    if (++r->trace_done >= want)
        td__runner_trace_finish(r);
    else
        td__trace_progress(r, want, 0);
}

int td_runner_trace(td_runner *r, int steps)
{
    int none = 0;
    if (steps < 1)
        return -EINVAL;
    if (!atomic_compare_exchange_strong(&r->trace_want, &none, steps))
        return -EBUSY;
    return 0;
}

void td_runner_trace_cancel(td_runner *r)
{
    /* Ask for one step: a recording ends at the next one (and is thrown
     * away, nobody waits), one not yet armed records a single step. */
    int cur = atomic_load(&r->trace_want);
    while (cur > 1 && !atomic_compare_exchange_weak(&r->trace_want, &cur, 1))
        ;
}
