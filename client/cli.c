/* cli.c - see cli.h. */
#include "cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "conn.h"

int td_cli_usage_error(const td_cli *cli, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "trainctl %s: ", cli->cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nRun 'trainctl %s --help' for usage.\n", cli->cmd);
    return TD_EXIT_USAGE;
}

int td_cli_refuse(const td_cli *cli, const char *err_class,
                  const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (cli->json) {
        json_t *o = json_pack("{s:{s:s, s:s}}", "error", "class", err_class,
                              "desc", msg);
        td_print_json(o);
        json_decref(o);
    } else {
        fprintf(stderr, "trainctl %s: %s\n", cli->cmd, msg);
    }
    return TD_EXIT_REFUSED;
}

static const td_cli_flag *td__find(const td_cli_flag *flags, const char *a,
                                   size_t n)
{
    for (const td_cli_flag *f = flags; f && f->name; f++) {
        if ((strlen(f->name) == n && strncmp(f->name, a, n) == 0) ||
            (f->alias && strlen(f->alias) == n && strncmp(f->alias, a, n) == 0))
            return f;
    }
    return NULL;
}

int td_cli_parse(td_cli *cli, int argc, char **argv, const td_cli_flag *flags,
                 int min_pos, int max_pos)
{
    int only_pos = 0;
    cli->cmd = argv[0];
    cli->npos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        /* "-" (stdin) and negative numbers are positionals too, unless
         * the command has a flag of that name (top's -1). */
        if (only_pos || a[0] != '-' || strcmp(a, "-") == 0 ||
            (a[1] >= '0' && a[1] <= '9' && !td__find(flags, a, strlen(a)))) {
            if (cli->npos >= max_pos || cli->npos >= TD_CLI_MAX_POS)
                return td_cli_usage_error(cli, "unexpected argument '%s'", a);
            cli->pos[cli->npos++] = a;
            continue;
        }
        if (strcmp(a, "--") == 0) {
            only_pos = 1;
            continue;
        }
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(cli->usage, stdout);
            return -1;
        }
        if (strcmp(a, "--json") == 0) {
            cli->json = 1;
            continue;
        }
        const char *eq = strchr(a, '=');
        size_t n = eq ? (size_t)(eq - a) : strlen(a);
        const char *val = eq ? eq + 1 : NULL;
        if (strncmp(a, "--socket", n) == 0 && n == 8) {
            if (!val && i + 1 >= argc)
                return td_cli_usage_error(cli, "--socket needs a path");
            cli->socket = val ? val : argv[++i];
            /* "" is no path: not $TRAIND_SOCKET's or the default daemon */
            if (!cli->socket[0])
                return td_cli_usage_error(cli, "--socket needs a path, not "
                                          "an empty string");
            continue;
        }
        const td_cli_flag *f = td__find(flags, a, n);
        if (!f)
            return td_cli_usage_error(cli, "unknown option '%s'", a);
        if (!f->takes_value) {
            if (val)
                return td_cli_usage_error(cli, "%s takes no value", f->name);
            if (f->set)
                *f->set = 1;
            continue;
        }
        if (!val) {
            if (i + 1 >= argc)
                return td_cli_usage_error(cli, "%s needs a value", f->name);
            val = argv[++i];
        }
        if (f->value)
            *f->value = val;
        if (f->multi) {
            int k = 0;
            while (f->multi[k] && k < TD_CLI_MAX_MULTI - 1)
                k++;
            if (k >= TD_CLI_MAX_MULTI - 1)
                return td_cli_usage_error(cli, "too many %s", f->name);
            f->multi[k] = val;
            f->multi[k + 1] = NULL;
        }
    }
    if (cli->npos < min_pos)
        return td_cli_usage_error(cli, "missing argument");
    return 0;
}

int64_t td_cli_job_id(const td_cli *cli, const char *s)
{
    char *end;
    if (s[0] == '#')
        s++;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end || errno || v <= 0) {
        td_cli_usage_error(cli, "'%s' is not a job id (a positive number)", s);
        return -1;
    }
    return v;
}

int td_cli_job_command(td_cli *cli, int argc, char **argv,
                       const td_cli_flag *flags, int64_t *id, td_conn *c)
{
    int rc = td_cli_parse(cli, argc, argv, flags, 1, 1);
    if (rc)
        return rc;
    if ((*id = td_cli_job_id(cli, cli->pos[0])) < 0)
        return TD_EXIT_USAGE;
    return td_conn_open(c, td_cli_socket(cli->socket));
}
