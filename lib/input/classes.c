/* classes.c - see classes.h. */
#define _GNU_SOURCE /* qsort_r */
#include "input/classes.h"

#include <errno.h>
#include <limits.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>


#include "base/error.h"
#include "base/fsio.h"
#include "base/json.h"
#include "base/rng.h"

/* Names identify classes by equality and travel in JSON (protocol
 * replies, a checkpoint's traind.classes), so each must be non-empty
 * UTF-8 without control characters. */
const char *td_classes_bad_name(const char *s, size_t len, char *why,
                                size_t cap)
{
    const unsigned char *u = (const unsigned char *)s;
    if (len == 0)
        return "an empty name";
    for (size_t i = 0; i < len;) {
        int n = td_utf8_seq(u + i, len - i);
        if (!n) {
            snprintf(why, cap, "not UTF-8 (byte 0x%02x at byte %zu)",
                     (unsigned)u[i], i + 1);
            return why;
        }
        if (u[i] < 0x20 || u[i] == 0x7f) {
            snprintf(why, cap, "control character 0x%02x at byte %zu",
                     (unsigned)u[i], i + 1);
            return why;
        }
        i += (size_t)n;
    }
    return NULL;
}

void td_classes_quote(const char *s, char *out, size_t cap)
{
    size_t k = 0;
    if (!cap)
        return;
    for (; *s && k + 5 < cap; s++) {
        unsigned char b = (unsigned char)*s;
        if (b >= 0x20 && b < 0x7f && b != '\\')
            out[k++] = (char)b;
        else
            k += (size_t)snprintf(out + k, cap - k, "\\x%02x", b);
    }
    out[k] = '\0';
}

int td_classes_write(const char *dir, const char *const *names, int n,
                     char *err, size_t errcap)
{
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/%s", dir, TD_CLASSES_FILE);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    int rc = 0;
    if (!f) {
        rc = -errno;
        snprintf(err, errcap, "%s: %s", tmp, strerror(-rc));
        return rc;
    }
    char why[64];
    for (int i = 0; i < n; i++) {
        /* only names that read back (an ImageFolder's may be anything) */
        const char *bad = td_classes_bad_name(names[i], strlen(names[i]), why,
                                       sizeof why);
        if (bad) {
            fclose(f);
            unlink(tmp);
            char quoted[256]; /* the name itself may not fit in JSON */
            td_classes_quote(names[i], quoted, sizeof quoted);
            snprintf(err, errcap, "class %d ('%s'): %s", i, quoted, bad);
            return -EINVAL;
        }
        fprintf(f, "%s\n", names[i]);
    }
    if (fflush(f) != 0 || fsync(fileno(f)) != 0)
        rc = -errno;
    if (fclose(f) != 0 && !rc)
        rc = -errno;
    if (!rc && rename(tmp, path) != 0)
        rc = -errno;
    if (rc) {
        unlink(tmp);
        snprintf(err, errcap, "%s: %s", path, strerror(-rc));
    }
    return rc;
}

/* The folder classes.txt would be in for a dataset path. */
static void td__dir_of(const char *path, char *dir, size_t cap)
{
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(dir, cap, "%s", path);
        return;
    }
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", path);
    snprintf(dir, cap, "%s", dirname(tmp));
}

static int td__cmp_line(const void *a, const void *b, void *names)
{
    const char *const *v = names;
    int x = *(const int *)a, y = *(const int *)b;
    int c = strcmp(v[x], v[y]);
    return c ? c : (x > y) - (x < y);
}

/* Of the lines naming a class an earlier line names, the first (*b) and
 * that earlier line (*a): 1, or 0 when all names differ, -ENOMEM. */
static int td__duplicate(char **names, int n, int *a, int *b)
{
    int *ix = malloc((size_t)(n > 0 ? n : 1) * sizeof *ix), found = 0;
    if (!ix)
        return -ENOMEM;
    for (int i = 0; i < n; i++)
        ix[i] = i;
    qsort_r(ix, (size_t)n, sizeof *ix, td__cmp_line, names);
    for (int i = 1; i < n; i++)
        if (strcmp(names[ix[i - 1]], names[ix[i]]) == 0 &&
            (!found || ix[i] < *b)) {
            *a = ix[i - 1];
            *b = ix[i];
            found = 1;
        }
    free(ix);
    return found;
}

/* The names of classes.txt at file (one per line, a final "\r" dropped)
 * into *names, *n; TD_E_CORRUPT with err naming the line.  A line is read
 * whole, however long (a fixed buffer split long ones into two names). */
static int td__read_names(FILE *f, const char *file, char ***names, int *n,
                          char *err, size_t errcap)
{
    char *line = NULL, why[64];
    size_t cap = 0;
    ssize_t got;
    int rc = 0, a = 0, b = 0;
    *names = NULL;
    *n = 0;
    while (rc == 0 && (got = getline(&line, &cap, f)) >= 0) {
        size_t len = (size_t)got;
        if (len && line[len - 1] == '\n')
            len--;
        if (len && line[len - 1] == '\r')
            len--;
        const char *bad = td_classes_bad_name(line, len, why, sizeof why);
        if (bad) {
            snprintf(err, errcap, "%s: line %d: %s", file, *n + 1, bad);
            rc = TD_E_CORRUPT;
            break;
        }
        if (*n == INT_MAX - 1) {
            snprintf(err, errcap, "%s: too many lines", file);
            rc = TD_E_CORRUPT;
            break;
        }
        char **g = realloc(*names, (size_t)(*n + 1) * sizeof **names);
        if (!g)
            rc = -ENOMEM;
        else if (!(g[*n] = strndup(line, len)))
            rc = -ENOMEM;
        else
            (*n)++;
        if (g)
            *names = g;
    }
    free(line);
    if (rc == 0 && ferror(f)) {
        rc = -EIO;
        snprintf(err, errcap, "%s: %s", file, strerror(EIO));
    }
    if (rc == 0 && (rc = td__duplicate(*names, *n, &a, &b)) == 1) {
        snprintf(err, errcap, "%s: lines %d and %d both name class '%.200s'",
                 file, a + 1, b + 1, (*names)[b]);
        rc = TD_E_CORRUPT;
    }
    if (rc == -ENOMEM)
        snprintf(err, errcap, "%s: out of memory", file);
    return rc;
}

