/* spec_rules.c - the job spec's rules that involve more than one field
 * (docs/job-spec.md, "Rules that involve several fields"), run by
 * td_spec_parse after every field passed its own checks.
 *
 * Owns: the cross-field rules, each message naming the field at fault
 * ("path: rule"), and the values a field's own range cannot catch (what
 * single precision makes of them).  Never: a single field's type or
 * range (spec.c's table), the file system, devices, models or data (the
 * daemon's checks at submit).
 */
#include "job/spec.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/error.h"

struct td__rctx {
    const td_job_spec *spec;
    char *err;
    size_t cap;
};

/* "path: rule" into the error text; TD_E_SPEC. */
__attribute__((format(printf, 3, 4))) static int
td__fail(struct td__rctx *c, const char *path, const char *fmt, ...)
{
    char rule[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rule, sizeof rule, fmt, ap);
    va_end(ap);
    return td_set_error(c->err, c->cap, TD_E_SPEC, "%s: %s", path, rule);
}

/* The augment ops' geometry: one geometric op (a resize right before a
 * center_crop is part of it: torchvision's Resize(s) + CenterCrop), and
 * every size the model's input size, which is what the pipeline writes
 * (a size it could not honour would be trained past silently). */
static int td__aug_geometry(struct td__rctx *c)
{
    const td_job_spec *s = c->spec;
    const int *in = s->input.size;
    char p[64];
    int geo = -1;
    for (int i = 0; i < s->input.n_augment; i++) {
        const td_aug_spec *a = &s->input.augment[i];
        int before = a->op == TD_SPEC_AUG_RESIZE &&
                     i + 1 < s->input.n_augment &&
                     s->input.augment[i + 1].op == TD_SPEC_AUG_CENTER_CROP;
        snprintf(p, sizeof p, "input.augment[%d]", i);
        if (a->op == TD_SPEC_AUG_FLIP || a->op == TD_SPEC_AUG_COLOR_JITTER)
            continue;
        if (geo >= 0 && !(a->op == TD_SPEC_AUG_CENTER_CROP && geo == i - 1 &&
                          s->input.augment[geo].op == TD_SPEC_AUG_RESIZE))
            return td__fail(c, p, "a second geometric op after "
                            "input.augment[%d] (%s): one of "
                            "random_resized_crop, pad_crop, center_crop, "
                            "resize (a resize right before a center_crop "
                            "counts as one)", geo,
                            td_spec_aug_op_name(s->input.augment[geo].op));
        geo = i;
        strcat(p, ".size");
        if (before) { /* the image's shorter side, then the crop */
            if (a->size[0] != a->size[1])
                return td__fail(c, p, "before a center_crop, resize takes "
                                "one side (the image's shorter side, e.g. "
                                "256), not [%d, %d]", a->size[0], a->size[1]);
            if (a->size[0] < in[0] || a->size[0] < in[1])
                return td__fail(c, p, "%d is smaller than the crop after it "
                                "(input.size [%d, %d])", a->size[0], in[0],
                                in[1]);
            continue;
        }
        if (a->op != TD_SPEC_AUG_PAD_CROP &&
            (a->size[0] != in[0] || a->size[1] != in[1]))
            return td__fail(c, p, "[%d, %d] differs from input.size [%d, "
                            "%d]: the ops' output is the model's input "
                            "(leave size out, or change input.size)",
                            a->size[0], a->size[1], in[0], in[1]);
    }
    return 0;
}

/* Values the backends hold in single precision: a label_smoothing that
 * rounds to 1 or a std that rounds to 0 there passed the table (in double)
 * and failed the job when it started; a denormal std or an overflowing
 * mean gave infinite normalised pixels, an overflowing std zero ones. */
static int td__single_precision(struct td__rctx *c)
{
    const td_job_spec *s = c->spec;
    char p[64];
    if ((float)s->label_smoothing >= 1.0f)
        return td__fail(c, "label_smoothing", "%.12g rounds to 1 in single "
                        "precision, where the loss is computed: must be at "
                        "most %.9g", s->label_smoothing,
                        (double)nextafterf(1.0f, 0.0f));
    for (int i = 0; i < s->input.channels; i++) {
        if (!isfinite((float)s->input.mean[i])) {
            snprintf(p, sizeof p, "input.normalize.mean[%d]", i);
            return td__fail(c, p, "%g overflows single precision, where "
                            "the input is normalised: must be within "
                            "+-%.9g", s->input.mean[i], (double)FLT_MAX);
        }
        if (!isfinite((float)s->input.std[i])) {
            snprintf(p, sizeof p, "input.normalize.std[%d]", i);
            return td__fail(c, p, "%g overflows single precision, where "
                            "the input is normalised: must be at most "
                            "%.9g", s->input.std[i], (double)FLT_MAX);
        }
        if ((float)s->input.std[i] < FLT_MIN) {
            snprintf(p, sizeof p, "input.normalize.std[%d]", i);
            return td__fail(c, p, "%g rounds to 0 or a denormal in single "
                            "precision, where the input is normalised: must "
                            "be at least %.9g", s->input.std[i],
                            (double)FLT_MIN);
        }
    }
    return 0;
}

