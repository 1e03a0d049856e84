/* access.c - the submit-time read check (see access.h).
 *
 * Owns: resolving user-named paths with the user's rights and the
 * allowed_data_roots rule.  Never: reads a byte of a file it checks (an
 * error must not carry content), or leaves the loop thread in another
 * user's identity.
 */
#define _GNU_SOURCE
#include "access.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fscred.h"

typedef struct td__acc {
    uid_t uid;
    int switched;          /* running as the user (fscred) */
    const td_fscred *cred; /* for the fallback bit check */
    const json_t *roots;
    const char *field;
    char *err;
    size_t errcap;
} td__acc;

static int td__deny(td__acc *a, const char *path, int e)
{
    if (e == ENOENT || e == ENOTDIR)
        snprintf(a->err, a->errcap, "%s: %.1000s does not exist (as seen by "
                 "uid %u)", a->field, path, (unsigned)a->uid);
    else
        snprintf(a->err, a->errcap, "%s: %.1000s is not readable by uid %u",
                 a->field, path, (unsigned)a->uid);
    return -EACCES;
}

static int td__in_roots(const json_t *roots, const char *real)
{
    size_t i;
    json_t *r;
    if (!json_array_size(roots))
        return 1;
    json_array_foreach(roots, i, r) {
        const char *root = json_string_value(r);
        size_t n = root ? strlen(root) : 0;
        while (n > 1 && root[n - 1] == '/')
            n--;
        if (n && strncmp(real, root, n) == 0 &&
            (real[n] == '/' || real[n] == '\0' || n == 1))
            return 1;
    }
    return 0;
}

/* One concrete path (no glob): resolve, then open it for reading (a
 * directory must also be searchable). */
static int td__one(td__acc *a, const char *path, const char *shown)
{
    char real[PATH_MAX];
    if (!realpath(path, real))
        return td__deny(a, shown, errno);
    struct stat st;
    if (stat(real, &st) != 0)
        return td__deny(a, shown, errno);
    int isdir = S_ISDIR(st.st_mode);
    if (!isdir && !S_ISREG(st.st_mode)) {
        /* A FIFO would block the loop thread that reads it at submit (a
         * model .json: lib/model opens it blocking), a device never end. */
        snprintf(a->err, a->errcap, "%s: %.1000s is not a regular file or a "
                 "folder", a->field, shown);
        return -EACCES;
    }
    if (a->switched) {
        int fd = open(real, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
        if (fd < 0)
            return td__deny(a, shown, errno);
        close(fd);
        if (isdir && faccessat(AT_FDCWD, real, R_OK | X_OK, AT_EACCESS))
            return td__deny(a, shown, errno);
    } else if (a->cred && !td_fscred_bits_ok(a->cred, real, isdir)) {
        return td__deny(a, shown, EACCES);
    }
    if (a->roots && !td__in_roots(a->roots, real)) {
        snprintf(a->err, a->errcap, "%s: %.1000s is outside the allowed data "
                 "roots (see 'trainctl config get allowed_data_roots')",
                 a->field, shown);
        return -EACCES;
    }
    return 0;
}

static int td__path(td__acc *a, const char *p)
{
    struct stat st;
    if (!strpbrk(p, "*?[") || stat(p, &st) == 0)
        return td__one(a, p, p);
    /* A glob: expanded as the user, every match checked.  The pipeline
     * expands it again with the same rights when the job starts. */
    glob_t g;
    int grc = glob(p, GLOB_ERR, NULL, &g);
    if (grc == GLOB_NOMATCH) {
        snprintf(a->err, a->errcap, "%s: %.1000s matches nothing readable "
                 "by uid %u", a->field, p, (unsigned)a->uid);
        return -EACCES;
    }
    if (grc != 0)
        return td__deny(a, p, errno ? errno : EACCES);
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < g.gl_pathc; i++)
        rc = td__one(a, g.gl_pathv[i], g.gl_pathv[i]);
    globfree(&g);
    return rc;
}

static int td__model_path(const td_job_spec *s, const char **out)
{
    if (!json_is_string(s->model))
        return 0;
    const char *m = json_string_value(s->model);
    size_t n = strlen(m);
    if (n > 5 && strcmp(m + n - 5, ".json") == 0) {
        *out = m;
        return 1;
    }
    return 0;
}

