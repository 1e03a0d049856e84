/* cpu_ab.h - the frame of the CPU backend's A/B tests (test_backend_wmap,
 * test_backend_bwdw, test_backend_bwdw512, test_backend_cfwd): a model
 * from JSON, backends planned under environment switches with the plan's
 * debug lines counted (so a test fails if the path it compares was never
 * taken), and one synthetic batch uploaded to two backends.
 */
#ifndef TD_TEST_CPU_AB_H
#define TD_TEST_CPU_AB_H

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/caps.h"
#include "base/log.h"
#include "model/model.h"
#include "tdtest.h"

/* A model from a JSON layer list ({"layers": [...]}), 10 classes. */
static inline td_model *td_ab_model(const char *json, td_shape in)
{
    json_error_t je;
    json_t *def = json_loads(json, 0, &je);
    ck_assert_msg(def != NULL, "%s", je.text);
    td_model *m = NULL;
    char err[256];
    ck_assert_msg(td_model_build(def, in, 10, &m, err, sizeof err) == 0,
                  "%s", err);
    json_decref(def);
    return m;
}

/* A 3 -> 8 channel convolution on a 3-channel input, then a dense layer:
 * oneDNN 2.6 has no AVX512_BF16 kernel for its backward weights (ref:any;
 * on AMX it has one).  Build it with td_ab_model on a 3x32x32 input. */
#define TD_AB_STEM3_JSON                                                     \
    "{\"layers\": [{\"type\": \"conv2d\", \"name\": \"c1\", "            \
    "\"channels\": 8, \"kernel\": 3, \"pad\": 1}, {\"type\": \"relu\"}, "  \
    "{\"type\": \"flatten\"}, {\"type\": \"dense\", \"units\": 10}]}"

/* The convolution stack of the backward tests, 3x16x16 input: c1 (3
 * input channels), c2, c3 (stride 2), c4 (with a bias), c5 (5x5, c5
 * output channels), each followed by a batch norm and a relu r1-r5, then
 * global pooling and a dense layer. */
static inline td_model *td_ab_stack(int c5)
{
    char json[2048];
    snprintf(json, sizeof json, "{\"layers\": ["
        "{\"type\": \"conv2d\", \"name\": \"c1\", \"channels\": 16, "
        "\"kernel\": 3, \"pad\": 1}, {\"type\": \"batchnorm\"}, "
        "{\"type\": \"relu\", \"name\": \"r1\"}, "
        "{\"type\": \"conv2d\", \"name\": \"c2\", \"channels\": 16, "
        "\"kernel\": 3, \"pad\": 1}, {\"type\": \"batchnorm\"}, "
        "{\"type\": \"relu\", \"name\": \"r2\"}, "
        "{\"type\": \"conv2d\", \"name\": \"c3\", \"channels\": 32, "
        "\"kernel\": 3, \"pad\": 1, \"stride\": 2}, "
        "{\"type\": \"batchnorm\"}, {\"type\": \"relu\", \"name\": \"r3\"}, "
        "{\"type\": \"conv2d\", \"name\": \"c4\", \"channels\": 32, "
        "\"kernel\": 3, \"pad\": 1, \"bias\": true}, "
        "{\"type\": \"batchnorm\"}, {\"type\": \"relu\", \"name\": \"r4\"}, "
        "{\"type\": \"conv2d\", \"name\": \"c5\", \"channels\": %d, "
        "\"kernel\": 5, \"pad\": 2}, {\"type\": \"batchnorm\"}, "
        "{\"type\": \"relu\", \"name\": \"r5\"}, "
        "{\"type\": \"global_avgpool\"}, {\"type\": \"flatten\"}, "
        "{\"type\": \"dense\", \"units\": 10}]}", c5);
    return td_ab_model(json, (td_shape){3, 16, 16});
}

typedef struct td_ab_count {
    const char *needle; /* a plan debug line containing it counts */
    int n;
} td_ab_count;

