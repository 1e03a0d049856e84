/* test_cli.c - trainctl against a live traind: every subcommand, human
 * and --json output, exit codes, and the errors people see. */
#define _GNU_SOURCE
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend/cpu/caps.h"
#include "daemon_harness.h"
#include "proto/protocol.h"
#include "tdtest.h"

TH_FIXTURE(H)

#define CLI(out, err, ...)                                                   \
    th_cli(&H, (out), (err), (const char *const[]){__VA_ARGS__, NULL})

/* A job file: the harness's tiny synthetic job with `epochs` epochs and
 * a relative data path (to check that trainctl resolves it). */
static const char *job_file_epochs(int epochs)
{
    static char path[128];
    snprintf(path, sizeof path, "%s/job-%d.json", H.dir, epochs);
    json_t *spec = th_tiny_spec(epochs, 0);
    json_object_set_new(spec, "name", json_string("cli-test"));
    json_object_set_new(json_object_get(spec, "data"), "train",
                        json_string("d/t"));
    ck_assert_int_eq(json_dump_file(spec, path, 0), 0);
    json_decref(spec);
    return path;
}

/* A job that trains until cancelled. */
static const char *job_file(void) { return job_file_epochs(100000); }

START_TEST(test_every_command_has_help)
{
    static const char *cmds[] = {"submit", "queue", "ls", "show", "watch",
                                 "logs", "cancel", "pause", "resume",
                                 "checkpoint", "extend", "plot", "config",
                                 "version", "rm"};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char *out;
        ck_assert_int_eq(CLI(&out, NULL, cmds[i], "--help"), 0);
        ck_assert_msg(strstr(out, "usage: trainctl"), "%s: %s", cmds[i], out);
        free(out);
    }
    char *out;
    ck_assert_int_eq(CLI(&out, NULL, "--help"), 0);
    ck_assert_ptr_nonnull(strstr(out, "Exit codes"));
    free(out);
    /* Every option a command parses (client/cmd_*.c flag tables, with
     * its short or long twin) is named in its --help: -n, -d, -1, -b,
     * -k, -f and some --output forms were parsed but not listed. */
    static const char *opts[][2] = {
        {"submit", "-f"},       {"submit", "--follow"}, {"extend", "-f"},
        {"logs", "-f"},         {"logs", "--follow"},   {"logs", "-n"},
        {"logs", "--lines"},    {"top", "-d"},          {"top", "--interval"},
        {"top", "-1"},          {"top", "--once"},      {"trace", "-n"},
        {"trace", "--steps"},   {"trace", "-o"},        {"trace", "--output"},
        {"plot", "--output"},   {"eval", "-b"},         {"eval", "--batch"},
        {"predict", "-k"},      {"predict", "--top"},   {"export", "-o"},
        {"export", "--output"}, {"pack", "--output"},
        {"pack", "--shard-size"}, {"pack", "--prefix"},
        {"rm", "-f"},           {"rm", "--force"},
    };
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++) {
        ck_assert_int_eq(CLI(&out, NULL, opts[i][0], "--help"), 0);
        /* as an option: at a line's start or after ", " */
        char a[64], b[64];
        snprintf(a, sizeof a, "\n  %s", opts[i][1]);
        snprintf(b, sizeof b, ", %s", opts[i][1]);
        ck_assert_msg(strstr(out, a) || strstr(out, b), "%s --help lacks %s",
                      opts[i][0], opts[i][1]);
        free(out);
    }
}
END_TEST

START_TEST(test_usage_errors_exit_2)
{
    char *err;
    ck_assert_int_eq(CLI(NULL, &err, "frobnicate"), 2);
    ck_assert_ptr_nonnull(strstr(err, "unknown command 'frobnicate'"));
    free(err);
    ck_assert_int_eq(CLI(NULL, &err, "show", "seven"), 2);
    ck_assert_ptr_nonnull(strstr(err, "'seven' is not a job id"));
    free(err);
    ck_assert_int_eq(CLI(NULL, &err, "ls", "--colour"), 2);
    ck_assert_ptr_nonnull(strstr(err, "unknown option '--colour'"));
    free(err);
    ck_assert_int_eq(CLI(NULL, &err, "cancel"), 2);
    free(err);
    /* A count is the whole word, within range ("10abc" was 10, a huge
     * one wrapped into an int). */
    ck_assert_int_eq(CLI(NULL, &err, "logs", "1", "--lines", "10abc"), 2);
    ck_assert_msg(strstr(err, "--lines: expected 1..") &&
                  strstr(err, "'10abc'"), "%s", err);
    free(err);
    ck_assert_int_eq(CLI(NULL, &err, "logs", "1", "--lines", "4294967295"),
                     2);
    ck_assert_msg(strstr(err, "--lines: expected 1.."), "%s", err);
    free(err);
    /* export, eval and predict of a job name themselves in the daemon's
     * refusal (they said 'trainctl show:'). */
    ck_assert_int_eq(CLI(NULL, &err, "export", "999", "-o", "x.st"), 1);
    ck_assert_msg(strstr(err, "trainctl export: no job 999"), "%s", err);
    free(err);
    ck_assert_int_eq(CLI(NULL, &err, "submit", "/nonexistent/job.json"), 2);
    ck_assert_ptr_nonnull(strstr(err, "/nonexistent/job.json"));
    ck_assert_msg(!strstr(err, "line -1"), "%s", err); /* no position */
    free(err);
    /* A key given twice is refused with its position, not resolved. */
    char dup[200];
    snprintf(dup, sizeof dup, "%s/dup.json", H.dir);
    FILE *f = fopen(dup, "w");
    ck_assert_ptr_nonnull(f);
    fputs("{\"epochs\": 1,\n \"epochs\": 2}\n", f);
    fclose(f);
    ck_assert_int_eq(CLI(NULL, &err, "submit", dup), 2);
    ck_assert_msg(strstr(err, "duplicate object key") && strstr(err, "line 2"),
                  "%s", err);
    free(err);
}
END_TEST

/* A usage error is exit 2 whether or not a daemon answers: the command
 * line is checked before connecting (trace and extend connected first
 * and gave 3 without a daemon). */
