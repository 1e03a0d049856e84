/* jobdata.h - a job's datasets as training will see them, and the checks
 * that can be made before it starts (issue 18).
 *
 * Opens data.train (with the class names of classes.txt for shards), then
 * data.val mapped onto train's classes by name, or, with
 * data.val_fraction, a held-out part of data.train (stratified by class,
 * chosen by the job's seed, the same on every run and resume).  Checks
 * the labels against data.classes.  td_job_precheck adds the model:
 * built for the input and the classes, so that a head of the wrong width
 * is refused at submit, not hours later when the job starts.
 */
#ifndef TD_JOB_JOBDATA_H
#define TD_JOB_JOBDATA_H

#include <stddef.h>

#include "input/dataset.h"
#include "job/spec.h"

typedef struct td_job_data {
    td_dataset *train, *val; /* val NULL: no validation */
    int classes;             /* what the model's head must output */
    char note[512];          /* classes missing from val, the split; or "" */
} td_job_data;

/* Not for input.source "synthetic".  0, or an error in err naming the
 * spec path (data.train, data.val, data.classes, data.val_fraction). */
struct td_fscred;
/* Files are opened as cred's user (base/fscred.h; NULL: as we are). */
int td_job_data_open(const td_job_spec *s, const struct td_fscred *cred,
                     td_job_data *out, char *err, size_t errcap);
void td_job_data_close(td_job_data *d);

/* Everything about a spec that can be known before it runs: its data (as
 * above) and its model, built for its input and classes.  models_dir:
 * where zoo names are looked up. */
int td_job_precheck(const td_job_spec *s, const char *models_dir,
                    const struct td_fscred *cred, char *err, size_t errcap);

#endif
