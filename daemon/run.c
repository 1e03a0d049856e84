/* run.c - `traind --run JOB.json`: one job in the foreground.
 *
 * Owns: reading a job file (a minimal reader of the DESIGN 9 keys, to be
 * replaced by lib/spec when it lands), loading the data with the in-order
 * feeder (to be replaced by the input pipeline), running the trainer and
 * printing one line per window and per epoch, as text or JSON lines.
 * Never does: anything the daemon does (sockets, checkpoints on disk).
 */
#include "run.h"

#include <inttypes.h>

#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "clock.h"
#include "error.h"
#include "feeder.h"
#include "log.h"
#include "model.h"
#include "train.h"

typedef struct td__job {
    char name[128], model[1024], train[1024], val[1024], device[32];
    int classes, h, w, c, pad_crop, flip, synthetic;
    td_train_config cfg;
} td__job;

#define TD__BAD(...)                                                         \
    do {                                                                     \
        snprintf(err, errcap, __VA_ARGS__);                                  \
        return TD_E_SPEC;                                                    \
    } while (0)

static int td__keys(const json_t *o, const char *path, const char *allowed,
                    char *err, size_t errcap)
{
    const char *k;
    json_t *v;
    if (!json_is_object(o))
        TD__BAD("%s: must be an object", path);
    json_object_foreach((json_t *)o, k, v) {
        char pat[96];
        snprintf(pat, sizeof pat, " %s ", k);
        if (!strstr(allowed, pat))
            TD__BAD("%s%s%s: unknown key", path, *path ? "." : "", k);
    }
    return 0;
}

static int td__str(const json_t *o, const char *key, const char *path,
                   char *dst, size_t cap, char *err, size_t errcap)
{
    json_t *j = json_object_get(o, key);
    if (!j)
        return 0;
    if (!json_is_string(j) || json_string_length(j) >= cap)
        TD__BAD("%s%s: must be a string", path, key);
    snprintf(dst, cap, "%s", json_string_value(j));
    return 0;
}

static int td__num(const json_t *o, const char *key, const char *path,
                   double lo, double hi, double *v, char *err, size_t errcap)
{
    json_t *j = json_object_get(o, key);
    if (!j)
        return 0;
    if (!json_is_number(j) || json_number_value(j) < lo ||
        json_number_value(j) > hi)
        TD__BAD("%s%s: must be a number in [%g, %g]", path, key, lo, hi);
    *v = json_number_value(j);
    return 0;
}

