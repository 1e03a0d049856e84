/* test_device.c - device discovery and the job's "device" field. */
#include <string.h>

#include "base/error.h"
#include "job/device.h"
#include "td_config.h"
#include "tdtest.h"

static td_device_info fake(int gpus)
{
    td_device_info i;
    memset(&i, 0, sizeof i);
    i.cuda_built = 1;
    i.cuda_count = gpus;
    snprintf(i.reason, sizeof i.reason, "no usable GPU: test");
    for (int g = 0; g < gpus; g++)
        snprintf(i.gpus[g].name, sizeof i.gpus[g].name, "Fake GPU %d", g);
    return i;
}

/* A stand-in for the CUDA library's probe: two GPUs. */
static int fake_probe(td_device_info *info)
{
    info->cuda_count = 2;
    snprintf(info->gpus[1].name, sizeof info->gpus[1].name, "Fake GPU 1");
    return 0;
}

START_TEST(test_probe_registry)
{
    /* This program links libtraind only: no GPU runtime is registered. */
    td_device_info info;
    ck_assert_int_eq(td_device_probe(&info), 0);
    ck_assert_int_eq(info.cuda_built, 0);
    ck_assert_int_eq(info.cuda_count, 0);
    ck_assert_str_eq(info.reason, "this traind was built without CUDA");
    /* A registered probe is what td_device_probe reports. */
    td_device_register_probe(fake_probe);
    ck_assert_int_eq(td_device_probe(&info), 0);
    ck_assert_int_eq(info.cuda_built, 1);
    ck_assert_int_eq(info.cuda_count, 2);
    ck_assert_str_eq(info.gpus[1].name, "Fake GPU 1");
    td_device_register_probe(NULL);
    ck_assert_int_eq(td_device_probe(&info), 0);
    ck_assert_int_eq(info.cuda_built, 0);
}
END_TEST

START_TEST(test_probe_never_fails)
{
    td_device_info info;
    ck_assert_int_eq(td_device_probe(&info), 0);
    ck_assert_int_ge(info.cuda_count, 0);
    if (info.cuda_count == 0)
        ck_assert_msg(strlen(info.reason) > 0, "no GPU but no reason given");
    /* Whatever was found, "auto" resolves to something usable. */
    td_device_choice ch;
    ck_assert_int_eq(td_device_select("auto", &info, &ch, NULL, 0), 0);
    ck_assert_int_eq(ch.kind,
                     info.cuda_count ? TD_DEVICE_CUDA : TD_DEVICE_CPU);
}
END_TEST

START_TEST(test_select_without_gpu)
{
    td_device_info info = fake(0);
    td_device_choice ch;
    char err[256];
    ck_assert_int_eq(td_device_select("auto", &info, &ch, err, sizeof err), 0);
    ck_assert_int_eq(ch.kind, TD_DEVICE_CPU);
    ck_assert_str_eq(ch.desc, "cpu");
    ck_assert_int_eq(td_device_select("cuda:0", &info, &ch, err, sizeof err),
                     TD_E_DEVICE);
    ck_assert_msg(strstr(err, "cuda:0") && strstr(err, "no usable GPU: test"),
                  "got '%s'", err);
}
END_TEST

START_TEST(test_select_with_gpus)
{
    td_device_info info = fake(2);
    td_device_choice ch;
    char err[256];
    ck_assert_int_eq(td_device_select(NULL, &info, &ch, err, sizeof err), 0);
    ck_assert_int_eq(ch.kind, TD_DEVICE_CUDA);
    ck_assert_str_eq(ch.desc, "cuda:0 Fake GPU 0");
    ck_assert_int_eq(td_device_select("cuda:1", &info, &ch, err, sizeof err), 0);
    ck_assert_int_eq(ch.index, 1);
    ck_assert_int_eq(td_device_select("cuda", &info, &ch, err, sizeof err), 0);
    ck_assert_int_eq(ch.index, 0);
    ck_assert_int_eq(td_device_select("cpu", &info, &ch, err, sizeof err), 0);
    ck_assert_int_eq(ch.kind, TD_DEVICE_CPU);
    ck_assert_int_eq(td_device_select("cuda:2", &info, &ch, err, sizeof err),
                     TD_E_DEVICE);
    ck_assert_msg(strstr(err, "no GPU with that index"), "got '%s'", err);
}
END_TEST

