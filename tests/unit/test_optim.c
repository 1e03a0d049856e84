/* test_optim.c - the optimizer configuration (model/optim.c): the
 * learning-rate schedules against their closed forms, computed here
 * independently at hand-picked steps (warm-up, step decay, cosine), the
 * state slot counts, and validation errors that name the field. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "model/optim.h"
#include "tdtest.h"

static td_optim_config cfg(enum td_sched_type t, double lr, int64_t warmup)
{
    td_optim_config c;
    td_optim_defaults(&c, TD_OPT_SGD);
    c.lr = lr;
    c.schedule.type = t;
    c.schedule.warmup_steps = warmup;
    return c;
}

/* Relative closeness: the schedule is a few flops from the closed form. */
#define LR_EQ(got, want)                                                     \
    ck_assert_msg(fabs((got) - (want)) <= 1e-12 * fabs(want) + 1e-15,       \
                  "lr %.17g, want %.17g", (double)(got), (double)(want))

START_TEST(test_constant_is_flat)
{
    td_optim_config c = cfg(TD_SCHED_CONSTANT, 0.05, 0);
    for (int64_t s = 0; s < 1000; s += 97)
        LR_EQ(td_schedule_lr(&c, s, 1000), 0.05);
    LR_EQ(td_schedule_lr(&c, 5000, 1000), 0.05); /* past the end */
    LR_EQ(td_schedule_lr(&c, -3, 1000), 0.05);   /* before the start */
}
END_TEST

/* Warm-up of W steps: step s < W gets lr * (s + 1) / W, so the last
 * warm-up step reaches lr and the first is lr / W. */
START_TEST(test_warmup_is_linear_to_lr)
{
    static const enum td_sched_type types[] = {
        TD_SCHED_CONSTANT, TD_SCHED_STEP, TD_SCHED_COSINE};
    for (int t = 0; t < 3; t++) {
        td_optim_config c = cfg(types[t], 0.4, 8);
        c.schedule.step_size = 3;
        LR_EQ(td_schedule_lr(&c, 0, 100), 0.05);
        LR_EQ(td_schedule_lr(&c, 3, 100), 0.2);
        LR_EQ(td_schedule_lr(&c, 7, 100), 0.4);
        LR_EQ(td_schedule_lr(&c, 8, 100), 0.4); /* first step after it */
        LR_EQ(td_schedule_lr(&c, -1, 100), 0.05); /* clamped to step 0 */
    }
}
END_TEST

/* Step decay (torch.optim.lr_scheduler.StepLR): lr * gamma^floor(k /
 * step_size), k the steps since the warm-up. */
