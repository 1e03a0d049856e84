/* test_weights.c - a model's tensors by name in and out of safetensors:
 * a save/load round trip, the report of a load that is not strict, and
 * files written here by hand (not by td_weights_save) with a missing
 * tensor, an extra one, another dtype and another shape, each reported by
 * name and never reinterpreted. */
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "jpeggen.h"
#include "store/checkpoint.h"
#include "store/onnx.h"
#include "store/weights.h"
#include "tdtest.h"

static char *tmp;
static td_model *m;    /* conv c [2,1,3,3] (no bias: a batch norm follows),
                          batch norm n, dense fc [3,2]+[3] */
static td_model *m5;   /* the same with 5 classes */

static void setup(void)
{
    char err[512];
    tmp = td_test_tmpdir("weights");
    json_t *g = json_pack("{s:[{s:s,s:s,s:i,s:i},{s:s,s:s},{s:s},{s:s,s:s,"
                          "s:s}]}", "layers", "type", "conv2d", "name", "c",
                          "channels", 2, "kernel", 3, "type", "batchnorm",
                          "name", "n", "type", "global_avgpool", "type",
                          "dense", "name", "fc", "units", "classes");
    ck_assert_int_eq(td_model_build(g, (td_shape){1, 8, 8}, 3, &m, err,
                                    sizeof err), 0);
    ck_assert_int_eq(td_model_build(g, (td_shape){1, 8, 8}, 5, &m5, err,
                                    sizeof err), 0);
    json_decref(g);
}

static void teardown(void)
{
    td_model_free(m);
    td_model_free(m5);
    td_test_rmtree(tmp);
    free(tmp);
}

/* One tensor of a hand-written file: name, dtype, shape, float values
 * (F32) or raw bytes of the dtype's size. */
struct tensor {
    const char *name, *dtype;
    int nd;
    int64_t shape[4];
    float base; /* F32 values base, base+1, ... */
};

static int64_t numel(const struct tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->nd; i++)
        n *= t->shape[i];
    return n;
}

static int dsize(const char *dt)
{
    return !strcmp(dt, "F16") || !strcmp(dt, "BF16") ? 2
           : !strcmp(dt, "I64") || !strcmp(dt, "F64") ? 8 : 4;
}

/* Writes a safetensors file the way the format's specification says: an
 * 8-byte little-endian header length, the JSON header, the data. */
static void write_st(const char *path, const struct tensor *t, int n)
{
    json_t *h = json_object();
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        json_t *shape = json_array();
        for (int d = 0; d < t[i].nd; d++)
            json_array_append_new(shape, json_integer(t[i].shape[d]));
        size_t bytes = (size_t)numel(&t[i]) * (size_t)dsize(t[i].dtype);
        json_object_set_new(h, t[i].name,
                            json_pack("{s:s,s:o,s:[I,I]}", "dtype",
                                      t[i].dtype, "shape", shape,
                                      "data_offsets", (json_int_t)off,
                                      (json_int_t)(off + bytes)));
        off += bytes;
    }
    char *txt = json_dumps(h, JSON_COMPACT);
    size_t hl = strlen(txt);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    uint8_t len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    fwrite(len8, 1, 8, f);
    fwrite(txt, 1, hl, f);
    for (int i = 0; i < n; i++) {
        int64_t k = numel(&t[i]);
        for (int64_t e = 0; e < k; e++) {
            if (!strcmp(t[i].dtype, "F32")) {
                float v = t[i].base + (float)e;
                fwrite(&v, 4, 1, f);
            } else {
                uint8_t z[8] = {0x3c, 0x3c, 0x3c, 0x3c, 0, 0, 0, 0};
                fwrite(z, 1, (size_t)dsize(t[i].dtype), f);
            }
        }
    }
    fclose(f);
    free(txt);
    json_decref(h);
}

