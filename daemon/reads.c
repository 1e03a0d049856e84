/* reads.c - each user's file reads under way (see reads.h).  Loop thread
 * only: no lock. */
#include "reads.h"

#include <errno.h>
#include <stdio.h>

/* The uids with reads under way; a free slot has n == 0.  More users
 * than this with reads at the same moment are refused until one ends. */
static struct {
    uid_t uid;
    int n;
} td__busy[256];

static int *td__slot(uid_t uid, int add)
{
    int *free_slot = NULL;
    for (size_t i = 0; i < sizeof td__busy / sizeof *td__busy; i++) {
        if (td__busy[i].n && td__busy[i].uid == uid)
            return &td__busy[i].n;
        if (add && !free_slot && !td__busy[i].n) {
            td__busy[i].uid = uid;
            free_slot = &td__busy[i].n;
        }
    }
    return free_slot;
}

int td_reads_begin(uid_t uid, const char *what, char *err, size_t errcap)
{
    if (uid == 0)
        return 0;
    int *n = td__slot(uid, 1);
    if (!n) {
        snprintf(err, errcap, "%s: too many users have file reads under "
                 "way; try again in a moment", what);
        return -EBUSY;
    }
    if (*n >= TD_READS_PER_UID) {
        snprintf(err, errcap, "%s: uid %u already has %d file read(s) under "
                 "way (logs, show of an ended job); wait for their replies",
                 what, (unsigned)uid, TD_READS_PER_UID);
        return -EBUSY;
    }
    ++*n;
    return 0;
}

void td_reads_end(uid_t uid)
{
    int *n = uid ? td__slot(uid, 0) : NULL;
    if (n && *n > 0)
        --*n;
}
