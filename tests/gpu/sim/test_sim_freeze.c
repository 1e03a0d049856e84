/* test_sim_freeze.c - per-parameter learning-rate multipliers (lr_mult,
 * 0 = frozen) and batch norms kept in inference mode while training
 * (bn_eval) on the CUDA backend, against the CPU backend, on the simulated
 * device (issue 16: the job's freeze, lr_mult and freeze_bn_stats).
 *
 * What is checked, step by step on tiny-all (every layer kind, 2x9x9):
 *  - create takes lr_mult and bn_eval (it refused them before), with and
 *    without the warm-up step;
 *  - the inference-mode backward (kernels/bn_eval.h) on the host against
 *    a double-precision reference of its formulas;
 *  - one step without an update: every layer's value and gradient and
 *    every parameter's gradient (the frozen batch norms' dgamma and dbeta
 *    too, which the update then drops) match the CPU within the
 *    tolerances of test_backend_cuda.c (values 1e-4, gradients 1e-3);
 *  - a frozen backbone (multiplier 0 on all but the head, the head at 10)
 *    under SGD with momentum and weight decay and under AdamW: after N
 *    steps the frozen parameters and their optimizer state are bitwise
 *    what they were at create, the trainable ones and their state match
 *    the CPU within 2e-3, every step's loss within 2e-3;
 *  - with bn_eval on the frozen batch norms, their running statistics are
 *    bitwise unchanged; with trainable layers below them (multipliers 1
 *    and 0.5) the gradient through the inference-mode backward trains
 *    those layers as the CPU does;
 *  - multipliers all 1 cost no more launches per step than none (one
 *    fused update kernel).
 * Each test runs in its own process (Check forks); not in the 'threaded'
 * suite: the CPU backend's OpenMP runtime is invisible to ThreadSanitizer.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cuda/backend_cuda.h"
#include "base/error.h"
#include "base/rng.h"
#include "bn_eval.h"
#include "model/model.h"
#include "sim.h"
#include "tdtest.h"

enum { BATCH = 6, STEPS = 5 };

/* Relative tolerances of test_backend_cuda.c (fp32 on both sides, only
 * summation orders differ). */
#define TOL_VALUE 1e-4
#define TOL_GRAD 1e-3
#define TOL_STEPS 2e-3
#define FLOOR_SHARE 0.01

typedef struct pair {
    td_model *m;
    td_backend *cpu, *gpu;
    float *mult;     /* per parameter */
    uint8_t *bn;     /* per layer */
    uint8_t px[BATCH * 2 * 9 * 9];
    int32_t labels[BATCH];
    td_batch b;
    int64_t t;
} pair;

static td_model *load_tiny(void)
{
    char path[4096], err[256] = "";
    const char *root = getenv("TD_SOURCE_ROOT");
    td_model *m = NULL;
    snprintf(path, sizeof path, "%s/tests/data/tiny-all.json",
             root ? root : ".");
    ck_assert_msg(td_model_load(NULL, path, (td_shape){2, 9, 9}, 5, &m, err,
                                sizeof err) == 0, "%s", err);
    return m;
}

static int param_index(const td_model *m, const char *name)
{
    for (int q = 0; q < m->nparams; q++)
        if (strcmp(m->params[q].name, name) == 0)
            return q;
    ck_abort_msg("no parameter %s", name);
    return -1;
}

static int layer_index(const td_model *m, const char *name)
{
    for (int L = 0; L < m->nlayers; L++)
        if (strcmp(m->layers[L].name, name) == 0)
            return L;
    ck_abort_msg("no layer %s", name);
    return -1;
}

/* Multiplier of every parameter of layer `layer`. */
static void set_mult(pair *p, const char *layer, float v)
{
    const td_model *m = p->m;
    int L = layer_index(m, layer);
    for (int q = 0; q < m->nparams; q++)
        if (m->params[q].layer == L)
            p->mult[q] = v;
}

/* The frozen backbone: everything 0 but the dense head at 10. */
static void frozen_backbone(pair *p)
{
    for (int q = 0; q < p->m->nparams; q++)
        p->mult[q] = 0.0f;
    set_mult(p, "d1", 10.0f);
    set_mult(p, "d2", 10.0f);
}

static void bn_eval_all(pair *p)
{
    const char *bns[] = {"b1", "b2", "b3"};
    for (int i = 0; i < 3; i++)
        p->bn[layer_index(p->m, bns[i])] = 1;
}

