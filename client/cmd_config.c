/* cmd_config.c - trainctl config get/set, logs, and version (client and
 * daemon). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "conn.h"
#include "proto/protocol.h"
#include "td_config.h"
#include "watch.h"

static const char config_usage[] =
    "usage: trainctl config get [KEY] [--json] [--socket PATH]\n"
    "       trainctl config set KEY VALUE [--json] [--socket PATH]\n"
    "\n"
    "Read or change the daemon's settings (workers, subscriber_soft_bytes,\n"
    "subscriber_max_bytes, log_level, device, ...; every key: traind\n"
    "--help-config).  VALUE is JSON if it parses\n"
    "(4, \"auto\"), else a string (auto).  A change applies at once and\n"
    "lasts until traind restarts (the config file is read again then).\n"
    "Settings read only at start (traind --help-config marks them\n"
    "[restart]) are refused: set them in the config file and restart.\n"
    "Only root or the daemon's user may set.\n";

int td_cmd_config(int argc, char **argv)
{
    td_cli cli = {.usage = config_usage};
    int rc = td_cli_parse(&cli, argc, argv, NULL, 1, 3);
    if (rc)
        return rc < 0 ? TD_EXIT_OK : rc;
    const char *op = cli.pos[0];
    json_t *args;
    const char *cmd;
    if (strcmp(op, "get") == 0) {
        if (cli.npos > 2)
            return td_cli_usage_error(&cli, "get takes at most one KEY");
        cmd = "config_get";
        args = cli.npos == 2 ? json_pack("{s:s}", "key", cli.pos[1]) : NULL;
    } else if (strcmp(op, "set") == 0) {
        if (cli.npos != 3)
            return td_cli_usage_error(&cli, "set takes KEY VALUE");
        json_t *v = json_loads(cli.pos[2], JSON_DECODE_ANY, NULL);
        if (!v)
            v = json_string(cli.pos[2]);
        cmd = "config_set";
        args = json_pack("{s:s, s:o}", "key", cli.pos[1], "value", v);
    } else {
        return td_cli_usage_error(&cli, "expected 'get' or 'set', not '%s'",
                                  op);
    }
    td_conn c;
    if ((rc = td_conn_open(&c, td_cli_socket(cli.socket))) != TD_EXIT_OK) {
        json_decref(args);
        return rc;
    }
    json_t *r = td_conn_request(&c, cmd, args, NULL, NULL);
    td_conn_close(&c);
    if (!r)
        return TD_EXIT_UNREACHABLE;
    if ((rc = td_conn_check("config", r, cli.json)) == TD_EXIT_OK) {
        json_t *ok = json_object_get(r, "ok");
        if (cli.json) {
            td_print_json(ok);
        } else if (json_object_get(ok, "settings")) {
            const char *k;
            json_t *v;
            int w = 0; /* one column for the values, however long a key */
            json_object_foreach(json_object_get(ok, "settings"), k, v)
                w = (int)strlen(k) > w ? (int)strlen(k) : w;
            json_object_foreach(json_object_get(ok, "settings"), k, v) {
                char *s = json_dumps(v, JSON_ENCODE_ANY);
                printf("%-*s %s\n", w, k, s ? s : "?");
                free(s);
            }
        } else {
            char *s = json_dumps(json_object_get(ok, "value"), JSON_ENCODE_ANY);
            printf("%s = %s%s\n", json_string_value(json_object_get(ok, "key")),
                   s ? s : "?",
                   json_is_true(json_object_get(ok, "restart_needed"))
                       ? " (takes effect after a restart)"
                       : " (applied now, until traind restarts)");
            free(s);
        }
    }
    json_decref(r);
    return rc;
}

static const char logs_usage[] =
    "usage: trainctl logs JOB [-f] [--lines N] [--json] [--socket PATH]\n"
    "\n"
    "Print a job's log (the last N lines, default 100).\n"
    "\n"
    "  -f, --follow     keep following new lines until the job ends\n"
    "  -n, --lines N    how many lines (1..2147483647, default 100)\n";

static void td__print_log_event(json_t *ev, void *user)
{
    int json = *(int *)user;
    if (strcmp(json_string_value(json_object_get(ev, "event")), "log") != 0)
        return;
    if (json)
        td_print_json(ev);
    else
        printf("%s\n", json_string_value(json_object_get(
                           json_object_get(ev, "data"), "line")));
    fflush(stdout);
}

