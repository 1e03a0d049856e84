/* cmd_pack.c - `trainctl pack`: write WebDataset tar shards.
 *
 *   trainctl pack --idx-images F --idx-labels F -o DIR
 *   trainctl pack --idx-dir D -o DIR      (D/train-* -> DIR/train,
 *                                           D/t10k-*  -> DIR/test)
 *   trainctl pack --imagefolder ROOT -o DIR
 * Options: --quality Q (IDX only: JPEG at Q; default 0, lossless PNG),
 * --shard-size MiB (default 256), --prefix NAME, --index N (ImageFolder
 * only, default 2), --restart N (ImageFolder only, instead of --index),
 * --threads N (ImageFolder only, default one per CPU), --json.
 * Progress goes to stderr when it is a tty.
 */
#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "cli.h"
#include "commands.h"
#include "pack_classes.h"
#include "progress.h"
#include "input/pack.h"

struct td__pack_ui {
    td_progress pr; /* on a terminal: "SET: DONE/TOTAL images (P%), R/s" */
    const char *what;
};

static void td__pack_progress(void *user, size_t done, size_t total)
{
    struct td__pack_ui *ui = user;
    td_progress_count(&ui->pr, ui->what, (int64_t)done, (int64_t)total,
                      "images");
}

static void td__pack_usage(FILE *f)
{
    fprintf(f,
            "usage: trainctl pack (--idx-images F --idx-labels F | --idx-dir D"
            " | --imagefolder ROOT)\n"
            "                     -o DIR [--quality Q] [--shard-size MiB]"
            " [--prefix NAME] [--index N | --restart N]\n"
            "                     [--threads N] [--val-fraction F [--seed N]]"
            " [--json]\n\n"
            "Writes WebDataset tar shards (<key>.jpg + <key>.cls), each at "
            "most --shard-size\n(default 256 MiB), with an index cache per "
            "shard.\n"
            "  -o, --output DIR  where the shards go\n"
            "  --shard-size MiB  the cap per shard (default 256)\n"
            "  --prefix NAME     shard file names NAME-000000.tar, ... "
            "(default shard)\n"
            "  --idx-images/--idx-labels  one IDX pair (gzip'd or not) -> "
            "DIR\n"
            "  --idx-dir D   MNIST layout: D/train-*-idx?-ubyte[.gz] -> "
            "DIR/train,\n"
            "                D/t10k-* -> DIR/test (e.g. "
            "/usr/share/datasets/fashion-mnist)\n"
            "  --imagefolder ROOT  ROOT/<class>/*.jpg, rewritten losslessly "
            "with a crop\n                index (see --index)\n"
            "  --quality Q   IDX images as JPEG at quality 1-100 (lossy; "
            "default: lossless\n                PNG, every pixel exact)\n"
            "  --index N     ImageFolder: rewrite each JPEG losslessly (same "
            "pixels,\n                optimized Huffman tables) with a crop "
            "index every <= N MCUs\n                (default 2), so random "
            "crops decode only the MCUs they\n                cover; 0 "
            "copies the files as they are; damaged files are\n"
            "                always copied as they are\n"
            "  --restart N   ImageFolder: restart markers every <= N MCUs "
            "instead of the\n                index (crops decode a little "
            "slower, whole images too)\n"
            "  --threads N   ImageFolder: rewrite on N threads (default: one "
            "per CPU);\n                the shards are the same whatever "
            "N\n"
            "  --val-fraction F  ImageFolder: hold out F (0-1) of each class "
            "into DIR/val,\n                the rest into DIR/train "
            "(stratified; which ones: --seed)\n"
            "  --seed N      the held-out choice (default 0)\n"
            "Each set gets a classes.txt (line i names label i); training "
            "maps a\nvalidation set onto the training classes by these "
            "names.\n");
}

/* First existing of D/base and D/base.gz. */
static int td__find_idx(const char *dir, const char *base, char *out,
                        size_t cap)
{
    struct stat st;
    snprintf(out, cap, "%s/%s", dir, base);
    if (stat(out, &st) == 0)
        return 0;
    snprintf(out, cap, "%s/%s.gz", dir, base);
    return stat(out, &st) == 0 ? 0 : -1;
}

