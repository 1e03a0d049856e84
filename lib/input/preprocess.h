/* preprocess.h - one JPEG to one sample: the plan, the decode of just the
 * box it needs, the resampling (docs/checkpoints.md writes the evaluation
 * case down step by step).
 *
 * The single code path behind the pipeline's samples (training and
 * validation) and `trainctl predict`, so a prediction sees exactly the
 * pixels the validation pass saw.
 * Owns: nothing (the caller's decoder and resampler).  Never: allocates
 * beyond what the decoder and resampler grow, or reads files.
 */
#ifndef TD_PREPROCESS_H
#define TD_PREPROCESS_H

#include <stddef.h>
#include <stdint.h>

#include "input/augment.h"
#include "input/batch.h"
#include "input/decode.h"

/* Decodes `data` and writes the out_w x out_h x c sample for (seed,
 * epoch, sample) into dst (train 0: the evaluation form, nothing
 * random).  *decoded_ns (may be NULL) gets the clock after the decode.
 * 0, TD_E_CORRUPT (not a JPEG, damaged), -ENOMEM; *msg says why. */
int td_preprocess_jpeg(td_decoder *dec, td_resampler *rs,
                       const td_augment *ops, int n_ops, int train,
                       uint64_t seed, int64_t epoch, uint64_t sample,
                       const uint8_t *data, size_t len, int out_w, int out_h,
                       int c, enum td_layout layout, uint8_t *dst,
                       int64_t *decoded_ns, const char **msg);

#endif