START_TEST(test_select_malformed)
{
    td_device_info info = fake(1);
    td_device_choice ch;
    char err[256];
    const char *bad[] = {"gpu", "cuda:", "cuda:x", "cuda:-1", "cuda:1x",
                         "cuda:99", "CPU", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(td_device_select(bad[i], &info, &ch, err, sizeof err),
                         -EINVAL);
        ck_assert_msg(strstr(err, "expected auto, cpu, cuda or cuda:N"),
                      "'%s' gave '%s'", bad[i], err);
    }
}
END_TEST

/* After a sticky CUDA error on GPU 0: the probe says so, `auto` takes the
 * next usable GPU (or the CPU, saying why), and naming GPU 0 is refused
 * with the error that killed it (issue 14 finding 4). */
START_TEST(test_unusable_gpu_is_skipped_and_refused)
{
    td_device_choice ch;
    char err[512];
    td_device_unusable_reset();
    ck_assert_int_eq(td_device_first_unusable(NULL, 0), -1);
    td_device_register_probe(fake_probe);
    ck_assert_int_eq(td_device_mark_unusable(0, "illegal memory access"), 1);
    /* the first reason is kept */
    ck_assert_int_eq(td_device_mark_unusable(0, "a later error"), 0);
    ck_assert_int_eq(td_device_mark_unusable(TD_MAX_GPUS, "x"), 0);
    td_device_info info;
    ck_assert_int_eq(td_device_probe(&info), 0);
    ck_assert_int_eq(info.gpus[0].unusable, 1);
    ck_assert_int_eq(info.gpus[1].unusable, 0);
    ck_assert_str_eq(info.gpus[0].unusable_why, "illegal memory access");
    ck_assert_int_eq(td_device_first_unusable(err, sizeof err), 0);
    ck_assert_str_eq(err, "illegal memory access");
    ck_assert_int_eq(td_device_select("auto", &info, &ch, err, sizeof err), 0);
    ck_assert_int_eq(ch.kind, TD_DEVICE_CUDA);
    ck_assert_int_eq(ch.index, 1);
    ck_assert_int_eq(td_device_select("cuda:0", &info, &ch, err, sizeof err),
                     TD_E_DEVICE);
    ck_assert_str_eq(err, "device \"cuda:0\" is unusable until traind "
                     "restarts: illegal memory access");
    ck_assert_int_eq(td_device_select("cuda", &info, &ch, err, sizeof err),
                     TD_E_DEVICE);
    td_device_mark_unusable(1, "unspecified launch failure");
    ck_assert_int_eq(td_device_probe(&info), 0);
    ck_assert_int_eq(td_device_select("auto", &info, &ch, err, sizeof err), 0);
    ck_assert_int_eq(ch.kind, TD_DEVICE_CPU);
    ck_assert_msg(strstr(ch.desc, "unusable until traind restarts"), "%s",
                  ch.desc);
    td_device_unusable_reset();
    ck_assert_int_eq(td_device_probe(&info), 0);
    ck_assert_int_eq(info.gpus[0].unusable, 0);
    td_device_register_probe(NULL);
}
END_TEST

static Suite *device_suite(void)
{
    Suite *s = suite_create("device");
    TCase *tc = tcase_create("select");
    tcase_add_test(tc, test_probe_never_fails);
    tcase_add_test(tc, test_probe_registry);
    tcase_add_test(tc, test_select_without_gpu);
    tcase_add_test(tc, test_select_with_gpus);
    tcase_add_test(tc, test_select_malformed);
    tcase_add_test(tc, test_unusable_gpu_is_skipped_and_refused);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(device_suite)
