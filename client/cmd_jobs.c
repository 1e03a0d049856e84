/* cmd_jobs.c - trainctl submit, queue (ls), show, cancel, pause, resume,
 * checkpoint: one request each, a human table or --json. */
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/jsontext.h"
#include "cli.h"
#include "commands.h"
#include "conn.h"
#include "base/clock.h"
#include "jobsel.h"
#include "job/spec.h"
#include "proto/protocol.h"
#include "watch.h"

/* ---- submit ----------------------------------------------------------- */

static const char submit_usage[] =
    "usage: trainctl submit JOB.json|- [--name NAME] [--set KEY=VALUE]...\n"
    "                       [--follow] [--json] [--socket PATH]\n"
    "\n"
    "Submit a training job (a JSON job spec; '-' reads it from stdin) and\n"
    "print its id.  Relative data paths in the spec are resolved against the\n"
    "job file's folder, those given with --set against the current one.\n"
    "\n"
    "  --name NAME        the job's name (default: the spec's \"name\")\n"
    "  --set KEY=VALUE    override a spec field by its dotted path, e.g.\n"
    "                     --set epochs=3 --set optimizer.lr=0.1 (VALUE is\n"
    "                     JSON if it parses as JSON, else a string)\n"
    "  -f, --follow       then watch the job live and exit with its outcome\n"
    "                     (0 completed, 1 failed or cancelled)\n"
    "  --json             print the daemon's reply as JSON\n";

/* Makes relative data.train / data.val and init paths absolute against
 * dir. */
static void td__absolute_paths(json_t *spec, const char *dir)
{
    static const char *keys[] = {"train", "val", "init"};
    json_t *data = json_object_get(spec, "data");
    for (size_t i = 0; i < 3; i++) {
        json_t *obj = i < 2 ? data : spec;
        if (!json_is_object(obj))
            continue;
        json_t *v = json_object_get(obj, keys[i]);
        const char *s = json_string_value(v);
        if (!s || s[0] == '/')
            continue;
        json_t *abs = td_spec_path_join(dir, s);
        if (abs)
            json_object_set_new(obj, keys[i], abs);
    }
}

int td_cmd_submit(int argc, char **argv)
{
    td_cli cli = {.usage = submit_usage};
    const char *name = NULL, *sets[TD_CLI_MAX_MULTI] = {NULL};
    int follow = 0;
    td_cli_flag flags[] = {
        {"--name", NULL, 1, &name, NULL, NULL},
        {"--set", NULL, 1, NULL, NULL, sets},
        {"--follow", "-f", 0, NULL, &follow, NULL},
        {NULL, NULL, 0, NULL, NULL, NULL},
    };
    int rc = td_cli_parse(&cli, argc, argv, flags, 1, 1);
    if (rc)
        return rc < 0 ? TD_EXIT_OK : rc;
    json_error_t je;
    const char *file = cli.pos[0];
    json_t *spec = strcmp(file, "-") == 0
                       ? json_loadf(stdin, JSON_REJECT_DUPLICATES, &je)
                       : json_load_file(file, JSON_REJECT_DUPLICATES, &je);
    if (!spec) {
        const char *what = strcmp(file, "-") == 0 ? "stdin" : file;
        if (je.line < 1) /* not opened or not read: jansson names the file */
            fprintf(stderr, "trainctl submit: %s\n", je.text);
        else
            fprintf(stderr, "trainctl submit: %s: %s (line %d, column %d)\n",
                    what, je.text, je.line, je.column);
        return TD_EXIT_USAGE;
    }
    if (!json_is_object(spec)) {
        fprintf(stderr, "trainctl submit: %s: a job spec is a JSON object\n",
                file);
        json_decref(spec);
        return TD_EXIT_USAGE;
    }
    /* The file's relative data paths against its folder, then --set
     * (relative to the current directory), as traind --run does. */
    char dir[PATH_MAX];
    if (strcmp(file, "-") == 0 || !strchr(file, '/')) {
        if (!getcwd(dir, sizeof dir))
            snprintf(dir, sizeof dir, ".");
    } else {
        snprintf(dir, sizeof dir, "%.*s", (int)(strrchr(file, '/') - file),
                 file);
        char real[PATH_MAX];
        if (realpath(dir, real))
            snprintf(dir, sizeof dir, "%s", real);
    }
    td__absolute_paths(spec, dir);
    for (int i = 0; sets[i]; i++) { /* the same code as traind --run */
        char err[600];
        if (td_spec_apply_set(spec, sets[i], err, sizeof err)) {
            json_decref(spec);
            return td_cli_usage_error(&cli, "--set %s", err);
        }
    }
    char cwd[PATH_MAX];
    if (getcwd(cwd, sizeof cwd))
        td__absolute_paths(spec, cwd); /* what --set gave: from here */

    td_conn c;
    if ((rc = td_conn_open(&c, td_cli_socket(cli.socket))) != TD_EXIT_OK) {
        json_decref(spec);
        return rc;
    }
    json_t *args = json_pack("{s:o}", "spec", spec);
    if (name)
        json_object_set_new(args, "name", json_string(name));
    if (isatty(STDERR_FILENO)) /* the checks' stage and count, shown */
        json_object_set_new(args, "progress", json_true());
    json_t *r = td_conn_request(&c, "submit", args, NULL, NULL);
    if (!r) {
        td_conn_close(&c);
        return TD_EXIT_UNREACHABLE;
    }
    rc = td_conn_check("submit", r, cli.json);
    if (rc == TD_EXIT_OK) {
        json_int_t id = json_integer_value(json_object_get(
            json_object_get(r, "ok"), "job"));
        json_int_t steps = json_integer_value(json_object_get(
            json_object_get(r, "ok"), "steps"));
        if (cli.json)
            td_print_json(r);
        else if (steps > 0) /* a training job: the size of what was asked */
            printf("submitted job %lld: %lld steps\n", (long long)id,
                   (long long)steps);
        else
            printf("submitted job %lld\n", (long long)id);
        fflush(stdout);
        if (follow)
            rc = td_watch_job(&c, id, cli.json, 1);
    }
    json_decref(r);
    td_conn_close(&c);
    return rc;
}