static json_t *td__pack_json(const char *set, const char *out,
                             const td_pack_result *r, double s)
{
    return json_pack("{s:s, s:s, s:I, s:i, s:I, s:i, s:f, s:f, s:I}", "set",
                     set, "output", out, "samples", (json_int_t)r->samples,
                     "shards", r->shards, "bytes", (json_int_t)r->bytes,
                     "classes", r->classes, "seconds", s, "images_per_s",
                     s > 0 ? (double)r->samples / s : 0.0, "rewritten",
                     (json_int_t)r->rewritten);
}

static int td__pack_one(const char *set, const char *images,
                        const char *labels, const char *folder,
                        const char *out, td_pack_options *opt, int json,
                        json_t *sets)
{
    char err[512] = "";
    td_pack_result r;
    struct td__pack_ui ui = {.what = set};
    td_progress_init(&ui.pr);
    opt->progress = td__pack_progress;
    opt->user = &ui;
    int rc = folder ? td_pack_folder(folder, out, opt, &r, err, sizeof err)
                    : td_pack_idx(images, labels, out, opt, &r, err,
                                  sizeof err);
    double s = td_progress_elapsed(&ui.pr);
    td_progress_clear(&ui.pr); /* the summary line says it all */
    if (!rc && !folder) /* names identify classes (a folder's: pack.c) */
        rc = td_pack_classes_file(out, NULL, r.classes, err, sizeof err);
    if (rc) {
        td_cli cli = {.cmd = "pack", .json = json};
        return td_cli_refuse(&cli, TD_CLI_ERR_FAILED, "%s",
                             err[0] ? err : td_strerror(rc));
    }
    char how[192] = ""; /* an IDX set has nothing rewritten to report */
    if (folder && (opt->index > 0 || opt->restart > 0)) {
        size_t kept = r.samples - r.rewritten;
        int k = snprintf(how, sizeof how, "; %zu%s", r.rewritten,
                         opt->index > 0 ? " rewritten with a crop index"
                                        : " rewritten with restart markers");
        if (kept) /* what became of the others */
            snprintf(how + k, sizeof how - (size_t)k, ", %zu copied as they "
                     "are (PNGs, unreadable files, JPEGs over 64 Mpx)", kept);
    } else if (folder) {
        snprintf(how, sizeof how, "; copied as they are (--index 0)");
    }
    if (json)
        json_array_append_new(sets, td__pack_json(set, out, &r, s));
    else
        printf("%s: %zu samples, %d classes -> %d shard%s, %.1f MiB in %s "
               "(%.1f s, %.0f img/s)%s\n", set, r.samples, r.classes,
               r.shards, r.shards == 1 ? "" : "s",
               (double)r.bytes / 1048576.0, out, s,
               s > 0 ? (double)r.samples / s : 0.0, how);
    return TD_EXIT_OK;
}

struct td__pack_args {
    const char *images, *labels, *idxdir, *folder, *out;
    int json;
    double val_fraction;  /* --val-fraction: held out into DIR/val */
    uint64_t seed;        /* --seed: which ones */
    int seed_given;       /* --seed without --val-fraction: usage */
    td_pack_options opt;
};

