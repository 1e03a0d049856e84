/* cmd_watch.c - trainctl watch and logs: live views built from the
 * daemon's events.
 *
 * On a terminal, watch redraws a small block in place (progress bar with
 * epoch/step and ETA, samples/s, device idle and input wait, the phase
 * split, the verdict with its advice, validation accuracy per epoch).
 * When stdout is not a terminal it prints plain lines: the latest window
 * (at most one a second), each epoch and state change.  --json prints the events as they come.
 */
#include <math.h>
#include <stdarg.h>
#include <sys/ioctl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "cli.h"
#include "commands.h"
#include "conn.h"
#include "proto/protocol.h"
#include "watch.h"

/* How long watch waits for a traind that went away mid-job to come back
 * (a restart: the job resumes from its checkpoint). */
#define TD_WATCH_RECONNECT_S 120

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
    json_t *images;     /* last eval event data (eval, predict jobs) */
    json_t *record;     /* the job as `show` gave it (the first frame) */
    double eta_s;       /* the daemon's latest estimate; < 0: none */
    int cpu;            /* the daemon trains on the CPU */
    char state[32];
    char reason[256];
    char note[200];     /* the job's latest info line before its first
                           step: what its start is doing (say, timing
                           the bf16 plan's choices) */
    char away[160];     /* traind went away: what watch does (tty) */
    int64_t window_ns;  /* when the last plain window line was printed */
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
    if (v->tty && n > cols) { /* cut after cols characters (UTF-8) */
        int k = 0, c = 0;
        for (; buf[k]; k++) {
            if (((unsigned char)buf[k] & 0xC0) != 0x80 && c++ == cols)
                break;
        }
        buf[k] = '\0';
    }
    fputs(buf, stdout);
    fputs(v->tty ? "\033[K\n" : "\n", stdout);
    v->lines++;
}

/* Columns of UTF-8 text (characters, not bytes). */
static int td__columns(const char *s, size_t len)
{
    int n = 0;
    for (size_t i = 0; i < len && s[i]; i++)
        n += ((unsigned char)s[i] & 0xC0) != 0x80;
    return n;
}

/* head then text as lines of the live block, the text word-wrapped to the
 * terminal's width with continuation lines indented by 4. */
static void td__wrapped(td_view *v, const char *head, const char *text)
{
    int cols = v->cols > 1 ? v->cols - 1 : 79;
    char buf[1024];
    size_t n = (size_t)snprintf(buf, sizeof buf, "%s", head);
    int width = td__columns(head, n), words = 0;
    for (const char *p = text; *p;) {
        size_t len = strcspn(p, " ");
        int w = td__columns(p, len);
        if (words > 0 && width + 1 + w > cols) {
            td__line(v, "%s", buf);
            n = (size_t)snprintf(buf, sizeof buf, "    ");
            width = 4;
            words = 0;
        }
        if (n + len + 2 < sizeof buf) {
            if (words > 0) {
                buf[n++] = ' ';
                width++;
            }
            memcpy(buf + n, p, len);
            buf[n += len] = '\0';
            width += w;
        }
        words++;
        p += len;
        p += strspn(p, " ");
    }
    td__line(v, "%s", buf);
}

