/* infer_jobs.c - eval and predict jobs: the submit-time checks (see
 * infer_jobs.h).
 *
 * Owns: deciding at submit whether an eval or predict spec can run.
 * Runs on the loop thread and, like training's checks (access.c,
 * jobdata.c), reads only as the submitter.  Never: reads image pixels or
 * weights (the trainer thread does, when the job runs), or leaves the
 * loop thread in another user's identity.
 */
#include "infer_jobs.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "access.h"
#include "base/error.h"
#include "base/fscred.h"
#include "base/tally.h"
#include "bounds.h"
#include "daemon.h"
#include "input/dataset.h"
#include "job/device.h"
#include "job/jobdata.h"
#include "job/modelmeta.h"
#include "store/checkpoint.h"

enum td_task td_job_task(const td_job *j)
{
    enum td_task t;
    if (j->shed) /* its spec is on disk only (ended.h) */
        return (enum td_task)j->shed_task;
    if (td_spec_task(j->spec, &t, NULL, 0))
        return TD_TASK_TRAIN;
    return t;
}

/* The checkpoint's metadata and, for an eval, the dataset's classes
 * against the model's: both read as the submitter. */
static int td__check_files(uid_t uid, const td_infer_spec *s,
                           const json_t *settings, td_tally *t, char *err,
                           size_t errcap)
{
    td_fscred_saved saved;
    td_ckpt_file *f = NULL;
    td_dataset *ds = NULL;
    td_model_meta meta;
    char e[600];
    int rc, have_meta = 0;
    if (td_access_enter(uid, &saved)) {
        snprintf(err, errcap, "checkpoint: cannot read as uid %u",
                 (unsigned)uid);
        return -EACCES;
    }
    /* Read whole, here and when the job starts (bounds.h). */
    if ((rc = td_limits_check_file_size(settings, "checkpoint",
                                        s->checkpoint, err, errcap)))
        goto out;
    if ((rc = td_st_open(s->checkpoint, &f, e, sizeof e))) {
        snprintf(err, errcap, "checkpoint: %.1000s is not a safetensors "
                 "file traind can read: %s", s->checkpoint, e);
        rc = TD_E_SPEC;
        goto out;
    }
    if ((rc = td_model_meta_read(f, &meta, e, sizeof e))) {
        snprintf(err, errcap, "checkpoint: %.1000s is not a traind "
                 "checkpoint or export (%s); trainctl export writes one",
                 s->checkpoint, e);
        rc = TD_E_SPEC;
        goto out;
    }
    have_meta = 1;
    if (s->task != TD_TASK_EVAL)
        goto out;
    td_tally_stage(t, "listing data", "samples", 0);
    if ((rc = td_dataset_open_tally(s->data, t, &ds, e, sizeof e))) {
        snprintf(err, errcap, "data: %s", e);
        rc = TD_E_SPEC;
        goto out;
    }
    /* A daemon that cannot switch read it as itself: every file of it
     * must pass uid's bits (jobdata.h), not only the path named. */
    td_fscred bits;
    if (td_fscred_for_reader(uid, &bits, err, errcap)) {
        rc = -EACCES; /* no identity to check them for */
        goto out;
    }
    if (bits.bits && (rc = td_job_data_bits_check(&bits, ds, s->data, "data",
                                                  t, err, errcap)))
        goto out;
    int dk = td_dataset_classes(ds);
    if (dk > meta.classes) {
        snprintf(err, errcap, "data: %.1000s has %d classes, the model %d",
                 s->data, dk, meta.classes);
        rc = TD_E_SPEC;
        goto out;
    }
    for (int k = 0; k < dk; k++) {
        const char *n = td_dataset_class_name(ds, k);
        if (n && strcmp(n, meta.class_names[k]) != 0) {
            snprintf(err, errcap, "data: %.1000s: class %d is \"%.100s\", "
                     "the model's class %d is \"%.100s\"", s->data, k, n, k,
                     meta.class_names[k]);
            rc = TD_E_SPEC;
            goto out;
        }
    }
out:
    td_dataset_close(ds);
    if (have_meta)
        td_model_meta_free(&meta);
    td_ckpt_close(f);
    td_fscred_leave(&saved);
    return rc;
}

int td_infer_job_check(const json_t *settings, const td_device_info *devices,
                       uid_t uid, const td_infer_spec *s, td_tally *t,
                       char *err, size_t errcap)
{
    const json_t *roots = json_object_get(settings, "allowed_data_roots");
    td_device_choice ch;
    char e[512];
    int rc;
    if (td_device_select(s->device, devices, &ch, e, sizeof e)) {
        snprintf(err, errcap, "device: %s", e);
        return TD_E_SPEC;
    }
    const char *ck = s->checkpoint;
    if ((rc = td_access_check_paths(uid, "checkpoint", 0, &ck, 1, NULL, err,
                                    errcap)))
        return rc;
    if (s->task == TD_TASK_EVAL) {
        const char *data = s->data;
        if ((rc = td_access_check_paths(uid, "data", 0, &data, 1, roots, err,
                                        errcap)))
            return rc;
    } else if ((rc = td_access_check_paths(
                    uid, "images", 1, (const char *const *)s->images,
                    s->n_images, roots, err, errcap))) {
        return rc;
    }
    return td__check_files(uid, s, settings, t, err, errcap);
}

void td_infer_job_summary(const json_t *r, enum td_task t, char *buf,
                          size_t cap)
{
    long long n;
    if (t == TD_TASK_EVAL) {
        n = json_integer_value(json_object_get(r, "samples"));
        if (json_array_size(json_object_get(r, "per_class")) > 5)
            snprintf(buf, cap, "top-1 %.4f, top-5 %.4f on %lld image%s",
                     json_number_value(json_object_get(r, "top1")),
                     json_number_value(json_object_get(r, "top5")), n,
                     n == 1 ? "" : "s");
        else /* top-5 of 5 classes or fewer is always 1, as in eval's text */
            snprintf(buf, cap, "top-1 %.4f on %lld image%s",
                     json_number_value(json_object_get(r, "top1")), n,
                     n == 1 ? "" : "s");
        return;
    }
    n = json_integer_value(json_object_get(r, "images"));
    long long bad = json_integer_value(json_object_get(r, "failed"));
    if (bad)
        snprintf(buf, cap, "predicted %lld of %lld image%s; %lld could not "
                 "be read", n - bad, n, n == 1 ? "" : "s", bad);
    else
        snprintf(buf, cap, "predicted %lld image%s", n, n == 1 ? "" : "s");
}
