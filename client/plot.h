/* plot.h - a job's learning curves as one PNG (trainctl plot, issue 18).
 *
 * Draws, from a job record as `show` returns it (its "history": one entry
 * per finished epoch, and its "curve": the metrics-window points), four
 * panels against the training step: loss, accuracy, throughput and idle.
 * Owns: the layout, the colours and the drawing, all through cairo's
 * image surface, written with cairo_surface_write_to_png.  Never: talks to
 * the daemon, or draws a missing value (JSON null) as anything: it is
 * skipped, and a line is broken where it is.
 *
 * The layout and the colours are public so that tests can find each
 * series in its panel by its exact colour: every series has its own, used
 * for nothing else, and drawn fully opaque.
 */
#ifndef TD_CLIENT_PLOT_H
#define TD_CLIENT_PLOT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define TD_PLOT_MIN_W 400
#define TD_PLOT_MIN_H 300
#define TD_PLOT_MAX_SIDE 8000

enum td_plot_panel {
    TD_PLOT_LOSS,     /* window train loss, epoch train and val loss */
    TD_PLOT_ACC,      /* epoch train and val accuracy, percent */
    TD_PLOT_SPEED,    /* samples/s */
    TD_PLOT_IDLE,     /* device idle and input wait, percent */
    TD_PLOT_NPANELS
};

enum td_plot_series_id {
    TD_PLOT_S_LOSS_WINDOW, /* curve[].train_loss */
    TD_PLOT_S_LOSS_TRAIN,  /* history[].train_loss */
    TD_PLOT_S_LOSS_VAL,    /* history[].val_loss */
    TD_PLOT_S_ACC_TRAIN,   /* history[].train_acc */
    TD_PLOT_S_ACC_VAL,     /* history[].val_acc */
    TD_PLOT_S_SPEED,       /* curve[].samples_per_s */
    TD_PLOT_S_DEVICE_IDLE, /* curve[].device_idle_ratio */
    TD_PLOT_S_INPUT_WAIT,  /* curve[].input_wait_ratio */
    TD_PLOT_NSERIES
};

typedef struct td_plot_series_info {
    const char *key;   /* the field of the history or curve entries */
    const char *label; /* the legend's words */
    int panel;         /* enum td_plot_panel */
    int per_epoch;     /* 1: from history (markers), 0: from curve */
    double scale;      /* 100 for ratios shown as percent */
    uint32_t rgb;      /* 0xRRGGBB, this series' alone */
} td_plot_series_info;

extern const td_plot_series_info td_plot_series[TD_PLOT_NSERIES];

typedef struct td_plot_rect {
    int x, y, w, h;
} td_plot_rect;

/* Where panel p is in a width x height image: its whole rectangle (title,
 * legend, axes and tick labels) and its data area (inside the axes, where
 * the series are drawn, clipped). */
void td_plot_layout(int width, int height, int panel, td_plot_rect *whole,
                    td_plot_rect *area);

typedef struct td_plot_stats {
    int epochs;  /* history entries */
    int windows; /* curve entries */
    int points[TD_PLOT_NSERIES]; /* values drawn (nulls left out) */
    int cut[TD_PLOT_NPANELS];    /* values above the axis (a loss spike:
                                    td_plot_loss_top in plot_int.h) */
} td_plot_stats;

/* Draws job (a record as `show` returns it) into a width x height PNG at
 * path.  When the curve (old records) has no entries, the throughput and
 * idle panels use the history's per-epoch values of the same names.
 * stats (may be NULL) gets what was drawn.  0, or: -EINVAL (size out of
 * range), -ENODATA (no history entry nor curve point: "job N has no
 * finished epoch or metrics window yet"), -ENOMEM, -EIO (the PNG could
 * not be written); err says why. */
int td_plot_curves(const json_t *job, const char *path, int width,
                   int height, td_plot_stats *stats, char *err,
                   size_t errcap);

/* ---- several jobs (trainctl plot JOB JOB...) ----------------------------
 * One colour per job (td_plot_job_rgb, in the order given), drawn by
 * nothing else; four panels against the epoch (a window at step s of a
 * job with E steps per epoch sits at s / E, a finished epoch k at k + 1):
 * train loss of the metrics windows, val loss and val accuracy of each
 * finished epoch (a dot each), samples/s of the windows.  A record
 * without a curve gives its history's per-epoch values instead.  The
 * title band names each job by its swatch. */

#define TD_PLOT_MAX_JOBS 10

enum td_plot_cmp_panel {
    TD_PLOT_C_TRAIN_LOSS, /* curve[].train_loss */
    TD_PLOT_C_VAL_LOSS,   /* history[].val_loss */
    TD_PLOT_C_VAL_ACC,    /* history[].val_acc, percent */
    TD_PLOT_C_SPEED,      /* curve[].samples_per_s */
    TD_PLOT_C_NPANELS
};

extern const uint32_t td_plot_job_rgb[TD_PLOT_MAX_JOBS];
/* The record field panel p draws ("train_loss", ...). */
const char *td_plot_compare_key(int panel);

typedef struct td_plot_cmp_stats {
    int epochs[TD_PLOT_MAX_JOBS], windows[TD_PLOT_MAX_JOBS];
    int points[TD_PLOT_MAX_JOBS][TD_PLOT_C_NPANELS]; /* values drawn */
    int cut[TD_PLOT_C_NPANELS]; /* values above the axis (a loss spike) */
} td_plot_cmp_stats;

/* Draws the n (1..TD_PLOT_MAX_JOBS) job records into a width x height PNG
 * at path.  0, or -EINVAL (n or size out of range), -ENODATA (no job has
 * anything to draw), -ENOMEM, -EIO; err says why. */
int td_plot_compare(const json_t *const *jobs, int n, const char *path,
                    int width, int height, td_plot_cmp_stats *st, char *err,
                    size_t errcap);

#endif
