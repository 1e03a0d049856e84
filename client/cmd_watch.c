/* cmd_watch.c - trainctl watch and logs: live views built from the
 * daemon's events.
 *
 * On a terminal, watch redraws a small block in place (progress bar with
 * epoch/step and ETA, samples/s, device idle and input wait, the phase
 * split, the verdict with its advice, validation accuracy per epoch).
 * When stdout is not a terminal it prints one plain line per window,
 * epoch and state change.  --json prints the events as they come.
 */
#include <math.h>
#include <stdarg.h>
#include <sys/ioctl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "commands.h"
#include "conn.h"
#include "watch.h"

#define JNUM(o, k) json_number_value(json_object_get((o), (k)))
#define JINT(o, k) ((long long)json_integer_value(json_object_get((o), (k))))
#define JSTR(o, k, d)                                                        \
    (json_string_value(json_object_get((o), (k)))                            \
         ? json_string_value(json_object_get((o), (k)))                      \
         : (d))

typedef struct td_view {
    int64_t job;
    int tty, json;
    int drawn;          /* lines drawn last time (tty) */
    int lines;          /* lines drawn so far this time */
    int cols;           /* terminal width */
    json_t *window;     /* last window event data */
    json_t *step;       /* last step event data */
    json_t *epochs;     /* array of epoch event data */
    char state[32];
    char reason[256];
} td_view;

static void td__bar(double frac, char *buf, int width)
{
    int fill = (int)(frac * width + 0.5);
    if (fill < 0)
        fill = 0;
    if (fill > width)
        fill = width;
    for (int i = 0; i < width; i++)
        buf[i] = i < fill ? '#' : '.';
    buf[width] = '\0';
}

static void td__eta(double seconds, char *buf, size_t cap)
{
    if (!isfinite(seconds) || seconds < 0)
        snprintf(buf, cap, "--:--");
    else if (seconds < 3600)
        snprintf(buf, cap, "%02d:%02d", (int)seconds / 60, (int)seconds % 60);
    else
        snprintf(buf, cap, "%dh%02dm", (int)seconds / 3600,
                 ((int)seconds % 3600) / 60);
}

/* One line of the live block, clipped to the terminal's width so that
 * no line wraps (a wrapped line would break the redraw in place). */
__attribute__((format(printf, 2, 3))) static void td__line(td_view *v,
                                                           const char *fmt,
                                                           ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    int cols = v->cols > 1 ? v->cols - 1 : 79;
    if (v->tty && n > cols) { /* cut at a character boundary (UTF-8) */
        int k = cols;
        while (k > 0 && ((unsigned char)buf[k] & 0xC0) == 0x80)
            k--;
        buf[k] = '\0';
    }
    fputs(buf, stdout);
    fputs(v->tty ? "\033[K\n" : "\n", stdout);
    v->lines++;
}

