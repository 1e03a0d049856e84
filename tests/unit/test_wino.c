/* test_wino.c - the CPU backend's fp32 Winograd F(mh x mw, 3x3)
 * convolutions (lib/backend/cpu/cpu_wino.c, cpu_wino_tr.c), each shape
 * with 2x2 tiles, 4x4 tiles and the mixed tiles of 4 and 2 the plan takes
 * by default (F(4x4), F(4x2), F(2x4), F(2x2)), against an fp64 direct
 * convolution on
 * random nChw8c data: forward (with and without a bias), backward data
 * (the plan of the swapped channels with the flipped weights) and
 * backward weights with the bias gradient, on resnet20's three stages
 * (16, 32, 64 channels on 32x32, 16x16, 8x8), fmnist-cnn's 28x28 and
 * 14x14, unequal channel counts (16 -> 48, 48 -> 16), odd and tiny image
 * sizes (7x5, 9x11, 1x1, 2x3, 6x10: every class mix) and a batch whose
 * tiles end mid-block; bitwise equal results on 1, 2 and 12 threads; a
 * batch norm and relu folded into the input, bitwise equal to their
 * output written out (forward and weight gradient); non-temporal output
 * stores, the same bits; the outputs' moments against fp64; a
 * forward-only plan; the plan's tiles per side, their products and
 * TD_CPU_WINO_TILE.  The comparisons are skipped where the CPU has no
 * AVX2 + FMA.
 *
 * Error bound: each result is a sum of products; the transforms add a
 * few terms before and after the products (F(2x2): coefficients 0, +-1,
 * +-1/2; F(4x4): up to 8 and 16/15), so the error is a multiple of fp32's
 * 2^-24 times the sum of the terms' magnitudes (m below): held to 2e-6 m
 * for F(2x2) (measured: 1.2-2e-7 m) and 3e-6 m for F(4x4) (measured:
 * 1.25-1.5e-6 m, on the 4x4 image of 16 channels; below 1e-6 m on most
 * shapes).  For the weight gradient m is the largest of the 9 taps' (the
 * transformed sums mix all taps: a tap with few terms at a tiny image's
 * edge gets the others' rounding).  A wrong tap, channel or tile is off
 * by about one term (>= 1e-3 m here).
 */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_fold.h"
#include "backend/cpu/cpu_wino.h"
#include "philox.h"
#include "tdtest.h"

typedef struct shape {
    int n, h, w, ic, oc, bias;
} shape;

static const shape shapes[] = {
    {3, 32, 32, 16, 16, 0}, {4, 16, 16, 32, 32, 1}, {5, 8, 8, 64, 64, 0},
    {2, 28, 28, 32, 32, 1}, {2, 14, 14, 32, 64, 0}, {3, 7, 5, 16, 48, 1},
    {2, 9, 11, 48, 16, 0},  {4, 1, 1, 16, 32, 1},   {3, 2, 3, 32, 16, 0},
    {37, 4, 4, 16, 16, 1},  {2, 6, 10, 16, 32, 1},
    /* large sums (over 1 MiB with tiles of 4): the weight gradient in 2
     * groups; large U (over 4 MiB): blocks shared by the threads, two
     * tile classes, one group (few channels in: a cheap fp64 check) */
    {9, 8, 8, 16, 464, 1},  {2, 7, 5, 176, 176, 1},
};

/* The tiles of loop index i: 2x2, 4x4, mixed (0); the bound per tiles
 * (any tile of 4: F(4)'s). */
static const int tiles_of[3] = {2, 4, 0};
#define TILES(i) tiles_of[(i) % 3]
#define TOL(m) ((m) == 2 ? 2e-6 : 3e-6)
#define NAME(m) ((m) == 2 ? "F(2x2)" : (m) == 4 ? "F(4x4)" : "mixed")

static float *rnd(size_t n, uint64_t stream)
{
    float *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = (float)(2 * td_rng_uniform(17, stream, i) - 1);
    return v;
}

/* Element (n, c, y, x) of an nChw8c tensor of C channels, h x w. */
static size_t at(int C, int h, int w, int n, int c, int y, int x)
{
    return ((((size_t)n * (C / 8) + c / 8) * h + y) * w + x) * 8 + c % 8;
}

/* Direct fp64 forward of x (ic) into o (oc) at one output element, and
 * the sum of the terms' magnitudes in *m. */
