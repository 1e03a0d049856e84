/* cmd_plot.c - `trainctl plot JOB -o curves.png [--size WxH]`: a job's
 * learning curves (issue 18) as one PNG of four panels against the step:
 * loss, accuracy, throughput, idle; `trainctl plot JOB JOB... -o cmp.png`
 * compares jobs, a colour each, against the epoch.  Asks the daemon for
 * the job records (`show`, their "history" and "curve" arrays) and draws
 * them here with client/plot.c and plot_compare.c; the client writes the
 * file, never the daemon.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "conn.h"
#include "plot.h"

static const char td__usage[] =
    "usage: trainctl plot JOB [JOB...] -o FILE.png [--size WxH] [--json]\n"
    "                     [--socket PATH]\n"
    "\n"
    "Draw a job's learning curves into one PNG, four panels against the\n"
    "training step: loss (the metrics windows' train loss, and each\n"
    "finished epoch's train and val loss), accuracy (each epoch's train and\n"
    "val accuracy), throughput (samples/s) and idle (device idle and input\n"
    "wait, in percent), with epoch boundaries as faint vertical lines.\n"
    "Values the job does not have (no validation set, no idle counter on\n"
    "the device) are left out, not drawn as 0.  Works on a running job too:\n"
    "it draws what there is so far.\n"
    "\n"
    "With several jobs (up to 10), compare them: a colour per job, named in\n"
    "the title, four panels against the epoch (so that jobs with other\n"
    "batch sizes line up): train loss (metrics windows), val loss and val\n"
    "accuracy (each finished epoch) and samples/s.\n"
    "\n"
    "  -o, --output FILE  the PNG to write, required\n"
    "  --size WxH         its size in pixels (default 1200x900, from 400x300\n"
    "                     to 8000x8000)\n"
    "  --json             print {\"path\", \"width\", \"height\",\n"
    "                     \"points\"}: the values drawn per series (several\n"
    "                     jobs: \"jobs\": [{\"job\", \"epochs\", \"windows\",\n"
    "                     \"points\"}] instead of \"points\")\n"
    "\n"
    "Exit codes: 0 written, 1 the daemon refused (no such job), the job\n"
    "(every job) has no finished epoch or metrics window yet, or FILE\n"
    "cannot be written;\n"
    "2 usage, 3 cannot reach the daemon.\n";

/* "1200x900" into *w, *h; 0, or -1 when it is not WxH within the limits. */
static int td__size(const char *s, int *w, int *h)
{
    char *end;
    errno = 0;
    long a = strtol(s, &end, 10);
    if (end == s || (*end != 'x' && *end != 'X') || errno)
        return -1;
    const char *t = end + 1;
    long b = strtol(t, &end, 10);
    if (end == t || *end || errno || a < TD_PLOT_MIN_W ||
        a > TD_PLOT_MAX_SIDE || b < TD_PLOT_MIN_H || b > TD_PLOT_MAX_SIDE)
        return -1;
    *w = (int)a;
    *h = (int)b;
    return 0;
}

/* Several jobs into one PNG (td_plot_compare). */
static int td__compare(const td_cli *cli, const int64_t *ids, int n,
                       const char *out, int w, int h)
{
    td_conn c;
    json_t *r[TD_PLOT_MAX_JOBS] = {0};
    const json_t *jobs[TD_PLOT_MAX_JOBS];
    int rc;
    if ((rc = td_conn_open(&c, td_cli_socket(cli->socket))))
        return rc;
    for (int j = 0; j < n && rc == 0; j++)
        if ((r[j] = td_conn_show(&c, "plot", ids[j], cli->json, &rc)))
            jobs[j] = json_object_get(json_object_get(r[j], "ok"), "job");
    td_conn_close(&c);
    td_plot_cmp_stats st;
    char err[600];
    int prc;
    if (rc == 0 &&
        (prc = td_plot_compare(jobs, n, out, w, h, &st, err, sizeof err)))
        rc = td_cli_refuse(cli, prc == -ENODATA ? TD_ERR_CONFLICT
                                                : TD_CLI_ERR_FAILED,
                           "%s", err); /* as for one job */
    if (rc == 0 && cli->json) {
        json_t *arr = json_array();
        for (int j = 0; j < n; j++) {
            json_t *pts = json_object();
            for (int p = 0; p < TD_PLOT_C_NPANELS; p++)
                json_object_set_new(pts, td_plot_compare_key(p),
                                    json_integer(st.points[j][p]));
            json_array_append_new(arr, json_pack(
                "{s:I, s:i, s:i, s:o}", "job", (json_int_t)ids[j], "epochs",
                st.epochs[j], "windows", st.windows[j], "points", pts));
        }
        json_t *o = json_pack("{s:s, s:i, s:i, s:o}", "path", out, "width",
                              w, "height", h, "jobs", arr);
        td_print_json(o);
        json_decref(o);
    } else if (rc == 0) {
        printf("%d jobs compared -> %s (%dx%d)\n", n, out, w, h);
        for (int j = 0; j < n; j++) {
            if (st.epochs[j] + st.windows[j] == 0) {
                printf("  job %lld: no finished epoch or metrics window "
                       "yet: left out\n", (long long)ids[j]);
                continue;
            }
            printf("  job %lld: %d epoch%s, %d metrics window%s\n",
                   (long long)ids[j], st.epochs[j],
                   st.epochs[j] == 1 ? "" : "s", st.windows[j],
                   st.windows[j] == 1 ? "" : "s");
            for (int p = 0; p < TD_PLOT_C_NPANELS; p++)
                if (st.points[j][p] == 0)
                    printf("    no %s values: left out\n",
                           td_plot_compare_key(p));
        }
    }
    for (int j = 0; j < n; j++)
        json_decref(r[j]);
    return rc;
}

