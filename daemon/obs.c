/* obs.c - trace waiters, the Prometheus endpoint and the live dashboard
 * (see obs.h).
 *
 * Owns: the list of clients waiting for a timeline, the latest figures of
 * recent jobs and of the process, the learning curves of recent jobs as
 * JSON text (all behind `mu`), and the libmicrohttpd server thread that
 * serves them: GET /metrics, GET /dashboard (the page, dashboard.html
 * built into the binary) and GET /dashboard/data.json.
 * Never: blocks the loop (the HTTP thread copies the figures under the
 * mutex and renders outside it; the loop only swaps numbers and finished
 * strings in), lets the HTTP thread touch a json_t (the loop serialises
 * the curves it owns; jansson objects are not thread-safe), writes a
 * trace to disk (the client does).
 */
#define _GNU_SOURCE
#include "obs.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#include <microhttpd.h>

#include "base/clock.h"
#include "base/log.h"
#include "daemon.h"
#include "dashboard.h"
#include "http_guard.h"
#include "proto/protocol.h"
#include "settings.h"

enum { TD__RECENT = TD_OBS_RECENT, TD__PART = 256 * 1024 };

/* A job's curves are serialised at most this often (a state change or a
 * new job always is); changes in between wait for the refresh. */
#define TD__CURVES_EVERY_NS (250 * TD_NS_PER_MS)

typedef struct td__waiter {
    uint64_t client;
    json_t *id;
    int64_t job;
    struct td__waiter *next;
} td__waiter;

typedef struct td_obs {
    td_daemon *d;
    td__waiter *waiters;
    uv_timer_t refresh;
    int timer_on;
    struct MHD_Daemon *http;
    td_http_guard *guard;      /* header deadlines (http_guard.h) */
    int port;
    pthread_mutex_t mu;        /* everything below */
    td_prom_job jobs[TD__RECENT]; /* newest first */
    int njobs;
    td_prom_process proc;
    struct td__curves {       /* newest job (highest id) first */
        int64_t job;
        char *json;           /* {"id":..,"name":..,"state":..,"history":
                                 [..],"curve":[..]}, malloc'd */
        size_t len;
        /* the loop's alone (written under mu, read without it) */
        int64_t at_ns;
        char state[16];
        int pending;          /* changed since: the refresh serialises it */
    } curves[TD__RECENT];
    int ncurves;
} td_obs;

/* ---- trace waiters ---------------------------------------------------- */

int td_obs_trace_wait(td_daemon *d, td_client *c, json_t *req_id, int64_t job,
                      int steps)
{
    td__waiter *w = calloc(1, sizeof *w);
    (void)steps;
    if (!w)
        return -ENOMEM;
    w->client = c->id;
    w->id = req_id ? json_incref(req_id) : json_null();
    w->job = job;
    w->next = d->obs->waiters;
    d->obs->waiters = w;
    return 0;
}

/* Sends the timeline text in parts (lines stay under the 1 MiB cap),
 * then the reply. */
static void td__send_trace(td_daemon *d, td_client *c, td__waiter *w,
                           json_t *data)
{
    const char *text = json_string_value(json_object_get(data, "text"));
    size_t len = text ? strlen(text) : 0;
    size_t parts = (len + TD__PART - 1) / TD__PART;
    for (size_t i = 0; i < parts; i++) {
        size_t n = len - i * TD__PART < TD__PART ? len - i * TD__PART
                                                  : TD__PART;
        json_t *ev = json_pack("{s:I, s:I, s:s%}", "part", (json_int_t)i,
                               "parts", (json_int_t)parts, "text",
                               text + i * TD__PART, n);
        char *line = td_proto_event("trace_part", td_daemon_ts(d), w->job, ev);
        if (line)
            td_client_send(c, line);
    }
    json_t *ok = json_deep_copy(data);
    json_object_del(ok, "text");
    json_object_set_new(ok, "job", json_integer(w->job));
    json_object_set_new(ok, "parts", json_integer((json_int_t)parts));
    json_object_set_new(ok, "bytes", json_integer((json_int_t)len));
    td_client_send(c, td_proto_ok(w->id, ok));
}