static double ref_fwd(const shape *s, const float *x, const float *w,
                      int ic, int oc, int flip, int n, int o, int i, int j,
                      double *m)
{
    double a = 0;
    *m = 0;
    for (int kh = 0; kh < 3; kh++)
        for (int kw = 0; kw < 3; kw++) {
            int yi = i + kh - 1, xj = j + kw - 1;
            if (yi < 0 || yi >= s->h || xj < 0 || xj >= s->w)
                continue;
            for (int c = 0; c < ic; c++) {
                /* flip: w is [ic][oc][3][3] of the forward convolution
                 * whose backward data this is */
                float wv = flip ? w[(((size_t)c * oc + o) * 3 + 2 - kh) * 3 +
                                    2 - kw]
                                : w[(((size_t)o * ic + c) * 3 + kh) * 3 + kw];
                double t = (double)wv * x[at(ic, s->h, s->w, n, c, yi, xj)];
                a += t;
                *m += fabs(t);
            }
        }
    return a;
}

static void check_conv(const shape *s, const float *x, const float *w,
                       const float *bias, const float *y, int ic, int oc,
                       int flip, int tile, const char *what)
{
    for (int n = 0; n < s->n; n++)
        for (int o = 0; o < oc; o++)
            for (int i = 0; i < s->h; i++)
                for (int j = 0; j < s->w; j++) {
                    double m, a = ref_fwd(s, x, w, ic, oc, flip, n, o, i, j,
                                          &m);
                    if (bias) {
                        a += bias[o];
                        m += fabs(bias[o]);
                    }
                    float got = y[at(oc, s->h, s->w, n, o, i, j)];
                    ck_assert_msg(fabs(got - a) <= TOL(tile) * m + 1e-30,
                                  "%s %dx%d %d->%d: [%d][%d][%d][%d] %.9g, "
                                  "want %.9g (m %g)",
                                  what, s->h, s->w, s->ic, s->oc, n, o, i, j,
                                  got, a, m);
                }
}

START_TEST(test_forward_matches_direct)
{
    const shape *s = &shapes[_i / 3];
    int m = TILES(_i);
    size_t nx = (size_t)s->n * s->ic * s->h * s->w;
    size_t ny = (size_t)s->n * s->oc * s->h * s->w;
    float *x = rnd(nx, 1 + (uint64_t)_i), *w = rnd((size_t)s->oc * s->ic * 9,
                                                    40 + (uint64_t)_i);
    float *bias = rnd((size_t)s->oc, 80 + (uint64_t)_i);
    float *y = malloc(ny * sizeof *y);
    td_wino *p = td_wino_create_tile(s->n, s->h, s->w, s->ic, s->oc, 2, m);
    ck_assert_ptr_nonnull(p);
    td_wino_weights(p, w);
    td_wino_fwd(p, x, y, s->bias ? bias : NULL, NULL);
    check_conv(s, x, w, s->bias ? bias : NULL, y, s->ic, s->oc, 0, m,
               NAME(m));
    td_wino_destroy(p);
    free(x), free(w), free(bias), free(y);
}
END_TEST

START_TEST(test_backward_data_matches_direct)
{
    const shape *s = &shapes[_i / 3];
    int m = TILES(_i);
    size_t nx = (size_t)s->n * s->ic * s->h * s->w;
    size_t ny = (size_t)s->n * s->oc * s->h * s->w;
    float *dy = rnd(ny, 100 + (uint64_t)_i);
    float *w = rnd((size_t)s->oc * s->ic * 9, 140 + (uint64_t)_i);
    float *dx = malloc(nx * sizeof *dx);
    /* dx[c] = sum over o, taps of w[o][c][kh][kw] dy[o] at the mirrored
     * position: the forward of dy with w flipped, channels swapped */
    td_wino *p = td_wino_create_tile(s->n, s->h, s->w, s->oc, s->ic, 1, m);
    ck_assert_ptr_nonnull(p);
    td_wino_weights_flip(p, w);
    td_wino_fwd(p, dy, dx, NULL, NULL);
    check_conv(s, dy, w, NULL, dx, s->oc, s->ic, 1, m, NAME(m));
    td_wino_destroy(p);
    free(dy), free(w), free(dx);
}
END_TEST

