/* test_bn8.c - the CPU backend's fp32 batch norm for AVX2 (lib/backend/
 * cpu/cpu_bn8.c, math in kernels/bn_nhwc.h) against an fp64 reference on
 * random data, in both layouts it reads: oneDNN's blocked nChw8c and
 * channels-last (the data made in NHWC order, laid out for the call and
 * back for the checks).  C in {8, 16, 24, 40, 72} (one to nine 8-channel
 * vectors: every channel group size, a second and a third group; in NHWC
 * 8, 24 and 72), row
 * counts (N*H*W = 3 images) below and above one chunk (in nChw8c chunks
 * of whole images or of part of one larger image), with and without the
 * fused add and relu, the gradient as one tensor or two summands;
 * training forward and backward, the relu's bit mask, inference, NaN,
 * bitwise determinism across thread counts, and the fold's statistics,
 * output and backward (the relu's signs from x) bit for bit those of the
 * batch norm with its relu.  On a CPU without AVX2
 * (where the backend keeps oneDNN's batch norm) only the scalar math
 * runs.
 */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_bn.h"
#include "backend/cpu/cpu_bn8.h"
#include "bn_nhwc.h"
#include "philox.h"
#include "tdtest.h"

#define EPS 1e-5f

typedef struct bn_case {
    size_t rows, hw; /* hw: 0 nhwc, else nChw8c with hw rows per image */
    int C, relu, add, two; /* two: the gradient as dy + dy2 */
    float *x, *s, *y, *dy, *dy2, *dx, *ds;
    uint8_t *mask; /* in the call's layout */
    float *gamma, *beta, *mean, *var, *dgamma, *dbeta, *part;
} bn_case;

static float urand(uint64_t stream, uint64_t i, float lo, float hi)
{
    return lo + (hi - lo) * (float)td_rng_uniform(9, stream, i);
}

/* Per channel c, x ~ offset_c + scale_c * U(-1, 1): offsets up to 4 times
 * the spread test the shifted statistics. */
static void fill(bn_case *b, size_t rows, int C, int v, size_t hw)
{
    size_t n = rows * (size_t)C;
    memset(b, 0, sizeof *b);
    b->rows = rows, b->C = C, b->hw = hw;
    b->relu = v & 1, b->add = (v >> 1) & 1, b->two = (v >> 2) & 1;
    b->x = malloc(n * 4), b->s = malloc(n * 4), b->y = malloc(n * 4);
    b->dy = malloc(n * 4), b->dy2 = malloc(n * 4), b->dx = malloc(n * 4);
    b->ds = malloc(n * 4), b->mask = malloc(td_bn8_mask_bytes(rows, C));
    b->gamma = malloc((size_t)C * 4), b->beta = malloc((size_t)C * 4);
    b->mean = malloc((size_t)C * 4), b->var = malloc((size_t)C * 4);
    b->dgamma = malloc((size_t)C * 4), b->dbeta = malloc((size_t)C * 4);
    b->part = malloc(td_bn_nhwc_part_floats(rows, C, hw) * 4);
    for (int c = 0; c < C; c++) {
        b->gamma[c] = urand(1, (uint64_t)c, 0.5f, 2.0f);
        b->beta[c] = urand(2, (uint64_t)c, -0.5f, 0.5f);
    }
    for (size_t i = 0; i < n; i++) {
        int c = (int)(i % (size_t)C);
        float off = urand(3, (uint64_t)c, -4, 4);
        float sc = urand(4, (uint64_t)c, 0.1f, 3);
        b->x[i] = off + sc * urand(5, i, -1, 1);
        b->s[i] = urand(6, i, -1, 1);
        b->dy[i] = urand(8, i, -1, 1);
        b->dy2[i] = urand(10, i, -1, 1);
    }
}

static void unfill(bn_case *b)
{
    void *p[] = {b->x,     b->s,    b->y,     b->dy,     b->dy2,
                 b->dx,    b->ds,   b->mask,  b->gamma,  b->beta,
                 b->mean,  b->var,  b->dgamma, b->dbeta, b->part};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
        free(p[i]);
}

