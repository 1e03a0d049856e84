/* test_precision.c - the job spec's "precision": parsing and its errors,
 * what each precision resolves to on the CPU and on a (described) GPU,
 * the refusal on a CPU without bf16 (oneDNN limited to AVX2 by
 * ONEDNN_MAX_CPU_ISA, so it runs on any machine), the check at submit,
 * and a checkpoint written in one precision resumed in the other (fp32
 * master weights in the file, the spec hash blind to the precision).
 * The resume tests start the checkpoint writer thread (suite threaded).
 * The ONEDNN_MAX_CPU_ISA test relies on Check's fork mode (the default):
 * oneDNN reads the variable once per process.
 */
#include <cpuid.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backend/cpu/caps.h"
#include "base/error.h"
#include "bf16.h"
#include "job/precision.h"
#include "job/runner.h"
#include "job/spec.h"
#include "store/checkpoint.h"
#include "tdtest.h"

static const char *base_spec =
    "{\"name\": \"p\", \"data\": {\"classes\": 4},"
    " \"input\": {\"size\": 8, \"channels\": 1, \"source\": \"synthetic\","
    "  \"normalize\": {\"mean\": [0.5], \"std\": [0.25]}},"
    " \"model\": {\"layers\": [{\"type\": \"conv2d\", \"name\": \"c1\","
    "  \"channels\": 16, \"kernel\": 3, \"pad\": 1}, {\"type\": \"batchnorm\","
    "  \"name\": \"b1\"}, {\"type\": \"relu\"}, {\"type\": \"flatten\"},"
    "  {\"type\": \"dense\", \"name\": \"fc\", \"units\": \"classes\"}]},"
    " \"optimizer\": {\"type\": \"sgd\", \"lr\": 0.05, \"momentum\": 0.9},"
    " \"batch_size\": 8, \"epochs\": 2, \"seed\": 3, \"threads\": 1,"
    " \"metrics\": {\"warmup_steps\": 0, \"window_steps\": 4},"
    " \"checkpoint\": {\"every_steps\": 0, \"keep\": 3}, \"device\": \"cpu\"}";

static int parse(const char *set, td_job_spec *s, char *err, size_t cap)
{
    json_error_t je;
    json_t *j = json_loads(base_spec, 0, &je);
    ck_assert_msg(j != NULL, "%s", je.text);
    int r = set ? td_spec_apply_set(j, set, err, cap) : 0;
    if (r == 0)
        r = td_spec_parse(j, NULL, s, err, cap);
    json_decref(j);
    return r;
}

START_TEST(test_field_values_and_errors)
{
    td_job_spec s;
    char err[256];
    ck_assert_int_eq(parse(NULL, &s, err, sizeof err), 0);
    ck_assert_int_eq(s.precision, TD_PREC_AUTO);
    ck_assert_str_eq(json_string_value(json_object_get(s.json, "precision")),
                     "auto");
    td_spec_free(&s);
    const char *names[] = {"auto", "fp32", "tf32", "bf16", "fp16"};
    for (int i = 0; i < 5; i++) {
        char set[64];
        snprintf(set, sizeof set, "precision=%s", names[i]);
        ck_assert_int_eq(parse(set, &s, err, sizeof err), 0);
        ck_assert_int_eq(s.precision, i);
        ck_assert_str_eq(td_precision_name(s.precision), names[i]);
        td_spec_free(&s);
    }
    const char *bad[] = {"precision=fp8", "precision=FP32", "precision=16",
                         "precision=null"};
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(parse(bad[i], &s, err, sizeof err), TD_E_SPEC);
        ck_assert_str_eq(err, i == 3 ? "precision: must not be null"
                                     : "precision: must be one of auto, "
                                       "fp32, tf32, bf16, fp16");
    }
}
END_TEST

/* A checkpoint may be resumed at another precision: the hash leaves the
 * precision out, and nothing else. */
