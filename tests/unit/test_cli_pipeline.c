/* test_cli_pipeline.c - `trainctl pack` and `trainctl bench-input` as a
 * user runs them: exit codes, --json summaries, error messages. */
#define _GNU_SOURCE
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "input/png.h"
#include "support/jpeggen.h"
#include "tdtest.h"

static char *tmp;

static void setup(void) { tmp = td_test_tmpdir("cli"); }
static void teardown(void)
{
    td_test_rmtree(tmp);
    free(tmp);
}

/* Runs `trainctl ARGS` (stderr into *err_out, stdout returned); *rc gets
 * the exit status. */
static char *trainctl(const char *args, int *rc, char **err_out)
{
    const char *b = getenv("TD_BUILD_ROOT");
    char *cmd, *errf;
    ck_assert_int_gt(asprintf(&errf, "%s/stderr.txt", tmp), 0);
    ck_assert_int_gt(asprintf(&cmd, "%s/client/trainctl %s 2>%s",
                              b ? b : "build", args, errf), 0);
    char *out = td_test_capture(cmd, rc);
    if (err_out) {
        FILE *f = fopen(errf, "r");
        *err_out = calloc(1, 8192);
        if (f) {
            size_t got = fread(*err_out, 1, 8191, f);
            (*err_out)[got] = '\0';
            fclose(f);
        }
    }
    free(cmd);
    free(errf);
    return out;
}

static void make_idx(int n)
{
    char p[4096];
    uint8_t *px = malloc((size_t)n * 784), *lb = malloc((size_t)n);
    for (int i = 0; i < n; i++) {
        td_test_photo(px + (size_t)i * 784, 28, 28, 1, (uint32_t)i);
        lb[i] = (uint8_t)(i % 10);
    }
    uint32_t d3[3] = {(uint32_t)n, 28, 28}, d1[1] = {(uint32_t)n};
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte.gz", tmp);
    td_test_write_idx(p, 1, 3, d3, px);
    snprintf(p, sizeof p, "%s/t10k-images-idx3-ubyte.gz", tmp);
    td_test_write_idx(p, 1, 3, d3, px);
    snprintf(p, sizeof p, "%s/train-labels-idx1-ubyte.gz", tmp);
    td_test_write_idx(p, 1, 1, d1, lb);
    snprintf(p, sizeof p, "%s/t10k-labels-idx1-ubyte.gz", tmp);
    td_test_write_idx(p, 1, 1, d1, lb);
    free(px);
    free(lb);
}

START_TEST(test_pack_idx_dir_json_then_bench_input)
{
    char args[8192];
    int rc;
    make_idx(96);
    snprintf(args, sizeof args, "pack --idx-dir %s -o %s/fm --json", tmp, tmp);
    char *out = trainctl(args, &rc, NULL);
    ck_assert_int_eq(rc, 0);
    json_t *j = json_loads(out, 0, NULL);
    ck_assert_ptr_nonnull(j);
    json_t *sets = json_object_get(j, "sets");
    ck_assert_int_eq(json_array_size(sets), 2);
    ck_assert_str_eq(json_string_value(json_object_get(
                         json_array_get(sets, 1), "set")), "test");
    ck_assert_int_eq(json_integer_value(json_object_get(
                         json_array_get(sets, 0), "samples")), 96);
    ck_assert_int_eq(json_integer_value(json_object_get(
                         json_array_get(sets, 0), "classes")), 10);
    json_decref(j);
    free(out);
    snprintf(args, sizeof args, "bench-input --data %s/fm/train --size 28 "
             "--channels 1 --augment pad_crop,flip --batch 16 --workers 2 "
             "--epochs 2 --json", tmp);
    out = trainctl(args, &rc, NULL);
    ck_assert_int_eq(rc, 0);
    j = json_loads(out, 0, NULL);
    ck_assert_ptr_nonnull(j);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "images")), 192);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "bad_samples")),
                     0);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "workers")), 2);
    ck_assert(json_number_value(json_object_get(j, "images_per_s")) > 0);
    json_t *st = json_object_get(j, "stages");
    ck_assert(json_number_value(json_object_get(st, "decode_s")) > 0);
    ck_assert_ptr_nonnull(json_object_get(st, "slot_wait_s"));
    json_decref(j);
    free(out);
}
END_TEST

