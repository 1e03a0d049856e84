/* spec.h - the job spec: JSON in, a validated plain C struct out.
 *
 * One parser serves the daemon's `submit` and `traind --run`.  Every field,
 * its type, range and default lives in one table in spec.c (documented in
 * docs/job-spec.md).  Unknown keys, wrong types and out-of-range values are
 * errors that name the full path and the rule, e.g.
 *     input.augment[1].pads: unknown key
 *     optimizer.lr: must be > 0
 * Parsing stops at the FIRST error, which goes into the caller's buffer.
 *
 * The parsed spec keeps its normalised JSON (every default filled in,
 * relative paths made absolute); string fields and `model` point into it,
 * so they live until td_spec_free().  td_spec_hash() is a 64-bit FNV-1a of
 * that JSON dumped compact with sorted keys, leaving out init, freeze and
 * lr_mult while they hold their defaults and "precision",
 * "deterministic", "loss_scale" and "cuda_graphs" always (so older jobs
 * keep their hash, and a job resumes at another precision, loss scale or
 * graph mode):
 * parse(to_json(s)) hashes equal.
 */
#ifndef TD_SPEC_H
#define TD_SPEC_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "model/optim.h" /* enum td_optim_type, enum td_sched_type */

#define TD_SPEC_AUTO 0      /* value of an "auto" integer field */
#define TD_SPEC_MAX_AUG 16  /* augment ops per job */
#define TD_SPEC_MAX_CH 4    /* channels */
#define TD_SPEC_MAX_PATHS 64 /* shards in data.train / data.val */

enum td_spec_aug_op {
    TD_SPEC_AUG_RANDOM_RESIZED_CROP = 0,
    TD_SPEC_AUG_PAD_CROP,
    TD_SPEC_AUG_CENTER_CROP,
    TD_SPEC_AUG_RESIZE,
    TD_SPEC_AUG_FLIP,
    TD_SPEC_AUG_COLOR_JITTER,
};

typedef struct td_aug_spec {
    enum td_spec_aug_op op;
    int size[2];       /* [h, w]; 0 = input.size (crops, resize) */
    double scale[2];   /* random_resized_crop: area share [lo, hi] */
    double ratio[2];   /* random_resized_crop: aspect w/h [lo, hi] */
    int pad;           /* pad_crop */
    double p;          /* flip probability */
    double brightness, contrast, saturation; /* color_jitter */
} td_aug_spec;

/* data.train / data.val: one string or a list of shards/dirs/globs. */
typedef struct td_spec_paths {
    int n;                                  /* 0 = none */
    const char *v[TD_SPEC_MAX_PATHS];       /* absolute when a base is given */
} td_spec_paths;

enum td_input_source { TD_SOURCE_FILES = 0, TD_SOURCE_SYNTHETIC = 1 };
enum td_spec_layout { TD_SPEC_LAYOUT_AUTO = 0, TD_SPEC_LAYOUT_NHWC,
                      TD_SPEC_LAYOUT_NCHW };
/* "precision": the compute type (docs/compute.md); names in spec.c. */
enum td_precision { TD_PREC_AUTO = 0, TD_PREC_FP32, TD_PREC_TF32,
                    TD_PREC_BF16, TD_PREC_FP16 };

/* "loss_scale" (docs/job-spec.md): auto = dynamic for fp16, else off */
enum td_ls_mode { TD_LS_AUTO = 0, TD_LS_OFF, TD_LS_DYNAMIC, TD_LS_STATIC };
typedef struct td_spec_loss_scale {
    enum td_ls_mode mode;
    double scale;                    /* TD_LS_STATIC: in [1, 2^24] */
} td_spec_loss_scale;

typedef struct td_job_spec {
    const char *name;
    struct {
        td_spec_paths train, val;
        int classes;                 /* TD_SPEC_AUTO = from the dataset */
        double val_fraction;         /* held out of train; 0: none */
    } data;
    struct {
        int size[2];                 /* [h, w] */
        int channels;                /* 1 or 3 */
        int workers;                 /* TD_SPEC_AUTO or N */
        int prefetch;                /* TD_SPEC_AUTO or N batches */
        int n_augment;
        td_aug_spec augment[TD_SPEC_MAX_AUG];
        double mean[TD_SPEC_MAX_CH], std[TD_SPEC_MAX_CH]; /* per channel */
        enum td_input_source source;
        enum td_spec_layout layout;
    } input;
    const json_t *model;             /* zoo name (string) or inline object */
    struct {
        enum td_optim_type type;
        double lr, momentum, weight_decay, betas[2], eps;
        int nesterov;
        struct {
            enum td_sched_type type;
            int64_t warmup_steps, step_size;
            double gamma, min_lr;
        } schedule;
    } optimizer;
    double label_smoothing;          /* 0 <= e < 1, training loss only */
    int batch_size;
    int epochs;
    uint64_t seed;
    struct {
        int64_t every_steps;         /* 0 = only at epoch ends / on demand */
        int keep;
        int at_epoch_end;
        int keep_best;               /* best.safetensors by best_metric */
        int best_metric;             /* 0 val_loss (lower), 1 val_acc */
    } checkpoint;
    const char *device;              /* "auto", "cpu", "cuda", "cuda:N" */
    td_spec_paths init;              /* weights to start from (n <= 1) */
    td_spec_paths freeze;            /* parameter-name patterns (fnmatch)
                                        that do not train */
    int freeze_bn_stats;             /* batch norms with frozen scale and
                                        shift run in inference mode */
    const json_t *lr_mult;           /* {pattern: multiplier} of the lr */
    struct {
        int patience;                /* epochs without improvement; 0 off */
        int metric;                  /* 0 val_loss (lower), 1 val_acc */
        double min_delta;            /* improvement that counts */
    } early_stopping;
    double max_bad_ratio;
    int threads;                     /* TD_SPEC_AUTO or N */
    enum td_precision precision;     /* checked against the device later */
    int deterministic;               /* GPU: deterministic algorithms only */
    td_spec_loss_scale loss_scale;
    int cuda_graphs;                 /* enum td_cuda_graphs; CPU: ignored */
    struct {
        int warmup_steps, window_steps;
    } metrics;
    json_t *json;                    /* the normalised spec (owned) */
} td_job_spec;

