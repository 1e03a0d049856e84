/* runner_int.h - the runner's state, shared by its files (runner.c: the
 * job's set-up and the trainer callbacks; runner_ckpt.c: checkpoints and
 * resume; runner_lscale.c: loss scaling; runner_trace.c: timeline
 * recording).  Not for use outside lib/job/runner*.c. */
#ifndef TD_RUNNER_INT_H
#define TD_RUNNER_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "job/eta.h"
#include "input/pipeline.h"
#include "job/runner.h"
#include "job/train.h"
#include "model/model.h"
#include "obs/metrics.h"
#include "obs/trace.h"
#include "store/checkpoint.h"

enum { TD__NSNAP = 2, TD__TRACE_CAP = 1 << 18 };

struct td_runner {
    td_runner_opts o;
    const td_job_spec *spec;
    td_model *model;
    json_t *graph;                   /* the model's layer graph */
    json_t *meta_json;               /* self-describing checkpoint keys */
    json_t *hist;                    /* every finished epoch's curve entry
                                        (the epoch event's figures), kept in
                                        each checkpoint as traind.history */
    json_t *snap_meta[TD__NSNAP];    /* per buffer: meta_json plus
                                        traind.history, read by the writer */
    float *lr_mult;                  /* per parameter (freeze), or NULL */
    uint8_t *bn_eval;                /* per layer (freeze_bn_stats), or
                                        NULL */
    double es_best;                  /* early stopping: best metric so far */
    int64_t es_best_epoch;           /* its epoch (0-based), -1: none yet */
    int es_bad;                      /* epochs since it improved */
    int early_stopped;
    int resumed_final;               /* the resumed checkpoint is the job's
                                        final one (runner_ckpt.c), after
                                        resumed_epochs epochs */
    int64_t resumed_epochs;
    double best_val;                 /* keep_best: the best metric so far */
    int have_best;                   /* trainer thread */
    _Atomic int64_t best_step;       /* the checkpoint to keep as best */
    double best_at_step;             /* its value (res_mu) */
    td_pipeline *train, *val;
    td_trainer *trainer;
    td_metrics *metrics;
    td_ckpt_writer *writer;
    /* opts.resume: the newest valid checkpoint, opened at create (the
     * backend's plan reads it) and restored by run; NULL with resume_rc
     * and resume_err saying why when there is none */
    td_ckpt_file *resume_f;
    char resume_path[4096];
    int resume_rc;
    char resume_err[512];
    int64_t steps_per_epoch;
    size_t snap_floats;
    float *flat;                     /* trainer snapshot, flat layout */
    td_ckpt_snapshot snap[TD__NSNAP];
    atomic_int snap_busy[TD__NSNAP]; /* owned by the writer until done */
    /* per checkpoint buffer: the event recorded after its snapshot, which
     * the writer waits for (the trainer does not), and whether the backend
     * page-locked the buffer (host_register) */
    struct td__snap_wait {
        td_backend *be;
        td_event *ev;
        int registered;
    } snap_wait[TD__NSNAP];
    atomic_int stop_reason;
    atomic_int ckpt_request;
    int64_t last_ckpt_step;
    int64_t pending_ckpt_ns;         /* checkpoint time not yet reported */
    int64_t ckpt_written, ckpt_failed, ckpt_skipped;
    char last_ckpt[4096];
    int64_t last_written_step;       /* step of the newest written, or -1 */
    char last_ckpt_err[512];         /* why the newest failed write failed */
    pthread_mutex_t res_mu;          /* last_ckpt, counters (writer thread) */
    double last_loss, last_lr;
    /* loss scaling (docs/compute.md): the scale after the latest reported
     * step (0: off) and the steps skipped so far (trainer thread) */
    double ls_scale;
    int64_t ls_skipped;
    int ls_floor_warned;             /* a skip at the floor was logged */
    /* per-sample train loss of the steps of the metrics windows still
     * open, and their samples: [w & 1] for window w (at most two are
     * open, lib/obs/metrics.c), so that a window's train_loss is the mean
     * over its own steps, not over the warm-up steps before the first or
     * the steps of the next one that came before it closed */
    double win_loss_sum[2];
    int64_t win_samples[2];
    int64_t win_seq;            /* steps td_metrics_step took */
    int64_t win_closed;         /* windows closed so far */
    int win_warm, win_steps;    /* the metrics' warm-up and window size */
    /* the curves' latest values, for the Prometheus snapshot (NAN until
     * known): the last window's mean train loss, the last finished epoch's
     * train and validation figures */
    double cur_loss, ep_train_loss, ep_train_acc, ep_val_loss, ep_val_acc;
    /* the input autotuner (workers/prefetch "auto") */
    int tune_workers, tune_prefetch; /* 1 when the spec leaves it to us */
    int64_t tune_slot_wait_ns;       /* pipeline's slot wait at last look */
    int64_t tune_starved_ns;         /* and its consumer's starved time */
    int64_t tune_at_ns;              /* when that was (0: not yet) */
    int tune_quiet_windows;          /* windows in a row without input wait */
    /* timeline recording (trace.h): want is set by td_runner_trace from
     * any thread; the rest belongs to the trainer thread */
    td_trace *trace;
    atomic_int trace_want;           /* steps requested; 0: none */
    int tracing;                     /* armed by the trainer */
    int64_t trace_from, trace_done;  /* first step recorded, steps done */
    int64_t trace_origin_ns;
    int64_t trace_progress_ns;       /* last "trace_progress" event */
    int64_t trace_copy_end, trace_compute_end; /* device track ends */
    enum td_verdict trace_verdict;
    int64_t snap_last_ns;            /* last opts.snapshot call */
    double ckpt_write_s;             /* res_mu */
    td_eta eta;                      /* time left (trainer thread) */
    int64_t eta_done;                /* steps done, as the ETA saw them */
};

