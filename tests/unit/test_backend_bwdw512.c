/* test_backend_bwdw512.c - the CPU backend's hand-written backward
 * weights (cpu_bwdw.c) on its AVX512_BF16 path in the blocked plan (the
 * plan of CPUs without AMX, e.g. AMD Zen 4/5): main() limits oneDNN to
 * avx512_core_bf16 (ONEDNN_MAX_CPU_ISA, before the first oneDNN call), so
 * activations are nChw16c, and TD_CPU_BWDW=1 turns the kernel on there
 * for every convolution (by default: stride 2 only).  Against oneDNN's
 * backward weights
 * (TD_CPU_BWDW=0): two backends train the same batch from the same
 * weights; after one step the weight gradients of c2-c5 (computed by
 * cpu_bwdw.c: stride 2, a bias, a 5x5 kernel) agree within fp32
 * summation-order rounding, every other gradient (c1 reads the planar
 * 3-channel input: oneDNN's in both) is bitwise equal, and three steps
 * later the losses agree closely.  The plan's debug lines are counted
 * (the default plan: c3 only), so the test fails if cpu_bwdw.c was never
 * used.  Skipped where oneDNN does not run avx512_core_bf16.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/caps.h"
#include "backend/cpu/cpu_bwdw.h"
#include "base/log.h"
#include "model/model.h"
#include "tdtest.h"

enum { N = 16 };

static void sink(void *user, int level, long job, const char *line)
{
    (void)level;
    (void)job;
    if (strstr(line, "conv bwd weights: cpu_bwdw (AVX512_BF16) nChw16c"))
        (*(int *)user)++;
}

static td_model *model(void)
{
    json_error_t je;
    json_t *def = json_loads("{\"layers\": ["
        "{\"type\": \"conv2d\", \"name\": \"c1\", \"channels\": 16, "
        "\"kernel\": 3, \"pad\": 1}, {\"type\": \"batchnorm\"}, "
        "{\"type\": \"relu\"}, "
        "{\"type\": \"conv2d\", \"name\": \"c2\", \"channels\": 16, "
        "\"kernel\": 3, \"pad\": 1}, {\"type\": \"batchnorm\"}, "
        "{\"type\": \"relu\", \"name\": \"r2\"}, "
        "{\"type\": \"conv2d\", \"name\": \"c3\", \"channels\": 32, "
        "\"kernel\": 3, \"pad\": 1, \"stride\": 2}, "
        "{\"type\": \"batchnorm\"}, {\"type\": \"relu\"}, "
        "{\"type\": \"conv2d\", \"name\": \"c4\", \"channels\": 32, "
        "\"kernel\": 3, \"pad\": 1, \"bias\": true}, "
        "{\"type\": \"batchnorm\"}, {\"type\": \"relu\"}, "
        "{\"type\": \"conv2d\", \"name\": \"c5\", \"channels\": 64, "
        "\"kernel\": 5, \"pad\": 2}, {\"type\": \"batchnorm\"}, "
        "{\"type\": \"relu\"}, "
        "{\"type\": \"global_avgpool\"}, {\"type\": \"flatten\"}, "
        "{\"type\": \"dense\", \"units\": 10}]}", 0, &je);
    ck_assert_msg(def != NULL, "%s", je.text);
    td_model *m = NULL;
    char err[256];
    ck_assert_msg(td_model_build(def, (td_shape){3, 16, 16}, 10, &m, err,
                                 sizeof err) == 0, "%s", err);
    json_decref(def);
    return m;
}

static td_backend *make(const td_model *m, const char *bwdw, int *used)
{
    td_backend_config cfg = {.batch = N, .threads = 2, .seed = 7,
                             .dtype = TD_BF16, .std = {1, 1, 1}};
    td_optim_defaults(&cfg.optim, TD_OPT_SGD);
    td_backend *be = NULL;
    char err[256] = "";
    if (bwdw)
        setenv("TD_CPU_BWDW", bwdw, 1);
    *used = 0;
    td_log_set_level(TD_LOG_DEBUG);
    td_log_set_sink(sink, used);
    int rc = td_backend_create("cpu", m, &cfg, &be, err, sizeof err);
    td_log_set_sink(NULL, NULL);
    unsetenv("TD_CPU_BWDW");
    ck_assert_msg(rc == 0, "create: %s", err);
    return be;
}

static void step(td_backend *a, td_backend *b, int t)
{
    static uint8_t px[N * 16 * 16 * 3];
    int32_t lab[N];
    for (size_t i = 0; i < sizeof px; i++)
        px[i] = (uint8_t)((i * 2654435761u + (unsigned)t * 977u) >> 24);
    for (int i = 0; i < N; i++)
        lab[i] = (i + t) % 10;
    td_batch bt = {.data = px, .labels = lab, .n = N, .h = 16, .w = 16,
                   .c = 3, .layout = TD_LAYOUT_NHWC};
    ck_assert_int_eq(td_backend_upload(a, &bt), 0);
    ck_assert_int_eq(td_backend_upload(b, &bt), 0);
    ck_assert_int_eq(td_backend_train_step(a, 0.05f, t), 0);
    ck_assert_int_eq(td_backend_train_step(b, 0.05f, t), 0);
}

/* Is parameter p one cpu_bwdw.c computes (the convolutions c2-c5)? */
static int ours(const char *name)
{
    return name[0] == 'c' && name[1] >= '2' && name[1] <= '5' &&
           name[2] == '.';
}

