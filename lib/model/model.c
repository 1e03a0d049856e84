/* model.c - model definitions from JSON: checking, shape inference,
 * parameters and their seeded initialisation (see model.h).
 *
 * Owns: the layer vocabulary and its keys, defaults and ranges.
 * Never does: arithmetic on activations, device work, or logging (errors
 * go back to the caller as text naming the JSON path).
 */
#include "model/model.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/fsio.h"
#include "base/rng.h"

static const char *const td__kind_names[] = {
    [TD_L_INPUT] = "input",        [TD_L_CONV] = "conv2d",
    [TD_L_BN] = "batchnorm",       [TD_L_RELU] = "relu",
    [TD_L_MAXPOOL] = "maxpool",    [TD_L_AVGPOOL] = "avgpool",
    [TD_L_GAP] = "global_avgpool", [TD_L_DENSE] = "dense",
    [TD_L_DROPOUT] = "dropout",    [TD_L_FLATTEN] = "flatten",
    [TD_L_ADD] = "add",
};

/* Keys each kind accepts besides "type", "name" and "input". */
static const char *const td__kind_keys[] = {
    [TD_L_INPUT] = "",
    [TD_L_CONV] = " channels kernel stride pad bias ",
    [TD_L_BN] = " eps momentum ",
    [TD_L_RELU] = "",
    [TD_L_MAXPOOL] = " kernel stride pad ",
    [TD_L_AVGPOOL] = " kernel stride pad ",
    [TD_L_GAP] = "",
    [TD_L_DENSE] = " units bias ",
    [TD_L_DROPOUT] = " rate ",
    [TD_L_FLATTEN] = "",
    [TD_L_ADD] = " inputs ",
};

#define TD__NKINDS ((int)(sizeof td__kind_names / sizeof td__kind_names[0]))

const char *td_layer_kind_name(enum td_layer_kind k)
{
    if ((int)k < 0 || (int)k >= TD__NKINDS)
        return "?";
    return td__kind_names[k];
}

/* Build context: the model being built plus error reporting. */
typedef struct td__mb {
    td_model *m;
    char *err;
    size_t cap;
    int li;        /* JSON index of the layer being read */
    int flat;      /* per layer: 1 if its output is a flat feature vector */
    int *flats;
} td__mb;

/* An optional integer key in [lo, hi]; absent leaves *v unchanged. */
static int td__int(td__mb *b, const json_t *o, const char *key, int lo,
                   int hi, int required, int *v)
{
    json_t *j = json_object_get(o, key);
    if (!j) {
        if (required)
            return td_set_error(b->err, b->cap, TD_E_SPEC,
                                "model.layers[%d].%s: missing", b->li, key);
        return 0;
    }
    if (!json_is_integer(j) || json_integer_value(j) < lo ||
        json_integer_value(j) > hi)
        return td_set_error(b->err, b->cap, TD_E_SPEC,
                            "model.layers[%d].%s: must be an integer %d..%d",
                            b->li, key, lo, hi);
    *v = (int)json_integer_value(j);
    return 0;
}

static int td__real(td__mb *b, const json_t *o, const char *key, double lo,
                    double hi, float *v)
{
    json_t *j = json_object_get(o, key);
    if (!j)
        return 0;
    if (!json_is_number(j) || json_number_value(j) < lo ||
        json_number_value(j) >= hi)
        return td_set_error(b->err, b->cap, TD_E_SPEC,
                            "model.layers[%d].%s: must be a number in [%g, %g)",
                            b->li, key, lo, hi);
    *v = (float)json_number_value(j);
    return 0;
}

static int td__bool(td__mb *b, const json_t *o, const char *key, int *v)
{
    json_t *j = json_object_get(o, key);
    if (!j)
        return 0;
    if (!json_is_boolean(j))
        return td_set_error(b->err, b->cap, TD_E_SPEC,
                            "model.layers[%d].%s: must be true "
                            "or false",
                            b->li, key);
    *v = json_is_true(j);
    return 0;
}

