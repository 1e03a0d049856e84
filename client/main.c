/* main.c - trainctl, the command-line client.
 *
 * Dispatches subcommands.  Each subcommand has --help and --json.  Exit
 * codes: 0 ok, 1 the daemon said no, 2 usage, 3 cannot reach the daemon.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "device.h"
#include "td_config.h"

enum { EXIT_OK = 0, EXIT_REFUSED = 1, EXIT_USAGE = 2, EXIT_UNREACHABLE = 3 };

static void usage(FILE *f)
{
    fprintf(f,
            "usage: trainctl COMMAND [ARGS] [--json]\n"
            "\n"
            "Commands:\n"
            "  version    print the client version and the devices found\n"
            "\n"
            "Run 'trainctl COMMAND --help' for a command's options.\n");
}

static int cmd_version(int argc, char **argv)
{
    int json = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else if (strcmp(argv[i], "--help") == 0 ||
                   strcmp(argv[i], "-h") == 0) {
            printf("usage: trainctl version [--json]\n\n"
                   "Print the client's version and the compute devices this "
                   "machine offers.\n");
            return EXIT_OK;
        } else {
            fprintf(stderr, "trainctl version: unknown argument '%s'\n",
                    argv[i]);
            return EXIT_USAGE;
        }
    }
    td_device_info info;
    td_device_probe(&info);
    if (json) {
        json_t *o = json_pack("{s:s, s:b, s:i, s:s}", "client", TD_VERSION,
                              "cuda_built", info.cuda_built, "gpus",
                              info.cuda_count, "device_note", info.reason);
        char *s = json_dumps(o, JSON_COMPACT);
        puts(s);
        free(s);
        json_decref(o);
    } else {
        printf("trainctl %s\n", TD_VERSION);
        printf("cuda: %s, %d GPU(s)%s%s\n",
               info.cuda_built ? "built" : "not built", info.cuda_count,
               info.cuda_count ? "" : ": ", info.cuda_count ? "" : info.reason);
    }
    return EXIT_OK;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 ||
        strcmp(cmd, "help") == 0) {
        usage(stdout);
        return EXIT_OK;
    }
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0)
        return cmd_version(argc - 1, argv + 1);
    fprintf(stderr, "trainctl: unknown command '%s'\n", cmd);
    usage(stderr);
    return EXIT_USAGE;
}
