/* cmd_bench_input.c - `trainctl bench-input`: the input pipeline alone at
 * full speed (the input ceiling, docs/design.md#the-step-loop), with the
 * per-stage split.
 *
 *   trainctl bench-input --data PATH [--size N|HxW] [--channels 1|3]
 *       [--augment random_resized_crop,flip] [--workers N] [--batch N]
 *       [--epochs N] [--prefetch N] [--seed N] [--layout nhwc|nchw]
 *       [--eval] [--spec job.json] [--json]
 * --spec reads data.train, input.size/channels/workers/prefetch/augment,
 * batch_size and seed from a job spec; later options override it.
 * Runs locally (no daemon).  On a terminal, stderr shows the images taken
 * so far and the rate (progress.h) until the summary.
 */
#include <jansson.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "cli.h"
#include "commands.h"
#include "input/pipeline.h"
#include "job/runner.h"
#include "job/spec.h"
#include "progress.h"

static void td__bi_usage(FILE *f)
{
    fprintf(f,
        "usage: trainctl bench-input --data PATH [--size N|HxW] "
        "[--channels 1|3]\n"
        "         [--augment LIST] [--workers N] [--batch N] [--epochs N]\n"
        "         [--prefetch N] [--seed N] [--layout nhwc|nchw] [--eval]\n"
        "         [--spec job.json] [--json]\n\n"
        "Runs the input pipeline alone as fast as it goes and prints "
        "images/s and where\nthe time went (read, decode, augment, waiting "
        "for a free slot, consumer wait).\n"
        "Defaults: --size 224 --channels 3 --workers <online CPUs> --batch "
        "128 --epochs 1\n"
        "--prefetch 2 x workers --augment none (whole image resized).\n"
        "LIST: comma-separated among random_resized_crop, pad_crop, "
        "center_crop, resize,\nflip, color_jitter (default parameters).\n");
}

/* 0, or 1 for a bad value (td__bi_value's code: the caller names it) */
static int td__int_arg(const char *v, int lo, int hi, int *out)
{
    char *end;
    long x = strtol(v, &end, 10);
    if (end == v || *end || x < lo || x > hi)
        return 1;
    *out = (int)x;
    return 0;
}

struct td__bi {
    td_pipeline_config c;
    char *data;
    int json, epochs, prefetch_set;
};

/* --spec: the fields of a job spec the pipeline uses, parsed as a job's
 * (the same checks and defaults, the augment ops as the job trains with
 * them; relative paths against the file's folder). */
static int td__bi_spec(const char *path, struct td__bi *o)
{
    td_pipeline_config *c = &o->c;
    char err[512];
    td_job_spec s;
    int rc = td_spec_load_file(path, NULL, 0, &s, err, sizeof err);
    if (rc) { /* a file's problems name it, a field's do not */
        int named = strncmp(err, path, strlen(path)) == 0;
        fprintf(stderr, "trainctl bench-input: %s%s%s\n", named ? "" : path,
                named ? "" : ": ", err[0] ? err : td_strerror(rc));
        return -1;
    }
    if (s.data.train.n > 0) {
        if (s.data.train.n > 1)
            fprintf(stderr, "trainctl bench-input: %s: data.train has %d "
                    "entries; reading the first, %s\n", path,
                    s.data.train.n, s.data.train.v[0]);
        free(o->data);
        o->data = strdup(s.data.train.v[0]);
    }
    c->size[0] = s.input.size[0];
    c->size[1] = s.input.size[1];
    c->channels = s.input.channels;
    if (s.input.workers != TD_SPEC_AUTO)
        c->workers = s.input.workers;
    if (s.input.prefetch != TD_SPEC_AUTO) {
        c->prefetch = s.input.prefetch;
        o->prefetch_set = 1;
    }
    c->batch_size = s.batch_size;
    c->seed = s.seed;
    rc = td_runner_augments(&s, c->augment, &c->n_augment, err, sizeof err);
    if (rc)
        fprintf(stderr, "trainctl bench-input: %s: %s\n", path, err);
    td_spec_free(&s);
    return rc ? -1 : 0;
}

