/* augment.c - augmentation draws and the uint8 resampler (see augment.h). */
#include "input/augment.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#define TD__AVX2 1 /* compiled for any x86-64, chosen at run time */
#include <immintrin.h>
#endif

#include "base/rng.h"

/* ---- ops -------------------------------------------------------------- */

static const char *const td__aug_names[] = {
    [TD_AUG_RANDOM_RESIZED_CROP] = "random_resized_crop",
    [TD_AUG_PAD_CROP] = "pad_crop",
    [TD_AUG_CENTER_CROP] = "center_crop",
    [TD_AUG_RESIZE] = "resize",
    [TD_AUG_FLIP] = "flip",
    [TD_AUG_COLOR_JITTER] = "color_jitter",
};

const char *td_augment_name(enum td_aug_op op)
{
    if (op < TD_AUG_RANDOM_RESIZED_CROP || op > TD_AUG_COLOR_JITTER)
        return "unknown";
    return td__aug_names[op];
}

void td_augment_default(td_augment *a, enum td_aug_op op)
{
    memset(a, 0, sizeof *a);
    a->op = op;
    a->scale[0] = 0.08;
    a->scale[1] = 1.0;
    a->ratio[0] = 3.0 / 4.0;
    a->ratio[1] = 4.0 / 3.0;
    a->pad = 4;
    a->p = 0.5;
    a->brightness = a->contrast = a->saturation = 0.4;
}

int td_augment_parse_list(const char *list, td_augment *ops, int max,
                          char *err, size_t errcap)
{
    int n = 0;
    const char *p = list;
    while (p && *p) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        int found = 0;
        for (int op = TD_AUG_RANDOM_RESIZED_CROP; op <= TD_AUG_COLOR_JITTER;
             op++)
            if (strlen(td__aug_names[op]) == len &&
                strncmp(p, td__aug_names[op], len) == 0) {
                if (n == max) {
                    snprintf(err, errcap, "more than %d augmentations", max);
                    return -EINVAL;
                }
                td_augment_default(&ops[n++], (enum td_aug_op)op);
                found = 1;
            }
        if (!found && len > 0) {
            snprintf(err, errcap, "unknown augmentation '%.*s' (known: "
                     "random_resized_crop, pad_crop, center_crop, resize, "
                     "flip, color_jitter)", (int)len, p);
            return -EINVAL;
        }
        p = e ? e + 1 : NULL;
    }
    return n;
}

static int td__json_pair(json_t *v, double out[2])
{
    if (!json_is_array(v) || json_array_size(v) != 2 ||
        !json_is_number(json_array_get(v, 0)) ||
        !json_is_number(json_array_get(v, 1)))
        return -1;
    out[0] = json_number_value(json_array_get(v, 0));
    out[1] = json_number_value(json_array_get(v, 1));
    return 0;
}

/* One key of an augment object into a; -1 if the key is unknown or
 * its value has the wrong type. */
static int td__json_key(td_augment *a, const char *k, json_t *v)
{
    if (strcmp(k, "op") == 0)
        return 0;
    if (strcmp(k, "scale") == 0)
        return td__json_pair(v, a->scale);
    if (strcmp(k, "ratio") == 0)
        return td__json_pair(v, a->ratio);
    if (strcmp(k, "pad") == 0 || strcmp(k, "resize") == 0) {
        if (!json_is_integer(v))
            return -1;
        *(k[0] == 'p' ? &a->pad : &a->resize) = (int)json_integer_value(v);
        return 0;
    }
    double *d = strcmp(k, "p") == 0            ? &a->p
                : strcmp(k, "brightness") == 0 ? &a->brightness
                : strcmp(k, "contrast") == 0   ? &a->contrast
                : strcmp(k, "saturation") == 0 ? &a->saturation
                                               : NULL;
    if (!d || !json_is_number(v))
        return -1;
    *d = json_number_value(v);
    return 0;
}

