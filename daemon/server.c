/* server.c - the control socket: listening, clients, framing, writes with
 * back-pressure.
 *
 * Every client gets the hello line on connect, then request/reply lines.
 * Replies are always queued.  Events go only to subscribers and never slow
 * training: above subscriber_soft_bytes of unsent output a client gets no
 * step events and only the newest window (held back, sent when it drains);
 * above subscriber_max_bytes it is disconnected, and so is any client
 * whose unread replies pass that bound.  A line over the 1 MiB
 * cap gets a too_large error and the connection closes after it is sent.
 * A uid other than root holds at most max_connections_per_user
 * connections: one more gets a conflict error instead of the hello.
 */
#define _GNU_SOURCE /* struct ucred */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/error.h"
#include "base/log.h"
#include "daemon.h"
#include "notify.h"
#include "obs.h"
#include "settings.h"
#include "td_config.h"

typedef struct td_write_req {
    uv_write_t req;
    td_client *c;
    char *line;
} td_write_req;

static void td__on_close(uv_handle_t *h)
{
    td_client *c = (td_client *)h;
    td_linebuf_free(&c->in);
    free(c->pending_window);
    free(c);
}

void td_client_close(td_client *c, const char *why)
{
    td_daemon *d = c->d;
    if (c->closing)
        return;
    c->closing = 1;
    if (why)
        td_debug("client pid %d uid %u: closing: %s", (int)c->pid,
                 (unsigned)c->uid, why);
    if (c->prev)
        c->prev->next = c->next;
    else
        d->clients = c->next;
    if (c->next)
        c->next->prev = c->prev;
    d->nclients--;
    td_obs_client_gone(d, c->id); /* frees a trace slot it held */
    uv_close((uv_handle_t *)&c->pipe, td__on_close);
}

/* What a client's unsent output costs the daemon: the bytes libuv still
 * holds, plus a charge for each queued line's own allocations (the write
 * request, the line's block), so that many tiny replies count too. */
enum { TD__WRITE_OVERHEAD = 256 };

static size_t td__queued(td_client *c)
{
    return uv_stream_get_write_queue_size((uv_stream_t *)&c->pipe) +
           c->pending_writes * TD__WRITE_OVERHEAD;
}

static void td__write_line(td_client *c, char *line);

static void td__on_write(uv_write_t *req, int status)
{
    td_write_req *w = (td_write_req *)req;
    td_client *c = w->c;
    free(w->line);
    free(w);
    c->pending_writes--;
    if (c->closing)
        return;
    if (status < 0) {
        td_client_close(c, uv_strerror(status));
        return;
    }
    /* Drained enough: release the held-back window. */
    if (c->pending_window &&
        td__queued(c) < (size_t)td_settings_int(c->d->settings,
                                                "subscriber_soft_bytes")) {
        char *l = c->pending_window;
        c->pending_window = NULL;
        td__write_line(c, l);
    }
}

static void td__write_line(td_client *c, char *line)
{
    if (!line)
        return;
    if (c->closing) {
        free(line);
        return;
    }
    /* Replies are bounded like events: a client that sends requests and
     * never reads what comes back is cut off, not buffered for. */
    size_t q = td__queued(c);
    if (q > (size_t)td_settings_int(c->d->settings, "subscriber_max_bytes")) {
        td_warn("client pid %d uid %u does not read its replies (%zu bytes "
                "queued): disconnected", (int)c->pid, (unsigned)c->uid, q);
        free(line);
        td_client_close(c, "not reading");
        return;
    }
    td_write_req *w = malloc(sizeof *w);
    if (!w) {
        free(line);
        td_client_close(c, "out of memory");
        return;
    }
    w->c = c;
    w->line = line;
    uv_buf_t b = uv_buf_init(line, (unsigned)strlen(line));
    int rc = uv_write(&w->req, (uv_stream_t *)&c->pipe, &b, 1, td__on_write);
    if (rc < 0) {
        free(line);
        free(w);
        td_client_close(c, uv_strerror(rc));
        return;
    }
    c->pending_writes++;
}

