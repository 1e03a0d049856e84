/* starts.h - crash-loop guard: how often a job was started without
 * reaching a checkpoint (issue 17, item 3).
 *
 * state_dir/jobs/<id>.starts holds a count.  The trainer thread raises it
 * (durably) before it builds a job and removes it when the job writes a
 * checkpoint or its thread ends normally, so after a kill -9 the count
 * says how many daemon lives in a row died while this job ran with no
 * progress kept.  At start-up a job found running with a count of
 * max_crash_restarts or more is failed instead of started again.
 * Never: called on the loop thread after start-up (it fsyncs).
 */
#ifndef TD_STARTS_H
#define TD_STARTS_H

#include <stdint.h>

/* The count after raising it, or -errno. */
int td_starts_raise(const char *state_dir, int64_t job);
/* The count (0 when there is no file). */
int td_starts_count(const char *state_dir, int64_t job);
void td_starts_clear(const char *state_dir, int64_t job);

#endif
