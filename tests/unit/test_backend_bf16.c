/* test_backend_bf16.c - the CPU backend in bf16 (mixed precision) against
 * the reference layers twice: in fp32 (what the model means) and
 * bf16-rounded (what bf16 storage should give), layer by layer, with the
 * tolerances of the table below; that activations really are bf16; that
 * weights, gradients, optimizer state and snapshots stay fp32; and that a
 * snapshot moves between fp32 and bf16 backends unchanged.
 *
 * Skipped (77) on a CPU without native bf16 in oneDNN (caps.h); the
 * refusal there is tested in test_precision.  One OpenMP thread.  Batch
 * norm on oneDNN everywhere (TD_CPU_BN=onednn; the AMX plan's own is
 * test_backend_bf16_bn's).
 *
 * Tolerances: per layer kind and model, relative to the tensor, in max-
 * or l2-norm; the table and what was observed are below.  bf16 keeps 8
 * significant bits (rounding error <= 2^-8 = 0.39% of a value).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/caps.h"
#include "base/error.h"
#include "base/rng.h"
#include "bf16.h"
#include "cpu_ab.h"
#include "optim_update.h"
#include "ref_layers.h"
#include "ref_models.h"
#include "step_params.h"
#include "tdtest.h"

enum { N = 4, K = 5 };

/* Tolerances, per layer kind, relative (see expect()):
 *   v_b  value vs the bf16-rounded reference, max-norm: the backend must
 *        compute what bf16 storage implies (observed <= 0.01);
 *   v_f  value vs the fp32 reference, l2-norm: what bf16 costs the
 *        forward pass (observed 0.003-0.01 on the shallow models);
 *   g_b  gradient vs the bf16-rounded reference, l2-norm (observed <=
 *        0.005 on the shallow models).
 * Gradients and parameter gradients against fp32 (g_f) are looser: near
 * a relu's zero or a max-pooling tie, input and weight rounding flips the
 * decision and moves a whole gradient element, and batch norm's backward
 * (dy minus its means) cancels; at initialisation on random pixels and
 * tiny batches that reaches 0.1-0.3 (l2) upstream of the first such
 * layer, which is why the accuracy of a bf16 training run is the end-to-end
 * check (docs/compute.md).  resnet20 (20 layers, batch 2, batch norm over
 * 32-512 values) multiplies the bounds by `depth`: values x5, gradients vs
 * the bf16-rounded reference x15 (observed 0.08-0.14 l2: the reference
 * rounds at slightly other points, and 20 layers of relu decisions
 * follow), gradients vs fp32 x2. */
typedef struct depth {
    double v, g_b, g_f;
} depth;
static const depth shallow = {1, 1, 1}, resnet20_depth = {5, 15, 2};
typedef struct layer_tol {
    double v_b, v_f, g_b;
} layer_tol;

static layer_tol tol_of(enum td_layer_kind k)
{
    switch (k) {
    case TD_L_CONV: return (layer_tol){0.02, 0.010, 0.010};
    case TD_L_BN: return (layer_tol){0.02, 0.015, 0.010};
    case TD_L_RELU: return (layer_tol){0.02, 0.015, 0.010};
    case TD_L_MAXPOOL:
    case TD_L_AVGPOOL:
    case TD_L_GAP: return (layer_tol){0.02, 0.015, 0.010};
    case TD_L_DENSE: return (layer_tol){0.02, 0.015, 0.010};
    case TD_L_ADD: return (layer_tol){0.02, 0.015, 0.010};
    default: return (layer_tol){0.02, 0.015, 0.010}; /* flatten, dropout */
    }
}
/* gradients of layers and parameters vs fp32; parameter gradients vs the
 * bf16-rounded reference (fp32 sums of bf16 products).  The reference
 * rounds where the backend stores bf16 but cannot follow each kernel's
 * summation order: fmnist-cnn's parameter gradients are within 0.006 of
 * it on the AVX512_BF16 kernels (blocked layout) and within 0.016 on AMX
 * (channels-last: batch norm statistics summed in another order flip a
 * few bf16 roundings from bn1 on), while both stay as close to fp32
 * (0.157 vs 0.156 for conv1.weight); 0.025 leaves a margin over 0.016. */
