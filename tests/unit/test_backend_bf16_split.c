/* test_backend_bf16_split.c - the split backward weights (cpu_split.c):
 * in bf16 channels-last with two threads, a convolution's weight and bias
 * gradients computed as two half-batch calls on two threads and summed
 * equal the whole-batch primitive's (the one test_backend_bf16 checks
 * against the reference layers).  TD_CPU_SPLIT_BW=1 turns the split on
 * (it is off by default), =0 leaves it off; the test counts the plan's
 * "split by batch halves" lines so it fails if the split never ran.
 * Skipped where oneDNN's ISA is not avx512_core_amx (only the AMX plan is
 * channels-last).
 */
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

enum { N = 32 };

static void sink(void *user, int level, long job, const char *line)
{
    (void)level;
    (void)job;
    if (strstr(line, "split by batch halves"))
        (*(int *)user)++;
}

/* resnet-like: stride 1 and 2, a 1x1 shortcut, a convolution with bias */
static td_model *model(void)
{
    json_error_t je;
    json_t *def = json_loads("{\"layers\": ["
        "{\"type\": \"conv2d\", \"name\": \"c1\", \"channels\": 16, "
        "\"kernel\": 3, \"pad\": 1}, {\"type\": \"batchnorm\"}, "
        "{\"type\": \"relu\", \"name\": \"r1\"}, "
        "{\"type\": \"conv2d\", \"name\": \"c2\", \"channels\": 32, "
        "\"kernel\": 3, \"pad\": 1, \"stride\": 2, \"bias\": true}, "
        "{\"type\": \"batchnorm\", \"name\": \"b2\"}, "
        "{\"type\": \"conv2d\", \"name\": \"sc\", \"channels\": 32, "
        "\"kernel\": 1, \"stride\": 2, \"input\": \"r1\"}, "
        "{\"type\": \"add\", \"inputs\": [\"b2\", \"sc\"]}, "
        "{\"type\": \"relu\"}, "
        "{\"type\": \"conv2d\", \"name\": \"c3\", \"channels\": 32, "
        "\"kernel\": 3, \"pad\": 1}, "
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

static td_backend *make(const td_model *m, const char *split, int *splits)
{
    td_backend_config cfg = {.batch = N, .threads = 2, .seed = 7,
                             .dtype = TD_BF16, .std = {1, 1, 1}};
    td_optim_defaults(&cfg.optim, TD_OPT_SGD);
    td_backend *be = NULL;
    char err[256] = "";
    setenv("TD_CPU_SPLIT_BW", split, 1);
    *splits = 0;
    td_log_set_level(TD_LOG_DEBUG);
    td_log_set_sink(sink, splits);
    int rc = td_backend_create("cpu", m, &cfg, &be, err, sizeof err);
    td_log_set_sink(NULL, NULL);
    unsetenv("TD_CPU_SPLIT_BW");
    ck_assert_msg(rc == 0, "create: %s", err);
    return be;
}

START_TEST(test_split_equals_whole)
{
    td_model *m = model();
    int on = 0, off = 0;
    td_backend *a = make(m, "1", &on), *b = make(m, "0", &off);
    /* all four convolutions (c1 on the nhwc input too) */
    ck_assert_int_eq(on, 4);
    ck_assert_int_eq(off, 0);
    static uint8_t px[N * 16 * 16 * 3];
    int32_t lab[N];
    for (size_t i = 0; i < sizeof px; i++)
        px[i] = (uint8_t)((i * 2654435761u) >> 24);
    for (int i = 0; i < N; i++)
        lab[i] = i % 10;
    td_batch bt = {.data = px, .labels = lab, .n = N, .h = 16, .w = 16,
                   .c = 3, .layout = TD_LAYOUT_NHWC};
    for (int t = 1; t <= 2; t++) {
        ck_assert_int_eq(td_backend_upload(a, &bt), 0);
        ck_assert_int_eq(td_backend_upload(b, &bt), 0);
        ck_assert_int_eq(td_backend_train_step(a, 0.05f, t), 0);
        ck_assert_int_eq(td_backend_train_step(b, 0.05f, t), 0);
        for (int p = 0; p < m->nparams; p++) {
            size_t cnt = m->params[p].count;
            float *ga = malloc(cnt * sizeof *ga), *gb = malloc(cnt * sizeof
                                                               *gb);
            ck_assert_int_eq(a->ops->read_tensor(a, TD_T_PARAM_GRAD, p, ga,
                                                 cnt), 0);
            ck_assert_int_eq(b->ops->read_tensor(b, TD_T_PARAM_GRAD, p, gb,
                                                 cnt), 0);
            double d = 0, s = 0;
            for (size_t i = 0; i < cnt; i++) {
                d = fmax(d, fabs((double)ga[i] - gb[i]));
                s = fmax(s, fabs((double)gb[i]));
            }
            /* the same bf16 products summed in fp32 in another order
             * (two halves, then added): fp32 rounding, ~1e-6 relative;
             * 1e-4 of the tensor's largest element also covers step 2,
             * where weights updated from those gradients feed a forward
             * whose bf16 roundings can flip by one unit */
            ck_assert_msg(d <= 1e-4 * s + 1e-12, "step %d param %s: max "
                          "diff %g, scale %g", t, m->params[p].name, d, s);
            ck_assert_msg(s > 0, "param %s: zero gradient",
                          m->params[p].name);
            free(ga);
            free(gb);
        }
    }
    td_step_stats sa, sb;
    td_backend_read_stats(a, &sa);
    td_backend_read_stats(b, &sb);
    ck_assert_double_eq_tol(sa.loss_sum, sb.loss_sum,
                            1e-5 * fabs(sb.loss_sum));
    td_backend_destroy(a);
    td_backend_destroy(b);
    td_model_free(m);
}
END_TEST

int main(void)
{
    char d[256];
    td_cpu_caps_describe(td_cpu_caps_get(), d, sizeof d);
    if (strcmp(td_cpu_caps_get()->isa, "avx512_core_amx") != 0) {
        printf("SKIP: oneDNN does not run AMX here (%s)\n", d);
        return TD_TEST_SKIP;
    }
    Suite *s = suite_create("backend_bf16_split");
    TCase *tc = tcase_create("backend_bf16_split");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_split_equals_whole);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
