/* test_storage.c - traind live when the daemon dies or the disk fails
 * (issue 17): kill -9 in the middle of things, a state dir that cannot be
 * written, checkpoints that cannot be saved. */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/clock.h"
#include "chaos.h"
#include "daemon_harness.h"
#include "tdsuite.h"
#include "tdtest.h"

TH_FIXTURE(H)

/* Waits until the job has taken a step in this daemon's life: a step
 * event on fd, not the record's step, which a restarted daemon shows from
 * the previous life at once (a kill -9 then came before the trainer had
 * counted the start, and the crash loop was not seen). */
static void wait_stepping(int fd, int64_t id)
{
    json_decref(th_request(fd, "subscribe", json_pack("{s:I, s:[s]}", "job",
                                                      (json_int_t)id,
                                                      "events", "step")));
    json_t *ev = th_wait_event(fd, "step", id, NULL, 30000, NULL);
    ck_assert_msg(ev != NULL, "job %lld never stepped", (long long)id);
    json_decref(ev);
}

/* Submits a long tiny job that checkpoints at no epoch's end (a kill -9
 * then finds no checkpoint to resume from); returns its id. */
static int64_t submit_long_no_epoch_checkpoints(int fd)
{
    json_t *spec = th_tiny_spec(100000, 0);
    json_object_set_new(json_object_get(spec, "checkpoint"), "at_epoch_end",
                        json_false());
    return th_submit(fd, spec);
}

/* A job that takes the daemon down every time it runs (here: kill -9
 * while it trains, before any checkpoint) is failed after
 * max_crash_restarts (3) lives, not restarted forever. */
START_TEST(test_crash_loop_job_failed)
{
    int fd = th_connect(&H, NULL);
    int64_t id = submit_long_no_epoch_checkpoints(fd);
    for (int life = 0; life < 3; life++) {
        wait_stepping(fd, id);
        close(fd);
        th_kill9_restart(&H);
        fd = th_connect(&H, NULL);
    }
    json_t *j = th_show_job(fd, id);
    const char *st = json_string_value(json_object_get(j, "state"));
    const char *why = json_string_value(json_object_get(j, "reason"));
    ck_assert_msg(strcmp(st, "failed") == 0, "%s: %s", st, why);
    ck_assert_msg(strstr(why, "max_crash_restarts"), "%s", why);
    json_decref(j);
    /* The failure is on disk: another restart keeps it failed. */
    close(fd);
    ck_assert_int_eq(th_restart(&H), 0);
    fd = th_connect(&H, NULL);
    j = th_show_job(fd, id);
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
    int64_t id = submit_long_no_epoch_checkpoints(fd);
    wait_stepping(fd, id);
    close(fd);
    th_kill9_restart(&H);
    fd = th_connect(&H, NULL);
    ck_assert(th_wait_state(fd, id, "running", 10000));
    json_t *r = th_job_request(fd, "cancel", id);
    json_decref(r);
    ck_assert(th_wait_state(fd, id, "cancelled", 20000));
    close(fd);
}
END_TEST

/* ---- failing disks: small tmpfs mounts (root only) ----------------------- */

static void teardown_mount(void)
{
    th_tmpfs_unmount();
    teardown();
}


static int wait_final(int fd, int64_t id, int timeout_ms)
{
    for (int i = 0; i < timeout_ms / 50; i++) {
        json_t *j = th_show_job(fd, id);
        const char *st = th_job_state(j);
        int done = strcmp(st, "completed") == 0 ||
                   strcmp(st, "failed") == 0 || strcmp(st, "cancelled") == 0;
        json_decref(j);
        if (done)
            return 1;
        usleep(50000);
    }
    return 0;
}

/* The final model cannot be written (the checkpoint file system fills
 * while the job runs: at submit there was room, test_disk_checked_at_
 * submit): the job is failed, not completed, and `trainctl watch` (as
 * `submit --follow`) exits 1. */