static void td__draw(td_view *v)
{
    json_t *w = v->window, *s = v->step;
    json_t *src = s ? s : w;
    long long step = src ? JINT(src, "step") : 0;
    long long total = src ? JINT(src, "steps_total") : 0;
    long long epoch = src ? JINT(src, "epoch") : 0;
    long long epochs = src ? JINT(src, "epochs_total") : 0;
    double sps = w ? JNUM(w, "samples_per_s") : 0;
    double frac = total > 0 ? (double)step / (double)total : 0;
    char bar[31], eta[16];
    td__bar(frac, bar, 30);
    double batch = w ? JNUM(w, "batch_size") : 0;
    td__eta(sps > 0 && batch > 0 ? (double)(total - step) * batch / sps : NAN,
            eta, sizeof eta);
    if (v->tty && v->drawn)
        printf("\033[%dA", v->drawn); /* back to the top of the block */
    struct winsize ws;
    v->cols = ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col ? ws.ws_col
                                                                     : 80;
    v->lines = 0;
#define LINE(...) td__line(v, __VA_ARGS__)
    LINE("job %lld  %s  [%s] %5.1f%%  epoch %lld/%lld  step %lld/%lld  "
         "ETA %s",
         (long long)v->job, v->state, bar, 100 * frac, epoch + 1, epochs, step,
         total, eta);
    if (w) {
        LINE("  %.0f samples/s   device idle %.0f%% (lower bound)   "
             "input wait %.0f%%   loss %.4f",
             sps, 100 * JNUM(w, "device_idle_ratio"),
             100 * JNUM(w, "input_wait_ratio"), JNUM(s ? s : w, "loss"));
        json_t *ph = json_object_get(w, "phase_shares");
        if (json_is_object(ph)) {
            char buf[256];
            int n = 0;
            const char *k;
            json_t *x;
            json_object_foreach(ph, k, x) {
                n += snprintf(buf + n, sizeof buf - (size_t)n, " %s %.0f%%", k,
                              100 * json_number_value(x));
                if (n >= (int)sizeof buf)
                    break;
            }
            /* Host phases; on the CPU backend the compute itself runs on
             * the host and shows as "other". */
            double wall = JNUM(w, "wall_s"), busy = JNUM(w, "device_busy_s");
            LINE("  device busy %.0f%% | host:%s", wall > 0 ? 100 * busy / wall
                                                          : 0.0, buf);
        }
        LINE("  verdict: %s — %s", JSTR(w, "verdict", "-"),
             JSTR(w, "advice", ""));
    }
    size_t i;
    json_t *e;
    json_array_foreach(v->epochs, i, e) {
        char val[64];
        td_fmt_val(e, val, sizeof val);
        LINE("  epoch %lld: %s", JINT(e, "epoch") + 1, val);
    }
#undef LINE
    v->drawn = v->lines;
    fflush(stdout);
}

static void td__plain(td_view *v, const char *kind, json_t *d)
{
    if (strcmp(kind, "window") == 0) {
        printf("job %lld epoch %lld step %lld/%lld: %.0f samples/s, loss "
               "%.4f, device idle %.0f%%, input wait %.0f%%, verdict %s\n",
               (long long)v->job, JINT(d, "epoch") + 1, JINT(d, "step"),
               JINT(d, "steps_total"), JNUM(d, "samples_per_s"),
               JNUM(d, "loss"), 100 * JNUM(d, "device_idle_ratio"),
               100 * JNUM(d, "input_wait_ratio"), JSTR(d, "verdict", "-"));
    } else if (strcmp(kind, "epoch") == 0) {
        char val[64];
        td_fmt_val(d, val, sizeof val);
        printf("job %lld epoch %lld done: %s\n", (long long)v->job,
               JINT(d, "epoch") + 1, val);
    } else if (strcmp(kind, "state") == 0) {
        printf("job %lld %s: %s\n", (long long)v->job, JSTR(d, "state", "?"),
               JSTR(d, "reason", ""));
    } else if (strcmp(kind, "checkpoint") == 0) {
        printf("job %lld checkpoint %s: %s\n", (long long)v->job,
               json_is_true(json_object_get(d, "ok")) ? "written" : "FAILED",
               JSTR(d, "path", JSTR(d, "error", "")));
    } else if (strcmp(kind, "log") == 0) {
        /* Info lines say what the events above already said (states,
         * epochs, checkpoints); warnings and errors are news. */
        const char *lv = JSTR(d, "level", "");
        if (strcmp(lv, "WARN") == 0 || strcmp(lv, "ERROR") == 0)
            printf("job %lld log: %s\n", (long long)v->job,
                   JSTR(d, "line", ""));
    }
    fflush(stdout);
}

void td_fmt_val(const json_t *epoch, char *buf, size_t cap)
{
    if (json_is_number(json_object_get(epoch, "val_acc")))
        snprintf(buf, cap, "val_acc %.4f  val_loss %.4f",
                 JNUM(epoch, "val_acc"), JNUM(epoch, "val_loss"));
    else /* null: the job has no validation set */
        snprintf(buf, cap, "no validation set");
}

static int td__final(const char *state)
{
    return strcmp(state, "completed") == 0 || strcmp(state, "failed") == 0 ||
           strcmp(state, "cancelled") == 0;
}

