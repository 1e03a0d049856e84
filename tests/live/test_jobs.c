/* test_jobs.c - jobs trained by a live traind: events in order, durable
 * checkpoints, and restarts (SIGTERM and kill -9) that resume with exactly
 * the losses of an uninterrupted run. */
#include <math.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon_harness.h"
#include "job/device.h"
#include "store/checkpoint.h"
#include "tdtest.h"

TH_FIXTURE(H)


static void subscribe(int fd)
{
    json_t *r = th_request(fd, "subscribe",
                           json_pack("{s:i}", "every_steps", 1));
    ck_assert_ptr_nonnull(th_ok(r));
    json_decref(r);
}

START_TEST(test_job_completes_with_events_and_checkpoints)
{
    int sub = th_connect(&H, NULL), fd = th_connect(&H, NULL);
    subscribe(sub);
    int64_t id = th_submit(fd, th_spec(2, 50, 16, 16));
    json_t *log = json_array();
    json_t *done = th_wait_event(sub, "state", id, "completed", 60000, log);
    ck_assert_ptr_nonnull(done);
    json_decref(done);
    int64_t last_step = 0, epochs = 0, windows = 0, ckpts = 0;
    int running_first = 0;
    size_t i;
    json_t *ev;
    json_array_foreach(log, i, ev) {
        const char *k = json_string_value(json_object_get(ev, "event"));
        json_t *d = json_object_get(ev, "data");
        if (json_integer_value(json_object_get(ev, "job")) != id)
            continue;
        if (strcmp(k, "state") == 0 && !last_step && !epochs)
            running_first |= strcmp(json_string_value(json_object_get(
                                        d, "state")), "running") == 0;
        if (strcmp(k, "step") == 0) {
            int64_t s = json_integer_value(json_object_get(d, "step"));
            /* In order; under load the daemon may coalesce step events
             * (never windows, epochs or states). */
            ck_assert_int_gt(s, last_step);
            ck_assert(isfinite(json_number_value(json_object_get(d, "loss"))));
            last_step = s;
        } else if (strcmp(k, "epoch") == 0) {
            ck_assert_int_eq(json_integer_value(json_object_get(d, "epoch")),
                             epochs);
            epochs++;
        } else if (strcmp(k, "window") == 0) {
            windows++;
            ck_assert_ptr_nonnull(json_object_get(d, "verdict"));
            ck_assert_ptr_nonnull(json_object_get(d, "samples_per_s"));
        } else if (strcmp(k, "checkpoint") == 0) {
            ck_assert(json_is_true(json_object_get(d, "ok")));
            ckpts++;
        }
    }
    ck_assert(running_first);
    ck_assert_int_eq(last_step, 200);
    ck_assert_int_eq(epochs, 2);
    ck_assert_int_ge(windows, 15); /* (200 - 5 warm-up) / 10 */
    /* Every 50 steps, at the epoch end and at completion: steps 50, 100,
     * 150 and 200, unless the disk was still busy with one (skipped). */
    ck_assert_int_ge(ckpts, 2);
    json_decref(log);
    /* The newest checkpoint named by `show` opens, and its CRC checks. */
    json_t *r = th_job_request(fd, "show", id);
    json_t *job = json_object_get(th_ok(r), "job");
    json_t *cks = json_object_get(job, "checkpoints");
    ck_assert_int_ge(json_array_size(cks), 2);
    json_t *newest = json_array_get(cks, json_array_size(cks) - 1);
    const char *path = json_string_value(json_object_get(newest, "path"));
    td_ckpt_file *f;
    char err[512];
    ck_assert_msg(td_ckpt_open(path, &f, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(td_ckpt_file_meta(f)->step,
                     json_integer_value(json_object_get(newest, "step")));
    ck_assert_ptr_nonnull(td_ckpt_file_find(f, "c1.weight"));
    td_ckpt_close(f);
    ck_assert_ptr_nonnull(json_object_get(job, "result"));
    json_decref(r);
    close(fd);
    close(sub);
}
END_TEST

/* Plain SGD (no momentum buffers) and a model without batch norm: the
 * snapshot has no optimizer slots and no state tensors. */
START_TEST(test_plain_sgd_job_checkpoints)
{
    int fd = th_connect(&H, NULL);
    json_t *spec = th_tiny_spec(1, 25);
    json_object_set_new(json_object_get(spec, "optimizer"), "momentum",
                        json_real(0.0));
    int64_t id = th_submit(fd, spec);
    ck_assert(th_wait_state(fd, id, "completed", 60000));
    json_t *r = th_job_request(fd, "show", id);
    json_t *cks = json_object_get(json_object_get(th_ok(r), "job"),
                                  "checkpoints");
    ck_assert_int_ge(json_array_size(cks), 1);
    json_decref(r);
    close(fd);
}
END_TEST

/* A job for a GPU this machine does not have is refused at submit with
 * the reason (not queued to fail when it starts); the daemon goes on
 * serving, and a CPU job after it completes. */
START_TEST(test_absent_gpu_refused_at_submit)
{
    int fd = th_connect(&H, NULL);
    td_device_info info;
    td_device_probe(&info);
    if (info.cuda_count > 0) {
        printf("skipped: this machine has a GPU\n");
        close(fd);
        return;
    }
    json_t *spec = th_tiny_spec(1, 0);
    json_object_set_new(spec, "device", json_string("cuda:0"));
    json_t *r = th_request(fd, "submit", json_pack("{s:o}", "spec", spec));
    ck_assert_ptr_null(th_ok(r));
    ck_assert_str_eq(th_err_class(r), "invalid_spec");
    const char *desc = json_string_value(json_object_get(
        json_object_get(r, "error"), "desc"));
    ck_assert_msg(desc && strstr(desc, "device: ") && strstr(desc, "cuda:0") &&
                      strstr(desc, "not available"),
                  "%s", desc);
    json_decref(r);
    r = th_request(fd, "list", json_object());
    ck_assert_int_eq(json_array_size(json_object_get(th_ok(r), "jobs")), 0);
    json_decref(r);
    int64_t cpu = th_submit(fd, th_tiny_spec(1, 0));
    ck_assert(th_wait_state(fd, cpu, "completed", 60000));
    /* an ended run's list entry gives the whole run's samples/s, as its
     * reason does, not its last window's (two figures on one queue row) */
    r = th_job_request(fd, "show", cpu);
    json_t *res = json_object_get(json_object_get(th_ok(r), "job"),
                                  "result");
    double whole = json_number_value(json_object_get(res, "samples_per_s"));
    ck_assert(whole > 0);
    json_decref(r);
    r = th_request(fd, "list", json_object());
    json_t *row = json_array_get(json_object_get(th_ok(r), "jobs"), 0);
    ck_assert_double_eq(json_number_value(json_object_get(
                            row, "samples_per_s")), whole);
    json_decref(r);
    close(fd);
}
END_TEST

/* Polls `show` until job id has done at least `steps` steps. */
static void wait_steps(int fd, int64_t id, int steps)
{
    int64_t done = 0;
    for (int waited = 0; waited < 120000 && done < steps; waited += 10) {
        json_t *r = th_job_request(fd, "show", id);
        done = json_integer_value(json_object_get(
            json_object_get(th_ok(r), "job"), "step"));
        json_decref(r);
        if (done < steps)
            usleep(10000);
    }
    ck_assert_int_ge(done, steps);
}

/* The newest checkpoint of a job (from `show`). */
static td_ckpt_file *final_checkpoint(int fd, int64_t id, int64_t *step)
{
    json_t *r = th_job_request(fd, "show", id);
    json_t *cks = json_object_get(json_object_get(th_ok(r), "job"),
                                  "checkpoints");
    ck_assert_int_ge(json_array_size(cks), 1);
    json_t *last = json_array_get(cks, json_array_size(cks) - 1);
    td_ckpt_file *f;
    char err[512];
    ck_assert_msg(td_ckpt_open(json_string_value(json_object_get(last,
                                                                 "path")),
                               &f, err, sizeof err) == 0, "%s", err);
    *step = json_integer_value(json_object_get(last, "step"));
    json_decref(r);
    return f;
}

/* The step job id resumed from, from its log; -1 if it never resumed. */
static long resumed_step(int fd, int64_t id)
{
    json_t *r = th_job_request(fd, "logs", id);
    long resumed = -1;
    size_t i;
    json_t *l;
    json_array_foreach(json_object_get(th_ok(r), "lines"), i, l) {
        const char *p = strstr(json_string_value(l), "resumed from ");
        const char *q = p ? strstr(p, ": step ") : NULL;
        if (q)
            resumed = strtol(q + 7, NULL, 10);
    }
    json_decref(r);
    return resumed;
}

/* Job A runs uninterrupted; job B, the same spec, is stopped mid-run by
 * signal_no and the daemon restarted.  B must resume from a checkpoint
 * and end in exactly A's final state: every parameter, optimizer and
 * batch-norm tensor bitwise equal (CPU backend, one thread). */
static void resume_test(int signal_no)
{
    enum { EPOCHS = 10 }; /* 1,000 steps of ~1-2 ms: running when stopped */
    int fd = th_connect(&H, NULL);
    int64_t a = th_submit(fd, th_spec(EPOCHS, 50, 32, 32));
    ck_assert(th_wait_state(fd, a, "completed", 120000));
    int64_t b = th_submit(fd, th_spec(EPOCHS, 50, 32, 32));
    wait_steps(fd, b, 300);
    close(fd);
    if (signal_no == 0) { /* pause, then resume, in the same daemon */
        fd = th_connect(&H, NULL);
        json_t *r = th_job_request(fd, "pause", b);
        ck_assert_ptr_nonnull(th_ok(r));
        json_decref(r);
        ck_assert(th_wait_state(fd, b, "suspended", 30000));
        r = th_job_request(fd, "resume", b);
        ck_assert_ptr_nonnull(th_ok(r));
        json_decref(r);
    } else if (signal_no == SIGTERM) {
        ck_assert_int_eq(th_stop(&H), 0);
    } else {
        int st;
        kill(H.pid, SIGKILL);
        waitpid(H.pid, &st, 0);
        H.pid = 0;
    }
    if (signal_no != 0) {
        ck_assert_int_eq(th_restart(&H), 0);
        fd = th_connect(&H, NULL);
    }
    ck_assert(th_wait_state(fd, b, "completed", 120000));
    long resumed = resumed_step(fd, b);
    if (signal_no != SIGKILL) /* the step it stopped at */
        ck_assert_msg(resumed >= 300 && resumed < EPOCHS * 100,
                      "resumed at step %ld", resumed);
    else /* the last checkpoint completed before the kill (every 50) */
        ck_assert_msg(resumed >= 200 && resumed % 50 == 0 &&
                      resumed < EPOCHS * 100, "resumed at step %ld", resumed);
    int64_t sa, sb;
    td_ckpt_file *fa = final_checkpoint(fd, a, &sa);
    td_ckpt_file *fb = final_checkpoint(fd, b, &sb);
    ck_assert_int_eq(sa, EPOCHS * 100);
    ck_assert_int_eq(sb, sa);
    th_same_tensors(fa, fb, "after the resume");
    td_ckpt_close(fa);
    td_ckpt_close(fb);
    close(fd);
}

START_TEST(test_sigterm_mid_run_resumes_exactly) { resume_test(SIGTERM); }
END_TEST

START_TEST(test_pause_resume_continues_exactly) { resume_test(0); }
END_TEST

START_TEST(test_kill9_mid_run_resumes_from_last_checkpoint)
{
    resume_test(SIGKILL);
}
END_TEST

static Suite *jobs_suite(void)
{
    Suite *s = suite_create("jobs");
    TCase *tc = tcase_create("live");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, test_job_completes_with_events_and_checkpoints);
    tcase_add_test(tc, test_plain_sgd_job_checkpoints);
    tcase_add_test(tc, test_absent_gpu_refused_at_submit);
    tcase_add_test(tc, test_sigterm_mid_run_resumes_exactly);
    tcase_add_test(tc, test_pause_resume_continues_exactly);
    tcase_add_test(tc, test_kill9_mid_run_resumes_from_last_checkpoint);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(jobs_suite)