static td_backend_config config(enum td_optim_type opt)
{
    td_backend_config c;
    memset(&c, 0, sizeof c);
    c.batch = BATCH;
    c.threads = 1;
    c.dtype = TD_F32;
    for (int i = 0; i < 4; i++) {
        c.mean[i] = 0.45f + 0.02f * (float)i;
        c.std[i] = 0.25f;
    }
    c.seed = 17;
    td_optim_defaults(&c.optim, opt);
    c.optim.lr = opt == TD_OPT_SGD ? 0.01 : 1e-3;
    c.optim.weight_decay = opt == TD_OPT_SGD ? 5e-4 : 0.01;
    c.label_smoothing = opt == TD_OPT_ADAMW ? 0.1f : 0.0f;
    return c;
}

/* The model, its multipliers (all 1) and bn_eval flags (none): fill them
 * in, then pair_create. */
static void pair_init(pair *p)
{
    memset(p, 0, sizeof *p);
    p->m = load_tiny();
    p->mult = malloc(sizeof *p->mult * (size_t)p->m->nparams);
    p->bn = calloc((size_t)p->m->nlayers, 1);
    for (int q = 0; q < p->m->nparams; q++)
        p->mult[q] = 1.0f;
}

/* The GPU's activation layout: the test that reads every layer's value
 * and gradient keeps them all (the memory plan reuses a buffer after its
 * last read). */
static enum td_mem_layout gpu_layout = TD_MEM_PLANNED;

static void pair_create(pair *p, enum td_optim_type opt, int use_mult,
                        int use_bn, int warmup)
{
    char err[256] = "";
    td_backend_config c = config(opt);
    c.mem_layout = gpu_layout;
    c.lr_mult = use_mult ? p->mult : NULL;
    c.bn_eval = use_bn ? p->bn : NULL;
    ck_assert_msg(td_backend_create("cpu", p->m, &c, &p->cpu, err,
                                    sizeof err) == 0, "cpu: %s", err);
    c.warmup = warmup;
    td_cuda_register();
    ck_assert_msg(td_backend_create("cuda:0", p->m, &c, &p->gpu, err,
                                    sizeof err) == 0, "cuda:0: %s", err);
}

static void pair_close(pair *p)
{
    td_backend_destroy(p->cpu);
    td_backend_destroy(p->gpu);
    td_model_free(p->m);
    free(p->mult);
    free(p->bn);
}

static void make_batch(pair *p, uint64_t salt)
{
    for (size_t i = 0; i < sizeof p->px; i++)
        p->px[i] = (uint8_t)td_rng_below(salt, 1, i, 256);
    for (int i = 0; i < BATCH; i++)
        p->labels[i] = (int32_t)td_rng_below(salt, 2, (uint64_t)i,
                                             (uint64_t)p->m->classes);
    p->b = (td_batch){.data = p->px, .labels = p->labels, .n = BATCH,
                      .h = 9, .w = 9, .c = 2, .layout = TD_LAYOUT_NHWC};
}

/* One training step on both with a fresh batch; the two losses. */
static void step(pair *p, float lr, double loss[2])
{
    td_backend *bs[2] = {p->cpu, p->gpu};
    make_batch(p, 100 + (uint64_t)p->t);
    p->t++;
    for (int i = 0; i < 2; i++) {
        td_step_stats st;
        ck_assert_msg(td_backend_upload(bs[i], &p->b) == 0, "%s: %s",
                      bs[i]->ops->name, bs[i]->err);
        ck_assert_msg(td_backend_train_step(bs[i], lr, p->t) == 0, "%s: %s",
                      bs[i]->ops->name, bs[i]->err);
        ck_assert_int_eq(td_backend_read_stats(bs[i], &st), 0);
        ck_assert_int_eq(td_backend_sync(bs[i]), 0);
        ck_assert_int_eq(st.samples, BATCH);
        loss[i] = st.loss_sum;
    }
}

static float *snapshot(td_backend *be, size_t *n)
{
    *n = td_backend_snapshot_floats(be->model, &be->cfg.optim);
    float *s = malloc(*n * sizeof *s);
    ck_assert_msg(td_backend_snapshot(be, s, *n) == 0, "%s", be->err);
    ck_assert_int_eq(td_backend_sync(be), 0);
    return s;
}

static double max_abs(const float *v, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs(v[i]));
    return m;
}

/* max |got - ref| <= tol * max(max |ref|, floor), as test_backend_cuda.c */
static void compare_floor(const float *got, const float *ref, size_t n,
                          double tol, double floor, const char *what)
{
    double scale = fmax(floor, 1e-6), worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++)
        scale = fmax(scale, fabs(ref[i]));
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - ref[i]);
        if (d > worst)
            worst = d, at = i;
    }
    ck_assert_msg(worst <= tol * scale, "%s[%zu]: gpu %.9g cpu %.9g (max "
                  "error %.3g, allowed %.3g)", what, at, got[at], ref[at],
                  worst, tol * scale);
}

