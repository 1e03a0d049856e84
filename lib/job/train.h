/* train.h - the step loop (docs/design.md#the-step-loop): one job, one
 * backend, one thread.
 *
 * Owns: pulling batches from a td_batch_source, driving the backend
 * (upload, train_step, read_stats), the learning-rate schedule, the
 * evaluation pass at the end of each epoch (batch norm in inference mode),
 * synthetic input, and per-step timing.  Timing and statistics of step k
 * are read after step k+1 was enqueued, so a GPU backend is never
 * synchronised every step; the CPU backend has finished anyway.
 * Never does: print, talk to sockets, write files.  Metrics, logging and
 * checkpoints hook in through the callbacks, which run on the trainer
 * thread at step boundaries and may call td_trainer_snapshot().
 */
#ifndef TD_TRAIN_H
#define TD_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "input/batch.h"
#include "model/model.h"

typedef struct td_train_config {
    const td_model *model;      /* borrowed */
    const char *device;         /* "cpu" (default) */
    td_backend_config backend;  /* batch, threads, normalisation, seed,
                                   optimizer */
    int64_t epochs;
    int64_t steps_per_epoch;    /* training batches per epoch (schedule) */
    int synthetic;              /* input.source "synthetic": one generated
                                   batch kept on the device, no source */
    int64_t warmup_steps;       /* excluded from samples_per_s (default 20
                                   when < 0) */
} td_train_config;

typedef struct td_step_info {
    int64_t step;               /* global, 0-based */
    int64_t epoch, step_in_epoch;
    int n;                      /* samples */
    double loss;                /* mean over the batch */
    int64_t correct;
    double lr;
    int64_t data_wait_ns;       /* blocked in the source's next() */
    int64_t h2d_ns;             /* host time blocked in upload */
    int64_t compute_ns;         /* device time of the step (events) */
    int64_t d2h_ns;             /* host time reading statistics back */
    int64_t step_ns;            /* wall time from this step's start to the
                                   next step's start (or the loop's end) */
    int64_t start_ns;           /* host clock (td_now_ns) at the start */
    int64_t copy_ns;            /* device time of the upload (events) */
    /* loss scaling (backend cfg.loss_scale > 0; all 0 when off): the
     * scale after this step, 1 when this step was skipped (an inf or NaN
     * gradient: no update), and the steps skipped so far in the run */
    double loss_scale;
    int skipped;
    int64_t skipped_total;
} td_step_info;

typedef struct td_epoch_info {
    int64_t epoch, steps;       /* steps: global count so far */
    double train_loss, train_acc;
    double val_loss, val_acc;   /* NAN when there is no validation source */
    int64_t val_samples;
    double train_s, eval_s;
    double lr;                  /* of the epoch's last step */
} td_epoch_info;

typedef struct td_trainer td_trainer;

/* Where training stands: `steps` steps applied to the parameters, and the
 * next step to run is batch `step_in_epoch` of `epoch`. */
typedef struct td_train_position {
    int64_t steps, epoch, step_in_epoch;
    /* The epoch so far: the sum of the per-sample train loss, the correct
     * predictions and the samples of its finished steps.  Complete (every
     * step before `steps` counted) only after td_trainer_settle. */
    double ep_loss_sum;
    int64_t ep_correct, ep_samples;
    /* The epoch's training time so far, seconds (its evaluation, and the
     * time between a stop and the resume, excluded): a resumed epoch's
     * train_s covers the whole epoch. */
    double ep_train_s;
} td_train_position;

/* Return non-zero from a callback to stop at this step boundary.
 * on_step and on_epoch report steps one step late (their statistics are
 * read while the next step runs), so the parameters have already moved on
 * when they are called.  on_boundary runs before each step is taken, when
 * the parameters are exactly those of `pos`: the place for snapshots. */
typedef struct td_train_callbacks {
    int (*on_step)(void *user, td_trainer *t, const td_step_info *s);
    int (*on_epoch)(void *user, td_trainer *t, const td_epoch_info *e);
    int (*on_boundary)(void *user, td_trainer *t,
                       const td_train_position *pos);
    void *user;
} td_train_callbacks;

typedef struct td_train_result {
    int64_t steps, epochs;      /* completed */
    int64_t samples;            /* trained samples after warm-up */
    double samples_per_s;       /* after warm-up, evaluation excluded */
    double val_loss, val_acc;   /* last evaluation (NAN if none) */
    int stopped;                /* ended by a callback or request_stop
                                   before its last epoch's end */
} td_train_result;

int td_trainer_create(const td_train_config *cfg, td_trainer **out,
                      char *err, size_t errcap);
void td_trainer_free(td_trainer *t);

/* Runs from the trainer's position (0, or where restore put it) to the
 * end of cfg.epochs.  train may be NULL in synthetic mode; val may be
 * NULL.  Returns 0 or the first error, with a message in err. */
int td_trainer_run(td_trainer *t, td_batch_source *train,
                   td_batch_source *val, const td_train_callbacks *cb,
                   td_train_result *res, char *err, size_t errcap);

/* From any thread: stop at the next step boundary. */
void td_trainer_request_stop(td_trainer *t);

/* Parameters + optimizer state + running statistics (backend.h layout).
 * Call from a callback (a step boundary) or outside run(). */
size_t td_trainer_snapshot_floats(const td_trainer *t);
int td_trainer_snapshot(td_trainer *t, float *buf, size_t nfloats);
/* Restores a snapshot taken at pos: after global step pos->steps (so the
 * schedule and AdamW's step count continue), at the start of batch
 * pos->step_in_epoch of pos->epoch, with the epoch's sums so far (so that
 * the epoch's train loss and accuracy cover all of it); run() then
 * positions the source there. */
int td_trainer_restore(td_trainer *t, const float *buf, size_t nfloats,
                       const td_train_position *pos);

td_backend *td_trainer_backend(td_trainer *t);

/* The loss scaler after the latest reported step (scale 0: off); exact in
 * on_boundary after td_trainer_settle, and between run() calls. */
void td_trainer_loss_scale(const td_trainer *t, td_ls_state *st);
/* A resumed job's scaler state (after td_trainer_restore); -EINVAL when
 * the job has no loss scaling. */
int td_trainer_set_loss_scale(td_trainer *t, const td_ls_state *st);

/* The position the parameters correspond to (see td_train_position);
 * exact between run() calls and inside on_boundary. */
void td_trainer_position(const td_trainer *t, td_train_position *pos);

/* Inside on_boundary: waits for the step still in flight (steps run one
 * step ahead of their statistics) and reports it, so that the position's
 * epoch sums count every step before pos->steps.  Costs the overlap of one
 * step: for checkpoints, not for every boundary.  0 or negative errno
 * (the error is in the run's err). */
int td_trainer_settle(td_trainer *t);

#endif
