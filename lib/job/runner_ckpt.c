/* runner_ckpt.c - the runner's checkpoints: the snapshot a step boundary
 * hands to the writer thread (one copy, straight into the checkpoint
 * buffer, two buffers so one can be filled while the other is written),
 * and the resume from the newest valid checkpoint.  The buffers are
 * page-locked by the backend when it can (CUDA: cudaHostRegister), so the
 * snapshot's device-to-host copy runs while training goes on; the event
 * recorded after it goes with the snapshot, and the writer thread waits
 * for it (issue 14 finding 8).
 * Never: waits for the disk, or for a snapshot's copy, on the trainer
 * thread. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/fscred.h"
#include "base/error.h"
#include "base/fscred.h"
#include "base/log.h"
#include "job/finetune.h"
#include "job/modelmeta.h"
#include "job/runner_int.h"
#include "store/weights.h"


static const char *td__slot_name(const td_optim_config *o, int slot)
{
    if (o->type == TD_OPT_ADAMW)
        return slot == 0 ? "exp_avg" : "exp_avg_sq";
    return "momentum_buffer";
}

/* Walks the snapshot's tensors in the flat layout of backend.h: calls fn
 * with each tensor's name, dims and offset (in floats). */
typedef int (*td__tensor_fn)(void *u, const char *name, int ndim,
                             const int64_t *dims, size_t off, size_t count);

static int td__walk(const td_runner *r, td__tensor_fn fn, void *u)
{
    const td_model *m = r->model;
    td_optim_config oc;
    td__runner_optim(r->spec, &oc);
    int slots = td_optim_slots(&oc);
    size_t off = 0;
    char name[256];
    int rc;
    for (int s = -1; s < slots; s++) {
        for (int i = 0; i < m->nparams; i++) {
            const td_param *p = &m->params[i];
            int64_t dims[4];
            for (int d = 0; d < p->ndims; d++)
                dims[d] = p->dims[d];
            if (s < 0)
                snprintf(name, sizeof name, "%s", p->name);
            else
                snprintf(name, sizeof name, "optimizer.%s.%s",
                         td__slot_name(&oc, s), p->name);
            if ((rc = fn(u, name, p->ndims, dims, off, p->count)))
                return rc;
            off += p->count;
        }
    }
    for (int i = 0; i < m->nstate; i++) {
        int64_t dim = (int64_t)m->state[i].count;
        if ((rc = fn(u, m->state[i].name, 1, &dim, off, m->state[i].count)))
            return rc;
        off += m->state[i].count;
    }
    return off == r->snap_floats ? 0 : -EINVAL;
}

/* Adds each tensor to the snapshot; the snapshot packs tensors back to back
 * in the flat layout's order, so the trainer can then write the whole
 * flat snapshot into it with one copy. */
typedef struct td__fill {
    td_ckpt_snapshot *snap;
    float *base;       /* where the first tensor landed */
    int contiguous;
} td__fill;

static int td__fill_one(void *u, const char *name, int ndim,
                        const int64_t *dims, size_t off, size_t count)
{
    td__fill *f = u;
    void *dst;
    int rc = td_ckpt_snapshot_add(f->snap, name, TD_DT_F32, ndim, dims, &dst);
    (void)count;
    if (rc)
        return rc;
    if (!f->base)
        f->base = dst;
    if ((float *)dst != f->base + off)
        f->contiguous = 0;
    return 0;
}

int td__runner_meta(td_runner *r, char *err, size_t errcap)
{
    const td_job_spec *s = r->spec;
    const td_model *m = r->model;
    td_augment aug[TD_AUG_MAX];
    int naug = 0, rc;
    float mean[4] = {0}, std[4] = {1, 1, 1, 1};
    const char **names = calloc((size_t)m->classes, sizeof *names);
    td_model_meta meta;
    char e[256];
    if (!names)
        return -ENOMEM;
    for (int k = 0; r->train && k < m->classes; k++)
        names[k] = td_pipeline_class_name(r->train, k);
    for (int c = 0; c < s->input.channels && c < 4; c++) {
        mean[c] = (float)s->input.mean[c];
        std[c] = (float)s->input.std[c];
    }
    if ((rc = td_runner_augments(s, aug, &naug, e, sizeof e))) {
        snprintf(err, errcap, "input.augment: %s", e);
    } else if ((rc = td_model_meta_init(&meta, r->graph, m->layers[0].out,
                                        m->classes, names, mean, std, aug,
                                        naug)) == 0) {
        if (!(r->meta_json = td_model_meta_to_json(&meta)))
            rc = -ENOMEM;
        td_model_meta_free(&meta);
    }
    free(names);
    return rc;
}

