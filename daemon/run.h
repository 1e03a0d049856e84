/* run.h - `traind --run JOB.json`: one job in the foreground (run.c). */
#ifndef TD_RUN_H
#define TD_RUN_H

#include <inttypes.h>

typedef struct td_run_options {
    int json;            /* JSON lines instead of text */
    int window;          /* steps per window line (default 100) */
    int limit;           /* use only the first N training samples (0: all) */
    int synthetic_steps; /* steps per epoch in synthetic mode (default 100) */
} td_run_options;

/* Returns the process exit status: 0 on success, 1 on any error (after
 * printing a message naming the job file and the problem to stderr). */
int td_run_job(const char *path, const td_run_options *opt);

#endif