START_TEST(test_hash_ignores_precision_only)
{
    td_job_spec a, b, c;
    char err[256];
    ck_assert_int_eq(parse("precision=bf16", &a, err, sizeof err), 0);
    ck_assert_int_eq(parse("precision=fp32", &b, err, sizeof err), 0);
    ck_assert_int_eq(parse("seed=4", &c, err, sizeof err), 0);
    ck_assert_uint_eq(td_spec_hash(&a), td_spec_hash(&b));
    ck_assert_uint_ne(td_spec_hash(&a), td_spec_hash(&c));
    /* the normalised spec still says which precision was asked for */
    ck_assert_str_eq(json_string_value(json_object_get(a.json, "precision")),
                     "bf16");
    td_spec_free(&a);
    td_spec_free(&b);
    td_spec_free(&c);
}
END_TEST

START_TEST(test_resolve_on_this_cpu)
{
    const td_cpu_caps *k = td_cpu_caps_get();
    enum td_dtype dt = (enum td_dtype)-1;
    char err[512];
    ck_assert_int_eq(td_precision_resolve(TD_PREC_FP32, "cpu", NULL, &dt, err,
                                          sizeof err), 0);
    ck_assert_int_eq(dt, TD_F32);
    ck_assert_int_eq(td_precision_resolve(TD_PREC_TF32, "cpu", NULL, &dt, err,
                                          sizeof err), 0);
    ck_assert_int_eq(dt, TD_F32); /* tf32 is a GPU notion: fp32 here */
    ck_assert_int_eq(td_precision_resolve(TD_PREC_AUTO, "cpu", NULL, &dt, err,
                                          sizeof err), 0);
    ck_assert_int_eq(dt, k->bf16_auto ? TD_BF16 : TD_F32);
    ck_assert(!k->bf16_auto || k->bf16);
    int rc = td_precision_resolve(TD_PREC_BF16, "cpu", NULL, &dt, err,
                                  sizeof err);
    ck_assert_int_eq(rc, k->bf16 ? 0 : TD_E_NOTSUP);
    if (rc == 0)
        ck_assert_int_eq(dt, TD_BF16);
    ck_assert_int_eq(td_precision_resolve(TD_PREC_FP16, "cpu", NULL, &dt, err,
                                          sizeof err), TD_E_NOTSUP);
    ck_assert_msg(strstr(err, "precision: fp16 is not supported on the CPU "
                         "backend") && strstr(err, k->isa), "%s", err);
}
END_TEST

/* oneDNN limited to AVX2: no bf16, whatever the machine. */
START_TEST(test_refused_without_bf16)
{
    setenv("ONEDNN_MAX_CPU_ISA", "AVX2", 1);
    const td_cpu_caps *k = td_cpu_caps_get();
    ck_assert_int_eq(k->bf16, 0);
    ck_assert_str_eq(k->isa, "avx2");
    enum td_dtype dt;
    char err[512];
    ck_assert_int_eq(td_precision_resolve(TD_PREC_BF16, "cpu", NULL, &dt, err,
                                          sizeof err), TD_E_NOTSUP);
    ck_assert_msg(strstr(err, "precision: bf16 needs a CPU with AVX512_BF16 "
                         "or AMX-BF16 that oneDNN uses; this one is ") &&
                  strstr(err, "oneDNN ISA avx2") &&
                  strstr(err, "(use fp32 or auto)"), "%s", err);
    ck_assert_int_eq(td_precision_resolve(TD_PREC_AUTO, "cpu", NULL, &dt, err,
                                          sizeof err), 0);
    ck_assert_int_eq(dt, TD_F32);
    /* a compute-bound fp32 job here is not told to try mixed precision;
     * on a GPU it is, and a bf16 job is told it has it */
    ck_assert_int_eq(td_precision_advice("cpu", TD_F32), TD_ADVICE_NO_FASTER);
    ck_assert_int_eq(td_precision_advice("cuda:0", TD_F32), TD_ADVICE_MIXED);
    ck_assert_int_eq(td_precision_advice("cuda", TD_F16), TD_ADVICE_IN_USE);
    ck_assert_int_eq(td_precision_advice("cpu", TD_BF16), TD_ADVICE_IN_USE);
    /* the backend refuses too, rather than running an emulation */
    td_job_spec s;
    ck_assert_int_eq(parse("precision=bf16", &s, err, sizeof err), 0);
    td_model *m = NULL;
    ck_assert_int_eq(td_model_build(json_object_get(s.json, "model"),
                                    (td_shape){1, 8, 8}, 4, &m, err,
                                    sizeof err), 0);
    td_backend_config cfg = {.batch = 8, .threads = 1, .std = {1},
                             .dtype = TD_BF16};
    td_optim_defaults(&cfg.optim, TD_OPT_SGD);
    td_backend *be = NULL;
    ck_assert_int_eq(td_backend_create("cpu", m, &cfg, &be, err, sizeof err),
                     TD_E_NOTSUP);
    ck_assert_msg(strstr(err, "cpu backend: bf16 needs") &&
                  strstr(err, "avx2"), "%s", err);
    ck_assert_ptr_null(be);
    /* and so does the check at submit, for a job on the CPU */
    td_device_info info;
    memset(&info, 0, sizeof info);
    ck_assert_int_eq(td_precision_check_job(&s, &info, err, sizeof err),
                     TD_E_NOTSUP);
    ck_assert_ptr_nonnull(strstr(err, "precision: bf16 needs"));
    td_model_free(m);
    td_spec_free(&s);
}
END_TEST

