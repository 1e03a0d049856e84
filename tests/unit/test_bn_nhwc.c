/* test_bn_nhwc.c - the CPU backend's bf16 batch norm (lib/backend/cpu/
 * cpu_bn.c, math in kernels/bn_nhwc.h) against an fp64 reference on random
 * data, in both layouts it reads: channels-last (NHWC) and oneDNN's
 * blocked nChw16c (the data made in NHWC order, laid out blocked for the
 * call and back for the checks).  C in {16, 32, 48, 64, 80} (one to five
 * 16-channel vectors, so every channel group size and a second group; in
 * nChw16c 16, 48 and 80), row counts (N*H*W = 3 images) below and above
 * one chunk (in nChw16c chunks of whole images, 3, or 2 then 1, or of
 * part of one larger image), with and without the
 * fused add and relu; training forward and backward, inference, the
 * rounding, and bitwise determinism across thread counts.  On a CPU
 * without AVX-512 (where the backend keeps oneDNN's batch norm) only the
 * scalar math runs.
 */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_bn.h"
#include "bf16.h"
#include "bn_nhwc.h"
#include "philox.h"
#include "tdtest.h"

#define EPS 1e-5f

typedef struct bn_case {
    size_t rows, hw; /* hw: 0 nhwc, else nChw16c with hw rows per image */
    int C, relu, add;
    td_bf16 *x, *s, *y, *dy, *dx, *ds;
    float *gamma, *beta, *mean, *var, *dgamma, *dbeta, *part;
} bn_case;

static float urand(uint64_t stream, uint64_t i, float lo, float hi)
{
    return lo + (hi - lo) * (float)td_rng_uniform(7, stream, i);
}

/* Per channel c, x ~ offset_c + scale_c * U(-1, 1): offsets up to 4 times
 * the spread test the shifted statistics. */
static void fill(bn_case *b, size_t rows, int C, int relu, int add,
                 size_t hw)
{
    size_t n = rows * (size_t)C;
    memset(b, 0, sizeof *b);
    b->rows = rows, b->C = C, b->relu = relu, b->add = add, b->hw = hw;
    b->x = malloc(n * 2), b->s = malloc(n * 2), b->y = malloc(n * 2);
    b->dy = malloc(n * 2), b->dx = malloc(n * 2), b->ds = malloc(n * 2);
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
        b->x[i] = td_bf16_from_f32(off + sc * urand(5, i, -1, 1));
        b->s[i] = td_bf16_from_f32(urand(6, i, -1, 1));
        b->dy[i] = td_bf16_from_f32(urand(8, i, -1, 1));
    }
}

static void unfill(bn_case *b)
{
    void *p[] = {b->x, b->s, b->y, b->dy, b->dx, b->ds, b->gamma, b->beta,
                 b->mean, b->var, b->dgamma, b->dbeta, b->part};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
        free(p[i]);
}

static double f(td_bf16 v) { return td_bf16_to_f32(v); }

/* Element (row r, channel c) of a [rows][C] tensor in nChw16c with hw
 * rows per image: [r / hw][c / 16][r % hw][c % 16]. */
static size_t blk_at(size_t r, size_t c, size_t C, size_t hw)
{
    return (r / hw * C + c / 16 * 16) * hw + r % hw * 16 + c % 16;
}

/* A copy of the NHWC tensor t in case b's layout (t itself in NHWC). */
static td_bf16 *laid(const bn_case *b, const td_bf16 *t)
{
    size_t C = (size_t)b->C, n = b->rows * C;
    td_bf16 *o = malloc(n * 2);
    for (size_t i = 0; i < n; i++)
        o[b->hw ? blk_at(i / C, i % C, C, b->hw) : i] = t[i];
    return o;
}

/* t in case b's layout back into NHWC order in out; frees t. */
static void unlaid(const bn_case *b, td_bf16 *t, td_bf16 *out)
{
    size_t C = (size_t)b->C, n = b->rows * C;
    for (size_t i = 0; i < n; i++)
        out[i] = t[b->hw ? blk_at(i / C, i % C, C, b->hw) : i];
    free(t);
}

