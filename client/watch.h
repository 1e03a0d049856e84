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

#endif
