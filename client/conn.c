/* conn.c - see conn.h. */
#include "conn.h"

#include <errno.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/jsontext.h"
#include "commands.h"
#include "progress.h"
#include "proto/protocol.h"

const char *td_cli_socket(const char *opt)
{
    if (opt && *opt)
        return opt;
    const char *env = getenv("TRAIND_SOCKET");
    return env && *env ? env : TD_DEFAULT_SOCKET;
}

/* Permission denied: the 'traind' group hint only for the service's
 * socket (group traind); a daemon someone runs as themselves is theirs. */
static void td__explain_access(const char *path)
{
    struct stat st;
    struct group gr, *grp = NULL;
    struct passwd pw, *pwp = NULL;
    char gbuf[1024], pbuf[1024];
    if (stat(path, &st) == 0)
        getgrgid_r(st.st_gid, &gr, gbuf, sizeof gbuf, &grp);
    if (grp && strcmp(grp->gr_name, "traind") == 0) {
        fprintf(stderr,
                "\n  the socket is only for root and the 'traind' group: "
                "sudo usermod -aG traind $USER\n  (then log in again), or "
                "point --socket / TRAIND_SOCKET at a daemon of your own\n");
        return;
    }
    if (grp)
        getpwuid_r(st.st_uid, &pw, pbuf, sizeof pbuf, &pwp);
    if (pwp)
        fprintf(stderr,
                "\n  the socket belongs to the traind of user '%s' (group "
                "'%s', mode %03o);\n  run trainctl as that user, or point "
                "--socket / TRAIND_SOCKET at a daemon of your own\n",
                pwp->pw_name, grp->gr_name, (unsigned)(st.st_mode & 0777));
    else
        fprintf(stderr, "\n  you may not use this socket or its folder; "
                        "point --socket / TRAIND_SOCKET at a daemon of your "
                        "own\n");
}

static void td__explain(const char *path, int err)
{
    fprintf(stderr, "trainctl: cannot reach traind at %s: %s", path,
            strerror(err));
    switch (err) {
    case ENOENT:
        /* The service's socket: start the service, or a daemon of one's
         * own elsewhere (a user cannot make /run/traind).  Any other: the
         * user's own daemon, at that path. */
        if (strcmp(path, TD_DEFAULT_SOCKET) == 0)
            fprintf(stderr,
                    "\n  is the service running? start it with "
                    "'systemctl start traind' (as root),\n  or run your "
                    "own: traind --foreground --socket /tmp/td.sock "
                    "--state-dir ~/traind-state &\n  and export "
                    "TRAIND_SOCKET=/tmp/td.sock\n");
        else
            fprintf(stderr,
                    "\n  no traind made that socket; start one there: "
                    "traind --foreground --socket %s --state-dir DIR &\n",
                    path);
        break;
    case ECONNREFUSED:
        fprintf(stderr, "\n  the socket file exists but no traind is "
                        "listening (it stopped or crashed);\n  start it "
                        "again with 'systemctl start traind'\n");
        break;
    case EACCES:
    case EPERM:
        td__explain_access(path);
        break;
    default:
        fputc('\n', stderr);
    }
}

