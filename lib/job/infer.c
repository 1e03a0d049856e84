/* infer.c - forward passes of a model with given weights on the CPU
 * backend, or a GPU's where built (see infer.h).
 *
 * Owns: the model, backend and weights of one predictor.
 * Never: decodes, trains, or writes files.
 */
#include "job/infer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "base/error.h"
#include "store/checkpoint.h"
#include "store/weights.h"

struct td_infer {
    td_model_meta meta;
    td_model *model;
    td_backend *be;
    int batch;
    int32_t *labels;
};

/* Loads the weights of f into the backend: parameters and running
 * statistics by name, the optimizer slots of the snapshot left at zero. */
static int td__load(td_infer *inf, const td_ckpt_file *f, const char *path,
                    char *err, size_t errcap)
{
    const td_model *m = inf->model;
    size_t n = td_backend_snapshot_floats(m, &inf->be->cfg.optim);
    size_t nstate = td_model_state_count(m);
    float *flat = calloc(n ? n : 1, sizeof *flat);
    char e[400];
    if (!flat)
        return -ENOMEM;
    int rc = td_weights_load(m, f, 1, flat, flat + (n - nstate), NULL, e,
                             sizeof e);
    if (rc)
        snprintf(err, errcap, "%s: %s", path, e);
    else if ((rc = td_backend_restore(inf->be, flat, n)))
        snprintf(err, errcap, "%s: %s", path, inf->be->err);
    free(flat);
    return rc;
}

static int td__create(const td_model_meta *meta, const td_ckpt_file *f,
                      const char *path, const char *device, int batch,
                      int threads, td_infer **out, char *err, size_t errcap)
{
    td_infer *inf = calloc(1, sizeof *inf);
    char e[400];
    int rc;
    *out = NULL;
    if (!inf)
        return -ENOMEM;
    if ((rc = td_model_meta_init(&inf->meta, meta->graph, meta->in,
                                 meta->classes,
                                 (const char *const *)meta->class_names,
                                 meta->mean, meta->std, meta->augment,
                                 meta->n_augment)))
        goto fail;
    if ((rc = td_model_build(meta->graph, meta->in, meta->classes,
                             &inf->model, e, sizeof e))) {
        snprintf(err, errcap, "%s", e);
        goto fail;
    }
    td_backend_config bc;
    memset(&bc, 0, sizeof bc);
    bc.batch = batch;
    bc.threads = threads;
    bc.dtype = TD_F32;
    for (int c = 0; c < meta->in.c; c++) {
        bc.mean[c] = meta->mean[c];
        bc.std[c] = meta->std[c];
    }
    td_optim_defaults(&bc.optim, TD_OPT_SGD);
    bc.optim.momentum = 0; /* no optimizer slots to hold */
    if ((rc = td_backend_create(device, inf->model, &bc, &inf->be, e,
                                sizeof e))) {
        snprintf(err, errcap, "%s backend: %s", device, e);
        goto fail;
    }
    inf->batch = batch;
    if (!(inf->labels = calloc((size_t)batch, sizeof *inf->labels))) {
        rc = -ENOMEM;
        goto fail;
    }
    if ((rc = td__load(inf, f, path, err, errcap)))
        goto fail;
    *out = inf;
    return 0;
fail:
    if (rc == -ENOMEM)
        snprintf(err, errcap, "out of memory");
    td_infer_free(inf);
    return rc;
}

int td_infer_create(const td_model_meta *meta, const char *weights,
                    int batch, int threads, td_infer **out, char *err,
                    size_t errcap)
{
    td_ckpt_file *f;
    int rc = td_st_open(weights, &f, err, errcap);
    if (rc)
        return rc;
    rc = td__create(meta, f, weights, "cpu", batch, threads, out, err,
                    errcap);
    td_ckpt_close(f);
    return rc;
}

int td_infer_open(const char *path, int batch, int threads, td_infer **out,
                  char *err, size_t errcap)
{
    return td_infer_open_on(path, "cpu", batch, threads, out, err, errcap);
}

int td_infer_open_on(const char *path, const char *device, int batch,
                     int threads, td_infer **out, char *err, size_t errcap)
{
    td_ckpt_file *f;
    td_model_meta meta;
    char e[400];
    *out = NULL;
    int rc = td_st_open(path, &f, err, errcap);
    if (rc)
        return rc;
    if ((rc = td_model_meta_read(f, &meta, e, sizeof e))) {
        snprintf(err, errcap, "%s: %s", path, e);
        td_ckpt_close(f);
        return rc;
    }
    rc = td__create(&meta, f, path, device ? device : "cpu", batch, threads,
                    out, err, errcap);
    td_model_meta_free(&meta);
    td_ckpt_close(f);
    return rc;
}

void td_infer_free(td_infer *inf)
{
    if (!inf)
        return;
    td_backend_destroy(inf->be);
    td_model_free(inf->model);
    td_model_meta_free(&inf->meta);
    free(inf->labels);
    free(inf);
}

const td_model_meta *td_infer_meta(const td_infer *inf) { return &inf->meta; }
const td_model *td_infer_model(const td_infer *inf) { return inf->model; }

int td_infer_logits(td_infer *inf, const uint8_t *nhwc, int n, float *logits,
                    char *err, size_t errcap)
{
    const td_model *m = inf->model;
    const td_shape in = m->layers[0].out;
    if (n < 1 || n > inf->batch) {
        snprintf(err, errcap, "%d images: 1..%d per call", n, inf->batch);
        return -EINVAL;
    }
    td_batch b = {.data = (uint8_t *)nhwc, .labels = inf->labels, .n = n,
                  .h = in.h, .w = in.w, .c = in.c, .layout = TD_LAYOUT_NHWC};
    size_t k = (size_t)m->classes;
    float *all = malloc((size_t)inf->batch * k * sizeof *all);
    int rc;
    if (!all)
        return -ENOMEM;
    if ((rc = td_backend_upload(inf->be, &b)) ||
        (rc = td_backend_eval_step(inf->be)) ||
        (rc = inf->be->ops->read_tensor(inf->be, TD_T_VALUE, m->nlayers - 1,
                                        all, (size_t)inf->batch * k)))
        snprintf(err, errcap, "forward pass: %s", inf->be->err);
    else
        memcpy(logits, all, (size_t)n * k * sizeof *all);
    free(all);
    return rc;
}
