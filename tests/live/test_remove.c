/* test_remove.c - `remove` (trainctl rm) against a live traind: an ended
 * job's record, log and checkpoints leave the disk and the table, for
 * good (a restart does not bring it back, its id is not given again);
 * jobs not ended, jobs another job still reads and other users' jobs are
 * refused; a removal a stop interrupted is finished at the next start. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon_harness.h"
#include "tdtest.h"

TH_FIXTURE(H)

#define NOBODY 65534

/* Whether state_dir/<where>/<id><ext> exists. */
static int exists(const char *where, long long id, const char *ext)
{
    char path[1024];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s/%lld%s", H.state, where, id, ext);
    return stat(path, &st) == 0;
}

/* A completed job with checkpoints (and so a log). */
static int64_t completed_job(int fd)
{
    int64_t id = th_submit(fd, th_tiny_spec(1, 40));
    ck_assert(th_wait_state(fd, id, "completed", 60000));
    return id;
}

static json_t *remove_job(int fd, int64_t id)
{
    json_t *r = th_job_request(fd, "remove", id);
    ck_assert_ptr_nonnull(r);
    return r;
}

static void assert_error(json_t *r, const char *cls, const char *text)
{
    char *s = json_dumps(r, 0);
    ck_assert_msg(th_err_class(r) && strcmp(th_err_class(r), cls) == 0,
                  "%s", s);
    const char *desc = json_string_value(
        json_object_get(json_object_get(r, "error"), "desc"));
    ck_assert_msg(desc && strstr(desc, text), "%s", s);
    free(s);
    json_decref(r);
}

START_TEST(test_ended_job_leaves_disk_and_table)
{
    int fd = th_connect(&H, NULL);
    int64_t id = completed_job(fd);
    ck_assert(exists("jobs", id, ".json"));
    ck_assert(exists("jobs", id, ".log"));
    ck_assert(exists("checkpoints", id, ""));
    json_t *r = remove_job(fd, id);
    json_t *ok = th_ok(r);
    ck_assert_msg(ok, "%s", json_dumps(r, 0));
    ck_assert_int_eq(json_integer_value(json_object_get(ok, "job")), id);
    ck_assert(json_is_true(json_object_get(ok, "removed")));
    /* the record, the log and at least one checkpoint */
    ck_assert_int_gt(json_integer_value(json_object_get(ok, "freed_bytes")),
                     1000);
    json_decref(r);
    ck_assert(!exists("jobs", id, ".json"));
    ck_assert(!exists("jobs", id, ".log"));
    ck_assert(!exists("jobs", id, ".removing"));
    ck_assert(!exists("checkpoints", id, ""));
    assert_error(th_job_request(fd, "show", id), "not_found", "no job");
    assert_error(remove_job(fd, id), "not_found", "no job");
    r = th_request(fd, "list", NULL);
    ck_assert_int_eq(json_array_size(json_object_get(th_ok(r), "jobs")), 0);
    json_decref(r);
    close(fd);
    /* Gone for a restarted daemon too, and its id is not given again
     * although it was the highest. */
    ck_assert_int_eq(th_restart(&H), 0);
    fd = th_connect(&H, NULL);
    assert_error(th_job_request(fd, "show", id), "not_found", "no job");
    int64_t next = th_submit(fd, th_tiny_spec(1, 0));
    ck_assert_int_eq(next, id + 1);
    ck_assert(th_wait_state(fd, next, "completed", 60000));
    close(fd);
}
END_TEST

START_TEST(test_jobs_not_ended_are_refused)
{
    int fd = th_connect(&H, NULL);
    int64_t run = th_submit(fd, th_tiny_spec(100000, 0));
    int64_t wait = th_submit(fd, th_tiny_spec(1, 0));
    ck_assert(th_wait_state(fd, run, "running", 30000));
    assert_error(remove_job(fd, run), "conflict",
                 "is running; only an ended job");
    assert_error(remove_job(fd, wait), "conflict", "is pending");
    json_decref(th_job_request(fd, "cancel", wait));
    json_decref(th_job_request(fd, "cancel", run));
    ck_assert(th_wait_state(fd, run, "cancelled", 30000));
    json_t *r = remove_job(fd, run);
    ck_assert_msg(th_ok(r), "%s", json_dumps(r, 0));
    json_decref(r);
    r = remove_job(fd, wait);
    ck_assert_msg(th_ok(r), "%s", json_dumps(r, 0));
    json_decref(r);
    close(fd);
}
END_TEST

