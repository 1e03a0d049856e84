/* cmd_trace.c - `trainctl trace JOB --steps N -o FILE`: asks the daemon to
 * record the next N steps of a running job and writes the Chrome trace
 * JSON it sends back (in trace_part events, then the reply) into FILE.
 * The client writes the file, so the daemon never writes into a user's
 * directory.  Opens in https://ui.perfetto.dev or chrome://tracing.
 * While it waits, a progress line on stderr when that is a terminal
 * ("recording 50 steps of job 3: 12/50", from the daemon's trace_progress
 * events); stdout has only the summary (or the --json reply).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "commands.h"
#include "conn.h"
#include "progress.h"

static const char td__usage[] =
    "usage: trainctl trace JOB [--steps N] -o FILE [--json] [--socket PATH]\n"
    "\n"
    "Record the timeline of the next N steps (default 20) of a running job\n"
    "and write it to FILE as Chrome trace JSON (open it in\n"
    "https://ui.perfetto.dev or chrome://tracing): the trainer's phases per\n"
    "step, each decode worker's read/decode/augment, the device's copies\n"
    "and compute, checkpoints, ready batches, samples/s and idle ratio.\n"
    "Waits until the steps are recorded (or the job ends), showing how\n"
    "many are on stderr when it is a terminal.\n"
    "\n"
    "  -n, --steps N      steps to record, 1..10000 (default 20)\n"
    "  -o, --output FILE  the trace file, required (written only when the\n"
    "                     trace is complete)\n";

typedef struct td__parts {
    FILE *f;
    long next;
    int bad;
    td_progress pr; /* on stderr when it is a terminal */
    long long job;
    long steps;     /* requested */
} td__parts;

/* The progress line, redrawn in place: "recording N steps of job J: "
 * and what. */
static void td__show(td__parts *p, const char *what)
{
    td_progress_show(&p->pr, 1, "recording %ld step%s of job %lld: %s",
                     p->steps, p->steps == 1 ? "" : "s", p->job, what);
}

static void td__on_part(json_t *ev, void *user)
{
    td__parts *p = user;
    const char *name = json_string_value(json_object_get(ev, "event"));
    json_t *data = json_object_get(ev, "data");
    char what[64];
    if (name && strcmp(name, "trace_progress") == 0) {
        snprintf(what, sizeof what, "%lld/%ld", (long long)json_integer_value(
                     json_object_get(data, "steps")), p->steps);
        td__show(p, what);
        return;
    }
    if (!name || strcmp(name, "trace_part") != 0 || p->bad)
        return;
    if (p->next == 0)
        td__show(p, "receiving the trace");
    const char *text = json_string_value(json_object_get(data, "text"));
    long part = (long)json_integer_value(json_object_get(data, "part"));
    if (!text || part != p->next) {
        p->bad = EPROTO;
        return;
    }
    p->next++;
    if (fputs(text, p->f) == EOF)
        p->bad = errno ? errno : EIO;
}

int td_cmd_trace(int argc, char **argv)
{
    const char *steps_s = NULL, *out = NULL;
    td_cli_flag flags[] = {{"--steps", "-n", 1, &steps_s, NULL, NULL},
                           {"--output", "-o", 1, &out, NULL, NULL},
                           {NULL, NULL, 0, NULL, NULL, NULL}};
    td_cli cli = {.usage = td__usage};
    td_conn c;
    long steps = 20;
    /* The command line first: a usage error is one with or without a
     * daemon (exit 2, not 3). */
    int rc = td_cli_parse(&cli, argc, argv, flags, 1, 1);
    if (rc)
        return rc < 0 ? TD_EXIT_OK : rc;
    int64_t id = td_cli_job_id(&cli, cli.pos[0]);
    if (id < 0)
        return TD_EXIT_USAGE;
    if (steps_s) {
        char *end;
        errno = 0;
        steps = strtol(steps_s, &end, 10);
        if (*end || end == steps_s || errno || steps < 1 || steps > 10000)
            return td_cli_usage_error(&cli, "--steps: expected 1..10000, "
                                      "not '%s'", steps_s);
    }
    if (!out)
        return td_cli_usage_error(&cli, "-o FILE is required");
    /* The trace goes into a temporary file beside FILE, renamed to FILE
     * once complete: a refused or broken trace leaves an existing FILE
     * as it was. */
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.XXXXXX", out) >= (int)sizeof tmp)
        return td_cli_usage_error(&cli, "-o: path too long");
    int fd = mkstemp(tmp);
    td__parts p = {.f = fd < 0 ? NULL : fdopen(fd, "w"), .job = id,
                   .steps = steps};
    if (!p.f) {
        int e = errno;
        if (fd >= 0) {
            close(fd);
            unlink(tmp);
        }
        return td_cli_refuse(&cli, TD_CLI_ERR_FAILED, "cannot write %s: %s",
                             out, strerror(e));
    }
    td_progress_init(&p.pr); /* after errno was used (isatty sets it) */
    mode_t um = umask(0);
    umask(um);
    fchmod(fd, 0666 & ~um); /* as fopen would have created it */
    if ((rc = td_conn_open(&c, td_cli_socket(cli.socket))) != TD_EXIT_OK) {
        fclose(p.f);
        unlink(tmp);
        return rc;
    }
    td__show(&p, "waiting for the next step"); /* the daemon says 0/N */
    json_t *r = td_conn_request(&c, "trace",
                                json_pack("{s:I, s:i}", "job", (json_int_t)id,
                                          "steps", (int)steps),
                                td__on_part, &p);
    td_conn_close(&c);
    td_progress_clear(&p.pr); /* the summary or an error follows */
    int closed = fclose(p.f);
    if (!r) {
        unlink(tmp);
        return TD_EXIT_UNREACHABLE;
    }
    rc = td_conn_check(argv[0], r, cli.json);
    json_t *ok = json_object_get(r, "ok");
    long parts = (long)json_integer_value(json_object_get(ok, "parts"));
    if (rc == TD_EXIT_OK && (p.bad || closed || p.next != parts))
        rc = td_cli_refuse(&cli, TD_CLI_ERR_FAILED, "%s: %s", out,
                           p.bad == EPROTO || p.next != parts
                               ? "the daemon's trace arrived incomplete"
                               : strerror(p.bad ? p.bad : errno));
    if (rc == TD_EXIT_OK && rename(tmp, out) != 0)
        rc = td_cli_refuse(&cli, TD_CLI_ERR_FAILED, "cannot write %s: %s",
                           out, strerror(errno));
    if (rc != TD_EXIT_OK) {
        unlink(tmp);
    } else if (cli.json) {
        json_object_set_new(ok, "file", json_string(out));
        td_print_json(ok);
    } else {
        printf("job %lld: %lld step(s) traced%s, %lld events -> %s\n",
               (long long)id,
               (long long)json_integer_value(json_object_get(ok, "steps")),
               json_is_true(json_object_get(ok, "complete"))
                   ? "" : " (the job ended first)",
               (long long)json_integer_value(json_object_get(ok, "events")),
               out);
    }
    json_decref(r);
    return rc;
}
