/* eta.h - how long a job has left, from its first steps on.
 *
 * ETA = steps left x the mean training step + evaluations left x the
 * time of one evaluation.  The mean starts as the plain average of the
 * steps so far and becomes a moving one (weight 1/50) after 50 steps, so
 * it follows a job that speeds up or slows down.  An epoch's last step
 * (whose wall time also holds the evaluation) is left out of it.  Until
 * an evaluation has been timed it is estimated as the validation batches
 * x a third of a training step (a forward pass of the three in a step).
 */
#ifndef TD_JOB_ETA_H
#define TD_JOB_ETA_H

#include <stdint.h>

typedef struct td_eta {
    int64_t steps_total;      /* all epochs */
    int64_t steps_per_epoch;
    int64_t epochs;
    int64_t val_batches;      /* per evaluation; 0: no validation */
    int64_t seen;             /* steps in the mean */
    double step_s;            /* mean training step, seconds */
    double eval_s;            /* last evaluation's time; < 0: none yet */
} td_eta;

void td_eta_init(td_eta *e, int64_t steps_total, int64_t steps_per_epoch,
                 int64_t epochs, int64_t val_batches);
/* One step done: global 0-based step index, its wall time. */
void td_eta_step(td_eta *e, int64_t step, double step_s);
/* An evaluation took eval_s seconds. */
void td_eta_eval(td_eta *e, double eval_s);
/* Seconds left when `done` steps are done and the evaluation of epoch
 * index epoch_done (-1: none) is the last one finished.  < 0: unknown
 * (no step timed yet). */
double td_eta_left(const td_eta *e, int64_t done, int64_t epoch_done);

#endif
