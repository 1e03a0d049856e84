/* test_restarts.c - traind live, the failure-injection audit continued
 * (test_failures.c has the first part): a daemon killed while an eval job
 * runs, started on a state dir whose disk is full, and stopped while a
 * cancel is on its way.  Each test names what it guards against. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/clock.h"
#include "daemon_harness.h"
#include "jpeggen.h"
#include "tdsuite.h"
#include "tdtest.h"

TH_FIXTURE(H)

/* ---- kill -9 during an eval job ------------------------------------------- */

/* A 2-class ImageFolder at H.dir/data and a job trained on it for one
 * epoch; its final checkpoint in ckpt. */
static void trained_checkpoint(int fd, char *ckpt, size_t cap)
{
    char data[300];
    snprintf(data, sizeof data, "%s/data", H.dir);
    td_test_make_folder(data, 2, 12, 24, 24);
    int64_t id = th_submit(fd, th_files_spec(data, 1));
    ck_assert(th_wait_state(fd, id, "completed", 120000));
    json_t *j = th_show_job(fd, id);
    const char *p = json_string_value(json_object_get(
        json_object_get(j, "result"), "last_checkpoint"));
    ck_assert_ptr_nonnull(p);
    snprintf(ckpt, cap, "%s", p);
    json_decref(j);
}

/* An eval job killed (kill -9) while it ran: the restarted daemon runs it
 * again from the start, and it completes with its result.  Its log said
 * "recovered ... at step 0; resumes from its last checkpoint", which an
 * eval job does not have; now it says that it runs again from the start,
 * as its record's reason does. */
START_TEST(test_kill9_during_eval_job_runs_again)
{
    char ckpt[4096], data[300];
    int fd = th_connect(&H, NULL);
    trained_checkpoint(fd, ckpt, sizeof ckpt);
    snprintf(data, sizeof data, "%s/eval", H.dir);
    /* big enough that the run takes seconds (events come 5 a second):
     * 1,400 files, 20 images a class each linked 35 times (making 1,400
     * images took minutes in an ASan build on a loaded machine) */
    td_test_make_folder(data, 2, 20, 320, 320);
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 20; i++)
            for (int c = 1; c < 35; c++) {
                char from[400], to[400];
                snprintf(from, sizeof from, "%s/class%d/img%03d.jpg", data,
                         k, i);
                snprintf(to, sizeof to, "%s/class%d/copy%02d-%03d.jpg",
                         data, k, c, i);
                ck_assert_int_eq(link(from, to), 0);
            }
    int64_t id = -1;
    /* killed while it runs: an eval event before the last; a job that
     * ends first is tried again */
    for (int attempt = 0; attempt < 5 && id < 0; attempt++) {
        int64_t e = th_submit(fd, json_pack(
            "{s:s, s:s, s:s, s:i, s:i}", "task", "eval", "checkpoint", ckpt,
            "data", data, "workers", 1, "batch_size", 4));
        json_decref(th_request(fd, "subscribe", json_pack(
            "{s:I, s:[s,s]}", "job", (json_int_t)e, "events", "eval",
            "state")));
        for (int64_t end = td_now_ns() + 120 * TD_NS_PER_S;
             td_now_ns() < end;) {
            json_t *ev = th_read_json(fd, 1000);
            const char *k = json_string_value(json_object_get(ev, "event"));
            json_t *d = json_object_get(ev, "data");
            int ended = k && strcmp(k, "state") == 0 &&
                        strcmp(json_string_value(json_object_get(
                                   d, "state")), "running") != 0;
            int midway = k && strcmp(k, "eval") == 0 &&
                         json_integer_value(json_object_get(d, "done")) > 0 &&
                         json_integer_value(json_object_get(d, "done")) <
                             json_integer_value(json_object_get(d, "total"));
            json_decref(ev);
            if (midway) {
                close(fd);
                th_kill9_restart(&H);
                fd = th_connect(&H, NULL);
                id = e;
                break;
            }
            if (ended)
                break;
        }
        if (id < 0) { /* it ended before a kill: unsubscribe */
            json_decref(th_request(fd, "unsubscribe", NULL));
        }
    }
    ck_assert_msg(id > 0, "no eval job was caught running");
    json_t *j = NULL;
    for (int i = 0; i < 2400; i++) {
        json_decref(j);
        j = th_show_job(fd, id);
        if (strcmp(th_job_state(j), "completed") == 0 ||
            strcmp(th_job_state(j), "failed") == 0)
            break;
        usleep(50000);
    }
    ck_assert_msg(strcmp(th_job_state(j), "completed") == 0, "%s: %s",
                  th_job_state(j),
                  json_string_value(json_object_get(j, "reason")));
    ck_assert_ptr_nonnull(json_object_get(j, "result"));
    json_decref(j);
    ck_assert(th_log_has(fd, id, "recovered after traind stopped without a "
                                 "shutdown"));
    ck_assert(th_log_has(fd, id, "runs again from the start"));
    ck_assert(!th_log_has(fd, id, "resumes from its last checkpoint"));
    close(fd);
}
END_TEST

