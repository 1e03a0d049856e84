/* test_sim_lscale.c - loss scaling on the CUDA backend, on the simulated
 * device, against the CPU backend (issue 15: "loss scaling (overflow
 * injected, step skipped, scale halved)").
 *
 * What is checked, step by step on tiny-all (every layer kind, 2x9x9),
 * fp32, with the backend's overflow hook cfg.ls_poison_step (after the
 * backward of that step the first updated gradient element becomes +inf,
 * on the device by a one-thread kernel):
 *  - the injected step is skipped on the device: parameters and optimizer
 *    state bitwise unchanged (SGD with momentum and weight decay; AdamW
 *    with weight decay), the scale halved, the skipped count 1; later
 *    steps train, and the scale grows back after `interval` good steps;
 *  - every step's scale, good count and skipped count are exactly the CPU
 *    backend's, its loss within 2e-3 and the parameters after the run
 *    within 2e-3 of the CPU's (the tolerances of test_sim_freeze.c: fp32
 *    on both sides, only summation orders differ);
 *  - with a power-of-two scale the CUDA backend's parameters are bitwise
 *    those of the CUDA backend without loss scaling (the scaling is exact);
 *  - a step with loss scaling, skipped or not, makes no host
 *    synchronisation, no host function and no pageable copy: the check,
 *    the decision and the scale's update run in kernels, and the scaler's
 *    state reaches the host with the statistics (pinned ring);
 *  - the warm-up step at create leaves the scaler at its initial state;
 *    set_loss_scale (resume) takes effect in stream order.
 * Not 'threaded': it runs the CPU backend (OpenMP, see meson.build).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cuda/backend_cuda.h"
#include "base/rng.h"
#include "loss_scale.h"
#include "model/model.h"
#include "sim.h"
#include "ref_models.h"
#include "tdtest.h"

enum { BATCH = 6, STEPS = 7, POISON = 3 };

/* test_sim_freeze.c's: fp32 on both sides, only summation orders differ */
#define TOL_STEPS 2e-3
#define FLOOR_SHARE 0.01

typedef struct side {
    td_backend *be;
    float *snap;
} side;

typedef struct pair {
    td_model *m;
    side s[2]; /* cpu, cuda */
    size_t nsnap, nopt;
} pair;

static td_backend_config config(enum td_optim_type opt, float ls,
                                int64_t poison)
{
    td_backend_config c;
    memset(&c, 0, sizeof c);
    c.batch = BATCH;
    c.threads = 1;
    for (int i = 0; i < 4; i++) {
        c.mean[i] = 0.45f;
        c.std[i] = 0.25f;
    }
    c.seed = 29;
    td_optim_defaults(&c.optim, opt);
    c.optim.lr = opt == TD_OPT_SGD ? 0.05 : 1e-3;
    c.optim.momentum = opt == TD_OPT_SGD ? 0.9 : 0.0;
    c.optim.weight_decay = opt == TD_OPT_SGD ? 5e-4 : 0.01;
    c.loss_scale = ls;
    c.loss_scale_interval = 2;
    c.ls_poison_step = poison;
    return c;
}

static void open_side(pair *p, int i, const char *kind,
                      const td_backend_config *c)
{
    char err[256] = "";
    ck_assert_msg(td_backend_create(kind, p->m, c, &p->s[i].be, err,
                                    sizeof err) == 0, "%s: %s", kind, err);
    p->s[i].snap = malloc(p->nsnap * sizeof(float));
}

/* kinds[i] NULL: no backend on that side */
static void pair_open(pair *p, const td_backend_config *c0,
                      const td_backend_config *c1, const char *k0,
                      const char *k1)
{
    memset(p, 0, sizeof *p);
    p->m = ref_load_model("tiny-all", (td_shape){2, 9, 9}, 5);
    p->nsnap = td_backend_snapshot_floats(p->m, &c0->optim);
    p->nopt = p->m->param_count * (size_t)(1 + td_optim_slots(&c0->optim));
    td_cuda_register();
    open_side(p, 0, k0, c0);
    open_side(p, 1, k1, c1);
}

static void pair_close(pair *p)
{
    for (int i = 0; i < 2; i++) {
        td_backend_destroy(p->s[i].be);
        free(p->s[i].snap);
    }
    td_model_free(p->m);
}

static void make_batch(int k, uint8_t *px, size_t npx, int32_t *labels,
                       td_batch *b)
{
    for (size_t i = 0; i < npx; i++)
        px[i] = (uint8_t)td_rng_below(700 + (uint64_t)k, 1, i, 256);
    for (int i = 0; i < BATCH; i++)
        labels[i] = (int32_t)td_rng_below(700 + (uint64_t)k, 2, (uint64_t)i,
                                          5);
    *b = (td_batch){.data = px, .labels = labels, .n = BATCH, .h = 9,
                    .w = 9, .c = 2, .layout = TD_LAYOUT_NHWC};
}

