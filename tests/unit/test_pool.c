/* test_pool.c - the CPU backend's fp32 2x2 stride-2 and 3x3 stride-2
 * pad-1 max pooling on AVX2 (lib/backend/cpu/cpu_pool.c) against a plain
 * loop, in nChw8c and nChw16c: the maxima; the gradient at each window's
 * first maximum in window order and 0 elsewhere (3x3: summed over the
 * overlapping windows an input won), on data drawn from 5 values so that
 * most windows have ties (as after a ReLU); fmnist-cnn's sizes (28x28,
 * 14x14), resnet18's stem (112x112) and small odd-shaped ones; with a
 * batch norm and relu folded into it (cpu_fold.h), bit for bit the
 * pooling of their output written out; the refusals.  Skipped without
 * AVX2 + FMA.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_fold.h"
#include "backend/cpu/cpu_pool.h"
#include "philox.h"
#include "tdtest.h"

typedef struct shape {
    int n, c, h, w, blk;
} shape;

static const shape shapes[] = {
    {3, 32, 28, 28, 8}, {2, 64, 14, 14, 8}, {2, 32, 28, 28, 16},
    {3, 16, 2, 2, 16},  {5, 8, 6, 10, 8},   {1, 48, 4, 2, 16},
};

/* Inputs from 5 values (ties in most windows: key picks the draw), a
 * distinct dy per output, dx all NaN (every element must be written). */
static void fill(float *x, size_t nx, float *dy, size_t ny, float *dx,
                 uint64_t key, uint64_t stream)
{
    for (size_t i = 0; i < nx; i++)
        x[i] = (float)(int)(5 * td_rng_uniform(key, stream, i)) - 2.0f;
    for (size_t i = 0; i < ny; i++)
        dy[i] = (float)(1 + i % 97);
    memset(dx, 0xff, nx * sizeof *dx);
}

START_TEST(test_matches_loop)
{
    const shape *s = &shapes[_i];
    size_t planes = (size_t)s->n * (s->c / s->blk);
    int oh = s->h / 2, ow = s->w / 2;
    size_t nx = planes * s->h * s->w * s->blk, ny = nx / 4;
    float *x = malloc(nx * sizeof *x), *y = malloc(ny * sizeof *y);
    float *dy = malloc(ny * sizeof *dy), *dx = malloc(nx * sizeof *dx);
    uint8_t *m = malloc(td_maxpool_mask_bytes(2, planes, oh, ow, s->blk));
    fill(x, nx, dy, ny, dx, 23, (uint64_t)_i);
    td_maxpool_fwd(2, x, y, m, planes, s->h, s->w, s->blk, NULL);
    td_maxpool_bwd(2, dy, m, dx, planes, s->h, s->w, s->blk);
    for (size_t p = 0; p < planes; p++)
        for (int i = 0; i < oh; i++)
            for (int j = 0; j < ow; j++)
                for (int b = 0; b < s->blk; b++) {
                    size_t xi[4];
                    for (int q = 0; q < 4; q++)
                        xi[q] = ((p * s->h + 2 * i + q / 2) * s->w + 2 * j +
                                 q % 2) * s->blk + b;
                    int win = 0;
                    for (int q = 1; q < 4; q++)
                        if (x[xi[q]] > x[xi[win]])
                            win = q;
                    size_t yi = ((p * oh + i) * ow + j) * s->blk + b;
                    ck_assert_msg(y[yi] == x[xi[win]], "y[%zu] %g, want %g",
                                  yi, y[yi], x[xi[win]]);
                    for (int q = 0; q < 4; q++)
                        ck_assert_msg(dx[xi[q]] == (q == win ? dy[yi] : 0.0f),
                                      "blk %d %dx%d: dx[%zu] %g (window "
                                      "position %d, winner %d, dy %g)",
                                      s->blk, s->h, s->w, xi[q], dx[xi[q]], q,
                                      win, dy[yi]);
                }
    free(x), free(y), free(dy), free(dx), free(m);
}
END_TEST

static const shape shapes3[] = {
    {1, 64, 112, 112, 8}, {2, 16, 7, 5, 8},  {3, 32, 1, 1, 16},
    {2, 16, 2, 3, 16},    {1, 8, 9, 10, 8},  {2, 32, 14, 14, 16},
};

START_TEST(test3_matches_loop)
{
    const shape *s = &shapes3[_i];
    size_t planes = (size_t)s->n * (s->c / s->blk);
    int oh = (s->h - 1) / 2 + 1, ow = (s->w - 1) / 2 + 1;
    size_t nx = planes * s->h * s->w * s->blk;
    size_t ny = planes * oh * ow * s->blk;
    float *x = malloc(nx * sizeof *x), *y = malloc(ny * sizeof *y);
    float *dy = malloc(ny * sizeof *dy), *dx = malloc(nx * sizeof *dx);
    float *want = calloc(nx, sizeof *want);
    uint8_t *m = malloc(td_maxpool_mask_bytes(3, planes, oh, ow, s->blk));
    fill(x, nx, dy, ny, dx, 25, (uint64_t)_i);
    td_maxpool_fwd(3, x, y, m, planes, s->h, s->w, s->blk, NULL);
    td_maxpool_bwd(3, dy, m, dx, planes, s->h, s->w, s->blk);
    for (size_t p = 0; p < planes; p++)
        for (int i = 0; i < oh; i++)
            for (int j = 0; j < ow; j++)
                for (int b = 0; b < s->blk; b++) {
                    size_t win = 0;
                    int found = 0;
                    for (int q = 0; q < 9; q++) {
                        int r = 2 * i - 1 + q / 3, c = 2 * j - 1 + q % 3;
                        if (r < 0 || r >= s->h || c < 0 || c >= s->w)
                            continue;
                        size_t xi = ((p * s->h + r) * s->w + c) * s->blk + b;
                        if (!found || x[xi] > x[win])
                            win = xi;
                        found = 1;
                    }
                    size_t yi = ((p * oh + i) * ow + j) * s->blk + b;
                    ck_assert_msg(y[yi] == x[win], "%dx%d y[%zu] %g, want %g",
                                  s->h, s->w, yi, y[yi], x[win]);
                    want[win] += dy[yi]; /* windows in order, as the kernel */
                }
    for (size_t i = 0; i < nx; i++)
        ck_assert_msg(dx[i] == want[i], "blk %d %dx%d: dx[%zu] %g, want %g",
                      s->blk, s->h, s->w, i, dx[i], want[i]);
    free(x), free(y), free(dy), free(dx), free(want), free(m);
}
END_TEST