START_TEST(test_backward_weights_matches_direct)
{
    const shape *s = &shapes[_i / 3];
    int m = TILES(_i);
    size_t nx = (size_t)s->n * s->ic * s->h * s->w;
    size_t ny = (size_t)s->n * s->oc * s->h * s->w;
    size_t nw = (size_t)s->oc * s->ic * 9;
    float *x = rnd(nx, 200 + (uint64_t)_i), *dy = rnd(ny, 240 + (uint64_t)_i);
    float *dw = malloc(nw * sizeof *dw), *db = malloc(s->oc * sizeof *db);
    td_wino *p = td_wino_create_tile(s->n, s->h, s->w, s->ic, s->oc, 2, m);
    ck_assert_ptr_nonnull(p);
    td_wino_bwdw(p, x, dy, dw, s->bias ? db : NULL, NULL);
    for (int o = 0; o < s->oc; o++) {
        for (int c = 0; c < s->ic; c++) {
            /* per tap the sum and its terms' magnitudes; the bound is on
             * the largest of the 9 (a tap with few terms, at a tiny
             * image's edge, still gets the rounding of the transformed
             * sums, which mix all taps) */
            double a[9] = {0}, mag[9] = {0}, big = 0;
            for (int q = 0; q < 9; q++) {
                int kh = q / 3, kw = q % 3;
                for (int n = 0; n < s->n; n++)
                    for (int i = 0; i < s->h; i++)
                        for (int j = 0; j < s->w; j++) {
                            int yi = i + kh - 1, xj = j + kw - 1;
                            if (yi < 0 || yi >= s->h || xj < 0 || xj >= s->w)
                                continue;
                            double t =
                                (double)dy[at(s->oc, s->h, s->w, n, o, i,
                                              j)] *
                                x[at(s->ic, s->h, s->w, n, c, yi, xj)];
                            a[q] += t;
                            mag[q] += fabs(t);
                        }
                big = mag[q] > big ? mag[q] : big;
            }
            for (int q = 0; q < 9; q++) {
                float got = dw[((size_t)o * s->ic + c) * 9 + q];
                ck_assert_msg(fabs(got - a[q]) <= TOL(m) * big + 1e-30,
                              "bwd weights %s %dx%d %d->%d: "
                              "dw[%d][%d][%d][%d] %.9g, want %.9g (m %g)",
                              NAME(m), s->h, s->w, s->ic, s->oc, o, c, q / 3,
                              q % 3, got, a[q], big);
            }
        }
        if (!s->bias)
            continue;
        double a = 0, mag = 0;
        for (int n = 0; n < s->n; n++)
            for (int i = 0; i < s->h; i++)
                for (int j = 0; j < s->w; j++) {
                    double t = dy[at(s->oc, s->h, s->w, n, o, i, j)];
                    a += t;
                    mag += fabs(t);
                }
        ck_assert_msg(fabs(db[o] - a) <= TOL(m) * mag,
                      "db[%d] %.9g, want %.9g", o, db[o], a);
    }
    td_wino_destroy(p);
    free(x), free(dy), free(dw), free(db);
}
END_TEST

START_TEST(test_thread_count_independent)
{
    /* 1, 2 and 12 threads (more than the weight gradient's groups: its
     * other split) give the same bits; also where the forward's blocks are
     * shared by the threads and the weight gradient has 2 groups */
    static const shape ts[2] = {{9, 10, 6, 32, 48, 1},
                                {9, 8, 8, 16, 1824, 1}};
    const shape s = ts[_i / 3];
    int m = TILES(_i);
    size_t nx = (size_t)s.n * s.ic * s.h * s.w;
    size_t ny = (size_t)s.n * s.oc * s.h * s.w, nw = (size_t)s.oc * s.ic * 9;
    float *x = rnd(nx, 300), *w = rnd(nw, 301), *dy = rnd(ny, 302);
    float *bias = rnd((size_t)s.oc, 303);
    static const int nts[3] = {1, 2, 12};
    float *y[3], *dw[3], *db[3];
    td_wino *p = td_wino_create_tile(s.n, s.h, s.w, s.ic, s.oc, 12, m);
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(td_wino_tile(p), m ? m : 4);
    /* 16 x 1824 channels: 36 positions' U over 4 MiB, 16's (F(2x2)) not */
    ck_assert_int_eq(td_wino_shared(p), s.oc == 1824 && m != 2);
    ck_assert_int_eq(td_wino_groups(p), s.oc == 1824 && m != 2 ? 2 : 8);
    td_wino_weights(p, w);
    for (int t = 0; t < 3; t++) {
        y[t] = malloc(ny * sizeof(float));
        dw[t] = malloc(nw * sizeof(float));
        db[t] = malloc((size_t)s.oc * sizeof(float));
        omp_set_num_threads(nts[t]);
        td_wino_fwd(p, x, y[t], bias, NULL);
        td_wino_bwdw(p, x, dy, dw[t], db[t], NULL);
    }
    omp_set_num_threads(2);
    for (int t = 1; t < 3; t++) {
        ck_assert_msg(memcmp(y[0], y[t], ny * sizeof(float)) == 0,
                      "forward on %d threads differs", nts[t]);
        ck_assert_msg(memcmp(dw[0], dw[t], nw * sizeof(float)) == 0,
                      "weight gradient on %d threads differs", nts[t]);
        ck_assert_msg(memcmp(db[0], db[t], (size_t)s.oc * sizeof(float)) ==
                          0,
                      "bias gradient on %d threads differs", nts[t]);
    }
    td_wino_destroy(p);
    for (int t = 0; t < 3; t++)
        free(y[t]), free(dw[t]), free(db[t]);
    free(x), free(w), free(dy), free(bias);
}
END_TEST

