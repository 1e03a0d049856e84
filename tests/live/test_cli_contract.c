/* test_cli_contract.c - the CLI contract, command by command: every
 * trainctl command (the list comes from `trainctl --help`, i.e. the
 * dispatch table in client/main.c, and must match the table below) has
 * --help listing every option it parses; refuses unknown options, missing
 * and extra arguments and bad numbers with exit 2 and a message naming
 * them; with --json prints nothing but JSON on stdout, on success and on a
 * refusal (exit 1), and nothing on stdout for usage errors (2) and an
 * unreachable daemon (3), as docs/trainctl.md says; and takes --socket
 * (before or after the command, PATH or =PATH) and $TRAIND_SOCKET alike.
 * traind's own options (--run, --help-config, --version) likewise.
 */
#define _GNU_SOURCE
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon_harness.h"
#include "tdtest.h"

TH_FIXTURE(H)

#define MAXARG 16

/* One command: its name, the options its flag table parses (besides
 * --json, --socket and --help), how many positionals it needs, whether
 * it takes more than its minimum, and the arguments that reach the daemon
 * about a job that does not exist (NULL: it runs locally). */
typedef struct row {
    const char *cmd;
    const char *opts[16];
    int min_pos;
    int extra_ok; /* more positionals than min_pos are fine */
    const char *nf[MAXARG];
} row;

/* "{d}" in an argument is the harness's temporary folder. */
static const row rows[] = {
    {"submit", {"--name", "--set", "-f", "--follow"}, 1, 0, {NULL}},
    {"queue", {"--state", "--last", "--mine", "--active", "--all"}, 0, 0,
     {"queue", "--state", "running"}},
    {"ls", {"--state", "--last", "--mine", "--active", "--all"}, 0, 0,
     {"ls"}},
    {"show", {NULL}, 1, 0, {"show", "999"}},
    {"watch", {NULL}, 1, 0, {"watch", "999"}},
    {"logs", {"-f", "--follow", "-n", "--lines"}, 1, 0, {"logs", "999"}},
    {"cancel", {NULL}, 1, 0, {"cancel", "999"}},
    {"pause", {NULL}, 1, 0, {"pause", "999"}},
    {"resume", {NULL}, 1, 0, {"resume", "999"}},
    {"checkpoint", {NULL}, 1, 0, {"checkpoint", "999"}},
    {"rm", {"-f", "--force", "--state", "--ended-before", "--mine",
            "--dry-run"}, 1, 1, {"rm", "999"}},
    {"extend", {"--epochs", "--set", "--name", "-f", "--follow"}, 1, 0,
     {"extend", "999", "--epochs", "1"}},
    {"history", {"--csv", "--windows"}, 1, 1, {"history", "999"}},
    {"plot", {"-o", "--output", "--size"}, 1, 1,
     {"plot", "999", "-o", "{d}/p.png"}},
    {"trace", {"-n", "--steps", "-o", "--output"}, 1, 0,
     {"trace", "999", "-o", "{d}/t.json"}},
    {"top", {"-d", "--interval", "-1", "--once"}, 0, 0, {"top", "--once"}},
    {"config", {NULL}, 1, 1, {"config", "get", "no_such_key"}},
    {"version", {NULL}, 0, 0, {NULL}},
    {"pack",
     {"--idx-images", "--idx-labels", "--idx-dir", "--imagefolder", "-o",
      "--output", "--quality", "--shard-size", "--prefix", "--index",
      "--restart", "--threads", "--val-fraction", "--seed"},
     0, 0, {NULL}},
    {"bench-input",
     {"--data", "--size", "--channels", "--augment", "--workers", "--batch",
      "--epochs", "--prefetch", "--seed", "--layout", "--eval", "--spec"},
     0, 0, {NULL}},
    {"plan",
     {"--batch", "--precision", "--input", "--classes", "--optimizer",
      "--workspace-mib"},
     1, 0, {NULL}},
    {"export", {"-o", "--output", "--format"}, 1, 0,
     {"export", "999", "-o", "{d}/x.st"}},
    {"eval", {"-b", "--batch", "--workers", "--daemon", "--device"}, 2, 0,
     {"eval", "999", "{d}"}},
    {"predict", {"-k", "--top", "--daemon", "--device"}, 2, 1,
     {"predict", "999", "{d}/a.jpg"}},
};
#define NROWS (sizeof rows / sizeof rows[0])

