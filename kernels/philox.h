/* philox.h - Philox4x32-10, the counter-based generator behind every random
 * draw in traind (sample order, augmentation, dropout, initialisation).
 *
 * Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as easy as 1, 2, 3"
 * (SC'11).  A keyed bijection of a 128-bit counter: the output for
 * (key, counter) is a pure function of those two values, so any thread on any
 * machine (host or GPU) gets the same numbers for the same (seed, stream,
 * index) with no shared state and no ordering between draws.
 *
 *   round:  (c0, c1, c2, c3) -> (hi(M1*c2) ^ c1 ^ k0, lo(M1*c2),
 *                                 hi(M0*c0) ^ c3 ^ k1, lo(M0*c0))
 *   key schedule: k += (0x9E3779B9, 0xBB67AE85) between rounds
 *
 * traind's convention: key = the 64-bit seed; counter = (index lo, index hi,
 * stream lo, stream hi), where stream names the purpose (epoch permutation,
 * an augmentation draw, ...) and index counts draws within it.
 */
#ifndef TD_PHILOX_H
#define TD_PHILOX_H

#include <stdint.h>

#include "hd.h"

#define TD_PHILOX_M0 0xD2511F53u
#define TD_PHILOX_M1 0xCD9E8D57u
#define TD_PHILOX_W0 0x9E3779B9u
#define TD_PHILOX_W1 0xBB67AE85u

typedef struct { uint32_t v[4]; } td_philox_ctr;
typedef struct { uint32_t v[2]; } td_philox_key;

TD_HD static inline uint32_t td__mulhilo32(uint32_t a, uint32_t b,
                                           uint32_t *hi)
{
    uint64_t p = (uint64_t)a * (uint64_t)b;
    *hi = (uint32_t)(p >> 32);
    return (uint32_t)p;
}

TD_HD static inline td_philox_ctr td__philox_round(td_philox_ctr c,
                                                   td_philox_key k)
{
    uint32_t hi0, hi1;
    uint32_t lo0 = td__mulhilo32(TD_PHILOX_M0, c.v[0], &hi0);
    uint32_t lo1 = td__mulhilo32(TD_PHILOX_M1, c.v[2], &hi1);
    td_philox_ctr r;
    r.v[0] = hi1 ^ c.v[1] ^ k.v[0];
    r.v[1] = lo1;
    r.v[2] = hi0 ^ c.v[3] ^ k.v[1];
    r.v[3] = lo0;
    return r;
}

/* Philox4x32 with 10 rounds: the standard, Crush-resistant variant. */
TD_HD static inline td_philox_ctr td_philox4x32_10(td_philox_ctr c,
                                                   td_philox_key k)
{
    for (int i = 0; i < 10; i++) {
        if (i > 0) {
            k.v[0] += TD_PHILOX_W0;
            k.v[1] += TD_PHILOX_W1;
        }
        c = td__philox_round(c, k);
    }
    return c;
}

/* Four 32-bit words for (seed, stream, index). */
TD_HD static inline td_philox_ctr td_rng4(uint64_t seed, uint64_t stream,
                                          uint64_t index)
{
    td_philox_ctr c;
    td_philox_key k;
    c.v[0] = (uint32_t)index;
    c.v[1] = (uint32_t)(index >> 32);
    c.v[2] = (uint32_t)stream;
    c.v[3] = (uint32_t)(stream >> 32);
    k.v[0] = (uint32_t)seed;
    k.v[1] = (uint32_t)(seed >> 32);
    return td_philox4x32_10(c, k);
}

/* 64 random bits for (seed, stream, index). */
TD_HD static inline uint64_t td_rng_u64(uint64_t seed, uint64_t stream,
                                        uint64_t index)
{
    td_philox_ctr r = td_rng4(seed, stream, index);
    return ((uint64_t)r.v[1] << 32) | r.v[0];
}

/* A double uniform in [0, 1) with 53 random bits. */
TD_HD static inline double td_rng_uniform(uint64_t seed, uint64_t stream,
                                          uint64_t index)
{
    return (double)(td_rng_u64(seed, stream, index) >> 11) *
           (1.0 / 9007199254740992.0);
}

/* A float uniform in [0, 1) from 24 bits of a 32-bit word. */
TD_HD static inline float td_u32_to_unit_float(uint32_t x)
{
    return (float)(x >> 8) * (1.0f / 16777216.0f);
}

/* An integer uniform in [0, n) (n >= 1) by Lemire's multiply-shift on 64
 * random bits: bias below n / 2^64, i.e. none that any test can see, and
 * no data-dependent loop (the same cost on host and device). */
TD_HD static inline uint64_t td_rng_below(uint64_t seed, uint64_t stream,
                                          uint64_t index, uint64_t n)
{
    uint64_t x = td_rng_u64(seed, stream, index);
#if defined(__CUDA_ARCH__)
    return __umul64hi(x, n);
#else
    __extension__ typedef unsigned __int128 td__u128;
    return (uint64_t)(((td__u128)x * n) >> 64);
#endif
}

#endif
