/* access.h - may this user read what a job spec names?  (issue 17)
 *
 * Checked at submit, on the loop thread, for data.train, data.val (each
 * glob expanded) and a model given as a .json path.  When the daemon is
 * root the check opens each path with the submitter's filesystem identity
 * (base/fscred.h), so symlinks, `..` and globs reach only what that user
 * could read; the trainer later reads the same paths with the same
 * identity, so a path swapped after submit cannot widen it.  A daemon that
 * is not root (and so reads with its own rights) checks the owner, group
 * and other bits of every directory of the resolved path instead.
 *
 * Refusals say "<field>: <path> is not readable by uid N" and nothing of
 * what the file holds.
 */
#ifndef TD_ACCESS_H
#define TD_ACCESS_H

#include <stddef.h>
#include <sys/types.h>

#include <jansson.h>

#include "base/fscred.h"
#include "job/spec.h"
#include "model/model.h"

/* 0, or -EACCES with "field: why" in err.  roots: allowed_data_roots (an
 * array of absolute paths, may be empty); they apply to resolved paths. */
int td_access_check_spec(uid_t uid, const td_job_spec *s, const json_t *roots,
                         char *err, size_t errcap);

/* The same rule for paths of one field (an eval or predict job's
 * checkpoint, data, images): refusals name "field", or "field[i]" when
 * indexed.  roots NULL: not applied. */
int td_access_check_paths(uid_t uid, const char *field, int indexed,
                          const char *const *paths, int n,
                          const json_t *roots, char *err, size_t errcap);

/* The calling (loop) thread takes on uid's filesystem identity when the
 * daemon can (root) and uid is another user; saved is for
 * td_fscred_leave either way.  -EACCES when uid has no passwd entry or
 * the switch fails. */
int td_access_enter(uid_t uid, td_fscred_saved *saved);

/* Builds the job's model to know its shapes (bounds.c): a zoo name from
 * models_dir with the daemon's rights, a .json path with uid's.  classes
 * "auto" counts as 10.  0 or an error (the runner reports model errors
 * when the job starts; the caller may go on without the model). */
int td_access_build_model(uid_t uid, const td_job_spec *s,
                          const char *models_dir, td_model **out);

#endif