/* Runs trainctl with argv ("{d}" expanded), TRAIND_SOCKET = sock. */
static int run(const char *sock, char **out, char **err,
               const char *const *argv)
{
    static char buf[MAXARG + 4][512];
    const char *args[MAXARG + 4];
    int n = 0;
    for (; argv[n] && n < MAXARG + 3; n++) {
        const char *a = argv[n], *d = strstr(a, "{d}");
        if (d) {
            snprintf(buf[n], sizeof buf[n], "%.*s%s%s", (int)(d - a), a,
                     H.dir, d + 3);
            a = buf[n];
        }
        args[n] = a;
    }
    args[n] = NULL;
    td_harness h = H;
    snprintf(h.sock, sizeof h.sock, "%s", sock);
    return th_cli(&h, out, err, args);
}

#define RUN(sock, out, err, ...)                                             \
    run((sock), (out), (err), (const char *const[]){__VA_ARGS__, NULL})

/* argv = base (NULL-terminated) followed by the rest. */
static void cat_args(const char **dst, const char *const *base,
                     const char *const *rest)
{
    int n = 0;
    for (int i = 0; base[i]; i++)
        dst[n++] = base[i];
    for (int i = 0; rest && rest[i]; i++)
        dst[n++] = rest[i];
    dst[n] = NULL;
}

/* Every line of out is a JSON object; returns how many there are. */
static int json_lines(const char *what, const char *out)
{
    int n = 0;
    const char *p = out;
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        json_error_t je;
        json_t *o = json_loadb(p, len, 0, &je);
        ck_assert_msg(json_is_object(o), "%s: stdout line %d is not a JSON "
                      "object (%s): %.*s", what, n + 1, je.text, (int)len, p);
        json_decref(o);
        n++;
        p += len + (nl ? 1 : 0);
    }
    return n;
}

static char none_sock[160];

static void none_path(void)
{
    snprintf(none_sock, sizeof none_sock, "%s/none.sock", H.dir);
}

START_TEST(test_table_is_the_dispatch_table)
{
    char *out;
    ck_assert_int_eq(RUN(H.sock, &out, NULL, "--help"), 0);
    const char *p = strstr(out, "Commands:\n");
    ck_assert_ptr_nonnull(p);
    size_t seen = 0;
    char name[64];
    for (p = strchr(p, '\n') + 1; sscanf(p, "  %63s", name) == 1 &&
                                  strncmp(p, "  ", 2) == 0;
         p = strchr(p, '\n') + 1) {
        size_t i = 0;
        while (i < NROWS && strcmp(rows[i].cmd, name) != 0)
            i++;
        ck_assert_msg(i < NROWS, "command '%s' of trainctl --help has no "
                      "row in this test", name);
        seen++;
    }
    ck_assert_int_eq(seen, NROWS);
    free(out);
}
END_TEST

/* 1 if word occurs in text as a whole option name. */
static int has_word(const char *text, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = strstr(text, word); p; p = strstr(p + 1, word)) {
        char before = p == text ? ' ' : p[-1], after = p[n];
        if (before != '-' && (before < 'a' || before > 'z') &&
            after != '-' && (after < 'a' || after > 'z'))
            return 1;
    }
    return 0;
}

START_TEST(test_help_lists_every_option)
{
    for (size_t i = 0; i < NROWS; i++) {
        const row *r = &rows[i];
        char *out, *err, head[64];
        ck_assert_int_eq(RUN(H.sock, &out, &err, r->cmd, "--help"), 0);
        snprintf(head, sizeof head, "usage: trainctl %s",
                 strcmp(r->cmd, "ls") == 0 ? "queue" : r->cmd);
        ck_assert_msg(strncmp(out, head, strlen(head)) == 0, "%s: %s",
                      r->cmd, out);
        ck_assert_msg(err[0] == '\0', "%s --help: stderr %s", r->cmd, err);
        for (int k = 0; r->opts[k]; k++)
            ck_assert_msg(has_word(out, r->opts[k]), "trainctl %s --help "
                          "does not name %s", r->cmd, r->opts[k]);
        if (strcmp(r->cmd, "pack") && strcmp(r->cmd, "bench-input"))
            ck_assert_msg(has_word(out, "--json"), "%s --help: no --json",
                          r->cmd);
        free(out);
        free(err);
    }
}
END_TEST