/* "auto" picks bf16 on AMX, and on AVX512_BF16 only where dot products
 * outrun fp32 FMAs by TD_CPU_DOT_RATE_MIN. */
START_TEST(test_auto_rule)
{
    ck_assert_int_eq(td_cpu_bf16_auto("avx512_core_amx", 1, 0), 1);
    ck_assert_int_eq(td_cpu_bf16_auto("avx512_core_bf16", 1, 2.0), 1);
    ck_assert_int_eq(td_cpu_bf16_auto("avx512_core_bf16", 1,
                                      TD_CPU_DOT_RATE_MIN), 1);
    ck_assert_int_eq(td_cpu_bf16_auto("avx512_core_bf16", 1, 1.0), 1);
    ck_assert_int_eq(td_cpu_bf16_auto("avx512_core_bf16", 1, 0.74), 0);
    ck_assert_int_eq(td_cpu_bf16_auto("avx512_core_bf16", 1, 0.5), 0);
    ck_assert_int_eq(td_cpu_bf16_auto("avx512_core_bf16", 1, 0), 0);
    ck_assert_int_eq(td_cpu_bf16_auto("avx2", 0, 4.0), 0);
    ck_assert_int_eq(td_cpu_bf16_auto("avx512_core_amx", 0, 0), 0);
}
END_TEST

/* The cpuid bit of vdpbf16ps, read without td_cpu_caps_get(): the probe
 * runs once, and these tests must cap oneDNN's ISA before it does. */
static int cpu_has_avx512_bf16(void)
{
    unsigned a, b, c, d;
    return __get_cpuid_count(7, 1, &a, &b, &c, &d) && ((a >> 5) & 1);
}

/* With oneDNN held to AVX512_BF16 (the plan of a CPU without AMX) the
 * probe times vdpbf16ps against fp32 FMAs, and "auto" follows that
 * measured rate: bf16 stays available either way. */
