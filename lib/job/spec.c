/* spec.c - job spec parsing, validation, normalisation, hashing (job files
 * and --set overrides: spec_file.c).
 *
 * Owns: the table of every job-spec field (path, type, range, default) —
 * the ONE place defaults are written (docs/job-spec.md mirrors it) — and
 * the walk that checks a JSON document against it.  The walk visits the
 * user's keys first (anything not in the table is "unknown key"), then every
 * table entry in order, taking the user's value or the default, checking
 * it, storing it in the C struct and writing the normalised value into the
 * spec's own JSON tree.  Cross-field rules (spec_rules.c) run after the
 * walk.
 * Never: touches the file system beyond reading a job file, probes devices
 * (the device name is checked for syntax only), or resolves models or data.
 */
#include "job/spec.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/json.h"
#include "job/device.h"

/* ---- the table ---------------------------------------------------------- */

enum td__kind {
    K_OBJ,     /* a section: an object of further fields */
    K_INT,     /* int */
    K_I64,     /* int64_t */
    K_U64,     /* uint64_t, a JSON integer >= 0 */
    K_NUM,     /* double */
    K_BOOL,    /* int 0/1 */
    K_ENUM,    /* int index into names[] */
    K_AUTO,    /* int: "auto" (TD_SPEC_AUTO) or an integer in range */
    K_SIZE2,   /* int[2]: N or [h, w]; 0 = input.size */
    K_PAIR,    /* double[2] */
    K_CHLIST,  /* double[channels]; default: def filled per channel */
    K_PATHS,   /* td_spec_paths */
    K_MODEL,   /* const json_t *: zoo name or inline object */
    K_AUGLIST, /* the augment ops */
    K_DEVICE,  /* const char *: auto | cpu | cuda | cuda:N */
    K_NAME,    /* const char *: 1-64 of [A-Za-z0-9._-] */
    K_CHANNELS, /* int: 1 or 3 */
    K_STRLIST, /* td_spec_paths of plain strings (not resolved) */
    K_NUMMAP,  /* const json_t *: {string: number in [lo, hi]} */
    K_LSCALE   /* td_spec_loss_scale: names[] (auto, off, dynamic) or a
                  static scale in [lo, hi] */
};

enum {
    F_LO_OPEN = 1,  /* value > lo (else >= lo) */
    F_HI_OPEN = 2,  /* value < hi (else <= hi) */
    F_NULLABLE = 4, /* null is allowed and means "none" */
    F_ORDERED = 8,  /* K_PAIR: lo <= hi */
};

struct td__field {
    const char *path;          /* dotted, relative to the table's root */
    enum td__kind kind;
    const char *def;           /* default as JSON text; NULL = required */
    double lo, hi;
    unsigned flags;
    const char *const *names;  /* K_ENUM */
    size_t off;                /* offset in td_job_spec / td_aug_spec */
};

static const char *const td__sources[] = {"files", "synthetic", NULL};
static const char *const td__layouts[] = {"auto", "nhwc", "nchw", NULL};
static const char *const td__opts[] = {"sgd", "adamw", NULL};
static const char *const td__scheds[] = {"constant", "step", "cosine", NULL};
static const char *const td__es_metrics[] = {"val_loss", "val_acc", NULL};
/* enum td_precision order; the device check runs at submit (precision.c) */
static const char *const td__precisions[] = {"auto", "fp32", "tf32", "bf16",
                                             "fp16", NULL};
/* enum td_ls_mode order; a number is TD_LS_STATIC */
static const char *const td__ls_modes[] = {"auto", "off", "dynamic", NULL};
/* enum td_cuda_graphs order (backend.h): off 0, on 1, auto 2 */
static const char *const td__graphs[] = {"off", "on", "auto", NULL};
static const char *const td__ops[] = {"random_resized_crop", "pad_crop",
                                      "center_crop", "resize", "flip",
                                      "color_jitter", NULL};

#define INF HUGE_VAL
#define S(f) offsetof(td_job_spec, f)
#define A(f) offsetof(td_aug_spec, f)

