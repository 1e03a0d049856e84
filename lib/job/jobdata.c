/* jobdata.c - see jobdata.h.  Owns opening, aligning and splitting a
 * job's datasets, and the bits check of their files for a daemon that
 * cannot take on the submitter's identity; never reads a sample's
 * bytes. */
#include "job/jobdata.h"

#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/error.h"
#include "base/fscred.h"
#include "base/log.h"
#include "base/tally.h"
#include "input/classes.h"
#include "model/model.h"

static int td__open(const td_spec_paths *p, const char *key, td_tally *t,
                    td_dataset **ds, char *err, size_t errcap)
{
    char e[512];
    int rc;
    if (p->n > 1) {
        snprintf(err, errcap, "%s: lists of several paths are not supported "
                 "yet; name a directory of shards or a glob", key);
        return TD_E_SPEC;
    }
    td_tally_stage(t, strcmp(key, "data.val") == 0 ? "listing data.val"
                                                   : "listing data.train",
                   "samples", 0);
    if ((rc = td_dataset_open_tally(p->v[0], t, ds, e, sizeof e)) ||
        (rc = td_classes_attach(*ds, p->v[0], e, sizeof e))) {
        snprintf(err, errcap, "%s: %s", key, e[0] ? e : td_strerror(rc));
        td_dataset_close(*ds);
        *ds = NULL;
    }
    return rc;
}

/* Holds out val_fraction of train (both opened from data.train). */
static int td__split(const td_job_spec *s, td_job_data *d, char *err,
                     size_t errcap)
{
    size_t n = td_dataset_count(d->train);
    uint8_t *mark = malloc(n ? n : 1), *keep = malloc(n ? n : 1);
    int rc = mark && keep ? td_classes_split(d->train, s->data.val_fraction,
                                             s->seed, mark)
                          : -ENOMEM;
    if (!rc) {
        for (size_t i = 0; i < n; i++)
            keep[i] = !mark[i];
        td_dataset_keep(d->train, keep);
        td_dataset_keep(d->val, mark);
        if (td_dataset_count(d->val) == 0) {
            snprintf(err, errcap, "data.val_fraction: %g of %zu samples "
                     "holds out none", s->data.val_fraction, n);
            rc = TD_E_SPEC;
        } else {
            snprintf(d->note, sizeof d->note, "data.val_fraction %g: %zu of "
                     "%zu samples held out for validation (stratified by "
                     "class, seed %llu)", s->data.val_fraction,
                     td_dataset_count(d->val), n,
                     (unsigned long long)s->seed);
        }
    }
    free(mark);
    free(keep);
    return rc;
}

static int td__data_open(const td_job_spec *s, td_tally *t, td_job_data *d,
                         char *err, size_t errcap);

/* An ImageFolder's entries that are not samples, for the job's log: a
 * .webp or a subfolder left out without a word looked like a smaller
 * data set, or a class with fewer photos than the user put in it. */
static void td__note_left_out(td_job_data *d, const char *key,
                              const td_dataset *ds)
{
    const char *first;
    char text[800];
    size_t n = td_dataset_left_out(ds, &first), used = strlen(d->left_out);
    if (n == 0 || used >= sizeof d->left_out - 1)
        return;
    td_dataset_left_out_text(n, first, text, sizeof text);
    snprintf(d->left_out + used, sizeof d->left_out - used, "%s%s: %s%s",
             used ? "; " : "", key, text,
             n > 1 ? " (trainctl pack --imagefolder names them all)" : "");
}

/* One file for the bits check: its folder (resolved and checked once for
 * a run of files in the same folder) and then the file itself, in full
 * when it is a symlink.  1 when c's uid may read it. */
static int td__file_ok(const td_fscred *c, const char *f, char *dir,
                       size_t dircap)
{
    char real[PATH_MAX], d[PATH_MAX];
    const char *slash = strrchr(f, '/');
    size_t dl = slash ? (size_t)(slash - f) : 0;
    struct stat st;
    if (!slash || dl >= sizeof d || lstat(f, &st) != 0 || S_ISLNK(st.st_mode))
        return realpath(f, real) && td_fscred_bits_ok(c, real, 0);
    memcpy(d, f, dl);
    d[dl] = '\0';
    if (strcmp(d, dir) != 0) {
        if (!realpath(dl ? d : "/", real) || !td_fscred_bits_ok(c, real, 1))
            return 0;
        snprintf(dir, dircap, "%s", d);
    }
    return td_fscred_mode_ok(c, &st, 4);
}