START_TEST(test_final_model_not_saved_fails)
{
    char ck[200], filler[300];
    snprintf(ck, sizeof ck, "%s/checkpoints", H.state);
    if (th_tmpfs_mount(ck, 256))
        return;
    int fd = th_connect(&H, NULL);
    json_t *spec = th_tiny_spec(50, 0);
    json_object_set_new(json_object_get(spec, "checkpoint"), "at_epoch_end",
                        json_false());
    int64_t id = th_submit(fd, spec);
    /* paused (its checkpoint written), the disk filled, resumed */
    wait_stepping(fd, id);
    json_decref(th_job_request(fd, "pause", id));
    ck_assert(th_wait_state(fd, id, "suspended", 30000));
    th_tmpfs_fill(ck, filler, sizeof filler);
    json_decref(th_job_request(fd, "resume", id));
    ck_assert(wait_final(fd, id, 60000));
    json_t *j = th_show_job(fd, id);
    const char *why = json_string_value(json_object_get(j, "reason"));
    ck_assert_msg(strcmp(th_job_state(j), "failed") == 0, "%s: %s", th_job_state(j),
                  why);
    ck_assert_msg(strstr(why, "final model could not be saved"), "%s", why);
    json_decref(j);
    char ids[32];
    snprintf(ids, sizeof ids, "%lld", (long long)id);
    const char *argv[] = {"watch", ids, NULL};
    char *out = NULL, *err = NULL;
    int st = th_cli(&H, &out, &err, argv);
    ck_assert_msg(st == 1, "trainctl watch exited %d: %s%s", st,
                  out ? out : "", err ? err : "");
    free(out);
    free(err);
    close(fd);
}
END_TEST

/* A job whose checkpoints the checkpoint file system cannot hold is
 * refused at submit, naming checkpoint.keep, the sizes and the folder;
 * with room it runs, and no checkpoint it writes is larger than the
 * estimate the refusal gave (nor much smaller: it is a bill, not a
 * guess). */
START_TEST(test_disk_checked_at_submit)
{
    char ck[200], filler[300];
    snprintf(ck, sizeof ck, "%s/checkpoints", H.state);
    if (th_tmpfs_mount(ck, 1024))
        return;
    th_tmpfs_fill(ck, filler, sizeof filler);
    int fd = th_connect(&H, NULL);
    json_t *spec = th_spec(2, 0, 16, 16);
    json_t *r = th_request(fd, "submit", json_pack("{s:O}", "spec", spec));
    const char *cls = th_err_class(r);
    const char *desc = json_string_value(
        json_object_get(json_object_get(r, "error"), "desc"));
    ck_assert_msg(cls && strcmp(cls, "invalid_spec") == 0 && desc &&
                      strstr(desc, "checkpoint.keep: the job's checkpoints "
                                   "take up to") && strstr(desc, ck) &&
                      strstr(desc, "trainctl rm"),
                  "%s", json_dumps(r, 0));
    unsigned files = 0;
    double one_mb = 0;
    const char *of = strstr(desc, "MB (");
    ck_assert_ptr_nonnull(of);
    ck_assert_int_eq(sscanf(of, "MB (%u of about %lf MB", &files, &one_mb), 2);
    ck_assert_uint_eq(files, 4); /* keep 3 and the one being written */
    json_decref(r);
    ck_assert_int_eq(unlink(filler), 0);
    int64_t id = th_submit(fd, spec);
    ck_assert(wait_final(fd, id, 60000));
    json_t *j = th_show_job(fd, id);
    ck_assert_str_eq(th_job_state(j), "completed");
    json_t *cks = json_object_get(j, "checkpoints"), *c;
    size_t i;
    ck_assert_int_gt(json_array_size(cks), 0);
    json_array_foreach(cks, i, c) {
        double mb = (double)json_integer_value(json_object_get(c, "bytes")) /
                    1e6;
        ck_assert_msg(mb <= one_mb + 0.005 && mb >= one_mb * 0.8,
                      "a checkpoint of %.3f MB, estimated %.1f MB", mb,
                      one_mb);
    }
    json_decref(j);
    close(fd);
}
END_TEST

/* traind --run --checkpoint-dir makes the same check against its own
 * folder (here not made yet: its parent's file system is checked), exit
 * status 3 before anything runs; with room it runs and writes there. */
