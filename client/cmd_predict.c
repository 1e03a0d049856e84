/* cmd_predict.c - `trainctl predict (CKPT | JOB) IMAGE... [--top K]`: the
 * top-K classes of each image with their probabilities, computed locally
 * on the CPU backend from the checkpoint alone (its metadata gives the
 * model, classes, input and preprocessing: docs/checkpoints.md).  Each
 * image goes through td_preprocess_jpeg (or td_preprocess_png for a PNG)
 * in evaluation form, the code the validation pass runs, so the prediction
 * is the validation pass's.  A file that cannot be read or is neither a
 * JPEG nor a PNG is named on stderr and the others go on; the exit code is
 * then 1.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "cli.h"
#include "commands.h"
#include "conn.h"
#include "input/png.h"
#include "input/preprocess.h"
#include "job/infer.h"
#include "modelfile.h"

#define TD__BATCH 16

static const char td__usage[] =
    "usage: trainctl predict (CHECKPOINT | JOB) IMAGE... [--top K] [--json]\n"
    "\n"
    "Classifies JPEG and PNG images with the model of a checkpoint or\n"
    "export (or a job's newest checkpoint), locally on the CPU, with the\n"
    "preprocessing of the job's validation pass.  Prints the top K classes\n"
    "(default 5) with their softmax probabilities, one line per image;\n"
    "--json prints {\"file\", \"top\": [{\"class\", \"label\", \"p\"}, ...]}\n"
    "per image.  A file that is unreadable or neither JPEG nor PNG is named\n"
    "on stderr ({\"file\", \"error\"} with --json) and the rest go on; the\n"
    "exit code is then 1.\n";

typedef struct td__pred {
    td_cli *cli;
    td_infer *inf;
    const td_model_meta *meta;
    int top;
    const char *files[TD__BATCH];
    int n;
    uint8_t *px;         /* TD__BATCH samples */
    float *logits;
} td__pred;

/* Softmax of one row in double, then the top K by probability. */
static void td__print(td__pred *p, const char *file, const float *z)
{
    int k = p->meta->classes, top = p->top < k ? p->top : k;
    double mx = z[0], sum = 0;
    for (int i = 1; i < k; i++)
        mx = z[i] > mx ? z[i] : mx;
    double *pr = malloc((size_t)k * sizeof *pr);
    int *idx = malloc((size_t)top * sizeof *idx);
    if (!pr || !idx) {
        free(pr);
        free(idx);
        fprintf(stderr, "trainctl predict: out of memory\n");
        return;
    }
    for (int i = 0; i < k; i++)
        sum += pr[i] = exp((double)z[i] - mx);
    for (int t = 0; t < top; t++) { /* ties: the lower label first */
        int best = -1;
        for (int i = 0; i < k; i++) {
            int used = 0;
            for (int u = 0; u < t; u++)
                used |= idx[u] == i;
            if (!used && (best < 0 || pr[i] > pr[best]))
                best = i;
        }
        idx[t] = best;
    }
    json_t *arr = p->cli->json ? json_array() : NULL;
    if (!p->cli->json)
        printf("%s:", file);
    for (int t = 0; t < top; t++) {
        const char *name = p->meta->class_names[idx[t]];
        double prob = pr[idx[t]] / sum;
        if (arr)
            json_array_append_new(arr, json_pack("{s:s, s:i, s:f}", "class",
                                                 name, "label", idx[t], "p",
                                                 prob));
        else
            printf("%s %s %.4f", t ? "," : "", name, prob);
    }
    if (arr) {
        json_t *o = json_pack("{s:s, s:o}", "file", file, "top", arr);
        td_print_json(o);
        json_decref(o);
    } else {
        printf("\n");
    }
    free(pr);
    free(idx);
}

static int td__flush(td__pred *p)
{
    char err[400];
    if (p->n == 0)
        return 0;
    if (td_infer_logits(p->inf, p->px, p->n, p->logits, err, sizeof err)) {
        fprintf(stderr, "trainctl predict: %s\n", err);
        return -1;
    }
    for (int i = 0; i < p->n; i++)
        td__print(p, p->files[i], p->logits + (size_t)i * p->meta->classes);
    fflush(stdout);
    p->n = 0;
    return 0;
}

static void td__bad(td__pred *p, const char *file, const char *why)
{
    if (p->cli->json) {
        json_t *o = json_pack("{s:s, s:s}", "file", file, "error", why);
        td_print_json(o);
        json_decref(o);
    }
    fprintf(stderr, "trainctl predict: %s: %s\n", file, why);
}

