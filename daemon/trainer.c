/* trainer.c - the daemon's trainer thread: runs one job at a time on the
 * device, and the loop-side bookkeeping around it.
 *
 * The loop thread starts a job (td_trainer_slot_start), sends it requests
 * (stop, checkpoint, worker count) and learns everything else from the
 * inbox: the runner's step/window/epoch/checkpoint events, and a final
 * TD_MSG_DONE when the thread is about to exit.  Only then does the loop
 * join the thread, decide the job's final state and start the next job.
 * The trainer thread never touches the job table or a socket.
 */
#include "trainer.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/fscred.h"
#include "base/json.h"
#include "base/log.h"
#include "daemon.h"
#include "base/clock.h"
#include "job/device.h"
#include "job/infer_run.h"
#include "job/runner.h"
#include "job/spec.h"
#include "notify.h"
#include "obs.h"
#include "model/zoo.h"
#include "settings.h"
#include "starts.h"
#include "infer_jobs.h"

struct td_trainer_slot {
    td_daemon *d;
    pthread_t thread;
    int64_t job;
    char device[64];
    char models_dir[4096];
    char ckpt_dir[4200];
    td_job_spec spec;
    td_fscred cred;            /* the submitter's, for reading its files */
    pthread_mutex_t mu;        /* runner, pending requests */
    td_runner *runner;         /* set by the thread once created */
    enum td_stop_reason pending_stop;
    int pending_workers;
    int pending_trace;         /* steps to record once the runner exists */
    /* eval and predict jobs (infer_jobs.h) */
    enum td_task task;         /* TD_TASK_TRAIN: the runner runs it */
    td_infer_spec ispec;
    atomic_int infer_stop;     /* a TD_STOP_* asked of an eval/predict */
    int64_t infer_last_ns;     /* the last progress event posted */
};

/* ---- the thread ------------------------------------------------------- */

static int td__event_kind(const char *kind)
{
    if (strcmp(kind, "step") == 0)
        return TD_EV_STEP;
    if (strcmp(kind, "window") == 0)
        return TD_EV_WINDOW;
    if (strcmp(kind, "epoch") == 0)
        return TD_EV_EPOCH;
    if (strcmp(kind, "checkpoint") == 0)
        return TD_EV_CHECKPOINT;
    if (strcmp(kind, "trace") == 0)
        return TD_MSG_TRACE;
    if (strcmp(kind, "trace_progress") == 0)
        return TD_MSG_TRACE_PROGRESS;
    if (strcmp(kind, "history") == 0)
        return TD_MSG_HISTORY;
    return 0;
}

/* Runner events, on the trainer or the checkpoint writer thread. */
static void td__on_event(void *user, const char *kind, json_t *data)
{
    td_trainer_slot *s = user;
    int k = td__event_kind(kind);
    if (k == TD_EV_STEP)
        td_daemon_heartbeat(s->d);
    if (k == TD_EV_CHECKPOINT && json_is_true(json_object_get(data, "ok")))
        td_starts_clear(s->d->state_dir, s->job); /* progress is kept */
    if (k == TD_MSG_TRACE) { /* serialised here, off the loop */
        char *text = json_dumps(json_object_get(data, "trace"),
                                JSON_COMPACT | JSON_ENSURE_ASCII);
        json_object_del(data, "trace");
        json_object_set_new(data, "text", json_string(text ? text : "{}"));
        free(text);
    }
    if (k)
        td_daemon_post(s->d, k, s->job, data);
    else
        json_decref(data);
}

static void td__on_snapshot(void *user, const td_prom_job *snap)
{
    td_trainer_slot *s = user;
    td_obs_job_snapshot(s->d, snap);
}

