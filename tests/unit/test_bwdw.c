/* test_bwdw.c - the CPU backend's AMX convolution backward weights
 * (lib/backend/cpu/cpu_bwdw.c) against an fp64 reference on random NHWC
 * bf16 data: resnet20's three stages (16, 32, 64 channels on 32x32, 16x16,
 * 8x8: the one-block tap path and the 2x2-block path) and its stride-2
 * convolutions (3x3 and 1x1: x in four phases), odd image sizes,
 * unequal channel counts (16 -> 48, 32 -> 16), 1x1, 5x5 and 7x7 kernels,
 * paddings from 0 to 3, fewer than 16 input channels (a 3-channel stem,
 * 5), batches that leave a partial last chunk; the bias
 * gradient; bitwise equal
 * results with one and two threads.  Skipped where the process cannot use
 * AMX (td_bwdw_amx: no tiles, or oneDNN's ISA capped below AMX).
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

START_TEST(test_matches_reference)
{
    const shape *s = &shapes[_i];
    size_t rows = (size_t)s->n * s->h * s->w;
    size_t orows = (size_t)s->n * oh(s) * ow(s);
    size_t nw = (size_t)s->oc * s->ic * s->k * s->k;
    td_bf16 *x = rnd(rows * s->ic, 1 + (uint64_t)_i);
    td_bf16 *dy = rnd(orows * s->oc, 100 + (uint64_t)_i);
    double *ref = malloc(nw * sizeof *ref), *mag = malloc(nw * sizeof *mag);
    float *dw = malloc(nw * sizeof *dw), *db = malloc(s->oc * sizeof *db);
    reference(s, x, dy, ref, mag);
    td_bwdw *p = td_bwdw_create(s->n, s->h, s->w, s->ic, s->oc, s->k, s->s, s->p,
                                2);
    ck_assert_ptr_nonnull(p);
    td_bwdw_run(p, x, dy, dw, db);
    for (size_t i = 0; i < nw; i++)
        /* fp32 sums of up to rows products of bf16 values: each partial
         * sum rounds at 2^-24 relative, at most a few thousand terms deep
         * in any order, so |error| < 1e-4 * sum|terms|; a wrong tap,
         * channel or position is off by about one term or more */
        ck_assert_msg(fabs(dw[i] - ref[i]) <= 1e-4 * mag[i] + 1e-30,
                      "n%d %dx%d %d->%d k%d s%d p%d: dw[%zu] %g, want %g "
                      "(scale %g)", s->n, s->h, s->w, s->ic, s->oc, s->k,
                      s->s, s->p, i, dw[i], ref[i], mag[i]);
    check_bias(s, dy, db);
    td_bwdw_destroy(p);
    free(x), free(dy), free(ref), free(mag), free(dw), free(db);
}
END_TEST

START_TEST(test_thread_count_independent)
{
    check_thread_count_independent(TD_BWDW_NHWC);
}
END_TEST

START_TEST(test_refuses_unsupported)
{
    ck_assert(!td_bwdw_ok(3, 3, 1, 16, 16)); /* stride 3 */
    ck_assert(!td_bwdw_ok(3, 1, 3, 16, 16)); /* padding >= kernel */
    ck_assert(!td_bwdw_ok(3, 1, 1, 24, 16)); /* 24 input channels */
    ck_assert(!td_bwdw_ok(3, 1, 1, 16, 24)); /* 24 output channels */
    ck_assert(!td_bwdw_ok(9, 1, 4, 16, 16)); /* kernel over 7 */
    ck_assert_ptr_null(td_bwdw_create(4, 8, 8, 3, 12, 3, 1, 1, 1));
    ck_assert_ptr_null(td_bwdw_create(4, 2, 2, 16, 16, 5, 1, 0, 1));
    ck_assert_int_eq(td_bwdw_ok(3, 1, 1, 16, 16), td_bwdw_isa() != NULL);
}
END_TEST

static Suite *bwdw_suite(void)
{
    Suite *s = suite_create("bwdw");
    TCase *tc = tcase_create("amx");
    tcase_add_test(tc, test_refuses_unsupported);
    if (td_bwdw_amx()) {
        tcase_add_loop_test(tc, test_matches_reference, 0,
                            NSHAPES);
        tcase_add_test(tc, test_thread_count_independent);
    } else {
        printf("bwdw: this process cannot use AMX: only the refusals run\n");
    }
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(bwdw_suite)
