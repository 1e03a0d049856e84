/* spec_file.c - job files and `--set key.path=value` overrides, before the
 * spec walk (spec.c) sees them.
 *
 * Owns: reading a job file, applying overrides to its JSON by key path,
 * and the order of path resolution (the file's paths against its folder,
 * --set paths against the current directory: spec_paths.c).
 * Never: validates fields (td_spec_parse does) or reads anything but the
 * job file.
 */
#include "job/spec.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

/* Splits the next segment off *pp: a key (up to '.' or '[') or "[N]". */
static int td__next_seg(const char **pp, char *key, size_t cap, long *idx)
{
    const char *p = *pp;
    *idx = -1;
    if (*p == '[') {
        char *end;
        errno = 0;
        *idx = strtol(p + 1, &end, 10);
        if (end == p + 1 || *end != ']' || *idx < 0 || errno)
            return -1;
        p = end + 1;
    } else {
        size_t n = strcspn(p, ".[");
        if (n == 0 || n >= cap)
            return -1;
        memcpy(key, p, n);
        key[n] = '\0';
        p += n;
    }
    if (*p == '.')
        p++;
    else if (*p && *p != '[')
        return -1;
    if (*p == '\0' && (*pp)[strlen(*pp) - 1] == '.')
        return -1; /* trailing dot */
    *pp = p;
    return 0;
}

int td_spec_apply_override(json_t *root, const char *path, const char *value,
                           char *err, size_t errcap)
{
    char key[256], done[512] = "";
    const char *p = path;
    json_t *cur = root;
    if (err && errcap)
        err[0] = '\0';
    if (!json_is_object(root) || !path || !value)
        return -EINVAL;
    if (!*path)
        return td_set_error(err, errcap, TD_E_SPEC, "(override): empty key path");
    /* JSON keys are UTF-8: jansson refuses others, which read as -ENOMEM */
    json_t *key_ok = json_string(path);
    if (!key_ok)
        return td_set_error(err, errcap, TD_E_SPEC,
                            "(override): key path is not valid UTF-8");
    json_decref(key_ok);
    json_t *v = json_loads(value, JSON_DECODE_ANY, NULL);
    if (!v && !(v = json_string(value)))
        return td_set_error(err, errcap, TD_E_SPEC,
                            "%s: value is not valid UTF-8", path);
    while (*p) {
        long idx;
        if (td__next_seg(&p, key, sizeof key, &idx) < 0) {
            json_decref(v);
            return td_set_error(err, errcap, TD_E_SPEC,
                                "%s: malformed key path", path);
        }
        int last = *p == '\0';
        json_t *next;
        if (idx >= 0) {
            if (!json_is_array(cur) || (size_t)idx >= json_array_size(cur)) {
                json_decref(v);
                return td_set_error(err, errcap, TD_E_SPEC,
                                    "%s: has no element [%ld]",
                                    *done ? done : "(spec)", idx);
            }
            snprintf(done + strlen(done), sizeof done - strlen(done),
                     "[%ld]", idx);
            if (last)
                return json_array_set_new(cur, (size_t)idx, v) ? -ENOMEM : 0;
            next = json_array_get(cur, (size_t)idx);
        } else {
            if (!json_is_object(cur)) {
                json_decref(v);
                return td_set_error(err, errcap, TD_E_SPEC,
                                    "%s: is not an object",
                                    *done ? done : "(spec)");
            }
            snprintf(done + strlen(done), sizeof done - strlen(done),
                     "%s%s", *done ? "." : "", key);
            if (last)
                return json_object_set_new(cur, key, v) ? -ENOMEM : 0;
            next = json_object_get(cur, key);
            if (!next) {
                next = json_object();
                if (!next || json_object_set_new(cur, key, next) < 0) {
                    json_decref(v);
                    return -ENOMEM;
                }
            }
        }
        cur = next;
    }
    json_decref(v);
    return td_set_error(err, errcap, TD_E_SPEC,
                                "%s: malformed key path", path);
}

int td_spec_apply_set(json_t *root, const char *assignment, char *err,
                      size_t errcap)
{
    char path[512];
    const char *eq = assignment ? strchr(assignment, '=') : NULL;
    if (!eq)
        return td_set_error(err, errcap, TD_E_SPEC,
                            "%s: expected key.path=value",
                            assignment ? assignment : "(null)");
    size_t n = (size_t)(eq - assignment);
    if (n == 0 || n >= sizeof path)
        return td_set_error(err, errcap, TD_E_SPEC,
                            "%s: expected key.path=value", assignment);
    memcpy(path, assignment, n);
    path[n] = '\0';
    return td_spec_apply_override(root, path, eq + 1, err, errcap);
}

int td_spec_load_file(const char *path, const char *const *sets, int nsets,
                      td_job_spec *out, char *err, size_t errcap)
{
    json_error_t je;
    char dir[4096];
    int r;
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "r");
    if (!f) {
        r = -errno;
        td_set_error(err, errcap, r, "%s: %s", path, td_strerror(r));
        return r;
    }
    json_t *root = json_loadf(f, JSON_REJECT_DUPLICATES, &je);
    fclose(f);
    if (!root)
        return td_set_error(err, errcap, TD_E_SPEC, "%s: line %d column %d: %s",
                            path, je.line, je.column, je.text);
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *(slash == dir ? slash + 1 : slash) = '\0';
    else
        snprintf(dir, sizeof dir, ".");
    char *abs = realpath(dir, NULL); /* NULL: keep dir as given */
    /* The file's paths against its folder, --set paths against the
     * current directory (spec_paths.c). */
    r = td_spec_absolute_paths(root, abs ? abs : dir);
    for (int i = 0; !r && i < nsets; i++)
        r = td_spec_apply_set(root, sets[i], err, errcap);
    if (!r)
        r = td_spec_absolute_paths(root, NULL);
    if (!r)
        r = td_spec_parse(root, abs ? abs : dir, out, err, errcap);
    free(abs);
    json_decref(root);
    return r;
}
