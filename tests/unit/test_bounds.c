/* test_bounds.c - resource bounds decided at submit, without a daemon:
 * the device-memory bill of a GPU job against a (described) GPU and the
 * configured cap, a GPU job's activations not billed to host memory, and
 * a CPU job never billed for a device.  The
 * live suites (test_security) submit through a real daemon. */
#include <stdlib.h>
#include <string.h>

#include "backend/memplan.h"
#include "bounds.h"
#include "ref_models.h"
#include "settings.h"
#include "tdtest.h"

static json_t *settings;
static td_device_info gpus;

static void setup(void)
{
    settings = td_settings_defaults();
    memset(&gpus, 0, sizeof gpus);
    gpus.cuda_built = 1;
    gpus.cuda_count = 2;
    snprintf(gpus.gpus[0].name, sizeof gpus.gpus[0].name, "Test 8GB");
    gpus.gpus[0].mem_bytes = (uint64_t)8 << 30;
    snprintf(gpus.gpus[1].name, sizeof gpus.gpus[1].name, "Test 80GB");
    gpus.gpus[1].mem_bytes = (uint64_t)80 << 30;
}

static void teardown(void) { json_decref(settings); }

/* The precision spec() asks for. */
static const char *prec = "auto";

/* A resnet50 job at 224x224 on device dev with batch b. */
static void spec(td_job_spec *s, const char *dev, int b)
{
    char txt[1024], err[512] = "";
    snprintf(txt, sizeof txt,
             "{\"name\": \"big\", \"data\": {\"classes\": 1000},"
             " \"input\": {\"source\": \"synthetic\", \"size\": [224, 224],"
             " \"channels\": 3}, \"model\": \"resnet50\","
             " \"optimizer\": {\"type\": \"sgd\", \"lr\": 0.1,"
             " \"momentum\": 0.9}, \"batch_size\": %d, \"epochs\": 1,"
             " \"threads\": 1, \"device\": \"%s\", \"precision\": \"%s\"}",
             b, dev, prec);
    json_error_t je;
    json_t *j = json_loads(txt, JSON_DECODE_ANY, &je);
    ck_assert_msg(j, "%s", je.text);
    ck_assert_msg(td_spec_parse(j, NULL, s, err, sizeof err) == 0, "%s", err);
    json_decref(j);
}

static td_model *resnet50(void)
{
    return ref_load_model("resnet50", (td_shape){3, 224, 224}, 1000);
}

START_TEST(test_device_estimate_is_the_planners_bill)
{
    td_job_spec s;
    spec(&s, "cuda:0", 64);
    td_model *m = resnet50();
    uint64_t e64 = td_limits_device_estimate(&s, m);
    td_spec_free(&s);
    spec(&s, "cuda:0", 128);
    uint64_t e128 = td_limits_device_estimate(&s, m);
    /* Activations dominate: doubling the batch nearly doubles the bill,
     * and resnet50 at 224 in fp32 needs more than 5 GiB at batch 64 with
     * the CUDA backend's planned layout (its activations alone: 5.07 GiB;
     * 17.9 GiB with every layer's kept for the whole step). */
    ck_assert_uint_gt(e64, (uint64_t)5 << 30);
    ck_assert_uint_gt(e128, e64 + e64 / 2);
    ck_assert_uint_lt(e128, 2 * e64);
    td_spec_free(&s);
    td_model_free(m);
}
END_TEST

/* A 16-bit job is billed its 16-bit activations (and, in fp16, the
 * reserve spaces of the batch norms cuDNN fuses), as trainctl plan bills
 * them: resnet50's activations are most of the bill, so bf16's is well
 * under fp32's; fp16's is bf16's plus the reserve spaces. */
START_TEST(test_device_estimate_follows_precision)
{
    td_job_spec s;
    td_model *m = resnet50();
    uint64_t e[3];
    const char *p[3] = {"fp32", "bf16", "fp16"};
    for (int i = 0; i < 3; i++) {
        prec = p[i];
        spec(&s, "cuda:0", 128);
        e[i] = td_limits_device_estimate(&s, m);
        td_spec_free(&s);
    }
    prec = "auto";
    ck_assert_uint_lt(e[1], e[0] * 6 / 10);
    ck_assert_uint_gt(e[2], e[1]);
    ck_assert_uint_lt(e[2], e[1] + e[1] / 20);
    td_model_free(m);
}
END_TEST