/* bench-input --spec reads a job spec as submit does: the same checks,
 * the augment ops as the job trains with them (resize + center_crop is
 * one op), data.train relative to the spec's folder, an int input.size;
 * a spec submit refuses is refused, exit 2, with the same message. */
START_TEST(test_bench_input_spec_is_the_job)
{
    char args[8192], path[4200];
    int rc;
    make_idx(96);
    snprintf(args, sizeof args, "pack --idx-dir %s -o %s/fs", tmp, tmp);
    free(trainctl(args, &rc, NULL));
    ck_assert_int_eq(rc, 0);
    snprintf(path, sizeof path, "%s/job.json", tmp);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("{\"data\": {\"train\": \"fs/train\"}, \"model\": \"fmnist-cnn\",\n"
          " \"optimizer\": {\"lr\": 0.1}, \"batch_size\": 8, \"seed\": 3,\n"
          " \"input\": {\"size\": 24, \"channels\": 1, \"workers\": 1,\n"
          "  \"prefetch\": 3, \"augment\": [{\"op\": \"resize\", \"size\": 30},\n"
          "  {\"op\": \"center_crop\"}, {\"op\": \"flip\"},\n"
          "  {\"op\": \"color_jitter\"}]}}\n", f);
    fclose(f);
    snprintf(args, sizeof args, "bench-input --spec %s --json", path);
    char *err = NULL, *out = trainctl(args, &rc, &err);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err);
    json_t *j = json_loads(out, 0, NULL);
    ck_assert_ptr_nonnull(j);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "images")), 96);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "batch")), 8);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "workers")), 1);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "prefetch")), 3);
    json_t *sz = json_object_get(j, "size");
    ck_assert_int_eq(json_integer_value(json_array_get(sz, 0)), 24);
    ck_assert_int_eq(json_integer_value(json_array_get(sz, 1)), 24);
    ck_assert_str_eq(json_string_value(json_object_get(j, "augment")),
                     "center_crop,flip,color_jitter");
    json_decref(j);
    free(out);
    free(err);
    /* later options override the spec */
    snprintf(args, sizeof args, "bench-input --spec %s --batch 4 --json",
             path);
    out = trainctl(args, &rc, NULL);
    ck_assert_int_eq(rc, 0);
    j = json_loads(out, 0, NULL);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "batch")), 4);
    json_decref(j);
    free(out);
    /* what submit refuses: two geometric ops */
    f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("{\"data\": {\"train\": \"fs/train\"}, \"model\": \"fmnist-cnn\",\n"
          " \"optimizer\": {\"lr\": 0.1}, \"input\": {\"size\": 24,\n"
          "  \"augment\": [{\"op\": \"pad_crop\"},\n"
          "  {\"op\": \"random_resized_crop\"}]}}\n", f);
    fclose(f);
    free(trainctl(args, &rc, &err));
    ck_assert_int_eq(rc, 2);
    ck_assert_msg(strstr(err, "input.augment[1]: a second geometric op") !=
                      NULL,
                  "%s", err);
    free(err);
    unlink(path);
}
END_TEST

START_TEST(test_pack_index_and_restart_conflict)
{
    char args[8192], root[4200];
    int rc;
    snprintf(root, sizeof root, "%s/tree2", tmp);
    td_test_make_folder(root, 2, 2, 64, 48);
    snprintf(args, sizeof args, "pack --imagefolder %s -o %s/q --index 2 "
             "--restart 4", root, tmp);
    char *err = NULL, *out = trainctl(args, &rc, &err);
    ck_assert_int_eq(rc, 2);
    ck_assert_ptr_nonnull(strstr(err, "--index 0"));
    free(out);
    free(err);
}
END_TEST

/* Whether a shard of dir holds the bytes s. */
static int shard_has(const char *dir, const char *s, size_t len)
{
    char path[4300];
    snprintf(path, sizeof path, "%s/shard-000000.tar", dir);
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    return memmem(buf, n, s, len) != NULL;
}

