/* test_user.c - what a new user meets, against a live traind: global
 * options before the command, following a finished job's log, the model
 * zoo found from a build tree, messages without nan or "1 epochs".
 * (issue 18; test_cli.c covers each command's basics.) */
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon_harness.h"
#include "jpeggen.h"
#include "tdtest.h"

static td_harness H;

static void setup(void) { ck_assert_int_eq(th_start(&H, NULL), 0); }

static void teardown(void)
{
    int st = th_stop(&H);
    th_cleanup(&H);
    ck_assert_msg(st == 0, "traind exited with status %d", st);
}

#define CLI(out, err, ...)                                                   \
    th_cli(&H, (out), (err), (const char *const[]){__VA_ARGS__, NULL})

/* Writes spec (stolen) to DIR/name and returns the path (static). */
static const char *write_job(json_t *spec, const char *name)
{
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", H.dir, name);
    ck_assert_int_eq(json_dump_file(spec, path, 0), 0);
    json_decref(spec);
    return path;
}

/* Runs trainctl with argv as given (no --socket added); returns the exit
 * status and stdout/stderr (malloc'd) when asked. */
static int run_raw(char **out, char **err, const char *const *argv)
{
    char cmd[4096];
    int n = snprintf(cmd, sizeof cmd, "%s/client/trainctl",
                     getenv("TD_BUILD_ROOT"));
    for (int i = 0; argv[i]; i++)
        n += snprintf(cmd + n, sizeof cmd - (size_t)n, " '%s'", argv[i]);
    char of[128], ef[128];
    snprintf(of, sizeof of, "%s/raw.out", H.dir);
    snprintf(ef, sizeof ef, "%s/raw.err", H.dir);
    snprintf(cmd + n, sizeof cmd - (size_t)n, " >%s 2>%s", of, ef);
    int st = system(cmd);
    char *files[2] = {of, ef};
    char **dst[2] = {out, err};
    for (int k = 0; k < 2; k++) {
        if (!dst[k])
            continue;
        FILE *f = fopen(files[k], "r");
        ck_assert_ptr_nonnull(f);
        char *buf = calloc(1, 1 << 16);
        size_t len = fread(buf, 1, (1 << 16) - 1, f);
        buf[len] = '\0';
        fclose(f);
        *dst[k] = buf;
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

#define RAW(out, err, ...)                                                   \
    run_raw((out), (err), (const char *const[]){__VA_ARGS__, NULL})

/* ---- 15: global options before the command ------------------------------ */

START_TEST(test_global_options_before_the_command)
{
    char *out, *err;
    ck_assert_int_eq(RAW(&out, &err, "--socket", H.sock, "queue"), 0);
    ck_assert_msg(strstr(out, "(no jobs)"), "%s / %s", out, err);
    free(out);
    free(err);
    char opt[160];
    snprintf(opt, sizeof opt, "--socket=%s", H.sock);
    ck_assert_int_eq(RAW(&out, NULL, opt, "--json", "ls"), 0);
    json_t *r = json_loads(out, 0, NULL);
    ck_assert_msg(json_is_array(json_object_get(r, "jobs")), "%s", out);
    json_decref(r);
    free(out);
    ck_assert_int_eq(RAW(NULL, &err, "--socket"), 2);
    ck_assert_msg(strstr(err, "--socket needs a path"), "%s", err);
    free(err);
}
END_TEST

/* ---- 4: logs -f on a finished job returns -------------------------------- */

START_TEST(test_logs_follow_on_a_finished_job_returns)
{
    int fd = th_connect(&H, NULL);
    int64_t id = th_submit(fd, th_tiny_spec(1, 0));
    ck_assert(th_wait_state(fd, id, "completed", 60000));
    close(fd);
    char *out;
    /* Before the fix this never returned (the test times out). */
    ck_assert_int_eq(CLI(&out, NULL, "logs", "1", "-f"), 0);
    ck_assert_msg(strstr(out, "completed"), "%s", out);
    free(out);
}
END_TEST

/* ---- 2: the zoo from a build tree; the error without "model: model:" ---- */

static json_t *zoo_spec(void)
{
    json_t *spec = th_tiny_spec(1, 0);
    json_object_set_new(spec, "model", json_string("fmnist-cnn"));
    json_t *in = json_object_get(spec, "input");
    json_object_set_new(in, "size", json_pack("[i,i]", 28, 28));
    json_object_set_new(json_object_get(spec, "data"), "classes",
                        json_integer(10));
    return spec;
}

START_TEST(test_zoo_found_from_the_build_tree)
{
    th_stop(&H);
    th_cleanup(&H);
    /* An empty TD_MODELS_DIR is no TD_MODELS_DIR: traind runs from the
     * build tree and must find the source tree's config/models. */
    static const char *const env[] = {"TD_MODELS_DIR=", NULL};
    ck_assert_int_eq(th_start_env(&H, NULL, env), 0);
    int fd = th_connect(&H, NULL);
    int64_t id = th_submit(fd, zoo_spec());
    ck_assert(th_wait_state(fd, id, "completed", 120000));
    close(fd);
}
END_TEST

START_TEST(test_missing_zoo_says_where_it_looked)
{
    th_stop(&H);
    th_cleanup(&H);
    static const char *const env[] = {"TD_MODELS_DIR=/nonexistent/zoo", NULL};
    ck_assert_int_eq(th_start_env(&H, NULL, env), 0);
    char *out, *err;
    int rc = CLI(&out, &err, "submit", write_job(zoo_spec(), "zoo.json"));
    /* Refused at submit, or failed at start: either way the message names
     * the zoo name and the file, once, without a line number. */
    char *msg = rc ? err : out;
    if (rc == 0) {
        free(out);
        ck_assert_int_eq(CLI(&out, NULL, "watch", "1"), 1);
        msg = out;
    }
    ck_assert_msg(strstr(msg, "no zoo model \"fmnist-cnn\"") &&
                  strstr(msg, "/nonexistent/zoo/fmnist-cnn.json") &&
                  strstr(msg, "TD_MODELS_DIR"), "%s", msg);
    ck_assert_msg(!strstr(msg, "model: model:") && !strstr(msg, ":-1"), "%s",
                  msg);
    free(out);
    free(err);
}
END_TEST


/* ---- 10, 19: no validation set, said the same way everywhere ----------- */

START_TEST(test_no_validation_said_plainly)
{
    char *out;
    /* The synthetic tiny job has no validation set. */
    ck_assert_int_eq(CLI(&out, NULL, "submit", write_job(th_tiny_spec(1, 0),
                                                         "noval.json"),
                         "--follow"), 0);
    ck_assert_msg(strstr(out, "job 1 epoch 1 done: no validation set"), "%s",
                  out);
    ck_assert_msg(strstr(out, "1 epoch, "), "%s", out); /* not "1 epochs" */
    ck_assert_msg(strstr(out, ", no validation set, verdict"), "%s", out);
    ck_assert_msg(!strstr(out, "nan") && !strstr(out, "n/a") &&
                  !strstr(out, "val_acc 0.0000"), "%s", out);
    free(out);
    ck_assert_int_eq(CLI(&out, NULL, "logs", "1"), 0);
    ck_assert_msg(strstr(out, "train loss") &&
                  strstr(out, "no validation set") && !strstr(out, "nan"),
                  "%s", out);
    free(out);
    ck_assert_int_eq(CLI(&out, NULL, "show", "1"), 0);
    ck_assert_msg(strstr(out, "last epoch:  1, no validation set"), "%s",
                  out);
    /* Reals in their shortest exact form (not 0.90000000000000002). */
    ck_assert_msg(strstr(out, "\"momentum\": 0.9\n") ||
                  strstr(out, "\"momentum\": 0.9,"), "%s", out);
    free(out);
}
END_TEST


/* ---- 11: config set tells the truth about restarts ---------------------- */

START_TEST(test_config_set_tells_the_truth)
{
    char *out, *err;
    ck_assert_int_eq(CLI(NULL, &err, "config", "set", "metrics_listen",
                         "127.0.0.1:9464"), 1);
    ck_assert_msg(strstr(err, "metrics_listen: read only when traind starts; "
                              "set it in a config file"), "%s", err);
    free(err);
    ck_assert_int_eq(CLI(&out, NULL, "config", "get", "metrics_listen"), 0);
    ck_assert_msg(!strstr(out, "9464"), "%s", out);
    free(out);
    ck_assert_int_eq(CLI(&out, NULL, "config", "set", "workers", "2"), 0);
    ck_assert_msg(strstr(out, "workers = 2 (applied now, until traind "
                              "restarts)"), "%s", out);
    free(out);
}
END_TEST


/* ---- 12: --set paths are relative to the current directory ------------ */

START_TEST(test_set_paths_relative_to_cwd)
{
    char jobs[128], cwd[512];
    snprintf(jobs, sizeof jobs, "%s/jobs", H.dir);
    ck_assert_int_eq(mkdir(jobs, 0755), 0);
    json_t *spec = th_tiny_spec(100000, 0);
    json_object_set_new(json_object_get(spec, "data"), "train",
                        json_string("../d/t"));
    const char *file = write_job(spec, "jobs/job.json");
    ck_assert_ptr_nonnull(getcwd(cwd, sizeof cwd));
    ck_assert_int_eq(chdir(H.dir), 0);
    char *out;
    int rc = CLI(&out, NULL, "submit", "jobs/job.json", "--set",
                 "data.val=v/x", "--json");
    ck_assert_int_eq(chdir(cwd), 0);
    ck_assert_int_eq(rc, 0);
    (void)file;
    free(out);
    ck_assert_int_eq(CLI(&out, NULL, "show", "1", "--json"), 0);
    json_t *r = json_loads(out, 0, NULL);
    json_t *data = json_object_get(json_object_get(json_object_get(
        json_object_get(r, "job"), "spec"), "data"), "val");
    char want[256];
    snprintf(want, sizeof want, "%s/v/x", H.dir);
    const char *val = json_string_value(json_is_array(data)
                                            ? json_array_get(data, 0) : data);
    ck_assert_msg(val && strcmp(val, want) == 0, "%s", out);
    /* the file's "../d/t" from its folder jobs/: DIR/d/t, not
     * DIR/jobs/../d/t */
    char real[PATH_MAX], want2[PATH_MAX + 8];
    ck_assert_ptr_nonnull(realpath(H.dir, real));
    snprintf(want2, sizeof want2, "%s/d/t", real);
    data = json_object_get(json_object_get(json_object_get(
        json_object_get(r, "job"), "spec"), "data"), "train");
    const char *train = json_string_value(json_is_array(data)
                                              ? json_array_get(data, 0)
                                              : data);
    ck_assert_msg(train && strcmp(train, want2) == 0, "%s", out);
    json_decref(r);
    free(out);
    ck_assert_int_eq(CLI(NULL, NULL, "cancel", "1"), 0);
}
END_TEST


/* ---- 14: show lists the checkpoints that exist -------------------------- */

START_TEST(test_show_lists_existing_checkpoints)
{
    int fd = th_connect(&H, NULL);
    /* A checkpoint at each of 6 epoch ends, keep 3. */
    int64_t id = th_submit(fd, th_tiny_spec(6, 0));
    ck_assert(th_wait_state(fd, id, "completed", 60000));
    json_t *r = th_job_request(fd, "show", id);
    json_t *ck = json_object_get(json_object_get(th_ok(r), "job"),
                                 "checkpoints");
    ck_assert_int_ge(json_array_size(ck), 1);
    ck_assert_int_le(json_array_size(ck), 3);
    size_t i;
    json_t *c;
    json_array_foreach(ck, i, c) {
        const char *p = json_string_value(json_object_get(c, "path"));
        ck_assert_msg(p && access(p, F_OK) == 0, "listed but gone: %s", p);
    }
    json_decref(r);
    close(fd);
}
END_TEST


/* ---- 7: learning curves: every epoch kept, durable, printed ------------- */

static json_t *show(int fd, int64_t id)
{
    json_t *r = th_job_request(fd, "show", id);
    json_t *job = json_incref(json_object_get(th_ok(r), "job"));
    json_decref(r);
    ck_assert_ptr_nonnull(job);
    return job;
}

static int lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

START_TEST(test_history_of_every_epoch)
{
    int fd = th_connect(&H, NULL);
    /* 3 epochs of 100 steps, windows of 10 after 5 warm-up steps */
    int64_t id = th_submit(fd, th_tiny_spec(3, 0));
    ck_assert(th_wait_state(fd, id, "completed", 60000));
    json_t *job = show(fd, id);
    json_t *h = json_object_get(job, "history");
    ck_assert_int_eq(json_array_size(h), 3);
    for (size_t i = 0; i < 3; i++) {
        json_t *e = json_array_get(h, i);
        ck_assert_int_eq(json_integer_value(json_object_get(e, "epoch")),
                         (json_int_t)i);
        ck_assert_int_eq(json_integer_value(json_object_get(e, "step")),
                         (json_int_t)(100 * (i + 1)));
        double loss = json_number_value(json_object_get(e, "train_loss"));
        ck_assert(isfinite(loss) && loss > 0);
        ck_assert(json_is_null(json_object_get(e, "val_loss")));
        ck_assert_double_eq_tol(json_number_value(json_object_get(e, "lr")),
                                0.01, 1e-9);
        ck_assert(json_number_value(json_object_get(e, "samples_per_s")) > 0);
        ck_assert_ptr_nonnull(json_string_value(json_object_get(e,
                                                                "verdict")));
    }
    ck_assert(json_equal(json_object_get(json_array_get(h, 2), "train_loss"),
                         json_object_get(json_object_get(job, "last_epoch"),
                                         "train_loss")));
    json_t *curve = json_object_get(job, "curve");
    ck_assert_int_ge(json_array_size(curve), 20);
    json_int_t prev = 0;
    size_t i;
    json_t *p;
    json_array_foreach(curve, i, p) {
        json_int_t st = json_integer_value(json_object_get(p, "step"));
        ck_assert_int_gt(st, prev);
        prev = st;
        ck_assert(json_number_value(json_object_get(p, "train_loss")) > 0);
    }
    json_decref(job);

    char ids[24], *out;
    snprintf(ids, sizeof ids, "%lld", (long long)id);
    ck_assert_int_eq(CLI(&out, NULL, "history", ids, "--csv"), 0);
    ck_assert_int_eq(lines(out), 4);
    ck_assert_msg(strncmp(out, "epoch,step,train_loss,train_acc,val_loss,"
                               "val_acc,lr,", 40) == 0, "%s", out);
    ck_assert_msg(strstr(out, "\n3,300,"), "%s", out);
    ck_assert_msg(strstr(out, ",,,"), "no validation: empty cells: %s", out);
    free(out);
    ck_assert_int_eq(CLI(&out, NULL, "history", ids), 0);
    ck_assert_int_eq(lines(out), 4);
    ck_assert_msg(strstr(out, "train_loss") && strstr(out, "\n3 "), "%s",
                  out);
    free(out);
    ck_assert_int_eq(CLI(&out, NULL, "history", ids, "--windows", "--csv"),
                     0);
    ck_assert_int_ge(lines(out), 21);
    free(out);
    ck_assert_int_eq(CLI(&out, NULL, "history", ids, "--json"), 0);
    json_t *js = json_loads(out, 0, NULL);
    ck_assert_msg(js, "%s", out);
    ck_assert_int_eq(json_array_size(json_object_get(js, "history")), 3);
    json_decref(js);
    free(out);
    ck_assert_int_eq(CLI(NULL, NULL, "history", "99"), 1);
    /* two jobs: one CSV led by a job column, a table each, one JSON */
    int64_t id2 = th_submit(fd, th_tiny_spec(2, 0));
    ck_assert(th_wait_state(fd, id2, "completed", 60000));
    char ids2[24];
    snprintf(ids2, sizeof ids2, "%lld", (long long)id2);
    ck_assert_int_eq(CLI(&out, NULL, "history", ids, ids2, "--csv"), 0);
    ck_assert_int_eq(lines(out), 1 + 3 + 2);
    ck_assert_msg(strncmp(out, "job,epoch,step,", 15) == 0, "%s", out);
    char want[48];
    snprintf(want, sizeof want, "\n%s,3,300,", ids);
    ck_assert_msg(strstr(out, want), "%s", out);
    snprintf(want, sizeof want, "\n%s,2,200,", ids2);
    ck_assert_msg(strstr(out, want), "%s", out);
    free(out);
    ck_assert_int_eq(CLI(&out, NULL, "history", ids, ids2), 0);
    snprintf(want, sizeof want, "\njob %s (tiny):\n", ids2);
    ck_assert_msg(strncmp(out, "job ", 4) == 0 && strstr(out, want), "%s",
                  out);
    free(out);
    ck_assert_int_eq(CLI(&out, NULL, "history", ids, ids2, "--json"), 0);
    js = json_loads(out, 0, NULL);
    ck_assert_msg(js, "%s", out);
    json_t *jobs = json_object_get(js, "jobs");
    ck_assert_int_eq(json_array_size(jobs), 2);
    ck_assert_int_eq(json_array_size(json_object_get(json_array_get(jobs, 1),
                                                     "history")), 2);
    json_decref(js);
    free(out);
    /* one unknown: nothing printed for the others */
    ck_assert_int_eq(CLI(&out, NULL, "history", ids, "99"), 1);
    ck_assert_str_eq(out, "");
    free(out);
    /* durable: a restarted daemon has the same history */
    close(fd);
    ck_assert_int_eq(th_restart(&H), 0);
    fd = th_connect(&H, NULL);
    job = show(fd, id);
    ck_assert_int_eq(json_array_size(json_object_get(job, "history")), 3);
    json_decref(job);
    close(fd);
}
END_TEST


/* ---- 16: checkpoints logged once; requests and recoveries logged -------- */

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

START_TEST(test_checkpoint_said_once)
{
    char *out;
    /* 1 epoch: one checkpoint, at its end (step 100). */
    ck_assert_int_eq(CLI(&out, NULL, "submit", write_job(th_tiny_spec(1, 0),
                                                         "one.json"),
                         "--follow"), 0);
    ck_assert_msg(count(out, "ckpt-000000000100.safetensors") == 1,
                  "watch: %s", out);
    free(out);
    ck_assert_int_eq(CLI(&out, NULL, "logs", "1"), 0);
    ck_assert_msg(count(out, "ckpt-000000000100.safetensors") == 1, "log: %s",
                  out);
    free(out);
}
END_TEST

START_TEST(test_checkpoint_request_and_recovery_logged)
{
    int fd = th_connect(&H, NULL);
    int64_t id = th_submit(fd, th_tiny_spec(100000, 0));
    ck_assert(th_wait_state(fd, id, "running", 30000));
    json_decref(th_request(fd, "subscribe", json_pack("{s:I, s:[s]}", "job",
                                                      (json_int_t)id, "events",
                                                      "checkpoint")));
    ck_assert_int_eq(CLI(NULL, NULL, "checkpoint", "1"), 0);
    /* The job writes three log lines an epoch at over a hundred epochs a
     * second: the whole log is read, not the default last 100 lines. */
    json_t *ev = th_wait_event(fd, "checkpoint", id, NULL, 30000, NULL);
    ck_assert_ptr_nonnull(ev);
    json_decref(ev);
    close(fd);
    char *out;
    ck_assert_int_eq(CLI(&out, NULL, "logs", "1", "-n", "1000000"), 0);
    ck_assert_msg(strstr(out, "checkpoint requested by uid"), "%s", out);
    free(out);
    /* kill -9: the restarted daemon says in the job's log what happened. */
    ck_assert_int_eq(kill(H.pid, SIGKILL), 0);
    int st;
    waitpid(H.pid, &st, 0);
    H.pid = 0;
    ck_assert_int_eq(th_restart(&H), 0);
    fd = th_connect(&H, NULL);
    ck_assert(th_wait_state(fd, id, "running", 30000));
    close(fd);
    ck_assert_int_eq(CLI(&out, NULL, "logs", "1", "-n", "1000000"), 0);
    ck_assert_msg(strstr(out, "recovered after traind stopped without a "
                              "shutdown (killed or crashed) at step "), "%s",
                  out);
    free(out);
    /* The epochs run again from the checkpoint replace what the first
     * process reported, and those before it come back from the checkpoint
     * (an epoch whose record write had not landed when the process was
     * killed): the history counts every epoch once, in order. */
    fd = th_connect(&H, NULL);
    json_t *job = NULL;
    for (int k = 0; k < 300; k++) { /* up to 30 s */
        json_decref(job);
        job = show(fd, id);
        if (json_array_size(json_object_get(job, "history")) >= 3)
            break;
        usleep(100000);
    }
    json_t *h = json_object_get(job, "history");
    ck_assert_int_ge(json_array_size(h), 3);
    for (size_t i = 0; i < json_array_size(h); i++)
        ck_assert_int_eq(json_integer_value(json_object_get(
                             json_array_get(h, i), "epoch")),
                         (json_int_t)i);
    json_decref(job);
    close(fd);
    ck_assert_int_eq(CLI(NULL, NULL, "cancel", "1"), 0);
}
END_TEST


/* ---- 8, 9: progress people trust ---------------------------------------- */

/* watch on an 80-column terminal (util-linux script gives it one). */
START_TEST(test_watch_at_80_columns)
{
    if (access("/usr/bin/script", X_OK) != 0) {
        printf("skipped: util-linux script not installed\n");
        return;
    }
    /* 100 steps with the default metrics (warm-up 20, windows of 100)
     * closed no window: no samples/s, no verdict, no ETA. */
    json_t *spec = th_spec(1, 0, 16, 8);
    json_object_del(spec, "metrics");
    const char *file = write_job(spec, "w.json");
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "TRAIND_SOCKET=%s script -qec 'stty cols 80 rows 24; "
             "%s/client/trainctl submit %s --follow' /dev/null", H.sock,
             getenv("TD_BUILD_ROOT"), file);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    static char out[1 << 20];
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    ck_assert_int_eq(pclose(p), 0);
    ck_assert_msg(!strstr(out, "epoch 1/0") && !strstr(out, "step 0/0"),
                  "%s", out);
    /* Every drawn line fits in 79 columns and the first keeps its ETA. */
    int etas = 0;
    static char lines[1 << 20];
    memcpy(lines, out, n + 1);
    for (char *l = lines, *end; *l; l = end + 1) {
        end = strchr(l, '\n');
        if (!end)
            break;
        *end = '\0';
        char *k = strstr(l, "\033[K");
        char *start = l; /* after a cursor-up escape, \033[NA */
        if (start[0] == '\033' && start[1] == '[') {
            start += 2;
            while (*start >= '0' && *start <= '9')
                start++;
            if (*start == 'A')
                start++;
        }
        if (k) {
            int cols = 0; /* characters, not bytes (the dash is UTF-8) */
            for (char *c = start; c < k; c++)
                cols += ((unsigned char)*c & 0xC0) != 0x80;
            ck_assert_msg(cols <= 79, "%d columns: %s", cols, start);
        }
        if (strstr(start, "step ") && strstr(start, "/100  ETA "))
            etas += strstr(start, "ETA --:--") == NULL;
    }
    ck_assert_msg(etas > 0, "no ETA ever shown: %s", out);
    ck_assert_msg(strstr(out, "  verdict: "), "%s", out);
    /* On the CPU the compute is called compute, not "other". */
    /* (the host split's lines only: a verdict's advice may say "other") */
    ck_assert_msg(strstr(out, "host: ") != NULL, "%s", out);
    for (const char *h = strstr(out, "host: "); h; h = strstr(h + 1, "host: ")) {
        const char *e = strchr(h, '\n');
        size_t len = e ? (size_t)(e - h) : strlen(h);
        char line[512];
        snprintf(line, sizeof line, "%.*s", (int)(len < 511 ? len : 511), h);
        ck_assert_msg(strstr(line, " compute ") && !strstr(line, " other "),
                      "%s", line);
    }
    char *o2;
    ck_assert_int_eq(CLI(&o2, NULL, "show", "1"), 0);
    ck_assert_msg(!strstr(o2, " 0.0 samples/s") && !strstr(o2, "verdict none"),
                  "%s", o2);
    free(o2);
    /* The verdict's advice is there whole, wrapped over lines of at most
     * 79 columns (checked above), not cut at the terminal's edge: the
     * drawn lines joined (escapes, line ends and the indent of the
     * continuation lines dropped) hold it. */
    ck_assert_int_eq(CLI(&o2, NULL, "show", "1", "--json"), 0);
    json_t *r = json_loads(o2, 0, NULL);
    free(o2);
    const char *advice = json_string_value(json_object_get(json_object_get(
        json_object_get(r, "job"), "last_window"), "advice"));
    ck_assert_msg(advice && strlen(advice) > 60, "%s", advice);
    static char joined[1 << 20];
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        if (strncmp(out + i, "\033[K", 3) == 0) {
            i += 2;
        } else if (out[i] == '\r') {
        } else if (out[i] == '\n') {
            joined[j++] = ' ';
            while (out[i + 1] == ' ')
                i++;
        } else {
            joined[j++] = out[i];
        }
    }
    joined[j] = '\0';
    ck_assert_msg(strstr(joined, advice), "advice '%s' not whole in: %s",
                  advice, out);
    json_decref(r);
}
END_TEST

