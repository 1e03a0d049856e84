/* infer_daemon.c - `trainctl eval/predict --daemon`: the same work as an
 * eval or predict job of traind (docs/daemon.md#eval-and-predict-jobs),
 * followed to its end, its result printed as the local command prints it.
 *
 * Owns: making the job's paths absolute, submitting, following the job
 * (a progress line on stderr when it is a terminal, then the local
 * command's summary; stdout carries only what the local command prints),
 * fetching the result.  Never: computes
 * anything itself, or cancels the job when trainctl is interrupted (the
 * job is the daemon's: `trainctl cancel JOB`).
 */
#include "infer_daemon.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"
#include "conn.h"
#include "proto/protocol.h"
#include "progress.h"

#define JSTR(o, k) json_string_value(json_object_get((o), (k)))

int td_infer_absolute(const char *p, char *out, size_t cap)
{
    char cwd[PATH_MAX];
    if (p[0] == '/') {
        snprintf(out, cap, "%s", p);
        return 0;
    }
    if (!getcwd(cwd, sizeof cwd))
        return -1;
    int n = snprintf(out, cap, "%s/%s", cwd, p);
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

typedef struct td__follow {
    int64_t job;
    td_progress pr; /* stderr, when it is a terminal */
    char state[32], reason[300];
    long long done; /* images, from the eval events */
} td__follow;

static void td__on_event(json_t *ev, void *user)
{
    td__follow *f = user;
    json_t *d = json_object_get(ev, "data");
    const char *kind = JSTR(ev, "event");
    if (!kind || json_integer_value(json_object_get(ev, "job")) != f->job)
        return;
    if (strcmp(kind, "state") == 0) {
        snprintf(f->state, sizeof f->state, "%s",
                 JSTR(d, "state") ? JSTR(d, "state") : "?");
        snprintf(f->reason, sizeof f->reason, "%s",
                 JSTR(d, "reason") ? JSTR(d, "reason") : "");
        td_progress_show(&f->pr, 1, "job %lld %s: %s", (long long)f->job,
                         f->state, f->reason);
    } else if (strcmp(kind, "eval") == 0) {
        long long total = json_integer_value(json_object_get(d, "total"));
        f->done = json_integer_value(json_object_get(d, "done"));
        td_progress_show(&f->pr, 1, "job %lld %s: %lld/%lld images (%.0f%%)",
                         (long long)f->job,
                         JSTR(d, "task") ? JSTR(d, "task") : "", f->done,
                         total, total ? 100.0 * (double)f->done /
                                            (double)total
                                      : 0.0);
    }
}

int td_infer_via_daemon(const td_cli *cli, const char *cmd, json_t *spec,
                        json_t **result)
{
    td_conn c;
    td__follow f = {0};
    td_progress_init(&f.pr);
    json_t *r = NULL;
    int rc;
    *result = NULL;
    if ((rc = td_conn_open(&c, td_cli_socket(cli->socket))) != TD_EXIT_OK) {
        json_decref(spec);
        return rc;
    }
    r = td_conn_request(&c, "submit", json_pack("{s:o}", "spec", spec), NULL,
                        NULL);
    if (!r) {
        rc = TD_EXIT_UNREACHABLE;
        goto out;
    }
    if ((rc = td_conn_check(cmd, r, cli->json)) != TD_EXIT_OK)
        goto out;
    f.job = json_integer_value(json_object_get(json_object_get(r, "ok"),
                                               "job"));
    json_decref(r);
    r = td_conn_request(&c, "subscribe",
                        json_pack("{s:I, s:[s, s]}", "job", (json_int_t)f.job,
                                  "events", "state", "eval"),
                        td__on_event, &f);
    if (!r || (rc = td_conn_check(cmd, r, cli->json)) != TD_EXIT_OK) {
        rc = r ? rc : TD_EXIT_UNREACHABLE;
        goto out;
    }
    /* Where the job is now; the events keep it current from here. */
    for (;;) {
        json_decref(r);
        r = td_conn_request(&c, "show",
                            json_pack("{s:I}", "job", (json_int_t)f.job),
                            td__on_event, &f);
        td_progress_clear(&f.pr); /* a refusal may follow */
        if (!r) {
            rc = TD_EXIT_UNREACHABLE;
            goto out;
        }
        if ((rc = td_conn_check(cmd, r, cli->json)) != TD_EXIT_OK)
            goto out;
        json_t *j = json_object_get(json_object_get(r, "ok"), "job");
        snprintf(f.state, sizeof f.state, "%s", JSTR(j, "state"));
        snprintf(f.reason, sizeof f.reason, "%s", JSTR(j, "reason"));
        if (td_proto_job_state_final(f.state))
            break;
        while (!td_proto_job_state_final(f.state)) {
            json_t *ev = td_conn_read(&c, -1, NULL);
            if (!ev) {
                td_progress_clear(&f.pr);
                fprintf(stderr, "trainctl %s: lost the connection to traind "
                        "(job %lld goes on)\n", cmd, (long long)f.job);
                rc = TD_EXIT_UNREACHABLE;
                goto out;
            }
            if (json_object_get(ev, "event"))
                td__on_event(ev, &f);
            json_decref(ev);
        }
    }
    json_t *j = json_object_get(json_object_get(r, "ok"), "job");
    if (strcmp(f.state, "completed") != 0 ||
        !json_is_object(json_object_get(j, "result"))) {
        td_progress_clear(&f.pr);
        rc = td_cli_refuse(cli, TD_CLI_ERR_FAILED, "job %lld %s: %s",
                           (long long)f.job, f.state, f.reason);
        goto out;
    }
    *result = json_incref(json_object_get(j, "result"));
    /* the local command's summary: images, time since the submit */
    json_t *n = json_object_get(*result, strcmp(cmd, "eval") == 0
                                             ? "samples" : "images");
    td_progress_done(&f.pr, cmd, json_is_integer(n) ? json_integer_value(n)
                                                    : f.done, "images");
    rc = TD_EXIT_OK;
out:
    td_progress_clear(&f.pr);
    json_decref(r);
    td_conn_close(&c);
    return rc;
}
