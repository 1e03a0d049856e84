/* protocol.c - framing, request validation, replies and events (see
 * protocol.h).  Pure functions over bytes and JSON: no I/O, no globals but
 * the constant command table. */
#define _GNU_SOURCE /* memrchr */
#include "proto/protocol.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/json.h"

/* ---- job states ------------------------------------------------------ */

const char *const td_proto_job_states[TD_PROTO_NJOB_STATES] = {
    "pending", "running", "suspended", "completed", "cancelled", "failed",
};

int td_proto_job_state(const char *name)
{
    for (int i = 0; name && i < TD_PROTO_NJOB_STATES; i++)
        if (strcmp(name, td_proto_job_states[i]) == 0)
            return i;
    return -1;
}

int td_proto_job_state_final(const char *name)
{
    return name && (strcmp(name, "completed") == 0 ||
                    strcmp(name, "cancelled") == 0 ||
                    strcmp(name, "failed") == 0);
}

const char *td_proto_job_states_list(char *buf, size_t cap)
{
    size_t n = 0;
    if (cap)
        buf[0] = '\0';
    for (int i = 0; i < TD_PROTO_NJOB_STATES && n < cap; i++) {
        int w = snprintf(buf + n, cap - n, "%s%s", i ? ", " : "",
                         td_proto_job_states[i]);
        if (w < 0)
            break;
        n += (size_t)w;
    }
    return buf;
}

/* ---- framing ---------------------------------------------------------- */

int td_linebuf_init(td_linebuf *lb, size_t max_line)
{
    memset(lb, 0, sizeof *lb);
    lb->max_line = max_line;
    lb->cap = 4096;
    lb->buf = malloc(lb->cap);
    return lb->buf ? 0 : -ENOMEM;
}

void td_linebuf_free(td_linebuf *lb)
{
    free(lb->buf);
    memset(lb, 0, sizeof *lb);
}

/* Drops the lines already handed out. */
static void td__linebuf_compact(td_linebuf *lb)
{
    if (lb->consumed == 0)
        return;
    memmove(lb->buf, lb->buf + lb->consumed, lb->len - lb->consumed);
    lb->len -= lb->consumed;
    lb->consumed = 0;
}

int td_linebuf_feed(td_linebuf *lb, const char *data, size_t n)
{
    if (lb->overflow)
        return -EMSGSIZE;
    td__linebuf_compact(lb);
    if (lb->len + n + 1 > lb->cap) {
        size_t cap = lb->cap;
        while (cap < lb->len + n + 1)
            cap *= 2;
        char *nb = realloc(lb->buf, cap);
        if (!nb)
            return -ENOMEM;
        lb->buf = nb;
        lb->cap = cap;
    }
    memcpy(lb->buf + lb->len, data, n);
    lb->len += n;
    /* The unterminated tail may not exceed the cap: a peer that never sends
     * a newline cannot make us buffer without bound. */
    const char *nl = memrchr(lb->buf, '\n', lb->len);
    size_t tail = nl ? lb->len - (size_t)(nl - lb->buf) - 1 : lb->len;
    if (tail > lb->max_line) {
        lb->overflow = 1;
        return -EMSGSIZE;
    }
    return 0;
}

int td_linebuf_next(td_linebuf *lb, const char **line, size_t *len)
{
    if (lb->overflow)
        return -EMSGSIZE;
    td__linebuf_compact(lb);
    char *nl = memchr(lb->buf, '\n', lb->len);
    if (!nl)
        return 0;
    size_t n = (size_t)(nl - lb->buf);
    if (n > lb->max_line) {
        lb->overflow = 1;
        return -EMSGSIZE;
    }
    *nl = '\0';
    lb->consumed = n + 1;
    if (n > 0 && lb->buf[n - 1] == '\r')
        lb->buf[--n] = '\0';
    *line = lb->buf;
    *len = n;
    return 1;
}

/* ---- the command table ------------------------------------------------ */

#define TD__END {NULL, 0, JSON_NULL, 0}

static const td_arg_rule td__no_args[] = {TD__END};
static const td_arg_rule td__job_arg[] = {
    {"job", 1, JSON_INTEGER, 0}, TD__END};
static const td_arg_rule td__submit_args[] = {
    {"spec", 1, JSON_OBJECT, 0},
    {"name", 0, JSON_STRING, 0},
    {"progress", 0, JSON_TRUE, 0}, /* a boolean: send "progress" events */
    TD__END};