/* Element (row r, channel c) of a [rows][C] tensor in nChw8c with hw
 * rows per image: [r / hw][c / 8][r % hw][c % 8]. */
static size_t blk_at(size_t r, size_t c, size_t C, size_t hw)
{
    return (r / hw * C + c / 8 * 8) * hw + r % hw * 8 + c % 8;
}

/* Where NHWC element i is in case b's layout. */
static size_t at(const bn_case *b, size_t i)
{
    size_t C = (size_t)b->C;
    return b->hw ? blk_at(i / C, i % C, C, b->hw) : i;
}

/* A copy of the NHWC tensor t in case b's layout. */
static float *laid(const bn_case *b, const float *t)
{
    size_t n = b->rows * (size_t)b->C;
    float *o = malloc(n * 4);
    for (size_t i = 0; i < n; i++)
        o[at(b, i)] = t[i];
    return o;
}

/* t in case b's layout back into NHWC order in out; frees t. */
static void unlaid(const bn_case *b, float *t, float *out)
{
    size_t n = b->rows * (size_t)b->C;
    for (size_t i = 0; i < n; i++)
        out[i] = t[at(b, i)];
    free(t);
}

static void run_fwd(bn_case *b)
{
    size_t n = b->rows * (size_t)b->C;
    float *x = laid(b, b->x), *s = laid(b, b->s), *y = malloc(n * 4);
    td_bn8_fwd(x, b->add ? s : NULL, y, b->mask, b->rows, b->C, b->hw,
               b->gamma, b->beta, EPS, b->relu, b->mean, b->var, b->part);
    unlaid(b, y, b->y);
    free(x);
    free(s);
}

static void run_bwd(bn_case *b)
{
    size_t n = b->rows * (size_t)b->C;
    float *x = laid(b, b->x), *dy = laid(b, b->dy), *dy2 = laid(b, b->dy2);
    float *dx = malloc(n * 4), *ds = malloc(n * 4);
    td_bn8_bwd(x, b->relu ? b->mask : NULL, dy, b->two ? dy2 : NULL, dx,
               b->add ? ds : NULL, b->rows, b->C, b->hw, b->gamma, b->mean,
               b->var, EPS, b->dgamma, b->dbeta, b->part);
    unlaid(b, dx, b->dx);
    unlaid(b, ds, b->ds);
    free(x);
    free(dy);
    free(dy2);
}

/* Channel c's fp64 mean and biased variance of x. */
static void ref_stats(const bn_case *b, int c, double *mean, double *var)
{
    double m = 0, v = 0;
    for (size_t r = 0; r < b->rows; r++)
        m += b->x[r * (size_t)b->C + (size_t)c];
    m /= (double)b->rows;
    for (size_t r = 0; r < b->rows; r++) {
        double d = b->x[r * (size_t)b->C + (size_t)c] - m;
        v += d * d;
    }
    *mean = m;
    *var = v / (double)b->rows;
}

/* Training forward: statistics to 1e-5 relative (fp32 sums of at most
 * 256 terms per chunk, then double), y to a few fp32 roundings of its
 * terms plus the statistics' error carried through gamma * (x - mean) *
 * rstd (5e-5 of |gamma| * (|xhat| + 1)); the mask's bits are y > 0. */
static void check_fwd(bn_case *b)
{
    run_fwd(b);
    for (int c = 0; c < b->C; c++) {
        double m, v;
        ref_stats(b, c, &m, &v);
        ck_assert_msg(fabs(b->mean[c] - m) <= 1e-5 * (fabs(m) + sqrt(v)),
                      "C %d rows %zu: mean[%d] %.9g, want %.9g", b->C,
                      b->rows, c, (double)b->mean[c], m);
        ck_assert_msg(fabs(b->var[c] - v) <= 1e-5 * v, "C %d rows %zu: "
                      "var[%d] %.9g, want %.9g", b->C, b->rows, c,
                      (double)b->var[c], v);
        double rstd = 1 / sqrt(v + EPS);
        for (size_t r = 0; r < b->rows; r++) {
            size_t i = r * (size_t)b->C + (size_t)c;
            double xh = (b->x[i] - m) * rstd;
            double want = b->gamma[c] * xh + b->beta[c] +
                          (b->add ? b->s[i] : 0);
            if (b->relu && want < 0)
                want = 0;
            double tol = 0x1p-21 * (fabs(want) + 2) +
                         5e-5 * fabs(b->gamma[c]) * (fabs(xh) + 1);
            ck_assert_msg(fabs(b->y[i] - want) <= tol, "C %d rows %zu "
                          "relu %d add %d: y[%zu] %.9g, want %.9g", b->C,
                          b->rows, b->relu, b->add, i, (double)b->y[i],
                          want);
            if (b->relu) {
                size_t j = at(b, i);
                int bit = b->mask[j / 8] >> (j % 8) & 1;
                ck_assert_msg(bit == (b->y[i] > 0), "mask bit of y[%zu] "
                              "%.9g is %d", i, (double)b->y[i], bit);
            }
        }
    }
}