/* pad_crop crops input.size out of the image padded by `pad` on every
 * side, shifted by up to `pad` pixels from where the image is: with a pad
 * as large as a side of the crop, some crops miss the image entirely and
 * train on padding alone (whatever the image's own size). */
static int td__pad_crop(struct td__rctx *c)
{
    const td_job_spec *s = c->spec;
    const int *in = s->input.size;
    int side = in[0] < in[1] ? in[0] : in[1];
    char p[64];
    for (int i = 0; i < s->input.n_augment; i++) {
        const td_aug_spec *a = &s->input.augment[i];
        if (a->op != TD_SPEC_AUG_PAD_CROP || a->pad < side)
            continue;
        snprintf(p, sizeof p, "input.augment[%d].pad", i);
        return td__fail(c, p, "%d is not less than the crop's side "
                        "(input.size [%d, %d]): a crop shifted by up to %d "
                        "pixels can miss the image and be all padding; "
                        "must be at most %d", a->pad, in[0], in[1], a->pad,
                        side - 1);
    }
    return 0;
}

/* A normalised pixel is (x - mean) / std with x scaled to [0, 1]
 * (kernels/normalize.h), so its extremes are at x = 0 and x = 1.  Beyond
 * fp16's largest finite value (a tiny std: the table takes any std > 0)
 * it is inf in an fp16 job, and a run in any precision diverges on it. */
static int td__normalize_range(struct td__rctx *c)
{
    const td_job_spec *s = c->spec;
    const double bound = 65504.0; /* TD_F16_MAX, kernels/fp16.h */
    char p[64];
    for (int i = 0; i < s->input.channels; i++) {
        double m = s->input.mean[i], sd = s->input.std[i];
        double lo = (0.0 - m) / sd, hi = (1.0 - m) / sd;
        int at0 = fabs(lo) >= fabs(hi);
        double worst = at0 ? lo : hi;
        if (fabs(worst) <= bound)
            continue;
        snprintf(p, sizeof p, "input.normalize.std[%d]", i);
        return td__fail(c, p, "%g lets a normalised pixel reach %.6g ((%d - "
                        "mean %g) / std, pixels scaled to [0, 1]): beyond "
                        "+-%g, the largest finite fp16 value; with this "
                        "mean, std must be at least %.6g", sd, worst,
                        at0 ? 0 : 1, m, bound,
                        /* up a little, so the 6 digits are enough */
                        fmax(fabs(m), fabs(1.0 - m)) / bound * (1 + 1e-5));
    }
    return 0;
}

int td_spec_rules(const td_job_spec *s, char *err, size_t errcap)
{
    struct td__rctx rc = {s, err, errcap}, *c = &rc;
    int r;
    if ((r = td__aug_geometry(c)) || (r = td__single_precision(c)) ||
        (r = td__pad_crop(c)) || (r = td__normalize_range(c)))
        return r;
    if (s->input.layout == TD_SPEC_LAYOUT_NCHW)
        return td__fail(c, "input.layout", "nchw is not available: the "
                        "batch reaches the device as uint8 NHWC, and each "
                        "backend picks its activations' layout (use auto "
                        "or nhwc)");
    if (s->input.source == TD_SOURCE_FILES && s->data.train.n == 0)
        return td__fail(c, "data.train",
                        "missing (required unless input.source is "
                        "\"synthetic\")");
    if (s->data.val_fraction > 0 && s->data.val.n)
        return td__fail(c, "data.val_fraction",
                        "cannot be used with data.val (hold out part of "
                        "data.train, or name a validation set; "
                        "--set data.val=null drops a job file's)");
    /* Both act on the validation metric after an epoch; without one they
     * were accepted and did nothing. */
    int val = s->input.source == TD_SOURCE_FILES &&
              (s->data.val.n || s->data.val_fraction > 0);
    if (s->early_stopping.patience > 0 && !val)
        return td__fail(c, "early_stopping.patience",
                        "needs a validation set (data.val or "
                        "data.val_fraction, with input.source \"files\"): "
                        "it watches the validation metric");
    if (s->checkpoint.keep_best && !val)
        return td__fail(c, "checkpoint.keep_best",
                        "needs a validation set (data.val or "
                        "data.val_fraction, with input.source \"files\"): "
                        "best is by the validation metric");
    if (s->checkpoint.keep_best && !s->checkpoint.at_epoch_end)
        return td__fail(c, "checkpoint.keep_best",
                        "needs checkpoint.at_epoch_end: best.safetensors is "
                        "an epoch-end checkpoint");
    if (s->optimizer.nesterov && s->optimizer.momentum <= 0)
        return td__fail(c, "optimizer.nesterov",
                        "needs optimizer.momentum > 0");
    if (s->optimizer.schedule.min_lr > s->optimizer.lr)
        return td__fail(c, "optimizer.schedule.min_lr",
                        "must be <= optimizer.lr");
    return 0;
}
