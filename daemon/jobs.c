/* jobs.c - the job table (see jobs.h).  Loop thread only; no locks, no
 * I/O: persistence is the daemon's business. */
#include "jobs.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "proto/protocol.h"

/* The names are the protocol's (lib/proto), in the enum's order. */
_Static_assert(TD_JOB_NSTATES == TD_PROTO_NJOB_STATES,
               "enum td_job_state and td_proto_job_states differ");

const char *td_job_state_name(enum td_job_state s)
{
    return (unsigned)s < TD_JOB_NSTATES ? td_proto_job_states[s] : "unknown";
}

int td_job_state_parse(const char *name, enum td_job_state *s)
{
    int i = td_proto_job_state(name);
    if (i < 0)
        return -EINVAL;
    *s = (enum td_job_state)i;
    return 0;
}

int td_job_state_final(enum td_job_state s)
{
    return s == TD_JOB_COMPLETED || s == TD_JOB_CANCELLED ||
           s == TD_JOB_FAILED;
}

void td_jobs_init(td_jobs *t)
{
    memset(t, 0, sizeof *t);
    t->next_id = 1;
}

void td_job_free(td_job *j)
{
    json_decref(j->spec);
    json_decref(j->last_window);
    json_decref(j->last_epoch);
    td_curves_free(&j->curves);
    json_decref(j->checkpoints);
    json_decref(j->result);
    json_decref(j->persist_waiters);
    json_decref(j->remove_req);
    json_decref(j->row);
    free(j);
}

void td_jobs_free(td_jobs *t)
{
    td_job *j = t->head;
    while (j) {
        td_job *n = j->next;
        td_job_free(j);
        j = n;
    }
    memset(t, 0, sizeof *t);
}

static double td__wall_s(void) { return (double)td_wall_ns() / 1e9; }

static void td__append(td_jobs *t, td_job *j)
{
    j->next = NULL;
    if (t->tail)
        t->tail->next = j;
    else
        t->head = j;
    t->tail = j;
    t->count++;
}

td_job *td_jobs_add(td_jobs *t, const char *name, uid_t uid, json_t *spec)
{
    td_job *j = calloc(1, sizeof *j);
    if (!j)
        return NULL;
    j->checkpoints = json_array();
    if (!j->checkpoints || td_curves_init(&j->curves)) {
        td_job_free(j);
        return NULL;
    }
    j->id = t->next_id++;
    snprintf(j->name, sizeof j->name, "%s", name ? name : "job");
    j->uid = uid;
    j->state = TD_JOB_PENDING;
    snprintf(j->reason, sizeof j->reason, "queued");
    j->spec = json_incref(spec);
    j->submitted = td__wall_s();
    td__append(t, j);
    return j;
}

td_job *td_jobs_find(td_jobs *t, int64_t id)
{
    for (td_job *j = t->head; j; j = j->next)
        if (j->id == id)
            return j;
    return NULL;
}

void td_jobs_unlink(td_jobs *t, td_job *j)
{
    td_job *prev = NULL;
    for (td_job *k = t->head; k; prev = k, k = k->next) {
        if (k != j)
            continue;
        if (prev)
            prev->next = j->next;
        else
            t->head = j->next;
        if (t->tail == j)
            t->tail = prev;
        j->next = NULL;
        t->count--;
        return;
    }
}

void td_jobs_insert(td_jobs *t, td_job *j)
{
    /* From the tail when j goes after it (the common case: in order) */
    td_job **pp = t->tail && t->tail->id < j->id ? &t->tail->next : &t->head;
    while (*pp && (*pp)->id < j->id)
        pp = &(*pp)->next;
    j->next = *pp;
    *pp = j;
    if (!j->next)
        t->tail = j;
    t->count++;
    if (j->id >= t->next_id)
        t->next_id = j->id + 1;
}

td_job *td_jobs_next_pending(td_jobs *t)
{
    for (td_job *j = t->head; j; j = j->next)
        if (j->state == TD_JOB_PENDING)
            return j;
    return NULL;
}

static int td__allowed(enum td_job_state from, enum td_job_state to)
{
    switch (from) {
    case TD_JOB_PENDING:
        return to == TD_JOB_RUNNING || to == TD_JOB_CANCELLED ||
               to == TD_JOB_FAILED || to == TD_JOB_SUSPENDED;
    case TD_JOB_RUNNING:
        /* running -> pending: interrupted by a daemon shutdown, to resume */
        return to == TD_JOB_COMPLETED || to == TD_JOB_FAILED ||
               to == TD_JOB_CANCELLED || to == TD_JOB_SUSPENDED ||
               to == TD_JOB_PENDING;
    case TD_JOB_SUSPENDED:
        return to == TD_JOB_PENDING || to == TD_JOB_RUNNING ||
               to == TD_JOB_CANCELLED || to == TD_JOB_FAILED;
    default:
        return 0; /* final states are final */
    }
}