/* Enqueues step t on be (upload, train_step, read_stats into *st); the
 * batch must stay until the caller syncs. */
static void enqueue(td_backend *be, const td_batch *b, int64_t t,
                    td_step_stats *st)
{
    ck_assert_msg(td_backend_upload(be, b) == 0, "%s", be->err);
    ck_assert_msg(td_backend_train_step(be, (float)be->cfg.optim.lr, t) ==
                  0, "%s: %s", be->ops->name, be->err);
    ck_assert_int_eq(td_backend_read_stats(be, st), 0);
}

/* Step t on side i, synchronised, then its snapshot. */
static td_step_stats step(pair *p, int i, int64_t t)
{
    uint8_t px[BATCH * 2 * 9 * 9];
    int32_t labels[BATCH];
    td_batch b;
    td_step_stats st;
    side *s = &p->s[i];
    make_batch((int)t, px, sizeof px, labels, &b);
    enqueue(s->be, &b, t, &st);
    ck_assert_int_eq(td_backend_sync(s->be), 0);
    ck_assert_int_eq(td_backend_snapshot(s->be, s->snap, p->nsnap), 0);
    ck_assert_int_eq(td_backend_sync(s->be), 0);
    return st;
}

static double rel(double a, double b)
{
    return fabs(a - b) / fmax(fabs(b), 1e-30);
}

/* Both sides with loss scaling, the overflow at step POISON. */
static void against_cpu(enum td_optim_type opt)
{
    pair p;
    td_backend_config c = config(opt, TD_LS_INIT, POISON);
    pair_open(&p, &c, &c, "cpu", "cuda:0");
    float *before = malloc(p.nsnap * sizeof *before);
    /* interval 2: grown at 2, backed off at 3, grown at 5 and 7 */
    const float want[STEPS + 1] = {0, 65536, 131072, 65536, 65536, 131072,
                                   131072, 262144};
    for (int t = 1; t <= STEPS; t++) {
        memcpy(before, p.s[1].snap, p.nsnap * sizeof *before);
        td_step_stats a = step(&p, 0, t), g = step(&p, 1, t);
        ck_assert_msg(g.ls.scale == want[t] && a.ls.scale == want[t],
                      "step %d: scale cpu %g cuda %g, want %g", t,
                      (double)a.ls.scale, (double)g.ls.scale,
                      (double)want[t]);
        ck_assert_int_eq(g.ls.good, a.ls.good);
        ck_assert_int_eq(g.ls.skipped, a.ls.skipped);
        ck_assert_int_eq(g.ls.skipped, t >= POISON);
        ck_assert_msg(rel(g.loss_sum, a.loss_sum) <= TOL_STEPS,
                      "step %d: loss cuda %.9g cpu %.9g", t, g.loss_sum,
                      a.loss_sum);
        if (t == POISON && t > 1)
            ck_assert_msg(memcmp(before, p.s[1].snap,
                                 p.nopt * sizeof(float)) == 0,
                          "cuda: the skipped step changed parameters or "
                          "optimizer state");
        else if (t > 1)
            ck_assert(memcmp(before, p.s[1].snap,
                             p.m->param_count * sizeof(float)) != 0);
    }
    /* the parameters after the run, the CPU's within TOL_STEPS (elements
     * below FLOOR_SHARE of the largest compared absolutely).  Not c1.bias:
     * a bias before a batch norm has a gradient of 0 in exact arithmetic,
     * rounding noise on each backend, which AdamW's normalised update
     * turns into steps of +-lr either way (so without loss scaling too) */
    double big = 0, worst = 0;
    size_t skip_lo = 0, skip_n = 0;
    size_t off = 0;
    for (int q = 0; q < p.m->nparams; off += p.m->params[q++].count)
        if (strcmp(p.m->params[q].name, "c1.bias") == 0) {
            skip_lo = off;
            skip_n = p.m->params[q].count;
        }
    ck_assert_uint_gt(skip_n, 0);
    for (size_t i = 0; i < p.m->param_count; i++)
        big = fmax(big, fabs(p.s[0].snap[i]));
    for (size_t i = 0; i < p.m->param_count; i++) {
        if (i >= skip_lo && i < skip_lo + skip_n)
            continue;
        double d = fabs(p.s[1].snap[i] - p.s[0].snap[i]) /
                   fmax(fabs(p.s[0].snap[i]), FLOOR_SHARE * big);
        worst = fmax(worst, d);
    }
    printf("%s: cuda vs cpu after %d steps (one skipped): worst relative "
           "parameter difference %.3g\n", opt == TD_OPT_SGD ? "sgd"
           : "adamw", STEPS, worst);
    ck_assert_msg(worst <= TOL_STEPS, "worst %.3g", worst);
    free(before);
    pair_close(&p);
}