int td_augment_from_json(const struct json_t *arr, td_augment *ops, int max,
                         char *err, size_t errcap)
{
    json_t *a = (json_t *)arr;
    if (!json_is_array(a)) {
        snprintf(err, errcap, "augment: must be an array of objects");
        return -EINVAL;
    }
    if ((int)json_array_size(a) > max) {
        snprintf(err, errcap, "augment: more than %d entries", max);
        return -EINVAL;
    }
    for (size_t i = 0; i < json_array_size(a); i++) {
        json_t *o = json_array_get(a, i), *v;
        const char *op = json_string_value(json_object_get(o, "op")), *k;
        int found = 0;
        for (int t = TD_AUG_RANDOM_RESIZED_CROP; op && t <= TD_AUG_COLOR_JITTER;
             t++)
            if (strcmp(op, td__aug_names[t]) == 0) {
                td_augment_default(&ops[i], (enum td_aug_op)t);
                found = 1;
            }
        if (!found) {
            snprintf(err, errcap, "augment[%zu].op: %s%s%s", i,
                     op ? "unknown op '" : "missing", op ? op : "",
                     op ? "'" : "");
            return -EINVAL;
        }
        json_object_foreach(o, k, v)
        {
            if (td__json_key(&ops[i], k, v)) {
                snprintf(err, errcap, "augment[%zu].%s: unknown key or wrong "
                         "type for %s", i, k, op);
                return -EINVAL;
            }
        }
    }
    return (int)json_array_size(a);
}

static int td__geometric(enum td_aug_op op)
{
    return op == TD_AUG_RANDOM_RESIZED_CROP || op == TD_AUG_PAD_CROP ||
           op == TD_AUG_CENTER_CROP || op == TD_AUG_RESIZE;
}

int td_augment_validate(const td_augment *ops, int n, char *err,
                        size_t errcap)
{
    int geo = 0;
    for (int i = 0; i < n; i++) {
        const td_augment *a = &ops[i];
        const char *name = td_augment_name(a->op);
        if (a->op < TD_AUG_RANDOM_RESIZED_CROP || a->op > TD_AUG_COLOR_JITTER) {
            snprintf(err, errcap, "augment[%d]: unknown op %d", i, (int)a->op);
            return -EINVAL;
        }
        if (td__geometric(a->op) && geo++) {
            snprintf(err, errcap, "augment[%d] (%s): only one of "
                     "random_resized_crop, pad_crop, center_crop, resize",
                     i, name);
            return -EINVAL;
        }
        if (a->op == TD_AUG_RANDOM_RESIZED_CROP &&
            !(a->scale[0] > 0 && a->scale[0] <= a->scale[1] &&
              a->scale[1] <= 1 && a->ratio[0] > 0 &&
              a->ratio[0] <= a->ratio[1])) {
            snprintf(err, errcap, "augment[%d] (%s): need 0 < scale[0] <= "
                     "scale[1] <= 1 and 0 < ratio[0] <= ratio[1]", i, name);
            return -EINVAL;
        }
        if ((a->op == TD_AUG_PAD_CROP && (a->pad < 0 || a->pad > 4096)) ||
            (a->op == TD_AUG_CENTER_CROP && (a->resize < 0 ||
                                             a->resize > 65535)) ||
            (a->op == TD_AUG_FLIP && !(a->p >= 0 && a->p <= 1)) ||
            (a->op == TD_AUG_COLOR_JITTER &&
             !(a->brightness >= 0 && a->contrast >= 0 &&
               a->saturation >= 0 && a->brightness <= 10 &&
               a->contrast <= 10 && a->saturation <= 10))) {
            snprintf(err, errcap, "augment[%d] (%s): parameter out of range",
                     i, name);
            return -EINVAL;
        }
    }
    return 0;
}

/* ---- draws ------------------------------------------------------------ */

/* Draw numbers within a sample's block of 64 (index = sample * 64 + k). */
enum { TD__K_RRC = 0, TD__K_PAD = 48, TD__K_FLIP = 50, TD__K_JITTER = 51 };

struct td__draw {
    uint64_t seed, stream, base;
};

static double td__u(const struct td__draw *d, int k)
{
    return td_rng_uniform(d->seed, d->stream, d->base + (uint64_t)k);
}

static uint64_t td__below(const struct td__draw *d, int k, uint64_t n)
{
    return td_rng_below(d->seed, d->stream, d->base + (uint64_t)k, n);
}

