/* rng.c - derived draws on top of Philox (see rng.h). */
#include "base/rng.h"

#include <math.h>

void td_rng_permutation(uint64_t seed, uint64_t stream, uint32_t *perm,
                        size_t n)
{
    for (size_t i = 0; i < n; i++)
        perm[i] = (uint32_t)i;
    /* Shuffle from the top: swap i with a uniform j in [0, i]. */
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)td_rng_below(seed, stream, i - 1, i);
        uint32_t t = perm[i - 1];
        perm[i - 1] = perm[j];
        perm[j] = t;
    }
}

double td_rng_normal(uint64_t seed, uint64_t stream, uint64_t index)
{
    td_philox_ctr r = td_rng4(seed, stream, index);
    uint64_t a = ((uint64_t)r.v[1] << 32) | r.v[0];
    uint64_t b = ((uint64_t)r.v[3] << 32) | r.v[2];
    /* u1 in (0, 1] so log() is finite; u2 in [0, 1). */
    double u1 = ((double)(a >> 11) + 1.0) * (1.0 / 9007199254740992.0);
    double u2 = (double)(b >> 11) * (1.0 / 9007199254740992.0);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}