/* Validates root into out.  base_dir (may be NULL) resolves relative data
 * paths.  Returns 0, or TD_E_SPEC with "path: rule" in err (may be NULL),
 * or -ENOMEM.  On failure out holds nothing to free (td_spec_free is safe). */
int td_spec_parse(const json_t *root, const char *base_dir, td_job_spec *out,
                  char *err, size_t errcap);

/* The rules that involve several fields (spec_rules.c), on a spec whose
 * fields each passed their own checks; td_spec_parse runs them.  0, or
 * TD_E_SPEC with "path: rule" in err (may be NULL). */
int td_spec_rules(const td_job_spec *s, char *err, size_t errcap);

/* Reads a job file, applies `key.path=value` overrides in order, and
 * parses with the file's directory as base.  -errno when the file cannot
 * be read, TD_E_SPEC for bad JSON (with line:column) or a bad spec. */
int td_spec_load_file(const char *path, const char *const *sets, int nsets,
                      td_job_spec *out, char *err, size_t errcap);

void td_spec_free(td_job_spec *spec);

/* The full normalised spec (a new reference; caller decrefs). */
json_t *td_spec_to_json(const td_job_spec *spec);

/* FNV-1a 64 of the canonical JSON (compact, sorted keys) of what the
 * job trains: without precision, deterministic, loss_scale, cuda_graphs
 * (ever), fields added later at their defaults, nor how it runs (name,
 * threads, max_bad_ratio, metrics, input.workers and .prefetch,
 * checkpoint.every_steps, .keep and .at_epoch_end). */
uint64_t td_spec_hash(const td_job_spec *spec);
/* Does a checkpoint's hash h belong to this spec: td_spec_hash, or the
 * hash of checkpoints written before 2026-11-28, with the run's knobs in
 * it? */
int td_spec_hash_matches(const td_job_spec *spec, uint64_t h);
/* The hash as 16 lowercase hex digits + NUL. */
void td_spec_hash_hex(const td_job_spec *spec, char out[17]);

/* Sets `path` (dots between keys, [N] for array elements, e.g.
 * "optimizer.lr" or "input.augment[0].pad") in root to value, parsed as
 * JSON when it parses ("3", "true", "[1,2]", "\"x\""), else taken as a
 * string.  Missing intermediate objects are created.  Returns 0 or
 * TD_E_SPEC with the offending path in err.  The key is checked later,
 * by td_spec_parse. */
int td_spec_apply_override(json_t *root, const char *path, const char *value,
                           char *err, size_t errcap);
/* The same for "path=value" (as given to --set). */
int td_spec_apply_set(json_t *root, const char *assignment, char *err,
                      size_t errcap);

/* Makes relative data.train / data.val paths (a string or a list) in
 * root absolute against base, or the current directory when base is NULL
 * (spec_paths.c).  Resolve a job file's paths against its folder, apply
 * --set overrides, then call this with NULL: what a person typed is
 * relative to where they are.  0 or -errno. */
int td_spec_absolute_paths(json_t *root, const char *base);
/* rel made absolute against base (an absolute path without symbolic
 * links, as realpath and getcwd give), its leading ./ and ../ resolved
 * ("/a/jobs" + "../data" is "/a/data"); a new string, NULL without
 * memory. */
json_t *td_spec_path_join(const char *base, const char *rel);

/* The spec's checks of a name (1-64 of A-Z a-z 0-9 . _ -) and of a device
 * string's syntax (cpu, auto, cuda:N; not whether the device exists), for
 * the other specs that take them (infer_spec.c).  1 if ok. */
int td_spec_name_ok(const char *s);
int td_spec_device_ok(const char *s);

const char *td_spec_aug_op_name(enum td_spec_aug_op op);

#endif
