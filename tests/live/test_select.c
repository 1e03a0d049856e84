/* test_select.c - trainctl's job selection against a live traind:
 * `queue --last/--mine/--active/--all` and its default hiding of old
 * ended jobs, `rm --state/--ended-before/--mine/--dry-run` (the bulk
 * remove of ended jobs), and their usage errors.  The jobs' states come
 * from what they did (completed, cancelled, failed at start), never from
 * timing: ages are selected with dates far in the past or future. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon_harness.h"
#include "jpeggen.h"
#include "tdtest.h"

TH_FIXTURE(H)

#define NOBODY 65534

#define CLI(out, err, ...)                                                   \
    th_cli(&H, (out), (err), (const char *const[]){__VA_ARGS__, NULL})

/* A job that trains 100000 epochs: running until cancelled. */
static int64_t running_job(int fd)
{
    int64_t id = th_submit(fd, th_tiny_spec(100000, 0));
    ck_assert(th_wait_state(fd, id, "running", 30000));
    return id;
}

static int64_t completed_job(int fd)
{
    int64_t id = th_submit(fd, th_tiny_spec(1, 40));
    ck_assert(th_wait_state(fd, id, "completed", 60000));
    return id;
}

static void cancel(int fd, int64_t id, const char *then)
{
    json_t *r = th_job_request(fd, "cancel", id);
    ck_assert_msg(th_ok(r), "%s", json_dumps(r, 0));
    json_decref(r);
    ck_assert(th_wait_state(fd, id, then, 30000));
}

/* Two ended jobs in one go, in this order: *cancelled (a running job
 * cancelled) and *failed (an ImageFolder job queued behind it whose
 * folder was gone when it started). */
static void cancelled_and_failed(int fd, int64_t *cancelled, int64_t *failed)
{
    char ds[256];
    snprintf(ds, sizeof ds, "%s/ds", H.dir);
    td_test_make_folder(ds, 2, 4, 8, 8);
    *cancelled = running_job(fd);
    *failed = th_submit(fd, th_files_spec(ds, 1));
    td_test_sh(H.dir, "rm -r ds");
    cancel(fd, *cancelled, "cancelled");
    ck_assert(th_wait_state(fd, *failed, "failed", 30000));
}

/* The job ids of a queue table (the lines that start with a number),
 * in order, into ids; how many. */
static int table_ids(const char *out, long long *ids, int cap)
{
    int n = 0;
    for (const char *p = out; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : p) {
        long long id;
        if (*p >= '0' && *p <= '9' && sscanf(p, "%lld", &id) == 1 && n < cap)
            ids[n++] = id;
    }
    return n;
}

/* The "job" (rm) or "id" (queue) numbers of the objects of array key of
 * a JSON object printed on out, into ids; how many. */
static int json_ids(const char *out, const char *key, const char *field,
                    long long *ids, int cap)
{
    json_t *o = json_loads(out, 0, NULL);
    ck_assert_msg(json_is_object(o), "not a JSON object: %s", out);
    json_t *a = json_object_get(o, key);
    ck_assert_msg(json_is_array(a), "no %s: %s", key, out);
    int n = 0;
    size_t i;
    json_t *v;
    json_array_foreach(a, i, v) {
        if (n < cap)
            ids[n++] = json_integer_value(json_object_get(v, field));
    }
    json_decref(o);
    return n;
}

/* Runs trainctl ARGS (a queue), expects exit 0, and returns the ids of
 * its table in ids; how many. */
static int queue_ids(long long *ids, int cap, const char *const *args)
{
    char *out, *err;
    int rc = th_cli(&H, &out, &err, args);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err);
    int n = table_ids(out, ids, cap);
    free(out);
    free(err);
    return n;
}

#define QUEUE(ids, ...)                                                      \
    queue_ids((ids), 64, (const char *const[]){"queue", __VA_ARGS__, NULL})

static int listed(int fd)
{
    json_t *r = th_request(fd, "list", NULL);
    int n = (int)json_array_size(json_object_get(th_ok(r), "jobs"));
    json_decref(r);
    return n;
}

