/* fuzz_weights.c - a weights file a user hands to traind: a job's `init`
 * (td_job_init_weights: td_st_open, then td_weights_load by name into the
 * job's model) and the self-describing file `trainctl predict/eval` opens
 * alone (td_infer_open: td_model_meta_read, td_model_build on the graph
 * it names, a strict td_weights_load).  lib/store/weights.c,
 * lib/job/modelmeta.c, the plain-safetensors side of checkpoint.c.
 *
 * Input: the file's bytes.  Checked:
 *   - the load into a fixed model (fuzz.h's TD_FUZZ_GRAPH)
 *     counts every tensor once (loaded + reshaped + missing), and a
 *     loaded one holds the file's bytes;
 *   - metadata that reads has classes with names, an input shape in
 *     range, std > 0, and survives the round trip: the model it
 *     describes, loaded strictly (when the file can hold it), saved by
 *     td_weights_save with td_model_meta_to_json, reopened and reloaded,
 *     gives the same metadata and the same numbers.
 * The CPU backend td_infer_open creates is left out (it runs the model;
 * this checks what it is given).
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "fuzz.h"
#include "job/modelmeta.h"
#include "store/weights.h"

/* A model's tensors in a file must at least fit it (4 bytes a float). */
#define TD__MAX_FLOATS (1u << 22)

static td_model *td__fixed(void)
{
    static td_model *m;
    if (!m) {
        char e[256];
        json_t *g = json_loads(TD_FUZZ_GRAPH, 0, NULL);
        td_shape in = TD_FUZZ_GRAPH_IN;
        TD_FUZZ_CHECK(g && td_model_build(g, in, TD_FUZZ_GRAPH_CLASSES, &m,
                                          e, sizeof e) == 0);
        json_decref(g);
    }
    return m;
}

/* The non-strict load of a job's init into the fixed model. */
static void td__init_load(const td_ckpt_file *f)
{
    const td_model *m = td__fixed();
    size_t ns = td_model_state_count(m);
    float *p = calloc(m->param_count + 1, sizeof *p);
    float *s = calloc(ns + 1, sizeof *s);
    td_weights_report rep;
    char e[600];
    TD_FUZZ_CHECK(p && s);
    TD_FUZZ_CHECK(td_weights_load(m, f, 0, p, s, &rep, e, sizeof e) == 0);
    TD_FUZZ_CHECK(rep.loaded + rep.reshaped + rep.missing ==
                  m->nparams + m->nstate);
    TD_FUZZ_CHECK(rep.ignored >= 0 && rep.ignored <= td_ckpt_file_count(f));
    const float *at = p;
    for (int i = 0; i < m->nparams; i++) {
        const td_param *pr = &m->params[i];
        const td_ckpt_tensor *t = td_ckpt_file_find(f, pr->name);
        int same = t && t->dtype == TD_DT_F32 && t->ndim == pr->ndims;
        for (int d = 0; same && d < pr->ndims; d++)
            same = t->shape[d] == pr->dims[d];
        if (same)
            TD_FUZZ_CHECK(t->nbytes == pr->count * sizeof(float) &&
                          memcmp(at, td_ckpt_file_data(f, t), t->nbytes) ==
                              0);
        at += pr->count;
    }
    free(p);
    free(s);
}

static void td__same_meta(const td_model_meta *a, const td_model_meta *b)
{
    TD_FUZZ_CHECK(a->classes == b->classes && a->in.c == b->in.c &&
                  a->in.h == b->in.h && a->in.w == b->in.w &&
                  a->n_augment == b->n_augment);
    for (int k = 0; k < a->classes; k++)
        TD_FUZZ_CHECK(strcmp(a->class_names[k], b->class_names[k]) == 0);
    for (int c = 0; c < a->in.c; c++)
        TD_FUZZ_CHECK(a->mean[c] == b->mean[c] && a->std[c] == b->std[c]);
    for (int i = 0; i < a->n_augment; i++)
        TD_FUZZ_CHECK(a->augment[i].op == b->augment[i].op);
    TD_FUZZ_CHECK(json_equal(a->graph, b->graph));
}

