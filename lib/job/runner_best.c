/* runner_best.c - the runner's best-so-far: checkpoint.keep_best and
 * early_stopping (see runner_int.h).
 *
 * Owns: the rules that decide, per evaluated epoch, whether it is the
 * best so far (keep_best) and whether the job stops (early_stopping), and
 * their replay over a resumed checkpoint's history, so that a job that
 * was stopped and resumed compares with, and stops after, the epochs of
 * its earlier lives exactly as an uninterrupted run does.
 * Never: touches the disk (runner_ckpt.c links best.safetensors).
 */
#include "job/runner_int.h"

#include <inttypes.h>
#include <math.h>
#include <stdatomic.h>

#include "base/log.h"

/* keep_best's rule: 1 when v beats the best so far (which becomes v). */
static int td__best_update(td_runner *r, double v)
{
    const int acc = r->spec->checkpoint.best_metric == 1;
    if (!r->spec->checkpoint.keep_best || isnan(v))
        return 0;
    if (r->have_best && !(acc ? v > r->best_val : v < r->best_val))
        return 0;
    r->have_best = 1;
    r->best_val = v;
    return 1;
}

/* early_stopping's rule for epoch's metric v: 1 when the job stops after
 * it (no gain over min_delta for `patience` epochs, and not the last). */
static int td__es_update(td_runner *r, int64_t epoch, double v)
{
    const int patience = r->spec->early_stopping.patience;
    const int acc = r->spec->early_stopping.metric == 1;
    if (patience <= 0 || isnan(v))
        return 0;
    double gain = r->es_best_epoch < 0 ? INFINITY
                  : acc ? v - r->es_best : r->es_best - v;
    if (gain > r->spec->early_stopping.min_delta) {
        r->es_best = v;
        r->es_best_epoch = epoch;
        r->es_bad = 0;
        return 0;
    }
    return ++r->es_bad >= patience && epoch + 1 < r->spec->epochs;
}

void td__runner_keep_best(td_runner *r, const td_epoch_info *e)
{
    double v = r->spec->checkpoint.best_metric == 1 ? e->val_acc
                                                     : e->val_loss;
    if (!td__best_update(r, v))
        return;
    pthread_mutex_lock(&r->res_mu);
    r->best_at_step = v;
    pthread_mutex_unlock(&r->res_mu);
    atomic_store(&r->best_step, e->steps);
}

int td__runner_early_stop(td_runner *r, const td_epoch_info *e)
{
    const int acc = r->spec->early_stopping.metric == 1;
    if (!td__es_update(r, e->epoch, acc ? e->val_acc : e->val_loss))
        return 0;
    const char *name = acc ? "val_acc" : "val_loss";
    td_logf(TD_LOG_INFO, r->o.job, "early stopping after epoch %" PRId64
            ": %s has not improved by more than %g for %d epoch(s) (best "
            "%.4f after epoch %" PRId64 ")", e->epoch + 1, name,
            r->spec->early_stopping.min_delta, r->spec->early_stopping.patience,
            r->es_best, r->es_best_epoch + 1);
    td__runner_emit(r, "early_stop", json_pack(
        "{s:I, s:s, s:f, s:I}", "epoch", (json_int_t)e->epoch, "metric",
        name, "best", r->es_best, "best_epoch",
        (json_int_t)r->es_best_epoch));
    r->early_stopped = 1;
    return 1;
}

static double td__num(const json_t *e, const char *key)
{
    const json_t *v = json_object_get(e, key);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

int td__runner_replay_best(td_runner *r)
{
    size_t i, n = json_array_size(r->hist);
    json_t *e;
    int stop = 0;
    json_array_foreach(r->hist, i, e) {
        int64_t epoch = json_integer_value(json_object_get(e, "epoch"));
        double loss = td__num(e, "val_loss"), acc = td__num(e, "val_acc");
        td__best_update(r, r->spec->checkpoint.best_metric == 1 ? acc : loss);
        stop = td__es_update(r, epoch, r->spec->early_stopping.metric == 1
                                           ? acc : loss);
        if (stop && i + 1 < n)
            stop = 0; /* a stop that did not happen then: keep counting */
    }
    if (r->have_best)
        td_logf(TD_LOG_INFO, r->o.job, "keep_best: the best %s so far is "
                "%.4f (from the epochs before the checkpoint)",
                r->spec->checkpoint.best_metric == 1 ? "val_acc" : "val_loss",
                r->best_val);
    if (r->spec->early_stopping.patience > 0 && r->es_best_epoch >= 0)
        td_logf(TD_LOG_INFO, r->o.job, "early stopping: best %.4f after "
                "epoch %" PRId64 ", %d epoch(s) without improvement so far",
                r->es_best, r->es_best_epoch + 1, r->es_bad);
    if (stop)
        r->early_stopped = 1;
    return stop;
}