int td__runner_init(td_runner *r, char *err, size_t errcap)
{
    const td_model *m = r->model;
    char report[1200];
    int rc;
    if (r->spec->init.n > 1) {
        snprintf(err, errcap, "init: one file, not %d", r->spec->init.n);
        return TD_E_SPEC;
    }
    if (!r->flat && !(r->flat = malloc(r->snap_floats * sizeof(float))))
        return -ENOMEM;
    /* The fresh start (seeded init, zero optimizer state, 0/1 running
     * statistics), then what the file has on top. */
    if ((rc = td_trainer_snapshot(r->trainer, r->flat, r->snap_floats)))
        return rc;
    float *state = r->flat + (r->snap_floats - td_model_state_count(m));
    /* The file is the submitter's: read with its rights (fscred.h), so a
     * path swapped after submit reaches no more than it could read. */
    td_fscred_saved cred;
    if ((rc = td_fscred_enter(r->o.cred, &cred))) {
        snprintf(err, errcap, "init: cannot read as uid %u: %s",
                 (unsigned)r->o.cred->uid, td_strerror(rc));
        return rc;
    }
    rc = td_job_init_weights(m, r->spec->init.v[0], r->flat, state, report,
                             sizeof report, err, errcap);
    td_fscred_leave(&cred);
    if (rc)
        return rc;
    const td_train_position start = {0};
    if ((rc = td_trainer_restore(r->trainer, r->flat, r->snap_floats,
                                 &start))) {
        snprintf(err, errcap, "init: %s: the trainer refused the weights",
                 r->spec->init.v[0]);
        return rc;
    }
    td_logf(TD_LOG_INFO, r->o.job, "%s", report);
    return 0;
}

/* best.safetensors: a hard link to the checkpoint at the best validation
 * metric, replaced atomically; pruning the ckpt-* name leaves it. */
static void td__link_best(td_runner *r, const char *path, double value)
{
    char tmp[4300], best[4300];
    snprintf(best, sizeof best, "%s/best.safetensors", r->o.ckpt_dir);
    snprintf(tmp, sizeof tmp, "%s/best.safetensors.tmp", r->o.ckpt_dir);
    unlink(tmp);
    if (link(path, tmp) != 0 || rename(tmp, best) != 0) {
        td_logf(TD_LOG_WARN, r->o.job, "keep_best: cannot link %s as %s: %s",
                path, best, strerror(errno));
        unlink(tmp);
        return;
    }
    td_logf(TD_LOG_INFO, r->o.job, "best checkpoint so far (%s %.4f): %s",
            r->spec->checkpoint.best_metric == 1 ? "val_acc" : "val_loss",
            value, best);
}

/* The backend's kernel choices (a measured CPU plan's) as
 * "traind.plan", so a resume computes with them (td__plan_resume). */
static char *td__plan_text(td_runner *r)
{
    size_t cap = (size_t)r->model->nlayers + 64;
    char *t = malloc(cap);
    if (t && td_backend_plan_get(td_trainer_backend(r->trainer), t, cap)) {
        free(t);
        t = NULL;
    }
    return t;
}

static void td__plan_meta(td_runner *r, json_t *meta)
{
    char *t = td__plan_text(r);
    if (t)
        json_object_set_new(meta, "traind.plan", json_string(t));
    free(t);
}

/* A checkpoint's kernel choices planned again (before its state is
 * restored); where they cannot be (another CPU, an environment switch)
 * the job goes on with this plan's, not bit for bit the run that
 * stopped, and says so. */