/* ---- a full state dir at start -------------------------------------------- */

static void teardown_mount(void)
{
    int st = th_stop(&H);
    th_tmpfs_unmount();
    th_cleanup(&H);
    ck_assert_msg(st == 0 || st == -1, "traind exited with status %d", st);
}

/* The state dir's disk full at start (only a read-only one was tested):
 * the daemon refuses to start, with exit status 1, saying which folder it
 * cannot write and why (No space left on device), after reading the
 * records it has; nothing it had is lost. */
START_TEST(test_full_state_dir_at_start_refused)
{
    static char root[300];
    static const char *args[] = {"--state-dir", root, NULL};
    snprintf(root, sizeof root, "%s/small", H.dir);
    if (th_tmpfs_mount(root, 8192))
        return;
    ck_assert_int_eq(th_stop(&H), 0);
    H.extra = args;
    ck_assert_int_eq(th_restart(&H), 0);
    int fd = th_connect(&H, NULL);
    int64_t id = th_submit(fd, th_tiny_spec(2, 0));
    ck_assert(th_wait_state(fd, id, "completed", 60000));
    close(fd);
    ck_assert_int_eq(th_stop(&H), 0);
    char filler[400], rec[400], out[400];
    snprintf(rec, sizeof rec, "%s/jobs/%lld.json", root, (long long)id);
    struct stat before, after;
    ck_assert_int_eq(stat(rec, &before), 0);
    th_tmpfs_fill(root, filler, sizeof filler);
    /* the daemon's stderr into a file (not on the full disk) */
    snprintf(out, sizeof out, "%s/daemon.err", H.dir);
    int efd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int saved = dup(2);
    ck_assert(efd >= 0 && saved >= 0);
    dup2(efd, 2);
    int rc = th_restart(&H);
    dup2(saved, 2);
    close(saved);
    close(efd);
    ck_assert_msg(rc != 0 && H.pid <= 0, "traind started on a full disk");
    FILE *f = fopen(out, "r");
    char text[16384] = "";
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
    ck_assert_msg(strstr(text, "/jobs is not writable: No space left on "
                               "device") &&
                      strstr(text, "could not start: No space left on "
                                   "device"),
                  "%s", text);
    ck_assert_int_eq(stat(rec, &after), 0);
    ck_assert_int_eq(after.st_size, before.st_size);
    /* room again: it starts, with the job */
    ck_assert_int_eq(unlink(filler), 0);
    ck_assert_int_eq(th_restart(&H), 0);
    fd = th_connect(&H, NULL);
    json_t *j = th_show_job(fd, id);
    ck_assert_str_eq(th_job_state(j), "completed");
    json_decref(j);
    close(fd);
}
END_TEST

/* A bad image whose file name is not UTF-8 (Latin-1 "cafe" with an
 * accent): the failure's message, which names it, could not be put in
 * JSON, the trainer's report was lost and the failed job was recorded as
 * completed ("0 epochs, 0.0 samples/s, verdict (null)"); its "bad
 * sample" log line was missing from trainctl logs.  The name is written
 * with \xNN now, in both. */