static void td__rrc(const td_augment *a, const struct td__draw *d, int train,
                    int W, int H, td_aug_plan *p)
{
    double area = (double)W * H;
    double lr0 = log(a->ratio[0]), lr1 = log(a->ratio[1]);
    for (int t = 0; train && t < 10; t++) {
        double ta = area * (a->scale[0] + (a->scale[1] - a->scale[0]) *
                                              td__u(d, TD__K_RRC + 4 * t));
        double ar = exp(lr0 + (lr1 - lr0) * td__u(d, TD__K_RRC + 4 * t + 1));
        int w = (int)lround(sqrt(ta * ar)), h = (int)lround(sqrt(ta / ar));
        if (w > 0 && w <= W && h > 0 && h <= H) {
            p->y = (double)td__below(d, TD__K_RRC + 4 * t + 2,
                                     (uint64_t)(H - h + 1));
            p->x = (double)td__below(d, TD__K_RRC + 4 * t + 3,
                                     (uint64_t)(W - w + 1));
            p->w = w;
            p->h = h;
            return;
        }
    }
    /* torchvision's fallback: the centre crop with the ratio clamped. */
    double in_ratio = (double)W / H;
    int w = W, h = H;
    if (in_ratio < a->ratio[0])
        h = (int)lround(W / a->ratio[0]);
    else if (in_ratio > a->ratio[1])
        w = (int)lround(H * a->ratio[1]);
    p->w = w;
    p->h = h;
    p->x = (W - w) / 2;
    p->y = (H - h) / 2;
}

static void td__pad_crop(const td_augment *a, const struct td__draw *d,
                         int train, int W, int H, int ow, int oh,
                         td_aug_plan *p)
{
    int rx = W + 2 * a->pad - ow, ry = H + 2 * a->pad - oh;
    p->w = ow;
    p->h = oh;
    if (train && rx >= 0 && ry >= 0) {
        p->x = (double)td__below(d, TD__K_PAD, (uint64_t)rx + 1) - a->pad;
        p->y = (double)td__below(d, TD__K_PAD + 1, (uint64_t)ry + 1) - a->pad;
    } else {
        p->x = (W - ow) / 2;
        p->y = (H - oh) / 2;
    }
}

static float td__factor(const struct td__draw *d, int k, double v)
{
    double lo = 1 - v > 0 ? 1 - v : 0;
    return (float)(lo + (1 + v - lo) * td__u(d, k));
}

void td_augment_plan(const td_augment *ops, int n, int train, uint64_t seed,
                     int64_t epoch, uint64_t sample, int W, int H, int ow,
                     int oh, td_aug_plan *p)
{
    struct td__draw d = {seed, td_rng_stream(TD_RNG_AUGMENT, (uint64_t)epoch),
                         sample * 64};
    memset(p, 0, sizeof *p);
    p->w = W;
    p->h = H;
    p->brightness = p->contrast = p->saturation = 1;
    for (int i = 0; i < n; i++) {
        const td_augment *a = &ops[i];
        switch (a->op) {
        case TD_AUG_RANDOM_RESIZED_CROP:
            td__rrc(a, &d, train, W, H, p);
            break;
        case TD_AUG_PAD_CROP:
            td__pad_crop(a, &d, train, W, H, ow, oh, p);
            break;
        case TD_AUG_CENTER_CROP: {
            double r = a->resize ? a->resize : (ow < oh ? ow : oh);
            double s = r / (W < H ? W : H);
            p->w = ow / s;
            p->h = oh / s;
            p->x = (W - p->w) / 2;
            p->y = (H - p->h) / 2;
            break;
        }
        case TD_AUG_RESIZE:
            break;
        case TD_AUG_FLIP:
            p->flip = train && td__u(&d, TD__K_FLIP) < a->p;
            break;
        case TD_AUG_COLOR_JITTER:
            if (!train)
                break;
            p->brightness = td__factor(&d, TD__K_JITTER, a->brightness);
            p->contrast = td__factor(&d, TD__K_JITTER + 1, a->contrast);
            p->saturation = td__factor(&d, TD__K_JITTER + 2, a->saturation);
            p->jitter = 1;
            break;
        }
    }
}

/* ---- resampling ------------------------------------------------------- */

