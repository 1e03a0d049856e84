/* feeder.c - the in-memory, in-order batch source (see feeder.h). */
#include "feeder.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/rng.h"
#include "input/augment.h"
#include "input/idx.h"

struct td_feeder {
    const td_dataset_mem *d;
    td_feeder_config cfg;
    uint32_t *perm;
    uint8_t *pixels;   /* one batch slot */
    int32_t *labels;
    int64_t epoch, step;
    int64_t nbatches;
    td_augment ops[2];  /* pad_crop, flip: the pipeline's own (augment.h) */
    int nops;
    td_resampler rs;
};

/* Loads <prefix>-<kind>-idx<ndims>-ubyte.gz, else the same without .gz,
 * and checks its rank. */
static int td__idx(const char *prefix, const char *kind, int ndims,
                   td_idx *idx, char *err, size_t errcap)
{
    char path[4096];
    int rc;
    snprintf(path, sizeof path, "%s-%s-idx%d-ubyte.gz", prefix, kind, ndims);
    if (access(path, F_OK) != 0)
        snprintf(path, sizeof path, "%s-%s-idx%d-ubyte", prefix, kind, ndims);
    if (access(path, F_OK) != 0) {
        snprintf(err, errcap, "%s-%s-idx%d-ubyte[.gz]: cannot open", prefix,
                 kind, ndims);
        return -ENOENT;
    }
    if ((rc = td_idx_load(path, idx, err, errcap)))
        return rc;
    if (idx->ndims != ndims) {
        snprintf(err, errcap, "%s: %d dimensions, expected %d", path,
                 idx->ndims, ndims);
        td_idx_free(idx);
        return TD_E_CORRUPT;
    }
    return 0;
}

int td_feeder_load_idx(const char *prefix, int limit, td_dataset_mem *out,
                char *err, size_t errcap)
{
    td_idx img = {0}, lab = {0};
    int rc;
    memset(out, 0, sizeof *out);
    if ((rc = td__idx(prefix, "images", 3, &img, err, errcap)) ||
        (rc = td__idx(prefix, "labels", 1, &lab, err, errcap)))
        goto fail;
    if (lab.dims[0] != img.dims[0]) {
        snprintf(err, errcap, "%s: %u images but %u labels", prefix,
                 img.dims[0], lab.dims[0]);
        rc = TD_E_CORRUPT;
        goto fail;
    }
    out->n = (int)img.dims[0];
    if (limit > 0 && limit < out->n)
        out->n = limit;
    out->h = (int)img.dims[1];
    out->w = (int)img.dims[2];
    out->c = 1;
    out->labels = malloc(sizeof *out->labels * (size_t)out->n);
    if (!out->labels) {
        rc = -ENOMEM;
        goto fail;
    }
    for (int i = 0; i < out->n; i++) {
        out->labels[i] = lab.data[i];
        if (lab.data[i] + 1 > out->classes)
            out->classes = lab.data[i] + 1;
    }
    out->images = img.data; /* taken over from img */
    td_idx_free(&lab);
    return 0;
fail:
    td_idx_free(&img);
    td_idx_free(&lab);
    memset(out, 0, sizeof *out);
    return rc;
}

void td_dataset_mem_free(td_dataset_mem *d)
{
    free(d->images);
    free(d->labels);
    memset(d, 0, sizeof *d);
}

int64_t td_feeder_batches_per_epoch(const td_feeder *f) { return f->nbatches; }

static void td__perm(td_feeder *f)
{
    if (f->cfg.shuffle)
        td_rng_permutation(f->cfg.seed,
                           td_rng_stream(TD_RNG_PERMUTE, (uint64_t)f->epoch),
                           f->perm, (size_t)f->d->n);
    else
        for (int i = 0; i < f->d->n; i++)
            f->perm[i] = (uint32_t)i;
}

static int td__start(void *self, int64_t epoch, int64_t step)
{
    td_feeder *f = self;
    if (epoch < 0 || step < 0 || step >= f->nbatches)
        return -EINVAL;
    f->epoch = epoch;
    f->step = step;
    td__perm(f);
    return 0;
}

/* Copies sample `s` into `dst` with the augmentation of position `pos`. */
/* Copies sample `s` into `dst` with the augmentation of position `pos`:
 * the pipeline's plan and resampling (augment.h) on the whole image, at
 * full scale.  0, or -ENOMEM when the resampler's row scratch cannot grow
 * (it grows on first use). */