START_TEST(test_fold_is_the_written_input)
{
    /* the forward and the weight gradient of x folded (cpu_fold.h) equal
     * those of relu((x - mean) * a + b) written out, bit for bit: the
     * plan's tiles on 14x14 (all four shapes), 7x5 and 2x3 (borders), 2x2
     * tiles on 6x10; negative scales and a NaN included */
    static const shape fs[] = {{3, 14, 14, 32, 16, 1},
                               {2, 7, 5, 16, 32, 0},
                               {4, 2, 3, 16, 16, 1},
                               {2, 6, 10, 16, 16, 0}};
    const shape s = fs[_i];
    int m = _i == 3 ? 2 : 0;
    size_t nx = (size_t)s.n * s.ic * s.h * s.w;
    size_t ny = (size_t)s.n * s.oc * s.h * s.w, nw = (size_t)s.oc * s.ic * 9;
    float *x = rnd(nx, 500), *w = rnd(nw, 501), *dy = rnd(ny, 502);
    float *mean = rnd((size_t)s.ic, 503), *a = rnd((size_t)s.ic, 504);
    float *b = rnd((size_t)s.ic, 505), *z = malloc(nx * sizeof *z);
    float *y[2], *dw[2], *db[2];
    x[5] = __builtin_nanf("");
    for (size_t i = 0; i < nx; i++) {
        int c = (int)(i / ((size_t)s.h * s.w * 8) % (size_t)(s.ic / 8)) * 8 +
                (int)(i % 8);
        float t = __builtin_fmaf(x[i] - mean[c], a[c], b[c]);
        z[i] = t > 0 ? t : 0.0f;
    }
    td_fold f = {mean, a, b, s.ic};
    td_wino *p = td_wino_create_tile(s.n, s.h, s.w, s.ic, s.oc, 2, m);
    ck_assert_ptr_nonnull(p);
    td_wino_weights(p, w);
    for (int k = 0; k < 2; k++) {
        y[k] = malloc(ny * sizeof(float));
        dw[k] = malloc(nw * sizeof(float));
        db[k] = malloc((size_t)s.oc * sizeof(float));
        td_wino_fwd(p, k ? x : z, y[k], s.bias ? b : NULL, k ? &f : NULL);
        td_wino_bwdw(p, k ? x : z, dy, dw[k], db[k], k ? &f : NULL);
    }
    ck_assert_msg(memcmp(y[0], y[1], ny * sizeof(float)) == 0,
                  "%dx%d: the folded forward differs", s.h, s.w);
    ck_assert_msg(memcmp(dw[0], dw[1], nw * sizeof(float)) == 0,
                  "%dx%d: the folded weight gradient differs", s.h, s.w);
    ck_assert_int_eq(memcmp(db[0], db[1], (size_t)s.oc * sizeof(float)), 0);
    td_wino_destroy(p);
    for (int k = 0; k < 2; k++)
        free(y[k]), free(dw[k]), free(db[k]);
    free(x), free(w), free(dy), free(mean), free(a), free(b), free(z);
}
END_TEST

START_TEST(test_ntstore_same_bits)
{
    /* outputs by non-temporal stores (TD_CPU_NTSTORE=1, an aligned y)
     * and by plain ones: the same bits, the mixed tiles' partial lines
     * included (14x14); a y that is not 32-byte aligned takes plain
     * stores */
    const shape s = {3, 14, 14, 16, 32, 1};
    size_t nx = (size_t)s.n * s.ic * s.h * s.w;
    size_t ny = (size_t)s.n * s.oc * s.h * s.w, nw = (size_t)s.oc * s.ic * 9;
    float *x = rnd(nx, 600), *w = rnd(nw, 601), *bias = rnd(32, 602);
    float *y[3];
    for (int k = 0; k < 3; k++) {
        y[k] = aligned_alloc(64, (ny + 16) * sizeof(float));
        setenv("TD_CPU_NTSTORE", k ? "1" : "0", 1);
        td_wino *p = td_wino_create(s.n, s.h, s.w, s.ic, s.oc, 2);
        ck_assert_ptr_nonnull(p);
        td_wino_weights(p, w);
        td_wino_fwd(p, x, y[k] + (k == 2 ? 4 : 0), bias, NULL);
        td_wino_destroy(p);
    }
    unsetenv("TD_CPU_NTSTORE");
    ck_assert_int_eq(memcmp(y[0], y[1], ny * sizeof(float)), 0);
    ck_assert_int_eq(memcmp(y[0], y[2] + 4, ny * sizeof(float)), 0);
    for (int k = 0; k < 3; k++)
        free(y[k]);
    free(x), free(w), free(bias);
}
END_TEST

