/* prom.h - the Prometheus text exposition of traind's figures
 * (docs/design.md#where-each-metric-comes-from, names in
 * docs/observability.md).
 *
 * Owns: the metric names, their HELP text and types, and rendering them
 * from plain snapshots: one per job (filled on the trainer thread by the
 * runner) and one for the process (filled on the daemon's loop thread).
 * Names carry the `traind_` prefix, base units (seconds, bytes), `_total`
 * for counters and ratios in 0..1; job series are labelled job and device.
 * Never: reads live structures, locks, does I/O.
 */
#ifndef TD_PROM_H
#define TD_PROM_H

#include <stddef.h>
#include <stdint.h>

#include "obs/metrics.h"

typedef struct td_prom_job {
    long job;
    char device[32];
    td_metrics_counters mc;
    int64_t steps_planned;         /* epochs x steps per epoch */
    int64_t epoch;
    /* input pipeline (has_pipeline: 0 on synthetic input) */
    int has_pipeline;
    int workers, prefetch;
    int64_t bad_samples, decoded_samples, decoded_bytes;
    double read_s, decode_s, augment_s, slot_wait_s;
    /* checkpoints */
    int64_t ckpt_written, ckpt_failed, ckpt_skipped;
    double ckpt_write_s;           /* writer time, all writes */
    /* learning curves (NAN: not known yet, or no validation set) */
    double lr;                     /* of the last step */
    double train_loss;             /* the last window's mean */
    double epoch_train_loss, epoch_train_acc; /* the last finished epoch */
    double val_loss, val_acc;      /* after the last finished epoch */
    /* loss scaling (has_loss_scale: the job scales its loss) */
    int has_loss_scale;
    double loss_scale;             /* after the last reported step */
    int64_t skipped_steps;         /* steps skipped on inf/NaN gradients */
} td_prom_job;

typedef struct td_prom_process {
    double uptime_s;
    int jobs[8];                   /* by td_job_state: pending, running... */
    const char *const *state_names; /* 6 names (jobs[0..5]) */
    int nstates;
    int clients;
    int64_t scrapes;
    double heap_bytes;             /* malloc's bytes in use; < 0: unknown */
} td_prom_process;

/* Renders every job snapshot and the process into buf (NUL-terminated).
 * Returns the length, or -ENOSPC when cap is too small. */
int td_prom_render(const td_prom_job *jobs, int njobs,
                   const td_prom_process *proc, char *buf, size_t cap);

#endif
