/* test_kernel_math.c - the shared math of the kernels/ headers and the schedules of
 * optim.c against closed forms worked out by hand. */
#include <math.h>
#include <string.h>

#include "base/error.h"
#include "model/optim.h"
#include "bf16.h"
#include "layout.h"
#include "normalize.h"
#include "optim_update.h"
#include "softmax_xent.h"
#include "tdtest.h"
#include "tf32.h"

/* bf16 rounding: to nearest, ties to even, on the bit patterns. */
START_TEST(test_bf16_rounding)
{
    /* exact values pass through */
    ck_assert_uint_eq(td_bf16_from_f32(1.0f), 0x3f80);
    ck_assert_float_eq(td_bf16_to_f32(0x3f80), 1.0f);
    ck_assert_uint_eq(td_bf16_from_f32(-2.0f), 0xc000);
    /* 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: even (1) wins */
    ck_assert_float_eq(td_bf16_round(1.0f + 0x1p-8f), 1.0f);
    /* 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 and 1 + 2^-6: even wins */
    ck_assert_float_eq(td_bf16_round(1.0f + 3 * 0x1p-8f), 1.0f + 0x1p-6f);
    /* just above halfway rounds up, just below down */
    ck_assert_float_eq(td_bf16_round(1.0f + 0x1p-8f + 0x1p-20f),
                       1.0f + 0x1p-7f);
    ck_assert_float_eq(td_bf16_round(1.0f + 0x1p-8f - 0x1p-20f), 1.0f);
    /* relative error <= 2^-8 (half a unit in the 8th bit) */
    for (int i = 0; i < 100000; i++) {
        float x = (float)ldexp(1.0 + i / 100000.0, i % 60 - 30);
        ck_assert(fabsf(td_bf16_round(x) - x) <= x * 0x1p-8f);
    }
    /* infinities stay, overflow becomes infinity, NaN stays NaN */
    ck_assert(isinf(td_bf16_round(INFINITY)));
    ck_assert(td_bf16_round(-INFINITY) < 0);
    ck_assert(isinf(td_bf16_round(3.4e38f)));
    ck_assert(isnan(td_bf16_round(NAN)));
    uint32_t snan = 0x7f800001u; /* low payload bits only: must stay NaN */
    float f;
    memcpy(&f, &snan, sizeof f);
    ck_assert(isnan(td_bf16_round(f)));
    /* signed zero and subnormals */
    ck_assert_uint_eq(td_bf16_from_f32(-0.0f), 0x8000);
    ck_assert_float_eq(td_bf16_round(0x1p-133f), 0x1p-133f);
    /* the array helpers */
    float src[3] = {1.0f, 1.0f + 0x1p-8f, 3.0f};
    td_bf16 d[3], a[3];
    td_bf16_from_f32_n(src, d, 3);
    td_bf16_from_f32_n(src, a, 3);
    td_bf16_add_n(d, a, 3);
    ck_assert_float_eq(td_bf16_to_f32(d[0]), 2.0f);
    ck_assert_float_eq(td_bf16_to_f32(d[1]), 2.0f);
    ck_assert_float_eq(td_bf16_to_f32(d[2]), 6.0f);
}
END_TEST

START_TEST(test_normalize_nhwc_to_nchw)
{
    /* 2 samples, 3 channels, 2x2 */
    uint8_t in[2 * 2 * 2 * 3];
    float out[24], scale[3], bias[3];
    const float mean[3] = {0.1f, 0.5f, 0.9f}, sd[3] = {0.2f, 0.25f, 0.5f};
    for (int i = 0; i < 24; i++)
        in[i] = (uint8_t)(i * 11);
    for (int c = 0; c < 3; c++)
        td_normalize_coeffs(mean[c], sd[c], &scale[c], &bias[c]);
    td_normalize_batch(in, out, 2, 3, 2, 2, scale, bias);
    for (int n = 0; n < 2; n++)
        for (int c = 0; c < 3; c++)
            for (int p = 0; p < 4; p++) {
                size_t o = ((size_t)n * 3 + c) * 4 + p;
                double want = (in[(n * 4 + p) * 3 + c] / 255.0 - mean[c]) /
                              sd[c];
                ck_assert_double_eq_tol(out[o], want, 1e-5);
                ck_assert_float_eq(td_normalize_elem(in, o, 3, 2, 2, scale,
                                                     bias), out[o]);
            }
}
END_TEST

