/* joblog.h - the per-job log files (state_dir/jobs/<id>.log) and their
 * `log` events.
 *
 * Every log line about a job goes through td_joblog_sink (the log sink):
 * appended to the job's log file and posted as a `log` event.  Two things
 * stand between the line and the file:
 *
 * - Repetition: lines of one kind (the message with its numbers masked:
 *   "checkpoint at step # written: ...", "epoch #/#: ...") are written
 *   the first TD_JOBLOG_BURST times in a minute; the rest of that minute
 *   are held back and counted, and one line says how many there were and
 *   gives the latest ("... and N more like this in the last 60 s; the
 *   latest: ...") when the minute is over, at the job's next state or when
 *   kinds crowd it out.  "bad sample" lines are never held back: each
 *   names a different sample, once (lib/input/pipeline.c), and the job
 *   fails past max_bad_ratio, so they are bounded.
 * - A file that cannot be written (a full or read-only disk): its lines
 *   are kept in memory, at most TD_JOBLOG_KEEP per job (later ones are
 *   counted), written at the job's next line or the next tick once the file
 *   can be written again, followed by a line saying how many were lost.
 *   `logs` shows the kept lines meanwhile (td_joblog_unwritten).
 *
 * The daemon's own log (stderr, the journal) keeps every line either way.
 * Thread-safe: one mutex; the file is opened and appended to per line.
 */
#ifndef TD_JOBLOG_H
#define TD_JOBLOG_H

#include <stdint.h>

#include <jansson.h>

struct td_daemon;

#define TD_JOBLOG_BURST 10   /* lines of one kind a minute, per job */
#define TD_JOBLOG_KEEP 1000  /* unwritten lines kept per job */

typedef struct td_joblog td_joblog;

td_joblog *td_joblog_new(struct td_daemon *d);
/* Writes what it can; says in the daemon's log which lines are lost. */
void td_joblog_free(td_joblog *l);
/* The log sink (td_log_set_sink); user is the td_daemon. */
void td_joblog_sink(void *user, int level, long job, const char *line);
/* Loop thread, every few seconds: writes kept lines, ends the minutes of
 * held-back kinds, forgets jobs quiet for a while. */
void td_joblog_tick(td_joblog *l);
/* A job's held-back lines said now (before its state line: the job
 * stopped, ended or was paused). */
void td_joblog_settle(td_joblog *l, int64_t job);
/* The job's lines not yet in its file (a new array of strings). */
json_t *td_joblog_unwritten(td_joblog *l, int64_t job);
/* The job was removed: its kept lines go. */
void td_joblog_forget(td_joblog *l, int64_t job);

#endif
