/* test_kernels.c - the per-element arithmetic that the CUDA kernels run
 * (the headers in kernels/), checked on the host against double-precision references
 * (tests/ref_layers.c where one exists, the written-out formula otherwise)
 * on seeded random inputs and on edge cases.  Tolerances are relative to
 * the reference's magnitude: |got - ref| <= tol * max(|ref|, floor).
 * These are the functions backend_cuda_kernels.cu calls, so a pass here
 * means the device arithmetic is right; only the indexing and launch code
 * around them needs a GPU to be tested. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "eltwise.h"
#include "normalize.h"
#include "optim_update.h"
#include "ref_layers.h"
#include "softmax_xent.h"
#include "stats.h"
#include "tdtest.h"

#define SEED 20261121u

static double unif(uint64_t sub, uint64_t i, double lo, double hi)
{
    return lo + (hi - lo) * td_rng_uniform(SEED, td_rng_stream(TD_RNG_TEST,
                                                               sub), i);
}

static void close_to(double got, double ref, double tol, double floor,
                     const char *what, long i)
{
    double scale = fmax(fabs(ref), floor);
    ck_assert_msg(fabs(got - ref) <= tol * scale,
                  "%s[%ld]: got %.9g, reference %.9g (tol %.2g x %.3g)",
                  what, i, got, ref, tol, scale);
}

/* ---- cast + normalise ---------------------------------------------------- */

START_TEST(test_normalize_every_byte_value)
{
    const float mean[3] = {0.485f, 0.456f, 0.406f};
    const float sd[3] = {0.229f, 0.224f, 0.225f};
    float scale[3], bias[3];
    uint8_t px[256 * 3];
    for (int c = 0; c < 3; c++)
        td_normalize_coeffs(mean[c], sd[c], &scale[c], &bias[c]);
    for (int v = 0; v < 256; v++)
        for (int c = 0; c < 3; c++)
            px[v * 3 + c] = (uint8_t)v; /* NHWC: 1 x 1 x 256 x 3 */
    for (int c = 0; c < 3; c++)
        for (int v = 0; v < 256; v++) {
            size_t o = (size_t)c * 256 + (size_t)v; /* NCHW index */
            float got = td_normalize_elem(px, o, 3, 1, 256, scale, bias);
            double ref = ((double)v / 255.0 - mean[c]) / sd[c];
            close_to(got, ref, 1e-6, 1.0, "normalize", (long)o);
        }
}
END_TEST

/* The device maps one thread to one NCHW output element; the CPU backend
 * loops plane by plane.  Both must give identical bits. */
START_TEST(test_normalize_layout_matches_host_loop)
{
    enum { N = 3, C = 3, H = 5, W = 7 };
    size_t total = (size_t)N * C * H * W;
    uint8_t px[N * C * H * W];
    float a[N * C * H * W], scale[C], bias[C];
    for (size_t i = 0; i < total; i++)
        px[i] = (uint8_t)td_rng_below(SEED, 1, i, 256);
    for (int c = 0; c < C; c++)
        td_normalize_coeffs(0.1f * (float)c + 0.2f, 0.3f, &scale[c],
                            &bias[c]);
    td_normalize_batch(px, a, N, C, H, W, scale, bias);
    for (size_t o = 0; o < total; o++) {
        float d = td_normalize_elem(px, o, C, H, W, scale, bias);
        ck_assert_msg(memcmp(&d, &a[o], sizeof d) == 0,
                      "element %zu: %.9g vs host loop %.9g", o, d, a[o]);
    }
    /* and the index mapping is NHWC -> NCHW: sample 2, channel 1, (4, 6) */
    size_t o = ((2 * (size_t)C + 1) * H + 4) * W + 6;
    uint8_t v = px[((2 * (size_t)H + 4) * W + 6) * C + 1];
    ck_assert_float_eq(a[o], (float)v * scale[1] + bias[1]);
}
END_TEST

