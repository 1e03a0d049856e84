/* http_guard.c - header deadlines for the metrics endpoint (see
 * http_guard.h).  The list is shared by the HTTP thread (notify, handler)
 * and the loop (reap), behind one mutex. */
#include "http_guard.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>

#include "base/clock.h"
#include "base/log.h"

typedef struct td__conn {
    struct td__conn *prev, *next;
    struct td_http_guard *g;
    int fd;
    int64_t start_ns;
    int headers_done;
    int reaped;
} td__conn;

struct td_http_guard {
    pthread_mutex_t mu;
    td__conn *head;
    int64_t timeout_ns;
};

int td_http_guard_create(td_http_guard **out, int64_t header_timeout_ns)
{
    td_http_guard *g = calloc(1, sizeof *g);
    if (!g)
        return -ENOMEM;
    pthread_mutex_init(&g->mu, NULL);
    g->timeout_ns = header_timeout_ns;
    *out = g;
    return 0;
}

void td_http_guard_free(td_http_guard *g)
{
    if (!g)
        return;
    while (g->head) { /* MHD stopped: whatever it did not report */
        td__conn *c = g->head;
        g->head = c->next;
        free(c);
    }
    pthread_mutex_destroy(&g->mu);
    free(g);
}

void td_http_guard_notify(void *cls, struct MHD_Connection *con,
                          void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    td_http_guard *g = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        td__conn *c = calloc(1, sizeof *c);
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(
            con, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (!c)
            return; /* untracked: only the idle timeout applies */
        c->g = g;
        c->fd = ci ? (int)ci->connect_fd : -1;
        c->start_ns = td_now_ns();
        pthread_mutex_lock(&g->mu);
        c->next = g->head;
        if (g->head)
            g->head->prev = c;
        g->head = c;
        pthread_mutex_unlock(&g->mu);
        *socket_context = c;
    } else if (toe == MHD_CONNECTION_NOTIFY_CLOSED && *socket_context) {
        td__conn *c = *socket_context;
        pthread_mutex_lock(&g->mu);
        if (c->prev)
            c->prev->next = c->next;
        else
            g->head = c->next;
        if (c->next)
            c->next->prev = c->prev;
        pthread_mutex_unlock(&g->mu);
        free(c);
        *socket_context = NULL;
    }
}

void td_http_guard_headers_done(struct MHD_Connection *con)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(
        con, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    td__conn *c = ci ? ci->socket_context : NULL;
    if (!c)
        return;
    pthread_mutex_lock(&c->g->mu);
    c->headers_done = 1;
    pthread_mutex_unlock(&c->g->mu);
}

int td_http_guard_reap(td_http_guard *g)
{
    int n = 0;
    int64_t now = td_now_ns();
    if (!g)
        return 0;
    pthread_mutex_lock(&g->mu);
    for (td__conn *c = g->head; c; c = c->next) {
        if (c->headers_done || c->reaped || c->fd < 0 ||
            now - c->start_ns < g->timeout_ns)
            continue;
        /* The descriptor is still libmicrohttpd's and open: it is closed
         * only after the CLOSED notification, which waits for this lock. */
        shutdown(c->fd, SHUT_RDWR);
        c->reaped = 1;
        n++;
    }
    pthread_mutex_unlock(&g->mu);
    if (n)
        td_debug("metrics: closed %d connection(s) that sent no complete "
                 "request within %lld s", n,
                 (long long)(g->timeout_ns / 1000000000));
    return n;
}
