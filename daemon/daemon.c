/* daemon.c - the loop thread's life: start-up, signals, the inbox from
 * other threads, job persistence, shutdown.
 *
 * Persistence: each job's record is state_dir/jobs/<id>.json, written off
 * the loop on libuv's threadpool (write tmp, fsync, rename, fsync dir) so
 * the loop never waits for the disk.  At start-up the records are read
 * back (before the loop runs); jobs that were running are queued again.
 */
#define _GNU_SOURCE
#include "daemon.h"
#include "obs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/fsio.h"
#include "base/log.h"
#include "backend/cpu/caps.h"
#include "job/device.h"
#include "notify.h"
#include "settings.h"
#include "job/spec.h"
#include "infer_jobs.h"
#include "ended.h"
#include "joblog.h"
#include "remove.h"
#include "retention.h"

enum { TD_INBOX_MAX = 4096 }; /* step events beyond this are dropped */

double td_daemon_ts(const td_daemon *d)
{
    return (double)(td_now_ns() - d->started_ns) / 1e9;
}

/* ---- persistence ------------------------------------------------------ */

typedef struct td_persist_req {
    uv_work_t work;
    td_daemon *d;
    int64_t job;
    char dir[4096];
    char name[64];
    char *text;
    uint64_t gen;              /* the job's persist_gen this write covers */
    int rc;
} td_persist_req;

static void td__persist_work(uv_work_t *w)
{
    td_persist_req *r = w->data;
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", r->dir, r->name);
    r->rc = td_write_atomic(path, 0600, r->text, strlen(r->text), NULL,
                            NULL, 0);
}

void td_daemon_persist_job(td_daemon *d, td_job *j);

/* Sends the replies that waited for a write covering generation gen
 * (written or failed: the client is not kept waiting on a bad disk). */
static void td__persist_replies(td_daemon *d, td_job *j, uint64_t gen)
{
    size_t i = 0;
    while (j->persist_waiters && i < json_array_size(j->persist_waiters)) {
        json_t *w = json_array_get(j->persist_waiters, i);
        if ((uint64_t)json_integer_value(json_object_get(w, "gen")) > gen) {
            i++;
            continue;
        }
        td_client *c = td_server_client(d, (uint64_t)json_integer_value(
                                               json_object_get(w, "client")));
        const char *line = json_string_value(json_object_get(w, "line"));
        if (c && line)
            td_client_send(c, strdup(line));
        json_array_remove(j->persist_waiters, i);
    }
}

void td_daemon_persist_job_reply(td_daemon *d, td_job *j, uint64_t client,
                                 char *line)
{
    td_daemon_persist_job(d, j);
    if (!line)
        return;
    if (!j->persist_waiters)
        j->persist_waiters = json_array();
    json_array_append_new(j->persist_waiters,
                          json_pack("{s:I, s:I, s:s}", "client",
                                    (json_int_t)client, "gen",
                                    (json_int_t)j->persist_gen, "line", line));
    free(line);
}

/* Writes again every record whose last write failed, and every record
 * with progress held back (td_daemon_persist_progress). */
static void td__persist_retry(uv_timer_t *t)
{
    td_daemon *d = t->data;
    for (td_job *j = d->jobs.head; j; j = j->next)
        if (j->persist_failures || j->persist_lazy)
            td_daemon_persist_job(d, j);
}

#define TD__PERSIST_EVERY_NS TD_NS_PER_S

void td_daemon_persist_progress(td_daemon *d, td_job *j)
{
    int64_t wait = j->persist_at_ns + TD__PERSIST_EVERY_NS - td_now_ns();
    if (!j->persist_busy && wait <= 0) {
        td_daemon_persist_job(d, j);
        return;
    }
    j->persist_lazy = 1;
    if (d->shutting_down || uv_is_active((uv_handle_t *)&d->persist_retry))
        return; /* shutdown writes every job that changes state */
    if (wait < 0)
        wait = 0;
    uv_timer_start(&d->persist_retry, td__persist_retry,
                   (uint64_t)(wait / TD_NS_PER_MS) + 1, 0);
}

