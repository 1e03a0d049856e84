/* cmd_version.c - `trainctl version`: client version and local devices.
 * (The daemon's version joins it when the daemon speaks the protocol.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "commands.h"
#include "device.h"
#include "td_config.h"

int td_cmd_version(int argc, char **argv)
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
            return TD_EXIT_OK;
        } else {
            fprintf(stderr, "trainctl version: unknown argument '%s'\n",
                    argv[i]);
            return TD_EXIT_USAGE;
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
    return TD_EXIT_OK;
}
