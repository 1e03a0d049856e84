/* retention.h - ended jobs removed once they are older than the setting
 * ended_job_retention_days (0, the default: kept until `trainctl rm`).
 *
 * A daemon that runs for months keeps every ended job's record, log and
 * checkpoints; its disk fills.  With the setting, an ended job (completed,
 * failed or cancelled) whose end is more than that many days ago is
 * removed as `trainctl rm` removes it (remove.h), except one whose
 * checkpoint a job not yet ended reads (an extend, an eval).  Looked at
 * once an hour, at start and when the setting changes; at most
 * TD_RETENTION_PER_SWEEP jobs a time, the rest a few seconds later.
 */
#ifndef TD_RETENTION_H
#define TD_RETENTION_H

#include "daemon.h"

#define TD_RETENTION_PER_SWEEP 32

/* Loop thread, from the daemon's status timer (every 2 s): sweeps when one
 * is due.  Returns the jobs whose removal it started. */
int td_retention_tick(td_daemon *d);
/* The next tick sweeps (the setting changed, the daemon started). */
void td_retention_due(td_daemon *d);

#endif