/* Resolves a layer name to an earlier layer index. */
static int td__ref(td__mb *b, const json_t *j, const char *what, int *idx)
{
    td_model *m = b->m;
    if (!json_is_string(j))
        return td_set_error(b->err, b->cap, TD_E_SPEC,
                            "model.layers[%d].%s: must be a "
                            "layer name",
                            b->li, what);
    const char *s = json_string_value(j);
    for (int i = 0; i < m->nlayers; i++)
        if (strcmp(m->layers[i].name, s) == 0) {
            *idx = i;
            return 0;
        }
    return td_set_error(b->err, b->cap, TD_E_SPEC,
                        "model.layers[%d].%s: no earlier layer "
                        "named \"%s\"",
                        b->li, what, s);
}

static int td__check_keys(td__mb *b, const json_t *o, enum td_layer_kind k)
{
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)o, key, v) {
        char pat[TD_NAME_MAX + 2];
        snprintf(pat, sizeof pat, " %s ", key);
        if (strcmp(key, "type") == 0 || strcmp(key, "name") == 0)
            continue;
        if (strcmp(key, "input") == 0 && k != TD_L_ADD)
            continue;
        if (!strstr(td__kind_keys[k], pat))
            return td_set_error(b->err, b->cap, TD_E_SPEC,
                                "model.layers[%d].%s: unknown "
                                "key for a %s layer",
                                b->li, key, td__kind_names[k]);
    }
    return 0;
}

/* Output size of a window op; < 1 is an error for the caller to name. */
static int td__window(int in, int k, int s, int p)
{
    if (in + 2 * p < k)
        return 0;
    return (in + 2 * p - k) / s + 1;
}

static int td__add_param(td__mb *b, int layer, const char *suffix,
                         enum td_param_role role, int nd, const int *dims,
                         int fan_in)
{
    td_model *m = b->m;
    td_param *p = &m->params[m->nparams];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s.%s", m->layers[layer].name, suffix);
    p->role = role;
    p->layer = layer;
    p->ndims = nd;
    p->count = 1;
    for (int i = 0; i < nd; i++) {
        p->dims[i] = dims[i];
        p->count *= (size_t)dims[i];
    }
    p->fan_in = fan_in;
    if (m->layers[layer].param0 < 0)
        m->layers[layer].param0 = m->nparams;
    m->param_count += p->count;
    m->nparams++;
    return 0;
}

static void td__add_state(td__mb *b, int layer, const char *suffix, int n,
                          float init)
{
    td_model *m = b->m;
    td_state *s = &m->state[m->nstate];
    snprintf(s->name, sizeof s->name, "%s.%s", m->layers[layer].name, suffix);
    s->layer = layer;
    s->count = (size_t)n;
    s->init = init;
    if (m->layers[layer].state0 < 0)
        m->layers[layer].state0 = m->nstate;
    m->nstate++;
}

/* Reads kind-specific keys of layer L (already named, input resolved) and
 * infers its output shape and parameters. */
