/* bench_rng.c - Philox throughput and the cost of an epoch permutation.
 * Prints figures; never fails on speed. */
#include <stdio.h>
#include <stdlib.h>

#include "base/clock.h"
#include "base/rng.h"

int main(void)
{
    const long n = 20 * 1000 * 1000;
    uint64_t acc = 0;
    int64_t t0 = td_now_ns();
    for (long i = 0; i < n; i++)
        acc ^= td_rng_u64(1, 2, (uint64_t)i);
    double s = td_elapsed_s(t0);
    printf("philox4x32-10: %.1f M blocks/s (%.2f ns/block) [xor %llx]\n",
           n / s / 1e6, s / n * 1e9, (unsigned long long)acc);

    size_t m = 1281167; /* ImageNet-1k train set */
    uint32_t *perm = malloc(m * sizeof *perm);
    if (!perm)
        return 1;
    t0 = td_now_ns();
    td_rng_permutation(1, td_rng_stream(TD_RNG_PERMUTE, 0), perm, m);
    printf("epoch permutation of %zu samples: %.1f ms\n", m,
           td_elapsed_s(t0) * 1e3);
    free(perm);
    return 0;
}
