/* infer_run.c - eval and predict from start to result (see infer_run.h).
 *
 * Owns: one predictor, an eval's pipeline, a predict's decoder and read
 * buffer, and the result object.  Never: prints except in the *_print
 * functions (which the local commands and the daemon client share), talks
 * to a daemon, or writes files.
 */
#include "job/infer_run.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "base/fsio.h"
#include "base/fscred.h"
#include "base/json.h"
#include "base/jsontext.h"
#include "input/dataset.h"
#include "input/pipeline.h"
#include "input/png.h"
#include "input/preprocess.h"
#include "job/infer.h"

#define TD__EVAL_BATCH 32
#define TD__PREDICT_BATCH 16

static int td__stopped(const td_infer_run_opts *o)
{
    return o->stop && atomic_load(o->stop);
}

/* The checkpoint, opened with the reader's identity. */
static int td__open(const td_infer_run_opts *o, int batch, td_infer **inf,
                    char *err, size_t errcap)
{
    td_fscred_saved saved;
    int rc = td_fscred_enter(o->cred, &saved);
    if (rc) {
        snprintf(err, errcap, "%s: cannot read as uid %u: %s", o->checkpoint,
                 o->cred ? (unsigned)o->cred->uid : 0u, td_strerror(rc));
        return rc;
    }
    rc = td_infer_open_on(o->checkpoint, o->device, batch, o->threads, inf,
                          err, errcap);
    td_fscred_leave(&saved);
    return rc;
}

/* ---- eval --------------------------------------------------------------- */

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
                           const char *data, char *err, size_t errcap)
{
    int dk = td_pipeline_classes(p);
    if (dk > meta->classes) {
        snprintf(err, errcap, "%s has %d classes, the model %d", data, dk,
                 meta->classes);
        return TD_E_SPEC;
    }
    for (int k = 0; k < dk; k++) {
        const char *n = td_pipeline_class_name(p, k);
        if (n && strcmp(n, meta->class_names[k]) != 0) {
            snprintf(err, errcap, "%s: class %d is \"%s\", the model's "
                     "class %d is \"%s\"", data, k, n, k,
                     meta->class_names[k]);
            return TD_E_SPEC;
        }
    }
    return 0;
}

static json_t *td__eval_json(const td__acc *a, const td_model_meta *meta,
                             const char *path)
{
    int k = a->k;
    double n = a->n ? (double)a->n : 1;
    json_t *per = json_array(), *conf = json_array();
    for (int c = 0; c < k; c++) {
        json_t *row = json_array();
        for (int j = 0; j < k; j++)
            json_array_append_new(row,
                                  json_integer(a->conf[(size_t)c * k + j]));
        json_array_append_new(conf, row);
        json_array_append_new(
            per, json_pack("{s:s, s:I, s:o}", "class", meta->class_names[c],
                           "samples", (json_int_t)a->per_n[c], "top1",
                           a->per_n[c] ? json_real((double)a->per_ok[c] /
                                                   (double)a->per_n[c])
                                       : json_null()));
    }
    return json_pack("{s:o, s:I, s:f, s:f, s:I, s:I, s:o, s:o}", "checkpoint",
                     td_json_text(path), "samples", (json_int_t)a->n, "top1", a->top1 / n,
                     "top5", a->top5 / n, "top1_correct", (json_int_t)a->top1,
                     "top5_correct", (json_int_t)a->top5, "per_class", per,
                     "confusion", conf);
}

/* Every batch of the dataset through the model. */
static int td__eval_loop(const td_infer_run_opts *o, const char *data,
                         td_pipeline *pl, td_infer *inf, td__acc *a,
                         int batch, char *err, size_t errcap)
{
    float *z = malloc((size_t)batch * a->k * sizeof *z);
    int64_t total = (int64_t)td_pipeline_dataset_size(pl);
    int rc = z ? td_pipeline_start(pl, 0, 0) : -ENOMEM;
    if (rc == 0 && o->progress)
        o->progress(o->user, 0, total);
    for (int64_t s = 0; rc == 0 && s < td_pipeline_batches_per_epoch(pl);
         s++) {
        td_batch b;
        if (td__stopped(o)) {
            rc = -ECANCELED;
            snprintf(err, errcap, "stopped after %lld of %lld images",
                     (long long)a->n, (long long)total);
            break;
        }
        if ((rc = td_pipeline_next(pl, &b, NULL))) {
            if (rc == TD_E_BADDATA) { /* which, how many, and what to do */
                char sum[700];
                td_pipeline_bad_summary(pl, sum, sizeof sum);
                snprintf(err, errcap, "%s: %s; remove or replace the "
                         "unreadable files (a warning names each) and "
                         "evaluate again", data, sum);
            } else {
                snprintf(err, errcap, "%s: %s", data, td_strerror(rc));
            }
            break;
        }
        rc = td_infer_logits(inf, b.data, b.n, z, err, errcap);
        for (int i = 0; rc == 0 && i < b.n; i++)
            td__count(a, z + (size_t)i * a->k, b.labels[i]);
        td_pipeline_release(pl, &b);
        if (rc == 0 && o->progress)
            o->progress(o->user, a->n, total);
    }
    free(z);
    return rc;
}