/* Backward against fp64 from the kernel's own y (the relu mask is defined
 * by it) and the reference statistics: the shortcut's gradient exactly
 * (dy [+ dy2]) * (y > 0); dgamma, dbeta to 1e-4 of the sum of the terms'
 * magnitudes; dx to 1e-4 of gamma * rstd * max|g| (the mean terms
 * cancel dy's scale). */
static void check_bwd(bn_case *b)
{
    run_fwd(b);
    run_bwd(b);
    size_t C = (size_t)b->C;
    for (size_t c = 0; c < C; c++) {
        double m, v, sg = 0, sgx = 0, ag = 0, agx = 0, gmax = 0;
        ref_stats(b, (int)c, &m, &v);
        double rstd = 1 / sqrt(v + EPS);
        for (size_t r = 0; r < b->rows; r++) {
            size_t i = r * C + c;
            float gf = b->two ? b->dy[i] + b->dy2[i] : b->dy[i];
            double g = b->relu && !(b->y[i] > 0) ? 0 : gf;
            double xh = (b->x[i] - m) * rstd;
            if (b->add)
                ck_assert_msg(b->ds[i] == (float)g, "ds[%zu] %.9g, want "
                              "%.9g", i, (double)b->ds[i], g);
            sg += g, sgx += g * xh, ag += fabs(g), agx += fabs(g * xh);
            gmax = fmax(gmax, fabs(g));
        }
        ck_assert_msg(fabs(b->dbeta[c] - sg) <= 1e-4 * ag + 1e-6, "C %zu "
                      "rows %zu: dbeta[%zu] %.9g, want %.9g", C, b->rows, c,
                      (double)b->dbeta[c], sg);
        ck_assert_msg(fabs(b->dgamma[c] - sgx) <= 1e-4 * agx + 1e-6, "C "
                      "%zu rows %zu: dgamma[%zu] %.9g, want %.9g", C,
                      b->rows, c, (double)b->dgamma[c], sgx);
        double M = (double)b->rows, k = b->gamma[c] * rstd;
        for (size_t r = 0; r < b->rows; r++) {
            size_t i = r * C + c;
            float gf = b->two ? b->dy[i] + b->dy2[i] : b->dy[i];
            double g = b->relu && !(b->y[i] > 0) ? 0 : gf;
            double xh = (b->x[i] - m) * rstd;
            double want = k * (g - sg / M - xh * sgx / M);
            double tol = 0x1p-21 * fabs(want) + 1e-4 * k * gmax;
            ck_assert_msg(fabs(b->dx[i] - want) <= tol, "C %zu rows %zu "
                          "relu %d add %d two %d: dx[%zu] %.9g, want %.9g",
                          C, b->rows, b->relu, b->add, b->two, i,
                          (double)b->dx[i], want);
        }
    }
}

static const int chans[] = {8, 16, 24, 40, 72};
/* N*H*W of 3 images: 3*5*7 (under one chunk; in nChw8c all three
 * images in one), 3*10*10 (two chunks; in nChw8c two images, then one),
 * 3*19*23 (5 chunks and a tail; in nChw8c two per image, 256 rows and
 * 181) */
static const size_t rowss[] = {105, 300, 1311};