/* A pending job whose init is one of the job's checkpoints (what trainctl
 * extend submits) keeps it. */
START_TEST(test_checkpoints_another_job_reads_are_kept)
{
    int fd = th_connect(&H, NULL);
    int64_t base = completed_job(fd);
    json_t *r = th_job_request(fd, "show", base);
    json_t *cks = json_object_get(json_object_get(th_ok(r), "job"),
                                  "checkpoints");
    ck_assert_int_gt(json_array_size(cks), 0);
    const char *ck = json_string_value(json_object_get(
        json_array_get(cks, json_array_size(cks) - 1), "path"));
    ck_assert_ptr_nonnull(ck);
    json_t *spec = th_tiny_spec(1, 0);
    json_object_set_new(spec, "init", json_string(ck));
    json_decref(r);
    int64_t blocker = th_submit(fd, th_tiny_spec(100000, 0));
    ck_assert(th_wait_state(fd, blocker, "running", 30000));
    int64_t child = th_submit(fd, spec); /* pending behind the blocker */
    char want[64];
    snprintf(want, sizeof want, "job %lld is pending and reads a "
             "checkpoint of job %lld", (long long)child, (long long)base);
    assert_error(remove_job(fd, base), "conflict", want);
    json_decref(th_job_request(fd, "cancel", child));
    json_decref(th_job_request(fd, "cancel", blocker));
    r = remove_job(fd, base);
    ck_assert_msg(th_ok(r), "%s", json_dumps(r, 0));
    json_decref(r);
    ck_assert(th_wait_state(fd, blocker, "cancelled", 30000));
    close(fd);
}
END_TEST

START_TEST(test_other_users_job_is_refused)
{
    if (getuid() != 0) {
        printf("skipped: needs root to connect as another user\n");
        return;
    }
    int fd = th_connect(&H, NULL);
    int64_t id = th_submit(fd, th_tiny_spec(1, 0));
    ck_assert(th_wait_state(fd, id, "completed", 60000));
    int nfd = th_connect_as(&H, NOBODY, NOBODY);
    ck_assert_int_ge(nfd, 0);
    assert_error(remove_job(nfd, id), "permission_denied",
                 "only that user or root may remove it");
    close(nfd);
    ck_assert(exists("jobs", id, ".json"));
    close(fd);
}
END_TEST

/* A stop between the record's rename and the last file: the next start
 * finishes the removal (what remove.c does first, done by hand here). */
START_TEST(test_interrupted_removal_finished_at_start)
{
    int fd = th_connect(&H, NULL);
    int64_t id = completed_job(fd);
    close(fd);
    ck_assert_int_eq(th_stop(&H), 0);
    char from[1024], to[1024];
    snprintf(from, sizeof from, "%s/jobs/%lld.json", H.state, (long long)id);
    snprintf(to, sizeof to, "%s/jobs/%lld.removing", H.state, (long long)id);
    ck_assert_int_eq(rename(from, to), 0);
    ck_assert_int_eq(th_restart(&H), 0);
    ck_assert(!exists("jobs", id, ".removing"));
    ck_assert(!exists("jobs", id, ".log"));
    ck_assert(!exists("checkpoints", id, ""));
    fd = th_connect(&H, NULL);
    assert_error(th_job_request(fd, "show", id), "not_found", "no job");
    ck_assert_int_eq(th_submit(fd, th_tiny_spec(1, 0)), id + 1);
    close(fd);
}
END_TEST

#define CLI(out, err, ...)                                                   \
    th_cli(&H, (out), (err), (const char *const[]){__VA_ARGS__, NULL})