/* ---- softmax cross-entropy ----------------------------------------------- */

static void xent_case(const float *z, int k, int label, double offset_tol)
{
    double zd[1024] = {0}, gref[1024] = {0};
    float g[1024];
    int ok = -1;
    const float inv_n = 1.0f / 8;
    for (int j = 0; j < k; j++)
        zd[j] = z[j];
    double ref = td_ref_xent(zd, k, label, gref);
    double got = td_xent_row(z, k, label, 0.0f, inv_n, g, &ok);
    close_to(got, ref, offset_tol, 1.0, "loss", label);
    int arg = 0;
    for (int j = 1; j < k; j++)
        if (zd[j] > zd[arg])
            arg = j;
    ck_assert_int_eq(ok, arg == label);
    for (int j = 0; j < k; j++) {
        ck_assert_msg(isfinite(g[j]), "grad[%d] not finite", j);
        /* gradient entries are probabilities (magnitude <= 1) times inv_n */
        close_to(g[j], gref[j] * inv_n, 1e-6, inv_n, "grad", j);
    }
}

START_TEST(test_xent_random_rows)
{
    float z[1000];
    for (int r = 0; r < 50; r++) {
        int k = r % 5 == 0 ? 1000 : 2 + r;
        for (int j = 0; j < k; j++)
            z[j] = (float)unif(2, (uint64_t)r * 1000 + j, -8, 8);
        xent_case(z, k, (int)td_rng_below(SEED, 3, (uint64_t)r, (uint64_t)k),
                  1e-6);
    }
}
END_TEST

/* Label smoothing e: loss and gradient against the double reference
 * written from the definition (td_ref_xent_smooth); the gradient row sums
 * to zero; at e = 0 that reference agrees with the plain one. */
START_TEST(test_xent_label_smoothing)
{
    float z[64], g[64];
    double zd[64], gref[64], gplain[64];
    const float inv_n = 1.0f / 16;
    for (int r = 0; r < 40; r++) {
        int k = 2 + r % 30, label = r % k, ok;
        float e = (float)(r % 4) * 0.1f;
        for (int j = 0; j < k; j++)
            zd[j] = z[j] = (float)unif(4, (uint64_t)r * 100 + j, -6, 6);
        double ref = td_ref_xent_smooth(zd, k, label, e, gref);
        double got = td_xent_row(z, k, label, e, inv_n, g, &ok);
        close_to(got, ref, 1e-6, 1.0, "smoothed loss", r);
        double sum = 0;
        for (int j = 0; j < k; j++) {
            close_to(g[j], gref[j] * inv_n, 1e-6, inv_n, "smoothed grad", j);
            sum += g[j];
        }
        ck_assert_msg(fabs(sum) < 1e-6, "gradient sums to %g", sum);
        if (e == 0.0f) { /* the definition agrees with plain cross-entropy */
            close_to(ref, td_ref_xent(zd, k, label, gplain), 1e-12, 1.0,
                     "e = 0 vs plain", r);
            for (int j = 0; j < k; j++)
                close_to(gref[j], gplain[j], 1e-12, 1.0, "e = 0 grad", j);
        }
    }
}
END_TEST

START_TEST(test_xent_large_logits)
{
    /* exp(z) alone overflows float and double here; the max shift keeps
     * everything finite.  The loss is the difference of two ~1e4 floats,
     * so float rounding of z limits agreement to ~1e-3 absolute. */
    float z[10];
    for (int j = 0; j < 10; j++)
        z[j] = 1.0e4f + 8.0f * (float)j;
    xent_case(z, 10, 3, 1e-6);
    z[9] = 3.0e38f;
    z[0] = -3.0e38f;
    xent_case(z, 10, 9, 1e-6);
    double loss;
    float g[10];
    int ok;
    loss = td_xent_row(z, 10, 0, 0.0f, 1.0f, g, &ok);
    ck_assert_msg(isinf(loss) || loss > 1e38, "loss %g for a hopeless row",
                  loss);
    ck_assert_float_eq(g[0], -1.0f);
    ck_assert_float_eq(g[9], 1.0f);
}
END_TEST

