/* test_hostile.c - traind live against a hostile local user, continued
 * from test_security.c (which is near its size bound): what one user can
 * hold of the daemon (connections) and what the daemon leaves readable
 * on disk for the other members of its group.
 *
 * The other user is `nobody` (uid 65534), reached with th_connect_as();
 * these tests need root for that and print "skipped" without it. */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon_harness.h"
#include "jpeggen.h"
#include "tdsuite.h"
#include "tdtest.h"

TH_FIXTURE(H)

#define NOBODY 65534

/* ---- connections ---------------------------------------------------------- */

/* Each connection holds a descriptor and up to 2 MiB of request buffer:
 * a user opening thousands took every descriptor the daemon had (other
 * users could no longer connect) and gigabytes of memory.  One uid holds
 * at most max_connections_per_user; one more is refused with a conflict
 * naming the setting, and root is not limited. */
START_TEST(test_connections_per_user_limited)
{
    if (!th_need_root())
        return;
    int fd = th_connect(&H, NULL);
    th_config_set_int(fd, "max_connections_per_user", 3);
    int c[3];
    for (int i = 0; i < 3; i++) {
        json_t *hl = NULL;
        c[i] = th_connect_as_hello(&H, NOBODY, NOBODY, &hl);
        ck_assert_int_ge(c[i], 0);
        ck_assert_msg(json_object_get(hl, "hello"), "connection %d refused",
                      i);
        json_decref(hl);
    }
    json_t *hl = NULL;
    int x = th_connect_as_hello(&H, NOBODY, NOBODY, &hl);
    ck_assert_int_ge(x, 0);
    char *txt = hl ? json_dumps(hl, 0) : NULL;
    ck_assert_msg(th_err_class(hl) && strcmp(th_err_class(hl), "conflict") ==
                  0, "a 4th connection of uid 65534 was taken: %s",
                  txt ? txt : "(nothing)");
    ck_assert_msg(strstr(txt, "uid 65534 already holds 3 connection(s)") &&
                  strstr(txt, "max_connections_per_user"), "%s", txt);
    free(txt);
    json_decref(hl);
    ck_assert_ptr_null(th_read_json(x, 5000)); /* then closed */
    close(x);
    /* One closed: room for another. */
    close(c[0]);
    usleep(200 * 1000);
    c[0] = th_connect_as_hello(&H, NOBODY, NOBODY, &hl);
    ck_assert_msg(json_object_get(hl, "hello"), "no room after a close");
    json_decref(hl);
    /* The refused ones did not disturb the others, and root is not
     * limited. */
    json_t *r = th_request(c[1], "list", NULL);
    ck_assert_ptr_nonnull(th_ok(r));
    json_decref(r);
    int rc[4];
    for (int i = 0; i < 4; i++) {
        json_t *rh = NULL;
        rc[i] = th_connect(&H, &rh);
        ck_assert_msg(json_object_get(rh, "hello"), "root refused");
        json_decref(rh);
    }
    for (int i = 0; i < 4; i++)
        close(rc[i]);
    for (int i = 0; i < 3; i++)
        close(c[i]);
    close(fd);
}
END_TEST

/* ---- files on disk -------------------------------------------------------- */

/* The daemon runs with group traind, the group that gives users the
 * socket: a job's log in a group-readable file let every user read what
 * `logs` refuses them.  It is the daemon's alone (0600), even when the
 * file was there before with a wider mode. */
