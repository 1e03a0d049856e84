/* stats.h - the per-step loss and accuracy counters on the device.
 *
 * The softmax cross-entropy kernel writes one loss (double) and one 0/1
 * correct flag per sample; td_stats_reduce sums them in sample order into
 * the accumulator that read_stats drains.  The order is fixed, so the sum
 * is the same on every run and equals the host loop's to the last bit.
 * Never does: allocation; the CUDA side runs it in one thread because a
 * batch is at most a few thousand samples and it runs once per step.
 */
#ifndef TD_KERNELS_STATS_H
#define TD_KERNELS_STATS_H

#include <stdint.h>

#include "hd.h"

typedef struct td_dev_stats {
    double loss_sum;
    long long correct;
    long long samples;
} td_dev_stats;

TD_HD static inline void td_stats_reduce(td_dev_stats *acc,
                                         const double *loss,
                                         const int *correct, int n)
{
    double s = 0.0;
    long long c = 0;
    for (int i = 0; i < n; i++) {
        s += loss[i];
        c += correct[i];
    }
    acc->loss_sum += s;
    acc->correct += c;
    acc->samples += n;
}

#endif
