/* test_cfwd.c - the CPU backend's AMX convolution forward
 * (lib/backend/cpu/cpu_cfwd.c) against an fp64 reference on random NHWC
 * bf16 data: resnet20's three stages (16, 32, 64 channels on 32x32,
 * 16x16, 8x8), unequal and odd channel-block counts (16 -> 48, 32 -> 16,
 * 64 -> 16), odd image sizes, 1x1, 5x5 and 7x7 kernels, with and without
 * a bias; the output rounded once to bf16; bitwise equal results on one
 * and two threads.  Skipped where the process cannot use AMX.
 */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_bwdw.h"
#include "backend/cpu/cpu_cfwd.h"
#include "bf16.h"
#include "philox.h"
#include "tdtest.h"

typedef struct shape {
    int n, h, w, ic, oc, k, bias;
} shape;

static const shape shapes[] = {
    {3, 32, 32, 16, 16, 3, 0}, {5, 16, 16, 32, 32, 3, 0},
    {7, 8, 8, 64, 64, 3, 1},   {2, 7, 5, 16, 48, 3, 1},
    {3, 6, 9, 32, 16, 5, 0},   {4, 4, 4, 16, 32, 1, 1},
    {2, 8, 8, 64, 16, 3, 0},   {2, 9, 11, 32, 32, 7, 1},
};

static td_bf16 *rnd(size_t n, uint64_t stream)
{
    td_bf16 *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = td_bf16_from_f32(
            (float)(2 * td_rng_uniform(13, stream, i) - 1));
    return v;
}

START_TEST(test_matches_reference)
{
    const shape *s = &shapes[_i];
    int p = (s->k - 1) / 2, kk = s->k * s->k;
    size_t rows = (size_t)s->n * s->h * s->w;
    size_t nw = (size_t)s->oc * s->ic * kk;
    td_bf16 *x = rnd(rows * s->ic, 1 + (uint64_t)_i);
    td_bf16 *wb = rnd(nw, 50 + (uint64_t)_i);
    float *w = malloc(nw * sizeof *w), *bias = malloc(s->oc * sizeof *bias);
    for (size_t i = 0; i < nw; i++) /* masters off the bf16 grid: rounded */
        w[i] = td_bf16_to_f32(wb[i]) * (1.0f + 1.0f / 1024);
    for (int o = 0; o < s->oc; o++)
        bias[o] = (float)o / 16 - 1;
    td_bf16 *y = malloc(rows * s->oc * sizeof *y);
    td_cfwd *c = td_cfwd_create(s->n, s->h, s->w, s->ic, s->oc, s->k, 2);
    ck_assert_ptr_nonnull(c);
    td_cfwd_weights(c, w);
    td_cfwd_run(c, x, y, s->bias ? bias : NULL);
    for (int n = 0; n < s->n; n++)
        for (int i = 0; i < s->h; i++)
            for (int j = 0; j < s->w; j++)
                for (int o = 0; o < s->oc; o++) {
                    double a = s->bias ? bias[o] : 0, m = fabs(a);
                    for (int kh = 0; kh < s->k; kh++)
                        for (int kw = 0; kw < s->k; kw++) {
                            int yi = i + kh - p, xj = j + kw - p;
                            if (yi < 0 || yi >= s->h || xj < 0 ||
                                xj >= s->w)
                                continue;
                            const td_bf16 *xr =
                                x + (((size_t)n * s->h + yi) * s->w + xj) *
                                        s->ic;
                            for (int ci = 0; ci < s->ic; ci++) {
                                float wv = td_bf16_to_f32(td_bf16_from_f32(
                                    w[(((size_t)o * s->ic + ci) * s->k + kh) *
                                          s->k + kw]));
                                double t = (double)wv * td_bf16_to_f32(xr[ci]);
                                a += t;
                                m += fabs(t);
                            }
                        }
                    float got = td_bf16_to_f32(
                        y[(((size_t)n * s->h + i) * s->w + j) * s->oc + o]);
                    /* one bf16 rounding of an fp32 sum: 2^-8 relative,
                     * plus the fp32 sums' rounding, far below 1e-5 of the
                     * terms' magnitude; a wrong tap or channel is off by
                     * about a term */
                    ck_assert_msg(fabs(got - a) <= fabs(a) / 256 + 1e-5 * m,
                                  "k%d %d->%d %dx%d: y[%d][%d][%d][%d] %g, "
                                  "want %g", s->k, s->ic, s->oc, s->h, s->w,
                                  n, i, j, o, got, a);
                }
    td_cfwd_destroy(c);
    free(x), free(wb), free(w), free(bias), free(y);
}
END_TEST

START_TEST(test_thread_count_independent)
{
    const shape s = {9, 8, 8, 32, 48, 3, 1};
    size_t rows = (size_t)s.n * s.h * s.w, nw = (size_t)s.oc * s.ic * 9;
    td_bf16 *x = rnd(rows * s.ic, 3), *wb = rnd(nw, 4);
    float *w = malloc(nw * sizeof *w), bias[48] = {0.5f};
    for (size_t i = 0; i < nw; i++)
        w[i] = td_bf16_to_f32(wb[i]);
    td_bf16 *a = malloc(rows * s.oc * 2), *b = malloc(rows * s.oc * 2);
    td_cfwd *c = td_cfwd_create(s.n, s.h, s.w, s.ic, s.oc, s.k, 2);
    ck_assert_ptr_nonnull(c);
    td_cfwd_weights(c, w);
    omp_set_num_threads(2);
    td_cfwd_run(c, x, a, bias);
    omp_set_num_threads(1);
    td_cfwd_run(c, x, b, bias);
    ck_assert_int_eq(memcmp(a, b, rows * s.oc * 2), 0);
    td_cfwd_destroy(c);
    free(x), free(wb), free(w), free(a), free(b);
}
END_TEST

START_TEST(test_refuses_unsupported)
{
    ck_assert(!td_cfwd_ok(3, 2, 1, 16, 16)); /* stride 2 */
    ck_assert(!td_cfwd_ok(3, 1, 0, 16, 16)); /* not "same" padding */
    ck_assert(!td_cfwd_ok(3, 1, 1, 3, 16));  /* 3 input channels */
    ck_assert(!td_cfwd_ok(3, 1, 1, 48, 16)); /* 48: not 16 or 32k */
    ck_assert(!td_cfwd_ok(3, 1, 1, 16, 24)); /* 24 output channels */
    ck_assert_ptr_null(td_cfwd_create(4, 8, 8, 3, 16, 3, 1));
    ck_assert_int_eq(td_cfwd_ok(3, 1, 1, 16, 16), td_bwdw_amx());
}
END_TEST

static Suite *cfwd_suite(void)
{
    Suite *s = suite_create("cfwd");
    TCase *tc = tcase_create("amx");
    tcase_add_test(tc, test_refuses_unsupported);
    if (td_bwdw_amx()) {
        tcase_add_loop_test(tc, test_matches_reference, 0,
                            (int)(sizeof shapes / sizeof shapes[0]));
        tcase_add_test(tc, test_thread_count_independent);
    } else {
        printf("cfwd: this process cannot use AMX: only the refusals run\n");
    }
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(cfwd_suite)