static int td__open(td_conn *c, const char *path, int quiet)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memset(c, 0, sizeof *c);
    c->fd = -1;
    c->next_id = 1;
    size_t len = path ? strlen(path) : 0;
    if (len == 0 || len >= sizeof sa.sun_path) {
        fprintf(stderr, "trainctl: bad socket path '%s'\n", path ? path : "");
        return TD_EXIT_UNREACHABLE;
    }
    memcpy(c->path, path, len + 1); /* sizeof c->path == sizeof sun_path */
    memcpy(sa.sun_path, path, len + 1);
    c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        if (!quiet)
            td__explain(path, errno);
        td_conn_close(c);
        return TD_EXIT_UNREACHABLE;
    }
    int timed_out = 0;
    c->hello = td_conn_read(c, 10000, &timed_out);
    const char *refused = json_string_value(json_object_get(
        json_object_get(c->hello, "error"), "desc"));
    if (refused) { /* such as max_connections_per_user */
        if (!quiet)
            fprintf(stderr, "trainctl: traind refused the connection: %s\n",
                    refused);
        td_conn_close(c);
        return TD_EXIT_UNREACHABLE;
    }
    if (!json_is_object(json_object_get(c->hello, "hello"))) {
        if (!quiet)
            fprintf(stderr, "trainctl: %s did not greet like traind (%s)\n", path,
                timed_out ? "no answer in 10 s" : "unexpected first line");
        td_conn_close(c);
        return TD_EXIT_UNREACHABLE;
    }
    json_int_t proto = json_integer_value(
        json_object_get(json_object_get(c->hello, "hello"), "proto"));
    if (proto != TD_PROTO_VERSION) {
        if (!quiet)
            fprintf(stderr, "trainctl: traind speaks protocol %lld, this trainctl "
                        "speaks %d: upgrade one of them\n",
                (long long)proto, TD_PROTO_VERSION);
        td_conn_close(c);
        return TD_EXIT_UNREACHABLE;
    }
    return TD_EXIT_OK;
}

int td_conn_open(td_conn *c, const char *path)
{
    return td__open(c, path, 0);
}

int td_conn_try_open(td_conn *c, const char *path)
{
    return td__open(c, path, 1);
}

void td_conn_close(td_conn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    json_decref(c->hello);
    c->hello = NULL;
    free(c->buf);
    c->buf = NULL;
    c->len = c->cap = 0;
}

json_t *td_conn_read(td_conn *c, int timeout_ms, int *timed_out)
{
    if (timed_out)
        *timed_out = 0;
    for (;;) {
        char *nl = c->len ? memchr(c->buf, '\n', c->len) : NULL;
        if (nl) {
            size_t n = (size_t)(nl - c->buf);
            json_t *o = json_loadb(c->buf, n, 0, NULL);
            memmove(c->buf, nl + 1, c->len - n - 1);
            c->len -= n + 1;
            if (o)
                return o;
            continue; /* not JSON: skip the line */
        }
        if (c->len + 65536 > c->cap) {
            size_t cap = c->cap ? c->cap * 2 : 131072;
            char *nb = realloc(c->buf, cap);
            if (!nb)
                return NULL;
            c->buf = nb;
            c->cap = cap;
        }
        struct pollfd p = {.fd = c->fd, .events = POLLIN};
        int pr = poll(&p, 1, timeout_ms);
        if (pr == 0 && timed_out)
            *timed_out = 1;
        if (pr <= 0)
            return NULL;
        ssize_t r = read(c->fd, c->buf + c->len, c->cap - c->len);
        if (r <= 0)
            return NULL;
        c->len += (size_t)r;
    }
}

/* 1 when r is a "progress" event for request id. */
static int td__progress_of(const json_t *r, int id)
{
    const json_t *ev = json_object_get(r, "event");
    const json_t *req = json_object_get(r, "request");
    return json_is_string(ev) && strcmp(json_string_value(ev), "progress") == 0 &&
           json_is_integer(req) && json_integer_value(req) == id &&
           json_is_object(json_object_get(r, "data"));
}

/* The waiting line, after a second: the daemon's stage and count when it
 * sent some ("submit: traind is listing data.train: 412,318 samples (3
 * s)"), else that trainctl waits. */
