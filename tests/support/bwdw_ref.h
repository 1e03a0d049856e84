/* bwdw_ref.h - what test_bwdw and test_bwdw512 check cpu_bwdw.c's
 * backward weights against: the convolution shapes (resnet20's stages and
 * stride-2 layers, odd sizes, 1x1 to 7x7 kernels, paddings 0-3, stems of
 * 3 and 5 channels), random bf16 tensors and the fp64 weight gradient
 * with the sum of its terms' magnitudes (the rounding scale).
 */
#ifndef TD_TEST_BWDW_REF_H
#define TD_TEST_BWDW_REF_H

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_bwdw.h"
#include "bf16.h"
#include "philox.h"
#include "tdtest.h"

typedef struct shape {
    int n, h, w, ic, oc, k, s, p;
} shape;

static const shape shapes[] = {
    {3, 32, 32, 16, 16, 3, 1, 1}, {5, 16, 16, 32, 32, 3, 1, 1},
    {19, 8, 8, 64, 64, 3, 1, 1},  {3, 32, 32, 16, 32, 3, 2, 1},
    {5, 16, 16, 32, 64, 3, 2, 1}, {3, 32, 32, 16, 32, 1, 2, 0},
    {2, 7, 5, 16, 48, 3, 1, 1},   {3, 6, 9, 32, 16, 5, 1, 2},
    {4, 4, 4, 16, 32, 1, 1, 0},   {3, 9, 7, 16, 32, 3, 2, 1},
    {2, 11, 10, 32, 16, 5, 2, 2}, {2, 8, 8, 16, 16, 3, 1, 0},
    {3, 9, 9, 16, 32, 7, 2, 3},   {2, 5, 6, 48, 80, 3, 1, 1},
    {4, 32, 32, 3, 16, 3, 1, 1},  {3, 9, 7, 5, 32, 3, 2, 1},
};
enum { NSHAPES = sizeof shapes / sizeof shapes[0] };

static int oh(const shape *s) { return (s->h + 2 * s->p - s->k) / s->s + 1; }
static int ow(const shape *s) { return (s->w + 2 * s->p - s->k) / s->s + 1; }

static td_bf16 *rnd(size_t n, uint64_t stream)
{
    td_bf16 *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = td_bf16_from_f32(
            (float)(2 * td_rng_uniform(11, stream, i) - 1));
    return v;
}

/* dw in fp64 and the sum of |terms| per weight (the rounding scale),
 * from NHWC x and dy. */
static void reference(const shape *s, const td_bf16 *x, const td_bf16 *dy,
                      double *dw, double *mag)
{
    int OH = oh(s), OW = ow(s);
    for (int o = 0; o < s->oc; o++)
        for (int i = 0; i < s->ic; i++)
            for (int t = 0; t < s->k * s->k; t++) {
                double a = 0, m = 0;
                for (int n = 0; n < s->n; n++)
                    for (int y = 0; y < OH; y++)
                        for (int xx = 0; xx < OW; xx++) {
                            int iy = y * s->s + t / s->k - s->p;
                            int ix = xx * s->s + t % s->k - s->p;
                            if (iy < 0 || iy >= s->h || ix < 0 || ix >= s->w)
                                continue;
                            size_t r = ((size_t)n * OH + y) * OW + xx;
                            size_t q = ((size_t)n * s->h + iy) * s->w + ix;
                            double v =
                                (double)td_bf16_to_f32(dy[r * s->oc + o]) *
                                td_bf16_to_f32(x[q * s->ic + i]);
                            a += v;
                            m += fabs(v);
                        }
                size_t at = ((size_t)o * s->ic + i) * s->k * s->k + t;
                dw[at] = a;
                mag[at] = m;
            }
}

/* db[o] against the fp64 sum of dy (NHWC) over every output position:
 * summed in fp64 and rounded once to fp32, so within 1e-6 of the sum of
 * the magnitudes. */
static void check_bias(const shape *s, const td_bf16 *dy, const float *db)
{
    size_t orows = (size_t)s->n * (size_t)oh(s) * (size_t)ow(s);
    for (int o = 0; o < s->oc; o++) {
        double b = 0, m = 0;
        for (size_t r = 0; r < orows; r++) {
            b += td_bf16_to_f32(dy[r * s->oc + o]);
            m += fabs(td_bf16_to_f32(dy[r * s->oc + o]));
        }
        ck_assert_msg(fabs(db[o] - b) <= 1e-6 * m, "db[%d] %g, want %g", o,
                      db[o], b);
    }
}

/* The groups are summed in group order: with layout ly, one thread or two
 * give the same bits (x and dy are random either way). */
static void check_thread_count_independent(td_bwdw_layout ly)
{
    const shape s = {37, 8, 8, 64, 32, 3, 1, 1};
    size_t rows = (size_t)s.n * s.h * s.w;
    size_t nw = (size_t)s.oc * s.ic * s.k * s.k;
    td_bf16 *x = rnd(rows * s.ic, 7), *dy = rnd(rows * s.oc, 8);
    float *a = malloc(nw * sizeof *a), *b = malloc(nw * sizeof *b);
    omp_set_num_threads(2);
    td_bwdw *p = td_bwdw_create_layout(s.n, s.h, s.w, s.ic, s.oc, s.k, s.s,
                                       s.p, 2, ly);
    ck_assert_ptr_nonnull(p);
    td_bwdw_run(p, x, dy, a, NULL);
    omp_set_num_threads(1);
    td_bwdw_run(p, x, dy, b, NULL);
    ck_assert_int_eq(memcmp(a, b, nw * sizeof *a), 0);
    td_bwdw_destroy(p);
    free(x), free(dy), free(a), free(b);
}

#endif