/* An ImageFolder is packed with a crop index by default (--json counts the
 * files rewritten), with restart markers on --restart N, copied as it is
 * with --index 0; all read back.  Both rewrites at once is a usage error. */
START_TEST(test_pack_imagefolder_restarts_by_default)
{
    char args[8192], root[4200], dir[4300];
    int rc;
    snprintf(root, sizeof root, "%s/tree", tmp);
    td_test_make_folder(root, 3, 4, 120, 90);
    static const char *const mode[] = {"", " --restart 4", " --index 0"};
    for (int r = 0; r < 3; r++) {
        snprintf(args, sizeof args, "pack --imagefolder %s -o %s/p%d%s --json",
                 root, tmp, r, mode[r]);
        char *out = trainctl(args, &rc, NULL);
        ck_assert_int_eq(rc, 0);
        json_t *j = json_loads(out, 0, NULL);
        ck_assert_ptr_nonnull(j);
        json_t *set = json_array_get(json_object_get(j, "sets"), 0);
        ck_assert_int_eq(json_integer_value(json_object_get(set, "samples")),
                         12);
        ck_assert_int_eq(json_integer_value(json_object_get(set,
                                                            "rewritten")),
                         r < 2 ? 12 : 0);
        json_decref(j);
        free(out);
        snprintf(dir, sizeof dir, "%s/p%d", tmp, r);
        ck_assert_int_eq(shard_has(dir, "TDIX", 4), r == 0);
        ck_assert_int_eq(shard_has(dir, "\xff\xdd\x00\x04", 4), r == 1);
        snprintf(args, sizeof args, "bench-input --data %s/p%d --size 64 "
                 "--augment random_resized_crop,flip --batch 4 --workers 1 "
                 "--epochs 1 --json", tmp, r);
        out = trainctl(args, &rc, NULL);
        ck_assert_int_eq(rc, 0);
        j = json_loads(out, 0, NULL);
        ck_assert_int_eq(json_integer_value(json_object_get(j, "images")), 12);
        ck_assert_int_eq(json_integer_value(json_object_get(j,
                                                            "bad_samples")), 0);
        json_decref(j);
        free(out);
    }
}
END_TEST

/* The summaries say what applies: no stray "0" after an IDX set, no
 * "quality" for an ImageFolder (issue 18). */
START_TEST(test_pack_summaries)
{
    char args[8192], root[4200];
    int rc;
    make_idx(20);
    snprintf(args, sizeof args, "pack --idx-dir %s -o %s/s", tmp, tmp);
    char *out = trainctl(args, &rc, NULL);
    ck_assert_int_eq(rc, 0);
    ck_assert_msg(strstr(out, "img/s)\ntest: ") && !strstr(out, ")0"), "%s",
                  out);
    free(out);
    snprintf(args, sizeof args, "pack --idx-dir %s -o %s/s2 --json", tmp,
             tmp);
    out = trainctl(args, &rc, NULL);
    ck_assert_int_eq(rc, 0);
    ck_assert_msg(strstr(out, "\"format\":\"png\"") &&
                  !strstr(out, "quality"), "%s", out);
    free(out);
    snprintf(root, sizeof root, "%s/tree", tmp);
    td_test_make_folder(root, 2, 2, 64, 48);
    snprintf(args, sizeof args, "pack --imagefolder %s -o %s/s3 --json", root,
             tmp);
    out = trainctl(args, &rc, NULL);
    ck_assert_int_eq(rc, 0);
    ck_assert_msg(!strstr(out, "quality"), "%s", out);
    free(out);
}
END_TEST

/* --val-fraction: DIR/train and DIR/val, stratified, each with its
 * classes.txt; IDX sets get theirs too (issue 18). */
