/* model.h - the layer graph of a model, built from its JSON definition.
 *
 * Owns: parsing a model definition (config/models/NAME.json), checking it,
 * inferring every tensor's shape, listing the trainable parameters and the
 * non-trained state (batch-norm running statistics) with their canonical
 * layouts, counting FLOPs, and seeded Kaiming initialisation on the host.
 * Never does: any arithmetic on activations (that is the backends' job).
 *
 * A definition looks like
 *   {"name": "fmnist-cnn", "layers": [
 *     {"type": "conv2d", "name": "conv1", "channels": 32, "kernel": 3,
 *      "pad": 1},
 *     {"type": "batchnorm"}, {"type": "relu"}, ...,
 *     {"type": "add", "inputs": ["block1_in", "bn2"]},
 *     {"type": "dense", "units": "classes"}]}
 * Each layer reads the previous layer's output unless it names another one
 * in "input"; "add" names both of its inputs.  The input shape (C, H, W)
 * and the number of classes come from the job, not from the definition.
 * The loss (softmax cross-entropy) follows the last layer, whose output
 * must be [classes, 1, 1].
 *
 * Tensor names (checkpoints, exports, `init`): "<layer name>.weight" and
 * ".bias" for conv2d and dense; batch norm's scale and shift are
 * "<layer>.weight" and "<layer>.bias", its running statistics
 * "<layer>.running_mean" and ".running_var" (PyTorch's names), and files
 * also carry "<layer>.num_batches_tracked" (int64 scalar, see
 * docs/checkpoints.md).  The zoo's layer names make these torchvision's
 * state_dict keys (scripts/gen_models.py).
 *
 * Canonical layouts (what snapshots, checkpoints and tests see):
 *   conv2d weight [out, in, kh, kw], bias [out]
 *   dense weight [out, in] where `in` runs over the input's (C, H, W) in
 *   that order (PyTorch's flatten order), bias [out]
 *   batchnorm scale (gamma) [C], shift (beta) [C]; state mean, var [C]
 */
#ifndef TD_MODEL_H
#define TD_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

enum td_layer_kind {
    TD_L_INPUT = 0, /* the normalised batch (layer 0, implicit) */
    TD_L_CONV,
    TD_L_BN,
    TD_L_RELU,
    TD_L_MAXPOOL,
    TD_L_AVGPOOL,
    TD_L_GAP, /* global average pool */
    TD_L_DENSE,
    TD_L_DROPOUT,
    TD_L_FLATTEN,
    TD_L_ADD,
};

#define TD_NAME_MAX 64

typedef struct td_shape {
    int c, h, w; /* per sample; dense outputs are [units, 1, 1] */
} td_shape;

typedef struct td_layer {
    enum td_layer_kind kind;
    char name[TD_NAME_MAX];
    int in[2];        /* input layer indices (in[1] only for add, else -1) */
    td_shape out;     /* output shape per sample */
    int kernel, stride, pad; /* conv2d, maxpool, avgpool */
    int channels;     /* conv2d out channels / dense units */
    int bias;         /* conv2d/dense: has a bias */
    float rate;       /* dropout drop probability */
    float eps, momentum; /* batchnorm (PyTorch's meaning of momentum) */
    int param0;       /* index of this layer's first parameter, or -1 */
    int state0;       /* batchnorm: index of its running mean in state */
    int consumers;    /* how many layers read this output */
} td_layer;

enum td_param_role {
    TD_P_WEIGHT = 0, /* Kaiming normal (fan_in, gain sqrt 2) */
    TD_P_BIAS,       /* zero */
    TD_P_BN_SCALE,   /* one */
    TD_P_BN_SHIFT,   /* zero */
};

typedef struct td_param {
    char name[TD_NAME_MAX + 16]; /* "conv1.weight" */
    enum td_param_role role;
    int layer;
    int ndims;
    int dims[4];      /* canonical layout, see above */
    size_t count;     /* elements */
    int fan_in;       /* for the initialisation */
} td_param;

/* Non-trained tensors that still belong to a snapshot. */
typedef struct td_state {
    char name[TD_NAME_MAX + 16]; /* "bn1.running_mean" */
    int layer;
    size_t count;
    float init;       /* 0 for the mean, 1 for the variance */
} td_state;

typedef struct td_model {
    char name[TD_NAME_MAX];
    int nlayers;      /* including the implicit input layer 0 */
    td_layer *layers;
    int nparams;
    td_param *params;
    int nstate;
    td_state *state;
    size_t param_count; /* total trainable scalars */
    int classes;
    double fwd_flops;   /* forward FLOPs per sample (2 per multiply-add) */
} td_model;

/* Builds a model from a definition for inputs of shape `in` and `classes`
 * classes.  On error returns TD_E_SPEC (or -ENOMEM) and writes a message
 * naming the offending path ("model.layers[3].kernel: must be 1..11") to
 * err.  `def` is borrowed. */
int td_model_build(const json_t *def, td_shape in, int classes,
                   td_model **out, char *err, size_t errcap);

/* Loads config/models/<name>.json from dir (or a path ending in .json),
 * then builds it as above. */
int td_model_load(const char *dir, const char *name_or_path, td_shape in,
                  int classes, td_model **out, char *err, size_t errcap);

/* The largest model definition (.json) read: a layer graph is a few KB. */
#define TD_MODEL_DEF_MAX (16 << 20)

/* The definition td_model_load builds, as read from its file (a new
 * reference in *def): what a self-describing checkpoint carries. */
int td_model_load_def(const char *dir, const char *name_or_path,
                      json_t **def, char *err, size_t errcap);

void td_model_free(td_model *m);

/* Scalars in all the model's non-trained state (batch-norm statistics). */
size_t td_model_state_count(const td_model *m);

/* Index of the layer named `name`, or -1. */
int td_model_find(const td_model *m, const char *name);

/* Fills values[i] (param_count floats in model order, each parameter in
 * its canonical layout) with the seeded initialisation.  Deterministic in
 * (seed, parameter index, element index). */
void td_model_init_params(const td_model *m, uint64_t seed, float *values);

/* Human-readable kind name ("conv2d", ...). */
const char *td_layer_kind_name(enum td_layer_kind k);

#endif