/* Reads a whole file into *buf (grown as needed). */
static int td__slurp(const char *path, uint8_t **buf, size_t *cap,
                     size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -errno;
    *len = 0;
    for (;;) {
        if (*len == *cap) {
            size_t nc = *cap ? 2 * *cap : 1 << 20;
            uint8_t *nb = realloc(*buf, nc);
            if (!nb) {
                fclose(f);
                return -ENOMEM;
            }
            *buf = nb;
            *cap = nc;
        }
        size_t got = fread(*buf + *len, 1, *cap - *len, f);
        *len += got;
        if (got == 0)
            break;
    }
    int rc = ferror(f) ? -EIO : 0;
    fclose(f);
    return rc;
}

int td_cmd_predict(int argc, char **argv)
{
    const char *top_s = NULL;
    td_cli_flag flags[] = {{"--top", "-k", 1, &top_s, NULL, NULL},
                           {NULL, NULL, 0, NULL, NULL, NULL}};
    td_cli cli = {.usage = td__usage};
    td__pred p = {.cli = &cli, .top = 5};
    char path[4096], err[600];
    td_decoder *dec = NULL;
    td_png png = {0};
    td_resampler rs;
    uint8_t *buf = NULL;
    size_t cap = 0, len = 0;
    int rc = td_cli_parse(&cli, argc, argv, flags, 2, TD_CLI_MAX_POS), bad = 0;
    if (rc)
        return rc < 0 ? TD_EXIT_OK : rc;
    if (top_s) {
        char *end;
        long k = strtol(top_s, &end, 10);
        if (*end || end == top_s || k < 1 || k > 1000)
            return td_cli_usage_error(&cli, "--top: expected 1..1000, not "
                                      "'%s'", top_s);
        p.top = (int)k;
    }
    if ((rc = td_cli_model_path(&cli, cli.pos[0], path, sizeof path)))
        return rc;
    if (td_infer_open(path, TD__BATCH, 0, &p.inf, err, sizeof err)) {
        fprintf(stderr, "trainctl predict: %s\n", err);
        return TD_EXIT_REFUSED;
    }
    p.meta = td_infer_meta(p.inf);
    const td_shape in = p.meta->in;
    size_t per = (size_t)in.c * in.h * in.w;
    p.px = malloc(per * TD__BATCH);
    p.logits = malloc((size_t)TD__BATCH * p.meta->classes * sizeof(float));
    memset(&rs, 0, sizeof rs);
    if (!p.px || !p.logits || td_decoder_create(&dec) ||
        td_resampler_init(&rs, in.w, in.h, in.c)) {
        fprintf(stderr, "trainctl predict: out of memory\n");
        rc = TD_EXIT_REFUSED;
        goto out;
    }
    for (int i = 1; i < cli.npos; i++) {
        const char *file = cli.pos[i], *msg = NULL;
        int r = td__slurp(file, &buf, &cap, &len);
        if (r == 0 && td_png_is(buf, len))
            r = td_preprocess_png(&png, &rs, p.meta->augment,
                                  p.meta->n_augment, 0, 0, 0, 0, buf, len,
                                  in.w, in.h, in.c, TD_LAYOUT_NHWC,
                                  p.px + per * (size_t)p.n, NULL, &msg);
        else if (r == 0)
            r = td_preprocess_jpeg(dec, &rs, p.meta->augment,
                                   p.meta->n_augment, 0, 0, 0, 0, buf, len,
                                   in.w, in.h, in.c, TD_LAYOUT_NHWC,
                                   p.px + per * (size_t)p.n, NULL, &msg);
        else
            msg = td_strerror(r);
        if (r) {
            char why[300];
            /* the ones before first, so lines keep the files' order */
            if (td__flush(&p)) {
                rc = TD_EXIT_REFUSED;
                goto out;
            }
            snprintf(why, sizeof why, "%s%s%s",
                     r == TD_E_CORRUPT ? "not a readable JPEG or PNG"
                                       : "cannot read",
                     msg && msg[0] ? ": " : "", msg ? msg : "");
            td__bad(&p, file, why);
            bad++;
            continue;
        }
        p.files[p.n++] = file;
        if (p.n == TD__BATCH && td__flush(&p)) {
            rc = TD_EXIT_REFUSED;
            goto out;
        }
    }
    rc = td__flush(&p) ? TD_EXIT_REFUSED
                       : bad ? TD_EXIT_REFUSED : TD_EXIT_OK;
out:
    td_resampler_free(&rs);
    td_png_free(&png);
    td_decoder_destroy(dec);
    td_infer_free(p.inf);
    free(p.px);
    free(p.logits);
    free(buf);
    return rc;
}
