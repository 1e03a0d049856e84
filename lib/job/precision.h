/* precision.h - a job's "precision" resolved for the device it runs on.
 *
 * Owns: the rules of docs/compute.md "Precision": which precisions each
 * device does, what "auto" picks, and the message when a device cannot do
 * what the job asks.  The daemon checks at submit (so a job that cannot
 * run is refused before it queues) and the runner resolves again when the
 * job starts (traind --run, and a daemon whose CPU changed).
 * Never does: compute, probe GPUs (the caller passes what it probed).
 */
#ifndef TD_PRECISION_H
#define TD_PRECISION_H

#include <stddef.h>

#include "backend/backend.h"
#include "job/device.h"
#include "job/spec.h"
#include "obs/metrics.h"

const char *td_precision_name(enum td_precision p);

/* The compute type for precision `want` on `device` ("cpu", "cuda" or
 * "cuda:N"; GPU details from info, which may be NULL).  Returns 0, or
 * TD_E_NOTSUP with "precision: bf16 needs ..." naming the device's
 * capability in err.  On a GPU *out is TD_F32 and tf32 is checked against
 * the compute capability in info; with info NULL the backend checks it
 * at create. */
int td_precision_resolve(enum td_precision want, const char *device,
                         const td_device_info *info, enum td_dtype *out,
                         char *err, size_t errcap);

/* What a compute-bound job's advice may say about precision
 * (obs/metrics.h): dt, the compute type the job got on device, is bf16 or
 * fp16 already (in use); fp32 on a GPU (its tensor cores do bf16 and fp16)
 * or on a CPU where auto picks bf16 (suggest it); else fp32 is the
 * fastest there is (a CPU without bf16, or where bf16 runs slower). */
enum td_precision_advice td_precision_advice(const char *device,
                                             enum td_dtype dt);

/* The backend's fp32 math for a job's precision (td_backend_config
 * fp32_math): tf32 -> TF32, auto -> AUTO (the CUDA backend picks by the
 * GPU's compute capability), anything else strict. */
enum td_fp32_math td_precision_fp32_math(enum td_precision p);

/* The check at submit: the job's device as td_device_select resolves it
 * against info, then td_precision_resolve.  A device that cannot be
 * selected is not this check's error (0): the job reports it when it
 * starts, as before. */
int td_precision_check_job(const td_job_spec *spec, const td_device_info *info,
                           char *err, size_t errcap);

/* The backend's loss scaling for a job (td_backend_config loss_scale and
 * loss_scale_interval): "auto" is dynamic for fp16 and off otherwise,
 * "dynamic" starts at TD_LS_INIT (2^16), a number is a static scale. */
void td_precision_loss_scale(const td_job_spec *s, float *scale,
                             int *interval);

#endif