static void td__answer(td_daemon *d, int64_t job, json_t *data)
{
    td__waiter **pp = &d->obs->waiters;
    while (*pp) {
        td__waiter *w = *pp;
        if (w->job != job) {
            pp = &w->next;
            continue;
        }
        *pp = w->next;
        td_client *c = td_server_client(d, w->client);
        if (c && data)
            td__send_trace(d, c, w, data);
        else if (c)
            td_client_send(c, td_proto_error(
                                  w->id, TD_ERR_CONFLICT,
                                  "the job ended before its trace started"));
        json_decref(w->id);
        free(w);
    }
}

void td_obs_trace_done(td_daemon *d, int64_t job, json_t *data)
{
    td__answer(d, job, data);
}

void td_obs_trace_progress(td_daemon *d, int64_t job, const json_t *data)
{
    for (td__waiter *w = d->obs ? d->obs->waiters : NULL; w; w = w->next) {
        td_client *c = w->job == job ? td_server_client(d, w->client) : NULL;
        char *line = c ? td_proto_event("trace_progress", td_daemon_ts(d),
                                        job, json_deep_copy(data))
                       : NULL;
        if (line)
            td_client_send(c, line);
    }
}

void td_obs_job_done(td_daemon *d, int64_t job) { td__answer(d, job, NULL); }

void td_obs_client_gone(td_daemon *d, uint64_t client)
{
    if (!d->obs)
        return;
    td__waiter **pp = &d->obs->waiters;
    int64_t dropped = 0;
    while (*pp) {
        td__waiter *w = *pp;
        if (w->client != client) {
            pp = &w->next;
            continue;
        }
        dropped = w->job;
        *pp = w->next;
        json_decref(w->id);
        free(w);
    }
    if (!dropped)
        return;
    for (td__waiter *w = d->obs->waiters; w; w = w->next)
        if (w->job == dropped)
            return; /* someone else still waits for it */
    if (d->trainer && td_trainer_slot_job(d->trainer) == dropped)
        td_trainer_slot_trace_cancel(d->trainer);
}

/* ---- figures ---------------------------------------------------------- */

void td_obs_job_snapshot(td_daemon *d, const td_prom_job *s)
{
    td_obs *o = d->obs;
    int i;
    if (!o)
        return;
    pthread_mutex_lock(&o->mu);
    for (i = 0; i < o->njobs && o->jobs[i].job != s->job; i++)
        ;
    if (i == o->njobs && o->njobs < TD__RECENT)
        o->njobs++;
    if (i == TD__RECENT)
        i = TD__RECENT - 1; /* the oldest goes */
    memmove(&o->jobs[1], &o->jobs[0], (size_t)i * sizeof o->jobs[0]);
    o->jobs[0] = *s;
    pthread_mutex_unlock(&o->mu);
}

/* Loop thread.  Serialises the job's curves (outside the lock) and swaps
 * the text into its slot; the slots keep the TD__RECENT highest job ids. */