static int td__sample(td_feeder *f, int s, uint64_t pos, uint8_t *dst)
{
    const td_dataset_mem *d = f->d;
    const uint8_t *src = d->images + (size_t)s * d->h * d->w * d->c;
    if (!f->nops) {
        memcpy(dst, src, (size_t)d->h * d->w * d->c);
        return 0;
    }
    td_aug_plan plan;
    td_augment_plan(f->ops, f->nops, 1, f->cfg.seed, f->epoch, pos, d->w,
                    d->h, d->w, d->h, &plan);
    td_region reg = {.px = src, .stride = (size_t)d->w * d->c, .w = d->w,
                     .h = d->h, .scaled_w = d->w, .scaled_h = d->h,
                     .scale_num = 8, .c = d->c};
    return td_augment_apply(&f->rs, &reg, d->w, d->h, &plan,
                            TD_LAYOUT_NHWC, dst);
}

static int td__next(void *self, td_batch *b, int64_t *wait_ns)
{
    td_feeder *f = self;
    int64_t t0 = td_now_ns();
    const td_dataset_mem *d = f->d;
    if (f->step >= f->nbatches) {
        f->epoch++;
        f->step = 0;
        td__perm(f);
    }
    int64_t first = f->step * f->cfg.batch;
    int n = f->cfg.batch;
    if (first + n > d->n)
        n = (int)(d->n - first);
    size_t per = (size_t)d->h * d->w * d->c;
    for (int i = 0; i < n; i++) {
        uint32_t s = f->perm[first + i];
        int rc = td__sample(f, (int)s, (uint64_t)(first + i),
                            f->pixels + per * i);
        if (rc)
            return rc;
        f->labels[i] = d->labels[s];
    }
    *b = (td_batch){.data = f->pixels, .labels = f->labels, .n = n,
                    .h = d->h, .w = d->w, .c = d->c,
                    .layout = TD_LAYOUT_NHWC, .epoch = f->epoch,
                    .step = f->step,
                    .last_in_epoch = f->step + 1 == f->nbatches};
    f->step++;
    if (wait_ns) /* the trainer waited while this thread made the batch */
        *wait_ns = td_now_ns() - t0;
    return 0;
}

static void td__release(void *self, td_batch *b) { b->slot = NULL; }

td_batch_source td_feeder_source(td_feeder *f)
{
    return (td_batch_source){.start = td__start, .next = td__next,
                             .release = td__release, .self = f};
}

int td_feeder_create(const td_dataset_mem *d, const td_feeder_config *cfg,
                     td_feeder **out)
{
    *out = NULL;
    if (cfg->batch < 1 || d->n < 1 || (cfg->drop_last && d->n < cfg->batch) ||
        cfg->pad_crop < 0)
        return -EINVAL;
    td_feeder *f = calloc(1, sizeof *f);
    if (!f)
        return -ENOMEM;
    f->d = d;
    f->cfg = *cfg;
    f->nbatches = cfg->drop_last ? d->n / cfg->batch
                                 : (d->n + cfg->batch - 1) / cfg->batch;
    if (cfg->pad_crop > 0) {
        td_augment_default(&f->ops[f->nops], TD_AUG_PAD_CROP);
        f->ops[f->nops++].pad = cfg->pad_crop;
    }
    if (cfg->flip)
        td_augment_default(&f->ops[f->nops++], TD_AUG_FLIP);
    if (td_resampler_init(&f->rs, d->w, d->h, d->c) != 0) {
        td_feeder_free(f);
        return -ENOMEM;
    }
    f->perm = malloc(sizeof *f->perm * (size_t)d->n);
    f->pixels = malloc((size_t)cfg->batch * d->h * d->w * d->c);
    f->labels = malloc(sizeof *f->labels * (size_t)cfg->batch);
    if (!f->perm || !f->pixels || !f->labels) {
        td_feeder_free(f);
        return -ENOMEM;
    }
    td__perm(f);
    *out = f;
    return 0;
}

void td_feeder_free(td_feeder *f)
{
    if (!f)
        return;
    td_resampler_free(&f->rs);
    free(f->perm);
    free(f->pixels);
    free(f->labels);
    free(f);
}
