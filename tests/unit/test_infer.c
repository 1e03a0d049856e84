/* test_infer.c - predictions from a weights file alone: the logits of a
 * self-describing file equal the double-precision reference network's in
 * evaluation mode (batch norm on running statistics), do not depend on
 * the images sharing a call, and bad calls and files are refused by
 * name.  (trainctl eval/predict through a real job: test_modelfile.) */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "job/infer.h"
#include "job/infer_run.h"
#include "job/modelmeta.h"
#include "jpeggen.h"
#include "ref_layers.h"
#include "store/weights.h"
#include "tdtest.h"

enum { B = 4, K = 5 };
static const td_shape in = {3, 8, 8};
static const float mean[3] = {0.4f, 0.5f, 0.6f}, sd[3] = {0.2f, 0.25f, 0.3f};

static char *tmp;
static char path[600];
static td_model *m;
static json_t *graph;
static float *params, *state;

static void setup(void)
{
    char err[512];
    tmp = td_test_tmpdir("infer");
    graph = json_pack("{s:[{s:s,s:s,s:i,s:i,s:i},{s:s,s:s},{s:s},"
                      "{s:s,s:i,s:i},{s:s},{s:s,s:s,s:s}]}",
                      "layers", "type", "conv2d", "name", "c", "channels",
                      4, "kernel", 3, "pad", 1, "type", "batchnorm", "name",
                      "n", "type", "relu", "type", "maxpool", "kernel", 2,
                      "stride", 2, "type", "global_avgpool", "type", "dense",
                      "name", "fc", "units", "classes");
    ck_assert_int_eq(td_model_build(graph, in, K, &m, err, sizeof err), 0);
    params = malloc(m->param_count * sizeof *params);
    td_model_init_params(m, 11, params);
    size_t ns = td_model_state_count(m);
    state = malloc(ns * sizeof *state);
    /* running mean in [-0.2, 0.2], running var in [0.5, 1.5]: not the
     * initial 0 and 1, so using them (or not) shows in the logits */
    for (size_t i = 0; i < ns; i++)
        state[i] = i < ns / 2 ? 0.4f * (float)td_rng_uniform(3, 1, i) - 0.2f
                              : 0.5f + (float)td_rng_uniform(3, 2, i);
    td_model_meta meta;
    ck_assert_int_eq(td_model_meta_init(&meta, graph, in, K, NULL, mean, sd,
                                        NULL, 0), 0);
    json_t *mj = td_model_meta_to_json(&meta);
    snprintf(path, sizeof path, "%s/model.safetensors", tmp);
    ck_assert_int_eq(td_weights_save(m, params, state, 0, mj, path, err,
                                     sizeof err), 0);
    json_decref(mj);
    td_model_meta_free(&meta);
}

static void teardown(void)
{
    free(params);
    free(state);
    td_model_free(m);
    json_decref(graph);
    td_test_rmtree(tmp);
    free(tmp);
}

static uint8_t *images(int n, uint32_t seed)
{
    uint8_t *px = malloc((size_t)n * in.h * in.w * in.c);
    for (int i = 0; i < n; i++)
        td_test_photo(px + (size_t)i * in.h * in.w * in.c, in.w, in.h, in.c,
                      seed + (uint32_t)i);
    return px;
}

START_TEST(test_logits_are_the_reference_networks)
{
    char err[512] = "";
    td_infer *inf;
    ck_assert_msg(td_infer_open(path, B, 1, &inf, err, sizeof err) == 0,
                  "%s", err);
    ck_assert_int_eq(td_infer_meta(inf)->classes, K);
    uint8_t *px = images(B, 5);
    float z[B * K];
    ck_assert_msg(td_infer_logits(inf, px, B, z, err, sizeof err) == 0, "%s",
                  err);

    td_ref r;
    ck_assert_int_eq(td_ref_init(&r, m, B), 0);
    for (size_t i = 0; i < m->param_count; i++)
        r.params[i] = params[i];
    for (size_t i = 0; i < td_model_state_count(m); i++)
        r.running[i] = state[i];
    size_t hw = (size_t)in.h * in.w;
    for (int i = 0; i < B; i++)
        for (int c = 0; c < in.c; c++)
            for (size_t p = 0; p < hw; p++)
                r.y[0][((size_t)i * in.c + c) * hw + p] =
                    (px[((size_t)i * hw + p) * in.c + c] / 255.0 - mean[c]) /
                    sd[c];
    td_ref_forward(&r, 0);
    const double *want = r.y[m->nlayers - 1];
    double worst = 0;
    for (int i = 0; i < B * K; i++) {
        double d = fabs(z[i] - want[i]) / (fabs(want[i]) + 1e-3);
        worst = d > worst ? d : worst;
    }
    ck_assert_msg(worst < 1e-4, "logits differ from the reference by %g",
                  worst);
    /* The running statistics matter: with batch statistics instead the
     * logits would be others (the check above could not pass by luck). */
    td_ref_forward(&r, 1);
    double off = 0;
    for (int i = 0; i < B * K; i++)
        off = fmax(off, fabs(z[i] - r.y[m->nlayers - 1][i]));
    ck_assert_msg(off > 1e-3, "batch statistics give the same logits");
    td_ref_free(&r);
    free(px);
    td_infer_free(inf);
}
END_TEST