void td_obs_job_curves(td_daemon *d, int64_t job, const char *name,
                       const char *state, const json_t *history,
                       const json_t *curve)
{
    td_obs *o = d->obs;
    int i;
    if (!o || !o->http)
        return; /* no dashboard to serve them */
    int64_t now = td_now_ns();
    for (i = 0; i < o->ncurves && o->curves[i].job != job; i++)
        ;
    if (i < o->ncurves && strcmp(o->curves[i].state, state) == 0 &&
        now - o->curves[i].at_ns < TD__CURVES_EVERY_NS) {
        /* soon after the last one: the next refresh (a second at most)
         * takes it, so that a fast job's growing history is not
         * serialised for every epoch */
        o->curves[i].pending = 1;
        return;
    }
    if (i == o->ncurves && o->ncurves == TD__RECENT &&
        job < o->curves[TD__RECENT - 1].job)
        return; /* older than every job shown */
    json_t *empty = json_array(), *obj = json_object();
    json_t *jname = json_string(name);
    char *text = NULL;
    if (!jname)
        jname = json_string("?"); /* a name that is not UTF-8 */
    /* json_object_set takes references to the loop's arrays, on the
     * loop thread; they are dropped before anything leaves it.  (The
     * first set_new consumes jname even when obj is NULL.) */
    if (!json_object_set_new(obj, "name", jname) && empty &&
        !json_object_set_new(obj, "id", json_integer((json_int_t)job)) &&
        !json_object_set_new(obj, "state", json_string(state)) &&
        !json_object_set(obj, "history",
                         history ? (json_t *)history : empty) &&
        !json_object_set(obj, "curve", curve ? (json_t *)curve : empty))
        text = json_dumps(obj, JSON_COMPACT | JSON_REAL_PRECISION(7));
    json_decref(obj);
    json_decref(empty);
    if (!text)
        return; /* out of memory: the page shows the previous figures */
    char *old;
    pthread_mutex_lock(&o->mu);
    if (i == o->ncurves) { /* new: insert by id, the lowest may go */
        if (o->ncurves < TD__RECENT)
            o->ncurves++;
        else
            free(o->curves[TD__RECENT - 1].json);
        for (i = o->ncurves - 1; i > 0 && o->curves[i - 1].job < job; i--)
            o->curves[i] = o->curves[i - 1];
        memset(&o->curves[i], 0, sizeof o->curves[i]);
        o->curves[i].job = job;
    }
    old = o->curves[i].json;
    o->curves[i].json = text;
    o->curves[i].len = strlen(text);
    o->curves[i].at_ns = now;
    o->curves[i].pending = 0;
    snprintf(o->curves[i].state, sizeof o->curves[i].state, "%s", state);
    pthread_mutex_unlock(&o->mu);
    free(old);
}

/* HTTP thread: {"jobs":[...]} from a copy of the slots' text. */
static char *td__render_curves(td_obs *o, size_t *len)
{
    pthread_mutex_lock(&o->mu);
    size_t cap = 16;
    for (int i = 0; i < o->ncurves; i++)
        cap += o->curves[i].len + 1;
    char *buf = malloc(cap);
    size_t n = 0;
    if (buf) {
        memcpy(buf, "{\"jobs\":[", 9);
        n = 9;
        for (int i = 0; i < o->ncurves; i++) {
            if (i)
                buf[n++] = ',';
            memcpy(buf + n, o->curves[i].json, o->curves[i].len);
            n += o->curves[i].len;
        }
        memcpy(buf + n, "]}\n", 3);
        n += 3;
    }
    pthread_mutex_unlock(&o->mu);
    *len = n;
    return buf;
}

/* Loop thread: the job table and clients, every second. */
static void td__on_refresh(uv_timer_t *t)
{
    td_obs *o = t->data;
    td_prom_process p;
    memset(&p, 0, sizeof p);
    for (int i = 0; i < o->ncurves; i++) {
        td_job *j = o->curves[i].pending
                        ? td_jobs_find(&o->d->jobs, o->curves[i].job)
                        : NULL;
        o->curves[i].pending = 0;
        if (j && !j->shed) { /* a shed job's were taken when it ended */
            o->curves[i].at_ns = 0; /* due */
            td_obs_job_curves(o->d, j->id, j->name,
                              td_job_state_name(j->state), j->curves.history,
                              j->curves.curve);
        }
    }
    for (td_job *j = o->d->jobs.head; j; j = j->next)
        if ((int)j->state >= 0 && j->state < TD_JOB_NSTATES)
            p.jobs[j->state]++;
    p.clients = (int)o->d->nclients;
    td_http_guard_reap(o->guard);
    pthread_mutex_lock(&o->mu);
    memcpy(o->proc.jobs, p.jobs, sizeof p.jobs);
    o->proc.clients = p.clients;
    pthread_mutex_unlock(&o->mu);
}

/* What malloc holds in use (its arenas and its own mmaps): what a
 * long-running daemon keeps, without RSS's noise (freed pages not given
 * back, arenas touched by threads that came and went).  -1 where the
 * allocator does not say (a sanitizer's). */
static double td__heap_bytes(void)
{
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 33) && \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    struct mallinfo2 mi = mallinfo2();
    return (double)mi.uordblks + (double)mi.hblkhd;
#else
    return -1;
#endif
}