START_TEST(test_unknown_option_and_positionals)
{
    for (size_t i = 0; i < NROWS; i++) {
        const row *r = &rows[i];
        char *out, *err;
        const char *argv[MAXARG + 4];
        /* an unknown option, after what would otherwise run */
        const char *pos[] = {"1", "2", NULL};
        const char *tail[] = {"--no-such-opt", "--json", NULL};
        const char *base[] = {r->cmd, NULL};
        const char *mid[MAXARG];
        int n = 0;
        for (int k = 0; k < r->min_pos; k++)
            mid[n++] = pos[k];
        for (int k = 0; tail[k]; k++)
            mid[n++] = tail[k];
        mid[n] = NULL;
        cat_args(argv, base, mid);
        ck_assert_int_eq(run(H.sock, &out, &err, argv), 2);
        ck_assert_msg(strstr(err, "--no-such-opt"), "%s: %s", r->cmd, err);
        ck_assert_msg(out[0] == '\0', "%s: stdout %s", r->cmd, out);
        free(out);
        free(err);
        if (r->min_pos > 0) { /* none of its positionals */
            ck_assert_int_eq(RUN(H.sock, &out, &err, r->cmd, "--json"), 2);
            ck_assert_msg(strstr(err, r->cmd) && out[0] == '\0', "%s: %s",
                          r->cmd, err);
            free(out);
            free(err);
        }
        if (!r->extra_ok) { /* one too many */
            mid[0] = NULL;
            n = 0;
            for (int k = 0; k <= r->min_pos; k++)
                mid[n++] = k < r->min_pos ? (strcmp(r->cmd, "config")
                                                 ? pos[k] : "get")
                                          : "7";
            mid[n] = NULL;
            cat_args(argv, base, mid);
            ck_assert_int_eq(run(none_sock, &out, &err, argv), 2);
            ck_assert_msg(strstr(err, "'7'"), "%s: %s", r->cmd, err);
            free(out);
            free(err);
        }
    }
}
END_TEST