static void *td__thread(void *arg)
{
    td_trainer_slot *s = arg;
    td_runner_result res;
    char err[1024] = "";
    td_runner *r = NULL;
    int rc;
    td_log_set_thread_name("trainer");
    memset(&res, 0, sizeof res);
    /* Counted before anything that could take the daemon down with it. */
    int starts = td_starts_raise(s->d->state_dir, s->job);
    if (starts < 0)
        td_logf(TD_LOG_WARN, s->job, "cannot record the start attempt: %s",
                td_strerror(starts));
    td_runner_opts o = {.spec = &s->spec, .job = s->job,
                        .models_dir = s->models_dir, .device = s->device,
                        .ckpt_dir = s->ckpt_dir, .resume = 1,
                        .event = td__on_event, .snapshot = td__on_snapshot,
                        .user = s, .cred = &s->cred};
    /* Cancelled before it was built: build nothing (a big job's set-up
     * is the slow part). */
    pthread_mutex_lock(&s->mu);
    int cancelled = s->pending_stop == TD_STOP_CANCEL;
    pthread_mutex_unlock(&s->mu);
    if (cancelled) {
        res.stopped = TD_STOP_CANCEL;
        res.val_acc = res.val_loss = NAN;
        snprintf(res.verdict, sizeof res.verdict, "none");
        rc = 0;
    } else {
        rc = td_runner_create(&o, &r, err, sizeof err);
    }
    if (rc == 0 && r) {
        pthread_mutex_lock(&s->mu);
        s->runner = r;
        if (s->pending_stop != TD_STOP_NONE)
            td_runner_stop(r, s->pending_stop);
        if (s->pending_workers > 0)
            td_runner_set_workers(r, s->pending_workers);
        if (s->pending_trace > 0)
            td_runner_trace(r, s->pending_trace);
        pthread_mutex_unlock(&s->mu);
        td_daemon_heartbeat(s->d);
        td_daemon_post(s->d, TD_MSG_STARTED, s->job,
                       json_pack("{s:I}", "steps_total",
                                 (json_int_t)td_runner_steps_total(r)));
        rc = td_runner_run(r, &res, err, sizeof err);
    }
    /* the error may name a file whose name is not UTF-8: td_json_text */
    json_t *done = json_pack(
        "{s:i, s:o, s:i, s:I, s:I, s:o, s:o, s:o, s:s, s:I, s:I, s:s}",
        "rc", rc, "error", td_json_text(err[0] ? err : td_strerror(rc)),
        "stopped",
        (int)res.stopped, "steps", (json_int_t)res.steps, "epochs",
        (json_int_t)res.epochs, "samples_per_s",
        isfinite(res.samples_per_s) ? json_real(res.samples_per_s)
                                    : json_null(),
        "val_acc", isnan(res.val_acc) ? json_null() : json_real(res.val_acc),
        "val_loss", isnan(res.val_loss) ? json_null()
                                        : json_real(res.val_loss),
        "verdict", res.verdict, "bad_samples", (json_int_t)res.bad_samples,
        "checkpoints_failed", (json_int_t)res.checkpoints_failed,
        "last_checkpoint", res.last_checkpoint);
    /* The runner's threads (workers, writer) end here, off the loop. */
    pthread_mutex_lock(&s->mu);
    s->runner = NULL;
    pthread_mutex_unlock(&s->mu);
    td_runner_free(r);
    td_starts_clear(s->d->state_dir, s->job); /* ended without a crash */
    td_daemon_post(s->d, TD_MSG_DONE, s->job, done);
    return NULL;
}

/* ---- eval and predict jobs -------------------------------------------- */

/* Images done / total as "eval" events, at most 5 a second (and the
 * first and last). */
static void td__infer_progress(void *user, int64_t done, int64_t total)
{
    td_trainer_slot *s = user;
    int64_t now = td_now_ns();
    if (done != 0 && done != total && now - s->infer_last_ns < 200000000)
        return;
    s->infer_last_ns = now;
    td_daemon_heartbeat(s->d);
    td_daemon_post(s->d, TD_EV_EVAL, s->job,
                   json_pack("{s:s, s:I, s:I}", "task",
                             td_task_name(s->task), "done", (json_int_t)done,
                             "total", (json_int_t)total));
}

/* An eval or predict job, start to end, on the job's device and with its
 * submitter's identity for every file (infer_run.h). */