START_TEST(test_sgd_against_cpu)
{
    against_cpu(TD_OPT_SGD);
}
END_TEST

START_TEST(test_adamw_against_cpu)
{
    against_cpu(TD_OPT_ADAMW);
}
END_TEST

/* CUDA with a power-of-two scale against CUDA without: bitwise. */
START_TEST(test_scaled_bitwise_unscaled)
{
    pair p;
    td_backend_config off = config(TD_OPT_ADAMW, 0, 0);
    td_backend_config on = config(TD_OPT_ADAMW, TD_LS_INIT, 0);
    pair_open(&p, &off, &on, "cuda:0", "cuda:0");
    for (int t = 1; t <= 4; t++) {
        td_step_stats a = step(&p, 0, t), b = step(&p, 1, t);
        ck_assert(a.ls.scale == 0.0f && b.ls.scale > 0.0f);
        ck_assert(a.loss_sum == b.loss_sum);
        ck_assert_msg(memcmp(p.s[0].snap, p.s[1].snap,
                             p.nsnap * sizeof(float)) == 0,
                      "step %d: scaled and unscaled differ", t);
    }
    pair_close(&p);
}
END_TEST

/* Steps enqueued back to back, the overflow among them: no host sync,
 * host function or pageable copy until the caller's sync. */
START_TEST(test_no_host_sync)
{
    pair p;
    td_backend_config c = config(TD_OPT_SGD, TD_LS_INIT, 2);
    c.warmup = 1;
    pair_open(&p, &c, &c, "cuda:0", "cuda:0");
    td_backend *be = p.s[1].be;
    uint8_t px[3][BATCH * 2 * 9 * 9];
    int32_t labels[3][BATCH];
    td_batch b[3];
    td_step_stats st[3];
    for (int k = 0; k < 3; k++)
        make_batch(k + 1, px[k], sizeof px[k], labels[k], &b[k]);
    long syncs = td_sim_stream_syncs(), funcs = td_sim_host_funcs();
    long d2h = td_sim_pageable_d2h(0);
    for (int k = 0; k < 3; k++)
        enqueue(be, &b[k], k + 1, &st[k]);
    ck_assert_int_eq(td_sim_stream_syncs(), syncs);
    ck_assert_int_eq(td_sim_host_funcs(), funcs);
    ck_assert_int_eq(td_sim_pageable_d2h(0), d2h);
    ck_assert_int_eq(td_backend_sync(be), 0);
    /* the warm-up left the scaler at its start: 2^16, nothing skipped */
    ck_assert(st[0].ls.scale == 65536.0f);
    ck_assert_int_eq(st[0].ls.skipped, 0);
    ck_assert(st[1].ls.scale == 32768.0f); /* step 2 overflowed */
    ck_assert_int_eq(st[1].ls.skipped, 1);
    ck_assert(st[2].ls.scale == 32768.0f);
    ck_assert_int_eq(st[2].ls.good, 1);
    ck_assert_int_eq(td_sim_races(), 0);
    pair_close(&p);
}
END_TEST

/* A resumed job's scaler, in stream order after what was enqueued. */
START_TEST(test_set_loss_scale)
{
    pair p;
    td_backend_config c = config(TD_OPT_SGD, TD_LS_INIT, 0);
    td_backend_config off = config(TD_OPT_SGD, 0, 0);
    pair_open(&p, &off, &c, "cuda:0", "cuda:0");
    td_ls_state s = {1024.0f, 1, 5};
    ck_assert_int_eq(p.s[1].be->ops->set_loss_scale(p.s[1].be, &s), 0);
    s.scale = 3.0f; /* the backend copied it at the call */
    td_step_stats st = step(&p, 1, 1);
    ck_assert(st.ls.scale == 2048.0f); /* good 1 + 1 = interval 2 */
    ck_assert_int_eq(st.ls.good, 0);
    ck_assert_int_eq(st.ls.skipped, 5);
    td_ls_state bad = {NAN, 0, 0};
    ck_assert_int_eq(p.s[1].be->ops->set_loss_scale(p.s[1].be, &bad),
                     -EINVAL);
    ck_assert_int_eq(p.s[0].be->ops->set_loss_scale(p.s[0].be, &s),
                     -EINVAL);
    pair_close(&p);
}
END_TEST

static Suite *lscale_suite(void)
{
    Suite *s = suite_create("sim_lscale");
    TCase *tc = tcase_create("lscale");
    tcase_add_test(tc, test_sgd_against_cpu);
    tcase_add_test(tc, test_adamw_against_cpu);
    tcase_add_test(tc, test_scaled_bitwise_unscaled);
    tcase_add_test(tc, test_no_host_sync);
    tcase_add_test(tc, test_set_loss_scale);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(lscale_suite)