/* HTTP thread: renders a copy of the figures. */
static char *td__render(td_obs *o, size_t *len)
{
    td_prom_job jobs[TD__RECENT];
    td_prom_process p;
    pthread_mutex_lock(&o->mu);
    int n = o->njobs;
    memcpy(jobs, o->jobs, sizeof jobs);
    p = o->proc;
    p.scrapes = ++o->proc.scrapes;
    pthread_mutex_unlock(&o->mu);
    p.uptime_s = td_daemon_ts(o->d);
    p.heap_bytes = td__heap_bytes();
    p.state_names = td_proto_job_states;
    p.nstates = TD_PROTO_NJOB_STATES;
    for (size_t cap = 16384; cap <= (64u << 20); cap *= 2) {
        char *buf = malloc(cap);
        if (!buf)
            return NULL;
        int rc = td_prom_render(jobs, n, &p, buf, cap);
        if (rc >= 0) {
            *len = (size_t)rc;
            return buf;
        }
        free(buf);
    }
    return NULL;
}

/* Queues body (len bytes; `mode` says who frees it) as the response. */
static enum MHD_Result td__send(struct MHD_Connection *con, unsigned code,
                                const char *type, const char *body,
                                size_t len, enum MHD_ResponseMemoryMode mode)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)body, mode);
    if (!r) {
        if (mode == MHD_RESPMEM_MUST_FREE)
            free((void *)body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", type);
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "Cache-Control", "no-store");
    if (strncmp(type, "text/html", 9) == 0) /* the page loads nothing */
        MHD_add_response_header(
            r, "Content-Security-Policy",
            "default-src 'none'; script-src 'unsafe-inline'; "
            "style-src 'unsafe-inline'; connect-src 'self'; "
            "img-src data:; base-uri 'none'; form-action 'none'");
    enum MHD_Result rc = MHD_queue_response(con, code, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result td__reply(struct MHD_Connection *con, unsigned code,
                                 const char *text)
{
    return td__send(con, code, "text/plain; charset=utf-8", text,
                    strlen(text), MHD_RESPMEM_PERSISTENT);
}

static enum MHD_Result td__on_http(void *cls, struct MHD_Connection *con,
                                   const char *url, const char *method,
                                   const char *version,
                                   const char *upload_data,
                                   size_t *upload_size, void **con_cls)
{
    td_obs *o = cls;
    size_t len = 0;
    td_http_guard_headers_done(con);
    (void)version;
    (void)upload_data;
    (void)upload_size;
    (void)con_cls;
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return td__reply(con, MHD_HTTP_METHOD_NOT_ALLOWED,
                         "traind serves GET /metrics and /dashboard\n");
    if (strcmp(url, "/dashboard") == 0)
        return td__send(con, MHD_HTTP_OK, "text/html; charset=utf-8",
                        td_dashboard_html, td_dashboard_html_len,
                        MHD_RESPMEM_PERSISTENT);
    char *body = NULL;
    const char *type = "application/json";
    if (strcmp(url, "/dashboard/data.json") == 0)
        body = td__render_curves(o, &len);
    else if (strcmp(url, "/metrics") == 0) {
        body = td__render(o, &len);
        type = "text/plain; version=0.0.4; charset=utf-8";
    } else
        return td__reply(con, MHD_HTTP_NOT_FOUND,
                         "traind serves GET /metrics and /dashboard\n");
    if (!body)
        return td__reply(con, MHD_HTTP_INTERNAL_SERVER_ERROR,
                         "out of memory\n");
    return td__send(con, MHD_HTTP_OK, type, body, len, MHD_RESPMEM_MUST_FREE);
}

/* "host:port" (IPv4 address or "localhost"; empty host: any). */
static int td__parse_listen(const char *s, struct sockaddr_in *sa)
{
    const char *colon = strrchr(s, ':');
    char host[64];
    char *end;
    if (!colon || (size_t)(colon - s) >= sizeof host)
        return -EINVAL;
    memcpy(host, s, (size_t)(colon - s));
    host[colon - s] = '\0';
    long port = strtol(colon + 1, &end, 10);
    if (*end || end == colon + 1 || port < 1 || port > 65535)
        return -EINVAL;
    memset(sa, 0, sizeof *sa);
    sa->sin_family = AF_INET;
    sa->sin_port = htons((uint16_t)port);
    if (!host[0])
        sa->sin_addr.s_addr = htonl(INADDR_ANY);
    else if (strcmp(host, "localhost") == 0)
        sa->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    else if (inet_pton(AF_INET, host, &sa->sin_addr) != 1)
        return -EINVAL;
    return 0;
}

/* One server thread polling with epoll (MHD_USE_AUTO picks it on Linux),
 * so descriptors above FD_SETSIZE are fine.  Slow clients (slowloris):
 * at most TD__HTTP_PER_IP connections per address and TD__HTTP_CONNS in
 * all, a connection's first request must be complete within TD__HEADER_S
 * seconds (http_guard.c), and 10 s idle closes one. */
enum { TD__HTTP_CONNS = 256, TD__HTTP_PER_IP = 16, TD__HEADER_S = 5 };

static int td__http_start(td_obs *o, const char *listen)
{
    struct sockaddr_in sa;
    if (td__parse_listen(listen, &sa) != 0) {
        td_error("metrics_listen '%s': expected ADDRESS:PORT with an IPv4 "
                 "address, e.g. 127.0.0.1:9464; the endpoint stays off",
                 listen);
        return -EINVAL;
    }
    if (td_http_guard_create(&o->guard, (int64_t)TD__HEADER_S * 1000000000))
        return -ENOMEM;
    o->http = MHD_start_daemon(
        MHD_USE_AUTO_INTERNAL_THREAD, ntohs(sa.sin_port), NULL, NULL,
        td__on_http, o, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)TD__HTTP_CONNS,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)TD__HTTP_PER_IP,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10,
        MHD_OPTION_NOTIFY_CONNECTION, td_http_guard_notify, o->guard,
        MHD_OPTION_END);
    if (!o->http) {
        td_http_guard_free(o->guard);
        o->guard = NULL;
        td_error("metrics_listen %s: cannot listen (address in use or not "
                 "this machine's); the endpoint stays off", listen);
        return -EADDRNOTAVAIL;
    }
    o->port = ntohs(sa.sin_port);
    td_info("metrics: serving GET http://%s/metrics and /dashboard", listen);
    return 0;
}

