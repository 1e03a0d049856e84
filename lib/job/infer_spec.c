/* infer_spec.c - eval and predict job specs (see infer_spec.h).
 *
 * Owns: the field table of the two tasks, their bounds and defaults.
 * Never: opens a path or probes a device (the device name is checked for
 * syntax only; the daemon checks presence at submit).
 */
#include "job/infer_spec.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "job/device.h"
#include "job/infer_run.h"
#include "job/spec.h"

static const char *const td__task_names[] = {"train", "eval", "predict"};

const char *td_task_name(enum td_task t)
{
    return (unsigned)t <= TD_TASK_PREDICT ? td__task_names[t] : "unknown";
}

int td_spec_task(const json_t *spec, enum td_task *out, char *err,
                 size_t errcap)
{
    const json_t *t = json_object_get(spec, "task");
    const char *s = json_string_value(t);
    *out = TD_TASK_TRAIN;
    if (!t)
        return 0;
    if (s && strcmp(s, "eval") == 0) {
        *out = TD_TASK_EVAL;
        return 0;
    }
    if (s && strcmp(s, "predict") == 0) {
        *out = TD_TASK_PREDICT;
        return 0;
    }
    snprintf(err, errcap, "task: must be \"eval\" or \"predict\" (a "
             "training spec has no task)");
    return TD_E_SPEC;
}

static const char *const td__eval_keys[] = {
    "task", "name", "checkpoint", "data", "device", "batch_size", "workers",
    NULL};
static const char *const td__predict_keys[] = {
    "task", "name", "checkpoint", "images", "top_k", "device", NULL};

static int td__known(const char *const *keys, const char *k)
{
    for (; *keys; keys++)
        if (strcmp(*keys, k) == 0)
            return 1;
    return 0;
}

static int td__path(const json_t *v, const char *field, char **out,
                    char *err, size_t errcap)
{
    const char *s = json_string_value(v);
    if (!s || !s[0]) {
        snprintf(err, errcap, "%s: must be a path (a non-empty string)",
                 field);
        return TD_E_SPEC;
    }
    if (s[0] != '/') {
        snprintf(err, errcap, "%s: '%.1000s' must be an absolute path "
                 "(trainctl makes relative ones absolute)", field, s);
        return TD_E_SPEC;
    }
    if (strlen(s) >= 4096) {
        snprintf(err, errcap, "%s: longer than 4095 bytes", field);
        return TD_E_SPEC;
    }
    if (!(*out = strdup(s))) {
        snprintf(err, errcap, "out of memory");
        return -ENOMEM;
    }
    return 0;
}

static int td__int(const json_t *spec, const char *field, int lo, int hi,
                   int def, int *out, char *err, size_t errcap)
{
    const json_t *v = json_object_get(spec, field);
    *out = def;
    if (!v)
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < lo ||
        json_integer_value(v) > hi) {
        snprintf(err, errcap, "%s: must be an integer in %d..%d", field, lo,
                 hi);
        return TD_E_SPEC;
    }
    *out = (int)json_integer_value(v);
    return 0;
}