START_TEST(test_moments)
{
    /* td_wino_moments after a forward: each channel's mean and biased
     * variance of the outputs written, against fp64 over them (the mixed
     * tiles with borders and a bias far from 0: the blocks' shifts keep
     * the variance from cancelling), and the same bits on 1 and 2
     * threads */
    static const shape ms[] = {{5, 14, 14, 16, 32, 1}, {3, 7, 5, 16, 16, 1},
                               {3, 7, 5, 176, 176, 1}}; /* shared */
    const shape s = ms[_i];
    size_t nx = (size_t)s.n * s.ic * s.h * s.w;
    size_t ny = (size_t)s.n * s.oc * s.h * s.w, nw = (size_t)s.oc * s.ic * 9;
    float *x = rnd(nx, 700), *w = rnd(nw, 701), *bias = rnd(176, 702);
    float *y = malloc(ny * sizeof *y), mean[2][176], var[2][176];
    for (int o = 0; o < s.oc; o++)
        bias[o] = 50.0f + 10.0f * bias[o];
    td_wino *p = td_wino_create(s.n, s.h, s.w, s.ic, s.oc, 2);
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(td_wino_want_moments(p), 0);
    td_wino_weights(p, w);
    for (int t = 0; t < 2; t++) {
        omp_set_num_threads(t + 1);
        td_wino_fwd(p, x, y, bias, NULL);
        td_wino_moments(p, mean[t], var[t]);
    }
    omp_set_num_threads(2);
    ck_assert_int_eq(memcmp(mean[0], mean[1], (size_t)s.oc * 4), 0);
    ck_assert_int_eq(memcmp(var[0], var[1], (size_t)s.oc * 4), 0);
    for (int o = 0; o < s.oc; o++) {
        double m = 0, v = 0, cnt = (double)s.n * s.h * s.w;
        for (int n = 0; n < s.n; n++)
            for (int i = 0; i < s.h; i++)
                for (int j = 0; j < s.w; j++)
                    m += y[at(s.oc, s.h, s.w, n, o, i, j)];
        m /= cnt;
        for (int n = 0; n < s.n; n++)
            for (int i = 0; i < s.h; i++)
                for (int j = 0; j < s.w; j++) {
                    double d = y[at(s.oc, s.h, s.w, n, o, i, j)] - m;
                    v += d * d;
                }
        v /= cnt;
        ck_assert_msg(fabs(mean[1][o] - m) <= 1e-6 * (fabs(m) + sqrt(v)),
                      "%dx%d mean[%d] %.9g, want %.9g", s.h, s.w, o,
                      mean[1][o], m);
        ck_assert_msg(fabs(var[1][o] - v) <= 1e-5 * v, "%dx%d var[%d] %.9g, "
                      "want %.9g", s.h, s.w, o, var[1][o], v);
    }
    td_wino_destroy(p);
    free(x), free(w), free(bias), free(y);
}
END_TEST

START_TEST(test_refuses_unsupported)
{
    ck_assert(!td_wino_ok(3, 2, 1, 16, 16)); /* stride 2 */
    ck_assert(!td_wino_ok(3, 1, 0, 16, 16)); /* no padding */
    ck_assert(!td_wino_ok(5, 1, 2, 16, 16)); /* 5x5 */
    ck_assert(!td_wino_ok(1, 1, 0, 16, 16)); /* 1x1 */
    ck_assert(!td_wino_ok(3, 1, 1, 3, 16));  /* a 3-channel stem */
    ck_assert(!td_wino_ok(3, 1, 1, 16, 24)); /* 24 output channels */
    ck_assert_ptr_null(td_wino_create(4, 8, 8, 8, 16, 1));
    ck_assert_ptr_null(td_wino_create(0, 8, 8, 16, 16, 1));
    ck_assert_ptr_null(td_wino_create_tile(4, 8, 8, 16, 16, 1, 3));
    ck_assert_ptr_null(td_wino_create_tile(4, 8, 8, 16, 16, 1, 6));
    ck_assert_int_eq(td_wino_ok(3, 1, 1, 16, 16), td_wino_cpu());
}
END_TEST