START_TEST(test_xent_loss_grad_correct)
{
    const float z[4] = {0.5f, -1.0f, 2.0f, 0.0f};
    float g[4];
    int ok = -1;
    double s = exp(0.5) + exp(-1.0) + exp(2.0) + exp(0.0);
    double loss = td_xent_row(z, 4, 1, 0.0f, 0.25f, g, &ok);
    ck_assert_double_eq_tol(loss, log(s) + 1.0, 1e-9);
    ck_assert_int_eq(ok, 0);
    ck_assert_double_eq_tol(g[1], (exp(-1.0) / s - 1) * 0.25, 1e-7);
    ck_assert_double_eq_tol(g[2], exp(2.0) / s * 0.25, 1e-7);
    ck_assert_double_eq_tol(g[0] + g[1] + g[2] + g[3], 0, 1e-7);
    td_xent_row(z, 4, 2, 0.0f, 1.0f, NULL, &ok);
    ck_assert_int_eq(ok, 1);
}
END_TEST

START_TEST(test_xent_stable_and_ties)
{
    const float big[3] = {1000.0f, 999.0f, -1000.0f};
    float g[3];
    int ok;
    double loss = td_xent_row(big, 3, 1, 0.0f, 1.0f, g, &ok);
    ck_assert(isfinite(loss));
    ck_assert_double_eq_tol(loss, 1.0 + log(1 + exp(-1.0)), 1e-6);
    ck_assert(isfinite(g[0]) && isfinite(g[2]));
    const float tie[3] = {1.0f, 3.0f, 3.0f};
    td_xent_row(tie, 3, 2, 0.0f, 1.0f, NULL, &ok);
    ck_assert_int_eq(ok, 0); /* arg max is the first of the tied */
    td_xent_row(tie, 3, 1, 0.0f, 1.0f, NULL, &ok);
    ck_assert_int_eq(ok, 1);
}
END_TEST

START_TEST(test_sgd_plain_and_decay)
{
    float w = 2.0f;
    td_sgd_elem(&w, NULL, 0.5f, 0.1f, 0.0f, 0.01f, 0);
    ck_assert_float_eq_tol(w, 2.0f - 0.1f * (0.5f + 0.02f), 1e-7f);
}
END_TEST

START_TEST(test_sgd_momentum_three_steps)
{
    /* constant gradient g, no decay: v_k = g (1 + mu + ... + mu^(k-1)) */
    const float g = 1.0f, lr = 0.1f, mu = 0.9f;
    float w = 0, v = 0, wn = 0, vn = 0;
    double v_k = 0, w_ref = 0, wn_ref = 0;
    for (int k = 1; k <= 3; k++) {
        td_sgd_elem(&w, &v, g, lr, mu, 0, 0);
        td_sgd_elem(&wn, &vn, g, lr, mu, 0, 1);
        v_k = mu * v_k + g;
        w_ref -= lr * v_k;
        wn_ref -= lr * (g + mu * v_k);
        ck_assert_double_eq_tol(v, v_k, 1e-6);
        ck_assert_double_eq_tol(w, w_ref, 1e-6);
        ck_assert_double_eq_tol(wn, wn_ref, 1e-6);
    }
    ck_assert_double_eq_tol(w, -0.1 * (1 + 1.9 + 2.71), 1e-6);
}
END_TEST

START_TEST(test_adamw_first_steps)
{
    float w = 1.0f, m = 0, v = 0;
    const float lr = 0.01f, wd = 0.1f;
    td_adamw_corr c = td_adamw_corrections(0.9, 0.999, 1);
    td_adamw_elem(&w, &m, &v, -4.0f, lr, 0.9f, 0.999f, 1e-8f, wd, c);
    /* m_hat = g, v_hat = g^2: the step is lr * sign(g) */
    ck_assert_double_eq_tol(w, 1.0 * (1 - lr * wd) + lr, 1e-6);
    ck_assert_double_eq_tol(m, -0.4, 1e-6);
    ck_assert_double_eq_tol(v, 0.016, 1e-6);
    /* step 2 with g = 0: m_hat = 0.9 m / 0.19, v_hat = 0.999 v / 0.001999 */
    float w1 = w;
    c = td_adamw_corrections(0.9, 0.999, 2);
    td_adamw_elem(&w, &m, &v, 0.0f, lr, 0.9f, 0.999f, 1e-8f, wd, c);
    double mh = 0.9 * -0.4 / 0.19, vh = 0.999 * 0.016 / (1 - 0.999 * 0.999);
    ck_assert_double_eq_tol(w, w1 * (1 - lr * wd) - lr * mh / sqrt(vh),
                            1e-6);
}
END_TEST