START_TEST(test_queue_last_mine_active)
{
    int fd = th_connect(&H, NULL);
    int64_t c1 = completed_job(fd), can, fail;
    cancelled_and_failed(fd, &can, &fail);
    int64_t c2 = completed_job(fd);
    int64_t run = running_job(fd);
    int64_t other = 0;
    if (getuid() == 0) { /* another user's job, pending behind run */
        int nfd = th_connect_as(&H, NOBODY, NOBODY);
        ck_assert_int_ge(nfd, 0);
        other = th_submit(nfd, th_tiny_spec(1, 0));
        close(nfd);
    } else {
        printf("skipped: --mine against another user's job needs root\n");
    }
    long long ids[64];
    /* --last 2: exactly the two newest, oldest first */
    ck_assert_int_eq(QUEUE(ids, "--last", "2"), 2);
    ck_assert_int_eq(ids[0], other ? run : c2);
    ck_assert_int_eq(ids[1], other ? other : run);
    char *out;
    ck_assert_int_eq(CLI(&out, NULL, "ls", "--last", "2", "--json"), 0);
    ck_assert_int_eq(json_ids(out, "jobs", "id", ids, 64), 2);
    ck_assert_int_eq(ids[1], other ? other : run);
    free(out);
    /* --active: pending, running, suspended only */
    int n = QUEUE(ids, "--active");
    ck_assert_int_eq(n, other ? 2 : 1);
    ck_assert_int_eq(ids[0], run);
    /* --mine leaves the other user's job out */
    n = QUEUE(ids, "--mine", "--active");
    ck_assert_int_eq(n, 1);
    ck_assert_int_eq(ids[0], run);
    n = QUEUE(ids, "--mine");
    ck_assert_int_eq(n, 5);
    ck_assert_int_eq(ids[0], c1);
    ck_assert_int_eq(ids[4], run);
    /* with --state, and --last of what the others selected */
    n = QUEUE(ids, "--state", "completed", "--last", "1");
    ck_assert_int_eq(n, 1);
    ck_assert_int_eq(ids[0], c2);
    n = QUEUE(ids, "--state", "failed", "--mine");
    ck_assert_int_eq(n, 1);
    ck_assert_int_eq(ids[0], fail);
    /* no option: every job, as before (few ended jobs hide none) */
    ck_assert_int_eq(QUEUE(ids, "--all"), other ? 6 : 5);
    ck_assert_int_eq(CLI(&out, NULL, "queue", "--json"), 0);
    ck_assert_int_eq(json_ids(out, "jobs", "id", ids, 64), other ? 6 : 5);
    ck_assert_int_eq(ids[1], can);
    free(out);
    if (other)
        cancel(fd, other, "cancelled");
    cancel(fd, run, "cancelled");
    close(fd);
}
END_TEST

/* Of more than 20 ended jobs the newest 20 are shown by default, and a
 * line says how many are hidden; every job not yet ended is shown. */
START_TEST(test_queue_hides_old_ended_jobs)
{
    int fd = th_connect(&H, NULL);
    int64_t run = running_job(fd), first = 0;
    for (int i = 0; i < 23; i++) { /* cancelled while pending */
        int64_t id = th_submit(fd, th_tiny_spec(1, 0));
        if (!first)
            first = id;
        cancel(fd, id, "cancelled");
    }
    char *out;
    long long ids[64];
    ck_assert_int_eq(CLI(&out, NULL, "queue"), 0);
    ck_assert_msg(strstr(out, "\n(3 older ended jobs hidden; --all shows "
                              "them)\n"), "%s", out);
    int n = table_ids(out, ids, 64);
    ck_assert_int_eq(n, 21);
    ck_assert_int_eq(ids[0], run);         /* older than them, not ended */
    ck_assert_int_eq(ids[1], first + 3);   /* the 3 oldest ended hidden */
    ck_assert_int_eq(ids[20], first + 22);
    free(out);
    /* --all, --state, --last and --json hide none */
    ck_assert_int_eq(CLI(&out, NULL, "queue", "--all"), 0);
    ck_assert_msg(!strstr(out, "hidden"), "%s", out);
    ck_assert_int_eq(table_ids(out, ids, 64), 24);
    free(out);
    ck_assert_int_eq(QUEUE(ids, "--state", "cancelled"), 23);
    ck_assert_int_eq(QUEUE(ids, "--last", "22"), 22);
    ck_assert_int_eq(ids[0], first + 1);
    ck_assert_int_eq(CLI(&out, NULL, "queue", "--json"), 0);
    ck_assert_int_eq(json_ids(out, "jobs", "id", ids, 64), 24);
    free(out);
    /* --active: the running job alone */
    ck_assert_int_eq(CLI(&out, NULL, "queue", "--active"), 0);
    ck_assert_int_eq(table_ids(out, ids, 64), 1);
    ck_assert_msg(!strstr(out, "hidden"), "%s", out);
    free(out);
    cancel(fd, run, "cancelled");
    close(fd);
}
END_TEST

