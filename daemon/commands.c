/* commands.c - one handler per protocol command (DESIGN §8).
 *
 * Runs on the loop thread.  Handlers validate what the protocol layer
 * cannot (job ids, permissions, states), change the job table, and reply
 * with exactly one line.  Nothing here blocks.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon.h"
#include "error.h"
#include "log.h"
#include "settings.h"
#include "td_config.h"

#define ERRF(c, req, cls, ...)                                               \
    do {                                                                     \
        char m_[512];                                                        \
        snprintf(m_, sizeof m_, __VA_ARGS__);                                \
        td_client_send((c), td_proto_error((req)->id, (cls), m_));           \
    } while (0)

static void td__ok(td_client *c, td_request *req, json_t *ok)
{
    td_client_send(c, td_proto_ok(req->id, ok));
}

/* Finds the job named by args.job and checks that the client may control
 * it when `control` is set.  Replies with the error itself. */
static td_job *td__job_arg(td_client *c, td_request *req, int control)
{
    int64_t id = json_integer_value(json_object_get(req->args, "job"));
    td_job *j = td_jobs_find(&c->d->jobs, id);
    if (!j) {
        ERRF(c, req, TD_ERR_NOT_FOUND, "no job %lld", (long long)id);
        return NULL;
    }
    if (control && !td_job_may_control(j, c->uid)) {
        ERRF(c, req, TD_ERR_PERMISSION,
             "job %lld belongs to uid %u; only that user or root may %s it",
             (long long)id, (unsigned)j->uid, req->cmd);
        return NULL;
    }
    return j;
}

static void cmd_version(td_client *c, td_request *req)
{
    td__ok(c, req, json_pack("{s:s, s:i, s:s}", "version", TD_VERSION,
                             "proto", TD_PROTO_VERSION, "device",
                             c->d->device_desc));
}

static void cmd_submit(td_client *c, td_request *req)
{
    json_t *spec = json_object_get(req->args, "spec");
    json_t *name = json_object_get(req->args, "name");
    const char *n = json_string_value(name);
    if (!n)
        n = json_string_value(json_object_get(spec, "name"));
    td_job *j = td_jobs_add(&c->d->jobs, n ? n : "job", c->uid, spec);
    if (!j) {
        ERRF(c, req, TD_ERR_INTERNAL, "out of memory");
        return;
    }
    td_logf(TD_LOG_INFO, j->id, "submitted by uid %u: %s", (unsigned)c->uid,
            j->name);
    td_daemon_persist_job(c->d, j);
    td__ok(c, req, json_pack("{s:I, s:s}", "job", (json_int_t)j->id,
                             "state", td_job_state_name(j->state)));
}

static void cmd_list(td_client *c, td_request *req)
{
    enum td_job_state want = TD_JOB_NSTATES;
    json_t *st = json_object_get(req->args, "state");
    if (st && td_job_state_parse(json_string_value(st), &want)) {
        ERRF(c, req, TD_ERR_INVALID_ARGS,
             "list: state must be one of pending, running, suspended, "
             "completed, cancelled, failed");
        return;
    }
    json_t *arr = json_array();
    for (td_job *j = c->d->jobs.head; j; j = j->next)
        if (want == TD_JOB_NSTATES || j->state == want)
            json_array_append_new(arr, td_job_summary(j));
    td__ok(c, req, json_pack("{s:o}", "jobs", arr));
}

static void cmd_show(td_client *c, td_request *req)
{
    td_job *j = td__job_arg(c, req, 0);
    if (j)
        td__ok(c, req, json_pack("{s:o}", "job", td_job_record(j)));
}

static void cmd_cancel(td_client *c, td_request *req)
{
    td_job *j = td__job_arg(c, req, 1);
    if (!j)
        return;
    if (td_job_state_final(j->state)) {
        ERRF(c, req, TD_ERR_CONFLICT, "job %lld is already %s",
             (long long)j->id, td_job_state_name(j->state));
        return;
    }
    char why[64];
    snprintf(why, sizeof why, "cancelled by uid %u", (unsigned)c->uid);
    td_daemon_set_job_state(c->d, j, TD_JOB_CANCELLED, why);
    td__ok(c, req, json_pack("{s:I, s:s}", "job", (json_int_t)j->id, "state",
                             td_job_state_name(j->state)));
}

static void cmd_pause(td_client *c, td_request *req)
{
    td_job *j = td__job_arg(c, req, 1);
    if (!j)
        return;
    if (j->state != TD_JOB_PENDING && j->state != TD_JOB_RUNNING) {
        ERRF(c, req, TD_ERR_CONFLICT, "job %lld is %s; only pending or "
             "running jobs can be paused", (long long)j->id,
             td_job_state_name(j->state));
        return;
    }
    char why[64];
    snprintf(why, sizeof why, "paused by uid %u", (unsigned)c->uid);
    td_daemon_set_job_state(c->d, j, TD_JOB_SUSPENDED, why);
    td__ok(c, req, json_pack("{s:I, s:s}", "job", (json_int_t)j->id, "state",
                             td_job_state_name(j->state)));
}

