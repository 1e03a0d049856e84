/* sim_testkit.h - what the simulated device's numeric suites share
 * (test_sim_precision, test_sim_lowp, test_sim_nhwc, test_sim_blaslt,
 * test_sim_bnfuse and the other suites that link sim_testkit.c):
 * a backend configuration, learnable synthetic batches, one training or
 * evaluation step, and small helpers.
 *
 * Owns: the common setup of those suites, so their figures come from the
 * same batches and configurations.
 * Never does: choose a tolerance (each suite states its own;
 * st_resume_check takes them as parameters).
 */
#ifndef TD_SIM_TESTKIT_H
#define TD_SIM_TESTKIT_H

#include <stdint.h>

#include "backend/backend.h"
#include "model/model.h"

/* The suites' learning rate (small: the curves stay comparable). */
#define ST_LR 0.0005f

/* SGD at ST_LR, seed 17, one thread, mean 0.45 and std 0.25 everywhere. */
td_backend_config st_config(int batch, enum td_dtype dt,
                            enum td_fp32_math math);

/* Learnable batches: noise plus a bright band of rows where the label
 * says.  pixel_rows: the row of an NHWC byte counted per pixel (as it
 * is); 0: per byte, the first suites' choice (a band of bytes, which for
 * several channels is not a band of rows; kept so their figures stay). */
typedef struct st_batch {
    uint8_t *px;
    int32_t *labels;
    td_batch b;
    int pixel_rows;
} st_batch;
void st_batch_fill(st_batch *b, const td_model *m, int n, uint64_t salt);
void st_batch_free(st_batch *b);

/* A backend of kind ("cpu", "cuda:0"), failing the test with the error. */
td_backend *st_make(const char *kind, const td_model *m,
                    const td_backend_config *c);
/* One training step on batch `salt`; its mean loss. */
double st_step(td_backend *be, const td_model *m, st_batch *b, int n,
               uint64_t salt, float lr, int64_t t);
/* Mean evaluation loss on batch `salt` (no update). */
double st_eval(td_backend *be, const td_model *m, st_batch *b, int n,
               uint64_t salt);

/* A checkpoint across compute types: `steps` training steps (batches
 * 100..., at lr) on a backend made with cf; its snapshot restored into a
 * backend made with ct (snapshotted again: bitwise the same floats).
 * ev: evaluation losses on batch 900 of ct's backend before the restore,
 * of cf's after training, of ct's after the restore.  Returns ct's
 * backend (the caller trains on, and destroys it). */
td_backend *st_resume_across(const td_model *m, const td_backend_config *cf,
                             const td_backend_config *ct, st_batch *b, int n,
                             int steps, float lr, double ev[3]);

/* st_resume_across from `from` to `to` (fp32 math, batch n, SGD at lr,
 * n steps), then its checks: the evaluation loss after the restore within
 * tol (st_loss_err) of the first job's, and farther from the initial
 * weights' than `moved` times that difference.  Prints the three losses
 * (after tag) when verbose_env is NULL or st_verbose(verbose_env).
 * Returns the restored backend (the caller trains on, and destroys it). */
td_backend *st_resume_check(const td_model *m, enum td_dtype from,
                            enum td_dtype to, int n, float lr, st_batch *b,
                            double tol, double moved, const char *tag,
                            const char *verbose_env);

/* td_backend_create of m on cuda:0 (st_config(6, dt, math)) refused:
 * TD_E_NOTSUP, no backend, no device memory left on device 0; the reason
 * in err (n bytes) for the caller's checks. */
void st_create_refused(const td_model *m, enum td_dtype dt,
                       enum td_fp32_math math, char *err, size_t n);

/* Dropout masks of two backends after the same step: layer drop's output
 * and its input `in` (cnt values each) read from both; wherever neither
 * input is 0, adds to *zeros the outputs ref dropped and to *differ the
 * places where one output is 0 and the other not.  Returns how many
 * places it compared. */
size_t st_masks_compare(td_backend *ref, td_backend *be, int drop, int in,
                        size_t cnt, size_t *zeros, size_t *differ);

/* Copies bytes of device memory d to host after a device-wide sync (both
 * must succeed). */
void st_get(void *host, const void *d, size_t bytes);
/* Largest |a - b| over n values, relative to the largest |b|. */
double st_rel_diff(const float *a, const float *b, size_t n);

/* |a - b| / max(|b|, 1) */
double st_loss_err(double a, double b);
const char *st_dt_name(enum td_dtype dt);
/* Sets an environment variable the simulator reads and resets it. */
void st_sim_env(const char *name, const char *value);
/* Whether environment variable `name` asks for every figure (stdout is
 * flushed first, so what was printed survives a failed assertion). */
int st_verbose(const char *name);

#endif
