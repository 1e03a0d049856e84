/* http_guard.h - slow-client protection for the metrics endpoint
 * (issue 17, item 9).
 *
 * libmicrohttpd's own timeout is an idle timeout: a client that sends a
 * header byte every few seconds keeps its connection for ever, and 64 of
 * them blocked every scrape.  The guard gives each connection a deadline
 * for its first request's headers: it learns of connections through
 * MHD_OPTION_NOTIFY_CONNECTION, the request handler marks a connection
 * once its headers are in, and td_http_guard_reap (the loop's one-second
 * timer) shuts down the socket of any connection past the deadline, which
 * libmicrohttpd then closes.  With a per-IP connection limit this keeps
 * scrapes served.
 * Never: closes a descriptor itself (libmicrohttpd owns them).
 */
#ifndef TD_HTTP_GUARD_H
#define TD_HTTP_GUARD_H

#include <stdint.h>

#include <microhttpd.h>

typedef struct td_http_guard td_http_guard;

int td_http_guard_create(td_http_guard **out, int64_t header_timeout_ns);
/* After MHD_stop_daemon. */
void td_http_guard_free(td_http_guard *g);
/* The MHD_OPTION_NOTIFY_CONNECTION callback (cls: the guard). */
void td_http_guard_notify(void *cls, struct MHD_Connection *con,
                          void **socket_context,
                          enum MHD_ConnectionNotificationCode toe);
/* From the request handler: con's headers have arrived. */
void td_http_guard_headers_done(struct MHD_Connection *con);
/* Shuts down connections past their deadline; returns how many. */
int td_http_guard_reap(td_http_guard *g);

#endif
