/* cmd_extend.c - `trainctl extend JOB --epochs N [--set KEY=VALUE]...`:
 * continues a completed job as a new job that starts from the old one's
 * final weights (its newest checkpoint, as the new job's `init`) with a
 * new schedule of N epochs.  The old job and its checkpoints stay as they
 * are.  Decided here, from what `show` gives the job's owner and root:
 * the spec and the checkpoints.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "conn.h"
#include "job/spec.h"
#include "watch.h"

static const char td__usage[] =
    "usage: trainctl extend JOB --epochs N [--set KEY=VALUE]... [--name NAME]\n"
    "                       [--follow] [--json] [--socket PATH]\n"
    "\n"
    "Continue a completed job: submit a new job with the same spec that\n"
    "starts from the old job's final weights (its newest checkpoint, as the\n"
    "new job's \"init\") and trains N more epochs on a new schedule (warm-up\n"
    "and decay start again; optimizer state starts fresh).  The old job is\n"
    "left as it is.  Prints the new job's id.\n"
    "\n"
    "  --epochs N         epochs of the new job (1..100000), required\n"
    "  --set KEY=VALUE    change the new job's spec, as with submit (e.g.\n"
    "                     --set optimizer.lr=0.01; not epochs or init,\n"
    "                     which extend sets)\n"
    "  --name NAME        the new job's name (default: the old name with\n"
    "                     \"-ext\" appended)\n"
    "  -f, --follow       then watch the new job and exit with its outcome\n"
    "  --json             print the daemon's reply as JSON\n"
    "\n"
    "Exit codes: 0 submitted (or, with --follow, completed), 1 refused (the\n"
    "job is not completed, has no checkpoint, is another user's, or the\n"
    "daemon refused the new spec), 2 usage, 3 cannot reach the daemon.\n";

/* The job as `show` gives it, or NULL with the exit code in *rc. */
static json_t *td__show(td_conn *c, int64_t id, int json, int *rc)
{
    json_t *r = td_conn_show(c, "extend", id, json, rc);
    if (!r)
        return NULL;
    json_t *j = json_incref(json_object_get(json_object_get(r, "ok"), "job"));
    json_decref(r);
    return j;
}

