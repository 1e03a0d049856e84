/* bounds.h - resource bounds decided at submit (issue 17).
 *
 * A job spec is refused before it is queued when it asks for more than the
 * machine can give: more compute threads or decode workers than the CPUs
 * the daemon may run on, more host memory (estimated from the spec and
 * the model's shapes) than max_job_memory_mb, or, for a job on a GPU, more
 * device memory (the memory planner's bill, memplan.h) than the GPU has or
 * max_job_device_memory_mb allows.  Refusals name the field.
 */
#ifndef TD_BOUNDS_H
#define TD_BOUNDS_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "job/device.h"
#include "job/spec.h"
#include "model/model.h"

typedef struct td_mem_estimate {
    uint64_t slots;       /* batch slots of the train and val pipelines */
    uint64_t scratch;     /* per decode worker */
    uint64_t model;       /* parameters, gradients, optimizer state (on a
                             GPU: the host's snapshot copy) */
    uint64_t activations; /* per-step outputs and their gradients (0 on a
                             GPU) */
    uint64_t total;
} td_mem_estimate;

/* CPUs this process may run on (sched_getaffinity), at least 1. */
int td_limits_cpus(void);
/* max_job_memory_mb in bytes ("auto": half of MemTotal). */
uint64_t td_limits_memory_cap(const json_t *settings);
/* A file a job reads whole (an init or checkpoint file), stat'ed by the
 * caller's thread as it is: TD_E_SPEC with err ("FIELD: PATH is 1100.0
 * MB, more than a job may hold in memory (max_job_memory_mb: ...)") when
 * it is a regular file larger than max_job_memory_mb; else 0 (a file
 * that is not there or not regular is for the opening to refuse).
 * Before, a user's sparse file of many GB was read whole at submit. */
int td_limits_check_file_size(const json_t *settings, const char *field,
                              const char *path, char *err, size_t errcap);
/* The host-memory estimate for spec s; model may be NULL (not counted).
 * on_gpu: the model's training state and activations live on the device,
 * so the host holds only the snapshot copy of parameters and state. */
void td_limits_estimate(const td_job_spec *s, const td_model *model,
                        int on_gpu, td_mem_estimate *e);
/* Device memory the CUDA backend allocates for spec s and model at create
 * as the planner bills it today (every layer's output and gradient kept,
 * fp32, a nominal cuDNN workspace and the headroom the runtime needs);
 * 0 when it cannot be planned. */
uint64_t td_limits_device_estimate(const td_job_spec *s,
                                   const td_model *model);
/* 0, or -E2BIG / -EINVAL with "field: why" in err.  devices (may be NULL:
 * no device check) are the GPUs the daemon found; model may be NULL (no
 * model-based parts). */
int td_limits_check_spec(const json_t *settings, const td_job_spec *s,
                         const td_model *model, const td_device_info *devices,
                         char *err, size_t errcap);

/* The bytes one checkpoint of the job takes at most: its fp32 parameters,
 * the optimizer's state (a momentum, or AdamW's two moments), the model's
 * state (batch-norm statistics) and room for the header (tensor names and
 * shapes, the model, the learning curves of every epoch).  0 without a
 * model. */
uint64_t td_limits_checkpoint_bytes(const td_job_spec *s,
                                    const td_model *model);
/* 0, or -ENOSPC with "checkpoint.keep: ..." in err when the file system
 * of folder dir has less room for unprivileged users (statvfs f_bavail)
 * than the job's checkpoints take at most: checkpoint.keep of them, the
 * best one (checkpoint.keep_best) and the one being written.  Folders
 * statvfs cannot read are not checked (0).  hint (or NULL) follows "free
 * some space" in the message, e.g. " (trainctl rm ...)". */
int td_limits_check_disk(const char *dir, const td_job_spec *s,
                         const td_model *model, const char *hint, char *err,
                         size_t errcap);

#endif
