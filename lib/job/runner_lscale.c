/* runner_lscale.c - a job's loss scaling in the runner (docs/compute.md
 * "Loss scaling").
 *
 * Owns: the backend's loss-scaling configuration from the spec (logged),
 * the scale and skipped count the step and window events and the
 * Prometheus snapshot report, and the scaler in checkpoints
 * ("traind.loss_scale") and back at resume.
 * Never does: scale, check or skip anything itself (the backends do, over
 * kernels/loss_scale.h), or wait for the device (the state arrives with
 * each step's statistics).
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "job/precision.h"
#include "job/runner_int.h"

void td__runner_ls_config(td_runner *r, td_backend_config *bc)
{
    td_precision_loss_scale(r->spec, &bc->loss_scale,
                            &bc->loss_scale_interval);
    bc->ls_poison_step = r->o.ls_poison_step;
    r->ls_scale = bc->loss_scale;
    if (bc->loss_scale > 0)
        td_logf(TD_LOG_INFO, r->o.job, "loss scaling: %s, scale %g%s",
                bc->loss_scale_interval < 0 ? "static" : "dynamic",
                (double)bc->loss_scale,
                bc->loss_scale_interval < 0 ? "" : " (halved on an inf or "
                "NaN gradient, the step skipped; doubled after 2000 good "
                "steps)");
}

void td__runner_ls_event(const td_runner *r, json_t *o)
{
    if (!(r->ls_scale > 0)) /* loss scaling off: no fields */
        return;
    json_object_set_new(o, "loss_scale", json_real(r->ls_scale));
    json_object_set_new(o, "skipped_steps", json_integer(r->ls_skipped));
}

/* Loss scaling: the step's scale and skipped count for the events and
 * the Prometheus snapshot; a step skipped at the floor scale is logged
 * once (the gradients overflow unscaled: the job is diverging). */
void td__runner_ls_step(td_runner *r, const td_step_info *s)
{
    if (!(s->loss_scale > 0))
        return;
    r->ls_scale = s->loss_scale;
    r->ls_skipped = s->skipped_total;
    if (s->skipped && s->loss_scale <= TD_LS_MIN && !r->ls_floor_warned) {
        r->ls_floor_warned = 1;
        td_logf(TD_LOG_WARN, r->o.job, "step %" PRId64 " skipped at the "
                "smallest loss scale (%g): its gradients are inf or NaN "
                "without scaling; the job is diverging (lower "
                "optimizer.lr?)", s->step + 1, (double)TD_LS_MIN);
    }
}

/* ---- the loss scaler in checkpoints ------------------------------------
 *
 * "traind.loss_scale": {"scale", "good", "skipped", "precision", "mode"}
 * as JSON text, the scaler after the checkpoint's last step (the trainer
 * has settled it).  At resume a job with loss scaling takes it back when
 * precision and mode (dynamic, or the same static scale) match; otherwise,
 * or from a checkpoint without the key, the scale and its good steps start
 * fresh, and the skipped count (AdamW's step count leaves skipped steps
 * out) is kept when the checkpoint has one. */

static void td__ls_mode(const td_runner *r, char *out, size_t cap)
{
    const td_spec_loss_scale *ls = &r->spec->loss_scale;
    if (ls->mode == TD_LS_STATIC)
        snprintf(out, cap, "static %.9g", ls->scale);
    else
        snprintf(out, cap, "dynamic");
}

void td__runner_ls_meta(td_runner *r, json_t *meta)
{
    td_ls_state st;
    char mode[64];
    td_trainer_loss_scale(r->trainer, &st);
    if (!(st.scale > 0))
        return;
    td__ls_mode(r, mode, sizeof mode);
    json_t *o = json_pack("{s:f, s:i, s:I, s:s, s:s}", "scale",
                          (double)st.scale, "good", (int)st.good, "skipped",
                          (json_int_t)st.skipped, "precision",
                          td_precision_name(r->spec->precision), "mode",
                          mode);
    char *txt = o ? json_dumps(o, JSON_COMPACT) : NULL;
    if (txt)
        json_object_set_new(meta, "traind.loss_scale", json_string(txt));
    free(txt);
    json_decref(o);
}

void td__runner_ls_resume(td_runner *r, const char *txt, const char *path)
{
    td_ls_state st, cur;
    char mode[64];
    json_t *o = txt ? json_loads(txt, 0, NULL) : NULL;
    td_trainer_loss_scale(r->trainer, &cur);
    double scale = json_number_value(json_object_get(o, "scale"));
    json_int_t good = json_integer_value(json_object_get(o, "good"));
    json_int_t skipped = json_integer_value(json_object_get(o, "skipped"));
    const char *prec = json_string_value(json_object_get(o, "precision"));
    const char *was = json_string_value(json_object_get(o, "mode"));
    int valid = o && scale > 0 && isfinite(scale) && good >= 0 &&
                good <= INT32_MAX && skipped >= 0 && prec && was;
    if (txt && !valid)
        td_logf(TD_LOG_WARN, r->o.job, "checkpoint %s: traind.loss_scale "
                "is not valid; the loss scaler starts fresh", path);
    if (!(cur.scale > 0)) { /* off in this job: nothing to restore */
        json_decref(o);
        return;
    }
    td__ls_mode(r, mode, sizeof mode);
    st = cur; /* fresh: the initial scale, no good steps */
    if (valid)
        st.skipped = skipped;
    if (valid && strcmp(prec, td_precision_name(r->spec->precision)) == 0 &&
        strcmp(was, mode) == 0) {
        st.scale = (float)scale;
        st.good = (int32_t)good;
    } else {
        td_logf(TD_LOG_INFO, r->o.job, "loss scaling starts fresh at scale "
                "%g (%s)", (double)cur.scale, !valid ? "the checkpoint has "
                "no loss scaler" : "the checkpoint's precision or loss_scale "
                "differ");
    }
    json_decref(o);
    if (td_trainer_set_loss_scale(r->trainer, &st)) {
        td_logf(TD_LOG_WARN, r->o.job, "loss scaler not restored: %s",
                td_trainer_backend(r->trainer)->err);
        return;
    }
    r->ls_scale = st.scale;
    r->ls_skipped = st.skipped;
}
