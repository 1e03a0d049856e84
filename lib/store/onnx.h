/* onnx.h - a model and its weights as an ONNX file, for other runtimes.
 *
 * The graph (opset TD_ONNX_OPSET, IR version 7):
 *   input  "pixels": float32 [N, C, H, W], RGB (or grey) pixel values
 *          0..255 of the preprocessed image (docs/checkpoints.md): the
 *          normalisation is folded in as Mul(1 / (255 std)) and
 *          Add(-mean / std), one value per channel, as traind computes it
 *   output "logits": float32 [N, classes] (no softmax)
 * Layers map one to one: conv2d -> Conv, batchnorm -> BatchNormalization
 * (inference form), relu -> Relu, maxpool -> MaxPool, avgpool ->
 * AveragePool (padding excluded from the mean, as traind), global_avgpool
 * -> GlobalAveragePool, dense -> Flatten (when its input is an image) +
 * Gemm (transB), flatten -> Flatten, add -> Add, dropout -> Identity.
 * Value names are the layer names; initializers the tensor names of
 * model.h.  The self-describing metadata (modelmeta.h) goes into
 * metadata_props.
 *
 * Owns: the ONNX encoding through protobuf-c and Debian's onnx.proto.
 * Never: runs the model.
 */
#ifndef TD_ONNX_H
#define TD_ONNX_H

#include <stddef.h>

#include <jansson.h>

#include "model/model.h"

#define TD_ONNX_OPSET 13

/* Writes the model with params (model order) and state (running
 * statistics) to path (td_write_atomic: tmp, fsync, rename, fsync of the
 * folder).  mean/std: the input's normalisation per channel.
 * extra_meta: strings for metadata_props (may be NULL).  0, or -errno /
 * -ENOMEM / TD_E_NOTSUP with err. */
int td_onnx_save(const td_model *m, const float *params, const float *state,
                 const float *mean, const float *std,
                 const json_t *extra_meta, const char *path, char *err,
                 size_t errcap);

#endif
