/* test_backend_bwdw512.c - the CPU backend's hand-written backward
 * weights (cpu_bwdw.c) on its AVX512_BF16 path in the blocked plan (the
 * plan of CPUs without AMX, e.g. AMD Zen 4/5): main() limits oneDNN to
 * avx512_core_bf16 (ONEDNN_MAX_CPU_ISA, before the first oneDNN call), so
 * activations are nChw16c, and TD_CPU_BWDW=1 turns the kernel on there
 * for every convolution (by default: stride 2 only).  Against oneDNN's
 * backward weights
 * (TD_CPU_BWDW=0): two backends train the same batch from the same
 * weights; after one step the weight gradients of c2-c5 (computed by
 * cpu_bwdw.c: stride 2, a bias, a 5x5 kernel) agree within fp32
 * summation-order rounding, every other gradient (c1 reads the planar
 * 3-channel input: oneDNN's in both) is bitwise equal, and three steps
 * later the losses agree closely.  The plan's debug lines are counted
 * (the default plan: c3 only), so the test fails if cpu_bwdw.c was never
 * used.  Also the channels-last plan forced there (TD_CPU_NHWC=1)
 * against the blocked one.  Skipped where oneDNN does not run
 * avx512_core_bf16.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/caps.h"
#include "backend/cpu/cpu_bwdw.h"
#include "cpu_ab.h"

enum { N = 16 };

/* Is parameter p one cpu_bwdw.c computes (the convolutions c2-c5)? */
static int ours(const char *name)
{
    return name[0] == 'c' && name[1] >= '2' && name[1] <= '5' &&
           name[2] == '.';
}

/* bwdw NULL: TD_CPU_BWDW unset (the plan's default) */
static td_backend *make(const td_model *m, const char *bwdw, int *used)
{
    const char *env[] = {"TD_CPU_BWDW", bwdw, NULL};
    return td_ab_backend(m, TD_BF16, N, env,
                         "conv bwd weights: cpu_bwdw (AVX512_BF16) nChw16c",
                         used);
}

START_TEST(test_gradients_match_onednn)
{
    td_model *m = td_ab_stack(64);
    int on = 0, off = 0, dflt = 0;
    td_backend *a = make(m, "1", &on), *b = make(m, "0", &off);
    td_backend_destroy(make(m, NULL, &dflt));
    ck_assert_int_eq(on, 4);
    ck_assert_int_eq(off, 0);
    ck_assert_int_eq(dflt, 1); /* by default only c3, the stride-2 one */
    td_ab_step(a, b, N, 16, 16, 1);
    td_ab_grads_match(a, b, m, ours);
    /* four steps of bf16 training apart by rounding only */
    td_ab_train_close_free(a, b, m, N, 16, 2, 4, 1e-2);
}
END_TEST

/* TD_CPU_NHWC=1 gives a CPU without AMX the channels-last plan (the
 * hand-written batch norm, cpu_bwdw.c in nhwc, backward data as a forward
 * convolution): it must train as the blocked plan does, within bf16
 * rounding of their different kernels and summation orders. */
START_TEST(test_forced_nhwc_plan_trains_as_blocked)
{
    td_model *m = td_ab_stack(64);
    int nhwc = 0, blocked = 0;
    const char *e1[] = {"TD_CPU_NHWC", "1", NULL};
    const char *e0[] = {"TD_CPU_NHWC", "0", NULL};
    const char *needle = "conv bwd weights: cpu_bwdw (AVX512_BF16) nhwc";
    td_backend *a = td_ab_backend(m, TD_BF16, N, e1, needle, &nhwc);
    td_backend *b = td_ab_backend(m, TD_BF16, N, e0, needle, &blocked);
    ck_assert_int_gt(nhwc, 0);
    ck_assert_int_eq(blocked, 0);
    td_ab_train_close_free(a, b, m, N, 16, 1, 4, 2e-2);
}
END_TEST

static Suite *backend_bwdw512_suite(void)
{
    Suite *s = suite_create("backend_bwdw512");
    TCase *tc = tcase_create("backend_bwdw512");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_gradients_match_onednn);
    tcase_add_test(tc, test_forced_nhwc_plan_trains_as_blocked);
    suite_add_tcase(s, tc);
    return s;
}

/* oneDNN capped at avx512_core_bf16 before its first call (the blocked
 * plan), cpu_bwdw.c's path then AVX512_BF16 */
static int blocked_plan(void)
{
    unsetenv("TD_BWDW_ISA");
    return td_ab_need_avx512_bf16() == 0 && td_bwdw_avx512();
}

TD_AB_MAIN(blocked_plan(), "oneDNN does not run avx512_core_bf16 here",
           backend_bwdw512_suite)
