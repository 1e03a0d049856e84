/* test_backend_wmap.c - the CPU backend's weight layout maps
 * (cpu_wmap.c): the weights written into the primitives' layouts (bf16
 * rounded, or fp32 copied) and the weight gradients read back from the
 * backward weights' layout through the maps are bit for bit what oneDNN's
 * reorders give (TD_CPU_WMAP=0 keeps the reorders).  Two backends, maps
 * on and off, train the same batches three steps; every parameter, every
 * parameter gradient, the logits and the loss must be bitwise equal (a
 * wrong offset or rounding in any weight changes the convolutions'
 * outputs).  The plan's "layout maps" debug lines are counted, so the
 * test fails if the maps were never used.  fp32 everywhere (blocked
 * weights); bf16 where oneDNN runs it natively.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/caps.h"
#include "cpu_ab.h"

enum { N = 16 };

/* resnet-like: stride 1 and 2, a 1x1 shortcut, a biased convolution, a
 * dense layer after global pooling */
static td_model *model(void)
{
    return td_ab_model("{\"layers\": ["
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
        "{\"type\": \"dense\", \"units\": 10}]}", (td_shape){3, 16, 16});
}

static td_backend *make(const td_model *m, enum td_dtype dt, const char *wmap,
                        int *maps)
{
    const char *env[] = {"TD_CPU_WMAP", wmap, NULL};
    return td_ab_backend(m, dt, N, env, "through layout maps: forward", maps);
}

static void same(td_backend *a, td_backend *b, int kind, int i, size_t cnt,
                 const char *what, int t)
{
    float *va = malloc(cnt * sizeof *va), *vb = malloc(cnt * sizeof *vb);
    ck_assert_int_eq(a->ops->read_tensor(a, kind, i, va, cnt), 0);
    ck_assert_int_eq(b->ops->read_tensor(b, kind, i, vb, cnt), 0);
    size_t k = 0;
    while (k < cnt && memcmp(&va[k], &vb[k], sizeof va[k]) == 0)
        k++;
    ck_assert_msg(k == cnt, "step %d %s: element %zu %.9g with the maps, "
                  "%.9g with oneDNN's reorders", t, what, k,
                  (double)va[k < cnt ? k : 0], (double)vb[k < cnt ? k : 0]);
    free(va);
    free(vb);
}

static void run(enum td_dtype dt)
{
    td_model *m = model();
    int on = 0, off = 0;
    td_backend *a = make(m, dt, "1", &on), *b = make(m, dt, "0", &off);
    /* at least the 3x3 convolutions' weights are in a blocked layout */
    ck_assert_msg(on >= 3, "%d layers through the maps", on);
    ck_assert_int_eq(off, 0);
    for (int t = 1; t <= 3; t++) {
        td_ab_upload(a, b, N, 16, 16, t);
        ck_assert_int_eq(td_backend_train_step(a, 0.05f, t), 0);
        ck_assert_int_eq(td_backend_train_step(b, 0.05f, t), 0);
        for (int p = 0; p < m->nparams; p++) {
            same(a, b, TD_T_PARAM_GRAD, p, m->params[p].count,
                 m->params[p].name, t);
            same(a, b, TD_T_PARAM, p, m->params[p].count, m->params[p].name,
                 t);
        }
        same(a, b, TD_T_VALUE, m->nlayers - 1, (size_t)N * 10, "logits", t);
    }
    td_step_stats sa, sb;
    td_backend_read_stats(a, &sa);
    td_backend_read_stats(b, &sb);
    ck_assert(sa.loss_sum == sb.loss_sum);
    td_backend_destroy(a);
    td_backend_destroy(b);
    td_model_free(m);
}

START_TEST(test_fp32_maps_equal_reorders) { run(TD_F32); }
END_TEST

START_TEST(test_bf16_maps_equal_reorders) { run(TD_BF16); }
END_TEST

static Suite *backend_wmap_suite(void)
{
    Suite *s = suite_create("backend_wmap");
    TCase *tc = tcase_create("backend_wmap");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_fp32_maps_equal_reorders);
    if (td_cpu_caps_get()->bf16)
        tcase_add_test(tc, test_bf16_maps_equal_reorders);
    else
        printf("no native bf16 in oneDNN here: fp32 only\n");
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(backend_wmap_suite)
