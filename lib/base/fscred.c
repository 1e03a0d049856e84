/* fscred.c - per-thread filesystem credentials (see fscred.h).
 *
 * Owns: looking up a user's groups and switching the calling thread's
 * fsuid, fsgid and group list.  Never: touches another thread's
 * credentials (no glibc setgroups(), which broadcasts to every thread).
 */
#define _GNU_SOURCE
#include "base/fscred.h"

#include <errno.h>
#include <limits.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/fsuid.h>
#include <sys/syscall.h>
#include <unistd.h>

int td_fscred_for_uid(uid_t uid, td_fscred *c, char *err, size_t errcap)
{
    struct passwd pw, *pwp = NULL;
    char buf[4096];
    memset(c, 0, sizeof *c);
    if (getpwuid_r(uid, &pw, buf, sizeof buf, &pwp) != 0 || !pwp) {
        if (err)
            snprintf(err, errcap, "uid %u has no passwd entry", (unsigned)uid);
        return -ENOENT;
    }
    int n = TD_FSCRED_MAX_GROUPS;
    if (getgrouplist(pw.pw_name, pw.pw_gid, c->groups, &n) < 0) {
        /* More groups than we keep: the first ones only (never more
         * rights than the user has). */
        n = TD_FSCRED_MAX_GROUPS;
    }
    c->set = 1;
    c->uid = uid;
    c->gid = pw.pw_gid;
    c->ngroups = n;
    return 0;
}

int td_fscred_can_switch(void) { return geteuid() == 0; }

int td_fscred_for_reader(uid_t uid, td_fscred *c, char *err, size_t errcap)
{
    memset(c, 0, sizeof *c);
    if (uid == 0 || uid == geteuid())
        return 0;
    int rc = td_fscred_for_uid(uid, c, err, errcap);
    if (rc == 0 && !td_fscred_can_switch()) {
        c->set = 0;
        c->bits = 1;
    }
    return rc;
}

static int td__setgroups(int n, const gid_t *g)
{
    return (int)syscall(SYS_setgroups, (size_t)n, g);
}

int td_fscred_enter(const td_fscred *c, td_fscred_saved *saved)
{
    memset(saved, 0, sizeof *saved);
    if (!c || !c->set)
        return 0;
    /* setfsuid() returns the previous value and cannot report failure;
     * calling it twice reads back what the kernel accepted. */
    saved->fsuid = (uid_t)setfsuid((uid_t)-1);
    saved->fsgid = (gid_t)setfsgid((gid_t)-1);
    int n = getgroups(TD_FSCRED_MAX_GROUPS, saved->groups);
    if (n < 0)
        return -errno;
    saved->ngroups = n;
    if (td__setgroups(c->ngroups, c->groups) != 0)
        return -EPERM;
    setfsgid(c->gid);
    if ((gid_t)setfsgid((gid_t)-1) != c->gid) {
        td__setgroups(saved->ngroups, saved->groups);
        return -EPERM;
    }
    setfsuid(c->uid);
    if ((uid_t)setfsuid((uid_t)-1) != c->uid) {
        setfsgid(saved->fsgid);
        td__setgroups(saved->ngroups, saved->groups);
        return -EPERM;
    }
    saved->active = 1;
    return 0;
}

void td_fscred_leave(const td_fscred_saved *saved)
{
    if (!saved->active)
        return;
    setfsuid(saved->fsuid);
    setfsgid(saved->fsgid);
    td__setgroups(saved->ngroups, saved->groups);
}

int td_fscred_mode_ok(const td_fscred *c, const struct stat *st, int need)
{
    int have = st->st_mode & 7;
    if (st->st_uid == c->uid) {
        have = (st->st_mode >> 6) & 7;
    } else {
        for (int g = 0; g < c->ngroups; g++)
            if (c->groups[g] == st->st_gid)
                have = (st->st_mode >> 3) & 7;
    }
    return (have & need) == need;
}

int td_fscred_bits_ok(const td_fscred *c, const char *real, int isdir)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", real);
    for (int depth = 0; dir[0]; depth++) {
        struct stat st;
        if (stat(dir, &st) != 0)
            return 0;
        if (!td_fscred_mode_ok(c, &st, depth == 0 ? (isdir ? 5 : 4) : 1))
            return 0;
        char *slash = strrchr(dir, '/');
        if (!slash)
            break;
        if (slash == dir) {
            if (dir[1] == '\0')
                break;
            dir[1] = '\0'; /* check "/" itself last */
            continue;
        }
        *slash = '\0';
    }
    return 1;
}