START_TEST(test_xent_ties_go_to_lowest_index)
{
    float z[4] = {1.0f, 5.0f, 5.0f, 0.0f};
    int ok;
    double l1 = td_xent_row(z, 4, 1, 0.0f, 1.0f, NULL, &ok);
    ck_assert_int_eq(ok, 1);
    double l2 = td_xent_row(z, 4, 2, 0.0f, 1.0f, NULL, &ok);
    ck_assert_int_eq(ok, 0);
    ck_assert_double_eq_tol(l1, l2, 1e-12); /* same logit, same loss */
}
END_TEST

START_TEST(test_xent_single_class)
{
    float z[1] = {42.0f}, g[1];
    int ok;
    double l = td_xent_row(z, 1, 0, 0.0f, 0.5f, g, &ok);
    ck_assert_double_eq_tol(l, 0.0, 1e-12);
    ck_assert_int_eq(ok, 1);
    ck_assert_float_eq_tol(g[0], 0.0f, 1e-7f);
}
END_TEST

/* ---- optimizers ------------------------------------------------------------ */

static void sgd_run(double mu, double wd, int nesterov, int steps)
{
    enum { N = 257 };
    float w[N], v[N];
    double wr[N], vr[N];
    const double lr = 0.05;
    for (int i = 0; i < N; i++) {
        wr[i] = w[i] = (float)unif(4, i, -1, 1);
        vr[i] = v[i] = 0.0f;
    }
    for (int t = 0; t < steps; t++)
        for (int i = 0; i < N; i++) {
            float g = (float)unif(5, (uint64_t)t * N + i, -2, 2);
            td_sgd_elem(&w[i], mu > 0 ? &v[i] : NULL, g, (float)lr,
                        (float)mu, (float)wd, nesterov);
            double gd = (double)g + wd * wr[i];
            if (mu > 0) {
                vr[i] = mu * vr[i] + gd;
                gd = nesterov ? gd + mu * vr[i] : vr[i];
            }
            wr[i] -= lr * gd;
        }
    for (int i = 0; i < N; i++) {
        close_to(w[i], wr[i], 1e-5, 1.0, "sgd w", i);
        if (mu > 0)
            close_to(v[i], vr[i], 1e-5, 1.0, "sgd v", i);
    }
}

START_TEST(test_sgd_momentum_weight_decay) { sgd_run(0.9, 5e-4, 0, 20); }
END_TEST
START_TEST(test_sgd_nesterov) { sgd_run(0.9, 5e-4, 1, 20); }
END_TEST
START_TEST(test_sgd_plain_no_state) { sgd_run(0.0, 0.0, 0, 5); }
END_TEST

START_TEST(test_sgd_weight_decay_zero_is_exact)
{
    /* wd = 0, mu = 0: w - lr * g, exactly one float rounding */
    float w = 0.75f;
    td_sgd_elem(&w, NULL, 0.5f, 0.25f, 0.0f, 0.0f, 0);
    ck_assert_float_eq(w, 0.75f - 0.25f * 0.5f);
}
END_TEST

