/* obs.h - the daemon's observability exports: trace requests waiting for
 * their timeline, the Prometheus endpoint (docs/observability.md) and the
 * live dashboard beside it (docs/metrics.md#live-dashboard).
 *
 * Threads: the td_obs_trace_*, td_obs_job_curves and td_obs_refresh calls
 * are the loop's; td_obs_job_snapshot is called by the trainer thread; the
 * HTTP server (libmicrohttpd) runs its own thread and serves the text that
 * the loop and the trainer refresh behind a mutex, so a scrape never
 * touches the loop and the loop never waits for a scrape.
 */
#ifndef TD_DAEMON_OBS_H
#define TD_DAEMON_OBS_H

#include <stdint.h>

#include <jansson.h>

#include "obs/prom.h"

struct td_daemon;
struct td_client;

/* Jobs whose learning curves the dashboard keeps (the highest ids). */
#define TD_OBS_RECENT 8

/* Loop thread: after the settings are read.  A metrics_listen address that
 * cannot be used is logged and the endpoint stays off (-errno returned). */
int td_obs_init(struct td_daemon *d);
/* Loop thread: stops the HTTP server and closes the refresh timer. */
void td_obs_close(struct td_daemon *d);
void td_obs_free(struct td_daemon *d);

/* Loop thread: the client waits for job's timeline (reply to req_id). */
int td_obs_trace_wait(struct td_daemon *d, struct td_client *c,
                      json_t *req_id, int64_t job, int steps);
/* Loop thread: a timeline arrived (data: the runner's "trace" payload
 * with "text" in place of "trace"); answers every waiter of the job. */
void td_obs_trace_done(struct td_daemon *d, int64_t job, json_t *data);
/* Loop thread: how far a recording is (data: {"steps", "requested"},
 * borrowed); sent to every waiter of the job as a "trace_progress"
 * event. */
void td_obs_trace_progress(struct td_daemon *d, int64_t job,
                           const json_t *data);
/* Loop thread: the job ended; waiters still there get an error. */
void td_obs_job_done(struct td_daemon *d, int64_t job);
/* Loop thread: client `client` has gone; its trace waits are dropped and
 * a recording nobody waits for any more is cut short, so the job's trace
 * slot is free again. */
void td_obs_client_gone(struct td_daemon *d, uint64_t client);

/* Loop thread: job's learning curves changed (an epoch or window event,
 * or a state change): the dashboard (GET /dashboard/data.json) shows
 * them.  history and curve (jobs.h; either may be NULL) are serialised
 * here, so the HTTP thread never sees them; window events within 250 ms
 * of the last serialisation of an unchanged state and history are
 * skipped.  The TD_OBS_RECENT highest job ids are kept. */
void td_obs_job_curves(struct td_daemon *d, int64_t job, const char *name,
                       const char *state, const json_t *history,
                       const json_t *curve);

/* Trainer thread: the running job's latest figures. */
void td_obs_job_snapshot(struct td_daemon *d, const td_prom_job *s);

/* The port the endpoint listens on (0: off). */
int td_obs_port(const struct td_daemon *d);

#endif
