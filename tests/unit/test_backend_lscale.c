/* test_backend_lscale.c - loss scaling on the CPU backend (issue 15):
 * backend cfg.loss_scale, the overflow injection hook cfg.ls_poison_step,
 * and the scaler's state in the step statistics.
 *
 * On tiny-all (every layer kind, 2x9x9, 5 classes; its dropout has rate 0,
 * so nothing depends on the step number but AdamW's step count), fp32:
 *  - with a power-of-two scale every step's parameters and optimizer state
 *    are bitwise those of the run without loss scaling (SGD with momentum,
 *    Nesterov and weight decay; AdamW with weight decay and label
 *    smoothing): scaling the loss's gradient by 2^16 and the parameter
 *    gradients by 2^-16 is exact in fp32 when nothing under- or overflows;
 *  - an overflow injected at step 3: that step is skipped (parameters and
 *    optimizer state bitwise unchanged; batch norm running statistics do
 *    move, as in PyTorch, whose skipped step still ran the forward), the
 *    scale halves, the skipped count is 1, and the later steps are bitwise
 *    those of a run without scaling that never saw batch 3 (AdamW's step
 *    count too: the skipped step does not count);
 *  - growth after `interval` good steps; a static scale; frozen parameters
 *    (lr_mult 0) are neither checked nor poisoned;
 *  - set_loss_scale (resume) and its refusals.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "base/rng.h"
#include "loss_scale.h"
#include "model/model.h"
#include "ref_models.h"
#include "tdtest.h"

enum { BATCH = 6 };

typedef struct run {
    td_model *m;
    td_backend *be;
    float *snap;
    size_t nsnap, nopt; /* snapshot floats; parameters + optimizer slots */
} run;

static td_backend_config config(enum td_optim_type opt, float ls,
                                int interval, int64_t poison)
{
    td_backend_config c;
    memset(&c, 0, sizeof c);
    c.batch = BATCH;
    c.threads = 1;
    for (int i = 0; i < 4; i++) {
        c.mean[i] = 0.45f;
        c.std[i] = 0.25f;
    }
    c.seed = 23;
    td_optim_defaults(&c.optim, opt);
    c.optim.lr = opt == TD_OPT_SGD ? 0.05 : 1e-3;
    c.optim.momentum = opt == TD_OPT_SGD ? 0.9 : 0.0;
    c.optim.nesterov = opt == TD_OPT_SGD;
    c.optim.weight_decay = opt == TD_OPT_SGD ? 5e-4 : 0.01;
    c.label_smoothing = opt == TD_OPT_ADAMW ? 0.1f : 0.0f;
    c.loss_scale = ls;
    c.loss_scale_interval = interval;
    c.ls_poison_step = poison;
    return c;
}

static void run_open(run *r, const td_backend_config *c, const float *mult)
{
    char err[256] = "";
    td_backend_config cc = *c;
    r->m = ref_load_model("tiny-all", (td_shape){2, 9, 9}, 5);
    cc.lr_mult = mult;
    ck_assert_msg(td_backend_create("cpu", r->m, &cc, &r->be, err,
                                    sizeof err) == 0, "%s", err);
    r->nsnap = td_backend_snapshot_floats(r->m, &c->optim);
    r->nopt = r->m->param_count * (size_t)(1 + td_optim_slots(&c->optim));
    r->snap = malloc(r->nsnap * sizeof *r->snap);
}

static void run_close(run *r)
{
    td_backend_destroy(r->be);
    td_model_free(r->m);
    free(r->snap);
}

/* Step t (1-based) on batch `batch`; its statistics. */
static td_step_stats step(run *r, int batch, int64_t t)
{
    uint8_t px[BATCH * 2 * 9 * 9];
    int32_t labels[BATCH];
    td_step_stats st;
    for (size_t i = 0; i < sizeof px; i++)
        px[i] = (uint8_t)td_rng_below(900 + (uint64_t)batch, 1, i, 256);
    for (int i = 0; i < BATCH; i++)
        labels[i] = (int32_t)td_rng_below(900 + (uint64_t)batch, 2,
                                          (uint64_t)i, 5);
    td_batch b = {.data = px, .labels = labels, .n = BATCH, .h = 9, .w = 9,
                  .c = 2, .layout = TD_LAYOUT_NHWC};
    ck_assert_msg(td_backend_upload(r->be, &b) == 0, "%s", r->be->err);
    ck_assert_msg(td_backend_train_step(r->be, (float)r->be->cfg.optim.lr,
                                        t) == 0, "%s", r->be->err);
    ck_assert_int_eq(td_backend_read_stats(r->be, &st), 0);
    ck_assert_int_eq(td_backend_sync(r->be), 0);
    ck_assert_int_eq(td_backend_snapshot(r->be, r->snap, r->nsnap), 0);
    ck_assert_int_eq(td_backend_sync(r->be), 0);
    return st;
}