static void *td__infer_thread(void *arg)
{
    td_trainer_slot *s = arg;
    const td_infer_spec *is = &s->ispec;
    char err[1400] = "";
    json_t *result = NULL;
    int rc;
    td_log_set_thread_name("trainer");
    int starts = td_starts_raise(s->d->state_dir, s->job);
    if (starts < 0)
        td_logf(TD_LOG_WARN, s->job, "cannot record the start attempt: %s",
                td_strerror(starts));
    td_infer_run_opts o = {.checkpoint = is->checkpoint, .device = s->device,
                           .batch = is->batch_size, .workers = is->workers,
                           .top_k = is->top_k, .job = (long)s->job,
                           .cred = s->cred.set ? &s->cred : NULL,
                           .stop = &s->infer_stop,
                           .progress = td__infer_progress, .user = s};
    td_daemon_post(s->d, TD_MSG_STARTED, s->job,
                   json_pack("{s:I}", "steps_total",
                             (json_int_t)(is->task == TD_TASK_PREDICT
                                              ? is->n_images : 0)));
    if (is->task == TD_TASK_EVAL)
        rc = td_infer_eval(&o, is->data, &result, err, sizeof err);
    else
        rc = td_infer_predict(&o, (const char *const *)is->images,
                              is->n_images, &result, err, sizeof err);
    int stopped = rc == -ECANCELED ? atomic_load(&s->infer_stop) : 0;
    if (stopped)
        rc = 0;
    json_t *done = json_pack("{s:i, s:o, s:i, s:I, s:s}", "rc", rc, "error",
                             td_json_text(err[0] ? err : td_strerror(rc)),
                             "stopped",
                             stopped, "steps", (json_int_t)0, "task",
                             td_task_name(s->task));
    if (done && result)
        json_object_set_new(done, "result", result);
    else
        json_decref(result);
    td_starts_clear(s->d->state_dir, s->job); /* ended without a crash */
    td_daemon_post(s->d, TD_MSG_DONE, s->job, done);
    return NULL;
}

/* ---- loop side -------------------------------------------------------- */

/* For a daemon that cannot switch: the model .json and init files, which
 * it reads with its own rights, must still pass the submitter's bits when
 * the job starts, not only at submit (a symlink swapped in since then:
 * the job fails instead of reading the daemon's files). */
static int td__bits_at_start(const td_fscred *c, const td_job_spec *sp,
                             char *err, size_t errcap)
{
    const char *f[2] = {NULL, NULL}, *names[2] = {"model", "init"};
    const char *m = json_string_value(sp->model);
    size_t n = m ? strlen(m) : 0;
    if (n > 5 && strcmp(m + n - 5, ".json") == 0)
        f[0] = m;
    if (sp->init.n)
        f[1] = sp->init.v[0];
    for (int k = 0; k < 2; k++) {
        char real[PATH_MAX];
        if (f[k] &&
            (!realpath(f[k], real) || !td_fscred_bits_ok(c, real, 0))) {
            snprintf(err, errcap, "%s: %.1000s is not readable by uid %u",
                     names[k], f[k], (unsigned)c->uid);
            return -EACCES;
        }
    }
    return 0;
}