static void td__show_wait(td_progress *p, const char *cmd, const json_t *said)
{
    double s = td_progress_elapsed(p);
    if (s < 1.0)
        return;
    const char *stage = json_string_value(json_object_get(said, "stage"));
    if (!stage) {
        td_progress_show(p, 0, "%s: waiting for traind's reply%s (%.0f s)",
                         cmd,
                         strcmp(cmd, "submit") == 0
                             ? " (it checks the job's files)"
                             : "",
                         s);
        return;
    }
    char done[32], total[48] = "";
    td_fmt_count((uint64_t)json_integer_value(json_object_get(said, "done")),
                 done, sizeof done);
    json_int_t t = json_integer_value(json_object_get(said, "total"));
    if (t > 0) {
        char n[32];
        td_fmt_count((uint64_t)t, n, sizeof n);
        snprintf(total, sizeof total, " of %s", n);
    }
    const char *unit = json_string_value(json_object_get(said, "unit"));
    td_progress_show(p, 0, "%s: traind is %s: %s%s %s (%.0f s)", cmd, stage,
                     done, total, unit ? unit : "", s);
}

json_t *td_conn_request(td_conn *c, const char *cmd, json_t *args,
                        void (*on_event)(json_t *ev, void *user), void *user)
{
    int id = c->next_id++;
    json_t *req = json_pack("{s:i, s:s}", "id", id, "cmd", cmd);
    if (args)
        json_object_set_new(req, "args", args);
    char *line = td_proto_line(req);
    if (!line)
        return NULL;
    size_t n = strlen(line) - 1, off = 0;
    while (off < n + 1) {
        ssize_t w = send(c->fd, line + off, n + 1 - off, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0) {
            fprintf(stderr, "trainctl: lost the connection to %s: %s\n",
                    c->path, strerror(errno));
            free(line);
            return NULL;
        }
        off += (size_t)w;
    }
    free(line);
    /* A reply that takes a while (a submit's checks read every file of
     * its dataset) says so on a terminal after a second, with the
     * daemon's "progress" events for this request where it sends them
     * (a submit asked with args.progress); requests that stream events
     * draw their own progress. */
    td_progress p;
    td_progress_init(&p);
    json_t *said = NULL; /* the newest progress event's data */
    for (;;) {
        int slow = 0;
        json_t *r = td_conn_read(c, on_event ? -1 : 250, &slow);
        if (!r && slow) {
            td__show_wait(&p, cmd, said);
            continue;
        }
        if (r && td__progress_of(r, id)) {
            json_decref(said);
            said = json_incref(json_object_get(r, "data"));
            json_decref(r);
            td__show_wait(&p, cmd, said);
            continue;
        }
        td_progress_clear(&p);
        if (!r) {
            json_decref(said);
            fprintf(stderr, "trainctl: traind closed the connection\n");
            return NULL;
        }
        json_t *rid = json_object_get(r, "id");
        if ((json_is_integer(rid) && json_integer_value(rid) == id) ||
            (rid && !json_object_get(r, "event") && json_is_null(rid))) {
            /* the reply, or an error the daemon could not address */
            json_decref(said);
            return r;
        }
        if (on_event && json_object_get(r, "event"))
            on_event(r, user);
        json_decref(r);
    }
}

int td_conn_check(const char *cmd, json_t *reply, int json)
{
    json_t *err = json_object_get(reply, "error");
    if (!err)
        return TD_EXIT_OK;
    if (json) {
        td_print_json(reply);
    } else {
        fprintf(stderr, "trainctl %s: %s\n", cmd,
                json_string_value(json_object_get(err, "desc")));
    }
    return TD_EXIT_REFUSED;
}

void td_print_json(json_t *o)
{
    char *s = td_json_dumps(o, JSON_COMPACT); /* 0.35, not 0.3499...98 */
    if (s) {
        puts(s);
        free(s);
    }
    fflush(stdout);
}

json_t *td_conn_show(td_conn *c, const char *cmd, int64_t id, int json,
                     int *rc)
{
    json_t *r = td_conn_request(c, "show",
                                json_pack("{s:I}", "job", (json_int_t)id),
                                NULL, NULL);
    if (!r) {
        *rc = TD_EXIT_UNREACHABLE;
        return NULL;
    }
    if ((*rc = td_conn_check(cmd, r, json)) != TD_EXIT_OK) {
        json_decref(r);
        return NULL;
    }
    return r;
}
