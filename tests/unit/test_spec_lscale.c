/* test_spec_lscale.c - the job spec's "loss_scale" (docs/job-spec.md):
 * "auto" (the default), "off", "dynamic" or a static scale in [1, 2^24];
 * anything else refused naming the field; what each resolves to for the
 * backend (td_precision_loss_scale: auto is dynamic for fp16 only); and
 * the spec hash leaving the field out, so a job resumes with another
 * loss_scale. */
#include <math.h>
#include <string.h>

#include <jansson.h>

#include "base/error.h"
#include "job/precision.h"
#include "job/spec.h"
#include "loss_scale.h"
#include "tdtest.h"

static const char *base =
    "{\"name\": \"j\", \"data\": {\"train\": \"/d/train\", \"classes\": 10},"
    " \"input\": {\"size\": [28, 28], \"channels\": 1},"
    " \"model\": \"fmnist-cnn\", \"optimizer\": {\"lr\": 0.1}}";

/* Parses base with `set` applied ("" for none). */
static int parse(const char *set, td_job_spec *s, char *err, size_t cap)
{
    json_t *j = json_loads(base, 0, NULL);
    ck_assert_ptr_nonnull(j);
    int r = *set ? td_spec_apply_set(j, set, err, cap) : 0;
    if (r == 0)
        r = td_spec_parse(j, NULL, s, err, cap);
    json_decref(j);
    return r;
}

static void expect_err(const char *set, const char *msg)
{
    td_job_spec s;
    char err[512] = "";
    ck_assert_msg(parse(set, &s, err, sizeof err) == TD_E_SPEC,
                  "%s: accepted", set);
    ck_assert_msg(strstr(err, msg) != NULL, "%s: \"%s\" lacks \"%s\"", set,
                  err, msg);
}

/* The backend's scale and interval for `set`. */
static void resolved(const char *set, float *scale, int *interval)
{
    td_job_spec s;
    char err[512] = "";
    ck_assert_msg(parse(set, &s, err, sizeof err) == 0, "%s: %s", set, err);
    td_precision_loss_scale(&s, scale, interval);
    td_spec_free(&s);
}

START_TEST(test_values)
{
    float sc;
    int iv;
    resolved("", &sc, &iv); /* auto, fp32 (auto precision): off */
    ck_assert(sc == 0.0f);
    resolved("loss_scale=off", &sc, &iv);
    ck_assert(sc == 0.0f);
    resolved("loss_scale=dynamic", &sc, &iv);
    ck_assert(sc == TD_LS_INIT && iv == 0); /* 0: TD_LS_INTERVAL */
    resolved("loss_scale=1024", &sc, &iv);
    ck_assert(sc == 1024.0f && iv < 0);
    resolved("loss_scale=1", &sc, &iv);
    ck_assert(sc == 1.0f);
    resolved("loss_scale=16777216", &sc, &iv);
    ck_assert(sc == 16777216.0f);
    /* bf16 and fp32 may scale if asked (legal, unnecessary) */
    resolved("precision=bf16", &sc, &iv);
    ck_assert(sc == 0.0f);
}
END_TEST

/* auto means dynamic for fp16 (the spec parses fp16; the device check at
 * submit refuses it until the fp16 compute exists). */
START_TEST(test_auto_is_dynamic_for_fp16)
{
    td_job_spec s;
    char err[512] = "";
    float sc;
    int iv;
    ck_assert_msg(parse("precision=fp16", &s, err, sizeof err) == 0, "%s",
                  err);
    ck_assert_int_eq(s.loss_scale.mode, TD_LS_AUTO);
    td_precision_loss_scale(&s, &sc, &iv);
    ck_assert(sc == TD_LS_INIT && iv == 0);
    td_spec_free(&s);
}
END_TEST

START_TEST(test_refused)
{
    expect_err("loss_scale=static", "loss_scale: must be \"auto\", \"off\", "
               "\"dynamic\" or a number (a static scale), not \"static\"");
    expect_err("loss_scale=0", "loss_scale: a static scale must be in [1, "
               "16777216] (2^24), not 0");
    expect_err("loss_scale=0.5", "loss_scale: a static scale must be in");
    expect_err("loss_scale=-8", "loss_scale: a static scale must be in");
    expect_err("loss_scale=1e9", "loss_scale: a static scale must be in");
    expect_err("loss_scale=true", "loss_scale: must be \"auto\", \"off\", "
               "\"dynamic\" or a number (a static scale), not");
    expect_err("loss_scale=[2]", "loss_scale: must be");
}
END_TEST

/* Normalised into the spec's JSON, and left out of the hash. */
START_TEST(test_normalised_not_hashed)
{
    td_job_spec a, b, c;
    char err[512] = "";
    ck_assert_int_eq(parse("", &a, err, sizeof err), 0);
    ck_assert_int_eq(parse("loss_scale=dynamic", &b, err, sizeof err), 0);
    ck_assert_int_eq(parse("loss_scale=512", &c, err, sizeof err), 0);
    ck_assert_str_eq(json_string_value(json_object_get(a.json,
                                                       "loss_scale")),
                     "auto");
    ck_assert(json_number_value(json_object_get(c.json, "loss_scale")) ==
              512.0);
    ck_assert_uint_eq(td_spec_hash(&a), td_spec_hash(&b));
    ck_assert_uint_eq(td_spec_hash(&a), td_spec_hash(&c));
    /* the normalised JSON parses back to the same */
    td_job_spec d;
    ck_assert_int_eq(td_spec_parse(c.json, NULL, &d, err, sizeof err), 0);
    ck_assert_int_eq(d.loss_scale.mode, TD_LS_STATIC);
    ck_assert(d.loss_scale.scale == 512.0);
    td_spec_free(&a);
    td_spec_free(&b);
    td_spec_free(&c);
    td_spec_free(&d);
}
END_TEST

static Suite *spec_lscale_suite(void)
{
    Suite *s = suite_create("spec_lscale");
    TCase *tc = tcase_create("spec_lscale");
    tcase_add_test(tc, test_values);
    tcase_add_test(tc, test_auto_is_dynamic_for_fp16);
    tcase_add_test(tc, test_refused);
    tcase_add_test(tc, test_normalised_not_hashed);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(spec_lscale_suite)
