/* test_failures.c - traind live when things fail while a job runs (the
 * failure-injection audit): a daemon stopped at awkward moments, damaged
 * checkpoints at resume, files lost under a running job.  Each test names
 * the defect it guards against. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <inttypes.h>
#include <math.h>
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
#include "input/pack.h"
#include "input/png.h"
#include "input/tar.h"
#include "jpeggen.h"
#include "store/checkpoint.h"
#include "tdsuite.h"
#include "tdtest.h"

TH_FIXTURE(H)

/* Rewrites jobs/<id>.json (the daemon stopped) as it is on disk when a
 * kill -9 comes after the job's last checkpoint landed and before its
 * record said so: state running, no result. */
static void record_as_running(const td_harness *h, int64_t id)
{
    char path[300];
    snprintf(path, sizeof path, "%s/jobs/%" PRId64 ".json", h->state, id);
    json_error_t je;
    json_t *rec = json_load_file(path, 0, &je);
    ck_assert_msg(rec != NULL, "%s: %s", path, je.text);
    json_object_set_new(rec, "state", json_string("running"));
    json_object_set_new(rec, "reason", json_string("running"));
    json_object_del(rec, "result");
    json_object_del(rec, "ended");
    ck_assert_int_eq(json_dump_file(rec, path, 0), 0);
    json_decref(rec);
}

/* The step of a checkpoint file (its metadata), or -1. */
static int64_t ckpt_step(const char *path)
{
    td_ckpt_file *f;
    char err[512];
    if (td_ckpt_open(path, &f, err, sizeof err))
        return -1;
    int64_t s = td_ckpt_file_meta(f)->step;
    td_ckpt_close(f);
    return s;
}

/* ---- stopped after the last checkpoint ----------------------------------- */

/* A kill -9 after a job's final checkpoint was written but before its
 * record said completed: the restarted daemon resumed it, found the
 * checkpoint at the end of the job and failed it ("checkpoint ... is at
 * the end of the job"), though the trained model was on disk.  Now it is
 * completed, with the epochs and the checkpoint it had, and its log says
 * why nothing was trained. */
START_TEST(test_kill9_after_final_checkpoint_completes)
{
    int fd = th_connect(&H, NULL);
    int64_t id = th_submit(fd, th_tiny_spec(2, 0));
    ck_assert(th_wait_state(fd, id, "completed", 60000));
    json_t *j = th_show_job(fd, id);
    json_t *cks = json_object_get(j, "checkpoints");
    char last[4096];
    snprintf(last, sizeof last, "%s", json_string_value(json_object_get(
        json_array_get(cks, json_array_size(cks) - 1), "path")));
    json_decref(j);
    close(fd);
    ck_assert_int_eq(th_stop(&H), 0);
    record_as_running(&H, id);
    ck_assert_int_eq(th_restart(&H), 0);
    fd = th_connect(&H, NULL);
    int done = 0;
    for (int i = 0; i < 600 && !done; i++) {
        j = th_show_job(fd, id);
        const char *st = th_job_state(j);
        done = strcmp(st, "completed") == 0 || strcmp(st, "failed") == 0;
        if (!done) {
            json_decref(j);
            usleep(50000);
        }
    }
    ck_assert_msg(done, "the job never ended after the restart");
    ck_assert_msg(strcmp(th_job_state(j), "completed") == 0, "%s: %s",
                  th_job_state(j),
                  json_string_value(json_object_get(j, "reason")));
    ck_assert_int_eq(json_integer_value(json_object_get(j, "step")), 200);
    json_t *res = json_object_get(j, "result");
    ck_assert_int_eq(json_integer_value(json_object_get(res, "epochs")), 2);
    ck_assert_str_eq(json_string_value(json_object_get(res,
                                                       "last_checkpoint")),
                     last);
    json_decref(j);
    ck_assert(th_log_has(fd, id, "is the job's final checkpoint"));
    close(fd);
}
END_TEST

/* A job record that cannot be read at start (here: truncated) was
 * skipped with a warning, and its id given to the next job, which
 * overwrote the record, appended to the old job's log and resumed from
 * the old job's checkpoints (failed "belongs to another job spec", or
 * with the same spec took over its weights).  Now the record is kept as
 * <id>.json.corrupt and the next job gets a new id. */
