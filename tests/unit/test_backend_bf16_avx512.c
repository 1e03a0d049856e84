/* test_backend_bf16_avx512.c - the CPU backend's bf16 on the AVX512_BF16
 * kernels, on every machine with native bf16: main() limits oneDNN to
 * avx512_core_bf16 (ONEDNN_MAX_CPU_ISA, read once per process, before the
 * first oneDNN call) unless the caller chose an ISA.  On an AMX CPU this
 * is the path AMD Zen 4/5 take: activations stay in the blocked layout
 * the first convolution chooses from the planar input, and a layer that
 * oneDNN 2.6 has only reference loops for there is refused, naming it
 * (test_backend_bf16 runs the unlimited ISA, where AMX plans nhwc).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/caps.h"
#include "base/error.h"
#include "cpu_ab.h"
#include "model/model.h"
#include "tdtest.h"

/* TD_AB_STEM3_JSON: no AVX512_BF16 kernel for its backward weights. */
START_TEST(test_reference_kernel_refused_avx512)
{
    ck_assert_str_eq(td_cpu_caps_get()->isa, "avx512_core_bf16");
    td_model *m = td_ab_model(TD_AB_STEM3_JSON, (td_shape){3, 32, 32});
    char err[256];
    td_backend_config cfg = {.batch = 16, .threads = 1, .dtype = TD_BF16,
                             .std = {1, 1, 1}};
    td_optim_defaults(&cfg.optim, TD_OPT_SGD);
    td_backend *be = NULL;
    ck_assert_int_eq(td_backend_create("cpu", m, &cfg, &be, err, sizeof err),
                     TD_E_NOTSUP);
    ck_assert_msg(strstr(err, "bf16: oneDNN has only a reference (slow) "
                         "kernel for conv bwd weights of layer c1"), "%s",
                  err);
    ck_assert_ptr_null(be);
    cfg.allow_slow_bf16 = 1; /* the same plan, reference loops allowed */
    ck_assert_msg(td_backend_create("cpu", m, &cfg, &be, err, sizeof err) ==
                  0, "%s", err);
    td_backend_destroy(be);
    td_model_free(m);
}
END_TEST

int main(void)
{
    int skip = td_ab_need_avx512_bf16();
    if (skip)
        return skip;
    Suite *s = suite_create("backend_bf16_avx512");
    TCase *tc = tcase_create("backend_bf16_avx512");
    tcase_add_test(tc, test_reference_kernel_refused_avx512);
    suite_add_tcase(s, tc);
    return td_test_run(s);
}