START_TEST(test_bad_file_name_not_utf8)
{
    char data[300], bad[400];
    snprintf(data, sizeof data, "%s/latin", H.dir);
    td_test_make_folder(data, 2, 20, 24, 24);
    snprintf(bad, sizeof bad, "%s/class1/caf\xe9.jpg", data);
    td_test_write_file(bad, "\xff\xd8 not a JPEG", 12);
    json_t *spec = th_files_spec(data, 2);
    json_object_set_new(spec, "max_bad_ratio", json_real(0.01));
    int fd = th_connect(&H, NULL);
    int64_t id = th_submit(fd, spec);
    json_t *j = NULL;
    for (int i = 0; i < 1200; i++) {
        json_decref(j);
        j = th_show_job(fd, id);
        if (strcmp(th_job_state(j), "pending") != 0 &&
            strcmp(th_job_state(j), "running") != 0)
            break;
        usleep(50000);
    }
    const char *why = json_string_value(json_object_get(j, "reason"));
    ck_assert_msg(strcmp(th_job_state(j), "failed") == 0 && why &&
                      strstr(why, "class1/caf\\xe9.jpg"),
                  "%s: %s", th_job_state(j), why);
    json_decref(j);
    json_t *r = th_request(fd, "logs", json_pack("{s:I, s:i}", "job",
                                                 (json_int_t)id, "lines",
                                                 100000));
    json_t *lines = json_object_get(th_ok(r), "lines"), *l;
    size_t i;
    int named = 0;
    json_array_foreach(lines, i, l)
        named += strstr(json_string_value(l), "bad sample ") &&
                 strstr(json_string_value(l), "caf\\xe9.jpg");
    ck_assert_int_eq(named, 1);
    json_decref(r);
    close(fd);
}
END_TEST

/* ---- SIGTERM while a cancel is on its way, SIGTERM twice --------------------- */

/* Waits for the daemon to exit by itself: its exit status, 128 + the
 * signal that killed it, or -1 after ms. */
static int wait_exit(int ms)
{
    int st;
    for (int i = 0; i < ms / 20; i++) {
        if (waitpid(H.pid, &st, WNOHANG) == H.pid) {
            H.pid = 0;
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        }
        usleep(20000);
    }
    return -1;
}

/* A job whose steps take tens of ms (a 32-channel conv on 48 x 48 at
 * batch 128), running with a few steps done. */
static int64_t slow_job(int fd)
{
    json_t *spec = th_spec(1000, 0, 48, 32);
    json_object_set_new(spec, "batch_size", json_integer(128));
    int64_t id = th_submit(fd, spec);
    json_t *j = NULL;
    for (int i = 0; i < 1200; i++) {
        json_decref(j);
        j = th_show_job(fd, id);
        if (json_integer_value(json_object_get(j, "step")) >= 3)
            break;
        usleep(50000);
    }
    json_decref(j);
    return id;
}

/* A cancel acknowledged while the step is still running, then SIGTERM
 * before the step ends: the job ends cancelled as asked, and its reason
 * is still the cancel's ("cancelled by uid 0").  The shutdown wrote its
 * own note over the cancel's, so the job said "cancelled: daemon
 * shutdown", as if the daemon had cancelled it. */
START_TEST(test_cancel_then_sigterm_keeps_the_cancel)
{
    /* the SIGTERM comes while the cancelled step runs */
    int fd = th_connect(&H, NULL);
    int64_t id = slow_job(fd);
    json_t *r = th_job_request(fd, "cancel", id);
    ck_assert_ptr_nonnull(th_ok(r));
    json_decref(r);
    ck_assert_int_eq(kill(H.pid, SIGTERM), 0);
    close(fd);
    ck_assert_int_eq(wait_exit(30000), 0);
    ck_assert_int_eq(th_restart(&H), 0);
    fd = th_connect(&H, NULL);
    json_t *j = th_show_job(fd, id);
    const char *why = json_string_value(json_object_get(j, "reason"));
    ck_assert_msg(strcmp(th_job_state(j), "cancelled") == 0 && why &&
                      strstr(why, "cancelled by uid 0"),
                  "%s: %s", th_job_state(j), why);
    json_decref(j);
    close(fd);
}
END_TEST

