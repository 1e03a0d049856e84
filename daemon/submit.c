/* submit.c - the submit command: a job's spec checked off the loop thread
 * (see submit.h).
 *
 * What a submit checks reads the user's files: every file of a dataset
 * (a folder listed, a shard's index read), init's tensors, a model .json,
 * the disk its checkpoints go to.  For a folder of a million images that
 * is seconds, and on the loop thread it held every other client, the live
 * metrics and Prometheus for as long.  So the loop parses the request and
 * makes the refusals that read nothing (the per-user bound, the spec's
 * fields, relative paths); a threadpool thread makes the checks that
 * read, as the submitter (fscred.h); and the loop queues the job.  The
 * connection waits meanwhile (td_client_hold): its later requests are
 * answered after this one, so its jobs' ids keep the order it sent them
 * in.  A client that leaves before the reply still has its job queued,
 * as when the checks ran on the loop (the job log says who submitted it).
 *
 * A submit with args.progress true is told how far its checks are: the
 * checks count into a tally (base/tally.h) and a loop timer sends it as a
 * "progress" event every TD__PROGRESS_MS while they run.
 */
#define _GNU_SOURCE
#include "submit.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "access.h"
#include "base/error.h"
#include "base/fscred.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/tally.h"
#include "bounds.h"
#include "infer_jobs.h"
#include "job/jobcheck.h"
#include "job/spec.h"
#include "model/zoo.h"
#include "settings.h"

/* Submits whose checks run at once; the others wait in d's queue, in the
 * order they came.  libuv's threadpool has 4 threads, and job records are
 * written there too (a cancel's reply waits for its record): a user's
 * slow checks must not take every thread. */
#define TD__CHECKS_AT_ONCE 2

/* How often a submit that asked for progress is sent it, in ms.  The
 * environment's TD_SUBMIT_PROGRESS_MS (1-10000) changes it: the tests
 * see a check of 40,000 files, a few hundredths of a second, tick. */
#define TD__PROGRESS_MS 500

typedef struct td_submit {
    uv_work_t work;
    struct td_submit *next; /* in d's queue */
    td_daemon *d;
    uint64_t client;
    uid_t uid;
    json_t *id;            /* the request's id (a reference) */
    json_t *name;          /* args.name (a reference), or NULL */
    json_t *settings;      /* a copy: config_set may change d's meanwhile */
    char ckdir[3200];      /* state_dir/checkpoints */
    int train;             /* td_job_spec spec, else td_infer_spec is */
    td_job_spec spec;
    td_infer_spec is;
    /* args.progress: the checks count into tally, which the loop sends
     * while s is on d's submits_shown list (from its checks' start) */
    int progress;
    td_tally tally;
    int64_t started_ns;
    struct td_submit *next_shown;
    /* the checks' outcome */
    int rc;                /* 0, -EACCES (permission) or another error */
    int64_t steps;         /* a training job's steps, for the reply */
    char err[1400];
} td_submit;

static void td__error(td_daemon *d, uint64_t client, json_t *id,
                      const char *cls, const char *msg)
{
    td_client *c = td_server_client(d, client);
    if (c)
        td_client_send(c, td_proto_error(id, cls, msg));
}

/* 1 (err set) when uid has max_queued_per_user unfinished jobs.  Asked
 * first, before any check, and again when the job is queued. */
static int td__queue_full(td_daemon *d, uid_t uid, char *err, size_t cap)
{
    if (uid == 0)
        return 0;
    long long max = td_settings_int(d->settings, "max_queued_per_user");
    long long have = 0;
    for (td_job *q = d->jobs.head; q; q = q->next)
        have += q->uid == uid && !td_job_state_final(q->state);
    if (have < max)
        return 0;
    snprintf(err, cap, "submit: uid %u already has %lld unfinished job(s), "
             "the limit (max_queued_per_user); wait for some to end or "
             "cancel them", (unsigned)uid, have);
    return 1;
}

/* init: an absolute path the submitter may read; whether its tensors fit
 * the model is td_job_check's (read as the submitter there, when the
 * daemon can take on their identity).  A daemon that cannot takes only a
 * file the bits let uid read, of the file and of every folder above it,
 * as for data (access.h).  Before, only the file's owner or other bits
 * were looked at: a 0644 file in the daemon user's 0700 folder passed. */
