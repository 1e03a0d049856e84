/* sim_race.c - the simulated device's stream-order race detector.
 *
 * Owns: per device allocation, the accesses that may still conflict with
 * a later one (byte range, stream, the stream's epoch, read or write, the
 * API call or kernel, the caller's return address), and the check made
 * when an operation is enqueued: an earlier access on another stream
 * conflicts (one of the two writes, the ranges overlap) and is a race
 * unless it happens before the new one - its epoch is covered by the new
 * operation's vector clock, which grows through cudaStreamWaitEvent,
 * the legacy stream's implicit synchronisation and host synchronisation
 * (sim_stream.c).  The check is made in logical time, at enqueue, so it
 * does not depend on how the threads happened to run.
 * Kernels' pointer arguments are recorded at their first element only
 * (their extents are unknown): a conflict is found when another access's
 * range contains that element.  Copies, memsets, cuBLAS and cuDNN
 * operands are recorded with their exact extents.
 * Never does: look at host memory (pinned or not), or change what the
 * program computes: it reports (TD_SIM_RACE=report) or reports and aborts
 * (strict).  A reported operation then runs after the one it raced with
 * (one of the orders the device could have picked), so that the
 * simulator's own threads never touch the same bytes at once (which
 * ThreadSanitizer would rightly call a data race in the simulator).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim_int.h"

static int td__overlap(const td_sim_rec *r, size_t off, size_t len)
{
    return r->off < off + len && off < r->off + r->len;
}

static void td__report(const td_sim_alloc *a, const td_sim_rec *old,
                       size_t off, size_t len, int write,
                       struct CUstream_st *s, const char *what,
                       const void *caller)
{
    char now[512], then[512];
    td__sim_where(caller, now, sizeof now);
    td__sim_where(old->caller, then, sizeof then);
    fprintf(stderr,
            "td-sim: STREAM-ORDER RACE on device %d, allocation %p "
            "(%zu bytes)\n"
            "td-sim:   %s of bytes %zu..%zu by %s on stream %d "
            "(operation %llu)\n"
            "td-sim:     called from %s\n"
            "td-sim:   is not ordered after the %s of bytes %zu..%zu by %s "
            "on stream %d (operation %llu; stream %d has waited only for "
            "its operation %llu)\n"
            "td-sim:     called from %s\n",
            a->dev, (void *)a->base, a->bytes, write ? "write" : "read",
            off, off + len - 1, what, s->id, (unsigned long long)s->enq,
            now, old->write ? "write" : "read", old->off,
            old->off + old->len - 1, old->what, old->stream,
            (unsigned long long)old->epoch, s->id,
            (unsigned long long)s->vc[old->stream], then);
    td__sim.races++;
    if (s->race_after[old->stream] < old->epoch)
        s->race_after[old->stream] = old->epoch;
    s->race_pending = 1;
    if (td__sim.race_mode == 2) {
        fprintf(stderr, "td-sim: TD_SIM_RACE=strict: aborting\n");
        abort();
    }
}

void td__sim_race(td_sim_alloc *a, const void *p, size_t n, int write,
                  struct CUstream_st *s, const char *what,
                  const void *caller)
{
    if (!td__sim.race_mode || !a || n == 0)
        return;
    size_t off = (size_t)((const char *)p - a->base);
    int reported = 0;
    for (int i = 0; i < a->nrec; i++) {
        td_sim_rec *r = &a->rec[i];
        if (reported || r->stream == s->id || !(r->write || write) ||
            !td__overlap(r, off, n))
            continue;
        if (r->epoch > s->vc[r->stream]) {
            td__report(a, r, off, n, write, s, what, caller);
            reported = 1; /* one report per access */
        }
    }
    /* forget what this access makes redundant: records it covers that
     * happen before it (a write supersedes every such access; a read the
     * same stream's earlier reads of the same range) */
    int k = 0;
    for (int i = 0; i < a->nrec; i++) {
        td_sim_rec *r = &a->rec[i];
        int before = r->epoch <= s->vc[r->stream];
        int covered = r->off >= off && r->off + r->len <= off + n;
        int drop = before && covered &&
                   (write || (!r->write && r->stream == s->id));
        if (!drop)
            a->rec[k++] = *r;
    }
    a->nrec = k;
    if (a->nrec == a->caprec) {
        int nc = a->caprec ? a->caprec * 2 : 16;
        td_sim_rec *g = realloc(a->rec, (size_t)nc * sizeof *g);
        if (!g)
            abort(); /* test tool */
        a->rec = g;
        a->caprec = nc;
    }
    a->rec[a->nrec++] = (td_sim_rec){.off = off, .len = n, .stream = s->id,
                                     .epoch = s->enq, .write = write,
                                     .what = what, .caller = caller};
}
