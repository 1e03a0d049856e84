/* test_nonroot.c - a daemon that is not root (`traind` run by a user for
 * themselves, or a unit with User=): it cannot take on a submitter's
 * identity, so it checks each user-named path's permission bits for the
 * submitter (daemon/access.c), and a path it cannot read itself is
 * refused at submit, not when the job starts.
 *
 * The daemon runs as nobody (65534); the other user is uid 1 (Debian's
 * `daemon`).  Needs root to set that up; elsewhere it says so and passes
 * without checking. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/clock.h"
#include "daemon_harness.h"
#include "jpeggen.h"
#include "tdtest.h"

#define NOBODY 65534
#define OTHER 1

static td_harness H;
static char pub[256], priv[256], rootonly[256];

static void setup(void)
{
    if (getuid() != 0)
        return;
    ck_assert_int_eq(th_start_as(&H, NOBODY, NOBODY, NULL), 0);
    /* pub: everyone may read; priv: only the daemon's user; rootonly:
     * not even the daemon. */
    snprintf(pub, sizeof pub, "%s/pub", H.dir);
    snprintf(priv, sizeof priv, "%s/priv", H.dir);
    snprintf(rootonly, sizeof rootonly, "%s/rootonly", H.dir);
    td_test_make_folder(pub, 2, 6, 8, 8);
    td_test_make_folder(priv, 2, 6, 8, 8);
    td_test_make_folder(rootonly, 2, 6, 8, 8);
    td_test_sh(H.dir, "chmod -R a+rX pub priv && chown -R %d:%d pub priv && "
                      "chmod 0700 priv rootonly && chown 0:0 rootonly",
               NOBODY, NOBODY);
    const char *m = "{\"layers\": [{\"type\": \"global_avgpool\"}, "
                    "{\"type\": \"dense\", \"units\": \"classes\"}]}\n";
    char p[300];
    snprintf(p, sizeof p, "%s/m.json", priv);
    td_test_write_file(p, m, strlen(m));
    ck_assert_int_eq(chown(p, NOBODY, NOBODY), 0);
}

static void teardown(void)
{
    if (getuid() != 0)
        return;
    int st = th_stop(&H);
    th_cleanup(&H);
    ck_assert_msg(st == 0, "traind exited with status %d", st);
}

static json_t *submit_as(uid_t uid, json_t *spec)
{
    int fd = uid ? th_connect_as(&H, uid, uid) : th_connect(&H, NULL);
    ck_assert_int_ge(fd, 0);
    json_t *r = th_request(fd, "submit", json_pack("{s:o}", "spec", spec));
    close(fd);
    ck_assert_ptr_nonnull(r);
    return r;
}

static const char *desc(json_t *r)
{
    return json_string_value(json_object_get(json_object_get(r, "error"),
                                             "desc"));
}

START_TEST(test_daemon_runs_as_nobody)
{
    if (getuid() != 0) {
        printf("skipped: needs root to run traind as another user\n");
        return;
    }
    char p[128], line[256], uids[256] = "";
    snprintf(p, sizeof p, "/proc/%d/status", (int)H.pid);
    FILE *f = fopen(p, "r");
    ck_assert_ptr_nonnull(f);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "Uid:", 4) == 0)
            snprintf(uids, sizeof uids, "%s", line);
    fclose(f);
    ck_assert_str_eq(uids, "Uid:\t65534\t65534\t65534\t65534\n");
}
END_TEST

START_TEST(test_other_users_private_data_refused_by_bits)
{
    if (getuid() != 0)
        return;
    /* The daemon could read priv; uid 1 could not: refused for uid 1. */
    json_t *r = submit_as(OTHER, th_files_spec(priv, 1));
    ck_assert_msg(th_err_class(r) &&
                      !strcmp(th_err_class(r), "permission_denied"),
                  "%s", json_dumps(r, 0));
    ck_assert_msg(strstr(desc(r), "data.train: ") &&
                      strstr(desc(r), "is not readable by uid 1"),
                  "%s", desc(r));
    json_decref(r);
    /* The same user's readable data is accepted. */
    r = submit_as(OTHER, th_files_spec(pub, 1));
    ck_assert_msg(th_ok(r), "%s", json_dumps(r, 0));
    json_decref(r);
}
END_TEST