static const double tol_g_f = 0.35, tol_pg_b = 0.025;

typedef struct fixture {
    td_model *m;
    td_backend *be;
    uint8_t *px;
    int32_t labels[64];
    td_batch b;
    td_ref rf, rb; /* fp32 and bf16-rounded references */
} fixture;

static const float mean[2] = {0.3f, 0.6f}, sd[2] = {0.25f, 0.5f};

static td_backend *make(const td_model *m, int n, enum td_dtype dt,
                        enum td_optim_type opt)
{
    char err[256] = "";
    /* the tiny models' 2-channel layers have only reference bf16 kernels
     * in oneDNN: their numerics are what is tested here */
    td_backend_config cfg = {.batch = n, .threads = 1, .seed = 5,
                             .dtype = dt, .allow_slow_bf16 = 1};
    for (int c = 0; c < m->layers[0].out.c; c++) {
        cfg.mean[c] = mean[c % 2];
        cfg.std[c] = sd[c % 2];
    }
    td_optim_defaults(&cfg.optim, opt);
    cfg.optim.weight_decay = 0.01;
    td_backend *be = NULL;
    int rc = td_backend_create("cpu", m, &cfg, &be, err, sizeof err);
    ck_assert_msg(rc == 0, "create: %s", err);
    return be;
}

static void ref_setup(fixture *f, td_ref *r, int n, int bf16)
{
    const td_shape in = f->m->layers[0].out;
    ck_assert_int_eq(td_ref_init(r, f->m, n), 0);
    size_t off = 0;
    for (int p = 0; p < f->m->nparams; p++) {
        size_t cnt = f->m->params[p].count;
        float *v = malloc(cnt * sizeof *v);
        ck_assert_int_eq(f->be->ops->read_tensor(f->be, TD_T_PARAM, p, v,
                                                 cnt), 0);
        for (size_t i = 0; i < cnt; i++)
            r->params[off + i] = v[i];
        off += cnt;
        free(v);
    }
    for (int i = 0; i < n; i++)
        for (int c = 0; c < in.c; c++)
            for (int y = 0; y < in.h * in.w; y++) {
                /* the backend normalises in fp32: x * scale + bias */
                float s, b;
                s = 1.0f / (255.0f * sd[c % 2]);
                b = -mean[c % 2] / sd[c % 2];
                r->y[0][((size_t)i * in.c + c) * in.h * in.w + y] =
                    (float)f->px[((size_t)i * in.h * in.w + y) * in.c + c] *
                        s + b;
            }
    memcpy(r->labels, f->labels, sizeof f->labels[0] * (size_t)n);
    r->bf16 = bf16;
    if (bf16)
        td_ref_round_weights(r);
}

static void setup_fx(fixture *f, const char *name, td_shape in, int classes,
                     int n)
{
    memset(f, 0, sizeof *f);
    f->m = ref_load_model(name, in, classes);
    f->be = make(f->m, n, TD_BF16, TD_OPT_SGD);
    size_t per = (size_t)in.c * in.h * in.w;
    f->px = malloc(per * (size_t)n);
    for (size_t i = 0; i < per * (size_t)n; i++)
        f->px[i] = (uint8_t)td_rng_below(3, 1, i, 256);
    for (int i = 0; i < n; i++)
        f->labels[i] = (int32_t)td_rng_below(3, 2, (uint64_t)i,
                                             (uint64_t)classes);
    f->b = (td_batch){.data = f->px, .labels = f->labels, .n = n, .h = in.h,
                      .w = in.w, .c = in.c, .layout = TD_LAYOUT_NHWC};
    ref_setup(f, &f->rf, n, 0);
    ref_setup(f, &f->rb, n, 1);
}

static void teardown_fx(fixture *f)
{
    td_ref_free(&f->rf);
    td_ref_free(&f->rb);
    td_backend_destroy(f->be);
    td_model_free(f->m);
    free(f->px);
}