/* One option with its value; 0, or -1 after printing what is wrong. */
static int td__pack_value(struct td__pack_args *o, const char *a,
                          const char *v)
{
    const char **slot = strcmp(a, "--idx-images") == 0   ? &o->images
                        : strcmp(a, "--idx-labels") == 0 ? &o->labels
                        : strcmp(a, "--idx-dir") == 0    ? &o->idxdir
                        : strcmp(a, "--imagefolder") == 0 ? &o->folder
                        : strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0
                            ? &o->out
                        : strcmp(a, "--prefix") == 0 ? &o->opt.prefix
                                                     : NULL;
    if (slot) {
        *slot = v;
        return 0;
    }
    if (strcmp(a, "--quality") == 0) {
        char *end;
        long q = strtol(v, &end, 10);
        o->opt.quality = (int)q;
        if (*v && !*end && q >= 1 && q <= 100)
            return 0;
        fprintf(stderr, "trainctl pack: --quality must be 1..100\n");
        return -1;
    }
    if (strcmp(a, "--restart") == 0 || strcmp(a, "--index") == 0) {
        char *end;
        long n = strtol(v, &end, 10);
        if (*v && !*end && n >= 0 && n <= 65535) {
            *(a[2] == 'r' ? &o->opt.restart : &o->opt.index) = (int)n;
            return 0;
        }
        fprintf(stderr, "trainctl pack: %s must be 0..65535 (MCUs per %s, "
                        "0 = none)\n", a,
                a[2] == 'r' ? "restart segment" : "index interval");
        return -1;
    }
    if (strcmp(a, "--threads") == 0) {
        char *end;
        long n = strtol(v, &end, 10);
        o->opt.threads = (int)n;
        if (*v && !*end && n >= 1 && n <= 256)
            return 0;
        fprintf(stderr, "trainctl pack: --threads must be 1..256\n");
        return -1;
    }
    if (strcmp(a, "--val-fraction") == 0) {
        char *end;
        o->val_fraction = strtod(v, &end);
        if (*v && !*end && o->val_fraction > 0 && o->val_fraction < 1)
            return 0;
        fprintf(stderr, "trainctl pack: --val-fraction must be in (0, 1)\n");
        return -1;
    }
    if (strcmp(a, "--seed") == 0) { /* strtoull takes "-5" and wraps */
        char *end;
        errno = 0;
        o->seed = strtoull(v, &end, 10);
        o->seed_given = 1;
        if (*v >= '0' && *v <= '9' && !*end && !errno)
            return 0;
        fprintf(stderr, "trainctl pack: --seed must be a number 0..%llu, "
                        "not '%s'\n", (unsigned long long)UINT64_MAX, v);
        return -1;
    }
    if (strcmp(a, "--shard-size") == 0) {
        char *end;
        double mib = strtod(v, &end); /* 1 TiB: no wrap into uint64 */
        if (*v && !*end && mib > 0 && mib <= 1048576) {
            o->opt.shard_bytes = (uint64_t)(mib * 1048576.0);
            return 0;
        }
        fprintf(stderr, "trainctl pack: --shard-size must be a number of "
                        "MiB in (0, 1048576], not '%s'\n", v);
        return -1;
    }
    fprintf(stderr, "trainctl pack: unknown argument '%s'\n", a);
    return -1;
}

/* -1: go on; else the exit code to return. */
static int td__pack_args(int argc, char **argv, struct td__pack_args *o)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--json") == 0) {
            o->json = 1;
            continue;
        }
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            td__pack_usage(stdout);
            return TD_EXIT_OK;
        }
        if (!v) {
            fprintf(stderr, "trainctl pack: unknown or incomplete argument "
                            "'%s'\n", a);
            return TD_EXIT_USAGE;
        }
        if (td__pack_value(o, a, v))
            return TD_EXIT_USAGE;
        i++;
    }
    int modes = (o->images || o->labels) + !!o->idxdir + !!o->folder;
    const char *why = modes == 0 ? "no input: give --idx-images F "
                                   "--idx-labels F, --idx-dir D or "
                                   "--imagefolder ROOT"
                      : modes > 1 ? "one input only: --idx-images/--idx-labels,"
                                    " --idx-dir or --imagefolder"
                      : !!o->images != !!o->labels
                          ? "--idx-images and --idx-labels go together"
                      : !o->out ? "-o DIR is required"
                                : NULL;
    if (why) {
        fprintf(stderr, "trainctl pack: %s\nRun 'trainctl pack --help' for "
                        "usage.\n", why);
        return TD_EXIT_USAGE;
    }
    if (o->seed_given && !(o->val_fraction > 0)) { /* it did nothing */
        fprintf(stderr, "trainctl pack: --seed chooses the images "
                        "--val-fraction holds out: give --val-fraction F "
                        "too\nRun 'trainctl pack --help' for usage.\n");
        return TD_EXIT_USAGE;
    }
    if (o->val_fraction > 0 && !o->folder) {
        fprintf(stderr, "trainctl pack: --val-fraction splits an "
                        "--imagefolder (IDX sets come with their test set)"
                        "\n");
        return TD_EXIT_USAGE;
    }
    return -1;
}