static void adamw_run(double wd, int steps)
{
    enum { N = 129 };
    float w[N], m[N], v[N];
    double wr[N], mr[N], vr[N];
    const double lr = 1e-3, b1 = 0.9, b2 = 0.999, eps = 1e-8;
    for (int i = 0; i < N; i++) {
        wr[i] = w[i] = (float)unif(6, i, -1, 1);
        mr[i] = vr[i] = m[i] = v[i] = 0.0f;
    }
    for (int t = 1; t <= steps; t++) {
        td_adamw_corr c = td_adamw_corrections(b1, b2, t);
        close_to(c.c1, 1.0 / (1.0 - pow(b1, t)), 1e-6, 1.0, "c1", t);
        close_to(c.c2, 1.0 / (1.0 - pow(b2, t)), 1e-6, 1.0, "c2", t);
        for (int i = 0; i < N; i++) {
            float g = (float)unif(7, (uint64_t)t * N + i, -1, 1);
            td_adamw_elem(&w[i], &m[i], &v[i], g, (float)lr, (float)b1,
                          (float)b2, (float)eps, (float)wd, c);
            /* the reference takes the hyper-parameters as the kernel
             * receives them (rounded to float: 1 - 0.999f is 1.3e-5 away
             * from 0.001), then computes in double */
            double fl = (float)lr, f1 = (float)b1, f2 = (float)b2;
            wr[i] *= 1.0 - fl * (double)(float)wd;
            mr[i] = f1 * mr[i] + (1 - f1) * g;
            vr[i] = f2 * vr[i] + (1 - f2) * (double)g * g;
            double mh = mr[i] / (1 - pow(b1, t)), vh = vr[i] / (1 - pow(b2, t));
            wr[i] -= fl * mh / (sqrt(vh) + (double)(float)eps);
        }
    }
    for (int i = 0; i < N; i++) {
        close_to(w[i], wr[i], 1e-5, 1.0, "adamw w", i);
        /* m and v are sums of terms of size (1-b)|g| that cancel: scale the
         * tolerance by the terms, not by the (possibly tiny) sum */
        close_to(m[i], mr[i], 1e-5, 1 - b1, "adamw m", i);
        close_to(v[i], vr[i], 1e-5, 1 - b2, "adamw v", i);
    }
}

START_TEST(test_adamw_steps) { adamw_run(0.01, 10); }
END_TEST
START_TEST(test_adamw_weight_decay_zero) { adamw_run(0.0, 10); }
END_TEST

START_TEST(test_adamw_first_step_bias_correction)
{
    /* t = 1: m^ = g and v^ = g^2 exactly, so the step is lr * g/(|g|+eps)
     * = lr * sign(g) to float precision, whatever the betas */
    td_adamw_corr c = td_adamw_corrections(0.9, 0.999, 1);
    for (int s = -1; s <= 1; s += 2) {
        float w = 1.0f, m = 0.0f, v = 0.0f;
        td_adamw_elem(&w, &m, &v, 0.37f * (float)s, 0.01f, 0.9f, 0.999f,
                      1e-8f, 0.0f, c);
        ck_assert_float_eq_tol(w, 1.0f - 0.01f * (float)s, 1e-6f);
    }
}
END_TEST

/* ---- residual add, gradient summation, dense bias, dropout -------------- */

START_TEST(test_eltwise_add_and_accumulate)
{
    ck_assert_float_eq(td_add_elem(1.5f, -0.25f), 1.25f);
    ck_assert_float_eq(td_accum_elem(7.0f, 2.0f, 1), 9.0f);
    /* not accumulating ignores whatever was in d, even NaN garbage */
    ck_assert_float_eq(td_accum_elem(NAN, 2.0f, 0), 2.0f);
}
END_TEST

START_TEST(test_dense_bias_and_its_gradient)
{
    enum { R = 37, O = 11 };
    float dy[R * O], y[R * O], b[O];
    for (int i = 0; i < R * O; i++) {
        dy[i] = (float)unif(8, i, -1, 1);
        y[i] = (float)unif(9, i, -1, 1);
    }
    for (int o = 0; o < O; o++)
        b[o] = (float)unif(10, o, -1, 1);
    for (int o = 0; o < O; o++) {
        double ref = 0, mag = 0;
        for (int i = 0; i < R; i++) {
            ref += dy[i * O + o];
            mag += fabs(dy[i * O + o]);
        }
        /* a sum of R floats: tolerance relative to the sum of magnitudes */
        ck_assert_msg(fabs(td_bias_grad_col(dy, R, O, o) - ref) <=
                          1e-6 * mag, "column %d", o);
    }
    for (size_t e = 0; e < R * O; e++)
        ck_assert_float_eq(td_bias_add_elem(y, b, e, O), y[e] + b[e % O]);
}
END_TEST