START_TEST(test_forward_only_plan)
{
    /* td_wino_create_fwd: the same forward, bit for bit, and no weight
     * gradient (dw untouched) */
    const shape s = {3, 14, 14, 32, 16, 1};
    size_t nx = (size_t)s.n * s.ic * s.h * s.w;
    size_t ny = (size_t)s.n * s.oc * s.h * s.w, nw = (size_t)s.oc * s.ic * 9;
    float *x = rnd(nx, 400), *w = rnd(nw, 401), *bias = rnd(16, 402);
    float *y0 = malloc(ny * sizeof(float)), *y1 = malloc(ny * sizeof(float));
    float *dw = malloc(nw * sizeof(float));
    td_wino *full = td_wino_create(s.n, s.h, s.w, s.ic, s.oc, 2);
    td_wino *fwd = td_wino_create_fwd(s.n, s.h, s.w, s.ic, s.oc, 2);
    ck_assert_ptr_nonnull(full);
    ck_assert_ptr_nonnull(fwd);
    ck_assert_int_eq(td_wino_tile(fwd), td_wino_tile(full));
    td_wino_weights(full, w);
    td_wino_weights(fwd, w);
    td_wino_fwd(full, x, y0, bias, NULL);
    td_wino_fwd(fwd, x, y1, bias, NULL);
    ck_assert_int_eq(memcmp(y0, y1, ny * sizeof(float)), 0);
    for (size_t i = 0; i < nw; i++)
        dw[i] = 7.0f;
    td_wino_bwdw(fwd, x, y0, dw, NULL, NULL);
    for (size_t i = 0; i < nw; i++)
        ck_assert_float_eq(dw[i], 7.0f);
    td_wino_destroy(full);
    td_wino_destroy(fwd);
    free(x), free(w), free(bias), free(y0), free(y1), free(dw);
}
END_TEST