START_TEST(test_auto_follows_measured_dot_rate)
{
    if (!cpu_has_avx512_bf16()) {
        printf("test_auto_follows_measured_dot_rate: skipped, no "
               "AVX512_BF16 on this CPU\n");
        return;
    }
    setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_BF16", 1);
    const td_cpu_caps *k = td_cpu_caps_get();
    ck_assert_str_eq(k->isa, "avx512_core_bf16");
    ck_assert_int_eq(k->bf16, 1);
    /* a real measurement: Sapphire Rapids ~0.5 */
    ck_assert_msg(k->dot_rate > 0.1 && k->dot_rate < 8, "%g", k->dot_rate);
    ck_assert_int_eq(k->bf16_auto, k->dot_rate >= TD_CPU_DOT_RATE_MIN);
    enum td_dtype dt;
    char err[512], desc[256], want[96];
    ck_assert_int_eq(td_precision_resolve(TD_PREC_AUTO, "cpu", NULL, &dt, err,
                                          sizeof err), 0);
    ck_assert_int_eq(dt, k->bf16_auto ? TD_BF16 : TD_F32);
    ck_assert_int_eq(td_precision_resolve(TD_PREC_BF16, "cpu", NULL, &dt, err,
                                          sizeof err), 0);
    ck_assert_int_eq(dt, TD_BF16);
    td_cpu_caps_describe(k, desc, sizeof desc);
    snprintf(want, sizeof want, "bf16 yes, auto %s (vdpbf16ps %.2fx the "
             "fp32 FMA rate)", k->bf16_auto ? "bf16" : "fp32", k->dot_rate);
    ck_assert_msg(strstr(desc, want), "%s", desc);
    printf("test_auto_follows_measured_dot_rate: %s\n", desc);
}
END_TEST

/* TD_CPU_DOT_RATE replaces the measurement: both of auto's outcomes on
 * one machine. */
START_TEST(test_auto_dot_rate_override)
{
    if (!cpu_has_avx512_bf16())
        return; /* said by the test above */
    static const char *const rates[] = {"2.0", "0.5", "0.75", "junk"};
    setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_BF16", 1);
    setenv("TD_CPU_DOT_RATE", rates[_i], 1);
    const td_cpu_caps *k = td_cpu_caps_get();
    enum td_dtype dt;
    char err[512];
    ck_assert_int_eq(td_precision_resolve(TD_PREC_AUTO, "cpu", NULL, &dt, err,
                                          sizeof err), 0);
    if (_i == 3) { /* not a number: measured instead */
        ck_assert_msg(k->dot_rate > 0.1 && k->dot_rate < 8, "%g",
                      k->dot_rate);
        return;
    }
    ck_assert_double_eq(k->dot_rate, strtod(rates[_i], NULL));
    ck_assert_int_eq(dt, _i == 1 ? TD_F32 : TD_BF16);
    /* mixed precision is advised where auto would pick it */
    ck_assert_int_eq(td_precision_advice("cpu", TD_F32),
                     _i == 1 ? TD_ADVICE_NO_FASTER : TD_ADVICE_MIXED);
}
END_TEST