static void td__plan_resume(td_runner *r, const char *want, const char *path)
{
    char *now = td__plan_text(r);
    td_backend *be = td_trainer_backend(r->trainer);
    if (!want || !now || strcmp(now, want) == 0) {
        free(now);
        return;
    }
    int rc = td_backend_plan_set(be, want);
    free(now);
    now = td__plan_text(r);
    if (rc)
        td_logf(TD_LOG_WARN, r->o.job, "checkpoint %s: its kernel choices "
                "cannot all be planned here (%s); resuming with %s, so the "
                "results are not bit for bit those of the run that stopped",
                path, be->err, now ? now : "this plan's");
    else
        td_logf(TD_LOG_INFO, r->o.job, "kernel choices from %s: %s", path,
                want);
    free(now);
}

static void td__ckpt_done(void *user, const td_ckpt_result *res)
{
    td_runner *r = user;
    json_t *ev;
    pthread_mutex_lock(&r->res_mu);
    r->ckpt_write_s += (double)res->write_ns / 1e9;
    if (res->status == 0) {
        r->ckpt_written++;
        snprintf(r->last_ckpt, sizeof r->last_ckpt, "%s", res->path);
        if (res->step > r->last_written_step)
            r->last_written_step = res->step;
    } else {
        r->ckpt_failed++;
        snprintf(r->last_ckpt_err, sizeof r->last_ckpt_err, "%s", res->err);
    }
    double best = r->best_at_step;
    pthread_mutex_unlock(&r->res_mu);
    if (res->status == 0 && res->step == atomic_load(&r->best_step))
        td__link_best(r, res->path, best);
    if (res->status == 0) {
        td_logf(TD_LOG_INFO, r->o.job, "checkpoint at step %" PRId64
                " written: %s (%.1f MB in %.2f s)", res->step, res->path,
                (double)res->bytes / 1e6, (double)res->write_ns / 1e9);
        ev = json_pack("{s:b, s:s, s:I, s:I, s:f, s:f}", "ok", 1, "path",
                       res->path, "step", (json_int_t)res->step, "bytes",
                       (json_int_t)res->bytes, "write_s",
                       (double)res->write_ns / 1e9, "queued_s",
                       (double)res->queued_ns / 1e9);
    } else {
        td_logf(TD_LOG_ERROR, r->o.job, "checkpoint at step %" PRId64
                " failed, training goes on: %s", res->step, res->err);
        ev = json_pack("{s:b, s:s, s:I}", "ok", 0, "error", res->err, "step",
                       (json_int_t)res->step);
    }
    if (td_trace_on(r->trace)) {
        int64_t now = td_now_ns();
        td_trace_slice(r->trace, TD_TRACK_WRITER, "checkpoint write",
                       now - res->write_ns, now, res->step);
        td_trace_instant(r->trace, TD_TRACK_WRITER, res->status == 0
                         ? "checkpoint written" : "checkpoint failed", now,
                         NULL, res->step);
    }
    for (int i = 0; i < TD__NSNAP; i++)
        if (res->snap == &r->snap[i])
            atomic_store(&r->snap_busy[i], 0);
    td__runner_emit(r, "checkpoint", ev);
}

static int td__writer(td_runner *r, char *err, size_t errcap)
{
    int rc;
    if (r->writer || !r->o.ckpt_dir)
        return 0;
    /* durable: a crash must not lose the folder with its checkpoints */
    if ((rc = td_mkdir_durable(r->o.ckpt_dir, 0750, NULL)) != 0) {
        snprintf(err, errcap, "cannot create the checkpoint folder %s: %s",
                 r->o.ckpt_dir, td_strerror(rc));
        return rc;
    }
    td_ckpt_writer_config wc = {.dir = r->o.ckpt_dir,
                                .keep = r->spec->checkpoint.keep,
                                .done = td__ckpt_done, .user = r,
                                .job = r->o.job};
    if ((rc = td_ckpt_writer_start(&r->writer, &wc)))
        snprintf(err, errcap, "cannot start the checkpoint writer for %s: "
                 "%s", r->o.ckpt_dir, td_strerror(rc));
    return rc;
}