int td_trainer_slot_start(td_daemon *d, td_job *j, td_trainer_slot **out,
                          char *err, size_t errcap)
{
    td_trainer_slot *s = calloc(1, sizeof *s);
    td_device_info info;
    td_device_choice ch;
    int rc;
    if (!s) {
        snprintf(err, errcap, "out of memory");
        return -ENOMEM;
    }
    s->d = d;
    s->job = j->id;
    pthread_mutex_init(&s->mu, NULL);
    atomic_init(&s->infer_stop, 0);
    s->task = td_job_task(j);
    if (s->task != TD_TASK_TRAIN
            ? (rc = td_infer_spec_parse(j->spec, &s->ispec, err, errcap))
            : (rc = td_spec_parse(j->spec, NULL, &s->spec, err, errcap)))
        goto fail;
    /* The job's files are read with its submitter's rights (fscred.h).
     * A daemon that cannot switch checks the bits of every data file
     * for them again, as at submit (jobdata.h), and of a model .json and
     * init file here. */
    if ((rc = td_fscred_for_reader(j->uid, &s->cred, err, errcap)))
        goto fail;
    if (s->cred.bits && s->task == TD_TASK_TRAIN &&
        (rc = td__bits_at_start(&s->cred, &s->spec, err, errcap)))
        goto fail;
    td_device_probe(&info);
    if ((rc = td_device_select(s->task != TD_TASK_TRAIN ? s->ispec.device
                                                        : s->spec.device,
                               &info, &ch, err, errcap)))
        goto fail;
    if (ch.kind == TD_DEVICE_CUDA)
        snprintf(s->device, sizeof s->device, "cuda:%d", ch.index);
    else
        snprintf(s->device, sizeof s->device, "cpu");
    td_logf(TD_LOG_INFO, j->id, "device: %s%s%s", ch.desc,
            ch.kind == TD_DEVICE_CPU && info.cuda_built ? " — " : "",
            ch.kind == TD_DEVICE_CPU && info.cuda_built ? info.reason : "");
    td_models_dir(NULL, s->models_dir, sizeof s->models_dir);
    snprintf(s->ckpt_dir, sizeof s->ckpt_dir, "%s/checkpoints/%lld",
             d->state_dir, (long long)j->id);
    long long w = td_settings_int(d->settings, "workers");
    s->pending_workers = w > 0 && s->spec.input.workers == 0 ? (int)w : 0;
    if ((rc = pthread_create(&s->thread, NULL,
                             s->task != TD_TASK_TRAIN ? td__infer_thread
                                                      : td__thread,
                             s)) != 0) {
        snprintf(err, errcap, "cannot start the trainer thread: %s",
                 strerror(rc));
        rc = -rc;
        goto fail;
    }
    *out = s;
    return 0;
fail:
    td_spec_free(&s->spec);
    td_infer_spec_free(&s->ispec);
    pthread_mutex_destroy(&s->mu);
    free(s);
    return rc;
}

void td_trainer_slot_request(td_trainer_slot *s, enum td_stop_reason why)
{
    int none = 0;
    atomic_compare_exchange_strong(&s->infer_stop, &none, (int)why);
    pthread_mutex_lock(&s->mu);
    if (s->runner)
        td_runner_stop(s->runner, why);
    else if (s->pending_stop == TD_STOP_NONE)
        s->pending_stop = why;
    pthread_mutex_unlock(&s->mu);
}

void td_trainer_slot_checkpoint(td_trainer_slot *s)
{
    pthread_mutex_lock(&s->mu);
    if (s->runner)
        td_runner_checkpoint_now(s->runner);
    pthread_mutex_unlock(&s->mu);
}

void td_trainer_slot_set_workers(td_trainer_slot *s, int n)
{
    pthread_mutex_lock(&s->mu);
    if (s->runner)
        td_runner_set_workers(s->runner, n);
    else
        s->pending_workers = n;
    pthread_mutex_unlock(&s->mu);
}

int td_trainer_slot_trace(td_trainer_slot *s, int steps)
{
    int rc = 0;
    pthread_mutex_lock(&s->mu);
    if (s->runner)
        rc = td_runner_trace(s->runner, steps);
    else if (s->pending_trace > 0)
        rc = -EBUSY;
    else
        s->pending_trace = steps;
    pthread_mutex_unlock(&s->mu);
    return rc;
}

void td_trainer_slot_trace_cancel(td_trainer_slot *s)
{
    pthread_mutex_lock(&s->mu);
    if (s->runner)
        td_runner_trace_cancel(s->runner);
    else
        s->pending_trace = 0;
    pthread_mutex_unlock(&s->mu);
}

int64_t td_trainer_slot_job(const td_trainer_slot *s) { return s->job; }

void td_trainer_slot_join(td_trainer_slot *s)
{
    pthread_join(s->thread, NULL);
    td_spec_free(&s->spec);
    td_infer_spec_free(&s->ispec);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