START_TEST(test_corrupt_record_id_not_reused)
{
    int fd = th_connect(&H, NULL);
    int64_t id = th_submit(fd, th_tiny_spec(2, 0));
    ck_assert(th_wait_state(fd, id, "completed", 60000));
    close(fd);
    ck_assert_int_eq(th_stop(&H), 0);
    char path[300], aside[320];
    snprintf(path, sizeof path, "%s/jobs/%" PRId64 ".json", H.state, id);
    ck_assert_int_eq(truncate(path, 40), 0);
    ck_assert_int_eq(th_restart(&H), 0);
    snprintf(aside, sizeof aside, "%s.corrupt", path);
    struct stat st;
    ck_assert_msg(stat(aside, &st) == 0, "%s not kept", aside);
    ck_assert_int_eq(st.st_size, 40);
    fd = th_connect(&H, NULL);
    int64_t next = th_submit(fd, th_tiny_spec(2, 0));
    ck_assert_int_gt(next, id);
    ck_assert(th_wait_state(fd, next, "completed", 60000));
    ck_assert(!th_log_has(fd, next, "resumed from"));
    ck_assert(!th_log_has(fd, next, "final checkpoint"));
    close(fd);
}
END_TEST

/* ---- keep_best and early stopping across a stop ---------------------------- */

static char *data_dir;

static void setup_data(void)
{
    setup();
    data_dir = td_test_tmpdir("traind-failures-data");
    /* photos with arbitrary labels: the net memorises the training
     * images and the validation loss soon rises (an early best) */
    td_test_make_folder(data_dir, 2, 24, 24, 24);
}

static void teardown_data(void)
{
    td_test_rmtree(data_dir);
    free(data_dir);
    teardown();
}

static json_t *best_spec(void)
{
    json_t *s = th_files_spec(data_dir, 60);
    json_t *in = json_object_get(s, "input");
    json_object_set_new(in, "size", json_pack("[i,i]", 16, 16));
    json_object_set_new(in, "workers", json_integer(1));
    json_object_set_new(json_object_get(s, "data"), "val_fraction",
                        json_real(0.25));
    json_object_set_new(s, "batch_size", json_integer(4));
    json_object_set_new(s, "deterministic", json_true());
    json_object_set_new(json_object_get(s, "optimizer"), "lr",
                        json_real(0.05));
    json_object_set_new(json_object_get(s, "checkpoint"), "keep_best",
                        json_true());
    json_object_set_new(s, "early_stopping", json_pack("{s:i}", "patience",
                                                       6));
    return s;
}

/* The step of the epoch with the lowest val_loss in a record's history
 * (the first of equals), and how many epochs it has. */
static int64_t best_epoch_step(json_t *j, size_t *epochs)
{
    json_t *h = json_object_get(j, "history"), *e;
    size_t i;
    double best = INFINITY;
    int64_t step = -1;
    json_array_foreach(h, i, e) {
        double v = json_number_value(json_object_get(e, "val_loss"));
        if (v < best) {
            best = v;
            step = json_integer_value(json_object_get(e, "step"));
        }
    }
    *epochs = json_array_size(h);
    return step;
}

/* Job A runs a keep_best, early_stopping job uninterrupted; job B, the
 * same spec, is paused once the validation loss has stopped improving,
 * and resumed (a new runner, from the pause's checkpoint, as after a
 * restart).  Before: the resumed runner forgot the best so far, so B's
 * first epoch after the resume, worse than the best, replaced
 * best.safetensors, and early stopping counted its patience again from
 * zero (B trained more epochs than A).  Now B ends after A's epochs with
 * A's best. */
