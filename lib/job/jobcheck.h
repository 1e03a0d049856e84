/* jobcheck.h - the checks a training job gets before it runs: the same
 * function, so the same refusals in the same words, for the daemon's
 * `submit` (daemon/commands.c) and `traind --run` (daemon/run.c).
 *
 * In order: the device is there (td_device_select), it can compute the
 * job's precision (precision.h), init, freeze and lr_mult fit the model
 * (finetune.h), and the data, the model and the run's length
 * (td_job_precheck, jobdata.h).  The spec itself is parsed before
 * (td_spec_parse); what only the daemon knows stays in the daemon: who
 * may read what (access.h), its memory limits (bounds.h), its queue.
 */
#ifndef TD_JOB_JOBCHECK_H
#define TD_JOB_JOBCHECK_H

#include <stddef.h>

#include "job/device.h"
#include "job/jobdata.h"
#include "job/spec.h"

struct td_fscred;

typedef struct td_job_check_opts {
    const td_device_info *devices; /* as probed (td_device_probe) */
    const char *models_dir;        /* where zoo names are looked up */
    const struct td_fscred *cred;  /* read files as (NULL: as we are) */
    int synthetic_steps;           /* 0: TD_JOB_SYNTHETIC_STEPS */
    struct td_tally *tally;        /* how far the data's checks are, for
                                      another thread (NULL: nobody) */
} td_job_check_opts;

typedef struct td_job_checked {
    td_device_choice device;       /* where the job would run */
    td_job_size size;              /* the run's length */
} td_job_checked;

/* 0 with out filled, or an error with "path: rule" in err: -EACCES when
 * cred cannot take on the user's identity, else the check's own code. */
int td_job_check(const td_job_spec *s, const td_job_check_opts *o,
                 td_job_checked *out, char *err, size_t errcap);

/* "cuda:N" or "cpu": the choice as lib/job/runner.h's device. */
void td_job_device_name(const td_device_choice *ch, char *out, size_t cap);

#endif