static const struct td__field td__spec_fields[] = {
    {"name", K_NAME, "\"job\"", 0, 0, 0, NULL, S(name)},
    {"data", K_OBJ, "{}", 0, 0, 0, NULL, 0},
    {"data.train", K_PATHS, "null", 0, 0, F_NULLABLE, NULL, S(data.train)},
    {"data.val", K_PATHS, "null", 0, 0, F_NULLABLE, NULL, S(data.val)},
    {"data.classes", K_AUTO, "\"auto\"", 2, 1000000, 0, NULL,
     S(data.classes)},
    {"data.val_fraction", K_NUM, "0", 0, 1, F_HI_OPEN, NULL,
     S(data.val_fraction)},
    {"input", K_OBJ, "{}", 0, 0, 0, NULL, 0},
    {"input.size", K_SIZE2, "[224, 224]", 1, 8192, 0, NULL, S(input.size)},
    {"input.channels", K_CHANNELS, "3", 1, 3, 0, NULL, S(input.channels)},
    /* the pipeline's TD_PIPELINE_MAX_WORKERS */
    {"input.workers", K_AUTO, "\"auto\"", 1, 64, 0, NULL,
     S(input.workers)},
    {"input.prefetch", K_AUTO, "\"auto\"", 1, 256, 0, NULL,
     S(input.prefetch)},
    {"input.augment", K_AUGLIST, "[]", 0, 0, 0, NULL, 0},
    {"input.normalize", K_OBJ, "{}", 0, 0, 0, NULL, 0},
    {"input.normalize.mean", K_CHLIST, "0", -INF, INF, 0, NULL,
     S(input.mean)},
    {"input.normalize.std", K_CHLIST, "1", 0, INF, F_LO_OPEN, NULL,
     S(input.std)},
    {"input.source", K_ENUM, "\"files\"", 0, 0, 0, td__sources,
     S(input.source)},
    {"input.layout", K_ENUM, "\"auto\"", 0, 0, 0, td__layouts,
     S(input.layout)},
    {"model", K_MODEL, NULL, 0, 0, 0, NULL, S(model)},
    {"optimizer", K_OBJ, "{}", 0, 0, 0, NULL, 0},
    {"optimizer.type", K_ENUM, "\"sgd\"", 0, 0, 0, td__opts,
     S(optimizer.type)},
    {"optimizer.lr", K_NUM, NULL, 0, 100, F_LO_OPEN, NULL, S(optimizer.lr)},
    {"optimizer.momentum", K_NUM, "0", 0, 1, F_HI_OPEN, NULL,
     S(optimizer.momentum)},
    {"optimizer.nesterov", K_BOOL, "false", 0, 0, 0, NULL,
     S(optimizer.nesterov)},
    /* weight_decay and eps as the optimizer takes them (optim.c) */
    {"optimizer.weight_decay", K_NUM, "0", 0, 1, F_HI_OPEN, NULL,
     S(optimizer.weight_decay)},
    {"optimizer.betas", K_PAIR, "[0.9, 0.999]", 0, 1, F_HI_OPEN, NULL,
     S(optimizer.betas)},
    {"optimizer.eps", K_NUM, "1e-8", 0, 1, F_LO_OPEN | F_HI_OPEN, NULL,
     S(optimizer.eps)},
    {"optimizer.schedule", K_OBJ, "{}", 0, 0, 0, NULL, 0},
    {"optimizer.schedule.type", K_ENUM, "\"constant\"", 0, 0, 0, td__scheds,
     S(optimizer.schedule.type)},
    {"optimizer.schedule.warmup_steps", K_I64, "0", 0, 1e12, 0, NULL,
     S(optimizer.schedule.warmup_steps)},
    {"optimizer.schedule.step_size", K_I64, "1000", 1, 1e12, 0, NULL,
     S(optimizer.schedule.step_size)},
    {"optimizer.schedule.gamma", K_NUM, "0.1", 0, 1, F_LO_OPEN, NULL,
     S(optimizer.schedule.gamma)},
    {"optimizer.schedule.min_lr", K_NUM, "0", 0, INF, 0, NULL,
     S(optimizer.schedule.min_lr)},
    {"label_smoothing", K_NUM, "0", 0, 1, F_HI_OPEN, NULL,
     S(label_smoothing)},
    {"batch_size", K_INT, "64", 1, 65536, 0, NULL, S(batch_size)},
    {"epochs", K_INT, "10", 1, 100000, 0, NULL, S(epochs)},
    {"seed", K_U64, "1", 0, INF, 0, NULL, S(seed)},
    {"checkpoint", K_OBJ, "{}", 0, 0, 0, NULL, 0},
    {"checkpoint.every_steps", K_I64, "1000", 0, 1e12, 0, NULL,
     S(checkpoint.every_steps)},
    {"checkpoint.keep", K_INT, "3", 1, 1000, 0, NULL, S(checkpoint.keep)},
    {"checkpoint.at_epoch_end", K_BOOL, "true", 0, 0, 0, NULL,
     S(checkpoint.at_epoch_end)},
    {"checkpoint.keep_best", K_BOOL, "false", 0, 0, 0, NULL,
     S(checkpoint.keep_best)},
    {"checkpoint.best_metric", K_ENUM, "\"val_loss\"", 0, 0, 0,
     td__es_metrics, S(checkpoint.best_metric)},
    {"device", K_DEVICE, "\"auto\"", 0, 0, 0, NULL, S(device)},
    {"init", K_PATHS, "null", 0, 0, F_NULLABLE, NULL, S(init)},
    {"freeze", K_STRLIST, "[]", 0, 0, 0, NULL, S(freeze)},
    {"freeze_bn_stats", K_BOOL, "false", 0, 0, 0, NULL, S(freeze_bn_stats)},
    {"lr_mult", K_NUMMAP, "{}", 0, 1000, 0, NULL, S(lr_mult)},
    {"early_stopping", K_OBJ, "{}", 0, 0, 0, NULL, 0},
    {"early_stopping.patience", K_INT, "0", 0, 100000, 0, NULL,
     S(early_stopping.patience)},
    {"early_stopping.metric", K_ENUM, "\"val_loss\"", 0, 0, 0, td__es_metrics,
     S(early_stopping.metric)},
    {"early_stopping.min_delta", K_NUM, "0", 0, INF, 0, NULL,
     S(early_stopping.min_delta)},
    {"max_bad_ratio", K_NUM, "0.01", 0, 1, 0, NULL, S(max_bad_ratio)},
    {"threads", K_AUTO, "\"auto\"", 1, 1024, 0, NULL, S(threads)},
    {"precision", K_ENUM, "\"auto\"", 0, 0, 0, td__precisions,
     S(precision)},
    {"deterministic", K_BOOL, "false", 0, 0, 0, NULL, S(deterministic)},
    {"loss_scale", K_LSCALE, "\"auto\"", 1, 16777216, 0, td__ls_modes,
     S(loss_scale)},
    {"cuda_graphs", K_ENUM, "\"auto\"", 0, 0, 0, td__graphs,
     S(cuda_graphs)},
    {"metrics", K_OBJ, "{}", 0, 0, 0, NULL, 0},
    {"metrics.warmup_steps", K_INT, "20", 0, 1000000, 0, NULL,
     S(metrics.warmup_steps)},
    {"metrics.window_steps", K_INT, "100", 1, 1000000, 0, NULL,
     S(metrics.window_steps)},
};

