/* infer_daemon.h - eval and predict through traind (infer_daemon.c). */
#ifndef TD_CLIENT_INFER_DAEMON_H
#define TD_CLIENT_INFER_DAEMON_H

#include <stddef.h>

#include <jansson.h>

#include "cli.h"

/* p made absolute against the current directory (not resolved: a glob
 * stays a glob).  0, or -1 when it does not fit. */
int td_infer_absolute(const char *p, char *out, size_t cap);

/* Submits spec (stolen) as a job, follows it to its end and sets *result
 * to the job's result (a new reference).  0, or an exit code after a
 * message: 1 refused at submit, failed or cancelled; 3 unreachable. */
int td_infer_via_daemon(const td_cli *cli, const char *cmd, json_t *spec,
                        json_t **result);

#endif