START_TEST(test_each_image_alone_gives_the_same_logits)
{
    char err[512] = "";
    td_infer *inf;
    ck_assert_int_eq(td_infer_open(path, B, 1, &inf, err, sizeof err), 0);
    uint8_t *px = images(B, 9);
    float all[B * K], one[K];
    ck_assert_int_eq(td_infer_logits(inf, px, B, all, err, sizeof err), 0);
    for (int i = 0; i < B; i++) {
        ck_assert_int_eq(td_infer_logits(inf, px + (size_t)i * in.h * in.w *
                                                       in.c,
                                         1, one, err, sizeof err), 0);
        for (int k = 0; k < K; k++)
            ck_assert_float_eq_tol(one[k], all[i * K + k],
                                   1e-5f * (1 + fabsf(one[k])));
    }
    free(px);
    td_infer_free(inf);
}
END_TEST

START_TEST(test_bad_calls_and_files_refused)
{
    char err[512] = "", bare[700];
    td_infer *inf;
    ck_assert_int_eq(td_infer_open(path, 2, 1, &inf, err, sizeof err), 0);
    uint8_t *px = images(3, 1);
    float z[3 * K];
    ck_assert_int_ne(td_infer_logits(inf, px, 3, z, err, sizeof err), 0);
    ck_assert_int_gt((int)strlen(err), 0);
    err[0] = '\0';
    ck_assert_int_ne(td_infer_logits(inf, px, 0, z, err, sizeof err), 0);
    ck_assert_int_gt((int)strlen(err), 0);
    td_infer_free(inf);
    free(px);
    /* Weights without traind.* metadata: not self-describing. */
    snprintf(bare, sizeof bare, "%s/bare.safetensors", tmp);
    ck_assert_int_eq(td_weights_save(m, params, state, 0, NULL, bare, err,
                                     sizeof err), 0);
    ck_assert_int_ne(td_infer_open(bare, 1, 1, &inf, err, sizeof err), 0);
    ck_assert_msg(strstr(err, "not self-describing"), "%s", err);
    /* A missing file is named. */
    snprintf(bare, sizeof bare, "%s/none.safetensors", tmp);
    ck_assert_int_ne(td_infer_open(bare, 1, 1, &inf, err, sizeof err), 0);
    ck_assert_msg(strstr(err, "none.safetensors"), "%s", err);
}
END_TEST

/* eval's text: top-5 only where it can be below 1 (more than 5
 * classes), and the chance level, so that a model that learnt nothing
 * shows as one (top-1 0.2750 beside chance 0.2500, 4 classes). */
START_TEST(test_eval_text_says_chance)
{
    json_t *r = json_pack(
        "{s:s, s:I, s:I, s:I, s:[{s:s, s:I}, {s:s, s:I}, {s:s, s:I}],"
        " s:[[I,I,I], [I,I,I], [I,I,I]]}",
        "checkpoint", "m.safetensors", "samples", (json_int_t)10,
        "top1_correct", (json_int_t)4, "top5_correct", (json_int_t)10,
        "per_class", "class", "a", "samples", (json_int_t)2, "class", "b",
        "samples", (json_int_t)5, "class", "c", "samples", (json_int_t)3,
        "confusion", (json_int_t)1, (json_int_t)1, (json_int_t)0,
        (json_int_t)3, (json_int_t)2, (json_int_t)0, (json_int_t)2,
        (json_int_t)0, (json_int_t)1);
    ck_assert_ptr_nonnull(r);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    ck_assert_ptr_nonnull(f);
    td_infer_eval_print(r, 0, f);
    fclose(f);
    ck_assert_msg(strstr(text, "  top-1 0.4000 (4)\n"), "%s", text);
    ck_assert_msg(!strstr(text, "top-5"), "%s", text);
    ck_assert_msg(strstr(text, "  chance 0.5000 (always answering b, the "
                               "largest class)\n"), "%s", text);
    free(text);
    json_decref(r);
}
END_TEST

static Suite *infer_suite(void)
{
    Suite *s = suite_create("infer");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_logits_are_the_reference_networks);
    tcase_add_test(tc, test_each_image_alone_gives_the_same_logits);
    tcase_add_test(tc, test_bad_calls_and_files_refused);
    tcase_add_test(tc, test_eval_text_says_chance);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(infer_suite)