START_TEST(test_pack_val_fraction)
{
    char args[8192], root[4200], path[4400];
    int rc;
    snprintf(root, sizeof root, "%s/vf", tmp);
    td_test_make_folder(root, 3, 10, 32, 24);
    snprintf(args, sizeof args, "pack --imagefolder %s -o %s/vfo "
             "--val-fraction 0.2 --seed 3 --json", root, tmp);
    char *out = trainctl(args, &rc, NULL);
    ck_assert_int_eq(rc, 0);
    json_t *j = json_loads(out, 0, NULL);
    ck_assert_ptr_nonnull(j);
    json_t *sets = json_object_get(j, "sets");
    ck_assert_str_eq(json_string_value(json_object_get(
                         json_array_get(sets, 1), "set")), "val");
    ck_assert_int_eq(json_integer_value(json_object_get(
                         json_array_get(sets, 0), "samples")), 24);
    ck_assert_int_eq(json_integer_value(json_object_get(
                         json_array_get(sets, 1), "samples")), 6);
    json_decref(j);
    free(out);
    for (int k = 0; k < 2; k++) {
        snprintf(path, sizeof path, "%s/vfo/%s/classes.txt", tmp,
                 k ? "val" : "train");
        FILE *f = fopen(path, "r");
        ck_assert_ptr_nonnull(f);
        char buf[128] = "";
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        buf[n] = '\0';
        fclose(f);
        ck_assert_str_eq(buf, "class0\nclass1\nclass2\n");
    }
    /* No link tree left behind. */
    snprintf(args, sizeof args, "ls -a %s/vfo", tmp);
    FILE *p = popen(args, "r");
    char ls[512] = "";
    size_t n = fread(ls, 1, sizeof ls - 1, p);
    ls[n] = '\0';
    pclose(p);
    ck_assert_msg(!strstr(ls, ".split-"), "%s", ls);
    snprintf(args, sizeof args, "pack --idx-dir %s -o %s/vfi --val-fraction "
             "0.1", tmp, tmp);
    free(trainctl(args, &rc, NULL));
    ck_assert_int_eq(rc, 2);
    make_idx(20);
    snprintf(args, sizeof args, "pack --idx-dir %s -o %s/vfi", tmp, tmp);
    free(trainctl(args, &rc, NULL));
    ck_assert_int_eq(rc, 0);
    snprintf(path, sizeof path, "%s/vfi/test/classes.txt", tmp);
    ck_assert_int_eq(access(path, R_OK), 0);
}
END_TEST

/* pack names what it leaves out and what training would refuse; PNG
 * files are images (issue 18). */
START_TEST(test_pack_lists_skipped_and_bad)
{
    char args[8192], root[4200], path[4400];
    int rc;
    snprintf(root, sizeof root, "%s/sk", tmp);
    td_test_make_folder(root, 2, 30, 32, 24);
    snprintf(path, sizeof path, "%s/class0/notes.txt", root);
    td_test_write_file(path, "hi", 2);
    snprintf(path, sizeof path, "%s/class1/fake.jpg", root);
    td_test_write_file(path, "not an image", 12);
    uint8_t px[32 * 24 * 3], *png = NULL;
    size_t cap = 0, len;
    td_test_photo(px, 32, 24, 3, 99);
    ck_assert_int_eq(td_png_encode(px, 32, 24, 3, &png, &cap, &len), 0);
    snprintf(path, sizeof path, "%s/class1/real.png", root);
    td_test_write_file(path, png, len);
    free(png);
    char *err;
    snprintf(args, sizeof args, "pack --imagefolder %s -o %s/sko --json",
             root, tmp);
    char *out = trainctl(args, &rc, &err);
    ck_assert_int_eq(rc, 0);
    fprintf(stderr, "%.3000s\n", err); /* Check's messages are short */
    ck_assert_msg(strstr(err, "skipped ") && strstr(err, "notes.txt: not "
                                                         ".jpg, .jpeg or .png"),
                  "see stderr");
    ck_assert_msg(strstr(err, "fake.jpg: unreadable (not a JPEG"), "stderr");
    ck_assert_msg(!strstr(err, "real.png"), "see stderr");
    const char *share = "1 of 62 images (1.6"; /* no per-cent sign here:
                                                 Check formats the test */
    ck_assert_msg(strstr(err, share) && strstr(err, "are unreadable") &&
                  strstr(err, "would fail"), "see stderr");
    json_t *j = json_loads(out, 0, NULL);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "skipped")), 1);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "unreadable")), 1);
    ck_assert_int_eq(json_integer_value(json_object_get(
                         json_array_get(json_object_get(j, "sets"), 0),
                         "samples")), 62);
    json_decref(j);
    free(out);
    free(err);
    /* the text says what became of the files not rewritten: the PNG and
     * the fake JPEG */
    snprintf(args, sizeof args, "pack --imagefolder %s -o %s/skt", root, tmp);
    out = trainctl(args, &rc, &err);
    ck_assert_int_eq(rc, 0);
    ck_assert_msg(strstr(out, "; 60 rewritten with a crop index, 2 copied as "
                              "they are (PNGs, unreadable files, JPEGs over "
                              "64 Mpx)\n"), "%s", out);
    free(out);
    free(err);
    /* As pack said: the input pipeline fails on these shards, on the fake
     * JPEG alone (the PNG decodes). */
    snprintf(args, sizeof args, "bench-input --data %s/sko --size 24 "
             "--augment random_resized_crop,flip --batch 4 --workers 1 "
             "--epochs 1", tmp);
    out = trainctl(args, &rc, &err);
    ck_assert_int_ne(rc, 0);
    fprintf(stderr, "%.2000s\n", err);
    ck_assert_msg(strstr(err, ":000000") || strstr(err, "bad sample"),
                  "see stderr");
    ck_assert_msg(!strstr(err, "PNG"), "see stderr");
    free(err);
    free(out);
}
END_TEST

