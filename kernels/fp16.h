/* fp16.h - IEEE 754 binary16 ("half") per element: the conversions the
 * CUDA backend's fp16 compute shares (its kernels, the simulated cuDNN
 * and cuBLAS, the tests' references).
 *
 * Math: a half has 1 sign, 5 exponent (bias 15) and 10 mantissa bits:
 * 11 significant bits (a rounding error of at most 2^-11 = 0.049% of a
 * normal value), normal values from 2^-14 (6.1e-5) to 65504, subnormals
 * m * 2^-24 below 2^-14 (down to 6.0e-8, with fewer significant bits).
 * float -> half rounds to nearest, ties to even, as CUDA's __float2half_rn
 * and the F16C vcvtps2ph with rounding mode 0: values from 65520 (the
 * midpoint between 65504 and 2^16, which ties to the even "2^16", i.e.
 * infinity) up overflow to infinity, values at or below 2^-25 (half the
 * smallest subnormal; the tie goes to the even zero) become a signed
 * zero, a NaN stays a quiet NaN (its top payload bits kept).  half ->
 * float is exact.
 * Never does: arithmetic in half; sums are taken in float by the callers.
 */
#ifndef TD_KERNELS_FP16_H
#define TD_KERNELS_FP16_H

#include <stdint.h>

#include "bf16.h" /* td__f32_bits, td__bits_f32 */
#include "hd.h"

typedef uint16_t td_f16;

#define TD_F16_MAX 65504.0f

/* float -> half, round to nearest even (see above). */
TD_HD static inline td_f16 td_f16_from_f32(float f)
{
    uint32_t u = td__f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) /* NaN: quiet, top payload bits kept */
        return (td_f16)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) /* >= 65520 (and infinity): infinity */
        return (td_f16)(sign | 0x7c00u);
    if (a < 0x38800000u) { /* below 2^-14: a subnormal half, or zero */
        if (a <= 0x33000000u) /* <= 2^-25 */
            return (td_f16)sign;
        uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - e; /* value / 2^-24 = m / 2^shift */
        uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u);
        uint32_t halfway = 1u << (shift - 1u);
        if (rem > halfway || (rem == halfway && (q & 1u)))
            q++; /* 0x400 is the smallest normal: the encoding carries */
        return (td_f16)(sign | q);
    }
    /* normal: rebias the exponent (127 -> 15), keep 10 mantissa bits */
    uint32_t h = (a >> 13) - (112u << 10), rem = a & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
        h++; /* a carry into the exponent is the right result */
    return (td_f16)(sign | h);
}

TD_HD static inline float td_f16_to_f32(td_f16 h)
{
    uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
    uint32_t e = ((uint32_t)h >> 10) & 0x1fu, m = (uint32_t)h & 0x3ffu;
    if (e == 0x1fu)
        return td__bits_f32(sign | 0x7f800000u | (m << 13));
    if (e == 0) { /* zero or subnormal: m * 2^-24, exact in float */
        float v = (float)m * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    return td__bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

/* f rounded to the nearest half, as a float. */
TD_HD static inline float td_f16_round(float f)
{
    return td_f16_to_f32(td_f16_from_f32(f));
}

#endif