/* runner.c */
void td__runner_emit(td_runner *r, const char *kind, json_t *data);
void td__runner_optim(const td_job_spec *s, td_optim_config *o);

/* runner_trace.c: timeline recording, on the trainer thread: arms a
 * requested recording at a step boundary (so it starts with a whole
 * step), adds each reported step's slices and counters, ends it and
 * emits the "trace" event. */
void td__runner_trace_boundary(td_runner *r, const td_train_position *pos);
void td__runner_trace_step(td_runner *r, const td_step_info *s,
                           int64_t ckpt_ns, int closed);
void td__runner_trace_finish(td_runner *r);

/* runner_lscale.c: loss scaling (docs/compute.md "Loss scaling") */
/* The backend's loss_scale, interval and test hook from the spec. */
void td__runner_ls_config(td_runner *r, td_backend_config *bc);
/* The step's scale and skipped count (on_step); "loss_scale" and
 * "skipped_steps" into a step or window event when scaling is on. */
void td__runner_ls_step(td_runner *r, const td_step_info *s);
void td__runner_ls_event(const td_runner *r, json_t *o);
/* "traind.loss_scale" into a checkpoint's metadata (after a settle). */
void td__runner_ls_meta(td_runner *r, json_t *meta);
/* After td_trainer_restore: the scaler from the checkpoint's key (its
 * text, or NULL without one), or a fresh one (another precision or
 * loss_scale), logged. */
void td__runner_ls_resume(td_runner *r, const char *txt, const char *path);

/* runner_best.c */
/* checkpoint.keep_best: an epoch that beats the best validation metric so
 * far marks its epoch-end checkpoint (taken at the next boundary) to be
 * linked as best.safetensors once it is on disk (runner_ckpt.c). */
void td__runner_keep_best(td_runner *r, const td_epoch_info *e);
/* early_stopping: 1 (stop, logged, an "early_stop" event) once the
 * validation metric has not improved by more than min_delta on the best
 * for `patience` epochs in a row. */
int td__runner_early_stop(td_runner *r, const td_epoch_info *e);
/* After a resume: both rules' best so far from r->hist (the epochs before
 * the checkpoint), as the run that wrote it had them, logged; 1 when
 * early stopping had ended the job at the last of them (the checkpoint is
 * then the job's final one: nothing is left to train). */
int td__runner_replay_best(td_runner *r);

/* runner_ckpt.c */
/* Snapshots the trainer at pos and hands it to the writer thread; never
 * waits for the disk (-EBUSY: both buffers busy, skipped and counted). */
int td__runner_checkpoint(td_runner *r, const td_train_position *pos);
/* The same for the job's last checkpoint, which must not be skipped: while
 * the buffers or the writer's queue are busy it waits (up to a minute; the
 * trainer has stopped, so waiting costs nothing).  Waiting is not
 * skipping: only a checkpoint still not taken after that is counted and
 * logged as skipped. */
int td__runner_checkpoint_final(td_runner *r, const td_train_position *pos);
/* Builds r->meta_json (modelmeta.h) from the spec, graph and dataset. */
int td__runner_meta(td_runner *r, char *err, size_t errcap);
/* Starts the trainer from spec.init (finetune.h), logging the report. */
int td__runner_init(td_runner *r, char *err, size_t errcap);
/* Opens the newest valid checkpoint of opts.ckpt_dir (r->resume_f), once
 * per job, before the trainer is created. */
void td__runner_resume_open(td_runner *r);
/* 1 when that checkpoint records the backend's kernel choices
 * ("traind.plan", which the resume plans again: no need to time them at
 * create), else 0. */
int td__runner_resume_has_plan(const td_runner *r);
/* Restores that checkpoint, if there is one, and closes it. */
int td__runner_resume(td_runner *r, char *err, size_t errcap);
/* The checkpoint buffers' events and page-locking: after the writer has
 * stopped, before the trainer (its backend) is freed. */
void td__runner_ckpt_release(td_runner *r);

#endif
