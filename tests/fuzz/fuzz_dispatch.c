/* fuzz_dispatch.c - request lines through the daemon's real command
 * handlers (daemon/commands.c) and job table, as three clients send them.
 *
 * Input: lines; the first byte of each picks the sending client (root, uid
 * 1000 or uid 1001; the low bits) and the rest is the request as it comes
 * off the socket.  Each input gets a daemon of its own (td_daemon_init on
 * a fresh state dir, shut down and freed at the end), so nothing carries
 * over from one input to the next.
 *
 * Built from the daemon's files except server.c and trainer.c, whose
 * socket writes and trainer thread are replaced here: td_client_send
 * collects replies, and a "trainer" that holds a job running until it is
 * asked to stop, then reports it done the way the real one does (through
 * the inbox).  Promises checked besides the sanitizers: every request
 * gets exactly one reply line, of valid JSON, carrying the request's id;
 * events are JSON objects; the daemon shuts down cleanly with no leak.
 */
#define _GNU_SOURCE
#include <ftw.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>
#include <uv.h>

#include "daemon.h"
#include "fuzz.h"
#include "obs.h"
#include "proto/protocol.h"
#include "trainer.h"

/* ---- server.c's part, without a socket ---------------------------------- */

typedef struct td_fuzz_client {
    td_client c;      /* first: td_client * -> td_fuzz_client * by cast */
    int replies;      /* reply lines (with an "ok" or "error" member) */
    json_t *want_id;  /* the id of the request waiting for its reply */
} td_fuzz_client;

void td_client_send(td_client *c, char *line)
{
    td_fuzz_client *f = (td_fuzz_client *)c;
    TD_FUZZ_CHECK(line != NULL);
    size_t n = strlen(line);
    TD_FUZZ_CHECK(n >= 2 && line[n - 1] == '\n');
    TD_FUZZ_CHECK(memchr(line, '\n', n - 1) == NULL);
    if (getenv("TD_FUZZ_ECHO")) /* to read what the daemon answered */
        fprintf(stderr, "uid %u <- %s", (unsigned)c->uid, line);
    json_error_t je;
    json_t *o = json_loadb(line, n - 1, 0, &je);
    TD_FUZZ_CHECK(json_is_object(o));
    if (json_object_get(o, "ok") || json_object_get(o, "error")) {
        json_t *rid = json_object_get(o, "id");
        TD_FUZZ_CHECK(f->want_id ? json_equal(rid, f->want_id)
                                 : json_is_null(rid));
        f->replies++;
    }
    json_decref(o);
    free(line);
}

void td_server_broadcast(td_daemon *d, int kind, int64_t job, double ts,
                         json_t *data)
{
    (void)d;
    (void)kind;
    (void)job;
    (void)ts;
    TD_FUZZ_CHECK(json_is_object(data));
    char *s = json_dumps(data, JSON_COMPACT);
    TD_FUZZ_CHECK(s != NULL);
    free(s);
}

void td_client_close(td_client *c, const char *why)
{
    (void)why;
    c->closing = 1; /* freed with the daemon (td__drop_clients) */
}

td_client *td_server_client(td_daemon *d, uint64_t id)
{
    for (td_client *c = d->clients; c; c = c->next)
        if (c->id == id && !c->closing)
            return c;
    return NULL;
}

/* One request at a time here (td__request waits for each reply): there
 * are no later lines to hold back. */
void td_client_hold(td_client *c) { c->held = 1; }
void td_client_release(td_client *c) { c->held = 0; }

int td_server_listen(td_daemon *d)
{
    (void)d;
    return 0;
}

void td_server_close(td_daemon *d) { (void)d; }

/* ---- trainer.c's part, without a thread --------------------------------- */

struct td_trainer_slot {
    td_daemon *d;
    int64_t job;
    int stopping;
};

int td_trainer_slot_start(td_daemon *d, td_job *j, td_trainer_slot **out,
                          char *err, size_t errcap)
{
    (void)err;
    (void)errcap;
    td_trainer_slot *s = calloc(1, sizeof *s);
    TD_FUZZ_CHECK(s != NULL);
    s->d = d;
    s->job = j->id;
    *out = s;
    return 0;
}

void td_trainer_slot_request(td_trainer_slot *s, enum td_stop_reason why)
{
    if (s->stopping)
        return;
    s->stopping = 1;
    td_daemon_post(s->d, TD_MSG_DONE, s->job,
                   json_pack("{s:i, s:i, s:i}", "rc", 0, "stopped", (int)why,
                             "steps", 0));
}

