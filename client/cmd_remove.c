/* cmd_remove.c - trainctl rm: ended jobs' records, logs and checkpoints
 * off the daemon's disk (the `remove` command, daemon/remove.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "commands.h"
#include "conn.h"
#include "progress.h"
#include "proto/protocol.h"
#include "watch.h"

/* How long --force waits for a cancelled job to reach its step boundary
 * and end. */
#define TD__FORCE_WAIT_S 300

static const char td__rm_usage[] =
    "usage: trainctl rm JOB [JOB...] [-f|--force] [--json] [--socket PATH]\n"
    "\n"
    "Remove ended jobs (completed, failed or cancelled): the daemon deletes\n"
    "each job's record, log and checkpoints, and the job leaves 'trainctl\n"
    "queue'; its id is not given again.  The checkpoints are the trained\n"
    "model: 'trainctl export JOB' first to keep it.  A job not yet ended\n"
    "(cancel it first), another user's job (root may) and a job whose\n"
    "checkpoint a job not yet ended reads (an extend, an eval) are refused.\n"
    "\n"
    "  -f, --force  cancel a job not yet ended first, wait for it to end\n"
    "               (a running job stops at its next step boundary; up to\n"
    "               5 minutes, shown on a terminal), then remove it\n"
    "  --json   one JSON object: \"removed\" [{job, freed_bytes}],\n"
    "           \"refused\" [{job, error: {class, desc}}], \"freed_bytes\"\n"
    "           (the sum)\n"
    "\n"
    "Exit codes: 0 every job removed, 1 one or more refused, 2 usage,\n"
    "3 cannot reach the daemon.\n";

/* The job's state as `show` gives it, in buf; NULL after a refusal (no
 * such job) or a broken connection. */
static const char *td__state(td_conn *c, int64_t id, char *buf, size_t cap)
{
    json_t *r = td_conn_request(c, "show",
                                json_pack("{s:I}", "job", (json_int_t)id),
                                NULL, NULL);
    const char *s = json_string_value(json_object_get(
        json_object_get(json_object_get(r, "ok"), "job"), "state"));
    if (s)
        snprintf(buf, cap, "%s", s);
    json_decref(r);
    return s ? buf : NULL;
}

/* --force: cancels job id unless it has ended and waits until it has.
 * NULL when it has ended (or the daemon's refusal is for `remove` to
 * give: no such job), else the reply to give as the refusal (a failed
 * cancel), or an error of our own (it did not end in time). */
static json_t *td__cancel_and_wait(td_conn *c, int64_t id)
{
    char st[32];
    if (!td__state(c, id, st, sizeof st) || td_proto_job_state_final(st))
        return NULL;
    json_t *r = td_conn_request(
        c, "cancel", json_pack("{s:I}", "job", (json_int_t)id), NULL, NULL);
    if (!r)
        return NULL; /* remove then finds the connection broken */
    if (json_object_get(r, "error")) {
        /* it may have ended between show and cancel: then remove it */
        if (td__state(c, id, st, sizeof st) && td_proto_job_state_final(st)) {
            json_decref(r);
            return NULL;
        }
        return r;
    }
    json_decref(r);
    td_progress p;
    td_progress_init(&p);
    const char *now;
    while ((now = td__state(c, id, st, sizeof st)) &&
           !td_proto_job_state_final(now) &&
           td_progress_elapsed(&p) < TD__FORCE_WAIT_S) {
        td_progress_show(&p, 0, "rm: job %lld cancelled, waiting for it to "
                         "stop (%s, %.0f s)", (long long)id, now,
                         td_progress_elapsed(&p));
        usleep(100000);
    }
    td_progress_clear(&p);
    if (!now || td_proto_job_state_final(now))
        return NULL;
    char m[160];
    snprintf(m, sizeof m, "job %lld was cancelled but is still %s after "
             "%d s; try again once it has ended", (long long)id, now,
             TD__FORCE_WAIT_S);
    return json_pack("{s:{s:s, s:s}}", "error", "class", "conflict", "desc",
                     m);
}

int td_cmd_remove(int argc, char **argv)
{
    td_cli cli = {.usage = td__rm_usage};
    int force = 0;
    td_cli_flag flags[] = {
        {"--force", "-f", 0, NULL, &force, NULL},
        {NULL, NULL, 0, NULL, NULL, NULL},
    };
    int rc = td_cli_parse(&cli, argc, argv, flags, 1, TD_CLI_MAX_POS);
    if (rc)
        return rc < 0 ? TD_EXIT_OK : rc;
    int64_t ids[TD_CLI_MAX_POS];
    for (int i = 0; i < cli.npos; i++)
        if ((ids[i] = td_cli_job_id(&cli, cli.pos[i])) < 0)
            return TD_EXIT_USAGE;
    td_conn c;
    if ((rc = td_conn_open(&c, td_cli_socket(cli.socket))))
        return rc;
    json_t *removed = json_array(), *refused = json_array();
    json_int_t total = 0;
    rc = TD_EXIT_OK;
    for (int i = 0; i < cli.npos; i++) {
        json_t *r = force ? td__cancel_and_wait(&c, ids[i]) : NULL;
        if (!r)
            r = td_conn_request(&c, "remove",
                                json_pack("{s:I}", "job", (json_int_t)ids[i]),
                                NULL, NULL);
        if (!r) {
            rc = TD_EXIT_UNREACHABLE;
            break;
        }
        json_t *ok = json_object_get(r, "ok");
        if (ok) {
            json_int_t b = json_integer_value(
                json_object_get(ok, "freed_bytes"));
            total += b;
            json_array_append_new(removed,
                                  json_pack("{s:I, s:I}", "job",
                                            (json_int_t)ids[i],
                                            "freed_bytes", b));
            if (!cli.json) {
                char sz[32];
                td_fmt_bytes((double)b, sz, sizeof sz);
                printf("job %lld: removed (%s freed)\n", (long long)ids[i],
                       sz);
            }
        } else {
            json_array_append_new(refused,
                                  json_pack("{s:I, s:O}", "job",
                                            (json_int_t)ids[i], "error",
                                            json_object_get(r, "error")));
            if (!cli.json)
                td_conn_check("rm", r, 0);
            rc = TD_EXIT_REFUSED;
        }
        json_decref(r);
    }
    td_conn_close(&c);
    size_t nref = json_array_size(refused);
    json_t *out = json_pack("{s:o, s:o, s:I}", "removed", removed, "refused",
                            refused, "freed_bytes", total);
    if (cli.json && rc != TD_EXIT_UNREACHABLE)
        td_print_json(out);
    json_decref(out);
    if (!cli.json && cli.npos > 1 && rc != TD_EXIT_UNREACHABLE) {
        char sz[32];
        td_fmt_bytes((double)total, sz, sizeof sz);
        printf("%zu of %d jobs removed, %s freed\n",
               (size_t)cli.npos - nref, cli.npos, sz);
    }
    return rc;
}