static void td__persist_done(uv_work_t *w, int status)
{
    td_persist_req *r = w->data;
    int failed = status < 0 || r->rc;
    td_job *j = td_jobs_find(&r->d->jobs, r->job);
    if (failed && j) {
        /* Reported where the job's owner looks (its log events, the
         * daemon's log) and written again until it lands. */
        if (j->persist_failures++ % 60 == 0) /* once a minute at most */
            td_logf(TD_LOG_ERROR, j->id, "cannot save the job record "
                    "%s/%s: %s (attempt %d); retrying every second", r->dir,
                    r->name, td_strerror(status < 0 ? -EIO : r->rc),
                    j->persist_failures);
        if (!r->d->shutting_down &&
            !uv_is_active((uv_handle_t *)&r->d->persist_retry))
            uv_timer_start(&r->d->persist_retry, td__persist_retry, 1000, 0);
    } else if (j && j->persist_failures) {
        td_logf(TD_LOG_INFO, j->id, "job record saved after %d failed "
                "attempt(s)", j->persist_failures);
        j->persist_failures = 0;
    }
    if (j)
        td__persist_replies(r->d, j, r->gen);
    if (j) {
        j->persist_busy = 0;
        if (j->persist_dirty) { /* changed while being written: again */
            j->persist_dirty = 0;
            td_daemon_persist_job(r->d, j);
        }
        if (!failed) /* an ended job's record is on disk: out of memory */
            td_ended_shed(r->d, j);
    }
    free(r->text);
    free(r);
}

/* One write per job at a time, so that records land in order; changes
 * made meanwhile are written once it finishes. */
void td_daemon_persist_job(td_daemon *d, td_job *j)
{
    j->persist_gen++;
    if (j->persist_busy) {
        j->persist_dirty = 1;
        return;
    }
    if (j->removing) { /* its files go instead (remove.h) */
        td_remove_start(d, j);
        return;
    }
    if (j->shed) /* ended, on disk, unchanged (ended.h) */
        return;
    j->persist_lazy = 0; /* this write covers it */
    j->persist_at_ns = td_now_ns();
    json_t *rec = td_job_record(j);
    td_persist_req *r = calloc(1, sizeof *r);
    if (!rec || !r)
        goto oom;
    r->text = json_dumps(rec, JSON_INDENT(1) | JSON_SORT_KEYS);
    if (!r->text)
        goto oom;
    snprintf(r->dir, sizeof r->dir, "%s/jobs", d->state_dir);
    snprintf(r->name, sizeof r->name, "%lld.json", (long long)j->id);
    r->work.data = r;
    r->d = d;
    r->job = j->id;
    r->gen = j->persist_gen;
    json_decref(rec);
    if (uv_queue_work(d->loop, &r->work, td__persist_work,
                      td__persist_done) == 0) {
        j->persist_busy = 1;
        return;
    }
    free(r->text);
    free(r);
    td_error("job %lld: cannot queue its record for saving", (long long)j->id);
    return;
oom:
    json_decref(rec);
    free(r);
    td_error("job %lld: out of memory saving its record", (long long)j->id);
}

int td_daemon_set_job_state(td_daemon *d, td_job *j, enum td_job_state s,
                            const char *reason)
{
    int rc = td_job_set_state(j, s, reason);
    if (rc)
        return rc;
    if (s != TD_JOB_RUNNING) /* held-back lines said before the state */
        td_joblog_settle(d->joblog, j->id);
    td_logf(TD_LOG_INFO, j->id, "%s: %s", td_job_state_name(s), j->reason);
    td_daemon_persist_job(d, j);
    /* the dashboard shows the state */
    td_obs_job_curves(d, j->id, j->name, td_job_state_name(s),
                      j->curves.history, j->curves.curve);
    json_t *data = json_pack("{s:s, s:s}", "state", td_job_state_name(s),
                             "reason", j->reason);
    td_server_broadcast(d, TD_EV_STATE, j->id, td_daemon_ts(d), data);
    json_decref(data);
    return 0;
}

/* ---- inbox ------------------------------------------------------------ */