/* max |got - want| / max(max |want|, 1e-2) */
static double rel_max(const float *got, const double *want, size_t n,
                      size_t *at)
{
    double mx = 1e-2, err = 0;
    for (size_t i = 0; i < n; i++)
        mx = fmax(mx, fabs(want[i]));
    for (size_t i = 0; i < n; i++)
        if (fabs(got[i] - want[i]) > err) {
            err = fabs(got[i] - want[i]);
            *at = i;
        }
    return err / mx;
}

/* ||got - want|| / ||want||: robust to the few elements where bf16
 * rounding makes two values of a max-pooling window tie or swap, which
 * sends that gradient element to a neighbour (both correct). */
static double rel_l2(const float *got, const double *want, size_t n)
{
    double d = 0, w = 0, mx = 0;
    for (size_t i = 0; i < n; i++) {
        d += (got[i] - want[i]) * (got[i] - want[i]);
        w += want[i] * want[i];
        mx = fmax(mx, fabs(want[i]));
    }
    /* the same floor as rel_max: a tensor that should be ~0 everywhere
     * (a bias before batch norm) is judged on the scale 1e-2 */
    w = fmax(w, (double)n * 1e-4);
    return sqrt(d / w);
}

enum { MAX = 0, L2 = 1 };

static void expect(const char *what, const char *ref, int norm,
                   const float *got, const double *want, size_t n, double tol)
{
    size_t at = 0;
    double em = rel_max(got, want, n, &at), el = rel_l2(got, want, n);
    double e = norm == MAX ? em : el;
    if (getenv("TD_BF16_VERBOSE"))
        fprintf(stderr, "%-24s vs %s: max %.4f, l2 %.4f (tolerance %s "
                "%.3f)\n", what, ref, em, el, norm == MAX ? "max" : "l2",
                tol);
    if (getenv("TD_BF16_SURVEY")) /* print every tensor, assert nothing */
        return;
    ck_assert_msg(e <= tol, "%s vs %s reference: relative %s error %.4g > "
                  "%.3g (largest at %zu: got %.7g, want %.7g)", what, ref,
                  norm == MAX ? "max" : "l2", e, tol, at, (double)got[at],
                  want[at]);
}

/* Every element a bf16 value: the tensor was stored in bf16. */
static void expect_bf16_values(const char *what, const float *v, size_t n)
{
    size_t exact = 0;
    for (size_t i = 0; i < n; i++)
        exact += td_bf16_round(v[i]) == v[i];
    ck_assert_msg(exact == n, "%s: %zu of %zu values are not bf16", what,
                  n - exact, n);
}

static void compare_step(fixture *f, int layer_grads, depth d)
{
    td_backend *be = f->be;
    const td_model *m = f->m;
    td_step_stats st;
    ck_assert_int_eq(td_backend_upload(be, &f->b), 0);
    ck_assert_int_eq(td_backend_train_step(be, 0.0f, 1), 0);
    ck_assert_int_eq(td_backend_read_stats(be, &st), 0);
    td_ref *refs[2] = {&f->rb, &f->rf};
    for (int k = 0; k < 2; k++) {
        td_ref_forward(refs[k], 1);
        td_ref_backward(refs[k]);
    }
    /* the loss is computed in fp32 from the bf16 logits */
    ck_assert_double_eq_tol(st.loss_sum / f->rb.n, f->rb.loss,
                            1e-3 * fmax(1, f->rb.loss));
    ck_assert_double_eq_tol(st.loss_sum / f->rf.n, f->rf.loss,
                            2e-2 * fmax(1, f->rf.loss));
    for (int L = 1; L < m->nlayers; L++) {
        size_t n = td_ref_size(&f->rb, L);
        float *v = malloc(n * sizeof *v);
        char what[128];
        layer_tol t = tol_of(m->layers[L].kind);
        int rc = be->ops->read_tensor(be, TD_T_VALUE, L, v, n);
        if (rc == TD_E_NOTSUP) { /* fused away, e.g. bn before relu */
            free(v);
            continue;
        }
        ck_assert_msg(rc == 0, "read %s: %s", m->layers[L].name, be->err);
        snprintf(what, sizeof what, "value of %s", m->layers[L].name);
        expect_bf16_values(what, v, n);
        expect(what, "bf16", MAX, v, f->rb.y[L], n, t.v_b);
        expect(what, "fp32", L2, v, f->rf.y[L], n, t.v_f * d.v);
        if (layer_grads) {
            ck_assert_int_eq(be->ops->read_tensor(be, TD_T_GRAD, L, v, n), 0);
            snprintf(what, sizeof what, "gradient of %s", m->layers[L].name);
            expect_bf16_values(what, v, n);
            expect(what, "bf16", L2, v, f->rb.dy[L], n, t.g_b * d.g_b);
            expect(what, "fp32", L2, v, f->rf.dy[L], n, tol_g_f * d.g_f);
        }
        free(v);
    }
    size_t off = 0;
    for (int p = 0; p < m->nparams; p++) {
        size_t n = m->params[p].count;
        float *g = malloc(n * sizeof *g);
        ck_assert_int_eq(be->ops->read_tensor(be, TD_T_PARAM_GRAD, p, g, n),
                         0);
        expect(m->params[p].name, "bf16", L2, g, f->rb.grads + off, n,
               tol_pg_b * d.g_b);
        expect(m->params[p].name, "fp32", L2, g, f->rf.grads + off, n,
               tol_g_f * d.g_f);
        off += n;
        free(g);
    }
}

