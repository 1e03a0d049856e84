/* train.c - the step loop (see train.h and docs/design.md#the-step-loop).
 *
 * Owns: the order of backend calls in a step, the one-step lag with which
 * statistics and timing events are read, epoch boundaries, evaluation and
 * the samples/s figure.  Never does: print or allocate per step.
 */
#include "job/train.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/rng.h"

enum { EV_START, EV_H2D, EV_COMPUTE, EV_D2H, EV_N };

/* A step whose statistics and events are not read yet. */
typedef struct td__pending {
    int valid;
    td_step_info info;
    td_step_stats st;
    int64_t t_start;
    td_event *ev[EV_N];
    td_batch held;               /* slot still being copied (GPU) */
    td_batch_source *held_src;   /* NULL when nothing is held */
} td__pending;

/* Gives a held batch slot back once its host-to-device copy is done. */
static int td__release_held(td_backend *be, td__pending *p)
{
    int rc = 0;
    if (!p->held_src)
        return 0;
    rc = be->ops->event_sync(be, p->ev[EV_H2D]);
    p->held_src->release(p->held_src->self, &p->held);
    p->held_src = NULL;
    return rc;
}

struct td_trainer {
    td_train_config cfg;
    td_backend *be;
    atomic_int stop;
    int64_t steps, epoch, step_in_epoch;
    td__pending pend[2];
    int cur;                    /* pend[cur] is the next step's; pend[cur^1]
                                   may still be in flight */
    td__pending evp[2];         /* evaluation: batch k's upload event and
                                   held slot in evp[k & 1] (only ev[EV_H2D]
                                   exists) */
    td_step_stats eval_st;      /* written by the backend's read_stats */
    td_ls_state ls;             /* loss scaler after the latest reported
                                   step (scale 0: off) */
    uint8_t *synth_px;
    int32_t *synth_labels;
    /* per run */
    const td_train_callbacks *cb;
    double ep_loss;
    int64_t ep_correct, ep_samples;
    double ep_prior_s;          /* the epoch's training time before this
                                   run (a resume), seconds */
    int64_t ep_t0;              /* when this run's part of the epoch began */
    int64_t warm_t0, warm_samples, eval_ns_after_warm;
    /* Where the next step's wall time starts when the step before it was
     * reported early (settled for a checkpoint, or ended with its epoch):
     * the boundary work after it (the checkpoint) is in the next step,
     * which the runner charges it to.  0: at the next step's own start. */
    int64_t open_ns;
    char *err;
    size_t errcap;
};

static int td__fail(td_trainer *t, int rc, const char *what)
{
    snprintf(t->err, t->errcap, "%s: %s%s%s", what, td_strerror(rc),
             t->be->err[0] ? ": " : "", t->be->err);
    return rc;
}

int td_trainer_create(const td_train_config *cfg, td_trainer **out,
                      char *err, size_t errcap)
{
    td_trainer *t;
    int rc;
    *out = NULL;
    if (cfg->epochs < 1 || cfg->steps_per_epoch < 1) {
        snprintf(err, errcap, "%s: must be >= 1", cfg->epochs < 1
                 ? "epochs" : "steps_per_epoch");
        return -EINVAL;
    }
    t = calloc(1, sizeof *t);
    if (!t)
        return -ENOMEM;
    t->cfg = *cfg;
    t->ls.scale = cfg->backend.loss_scale > 0 ? cfg->backend.loss_scale : 0;
    if (t->cfg.warmup_steps < 0)
        t->cfg.warmup_steps = 20;
    rc = td_backend_create(cfg->device ? cfg->device : "cpu", cfg->model,
                           &cfg->backend, &t->be, err, errcap);
    if (rc)
        goto fail;
    for (int s = 0; s < 2; s++) {
        for (int e = 0; e < EV_N; e++)
            if (!(t->pend[s].ev[e] = t->be->ops->event_create(t->be))) {
                rc = -ENOMEM;
                goto fail;
            }
        if (!(t->evp[s].ev[EV_H2D] = t->be->ops->event_create(t->be))) {
            rc = -ENOMEM;
            goto fail;
        }
    }
    *out = t;
    return 0;
fail:
    td_trainer_free(t);
    return rc;
}