/* ---- queue ------------------------------------------------------------ */

#define TD__STR_(x) #x
#define TD__STR(x) TD__STR_(x)

/* Followed by the states, from lib/proto (the daemon's list). */
static const char queue_usage[] =
    "usage: trainctl queue [--last N] [--mine] [--active] [--state STATE]\n"
    "                      [--all] [--json] [--socket PATH]\n"
    "       trainctl ls ...\n"
    "\n"
    "List jobs, oldest first: id, name, user, state, progress, samples/s,\n"
    "verdict, age, reason.  Every job not yet ended is listed, and of the\n"
    "ended ones (completed, failed, cancelled) the newest "
    TD__STR(TD_QUEUE_ENDED_SHOWN) "; a line in\n"
    "their place says how many older ended jobs are hidden.\n"
    "\n"
    "  --last N       only the N newest jobs of those selected\n"
    "  --mine         only your own jobs (your uid's)\n"
    "  --active       only the jobs not yet ended: pending, running,\n"
    "                 suspended\n"
    "  --state STATE  only the jobs in STATE, one of the job states\n"
    "  --all          hide no ended job (as do --last and --state)\n"
    "  --json         the daemon's reply, {\"jobs\": [row, ...]}: every job,\n"
    "                 or those the options above select\n"
    "\n"
    "The options combine: a job is listed when every one selects it.\n"
    "Exit codes: 0 listed, 1 refused by the daemon, 2 usage, 3 cannot\n"
    "reach the daemon.\n"
    "\n"
    "States: ";

void td_fmt_age(double seconds, char *buf, size_t cap)
{
    if (seconds < 0)
        seconds = 0;
    if (seconds < 120)
        snprintf(buf, cap, "%.0fs", seconds);
    else if (seconds < 7200)
        snprintf(buf, cap, "%.0fm", seconds / 60);
    else if (seconds < 172800)
        snprintf(buf, cap, "%.0fh", seconds / 3600);
    else
        snprintf(buf, cap, "%.0fd", seconds / 86400);
}

void td_fmt_bytes(double b, char *buf, size_t cap)
{
    static const char *const unit[] = {"bytes", "kB", "MB", "GB", "TB"};
    int u = 0;
    while (b >= 1000 && u < 4) {
        b /= 1000;
        u++;
    }
    snprintf(buf, cap, u ? "%.1f %s" : "%.0f %s", b, unit[u]);
}