void td_client_send(td_client *c, char *line) { td__write_line(c, line); }

td_client *td_server_client(td_daemon *d, uint64_t id)
{
    for (td_client *c = d->clients; c; c = c->next)
        if (c->id == id && !c->closing)
            return c;
    return NULL;
}

/* Closes the client once everything queued so far has been written. */
static void td__on_shutdown(uv_shutdown_t *req, int status)
{
    td_client *c = req->data;
    (void)status;
    free(req);
    td_client_close(c, "protocol error");
}

static void td__close_after_flush(td_client *c)
{
    uv_shutdown_t *req = malloc(sizeof *req);
    uv_read_stop((uv_stream_t *)&c->pipe);
    if (!req || uv_shutdown(req, (uv_stream_t *)&c->pipe, td__on_shutdown)) {
        free(req);
        td_client_close(c, "protocol error");
        return;
    }
    req->data = c;
}

/* ---- events ----------------------------------------------------------- */

/* The same for an event's job id (none, or gone: nothing to hide). */
static int td__may_see(td_client *c, int64_t job)
{
    if (c->uid == 0 || job <= 0)
        return 1;
    td_job *j = td_jobs_find(&c->d->jobs, job);
    return !j || td_client_may_see(c, j);
}

static int td__wants(td_client *c, int kind, int64_t job, int64_t now_ns,
                     json_t *data)
{
    if (!(c->sub_events & (unsigned)kind))
        return 0;
    if (c->sub_job && job && c->sub_job != job)
        return 0;
    /* Log lines and checkpoint paths are the owner's (docs/daemon.md). */
    if ((kind == TD_EV_LOG || kind == TD_EV_CHECKPOINT) &&
        !td__may_see(c, job))
        return 0;
    if (kind == TD_EV_STEP) {
        int64_t step = json_integer_value(json_object_get(data, "step"));
        if (c->every_steps > 1 && c->last_step_sent &&
            step - c->last_step_sent < c->every_steps)
            return 0;
        if (c->every_ms > 0 && c->last_step_ns &&
            now_ns - c->last_step_ns < c->every_ms * 1000000)
            return 0;
    }
    return 1;
}

void td_server_broadcast(td_daemon *d, int kind, int64_t job, double ts,
                         json_t *data)
{
    static const struct { int kind; const char *name; } names[] = {
        {TD_EV_STEP, "step"},   {TD_EV_WINDOW, "window"},
        {TD_EV_EPOCH, "epoch"}, {TD_EV_STATE, "state"},
        {TD_EV_LOG, "log"},     {TD_EV_CHECKPOINT, "checkpoint"},
        {TD_EV_EVAL, "eval"},
    };
    const char *name = NULL;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (names[i].kind == kind)
            name = names[i].name;
    if (!name)
        return;
    size_t soft = (size_t)td_settings_int(d->settings, "subscriber_soft_bytes");
    size_t hard = (size_t)td_settings_int(d->settings, "subscriber_max_bytes");
    int64_t now = uv_hrtime();
    char *full = NULL, *shown = NULL, *line;
    td_client *next;
    for (td_client *c = d->clients; c; c = next) {
        next = c->next;
        if (c->closing || !td__wants(c, kind, job, now, data))
            continue;
        /* A state's reason may name the job's files: others get it up to
         * the first path (td_job_row_restrict). */
        int others = kind == TD_EV_STATE && !td__may_see(c, job);
        char **lp = others ? &shown : &full;
        if (!*lp) {
            json_t *dd = others ? json_deep_copy(data) : json_incref(data);
            if (others)
                td_job_row_restrict(dd);
            if (!(*lp = td_proto_event(name, ts, job, dd)))
                break;
        }
        line = *lp;
        size_t q = td__queued(c);
        if (q > hard) {
            td_warn("subscriber pid %d fell %zu bytes behind: disconnected",
                    (int)c->pid, q);
            td_client_close(c, "too slow");
            continue;
        }
        if (kind == TD_EV_STEP) {
            if (q > soft) {
                c->dropped_steps++;
                continue;
            }
            c->last_step_sent = json_integer_value(json_object_get(data,
                                                                   "step"));
            c->last_step_ns = now;
        } else if (kind == TD_EV_WINDOW && q > soft) {
            free(c->pending_window); /* coalesce: keep the newest only */
            c->pending_window = strdup(line);
            continue;
        }
        td__write_line(c, strdup(line));
    }
    free(full);
    free(shown);
}

