/* test_backend_cpu.c - the oneDNN backend against the reference layers:
 * forward values, gradients of every tensor and parameter, running
 * statistics, inference mode, the optimizer update, snapshots, and the
 * errors of bad input.  One OpenMP thread, so the suite is not threaded. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_bn8.h"
#include "backend/cpu/cpu_pool.h"
#include "backend/cpu/cpu_sbw.h"
#include "base/error.h"
#include "base/log.h"
#include "base/rng.h"
#include "optim_update.h"
#include "ref_layers.h"
#include "ref_models.h"
#include "step_params.h"
#include "tdtest.h"

enum { N = 4, K = 5 };

typedef struct fixture {
    td_model *m;
    td_backend *be;
    uint8_t *px;
    int32_t labels[64];
    td_batch b;
    td_ref r;
} fixture;

static const float mean[2] = {0.3f, 0.6f}, sd[2] = {0.25f, 0.5f};

/* The fixtures' backend configuration. */
static td_backend_config fx_config(td_shape in, int n, enum td_optim_type opt)
{
    td_backend_config cfg = {.batch = n, .threads = 1, .seed = 5};
    for (int c = 0; c < in.c; c++) {
        cfg.mean[c] = mean[c % 2];
        cfg.std[c] = sd[c % 2];
    }
    td_optim_defaults(&cfg.optim, opt);
    cfg.optim.weight_decay = 0.01;
    return cfg;
}

static void setup_fx(fixture *f, const char *name, td_shape in, int classes,
                     int n, enum td_optim_type opt)
{
    char err[256] = "";
    memset(f, 0, sizeof *f);
    f->m = ref_load_model(name, in, classes);
    td_backend_config cfg = fx_config(in, n, opt);
    int rc = td_backend_create("cpu", f->m, &cfg, &f->be, err, sizeof err);
    ck_assert_msg(rc == 0, "create: %s", err);
    size_t per = (size_t)in.c * in.h * in.w;
    f->px = malloc(per * (size_t)n);
    for (size_t i = 0; i < per * (size_t)n; i++)
        f->px[i] = (uint8_t)td_rng_below(3, 1, i, 256);
    for (int i = 0; i < n; i++)
        f->labels[i] = (int32_t)td_rng_below(3, 2, (uint64_t)i,
                                             (uint64_t)classes);
    f->b = (td_batch){.data = f->px, .labels = f->labels, .n = n, .h = in.h,
                      .w = in.w, .c = in.c, .layout = TD_LAYOUT_NHWC};
    ck_assert_int_eq(td_ref_init(&f->r, f->m, n), 0);
    /* same parameters and the same normalised input in double */
    size_t off = 0;
    for (int p = 0; p < f->m->nparams; p++) {
        float *v = malloc(f->m->params[p].count * sizeof *v);
        ck_assert_int_eq(f->be->ops->read_tensor(f->be, TD_T_PARAM, p, v,
                                                 f->m->params[p].count), 0);
        for (size_t i = 0; i < f->m->params[p].count; i++)
            f->r.params[off + i] = v[i];
        off += f->m->params[p].count;
        free(v);
    }
    for (int i = 0; i < n; i++)
        for (int c = 0; c < in.c; c++)
            for (int y = 0; y < in.h * in.w; y++)
                f->r.y[0][((size_t)i * in.c + c) * in.h * in.w + y] =
                    ((double)f->px[((size_t)i * in.h * in.w + y) * in.c + c] /
                         255.0 - mean[c % 2]) / sd[c % 2];
    memcpy(f->r.labels, f->labels, sizeof f->labels[0] * (size_t)n);
}

static void teardown_fx(fixture *f)
{
    td_ref_free(&f->r);
    td_backend_destroy(f->be);
    td_model_free(f->m);
    free(f->px);
}

/* max |got - want| <= tol * max(max |want|, floor) */
static void expect_close(const char *what, const float *got,
                         const double *want, size_t n, double tol)
{
    double mx = 1e-2, err = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++)
        mx = fmax(mx, fabs(want[i]));
    for (size_t i = 0; i < n; i++)
        if (fabs(got[i] - want[i]) > err) {
            err = fabs(got[i] - want[i]);
            at = i;
        }
    ck_assert_msg(err <= tol * mx, "%s: |diff| %.3g at %zu (got %.7g, want "
                  "%.7g, scale %.3g)", what, err, at, n ? got[at] : 0.0,
                  n ? want[at] : 0.0, mx);
}

