/* main.c - trainctl, the command-line client: dispatches subcommands.
 *
 * Exit codes: 0 ok, 1 refused or failed (the daemon, trainctl or the
 * job), 2 usage, 3 cannot reach the daemon.  Every subcommand has --help
 * and --json.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"

/* The command table.  Add a line per subcommand, in the order --help
 * lists them. */
static const struct td_command td__commands[] = {
    {"submit", "submit a job spec; --follow to watch it", td_cmd_submit},
    {"queue", "list jobs (alias: ls)", td_cmd_queue},
    {"ls", "list jobs", td_cmd_queue},
    {"show", "everything about one job", td_cmd_show},
    {"watch", "follow a job live until it ends", td_cmd_watch},
    {"logs", "print (or -f follow) a job's log", td_cmd_logs},
    {"cancel", "cancel a job", td_cmd_cancel},
    {"pause", "pause a job at a step boundary", td_cmd_pause},
    {"resume", "resume a paused job", td_cmd_resume},
    {"checkpoint", "write a checkpoint of a running job now",
     td_cmd_checkpoint},
    {"rm", "remove ended jobs: their records, logs and checkpoints",
     td_cmd_remove},
    {"extend", "continue a completed job for more epochs from its weights",
     td_cmd_extend},
    {"history", "a job's learning curves: every epoch's loss, accuracy, lr",
     td_cmd_history},
    {"plot", "draw a job's learning curves into a PNG", td_cmd_plot},
    {"trace", "record a running job's timeline as Chrome trace JSON",
     td_cmd_trace},
    {"top", "every job's samples/s, idle and verdict, refreshing",
     td_cmd_top},
    {"config", "get or set the daemon's live settings", td_cmd_config},
    {"version", "client and daemon versions, devices", td_cmd_version},
    {"pack", "write WebDataset tar shards from IDX files or an ImageFolder",
     td_cmd_pack},
    {"bench-input", "run the input pipeline alone and print images/s",
     td_cmd_bench_input},
    {"plan", "the device memory a model needs at a batch and precision",
     td_cmd_plan},
    {"export", "write a checkpoint's model as safetensors or ONNX",
     td_cmd_export},
    {"eval", "top-1/top-5, per-class accuracy, confusion on a dataset",
     td_cmd_eval},
    {"predict", "classify JPEG and PNG images with a checkpoint",
     td_cmd_predict},
};

#define TD__NCMD (sizeof td__commands / sizeof td__commands[0])

static void usage(FILE *f)
{
    fprintf(f, "usage: trainctl [--socket PATH] [--json] COMMAND [ARGS]\n"
               "\nTalks to traind at $TRAIND_SOCKET or "
               "/run/traind/traind.sock.\n\nCommands:\n");
    for (size_t i = 0; i < TD__NCMD; i++)
        fprintf(f, "  %-12s %s\n", td__commands[i].name,
                td__commands[i].summary);
    fprintf(f, "\nRun 'trainctl COMMAND --help' for a command's options.\n"
               "Exit codes: 0 ok, 1 refused or failed (by the daemon, "
               "trainctl or the job;\n--json: a JSON error on stdout), "
               "2 usage, 3 cannot reach the daemon.\n");
}

/* Global options may come before the command, as with docker or
 * systemctl (`trainctl --socket X queue`): they are moved to just after
 * the command, where every subcommand's parser takes them.  Returns the
 * new argc, or -1 after printing a usage error. */
static int td__hoist_globals(int argc, char **argv, char **out)
{
    int g = 1, n = 0;
    char *globals[4];
    while (g < argc && n < 3) {
        const char *a = argv[g];
        if (strcmp(a, "--json") == 0 || strncmp(a, "--socket=", 9) == 0) {
            globals[n++] = argv[g++];
        } else if (strcmp(a, "--socket") == 0) {
            if (g + 1 >= argc) {
                fprintf(stderr, "trainctl: --socket needs a path\n");
                return -1;
            }
            globals[n++] = argv[g++];
            globals[n++] = argv[g++];
        } else {
            break;
        }
    }
    if (g >= argc && n > 0) { /* `trainctl --json`: options, no command */
        fprintf(stderr, "trainctl: no command after %s\n\n", globals[0]);
        usage(stderr);
        return -1;
    }
    int k = 0;
    out[k++] = argv[0];
    if (g < argc)
        out[k++] = argv[g++];
    for (int i = 0; i < n; i++)
        out[k++] = globals[i];
    while (g < argc)
        out[k++] = argv[g++];
    out[k] = NULL;
    return k;
}

int main(int argc, char **argv)
{
    static char **args; /* static: reachable until exit */
    args = calloc((size_t)argc + 1, sizeof *args);
    if (!args)
        return TD_EXIT_USAGE;
    argc = td__hoist_globals(argc, argv, args);
    if (argc < 0)
        return TD_EXIT_USAGE;
    argv = args;
    if (argc < 2) {
        usage(stderr);
        return TD_EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 ||
        strcmp(cmd, "help") == 0) {
        usage(stdout);
        return TD_EXIT_OK;
    }
    if (strcmp(cmd, "--version") == 0)
        cmd = "version";
    for (size_t i = 0; i < TD__NCMD; i++)
        if (strcmp(cmd, td__commands[i].name) == 0)
            return td__commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "trainctl: unknown command '%s'\n\n", cmd);
    usage(stderr);
    return TD_EXIT_USAGE;
}