static void td__skipped(td_runner *r, const td_train_position *pos)
{
    r->ckpt_skipped++;
    td_logf(TD_LOG_WARN, r->o.job, "checkpoint at step %" PRId64
            " skipped: the previous ones are still being written",
            pos->steps);
}

/* On the writer thread: the snapshot's copy has arrived. */
static int td__snap_ready(void *arg, char *err, size_t errcap)
{
    struct td__snap_wait *w = arg;
    int rc = w->be->ops->event_sync(w->be, w->ev);
    if (rc)
        snprintf(err, errcap, "the snapshot's copy from the device failed: "
                 "%s", td_strerror(rc));
    return rc;
}

/* The snapshot into buffer `slot`, enqueued; its event recorded for the
 * writer.  The buffer is page-locked the first time, when the backend
 * can. */
static int td__snap_async(td_runner *r, int slot, float *dst)
{
    td_backend *be = td_trainer_backend(r->trainer);
    struct td__snap_wait *w = &r->snap_wait[slot];
    td_ckpt_snapshot *s = &r->snap[slot];
    int rc;
    w->be = be;
    if (!w->ev && !(w->ev = be->ops->event_create(be)))
        return -ENOMEM;
    if (!w->registered && be->ops->host_register) {
        if (be->ops->host_register(be, s->data, s->cap) == 0)
            w->registered = 1;
        else /* still correct, only synchronous: say why, once */
            td_logf(TD_LOG_WARN, r->o.job, "checkpoint buffer not "
                    "page-locked (%s): snapshots will stall training while "
                    "they copy", be->err);
        if (!w->registered)
            w->registered = -1;
    }
    if ((rc = td_backend_snapshot(be, dst, r->snap_floats)))
        return rc;
    if ((rc = be->ops->event_record(be, w->ev)))
        return rc;
    s->ready = td__snap_ready;
    s->ready_arg = w;
    return 0;
}

void td__runner_ckpt_release(td_runner *r)
{
    for (int i = 0; i < TD__NSNAP; i++) {
        struct td__snap_wait *w = &r->snap_wait[i];
        if (w->ev)
            w->be->ops->event_destroy(w->be, w->ev);
        if (w->registered == 1)
            w->be->ops->host_unregister(w->be, r->snap[i].data);
        memset(w, 0, sizeof *w);
    }
}

/* Snapshots the trainer at pos and hands it to the writer.  Never waits
 * for the disk: with both buffers busy (or the writer's queue full) the
 * checkpoint is not taken, -EBUSY; counted and logged as skipped when
 * count_skip. */