int td_obs_init(td_daemon *d)
{
    td_obs *o = calloc(1, sizeof *o);
    if (!o)
        return -ENOMEM;
    o->d = d;
    pthread_mutex_init(&o->mu, NULL);
    d->obs = o;
    uv_timer_init(d->loop, &o->refresh);
    o->refresh.data = o;
    o->timer_on = 1;
    td__on_refresh(&o->refresh);
    uv_timer_start(&o->refresh, td__on_refresh, 1000, 1000);
    const char *listen = td_settings_str(d->settings, "metrics_listen");
    int rc = listen && *listen ? td__http_start(o, listen) : 0;
    for (td_job *j = d->jobs.head; j; j = j->next) /* restored jobs */
        if (json_array_size(j->curves.history) ||
            json_array_size(j->curves.curve))
            td_obs_job_curves(d, j->id, j->name, td_job_state_name(j->state),
                              j->curves.history, j->curves.curve);
    return rc;
}

void td_obs_close(td_daemon *d)
{
    td_obs *o = d->obs;
    if (!o)
        return;
    if (o->http) {
        MHD_stop_daemon(o->http);
        o->http = NULL;
    }
    td_http_guard_free(o->guard);
    o->guard = NULL;
    if (o->timer_on) {
        uv_close((uv_handle_t *)&o->refresh, NULL);
        o->timer_on = 0;
    }
}

void td_obs_free(td_daemon *d)
{
    td_obs *o = d->obs;
    if (!o)
        return;
    if (o->http)
        MHD_stop_daemon(o->http);
    td_http_guard_free(o->guard);
    while (o->waiters) {
        td__waiter *w = o->waiters;
        o->waiters = w->next;
        json_decref(w->id);
        free(w);
    }
    for (int i = 0; i < o->ncurves; i++)
        free(o->curves[i].json);
    pthread_mutex_destroy(&o->mu);
    free(o);
    d->obs = NULL;
}

int td_obs_port(const td_daemon *d) { return d->obs ? d->obs->port : 0; }