void td_trainer_free(td_trainer *t)
{
    if (!t)
        return;
    if (t->be)
        for (int s = 0; s < 2; s++) {
            for (int e = 0; e < EV_N; e++)
                if (t->pend[s].ev[e])
                    t->be->ops->event_destroy(t->be, t->pend[s].ev[e]);
            if (t->evp[s].ev[EV_H2D])
                t->be->ops->event_destroy(t->be, t->evp[s].ev[EV_H2D]);
        }
    td_backend_destroy(t->be);
    free(t->synth_px);
    free(t->synth_labels);
    free(t);
}

void td_trainer_request_stop(td_trainer *t) { atomic_store(&t->stop, 1); }

td_backend *td_trainer_backend(td_trainer *t) { return t->be; }

void td_trainer_loss_scale(const td_trainer *t, td_ls_state *st)
{
    *st = t->ls;
}

int td_trainer_set_loss_scale(td_trainer *t, const td_ls_state *st)
{
    if (!t->be->ops->set_loss_scale)
        return -EINVAL;
    int rc = t->be->ops->set_loss_scale(t->be, st);
    if (rc == 0)
        t->ls = *st;
    return rc;
}

size_t td_trainer_snapshot_floats(const td_trainer *t)
{
    return td_backend_snapshot_floats(t->cfg.model, &t->cfg.backend.optim);
}

int td_trainer_snapshot(td_trainer *t, float *buf, size_t nfloats)
{
    td_event *ev = t->be->ops->event_create(t->be);
    if (!ev)
        return -ENOMEM;
    int rc = td_backend_snapshot(t->be, buf, nfloats);
    if (rc == 0 && (rc = t->be->ops->event_record(t->be, ev)) == 0)
        rc = t->be->ops->event_sync(t->be, ev);
    t->be->ops->event_destroy(t->be, ev);
    return rc;
}

void td_trainer_position(const td_trainer *t, td_train_position *pos)
{
    pos->steps = t->steps;
    pos->epoch = t->epoch;
    pos->step_in_epoch = t->step_in_epoch;
    pos->ep_loss_sum = t->ep_loss;
    pos->ep_correct = t->ep_correct;
    pos->ep_samples = t->ep_samples;
    pos->ep_train_s = t->ep_prior_s +
                      (t->ep_t0 ? td_ns_to_s(td_now_ns() - t->ep_t0) : 0);
}

int td_trainer_restore(td_trainer *t, const float *buf, size_t nfloats,
                       const td_train_position *pos)
{
    if (pos->steps < 0 || pos->epoch < 0 || pos->step_in_epoch < 0 ||
        pos->step_in_epoch >= t->cfg.steps_per_epoch ||
        pos->ep_samples < 0 || pos->ep_correct < 0 ||
        pos->ep_correct > pos->ep_samples || !isfinite(pos->ep_loss_sum) ||
        pos->ep_loss_sum < 0 || !(pos->ep_train_s >= 0))
        return -EINVAL;
    int rc = td_backend_restore(t->be, buf, nfloats);
    if (rc)
        return rc;
    t->steps = pos->steps;
    t->epoch = pos->epoch;
    t->step_in_epoch = pos->step_in_epoch;
    t->ep_loss = pos->ep_loss_sum;
    t->ep_correct = pos->ep_correct;
    t->ep_samples = pos->ep_samples;
    t->ep_prior_s = pos->ep_train_s;
    return 0;
}

/* Reads a pending step's events and statistics, reports it. */
static int td__finish(td_trainer *t, td__pending *p, int64_t step_end)
{
    td_backend *be = t->be;
    int rc;
    if (!p->valid)
        return 0;
    p->valid = 0;
    if ((rc = td__release_held(be, p)) ||
        (rc = be->ops->event_sync(be, p->ev[EV_D2H])))
        return td__fail(t, rc, "event");
    be->ops->event_elapsed_ns(be, p->ev[EV_H2D], p->ev[EV_COMPUTE],
                              &p->info.compute_ns);
    be->ops->event_elapsed_ns(be, p->ev[EV_COMPUTE], p->ev[EV_D2H],
                              &p->info.d2h_ns);
    be->ops->event_elapsed_ns(be, p->ev[EV_START], p->ev[EV_H2D],
                              &p->info.copy_ns);
    p->info.step_ns = step_end - p->t_start;
    p->info.loss = p->st.samples ? p->st.loss_sum / (double)p->st.samples
                                 : NAN;
    p->info.correct = p->st.correct;
    if (p->st.ls.scale > 0) { /* loss scaling: this step's verdict */
        p->info.loss_scale = p->st.ls.scale;
        p->info.skipped = p->st.ls.skipped > t->ls.skipped;
        p->info.skipped_total = p->st.ls.skipped;
        t->ls = p->st.ls;
    }
    t->ep_loss += p->st.loss_sum;
    t->ep_correct += p->st.correct;
    t->ep_samples += p->st.samples;
    if (t->cb && t->cb->on_step && t->cb->on_step(t->cb->user, t, &p->info))
        atomic_store(&t->stop, 1);
    return 0;
}

