/* test_run.c - `traind --run JOB.json` as a user runs it: JSON lines per
 * window and epoch and a final done line, exit 0; a bad job file, missing
 * data, or anything else `trainctl submit` refuses exit 3 before it
 * starts, with the daemon's message naming the problem.  Runs the built
 * traind binary on a small generated dataset (12x12, 10 classes), written
 * as IDX files and packed into shards by the built trainctl. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <jansson.h>

#include "base/rng.h"
#include "tdtest.h"

static char dir[64];

static void write_idx(const char *name, int ndims, const uint32_t *dims,
                      const uint8_t *data, size_t n)
{
    char path[256];
    uint8_t hdr[16] = {0, 0, 8, (uint8_t)ndims};
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    for (int i = 0; i < ndims; i++) {
        hdr[4 + 4 * i] = (uint8_t)(dims[i] >> 24);
        hdr[5 + 4 * i] = (uint8_t)(dims[i] >> 16);
        hdr[6 + 4 * i] = (uint8_t)(dims[i] >> 8);
        hdr[7 + 4 * i] = (uint8_t)dims[i];
    }
    fwrite(hdr, 1, 4 + 4 * (size_t)ndims, f);
    fwrite(data, 1, n, f);
    fclose(f);
}

/* n samples: class k is a bright square at one of 10 places. */
static void write_set(const char *prefix, uint32_t n, uint64_t seed)
{
    uint8_t *px = calloc((size_t)n * 144, 1), *lab = malloc(n);
    for (uint32_t i = 0; i < n; i++) {
        int k = (int)td_rng_below(seed, 1, i, 10);
        lab[i] = (uint8_t)k;
        for (int y = 0; y < 3; y++)
            for (int x = 0; x < 3; x++)
                px[(size_t)i * 144 + (2 + (k / 5) * 6 + y) * 12 +
                   1 + (k % 5) * 2 + x] = 220;
    }
    char name[64];
    uint32_t idims[3] = {n, 12, 12}, ldims[1] = {n};
    snprintf(name, sizeof name, "%s-images-idx3-ubyte", prefix);
    write_idx(name, 3, idims, px, (size_t)n * 144);
    snprintf(name, sizeof name, "%s-labels-idx1-ubyte", prefix);
    write_idx(name, 1, ldims, lab, n);
    free(px);
    free(lab);
}

static void pack(const char *prefix)
{
    const char *bld = getenv("TD_BUILD_ROOT");
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s/client/trainctl pack --idx-images "
             "%s/%s-images-idx3-ubyte --idx-labels %s/%s-labels-idx1-ubyte "
             "-o %s/%s --json >/dev/null", bld ? bld : ".", dir, prefix, dir,
             prefix, dir, prefix);
    ck_assert_int_eq(system(cmd), 0);
}

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/td_run_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    write_set("train", 256, 1);
    write_set("val", 100, 2);
    pack("train");
    pack("val");
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* Writes a job file with `extra` spliced into the top level (it names
 * epochs and optimizer) and `data` as its data section (NULL: train from
 * `train`, val from val); runs traind on it with `args` added (may be
 * ""); returns the exit status and the output (stdout + stderr). */
static int run_data(const char *extra, const char *data, const char *train,
                    const char *args, char *out, size_t cap)
{
    const char *src = getenv("TD_SOURCE_ROOT"), *bld = getenv("TD_BUILD_ROOT");
    char job[128], cmd[1024], d[512];
    if (data)
        snprintf(d, sizeof d, "%s", data);
    else
        snprintf(d, sizeof d, "{\"train\": \"%s/%s\", \"val\": "
                 "\"%s/val\", \"classes\": 10}", dir, train, dir);
    snprintf(job, sizeof job, "%s/job.json", dir);
    FILE *f = fopen(job, "w");
    fprintf(f, "{\"name\": \"t\", %s \"data\": %s, \"model\": "
            "\"%s/config/models/fmnist-cnn.json\", \"input\": {\"size\": "
            "[12, 12], \"channels\": 1, \"workers\": 2, \"normalize\":"
            " {\"mean\": [0.1], \"std\": [0.3]}},"
            " \"metrics\": {\"warmup_steps\": 0, \"window_steps\": 4},"
            " \"batch_size\": 32, \"threads\": 1}\n", extra, d,
            src ? src : ".");
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s/daemon/traind --run %s --json %s 2>&1",
             bld ? bld : ".", job, args);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The usual job: 2 epochs, cosine after 4 warm-up steps, then `extra`. */