/* Forward + backward without update; compares every tensor. */
static void compare_step(fixture *f, int layer_grads)
{
    td_backend *be = f->be;
    const td_model *m = f->m;
    td_step_stats st;
    ck_assert_int_eq(td_backend_upload(be, &f->b), 0);
    ck_assert_int_eq(td_backend_train_step(be, 0.0f, 1), 0);
    ck_assert_int_eq(td_backend_read_stats(be, &st), 0);
    td_ref_forward(&f->r, 1);
    td_ref_backward(&f->r);
    ck_assert_int_eq(st.samples, f->r.n);
    ck_assert_int_eq(st.correct, f->r.correct);
    ck_assert_double_eq_tol(st.loss_sum / f->r.n, f->r.loss,
                            1e-4 * fmax(1, f->r.loss));
    for (int L = 1; L < m->nlayers; L++) {
        size_t n = td_ref_size(&f->r, L);
        float *v = malloc(n * sizeof *v);
        char what[128];
        int rc = be->ops->read_tensor(be, TD_T_VALUE, L, v, n);
        if (rc == TD_E_NOTSUP) { /* fused away, e.g. bn before relu */
            free(v);
            continue;
        }
        ck_assert_msg(rc == 0, "read %s: %s", m->layers[L].name, be->err);
        snprintf(what, sizeof what, "value of %s", m->layers[L].name);
        expect_close(what, v, f->r.y[L], n, 2e-5);
        if (layer_grads) {
            ck_assert_int_eq(be->ops->read_tensor(be, TD_T_GRAD, L, v, n), 0);
            snprintf(what, sizeof what, "gradient of %s", m->layers[L].name);
            expect_close(what, v, f->r.dy[L], n, 2e-4);
        }
        free(v);
    }
    size_t off = 0;
    for (int p = 0; p < m->nparams; p++) {
        size_t n = m->params[p].count;
        float *g = malloc(n * sizeof *g);
        ck_assert_int_eq(be->ops->read_tensor(be, TD_T_PARAM_GRAD, p, g, n),
                         0);
        expect_close(m->params[p].name, g, f->r.grads + off, n, 2e-4);
        off += n;
        free(g);
    }
}

START_TEST(test_all_layers_match_reference)
{
    fixture f;
    setup_fx(&f, "tiny-all", (td_shape){2, 9, 9}, K, N, TD_OPT_SGD);
    compare_step(&f, 1);
    teardown_fx(&f);
}
END_TEST

START_TEST(test_flatten_matches_reference)
{
    fixture f;
    setup_fx(&f, "tiny-flat", (td_shape){2, 9, 9}, K, N, TD_OPT_SGD);
    compare_step(&f, 1);
    teardown_fx(&f);
}
END_TEST

/* The real model; layer gradients are skipped because max pooling after a
 * relu sees ties at zero, where any choice is a correct gradient. */
START_TEST(test_fmnist_cnn_matches_reference)
{
    fixture f;
    setup_fx(&f, "fmnist-cnn", (td_shape){1, 28, 28}, 10, 3, TD_OPT_SGD);
    compare_step(&f, 0);
    teardown_fx(&f);
}
END_TEST

/* The plan's kernels as the backend logs them (debug): every primitive
 * oneDNN gave only its reference kernel, and every channels-last retry
 * of a backward weights that got a real one. */
typedef struct kernels_seen {
    int ref, retried, sbw;
} kernels_seen;

static void on_kernel_line(void *user, int level, long job, const char *line)
{
    kernels_seen *k = user;
    const char *p = strstr(line, "cpu backend: ");
    (void)level;
    (void)job;
    if (!p)
        return;
    if (strstr(p, ": ref:"))
        k->ref++;
    else if (strstr(p, "conv bwd weights: cpu_sbw"))
        k->sbw++;
    else if (strstr(p, "conv bwd weights (nhwc): "))
        k->retried++;
}

/* A fixture of n samples with oneDNN held to AVX2 (an AMD EPYC Zen 3 has
 * no more), the plan's debug lines passed to sink.  Relies on Check's
 * fork mode: oneDNN reads ONEDNN_MAX_CPU_ISA once per process. */
static void setup_avx2(fixture *f, const char *model, td_shape in, int n,
                       td_log_sink_fn sink, void *user)
{
    setenv("ONEDNN_MAX_CPU_ISA", "AVX2", 1);
    td_log_set_level(TD_LOG_DEBUG);
    td_log_set_sink(sink, user);
    setup_fx(f, model, in, 10, n, TD_OPT_SGD);
    td_log_set_sink(NULL, NULL);
    td_log_set_level(TD_LOG_INFO);
}

/* fp32 with oneDNN held to AVX2 (an AMD EPYC Zen 3 has no more): the
 * first convolution's backward weights, 1 planar input channel against
 * blocked nChw8c outputs, has only oneDNN 2.6's reference kernel, ~1,000x
 * slower.  Without cpu_sbw.c (TD_CPU_SBW=0) the backend plans it
 * channels-last instead (reorders each step), and the step still matches
 * the reference layers. */
START_TEST(test_fmnist_cnn_avx2_has_no_reference_kernel)
{
    kernels_seen k = {0};
    fixture f;
    setenv("TD_CPU_SBW", "0", 1);
    setup_avx2(&f, "fmnist-cnn", (td_shape){1, 28, 28}, 3, on_kernel_line,
               &k);
    ck_assert_int_eq(k.ref, k.retried);
    ck_assert_msg(k.retried >= 1, "oneDNN gave the AVX2 first layer a real "
                  "backward weights kernel: this test needs a model that "
                  "still meets a reference one");
    compare_step(&f, 0);
    teardown_fx(&f);
}
END_TEST

/* By default the first convolution's backward weights, which oneDNN
 * gives only its reference kernel, run cpu_sbw.c (planar input, nChw8c
 * gradient) instead: no channels-last retry and its reorders, and the
 * step matches the reference layers. */
START_TEST(test_fmnist_cnn_avx2_stem_bwd_weights)
{
    kernels_seen k = {0};
    fixture f;
    setup_avx2(&f, "fmnist-cnn", (td_shape){1, 28, 28}, 3, on_kernel_line,
               &k);
    if (td_sbw_ok(3, 1, 1, 1, 32)) {
        ck_assert_int_eq(k.sbw, 1);
        ck_assert_int_eq(k.ref, 1); /* the primitive asked, then unused */
        ck_assert_int_eq(k.retried, 0);
    } else {
        printf("no AVX2 here: cpu_sbw.c is not planned\n");
    }
    compare_step(&f, 0);
    teardown_fx(&f);
}
END_TEST