static int td__layer(td__mb *b, const json_t *o, int L)
{
    td_model *m = b->m;
    td_layer *l = &m->layers[L];
    td_shape x = m->layers[l->in[0]].out;
    int flat_in = b->flats[l->in[0]];
    int rc;
    const char *iname = m->layers[l->in[0]].name;

    b->flats[L] = flat_in;
    switch (l->kind) {
    case TD_L_CONV:
    case TD_L_BN:
    case TD_L_MAXPOOL:
    case TD_L_AVGPOOL:
    case TD_L_GAP:
        if (flat_in)
            return td_set_error(b->err, b->cap, TD_E_SPEC,
                                "model.layers[%d] (%s): a %s "
                                "needs an image input, but \"%s\" is flat",
                                b->li, l->name, td__kind_names[l->kind], iname);
        break;
    default:
        break;
    }
    switch (l->kind) {
    case TD_L_CONV: {
        l->stride = 1;
        l->pad = 0;
        l->bias = 0;
        if ((rc = td__int(b, o, "channels", 1, 65536, 1, &l->channels)) ||
            (rc = td__int(b, o, "kernel", 1, 11, 1, &l->kernel)) ||
            (rc = td__int(b, o, "stride", 1, 8, 0, &l->stride)) ||
            (rc = td__int(b, o, "pad", 0, 5, 0, &l->pad)) ||
            (rc = td__bool(b, o, "bias", &l->bias)))
            return rc;
        l->out.c = l->channels;
        l->out.h = td__window(x.h, l->kernel, l->stride, l->pad);
        l->out.w = td__window(x.w, l->kernel, l->stride, l->pad);
        int wd[4] = {l->channels, x.c, l->kernel, l->kernel};
        int fan = x.c * l->kernel * l->kernel;
        td__add_param(b, L, "weight", TD_P_WEIGHT, 4, wd, fan);
        if (l->bias)
            td__add_param(b, L, "bias", TD_P_BIAS, 1, wd, fan);
        m->fwd_flops += 2.0 * fan * l->channels * l->out.h * l->out.w;
        break;
    }
    case TD_L_BN:
        l->eps = 1e-5f;
        l->momentum = 0.1f;
        if ((rc = td__real(b, o, "eps", 1e-12, 1.0, &l->eps)) ||
            (rc = td__real(b, o, "momentum", 0.0, 1.0 + 1e-9, &l->momentum)))
            return rc;
        l->out = x;
        td__add_param(b, L, "weight", TD_P_BN_SCALE, 1, &x.c, x.c);
        td__add_param(b, L, "bias", TD_P_BN_SHIFT, 1, &x.c, x.c);
        td__add_state(b, L, "running_mean", x.c, 0.0f);
        td__add_state(b, L, "running_var", x.c, 1.0f);
        break;
    case TD_L_MAXPOOL:
    case TD_L_AVGPOOL:
        l->pad = 0;
        if ((rc = td__int(b, o, "kernel", 1, 11, 1, &l->kernel)))
            return rc;
        l->stride = l->kernel;
        if ((rc = td__int(b, o, "stride", 1, 11, 0, &l->stride)) ||
            (rc = td__int(b, o, "pad", 0, l->kernel / 2, 0, &l->pad)))
            return rc;
        l->out.c = x.c;
        l->out.h = td__window(x.h, l->kernel, l->stride, l->pad);
        l->out.w = td__window(x.w, l->kernel, l->stride, l->pad);
        break;
    case TD_L_GAP:
        l->out = (td_shape){x.c, 1, 1};
        break;
    case TD_L_DENSE: {
        l->bias = 1;
        json_t *u = json_object_get(o, "units");
        if (json_is_string(u) && strcmp(json_string_value(u), "classes") == 0)
            l->channels = m->classes;
        else if ((rc = td__int(b, o, "units", 1, 1 << 20, 1, &l->channels)))
            return td_set_error(b->err, b->cap, TD_E_SPEC,
                                "model.layers[%d].units: must be "
                                "an integer 1..%d or \"classes\"",
                                b->li, 1 << 20);
        if ((rc = td__bool(b, o, "bias", &l->bias)))
            return rc;
        int fan = x.c * x.h * x.w;
        int wd[2] = {l->channels, fan};
        td__add_param(b, L, "weight", TD_P_WEIGHT, 2, wd, fan);
        if (l->bias)
            td__add_param(b, L, "bias", TD_P_BIAS, 1, wd, fan);
        l->out = (td_shape){l->channels, 1, 1};
        b->flats[L] = 1;
        m->fwd_flops += 2.0 * fan * l->channels;
        break;
    }
    case TD_L_DROPOUT:
        l->rate = 0.5f;
        if ((rc = td__real(b, o, "rate", 0.0, 1.0, &l->rate)))
            return rc;
        l->out = x;
        break;
    case TD_L_FLATTEN:
        l->out = (td_shape){x.c * x.h * x.w, 1, 1};
        b->flats[L] = 1;
        break;
    case TD_L_RELU:
        l->out = x;
        break;
    case TD_L_ADD: {
        td_shape y = m->layers[l->in[1]].out;
        if (x.c != y.c || x.h != y.h || x.w != y.w ||
            b->flats[l->in[1]] != flat_in)
            return td_set_error(b->err, b->cap, TD_E_SPEC,
                                "model.layers[%d] (%s): inputs "
                                "\"%s\" %dx%dx%d and \"%s\" %dx%dx%d differ in "
                                "shape",
                                b->li, l->name, iname, x.c, x.h, x.w,
                                m->layers[l->in[1]].name, y.c, y.h, y.w);
        l->out = x;
        break;
    }
    case TD_L_INPUT:
        break;
    }
    if (l->out.h < 1 || l->out.w < 1)
        return td_set_error(
            b->err, b->cap, TD_E_SPEC,
            "model.layers[%d] (%s): input \"%s\" "
            "%dx%dx%d is too small for kernel %d, stride %d, pad "
            "%d",
            b->li, l->name, iname, x.c, x.h, x.w, l->kernel, l->stride, l->pad);
    /* Every tensor's values per sample fit an int, so that flatten and
     * dense (c * h * w of their input) and the backends cannot overflow. */
    if ((int64_t)l->out.c * l->out.h * l->out.w > INT_MAX)
        return td_set_error(b->err, b->cap, TD_E_SPEC,
                            "model.layers[%d] (%s): output %dx%dx%d has more "
                            "than %d values per sample",
                            b->li, l->name, l->out.c, l->out.h, l->out.w,
                            INT_MAX);
    return 0;
}