static int td__checkpoint(td_runner *r, const td_train_position *pos,
                          int count_skip)
{
    int rc, slot = -1;
    int64_t t0 = td_now_ns();
    if (!r->o.ckpt_dir)
        return 0;
    td_ckpt_result res = {.step = pos->steps};
    if ((res.status = td__writer(r, res.err, sizeof res.err)) != 0) {
        /* A failed checkpoint like a failed write: logged, counted, sent
         * as a checkpoint event with ok false, and the job's final error
         * (no model saved) says which folder and why. */
        td__ckpt_done(r, &res);
        return res.status;
    }
    for (int i = 0; i < TD__NSNAP && slot < 0; i++)
        if (!atomic_load(&r->snap_busy[i]))
            slot = i;
    if (slot < 0) {
        if (count_skip)
            td__skipped(r, pos);
        return -EBUSY;
    }
    td_ckpt_snapshot *s = &r->snap[slot];
    const td_model *m = r->model;
    int nbn = td_weights_bn_layers(m);
    if (!s->data) {
        size_t bytes = r->snap_floats * sizeof(float) +
                       (size_t)nbn * sizeof(int64_t);
        int tensors = 3 * m->nparams + m->nstate + nbn + 1;
        if ((rc = td_ckpt_snapshot_init(s, bytes, tensors)))
            return rc;
    }
    td_ckpt_snapshot_reset(s);
    /* PyTorch's num_batches_tracked: every training step runs every batch
     * norm in training mode.  First, so the float tensors stay 8-aligned;
     * never read back on resume. */
    for (int L = 1; L < m->nlayers; L++) {
        char name[TD_NAME_MAX + 32];
        int64_t *cnt;
        if (m->layers[L].kind != TD_L_BN)
            continue;
        td_weights_bn_count_name(m, L, name, sizeof name);
        if ((rc = td_ckpt_snapshot_add(s, name, TD_DT_I64, 0, NULL,
                                       (void **)&cnt)))
            return rc;
        *cnt = pos->steps;
    }
    /* This buffer's metadata: the model's keys and the curves of the
     * epochs before pos (their record may not have reached the disk when
     * a kill -9 comes; the resumed job hands them back to the daemon).
     * The buffer is free, so the writer no longer reads its old one. */
    json_decref(r->snap_meta[slot]);
    r->snap_meta[slot] = r->meta_json ? json_deep_copy(r->meta_json)
                                      : json_object();
    if (r->snap_meta[slot] && json_array_size(r->hist) > 0) {
        json_t *h = json_array();
        size_t i;
        json_t *e;
        json_array_foreach(r->hist, i, e)
            if (json_integer_value(json_object_get(e, "epoch")) < pos->epoch)
                json_array_append(h, e);
        char *txt = json_dumps(h, JSON_COMPACT);
        if (txt)
            json_object_set_new(r->snap_meta[slot], "traind.history",
                                json_string(txt));
        free(txt);
        json_decref(h);
    }
    if (r->snap_meta[slot]) {
        /* the epoch's training time so far: a resumed epoch's train_s
         * covers all of it */
        char ts[32];
        snprintf(ts, sizeof ts, "%.17g", pos->ep_train_s);
        json_object_set_new(r->snap_meta[slot], "traind.epoch_train_s",
                            json_string(ts));
        td__runner_ls_meta(r, r->snap_meta[slot]);
        td__plan_meta(r, r->snap_meta[slot]);
    }
    s->extra_meta = r->snap_meta[slot] ? r->snap_meta[slot] : r->meta_json;
    td__fill f = {s, NULL, 1};
    if ((rc = td__walk(r, td__fill_one, &f)))
        return rc;
    if (!f.contiguous) /* the checkpoint format always packs; be safe */
        return -EINVAL;
    if ((rc = td__snap_async(r, slot, f.base)))
        return rc;
    s->meta.spec_hash = td_spec_hash(r->spec);
    s->meta.step = pos->steps;
    s->meta.epoch = pos->epoch;
    s->meta.sampler_pos = pos->step_in_epoch * r->spec->batch_size;
    s->meta.seed = r->spec->seed;
    s->meta.has_epoch_sums = 1;
    s->meta.epoch_loss_sum = pos->ep_loss_sum;
    s->meta.epoch_correct = pos->ep_correct;
    s->meta.epoch_samples = pos->ep_samples;
    atomic_store(&r->snap_busy[slot], 1);
    rc = td_ckpt_writer_submit(r->writer, s);
    if (rc) {
        atomic_store(&r->snap_busy[slot], 0);
        if (count_skip || rc != -EBUSY)
            r->ckpt_skipped++;
        return rc;
    }
    r->last_ckpt_step = pos->steps;
    r->pending_ckpt_ns += td_now_ns() - t0;
    return 0;
}

int td__runner_checkpoint(td_runner *r, const td_train_position *pos)
{
    return td__checkpoint(r, pos, 1);
}

int td__runner_checkpoint_final(td_runner *r, const td_train_position *pos)
{
    int rc = -EBUSY;
    for (int i = 0; i < 6000 && (rc = td__checkpoint(r, pos, 0)) == -EBUSY;
         i++)
        td_sleep_ns(10 * TD_NS_PER_MS);
    if (rc == -EBUSY)
        td__skipped(r, pos);
    return rc;
}

typedef struct td__load {
    td_ckpt_file *f;
    float *flat;
    char *err;
    size_t errcap;
} td__load;