static void td__on_event(json_t *ev, td_view *v)
{
    const char *kind = JSTR(ev, "event", "");
    json_t *d = json_object_get(ev, "data");
    if (JINT(ev, "job") != v->job)
        return;
    if (v->json) {
        td_print_json(ev);
    }
    if (strcmp(kind, "state") == 0) {
        snprintf(v->state, sizeof v->state, "%s", JSTR(d, "state", "?"));
        snprintf(v->reason, sizeof v->reason, "%s", JSTR(d, "reason", ""));
    } else if (strcmp(kind, "window") == 0) {
        json_decref(v->window);
        v->window = json_incref(d);
    } else if (strcmp(kind, "step") == 0) {
        json_decref(v->step);
        v->step = json_incref(d);
    } else if (strcmp(kind, "epoch") == 0) {
        json_array_append(v->epochs, d);
    }
    if (v->json)
        return;
    if (v->tty && strcmp(kind, "log") != 0)
        td__draw(v);
    else if (!v->tty && strcmp(kind, "step") != 0)
        td__plain(v, kind, d);
}

static void td__on_event_cb(json_t *ev, void *user)
{
    td__on_event(ev, user);
}

int td_watch_job(td_conn *c, int64_t job, int json, int quiet_header)
{
    td_view v = {.job = job, .json = json, .tty = !json && isatty(1)};
    int rc = TD_EXIT_UNREACHABLE;
    v.epochs = json_array();
    json_t *r = td_conn_request(
        c, "subscribe",
        json_pack("{s:I, s:i}", "job", (json_int_t)job, "every_ms", 500),
        td__on_event_cb, &v);
    if (!r)
        goto out;
    if ((rc = td_conn_check("watch", r, json)) != TD_EXIT_OK)
        goto out;
    json_decref(r);
    /* The job's state now; events from here on keep it current. */
    r = td_conn_request(c, "show", json_pack("{s:I}", "job", (json_int_t)job),
                        td__on_event_cb, &v);
    if (!r || (rc = td_conn_check("watch", r, json)) != TD_EXIT_OK)
        goto out;
    json_t *j = json_object_get(json_object_get(r, "ok"), "job");
    snprintf(v.state, sizeof v.state, "%s", JSTR(j, "state", "?"));
    snprintf(v.reason, sizeof v.reason, "%s", JSTR(j, "reason", ""));
    if (!json && !quiet_header && !v.tty)
        printf("job %lld %s: %s\n", (long long)job, v.state, v.reason);
    while (!td__final(v.state)) {
        json_t *ev = td_conn_read(c, -1, NULL);
        if (!ev) {
            fprintf(stderr, "trainctl: lost the connection to traind\n");
            rc = TD_EXIT_UNREACHABLE;
            goto out;
        }
        if (json_object_get(ev, "event"))
            td__on_event(ev, &v);
        json_decref(ev);
    }
    if (v.tty) {
        td__draw(&v);
        printf("job %lld %s: %s\n", (long long)job, v.state, v.reason);
    }
    rc = strcmp(v.state, "completed") == 0 ? TD_EXIT_OK : TD_EXIT_REFUSED;
out:
    json_decref(r);
    json_decref(v.window);
    json_decref(v.step);
    json_decref(v.epochs);
    return rc;
}

static const char watch_usage[] =
    "usage: trainctl watch JOB [--json] [--socket PATH]\n"
    "\n"
    "Follow a job live until it ends: progress with ETA, samples/s, device\n"
    "idle and input wait, the phase split, the verdict and its advice, and\n"
    "validation accuracy per epoch.  Redraws in place on a terminal, prints\n"
    "plain lines otherwise; --json prints the events.  Exits 0 when the job\n"
    "completed, 1 when it failed or was cancelled.\n";

int td_cmd_watch(int argc, char **argv)
{
    td_cli cli = {.usage = watch_usage};
    int64_t id;
    td_conn c;
    int rc = td_cli_job_command(&cli, argc, argv, NULL, &id, &c);
    if (rc)
        return rc < 0 ? TD_EXIT_OK : rc;
    rc = td_watch_job(&c, id, cli.json, 0);
    td_conn_close(&c);
    return rc;
}