int td_cmd_plot(int argc, char **argv)
{
    td_cli cli = {.usage = td__usage};
    const char *out = NULL, *size = "1200x900";
    td_cli_flag flags[] = {
        {"--output", "-o", 1, &out, NULL, NULL},
        {"--size", NULL, 1, &size, NULL, NULL},
        {NULL, NULL, 0, NULL, NULL, NULL},
    };
    int w, h;
    int rc = td_cli_parse(&cli, argc, argv, flags, 1, TD_CLI_MAX_POS);
    if (rc)
        return rc < 0 ? TD_EXIT_OK : rc;
    if (cli.npos > TD_PLOT_MAX_JOBS)
        return td_cli_usage_error(&cli, "%d jobs: at most %d in one plot",
                                  cli.npos, TD_PLOT_MAX_JOBS);
    int64_t ids[TD_PLOT_MAX_JOBS];
    for (int j = 0; j < cli.npos; j++)
        if ((ids[j] = td_cli_job_id(&cli, cli.pos[j])) < 0)
            return TD_EXIT_USAGE;
    int64_t id = ids[0];
    if (!out)
        return td_cli_usage_error(&cli, "-o FILE.png is required");
    if (td__size(size, &w, &h))
        return td_cli_usage_error(&cli, "--size: expected WxH from %dx%d to "
                                  "%dx%d, not '%s'", TD_PLOT_MIN_W,
                                  TD_PLOT_MIN_H, TD_PLOT_MAX_SIDE,
                                  TD_PLOT_MAX_SIDE, size);
    if (cli.npos > 1)
        return td__compare(&cli, ids, cli.npos, out, w, h);
    td_conn c;
    if ((rc = td_conn_open(&c, td_cli_socket(cli.socket))))
        return rc;
    json_t *r = td_conn_show(&c, "plot", id, cli.json, &rc);
    td_conn_close(&c);
    if (!r)
        return rc;
    const json_t *job = json_object_get(json_object_get(r, "ok"), "job");
    td_plot_stats st;
    char err[600];
    if ((rc = td_plot_curves(job, out, w, h, &st, err, sizeof err))) {
        json_decref(r); /* nothing to draw yet: as the daemon would say it */
        return td_cli_refuse(&cli, rc == -ENODATA ? TD_ERR_CONFLICT
                                                  : TD_CLI_ERR_FAILED,
                             "%s", err);
    }
    if (cli.json) {
        json_t *pts = json_pack("{s:i, s:i}", "epochs", st.epochs, "windows",
                                st.windows);
        json_t *series = json_object();
        for (int s = 0; s < TD_PLOT_NSERIES; s++) {
            /* "train_loss" is in the windows and the epochs alike */
            char key[48];
            snprintf(key, sizeof key, "%s%s", td_plot_series[s].key,
                     s == TD_PLOT_S_LOSS_WINDOW ? "_window" : "");
            json_object_set_new(series, key, json_integer(st.points[s]));
        }
        json_object_set_new(pts, "series", series);
        json_t *o = json_pack("{s:s, s:i, s:i, s:o}", "path", out, "width",
                              w, "height", h, "points", pts);
        td_print_json(o);
        json_decref(o);
    } else {
        printf("job %lld: %d epoch%s, %d metrics window%s -> %s (%dx%d)\n",
               (long long)id, st.epochs, st.epochs == 1 ? "" : "s",
               st.windows, st.windows == 1 ? "" : "s", out, w, h);
        for (int s = 0; s < TD_PLOT_NSERIES; s++)
            if (st.points[s] == 0 &&
                (td_plot_series[s].per_epoch ? st.epochs : st.windows))
                printf("  no %s values: left out\n", td_plot_series[s].label);
    }
    json_decref(r);
    return TD_EXIT_OK;
}
