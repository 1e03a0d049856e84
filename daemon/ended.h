/* ended.h - ended jobs held lightly (loop thread).
 *
 * A daemon that runs for months ends thousands of jobs.  Each kept its
 * whole record in memory (spec, learning curves, last window and epoch,
 * result: about 0.9 MB for a job of 110 epochs and 1,024 window points,
 * 2.6 GB for 3,000 such jobs).  Once an ended job's record is on disk
 * and nothing is left to write, only its list row stays (td_job_shed);
 * `show` reads the record back from state_dir/jobs/<id>.json on libuv's
 * threadpool.  An ended job never changes again, except to be removed.
 */
#ifndef TD_ENDED_H
#define TD_ENDED_H

#include <stdint.h>

#include <jansson.h>

struct td_daemon;
struct td_client;
struct td_job;

/* Sheds j if it has ended and its record is on disk with nothing left to
 * write (no write under way or held back, none failed, no removal). */
void td_ended_shed(struct td_daemon *d, struct td_job *j);
/* The same for every job (after start-up). */
void td_ended_shed_all(struct td_daemon *d);
/* The n-th highest id among jobs_dir's <id>.json names (0 when there are
 * fewer): jobs at or above it keep their curves until the dashboard has
 * taken them at start-up (obs.h, TD_OBS_RECENT). */
int64_t td_ended_recent_floor(const char *jobs_dir, int n);
/* `show` of a shed job: replies to client c (request id req_id, borrowed)
 * with the record read from disk, named as in memory. */
void td_ended_show(struct td_client *c, json_t *req_id,
                   const struct td_job *j);

#endif