/* Augment ops: one table each; "op" comes first in every one. */
#define OP_FIELD {"op", K_ENUM, NULL, 0, 0, 0, td__ops, A(op)}
static const struct td__field td__aug_rrc[] = {
    OP_FIELD,
    {"size", K_SIZE2, "0", 0, 8192, 0, NULL, A(size)},
    {"scale", K_PAIR, "[0.08, 1.0]", 0, 1, F_LO_OPEN | F_ORDERED, NULL,
     A(scale)},
    {"ratio", K_PAIR, "[0.75, 1.3333333333333333]", 0, 100,
     F_LO_OPEN | F_ORDERED, NULL, A(ratio)},
};
static const struct td__field td__aug_pad[] = {
    OP_FIELD,
    {"pad", K_INT, "4", 1, 1024, 0, NULL, A(pad)},
};
static const struct td__field td__aug_center[] = {
    OP_FIELD,
    {"size", K_SIZE2, "0", 0, 8192, 0, NULL, A(size)},
};
static const struct td__field td__aug_resize[] = {
    OP_FIELD,
    {"size", K_SIZE2, NULL, 1, 8192, 0, NULL, A(size)},
};
static const struct td__field td__aug_flip[] = {
    OP_FIELD,
    {"p", K_NUM, "0.5", 0, 1, 0, NULL, A(p)},
};
static const struct td__field td__aug_jitter[] = {
    OP_FIELD,
    {"brightness", K_NUM, "0", 0, 1, 0, NULL, A(brightness)},
    {"contrast", K_NUM, "0", 0, 1, 0, NULL, A(contrast)},
    {"saturation", K_NUM, "0", 0, 1, 0, NULL, A(saturation)},
};

#define N(a) (sizeof(a) / sizeof((a)[0]))
static const struct {
    const struct td__field *f;
    size_t n;
} td__aug_tables[] = {
    {td__aug_rrc, N(td__aug_rrc)},       {td__aug_pad, N(td__aug_pad)},
    {td__aug_center, N(td__aug_center)}, {td__aug_resize, N(td__aug_resize)},
    {td__aug_flip, N(td__aug_flip)},     {td__aug_jitter, N(td__aug_jitter)},
};

const char *td_spec_aug_op_name(enum td_spec_aug_op op)
{
    return (unsigned)op < N(td__aug_tables) ? td__ops[op] : "?";
}

/* ---- errors ------------------------------------------------------------- */

struct td__ctx {
    char *err;
    size_t cap;
    td_job_spec *spec;
    const char *base;
};