static void td__draw(td_view *v)
{
    json_t *w = v->window, *s = v->step;
    /* Before the first step: the job record (never "epoch 1/0"). */
    json_t *src = s ? s : w ? w : v->record;
    if (s && w && JINT(w, "step") > JINT(s, "step"))
        src = w; /* step events are thinned; a window may be newer */
    long long step = src ? JINT(src, "step") : 0;
    long long total = src ? JINT(src, "steps_total") : 0;
    long long epoch = src ? JINT(src, "epoch") : 0;
    long long epochs = src ? JINT(src, "epochs_total") : 0;
    if (epochs <= 0 && v->record)
        epochs = JINT(json_object_get(v->record, "spec"), "epochs");
    if (strcmp(v->state, "completed") == 0 && total > 0) {
        step = total; /* the last step event may be older than the end */
        epoch = epochs - 1;
        v->eta_s = 0;
    } else if (td_proto_job_state_final(v->state)) {
        v->eta_s = -1; /* cancelled or failed: it will not end, --:-- */
    }
    double sps = w ? JNUM(w, "samples_per_s") : 0;
    double frac = total > 0 ? (double)step / (double)total : 0;
    char bar[64], eta[16], where[96];
    td__eta(v->eta_s, eta, sizeof eta);
    if (v->tty && v->drawn)
        printf("\033[%dA", v->drawn); /* back to the top of the block */
    struct winsize ws;
    v->cols = ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col ? ws.ws_col
                                                                     : 80;
    v->lines = 0;
    if (v->images) { /* an eval or predict job: images, not epochs */
        step = JINT(v->images, "done");
        total = JINT(v->images, "total");
        frac = total > 0 ? (double)step / (double)total : 0;
        snprintf(where, sizeof where, "%s  images %lld/%lld",
                 JSTR(v->images, "task", "eval"), step, total);
    } else if (total > 0)
        snprintf(where, sizeof where, "epoch %lld/%lld  step %lld/%lld",
                 epoch + 1, epochs, step, total);
    else
        snprintf(where, sizeof where, "epoch -/%lld  (%s)", epochs,
                 strcmp(v->state, "running") == 0 ? "starting" : "waiting");
    /* The bar takes what the line leaves, so that ETA always shows. */
    char probe[256];
    int fixed = snprintf(probe, sizeof probe, "job %lld  %s  [] %5.1f%%  %s  "
                         "ETA %s", (long long)v->job, v->state, 100 * frac,
                         where, eta);
    int width = v->cols - 1 - fixed;
    if (width > 30)
        width = 30;
    if (width < 0)
        width = 0;
    td__bar(frac, bar, width);
#define LINE(...) td__line(v, __VA_ARGS__)
    if (width >= 5)
        LINE("job %lld  %s  [%s] %5.1f%%  %s  ETA %s", (long long)v->job,
             v->state, bar, 100 * frac, where, eta);
    else
        LINE("job %lld %s %.0f%% %s ETA %s", (long long)v->job, v->state,
             100 * frac, where, eta);
    if (v->away[0])
        LINE("  %s", v->away);
    if (total <= 0 && strcmp(v->state, "running") == 0 && v->note[0])
        LINE("  %s", v->note); /* what the start is doing */
    if (w) {
        /* The verdict first, then its advice, wrapped: what to do is the
         * point of it (cut at the terminal's width, it lost its end). */
        char head[96];
        snprintf(head, sizeof head, "  verdict: %s — ",
                 JSTR(w, "verdict", "-"));
        td__wrapped(v, head, JSTR(w, "advice", ""));
        LINE("  %.0f samples/s  idle %.0f%% (lower bound)  input wait %.0f%%  "
             "loss %.4f", sps, 100 * JNUM(w, "device_idle_ratio"),
             100 * JNUM(w, "input_wait_ratio"), JNUM(s ? s : w, "loss"));
        const json_t *ls = s && json_object_get(s, "loss_scale") ? s : w;
        if (json_object_get(ls, "loss_scale")) /* the job scales its loss */
            LINE("  loss scale %g  skipped steps %lld",
                 JNUM(ls, "loss_scale"), JINT(ls, "skipped_steps"));
        json_t *ph = json_object_get(w, "phase_shares");
        if (json_is_object(ph)) {
            char buf[256];
            int n = 0;
            const char *k;
            json_t *x;
            json_object_foreach(ph, k, x) {
                /* On the CPU backend the compute runs on the host: the
                 * remainder ("other") is the compute. */
                const char *name = v->cpu && strcmp(k, "other") == 0
                                       ? "compute" : k;
                n += snprintf(buf + n, sizeof buf - (size_t)n, " %s %.0f%%",
                              name, 100 * json_number_value(x));
                if (n >= (int)sizeof buf)
                    break;
            }
            double wall = JNUM(w, "wall_s"), busy = JNUM(w, "device_busy_s");
            if (v->cpu)
                LINE("  host:%s", buf);
            else
                LINE("  device busy %.0f%% | host:%s",
                     wall > 0 ? 100 * busy / wall : 0.0, buf);
        }
    }
    size_t i;
    json_t *e;
    json_array_foreach(v->epochs, i, e) {
        char val[64];
        td_fmt_val(e, val, sizeof val);
        LINE("  epoch %lld: %s", JINT(e, "epoch") + 1, val);
    }
    while (v->lines < v->drawn) /* a shorter frame: blank the rest */
        LINE("%s", "");
#undef LINE
    v->drawn = v->lines;
    fflush(stdout);
}

/* No step yet: the job is being built (data, model, the plan). */
static int td__starting(const td_view *v)
{
    return !v->step && !v->window && !v->images &&
           json_array_size(v->epochs) == 0;
}

/* Plain window lines come at most once a second (a fast job has dozens
 * of windows a second, more than a log file or a reader wants). */
#define TD__PLAIN_WINDOW_NS TD_NS_PER_S

