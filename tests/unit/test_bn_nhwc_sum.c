/* test_bn_nhwc_sum.c - the CPU backend's bf16 batch norm backward with its gradient given as two summands (td_bn_nhwc_bwd2,
 * lib/backend/cpu/cpu_bn.c: a residual block's input gets one from the
 * next block's convolution and one from its shortcut, and the batch norm
 * that produced it adds them itself instead of a separate pass).  The
 * result must be bit for bit td_bn_nhwc_bwd on the stored sum
 * td_bf16_add_n(dy, dy2): every output (dx, dgamma, dbeta, the shortcut's
 * gradient ds), with and without the fused relu and add, on 1 and 2
 * threads, in the NHWC and the nChw16c layout (the same buffers read as
 * either: the comparison is between two calls); and it must differ from
 * ignoring dy2.  Skipped without AVX-512
 * (the backend then keeps oneDNN's batch norm).
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_bn.h"
#include "bf16.h"
#include "philox.h"
#include "tdtest.h"

#define EPS 1e-5f

static float urand(uint64_t stream, uint64_t i, float lo, float hi)
{
    return lo + (hi - lo) * (float)td_rng_uniform(11, stream, i);
}

typedef struct out {
    td_bf16 *dx, *ds;
    float dgamma[64], dbeta[64];
} out;

static void fill_bf16(td_bf16 *p, size_t n, uint64_t stream, float lo,
                      float hi)
{
    for (size_t i = 0; i < n; i++)
        p[i] = td_bf16_from_f32(urand(stream, i, lo, hi));
}

/* One configuration: rows x C (hw rows per image in nChw16c, 0 NHWC),
 * relu and add as given, threads t. */
static void check(size_t rows, int C, size_t hw, int relu, int add, int t)
{
    size_t n = rows * (size_t)C;
    td_bf16 *x = malloc(n * 2), *s = malloc(n * 2), *y = malloc(n * 2);
    td_bf16 *dy = malloc(n * 2), *dy2 = malloc(n * 2), *sum = malloc(n * 2);
    float gamma[64], beta[64], mean[64], var[64];
    float *part = malloc(td_bn_nhwc_part_floats(rows, C, hw) * 4);
    out o[3];
    fill_bf16(x, n, 1, -3, 5);
    fill_bf16(s, n, 2, -1, 1);
    fill_bf16(dy, n, 3, -1, 1);
    /* the second summand's scale varies, so the rounding of the sum
     * matters; a few exact cancellations and ties */
    fill_bf16(dy2, n, 4, -2, 2);
    dy2[0] = (td_bf16)(dy[0] ^ 0x8000u);
    for (int c = 0; c < C; c++) {
        gamma[c] = urand(5, (uint64_t)c, 0.5f, 2.0f);
        beta[c] = urand(6, (uint64_t)c, -0.5f, 0.5f);
    }
    memcpy(sum, dy, n * 2);
    td_bf16_add_n(sum, dy2, n);
    omp_set_num_threads(t);
    td_bn_nhwc_fwd(x, add ? s : NULL, y, rows, C, hw, gamma, beta, EPS,
                   relu, mean, var, part);
    for (int k = 0; k < 3; k++) {
        o[k].dx = malloc(n * 2);
        o[k].ds = malloc(n * 2);
    }
    td_bn_nhwc_bwd2(x, y, dy, dy2, o[0].dx, add ? o[0].ds : NULL, rows, C,
                    hw, gamma, mean, var, EPS, relu, o[0].dgamma,
                    o[0].dbeta, part);
    td_bn_nhwc_bwd(x, y, sum, o[1].dx, add ? o[1].ds : NULL, rows, C, hw,
                   gamma, mean, var, EPS, relu, o[1].dgamma, o[1].dbeta,
                   part);
    td_bn_nhwc_bwd2(x, y, dy, NULL, o[2].dx, add ? o[2].ds : NULL, rows, C,
                    hw, gamma, mean, var, EPS, relu, o[2].dgamma,
                    o[2].dbeta, part);
    ck_assert_msg(memcmp(o[0].dx, o[1].dx, n * 2) == 0,
                  "dx differs: rows %zu C %d hw %zu relu %d add %d threads "
                  "%d", rows, C, hw, relu, add, t);
    ck_assert(memcmp(o[0].dgamma, o[1].dgamma, (size_t)C * 4) == 0);
    ck_assert(memcmp(o[0].dbeta, o[1].dbeta, (size_t)C * 4) == 0);
    if (add)
        ck_assert(memcmp(o[0].ds, o[1].ds, n * 2) == 0);
    /* dy2 was used: without it dbeta (sum of the masked gradient) moves */
    ck_assert(memcmp(o[0].dbeta, o[2].dbeta, (size_t)C * 4) != 0);
    for (int k = 0; k < 3; k++) {
        free(o[k].dx);
        free(o[k].ds);
    }
    free(x), free(s), free(y), free(dy), free(dy2), free(sum), free(part);
}

START_TEST(test_two_summands_are_the_stored_sum)
{
    static const int chans[] = {16, 48, 64};
    for (int t = 1; t <= 2; t++)
        for (int i = 0; i < 3; i++)
            for (int v = 0; v < 8; v++) { /* v & 4: nChw16c, 3 images */
                size_t rows = i == 1 ? 105 : 1311;
                check(rows, chans[i], v & 4 ? rows / 3 : 0, v & 1,
                      v >> 1 & 1, t);
            }
}
END_TEST

int main(void)
{
    if (!td_bn_nhwc_ok(16)) {
        printf("no AVX-512 here: the backend keeps oneDNN's batch norm\n");
        return 77; /* skipped */
    }
    Suite *s = suite_create("bn_nhwc_sum");
    TCase *tc = tcase_create("bn_nhwc_sum");
    tcase_add_test(tc, test_two_summands_are_the_stored_sum);
    suite_add_tcase(s, tc);
    return td_test_run(s);
}