/* A ResNet stem's 3x3 stride-2 max pooling with padding 1 (tiny-stem:
 * convolution, batch norm, relu, pooling, on 15x15 so that the windows
 * overlap at every edge) on AVX2: the pooling on cpu_pool.c with the
 * batch norm and relu folded into it (its backward sums the overlapping
 * windows' gradients); the step, layer gradients included, matches the
 * reference layers.  (resnet18 itself at 64x64 and batch 2 does not make
 * a test: its last stage's batch norms see 8 values per channel, and any
 * change of rounding upstream, oneDNN's batch norm or the pooling's,
 * flips relus there.) */
typedef struct pool_seen {
    int pool3, stem_fold;
} pool_seen;

static void on_pool_line(void *user, int level, long job, const char *line)
{
    pool_seen *k = user;
    (void)level;
    (void)job;
    k->pool3 += strstr(line, "max pool: cpu_pool (3x3") != NULL;
    k->stem_fold +=
        strstr(line, "backend: b1 batch norm + relu folded into") != NULL;
}

START_TEST(test_stem_pool3_avx2)
{
    pool_seen k = {0};
    fixture f;
    setup_avx2(&f, "tiny-stem", (td_shape){3, 15, 15}, 3, on_pool_line, &k);
    if (td_maxpool_ok(3, 2, 1, 15, 15, 8)) {
        ck_assert_int_eq(k.pool3, 1);
        ck_assert_int_eq(k.stem_fold, 1);
    }
    compare_step(&f, 1);
    teardown_fx(&f);
}
END_TEST

/* The plan's hand-written fp32 batch norms as the backend logs them
 * (debug): all of them, and those with an add fused. */
typedef struct bn8_seen {
    int all, add, fold;
} bn8_seen;

static void on_bn8_line(void *user, int level, long job, const char *line)
{
    bn8_seen *k = user;
    (void)level;
    (void)job;
    k->fold += strstr(line, "batch norm + relu folded into") != NULL;
    if (!strstr(line, "batch norm: cpu_bn8 (fp32 nChw8c)"))
        return;
    k->all++;
    k->add += strstr(line, " + add + relu") != NULL;
}

static void setup_bn8(fixture *f, const char *model, td_shape in,
                      bn8_seen *k)
{
    setup_avx2(f, model, in, 2, on_bn8_line, k);
}

/* fp32 on AVX2 (nChw8c): each residual block's last batch norm runs
 * cpu_bn8.c fused with the add and the relu after it (9 in resnet20: the
 * shortcut's gradient written by the batch norm's backward, the block
 * input's two gradient summands read as one), its first folded into the
 * Winograd convolution after it (9 more; the stem's, read by an add too,
 * and the shortcuts' stay oneDNN's); with TD_CPU_FOLD=0 the first ones
 * stay oneDNN's.  The step, layer gradients and the folded relus' values
 * included, matches the reference layers. */
START_TEST(test_resnet20_avx2_fuses_adds)
{
    bn8_seen k = {0};
    fixture f;
    if (_i)
        setenv("TD_CPU_FOLD", "0", 1);
    setup_bn8(&f, "resnet20", (td_shape){3, 16, 16}, &k);
    if (!td_bn8_ok(16)) {
        ck_assert_int_eq(k.all, 0);
        printf("no AVX2 here: cpu_bn8.c is not planned\n");
    } else {
        ck_assert_int_eq(k.all, _i ? 9 : 18);
        ck_assert_int_eq(k.add, 9);
        ck_assert_int_eq(k.fold, _i ? 0 : 9);
    }
    compare_step(&f, 1);
    teardown_fx(&f);
}
END_TEST

/* A backend of model `name` on the fixtures' configuration and batch,
 * made with TD_CPU_FOLD=fold (NULL: unset), TD_CPU_NTSTORE=nt,
 * TD_CPU_WSTATS=ws (NULL: unset) and TD_CPU_BN8=all. */
static td_backend *fold_backend(const td_model *m, td_shape in, int n,
                                const char *fold, const char *nt,
                                const char *ws, const td_batch *b)
{
    char err[256] = "";
    td_backend *be = NULL;
    td_backend_config cfg = fx_config(in, n, TD_OPT_SGD);
    setenv("ONEDNN_MAX_CPU_ISA", "AVX2", 1);
    setenv("TD_CPU_BN8", "all", 1);
    setenv("TD_CPU_NTSTORE", nt, 1);
    if (fold)
        setenv("TD_CPU_FOLD", fold, 1);
    else
        unsetenv("TD_CPU_FOLD");
    if (ws)
        setenv("TD_CPU_WSTATS", ws, 1);
    else
        unsetenv("TD_CPU_WSTATS");
    ck_assert_msg(td_backend_create("cpu", m, &cfg, &be, err, sizeof err) ==
                      0,
                  "create: %s", err);
    ck_assert_int_eq(td_backend_upload(be, b), 0);
    return be;
}

