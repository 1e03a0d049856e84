/* main.c - traind's entry point: arguments, logging set-up, the loop.
 *
 *   traind --foreground --socket PATH --state-dir DIR [--config FILE]
 *
 * Owns argument parsing and process set-up only; the loop, the socket
 * server and the job table live in daemon.c, server.c, commands.c.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <uv.h>

#include "base/error.h"
#include "base/log.h"
#include "daemon.h"
#include "backend/cpu/caps.h"
#include "job/device.h"
#include "run.h"
#include "settings.h"
#include "td_config.h"
#if TD_HAVE_CUDA
#include "backend/cuda/backend_cuda.h"
#endif

#define TD_DEFAULT_SOCKET "/run/traind/traind.sock"
#define TD_DEFAULT_STATE "/var/lib/traind"
#define TD_DEFAULT_CONFIG "/etc/traind/traind.conf"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: traind [--foreground] [--config FILE] [--socket PATH]\n"
            "              [--state-dir DIR] [--log-level LEVEL] [--version]\n"
            "\n"
            "The traind training daemon: accepts jobs on a Unix socket, trains\n"
            "them on the GPU (or the CPU), and streams per-step metrics.\n"
            "\n"
            "  --foreground       run in the foreground (the only mode; systemd\n"
            "                     runs it this way too)\n"
            "  --config FILE      settings file (default %s if it\n"
            "                     exists); SIGHUP reads it again\n"
            "  --socket PATH      control socket (default %s,\n"
            "                     or $TRAIND_SOCKET); systemd socket\n"
            "                     activation overrides it\n"
            "  --state-dir DIR    job records, logs and checkpoints\n"
            "                     (default %s)\n"
            "  --log-level LEVEL  error, warn, info (default) or debug\n"
            "  --help-config      list every setting with its default (--json:\n"
            "                     one JSON object)\n"
            "\n"
            "       traind --run JOB.json [--set KEY=VALUE]... [--json]\n"
            "              [--checkpoint-dir DIR [--resume]] [--steps N]\n"
            "\n"
            "  --run JOB.json     train one job in the foreground, print one\n"
            "                     line per window and per epoch, and exit;\n"
            "                     Ctrl-C stops at a step boundary\n"
            "  --set KEY=VALUE    override a spec field (--set epochs=1)\n"
            "  --json             JSON lines instead of text (a refusal or\n"
            "                     failure too: {\"event\":\"error\", ...})\n"
            "  --checkpoint-dir DIR  write checkpoints there as the spec says\n"
            "  --resume           continue from the newest checkpoint in DIR\n"
            "  --steps N          steps per epoch on synthetic input, 1..1000000\n"
            "                     (default 100)\n"
            "  --version          print the version and the devices found\n"
            "                     (--json: one JSON object)\n"
            "  --help             this text\n"
            "\n"
            "Environment:\n"
            "  TRAIND_SOCKET      the control socket when --socket is not given\n"
            "  TD_MODELS_DIR      where zoo model names are looked up; else\n"
            "                     (--run) models/ beside the job file's folder,\n"
            "                     then, run from the build tree, the source\n"
            "                     tree's config/models, then %s\n",
            TD_DEFAULT_CONFIG, TD_DEFAULT_SOCKET, TD_DEFAULT_STATE,
            TD_MODELS_INSTALL_DIR);
}

static void print_json(json_t *o)
{
    char *t = json_dumps(o, JSON_COMPACT);
    if (t)
        puts(t);
    free(t);
    json_decref(o);
}

static void print_version(int json)
{
    td_device_info info;
    td_device_probe(&info);
    if (json) {
        print_json(json_pack("{s:s, s:i, s:s, s:o}", "version", TD_VERSION,
                             "proto", TD_PROTO_VERSION, "libuv",
                             uv_version_string(), "devices",
                             td_devices_json(&info)));
        return;
    }
    printf("traind %s (protocol %d, libuv %s)\n", TD_VERSION, TD_PROTO_VERSION,
           uv_version_string());
    printf("cuda: %s\n", info.cuda_built ? "built" : "not built");
    if (info.cuda_count > 0) {
        for (int i = 0; i < info.cuda_count; i++)
            printf("  cuda:%d %s (%.1f GiB, sm_%d%d)\n", i, info.gpus[i].name,
                   (double)info.gpus[i].mem_bytes / (1 << 30),
                   info.gpus[i].cc_major, info.gpus[i].cc_minor);
    } else {
        printf("  %s; using the CPU backend\n", info.reason);
    }
    char caps[256];
    td_cpu_caps_describe(td_cpu_caps_get(), caps, sizeof caps);
    printf("cpu: %s\n", caps);
}

/* Every setting; --json: {"settings": [{key, default, live, help}]}. */
static void print_settings(int json)
{
    if (json) {
        json_t *arr = json_array();
        for (const td_setting_def *s = td_setting_defs; s->key; s++) {
            json_t *def = json_loads(s->def, JSON_DECODE_ANY, NULL);
            json_array_append_new(arr, json_pack(
                "{s:s, s:o, s:b, s:s}", "key", s->key, "default",
                def ? def : json_string(s->def), "live", s->live, "help",
                s->help));
        }
        print_json(json_pack("{s:o}", "settings", arr));
        return;
    }
    /* columns as wide as the longest key and default, so that a long
     * key (max_subscriptions_per_user) does not push its row out */
    int kw = 0, dw = 0;
    for (const td_setting_def *s = td_setting_defs; s->key; s++) {
        kw = (int)strlen(s->key) > kw ? (int)strlen(s->key) : kw;
        dw = (int)strlen(s->def) > dw ? (int)strlen(s->def) : dw;
    }
    printf("traind settings (config file keys; [restart] = not live):\n\n");
    for (const td_setting_def *s = td_setting_defs; s->key; s++)
        printf("  %-*s default %-*s %s%s\n", kw, s->key, dw, s->def,
               s->live ? "" : "[restart] ", s->help);
}