START_TEST(test_best_and_early_stop_survive_a_resume)
{
    int fd = th_connect(&H, NULL);
    int64_t a = th_submit(fd, best_spec());
    ck_assert(th_wait_state(fd, a, "completed", 300000));
    json_t *ja = th_show_job(fd, a);
    size_t ea;
    int64_t best_a = best_epoch_step(ja, &ea);
    json_decref(ja);
    ck_assert_msg(ea < 60, "A did not stop early (%zu epochs)", ea);
    int64_t b = th_submit(fd, best_spec());
    json_decref(th_request(fd, "subscribe", json_pack(
        "{s:I, s:[s]}", "job", (json_int_t)b, "events", "epoch")));
    /* an epoch that does not improve on the best: pause now */
    double best = INFINITY;
    for (;;) {
        json_t *ev = th_wait_event(fd, "epoch", b, NULL, 120000, NULL);
        ck_assert_msg(ev != NULL, "no epoch event from B");
        double v = json_number_value(json_object_get(
            json_object_get(ev, "data"), "val_loss"));
        json_decref(ev);
        if (v >= best)
            break;
        best = v;
    }
    json_t *r = th_job_request(fd, "pause", b);
    ck_assert_ptr_nonnull(th_ok(r));
    json_decref(r);
    ck_assert(th_wait_state(fd, b, "suspended", 60000));
    r = th_job_request(fd, "resume", b);
    ck_assert_ptr_nonnull(th_ok(r));
    json_decref(r);
    ck_assert(th_wait_state(fd, b, "completed", 300000));
    json_t *jb = th_show_job(fd, b);
    size_t eb;
    int64_t best_b = best_epoch_step(jb, &eb);
    json_decref(jb);
    ck_assert_msg(eb == ea, "B trained %zu epochs, A %zu", eb, ea);
    ck_assert_int_eq(best_b, best_a);
    char path[300];
    snprintf(path, sizeof path, "%s/checkpoints/%" PRId64
             "/best.safetensors", H.state, b);
    ck_assert_int_eq(ckpt_step(path), best_b);
    ck_assert(th_log_has(fd, b, "keep_best: the best val_loss so far"));
    close(fd);
}
END_TEST

/* ---- damaged checkpoints at resume ---------------------------------------- */

static void pause_job(int fd, int64_t id)
{
    json_t *r = th_job_request(fd, "pause", id);
    ck_assert_msg(th_ok(r) != NULL, "%s", json_dumps(r, 0));
    json_decref(r);
    ck_assert(th_wait_state(fd, id, "suspended", 60000));
}

static void resume_job(int fd, int64_t id)
{
    json_t *r = th_job_request(fd, "resume", id);
    ck_assert_msg(th_ok(r) != NULL, "%s", json_dumps(r, 0));
    json_decref(r);
}

/* Truncates job id's checkpoint files: the newest only, or all; returns
 * how many. */
static int truncate_checkpoints(const td_harness *h, int64_t id, int all)
{
    char pat[300];
    glob_t g;
    snprintf(pat, sizeof pat, "%s/checkpoints/%" PRId64
             "/ckpt-*.safetensors", h->state, id);
    if (glob(pat, 0, NULL, &g) != 0)
        return 0;
    int n = 0; /* sorted: the newest is last */
    for (size_t i = all ? 0 : g.gl_pathc - 1; i < g.gl_pathc; i++, n++)
        ck_assert_int_eq(truncate(g.gl_pathv[i], 3000), 0);
    globfree(&g);
    return n;
}

static int64_t job_step(int fd, int64_t id)
{
    json_t *j = th_show_job(fd, id);
    int64_t s = json_integer_value(json_object_get(j, "step"));
    json_decref(j);
    return s;
}

/* Waits (up to 60 s) until the job's log has a line with text. */
static int wait_log(int fd, int64_t id, const char *text)
{
    for (int i = 0; i < 1200; i++) {
        if (th_log_has(fd, id, text))
            return 1;
        usleep(50000);
    }
    return 0;
}

/* A truncated newest checkpoint at resume: the job resumes from the one
 * before, and its own log (trainctl logs, not only the daemon's) says
 * which was unusable and why; with none usable it says that it starts
 * again from step 0.  Before, the job log said only "resumed from" the
 * older one, and nothing at all when it started again from scratch. */
START_TEST(test_corrupt_checkpoint_at_resume_said)
{
    int fd = th_connect(&H, NULL);
    int64_t id = th_submit(fd, th_spec(100000, 50, 32, 16));
    ck_assert(th_wait_state(fd, id, "running", 60000));
    while (job_step(fd, id) < 120)
        usleep(20000);
    pause_job(fd, id);
    ck_assert_int_eq(truncate_checkpoints(&H, id, 0), 1);
    resume_job(fd, id);
    ck_assert_msg(wait_log(fd, id, "1 newer checkpoint(s) unusable: "),
                  "the job's log does not say the newest was unusable");
    ck_assert(th_log_has(fd, id, "; resuming from the older "));
    ck_assert(th_wait_state(fd, id, "running", 60000));
    pause_job(fd, id);
    ck_assert_int_ge(truncate_checkpoints(&H, id, 1), 2);
    resume_job(fd, id);
    ck_assert_msg(wait_log(fd, id, "the job starts again from step 0"),
                  "the job's log does not say it starts again");
    ck_assert(th_log_has(fd, id, "no usable checkpoint: "));
    json_decref(th_job_request(fd, "cancel", id));
    ck_assert(th_wait_state(fd, id, "cancelled", 60000));
    close(fd);
}
END_TEST