START_TEST(test_other_users_private_model_file_refused)
{
    if (getuid() != 0)
        return;
    char m[300];
    snprintf(m, sizeof m, "%s/m.json", priv);
    json_t *s = th_files_spec(pub, 1);
    json_object_set_new(s, "model", json_string(m));
    json_t *r = submit_as(OTHER, s);
    ck_assert_msg(th_err_class(r) &&
                      !strcmp(th_err_class(r), "permission_denied"),
                  "%s", json_dumps(r, 0));
    ck_assert_msg(strstr(desc(r), "model: ") &&
                      strstr(desc(r), "is not readable by uid 1"),
                  "%s", desc(r));
    json_decref(r);
}
END_TEST

START_TEST(test_data_the_daemon_cannot_read_refused_at_submit)
{
    if (getuid() != 0)
        return;
    /* Root may name anything, but this daemon cannot open it: refused
     * now, naming the path, rather than failing when the job starts. */
    json_t *r = submit_as(0, th_files_spec(rootonly, 1));
    ck_assert_msg(th_err_class(r) != NULL, "accepted: %s", json_dumps(r, 0));
    ck_assert_msg(strstr(desc(r), "rootonly"), "%s", desc(r));
    json_decref(r);
}
END_TEST

/* A folder of uid 1's whose class folder is a symlink into priv: the
 * folder itself passes the bits, but its samples are the daemon's to
 * read, not uid 1's.  Every sample file is checked too. */
START_TEST(test_symlink_inside_dataset_refused_by_bits)
{
    if (getuid() != 0)
        return;
    td_test_sh(H.dir, "mkdir mine && cp -r pub/class0 mine/ && "
                      "ln -s %s/class1 mine/class1 && chown -hR %d:%d mine",
               priv, OTHER, OTHER);
    char mine[300];
    snprintf(mine, sizeof mine, "%s/mine", H.dir);
    json_t *r = submit_as(OTHER, th_files_spec(mine, 1));
    ck_assert_msg(th_err_class(r) &&
                      !strcmp(th_err_class(r), "permission_denied"),
                  "%s", json_dumps(r, 0));
    ck_assert_msg(strstr(desc(r), "data.train: ") &&
                      strstr(desc(r), "/mine/class1/img000.jpg") &&
                      strstr(desc(r), "is not readable by uid 1"),
                  "%s", desc(r));
    json_decref(r);
    /* The same swap after submit, while the job waits for the device:
     * checked again when it starts, so it fails instead of training. */
    td_test_sh(H.dir, "rm mine/class1 && cp -r pub/class1 mine/ && "
                      "chown -R %d:%d mine", OTHER, OTHER);
    int fd = th_connect(&H, NULL);
    int64_t blocker = th_submit(fd, th_tiny_spec(100000, 0));
    ck_assert(th_wait_state(fd, blocker, "running", 10000));
    r = submit_as(OTHER, th_files_spec(mine, 1));
    ck_assert_msg(th_ok(r), "%s", json_dumps(r, 0));
    int64_t id = json_integer_value(json_object_get(th_ok(r), "job"));
    json_decref(r);
    td_test_sh(H.dir, "rm -r mine/class1 && ln -s %s/class1 mine/class1",
               priv);
    json_decref(th_job_request(fd, "cancel", blocker));
    ck_assert(th_wait_state(fd, id, "failed", 30000));
    json_t *job = th_show_job(fd, id);
    const char *why = json_string_value(json_object_get(job, "reason"));
    ck_assert_msg(why && strstr(why, "/mine/class1/img000.jpg is not "
                                     "readable by uid 1"), "%s",
                  why ? why : "(no reason)");
    json_decref(job);
    close(fd);
}
END_TEST

/* init in the daemon's own private folder, the file itself 0644: only
 * the daemon may read it.  Refused for uid 1 by the folder's bits, as
 * data is (the file's own bits were all that was looked at). */