/* One training step of each model, bf16 against the references.  Layer
 * gradients are skipped for fmnist-cnn as in test_backend_cpu: max
 * pooling after a relu sees ties at zero, where any choice is a correct
 * gradient. */
static const struct {
    const char *model;
    td_shape in;
    int classes, n, layer_grads;
    const depth *d;
} models[] = {
    {"tiny-all", {2, 9, 9}, K, N, 1, &shallow},
    {"tiny-flat", {2, 9, 9}, K, N, 1, &shallow},
    {"fmnist-cnn", {1, 28, 28}, 10, 3, 0, &shallow},
    {"resnet20", {3, 16, 16}, 10, 2, 1, &resnet20_depth},
};

START_TEST(test_model_step_bf16)
{
    fixture f;
    setup_fx(&f, models[_i].model, models[_i].in, models[_i].classes,
             models[_i].n);
    compare_step(&f, models[_i].layer_grads, *models[_i].d);
    teardown_fx(&f);
}
END_TEST

/* The optimizer updates fp32 master weights with the fp32 gradient, by the
 * same kernel as in fp32: the weights are not bf16 after a step. */
START_TEST(test_master_weights_stay_fp32)
{
    fixture f;
    setup_fx(&f, "tiny-all", (td_shape){2, 9, 9}, K, N);
    size_t pc = f.m->param_count;
    float *w0, *w1, *g;
    tdt_step_params(f.be, f.m, &f.b, 0.1f, &w0, &w1, &g);
    const td_optim_config *o = &f.be->cfg.optim;
    size_t not_bf16 = 0;
    for (size_t i = 0; i < pc; i++) {
        float w = w0[i], v = 0;
        td_sgd_elem(&w, &v, g[i], 0.1f, (float)o->momentum,
                    (float)o->weight_decay, o->nesterov);
        ck_assert_float_eq_tol(w1[i], w, 1e-6f * (1 + fabsf(w)));
        not_bf16 += td_bf16_round(w1[i]) != w1[i];
        not_bf16 += td_bf16_round(g[i]) != g[i];
    }
    /* fp32 values are bf16 by chance 1 time in 2^16 */
    ck_assert_uint_gt(not_bf16, pc);
    /* the next step reads the new weights: the loss changes */
    td_step_stats a, b;
    td_backend_read_stats(f.be, &a);
    ck_assert_int_eq(td_backend_eval_step(f.be), 0);
    td_backend_read_stats(f.be, &a);
    float *wp = malloc(f.m->params[0].count * sizeof *wp);
    f.be->ops->read_tensor(f.be, TD_T_PARAM, 0, wp, f.m->params[0].count);
    for (size_t i = 0; i < f.m->params[0].count; i++)
        wp[i] *= 2;
    ck_assert_int_eq(f.be->ops->write_param(f.be, 0, wp,
                                            f.m->params[0].count), 0);
    ck_assert_int_eq(td_backend_eval_step(f.be), 0);
    td_backend_read_stats(f.be, &b);
    ck_assert(a.loss_sum != b.loss_sum);
    free(wp);
    free(w0);
    free(w1);
    free(g);
    teardown_fx(&f);
}
END_TEST

