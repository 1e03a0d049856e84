/* decode_check.h - helpers shared by the decode, restart cut-out, crop
 * index and augment suites: reference decodes with TurboJPEG, the image
 * kinds they loop over, one-call box decodes, the two rewrites, and the
 * pipeline's plan -> decode -> apply for one sample.  Each asserts (Check)
 * that the library calls it makes succeed. */
#ifndef TD_TESTS_DECODE_CHECK_H
#define TD_TESTS_DECODE_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "input/augment.h"
#include "input/decode.h"
#include "support/jpeggen.h"

/* Full reference decode with TurboJPEG (islow; fancy upsampling unless
 * fast), malloc'd w * h * c bytes. */
uint8_t *tj_decode_f(const uint8_t *j, size_t n, int w, int h, int c,
                     int fast);
uint8_t *tj_decode(const uint8_t *j, size_t n, int w, int h, int c);

/* The JPEG kinds the decode suites loop over: colour space, subsampling,
 * progressive or not, and the channels to decode them to. */
struct td_test_kind {
    enum td_test_cs cs;
    int sub, prog, c;
};
extern const struct td_test_kind kinds[7];

/* td_decoder_header + td_decoder_region on j, asserting both succeed. */
void decode_box(td_decoder *d, const uint8_t *j, size_t n, int x, int y,
                int bw, int bh, int mw, int mh, int c, int flags,
                td_region *r);

/* decode_box, with the pixels copied out of the decoder (its next decode
 * reuses the buffer): r->px points into the returned malloc'd copy. */
uint8_t *decode_box_copy(td_decoder *d, const uint8_t *j, size_t n, int x,
                         int y, int bw, int bh, int mw, int mh, int c,
                         int flags, td_region *r);

/* The two rewrites that make cut-outs possible: restart markers (mode 0,
 * td_region.cut 1) and the crop index (mode 1, td_region.cut 2). */
int rewrite(int mode, const uint8_t *j, size_t n, int max_mcus, uint8_t **t,
            size_t *tn);

/* The first 2/3 of a 320x240 rewrite t: a box in the missing part is
 * TD_E_CORRUPT, one above it decodes; returns how (td_region.cut). */
int truncated_box_cut(td_decoder *d, const uint8_t *t, size_t tn);

/* Runs plan -> region decode -> apply, as the pipeline does. */
void run_sample(td_decoder *d, td_resampler *rs, const uint8_t *j, size_t n,
                const td_aug_plan *pl, int ow, int oh, int c, int flags,
                enum td_layout lay, uint8_t *out);

#endif