START_TEST(test_schedules)
{
    td_optim_config c;
    td_optim_defaults(&c, TD_OPT_SGD);
    c.lr = 0.05;
    c.schedule.warmup_steps = 100;
    c.schedule.type = TD_SCHED_COSINE;
    ck_assert_double_eq_tol(td_schedule_lr(&c, 0, 1100), 0.05 / 100, 1e-12);
    ck_assert_double_eq_tol(td_schedule_lr(&c, 49, 1100), 0.025, 1e-12);
    ck_assert_double_eq_tol(td_schedule_lr(&c, 99, 1100), 0.05, 1e-12);
    ck_assert_double_eq_tol(td_schedule_lr(&c, 100, 1100), 0.05, 1e-12);
    ck_assert_double_eq_tol(td_schedule_lr(&c, 600, 1100), 0.025, 1e-12);
    ck_assert_double_eq_tol(td_schedule_lr(&c, 1100, 1100), 0.0, 1e-12);
    ck_assert_double_eq_tol(td_schedule_lr(&c, 5000, 1100), 0.0, 1e-12);
    /* ending at min_lr: the warm-up as before, the cosine between */
    c.schedule.min_lr = 0.01;
    ck_assert_double_eq_tol(td_schedule_lr(&c, 49, 1100), 0.025, 1e-12);
    ck_assert_double_eq_tol(td_schedule_lr(&c, 100, 1100), 0.05, 1e-12);
    ck_assert_double_eq_tol(td_schedule_lr(&c, 600, 1100), 0.03, 1e-12);
    ck_assert_double_eq_tol(td_schedule_lr(&c, 1100, 1100), 0.01, 1e-12);
    ck_assert_double_eq_tol(td_schedule_lr(&c, 5000, 1100), 0.01, 1e-12);
    c.schedule.min_lr = 0;
    c.schedule.type = TD_SCHED_STEP;
    c.schedule.step_size = 30;
    c.schedule.gamma = 0.1;
    ck_assert_double_eq_tol(td_schedule_lr(&c, 129, 0), 0.05, 1e-12);
    ck_assert_double_eq_tol(td_schedule_lr(&c, 130, 0), 0.005, 1e-12);
    ck_assert_double_eq_tol(td_schedule_lr(&c, 165, 0), 0.0005, 1e-12);
    c.schedule.type = TD_SCHED_CONSTANT;
    c.schedule.warmup_steps = 0;
    ck_assert_double_eq(td_schedule_lr(&c, 12345, 10), 0.05);
}
END_TEST

START_TEST(test_optim_validation)
{
    td_optim_config c;
    char err[128];
    td_optim_defaults(&c, TD_OPT_ADAMW);
    ck_assert_double_eq(c.weight_decay, 0.01);
    ck_assert_int_eq(td_optim_validate(&c, err, sizeof err), 0);
    ck_assert_int_eq(td_optim_slots(&c), 2);
    td_optim_defaults(&c, TD_OPT_SGD);
    ck_assert_int_eq(td_optim_slots(&c), 1);
    c.momentum = 0;
    ck_assert_int_eq(td_optim_slots(&c), 0);
    c.nesterov = 1;
    ck_assert_int_eq(td_optim_validate(&c, err, sizeof err), TD_E_SPEC);
    ck_assert_str_eq(err, "optimizer.nesterov: needs momentum > 0");
    td_optim_defaults(&c, TD_OPT_SGD);
    c.momentum = 1.0;
    ck_assert_int_eq(td_optim_validate(&c, err, sizeof err), TD_E_SPEC);
    ck_assert_str_eq(err, "optimizer.momentum: must be in [0, 1)");
    td_optim_defaults(&c, TD_OPT_SGD);
    c.lr = 0;
    ck_assert_int_eq(td_optim_validate(&c, err, sizeof err), TD_E_SPEC);
    ck_assert_str_eq(err, "optimizer.lr: must be > 0 and < 1000");
    td_optim_defaults(&c, TD_OPT_SGD);
    c.schedule.type = TD_SCHED_STEP;
    c.schedule.gamma = 0;
    ck_assert_int_eq(td_optim_validate(&c, err, sizeof err), TD_E_SPEC);
    ck_assert_str_eq(err, "optimizer.schedule.gamma: must be in (0, 1]");
    td_optim_defaults(&c, TD_OPT_SGD);
    c.schedule.min_lr = 2 * c.lr;
    ck_assert_int_eq(td_optim_validate(&c, err, sizeof err), TD_E_SPEC);
    ck_assert_str_eq(err, "optimizer.schedule.min_lr: must be in [0, lr]");
}
END_TEST

/* TF32 rounding (kernels/tf32.h): 10 mantissa bits kept, to nearest,
 * ties to even, on the bit patterns. */
/* The flipped, channel-swapped filter of a stride-1 convolution's
 * backward data: a hand-worked element, a permutation, its own inverse
 * with the channel counts swapped. */
