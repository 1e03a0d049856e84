/* main.c - trainctl, the command-line client: dispatches subcommands.
 *
 * Exit codes: 0 ok, 1 the daemon said no, 2 usage, 3 cannot reach the
 * daemon.  Every subcommand has --help and --json.
 */
#include <stdio.h>
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
    {"predict", "classify JPEG images with a checkpoint", td_cmd_predict},
};

#define TD__NCMD (sizeof td__commands / sizeof td__commands[0])

static void usage(FILE *f)
{
    fprintf(f, "usage: trainctl COMMAND [ARGS] [--json] [--socket PATH]\n"
               "\nTalks to traind at $TRAIND_SOCKET or "
               "/run/traind/traind.sock.\n\nCommands:\n");
    for (size_t i = 0; i < TD__NCMD; i++)
        fprintf(f, "  %-12s %s\n", td__commands[i].name,
                td__commands[i].summary);
    fprintf(f, "\nRun 'trainctl COMMAND --help' for a command's options.\n"
               "Exit codes: 0 ok, 1 the daemon said no (or the job failed), "
               "2 usage,\n3 cannot reach the daemon.\n");
}

int main(int argc, char **argv)
{
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