START_TEST(test_step_decay_closed_form)
{
    td_optim_config c = cfg(TD_SCHED_STEP, 0.1, 0);
    c.schedule.step_size = 30;
    c.schedule.gamma = 0.5;
    static const struct {
        int64_t step;
        double lr;
    } want[] = {{0, 0.1},    {29, 0.1},     {30, 0.05},  {59, 0.05},
                {60, 0.025}, {89, 0.025},   {90, 0.0125}, {299, 0.1 / 512},
                {300, 0.1 / 1024}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        LR_EQ(td_schedule_lr(&c, want[i].step, 1000), want[i].lr);
    /* with a warm-up of 10 the decays move 10 steps later */
    c.schedule.warmup_steps = 10;
    LR_EQ(td_schedule_lr(&c, 39, 1000), 0.1);
    LR_EQ(td_schedule_lr(&c, 40, 1000), 0.05);
}
END_TEST

/* Cosine (CosineAnnealingLR with T_max = total - warmup, eta_min 0):
 * lr * (1 + cos(pi * k / T_max)) / 2; lr at the first step after the
 * warm-up, lr / 2 half-way, 0 at the end and after it. */
START_TEST(test_cosine_closed_form)
{
    td_optim_config c = cfg(TD_SCHED_COSINE, 0.2, 0);
    LR_EQ(td_schedule_lr(&c, 0, 100), 0.2);
    LR_EQ(td_schedule_lr(&c, 50, 100), 0.1);
    LR_EQ(td_schedule_lr(&c, 25, 100), 0.1 * (1 + sqrt(0.5)));
    LR_EQ(td_schedule_lr(&c, 75, 100), 0.1 * (1 - sqrt(0.5)));
    ck_assert(fabs(td_schedule_lr(&c, 100, 100)) < 1e-15);
    ck_assert(fabs(td_schedule_lr(&c, 250, 100)) < 1e-15);
    /* monotone non-increasing over the job */
    double prev = 1;
    for (int64_t s = 0; s <= 100; s++) {
        double lr = td_schedule_lr(&c, s, 100);
        ck_assert(lr <= prev);
        prev = lr;
    }
    /* warm-up 20 of 120: the cosine spans the last 100 steps */
    c.schedule.warmup_steps = 20;
    LR_EQ(td_schedule_lr(&c, 20, 120), 0.2);
    LR_EQ(td_schedule_lr(&c, 70, 120), 0.1);
    LR_EQ(td_schedule_lr(&c, 45, 120), 0.1 * (1 + sqrt(0.5)));
    /* a job no longer than its warm-up: nothing left to anneal over */
    ck_assert(fabs(td_schedule_lr(&c, 20, 20)) < 1e-15);
}
END_TEST

START_TEST(test_slots_per_optimizer)
{
    td_optim_config c;
    td_optim_defaults(&c, TD_OPT_SGD);
    c.momentum = 0;
    ck_assert_int_eq(td_optim_slots(&c), 0); /* plain SGD: no state */
    c.momentum = 0.9;
    ck_assert_int_eq(td_optim_slots(&c), 1); /* the velocity */
    td_optim_defaults(&c, TD_OPT_ADAMW);
    ck_assert_int_eq(td_optim_slots(&c), 2); /* m and v */
    c.momentum = 0;
    ck_assert_int_eq(td_optim_slots(&c), 2);
    ck_assert_str_eq(td_optim_type_name(TD_OPT_SGD), "sgd");
    ck_assert_str_eq(td_optim_type_name(TD_OPT_ADAMW), "adamw");
    ck_assert_str_eq(td_sched_type_name(TD_SCHED_CONSTANT), "constant");
    ck_assert_str_eq(td_sched_type_name(TD_SCHED_STEP), "step");
    ck_assert_str_eq(td_sched_type_name(TD_SCHED_COSINE), "cosine");
}
END_TEST

/* Bad case i: its field name, and the change that makes it bad. */
static const char *bad_case(int i, td_optim_config *c)
{
    td_schedule_config *s = &c->schedule;
    switch (i) {
    case 0: c->type = (enum td_optim_type)7; return "optimizer.type";
    case 1: c->lr = 0; return "optimizer.lr";
    case 2: c->lr = 1000; return "optimizer.lr";
    case 3: c->lr = NAN; return "optimizer.lr";
    case 4: c->momentum = 1; return "optimizer.momentum";
    case 5: c->momentum = -0.1; return "optimizer.momentum";
    case 6: c->nesterov = 1; c->momentum = 0; return "optimizer.nesterov";
    case 7: c->weight_decay = 1; return "optimizer.weight_decay";
    case 8: c->beta1 = 1; return "optimizer.betas[0]";
    case 9: c->beta2 = -1e-9; return "optimizer.betas[1]";
    case 10: c->eps = 0; return "optimizer.eps";
    case 11: s->type = (enum td_sched_type)9; return "optimizer.schedule.type";
    case 12: s->warmup_steps = -1; return "optimizer.schedule.warmup_steps";
    case 13:
        s->type = TD_SCHED_STEP;
        s->step_size = 0;
        return "optimizer.schedule.step_size";
    case 14:
        s->type = TD_SCHED_STEP;
        s->gamma = 0;
        return "optimizer.schedule.gamma";
    case 15:
        s->type = TD_SCHED_STEP;
        s->gamma = 1.5;
        return "optimizer.schedule.gamma";
    default: return NULL;
    }
}

/* Every out-of-range field is refused with TD_E_SPEC and its name; the
 * edges of each range are accepted. */
START_TEST(test_validate_names_the_field)
{
    char err[128];
    int n = 0;
    for (int i = 0;; i++, n++) {
        td_optim_config c;
        td_optim_defaults(&c, TD_OPT_SGD);
        ck_assert_int_eq(td_optim_validate(&c, err, sizeof err), 0);
        const char *field = bad_case(i, &c);
        if (!field)
            break;
        err[0] = '\0';
        ck_assert_int_eq(td_optim_validate(&c, err, sizeof err), TD_E_SPEC);
        ck_assert_msg(strncmp(err, field, strlen(field)) == 0 &&
                          err[strlen(field)] == ':',
                      "case %d: \"%s\" does not start with %s:", i, err,
                      field);
    }
    ck_assert_int_eq(n, 16);
    /* the edges that are allowed */
    td_optim_config c;
    td_optim_defaults(&c, TD_OPT_ADAMW);
    c.momentum = 0;
    c.weight_decay = 0;
    c.beta1 = 0;
    c.beta2 = 0;
    c.schedule.type = TD_SCHED_STEP;
    c.schedule.step_size = 1;
    c.schedule.gamma = 1;
    ck_assert_int_eq(td_optim_validate(&c, NULL, 0), 0);
}
END_TEST

static Suite *optim_suite(void)
{
    Suite *s = suite_create("optim");
    TCase *tc = tcase_create("optim");
    tcase_add_test(tc, test_constant_is_flat);
    tcase_add_test(tc, test_warmup_is_linear_to_lr);
    tcase_add_test(tc, test_step_decay_closed_form);
    tcase_add_test(tc, test_cosine_closed_form);
    tcase_add_test(tc, test_slots_per_optimizer);
    tcase_add_test(tc, test_validate_names_the_field);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(optim_suite)