int td_job_set_state(td_job *j, enum td_job_state s, const char *reason)
{
    if (!td__allowed(j->state, s))
        return -EINVAL;
    j->state = s;
    if (s != TD_JOB_RUNNING)
        j->stop_requested = 0; /* reached (or moot) */
    snprintf(j->reason, sizeof j->reason, "%s", reason ? reason : "");
    if (s == TD_JOB_RUNNING && j->started == 0)
        j->started = td__wall_s();
    if (td_job_state_final(s))
        j->ended = td__wall_s();
    return 0;
}

int td_job_name_ok(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    if (n < 1 || n > TD_JOB_NAME_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)name[i];
        if (ch < 0x20 || ch == 0x7f)
            return 0;
        /* C1 controls (U+0080..U+009F, e.g. CSI) in UTF-8 */
        if (ch == 0xc2 && i + 1 < n && (unsigned char)name[i + 1] >= 0x80 &&
            (unsigned char)name[i + 1] <= 0x9f)
            return 0;
    }
    return 1;
}

int td_job_may_control(const td_job *j, uid_t uid)
{
    return uid == 0 || uid == j->uid;
}

int td_job_may_see(const td_job *j, uid_t uid, int all)
{
    return all || td_job_may_control(j, uid);
}

json_t *td_job_summary(const td_job *j)
{
    if (j->shed) /* a copy: callers add keys ("restricted") */
        return json_copy(j->row);
    json_t *o = json_pack(
        "{s:I, s:s, s:I, s:s, s:s, s:f, s:I, s:I, s:I, s:I}", "id",
        (json_int_t)j->id, "name", j->name, "uid", (json_int_t)j->uid,
        "state", td_job_state_name(j->state), "reason", j->reason,
        "submitted", j->submitted, "epoch", (json_int_t)j->epoch, "step",
        (json_int_t)j->step, "steps_total", (json_int_t)j->steps_total,
        "epochs_total", (json_int_t)j->epochs_total);
    if (!o)
        return NULL;
    if (j->started)
        json_object_set_new(o, "started", json_real(j->started));
    if (j->ended)
        json_object_set_new(o, "ended", json_real(j->ended));
    static const char *const from_window[] = {
        "samples_per_s", "verdict", "device_idle_ratio", "input_wait_ratio",
        "loss_scale", "skipped_steps"}; /* the last two: loss scaling */
    for (size_t k = 0; j->last_window &&
                       k < sizeof from_window / sizeof *from_window; k++) {
        json_t *v = json_object_get(j->last_window, from_window[k]);
        if (v)
            json_object_set(o, from_window[k], v);
    }
    /* A finished run's figures are the whole run's, as its reason says
     * ("completed: 10 epochs, 2700.3 samples/s"), not its last window's.
     * A paused or shut-down run leaves a result too, but a job that has
     * not ended runs again: its figures are its windows' (the result of
     * a pause before its first window said "none" until the end). */
    static const char *const from_result[] = {"samples_per_s", "verdict"};
    int ended = td_job_state_final(j->state);
    /* A run that ended before its first window measured nothing: its
     * result's 0 samples/s and verdict "none" are no figures ("-"). */
    double sps = json_number_value(json_object_get(j->result,
                                                   "samples_per_s"));
    for (size_t k = 0; ended && j->result && sps > 0 &&
                       k < sizeof from_result / sizeof *from_result; k++) {
        json_t *v = json_object_get(j->result, from_result[k]);
        if (v)
            json_object_set(o, from_result[k], v);
    }
    return o;
}

void td_job_row_restrict(json_t *row)
{
    const char *r = json_string_value(json_object_get(row, "reason"));
    const char *p = r;
    /* A path starts with '/' at the start or after a space, quote, '(',
     * '=' or '[' ("8/8", "samples/s" do not). */
    while (p && (p = strchr(p, '/')) &&
           !(p == r || strchr(" \t'\"(=[", p[-1])))
        p++;
    if (!p)
        return;
    char buf[1200];
    snprintf(buf, sizeof buf, "%.*s(a path only the job's owner and root "
             "see)", (int)(p - r < 1000 ? p - r : 1000), r);
    json_object_set_new(row, "reason", json_string(buf));
}