START_TEST(test_job_log_not_group_readable)
{
    int fd = th_connect(&H, NULL);
    int64_t id = th_submit(fd, th_tiny_spec(1, 0));
    ck_assert(th_wait_state(fd, id, "completed", 30000));
    char p[256];
    struct stat st;
    snprintf(p, sizeof p, "%s/jobs/%lld.log", H.state, (long long)id);
    ck_assert_int_eq(stat(p, &st), 0);
    ck_assert_msg((st.st_mode & 077) == 0, "%s has mode %03o", p,
                  (unsigned)(st.st_mode & 0777));
    /* A log left group-readable by an older traind is narrowed when the
     * daemon opens it (the next id's, made here beforehand). */
    snprintf(p, sizeof p, "%s/jobs/%lld.log", H.state, (long long)id + 1);
    FILE *f = fopen(p, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    ck_assert_int_eq(chmod(p, 0644), 0);
    int64_t id2 = th_submit(fd, th_tiny_spec(1, 0));
    ck_assert_int_eq(id2, id + 1);
    ck_assert(th_wait_state(fd, id2, "completed", 30000));
    ck_assert_int_eq(stat(p, &st), 0);
    ck_assert_msg((st.st_mode & 077) == 0, "%s has mode %03o", p,
                  (unsigned)(st.st_mode & 0777));
    /* the record (spec, data paths, result) and the folder of both, as
     * tmpfiles makes it for the unit, also where no tmpfiles ran; a jobs/
     * left wider is narrowed at start */
    snprintf(p, sizeof p, "%s/jobs/%lld.json", H.state, (long long)id);
    ck_assert_int_eq(stat(p, &st), 0);
    ck_assert_msg((st.st_mode & 077) == 0, "%s has mode %03o", p,
                  (unsigned)(st.st_mode & 0777));
    snprintf(p, sizeof p, "%s/jobs", H.state);
    ck_assert_int_eq(stat(p, &st), 0);
    ck_assert_msg((st.st_mode & 077) == 0, "%s has mode %03o", p,
                  (unsigned)(st.st_mode & 0777));
    close(fd);
    ck_assert_int_eq(chmod(p, 0755), 0);
    ck_assert_int_eq(th_restart(&H), 0);
    ck_assert_int_eq(stat(p, &st), 0);
    ck_assert_msg((st.st_mode & 077) == 0, "%s has mode %03o after a "
                  "restart", p, (unsigned)(st.st_mode & 0777));
    snprintf(p, sizeof p, "%s/job-rows.cache", H.state);
    ck_assert_int_eq(stat(p, &st), 0);
    ck_assert_msg((st.st_mode & 077) == 0, "%s has mode %03o", p,
                  (unsigned)(st.st_mode & 0777));
}
END_TEST

/* ---- logs of a big log ---------------------------------------------------- */

/* A job's log grows with its life (bad samples are never held back).
 * `logs` with a large `lines` built the whole file as one reply: past
 * subscriber_max_bytes the client was cut off instead of answered, and
 * the daemon held the file several times over in memory meanwhile.  The
 * reply now holds the newest lines within 1 MiB and says how many it
 * left out. */
START_TEST(test_logs_of_a_big_log_answered)
{
    if (!th_need_root())
        return;
    int fd = th_connect(&H, NULL);
    char p[256];
    snprintf(p, sizeof p, "%s/jobs/1.log", H.state);
    FILE *f = fopen(p, "w");
    ck_assert_ptr_nonnull(f);
    for (int i = 0; i < 120000; i++) /* 9 MB */
        fprintf(f, "2026-11-28 12:00:00 INFO job 1: an old line %06d "
                   "padded to about eighty bytes ......\n", i);
    fclose(f);
    int64_t id = th_submit(fd, th_tiny_spec(1, 0));
    ck_assert_int_eq(id, 1);
    ck_assert(th_wait_state(fd, id, "completed", 30000));
    json_t *r = th_request(fd, "logs", json_pack("{s:I, s:i}", "job",
                                                 (json_int_t)id, "lines",
                                                 1000000));
    ck_assert_msg(r && th_ok(r), "no reply to logs of a 9 MB log");
    json_t *lines = json_object_get(th_ok(r), "lines");
    size_t n = json_array_size(lines), bytes = 0;
    for (size_t i = 0; i < n; i++)
        bytes += strlen(json_string_value(json_array_get(lines, i)));
    ck_assert_msg(n > 1000 && bytes <= 1024 * 1024, "%zu lines, %zu bytes",
                  n, bytes);
    json_int_t left = json_integer_value(json_object_get(th_ok(r),
                                                         "older_left_out"));
    ck_assert_msg(left > 100000 && (size_t)left + n > 120000 &&
                  (size_t)left + n < 120100, "left out %lld of %zu+",
                  (long long)left, n);
    /* The newest are the job's own, the oldest kept the old file's. */
    ck_assert_ptr_nonnull(strstr(json_string_value(json_array_get(lines,
                                                                  n - 1)),
                                 "job 1"));
    json_decref(r);
    /* Reads under way are bounded per user: ten pipelined requests of
     * another user (allowed to read it here), logs and show of the ended
     * job (its record read back from disk, ended.h) in turn, get four
     * reads, and conflicts for the rest, in the order sent.  (Before,
     * only logs were counted: 7 answered.) */
    json_t *vr = th_request(fd, "config_set", json_pack("{s:s, s:i}", "key",
                            "jobs_visible_to_all", "value", 1));
    ck_assert_ptr_nonnull(th_ok(vr));
    json_decref(vr);
    int nfd = th_connect_as(&H, NOBODY, NOBODY);
    char req[160], all[1600] = "";
    for (int i = 0; i < 10; i++) {
        snprintf(req, sizeof req, "{\"id\": %d, \"cmd\": \"%s\", "
                 "\"args\": {\"job\": 1%s}}\n", i, i % 2 ? "show" : "logs",
                 i % 2 ? "" : ", \"lines\": 1000000");
        strcat(all, req);
    }
    ck_assert_int_eq(th_send_raw(nfd, all, strlen(all)), 0);
    int ok = 0, busy = 0;
    for (int i = 0; i < 10; i++) {
        json_t *x = th_read_json(nfd, 30000);
        ck_assert_ptr_nonnull(x);
        if (th_ok(x))
            ok++;
        else if (th_err_class(x) && !strcmp(th_err_class(x), "conflict") &&
                 strstr(json_string_value(json_object_get(
                            json_object_get(x, "error"), "desc")),
                        "file read(s) under way"))
            busy++;
        json_decref(x);
    }
    ck_assert_msg(ok == 4 && busy == 6, "%d read, %d refused", ok, busy);
    close(nfd);
    /* A small request is as before: no field, the newest lines. */
    r = th_request(fd, "logs", json_pack("{s:I, s:i}", "job",
                                         (json_int_t)id, "lines", 3));
    ck_assert_int_eq(json_array_size(json_object_get(th_ok(r), "lines")), 3);
    ck_assert_ptr_null(json_object_get(th_ok(r), "older_left_out"));
    json_decref(r);
    close(fd);
}
END_TEST

/* ---- other users' failure reasons ----------------------------------------- */

/* A job's data paths are its owner's (docs/daemon.md), but the reason of
 * a failed job often names one ("data.train: /x/ds: No such file or
 * directory"), and the reason is in every user's list row, `show` of
 * another's job and the state events every subscriber gets.  Others now
 * get the reason up to its first path. */
START_TEST(test_other_users_reason_paths_hidden)
{
    if (!th_need_root())
        return;
    int fd = th_connect(&H, NULL);
    int nfd = th_connect_as(&H, NOBODY, NOBODY);
    int sfd = th_connect_as(&H, NOBODY, NOBODY); /* events only */
    json_t *r = th_request(sfd, "subscribe", json_pack("{s:[s]}", "events",
                                                       "state"));
    ck_assert_ptr_nonnull(th_ok(r));
    json_decref(r);
    char ds[256];
    snprintf(ds, sizeof ds, "%s/alice-secret-project/ds", H.dir);
    td_test_make_folder(ds, 2, 8, 8, 8);
    int64_t blocker = th_submit(fd, th_tiny_spec(100000, 0));
    ck_assert(th_wait_state(fd, blocker, "running", 10000));
    int64_t id = th_submit(fd, th_files_spec(ds, 1));
    td_test_sh(H.dir, "rm -r alice-secret-project");
    json_decref(th_job_request(fd, "cancel", blocker));
    ck_assert(th_wait_state(fd, id, "failed", 30000));
    /* The owner sees the whole reason. */
    json_t *job = th_show_job(fd, id);
    const char *why = json_string_value(json_object_get(job, "reason"));
    ck_assert_msg(why && strstr(why, "alice-secret-project"), "%s",
                  why ? why : "(none)");
    json_decref(job);
    /* Others: the list row, show and the state event stop before it. */
    r = th_request(nfd, "list", NULL);
    char *txt = json_dumps(r, 0);
    ck_assert_msg(th_ok(r) && !strstr(txt, "alice-secret-project"), "%s",
                  txt);
    ck_assert_msg(strstr(txt, "\"data.train: dataset (a path only the "
                              "job's owner and root see)\""), "%s", txt);
    free(txt);
    json_decref(r);
    r = th_job_request(nfd, "show", id);
    txt = json_dumps(r, 0);
    ck_assert_msg(th_ok(r) && !strstr(txt, "alice-secret-project"), "%s",
                  txt);
    free(txt);
    json_decref(r);
    json_t *ev = th_wait_event(sfd, "state", id, "failed", 10000, NULL);
    ck_assert_msg(ev, "no failed state event");
    txt = json_dumps(ev, 0);
    ck_assert_msg(!strstr(txt, "alice-secret-project") &&
                  strstr(txt, "data.train: "), "%s", txt);
    free(txt);
    json_decref(ev);
    close(sfd);
    close(nfd);
    close(fd);
}
END_TEST

/* ---- files that are not files -------------------------------------------- */

/* A user's FIFO named as init or as a model .json: submit read it on the
 * loop thread, whose open() then waited for a writer for good, and the
 * daemon answered no one again.  Refused now, and the daemon answers. */
START_TEST(test_fifo_as_init_or_model_refused)
{
    if (!th_need_root())
        return;
    char pub[256], fifo[300], m[300];
    snprintf(pub, sizeof pub, "%s/pub", H.dir);
    ck_assert_int_eq(mkdir(pub, 0755), 0);
    ck_assert_int_eq(chown(pub, NOBODY, NOBODY), 0);
    chmod(H.dir, 0755);
    snprintf(fifo, sizeof fifo, "%s/w.safetensors", pub);
    snprintf(m, sizeof m, "%s/m.json", pub);
    ck_assert_int_eq(mkfifo(fifo, 0666), 0);
    ck_assert_int_eq(mkfifo(m, 0666), 0);
    int nfd = th_connect_as(&H, NOBODY, NOBODY);
    for (int k = 0; k < 2; k++) {
        json_t *spec = th_tiny_spec(1, 0);
        json_object_set_new(spec, k ? "model" : "init",
                            json_string(k ? m : fifo));
        json_t *r = th_request(nfd, "submit", json_pack("{s:o}", "spec",
                                                        spec));
        char *txt = r ? json_dumps(r, 0) : NULL;
        ck_assert_msg(r && th_err_class(r), "%s: %s", k ? "model" : "init",
                      txt ? txt : "no reply");
        ck_assert_msg(strstr(txt, k ? "model: " : "init: ") &&
                      strstr(txt, "not a regular file"), "%s", txt);
        free(txt);
        json_decref(r);
        r = th_request(nfd, "list", NULL);
        ck_assert_msg(r && th_ok(r), "the daemon stopped answering");
        json_decref(r);
    }
    /* A sparse init of more than a job may hold: refused by its size,
     * not read whole on the loop thread. */
    int cfd = th_connect(&H, NULL);
    json_t *r = th_request(cfd, "config_set", json_pack("{s:s, s:i}", "key",
                           "max_job_memory_mb", "value", 1024));
    ck_assert_ptr_nonnull(th_ok(r));
    json_decref(r);
    close(cfd);
    snprintf(fifo, sizeof fifo, "%s/big.safetensors", pub);
    FILE *f = fopen(fifo, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    ck_assert_int_eq(truncate(fifo, 1100LL * 1000 * 1000), 0);
    json_t *spec = th_tiny_spec(1, 0);
    json_object_set_new(spec, "init", json_string(fifo));
    r = th_request(nfd, "submit", json_pack("{s:o}", "spec", spec));
    char *txt = r ? json_dumps(r, 0) : NULL;
    ck_assert_msg(txt && strstr(txt, "init: ") &&
                  strstr(txt, "is 1100.0 MB, more than a job may hold in "
                              "memory (max_job_memory_mb: 1073.7 MB)"),
                  "%s", txt ? txt : "no reply");
    free(txt);
    json_decref(r);
    /* The same as a predict job's checkpoint. */
    char img[300];
    snprintf(img, sizeof img, "%s/x.jpg", pub);
    f = fopen(img, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    r = th_request(nfd, "submit", json_pack("{s:{s:s, s:s, s:[s]}}", "spec",
                                            "task", "predict", "checkpoint",
                                            fifo, "images", img));
    txt = r ? json_dumps(r, 0) : NULL;
    ck_assert_msg(txt && strstr(txt, "checkpoint: ") &&
                  strstr(txt, "is 1100.0 MB, more than a job may hold"),
                  "%s", txt ? txt : "no reply");
    free(txt);
    json_decref(r);
    close(nfd);
}
END_TEST

/* ---- the queue bound comes first -------------------------------------------- */

/* A user at max_queued_per_user was refused only after the daemon had
 * checked the job: its data opened and scanned on the loop thread, for
 * every job sent.  The bound is asked first now (a path that does not
 * exist shows which came first). */
START_TEST(test_queue_bound_before_checks)
{
    if (!th_need_root())
        return;
    int fd = th_connect(&H, NULL);
    json_t *r = th_request(fd, "config_set", json_pack("{s:s, s:i}", "key",
                           "max_queued_per_user", "value", 1));
    ck_assert_ptr_nonnull(th_ok(r));
    json_decref(r);
    int64_t blocker = th_submit(fd, th_tiny_spec(100000, 0));
    ck_assert(th_wait_state(fd, blocker, "running", 10000));
    int nfd = th_connect_as(&H, NOBODY, NOBODY);
    r = th_request(nfd, "submit", json_pack("{s:o}", "spec",
                                            th_tiny_spec(1, 0)));
    ck_assert_ptr_nonnull(th_ok(r));
    json_decref(r);
    r = th_request(nfd, "submit", json_pack("{s:o}", "spec",
                                            th_files_spec("/nonexistent/ds",
                                                          1)));
    const char *cls = th_err_class(r);
    ck_assert_msg(cls && !strcmp(cls, "conflict"), "%s",
                  json_dumps(r, 0));
    json_decref(r);
    close(nfd);
    close(fd);
}
END_TEST

static Suite *hostile_suite(void)
{
    const td_tcase tcs[] = {
        {"connections", setup, teardown, NULL,
         {test_connections_per_user_limited}},
        {"fifos", setup, teardown, NULL, {test_fifo_as_init_or_model_refused}},
        {"queue", setup, teardown, NULL, {test_queue_bound_before_checks}},
        {"reasons", setup, teardown, NULL,
         {test_other_users_reason_paths_hidden}},
        {"files", setup, teardown, NULL,
         {test_job_log_not_group_readable, test_logs_of_a_big_log_answered}},
    };
    return td_suite_from("hostile", tcs, sizeof tcs / sizeof tcs[0]);
}

TD_TEST_MAIN(hostile_suite)
