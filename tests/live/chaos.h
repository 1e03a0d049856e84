/* chaos.h - kill -9 a live traind again and again while a job trains,
 * then check that nothing was lost (issue 17).
 *
 * One daemon; job A trains uninterrupted; job B (the same spec) is killed
 * with SIGKILL `cycles` times, each once it has written a checkpoint
 * newer than the one it resumed from: even cycles after a random 0-400 ms
 * more, odd ones while the next checkpoint file is being written (its
 * .tmp exists) - and the daemon restarted each time.  After every kill the newest checkpoint
 * that validates must be at least as new as the newest complete one seen
 * before the kill (else it counts as lost).  At the end B's final
 * checkpoint must equal A's bitwise, tensor by tensor.
 * Test-only code: uses Check assertions for setup failures.
 */
#ifndef TD_TEST_CHAOS_H
#define TD_TEST_CHAOS_H

#include <stdint.h>

#include "daemon_harness.h"

typedef struct td_chaos_opts {
    int cycles;          /* kill -9 cycles */
    int epochs;          /* of 100 steps */
    int every;           /* checkpoint interval in steps */
    int size, channels;  /* th_spec: bigger = bigger checkpoints */
    uint64_t seed;       /* of the random kill moments */
    int verbose;         /* print each cycle */
} td_chaos_opts;

typedef struct td_chaos_result {
    int kills, kills_in_write, kills_random;
    int resumes;         /* restarts that had a valid checkpoint to use */
    int lost;            /* kills after which the newest valid checkpoint
                            was older than the newest complete before */
    int tensors, differing; /* final checkpoint comparison */
    int completed;       /* B reached completed */
    int64_t final_step;
    double seconds;
} td_chaos_result;

/* h must be started with a config setting max_crash_restarts high (the
 * random kills may come before a new checkpoint). */
void td_chaos_run(td_harness *h, const td_chaos_opts *o, td_chaos_result *r);

#endif
