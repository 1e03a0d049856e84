/* cmd_remove.c - trainctl rm: ended jobs' records, logs and checkpoints
 * off the daemon's disk (the `remove` command, daemon/remove.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "commands.h"
#include "conn.h"
#include "base/clock.h"
#include "jobsel.h"
#include "progress.h"
#include "proto/protocol.h"
#include "watch.h"

/* How long --force waits for a cancelled job to reach its step boundary
 * and end. */
#define TD__FORCE_WAIT_S 300

/* Followed by the ended states, from lib/proto. */
static const char td__rm_usage[] =
    "usage: trainctl rm JOB [JOB...] [-f|--force] [--json] [--socket PATH]\n"
    "       trainctl rm [--state STATE] [--ended-before WHEN] [--mine]\n"
    "                   [--dry-run] [--json] [--socket PATH]\n"
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
    "\n"
    "Without JOB, selectors pick the jobs: every ended job that all of them\n"
    "match and that you may remove (yours; every user's for root).  One at\n"
    "least is needed: a bare 'trainctl rm' removes nothing.\n"
    "\n"
    "  --state STATE        only the jobs in STATE, one of: completed,\n"
    "                       failed, cancelled\n"
    "  --ended-before WHEN  only the jobs that ended before WHEN: a DURATION\n"
    "                       ago (45s, 30m, 12h, 7d, 2w) or a date, local\n"
    "                       time (2026-11-01, 2026-11-01T08:30[:SS]; with a\n"
    "                       trailing Z, UTC)\n"
    "  --mine               only your own jobs (for root: root's)\n"
    "  --dry-run            list the jobs that would be removed and the\n"
    "                       bytes of their checkpoints; remove nothing\n"
    "\n"
    "  --json   one JSON object: \"removed\" [{job, freed_bytes}],\n"
    "           \"refused\" [{job, error: {class, desc}}], \"freed_bytes\"\n"
    "           (the sum); with --dry-run also \"dry_run\": true, and\n"
    "           \"removed\" lists the jobs that would be, their\n"
    "           freed_bytes their checkpoints' (records and logs aside)\n"
    "\n"
    "Exit codes: 0 every job removed (or none selected), 1 one or more\n"
    "refused, 2 usage (no JOB and no selector; JOB with a selector),\n"
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

/* What rm did: the JSON object's arrays and sum, and its exit code. */
typedef struct td__rm_out {
    json_t *removed, *refused;
    json_int_t total;
    int rc;
    int json;
    td_progress p;
} td__rm_out;

/* A job removed (or that would be, dry): its entry and the sum. */
static void td__rm_count(td__rm_out *o, int64_t id, json_int_t b)
{
    o->total += b;
    json_array_append_new(o->removed, json_pack("{s:I, s:I}", "job",
                                                (json_int_t)id, "freed_bytes",
                                                b));
}

/* A job removed: its entry, its line. */
static void td__rm_removed(td__rm_out *o, int64_t id, json_int_t b)
{
    td__rm_count(o, id, b);
    if (!o->json) {
        char sz[32];
        td_fmt_bytes((double)b, sz, sizeof sz);
        td_progress_clear(&o->p);
        printf("job %lld: removed (%s freed)\n", (long long)id, sz);
    }
}

static void td__rm_refused(td__rm_out *o, int64_t id, json_t *r)
{
    json_array_append_new(o->refused,
                          json_pack("{s:I, s:O}", "job", (json_int_t)id,
                                    "error", json_object_get(r, "error")));
    td_progress_clear(&o->p);
    if (!o->json)
        td_conn_check("rm", r, 0);
    o->rc = TD_EXIT_REFUSED;
}

/* Removes the n jobs of ids (cancelling those not ended first with
 * force); progress on a terminal when there are several. */
static void td__rm_jobs(td_conn *c, const int64_t *ids, size_t n, int force,
                        td__rm_out *o)
{
    for (size_t i = 0; i < n; i++) {
        if (n > 1)
            td_progress_count(&o->p, "rm", (int64_t)i, (int64_t)n, "jobs");
        json_t *r = force ? td__cancel_and_wait(c, ids[i]) : NULL;
        if (!r)
            r = td_conn_request(c, "remove",
                                json_pack("{s:I}", "job", (json_int_t)ids[i]),
                                NULL, NULL);
        if (!r) {
            o->rc = TD_EXIT_UNREACHABLE;
            break;
        }
        json_t *ok = json_object_get(r, "ok");
        if (ok)
            td__rm_removed(o, ids[i], json_integer_value(json_object_get(
                                          ok, "freed_bytes")));
        else
            td__rm_refused(o, ids[i], r);
        json_decref(r);
    }
    td_progress_clear(&o->p);
}

