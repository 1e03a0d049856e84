/* trainer.h - the daemon's trainer thread (one job at a time). */
#ifndef TD_DAEMON_TRAINER_H
#define TD_DAEMON_TRAINER_H

#include <stddef.h>
#include <stdint.h>

#include "job/runner.h"
#include "jobs.h"

struct td_daemon;
typedef struct td_trainer_slot td_trainer_slot;

/* Loop thread: starts job j on a new trainer thread.  Fails (with err)
 * when the job's spec or device cannot be used; the job then fails. */
int td_trainer_slot_start(struct td_daemon *d, td_job *j,
                          td_trainer_slot **out, char *err, size_t errcap);
/* Loop thread: requests; they take effect at the next step boundary. */
void td_trainer_slot_request(td_trainer_slot *s, enum td_stop_reason why);
void td_trainer_slot_checkpoint(td_trainer_slot *s);
void td_trainer_slot_set_workers(td_trainer_slot *s, int n);
/* Loop thread: records the next `steps` steps; the timeline comes back as
 * a TD_MSG_TRACE inbox message.  -EBUSY while one is being recorded. */
int td_trainer_slot_trace(td_trainer_slot *s, int steps);
/* Cuts a requested or running recording short (its waiter has gone). */
void td_trainer_slot_trace_cancel(td_trainer_slot *s);
int64_t td_trainer_slot_job(const td_trainer_slot *s);
/* Loop thread, after TD_MSG_DONE: joins the thread and frees the slot. */
void td_trainer_slot_join(td_trainer_slot *s);

#endif
