/* finetune.h - starting a job from existing weights: the job's `init`
 * (a safetensors file loaded by name), `freeze` (parameter-name
 * patterns that do not train) and `lr_mult` (per-pattern learning-rate
 * multipliers).  docs/job-spec.md has the fields.
 *
 * Owns: the checks of both at submit, the partial load and its report,
 * the per-parameter lr multipliers.  Never: touches the device itself
 * (the runner hands the weights to the trainer).
 */
#ifndef TD_FINETUNE_H
#define TD_FINETUNE_H

#include <stddef.h>
#include <stdint.h>

#include "job/spec.h"
#include "model/model.h"

/* At submit: the init file (if any) is one absolute path to a safetensors
 * file at least one of whose tensors is named like a parameter or
 * running statistic of the job's model, and every freeze pattern matches
 * a parameter.  The model is built with data.classes (2 when "auto":
 * only names matter).  TD_E_SPEC with err naming the file or pattern. */
int td_job_check_init(const td_job_spec *s, const char *models_dir,
                      char *err, size_t errcap);

/* The per-parameter lr multipliers: *out (malloc'd, m->nparams) is the
 * product of the lr_mult values whose patterns match the parameter's name
 * (fnmatch; 1 when none does), and 0 when a freeze pattern matches; NULL
 * when the job has neither.  TD_E_SPEC for a pattern that matches no
 * parameter. */
int td_job_lr_mult(const td_model *m, const td_job_spec *s, float **out,
                   char *err, size_t errcap);

/* The batch norms that run in inference mode while the job trains (its
 * freeze_bn_stats): *out (malloc'd, m->nlayers) is 1 for a batch-norm
 * layer whose scale and shift both have multiplier 0 in mult (from
 * td_job_lr_mult), else 0; NULL when freeze_bn_stats is off.  TD_E_SPEC
 * when it is on and no batch norm qualifies. */
int td_job_bn_eval(const td_model *m, const td_job_spec *s,
                   const float *mult, uint8_t **out, char *err,
                   size_t errcap);

/* Copies the tensors of `path` whose names and shapes match into params
 * and state (which hold the fresh initialisation): the others keep it.
 * report gets "init from PATH: N loaded, M re-initialised (shape
 * differs: fc.weight, fc.bias), K not in the file, I ignored".
 * TD_E_SPEC when no tensor matched (err names the file). */
int td_job_init_weights(const td_model *m, const char *path, float *params,
                        float *state, char *report, size_t repcap,
                        char *err, size_t errcap);

#endif
