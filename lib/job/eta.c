/* eta.c - see eta.h.  Owns the estimate only; never reads a clock (the
 * caller passes the times, so the tests are exact). */
#include "job/eta.h"

void td_eta_init(td_eta *e, int64_t steps_total, int64_t steps_per_epoch,
                 int64_t epochs, int64_t val_batches)
{
    *e = (td_eta){.steps_total = steps_total,
                  .steps_per_epoch = steps_per_epoch > 0 ? steps_per_epoch : 1,
                  .epochs = epochs,
                  .val_batches = val_batches,
                  .eval_s = -1};
}

void td_eta_step(td_eta *e, int64_t step, double step_s)
{
    if (step_s < 0 || (step + 1) % e->steps_per_epoch == 0)
        return; /* an epoch's last step holds its evaluation too */
    e->seen++;
    double w = e->seen < 50 ? 1.0 / (double)e->seen : 1.0 / 50;
    e->step_s += (step_s - e->step_s) * w;
}

void td_eta_eval(td_eta *e, double eval_s)
{
    if (eval_s >= 0)
        e->eval_s = eval_s;
}

double td_eta_left(const td_eta *e, int64_t done, int64_t epoch_done)
{
    if (e->seen == 0)
        return -1;
    int64_t left = e->steps_total - done;
    if (left < 0)
        left = 0;
    double t = (double)left * e->step_s;
    if (e->val_batches > 0) {
        int64_t evals = e->epochs - (epoch_done + 1);
        double one = e->eval_s >= 0
                         ? e->eval_s
                         : (double)e->val_batches * e->step_s / 3.0;
        if (evals > 0)
            t += (double)evals * one;
    }
    return t;
}