void td_trainer_slot_checkpoint(td_trainer_slot *s) { (void)s; }
void td_trainer_slot_set_workers(td_trainer_slot *s, int n)
{
    (void)s;
    TD_FUZZ_CHECK(n >= 1);
}

int td_trainer_slot_trace(td_trainer_slot *s, int steps)
{
    (void)s;
    TD_FUZZ_CHECK(steps >= 1);
    return -EBUSY; /* as if a recording were under way */
}

void td_trainer_slot_trace_cancel(td_trainer_slot *s) { (void)s; }
int64_t td_trainer_slot_job(const td_trainer_slot *s) { return s->job; }
void td_trainer_slot_join(td_trainer_slot *s) { free(s); }

/* ---- the disk, without waiting for it ------------------------------------ */

/* Durability is not what this target checks (test_fsio and test_storage
 * do), and a flush to disk per job-state change would cap it at a few
 * dozen inputs a second: the binary's own fsync and fdatasync win over
 * libc's. */
int fsync(int fd)
{
    (void)fd;
    return 0;
}

int fdatasync(int fd)
{
    (void)fd;
    return 0;
}

/* ---- the harness -------------------------------------------------------- */

static int td__rm(const char *p, const struct stat *st, int flag,
                  struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(p);
    return 0;
}

static td_fuzz_client *td__client(td_daemon *d, uid_t uid)
{
    td_fuzz_client *f = calloc(1, sizeof *f);
    TD_FUZZ_CHECK(f != NULL);
    f->c.d = d;
    f->c.id = ++d->next_client_id;
    f->c.uid = uid;
    f->c.pid = 4242;
    f->c.next = d->clients;
    if (d->clients)
        d->clients->prev = &f->c;
    d->clients = &f->c;
    d->nclients++;
    return f;
}

static void td__drop_clients(td_daemon *d)
{
    td_client *c = d->clients;
    while (c) {
        td_client *n = c->next;
        td_obs_client_gone(d, c->id);
        free(c->pending_window);
        free(c);
        c = n;
    }
    d->clients = NULL;
    d->nclients = 0;
}

/* One request line from client f, and the loop run until its reply is in
 * (a request that never gets one hangs here: libFuzzer's timeout). */
static void td__request(td_daemon *d, td_fuzz_client *f, const char *line,
                        size_t len)
{
    td_request req;
    const char *cls = NULL;
    char err[512];
    if (len == 0)
        return;
    int before = f->replies;
    int rc = td_request_parse(line, len, &req, &cls, err, sizeof err);
    f->want_id = req.id;
    if (rc)
        td_client_send(&f->c, td_proto_error(req.id, cls, err));
    else
        td_commands_dispatch(&f->c, &req);
    while (f->replies == before)
        uv_run(d->loop, UV_RUN_ONCE);
    TD_FUZZ_CHECK(f->replies == before + 1);
    td_request_free(&req);
    f->want_id = NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char state[600], sock[600];
    if (!state[0]) {
        snprintf(state, sizeof state, "%s/state", td_fuzz_tmpdir());
        snprintf(sock, sizeof sock, "%s/sock", td_fuzz_tmpdir());
        unsetenv("NOTIFY_SOCKET");
    }
    nftw(state, td__rm, 16, FTW_DEPTH | FTW_PHYS);
    uv_loop_t loop;
    TD_FUZZ_CHECK(uv_loop_init(&loop) == 0);
    json_t *ov = json_pack("{s:s, s:s, s:s, s:s}", "state_dir", state,
                           "socket", sock, "log_level", "error", "device",
                           "cpu");
    td_daemon_opts o = {.overrides = ov};
    td_daemon d;
    TD_FUZZ_CHECK(td_daemon_init(&d, &loop, &o) == 0);
    td_fuzz_client *cl[3] = {td__client(&d, 0), td__client(&d, 1000),
                             td__client(&d, 1001)};

    size_t at = 0;
    while (at < size) {
        const uint8_t *nl = memchr(data + at, '\n', size - at);
        size_t end = nl ? (size_t)(nl - data) : size;
        if (end > at) {
            td_fuzz_client *f = cl[data[at] % 3];
            td__request(&d, f, (const char *)data + at + 1, end - at - 1);
        }
        at = end + 1;
    }

    td_daemon_shutdown(&d, "end of input");
    uv_run(&loop, UV_RUN_DEFAULT);
    td__drop_clients(&d);
    td_daemon_free(&d);
    TD_FUZZ_CHECK(uv_loop_close(&loop) == 0);
    json_decref(ov);
    return 0;
}