int td_trainer_settle(td_trainer *t)
{
    td__pending *p = &t->pend[t->cur ^ 1];
    if (!p->valid)
        return 0;
    int64_t now = td_now_ns();
    t->open_ns = now;
    return td__finish(t, p, now);
}

/* Enqueues validation batch k (upload, eval_step) and gives back the slot
 * of batch k-1 once its copy is done: the host waits for an event
 * recorded after that upload, so it stays at most about one batch ahead
 * of the device while batch k's copy overlaps batch k-1's evaluation. */
static int td__eval_batch(td_trainer *t, td_batch_source *val, td_batch *b,
                          td__pending *p, td__pending *prev)
{
    td_backend *be = t->be;
    const td_backend_ops *o = be->ops;
    int rc = td_backend_upload(be, b), rc2;
    if (rc == 0)
        rc = o->event_record(be, p->ev[EV_H2D]);
    /* as in td__step: held while the copy may still read it */
    if (rc == 0 && o->event_query(be, p->ev[EV_H2D]) == 0) {
        p->held = *b;
        p->held_src = val;
    } else {
        val->release(val->self, b);
    }
    if (rc == 0)
        rc = td_backend_eval_step(be);
    rc2 = td__release_held(be, prev);
    return rc ? rc : rc2;
}

/* One pass over the validation source in inference mode, overlapped like
 * training (issue 14, finding 7: it uploaded, synchronised the device and
 * evaluated, batch after batch).  The device accumulates the counters
 * batch by batch in the same order as before, so the sums are those of
 * the serial pass; the only whole-device wait is the one at the end. */
static int td__evaluate(td_trainer *t, td_batch_source *val,
                        td_epoch_info *ei)
{
    td_backend *be = t->be;
    /* In the trainer, not on this stack: a device backend writes read
     * statistics later, from its stream, and an early return below leaves
     * before that write (issue 14, finding 2). */
    td_step_stats *stp = &t->eval_st;
    td_batch b;
    const char *what = "evaluation";
    int rc, rc2;
    td_backend_read_stats(be, stp); /* drop anything pending */
    if ((rc = val->start(val->self, t->epoch, 0)))
        return td__fail(t, rc, "validation source");
    for (int64_t k = 0;; k++) {
        if ((rc = val->next(val->self, &b, NULL))) {
            what = "validation source";
            break;
        }
        int last = b.last_in_epoch;
        if ((rc = td__eval_batch(t, val, &b, &t->evp[k & 1],
                                 &t->evp[(k & 1) ^ 1])) || last)
            break;
    }
    /* the last slot, and on an error whatever is still held */
    for (int s = 0; s < 2; s++)
        if ((rc2 = td__release_held(be, &t->evp[s])) && !rc)
            rc = rc2;
    if (rc)
        return td__fail(t, rc, what);
    if ((rc = td_backend_read_stats(be, stp)) || (rc = td_backend_sync(be)))
        return td__fail(t, rc, "evaluation");
    const td_step_stats st = *stp;
    ei->val_samples = st.samples;
    ei->val_loss = st.samples ? st.loss_sum / (double)st.samples : NAN;
    ei->val_acc = st.samples ? (double)st.correct / (double)st.samples : NAN;
    return 0;
}