/* The file as td_infer_open reads it, then exported and read again. */
static void td__self_describing(const td_ckpt_file *f)
{
    td_model_meta meta, again;
    td_model *m = NULL;
    char e[600];
    int rc = td_model_meta_read(f, &meta, e, sizeof e);
    if (rc) {
        TD_FUZZ_CHECK(rc == TD_E_SPEC || rc == -ENOMEM);
        TD_FUZZ_CHECK(rc == -ENOMEM || e[0] != '\0');
        return;
    }
    TD_FUZZ_CHECK(meta.classes >= 2 && meta.class_names && meta.graph);
    for (int k = 0; k < meta.classes; k++)
        TD_FUZZ_CHECK(meta.class_names[k] != NULL);
    TD_FUZZ_CHECK(meta.in.c >= 1 && meta.in.c <= 4);
    TD_FUZZ_CHECK(meta.in.h >= 1 && meta.in.w >= 1);
    for (int c = 0; c < meta.in.c; c++)
        TD_FUZZ_CHECK(meta.std[c] > 0);
    if (td_model_build(meta.graph, meta.in, meta.classes, &m, e, sizeof e) ||
        m->param_count + td_model_state_count(m) > TD__MAX_FLOATS) {
        td_model_free(m);
        td_model_meta_free(&meta);
        return;
    }
    size_t np = m->param_count, ns = td_model_state_count(m);
    float *p = calloc(np + 1, sizeof *p), *s = calloc(ns + 1, sizeof *s);
    float *p2 = calloc(np + 1, sizeof *p), *s2 = calloc(ns + 1, sizeof *s);
    td_weights_report rep;
    TD_FUZZ_CHECK(p && s && p2 && s2);
    rc = td_weights_load(m, f, 1, p, s, &rep, e, sizeof e);
    if (rc) {
        TD_FUZZ_CHECK(rc == TD_E_SPEC && e[0] != '\0');
        goto out;
    }
    TD_FUZZ_CHECK(rep.loaded == m->nparams + m->nstate && rep.missing == 0 &&
                  rep.reshaped == 0);
    /* Exported as traind writes a model file, and read back. */
    char path[4200];
    json_t *mj = td_model_meta_to_json(&meta);
    TD_FUZZ_CHECK(mj != NULL);
    snprintf(path, sizeof path, "%s/w.safetensors", td_fuzz_tmpdir());
    TD_FUZZ_CHECK(td_weights_save(m, p, s, 1, mj, path, e, sizeof e) == 0);
    json_decref(mj);
    td_ckpt_file *g = NULL;
    TD_FUZZ_CHECK(td_st_open(path, &g, e, sizeof e) == 0);
    TD_FUZZ_CHECK(td_model_meta_read(g, &again, e, sizeof e) == 0);
    td__same_meta(&meta, &again);
    td_model_meta_free(&again);
    TD_FUZZ_CHECK(td_weights_load(m, g, 1, p2, s2, NULL, e, sizeof e) == 0);
    TD_FUZZ_CHECK(memcmp(p, p2, np * sizeof *p) == 0);
    TD_FUZZ_CHECK(memcmp(s, s2, ns * sizeof *s) == 0);
    td_ckpt_close(g);
    unlink(path);
out:
    free(p);
    free(s);
    free(p2);
    free(s2);
    td_model_free(m);
    td_model_meta_free(&meta);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64], err[1024] = "";
    int fd = td_fuzz_memfile(data, size, path, sizeof path);
    td_ckpt_file *f = NULL;
    int rc = td_st_open(path, &f, err, sizeof err);
    close(fd);
    if (rc) {
        TD_FUZZ_CHECK(f == NULL && err[0] != '\0');
        return 0;
    }
    td__init_load(f);
    td__self_describing(f);
    td_ckpt_close(f);
    return 0;
}
