/* cpu.c - the CPU backend: creates and destroys it, and implements the
 * td_backend_ops around the step in cpu_step.c (see backend.h for the
 * contract and cpu_int.h for the data layout).
 *
 * Owns: upload, statistics, snapshots, tensor reads and writes, and events
 * on the CPU.  Every call runs synchronously on the calling thread with an
 * OpenMP team of cfg.threads threads, so events complete when recorded.
 * Never does: allocate during a step (everything is planned at create),
 * log per step, or touch the batch after upload returns.
 */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_bn8.h"
#include "backend/cpu/cpu_int.h"
#include "base/clock.h"
#include "base/error.h"
#include "backend/cpu/caps.h"
#include "base/rng.h"
#include "bf16.h"
#include "normalize.h"
#include "optim_update.h"
#include "softmax_xent.h"

struct td_event {
    int64_t t;
    int recorded;
};

static int td__cpu_upload(td_backend *b, const td_batch *bt)
{
    td__cpu *be = td__be(b);
    const td_model *m = b->model;
    const td_shape in = m->layers[0].out;
    int known = bt->layout == TD_LAYOUT_NHWC || bt->layout == TD_LAYOUT_NCHW;
    if (!known || bt->c != in.c || bt->h != in.h ||
        bt->w != in.w || bt->n < 1 || bt->n > be->batch) {
        snprintf(b->err, sizeof b->err, "upload: batch of %d %dx%dx%d (%s) "
                 "does not fit the model's %dx%dx%d input, batch <= %d",
                 bt->n, bt->c, bt->h, bt->w,
                 !known ? "unknown layout" : bt->layout == TD_LAYOUT_NHWC
                 ? "NHWC" : "NCHW", in.c, in.h, in.w, be->batch);
        return -EINVAL;
    }
    for (int i = 0; i < bt->n; i++)
        if (bt->labels[i] < 0 || bt->labels[i] >= m->classes) {
            snprintf(b->err, sizeof b->err, "upload: label %d of sample %d "
                     "is outside 0..%d", (int)bt->labels[i], i,
                     m->classes - 1);
            return -EINVAL;
        }
    size_t per = (size_t)in.c * in.h * in.w;
    memcpy(be->pixels, bt->data, per * (size_t)bt->n);
    memset(be->pixels + per * (size_t)bt->n, 0,
           per * (size_t)(be->batch - bt->n));
    memcpy(be->labels, bt->labels, sizeof *be->labels * (size_t)bt->n);
    be->n = bt->n;
    be->layout = bt->layout;
    return 0;
}

static int td__cpu_read_stats(td_backend *b, td_step_stats *host)
{
    td__cpu *be = td__be(b);
    *host = be->acc;
    host->ls = be->ls;
    memset(&be->acc, 0, sizeof be->acc);
    return 0;
}

static int td__cpu_set_loss_scale(td_backend *b, const td_ls_state *st)
{
    td__cpu *be = td__be(b);
    if (!(b->cfg.loss_scale > 0) || !(st->scale > 0 && isfinite(st->scale)) ||
        st->good < 0 || st->skipped < 0) {
        snprintf(b->err, sizeof b->err, "set_loss_scale: %s",
                 b->cfg.loss_scale > 0 ? "scale, good steps or skipped "
                 "steps out of range" : "loss scaling is off");
        return -EINVAL;
    }
    be->ls = *st;
    return 0;
}

static int td__snap_check(td__cpu *be, size_t nfloats, const char *what)
{
    size_t want = td_backend_snapshot_floats(be->base.model,
                                             &be->base.cfg.optim);
    if (nfloats == want)
        return 0;
    snprintf(be->base.err, sizeof be->base.err, "%s: buffer of %zu floats, "
             "this model and optimizer need %zu", what, nfloats, want);
    return -EINVAL;
}

/* memcpy of n floats; nothing at all when n is 0 (plain SGD has no
 * optimizer slots and a model without batch norm no state: their pointers
 * are NULL, which memcpy may not be given even for 0 bytes). */
static void td__copy(float *dst, const float *src, size_t n)
{
    if (n)
        memcpy(dst, src, n * sizeof *dst);
}