int td_resampler_init(td_resampler *r, int out_w, int out_h, int c)
{
    memset(r, 0, sizeof *r);
    r->out_w = out_w;
    r->out_h = out_h;
    r->c = c;
    r->xo0 = malloc(sizeof(int32_t) * (size_t)out_w);
    r->xo1 = malloc(sizeof(int32_t) * (size_t)out_w);
    r->wx = malloc(sizeof(uint16_t) * (size_t)out_w);
    r->yr0 = malloc(sizeof(int32_t) * (size_t)out_h);
    r->yr1 = malloc(sizeof(int32_t) * (size_t)out_h);
    r->wy = malloc(sizeof(uint16_t) * (size_t)out_h);
    r->wx4 = malloc(sizeof(uint64_t) * ((size_t)out_w + 1));
    td_resampler_use_avx2(r, 1);
    if (!r->xo0 || !r->xo1 || !r->wx || !r->yr0 || !r->yr1 || !r->wy ||
        !r->wx4) {
        td_resampler_free(r);
        return -ENOMEM;
    }
    return 0;
}

int td_resampler_use_avx2(td_resampler *r, int on)
{
#if defined(TD__AVX2)
    r->avx2 = on && __builtin_cpu_supports("avx2");
#else
    (void)on;
    r->avx2 = 0;
#endif
    return r->avx2;
}

void td_resampler_free(td_resampler *r)
{
    free(r->xo0);
    free(r->xo1);
    free(r->wx);
    free(r->yr0);
    free(r->yr1);
    free(r->wy);
    free(r->tmp);
    free(r->wx4);
    memset(r, 0, sizeof *r);
}

/* One axis: output i samples source coordinate start + (i + .5) * len / n
 * - .5; in region pixels (scaled by f, offset by r0, r_len long).  Taps
 * outside the image (pad) get -1. */
static void td__axis(int n, double start, double len, int img, double f,
                     int r0, int rlen, int flip, int32_t *t0, int32_t *t1,
                     uint16_t *w, int mul)
{
    for (int i = 0; i < n; i++) {
        int o = flip ? n - 1 - i : i;
        double s = start + (o + 0.5) * len / n - 0.5;
        if (s < -0.5 || s > img - 0.5) {
            t0[i] = t1[i] = -1;
            w[i] = 0;
            continue;
        }
        double ss = (s + 0.5) * f - 0.5 - r0;
        int k = (int)floor(ss);
        double fr = ss - k;
        if (k < 0) {
            k = 0;
            fr = 0;
        } else if (k >= rlen - 1) {
            k = rlen - 1;
            fr = 0;
        }
        int wt = (int)lround(fr * 256);
        int k1 = k + 1 < rlen ? k + 1 : k;
        if (wt == 256) {
            k = k1;
            wt = 0;
        }
        t0[i] = k * mul;
        t1[i] = k1 * mul;
        w[i] = (uint16_t)wt;
    }
}

/* Separable bilinear with 8-bit weights, vertical pass first: each
 * output row blends its two source rows over the region's width into a
 * uint8 row (contiguous, so it vectorises), then the horizontal pass
 * gathers two taps per output value from it (SSE2 for RGB: one pixel's
 * three channels per 16-bit lane group).  Each pass runs once per output
 * row whatever the scale factor.  Both passes round, so a value can be
 * one level off an exact bilinear interpolation. */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("tree-vectorize")))
#endif
static void td__vpass(const uint8_t *r0, const uint8_t *r1, uint32_t wy,
                      uint8_t *d, int n)
{
    uint16_t w0 = (uint16_t)(256 - wy), w1 = (uint16_t)wy;
    for (int i = 0; i < n; i++)
        d[i] = (uint8_t)((uint16_t)(r0[i] * w0 + r1[i] * w1 + 128) >> 8);
}

/* Out-of-image columns (pad) point at zeros kept after the row. */
static inline uint8_t td__h(const uint8_t *t, int32_t a, int32_t b,
                            uint32_t w0, uint32_t w1)
{
    return (uint8_t)((t[a] * w0 + t[b] * w1 + 128) >> 8);
}

static void td__hpass3(const td_resampler *r, const uint8_t *t, uint8_t *d,
                       size_t plane, int from)
{
    for (int x = from; x < r->out_w; x++) {
        int32_t a = r->xo0[x], b = r->xo1[x];
        uint32_t w1 = r->wx[x], w0 = 256 - w1;
        uint8_t v0 = td__h(t, a, b, w0, w1), v1 = td__h(t, a + 1, b + 1, w0, w1),
                v2 = td__h(t, a + 2, b + 2, w0, w1);
        if (plane) {
            d[x] = v0;
            d[plane + (size_t)x] = v1;
            d[2 * plane + (size_t)x] = v2;
        } else {
            d[3 * x] = v0;
            d[3 * x + 1] = v1;
            d[3 * x + 2] = v2;
        }
    }
}