static void compare_tensor(pair *p, enum td_tensor_kind kind, int index,
                           size_t n, double tol, double floor,
                           const char *what)
{
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    int rc = p->cpu->ops->read_tensor(p->cpu, kind, index, b, n);
    if (rc != TD_E_NOTSUP) { /* a batch norm fused with its relu */
        ck_assert_msg(rc == 0, "cpu read %s: %s", what, p->cpu->err);
        rc = p->gpu->ops->read_tensor(p->gpu, kind, index, a, n);
        ck_assert_msg(rc == 0, "gpu read %s: %s", what, p->gpu->err);
        compare_floor(a, b, n, tol, floor, what);
    }
    free(a);
    free(b);
}

static void losses_match(const double loss[2], int s)
{
    ck_assert_msg(fabs(loss[1] - loss[0]) <= TOL_STEPS * fabs(loss[0]),
                  "step %d: loss gpu %.9g cpu %.9g", s + 1, loss[1],
                  loss[0]);
}

/* After the steps: per parameter and optimizer slot, frozen ones bitwise
 * as in `start` (on both backends), the others within TOL_STEPS of the
 * CPU; running statistics of bn_eval layers bitwise as in `start`, the
 * others within TOL_STEPS. */
static void check_state(pair *p, const float *start, int use_bn)
{
    size_t n, n2;
    float *g = snapshot(p->gpu, &n), *c = snapshot(p->cpu, &n2);
    const td_model *m = p->m;
    size_t pc = m->param_count, off = 0;
    int slots = td_optim_slots(&p->cpu->cfg.optim), trained = 0;
    ck_assert_uint_eq(n, n2);
    for (int s = 0; s <= slots; s++) {
        double floor = FLOOR_SHARE * max_abs(c + s * pc, pc);
        for (int q = 0; q < m->nparams; q++) {
            char what[160];
            size_t cnt = m->params[q].count;
            snprintf(what, sizeof what, "%s%s", s ? "slot of " : "",
                     m->params[q].name);
            if (p->mult[q] == 0.0f) {
                ck_assert_msg(memcmp(g + off, start + off,
                                     cnt * sizeof *g) == 0,
                              "gpu: frozen %s changed", what);
                ck_assert_msg(memcmp(c + off, start + off,
                                     cnt * sizeof *c) == 0,
                              "cpu: frozen %s changed", what);
            } else {
                if (s == 0)
                    ck_assert_msg(memcmp(g + off, start + off,
                                         cnt * sizeof *g) != 0,
                                  "gpu: %s did not train", what);
                compare_floor(g + off, c + off, cnt, TOL_STEPS, floor,
                              what);
                trained++;
            }
            off += cnt;
        }
    }
    ck_assert_int_gt(trained, 0);
    double sfloor = FLOOR_SHARE * max_abs(c + off, n - off);
    for (int s = 0; s < m->nstate; s++) {
        const td_state *st = &m->state[s];
        if (use_bn && p->bn[st->layer]) {
            ck_assert_msg(memcmp(g + off, start + off,
                                 st->count * sizeof *g) == 0,
                          "gpu: %s of a bn_eval layer changed", st->name);
            ck_assert_msg(memcmp(c + off, start + off,
                                 st->count * sizeof *g) == 0,
                          "cpu: %s of a bn_eval layer changed", st->name);
        } else {
            ck_assert_msg(memcmp(g + off, start + off,
                                 st->count * sizeof *g) != 0,
                          "gpu: %s did not move in training mode",
                          st->name);
            compare_floor(g + off, c + off, st->count, TOL_STEPS, sfloor,
                          st->name);
        }
        off += st->count;
    }
    ck_assert_uint_eq(off, n);
    free(g);
    free(c);
}

/* N steps on both, every loss compared, then the state. */
static void train_and_check(pair *p, float lr, int use_bn)
{
    size_t n;
    float *start = snapshot(p->gpu, &n);
    size_t n2;
    float *cstart = snapshot(p->cpu, &n2);
    ck_assert_msg(n == n2 && memcmp(start, cstart, n * sizeof *start) == 0,
                  "the backends start from different states");
    free(cstart);
    for (int s = 0; s < STEPS; s++) {
        double loss[2];
        step(p, lr, loss);
        losses_match(loss, s);
    }
    check_state(p, start, use_bn);
    free(start);
}

/* ---- the tests --------------------------------------------------------------- */