static int td__load_one(void *u, const char *name, int ndim,
                        const int64_t *dims, size_t off, size_t count)
{
    td__load *l = u;
    (void)ndim;
    (void)dims;
    return td_ckpt_file_read(l->f, name, TD_DT_F32, l->flat + off,
                             count * sizeof(float), l->err, l->errcap);
}

void td__runner_resume_open(td_runner *r)
{
    struct stat st;
    r->resume_rc = -ENOENT;
    r->resume_err[0] = 0;
    if (r->o.ckpt_dir && r->o.resume && stat(r->o.ckpt_dir, &st) == 0)
        r->resume_rc = td_ckpt_load_latest(
            r->o.ckpt_dir, &r->resume_f, r->resume_path,
            sizeof r->resume_path, r->resume_err, sizeof r->resume_err);
}

int td__runner_resume_has_plan(const td_runner *r)
{
    return r->resume_f &&
           td_ckpt_file_meta_str(r->resume_f, "traind.plan") != NULL;
}

/* A number of a history entry; NAN when absent or null. */
static double td__hist_num(const json_t *e, const char *key)
{
    json_t *v = json_object_get(e, key);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

/* Restores the newest valid checkpoint, if there is one. */
int td__runner_resume(td_runner *r, char *err, size_t errcap)
{
    char e[512];
    const char *path = r->resume_path;
    td_ckpt_file *f = r->resume_f;
    int rc = r->resume_rc;
    r->resume_f = NULL; /* closed below */
    snprintf(e, sizeof e, "%s", r->resume_err);
    if (rc == -ENOENT) {
        /* the job's own log says so (not only the daemon's): its earlier
         * lives' steps are trained again */
        if (e[0] && !strstr(e, "(0 unusable)"))
            td_logf(TD_LOG_WARN, r->o.job, "no usable checkpoint: %s; the "
                    "job starts again from step 0", e);
        return 0; /* nothing to resume from: start fresh */
    }
    if (rc == 0 && e[0])
        td_logf(TD_LOG_WARN, r->o.job, "checkpoint: %s; resuming from the "
                "older %s", e, path);
    if (rc) {
        snprintf(err, errcap, "checkpoint: %s", e);
        /* Not damage: permission, memory, file descriptors.  The caller
         * must not start the job afresh over it (TD_E_RETRY: the daemon
         * suspends the job, its checkpoints kept). */
        return rc < 0 && rc > -4096 ? TD_E_RETRY : rc;
    }
    const td_ckpt_meta *m = td_ckpt_file_meta(f);
    if (!td_spec_hash_matches(r->spec, m->spec_hash)) {
        snprintf(err, errcap, "checkpoint %s belongs to another job spec "
                 "(hash %016" PRIx64 ", this job's is %016" PRIx64 ")", path,
                 m->spec_hash, td_spec_hash(r->spec));
        td_ckpt_close(f);
        return TD_E_SPEC;
    }
    if (!r->flat && !(r->flat = malloc(r->snap_floats * sizeof(float)))) {
        td_ckpt_close(f);
        return -ENOMEM;
    }
    td__load l = {f, r->flat, e, sizeof e};
    rc = td__walk(r, td__load_one, &l);
    if (rc == -ENOENT && td_ckpt_file_find(f, "stem.weight")) {
        /* Before the zoo took torchvision's names (conv1, layer1.0.conv1,
         * ...), its layers were stem, s1_b1_conv1, ...: refused, not
         * renamed (docs/checkpoints.md). */
        snprintf(e, sizeof e, "written with the zoo's old layer names "
                 "(stem, s1_b1_conv1, ...); this traind names them as "
                 "torchvision does (conv1, layer1.0.conv1, ...) and cannot "
                 "resume it: start the job again");
        rc = TD_E_SPEC;
    }
    /* Without the epoch's sums (a checkpoint from before they were kept)
     * the resumed epoch's train loss covers the steps after the resume. */
    td_train_position pos = {
        .steps = m->step, .epoch = m->epoch,
        .step_in_epoch = m->sampler_pos / r->spec->batch_size,
        .ep_loss_sum = m->has_epoch_sums ? m->epoch_loss_sum : 0,
        .ep_correct = m->has_epoch_sums ? m->epoch_correct : 0,
        .ep_samples = m->has_epoch_sums ? m->epoch_samples : 0};
    const char *ets = td_ckpt_file_meta_str(f, "traind.epoch_train_s");
    double train_s = ets ? strtod(ets, NULL) : 0; /* optional (older) */
    pos.ep_train_s = isfinite(train_s) && train_s > 0 ? train_s : 0;
    int64_t epoch = pos.epoch, steps = pos.steps, in_epoch = pos.step_in_epoch;
    /* The curves of the epochs before the checkpoint (optional: older
     * checkpoints have none). */
    const char *lsm = td_ckpt_file_meta_str(f, "traind.loss_scale");
    char *ls_txt = lsm ? strdup(lsm) : NULL; /* f closes below */
    const char *pm = td_ckpt_file_meta_str(f, "traind.plan");
    char *plan_txt = pm ? strdup(pm) : NULL;
    const char *hist = td_ckpt_file_meta_str(f, "traind.history");
    json_t *h = hist ? json_loads(hist, 0, NULL) : NULL;
    if (hist && !json_is_array(h))
        td_logf(TD_LOG_WARN, r->o.job, "checkpoint %s: traind.history is not "
                "a JSON array; the epochs before it are not restored", path);
    td_ckpt_close(f);
    /* At the end of the job: its final checkpoint, written before the
     * daemon stopped (a kill -9 before the record said completed).  The
     * job is done; td_runner_run trains nothing. */
    int end = rc == 0 && epoch >= r->spec->epochs;
    if (rc == 0 && !end)
        td__plan_resume(r, plan_txt, path);
    if (rc) {
        snprintf(err, errcap, "checkpoint %s: %s", path, e);
    } else if (end) {
        r->resumed_final = 1;
    } else if ((rc = td_trainer_restore(r->trainer, r->flat, r->snap_floats,
                                        &pos))) {
        snprintf(err, errcap, "checkpoint %s: position epoch %" PRId64
                 " step %" PRId64 " does not fit this job", path, epoch,
                 in_epoch);
    }
    if (rc == 0 && !end)
        td__runner_ls_resume(r, ls_txt, path);
    free(ls_txt);
    free(plan_txt);
    if (rc) {
        json_decref(h);
        return rc;
    }
    if (json_is_array(h)) {
        /* the event's copy goes to another thread; r->hist stays here */
        json_decref(r->hist);
        r->hist = h;
        /* the last finished epoch's figures (the metrics endpoint's
         * gauges), as the run that wrote the checkpoint had them */
        json_t *last = json_array_get(h, json_array_size(h) - 1);
        r->ep_train_loss = td__hist_num(last, "train_loss");
        r->ep_train_acc = td__hist_num(last, "train_acc");
        r->ep_val_loss = td__hist_num(last, "val_loss");
        r->ep_val_acc = td__hist_num(last, "val_acc");
        td__runner_emit(r, "history", json_pack("{s:I, s:o}", "epoch",
                                                 (json_int_t)epoch, "history",
                                                 json_deep_copy(h)));
    } else {
        json_decref(h);
    }
    r->last_ckpt_step = steps;
    r->last_written_step = steps; /* it is on disk */
    snprintf(r->last_ckpt, sizeof r->last_ckpt, "%s", path);
    if (td__runner_replay_best(r))
        r->resumed_final = 1; /* early stopping had ended it there */
    if (r->resumed_final) {
        r->resumed_epochs = epoch;
        td_logf(TD_LOG_INFO, r->o.job, "%s is the job's final checkpoint "
                "(step %" PRId64 ", after epoch %" PRId64 "%s), written "
                "before the daemon stopped: nothing is left to train",
                path, steps, epoch, r->early_stopped ? ", early stopping"
                                                     : "");
        return 0;
    }
    td_logf(TD_LOG_INFO, r->o.job, "resumed from %s: step %" PRId64
            ", epoch %" PRId64 ", batch %" PRId64, path, steps, epoch + 1,
            in_epoch);
    return 0;
}
