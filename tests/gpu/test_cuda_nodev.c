/* test_cuda_nodev.c - the CUDA backend on a machine where it cannot run
 * (this project's machines: CUDA libraries, no driver, no GPU), and on
 * builds without CUDA: asking for it fails cleanly with the runtime's
 * reason, "auto" falls back to the CPU backend, which trains, and the
 * CUDA-only helpers refuse what is not theirs.  On a machine with GPUs the
 * same tests ask for the first absent index instead. */
#include <string.h>

#include "backend/backend.h"
#include "backend/cuda/backend_cuda.h"
#include "base/error.h"
#include "job/device.h"
#include "model/model.h"
#include "td_config.h"
#include "tdtest.h"

static td_model *tiny(void)
{
    char path[4096], err[256] = "";
    const char *root = getenv("TD_SOURCE_ROOT");
    snprintf(path, sizeof path, "%s/tests/data/tiny-all.json",
             root ? root : ".");
    td_model *m = NULL;
    ck_assert_msg(td_model_load(NULL, path, (td_shape){2, 9, 9}, 5, &m, err,
                                sizeof err) == 0, "%s", err);
    return m;
}

static td_backend_config config(void)
{
    td_backend_config c;
    memset(&c, 0, sizeof c);
    c.batch = 4;
    c.threads = 1;
    c.mean[0] = c.mean[1] = 0.5f;
    c.std[0] = c.std[1] = 0.25f;
    c.seed = 1;
    td_optim_defaults(&c.optim, TD_OPT_SGD);
    return c;
}

START_TEST(test_absent_gpu_fails_with_the_runtime_reason)
{
    td_device_info info;
    td_device_probe(&info);
    char kind[32], err[256] = "";
    snprintf(kind, sizeof kind, "cuda:%d", info.cuda_count);
    td_model *m = tiny();
    td_backend_config c = config();
    td_backend *be = (td_backend *)&c; /* must be reset to NULL */
    int rc = td_backend_create(kind, m, &c, &be, err, sizeof err);
    ck_assert_ptr_null(be);
#if TD_HAVE_CUDA
    ck_assert_int_eq(rc, TD_E_DEVICE);
    ck_assert_msg(strstr(err, kind), "no device name in '%s'", err);
    if (info.cuda_count == 0)
        /* the probe's reason is "no usable GPU: <runtime message>" */
        ck_assert_msg(strstr(err, strchr(info.reason, ':') + 2),
                      "'%s' does not carry the runtime's reason '%s'", err,
                      info.reason);
    else
        ck_assert_msg(strstr(err, "no GPU with that index"), "%s", err);
#else
    ck_assert_int_eq(rc, TD_E_NOTSUP);
    ck_assert_msg(strstr(err, "built without CUDA"), "%s", err);
#endif
    td_model_free(m);
}
END_TEST

START_TEST(test_malformed_cuda_names_are_refused)
{
    const char *bad[] = {"cuda:", "cuda:x", "cuda:-1", "cuda:1x", "cudaa"};
    td_model *m = tiny();
    td_backend_config c = config();
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        td_backend *be = NULL;
        char err[256] = "";
        ck_assert_int_eq(td_backend_create(bad[i], m, &c, &be, err,
                                           sizeof err), -EINVAL);
        ck_assert_msg(strstr(err, bad[i]), "'%s' not named in '%s'", bad[i],
                      err);
    }
    td_model_free(m);
}
END_TEST

/* device "auto": without a GPU the job runs on the CPU backend, and does
 * train (one step moves the parameters). */
