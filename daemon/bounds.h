/* bounds.h - resource bounds decided at submit (issue 17).
 *
 * A job spec is refused before it is queued when it asks for more than the
 * machine can give: more compute threads or decode workers than the CPUs
 * the daemon may run on, or more host memory (estimated from the spec and
 * the model's shapes) than max_job_memory_mb.  Refusals name the field.
 */
#ifndef TD_BOUNDS_H
#define TD_BOUNDS_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "job/spec.h"
#include "model/model.h"

typedef struct td_mem_estimate {
    uint64_t slots;       /* batch slots of the train and val pipelines */
    uint64_t scratch;     /* per decode worker */
    uint64_t model;       /* parameters, gradients, optimizer state */
    uint64_t activations; /* per-step outputs and their gradients */
    uint64_t total;
} td_mem_estimate;

/* CPUs this process may run on (sched_getaffinity), at least 1. */
int td_limits_cpus(void);
/* max_job_memory_mb in bytes ("auto": half of MemTotal). */
uint64_t td_limits_memory_cap(const json_t *settings);
/* The estimate for spec s; model may be NULL (not counted). */
void td_limits_estimate(const td_job_spec *s, const td_model *model,
                        td_mem_estimate *e);
/* 0, or -E2BIG / -EINVAL with "field: why" in err. */
int td_limits_check_spec(const json_t *settings, const td_job_spec *s,
                         const td_model *model, char *err, size_t errcap);

#endif