static void run_fwd(bn_case *b)
{
    size_t n = b->rows * (size_t)b->C;
    td_bf16 *x = laid(b, b->x), *s = laid(b, b->s), *y = malloc(n * 2);
    td_bn_nhwc_fwd(x, b->add ? s : NULL, y, b->rows, b->C, b->hw, b->gamma,
                   b->beta, EPS, b->relu, b->mean, b->var, b->part);
    unlaid(b, y, b->y);
    free(x);
    free(s);
}

static void run_infer(bn_case *b)
{
    size_t n = b->rows * (size_t)b->C;
    td_bf16 *x = laid(b, b->x), *s = laid(b, b->s), *y = malloc(n * 2);
    td_bn_nhwc_infer(x, b->add ? s : NULL, y, b->rows, b->C, b->hw,
                     b->gamma, b->beta, b->mean, b->var, EPS, b->relu,
                     b->part);
    unlaid(b, y, b->y);
    free(x);
    free(s);
}

static void run_bwd(bn_case *b)
{
    size_t n = b->rows * (size_t)b->C;
    td_bf16 *x = laid(b, b->x), *y = laid(b, b->y), *dy = laid(b, b->dy);
    td_bf16 *dx = malloc(n * 2), *ds = malloc(n * 2);
    td_bn_nhwc_bwd(x, y, dy, dx, b->add ? ds : NULL, b->rows, b->C, b->hw,
                   b->gamma, b->mean, b->var, EPS, b->relu, b->dgamma,
                   b->dbeta, b->part);
    unlaid(b, dx, b->dx);
    unlaid(b, ds, b->ds);
    free(x);
    free(y);
    free(dy);
}

/* Channel c's fp64 mean and biased variance of the bf16 x. */
static void ref_stats(const bn_case *b, int c, double *mean, double *var)
{
    double m = 0, v = 0;
    for (size_t r = 0; r < b->rows; r++)
        m += f(b->x[r * (size_t)b->C + (size_t)c]);
    m /= (double)b->rows;
    for (size_t r = 0; r < b->rows; r++) {
        double d = f(b->x[r * (size_t)b->C + (size_t)c]) - m;
        v += d * d;
    }
    *mean = m;
    *var = v / (double)b->rows;
}

/* Training forward: the batch norm's value rounded to bf16 before a
 * fused add (as the unfused layers store it), statistics to 1e-5
 * relative (fp32 sums of at most 256 terms per chunk, then double: about
 * 256 * 2^-24 = 1.5e-5 of the summed magnitudes at worst, far less in
 * practice), y within one bf16 rounding (2^-8 of the value) plus the
 * statistics' error carried through gamma * (x - mean) * rstd (5e-5 of
 * |gamma| * (|xhat| + 1)). */
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
            double xh = (f(b->x[i]) - m) * rstd;
            double bn = b->gamma[c] * xh + b->beta[c];
            double want = b->add ? td_bf16_round((float)bn) + f(b->s[i]) : bn;
            if (b->relu && want < 0)
                want = 0;
            /* with an add, the inner rounding may go the other way than
             * fp64's (the fp32 and fp64 values on either side of a
             * rounding boundary): one bf16 unit more, 2^-7 of |bn| */
            double tol = 0x1p-8 * fabs(want) +
                         (b->add ? 0x1p-7 * fabs(bn) : 0) +
                         5e-5 * fabs(b->gamma[c]) * (fabs(xh) + 1);
            ck_assert_msg(fabs(f(b->y[i]) - want) <= tol, "C %d rows %zu "
                          "relu %d add %d: y[%zu] %.7g, want %.7g", b->C,
                          b->rows, b->relu, b->add, i, f(b->y[i]), want);
        }
    }
}

