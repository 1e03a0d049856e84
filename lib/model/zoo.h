/* zoo.h - where the model zoo (config/models/<name>.json) is found.
 *
 * Owns: the lookup order for zoo model files, shared by the daemon and
 * `traind --run`.  Never does: read or parse a model (model.c does).
 */
#ifndef TD_ZOO_H
#define TD_ZOO_H

#include <stddef.h>

/* The folder zoo models are read from, into out: $TD_MODELS_DIR when set;
 * else, for a job file (job_path not NULL), the models/ folder beside the
 * job's folder (config/jobs/x.json -> config/models) when it exists; else,
 * for a traind or trainctl run from its build tree, the source tree's
 * config/models; else the installed share/traind/models. */
void td_models_dir(const char *job_path, char *out, size_t cap);

#endif