START_TEST(test_init_in_private_folder_refused_by_bits)
{
    if (getuid() != 0)
        return;
    char w[300];
    snprintf(w, sizeof w, "%s/w.safetensors", priv);
    td_test_write_file(w, "not weights", 11);
    ck_assert_int_eq(chmod(w, 0644), 0);
    json_t *s = th_files_spec(pub, 1);
    json_object_set_new(s, "init", json_string(w));
    json_t *r = submit_as(OTHER, s);
    ck_assert_msg(th_err_class(r) &&
                      !strcmp(th_err_class(r), "permission_denied"),
                  "%s", json_dumps(r, 0));
    ck_assert_msg(strstr(desc(r), "init: ") &&
                      strstr(desc(r), "is not readable by uid 1"),
                  "%s", desc(r));
    json_decref(r);
}
END_TEST

/* uid 1's own model .json, swapped after submit for a symlink to the
 * daemon user's private one while the job waits: it fails when it
 * starts instead of the daemon reading that file for uid 1. */
START_TEST(test_model_swapped_after_submit_refused_at_start)
{
    if (getuid() != 0)
        return;
    const char *m = "{\"layers\": [{\"type\": \"global_avgpool\"}, "
                    "{\"type\": \"dense\", \"units\": \"classes\"}]}\n";
    char mine[300];
    snprintf(mine, sizeof mine, "%s/mine.json", H.dir);
    td_test_write_file(mine, m, strlen(m));
    ck_assert_int_eq(chown(mine, OTHER, OTHER), 0);
    int fd = th_connect(&H, NULL);
    int64_t blocker = th_submit(fd, th_tiny_spec(100000, 0));
    ck_assert(th_wait_state(fd, blocker, "running", 10000));
    json_t *s = th_files_spec(pub, 1);
    json_object_set_new(s, "model", json_string(mine));
    json_t *r = submit_as(OTHER, s);
    ck_assert_msg(th_ok(r), "%s", json_dumps(r, 0));
    int64_t id = json_integer_value(json_object_get(th_ok(r), "job"));
    json_decref(r);
    td_test_sh(H.dir, "rm mine.json && ln -s %s/m.json mine.json", priv);
    json_decref(th_job_request(fd, "cancel", blocker));
    ck_assert(th_wait_state(fd, id, "failed", 30000));
    json_t *job = th_show_job(fd, id);
    const char *why = json_string_value(json_object_get(job, "reason"));
    ck_assert_msg(why && strstr(why, "model: ") &&
                      strstr(why, "mine.json is not readable by uid 1"),
                  "%s", why ? why : "(no reason)");
    json_decref(job);
    close(fd);
}
END_TEST

/* A job whose checkpoint the daemon cannot read when it starts again (not
 * damaged: permission here; out of memory or file descriptors alike)
 * was started afresh from step 0 (before 2026-11-28), its steps thrown
 * away; it is suspended instead, saying why, its checkpoints kept, and
 * resumes from them once they can be read. */