/* trainctl rm: several jobs at once, what it prints and its exit codes. */
START_TEST(test_trainctl_rm)
{
    int fd = th_connect(&H, NULL);
    int64_t a = completed_job(fd), b = completed_job(fd);
    int64_t run = th_submit(fd, th_tiny_spec(100000, 0));
    ck_assert(th_wait_state(fd, run, "running", 30000));
    char ida[24], idb[24], idr[24];
    snprintf(ida, sizeof ida, "%lld", (long long)a);
    snprintf(idb, sizeof idb, "%lld", (long long)b);
    snprintf(idr, sizeof idr, "%lld", (long long)run);
    char *out, *err;
    /* show says what a job's checkpoints take, which rm frees */
    ck_assert_int_eq(CLI(&out, NULL, "show", ida), 0);
    ck_assert_msg(strstr(out, " on disk)\n") && strstr(out, "(step 40, ") &&
                      strstr(out, " kB)\n"), "%s", out);
    free(out);
    /* one removed, one refused: exit 1, one JSON object */
    ck_assert_int_eq(CLI(&out, &err, "rm", ida, idr, "--json"), 1);
    json_t *o = json_loads(out, 0, NULL);
    ck_assert_msg(o, "%s", out);
    json_t *rm = json_object_get(o, "removed");
    json_t *ref = json_object_get(o, "refused");
    ck_assert_int_eq(json_array_size(rm), 1);
    ck_assert_int_eq(json_integer_value(json_object_get(
                         json_array_get(rm, 0), "job")), a);
    ck_assert_int_eq(json_array_size(ref), 1);
    ck_assert_str_eq(json_string_value(json_object_get(
                         json_object_get(json_array_get(ref, 0), "error"),
                         "class")), "conflict");
    ck_assert_int_eq(json_integer_value(json_object_get(o, "freed_bytes")),
                     json_integer_value(json_object_get(json_array_get(rm, 0),
                                                        "freed_bytes")));
    json_decref(o);
    free(out);
    free(err);
    /* people's output: a line per job, the refusal on stderr */
    ck_assert_int_eq(CLI(&out, &err, "rm", idb, idr), 1);
    ck_assert_msg(strstr(out, "removed (") && strstr(out, " freed)") &&
                      strstr(out, "1 of 2 jobs removed"), "%s", out);
    ck_assert_msg(strstr(err, "trainctl rm: job") && strstr(err, "is running"),
                  "%s", err);
    free(out);
    free(err);
    ck_assert_int_eq(CLI(NULL, NULL, "rm", idb), 1); /* gone: no job */
    ck_assert_int_eq(CLI(NULL, NULL, "rm"), 2);
    ck_assert_int_eq(CLI(NULL, NULL, "rm", "x"), 2);
    /* --force: the running job and one waiting behind it are cancelled,
     * waited for and removed */
    int64_t wait = th_submit(fd, th_tiny_spec(1, 0));
    char idw[24];
    snprintf(idw, sizeof idw, "%lld", (long long)wait);
    ck_assert_int_eq(CLI(&out, &err, "rm", "-f", idr, idw), 0);
    ck_assert_msg(strstr(out, "2 of 2 jobs removed"), "%s / %s", out, err);
    free(out);
    free(err);
    assert_error(th_job_request(fd, "show", run), "not_found", "no job");
    assert_error(th_job_request(fd, "show", wait), "not_found", "no job");
    close(fd);
}
END_TEST

/* Sets job id's end in its record to `days` ago (the daemon stopped). */
static void ended_days_ago(int64_t id, double days)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/jobs/%lld.json", H.state, (long long)id);
    json_t *rec = json_load_file(path, 0, NULL);
    ck_assert_ptr_nonnull(rec);
    double ended = json_real_value(json_object_get(rec, "ended"));
    ck_assert(ended > 0);
    json_object_set_new(rec, "ended", json_real(ended - days * 86400.0));
    ck_assert_int_eq(json_dump_file(rec, path, JSON_COMPACT), 0);
    json_decref(rec);
}

/* Polls (up to 20 s) until job id is gone from the table and its record,
 * log and checkpoints from the disk (they go on the threadpool, after it
 * leaves the table). */
static int gone(int fd, int64_t id)
{
    for (int i = 0; i < 400; i++) {
        json_t *r = th_job_request(fd, "show", id);
        int nf = th_err_class(r) && strcmp(th_err_class(r), "not_found") == 0;
        json_decref(r);
        if (nf && !exists("jobs", id, ".json") && !exists("jobs", id, ".log") &&
            !exists("checkpoints", id, ""))
            return 1;
        usleep(50000);
    }
    return 0;
}

