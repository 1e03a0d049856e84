/* logtail.c - the bounded tail of a job's log (see logtail.h).
 *
 * The lines kept are a ring: each new line drops the oldest once there
 * are `lines` of them or their text passes the byte bound, so reading is
 * linear in the file and the memory is the bound's.  (The array it
 * replaced removed its first element for every line past `lines`: a
 * request for 300,000 lines of a 400,000-line log took 6.7 s of a
 * threadpool thread, which the daemon's record writes also wait for, and
 * a request for all of it built a 35 MB reply.) */
#define _GNU_SOURCE
#include "logtail.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct td__ring {
    char **v;
    size_t cap, head, n; /* cap: 0 or a power of two */
    size_t bytes;        /* text held */
} td__ring;

static void td__pop(td__ring *r)
{
    char *s = r->v[r->head];
    r->bytes -= strlen(s);
    free(s);
    r->head = (r->head + 1) & (r->cap - 1);
    r->n--;
}

static int td__push(td__ring *r, const char *line, long lines,
                    size_t max_bytes, long long *left_out)
{
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 64;
        char **v = malloc(cap * sizeof *v);
        if (!v)
            return -ENOMEM;
        for (size_t i = 0; i < r->n; i++)
            v[i] = r->v[(r->head + i) & (r->cap - 1)];
        free(r->v);
        r->v = v;
        r->cap = cap;
        r->head = 0;
    }
    char *s = strdup(line);
    if (!s)
        return -ENOMEM;
    r->v[(r->head + r->n) & (r->cap - 1)] = s;
    r->n++;
    r->bytes += strlen(s);
    if ((long)r->n > lines)
        td__pop(r); /* not asked for: not counted as left out */
    while (r->n > 1 && r->bytes > max_bytes) {
        td__pop(r);
        ++*left_out;
    }
    return 0;
}

json_t *td_logtail(const char *path, td_logtail_more more, void *arg,
                   long lines, size_t max_bytes, long long *left_out,
                   int *err)
{
    td__ring r = {0};
    int rc = 0;
    *left_out = 0;
    FILE *f = fopen(path, "r");
    if (!f && errno != ENOENT)
        rc = -errno;
    char line[4096];
    while (rc == 0 && f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        rc = td__push(&r, line, lines, max_bytes, left_out);
    }
    if (f)
        fclose(f);
    json_t *extra = rc == 0 && more ? more(arg) : NULL, *e;
    size_t i;
    json_array_foreach(extra, i, e) {
        if (rc == 0 && json_is_string(e))
            rc = td__push(&r, json_string_value(e), lines, max_bytes,
                          left_out);
    }
    json_decref(extra);
    json_t *out = rc ? NULL : json_array();
    if (rc == 0 && !out)
        rc = -ENOMEM;
    for (size_t k = 0; k < r.n; k++) {
        char *s = r.v[(r.head + k) & (r.cap - 1)];
        if (out) /* a line that is not UTF-8 is skipped, as before */
            json_array_append_new(out, json_string(s));
        free(s);
    }
    free(r.v);
    if (rc) {
        json_decref(out);
        *err = rc;
        return NULL;
    }
    return out;
}
