/* test_backend_bwdw.c - the CPU backend's AMX backward weights
 * (cpu_bwdw.c) inside a bf16 training step, against oneDNN's backward
 * weights primitive (TD_CPU_BWDW=0).  Two backends train the same batch
 * from the same weights; after one step the weight gradients of the
 * convolutions, all computed by cpu_bwdw.c (c1 from 3 channels, c2, c3
 * with stride 2, c4 with a bias, c5 with a 5x5 kernel), agree within fp32
 * summation-order rounding, every other gradient (batch norms, the dense
 * layer: computed the same way by both) is bitwise equal, and
 * three steps later the losses agree closely.  The plan's debug lines are
 * counted, so the test fails if cpu_bwdw.c was never used.  Skipped where
 * the process cannot use AMX.
 */
#include "backend/cpu/cpu_bwdw.h"
#include "cpu_ab.h"

enum { N = 16 };

/* Is parameter p one cpu_bwdw.c computes (the convolutions c1-c5)? */
static int ours(const char *name)
{
    return name[0] == 'c' && name[1] >= '1' && name[1] <= '5' &&
           name[2] == '.';
}

static td_backend *make(const td_model *m, const char *bwdw, int *used)
{
    const char *env[] = {"TD_CPU_BWDW", bwdw, NULL};
    return td_ab_backend(m, TD_BF16, N, env, "conv bwd weights: cpu_bwdw",
                         used);
}

START_TEST(test_gradients_match_onednn)
{
    td_model *m = td_ab_stack(64);
    int on = 0, off = 0;
    td_backend *a = make(m, "1", &on), *b = make(m, "0", &off);
    ck_assert_int_eq(on, 5);
    ck_assert_int_eq(off, 0);
    td_ab_step(a, b, N, 16, 16, 1);
    td_ab_grads_match(a, b, m, ours);
    /* four steps of bf16 training apart by rounding only */
    td_ab_train_close_free(a, b, m, N, 16, 2, 4, 1e-2);
}
END_TEST

static Suite *backend_bwdw_suite(void)
{
    Suite *s = suite_create("backend_bwdw");
    TCase *tc = tcase_create("backend_bwdw");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_gradients_match_onednn);
    suite_add_tcase(s, tc);
    return s;
}

TD_AB_MAIN(td_bwdw_amx(), "this process cannot use AMX", backend_bwdw_suite)
