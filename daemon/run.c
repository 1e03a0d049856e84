/* run.c - `traind --run JOB.json`: one job in the foreground.
 *
 * Owns: loading the job file (lib/spec, with --set overrides), the checks
 * the daemon makes at submit (lib/job/jobcheck.h: the same function),
 * running it through lib/runner on the device they chose, and printing
 * one line per window and per epoch as text or JSON lines, then a `done`
 * line.  SIGINT/SIGTERM stop at a step boundary (with a final checkpoint
 * when --checkpoint-dir is given).  Never does: anything only the daemon
 * does (sockets, job records, its settings' limits, who may read what).
 */
#include "run.h"

#include <inttypes.h>
#include <libgen.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "access.h"
#include "base/error.h"
#include "base/log.h"
#include "bounds.h"
#include "job/jobcheck.h"
#include "job/runner.h"
#include "model/zoo.h"
#include "proto/protocol.h"
#include "job/spec.h"
#include "td_config.h"

static td_runner *volatile td__active;

static void td__on_signal(int sig)
{
    (void)sig;
    if (td__active)
        td_runner_stop(td__active, TD_STOP_SHUTDOWN);
}

typedef struct td__printer {
    int json;
    pthread_mutex_t mu; /* checkpoint events come from the writer thread */
} td__printer;

#define JNUM(o, k) json_number_value(json_object_get((o), (k)))
#define JINT(o, k) ((long long)json_integer_value(json_object_get((o), (k))))

static void td__event(void *user, const char *kind, json_t *d)
{
    td__printer *p = user;
    if (strcmp(kind, "step") == 0) {
        json_decref(d);
        return;
    }
    pthread_mutex_lock(&p->mu);
    if (p->json) {
        json_t *o = json_pack("{s:s, s:o}", "event", kind, "data", d);
        char *s = json_dumps(o, JSON_COMPACT);
        if (s)
            puts(s);
        free(s);
        json_decref(o);
        d = NULL;
    } else if (strcmp(kind, "window") == 0) {
        json_t *sh = json_object_get(d, "phase_shares");
        printf("step %6lld  epoch %lld/%lld  loss %.4f  lr %.5f  %7.1f "
               "samples/s  data_wait %4.1f%%  idle %4.1f%%  %s\n",
               JINT(d, "step"), JINT(d, "epoch") + 1, JINT(d, "epochs_total"),
               JNUM(d, "loss"), JNUM(d, "lr"), JNUM(d, "samples_per_s"),
               100 * JNUM(sh, "data_wait"),
               100 * JNUM(d, "device_idle_ratio"),
               json_string_value(json_object_get(d, "verdict")));
    } else if (strcmp(kind, "epoch") == 0) {
        char val[64] = "no validation set";
        if (json_is_number(json_object_get(d, "val_acc")))
            snprintf(val, sizeof val, "val loss %.4f acc %.4f",
                     JNUM(d, "val_loss"), JNUM(d, "val_acc"));
        printf("epoch %lld/%lld done  train loss %.4f acc %.4f  %s  (%.1f s "
               "+ eval %.1f s)\n",
               JINT(d, "epoch") + 1, JINT(d, "epochs_total"),
               JNUM(d, "train_loss"), JNUM(d, "train_acc"), val,
               JNUM(d, "train_s"), JNUM(d, "eval_s"));
    } else if (strcmp(kind, "checkpoint") == 0) {
        if (json_is_true(json_object_get(d, "ok")))
            printf("checkpoint  step %lld  %s\n", JINT(d, "step"),
                   json_string_value(json_object_get(d, "path")));
        else
            printf("checkpoint  step %lld  FAILED: %s\n", JINT(d, "step"),
                   json_string_value(json_object_get(d, "error")));
    }
    fflush(stdout);
    pthread_mutex_unlock(&p->mu);
    json_decref(d);
}

/* Room for the run's checkpoints in --checkpoint-dir (or, before the
 * runner creates it, in its parent), as the daemon checks its own
 * checkpoint folder at submit. */
static int td__check_disk(const td_job_spec *spec, const char *models,
                          const char *ckdir, char *err, size_t errcap)
{
    char where[4096];
    struct stat st;
    snprintf(where, sizeof where, "%s", ckdir);
    if (stat(where, &st) != 0) {
        char *slash = strrchr(where, '/');
        if (!slash)
            snprintf(where, sizeof where, ".");
        else if (slash == where)
            where[1] = '\0';
        else
            *slash = '\0';
    }
    td_model *model = NULL;
    td_access_build_model(geteuid(), spec, models, &model);
    int rc = td_limits_check_disk(where, spec, model, NULL, err, errcap);
    td_model_free(model);
    return rc;
}

