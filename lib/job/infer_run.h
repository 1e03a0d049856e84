/* infer_run.h - `eval` and `predict` from start to result: a checkpoint's
 * model over a dataset (top-1, top-5, per-class accuracy, confusion
 * matrix) or over a list of image files (top-K classes with their
 * probabilities), as JSON.
 *
 * One implementation for both places they run: `trainctl eval/predict`
 * on the user's machine, and the daemon's trainer thread for eval and
 * predict jobs (docs/daemon.md#eval-and-predict-jobs).  The daemon stores
 * the result object in the job record and trainctl prints it exactly as
 * the local command does (the local command prints the same object).
 *
 * Owns: the predictor (infer.h), the input pipeline of an eval, the image
 * reads of a predict.  Never: prints, talks to a daemon, or writes files.
 * Files are read with opts->cred's identity when it is set (base/fscred.h:
 * the checkpoint and images by the calling thread, the dataset by the
 * pipeline's workers), so a daemon reads only what the submitter could.
 */
#ifndef TD_INFER_RUN_H
#define TD_INFER_RUN_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

struct td_fscred;

/* At most this many images per predict request through the daemon. */
#define TD_PREDICT_MAX_IMAGES 10000

typedef struct td_infer_run_opts {
    const char *checkpoint;   /* a self-describing checkpoint or export */
    const char *device;       /* "cpu" (NULL too) or "cuda:N" */
    int batch;                /* images per forward pass; 0: 32 (eval),
                                 16 (predict) */
    int workers;              /* eval: decode threads; 0: 2 */
    int threads;              /* compute threads on the CPU; 0: all */
    int top_k;                /* predict: classes per image; 0: 5 */
    long job;                 /* the daemon's job id for the pipeline's
                                 log lines (bad samples); 0: none */
    const struct td_fscred *cred; /* read files as this user; NULL: own */
    const atomic_int *stop;   /* non-zero: stop at the next batch
                                 (-ECANCELED); may be NULL */
    /* Progress after each batch: images done of total (may be NULL). */
    void (*progress)(void *user, int64_t done, int64_t total);
    /* predict: each image's entry of "predictions" as soon as it is
     * known, in the order of the files (borrowed; may be NULL). */
    void (*item)(void *user, const json_t *item);
    void *user;
} td_infer_run_opts;

/* Evaluates the model on `data` (an ImageFolder, a directory of shards, a
 * shard or a glob, as data.val takes) with the preprocessing of the job's
 * validation pass.  *result:
 *   {"checkpoint", "samples", "top1", "top5", "top1_correct",
 *    "top5_correct", "per_class": [{"class", "samples", "top1"}],
 *    "confusion": [[...]] (rows true, columns predicted), "left_out"
 *    (an ImageFolder's entries that are not samples: td_dataset_left_out),
 *    "left_out_first" (the first and why, when there are any)}
 * Errors (err is a sentence naming the file): the checkpoint's, the
 * dataset's ("DATA: ..."), classes that do not match the model's. */
int td_infer_eval(const td_infer_run_opts *o, const char *data,
                  json_t **result, char *err, size_t errcap);

/* Classifies n JPEG or PNG files.  A file that cannot be read or decoded
 * is an entry {"file", "error"} and the others go on.  *result:
 *   {"checkpoint", "top_k", "images", "failed",
 *    "predictions": [{"file", "top": [{"class", "label", "p"}]} | {"file",
 *    "error"}]}
 * An error (the checkpoint, a forward pass) returns non-zero; entries
 * already passed to o->item stand. */
int td_infer_predict(const td_infer_run_opts *o, const char *const *files,
                     int n, json_t **result, char *err, size_t errcap);

/* The text the local commands print, from a result above: eval's report
 * (to out), predict's lines (to out, failures to err_out as "trainctl
 * predict: FILE: why").  json: one compact JSON line (eval) or one line
 * per entry (predict) instead. */
void td_infer_eval_print(const json_t *result, int json, FILE *out);
void td_infer_predict_print_item(const json_t *item, int json, FILE *out,
                                 FILE *err_out);

#endif