/* The test's layout: _i 0 nChw8c with rows / 3 rows per image, 1 NHWC.
 * NHWC differs only in where a chunk's rows are: C 8, 24 and 72 (one
 * vector, three, two groups and one more) cover its group sizes at less
 * cost (the test takes ~2 minutes under ASan). */
static size_t layout_hw(int nhwc, size_t rows) { return nhwc ? 0 : rows / 3; }
static size_t step_c(int nhwc) { return nhwc ? 2 : 1; }

START_TEST(test_forward_vs_fp64)
{
    for (size_t ci = 0; ci < 5; ci += step_c(_i))
        for (size_t ri = 0; ri < 3; ri++)
            for (int v = 0; v < 4; v++) {
                bn_case b;
                fill(&b, rowss[ri], chans[ci], v, layout_hw(_i, rowss[ri]));
                check_fwd(&b);
                unfill(&b);
            }
}
END_TEST

START_TEST(test_backward_vs_fp64)
{
    for (size_t ci = 0; ci < 5; ci += step_c(_i))
        for (size_t ri = 0; ri < 3; ri++)
            for (int v = 0; v < 8; v++) {
                if ((v & 4) && ri < 2) /* two summands: the largest only */
                    continue;
                bn_case b;
                fill(&b, rowss[ri], chans[ci], v, layout_hw(_i, rowss[ri]));
                check_bwd(&b);
                unfill(&b);
            }
}
END_TEST

/* Every output element is exactly kernels/bn_nhwc.h's scalar math on the
 * kernel's own statistics: the vector code is the header's arithmetic,
 * the same FMA. */
START_TEST(test_forward_is_scalar_math)
{
    for (size_t ci = 0; ci < 5; ci += step_c(_i))
        for (int v = 0; v < 4; v++) {
            bn_case b;
            fill(&b, 1311, chans[ci], v, layout_hw(_i, 1311));
            run_fwd(&b);
            for (size_t i = 0; i < b.rows * (size_t)b.C; i++) {
                int c = (int)(i % (size_t)b.C);
                float a = td_bn_nhwc_fwd_coef(b.gamma[c], b.var[c], EPS);
                float want = td_bn_f32_y(b.x[i], b.add ? b.s[i] : 0,
                                         b.mean[c], a, b.beta[c], b.relu,
                                         b.add);
                ck_assert_msg(memcmp(&b.y[i], &want, 4) == 0, "y[%zu] "
                              "%.9g, scalar %.9g", i, (double)b.y[i],
                              (double)want);
            }
            unfill(&b);
        }
}
END_TEST

/* The gradient given as two summands is the one given as their sum, bit
 * for bit (the fp32 addition the unfused plan stores). */
START_TEST(test_two_summands_are_their_sum)
{
    for (int v = 0; v < 4; v++) {
        bn_case a, b;
        fill(&a, 1311, 40, v | 4, layout_hw(_i, 1311));
        fill(&b, 1311, 40, v, layout_hw(_i, 1311));
        size_t n = a.rows * 40;
        for (size_t i = 0; i < n; i++)
            b.dy[i] = a.dy[i] + a.dy2[i];
        run_fwd(&a);
        run_bwd(&a);
        run_fwd(&b);
        run_bwd(&b);
        ck_assert(memcmp(a.dx, b.dx, n * 4) == 0);
        ck_assert(memcmp(a.dgamma, b.dgamma, 40 * 4) == 0);
        ck_assert(memcmp(a.dbeta, b.dbeta, 40 * 4) == 0);
        if (v >> 1)
            ck_assert(memcmp(a.ds, b.ds, n * 4) == 0);
        unfill(&a);
        unfill(&b);
    }
}
END_TEST

/* Inference with running statistics, relu and add, against fp64; a NaN
 * input comes out 0 through the relu (max(NaN, 0) is the 0), as in
 * td_bn_f32_y, and NaN without it. */