/* The model's tensors in the file's form, values base*100 + index. */
#define FULL(dt_fc_w)                                                        \
    {"c.weight", "F32", 4, {2, 1, 3, 3}, 100},                               \
        {"n.weight", "F32", 1, {2}, 300},                                    \
        {"n.bias", "F32", 1, {2}, 400},                                      \
        {"n.running_mean", "F32", 1, {2}, 500},                              \
        {"n.running_var", "F32", 1, {2}, 600},                               \
        {"fc.weight", dt_fc_w, 2, {3, 2}, 700},                              \
    {                                                                        \
        "fc.bias", "F32", 1, {3}, 800                                        \
    }

static int load(const td_model *mm, const char *file, int strict, float *p,
                float *st, td_weights_report *rep, char *err, size_t cap)
{
    td_ckpt_file *f;
    int rc = td_st_open(file, &f, err, cap);
    ck_assert_msg(rc == 0, "open %s: %s", file, err);
    rc = td_weights_load(mm, f, strict, p, st, rep, err, cap);
    td_ckpt_close(f);
    return rc;
}

START_TEST(test_save_load_round_trip)
{
    char err[512], path[4200];
    float *p = malloc(m->param_count * sizeof *p), st[4] = {1, 2, 3, 4};
    td_model_init_params(m, 7, p);
    snprintf(path, sizeof path, "%s/w.safetensors", tmp);
    ck_assert_int_eq(td_weights_save(m, p, st, 5, NULL, path, err,
                                     sizeof err), 0);
    float *back = calloc(m->param_count, sizeof *back), sb[4];
    td_weights_report rep;
    ck_assert_int_eq(load(m, path, 1, back, sb, &rep, err, sizeof err), 0);
    ck_assert_mem_eq(back, p, m->param_count * sizeof *p);
    ck_assert_mem_eq(sb, st, sizeof st);
    ck_assert_int_eq(rep.loaded, 5 + 2); /* c, n (2), fc (2); n's state */
    ck_assert_int_eq(rep.missing + rep.reshaped + rep.ignored, 0);
    free(p);
    free(back);
}
END_TEST

START_TEST(test_hand_written_file_loads_by_name)
{
    char path[4200], err[512] = "";
    struct tensor t[] = {FULL("F32"),
                         {"n.num_batches_tracked", "I64", 0, {0}, 0},
                         {"momentum_buffer.x", "F32", 1, {4}, 0}};
    snprintf(path, sizeof path, "%s/a.safetensors", tmp);
    write_st(path, t, 9);
    float *p = calloc(m->param_count, sizeof *p), st[4] = {0};
    td_weights_report rep;
    ck_assert_int_eq(load(m, path, 1, p, st, &rep, err, sizeof err), 0);
    /* Model order: c.weight [0, 18), n.weight, n.bias, fc.weight
     * [22, 28), fc.bias [28, 31); state: running_mean, running_var. */
    ck_assert_uint_eq(m->param_count, 31);
    ck_assert_float_eq(p[0], 100);
    ck_assert_float_eq(p[17], 117);
    ck_assert_float_eq(p[18], 300);
    ck_assert_float_eq(p[20], 400);
    ck_assert_float_eq(p[22], 700);
    ck_assert_float_eq(p[27], 705);
    ck_assert_float_eq(p[28], 800);
    ck_assert_float_eq(st[0], 500);
    ck_assert_float_eq(st[3], 601);
    ck_assert_int_eq(rep.loaded, 7);
    ck_assert_int_eq(rep.missing + rep.reshaped, 0);
    ck_assert_int_eq(rep.ignored, 1); /* the extra tensor, not the counter */
    free(p);
}
END_TEST

