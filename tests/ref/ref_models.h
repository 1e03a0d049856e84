/* ref_models.h - the models the backend suites run, by name: the zoo's
 * (config/models/<name>.json) first, then the test graphs in tests/data/.
 * Paths are found from TD_SOURCE_ROOT (set by tests/meson.build). */
#ifndef TD_REF_MODELS_H
#define TD_REF_MODELS_H

#include "model/model.h"

/* Builds model name for input in and classes; a Check failure naming the
 * file and the error when it cannot. */
td_model *ref_load_model(const char *name, td_shape in, int classes);

#endif