static int td__optim(const json_t *o, td_optim_config *c, char *err,
                     size_t errcap)
{
    int rc;
    char type[16] = "sgd", st[16] = "constant";
    double warm = 0, size = 1000;
    if ((rc = td__keys(o, "optimizer", " type lr momentum nesterov "
                       "weight_decay betas eps schedule ", err, errcap)) ||
        (rc = td__str(o, "type", "optimizer.", type, sizeof type, err,
                      errcap)))
        return rc;
    if (strcmp(type, "sgd") && strcmp(type, "adamw"))
        TD__BAD("optimizer.type: must be \"sgd\" or \"adamw\"");
    td_optim_defaults(c, strcmp(type, "sgd") ? TD_OPT_ADAMW : TD_OPT_SGD);
    json_t *b = json_object_get(o, "betas"), *s = json_object_get(o,
                                                                  "schedule");
    if (b && (!json_is_array(b) || json_array_size(b) != 2))
        TD__BAD("optimizer.betas: must be two numbers");
    if (b) {
        c->beta1 = json_number_value(json_array_get(b, 0));
        c->beta2 = json_number_value(json_array_get(b, 1));
    }
    json_t *nest = json_object_get(o, "nesterov");
    if (nest && !json_is_boolean(nest))
        TD__BAD("optimizer.nesterov: must be true or false");
    c->nesterov = json_is_true(nest);
    if ((rc = td__num(o, "lr", "optimizer.", -1e9, 1e9, &c->lr, err,
                      errcap)) ||
        (rc = td__num(o, "momentum", "optimizer.", -1e9, 1e9, &c->momentum,
                      err, errcap)) ||
        (rc = td__num(o, "weight_decay", "optimizer.", -1e9, 1e9,
                      &c->weight_decay, err, errcap)) ||
        (rc = td__num(o, "eps", "optimizer.", -1e9, 1e9, &c->eps, err,
                      errcap)))
        return rc;
    if (s) {
        if ((rc = td__keys(s, "optimizer.schedule", " type warmup_steps "
                           "step_size gamma ", err, errcap)) ||
            (rc = td__str(s, "type", "optimizer.schedule.", st, sizeof st,
                          err, errcap)) ||
            (rc = td__num(s, "warmup_steps", "optimizer.schedule.", 0, 1e12,
                          &warm, err, errcap)) ||
            (rc = td__num(s, "step_size", "optimizer.schedule.", 1, 1e12,
                          &size, err, errcap)) ||
            (rc = td__num(s, "gamma", "optimizer.schedule.", -1e9, 1e9,
                          &c->schedule.gamma, err, errcap)))
            return rc;
    }
    c->schedule.warmup_steps = (int64_t)warm;
    c->schedule.step_size = (int64_t)size;
    if (!strcmp(st, "constant"))
        c->schedule.type = TD_SCHED_CONSTANT;
    else if (!strcmp(st, "step"))
        c->schedule.type = TD_SCHED_STEP;
    else if (!strcmp(st, "cosine"))
        c->schedule.type = TD_SCHED_COSINE;
    else
        TD__BAD("optimizer.schedule.type: must be \"constant\", \"step\" or "
                "\"cosine\"");
    return td_optim_validate(c, err, errcap);
}

static int td__input(const json_t *o, td__job *j, char *err, size_t errcap)
{
    int rc;
    char src[16] = "files";
    double ch = 1;
    if ((rc = td__keys(o, "input", " size channels workers prefetch augment "
                       "normalize source ", err, errcap)) ||
        (rc = td__str(o, "source", "input.", src, sizeof src, err, errcap)) ||
        (rc = td__num(o, "channels", "input.", 1, 4, &ch, err, errcap)))
        return rc;
    if (strcmp(src, "files") && strcmp(src, "synthetic"))
        TD__BAD("input.source: must be \"files\" or \"synthetic\"");
    j->synthetic = !strcmp(src, "synthetic");
    j->c = (int)ch;
    json_t *sz = json_object_get(o, "size");
    if (sz) {
        if (!json_is_array(sz) || json_array_size(sz) != 2 ||
            !json_is_integer(json_array_get(sz, 0)) ||
            !json_is_integer(json_array_get(sz, 1)))
            TD__BAD("input.size: must be [height, width]");
        j->h = (int)json_integer_value(json_array_get(sz, 0));
        j->w = (int)json_integer_value(json_array_get(sz, 1));
        if (j->h < 1 || j->h > 4096 || j->w < 1 || j->w > 4096)
            TD__BAD("input.size: must be 1..4096 each");
    }
    json_t *aug = json_object_get(o, "augment"), *a;
    size_t i;
    if (aug && !json_is_array(aug))
        TD__BAD("input.augment: must be an array");
    json_array_foreach(aug, i, a) {
        json_t *op = json_object_get(a, "op");
        char path[64];
        snprintf(path, sizeof path, "input.augment[%zu]", i);
        if (json_is_string(op) && !strcmp(json_string_value(op), "flip")) {
            if ((rc = td__keys(a, path, " op ", err, errcap)))
                return rc;
            j->flip = 1;
        } else if (json_is_string(op) &&
                   !strcmp(json_string_value(op), "pad_crop")) {
            double pad = 4;
            if ((rc = td__keys(a, path, " op pad ", err, errcap)) ||
                (rc = td__num(a, "pad", "input.augment[].", 0, 64, &pad, err,
                              errcap)))
                return rc;
            j->pad_crop = (int)pad;
        } else {
            TD__BAD("%s.op: the in-order feeder knows \"pad_crop\" and "
                    "\"flip\"", path);
        }
    }
    json_t *nm = json_object_get(o, "normalize");
    if (nm) {
        if ((rc = td__keys(nm, "input.normalize", " mean std ", err, errcap)))
            return rc;
        const char *keys[2] = {"mean", "std"};
        for (int k = 0; k < 2; k++) {
            json_t *arr = json_object_get(nm, keys[k]);
            if (!json_is_array(arr) || (int)json_array_size(arr) != j->c)
                TD__BAD("input.normalize.%s: must hold %d numbers", keys[k],
                        j->c);
            for (int c = 0; c < j->c; c++) {
                float v = (float)json_number_value(json_array_get(arr, (size_t)c));
                if (k == 0)
                    j->cfg.backend.mean[c] = v;
                else
                    j->cfg.backend.std[c] = v;
            }
        }
    }
    return 0;
}

