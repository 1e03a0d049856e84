/* prom.c - Prometheus text exposition (see prom.h).
 *
 * Owns: the family table (name, type, help) and the rendering of
 * snapshots, family by family (HELP and TYPE once, then one sample per
 * job and label set), as the text format 0.0.4 asks.
 * Never: touches anything but its arguments.
 */
#include "obs/prom.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

typedef struct td__out {
    char *buf;
    size_t cap, len;
    int overflow;
} td__out;

__attribute__((format(printf, 2, 3))) static void td__put(td__out *o,
                                                          const char *fmt,
                                                          ...)
{
    va_list ap;
    size_t room = o->len < o->cap ? o->cap - o->len : 0;
    va_start(ap, fmt);
    int n = vsnprintf(room ? o->buf + o->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= room) {
        o->overflow = 1;
        o->len = o->cap;
        return;
    }
    o->len += (size_t)n;
}

static void td__family(td__out *o, const char *name, const char *type,
                       const char *help)
{
    td__put(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One sample with the job's labels and optional extra label pairs. */
static void td__sample(td__out *o, const char *name, const td_prom_job *j,
                       const char *extra, double v)
{
    td__put(o, "%s{job=\"%ld\",device=\"%s\"%s%s} %.9g\n", name, j->job,
            j->device, extra ? "," : "", extra ? extra : "", v);
}

typedef double (*td__get)(const td_prom_job *j);

#define TD__GET(fn, expr)                                                    \
    static double fn(const td_prom_job *j) { return (double)(expr); }
TD__GET(g_samples, j->mc.samples_total)
TD__GET(g_steps, j->mc.steps_total)
TD__GET(g_windows, j->mc.windows_total)
TD__GET(g_busy, j->mc.device_busy_seconds_total)
TD__GET(g_sps, j->mc.samples_per_s)
TD__GET(g_input, j->mc.input_wait_ratio)
TD__GET(g_planned, j->steps_planned)
TD__GET(g_epoch, j->epoch)
TD__GET(g_ckw, j->ckpt_written)
TD__GET(g_ckf, j->ckpt_failed)
TD__GET(g_cks, j->ckpt_skipped)
TD__GET(g_ckt, j->ckpt_write_s)
TD__GET(g_stall, j->mc.phase_seconds_total[TD_PHASE_CHECKPOINT])
#undef TD__GET

static const struct {
    const char *name, *type, *help;
    td__get get;
} td__plain[] = {
    {"traind_samples_total", "counter", "Samples trained.", g_samples},
    {"traind_steps_total", "counter", "Training steps taken.", g_steps},
    {"traind_windows_total", "counter", "Metric windows closed.", g_windows},
    {"traind_device_busy_seconds_total", "counter",
     "Device compute time from the backend's events.", g_busy},
    {"traind_checkpoint_stall_seconds_total", "counter",
     "Trainer time spent taking checkpoints.", g_stall},
    {"traind_samples_per_second", "gauge",
     "Samples per second over the last window (warm-up excluded).", g_sps},
    {"traind_input_wait_ratio", "gauge",
     "Share of step time waiting for input (data_wait + blocking h2d), "
     "last window.", g_input},
    {"traind_job_steps_planned", "gauge",
     "Training steps the job will take in all (epochs x steps).", g_planned},
    {"traind_job_epoch", "gauge", "The epoch being trained (0-based).",
     g_epoch},
    {"traind_checkpoints_written_total", "counter", "Checkpoints written.",
     g_ckw},
    {"traind_checkpoint_failures_total", "counter",
     "Checkpoints that failed to write.", g_ckf},
    {"traind_checkpoints_skipped_total", "counter",
     "Checkpoints skipped because earlier ones were still being written.",
     g_cks},
    {"traind_checkpoint_write_seconds_total", "counter",
     "Checkpoint writer time (write, fsync, rename).", g_ckt},
};

static void td__jobs(td__out *o, const td_prom_job *jobs, int n)
{
    char l[96];
    for (size_t f = 0; f < sizeof td__plain / sizeof td__plain[0]; f++) {
        td__family(o, td__plain[f].name, td__plain[f].type, td__plain[f].help);
        for (int i = 0; i < n; i++)
            td__sample(o, td__plain[f].name, &jobs[i], NULL,
                       td__plain[f].get(&jobs[i]));
    }
    td__family(o, "traind_step_phase_seconds_total", "counter",
               "Host step time by phase (attributed by priority, they sum "
               "to the step time).");
    for (int i = 0; i < n; i++)
        for (int p = 0; p < TD_PHASE_COUNT; p++) {
            snprintf(l, sizeof l, "phase=\"%s\"", td_phase_name(p));
            td__sample(o, "traind_step_phase_seconds_total", &jobs[i], l,
                       jobs[i].mc.phase_seconds_total[p]);
        }
    td__family(o, "traind_step_duration_seconds", "summary",
               "Step wall time: quantiles of the last window, sum and count "
               "of every step.");
    for (int i = 0; i < n; i++) {
        const td_prom_job *j = &jobs[i];
        td__sample(o, "traind_step_duration_seconds", j, "quantile=\"0.5\"",
                   j->mc.step_p50_s);
        td__sample(o, "traind_step_duration_seconds", j, "quantile=\"0.9\"",
                   j->mc.step_p90_s);
        td__sample(o, "traind_step_duration_seconds_sum", j, NULL,
                   j->mc.step_seconds_total);
        td__sample(o, "traind_step_duration_seconds_count", j, NULL,
                   (double)j->mc.steps_total);
    }
    td__family(o, "traind_device_idle_ratio", "gauge",
               "1 - device busy time / window wall time (a lower bound), "
               "last window.");
    for (int i = 0; i < n; i++)
        if (jobs[i].mc.device_idle_known)
            td__sample(o, "traind_device_idle_ratio", &jobs[i], NULL,
                       jobs[i].mc.device_idle_ratio);
    td__family(o, "traind_bottleneck_info", "gauge",
               "The last window's verdict (value 1).");
    for (int i = 0; i < n; i++) {
        const char *sev = td_severity_name(jobs[i].mc.severity);
        snprintf(l, sizeof l, "verdict=\"%s\",severity=\"%s\"",
                 td_verdict_name(jobs[i].mc.verdict), sev ? sev : "");
        td__sample(o, "traind_bottleneck_info", &jobs[i], l, 1);
    }
}

/* The learning curves: a sample only where the value is known. */
static void td__curves(td__out *o, const td_prom_job *jobs, int n)
{
    static const struct {
        const char *name, *help;
        size_t off;
    } f[] = {
        {"traind_learning_rate", "Learning rate of the last step.",
         offsetof(td_prom_job, lr)},
        {"traind_train_loss", "Mean per-sample training loss over the last "
         "metrics window.", offsetof(td_prom_job, train_loss)},
        {"traind_epoch_train_loss", "Mean training loss of the last "
         "finished epoch.", offsetof(td_prom_job, epoch_train_loss)},
        {"traind_epoch_train_accuracy", "Training accuracy of the last "
         "finished epoch.", offsetof(td_prom_job, epoch_train_acc)},
        {"traind_val_loss", "Validation loss after the last finished epoch "
         "(absent without a validation set).", offsetof(td_prom_job,
                                                        val_loss)},
        {"traind_val_accuracy", "Validation accuracy after the last "
         "finished epoch (absent without a validation set).",
         offsetof(td_prom_job, val_acc)},
    };
    for (size_t k = 0; k < sizeof f / sizeof f[0]; k++) {
        td__family(o, f[k].name, "gauge", f[k].help);
        for (int i = 0; i < n; i++) {
            double v;
            memcpy(&v, (const char *)&jobs[i] + f[k].off, sizeof v);
            if (isfinite(v))
                td__sample(o, f[k].name, &jobs[i], NULL, v);
        }
    }
}

/* Loss scaling: only the jobs that scale their loss. */
static void td__loss_scale(td__out *o, const td_prom_job *jobs, int n)
{
    td__family(o, "traind_loss_scale", "gauge",
               "Loss scale after the last step (jobs with loss scaling).");
    for (int i = 0; i < n; i++)
        if (jobs[i].has_loss_scale)
            td__sample(o, "traind_loss_scale", &jobs[i], NULL,
                       jobs[i].loss_scale);
    td__family(o, "traind_skipped_steps_total", "counter",
               "Steps skipped because a gradient was inf or NaN (loss "
               "scaling).");
    for (int i = 0; i < n; i++)
        if (jobs[i].has_loss_scale)
            td__sample(o, "traind_skipped_steps_total", &jobs[i], NULL,
                       (double)jobs[i].skipped_steps);
}

static void td__pipelines(td__out *o, const td_prom_job *jobs, int n)
{
    static const char *stages[] = {"read", "decode", "augment",
                                   "wait_for_slot"};
    char l[64];
    td__family(o, "traind_input_workers", "gauge",
               "Active decode workers.");
    for (int i = 0; i < n; i++)
        if (jobs[i].has_pipeline)
            td__sample(o, "traind_input_workers", &jobs[i], NULL,
                       jobs[i].workers);
    td__family(o, "traind_input_ring_depth", "gauge",
               "Batches the workers prepare ahead of the trainer.");
    for (int i = 0; i < n; i++)
        if (jobs[i].has_pipeline)
            td__sample(o, "traind_input_ring_depth", &jobs[i], NULL,
                       jobs[i].prefetch);
    td__family(o, "traind_bad_samples_total", "counter",
               "Distinct corrupt or unreadable samples skipped.");
    for (int i = 0; i < n; i++)
        if (jobs[i].has_pipeline)
            td__sample(o, "traind_bad_samples_total", &jobs[i], NULL,
                       (double)jobs[i].bad_samples);
    /* each family's lines one group: a parser reads a sample after
     * another family's TYPE as an untyped family of its own */
    td__family(o, "traind_input_samples_total", "counter",
               "Samples decoded into batch slots.");
    for (int i = 0; i < n; i++)
        if (jobs[i].has_pipeline)
            td__sample(o, "traind_input_samples_total", &jobs[i], NULL,
                       (double)jobs[i].decoded_samples);
    td__family(o, "traind_input_bytes_total", "counter",
               "Compressed bytes decoded.");
    for (int i = 0; i < n; i++)
        if (jobs[i].has_pipeline)
            td__sample(o, "traind_input_bytes_total", &jobs[i], NULL,
                       (double)jobs[i].decoded_bytes);
    td__family(o, "traind_input_stage_seconds_total", "counter",
               "Decode worker time by stage, all workers.");
    for (int i = 0; i < n; i++) {
        const td_prom_job *j = &jobs[i];
        double v[4] = {j->read_s, j->decode_s, j->augment_s, j->slot_wait_s};
        if (!j->has_pipeline)
            continue;
        for (int s = 0; s < 4; s++) {
            snprintf(l, sizeof l, "stage=\"%s\"", stages[s]);
            td__sample(o, "traind_input_stage_seconds_total", j, l, v[s]);
        }
    }
}

static void td__process(td__out *o, const td_prom_process *p)
{
    td__family(o, "traind_uptime_seconds", "gauge",
               "Seconds since the daemon started.");
    td__put(o, "traind_uptime_seconds %.9g\n", p->uptime_s);
    td__family(o, "traind_jobs", "gauge", "Jobs in the job table by state.");
    for (int s = 0; s < p->nstates && s < 8; s++)
        td__put(o, "traind_jobs{state=\"%s\"} %d\n", p->state_names[s],
                p->jobs[s]);
    td__family(o, "traind_clients", "gauge", "Connected control clients.");
    td__put(o, "traind_clients %d\n", p->clients);
    td__family(o, "traind_scrapes_total", "counter",
               "Requests served by this endpoint.");
    td__put(o, "traind_scrapes_total %lld\n", (long long)p->scrapes);
    if (p->heap_bytes >= 0) {
        td__family(o, "traind_heap_bytes", "gauge",
                   "Bytes of the daemon's heap in use (malloc).");
        td__put(o, "traind_heap_bytes %.17g\n", p->heap_bytes);
    }
}

int td_prom_render(const td_prom_job *jobs, int njobs,
                   const td_prom_process *proc, char *buf, size_t cap)
{
    td__out o = {buf, cap, 0, 0};
    if (cap)
        buf[0] = '\0';
    td__jobs(&o, jobs, njobs);
    td__curves(&o, jobs, njobs);
    td__loss_scale(&o, jobs, njobs);
    td__pipelines(&o, jobs, njobs);
    if (proc)
        td__process(&o, proc);
    return o.overflow ? -ENOSPC : (int)o.len;
}