static void td__plain(td_view *v, const char *kind, json_t *d)
{
    if (strcmp(kind, "window") == 0) {
        int64_t now = td_now_ns();
        if (v->window_ns && now - v->window_ns < TD__PLAIN_WINDOW_NS)
            return;
        v->window_ns = now;
        char eta[16];
        td__eta(v->eta_s, eta, sizeof eta);
        printf("job %lld epoch %lld step %lld/%lld: %.0f samples/s, loss "
               "%.4f, device idle %.0f%%, input wait %.0f%%, verdict %s, "
               "ETA %s\n",
               (long long)v->job, JINT(d, "epoch") + 1, JINT(d, "step"),
               JINT(d, "steps_total"), JNUM(d, "samples_per_s"),
               JNUM(d, "loss"), 100 * JNUM(d, "device_idle_ratio"),
               100 * JNUM(d, "input_wait_ratio"), JSTR(d, "verdict", "-"),
               eta);
        if (json_object_get(d, "loss_scale")) /* loss scaling on */
            printf("job %lld step %lld: loss scale %g, skipped steps %lld\n",
                   (long long)v->job, JINT(d, "step"),
                   JNUM(d, "loss_scale"), JINT(d, "skipped_steps"));
    } else if (strcmp(kind, "epoch") == 0) {
        char val[64];
        td_fmt_val(d, val, sizeof val);
        printf("job %lld epoch %lld done: %s\n", (long long)v->job,
               JINT(d, "epoch") + 1, val);
    } else if (strcmp(kind, "eval") == 0) {
        printf("job %lld %s: %lld/%lld images\n", (long long)v->job,
               JSTR(d, "task", "eval"), JINT(d, "done"), JINT(d, "total"));
    } else if (strcmp(kind, "state") == 0) {
        printf("job %lld %s: %s\n", (long long)v->job, JSTR(d, "state", "?"),
               JSTR(d, "reason", ""));
    } else if (strcmp(kind, "checkpoint") == 0) {
        printf("job %lld checkpoint %s: %s\n", (long long)v->job,
               json_is_true(json_object_get(d, "ok")) ? "written" : "FAILED",
               JSTR(d, "path", JSTR(d, "error", "")));
    } else if (strcmp(kind, "log") == 0) {
        /* Info lines say what the events above already said (states,
         * epochs, checkpoints), except before the first step, where they
         * are the start's progress; warnings and errors are news. */
        const char *lv = JSTR(d, "level", "");
        if (strcmp(lv, "WARN") == 0 || strcmp(lv, "ERROR") == 0 ||
            (strcmp(lv, "INFO") == 0 && td__starting(v)))
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

static void td__on_event(json_t *ev, td_view *v)
{
    const char *kind = JSTR(ev, "event", "");
    json_t *d = json_object_get(ev, "data");
    if (JINT(ev, "job") != v->job)
        return;
    if (v->json) {
        td_print_json(ev);
    }
    json_t *eta = json_object_get(d, "eta_s");
    if (json_is_number(eta))
        v->eta_s = json_number_value(eta);
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
    } else if (strcmp(kind, "eval") == 0) {
        json_decref(v->images);
        v->images = json_incref(d);
    } else if (strcmp(kind, "log") == 0 && td__starting(v) &&
               strcmp(JSTR(d, "level", ""), "INFO") == 0) {
        /* the start's progress, on the status line (tty) */
        snprintf(v->note, sizeof v->note, "%s", JSTR(d, "line", ""));
    }
    if (v->json)
        return;
    if (v->tty && (strcmp(kind, "log") != 0 || td__starting(v)))
        td__draw(v);
    else if (!v->tty && strcmp(kind, "step") != 0)
        td__plain(v, kind, d);
}

static void td__on_event_cb(json_t *ev, void *user)
{
    td__on_event(ev, user);
}

/* Subscribes to the job's events and reads its state now (the events
 * from there on keep it current).  TD_EXIT_OK with the show reply in *r,
 * else the exit code (*r holds a refusal, or NULL: connection lost). */
static int td__attach(td_conn *c, td_view *v, json_t **r)
{
    json_int_t job = (json_int_t)v->job;
    int rc;
    *r = td_conn_request(c, "subscribe",
                         json_pack("{s:I, s:i}", "job", job, "every_ms", 500),
                         td__on_event_cb, v);
    if (!*r)
        return TD_EXIT_UNREACHABLE;
    if ((rc = td_conn_check("watch", *r, v->json)) != TD_EXIT_OK)
        return rc;
    json_decref(*r);
    *r = td_conn_request(c, "show", json_pack("{s:I}", "job", job),
                         td__on_event_cb, v);
    if (!*r)
        return TD_EXIT_UNREACHABLE;
    if ((rc = td_conn_check("watch", *r, v->json)) != TD_EXIT_OK)
        return rc;
    json_t *j = json_object_get(json_object_get(*r, "ok"), "job");
    json_decref(v->record);
    v->record = json_incref(j);
    snprintf(v->state, sizeof v->state, "%s", JSTR(j, "state", "?"));
    return TD_EXIT_OK;
}

/* traind went away before the job ended: a restart (the job resumes from
 * its checkpoint once traind is back) or a stop.  Waits up to
 * TD_WATCH_RECONNECT_S for a daemon on the same socket and attaches
 * again: TD_EXIT_OK then, TD_EXIT_REFUSED when the daemon back refuses
 * (the job is gone: printed), TD_EXIT_UNREACHABLE when none came back. */
static int td__reconnect(td_conn *c, td_view *v, json_t **r)
{
    char path[sizeof c->path];
    snprintf(path, sizeof path, "%s", c->path);
    td_conn_close(c);
    json_decref(*r);
    *r = NULL;
    if (v->tty) { /* in the block, so that the redraw stays in place */
        snprintf(v->away, sizeof v->away, "lost the connection to traind; "
                 "waiting up to %d s for it to come back",
                 TD_WATCH_RECONNECT_S);
        td__draw(v);
        v->away[0] = '\0';
    } else {
        fprintf(stderr, "trainctl: lost the connection to traind while job "
                "%lld was %s; waiting up to %d s for it to come back\n",
                (long long)v->job, v->state, TD_WATCH_RECONNECT_S);
    }
    for (int i = 0; i < TD_WATCH_RECONNECT_S * 4; i++) {
        usleep(250000);
        if (td_conn_try_open(c, path) != TD_EXIT_OK)
            continue;
        int rc = td__attach(c, v, r);
        if (rc != TD_EXIT_UNREACHABLE)
            return rc;
        td_conn_close(c); /* gone again: try again */
        json_decref(*r);
        *r = NULL;
    }
    return TD_EXIT_UNREACHABLE;
}

int td_watch_job(td_conn *c, int64_t job, int json, int quiet_header)
{
    td_view v = {.job = job, .json = json, .tty = !json && isatty(1),
                 .eta_s = -1};
    const char *dev = json_string_value(json_object_get(
        json_object_get(c->hello, "hello"), "device"));
    v.cpu = dev && strncmp(dev, "cpu", 3) == 0;
    json_t *r = NULL;
    v.epochs = json_array();
    int rc = td__attach(c, &v, &r);
    if (rc != TD_EXIT_OK)
        goto out;
    json_t *j = v.record;
    if (v.tty && !td_proto_job_state_final(v.state))
        td__draw(&v); /* the first frame, before any event */
    snprintf(v.reason, sizeof v.reason, "%s", JSTR(j, "reason", ""));
    if (json && td_proto_job_state_final(v.state)) {
        /* ended before: its outcome as the state event it was (--json
         * printed nothing, exit 1 for a failed one) */
        json_t *ev = json_pack("{s:s, s:I, s:{s:s, s:s}}", "event", "state",
                               "job", (json_int_t)job, "data", "state",
                               v.state, "reason", v.reason);
        td_print_json(ev);
        json_decref(ev);
    }
    if (!json && !quiet_header && !v.tty) {
        printf("job %lld %s: %s\n", (long long)job, v.state, v.reason);
        fflush(stdout); /* a pipe sees it now, not at the first event */
    }
    while (!td_proto_job_state_final(v.state)) {
        json_t *ev = td_conn_read(c, -1, NULL);
        if (!ev && (rc = td__reconnect(c, &v, &r)) == TD_EXIT_OK) {
            snprintf(v.reason, sizeof v.reason, "%s",
                     JSTR(v.record, "reason", ""));
            if (v.tty) {
                td__draw(&v);
            } else if (!json) {
                printf("job %lld %s: %s\n", (long long)job, v.state,
                       v.reason);
            } else if (td_proto_job_state_final(v.state)) {
                /* ended while traind was away: its state event */
                json_t *st = json_pack(
                    "{s:s, s:I, s:{s:s, s:s}}", "event", "state", "job",
                    (json_int_t)job, "data", "state", v.state, "reason",
                    v.reason);
                td_print_json(st);
                json_decref(st);
            }
            fflush(stdout);
            continue;
        }
        if (!ev && rc == TD_EXIT_REFUSED)
            goto out;
        if (!ev) {
            fprintf(stderr, "trainctl: lost the connection to traind (no "
                    "traind on %s for %d s); job %lld was %s\n", c->path[0]
                    ? c->path : "its socket", TD_WATCH_RECONNECT_S,
                    (long long)job, v.state);
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
    json_decref(v.images);
    json_decref(v.record);
    return rc;
}

static const char watch_usage[] =
    "usage: trainctl watch JOB [--json] [--socket PATH]\n"
    "\n"
    "Follow a job live until it ends: progress with ETA, samples/s, device\n"
    "idle and input wait, the phase split, the verdict and its advice, and\n"
    "validation accuracy per epoch; before the first step, what the job's\n"
    "start is doing (its info log lines).  Redraws in place on a\n"
    "terminal, prints plain lines otherwise; --json prints the events.\n"
    "Exits 0 when the job completed, 1 when it failed or was cancelled.\n";

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
