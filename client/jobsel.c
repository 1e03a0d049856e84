/* jobsel.c - see jobsel.h. */
#define _GNU_SOURCE /* strptime, timegm */
#include "jobsel.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "proto/protocol.h"

int td_jobsel_match(const td_jobsel *s, json_t *row)
{
    const char *st = json_string_value(json_object_get(row, "state"));
    if (!st)
        return 0;
    int final = td_proto_job_state_final(st);
    if ((s->active && final) || (s->ended && !final))
        return 0;
    if (s->state && strcmp(s->state, st) != 0)
        return 0;
    if (s->mine && json_integer_value(json_object_get(row, "uid")) !=
                       (json_int_t)s->uid)
        return 0;
    if (s->before) {
        /* a row without an end time (not ended) is never "ended before" */
        json_t *e = json_object_get(row, "ended");
        if (!json_is_number(e) || json_number_value(e) >= s->ended_before)
            return 0;
    }
    return 1;
}

json_t *td_jobsel_filter(const td_jobsel *s, json_t *rows)
{
    json_t *out = json_array();
    size_t i;
    json_t *row;
    if (!out)
        return NULL;
    json_array_foreach(rows, i, row) {
        if (td_jobsel_match(s, row) && json_array_append(out, row)) {
            json_decref(out);
            return NULL;
        }
    }
    return out;
}

/* "7d", "1.5h": seconds in *secs; -1 when text is not a DURATION. */
static int td__duration(const char *text, double *secs)
{
    static const struct {
        char unit;
        double secs;
    } units[] = {{'s', 1}, {'m', 60}, {'h', 3600}, {'d', 86400},
                 {'w', 7 * 86400}};
    char *end;
    if (!(text[0] >= '0' && text[0] <= '9'))
        return -1; /* no sign, no "inf", no ".5" */
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || errno || !isfinite(v) || v < 0 || !end[0] || end[1])
        return -1;
    for (size_t k = 0; k < sizeof units / sizeof units[0]; k++) {
        if (end[0] == units[k].unit) {
            *secs = v * units[k].secs;
            return isfinite(*secs) ? 0 : -1;
        }
    }
    return -1;
}

/* "2026-11-01", "2026-11-01T08:30[:15][Z]": the wall time in *when. */
static int td__date(const char *text, double *when)
{
    static const char *const formats[] = {"%Y-%m-%dT%H:%M:%S",
                                          "%Y-%m-%dT%H:%M", "%Y-%m-%d"};
    for (size_t k = 0; k < sizeof formats / sizeof formats[0]; k++) {
        struct tm tm;
        memset(&tm, 0, sizeof tm);
        const char *end = strptime(text, formats[k], &tm);
        if (!end || (end[0] && strcmp(end, "Z") != 0))
            continue;
        /* strptime takes "2026-1-1" and "26-11-01": only the full form */
        if (strlen(text) < 10 || text[4] != '-' || text[7] != '-')
            return -1;
        time_t t;
        if (end[0] == 'Z') {
            t = timegm(&tm);
        } else {
            tm.tm_isdst = -1; /* the local rule of that date */
            t = mktime(&tm);
        }
        if (t == (time_t)-1)
            return -1;
        *when = (double)t;
        return 0;
    }
    return -1;
}

int td_jobsel_parse_before(const char *text, double now, double *when)
{
    double secs;
    if (td__duration(text, &secs) == 0) {
        *when = now - secs;
        return 0;
    }
    return td__date(text, when);
}

long td_jobsel_parse_count(const char *text)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (end == text || *end || errno || v < 1 || v > 1000000000)
        return -1;
    return v;
}
