/* curves.h - a job's learning curves, kept in its record (loop thread).
 *
 * Two arrays, both oldest first (docs/daemon.md, "Learning curves"):
 *   history: one entry per finished epoch, from the "epoch" event:
 *     epoch (0-based, as in every event), step, train_loss, train_acc,
 *     val_loss, val_acc (null without validation), lr, samples_per_s,
 *     input_wait_ratio, device_idle_ratio (null where unknown), verdict,
 *     train_s, eval_s.
 *   curve: metrics-window points, from the "window" event: step, epoch,
 *     train_loss (the window's mean), lr, samples_per_s, input_wait_ratio,
 *     device_idle_ratio, verdict.  At most TD_CURVE_MAX: when full, every
 *     other point goes and from then on every other window is kept (the
 *     whole run stays covered at half the resolution).
 * A job resumed after a kill -9 runs again from its checkpoint: an epoch
 * or window reported again replaces what was kept from the first pass,
 * and the epochs before the checkpoint come back from it (an epoch can
 * end, and its checkpoint land, just before the kill, while its record
 * write had not).
 */
#ifndef TD_CURVES_H
#define TD_CURVES_H

#include <stdint.h>

#include <jansson.h>

enum { TD_CURVE_MAX = 1024 };

typedef struct td_curves {
    json_t *history;         /* array, owned */
    json_t *curve;           /* array, owned */
    int64_t every;           /* keep every `every`-th window (1, 2, 4...) */
    int64_t windows;         /* windows seen */
} td_curves;

/* Empty curves; 0 or -ENOMEM. */
int td_curves_init(td_curves *c);
void td_curves_free(td_curves *c);

/* Adds an "epoch" or a "window" event's data; 0 or -ENOMEM. */
int td_curves_epoch(td_curves *c, const json_t *data);
int td_curves_window(td_curves *c, const json_t *data);

/* A resumed job's epochs as its checkpoint kept them (traind.history):
 * every epoch the history lacks is put in its place.  Returns how many
 * were added, or -ENOMEM. */
int td_curves_restore(td_curves *c, const json_t *history);

/* Into / from a job record: "history", "curve", "curve_every",
 * "curve_windows".  from_record takes what is well formed and starts
 * empty where a record (an older one) has nothing. */
void td_curves_to_record(const td_curves *c, json_t *rec);
int td_curves_from_record(td_curves *c, const json_t *rec);

#endif
