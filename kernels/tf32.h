/* tf32.h - TensorFloat-32 per element: what an NVIDIA tensor core (compute
 * capability 8.0 and later) keeps of an fp32 input in TF32 math.
 *
 * Math: TF32 is an fp32 with the 13 lowest mantissa bits dropped: 1 sign,
 * 8 exponent and 10 mantissa bits, so the fp32 range with 11 significant
 * bits (a rounding error of at most 2^-11 = 0.049% of the value).  Tensor
 * cores multiply TF32 inputs exactly and accumulate in fp32.  Here
 * float -> TF32 rounds to nearest, ties to even (add 0xfff + the lowest
 * kept bit, then clear the 13 bits).  Infinities stay infinite, values
 * that round past the largest finite fp32 become infinite, and a NaN
 * stays a (quiet) NaN.  The result is a float whose low 13 bits are 0.
 * Which rounding the hardware uses is not documented per library: PTX
 * cvt.rna.tf32.f32 rounds ties away from zero and a tensor core fed raw
 * fp32 ignores the low bits (truncation, twice the error bound); the
 * simulated device (tests/gpu/sim) models TF32 math with this function,
 * see docs/cuda.md "Precision".
 * Never does: anything with the arithmetic around it.
 */
#ifndef TD_KERNELS_TF32_H
#define TD_KERNELS_TF32_H

#include <stdint.h>
#include <string.h>

#include "hd.h"

/* f rounded to the nearest TF32 value (ties to even), as a float. */
TD_HD static inline float td_tf32_round(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        u |= 0x00400000u; /* NaN: quiet, and the payload's top bit survives */
    } else {
        u += 0xfffu + ((u >> 13) & 1u);
    }
    u &= ~(uint32_t)0x1fffu;
    memcpy(&f, &u, sizeof f);
    return f;
}

#endif