static int td__end_epoch(td_trainer *t, td_batch_source *val,
                         td_train_result *res)
{
    td_epoch_info ei = {.epoch = t->epoch, .val_loss = NAN, .val_acc = NAN};
    int64_t t0 = td_now_ns();
    int rc;
    ei.train_s = t->ep_prior_s + td_ns_to_s(t0 - t->ep_t0);
    t->ep_prior_s = 0;
    if (val && (rc = td__evaluate(t, val, &ei)))
        return rc;
    int64_t eval_ns = td_now_ns() - t0;
    /* the next step's wall time starts here: the epoch's bookkeeping
     * below, and the boundary after it (a checkpoint), are in it */
    t->open_ns = t0 + eval_ns;
    if (t->warm_t0)
        t->eval_ns_after_warm += eval_ns;
    ei.eval_s = td_ns_to_s(eval_ns);
    ei.steps = t->steps;
    ei.lr = td_schedule_lr(&t->cfg.backend.optim, t->steps > 0 ? t->steps - 1
                                                              : 0,
                           t->cfg.epochs * t->cfg.steps_per_epoch);
    ei.train_loss = t->ep_samples ? t->ep_loss / (double)t->ep_samples : NAN;
    ei.train_acc = t->ep_samples ? (double)t->ep_correct / t->ep_samples
                                 : NAN;
    t->ep_loss = 0;
    t->ep_correct = t->ep_samples = 0;
    res->val_loss = ei.val_loss;
    res->val_acc = ei.val_acc;
    res->epochs = t->epoch + 1;
    t->epoch++;
    t->step_in_epoch = 0;
    if (t->cb && t->cb->on_epoch && t->cb->on_epoch(t->cb->user, t, &ei))
        atomic_store(&t->stop, 1);
    return 0;
}

/* The synthetic batch: generated once, uploaded once, kept on the device. */
static int td__synth_setup(td_trainer *t)
{
    const td_shape in = t->cfg.model->layers[0].out;
    int n = t->cfg.backend.batch;
    size_t per = (size_t)in.c * in.h * in.w;
    uint64_t st = td_rng_stream(TD_RNG_SYNTH, 0);
    t->synth_px = malloc(per * (size_t)n);
    t->synth_labels = malloc(sizeof *t->synth_labels * (size_t)n);
    if (!t->synth_px || !t->synth_labels)
        return -ENOMEM;
    for (size_t i = 0; i < per * (size_t)n; i++)
        t->synth_px[i] = (uint8_t)td_rng_below(t->cfg.backend.seed, st, i,
                                               256);
    for (int i = 0; i < n; i++)
        t->synth_labels[i] = (int32_t)td_rng_below(
            t->cfg.backend.seed, st + 1, (uint64_t)i,
            (uint64_t)t->cfg.model->classes);
    td_batch b = {.data = t->synth_px, .labels = t->synth_labels, .n = n,
                  .h = in.h, .w = in.w, .c = in.c, .layout = TD_LAYOUT_NHWC};
    int rc = td_backend_upload(t->be, &b);
    return rc ? rc : td_backend_sync(t->be);
}

/* Gets the next batch (or the synthetic stand-in) and its wait. */
static int td__take(td_trainer *t, td_batch_source *src, td_batch *b,
                    int64_t *wait)
{
    if (!t->cfg.synthetic) {
        int64_t t0 = td_now_ns(), w = -1;
        int rc = src->next(src->self, b, &w);
        *wait = w >= 0 ? w : td_now_ns() - t0;
        return rc;
    }
    *wait = 0;
    *b = (td_batch){.n = t->cfg.backend.batch, .epoch = t->epoch,
                    .step = t->step_in_epoch,
                    .last_in_epoch =
                        t->step_in_epoch + 1 >= t->cfg.steps_per_epoch};
    return 0;
}

/* Enqueues one training step on the backend; fills p. */
static int td__step(td_trainer *t, td_batch_source *src, td_batch *b,
                    td__pending *p, int64_t t0, int64_t wait)
{
    td_backend *be = t->be;
    const td_backend_ops *o = be->ops;
    int64_t total = t->cfg.epochs * t->cfg.steps_per_epoch;
    double lr = td_schedule_lr(&t->cfg.backend.optim, t->steps, total);
    int rc = 0;
    int64_t t1 = td_now_ns(), t2;
    o->event_record(be, p->ev[EV_START]);
    if (!t->cfg.synthetic) {
        rc = td_backend_upload(be, b);
        /* h2d is the host time the upload blocked, read before EV_H2D is
         * recorded: compute starts at EV_H2D, so the two never overlap
         * (a preemption between the two reads once made them sum to more
         * than the step).  Giving the slot back is part of neither. */
        t2 = td_now_ns();
        if (rc == 0)
            rc = o->event_record(be, p->ev[EV_H2D]);
        /* The slot goes back once its copy is done: at once when the copy
         * already finished (always on the CPU), else when this step is
         * finished, one step later, so that the copy overlaps compute. */
        if (rc == 0 && o->event_query(be, p->ev[EV_H2D]) == 0) {
            p->held = *b;
            p->held_src = src;
        } else {
            src->release(src->self, b);
        }
        if (rc)
            return td__fail(t, rc, "upload");
    } else {
        t2 = td_now_ns();
        o->event_record(be, p->ev[EV_H2D]);
    }
    if ((rc = td_backend_train_step(be, (float)lr, t->steps + 1)))
        return td__fail(t, rc, "train step");
    o->event_record(be, p->ev[EV_COMPUTE]);
    if ((rc = td_backend_read_stats(be, &p->st)))
        return td__fail(t, rc, "statistics");
    o->event_record(be, p->ev[EV_D2H]);
    p->valid = 1;
    p->t_start = t0;
    p->info = (td_step_info){.step = t->steps, .epoch = t->epoch,
                             .step_in_epoch = t->step_in_epoch, .n = b->n,
                             .lr = lr, .data_wait_ns = wait,
                             .h2d_ns = t2 - t1, .start_ns = t0};
    return 0;
}