START_TEST(test_fold_is_the_written_output)
{
    /* nChw8c, 3 images of 24 channels: the fold's pooling, masks and
     * gradient equal those of relu((x - mean) * a + b) written out (the
     * same operations as cpu_bn8.c's output pass), negative scales and
     * a NaN included */
    enum { N = 3, C = 24, H = 6, W = 10 };
    int k3 = _i; /* 3x3 windows, stride 2, padding 1 */
    size_t planes = N * C / 8, nx = planes * H * W * 8, ny = nx / 4;
    size_t mb = k3 ? td_maxpool_mask_bytes(3, planes, H / 2, W / 2, 8)
                   : td_maxpool_mask_bytes(2, planes, H / 2, W / 2, 8);
    float *x = malloc(nx * sizeof *x), *z = malloc(nx * sizeof *z);
    float *y0 = malloc(ny * sizeof *y0), *y1 = malloc(ny * sizeof *y1);
    uint8_t *m0 = malloc(mb), *m1 = malloc(mb);
    float mean[C], a[C], b[C];
    for (int c = 0; c < C; c++) {
        mean[c] = (float)(td_rng_uniform(24, 1, (uint64_t)c) - 0.5);
        a[c] = (float)(2 * td_rng_uniform(24, 2, (uint64_t)c) - 1);
        b[c] = (float)(td_rng_uniform(24, 3, (uint64_t)c) - 0.5);
    }
    for (size_t i = 0; i < nx; i++)
        x[i] = (float)(2 * td_rng_uniform(24, 4, i) - 1);
    x[17] = __builtin_nanf("");
    for (size_t i = 0; i < nx; i++) {
        size_t c = (i / (H * W * 8)) % (C / 8) * 8 + i % 8;
        float t = __builtin_fmaf(x[i] - mean[c], a[c], b[c]);
        z[i] = t > 0 ? t : 0.0f; /* max(t, 0): NaN to 0 */
    }
    td_fold f = {mean, a, b, C};
    td_maxpool_fwd(k3 ? 3 : 2, z, y0, m0, planes, H, W, 8, NULL);
    td_maxpool_fwd(k3 ? 3 : 2, x, y1, m1, planes, H, W, 8, &f);
    ck_assert_int_eq(memcmp(y0, y1, ny * sizeof *y0), 0);
    ck_assert_int_eq(memcmp(m0, m1, mb), 0);
    free(x), free(z), free(y0), free(y1), free(m0), free(m1);
}
END_TEST

START_TEST(test_refuses_unsupported)
{
    ck_assert(!td_maxpool_ok(3, 2, 0, 28, 28, 8)); /* 3x3, no pad */
    ck_assert(!td_maxpool_ok(2, 1, 0, 28, 28, 8)); /* stride 1 */
    ck_assert(!td_maxpool_ok(2, 2, 1, 28, 28, 8)); /* padding */
    ck_assert(!td_maxpool_ok(2, 2, 0, 7, 8, 8));   /* odd height */
    ck_assert(!td_maxpool_ok(2, 2, 0, 8, 7, 16));  /* odd width */
    ck_assert(!td_maxpool_ok(2, 2, 0, 8, 8, 4));   /* 4-channel blocks */
    ck_assert(!td_maxpool_ok(3, 2, 0, 28, 28, 8)); /* no padding */
    ck_assert(!td_maxpool_ok(3, 1, 1, 28, 28, 8)); /* stride 1 */
    ck_assert(!td_maxpool_ok(2, 2, 1, 28, 28, 8)); /* 2x2 */
    ck_assert(!td_maxpool_ok(3, 2, 1, 28, 28, 4)); /* 4-channel blocks */
    ck_assert_int_eq(td_maxpool_ok(3, 2, 1, 7, 5, 16),
                     __builtin_cpu_supports("avx2") &&
                         __builtin_cpu_supports("fma"));
    ck_assert_int_eq(td_maxpool_ok(2, 2, 0, 28, 28, 8),
                     __builtin_cpu_supports("avx2") &&
                         __builtin_cpu_supports("fma"));
}
END_TEST

static Suite *pool_suite(void)
{
    Suite *s = suite_create("pool");
    TCase *tc = tcase_create("avx2");
    tcase_add_test(tc, test_refuses_unsupported);
    if (td_maxpool_ok(2, 2, 0, 2, 2, 8)) {
        tcase_add_loop_test(tc, test_matches_loop, 0,
                            (int)(sizeof shapes / sizeof shapes[0]));
        tcase_add_loop_test(tc, test3_matches_loop, 0,
                            (int)(sizeof shapes3 / sizeof shapes3[0]));
        tcase_add_loop_test(tc, test_fold_is_the_written_output, 0, 2);
    } else {
        printf("pool: this CPU has no AVX2 + FMA: only the refusals run\n");
    }
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(pool_suite)
