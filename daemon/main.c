/* main.c - traind's entry point: arguments, logging set-up, the loop.
 *
 *   traind --foreground --socket PATH --state-dir DIR [--config FILE]
 *
 * Owns argument parsing and process set-up only; the loop, the socket
 * server and the job table live in daemon.c, server.c, commands.c.
 */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <uv.h>

#include "daemon.h"
#include "error.h"
#include "device.h"
#include "log.h"
#include "td_config.h"

#define TD_DEFAULT_SOCKET "/run/traind/traind.sock"
#define TD_DEFAULT_STATE "/var/lib/traind"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: traind [--foreground] [--socket PATH] [--state-dir DIR]\n"
            "              [--log-level LEVEL] [--version] [--help]\n"
            "\n"
            "The traind training daemon: accepts jobs on a Unix socket, trains\n"
            "them on the GPU (or the CPU), and streams per-step metrics.\n"
            "\n"
            "  --foreground       run in the foreground (the only mode; systemd\n"
            "                     runs it this way too)\n"
            "  --socket PATH      control socket (default %s,\n"
            "                     or $TRAIND_SOCKET)\n"
            "  --state-dir DIR    job records, logs and checkpoints\n"
            "                     (default %s)\n"
            "  --log-level LEVEL  error, warn, info (default) or debug\n"
            "  --version          print the version and the devices found\n"
            "  --help             this text\n",
            TD_DEFAULT_SOCKET, TD_DEFAULT_STATE);
}

static void print_version(void)
{
    td_device_info info;
    td_device_probe(&info);
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
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"foreground", no_argument, NULL, 'f'},
        {"socket", required_argument, NULL, 's'},
        {"state-dir", required_argument, NULL, 'd'},
        {"log-level", required_argument, NULL, 'l'},
        {"version", no_argument, NULL, 'V'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    td_daemon_opts o = {
        .socket_path = getenv("TRAIND_SOCKET") ? getenv("TRAIND_SOCKET")
                                               : TD_DEFAULT_SOCKET,
        .state_dir = TD_DEFAULT_STATE,
    };
    int c, level;
    td_log_detect_journal();
    td_log_set_thread_name("loop");
    while ((c = getopt_long(argc, argv, "fs:d:l:hV", opts, NULL)) != -1) {
        switch (c) {
        case 'f':
            break;
        case 's':
            o.socket_path = optarg;
            break;
        case 'd':
            o.state_dir = optarg;
            break;
        case 'l':
            if (td_log_parse_level(optarg, &level)) {
                fprintf(stderr, "traind: --log-level: '%s' is not one of "
                                "error, warn, info, debug\n", optarg);
                return 2;
            }
            td_log_set_level(level);
            break;
        case 'V':
            print_version();
            return 0;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "traind: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN); /* a vanished client is an error code, not death */

    uv_loop_t loop;
    td_daemon d;
    uv_loop_init(&loop);
    td_info("traind %s starting (pid %d)", TD_VERSION, (int)getpid());
    int rc = td_daemon_init(&d, &loop, &o);
    if (rc) {
        if (d.settings) { /* handles exist: close them cleanly */
            td_daemon_shutdown(&d, "start-up failed");
            uv_run(&loop, UV_RUN_DEFAULT);
        }
        td_daemon_free(&d);
        uv_loop_close(&loop);
        td_error("traind could not start: %s", td_strerror(rc));
        return 1;
    }
    td_daemon_run(&d);
    td_daemon_free(&d);
    rc = uv_loop_close(&loop);
    if (rc)
        td_warn("loop closed with handles open: %s", uv_strerror(rc));
    td_info("traind stopped");
    return 0;
}
