/* optim.h - optimizer and learning-rate schedule configuration.
 *
 * Owns: the plain-C description of an optimizer and its schedule (what the
 * job spec's "optimizer" object is parsed into), their defaults, and the
 * schedule evaluated per step on the host.  The per-element update rules
 * live in kernels/optim.h so that the CPU and CUDA backends share them.
 * Never does: touch parameters (backends apply the update).
 */
#ifndef TD_OPTIM_H
#define TD_OPTIM_H

#include <stddef.h>
#include <stdint.h>

enum td_optim_type { TD_OPT_SGD = 0, TD_OPT_ADAMW = 1 };

enum td_sched_type {
    TD_SCHED_CONSTANT = 0,
    TD_SCHED_STEP = 1,   /* lr * gamma^(floor((s - warmup) / step_size)) */
    TD_SCHED_COSINE = 2, /* min_lr + (lr - min_lr) (1 + cos(pi p)) / 2,
                          * p from 0 to 1 */
};

typedef struct td_schedule_config {
    enum td_sched_type type;
    int64_t warmup_steps; /* linear from lr/warmup to lr over these steps */
    int64_t step_size;    /* TD_SCHED_STEP: steps between decays */
    double gamma;         /* TD_SCHED_STEP: decay factor */
    double min_lr;        /* TD_SCHED_COSINE: where it ends, 0..lr */
} td_schedule_config;

typedef struct td_optim_config {
    enum td_optim_type type;
    double lr;            /* peak learning rate */
    double momentum;      /* SGD */
    int nesterov;         /* SGD */
    double weight_decay;  /* SGD: L2 added to the gradient; AdamW: decoupled */
    double beta1, beta2, eps; /* AdamW */
    td_schedule_config schedule;
} td_optim_config;

/* A starting point for code that fills a td_optim_config by hand (tests,
 * benchmarks): sgd, lr 0.01, momentum 0.9, nesterov off, weight_decay 0,
 * betas 0.9 and 0.999, eps 1e-8, schedule constant, warmup 0, step_size
 * 1000, gamma 0.1; AdamW's weight decay 0.01.  A job never sees these: the
 * runner sets every field from its spec, whose defaults (lr required,
 * momentum 0, weight decay 0) are docs/job-spec.md#optimizer-defaults. */
void td_optim_defaults(td_optim_config *c, enum td_optim_type type);

/* Checks ranges; on error returns TD_E_SPEC with "optimizer.lr: must be
 * > 0"-style text in err. */
int td_optim_validate(const td_optim_config *c, char *err, size_t errcap);

/* Optimizer state tensors per parameter: 1 for SGD with momentum, 0 for
 * plain SGD, 2 for AdamW. */
int td_optim_slots(const td_optim_config *c);

/* The learning rate for 0-based step `step` of a job of `total_steps`. */
double td_schedule_lr(const td_optim_config *c, int64_t step,
                      int64_t total_steps);

const char *td_optim_type_name(enum td_optim_type t);
const char *td_sched_type_name(enum td_sched_type t);

#endif