START_TEST(test_disk_checked_by_run)
{
    char disk[200], ck[256], filler[300], job[256], cmd[1200];
    snprintf(disk, sizeof disk, "%s/rundisk", H.dir);
    ck_assert_int_eq(mkdir(disk, 0700), 0);
    if (th_tmpfs_mount(disk, 1024))
        return;
    th_tmpfs_fill(disk, filler, sizeof filler);
    snprintf(ck, sizeof ck, "%s/ck", disk);
    snprintf(job, sizeof job, "%s/run.json", H.dir);
    json_t *spec = th_spec(1, 0, 16, 16);
    ck_assert_int_eq(json_dump_file(spec, job, 0), 0);
    json_decref(spec);
    snprintf(cmd, sizeof cmd, "%s/daemon/traind --run %s --checkpoint-dir %s 2>&1",
             getenv("TD_BUILD_ROOT"), job, ck);
    int st;
    char *out = td_test_capture(cmd, &st);
    ck_assert_msg(st == 3 && strstr(out, "checkpoint.keep: the job's "
                                         "checkpoints take up to") &&
                      strstr(out, disk) && !strstr(out, "trainctl rm"),
                  "exit %d: %s", st, out);
    free(out);
    struct stat sb;
    ck_assert_int_ne(stat(ck, &sb), 0); /* refused before it made anything */
    ck_assert_int_eq(unlink(filler), 0);
    out = td_test_capture(cmd, &st);
    ck_assert_msg(st == 0, "exit %d: %s", st, out);
    free(out);
    ck_assert_int_eq(stat(ck, &sb), 0);
}
END_TEST

/* trainctl rm on a read-only jobs folder: nothing is removed, the reply
 * says why, the job stays; once writable the removal goes through. */
START_TEST(test_remove_on_readonly_disk)
{
    char jobs[200];
    snprintf(jobs, sizeof jobs, "%s/jobs", H.state);
    if (th_tmpfs_mount(jobs, 1024))
        return;
    int fd = th_connect(&H, NULL);
    int64_t id = th_submit(fd, th_tiny_spec(1, 0));
    ck_assert(wait_final(fd, id, 60000));
    ck_assert_int_eq(mount(NULL, jobs, NULL, MS_REMOUNT | MS_RDONLY, NULL),
                     0);
    json_t *r = th_job_request(fd, "remove", id);
    const char *desc = json_string_value(
        json_object_get(json_object_get(r, "error"), "desc"));
    ck_assert_msg(desc && strstr(desc, "was not removed") &&
                      strstr(desc, "Read-only file system"),
                  "%s", json_dumps(r, 0));
    json_decref(r);
    json_t *j = th_show_job(fd, id); /* still there */
    ck_assert_str_eq(th_job_state(j), "completed");
    json_decref(j);
    ck_assert_int_eq(mount(NULL, jobs, NULL, MS_REMOUNT, NULL), 0);
    r = th_job_request(fd, "remove", id);
    ck_assert_msg(th_ok(r), "%s", json_dumps(r, 0));
    json_decref(r);
    char rec[300];
    snprintf(rec, sizeof rec, "%s/%lld.json", jobs, (long long)id);
    struct stat st;
    ck_assert_int_ne(stat(rec, &st), 0);
    close(fd);
}
END_TEST

/* A job record that cannot be saved (the jobs folder is full) is written
 * again once there is room, without another change to the job. */
START_TEST(test_record_saved_when_disk_recovers)
{
    char jobs[200], filler[300], rec[300];
    snprintf(jobs, sizeof jobs, "%s/jobs", H.state);
    if (th_tmpfs_mount(jobs, 64))
        return;
    th_tmpfs_fill(jobs, filler, sizeof filler);
    int fd = th_connect(&H, NULL);
    int64_t id = th_submit(fd, th_tiny_spec(1, 0));
    ck_assert(wait_final(fd, id, 60000));
    snprintf(rec, sizeof rec, "%s/%lld.json", jobs, (long long)id);
    struct stat st;
    ck_assert_int_ne(stat(rec, &st), 0); /* nothing could be written */
    ck_assert_int_eq(unlink(filler), 0);
    int found = 0;
    for (int i = 0; i < 100 && !found; i++) { /* up to 5 s */
        json_error_t je;
        json_t *r = json_load_file(rec, 0, &je);
        found = r && strcmp(json_string_value(json_object_get(r, "state")),
                            "completed") == 0;
        json_decref(r);
        if (!found)
            usleep(50000);
    }
    ck_assert_msg(found, "the completed record never reached the disk");
    close(fd);
}
END_TEST

