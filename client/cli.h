/* cli.h - argument handling shared by trainctl's subcommands.
 *
 * Every subcommand accepts --json, --socket PATH (or --socket=PATH) and
 * -h/--help; its own flags are declared in a small table.  Positionals are
 * collected in order.  Usage errors print a message and the usage text.
 */
#ifndef TD_CLIENT_CLI_H
#define TD_CLIENT_CLI_H

#include <stdint.h>

#include "proto/protocol.h" /* the TD_ERR_* classes */

#define TD_CLI_MAX_POS 1024 /* predict takes many images */
#define TD_CLI_MAX_MULTI 32

typedef struct td_cli_flag {
    const char *name;   /* "--follow" */
    const char *alias;  /* "-f" or NULL */
    int takes_value;
    const char **value; /* where a value goes (last wins) */
    int *set;           /* set to 1 when given (for flags without value) */
    const char **multi; /* repeated values, NULL-terminated list */
} td_cli_flag;

typedef struct td_cli {
    const char *cmd;
    const char *usage;  /* the whole --help text */
    int json;
    const char *socket;
    const char *pos[TD_CLI_MAX_POS];
    int npos;
} td_cli;

/* Parses argv (argv[0] is the subcommand's name).  Returns -1 after
 * printing help (exit 0), TD_EXIT_USAGE on a usage error, 0 otherwise.
 * flags ends with a NULL name (or is NULL). */
int td_cli_parse(td_cli *cli, int argc, char **argv, const td_cli_flag *flags,
                 int min_pos, int max_pos);
/* Parses a job id ("7" or "#7"); prints an error and returns -1 if bad. */
int64_t td_cli_job_id(const td_cli *cli, const char *s);
struct td_conn;
/* For commands of the form `trainctl CMD JOB [flags]`: parses argv, the
 * job id and connects.  Returns 0 when *id and *c are ready, -1 after
 * printing help, or an exit code (usage error, unreachable). */
int td_cli_job_command(td_cli *cli, int argc, char **argv,
                       const td_cli_flag *flags, int64_t *id,
                       struct td_conn *c);
/* The class of a local operation's failure (a file that cannot be read
 * or written, a model that cannot be built), beside the protocol's
 * TD_ERR_* classes of the daemon's refusals. */
#define TD_CLI_ERR_FAILED "failed"
/* trainctl's own refusal or failure of the operation (exit 1), printed
 * as the daemon's refusals are (td_conn_check): "trainctl CMD: msg" on
 * stderr, or with --json {"error":{"class":CLASS,"desc":msg}} on stdout,
 * so that stdout is JSON on every path that gets that far.  Returns
 * TD_EXIT_REFUSED. */
int td_cli_refuse(const td_cli *cli, const char *err_class,
                  const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Prints "trainctl CMD: msg" and the usage hint; returns TD_EXIT_USAGE. */
int td_cli_usage_error(const td_cli *cli, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
