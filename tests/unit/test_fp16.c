/* test_fp16.c - kernels/fp16.h, the IEEE binary16 conversions of the fp16
 * compute path: values worked out by hand (bit patterns from the format:
 * sign, 5 exponent bits biased by 15, 10 mantissa bits), then every one of
 * the 65,536 halves: exact round trips, and every midpoint between two
 * neighbours rounding to the even one. */
#include <math.h>
#include <string.h>

#include "fp16.h"
#include "tdtest.h"

static float bits_f(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

START_TEST(test_f16_by_hand)
{
    /* exact values: 1 = 0 01111 0000000000, -2 = 1 10000 0..., 65504 the
     * largest normal 0 11110 1111111111 */
    ck_assert_uint_eq(td_f16_from_f32(1.0f), 0x3c00);
    ck_assert_uint_eq(td_f16_from_f32(-2.0f), 0xc000);
    ck_assert_uint_eq(td_f16_from_f32(65504.0f), 0x7bff);
    ck_assert_uint_eq(td_f16_from_f32(0.5f), 0x3800);
    ck_assert_uint_eq(td_f16_from_f32(0x1p-14f), 0x0400); /* smallest normal */
    ck_assert_uint_eq(td_f16_from_f32(0x1p-24f), 0x0001); /* smallest sub */
    ck_assert_uint_eq(td_f16_from_f32(0x1p-15f), 0x0200);
    ck_assert_float_eq(td_f16_to_f32(0x3555), 0x1.554p-2f); /* ~1/3 */
    ck_assert_float_eq(td_f16_to_f32(0x0001), 0x1p-24f);
    ck_assert_float_eq(td_f16_to_f32(0x03ff), 1023 * 0x1p-24f);
    ck_assert_float_eq(td_f16_to_f32(0x7bff), 65504.0f);
    /* 1/3 = 0x1.5555..p-2 rounds to 0x1.554p-2 (mantissa 0x155, the
     * dropped bits 0x1555... < half): 0 01101 0101010101 = 0x3555 */
    ck_assert_uint_eq(td_f16_from_f32(1.0f / 3.0f), 0x3555);
    /* 1 + 2^-11 lies halfway between 1 and 1 + 2^-10: the even 1 wins;
     * 1 + 3 * 2^-11 halfway between 1 + 2^-10 and 1 + 2^-9: 1 + 2^-9 */
    ck_assert_uint_eq(td_f16_from_f32(1.0f + 0x1p-11f), 0x3c00);
    ck_assert_uint_eq(td_f16_from_f32(1.0f + 3 * 0x1p-11f), 0x3c02);
    ck_assert_uint_eq(td_f16_from_f32(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);
    /* overflow: 65519 rounds down to 65504, 65520 (the midpoint to 2^16)
     * ties to infinity, and so does anything larger */
    ck_assert_uint_eq(td_f16_from_f32(65519.0f), 0x7bff);
    ck_assert_uint_eq(td_f16_from_f32(65520.0f), 0x7c00);
    ck_assert_uint_eq(td_f16_from_f32(-1e10f), 0xfc00);
    ck_assert_uint_eq(td_f16_from_f32(INFINITY), 0x7c00);
    ck_assert(isinf(td_f16_to_f32(0xfc00)) && td_f16_to_f32(0xfc00) < 0);
    /* underflow: 2^-25 is the midpoint of 0 and 2^-24: even zero; just
     * above it rounds up to the smallest subnormal; 1.5 * 2^-24 halfway
     * between 1 and 2 (x 2^-24): 2, even */
    ck_assert_uint_eq(td_f16_from_f32(0x1p-25f), 0x0000);
    ck_assert_uint_eq(td_f16_from_f32(-0x1p-25f), 0x8000);
    ck_assert_uint_eq(td_f16_from_f32(0x1.000002p-25f), 0x0001);
    ck_assert_uint_eq(td_f16_from_f32(1.5f * 0x1p-24f), 0x0002);
    ck_assert_uint_eq(td_f16_from_f32(2.5f * 0x1p-24f), 0x0002);
    ck_assert_uint_eq(td_f16_from_f32(1e-10f), 0x0000);
    /* the largest subnormal plus half a step rounds into the normals */
    ck_assert_uint_eq(td_f16_from_f32(1023.5f * 0x1p-24f), 0x0400);
    /* signed zero, NaN stays a quiet NaN even with only low payload */
    ck_assert_uint_eq(td_f16_from_f32(-0.0f), 0x8000);
    ck_assert(isnan(td_f16_to_f32(td_f16_from_f32(NAN))));
    ck_assert(isnan(td_f16_to_f32(td_f16_from_f32(bits_f(0x7f800001u)))));
    ck_assert_uint_eq(td_f16_from_f32(bits_f(0x7f800001u)) & 0x7e00, 0x7e00);
}
END_TEST

/* All halves: each converts to a float and back to itself; between two
 * consecutive finite halves of one sign the float midpoint goes to the
 * one with an even mantissa, the floats just beside it to the nearer. */
START_TEST(test_f16_exhaustive)
{
    for (uint32_t h = 0; h < 0x10000u; h++) {
        float f = td_f16_to_f32((td_f16)h);
        if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu)) {
            ck_assert(isnan(f));
            continue;
        }
        ck_assert_uint_eq(td_f16_from_f32(f), h);
        if ((h & 0x7fffu) >= 0x7bffu) /* the largest finite, infinities */
            continue;
        float g = td_f16_to_f32((td_f16)(h + 1)); /* next in magnitude */
        float mid = (float)(((double)f + g) / 2); /* exact in float */
        uint32_t even = (h & 1u) ? h + 1 : h;
        ck_assert_uint_eq(td_f16_from_f32(mid), even);
        ck_assert_uint_eq(td_f16_from_f32(nextafterf(mid, f)), h);
        ck_assert_uint_eq(td_f16_from_f32(nextafterf(mid, g)), h + 1);
    }
}
END_TEST

static Suite *fp16_suite(void)
{
    Suite *s = suite_create("fp16");
    TCase *tc = tcase_create("fp16");
    tcase_add_test(tc, test_f16_by_hand);
    tcase_add_test(tc, test_f16_exhaustive);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(fp16_suite)