int td_infer_eval(const td_infer_run_opts *o, const char *data,
                  json_t **result, char *err, size_t errcap)
{
    int batch = o->batch > 0 ? o->batch : TD__EVAL_BATCH;
    td_infer *inf = NULL;
    td_pipeline *pl = NULL;
    td__acc a = {0};
    char e[600];
    int rc;
    *result = NULL;
    if ((rc = td__open(o, batch, &inf, err, errcap)))
        return rc;
    const td_model_meta *meta = td_infer_meta(inf);
    td_pipeline_config pc;
    td_pipeline_config_default(&pc);
    pc.data = data;
    pc.size[0] = meta->in.h;
    pc.size[1] = meta->in.w;
    pc.channels = meta->in.c;
    memcpy(pc.augment, meta->augment, sizeof pc.augment);
    pc.n_augment = meta->n_augment;
    pc.batch_size = batch;
    pc.workers = o->workers > 0 ? o->workers : 2;
    pc.prefetch = 2;
    pc.train = 0;
    pc.drop_last = 0;
    pc.layout = TD_LAYOUT_NHWC;
    pc.cred = o->cred;
    pc.job = o->job; /* a bad sample's warning goes to the job's log */
    if ((rc = td_pipeline_create(&pc, &pl, e, sizeof e))) {
        snprintf(err, errcap, "%s: %s", data, e);
        goto out;
    }
    if ((rc = td__check_names(pl, meta, data, err, errcap)))
        goto out;
    a.k = meta->classes;
    a.per_n = calloc((size_t)a.k, sizeof *a.per_n);
    a.per_ok = calloc((size_t)a.k, sizeof *a.per_ok);
    a.conf = calloc((size_t)a.k * a.k, sizeof *a.conf);
    if (!a.per_n || !a.per_ok || !a.conf) {
        rc = -ENOMEM;
        snprintf(err, errcap, "out of memory");
        goto out;
    }
    if ((rc = td__eval_loop(o, data, pl, inf, &a, batch, err, errcap)))
        goto out;
    if (!(*result = td__eval_json(&a, meta, o->checkpoint))) {
        rc = -ENOMEM;
        snprintf(err, errcap, "out of memory");
        goto out;
    }
    const char *first; /* an ImageFolder's entries that are not samples */
    size_t left = td_pipeline_left_out(pl, &first);
    json_object_set_new(*result, "left_out", json_integer((json_int_t)left));
    if (left)
        json_object_set_new(*result, "left_out_first", td_json_text(first));
out:
    td_pipeline_destroy(pl);
    td_infer_free(inf);
    free(a.per_n);
    free(a.per_ok);
    free(a.conf);
    return rc;
}