/* ---- data lost under a running job ----------------------------------------- */

/* The training folder deleted (here: moved away) while the job runs: the
 * job fails naming data.train, the count against max_bad_ratio, the
 * latest sample and why, and that the folder itself is gone.  Before, the
 * reason was "training source: too many bad samples". */
START_TEST(test_data_folder_gone_mid_run_named)
{
    char set[300], gone[300];
    snprintf(set, sizeof set, "%s/set", data_dir);
    snprintf(gone, sizeof gone, "%s/gone", data_dir);
    td_test_make_folder(set, 2, 100, 24, 24);
    int fd = th_connect(&H, NULL);
    json_t *spec = th_files_spec(set, 100000);
    json_object_set_new(json_object_get(spec, "input"), "size",
                        json_pack("[i,i]", 16, 16));
    int64_t id = th_submit(fd, spec);
    ck_assert(th_wait_state(fd, id, "running", 60000));
    while (job_step(fd, id) < 50)
        usleep(20000);
    ck_assert_int_eq(rename(set, gone), 0);
    int ended = 0;
    json_t *j = NULL;
    for (int i = 0; i < 1200 && !ended; i++) {
        json_decref(j);
        j = th_show_job(fd, id);
        ended = strcmp(th_job_state(j), "running") != 0;
        if (!ended)
            usleep(50000);
    }
    const char *why = json_string_value(json_object_get(j, "reason"));
    ck_assert_msg(strcmp(th_job_state(j), "failed") == 0, "%s: %s",
                  th_job_state(j), why);
    ck_assert_msg(strstr(why, "data.train: ") &&
                      strstr(why, "past max_bad_ratio 0.01; the latest: ") &&
                      strstr(why, "No such file or directory") &&
                      strstr(why, "/set itself: No such file or directory"),
                  "%s", why);
    json_decref(j);
    close(fd);
}
END_TEST

/* ---- the job log: a full disk, repetition ---------------------------------- */

/* The log request's lines of a job (all of them) as one text. */
static char *all_logs(int fd, int64_t id)
{
    json_t *r = th_request(fd, "logs", json_pack("{s:I, s:i}", "job",
                                                 (json_int_t)id, "lines",
                                                 1000000));
    json_t *lines = json_object_get(th_ok(r), "lines"), *l;
    ck_assert_ptr_nonnull(lines);
    size_t i, n = 1;
    json_array_foreach(lines, i, l)
        n += strlen(json_string_value(l)) + 1;
    char *text = calloc(1, n);
    ck_assert_ptr_nonnull(text);
    json_array_foreach(lines, i, l) {
        strcat(text, json_string_value(l));
        strcat(text, "\n");
    }
    json_decref(r);
    return text;
}

/* A file's text (malloc'd; "" when it cannot be read). */
static char *file_text(const char *path)
{
    FILE *f = fopen(path, "r");
    char *text = calloc(1, 1);
    size_t n = 0;
    char buf[65536];
    size_t got;
    while (f && (got = fread(buf, 1, sizeof buf, f)) > 0) {
        text = realloc(text, n + got + 1);
        ck_assert_ptr_nonnull(text);
        memcpy(text + n, buf, got);
        text[n += got] = '\0';
    }
    if (f)
        fclose(f);
    return text;
}

static int count_of(const char *text, const char *what)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, what)) != NULL; p++)
        n++;
    return n;
}

static void teardown_mount(void)
{
    int st = th_stop(&H); /* the daemon first: it has files there */
    th_tmpfs_unmount();
    th_cleanup(&H);
    ck_assert_msg(st == 0, "traind exited with status %d", st);
}


/* The state dir on a small tmpfs, filled while a job writes checkpoints:
 * its "checkpoint at step N failed, training goes on: No space left on
 * device" lines could not be appended to its log, and were dropped (the
 * log said nothing of the failures).  Now they are kept, shown by `logs`
 * meanwhile, and written once the disk has room again. */
