/* infer.h - a model with given weights, for predictions on the CPU.
 *
 * Builds the model (a layer graph and an input shape), creates a CPU
 * backend, loads the weights by name from a safetensors file (a traind
 * checkpoint, an export, or a torchvision state_dict saved as
 * safetensors: every parameter and running statistic must be there with
 * the model's shape), and runs forward passes in evaluation mode (batch
 * norm on its running statistics, dropout off) on uint8 images, exactly
 * as the job's validation pass does.  `trainctl eval/predict` and the
 * torchvision cross-check (tests/ref) use it.
 *
 * Owns: its model, backend and metadata.  Never: decodes images (the
 * caller hands in pixels of the model's input size), trains, or writes.
 */
#ifndef TD_INFER_H
#define TD_INFER_H

#include <stddef.h>
#include <stdint.h>

#include "job/modelmeta.h"
#include "model/model.h"

typedef struct td_infer td_infer;

/* From explicit metadata (graph, input, classes, normalisation) and a
 * weights file.  batch: the most images per call.  threads: 0 = all
 * cores.  Errors name the file and the tensor ("w.safetensors: tensor
 * \"fc.weight\" is F32 [10, 512] in the file, the model's is ...").
 * meta is copied. */
int td_infer_create(const td_model_meta *meta, const char *weights,
                    int batch, int threads, td_infer **out, char *err,
                    size_t errcap);

/* From a self-describing file alone (a checkpoint or export written by
 * traind; modelmeta.h). */
int td_infer_open(const char *path, int batch, int threads, td_infer **out,
                  char *err, size_t errcap);
/* The same on a device: "cpu" or "cuda:N" (a build with CUDA; the
 * daemon's eval and predict jobs run on their job's device). */
int td_infer_open_on(const char *path, const char *device, int batch,
                     int threads, td_infer **out, char *err, size_t errcap);

void td_infer_free(td_infer *inf);

const td_model_meta *td_infer_meta(const td_infer *inf);
const td_model *td_infer_model(const td_infer *inf);

/* Logits of n images (1 <= n <= batch): pixels are uint8, n x h x w x c
 * (NHWC, the model's input size), logits receives n x classes floats. */
int td_infer_logits(td_infer *inf, const uint8_t *nhwc, int n, float *logits,
                    char *err, size_t errcap);

#endif