START_TEST(test_resolve_on_gpu)
{
    td_device_info info;
    memset(&info, 0, sizeof info);
    info.cuda_built = 1;
    info.cuda_count = 1;
    snprintf(info.gpus[0].name, sizeof info.gpus[0].name, "NVIDIA H100");
    info.gpus[0].cc_major = 9;
    enum td_dtype dt;
    char err[512];
    ck_assert_int_eq(td_precision_resolve(TD_PREC_AUTO, "cuda:0", &info, &dt,
                                          err, sizeof err), 0);
    ck_assert_int_eq(dt, TD_F32);
    ck_assert_int_eq(td_precision_resolve(TD_PREC_FP32, "cuda", &info, &dt,
                                          err, sizeof err), 0);
    ck_assert_int_eq(td_precision_resolve(TD_PREC_TF32, "cuda:0", &info, &dt,
                                          err, sizeof err), 0);
    ck_assert_int_eq(dt, TD_F32);
    ck_assert_int_eq(td_precision_fp32_math(TD_PREC_TF32), TD_MATH_TF32);
    ck_assert_int_eq(td_precision_fp32_math(TD_PREC_AUTO), TD_MATH_AUTO);
    ck_assert_int_eq(td_precision_fp32_math(TD_PREC_FP32), TD_MATH_FP32);
    /* bf16 and fp16 on Hopper: 16-bit activations (TD_BF16, TD_F16; fp16
     * with dynamic loss scaling, td_precision_loss_scale) */
    ck_assert_int_eq(td_precision_resolve(TD_PREC_BF16, "cuda:0", &info, &dt,
                                          err, sizeof err), 0);
    ck_assert_int_eq(dt, TD_BF16);
    ck_assert_int_eq(td_precision_resolve(TD_PREC_FP16, "cuda:0", &info, &dt,
                                          err, sizeof err), 0);
    ck_assert_int_eq(dt, TD_F16);
    /* tf32 needs Ampere: a Turing GPU refuses it at submit, naming itself;
     * auto and fp32 run (auto = fp32 there, decided by the backend) */
    snprintf(info.gpus[0].name, sizeof info.gpus[0].name, "Tesla T4");
    info.gpus[0].cc_major = 7;
    info.gpus[0].cc_minor = 5;
    ck_assert_int_eq(td_precision_resolve(TD_PREC_TF32, "cuda:0", &info, &dt,
                                          err, sizeof err), TD_E_NOTSUP);
    ck_assert_msg(strstr(err, "tf32 needs a GPU of compute capability 8.0") &&
                  strstr(err, "cuda:0 is Tesla T4, compute capability 7.5"),
                  "%s", err);
    ck_assert_int_eq(td_precision_resolve(TD_PREC_AUTO, "cuda:0", &info, &dt,
                                          err, sizeof err), 0);
    /* bf16 needs Ampere too; fp16 Volta (7.0), so on a Pascal (6.1) GPU it
     * is the capability that refuses it, before loss scaling */
    ck_assert_int_eq(td_precision_resolve(TD_PREC_BF16, "cuda:0", &info, &dt,
                                          err, sizeof err), TD_E_NOTSUP);
    ck_assert_msg(strstr(err, "bf16 needs a GPU of compute capability 8.0") &&
                  strstr(err, "cuda:0 is Tesla T4, compute capability 7.5") &&
                  strstr(err, "use fp32 or auto"), "%s", err);
    snprintf(info.gpus[0].name, sizeof info.gpus[0].name, "Tesla P100");
    info.gpus[0].cc_major = 6;
    info.gpus[0].cc_minor = 0;
    ck_assert_int_eq(td_precision_resolve(TD_PREC_FP16, "cuda:0", &info, &dt,
                                          err, sizeof err), TD_E_NOTSUP);
    ck_assert_msg(strstr(err, "fp16 needs a GPU of compute capability 7.0") &&
                  strstr(err, "cuda:0 is Tesla P100, compute capability 6.0"),
                  "%s", err);
    snprintf(info.gpus[0].name, sizeof info.gpus[0].name, "Tesla T4");
    info.gpus[0].cc_major = 7;
    info.gpus[0].cc_minor = 5;
    /* without the GPU's details (traind --run) the backend checks */
    ck_assert_int_eq(td_precision_resolve(TD_PREC_BF16, "cuda:0", NULL, &dt,
                                          err, sizeof err), 0);
    ck_assert_int_eq(dt, TD_BF16);
    ck_assert_int_eq(td_precision_resolve(TD_PREC_TF32, "cuda:0", NULL, &dt,
                                          err, sizeof err), 0);
    /* at submit: a job on the GPU is checked for the GPU, and a GPU that
     * is absent is not this check's error (the job reports it) */
    td_job_spec s;
    ck_assert_int_eq(parse("precision=bf16", &s, err, sizeof err), 0);
    s.device = "cuda"; /* as parsed from "device": "cuda" */
    ck_assert_int_eq(td_precision_check_job(&s, &info, err, sizeof err),
                     TD_E_NOTSUP);
    info.cuda_count = 0;
    ck_assert_int_eq(td_precision_check_job(&s, &info, err, sizeof err), 0);
    td_spec_free(&s);
}
END_TEST

/* ---- a checkpoint resumed at the other precision ---------------------- */

typedef struct watch {
    td_runner *r;
    int64_t stop_at;    /* pause after this step (0: never) */
    int64_t first, last; /* steps seen */
} watch;

static void on_event(void *user, const char *kind, json_t *data)
{
    watch *w = user;
    if (strcmp(kind, "step") == 0) {
        int64_t st = json_integer_value(json_object_get(data, "step"));
        if (!w->first)
            w->first = st;
        w->last = st;
        if (w->stop_at && st == w->stop_at)
            td_runner_stop(w->r, TD_STOP_PAUSE);
    }
    json_decref(data);
}

