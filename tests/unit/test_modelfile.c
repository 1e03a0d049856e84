/* test_modelfile.c - what a job's checkpoint says about its model: the
 * torchvision-style tensor names with num_batches_tracked, the
 * self-describing metadata (graph, class names, input, normalisation,
 * evaluation preprocessing) that td_infer_open needs and nothing else,
 * and the clear refusal of a checkpoint with the zoo's old layer names
 * (weights files on their own: test_weights.c).  Runs a tiny job on a
 * generated ImageFolder through the runner. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/error.h"
#include "input/decode.h"
#include "input/png.h"
#include "job/infer.h"
#include "job/infer_run.h"
#include "job/modelmeta.h"
#include "job/runner.h"
#include "job/spec.h"
#include "jpeggen.h"
#include "store/checkpoint.h"
#include "store/weights.h"
#include "tdtest.h"

static char *tmp;
static char data[512], ckdir[512];

#define JOB_JSON \
    "{\"name\": \"mf\", \"data\": {\"train\": \"%s\"}," \
    " \"input\": {\"size\": [24, 24], \"channels\": 3," \
    "   \"augment\": [{\"op\": \"resize\", \"size\": 28}," \
    "                {\"op\": \"center_crop\"}, {\"op\": \"flip\"}]," \
    "   \"normalize\": {\"mean\": [0.5, 0.4, 0.3], \"std\": [0.2, 0.25, 0.3]}}," \
    " \"model\": {\"name\": \"tiny\", \"layers\": [" \
    "   {\"type\": \"conv2d\", \"name\": \"conv\", \"channels\": 4," \
    "    \"kernel\": 3, \"pad\": 1}," \
    "   {\"type\": \"batchnorm\", \"name\": \"bn\"}, {\"type\": \"relu\"}," \
    "   {\"type\": \"global_avgpool\"}," \
    "   {\"type\": \"dense\", \"name\": \"head\", \"units\": \"classes\"}]}," \
    " \"optimizer\": {\"lr\": 0.1, \"momentum\": 0.9}," \
    " \"batch_size\": 8, \"epochs\": 1, \"seed\": 3, \"threads\": 1," \
    " \"device\": \"cpu\"}"

static void setup(void)
{
    tmp = td_test_tmpdir("modelfile");
    snprintf(data, sizeof data, "%s/train", tmp);
    snprintf(ckdir, sizeof ckdir, "%s/ck", tmp);
    td_test_make_folder(data, 3, 8, 40, 32);
}

static void teardown(void)
{
    td_test_rmtree(tmp);
    free(tmp);
}

static void parse_job(td_job_spec *s)
{
    char txt[8192], err[512];
    json_error_t je;
    snprintf(txt, sizeof txt, JOB_JSON, data);
    json_t *j = json_loads(txt, 0, &je);
    ck_assert_msg(j, "%s", je.text);
    ck_assert_msg(td_spec_parse(j, NULL, s, err, sizeof err) == 0, "%s",
                  err);
    json_decref(j);
}

/* Runs the job (resuming when asked); returns the runner's rc, err. */
static int run_job(int resume, td_runner_result *res, char *err, size_t cap)
{
    td_job_spec s;
    td_runner *r;
    parse_job(&s);
    td_runner_opts o = {.spec = &s, .models_dir = ".", .device = "cpu",
                        .ckpt_dir = ckdir, .resume = resume};
    int rc = td_runner_create(&o, &r, err, cap);
    if (rc == 0) {
        rc = td_runner_run(r, res, err, cap);
        td_runner_free(r);
    }
    td_spec_free(&s);
    return rc;
}

static void last_ckpt(char *path, size_t cap)
{
    td_ckpt_file *f;
    char err[512];
    ck_assert_msg(td_ckpt_load_latest(ckdir, &f, path, cap, err,
                                      sizeof err) == 0, "%s", err);
    td_ckpt_close(f);
}