START_TEST(test_big_weights_plan)
{
    /* Where U outgrows the caches (np x ic x oc floats over 4 MiB), the
     * forward's blocks are shared; where a group's sums do (over 1 MiB),
     * the weight gradient takes fewer groups (as many as hold ic oc / (ic
     * + oc) tiles, up to 120, each):
     * resnet18's 7x7 512->512 at batch 16 (64 tiles) holds U, one group's
     * sums and one shared block (not eight groups' 38 MB sums: 341 MB);
     * its 56x56 64->64 (U 590 KB) keeps the per-thread blocks and eight
     * groups; the groups never depend on the thread count. */
    unsetenv("TD_CPU_WINO_TILE");
    if (!td_wino_cpu())
        return;
    static const struct {
        int n, h, w, c, shared, groups;
    } want[] = {
        {16, 7, 7, 512, 1, 1},   {16, 14, 14, 256, 1, 2},
        {16, 28, 28, 128, 0, 8}, {16, 56, 56, 64, 0, 8},
        {128, 8, 8, 64, 0, 8},   {128, 7, 7, 512, 1, 4},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        for (int th = 1; th <= 16; th *= 4) {
            int c = want[i].c;
            td_wino *p = td_wino_create(want[i].n, want[i].h, want[i].w, c,
                                        c, th);
            ck_assert_ptr_nonnull(p);
            ck_assert_int_eq(td_wino_shared(p), want[i].shared);
            ck_assert_int_eq(td_wino_groups(p), want[i].groups);
            td_wino_destroy(p);
        }
    td_wino *p = td_wino_create(16, 7, 7, 512, 512, 2);
    size_t u = 36UL * 512 * 512 * sizeof(float);
    ck_assert_msg(td_wino_bytes(p) >= 2 * u &&
                      td_wino_bytes(p) <= 2 * u + u / 2,
                  "7x7 512->512, batch 16: %zu bytes", td_wino_bytes(p));
    td_wino_destroy(p);
}
END_TEST

START_TEST(test_shared_work)
{
    /* Plans sharing one working buffer (td_wino_share_work) compute the
     * same bits as with their own, run in any order, with the buffer
     * overwritten (all bits set: NaN) between any two calls: nothing in
     * it outlives a call; the moments stay the plan's own. */
    static const shape ts[3] = {{9, 8, 8, 16, 464, 1},
                                {2, 14, 14, 32, 64, 0},
                                {2, 7, 5, 176, 176, 1}};
    td_wino *own[3], *sh[3];
    float *x[3], *w[3], *dy[3], *b[3], *y0[3], *y1[3], *dw0[3], *dw1[3];
    float *db0[3], *db1[3], *mom0[3][2], *mom1[3][2];
    size_t ny[3], nw[3], work = 0;
    for (int i = 0; i < 3; i++) {
        const shape *s = &ts[i];
        size_t nx = (size_t)s->n * s->ic * s->h * s->w;
        ny[i] = (size_t)s->n * s->oc * s->h * s->w;
        nw[i] = (size_t)s->oc * s->ic * 9;
        x[i] = rnd(nx, 700 + (uint64_t)i);
        w[i] = rnd(nw[i], 710 + (uint64_t)i);
        dy[i] = rnd(ny[i], 720 + (uint64_t)i);
        b[i] = s->bias ? rnd((size_t)s->oc, 730 + (uint64_t)i) : NULL;
        /* the second a forward-only plan */
        own[i] = i == 1 ? td_wino_create_fwd(s->n, s->h, s->w, s->ic, s->oc, 2)
                        : td_wino_create(s->n, s->h, s->w, s->ic, s->oc, 2);
        sh[i] = i == 1 ? td_wino_create_fwd(s->n, s->h, s->w, s->ic, s->oc, 2)
                       : td_wino_create(s->n, s->h, s->w, s->ic, s->oc, 2);
        ck_assert_ptr_nonnull(own[i]);
        ck_assert_ptr_nonnull(sh[i]);
        ck_assert_int_eq(td_wino_want_moments(own[i]), 0);
        ck_assert_int_eq(td_wino_want_moments(sh[i]), 0);
        size_t wb = td_wino_work_bytes(sh[i]);
        ck_assert_uint_gt(wb, 0);
        work = wb > work ? wb : work;
        y0[i] = malloc(ny[i] * sizeof(float));
        y1[i] = malloc(ny[i] * sizeof(float));
        dw0[i] = malloc(nw[i] * sizeof(float));
        dw1[i] = malloc(nw[i] * sizeof(float));
        db0[i] = malloc((size_t)s->oc * sizeof(float));
        db1[i] = malloc((size_t)s->oc * sizeof(float));
        for (int k = 0; k < 2; k++) {
            mom0[i][k] = malloc((size_t)s->oc * sizeof(float));
            mom1[i][k] = malloc((size_t)s->oc * sizeof(float));
        }
    }
    work = (work + 63) / 64 * 64;
    unsigned char *buf = aligned_alloc(64, work);
    ck_assert_ptr_nonnull(buf);
    for (int i = 0; i < 3; i++) {
        size_t before = td_wino_bytes(sh[i]);
        td_wino_share_work(sh[i], buf);
        ck_assert_uint_eq(td_wino_bytes(sh[i]),
                          before - td_wino_work_bytes(sh[i]));
        td_wino_weights(own[i], w[i]);
        td_wino_weights(sh[i], w[i]);
    }
    for (int i = 0; i < 3; i++) {
        td_wino_fwd(own[i], x[i], y0[i], b[i], NULL);
        td_wino_moments(own[i], mom0[i][0], mom0[i][1]);
        if (i != 1)
            td_wino_bwdw(own[i], x[i], dy[i], dw0[i], db0[i], NULL);
    }
    /* the shared plans' forwards first, then their moments and weight
     * gradients, in the other order */
    for (int i = 0; i < 3; i++) {
        memset(buf, 0xff, work);
        td_wino_fwd(sh[i], x[i], y1[i], b[i], NULL);
    }
    for (int i = 2; i >= 0; i--) {
        memset(buf, 0xff, work);
        td_wino_moments(sh[i], mom1[i][0], mom1[i][1]);
        if (i != 1)
            td_wino_bwdw(sh[i], x[i], dy[i], dw1[i], db1[i], NULL);
    }
    for (int i = 0; i < 3; i++) {
        int oc = ts[i].oc;
        ck_assert_msg(memcmp(y0[i], y1[i], ny[i] * sizeof(float)) == 0,
                      "shape %d: forward differs", i);
        for (int k = 0; k < 2; k++)
            ck_assert_msg(memcmp(mom0[i][k], mom1[i][k],
                                 (size_t)oc * sizeof(float)) == 0,
                          "shape %d: moments differ", i);
        if (i != 1) {
            ck_assert_msg(memcmp(dw0[i], dw1[i], nw[i] * sizeof(float)) == 0,
                          "shape %d: weight gradient differs", i);
            ck_assert_msg(memcmp(db0[i], db1[i], (size_t)oc * sizeof(float))
                              == 0,
                          "shape %d: bias gradient differs", i);
        }
        td_wino_destroy(own[i]);
        td_wino_destroy(sh[i]);
        free(x[i]), free(w[i]), free(dy[i]), free(b[i]);
        free(y0[i]), free(y1[i]), free(dw0[i]), free(dw1[i]);
        free(db0[i]), free(db1[i]);
        for (int k = 0; k < 2; k++)
            free(mom0[i][k]), free(mom1[i][k]);
    }
    free(buf);
}
END_TEST

/* Products per image and channel pair: 6 per side's tile of 4, 4 per
 * tile of 2, the two sides' sums multiplied. */
static long products(int n4h, int n2h, int n4w, int n2w)
{
    return (6L * n4h + 4L * n2h) * (6L * n4w + 4L * n2w);
}

START_TEST(test_tile_rule)
{
    /* per side as many tiles of 4 as fit, then one of 2 for 1 or 2
     * outputs left, one of 4 for 3: never more products than 2x2 or 4x4
     * tiles alone */
    unsetenv("TD_CPU_WINO_TILE");
    ck_assert_int_eq(td_wino_tile_for(28, 28), 0);
    if (!td_wino_cpu())
        return;
    static const struct {
        int h, w;
        long products;
        const char *tiles;
    } want[] = {
        {14, 14, 484,
         "F(4x4, 3x3) + F(4x2, 3x3) + F(2x4, 3x3) + F(2x2, 3x3)"},
        {28, 28, 49 * 36, "F(4x4, 3x3)"},
        {1, 1, 16, "F(2x2, 3x3)"},
        {2, 3, 24, "F(2x4, 3x3)"},
        {7, 5, 2 * 24 + 2 * 36, "F(4x4, 3x3) + F(4x2, 3x3)"},
        {3, 3, 36, "F(4x4, 3x3)"},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        td_wino *p = td_wino_create(2, want[i].h, want[i].w, 16, 16, 1);
        ck_assert_ptr_nonnull(p);
        ck_assert_int_eq(td_wino_products(p), want[i].products);
        ck_assert_str_eq(td_wino_tiles(p), want[i].tiles);
        td_wino_destroy(p);
    }
    for (int h = 1; h <= 40; h++) {
        td_wino *p = td_wino_create_tile(1, h, h, 16, 16, 1, 0);
        td_wino *p2 = td_wino_create_tile(1, h, h, 16, 16, 1, 2);
        td_wino *p4 = td_wino_create_tile(1, h, h, 16, 16, 1, 4);
        ck_assert_int_eq(td_wino_products(p2),
                         products(0, (h + 1) / 2, 0, (h + 1) / 2));
        ck_assert_int_eq(td_wino_products(p4),
                         products((h + 3) / 4, 0, (h + 3) / 4, 0));
        ck_assert_msg(td_wino_products(p) <= td_wino_products(p2) &&
                          td_wino_products(p) <= td_wino_products(p4),
                      "%dx%d: %ld products, 2x2 tiles %ld, 4x4 %ld", h, h,
                      td_wino_products(p), td_wino_products(p2),
                      td_wino_products(p4));
        td_wino_destroy(p), td_wino_destroy(p2), td_wino_destroy(p4);
    }
    setenv("TD_CPU_WINO_TILE", "2", 1);
    ck_assert_int_eq(td_wino_tile_for(28, 28), 2);
    td_wino *p = td_wino_create(2, 14, 14, 16, 16, 1);
    ck_assert_str_eq(td_wino_tiles(p), "F(2x2, 3x3)");
    td_wino_destroy(p);
    setenv("TD_CPU_WINO_TILE", "4", 1);
    ck_assert_int_eq(td_wino_tile_for(2, 2), 4);
    p = td_wino_create(2, 14, 14, 16, 16, 1);
    ck_assert_int_eq(td_wino_products(p), 576);
    td_wino_destroy(p);
    setenv("TD_CPU_WINO_TILE", "3", 1); /* not a tile: the rule */
    ck_assert_int_eq(td_wino_tile_for(28, 28), 0);
    unsetenv("TD_CPU_WINO_TILE");
}
END_TEST

static Suite *wino_suite(void)
{
    Suite *s = suite_create("wino");
    TCase *tc = tcase_create("avx2");
    int n = (int)(sizeof shapes / sizeof shapes[0]);
    tcase_add_test(tc, test_refuses_unsupported);
    tcase_add_test(tc, test_tile_rule);
    tcase_add_test(tc, test_big_weights_plan);
    if (td_wino_cpu()) {
        /* each shape with each tiles (TILES) */
        tcase_add_loop_test(tc, test_forward_matches_direct, 0, 3 * n);
        tcase_add_loop_test(tc, test_backward_data_matches_direct, 0, 3 * n);
        tcase_add_loop_test(tc, test_backward_weights_matches_direct, 0,
                            3 * n);
        tcase_add_loop_test(tc, test_thread_count_independent, 0, 6);
        tcase_add_loop_test(tc, test_fold_is_the_written_input, 0, 4);
        tcase_add_test(tc, test_ntstore_same_bits);
        tcase_add_loop_test(tc, test_moments, 0, 3);
        tcase_add_test(tc, test_forward_only_plan);
        tcase_add_test(tc, test_shared_work);
    } else {
        printf("wino: this CPU has no AVX2 + FMA: only the refusals run\n");
    }
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(wino_suite)