#if defined(__SSE2__)
/* HWC RGB, two pixels per step: each pixel's taps are 4-byte loads (the
 * 4th byte belongs to the next pixel or the zero padding), blended in
 * 16-bit lanes with the weights replicated per pixel (r->wx4); the 8-byte
 * store spills two bytes into the pixel after, which is written next.  The
 * last pixels of the row take the scalar path. */
static inline __m128i td__taps2(const uint8_t *t, int32_t p, int32_t q)
{
    uint32_t u, v;
    memcpy(&u, t + p, 4);
    memcpy(&v, t + q, 4);
    __m128i x = _mm_unpacklo_epi32(_mm_cvtsi32_si128((int)u),
                                   _mm_cvtsi32_si128((int)v));
    return _mm_unpacklo_epi8(x, _mm_setzero_si128());
}

static void td__hpass3_hwc(const td_resampler *r, const uint8_t *t,
                           uint8_t *d)
{
    const __m128i half = _mm_set1_epi16(128), full = _mm_set1_epi16(256);
    int x = 0;
    for (; x + 2 < r->out_w; x += 2) {
        __m128i va = td__taps2(t, r->xo0[x], r->xo0[x + 1]);
        __m128i vb = td__taps2(t, r->xo1[x], r->xo1[x + 1]);
        __m128i w1 =
            _mm_loadu_si128((const __m128i *)(const void *)(r->wx4 + x));
        __m128i w0 = _mm_sub_epi16(full, w1);
        __m128i v = _mm_add_epi16(_mm_mullo_epi16(va, w0),
                                  _mm_mullo_epi16(vb, w1));
        v = _mm_srli_epi16(_mm_add_epi16(v, half), 8);
        v = _mm_packus_epi16(v, v);
        /* pixel x in bytes 0-2, pixel x+1 in bytes 4-6: close the gap */
        uint64_t o = (uint64_t)_mm_cvtsi128_si64(v);
        o = (o & 0xffffffu) | ((o >> 8) & 0xffffff000000u);
        memcpy(d + 3 * x, &o, 8);
    }
    td__hpass3(r, t, d, 0, x);
}
#endif

#if defined(TD__AVX2)
/* The same arithmetic as td__vpass, 32 values per step. */
__attribute__((target("avx2"))) static void
td__vpass_avx2(const uint8_t *r0, const uint8_t *r1, uint32_t wy, uint8_t *d,
               int n)
{
    const __m256i w0 = _mm256_set1_epi16((short)(256 - wy));
    const __m256i w1 = _mm256_set1_epi16((short)wy);
    const __m256i half = _mm256_set1_epi16(128);
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256i a =
            _mm256_loadu_si256((const __m256i *)(const void *)(r0 + i));
        __m256i b =
            _mm256_loadu_si256((const __m256i *)(const void *)(r1 + i));
        __m256i alo = _mm256_cvtepu8_epi16(_mm256_castsi256_si128(a));
        __m256i ahi = _mm256_cvtepu8_epi16(_mm256_extracti128_si256(a, 1));
        __m256i blo = _mm256_cvtepu8_epi16(_mm256_castsi256_si128(b));
        __m256i bhi = _mm256_cvtepu8_epi16(_mm256_extracti128_si256(b, 1));
        __m256i lo = _mm256_add_epi16(_mm256_mullo_epi16(alo, w0),
                                      _mm256_mullo_epi16(blo, w1));
        __m256i hi = _mm256_add_epi16(_mm256_mullo_epi16(ahi, w0),
                                      _mm256_mullo_epi16(bhi, w1));
        lo = _mm256_srli_epi16(_mm256_add_epi16(lo, half), 8);
        hi = _mm256_srli_epi16(_mm256_add_epi16(hi, half), 8);
        /* packus works per 128-bit lane: put the quarters back in order */
        __m256i v = _mm256_permute4x64_epi64(_mm256_packus_epi16(lo, hi),
                                             0xd8);
        _mm256_storeu_si256((__m256i *)(void *)(d + i), v);
    }
    if (i < n)
        td__vpass(r0 + i, r1 + i, wy, d + i, n - i);
}

static inline int td__ld32(const uint8_t *p)
{
    int v;
    memcpy(&v, p, 4);
    return v;
}

/* The 4-byte taps at t + o[0..7] (plain loads: faster than a gather on
 * the CPUs measured). */