/* Backward against fp64 from the kernel's own saved y (the relu mask is
 * defined by it) and the reference statistics: the shortcut's gradient
 * exactly dy * (y > 0); dgamma, dbeta to 1e-4 of the sum of the terms'
 * magnitudes (fp32 chunk sums as in the forward, and dgamma's
 * (x - mean) carries the mean's error); dx within one bf16 rounding plus
 * 1e-4 of gamma * rstd * max|g| (the mean terms cancel dy's scale). */
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
            double g = b->relu && !(f(b->y[i]) > 0) ? 0 : f(b->dy[i]);
            double xh = (f(b->x[i]) - m) * rstd;
            if (b->add)
                ck_assert_msg(f(b->ds[i]) == g, "ds[%zu] %.7g, want %.7g",
                              i, f(b->ds[i]), g);
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
            double g = b->relu && !(f(b->y[i]) > 0) ? 0 : f(b->dy[i]);
            double xh = (f(b->x[i]) - m) * rstd;
            double want = k * (g - sg / M - xh * sgx / M);
            double tol = 0x1p-8 * fabs(want) + 1e-4 * k * gmax;
            ck_assert_msg(fabs(f(b->dx[i]) - want) <= tol, "C %zu rows %zu "
                          "relu %d add %d: dx[%zu] %.7g, want %.7g", C,
                          b->rows, b->relu, b->add, i, f(b->dx[i]), want);
        }
    }
}

static const int chans[] = {16, 32, 48, 64, 80};
/* N*H*W of 3 images: 3*5*7 (under one chunk; in nChw16c all three
 * images in one), 3*10*10 (two chunks; in nChw16c two images, then one),
 * 3*19*23 (5 chunks and a tail; in nChw16c two per image, 256 rows and
 * 181) */
static const size_t rowss[] = {105, 300, 1311};

/* The test's layout: _i 0 NHWC, 1 nChw16c with rows / 3 rows per image.
 * nChw16c differs only in where a chunk's rows and channel groups are:
 * C 16, 48 and 80 (one vector, three, a full group and one more) cover
 * its group sizes at less cost (34 s under ASan for NHWC alone). */
static size_t layout_hw(int blk, size_t rows) { return blk ? rows / 3 : 0; }
static size_t step_c(int blk) { return blk ? 2 : 1; }

START_TEST(test_forward_vs_fp64)
{
    for (size_t ci = 0; ci < 5; ci += step_c(_i))
        for (size_t ri = 0; ri < 3; ri++)
            for (int v = 0; v < 4; v++) {
                bn_case b;
                fill(&b, rowss[ri], chans[ci], v & 1, v >> 1,
                     layout_hw(_i, rowss[ri]));
                check_fwd(&b);
                unfill(&b);
            }
}
END_TEST

START_TEST(test_backward_vs_fp64)
{
    for (size_t ci = 0; ci < 5; ci += step_c(_i))
        for (size_t ri = 0; ri < 3; ri++)
            for (int v = 0; v < 4; v++) {
                bn_case b;
                fill(&b, rowss[ri], chans[ci], v & 1, v >> 1,
                     layout_hw(_i, rowss[ri]));
                check_bwd(&b);
                unfill(&b);
            }
}
END_TEST

/* Every output element is exactly kernels/bn_nhwc.h's scalar math on the
 * kernel's own statistics, rounded by td_bf16_from_f32: the vector code
 * is the header's arithmetic, the same FMA, the same rounding. */
START_TEST(test_forward_is_scalar_math)
{
    for (size_t ci = 0; ci < 5; ci += step_c(_i))
        for (int v = 0; v < 4; v++) {
            bn_case b;
            fill(&b, 1311, chans[ci], v & 1, v >> 1, layout_hw(_i, 1311));
            run_fwd(&b);
            for (size_t i = 0; i < b.rows * (size_t)b.C; i++) {
                int c = (int)(i % (size_t)b.C);
                float a = td_bn_nhwc_fwd_coef(b.gamma[c], b.var[c], EPS);
                float want = td_bn_nhwc_y(td_bf16_to_f32(b.x[i]),
                                          b.add ? td_bf16_to_f32(b.s[i]) : 0,
                                          b.mean[c], a, b.beta[c], b.relu,
                                          b.add);
                ck_assert_msg(b.y[i] == td_bf16_from_f32(want), "y[%zu] "
                              "0x%04x, scalar 0x%04x", i, b.y[i],
                              td_bf16_from_f32(want));
            }
            unfill(&b);
        }
}
END_TEST

