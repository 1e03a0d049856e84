/* reads.h - a bound on each user's file reads under way (loop thread).
 *
 * `logs` and `show` of an ended job read a whole file on libuv's
 * threadpool, where job records are written too (4 threads by default).
 * One user's pipelined or abandoned requests (a read goes on after its
 * client disconnects) could hold every thread for as long as they liked,
 * and every job's record writes waited.  A uid other than root has at
 * most TD_READS_PER_UID such reads under way, counted from the request
 * until the read ends; one more is refused (`conflict`).
 */
#ifndef TD_READS_H
#define TD_READS_H

#include <stddef.h>
#include <sys/types.h>

#define TD_READS_PER_UID 4

/* Takes a slot for uid (root: always, nothing counted): 0, or -EBUSY with
 * the refusal's text in err ("what: uid N already has 4 file read(s)
 * under way; wait for their replies"). */
int td_reads_begin(uid_t uid, const char *what, char *err, size_t errcap);
/* Gives the slot back (after td_reads_begin's 0 only). */
void td_reads_end(uid_t uid);

#endif