/* A job cancelled while watch draws it on a terminal: the last frame has
 * no ETA (--:--); it kept the running job's last estimate, 'ETA 04:07'
 * beside 'cancelled'. */
START_TEST(test_watch_cancelled_has_no_eta)
{
    if (access("/usr/bin/script", X_OK) != 0) {
        printf("skipped: util-linux script not installed\n");
        return;
    }
    int fd = th_connect(&H, NULL);
    int64_t id = th_submit(fd, th_tiny_spec(100000, 0));
    ck_assert(th_wait_state(fd, id, "running", 30000));
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "TRAIND_SOCKET=%s script -qec 'stty cols 100 rows 24; "
             "%s/client/trainctl watch %lld' /dev/null", H.sock,
             getenv("TD_BUILD_ROOT"), (long long)id);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    static char line[4096];
    int eta = 0; /* a frame with an estimate drawn: cancel then */
    while (!eta && fgets(line, sizeof line, p))
        eta = strstr(line, "ETA ") && !strstr(line, "ETA --:--");
    ck_assert(eta);
    json_t *r = th_job_request(fd, "cancel", id);
    ck_assert_ptr_nonnull(th_ok(r));
    json_decref(r);
    close(fd);
    static char last[4096];
    last[0] = '\0';
    while (fgets(line, sizeof line, p))
        if (strstr(line, "ETA "))
            snprintf(last, sizeof last, "%s", line);
    ck_assert_int_eq(pclose(p) >> 8, 1); /* cancelled */
    ck_assert_msg(strstr(last, "cancelled") && strstr(last, "ETA --:--"),
                  "%s", last);
}
END_TEST

