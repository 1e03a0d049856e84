/* jobcheck.c - see jobcheck.h.  Owns the order of the checks a job gets
 * before it runs; each check is its module's (device.c, precision.c,
 * finetune.c, jobdata.c, runsize.c). */
#include "job/jobcheck.h"

#include <errno.h>
#include <stdio.h>

#include "base/fscred.h"
#include "job/finetune.h"
#include "job/precision.h"

int td_job_check(const td_job_spec *s, const td_job_check_opts *o,
                 td_job_checked *out, char *err, size_t errcap)
{
    char e[512];
    td_fscred_saved saved;
    int rc;
    /* the device now, not when the job starts: a cuda job where there is
     * no usable GPU would wait in the queue (or build its data) to fail */
    if ((rc = td_device_select(s->device, o->devices, &out->device, e,
                               sizeof e))) {
        snprintf(err, errcap, "device: %s", e);
        return rc;
    }
    if ((rc = td_precision_check_job(s, o->devices, err, errcap)))
        return rc;
    /* init's file, freeze and lr_mult against the model, read as the
     * user */
    if (td_fscred_enter(o->cred, &saved)) {
        snprintf(err, errcap, "init: cannot read as uid %u",
                 o->cred ? (unsigned)o->cred->uid : 0u);
        return -EACCES;
    }
    rc = td_job_check_init(s, o->models_dir, err, errcap);
    td_fscred_leave(&saved);
    if (rc)
        return rc;
    /* classes, labels, the model and the run's length: the datasets
     * opened as the trainer will */
    return td_job_precheck(s, o->models_dir, o->cred, o->tally,
                           o->synthetic_steps,
                           &out->size, err, errcap);
}

void td_job_device_name(const td_device_choice *ch, char *out, size_t cap)
{
    if (ch->kind == TD_DEVICE_CUDA)
        snprintf(out, cap, "cuda:%d", ch->index);
    else
        snprintf(out, cap, "cpu");
}