void td_classes_file(const char *path, char *file, size_t cap)
{
    char dir[4096];
    td__dir_of(path, dir, sizeof dir);
    snprintf(file, cap, "%s/%s", dir, TD_CLASSES_FILE);
}

int td_classes_attach(td_dataset *ds, const char *path, char *err,
                      size_t errcap)
{
    if (td_dataset_kind(ds) != TD_DATASET_SHARDS)
        return 0;
    char file[4200];
    td_classes_file(path, file, sizeof file);
    int rc;
    FILE *f = td_fopen_regular(file, "r", &rc); /* a FIFO: not opened */
    if (!f) {
        if (rc == -ENOENT)
            return 0; /* older shards: labels only */
        snprintf(err, errcap, "%s: %s", file, td_strerror(rc));
        return rc;
    }
    char **names = NULL;
    int n = 0;
    rc = td__read_names(f, file, &names, &n, err, errcap);
    fclose(f);
    if (!rc) {
        char e[256];
        rc = td_dataset_set_class_names(ds, (const char *const *)names, n, e,
                                        sizeof e);
        if (rc)
            snprintf(err, errcap, "%s: %s", file, e);
    }
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return rc;
}

int td_classes_align(const td_dataset *train, td_dataset *val, char *note,
                     size_t notecap, char *err, size_t errcap)
{
    int nt = td_dataset_named_classes(train);
    int nv = td_dataset_named_classes(val);
    int ct = td_dataset_classes(train);
    if (note && notecap)
        note[0] = '\0';
    if (nt == 0 || nv == 0) { /* labels as they are */
        if (td_dataset_classes(val) > ct) {
            snprintf(err, errcap, "data.val: labels go up to %d but "
                     "data.train has %d classes", td_dataset_classes(val) - 1,
                     ct);
            return TD_E_SPEC;
        }
        return 0;
    }
    int32_t *map = malloc((size_t)nv * sizeof *map);
    uint8_t *seen = calloc((size_t)nt, 1);
    const char **names = malloc((size_t)nt * sizeof *names);
    int rc = 0;
    if (!map || !seen || !names) {
        rc = -ENOMEM;
        goto out;
    }
    for (int t = 0; t < nt; t++)
        names[t] = td_dataset_class_name(train, t);
    for (int v = 0; v < nv; v++) {
        const char *name = td_dataset_class_name(val, v);
        map[v] = -1;
        for (int t = 0; t < nt && map[v] < 0; t++)
            if (strcmp(name, names[t]) == 0)
                map[v] = t;
        if (map[v] < 0) {
            snprintf(err, errcap, "data.val: class '%s' is not a class of "
                     "data.train (%d classes, from '%s' to '%s')", name, nt,
                     names[0], names[nt - 1]);
            rc = TD_E_SPEC;
            goto out;
        }
        seen[map[v]] = 1;
    }
    int missing = 0, len = 0;
    for (int t = 0; t < nt; t++) {
        if (seen[t])
            continue;
        if (note && (size_t)len < notecap)
            len += snprintf(note + len, notecap - (size_t)len, "%s'%s'",
                            missing ? ", " : "", names[t]);
        missing++;
    }
    if (missing && note && (size_t)len < notecap)
        snprintf(note + len, notecap - (size_t)len, " (%d of %d classes) not "
                 "in data.val", missing, nt);
    if ((rc = td_dataset_relabel(val, map, nv, names, nt)) == -ERANGE) {
        snprintf(err, errcap, "data.val: a label beyond its class names");
        rc = TD_E_CORRUPT;
    }
out:
    free(map);
    free(seen);
    free(names);
    return rc;
}

int td_classes_split(const td_dataset *ds, double fraction, uint64_t seed,
                     uint8_t *out)
{
    size_t n = td_dataset_count(ds);
    int classes = td_dataset_classes(ds);
    uint32_t *idx = malloc((n ? n : 1) * sizeof *idx);
    uint32_t *perm = malloc((n ? n : 1) * sizeof *perm);
    if (!idx || !perm) {
        free(idx);
        free(perm);
        return -ENOMEM;
    }
    memset(out, 0, n);
    for (int c = 0; c < classes; c++) {
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            if (td_dataset_label(ds, i) == c)
                idx[k++] = (uint32_t)i;
        size_t take = (size_t)((double)k * fraction + 0.5);
        if (take == 0 && k >= 2 && fraction > 0)
            take = 1;
        if (take >= k && k > 0)
            take = k - 1; /* every class keeps a training sample */
        td_rng_permutation(seed, td_rng_stream(TD_RNG_SPLIT, (uint64_t)c),
                           perm, k);
        for (size_t j = 0; j < take; j++)
            out[idx[perm[j]]] = 1;
    }
    free(idx);
    free(perm);
    return 0;
}