/* Folding a batch norm and relu into their readers, and non-temporal
 * stores, change no bit: three training steps and an evaluation of
 * fmnist-cnn (folds read by Winograd convolutions and max poolings) and
 * resnet20, folded and with non-temporal stores (the statistics by the
 * batch norm's own pass, TD_CPU_WSTATS=0), give the parameters, the
 * loss, the counts and every layer's value (a fold's written out when
 * read) of the same plan with every batch norm on cpu_bn8.c unfolded and
 * plain stores; with the statistics from the Winograd outputs (the
 * default; they agree with the batch norm's own to ~1e-6), after one
 * step the loss within 1e-4 and every parameter within 1e-4 of the
 * largest (test_wino holds the moments to fp64; over three steps a batch
 * of 3 amplifies the difference chaotically: 5e-4 to 3e-3 of resnet20's
 * largest bias as rounding elsewhere changed). */
START_TEST(test_fold_changes_no_bit)
{
    static const char *model[2] = {"fmnist-cnn", "resnet20"};
    static const td_shape shp[2] = {{1, 28, 28}, {3, 16, 16}};
    fixture f;
    setup_fx(&f, model[_i], shp[_i], 10, 3, TD_OPT_SGD);
    /* the unfolded plan with plain stores, the folded one with
     * non-temporal Winograd outputs (TD_CPU_NTSTORE) */
    td_backend *be[4] = {
        fold_backend(f.m, shp[_i], 3, "0", "0", "0", &f.b),
        fold_backend(f.m, shp[_i], 3, NULL, "1", "0", &f.b),
        fold_backend(f.m, shp[_i], 3, NULL, "1", NULL, &f.b),
        fold_backend(f.m, shp[_i], 3, "0", "0", "0", &f.b)};
    static const int steps[4] = {3, 3, 1, 1};
    td_step_stats st[4];
    for (int k = 0; k < 4; k++) {
        for (int t = 1; t <= steps[k]; t++)
            ck_assert_int_eq(td_backend_train_step(be[k], 0.05f, t), 0);
        ck_assert_int_eq(td_backend_eval_step(be[k]), 0);
        ck_assert_int_eq(td_backend_read_stats(be[k], &st[k]), 0);
    }
    ck_assert(memcmp(&st[0].loss_sum, &st[1].loss_sum, sizeof(double)) ==
              0);
    ck_assert_int_eq(st[0].correct, st[1].correct);
    ck_assert_double_eq_tol(st[2].loss_sum, st[3].loss_sum,
                            1e-4 * st[3].loss_sum);
    for (int p = 0; p < f.m->nparams; p++) {
        size_t n = f.m->params[p].count;
        float *v[4] = {malloc(n * 4), malloc(n * 4), malloc(n * 4),
                       malloc(n * 4)};
        double big = 1e-3, diff = 0;
        for (int k = 0; k < 4; k++)
            ck_assert_int_eq(be[k]->ops->read_tensor(be[k], TD_T_PARAM, p,
                                                     v[k], n),
                             0);
        ck_assert_msg(memcmp(v[0], v[1], n * 4) == 0, "%s: %s differs",
                      model[_i], f.m->params[p].name);
        for (size_t i = 0; i < n; i++) {
            big = fmax(big, fabs(v[3][i]));
            diff = fmax(diff, fabs(v[2][i] - v[3][i]));
        }
        ck_assert_msg(diff <= 1e-4 * big, "%s: %s off by %g (of %g) with "
                      "the Winograd outputs' statistics", model[_i],
                      f.m->params[p].name, diff, big);
        free(v[0]), free(v[1]), free(v[2]), free(v[3]);
    }
    for (int L = 1; L < f.m->nlayers; L++) {
        size_t n = td_ref_size(&f.r, L);
        float *v[2] = {malloc(n * 4), malloc(n * 4)};
        int rc[2];
        for (int k = 0; k < 2; k++)
            rc[k] = be[k]->ops->read_tensor(be[k], TD_T_VALUE, L, v[k], n);
        ck_assert_int_eq(rc[0], rc[1]);
        ck_assert_msg(rc[0] != 0 || memcmp(v[0], v[1], n * 4) == 0,
                      "%s: the value of %s differs", model[_i],
                      f.m->layers[L].name);
        free(v[0]), free(v[1]);
    }
    for (int k = 0; k < 4; k++)
        td_backend_destroy(be[k]);
    teardown_fx(&f);
}
END_TEST

/* TD_CPU_BN8=all: every batch norm of fmnist-cnn on cpu_bn8.c with its
 * relu (the bit mask in the backward), still the reference step. */
START_TEST(test_fmnist_cnn_avx2_bn8_all)
{
    bn8_seen k = {0};
    fixture f;
    setenv("TD_CPU_BN8", "all", 1);
    setup_bn8(&f, "fmnist-cnn", (td_shape){1, 28, 28}, &k);
    ck_assert_int_eq(k.all, td_bn8_ok(32) ? 4 : 0);
    ck_assert_int_eq(k.add, 0);
    compare_step(&f, 0);
    teardown_fx(&f);
}
END_TEST

/* The fused batch norm's edges in the AVX2 plan: a fused add and relu
 * (b2), an add with no relu after it (b3 runs cpu_bn8.c, the add stays
 * oneDNN's), 12 channels, not whole 8-channel blocks (b4 stays oneDNN's,
 * its convolutions' outputs in the layout oneDNN picks); the step, layer
 * gradients included, matches the reference layers. */