START_TEST(test_usage_checked_before_connecting)
{
    char *err, path[160];
    snprintf(path, sizeof path, "%s/none.sock", H.dir);
    ck_assert_int_eq(CLI(NULL, &err, "trace", "1", "--socket", path), 2);
    ck_assert_msg(strstr(err, "-o FILE is required"), "%s", err);
    free(err);
    ck_assert_int_eq(CLI(NULL, &err, "trace", "1", "-o", "x.json", "--steps",
                         "abc", "--socket", path), 2);
    ck_assert_msg(strstr(err, "--steps: expected 1..10000"), "%s", err);
    free(err);
    ck_assert_int_eq(CLI(NULL, &err, "extend", "1", "--socket", path), 2);
    ck_assert_msg(strstr(err, "--epochs N is required"), "%s", err);
    free(err);
    ck_assert_int_eq(CLI(NULL, &err, "extend", "1", "--epochs", "2x",
                         "--socket", path), 2);
    ck_assert_msg(strstr(err, "--epochs: expected 1..100000"), "%s", err);
    free(err);
    /* history's --csv with --json and extend's --set without '=' are
     * usage errors too (exit 3 here: they were found after connecting) */
    ck_assert_int_eq(CLI(NULL, &err, "history", "1", "--csv", "--json",
                         "--socket", path), 2);
    ck_assert_msg(strstr(err, "--csv and --json"), "%s", err);
    free(err);
    ck_assert_int_eq(CLI(NULL, &err, "extend", "1", "--epochs", "2", "--set",
                         "lr", "--socket", path), 2);
    ck_assert_msg(strstr(err, "--set lr: expected key.path=value"), "%s",
                  err);
    free(err);
    /* An unknown state is a usage error naming the states (the daemon
     * refused it, exit 1; none here: exit 3); the daemon's list. */
    char *out;
    ck_assert_int_eq(CLI(&out, &err, "queue", "--state", "bogus", "--json",
                         "--socket", path), 2);
    ck_assert_str_eq(out, "");
    ck_assert_msg(strstr(err, "--state: expected one of ") &&
                  strstr(err, "'bogus'"), "%s", err);
    for (int i = 0; i < TD_PROTO_NJOB_STATES; i++)
        ck_assert_msg(strstr(err, td_proto_job_states[i]), "%s", err);
    free(out);
    free(err);
    ck_assert_int_eq(CLI(&out, &err, "ls", "--state", "done"), 2);
    ck_assert_msg(strstr(err, "pending, running, suspended, completed, "
                          "cancelled, failed, not 'done'"), "%s", err);
    free(out);
    free(err);
    ck_assert_int_eq(CLI(&out, NULL, "queue", "--help"), 0);
    ck_assert_msg(strstr(out, "States: pending, running"), "%s", out);
    free(out);
    ck_assert_int_eq(CLI(&out, NULL, "queue", "--state", "failed"), 0);
    ck_assert_msg(strstr(out, "(no jobs)"), "%s", out);
    free(out);
}
END_TEST

/* A refused trace leaves an existing FILE alone (it was truncated and
 * then removed). */