START_TEST(test_missing_tensor_named)
{
    char path[4200], err[512] = "";
    struct tensor full[] = {FULL("F32")};
    struct tensor t[6];
    int k = 0;
    for (int i = 0; i < 7; i++)
        if (strcmp(full[i].name, "n.running_var"))
            t[k++] = full[i];
    snprintf(path, sizeof path, "%s/b.safetensors", tmp);
    write_st(path, t, k);
    float *p = calloc(m->param_count, sizeof *p);
    float st[4] = {-1, -1, -1, -1};
    td_weights_report rep;
    ck_assert_int_eq(load(m, path, 1, p, st, &rep, err, sizeof err),
                     TD_E_SPEC);
    ck_assert_msg(strstr(err, "n.running_var"), "%s", err);
    /* Not strict: the rest loads, the missing one keeps its value. */
    ck_assert_int_eq(load(m, path, 0, p, st, &rep, err, sizeof err), 0);
    ck_assert_int_eq(rep.loaded, 6);
    ck_assert_int_eq(rep.missing, 1);
    ck_assert_str_eq(rep.first_missing, "n.running_var");
    ck_assert_float_eq(st[0], 500);
    ck_assert_float_eq(st[2], -1);
    ck_assert_float_eq(st[3], -1);
    free(p);
}
END_TEST

START_TEST(test_other_dtype_never_reinterpreted)
{
    char path[4200], err[512] = "";
    struct tensor t[] = {FULL("F16")};
    snprintf(path, sizeof path, "%s/c.safetensors", tmp);
    write_st(path, t, 7);
    float *p = malloc(m->param_count * sizeof *p), st[4];
    for (size_t i = 0; i < m->param_count; i++)
        p[i] = -7;
    td_weights_report rep;
    ck_assert_int_eq(load(m, path, 1, p, st, &rep, err, sizeof err),
                     TD_E_SPEC);
    ck_assert_msg(strstr(err, "fc.weight") && strstr(err, "F16"), "%s", err);
    ck_assert_int_eq(load(m, path, 0, p, st, &rep, err, sizeof err), 0);
    ck_assert_int_eq(rep.reshaped, 1);
    ck_assert_str_eq(rep.first_reshaped, "fc.weight");
    for (int i = 22; i < 28; i++) /* fc.weight untouched */
        ck_assert_float_eq(p[i], -7);
    ck_assert_float_eq(p[28], 800);
    free(p);
}
END_TEST

START_TEST(test_new_head_keeps_the_backbone)
{
    /* A 3-class file into a 5-class model: fc is reported and left as the
     * caller initialised it; everything else loads. */
    char path[4200], err[512] = "";
    struct tensor t[] = {FULL("F32")};
    snprintf(path, sizeof path, "%s/d.safetensors", tmp);
    write_st(path, t, 7);
    float *p = malloc(m5->param_count * sizeof *p), st[4];
    for (size_t i = 0; i < m5->param_count; i++)
        p[i] = 0.5f;
    td_weights_report rep;
    ck_assert_int_eq(load(m5, path, 1, p, st, &rep, err, sizeof err),
                     TD_E_SPEC);
    ck_assert_msg(strstr(err, "\"fc.weight\" is F32 [3, 2] in the file, the "
                              "model's is F32 [5, 2]"), "%s", err);
    ck_assert_int_eq(load(m5, path, 0, p, st, &rep, err, sizeof err), 0);
    ck_assert_int_eq(rep.loaded, 5);
    ck_assert_int_eq(rep.reshaped, 2);
    ck_assert_float_eq(p[0], 100);
    for (size_t i = 22; i < m5->param_count; i++)
        ck_assert_float_eq(p[i], 0.5f);
    free(p);
}
END_TEST