START_TEST(test_tiny_res8_avx2_batch_norm_edges)
{
    bn8_seen k = {0};
    fixture f;
    setup_bn8(&f, "tiny-res8", (td_shape){3, 9, 9}, &k);
    if (td_bn8_ok(8)) {
        ck_assert_int_eq(k.all, 2);
        ck_assert_int_eq(k.add, 1);
    }
    compare_step(&f, 1);
    teardown_fx(&f);
}
END_TEST

/* Residual blocks with 1x1 stride-2 shortcuts, in blocked layouts. */
START_TEST(test_resnet20_matches_reference)
{
    fixture f;
    setup_fx(&f, "resnet20", (td_shape){3, 16, 16}, 10, 2, TD_OPT_SGD);
    compare_step(&f, 1);
    teardown_fx(&f);
}
END_TEST

/* The ImageNet models plan and train a step: resnet18 at full size,
 * resnet50 (bottlenecks) on 64x64 to keep the suite short. */
START_TEST(test_imagenet_models_step)
{
    const char *names[2] = {"resnet18", "resnet50"};
    int size = _i == 0 ? 224 : 64;
    fixture f;
    setup_fx(&f, names[_i], (td_shape){3, size, size}, 1000, 1, TD_OPT_SGD);
    td_step_stats st;
    ck_assert_int_eq(td_backend_upload(f.be, &f.b), 0);
    ck_assert_int_eq(td_backend_train_step(f.be, 0.01f, 1), 0);
    ck_assert_int_eq(td_backend_read_stats(f.be, &st), 0);
    ck_assert(isfinite(st.loss_sum) && st.loss_sum > 0);
    int fc = f.m->nparams - 2;
    size_t n = f.m->params[fc].count;
    float *g = malloc(n * sizeof *g);
    ck_assert_int_eq(f.be->ops->read_tensor(f.be, TD_T_PARAM_GRAD, fc, g, n),
                     0);
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += fabs(g[i]);
    ck_assert(s > 0 && isfinite(s));
    free(g);
    teardown_fx(&f);
}
END_TEST

/* cfg.bn_eval: batch norms kept in inference mode while training.  The
 * training step's loss is then the evaluation step's, the running
 * statistics stay bitwise, and the gradients are those of the network in
 * evaluation mode (checked against central differences of the reference
 * forward on the running statistics). */
START_TEST(test_bn_eval_trains_in_inference_mode)
{
    fixture f;
    const td_shape in = {2, 9, 9};
    char err[256] = "";
    setup_fx(&f, "tiny-all", in, K, N, TD_OPT_SGD);
    uint8_t *bn = calloc((size_t)f.m->nlayers, 1);
    for (int L = 0; L < f.m->nlayers; L++)
        bn[L] = f.m->layers[L].kind == TD_L_BN;
    td_backend_config cfg = fx_config(in, N, TD_OPT_SGD);
    cfg.bn_eval = bn;
    td_backend *be;
    ck_assert_msg(td_backend_create("cpu", f.m, &cfg, &be, err, sizeof err) ==
                      0, "%s", err);
    size_t nf = td_backend_snapshot_floats(f.m, &cfg.optim);
    float *before = malloc(nf * sizeof *before);
    float *after = malloc(nf * sizeof *after);
    ck_assert_int_eq(td_backend_snapshot(be, before, nf), 0);

    td_step_stats tr, ev, plain_tr, plain_ev;
    ck_assert_int_eq(td_backend_upload(be, &f.b), 0);
    ck_assert_int_eq(td_backend_train_step(be, 0.0f, 1), 0);
    ck_assert_int_eq(td_backend_read_stats(be, &tr), 0);
    ck_assert_int_eq(td_backend_upload(be, &f.b), 0);
    ck_assert_int_eq(td_backend_eval_step(be), 0);
    ck_assert_int_eq(td_backend_read_stats(be, &ev), 0);
    ck_assert_double_eq_tol(tr.loss_sum, ev.loss_sum,
                            1e-5 * fabs(ev.loss_sum));
    ck_assert_int_eq(tr.correct, ev.correct);
    ck_assert_int_eq(td_backend_snapshot(be, after, nf), 0);
    size_t ns = td_model_state_count(f.m);
    size_t soff = nf - ns; /* the snapshot ends with the running stats */
    ck_assert_mem_eq(after + soff, before + soff, ns * sizeof(float));
    /* Without it the same step uses batch statistics: another loss. */
    ck_assert_int_eq(td_backend_upload(f.be, &f.b), 0);
    ck_assert_int_eq(td_backend_train_step(f.be, 0.0f, 1), 0);
    ck_assert_int_eq(td_backend_read_stats(f.be, &plain_tr), 0);
    ck_assert_int_eq(td_backend_upload(f.be, &f.b), 0);
    ck_assert_int_eq(td_backend_eval_step(f.be), 0);
    ck_assert_int_eq(td_backend_read_stats(f.be, &plain_ev), 0);
    ck_assert_msg(fabs(plain_tr.loss_sum - plain_ev.loss_sum) >
                      1e-3 * fabs(plain_ev.loss_sum),
                  "batch and running statistics give the same loss");

    /* c1.weight's gradient against central differences of the reference
     * network in evaluation mode (the running statistics of the state,
     * which the step left alone). */
    size_t nw = f.m->params[0].count;
    float *g = malloc(nw * sizeof *g);
    ck_assert_int_eq(be->ops->read_tensor(be, TD_T_PARAM_GRAD, 0, g, nw), 0);
    for (size_t i = 0; i < ns; i++)
        f.r.running[i] = before[soff + i];
    double gmax = 0, err_max = 0;
    for (size_t k = 0; k < nw; k += 7) {
        const double h = 1e-4, w0 = f.r.params[k];
        f.r.params[k] = w0 + h;
        td_ref_forward(&f.r, 0);
        double lp = f.r.loss;
        f.r.params[k] = w0 - h;
        td_ref_forward(&f.r, 0);
        double lm = f.r.loss;
        f.r.params[k] = w0;
        double num = (lp - lm) / (2 * h);
        gmax = fmax(gmax, fabs(num));
        err_max = fmax(err_max, fabs(num - g[k]));
    }
    ck_assert_msg(gmax > 1e-4, "the gradient is ~0: nothing was checked");
    ck_assert_msg(err_max <= 2e-3 * gmax, "c1.weight gradient off by %g "
                  "(largest %g)", err_max, gmax);
    free(g);
    free(before);
    free(after);
    free(bn);
    td_backend_destroy(be);
    teardown_fx(&f);
}
END_TEST