START_TEST(test_job_log_kept_while_disk_full)
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
    int64_t id = th_submit(fd, th_tiny_spec(1000, 20)); /* room for 4 */
    json_decref(th_request(fd, "subscribe", json_pack(
        "{s:I, s:[s]}", "job", (json_int_t)id, "events", "log")));
    char logpath[400], filler[400], *lost = NULL;
    snprintf(logpath, sizeof logpath, "%s/jobs/%" PRId64 ".log", root, id);
    int written = 0;
    for (int64_t end = td_now_ns() + 60 * TD_NS_PER_S;
         !written && td_now_ns() < end;) {
        json_t *ev = th_wait_event(fd, "log", id, NULL, 1000, NULL);
        const char *line = json_string_value(json_object_get(
            json_object_get(ev, "data"), "line"));
        written = line && strstr(line, " written: ");
        json_decref(ev);
    }
    ck_assert_msg(written, "no checkpoint written");
    th_tmpfs_fill(root, filler, sizeof filler);
    /* and the room left in the log's last page (tmpfs counts pages): a
     * line after this cannot land, whatever its length */
    int lfd = open(logpath, O_WRONLY | O_APPEND);
    ck_assert_int_ge(lfd, 0);
    while (write(lfd, "\n", 1) > 0)
        ;
    close(lfd);
    /* a failure logged after the disk filled, which its file lacks */
    for (int64_t end = td_now_ns() + 60 * TD_NS_PER_S;
         !lost && td_now_ns() < end;) {
        json_t *ev = th_wait_event(fd, "log", id, NULL, 1000, NULL);
        const char *line = json_string_value(json_object_get(
            json_object_get(ev, "data"), "line"));
        if (line && strstr(line, "failed, training goes on: ") &&
            strstr(line, "No space left on device")) {
            char *text = file_text(logpath);
            if (!strstr(text, line))
                lost = strdup(line);
            free(text);
        }
        json_decref(ev);
    }
    ck_assert_msg(lost != NULL, "no checkpoint failure logged while the "
                  "disk was full");
    char *text = all_logs(fd, id);
    ck_assert_msg(strstr(text, lost), "logs does not show '%s'", lost);
    free(text);
    ck_assert_int_eq(unlink(filler), 0);
    int landed = 0;
    for (int i = 0; i < 1200 && !landed; i++) {
        text = file_text(logpath);
        landed = count_of(text, lost);
        free(text);
        if (!landed)
            usleep(50000);
    }
    ck_assert_msg(landed == 1, "'%s' is %d times in %s", lost, landed,
                  logpath);
    free(lost);
    json_decref(th_job_request(fd, "cancel", id)); /* unless it ended */
    int ended = 0;
    for (int i = 0; i < 1200 && !ended; i++) {
        json_t *j = th_show_job(fd, id);
        ended = strcmp(th_job_state(j), "running") != 0;
        json_decref(j);
        if (!ended)
            usleep(50000);
    }
    ck_assert(ended);
    close(fd);
}
END_TEST

/* A fast job checkpointing every 20 steps wrote three lines an epoch, ~200
 * a second ("checkpoint at step N skipped", "... written", "epoch N/M").
 * Now each kind is written 10 times a minute and then summed up in one
 * line that gives the latest; the epochs written and summed up are all
 * the job's epochs. */
START_TEST(test_repeated_log_lines_summed_up)
{
    int64_t t0 = td_now_ns();
    int fd = th_connect(&H, NULL);
    int64_t id = th_submit(fd, th_tiny_spec(100000, 20));
    ck_assert(th_wait_state(fd, id, "running", 60000));
    while (job_step(fd, id) < 5000)
        usleep(20000);
    json_decref(th_job_request(fd, "cancel", id));
    ck_assert(th_wait_state(fd, id, "cancelled", 60000));
    json_t *j = th_show_job(fd, id);
    int epochs = (int)json_array_size(json_object_get(j, "history"));
    json_decref(j);
    ck_assert_int_ge(epochs, 50);
    char *text = all_logs(fd, id);
    double minutes = (double)(td_now_ns() - t0) / 60e9;
    int lines = count_of(text, "\n");
    /* 3 kinds of 10 a minute and their summaries, a dozen single lines
     * (submitted, device, precision, model, states): 39 in a test of
     * seconds; 300 or more before (5,000 steps) */
    int limit = 60 + (int)(35 * minutes);
    ck_assert_msg(lines <= limit, "%d lines in %.1f min (at most %d): %s",
                  lines, minutes, limit, text);
    ck_assert_msg(strstr(text, "epoch 1/100000: train loss"), "%s", text);
    ck_assert_msg(strstr(text, "checkpoint at step 20 written"), "%s", text);
    ck_assert_msg(strstr(text, "cancelled: cancelled by"), "%s", text);
    /* the epoch lines written and summed up ("job N: K more like this
     * in the last ...: epoch E/T: train loss ..."): every epoch, once */
    int said = 0;
    char *copy = strdup(text), *save = NULL;
    for (char *l = strtok_r(copy, "\n", &save); l;
         l = strtok_r(NULL, "\n", &save)) {
        if (!strstr(l, ": train loss "))
            continue;
        const char *more = strstr(l, " more like this in the last ");
        const char *k = more ? strstr(l, " job ") : NULL;
        k = k ? strstr(k, ": ") : NULL;
        said += k ? (int)strtol(k + 2, NULL, 10) : 1;
    }
    free(copy);
    ck_assert_msg(said == epochs, "%d epochs said, %d run: %s", said, epochs,
                  text);
    ck_assert_msg(strstr(text, " more like this in the last "), "%s", text);
    free(text);
    close(fd);
}
END_TEST

