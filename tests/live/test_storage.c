/* test_storage.c - traind live when the daemon dies or the disk fails
 * (issue 17): kill -9 in the middle of things, a state dir that cannot be
 * written, checkpoints that cannot be saved. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon_harness.h"
#include "tdtest.h"

TH_FIXTURE(H)

static void kill9_and_restart(td_harness *h)
{
    int st;
    kill(h->pid, SIGKILL);
    waitpid(h->pid, &st, 0);
    h->pid = 0;
    ck_assert_int_eq(th_restart(h), 0);
}

static json_t *show_job(int fd, int64_t id)
{
    json_t *r = th_job_request(fd, "show", id);
    json_t *j = json_incref(json_object_get(th_ok(r), "job"));
    json_decref(r);
    ck_assert_ptr_nonnull(j);
    return j;
}

/* Waits until the job has taken a step in this daemon's life. */
static void wait_stepping(int fd, int64_t id, int64_t after)
{
    for (int i = 0; i < 500; i++) {
        json_t *j = show_job(fd, id);
        int64_t step = json_integer_value(json_object_get(j, "step"));
        const char *st = json_string_value(json_object_get(j, "state"));
        int ok = strcmp(st, "running") == 0 && step > after;
        json_decref(j);
        if (ok)
            return;
        usleep(20000);
    }
    ck_abort_msg("job %lld never stepped", (long long)id);
}

/* A job that takes the daemon down every time it runs (here: kill -9
 * while it trains, before any checkpoint) is failed after
 * max_crash_restarts (3) lives, not restarted forever. */
START_TEST(test_crash_loop_job_failed)
{
    int fd = th_connect(&H, NULL);
    json_t *spec = th_tiny_spec(100000, 0);
    json_object_set_new(json_object_get(spec, "checkpoint"), "at_epoch_end",
                        json_false());
    int64_t id = th_submit(fd, spec);
    for (int life = 0; life < 3; life++) {
        wait_stepping(fd, id, 0);
        close(fd);
        kill9_and_restart(&H);
        fd = th_connect(&H, NULL);
    }
    json_t *j = show_job(fd, id);
    const char *st = json_string_value(json_object_get(j, "state"));
    const char *why = json_string_value(json_object_get(j, "reason"));
    ck_assert_msg(strcmp(st, "failed") == 0, "%s: %s", st, why);
    ck_assert_msg(strstr(why, "max_crash_restarts"), "%s", why);
    json_decref(j);
    /* The failure is on disk: another restart keeps it failed. */
    close(fd);
    ck_assert_int_eq(th_restart(&H), 0);
    fd = th_connect(&H, NULL);
    j = show_job(fd, id);
    ck_assert_str_eq(json_string_value(json_object_get(j, "state")),
                     "failed");
    json_decref(j);
    close(fd);
}
END_TEST

/* Below the limit a crashed job resumes, as before. */
START_TEST(test_one_crash_resumes)
{
    int fd = th_connect(&H, NULL);
    json_t *spec = th_tiny_spec(100000, 0);
    json_object_set_new(json_object_get(spec, "checkpoint"), "at_epoch_end",
                        json_false());
    int64_t id = th_submit(fd, spec);
    wait_stepping(fd, id, 0);
    close(fd);
    kill9_and_restart(&H);
    fd = th_connect(&H, NULL);
    ck_assert(th_wait_state(fd, id, "running", 10000));
    json_t *r = th_job_request(fd, "cancel", id);
    json_decref(r);
    ck_assert(th_wait_state(fd, id, "cancelled", 20000));
    close(fd);
}
END_TEST

static Suite *storage_suite(void)
{
    Suite *s = suite_create("storage");
    TCase *tc = tcase_create("crash");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_crash_loop_job_failed);
    tcase_add_test(tc, test_one_crash_resumes);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(storage_suite)