START_TEST(test_running_stats_and_inference)
{
    fixture f;
    setup_fx(&f, "tiny-all", (td_shape){2, 9, 9}, K, N, TD_OPT_SGD);
    compare_step(&f, 0);
    /* the running statistics after one step, as in a snapshot */
    size_t nf = td_backend_snapshot_floats(f.m, &f.be->cfg.optim);
    float *snap = malloc(nf * sizeof *snap);
    ck_assert_int_eq(td_backend_snapshot(f.be, snap, nf), 0);
    size_t ns = nf - 2 * f.m->param_count; /* SGD momentum: one slot */
    expect_close("running statistics", snap + 2 * f.m->param_count,
                 f.r.running, ns, 1e-5);
    /* inference: batch norm with the running statistics */
    td_step_stats st;
    ck_assert_int_eq(td_backend_upload(f.be, &f.b), 0);
    ck_assert_int_eq(td_backend_eval_step(f.be), 0);
    ck_assert_int_eq(td_backend_read_stats(f.be, &st), 0);
    td_ref_forward(&f.r, 0);
    ck_assert_double_eq_tol(st.loss_sum / N, f.r.loss, 1e-4);
    int last = f.m->nlayers - 1;
    float z[N * K];
    ck_assert_int_eq(f.be->ops->read_tensor(f.be, TD_T_VALUE, last, z, N * K),
                     0);
    expect_close("inference logits", z, f.r.y[last], N * K, 2e-5);
    free(snap);
    teardown_fx(&f);
}
END_TEST

/* One optimizer step moves every parameter by the kernel's rule applied to
 * that step's own gradient. */
static void check_update(enum td_optim_type opt)
{
    fixture f;
    setup_fx(&f, "tiny-all", (td_shape){2, 9, 9}, K, N, opt);
    size_t pc = f.m->param_count;
    float *w0, *w1, *g;
    tdt_step_params(f.be, f.m, &f.b, 0.1f, &w0, &w1, &g);
    const td_optim_config *o = &f.be->cfg.optim;
    td_adamw_corr c = td_adamw_corrections(o->beta1, o->beta2, 1);
    int moved = 0;
    for (size_t i = 0; i < pc; i++) {
        float w = w0[i], v = 0, m = 0;
        if (opt == TD_OPT_SGD)
            td_sgd_elem(&w, &v, g[i], 0.1f, (float)o->momentum,
                        (float)o->weight_decay, o->nesterov);
        else
            td_adamw_elem(&w, &m, &v, g[i], 0.1f, (float)o->beta1,
                          (float)o->beta2, (float)o->eps,
                          (float)o->weight_decay, c);
        ck_assert_float_eq_tol(w1[i], w, 1e-6f * (1 + fabsf(w)));
        moved += w1[i] != w0[i];
    }
    ck_assert_int_gt(moved, (int)(pc * 9 / 10));
    free(w0);
    free(w1);
    free(g);
    teardown_fx(&f);
}

START_TEST(test_sgd_update) { check_update(TD_OPT_SGD); }
END_TEST

START_TEST(test_adamw_update) { check_update(TD_OPT_ADAMW); }
END_TEST

START_TEST(test_snapshot_restore_round_trip)
{
    fixture f;
    setup_fx(&f, "tiny-all", (td_shape){2, 9, 9}, K, N, TD_OPT_ADAMW);
    size_t nf = td_backend_snapshot_floats(f.m, &f.be->cfg.optim);
    ck_assert_uint_eq(nf, 3 * f.m->param_count + 2 * (8 + 8 + 16));
    float *a = malloc(nf * sizeof *a), *b = malloc(nf * sizeof *b);
    td_step_stats s1, s2;
    ck_assert_int_eq(td_backend_upload(f.be, &f.b), 0);
    ck_assert_int_eq(td_backend_train_step(f.be, 0.01f, 1), 0);
    td_backend_read_stats(f.be, &s1);
    ck_assert_int_eq(td_backend_snapshot(f.be, a, nf), 0);
    ck_assert_int_eq(td_backend_train_step(f.be, 0.01f, 2), 0);
    td_backend_read_stats(f.be, &s1);
    ck_assert_int_eq(td_backend_snapshot(f.be, b, nf), 0);
    ck_assert(memcmp(a, b, nf * sizeof *a) != 0);
    ck_assert_int_eq(td_backend_restore(f.be, a, nf), 0);
    ck_assert_int_eq(td_backend_train_step(f.be, 0.01f, 2), 0);
    td_backend_read_stats(f.be, &s2);
    /* the same step from the same state gives the same result */
    ck_assert_double_eq(s1.loss_sum, s2.loss_sum);
    float *c = malloc(nf * sizeof *c);
    ck_assert_int_eq(td_backend_snapshot(f.be, c, nf), 0);
    ck_assert_mem_eq(b, c, nf * sizeof *b);
    /* a buffer of the wrong size is refused and changes nothing */
    ck_assert_int_eq(td_backend_restore(f.be, a, nf - 1), -EINVAL);
    ck_assert_ptr_nonnull(strstr(f.be->err, "need"));
    ck_assert_int_eq(td_backend_snapshot(f.be, a, nf), 0);
    ck_assert_mem_eq(a, c, nf * sizeof *a);
    free(a);
    free(b);
    free(c);
    teardown_fx(&f);
}
END_TEST

