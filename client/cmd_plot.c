/* cmd_plot.c - `trainctl plot JOB -o curves.png [--size WxH]`: a job's
 * learning curves (issue 18) as one PNG of four panels against the step:
 * loss, accuracy, throughput, idle.  Asks the daemon for the job record
 * (`show`, its "history" and "curve" arrays) and draws it here with
 * client/plot.c; the client writes the file, never the daemon.
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
    "usage: trainctl plot JOB -o FILE.png [--size WxH] [--json]\n"
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
    "  -o, --output FILE  the PNG to write, required\n"
    "  --size WxH         its size in pixels (default 1200x900, from 400x300\n"
    "                     to 8000x8000)\n"
    "  --json             print {\"path\", \"width\", \"height\",\n"
    "                     \"points\"}: the values drawn per series\n"
    "\n"
    "Exit codes: 0 written, 1 the daemon refused (no such job), the job has\n"
    "no finished epoch or metrics window yet, or FILE cannot be written;\n"
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
    int rc = td_cli_parse(&cli, argc, argv, flags, 1, 1);
    if (rc)
        return rc < 0 ? TD_EXIT_OK : rc;
    int64_t id = td_cli_job_id(&cli, cli.pos[0]);
    if (id < 0)
        return TD_EXIT_USAGE;
    if (!out)
        return td_cli_usage_error(&cli, "-o FILE.png is required");
    if (td__size(size, &w, &h))
        return td_cli_usage_error(&cli, "--size: expected WxH from %dx%d to "
                                  "%dx%d, not '%s'", TD_PLOT_MIN_W,
                                  TD_PLOT_MIN_H, TD_PLOT_MAX_SIDE,
                                  TD_PLOT_MAX_SIDE, size);
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
    if (td_plot_curves(job, out, w, h, &st, err, sizeof err)) {
        fprintf(stderr, "trainctl plot: %s\n", err);
        json_decref(r);
        return TD_EXIT_REFUSED;
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