/* A daemon restarted while `trainctl watch` follows a job (the job resumes
 * from its checkpoint): watch waits for traind to come back and follows
 * the job to its end; it exited 3 with 'lost the connection'. */
START_TEST(test_watch_follows_across_a_restart)
{
    int fd = th_connect(&H, NULL);
    int64_t id = th_submit(fd, th_tiny_spec(100000, 0));
    ck_assert(th_wait_state(fd, id, "running", 30000));
    close(fd);
    char of[128], ef[128], exe[512], jid[24];
    snprintf(of, sizeof of, "%s/watch.out", H.dir);
    snprintf(ef, sizeof ef, "%s/watch.err", H.dir);
    snprintf(exe, sizeof exe, "%s/client/trainctl", getenv("TD_BUILD_ROOT"));
    snprintf(jid, sizeof jid, "%lld", (long long)id);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen(of, "w", stdout) || !freopen(ef, "w", stderr))
            _exit(10);
        execl(exe, exe, "watch", jid, "--socket", H.sock, NULL);
        _exit(127);
    }
    ck_assert_int_gt(pid, 0);
    /* watch has attached once it printed the job's state */
    int attached = 0;
    for (int i = 0; i < 300 && !attached; i++) {
        FILE *f = fopen(of, "r");
        char line[256] = "";
        if (f) {
            attached = fgets(line, sizeof line, f) && strstr(line, "running");
            fclose(f);
        }
        if (!attached)
            usleep(100000);
    }
    ck_assert(attached);
    ck_assert_int_eq(th_restart(&H), 0);
    fd = th_connect(&H, NULL);
    ck_assert(th_wait_state(fd, id, "running", 30000));
    json_t *r = th_job_request(fd, "cancel", id);
    ck_assert_ptr_nonnull(th_ok(r));
    json_decref(r);
    close(fd);
    int st = -1;
    for (int i = 0; i < 600; i++) { /* up to 60 s */
        if (waitpid(pid, &st, WNOHANG) == pid)
            break;
        st = -1;
        usleep(100000);
    }
    if (st == -1) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
    }
    /* the end of stdout: the state line after the reconnect */
    char out[1 << 12] = "", err[1 << 12] = "";
    FILE *f = fopen(of, "r");
    if (f) {
        if (fseek(f, -(long)(sizeof out - 1), SEEK_END) != 0)
            rewind(f);
        out[fread(out, 1, sizeof out - 1, f)] = '\0';
        fclose(f);
    }
    f = fopen(ef, "r");
    if (f) {
        err[fread(err, 1, sizeof err - 1, f)] = '\0';
        fclose(f);
    }
    /* exit 1: the job was cancelled (3 would be "cannot reach traind") */
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 1,
                  "status %d\nstdout: %s\nstderr: %s", st, out, err);
    ck_assert_msg(strstr(err, "waiting up to"), "%s", err);
    ck_assert_msg(strstr(out, "cancelled"), "stderr: %s\nstdout: %s", err,
                  out);
}
END_TEST


