/* run.h - `traind --run JOB.json`: one job in the foreground (run.c). */
#ifndef TD_RUN_H
#define TD_RUN_H

#include <stddef.h>

typedef struct td_run_options {
    int json;                  /* JSON lines instead of text */
    const char *const *sets;   /* "key.path=value" overrides, in order */
    int nsets;
    int synthetic_steps;       /* steps per epoch on synthetic input (100) */
    const char *checkpoint_dir; /* NULL: no checkpoints */
    int resume;                /* continue from the newest checkpoint there */
} td_run_options;

/* Returns the process exit status: 0 on success, 1 on any error (after
 * printing a message naming the job file and the problem to stderr). */
int td_run_job(const char *path, const td_run_options *opt);

#endif
