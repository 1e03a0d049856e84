/* preprocess.c - one JPEG to one sample (see preprocess.h).
 * Owns: the choice of the decode box, DCT scale and chroma upsampling for
 * a plan.  Never: reads files or allocates by itself.
 */
#include "input/preprocess.h"

#include <errno.h>
#include <math.h>

#include "base/clock.h"

int td_preprocess_jpeg(td_decoder *dec, td_resampler *rs,
                       const td_augment *ops, int n_ops, int train,
                       uint64_t seed, int64_t epoch, uint64_t sample,
                       const uint8_t *data, size_t len, int ow, int oh, int c,
                       enum td_layout layout, uint8_t *dst,
                       int64_t *decoded_ns, const char **msg)
{
    td_aug_plan plan;
    td_region reg;
    int iw, ih;
    int rc = td_decoder_header(dec, data, len, &iw, &ih);
    if (rc == 0) {
        td_augment_plan(ops, n_ops, train, seed, epoch, sample, iw, ih, ow,
                        oh, &plan);
        int bx = (int)floor(plan.x), by = (int)floor(plan.y);
        int bw = (int)ceil(plan.x + plan.w) - bx;
        int bh = (int)ceil(plan.y + plan.h) - by;
        int m = td_decode_pick_scale(bw, bh, ow, oh);
        /* Box-filter chroma once the scaled box is >= 1.25 x the output
         * width: the resampling averages more than the filter would add. */
        int flags = (int64_t)bw * m >= (int64_t)ow * 10 ? TD_DECODE_NO_FANCY
                                                        : 0;
        rc = td_decoder_region(dec, bx, by, bw, bh, ow, oh, c, flags, &reg);
    }
    if (decoded_ns)
        *decoded_ns = td_now_ns();
    if (rc) {
        *msg = rc == -ENOMEM ? "out of memory" : td_decoder_message(dec);
        return rc;
    }
    rc = td_augment_apply(rs, &reg, iw, ih, &plan, layout, dst);
    if (rc)
        *msg = "out of memory";
    return rc;
}