/* ---- 1, 3: datasets that cannot mislabel, checked at submit ------------ */

static json_t *folder_spec(const char *train, const char *val, int units)
{
    json_t *spec = th_spec(1, 0, 16, 4);
    json_t *data = json_object_get(spec, "data");
    json_object_del(data, "classes");
    json_object_set_new(data, "train", json_string(train));
    if (val)
        json_object_set_new(data, "val", json_string(val));
    json_t *in = json_object_get(spec, "input");
    json_object_set_new(in, "source", json_string("files"));
    json_object_set_new(in, "channels", json_integer(3));
    json_object_set_new(in, "normalize", json_pack("{s:[f,f,f], s:[f,f,f]}",
                                                   "mean", 0.5, 0.5, 0.5,
                                                   "std", 0.25, 0.25, 0.25));
    json_object_set_new(spec, "batch_size", json_integer(2));
    if (units) {
        json_t *layers = json_object_get(json_object_get(spec, "model"),
                                         "layers");
        json_object_set_new(json_array_get(layers, 3), "units",
                            json_integer(units));
    }
    return spec;
}

START_TEST(test_classes_by_name_and_checks_at_submit)
{
    char train[128], val[128], cmd[400];
    snprintf(train, sizeof train, "%s/train", H.dir);
    snprintf(val, sizeof val, "%s/val", H.dir);
    td_test_make_folder(train, 3, 4, 16, 16);
    td_test_make_folder(val, 3, 2, 16, 16);
    snprintf(cmd, sizeof cmd, "rm -r %s/class0", val);
    ck_assert_int_eq(system(cmd), 0);
    char *out, *err;
    /* Val without class0: trains, and says so. */
    ck_assert_int_eq(CLI(&out, NULL, "submit", write_job(folder_spec(train,
                                                                     val, 0),
                                                         "ok.json"),
                         "--follow"), 0);
    free(out);
    ck_assert_int_eq(CLI(&out, NULL, "logs", "1"), 0);
    ck_assert_msg(strstr(out, "data.val: 'class0' (1 of 3 classes) not in "
                              "data.val"), "%s", out);
    free(out);
    /* A val class train lacks: refused at submit. */
    snprintf(cmd, sizeof cmd, "mv %s/class2 %s/zebra", val, val);
    ck_assert_int_eq(system(cmd), 0);
    ck_assert_int_eq(CLI(NULL, &err, "submit", write_job(folder_spec(train,
                                                                     val, 0),
                                                         "x.json")), 1);
    ck_assert_msg(strstr(err, "class 'zebra' is not a class of data.train"),
                  "%s", err);
    free(err);
    /* A dense head of 7 units for 3 classes: refused at submit. */
    ck_assert_int_eq(CLI(NULL, &err, "submit", write_job(folder_spec(train,
                                                                     NULL, 7),
                                                         "h.json")), 1);
    ck_assert_msg(strstr(err, "fc"), "%s", err);
    free(err);
    /* data.classes 2 with labels up to 2. */
    ck_assert_int_eq(CLI(NULL, &err, "submit", write_job(folder_spec(train,
                                                                     NULL, 0),
                                                         "c.json"),
                         "--set", "data.classes=2"), 1);
    ck_assert_msg(strstr(err, "data.classes: 2, but data.train has 3 "
                              "classes"), "%s", err);
    free(err);
    ck_assert_int_eq(CLI(&out, NULL, "queue", "--json"), 0);
    ck_assert_msg(!strstr(out, "\"id\":2"), "refused jobs queued: %s", out);
    free(out);
}
END_TEST

static Suite *user_suite(void)
{
    Suite *s = suite_create("user");
    TCase *tc = tcase_create("user");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_global_options_before_the_command);
    tcase_add_test(tc, test_logs_follow_on_a_finished_job_returns);
    tcase_add_test(tc, test_zoo_found_from_the_build_tree);
    tcase_add_test(tc, test_missing_zoo_says_where_it_looked);
    tcase_add_test(tc, test_no_validation_said_plainly);
    tcase_add_test(tc, test_config_set_tells_the_truth);
    tcase_add_test(tc, test_set_paths_relative_to_cwd);
    tcase_add_test(tc, test_show_lists_existing_checkpoints);
    tcase_add_test(tc, test_history_of_every_epoch);
    tcase_add_test(tc, test_checkpoint_said_once);
    tcase_add_test(tc, test_checkpoint_request_and_recovery_logged);
    tcase_add_test(tc, test_watch_at_80_columns);
    tcase_add_test(tc, test_watch_cancelled_has_no_eta);
    tcase_add_test(tc, test_classes_by_name_and_checks_at_submit);
    suite_add_tcase(s, tc);
    tc = tcase_create("watch_restart");
    tcase_set_timeout(tc, 180);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_watch_follows_across_a_restart);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(user_suite)
