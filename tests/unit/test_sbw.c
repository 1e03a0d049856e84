/* test_sbw.c - the CPU backend's fp32 stem backward weights (lib/backend/
 * cpu/cpu_sbw.c: a planar input against an nChw8c output gradient)
 * against an fp64 loop on random data: Fashion-MNIST's first layer (1 ->
 * 32, 28x28), resnet's stem (3 -> 16, 32x32), stride 2 with odd sizes, 2x2
 * and 1x1 kernels, padding 0 to k - 1, batches below and above the eight
 * image groups; the bias gradient; bitwise equal results on 1 and 2
 * threads.  On a CPU without AVX2 (where the backend does not plan it)
 * only td_sbw_ok's refusal is tested.
 */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_sbw.h"
#include "philox.h"
#include "tdtest.h"

typedef struct shape {
    int n, ic, h, w, oc, k, s, pad;
} shape;

static const shape shapes[] = {
    {128, 1, 28, 28, 32, 3, 1, 1}, /* fmnist-cnn conv1 */
    {16, 3, 32, 32, 16, 3, 1, 1},  /* resnet stem (batch 16) */
    {5, 3, 17, 13, 16, 3, 2, 1},   /* stride 2, odd sizes, 5 images */
    {9, 2, 11, 12, 8, 3, 1, 0},    /* no padding */
    {3, 1, 9, 10, 24, 3, 2, 2},    /* pad k - 1, three blocks */
    {10, 4, 8, 8, 8, 2, 2, 0},     /* 2x2 */
    {7, 3, 6, 5, 16, 2, 1, 1},     /* 2x2 padded */
    {12, 3, 7, 9, 8, 1, 1, 0},     /* 1x1 */
};

static int out_size(int in, int k, int s, int p) { return (in + 2 * p - k) / s + 1; }

static float urand(uint64_t stream, uint64_t i)
{
    return (float)td_rng_uniform(21, stream, i) * 2 - 1;
}

/* dw, db of shape t in fp64, and per weight the sum of its terms'
 * magnitudes (the scale of its rounding error). */
static void reference(const shape *t, const float *x, const float *dy,
                      int oh, int ow, double *dw, double *mag, double *db,
                      double *dbmag)
{
    int kk = t->k * t->k;
    size_t nw = (size_t)t->oc * t->ic * kk;
    memset(dw, 0, nw * sizeof *dw);
    memset(mag, 0, nw * sizeof *mag);
    memset(db, 0, (size_t)t->oc * sizeof *db);
    memset(dbmag, 0, (size_t)t->oc * sizeof *dbmag);
    for (int n = 0; n < t->n; n++)
        for (int o = 0; o < t->oc; o++)
            for (int oy = 0; oy < oh; oy++)
                for (int ox = 0; ox < ow; ox++) {
                    double g = dy[((((size_t)n * (t->oc / 8) + o / 8) * oh +
                                    oy) * ow + ox) * 8 + o % 8];
                    db[o] += g;
                    dbmag[o] += fabs(g);
                    for (int c = 0; c < t->ic; c++)
                        for (int i = 0; i < t->k; i++)
                            for (int j = 0; j < t->k; j++) {
                                int iy = oy * t->s - t->pad + i;
                                int ix = ox * t->s - t->pad + j;
                                if (iy < 0 || iy >= t->h || ix < 0 ||
                                    ix >= t->w)
                                    continue;
                                double v = x[(((size_t)n * t->ic + c) *
                                              t->h + iy) * t->w + ix];
                                size_t wi = (((size_t)o * t->ic + c) * t->k +
                                             i) * t->k + j;
                                dw[wi] += v * g;
                                mag[wi] += fabs(v * g);
                            }
                }
}

START_TEST(test_vs_fp64)
{
    const shape *t = &shapes[_i];
    int oh = out_size(t->h, t->k, t->s, t->pad);
    int ow = out_size(t->w, t->k, t->s, t->pad);
    size_t nx = (size_t)t->n * t->ic * t->h * t->w;
    size_t nd = (size_t)t->n * t->oc * oh * ow;
    size_t nw = (size_t)t->oc * t->ic * t->k * t->k;
    float *x = malloc(nx * 4), *dy = malloc(nd * 4);
    float *dw = malloc(nw * 4), *dw1 = malloc(nw * 4);
    float *db = malloc((size_t)t->oc * 4), *db1 = malloc((size_t)t->oc * 4);
    double *rw = malloc(nw * 8), *mag = malloc(nw * 8);
    double *rb = malloc((size_t)t->oc * 8), *bmag = malloc((size_t)t->oc * 8);
    for (size_t i = 0; i < nx; i++)
        x[i] = urand(1, i);
    for (size_t i = 0; i < nd; i++)
        dy[i] = urand(2, i);
    td_sbw *p = td_sbw_create(t->n, t->ic, t->h, t->w, t->oc, oh, ow, t->k,
                              t->s, t->pad, 2);
    ck_assert_ptr_nonnull(p);
    omp_set_num_threads(2);
    td_sbw_run(p, x, dy, dw, db);
    reference(t, x, dy, oh, ow, rw, mag, rb, bmag);
    /* fp32 sums of up to oh*ow*n/8 terms per group: 1e-6 of the terms'
     * magnitudes is ~16 units of 2^-24 */
    for (size_t i = 0; i < nw; i++)
        ck_assert_msg(fabs(dw[i] - rw[i]) <= 1e-6 * mag[i] + 1e-12,
                      "shape %d: dw[%zu] %.9g, want %.9g", _i, i,
                      (double)dw[i], rw[i]);
    for (int o = 0; o < t->oc; o++)
        ck_assert_msg(fabs(db[o] - rb[o]) <= 1e-6 * bmag[o] + 1e-12,
                      "shape %d: db[%d] %.9g, want %.9g", _i, o,
                      (double)db[o], rb[o]);
    /* one thread: the same bits */
    omp_set_num_threads(1);
    td_sbw_run(p, x, dy, dw1, db1);
    omp_set_num_threads(2);
    ck_assert(memcmp(dw, dw1, nw * 4) == 0);
    ck_assert(memcmp(db, db1, (size_t)t->oc * 4) == 0);
    /* without the bias gradient, the same weights */
    td_sbw_run(p, x, dy, dw1, NULL);
    ck_assert(memcmp(dw, dw1, nw * 4) == 0);
    td_sbw_destroy(p);
    free(x), free(dy), free(dw), free(dw1), free(db), free(db1);
    free(rw), free(mag), free(rb), free(bmag);
}
END_TEST

START_TEST(test_refuses)
{
    ck_assert(!td_sbw_ok(5, 1, 2, 3, 16)); /* kernel above 3 */
    ck_assert(!td_sbw_ok(3, 1, 3, 3, 16)); /* pad >= k */
    ck_assert(!td_sbw_ok(3, 1, 1, 3, 12)); /* oc not a multiple of 8 */
    ck_assert(!td_sbw_ok(3, 0, 1, 3, 16)); /* stride 0 */
    ck_assert_ptr_null(td_sbw_create(0, 1, 28, 28, 32, 28, 28, 3, 1, 1, 2));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sbw");
    TCase *tc = tcase_create("sbw");
    tcase_add_test(tc, test_refuses);
    if (td_sbw_ok(3, 1, 1, 1, 8))
        tcase_add_loop_test(tc, test_vs_fp64, 0,
                            (int)(sizeof shapes / sizeof shapes[0]));
    else
        printf("no AVX2 here: only the refusals are tested\n");
    suite_add_tcase(s, tc);
    return td_test_run(s);
}