static int td__kind_of(td__mb *b, const json_t *o, enum td_layer_kind *k)
{
    json_t *t = json_object_get(o, "type");
    if (!json_is_string(t))
        return td_set_error(b->err, b->cap, TD_E_SPEC,
                            "model.layers[%d].type: missing or "
                            "not a string",
                            b->li);
    for (int i = 1; i < TD__NKINDS; i++)
        if (strcmp(json_string_value(t), td__kind_names[i]) == 0) {
            *k = (enum td_layer_kind)i;
            return 0;
        }
    return td_set_error(b->err, b->cap, TD_E_SPEC,
                        "model.layers[%d].type: unknown layer "
                        "type \"%s\"",
                        b->li, json_string_value(t));
}

/* Name and inputs of layer L from its JSON object. */
static int td__wire(td__mb *b, const json_t *o, int L)
{
    td_model *m = b->m;
    td_layer *l = &m->layers[L];
    json_t *n = json_object_get(o, "name");
    int rc;
    if (n) {
        if (!json_is_string(n) || json_string_length(n) == 0 ||
            json_string_length(n) >= TD_NAME_MAX)
            return td_set_error(b->err, b->cap, TD_E_SPEC,
                                "model.layers[%d].name: must be "
                                "a string of 1..%d characters",
                                b->li, TD_NAME_MAX - 1);
        if (td_model_find(m, json_string_value(n)) >= 0)
            return td_set_error(b->err, b->cap, TD_E_SPEC,
                                "model.layers[%d].name: \"%s\" "
                                "is already used",
                                b->li, json_string_value(n));
        snprintf(l->name, sizeof l->name, "%s", json_string_value(n));
    } else {
        snprintf(l->name, sizeof l->name, "%s%d", td__kind_names[l->kind], L);
    }
    l->in[0] = L - 1;
    l->in[1] = -1;
    if (l->kind == TD_L_ADD) {
        json_t *ins = json_object_get(o, "inputs");
        if (!json_is_array(ins) || json_array_size(ins) != 2)
            return td_set_error(b->err, b->cap, TD_E_SPEC,
                                "model.layers[%d].inputs: must be "
                                "an array of two layer names",
                                b->li);
        if ((rc = td__ref(b, json_array_get(ins, 0), "inputs[0]", &l->in[0])) ||
            (rc = td__ref(b, json_array_get(ins, 1), "inputs[1]", &l->in[1])))
            return rc;
    } else if (json_object_get(o, "input")) {
        if ((rc = td__ref(b, json_object_get(o, "input"), "input", &l->in[0])))
            return rc;
    }
    return 0;
}

static int td__check_top(td__mb *b, const json_t *def)
{
    const char *key;
    json_t *v;
    if (!json_is_object(def))
        return td_set_error(b->err, b->cap, TD_E_SPEC,
                            "model: must be a JSON object");
    json_object_foreach((json_t *)def, key, v)
    {
        if (strcmp(key, "name") && strcmp(key, "layers") &&
            strcmp(key, "description"))
            return td_set_error(b->err, b->cap, TD_E_SPEC,
                                "model.%s: unknown key", key);
    }
    json_t *layers = json_object_get(def, "layers");
    if (!json_is_array(layers) || json_array_size(layers) == 0)
        return td_set_error(b->err, b->cap, TD_E_SPEC,
                            "model.layers: must be a non-empty "
                            "array");
    if (json_array_size(layers) > 4096)
        return td_set_error(b->err, b->cap, TD_E_SPEC,
                            "model.layers: at most 4096 layers");
    return 0;
}

