/* cmd_top.c - `trainctl top`: one screen for the whole daemon, every job
 * with its progress, samples/s, device idle, input wait and verdict,
 * refreshed every --interval seconds on a terminal (q or Ctrl-C ends it).
 * Not on a terminal, with --once or --json: one snapshot, then exit.
 */
#define _GNU_SOURCE
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "commands.h"
#include "conn.h"

static const char td__usage[] =
    "usage: trainctl top [--interval S] [--once] [--json] [--socket PATH]\n"
    "\n"
    "Every job of the daemon on one screen: state, progress, samples/s,\n"
    "device idle ratio, input wait ratio and the bottleneck verdict of its\n"
    "last window.  Refreshes every S seconds (default 2) on a terminal;\n"
    "press q to quit.  With --once, --json or output that is not a\n"
    "terminal it prints one snapshot.\n"
    "\n"
    "  -d, --interval S  seconds between refreshes, 0.1..3600 (default 2)\n"
    "  -1, --once        print one snapshot and exit\n";

static const char *td__str(json_t *o, const char *key, const char *dflt)
{
    const char *v = json_string_value(json_object_get(o, key));
    return v ? v : dflt;
}

static void td__ratio(char *buf, size_t cap, json_t *v)
{
    if (json_is_number(v))
        snprintf(buf, cap, "%5.1f%%", 100.0 * json_number_value(v));
    else
        snprintf(buf, cap, "%6s", "-");
}

/* Prints the table; returns the number of jobs. */
static int td__screen(td_conn *c, json_t *jobs, int clear)
{
    char when[32], idle[16], input[16], prog[32], sps[16];
    time_t now = time(NULL);
    struct tm tm;
    size_t i;
    json_t *j;
    int running = 0;
    strftime(when, sizeof when, "%H:%M:%S", localtime_r(&now, &tm));
    json_array_foreach(jobs, i, j) running +=
        strcmp(td__str(j, "state", ""),
               "running") == 0;
    if (clear)
        fputs("\033[H\033[2J", stdout);
    printf("traind %s on %s - %s - %zu job(s), %d running\n\n",
           td__str(json_object_get(c->hello, "hello"), "version", "?"),
           td__str(json_object_get(c->hello, "hello"), "device", "?"),
           when, json_array_size(jobs), running);
    printf("%5s  %-20s %-10s %15s %10s %7s %7s  %s\n", "JOB", "NAME", "STATE",
           "PROGRESS", "SAMPLES/S", "IDLE", "INPUT", "VERDICT");
    json_array_foreach(jobs, i, j) {
        json_int_t step = json_integer_value(json_object_get(j, "step"));
        json_int_t total =
            json_integer_value(json_object_get(j, "steps_total"));
        json_t *s = json_object_get(j, "samples_per_s");
        if (total > 0)
            snprintf(prog, sizeof prog, "%lld/%lld", (long long)step,
                     (long long)total);
        else
            snprintf(prog, sizeof prog, "%lld", (long long)step);
        if (json_is_number(s) && isfinite(json_number_value(s)))
            snprintf(sps, sizeof sps, "%.1f", json_number_value(s));
        else
            snprintf(sps, sizeof sps, "-");
        td__ratio(idle, sizeof idle, json_object_get(j, "device_idle_ratio"));
        td__ratio(input, sizeof input,
                  json_object_get(j, "input_wait_ratio"));
        char lscale[64] = ""; /* only for jobs that scale their loss */
        json_t *ls = json_object_get(j, "loss_scale");
        if (json_is_number(ls))
            snprintf(lscale, sizeof lscale, "  (loss scale %g, %lld "
                     "skipped)", json_number_value(ls), (long long)
                     json_integer_value(json_object_get(j, "skipped_steps")));
        printf("%5lld  %-20.20s %-10s %15s %10s %7s %7s  %s%s\n",
               (long long)json_integer_value(json_object_get(j, "id")),
               td__str(j, "name", ""),
               td__str(j, "state", "?"), prog,
               sps, idle, input,
               td__str(j, "verdict", "-"), lscale);
    }
    fflush(stdout);
    return (int)json_array_size(jobs);
}

/* Waits up to ms for a key; 1 when it was q (or stdin closed). */
static int td__quit_key(int ms)
{
    struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};
    char ch;
    if (poll(&p, 1, ms) <= 0)
        return 0;
    if (read(STDIN_FILENO, &ch, 1) != 1)
        return 1;
    return ch == 'q' || ch == 'Q';
}

int td_cmd_top(int argc, char **argv)
{
    const char *interval_s = NULL;
    int once = 0;
    td_cli_flag flags[] = {{"--interval", "-d", 1, &interval_s, NULL, NULL},
                           {"--once", "-1", 0, NULL, &once, NULL},
                           {NULL, NULL, 0, NULL, NULL, NULL}};
    td_cli cli = {.usage = td__usage};
    td_conn c;
    double interval = 2.0;
    int rc = td_cli_parse(&cli, argc, argv, flags, 0, 0);
    if (rc)
        return rc < 0 ? TD_EXIT_OK : rc;
    if (interval_s) {
        char *end;
        interval = strtod(interval_s, &end);
        if (*end || end == interval_s || !(interval >= 0.1) ||
            interval > 3600)
            return td_cli_usage_error(&cli, "--interval: expected 0.1..3600 "
                                      "seconds, not '%s'", interval_s);
    }
    int live = !once && !cli.json && isatty(STDOUT_FILENO);
    if ((rc = td_conn_open(&c, td_cli_socket(cli.socket))))
        return rc;
    struct termios saved, raw;
    int tty_in = live && isatty(STDIN_FILENO) &&
                 tcgetattr(STDIN_FILENO, &saved) == 0;
    if (tty_in) { /* keys without Enter, no echo */
        raw = saved;
        raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
        tcsetattr(STDIN_FILENO, TCSANOW, &raw);
    }
    for (;;) {
        json_t *r = td_conn_request(&c, "list", NULL, NULL, NULL);
        if (!r) {
            rc = TD_EXIT_UNREACHABLE;
            break;
        }
        if ((rc = td_conn_check(argv[0], r, cli.json)) != TD_EXIT_OK) {
            json_decref(r);
            break;
        }
        json_t *jobs = json_object_get(json_object_get(r, "ok"), "jobs");
        if (cli.json) {
            json_t *snap = json_pack("{s:O, s:O}", "daemon",
                                     json_object_get(c.hello, "hello"), "jobs",
                                     jobs);
            td_print_json(snap);
            json_decref(snap);
        } else
            td__screen(&c, jobs, live);
        json_decref(r);
        if (!live || td__quit_key((int)(interval * 1000)))
            break;
    }
    if (tty_in)
        tcsetattr(STDIN_FILENO, TCSANOW, &saved);
    td_conn_close(&c);
    return rc;
}
