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

/* The exit status of a job refused before it started: its file does not
 * parse, or the checks `trainctl submit` gets refuse it (the same
 * messages; nothing was built or run). */
#define TD_RUN_REFUSED 3

/* Returns the process exit status: 0 on success, TD_RUN_REFUSED, or 1 when
 * the job failed once started (after printing a message naming the job
 * file and the problem to stderr). */
int td_run_job(const char *path, const td_run_options *opt);

#endif
