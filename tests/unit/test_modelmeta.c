/* test_modelmeta.c - what a checkpoint says about its model: the four
 * traind.* metadata entries written and read back through a real
 * safetensors file, and each malformed entry refused with its key named
 * (a file from elsewhere must never be half-understood). */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "job/modelmeta.h"
#include "jpeggen.h"
#include "store/weights.h"
#include "tdtest.h"

static char *tmp;
static td_model *m;
static json_t *graph;

static void setup(void)
{
    char err[512];
    tmp = td_test_tmpdir("modelmeta");
    graph = json_pack("{s:[{s:s,s:s,s:i,s:i},{s:s},{s:s,s:s,s:s}]}",
                      "layers", "type", "conv2d", "name", "c", "channels", 2,
                      "kernel", 3, "type", "global_avgpool", "type", "dense",
                      "name", "fc", "units", "classes");
    ck_assert_int_eq(td_model_build(graph, (td_shape){3, 8, 8}, 3, &m, err,
                                    sizeof err), 0);
}

static void teardown(void)
{
    td_model_free(m);
    json_decref(graph);
    td_test_rmtree(tmp);
    free(tmp);
}

static void make_meta(td_model_meta *mm)
{
    static const char *const names[] = {"cat", NULL, "dög"};
    const float mean[3] = {0.5f, 0.25f, 0.125f}, sd[3] = {0.2f, 0.3f, 0.4f};
    td_augment ops[2];
    td_augment_default(&ops[0], TD_AUG_CENTER_CROP);
    ops[0].resize = 10;
    td_augment_default(&ops[1], TD_AUG_FLIP);
    ck_assert_int_eq(td_model_meta_init(mm, graph, (td_shape){3, 8, 8}, 3,
                                        names, mean, sd, ops, 2), 0);
}

/* Writes a weights file whose __metadata__ is meta; returns it opened. */
static td_ckpt_file *file_with(const json_t *meta)
{
    char path[4200], err[512];
    static int n;
    float *p = calloc(m->param_count, sizeof *p);
    snprintf(path, sizeof path, "%s/m%d.safetensors", tmp, n++);
    ck_assert_int_eq(td_weights_save(m, p, NULL, 0, meta, path, err,
                                     sizeof err), 0);
    free(p);
    td_ckpt_file *f;
    ck_assert_int_eq(td_st_open(path, &f, err, sizeof err), 0);
    return f;
}

START_TEST(test_round_trip_through_a_file)
{
    td_model_meta mm, back;
    char err[512] = "";
    make_meta(&mm);
    json_t *meta = td_model_meta_to_json(&mm);
    ck_assert_ptr_nonnull(meta);
    /* Every value is a string (safetensors metadata is str -> str). */
    const char *k;
    json_t *v;
    json_object_foreach(meta, k, v) ck_assert_msg(json_is_string(v), "%s", k);
    td_ckpt_file *f = file_with(meta);
    ck_assert_msg(td_model_meta_read(f, &back, err, sizeof err) == 0, "%s",
                  err);
    ck_assert(json_equal(back.graph, graph));
    ck_assert_int_eq(back.classes, 3);
    ck_assert_str_eq(back.class_names[0], "cat");
    ck_assert_str_eq(back.class_names[1], "1"); /* no name: the label */
    ck_assert_str_eq(back.class_names[2], "dög");
    ck_assert_int_eq(back.in.c, 3);
    ck_assert_int_eq(back.in.h, 8);
    ck_assert_int_eq(back.in.w, 8);
    ck_assert_mem_eq(back.mean, mm.mean, 3 * sizeof(float));
    ck_assert_mem_eq(back.std, mm.std, 3 * sizeof(float));
    ck_assert_int_eq(back.n_augment, 2);
    ck_assert_int_eq(back.augment[0].op, TD_AUG_CENTER_CROP);
    ck_assert_int_eq(back.augment[0].resize, 10);
    ck_assert_int_eq(back.augment[1].op, TD_AUG_FLIP);
    td_ckpt_close(f);
    td_model_meta_free(&back);
    td_model_meta_free(&mm);
    json_decref(meta);
}
END_TEST