/* 1 if the job is completed, failed or cancelled (asked after
 * subscribing, so that an ending in between still arrives as an event). */
static int td__job_ended(td_conn *c, int64_t id, int *json)
{
    json_t *r = td_conn_request(c, "show",
                                json_pack("{s:I}", "job", (json_int_t)id),
                                td__print_log_event, json);
    const char *st = json_string_value(json_object_get(
        json_object_get(json_object_get(r, "ok"), "job"), "state"));
    int done = td_proto_job_state_final(st);
    json_decref(r);
    return done;
}

int td_cmd_logs(int argc, char **argv)
{
    td_cli cli = {.usage = logs_usage};
    const char *lines = NULL;
    int follow = 0;
    td_cli_flag flags[] = {{"--follow", "-f", 0, NULL, &follow, NULL},
                           {"--lines", "-n", 1, &lines, NULL, NULL},
                           {NULL, NULL, 0, NULL, NULL, NULL}};
    int rc = td_cli_parse(&cli, argc, argv, flags, 1, 1);
    if (rc)
        return rc < 0 ? TD_EXIT_OK : rc;
    int64_t id = td_cli_job_id(&cli, cli.pos[0]);
    if (id < 0)
        return TD_EXIT_USAGE;
    long n = 100;
    if (lines) { /* the whole word: "10abc" and 1e12 are not line counts */
        char *end;
        errno = 0;
        n = strtol(lines, &end, 10);
        if (end == lines || *end || errno || n < 1 || n > INT_MAX)
            return td_cli_usage_error(&cli, "--lines: expected 1..%d, not "
                                      "'%s'", INT_MAX, lines);
    }
    td_conn c;
    if ((rc = td_conn_open(&c, td_cli_socket(cli.socket))) != TD_EXIT_OK)
        return rc;
    if (follow) { /* subscribe first so that no line falls in between */
        json_t *r = td_conn_request(
            &c, "subscribe",
            json_pack("{s:I, s:[s,s]}", "job", (json_int_t)id, "events", "log",
                      "state"), NULL, NULL);
        if (!r || (rc = td_conn_check("logs", r, cli.json)) != TD_EXIT_OK) {
            json_decref(r);
            td_conn_close(&c);
            return r ? rc : TD_EXIT_UNREACHABLE;
        }
        json_decref(r);
    }
    json_t *r = td_conn_request(&c, "logs",
                                json_pack("{s:I, s:i}", "job", (json_int_t)id,
                                          "lines", (int)n), NULL, NULL);
    if (!r) {
        td_conn_close(&c);
        return TD_EXIT_UNREACHABLE;
    }
    if ((rc = td_conn_check("logs", r, cli.json)) == TD_EXIT_OK) {
        size_t i;
        json_t *l;
        json_int_t cut = json_integer_value(json_object_get(
            json_object_get(r, "ok"), "older_left_out"));
        if (cli.json)
            td_print_json(json_object_get(r, "ok"));
        else
            json_array_foreach(json_object_get(json_object_get(r, "ok"),
                                               "lines"), i, l)
                printf("%s\n", json_string_value(l));
        fflush(stdout);
        if (cut && !cli.json)
            fprintf(stderr, "trainctl: %lld older line(s) left out: a logs "
                    "reply holds at most 1 MiB of lines\n", (long long)cut);
    }
    json_decref(r);
    if (rc == TD_EXIT_OK && follow && td__job_ended(&c, id, &cli.json))
        follow = 0; /* a finished job has nothing more to say */
    while (rc == TD_EXIT_OK && follow) {
        json_t *ev = td_conn_read(&c, -1, NULL);
        if (!ev)
            break;
        const char *kind = json_string_value(json_object_get(ev, "event"));
        if (kind && strcmp(kind, "log") == 0)
            td__print_log_event(ev, &cli.json);
        const char *st = json_string_value(json_object_get(
            json_object_get(ev, "data"), "state"));
        int done = kind && strcmp(kind, "state") == 0 &&
                   td_proto_job_state_final(st);
        json_decref(ev);
        if (done)
            break;
    }
    td_conn_close(&c);
    return rc;
}