/* Parameters and optimizer state (not the running statistics) bitwise. */
static void same_opt(const run *a, const run *b, const char *what, int s)
{
    ck_assert_msg(memcmp(a->snap, b->snap, a->nopt * sizeof(float)) == 0,
                  "%s, step %d: parameters or optimizer state differ", what,
                  s);
}

static void scaled_equals_unscaled(enum td_optim_type opt)
{
    run off, on;
    td_backend_config c0 = config(opt, 0, 0, 0);
    td_backend_config c1 = config(opt, TD_LS_INIT, 0, 0);
    run_open(&off, &c0, NULL);
    run_open(&on, &c1, NULL);
    for (int s = 1; s <= 6; s++) {
        td_step_stats a = step(&off, s, s), b = step(&on, s, s);
        ck_assert(a.ls.scale == 0.0f);
        ck_assert(b.ls.scale == TD_LS_INIT);
        ck_assert_int_eq(b.ls.skipped, 0);
        ck_assert_int_eq(b.ls.good, s);
        /* the loss itself is never scaled */
        ck_assert_msg(a.loss_sum == b.loss_sum, "step %d: loss %.17g vs "
                      "%.17g", s, a.loss_sum, b.loss_sum);
        same_opt(&off, &on, "scaled vs unscaled", s);
        ck_assert(memcmp(off.snap, on.snap, off.nsnap * sizeof(float)) == 0);
    }
    run_close(&off);
    run_close(&on);
}

START_TEST(test_sgd_scaled_bitwise)
{
    scaled_equals_unscaled(TD_OPT_SGD);
}
END_TEST

START_TEST(test_adamw_scaled_bitwise)
{
    scaled_equals_unscaled(TD_OPT_ADAMW);
}
END_TEST

/* Overflow at step 3, interval 2: scales after each step 2^16, 2^17 (grown
 * after 2 good steps), 2^16 (backed off), 2^16, 2^17, 2^17. */
static void overflow_skipped(enum td_optim_type opt)
{
    run on, ref;
    td_backend_config c1 = config(opt, TD_LS_INIT, 2, 3);
    td_backend_config c0 = config(opt, 0, 0, 0);
    run_open(&on, &c1, NULL);
    run_open(&ref, &c0, NULL); /* unscaled; never sees batch 3 */
    const float scale[] = {0, 65536, 131072, 65536, 65536, 131072, 131072};
    float *before = malloc(on.nsnap * sizeof *before);
    int64_t rt = 0;
    for (int s = 1; s <= 6; s++) {
        memcpy(before, on.snap, on.nsnap * sizeof *before);
        td_step_stats st = step(&on, s, s);
        ck_assert_msg(st.ls.scale == scale[s], "step %d: scale %g, want %g",
                      s, (double)st.ls.scale, (double)scale[s]);
        ck_assert_int_eq(st.ls.skipped, s >= 3);
        ck_assert(isfinite(st.loss_sum)); /* the loss was fine */
        if (s == 3) {
            ck_assert_msg(memcmp(before, on.snap, on.nopt * sizeof(float))
                          == 0, "the skipped step changed parameters or "
                          "optimizer state");
            ck_assert_msg(memcmp(before + on.nopt, on.snap + on.nopt,
                                 (on.nsnap - on.nopt) * sizeof(float)) != 0,
                          "the skipped step's forward left the running "
                          "statistics alone");
            continue;
        }
        step(&ref, s, ++rt);
        same_opt(&ref, &on, "against the run without batch 3", s);
    }
    free(before);
    run_close(&on);
    run_close(&ref);
}

START_TEST(test_sgd_overflow_skipped)
{
    overflow_skipped(TD_OPT_SGD);
}
END_TEST

START_TEST(test_adamw_overflow_skipped)
{
    overflow_skipped(TD_OPT_ADAMW);
}
END_TEST

/* A static scale (interval < 0) never moves, an overflow still skips. */
START_TEST(test_static_scale)
{
    run on;
    td_backend_config c = config(TD_OPT_SGD, 1024.0f, -1, 2);
    run_open(&on, &c, NULL);
    for (int s = 1; s <= 4; s++) {
        td_step_stats st = step(&on, s, s);
        ck_assert(st.ls.scale == 1024.0f);
        ck_assert_int_eq(st.ls.skipped, s >= 2);
    }
    run_close(&on);
}
END_TEST

/* Frozen parameters (multiplier 0) are outside the check: the poison
 * lands on the first trainable one, and the frozen ones stay bitwise. */
