/* cmd_history.c - `trainctl history JOB... [--csv] [--windows] [--json]`:
 * a job's (or several jobs') learning curves as the daemon keeps them in
 * its record
 * (daemon/curves.h): every finished epoch's train and validation loss and
 * accuracy, learning rate, samples/s, input wait, device idle and verdict;
 * with --windows the metrics-window points instead.  A table for people,
 * CSV for spreadsheets and plotting tools, JSON as the daemon gives it.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "conn.h"

static const char td__usage[] =
    "usage: trainctl history JOB [JOB...] [--csv] [--windows] [--json]\n"
    "                        [--socket PATH]\n"
    "\n"
    "A job's learning curves, kept in its record while it runs: one row\n"
    "per finished epoch (epoch counted from 1, the step at its end, train\n"
    "and validation loss and accuracy, the learning rate of its last step,\n"
    "samples/s, input wait, device idle and the verdict).  A resumed\n"
    "epoch's train loss covers the whole epoch.  With several jobs, a\n"
    "table per job under its id and name; one CSV with a job column first.\n"
    "\n"
    "  --csv       comma-separated values with a header row (ratios as\n"
    "              fractions, empty where a value is unknown, e.g. no\n"
    "              validation set)\n"
    "  --windows   the metrics-window points instead of the epochs (step,\n"
    "              the window's mean train loss, lr, samples/s, input\n"
    "              wait, idle, verdict; at most 1024, thinned evenly)\n"
    "  --json      {\"job\": ID, \"history\": [...], \"curve\": [...]} as the\n"
    "              daemon keeps them (epochs 0-based there, as in events);\n"
    "              several jobs: {\"jobs\": [such objects]}\n"
    "\n"
    "Exit codes: 0 printed (also when no epoch has finished yet), 1 a job\n"
    "is unknown or another user's (then nothing is printed for any), 2\n"
    "usage, 3 cannot reach the daemon.\n";

#define TD__MAX_JOBS 100

typedef struct td__col {
    const char *key;    /* in the entry */
    const char *head;   /* table heading and CSV column */
    int pct;            /* a ratio shown as percent in the table */
} td__col;

static const td__col td__epoch_cols[] = {
    {"epoch", "epoch", 0},           {"step", "step", 0},
    {"train_loss", "train_loss", 0}, {"train_acc", "train_acc", 0},
    {"val_loss", "val_loss", 0},     {"val_acc", "val_acc", 0},
    {"lr", "lr", 0},                 {"samples_per_s", "samples_per_s", 0},
    {"input_wait_ratio", "input_wait", 1},
    {"device_idle_ratio", "device_idle", 1},
    {"verdict", "verdict", 0},       {NULL, NULL, 0}};

static const td__col td__window_cols[] = {
    {"step", "step", 0},             {"epoch", "epoch", 0},
    {"train_loss", "train_loss", 0}, {"lr", "lr", 0},
    {"samples_per_s", "samples_per_s", 0},
    {"input_wait_ratio", "input_wait", 1},
    {"device_idle_ratio", "device_idle", 1},
    {"verdict", "verdict", 0},       {NULL, NULL, 0}};

/* One value as text: "" for null or missing; epochs from 1. */
static void td__cell(const json_t *e, const td__col *c, int csv, char *buf,
                     size_t cap)
{
    const json_t *v = json_object_get(e, c->key);
    buf[0] = '\0';
    if (json_is_string(v)) {
        snprintf(buf, cap, "%s", json_string_value(v));
    } else if (json_is_integer(v)) {
        json_int_t i = json_integer_value(v);
        snprintf(buf, cap, "%lld",
                 (long long)(strcmp(c->key, "epoch") == 0 ? i + 1 : i));
    } else if (json_is_number(v)) {
        double d = json_number_value(v);
        if (!isfinite(d))
            snprintf(buf, cap, "%s", csv ? "" : "-");
        else if (csv)
            snprintf(buf, cap, "%.9g", d);
        else if (c->pct)
            snprintf(buf, cap, "%.1f%%", 100 * d);
        else if (strcmp(c->key, "samples_per_s") == 0)
            snprintf(buf, cap, "%.1f", d);
        else if (strcmp(c->key, "lr") == 0)
            snprintf(buf, cap, "%.4g", d);
        else
            snprintf(buf, cap, "%.4f", d);
    } else if (!csv) {
        snprintf(buf, cap, "-");
    }
}

/* The header row (csv: with a leading "job" column when job > 0). */
static void td__head(const td__col *cols, int csv, int64_t job)
{
    if (csv && job > 0)
        printf("job,");
    for (int k = 0; cols[k].key; k++) {
        int w = (int)(strlen(cols[k].head) > 10 ? strlen(cols[k].head) : 10);
        printf("%s%-*s", k ? (csv ? "," : " ") : "", csv ? 0 : w,
               cols[k].head);
    }
    putchar('\n');
}

