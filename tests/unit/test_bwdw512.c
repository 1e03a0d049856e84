/* test_bwdw512.c - the CPU backend's hand-written backward weights
 * (lib/backend/cpu/cpu_bwdw.c) on its AVX512_BF16 path (vdpbf16ps, the
 * path of CPUs without AMX, e.g. AMD Zen 4/5), forced by
 * TD_BWDW_ISA=avx512_bf16 so it runs on an AMX machine too, against an
 * fp64 reference on random bf16 data, x and dy channels-last (NHWC) and
 * blocked (nChw16c, the AVX512_BF16 plan's layout): resnet20's three
 * stages and its stride-2 convolutions, odd image sizes, unequal channel
 * counts, 1x1, 5x5 and 7x7 kernels, paddings 0-3, a 3- and a 5-channel
 * stem (NHWC only: the blocked layout refuses them), 48 output channels
 * (three oc blocks: one full column triple), partial last chunks; the
 * bias gradient; bitwise equal results with one and two threads in both
 * layouts.  Skipped where the process cannot run AVX512_BF16.
 */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_bwdw.h"
#include "bf16.h"
#include "philox.h"
#include "tdtest.h"

#include "bwdw_ref.h"

/* [n][img][c] -> [n][c / 16][img][16] */
static td_bf16 *blocked(const td_bf16 *t, int n, size_t img, int c)
{
    td_bf16 *b = malloc((size_t)n * img * (size_t)c * sizeof *b);
    for (int s = 0; s < n; s++)
        for (size_t r = 0; r < img; r++)
            for (int ch = 0; ch < c; ch++)
                b[(((size_t)s * (size_t)(c / 16) + (size_t)(ch / 16)) * img +
                   r) * 16 + (size_t)(ch % 16)] =
                    t[((size_t)s * img + r) * (size_t)c + (size_t)ch];
    return b;
}

/* Shape _i / 2, NHWC (_i even) or nChw16c (odd; stems: refused). */
START_TEST(test_matches_reference)
{
    const shape *s = &shapes[_i / 2];
    int blk = _i % 2;
    td_bwdw_layout ly = blk ? TD_BWDW_NCHW16C : TD_BWDW_NHWC;
    if (blk && s->ic % 16 != 0) {
        ck_assert_ptr_null(td_bwdw_create_layout(s->n, s->h, s->w, s->ic,
                                                 s->oc, s->k, s->s, s->p, 2,
                                                 ly));
        return;
    }
    size_t img = (size_t)s->h * s->w, oimg = (size_t)oh(s) * ow(s);
    size_t orows = (size_t)s->n * oimg;
    size_t nw = (size_t)s->oc * s->ic * s->k * s->k;
    td_bf16 *x = rnd((size_t)s->n * img * s->ic, 1 + (uint64_t)_i / 2);
    td_bf16 *dy = rnd(orows * s->oc, 100 + (uint64_t)_i / 2);
    td_bf16 *xk = blk ? blocked(x, s->n, img, s->ic) : x;
    td_bf16 *dyk = blk ? blocked(dy, s->n, oimg, s->oc) : dy;
    double *ref = malloc(nw * sizeof *ref), *mag = malloc(nw * sizeof *mag);
    float *dw = malloc(nw * sizeof *dw), *db = malloc(s->oc * sizeof *db);
    reference(s, x, dy, ref, mag);
    td_bwdw *p = td_bwdw_create_layout(s->n, s->h, s->w, s->ic, s->oc, s->k,
                                       s->s, s->p, 2, ly);
    ck_assert_ptr_nonnull(p);
    ck_assert_str_eq(td_bwdw_path(p), "avx512_bf16");
    td_bwdw_run(p, xk, dyk, dw, db);
    for (size_t i = 0; i < nw; i++)
        /* fp32 sums of bf16 products (vdpbf16ps adds pairs of products in
         * fp32, then the accumulator): each partial sum rounds at 2^-24
         * relative, a few thousand terms deep at most, so |error| < 1e-4
         * * sum|terms|; a wrong tap, channel or position is off by about
         * one term or more */
        ck_assert_msg(fabs(dw[i] - ref[i]) <= 1e-4 * mag[i] + 1e-30,
                      "%s n%d %dx%d %d->%d k%d s%d p%d: dw[%zu] %g, want %g "
                      "(scale %g)", blk ? "nChw16c" : "nhwc", s->n, s->h, s->w,
                      s->ic, s->oc, s->k, s->s, s->p, i, dw[i], ref[i],
                      mag[i]);
    check_bias(s, dy, db);
    td_bwdw_destroy(p);
    if (blk)
        free(xk), free(dyk);
    free(x), free(dy), free(ref), free(mag), free(dw), free(db);
}
END_TEST

START_TEST(test_thread_count_independent)
{
    check_thread_count_independent((td_bwdw_layout)_i);
}
END_TEST

START_TEST(test_isa_choice)
{
    ck_assert_str_eq(td_bwdw_isa(), "avx512_bf16");
    setenv("TD_BWDW_ISA", "amx", 1);
    ck_assert(td_bwdw_isa() == NULL || td_bwdw_amx());
    ck_assert_int_eq(td_bwdw_ok(3, 1, 1, 16, 16), td_bwdw_amx());
    setenv("TD_BWDW_ISA", "avx512_bf16", 1);
    ck_assert(td_bwdw_ok(3, 1, 1, 16, 16));
    ck_assert(!td_bwdw_ok(3, 1, 1, 24, 16)); /* 24 input channels */
}
END_TEST

static Suite *bwdw512_suite(void)
{
    Suite *s = suite_create("bwdw512");
    TCase *tc = tcase_create("avx512_bf16");
    tcase_add_test(tc, test_isa_choice);
    tcase_add_loop_test(tc, test_matches_reference, 0, 2 * NSHAPES);
    tcase_add_loop_test(tc, test_thread_count_independent, TD_BWDW_NHWC,
                        TD_BWDW_NCHW16C + 1);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    setenv("TD_BWDW_ISA", "avx512_bf16", 1);
    if (!td_bwdw_avx512()) {
        printf("SKIP: this process cannot run AVX512_BF16\n");
        return TD_TEST_SKIP;
    }
    Suite *s = bwdw512_suite();
    return td_test_run(s);
}