/* Reads the job; defaults as documented in docs/compute.md. */
static int td__job_read(const char *path, td__job *j, char *err,
                        size_t errcap)
{
    json_error_t je;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    int rc;
    double batch = 128, epochs = 1, seed = 1, threads = 0, classes = 10;
    memset(j, 0, sizeof *j);
    snprintf(j->device, sizeof j->device, "auto");
    j->h = j->w = 28;
    j->c = 1;
    for (int c = 0; c < 4; c++) {
        j->cfg.backend.mean[c] = 0.0f;
        j->cfg.backend.std[c] = 1.0f;
    }
    if (!root) {
        snprintf(err, errcap, "%s:%d: %s", path, je.line, je.text);
        return TD_E_SPEC;
    }
    json_t *data = json_object_get(root, "data");
    json_t *opt = json_object_get(root, "optimizer");
    json_t *in = json_object_get(root, "input");
    td_optim_defaults(&j->cfg.backend.optim, TD_OPT_SGD);
    if ((rc = td__keys(root, "", " name data input model optimizer "
                       "batch_size epochs seed checkpoint device threads ",
                       err, errcap)) ||
        (rc = td__str(root, "name", "", j->name, sizeof j->name, err,
                      errcap)) ||
        (rc = td__str(root, "model", "", j->model, sizeof j->model, err,
                      errcap)) ||
        (rc = td__str(root, "device", "", j->device, sizeof j->device, err,
                      errcap)) ||
        (rc = td__num(root, "batch_size", "", 1, 65536, &batch, err,
                      errcap)) ||
        (rc = td__num(root, "epochs", "", 1, 1e6, &epochs, err, errcap)) ||
        (rc = td__num(root, "seed", "", 0, 9e15, &seed, err, errcap)) ||
        (rc = td__num(root, "threads", "", 0, 1024, &threads, err,
                      errcap)) ||
        (data && ((rc = td__keys(data, "data", " train val classes ", err,
                                 errcap)) ||
                  (rc = td__str(data, "train", "data.", j->train,
                                sizeof j->train, err, errcap)) ||
                  (rc = td__str(data, "val", "data.", j->val, sizeof j->val,
                                err, errcap)) ||
                  (rc = td__num(data, "classes", "data.", 2, 1e6, &classes,
                                err, errcap)))) ||
        (in && (rc = td__input(in, j, err, errcap))) ||
        (opt && (rc = td__optim(opt, &j->cfg.backend.optim, err, errcap))))
        goto out;
    rc = TD_E_SPEC;
    if (!j->model[0])
        snprintf(err, errcap, "model: missing");
    else if (!j->synthetic && !j->train[0])
        snprintf(err, errcap, "data.train: missing (or use input.source "
                 "\"synthetic\")");
    else if (strcmp(j->device, "auto") && strcmp(j->device, "cpu"))
        snprintf(err, errcap, "device: \"%s\" is not available in this "
                 "build (only the CPU backend exists yet)", j->device);
    else
        rc = 0;
    j->classes = (int)classes;
    j->cfg.backend.batch = (int)batch;
    j->cfg.backend.threads = (int)threads;
    j->cfg.backend.seed = (uint64_t)seed;
    j->cfg.epochs = (int64_t)epochs;
    j->cfg.warmup_steps = 20;
    j->cfg.device = "cpu";
out:
    json_decref(root);
    return rc;
}

