/* protocol.h - the control protocol's wire format
 * (docs/design.md#the-control-protocol, every command in docs/daemon.md).
 *
 * One compact JSON object per line over a Unix stream socket, lines capped
 * at TD_PROTO_LINE_MAX bytes.  This module owns framing, parsing and
 * validation of requests and the building of replies and events; it knows
 * nothing about sockets, jobs or the event loop, so everything here is
 * testable without a daemon.
 *
 *   daemon -> client on connect: {"hello":{"proto":1,"version":"X.Y.Z","device":"cpu"}}
 *   client -> daemon:            {"id":7,"cmd":"submit","args":{...}}
 *   daemon -> client:            {"id":7,"ok":{...}}
 *                                {"id":7,"error":{"class":"invalid_spec","desc":"..."}}
 *   daemon -> subscriber:        {"event":"step","ts":1.25,"job":7,"data":{...}}
 *
 * Unknown commands, unknown top-level keys and unknown arguments are
 * errors; clients ignore reply keys they do not know.
 */
#ifndef TD_PROTOCOL_H
#define TD_PROTOCOL_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#define TD_PROTO_VERSION 1
#define TD_PROTO_LINE_MAX (1024 * 1024) /* bytes, without the newline */

/* Error classes carried in {"error":{"class":...}}. */
#define TD_ERR_BAD_REQUEST "bad_request"     /* not JSON, or not the shape */
#define TD_ERR_TOO_LARGE "too_large"         /* line over the cap */
#define TD_ERR_UNKNOWN_COMMAND "unknown_command"
#define TD_ERR_INVALID_ARGS "invalid_args"   /* unknown/missing/wrong args */
#define TD_ERR_INVALID_SPEC "invalid_spec"   /* job spec failed validation */
#define TD_ERR_NOT_FOUND "not_found"         /* no such job */
#define TD_ERR_PERMISSION "permission_denied"
#define TD_ERR_CONFLICT "conflict"           /* not possible in this state */
#define TD_ERR_INTERNAL "internal"

/* ---- job states ------------------------------------------------------ */

/* The states a job can be in, as the protocol names them (`list`'s
 * `state`, `show`, `state` events), in the order of the daemon's enum
 * td_job_state (daemon/jobs.h).  The one list: the daemon and trainctl
 * (queue --state, its --help) both use it. */
#define TD_PROTO_NJOB_STATES 6
extern const char *const td_proto_job_states[TD_PROTO_NJOB_STATES];
/* The index of a state's name in td_proto_job_states, or -1. */
int td_proto_job_state(const char *name);
/* 1 for the states a job ends in (completed, cancelled, failed), 0 for
 * the others and for a name that is not a state (NULL included). */
int td_proto_job_state_final(const char *name);
/* "pending, running, ..., failed" into buf (truncated to cap); buf. */
const char *td_proto_job_states_list(char *buf, size_t cap);

/* ---- framing --------------------------------------------------------- */

/* Accumulates bytes from a stream and cuts them into lines.  A line longer
 * than the cap is an error: the caller replies too_large and closes. */
typedef struct td_linebuf {
    char *buf;
    size_t len;      /* bytes held */
    size_t consumed; /* bytes at the front already handed out as lines */
    size_t cap, max_line;
    int overflow;    /* set once a line passed max_line */
} td_linebuf;

int td_linebuf_init(td_linebuf *lb, size_t max_line);
void td_linebuf_free(td_linebuf *lb);
/* Appends data.  Returns 0, -ENOMEM, or -EMSGSIZE when the pending
 * (unterminated) line exceeds max_line; after -EMSGSIZE the buffer stays
 * in the overflow state. */
int td_linebuf_feed(td_linebuf *lb, const char *data, size_t n);
/* Pops the next complete line (without '\n', NUL-terminated, a trailing
 * '\r' removed) into *line and *len, valid until the next feed/next call.
 * Returns 1 if a line was popped, 0 if none is complete, -EMSGSIZE if the
 * next line is over the cap (the buffer is then in the overflow state). */
int td_linebuf_next(td_linebuf *lb, const char **line, size_t *len);

/* ---- requests --------------------------------------------------------- */

typedef struct td_request {
    json_t *id;   /* borrowed from root; NULL if absent (echoed as null) */
    const char *cmd;
    json_t *args; /* borrowed; an empty object when absent */
    json_t *root; /* owned: td_request_free() */
} td_request;

/* Argument rules of one command: the allowed names, which are required,
 * and each one's JSON type. */
typedef struct td_arg_rule {
    const char *name;
    int required;
    json_type type;   /* JSON_INTEGER, JSON_STRING, ...; JSON_NULL: any */
    int any_number;   /* accept integer or real when type is JSON_REAL */
} td_arg_rule;

typedef struct td_command_rule {
    const char *cmd;
    const td_arg_rule *args; /* terminated by a rule with name == NULL */
} td_command_rule;

/* The command table of protocol version 1 (terminated by cmd == NULL). */
extern const td_command_rule td_proto_commands[];

/* Parses and validates one line.  On failure returns TD_E_PROTO and fills
 * *err_class (one of the TD_ERR_* strings) and err; req->id is still set
 * when the line had a usable id, so the error can be addressed. */
int td_request_parse(const char *line, size_t len, td_request *req,
                     const char **err_class, char *err, size_t errcap);
void td_request_free(td_request *req);

/* ---- replies and events ----------------------------------------------- */

/* Each returns a malloc'd NUL-terminated line ending in '\n' (free()), or
 * NULL on allocation failure.  td_proto_line serialises any object (stolen)
 * as one compact ASCII line.  `ok` and `data` are stolen (may be NULL: an
 * empty object). */
char *td_proto_line(json_t *o);
char *td_proto_ok(json_t *id, json_t *ok);
char *td_proto_error(json_t *id, const char *err_class, const char *desc);
char *td_proto_hello(const char *version, const char *device);
char *td_proto_event(const char *event, double ts, int64_t job,
                     json_t *data);

#endif