/* A snapshot taken in bf16 restores into fp32 and back without a bit
 * changing (fp32 master weights, optimizer slots and statistics), and the
 * fp32 backend then computes what an fp32 backend given those weights
 * computes. */
static void check_cross(enum td_dtype from, enum td_dtype to)
{
    td_model *m = ref_load_model("tiny-all", (td_shape){2, 9, 9}, K);
    td_backend *a = make(m, N, from, TD_OPT_ADAMW);
    td_backend *b = make(m, N, to, TD_OPT_ADAMW);
    uint8_t px[N * 2 * 81];
    int32_t lab[N] = {0, 1, 2, 3};
    for (size_t i = 0; i < sizeof px; i++)
        px[i] = (uint8_t)td_rng_below(9, 1, i, 256);
    td_batch bt = {.data = px, .labels = lab, .n = N, .h = 9, .w = 9, .c = 2,
                   .layout = TD_LAYOUT_NHWC};
    size_t nf = td_backend_snapshot_floats(m, &a->cfg.optim);
    float *s1 = malloc(nf * sizeof *s1), *s2 = malloc(nf * sizeof *s2);
    ck_assert_int_eq(td_backend_upload(a, &bt), 0);
    for (int t = 1; t <= 3; t++)
        ck_assert_int_eq(td_backend_train_step(a, 0.01f, t), 0);
    ck_assert_int_eq(td_backend_snapshot(a, s1, nf), 0);
    ck_assert_int_eq(td_backend_restore(b, s1, nf), 0);
    ck_assert_int_eq(td_backend_snapshot(b, s2, nf), 0);
    ck_assert_mem_eq(s1, s2, nf * sizeof *s1);
    /* both continue: the same step in either precision agrees within
     * bf16's tolerance, and the restored one is not the fresh init */
    td_step_stats sa, sb;
    td_backend_read_stats(a, &sa);
    ck_assert_int_eq(td_backend_upload(b, &bt), 0);
    ck_assert_int_eq(td_backend_train_step(a, 0.01f, 4), 0);
    ck_assert_int_eq(td_backend_train_step(b, 0.01f, 4), 0);
    td_backend_read_stats(a, &sa);
    td_backend_read_stats(b, &sb);
    ck_assert_double_eq_tol(sa.loss_sum, sb.loss_sum,
                            0.02 * fabs(sa.loss_sum));
    free(s1);
    free(s2);
    td_backend_destroy(a);
    td_backend_destroy(b);
    td_model_free(m);
}

START_TEST(test_snapshot_bf16_to_fp32) { check_cross(TD_BF16, TD_F32); }
END_TEST

START_TEST(test_snapshot_fp32_to_bf16) { check_cross(TD_F32, TD_BF16); }
END_TEST

/* Dropout in bf16: kept elements are x / keep rounded once, the rest 0. */
START_TEST(test_dropout_bf16)
{
    json_error_t je;
    json_t *def = json_loads("{\"layers\": [{\"type\": \"conv2d\", "
        "\"channels\": 16, \"kernel\": 1, \"bias\": true}, {\"type\": "
        "\"dropout\", \"name\": \"dr\", \"rate\": 0.25}, {\"type\": "
        "\"global_avgpool\"}, {\"type\": \"dense\", \"units\": 5}]}", 0, &je);
    td_model *m = NULL;
    char err[256];
    ck_assert_int_eq(td_model_build(def, (td_shape){1, 8, 8}, 5, &m, err,
                                    sizeof err), 0);
    json_decref(def);
    td_backend *be = make(m, 8, TD_BF16, TD_OPT_SGD);
    uint8_t px[8 * 64];
    int32_t lab[8] = {0};
    for (int i = 0; i < 8 * 64; i++)
        px[i] = (uint8_t)(i % 251 + 1);
    td_batch b = {.data = px, .labels = lab, .n = 8, .h = 8, .w = 8, .c = 1};
    size_t n = 8 * 16 * 64, zeros = 0;
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    int dr = td_model_find(m, "dr");
    ck_assert_int_eq(td_backend_upload(be, &b), 0);
    ck_assert_int_eq(td_backend_train_step(be, 0.0f, 1), 0);
    be->ops->read_tensor(be, TD_T_VALUE, dr - 1, x, n);
    be->ops->read_tensor(be, TD_T_VALUE, dr, y, n);
    for (size_t i = 0; i < n; i++) {
        if (y[i] == 0.0f && x[i] != 0.0f)
            zeros++;
        else
            ck_assert_float_eq(y[i], td_bf16_round(x[i] * (1 / 0.75f)));
    }
    ck_assert_uint_gt(zeros, 2048 - 240);
    ck_assert_uint_lt(zeros, 2048 + 240);
    free(x);
    free(y);
    td_backend_destroy(be);
    td_model_free(m);
}
END_TEST