int td_infer_spec_parse(const json_t *spec, td_infer_spec *s, char *err,
                        size_t errcap)
{
    const char *k;
    const json_t *v;
    int rc;
    memset(s, 0, sizeof *s);
    if (!json_is_object(spec)) {
        snprintf(err, errcap, "spec: must be an object");
        return TD_E_SPEC;
    }
    if ((rc = td_spec_task(spec, &s->task, err, errcap)))
        return rc;
    if (s->task == TD_TASK_TRAIN) {
        snprintf(err, errcap, "task: missing (\"eval\" or \"predict\")");
        return TD_E_SPEC;
    }
    const char *const *keys = s->task == TD_TASK_EVAL ? td__eval_keys
                                                      : td__predict_keys;
    json_object_foreach((json_t *)spec, k, v) {
        if (!td__known(keys, k)) {
            char list[200];
            size_t at = 0;
            for (const char *const *p = keys; *p; p++)
                at += (size_t)snprintf(list + at, sizeof list - at, "%s%s",
                                       p == keys ? "" : ", ", *p);
            snprintf(err, errcap, "%.200s: unknown key for a %s job (it "
                     "takes %s)", k, td_task_name(s->task), list);
            return TD_E_SPEC;
        }
    }
    const char *name = json_string_value(json_object_get(spec, "name"));
    if (json_object_get(spec, "name") && (!name || !td_spec_name_ok(name))) {
        snprintf(err, errcap, "name: must be 1-64 characters of A-Z a-z 0-9 "
                 ". _ -");
        return TD_E_SPEC;
    }
    snprintf(s->name, sizeof s->name, "%s", name ? name : "");
    const char *dev = json_string_value(json_object_get(spec, "device"));
    if (json_object_get(spec, "device") && (!dev || !td_spec_device_ok(dev))) {
        snprintf(err, errcap, "device: must be auto, cpu, cuda or cuda:N");
        return TD_E_SPEC;
    }
    snprintf(s->device, sizeof s->device, "%s", dev ? dev : "auto");
    if (!json_object_get(spec, "checkpoint")) {
        snprintf(err, errcap, "checkpoint: missing (the checkpoint or "
                 "export to %s with)", td_task_name(s->task));
        return TD_E_SPEC;
    }
    if ((rc = td__path(json_object_get(spec, "checkpoint"), "checkpoint",
                       &s->checkpoint, err, errcap)))
        goto fail;
    if (s->task == TD_TASK_EVAL) {
        if (!json_object_get(spec, "data")) {
            snprintf(err, errcap, "data: missing (the dataset to evaluate "
                     "on)");
            rc = TD_E_SPEC;
            goto fail;
        }
        if ((rc = td__path(json_object_get(spec, "data"), "data", &s->data,
                           err, errcap)) ||
            (rc = td__int(spec, "batch_size", 1, 4096, 32, &s->batch_size,
                          err, errcap)) ||
            (rc = td__int(spec, "workers", 1, 64, 2, &s->workers, err,
                          errcap)))
            goto fail;
        return 0;
    }
    const json_t *im = json_object_get(spec, "images");
    if ((rc = td__int(spec, "top_k", 1, 1000, 5, &s->top_k, err, errcap)))
        goto fail;
    if (!json_is_array(im) || json_array_size(im) == 0 ||
        json_array_size(im) > TD_PREDICT_MAX_IMAGES) {
        snprintf(err, errcap, "images: must be a list of 1..%d image paths%s",
                 TD_PREDICT_MAX_IMAGES,
                 json_array_size(im) > TD_PREDICT_MAX_IMAGES
                     ? " per request (split it into several)" : "");
        rc = TD_E_SPEC;
        goto fail;
    }
    s->images = calloc(json_array_size(im), sizeof *s->images);
    if (!s->images) {
        snprintf(err, errcap, "out of memory");
        rc = -ENOMEM;
        goto fail;
    }
    for (size_t i = 0; i < json_array_size(im); i++) {
        char field[32];
        snprintf(field, sizeof field, "images[%zu]", i);
        if ((rc = td__path(json_array_get(im, i), field,
                           &s->images[s->n_images], err, errcap)))
            goto fail;
        s->n_images++;
    }
    return 0;
fail:
    td_infer_spec_free(s);
    return rc;
}

json_t *td_infer_spec_to_json(const td_infer_spec *s)
{
    json_t *o = json_pack("{s:s, s:s, s:s}", "task", td_task_name(s->task),
                          "checkpoint", s->checkpoint, "device", s->device);
    if (!o)
        return NULL;
    if (s->name[0])
        json_object_set_new(o, "name", json_string(s->name));
    if (s->task == TD_TASK_EVAL) {
        json_object_set_new(o, "data", json_string(s->data));
        json_object_set_new(o, "batch_size", json_integer(s->batch_size));
        json_object_set_new(o, "workers", json_integer(s->workers));
        return o;
    }
    json_t *im = json_array();
    for (int i = 0; im && i < s->n_images; i++)
        json_array_append_new(im, json_string(s->images[i]));
    json_object_set_new(o, "images", im);
    json_object_set_new(o, "top_k", json_integer(s->top_k));
    return o;
}

void td_infer_spec_free(td_infer_spec *s)
{
    free(s->checkpoint);
    free(s->data);
    for (int i = 0; i < s->n_images; i++)
        free(s->images[i]);
    free(s->images);
    memset(s, 0, sizeof *s);
}