START_TEST(test_save_writes_torch_style_counters)
{
    /* td_weights_save's file, read back as raw JSON: the counter is an
     * int64 scalar per batch-norm layer, the metadata is kept. */
    char path[4200], err[512] = "";
    float *p = calloc(m->param_count, sizeof *p), st[4] = {1, 2, 3, 4};
    json_t *meta = json_pack("{s:s}", "note", "hello");
    snprintf(path, sizeof path, "%s/e.safetensors", tmp);
    ck_assert_int_eq(td_weights_save(m, p, st, 42, meta, path, err,
                                     sizeof err), 0);
    size_t len;
    uint8_t *b = td_test_slurp(tmp, "e.safetensors", &len);
    uint64_t hl = 0;
    for (int i = 0; i < 8; i++)
        hl |= (uint64_t)b[i] << (8 * i);
    ck_assert_uint_le(8 + hl, len);
    json_error_t je;
    json_t *h = json_loadb((const char *)b + 8, hl, 0, &je);
    ck_assert_msg(h, "%s", je.text);
    json_t *nbt = json_object_get(h, "n.num_batches_tracked");
    ck_assert_ptr_nonnull(nbt);
    ck_assert_str_eq(json_string_value(json_object_get(nbt, "dtype")), "I64");
    ck_assert_int_eq(json_array_size(json_object_get(nbt, "shape")), 0);
    json_int_t lo = json_integer_value(
        json_array_get(json_object_get(nbt, "data_offsets"), 0));
    int64_t v;
    memcpy(&v, b + 8 + hl + lo, 8);
    ck_assert_int_eq(v, 42);
    ck_assert_str_eq(json_string_value(json_object_get(
                         json_object_get(h, "__metadata__"), "note")),
                     "hello");
    ck_assert_int_eq(td_weights_bn_layers(m), 1);
    char name[64];
    int bn = -1;
    for (int L = 0; L < m->nlayers; L++)
        if (m->layers[L].kind == TD_L_BN)
            bn = L;
    td_weights_bn_count_name(m, bn, name, sizeof name);
    ck_assert_str_eq(name, "n.num_batches_tracked");
    json_decref(h);
    json_decref(meta);
    free(b);
    free(p);
}
END_TEST

/* trainctl export --onnx into a folder others can write in: a symbolic
 * link planted at "<out>.tmp" made td_onnx_save truncate and overwrite
 * the linked file (O_TRUNC, followed), and the rename published the link
 * as the export.  It now writes through td_write_atomic, as
 * td_weights_save does (which also fsyncs the folder after the rename). */
START_TEST(test_onnx_save_does_not_follow_a_planted_tmp)
{
    char out[4200], tmpname[4300], victim[4200], err[512];
    float *params = calloc(m->param_count + 1, sizeof(float));
    float *state = calloc(td_model_state_count(m) + 1, sizeof(float));
    float mean[1] = {0}, std[1] = {1};
    struct stat st;
    snprintf(out, sizeof out, "%s/model.onnx", tmp);
    snprintf(tmpname, sizeof tmpname, "%s.tmp", out);
    snprintf(victim, sizeof victim, "%s/victim", tmp);
    FILE *f = fopen(victim, "w");
    ck_assert_ptr_nonnull(f);
    fputs("precious", f);
    fclose(f);
    ck_assert_int_eq(symlink(victim, tmpname), 0);
    ck_assert_msg(td_onnx_save(m, params, state, mean, std, NULL, out, err,
                               sizeof err) == 0, "%s", err);
    ck_assert_int_eq(stat(victim, &st), 0);
    ck_assert_msg(st.st_size == 8, "the victim was overwritten (%lld "
                  "bytes)", (long long)st.st_size);
    ck_assert_int_eq(lstat(out, &st), 0);
    ck_assert(S_ISREG(st.st_mode) && st.st_size > 8);
    free(params);
    free(state);
}
END_TEST

static Suite *weights_suite(void)
{
    Suite *s = suite_create("weights");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_save_load_round_trip);
    tcase_add_test(tc, test_hand_written_file_loads_by_name);
    tcase_add_test(tc, test_missing_tensor_named);
    tcase_add_test(tc, test_other_dtype_never_reinterpreted);
    tcase_add_test(tc, test_new_head_keeps_the_backbone);
    tcase_add_test(tc, test_save_writes_torch_style_counters);
    tcase_add_test(tc, test_onnx_save_does_not_follow_a_planted_tmp);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(weights_suite)
