/* fuzz_spec.c - a job spec as `submit` receives it, inline model included.
 *
 * Input: a JSON text, optionally followed by NUL-separated `path=value`
 * assignments applied to it first (what `--set` does).  A spec that
 * parses must reparse from its normalised JSON to the same hash (spec.h's
 * promise), and its model, when given inline, is built for the spec's
 * input and classes (10 when auto), as the runner does, and initialised
 * when small.
 */
#include <errno.h>
#include <string.h>

#include <jansson.h>

#include "base/error.h"
#include "fuzz.h"
#include "model/model.h"
#include "job/spec.h"

static void td__model(const td_job_spec *s)
{
    td_shape in = {s->input.channels, s->input.size[0], s->input.size[1]};
    int classes = s->data.classes ? s->data.classes : 10;
    char err[512] = "";
    td_model *m = NULL;
    int rc = td_model_build(s->model, in, classes, &m, err, sizeof err);
    if (rc) {
        TD_FUZZ_CHECK(m == NULL && err[0] != '\0');
        return;
    }
    TD_FUZZ_CHECK(m->nlayers >= 2 && m->classes == classes);
    const td_shape last = m->layers[m->nlayers - 1].out;
    TD_FUZZ_CHECK(last.c == classes && last.h == 1 && last.w == 1);
    size_t total = 0;
    for (int i = 0; i < m->nparams; i++) {
        TD_FUZZ_CHECK(m->params[i].layer > 0 &&
                      m->params[i].layer < m->nlayers);
        total += m->params[i].count;
    }
    TD_FUZZ_CHECK(total == m->param_count);
    if (m->param_count <= 4096) {
        float *v = malloc((m->param_count + 1) * sizeof *v);
        TD_FUZZ_CHECK(v != NULL);
        td_model_init_params(m, 7, v);
        free(v);
    }
    td_model_free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    size_t jlen = strnlen(text, size);
    json_error_t je;
    json_t *root = json_loadb(text, jlen, 0, &je);
    if (!root)
        return 0;
    char err[1024] = "";
    /* the assignments after the JSON, each NUL-terminated (or ending the
     * input) */
    for (size_t at = jlen + 1; at < size;) {
        size_t n = strnlen(text + at, size - at);
        char *set = strndup(text + at, n);
        TD_FUZZ_CHECK(set != NULL);
        int rc = td_spec_apply_set(root, set, err, sizeof err);
        free(set);
        if (rc) {
            TD_FUZZ_CHECK(rc == TD_E_SPEC && err[0] != '\0');
            json_decref(root);
            return 0;
        }
        at += n + 1;
    }
    td_job_spec s;
    int rc = td_spec_parse(root, "/srv/data", &s, err, sizeof err);
    json_decref(root);
    if (rc) {
        TD_FUZZ_CHECK(rc == TD_E_SPEC || rc == -ENOMEM);
        TD_FUZZ_CHECK(rc == -ENOMEM || err[0] != '\0');
        td_spec_free(&s);
        return 0;
    }
    /* parse(to_json(s)) hashes equal */
    json_t *norm = td_spec_to_json(&s);
    TD_FUZZ_CHECK(norm != NULL);
    td_job_spec again;
    rc = td_spec_parse(norm, NULL, &again, err, sizeof err);
    if (rc)
        fprintf(stderr, "normalised spec does not parse: %s\n", err);
    TD_FUZZ_CHECK(rc == 0);
    TD_FUZZ_CHECK(td_spec_hash(&again) == td_spec_hash(&s));
    td_spec_free(&again);
    json_decref(norm);
    for (int k = 0; k < 2; k++) {
        const td_spec_paths *p = k ? &s.data.val : &s.data.train;
        for (int i = 0; i < p->n; i++)
            TD_FUZZ_CHECK(p->v[i] && p->v[i][0] == '/');
    }
    if (json_is_object(s.model))
        td__model(&s);
    td_spec_free(&s);
    return 0;
}