/* --dry-run's line for a job: "job 7 (NAME, failed 3d ago): would be
 * removed (12.0 kB of checkpoints)". */
static void td__rm_dry_line(json_t *job, int64_t id, json_int_t b)
{
    char sz[32], age[16];
    td_fmt_bytes((double)b, sz, sizeof sz);
    json_t *e = json_object_get(job, "ended");
    td_fmt_age(e ? td_ns_to_s(td_wall_ns()) - json_number_value(e) : 0, age,
               sizeof age);
    const char *name = json_string_value(json_object_get(job, "name"));
    const char *st = json_string_value(json_object_get(job, "state"));
    printf("job %lld (%s, %s %s ago): would be removed (%s of "
           "checkpoints)\n", (long long)id, name ? name : "?",
           st ? st : "?", e ? age : "?", sz);
}

/* --dry-run: the n jobs of ids that removing would take, and their
 * checkpoints' bytes as `show` gives them (what rm frees besides the
 * records and logs). */
static void td__rm_dry(td_conn *c, const int64_t *ids, size_t n,
                       td__rm_out *o)
{
    for (size_t i = 0; i < n; i++) {
        td_progress_count(&o->p, "rm --dry-run", (int64_t)i, (int64_t)n,
                          "jobs");
        json_t *r = td_conn_request(c, "show",
                                    json_pack("{s:I}", "job",
                                              (json_int_t)ids[i]),
                                    NULL, NULL);
        if (!r) {
            o->rc = TD_EXIT_UNREACHABLE;
            break;
        }
        json_t *job = json_object_get(json_object_get(r, "ok"), "job");
        json_int_t b = 0;
        size_t k;
        json_t *ck;
        json_array_foreach(json_object_get(job, "checkpoints"), k, ck)
            b += json_integer_value(json_object_get(ck, "bytes"));
        if (job) { /* else removed meanwhile: nothing left to remove */
            td__rm_count(o, ids[i], b);
            td_progress_clear(&o->p);
            if (!o->json)
                td__rm_dry_line(job, ids[i], b);
        }
        json_decref(r);
    }
    td_progress_clear(&o->p);
}

/* The ids of the ended jobs sel selects that this user may remove, from
 * the daemon's list: a malloc'd array (*n of them), or NULL with the
 * exit code in *rc. */
static int64_t *td__rm_select(td_conn *c, const td_jobsel *sel, int json,
                              size_t *n, int *rc)
{
    json_t *args = sel->state ? json_pack("{s:s}", "state", sel->state)
                              : NULL;
    json_t *r = td_conn_request(c, "list", args, NULL, NULL);
    if (!r) {
        *rc = TD_EXIT_UNREACHABLE;
        return NULL;
    }
    if ((*rc = td_conn_check("rm", r, json)) != TD_EXIT_OK) {
        json_decref(r);
        return NULL;
    }
    json_t *rows = td_jobsel_filter(
        sel, json_object_get(json_object_get(r, "ok"), "jobs"));
    int64_t *ids = malloc((json_array_size(rows) + 1) * sizeof *ids);
    if (!rows || !ids) {
        json_decref(rows);
        json_decref(r);
        free(ids);
        fprintf(stderr, "trainctl rm: out of memory\n");
        *rc = TD_EXIT_REFUSED;
        return NULL;
    }
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row)
        ids[i] = json_integer_value(json_object_get(row, "id"));
    *n = json_array_size(rows);
    json_decref(rows);
    json_decref(r);
    return ids;
}

/* Parses rm's selectors into sel; 1 when one was given, 0 when none,
 * or TD_EXIT_USAGE after printing why. */