START_TEST(test_refused_trace_keeps_file)
{
    char path[200], *err, buf[32] = "";
    snprintf(path, sizeof path, "%s/keep.json", H.dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("precious\n", f);
    fclose(f);
    ck_assert_int_eq(CLI(NULL, &err, "trace", "999", "-o", path), 1);
    ck_assert_msg(strstr(err, "no job 999"), "%s", err);
    free(err);
    f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    ck_assert_ptr_nonnull(fgets(buf, sizeof buf, f));
    fclose(f);
    ck_assert_str_eq(buf, "precious\n");
}
END_TEST

/* Short options that look like negative numbers: top's -1 (--once) was
 * taken for a stray argument. */
START_TEST(test_short_option_like_a_number)
{
    char *out, *err;
    ck_assert_int_eq(CLI(&out, &err, "top", "-1"), 0);
    ck_assert_msg(strstr(out, "JOB"), "%s / %s", out, err);
    free(out);
    free(err);
    /* A negative number is still an argument where no flag has its name. */
    ck_assert_int_eq(CLI(NULL, &err, "show", "-1"), 2);
    ck_assert_msg(strstr(err, "'-1' is not a job id"), "%s", err);
    free(err);
}
END_TEST

START_TEST(test_unreachable_exit_3)
{
    char *err, path[160];
    snprintf(path, sizeof path, "%s/none.sock", H.dir);
    ck_assert_int_eq(CLI(NULL, &err, "ls", "--socket", path), 3);
    ck_assert_ptr_nonnull(strstr(err, "cannot reach traind at"));
    /* not the service's socket: a daemon of one's own, at that path */
    ck_assert_msg(strstr(err, "no traind made that socket; start one there: "
                              "traind --foreground --socket ") &&
                      strstr(err, "/none.sock --state-dir DIR"), "%s", err);
    ck_assert_ptr_null(strstr(err, "systemctl"));
    free(err);
    /* the service's socket: start the service, or one's own elsewhere */
    if (access("/run/traind/traind.sock", F_OK) != 0) {
        char cmd[600], txt[4096];
        snprintf(cmd, sizeof cmd, "env -u TRAIND_SOCKET %s/client/trainctl "
                 "ls 2>&1", getenv("TD_BUILD_ROOT"));
        FILE *p = popen(cmd, "r");
        ck_assert_ptr_nonnull(p);
        size_t n = fread(txt, 1, sizeof txt - 1, p);
        txt[n] = '\0';
        ck_assert_int_eq(WEXITSTATUS(pclose(p)), 3);
        ck_assert_msg(strstr(txt, "is the service running? start it with "
                                  "'systemctl start traind' (as root)") &&
                          strstr(txt, "export TRAIND_SOCKET=/tmp/td.sock"),
                      "%s", txt);
    }
    /* A file that is not a socket. */
    ck_assert_int_eq(CLI(NULL, &err, "ls", "--socket", job_file()), 3);
    ck_assert_ptr_nonnull(strstr(err, "cannot reach traind at"));
    free(err);
}
END_TEST

START_TEST(test_socket_permission_error)
{
    if (getuid() != 0) {
        printf("skipped: needs root to run trainctl as another uid\n");
        return;
    }
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    ck_assert_int_eq(chmod(H.dir, 0711), 0); /* the socket, not its folder */
    pid_t pid = fork();
    if (pid == 0) { /* nobody may not use root's 0660 socket */
        dup2(p[1], 2);
        if (setgid(65534) || setuid(65534))
            _exit(10);
        char exe[512];
        snprintf(exe, sizeof exe, "%s/client/trainctl",
                 getenv("TD_BUILD_ROOT"));
        execl(exe, exe, "ls", "--socket", H.sock, NULL);
        _exit(127);
    }
    close(p[1]);
    char err[2048];
    size_t len = 0;
    ssize_t n;
    while (len < sizeof err - 1 &&
           (n = read(p[0], err + len, sizeof err - 1 - len)) > 0)
        len += (size_t)n;
    err[len] = '\0';
    close(p[0]);
    int st;
    waitpid(pid, &st, 0);
    ck_assert(WIFEXITED(st));
    ck_assert_int_eq(WEXITSTATUS(st), 3);
    /* A daemon of root's own (group root): no 'traind' group hint, which
     * only helps with the service's socket (issue 18). */
    ck_assert_msg(strstr(err, "Permission denied") &&
                  strstr(err, "belongs to the traind of user 'root'") &&
                  !strstr(err, "traind' group"), "%s", err);
}
END_TEST

START_TEST(test_submit_queue_show_json)
{
    char *out;
    ck_assert_int_eq(CLI(&out, NULL, "submit", job_file(), "--set",
                         "epochs=90000", "--set", "optimizer.lr=0.1",
                         "--json"), 0);
    json_t *r = json_loads(out, 0, NULL);
    ck_assert_int_eq(json_integer_value(json_object_get(
                         json_object_get(r, "ok"), "job")), 1);
    json_decref(r);
    free(out);
    ck_assert_int_eq(CLI(&out, NULL, "ls", "--json"), 0);
    r = json_loads(out, 0, NULL);
    json_t *j = json_array_get(json_object_get(r, "jobs"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(j, "name")),
                     "cli-test");
    json_decref(r);
    free(out);
    ck_assert_int_eq(CLI(&out, NULL, "show", "1", "--json"), 0);
    r = json_loads(out, 0, NULL);
    json_t *spec = json_object_get(json_object_get(r, "job"), "spec");
    ck_assert_int_eq(json_integer_value(json_object_get(spec, "epochs")),
                     90000);
    ck_assert_double_eq(json_number_value(json_object_get(
                            json_object_get(spec, "optimizer"), "lr")), 0.1);
    /* The relative data path was made absolute against the job's folder. */
    const char *train = json_string_value(json_object_get(
        json_object_get(spec, "data"), "train"));
    ck_assert_msg(train[0] == '/' && strstr(train, "/d/t"), "%s", train);
    json_decref(r);
    free(out);
    ck_assert_int_eq(CLI(&out, NULL, "queue"), 0);
    ck_assert_ptr_nonnull(strstr(out, "cli-test"));
    ck_assert_ptr_nonnull(strstr(out, "running"));
    free(out);
    /* A spec the daemon rejects: exit 1 and the JSON path of the problem. */
    char *err;
    ck_assert_int_eq(CLI(NULL, &err, "submit", job_file(), "--set",
                         "optimizer.lr=-1"), 1);
    ck_assert_msg(strstr(err, "optimizer.lr: "), "%s", err);
    free(err);
    ck_assert_int_eq(CLI(NULL, &err, "submit", job_file(), "--set",
                         "input.colour=1"), 1);
    ck_assert_msg(strstr(err, "input.colour: unknown key"), "%s", err);
    free(err);
    /* a GPU it does not have: at submit, not when the job starts */
    ck_assert_int_eq(CLI(NULL, &err, "submit", job_file(), "--set",
                         "device=cuda:7"), 1);
    ck_assert_msg(strstr(err, "device: device \"cuda:7\" is not "
                              "available: "),
                  "%s", err);
    free(err);
    ck_assert_int_eq(CLI(NULL, NULL, "cancel", "1"), 0);
}
END_TEST

START_TEST(test_job_actions_and_refusals)
{
    char *out, *err;
    /* Job 1 trains; job 2 waits behind it. */
    ck_assert_int_eq(CLI(NULL, NULL, "submit", job_file()), 0);
    ck_assert_int_eq(CLI(NULL, NULL, "submit", job_file()), 0);
    ck_assert_int_eq(CLI(&out, NULL, "checkpoint", "1", "--json"), 0);
    ck_assert_ptr_nonnull(strstr(out, "\"requested\":true"));
    free(out);
    ck_assert_int_eq(CLI(NULL, &err, "checkpoint", "2"), 1);
    ck_assert_ptr_nonnull(strstr(err, "only a running job"));
    free(err);
    ck_assert_int_eq(CLI(&out, NULL, "pause", "2"), 0);
    ck_assert_ptr_nonnull(strstr(out, "job 2: paused"));
    free(out);
    ck_assert_int_eq(CLI(&out, NULL, "resume", "#2", "--json"), 0);
    json_t *r = json_loads(out, 0, NULL);
    ck_assert_str_eq(json_string_value(json_object_get(r, "state")),
                     "pending");
    json_decref(r);
    free(out);
    ck_assert_int_eq(CLI(NULL, NULL, "cancel", "2"), 0);
    ck_assert_int_eq(CLI(NULL, &err, "cancel", "2"), 1);
    ck_assert_ptr_nonnull(strstr(err, "already cancelled"));
    free(err);
    ck_assert_int_eq(CLI(&out, NULL, "cancel", "2", "--json"), 1);
    r = json_loads(out, 0, NULL);
    ck_assert_str_eq(json_string_value(json_object_get(
                         json_object_get(r, "error"), "class")), "conflict");
    json_decref(r);
    free(out);
    ck_assert_int_eq(CLI(NULL, &err, "show", "42"), 1);
    ck_assert_ptr_nonnull(strstr(err, "no job 42"));
    free(err);
    /* With --json, the commands that look a job up first (extend, export,
     * eval, predict) print the daemon's refusal as JSON on stdout, as the
     * job commands do (they printed it on stderr only) */
    char xo[160];
    snprintf(xo, sizeof xo, "%s/x.safetensors", H.dir);
    const char *const lookups[][8] = {
        {"extend", "42", "--epochs", "2", "--json", NULL},
        {"export", "42", "-o", xo, "--json", NULL},
        {"eval", "42", H.dir, "--json", NULL},
        {"predict", "42", H.dir, "--json", NULL},
    };
    for (size_t i = 0; i < sizeof lookups / sizeof lookups[0]; i++) {
        int rc = th_cli(&H, &out, &err, lookups[i]);
        ck_assert_msg(rc == 1, "%s: exit %d, stdout: %s, stderr: %s",
                      lookups[i][0], rc, out, err);
        free(err);
        r = json_loads(out, 0, NULL);
        ck_assert_msg(r != NULL, "%s --json: not JSON: %s", lookups[i][0],
                      out);
        ck_assert_str_eq(json_string_value(json_object_get(
                             json_object_get(r, "error"), "class")),
                         "not_found");
        json_decref(r);
        free(out);
    }
    /* watch on a finished job returns at once with its outcome. */
    ck_assert_int_eq(CLI(&out, NULL, "watch", "2"), 1);
    ck_assert_ptr_nonnull(strstr(out, "cancelled"));
    free(out);
    ck_assert_int_eq(CLI(&out, NULL, "logs", "2"), 0);
    ck_assert_ptr_nonnull(strstr(out, "cancelled by uid"));
    free(out);
    /* Cancelling the running job: watch follows it to its end. */
    ck_assert_int_eq(CLI(NULL, NULL, "cancel", "1"), 0);
    ck_assert_int_eq(CLI(&out, NULL, "watch", "1"), 1);
    ck_assert_ptr_nonnull(strstr(out, "job 1 cancelled"));
    free(out);
}
END_TEST

START_TEST(test_submit_follow_to_completion)
{
    char *out;
    /* Not a tty: plain lines, one per window and epoch, then the end. */
    ck_assert_int_eq(CLI(&out, NULL, "submit", job_file_epochs(2),
                         "--follow"), 0);
    /* the run's length: 2 epochs of the tiny job's 100 steps */
    ck_assert_msg(strstr(out, "submitted job 1: 200 steps\n"), "%s", out);
    ck_assert_ptr_nonnull(strstr(out, "samples/s"));
    ck_assert_ptr_nonnull(strstr(out, "job 1 epoch 2 done"));
    ck_assert_ptr_nonnull(strstr(out, "job 1 completed"));
    free(out);
    /* --json: every line is a JSON object, the last one the final state. */
    ck_assert_int_eq(CLI(&out, NULL, "submit", job_file_epochs(1),
                         "--follow", "--json"), 0);
    char *save = NULL, *last = NULL;
    int lines = 0;
    for (char *l = strtok_r(out, "\n", &save); l;
         l = strtok_r(NULL, "\n", &save)) {
        json_t *o = json_loads(l, 0, NULL);
        ck_assert_msg(o != NULL, "not JSON: %s", l);
        json_decref(o);
        last = l;
        lines++;
    }
    ck_assert_int_gt(lines, 3);
    ck_assert_ptr_nonnull(strstr(last, "\"completed\""));
    free(out);
}
END_TEST

/* extend: a completed job continues as a new job from its newest
 * checkpoint, with --set applied; jobs that are not completed, unknown
 * jobs and a missing --epochs are refused.  export JOB writes that
 * checkpoint's weights. */
START_TEST(test_extend_completed_job)
{
    char *out, *err;
    ck_assert_int_eq(CLI(NULL, NULL, "submit", job_file_epochs(1),
                         "--follow"), 0);
    ck_assert_int_eq(CLI(&out, &err, "extend", "1", "--epochs", "2", "--set",
                         "optimizer.lr=0.001", "--json"), 0);
    json_t *r = json_loads(out, 0, NULL);
    ck_assert_msg(r, "%s / %s", out, err);
    json_t *ok = json_object_get(r, "ok");
    ck_assert_int_eq(json_integer_value(json_object_get(ok, "job")), 2);
    ck_assert_int_eq(json_integer_value(json_object_get(ok, "extends")), 1);
    ck_assert_int_eq(json_integer_value(json_object_get(ok, "steps")), 200);
    char init[512];
    snprintf(init, sizeof init, "%s",
             json_string_value(json_object_get(ok, "init")));
    ck_assert_msg(strstr(init, "/checkpoints/1/ckpt-") &&
                      strstr(init, ".safetensors"), "%s", init);
    json_decref(r);
    free(out);
    free(err);
    ck_assert_int_eq(CLI(&out, NULL, "show", "2", "--json"), 0);
    r = json_loads(out, 0, NULL);
    json_t *spec = json_object_get(json_object_get(r, "job"), "spec");
    ck_assert_str_eq(json_string_value(json_object_get(spec, "init")), init);
    ck_assert_int_eq(json_integer_value(json_object_get(spec, "epochs")), 2);
    ck_assert_double_eq(json_number_value(json_object_get(
                            json_object_get(spec, "optimizer"), "lr")),
                        0.001);
    ck_assert_str_eq(json_string_value(json_object_get(spec, "name")),
                     "cli-test-ext");
    json_decref(r);
    free(out);
    ck_assert_int_eq(CLI(&out, NULL, "watch", "2"), 0);
    ck_assert_ptr_nonnull(strstr(out, "job 2 completed"));
    free(out);
    ck_assert_int_eq(CLI(&out, NULL, "logs", "2"), 0);
    ck_assert_msg(strstr(out, "init from ") && strstr(out, init), "%s", out);
    free(out);

    /* export JOB: the job's newest checkpoint, asked of the daemon. */
    char exp[256];
    snprintf(exp, sizeof exp, "%s/job1.safetensors", H.dir);
    ck_assert_int_eq(CLI(&out, &err, "export", "1", "-o", exp, "--json"), 0);
    ck_assert_msg(strstr(out, "job1.safetensors"), "%s / %s", out, err);
    free(out);
    free(err);
    size_t n;
    uint8_t *f = td_test_slurp(H.dir, "job1.safetensors", &n);
    ck_assert_uint_gt(n, 8);
    ck_assert_msg(memmem(f, n, "\"c1.weight\"", 11) &&
                      memmem(f, n, "\"fc.bias\"", 9) &&
                      !memmem(f, n, "momentum_buffer", 15),
                  "the export's header lacks the weights or keeps the "
                  "optimizer state");
    free(f);
    ck_assert_int_eq(CLI(NULL, &err, "export", "42", "-o", exp), 1);
    ck_assert_msg(strstr(err, "42"), "%s", err);
    free(err);

    ck_assert_int_eq(CLI(NULL, &err, "extend", "1"), 2);
    ck_assert_msg(strstr(err, "--epochs"), "%s", err);
    free(err);
    /* the extended run is a new job with its own schedule: the rules on
     * the run's length apply to its epochs */
    ck_assert_int_eq(CLI(NULL, &err, "extend", "1", "--epochs", "1", "--set",
                         "optimizer.schedule.warmup_steps=100"), 1);
    ck_assert_msg(strstr(err, "optimizer.schedule.warmup_steps: 100, but the "
                         "run has 100 steps (1 epoch x 100 steps of "
                         "synthetic input): the learning rate would never "
                         "leave the warm-up"), "%s", err);
    free(err);
    ck_assert_int_eq(CLI(NULL, &err, "extend", "42", "--epochs", "1"), 1);
    ck_assert_msg(strstr(err, "no job 42"), "%s", err);
    free(err);
    ck_assert_int_eq(CLI(NULL, NULL, "submit", job_file()), 0);
    ck_assert_int_eq(CLI(NULL, &err, "extend", "3", "--epochs", "1"), 1);
    ck_assert_msg(strstr(err, "extend continues a completed job"), "%s", err);
    free(err);
    /* With --json, trainctl's own refusals (and failures) are JSON on
     * stdout, as the daemon's are: stdout was empty, the message on
     * stderr.  A job that ended before watch --json came is its state
     * event (watch --json printed nothing). */
    char bad[256];
    snprintf(bad, sizeof bad, "%s/no/such/dir/c.png", H.dir);
    static const char *const cls[] = {"conflict", "conflict", "failed",
                                       "failed"};
    /* job 4 waits behind job 3, with no checkpoint for sure (a running
     * job 3 may have one by now, which export takes) */
    ck_assert_int_eq(CLI(NULL, NULL, "submit", job_file()), 0);
    static const char *const names[] = {"job 3 ", "job 4 ", "no/such/dir",
                                        "no/such/dir"};
    const char *const refusals[][8] = {
        {"extend", "3", "--epochs", "1", "--json", NULL},
        {"export", "4", "-o", exp, "--json", NULL},
        {"plot", "1", "-o", bad, "--json", NULL},
        {"trace", "3", "-o", bad, "--json", NULL},
    };
    for (size_t i = 0; i < sizeof refusals / sizeof refusals[0]; i++) {
        ck_assert_int_eq(th_cli(&H, &out, &err, refusals[i]), 1);
        r = json_loads(out, 0, NULL);
        ck_assert_msg(r, "%s --json: not JSON: '%s' (%s)", refusals[i][0],
                      out, err);
        json_t *e = json_object_get(r, "error");
        ck_assert_str_eq(json_string_value(json_object_get(e, "class")),
                         cls[i]);
        ck_assert_msg(strstr(json_string_value(json_object_get(e, "desc")),
                             names[i]),
                      "%s", out);
        json_decref(r);
        free(out);
        free(err);
    }
    ck_assert_int_eq(CLI(&out, NULL, "watch", "1", "--json"), 0);
    r = json_loads(out, 0, NULL);
    ck_assert_msg(r, "watch --json: not JSON: '%s'", out);
    ck_assert_str_eq(json_string_value(json_object_get(r, "event")), "state");
    ck_assert_str_eq(json_string_value(json_object_get(
                         json_object_get(r, "data"), "state")), "completed");
    json_decref(r);
    free(out);
    ck_assert_int_eq(CLI(NULL, NULL, "cancel", "4"), 0);
    ck_assert_int_eq(CLI(NULL, NULL, "cancel", "3"), 0);
    ck_assert_int_eq(CLI(&out, NULL, "watch", "3", "--json"), 1);
    ck_assert_msg(strstr(out, "\"state\":\"cancelled\""), "%s", out);
    free(out);
}
END_TEST

/* plot: usage errors, an unknown job, and a completed job's curves.  A
 * daemon whose show has no "history" and "curve" yet (before issue 18's
 * daemon side is merged) gives the "nothing to draw" refusal; one that
 * has them gives a PNG of the asked size with one epoch drawn. */
START_TEST(test_plot)
{
    char *out, *err, png[256];
    snprintf(png, sizeof png, "%s/curves.png", H.dir);
    ck_assert_int_eq(CLI(NULL, &err, "plot", "1"), 2);
    ck_assert_msg(strstr(err, "-o FILE.png is required"), "%s", err);
    free(err);
    ck_assert_int_eq(CLI(NULL, &err, "plot", "1", "-o", png, "--size",
                         "300x20"), 2);
    ck_assert_msg(strstr(err, "--size"), "%s", err);
    free(err);
    ck_assert_int_eq(CLI(NULL, &err, "plot", "42", "-o", png), 1);
    ck_assert_msg(strstr(err, "no job 42"), "%s", err);
    free(err);

    ck_assert_int_eq(CLI(NULL, NULL, "submit", job_file_epochs(1),
                         "--follow"), 0);
    ck_assert_int_eq(CLI(&out, NULL, "show", "1", "--json"), 0);
    json_t *r = json_loads(out, 0, NULL);
    json_t *job = json_object_get(r, "job");
    int has = json_array_size(json_object_get(job, "history")) +
              json_array_size(json_object_get(job, "curve")) > 0;
    json_decref(r);
    free(out);
    int rc = CLI(&out, &err, "plot", "1", "-o", png, "--size", "640x480",
                 "--json");
    if (!has) {
        ck_assert_int_eq(rc, 1);
        ck_assert_msg(strstr(err, "job 1 has no finished epoch or metrics "
                                  "window yet"), "%s", err);
    } else {
        ck_assert_msg(rc == 0, "%s", err);
        r = json_loads(out, 0, NULL);
        ck_assert_msg(r, "%s", out);
        ck_assert_str_eq(json_string_value(json_object_get(r, "path")), png);
        ck_assert_int_eq(json_integer_value(json_object_get(r, "width")),
                         640);
        ck_assert_int_eq(json_integer_value(json_object_get(
                             json_object_get(r, "points"), "epochs")), 1);
        json_decref(r);
        size_t n;
        uint8_t *f = td_test_slurp(H.dir, "curves.png", &n);
        /* the IHDR: width and height, big-endian, at bytes 16 and 20 */
        ck_assert_uint_gt(n, 24);
        ck_assert_mem_eq(f + 16, "\0\0\x02\x80\0\0\x01\xe0", 8);
        free(f);
    }
    free(out);
    free(err);
    /* Two jobs compared in one PNG: a "jobs" entry each. */
    ck_assert_int_eq(CLI(NULL, NULL, "submit", job_file_epochs(1),
                         "--follow"), 0);
    rc = CLI(&out, &err, "plot", "1", "2", "-o", png, "--json");
    if (!has) {
        ck_assert_int_eq(rc, 1);
        ck_assert_msg(strstr(err, "no job has a finished epoch"), "%s", err);
    } else {
        ck_assert_msg(rc == 0, "%s", err);
        r = json_loads(out, 0, NULL);
        ck_assert_msg(r, "%s", out);
        json_t *jobs = json_object_get(r, "jobs");
        ck_assert_int_eq(json_array_size(jobs), 2);
        ck_assert_int_eq(json_integer_value(json_object_get(
                             json_array_get(jobs, 1), "job")), 2);
        ck_assert_int_eq(json_integer_value(json_object_get(
                             json_array_get(jobs, 1), "epochs")), 1);
        json_decref(r);
        free(out);
        free(err);
        /* a local failure is JSON on stdout, as for one job */
        rc = CLI(&out, &err, "plot", "1", "2", "-o", "/nonexistent/x.png",
                 "--json");
        ck_assert_int_eq(rc, 1);
        r = json_loads(out, 0, NULL);
        ck_assert_msg(r && json_object_get(r, "error"), "%s", out);
        json_decref(r);
    }
    free(out);
    free(err);
    ck_assert_int_eq(CLI(NULL, &err, "plot", "1", "2", "3", "4", "5", "6",
                         "7", "8", "9", "10", "11", "-o", png), 2);
    ck_assert_msg(strstr(err, "11 jobs: at most 10"), "%s", err);
    free(err);
    ck_assert_int_eq(CLI(NULL, &err, "plot", "1", "42", "-o", png), 1);
    ck_assert_msg(strstr(err, "no job 42"), "%s", err);
    free(err);
}
END_TEST

START_TEST(test_config_and_version)
{
    char *out, *err;
    ck_assert_int_eq(CLI(&out, NULL, "config", "get", "--json"), 0);
    json_t *r = json_loads(out, 0, NULL);
    ck_assert_ptr_nonnull(json_object_get(json_object_get(r, "settings"),
                                          "checkpoint_keep"));
    json_decref(r);
    free(out);
    /* the values in one column: max_connections_per_user, longer than
     * the 24 characters the keys were padded to, pushed its value out */
    ck_assert_int_eq(CLI(&out, NULL, "config", "get"), 0);
    int col = -1;
    for (char *l = strtok(out, "\n"); l; l = strtok(NULL, "\n")) {
        char *v = l + strcspn(l, " ");
        v += strspn(v, " ");
        ck_assert_msg(col < 0 || v - l == col, "'%s': value at %d, not %d",
                      l, (int)(v - l), col);
        col = (int)(v - l);
    }
    free(out);
    ck_assert_int_eq(CLI(&out, NULL, "config", "set", "checkpoint_keep", "5"),
                     0);
    ck_assert_ptr_nonnull(strstr(out, "checkpoint_keep = 5"));
    free(out);
    ck_assert_int_eq(CLI(&out, NULL, "config", "get", "checkpoint_keep"), 0);
    ck_assert_ptr_nonnull(strstr(out, "= 5"));
    free(out);
    /* the settings are the defaults of jobs submitted after: a spec
     * without checkpoint.keep, checkpoint.every_steps or input.prefetch
     * gets them, one that names them keeps its own */
    ck_assert_int_eq(CLI(&out, NULL, "config", "set", "prefetch", "6"), 0);
    free(out);
    ck_assert_int_eq(CLI(&out, NULL, "config", "set",
                         "checkpoint_every_steps", "70"), 0);
    free(out);
    char bare[160];
    snprintf(bare, sizeof bare, "%s/bare.json", H.dir);
    json_t *js = th_tiny_spec(1, 0);
    json_object_del(js, "checkpoint");
    json_object_set_new(json_object_get(js, "data"), "train",
                        json_string("d/t"));
    ck_assert_int_eq(json_dump_file(js, bare, 0), 0);
    json_decref(js);
    ck_assert_int_eq(CLI(&out, NULL, "submit", bare, "--json"), 0);
    r = json_loads(out, 0, NULL);
    json_int_t id = json_integer_value(json_object_get(
        json_object_get(r, "ok"), "job"));
    json_decref(r);
    free(out);
    char ids[32];
    snprintf(ids, sizeof ids, "%lld", (long long)id);
    ck_assert_int_eq(CLI(&out, NULL, "show", ids, "--json"), 0);
    r = json_loads(out, 0, NULL);
    json_t *sp = json_object_get(json_object_get(r, "job"), "spec");
    json_t *ck = json_object_get(sp, "checkpoint");
    ck_assert_int_eq(json_integer_value(json_object_get(ck, "keep")), 5);
    ck_assert_int_eq(json_integer_value(json_object_get(ck, "every_steps")),
                     70);
    ck_assert_int_eq(json_integer_value(json_object_get(
                         json_object_get(sp, "input"), "prefetch")), 6);
    json_decref(r);
    free(out);
    ck_assert_int_eq(CLI(&out, NULL, "submit", job_file(), "--set",
                         "input.prefetch=\"auto\"", "--json"), 0);
    r = json_loads(out, 0, NULL);
    id = json_integer_value(json_object_get(json_object_get(r, "ok"), "job"));
    json_decref(r);
    free(out);
    snprintf(ids, sizeof ids, "%lld", (long long)id);
    ck_assert_int_eq(CLI(&out, NULL, "show", ids, "--json"), 0);
    r = json_loads(out, 0, NULL);
    sp = json_object_get(json_object_get(r, "job"), "spec");
    ck = json_object_get(sp, "checkpoint");
    ck_assert_int_eq(json_integer_value(json_object_get(ck, "keep")), 3);
    ck_assert_int_eq(json_integer_value(json_object_get(ck, "every_steps")),
                     0);
    ck_assert_str_eq(json_string_value(json_object_get(
                         json_object_get(sp, "input"), "prefetch")), "auto");
    json_decref(r);
    free(out);
    ck_assert_int_eq(CLI(NULL, NULL, "cancel", ids), 0);
    ck_assert_int_eq(CLI(NULL, &err, "config", "set", "workers", "-1"), 1);
    ck_assert_ptr_nonnull(strstr(err, "workers: must be in"));
    free(err);
    ck_assert_int_eq(CLI(NULL, &err, "config", "fiddle"), 2);
    free(err);
    ck_assert_int_eq(CLI(&out, NULL, "version", "--json"), 0);
    r = json_loads(out, 0, NULL);
    ck_assert_str_eq(json_string_value(json_object_get(r, "daemon")),
                     json_string_value(json_object_get(r, "client")));
    free(out);
    /* the text form says what "auto" trains in on this CPU */
    const json_t *cpu = json_object_get(json_object_get(r, "devices"), "cpu");
    ck_assert_ptr_nonnull(cpu);
    char want[64];
    snprintf(want, sizeof want, ": bf16 %s",
             !json_is_true(json_object_get(cpu, "bf16")) ? "no\n"
             : json_is_true(json_object_get(cpu, "bf16_auto"))
                 ? "yes, auto bf16"
                 : "yes, auto fp32");
    ck_assert_int_eq(CLI(&out, NULL, "version"), 0);
    ck_assert_msg(strstr(out, "cpu:") && strstr(out, want), "%s", out);
    json_decref(r);
    free(out);
}
END_TEST

/* On a terminal, watch redraws its block in place (util-linux `script`
 * gives it a pseudo-terminal). */
START_TEST(test_watch_on_a_terminal)
{
    if (access("/usr/bin/script", X_OK) != 0) {
        printf("skipped: util-linux script not installed\n");
        return;
    }
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "TRAIND_SOCKET=%s script -qec '%s/client/trainctl submit %s "
             "--follow' /dev/null", H.sock, getenv("TD_BUILD_ROOT"),
             job_file_epochs(2));
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    static char out[1 << 20];
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    ck_assert_int_eq(pclose(p), 0);
    ck_assert_msg(strstr(out, "\033[K"), "no in-place redraw: %s", out);
    /* up over the block (its height depends on the verdict's wrapping) */
    int up = 0;
    for (const char *e = strstr(out, "\033["); e && !up;
         e = strstr(e + 1, "\033[")) {
        int lines = 0, used = 0;
        up = sscanf(e + 2, "%dA%n", &lines, &used) == 1 && used > 0 &&
             lines >= 3;
    }
    ck_assert_msg(up, "never moved back up: %s", out);
    ck_assert_ptr_nonnull(strstr(out, "verdict: "));
    ck_assert_ptr_nonnull(strstr(out, "job 1 completed"));
}
END_TEST

