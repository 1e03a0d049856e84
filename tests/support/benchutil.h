/* benchutil.h - what the benchmarks (tests/bench) share: a monotonic clock
 * in milliseconds and the median of a set of doubles.  Header-only.
 */
#ifndef TD_TESTS_BENCHUTIL_H
#define TD_TESTS_BENCHUTIL_H

#include <math.h>
#include <stdlib.h>
#include <time.h>

static inline double td_now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* qsort's comparison of doubles, ascending. */
static inline int td_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of v[0 .. n-1] (sorted in place; the mean of the middle two
 * for even n), NAN when n < 1. */
static inline double td_median(double *v, int n)
{
    if (n < 1)
        return NAN;
    qsort(v, (size_t)n, sizeof *v, td_cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

#endif