/* A daemon that cannot take on the submitter's identity (cred->bits)
 * opened the data with its own rights: every file it read or will read
 * for the job (each sample's file or shard, a classes file) must be one
 * the bits let the submitter read, not only the path the user named. */
int td_job_data_bits_check(const td_fscred *c, const td_dataset *ds,
                           const char *path, const char *key, td_tally *t,
                           char *err, size_t errcap)
{
    char f[4200], dir[PATH_MAX] = "", last[4200] = "";
    struct stat st;
    /* the stage a tally shows: static text, one per key */
    static const char *const stage[][2] = {
        {"data.train", "checking the submitter's rights to data.train"},
        {"data.val", "checking the submitter's rights to data.val"},
        {"data", "checking the submitter's rights to data"}};
    for (size_t k = 0; k < sizeof stage / sizeof stage[0]; k++)
        if (strcmp(key, stage[k][0]) == 0)
            td_tally_stage(t, stage[k][1], "files", td_dataset_count(ds));
    if (td_dataset_kind(ds) == TD_DATASET_SHARDS) {
        td_classes_file(path, f, sizeof f);
        if (lstat(f, &st) == 0 && !td__file_ok(c, f, dir, sizeof dir))
            goto deny;
    }
    for (size_t i = 0, n = td_dataset_count(ds); i < n; i++) {
        td_dataset_file(ds, i, f, sizeof f);
        td_tally_add(t, 1);
        if (strcmp(f, last) == 0)
            continue; /* the same shard */
        if (!td__file_ok(c, f, dir, sizeof dir))
            goto deny;
        snprintf(last, sizeof last, "%s", f);
    }
    return 0;
deny:
    snprintf(err, errcap, "%s: %.1000s is not readable by uid %u", key, f,
             (unsigned)c->uid);
    return -EACCES;
}

int td_job_data_open(const td_job_spec *s, const td_fscred *cred,
                     td_tally *t, td_job_data *d, char *err, size_t errcap)
{
    td_fscred_saved saved;
    memset(d, 0, sizeof *d);
    int rc = td_fscred_enter(cred, &saved);
    if (rc) {
        snprintf(err, errcap, "data.train: cannot read as uid %u: %s",
                 cred ? (unsigned)cred->uid : 0u, td_strerror(rc));
        return rc;
    }
    rc = td__data_open(s, t, d, err, errcap);
    td_fscred_leave(&saved);
    if (rc == 0 && cred && cred->bits && !cred->set) {
        rc = td_job_data_bits_check(cred, d->train, s->data.train.v[0],
                                    "data.train", t, err, errcap);
        if (rc == 0 && s->data.val.n)
            rc = td_job_data_bits_check(cred, d->val, s->data.val.v[0],
                                        "data.val", t, err, errcap);
        if (rc)
            td_job_data_close(d);
    }
    return rc;
}

static int td__data_open(const td_job_spec *s, td_tally *t, td_job_data *d,
                         char *err, size_t errcap)
{
    int rc;
    if ((rc = td__open(&s->data.train, "data.train", t, &d->train, err,
                       errcap)))
        return rc;
    td__note_left_out(d, "data.train", d->train);
    if (s->data.val.n) {
        char note[400];
        if ((rc = td__open(&s->data.val, "data.val", t, &d->val, err, errcap)) ||
            (rc = td_classes_align(d->train, d->val, note, sizeof note, err,
                                   errcap)))
            goto fail;
        td__note_left_out(d, "data.val", d->val);
        if (note[0])
            snprintf(d->note, sizeof d->note, "data.val: %s", note);
    } else if (s->data.val_fraction > 0) {
        if ((rc = td__open(&s->data.train, "data.train", t, &d->val, err,
                           errcap)) ||
            (rc = td__split(s, d, err, errcap)))
            goto fail;
    }
    int have = td_dataset_classes(d->train);
    d->classes = s->data.classes > 0 ? s->data.classes : have;
    if (have > d->classes) {
        const char *last = td_dataset_class_name(d->train, have - 1);
        snprintf(err, errcap, "data.classes: %d, but data.train has %d "
                 "classes (labels up to %d%s%s%s)", d->classes, have,
                 have - 1, last ? ", '" : "", last ? last : "",
                 last ? "'" : "");
        rc = TD_E_SPEC;
        goto fail;
    }
    return 0;
fail:
    td_job_data_close(d);
    return rc;
}