void td_daemon_post(td_daemon *d, int kind, int64_t job, json_t *data)
{
    td_inbox_msg *m = malloc(sizeof *m);
    if (!m) {
        json_decref(data);
        return;
    }
    m->kind = kind;
    m->job = job;
    m->ts = td_daemon_ts(d);
    m->data = data;
    m->next = NULL;
    pthread_mutex_lock(&d->inbox_mu);
    /* Step events coalesce: while the loop has not taken the previous one
     * of this job, the newer replaces it (the loop only ever needs the
     * latest progress; windows, epochs and states are never dropped). */
    if (kind == TD_EV_STEP && d->inbox_tail &&
        d->inbox_tail->kind == TD_EV_STEP && d->inbox_tail->job == job) {
        json_t *old = d->inbox_tail->data;
        d->inbox_tail->data = data;
        d->inbox_tail->ts = m->ts;
        d->inbox_coalesced++;
        pthread_mutex_unlock(&d->inbox_mu);
        json_decref(old);
        free(m);
        return;
    }
    if (kind == TD_EV_STEP && d->inbox_len >= TD_INBOX_MAX) {
        d->inbox_dropped++;
        pthread_mutex_unlock(&d->inbox_mu);
        json_decref(data);
        free(m);
        return;
    }
    if (d->inbox_tail)
        d->inbox_tail->next = m;
    else
        d->inbox_head = m;
    d->inbox_tail = m;
    d->inbox_len++;
    pthread_mutex_unlock(&d->inbox_mu);
    uv_async_send(&d->wake);
}

/* ---- the trainer: scheduling, progress, completion --------------------- */

static void td__close_handles(td_daemon *d)
{
    uv_close((uv_handle_t *)&d->sig_term, NULL);
    uv_close((uv_handle_t *)&d->sig_int, NULL);
    uv_close((uv_handle_t *)&d->sig_hup, NULL);
    uv_close((uv_handle_t *)&d->status, NULL);
    uv_close((uv_handle_t *)&d->persist_retry, NULL);
    uv_close((uv_handle_t *)&d->watchdog, NULL);
    uv_close((uv_handle_t *)&d->submit_progress, NULL);
    uv_close((uv_handle_t *)&d->wake, NULL);
    td_obs_close(d);
}

void td_daemon_schedule(td_daemon *d)
{
    char err[1024];
    while (!d->trainer && !d->shutting_down) {
        td_job *j = td_jobs_next_pending(&d->jobs);
        if (!j)
            return;
        if (td_trainer_slot_start(d, j, &d->trainer, err, sizeof err) != 0) {
            td_daemon_set_job_state(d, j, TD_JOB_RUNNING, "starting");
            td_daemon_set_job_state(d, j, TD_JOB_FAILED, err);
            continue;
        }
        enum td_task t = td_job_task(j);
        td_daemon_set_job_state(d, j, TD_JOB_RUNNING,
                                t == TD_TASK_EVAL      ? "evaluating"
                                : t == TD_TASK_PREDICT ? "predicting"
                                                       : "training");
    }
}

/* Keeps a job's progress current from its events. */
static void td__progress(td_daemon *d, td_job *j, int kind, json_t *data)
{
    json_t *v;
    if (kind == TD_EV_EVAL) { /* images done of total, as steps */
        j->step = json_integer_value(json_object_get(data, "done"));
        j->steps_total = json_integer_value(json_object_get(data, "total"));
        return;
    }
    if ((v = json_object_get(data, "step")))
        j->step = json_integer_value(v);
    if ((v = json_object_get(data, "epoch")) && kind != TD_EV_EPOCH)
        j->epoch = json_integer_value(v);
    if ((v = json_object_get(data, "steps_total")))
        j->steps_total = json_integer_value(v);
    if ((v = json_object_get(data, "epochs_total")))
        j->epochs_total = json_integer_value(v);
    if (kind == TD_EV_WINDOW) {
        json_decref(j->last_window);
        j->last_window = json_incref(data);
        if (td_curves_window(&j->curves, data))
            td_warn("job %lld: out of memory for its learning curve",
                    (long long)j->id);
    } else if (kind == TD_EV_EPOCH) {
        json_decref(j->last_epoch);
        j->last_epoch = json_incref(data);
        if (td_curves_epoch(&j->curves, data))
            td_warn("job %lld: out of memory for its history",
                    (long long)j->id);
    } else if (kind == TD_EV_CHECKPOINT &&
               json_is_true(json_object_get(data, "ok"))) {
        json_array_append_new(j->checkpoints,
                              json_pack("{s:O, s:O, s:O}", "path",
                                        json_object_get(data, "path"), "step",
                                        json_object_get(data, "step"),
                                        "bytes",
                                        json_object_get(data, "bytes")));
        /* Only what is on disk: the writer keeps the newest K and has
         * removed the others by the time their successor is announced. */
        for (size_t i = json_array_size(j->checkpoints); i-- > 0;) {
            const char *p = json_string_value(json_object_get(
                json_array_get(j->checkpoints, i), "path"));
            if (!p || access(p, F_OK) != 0)
                json_array_remove(j->checkpoints, i);
        }
        while (json_array_size(j->checkpoints) > 16)
            json_array_remove(j->checkpoints, 0);
    }
    if (kind == TD_EV_WINDOW || kind == TD_EV_EPOCH)
        td_obs_job_curves(d, j->id, j->name, td_job_state_name(j->state),
                          j->curves.history, j->curves.curve);
    if (kind == TD_EV_WINDOW || kind == TD_EV_EPOCH ||
        kind == TD_EV_CHECKPOINT)
        td_daemon_persist_progress(d, j);
}

