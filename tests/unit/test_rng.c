/* test_rng.c - Philox4x32-10 against the published known-answer vectors,
 * and the draws built on it. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "base/rng.h"
#include "tdtest.h"

/* Known-answer tests of Random123's kat_vectors for philox4x32_10. */
static const struct {
    uint32_t ctr[4], key[2], out[4];
} kat[] = {
    {{0, 0, 0, 0}, {0, 0},
     {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
    {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
     {0xffffffff, 0xffffffff},
     {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
    {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
     {0xa4093822, 0x299f31d0},
     {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
};

START_TEST(test_philox_kat)
{
    td_philox_ctr c;
    td_philox_key k;
    memcpy(c.v, kat[_i].ctr, sizeof c.v);
    memcpy(k.v, kat[_i].key, sizeof k.v);
    td_philox_ctr r = td_philox4x32_10(c, k);
    for (int w = 0; w < 4; w++)
        ck_assert_uint_eq(r.v[w], kat[_i].out[w]);
}
END_TEST

START_TEST(test_rng4_layout)
{
    /* (seed, stream, index) map onto key and counter words as documented. */
    td_philox_ctr c = {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}};
    td_philox_key k = {{0xa4093822, 0x299f31d0}};
    td_philox_ctr want = td_philox4x32_10(c, k);
    td_philox_ctr got = td_rng4(0x299f31d0a4093822ull, 0x0370734413198a2eull,
                                0x85a308d3243f6a88ull);
    ck_assert_mem_eq(got.v, want.v, sizeof got.v);
    ck_assert_uint_eq(td_rng_u64(0, 0, 0), 0xe169c58d6627e8d5ull);
}
END_TEST

START_TEST(test_uniform_range_and_mean)
{
    double sum = 0, lo = 1, hi = 0;
    const int n = 200000;
    for (int i = 0; i < n; i++) {
        double u = td_rng_uniform(42, 7, (uint64_t)i);
        ck_assert(u >= 0.0 && u < 1.0);
        sum += u;
        lo = u < lo ? u : lo;
        hi = u > hi ? u : hi;
    }
    /* Mean of U(0,1) has sd 1/sqrt(12 n) = 0.00065: allow 6 sd. */
    ck_assert_double_eq_tol(sum / n, 0.5, 0.004);
    ck_assert_double_lt(lo, 0.001);
    ck_assert_double_gt(hi, 0.999);
}
END_TEST

START_TEST(test_below_uniform)
{
    int counts[10] = {0};
    const int n = 100000;
    for (int i = 0; i < n; i++) {
        uint64_t v = td_rng_below(1, 2, (uint64_t)i, 10);
        ck_assert_uint_lt(v, 10);
        counts[v]++;
    }
    /* Each bin expects 10000 with sd ~95: allow 6 sd. */
    for (int b = 0; b < 10; b++)
        ck_assert_int_lt(abs(counts[b] - n / 10), 570);
    ck_assert_uint_eq(td_rng_below(1, 2, 3, 1), 0);
}
END_TEST

START_TEST(test_permutation)
{
    enum { N = 1000 };
    uint32_t a[N], b[N], c[N];
    int seen[N] = {0};
    uint64_t s1 = td_rng_stream(TD_RNG_PERMUTE, 1);
    uint64_t s2 = td_rng_stream(TD_RNG_PERMUTE, 2);
    td_rng_permutation(9, s1, a, N);
    td_rng_permutation(9, s1, b, N);
    td_rng_permutation(9, s2, c, N);
    ck_assert_mem_eq(a, b, sizeof a); /* same inputs, same order */
    ck_assert(memcmp(a, c, sizeof a) != 0); /* another epoch differs */
    int fixed = 0;
    for (int i = 0; i < N; i++) {
        ck_assert_uint_lt(a[i], N);
        ck_assert_int_eq(seen[a[i]], 0);
        seen[a[i]] = 1;
        fixed += a[i] == (uint32_t)i;
    }
    /* A random permutation has ~1 fixed point; identity would have N. */
    ck_assert_int_lt(fixed, 10);
    td_rng_permutation(9, s1, a, 1);
    ck_assert_uint_eq(a[0], 0);
    td_rng_permutation(9, s1, a, 0); /* n = 0 must not touch anything */
}
END_TEST

START_TEST(test_normal_moments)
{
    double sum = 0, sq = 0;
    const int n = 100000;
    for (int i = 0; i < n; i++) {
        double x = td_rng_normal(3, 4, (uint64_t)i);
        ck_assert(isfinite(x));
        sum += x;
        sq += x * x;
    }
    ck_assert_double_eq_tol(sum / n, 0.0, 0.02);
    ck_assert_double_eq_tol(sq / n, 1.0, 0.03);
}
END_TEST

START_TEST(test_streams_independent)
{
    ck_assert_uint_ne(td_rng_stream(TD_RNG_PERMUTE, 5),
                      td_rng_stream(TD_RNG_AUGMENT, 5));
    ck_assert_uint_ne(td_rng_u64(1, td_rng_stream(TD_RNG_PERMUTE, 0), 0),
                      td_rng_u64(1, td_rng_stream(TD_RNG_AUGMENT, 0), 0));
    ck_assert_uint_ne(td_rng_u64(1, 0, 0), td_rng_u64(2, 0, 0));
}
END_TEST

static Suite *rng_suite(void)
{
    Suite *s = suite_create("rng");
    TCase *tc = tcase_create("philox");
    tcase_add_loop_test(tc, test_philox_kat, 0, (int)(sizeof kat / sizeof kat[0]));
    tcase_add_test(tc, test_rng4_layout);
    tcase_add_test(tc, test_streams_independent);
    suite_add_tcase(s, tc);
    tc = tcase_create("draws");
    tcase_add_test(tc, test_uniform_range_and_mean);
    tcase_add_test(tc, test_below_uniform);
    tcase_add_test(tc, test_permutation);
    tcase_add_test(tc, test_normal_moments);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(rng_suite)