START_TEST(test_checkpoint_names_and_counter)
{
    td_runner_result res;
    char err[512], path[4096];
    ck_assert_msg(run_job(0, &res, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(res.steps, 3);
    last_ckpt(path, sizeof path);
    td_ckpt_file *f;
    ck_assert_int_eq(td_ckpt_open(path, &f, err, sizeof err), 0);
    const char *names[] = {"conv.weight", "bn.weight", "bn.bias",
                           "bn.running_mean", "bn.running_var", "head.weight",
                           "head.bias"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        ck_assert_msg(td_ckpt_file_find(f, names[i]), "%s", names[i]);
    const td_ckpt_tensor *t = td_ckpt_file_find(f, "bn.num_batches_tracked");
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->dtype, TD_DT_I64);
    ck_assert_int_eq(t->ndim, 0);
    int64_t nbt;
    ck_assert_int_eq(td_ckpt_file_read(f, "bn.num_batches_tracked",
                                       TD_DT_I64, &nbt, 8, err, sizeof err),
                     0);
    ck_assert_int_eq(nbt, 3);
    /* 8-aligned: the counters come first in the data region */
    ck_assert_uint_eq(t->offset, 0);
    td_ckpt_close(f);
}
END_TEST

START_TEST(test_checkpoint_describes_model)
{
    td_runner_result res;
    char err[512], path[4096];
    ck_assert_msg(run_job(0, &res, err, sizeof err) == 0, "%s", err);
    last_ckpt(path, sizeof path);
    td_ckpt_file *f;
    td_model_meta meta;
    ck_assert_int_eq(td_ckpt_open(path, &f, err, sizeof err), 0);
    ck_assert_msg(td_model_meta_read(f, &meta, err, sizeof err) == 0, "%s",
                  err);
    td_ckpt_close(f);
    ck_assert_int_eq(meta.classes, 3);
    ck_assert_str_eq(meta.class_names[0], "class0");
    ck_assert_str_eq(meta.class_names[2], "class2");
    ck_assert_int_eq(meta.in.c, 3);
    ck_assert_int_eq(meta.in.h, 24);
    ck_assert_int_eq(meta.in.w, 24);
    ck_assert_float_eq_tol(meta.mean[1], 0.4f, 1e-7f);
    ck_assert_float_eq_tol(meta.std[2], 0.3f, 1e-7f);
    /* resize 28 + center_crop is the pipeline's center_crop, resize 28 */
    ck_assert_int_eq(meta.n_augment, 2);
    ck_assert_int_eq(meta.augment[0].op, TD_AUG_CENTER_CROP);
    ck_assert_int_eq(meta.augment[0].resize, 28);
    ck_assert_int_eq(meta.augment[1].op, TD_AUG_FLIP);
    ck_assert_str_eq(json_string_value(json_object_get(meta.graph, "name")),
                     "tiny");
    ck_assert_int_eq(json_array_size(json_object_get(meta.graph, "layers")),
                     5);

    /* The file alone is enough to predict, and gives the logits of the
     * same weights given with explicit metadata. */
    td_infer *a, *b;
    ck_assert_msg(td_infer_open(path, 4, 1, &a, err, sizeof err) == 0, "%s",
                  err);
    ck_assert_msg(td_infer_create(&meta, path, 4, 1, &b, err, sizeof err) ==
                  0, "%s", err);
    uint8_t px[4 * 24 * 24 * 3];
    td_test_photo(px, 24 * 2, 24 * 2, 3, 9);
    float la[12], lb[12];
    ck_assert_int_eq(td_infer_logits(a, px, 4, la, err, sizeof err), 0);
    ck_assert_int_eq(td_infer_logits(b, px, 4, lb, err, sizeof err), 0);
    for (int i = 0; i < 12; i++) {
        ck_assert(isfinite(la[i]));
        ck_assert_float_eq(la[i], lb[i]);
    }
    ck_assert_float_ne(la[0], la[3]); /* not all the same image */
    td_infer_free(a);
    td_infer_free(b);
    td_model_meta_free(&meta);
}
END_TEST

/* Weights files: a save loads back bit for bit; strict loading names a
 * missing tensor and one of another shape; a lenient load reports. */
/* A checkpoint from before torchvision names: resume refuses it and says
 * why (docs/checkpoints.md). */
START_TEST(test_old_names_refused)
{
    td_runner_result res;
    char err[512], path[4096];
    ck_assert_msg(run_job(0, &res, err, sizeof err) == 0, "%s", err);
    last_ckpt(path, sizeof path);
    td_ckpt_file *f;
    ck_assert_int_eq(td_ckpt_open(path, &f, err, sizeof err), 0);
    /* the same checkpoint at an earlier step, conv.weight as stem.weight */
    td_ckpt_snapshot s;
    ck_assert_int_eq(td_ckpt_snapshot_init(&s, 1 << 20, 64), 0);
    for (int i = 0; i < td_ckpt_file_count(f); i++) {
        const td_ckpt_tensor *t = td_ckpt_file_tensor(f, i);
        void *dst;
        const char *name = strcmp(t->name, "conv.weight") ? t->name
                                                          : "stem.weight";
        ck_assert_int_eq(td_ckpt_snapshot_add(&s, name, t->dtype, t->ndim,
                                              t->shape, &dst), 0);
        memcpy(dst, td_ckpt_file_data(f, t), t->nbytes);
    }
    s.meta = *td_ckpt_file_meta(f);
    s.meta.step = 1;
    s.meta.epoch = 0;
    s.meta.sampler_pos = 8;
    td_ckpt_close(f);
    td_test_rmtree(ckdir);
    ck_assert_int_eq(mkdir(ckdir, 0700), 0);
    ck_assert_int_eq(td_ckpt_write(ckdir, &s, 0, NULL, NULL, 0, err,
                                   sizeof err), 0);
    td_ckpt_snapshot_destroy(&s);
    ck_assert_int_ne(run_job(1, &res, err, sizeof err), 0);
    ck_assert_msg(strstr(err, "old layer names") && strstr(err, "stem"),
                  "%s", err);
}
END_TEST

/* ---- eval and predict: the validation pass's numbers ------------------ */

#define VAL_JOB \
    "{\"name\": \"ev\", \"data\": {\"train\": \"%s/train\", " \
    "  \"val\": \"%s/val\"}," \
    " \"input\": {\"size\": [24, 24], \"channels\": 3," \
    "   \"augment\": [{\"op\": \"random_resized_crop\", " \
    "                 \"scale\": [0.6, 1.0]}, {\"op\": \"flip\"}]," \
    "   \"normalize\": {\"mean\": [0.5, 0.5, 0.5], \"std\": [0.25, 0.25, 0.25]}}," \
    " \"model\": {\"name\": \"small\", \"layers\": [" \
    "   {\"type\": \"conv2d\", \"name\": \"c1\", \"channels\": 8," \
    "    \"kernel\": 3, \"pad\": 1}," \
    "   {\"type\": \"batchnorm\", \"name\": \"b1\"}, {\"type\": \"relu\"}," \
    "   {\"type\": \"maxpool\", \"kernel\": 2}," \
    "   {\"type\": \"conv2d\", \"name\": \"c2\", \"channels\": 16," \
    "    \"kernel\": 3, \"pad\": 1}," \
    "   {\"type\": \"batchnorm\", \"name\": \"b2\"}, {\"type\": \"relu\"}," \
    "   {\"type\": \"global_avgpool\"}," \
    "   {\"type\": \"dense\", \"name\": \"fc\", \"units\": \"classes\"}]}," \
    " \"optimizer\": {\"lr\": 0.05, \"momentum\": 0.9}," \
    " \"batch_size\": 20, \"epochs\": 6, \"seed\": 5, \"threads\": 1," \
    " \"device\": \"cpu\"}"

/* Runs cmd, returns its stdout (malloc'd) and exit status. */
static char *run_cmd(const char *cmd, int *status)
{
    FILE *p = popen(cmd, "r");
    size_t cap = 1 << 16, len = 0, got;
    char *out = malloc(cap);
    ck_assert_ptr_nonnull(p);
    while ((got = fread(out + len, 1, cap - len - 1, p)) > 0) {
        len += got;
        if (len + 1 == cap)
            out = realloc(out, cap *= 2);
    }
    out[len] = '\0';
    int st = pclose(p);
    *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return out;
}

/* Output of a command run on a terminal: checks that each line, as the
 * terminal shows it (the text after its last erase-line), is a JSON
 * object or starts with one of the prefixes (progress, summary, errors),
 * and that a progress line before a JSON one was erased whole (from the
 * line's start).  Returns the number of JSON lines. */
static int tty_lines(char *out, const char *const *prefixes)
{
    int njson = 0;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        char *shown = line, *k;
        while ((k = strstr(shown, "\033[K")))
            shown = k + 3;
        size_t n = strlen(shown);
        while (n && shown[n - 1] == '\r')
            shown[--n] = '\0';
        if (shown[0] == '{') {
            /* what came before it on the line was erased whole */
            ck_assert_msg(shown == line || (shown - line >= 4 &&
                                            shown[-4] == '\r'),
                          "progress before JSON: %s", line);
            json_t *o = json_loads(shown, 0, NULL);
            ck_assert_msg(json_is_object(o), "not JSON: %s", shown);
            json_decref(o);
            njson++;
            continue;
        }
        int ok = 0;
        for (int i = 0; prefixes[i]; i++)
            ok |= strncmp(shown, prefixes[i], strlen(prefixes[i])) == 0;
        ck_assert_msg(ok, "unexpected line: %s", shown);
    }
    return njson;
}

/* The job's validation accuracy, `trainctl eval` and `trainctl predict`
 * over the same images agree: eval's top-1 count is the validation
 * pass's, and predict's arg-max for every image rebuilds eval's confusion
 * matrix exactly.  predict names a non-image and goes on (exit 1), and
 * gives a PNG of a JPEG's pixels the JPEG's probabilities. */
START_TEST(test_eval_predict_match_validation)
{
    char txt[8192], err[512], path[4096], cmd[16384];
    const char *bld = getenv("TD_BUILD_ROOT");
    td_job_spec s;
    td_runner *r;
    td_runner_result res;
    json_error_t je;
    int st;
    snprintf(txt, sizeof txt, "%s/train", tmp);
    td_test_make_labelled_folder(txt, 5, 40, 40, 32, 1, NULL);
    snprintf(txt, sizeof txt, "%s/val", tmp);
    td_test_make_labelled_folder(txt, 5, 6, 40, 32, 501, NULL);
    snprintf(txt, sizeof txt, VAL_JOB, tmp, tmp);
    json_t *j = json_loads(txt, 0, &je);
    ck_assert_msg(j, "%s", je.text);
    ck_assert_msg(td_spec_parse(j, NULL, &s, err, sizeof err) == 0, "%s",
                  err);
    json_decref(j);
    td_runner_opts o = {.spec = &s, .models_dir = ".", .device = "cpu",
                        .ckpt_dir = ckdir};
    ck_assert_msg(td_runner_create(&o, &r, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(td_runner_run(r, &res, err, sizeof err) == 0, "%s", err);
    td_runner_free(r);
    td_spec_free(&s);
    last_ckpt(path, sizeof path);

    snprintf(cmd, sizeof cmd, "%s/client/trainctl eval %s %s/val --json",
             bld ? bld : ".", path, tmp);
    char *out = run_cmd(cmd, &st);
    ck_assert_msg(st == 0, "%s", out);
    json_t *ev = json_loads(out, 0, &je);
    ck_assert_msg(ev, "%s: %s", je.text, out);
    free(out);
    int64_t n = json_integer_value(json_object_get(ev, "samples"));
    int64_t ok = json_integer_value(json_object_get(ev, "top1_correct"));
    ck_assert_int_eq(n, 30);
    ck_assert_double_eq(res.val_acc, (double)ok / (double)n);
    ck_assert_int_gt(ok, 10); /* it learned something (chance: 6) */

    /* predict: every val image, a non-image in the middle */
    size_t at = (size_t)snprintf(cmd, sizeof cmd, "%s/client/trainctl "
                                 "predict %s --top 1 --json", bld ? bld : ".",
                                 path);
    for (int k = 0; k < 5; k++)
        for (int i = 0; i < 6; i++) {
            at += (size_t)snprintf(cmd + at, sizeof cmd - at,
                                   " %s/val/class%d/img%03d.jpg", tmp, k, i);
            if (k == 2 && i == 3)
                at += (size_t)snprintf(cmd + at, sizeof cmd - at,
                                       " %s/val/class2", tmp);
        }
    snprintf(cmd + at, sizeof cmd - at, " 2>/dev/null");
    out = run_cmd(cmd, &st);
    ck_assert_int_eq(st, 1);
    json_t *conf = json_object_get(ev, "confusion");
    int64_t mine[5][5] = {{0}};
    int lines = 0, errors = 0;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        json_t *pj = json_loads(line, 0, &je);
        ck_assert_msg(pj, "%s", line);
        const char *file = json_string_value(json_object_get(pj, "file"));
        if (json_object_get(pj, "error")) {
            ck_assert_ptr_nonnull(strstr(file, "/val/class2"));
            errors++;
        } else {
            int k = file[strlen(file) - 12] - '0'; /* classK/imgNNN.jpg */
            json_t *top = json_array_get(json_object_get(pj, "top"), 0);
            mine[k][json_integer_value(json_object_get(top, "label"))]++;
            /* lines keep the order of the files */
            ck_assert_int_eq(k, (lines - errors) / 6);
        }
        lines++;
        json_decref(pj);
    }
    free(out);
    ck_assert_int_eq(lines, 31);
    ck_assert_int_eq(errors, 1);
    for (int k = 0; k < 5; k++)
        for (int p = 0; p < 5; p++)
            ck_assert_int_eq(mine[k][p], json_integer_value(json_array_get(
                                             json_array_get(conf, (size_t)k),
                                             (size_t)p)));
    json_decref(ev);

    /* A PNG of a JPEG's decoded pixels is predicted exactly as that JPEG
     * (the same pixels reach the same resampling).  Its name is Latin-1,
     * not UTF-8: predict said "out of memory" (its JSON refused the name);
     * the name is written with \xNN now. */
    char jpg[600], png[600];
    snprintf(jpg, sizeof jpg, "%s/val/class1/img002.jpg", tmp);
    snprintf(png, sizeof png, "%s/img002-caf\xe9.png", tmp);
    size_t jl, pl = 0, pcap = 0;
    uint8_t *jb = td_test_slurp("/", jpg + 1, &jl), *pb = NULL;
    td_decoder *dec;
    td_region reg;
    int w, h;
    ck_assert_int_eq(td_decoder_create(&dec), 0);
    ck_assert_int_eq(td_decoder_header(dec, jb, jl, &w, &h), 0);
    ck_assert_int_eq(td_decoder_region(dec, 0, 0, w, h, w, h, 3,
                                       TD_DECODE_FORCE_FULL_SCALE, &reg), 0);
    ck_assert_int_eq(reg.w, w);
    uint8_t *px = malloc((size_t)w * h * 3);
    for (int y = 0; y < h; y++)
        memcpy(px + (size_t)y * w * 3, reg.px + (size_t)y * reg.stride,
               (size_t)w * 3);
    ck_assert_int_eq(td_png_encode(px, w, h, 3, &pb, &pcap, &pl), 0);
    td_test_write_file(png, pb, pl);
    snprintf(cmd, sizeof cmd, "%s/client/trainctl predict %s --top 5 --json "
             "%s %s", bld ? bld : ".", path, jpg, png);
    out = run_cmd(cmd, &st);
    ck_assert_msg(st == 0, "%s", out);
    char *nl = strchr(out, '\n');
    ck_assert_ptr_nonnull(nl);
    *nl = '\0';
    json_t *a = json_loads(out, 0, &je), *b = json_loads(nl + 1, 0, &je);
    ck_assert_msg(a && b, "%s", out);
    ck_assert_msg(json_equal(json_object_get(a, "top"),
                             json_object_get(b, "top")),
                  "JPEG %s, PNG %s", out, nl + 1);
    const char *bf = json_string_value(json_object_get(b, "file"));
    ck_assert_msg(bf && strstr(bf, "/img002-caf\\xe9.png"), "%s", nl + 1);
    json_decref(a);
    json_decref(b);
    free(out);

    /* On a terminal (util-linux script) stderr shows the model loading,
     * the images done and a summary, each erased before anything else is
     * printed: the JSON lines stay whole (eval had no progress at all). */
    if (access("/usr/bin/script", X_OK) == 0) {
        static const char *const pre[] = {"eval: ", "predict: ",
                                          "trainctl predict: ", NULL};
        snprintf(cmd, sizeof cmd, "script -qec '%s/client/trainctl eval %s "
                 "%s/val --json' /dev/null", bld ? bld : ".", path, tmp);
        out = run_cmd(cmd, &st);
        ck_assert_msg(st == 0, "%s", out);
        ck_assert_msg(strstr(out, "\r\033[Keval: loading ") &&
                      strstr(out, "\r\033[Keval: 0/30 images (0%)") &&
                      strstr(out, "\r\033[Keval: 30 images in "), "%s", out);
        ck_assert_int_eq(tty_lines(out, pre), 1);
        free(out);
        at = (size_t)snprintf(cmd, sizeof cmd, "script -qec '%s/client/"
                              "trainctl predict %s --top 1 --json",
                              bld ? bld : ".", path);
        for (int i = 0; i < 20; i++)
            at += (size_t)snprintf(cmd + at, sizeof cmd - at,
                                   " %s/val/class%d/img%03d.jpg", tmp, i % 5,
                                   i / 5);
        snprintf(cmd + at, sizeof cmd - at, " %s/val' /dev/null", tmp);
        out = run_cmd(cmd, &st);
        ck_assert_msg(st == 1, "%s", out); /* the folder is no image */
        ck_assert_msg(strstr(out, "\r\033[Kpredict: loading ") &&
                      strstr(out, "\r\033[Kpredict: 0/21 images (0%)") &&
                      strstr(out, "trainctl predict: ") &&
                      strstr(out, "predict: 21 images in "), "%s", out);
        ck_assert_int_eq(tty_lines(out, pre), 21);
        free(out);
    }
    free(px);
    free(pb);
    free(jb);
    td_decoder_destroy(dec);
}
END_TEST

/* An evaluation over a folder with too many unreadable images said only
 * "DIR: too many bad samples": not how many, nor which, nor what to do. */
START_TEST(test_eval_names_bad_samples)
{
    char err[1200], path[4096], val[600], bad[700];
    td_runner_result res;
    ck_assert_msg(run_job(0, &res, err, sizeof err) == 0, "%s", err);
    last_ckpt(path, sizeof path);
    snprintf(val, sizeof val, "%s/val", tmp);
    td_test_make_folder(val, 3, 8, 40, 32);
    snprintf(bad, sizeof bad, "%s/class1/broken.jpg", val);
    td_test_write_file(bad, "not a jpeg", 10);
    td_infer_run_opts o = {.checkpoint = path, .device = "cpu", .batch = 8,
                           .workers = 1};
    json_t *result = NULL;
    int rc = td_infer_eval(&o, val, &result, err, sizeof err);
    ck_assert_int_eq(rc, TD_E_BADDATA);
    ck_assert_ptr_null(result);
    ck_assert_msg(strstr(err, "1 bad sample(s) out of 25") &&
                  strstr(err, "broken.jpg") &&
                  strstr(err, "remove or replace"), "%s", err);
}
END_TEST

static Suite *modelfile_suite(void)
{
    Suite *su = suite_create("modelfile");
    TCase *tc = tcase_create("modelfile");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 280); /* trains small jobs; ASan is slower */
    tcase_add_test(tc, test_checkpoint_names_and_counter);
    tcase_add_test(tc, test_checkpoint_describes_model);
    tcase_add_test(tc, test_old_names_refused);
    tcase_add_test(tc, test_eval_predict_match_validation);
    tcase_add_test(tc, test_eval_names_bad_samples);
    suite_add_tcase(su, tc);
    return su;
}

TD_TEST_MAIN(modelfile_suite)