/* After a job ended: when a sticky CUDA error left a GPU unusable (the
 * job has failed with that error), no later job may start in this
 * process.  Stop, with an exit status that makes the service manager
 * restart traind; pending jobs stay pending for the next process. */
static int td__gpu_lost(td_daemon *d)
{
    char why[256];
    int dev = td_device_first_unusable(why, sizeof why);
    if (dev < 0)
        return 0;
    td_error("cuda:%d is unusable after a sticky CUDA error (%s); traind "
             "exits with status %d so that it is restarted (systemd: "
             "Restart=on-failure)", dev, why, TD_EXIT_GPU_LOST);
    d->exit_status = TD_EXIT_GPU_LOST;
    td_daemon_shutdown(d, "a GPU is unusable until traind restarts");
    return 1;
}

/* The trainer thread finished job m->job: decide its state. */
static void td__job_done(td_daemon *d, td_inbox_msg *m)
{
    td_job *j = td_jobs_find(&d->jobs, m->job);
    json_t *r = m->data;
    char why[512];
    if (d->trainer) {
        td_trainer_slot_join(d->trainer);
        d->trainer = NULL;
    }
    if (j) {
        int rc = (int)json_integer_value(json_object_get(r, "rc"));
        int stopped = (int)json_integer_value(json_object_get(r, "stopped"));
        enum td_task task = td_job_task(j);
        json_decref(j->result);
        /* An eval or predict job's result is what the local command
         * prints with --json (infer_run.h), when there is one. */
        j->result = task == TD_TASK_TRAIN ? json_incref(r)
                                          : json_incref(json_object_get(
                                                r, "result"));
        if (!r) { /* no report (out of memory): never "completed" */
            td_daemon_set_job_state(d, j, TD_JOB_FAILED, "the trainer's "
                                    "report of the end was lost; see the "
                                    "job's log");
        } else if (rc == TD_E_RETRY) {
            /* its checkpoint unreadable for now (not damaged): failing
             * or starting afresh would lose its steps */
            snprintf(why, sizeof why, "%.400s; its checkpoints are kept: "
                     "fix that, then trainctl resume %lld",
                     json_string_value(json_object_get(r, "error")),
                     (long long)j->id);
            td_daemon_set_job_state(d, j, TD_JOB_SUSPENDED, why);
        } else if (rc) {
            td_daemon_set_job_state(d, j, TD_JOB_FAILED,
                                    json_string_value(json_object_get(
                                        r, "error")));
        } else if (stopped == TD_STOP_CANCEL) {
            td_daemon_set_job_state(d, j, TD_JOB_CANCELLED, j->stop_note);
        } else if (stopped == TD_STOP_PAUSE) {
            td_daemon_set_job_state(d, j, TD_JOB_SUSPENDED, j->stop_note);
        } else if (stopped == TD_STOP_SHUTDOWN && task != TD_TASK_TRAIN) {
            td_daemon_set_job_state(d, j, TD_JOB_PENDING, "interrupted by a "
                                    "daemon shutdown; runs again from the "
                                    "start");
        } else if (stopped == TD_STOP_SHUTDOWN) {
            snprintf(why, sizeof why, "interrupted by a daemon shutdown at "
                     "step %lld; resumes from its last checkpoint",
                     (long long)json_integer_value(json_object_get(r,
                                                                   "steps")));
            td_daemon_set_job_state(d, j, TD_JOB_PENDING, why);
        } else if (task != TD_TASK_TRAIN) {
            td_infer_job_summary(j->result, task, why, sizeof why);
            td_daemon_set_job_state(d, j, TD_JOB_COMPLETED, why);
        } else {
            json_t *acc = json_object_get(r, "val_acc");
            char accs[32] = "no validation set";
            if (json_is_number(acc))
                snprintf(accs, sizeof accs, "val_acc %.4f",
                         json_number_value(acc));
            long long ne = json_integer_value(json_object_get(r, "epochs"));
            json_t *sps = json_object_get(r, "samples_per_s");
            char spss[48] = "samples/s not measured"; /* all in warm-up */
            if (json_is_number(sps))
                snprintf(spss, sizeof spss, "%.1f samples/s",
                         json_number_value(sps));
            int n = snprintf(why, sizeof why, "%lld epoch%s, %s, %s, "
                             "verdict %s", ne, ne == 1 ? "" : "s", spss,
                             accs, json_string_value(json_object_get(
                                       r, "verdict")));
            /* loss scaling on: where the scale ended (the last window's) */
            json_t *ls = j->last_window ? json_object_get(j->last_window,
                                                          "loss_scale")
                                        : NULL;
            if (ls && n > 0 && (size_t)n < sizeof why)
                snprintf(why + n, sizeof why - (size_t)n,
                         ", loss scale %g, skipped steps %lld",
                         json_number_value(ls),
                         (long long)json_integer_value(json_object_get(
                             j->last_window, "skipped_steps")));
            td_daemon_set_job_state(d, j, TD_JOB_COMPLETED, why);
        }
    }
    if (!d->shutting_down && td__gpu_lost(d))
        return;
    if (d->shutting_down)
        td__close_handles(d);
    else
        td_daemon_schedule(d);
}

