/* bench_chaos.c - kill -9 chaos against a live traind (issue 17); not a
 * timed test: it prints what happened and exits 1 only if a checkpoint
 * was lost or the final weights differ.
 *
 *   build/tests/bench/bench_chaos [CYCLES [EPOCHS [CHANNELS [SEED]]]]
 *
 * Defaults: 20 cycles (10 at random moments, 10 during checkpoint
 * writes), a job of 20 epochs x 100 steps on 32x32 synthetic input with a
 * first conv of 64 channels, checkpoints every 25 steps (keep 3).  See tests/live/chaos.h. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chaos.h"

int main(int argc, char **argv)
{
    td_chaos_opts o = {.cycles = argc > 1 ? atoi(argv[1]) : 20,
                       .epochs = argc > 2 ? atoi(argv[2]) : 20,
                       .channels = argc > 3 ? atoi(argv[3]) : 64,
                       .seed = argc > 4 ? strtoull(argv[4], NULL, 10) : 1,
                       .every = 25, .size = 32, .verbose = 1};
    td_harness h;
    char conf[] = "/tmp/traind-chaos-conf-XXXXXX";
    int cfd = mkstemp(conf);
    const char *text = "max_crash_restarts = 1000\nlog_level = warn\n";
    if (cfd < 0 || write(cfd, text, strlen(text)) < 0)
        return 2;
    close(cfd);
    const char *args[] = {"--config", conf, "--log-level", "warn", NULL};
    if (th_start(&h, args) != 0) {
        fprintf(stderr, "cannot start traind\n");
        return 2;
    }
    td_chaos_result r;
    td_chaos_run(&h, &o, &r);
    int st = th_stop(&h);
    th_cleanup(&h);
    unlink(conf);
    printf("chaos: %d kill -9 (%d during checkpoint writes, %d at random "
           "moments), %d resumed from a checkpoint, %d lost checkpoint(s); "
           "job %s at step %lld; final weights: %d tensor(s), %d differing "
           "from the uninterrupted run; %.1f s; daemon exit %d\n", r.kills,
           r.kills_in_write, r.kills_random, r.resumes, r.lost,
           r.completed ? "completed" : "NOT completed",
           (long long)r.final_step, r.tensors, r.differing, r.seconds, st);
    return r.lost || r.differing || !r.completed ? 1 : 0;
}