/* Runs `trainctl ARGS` on a pseudo-terminal (util-linux script): stdout
 * and stderr as the terminal got them; *rc the exit status. */
static char *on_a_terminal(const char *args, int *rc)
{
    const char *b = getenv("TD_BUILD_ROOT");
    char *cmd;
    ck_assert_int_gt(asprintf(&cmd, "script -qec '%s/client/trainctl %s' "
                              "/dev/null", b ? b : "build", args), 0);
    char *out = td_test_capture(cmd, rc);
    free(cmd);
    return out;
}

/* The long local operations show progress on stderr on a terminal,
 * erased before their summary, which stays one whole line (the JSON one
 * too): pack's check of every file of an ImageFolder (silent before) and
 * bench-input's images (silent before). Off a terminal stderr is empty. */
START_TEST(test_progress_on_a_terminal)
{
    if (access("/usr/bin/script", X_OK) != 0) {
        printf("skipped: util-linux script not installed\n");
        return;
    }
    char args[8192], root[4200], *err;
    int rc;
    snprintf(root, sizeof root, "%s/tree", tmp);
    td_test_make_folder(root, 3, 4, 120, 90);
    snprintf(args, sizeof args, "pack --imagefolder %s -o %s/p --json", root,
             tmp);
    char *out = on_a_terminal(args, &rc);
    ck_assert_int_eq(rc, 0);
    ck_assert_msg(strstr(out, "\r\033[Kchecking: 0/12 images (0%)"), "%s",
                  out);
    ck_assert_msg(strstr(out, "\r\033[K\r"), "not erased: %s", out);
    /* the packing itself, on the same line (it had a bar of its own) */
    ck_assert_msg(strstr(out, "\r\033[Kimagefolder: 12/12 images (100%)"),
                  "%s", out);
    ck_assert_msg(!strstr(out, "[###"), "%s", out);
    ck_assert_msg(strstr(out, "\r\033[K{\"sets\":[{\"set\":\"imagefolder\""),
                  "the JSON summary does not follow the erased line: %s", out);
    free(out);
    snprintf(args, sizeof args, "bench-input --data %s/p --size 32 --batch 4 "
             "--workers 1 --epochs 2 --json", tmp);
    out = on_a_terminal(args, &rc);
    ck_assert_int_eq(rc, 0);
    ck_assert_msg(strstr(out, "\r\033[Kbench-input: 0/24 images (0%)") &&
                  strstr(out, "\r\033[Kbench-input: 24/24 images (100%)"),
                  "%s", out);
    ck_assert_msg(strstr(out, "\r\033[K{\"images_per_s\":"), "%s", out);
    free(out);
    out = trainctl(args, &rc, &err);
    ck_assert_int_eq(rc, 0);
    ck_assert_str_eq(err, "");
    json_t *j = json_loads(out, 0, NULL);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "images")), 24);
    json_decref(j);
    free(out);
    free(err);
}
END_TEST

