/* augment.h - per-sample augmentation on uint8 pixels.
 *
 * Two steps.  td_augment_plan() draws everything random about a sample
 * from (seed, epoch, sample index) through Philox - the crop box in source
 * pixels, the flip, the colour-jitter factors - before any decoding, so
 * the decoder can decode just the box at a reduced DCT scale.  Then
 * td_augment_apply() resamples the decoded region into the batch slot in
 * one pass (bilinear, fixed-point; flip folded into the column table;
 * HWC or CHW written directly), and applies colour jitter in a second
 * pass over the sample while it is still in cache.
 *
 * Ops (at most one geometric op; none means "resize the whole image"):
 *   random_resized_crop  scale [s0, s1] of the area, aspect ratio in
 *                        [r0, r1] log-uniform, 10 tries, then the centre
 *                        fallback - exactly torchvision's recipe
 *   pad_crop             pad by `pad` zeros, random crop of the output size
 *   center_crop          shorter side to `resize` (0: the output size),
 *                        then the centred output-size crop
 *   resize               the whole image to the output size
 *   flip                 horizontal, with probability p (default 0.5)
 *   color_jitter         brightness, contrast, saturation factors drawn
 *                        uniformly from [max(0, 1 - v), 1 + v], applied in
 *                        that order (torchvision shuffles the order)
 * Eval mode (train == 0) draws nothing: random_resized_crop takes its
 * fallback (the centre crop of the whole image with the aspect ratio
 * clamped to the range), pad_crop the centred crop, flip and jitter do
 * nothing.
 *
 * Owns: the draws and the pixel loops.  Never: allocates (the caller's
 * td_resampler holds the tables), or touches files.
 */
#ifndef TD_AUGMENT_H
#define TD_AUGMENT_H

#include <stddef.h>
#include <stdint.h>

#include "input/batch.h"
#include "input/decode.h"

enum td_aug_op {
    TD_AUG_RANDOM_RESIZED_CROP = 1,
    TD_AUG_PAD_CROP,
    TD_AUG_CENTER_CROP,
    TD_AUG_RESIZE,
    TD_AUG_FLIP,
    TD_AUG_COLOR_JITTER,
};

typedef struct td_augment {
    enum td_aug_op op;
    double scale[2];   /* random_resized_crop, default 0.08 .. 1 */
    double ratio[2];   /* random_resized_crop, default 3/4 .. 4/3 */
    int pad;           /* pad_crop, default 4 */
    int resize;        /* center_crop, default 0 (= output size) */
    double p;          /* flip, default 0.5 */
    double brightness, contrast, saturation; /* color_jitter, default 0.4 */
} td_augment;

#define TD_AUG_MAX 8

/* Fills the defaults above for op. */
void td_augment_default(td_augment *a, enum td_aug_op op);
/* Parses "random_resized_crop,flip" (names as above) into ops with
 * defaults; returns the count or -EINVAL (err names the bad word). */
int td_augment_parse_list(const char *list, td_augment *ops, int max,
                          char *err, size_t errcap);
const char *td_augment_name(enum td_aug_op op);
/* Reads a job spec's input.augment array: objects {"op": NAME, ...} with
 * the parameters above as keys (scale and ratio as [lo, hi] arrays);
 * missing keys keep their defaults, unknown keys are errors.  Returns the
 * count or -EINVAL; err names the element and key ("augment[1].pad: ..."). */
struct json_t;
int td_augment_from_json(const struct json_t *arr, td_augment *ops, int max,
                         char *err, size_t errcap);
/* Checks ranges and that at most one geometric op is present. */
int td_augment_validate(const td_augment *ops, int n, char *err,
                        size_t errcap);

/* What the draws decided for one sample. */
typedef struct td_aug_plan {
    double x, y, w, h;  /* source box; may stick out of the image (pad) */
    int flip;
    int jitter;         /* 0: the factors are all 1 */
    float brightness, contrast, saturation;
} td_aug_plan;

void td_augment_plan(const td_augment *ops, int n, int train, uint64_t seed,
                     int64_t epoch, uint64_t sample, int img_w, int img_h,
                     int out_w, int out_h, td_aug_plan *plan);

/* Column/row tables for one output size; one per worker. */
typedef struct td_resampler {
    int out_w, out_h, c;
    int32_t *xo0, *xo1;     /* byte offsets of the two taps, -1: zero */
    uint16_t *wx;           /* weight of the second tap, 0..256 */
    uint64_t *wx4;          /* wx replicated in four 16-bit lanes */
    int32_t *yr0, *yr1;
    uint16_t *wy;
    uint8_t *tmp;           /* one vertically blended region row */
    size_t tmp_cap;
    int avx2;               /* use the AVX2 passes (same results) */
} td_resampler;

/* Tables for out_w x out_h x c; the AVX2 passes are used when the CPU
 * has AVX2 (td_resampler_use_avx2 turns them off or on, for tests: both
 * give the same bytes). */
int td_resampler_init(td_resampler *r, int out_w, int out_h, int c);
/* 1 if the AVX2 passes are now in use (the CPU must have AVX2). */
int td_resampler_use_avx2(td_resampler *r, int on);
void td_resampler_free(td_resampler *r);

/* Writes the sample (out_w x out_h x c) at dst: HWC, or CHW (planes of
 * out_h*out_w).  0, or -ENOMEM when the row scratch cannot grow (it grows
 * to the widest region seen, then stays). */
int td_augment_apply(td_resampler *r, const td_region *reg, int img_w,
                     int img_h, const td_aug_plan *plan,
                     enum td_layout layout, uint8_t *dst);

#endif