/* SIGTERM twice in a row while a step runs: traind still finishes the
 * step, writes the job's checkpoint and exits 0; the job resumes from
 * there.  The first SIGTERM closed the signal handlers, so the second
 * killed traind mid-step (exit 143) and the job lost every step since its
 * last checkpoint. */
START_TEST(test_second_sigterm_still_checkpoints)
{
    int fd = th_connect(&H, NULL);
    int64_t id = slow_job(fd);
    close(fd);
    ck_assert_int_eq(kill(H.pid, SIGTERM), 0);
    usleep(2000);
    ck_assert_int_eq(kill(H.pid, SIGTERM), 0);
    ck_assert_int_eq(wait_exit(60000), 0);
    ck_assert_int_eq(th_restart(&H), 0);
    fd = th_connect(&H, NULL);
    int interrupted = th_log_count(fd, id, "interrupted by a daemon "
                                           "shutdown at step ");
    ck_assert_msg(interrupted == 1, "%d lines say the job was interrupted",
                  interrupted);
    json_t *j = th_show_job(fd, id);
    json_t *ck = json_object_get(j, "checkpoints");
    ck_assert_int_ge(json_array_size(ck), 1);
    ck_assert_int_ge(json_integer_value(json_object_get(
                         json_array_get(ck, json_array_size(ck) - 1), "step")),
                     3);
    json_decref(j);
    json_decref(th_job_request(fd, "cancel", id));
    close(fd);
}
END_TEST

/* ---- records read back in id order, a duplicate id left out ---------------- */

/* The jobs come back in id order whatever the directory's order, a second
 * record with an id already read is left out, and the next job gets the
 * next id.  (The load finds ids in a set and sorts once: it looked each
 * one up in the job table and inserted it into the sorted list, time
 * quadratic in the records.) */
START_TEST(test_records_back_in_id_order_without_duplicates)
{
    int fd = th_connect(&H, NULL);
    int64_t ids[5];
    for (int i = 0; i < 5; i++)
        ids[i] = th_submit(fd, th_tiny_spec(1, 0));
    for (int i = 0; i < 5; i++)
        ck_assert(th_wait_state(fd, ids[i], "completed", 60000));
    close(fd);
    ck_assert_int_eq(th_stop(&H), 0);
    /* Another name for job 3's record; no row cache (every record is
     * read in full). */
    td_test_sh(H.state, "cp jobs/%lld.json jobs/000%lld.json && "
               "rm -f job-rows.cache", (long long)ids[2],
               (long long)ids[2]);
    ck_assert_int_eq(th_restart(&H), 0);
    fd = th_connect(&H, NULL);
    json_t *r = th_request(fd, "list", NULL);
    json_t *jobs = json_object_get(th_ok(r), "jobs");
    ck_assert_int_eq(json_array_size(jobs), 5);
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(json_integer_value(json_object_get(
                             json_array_get(jobs, (size_t)i), "id")),
                         ids[i]);
    json_decref(r);
    ck_assert_int_eq(th_submit(fd, th_tiny_spec(1, 0)), ids[4] + 1);
    close(fd);
}
END_TEST

static Suite *restarts_suite(void)
{
    const td_tcase tcs[] = {
        {"eval", setup, teardown, NULL,
         {test_kill9_during_eval_job_runs_again}},
        {"names", setup, teardown, NULL, {test_bad_file_name_not_utf8}},
        {"order", setup, teardown, NULL,
         {test_records_back_in_id_order_without_duplicates}},
        {"cancel", setup, teardown, NULL,
         {test_cancel_then_sigterm_keeps_the_cancel,
          test_second_sigterm_still_checkpoints}},
        {"full", setup, teardown_mount, th_tmpfs_unmount_listed,
         {test_full_state_dir_at_start_refused}},
    };
    return td_suite_from("restarts", tcs, sizeof tcs / sizeof tcs[0]);
}

TD_TEST_MAIN(restarts_suite)