static int run(const char *extra, const char *train, char *out, size_t cap)
{
    char x[512];
    snprintf(x, sizeof x, "%s \"epochs\": 2, \"optimizer\": {\"lr\": "
             "0.05, \"schedule\": {\"type\": \"cosine\", \"warmup_steps\":"
             " 4}},", extra);
    return run_data(x, NULL, train, "", out, cap);
}

static int count(const char *s, const char *what)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, what)); p++)
        n++;
    return n;
}

START_TEST(test_run_prints_windows_epochs_done)
{
    static char out[65536];
    int rc = run("", "train", out, sizeof out);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    /* 16 steps, room for 4 windows of 4: at least 5 windows, of 3 */
    ck_assert_int_eq(count(out, "\"event\":\"window\""), 5);
    ck_assert_int_eq(count(out, "\"event\":\"epoch\""), 2);
    const char *done = strstr(out, "{\"event\":\"done\"");
    ck_assert_msg(done != NULL, "%s", out);
    ck_assert_ptr_nonnull(strstr(done, "\"epochs\":2"));
    ck_assert_ptr_nonnull(strstr(done, "\"steps\":16"));
    ck_assert_ptr_nonnull(strstr(done, "\"samples_per_s\":"));
    ck_assert_ptr_nonnull(strstr(done, "\"val_acc\":"));
}
END_TEST

START_TEST(test_run_rejects_unknown_key)
{
    static char out[65536];
    int rc = run("\"optimiser\": {},", "train", out, sizeof out);
    ck_assert_int_eq(rc, 3); /* refused before it started */
    ck_assert_msg(strstr(out, "optimiser: unknown key") != NULL, "%s", out);
    /* nothing ran: the one JSON line is the refusal */
    ck_assert_int_eq(count(out, "\"event\""), 1);
    ck_assert_int_eq(count(out, "{\"event\":\"error\",\"data\":{\"class\":"
                               "\"invalid_spec\""), 1);
}
END_TEST

START_TEST(test_run_names_missing_data)
{
    static char out[65536];
    int rc = run("", "nothere", out, sizeof out);
    ck_assert_int_eq(rc, 3);
    ck_assert_msg(strstr(out, "data.train: ") && strstr(out, "/nothere") &&
                  strstr(out, "No such file or directory"), "%s", out);
}
END_TEST

/* out (stderr, then stdout, of --json) is want on stderr, then the same
 * message as the one JSON line, {"event":"error",...}. */
static void refused_as(const char *out, const char *want)
{
    size_t n = strlen(want);
    ck_assert_msg(strncmp(out, want, n) == 0, "%s", out);
    json_t *e = json_loads(out + n, 0, NULL);
    json_t *d = json_object_get(e, "data");
    ck_assert_msg(e && strcmp(json_string_value(json_object_get(e, "event")),
                              "error") == 0, "%s", out + n);
    ck_assert_str_eq(json_string_value(json_object_get(d, "class")),
                     "invalid_spec");
    /* the same words, without "traind: " and the newline */
    ck_assert_int_eq(strncmp(json_string_value(json_object_get(d, "desc")),
                             want + 8, n - 9), 0);
    json_decref(e);
}

/* What `trainctl submit` refuses, traind --run refuses before it starts,
 * with the same message and exit status 3 (TD_RUN_REFUSED): nothing
 * runs. */
