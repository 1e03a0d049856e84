/* commands.c - one handler per protocol command
 * (docs/design.md#the-control-protocol).
 *
 * Runs on the loop thread.  Handlers validate what the protocol layer
 * cannot (job ids, permissions, states), change the job table, and reply
 * with exactly one line.  Nothing here blocks: what reads files (a
 * submit's checks, submit.c; logs; an ended job's show) runs on libuv's
 * threadpool and replies from there.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "infer_jobs.h"
#include "base/error.h"
#include "base/log.h"
#include "daemon.h"
#include "ended.h"
#include "backend/cpu/caps.h"
#include "job/spec.h"
#include "joblog.h"
#include "logtail.h"
#include "obs.h"
#include "reads.h"
#include "remove.h"
#include "retention.h"
#include "run.h"
#include "settings.h"
#include "submit.h"
#include "td_config.h"

#define ERRF(c, req, cls, ...)                                               \
    do {                                                                     \
        char m_[2048];                                                        \
        snprintf(m_, sizeof m_, __VA_ARGS__);                                \
        td_client_send((c), td_proto_error((req)->id, (cls), m_));           \
    } while (0)

/* Whether c may see j's details (server.c's events ask too; here, so
 * that fuzz_dispatch, which replaces server.c, links). */
int td_client_may_see(const td_client *c, const td_job *j)
{
    return td_job_may_see(j, c->uid, td_settings_int(
                                         c->d->settings,
                                         "jobs_visible_to_all") > 0);
}

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

/* The daemon's devices, as it probed them at start: trainctl does not
 * link the CUDA runtime and learns about GPUs from here. */
json_t *td_devices_json(const td_device_info *info)
{
    json_t *gpus = json_array();
    for (int i = 0; i < info->cuda_count; i++) {
        const td_gpu_info *g = &info->gpus[i];
        json_array_append_new(gpus, json_pack("{s:s, s:I, s:i, s:i}", "name",
                                              g->name, "mem_bytes",
                                              (json_int_t)g->mem_bytes,
                                              "cc_major", g->cc_major,
                                              "cc_minor", g->cc_minor));
    }
    /* the CPU's bf16 instructions and oneDNN's ISA (backend/cpu/caps.h) */
    const td_cpu_caps *k = td_cpu_caps_get();
    json_t *cpu = json_pack("{s:s, s:s, s:b, s:b, s:b, s:b, s:b, s:o}",
                            "model", k->model, "isa", k->isa, "avx512_bf16",
                            k->avx512_bf16, "amx_bf16", k->amx_bf16,
                            "avx512_fp16", k->avx512_fp16, "bf16", k->bf16,
                            "bf16_auto", k->bf16_auto, "dot_rate",
                            k->dot_rate > 0 ? json_real(k->dot_rate)
                                            : json_null());
    return json_pack("{s:b, s:i, s:o, s:s, s:o}", "cuda_built",
                     info->cuda_built, "cuda_runtime", info->cuda_runtime,
                     "gpus", gpus, "note", info->reason, "cpu", cpu);
}

static void cmd_version(td_client *c, td_request *req)
{
    json_t *dev = td_devices_json(&c->d->devices);
    td__ok(c, req, json_pack("{s:s, s:i, s:s, s:o}", "version", TD_VERSION,
                             "proto", TD_PROTO_VERSION, "device",
                             c->d->device_desc, "devices", dev));
}

static void cmd_list(td_client *c, td_request *req)
{
    enum td_job_state want = TD_JOB_NSTATES;
    json_t *st = json_object_get(req->args, "state");
    if (st && td_job_state_parse(json_string_value(st), &want)) {
        char names[128];
        ERRF(c, req, TD_ERR_INVALID_ARGS, "list: state must be one of %s",
             td_proto_job_states_list(names, sizeof names));
        return;
    }
    json_t *arr = json_array();
    for (td_job *j = c->d->jobs.head; j; j = j->next) {
        if (want != TD_JOB_NSTATES && j->state != want)
            continue;
        json_t *row = td_job_summary(j);
        if (!td_client_may_see(c, j))
            td_job_row_restrict(row);
        json_array_append_new(arr, row);
    }
    td__ok(c, req, json_pack("{s:o}", "jobs", arr));
}

