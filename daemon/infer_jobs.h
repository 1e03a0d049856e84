/* infer_jobs.h - the daemon's eval and predict jobs (issue 16): what is
 * decided at submit.  See docs/daemon.md#eval-and-predict-jobs.
 *
 * An eval or predict job is a job like a training job (an id, a state, a
 * log, cancel, a place in the queue and on the one device); only its spec
 * (job/infer_spec.h) and what the trainer thread runs differ.
 */
#ifndef TD_DAEMON_INFER_JOBS_H
#define TD_DAEMON_INFER_JOBS_H

#include <stddef.h>
#include <sys/types.h>

#include "job/device.h"
#include "jobs.h"
#include "job/infer_spec.h"

struct td_daemon;

/* At submit, on a threadpool thread (settings: a copy the loop does not
 * change meanwhile; devices: the daemon's, probed at start): every path
 * absolute, readable by uid (the
 * access.c rules: opened with uid's identity; data and images also under
 * allowed_data_roots) and there; the checkpoint a traind checkpoint or
 * export (its metadata read as uid); an eval's dataset opens and its
 * classes are the model's; the device exists.  0, -EACCES (a path:
 * permission_denied) or TD_E_SPEC (invalid_spec), err naming the field.
 * t (base/tally.h; NULL: nobody watches) counts the dataset's listing and
 * rights check. */
struct td_tally;
int td_infer_job_check(const json_t *settings, const td_device_info *devices,
                       uid_t uid, const td_infer_spec *s, struct td_tally *t,
                       char *err, size_t errcap);

/* The job's task (TD_TASK_TRAIN for a training job). */
enum td_task td_job_task(const td_job *j);

/* The reason a finished eval or predict job is completed with, from its
 * result ("top-1 0.9333, top-5 1.0000 on 30 images"). */
void td_infer_job_summary(const json_t *result, enum td_task t, char *buf,
                          size_t cap);

#endif