int td_run_job(const char *path, const td_run_options *opt)
{
    td_job_spec spec;
    td_runner *r = NULL;
    td_runner_result res;
    char err[1024] = "", models[4096], device[32];
    int rc, refused = 1; /* until the job passed what submit checks */
    memset(&spec, 0, sizeof spec);
    rc = td_spec_load_file(path, opt->sets, opt->nsets, &spec, err,
                           sizeof err);
    if (rc)
        goto out;
    td_models_dir(path, models, sizeof models);
    /* What the daemon checks at submit, with the same function and so
     * the same messages, before anything is built (jobcheck.h). */
    td_device_info devices;
    td_device_probe(&devices);
    td_job_check_opts co = {.devices = &devices, .models_dir = models,
                            .synthetic_steps = opt->synthetic_steps};
    td_job_checked chk;
    if ((rc = td_job_check(&spec, &co, &chk, err, sizeof err)))
        goto out;
    if (opt->checkpoint_dir &&
        (rc = td__check_disk(&spec, models, opt->checkpoint_dir, err,
                             sizeof err)))
        goto out;
    refused = 0;
    td_job_device_name(&chk.device, device, sizeof device);
    td_runner_opts ro = {.spec = &spec, .models_dir = models,
                         .device = device,
                         .ckpt_dir = opt->checkpoint_dir,
                         .resume = opt->resume,
                         .synthetic_steps = opt->synthetic_steps,
                         .event = td__event};
    td__printer pr = {.json = opt->json};
    pthread_mutex_init(&pr.mu, NULL);
    ro.user = &pr;
    if ((rc = td_runner_create(&ro, &r, err, sizeof err)))
        goto out;
    td__active = r;
    signal(SIGINT, td__on_signal);
    signal(SIGTERM, td__on_signal);
    rc = td_runner_run(r, &res, err, sizeof err);
    td__active = NULL;
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    if (rc)
        goto out;
    double gflops = res.samples_per_s * 3 * res.model_mflop / 1e3;
    if (opt->json) {
        json_t *o = json_pack(
            "{s:s, s:f, s:f, s:o, s:o, s:I, s:I, s:s, s:b, s:I, s:s}",
            "event", "done", "samples_per_s",
            isfinite(res.samples_per_s) ? res.samples_per_s : 0.0,
            "gflop_per_s", isfinite(gflops) ? gflops : 0.0, "val_acc",
            isnan(res.val_acc) ? json_null() : json_real(res.val_acc),
            "val_loss",
            isnan(res.val_loss) ? json_null() : json_real(res.val_loss),
            "epochs", (json_int_t)res.epochs, "steps", (json_int_t)res.steps,
            "verdict", res.verdict, "stopped", res.stopped != TD_STOP_NONE,
            "bad_samples", (json_int_t)res.bad_samples, "checkpoint",
            res.last_checkpoint);
        char *s = json_dumps(o, JSON_COMPACT);
        if (s)
            puts(s);
        free(s);
        json_decref(o);
    } else {
        char val[64];
        if (!isnan(res.val_acc))
            snprintf(val, sizeof val, "val acc %.4f  val loss %.4f",
                     res.val_acc, res.val_loss);
        else /* stopped before its first evaluation, or none to make */
            snprintf(val, sizeof val, "%s", spec.data.val.n ||
                     spec.data.val_fraction > 0 ? "not evaluated yet"
                                                : "no validation set");
        printf("done  %" PRId64 " epoch%s, %" PRId64 " step%s  %.1f "
               "samples/s (%.1f GFLOP/s)  %s  verdict %s%s\n",
               res.epochs, res.epochs == 1 ? "" : "s", res.steps,
               res.steps == 1 ? "" : "s", res.samples_per_s, gflops, val,
               res.verdict,
               res.stopped != TD_STOP_NONE ? "  (stopped early)" : "");
    }
    fflush(stdout);
out:
    if (rc && !err[0])
        snprintf(err, sizeof err, "%s", td_strerror(rc));
    /* named once: a file that cannot be read says its path itself */
    const char *pre = strncmp(err, path, strlen(path)) == 0 ? "" : path;
    if (rc)
        fprintf(stderr, "traind: %s%s%s\n", pre, pre[0] ? ": " : "", err);
    if (rc && opt->json) { /* stdout stays JSON lines: the error is one */
        char desc[1200];
        snprintf(desc, sizeof desc, "%s%s%s", pre, pre[0] ? ": " : "", err);
        json_t *o = json_pack("{s:s, s:{s:s, s:s}}", "event", "error",
                              "data", "class", refused ? TD_ERR_INVALID_SPEC
                                                       : "failed",
                              "desc", desc);
        char *t = json_dumps(o, JSON_COMPACT);
        if (t)
            puts(t);
        free(t);
        json_decref(o);
        fflush(stdout);
    }
    td_runner_free(r);
    td_spec_free(&spec);
    return !rc ? 0 : refused ? TD_RUN_REFUSED : 1;
}