/* A read-only state dir stops the daemon at start. */
START_TEST(test_readonly_state_dir_refused)
{
    char root[] = "/tmp/traind-ro-XXXXXX", sub[200];
    ck_assert_ptr_nonnull(mkdtemp(root));
    if (th_tmpfs_mount(root, 256)) {
        rmdir(root);
        return;
    }
    snprintf(sub, sizeof sub, "%s/jobs", root);
    mkdir(sub, 0750);
    snprintf(sub, sizeof sub, "%s/checkpoints", root);
    mkdir(sub, 0750);
    ck_assert_int_eq(mount(NULL, root, NULL, MS_REMOUNT | MS_RDONLY, NULL), 0);
    td_harness h2;
    const char *args[] = {"--state-dir", root, NULL};
    int rc = th_start(&h2, args);
    int stopped = h2.pid <= 0;
    th_cleanup(&h2);
    umount2(root, MNT_DETACH);
    rmdir(root);
    ck_assert_msg(rc != 0 && stopped,
                  "traind started on a read-only state dir (rc %d)", rc);
}
END_TEST

/* ---- records -------------------------------------------------------------- */

/* A fast job (100-step epochs of a tiny model: tens a second) has its
 * record written at most about once a second, not per epoch (the loop
 * serialised a growing record per epoch and stopped greeting clients);
 * nothing is lost: once it ends the record on disk has every epoch. */
START_TEST(test_fast_job_record_writes_bounded)
{
    char dir[300];
    snprintf(dir, sizeof dir, "%s/jobs", H.state);
    int in = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    ck_assert_int_ge(in, 0);
    ck_assert_int_ge(inotify_add_watch(in, dir, IN_MOVED_TO), 0);
    int fd = th_connect(&H, NULL);
    int64_t id = th_submit(fd, th_tiny_spec(100000, 0));
    ck_assert(th_wait_state(fd, id, "running", 30000));
    /* 3 s of renames of 1.json into place */
    char name[32];
    snprintf(name, sizeof name, "%lld.json", (long long)id);
    int writes = 0;
    for (int64_t end = td_now_ns() + 3 * TD_NS_PER_S; td_now_ns() < end;) {
        struct pollfd p = {.fd = in, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0)
            continue;
        char buf[4096] __attribute__((aligned(8)));
        ssize_t n = read(in, buf, sizeof buf);
        for (ssize_t o = 0; o < n;) {
            const struct inotify_event *e = (const void *)(buf + o);
            writes += e->len && strcmp(e->name, name) == 0;
            o += (ssize_t)(sizeof *e + e->len);
        }
    }
    close(in);
    json_t *j = th_show_job(fd, id);
    long long epochs = (long long)json_array_size(
        json_object_get(j, "history"));
    json_decref(j);
    /* (under the sanitizers the job is slower: fewer epochs, the same
     * bound) */
    ck_assert_msg(writes <= 8, "%d record writes in 3 s of %lld epochs",
                  writes, epochs);
    json_decref(th_job_request(fd, "cancel", id));
    ck_assert(th_wait_state(fd, id, "cancelled", 30000));
    j = th_show_job(fd, id);
    size_t want = json_array_size(json_object_get(j, "history"));
    json_decref(j);
    close(fd);
    char path[340];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    json_t *rec = NULL;
    for (int i = 0; i < 100; i++) { /* the final write: up to 5 s */
        json_decref(rec);
        rec = json_load_file(path, 0, NULL);
        const char *st = json_string_value(json_object_get(rec, "state"));
        if (st && strcmp(st, "cancelled") == 0)
            break;
        usleep(50000);
    }
    ck_assert_uint_eq(json_array_size(json_object_get(rec, "history")), want);
    json_decref(rec);
}
END_TEST

/* A cancel acknowledged while the job is between step boundaries holds
 * even if the daemon is killed before the job gets there. */
START_TEST(test_cancel_survives_kill9)
{
    int fd = th_connect(&H, NULL);
    int64_t id = th_submit(fd, th_spec(100000, 0, 64, 32));
    wait_stepping(fd, id);
    json_t *r = th_job_request(fd, "cancel", id);
    ck_assert_ptr_nonnull(th_ok(r));
    json_decref(r);
    close(fd);
    th_kill9_restart(&H);
    fd = th_connect(&H, NULL);
    json_t *j = th_show_job(fd, id);
    ck_assert_msg(strcmp(th_job_state(j), "cancelled") == 0, "%s: %s",
                  th_job_state(j),
                  json_string_value(json_object_get(j, "reason")));
    json_decref(j);
    close(fd);
}
END_TEST