static int td__rm_selectors(const td_cli *cli, const char *state,
                            const char *before, td_jobsel *sel)
{
    if (state && (td_proto_job_state(state) < 0 ||
                  !td_proto_job_state_final(state)))
        return td_cli_usage_error(cli, "--state: expected completed, "
                                  "failed or cancelled (the ended states), "
                                  "not '%s'", state);
    if (before) {
        if (td_jobsel_parse_before(before, td_ns_to_s(td_wall_ns()),
                                   &sel->ended_before))
            return td_cli_usage_error(cli, "--ended-before: expected a "
                                      "DURATION (45s, 30m, 12h, 7d, 2w) or "
                                      "a date (2026-11-01, "
                                      "2026-11-01T08:30), not '%s'", before);
        sel->before = 1;
    }
    sel->state = state;
    sel->ended = 1;
    return state || before || sel->mine;
}

int td_cmd_remove(int argc, char **argv)
{
    td_cli cli = {.usage = td__rm_usage};
    int force = 0, dry = 0;
    const char *state = NULL, *before = NULL;
    td_jobsel sel = {.uid = (unsigned)geteuid()};
    td_cli_flag flags[] = {
        {"--force", "-f", 0, NULL, &force, NULL},
        {"--state", NULL, 1, &state, NULL, NULL},
        {"--ended-before", NULL, 1, &before, NULL, NULL},
        {"--mine", NULL, 0, NULL, &sel.mine, NULL},
        {"--dry-run", NULL, 0, NULL, &dry, NULL},
        {NULL, NULL, 0, NULL, NULL, NULL},
    };
    int rc = td_cli_parse(&cli, argc, argv, flags, 0, TD_CLI_MAX_POS);
    if (rc)
        return rc < 0 ? TD_EXIT_OK : rc;
    int bulk = td__rm_selectors(&cli, state, before, &sel);
    if (bulk == TD_EXIT_USAGE)
        return bulk;
    if (!bulk && cli.npos == 0)
        return td_cli_usage_error(&cli, "name the jobs to remove, or select "
                                  "ended jobs with --state, --ended-before "
                                  "or --mine");
    if (bulk && cli.npos > 0)
        return td_cli_usage_error(&cli, "JOB ids and selectors (--state, "
                                  "--ended-before, --mine): give one or the "
                                  "other");
    if (bulk && force)
        return td_cli_usage_error(&cli, "--force goes with JOB ids: "
                                  "selectors pick ended jobs only");
    if (dry && !bulk)
        return td_cli_usage_error(&cli, "--dry-run goes with the selectors "
                                  "(--state, --ended-before, --mine)");
    int64_t pos_ids[TD_CLI_MAX_POS];
    for (int i = 0; i < cli.npos; i++)
        if ((pos_ids[i] = td_cli_job_id(&cli, cli.pos[i])) < 0)
            return TD_EXIT_USAGE;
    td_conn c;
    if ((rc = td_conn_open(&c, td_cli_socket(cli.socket))))
        return rc;
    td__rm_out o = {.removed = json_array(), .refused = json_array(),
                    .json = cli.json};
    td_progress_init(&o.p);
    int64_t *ids = pos_ids;
    size_t n = (size_t)cli.npos;
    if (bulk) {
        if (sel.uid != 0) /* only root may remove other users' jobs */
            sel.mine = 1;
        ids = td__rm_select(&c, &sel, cli.json, &n, &o.rc);
    }
    if (ids && dry)
        td__rm_dry(&c, ids, n, &o);
    else if (ids)
        td__rm_jobs(&c, ids, n, force, &o);
    td_conn_close(&c);
    int summary = ids && o.rc != TD_EXIT_UNREACHABLE; /* ids were chosen */
    if (ids != pos_ids)
        free(ids);
    rc = o.rc;
    size_t nref = json_array_size(o.refused);
    size_t nrem = json_array_size(o.removed);
    json_t *out = json_pack("{s:o, s:o, s:I}", "removed", o.removed,
                            "refused", o.refused, "freed_bytes", o.total);
    if (dry)
        json_object_set_new(out, "dry_run", json_true());
    if (cli.json && summary)
        td_print_json(out);
    json_decref(out);
    if (!cli.json && summary && (bulk || n > 1)) {
        char sz[32];
        td_fmt_bytes((double)o.total, sz, sizeof sz);
        if (n == 0)
            printf("no ended job selected: nothing to remove\n");
        else if (dry)
            printf("%zu job%s would be removed, %s of checkpoints freed "
                   "(and their records and logs)\n", nrem,
                   nrem == 1 ? "" : "s", sz);
        else
            printf("%zu of %zu jobs removed, %s freed\n", n - nref, n, sz);
    }
    return rc;
}
