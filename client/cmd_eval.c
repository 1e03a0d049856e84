/* cmd_eval.c - `trainctl eval (CKPT | JOB) DATA`: top-1, top-5, per-class
 * accuracy and the confusion matrix of a checkpoint's model on a dataset,
 * locally on the CPU backend.  The dataset goes through the input
 * pipeline in evaluation mode with the checkpoint's preprocessing, exactly
 * as the job's validation pass does.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "cli.h"
#include "commands.h"
#include "conn.h"
#include "input/pipeline.h"
#include "job/infer.h"
#include "modelfile.h"

static const char td__usage[] =
    "usage: trainctl eval (CHECKPOINT | JOB) DATA [--batch N] [--workers N]\n"
    "                     [--json]\n"
    "\n"
    "Evaluates the model of a checkpoint or export (or a job's newest\n"
    "checkpoint) on DATA (an ImageFolder, a directory of shards, a shard or\n"
    "a glob, as data.val takes), locally on the CPU, with the preprocessing\n"
    "of the job's validation pass: top-1 and top-5 accuracy, per-class\n"
    "accuracy and the confusion matrix (rows: true class, columns:\n"
    "predicted; printed up to 20 classes, always in --json).\n"
    "  --batch N    images per forward pass (default 32)\n"
    "  --workers N  decode threads (default 2)\n";

typedef struct td__acc {
    int k;
    int64_t n, top1, top5;
    int64_t *per_n, *per_ok; /* per true class */
    int64_t *conf;           /* k x k, [true][predicted] */
} td__acc;

static void td__count(td__acc *a, const float *z, int label)
{
    int best = 0, above = 0;
    for (int i = 1; i < a->k; i++)
        if (z[i] > z[best])
            best = i;
    for (int i = 0; i < a->k; i++) /* classes ranked above the label */
        above += z[i] > z[label] || (z[i] == z[label] && i < label);
    a->n++;
    a->top1 += best == label;
    a->top5 += above < 5;
    a->per_n[label]++;
    a->per_ok[label] += best == label;
    a->conf[(size_t)label * a->k + best]++;
}

static int td__check_names(const td_pipeline *p, const td_model_meta *meta,
                           const char *data)
{
    int dk = td_pipeline_classes(p);
    if (dk > meta->classes) {
        fprintf(stderr, "trainctl eval: %s has %d classes, the model %d\n",
                data, dk, meta->classes);
        return -1;
    }
    for (int k = 0; k < dk; k++) {
        const char *n = td_pipeline_class_name(p, k);
        if (n && strcmp(n, meta->class_names[k]) != 0) {
            fprintf(stderr, "trainctl eval: %s: class %d is \"%s\", the "
                    "model's class %d is \"%s\"\n", data, k, n, k,
                    meta->class_names[k]);
            return -1;
        }
    }
    return 0;
}

static void td__report(const td_cli *cli, const td__acc *a,
                       const td_model_meta *meta, const char *path)
{
    int k = a->k;
    double n = a->n ? (double)a->n : 1;
    if (cli->json) {
        json_t *per = json_array(), *conf = json_array();
        for (int c = 0; c < k; c++) {
            json_t *row = json_array();
            for (int j = 0; j < k; j++)
                json_array_append_new(row, json_integer(
                    a->conf[(size_t)c * k + j]));
            json_array_append_new(conf, row);
            json_array_append_new(per, json_pack(
                "{s:s, s:I, s:o}", "class", meta->class_names[c], "samples",
                (json_int_t)a->per_n[c], "top1",
                a->per_n[c] ? json_real((double)a->per_ok[c] /
                                        (double)a->per_n[c])
                            : json_null()));
        }
        json_t *o = json_pack("{s:s, s:I, s:f, s:f, s:I, s:I, s:o, s:o}",
                              "checkpoint", path, "samples",
                              (json_int_t)a->n, "top1", a->top1 / n, "top5",
                              a->top5 / n, "top1_correct",
                              (json_int_t)a->top1, "top5_correct",
                              (json_int_t)a->top5, "per_class", per,
                              "confusion", conf);
        td_print_json(o);
        json_decref(o);
        return;
    }
    printf("%s: %lld samples\n", path, (long long)a->n);
    printf("  top-1 %.4f (%lld)   top-5 %.4f (%lld)\n", a->top1 / n,
           (long long)a->top1, a->top5 / n, (long long)a->top5);
    printf("  per class:\n");
    for (int c = 0; c < k; c++)
        if (a->per_n[c])
            printf("    %-20s %.4f (%lld/%lld)\n", meta->class_names[c],
                   (double)a->per_ok[c] / (double)a->per_n[c],
                   (long long)a->per_ok[c], (long long)a->per_n[c]);
    if (k > 20)
        return;
    printf("  confusion (rows true, columns predicted):\n");
    for (int c = 0; c < k; c++) {
        printf("    %-12.12s", meta->class_names[c]);
        for (int j = 0; j < k; j++)
            printf(" %5lld", (long long)a->conf[(size_t)c * k + j]);
        printf("\n");
    }
}

