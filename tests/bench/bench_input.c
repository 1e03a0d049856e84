/* bench_input.c - the input pipeline against the decoder's own limit.
 *
 * Generates photo-like JPEGs (300-500 px on the shorter side, quality 90,
 * 4:2:0), packs them into a shard, then alternates, `runs` times:
 *   A: a plain full-image tjDecompress2 loop over the same JPEGs (RGB), one
 *      thread: the decoder's limit per core;
 *   B: the pipeline, random_resized_crop to 224 + flip into uint8 NHWC
 *      batches of 64, with each worker count asked for.
 * Prints images/s per run, then median, min and max.  Warm-up excluded:
 * one untimed pass (A) and one untimed epoch (B) before the timed ones.
 * Pin to one core with `taskset -c 1` for per-core figures.
 *
 *   bench_input [--images N] [--runs N] [--workers 1,2] [--epochs N]
 *               [--index N | --restart N] [--keep DIR]
 * --keep DIR writes the images (DIR/tree) and shards (DIR/shards) there
 * and keeps them, e.g. for scripts/bench_torch_input.py.
 * --index N packs with a crop index every <= N MCUs (pack.h; default 2, as
 * `trainctl pack`), --restart N with restart markers instead, --index 0
 * copies the files as they are; A and B read the packed files, and A is
 * also timed, for reference, on the original files.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#include "base/clock.h"
#include "input/dataset.h"
#include "base/fsio.h"
#include "input/pack.h"
#include "input/pipeline.h"
#include "support/jpeggen.h"

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void report(const char *what, double *v, int n, const char *unit)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    printf("%-34s median %8.2f %s  (min %.2f, max %.2f, %d runs)\n", what,
           v[n / 2], unit, v[0], v[n - 1], n);
}

/* A: full decodes of every image, `passes` times. */
static double tj_loop(td_dataset *ds, int passes, uint8_t *out)
{
    tjhandle tj = tjInitDecompress();
    td_buf scratch = {0};
    size_t n = td_dataset_count(ds);
    int64_t t0 = td_now_ns();
    for (int p = 0; p < passes; p++)
        for (size_t i = 0; i < n; i++) {
            const uint8_t *d;
            size_t len;
            int w, h, sub, cs;
            td_dataset_read(ds, i, &scratch, &d, &len);
            if (tjDecompressHeader3(tj, d, len, &w, &h, &sub, &cs) ||
                tjDecompress2(tj, d, len, out, w, 0, h, TJPF_RGB, 0)) {
                fprintf(stderr, "tjDecompress2: %s\n", tjGetErrorStr2(tj));
                exit(1);
            }
        }
    double s = td_elapsed_s(t0);
    tjDestroy(tj);
    td_buf_free(&scratch);
    return (double)(n * (size_t)passes) / s;
}

/* Resident set in KiB (VmRSS), or -1. */
static long rss_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "VmRSS:", 6) == 0)
            kib = atol(line + 6);
    if (f)
        fclose(f);
    return kib;
}

static long rss_growth = 0, rss_after_warmup = 0;
static double last_cpu_rate; /* images per CPU second of the last pipe_run */

/* CPU seconds used by the whole process (all threads). */
static double cpu_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static double pipe_run(const char *shards, int workers, int epochs,
                       td_pipeline_stats *st)
{
    td_pipeline_config c;
    td_pipeline *p;
    char err[512];
    td_pipeline_config_default(&c);
    c.data = shards;
    c.batch_size = 64;
    c.workers = workers;
    c.prefetch = 2 * workers + 2;
    td_augment_default(&c.augment[0], TD_AUG_RANDOM_RESIZED_CROP);
    td_augment_default(&c.augment[1], TD_AUG_FLIP);
    c.n_augment = 2;
    if (td_pipeline_create(&c, &p, err, sizeof err)) {
        fprintf(stderr, "pipeline: %s\n", err);
        exit(1);
    }
    int64_t images;
    double s;
    if (td_pipeline_drain(p, 0, 1, NULL, NULL)) {      /* warm-up epoch */
        fprintf(stderr, "pipeline failed\n");
        exit(1);
    }
    rss_after_warmup = rss_kib();
    double c0 = cpu_s();
    if (td_pipeline_drain(p, 1, epochs, &images, &s)) {
        fprintf(stderr, "pipeline failed\n");
        exit(1);
    }
    last_cpu_rate = (double)images / (cpu_s() - c0);
    rss_growth = rss_kib() - rss_after_warmup;
    td_pipeline_stats_get(p, st);
    td_pipeline_destroy(p);
    return (double)images / s;
}