#define JINT(o, k) ((long long)json_integer_value(json_object_get((o), (k))))
#define JSTR(o, k, d)                                                        \
    (json_string_value(json_object_get((o), (k)))                            \
         ? json_string_value(json_object_get((o), (k)))                      \
         : (d))

/* The user name for a uid, or the number when it has none here. */
static void td__user(long long uid, char *buf, size_t cap)
{
    struct passwd pw, *pwp = NULL;
    char tmp[1024];
    if (getpwuid_r((uid_t)uid, &pw, tmp, sizeof tmp, &pwp) == 0 && pwp)
        snprintf(buf, cap, "%s", pw.pw_name);
    else
        snprintf(buf, cap, "%lld", uid);
}

static void td__progress(json_t *j, char *buf, size_t cap)
{
    long long et = JINT(j, "epochs_total"), st = JINT(j, "steps_total");
    if (st > 0 && et <= 0) /* an eval or predict job: images, no epochs */
        snprintf(buf, cap, "%3.0f%%",
                 100.0 * (double)JINT(j, "step") / (double)st);
    else if (st > 0)
        snprintf(buf, cap, "e%lld/%lld %3.0f%%", JINT(j, "epoch") + 1, et,
                 100.0 * (double)JINT(j, "step") / (double)st);
    else
        snprintf(buf, cap, "-");
}

/* The row's line of the table; now is the wall clock. */
static void td__queue_row(json_t *j, double now)
{
    char prog[32], age[16], sps[16], user[64];
    td__progress(j, prog, sizeof prog);
    td__user(JINT(j, "uid"), user, sizeof user);
    td_fmt_age(now - json_number_value(json_object_get(j, "submitted")), age,
               sizeof age);
    json_t *v = json_object_get(j, "samples_per_s");
    if (v)
        snprintf(sps, sizeof sps, "%.0f", json_number_value(v));
    else
        snprintf(sps, sizeof sps, "-");
    printf("%-5lld %-18.18s %-8.8s %-10s %-12s %9s %-18.18s %5s  %s\n",
           JINT(j, "id"), JSTR(j, "name", "?"), user, JSTR(j, "state", "?"),
           prog, sps, JSTR(j, "verdict", "-"), age, JSTR(j, "reason", ""));
}

/* The table of rows; the oldest `hide` ended rows are left out, a line
 * in their place says so. */
static void td__queue_table(json_t *rows, size_t hide)
{
    printf("%-5s %-18s %-8s %-10s %-12s %9s %-18s %5s  %s\n", "ID", "NAME",
           "USER", "STATE", "PROGRESS", "SAMPLES/S", "VERDICT", "AGE",
           "REASON");
    if (hide)
        printf("(%zu older ended job%s hidden; --all shows them)\n", hide,
               hide == 1 ? "" : "s");
    size_t i;
    json_t *j;
    double now = td_ns_to_s(td_wall_ns());
    json_array_foreach(rows, i, j) {
        if (hide && td_proto_job_state_final(JSTR(j, "state", ""))) {
            hide--;
            continue;
        }
        td__queue_row(j, now);
    }
    if (json_array_size(rows) == 0)
        printf("(no jobs)\n");
}

