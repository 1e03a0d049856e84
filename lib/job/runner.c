/* runner.c - one training job from spec to result (see runner.h).
 *
 * Owns: the model, the train and val pipelines, the trainer, the metrics
 * accumulator, the checkpoint writer and two snapshot buffers (one being
 * written, one being filled), and the translation of the job spec into
 * each of their configurations.
 * Checkpoint writing and resume live in runner_ckpt.c, keep_best and
 * early stopping in runner_best.c, loss scaling in runner_lscale.c, timeline recording in runner_trace.c, the shared
 * state in runner_int.h.
 * Never: blocks the trainer on the disk (a checkpoint that finds both
 * buffers busy is skipped and counted), talks to sockets, exits.
 */
#define _GNU_SOURCE
#include "job/finetune.h"
#include "job/runner_int.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "backend/cpu/caps.h"
#include "base/fscred.h"
#include "base/log.h"
#include "input/pipeline.h"
#include "job/jobdata.h"
#include "job/precision.h"
#include "job/train.h"
#include "model/model.h"
#include "obs/metrics.h"
#include "obs/trace.h"
#include "store/checkpoint.h"

/* Metrics windows a short job gets at least after its warm-up (smaller
 * than metrics.window_steps where the run is too short for that many). */
#define TD_RUN_MIN_WINDOWS 5

void td__runner_emit(td_runner *r, const char *kind, json_t *data)
{
    if (r->o.event && data)
        r->o.event(r->o.user, kind, data);
    else
        json_decref(data);
}

/* ---- spec -> configurations ------------------------------------------- */

/* The CPUs this process may run on (its affinity mask), as the daemon
 * counts them when it caps threads and workers at submit. */