void td_infer_eval_print(const json_t *r, int json, FILE *out)
{
    if (json) {
        char *s = td_json_dumps(r, JSON_COMPACT); /* 0.35, not 0.3499...98 */
        if (s)
            fprintf(out, "%s\n", s);
        free(s);
        fflush(out);
        return;
    }
    const json_t *per = json_object_get(r, "per_class");
    const json_t *conf = json_object_get(r, "confusion");
    long long n = json_integer_value(json_object_get(r, "samples"));
    long long t1 = json_integer_value(json_object_get(r, "top1_correct"));
    long long t5 = json_integer_value(json_object_get(r, "top5_correct"));
    double dn = n ? (double)n : 1;
    size_t k = json_array_size(per);
    fprintf(out, "%s: %lld samples\n",
            json_string_value(json_object_get(r, "checkpoint")), n);
    long long left = json_integer_value(json_object_get(r, "left_out"));
    if (left) {
        char text[800];
        td_dataset_left_out_text((size_t)left, json_string_value(
                                     json_object_get(r, "left_out_first")),
                                 text, sizeof text);
        fprintf(out, "  %s\n", text);
    }
    if (k > 5)
        fprintf(out, "  top-1 %.4f (%lld)   top-5 %.4f (%lld)\n", t1 / dn,
                t1, t5 / dn, t5);
    else /* top-5 of 5 classes or fewer is always 1 */
        fprintf(out, "  top-1 %.4f (%lld)\n", t1 / dn, t1);
    /* What always answering the largest class scores: a model near it
     * has learnt nothing (a bad learning rate, too few steps). */
    long long most = 0;
    size_t big = 0;
    for (size_t c = 0; c < k; c++) {
        long long pn = json_integer_value(json_object_get(
            json_array_get(per, c), "samples"));
        if (pn > most) {
            most = pn;
            big = c;
        }
    }
    if (most > 0)
        fprintf(out, "  chance %.4f (always answering %s, the largest "
                "class)\n", (double)most / dn, json_string_value(
                    json_object_get(json_array_get(per, big), "class")));
    fprintf(out, "  per class:\n");
    for (size_t c = 0; c < k; c++) {
        const json_t *pc = json_array_get(per, c);
        long long pn = json_integer_value(json_object_get(pc, "samples"));
        long long ok = json_integer_value(
            json_array_get(json_array_get(conf, c), c));
        if (pn)
            fprintf(out, "    %-20s %.4f (%lld/%lld)\n",
                    json_string_value(json_object_get(pc, "class")),
                    (double)ok / (double)pn, ok, pn);
    }
    if (k <= 20) {
        fprintf(out, "  confusion (rows true, columns predicted):\n");
        for (size_t c = 0; c < k; c++) {
            const json_t *row = json_array_get(conf, c);
            fprintf(out, "    %-12.12s", json_string_value(json_object_get(
                                             json_array_get(per, c), "class")));
            for (size_t j = 0; j < k; j++)
                fprintf(out, " %5lld",
                        (long long)json_integer_value(json_array_get(row, j)));
            fprintf(out, "\n");
        }
    }
    fflush(out);
}

/* ---- predict ------------------------------------------------------------ */

typedef struct td__pred {
    const td_infer_run_opts *o;
    td_infer *inf;
    const td_model_meta *meta;
    int top, batch;
    int at[TD__PREDICT_BATCH]; /* the files' indices in the batch */
    int n;
    uint8_t *px;               /* batch samples */
    float *logits;
    json_t *list;              /* "predictions" */
    int64_t done, total;
} td__pred;