int td_cmd_queue(int argc, char **argv)
{
    char states[128], usage[sizeof queue_usage + sizeof states];
    td_proto_job_states_list(states, sizeof states);
    snprintf(usage, sizeof usage, "%s%s\n", queue_usage, states);
    td_cli cli = {.usage = usage};
    const char *state = NULL, *last_s = NULL;
    int all = 0;
    td_jobsel sel = {.uid = (unsigned)geteuid()};
    td_cli_flag flags[] = {{"--state", NULL, 1, &state, NULL, NULL},
                           {"--last", NULL, 1, &last_s, NULL, NULL},
                           {"--mine", NULL, 0, NULL, &sel.mine, NULL},
                           {"--active", NULL, 0, NULL, &sel.active, NULL},
                           {"--all", NULL, 0, NULL, &all, NULL},
                           {NULL, NULL, 0, NULL, NULL, NULL}};
    int rc = td_cli_parse(&cli, argc, argv, flags, 0, 0);
    if (rc)
        return rc < 0 ? TD_EXIT_OK : rc;
    /* Usage errors, with or without a daemon (the daemon's list too). */
    if (state && td_proto_job_state(state) < 0)
        return td_cli_usage_error(&cli, "--state: expected one of %s, not "
                                  "'%s'", states, state);
    if (state && sel.active && td_proto_job_state_final(state))
        return td_cli_usage_error(&cli, "--active and --state %s select no "
                                  "job: %s jobs have ended", state, state);
    long last = 0;
    if (last_s && (last = td_jobsel_parse_count(last_s)) < 0)
        return td_cli_usage_error(&cli, "--last: expected a number of jobs "
                                  "(1 or more), not '%s'", last_s);
    if (last && all)
        return td_cli_usage_error(&cli, "--last and --all: give one or the "
                                  "other");
    sel.state = state;
    td_conn c;
    if ((rc = td_conn_open(&c, td_cli_socket(cli.socket))) != TD_EXIT_OK)
        return rc;
    json_t *args = state ? json_pack("{s:s}", "state", state) : NULL;
    json_t *r = td_conn_request(&c, "list", args, NULL, NULL);
    td_conn_close(&c);
    if (!r)
        return TD_EXIT_UNREACHABLE;
    if ((rc = td_conn_check("queue", r, cli.json)) != TD_EXIT_OK) {
        json_decref(r);
        return rc;
    }
    json_t *ok = json_object_get(r, "ok");
    json_t *rows = td_jobsel_filter(&sel, json_object_get(ok, "jobs"));
    if (!rows) {
        json_decref(r);
        return td_cli_refuse(&cli, TD_CLI_ERR_FAILED, "out of memory");
    }
    size_t n = json_array_size(rows);
    if (last && n > (size_t)last) { /* the N newest: the last N rows */
        json_t *tail = json_array();
        for (size_t k = n - (size_t)last; tail && k < n; k++)
            json_array_append(tail, json_array_get(rows, k));
        json_decref(rows);
        rows = tail;
    }
    if (cli.json) { /* the reply as it came, its rows those selected */
        json_object_set(ok, "jobs", rows);
        td_print_json(ok);
    } else {
        size_t ended = 0, i;
        json_t *j;
        json_array_foreach(rows, i, j)
            ended += td_proto_job_state_final(JSTR(j, "state", "")) != 0;
        /* hidden by default, not when the options chose the rows */
        size_t hide = !all && !last && !state && ended > TD_QUEUE_ENDED_SHOWN
                          ? ended - TD_QUEUE_ENDED_SHOWN
                          : 0;
        td__queue_table(rows, hide);
    }
    json_decref(rows);
    json_decref(r);
    return TD_EXIT_OK;
}

/* ---- show ------------------------------------------------------------- */

static const char show_usage[] =
    "usage: trainctl show JOB [--json] [--socket PATH]\n"
    "\n"
    "Everything about one job: spec, state, progress, last window, last\n"
    "epoch, checkpoints.\n";