int main(int argc, char **argv)
{
    int nimg = 384, runs = 3, epochs = 2, wl[8] = {1, 2}, nw = 2, rst = 0;
    int idx = -1; /* default: 2 as `trainctl pack`, 0 with --restart N */
    const char *keep = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--images") == 0)
            nimg = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--runs") == 0)
            runs = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--keep") == 0)
            keep = argv[i + 1];
        else if (strcmp(argv[i], "--restart") == 0)
            rst = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--index") == 0)
            idx = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--epochs") == 0)
            epochs = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--workers") == 0) {
            nw = 0;
            for (char *t = strtok(argv[i + 1], ","); t && nw < 8;
                 t = strtok(NULL, ","))
                wl[nw++] = atoi(t);
        }
    }
    if (idx < 0)
        idx = rst > 0 ? 0 : 2;
    if (runs < 1 || runs > 50 || nimg < 64 || nw < 1 ||
        (idx > 0 && rst > 0)) {
        fprintf(stderr, "usage: bench_input [--images N>=64] [--runs 1-50] "
                        "[--workers 1,2] [--epochs N] [--index N | "
                        "--restart N] [--keep DIR]\n");
        return 2;
    }
    char *tmp = keep ? strdup(keep) : td_test_tmpdir("bench-input");
    char dir[4096], shards[4096];
    snprintf(dir, sizeof dir, "%s/tree/c0", tmp);
    td_mkdirs(dir, 0755);
    for (int i = 0; i < nimg; i++) {
        int h = 300 + (i * 53) % 201, w = h * (4 + i % 3) / 4;
        uint8_t *j;
        size_t n;
        char path[4200];
        td_test_jpeg(w, h, TD_TEST_RGB, 420, 90, 0, (uint32_t)i, &j, &n);
        snprintf(path, sizeof path, "%s/%04d.jpg", dir, i);
        td_test_write_file(path, j, n);
        free(j);
    }
    snprintf(dir, sizeof dir, "%s/tree", tmp);
    snprintf(shards, sizeof shards, "%s/shards", tmp);
    td_pack_options o;
    td_pack_result r;
    td_dataset *ds;
    char err[512];
    td_dataset *orig = NULL;
    td_pack_options_default(&o);
    o.restart = rst;
    o.index = idx;
    if (td_pack_folder(dir, shards, &o, &r, err, sizeof err) ||
        td_dataset_open(shards, &ds, err, sizeof err) ||
        ((rst || idx) && td_dataset_open(dir, &orig, err, sizeof err))) {
        fprintf(stderr, "bench_input: %s\n", err);
        return 1;
    }
    printf("bench_input: %d photo-like JPEGs, shorter side 300-500 px, q90 "
           "4:2:0, %.1f KiB mean per packed sample; %s %d MCUs (%zu "
           "files); rrc 224 + flip, batch 64, %d epoch(s) timed after 1 "
           "warm-up\n", nimg, (double)r.bytes / nimg / 1024.0,
           idx ? "crop index every <=" : rst ? "restart markers every <="
                                             : "files copied, rewritten every",
           idx ? idx : rst, r.rewritten, epochs);
    uint8_t *out = malloc(800 * 520 * 3); /* the largest image: 750 x 500 */
    double ref[50], ref_orig[50], pipe[8][50], ratio[8][50], ratio_o[8][50];
    double cpu_rate[8][50];
    td_pipeline_stats st[8];
    tj_loop(ds, 1, out); /* warm-up */
    for (int k = 0; k < runs; k++) {
        ref[k] = tj_loop(ds, epochs, out);
        if (orig)
            ref_orig[k] = tj_loop(orig, epochs, out);
        for (int w = 0; w < nw; w++) {
            pipe[w][k] = pipe_run(shards, wl[w], epochs, &st[w]);
            cpu_rate[w][k] = last_cpu_rate;
            ratio[w][k] = pipe[w][k] / ref[k];
            if (orig)
                ratio_o[w][k] = pipe[w][k] / ref_orig[k];
        }
    }
    report("tjDecompress2 full image, 1 thread", ref, runs, "img/s");
    if (orig)
        report("  same on the original files", ref_orig, runs, "img/s");
    for (int w = 0; w < nw; w++) {
        char what[64];
        snprintf(what, sizeof what, "pipeline, %d worker(s)", wl[w]);
        report(what, pipe[w], runs, "img/s");
        report("  per CPU second (all threads)", cpu_rate[w], runs,
               "img/cpu-s");
        snprintf(what, sizeof what, "  ratio to tjDecompress2, same run");
        report(what, ratio[w], runs, "x");
        if (orig)
            report("  ratio to it on the original files", ratio_o[w], runs,
                   "x");
        double tot = (double)st[w].samples;
        printf("  last run per image: read %.1f us, decode %.1f us, augment "
               "%.1f us, slot wait %.1f us; consumer waited %.3f s\n",
               td_ns_to_s(st[w].read_ns) / tot * 1e6,
               td_ns_to_s(st[w].decode_ns) / tot * 1e6,
               td_ns_to_s(st[w].augment_ns) / tot * 1e6,
               td_ns_to_s(st[w].slot_wait_ns) / tot * 1e6,
               td_ns_to_s(st[w].consumer_wait_ns));
    }
    printf("resident set after the warm-up epoch of the last run: %ld KiB "
           "(shard pages included), growth over the %d timed epoch(s): %ld "
           "KiB; slots: %d x %zu KiB\n", rss_after_warmup, epochs,
           rss_growth, 2 * wl[nw - 1] + 2,
           (size_t)64 * 224 * 224 * 3 / 1024);
    free(out);
    td_dataset_close(ds);
    td_dataset_close(orig);
    if (!keep)
        td_test_rmtree(tmp);
    free(tmp);
    return 0;
}