__attribute__((format(printf, 3, 4))) static int
td__fail(struct td__ctx *c, const char *path, const char *fmt, ...)
{
    va_list ap;
    if (!c->err || !c->cap)
        return TD_E_SPEC;
    int n = snprintf(c->err, c->cap, "%s: ", path);
    if (n >= 0 && (size_t)n < c->cap) {
        va_start(ap, fmt);
        vsnprintf(c->err + n, c->cap - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return TD_E_SPEC;
}

/* "must be > 0", "must be in [0, 1)", "must be an integer in 1..256" */
static int td__range_fail(struct td__ctx *c, const char *path,
                          const struct td__field *f, int integer)
{
    if (integer && isinf(f->hi))
        return td__fail(c, path, "must be an integer >= %.17g", f->lo);
    if (integer)
        return td__fail(c, path, "must be an integer in %.17g..%.17g", f->lo,
                        f->hi);
    if (isinf(f->hi))
        return td__fail(c, path, "must be %s %.17g",
                        f->flags & F_LO_OPEN ? ">" : ">=", f->lo);
    return td__fail(c, path, "must be in %c%.17g, %.17g%c",
                    f->flags & F_LO_OPEN ? '(' : '[', f->lo, f->hi,
                    f->flags & F_HI_OPEN ? ')' : ']');
}

static int td__in_range(const struct td__field *f, double v)
{
    if (isnan(v))
        return 0;
    if (f->flags & F_LO_OPEN ? v <= f->lo : v < f->lo)
        return 0;
    if (f->flags & F_HI_OPEN ? v >= f->hi : v > f->hi)
        return 0;
    return 1;
}

/* ---- values ------------------------------------------------------------- */

static int td__get_int(struct td__ctx *c, const char *path,
                       const struct td__field *f, const json_t *v,
                       long long *out)
{
    if (json_is_real(v)) /* not "must be an integer, not a number" */
        return td__fail(c, path, "must be an integer written without a "
                        "decimal point or exponent, not %.17g",
                        json_real_value(v));
    if (!json_is_integer(v))
        return td__fail(c, path, "must be an integer, not %s",
                        td_json_type_name(json_typeof(v)));
    long long x = json_integer_value(v);
    if (!td__in_range(f, (double)x))
        return td__range_fail(c, path, f, 1);
    *out = x;
    return 0;
}

static int td__get_num(struct td__ctx *c, const char *path,
                       const struct td__field *f, const json_t *v,
                       double *out)
{
    if (!json_is_number(v))
        return td__fail(c, path, "must be a number, not %s",
                        td_json_type_name(json_typeof(v)));
    double x = json_number_value(v);
    if (!td__in_range(f, x))
        return td__range_fail(c, path, f, 0);
    *out = x;
    return 0;
}

/* "loss_scale": "auto", "off", "dynamic" or a static scale. */
static int td__lscale(struct td__ctx *c, const struct td__field *f,
                      const json_t *v, const char *path, void *dst,
                      json_t **norm)
{
    td_spec_loss_scale *ls = dst;
    if (json_is_string(v)) {
        const char *name = json_string_value(v);
        for (int i = 0; f->names[i]; i++)
            if (strcmp(name, f->names[i]) == 0) {
                ls->mode = (enum td_ls_mode)i;
                ls->scale = 0;
                *norm = json_string(name);
                return 0;
            }
        return td__fail(c, path, "must be \"auto\", \"off\", \"dynamic\" "
                        "or a number (a static scale), not \"%s\"", name);
    }
    if (!json_is_number(v))
        return td__fail(c, path, "must be \"auto\", \"off\", \"dynamic\" "
                        "or a number (a static scale), not %s",
                        td_json_type_name(json_typeof(v)));
    double x = json_number_value(v);
    if (!(x >= f->lo && x <= f->hi))
        return td__fail(c, path, "a static scale must be in [1, 16777216] "
                        "(2^24), not %g", x);
    ls->mode = TD_LS_STATIC;
    ls->scale = x;
    *norm = json_real(x);
    return 0;
}

static int td__size2(struct td__ctx *c, const char *path,
                     const struct td__field *f, const json_t *v, int *out,
                     json_t **norm)
{
    long long hw[2];
    char p[300];
    int r;
    if (json_is_integer(v)) {
        if ((r = td__get_int(c, path, f, v, &hw[0])) < 0)
            return r;
        hw[1] = hw[0];
    } else if (json_is_array(v) && json_array_size(v) == 2) {
        for (int i = 0; i < 2; i++) {
            snprintf(p, sizeof p, "%s[%d]", path, i);
            if ((r = td__get_int(c, p, f, json_array_get(v, (size_t)i),
                                 &hw[i])) < 0)
                return r;
        }
        if ((hw[0] == 0) != (hw[1] == 0))
            return td__fail(c, path, "use 0 for both or neither");
    } else {
        return td__fail(c, path, "must be an integer or [height, width]");
    }
    if (hw[0] == 0) { /* 0 = the input size, already parsed */
        hw[0] = c->spec->input.size[0];
        hw[1] = c->spec->input.size[1];
    }
    out[0] = (int)hw[0];
    out[1] = (int)hw[1];
    *norm = json_pack("[II]", (json_int_t)hw[0], (json_int_t)hw[1]);
    return 0;
}

static int td__pair(struct td__ctx *c, const char *path,
                    const struct td__field *f, const json_t *v, double *out,
                    json_t **norm)
{
    char p[300];
    int r;
    if (!json_is_array(v) || json_array_size(v) != 2)
        return td__fail(c, path, "must be an array of 2 numbers");
    for (int i = 0; i < 2; i++) {
        snprintf(p, sizeof p, "%s[%d]", path, i);
        if ((r = td__get_num(c, p, f, json_array_get(v, (size_t)i),
                             &out[i])) < 0)
            return r;
    }
    if ((f->flags & F_ORDERED) && out[0] > out[1])
        return td__fail(c, path, "needs [lo, hi] with lo <= hi");
    *norm = json_pack("[ff]", out[0], out[1]);
    return 0;
}

static int td__chlist(struct td__ctx *c, const char *path,
                      const struct td__field *f, const json_t *v,
                      double *out, json_t **norm)
{
    int ch = c->spec->input.channels;
    char p[300];
    int r;
    if (json_is_number(v)) { /* one value for every channel (the default
                                 is written this way), range-checked as
                                 an element would be */
        if ((r = td__get_num(c, path, f, v, &out[0])) < 0)
            return r;
        for (int i = 1; i < ch; i++)
            out[i] = out[0];
    } else if (!json_is_array(v)) {
        return td__fail(c, path, "must be an array of numbers");
    } else if ((int)json_array_size(v) != ch) {
        return td__fail(c, path, "needs 1 value per channel (%d)", ch);
    } else {
        for (int i = 0; i < ch; i++) {
            snprintf(p, sizeof p, "%s[%d]", path, i);
            if ((r = td__get_num(c, p, f, json_array_get(v, (size_t)i),
                                 &out[i])) < 0)
                return r;
        }
    }
    *norm = json_array();
    for (int i = 0; i < ch; i++)
        json_array_append_new(*norm, json_real(out[i]));
    return 0;
}

/* A path made absolute against the base directory. */
static json_t *td__resolve(const struct td__ctx *c, const char *s)
{
    if (s[0] == '/' || !c->base || !c->base[0])
        return json_string(s);
    return td_spec_path_join(c->base, s);
}

static int td__paths(struct td__ctx *c, const char *path, const json_t *v,
                     td_spec_paths *out, json_t **norm)
{
    char p[300];
    out->n = 0;
    if (json_is_null(v)) {
        *norm = json_null();
        return 0;
    }
    if (json_is_string(v)) {
        if (!json_string_length(v))
            return td__fail(c, path, "must not be empty");
        *norm = td__resolve(c, json_string_value(v));
        return 0;
    }
    if (!json_is_array(v) || json_array_size(v) == 0)
        return td__fail(c, path,
                        "must be a path or a non-empty array of paths");
    if (json_array_size(v) > TD_SPEC_MAX_PATHS)
        return td__fail(c, path, "at most %d paths", TD_SPEC_MAX_PATHS);
    for (size_t i = 0; i < json_array_size(v); i++) {
        const json_t *e = json_array_get(v, i);
        snprintf(p, sizeof p, "%s[%zu]", path, i);
        if (!json_is_string(e) || !json_string_length(e))
            return td__fail(c, p, "must be a non-empty string");
    }
    *norm = json_array();
    for (size_t i = 0; i < json_array_size(v); i++)
        json_array_append_new(
            *norm, td__resolve(c, json_string_value(json_array_get(v, i))));
    return 0;
}

/* A list of non-empty strings (freeze patterns), kept as given. */
static int td__strlist(struct td__ctx *c, const char *path, const json_t *v,
                       json_t **norm)
{
    char p[300];
    if (!json_is_array(v))
        return td__fail(c, path, "must be an array of strings");
    if (json_array_size(v) > TD_SPEC_MAX_PATHS)
        return td__fail(c, path, "at most %d entries", TD_SPEC_MAX_PATHS);
    for (size_t i = 0; i < json_array_size(v); i++) {
        const json_t *e = json_array_get(v, i);
        snprintf(p, sizeof p, "%s[%zu]", path, i);
        if (!json_is_string(e) || !json_string_length(e) ||
            json_string_length(e) > 200)
            return td__fail(c, p, "must be a string of 1..200 characters");
    }
    *norm = json_deep_copy(v);
    return 0;
}

/* An object of pattern -> number (lr multipliers), kept as given. */
static int td__nummap(struct td__ctx *c, const struct td__field *f,
                      const char *path, const json_t *v, json_t **norm)
{
    const char *key;
    json_t *x;
    char p[300];
    if (!json_is_object(v))
        return td__fail(c, path, "must be an object of pattern: number");
    if (json_object_size(v) > TD_SPEC_MAX_PATHS)
        return td__fail(c, path, "at most %d entries", TD_SPEC_MAX_PATHS);
    json_object_foreach((json_t *)v, key, x) {
        snprintf(p, sizeof p, "%s.%s", path, key);
        if (!*key || strlen(key) > 200)
            return td__fail(c, path, "patterns are 1..200 characters");
        if (!json_is_number(x) || json_number_value(x) < f->lo ||
            json_number_value(x) > f->hi)
            return td__fail(c, p, "must be a number in [%g, %g]", f->lo,
                            f->hi);
    }
    *norm = json_deep_copy(v);
    return 0;
}

/* Points out->v[] at the strings inside the stored normalised value. */
static void td__paths_bind(const json_t *norm, td_spec_paths *out)
{
    if (json_is_string(norm)) {
        out->n = 1;
        out->v[0] = json_string_value(norm);
    } else if (json_is_array(norm)) {
        out->n = (int)json_array_size(norm);
        for (int i = 0; i < out->n; i++)
            out->v[i] = json_string_value(json_array_get(norm, (size_t)i));
    }
}

int td_spec_name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n < 1 || n > 64)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && !strchr("._-", s[i]))
            return 0;
    return 1;
}