/* A planar (NCHW) batch computes exactly what its NHWC twin does. */
START_TEST(test_nchw_upload_equals_nhwc)
{
    fixture f;
    setup_fx(&f, "tiny-flat", (td_shape){2, 9, 9}, K, N, TD_OPT_SGD);
    td_step_stats a, b;
    ck_assert_int_eq(td_backend_upload(f.be, &f.b), 0);
    ck_assert_int_eq(td_backend_eval_step(f.be), 0);
    td_backend_read_stats(f.be, &a);
    uint8_t planar[N * 2 * 81];
    for (int i = 0; i < N; i++)
        for (int c = 0; c < 2; c++)
            for (int p = 0; p < 81; p++)
                planar[(i * 2 + c) * 81 + p] = f.px[(i * 81 + p) * 2 + c];
    td_batch t = f.b;
    t.data = planar;
    t.layout = TD_LAYOUT_NCHW;
    ck_assert_int_eq(td_backend_upload(f.be, &t), 0);
    ck_assert_int_eq(td_backend_eval_step(f.be), 0);
    td_backend_read_stats(f.be, &b);
    ck_assert_double_eq(a.loss_sum, b.loss_sum);
    teardown_fx(&f);
}
END_TEST

/* The named layout matches what snapshot() writes. */
START_TEST(test_snapshot_layout_names)
{
    fixture f;
    setup_fx(&f, "tiny-flat", (td_shape){2, 9, 9}, K, N, TD_OPT_ADAMW);
    td_snapshot_entry e[16];
    int n = td_backend_snapshot_layout(f.m, &f.be->cfg.optim, e, 16);
    ck_assert_int_eq(n, 3 * f.m->nparams + f.m->nstate);
    ck_assert_str_eq(e[0].name, "c1.weight");
    ck_assert_int_eq(e[0].ndims, 4);
    ck_assert_int_eq(e[0].dims[1], 2);
    ck_assert_str_eq(e[f.m->nparams].name, "c1.weight.exp_avg");
    ck_assert_str_eq(e[2 * f.m->nparams + 1].name, "d1.weight.exp_avg_sq");
    size_t nf = td_backend_snapshot_floats(f.m, &f.be->cfg.optim);
    ck_assert_uint_eq(e[n - 1].offset + e[n - 1].count, nf);
    float *snap = malloc(nf * sizeof *snap), *w = malloc(e[1].count * 4);
    ck_assert_int_eq(td_backend_snapshot(f.be, snap, nf), 0);
    ck_assert_int_eq(f.be->ops->read_tensor(f.be, TD_T_PARAM, 1, w,
                                            e[1].count), 0);
    ck_assert_mem_eq(snap + e[1].offset, w, e[1].count * sizeof *w);
    free(snap);
    free(w);
    teardown_fx(&f);
}
END_TEST

START_TEST(test_bad_batches_refused)
{
    fixture f;
    setup_fx(&f, "tiny-flat", (td_shape){2, 9, 9}, K, N, TD_OPT_SGD);
    td_batch b = f.b;
    b.h = 8;
    ck_assert_int_eq(td_backend_upload(f.be, &b), -EINVAL);
    ck_assert_ptr_nonnull(strstr(f.be->err, "2x8x9"));
    b = f.b;
    b.n = N + 1;
    ck_assert_int_eq(td_backend_upload(f.be, &b), -EINVAL);
    b = f.b;
    f.labels[2] = K;
    ck_assert_int_eq(td_backend_upload(f.be, &b), -EINVAL);
    ck_assert_str_eq(f.be->err, "upload: label 5 of sample 2 is outside 0..4");
    f.labels[2] = 0;
    /* a partial batch evaluates, but does not train */
    b.n = 2;
    ck_assert_int_eq(td_backend_upload(f.be, &b), 0);
    ck_assert_int_eq(td_backend_eval_step(f.be), 0);
    ck_assert_int_eq(td_backend_train_step(f.be, 0.1f, 1), -EINVAL);
    td_step_stats st;
    td_backend_read_stats(f.be, &st);
    ck_assert_int_eq(st.samples, 2);
    teardown_fx(&f);
}
END_TEST

