/* clock.h - monotonic time for step timing and timeouts.
 *
 * All durations inside traind are int64 nanoseconds from CLOCK_MONOTONIC;
 * seconds as double appear only at the edges (metrics, printing).
 */
#ifndef TD_CLOCK_H
#define TD_CLOCK_H

#include <stdint.h>
#include <time.h>

#define TD_NS_PER_S INT64_C(1000000000)
#define TD_NS_PER_MS INT64_C(1000000)
#define TD_NS_PER_US INT64_C(1000)

/* Nanoseconds on CLOCK_MONOTONIC (arbitrary epoch, never goes back). */
static inline int64_t td_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * TD_NS_PER_S + ts.tv_nsec;
}

static inline double td_ns_to_s(int64_t ns) { return (double)ns / 1e9; }

static inline int64_t td_s_to_ns(double s) { return (int64_t)(s * 1e9); }

/* Seconds since an earlier td_now_ns() reading. */
static inline double td_elapsed_s(int64_t since_ns)
{
    return td_ns_to_s(td_now_ns() - since_ns);
}

/* Wall-clock time (CLOCK_REALTIME) in nanoseconds since the Unix epoch,
 * for timestamps shown to people; never for measuring durations. */
static inline int64_t td_wall_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * TD_NS_PER_S + ts.tv_nsec;
}

/* An absolute CLOCK_MONOTONIC deadline `ns` from now, as a timespec, for
 * pthread_cond_timedwait on a condvar set to CLOCK_MONOTONIC. */
static inline struct timespec td_deadline_ts(int64_t ns)
{
    int64_t t = td_now_ns() + (ns > 0 ? ns : 0);
    struct timespec ts = {.tv_sec = (time_t)(t / TD_NS_PER_S),
                          .tv_nsec = (long)(t % TD_NS_PER_S)};
    return ts;
}

/* Sleep for ns nanoseconds, resuming after signals. */
void td_sleep_ns(int64_t ns);

#endif