int td_cmd_pack(int argc, char **argv)
{
    struct td__pack_args o = {0};
    td_pack_options_default(&o.opt);
    /* ImageFolder files get a crop index unless asked not to: lossless,
     * and random crops decode only the MCUs they cover (docs/pipeline.md). */
    o.opt.index = -1; /* default: 2, or 0 with --restart N */
    int rc = td__pack_args(argc, argv, &o);
    if (rc >= 0)
        return rc;
    if (o.opt.index < 0)
        o.opt.index = o.opt.restart > 0 ? 0 : 2;
    if (o.opt.restart > 0 && o.opt.index > 0) {
        fprintf(stderr, "trainctl pack: --restart N needs --index 0 (a file "
                        "has restart markers or a crop index, not both)\n");
        return TD_EXIT_USAGE;
    }
    const char *images = o.images, *labels = o.labels, *idxdir = o.idxdir;
    const char *folder = o.folder, *out = o.out;
    int json = o.json;
    td_cli cli = {.cmd = "pack", .json = json}; /* for refusals */
    td_pack_options opt = o.opt;
    json_t *sets = json_array();
    int64_t t0 = td_now_ns();
    size_t skipped = 0, bad = 0;
    if (folder) /* what pack leaves out and what training would refuse */
        td_pack_survey(folder, 0.01, &skipped, &bad);
    if (idxdir) {
        char ti[4096], tl[4096], vi[4096], vl[4096], o1[4096], o2[4096];
        if (td__find_idx(idxdir, "train-images-idx3-ubyte", ti, sizeof ti) ||
            td__find_idx(idxdir, "train-labels-idx1-ubyte", tl, sizeof tl) ||
            td__find_idx(idxdir, "t10k-images-idx3-ubyte", vi, sizeof vi) ||
            td__find_idx(idxdir, "t10k-labels-idx1-ubyte", vl, sizeof vl)) {
            json_decref(sets);
            return td_cli_refuse(&cli, TD_CLI_ERR_FAILED, "%s lacks the "
                                 "MNIST file set (train-images-idx3-ubyte"
                                 "[.gz], ...)", idxdir);
        }
        snprintf(o1, sizeof o1, "%s/train", out);
        snprintf(o2, sizeof o2, "%s/test", out);
        rc = td__pack_one("train", ti, tl, NULL, o1, &opt, json, sets);
        if (rc == TD_EXIT_OK)
            rc = td__pack_one("test", vi, vl, NULL, o2, &opt, json, sets);
    } else if (o.val_fraction > 0) { /* DIR/train and DIR/val */
        char tmp[4096], tt[4200], tv[4200], o1[4200], o2[4200], err[600];
        size_t nval;
        if (td_pack_split_trees(folder, out, o.val_fraction, o.seed, tmp,
                                sizeof tmp, &nval, err, sizeof err)) {
            json_decref(sets);
            return td_cli_refuse(&cli, TD_CLI_ERR_FAILED, "%s", err);
        }
        snprintf(tt, sizeof tt, "%s/train", tmp);
        snprintf(tv, sizeof tv, "%s/val", tmp);
        snprintf(o1, sizeof o1, "%s/train", out);
        snprintf(o2, sizeof o2, "%s/val", out);
        rc = td__pack_one("train", NULL, NULL, tt, o1, &opt, json, sets);
        if (rc == TD_EXIT_OK)
            rc = td__pack_one("val", NULL, NULL, tv, o2, &opt, json, sets);
        td_pack_remove_tree(tmp);
    } else {
        rc = td__pack_one(folder ? "imagefolder" : "idx", images, labels,
                          folder, out, &opt, json, sets);
    }
    if (rc == TD_EXIT_OK && json) {
        json_t *sum = json_pack("{s:o, s:f}", "sets", sets, "seconds",
                                td_elapsed_s(t0));
        if (folder) {
            json_object_set_new(sum, "skipped", json_integer((json_int_t)
                                                             skipped));
            json_object_set_new(sum, "unreadable", json_integer((json_int_t)
                                                                bad));
        }
        if (!folder) { /* --quality applies to IDX pixels only */
            json_object_set_new(sum, "format", json_string(
                                    opt.quality ? "jpeg" : "png"));
            if (opt.quality)
                json_object_set_new(sum, "quality",
                                    json_integer(opt.quality));
        }
        char *s = json_dumps(sum, JSON_COMPACT);
        puts(s);
        free(s);
        json_decref(sum);
    } else {
        json_decref(sets);
    }
    return rc;
}
