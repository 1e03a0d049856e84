/* obs_check.h - checkers for the observability exports, shared by the
 * unit tests (test_trace, test_prom) and the live ones (test_obs).
 *
 * Each returns 0 when the input is valid, or -1 with what is wrong (and
 * where) in err. */
#ifndef TD_TESTS_OBS_CHECK_H
#define TD_TESTS_OBS_CHECK_H

#include <stddef.h>

#include <jansson.h>

/* Prometheus text exposition format 0.0.4, line by line: every sample
 * belongs to a family announced by one # HELP and one # TYPE line before
 * it; names and label sets are well formed; values are numbers; counters
 * end in _total; no series appears twice. */
int oc_prom_check(const char *text, char *err, size_t cap);
/* The value of the sample `series` (name plus labels exactly as written,
 * e.g. traind_steps_total{job="1",device="cpu"}); NAN if absent. */
double oc_prom_value(const char *text, const char *series);

/* Chrome trace object form: traceEvents is an array; every event has
 * name, ph, pid, tid (ts for all but M); X has dur >= 0; C has numeric
 * args; no two X slices on one (pid, tid) overlap (more than tol_us). */
int oc_trace_check(json_t *trace, double tol_us, char *err, size_t cap);
/* Per step (slices on the "steps" track): the trainer's phase slices of
 * that step add up to the step's duration within tol_us; steps counted
 * in *nsteps. */
int oc_trace_phases_check(json_t *trace, double tol_us, int *nsteps,
                          char *err, size_t cap);

#endif