START_TEST(test_gpu_job_too_big_for_the_card_refused)
{
    td_job_spec s;
    char err[1024] = "";
    spec(&s, "cuda:0", 128);
    td_model *m = resnet50();
    ck_assert_int_eq(td_limits_check_spec(settings, &s, m, &gpus, err,
                                          sizeof err), -E2BIG);
    ck_assert_msg(strncmp(err, "batch_size: ", 12) == 0, "%s", err);
    ck_assert_msg(strstr(err, "cuda:0 (Test 8GB)") &&
                      strstr(err, "more than the device has (8.00 GiB)") &&
                      strstr(err, "trainctl plan"), "%s", err);
    td_spec_free(&s);
    /* The same job fits the 80 GB card, and its activations are not
     * billed to host memory (8 GiB allowed here, ~36 GiB on the CPU). */
    json_t *v = json_integer(8192);
    ck_assert_int_eq(td_settings_set(settings, "max_job_memory_mb", v, NULL,
                                     err, sizeof err), 0);
    json_decref(v);
    spec(&s, "cuda:1", 128);
    ck_assert_msg(td_limits_check_spec(settings, &s, m, &gpus, err,
                                       sizeof err) == 0, "%s", err);
    td_spec_free(&s);
    spec(&s, "cpu", 128);
    ck_assert_int_eq(td_limits_check_spec(settings, &s, m, &gpus, err,
                                          sizeof err), -E2BIG);
    ck_assert_msg(strstr(err, "of host memory, more than max_job_memory_mb "
                              "allows (8.00 GiB)"), "%s", err);
    td_spec_free(&s);
    td_model_free(m);
}
END_TEST

START_TEST(test_configured_cap_applies)
{
    td_job_spec s;
    char err[1024] = "";
    spec(&s, "cuda:1", 256); /* ~23 GiB planned: over 16, under 80 */
    td_model *m = resnet50();
    json_t *v = json_integer(16384);
    ck_assert_int_eq(td_settings_set(settings, "max_job_device_memory_mb", v,
                                     NULL, err, sizeof err), 0);
    json_decref(v);
    ck_assert_int_eq(td_limits_check_spec(settings, &s, m, &gpus, err,
                                          sizeof err), -E2BIG);
    ck_assert_msg(strstr(err, "more than max_job_device_memory_mb allows "
                              "(16.00 GiB)"), "%s", err);
    td_spec_free(&s);
    td_model_free(m);
}
END_TEST

START_TEST(test_cpu_and_unknown_devices_not_billed)
{
    td_job_spec s;
    char err[1024] = "";
    td_model *m = resnet50();
    gpus.gpus[0].mem_bytes = (uint64_t)1 << 20; /* a 1 MiB "GPU" */
    spec(&s, "cpu", 16);
    ck_assert_msg(td_limits_check_spec(settings, &s, m, &gpus, err,
                                       sizeof err) == 0, "%s", err);
    td_spec_free(&s);
    /* No device list (a record read back at start): no device check. */
    spec(&s, "cuda:0", 16);
    ck_assert_msg(td_limits_check_spec(settings, &s, m, NULL, err,
                                       sizeof err) == 0, "%s", err);
    /* With it, even batch 16 does not fit 1 MiB. */
    ck_assert_int_eq(td_limits_check_spec(settings, &s, m, &gpus, err,
                                          sizeof err), -E2BIG);
    td_spec_free(&s);
    td_model_free(m);
}
END_TEST

static Suite *bounds_suite(void)
{
    Suite *s = suite_create("bounds");
    TCase *tc = tcase_create("device");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_device_estimate_is_the_planners_bill);
    tcase_add_test(tc, test_device_estimate_follows_precision);
    tcase_add_test(tc, test_gpu_job_too_big_for_the_card_refused);
    tcase_add_test(tc, test_configured_cap_applies);
    tcase_add_test(tc, test_cpu_and_unknown_devices_not_billed);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(bounds_suite)
