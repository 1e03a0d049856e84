/* decode_check.c - helpers shared by the decode suites (decode_check.h). */
#include "support/decode_check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#include "base/error.h"
#include "input/pack.h"
#include "tdtest.h"

/* Full reference decode with TurboJPEG (islow; fancy upsampling unless
 * fast). */
uint8_t *tj_decode_f(const uint8_t *j, size_t n, int w, int h, int c,
                     int fast)
{
    tjhandle tj = tjInitDecompress();
    uint8_t *px = malloc((size_t)w * (size_t)h * (size_t)c);
    ck_assert_int_eq(tjDecompress2(tj, j, n, px, w, 0, h,
                                   c == 1 ? TJPF_GRAY : TJPF_RGB,
                                   fast ? TJFLAG_FASTUPSAMPLE : 0), 0);
    tjDestroy(tj);
    return px;
}

uint8_t *tj_decode(const uint8_t *j, size_t n, int w, int h, int c)
{
    return tj_decode_f(j, n, w, h, c, 0);
}

const struct td_test_kind kinds[7] = {
    {TD_TEST_RGB, 444, 0, 3}, {TD_TEST_RGB, 422, 0, 3},
    {TD_TEST_RGB, 420, 0, 3}, {TD_TEST_RGB, 420, 1, 3},
    {TD_TEST_GRAY, 444, 0, 1}, {TD_TEST_GRAY, 444, 1, 3},
    {TD_TEST_RGB, 420, 0, 1},
};

/* td_decoder_header + td_decoder_region on j, asserting both succeed. */
void decode_box(td_decoder *d, const uint8_t *j, size_t n, int x, int y,
                int bw, int bh, int mw, int mh, int c, int flags,
                td_region *r)
{
    int iw, ih;
    ck_assert_int_eq(td_decoder_header(d, j, n, &iw, &ih), 0);
    ck_assert_int_eq(td_decoder_region(d, x, y, bw, bh, mw, mh, c, flags, r),
                     0);
}

/* decode_box, with the pixels copied out of the decoder (its next decode
 * reuses the buffer): r->px points into the returned malloc'd copy. */
uint8_t *decode_box_copy(td_decoder *d, const uint8_t *j, size_t n, int x,
                         int y, int bw, int bh, int mw, int mh, int c,
                         int flags, td_region *r)
{
    decode_box(d, j, n, x, y, bw, bh, mw, mh, c, flags, r);
    size_t rn = r->stride * (size_t)r->h;
    uint8_t *copy = malloc(rn);
    memcpy(copy, r->px, rn);
    r->px = copy;
    return copy;
}

/* The two rewrites that make cut-outs possible: restart markers (mode 0,
 * td_region.cut 1) and the crop index (mode 1, td_region.cut 2). */
int rewrite(int mode, const uint8_t *j, size_t n, int max_mcus, uint8_t **t,
            size_t *tn)
{
    return mode ? td_pack_add_index(j, n, max_mcus, t, tn)
                : td_pack_add_restarts(j, n, max_mcus, t, tn);
}

/* Runs plan -> region decode -> apply, as the pipeline does. */
void run_sample(td_decoder *d, td_resampler *rs, const uint8_t *j, size_t n,
                const td_aug_plan *pl, int ow, int oh, int c, int flags,
                enum td_layout lay, uint8_t *out)
{
    int iw, ih;
    td_region r;
    ck_assert_int_eq(td_decoder_header(d, j, n, &iw, &ih), 0);
    int bx = (int)floor(pl->x), by = (int)floor(pl->y);
    int bw = (int)ceil(pl->x + pl->w) - bx, bh = (int)ceil(pl->y + pl->h) - by;
    ck_assert_int_eq(td_decoder_region(d, bx, by, bw, bh, ow, oh, c, flags,
                                       &r), 0);
    ck_assert_int_eq(td_augment_apply(rs, &r, iw, ih, pl, lay, out), 0);
}

/* The first 2/3 of a 320x240 rewrite t: a box in the missing part is
 * TD_E_CORRUPT, one above it decodes; returns how (td_region.cut). */
int truncated_box_cut(td_decoder *d, const uint8_t *t, size_t tn)
{
    int iw, ih;
    td_region r;
    ck_assert_int_eq(td_decoder_header(d, t, tn * 2 / 3, &iw, &ih), 0);
    ck_assert_int_eq(td_decoder_region(d, 100, 200, 100, 40, 50, 20, 3, 0,
                                       &r), TD_E_CORRUPT);
    ck_assert_int_eq(td_decoder_header(d, t, tn * 2 / 3, &iw, &ih), 0);
    ck_assert_int_eq(td_decoder_region(d, 100, 20, 100, 40, 50, 20, 3, 0,
                                       &r), 0);
    return r.cut;
}