START_TEST(test_run_refuses_what_submit_refuses)
{
    static char out[65536];
    char want[1024];
    /* 256 samples in batches of 32, 2 epochs: the run is 16 steps */
    const char *sched = "\"epochs\": 2, \"optimizer\": {\"lr\": 0.05, "
                        "\"schedule\": {\"warmup_steps\": 16}},";
    int rc = run_data(sched, NULL, "train", "", out, sizeof out);
    snprintf(want, sizeof want, "traind: %s/job.json: optimizer.schedule."
             "warmup_steps: 16, but the run has 16 steps (2 epochs x 8 steps "
             "of batch_size 32 from the 256 samples of data.train): the "
             "learning rate would never leave the warm-up (set it below "
             "16, or train more epochs)\n", dir);
    ck_assert_int_eq(rc, 3);
    refused_as(out, want);
    /* synthetic input, 100 steps an epoch: the daemon's words
     * (test_daemon); --steps makes the epoch longer */
    const char *synth = "\"epochs\": 1, \"optimizer\": {\"lr\": 0.05, "
                        "\"schedule\": {\"warmup_steps\": 100}},";
    rc = run_data(synth, NULL, "train", "--set input.source=synthetic", out,
                  sizeof out);
    snprintf(want, sizeof want, "traind: %s/job.json: optimizer.schedule."
             "warmup_steps: 100, but the run has 100 steps (1 epoch x 100 "
             "steps of synthetic input): the learning rate would never leave "
             "the warm-up (set it below 100, or train more epochs)\n", dir);
    ck_assert_int_eq(rc, 3);
    refused_as(out, want);
    rc = run_data(synth, NULL, "train", "--set input.source=synthetic "
                  "--steps 101 --set device=cuda:15", out, sizeof out);
    ck_assert_int_eq(rc, 3); /* past the warm-up, to the device */
    ck_assert_msg(strstr(out, "device: ") && strstr(out, "cuda:15") &&
                  strstr(out, "not available"), "%s", out);
    /* a batch larger than the data: failed at start, now refused before */
    rc = run_data(sched, NULL, "train", "--set batch_size=257", out,
                  sizeof out);
    ck_assert_int_eq(rc, 3);
    ck_assert_msg(strstr(out, "batch_size: 257 is more than the 256 samples "
                         "of data.train: a training epoch drops its last "
                         "partial batch, so no step would run"), "%s", out);
    /* nothing ran: no event but the refusal */
    ck_assert_int_eq(count(out, "\"event\""), 1);
    ck_assert_int_eq(count(out, "\"event\":\"error\""), 1);
}
END_TEST

/* The run's length as the check counts it is the one the run has: a
 * held-out share (stratified by class, so not simply a fraction) leaves
 * some samples, in whole batches; the refusal names the count, and one
 * warm-up step fewer runs exactly that many steps. */
START_TEST(test_run_length_is_the_runs)
{
    static char out[65536];
    char data[256], extra[256];
    snprintf(data, sizeof data, "{\"train\": \"%s/train\", "
             "\"val_fraction\": 0.3, \"classes\": 10}", dir);
    int rc = run_data("\"epochs\": 3, \"optimizer\": {\"lr\": 0.05, "
                      "\"schedule\": {\"warmup_steps\": 1000}},", data,
                      NULL, "", out, sizeof out);
    ck_assert_int_eq(rc, 3);
    long long steps = 0, per = 0;
    size_t left = 0;
    const char *p = strstr(out, "but the run has ");
    ck_assert_msg(p && sscanf(p, "but the run has %lld steps (3 epochs x "
                              "%lld steps of batch_size 32 from the %zu "
                              "samples of data.train left after "
                              "data.val_fraction 0.3)", &steps, &per,
                              &left) == 3, "%s", out);
    ck_assert_int_eq(per, (long long)(left / 32));
    ck_assert_int_eq(steps, 3 * per);
    ck_assert(left < 256 && left > 128);
    snprintf(extra, sizeof extra, "\"epochs\": 3, \"optimizer\": "
             "{\"lr\": 0.05, \"schedule\": {\"warmup_steps\": %lld}},",
             steps - 1);
    rc = run_data(extra, data, NULL, "", out, sizeof out);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    const char *done = strstr(out, "{\"event\":\"done\"");
    ck_assert_msg(done != NULL, "%s", out);
    char want[64];
    snprintf(want, sizeof want, "\"steps\":%lld,", steps);
    ck_assert_msg(strstr(done, want), "%s in %s", want, done);
}
END_TEST

static Suite *run_suite(void)
{
    Suite *s = suite_create("run");
    TCase *tc = tcase_create("run");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_run_prints_windows_epochs_done);
    tcase_add_test(tc, test_run_rejects_unknown_key);
    tcase_add_test(tc, test_run_names_missing_data);
    tcase_add_test(tc, test_run_refuses_what_submit_refuses);
    tcase_add_test(tc, test_run_length_is_the_runs);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(run_suite)