static void td_ab_sink(void *user, int level, long job, const char *line)
{
    td_ab_count *c = user;
    (void)level;
    (void)job;
    if (strstr(line, c->needle))
        c->n++;
}

/* A CPU backend of dtype dt, batch n, 2 threads, seed 7, SGD, planned with
 * the environment pairs env = {name, value, ..., NULL} set (a NULL value
 * leaves the name unset), unset again after; *count = the plan's debug
 * lines containing needle. */
static inline td_backend *td_ab_backend(const td_model *m, enum td_dtype dt,
                                        int n, const char *const *env,
                                        const char *needle, int *count)
{
    td_backend_config cfg = {.batch = n, .threads = 2, .seed = 7,
                             .dtype = dt, .std = {1, 1, 1}};
    td_optim_defaults(&cfg.optim, TD_OPT_SGD);
    td_backend *be = NULL;
    char err[256] = "";
    for (int i = 0; env[i]; i += 2)
        if (env[i + 1])
            setenv(env[i], env[i + 1], 1);
    td_ab_count c = {needle, 0};
    int level = td_log_get_level();
    td_log_set_level(TD_LOG_DEBUG);
    td_log_set_sink(td_ab_sink, &c);
    int rc = td_backend_create("cpu", m, &cfg, &be, err, sizeof err);
    td_log_set_sink(NULL, NULL);
    td_log_set_level(level);
    for (int i = 0; env[i]; i += 2)
        unsetenv(env[i]);
    ck_assert_msg(rc == 0, "create: %s", err);
    *count = c.n;
    return be;
}

/* Batch t (n samples of 3 x h x w, nhwc, labels (i + t) % 10) into both
 * backends. */
static inline void td_ab_upload(td_backend *a, td_backend *b, int n, int h,
                                int w, int t)
{
    size_t len = (size_t)n * 3 * h * w;
    uint8_t *px = malloc(len);
    int32_t *lab = malloc((size_t)n * sizeof *lab);
    for (size_t i = 0; i < len; i++)
        px[i] = (uint8_t)((i * 2654435761u + (unsigned)t * 977u) >> 24);
    for (int i = 0; i < n; i++)
        lab[i] = (i + t) % 10;
    td_batch bt = {.data = px, .labels = lab, .n = n, .h = h, .w = w,
                   .c = 3, .layout = TD_LAYOUT_NHWC};
    ck_assert_int_eq(td_backend_upload(a, &bt), 0);
    ck_assert_int_eq(td_backend_upload(b, &bt), 0);
    free(px);
    free(lab);
}

/* One training step t of both backends on batch t (lr 0.05). */
static inline void td_ab_step(td_backend *a, td_backend *b, int n, int h,
                              int w, int t)
{
    td_ab_upload(a, b, n, h, w, t);
    ck_assert_int_eq(td_backend_train_step(a, 0.05f, t), 0);
    ck_assert_int_eq(td_backend_train_step(b, 0.05f, t), 0);
}

/* The two backends' loss sums since their last read within rel of each
 * other. */
static inline void td_ab_losses_close(td_backend *a, td_backend *b,
                                      double rel, const char *what)
{
    td_step_stats sa, sb;
    td_backend_read_stats(a, &sa);
    td_backend_read_stats(b, &sb);
    ck_assert_msg(fabs(sa.loss_sum - sb.loss_sum) <= rel * fabs(sb.loss_sum),
                  "%s: loss sums %g and %g", what, sa.loss_sum, sb.loss_sum);
}

/* Steps first..last of both backends, then their losses within rel of
 * each other ("after N steps"); frees a, b and m. */
static inline void td_ab_train_close_free(td_backend *a, td_backend *b,
                                          td_model *m, int n, int hw,
                                          int first, int last, double rel)
{
    char what[64];
    for (int t = first; t <= last; t++)
        td_ab_step(a, b, n, hw, hw, t);
    snprintf(what, sizeof what, "after %d steps", last);
    td_ab_losses_close(a, b, rel, what);
    td_backend_destroy(a);
    td_backend_destroy(b);
    td_model_free(m);
}

