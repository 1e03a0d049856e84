/* progress.c - see progress.h. */
#include "progress.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"

#define TD__REDRAW_NS 100000000 /* 10 times a second */

void td_progress_init(td_progress *p)
{
    p->tty = isatty(STDERR_FILENO);
    p->shown = 0;
    p->t0 = td_now_ns();
    p->last = 0;
}

double td_progress_elapsed(const td_progress *p)
{
    return td_elapsed_s(p->t0);
}

void td_progress_show(td_progress *p, int force, const char *fmt, ...)
{
    int64_t now = td_now_ns();
    if (!p->tty || (!force && p->last && now - p->last < TD__REDRAW_NS))
        return;
    va_list ap;
    fputs("\r\033[K", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fflush(stderr);
    p->last = now;
    p->shown = 1;
}

void td_progress_count(td_progress *p, const char *what, int64_t done,
                       int64_t total, const char *unit)
{
    if (done == 0) /* the rate of the counted work alone */
        p->t0 = td_now_ns();
    double s = td_progress_elapsed(p);
    td_progress_show(p, done == 0 || done >= total,
                     "%s: %lld/%lld %s (%.0f%%), %.0f %s/s", what,
                     (long long)done, (long long)total, unit,
                     total > 0 ? 100.0 * (double)done / (double)total : 0.0,
                     s > 0 ? (double)done / s : 0.0, unit);
}

void td_progress_clear(td_progress *p)
{
    if (!p->shown)
        return;
    fputs("\r\033[K", stderr);
    fflush(stderr);
    p->shown = 0;
}

void td_progress_done(td_progress *p, const char *what, int64_t done,
                      const char *unit)
{
    double s = td_progress_elapsed(p);
    if (!p->tty)
        return;
    td_progress_clear(p);
    fprintf(stderr, "%s: %lld %s in %.1f s (%.0f %s/s)\n", what,
            (long long)done, unit, s, s > 0 ? (double)done / s : 0.0, unit);
    fflush(stderr);
}

void td_fmt_count(uint64_t n, char *buf, size_t cap)
{
    char digits[24];
    int len = snprintf(digits, sizeof digits, "%llu", (unsigned long long)n);
    size_t o = 0;
    for (int i = 0; i < len && o + 1 < cap; i++) {
        if (i > 0 && (len - i) % 3 == 0 && o + 2 < cap)
            buf[o++] = ',';
        buf[o++] = digits[i];
    }
    if (cap)
        buf[o] = '\0';
}