/* Inference with given statistics; with mean 0, var 1, eps 0, gamma 1,
 * beta 0 the output is bf16(x + s) (x is already bf16: its inner
 * rounding is exact): the kernel's rounding is bit for bit
 * td_bf16_from_f32 on ties, subnormals, infinities and NaN. */
START_TEST(test_infer_rounding)
{
    enum { C = 16, R = 64 };
    static const uint32_t special[] = {
        0x3f808000u, /* 1 + 2^-8: tie, to even (down) */
        0x3f818000u, /* 1 + 3 * 2^-8: tie, to even (up) */
        0x00018000u, /* subnormal tie */
        0x00008001u, /* subnormal, rounds up (AVX512_BF16 would flush) */
        0x7f7fffffu, /* largest float: rounds to infinity */
        0x7f800000u, /* inf */
        0xff800000u, /* -inf */
        0x7fc00001u, /* quiet NaN with payload */
        0x80000000u, /* -0 */
    };
    td_bf16 x[C * R], s[C * R], y[C * R];
    float one[C], zero[C], part[2 * C + 4 * C];
    for (int c = 0; c < C; c++)
        one[c] = 1, zero[c] = 0;
    for (int i = 0; i < C * R; i++) {
        size_t k = (size_t)i % (2 * sizeof special / sizeof special[0]);
        if (k < sizeof special / sizeof special[0]) {
            /* x the top half of the special value, s the rest */
            float v, hi;
            memcpy(&v, &special[k], sizeof v);
            x[i] = (td_bf16)(special[k] >> 16);
            hi = td_bf16_to_f32(x[i]);
            s[i] = isfinite(v) ? td_bf16_from_f32(v - hi) : 0;
            continue;
        }
        /* random values and a small random addend: most sums round */
        float xv = urand(12, (uint64_t)i, -4, 4);
        x[i] = td_bf16_from_f32(xv);
        s[i] = td_bf16_from_f32(xv * urand(13, (uint64_t)i, -0x1p-6f,
                                           0x1p-6f));
    }
    ck_assert_uint_le(td_bn_nhwc_part_floats(R, C, 0), sizeof part / 4);
    td_bn_nhwc_infer(x, s, y, R, C, 0, one, zero, zero, one, 0.0f, 0, part);
    for (int i = 0; i < C * R; i++) {
        float v = td_bf16_to_f32(x[i]) + td_bf16_to_f32(s[i]);
        td_bf16 want = td_bf16_from_f32(v);
        ck_assert_msg(y[i] == want, "y[%d] 0x%04x, td_bf16_from_f32 0x%04x "
                      "(x 0x%04x, s 0x%04x)", i, y[i], want, x[i], s[i]);
    }
}
END_TEST

/* Inference against fp64 with running statistics, relu and add. */
START_TEST(test_infer_vs_fp64)
{
    for (size_t ci = 0; ci < 5; ci += step_c(_i)) {
        bn_case b;
        fill(&b, 1311, chans[ci], 1, 1, layout_hw(_i, 1311));
        for (int c = 0; c < b.C; c++) {
            b.mean[c] = urand(10, (uint64_t)c, -1, 1);
            b.var[c] = urand(11, (uint64_t)c, 0.5f, 4);
        }
        run_infer(&b);
        for (size_t i = 0; i < b.rows * (size_t)b.C; i++) {
            int c = (int)(i % (size_t)b.C);
            double xh = (f(b.x[i]) - b.mean[c]) / sqrt(b.var[c] + EPS);
            double v = b.gamma[c] * xh + b.beta[c];
            double want = fmax(0, td_bf16_round((float)v) + f(b.s[i]));
            /* the sum's rounding (2^-8), v's rounding on the other side
             * of a boundary than fp64's (2^-7); fp32 coefficients: a few
             * 2^-24 */
            double tol = 0x1p-8 * want + 0x1p-7 * fabs(v) +
                         1e-6 * (fabs(xh) + 1);
            ck_assert_msg(fabs(f(b.y[i]) - want) <= tol, "y[%zu] %.7g, "
                          "want %.7g", i, f(b.y[i]), want);
        }
        unfill(&b);
    }
}
END_TEST

