/* watch.h - following a job's events live (trainctl watch, submit
 * --follow, logs -f). */
#ifndef TD_CLIENT_WATCH_H
#define TD_CLIENT_WATCH_H

#include <stdint.h>

#include "conn.h"

/* Subscribes to job's events on c and renders them until the job reaches
 * a final state.  json: print each event as a JSON line.  Returns 0 if the
 * job completed, 1 if it failed or was cancelled, 3 if the connection
 * broke. */
int td_watch_job(td_conn *c, int64_t job, int json, int quiet_header);

void td_fmt_age(double seconds, char *buf, size_t cap);
/* "812 bytes", "3.4 kB", "1.5 MB", "2.0 GB" (powers of 1000). */
void td_fmt_bytes(double bytes, char *buf, size_t cap);
/* "val_acc 0.9105  val_loss 0.2512" from an epoch record, or "no
 * validation set" when it has none (val_acc null). */
void td_fmt_val(const json_t *epoch, char *buf, size_t cap);

#endif