START_TEST(test_gradients_match_onednn)
{
    td_model *m = model();
    int on = 0, off = 0, dflt = 0;
    td_backend *a = make(m, "1", &on), *b = make(m, "0", &off);
    td_backend_destroy(make(m, NULL, &dflt));
    ck_assert_int_eq(on, 4);
    ck_assert_int_eq(off, 0);
    ck_assert_int_eq(dflt, 1); /* by default only c3, the stride-2 one */
    step(a, b, 1);
    for (int p = 0; p < m->nparams; p++) {
        size_t cnt = m->params[p].count;
        float *ga = malloc(cnt * sizeof *ga), *gb = malloc(cnt * sizeof *gb);
        ck_assert_int_eq(a->ops->read_tensor(a, TD_T_PARAM_GRAD, p, ga, cnt),
                         0);
        ck_assert_int_eq(b->ops->read_tensor(b, TD_T_PARAM_GRAD, p, gb, cnt),
                         0);
        if (!ours(m->params[p].name)) {
            ck_assert_msg(memcmp(ga, gb, cnt * sizeof *ga) == 0,
                          "%s: not computed by cpu_bwdw.c, yet differs",
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
    for (int t = 2; t <= 4; t++)
        step(a, b, t);
    td_step_stats sa, sb;
    td_backend_read_stats(a, &sa);
    td_backend_read_stats(b, &sb);
    /* four steps of bf16 training apart by rounding only */
    ck_assert_msg(fabs(sa.loss_sum - sb.loss_sum) <= 1e-2 * fabs(sb.loss_sum),
                  "loss sums %g and %g", sa.loss_sum, sb.loss_sum);
    td_backend_destroy(a);
    td_backend_destroy(b);
    td_model_free(m);
}
END_TEST

int main(void)
{
    setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_BF16", 0);
    unsetenv("TD_BWDW_ISA");
    if (strcmp(td_cpu_caps_get()->isa, "avx512_core_bf16") != 0 ||
        !td_bwdw_avx512()) {
        printf("SKIP: oneDNN does not run avx512_core_bf16 here (%s)\n",
               td_cpu_caps_get()->isa);
        return TD_TEST_SKIP;
    }
    Suite *s = suite_create("backend_bwdw512");
    TCase *tc = tcase_create("backend_bwdw512");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_gradients_match_onednn);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