/* Every parameter gradient of a and b after the same step: those whose
 * names ours() accepts (computed by the path under test in a, the
 * reference in b) within 1e-3 of the largest gradient of the tensor, the
 * others bitwise equal. */
static inline void td_ab_grads_match(td_backend *a, td_backend *b,
                                     const td_model *m,
                                     int (*ours)(const char *name))
{
    for (int p = 0; p < m->nparams; p++) {
        size_t cnt = m->params[p].count;
        float *ga = malloc(cnt * sizeof *ga), *gb = malloc(cnt * sizeof *gb);
        ck_assert_int_eq(a->ops->read_tensor(a, TD_T_PARAM_GRAD, p, ga, cnt),
                         0);
        ck_assert_int_eq(b->ops->read_tensor(b, TD_T_PARAM_GRAD, p, gb, cnt),
                         0);
        if (!ours(m->params[p].name)) {
            ck_assert_msg(memcmp(ga, gb, cnt * sizeof *ga) == 0,
                          "%s: not on the path under test, yet differs",
                          m->params[p].name);
        } else {
            double big = 0, worst = 0;
            for (size_t i = 0; i < cnt; i++) {
                big = fmax(big, fabs(gb[i]));
                worst = fmax(worst, fabs((double)ga[i] - gb[i]));
            }
            /* both sum the same bf16 products in fp32, in different
             * orders: differences of a few fp32 ulps of the partial sums,
             * far below 1e-3 of the largest gradient; a wrong tap or
             * channel is off by the order of the gradients themselves */
            ck_assert_msg(big > 0 && worst <= 1e-3 * big,
                          "%s: max difference %g, largest gradient %g",
                          m->params[p].name, worst, big);
        }
        free(ga);
        free(gb);
    }
}

/* 0 where oneDNN runs AMX (the bf16 channels-last plan); elsewhere prints
 * "SKIP: oneDNN does not run AMX here (<this CPU>)<why>" and returns
 * TD_TEST_SKIP, main()'s status. */
static inline int td_ab_need_amx(const char *why)
{
    char d[256];
    td_cpu_caps_describe(td_cpu_caps_get(), d, sizeof d);
    if (strcmp(td_cpu_caps_get()->isa, "avx512_core_amx") == 0)
        return 0;
    printf("SKIP: oneDNN does not run AMX here (%s)%s\n", d, why);
    return TD_TEST_SKIP;
}

/* Limits oneDNN to avx512_core_bf16 (ONEDNN_MAX_CPU_ISA, unless the
 * caller set it; read once per process, so before the first oneDNN call):
 * the blocked nChw16c bf16 plan AMD Zen 4/5 take.  0 where oneDNN then
 * runs it natively; elsewhere prints "SKIP: oneDNN does not run
 * avx512_core_bf16 here (<this CPU>)" and returns TD_TEST_SKIP. */
static inline int td_ab_need_avx512_bf16(void)
{
    char d[256];
    setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_BF16", 0);
    td_cpu_caps_describe(td_cpu_caps_get(), d, sizeof d);
    if (td_cpu_caps_get()->bf16 &&
        strcmp(td_cpu_caps_get()->isa, "avx512_core_bf16") == 0)
        return 0;
    printf("SKIP: oneDNN does not run avx512_core_bf16 here (%s)\n", d);
    return TD_TEST_SKIP;
}

/* main() of a test that needs `ok`: its suite, or skipped (77) naming
 * why. */
#define TD_AB_MAIN(ok, why, suite_fn)                                        \
    int main(void)                                                           \
    {                                                                        \
        if (!(ok)) {                                                         \
            printf("%s: skipped\n", why);                                    \
            return TD_TEST_SKIP;                                             \
        }                                                                    \
        return td_test_run(suite_fn());                                      \
    }

#endif