int td_spec_device_ok(const char *s)
{
    td_device_info fake;
    td_device_choice ch;
    memset(&fake, 0, sizeof fake);
    fake.cuda_count = TD_MAX_GPUS; /* syntax only, not presence */
    return td_device_select(s, &fake, &ch, NULL, 0) == 0;
}

static int td__parse_obj(struct td__ctx *c, const json_t *obj,
                         const struct td__field *tab, size_t n,
                         const char *tpath, const char *msgbase, char *base,
                         json_t *out);
static int td__parse_augment(struct td__ctx *c, const json_t *v,
                             const char *path, json_t **norm);

/* Checks one leaf value v (never NULL) and stores it; *norm receives the
 * normalised JSON for it. */
/* Integer kinds: K_INT, K_I64, K_U64, K_CHANNELS, and K_AUTO's number. */
static int td__leaf_int(struct td__ctx *c, const struct td__field *f,
                        const json_t *v, const char *path, void *dst,
                        json_t **norm)
{
    long long i = 0;
    int r = td__get_int(c, path, f, v, &i);
    if (r < 0)
        return r;
    if (f->kind == K_CHANNELS && i != 1 && i != 3)
        return td__fail(c, path, "must be 1 or 3");
    if (f->kind == K_I64)
        *(int64_t *)dst = i;
    else if (f->kind == K_U64)
        *(uint64_t *)dst = (uint64_t)i;
    else
        *(int *)dst = (int)i;
    *norm = json_integer(i);
    return 0;
}