/* Each case replaces one entry of a good metadata object (NULL value:
 * removes it) and expects the error to contain want. */
static const struct {
    const char *key, *value, *want;
} bad[] = {
    {"traind.model", NULL, "not self-describing (no traind.model metadata)"},
    {"traind.model", "[1, 2]", "traind.model: must be a layer graph object"},
    {"traind.classes", NULL, "traind.classes: missing from the file's"},
    {"traind.classes", "[\"a\"", "traind.classes: not JSON"},
    {"traind.classes", "[\"only\"]", "traind.classes: must be an array of "
                                     "at least 2 names"},
    {"traind.classes", "[\"a\", 7]", "traind.classes[1]: must be a string"},
    {"traind.input", "{\"size\": [8, 8], \"channels\": 5}",
     "traind.input: needs \"size\": [h, w] and \"channels\": 1..4"},
    {"traind.input", "{\"size\": [0, 8], \"channels\": 1, \"mean\": [0],"
                     " \"std\": [1]}", "traind.input: size 1..8192"},
    {"traind.input", "{\"size\": [8, 8], \"channels\": 2, \"mean\": [0, 0],"
                     " \"std\": [1]}", "a mean and std of 2 numbers each"},
    {"traind.input", "{\"size\": [8, 8], \"channels\": 2, \"mean\": [0, 0],"
                     " \"std\": [1, 0]}", "traind.input: std[1] must be > 0"},
    /* Past a float: infinity, which the file traind writes back cannot
     * hold (found by fuzz_weights' round trip). */
    {"traind.input", "{\"size\": [8, 8], \"channels\": 2, \"mean\": [1e39,"
                     " 0], \"std\": [1, 1]}",
     "traind.input: mean[0] = 1e+39 is beyond a 32-bit float"},
    {"traind.input", "{\"size\": [8, 8], \"channels\": 2, \"mean\": [0, 0],"
                     " \"std\": [1, -1e300]}",
     "traind.input: std[1] must be > 0"},
    {"traind.input", "{\"size\": [8, 8], \"channels\": 1, \"mean\": [0],"
                     " \"std\": [1e39]}",
     "traind.input: std[0] = 1e+39 is beyond a 32-bit float"},
    /* A scale 1 / (255 std) past a float. */
    {"traind.input", "{\"size\": [8, 8], \"channels\": 1, \"mean\": [0],"
                     " \"std\": [1e-40]}",
     "traind.input: std[0] = 1e-40 must be at least 1.17549e-38"},
    {"traind.preprocess", "{\"augment\": [{\"op\": \"sharpen\"}]}",
     "traind.preprocess: "},
    {"traind.preprocess", NULL, "traind.preprocess: missing"},
};

START_TEST(test_malformed_entry_named)
{
    td_model_meta mm, back;
    char err[512] = "";
    make_meta(&mm);
    json_t *meta = td_model_meta_to_json(&mm);
    if (bad[_i].value)
        json_object_set_new(meta, bad[_i].key, json_string(bad[_i].value));
    else
        json_object_del(meta, bad[_i].key);
    td_ckpt_file *f = file_with(meta);
    ck_assert_int_eq(td_model_meta_read(f, &back, err, sizeof err),
                     TD_E_SPEC);
    ck_assert_msg(strstr(err, bad[_i].want), "case %d: got \"%s\"", _i, err);
    ck_assert_ptr_null(back.graph); /* nothing half-read is left */
    ck_assert_ptr_null(back.class_names);
    td_ckpt_close(f);
    td_model_meta_free(&mm);
    json_decref(meta);
}
END_TEST

static Suite *modelmeta_suite(void)
{
    Suite *s = suite_create("modelmeta");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_round_trip_through_a_file);
    tcase_add_loop_test(tc, test_malformed_entry_named, 0,
                        (int)(sizeof bad / sizeof bad[0]));
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(modelmeta_suite)