/* A bad number is a usage error naming its option, daemon or not. */
START_TEST(test_bad_numbers)
{
    static const struct {
        const char *argv[10];
        const char *names; /* in the message */
    } cases[] = {
        {{"logs", "1", "-n", "abc"}, "--lines"},
        {{"logs", "1", "-n", "-5"}, "--lines"},
        {{"logs", "1", "--lines", "0"}, "--lines"},
        {{"logs", "1", "-n", "99999999999999999999"}, "--lines"},
        {{"trace", "1", "-o", "{d}/t", "-n", "abc"}, "--steps"},
        {{"trace", "1", "-o", "{d}/t", "--steps", "-5"}, "--steps"},
        {{"trace", "1", "-o", "{d}/t", "--steps", "10001"}, "--steps"},
        {{"top", "-d", "abc"}, "--interval"},
        {{"top", "--interval", "0"}, "--interval"},
        {{"top", "-d", "-5"}, "--interval"},
        {{"top", "-d", "1e99"}, "--interval"},
        {{"predict", "x.st", "a.jpg", "--top", "0"}, "--top"},
        {{"predict", "x.st", "a.jpg", "-k", "abc"}, "--top"},
        {{"predict", "x.st", "a.jpg", "-k", "99999999999999999999"}, "--top"},
        {{"eval", "x.st", "d", "--batch", "-5"}, "--batch"},
        {{"eval", "x.st", "d", "-b", "99999999999999999999"}, "--batch"},
        {{"eval", "x.st", "d", "--workers", "abc"}, "--workers"},
        {{"extend", "1", "--epochs", "0"}, "--epochs"},
        {{"extend", "1", "--epochs", "99999999999999999999"}, "--epochs"},
        {{"plot", "1", "-o", "{d}/p.png", "--size", "10x10"}, "--size"},
        {{"plot", "1", "-o", "{d}/p.png", "--size", "800x600x2"}, "--size"},
        {{"plan", "fmnist-cnn", "--batch", "0"}, "--batch"},
        {{"plan", "fmnist-cnn", "--classes", "abc"}, "--classes"},
        {{"plan", "fmnist-cnn", "--workspace-mib", "-1"}, "--workspace-mib"},
        {{"plan", "fmnist-cnn", "--input", "3x224"}, "--input"},
        {{"plan", "fmnist-cnn", "--input", "3x224x224junk"}, "--input"},
        {{"plan", "fmnist-cnn", "--input", "3x224x224x9"}, "--input"},
        {{"pack", "--imagefolder", "{d}", "-o", "{d}/o", "--quality", "0"},
         "--quality"},
        {{"pack", "--imagefolder", "{d}", "-o", "{d}/o", "--threads", "-1"},
         "--threads"},
        {{"pack", "--imagefolder", "{d}", "-o", "{d}/o", "--index", "x"},
         "--index"},
        {{"pack", "--imagefolder", "{d}", "-o", "{d}/o", "--shard-size",
          "0"}, "--shard-size"},
        {{"pack", "--imagefolder", "{d}", "-o", "{d}/o", "--val-fraction",
          "1"}, "--val-fraction"},
        {{"pack", "--imagefolder", "{d}", "-o", "{d}/o", "--val-fraction",
          "0.1", "--seed", "-5"}, "--seed"},
        {{"pack", "--imagefolder", "{d}", "-o", "{d}/o", "--val-fraction",
          "0.1", "--seed", "99999999999999999999999"}, "--seed"},
        /* --seed alone chose nothing and was accepted */
        {{"pack", "--imagefolder", "{d}", "-o", "{d}/o", "--seed", "3"},
         "--seed chooses the images --val-fraction holds out"},
        {{"bench-input", "--data", "{d}", "--workers", "0"}, "--workers"},
        {{"bench-input", "--data", "{d}", "--batch", "abc"}, "--batch"},
        {{"bench-input", "--data", "{d}", "--size", "224abc"}, "--size"},
        {{"bench-input", "--data", "{d}", "--seed", "-1"}, "--seed"},
        /* what is missing, named (pack and bench-input printed their
         * usage and nothing else) */
        {{"pack", "--imagefolder", "{d}"}, "-o DIR is required"},
        {{"pack", "-o", "{d}/o"}, "no input"},
        {{"pack", "--idx-images", "{d}/i", "-o", "{d}/o"},
         "--idx-images and --idx-labels go together"},
        {{"bench-input", "--batch", "8"}, "--data PATH is required"},
        {{"show", "-5"}, "'-5' is not a job id"},
        {{"show", "99999999999999999999"}, "is not a job id"},
        {{"cancel", "0"}, "'0' is not a job id"},
        {{"rm", "1", "x"}, "'x' is not a job id"},
        {{"queue", "--last", "0"}, "--last"},
        {{"ls", "--last", "1e3"}, "--last"},
        {{"rm", "--ended-before", "7x"}, "--ended-before"},
        {{"rm", "--state", "running"}, "--state"},
        /* extend sets these: a --set of epochs was applied after --epochs
         * and the summary named the wrong count */
        {{"extend", "1", "--epochs", "1", "--set", "epochs=5"},
         "--set epochs=5: extend sets epochs itself"},
        {{"extend", "1", "--epochs", "1", "--set", "init=/x.st"},
         "--set init=/x.st: extend sets init itself"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out, *err;
        const char *argv[MAXARG + 4];
        const char *j[] = {"--json", NULL};
        cat_args(argv, cases[i].argv, j);
        int rc = run(none_sock, &out, &err, argv);
        ck_assert_msg(rc == 2 && strstr(err, cases[i].names) &&
                      out[0] == '\0', "%s %s ... %s: exit %d, stderr: %s, "
                      "stdout: %s", argv[0], argv[1], argv[3], rc, err, out);
        free(out);
        free(err);
    }
}
END_TEST

/* Without --json the daemon's refusal goes to stderr and stdout stays
 * empty; with it, stdout is JSON (an error object; rm's summary) and
 * stderr stays empty. */
START_TEST(test_refusals_in_json)
{
    for (size_t i = 0; i < NROWS; i++) {
        const row *r = &rows[i];
        if (!r->nf[0] || strcmp(r->cmd, "queue") == 0 ||
            strcmp(r->cmd, "ls") == 0 || strcmp(r->cmd, "top") == 0)
            continue; /* nothing to refuse: checked with the successes */
        char *out, *err;
        int rc = run(H.sock, &out, &err, r->nf);
        ck_assert_msg(rc == 1 && out[0] == '\0' &&
                      (strstr(err, "no job 999") ||
                       strstr(err, "no_such_key")),
                      "%s: exit %d, stdout %s, stderr %s", r->cmd, rc, out,
                      err);
        free(out);
        free(err);
        const char *argv[MAXARG + 4];
        const char *j[] = {"--json", NULL};
        cat_args(argv, r->nf, j);
        rc = run(H.sock, &out, &err, argv);
        ck_assert_msg(rc == 1, "%s --json: exit %d", r->cmd, rc);
        ck_assert_int_eq(json_lines(r->cmd, out), 1);
        ck_assert_msg(strstr(out, "\"error\"") &&
                      (strstr(out, "not_found") || strstr(out, "no_such_key")),
                      "%s: %s", r->cmd, out);
        ck_assert_msg(err[0] == '\0', "%s --json: stderr %s", r->cmd, err);
        free(out);
        free(err);
    }
}
END_TEST

/* An unreachable daemon: exit 3, why on stderr, nothing on stdout, the
 * same whether the path came from --socket (before or after the command,
 * PATH or =PATH) or $TRAIND_SOCKET; --socket wins over the variable. */
START_TEST(test_socket_and_environment_alike)
{
    char eq_none[200], eq_real[200];
    snprintf(eq_none, sizeof eq_none, "--socket=%s", none_sock);
    snprintf(eq_real, sizeof eq_real, "--socket=%s", H.sock);
    for (size_t i = 0; i < NROWS; i++) {
        const row *r = &rows[i];
        if (!r->nf[0])
            continue;
        const char *argv[MAXARG + 4], *pre[MAXARG + 4];
        const char *opts[][3] = {{"--json", NULL},
                                 {"--json", "--socket", none_sock},
                                 {"--json", eq_none, NULL}};
        for (int k = 0; k < 3; k++) {
            char *out, *err;
            cat_args(argv, r->nf, opts[k]);
            /* k == 0: $TRAIND_SOCKET; else --socket over a good variable */
            int rc = run(k ? H.sock : none_sock, &out, &err, argv);
            ck_assert_msg(rc == 3 && out[0] == '\0' &&
                          strstr(err, "cannot reach traind at") &&
                          strstr(err, none_sock),
                          "%s (%d): exit %d, stdout %s, stderr %s", r->cmd,
                          k, rc, out, err);
            free(out);
            free(err);
        }
        /* a good --socket (before or after, PATH or =PATH) over a bad
         * variable reaches the daemon */
        const char *good[][3] = {{"--socket", H.sock, NULL},
                                 {eq_real, NULL}};
        for (int k = 0; k < 4; k++) {
            char *out, *err;
            if (k < 2) {
                cat_args(argv, r->nf, good[k]);
            } else {
                cat_args(pre, good[k - 2], NULL);
                cat_args(argv, pre, r->nf);
            }
            int rc = run(none_sock, &out, &err, argv);
            ck_assert_msg(rc == 0 || rc == 1, "%s (good %d): exit %d, %s",
                          r->cmd, k, rc, err);
            free(out);
            free(err);
        }
    }
    /* An empty --socket is not "no --socket": it names no socket. */
    char *out, *err;
    ck_assert_int_eq(RUN(H.sock, &out, &err, "ls", "--socket", ""), 2);
    ck_assert_msg(strstr(err, "--socket"), "%s", err);
    free(out);
    free(err);
    ck_assert_int_eq(RUN(H.sock, &out, &err, "--socket=", "ls"), 2);
    free(out);
    free(err);
    /* version works without a daemon and says so */
    ck_assert_int_eq(RUN(none_sock, &out, &err, "version", "--json"), 0);
    ck_assert_int_eq(json_lines("version", out), 1);
    ck_assert_msg(!strstr(out, "\"daemon\""), "%s", out);
    free(out);
    free(err);
    /* a global option with no command after it */
    ck_assert_int_eq(RUN(H.sock, &out, &err, "--json"), 2);
    ck_assert_msg(strstr(err, "no command") && !strstr(err, "unknown "
                  "command"), "%s", err);
    free(out);
    free(err);
}
END_TEST

/* Success with --json: stdout has JSON lines only. */
static void ok_json(const char *const *argv)
{
    char *out, *err;
    const char *a[MAXARG + 4];
    const char *j[] = {"--json", NULL};
    cat_args(a, argv, j);
    int rc = run(H.sock, &out, &err, a);
    ck_assert_msg(rc == 0, "%s %s: exit %d, %s", a[0], a[1] ? a[1] : "", rc,
                  err);
    ck_assert_msg(json_lines(a[0], out) >= 1, "%s: no output", a[0]);
    free(out);
    free(err);
}

#define OK_JSON(...) ok_json((const char *const[]){__VA_ARGS__, NULL})

START_TEST(test_successes_in_json)
{
    char job[200];
    snprintf(job, sizeof job, "%s/job.json", H.dir);
    json_t *spec = th_tiny_spec(1, 50);
    ck_assert_int_eq(json_dump_file(spec, job, 0), 0);
    json_decref(spec);
    OK_JSON("submit", job, "--follow");
    OK_JSON("queue");
    OK_JSON("ls", "--state", "completed");
    OK_JSON("show", "1");
    OK_JSON("watch", "1");
    OK_JSON("logs", "1", "-n", "5");
    OK_JSON("logs", "1", "-f");
    OK_JSON("history", "1");
    OK_JSON("history", "1", "1", "--windows");
    OK_JSON("plot", "1", "-o", "{d}/c.png");
    OK_JSON("export", "1", "-o", "{d}/m.safetensors");
    OK_JSON("top", "--once");
    OK_JSON("config", "get");
    OK_JSON("config", "get", "workers");
    OK_JSON("version");
    OK_JSON("plan", "fmnist-cnn", "--batch", "8");
    /* a job that runs: the actions on it */
    spec = th_tiny_spec(100000, 0);
    ck_assert_int_eq(json_dump_file(spec, job, 0), 0);
    json_decref(spec);
    OK_JSON("submit", job);
    int fd = th_connect(&H, NULL);
    ck_assert_int_eq(th_wait_state(fd, 2, "running", 60000), 1);
    OK_JSON("trace", "2", "-n", "2", "-o", "{d}/t.json");
    OK_JSON("checkpoint", "2");
    OK_JSON("pause", "2");
    ck_assert_int_eq(th_wait_state(fd, 2, "suspended", 60000), 1);
    OK_JSON("resume", "2");
    OK_JSON("cancel", "2");
    ck_assert_int_eq(th_wait_state(fd, 2, "cancelled", 60000), 1);
    OK_JSON("extend", "1", "--epochs", "1", "--follow");
    OK_JSON("rm", "1", "2");
    close(fd);
}
END_TEST

/* ---- traind's own options ------------------------------------------- */

/* Runs the built traind with argv; stdout and stderr captured. */
static int traind(char **out, char **err, const char *const *argv)
{
    char exe[512], cmd[4096], of[200], ef[200];
    const char *root = getenv("TD_BUILD_ROOT");
    snprintf(exe, sizeof exe, "%s/daemon/traind", root ? root : "build");
    snprintf(of, sizeof of, "%s/traind.out", H.dir);
    snprintf(ef, sizeof ef, "%s/traind.err", H.dir);
    int n = snprintf(cmd, sizeof cmd, "'%s'", exe);
    for (int i = 0; argv[i]; i++)
        n += snprintf(cmd + n, sizeof cmd - (size_t)n, " '%s'", argv[i]);
    snprintf(cmd + n, sizeof cmd - (size_t)n, " >'%s' 2>'%s' </dev/null", of,
             ef);
    int st = system(cmd);
    size_t len;
    *out = (char *)td_test_slurp(H.dir, "traind.out", &len);
    *err = (char *)td_test_slurp(H.dir, "traind.err", &len);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

#define TRAIND(out, err, ...)                                                \
    traind((out), (err), (const char *const[]){__VA_ARGS__, NULL})

START_TEST(test_traind_options)
{
    char *out, *err, job[200];
    snprintf(job, sizeof job, "%s/job.json", H.dir);
    json_t *spec = th_tiny_spec(1, 0);
    ck_assert_int_eq(json_dump_file(spec, job, 0), 0);
    json_decref(spec);
    ck_assert_int_eq(TRAIND(&out, &err, "--help"), 0);
    ck_assert_msg(strstr(out, "--help-config") && strstr(out, "--run") &&
                  strstr(out, "--json"), "%s", out);
    free(out);
    free(err);
    /* --help-config and --version with --json: one JSON document */
    ck_assert_int_eq(TRAIND(&out, &err, "--help-config", "--json"), 0);
    ck_assert_int_eq(json_lines("--help-config", out), 1);
    ck_assert_msg(strstr(out, "\"workers\""), "%s", out);
    free(out);
    free(err);
    ck_assert_int_eq(TRAIND(&out, &err, "--json", "--version"), 0);
    ck_assert_int_eq(json_lines("--version", out), 1);
    ck_assert_msg(strstr(out, "\"version\""), "%s", out);
    free(out);
    free(err);
    /* bad numbers and --run's options without --run */
    static const char *bad[][6] = {
        {"--run", "JOB", "--steps", "abc"}, {"--run", "JOB", "--steps", "-5"},
        {"--run", "JOB", "--steps", "0"},
        {"--run", "JOB", "--steps", "99999999999999999999"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *a[8];
        for (int k = 0; k < 6; k++)
            a[k] = bad[i][k] && strcmp(bad[i][k], "JOB") == 0 ? job
                                                              : bad[i][k];
        a[6] = NULL;
        ck_assert_int_eq(traind(&out, &err, a), 2);
        ck_assert_msg(strstr(err, "--steps"), "%s", err);
        free(out);
        free(err);
    }
    static const char *orphans[][3] = {{"--json"}, {"--set", "epochs=1"},
                                       {"--resume"}, {"--steps", "5"},
                                       {"--checkpoint-dir", "/tmp"}};
    for (size_t i = 0; i < sizeof orphans / sizeof orphans[0]; i++) {
        ck_assert_int_eq(traind(&out, &err, orphans[i]), 2);
        ck_assert_msg(strstr(err, orphans[i][0]) && strstr(err, "--run"),
                      "%s: %s", orphans[i][0], err);
        /* "--steps is an option of --run JOB.json (--json also of ...)":
         * only --json's message speaks of --version */
        ck_assert_msg(!strstr(err, "--version") == !!strcmp(orphans[i][0],
                                                            "--json"),
                      "%s: %s", orphans[i][0], err);
        free(out);
        free(err);
    }
    /* --run --json: a refusal is a JSON line too (exit 3), a run's lines
     * are JSON */
    ck_assert_int_eq(TRAIND(&out, &err, "--run", job, "--json", "--set",
                            "optimizer.lr=-1"), 3);
    ck_assert_int_eq(json_lines("--run refused", out), 1);
    ck_assert_msg(strstr(out, "\"error\"") && strstr(out, "optimizer.lr"),
                  "%s", out);
    free(out);
    free(err);
    ck_assert_int_eq(TRAIND(&out, &err, "--run", "/nonexistent.json",
                            "--json"), 3);
    ck_assert_int_eq(json_lines("--run missing", out), 1);
    free(out);
    free(err);
    ck_assert_int_eq(TRAIND(&out, &err, "--run", job, "--json", "--steps",
                            "20"), 0);
    ck_assert_int_ge(json_lines("--run", out), 2);
    ck_assert_msg(strstr(out, "\"event\":\"done\""), "%s", out);
    free(out);
    free(err);
}
END_TEST

/* A reply that takes seconds (a submit's checks read every file of a big
 * dataset): on a terminal trainctl says it waits, asks for the checks'
 * progress and shows it, and the reply is printed as usual.  The daemon
 * here is a stand-in on its own socket that sends a progress event after
 * 1.5 s (and one for another request, which is not this one's) and
 * answers the submit after 2.5 s. */
START_TEST(test_slow_reply_shown_on_a_terminal)
{
    if (access("/usr/bin/script", X_OK) != 0) {
        printf("skipped: util-linux script not installed\n");
        return;
    }
    char sock[200], job[200], cmd[1400];
    snprintf(sock, sizeof sock, "%s/slow.sock", H.dir);
    snprintf(job, sizeof job, "%s/slow-job.json", H.dir);
    json_t *spec = th_tiny_spec(1, 0);
    ck_assert_int_eq(json_dump_file(spec, job, 0), 0);
    json_decref(spec);
    int l = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    ck_assert_uint_lt(strlen(sock), sizeof a.sun_path);
    memcpy(a.sun_path, sock, strlen(sock) + 1);
    ck_assert_int_eq(bind(l, (struct sockaddr *)&a, sizeof a), 0);
    ck_assert_int_eq(listen(l, 1), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int c = accept(l, NULL, NULL);
        const char *hello = "{\"hello\":{\"proto\":1,\"version\":\"0.1.0\","
                            "\"device\":\"cpu\"}}\n";
        char req[1 << 16];
        size_t n = 0;
        if (c < 0 || write(c, hello, strlen(hello)) < 0)
            _exit(1);
        while (n < sizeof req - 1 && !memchr(req, '\n', n)) {
            ssize_t r = read(c, req + n, sizeof req - 1 - n);
            if (r <= 0)
                _exit(1);
            n += (size_t)r;
        }
        json_t *rq = json_loadb(req, (size_t)((char *)memchr(req, '\n', n) -
                                              req), 0, NULL);
        if (!json_is_true(json_object_get(json_object_get(rq, "args"),
                                          "progress")))
            _exit(2); /* on a terminal trainctl asks for it */
        usleep(1500000);
        json_int_t rid = json_integer_value(json_object_get(rq, "id"));
        for (int k = 0; k < 2; k++) {
            json_t *ev = json_pack(
                "{s:s, s:f, s:I, s:{s:s, s:s, s:I}}", "event", "progress",
                "ts", 1.0, "request", k ? rid : rid + 1, "data", "stage",
                "listing data.train", "unit", "samples", "done",
                (json_int_t)(k ? 412318 : 999));
            char *el = json_dumps(ev, JSON_COMPACT);
            if (write(c, el, strlen(el)) < 0 || write(c, "\n", 1) < 0)
                _exit(1);
            free(el);
            json_decref(ev);
        }
        usleep(1000000);
        json_t *ok = json_pack("{s:O, s:{s:i, s:s, s:i}}", "id",
                               json_object_get(rq, "id"), "ok", "job", 7,
                               "state", "pending", "steps", 10);
        char *line = json_dumps(ok, JSON_COMPACT);
        ssize_t w = write(c, line, strlen(line));
        w += write(c, "\n", 1);
        _exit(w > 1 ? 0 : 1);
    }
    close(l);
    snprintf(cmd, sizeof cmd, "TRAIND_SOCKET=%s script -qec '%s/client/"
             "trainctl submit %s' /dev/null", sock, getenv("TD_BUILD_ROOT"),
             job);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    static char out[1 << 16];
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    ck_assert_int_eq(pclose(p), 0);
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "the stand-in daemon: status %d (2: the submit did not "
                  "ask for progress)", st);
    ck_assert_msg(strstr(out, "submit: waiting for traind's reply (it "
                              "checks the job's files) (1 s)") &&
                      strstr(out, "submit: traind is listing data.train: "
                                  "412,318 samples (") &&
                      !strstr(out, "999") && strstr(out, "\033[K") &&
                      strstr(out, "submitted job 7: 10 steps"),
                  "%s", out);
    unlink(sock);
}
END_TEST

static Suite *contract_suite(void)
{
    Suite *s = suite_create("cli_contract");
    TCase *tc = tcase_create("contract");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_checked_fixture(tc, none_path, NULL);
    tcase_add_test(tc, test_table_is_the_dispatch_table);
    tcase_add_test(tc, test_help_lists_every_option);
    tcase_add_test(tc, test_unknown_option_and_positionals);
    tcase_add_test(tc, test_bad_numbers);
    tcase_add_test(tc, test_refusals_in_json);
    tcase_add_test(tc, test_socket_and_environment_alike);
    tcase_add_test(tc, test_successes_in_json);
    tcase_add_test(tc, test_traind_options);
    tcase_add_test(tc, test_slow_reply_shown_on_a_terminal);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(contract_suite)