static int td__leaf_enum(struct td__ctx *c, const struct td__field *f,
                         const json_t *v, const char *path, void *dst,
                         json_t **norm)
{
    char list[256] = "";
    for (int k = 0; json_is_string(v) && f->names[k]; k++)
        if (strcmp(f->names[k], json_string_value(v)) == 0) {
            *(int *)dst = k;
            *norm = json_string(f->names[k]);
            return 0;
        }
    for (int k = 0; f->names[k]; k++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s",
                 k ? ", " : "", f->names[k]);
    return td__fail(c, path, "must be one of %s", list);
}

/* String-valued kinds kept as JSON: model, device, name. */
static int td__leaf_str(struct td__ctx *c, const struct td__field *f,
                        const json_t *v, const char *path, json_t **norm)
{
    const char *s = json_string_value(v);
    if (f->kind == K_MODEL && json_is_object(v)) {
        *norm = json_deep_copy(v);
        return 0;
    }
    if (f->kind == K_MODEL && (!s || !*s))
        return td__fail(c, path, "must be a model name or a model object");
    if (f->kind == K_DEVICE && (!s || !td_spec_device_ok(s)))
        return td__fail(c, path, "must be auto, cpu, cuda or cuda:N");
    if (f->kind == K_NAME && (!s || !td_spec_name_ok(s)))
        return td__fail(c, path,
                        "must be 1-64 characters of A-Z a-z 0-9 . _ -");
    *norm = json_string(s);
    return 0;
}

/* Checks one leaf value v (never NULL) and stores it; *norm receives the
 * normalised JSON for it. */
static int td__leaf(struct td__ctx *c, const struct td__field *f,
                    const json_t *v, const char *path, char *base,
                    json_t **norm)
{
    void *dst = base + f->off;
    double d;
    int r;

    switch (f->kind) {
    case K_INT:
    case K_I64:
    case K_U64:
    case K_CHANNELS:
        return td__leaf_int(c, f, v, path, dst, norm);
    case K_NUM:
        if ((r = td__get_num(c, path, f, v, &d)) < 0)
            return r;
        *(double *)dst = d;
        *norm = json_real(d);
        return 0;
    case K_BOOL:
        if (!json_is_boolean(v))
            return td__fail(c, path, "must be true or false, not %s",
                            td_json_type_name(json_typeof(v)));
        *(int *)dst = json_is_true(v);
        *norm = json_boolean(json_is_true(v));
        return 0;
    case K_ENUM:
        return td__leaf_enum(c, f, v, path, dst, norm);
    case K_AUTO:
        if (json_is_string(v) && strcmp(json_string_value(v), "auto") == 0) {
            *(int *)dst = TD_SPEC_AUTO;
            *norm = json_string("auto");
            return 0;
        }
        if (!json_is_integer(v))
            return td__fail(c, path, "must be \"auto\" or an integer");
        return td__leaf_int(c, f, v, path, dst, norm);
    case K_SIZE2:
        return td__size2(c, path, f, v, dst, norm);
    case K_PAIR:
        return td__pair(c, path, f, v, dst, norm);
    case K_CHLIST:
        return td__chlist(c, path, f, v, dst, norm);
    case K_PATHS:
        return td__paths(c, path, v, dst, norm);
    case K_STRLIST:
        return td__strlist(c, path, v, norm);
    case K_NUMMAP:
        return td__nummap(c, f, path, v, norm);
    case K_LSCALE:
        return td__lscale(c, f, v, path, dst, norm);
    case K_AUGLIST:
        return td__parse_augment(c, v, path, norm);
    case K_MODEL:
    case K_DEVICE:
    case K_NAME:
        return td__leaf_str(c, f, v, path, norm);
    case K_OBJ:
        break;
    }
    return td__fail(c, path, "internal: unhandled field kind");
}