START_TEST(test_create_takes_lr_mult_and_bn_eval)
{
    for (int warmup = 0; warmup < 2; warmup++) {
        pair p;
        size_t n;
        pair_init(&p);
        frozen_backbone(&p);
        bn_eval_all(&p);
        pair_create(&p, TD_OPT_ADAMW, 1, 1, warmup);
        /* the warm-up step leaves no trace: as created, on both */
        float *g = snapshot(p.gpu, &n), *c = snapshot(p.cpu, &n);
        ck_assert_msg(memcmp(g, c, n * sizeof *g) == 0, "warmup %d: the "
                      "state after create differs from the CPU's", warmup);
        free(g);
        free(c);
        pair_close(&p);
    }
}
END_TEST

/* kernels/bn_eval.h on the host against its formulas in double. */
START_TEST(test_bn_eval_kernel_body)
{
    enum { N = 3, C = 4, HW = 7 };
    float x[N * C * HW], dy[N * C * HW], part[2 * N * C];
    float mean[C], var[C], gamma[C], dg[C], db[C];
    const float eps = 1e-5f;
    for (int i = 0; i < N * C * HW; i++) {
        x[i] = (float)td_rng_uniform(7, 1, (uint64_t)i) * 4.0f - 1.0f;
        dy[i] = (float)td_rng_uniform(7, 2, (uint64_t)i) - 0.5f;
    }
    for (int c = 0; c < C; c++) {
        mean[c] = 0.3f * (float)c - 0.2f;
        var[c] = 0.5f + (float)c;
        gamma[c] = 1.5f - 0.25f * (float)c;
    }
    for (size_t pl = 0; pl < (size_t)N * C; pl++)
        td_bn_eval_plane(x, dy, mean, part, pl, C, HW);
    for (int c = 0; c < C; c++)
        td_bn_eval_chan(part, var, eps, dg, db, N, C, c);
    for (int c = 0; c < C; c++) {
        double inv = 1.0 / sqrt((double)var[c] + eps), sg = 0, sb = 0;
        for (int i = 0; i < N; i++)
            for (int k = 0; k < HW; k++) {
                size_t e = ((size_t)i * C + c) * HW + k;
                sg += (double)dy[e] * ((double)x[e] - mean[c]) * inv;
                sb += dy[e];
                double dx = (double)dy[e] * gamma[c] * inv;
                float got = td_bn_eval_dx(dy[e], gamma[c],
                                          td_bn_eval_inv(var[c], eps));
                ck_assert_msg(fabs(got - dx) <= 1e-6 * fmax(1, fabs(dx)),
                              "dx[%zu] %.9g, want %.9g", e, got, dx);
            }
        ck_assert_msg(fabs(dg[c] - sg) <= 1e-5 * fmax(1, fabs(sg)),
                      "dgamma[%d] %.9g, want %.9g", c, dg[c], sg);
        ck_assert_msg(fabs(db[c] - sb) <= 1e-5 * fmax(1, fabs(sb)),
                      "dbeta[%d] %.9g, want %.9g", c, db[c], sb);
    }
}
END_TEST

/* One step, no update: values, gradients and parameter gradients through
 * batch norms in inference mode, as the CPU computes them. */
START_TEST(test_bn_eval_step_matches_cpu)
{
    pair p;
    double loss[2];
    size_t n;
    pair_init(&p);
    frozen_backbone(&p);
    bn_eval_all(&p);
    gpu_layout = TD_MEM_PER_LAYER; /* reads every layer's tensors */
    pair_create(&p, TD_OPT_SGD, 1, 1, 0);
    float *start = snapshot(p.gpu, &n);
    step(&p, 0.0f, loss);
    ck_assert_msg(fabs(loss[1] - loss[0]) <= TOL_VALUE * fabs(loss[0]),
                  "loss gpu %.9g cpu %.9g", loss[1], loss[0]);
    for (int L = 0; L < p.m->nlayers; L++) {
        char what[128];
        const td_shape s = p.m->layers[L].out;
        size_t cnt = (size_t)BATCH * s.c * s.h * s.w;
        snprintf(what, sizeof what, "value of %s", p.m->layers[L].name);
        compare_tensor(&p, TD_T_VALUE, L, cnt, TOL_VALUE, 0, what);
        if (L == 0)
            continue;
        snprintf(what, sizeof what, "gradient of %s", p.m->layers[L].name);
        compare_tensor(&p, TD_T_GRAD, L, cnt, TOL_GRAD, 0, what);
    }
    double gmax = 0;
    for (int q = 0; q < p.m->nparams; q++) {
        size_t cnt = p.m->params[q].count;
        float *g = malloc(cnt * sizeof *g);
        ck_assert_int_eq(p.cpu->ops->read_tensor(p.cpu, TD_T_PARAM_GRAD, q,
                                                 g, cnt), 0);
        gmax = fmax(gmax, max_abs(g, cnt));
        free(g);
    }
    ck_assert_double_gt(gmax, 1e-4);
    for (int q = 0; q < p.m->nparams; q++)
        compare_tensor(&p, TD_T_PARAM_GRAD, q, p.m->params[q].count,
                       TOL_GRAD, FLOOR_SHARE * gmax, p.m->params[q].name);
    /* the frozen batch norms' gradients are there (dropped by mult 0) */
    size_t nb = p.m->params[param_index(p.m, "b1.weight")].count;
    float *dg = malloc(nb * sizeof *dg);
    ck_assert_int_eq(p.gpu->ops->read_tensor(p.gpu, TD_T_PARAM_GRAD,
                                             param_index(p.m, "b1.weight"),
                                             dg, nb), 0);
    ck_assert_double_gt(max_abs(dg, nb), 0);
    free(dg);
    /* running statistics untouched by a training forward */
    float *after = snapshot(p.gpu, &n);
    ck_assert(memcmp(start, after, n * sizeof *start) == 0);
    free(after);
    free(start);
    pair_close(&p);
}
END_TEST