/* Another user's job (unless jobs_visible_to_all): its list row only,
 * without the spec (data paths), checkpoints (paths) or result. */
static void cmd_show(td_client *c, td_request *req)
{
    td_job *j = td__job_arg(c, req, 0);
    if (!j)
        return;
    if (td_client_may_see(c, j) && j->shed) { /* read back from disk */
        td_ended_show(c, req->id, j);
        return;
    }
    if (td_client_may_see(c, j)) {
        td__ok(c, req, json_pack("{s:o}", "job", td_job_record(j)));
        return;
    }
    json_t *row = td_job_summary(j);
    if (row) {
        td_job_row_restrict(row);
        json_object_set_new(row, "restricted", json_true());
    }
    td__ok(c, req, json_pack("{s:o}", "job", row));
}

/* Moves job j to `to` with "<verb> by uid N" as the reason.  A running
 * job is asked to stop at its next step boundary instead (`stop`); its
 * state changes when the trainer reports it has stopped. */
static void td__stop_job(td_client *c, td_request *req, td_job *j,
                         const char *verb, enum td_stop_reason stop,
                         enum td_job_state to)
{
    char why[64];
    snprintf(why, sizeof why, "%s by uid %u", verb, (unsigned)c->uid);
    if (j->state == TD_JOB_RUNNING && c->d->trainer) {
        snprintf(j->stop_note, sizeof j->stop_note, "%s", why);
        td_trainer_slot_request(c->d->trainer, stop);
        /* Recorded before the reply: a kill -9 before the step boundary
         * does not undo an acknowledged cancel or pause. */
        if (!j->stop_requested)
            j->stop_requested = (int)stop;
        td_daemon_persist_job_reply(
            c->d, j, c->id,
            td_proto_ok(req->id, json_pack("{s:I, s:s, s:s}", "job",
                                           (json_int_t)j->id, "state",
                                           td_job_state_name(j->state),
                                           "stopping",
                                           td_job_state_name(to))));
        return;
    }
    td_daemon_set_job_state(c->d, j, to, why);
    td__ok(c, req, json_pack("{s:I, s:s}", "job", (json_int_t)j->id, "state",
                             td_job_state_name(j->state)));
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
    td__stop_job(c, req, j, "cancelled", TD_STOP_CANCEL, TD_JOB_CANCELLED);
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
    td__stop_job(c, req, j, "paused", TD_STOP_PAUSE, TD_JOB_SUSPENDED);
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
    td_daemon_schedule(c->d);
}

static void cmd_checkpoint(td_client *c, td_request *req)
{
    td_job *j = td__job_arg(c, req, 1);
    if (!j)
        return;
    if (td_job_task(j) != TD_TASK_TRAIN) {
        ERRF(c, req, TD_ERR_CONFLICT, "job %lld is %s job; only training "
             "jobs write checkpoints", (long long)j->id,
             td_job_task(j) == TD_TASK_EVAL ? "an eval" : "a predict");
        return;
    }
    if (j->state != TD_JOB_RUNNING || !c->d->trainer ||
        td_trainer_slot_job(c->d->trainer) != j->id) {
        ERRF(c, req, TD_ERR_CONFLICT, "job %lld is %s; only a running job "
             "can be checkpointed on request", (long long)j->id,
             td_job_state_name(j->state));
        return;
    }
    td_trainer_slot_checkpoint(c->d->trainer);
    td_logf(TD_LOG_INFO, j->id, "checkpoint requested by uid %u",
            (unsigned)c->uid);
    td__ok(c, req, json_pack("{s:I, s:b}", "job", (json_int_t)j->id,
                             "requested", 1));
}

