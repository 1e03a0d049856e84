/* weights.c - a model's tensors by name, in and out of safetensors files
 * (see weights.h).
 *
 * Owns: the name matching and its report; the layout of a weights file
 * (parameters in model order, then state, then the int64 counters).
 * Never: reinterprets a tensor of another dtype or shape, or writes
 * anything but the file it is given.
 */
#include "store/weights.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

void td_weights_bn_count_name(const td_model *m, int L, char *out,
                              size_t cap)
{
    snprintf(out, cap, "%s.num_batches_tracked", m->layers[L].name);
}

int td_weights_bn_layers(const td_model *m)
{
    int n = 0;
    for (int L = 1; L < m->nlayers; L++)
        n += m->layers[L].kind == TD_L_BN;
    return n;
}

static int td__same_shape(const td_ckpt_tensor *t, int nd, const int *dims)
{
    if (t->dtype != TD_DT_F32 || t->ndim != nd)
        return 0;
    for (int d = 0; d < nd; d++)
        if (t->shape[d] != dims[d])
            return 0;
    return 1;
}

static void td__shape_str(const td_ckpt_tensor *t, char *out, size_t cap)
{
    size_t at = (size_t)snprintf(out, cap, "%s [", td_dtype_name(t->dtype));
    for (int d = 0; d < t->ndim && at < cap; d++)
        at += (size_t)snprintf(out + at, cap - at, "%s%lld", d ? ", " : "",
                               (long long)t->shape[d]);
    if (at < cap)
        snprintf(out + at, cap - at, "]");
}

/* One tensor: copies it when it matches; counts it either way.  Returns
 * TD_E_SPEC with err in strict mode when it does not match. */
static int td__one(const td_ckpt_file *f, const char *name, int nd,
                   const int *dims, size_t count, float *dst, int strict,
                   td_weights_report *rep, char *err, size_t errcap)
{
    const td_ckpt_tensor *t = td_ckpt_file_find(f, name);
    char got[96], want[96] = "F32 [";
    if (!t) {
        if (!rep->first_missing[0])
            snprintf(rep->first_missing, sizeof rep->first_missing, "%s",
                     name);
        rep->missing++;
        if (strict) {
            snprintf(err, errcap, "tensor \"%s\" is not in the file", name);
            return TD_E_SPEC;
        }
        return 0;
    }
    if (!td__same_shape(t, nd, dims)) {
        if (!rep->first_reshaped[0])
            snprintf(rep->first_reshaped, sizeof rep->first_reshaped, "%s",
                     name);
        rep->reshaped++;
        if (strict) {
            size_t at = strlen(want);
            for (int d = 0; d < nd; d++)
                at += (size_t)snprintf(want + at, sizeof want - at, "%s%d",
                                       d ? ", " : "", dims[d]);
            snprintf(want + at, sizeof want - at, "]");
            td__shape_str(t, got, sizeof got);
            snprintf(err, errcap, "tensor \"%s\" is %s in the file, the "
                     "model's is %s", name, got, want);
            return TD_E_SPEC;
        }
        return 0;
    }
    memcpy(dst, td_ckpt_file_data(f, t), count * sizeof(float));
    rep->loaded++;
    return 0;
}

/* 1 if the file's tensor `name` belongs to the model or is one of the
 * names a model file also carries (counters, optimizer slots). */
static int td__known(const td_model *m, const char *name)
{
    size_t len = strlen(name);
    const char *nbt = ".num_batches_tracked";
    if (strncmp(name, "optimizer.", 10) == 0)
        return 1;
    if (len > strlen(nbt) && strcmp(name + len - strlen(nbt), nbt) == 0)
        return 1;
    for (int p = 0; p < m->nparams; p++)
        if (strcmp(m->params[p].name, name) == 0)
            return 1;
    for (int s = 0; s < m->nstate; s++)
        if (strcmp(m->state[s].name, name) == 0)
            return 1;
    return 0;
}

int td_weights_load(const td_model *m, const td_ckpt_file *f, int strict,
                    float *params, float *state, td_weights_report *rep,
                    char *err, size_t errcap)
{
    td_weights_report own;
    int rc;
    if (!rep)
        rep = &own;
    memset(rep, 0, sizeof *rep);
    float *dst = params;
    for (int p = 0; p < m->nparams; p++) {
        const td_param *pr = &m->params[p];
        if ((rc = td__one(f, pr->name, pr->ndims, pr->dims, pr->count, dst,
                          strict, rep, err, errcap)))
            return rc;
        dst += pr->count;
    }
    dst = state;
    for (int s = 0; s < m->nstate; s++) {
        const td_state *st = &m->state[s];
        int dim = (int)st->count;
        if ((rc = td__one(f, st->name, 1, &dim, st->count, dst, strict, rep,
                          err, errcap)))
            return rc;
        dst += st->count;
    }
    for (int i = 0; i < td_ckpt_file_count(f); i++)
        if (!td__known(m, td_ckpt_file_tensor(f, i)->name))
            rep->ignored++;
    return 0;
}

int td_weights_save(const td_model *m, const float *params,
                    const float *state, int64_t nbt, const json_t *extra_meta,
                    const char *path, char *err, size_t errcap)
{
    td_ckpt_snapshot s;
    int nbn = td_weights_bn_layers(m);
    size_t bytes = (m->param_count + td_model_state_count(m)) * sizeof(float) +
                   (size_t)nbn * sizeof(int64_t);
    int rc = td_ckpt_snapshot_init(&s, bytes, m->nparams + m->nstate + nbn);
    char name[TD_NAME_MAX + 32];
    void *dst;
    if (rc) {
        snprintf(err, errcap, "%s: %s", path, td_strerror(rc));
        return rc;
    }
    /* The int64 counters first, so every float tensor stays 8-aligned. */
    for (int L = 1; L < m->nlayers && rc == 0; L++) {
        if (m->layers[L].kind != TD_L_BN)
            continue;
        td_weights_bn_count_name(m, L, name, sizeof name);
        if ((rc = td_ckpt_snapshot_add(&s, name, TD_DT_I64, 0, NULL, &dst)) ==
            0)
            memcpy(dst, &nbt, sizeof nbt);
    }
    const float *src = params;
    for (int p = 0; p < m->nparams && rc == 0; p++) {
        const td_param *pr = &m->params[p];
        int64_t dims[4];
        for (int d = 0; d < pr->ndims; d++)
            dims[d] = pr->dims[d];
        if ((rc = td_ckpt_snapshot_add(&s, pr->name, TD_DT_F32, pr->ndims,
                                       dims, &dst)) == 0)
            memcpy(dst, src, pr->count * sizeof(float));
        src += pr->count;
    }
    src = state;
    for (int i = 0; i < m->nstate && rc == 0; i++) {
        int64_t dim = (int64_t)m->state[i].count;
        if ((rc = td_ckpt_snapshot_add(&s, m->state[i].name, TD_DT_F32, 1,
                                       &dim, &dst)) == 0)
            memcpy(dst, src, m->state[i].count * sizeof(float));
        src += m->state[i].count;
    }
    if (rc) {
        snprintf(err, errcap, "%s: %s", path, td_strerror(rc));
    } else {
        s.extra_meta = extra_meta;
        rc = td_st_write(path, &s, err, errcap);
    }
    td_ckpt_snapshot_destroy(&s);
    return rc;
}