/* A record is checked again when it is read back. */
START_TEST(test_record_revalidated_on_load)
{
    cpu_set_t set;
    ck_assert_int_eq(sched_getaffinity(0, sizeof set, &set), 0);
    ck_assert_int_eq(th_stop(&H), 0);
    json_t *spec = th_tiny_spec(1, 0);
    json_object_set_new(spec, "threads", json_integer(CPU_COUNT(&set) + 1));
    json_t *rec = json_pack("{s:i, s:s, s:i, s:s, s:s, s:f, s:o}", "id", 99,
                            "name", "a\x1b[2Jb\nforged row", "uid", 0,
                            "state", "pending", "reason", "queued",
                            "submitted", 1.0, "spec", spec);
    char path[300];
    snprintf(path, sizeof path, "%s/jobs/99.json", H.state);
    ck_assert_int_eq(json_dump_file(rec, path, 0), 0);
    json_decref(rec);
    ck_assert_int_eq(th_restart(&H), 0);
    int fd = th_connect(&H, NULL);
    json_t *j = th_show_job(fd, 99);
    const char *why = json_string_value(json_object_get(j, "reason"));
    ck_assert_msg(strcmp(th_job_state(j), "failed") == 0, "%s: %s",
                  th_job_state(j), why);
    ck_assert_msg(strstr(why, "threads"), "%s", why);
    ck_assert_str_eq(json_string_value(json_object_get(j, "name")), "job-99");
    json_decref(j);
    close(fd);
}
END_TEST

/* ---- chaos, short: the benchmark's driver with 4 cycles -------------------- */

START_TEST(test_chaos_short)
{
    char conf[] = "/tmp/traind-chaos-conf-XXXXXX";
    int cfd = mkstemp(conf);
    const char *text = "max_crash_restarts = 1000\n";
    ck_assert_int_ge(cfd, 0);
    ck_assert_int_eq(write(cfd, text, strlen(text)), (ssize_t)strlen(text));
    close(cfd);
    const char *args[] = {"--config", conf, NULL};
    td_harness h;
    ck_assert_int_eq(th_start(&h, args), 0);
    td_chaos_opts o = {.cycles = 4, .epochs = 8, .every = 25, .size = 32,
                       .channels = 32, .seed = 7, .verbose = 1};
    td_chaos_result r;
    td_chaos_run(&h, &o, &r);
    int st = th_stop(&h);
    th_cleanup(&h);
    unlink(conf);
    ck_assert_msg(r.kills >= 3, "only %d kill(s) before the job ended",
                  r.kills);
    ck_assert_int_eq(r.lost, 0);
    ck_assert_msg(r.kills_in_write >= 1, "no kill hit a checkpoint write");
    ck_assert_msg(r.resumes == r.kills, "%d of %d restarts resumed",
                  r.resumes, r.kills);
    ck_assert_msg(r.completed, "the job did not complete");
    ck_assert_int_eq(r.final_step, 800);
    ck_assert_msg(r.tensors > 0 && r.differing == 0,
                  "%d of %d tensors differ from the uninterrupted run",
                  r.differing, r.tensors);
    ck_assert_int_eq(st, 0);
}
END_TEST

static Suite *storage_suite(void)
{
    const td_tcase tcs[] = {
        {"crash", setup, teardown, NULL,
         {test_crash_loop_job_failed, test_one_crash_resumes}},
        {"disk", setup, teardown_mount, th_tmpfs_unmount_listed,
         {test_final_model_not_saved_fails, test_disk_checked_at_submit,
          test_disk_checked_by_run, test_record_saved_when_disk_recovers,
          test_remove_on_readonly_disk}},
        {"records", setup, teardown, NULL,
         {test_cancel_survives_kill9, test_record_revalidated_on_load,
          test_fast_job_record_writes_bounded}},
        {"chaos", NULL, NULL, NULL, {test_chaos_short}},
        {"startup", NULL, NULL, th_tmpfs_unmount_listed,
         {test_readonly_state_dir_refused}},
    };
    return td_suite_from("storage", tcs, sizeof tcs / sizeof tcs[0]);
}

TD_TEST_MAIN(storage_suite)
