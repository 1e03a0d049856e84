/* obs_check.c - see obs_check.h. */
#define _GNU_SOURCE
#include "obs_check.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__attribute__((format(printf, 3, 4))) static int oc__fail(char *err,
                                                          size_t cap,
                                                          const char *fmt,
                                                          ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
    return -1;
}

/* ---- Prometheus ------------------------------------------------------- */

static size_t oc__name_len(const char *s)
{
    size_t n = 0;
    if (!(isalpha((unsigned char)s[0]) || s[0] == '_' || s[0] == ':'))
        return 0;
    while (isalnum((unsigned char)s[n]) || s[n] == '_' || s[n] == ':')
        n++;
    return n;
}

/* {a="x",b="y"}: returns the length, 0 if malformed. */
static size_t oc__labels_len(const char *s)
{
    size_t i = 1;
    if (s[0] != '{')
        return 0;
    if (s[1] == '}')
        return 2;
    for (;;) {
        size_t n = oc__name_len(s + i);
        if (!n || s[i + n] != '=' || s[i + n + 1] != '"')
            return 0;
        i += n + 2;
        while (s[i] && s[i] != '"') {
            if (s[i] == '\\' && s[i + 1])
                i++;
            if (s[i] == '\n')
                return 0;
            i++;
        }
        if (s[i] != '"')
            return 0;
        i++;
        if (s[i] == '}')
            return i + 1;
        if (s[i] != ',')
            return 0;
        i++;
    }
}

typedef struct oc__fam {
    char name[128], type[16];
    int help;
} oc__fam;

static oc__fam *oc__find(oc__fam *f, int n, const char *name, size_t len)
{
    for (int i = 0; i < n; i++)
        if (strlen(f[i].name) == len && strncmp(f[i].name, name, len) == 0)
            return &f[i];
    return NULL;
}

/* The family a sample name belongs to (summaries: _sum and _count). */
static oc__fam *oc__family_of(oc__fam *f, int n, const char *name,
                              size_t len)
{
    oc__fam *x = oc__find(f, n, name, len);
    static const char *sfx[] = {"_sum", "_count", "_bucket"};
    for (int k = 0; !x && k < 3; k++) {
        size_t sl = strlen(sfx[k]);
        if (len > sl && strncmp(name + len - sl, sfx[k], sl) == 0) {
            x = oc__find(f, n, name, len - sl);
            if (x && strcmp(x->type, "summary") != 0 &&
                strcmp(x->type, "histogram") != 0)
                x = NULL;
        }
    }
    return x;
}

static int oc__comment(const char *line, size_t len, oc__fam *fams, int *nf,
                       int lineno, char *err, size_t cap)
{
    int help = strncmp(line, "# HELP ", 7) == 0;
    int type = strncmp(line, "# TYPE ", 7) == 0;
    if (!help && !type)
        return 0; /* a plain comment */
    size_t n = oc__name_len(line + 7);
    if (!n || line[7 + n] != ' ')
        return oc__fail(err, cap, "line %d: bad metric name in '%.*s'",
                        lineno, (int)len, line);
    oc__fam *f = oc__find(fams, *nf, line + 7, n);
    if (!f) {
        if (*nf >= 512 || n >= sizeof f->name)
            return oc__fail(err, cap, "line %d: too many families", lineno);
        f = &fams[(*nf)++];
        memset(f, 0, sizeof *f);
        memcpy(f->name, line + 7, n);
    }
    if (help) {
        if (f->help++)
            return oc__fail(err, cap, "line %d: second HELP for %s", lineno,
                            f->name);
        return 0;
    }
    if (f->type[0])
        return oc__fail(err, cap, "line %d: second TYPE for %s", lineno,
                        f->name);
    const char *t = line + 8 + n;
    size_t tl = len - (size_t)(t - line);
    static const char *types[] = {"counter", "gauge", "summary", "histogram",
                                  "untyped"};
    for (int k = 0; k < 5; k++)
        if (tl == strlen(types[k]) && strncmp(t, types[k], tl) == 0)
            snprintf(f->type, sizeof f->type, "%s", types[k]);
    if (!f->type[0])
        return oc__fail(err, cap, "line %d: unknown type '%.*s'", lineno,
                        (int)tl, t);
    if (strcmp(f->type, "counter") == 0 &&
        (n < 6 || strcmp(f->name + n - 6, "_total") != 0))
        return oc__fail(err, cap, "line %d: counter %s does not end in "
                        "_total", lineno, f->name);
    return 0;
}

