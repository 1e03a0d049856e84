/* finetune.c - a job's `init` and `freeze` (see finetune.h).
 * Owns: the matching rules and the report.  Never: touches a device.
 */
#include "job/finetune.h"

#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "store/checkpoint.h"
#include "store/weights.h"

static int td__matches(const td_model *m, const char *pattern)
{
    for (int p = 0; p < m->nparams; p++)
        if (fnmatch(pattern, m->params[p].name, 0) == 0)
            return 1;
    return 0;
}

int td_job_lr_mult(const td_model *m, const td_job_spec *s, float **out,
                   char *err, size_t errcap)
{
    const char *key;
    json_t *v;
    *out = NULL;
    if (s->freeze.n == 0 && json_object_size(s->lr_mult) == 0)
        return 0;
    for (int i = 0; i < s->freeze.n; i++)
        if (!td__matches(m, s->freeze.v[i])) {
            snprintf(err, errcap, "freeze[%d]: \"%s\" matches no parameter "
                     "of the model (names look like \"%s\"; see "
                     "docs/checkpoints.md)", i, s->freeze.v[i],
                     m->params[0].name);
            return TD_E_SPEC;
        }
    json_object_foreach((json_t *)s->lr_mult, key, v) {
        if (!td__matches(m, key)) {
            snprintf(err, errcap, "lr_mult.%s: matches no parameter of the "
                     "model (names look like \"%s\")", key,
                     m->params[0].name);
            return TD_E_SPEC;
        }
    }
    float *mult = malloc((size_t)m->nparams * sizeof *mult);
    if (!mult)
        return -ENOMEM;
    for (int p = 0; p < m->nparams; p++) {
        const char *name = m->params[p].name;
        mult[p] = 1.0f;
        json_object_foreach((json_t *)s->lr_mult, key, v) {
            if (fnmatch(key, name, 0) == 0)
                mult[p] *= (float)json_number_value(v);
        }
        for (int i = 0; i < s->freeze.n; i++)
            if (fnmatch(s->freeze.v[i], name, 0) == 0)
                mult[p] = 0.0f;
    }
    *out = mult;
    return 0;
}

int td_job_bn_eval(const td_model *m, const td_job_spec *s,
                   const float *mult, uint8_t **out, char *err,
                   size_t errcap)
{
    *out = NULL;
    if (!s->freeze_bn_stats)
        return 0;
    uint8_t *bn = calloc((size_t)m->nlayers, 1);
    int any = 0;
    if (!bn)
        return -ENOMEM;
    for (int L = 0; mult && L < m->nlayers; L++) {
        const td_layer *l = &m->layers[L];
        if (l->kind == TD_L_BN && l->param0 >= 0 && mult[l->param0] == 0 &&
            mult[l->param0 + 1] == 0)
            any = bn[L] = 1;
    }
    if (!any) {
        free(bn);
        snprintf(err, errcap, "freeze_bn_stats: no batch norm of the model "
                 "has both its weight and bias frozen (by freeze or an "
                 "lr_mult of 0), so none would keep its statistics");
        return TD_E_SPEC;
    }
    *out = bn;
    return 0;
}

/* Names of the model's tensors present in f with another shape or dtype,
 * comma-separated into out. */
static void td__reshaped(const td_model *m, const td_ckpt_file *f, char *out,
                         size_t cap)
{
    size_t at = 0;
    out[0] = '\0';
    for (int p = 0; p < m->nparams && at < cap; p++) {
        const td_param *pr = &m->params[p];
        const td_ckpt_tensor *t = td_ckpt_file_find(f, pr->name);
        int same = t && t->dtype == TD_DT_F32 && t->ndim == pr->ndims;
        for (int d = 0; same && d < pr->ndims; d++)
            same = t->shape[d] == pr->dims[d];
        if (t && !same)
            at += (size_t)snprintf(out + at, cap - at, "%s%s", at ? ", " : "",
                                   pr->name);
    }
}

int td_job_init_weights(const td_model *m, const char *path, float *params,
                        float *state, char *report, size_t repcap,
                        char *err, size_t errcap)
{
    td_ckpt_file *f;
    td_weights_report rep;
    char e[600], names[600];
    int rc = td_st_open(path, &f, e, sizeof e);
    if (rc) {
        snprintf(err, errcap, "init: %s", e);
        return TD_E_SPEC;
    }
    rc = td_weights_load(m, f, 0, params, state, &rep, e, sizeof e);
    td__reshaped(m, f, names, sizeof names);
    td_ckpt_close(f);
    if (rc) {
        snprintf(err, errcap, "init: %s: %s", path, e);
        return rc;
    }
    if (rep.loaded == 0) {
        snprintf(err, errcap, "init: %s: no tensor is named like a "
                 "parameter of the model (it has e.g. \"%s\")", path,
                 m->params[0].name);
        return TD_E_SPEC;
    }
    snprintf(report, repcap, "init from %s: %d tensors loaded, %d "
             "re-initialised%s%s%s, %d not in the file, %d ignored", path,
             rep.loaded, rep.reshaped, names[0] ? " (shape differs: " : "",
             names, names[0] ? ")" : "", rep.missing, rep.ignored);
    return 0;
}

int td_job_check_init(const td_job_spec *s, const char *models_dir,
                      char *err, size_t errcap)
{
    td_model *m = NULL;
    td_shape in = {s->input.channels, s->input.size[0], s->input.size[1]};
    int classes = s->data.classes ? s->data.classes : 2, rc;
    char e[512];
    float *mult = NULL;
    if (s->init.n == 0 && s->freeze.n == 0 &&
        json_object_size(s->lr_mult) == 0 && !s->freeze_bn_stats)
        return 0;
    if (s->init.n > 1) {
        snprintf(err, errcap, "init: one file, not %d", s->init.n);
        return TD_E_SPEC;
    }
    if (json_is_string(s->model))
        rc = td_model_load(models_dir, json_string_value(s->model), in,
                           classes, &m, e, sizeof e);
    else
        rc = td_model_build(s->model, in, classes, &m, e, sizeof e);
    if (rc) {
        snprintf(err, errcap, "%s", e);
        return rc;
    }
    uint8_t *bn = NULL;
    if ((rc = td_job_lr_mult(m, s, &mult, err, errcap)) == 0)
        rc = td_job_bn_eval(m, s, mult, &bn, err, errcap);
    free(bn);
    if (rc == 0 && s->init.n) {
        float *p = malloc((m->param_count + 1) * sizeof *p);
        float *st = malloc((td_model_state_count(m) + 1) * sizeof *st);
        char rep[1024];
        rc = p && st ? td_job_init_weights(m, s->init.v[0], p, st, rep,
                                           sizeof rep, err, errcap)
                     : -ENOMEM;
        free(p);
        free(st);
    }
    free(mult);
    td_model_free(m);
    return rc;
}