/* A layer oneDNN runs only in its reference loops in bf16 (backward
 * weights of a 3 -> 8 channel convolution on the AVX512_BF16 kernels) is
 * refused, naming it: no silent slow path (precision auto then trains in
 * fp32: test_obs's job).  On AMX the backend plans channels-last (nhwc)
 * activations, where oneDNN 2.6 has AMX kernels for this layer too, so
 * the model is accepted there; test_backend_bf16_avx512 checks the
 * refusal on every bf16 machine by limiting oneDNN to AVX512_BF16. */
START_TEST(test_reference_kernel_refused)
{
    int amx = strcmp(td_cpu_caps_get()->isa, "avx512_core_amx") == 0;
    td_model *m = td_ab_model(TD_AB_STEM3_JSON, (td_shape){3, 32, 32});
    char err[256];
    td_backend_config cfg = {.batch = 16, .threads = 1, .dtype = TD_BF16,
                             .std = {1, 1, 1}};
    td_optim_defaults(&cfg.optim, TD_OPT_SGD);
    td_backend *be = NULL;
    if (amx) {
        ck_assert_msg(td_backend_create("cpu", m, &cfg, &be, err,
                                        sizeof err) == 0, "%s", err);
        td_backend_destroy(be);
        be = NULL;
    } else {
        ck_assert_int_eq(td_backend_create("cpu", m, &cfg, &be, err,
                                           sizeof err), TD_E_NOTSUP);
        ck_assert_msg(strstr(err, "bf16: oneDNN has only a reference (slow) "
                             "kernel for conv bwd weights of layer c1"),
                      "%s", err);
        ck_assert_ptr_null(be);
    }
    cfg.dtype = TD_F32;
    ck_assert_int_eq(td_backend_create("cpu", m, &cfg, &be, err, sizeof err),
                     0);
    td_backend_destroy(be);
    td_model_free(m);
}
END_TEST

static Suite *backend_bf16_suite(void)
{
    Suite *s = suite_create("backend_bf16");
    TCase *tc = tcase_create("backend_bf16");
    tcase_add_loop_test(tc, test_model_step_bf16, 0,
                        (int)(sizeof models / sizeof models[0]));
    tcase_add_test(tc, test_master_weights_stay_fp32);
    tcase_add_test(tc, test_snapshot_bf16_to_fp32);
    tcase_add_test(tc, test_snapshot_fp32_to_bf16);
    tcase_add_test(tc, test_dropout_bf16);
    tcase_add_test(tc, test_reference_kernel_refused);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    char d[256];
    td_cpu_caps_describe(td_cpu_caps_get(), d, sizeof d);
    if (!td_cpu_caps_get()->bf16) {
        printf("SKIP: no native bf16 on this CPU (%s)\n", d);
        return TD_TEST_SKIP;
    }
    /* oneDNN's batch norm: this reference rounds where that plan stores
     * bf16 and matches it bit for bit on AMX; the hand-written bf16
     * channels-last batch norm (cpu_bn.c) is held to fp32 relative to
     * oneDNN's accuracy in test_backend_bf16_bn */
    setenv("TD_CPU_BN", "onednn", 1);
    Suite *s = backend_bf16_suite();
    return td_test_run(s);
}
