/* bf16.h - bfloat16 per element: the rounding every mixed-precision path
 * shares (the CPU backend's plain-C kernels, the CUDA kernels, the tests'
 * bf16-rounded reference).
 *
 * Math: a bfloat16 is the top 16 bits of an IEEE binary32 (1 sign, 8
 * exponent, 7 mantissa bits): the fp32 range with 8 significant bits
 * (spacing 2^-7 of the leading power of two, so a rounding error of at
 * most 2^-8 = 0.39% of the value).  float ->
 * bf16 rounds to nearest, ties to even, as the hardware conversions do
 * (AVX512_BF16 vcvtneps2bf16, AMX, CUDA __float2bfloat16_rn) and oneDNN's
 * reorders: add 0x7fff + the lowest kept bit, then truncate.  Infinities
 * stay infinite, values that round past the largest finite bf16 become
 * infinite, and a NaN stays a (quiet) NaN: rounding must not turn a NaN
 * into an infinity.  bf16 -> float is exact (a shift).
 * Never does: allocation, anything with the arithmetic around it; sums of
 * bf16 values are computed in float by the callers.
 */
#ifndef TD_KERNELS_BF16_H
#define TD_KERNELS_BF16_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "hd.h"

typedef uint16_t td_bf16;

TD_HD static inline uint32_t td__f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

TD_HD static inline float td__bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* float -> bf16, round to nearest even; NaN stays NaN (quiet). */
TD_HD static inline td_bf16 td_bf16_from_f32(float f)
{
    uint32_t u = td__f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (td_bf16)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (td_bf16)(u >> 16);
}

TD_HD static inline float td_bf16_to_f32(td_bf16 b)
{
    return td__bits_f32((uint32_t)b << 16);
}

/* f rounded to the nearest bf16, as a float. */
TD_HD static inline float td_bf16_round(float f)
{
    return td_bf16_to_f32(td_bf16_from_f32(f));
}

/* Host loops over arrays (the CPU backend parallelises around them). */
static inline void td_bf16_from_f32_n(const float *src, td_bf16 *dst,
                                      size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = td_bf16_from_f32(src[i]);
}

/* dst[i] = bf16(dst[i] + add[i]), the sum taken in float. */
static inline void td_bf16_add_n(td_bf16 *dst, const td_bf16 *add, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = td_bf16_from_f32(td_bf16_to_f32(dst[i]) +
                                  td_bf16_to_f32(add[i]));
}

#endif