static void cmd_resume(td_client *c, td_request *req)
{
    td_job *j = td__job_arg(c, req, 1);
    if (!j)
        return;
    if (j->state != TD_JOB_SUSPENDED) {
        ERRF(c, req, TD_ERR_CONFLICT, "job %lld is %s, not suspended",
             (long long)j->id, td_job_state_name(j->state));
        return;
    }
    char why[64];
    snprintf(why, sizeof why, "resumed by uid %u", (unsigned)c->uid);
    td_daemon_set_job_state(c->d, j, TD_JOB_PENDING, why);
    td__ok(c, req, json_pack("{s:I, s:s}", "job", (json_int_t)j->id, "state",
                             td_job_state_name(j->state)));
}

static void cmd_checkpoint(td_client *c, td_request *req)
{
    td_job *j = td__job_arg(c, req, 1);
    if (!j)
        return;
    if (j->state != TD_JOB_RUNNING) {
        ERRF(c, req, TD_ERR_CONFLICT, "job %lld is %s; only a running job "
             "can be checkpointed on request", (long long)j->id,
             td_job_state_name(j->state));
        return;
    }
    ERRF(c, req, TD_ERR_CONFLICT, "job %lld: no trainer attached yet",
         (long long)j->id);
}

static unsigned td__event_mask(json_t *events, char *bad, size_t cap)
{
    static const struct { const char *name; unsigned bit; } map[] = {
        {"step", TD_EV_STEP},   {"window", TD_EV_WINDOW},
        {"epoch", TD_EV_EPOCH}, {"state", TD_EV_STATE},
        {"log", TD_EV_LOG},     {"checkpoint", TD_EV_CHECKPOINT},
    };
    if (!events)
        return TD_EV_ALL;
    unsigned mask = 0;
    size_t i;
    json_t *v;
    json_array_foreach(events, i, v) {
        const char *s = json_string_value(v);
        unsigned bit = 0;
        for (size_t k = 0; s && k < sizeof map / sizeof map[0]; k++)
            if (strcmp(s, map[k].name) == 0)
                bit = map[k].bit;
        if (!bit) {
            snprintf(bad, cap, "%s", s ? s : "(not a string)");
            return 0;
        }
        mask |= bit;
    }
    return mask;
}

static void cmd_subscribe(td_client *c, td_request *req)
{
    char bad[64];
    json_t *job = json_object_get(req->args, "job");
    unsigned mask = td__event_mask(json_object_get(req->args, "events"), bad,
                                   sizeof bad);
    if (!mask) {
        ERRF(c, req, TD_ERR_INVALID_ARGS,
             "subscribe: unknown event '%s' (step, window, epoch, state, "
             "log, checkpoint)", bad);
        return;
    }
    if (job && !td_jobs_find(&c->d->jobs, json_integer_value(job))) {
        ERRF(c, req, TD_ERR_NOT_FOUND, "no job %lld",
             (long long)json_integer_value(job));
        return;
    }
    json_t *es = json_object_get(req->args, "every_steps");
    json_t *em = json_object_get(req->args, "every_ms");
    if ((es && json_integer_value(es) < 1) ||
        (em && json_integer_value(em) < 0)) {
        ERRF(c, req, TD_ERR_INVALID_ARGS,
             "subscribe: every_steps must be >= 1 and every_ms >= 0");
        return;
    }
    c->sub_events = mask;
    c->sub_job = job ? json_integer_value(job) : 0;
    c->every_steps = es ? json_integer_value(es) : 1;
    c->every_ms = em ? json_integer_value(em) : 0;
    c->last_step_sent = 0;
    c->last_step_ns = 0;
    td__ok(c, req, json_pack("{s:I, s:I, s:I}", "job",
                             (json_int_t)c->sub_job, "every_steps",
                             (json_int_t)c->every_steps, "every_ms",
                             (json_int_t)c->every_ms));
}

static void cmd_unsubscribe(td_client *c, td_request *req)
{
    json_t *job = json_object_get(req->args, "job");
    if (!job || json_integer_value(job) == c->sub_job)
        c->sub_events = 0;
    td__ok(c, req, NULL);
}

/* logs: the last N lines of the job's log file, read off the loop. */
typedef struct td_logs_req {
    uv_work_t work;
    td_daemon *d;
    uint64_t client;
    json_t *id;
    char path[3200];
    long lines;
    json_t *result; /* array of strings, or NULL with err set */
    int err;
} td_logs_req;