/* Two runs, on 1 and on 2 threads, are bitwise equal: fixed chunks,
 * summed in chunk order (exact resumes depend on it). */
START_TEST(test_deterministic)
{
    for (int v = 0; v < 4; v++) {
        bn_case a, b;
        fill(&a, 1311, 48, v & 1, v >> 1, layout_hw(_i, 1311));
        fill(&b, 1311, 48, v & 1, v >> 1, layout_hw(_i, 1311));
        size_t n = a.rows * 48;
        omp_set_num_threads(2);
        run_fwd(&a);
        run_bwd(&a);
        omp_set_num_threads(1);
        run_fwd(&b);
        run_bwd(&b);
        ck_assert(memcmp(a.mean, b.mean, 48 * 4) == 0);
        ck_assert(memcmp(a.var, b.var, 48 * 4) == 0);
        ck_assert(memcmp(a.y, b.y, n * 2) == 0);
        ck_assert(memcmp(a.dx, b.dx, n * 2) == 0);
        ck_assert(memcmp(a.dgamma, b.dgamma, 48 * 4) == 0);
        ck_assert(memcmp(a.dbeta, b.dbeta, 48 * 4) == 0);
        if (v >> 1)
            ck_assert(memcmp(a.ds, b.ds, n * 2) == 0);
        omp_set_num_threads(2);
        run_fwd(&b); /* and again on the same thread count */
        ck_assert(memcmp(a.y, b.y, n * 2) == 0);
        unfill(&a);
        unfill(&b);
    }
}
END_TEST

/* The residual gradient sum: bit for bit kernels/bf16.h's td_bf16_add_n,
 * ties, subnormals, infinities, NaN and a tail shorter than 16. */
START_TEST(test_add_n)
{
    enum { n = 1000 + 7 };
    static const td_bf16 special[] = {0x3f80, 0x3b80, 0x0001, 0x8001,
                                      0x7f80, 0xff80, 0x7fc1, 0x7f7f};
    td_bf16 d[n], d2[n], a[n];
    for (size_t i = 0; i < n; i++) {
        d[i] = td_bf16_from_f32(urand(14, i, -4, 4));
        a[i] = td_bf16_from_f32(td_bf16_to_f32(d[i]) *
                                urand(15, i, -0x1p-5f, 0x1p-5f));
        if (i % 5 == 0)
            a[i] = special[(i / 5) % 8];
        if (i % 35 == 0)
            d[i] = special[(i / 35) % 8];
    }
    memcpy(d2, d, sizeof d);
    td_bf16_add_n(d, a, n);
    td_bf16_add_n_fast(d2, a, n);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(d[i] == d2[i], "[%zu] 0x%04x, td_bf16_add_n 0x%04x",
                      i, d2[i], d[i]);
}
END_TEST