__attribute__((target("avx2"))) static inline __m256i
td__taps8(const uint8_t *t, const int32_t *o)
{
    __m128i lo = _mm_setr_epi32(td__ld32(t + o[0]), td__ld32(t + o[1]),
                                td__ld32(t + o[2]), td__ld32(t + o[3]));
    __m128i hi = _mm_setr_epi32(td__ld32(t + o[4]), td__ld32(t + o[5]),
                                td__ld32(t + o[6]), td__ld32(t + o[7]));
    return _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
}

/* HWC RGB as td__hpass3_hwc, eight pixels per step: the 4-byte taps of
 * eight pixels are loaded one by one, each pixel's fourth byte
 * is dropped by a shuffle, and the 24 bytes are stored as 2 x 16 (the last
 * 8 spill into the pixels after, written next; the last pixels of the row
 * take the scalar path so the spill never leaves the row). */
__attribute__((target("avx2"))) static void
td__hpass3_hwc_avx2(const td_resampler *r, const uint8_t *t, uint8_t *d)
{
    const __m256i half = _mm256_set1_epi16(128), full = _mm256_set1_epi16(256);
    const __m256i squeeze = _mm256_setr_epi8(
        0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1,
        0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1);
    const int last = r->out_w - 11; /* the last x whose spill stays in */
    int x = 0;
    for (int done = last < 0; !done; x += 8) {
        if (x > last) { /* one step over pixels already written (the same
                         * bytes again), so that only 3 stay scalar */
            x = last;
            done = 1;
        }
        __m256i ga = td__taps8(t, r->xo0 + x), gb = td__taps8(t, r->xo1 + x);
        __m256i w1a = _mm256_loadu_si256(
            (const __m256i *)(const void *)(r->wx4 + x));
        __m256i w1b = _mm256_loadu_si256(
            (const __m256i *)(const void *)(r->wx4 + x + 4));
        __m256i a0 = _mm256_cvtepu8_epi16(_mm256_castsi256_si128(ga));
        __m256i a1 = _mm256_cvtepu8_epi16(_mm256_extracti128_si256(ga, 1));
        __m256i b0 = _mm256_cvtepu8_epi16(_mm256_castsi256_si128(gb));
        __m256i b1 = _mm256_cvtepu8_epi16(_mm256_extracti128_si256(gb, 1));
        __m256i v0 = _mm256_add_epi16(
            _mm256_mullo_epi16(a0, _mm256_sub_epi16(full, w1a)),
            _mm256_mullo_epi16(b0, w1a));
        __m256i v1 = _mm256_add_epi16(
            _mm256_mullo_epi16(a1, _mm256_sub_epi16(full, w1b)),
            _mm256_mullo_epi16(b1, w1b));
        v0 = _mm256_srli_epi16(_mm256_add_epi16(v0, half), 8);
        v1 = _mm256_srli_epi16(_mm256_add_epi16(v1, half), 8);
        /* pixels 0-1,4-5 | 2-3,6-7 -> 0-3 | 4-7, then 4 x 3 bytes a lane */
        __m256i v = _mm256_permute4x64_epi64(_mm256_packus_epi16(v0, v1),
                                             0xd8);
        v = _mm256_shuffle_epi8(v, squeeze);
        _mm_storeu_si128((__m128i *)(void *)(d + 3 * x),
                         _mm256_castsi256_si128(v));
        _mm_storeu_si128((__m128i *)(void *)(d + 3 * x + 12),
                         _mm256_extracti128_si256(v, 1));
        done |= x == last;
    }
    td__hpass3(r, t, d, 0, x);
}
#endif

static void td__hpass1(const td_resampler *r, const uint8_t *t, uint8_t *d)
{
    for (int x = 0; x < r->out_w; x++) {
        uint32_t w1 = r->wx[x];
        d[x] = td__h(t, r->xo0[x], r->xo1[x], 256 - w1, w1);
    }
}

