/* clock.c - the one non-inline clock helper (see clock.h). */
#include "base/clock.h"

#include <errno.h>

void td_sleep_ns(int64_t ns)
{
    if (ns <= 0)
        return;
    struct timespec req = {.tv_sec = (time_t)(ns / TD_NS_PER_S),
                           .tv_nsec = (long)(ns % TD_NS_PER_S)};
    while (nanosleep(&req, &req) != 0 && errno == EINTR)
        ;
}