static const td_arg_rule td__list_args[] = {
    {"state", 0, JSON_STRING, 0}, TD__END};
static const td_arg_rule td__subscribe_args[] = {
    {"job", 0, JSON_INTEGER, 0},      /* absent: every job */
    {"events", 0, JSON_ARRAY, 0},     /* absent: all event kinds */
    {"every_steps", 0, JSON_INTEGER, 0},
    {"every_ms", 0, JSON_INTEGER, 0},
    TD__END};
static const td_arg_rule td__unsubscribe_args[] = {
    {"job", 0, JSON_INTEGER, 0}, TD__END};
static const td_arg_rule td__logs_args[] = {
    {"job", 1, JSON_INTEGER, 0},
    {"lines", 0, JSON_INTEGER, 0},
    TD__END};
static const td_arg_rule td__trace_args[] = {
    {"job", 1, JSON_INTEGER, 0},
    {"steps", 0, JSON_INTEGER, 0},    /* default 20 */
    TD__END};
static const td_arg_rule td__config_get_args[] = {
    {"key", 0, JSON_STRING, 0}, TD__END};
static const td_arg_rule td__config_set_args[] = {
    {"key", 1, JSON_STRING, 0},
    {"value", 1, JSON_NULL, 0}, /* any JSON value */
    TD__END};

const td_command_rule td_proto_commands[] = {
    {"version", td__no_args},
    {"submit", td__submit_args},
    {"list", td__list_args},
    {"show", td__job_arg},
    {"cancel", td__job_arg},
    {"pause", td__job_arg},
    {"resume", td__job_arg},
    {"checkpoint", td__job_arg},
    {"subscribe", td__subscribe_args},
    {"unsubscribe", td__unsubscribe_args},
    {"logs", td__logs_args},
    {"config_get", td__config_get_args},
    {"config_set", td__config_set_args},
    {"trace", td__trace_args},
    {"remove", td__job_arg},
    {NULL, NULL},
};

/* ---- requests --------------------------------------------------------- */

static int td__type_ok(const td_arg_rule *r, const json_t *v)
{
    if (r->type == JSON_NULL)
        return 1;
    if (r->type == JSON_TRUE || r->type == JSON_FALSE)
        return json_is_boolean(v);
    if (r->type == JSON_REAL && r->any_number)
        return json_is_number(v);
    return json_typeof(v) == r->type;
}

static const td_command_rule *td__find_command(const char *cmd)
{
    for (const td_command_rule *c = td_proto_commands; c->cmd; c++)
        if (strcmp(c->cmd, cmd) == 0)
            return c;
    return NULL;
}

/* Checks args against the command's rules; fills err on failure. */
static int td__check_args(const td_command_rule *c, json_t *args, char *err,
                          size_t errcap)
{
    const char *key;
    json_t *v;
    json_object_foreach(args, key, v) {
        const td_arg_rule *r = c->args;
        while (r->name && strcmp(r->name, key) != 0)
            r++;
        if (!r->name) {
            snprintf(err, errcap, "%s: unknown argument '%s'", c->cmd, key);
            return TD_E_PROTO;
        }
        if (!td__type_ok(r, v)) {
            snprintf(err, errcap, "%s: argument '%s' must be %s", c->cmd,
                     key, td_json_type_name(r->type));
            return TD_E_PROTO;
        }
    }
    for (const td_arg_rule *r = c->args; r->name; r++) {
        if (r->required && !json_object_get(args, r->name)) {
            snprintf(err, errcap, "%s: missing argument '%s'", c->cmd,
                     r->name);
            return TD_E_PROTO;
        }
    }
    return 0;
}