static void td__logs_work(uv_work_t *w)
{
    td_logs_req *r = w->data;
    FILE *f = fopen(r->path, "r");
    r->result = json_array();
    if (!f) {
        r->err = errno == ENOENT ? 0 : -errno; /* no file: no lines yet */
        return;
    }
    char line[4096];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        json_array_append_new(r->result, json_string(line));
        if ((long)json_array_size(r->result) > r->lines)
            json_array_remove(r->result, 0);
    }
    fclose(f);
}

static void td__logs_done(uv_work_t *w, int status)
{
    td_logs_req *r = w->data;
    td_client *c = td_server_client(r->d, r->client);
    if (c && (status < 0 || r->err)) {
        char m[256];
        snprintf(m, sizeof m, "cannot read the job log: %s",
                 status < 0 ? uv_strerror(status) : td_strerror(r->err));
        td_client_send(c, td_proto_error(r->id, TD_ERR_INTERNAL, m));
    } else if (c) {
        td_client_send(c, td_proto_ok(r->id, json_pack("{s:O}", "lines",
                                                       r->result)));
    }
    json_decref(r->result);
    json_decref(r->id);
    free(r);
}

static void cmd_logs(td_client *c, td_request *req)
{
    td_job *j = td__job_arg(c, req, 0);
    if (!j)
        return;
    json_t *n = json_object_get(req->args, "lines");
    if (n && json_integer_value(n) < 1) {
        ERRF(c, req, TD_ERR_INVALID_ARGS, "logs: lines must be >= 1");
        return;
    }
    td_logs_req *r = calloc(1, sizeof *r);
    if (!r) {
        ERRF(c, req, TD_ERR_INTERNAL, "out of memory");
        return;
    }
    r->d = c->d;
    r->client = c->id;
    r->id = req->id ? json_incref(req->id) : NULL;
    r->lines = n ? (long)json_integer_value(n) : 100;
    td_daemon_job_log_path(c->d, j->id, r->path, sizeof r->path);
    r->work.data = r;
    if (uv_queue_work(c->d->loop, &r->work, td__logs_work, td__logs_done)) {
        json_decref(r->id);
        free(r);
        ERRF(c, req, TD_ERR_INTERNAL, "cannot queue the log read");
    }
}

static void cmd_config_get(td_client *c, td_request *req)
{
    json_t *key = json_object_get(req->args, "key");
    if (!key) {
        td__ok(c, req, json_pack("{s:O}", "settings", c->d->settings));
        return;
    }
    const char *k = json_string_value(key);
    json_t *v = json_object_get(c->d->settings, k);
    if (!v) {
        ERRF(c, req, TD_ERR_INVALID_ARGS, "%s: unknown setting", k);
        return;
    }
    td__ok(c, req, json_pack("{s:s, s:O}", "key", k, "value", v));
}

static void cmd_config_set(td_client *c, td_request *req)
{
    char err[256];
    int live = 0;
    const char *k = json_string_value(json_object_get(req->args, "key"));
    json_t *v = json_object_get(req->args, "value");
    if (c->uid != 0 && c->uid != getuid()) {
        ERRF(c, req, TD_ERR_PERMISSION,
             "config_set: only root or the daemon's user may change settings");
        return;
    }
    if (td_settings_set(c->d->settings, k, v, &live, err, sizeof err)) {
        ERRF(c, req, TD_ERR_INVALID_ARGS, "%s", err);
        return;
    }
    if (strcmp(k, "log_level") == 0) {
        int level;
        if (td_log_parse_level(json_string_value(v), &level) == 0)
            td_log_set_level(level);
    }
    td_info("setting %s changed by uid %u%s", k, (unsigned)c->uid,
            live ? "" : " (takes effect after a restart)");
    td__ok(c, req, json_pack("{s:s, s:O, s:b}", "key", k, "value", v,
                             "restart_needed", !live));
}

static const struct {
    const char *cmd;
    void (*fn)(td_client *, td_request *);
} td__handlers[] = {
    {"version", cmd_version},       {"submit", cmd_submit},
    {"list", cmd_list},             {"show", cmd_show},
    {"cancel", cmd_cancel},         {"pause", cmd_pause},
    {"resume", cmd_resume},         {"checkpoint", cmd_checkpoint},
    {"subscribe", cmd_subscribe},   {"unsubscribe", cmd_unsubscribe},
    {"logs", cmd_logs},             {"config_get", cmd_config_get},
    {"config_set", cmd_config_set},
};

void td_commands_dispatch(td_client *c, td_request *req)
{
    for (size_t i = 0; i < sizeof td__handlers / sizeof td__handlers[0]; i++) {
        if (strcmp(td__handlers[i].cmd, req->cmd) == 0) {
            td__handlers[i].fn(c, req);
            return;
        }
    }
    /* The protocol table and this one disagree: a bug, not a user error. */
    ERRF(c, req, TD_ERR_INTERNAL, "command '%s' has no handler", req->cmd);
}