/* ---- bad images changed under a running job --------------------------------- */

static void write_png(const char *path, uint32_t seed)
{
    uint8_t px[24 * 24 * 3], *buf = NULL;
    size_t cap = 0, len = 0;
    td_test_photo(px, 24, 24, 3, seed);
    ck_assert_int_eq(td_png_encode(px, 24, 24, 3, &buf, &cap, &len), 0);
    td_test_write_file(path, buf, len);
    free(buf);
}

/* The file made bad: 'c' corrupt (not an image any more), 't' truncated
 * to a third, 'd' deleted. */
static void spoil(const char *dir, const char *name, char how)
{
    char path[600];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    ck_assert_int_eq(stat(path, &st), 0);
    if (how == 'c')
        td_test_write_file(path, "<html>not an image</html>", 25);
    else if (how == 't')
        ck_assert_int_eq(truncate(path, st.st_size / 3), 0);
    else
        ck_assert_int_eq(unlink(path), 0);
}

static int64_t last_epoch_bad(int fd, int64_t id, int64_t *epoch)
{
    json_t *j = th_show_job(fd, id);
    json_t *e = json_object_get(j, "last_epoch");
    int64_t n = json_integer_value(json_object_get(e, "bad_samples"));
    *epoch = e ? json_integer_value(json_object_get(e, "epoch")) : -1;
    ck_assert_msg(strcmp(th_job_state(j), "running") == 0, "%s: %s",
                  th_job_state(j),
                  json_string_value(json_object_get(j, "reason")));
    json_decref(j);
    return n;
}

/* Waits (up to 120 s) for an epoch that counts `bad` bad samples and one
 * epoch more; the job keeps running. */
static void wait_bad_counted(int fd, int64_t id, int64_t bad)
{
    int64_t epoch = -1, seen = -1, n = 0;
    for (int i = 0; i < 2400; i++) {
        n = last_epoch_bad(fd, id, &epoch);
        if (n == bad && seen < 0)
            seen = epoch;
        if (seen >= 0 && epoch > seen)
            return;
        usleep(50000);
    }
    ck_assert_msg(0, "last_epoch.bad_samples %lld, not %lld", (long long)n,
                  (long long)bad);
}

/* Each name once among the job's "bad sample" lines, and no others. */
static void named_once(int fd, int64_t id, const char *const *names, int n)
{
    char *text = all_logs(fd, id);
    ck_assert_msg(count_of(text, "bad sample ") == n, "%s", text);
    for (int i = 0; i < n; i++)
        ck_assert_msg(count_of(text, names[i]) == 1, "%s: %s", names[i],
                      text);
    free(text);
}

/* Waits (up to 120 s) for the job to end; its state. */
static json_t *wait_ended(int fd, int64_t id)
{
    json_t *j = NULL;
    for (int i = 0; i < 2400; i++) {
        json_decref(j);
        j = th_show_job(fd, id);
        if (strcmp(th_job_state(j), "running") != 0 &&
            strcmp(th_job_state(j), "pending") != 0)
            return j;
        usleep(50000);
    }
    ck_assert_msg(0, "the job did not end");
    return j;
}

/* JPEGs and PNGs of an ImageFolder set spoiled while the job trains
 * (corrupt, truncated, deleted): the job goes on under max_bad_ratio,
 * each named once in its log (over several epochs) and counted in show's
 * last_epoch.bad_samples; past the ratio it fails naming data.train, the
 * count and the latest.  Checked with the daemon before: it passed (only
 * a unit test covered this, for a set bad before the start). */