int oc_prom_check(const char *text, char *err, size_t cap)
{
    oc__fam *fams = calloc(512, sizeof *fams);
    char **seen = NULL;
    int nf = 0, nseen = 0, lineno = 0, rc = 0;
    const char *p = text;
    if (!fams)
        return oc__fail(err, cap, "out of memory");
    while (*p && rc == 0) {
        const char *nl = strchr(p, '\n');
        if (!nl) {
            rc = oc__fail(err, cap, "line %d: no final newline", lineno + 1);
            break;
        }
        size_t len = (size_t)(nl - p);
        lineno++;
        if (len == 0) {
        } else if (p[0] == '#') {
            rc = oc__comment(p, len, fams, &nf, lineno, err, cap);
        } else {
            size_t n = oc__name_len(p), l = 0;
            oc__fam *f = n ? oc__family_of(fams, nf, p, n) : NULL;
            if (!n)
                rc = oc__fail(err, cap, "line %d: bad name", lineno);
            else if (!f || !f->help || !f->type[0])
                rc = oc__fail(err, cap, "line %d: sample %.*s without HELP "
                              "and TYPE before it", lineno, (int)n, p);
            else if (f != &fams[nf - 1]) /* a parser makes it untyped */
                rc = oc__fail(err, cap, "line %d: sample %.*s after "
                              "another family's TYPE (a family's lines are "
                              "one group)", lineno, (int)n, p);
            else if (p[n] == '{' && !(l = oc__labels_len(p + n)))
                rc = oc__fail(err, cap, "line %d: bad labels", lineno);
            else if (p[n + l] != ' ')
                rc = oc__fail(err, cap, "line %d: no space before the value",
                              lineno);
            if (rc)
                break;
            char *end;
            const char *v = p + n + l + 1;
            double x = strtod(v, &end);
            (void)x;
            if (end == v || (end != nl && *end != ' '))
                rc = oc__fail(err, cap, "line %d: bad value '%.*s'", lineno,
                              (int)(nl - v), v);
            for (int i = 0; rc == 0 && i < nseen; i++)
                if (strlen(seen[i]) == n + l &&
                    strncmp(seen[i], p, n + l) == 0)
                    rc = oc__fail(err, cap, "line %d: series %s twice",
                                  lineno, seen[i]);
            if (rc == 0) {
                seen = realloc(seen, (size_t)(nseen + 1) * sizeof *seen);
                seen[nseen++] = strndup(p, n + l);
            }
        }
        p = nl + 1;
    }
    for (int i = 0; i < nseen; i++)
        free(seen[i]);
    free(seen);
    free(fams);
    return rc;
}