static int td__cpu_snapshot(td_backend *b, float *host, size_t nfloats)
{
    td__cpu *be = td__be(b);
    size_t pc = b->model->param_count;
    int rc = td__snap_check(be, nfloats, "snapshot");
    if (rc)
        return rc;
    td__copy(host, be->params, pc);
    td__copy(host + pc, be->slots, be->nslots * pc);
    /* nfloats is the whole snapshot (checked): the state is the rest. */
    td__copy(host + pc * (1 + be->nslots), be->state,
             nfloats - pc * (1 + be->nslots));
    return 0;
}

static int td__cpu_restore(td_backend *b, const float *host, size_t nfloats)
{
    td__cpu *be = td__be(b);
    size_t pc = b->model->param_count;
    int rc = td__snap_check(be, nfloats, "restore");
    if (rc)
        return rc;
    td__copy(be->params, host, pc);
    td__copy(be->slots, host + pc, be->nslots * pc);
    td__copy(be->state, host + pc * (1 + be->nslots),
             nfloats - pc * (1 + be->nslots));
    be->weights_dirty = 1;
    return 0;
}

static size_t td__param_off(const td_model *m, int p)
{
    size_t off = 0;
    for (int i = 0; i < p; i++)
        off += m->params[i].count;
    return off;
}

/* A layer's value or gradient, reordered into plain NCHW (or NC). */
static int td__read_act(td__cpu *be, int L, int grad, float *host,
                        size_t nfloats)
{
    const td_model *m = be->base.model;
    const td__cl *c = &be->cl[be->cl[L].root];
    if (m->layers[L].kind == TD_L_BN && be->cl[L].fused) {
        snprintf(be->base.err, sizeof be->base.err, "layer %s: fused with "
                 "its relu, its own output does not exist",
                 m->layers[L].name);
        return TD_E_NOTSUP;
    }
    if (m->layers[L].kind == TD_L_ADD && be->cl[L].root != L) {
        snprintf(be->base.err, sizeof be->base.err, "layer %s: fused with "
                 "the batch norm before it and the relu after it, its own "
                 "output does not exist", m->layers[L].name);
        return TD_E_NOTSUP;
    }
    if (grad)
        td__cpu_settle_deferred(be, be->cl[L].root);
    dnnl_memory_desc_t plain;
    dnnl_memory_desc_init_by_tag(&plain, c->md.ndims, c->md.dims, dnnl_f32,
                                 c->md.ndims == 2 ? dnnl_nc : dnnl_nchw);
    if (nfloats * sizeof(float) != dnnl_memory_desc_get_size(&plain)) {
        snprintf(be->base.err, sizeof be->base.err, "read_tensor: layer %s "
                 "has %zu floats, not %zu", m->layers[L].name,
                 dnnl_memory_desc_get_size(&plain) / sizeof(float), nfloats);
        return -EINVAL;
    }
    if (!grad && c->fold && c->fd.mean) { /* written out when read */
        int r = be->cl[L].root, C = c->fd.C;
        const td_layer *bn = &m->layers[r];
        omp_set_num_threads(be->threads);
        td_bn8_apply(td__mem_ptr(be->cl[be->cl[bn->in[0]].root].y),
                     td__mem_ptr(c->y), c->nelem / (size_t)C, C,
                     td__bn_hw(be, r), c->fd.mean, c->fd.a, c->fd.b);
    }
    dnnl_status_t st = td__reorder_now(be, &c->md,
                                       td__mem_ptr(grad ? c->dy : c->y),
                                       &plain, host);
    if (st != dnnl_success)
        return td__cpu_fail(be, st, "read_tensor", m->layers[L].name);
    return 0;
}

static int td__cpu_read_tensor(td_backend *b, enum td_tensor_kind kind,
                               int index, float *host, size_t nfloats)
{
    td__cpu *be = td__be(b);
    const td_model *m = b->model;
    if (kind == TD_T_VALUE || kind == TD_T_GRAD) {
        if (index < 0 || index >= m->nlayers)
            return -EINVAL;
        return td__read_act(be, index, kind == TD_T_GRAD, host, nfloats);
    }
    if (index < 0 || index >= m->nparams || nfloats != m->params[index].count)
        return -EINVAL;
    const float *src = kind == TD_T_PARAM ? be->params : be->grads;
    memcpy(host, src + td__param_off(m, index), nfloats * sizeof *host);
    return 0;
}

