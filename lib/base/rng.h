/* rng.h - the counter-based random generator (Philox4x32-10, see
 * kernels/philox.h) and the derived draws traind uses on the host.
 *
 * Streams: every purpose has its own stream number so that adding a draw
 * in one place never shifts the numbers drawn in another.  A stream value
 * combines a purpose tag (high 16 bits) with e.g. an epoch number.
 */
#ifndef TD_RNG_H
#define TD_RNG_H

#include <stddef.h>
#include <stdint.h>

#include "philox.h"

enum td_rng_purpose {
    TD_RNG_PERMUTE = 1,  /* per-epoch sample order          */
    TD_RNG_AUGMENT = 2,  /* per-sample augmentation draws    */
    TD_RNG_INIT = 3,     /* parameter initialisation         */
    TD_RNG_DROPOUT = 4,  /* dropout masks                    */
    TD_RNG_SYNTH = 5,    /* synthetic input batches          */
    TD_RNG_SPLIT = 6,    /* the held-out validation split    */
    TD_RNG_TEST = 0xff,  /* tests                            */
};

/* The stream id for a purpose and a sub-index (epoch, layer, ...). */
static inline uint64_t td_rng_stream(enum td_rng_purpose purpose, uint64_t sub)
{
    return ((uint64_t)purpose << 48) | (sub & ((UINT64_C(1) << 48) - 1));
}

/* Fills perm[0..n) with a permutation of 0..n-1 that depends only on
 * (seed, stream): a Fisher-Yates shuffle whose i-th swap uses draw i. */
void td_rng_permutation(uint64_t seed, uint64_t stream, uint32_t *perm,
                        size_t n);

/* A standard normal draw for (seed, stream, index): Box-Muller on the two
 * 64-bit halves of one Philox block.  For weight initialisation. */
double td_rng_normal(uint64_t seed, uint64_t stream, uint64_t index);

#endif
