/* jobs.h - the job table: records, states and their transitions.
 *
 * Owned by the loop thread; nothing here locks.  A job moves through
 * SLURM's states:
 *
 *   pending -> running -> completed | failed | cancelled
 *   running <-> suspended (pause/resume: the device is freed while suspended)
 *   pending | suspended -> cancelled
 *
 * Each change is stamped and carries a reason for people ("queued behind
 * job 3", "cancelled by uid 1000", "checkpoint write failed: ...").
 * Records are persisted as JSON in the state dir by the daemon, so the
 * table survives restarts.
 */
#ifndef TD_JOBS_H
#define TD_JOBS_H

#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

#include "curves.h"

enum td_job_state {
    TD_JOB_PENDING = 0,
    TD_JOB_RUNNING,
    TD_JOB_SUSPENDED,
    TD_JOB_COMPLETED,
    TD_JOB_CANCELLED,
    TD_JOB_FAILED,
    TD_JOB_NSTATES
};

typedef struct td_job {
    int64_t id;
    char name[128];          /* td_job_name_ok */
    uid_t uid;               /* who submitted it (SO_PEERCRED) */
    enum td_job_state state;
    char reason[256];
    json_t *spec;            /* the normalised spec (owned) */
    double submitted, started, ended; /* wall-clock seconds */
    /* progress, updated from the trainer's events */
    int64_t epoch, step, steps_total, epochs_total;
    json_t *last_window;     /* owned, may be NULL */
    json_t *last_epoch;      /* owned, may be NULL */
    td_curves curves;        /* every epoch, window points (curves.h) */
    json_t *checkpoints;     /* array of {path, step, bytes}, owned */
    json_t *result;          /* the trainer's final figures, owned, or NULL */
    char stop_note[128];     /* why a stop was requested (loop only) */
    int stop_requested;      /* TD_STOP_CANCEL/PAUSE asked of a running job
                                and not yet reached (kept in the record so
                                that a kill -9 does not lose it) */
    uint64_t persist_gen;    /* changes asked to be saved so far */
    json_t *persist_waiters; /* replies sent once a write covers them:
                                [{client, gen, line}], or NULL */
    int persist_busy;        /* a write of the record is under way */
    int persist_dirty;       /* ... and the record changed since */
    int persist_failures;    /* failed writes in a row (retried) */
    int persist_lazy;        /* progress not yet written (at most a
                                second late: td_daemon_persist_progress) */
    int64_t persist_at_ns;   /* when the last write was queued */
    int removing;            /* `remove` asked (remove.h) */
    uint64_t remove_client;  /* ... by this client */
    json_t *remove_req;      /* ... in the request with this id (owned) */
    /* An ended job whose record is on disk keeps only its list row in
     * memory (td_job_shed; its record is read back for `show`). */
    int shed;
    int shed_task;           /* its enum td_task (infer_jobs.h) */
    json_t *row;             /* its td_job_summary, owned, or NULL */
    struct td_job *next;
} td_job;

typedef struct td_jobs {
    td_job *head, *tail;     /* in submission order */
    int64_t next_id;
    size_t count;
} td_jobs;

const char *td_job_state_name(enum td_job_state s);
/* -EINVAL for an unknown name. */
int td_job_state_parse(const char *name, enum td_job_state *s);
int td_job_state_final(enum td_job_state s);

void td_jobs_init(td_jobs *t);
void td_jobs_free(td_jobs *t);
/* Adds a pending job (takes a reference to spec); NULL on ENOMEM. */
td_job *td_jobs_add(td_jobs *t, const char *name, uid_t uid, json_t *spec);
td_job *td_jobs_find(td_jobs *t, int64_t id);
/* Takes j out of the table (it stays allocated; td_jobs_insert puts it
 * back). */
void td_jobs_unlink(td_jobs *t, td_job *j);
/* Frees a job that is not in a table. */
void td_job_free(td_job *j);
/* The oldest pending job, or NULL. */
td_job *td_jobs_next_pending(td_jobs *t);

/* Moves a job to state s with a reason; returns -EINVAL (with nothing
 * changed) if the transition is not allowed by the diagram above. */
int td_job_set_state(td_job *j, enum td_job_state s, const char *reason);

/* May uid act on the job (cancel, pause, resume, checkpoint)? */
/* A job name: 1..TD_JOB_NAME_MAX bytes, no control characters (so it
 * cannot forge rows in `trainctl queue` or lines in a log). */
#define TD_JOB_NAME_MAX 64
int td_job_name_ok(const char *name);
int td_job_may_control(const td_job *j, uid_t uid);
/* May uid see j's spec, log lines and checkpoint paths?  The owner and
 * root may; others only when `all` (the jobs_visible_to_all setting). */
int td_job_may_see(const td_job *j, uid_t uid, int all);

/* A summary (for list) or the full record (for show and persistence).
 * A shed job has no record in memory: td_job_record returns NULL. */
json_t *td_job_summary(const td_job *j);
/* A row (or a state event's data) as another user sees it: its reason
 * up to the first absolute path ("data.train: dataset (a path only the
 * job's owner and root see)"), since paths are the owner's.  In place. */
void td_job_row_restrict(json_t *row);
json_t *td_job_record(const td_job *j);
/* Drops an ended job's record from memory (spec, curves, windows,
 * checkpoints, result) and keeps its summary: the daemon does this once
 * the record is on disk, so that a daemon that has run thousands of jobs
 * does not hold them all (a job of 1,000 window points held ~0.9 MB).
 * task is the job's enum td_task.  0, or -ENOMEM (nothing changed). */
int td_job_shed(td_job *j, int task);
/* A job of the fields a list row has (td_job_summary: id, name, uid,
 * state, reason, times, progress), nothing else; NULL with err when one is
 * missing or wrong. */
td_job *td_job_from_row(const json_t *row, char *err, size_t errcap);
/* Rebuilds a job from td_job_record()'s output (for restart). */
td_job *td_job_from_record(json_t *rec, char *err, size_t errcap);
/* Inserts a job (restored, or back after td_jobs_unlink) in id order,
 * which is submission order; next_id stays above it. */
void td_jobs_insert(td_jobs *t, td_job *j);

#endif