/* trace on a terminal says what it waits for and how far the recording
 * is (the daemon's trace_progress events), in place; without one, and
 * with --json, stdout has the summary alone and stderr nothing. */
START_TEST(test_trace_shows_progress)
{
    if (access("/usr/bin/script", X_OK) != 0) {
        printf("skipped: util-linux script not installed\n");
        return;
    }
    char cmd[1024], path[160], *out, *err;
    ck_assert_int_eq(CLI(NULL, NULL, "submit", job_file()), 0);
    int fd = th_connect(&H, NULL);
    ck_assert(th_wait_state(fd, 1, "running", 20000));
    close(fd);
    snprintf(path, sizeof path, "%s/t.json", H.dir);
    snprintf(cmd, sizeof cmd,
             "TRAIND_SOCKET=%s script -qec '%s/client/trainctl trace 1 -n 5 "
             "-o %s' /dev/null", H.sock, getenv("TD_BUILD_ROOT"), path);
    int st;
    char *tty = td_test_capture(cmd, &st);
    ck_assert_int_eq(st, 0);
    /* armed, then every step of a short trace, each redrawn in place */
    static const char *const want[] = {
        "\r\033[Krecording 5 steps of job 1: 0/5",
        "\r\033[Krecording 5 steps of job 1: 1/5",
        "\r\033[Krecording 5 steps of job 1: 4/5",
        "\r\033[Kjob 1: 5 step(s) traced"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        ck_assert_msg(strstr(tty, want[i]), "no '%s' in: %s", want[i] + 4,
                      tty);
    free(tty);
    json_t *tr = json_load_file(path, 0, NULL);
    ck_assert_ptr_nonnull(json_object_get(tr, "traceEvents"));
    json_decref(tr);
    ck_assert_int_eq(CLI(&out, &err, "trace", "1", "-n", "5", "-o", path,
                         "--json"), 0);
    ck_assert_str_eq(err, "");
    json_error_t je;
    json_t *r = json_loads(out, 0, &je); /* one JSON line, nothing else */
    ck_assert_msg(r, "%s: %s", je.text, out);
    ck_assert_int_eq(json_integer_value(json_object_get(r, "steps")), 5);
    json_decref(r);
    free(out);
    free(err);
    ck_assert_int_eq(CLI(&out, &err, "trace", "1", "-n", "3", "-o", path), 0);
    ck_assert_str_eq(err, "");
    ck_assert_msg(strncmp(out, "job 1: 3 step(s) traced", 23) == 0, "%s",
                  out);
    free(out);
    free(err);
    ck_assert_int_eq(CLI(NULL, NULL, "cancel", "1"), 0);
}
END_TEST

/* A bf16 job's start is timing its plan (cpu_tune.c): its progress lines
 * are the job's (its log, its watchers), and plain `watch` prints them
 * before the first step.  Job 2 waits behind job 1 until watch has
 * attached (its first line), so none is missed. */
START_TEST(test_watch_shows_the_start)
{
    if (!td_cpu_caps_get()->bf16) {
        printf("skipped: no bf16 on this CPU (no plan to time)\n");
        return;
    }
    char path[160], cmd[1024], line[2048];
    ck_assert_int_eq(CLI(NULL, NULL, "submit", job_file()), 0);
    json_t *spec = th_spec(1, 0, 16, 16);
    json_object_set_new(spec, "precision", json_string("bf16"));
    snprintf(path, sizeof path, "%s/bf16.json", H.dir);
    ck_assert_int_eq(json_dump_file(spec, path, 0), 0);
    json_decref(spec);
    char *out = NULL, *err = NULL;
    ck_assert_msg(CLI(&out, &err, "submit", path) == 0, "%s%s", out, err);
    free(out);
    free(err);
    snprintf(cmd, sizeof cmd, "TRAIND_SOCKET=%s %s/client/trainctl watch 2",
             H.sock, getenv("TD_BUILD_ROOT"));
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    ck_assert_ptr_nonnull(fgets(line, sizeof line, p));
    ck_assert_msg(strstr(line, "job 2 pending"), "%s", line);
    ck_assert_int_eq(CLI(NULL, NULL, "cancel", "1"), 0);
    int timing = 0, measured = 0, before = 0;
    while (fgets(line, sizeof line, p)) {
        int log = strncmp(line, "job 2 log: ", 11) == 0;
        if (log && strstr(line, "cpu backend: timing "))
            timing++;
        if (log && strstr(line, "cpu backend: plan measured in"))
            measured++;
        if (strstr(line, "job 2 epoch 1 step") && measured)
            before = 1; /* the first window came after the plan */
    }
    ck_assert_int_eq(pclose(p), 0);
    ck_assert_int_ge(timing, 1);
    ck_assert_int_eq(measured, 1);
    ck_assert_int_eq(before, 1);
    /* the job's log keeps them */
    ck_assert_int_eq(CLI(&out, NULL, "logs", "2"), 0);
    ck_assert_msg(strstr(out, "cpu backend: plan measured in"), "%s", out);
    free(out);
}
END_TEST

/* export of a running job: "job N has no checkpoint yet (it is running)"
 * while show listed its checkpoints (only an ended job has a result's
 * last_checkpoint); now its newest checkpoint on disk. */
START_TEST(test_export_of_a_running_job)
{
    int fd = th_connect(&H, NULL);
    int64_t id = th_submit(fd, th_tiny_spec(100000, 10));
    ck_assert(th_wait_state(fd, id, "running", 10000));
    int n = 0;
    for (int t = 0; t < 200 && n < 2; t++) { /* two, so "newest" counts */
        usleep(50000);
        json_t *job = th_show_job(fd, id);
        n = (int)json_array_size(json_object_get(job, "checkpoints"));
        json_decref(job);
    }
    ck_assert_int_ge(n, 2);
    char ids[32], o[200], *out, *err;
    snprintf(ids, sizeof ids, "%lld", (long long)id);
    snprintf(o, sizeof o, "%s/running.st", H.dir);
    int rc = CLI(&out, &err, "export", ids, "-o", o, "--json");
    ck_assert_msg(rc == 0, "exit %d: %s%s", rc, out, err);
    json_t *r = json_loads(out, 0, NULL);
    const char *src = json_string_value(json_object_get(r, "source"));
    char dir[64];
    snprintf(dir, sizeof dir, "/checkpoints/%lld/ckpt-", (long long)id);
    ck_assert_msg(src && strstr(src, dir), "%s", out);
    /* the newest then: at least the step of the second one */
    ck_assert_int_ge(json_integer_value(json_object_get(r, "step")), 20);
    json_decref(r);
    free(out);
    free(err);
    json_decref(th_job_request(fd, "cancel", id));
    ck_assert(th_wait_state(fd, id, "cancelled", 30000));
    close(fd);
}
END_TEST

static Suite *cli_suite(void)
{
    Suite *s = suite_create("cli");
    TCase *tc = tcase_create("trainctl");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_every_command_has_help);
    tcase_add_test(tc, test_usage_errors_exit_2);
    tcase_add_test(tc, test_unreachable_exit_3);
    tcase_add_test(tc, test_usage_checked_before_connecting);
    tcase_add_test(tc, test_refused_trace_keeps_file);
    tcase_add_test(tc, test_short_option_like_a_number);
    tcase_add_test(tc, test_socket_permission_error);
    tcase_add_test(tc, test_submit_queue_show_json);
    tcase_add_test(tc, test_job_actions_and_refusals);
    tcase_add_test(tc, test_config_and_version);
    tcase_add_test(tc, test_submit_follow_to_completion);
    tcase_add_test(tc, test_extend_completed_job);
    tcase_add_test(tc, test_plot);
    tcase_add_test(tc, test_watch_on_a_terminal);
    tcase_add_test(tc, test_trace_shows_progress);
    tcase_add_test(tc, test_watch_shows_the_start);
    tcase_add_test(tc, test_export_of_a_running_job);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(cli_suite)