typedef struct td__printer {
    int json, window;
    int64_t steps, samples, ns, wait_ns;
    double loss;
    int64_t last_step, epoch;
    double lr;
} td__printer;

static double td__rss_mb(void)
{
    long pages = 0, rss = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f)
        return NAN;
    if (fscanf(f, "%ld %ld", &pages, &rss) != 2)
        rss = 0;
    fclose(f);
    return (double)rss * 4096.0 / (1 << 20);
}

static int td__on_step(void *user, td_trainer *t, const td_step_info *s)
{
    td__printer *p = user;
    p->steps++;
    p->samples += s->n;
    p->ns += s->step_ns;
    p->wait_ns += s->data_wait_ns;
    p->loss += s->loss;
    p->last_step = s->step;
    p->epoch = s->epoch;
    p->lr = s->lr;
    if (p->steps < p->window)
        return 0;
    double sps = (double)p->samples / td_ns_to_s(p->ns);
    double wait = p->ns ? (double)p->wait_ns / (double)p->ns : 0;
    if (p->json)
        printf("{\"event\":\"window\",\"step\":%" PRId64 ",\"epoch\":%" PRId64
               ",\"loss\":%.6f,\"lr\":%.6g,\"samples_per_s\":%.1f,"
               "\"data_wait_ratio\":%.4f}\n", s->step + 1, s->epoch,
               p->loss / p->steps, s->lr, sps, wait);
    else
        printf("step %6" PRId64 "  epoch %3" PRId64 "  loss %.4f  lr %.5f  "
               "%8.1f samples/s  data_wait %4.1f%%\n", s->step + 1, s->epoch,
               p->loss / p->steps, s->lr, sps, 100 * wait);
    fflush(stdout);
    p->steps = p->samples = p->ns = p->wait_ns = 0;
    p->loss = 0;
    return 0;
}

static int td__on_epoch(void *user, td_trainer *t, const td_epoch_info *e)
{
    td__printer *p = user;
    if (p->json)
        printf("{\"event\":\"epoch\",\"epoch\":%" PRId64 ",\"steps\":%" PRId64
               ",\"train_loss\":%.6f,\"train_acc\":%.6f,\"val_loss\":%.6f,"
               "\"val_acc\":%.6f,\"train_s\":%.3f,\"eval_s\":%.3f,"
               "\"rss_mb\":%.1f}\n", e->epoch, e->steps, e->train_loss,
               e->train_acc, e->val_loss, e->val_acc, e->train_s, e->eval_s,
               td__rss_mb());
    else
        printf("epoch %3" PRId64 " done  steps %" PRId64 "  train loss %.4f "
               "acc %.4f  val loss %.4f acc %.4f  (%.1f s + eval %.1f s, "
               "rss %.0f MiB)\n", e->epoch, e->steps, e->train_loss,
               e->train_acc, e->val_loss, e->val_acc, e->train_s, e->eval_s,
               td__rss_mb());
    fflush(stdout);
    return 0;
}

static void td__models_dir(const char *job, char *out, size_t cap)
{
    const char *env = getenv("TD_MODELS_DIR");
    char tmp[4096];
    if (env) {
        snprintf(out, cap, "%s", env);
        return;
    }
    snprintf(tmp, sizeof tmp, "%s", job);
    snprintf(out, cap, "%s/../models", dirname(tmp));
}

