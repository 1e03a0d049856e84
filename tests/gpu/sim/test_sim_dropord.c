/* test_sim_dropord.c - dropout masks are the same on the CPU backend and
 * the CUDA backend (on the simulated device) for the same seed and step:
 * both draw each element by its canonical NCHW index (kernels/eltwise.h),
 * the CPU whatever oneDNN's layout (blocked nChw16c in fp32, nhwc in bf16
 * on AMX: cpu/cpu_dropout.c), the GPU whatever its own (NCHW in fp32,
 * NHWC in bf16 and fp16).  Checked bitwise on every element of dropout
 * on a spatial tensor (32 and 12 channels), after a flatten, after a
 * dense layer and on the input, at global steps 1 and 1000, and across a
 * checkpoint: a CPU job resumed on the GPU continues the CPU's masks.
 *
 * The models and how a mask is read: tests/support/dropord_kit.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/caps.h"
#include "backend/cuda/backend_cuda.h"
#include "dropord_kit.h"
#include "sim_testkit.h"
#include "tdtest.h"

static td_backend *make(const char *kind, const td_model *m,
                        enum td_dtype dt)
{
    td_backend_config c = st_config(DK_BATCH, dt, TD_MATH_FP32);
    dk_config(&c);
    /* one buffer per layer: the dropout's input is read after the step */
    c.mem_layout = TD_MEM_PER_LAYER;
    td_backend *be = st_make(kind, m, &c);
    dk_params(be, m);
    return be;
}

/* Each model: the GPU's masks in fp32, bf16 and fp16 and the CPU's in
 * fp32 (and bf16 where the CPU has it) are the NCHW draw, bitwise. */
START_TEST(test_masks_cpu_equal_gpu)
{
    td_cuda_register();
    const enum td_dtype gdt[3] = {TD_F32, TD_BF16, TD_F16};
    int cpu_bf16 = td_cpu_caps_get()->bf16;
    if (!cpu_bf16)
        printf("CPU bf16 skipped: no native bf16 in oneDNN here\n");
    for (int k = 0; k < DK_NMODELS; k++) {
        td_model *m = dk_model(k);
        size_t n = dk_count(m), kept = 0;
        uint8_t *want = malloc(n), *got = malloc(n);
        ck_assert(want && got);
        td_backend *be[5];
        const char *what[5];
        int nb = 0;
        be[nb] = make("cpu", m, TD_F32);
        what[nb++] = "cpu fp32";
        if (cpu_bf16) {
            be[nb] = make("cpu", m, TD_BF16);
            what[nb++] = "cpu bf16";
        }
        for (int d = 0; d < 3; d++) {
            be[nb] = make("cuda:0", m, gdt[d]);
            what[nb++] = gdt[d] == TD_F32    ? "gpu fp32"
                         : gdt[d] == TD_BF16 ? "gpu bf16"
                                             : "gpu fp16";
        }
        const int64_t steps[2] = {1, 1000};
        for (int s = 0; s < 2; s++) {
            dk_expected_mask(m, steps[s], want);
            for (int i = 0; i < nb; i++) {
                dk_step_mask(be[i], m, steps[s], got);
                size_t d = dk_diff(got, want, n, &kept);
                ck_assert_msg(d == 0, "%s %s step %lld: %zu of %zu masks "
                              "differ from the NCHW draw", dk_name[k],
                              what[i], (long long)steps[s], d, n);
            }
        }
        printf("%s: %s", dk_name[k], what[0]);
        for (int i = 1; i < nb; i++)
            printf(", %s", what[i]);
        printf(": 0 of %zu masks differ at steps 1 and 1000 (%zu kept at "
               "1000)\n", n, kept);
        for (int i = 0; i < nb; i++)
            td_backend_destroy(be[i]);
        free(want);
        free(got);
        td_model_free(m);
    }
}
END_TEST

/* A CPU job's snapshot after step 2 restored on the GPU (fp32 and bf16):
 * step 3 drops what the CPU's step 3 drops. */
START_TEST(test_resume_cpu_to_gpu)
{
    td_cuda_register();
    td_model *m = dk_model(0);
    size_t n = dk_count(m), kept;
    uint8_t *a = malloc(n), *b = malloc(n);
    ck_assert(a && b);
    td_backend *cpu = make("cpu", m, TD_F32);
    dk_step_mask(cpu, m, 1, a);
    dk_step_mask(cpu, m, 2, a);
    size_t sn = td_backend_snapshot_floats(m, &cpu->cfg.optim);
    float *snap = malloc(sn * sizeof *snap);
    ck_assert(snap != NULL);
    ck_assert_int_eq(cpu->ops->snapshot(cpu, snap, sn), 0);
    dk_step_mask(cpu, m, 3, a);
    const enum td_dtype gdt[2] = {TD_F32, TD_BF16};
    for (int d = 0; d < 2; d++) {
        td_backend *gpu = make("cuda:0", m, gdt[d]);
        ck_assert_msg(gpu->ops->restore(gpu, snap, sn) == 0, "%s", gpu->err);
        dk_step_mask(gpu, m, 3, b);
        size_t diff = dk_diff(b, a, n, &kept);
        ck_assert_msg(diff == 0, "%s: %zu of %zu masks differ from the "
                      "CPU's step 3", st_dt_name(gdt[d]), diff, n);
        printf("resume cpu fp32 -> gpu %s: step 3 0 of %zu masks differ "
               "(%zu kept)\n", st_dt_name(gdt[d]), n, kept);
        td_backend_destroy(gpu);
    }
    td_backend_destroy(cpu);
    free(snap);
    free(a);
    free(b);
    td_model_free(m);
}
END_TEST

static Suite *sim_dropord_suite(void)
{
    Suite *s = suite_create("sim_dropord");
    TCase *tc = tcase_create("masks");
    tcase_add_test(tc, test_masks_cpu_equal_gpu);
    tcase_add_test(tc, test_resume_cpu_to_gpu);
    tcase_set_timeout(tc, 300);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(sim_dropord_suite)