static void td__on_wake(uv_async_t *a)
{
    td_daemon *d = a->data;
    pthread_mutex_lock(&d->inbox_mu);
    td_inbox_msg *m = d->inbox_head;
    d->inbox_head = d->inbox_tail = NULL;
    d->inbox_len = 0;
    pthread_mutex_unlock(&d->inbox_mu);
    while (m) {
        td_inbox_msg *next = m->next;
        td_job *j = td_jobs_find(&d->jobs, m->job);
        if (m->kind == TD_MSG_DONE) {
            td_obs_job_done(d, m->job);
            td__job_done(d, m);
        } else if (m->kind == TD_MSG_TRACE) {
            td_obs_trace_done(d, m->job, m->data);
        } else if (m->kind == TD_MSG_TRACE_PROGRESS) {
            td_obs_trace_progress(d, m->job, m->data);
        } else if (m->kind == TD_MSG_HISTORY) {
            /* epochs whose record had not reached the disk before the
             * daemon stopped, from the checkpoint the job resumed from */
            if (j && td_curves_restore(&j->curves, json_object_get(
                                                       m->data, "history")) > 0)
                td_daemon_persist_job(d, j);
        } else if (m->kind == TD_MSG_STARTED) {
            if (j) {
                j->steps_total = json_integer_value(json_object_get(
                    m->data, "steps_total"));
                j->epochs_total = json_integer_value(json_object_get(
                    j->spec, "epochs"));
            }
        } else {
            if (j && !j->shed)
                td__progress(d, j, m->kind, m->data);
            td_server_broadcast(d, m->kind, m->job, m->ts, m->data);
        }
        json_decref(m->data);
        free(m);
        m = next;
    }
}

/* ---- job logs --------------------------------------------------------- */

void td_daemon_job_log_path(const td_daemon *d, int64_t job, char *buf,
                            size_t cap)
{
    snprintf(buf, cap, "%s/jobs/%lld.log", d->state_dir, (long long)job);
}

/* ---- signals and life cycle ------------------------------------------- */

/* Defaults, then the config file, then the command line.  On failure
 * returns a negative code with the reason in err. */
static json_t *td__read_settings(td_daemon *d, int required, char *err,
                                 size_t errcap)
{
    json_t *s = td_settings_defaults();
    const char *k;
    json_t *v;
    if (!s) {
        snprintf(err, errcap, "out of memory");
        return NULL;
    }
    if (d->config_path[0]) {
        int rc = td_settings_load_file(s, d->config_path, err, errcap);
        if (rc && !(rc == -ENOENT && !required)) {
            json_decref(s);
            return NULL;
        }
    }
    json_object_foreach(d->overrides, k, v) json_object_set(s, k, v);
    return s;
}

static void td__apply_log_level(const json_t *settings)
{
    int level;
    if (td_log_parse_level(td_settings_str(settings, "log_level"), &level) == 0)
        td_log_set_level(level);
}