static int td__init_access(uid_t uid, const td_job_spec *s,
                           const json_t *settings, char *err, size_t cap)
{
    if (s->init.n == 0)
        return 0;
    int rc = td_fscred_can_switch()
                 ? 0
                 : td_access_check_paths(uid, "init", 0,
                                         (const char *const *)s->init.v, 1,
                                         NULL, err, cap);
    /* It is read whole, in td_job_check and when the job starts; its
     * size is looked at as the user (as the reads are). */
    td_fscred_saved saved;
    if (rc == 0 && td_access_enter(uid, &saved) == 0) {
        rc = td_limits_check_file_size(settings, "init", s->init.v[0], err,
                                       cap);
        td_fscred_leave(&saved);
    }
    return rc;
}

/* A training job's checks, as the submitter: the paths' rights, the
 * bounds (memory, device, disk), init, then what traind --run checks too
 * (jobcheck.h): the device, the precision, init's tensors, the data, the
 * model and the run's length, now and not when the job starts hours
 * later.  Threadpool thread. */
static int td__train_checks(td_submit *s)
{
    const td_job_spec *p = &s->spec;
    char *err = s->err;
    size_t cap = sizeof s->err;
    /* Synthetic input reads no data (access.c skips its data paths), but
     * a model .json path is read either way and is checked here too. */
    if (td_access_check_spec(s->uid, p,
                             json_object_get(s->settings,
                                             "allowed_data_roots"),
                             err, cap))
        return -EACCES;
    char models[4096];
    td_model *model = NULL;
    td_models_dir(NULL, models, sizeof models);
    td_access_build_model(s->uid, p, models, &model);
    int rc = td_limits_check_spec(s->settings, p, model, &s->d->devices, err,
                                  cap);
    if (rc == 0) /* room for its checkpoints now, not at its first */
        rc = td_limits_check_disk(s->ckdir, p, model,
                                  " (trainctl rm removes an ended job's "
                                  "checkpoints)", err, cap);
    td_model_free(model);
    if (rc == 0)
        rc = td__init_access(s->uid, p, s->settings, err, cap);
    td_fscred cred;
    if (rc == 0 && td_fscred_for_reader(s->uid, &cred, err, cap))
        rc = -EACCES; /* no identity to read the files as */
    td_job_check_opts co = {.devices = &s->d->devices, .models_dir = models,
                            .cred = &cred, .tally = &s->tally};
    td_job_checked chk;
    if (rc == 0 && (rc = td_job_check(p, &co, &chk, err, cap)) == 0)
        s->steps = chk.size.steps;
    return rc;
}

static void td__work(uv_work_t *w)
{
    td_submit *s = w->data;
    s->rc = s->train ? td__train_checks(s)
                     : td_infer_job_check(s->settings, &s->d->devices, s->uid,
                                          &s->is, &s->tally, s->err,
                                          sizeof s->err);
}

/* The name check, the per-user bound and the queueing, the same for
 * every kind of job.  Loop thread. */
static void td__enqueue(td_submit *s)
{
    td_daemon *d = s->d;
    char name[80];
    const char *task = s->train ? NULL : td_task_name(s->is.task);
    if (s->train)
        snprintf(name, sizeof name, "%s", s->spec.name ? s->spec.name : "");
    else
        snprintf(name, sizeof name, "%s", s->is.name[0] ? s->is.name : task);
    const char *n = s->name ? json_string_value(s->name) : name;
    if (td__queue_full(d, s->uid, s->err, sizeof s->err)) {
        td__error(d, s->client, s->id, TD_ERR_CONFLICT, s->err);
        return;
    }
    json_t *norm = s->train ? td_spec_to_json(&s->spec)
                            : td_infer_spec_to_json(&s->is);
    td_job *j = norm ? td_jobs_add(&d->jobs, n && *n ? n : "job", s->uid,
                                   norm)
                     : NULL;
    json_decref(norm);
    if (!j) {
        td__error(d, s->client, s->id, TD_ERR_INTERNAL, "out of memory");
        return;
    }
    j->epochs_total = json_integer_value(json_object_get(j->spec, "epochs"));
    td_logf(TD_LOG_INFO, j->id, "submitted by uid %u: %s%s%s%s",
            (unsigned)s->uid, j->name, task ? " (" : "", task ? task : "",
            task ? " job)" : "");
    if (task)
        td_logf(TD_LOG_INFO, j->id, "%s job: checkpoint %s", task,
                json_string_value(json_object_get(j->spec, "checkpoint")));
    td_daemon_persist_job(d, j);
    td_client *c = td_server_client(d, s->client);
    if (c) {
        json_t *ok = json_pack("{s:I, s:s}", "job", (json_int_t)j->id,
                               "state", td_job_state_name(j->state));
        if (ok && s->train) /* the size of what was asked for */
            json_object_set_new(ok, "steps", json_integer(s->steps));
        td_client_send(c, td_proto_ok(s->id, ok));
    }
    td_daemon_schedule(d);
}