static int td__ncpu(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* Maps the spec's augmentation list onto the pipeline's.  A "resize"
 * followed by "center_crop" is torchvision's Resize(s)+CenterCrop(size):
 * the pipeline's center_crop with resize = s. */
int td_runner_augments(const td_job_spec *s, td_augment *out, int *n,
                       char *err, size_t errcap)
{
    int k = 0, resize_side = 0;
    for (int i = 0; i < s->input.n_augment; i++) {
        const td_aug_spec *a = &s->input.augment[i];
        if (k >= TD_AUG_MAX) {
            snprintf(err, errcap, "input.augment: at most %d ops", TD_AUG_MAX);
            return TD_E_SPEC;
        }
        switch (a->op) {
        case TD_SPEC_AUG_RANDOM_RESIZED_CROP:
            td_augment_default(&out[k], TD_AUG_RANDOM_RESIZED_CROP);
            memcpy(out[k].scale, a->scale, sizeof a->scale);
            memcpy(out[k].ratio, a->ratio, sizeof a->ratio);
            break;
        case TD_SPEC_AUG_PAD_CROP:
            td_augment_default(&out[k], TD_AUG_PAD_CROP);
            out[k].pad = a->pad;
            break;
        case TD_SPEC_AUG_RESIZE:
            if (i + 1 < s->input.n_augment &&
                s->input.augment[i + 1].op == TD_SPEC_AUG_CENTER_CROP) {
                resize_side = a->size[0] < a->size[1] ? a->size[0]
                                                      : a->size[1];
                continue;
            }
            td_augment_default(&out[k], TD_AUG_RESIZE);
            break;
        case TD_SPEC_AUG_CENTER_CROP:
            td_augment_default(&out[k], TD_AUG_CENTER_CROP);
            out[k].resize = resize_side;
            break;
        case TD_SPEC_AUG_FLIP:
            td_augment_default(&out[k], TD_AUG_FLIP);
            out[k].p = a->p;
            break;
        case TD_SPEC_AUG_COLOR_JITTER:
            td_augment_default(&out[k], TD_AUG_COLOR_JITTER);
            out[k].brightness = a->brightness;
            out[k].contrast = a->contrast;
            out[k].saturation = a->saturation;
            break;
        }
        k++;
    }
    *n = k;
    return td_augment_validate(out, k, err, errcap);
}

/* A pipeline over ds (taken, even on failure; jobdata.c opened it). */
static int td__pipeline(td_runner *r, td_dataset *ds, int train,
                        td_pipeline **out, char *err, size_t errcap)
{
    const td_job_spec *s = r->spec;
    td_pipeline_config pc;
    char e[512];
    int rc;
    td_pipeline_config_default(&pc);
    pc.dataset = ds;
    pc.size[0] = s->input.size[0];
    pc.size[1] = s->input.size[1];
    pc.channels = s->input.channels;
    if ((rc = td_runner_augments(s, pc.augment, &pc.n_augment, e,
                                  sizeof e))) {
        snprintf(err, errcap, "input.augment: %s", e);
        td_dataset_close(ds);
        return rc;
    }
    pc.batch_size = s->batch_size;
    /* auto: one per CPU, at most the pipeline's limit (a 128-CPU
     * machine would otherwise fail every auto job when it starts) */
    pc.workers = s->input.workers > 0 ? s->input.workers
                 : td__ncpu() < TD_PIPELINE_MAX_WORKERS
                     ? td__ncpu()
                     : TD_PIPELINE_MAX_WORKERS;
    pc.prefetch = s->input.prefetch > 0 ? s->input.prefetch : 4;
    /* Room for the autotuner to grow the ring.  The slots are allocated up
     * front, so at most 16 of them and at most 512 MiB in all. */
    if (s->input.prefetch == 0) {
        size_t slot = (size_t)s->batch_size * (size_t)s->input.size[0] *
                      (size_t)s->input.size[1] * (size_t)s->input.channels;
        size_t fit = slot ? ((size_t)512 << 20) / slot : 16;
        pc.max_prefetch = fit > 16 ? 16 : fit < 4 ? 4 : (int)fit;
    }
    pc.seed = s->seed;
    pc.max_bad_ratio = s->max_bad_ratio;
    pc.layout = TD_LAYOUT_NHWC;
    pc.train = train;
    pc.drop_last = train;
    pc.job = r->o.job;
    /* On a GPU the batch slots are pinned, so copies are truly async;
     * made with the job's GPU current (not GPU 0's context for cuda:1) */
    const td_gpu_backend *gpu = td_backend_gpu();
    size_t gn = gpu ? strlen(gpu->name) : 0;
    if (gpu && r->o.device && strncmp(r->o.device, gpu->name, gn) == 0)
        pc.alloc = gpu->pinned_allocator(r->o.device[gn] == ':'
                                             ? atoi(r->o.device + gn + 1)
                                             : 0);
    pc.trace = train ? r->trace : NULL;
    pc.cred = r->o.cred;
    rc = td_pipeline_create(&pc, out, e, sizeof e);
    if (rc == -ENOMEM) /* the batch slots: what the spec sized */
        snprintf(err, errcap, "input.size: %s (batch_size %d x input.size "
                 "%dx%d x input.channels %d per slot); lower input.size, "
                 "batch_size or input.prefetch", e[0] ? e : "out of memory",
                 s->batch_size, s->input.size[0], s->input.size[1],
                 s->input.channels);
    else if (rc)
        snprintf(err, errcap, "data.%s: %s", train ? "train" : "val",
                 e[0] ? e : td_strerror(rc));
    return rc;
}

void td__runner_optim(const td_job_spec *s, td_optim_config *o)
{
    td_optim_defaults(o, s->optimizer.type);
    o->lr = s->optimizer.lr;
    o->momentum = s->optimizer.momentum;
    o->nesterov = s->optimizer.nesterov;
    o->weight_decay = s->optimizer.weight_decay;
    o->beta1 = s->optimizer.betas[0];
    o->beta2 = s->optimizer.betas[1];
    o->eps = s->optimizer.eps;
    o->schedule.type = s->optimizer.schedule.type;
    o->schedule.warmup_steps = s->optimizer.schedule.warmup_steps;
    o->schedule.step_size = s->optimizer.schedule.step_size;
    o->schedule.gamma = s->optimizer.schedule.gamma;
    o->schedule.min_lr = s->optimizer.schedule.min_lr;
}

static int td__model(td_runner *r, char *err, size_t errcap)
{
    const td_job_spec *s = r->spec;
    td_shape in = {s->input.channels, s->input.size[0], s->input.size[1]};
    int classes = s->data.classes;
    char e[512];
    int rc = 0;
    if (classes == 0)
        classes = r->train ? td_pipeline_classes(r->train) : 10;
    if (json_is_string(s->model)) {
        /* A zoo name is the daemon's file; a .json path is the user's and
         * is read with the user's rights. */
        const char *name = json_string_value(s->model);
        size_t n = strlen(name);
        int users = n > 5 && strcmp(name + n - 5, ".json") == 0;
        td_fscred_saved saved;
        if ((rc = td_fscred_enter(users ? r->o.cred : NULL, &saved))) {
            snprintf(err, errcap, "model: cannot read as uid %u: %s",
                     (unsigned)r->o.cred->uid, td_strerror(rc));
            return rc;
        }
        rc = td_model_load_def(r->o.models_dir ? r->o.models_dir : ".", name,
                               &r->graph, e, sizeof e);
        td_fscred_leave(&saved);
    } else {
        r->graph = json_incref((json_t *)s->model);
    }
    if (rc == 0)
        rc = td_model_build(r->graph, in, classes, &r->model, e, sizeof e);
    if (rc) /* the model's messages name their path ("model...") */
        snprintf(err, errcap, "%s", e);
    else if ((rc = td__runner_meta(r, err, errcap)) == 0)
        rc = td_job_lr_mult(r->model, s, &r->lr_mult, err, errcap);
    if (rc == 0)
        rc = td_job_bn_eval(r->model, s, r->lr_mult, &r->bn_eval, err,
                            errcap);
    return rc;
}

/* The job's precision on its device, logged with what the CPU offers. */
static int td__runner_precision(td_runner *r, enum td_dtype *dt, char *err,
                                size_t errcap)
{
    const char *dev = r->o.device ? r->o.device : "cpu";
    int rc = td_precision_resolve(r->spec->precision, dev, NULL, dt, err,
                                  errcap);
    if (rc)
        return rc;
    char caps[256] = "";
    const char *got = *dt == TD_BF16 ? "bf16" : *dt == TD_F16 ? "fp16"
                                                               : "fp32";
    if (strncmp(dev, "cuda", 4) != 0)
        td_cpu_caps_describe(td_cpu_caps_get(), caps, sizeof caps);
    else if (r->spec->precision == TD_PREC_TF32)
        got = "tf32";
    else if (r->spec->precision == TD_PREC_AUTO) /* the backend logs which */
        got = "tf32 on compute capability 8.0 and newer, else fp32";
    td_logf(TD_LOG_INFO, r->o.job, "precision: %s (asked %s) on %s%s%s",
            got, td_precision_name(r->spec->precision), dev,
            *caps ? ": " : "", caps);
    return 0;
}

int td_runner_create(const td_runner_opts *opts, td_runner **out, char *err,
                     size_t errcap)
{
    td_runner *r = calloc(1, sizeof *r);
    const td_job_spec *s = opts->spec;
    int rc;
    if (!r)
        return -ENOMEM;
    r->o = *opts;
    r->spec = s;
    pthread_mutex_init(&r->res_mu, NULL);
    r->last_ckpt_step = -1;
    r->cur_loss = r->ep_train_loss = r->ep_train_acc = NAN;
    r->ep_val_loss = r->ep_val_acc = NAN;
    r->es_best_epoch = -1;
    atomic_store(&r->best_step, -1);
    r->last_written_step = -1;
    if ((rc = td_trace_create(&r->trace, TD__TRACE_CAP))) {
        snprintf(err, errcap, "trace: %s", td_strerror(rc));
        goto fail;
    }
    int synthetic = s->input.source == TD_SOURCE_SYNTHETIC;
    if (!synthetic) { /* val mapped to train's classes by name, or split */
        td_job_data jd;
        rc = td_job_data_open_logged(s, r->o.cred, opts->job, &jd, err,
                                     errcap);
        if (rc && r->o.cred && r->o.cred->set &&
            strstr(err, strerror(EACCES))) { /* say whose rights */
            size_t n = strlen(err);
            snprintf(err + n, errcap > n ? errcap - n : 0, " (not readable "
                     "by uid %u)", (unsigned)r->o.cred->uid);
        }
        if (rc)
            goto fail;
        if (jd.note[0])
            td_logf(s->data.val.n ? TD_LOG_WARN : TD_LOG_INFO, opts->job,
                    "%s", jd.note);
        if (jd.left_out[0])
            td_logf(TD_LOG_WARN, opts->job, "%s", jd.left_out);
        td_dataset *val = jd.val;
        rc = td__pipeline(r, jd.train, 1, &r->train, err, errcap);
        if (rc)
            td_dataset_close(val);
        else if (val)
            rc = td__pipeline(r, val, 0, &r->val, err, errcap);
        if (rc)
            goto fail;
    }
    r->tune_workers = s->input.workers == 0;
    r->tune_prefetch = s->input.prefetch == 0;
    if ((rc = td__model(r, err, errcap)))
        goto fail;

    td_train_config tc;
    memset(&tc, 0, sizeof tc);
    tc.model = r->model;
    tc.device = opts->device ? opts->device : "cpu";
    tc.backend.batch = s->batch_size;
    tc.backend.threads = s->threads > 0 ? s->threads : 0;
    if ((rc = td__runner_precision(r, &tc.backend.dtype, err, errcap)))
        goto fail;
    tc.backend.fp32_math = td_precision_fp32_math(s->precision);
    for (int c = 0; c < s->input.channels && c < 4; c++) {
        tc.backend.mean[c] = (float)s->input.mean[c];
        tc.backend.std[c] = (float)s->input.std[c];
    }
    tc.backend.seed = s->seed;
    tc.backend.label_smoothing = (float)s->label_smoothing;
    tc.backend.lr_mult = r->lr_mult;
    tc.backend.bn_eval = r->bn_eval;
    tc.backend.warmup = 1; /* CUDA: first-use allocations happen at create */
    tc.backend.deterministic = s->deterministic;
    /* CPU bf16: kernels chosen by measurement unless the job wants the
     * same plan on every run (a resume keeps its checkpoint's) */
    tc.backend.plan = s->deterministic ? TD_PLAN_FIXED : TD_PLAN_MEASURE;
    td__runner_resume_open(r);
    if (tc.backend.plan == TD_PLAN_MEASURE && td__runner_resume_has_plan(r))
        tc.backend.plan = TD_PLAN_FIXED; /* td__runner_resume plans its */
    td__runner_ls_config(r, &tc.backend); /* runner_lscale.c */
    tc.backend.cuda_graphs = s->cuda_graphs;
    tc.backend.log_job = (long)r->o.job;
    td__runner_optim(s, &tc.backend.optim);
    tc.epochs = s->epochs;
    tc.synthetic = synthetic;
    tc.steps_per_epoch = synthetic ? (opts->synthetic_steps > 0
                                          ? opts->synthetic_steps
                                          : TD_JOB_SYNTHETIC_STEPS)
                                   : td_pipeline_batches_per_epoch(r->train);
    /* A job shorter than warm-up + one window would end without a
     * window, so without samples/s or a verdict: a sixth of it warms up.
     * And a short job gets at least TD_RUN_MIN_WINDOWS windows after its
     * warm-up (smaller ones), so that its curves have points and watch a
     * verdict early: 198 steps with the defaults closed one window, at
     * step 120, and plotted one point of throughput and windowed loss. */
    int64_t all = (int64_t)s->epochs * tc.steps_per_epoch;
    int warm = s->metrics.warmup_steps, win = s->metrics.window_steps;
    if (tc.steps_per_epoch >= 1 &&
        warm + (int64_t)TD_RUN_MIN_WINDOWS * win > all) {
        if (warm + win > all)
            warm = (int)(all / 6 < warm ? all / 6 : warm);
        int64_t fit = (all - warm) / TD_RUN_MIN_WINDOWS;
        win = (int)(fit < 1 ? 1 : fit < win ? fit : win);
        td_logf(TD_LOG_INFO, opts->job, "%lld steps in all: warm-up %d and "
                "windows of %d steps", (long long)all, warm, win);
    }
    tc.warmup_steps = warm;
    if (tc.steps_per_epoch < 1) {
        snprintf(err, errcap, "data.train: %zu samples, fewer than one batch "
                 "of %d", td_pipeline_dataset_size(r->train), s->batch_size);
        rc = TD_E_SPEC;
        goto fail;
    }
    r->steps_per_epoch = tc.steps_per_epoch;
    rc = td_trainer_create(&tc, &r->trainer, err, errcap);
    if (rc == TD_E_NOTSUP && tc.backend.dtype == TD_BF16 &&
        s->precision == TD_PREC_AUTO) {
        /* auto: bf16 only where the device does the whole model well */
        td_logf(TD_LOG_INFO, r->o.job, "precision: fp32 (auto; %s)", err);
        tc.backend.dtype = TD_F32;
        rc = td_trainer_create(&tc, &r->trainer, err, errcap);
    }
    if (rc) {
        if (rc == -ENOMEM)
            snprintf(err, errcap, "%s: cannot allocate the model (%zu "
                     "parameters, %d classes) with its optimizer state and "
                     "the activations of batch_size %d",
                     s->data.classes > 1000 ? "data.classes" : "model",
                     r->model->param_count, r->model->classes, s->batch_size);
        goto fail;
    }
    td_metrics_config mc = {
        warm, win, 8,
        td_precision_advice(r->o.device ? r->o.device : "cpu",
                            tc.backend.dtype)};
    td_eta_init(&r->eta, all, tc.steps_per_epoch, s->epochs,
                r->val ? td_pipeline_batches_per_epoch(r->val) : 0);
    r->win_warm = warm;
    r->win_steps = win;
    if ((rc = td_metrics_create(&r->metrics, &mc))) {
        snprintf(err, errcap, "metrics: %s", td_strerror(rc));
        goto fail;
    }
    r->snap_floats = td_trainer_snapshot_floats(r->trainer);
    if (s->init.n && (rc = td__runner_init(r, err, errcap)))
        goto fail;
    *out = r;
    return 0;
fail:
    td_runner_free(r);
    return rc;
}

/* ---- Prometheus snapshots --------------------------------------------- */

static void td__snapshot(td_runner *r, int64_t epoch)
{
    td_prom_job pj;
    if (!r->o.snapshot)
        return;
    memset(&pj, 0, sizeof pj);
    pj.job = r->o.job;
    snprintf(pj.device, sizeof pj.device, "%s",
             r->o.device ? r->o.device : "cpu");
    td_metrics_get_counters(r->metrics, &pj.mc);
    pj.steps_planned = td_runner_steps_total(r);
    pj.epoch = epoch;
    if (r->train) {
        td_pipeline_stats ps;
        td_pipeline_stats_get(r->train, &ps);
        pj.has_pipeline = 1;
        pj.workers = ps.workers;
        pj.prefetch = ps.prefetch;
        pj.bad_samples = ps.bad_samples;
        pj.decoded_samples = ps.samples;
        pj.decoded_bytes = ps.decoded_bytes;
        pj.read_s = (double)ps.read_ns / 1e9;
        pj.decode_s = (double)ps.decode_ns / 1e9;
        pj.augment_s = (double)ps.augment_ns / 1e9;
        pj.slot_wait_s = (double)ps.slot_wait_ns / 1e9;
    }
    pthread_mutex_lock(&r->res_mu);
    pj.ckpt_written = r->ckpt_written;
    pj.ckpt_failed = r->ckpt_failed;
    pj.ckpt_write_s = r->ckpt_write_s;
    pthread_mutex_unlock(&r->res_mu);
    pj.ckpt_skipped = r->ckpt_skipped;
    pj.lr = r->last_lr;
    pj.train_loss = r->cur_loss;
    pj.epoch_train_loss = r->ep_train_loss;
    pj.epoch_train_acc = r->ep_train_acc;
    pj.val_loss = r->ep_val_loss;
    pj.val_acc = r->ep_val_acc;
    pj.has_loss_scale = r->ls_scale > 0;
    pj.loss_scale = r->ls_scale;
    pj.skipped_steps = r->ls_skipped;
    r->snap_last_ns = td_now_ns();
    r->o.snapshot(r->o.user, &pj);
}

/* ---- trainer callbacks ------------------------------------------------ */

static json_t *td__with_progress(td_runner *r, json_t *o, int64_t epoch)
{
    if (!o)
        return NULL;
    json_object_set_new(o, "epoch", json_integer(epoch));
    json_object_set_new(o, "epochs_total", json_integer(r->spec->epochs));
    json_object_set_new(o, "steps_total",
                        json_integer(r->spec->epochs * r->steps_per_epoch));
    json_object_set_new(o, "batch_size", json_integer(r->spec->batch_size));
    json_object_set_new(o, "lr", json_real(r->last_lr));
    double eta = td_eta_left(&r->eta, r->eta_done, epoch - 1);
    if (eta >= 0) /* with the evaluations still to come (eta.h) */
        json_object_set_new(o, "eta_s", json_real(eta));
    if (!json_object_get(o, "loss") && isfinite(r->last_loss))
        json_object_set_new(o, "loss", json_real(r->last_loss));
    td__runner_ls_event(r, o);
    return o;
}

/* The input autotuner, once per metrics window: when the trainer waited
 * for a batch not yet made (5% of the window or more), add a decode
 * worker, or once all are busy a batch of prefetch; when it never waited
 * for three windows in a row and the workers spent time blocked on a
 * full ring, take a worker away (they were idle: cores are better left
 * to compute).  Only for the settings the job left "auto". */
static void td__autotune(td_runner *r, const td_metrics_counters *mc,
                         json_t *window)
{
    td_pipeline_stats ps;
    if (!r->train)
        return;
    td_pipeline_stats_get(r->train, &ps);
    int64_t now = td_now_ns();
    int64_t slot_wait = ps.slot_wait_ns - r->tune_slot_wait_ns;
    int64_t starved = ps.starved_ns - r->tune_starved_ns;
    int64_t span = r->tune_at_ns ? now - r->tune_at_ns : 0;
    r->tune_slot_wait_ns = ps.slot_wait_ns;
    r->tune_starved_ns = ps.starved_ns;
    r->tune_at_ns = now;
    int workers = ps.workers, prefetch = ps.prefetch;
    const char *why = NULL;
    /* The share of the window the trainer waited for a batch that was
     * not made yet.  input_wait_ratio also holds lock hand-offs and the
     * trainer's own preemption on a loaded machine, which no worker count
     * changes. */
    double starved_ratio = span > 0 ? (double)starved / (double)span : 0;
    /* A worker more only helps when every worker was busy all window: if
     * some idled on a full ring, the trainer's waits came from bursts (a
     * worker descheduled on a loaded machine, an odd slow image), which
     * a deeper ring absorbs and more threads would make worse. */
    if (span <= 0) {
        /* the first window: nothing to compare with yet */
    } else if (starved_ratio >= 0.05) {
        r->tune_quiet_windows = 0;
        if (slot_wait == 0 && r->tune_workers &&
            td_pipeline_set_workers(r->train, workers + 1) == 0) {
            workers++;
            why = "the trainer waited for input";
        } else if (r->tune_prefetch &&
                   td_pipeline_set_prefetch(r->train, prefetch + 1) == 0) {
            prefetch++;
            why = slot_wait > 0 ? "the trainer waited for input in bursts"
                                : "the trainer waited for input; all "
                                  "workers are busy";
        }
    } else if (starved_ratio < 0.01 && slot_wait > 0) {
        if (++r->tune_quiet_windows >= 3 && r->tune_workers && workers > 1 &&
            td_pipeline_set_workers(r->train, workers - 1) == 0) {
            workers--;
            r->tune_quiet_windows = 0;
            why = "no input wait and the workers idled on a full ring";
        }
    } else {
        r->tune_quiet_windows = 0;
    }
    if (why)
        td_logf(TD_LOG_INFO, r->o.job, "autotune: %d worker(s), prefetch %d "
                "(%s: starved %.1f%%, input wait %.1f%%)", workers,
                prefetch, why, 100 * starved_ratio,
                100 * mc->input_wait_ratio);
    if (window) {
        json_object_set_new(window, "workers", json_integer(workers));
        json_object_set_new(window, "prefetch", json_integer(prefetch));
        /* more workers than CPUs decode no faster: say what will help */
        if (mc->verdict == TD_VERDICT_INPUT_BOUND && workers >= td__ncpu())
            json_object_set_new(window, "advice", json_string(
                td_verdict_advice_input_cpus(mc->severity)));
    }
}

static int td__on_step(void *user, td_trainer *t, const td_step_info *s)
{
    td_runner *r = user;
    (void)t;
    /* steps are numbered as the events number them, from 1 (s->step is
     * the trainer's index, from 0), window extents included */
    td_step_times st = {
        .step = s->step + 1, .epoch = s->epoch, .total_ns = s->step_ns,
        .data_wait_ns = s->data_wait_ns, .h2d_ns = s->h2d_ns,
        .d2h_ns = s->d2h_ns, .checkpoint_ns = r->pending_ckpt_ns,
        .samples = s->n, .compute_ns = s->compute_ns, .copy_ns = -1,
        .loss = s->loss};
    int64_t ckpt_ns = r->pending_ckpt_ns;
    r->pending_ckpt_ns = 0;
    r->last_loss = s->loss;
    r->last_lr = s->lr;
    td__runner_ls_step(r, s);
    int closed = td_metrics_step(r->metrics, &st);
    if (closed >= 0) { /* taken: the window it is in, if any */
        int64_t seq = r->win_seq++;
        if (seq >= r->win_warm && isfinite(s->loss)) {
            int w = (int)(((seq - r->win_warm) / r->win_steps) & 1);
            r->win_loss_sum[w] += s->loss * s->n;
            r->win_samples[w] += s->n;
        }
    }
    json_t *step = td_metrics_step_json(r->metrics);
    if (step) {
        json_object_set_new(step, "step", json_integer(s->step + 1));
        json_object_set_new(step, "correct", json_integer(s->correct));
        if (s->loss_scale > 0)
            json_object_set_new(step, "skipped", json_boolean(s->skipped));
    }
    td_eta_step(&r->eta, s->step, (double)s->step_ns / 1e9);
    r->eta_done = s->step + 1;
    td__runner_emit(r, "step", td__with_progress(r, step, s->epoch));
    if (closed > 0) {
        json_t *w = td_metrics_window_json(r->metrics);
        td_metrics_counters mc;
        td_metrics_get_counters(r->metrics, &mc);
        if (w) {
            json_object_set_new(w, "step", json_integer(s->step + 1));
            /* the learning curve's point: the window's mean, not the last
             * batch's loss */
            int last = (int)((r->win_closed + closed - 1) & 1);
            if (r->win_samples[last] > 0) {
                r->cur_loss = r->win_loss_sum[last] /
                              (double)r->win_samples[last];
                json_object_set_new(w, "train_loss", json_real(r->cur_loss));
            }
        }
        for (int64_t c = r->win_closed; c < r->win_closed + closed; c++) {
            r->win_loss_sum[c & 1] = 0;
            r->win_samples[c & 1] = 0;
        }
        r->win_closed += closed;
        td__autotune(r, &mc, w);
        td__runner_emit(r, "window", td__with_progress(r, w, s->epoch));
    }
    td__runner_trace_step(r, s, ckpt_ns, closed);
    if (r->o.snapshot && (closed > 0 || s->start_ns - r->snap_last_ns >=
                                            TD_NS_PER_S))
        td__snapshot(r, s->epoch);
    return 0;
}

const char *const td_runner_curve_keys[] = {
    "epoch", "step", "train_loss", "train_acc", "val_loss", "val_acc", "lr",
    "samples_per_s", "input_wait_ratio", "device_idle_ratio", "verdict",
    "train_s", "eval_s", NULL};

/* The epoch's entry in r->hist, replacing any of this epoch or later (a
 * job that resumed runs them again). */
static void td__hist_add(td_runner *r, const json_t *ev)
{
    json_int_t ep = json_integer_value(json_object_get(ev, "epoch"));
    json_t *e = json_object();
    if (!r->hist)
        r->hist = json_array();
    if (!e || !r->hist) {
        json_decref(e);
        return;
    }
    for (const char *const *k = td_runner_curve_keys; *k; k++) {
        json_t *v = json_object_get(ev, *k);
        if (v) /* copies: the event goes to another thread */
            json_object_set_new(e, *k, json_deep_copy(v));
    }
    size_t n = json_array_size(r->hist);
    while (n > 0 && json_integer_value(json_object_get(
                        json_array_get(r->hist, n - 1), "epoch")) >= ep)
        json_array_remove(r->hist, --n);
    json_array_append_new(r->hist, e);
}

static int td__on_epoch(void *user, td_trainer *t, const td_epoch_info *e)
{
    td_runner *r = user;
    (void)t;
    json_t *o = td_metrics_end_epoch(r->metrics);
    if (!o)
        return 0;
    json_object_set_new(o, "epoch", json_integer(e->epoch));
    json_object_set_new(o, "step", json_integer(e->steps));
    json_object_set_new(o, "train_loss", json_real(e->train_loss));
    json_object_set_new(o, "train_acc", json_real(e->train_acc));
    json_object_set_new(o, "val_loss", isnan(e->val_loss)
                                           ? json_null()
                                           : json_real(e->val_loss));
    json_object_set_new(o, "val_acc", isnan(e->val_acc)
                                          ? json_null()
                                          : json_real(e->val_acc));
    json_object_set_new(o, "val_samples", json_integer(e->val_samples));
    json_object_set_new(o, "train_s", json_real(e->train_s));
    json_object_set_new(o, "eval_s", json_real(e->eval_s));
    json_object_set_new(o, "lr", json_real(e->lr));
    json_object_set_new(o, "epochs_total", json_integer(r->spec->epochs));
    td_eta_eval(&r->eta, e->eval_s);
    double eta = td_eta_left(&r->eta, e->steps, e->epoch);
    if (eta >= 0)
        json_object_set_new(o, "eta_s", json_real(eta));
    if (r->train) {
        td_pipeline_stats ps;
        td_pipeline_stats_get(r->train, &ps);
        json_object_set_new(o, "bad_samples", json_integer(ps.bad_samples));
    }
    if (isnan(e->val_acc)) /* the same words everywhere (issue 18) */
        td_logf(TD_LOG_INFO, r->o.job, "epoch %" PRId64 "/%d: train loss "
                "%.4f, no validation set", e->epoch + 1, r->spec->epochs,
                e->train_loss);
    else
        td_logf(TD_LOG_INFO, r->o.job, "epoch %" PRId64 "/%d: train loss "
                "%.4f, val loss %.4f, val acc %.4f", e->epoch + 1,
                r->spec->epochs, e->train_loss, e->val_loss, e->val_acc);
    r->ep_train_loss = e->train_loss;
    r->ep_train_acc = e->train_acc;
    r->ep_val_loss = e->val_loss;
    r->ep_val_acc = e->val_acc;
    td__hist_add(r, o);
    td__runner_emit(r, "epoch", o);
    if (r->o.snapshot) /* the epoch's figures at once, not a window later */
        td__snapshot(r, e->epoch + 1);
    td__runner_keep_best(r, e);
    return td__runner_early_stop(r, e);
}

static int td__on_boundary(void *user, td_trainer *t,
                           const td_train_position *pos)
{
    td_runner *r = user;
    if (atomic_load(&r->stop_reason) != TD_STOP_NONE)
        return 1;
    int due = atomic_exchange(&r->ckpt_request, 0);
    int64_t every = r->spec->checkpoint.every_steps;
    if (pos->steps > 0 && pos->steps != r->last_ckpt_step) {
        if (every > 0 && pos->steps % every == 0)
            due = 1;
        if (r->spec->checkpoint.at_epoch_end && pos->step_in_epoch == 0)
            due = 1;
    }
    td_train_position settled;
    if (due && pos->steps != r->last_ckpt_step) {
        /* The step in flight is counted in the checkpoint's epoch sums
         * (a resumed epoch's train loss covers all of it). */
        if (td_trainer_settle(t) == 0) {
            td_trainer_position(t, &settled);
            pos = &settled;
        } else {
            due = 0; /* a device error: the next step reports it */
        }
    }
    if (due && pos->steps != r->last_ckpt_step &&
        td__runner_checkpoint(r, pos) == 0)
        td_trace_instant(r->trace, TD_TRACK_TRAINER, "checkpoint taken",
                         td_now_ns(), NULL, pos->steps);
    td__runner_trace_boundary(r, pos);
    return 0;
}

/* ---- running ---------------------------------------------------------- */

/* TD_E_BADDATA's reason: which data set, how many bad samples, the latest
 * and why, and whether a data folder itself has gone (deleted, moved, its
 * file system unmounted while the job ran), rather than "too many bad
 * samples". */
static void td__runner_bad_data(td_runner *r, char *err, size_t errcap)
{
    td_pipeline_stats st = {0};
    int val = 0;
    if (r->train)
        td_pipeline_stats_get(r->train, &st);
    if (st.bad_samples == 0 && r->val) {
        td_pipeline_stats_get(r->val, &st);
        val = st.bad_samples > 0;
    }
    td_pipeline *p = val ? r->val : r->train;
    const td_spec_paths *paths = val && r->spec->data.val.n
                                     ? &r->spec->data.val
                                     : &r->spec->data.train;
    char sum[1024];
    if (!p)
        return;
    td_pipeline_bad_summary(p, sum, sizeof sum);
    int n = snprintf(err, errcap, "%s: %s", val && r->spec->data.val.n
                                                ? "data.val" : "data.train",
                     sum);
    for (int i = 0; i < paths->n && n > 0 && (size_t)n < errcap; i++) {
        struct stat st_;
        if (strpbrk(paths->v[i], "*?[") || stat(paths->v[i], &st_) == 0)
            continue;
        n += snprintf(err + n, errcap - (size_t)n, "; %s itself: %s (deleted, "
                      "moved or its file system unmounted while the job ran)",
                      paths->v[i], strerror(errno));
    }
}

/* A resumed job with fewer steps left than the metrics warm-up measured
 * no throughput and closed no window of its own: its result gives the
 * newest epoch's figures that were measured (the history its checkpoint
 * carried), not "none" (the daemon's reason read "0.0 samples/s"). */
static void td__measured_before(td_runner *r, td_runner_result *res)
{
    int want_sps = !isfinite(res->samples_per_s);
    int want_verdict = strcmp(res->verdict, "none") == 0;
    for (size_t i = json_array_size(r->hist); i-- > 0 &&
                                              (want_sps || want_verdict);) {
        json_t *e = json_array_get(r->hist, i);
        json_t *sps = json_object_get(e, "samples_per_s");
        const char *v = json_string_value(json_object_get(e, "verdict"));
        if (want_sps && json_is_number(sps)) {
            res->samples_per_s = json_number_value(sps);
            want_sps = 0;
        }
        if (want_verdict && v && strcmp(v, "none") != 0) {
            snprintf(res->verdict, sizeof res->verdict, "%s", v);
            want_verdict = 0;
        }
    }
}

int td_runner_run(td_runner *r, td_runner_result *res, char *err,
                  size_t errcap)
{
    td_train_result tr;
    int rc;
    memset(res, 0, sizeof *res);
    res->val_loss = res->val_acc = NAN;
    res->model_mflop = r->model->fwd_flops / 1e6;
    snprintf(res->verdict, sizeof res->verdict, "none");
    if (r->o.ckpt_dir && r->o.resume &&
        (rc = td__runner_resume(r, err, errcap)))
        return rc;
    if (r->resumed_final) { /* completed in an earlier life */
        json_t *last = json_array_get(r->hist, json_array_size(r->hist) - 1);
        json_t *vl = json_object_get(last, "val_loss");
        json_t *va = json_object_get(last, "val_acc");
        res->steps = r->last_written_step;
        res->epochs = r->resumed_epochs;
        json_t *sps = json_object_get(last, "samples_per_s");
        const char *verdict = json_string_value(json_object_get(last,
                                                                "verdict"));
        res->samples_per_s = json_is_number(sps) ? json_number_value(sps)
                                                 : NAN;
        if (verdict)
            snprintf(res->verdict, sizeof res->verdict, "%s", verdict);
        res->val_loss = json_is_number(vl) ? json_number_value(vl) : NAN;
        res->val_acc = json_is_number(va) ? json_number_value(va) : NAN;
        res->early_stopped = r->early_stopped;
        snprintf(res->last_checkpoint, sizeof res->last_checkpoint, "%s",
                 r->last_ckpt);
        return 0;
    }
    td_logf(TD_LOG_INFO, r->o.job, "model %s: %.1f MFLOP/sample forward, "
            "%zu parameters; batch %d, %d epoch%s of %" PRId64 " steps",
            r->model->name, r->model->fwd_flops / 1e6, r->model->param_count,
            r->spec->batch_size, r->spec->epochs,
            r->spec->epochs == 1 ? "" : "s", r->steps_per_epoch);
    td_batch_source tsrc, vsrc;
    if (r->train)
        tsrc = td_pipeline_source(r->train);
    if (r->val)
        vsrc = td_pipeline_source(r->val);
    td_train_callbacks cb = {.on_step = td__on_step, .on_epoch = td__on_epoch,
                             .on_boundary = td__on_boundary, .user = r};
    rc = td_trainer_run(r->trainer, r->train ? &tsrc : NULL,
                        r->val ? &vsrc : NULL, &cb, &tr, err, errcap);
    enum td_stop_reason why = atomic_load(&r->stop_reason);
    if (rc == TD_E_BADDATA)
        td__runner_bad_data(r, err, errcap);
    if (rc == TD_E_CLOSED && why == TD_STOP_CANCEL) {
        /* cancelled while waiting for data: the pipeline was closed on
         * purpose, that is a stop, not a failure */
        td_train_position pos;
        td_trainer_position(r->trainer, &pos);
        tr.steps = pos.steps;
        tr.epochs = pos.epoch;
        tr.stopped = 1;
        rc = 0;
        if (errcap)
            err[0] = '\0';
    }
    /* The trained model is the job's product: a completed job ends with a
     * checkpoint of its final state, and a paused or interrupted one with
     * a checkpoint to resume from. */
    if (rc == 0 && (!tr.stopped || why == TD_STOP_PAUSE ||
                    why == TD_STOP_SHUTDOWN || r->early_stopped)) {
        td_train_position pos;
        td_trainer_position(r->trainer, &pos);
        if (pos.steps != r->last_ckpt_step)
            td__runner_checkpoint_final(r, &pos);
    }
    if (r->writer) { /* drains queued writes, then joins */
        td_ckpt_writer_stop(r->writer);
        r->writer = NULL;
    }
    /* a recording the job outlived: what there is, the last writes too */
    td__runner_trace_finish(r);
    td__snapshot(r, tr.epochs);
    res->steps = tr.steps;
    res->epochs = tr.epochs;
    res->samples_per_s = tr.samples_per_s;
    res->val_loss = tr.val_loss;
    res->val_acc = tr.val_acc;
    res->stopped = tr.stopped ? why : TD_STOP_NONE;
    res->early_stopped = r->early_stopped;
    td_metrics_counters mc;
    td_metrics_get_counters(r->metrics, &mc);
    snprintf(res->verdict, sizeof res->verdict, "%s",
             td_verdict_name(mc.verdict));
    td__measured_before(r, res);
    if (r->train) {
        td_pipeline_stats ps;
        td_pipeline_stats_get(r->train, &ps);
        res->bad_samples = ps.bad_samples;
    }
    /* A job that trained to the end but whose final model is not on disk
     * has not produced what it was for: that is a failure, not a
     * completion with a counter nobody reads. */
    if (rc == 0 && (!tr.stopped || r->early_stopped) && r->o.ckpt_dir) {
        td_train_position pos;
        td_trainer_position(r->trainer, &pos);
        pthread_mutex_lock(&r->res_mu);
        if (r->last_written_step != pos.steps) {
            snprintf(err, errcap, "trained %" PRId64 " step(s), but the final "
                     "model could not be saved: %s%s%s", pos.steps,
                     r->last_ckpt_err[0] ? r->last_ckpt_err
                                         : "the checkpoint was not written",
                     r->last_ckpt[0] ? "; the newest saved checkpoint is "
                                     : "; no checkpoint was saved",
                     r->last_ckpt);
            rc = -EIO;
        }
        pthread_mutex_unlock(&r->res_mu);
    }
    pthread_mutex_lock(&r->res_mu);
    res->checkpoints_written = r->ckpt_written;
    res->checkpoints_failed = r->ckpt_failed;
    res->checkpoints_skipped = r->ckpt_skipped;
    snprintf(res->last_checkpoint, sizeof res->last_checkpoint, "%s",
             r->last_ckpt);
    pthread_mutex_unlock(&r->res_mu);
    return rc;
}

void td_runner_stop(td_runner *r, enum td_stop_reason why)
{
    int none = TD_STOP_NONE;
    atomic_compare_exchange_strong(&r->stop_reason, &none, (int)why);
    td_trainer_request_stop(r->trainer);
    if (why == TD_STOP_CANCEL) { /* also wake a trainer waiting for data */
        if (r->train)
            td_pipeline_stop(r->train);
        if (r->val)
            td_pipeline_stop(r->val);
    }
}

void td_runner_checkpoint_now(td_runner *r)
{
    atomic_store(&r->ckpt_request, 1);
}

int td_runner_set_workers(td_runner *r, int n)
{
    return r->train ? td_pipeline_set_workers(r->train, n) : 0;
}

int64_t td_runner_steps_total(const td_runner *r)
{
    return r->spec->epochs * r->steps_per_epoch;
}

void td_runner_free(td_runner *r)
{
    if (!r)
        return;
    if (r->writer)
        td_ckpt_writer_stop(r->writer);
    if (r->trainer)
        td__runner_ckpt_release(r);
    td_ckpt_close(r->resume_f); /* opened at create, never run */
    td_trainer_free(r->trainer);
    td_pipeline_destroy(r->train);
    td_pipeline_destroy(r->val);
    td_metrics_destroy(r->metrics);
    td_trace_free(r->trace);
    td_model_free(r->model);
    json_decref(r->graph);
    free(r->lr_mult);
    free(r->bn_eval);
    json_decref(r->meta_json);
    json_decref(r->hist);
    for (int i = 0; i < TD__NSNAP; i++) {
        td_ckpt_snapshot_destroy(&r->snap[i]);
        json_decref(r->snap_meta[i]);
    }
    free(r->flat);
    pthread_mutex_destroy(&r->res_mu);
    free(r);
}