/* SIGHUP: read the config file again; apply what can change live and say
 * which settings need a restart. */
static void td__reload(td_daemon *d)
{
    char err[512];
    json_t *fresh = td__read_settings(d, 1, err, sizeof err);
    if (!fresh) {
        td_error("SIGHUP: configuration not reloaded: %s", err);
        return;
    }
    int changed = 0;
    for (const td_setting_def *def = td_setting_defs; def->key; def++) {
        json_t *old = json_object_get(d->settings, def->key);
        json_t *now = json_object_get(fresh, def->key);
        if (json_equal(old, now))
            continue;
        char *txt = json_dumps(now, JSON_ENCODE_ANY | JSON_COMPACT);
        if (def->live) {
            json_object_set(d->settings, def->key, now);
            td_info("SIGHUP: %s = %s", def->key, txt ? txt : "?");
            changed++;
        } else {
            td_warn("SIGHUP: %s = %s in %s needs a restart of traind to take "
                    "effect", def->key, txt ? txt : "?", d->config_path);
        }
        free(txt);
    }
    td__apply_log_level(d->settings);
    td_retention_due(d); /* ended_job_retention_days may have changed */
    json_decref(fresh);
    td_info("SIGHUP: configuration reloaded from %s (%d change(s) applied)",
            d->config_path[0] ? d->config_path : "(defaults)", changed);
}

static void td__on_signal(uv_signal_t *s, int signum)
{
    td_daemon *d = s->data;
    if (signum == SIGHUP) {
        if (d->shutting_down)
            td_info("SIGHUP ignored: shutting down");
        else
            td__reload(d);
        return;
    }
    td_daemon_shutdown(d, signum == SIGTERM ? "SIGTERM" : "SIGINT");
}

/* ---- systemd: status line and watchdog --------------------------------- */

static void td__update_status(td_daemon *d)
{
    size_t pending = 0, running = 0;
    td_job *run = NULL;
    for (td_job *j = d->jobs.head; j; j = j->next) {
        pending += j->state == TD_JOB_PENDING;
        if (j->state == TD_JOB_RUNNING) {
            running++;
            run = j;
        }
    }
    if (run) {
        double sps = run->last_window
                         ? json_number_value(json_object_get(run->last_window,
                                                             "samples_per_s"))
                         : 0;
        td_notifyf("STATUS=job %lld %s: epoch %lld/%lld step %lld/%lld, "
                   "%.0f samples/s; %zu pending",
                   (long long)run->id, run->name, (long long)run->epoch + 1,
                   (long long)run->epochs_total, (long long)run->step,
                   (long long)run->steps_total, sps, pending);
    } else {
        td_notifyf("STATUS=idle on %s; %zu job(s) pending", d->device_desc,
                   pending);
    }
    (void)running;
}

static void td__on_status_timer(uv_timer_t *t)
{
    td_daemon *d = t->data;
    td__update_status(d);
    td_joblog_tick(d->joblog);
    td_retention_tick(d);
}

/* The loop is alive if this runs; the trainer is alive if it stepped
 * recently.  A stale trainer means no ping, so systemd restarts us. */
static void td__on_watchdog(uv_timer_t *t)
{
    td_daemon *d = t->data;
    int64_t hb = __atomic_load_n(&d->heartbeat_ns, __ATOMIC_RELAXED);
    int64_t limit = (int64_t)td_notify_watchdog_usec() * 1000;
    int busy = 0;
    for (td_job *j = d->jobs.head; j; j = j->next)
        busy |= j->state == TD_JOB_RUNNING;
    if (busy && hb && td_now_ns() - hb > limit) {
        td_warn("trainer silent for %.1f s: not pinging the watchdog",
                (double)(td_now_ns() - hb) / 1e9);
        return;
    }
    td_notify("WATCHDOG=1");
}

void td_daemon_heartbeat(td_daemon *d)
{
    __atomic_store_n(&d->heartbeat_ns, td_now_ns(), __ATOMIC_RELAXED);
}

/* A state dir that takes no writes (read-only, full, not ours) would lose
 * every record and checkpoint while jobs seem to run: refuse to start.
 * Writes, fsyncs and removes a probe file in jobs/ and checkpoints/. */
