/* infer_spec.h - the spec of an eval or predict job (issue 16).
 *
 * A job spec is a training spec (spec.h) unless it has a "task":
 *
 *   {"task": "eval", "checkpoint": PATH, "data": PATH,
 *    "device": "auto|cpu|cuda|cuda:N", "batch_size": N, "workers": N}
 *   {"task": "predict", "checkpoint": PATH, "images": [PATH, ...],
 *    "top_k": K, "device": ...}
 *
 * both with an optional "name".  Paths must be absolute (trainctl makes
 * them so).  Bounds: batch_size 1..4096 (32), workers 1..64 (2), top_k
 * 1..1000 (5), 1..TD_PREDICT_MAX_IMAGES images.  Unknown fields are
 * refused, naming the field.
 *
 * Owns: parsing and normalising that object.  Never: touches a file (the
 * daemon checks the paths, as the submitter, at submit).
 */
#ifndef TD_INFER_SPEC_H
#define TD_INFER_SPEC_H

#include <stddef.h>

#include <jansson.h>

enum td_task { TD_TASK_TRAIN = 0, TD_TASK_EVAL, TD_TASK_PREDICT };

typedef struct td_infer_spec {
    enum td_task task;      /* EVAL or PREDICT */
    char name[65];          /* "" when not given */
    char *checkpoint;
    char *data;             /* eval */
    char **images;          /* predict */
    int n_images;
    int top_k;              /* predict */
    int batch_size;         /* eval */
    int workers;            /* eval: decode threads */
    char device[32];        /* "auto", "cpu", "cuda", "cuda:N" */
} td_infer_spec;

/* The task of a spec object: TD_TASK_TRAIN when it has no "task".
 * TD_E_SPEC (err: "task: ...") for any other value. */
int td_spec_task(const json_t *spec, enum td_task *out, char *err,
                 size_t errcap);
const char *td_task_name(enum td_task t);

/* 0, or TD_E_SPEC with err naming the field ("images[3]: ...",
 * "spec: unknown field 'epochs' for a predict task (...)"). */
int td_infer_spec_parse(const json_t *spec, td_infer_spec *out, char *err,
                        size_t errcap);
/* The normalised object (every field, defaults filled in), or NULL. */
json_t *td_infer_spec_to_json(const td_infer_spec *s);
void td_infer_spec_free(td_infer_spec *s);

#endif