START_TEST(test_conv_flip_index)
{
    /* k 2, c 3, r 3: W[1][2][0][1] (KCRS 1*27 + 2*9 + 0*3 + 1 = 46) goes
     * to W'[2][1][2][1] ((2*2 + 1)*9 + 2*3 + 1 = 52) */
    ck_assert_uint_eq(td_conv_flip_index(46, 2, 3, 3), 52);
    enum { K = 4, C = 3, R = 3, N = K * C * R * R };
    int seen[N] = {0};
    for (size_t i = 0; i < N; i++) {
        size_t j = td_conv_flip_index(i, K, C, R);
        ck_assert_uint_lt(j, N);
        seen[j]++;
        ck_assert_uint_eq(td_conv_flip_index(j, C, K, R), i);
    }
    for (size_t j = 0; j < N; j++)
        ck_assert_int_eq(seen[j], 1);
}
END_TEST

START_TEST(test_tf32_rounding)
{
    /* exact values pass through; the low 13 bits always end up 0 */
    ck_assert_float_eq(td_tf32_round(1.0f), 1.0f);
    ck_assert_float_eq(td_tf32_round(-0.75f), -0.75f);
    ck_assert_float_eq(td_tf32_round(1.0f + 0x1p-10f), 1.0f + 0x1p-10f);
    /* 1 + 2^-11 lies halfway between 1 and 1 + 2^-10: even (1) wins */
    ck_assert_float_eq(td_tf32_round(1.0f + 0x1p-11f), 1.0f);
    /* 1 + 3 * 2^-11 lies halfway between 1 + 2^-10 and 1 + 2^-9: even */
    ck_assert_float_eq(td_tf32_round(1.0f + 3 * 0x1p-11f), 1.0f + 0x1p-9f);
    /* just above halfway rounds up, just below down */
    ck_assert_float_eq(td_tf32_round(1.0f + 0x1p-11f + 0x1p-20f),
                       1.0f + 0x1p-10f);
    ck_assert_float_eq(td_tf32_round(1.0f + 0x1p-11f - 0x1p-20f), 1.0f);
    ck_assert_float_eq(td_tf32_round(-(1.0f + 0x1p-11f + 0x1p-20f)),
                       -(1.0f + 0x1p-10f));
    /* a carry into the exponent */
    ck_assert_float_eq(td_tf32_round(2.0f - 0x1p-12f), 2.0f);
    /* relative error <= 2^-11, and finer than bf16's 2^-8 */
    for (int i = 0; i < 100000; i++) {
        float x = (float)ldexp(1.0 + i / 100000.0, i % 60 - 30);
        float r = td_tf32_round(x);
        uint32_t u;
        memcpy(&u, &r, sizeof u);
        ck_assert_uint_eq(u & 0x1fffu, 0);
        ck_assert(fabsf(r - x) <= x * 0x1p-11f);
    }
    /* subnormals round on the same bits */
    ck_assert_float_eq(td_tf32_round(0x1p-130f), 0x1p-130f);
    ck_assert_float_eq(td_tf32_round(0x1p-136f + 0x1p-140f), 0x1p-136f);
    ck_assert_float_eq(td_tf32_round(0x1p-149f), 0.0f);
    /* infinities stay, overflow becomes infinity, NaN stays NaN */
    ck_assert(isinf(td_tf32_round(INFINITY)));
    ck_assert(td_tf32_round(-INFINITY) < 0);
    ck_assert(isinf(td_tf32_round(3.4028235e38f)));
    ck_assert(isnan(td_tf32_round(NAN)));
    uint32_t snan = 0x7f800001u; /* low payload bits only: must stay NaN */
    float f;
    memcpy(&f, &snan, sizeof f);
    ck_assert(isnan(td_tf32_round(f)));
}
END_TEST

static Suite *kernels_suite(void)
{
    Suite *s = suite_create("kernels");
    TCase *tc = tcase_create("kernels");
    tcase_add_test(tc, test_normalize_nhwc_to_nchw);
    tcase_add_test(tc, test_bf16_rounding);
    tcase_add_test(tc, test_xent_loss_grad_correct);
    tcase_add_test(tc, test_xent_stable_and_ties);
    tcase_add_test(tc, test_sgd_plain_and_decay);
    tcase_add_test(tc, test_sgd_momentum_three_steps);
    tcase_add_test(tc, test_adamw_first_steps);
    tcase_add_test(tc, test_schedules);
    tcase_add_test(tc, test_optim_validation);
    tcase_add_test(tc, test_tf32_rounding);
    tcase_add_test(tc, test_conv_flip_index);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(kernels_suite)
