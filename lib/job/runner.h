/* runner.h - one training job, from its spec to its result.
 *
 * The glue of the step loop (docs/design.md#the-step-loop): builds the
 * model from the job spec, opens the input pipelines (train, and val for
 * the end-of-epoch evaluation), runs the trainer, feeds every step into
 * the metrics (phases, windows, verdicts), and takes checkpoints at step
 * boundaries that the checkpoint writer thread puts on disk while
 * training goes on.  Used by
 * `traind --run` and by the daemon's trainer thread alike.
 *
 * Threads: td_runner_run() blocks the calling thread (the trainer) for the
 * whole job.  td_runner_stop(), td_runner_checkpoint_now() and
 * td_runner_set_workers() may be called from any thread.  Events reach the
 * caller through opts.event, on the trainer thread (step, window, epoch)
 * or on the checkpoint writer thread (checkpoint): it must be thread-safe
 * and must not block.
 *
 * Resume: with opts.resume, the newest valid checkpoint in opts.ckpt_dir
 * (a corrupt newest one falls back to the one before) restores the
 * parameters, the optimizer state and the position, and the pipeline
 * starts at that batch: the job continues with the batches and losses of
 * an uninterrupted run.
 *
 * Never: talks to sockets, exits the process.
 */
#ifndef TD_RUNNER_H
#define TD_RUNNER_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "job/spec.h"
#include "obs/prom.h"

/* kind is "step", "window", "epoch", "checkpoint", "history",
 * "early_stop", "trace" or "trace_progress" (a requested trace's steps
 * recorded so far, see td_runner_trace); data is stolen. */
typedef void (*td_runner_event_fn)(void *user, const char *kind,
                                   json_t *data);

typedef struct td_runner_opts {
    const td_job_spec *spec;   /* borrowed; must outlive the runner */
    long job;                  /* job id for log lines; 0: none */
    const char *models_dir;    /* where zoo model names are looked up */
    const char *device;        /* backend: "cpu" (NULL) or "cuda:N" */
    const char *ckpt_dir;      /* NULL: no checkpoints */
    int resume;                /* continue from the newest checkpoint */
    int synthetic_steps;       /* steps per epoch on synthetic input (100) */
    td_runner_event_fn event;  /* may be NULL */
    /* The job's figures for the Prometheus endpoint, on the trainer
     * thread: about every second, on each window and at the end.  May be
     * NULL; must not block. */
    void (*snapshot)(void *user, const td_prom_job *s);
    void *user;
    /* Read the data and a model .json file as this user (base/fscred.h);
     * NULL: with the process's own rights. */
    const struct td_fscred *cred;
    /* Tests only: the backend's injected overflow (td_backend_config
     * ls_poison_step) at this global step (1-based); 0: never. */
    int64_t ls_poison_step;
} td_runner_opts;

enum td_stop_reason {
    TD_STOP_NONE = 0,
    TD_STOP_CANCEL,            /* stop now; no final checkpoint */
    TD_STOP_PAUSE,             /* stop at a step boundary, checkpoint */
    TD_STOP_SHUTDOWN,          /* the same, because the daemon stops */
};

typedef struct td_runner_result {
    int64_t steps, epochs;     /* completed */
    double samples_per_s;      /* after warm-up, evaluation excluded */
    double val_loss, val_acc;  /* last evaluation (NAN if none) */
    enum td_stop_reason stopped;
    int early_stopped;         /* ended by early_stopping (a completion) */
    char verdict[32];          /* of the last window ("none" if none) */
    int64_t bad_samples;
    int64_t checkpoints_written, checkpoints_failed, checkpoints_skipped;
    char last_checkpoint[4096]; /* path of the newest written, or "" */
    double model_mflop;        /* forward MFLOP per sample */
} td_runner_result;

typedef struct td_runner td_runner;

/* The spec's augment ops as the input pipeline takes them (a resize
 * right before a center_crop becomes that center_crop's resize): what a
 * job trains with, and what `trainctl bench-input --spec` measures.  0,
 * or TD_E_SPEC with the reason in err. */
struct td_augment;
int td_runner_augments(const td_job_spec *s, struct td_augment *out, int *n,
                       char *err, size_t errcap);

/* Builds everything (model, pipelines, backend, writer).  Errors name what
 * is wrong: "data.train: ...", "model: ...". */
int td_runner_create(const td_runner_opts *opts, td_runner **out, char *err,
                     size_t errcap);
/* Trains to the end, or until stopped.  Returns 0 (see res->stopped), or
 * a negative code with the reason in err. */
int td_runner_run(td_runner *r, td_runner_result *res, char *err,
                  size_t errcap);
void td_runner_free(td_runner *r);

/* Any thread. */
void td_runner_stop(td_runner *r, enum td_stop_reason why);
void td_runner_checkpoint_now(td_runner *r);
int td_runner_set_workers(td_runner *r, int n);

/* Any thread: records the timeline of the next `steps` steps (from the
 * next step boundary).  The Chrome trace arrives as a "trace" event on the
 * trainer thread once they are recorded, or with what there is when the
 * job ends first: {"steps": recorded, "requested", "complete", "events",
 * "dropped", "trace": {"traceEvents": [...]}}.  Before it, "trace_progress"
 * events {"steps": recorded, "requested"}: when the recording starts, at
 * each tenth of it and at most every 100 ms between.  -EINVAL for steps < 1,
 * -EBUSY while another recording is requested or under way. */
/* Any thread: a requested recording is no longer wanted; it ends after
 * at most one more step, freeing the slot. */
void td_runner_trace_cancel(td_runner *r);
int td_runner_trace(td_runner *r, int steps);

/* The total number of training steps of the job (epochs x steps). */
int64_t td_runner_steps_total(const td_runner *r);

/* The fields of an "epoch" event that make a learning-curve entry (NULL
 * ended): kept in each checkpoint as traind.history, and in the daemon's
 * job record (daemon/curves.c). */
extern const char *const td_runner_curve_keys[];

#endif