static void run_job(const char *prec, const char *dir, int resume,
                    int64_t stop_at, watch *w, td_runner_result *res)
{
    td_job_spec s;
    char err[512], set[64];
    snprintf(set, sizeof set, "precision=%s", prec);
    ck_assert_int_eq(parse(set, &s, err, sizeof err), 0);
    memset(w, 0, sizeof *w);
    w->stop_at = stop_at;
    td_runner_opts o = {.spec = &s, .ckpt_dir = dir, .resume = resume,
                        .synthetic_steps = 10, .event = on_event, .user = w};
    ck_assert_msg(td_runner_create(&o, &w->r, err, sizeof err) == 0, "%s",
                  err);
    ck_assert_msg(td_runner_run(w->r, res, err, sizeof err) == 0, "%s", err);
    td_runner_free(w->r);
    td_spec_free(&s);
}

/* The newest checkpoint's c1.weight: fp32 in the file, and (trained for
 * some steps) not bf16 values even when the job computed in bf16. */
static void expect_fp32_master(const char *dir)
{
    td_ckpt_file *f = NULL;
    char path[4096], err[512];
    ck_assert_msg(td_ckpt_load_latest(dir, &f, path, sizeof path, err,
                                      sizeof err) == 0, "%s", err);
    float w[16 * 9];
    ck_assert_msg(td_ckpt_file_read(f, "c1.weight", TD_DT_F32, w, sizeof w,
                                    err, sizeof err) == 0, "%s", err);
    int not_bf16 = 0;
    for (int i = 0; i < 16 * 9; i++)
        not_bf16 += td_bf16_round(w[i]) != w[i];
    ck_assert_int_gt(not_bf16, 16 * 9 / 2);
    td_ckpt_close(f);
}

static void check_resume(const char *from, const char *to)
{
    if (strcmp(from, "bf16") == 0 || strcmp(to, "bf16") == 0) {
        if (!td_cpu_caps_get()->bf16)
            return; /* nothing to resume across here */
    }
    char dir[] = "/tmp/td-prec-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    watch w;
    td_runner_result res;
    run_job(from, dir, 0, 6, &w, &res);
    ck_assert_int_eq(res.stopped, TD_STOP_PAUSE);
    int64_t paused = w.last; /* the pause lands at the next boundary */
    ck_assert_int_ge(paused, 6);
    ck_assert_int_lt(paused, 20);
    expect_fp32_master(dir);
    run_job(to, dir, 1, 0, &w, &res);
    ck_assert_int_eq(res.stopped, TD_STOP_NONE);
    ck_assert_int_eq(w.first, paused + 1); /* where the other left off */
    ck_assert_int_eq(w.last, 20);
    ck_assert(isfinite(res.val_loss) || isnan(res.val_loss));
    expect_fp32_master(dir);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}

START_TEST(test_resume_bf16_checkpoint_at_fp32) { check_resume("bf16", "fp32"); }
END_TEST

START_TEST(test_resume_fp32_checkpoint_at_bf16) { check_resume("fp32", "bf16"); }
END_TEST

static Suite *precision_suite(void)
{
    Suite *s = suite_create("precision");
    TCase *tc = tcase_create("precision");
    tcase_add_test(tc, test_field_values_and_errors);
    tcase_add_test(tc, test_hash_ignores_precision_only);
    tcase_add_test(tc, test_resolve_on_this_cpu);
    tcase_add_test(tc, test_refused_without_bf16);
    tcase_add_test(tc, test_auto_rule);
    tcase_add_test(tc, test_auto_follows_measured_dot_rate);
    tcase_add_loop_test(tc, test_auto_dot_rate_override, 0, 4);
    tcase_add_test(tc, test_resolve_on_gpu);
    tcase_add_test(tc, test_resume_bf16_checkpoint_at_fp32);
    tcase_add_test(tc, test_resume_fp32_checkpoint_at_bf16);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(precision_suite)