static void td__free(td_submit *s)
{
    if (s->train)
        td_spec_free(&s->spec);
    else
        td_infer_spec_free(&s->is);
    json_decref(s->id);
    json_decref(s->name);
    json_decref(s->settings);
    free(s);
}

static void td__done(uv_work_t *w, int status);

/* Loop timer: each submit on d's submits_shown list is sent its checks'
 * stage and count, once they have named one. */
static void td__send_progress(uv_timer_t *t)
{
    td_daemon *d = t->data;
    for (td_submit *s = d->submits_shown; s; s = s->next_shown) {
        td_tally_seen v = td_tally_read(&s->tally);
        td_client *c = td_server_client(d, s->client);
        if (!v.stage || !c)
            continue;
        json_t *data = json_pack("{s:s, s:s, s:I, s:f}", "stage", v.stage,
                                 "unit", v.unit ? v.unit : "",
                                 "done", (json_int_t)v.done, "elapsed",
                                 td_elapsed_s(s->started_ns));
        if (data && v.total)
            json_object_set_new(data, "total", json_integer(
                                                   (json_int_t)v.total));
        json_t *ev = data ? json_pack("{s:s, s:f, s:O, s:o}", "event",
                                      "progress", "ts", td_ns_to_s(td_wall_ns()),
                                      "request", s->id ? s->id : json_null(),
                                      "data", data)
                          : NULL;
        char *line = td_proto_line(ev);
        if (line)
            td_client_send(c, line);
    }
}

static uint64_t td__progress_ms(void)
{
    const char *e = getenv("TD_SUBMIT_PROGRESS_MS");
    long v = e ? strtol(e, NULL, 10) : 0;
    return v >= 1 && v <= 10000 ? (uint64_t)v : TD__PROGRESS_MS;
}

/* s's checks start: on the list (and the timer running) when it asked
 * for progress. */
static void td__shown_add(td_daemon *d, td_submit *s)
{
    s->started_ns = td_now_ns();
    if (!s->progress || d->shutting_down)
        return;
    s->next_shown = d->submits_shown;
    d->submits_shown = s;
    if (!uv_is_active((uv_handle_t *)&d->submit_progress)) {
        uint64_t ms = td__progress_ms();
        uv_timer_start(&d->submit_progress, td__send_progress, ms, ms);
    }
}

/* s's checks have ended: off the list; the timer stops with the last. */
static void td__shown_remove(td_daemon *d, td_submit *s)
{
    for (td_submit **p = &d->submits_shown; *p; p = &(*p)->next_shown) {
        if (*p == s) {
            *p = s->next_shown;
            break;
        }
    }
    if (!d->submits_shown && !uv_is_closing((uv_handle_t *)&d->submit_progress))
        uv_timer_stop(&d->submit_progress);
}

/* s answered: freed, and its connection's next requests read, in order. */
static void td__finish(td_submit *s)
{
    td_client *c = td_server_client(s->d, s->client);
    td__free(s);
    if (c)
        td_client_release(c);
}

/* Starts queued checks while fewer than TD__CHECKS_AT_ONCE run.  A submit
 * that cannot start is answered with the error and frees its connection. */
static void td__start_checks(td_daemon *d)
{
    while (d->submit_head && d->submits_checking < TD__CHECKS_AT_ONCE) {
        td_submit *s = d->submit_head;
        d->submit_head = s->next;
        if (!d->submit_head)
            d->submit_tail = NULL;
        s->work.data = s;
        if (uv_queue_work(d->loop, &s->work, td__work, td__done) == 0) {
            d->submits_checking++;
            td__shown_add(d, s);
            continue;
        }
        td__error(d, s->client, s->id, TD_ERR_INTERNAL,
                  "submit: cannot queue the checks");
        td__finish(s);
    }
}

static void td__done(uv_work_t *w, int status)
{
    td_submit *s = w->data;
    s->d->submits_checking--;
    td__shown_remove(s->d, s);
    if (status < 0)
        td__error(s->d, s->client, s->id, TD_ERR_INTERNAL,
                  "submit: the checks did not run");
    else if (s->rc)
        td__error(s->d, s->client, s->id,
                  s->rc == -EACCES ? TD_ERR_PERMISSION : TD_ERR_INVALID_SPEC,
                  s->err);
    else
        td__enqueue(s);
    td_daemon *d = s->d;
    td__finish(s);
    td__start_checks(d);
}

/* spec with the daemon's settings for what it leaves out (a copy):
 * checkpoint.every_steps and checkpoint.keep (settings
 * checkpoint_every_steps and checkpoint_keep), input.prefetch (setting
 * prefetch, unless auto).  Where those parts are not objects, the copy
 * keeps them as they are and the parser names the problem. */