/* After the value is stored in the output tree: point the struct at it. */
static void td__bind(const struct td__field *f, const json_t *stored,
                     char *base)
{
    void *dst = base + f->off;
    if (f->kind == K_PATHS || f->kind == K_STRLIST)
        td__paths_bind(stored, dst);
    else if (f->kind == K_MODEL || f->kind == K_NUMMAP)
        *(const json_t **)dst = stored;
    else if (f->kind == K_DEVICE || f->kind == K_NAME)
        *(const char **)dst = json_string_value(stored);
}

/* ---- the walk ----------------------------------------------------------- */

static const char *td__leaf_name(const char *path)
{
    const char *d = strrchr(path, '.');
    return d ? d + 1 : path;
}

static int td__is_child(const char *path, const char *tpath)
{
    size_t tl = strlen(tpath);
    if (tl == 0)
        return strchr(path, '.') == NULL;
    return strncmp(path, tpath, tl) == 0 && path[tl] == '.' &&
           strchr(path + tl + 1, '.') == NULL;
}

static int td__parse_obj(struct td__ctx *c, const json_t *obj,
                         const struct td__field *tab, size_t n,
                         const char *tpath, const char *msgbase, char *base,
                         json_t *out)
{
    const char *key;
    const json_t *v;
    char path[512], msg[600];
    int r;

    json_object_foreach((json_t *)obj, key, v) {
        snprintf(path, sizeof path, "%s%s%s", tpath, *tpath ? "." : "", key);
        size_t k = 0;
        while (k < n && strcmp(tab[k].path, path) != 0)
            k++;
        if (k == n) {
            snprintf(msg, sizeof msg, "%s%s", msgbase, path);
            return td__fail(c, msg, "unknown key");
        }
    }
    for (size_t k = 0; k < n; k++) {
        const struct td__field *f = &tab[k];
        if (!td__is_child(f->path, tpath))
            continue;
        const char *leaf = td__leaf_name(f->path);
        snprintf(msg, sizeof msg, "%s%s", msgbase, f->path);
        json_t *given = json_object_get(obj, leaf), *def = NULL, *norm = NULL;
        if (!given && !f->def)
            return td__fail(c, msg, "missing (required)");
        if (!given && !(def = json_loads(f->def, JSON_DECODE_ANY, NULL)))
            return td__fail(c, msg, "internal: bad default");
        const json_t *val = given ? given : def;
        if (json_is_null(val) && !(f->flags & F_NULLABLE)) {
            r = td__fail(c, msg, "must not be null");
        } else if (f->kind == K_OBJ) {
            if (!json_is_object(val))
                r = td__fail(c, msg, "must be an object, not %s",
                             td_json_type_name(json_typeof(val)));
            else if (!(norm = json_object()))
                r = -ENOMEM;
            else
                r = td__parse_obj(c, val, tab, n, f->path, msgbase, base,
                                  norm);
        } else {
            r = td__leaf(c, f, val, msg, base, &norm);
        }
        json_decref(def);
        if (r == 0 && !norm)
            r = -ENOMEM;
        if (r == 0 && json_object_set_new(out, leaf, norm) < 0)
            r = -ENOMEM;
        else if (r < 0)
            json_decref(norm);
        if (r < 0)
            return r;
        td__bind(f, json_object_get(out, leaf), base);
    }
    return 0;
}

static int td__parse_augment(struct td__ctx *c, const json_t *v,
                             const char *path, json_t **norm)
{
    char p[320];
    int r;
    if (!json_is_array(v))
        return td__fail(c, path, "must be an array of ops");
    if (json_array_size(v) > TD_SPEC_MAX_AUG)
        return td__fail(c, path, "at most %d ops", TD_SPEC_MAX_AUG);
    if (!(*norm = json_array()))
        return -ENOMEM;
    c->spec->input.n_augment = 0;
    for (size_t i = 0; i < json_array_size(v); i++) {
        const json_t *e = json_array_get(v, i);
        td_aug_spec *a = &c->spec->input.augment[i];
        snprintf(p, sizeof p, "%s[%zu]", path, i);
        if (!json_is_object(e))
            return td__fail(c, p, "must be an object with \"op\"");
        const json_t *op = json_object_get(e, "op");
        size_t k = 0;
        while (json_is_string(op) && td__ops[k] &&
               strcmp(td__ops[k], json_string_value(op)) != 0)
            k++;
        if (!op || !json_is_string(op) || !td__ops[k]) {
            /* the op table's own check words the message */
            json_t *tmp = NULL;
            strcat(p, ".op");
            if (!op)
                return td__fail(c, p, "missing (required)");
            r = td__leaf(c, &td__aug_rrc[0], op, p,
                         (char *)a, &tmp);
            json_decref(tmp);
            return r < 0 ? r : TD_E_SPEC;
        }
        json_t *o = json_object();
        if (!o)
            return -ENOMEM;
        json_array_append_new(*norm, o);
        strcat(p, ".");
        memset(a, 0, sizeof *a);
        if ((r = td__parse_obj(c, e, td__aug_tables[k].f, td__aug_tables[k].n,
                               "", p, (char *)a, o)) < 0)
            return r;
        c->spec->input.n_augment = (int)i + 1;
    }
    return 0;
}

