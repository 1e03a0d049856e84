/* conn.h - trainctl's connection to traind: finding the socket, connecting
 * with errors people can act on, requests and event reading. */
#ifndef TD_CLIENT_CONN_H
#define TD_CLIENT_CONN_H

#include <jansson.h>

#define TD_DEFAULT_SOCKET "/run/traind/traind.sock"

typedef struct td_conn {
    int fd;
    char path[108];
    json_t *hello;   /* the greeting */
    char *buf;       /* read buffer */
    size_t len, cap;
    int next_id;
} td_conn;

/* The socket path: --socket value if given, else $TRAIND_SOCKET, else the
 * default. */
const char *td_cli_socket(const char *opt);

/* Connects and reads the greeting.  On failure prints why to stderr
 * (naming the path and what to do) and returns TD_EXIT_UNREACHABLE. */
int td_conn_open(td_conn *c, const char *path);
/* The same without printing anything (for optional connections). */
int td_conn_try_open(td_conn *c, const char *path);
void td_conn_close(td_conn *c);

/* Sends a request (args stolen, may be NULL) and waits for its reply;
 * events that arrive meanwhile are passed to on_event if non-NULL (and
 * dropped otherwise).  Without on_event, a reply not there after a second
 * is waited for with a progress line on a terminal (progress.h).  Returns
 * the reply or NULL if the connection broke (a message is printed). */
json_t *td_conn_request(td_conn *c, const char *cmd, json_t *args,
                        void (*on_event)(json_t *ev, void *user), void *user);
/* Reads the next line as JSON; timeout_ms < 0 waits forever.  NULL on
 * EOF, error or timeout (*timed_out tells which, may be NULL). */
json_t *td_conn_read(td_conn *c, int timeout_ms, int *timed_out);

/* If reply is an error, prints "trainctl CMD: DESC" to stderr (or the
 * reply as JSON to stdout when json is set) and returns TD_EXIT_REFUSED;
 * returns TD_EXIT_OK for an ok reply. */
int td_conn_check(const char *cmd, json_t *reply, int json);

/* `show` of job id: the whole reply (the record is ok.job), or NULL with
 * the exit code in *rc (TD_EXIT_UNREACHABLE, or td_conn_check's for a
 * refusal, printed as `trainctl CMD: ...`, as JSON with json). */
json_t *td_conn_show(td_conn *c, const char *cmd, int64_t id, int json,
                     int *rc);

/* Prints o as one compact JSON line on stdout. */
void td_print_json(json_t *o);

#endif