static void td__rows(td_resampler *r, const td_region *reg, uint8_t *dst,
                     int chw)
{
    const int ow = r->out_w, oh = r->out_h, c = r->c;
    const size_t plane = (size_t)ow * (size_t)oh, n = (size_t)ow * c;
    const int rn = reg->w * c;
    uint8_t *t = r->tmp;
    for (int y = 0; y < oh; y++) {
        uint8_t *d = dst + (chw ? (size_t)y * ow : (size_t)y * n);
        if (r->yr0[y] < 0) {
            for (int k = 0; k < (chw ? c : 1); k++)
                memset(d + (size_t)k * plane, 0, chw ? (size_t)ow : n);
            continue;
        }
        const uint8_t *r0 = reg->px + (size_t)r->yr0[y] * reg->stride;
        const uint8_t *r1 = reg->px + (size_t)r->yr1[y] * reg->stride;
#if defined(TD__AVX2)
        if (r->avx2) {
            td__vpass_avx2(r0, r1, r->wy[y], t, rn);
            if (c == 3 && !chw) {
                td__hpass3_hwc_avx2(r, t, d);
                continue;
            }
        } else
#endif
            td__vpass(r0, r1, r->wy[y], t, rn);
        if (c == 1)
            td__hpass1(r, t, d);
#if defined(__SSE2__)
        else if (!chw)
            td__hpass3_hwc(r, t, d);
#endif
        else
            td__hpass3(r, t, d, chw ? plane : 0, 0);
    }
}

static inline uint8_t td__clampf(float v)
{
    return (uint8_t)(v <= 0 ? 0 : v >= 255 ? 255 : v + 0.5f);
}

/* Brightness, contrast (around the mean grey), saturation, in that order. */
static void td__jitter(uint8_t *dst, int npx, int c, int chw,
                       const td_aug_plan *p)
{
    size_t ps = chw ? 1 : (size_t)c, cs = chw ? (size_t)npx : 1;
    double sum = 0;
    for (int i = 0; i < npx; i++) {
        uint8_t *q = dst + (size_t)i * ps;
        float g = 0;
        for (int k = 0; k < c; k++) {
            q[k * cs] = td__clampf(q[k * cs] * p->brightness);
            g += c == 3 ? (k == 0 ? 0.299f : k == 1 ? 0.587f : 0.114f) *
                              q[k * cs]
                        : q[k * cs];
        }
        sum += g;
    }
    float mean = (float)(sum / npx);
    for (int i = 0; i < npx; i++) {
        uint8_t *q = dst + (size_t)i * ps;
        float v[3], g = 0;
        for (int k = 0; k < c; k++)
            v[k] = (q[k * cs] - mean) * p->contrast + mean;
        if (c == 3) {
            for (int k = 0; k < 3; k++)
                v[k] = v[k] < 0 ? 0 : v[k] > 255 ? 255 : v[k];
            g = 0.299f * v[0] + 0.587f * v[1] + 0.114f * v[2];
            for (int k = 0; k < 3; k++)
                v[k] = g + (v[k] - g) * p->saturation;
        }
        for (int k = 0; k < c; k++)
            q[k * cs] = td__clampf(v[k]);
    }
}

int td_augment_apply(td_resampler *r, const td_region *reg, int img_w,
                     int img_h, const td_aug_plan *p, enum td_layout layout,
                     uint8_t *dst)
{
    int c = r->c, chw = layout == TD_LAYOUT_NCHW;
    size_t need = (size_t)reg->w * (size_t)c + 4; /* + zeros, see hpass */
    if (need > r->tmp_cap) { /* grows to the widest region, then stays */
        uint8_t *t = realloc(r->tmp, need);
        if (!t)
            return -ENOMEM;
        r->tmp = t;
        r->tmp_cap = need;
    }
    double fx = (double)reg->scaled_w / img_w;
    double fy = (double)reg->scaled_h / img_h;
    td__axis(r->out_w, p->x, p->w, img_w, fx, reg->x0, reg->w, p->flip,
             r->xo0, r->xo1, r->wx, c);
    td__axis(r->out_h, p->y, p->h, img_h, fy, reg->y0, reg->h, 0, r->yr0,
             r->yr1, r->wy, 1);
    int32_t zeros = reg->w * c; /* pad columns read the zeros after a row */
    memset(r->tmp + zeros, 0, 4);
    for (int x = 0; x < r->out_w; x++) {
        if (r->xo0[x] < 0)
            r->xo0[x] = r->xo1[x] = zeros;
        r->wx4[x] = UINT64_C(0x0001000100010001) * r->wx[x];
    }
    td__rows(r, reg, dst, chw);
    if (p->jitter)
        td__jitter(dst, r->out_w * r->out_h, c, chw, p);
    return 0;
}
