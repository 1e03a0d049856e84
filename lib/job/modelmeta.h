/* modelmeta.h - what a checkpoint or export says about its model, so
 * that the file alone is enough to predict with it.
 *
 * __metadata__ keys (values are strings, JSON where said; documented in
 * docs/checkpoints.md):
 *   traind.model       JSON: the layer graph (model.h), the zoo file's
 *                      content for a zoo name
 *   traind.classes     JSON array of class names, label order (for
 *                      datasets without names, the label as text: "0")
 *   traind.input       JSON {"size": [h, w], "channels": c,
 *                      "mean": [...], "std": [...]}: pixels / 255, minus
 *                      mean, over std, per channel, RGB order
 *   traind.preprocess  JSON {"augment": [...the job's ops, augment.h
 *                      td_augment_from_json format...], "mode": "eval",
 *                      "decode": ..., "resample": ...}: the evaluation
 *                      preprocessing (random ops take their eval
 *                      behaviour, see augment.h)
 *
 * Owns: building those entries from a job and reading them back.
 * Never: opens files itself or builds the model.
 */
#ifndef TD_MODELMETA_H
#define TD_MODELMETA_H

#include <stddef.h>

#include <jansson.h>

#include "input/augment.h"
#include "model/model.h"
#include "store/checkpoint.h"

typedef struct td_model_meta {
    json_t *graph;           /* the layer graph (owned reference) */
    int classes;
    char **class_names;      /* classes strings (owned) */
    td_shape in;             /* channels, height, width */
    float mean[4], std[4];
    td_augment augment[TD_AUG_MAX];
    int n_augment;
} td_model_meta;

/* Fills m from its parts; graph is referenced, names copied (NULL or a
 * NULL entry: the label as text).  0 or -ENOMEM. */
int td_model_meta_init(td_model_meta *m, const json_t *graph, td_shape in,
                       int classes, const char *const *names,
                       const float *mean, const float *std,
                       const td_augment *augment, int n_augment);
void td_model_meta_free(td_model_meta *m);

/* The __metadata__ entries above (a new object of strings), or NULL. */
json_t *td_model_meta_to_json(const td_model_meta *m);

/* Reads them from an open file.  TD_E_SPEC with err naming the key when
 * one is missing or malformed ("traind.input: ..."); a file without
 * traind.model gets "not self-describing (no traind.model metadata)". */
int td_model_meta_read(const td_ckpt_file *f, td_model_meta *out, char *err,
                       size_t errcap);

#endif
