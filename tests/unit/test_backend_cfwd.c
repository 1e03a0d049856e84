/* test_backend_cfwd.c - the CPU backend's AMX convolution forward
 * (cpu_cfwd.c) inside bf16 training, against oneDNN's forward primitive
 * (TD_CPU_CFWD=0).  Two backends train the same batches from the same
 * weights.  After the first step's forward, the output of c2 (the first
 * convolution cpu_cfwd.c computes; its input is oneDNN's c1 output in
 * both) is within one bf16 rounding of oneDNN's, element by element; c1
 * (3 input channels) and c3 (stride 2), which cpu_cfwd.c does not take,
 * are bitwise equal; four steps later the losses agree closely and the
 * inference forward (evaluation) agrees too.  The plan's debug lines are
 * counted, so the test fails if cpu_cfwd.c was never used.  Then the
 * backward data of stride-1 convolutions on cpu_cfwd.c (dx = conv(dy,
 * flipped weights)) against oneDNN's (TD_CPU_CFWD_BWD=0): c2's dx within
 * one bf16 rounding.  Skipped where the process cannot use AMX.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_bwdw.h"
#include "cpu_ab.h"

enum { N = 16 };

static td_backend *make2(const td_model *m, const char *cfwd,
                         const char *bwd, int *used)
{
    const char *env[] = {"TD_CPU_CFWD", cfwd, "TD_CPU_CFWD_BWD", bwd, NULL};
    return td_ab_backend(m, TD_BF16, N, env, "conv fwd: cpu_cfwd", used);
}

static td_backend *make(const td_model *m, const char *cfwd, int *used)
{
    return make2(m, cfwd, "1", used);
}

static void upload(td_backend *a, td_backend *b, int t)
{
    td_ab_upload(a, b, N, 16, 16, t);
}

static int layer(const td_model *m, const char *name)
{
    for (int L = 0; L < m->nlayers; L++)
        if (strcmp(m->layers[L].name, name) == 0)
            return L;
    ck_abort_msg("no layer %s", name);
    return -1;
}

/* Layer `name`'s output in both; *worst the largest difference in units
 * of each element's bf16 spacing (2^-7 of its magnitude), NaN-free. */
static void compare_kind(td_backend *a, td_backend *b, const td_model *m,
                         int kind, const char *name, double *worst,
                         int *equal)
{
    int L = layer(m, name);
    td_shape o = m->layers[L].out;
    size_t cnt = (size_t)N * o.c * o.h * o.w;
    float *va = malloc(cnt * sizeof *va), *vb = malloc(cnt * sizeof *vb);
    ck_assert_int_eq(a->ops->read_tensor(a, kind, L, va, cnt), 0);
    ck_assert_int_eq(b->ops->read_tensor(b, kind, L, vb, cnt), 0);
    *equal = memcmp(va, vb, cnt * sizeof *va) == 0;
    *worst = 0;
    for (size_t i = 0; i < cnt; i++) {
        double ulp = fmax(fabs(vb[i]), 1e-30) / 128;
        ck_assert(va[i] == va[i]);
        *worst = fmax(*worst, fabs((double)va[i] - vb[i]) / ulp);
    }
    free(va);
    free(vb);
}

static void compare(td_backend *a, td_backend *b, const td_model *m,
                    const char *name, double *worst, int *equal)
{
    compare_kind(a, b, m, TD_T_VALUE, name, worst, equal);
}

/* The backward data on cpu_cfwd.c (flipped weights) against oneDNN's
 * (TD_CPU_CFWD_BWD=0), the forward cpu_cfwd.c's in both: after one step
 * the gradient of c2's input (its dx, the same dy in both) is within one
 * bf16 rounding; the losses after four steps close. */
START_TEST(test_backward_data_matches_onednn)
{
    td_model *m = td_ab_stack(48);
    int on = 0, off = 0;
    td_backend *a = make2(m, "1", "1", &on), *b = make2(m, "1", "0", &off);
    upload(a, b, 1);
    ck_assert_int_eq(td_backend_train_step(a, 0.05f, 1), 0);
    ck_assert_int_eq(td_backend_train_step(b, 0.05f, 1), 0);
    double worst;
    int equal;
    compare_kind(a, b, m, TD_T_GRAD, "c5", &worst, &equal);
    ck_assert_msg(equal, "c5's gradient (before any backward data) differs");
    compare_kind(a, b, m, TD_T_GRAD, "r1", &worst, &equal);
    /* dx of c2: the same bf16 products summed in fp32 in other orders,
     * rounded once: at most one bf16 step apart */
    ck_assert_msg(worst <= 1.01, "c2's dx: %g bf16 steps from oneDNN's",
                  worst);
    for (int t = 2; t <= 4; t++) {
        upload(a, b, t);
        ck_assert_int_eq(td_backend_train_step(a, 0.05f, t), 0);
        ck_assert_int_eq(td_backend_train_step(b, 0.05f, t), 0);
    }
    td_ab_losses_close(a, b, 1e-2, "after four steps");
    td_backend_destroy(a);
    td_backend_destroy(b);
    td_model_free(m);
}
END_TEST

START_TEST(test_forward_matches_onednn)
{
    td_model *m = td_ab_stack(48);
    int on = 0, off = 0;
    td_backend *a = make(m, "1", &on), *b = make(m, "0", &off);
    ck_assert_int_eq(on, 3); /* c2, c4, c5 */
    ck_assert_int_eq(off, 0);
    upload(a, b, 1);
    ck_assert_int_eq(td_backend_train_step(a, 0.05f, 1), 0);
    ck_assert_int_eq(td_backend_train_step(b, 0.05f, 1), 0);
    double worst;
    int equal;
    compare(a, b, m, "c1", &worst, &equal);
    ck_assert_msg(equal, "c1 (oneDNN in both) differs");
    /* both round an fp32 sum of the same bf16 products, summed in other
     * orders: at most one bf16 step apart (2^-7 relative to the element);
     * a wrong tap or channel is off by far more */
    compare(a, b, m, "c2", &worst, &equal);
    ck_assert_msg(worst <= 1.01, "c2: %g bf16 steps from oneDNN's", worst);
    for (int t = 2; t <= 4; t++) {
        upload(a, b, t);
        ck_assert_int_eq(td_backend_train_step(a, 0.05f, t), 0);
        ck_assert_int_eq(td_backend_train_step(b, 0.05f, t), 0);
    }
    /* four steps of bf16 training apart by rounding only */
    td_ab_losses_close(a, b, 1e-2, "after four steps");
    upload(a, b, 9);
    ck_assert_int_eq(td_backend_eval_step(a), 0);
    ck_assert_int_eq(td_backend_eval_step(b), 0);
    td_ab_losses_close(a, b, 1e-2, "evaluation");
    td_backend_destroy(a);
    td_backend_destroy(b);
    td_model_free(m);
}
END_TEST

static Suite *backend_cfwd_suite(void)
{
    Suite *s = suite_create("backend_cfwd");
    TCase *tc = tcase_create("backend_cfwd");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_forward_matches_onednn);
    tcase_add_test(tc, test_backward_data_matches_onednn);
    suite_add_tcase(s, tc);
    return s;
}

TD_AB_MAIN(td_bwdw_amx(), "this process cannot use AMX", backend_cfwd_suite)