/* The rows (csv: each led by the job's id when job > 0). */
static void td__rows(const json_t *rows, const td__col *cols, int csv,
                     int64_t job)
{
    size_t i;
    json_t *e;
    char cell[96];
    json_array_foreach(rows, i, e) {
        if (csv && job > 0)
            printf("%lld,", (long long)job);
        for (int k = 0; cols[k].key; k++) {
            td__cell(e, &cols[k], csv, cell, sizeof cell);
            int w = (int)(strlen(cols[k].head) > 10 ? strlen(cols[k].head)
                                                    : 10);
            if (csv) /* no value holds a comma or a quote */
                printf("%s%s", k ? "," : "", cell);
            else
                printf("%s%-*s", k ? " " : "", w, cell);
        }
        putchar('\n');
    }
}

static json_t *td__job_json(int64_t id, const json_t *job)
{
    json_t *hist = json_object_get(job, "history");
    json_t *curve = json_object_get(job, "curve");
    return json_pack("{s:I, s:o, s:o}", "job", (json_int_t)id, "history",
                     hist ? json_incref(hist) : json_array(), "curve",
                     curve ? json_incref(curve) : json_array());
}

int td_cmd_history(int argc, char **argv)
{
    td_cli cli = {.usage = td__usage};
    int csv = 0, windows = 0;
    td_cli_flag flags[] = {
        {"--csv", NULL, 0, NULL, &csv, NULL},
        {"--windows", NULL, 0, NULL, &windows, NULL},
        {NULL, NULL, 0, NULL, NULL, NULL},
    };
    int64_t ids[TD__MAX_JOBS];
    td_conn c;
    /* The command line first: a usage error is one with or without a
     * daemon (exit 2, not 3). */
    int rc = td_cli_parse(&cli, argc, argv, flags, 1, TD_CLI_MAX_POS);
    if (rc)
        return rc < 0 ? TD_EXIT_OK : rc;
    int n = cli.npos;
    if (n > TD__MAX_JOBS)
        return td_cli_usage_error(&cli, "%d jobs: at most %d at once", n,
                                  TD__MAX_JOBS);
    for (int k = 0; k < n; k++)
        if ((ids[k] = td_cli_job_id(&cli, cli.pos[k])) < 0)
            return TD_EXIT_USAGE;
    if (csv && cli.json)
        return td_cli_usage_error(&cli, "--csv and --json: choose one");
    if ((rc = td_conn_open(&c, td_cli_socket(cli.socket))) != TD_EXIT_OK)
        return rc;
    /* every record first: a refusal prints nothing of the others */
    json_t *r[TD__MAX_JOBS] = {0};
    const json_t *jobs[TD__MAX_JOBS] = {0}; /* the records, in r */
    for (int k = 0; k < n && rc == TD_EXIT_OK; k++) {
        r[k] = td_conn_show(&c, "history", ids[k], cli.json, &rc);
        jobs[k] = json_object_get(json_object_get(r[k], "ok"), "job");
        if (r[k] && json_is_true(json_object_get(jobs[k], "restricted")))
            rc = td_cli_refuse(&cli, TD_ERR_PERMISSION, "job %lld is another "
                               "user's; only its owner and root see its "
                               "curves", (long long)ids[k]);
    }
    td_conn_close(&c);
    const td__col *cols = windows ? td__window_cols : td__epoch_cols;
    if (rc == TD_EXIT_OK && cli.json) {
        json_t *o = NULL;
        if (n == 1) {
            o = td__job_json(ids[0], jobs[0]);
        } else {
            json_t *arr = json_array();
            for (int k = 0; k < n; k++)
                json_array_append_new(arr, td__job_json(ids[k], jobs[k]));
            o = json_pack("{s:o}", "jobs", arr);
        }
        td_print_json(o);
        json_decref(o);
    } else if (rc == TD_EXIT_OK) {
        if (csv)
            td__head(cols, 1, n > 1 ? 1 : 0);
        for (int k = 0; k < n; k++) {
            const json_t *job = jobs[k];
            const json_t *rows = json_object_get(job, windows ? "curve"
                                                              : "history");
            if (csv) {
                td__rows(rows, cols, 1, n > 1 ? ids[k] : 0);
                continue;
            }
            if (n > 1) {
                const char *name = json_string_value(
                    json_object_get(job, "name"));
                printf("%sjob %lld%s%s%s:\n", k ? "\n" : "",
                       (long long)ids[k], name ? " (" : "",
                       name ? name : "", name ? ")" : "");
            }
            if (json_array_size(rows) == 0) {
                printf("job %lld: %s\n", (long long)ids[k],
                       windows ? "no metrics window has closed yet"
                               : "no epoch has finished yet");
                continue;
            }
            td__head(cols, 0, 0);
            td__rows(rows, cols, 0, 0);
        }
    }
    for (int k = 0; k < n; k++)
        json_decref(r[k]);
    return rc;
}
