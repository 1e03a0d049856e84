/* fscred.h - read files as another user: per-thread filesystem
 * credentials.
 *
 * The daemon may run as root and trains for whoever submits.  Every file a
 * user names (datasets, shards found by a glob, model .json files) is
 * opened by a thread that has taken on that user's filesystem identity:
 * fsuid, fsgid and supplementary groups.  The kernel then checks each path
 * component, symlink and `..` exactly as it would for the user, and a
 * thread whose fsuid is not 0 loses CAP_DAC_OVERRIDE for those opens.  On
 * Linux these are per-thread (setfsuid, setfsgid and the raw setgroups
 * system call; glibc's setgroups() would change every thread), so the
 * loop, the checkpoint writer and the state dir keep the daemon's own.
 *
 * A daemon that is not root cannot switch (td_fscred_can_switch() is 0);
 * it reads with its own rights and callers add a check of the bits on the
 * resolved path (td_fscred_bits_ok; see daemon/access.c and
 * lib/job/jobdata.c).
 *
 * Never: changes the process's real or effective ids, or leaves a thread
 * in another identity past td_fscred_leave().
 */
#ifndef TD_FSCRED_H
#define TD_FSCRED_H

#include <sys/types.h>

#define TD_FSCRED_MAX_GROUPS 64

typedef struct td_fscred {
    int set;                 /* 0: use the thread's own (a no-op) */
    int bits;                /* with set 0: a daemon that cannot switch
                                reads as itself, and the files it opens
                                for uid are checked by td_fscred_bits_ok */
    uid_t uid;
    gid_t gid;
    int ngroups;
    gid_t groups[TD_FSCRED_MAX_GROUPS];
} td_fscred;

typedef struct td_fscred_saved {
    int active;
    uid_t fsuid;
    gid_t fsgid;
    int ngroups;
    gid_t groups[TD_FSCRED_MAX_GROUPS];
} td_fscred_saved;

/* Fills c with uid's identity from the passwd and group databases.
 * -ENOENT (with err) when uid has no passwd entry. */
int td_fscred_for_uid(uid_t uid, td_fscred *c, char *err, size_t errcap);
/* How the daemon (running as geteuid()) reads the files uid names, in c:
 * none to take on (c zeroed) for root and the daemon's own uid; uid's
 * identity, switched to, where the daemon may (td_fscred_can_switch);
 * else uid's identity with set 0 and bits 1: read as the daemon, every
 * file's bits checked for uid (td_fscred_bits_ok).  -ENOENT (with err)
 * when uid has no passwd entry: then nothing of uid's may be read. */
int td_fscred_for_reader(uid_t uid, td_fscred *c, char *err, size_t errcap);
/* 1 when this process may take on another user's identity (euid 0). */
int td_fscred_can_switch(void);
/* The calling thread takes on c (c NULL or !c->set: nothing happens).
 * -EPERM if the kernel refused; the thread is then unchanged. */
int td_fscred_enter(const td_fscred *c, td_fscred_saved *saved);
/* Back to what td_fscred_enter saved. */
void td_fscred_leave(const td_fscred_saved *saved);
/* Without switching: 1 when the owner, group and other bits of the
 * resolved path `real` (a file, or with isdir a folder to list) and of
 * every folder above it let c's uid and groups read it, else 0 (also when
 * a stat fails).  POSIX ACLs are not read. */
int td_fscred_bits_ok(const td_fscred *c, const char *real, int isdir);
struct stat;
/* The same for one file's stat: 1 when its bits give c's uid and groups
 * every bit of need (4 read, 1 search). */
int td_fscred_mode_ok(const td_fscred *c, const struct stat *st, int need);

#endif