START_TEST(test_infer_vs_fp64)
{
    for (size_t ci = 0; ci < 5; ci += step_c(_i))
        for (int relu = 0; relu < 2; relu++) {
            bn_case b;
            fill(&b, 1311, chans[ci], relu | 2, layout_hw(_i, 1311));
            for (int c = 0; c < b.C; c++) {
                b.mean[c] = urand(11, (uint64_t)c, -1, 1);
                b.var[c] = urand(12, (uint64_t)c, 0.5f, 4);
            }
            b.x[7] = NAN;
            size_t n = b.rows * (size_t)b.C;
            float *x = laid(&b, b.x), *s = laid(&b, b.s), *y = malloc(n * 4);
            td_bn8_infer(x, s, y, b.rows, b.C, b.hw, b.gamma, b.beta,
                         b.mean, b.var, EPS, relu, b.part);
            unlaid(&b, y, b.y);
            free(x);
            free(s);
            for (size_t i = 0; i < n; i++) {
                int c = (int)(i % (size_t)b.C);
                double xh = (b.x[i] - b.mean[c]) / sqrt(b.var[c] + EPS);
                double want = b.gamma[c] * xh + b.beta[c] + b.s[i];
                if (i == 7) {
                    ck_assert_msg(relu ? b.y[i] == 0 : isnan(b.y[i]),
                                  "NaN in, relu %d: %g out", relu,
                                  (double)b.y[i]);
                    continue;
                }
                if (relu)
                    want = fmax(0, want);
                double tol = 0x1p-21 * (fabs(want) + 2) +
                             1e-6 * (fabs(xh) + 1);
                ck_assert_msg(fabs(b.y[i] - want) <= tol, "y[%zu] %.9g, "
                              "want %.9g", i, (double)b.y[i], want);
            }
            unfill(&b);
        }
}
END_TEST

/* Two runs, on 1 and on 2 threads, are bitwise equal: fixed chunks,
 * summed in chunk order (exact resumes depend on it).  C 40 (five
 * 8-channel blocks) splits the chunks over 2 threads, C 48 the channels;
 * one thread owns every channel: both splits give the same bits. */
START_TEST(test_deterministic)
{
    for (int v = 0; v < 16; v++) {
        bn_case a, b;
        int C = v & 8 ? 48 : 40;
        fill(&a, 1311, C, v & 7, layout_hw(_i, 1311));
        fill(&b, 1311, C, v & 7, layout_hw(_i, 1311));
        size_t n = a.rows * (size_t)C;
        omp_set_num_threads(2);
        run_fwd(&a);
        run_bwd(&a);
        omp_set_num_threads(1);
        run_fwd(&b);
        run_bwd(&b);
        ck_assert(memcmp(a.mean, b.mean, (size_t)C * 4) == 0);
        ck_assert(memcmp(a.var, b.var, (size_t)C * 4) == 0);
        ck_assert(memcmp(a.y, b.y, n * 4) == 0);
        ck_assert(memcmp(a.dx, b.dx, n * 4) == 0);
        ck_assert(memcmp(a.dgamma, b.dgamma, (size_t)C * 4) == 0);
        ck_assert(memcmp(a.dbeta, b.dbeta, (size_t)C * 4) == 0);
        if (v & 1)
            ck_assert(memcmp(a.mask, b.mask, n / 8) == 0);
        if (v & 2)
            ck_assert(memcmp(a.ds, b.ds, n * 4) == 0);
        omp_set_num_threads(2);
        unfill(&a);
        unfill(&b);
    }
}
END_TEST

/* A fold (cpu_fold.h): td_bn8_stats's mean, var and scale, the output
 * td_bn8_apply writes from them and td_bn8_bwd_fold's gradients (the
 * relu's signs from x) are those of td_bn8_fwd and td_bn8_bwd with the
 * relu and its mask, bit for bit; the gradient as one tensor or two. */
