/* commands.h - trainctl's subcommands.
 *
 * Each subcommand is one function in its own file (client/cmd_<name>.c)
 * taking argv from the subcommand's name on, and returning an exit code.
 * Each handles --help and --json itself.
 */
#ifndef TD_CLIENT_COMMANDS_H
#define TD_CLIENT_COMMANDS_H

enum {
    TD_EXIT_OK = 0,          /* done */
    TD_EXIT_REFUSED = 1,     /* the daemon (or the operation) said no */
    TD_EXIT_USAGE = 2,       /* bad command line */
    TD_EXIT_UNREACHABLE = 3, /* cannot reach the daemon */
};

typedef int (*td_cmd_fn)(int argc, char **argv);

struct td_command {
    const char *name;
    const char *summary; /* one line for `trainctl --help` */
    td_cmd_fn fn;
};

int td_cmd_version(int argc, char **argv);
int td_cmd_submit(int argc, char **argv);
int td_cmd_queue(int argc, char **argv);
int td_cmd_show(int argc, char **argv);
int td_cmd_watch(int argc, char **argv);
int td_cmd_logs(int argc, char **argv);
int td_cmd_cancel(int argc, char **argv);
int td_cmd_remove(int argc, char **argv);
int td_cmd_pause(int argc, char **argv);
int td_cmd_resume(int argc, char **argv);
int td_cmd_checkpoint(int argc, char **argv);
int td_cmd_config(int argc, char **argv);
int td_cmd_pack(int argc, char **argv);
int td_cmd_bench_input(int argc, char **argv);
int td_cmd_trace(int argc, char **argv);
int td_cmd_top(int argc, char **argv);
int td_cmd_plan(int argc, char **argv);
int td_cmd_export(int argc, char **argv);
int td_cmd_eval(int argc, char **argv);
int td_cmd_predict(int argc, char **argv);
int td_cmd_extend(int argc, char **argv);
int td_cmd_history(int argc, char **argv);
int td_cmd_plot(int argc, char **argv);

#endif