static int td__int_flag(td_cli *cli, const char *name, const char *s,
                        int lo, int hi, int *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || end == s || v < lo || v > hi)
        return td_cli_usage_error(cli, "%s: expected %d..%d, not '%s'", name,
                                  lo, hi, s);
    *out = (int)v;
    return 0;
}

/* Every batch of the dataset through the model. */
static int td__run(td_pipeline *pl, td_infer *inf, td__acc *a, int batch)
{
    float *z = malloc((size_t)batch * a->k * sizeof *z);
    char err[400];
    int rc = z ? td_pipeline_start(pl, 0, 0) : -ENOMEM;
    for (int64_t s = 0; rc == 0 && s < td_pipeline_batches_per_epoch(pl);
         s++) {
        td_batch b;
        if ((rc = td_pipeline_next(pl, &b, NULL)))
            break;
        if ((rc = td_infer_logits(inf, b.data, b.n, z, err, sizeof err)))
            fprintf(stderr, "trainctl eval: %s\n", err);
        for (int i = 0; rc == 0 && i < b.n; i++)
            td__count(a, z + (size_t)i * a->k, b.labels[i]);
        td_pipeline_release(pl, &b);
    }
    free(z);
    return rc;
}

int td_cmd_eval(int argc, char **argv)
{
    const char *batch_s = NULL, *workers_s = NULL;
    td_cli_flag flags[] = {{"--batch", "-b", 1, &batch_s, NULL, NULL},
                           {"--workers", NULL, 1, &workers_s, NULL, NULL},
                           {NULL, NULL, 0, NULL, NULL, NULL}};
    td_cli cli = {.usage = td__usage};
    char path[4096], err[600];
    int batch = 32, workers = 2;
    td_infer *inf = NULL;
    td_pipeline *pl = NULL;
    td__acc a = {0};
    int rc = td_cli_parse(&cli, argc, argv, flags, 2, 2);
    if (rc)
        return rc < 0 ? TD_EXIT_OK : rc;
    if ((batch_s && (rc = td__int_flag(&cli, "--batch", batch_s, 1, 4096,
                                       &batch))) ||
        (workers_s && (rc = td__int_flag(&cli, "--workers", workers_s, 1, 64,
                                         &workers))))
        return rc;
    if ((rc = td_cli_model_path(&cli, cli.pos[0], path, sizeof path)))
        return rc;
    if (td_infer_open(path, batch, 0, &inf, err, sizeof err)) {
        fprintf(stderr, "trainctl eval: %s\n", err);
        return TD_EXIT_REFUSED;
    }
    const td_model_meta *meta = td_infer_meta(inf);
    td_pipeline_config pc;
    td_pipeline_config_default(&pc);
    pc.data = cli.pos[1];
    pc.size[0] = meta->in.h;
    pc.size[1] = meta->in.w;
    pc.channels = meta->in.c;
    memcpy(pc.augment, meta->augment, sizeof pc.augment);
    pc.n_augment = meta->n_augment;
    pc.batch_size = batch;
    pc.workers = workers;
    pc.prefetch = 2;
    pc.train = 0;
    pc.drop_last = 0;
    pc.layout = TD_LAYOUT_NHWC;
    rc = TD_EXIT_REFUSED;
    if (td_pipeline_create(&pc, &pl, err, sizeof err)) {
        fprintf(stderr, "trainctl eval: %s: %s\n", cli.pos[1], err);
        goto out;
    }
    if (td__check_names(pl, meta, cli.pos[1]))
        goto out;
    a.k = meta->classes;
    a.per_n = calloc((size_t)a.k, sizeof *a.per_n);
    a.per_ok = calloc((size_t)a.k, sizeof *a.per_ok);
    a.conf = calloc((size_t)a.k * a.k, sizeof *a.conf);
    if (!a.per_n || !a.per_ok || !a.conf) {
        fprintf(stderr, "trainctl eval: out of memory\n");
        goto out;
    }
    int r = td__run(pl, inf, &a, batch);
    if (r) {
        fprintf(stderr, "trainctl eval: %s: %s\n", cli.pos[1],
                td_strerror(r));
        goto out;
    }
    td__report(&cli, &a, meta, path);
    rc = TD_EXIT_OK;
out:
    td_pipeline_destroy(pl);
    td_infer_free(inf);
    free(a.per_n);
    free(a.per_ok);
    free(a.conf);
    return rc;
}
