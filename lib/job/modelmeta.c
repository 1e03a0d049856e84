/* modelmeta.c - the self-describing metadata of checkpoints and exports
 * (see modelmeta.h for the keys).
 *
 * Owns: the JSON of those keys, both ways, and their checks.
 * Never: touches files or devices; trusts a value it read without
 * checking its type and range.
 */
#include "job/modelmeta.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

int td_model_meta_init(td_model_meta *m, const json_t *graph, td_shape in,
                       int classes, const char *const *names,
                       const float *mean, const float *std,
                       const td_augment *augment, int n_augment)
{
    memset(m, 0, sizeof *m);
    if (classes < 1 || n_augment < 0 || n_augment > TD_AUG_MAX || in.c < 1 ||
        in.c > 4)
        return -EINVAL;
    m->graph = json_incref((json_t *)graph);
    m->classes = classes;
    m->in = in;
    for (int c = 0; c < in.c; c++) {
        m->mean[c] = mean[c];
        m->std[c] = std[c];
    }
    if (n_augment)
        memcpy(m->augment, augment, (size_t)n_augment * sizeof *augment);
    m->n_augment = n_augment;
    m->class_names = calloc((size_t)classes, sizeof *m->class_names);
    if (!m->class_names)
        goto oom;
    for (int k = 0; k < classes; k++) {
        char num[16];
        snprintf(num, sizeof num, "%d", k);
        m->class_names[k] = strdup(names && names[k] ? names[k] : num);
        if (!m->class_names[k])
            goto oom;
    }
    return 0;
oom:
    td_model_meta_free(m);
    return -ENOMEM;
}

void td_model_meta_free(td_model_meta *m)
{
    if (!m)
        return;
    for (int k = 0; m->class_names && k < m->classes; k++)
        free(m->class_names[k]);
    free(m->class_names);
    json_decref(m->graph);
    memset(m, 0, sizeof *m);
}

static json_t *td__floats(const float *v, int n)
{
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++)
        json_array_append_new(a, json_real(v[i]));
    return a;
}

static json_t *td__augment_json(const td_augment *a)
{
    json_t *o = json_pack("{s:s}", "op", td_augment_name(a->op));
    if (!o)
        return NULL;
    switch (a->op) {
    case TD_AUG_RANDOM_RESIZED_CROP:
        json_object_set_new(o, "scale", json_pack("[f,f]", a->scale[0],
                                                  a->scale[1]));
        json_object_set_new(o, "ratio", json_pack("[f,f]", a->ratio[0],
                                                  a->ratio[1]));
        break;
    case TD_AUG_PAD_CROP:
        json_object_set_new(o, "pad", json_integer(a->pad));
        break;
    case TD_AUG_CENTER_CROP:
        json_object_set_new(o, "resize", json_integer(a->resize));
        break;
    case TD_AUG_FLIP:
        json_object_set_new(o, "p", json_real(a->p));
        break;
    case TD_AUG_COLOR_JITTER:
        json_object_set_new(o, "brightness", json_real(a->brightness));
        json_object_set_new(o, "contrast", json_real(a->contrast));
        json_object_set_new(o, "saturation", json_real(a->saturation));
        break;
    default:
        break;
    }
    return o;
}

/* Sets key to the compact dump of v (stolen). */
static int td__put(json_t *out, const char *key, json_t *v)
{
    char *txt = v ? json_dumps(v, JSON_COMPACT | JSON_REAL_PRECISION(9)) :
                    NULL;
    json_decref(v);
    if (!txt)
        return -ENOMEM;
    int rc = json_object_set_new(out, key, json_string(txt)) ? -ENOMEM : 0;
    free(txt);
    return rc;
}

json_t *td_model_meta_to_json(const td_model_meta *m)
{
    json_t *out = json_object(), *names = json_array(), *aug = json_array();
    for (int k = 0; names && k < m->classes; k++)
        json_array_append_new(names, json_string(m->class_names[k]));
    for (int i = 0; aug && i < m->n_augment; i++)
        json_array_append_new(aug, td__augment_json(&m->augment[i]));
    json_t *input = json_pack("{s:[i,i], s:i, s:o, s:o}", "size", m->in.h,
                              m->in.w, "channels", m->in.c, "mean",
                              td__floats(m->mean, m->in.c), "std",
                              td__floats(m->std, m->in.c));
    json_t *pre = json_pack(
        "{s:o, s:s, s:s, s:s}", "augment", aug, "mode", "eval", "decode",
        "libjpeg-turbo, islow IDCT, the crop box only, at the smallest "
        "DCT scale M/8 (M in 1,2,4,8) keeping the box at least the output "
        "size; fancy chroma upsampling unless the scaled box is at least "
        "1.25 times the output width",
        "resample", "bilinear, pixel centres aligned, 8-bit fixed-point "
        "weights (1/256), rounded");
    if (!out || !names || !input || !pre ||
        td__put(out, "traind.model", json_incref(m->graph)) ||
        td__put(out, "traind.classes", names) ||
        td__put(out, "traind.input", input) ||
        td__put(out, "traind.preprocess", pre)) {
        json_decref(out);
        return NULL;
    }
    return out;
}

/* The JSON value of metadata key, parsed; NULL with err if missing. */
static json_t *td__get(const td_ckpt_file *f, const char *key, char *err,
                       size_t errcap)
{
    const char *s = td_ckpt_file_meta_str(f, key);
    json_error_t je;
    if (!s) {
        snprintf(err, errcap, "%s: missing from the file's metadata", key);
        return NULL;
    }
    json_t *v = json_loads(s, JSON_REJECT_DUPLICATES, &je);
    if (!v)
        snprintf(err, errcap, "%s: not JSON: %s", key, je.text);
    return v;
}