static json_t *td__spec_defaults(const json_t *spec, const json_t *settings)
{
    static const struct {
        const char *obj, *key, *setting;
    } d[] = {{"checkpoint", "every_steps", "checkpoint_every_steps"},
             {"checkpoint", "keep", "checkpoint_keep"},
             {"input", "prefetch", "prefetch"}};
    json_t *s = json_deep_copy(spec);
    if (!json_is_object(s))
        return s;
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++) {
        long long v = td_settings_int(settings, d[i].setting);
        json_t *o = json_object_get(s, d[i].obj);
        if (v < 0 || (o && !json_is_object(o)))
            continue; /* auto, or the parser's to refuse */
        if (!o)
            json_object_set_new(s, d[i].obj, o = json_object());
        if (o && !json_object_get(o, d[i].key))
            json_object_set_new(o, d[i].key, json_integer(v));
    }
    return s;
}

/* Parses the spec into s (the refusals that read nothing).  0, or the
 * error's class with err set. */
static const char *td__parse(td_client *c, const json_t *spec, td_submit *s)
{
    enum td_task task;
    char *err = s->err;
    size_t cap = sizeof s->err;
    if (td_spec_task(spec, &task, err, cap))
        return TD_ERR_INVALID_SPEC;
    if (task != TD_TASK_TRAIN)
        return td_infer_spec_parse(spec, &s->is, err, cap)
                   ? TD_ERR_INVALID_SPEC
                   : NULL;
    s->train = 1;
    json_t *full = td__spec_defaults(spec, c->d->settings);
    int prc = td_spec_parse(full, NULL, &s->spec, err, cap);
    json_decref(full); /* the spec holds its own normalised copy */
    if (prc)
        return TD_ERR_INVALID_SPEC;
    for (int k = 0; k < 2; k++) {
        const td_spec_paths *ps = k ? &s->spec.data.val : &s->spec.data.train;
        for (int i = 0; i < ps->n; i++) {
            if (ps->v[i][0] != '/') {
                snprintf(err, cap, "data.%s: '%s' must be an absolute path "
                         "(trainctl submit resolves relative ones)",
                         k ? "val" : "train", ps->v[i]);
                return TD_ERR_INVALID_SPEC;
            }
        }
    }
    if (s->spec.init.n && s->spec.init.v[0][0] != '/') {
        snprintf(err, cap, "init: '%s' must be an absolute path (trainctl "
                 "submit resolves relative ones)", s->spec.init.v[0]);
        return TD_ERR_INVALID_SPEC;
    }
    return NULL;
}

void td_cmd_submit(td_client *c, td_request *req)
{
    json_t *name = json_object_get(req->args, "name");
    json_t *progress = json_object_get(req->args, "progress");
    char err[512];
    if (name && !td_job_name_ok(json_string_value(name))) {
        snprintf(err, sizeof err, "submit: name must be 1-%d bytes of "
                 "printable text (no control characters)", TD_JOB_NAME_MAX);
        td_client_send(c, td_proto_error(req->id, TD_ERR_INVALID_ARGS, err));
        return;
    }
    /* A user at the bound made the daemon check (scan) every job it
     * sent all the same, before being refused. */
    if (td__queue_full(c->d, c->uid, err, sizeof err)) {
        td_client_send(c, td_proto_error(req->id, TD_ERR_CONFLICT, err));
        return;
    }
    td_submit *s = calloc(1, sizeof *s);
    if (!s) {
        td_client_send(c, td_proto_error(req->id, TD_ERR_INTERNAL,
                                         "out of memory"));
        return;
    }
    s->d = c->d;
    s->client = c->id;
    s->uid = c->uid;
    s->id = json_incref(req->id);
    s->name = json_incref(name);
    s->progress = json_is_true(progress);
    const char *cls = td__parse(c, json_object_get(req->args, "spec"), s);
    if (!cls && !(s->settings = json_deep_copy(c->d->settings))) {
        cls = TD_ERR_INTERNAL;
        snprintf(s->err, sizeof s->err, "out of memory");
    }
    snprintf(s->ckdir, sizeof s->ckdir, "%s/checkpoints", c->d->state_dir);
    if (cls) {
        td_client_send(c, td_proto_error(req->id, cls, s->err));
        td__free(s);
        return;
    }
    td_client_hold(c); /* until td__done has replied */
    if (c->d->submit_tail)
        c->d->submit_tail->next = s;
    else
        c->d->submit_head = s;
    c->d->submit_tail = s;
    td__start_checks(c->d);
}
