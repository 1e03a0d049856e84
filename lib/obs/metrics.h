/* metrics.h - per-step phase times, windows, bottleneck verdicts.
 *
 * A pure single-threaded accumulator: the trainer feeds it once per step
 * (td_metrics_step) with host-clock durations of the step's phases, and the
 * device busy times either in the same call (CPU backend: known at once)
 * or later (td_metrics_device, for a GPU backend that reads its events one
 * or two steps behind).  It never reads a clock or sleeps, so tests drive
 * it with synthetic timings.
 *
 * Host phases are attributed by priority, checkpoint > data_wait > h2d >
 * d2h > other: each phase gets at most what is left of the step after the
 * phases before it, and `other` is the remainder, so the five always sum
 * exactly to the step time even when the caller's measurements overlap.
 *
 * Steps are counted from the first call; the first warmup_steps are left
 * out of windows and epoch aggregates (but not of the cumulative
 * counters).  A window closes after window_steps steps once their device
 * times are in, or max_device_lag steps later without the missing ones.
 * See docs/metrics.md for every field, verdict and threshold.
 */
#ifndef TD_METRICS_H
#define TD_METRICS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

enum td_phase {
    TD_PHASE_CHECKPOINT = 0,
    TD_PHASE_DATA_WAIT,
    TD_PHASE_H2D,
    TD_PHASE_D2H,
    TD_PHASE_OTHER,
    TD_PHASE_COUNT
};
const char *td_phase_name(enum td_phase p);

/* What compute_bound's advice says about precision. */
enum td_precision_advice {
    TD_ADVICE_MIXED = 0,   /* fp32 where the device has a faster precision:
                              suggest it */
    TD_ADVICE_IN_USE = 1,  /* the job computes in bf16 or fp16 already */
    TD_ADVICE_NO_FASTER = 2, /* fp32, and nothing faster here (a CPU
                                without bf16, or where bf16 is slower) */
};

enum td_verdict {
    TD_VERDICT_NONE = 0,          /* no window closed yet */
    TD_VERDICT_CHECKPOINT_STALL,
    TD_VERDICT_INPUT_BOUND,
    TD_VERDICT_H2D_BOUND,
    TD_VERDICT_HOST_BOUND,
    TD_VERDICT_COMPUTE_BOUND,
    TD_VERDICT_UNATTRIBUTED_IDLE,
    TD_VERDICT_UNDETERMINED,      /* no device times were reported */
    TD_VERDICT_COUNT
};
enum td_severity { TD_SEV_NONE = 0, TD_SEV_MODERATE, TD_SEV_HIGH };
const char *td_verdict_name(enum td_verdict v);
const char *td_severity_name(enum td_severity s); /* NULL for none */
const char *td_verdict_advice(enum td_verdict v, enum td_severity s);
/* The same, for a job whose precision is p: compute_bound's advice names
 * mixed precision only where it would help (TD_ADVICE_MIXED). */
const char *td_verdict_advice_for(enum td_verdict v, enum td_severity s,
                                  enum td_precision_advice p);
/* input_bound's advice for a job whose decode workers already have every
 * CPU it may use (more workers would not decode faster). */
const char *td_verdict_advice_input_cpus(enum td_severity s);

/* All verdict thresholds, in one place (metrics.c), ratios 0-1. */
typedef struct td_metrics_thresholds {
    double checkpoint_ratio;     /* checkpoint_stall at >= this share */
    int checkpoint_outliers;     /* ... or more than this many outliers */
    double outlier_factor;       /* outlier: step > factor * p50 ... */
    double outlier_ckpt_share;   /* ... with > this share in checkpoint */
    double input_high, input_moderate;
    double h2d_share;            /* h2d_bound: h2d > this share of input */
    double host_high, host_moderate;
    double compute_idle;         /* compute_bound: device idle < this */
} td_metrics_thresholds;
const td_metrics_thresholds *td_metrics_get_thresholds(void);

typedef struct td_step_times {
    int64_t step;            /* the trainer's step id; consecutive */
    int64_t epoch;
    int64_t total_ns;        /* host wall time of the whole step */
    int64_t data_wait_ns;    /* blocked waiting for a ready batch */
    int64_t h2d_ns;          /* host-blocking part of the upload */
    int64_t d2h_ns;          /* loss / metric readback */
    int64_t checkpoint_ns;   /* snapshot + hand-off to the writer */
    int64_t samples;
    int64_t compute_ns;      /* device busy; < 0 = reported later */
    int64_t copy_ns;         /* device copy time; < 0 = unknown */
    double loss;             /* NAN when not read this step */
} td_step_times;

typedef struct td_metrics_config {
    int warmup_steps;        /* default 20 (0 is allowed) */
    int window_steps;        /* default 100 */
    int max_device_lag;      /* default 8 steps */
    enum td_precision_advice precision; /* default TD_ADVICE_MIXED */
} td_metrics_config;
#define TD_METRICS_CONFIG_DEFAULT {20, 100, 8, TD_ADVICE_MIXED}

/* Cumulative counters, every step included. */
typedef struct td_metrics_counters {
    uint64_t steps_total, samples_total, windows_total;
    double phase_seconds_total[TD_PHASE_COUNT];
    double step_seconds_total;
    double device_busy_seconds_total, device_copy_seconds_total;
    uint64_t late_device_reports;   /* for a window already closed */
    /* gauges from the last closed window */
    double samples_per_s, device_idle_ratio, input_wait_ratio;
    double step_p50_s, step_p90_s;
    int device_idle_known;
    enum td_verdict verdict;
    enum td_severity severity;
} td_metrics_counters;

typedef struct td_metrics td_metrics;

/* -EINVAL for window_steps < 1 or negative values; -ENOMEM. */
int td_metrics_create(td_metrics **out, const td_metrics_config *cfg);
void td_metrics_destroy(td_metrics *m);

/* Records one step.  Returns the number of windows that closed (0-2), or
 * -EINVAL (negative durations, or a step id that is not the next one). */
int td_metrics_step(td_metrics *m, const td_step_times *t);
/* Device busy times of an earlier step.  Returns windows closed (0-1);
 * a report for a closed window is counted in late_device_reports and
 * returns 0; -EINVAL for a step not yet recorded or negative times. */
int td_metrics_device(td_metrics *m, int64_t step, int64_t compute_ns,
                      int64_t copy_ns);

/* The last recorded step as an event payload (new reference). */
json_t *td_metrics_step_json(const td_metrics *m);
/* The last closed window (new reference), or NULL if none closed yet. */
json_t *td_metrics_window_json(const td_metrics *m);
/* Ends the current epoch: its aggregate payload (new reference), and the
 * epoch accumulators restart. */
json_t *td_metrics_end_epoch(td_metrics *m);

void td_metrics_get_counters(const td_metrics *m, td_metrics_counters *c);
/* Prometheus text format (traind_ prefix, job label) into buf.  Returns
 * the length, or -ENOSPC when cap is too small. */
int td_metrics_prometheus(const td_metrics *m, long job, char *buf,
                          size_t cap);

#endif