/* ---- reading ---------------------------------------------------------- */

static void td__on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    static char slab[65536]; /* the loop is one thread: one slab is enough */
    (void)h;
    (void)suggested;
    *buf = uv_buf_init(slab, sizeof slab);
}

static void td__handle_line(td_client *c, const char *line, size_t len)
{
    td_request req;
    const char *cls;
    char err[512];
    if (len == 0)
        return; /* blank lines are keep-alives */
    if (td_request_parse(line, len, &req, &cls, err, sizeof err)) {
        td_client_send(c, td_proto_error(req.id, cls, err));
        td_request_free(&req);
        return;
    }
    td_commands_dispatch(c, &req);
    td_request_free(&req);
}

/* Handles c's buffered request lines until none is left or one holds the
 * connection (td_client_hold); rc: what feeding the buffer returned. */
static void td__drain(td_client *c, int rc)
{
    const char *line;
    size_t len;
    while (rc == 0 && !c->closing && !c->held &&
           (rc = td_linebuf_next(&c->in, &line, &len)) == 1) {
        td__handle_line(c, line, len);
        rc = 0;
    }
    if (rc == -EMSGSIZE && !c->closing) {
        char msg[128];
        snprintf(msg, sizeof msg,
                 "request line over the %d-byte limit; closing the connection",
                 TD_PROTO_LINE_MAX);
        td_client_send(c, td_proto_error(NULL, TD_ERR_TOO_LARGE, msg));
        td__close_after_flush(c);
    } else if (rc < 0 && !c->closing) {
        td_client_close(c, td_strerror(rc));
    }
}

static void td__on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    td_client *c = (td_client *)s;
    if (n < 0) {
        td_client_close(c, n == UV_EOF ? "disconnected" : uv_strerror((int)n));
        return;
    }
    if (n == 0 || c->closing)
        return;
    td__drain(c, td_linebuf_feed(&c->in, buf->base, (size_t)n));
}

void td_client_hold(td_client *c)
{
    if (c->closing || c->held)
        return;
    c->held = 1;
    uv_read_stop((uv_stream_t *)&c->pipe);
}

void td_client_release(td_client *c)
{
    if (c->closing || !c->held)
        return;
    c->held = 0;
    td__drain(c, 0); /* lines that came with or after the held one */
    if (!c->closing && !c->held) {
        int rc = uv_read_start((uv_stream_t *)&c->pipe, td__on_alloc,
                               td__on_read);
        if (rc < 0)
            td_client_close(c, uv_strerror(rc));
    }
}

/* ---- accepting -------------------------------------------------------- */

/* Open connections of uid: each holds a descriptor and up to two
 * request-line caps of buffer, so one user may not take them all. */
static size_t td__connections_of(const td_daemon *d, uid_t uid)
{
    size_t n = 0;
    for (const td_client *o = d->clients; o; o = o->next)
        n += !o->closing && o->uid == uid;
    return n;
}