static int td__read_floats(const json_t *a, int n, float *out)
{
    if (!json_is_array(a) || (int)json_array_size(a) != n)
        return -1;
    for (int i = 0; i < n; i++) {
        json_t *v = json_array_get(a, (size_t)i);
        if (!json_is_number(v))
            return -1;
        out[i] = (float)json_number_value(v);
    }
    return 0;
}

/* mean and std are kept as floats and written back as JSON numbers: a
 * value past FLT_MAX became infinity, which JSON cannot hold (the file
 * traind then wrote lacked it and did not read back), and a std under
 * FLT_MIN made the scale 1 / (255 std) infinite. */
static int td__check_norm(const json_t *in, const td_model_meta *m, char *err,
                          size_t errcap)
{
    for (int k = 0; k < 2; k++) {
        const char *key = k ? "std" : "mean";
        const float *v = k ? m->std : m->mean;
        for (int c = 0; c < m->in.c; c++) {
            double d = json_number_value(
                json_array_get(json_object_get(in, key), (size_t)c));
            if (!(fabs(d) <= FLT_MAX)) {
                snprintf(err, errcap, "traind.input: %s[%d] = %g is beyond "
                         "a 32-bit float", key, c, d);
                return TD_E_SPEC;
            }
            if (k && !(v[c] >= FLT_MIN)) {
                snprintf(err, errcap, "traind.input: std[%d] = %g must be at "
                         "least %g", c, d, (double)FLT_MIN);
                return TD_E_SPEC;
            }
        }
    }
    return 0;
}

static int td__read_input(const json_t *in, td_model_meta *m, char *err,
                          size_t errcap)
{
    json_t *size = json_object_get(in, "size");
    json_t *ch = json_object_get(in, "channels");
    if (!json_is_array(size) || json_array_size(size) != 2 ||
        !json_is_integer(json_array_get(size, 0)) ||
        !json_is_integer(json_array_get(size, 1)) || !json_is_integer(ch) ||
        json_integer_value(ch) < 1 || json_integer_value(ch) > 4) {
        snprintf(err, errcap, "traind.input: needs \"size\": [h, w] and "
                 "\"channels\": 1..4");
        return TD_E_SPEC;
    }
    m->in.c = (int)json_integer_value(ch);
    m->in.h = (int)json_integer_value(json_array_get(size, 0));
    m->in.w = (int)json_integer_value(json_array_get(size, 1));
    if (m->in.h < 1 || m->in.h > 8192 || m->in.w < 1 || m->in.w > 8192 ||
        td__read_floats(json_object_get(in, "mean"), m->in.c, m->mean) ||
        td__read_floats(json_object_get(in, "std"), m->in.c, m->std)) {
        snprintf(err, errcap, "traind.input: size 1..8192 and a mean and std "
                 "of %d numbers each", m->in.c);
        return TD_E_SPEC;
    }
    for (int c = 0; c < m->in.c; c++)
        if (!(m->std[c] > 0)) {
            snprintf(err, errcap, "traind.input: std[%d] must be > 0", c);
            return TD_E_SPEC;
        }
    return td__check_norm(in, m, err, errcap);
}

static int td__read_classes(const json_t *names, td_model_meta *m, char *err,
                            size_t errcap)
{
    if (!json_is_array(names) || json_array_size(names) < 2 ||
        json_array_size(names) > (1u << 20)) {
        snprintf(err, errcap, "traind.classes: must be an array of at least "
                 "2 names");
        return TD_E_SPEC;
    }
    m->classes = (int)json_array_size(names);
    m->class_names = calloc((size_t)m->classes, sizeof *m->class_names);
    if (!m->class_names)
        return -ENOMEM;
    for (int k = 0; k < m->classes; k++) {
        const char *s = json_string_value(json_array_get(names, (size_t)k));
        if (!s) {
            snprintf(err, errcap, "traind.classes[%d]: must be a string", k);
            return TD_E_SPEC;
        }
        if (!(m->class_names[k] = strdup(s)))
            return -ENOMEM;
    }
    return 0;
}

int td_model_meta_read(const td_ckpt_file *f, td_model_meta *out, char *err,
                       size_t errcap)
{
    json_t *names = NULL, *in = NULL, *pre = NULL;
    char e[400];
    int rc = TD_E_SPEC;
    memset(out, 0, sizeof *out);
    if (!td_ckpt_file_meta_str(f, "traind.model")) {
        snprintf(err, errcap, "not self-describing (no traind.model "
                 "metadata): give the model and input explicitly");
        return TD_E_SPEC;
    }
    if (!(out->graph = td__get(f, "traind.model", err, errcap)) ||
        !(names = td__get(f, "traind.classes", err, errcap)) ||
        !(in = td__get(f, "traind.input", err, errcap)) ||
        !(pre = td__get(f, "traind.preprocess", err, errcap)))
        goto out;
    if (!json_is_object(out->graph)) {
        snprintf(err, errcap, "traind.model: must be a layer graph object");
        goto out;
    }
    if ((rc = td__read_classes(names, out, err, errcap)) ||
        (rc = td__read_input(in, out, err, errcap)))
        goto out;
    rc = td_augment_from_json(json_object_get(pre, "augment"), out->augment,
                              TD_AUG_MAX, e, sizeof e);
    if (rc < 0 || (out->n_augment = rc,
                   rc = td_augment_validate(out->augment, out->n_augment, e,
                                            sizeof e)) < 0) {
        snprintf(err, errcap, "traind.preprocess: %s", e);
        rc = TD_E_SPEC;
        goto out;
    }
    rc = 0;
out:
    json_decref(names);
    json_decref(in);
    json_decref(pre);
    if (rc)
        td_model_meta_free(out);
    return rc;
}