int td_model_build(const json_t *def, td_shape in, int classes,
                   td_model **out, char *err, size_t errcap)
{
    td__mb b = {.err = err, .cap = errcap};
    td_model *m = NULL;
    int rc = td__check_top(&b, def);
    *out = NULL;
    if (rc)
        return rc;
    if (in.c < 1 || in.c > 4 || in.h < 1 || in.w < 1 || classes < 2 ||
        (int64_t)in.c * in.h * in.w > INT_MAX)
        return td_set_error(err, errcap, TD_E_SPEC,
                            "model: input %dx%dx%d with %d classes "
                            "is not supported (1..4 channels, >= 2 classes)",
                            in.c, in.h, in.w, classes);
    json_t *layers = json_object_get(def, "layers");
    int n = (int)json_array_size(layers) + 1;
    m = calloc(1, sizeof *m);
    if (!m)
        return -ENOMEM;
    m->layers = calloc((size_t)n, sizeof *m->layers);
    m->params = calloc((size_t)n * 2, sizeof *m->params);
    m->state = calloc((size_t)n * 2, sizeof *m->state);
    b.flats = calloc((size_t)n, sizeof *b.flats);
    if (!m->layers || !m->params || !m->state || !b.flats) {
        rc = -ENOMEM;
        goto fail;
    }
    b.m = m;
    m->classes = classes;
    json_t *nm = json_object_get(def, "name");
    snprintf(m->name, sizeof m->name, "%s",
             json_is_string(nm) ? json_string_value(nm) : "model");
    m->layers[0] = (td_layer){.kind = TD_L_INPUT, .in = {-1, -1}, .out = in,
                              .param0 = -1, .state0 = -1};
    snprintf(m->layers[0].name, TD_NAME_MAX, "input");
    m->nlayers = 1;
    for (int L = 1; L < n; L++) {
        const json_t *o = json_array_get(layers, (size_t)L - 1);
        b.li = L - 1;
        if (!json_is_object(o)) {
            rc = td_set_error(err, errcap, TD_E_SPEC,
                              "model.layers[%d]: must be an object", b.li);
            goto fail;
        }
        td_layer *l = &m->layers[L];
        l->param0 = l->state0 = -1;
        if ((rc = td__kind_of(&b, o, &l->kind)) ||
            (rc = td__check_keys(&b, o, l->kind)) ||
            (rc = td__wire(&b, o, L)))
            goto fail;
        m->nlayers = L + 1;
        if ((rc = td__layer(&b, o, L)))
            goto fail;
        m->layers[l->in[0]].consumers++;
        if (l->in[1] >= 0)
            m->layers[l->in[1]].consumers++;
    }
    td_shape last = m->layers[n - 1].out;
    if (last.c != classes || last.h != 1 || last.w != 1) {
        rc = td_set_error(err, errcap, TD_E_SPEC,
                          "model.layers[%d] (%s): the last layer "
                          "must output %d classes, not %dx%dx%d",
                          n - 2, m->layers[n - 1].name, classes, last.c, last.h,
                          last.w);
        goto fail;
    }
    free(b.flats);
    *out = m;
    return 0;
fail:
    free(b.flats);
    td_model_free(m);
    return rc;
}

static int td__cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* "; the zoo there has a, b, c" (sorted names of dir's *.json), or "; DIR
 * has no model" / "; there is no folder DIR", into buf. */
static void td__zoo_names(const char *dir, char *buf, size_t cap)
{
    char *names[64];
    int n = 0;
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(buf, cap, "; there is no folder %s", dir);
        return;
    }
    struct dirent *e;
    while ((e = readdir(d)) && n < 64) {
        size_t len = strlen(e->d_name);
        if (len > 5 && e->d_name[0] != '.' &&
            strcmp(e->d_name + len - 5, ".json") == 0 &&
            (names[n] = strndup(e->d_name, len - 5)))
            n++;
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, td__cmp_str);
    size_t k = (size_t)snprintf(buf, cap, n ? "; the zoo there has"
                                            : "; %s has no model", dir);
    for (int i = 0; i < n; i++) {
        if (k < cap)
            k += (size_t)snprintf(buf + k, cap - k, "%s %s", i ? "," : "",
                                  names[i]);
        free(names[i]);
    }
}