START_TEST(test_create_errors)
{
    td_model *m = ref_load_model("tiny-flat", (td_shape){2, 9, 9}, K);
    td_backend_config cfg = {.batch = 4, .threads = 1, .std = {1, 1}};
    td_backend *be = NULL;
    char err[256];
    td_optim_defaults(&cfg.optim, TD_OPT_SGD);
    cfg.dtype = (enum td_dtype)7;
    ck_assert_int_eq(td_backend_create("cpu", m, &cfg, &be, err, sizeof err),
                     TD_E_NOTSUP);
    ck_assert_str_eq(err, "cpu backend: compute type 7: the cpu backend "
                     "computes in fp32 or bf16 (fp16 is the cuda backend's)");
    cfg.dtype = TD_F16;
    ck_assert_int_eq(td_backend_create("cpu", m, &cfg, &be, err, sizeof err),
                     TD_E_NOTSUP);
    cfg.dtype = TD_F32;
    cfg.optim.lr = -1;
    ck_assert_int_eq(td_backend_create("cpu", m, &cfg, &be, err, sizeof err),
                     TD_E_SPEC);
    ck_assert_str_eq(err, "optimizer.lr: must be > 0 and < 1000");
    cfg.optim.lr = 0.1;
    cfg.std[1] = 0;
    ck_assert_int_eq(td_backend_create("cpu", m, &cfg, &be, err, sizeof err),
                     -EINVAL);
    ck_assert_str_eq(err, "input.normalize.std[1]: must be > 0");
    ck_assert_int_eq(td_backend_create("tpu", m, &cfg, &be, err, sizeof err),
                     -EINVAL);
    ck_assert_ptr_null(be);
    td_model_free(m);
}
END_TEST

START_TEST(test_dropout_train_and_eval)
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
    td_backend_config cfg = {.batch = 8, .threads = 1, .std = {1}};
    td_optim_defaults(&cfg.optim, TD_OPT_SGD);
    td_backend *be;
    ck_assert_int_eq(td_backend_create("cpu", m, &cfg, &be, err, sizeof err),
                     0);
    uint8_t px[8 * 64];
    int32_t lab[8] = {0};
    for (int i = 0; i < 8 * 64; i++)
        px[i] = (uint8_t)(i % 251 + 1);
    td_batch b = {.data = px, .labels = lab, .n = 8, .h = 8, .w = 8, .c = 1};
    size_t n = 8 * 16 * 64;
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    int dr = td_model_find(m, "dr");
    ck_assert_int_eq(td_backend_upload(be, &b), 0);
    ck_assert_int_eq(td_backend_train_step(be, 0.0f, 1), 0);
    be->ops->read_tensor(be, TD_T_VALUE, dr - 1, x, n);
    be->ops->read_tensor(be, TD_T_VALUE, dr, y, n);
    size_t zeros = 0;
    for (size_t i = 0; i < n; i++) {
        if (y[i] == 0.0f && x[i] != 0.0f)
            zeros++;
        else
            ck_assert_float_eq_tol(y[i], x[i] / 0.75f, 1e-5f);
    }
    /* 8192 draws of p = 0.25: sd 39 */
    ck_assert_uint_gt(zeros, 2048 - 240);
    ck_assert_uint_lt(zeros, 2048 + 240);
    ck_assert_int_eq(td_backend_eval_step(be), 0);
    be->ops->read_tensor(be, TD_T_VALUE, dr - 1, x, n);
    be->ops->read_tensor(be, TD_T_VALUE, dr, y, n);
    ck_assert_mem_eq(x, y, n * sizeof *x);
    free(x);
    free(y);
    td_backend_destroy(be);
    td_model_free(m);
}
END_TEST

static Suite *backend_cpu_suite(void)
{
    Suite *s = suite_create("backend_cpu");
    TCase *tc = tcase_create("backend_cpu");
    tcase_add_test(tc, test_all_layers_match_reference);
    tcase_add_test(tc, test_flatten_matches_reference);
    tcase_add_test(tc, test_fmnist_cnn_matches_reference);
    tcase_add_test(tc, test_resnet20_matches_reference);
    tcase_add_test(tc, test_fmnist_cnn_avx2_has_no_reference_kernel);
    tcase_add_test(tc, test_fmnist_cnn_avx2_stem_bwd_weights);
    tcase_add_test(tc, test_stem_pool3_avx2);
    tcase_add_loop_test(tc, test_resnet20_avx2_fuses_adds, 0, 2);
    if (td_bn8_ok(16))
        tcase_add_loop_test(tc, test_fold_changes_no_bit, 0, 2);
    tcase_add_test(tc, test_fmnist_cnn_avx2_bn8_all);
    tcase_add_test(tc, test_tiny_res8_avx2_batch_norm_edges);
    tcase_add_test(tc, test_running_stats_and_inference);
    tcase_add_test(tc, test_bn_eval_trains_in_inference_mode);
    tcase_add_test(tc, test_sgd_update);
    tcase_add_test(tc, test_adamw_update);
    tcase_add_test(tc, test_snapshot_restore_round_trip);
    tcase_add_test(tc, test_snapshot_layout_names);
    tcase_add_test(tc, test_nchw_upload_equals_nhwc);
    tcase_add_test(tc, test_bad_batches_refused);
    tcase_add_test(tc, test_create_errors);
    tcase_add_test(tc, test_dropout_train_and_eval);
    suite_add_tcase(s, tc);
    TCase *big = tcase_create("imagenet");
    tcase_set_timeout(big, 120);
    tcase_add_loop_test(big, test_imagenet_models_step, 0, 2);
    suite_add_tcase(s, big);
    return s;
}

TD_TEST_MAIN(backend_cpu_suite)
