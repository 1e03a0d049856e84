/* weights.h - a model's tensors by name, in and out of safetensors files.
 *
 * The names are model.h's: "<layer>.weight", ".bias", ".running_mean",
 * ".running_var", plus "<layer>.num_batches_tracked" (int64, shape [])
 * for each batch-norm layer, which traind writes and never reads back
 * (it only matters to PyTorch when momentum is None).  With the zoo's
 * layer names these are torchvision's state_dict keys, so a torchvision
 * state_dict saved as safetensors loads here and an export loads there
 * with strict=True.
 *
 * Owns: matching a file's tensors to a model's parameters and state, and
 * writing a model's weights as a plain safetensors file.
 * Never: touches a device, or trusts a tensor whose dtype or shape differs
 * from the model's (it is reported, never reinterpreted).
 */
#ifndef TD_WEIGHTS_H
#define TD_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "model/model.h"
#include "store/checkpoint.h"

/* What a load did, tensor by tensor. */
typedef struct td_weights_report {
    int loaded;    /* parameters and state tensors copied from the file */
    int reshaped;  /* present with another shape or dtype: kept as given */
    int missing;   /* not in the file: kept as given */
    int ignored;   /* in the file, not in the model (optimizer slots and
                      num_batches_tracked are not counted) */
    char first_reshaped[160]; /* a name, for messages ("" if none) */
    char first_missing[160];
} td_weights_report;

/* The name of layer L's batch-norm step counter into out. */
void td_weights_bn_count_name(const td_model *m, int L, char *out,
                              size_t cap);

/* Number of batch-norm layers (one num_batches_tracked each). */
int td_weights_bn_layers(const td_model *m);

/* Copies the model's tensors found by name in f into params
 * (m->param_count floats, model order) and state (td_model_state_count
 * floats; may be NULL when the model has none).  strict: every parameter
 * and state tensor must be there as F32 with the model's shape, else
 * TD_E_SPEC with err naming the first that is not (nothing is promised
 * about params/state then).  Not strict: what matches is copied, the rest
 * keeps the values the caller put there; rep says which.  rep may be
 * NULL. */
int td_weights_load(const td_model *m, const td_ckpt_file *f, int strict,
                    float *params, float *state, td_weights_report *rep,
                    char *err, size_t errcap);

/* Writes params and state under their names, num_batches_tracked = nbt
 * for every batch-norm layer, and extra_meta (may be NULL) in
 * __metadata__, durably to path.  0 or -errno/-ENOMEM with err. */
int td_weights_save(const td_model *m, const float *params,
                    const float *state, int64_t nbt, const json_t *extra_meta,
                    const char *path, char *err, size_t errcap);

#endif