int td_cmd_show(int argc, char **argv)
{
    td_cli cli = {.usage = show_usage};
    int64_t id;
    td_conn c;
    int rc = td_cli_job_command(&cli, argc, argv, NULL, &id, &c);
    if (rc)
        return rc < 0 ? TD_EXIT_OK : rc;
    json_t *r = td_conn_show(&c, "show", id, cli.json, &rc);
    td_conn_close(&c);
    if (!r)
        return rc;
    json_t *j = json_object_get(json_object_get(r, "ok"), "job");
    if (cli.json) {
        td_print_json(json_object_get(r, "ok"));
    } else {
        char prog[32];
        td__progress(j, prog, sizeof prog);
        printf("job %lld: %s\n", JINT(j, "id"), JSTR(j, "name", "?"));
        printf("  state:     %s (%s)\n", JSTR(j, "state", "?"),
               JSTR(j, "reason", ""));
        char user[64];
        td__user(JINT(j, "uid"), user, sizeof user);
        printf("  user:      %s (uid %lld)\n", user, JINT(j, "uid"));
        printf("  progress:  %s, %s %lld of %lld\n", prog,
               JINT(j, "epochs_total") > 0 ? "step" : "image",
               JINT(j, "step"), JINT(j, "steps_total"));
        json_t *w = json_object_get(j, "last_window");
        if (w)
            printf("  last window: %.1f samples/s, verdict %s\n",
                   json_number_value(json_object_get(w, "samples_per_s")),
                   JSTR(w, "verdict", "-"));
        json_t *e = json_object_get(j, "last_epoch");
        if (e) {
            char val[64];
            td_fmt_val(e, val, sizeof val);
            long long bad = JINT(e, "bad_samples"); /* the run's so far */
            printf("  last epoch:  %lld, %s", JINT(e, "epoch") + 1, val);
            if (bad > 0)
                printf("; %lld bad sample%s skipped (trainctl logs %lld)",
                       bad, bad == 1 ? "" : "s", (long long)id);
            printf("\n");
        }
        if (json_is_true(json_object_get(j, "restricted"))) {
            printf("  (another user's job: its spec, checkpoints and log are "
                   "shown to its owner and root)\n");
            json_decref(r);
            return TD_EXIT_OK;
        }
        size_t n = json_array_size(json_object_get(j, "checkpoints"));
        size_t i;
        json_t *ck;
        double total = 0;
        char sz[32];
        json_array_foreach(json_object_get(j, "checkpoints"), i, ck)
            total += (double)JINT(ck, "bytes");
        td_fmt_bytes(total, sz, sizeof sz);
        printf("  checkpoints: %zu%s%s%s\n", n, n ? " (" : "", n ? sz : "",
               n ? " on disk)" : "");
        json_array_foreach(json_object_get(j, "checkpoints"), i, ck) {
            td_fmt_bytes((double)JINT(ck, "bytes"), sz, sizeof sz);
            printf("    %s (step %lld, %s)\n", JSTR(ck, "path", "?"),
                   JINT(ck, "step"), sz);
        }
        char *spec = td_json_dumps(json_object_get(j, "spec"),
                                   JSON_INDENT(2) | JSON_SORT_KEYS);
        if (spec) {
            printf("  spec:\n%s\n", spec);
            free(spec);
        }
    }
    json_decref(r);
    return TD_EXIT_OK;
}

/* ---- cancel, pause, resume, checkpoint --------------------------------- */

static int td__job_action(int argc, char **argv, const char *cmd,
                          const char *usage, const char *done)
{
    td_cli cli = {.usage = usage};
    int64_t id;
    td_conn c;
    int rc = td_cli_job_command(&cli, argc, argv, NULL, &id, &c);
    if (rc)
        return rc < 0 ? TD_EXIT_OK : rc;
    json_t *r = td_conn_request(&c, cmd,
                                json_pack("{s:I}", "job", (json_int_t)id),
                                NULL, NULL);
    td_conn_close(&c);
    if (!r)
        return TD_EXIT_UNREACHABLE;
    rc = td_conn_check(argv[0], r, cli.json);
    if (rc == TD_EXIT_OK) {
        if (cli.json)
            td_print_json(json_object_get(r, "ok"));
        else
            printf("job %lld: %s\n", (long long)id, done);
    }
    json_decref(r);
    return rc;
}

int td_cmd_cancel(int argc, char **argv)
{
    return td__job_action(argc, argv, "cancel",
                          "usage: trainctl cancel JOB [--json] [--socket PATH]"
                          "\n\nCancel a job (pending, running or suspended).\n",
                          "cancelled");
}

int td_cmd_pause(int argc, char **argv)
{
    return td__job_action(argc, argv, "pause",
                          "usage: trainctl pause JOB [--json] [--socket PATH]"
                          "\n\nPause a job at its next step boundary; the "
                          "device is freed until 'trainctl resume'.\n",
                          "paused");
}

int td_cmd_resume(int argc, char **argv)
{
    return td__job_action(argc, argv, "resume",
                          "usage: trainctl resume JOB [--json] [--socket PATH]"
                          "\n\nResume a paused job exactly where it stopped.\n",
                          "resumed");
}

int td_cmd_checkpoint(int argc, char **argv)
{
    return td__job_action(argc, argv, "checkpoint",
                          "usage: trainctl checkpoint JOB [--json] "
                          "[--socket PATH]\n\nAsk a running job to write a "
                          "checkpoint at its next step boundary.\n",
                          "checkpoint requested");
}