int td_cmd_extend(int argc, char **argv)
{
    td_cli cli = {.usage = td__usage};
    const char *epochs_s = NULL, *name = NULL;
    const char *sets[TD_CLI_MAX_MULTI] = {NULL};
    int follow = 0;
    td_cli_flag flags[] = {
        {"--epochs", NULL, 1, &epochs_s, NULL, NULL},
        {"--set", NULL, 1, NULL, NULL, sets},
        {"--name", NULL, 1, &name, NULL, NULL},
        {"--follow", "-f", 0, NULL, &follow, NULL},
        {NULL, NULL, 0, NULL, NULL, NULL},
    };
    td_conn c;
    /* The command line first: a usage error is one with or without a
     * daemon (exit 2, not 3). */
    int rc = td_cli_parse(&cli, argc, argv, flags, 1, 1);
    if (rc)
        return rc < 0 ? TD_EXIT_OK : rc;
    int64_t id = td_cli_job_id(&cli, cli.pos[0]);
    if (id < 0)
        return TD_EXIT_USAGE;
    if (!epochs_s)
        return td_cli_usage_error(&cli, "--epochs N is required");
    char *end = NULL;
    errno = 0;
    long epochs = strtol(epochs_s, &end, 10);
    if (*end || end == epochs_s || errno || epochs < 1 || epochs > 100000)
        return td_cli_usage_error(&cli, "--epochs: expected 1..100000, not "
                                  "'%s'", epochs_s);
    for (int i = 0; sets[i]; i++) { /* KEY=VALUE, before connecting */
        char err[600];
        json_t *scratch = json_object();
        int bad = td_spec_apply_set(scratch, sets[i], err, sizeof err);
        json_decref(scratch);
        if (bad)
            return td_cli_usage_error(&cli, "--set %s", err);
        /* extend sets these two itself: a --set of them was applied
         * after and said "continued for N epochs" of another N */
        size_t kl = strcspn(sets[i], "=");
        if ((kl == 6 && strncmp(sets[i], "epochs", 6) == 0) ||
            (kl == 4 && strncmp(sets[i], "init", 4) == 0))
            return td_cli_usage_error(&cli, "--set %s: extend sets %.*s "
                                      "itself (%s)", sets[i], (int)kl,
                                      sets[i], kl == 6 ? "give --epochs N"
                                      : "the old job's newest checkpoint; "
                                        "submit a spec with init to start "
                                        "from another file");
    }
    if ((rc = td_conn_open(&c, td_cli_socket(cli.socket))) != TD_EXIT_OK)
        return rc;
    json_t *job = td__show(&c, id, cli.json, &rc);
    if (!job) {
        td_conn_close(&c);
        return rc;
    }
    json_t *spec = json_object_get(job, "spec");
    json_t *cks = json_object_get(job, "checkpoints");
    const char *state = json_string_value(json_object_get(job, "state"));
    const char *ck = json_string_value(json_object_get(
        json_array_get(cks, json_array_size(cks) - 1), "path"));
    char why[200] = "";
    const char *cls = TD_ERR_CONFLICT;
    if (json_is_true(json_object_get(job, "restricted")) || !spec) {
        snprintf(why, sizeof why, "is another user's; only its owner and "
                 "root see its spec and checkpoints");
        cls = TD_ERR_PERMISSION;
    } else if (!state || strcmp(state, "completed") != 0) {
        snprintf(why, sizeof why, "is %s; extend continues a completed job "
                 "(resume continues a suspended one)", state ? state : "?");
    } else if (!ck) {
        snprintf(why, sizeof why, "has no checkpoint to start from");
    }
    if (why[0])
        rc = td_cli_refuse(&cli, cls, "job %lld %s", (long long)id, why);
    if (rc) {
        json_decref(job);
        td_conn_close(&c);
        return rc;
    }

    spec = json_deep_copy(spec);
    json_object_set_new(spec, "init", json_string(ck));
    json_object_set_new(spec, "epochs", json_integer(epochs));
    char newname[80];
    const char *old = json_string_value(json_object_get(job, "name"));
    snprintf(newname, sizeof newname, "%.60s-ext", old ? old : "job");
    json_object_set_new(spec, "name", json_string(name ? name : newname));
    for (int i = 0; sets[i]; i++) {
        char err[600];
        if (td_spec_apply_set(spec, sets[i], err, sizeof err)) {
            json_decref(spec);
            json_decref(job);
            td_conn_close(&c);
            return td_cli_usage_error(&cli, "--set %s", err);
        }
    }
    json_t *r = td_conn_request(&c, "submit", json_pack("{s:o}", "spec", spec),
                                NULL, NULL);
    if (!r) {
        json_decref(job);
        td_conn_close(&c);
        return TD_EXIT_UNREACHABLE;
    }
    rc = td_conn_check("extend", r, cli.json);
    if (rc == TD_EXIT_OK) {
        json_int_t nid = json_integer_value(json_object_get(
            json_object_get(r, "ok"), "job"));
        if (cli.json) {
            json_object_set_new(json_object_get(r, "ok"), "extends",
                                json_integer(id));
            json_object_set_new(json_object_get(r, "ok"), "init",
                                json_string(ck));
            td_print_json(r);
        } else {
            printf("submitted job %lld: job %lld continued for %ld epoch%s "
                   "from %s\n", (long long)nid, (long long)id, epochs,
                   epochs == 1 ? "" : "s", ck);
        }
        fflush(stdout);
        if (follow)
            rc = td_watch_job(&c, nid, cli.json, 1);
    }
    json_decref(r);
    json_decref(job);
    td_conn_close(&c);
    return rc;
}