START_TEST(test_bad_images_in_a_live_job)
{
    char set[300], name[64];
    snprintf(set, sizeof set, "%s/live", data_dir);
    td_test_make_folder(set, 2, 100, 24, 24);
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 10; i++) {
            char path[400];
            snprintf(path, sizeof path, "%s/class%d/png%03d.png", set, k, i);
            write_png(path, (uint32_t)(k * 100 + i));
        }
    json_t *spec = th_files_spec(set, 100000); /* 220 images */
    json_object_set_new(json_object_get(spec, "input"), "size",
                        json_pack("[i,i]", 16, 16));
    json_object_set_new(spec, "max_bad_ratio", json_real(0.05)); /* 11 */
    int fd = th_connect(&H, NULL);
    int64_t id = th_submit(fd, spec);
    ck_assert(th_wait_state(fd, id, "running", 60000));
    while (job_step(fd, id) < 30) /* past its first epoch */
        usleep(20000);
    static const char *const bad[] = {
        "class0/img010.jpg", "class1/img020.jpg", "class0/img030.jpg",
        "class1/png003.png", "class0/png005.png", "class1/png007.png"};
    for (int i = 0; i < 6; i++)
        spoil(set, bad[i], "ctd"[i % 3]);
    wait_bad_counted(fd, id, 6);
    named_once(fd, id, bad, 6);
    char cmd[512], want[96];
    snprintf(cmd, sizeof cmd, "%s/client/trainctl show %lld --socket %s",
             getenv("TD_BUILD_ROOT"), (long long)id, H.sock);
    int rc;
    char *text = td_test_capture(cmd, &rc);
    snprintf(want, sizeof want, "; 6 bad samples skipped (trainctl logs "
             "%lld)\n", (long long)id);
    ck_assert_msg(rc == 0 && strstr(text, want), "%s", text);
    free(text);
    for (int i = 50; i < 60; i++) { /* 16 of 220: past 0.05 */
        snprintf(name, sizeof name, "class0/img%03d.jpg", i);
        spoil(set, name, 'd');
    }
    json_t *j = wait_ended(fd, id);
    const char *why = json_string_value(json_object_get(j, "reason"));
    /* the 12th is past 0.05 of 220; a worker that found another at the
     * same moment may have counted a 13th (or more) before the stop */
    int nbad = 0;
    const char *at = why ? strstr(why, "data.train: ") : NULL;
    ck_assert_msg(strcmp(th_job_state(j), "failed") == 0 && at &&
                      sscanf(at, "data.train: %d bad sample(s)", &nbad) == 1 &&
                      nbad >= 12 && nbad <= 16 &&
                      strstr(why, " bad sample(s) out of 220, past "
                                  "max_bad_ratio 0.05; the latest: ") &&
                      strstr(why, "class0/img05"),
                  "%s: %s", th_job_state(j), why);
    json_decref(j);
    close(fd);
}
END_TEST

/* The offset of member `name`'s data in a tar file (read whole). */
struct member_at {
    const char *name;
    uint64_t off, size;
};

static int find_member(void *user, const char *name, uint64_t off,
                       uint64_t size)
{
    struct member_at *m = user;
    if (strcmp(name, m->name) != 0)
        return 0;
    m->off = off;
    m->size = size;
    return 1;
}

/* 200 images packed into one shard (its path in shard) and a long job
 * on it, past its 30th step; the job's id. */
static int64_t job_on_a_shard(int fd, char *shard, size_t cap)
{
    char set[300], out[300], err[256];
    snprintf(set, sizeof set, "%s/tree", data_dir);
    snprintf(out, sizeof out, "%s/shards", data_dir);
    td_test_make_folder(set, 2, 100, 24, 24);
    td_pack_options o;
    td_pack_options_default(&o);
    td_pack_result res;
    ck_assert_int_eq(td_pack_folder(set, out, &o, &res, err, sizeof err), 0);
    ck_assert_int_eq(res.shards, 1);
    snprintf(shard, cap, "%s/shard-000000.tar", out);
    json_t *spec = th_files_spec(out, 100000);
    json_object_set_new(json_object_get(spec, "input"), "size",
                        json_pack("[i,i]", 16, 16));
    int64_t id = th_submit(fd, spec);
    ck_assert(th_wait_state(fd, id, "running", 60000));
    while (job_step(fd, id) < 30)
        usleep(20000);
    return id;
}

/* A member of a packed shard overwritten in place (its header intact)
 * while the job trains on the shards: named once, counted, the job goes
 * on.  Passed with the daemon before too. */