int td_model_load_def(const char *dir, const char *name_or_path,
                      json_t **def, char *err, size_t errcap)
{
    char path[4096];
    size_t len = strlen(name_or_path);
    json_error_t je = {.line = -1};
    int zoo = 0; /* path is dir/NAME.json */
    *def = NULL;
    if (len > 5 && strcmp(name_or_path + len - 5, ".json") == 0)
        snprintf(path, sizeof path, "%s", name_or_path);
    else if (strchr(name_or_path, '/') || len == 0)
        return td_set_error(err, errcap, TD_E_SPEC,
                            "model: \"%s\" is neither a zoo name "
                            "nor a .json path",
                            name_or_path);
    else
        zoo = snprintf(path, sizeof path, "%s/%s.json", dir, name_or_path);
    /* A user's file: opened without blocking and only if regular (a FIFO
     * named as the model froze the caller, the daemon's loop at submit),
     * and no bigger than a layer graph can be (a sparse file of GBs was
     * read whole into memory). */
    int fd = td_open_regular(path);
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) == 0 && st.st_size > TD_MODEL_DEF_MAX) {
        close(fd);
        return td_set_error(err, errcap, TD_E_SPEC, "model: %s is %lld "
                            "bytes, more than a model definition may be "
                            "(%d MiB)", path, (long long)st.st_size,
                            TD_MODEL_DEF_MAX >> 20);
    }
    if (fd < 0 && !(fd == -ENOENT && zoo))
        return td_set_error(err, errcap, TD_E_SPEC, "model: %s: %s", path,
                            td_strerror(fd));
    *def = fd >= 0 ? json_loadfd(fd, JSON_REJECT_DUPLICATES, &je) : NULL;
    if (fd >= 0)
        close(fd);
    if (!*def && je.line < 1 && zoo && access(path, F_OK) != 0) {
        char names[512];
        td__zoo_names(dir, names, sizeof names);
        return td_set_error(err, errcap, TD_E_SPEC, "model: no zoo model "
                            "\"%s\" (%s does not exist%s; TD_MODELS_DIR "
                            "names the zoo folder)", name_or_path, path,
                            names);
    }
    if (!*def && je.line < 1) /* not opened or not read: no line to name */
        return td_set_error(err, errcap, TD_E_SPEC, "model: %s: %s", path,
                            je.text);
    if (!*def)
        return td_set_error(err, errcap, TD_E_SPEC, "model: %s:%d: %s", path,
                            je.line, je.text);
    return 0;
}

int td_model_load(const char *dir, const char *name_or_path, td_shape in,
                  int classes, td_model **out, char *err, size_t errcap)
{
    json_t *def;
    *out = NULL;
    int rc = td_model_load_def(dir, name_or_path, &def, err, errcap);
    if (rc)
        return rc;
    rc = td_model_build(def, in, classes, out, err, errcap);
    json_decref(def);
    return rc;
}

void td_model_free(td_model *m)
{
    if (!m)
        return;
    free(m->layers);
    free(m->params);
    free(m->state);
    free(m);
}

size_t td_model_state_count(const td_model *m)
{
    size_t n = 0;
    for (int s = 0; s < m->nstate; s++)
        n += m->state[s].count;
    return n;
}

int td_model_find(const td_model *m, const char *name)
{
    for (int i = 0; i < m->nlayers; i++)
        if (strcmp(m->layers[i].name, name) == 0)
            return i;
    return -1;
}

void td_model_init_params(const td_model *m, uint64_t seed, float *values)
{
    float *v = values;
    for (int p = 0; p < m->nparams; p++) {
        const td_param *pr = &m->params[p];
        uint64_t stream = td_rng_stream(TD_RNG_INIT, (uint64_t)p);
        double sd = sqrt(2.0 / (double)pr->fan_in);
        for (size_t i = 0; i < pr->count; i++) {
            switch (pr->role) {
            case TD_P_WEIGHT:
                v[i] = (float)(sd * td_rng_normal(seed, stream, i));
                break;
            case TD_P_BN_SCALE:
                v[i] = 1.0f;
                break;
            default:
                v[i] = 0.0f;
            }
        }
        v += pr->count;
    }
}