static int td__probe_state_dir(td_daemon *d)
{
    static const char *const subs[] = {"jobs", "checkpoints"};
    for (size_t i = 0; i < 2; i++) {
        char dir[4200], probe[4300];
        static const char text[] = "traind checks that it can write here\n";
        snprintf(dir, sizeof dir, "%s/%s", d->state_dir, subs[i]);
        snprintf(probe, sizeof probe, "%s/.traind-probe", dir);
        int rc = td_write_atomic(probe, 0640, text, sizeof text - 1, NULL,
                                 NULL, 0);
        if (rc) {
            td_error("state dir %s is not writable: %s; traind keeps job "
                     "records and checkpoints there and will not start "
                     "without it (see the state_dir setting)", dir,
                     td_strerror(rc));
            return rc;
        }
        unlink(probe);
    }
    return 0;
}

int td_daemon_init(td_daemon *d, uv_loop_t *loop, const td_daemon_opts *o)
{
    char sub[4200], err[512];
    int rc;
    memset(d, 0, sizeof *d);
    d->loop = loop;
    d->started_ns = td_now_ns();
    pthread_mutex_init(&d->inbox_mu, NULL);
    td_jobs_init(&d->jobs);
    d->overrides = o->overrides ? json_incref(o->overrides) : json_object();
    if (o->config_path)
        snprintf(d->config_path, sizeof d->config_path, "%s", o->config_path);
    d->settings = td__read_settings(d, o->config_required, err, sizeof err);
    if (!d->settings) {
        td_error("configuration: %s", err);
        return -EINVAL;
    }
    td__apply_log_level(d->settings);
    const char *sock = td_settings_str(d->settings, "socket");
    const char *state = td_settings_str(d->settings, "state_dir");
    if (strlen(sock) >= sizeof d->socket_path) {
        td_error("socket path too long (max %zu bytes): %s",
                 sizeof d->socket_path - 1, sock);
        return -ENAMETOOLONG;
    }
    snprintf(d->socket_path, sizeof d->socket_path, "%s", sock);
    if (strlen(state) >= sizeof d->state_dir) {
        td_error("state dir path too long (max %zu bytes)",
                 sizeof d->state_dir - 1);
        return -ENAMETOOLONG;
    }
    snprintf(d->state_dir, sizeof d->state_dir, "%s", state);
    snprintf(sub, sizeof sub, "%s/jobs", d->state_dir);
    if ((rc = td_mkdirs(sub, 0750)) != 0) {
        td_error("cannot create state dir %s: %s", sub, td_strerror(rc));
        return rc;
    }
    /* Records and logs (specs, data paths, results) are the daemon's
     * alone: the service's group is the socket's users, whom show and logs
     * answer per job.  tmpfiles makes jobs/ 0700 for the unit; a start
     * without it (or of an older traind's state) narrows it here. */
    struct stat jst;
    if (stat(sub, &jst) == 0 && (jst.st_mode & 077) &&
        chmod(sub, jst.st_mode & 0700) != 0)
        td_warn("cannot narrow %s to mode 0700: %s", sub, strerror(errno));

    td_device_info info;
    td_device_choice ch;
    td_device_probe(&info);
    d->devices = info;
    if (td_device_select(td_settings_str(d->settings, "device"), &info, &ch,
                         err, sizeof err) != 0) {
        td_warn("%s; using the CPU", err);
        snprintf(ch.desc, sizeof ch.desc, "cpu");
    }
    snprintf(d->device_desc, sizeof d->device_desc, "%s", ch.desc);
    if (ch.kind == TD_DEVICE_CPU && info.cuda_built && info.cuda_count == 0)
        /* On a GPU box this is a misconfiguration (driver, device nodes,
         * the unit's sandbox): say why, loudly. */
        td_warn("GPU probe: %s; training on the CPU",
                info.reason);
    else if (ch.kind == TD_DEVICE_CPU)
        td_info("device: cpu");
    else
        td_info("device: %s", d->device_desc);
    char caps[256];
    td_cpu_caps_describe(td_cpu_caps_get(), caps, sizeof caps);
    td_info("cpu: %s", caps);

    uv_async_init(loop, &d->wake, td__on_wake);
    d->wake.data = d;
    if (!(d->joblog = td_joblog_new(d)))
        return -ENOMEM;
    td_log_set_sink(td_joblog_sink, d);
    td_daemon_load_jobs(d); /* after the sink: a recovered job logs so */
    td_remove_recover(d);
    uv_signal_init(loop, &d->sig_term);
    uv_signal_init(loop, &d->sig_int);
    uv_signal_init(loop, &d->sig_hup);
    d->sig_term.data = d->sig_int.data = d->sig_hup.data = d;
    uv_signal_start(&d->sig_term, td__on_signal, SIGTERM);
    uv_signal_start(&d->sig_int, td__on_signal, SIGINT);
    uv_signal_start(&d->sig_hup, td__on_signal, SIGHUP);
    uv_timer_init(loop, &d->status);
    uv_timer_init(loop, &d->watchdog);
    uv_timer_init(loop, &d->persist_retry);
    uv_timer_init(loop, &d->submit_progress);
    d->status.data = d->watchdog.data = d->persist_retry.data = d;
    d->submit_progress.data = d;
    snprintf(sub, sizeof sub, "%s/checkpoints", d->state_dir);
    if ((rc = td_mkdirs(sub, 0750)) != 0) {
        td_error("cannot create %s: %s", sub, td_strerror(rc));
        return rc;
    }
    if ((rc = td__probe_state_dir(d)) != 0)
        return rc;
    if ((rc = td_server_listen(d)) != 0)
        return rc;
    td_obs_init(d); /* a bad metrics_listen is logged; the endpoint is off */
    td_ended_shed_all(d); /* the dashboard has the newest jobs' curves */
    /* Listening and the device probed: ready. */
    td_notify("READY=1");
    td__update_status(d);
    uv_timer_start(&d->status, td__on_status_timer, 2000, 2000);
    uint64_t wd = td_notify_watchdog_usec();
    if (wd) {
        uint64_t half_ms = wd / 2000 ? wd / 2000 : 1;
        uv_timer_start(&d->watchdog, td__on_watchdog, half_ms, half_ms);
        d->watchdog_on = 1;
        td_info("systemd watchdog: pinging every %llu ms",
                (unsigned long long)half_ms);
    }
    td_retention_due(d); /* the first status tick looks */
    td_daemon_schedule(d);
    return 0;
}

