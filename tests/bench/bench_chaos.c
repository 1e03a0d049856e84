/* bench_chaos.c - kill -9 chaos against a live traind (issue 17); not a
 * timed test: it prints what happened and fails only if a checkpoint was
 * lost, a restart did not resume, or the final weights differ.
 *
 *   build/tests/bench/bench_chaos [CYCLES [EPOCHS [CHANNELS [SEED]]]]
 *
 * Defaults: 20 cycles (10 at random moments, 10 during checkpoint
 * writes), a job of 20 epochs x 100 steps on 32x32 synthetic input with a
 * first conv of 64 channels, checkpoints every 25 steps (keep 3).  The
 * driver is tests/live/chaos.c (see chaos.h); it runs as a Check test so
 * that a failed assertion says where. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chaos.h"

static td_chaos_opts opts = {.cycles = 20, .epochs = 20, .channels = 64,
                             .seed = 1, .every = 25, .size = 32,
                             .verbose = 1};

START_TEST(chaos)
{
    td_harness h;
    char conf[] = "/tmp/traind-chaos-conf-XXXXXX";
    int cfd = mkstemp(conf);
    const char *text = "max_crash_restarts = 1000\n";
    ck_assert_int_ge(cfd, 0);
    ck_assert_int_eq(write(cfd, text, strlen(text)), (ssize_t)strlen(text));
    close(cfd);
    const char *args[] = {"--config", conf, "--log-level", "warn", NULL};
    ck_assert_int_eq(th_start(&h, args), 0);
    td_chaos_result r;
    td_chaos_run(&h, &opts, &r);
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
    fflush(stdout);
    ck_assert_int_eq(r.lost, 0);
    ck_assert_int_eq(r.resumes, r.kills);
    ck_assert(r.completed);
    ck_assert_int_eq(r.differing, 0);
}
END_TEST

int main(int argc, char **argv)
{
    if (argc > 1)
        opts.cycles = atoi(argv[1]);
    if (argc > 2)
        opts.epochs = atoi(argv[2]);
    if (argc > 3)
        opts.channels = atoi(argv[3]);
    if (argc > 4)
        opts.seed = strtoull(argv[4], NULL, 10);
    Suite *s = suite_create("chaos");
    TCase *tc = tcase_create("chaos");
    tcase_set_timeout(tc, 3600);
    tcase_add_test(tc, chaos);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