json_t *td_job_record(const td_job *j)
{
    if (j->shed)
        return NULL;
    json_t *o = td_job_summary(j);
    if (!o)
        return NULL;
    json_object_set(o, "spec", j->spec ? j->spec : json_null());
    json_object_set(o, "checkpoints", j->checkpoints);
    if (j->last_window)
        json_object_set(o, "last_window", j->last_window);
    if (j->last_epoch)
        json_object_set(o, "last_epoch", j->last_epoch);
    td_curves_to_record(&j->curves, o);
    if (j->result)
        json_object_set(o, "result", j->result);
    if (j->stop_requested)
        json_object_set_new(o, "stop_requested",
                            json_pack("{s:s, s:s}", "stop",
                                      j->stop_requested == 2 ? "pause"
                                                             : "cancel",
                                      "note", j->stop_note));
    return o;
}

int td_job_shed(td_job *j, int task)
{
    if (j->shed)
        return 0;
    json_t *row = td_job_summary(j);
    if (!row)
        return -ENOMEM;
    j->row = row;
    j->shed = 1;
    j->shed_task = task;
    json_decref(j->spec);
    json_decref(j->last_window);
    json_decref(j->last_epoch);
    json_decref(j->checkpoints);
    json_decref(j->result);
    j->spec = j->last_window = j->last_epoch = j->checkpoints = NULL;
    j->result = NULL;
    td_curves_free(&j->curves);
    memset(&j->curves, 0, sizeof j->curves);
    return 0;
}

td_job *td_job_from_row(const json_t *row, char *err, size_t errcap)
{
    json_int_t id, uid, epoch = 0, step = 0, steps_total = 0,
                        epochs_total = 0;
    const char *name, *state, *reason;
    double submitted = 0;
    json_error_t je;
    enum td_job_state st;
    if (json_unpack_ex((json_t *)row, &je, 0,
                       "{s:I, s:s, s:I, s:s, s:s, s?F, s?I, s?I, s?I, s?I}",
                       "id", &id, "name", &name, "uid", &uid, "state", &state,
                       "reason", &reason, "submitted", &submitted, "epoch",
                       &epoch, "step", &step, "steps_total", &steps_total,
                       "epochs_total", &epochs_total)) {
        snprintf(err, errcap, "job record: %s", je.text);
        return NULL;
    }
    if (id <= 0 || td_job_state_parse(state, &st)) {
        snprintf(err, errcap, "job record: bad id or state");
        return NULL;
    }
    td_job *j = calloc(1, sizeof *j);
    if (!j) {
        snprintf(err, errcap, "out of memory");
        return NULL;
    }
    j->id = id;
    snprintf(j->name, sizeof j->name, "%s", name);
    j->uid = (uid_t)uid;
    j->state = st;
    snprintf(j->reason, sizeof j->reason, "%s", reason);
    j->submitted = submitted;
    json_t *v;
    if ((v = json_object_get(row, "started")))
        j->started = json_number_value(v);
    if ((v = json_object_get(row, "ended")))
        j->ended = json_number_value(v);
    j->epoch = epoch;
    j->step = step;
    j->steps_total = steps_total;
    j->epochs_total = epochs_total;
    return j;
}

td_job *td_job_from_record(json_t *rec, char *err, size_t errcap)
{
    json_t *spec = NULL, *v;
    json_error_t je;
    if (json_unpack_ex(rec, &je, 0, "{s:o}", "spec", &spec)) {
        snprintf(err, errcap, "job record: %s", je.text);
        return NULL;
    }
    td_job *j = td_job_from_row(rec, err, errcap);
    if (!j)
        return NULL;
    j->spec = json_incref(spec);
    v = json_object_get(rec, "checkpoints");
    j->checkpoints = json_is_array(v) ? json_deep_copy(v) : json_array();
    if ((v = json_object_get(rec, "last_window")))
        j->last_window = json_deep_copy(v);
    if ((v = json_object_get(rec, "last_epoch")))
        j->last_epoch = json_deep_copy(v);
    if (td_curves_from_record(&j->curves, rec)) {
        td_job_free(j);
        snprintf(err, errcap, "out of memory");
        return NULL;
    }
    if ((v = json_object_get(rec, "result")))
        j->result = json_deep_copy(v);
    if ((v = json_object_get(rec, "stop_requested")) && json_is_object(v)) {
        const char *stop = json_string_value(json_object_get(v, "stop"));
        const char *note = json_string_value(json_object_get(v, "note"));
        j->stop_requested = stop && strcmp(stop, "pause") == 0 ? 2
                            : stop && strcmp(stop, "cancel") == 0 ? 1 : 0;
        snprintf(j->stop_note, sizeof j->stop_note, "%s", note ? note : "");
    }
    return j;
}