void td_daemon_shutdown(td_daemon *d, const char *why)
{
    if (d->shutting_down) {
        /* A second SIGTERM or SIGINT (an impatient user, a supervisor
         * that asks again) does not abandon the running job's final
         * checkpoint: the signals stay caught until traind stops. */
        td_info("already shutting down (%s again): waiting for the running "
                "job's checkpoint; SIGKILL stops at once and the job "
                "resumes from its previous checkpoint", why);
        return;
    }
    d->shutting_down = 1;
    td_info("shutting down (%s)", why);
    td_notify("STOPPING=1");
    td_server_close(d);
    if (d->trainer) {
        /* Finish the step, write a checkpoint, then close (td__job_done). */
        td_job *j = td_jobs_find(&d->jobs, td_trainer_slot_job(d->trainer));
        if (j && !j->stop_requested) /* a cancel or pause asked keeps
                                         its own note: it still wins */
            snprintf(j->stop_note, sizeof j->stop_note, "daemon shutdown");
        td_notify("EXTEND_TIMEOUT_USEC=120000000");
        td_trainer_slot_request(d->trainer, TD_STOP_SHUTDOWN);
        td_info("waiting for the running job to reach a step boundary and "
                "write its checkpoint");
    } else {
        td__close_handles(d);
    }
}

int td_daemon_run(td_daemon *d)
{
    uv_run(d->loop, UV_RUN_DEFAULT);
    /* Every record write has finished (the loop ran until no work was
     * left): the next start takes the ended jobs' rows from the cache. */
    size_t rows = 0;
    if (td_ended_cache_save(d, &rows) == 0)
        td_debug("saved %zu ended job row(s) to %s/%s", rows, d->state_dir,
                 TD_ENDED_CACHE_FILE);
    return d->exit_status;
}

void td_daemon_free(td_daemon *d)
{
    td_log_set_sink(NULL, NULL);
    td_joblog_free(d->joblog);
    d->joblog = NULL;
    td_inbox_msg *m = d->inbox_head;
    while (m) {
        td_inbox_msg *n = m->next;
        json_decref(m->data);
        free(m);
        m = n;
    }
    td_obs_free(d);
    td_jobs_free(&d->jobs);
    json_decref(d->settings);
    json_decref(d->overrides);
    pthread_mutex_destroy(&d->inbox_mu);
}