static unsigned td__event_mask(json_t *events, char *bad, size_t cap)
{
    static const struct { const char *name; unsigned bit; } map[] = {
        {"step", TD_EV_STEP},   {"window", TD_EV_WINDOW},
        {"epoch", TD_EV_EPOCH}, {"state", TD_EV_STATE},
        {"log", TD_EV_LOG},     {"checkpoint", TD_EV_CHECKPOINT},
        {"eval", TD_EV_EVAL},
    };
    if (!events)
        return TD_EV_ALL;
    bad[0] = '\0';
    if (!json_is_array(events) || json_array_size(events) == 0) {
        snprintf(bad, cap, "%s", json_is_array(events) ? "(an empty list)"
                                                        : "(not a list)");
        return 0;
    }
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

enum { TD__EVERY_MS_MAX = 86400000 }; /* a day */

static void cmd_subscribe(td_client *c, td_request *req)
{
    char bad[64];
    json_t *job = json_object_get(req->args, "job");
    unsigned mask = td__event_mask(json_object_get(req->args, "events"), bad,
                                   sizeof bad);
    if (!mask) {
        if (bad[0] == '(')
            ERRF(c, req, TD_ERR_INVALID_ARGS, "subscribe: events must be a "
                 "non-empty list (step, window, epoch, state, log, "
                 "checkpoint, eval)");
        else
            ERRF(c, req, TD_ERR_INVALID_ARGS, "subscribe: unknown event '%s' "
                 "(step, window, epoch, state, log, checkpoint, eval)", bad);
        return;
    }
    if (job && !td_jobs_find(&c->d->jobs, json_integer_value(job))) {
        ERRF(c, req, TD_ERR_NOT_FOUND, "no job %lld",
             (long long)json_integer_value(job));
        return;
    }
    json_t *es = json_object_get(req->args, "every_steps");
    json_t *em = json_object_get(req->args, "every_ms");
    /* Bounded so that every_ms * 1e6 (ns) cannot overflow. */
    if ((es && json_integer_value(es) < 1) ||
        (em && (json_integer_value(em) < 0 ||
                json_integer_value(em) > TD__EVERY_MS_MAX))) {
        ERRF(c, req, TD_ERR_INVALID_ARGS,
             "subscribe: every_steps must be >= 1 and every_ms 0..%d",
             TD__EVERY_MS_MAX);
        return;
    }
    if (c->uid != 0 && !c->sub_events) {
        long long max = td_settings_int(c->d->settings,
                                        "max_subscriptions_per_user");
        long long have = 0;
        for (td_client *o = c->d->clients; o; o = o->next)
            have += !o->closing && o->uid == c->uid && o->sub_events;
        if (have >= max) {
            ERRF(c, req, TD_ERR_CONFLICT, "subscribe: uid %u already holds "
                 "%lld subscription(s), the limit "
                 "(max_subscriptions_per_user)", (unsigned)c->uid, have);
            return;
        }
    }
    c->sub_events = mask;
    c->sub_job = job ? json_integer_value(job) : 0;
    /* Without a rate, step events come at most 10 times a second: a
     * subscriber that wants every step says every_steps 1. */
    c->every_steps = es ? json_integer_value(es) : 1;
    c->every_ms = em ? json_integer_value(em) : es ? 0 : 100;
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

/* logs: the last N lines of the job's log file, read off the loop
 * (logtail.h: at most TD_LOGTAIL_MAX_BYTES of them). */
typedef struct td_logs_req {
    uv_work_t work;
    td_daemon *d;
    uint64_t client;
    uid_t uid;
    json_t *id;
    int64_t job;
    char path[3200];
    long lines;
    json_t *result; /* array of strings, or NULL with err set */
    long long left_out;
    int err;
} td_logs_req;

/* After the file's lines: those its file could not take yet (joblog.h),
 * so that they are seen while the disk is full. */
static json_t *td__logs_unwritten(void *arg)
{
    td_logs_req *r = arg;
    return td_joblog_unwritten(r->d->joblog, r->job);
}

static void td__logs_work(uv_work_t *w)
{
    td_logs_req *r = w->data;
    r->result = td_logtail(r->path, td__logs_unwritten, r, r->lines,
                           TD_LOGTAIL_MAX_BYTES, &r->left_out, &r->err);
}

static void td__logs_done(uv_work_t *w, int status)
{
    td_logs_req *r = w->data;
    td_reads_end(r->uid);
    td_client *c = td_server_client(r->d, r->client);
    if (c && (status < 0 || r->err)) {
        char m[256];
        snprintf(m, sizeof m, "cannot read the job log: %s",
                 status < 0 ? uv_strerror(status) : td_strerror(r->err));
        td_client_send(c, td_proto_error(r->id, TD_ERR_INTERNAL, m));
    } else if (c) {
        json_t *ok = json_pack("{s:O}", "lines", r->result);
        if (r->left_out)
            json_object_set_new(ok, "older_left_out",
                                json_integer(r->left_out));
        td_client_send(c, td_proto_ok(r->id, ok));
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
    if (!td_client_may_see(c, j)) {
        ERRF(c, req, TD_ERR_PERMISSION, "job %lld belongs to uid %u; its log "
             "is for that user and root (setting jobs_visible_to_all)",
             (long long)j->id, (unsigned)j->uid);
        return;
    }
    json_t *n = json_object_get(req->args, "lines");
    if (n && json_integer_value(n) < 1) {
        ERRF(c, req, TD_ERR_INVALID_ARGS, "logs: lines must be >= 1");
        return;
    }
    char busy[256];
    if (td_reads_begin(c->uid, "logs", busy, sizeof busy)) {
        ERRF(c, req, TD_ERR_CONFLICT, "%s", busy);
        return;
    }
    td_logs_req *r = calloc(1, sizeof *r);
    if (!r) {
        td_reads_end(c->uid);
        ERRF(c, req, TD_ERR_INTERNAL, "out of memory");
        return;
    }
    r->d = c->d;
    r->client = c->id;
    r->uid = c->uid;
    r->id = req->id ? json_incref(req->id) : NULL;
    r->lines = n ? (long)json_integer_value(n) : 100;
    r->job = j->id;
    td_daemon_job_log_path(c->d, j->id, r->path, sizeof r->path);
    r->work.data = r;
    if (uv_queue_work(c->d->loop, &r->work, td__logs_work, td__logs_done)) {
        td_reads_end(c->uid);
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
    /* A setting read only at start cannot change here: the running
     * daemon would ignore it and a restart reads the config file again
     * (which the service cannot write: ProtectSystem=strict). */
    const td_setting_def *def = k ? td_setting_find(k) : NULL;
    json_t *probe = def && !def->live ? json_deep_copy(c->d->settings) : NULL;
    if (td_settings_set(probe ? probe : c->d->settings, k, v, &live, err,
                        sizeof err)) {
        json_decref(probe);
        ERRF(c, req, TD_ERR_INVALID_ARGS, "%s", err);
        return;
    }
    if (probe) {
        json_decref(probe);
        ERRF(c, req, TD_ERR_INVALID_ARGS, "%s: read only when traind starts; "
             "set it in %s and restart traind", k,
             c->d->config_path[0] && strcmp(c->d->config_path, "/dev/null")
                 ? c->d->config_path : "a config file (traind --config FILE)");
        return;
    }
    if (strcmp(k, "workers") == 0 && c->d->trainer && json_is_integer(v))
        td_trainer_slot_set_workers(c->d->trainer, (int)json_integer_value(v));
    if (strcmp(k, "log_level") == 0) {
        int level;
        if (td_log_parse_level(json_string_value(v), &level) == 0)
            td_log_set_level(level);
    }
    if (strcmp(k, "ended_job_retention_days") == 0)
        td_retention_due(c->d); /* at the next status tick */
    td_info("setting %s changed by uid %u%s", k, (unsigned)c->uid,
            live ? "" : " (takes effect after a restart)");
    td__ok(c, req, json_pack("{s:s, s:O, s:b}", "key", k, "value", v,
                             "restart_needed", !live));
}

/* Records the next `steps` steps of a running job; the reply comes once
 * they are recorded (trace_part events carry the Chrome trace text before
 * it).  A job has one recording at a time, so only its owner or root may
 * take that slot; it is freed when the client goes. */
static void cmd_trace(td_client *c, td_request *req)
{
    json_t *js = json_object_get(req->args, "steps");
    json_int_t steps = js ? json_integer_value(js) : 20;
    td_job *j = td__job_arg(c, req, 1);
    if (!j)
        return;
    if (steps < 1 || steps > 10000) {
        ERRF(c, req, TD_ERR_INVALID_ARGS, "steps: must be 1..10000, not %lld",
             (long long)steps);
        return;
    }
    if (td_job_task(j) != TD_TASK_TRAIN) {
        ERRF(c, req, TD_ERR_CONFLICT, "job %lld is %s job; only training "
             "jobs have steps to trace", (long long)j->id,
             td_job_task(j) == TD_TASK_EVAL ? "an eval" : "a predict");
        return;
    }
    if (j->state != TD_JOB_RUNNING || !c->d->trainer ||
        td_trainer_slot_job(c->d->trainer) != j->id) {
        ERRF(c, req, TD_ERR_CONFLICT, "job %lld is %s; only a running job "
             "can be traced", (long long)j->id, td_job_state_name(j->state));
        return;
    }
    int rc = td_trainer_slot_trace(c->d->trainer, (int)steps);
    if (rc == -EBUSY) {
        ERRF(c, req, TD_ERR_CONFLICT, "job %lld: a trace is already being "
             "recorded; try again when it is done", (long long)j->id);
        return;
    }
    if (rc || (rc = td_obs_trace_wait(c->d, c, req->id, j->id, (int)steps)))
        ERRF(c, req, TD_ERR_INTERNAL, "trace: %s", td_strerror(rc));
}

/* An ended job's record, log and checkpoints off the disk (remove.h); the
 * reply comes once they are gone. */
static void cmd_remove(td_client *c, td_request *req)
{
    td_job *j = td__job_arg(c, req, 1);
    if (!j)
        return;
    if (j->removing) {
        ERRF(c, req, TD_ERR_CONFLICT, "job %lld is being removed",
             (long long)j->id);
        return;
    }
    if (!td_job_state_final(j->state)) {
        ERRF(c, req, TD_ERR_CONFLICT, "job %lld is %s; only an ended job "
             "(completed, failed or cancelled) can be removed: cancel it "
             "first", (long long)j->id, td_job_state_name(j->state));
        return;
    }
    const td_job *k = td_remove_needed_by(c->d, j);
    if (k) {
        ERRF(c, req, TD_ERR_CONFLICT, "job %lld is %s and reads a checkpoint "
             "of job %lld; remove job %lld once job %lld has ended",
             (long long)k->id, td_job_state_name(k->state), (long long)j->id,
             (long long)j->id, (long long)k->id);
        return;
    }
    td_remove_job(c->d, j, c->id, req->id);
}

static const struct {
    const char *cmd;
    void (*fn)(td_client *, td_request *);
} td__handlers[] = {
    {"version", cmd_version},       {"submit", td_cmd_submit},
    {"list", cmd_list},             {"show", cmd_show},
    {"cancel", cmd_cancel},         {"pause", cmd_pause},
    {"resume", cmd_resume},         {"checkpoint", cmd_checkpoint},
    {"subscribe", cmd_subscribe},   {"unsubscribe", cmd_unsubscribe},
    {"logs", cmd_logs},             {"config_get", cmd_config_get},
    {"config_set", cmd_config_set}, {"trace", cmd_trace},
    {"remove", cmd_remove},
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