static void td__on_connection(uv_stream_t *server, int status)
{
    td_daemon *d = server->data;
    if (status < 0) {
        td_warn("accept: %s", uv_strerror(status));
        return;
    }
    td_client *c = calloc(1, sizeof *c);
    if (!c || td_linebuf_init(&c->in, TD_PROTO_LINE_MAX)) {
        free(c);
        td_error("accept: out of memory");
        return;
    }
    c->d = d;
    c->id = ++d->next_client_id;
    uv_pipe_init(d->loop, &c->pipe, 0);
    if (uv_accept(server, (uv_stream_t *)&c->pipe) < 0) {
        uv_close((uv_handle_t *)&c->pipe, td__on_close);
        return;
    }
    uv_os_fd_t fd;
    struct ucred cred;
    socklen_t len = sizeof cred;
    if (uv_fileno((uv_handle_t *)&c->pipe, &fd) == 0 &&
        getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
        c->uid = cred.uid;
        c->pid = cred.pid;
    } else {
        /* Without credentials the peer may do nothing privileged. */
        c->uid = (uid_t)-1;
    }
    size_t held = td__connections_of(d, c->uid);
    c->next = d->clients;
    if (d->clients)
        d->clients->prev = c;
    d->clients = c;
    d->nclients++;
    long long cap = td_settings_int(d->settings, "max_connections_per_user");
    if (c->uid != 0 && (long long)held >= cap) {
        char msg[200];
        snprintf(msg, sizeof msg, "uid %u already holds %zu connection(s) to "
                 "traind (max_connections_per_user); close some and try "
                 "again", (unsigned)c->uid, held);
        td_debug("client pid %d: %s", (int)c->pid, msg);
        td_client_send(c, td_proto_error(NULL, TD_ERR_CONFLICT, msg));
        td__close_after_flush(c);
        return;
    }
    td_client_send(c, td_proto_hello(TD_VERSION, d->device_desc));
    uv_read_start((uv_stream_t *)&c->pipe, td__on_alloc, td__on_read);
}

/* Is a live daemon answering at path?  1 yes, 0 no (stale or absent). */
static int td__socket_alive(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    int alive = connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
    close(fd);
    return alive;
}

/* Adopts the listening socket systemd passed (socket activation). */
static int td__listen_activated(td_daemon *d, int fd)
{
    int rc;
    uv_pipe_init(d->loop, &d->server, 0);
    d->server.data = d;
    rc = uv_pipe_open(&d->server, fd);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&d->server, 128, td__on_connection);
    if (rc < 0) {
        td_error("cannot listen on the socket systemd passed: %s",
                 uv_strerror(rc));
        uv_close((uv_handle_t *)&d->server, NULL);
        return rc;
    }
    char path[sizeof d->socket_path];
    size_t len = sizeof path;
    if (uv_pipe_getsockname(&d->server, path, &len) == 0 && len < sizeof path) {
        path[len] = '\0';
        snprintf(d->socket_path, sizeof d->socket_path, "%s", path);
    }
    d->listening = 1;
    d->activated = 1;
    td_info("listening on %s (socket activation)", d->socket_path);
    return 0;
}

int td_server_listen(td_daemon *d)
{
    struct stat st;
    int rc;
    int fd = td_notify_listen_fd();
    if (fd >= 0)
        return td__listen_activated(d, fd);
    if (lstat(d->socket_path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode)) {
            td_error("%s exists and is not a socket; refusing to replace it",
                     d->socket_path);
            return -EEXIST;
        }
        if (td__socket_alive(d->socket_path)) {
            td_error("another traind is listening on %s", d->socket_path);
            return -EADDRINUSE;
        }
        td_info("removing stale socket %s", d->socket_path);
        unlink(d->socket_path);
    }
    uv_pipe_init(d->loop, &d->server, 0);
    d->server.data = d;
    mode_t old = umask(0117); /* created 0660 with no window of wider mode */
    rc = uv_pipe_bind(&d->server, d->socket_path);
    umask(old);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&d->server, 128, td__on_connection);
    if (rc < 0) {
        td_error("cannot listen on %s: %s", d->socket_path, uv_strerror(rc));
        uv_close((uv_handle_t *)&d->server, NULL);
        return rc;
    }
    chmod(d->socket_path, 0660);
    d->listening = 1;
    td_info("listening on %s", d->socket_path);
    return 0;
}

void td_server_close(td_daemon *d)
{
    if (d->listening) {
        d->listening = 0;
        uv_close((uv_handle_t *)&d->server, NULL);
        if (!d->activated) /* systemd owns an activated socket's file */
            unlink(d->socket_path);
    }
    while (d->clients)
        td_client_close(d->clients, "daemon shutting down");
}