static const char version_usage[] =
    "usage: trainctl version [--json] [--socket PATH]\n"
    "\n"
    "Print trainctl's version and protocol and, when a daemon answers on\n"
    "the socket, its version, the device it trains on and the GPUs it\n"
    "found (trainctl itself never loads the CUDA runtime).\n";

/* "cuda: built, 2 GPU(s)", one line per GPU and the CPU's bf16 support,
 * from the daemon's reply. */
static void td__print_devices(const json_t *dev)
{
    const json_t *gpus = json_object_get(dev, "gpus");
    size_t n = json_array_size(gpus);
    printf("cuda:    %s, %zu GPU(s)%s%s\n",
           json_is_true(json_object_get(dev, "cuda_built")) ? "built"
                                                            : "not built",
           n, n ? "" : ": ",
           n ? "" : json_string_value(json_object_get(dev, "note")));
    for (size_t i = 0; i < n; i++) {
        const json_t *g = json_array_get(gpus, i);
        printf("  cuda:%zu %s (%.1f GiB, sm_%d%d)\n", i,
               json_string_value(json_object_get(g, "name")),
               (double)json_integer_value(json_object_get(g, "mem_bytes")) /
                   (1 << 30),
               (int)json_integer_value(json_object_get(g, "cc_major")),
               (int)json_integer_value(json_object_get(g, "cc_minor")));
    }
    const json_t *cpu = json_object_get(dev, "cpu");
    if (cpu) {
        int bf16 = json_is_true(json_object_get(cpu, "bf16"));
        const json_t *rate = json_object_get(cpu, "dot_rate");
        char why[64] = "";
        const char *isa = json_string_value(json_object_get(cpu, "isa"));
        if (bf16 && json_is_number(rate))
            snprintf(why, sizeof why, " (vdpbf16ps %.2fx the fp32 FMA rate)",
                     json_number_value(rate));
        else if (bf16 && isa && strcmp(isa, "avx512_core_amx") == 0)
            snprintf(why, sizeof why, " (AMX)");
        printf("cpu:     %s, oneDNN ISA %s: bf16 %s%s%s%s\n",
               json_string_value(json_object_get(cpu, "model")),
               isa ? isa : "?", bf16 ? "yes" : "no", bf16 ? ", auto " : "",
               !bf16 ? ""
               : json_is_true(json_object_get(cpu, "bf16_auto")) ? "bf16"
                                                                 : "fp32",
               why);
    }
}

int td_cmd_version(int argc, char **argv)
{
    td_cli cli = {.usage = version_usage};
    int rc = td_cli_parse(&cli, argc, argv, NULL, 0, 0);
    if (rc)
        return rc < 0 ? TD_EXIT_OK : rc;
    json_t *out = json_pack("{s:s, s:i}", "client", TD_VERSION, "proto",
                            TD_PROTO_VERSION);
    /* The daemon is optional here: version works without one. */
    td_conn c;
    int reach = td_conn_try_open(&c, td_cli_socket(cli.socket));
    if (reach == TD_EXIT_OK) {
        json_t *h = json_object_get(c.hello, "hello");
        json_object_set(out, "daemon", json_object_get(h, "version"));
        json_object_set(out, "daemon_device", json_object_get(h, "device"));
        json_t *rep = td_conn_request(&c, "version", NULL, NULL, NULL);
        json_t *res = json_object_get(rep, "ok");
        if (json_object_get(res, "devices"))
            json_object_set(out, "devices", json_object_get(res, "devices"));
        json_decref(rep);
        td_conn_close(&c);
    }
    if (cli.json) {
        td_print_json(out);
    } else {
        printf("trainctl %s (protocol %d)\n", TD_VERSION, TD_PROTO_VERSION);
        if (reach == TD_EXIT_OK)
            printf("traind   %s on %s at %s\n",
                   json_string_value(json_object_get(out, "daemon")),
                   json_string_value(json_object_get(out, "daemon_device")),
                   td_cli_socket(cli.socket));
        else
            printf("traind   not reachable at %s (devices unknown)\n",
                   td_cli_socket(cli.socket));
        if (json_object_get(out, "devices"))
            td__print_devices(json_object_get(out, "devices"));
    }
    json_decref(out);
    return TD_EXIT_OK;
}