int td_request_parse(const char *line, size_t len, td_request *req,
                     const char **err_class, char *err, size_t errcap)
{
    json_error_t je;
    const char *key;
    json_t *v;
    memset(req, 0, sizeof *req);
    *err_class = TD_ERR_BAD_REQUEST;
    if (len > TD_PROTO_LINE_MAX) {
        *err_class = TD_ERR_TOO_LARGE;
        snprintf(err, errcap, "line of %zu bytes is over the %d-byte limit",
                 len, TD_PROTO_LINE_MAX);
        return TD_E_PROTO;
    }
    req->root = json_loadb(line, len, JSON_REJECT_DUPLICATES, &je);
    if (!req->root) {
        snprintf(err, errcap, "malformed JSON at column %d: %s", je.column,
                 je.text);
        return TD_E_PROTO;
    }
    if (!json_is_object(req->root)) {
        snprintf(err, errcap, "a request is a JSON object");
        return TD_E_PROTO;
    }
    json_object_foreach(req->root, key, v) {
        if (strcmp(key, "id") == 0) {
            if (!json_is_integer(v) && !json_is_string(v)) {
                snprintf(err, errcap, "'id' must be an integer or a string");
                return TD_E_PROTO;
            }
            req->id = v;
        } else if (strcmp(key, "cmd") != 0 && strcmp(key, "args") != 0) {
            snprintf(err, errcap, "unknown request key '%s'", key);
            return TD_E_PROTO;
        }
    }
    json_t *cmd = json_object_get(req->root, "cmd");
    if (!json_is_string(cmd)) {
        snprintf(err, errcap, "'cmd' must be a string naming a command");
        return TD_E_PROTO;
    }
    req->cmd = json_string_value(cmd);
    req->args = json_object_get(req->root, "args");
    if (req->args && !json_is_object(req->args)) {
        snprintf(err, errcap, "'args' must be an object");
        return TD_E_PROTO;
    }
    if (!req->args) {
        req->args = json_object();
        if (!req->args || json_object_set_new(req->root, "args", req->args))
            return -ENOMEM;
    }
    const td_command_rule *c = td__find_command(req->cmd);
    if (!c) {
        *err_class = TD_ERR_UNKNOWN_COMMAND;
        snprintf(err, errcap, "unknown command '%s'", req->cmd);
        return TD_E_PROTO;
    }
    if (td__check_args(c, req->args, err, errcap)) {
        *err_class = TD_ERR_INVALID_ARGS;
        return TD_E_PROTO;
    }
    *err_class = NULL;
    return 0;
}

void td_request_free(td_request *req)
{
    json_decref(req->root);
    memset(req, 0, sizeof *req);
}

/* ---- replies and events ----------------------------------------------- */

char *td_proto_line(json_t *o)
{
    if (!o)
        return NULL;
    char *s = json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII);
    json_decref(o);
    if (!s)
        return NULL;
    size_t n = strlen(s);
    char *line = realloc(s, n + 2);
    if (!line) {
        free(s);
        return NULL;
    }
    line[n] = '\n';
    line[n + 1] = '\0';
    return line;
}

static json_t *td__id(json_t *id) { return id ? json_incref(id) : json_null(); }

char *td_proto_ok(json_t *id, json_t *ok)
{
    return td_proto_line(json_pack("{s:o, s:o}", "id", td__id(id), "ok",
                              ok ? ok : json_object()));
}

/* The message of an error reply.  Messages quote what the client sent and
 * are cut to a fixed buffer by snprintf, which can split a UTF-8
 * character at the end; JSON strings must be UTF-8, and json_pack would
 * fail and leave the request without a reply.  Drop that partial
 * character; anything else invalid gets a message saying so. */
static json_t *td__desc(const char *desc)
{
    json_t *s = json_string(desc);
    if (s)
        return s;
    size_t n = strlen(desc), k = n;
    while (k > 0 && n - k < 3 && ((unsigned char)desc[k - 1] & 0xc0) == 0x80)
        k--;
    if (k > 0 && (unsigned char)desc[k - 1] >= 0xc0)
        s = json_stringn(desc, k - 1); /* a character cut at the end */
    return s ? s : td_json_text(desc); /* a file name's Latin-1: \xNN */
}

char *td_proto_error(json_t *id, const char *err_class, const char *desc)
{
    return td_proto_line(json_pack("{s:o, s:{s:s, s:o}}", "id", td__id(id),
                              "error", "class", err_class, "desc",
                              td__desc(desc)));
}

char *td_proto_hello(const char *version, const char *device)
{
    return td_proto_line(json_pack("{s:{s:i, s:s, s:s}}", "hello", "proto",
                              TD_PROTO_VERSION, "version", version, "device",
                              device));
}

char *td_proto_event(const char *event, double ts, int64_t job, json_t *data)
{
    return td_proto_line(json_pack("{s:s, s:f, s:I, s:o}", "event", event, "ts",
                              ts, "job", (json_int_t)job, "data",
                              data ? data : json_object()));
}
