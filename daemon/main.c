/* main.c - traind's entry point.
 *
 * Owns argument parsing and process set-up only.  The event loop, socket
 * server and job table arrive with the daemon issue; until then traind
 * reports its version and the devices it would use.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "device.h"
#include "log.h"
#include "run.h"
#include "td_config.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: traind [--version] [--help]\n"
            "       traind --run JOB.json [--json] [--window N] [--limit N]\n"
            "\n"
            "The traind training daemon.\n"
            "  --run JOB   train one job in the foreground and exit\n"
            "  --json      with --run: JSON lines instead of text\n"
            "  --window N  with --run: steps per progress line (100)\n"
            "  --limit N   with --run: use the first N training samples\n"
            "  --steps N   with --run: steps per epoch on synthetic input\n"
            "  --version   print the version and the devices found, then exit\n"
            "  --help      this text\n");
}

static void print_version(void)
{
    td_device_info info;
    td_device_probe(&info);
    printf("traind %s (libuv %s)\n", TD_VERSION, uv_version_string());
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
        {"version", no_argument, NULL, 'V'},
        {"help", no_argument, NULL, 'h'},
        {"run", required_argument, NULL, 'r'},
        {"json", no_argument, NULL, 'j'},
        {"window", required_argument, NULL, 'w'},
        {"limit", required_argument, NULL, 'l'},
        {"steps", required_argument, NULL, 's'},
        {NULL, 0, NULL, 0},
    };
    td_run_options ro = {.window = 100};
    const char *job = NULL;
    int c;
    td_log_detect_journal();
    while ((c = getopt_long(argc, argv, "hV", opts, NULL)) != -1) {
        switch (c) {
        case 'V':
            print_version();
            return 0;
        case 'h':
            usage(stdout);
            return 0;
        case 'r':
            job = optarg;
            break;
        case 'j':
            ro.json = 1;
            break;
        case 'w':
            ro.window = atoi(optarg) > 0 ? atoi(optarg) : 100;
            break;
        case 'l':
            ro.limit = atoi(optarg);
            break;
        case 's':
            ro.synthetic_steps = atoi(optarg);
            break;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (job && optind == argc)
        return td_run_job(job, &ro);
    usage(stderr);
    return 2;
}