START_TEST(test_frozen_not_checked)
{
    run on;
    td_backend_config c = config(TD_OPT_SGD, TD_LS_INIT, 0, 2);
    td_model *m = ref_load_model("tiny-all", (td_shape){2, 9, 9}, 5);
    float *mult = malloc(sizeof *mult * (size_t)m->nparams);
    for (int q = 0; q < m->nparams; q++)
        mult[q] = q < 2 ? 0.0f : 1.0f; /* c1's weight and bias frozen */
    run_open(&on, &c, mult);
    float *first = malloc(on.nsnap * sizeof *first);
    step(&on, 1, 1);
    memcpy(first, on.snap, on.nsnap * sizeof *first);
    td_step_stats st = step(&on, 2, 2);
    ck_assert_int_eq(st.ls.skipped, 1);
    ck_assert(memcmp(first, on.snap, on.nopt * sizeof(float)) == 0);
    /* c1's gradient is finite: the poison went to a trainable parameter */
    size_t n0 = m->params[0].count;
    float *g0 = malloc(n0 * sizeof *g0);
    ck_assert_int_eq(on.be->ops->read_tensor(on.be, TD_T_PARAM_GRAD, 0, g0,
                                             n0), 0);
    for (size_t i = 0; i < n0; i++)
        ck_assert(isfinite(g0[i]));
    free(g0);
    st = step(&on, 3, 3);
    ck_assert_int_eq(st.ls.skipped, 1);
    ck_assert(memcmp(first, on.snap, m->params[0].count * sizeof(float)) ==
              0); /* frozen: still the initial values */
    ck_assert(memcmp(first + on.m->param_count - 1,
                     on.snap + on.m->param_count - 1, sizeof(float)) != 0);
    free(first);
    free(mult);
    td_model_free(m);
    run_close(&on);
}
END_TEST

/* A resumed job's scaler: set_loss_scale, then the next step starts from
 * it (the good count reaching the interval doubles the set scale). */
START_TEST(test_set_loss_scale)
{
    run on, off;
    td_backend_config c = config(TD_OPT_SGD, TD_LS_INIT, 4, 0);
    td_backend_config c0 = config(TD_OPT_SGD, 0, 0, 0);
    run_open(&on, &c, NULL);
    run_open(&off, &c0, NULL);
    td_ls_state st = {256.0f, 3, 7};
    ck_assert_int_eq(on.be->ops->set_loss_scale(on.be, &st), 0);
    td_step_stats s = step(&on, 1, 1);
    ck_assert(s.ls.scale == 512.0f);
    ck_assert_int_eq(s.ls.good, 0);
    ck_assert_int_eq(s.ls.skipped, 7);
    td_ls_state bad = {-1.0f, 0, 0};
    ck_assert_int_eq(on.be->ops->set_loss_scale(on.be, &bad), -EINVAL);
    bad.scale = INFINITY;
    ck_assert_int_eq(on.be->ops->set_loss_scale(on.be, &bad), -EINVAL);
    ck_assert_int_eq(off.be->ops->set_loss_scale(off.be, &st), -EINVAL);
    ck_assert_msg(strstr(off.be->err, "loss scaling is off"), "%s",
                  off.be->err);
    run_close(&on);
    run_close(&off);
}
END_TEST

START_TEST(test_config_refused)
{
    char err[256] = "";
    td_model *m = ref_load_model("tiny-all", (td_shape){2, 9, 9}, 5);
    td_backend *be = NULL;
    td_backend_config c = config(TD_OPT_SGD, -2.0f, 0, 0);
    ck_assert_int_ne(td_backend_create("cpu", m, &c, &be, err, sizeof err),
                     0);
    ck_assert_msg(strstr(err, "loss_scale"), "%s", err);
    c.loss_scale = NAN;
    ck_assert_int_ne(td_backend_create("cpu", m, &c, &be, err, sizeof err),
                     0);
    c.loss_scale = 1e30f;
    ck_assert_int_ne(td_backend_create("cpu", m, &c, &be, err, sizeof err),
                     0);
    td_model_free(m);
}
END_TEST

static Suite *lscale_suite(void)
{
    Suite *s = suite_create("backend_lscale");
    TCase *tc = tcase_create("cpu");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_sgd_scaled_bitwise);
    tcase_add_test(tc, test_adamw_scaled_bitwise);
    tcase_add_test(tc, test_sgd_overflow_skipped);
    tcase_add_test(tc, test_adamw_overflow_skipped);
    tcase_add_test(tc, test_static_scale);
    tcase_add_test(tc, test_frozen_not_checked);
    tcase_add_test(tc, test_set_loss_scale);
    tcase_add_test(tc, test_config_refused);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(lscale_suite)
