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
#include "td_config.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: traind [--version] [--help]\n"
            "\n"
            "The traind training daemon.\n"
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
        {NULL, 0, NULL, 0},
    };
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
        default:
            usage(stderr);
            return 2;
        }
    }
    usage(stderr);
    return 2;
}