int td_run_job(const char *path, const td_run_options *opt)
{
    static td__job j;
    char err[512] = "", dir[4096];
    td_dataset_mem tr = {0}, va = {0};
    td_feeder *ftr = NULL, *fva = NULL;
    td_model *m = NULL;
    td_trainer *t = NULL;
    td_train_result res;
    int rc;
    if ((rc = td__job_read(path, &j, err, sizeof err)))
        goto out;
    if (!j.synthetic) {
        if ((rc = td_feeder_load_idx(j.train, opt->limit, &tr, err, sizeof err)) ||
            (j.val[0] && (rc = td_feeder_load_idx(j.val, 0, &va, err, sizeof err))))
            goto out;
        j.h = tr.h, j.w = tr.w, j.c = tr.c;
    }
    td__models_dir(path, dir, sizeof dir);
    if ((rc = td_model_load(dir, j.model, (td_shape){j.c, j.h, j.w},
                            j.classes, &m, err, sizeof err)))
        goto out;
    td_feeder_config fc = {.batch = j.cfg.backend.batch,
                           .seed = j.cfg.backend.seed, .shuffle = 1,
                           .drop_last = 1, .pad_crop = j.pad_crop,
                           .flip = j.flip};
    j.cfg.model = m;
    j.cfg.synthetic = j.synthetic;
    j.cfg.steps_per_epoch = opt->synthetic_steps > 0 ? opt->synthetic_steps
                                                     : 100;
    if (!j.synthetic) {
        if ((rc = td_feeder_create(&tr, &fc, &ftr))) {
            snprintf(err, sizeof err, "data.train: %d samples, fewer than "
                     "one batch of %d", tr.n, fc.batch);
            goto out;
        }
        j.cfg.steps_per_epoch = td_feeder_batches_per_epoch(ftr);
        fc.shuffle = fc.drop_last = fc.pad_crop = fc.flip = 0;
        if (va.n && (rc = td_feeder_create(&va, &fc, &fva)))
            goto out;
    }
    td_info("job %s: model %s (%.1f MFLOP/sample forward, %zu parameters), "
            "batch %d, %" PRId64 " epochs of %" PRId64 " steps on cpu",
            j.name[0] ? j.name : path, m->name, m->fwd_flops / 1e6,
            m->param_count, j.cfg.backend.batch, j.cfg.epochs,
            j.cfg.steps_per_epoch);
    if ((rc = td_trainer_create(&j.cfg, &t, err, sizeof err)))
        goto out;
    td_batch_source str = {0}, sva = {0};
    if (ftr)
        str = td_feeder_source(ftr);
    if (fva)
        sva = td_feeder_source(fva);
    td__printer pr = {.json = opt->json, .window = opt->window};
    td_train_callbacks cb = {.on_step = td__on_step,
                             .on_epoch = td__on_epoch, .user = &pr};
    if ((rc = td_trainer_run(t, ftr ? &str : NULL, fva ? &sva : NULL, &cb,
                             &res, err, sizeof err)))
        goto out;
    double gflops = res.samples_per_s * 3 * m->fwd_flops / 1e9;
    if (opt->json)
        printf("{\"event\":\"done\",\"samples_per_s\":%.1f,\"gflop_per_s\":"
               "%.1f,\"val_acc\":%.6f,\"val_loss\":%.6f,\"epochs\":%" PRId64
               ",\"steps\":%" PRId64 "}\n", res.samples_per_s, gflops,
               res.val_acc, res.val_loss, res.epochs, res.steps);
    else
        printf("done  %" PRId64 " epochs, %" PRId64 " steps  %.1f samples/s "
               "(%.1f GFLOP/s)  val acc %.4f  val loss %.4f\n", res.epochs,
               res.steps, res.samples_per_s, gflops, res.val_acc,
               res.val_loss);
out:
    if (rc)
        fprintf(stderr, "traind: %s: %s\n", path, err[0] ? err
                                                          : td_strerror(rc));
    td_trainer_free(t);
    td_feeder_free(ftr);
    td_feeder_free(fva);
    td_dataset_mem_free(&tr);
    td_dataset_mem_free(&va);
    td_model_free(m);
    return rc ? 1 : 0;
}