/* Checks as a->uid from here on: the credentials switched to it (saved
 * in *saved, a->switched) where the daemon may, else a->cred for the
 * checks by hand.  0 or -EACCES (the reason in a->err). */
static int td__as_uid(td__acc *a, td_fscred *cred, td_fscred_saved *saved)
{
    int rc;
    if (td_fscred_for_reader(a->uid, cred, a->err, a->errcap))
        return -EACCES;
    if (cred->bits) { /* checked by hand */
        a->cred = cred;
        return 0;
    }
    if (!cred->set) /* root, or the daemon's own uid */
        return 0;
    if ((rc = td_fscred_enter(cred, saved))) {
        snprintf(a->err, a->errcap, "cannot check paths as uid %u: %s",
                 (unsigned)a->uid, strerror(-rc));
        return -EACCES;
    }
    a->switched = 1;
    return 0;
}

int td_access_check_spec(uid_t uid, const td_job_spec *s, const json_t *roots,
                         char *err, size_t errcap)
{
    td_fscred cred;
    td_fscred_saved saved;
    td__acc a = {.uid = uid, .err = err, .errcap = errcap};
    int rc;
    if ((rc = td__as_uid(&a, &cred, &saved)))
        return rc;
    const td_spec_paths *sets[2] = {&s->data.train, &s->data.val};
    const char *names[2] = {"data.train", "data.val"};
    rc = 0;
    /* Synthetic input reads no data: its paths are never opened. */
    int reads_data = s->input.source == TD_SOURCE_FILES;
    for (int k = 0; reads_data && rc == 0 && k < 2; k++) {
        a.field = names[k];
        a.roots = roots;
        for (int i = 0; rc == 0 && i < sets[k]->n; i++)
            rc = td__path(&a, sets[k]->v[i]);
    }
    const char *model;
    if (rc == 0 && td__model_path(s, &model)) {
        a.field = "model";
        a.roots = NULL; /* the roots are for data */
        rc = td__one(&a, model, model);
    }
    if (a.switched)
        td_fscred_leave(&saved);
    return rc;
}

int td_access_check_paths(uid_t uid, const char *field, int indexed,
                          const char *const *paths, int n,
                          const json_t *roots, char *err, size_t errcap)
{
    td_fscred cred;
    td_fscred_saved saved;
    td__acc a = {.uid = uid, .err = err, .errcap = errcap, .roots = roots};
    char f[96];
    int rc;
    if ((rc = td__as_uid(&a, &cred, &saved)))
        return rc;
    rc = 0;
    for (int i = 0; rc == 0 && i < n; i++) {
        if (indexed)
            snprintf(f, sizeof f, "%s[%d]", field, i);
        else
            snprintf(f, sizeof f, "%s", field);
        a.field = f;
        rc = td__path(&a, paths[i]);
    }
    if (a.switched)
        td_fscred_leave(&saved);
    return rc;
}

int td_access_build_model(uid_t uid, const td_job_spec *s,
                          const char *models_dir, td_model **out)
{
    td_shape in = {s->input.channels, s->input.size[0], s->input.size[1]};
    int classes = s->data.classes > 0 ? s->data.classes : 10;
    char e[512];
    *out = NULL;
    if (!json_is_string(s->model))
        return td_model_build(s->model, in, classes, out, e, sizeof e);
    const char *m;
    td_fscred cred;
    td_fscred_saved saved;
    int users = td__model_path(s, &m) && uid != 0 && uid != geteuid();
    if (users && !td_fscred_can_switch())
        return -EPERM; /* the runner reads it as the daemon; not here */
    if (users && (td_fscred_for_uid(uid, &cred, NULL, 0) ||
                  td_fscred_enter(&cred, &saved)))
        return -EPERM;
    int rc = td_model_load(models_dir, json_string_value(s->model), in,
                           classes, out, e, sizeof e);
    if (users)
        td_fscred_leave(&saved);
    return rc;
}

int td_access_enter(uid_t uid, td_fscred_saved *saved)
{
    td_fscred cred;
    memset(saved, 0, sizeof *saved);
    if (td_fscred_for_reader(uid, &cred, NULL, 0))
        return td_fscred_can_switch() ? -EACCES : 0;
    /* set only where the daemon may switch: else nothing to enter */
    return td_fscred_enter(&cred, saved) ? -EACCES : 0;
}
