/* test_ref_layers.c - the reference layers are right: a convolution
 * against a hand-computed case, and finite-difference gradient checks of
 * whole graphs (every layer kind) in double precision. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "model/model.h"
#include "ref_layers.h"
#include "tdtest.h"

static td_model *load(const char *name, td_shape in, int classes)
{
    char path[4096], err[256] = "";
    const char *root = getenv("TD_SOURCE_ROOT");
    snprintf(path, sizeof path, "%s/tests/data/%s.json", root ? root : ".",
             name);
    td_model *m = NULL;
    int rc = td_model_load(NULL, path, in, classes, &m, err, sizeof err);
    ck_assert_msg(rc == 0, "%s: %s", name, err);
    return m;
}

START_TEST(test_conv_by_hand)
{
    /* 1x1x3x3 input, one 2x2 kernel, stride 1, pad 0, bias 0.5 */
    double x[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, w[4] = {1, 0, 0, -1};
    double b = 0.5, y[4];
    td_ref_conv_fwd(x, 1, 1, 3, 3, w, &b, 1, 2, 1, 0, y, 2, 2);
    for (int i = 0; i < 4; i++)
        ck_assert_double_eq_tol(y[i], -4 + 0.5, 1e-12);
    /* pad 1, stride 2: corners see one tap each */
    double y2[4];
    td_ref_conv_fwd(x, 1, 1, 3, 3, w, NULL, 1, 2, 2, 1, y2, 2, 2);
    ck_assert_double_eq_tol(y2[0], -1, 1e-12); /* only w[3]*x[0] */
    ck_assert_double_eq_tol(y2[3], 5 - 9, 1e-12);
}
END_TEST

START_TEST(test_xent_by_hand)
{
    double z[3] = {1, 2, 3}, g[3];
    double loss = td_ref_xent(z, 3, 2, g);
    double s = exp(1) + exp(2) + exp(3);
    ck_assert_double_eq_tol(loss, log(s) - 3, 1e-12);
    ck_assert_double_eq_tol(g[0], exp(1) / s, 1e-12);
    ck_assert_double_eq_tol(g[2], exp(3) / s - 1, 1e-12);
}
END_TEST

static void fill(td_ref *r, uint64_t seed)
{
    const td_model *m = r->m;
    float *p = malloc(m->param_count * sizeof *p);
    td_model_init_params(m, seed, p);
    for (size_t i = 0; i < m->param_count; i++)
        r->params[i] = p[i];
    /* perturb BN scale/shift and biases away from 1/0 so their gradients
     * are exercised in general position */
    size_t off = 0;
    for (int q = 0; q < m->nparams; q++) {
        if (m->params[q].role != TD_P_WEIGHT)
            for (size_t i = 0; i < m->params[q].count; i++)
                r->params[off + i] += 0.2 * td_rng_normal(seed, 99, off + i);
        off += m->params[q].count;
    }
    free(p);
    for (size_t i = 0; i < td_ref_size(r, 0); i++)
        r->y[0][i] = td_rng_normal(seed, 7, i);
    for (int i = 0; i < r->n; i++)
        r->labels[i] = (int32_t)td_rng_below(seed, 8, (uint64_t)i,
                                             (uint64_t)m->classes);
}

static double loss_at(td_ref *r)
{
    td_ref_forward(r, 1);
    return r->loss;
}

/* Central differences on every 7th parameter and every 5th input. */
static void gradcheck(const char *name, td_shape in)
{
    td_model *m = load(name, in, 5);
    td_ref r;
    ck_assert_int_eq(td_ref_init(&r, m, 3), 0);
    fill(&r, 11);
    td_ref_forward(&r, 1);
    td_ref_backward(&r);
    const double h = 1e-6;
    int checked = 0;
    double worst = 0;
    for (size_t i = 0; i < m->param_count; i += 7) {
        double keep = r.params[i];
        r.params[i] = keep + h;
        double lp = loss_at(&r);
        r.params[i] = keep - h;
        double lm = loss_at(&r);
        r.params[i] = keep;
        double fd = (lp - lm) / (2 * h), an = r.grads[i];
        double e = fabs(fd - an) / fmax(1e-3, fabs(fd) + fabs(an));
        worst = fmax(worst, e);
        ck_assert_msg(e < 1e-4, "%s param %zu: fd %.9g analytic %.9g", name,
                      i, fd, an);
        checked++;
    }
    double *dx = malloc(td_ref_size(&r, 0) * sizeof *dx);
    memcpy(dx, r.dy[0], td_ref_size(&r, 0) * sizeof *dx);
    for (size_t i = 0; i < td_ref_size(&r, 0); i += 5) {
        double keep = r.y[0][i];
        r.y[0][i] = keep + h;
        double lp = loss_at(&r);
        r.y[0][i] = keep - h;
        double lm = loss_at(&r);
        r.y[0][i] = keep;
        double fd = (lp - lm) / (2 * h);
        double e = fabs(fd - dx[i]) / fmax(1e-3, fabs(fd) + fabs(dx[i]));
        ck_assert_msg(e < 1e-4, "%s input %zu: fd %.9g analytic %.9g", name,
                      i, fd, dx[i]);
        checked++;
    }
    ck_assert_int_gt(checked, 100);
    free(dx);
    td_ref_free(&r);
    td_model_free(m);
}

START_TEST(test_gradcheck_all_layers) { gradcheck("tiny-all", (td_shape){2, 9, 9}); }
END_TEST

START_TEST(test_gradcheck_flatten) { gradcheck("tiny-flat", (td_shape){2, 9, 9}); }
END_TEST

static Suite *ref_suite(void)
{
    Suite *s = suite_create("ref_layers");
    TCase *tc = tcase_create("ref_layers");
    tcase_add_test(tc, test_conv_by_hand);
    tcase_add_test(tc, test_xent_by_hand);
    tcase_add_test(tc, test_gradcheck_all_layers);
    tcase_add_test(tc, test_gradcheck_flatten);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(ref_suite)