/* A job's log line every 2 s of a long listing or rights check (at a
 * job's start it is what `trainctl watch` shows). */
static void td__log_tick(td_tally *t, void *user)
{
    td_tally_seen v = td_tally_read(t);
    char total[32] = "";
    if (v.total)
        snprintf(total, sizeof total, " of %llu",
                 (unsigned long long)v.total);
    td_logf(TD_LOG_INFO, *(const int64_t *)user, "%s: %llu%s %s so far",
            v.stage, (unsigned long long)v.done, total, v.unit);
}

int td_job_data_open_logged(const td_job_spec *s, const td_fscred *cred,
                            int64_t job, td_job_data *d, char *err,
                            size_t errcap)
{
    td_tally t = {.tick = td__log_tick, .tick_user = &job,
                  .tick_every_ns = 2 * TD_NS_PER_S};
    return td_job_data_open(s, cred, &t, d, err, errcap);
}

void td_job_data_close(td_job_data *d)
{
    td_dataset_close(d->train);
    td_dataset_close(d->val);
    d->train = d->val = NULL;
}

int td_job_precheck(const td_job_spec *s, const char *models_dir,
                    const td_fscred *cred, td_tally *t, int synthetic_steps,
                    td_job_size *size, char *err, size_t errcap)
{
    td_job_data d = {0};
    int rc, classes = s->data.classes > 0 ? s->data.classes : 10;
    int files = s->input.source != TD_SOURCE_SYNTHETIC;
    size_t ntrain = 0, held = 0;
    if (files) {
        if ((rc = td_job_data_open(s, cred, t, &d, err, errcap)))
            return rc;
        classes = d.classes;
        ntrain = td_dataset_count(d.train);
        held = s->data.val_fraction > 0 ? td_dataset_count(d.val) : 0;
        td_job_data_close(&d);
    }
    td_shape in = {s->input.channels, s->input.size[0], s->input.size[1]};
    td_model *m = NULL;
    char e[512];
    td_fscred_saved saved;
    if (json_is_string(s->model)) { /* a .json path is the user's file */
        if ((rc = td_fscred_enter(cred, &saved)))
            return rc;
        rc = td_model_load(models_dir ? models_dir : ".",
                           json_string_value(s->model), in, classes, &m, e,
                           sizeof e);
        td_fscred_leave(&saved);
    } else {
        rc = td_model_build(s->model, in, classes, &m, e, sizeof e);
    }
    if (rc)
        snprintf(err, errcap, "%s", e);
    td_model_free(m);
    /* A training epoch drops its last partial batch (the pipeline's
     * drop_last): with fewer samples than a batch no step runs, and the
     * job failed when it started. */
    if (rc == 0 && files && ntrain < (size_t)s->batch_size) {
        char why[160] = "";
        if (held)
            snprintf(why, sizeof why, " (after data.val_fraction %g holds "
                     "out %zu)", s->data.val_fraction, held);
        snprintf(err, errcap, "batch_size: %d is more than the %zu samples "
                 "of data.train%s: a training epoch drops its last partial "
                 "batch, so no step would run", s->batch_size, ntrain, why);
        rc = TD_E_SPEC;
    }
    if (rc == 0) { /* the schedule against the run's length */
        td_job_size z;
        td_job_size_set(&z, s, ntrain, held, synthetic_steps);
        rc = td_job_size_rules(s, &z, err, errcap);
        if (rc == 0 && size)
            *size = z;
    }
    return rc;
}