int td_trainer_run(td_trainer *t, td_batch_source *train,
                   td_batch_source *val, const td_train_callbacks *cb,
                   td_train_result *res, char *err, size_t errcap)
{
    td_batch b;
    int rc = 0;
    int64_t start_steps = t->steps;
    t->ep_t0 = td_now_ns();
    memset(res, 0, sizeof *res);
    res->val_loss = res->val_acc = NAN;
    t->cb = cb;
    t->cur = 0;
    t->err = err;
    t->errcap = errcap;
    t->warm_t0 = 0;
    t->warm_samples = t->eval_ns_after_warm = 0;
    if (!t->cfg.synthetic && !train) {
        snprintf(err, errcap, "training source: missing");
        return -EINVAL;
    }
    if (t->cfg.synthetic)
        rc = td__synth_setup(t);
    else
        rc = train->start(train->self, t->epoch, t->step_in_epoch);
    if (rc)
        return td__fail(t, rc, "training source");
    t->open_ns = td_now_ns(); /* a checkpoint asked before the first step */
    while (t->epoch < t->cfg.epochs && !atomic_load(&t->stop)) {
        td__pending *p = &t->pend[t->cur];
        if (cb && cb->on_boundary) {
            td_train_position pos;
            td_trainer_position(t, &pos);
            if (cb->on_boundary(cb->user, t, &pos)) {
                atomic_store(&t->stop, 1);
                break;
            }
        }
        int64_t wait, t0 = td_now_ns();
        /* the step's wall time: from the end of the one before, so that
         * nothing between two steps (a checkpoint) is in none */
        int64_t start = t->open_ns ? t->open_ns : t0;
        if ((rc = td__take(t, train, &b, &wait)))
            return td__fail(t, rc, "training source");
        int last = b.last_in_epoch;
        if (b.n != t->cfg.backend.batch) { /* partial: dropped */
            if (!t->cfg.synthetic)
                train->release(train->self, &b);
        } else {
            if (t->steps - start_steps == t->cfg.warmup_steps)
                t->warm_t0 = start;
            if (t->warm_t0)
                t->warm_samples += b.n;
            t->open_ns = 0;
            if ((rc = td__step(t, train, &b, p, start, wait)) ||
                (rc = td__finish(t, &t->pend[t->cur ^ 1], t0)))
                return rc;
            t->steps++;
            t->step_in_epoch++;
            t->cur ^= 1;
        }
        if (last) {
            if ((rc = td__finish(t, &t->pend[t->cur ^ 1], td_now_ns())) ||
                (rc = td__end_epoch(t, val, res)))
                return rc;
            t->ep_t0 = td_now_ns();
        }
    }
    if ((rc = td__finish(t, &t->pend[t->cur ^ 1], td_now_ns())))
        return rc;
    int64_t span = td_now_ns() - t->warm_t0 - t->eval_ns_after_warm;
    res->steps = t->steps;
    res->epochs = t->epoch;
    res->samples = t->warm_samples;
    res->samples_per_s = t->warm_t0 && span > 0
                             ? (double)t->warm_samples / td_ns_to_s(span)
                             : NAN;
    /* A stop asked after the last step (during the last evaluation) finds
     * nothing left to stop: the job is complete. */
    res->stopped = atomic_load(&t->stop) && t->epoch < t->cfg.epochs;
    return 0;
}