START_TEST(test_queue_usage_errors)
{
    static const char *const cases[][6] = {
        {"queue", "--last", "0"},
        {"queue", "--last", "x"},
        {"queue", "--last", "-3"},
        {"ls", "--last", "2", "--all"},
        {"queue", "--active", "--state", "failed"},
        {"queue", "--mine", "extra"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out, *err;
        int rc = th_cli(&H, &out, &err, cases[i]);
        ck_assert_msg(rc == 2 && out[0] == '\0' && strstr(err, "--help"),
                      "%s %s: exit %d, %s", cases[i][1], cases[i][2], rc,
                      err);
        free(out);
        free(err);
    }
}
END_TEST

/* Whether job id is still in the daemon's table. */
static int has_job(int fd, int64_t id)
{
    json_t *r = th_job_request(fd, "show", id);
    int ok = th_ok(r) != NULL;
    json_decref(r);
    return ok;
}

START_TEST(test_rm_selectors)
{
    int fd = th_connect(&H, NULL);
    int64_t c1 = completed_job(fd), can, f1, can2, f2;
    cancelled_and_failed(fd, &can, &f1);
    cancelled_and_failed(fd, &can2, &f2);
    int64_t c2 = completed_job(fd);
    int64_t run = running_job(fd);
    char *out, *err;
    long long ids[64];
    /* --dry-run: lists the failed jobs, removes nothing */
    ck_assert_int_eq(CLI(&out, &err, "rm", "--state", "failed",
                         "--dry-run"), 0);
    char want[96];
    snprintf(want, sizeof want, "job %lld (tiny, failed ", (long long)f1);
    ck_assert_msg(strstr(out, want) && strstr(out, "would be removed") &&
                      strstr(out, "2 jobs would be removed"), "%s", out);
    snprintf(want, sizeof want, "job %lld (", (long long)c1);
    ck_assert_msg(!strstr(out, want), "%s", out);
    free(out);
    free(err);
    ck_assert_int_eq(listed(fd), 7);
    ck_assert_int_eq(CLI(&out, NULL, "rm", "--state", "failed", "--dry-run",
                         "--json"), 0);
    ck_assert_int_eq(json_ids(out, "removed", "job", ids, 64), 2);
    ck_assert_int_eq(ids[0], f1);
    ck_assert_int_eq(ids[1], f2);
    ck_assert_msg(strstr(out, "\"dry_run\":true"), "%s", out);
    free(out);
    ck_assert_int_eq(listed(fd), 7);
    /* nothing ended before 2000: nothing removed, exit 0 */
    ck_assert_int_eq(CLI(&out, NULL, "rm", "--ended-before", "2000-01-01",
                         "--json"), 0);
    ck_assert_str_eq(out, "{\"removed\":[],\"refused\":[],"
                          "\"freed_bytes\":0}\n");
    free(out);
    ck_assert_int_eq(CLI(&out, NULL, "rm", "--ended-before", "30d"), 0);
    ck_assert_msg(strstr(out, "nothing to remove"), "%s", out);
    free(out);
    /* --state failed removes the failed jobs and only them */
    ck_assert_int_eq(CLI(&out, &err, "rm", "--state", "failed"), 0);
    ck_assert_msg(strstr(out, "2 of 2 jobs removed"), "%s / %s", out, err);
    free(out);
    free(err);
    ck_assert(!has_job(fd, f1) && !has_job(fd, f2));
    ck_assert(has_job(fd, c1) && has_job(fd, can) && has_job(fd, can2) &&
              has_job(fd, c2) && has_job(fd, run));
    /* --state cancelled with a date in the future, as JSON */
    ck_assert_int_eq(CLI(&out, NULL, "rm", "--state", "cancelled",
                         "--ended-before", "2999-01-01T00:00Z", "--json"),
                     0);
    ck_assert_int_eq(json_ids(out, "removed", "job", ids, 64), 2);
    ck_assert_int_eq(ids[0], can);
    ck_assert_int_eq(ids[1], can2);
    free(out);
    /* --mine: every ended job of mine; the running one stays */
    ck_assert_int_eq(CLI(&out, NULL, "rm", "--mine", "--json"), 0);
    ck_assert_int_eq(json_ids(out, "removed", "job", ids, 64), 2);
    ck_assert_int_eq(ids[0], c1);
    ck_assert_int_eq(ids[1], c2);
    free(out);
    ck_assert_int_eq(listed(fd), 1);
    ck_assert(has_job(fd, run));
    cancel(fd, run, "cancelled");
    close(fd);
}
END_TEST

/* A bulk remove as root takes every user's ended jobs unless --mine; a
 * job another job still reads is refused (exit 1), the rest removed. */
START_TEST(test_rm_selectors_other_users_and_refusals)
{
    if (!th_need_root())
        return;
    int fd = th_connect(&H, NULL);
    int nfd = th_connect_as(&H, NOBODY, NOBODY);
    ck_assert_int_ge(nfd, 0);
    int64_t theirs = th_submit(nfd, th_tiny_spec(1, 0));
    ck_assert(th_wait_state(fd, theirs, "completed", 60000));
    close(nfd);
    int64_t base = completed_job(fd), mine = completed_job(fd);
    /* a pending job reading base's newest checkpoint */
    json_t *job = th_show_job(fd, base);
    json_t *cks = json_object_get(job, "checkpoints");
    ck_assert_int_gt(json_array_size(cks), 0);
    json_t *spec = th_tiny_spec(1, 0);
    json_object_set(spec, "init", json_object_get(json_array_get(
                                      cks, json_array_size(cks) - 1), "path"));
    json_decref(job);
    int64_t run = running_job(fd);
    int64_t child = th_submit(fd, spec);
    char *out, *err;
    long long ids[64];
    ck_assert_int_eq(CLI(&out, &err, "rm", "--mine", "--state", "completed",
                         "--json"), 1);
    ck_assert_int_eq(json_ids(out, "removed", "job", ids, 64), 1);
    ck_assert_int_eq(ids[0], mine);
    ck_assert_int_eq(json_ids(out, "refused", "job", ids, 64), 1);
    ck_assert_int_eq(ids[0], base);
    ck_assert_msg(strstr(out, "\"conflict\""), "%s", out);
    free(out);
    free(err);
    ck_assert(has_job(fd, theirs) && has_job(fd, base));
    cancel(fd, child, "cancelled");
    /* without --mine, root's selection is every user's */
    ck_assert_int_eq(CLI(&out, &err, "rm", "--state", "completed"), 0);
    ck_assert_msg(strstr(out, "2 of 2 jobs removed"), "%s / %s", out, err);
    free(out);
    free(err);
    ck_assert(!has_job(fd, theirs) && !has_job(fd, base));
    ck_assert(has_job(fd, child) && has_job(fd, run));
    cancel(fd, run, "cancelled");
    close(fd);
}
END_TEST

START_TEST(test_rm_usage_errors)
{
    static const struct {
        const char *argv[8];
        const char *says;
    } cases[] = {
        {{"rm"}, "name the jobs to remove"},
        {{"rm", "--json"}, "name the jobs to remove"},
        {{"rm", "--state", "running"}, "--state: expected completed"},
        {{"rm", "--state", "bogus", "--dry-run"}, "--state"},
        {{"rm", "3", "--state", "failed"}, "give one or the other"},
        {{"rm", "3", "--dry-run"}, "--dry-run goes with the selectors"},
        {{"rm", "--mine", "-f"}, "--force goes with JOB ids"},
        {{"rm", "--ended-before", "7x"}, "--ended-before: expected"},
        {{"rm", "--ended-before", "-1d"}, "--ended-before"},
        {{"rm", "--ended-before", "2026-13-01"}, "--ended-before"},
        {{"rm", "--ended-before", "26-11-01"}, "--ended-before"},
        {{"rm", "--ended-before"}, "--ended-before needs a value"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out, *err;
        int rc = th_cli(&H, &out, &err, cases[i].argv);
        ck_assert_msg(rc == 2 && out[0] == '\0' &&
                          strstr(err, cases[i].says),
                      "rm %s: exit %d, stdout %s, stderr %s",
                      cases[i].argv[1] ? cases[i].argv[1] : "", rc, out, err);
        free(out);
        free(err);
    }
}
END_TEST

static Suite *select_suite(void)
{
    Suite *s = suite_create("select");
    TCase *tc = tcase_create("select");
    tcase_set_timeout(tc, 240);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_queue_last_mine_active);
    tcase_add_test(tc, test_queue_hides_old_ended_jobs);
    tcase_add_test(tc, test_queue_usage_errors);
    tcase_add_test(tc, test_rm_selectors);
    tcase_add_test(tc, test_rm_selectors_other_users_and_refusals);
    tcase_add_test(tc, test_rm_usage_errors);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(select_suite)