static int td__cpu_write_param(td_backend *b, int index, const float *host,
                               size_t nfloats)
{
    td__cpu *be = td__be(b);
    const td_model *m = b->model;
    if (index < 0 || index >= m->nparams || nfloats != m->params[index].count)
        return -EINVAL;
    memcpy(be->params + td__param_off(m, index), host,
           nfloats * sizeof *host);
    be->weights_dirty = 1;
    return 0;
}

/* ---- events: the CPU has finished by the time it records ---------------- */

static td_event *td__cpu_event_create(td_backend *b)
{
    return calloc(1, sizeof(td_event));
}

static void td__cpu_event_destroy(td_backend *b, td_event *ev) { free(ev); }

static int td__cpu_event_record(td_backend *b, td_event *ev)
{
    ev->t = td_now_ns();
    ev->recorded = 1;
    return 0;
}

static int td__cpu_event_query(td_backend *b, td_event *ev)
{
    return ev->recorded ? 1 : 0;
}

static int td__cpu_event_sync(td_backend *b, td_event *ev)
{
    return ev->recorded ? 0 : -EINVAL;
}

static int td__cpu_event_elapsed(td_backend *b, td_event *a, td_event *e,
                                 int64_t *ns)
{
    if (!a->recorded || !e->recorded)
        return -EINVAL;
    *ns = e->t - a->t;
    return 0;
}

static int td__cpu_sync(td_backend *b)
{
    dnnl_stream_wait(td__be(b)->strm);
    return 0;
}

static void td__cpu_destroy(td_backend *b)
{
    td__cpu *be = td__be(b);
    td__cpu_unplan(be);
    if (be->strm)
        dnnl_stream_destroy(be->strm);
    if (be->eng)
        dnnl_engine_destroy(be->eng);
    free(be->params);
    free(be->grads);
    free(be->slots);
    free(be->state);
    free(be->pixels);
    free(be->labels);
    free(be->xin);
    free(be->choice);
    free(be);
}

static const td_backend_ops td__cpu_ops = {
    .name = "cpu",
    .destroy = td__cpu_destroy,
    .upload = td__cpu_upload,
    .train_step = td__cpu_train_step,
    .eval_step = td__cpu_eval_step,
    .read_stats = td__cpu_read_stats,
    .snapshot = td__cpu_snapshot,
    .restore = td__cpu_restore,
    .read_tensor = td__cpu_read_tensor,
    .write_param = td__cpu_write_param,
    .event_create = td__cpu_event_create,
    .event_destroy = td__cpu_event_destroy,
    .event_record = td__cpu_event_record,
    .event_query = td__cpu_event_query,
    .event_sync = td__cpu_event_sync,
    .event_elapsed_ns = td__cpu_event_elapsed,
    .sync = td__cpu_sync,
    .set_loss_scale = td__cpu_set_loss_scale,
    .plan_get = td__cpu_plan_get,
    .plan_set = td__cpu_plan_set,
};