static void td__bi_print(const td_pipeline_stats *st, int64_t images,
                         double secs, int epochs,
                         const td_pipeline_config *c, int json)
{
    int batch = c->batch_size;
    char aug[256] = "none";
    for (int i = 0, n = 0; i < c->n_augment; i++)
        n += snprintf(aug + n, sizeof aug - (size_t)n, "%s%s", i ? "," : "",
                      td_augment_name(c->augment[i].op));
    /* ns summed over workers -> us per image */
    double per = st->samples > 0 ? 1e-3 / (double)st->samples : 0;
    if (json) {
        json_t *o = json_pack(
            "{s:f, s:I, s:f, s:I, s:i, s:i, s:i, s:i, s:[i, i], s:s,"
            " s:{s:f, s:f, s:f, s:f, s:f}, s:{s:f, s:f, s:f}}",
            "images_per_s", secs > 0 ? (double)images / secs : 0.0, "images",
            (json_int_t)images, "seconds", secs, "bad_samples",
            (json_int_t)st->bad_samples, "workers", st->workers, "batch",
            batch, "epochs", epochs, "prefetch", st->prefetch, "size",
            c->size[0], c->size[1], "augment", aug, "stages",
            "read_s", td_ns_to_s(st->read_ns), "decode_s",
            td_ns_to_s(st->decode_ns), "augment_s",
            td_ns_to_s(st->augment_ns), "slot_wait_s",
            td_ns_to_s(st->slot_wait_ns), "consumer_wait_s",
            td_ns_to_s(st->consumer_wait_ns), "per_image_us", "read",
            (double)st->read_ns * per, "decode", (double)st->decode_ns * per,
            "augment", (double)st->augment_ns * per);
        char *s = json_dumps(o, JSON_COMPACT);
        puts(s);
        free(s);
        json_decref(o);
        return;
    }
    printf("bench-input: %lld images in %.2f s (%d epoch%s, batch %d, %d "
           "worker%s, prefetch %d): %.1f images/s\n", (long long)images, secs,
           epochs, epochs == 1 ? "" : "s", batch, st->workers,
           st->workers == 1 ? "" : "s", st->prefetch,
           secs > 0 ? (double)images / secs : 0.0);
    printf("  %dx%d, augment %s\n", c->size[0], c->size[1], aug);
    printf("  per image, summed over workers: read %.1f us, decode %.1f us, "
           "augment %.1f us\n", (double)st->read_ns * per,
           (double)st->decode_ns * per, (double)st->augment_ns * per);
    printf("  workers waited for a free slot %.3f s; the consumer waited "
           "%.3f s; bad samples %lld\n", td_ns_to_s(st->slot_wait_ns),
           td_ns_to_s(st->consumer_wait_ns), (long long)st->bad_samples);
}


/* One option that takes a value.  0 ok, 1 bad value or unknown option,
 * 2 a --spec that failed (already reported). */
static int td__bi_value(struct td__bi *o, const char *a, const char *v,
                        char *err, size_t ecap)
{
    td_pipeline_config *c = &o->c;
    int h, w, n;
    if (strcmp(a, "--data") == 0) {
        free(o->data);
        o->data = strdup(v);
        return 0;
    }
    if (strcmp(a, "--spec") == 0)
        return td__bi_spec(v, o) ? 2 : 0;
    if (strcmp(a, "--size") == 0) {
        /* N or HxW, each 1..8192, the whole word ("224abc" was 224) */
        char hs[32], *x = strchr(v, 'x');
        snprintf(hs, sizeof hs, "%.*s", x ? (int)(x - v) : 31, v);
        if (td__int_arg(hs, 1, 8192, &h) ||
            td__int_arg(x ? x + 1 : hs, 1, 8192, &w))
            return 1;
        c->size[0] = h;
        c->size[1] = w;
        return 0;
    }
    if (strcmp(a, "--augment") == 0) {
        n = td_augment_parse_list(v, c->augment, TD_AUG_MAX, err, ecap);
        c->n_augment = n < 0 ? 0 : n;
        return n < 0;
    }
    if (strcmp(a, "--layout") == 0) {
        c->layout = strcmp(v, "nchw") == 0 ? TD_LAYOUT_NCHW : TD_LAYOUT_NHWC;
        return strcmp(v, "nhwc") != 0 && strcmp(v, "nchw") != 0;
    }
    if (strcmp(a, "--seed") == 0) {
        char *end;
        errno = 0;
        c->seed = strtoull(v, &end, 10);
        return !*v || *end || errno || v[0] == '-';
    }
    o->prefetch_set |= strcmp(a, "--prefetch") == 0;
    return strcmp(a, "--channels") == 0 ? td__int_arg(v, 1, 3, &c->channels)
           : strcmp(a, "--workers") == 0 ? td__int_arg(v, 1, 64, &c->workers)
           : strcmp(a, "--batch") == 0
               ? td__int_arg(v, 1, 65536, &c->batch_size)
           : strcmp(a, "--epochs") == 0
               ? td__int_arg(v, 1, 1000000, &o->epochs)
           : strcmp(a, "--prefetch") == 0
               ? td__int_arg(v, 1, 1024, &c->prefetch)
               : 1;
}