START_TEST(test_unreadable_checkpoint_suspends_the_job)
{
    if (getuid() != 0)
        return;
    int fd = th_connect(&H, NULL);
    int64_t id = th_submit(fd, th_tiny_spec(100000, 20));
    ck_assert(th_wait_state(fd, id, "running", 10000));
    usleep(300000);
    json_decref(th_job_request(fd, "pause", id)); /* writes a checkpoint */
    ck_assert(th_wait_state(fd, id, "suspended", 30000));
    char dir[300];
    snprintf(dir, sizeof dir, "%s/checkpoints/%lld", H.state, (long long)id);
    td_test_sh(dir, "ls *.safetensors >/dev/null && chmod 000 *.safetensors");
    json_t *r = th_job_request(fd, "resume", id);
    ck_assert_ptr_nonnull(th_ok(r));
    json_decref(r);
    /* pending, running, then suspended again by the failed start */
    int64_t until = td_now_ns() + 30 * TD_NS_PER_S;
    const char *why = NULL;
    json_t *job = NULL;
    while (td_now_ns() < until) {
        json_decref(job);
        job = th_show_job(fd, id);
        why = json_string_value(json_object_get(job, "reason"));
        if (strcmp(th_job_state(job), "suspended") == 0 && why &&
            strstr(why, "checkpoints are kept"))
            break;
        ck_assert_str_ne(th_job_state(job), "failed");
        usleep(50000);
    }
    char want[64];
    snprintf(want, sizeof want, "trainctl resume %lld", (long long)id);
    ck_assert_msg(why && strstr(why, "checkpoint: ") &&
                      strstr(why, "Permission denied") && strstr(why, want),
                  "%s: %s", th_job_state(job), why ? why : "(no reason)");
    ck_assert_msg(!th_log_has(fd, id, "starts again from step 0"),
                  "the job started afresh");
    json_decref(job);
    td_test_sh(dir, "chmod 600 *.safetensors");
    r = th_job_request(fd, "resume", id);
    ck_assert_ptr_nonnull(th_ok(r));
    json_decref(r);
    ck_assert(th_wait_state(fd, id, "running", 10000));
    until = td_now_ns() + 30 * TD_NS_PER_S;
    while (!th_log_has(fd, id, "resumed from") && td_now_ns() < until)
        usleep(50000);
    ck_assert(th_log_has(fd, id, "resumed from"));
    json_decref(th_job_request(fd, "cancel", id));
    ck_assert(th_wait_state(fd, id, "cancelled", 30000));
    close(fd);
}
END_TEST

/* An eval job's data: the same check of every file as a training
 * job's at submit. */
START_TEST(test_symlink_inside_eval_data_refused_by_bits)
{
    if (getuid() != 0)
        return;
    int fd = th_connect(&H, NULL);
    int64_t id = th_submit(fd, th_files_spec(pub, 1));
    ck_assert(th_wait_state(fd, id, "completed", 120000));
    json_t *r = th_job_request(fd, "show", id);
    const char *p = json_string_value(json_object_get(json_object_get(
        json_object_get(th_ok(r), "job"), "result"), "last_checkpoint"));
    ck_assert_ptr_nonnull(p);
    td_test_sh(H.dir, "cp %s ck.safetensors && chmod 644 ck.safetensors && "
                      "mkdir mine && cp -r pub/class0 mine/ && "
                      "ln -s %s/class1 mine/class1 && chown -hR %d:%d mine",
               p, priv, OTHER, OTHER);
    json_decref(r);
    close(fd);
    char ck[300], mine[300];
    snprintf(ck, sizeof ck, "%s/ck.safetensors", H.dir);
    snprintf(mine, sizeof mine, "%s/mine", H.dir);
    r = submit_as(OTHER, json_pack("{s:s, s:s, s:s}", "task", "eval",
                                   "checkpoint", ck, "data", mine));
    ck_assert_msg(th_err_class(r) &&
                      !strcmp(th_err_class(r), "permission_denied"),
                  "%s", json_dumps(r, 0));
    ck_assert_msg(strstr(desc(r), "data: ") &&
                      strstr(desc(r), "/mine/class1/img000.jpg is not "
                                      "readable by uid 1"),
                  "%s", desc(r));
    json_decref(r);
}
END_TEST

static Suite *nonroot_suite(void)
{
    Suite *s = suite_create("nonroot");
    TCase *tc = tcase_create("paths");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_daemon_runs_as_nobody);
    tcase_add_test(tc, test_other_users_private_data_refused_by_bits);
    tcase_add_test(tc, test_other_users_private_model_file_refused);
    tcase_add_test(tc, test_data_the_daemon_cannot_read_refused_at_submit);
    tcase_add_test(tc, test_symlink_inside_dataset_refused_by_bits);
    tcase_add_test(tc, test_init_in_private_folder_refused_by_bits);
    tcase_add_test(tc, test_model_swapped_after_submit_refused_at_start);
    tcase_add_test(tc, test_unreadable_checkpoint_suspends_the_job);
    tcase_add_test(tc, test_symlink_inside_eval_data_refused_by_bits);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(nonroot_suite)