START_TEST(test_fold_is_the_relu)
{
    for (size_t ci = 0; ci < 5; ci += step_c(_i))
        for (int two = 0; two < 2; two++) {
            bn_case b;
            int C = chans[ci];
            fill(&b, 1311, C, 1 | (two << 2), layout_hw(_i, 1311));
            size_t n = b.rows * (size_t)C;
            run_fwd(&b);
            run_bwd(&b);
            float *x = laid(&b, b.x), *dy = laid(&b, b.dy);
            float *dy2 = laid(&b, b.dy2), *y = malloc(n * 4);
            float *dx = malloc(n * 4), *got = malloc(n * 4);
            float *mean = malloc((size_t)C * 4), *var = malloc((size_t)C * 4);
            float *sc = malloc((size_t)C * 4), *dg = malloc((size_t)C * 4);
            float *dbt = malloc((size_t)C * 4);
            td_bn8_stats(x, b.rows, C, b.hw, b.gamma, EPS, mean, var, sc,
                         b.part);
            ck_assert(memcmp(mean, b.mean, (size_t)C * 4) == 0);
            ck_assert(memcmp(var, b.var, (size_t)C * 4) == 0);
            td_bn8_apply(x, y, b.rows, C, b.hw, mean, sc, b.beta);
            unlaid(&b, y, got);
            ck_assert_msg(memcmp(got, b.y, n * 4) == 0, "C %d: the fold's "
                          "output differs", C);
            td_bn8_bwd_fold(x, sc, b.beta, dy, two ? dy2 : NULL, dx, b.rows,
                            C, b.hw, b.gamma, mean, var, EPS, dg, dbt,
                            b.part);
            unlaid(&b, dx, got);
            ck_assert_msg(memcmp(got, b.dx, n * 4) == 0, "C %d: the fold's "
                          "dx differs", C);
            ck_assert(memcmp(dg, b.dgamma, (size_t)C * 4) == 0);
            ck_assert(memcmp(dbt, b.dbeta, (size_t)C * 4) == 0);
            free(x), free(dy), free(dy2), free(got); /* unlaid freed y, dx */
            free(mean), free(var), free(sc), free(dg), free(dbt);
            unfill(&b);
        }
}
END_TEST

/* kernels/bn_nhwc.h's fp32 output: no rounding between the batch norm
 * and the add (the bf16 form's td_bn_nhwc_y rounds there). */
START_TEST(test_scalar_math)
{
    /* 1 + 2^-8 plus 2^-8 stays 1 + 2^-7 in fp32 */
    ck_assert_float_eq(td_bn_f32_y(1.0f + 0x1p-8f, 0x1p-8f, 0.0f, 1.0f,
                                   0.0f, 0, 1), 1.0f + 0x1p-7f);
    ck_assert_float_eq(td_bn_f32_y(3.0f, 0.25f, 1.0f, 1.0f, 0.5f, 1, 1),
                       2.75f);
    ck_assert_float_eq(td_bn_f32_y(-3.0f, 0.25f, 1.0f, 1.0f, 0.5f, 1, 1),
                       0.0f);
    ck_assert_float_eq(td_bn_f32_y(-3.0f, 0.25f, 1.0f, 1.0f, 0.5f, 0, 1),
                       -3.25f);
    ck_assert_float_eq(td_bn_f32_y(NAN, 0, 1.0f, 1.0f, 0.5f, 1, 0), 0.0f);
    ck_assert(isnan(td_bn_f32_y(NAN, 0, 1.0f, 1.0f, 0.5f, 0, 0)));
    ck_assert_uint_eq(td_bn8_mask_bytes(1311, 40), 1311 * 5);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("bn8");
    TCase *tc = tcase_create("bn8");
    tcase_add_test(tc, test_scalar_math);
    if (!td_bn8_ok(8)) /* the backend keeps oneDNN's batch norm */
        printf("no AVX2 here: only the scalar math is tested\n");
    if (td_bn8_ok(8)) { /* the loop tests: _i 0 nChw8c, 1 NHWC */
        tcase_add_loop_test(tc, test_forward_vs_fp64, 0, 2);
        tcase_add_loop_test(tc, test_backward_vs_fp64, 0, 2);
        tcase_add_loop_test(tc, test_forward_is_scalar_math, 0, 2);
        tcase_add_loop_test(tc, test_two_summands_are_their_sum, 0, 2);
        tcase_add_loop_test(tc, test_infer_vs_fp64, 0, 2);
        tcase_add_loop_test(tc, test_deterministic, 0, 2);
        tcase_add_loop_test(tc, test_fold_is_the_relu, 0, 2);
    }
    suite_add_tcase(s, tc);
    return td_test_run(s);
}