/* ---- public ------------------------------------------------------------- */

int td_spec_parse(const json_t *root, const char *base_dir, td_job_spec *out,
                  char *err, size_t errcap)
{
    struct td__ctx c = {err, errcap, out, base_dir};
    int r;
    memset(out, 0, sizeof *out);
    if (err && errcap)
        err[0] = '\0';
    if (!json_is_object(root))
        return td__fail(&c, "(spec)", "must be a JSON object");
    if (!(out->json = json_object()))
        return -ENOMEM;
    r = td__parse_obj(&c, root, td__spec_fields, N(td__spec_fields), "", "",
                      (char *)out, out->json);
    if (r == 0)
        r = td_spec_rules(out, err, errcap);
    if (r < 0)
        td_spec_free(out);
    return r;
}

void td_spec_free(td_job_spec *spec)
{
    if (!spec)
        return;
    json_decref(spec->json);
    memset(spec, 0, sizeof *spec);
}

json_t *td_spec_to_json(const td_job_spec *spec)
{
    return json_deep_copy(spec->json);
}

/* Fields added after checkpoints existed: hashed only when set, so a job
 * that does not use them keeps the hash (and resumes from the checkpoints)
 * it had before they existed. */
static const char *const td__hash_if_set[][2] = {
    {"init", "null"}, {"freeze", "[]"}, {"freeze_bn_stats", "false"},
    {"lr_mult", "{}"},
    {"early_stopping",
     "{\"patience\": 0, \"metric\": \"val_loss\", \"min_delta\": 0.0}"},
    {"checkpoint.keep_best", "false"},
    {"checkpoint.best_metric", "\"val_loss\""}};

/* How a job runs, not what it trains: left out of the hash since
 * 2026-11-28, so a job may resume with more threads or decode workers,
 * another checkpoint cadence or metrics window, another name.  Sample
 * order, augmentation and initialisation derive from (seed, position),
 * never from these.  Checkpoints written before carry the hash with them
 * (td_spec_hash_matches). */
static const char *const td__run_knobs[] = {
    "name", "threads", "max_bad_ratio", "metrics", "input.workers",
    "input.prefetch", "checkpoint.every_steps", "checkpoint.keep",
    "checkpoint.at_epoch_end"};

/* The object holding *key in j ("key", or one level: "section.key", when
 * *key is moved past the dot), or NULL. */
static json_t *td__hash_section(json_t *j, const char **key)
{
    const char *dot = strchr(*key, '.');
    if (!dot)
        return j;
    char sec[32];
    snprintf(sec, sizeof sec, "%.*s", (int)(dot - *key), *key);
    *key = dot + 1;
    return json_object_get(j, sec);
}

static uint64_t td__hash(const td_job_spec *spec, int legacy)
{
    uint64_t h = UINT64_C(0xcbf29ce484222325);
    json_t *j = json_deep_copy(spec->json);
    for (size_t i = 0; j && !legacy &&
                       i < sizeof td__run_knobs / sizeof *td__run_knobs;
         i++) {
        const char *key = td__run_knobs[i];
        json_t *obj = td__hash_section(j, &key);
        if (json_is_object(obj))
            json_object_del(obj, key);
    }
    for (size_t i = 0; j && i < sizeof td__hash_if_set /
                                    sizeof td__hash_if_set[0]; i++) {
        json_t *def = json_loads(td__hash_if_set[i][1], JSON_DECODE_ANY,
                                 NULL);
        const char *key = td__hash_if_set[i][0];
        json_t *obj = td__hash_section(j, &key);
        json_t *v = json_object_get(obj, key);
        if (v && def && json_equal(v, def))
            json_object_del(obj, key);
        json_decref(def);
    }
    /* Without "precision": checkpoints keep fp32 master weights, so a job
     * may resume at another precision (and older checkpoints, from before
     * the field, keep their hash). */
    if (j)
        json_object_del(j, "precision");
    /* Nor "deterministic": it chooses among algorithms computing the same
     * thing, so a job may resume with or without it.  Nor "loss_scale",
     * like precision: the scaler restarts when it changes. */
    if (j)
        json_object_del(j, "deterministic");
    if (j)
        json_object_del(j, "loss_scale");
    /* Nor "cuda_graphs": graphs on and off compute bitwise the same. */
    if (j)
        json_object_del(j, "cuda_graphs");
    char *s = j ? json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(j);
    if (!s)
        return 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        h ^= *p;
        h *= UINT64_C(0x100000001b3);
    }
    free(s);
    return h;
}

uint64_t td_spec_hash(const td_job_spec *spec)
{
    return td__hash(spec, 0);
}

int td_spec_hash_matches(const td_job_spec *spec, uint64_t h)
{
    return h == td__hash(spec, 0) || h == td__hash(spec, 1);
}

void td_spec_hash_hex(const td_job_spec *spec, char out[17])
{
    snprintf(out, 17, "%016llx", (unsigned long long)td_spec_hash(spec));
}