static int td__cpu_alloc(td__cpu *be)
{
    const td_model *m = be->base.model;
    const td_shape in = m->layers[0].out;
    size_t pc = m->param_count, sc = td_model_state_count(m);
    be->nslots = (size_t)td_optim_slots(&be->base.cfg.optim);
    be->params = malloc(pc * sizeof(float));
    be->grads = calloc(pc, sizeof(float));
    be->slots = be->nslots ? calloc(pc * be->nslots, sizeof(float)) : NULL;
    be->state = malloc((sc ? sc : 1) * sizeof(float));
    be->pixels = calloc((size_t)be->batch * in.c * in.h * in.w, 1);
    be->labels = calloc((size_t)be->batch, sizeof *be->labels);
    if (td__is_bf16(be))
        be->xin = malloc((size_t)be->batch * in.c * in.h * in.w *
                         sizeof(float));
    if (!be->params || !be->grads || (be->nslots && !be->slots) ||
        !be->state || !be->pixels || !be->labels ||
        (td__is_bf16(be) && !be->xin))
        return -ENOMEM;
    td_model_init_params(m, be->base.cfg.seed, be->params);
    float *s = be->state;
    for (int i = 0; i < m->nstate; i++)
        for (size_t j = 0; j < m->state[i].count; j++)
            *s++ = m->state[i].init;
    for (int c = 0; c < in.c; c++)
        td_normalize_coeffs(be->base.cfg.mean[c], be->base.cfg.std[c],
                            &be->nscale[c], &be->nbias[c]);
    be->weights_dirty = 1;
    return 0;
}

static int td__cpu_check(const td_model *m, const td_backend_config *cfg,
                         char *err, size_t errcap)
{
    if (cfg->dtype == TD_BF16 && !td_cpu_caps_get()->bf16) {
        char d[256];
        td_cpu_caps_describe(td_cpu_caps_get(), d, sizeof d);
        snprintf(err, errcap, "cpu backend: bf16 needs AVX512_BF16 or "
                 "AMX-BF16 used by oneDNN; this CPU: %s", d);
        return TD_E_NOTSUP;
    }
    if (cfg->dtype != TD_F32 && cfg->dtype != TD_BF16) {
        snprintf(err, errcap, "cpu backend: compute type %d: the cpu "
                 "backend computes in fp32 or bf16 (fp16 is the cuda "
                 "backend's)", (int)cfg->dtype);
        return TD_E_NOTSUP;
    }
    if (cfg->threads < 0 || cfg->threads > 1024) {
        snprintf(err, errcap, "threads: must be 0..1024");
        return -EINVAL;
    }
    return td_backend_check_config(m, cfg, err, errcap);
}

int td_backend_cpu_create(const td_model *model, const td_backend_config *cfg,
                          td_backend **out, char *err, size_t errcap)
{
    td__cpu *be = NULL;
    int rc = td__cpu_check(model, cfg, err, errcap);
    *out = NULL;
    if (rc)
        return rc;
    be = calloc(1, sizeof *be);
    if (!be)
        return -ENOMEM;
    be->base.ops = &td__cpu_ops;
    be->base.model = model;
    be->base.cfg = *cfg;
    be->ls = (td_ls_state){cfg->loss_scale, 0, 0};
    be->batch = cfg->batch;
    be->adt = cfg->dtype == TD_BF16 ? dnnl_bf16 : dnnl_f32;
    be->esize = cfg->dtype == TD_BF16 ? sizeof(td_bf16) : sizeof(float);
    /* auto: OMP_NUM_THREADS when set (read here: an earlier job's
     * omp_set_num_threads on this thread must not decide), else one per
     * CPU */
    const char *ont = getenv("OMP_NUM_THREADS");
    int env_threads = ont ? atoi(ont) : 0;
    be->threads = cfg->threads      ? cfg->threads
                  : env_threads > 0 ? env_threads
                                    : omp_get_num_procs();
    omp_set_num_threads(be->threads);
    if ((rc = td__cpu_alloc(be)))
        goto fail;
    if (dnnl_engine_create(&be->eng, dnnl_cpu, 0) != dnnl_success ||
        dnnl_stream_create(&be->strm, be->eng, dnnl_stream_default_flags) !=
            dnnl_success) {
        snprintf(be->base.err, sizeof be->base.err, "oneDNN: no CPU engine");
        rc = TD_E_DEVICE;
        goto fail;
    }
    if (!(be->choice = calloc((size_t)model->nlayers, 1))) {
        rc = -ENOMEM;
        goto fail;
    }
    if ((rc = td__cpu_plan(be)) || (rc = td__cpu_tune(be)))
        goto fail;
    *out = &be->base;
    return 0;
fail:
    snprintf(err, errcap, "%s", rc == -ENOMEM ? "out of memory"
                                              : be->base.err);
    td__cpu_destroy(&be->base);
    return rc;
}
