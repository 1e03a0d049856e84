/* runsize.c - a job's run length and the rules that need it (jobdata.h):
 * decided at submit (and by traind --run before it starts), where the
 * data is opened, not by td_spec_parse, which never reads the data.
 *
 * Owns: counting the run's steps as the runner does (data.train's samples
 * in whole batches, or the synthetic epoch), and refusing a schedule that
 * the run's length makes pointless.  Never: opening data (jobdata.c),
 * single-field ranges (spec.c), rules without the run's length
 * (spec_rules.c).
 */
#include <stdarg.h>
#include <stdio.h>

#include "base/error.h"
#include "job/jobdata.h"

void td_job_size_set(td_job_size *z, const td_job_spec *s, size_t train,
                     size_t held, int synthetic_steps)
{
    z->train = train;
    z->held = held;
    if (s->input.source == TD_SOURCE_SYNTHETIC)
        z->steps_per_epoch = synthetic_steps > 0 ? synthetic_steps
                                                 : TD_JOB_SYNTHETIC_STEPS;
    else /* drop_last, as the training pipeline */
        z->steps_per_epoch = (int64_t)(train / (size_t)s->batch_size);
    z->steps = (int64_t)s->epochs * z->steps_per_epoch;
}

/* "(10 epochs x 469 steps of batch_size 64 from the 30016 samples of
 * data.train)": how the run's steps were counted. */
static void td__how(const td_job_spec *s, const td_job_size *z, char *out,
                    size_t cap)
{
    int n = snprintf(out, cap, "%d epoch%s x %lld step%s", s->epochs,
                     s->epochs == 1 ? "" : "s", (long long)z->steps_per_epoch,
                     z->steps_per_epoch == 1 ? "" : "s");
    if (n < 0 || (size_t)n >= cap)
        return;
    if (s->input.source == TD_SOURCE_SYNTHETIC)
        snprintf(out + n, cap - (size_t)n, " of synthetic input");
    else if (z->held)
        snprintf(out + n, cap - (size_t)n, " of batch_size %d from the %zu "
                 "samples of data.train left after data.val_fraction %g",
                 s->batch_size, z->train, s->data.val_fraction);
    else
        snprintf(out + n, cap - (size_t)n, " of batch_size %d from the %zu "
                 "samples of data.train", s->batch_size, z->train);
}

__attribute__((format(printf, 7, 8))) static int
td__refuse(const td_job_spec *s, const td_job_size *z, const char *path,
           long long value, char *err, size_t errcap, const char *fmt, ...)
{
    char how[256], why[256];
    va_list ap;
    td__how(s, z, how, sizeof how);
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return td_set_error(err, errcap, TD_E_SPEC, "%s: %lld, but the run has "
                        "%lld steps (%s): %s", path, value,
                        (long long)z->steps, how, why);
}

int td_job_size_rules(const td_job_spec *s, const td_job_size *z, char *err,
                      size_t errcap)
{
    int64_t warm = s->optimizer.schedule.warmup_steps;
    int64_t size = s->optimizer.schedule.step_size;
    /* lr(step) rises to lr over steps 0..warmup-1 (optim.c): a warm-up
     * as long as the run is all the run */
    if (warm >= z->steps)
        return td__refuse(s, z, "optimizer.schedule.warmup_steps",
                          (long long)warm, err, errcap, "the learning rate "
                          "would never leave the warm-up (set it below "
                          "%lld, or train more epochs)",
                          (long long)z->steps);
    /* step: lr x gamma^floor((step - warmup) / step_size), so the first
     * decay is at step warmup + step_size, counted from 0 */
    if (s->optimizer.schedule.type == TD_SCHED_STEP && warm + size >= z->steps)
        return td__refuse(s, z, "optimizer.schedule.step_size",
                          (long long)size, err, errcap, "its first decay "
                          "would come after %lld steps (warmup_steps %lld + "
                          "step_size %lld), so the learning rate would never "
                          "decay", (long long)(warm + size), (long long)warm,
                          (long long)size);
    return 0;
}