/* kernels/bn_nhwc.h's per-channel and per-element math against fp64. */
START_TEST(test_scalar_math)
{
    float mean, var, a, dg, db, k, d;
    /* values 1000 +- 1: the shifted sums keep the variance */
    double s1 = 0, s2 = 0;
    for (int i = 0; i < 1000; i++) {
        double dv = (i % 2 ? 1.0 : -1.0) + 0.5;
        s1 += dv;
        s2 += dv * dv;
    }
    td_bn_nhwc_stats(s1, s2, 1000, 999.5f, &mean, &var);
    ck_assert_float_eq_tol(mean, 1000.0f, 1e-4f);
    ck_assert_float_eq_tol(var, 1.0f, 1e-6f);
    a = td_bn_nhwc_fwd_coef(2.0f, 3.0f, 1.0f);
    ck_assert_float_eq(a, 1.0f); /* 2 / sqrt(4) */
    /* mean 1, beta 0.5: (3 - 1) * 1 + 0.5 + 0.25 */
    ck_assert_float_eq(td_bn_nhwc_y(3.0f, 0.25f, 1.0f, a, 0.5f, 1, 1),
                       2.75f);
    ck_assert_float_eq(td_bn_nhwc_y(-3.0f, 0.25f, 1.0f, a, 0.5f, 1, 1),
                       0.0f);
    ck_assert_float_eq(td_bn_nhwc_y(-3.0f, 0.25f, 1.0f, a, 0.5f, 0, 1),
                       -3.25f);
    ck_assert_float_eq(td_bn_nhwc_y(NAN, 0, 1.0f, a, 0.5f, 1, 0), 0.0f);
    /* the add rounds the batch norm's value first: 1 + 2^-8 is a tie, to
     * 1, then plus 2^-8: 1 + 2^-8 (without that rounding: 1 + 2^-7) */
    ck_assert_float_eq(td_bn_nhwc_y(1.0f + 0x1p-8f, 0x1p-8f, 0.0f, 1.0f,
                                    0.0f, 0, 1), 1.0f + 0x1p-8f);
    /* far from 0, close to the mean: x - mean is exact, one rounding */
    ck_assert_float_eq(td_bn_nhwc_y(1000.0625f, 0, 1000.0f, 1.0f + 0x1p-20f,
                                    0.0f, 0, 0), 0.0625f * (1.0f + 0x1p-20f));
    ck_assert_float_eq(td_bn_nhwc_g(0.5f, 0.0f, 1), 0.0f);
    ck_assert_float_eq(td_bn_nhwc_g(0.5f, 0.0f, 0), 0.5f);
    ck_assert_float_eq(td_bn_nhwc_g(0.5f, 1e-30f, 1), 0.5f);
    /* 4 rows, mean 1, var 3 (rstd 1/2 with eps 1), gamma 2: a = 1,
     * sums sg = 2, sgx = 6: dgamma 3, dbeta 2, k = 1 * 0.5 * 3 / 4,
     * d = 1 * k - 1 * 2 / 4 */
    td_bn_nhwc_bwd_coef(2.0f, 6.0f, 4.0f, 2.0f, 3.0f, 1.0f, &dg, &db, &a,
                        &k, &d);
    ck_assert_float_eq(dg, 3.0f);
    ck_assert_float_eq(db, 2.0f);
    ck_assert_float_eq(a, 1.0f);
    ck_assert_float_eq(k, 0.375f);
    ck_assert_float_eq(d, -0.5f);
    /* dx = a*(g - dbeta/M) - (x - mean) * k at g 1, x 3 */
    ck_assert_float_eq(td_bn_nhwc_dx(1.0f, 3.0f, 1.0f, a, k, d),
                       1.0f * (1.0f - 0.5f) - 2.0f * 0.375f);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("bn_nhwc");
    TCase *tc = tcase_create("bn_nhwc");
    tcase_add_test(tc, test_scalar_math);
    if (!td_bn_nhwc_ok(16)) /* the backend keeps oneDNN's batch norm */
        printf("no AVX-512 here: only the scalar math is tested\n");
    if (td_bn_nhwc_ok(16)) { /* the loop tests: _i 0 NHWC, 1 nChw16c */
        tcase_add_loop_test(tc, test_forward_vs_fp64, 0, 2);
        tcase_add_loop_test(tc, test_backward_vs_fp64, 0, 2);
        tcase_add_loop_test(tc, test_forward_is_scalar_math, 0, 2);
        tcase_add_test(tc, test_infer_rounding);
        tcase_add_loop_test(tc, test_infer_vs_fp64, 0, 2);
        tcase_add_loop_test(tc, test_deterministic, 0, 2);
        tcase_add_test(tc, test_add_n);
    }
    suite_add_tcase(s, tc);
    return td_test_run(s);
}