START_TEST(test_dropout_rate_and_scale)
{
    const uint64_t st = td_rng_stream(TD_RNG_DROPOUT, 3);
    const int n = 200000;
    for (int r = 0; r < 3; r++) {
        float rate = r == 0 ? 0.0f : r == 1 ? 0.25f : 0.5f, keep = 1 - rate;
        long kept = 0;
        double mean = 0;
        for (int i = 0; i < n; i++) {
            int k = td_dropout_keep(7, st, (uint64_t)i, keep);
            kept += k;
            mean += td_dropout_elem(1.0f, k, keep);
        }
        if (rate == 0.0f)
            ck_assert_int_eq(kept, n);
        /* binomial: 5 sigma is < 0.6% of n here */
        ck_assert_msg(fabs((double)kept / n - keep) < 0.006,
                      "rate %.2f kept %.4f", rate, (double)kept / n);
        ck_assert_msg(fabs(mean / n - 1.0) < 0.012, "mean %.4f", mean / n);
    }
    /* the same (seed, stream, index) always gives the same mask */
    for (int i = 0; i < 1000; i++)
        ck_assert_int_eq(td_dropout_keep(7, st, (uint64_t)i, 0.5f),
                         td_dropout_keep(7, st, (uint64_t)i, 0.5f));
}
END_TEST

START_TEST(test_stats_reduce_in_order)
{
    enum { N = 300 };
    double loss[N];
    int ok[N];
    double ref = 0;
    long long c = 0;
    for (int i = 0; i < N; i++) {
        loss[i] = unif(11, i, 0, 5);
        ok[i] = (int)td_rng_below(SEED, 12, (uint64_t)i, 2);
        ref += loss[i];
        c += ok[i];
    }
    td_dev_stats acc = {0, 0, 0};
    td_stats_reduce(&acc, loss, ok, N);
    ck_assert_double_eq(acc.loss_sum, ref); /* same order: same bits */
    ck_assert_int_eq(acc.correct, c);
    ck_assert_int_eq(acc.samples, N);
    td_stats_reduce(&acc, loss, ok, 10);
    ck_assert_int_eq(acc.samples, N + 10);
}
END_TEST

static Suite *kernels_suite(void)
{
    Suite *s = suite_create("kernels");
    TCase *tc = tcase_create("normalize");
    tcase_add_test(tc, test_normalize_every_byte_value);
    tcase_add_test(tc, test_normalize_layout_matches_host_loop);
    suite_add_tcase(s, tc);
    tc = tcase_create("xent");
    tcase_add_test(tc, test_xent_random_rows);
    tcase_add_test(tc, test_xent_label_smoothing);
    tcase_add_test(tc, test_xent_large_logits);
    tcase_add_test(tc, test_xent_ties_go_to_lowest_index);
    tcase_add_test(tc, test_xent_single_class);
    suite_add_tcase(s, tc);
    tc = tcase_create("optim");
    tcase_add_test(tc, test_sgd_momentum_weight_decay);
    tcase_add_test(tc, test_sgd_nesterov);
    tcase_add_test(tc, test_sgd_plain_no_state);
    tcase_add_test(tc, test_sgd_weight_decay_zero_is_exact);
    tcase_add_test(tc, test_adamw_steps);
    tcase_add_test(tc, test_adamw_weight_decay_zero);
    tcase_add_test(tc, test_adamw_first_step_bias_correction);
    suite_add_tcase(s, tc);
    tc = tcase_create("eltwise");
    tcase_add_test(tc, test_eltwise_add_and_accumulate);
    tcase_add_test(tc, test_dense_bias_and_its_gradient);
    tcase_add_test(tc, test_dropout_rate_and_scale);
    tcase_add_test(tc, test_stats_reduce_in_order);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(kernels_suite)