/* Parses argv into o.  -1: go on; else the exit code to return. */
static int td__bi_args(int argc, char **argv, struct td__bi *o)
{
    char err[512] = "";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--json") == 0) {
            o->json = 1;
        } else if (strcmp(a, "--eval") == 0) {
            o->c.train = 0;
            o->c.drop_last = 0;
        } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            td__bi_usage(stdout);
            return TD_EXIT_OK;
        } else {
            int rc = v ? td__bi_value(o, a, v, err, sizeof err) : 1;
            if (rc == 1)
                fprintf(stderr, "trainctl bench-input: bad or unknown "
                        "argument '%s%s%s'%s%s\n", a, v ? " " : "",
                        v ? v : "", err[0] ? ": " : "", err);
            if (rc)
                return TD_EXIT_USAGE;
            i++;
        }
    }
    if (!o->data) {
        fprintf(stderr, "trainctl bench-input: --data PATH is required (or "
                        "--spec with data.train)\nRun 'trainctl bench-input "
                        "--help' for usage.\n");
        return TD_EXIT_USAGE;
    }
    return -1;
}

static void td__bi_progress(void *user, int64_t done, int64_t total)
{
    td_progress_count(user, "bench-input", done, total, "images");
}

int td_cmd_bench_input(int argc, char **argv)
{
    struct td__bi o = {.epochs = 1};
    char err[512] = "";
    td_pipeline_config_default(&o.c);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    o.c.workers = cpus < 1 ? 1 : cpus > 64 ? 64 : (int)cpus;
    int rc = td__bi_args(argc, argv, &o);
    if (rc >= 0) {
        free(o.data);
        return rc;
    }
    if (!o.prefetch_set)
        o.c.prefetch = 2 * o.c.workers;
    o.c.data = o.data;
    td_pipeline *p;
    td_cli cli = {.cmd = "bench-input", .json = o.json}; /* for refusals */
    rc = td_pipeline_create(&o.c, &p, err, sizeof err);
    if (rc) {
        free(o.data);
        return td_cli_refuse(&cli, TD_CLI_ERR_FAILED, "%s",
                             err[0] ? err : td_strerror(rc));
    }
    int64_t images = 0;
    double secs = 0;
    td_progress pr; /* on a terminal: the images taken so far (stderr) */
    td_progress_init(&pr);
    rc = td_pipeline_drain_progress(p, 0, o.epochs, &images, &secs,
                                    td__bi_progress, &pr);
    td_progress_clear(&pr); /* the summary follows */
    td_pipeline_stats st;
    td_pipeline_stats_get(p, &st);
    td_pipeline_destroy(p);
    free(o.data);
    if (rc)
        return td_cli_refuse(&cli, TD_CLI_ERR_FAILED, "the pipeline failed: "
                             "%s", td_strerror(rc));
    td__bi_print(&st, images, secs, o.epochs, &o.c, o.json);
    return TD_EXIT_OK;
}
