/* jobsel.h - which rows of the daemon's job list a command means:
 * trainctl queue's --mine, --active, --state, --last and its default
 * hiding of old ended jobs; trainctl rm's --state, --ended-before and
 * --mine.
 *
 * The daemon's `list` returns every job, one row each (id, uid, state,
 * submitted and, once ended, ended: wall-clock seconds), in submission
 * order; the selection is made here, in the client, from those fields.
 *
 * Owns: matching one row, parsing a DURATION or a date.  Never: talks to
 * the daemon or prints.
 */
#ifndef TD_CLIENT_JOBSEL_H
#define TD_CLIENT_JOBSEL_H

#include <jansson.h>

/* How many ended jobs `trainctl queue` shows by default (the newest),
 * besides every job not yet ended. */
#define TD_QUEUE_ENDED_SHOWN 20

typedef struct td_jobsel {
    int mine;            /* only the jobs of uid `uid` */
    unsigned uid;        /* the caller: geteuid(), as the daemon sees it */
    int active;          /* only pending, running and suspended jobs */
    int ended;           /* only completed, failed and cancelled jobs */
    const char *state;   /* only jobs in this state, or NULL */
    int before;          /* only jobs ended before ended_before: */
    double ended_before; /* a wall time (td_jobsel_parse_before) */
} td_jobsel;

/* 1 if row (a `list` row) is selected by s. */
int td_jobsel_match(const td_jobsel *s, json_t *row);

/* A new array of rows' selected rows (references to the same rows), in
 * their order; NULL when out of memory. */
json_t *td_jobsel_filter(const td_jobsel *s, json_t *rows);

/* Parses the value of --ended-before into a wall time: a DURATION before
 * now (a number and a unit: 45s, 30m, 12h, 7d, 2w; decimals allowed,
 * 1.5d) or a date, YYYY-MM-DD (its midnight) or YYYY-MM-DDTHH:MM[:SS],
 * local time, or UTC with a trailing Z.  Returns 0, or -1 when text is
 * neither. */
int td_jobsel_parse_before(const char *text, double now, double *when);

/* Parses --last N (1..1000000000); returns N, or -1 when it is not. */
long td_jobsel_parse_count(const char *text);

#endif