START_TEST(test_corrupt_shard_member_in_a_live_job)
{
    char shard[400];
    int fd = th_connect(&H, NULL);
    int64_t id = job_on_a_shard(fd, shard, sizeof shard);
    /* the member's key: the packer names them after the tree's files */
    size_t len = 0;
    char *tar = NULL;
    {
        FILE *f = fopen(shard, "r");
        ck_assert_ptr_nonnull(f);
        fseek(f, 0, SEEK_END);
        len = (size_t)ftell(f);
        rewind(f);
        tar = malloc(len);
        ck_assert_uint_eq(fread(tar, 1, len, f), len);
        fclose(f);
    }
    char member[300] = "";
    struct member_at m = {NULL, 0, 0};
    /* the 7th JPEG member, whatever its key */
    int seen = 0;
    uint64_t at = 0;
    while (at + TD_TAR_BLOCK <= len && !member[0]) {
        const char *nm = tar + at;
        uint64_t size = strtoull(tar + at + 124, NULL, 8);
        if (!nm[0])
            break;
        if (strstr(nm, ".jpg") && ++seen == 7)
            snprintf(member, sizeof member, "%.100s", nm);
        at += td_tar_member_bytes(size);
    }
    ck_assert_msg(member[0], "no 7th JPEG member in %s", shard);
    m.name = member;
    ck_assert_int_eq(td_tar_walk((const uint8_t *)tar, len, find_member, &m,
                                 NULL), 1);
    free(tar);
    int sfd = open(shard, O_WRONLY);
    ck_assert_int_ge(sfd, 0);
    static const char junk[64] = "<html>not an image</html>";
    ck_assert_int_eq(pwrite(sfd, junk, sizeof junk, (off_t)m.off), 64);
    close(sfd);
    wait_bad_counted(fd, id, 1);
    char *text = all_logs(fd, id);
    const char *key = strrchr(member, '/') ? strrchr(member, '/') + 1
                                           : member;
    ck_assert_msg(count_of(text, "bad sample ") == 1 &&
                      strstr(strstr(text, "bad sample "), key),
                  "%s not named once: %s", key, text);
    free(text);
    json_decref(th_job_request(fd, "cancel", id));
    ck_assert(th_wait_state(fd, id, "cancelled", 60000));
    close(fd);
}
END_TEST

/* A shard cut short in place while the job reads it (cp over it): reads
 * past its new end fault (SIGBUS), which killed the daemon and every job.
 * Now those samples are bad: the job fails past max_bad_ratio naming the
 * cut, and the daemon goes on. */
START_TEST(test_shard_cut_short_in_a_live_job)
{
    char shard[400];
    int fd = th_connect(&H, NULL);
    int64_t id = job_on_a_shard(fd, shard, sizeof shard);
    struct stat st;
    ck_assert_int_eq(stat(shard, &st), 0);
    ck_assert_int_eq(truncate(shard, st.st_size / 3), 0);
    json_t *j = wait_ended(fd, id);
    const char *why = json_string_value(json_object_get(j, "reason"));
    ck_assert_msg(strcmp(th_job_state(j), "failed") == 0 && why &&
                      strstr(why, "data.train") && strstr(why, "cut short"),
                  "%s: %s", th_job_state(j), why);
    json_decref(j);
    close(fd);
    ck_assert_int_eq(kill(H.pid, 0), 0); /* the daemon lives */
    fd = th_connect(&H, NULL);
    json_decref(th_show_job(fd, id));
    close(fd);
}
END_TEST

static Suite *failures_suite(void)
{
    const td_tcase tcs[] = {
        {"stopped", setup, teardown, NULL,
         {test_kill9_after_final_checkpoint_completes,
          test_corrupt_checkpoint_at_resume_said,
          test_corrupt_record_id_not_reused}},
        {"best", setup_data, teardown_data, NULL,
         {test_best_and_early_stop_survive_a_resume,
          test_data_folder_gone_mid_run_named}},
        {"badimages", setup_data, teardown_data, NULL,
         {test_bad_images_in_a_live_job,
          test_corrupt_shard_member_in_a_live_job,
          test_shard_cut_short_in_a_live_job}},
        {"joblog", setup, teardown, NULL,
         {test_repeated_log_lines_summed_up}},
        {"full", setup, teardown_mount, th_tmpfs_unmount_listed,
         {test_job_log_kept_while_disk_full}},
    };
    return td_suite_from("failures", tcs, sizeof tcs / sizeof tcs[0]);
}

TD_TEST_MAIN(failures_suite)
