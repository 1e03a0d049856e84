/* modelfile.h - the model a trainctl command works on (export, eval,
 * predict): a self-describing checkpoint or export (docs/checkpoints.md),
 * named by its path or by a job id, whose newest checkpoint the daemon
 * reports (`show`: result.last_checkpoint for an ended job).
 *
 * Owns: resolving the source, reading its metadata and weights.  Never:
 * writes anything; exits (it returns exit codes).
 */
#ifndef TD_CLIENT_MODELFILE_H
#define TD_CLIENT_MODELFILE_H

#include <stdint.h>

#include "cli.h"
#include "job/modelmeta.h"
#include "model/model.h"

typedef struct td_cli_model {
    char path[4096];
    td_model_meta meta;
    td_model *m;
    float *params, *state; /* model order */
    int64_t nbt;           /* num_batches_tracked of the file (or 0) */
    int64_t step;          /* the checkpoint's step (0 for an export) */
} td_cli_model;

/* The file src names: src itself, or the newest checkpoint of job src
 * when no such file exists and src is a job id.  0 or an exit code (a
 * message printed). */
int td_cli_model_path(const td_cli *cli, const char *src, char *path,
                      size_t cap);

/* Opens src (a file, or a job id when no such file exists).  On error
 * prints "trainctl CMD: ..." naming the file and returns an exit code;
 * 0 when *out is ready. */
int td_cli_model_open(const td_cli *cli, const char *src, td_cli_model *out);
void td_cli_model_close(td_cli_model *mf);

#endif
