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
    char left_out[1600];     /* ImageFolder entries that are not samples
                                (td_dataset_left_out), or "" */
} td_job_data;

/* Not for input.source "synthetic".  0, or an error in err naming the
 * spec path (data.train, data.val, data.classes, data.val_fraction). */
struct td_fscred;
/* Files are opened as cred's user (base/fscred.h; NULL: as we are); a
 * cred with bits (a daemon that cannot switch) has every file of the
 * data checked against the user's bits instead: -EACCES naming one the
 * user may not read. */
/* That check for one opened dataset (named `path` in the spec, `key` in
 * the refusal): 0, or -EACCES naming the first file c's uid may not
 * read.  t (may be NULL) gets the stage "checking the submitter's rights
 * to KEY" and counts the files. */
struct td_tally;
int td_job_data_bits_check(const struct td_fscred *c, const td_dataset *ds,
                           const char *path, const char *key,
                           struct td_tally *t, char *err, size_t errcap);
/* t (base/tally.h; NULL: nobody watches) gets each stage ("listing
 * data.train", "checking the submitter's rights to data.val") and its
 * count, for another thread to show. */
int td_job_data_open(const td_job_spec *s, const struct td_fscred *cred,
                     struct td_tally *t, td_job_data *out, char *err,
                     size_t errcap);
/* The same, saying how far it is in job's log every 2 s ("listing
 * data.train: 534494 samples so far"), for a job's start on a big
 * dataset. */
int td_job_data_open_logged(const td_job_spec *s,
                            const struct td_fscred *cred, int64_t job,
                            td_job_data *out, char *err, size_t errcap);
void td_job_data_close(td_job_data *d);

/* Steps per epoch on synthetic input unless told otherwise (traind --run
 * --steps N; the daemon always runs this many). */
#define TD_JOB_SYNTHETIC_STEPS 100

/* How long a job's run is, counted as the runner counts it: a training
 * epoch is data.train's samples (after data.val_fraction) in whole
 * batches, its last partial batch dropped (the pipeline's drop_last), or
 * the synthetic epoch's steps. */
typedef struct td_job_size {
    size_t train;            /* samples of data.train (0: synthetic) */
    size_t held;             /* of them held out by data.val_fraction */
    int64_t steps_per_epoch;
    int64_t steps;           /* epochs x steps_per_epoch */
} td_job_size;

/* Fills z for spec s; synthetic_steps 0: TD_JOB_SYNTHETIC_STEPS
 * (runsize.c). */
void td_job_size_set(td_job_size *z, const td_job_spec *s, size_t train,
                     size_t held, int synthetic_steps);
/* The rules that need the run's length (runsize.c): a warm-up as long as
 * the run, a step schedule whose first decay comes after its end.  0, or
 * TD_E_SPEC with "path: rule" in err. */
int td_job_size_rules(const td_job_spec *s, const td_job_size *z, char *err,
                      size_t errcap);

/* Everything about a spec that can be known before it runs: its data (as
 * above), its model, built for its input and classes, and the length of
 * its run (td_job_size_rules).  models_dir: where zoo names are looked
 * up; t: as for td_job_data_open; synthetic_steps: as for
 * td_job_size_set; size (may be NULL)
 * receives the run's length when the checks pass. */
int td_job_precheck(const td_job_spec *s, const char *models_dir,
                    const struct td_fscred *cred, struct td_tally *t,
                    int synthetic_steps, td_job_size *size, char *err,
                    size_t errcap);

#endif