/* ended_job_retention_days: an ended job older than the setting leaves
 * the disk and the table (record, log, checkpoints) without a `remove`
 * once the setting is set, and at start; younger ones, and one whose checkpoint a
 * pending job reads, stay (until nothing reads it). */
START_TEST(test_retention_removes_old_ended_jobs)
{
    int fd = th_connect(&H, NULL);
    int64_t old = completed_job(fd), mid = completed_job(fd);
    int64_t read = completed_job(fd), fresh = completed_job(fd);
    close(fd);
    ck_assert_int_eq(th_stop(&H), 0);
    ended_days_ago(old, 40);
    ended_days_ago(mid, 10);
    ended_days_ago(read, 40);
    ck_assert_int_eq(th_restart(&H), 0);
    fd = th_connect(&H, NULL);
    /* A pending job reads `read`'s checkpoint (behind a running one). */
    json_t *r = th_job_request(fd, "show", read);
    json_t *cks = json_object_get(json_object_get(th_ok(r), "job"),
                                  "checkpoints");
    json_t *spec = th_tiny_spec(1, 0);
    json_object_set_new(spec, "init", json_string(json_string_value(
        json_object_get(json_array_get(cks, json_array_size(cks) - 1),
                        "path"))));
    json_decref(r);
    int64_t blocker = th_submit(fd, th_tiny_spec(100000, 0));
    ck_assert(th_wait_state(fd, blocker, "running", 30000));
    int64_t child = th_submit(fd, spec);
    th_config_set_int(fd, "ended_job_retention_days", 30);
    ck_assert_msg(gone(fd, old), "job %lld, ended 40 days ago, is still "
                  "there", (long long)old);
    ck_assert(exists("jobs", mid, ".json"));
    ck_assert(exists("jobs", read, ".json")); /* the child reads it */
    ck_assert(exists("checkpoints", read, ""));
    ck_assert(th_log_has(fd, child, "submitted"));
    /* The setting lower: 10 days is past 5. */
    json_decref(th_job_request(fd, "cancel", child));
    json_decref(th_job_request(fd, "cancel", blocker));
    ck_assert(th_wait_state(fd, blocker, "cancelled", 30000));
    th_config_set_int(fd, "ended_job_retention_days", 5);
    ck_assert(gone(fd, mid));
    ck_assert(gone(fd, read)); /* nothing reads it now */
    r = th_job_request(fd, "show", fresh);
    ck_assert_ptr_nonnull(th_ok(r));
    json_decref(r);
    ck_assert(exists("checkpoints", fresh, ""));
    close(fd);
    /* At start, from the config file (a later --config wins). */
    ck_assert_int_eq(th_stop(&H), 0);
    ended_days_ago(fresh, 6);
    static char conf[200];
    static const char *extra[3] = {"--config", conf, NULL};
    snprintf(conf, sizeof conf, "%s/retention.conf", H.dir);
    FILE *cf = fopen(conf, "w");
    ck_assert_ptr_nonnull(cf);
    fputs("ended_job_retention_days = 5\n", cf);
    ck_assert_int_eq(fclose(cf), 0);
    H.extra = extra;
    ck_assert_int_eq(th_restart(&H), 0);
    fd = th_connect(&H, NULL);
    ck_assert_msg(gone(fd, fresh), "job %lld, ended 6 days ago, is still "
                  "there after a start with 5 days", (long long)fresh);
    close(fd);
    H.extra = NULL;
}
END_TEST

static Suite *remove_suite(void)
{
    Suite *s = suite_create("remove");
    TCase *tc = tcase_create("remove");
    tcase_set_timeout(tc, 240);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_ended_job_leaves_disk_and_table);
    tcase_add_test(tc, test_jobs_not_ended_are_refused);
    tcase_add_test(tc, test_checkpoints_another_job_reads_are_kept);
    tcase_add_test(tc, test_other_users_job_is_refused);
    tcase_add_test(tc, test_interrupted_removal_finished_at_start);
    tcase_add_test(tc, test_trainctl_rm);
    tcase_add_test(tc, test_retention_removes_old_ended_jobs);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(remove_suite)
