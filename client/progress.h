/* progress.h - trainctl's progress line for its long local operations
 * (eval, predict, bench-input, pack and its survey, trace's wait).
 *
 * The line goes to stderr and only when stderr is a terminal: one line,
 * redrawn in place (\r and erase-line), at most 10 times a second, and
 * erased before anything else is printed, so stdout (--json included)
 * carries only the command's own output.  td_progress_done leaves a
 * final summary line in its place.  Off a terminal nothing is printed.
 *
 * Owns: the line's state.  Never: writes to stdout.
 */
#ifndef TD_CLIENT_PROGRESS_H
#define TD_CLIENT_PROGRESS_H

#include <stddef.h>
#include <stdint.h>

typedef struct td_progress {
    int tty;        /* stderr is a terminal: draw */
    int shown;      /* a line is on it */
    int64_t t0;     /* td_progress_init */
    int64_t last;   /* last redraw (0: none yet) */
} td_progress;

/* Starts the clock; draws only if stderr is a terminal. */
void td_progress_init(td_progress *p);
/* Redraws the line with a printf-style text; skipped within 100 ms of
 * the last redraw unless force. */
void td_progress_show(td_progress *p, int force, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* "WHAT: DONE/TOTAL UNIT (P%), R UNIT/s"; at most 10 times a second,
 * always for the first and the last.  A count of 0 restarts the clock, so
 * the rate (and td_progress_done's time) is the counted work's alone,
 * without what came before it (loading a model). */
void td_progress_count(td_progress *p, const char *what, int64_t done,
                       int64_t total, const char *unit);
/* Erases the line (before printing anything else). */
void td_progress_clear(td_progress *p);
/* Replaces the line by a summary, "WHAT: DONE UNIT in S s (R UNIT/s)"
 * and a newline, when it is a terminal. */
void td_progress_done(td_progress *p, const char *what, int64_t done,
                      const char *unit);
/* Seconds since td_progress_init (or the last count of 0). */
double td_progress_elapsed(const td_progress *p);
/* n with a comma between thousands ("412,318"), into buf. */
void td_fmt_count(uint64_t n, char *buf, size_t cap);

#endif