START_TEST(test_frozen_backbone_sgd)
{
    pair p;
    pair_init(&p);
    frozen_backbone(&p);
    pair_create(&p, TD_OPT_SGD, 1, 0, 0);
    ck_assert_double_gt(p.cpu->cfg.optim.momentum, 0);
    ck_assert_double_gt(p.cpu->cfg.optim.weight_decay, 0);
    train_and_check(&p, 0.01f, 0);
    pair_close(&p);
}
END_TEST

START_TEST(test_frozen_backbone_sgd_bn_eval)
{
    pair p;
    pair_init(&p);
    frozen_backbone(&p);
    bn_eval_all(&p);
    pair_create(&p, TD_OPT_SGD, 1, 1, 0);
    train_and_check(&p, 0.01f, 1);
    pair_close(&p);
}
END_TEST

START_TEST(test_frozen_backbone_adamw_bn_eval)
{
    pair p;
    pair_init(&p);
    frozen_backbone(&p);
    bn_eval_all(&p);
    pair_create(&p, TD_OPT_ADAMW, 1, 1, 0);
    train_and_check(&p, 1e-3f, 1);
    pair_close(&p);
}
END_TEST

/* Trainable convolutions below frozen batch norms in inference mode: their
 * updates depend on the inference-mode backward's dx. */
START_TEST(test_training_through_bn_eval)
{
    pair p;
    pair_init(&p);
    frozen_backbone(&p);
    set_mult(&p, "c2", 1.0f);
    set_mult(&p, "c3", 0.5f);
    bn_eval_all(&p);
    pair_create(&p, TD_OPT_SGD, 1, 1, 0);
    train_and_check(&p, 0.01f, 1);
    pair_close(&p);
}
END_TEST

static long launches_per_step(int use_mult)
{
    pair p;
    double loss[2];
    pair_init(&p);
    pair_create(&p, TD_OPT_ADAMW, use_mult, 0, 0);
    step(&p, 1e-3f, loss);
    long before = td_sim_launches(0);
    step(&p, 1e-3f, loss);
    long k = td_sim_launches(0) - before;
    pair_close(&p);
    return k;
}

/* Multipliers all 1: one fused update launch, as without any. */
START_TEST(test_all_ones_cost_no_launches)
{
    long none = launches_per_step(0), ones = launches_per_step(1);
    ck_assert_int_gt(none, 0);
    ck_assert_msg(ones == none, "a step launched %ld kernels with "
                  "multipliers all 1, %ld without", ones, none);
}
END_TEST

static Suite *sim_freeze_suite(void)
{
    Suite *s = suite_create("sim_freeze");
    TCase *tc = tcase_create("freeze");
    tcase_add_test(tc, test_create_takes_lr_mult_and_bn_eval);
    tcase_add_test(tc, test_bn_eval_kernel_body);
    tcase_add_test(tc, test_bn_eval_step_matches_cpu);
    tcase_add_test(tc, test_frozen_backbone_sgd);
    tcase_add_test(tc, test_frozen_backbone_sgd_bn_eval);
    tcase_add_test(tc, test_frozen_backbone_adamw_bn_eval);
    tcase_add_test(tc, test_training_through_bn_eval);
    tcase_add_test(tc, test_all_ones_cost_no_launches);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(sim_freeze_suite)