/* Softmax of one row in double, then the top K by probability. */
static json_t *td__top(td__pred *p, const char *file, const float *z)
{
    int k = p->meta->classes, top = p->top < k ? p->top : k;
    double mx = z[0], sum = 0;
    for (int i = 1; i < k; i++)
        mx = z[i] > mx ? z[i] : mx;
    double *pr = malloc((size_t)k * sizeof *pr);
    int *idx = malloc((size_t)top * sizeof *idx);
    json_t *arr = json_array();
    if (!pr || !idx || !arr) {
        free(pr);
        free(idx);
        json_decref(arr);
        return NULL;
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
    for (int t = 0; t < top; t++)
        json_array_append_new(arr, json_pack("{s:s, s:i, s:f}", "class",
                                             p->meta->class_names[idx[t]],
                                             "label", idx[t], "p",
                                             pr[idx[t]] / sum));
    free(pr);
    free(idx);
    /* a file name need not be UTF-8: td_json_text */
    return json_pack("{s:o, s:o}", "file", td_json_text(file), "top", arr);
}

static int td__add(td__pred *p, json_t *item)
{
    if (!item || json_array_append_new(p->list, item))
        return -ENOMEM;
    if (p->o->item)
        p->o->item(p->o->user, item);
    return 0;
}

static int td__flush(td__pred *p, const char *const *files, char *err,
                     size_t errcap)
{
    int rc;
    if (p->n == 0)
        return 0;
    if ((rc = td_infer_logits(p->inf, p->px, p->n, p->logits, err, errcap)))
        return rc;
    for (int i = 0; i < p->n; i++)
        if ((rc = td__add(p, td__top(p, files[p->at[i]],
                                     p->logits +
                                         (size_t)i * p->meta->classes)))) {
            snprintf(err, errcap, "out of memory");
            return rc;
        }
    p->done += p->n;
    p->n = 0;
    if (p->o->progress)
        p->o->progress(p->o->user, p->done, p->total);
    return 0;
}

/* Reads a whole file into *buf (grown as needed): a regular file of at
 * most TD_DATASET_SAMPLE_MAX bytes, as a dataset's sample (a FIFO, a
 * device or a sparse file of many GB hung or filled the daemon). */
static int td__slurp(const char *path, uint8_t **buf, size_t *cap,
                     size_t *len)
{
    int rc;
    FILE *f = td_fopen_regular(path, "rb", &rc);
    if (!f)
        return rc;
    *len = 0;
    for (;;) {
        if (*len > TD_DATASET_SAMPLE_MAX) {
            fclose(f);
            return -EFBIG;
        }
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
    rc = ferror(f) ? -EIO : 0;
    fclose(f);
    return rc;
}

/* One file read with the reader's identity. */
static int td__read_as(const td_infer_run_opts *o, const char *path,
                       uint8_t **buf, size_t *cap, size_t *len)
{
    td_fscred_saved saved;
    int rc = td_fscred_enter(o->cred, &saved);
    if (rc)
        return rc;
    rc = td__slurp(path, buf, cap, len);
    td_fscred_leave(&saved);
    return rc;
}

int td_infer_predict(const td_infer_run_opts *o, const char *const *files,
                     int n, json_t **result, char *err, size_t errcap)
{
    td__pred p = {.o = o, .top = o->top_k > 0 ? o->top_k : 5,
                  .batch = TD__PREDICT_BATCH, .total = n};
    td_decoder *dec = NULL;
    td_png png = {0};
    td_resampler rs;
    uint8_t *buf = NULL;
    size_t cap = 0, len = 0;
    int rc, bad = 0;
    *result = NULL;
    memset(&rs, 0, sizeof rs);
    if ((rc = td__open(o, p.batch, &p.inf, err, errcap)))
        return rc;
    p.meta = td_infer_meta(p.inf);
    const td_shape in = p.meta->in;
    size_t per = (size_t)in.c * in.h * in.w;
    p.px = malloc(per * (size_t)p.batch);
    p.logits = malloc((size_t)p.batch * p.meta->classes * sizeof(float));
    p.list = json_array();
    if (!p.px || !p.logits || !p.list || td_decoder_create(&dec) ||
        td_resampler_init(&rs, in.w, in.h, in.c)) {
        rc = -ENOMEM;
        snprintf(err, errcap, "out of memory");
        goto out;
    }
    if (o->progress)
        o->progress(o->user, 0, n);
    for (int i = 0; i < n; i++) {
        const char *file = files[i], *msg = NULL;
        if (td__stopped(o)) {
            rc = -ECANCELED;
            snprintf(err, errcap, "stopped after %lld of %d images",
                     (long long)p.done, n);
            goto out;
        }
        int r = td__read_as(o, file, &buf, &cap, &len);
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
            /* the ones before first, so entries keep the files' order */
            if ((rc = td__flush(&p, files, err, errcap)))
                goto out;
            snprintf(why, sizeof why, "%s%s%s",
                     r == TD_E_CORRUPT ? "not a readable JPEG or PNG"
                                       : "cannot read",
                     msg && msg[0] ? ": " : "", msg ? msg : "");
            if ((rc = td__add(&p, json_pack("{s:o, s:o}", "file",
                                            td_json_text(file), "error",
                                            td_json_text(why))))) {
                snprintf(err, errcap, "out of memory");
                goto out;
            }
            bad++;
            p.done++;
            continue;
        }
        p.at[p.n++] = i;
        if (p.n == p.batch && (rc = td__flush(&p, files, err, errcap)))
            goto out;
    }
    if ((rc = td__flush(&p, files, err, errcap)))
        goto out;
    *result = json_pack("{s:o, s:i, s:i, s:i, s:O}", "checkpoint",
                        td_json_text(o->checkpoint), "top_k", p.top, "images", n, "failed",
                        bad, "predictions", p.list);
    if (!*result) {
        rc = -ENOMEM;
        snprintf(err, errcap, "out of memory");
    }
out:
    td_resampler_free(&rs);
    td_png_free(&png);
    td_decoder_destroy(dec);
    td_infer_free(p.inf);
    json_decref(p.list);
    free(p.px);
    free(p.logits);
    free(buf);
    return rc;
}

void td_infer_predict_print_item(const json_t *item, int json, FILE *out,
                                 FILE *err_out)
{
    const char *file = json_string_value(json_object_get(item, "file"));
    const char *why = json_string_value(json_object_get(item, "error"));
    if (json) {
        char *s = td_json_dumps(item, JSON_COMPACT);
        if (s)
            fprintf(out, "%s\n", s);
        free(s);
    }
    if (why) {
        fflush(out);
        fprintf(err_out, "trainctl predict: %s: %s\n", file, why);
        return;
    }
    if (json) {
        fflush(out);
        return;
    }
    const json_t *top = json_object_get(item, "top");
    fprintf(out, "%s:", file);
    for (size_t t = 0; t < json_array_size(top); t++) {
        const json_t *e = json_array_get(top, t);
        fprintf(out, "%s %s %.4f", t ? "," : "",
                json_string_value(json_object_get(e, "class")),
                json_number_value(json_object_get(e, "p")));
    }
    fprintf(out, "\n");
    fflush(out);
}