/* --steps N: the whole word, 1..1000000 (atoi took "abc" as 0, the
 * default, and "-5" as -5). */
static int parse_steps(const char *v, int *out)
{
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (end == v || *end || errno || n < 1 || n > 1000000) {
        fprintf(stderr, "traind: --steps: expected 1..1000000, not '%s'\n",
                v);
        return -1;
    }
    *out = (int)n;
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"foreground", no_argument, NULL, 'f'},
        {"config", required_argument, NULL, 'c'},
        {"socket", required_argument, NULL, 's'},
        {"state-dir", required_argument, NULL, 'd'},
        {"log-level", required_argument, NULL, 'l'},
        {"version", no_argument, NULL, 'V'},
        {"help-config", no_argument, NULL, 'C'},
        {"run", required_argument, NULL, 1000},
        {"json", no_argument, NULL, 1001},
        {"set", required_argument, NULL, 1002},
        {"checkpoint-dir", required_argument, NULL, 1003},
        {"steps", required_argument, NULL, 1004},
        {"resume", no_argument, NULL, 1005},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
#if TD_HAVE_CUDA
    td_cuda_register(); /* the CUDA backend and the GPU probe */
#endif
    json_t *overrides = json_object();
    td_daemon_opts o = {.config_path = TD_DEFAULT_CONFIG,
                        .overrides = overrides};
    td_run_options ro = {0};
    const char *sets[64];
    int nsets = 0;
    const char *run_job = NULL;
    const char *run_only = NULL; /* an option of --run's, seen */
    int c, level, action = 0;    /* 'V' or 'C': print that and exit */
    if (getenv("TRAIND_SOCKET") && *getenv("TRAIND_SOCKET"))
        json_object_set_new(overrides, "socket",
                            json_string(getenv("TRAIND_SOCKET")));
    td_log_detect_journal();
    td_log_set_thread_name("loop");
    while ((c = getopt_long(argc, argv, "fs:d:l:hV", opts, NULL)) != -1) {
        switch (c) {
        case 'f':
            break;
        case 'c':
            o.config_path = optarg;
            o.config_required = 1;
            break;
        case 's':
            json_object_set_new(overrides, "socket", json_string(optarg));
            break;
        case 'd':
            json_object_set_new(overrides, "state_dir", json_string(optarg));
            break;
        case 'l':
            if (td_log_parse_level(optarg, &level)) {
                fprintf(stderr, "traind: --log-level: '%s' is not one of "
                                "error, warn, info, debug\n", optarg);
                json_decref(overrides);
                return 2;
            }
            json_object_set_new(overrides, "log_level", json_string(optarg));
            td_log_set_level(level);
            break;
        case 'V':
        case 'C': /* after the loop: --json may come later */
            if (!action)
                action = c;
            break;
        case 1000:
            run_job = optarg;
            break;
        case 1001:
            ro.json = 1;
            break;
        case 1002:
            if (nsets == 64) {
                fprintf(stderr, "traind: too many --set options\n");
                json_decref(overrides);
                return 2;
            }
            sets[nsets++] = optarg;
            run_only = "--set";
            break;
        case 1003:
            ro.checkpoint_dir = optarg;
            run_only = "--checkpoint-dir";
            break;
        case 1004:
            if (parse_steps(optarg, &ro.synthetic_steps)) {
                json_decref(overrides);
                return 2;
            }
            run_only = "--steps";
            break;
        case 1005:
            ro.resume = 1;
            run_only = "--resume";
            break;
        case 'h':
            usage(stdout);
            json_decref(overrides);
            return 0;
        default:
            usage(stderr);
            json_decref(overrides);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "traind: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        json_decref(overrides);
        return 2;
    }
    if (action) {
        if (action == 'V')
            print_version(ro.json);
        else
            print_settings(ro.json);
        json_decref(overrides);
        return 0;
    }
    if (!run_job && (run_only || ro.json)) {
        fprintf(stderr, "traind: %s is an option of --run JOB.json%s\n",
                run_only ? run_only : "--json",
                run_only ? "" : " (also of --version and --help-config)");
        json_decref(overrides);
        return 2;
    }
    if (run_job) {
        ro.sets = sets;
        ro.nsets = nsets;
        json_decref(overrides);
        return td_run_job(run_job, &ro);
    }
    signal(SIGPIPE, SIG_IGN); /* a vanished client is an error code, not death */

    uv_loop_t loop;
    td_daemon d;
    uv_loop_init(&loop);
    td_info("traind %s starting (pid %d)", TD_VERSION, (int)getpid());
    int rc = td_daemon_init(&d, &loop, &o);
    if (rc) {
        if (d.wake.data) { /* handles exist: close them cleanly */
            td_daemon_shutdown(&d, "start-up failed");
            uv_run(&loop, UV_RUN_DEFAULT);
        }
        td_daemon_free(&d);
        json_decref(overrides);
        uv_loop_close(&loop);
        td_error("traind could not start: %s", td_strerror(rc));
        return 1;
    }
    int status = td_daemon_run(&d);
    td_daemon_free(&d);
    json_decref(overrides);
    rc = uv_loop_close(&loop);
    if (rc)
        td_warn("loop closed with handles open: %s", uv_strerror(rc));
    if (status)
        td_info("traind stopped, exit status %d", status);
    else
        td_info("traind stopped");
    return status;
}
