/* remove.h - an ended job taken off the disk and out of the table (the
 * `remove` command, `trainctl rm`).
 *
 * A job's files are its record (state_dir/jobs/<id>.json), its log
 * (<id>.log), its crash counter (<id>.starts) and its checkpoints
 * (state_dir/checkpoints/<id>/).  Removal renames the record to
 * <id>.removing first: from then on the job is gone for a restarted
 * daemon too, which finishes what a stop interrupted.  The highest id ever
 * given is kept in state_dir/jobs/last-id, so that a removed job's id is
 * never given again (scripts and logs that name job 42 mean one job).
 * The files go on libuv's threadpool, after any write of the record that
 * is under way; the reply comes once they are gone.
 */
#ifndef TD_REMOVE_H
#define TD_REMOVE_H

#include "daemon.h"

/* Loop thread: removes j (ended: the caller checked, and that no other
 * job needs its checkpoints), then sends `client` the reply to request
 * `req_id` (borrowed): ok {job, removed, freed_bytes} or an error naming
 * the file that could not be removed. */
void td_remove_job(td_daemon *d, td_job *j, uint64_t client,
                   json_t *req_id);

/* Called by td_daemon_persist_job for a job being removed, once no write
 * of its record is under way. */
void td_remove_start(td_daemon *d, td_job *j);

/* A job not yet ended whose spec names one of j's checkpoints (an
 * `extend` of j, an eval or predict of its model), or NULL. */
const td_job *td_remove_needed_by(const td_daemon *d, const td_job *j);

/* Start-up, before the loop runs and after the records are read:
 * finishes removals that a stop interrupted and gives new jobs ids above
 * every id given before. */
void td_remove_recover(td_daemon *d);
/* Start-up: a record jobs/<id>.json (at path, named name) that cannot be
 * read (why) is renamed <id>.json.corrupt, logged, and its id is never
 * given again (a new job under it would write into the old job's log and
 * checkpoint folder, and resume from its checkpoints). */
void td_remove_set_aside(td_daemon *d, const char *path, const char *name,
                         const char *why);

#endif