START_TEST(test_cli_errors)
{
    char args[8192], *err;
    int rc;
    free(trainctl("pack -o /tmp/x", &rc, NULL));
    ck_assert_int_eq(rc, 2); /* no source */
    snprintf(args, sizeof args, "pack --idx-dir %s/none -o %s/o", tmp, tmp);
    free(trainctl(args, &rc, &err));
    ck_assert_int_eq(rc, 1);
    ck_assert_ptr_nonnull(strstr(err, "lacks the MNIST file set"));
    free(err);
    /* with --json the failure is JSON on stdout (it was stderr alone) */
    static const char *const fails[][3] = {
        {"pack --idx-dir", "/none -o /tmp/none --json", "lacks the MNIST"},
        {"bench-input --data", "/missing --json", "missing"},
    };
    for (size_t i = 0; i < 2; i++) {
        snprintf(args, sizeof args, "%s %s%s", fails[i][0], tmp, fails[i][1]);
        char *out = trainctl(args, &rc, &err);
        ck_assert_int_eq(rc, 1);
        ck_assert_str_eq(err, "");
        json_t *j = json_loads(out, 0, NULL);
        json_t *e = json_object_get(j, "error");
        ck_assert_msg(e, "%s: not a JSON error: '%s'", args, out);
        ck_assert_str_eq(json_string_value(json_object_get(e, "class")),
                         "failed");
        ck_assert_ptr_nonnull(strstr(json_string_value(json_object_get(
                                         e, "desc")), fails[i][2]));
        json_decref(j);
        free(out);
        free(err);
    }
    snprintf(args, sizeof args, "bench-input --data %s/missing", tmp);
    free(trainctl(args, &rc, &err));
    ck_assert_int_eq(rc, 1);
    ck_assert_ptr_nonnull(strstr(err, "missing"));
    free(err);
    snprintf(args, sizeof args, "bench-input --data %s --augment rotate", tmp);
    free(trainctl(args, &rc, &err));
    ck_assert_int_eq(rc, 2);
    ck_assert_ptr_nonnull(strstr(err, "unknown augmentation 'rotate'"));
    free(err);
    /* Numbers are whole words in range: these were taken as 224, 0x0,
     * seed 0, quality 50 and a 1 MiB shard size (and 1e30 MiB wrapped
     * in a uint64). */
    static const char *bad[][2] = {
        {"bench-input --data", "--size 224abc"},
        {"bench-input --data", "--size 0x0"},
        {"bench-input --data", "--seed abc"},
        {"pack --idx-dir", "-o o --quality 50abc"},
        {"pack --idx-dir", "-o o --shard-size 1x"},
        {"pack --idx-dir", "-o o --shard-size 1e30"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(args, sizeof args, "%s %s %s", bad[i][0], tmp, bad[i][1]);
        free(trainctl(args, &rc, &err));
        ck_assert_msg(rc == 2, "%s: exit %d: %s", args, rc, err);
        free(err);
    }
}
END_TEST

static Suite *cli_suite(void)
{
    Suite *s = suite_create("cli_pipeline");
    TCase *tc = tcase_create("cli");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_pack_idx_dir_json_then_bench_input);
    tcase_add_test(tc, test_bench_input_spec_is_the_job);
    tcase_add_test(tc, test_pack_imagefolder_restarts_by_default);
    tcase_add_test(tc, test_pack_index_and_restart_conflict);
    tcase_add_test(tc, test_pack_summaries);
    tcase_add_test(tc, test_pack_val_fraction);
    tcase_add_test(tc, test_pack_lists_skipped_and_bad);
    tcase_add_test(tc, test_cli_errors);
    tcase_add_test(tc, test_progress_on_a_terminal);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(cli_suite)
