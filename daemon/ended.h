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
/* The row cache: state_dir/job-rows.cache holds the list row of every
 * ended job whose record is on disk, with the record file's size, mtime
 * and inode as the row was taken.  Start-up takes a row from it instead
 * of parsing the record (~70 records of 200 KB a second: a minute for
 * 4,000 jobs) when the file is unchanged; anything else (no cache, a
 * stale or odd entry) reads the record as before.  Only start-up's speed
 * depends on it. */
#define TD_ENDED_CACHE_FILE "job-rows.cache"
#define TD_ENDED_CACHE_FORMAT "traind-job-rows-1"
/* Writes the cache for every ended job on disk (at shutdown, and after a
 * start-up that read records in full); *rows (may be NULL): how many.  0,
 * or -errno with a warning logged (and any older cache removed). */
int td_ended_cache_save(struct td_daemon *d, size_t *rows);
/* The cache's rows (keyed by record file name), or NULL (none, or not
 * one: warned). */
json_t *td_ended_cache_load(const char *state_dir);
/* A shed job built from the cache's entry for record file `name` (in the
 * directory dirfd) of job id, or NULL when there is none or the file
 * changed since. */
struct td_job *td_ended_cache_take(json_t *cache, int dirfd,
                                   const char *name, int64_t id);
/* `show` of a shed job: replies to client c (request id req_id, borrowed)
 * with the record read from disk, named as in memory. */
void td_ended_show(struct td_client *c, json_t *req_id,
                   const struct td_job *j);

#endif
