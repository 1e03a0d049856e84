/* optim.c - optimizer defaults, validation and the learning-rate schedule
 * (see optim.h).  Never touches parameters. */
#include "model/optim.h"

#include <math.h>
#include <stdio.h>

#include "base/error.h"

void td_optim_defaults(td_optim_config *c, enum td_optim_type type)
{
    *c = (td_optim_config){
        .type = type,
        .lr = 0.01,
        .momentum = 0.9,
        .nesterov = 0,
        .weight_decay = type == TD_OPT_ADAMW ? 0.01 : 0.0,
        .beta1 = 0.9,
        .beta2 = 0.999,
        .eps = 1e-8,
        .schedule = {.type = TD_SCHED_CONSTANT, .warmup_steps = 0,
                     .step_size = 1000, .gamma = 0.1},
    };
}

#define TD__BAD(...)                                                         \
    do {                                                                     \
        if (err && errcap)                                                   \
            snprintf(err, errcap, __VA_ARGS__);                              \
        return TD_E_SPEC;                                                    \
    } while (0)

int td_optim_validate(const td_optim_config *c, char *err, size_t errcap)
{
    if (c->type != TD_OPT_SGD && c->type != TD_OPT_ADAMW)
        TD__BAD("optimizer.type: must be \"sgd\" or \"adamw\"");
    if (!(c->lr > 0 && c->lr < 1e3))
        TD__BAD("optimizer.lr: must be > 0 and < 1000");
    if (!(c->momentum >= 0 && c->momentum < 1))
        TD__BAD("optimizer.momentum: must be in [0, 1)");
    if (c->nesterov && !(c->momentum > 0))
        TD__BAD("optimizer.nesterov: needs momentum > 0");
    if (!(c->weight_decay >= 0 && c->weight_decay < 1))
        TD__BAD("optimizer.weight_decay: must be in [0, 1)");
    if (!(c->beta1 >= 0 && c->beta1 < 1))
        TD__BAD("optimizer.betas[0]: must be in [0, 1)");
    if (!(c->beta2 >= 0 && c->beta2 < 1))
        TD__BAD("optimizer.betas[1]: must be in [0, 1)");
    if (!(c->eps > 0 && c->eps < 1))
        TD__BAD("optimizer.eps: must be in (0, 1)");
    const td_schedule_config *s = &c->schedule;
    if (s->type != TD_SCHED_CONSTANT && s->type != TD_SCHED_STEP &&
        s->type != TD_SCHED_COSINE)
        TD__BAD("optimizer.schedule.type: must be \"constant\", \"step\" or "
                "\"cosine\"");
    if (s->warmup_steps < 0)
        TD__BAD("optimizer.schedule.warmup_steps: must be >= 0");
    if (s->type == TD_SCHED_STEP && s->step_size < 1)
        TD__BAD("optimizer.schedule.step_size: must be >= 1");
    if (s->type == TD_SCHED_STEP && !(s->gamma > 0 && s->gamma <= 1))
        TD__BAD("optimizer.schedule.gamma: must be in (0, 1]");
    if (!(s->min_lr >= 0 && s->min_lr <= c->lr))
        TD__BAD("optimizer.schedule.min_lr: must be in [0, lr]");
    return 0;
}

int td_optim_slots(const td_optim_config *c)
{
    if (c->type == TD_OPT_ADAMW)
        return 2;
    return c->momentum > 0 ? 1 : 0;
}

double td_schedule_lr(const td_optim_config *c, int64_t step,
                      int64_t total_steps)
{
    const td_schedule_config *s = &c->schedule;
    if (step < 0)
        step = 0;
    if (step < s->warmup_steps)
        return c->lr * (double)(step + 1) / (double)s->warmup_steps;
    int64_t k = step - s->warmup_steps;
    switch (s->type) {
    case TD_SCHED_STEP:
        return c->lr * pow(s->gamma, (double)(k / s->step_size));
    case TD_SCHED_COSINE: {
        int64_t span = total_steps - s->warmup_steps;
        double p = span > 0 ? (double)k / (double)span : 1.0;
        if (p > 1.0)
            p = 1.0;
        return s->min_lr + (c->lr - s->min_lr) * 0.5 * (1.0 + cos(M_PI * p));
    }
    default:
        return c->lr;
    }
}

const char *td_optim_type_name(enum td_optim_type t)
{
    return t == TD_OPT_ADAMW ? "adamw" : "sgd";
}

const char *td_sched_type_name(enum td_sched_type t)
{
    switch (t) {
    case TD_SCHED_STEP:
        return "step";
    case TD_SCHED_COSINE:
        return "cosine";
    default:
        return "constant";
    }
}