double oc_prom_value(const char *text, const char *series)
{
    size_t sl = strlen(series);
    for (const char *p = text; p && *p;) {
        if (strncmp(p, series, sl) == 0 && p[sl] == ' ')
            return strtod(p + sl + 1, NULL);
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    return NAN;
}

/* ---- Chrome trace ----------------------------------------------------- */

typedef struct oc__slice {
    long pid, tid;
    double ts, dur;
    const char *name;
    long step;
} oc__slice;

static int oc__by_track(const void *a, const void *b)
{
    const oc__slice *x = a, *y = b;
    if (x->pid != y->pid)
        return x->pid < y->pid ? -1 : 1;
    if (x->tid != y->tid)
        return x->tid < y->tid ? -1 : 1;
    return x->ts < y->ts ? -1 : x->ts > y->ts;
}

/* Collects the X slices (caller frees); -1 with err on a bad event. */
static int oc__slices(json_t *trace, oc__slice **out, size_t *n, char *err,
                      size_t cap)
{
    json_t *evs = json_object_get(trace, "traceEvents"), *e;
    size_t i, k = 0;
    if (!json_is_array(evs))
        return oc__fail(err, cap, "traceEvents: not an array");
    oc__slice *s = calloc(json_array_size(evs) + 1, sizeof *s);
    json_array_foreach(evs, i, e) {
        const char *ph = json_string_value(json_object_get(e, "ph"));
        if (!json_is_string(json_object_get(e, "name")) || !ph ||
            !json_is_integer(json_object_get(e, "pid")) ||
            !json_is_integer(json_object_get(e, "tid"))) {
            free(s);
            return oc__fail(err, cap, "event %zu: name, ph, pid and tid are "
                            "required", i);
        }
        if (strcmp(ph, "M") != 0 && !json_is_number(json_object_get(e, "ts"))) {
            free(s);
            return oc__fail(err, cap, "event %zu: no ts", i);
        }
        /* ts counts from the start of the recording: nothing before it */
        if (strcmp(ph, "M") != 0 &&
            json_number_value(json_object_get(e, "ts")) < 0) {
            free(s);
            return oc__fail(err, cap, "event %zu (%s): ts %.3f us, before "
                            "the recording began", i,
                            json_string_value(json_object_get(e, "name")),
                            json_number_value(json_object_get(e, "ts")));
        }
        if (strcmp(ph, "C") == 0) {
            json_t *a = json_object_get(e, "args"), *v;
            const char *key;
            int numeric = json_is_object(a) && json_object_size(a) > 0;
            json_object_foreach(a, key, v) numeric &= json_is_number(v);
            if (!numeric) {
                free(s);
                return oc__fail(err, cap, "event %zu: counter without "
                                "numeric args", i);
            }
        }
        if (strcmp(ph, "X") != 0)
            continue;
        json_t *d = json_object_get(e, "dur");
        if (!json_is_number(d) || json_number_value(d) < 0) {
            free(s);
            return oc__fail(err, cap, "event %zu: X without dur >= 0", i);
        }
        s[k++] = (oc__slice){
            json_integer_value(json_object_get(e, "pid")),
            json_integer_value(json_object_get(e, "tid")),
            json_number_value(json_object_get(e, "ts")), json_number_value(d),
            json_string_value(json_object_get(e, "name")),
            json_is_integer(json_object_get(json_object_get(e, "args"),
                                            "step"))
                ? (long)json_integer_value(json_object_get(
                      json_object_get(e, "args"), "step"))
                : -1};
    }
    qsort(s, k, sizeof *s, oc__by_track);
    *out = s;
    *n = k;
    return 0;
}

/* Events of one track come in time order in the file (after the M
 * metadata). */
static int oc__track_order(json_t *trace, char *err, size_t cap)
{
    json_t *evs = json_object_get(trace, "traceEvents"), *e;
    struct { long pid, tid; double ts; } last[64];
    size_t i, nl = 0;
    json_array_foreach(evs, i, e) {
        const char *ph = json_string_value(json_object_get(e, "ph"));
        if (!ph || strcmp(ph, "M") == 0)
            continue;
        long pid = (long)json_integer_value(json_object_get(e, "pid"));
        long tid = (long)json_integer_value(json_object_get(e, "tid"));
        double ts = json_number_value(json_object_get(e, "ts"));
        size_t k;
        for (k = 0; k < nl && (last[k].pid != pid || last[k].tid != tid);
             k++)
            ;
        if (k == nl && nl < 64)
            last[nl++] = (typeof(last[0])){pid, tid, ts};
        else if (k < nl && ts < last[k].ts)
            return oc__fail(err, cap, "event %zu (%s): ts %.3f us after "
                            "%.3f us on track %ld/%ld", i,
                            json_string_value(json_object_get(e, "name")), ts,
                            last[k].ts, pid, tid);
        else if (k < nl)
            last[k].ts = ts;
    }
    return 0;
}

int oc_trace_check(json_t *trace, double tol_us, char *err, size_t cap)
{
    oc__slice *s;
    size_t n;
    if (oc__track_order(trace, err, cap))
        return -1;
    if (oc__slices(trace, &s, &n, err, cap))
        return -1;
    for (size_t i = 1; i < n; i++) {
        const oc__slice *a = &s[i - 1], *b = &s[i];
        if (a->pid == b->pid && a->tid == b->tid &&
            b->ts < a->ts + a->dur - tol_us) {
            int rc = oc__fail(err, cap, "track %ld/%ld: %s at %.3f us (+%.3f) "
                              "overlaps %s at %.3f us", a->pid, a->tid,
                              a->name, a->ts, a->dur, b->name, b->ts);
            free(s);
            return rc;
        }
    }
    free(s);
    return 0;
}

int oc_trace_phases_check(json_t *trace, double tol_us, int *nsteps,
                          char *err, size_t cap)
{
    oc__slice *s;
    size_t n;
    int rc = 0;
    *nsteps = 0;
    if (oc__slices(trace, &s, &n, err, cap))
        return -1;
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (strcmp(s[i].name, "step") != 0)
            continue;
        double sum = 0;
        for (size_t k = 0; k < n; k++)
            if (s[k].tid == 0 && s[k].pid == s[i].pid &&
                s[k].step == s[i].step)
                sum += s[k].dur;
        if (fabs(sum - s[i].dur) > tol_us)
            rc = oc__fail(err, cap, "step %ld: phases sum to %.3f us, the "
                          "step took %.3f us", s[i].step, sum, s[i].dur);
        (*nsteps)++;
    }
    free(s);
    return rc;
}