START_TEST(test_auto_falls_back_to_a_working_cpu)
{
    td_device_info info;
    td_device_choice ch;
    char err[256] = "";
    td_device_probe(&info);
    if (info.cuda_count > 0)
        return; /* "auto" picks the GPU here; test_backend_cuda covers it */
    ck_assert_int_eq(td_device_select("auto", &info, &ch, err, sizeof err), 0);
    ck_assert_int_eq(ch.kind, TD_DEVICE_CPU);
    td_model *m = tiny();
    td_backend_config c = config();
    td_backend *be = NULL;
    ck_assert_msg(td_backend_create(ch.desc, m, &c, &be, err, sizeof err) ==
                  0, "%s", err);
    ck_assert_str_eq(be->ops->name, "cpu");
    uint8_t px[4 * 2 * 9 * 9];
    int32_t lab[4] = {0, 1, 2, 3};
    for (size_t i = 0; i < sizeof px; i++)
        px[i] = (uint8_t)(i * 37);
    td_batch b = {.data = px, .labels = lab, .n = 4, .h = 9, .w = 9, .c = 2,
                  .layout = TD_LAYOUT_NHWC};
    float before[8 * 2 * 3 * 3], after[8 * 2 * 3 * 3];
    ck_assert_int_eq(be->ops->read_tensor(be, TD_T_PARAM, 0, before, 144), 0);
    ck_assert_int_eq(td_backend_upload(be, &b), 0);
    ck_assert_int_eq(td_backend_train_step(be, 0.1f, 1), 0);
    ck_assert_int_eq(be->ops->read_tensor(be, TD_T_PARAM, 0, after, 144), 0);
    ck_assert_int_ne(memcmp(before, after, sizeof before), 0);
    td_backend_destroy(be);
    td_model_free(m);
}
END_TEST

#if TD_HAVE_CUDA
START_TEST(test_cuda_helpers_refuse_other_backends)
{
    td_model *m = tiny();
    td_backend_config c = config();
    td_backend *be = NULL;
    char err[256];
    ck_assert_int_eq(td_backend_create("cpu", m, &c, &be, err, sizeof err),
                     0);
    td_cuda_step_times t;
    ck_assert_int_eq(td_backend_cuda_step_times(be, 0, &t), -EINVAL);
    ck_assert_int_eq(td_backend_cuda_copy_done(be, 0), -EINVAL);
    ck_assert_uint_eq(td_backend_cuda_arena_bytes(be), 0);
    ck_assert_uint_eq(td_backend_cuda_arena_bytes(NULL), 0);
    td_backend_destroy(be);
    td_model_free(m);
}
END_TEST

/* bf16 and fp16 run (test_sim_lowp); a compute type that is none of the
 * three is refused before any device is touched. */
START_TEST(test_unknown_dtype_refused)
{
    td_model *m = tiny();
    td_backend_config c = config();
    c.dtype = (enum td_dtype)7;
    td_backend *be = NULL;
    char err[256] = "";
    ck_assert_int_eq(td_backend_cuda_create(m, &c, 0, &be, err, sizeof err),
                     -EINVAL);
    ck_assert_msg(strstr(err, "dtype 7 is not one of fp32, bf16, fp16"), "%s",
                  err);
    ck_assert_ptr_null(be);
    td_model_free(m);
}
END_TEST

START_TEST(test_pinned_allocator_without_driver)
{
    td_slot_allocator a = td_cuda_pinned_allocator(0);
    void *p = a.alloc(a.user, 4096);
    /* no driver: pinning is impossible, and the slot is pageable memory
     * (finding 11: the fallback, with a warning); else page-locked */
    ck_assert_ptr_nonnull(p);
    memset(p, 0xab, 4096);
    a.free(a.user, p);
}
END_TEST
#endif

static Suite *nodev_suite(void)
{
    Suite *s = suite_create("cuda_nodev");
    TCase *tc = tcase_create("cuda_nodev");
    tcase_add_test(tc, test_absent_gpu_fails_with_the_runtime_reason);
    tcase_add_test(tc, test_malformed_cuda_names_are_refused);
    tcase_add_test(tc, test_auto_falls_back_to_a_working_cpu);
#if TD_HAVE_CUDA
    tcase_add_test(tc, test_cuda_helpers_refuse_other_backends);
    tcase_add_test(tc, test_unknown_dtype_refused);
    tcase_add_test(tc, test_pinned_allocator_without_driver);
#endif
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(nodev_suite)
