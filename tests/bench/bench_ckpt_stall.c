/* bench_ckpt_stall.c - does a checkpoint stall the trainer?
 *
 * Trains resnet18 (11.7M parameters: a 94 MB snapshot with the momentum
 * buffers) on synthetic 32x32 input through lib/runner, exactly as the
 * daemon does, with a checkpoint every 5 steps into a temporary folder,
 * and compares the step time of the steps that took a checkpoint with the
 * others (target: <= 1.05x; issue 5).  The snapshot copy is the trainer's
 * only cost: the writer thread does the disk work.  Prints figures, never
 * fails on speed.
 *
 *   bench_ckpt_stall [steps]        (TD_SOURCE_ROOT: the source tree)
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "benchutil.h"
#include "job/runner.h"
#include "job/spec.h"

typedef struct {
    pthread_mutex_t mu;
    double ckpt[4096], plain[4096], copy[4096];
    int nckpt, nplain;
    int written, failed;
} acc;

static void on_event(void *user, const char *kind, json_t *d)
{
    acc *a = user;
    pthread_mutex_lock(&a->mu);
    if (strcmp(kind, "step") == 0) {
        double s = json_number_value(json_object_get(d, "step_s"));
        double c = json_number_value(json_object_get(
            json_object_get(d, "phases_s"), "checkpoint"));
        int64_t step = json_integer_value(json_object_get(d, "step"));
        if (step > 5) { /* warm-up: first-touch of buffers */
            if (c > 0 && a->nckpt < 4096) {
                a->copy[a->nckpt] = c;
                a->ckpt[a->nckpt++] = s;
            } else if (a->nplain < 4096) {
                a->plain[a->nplain++] = s;
            }
        }
    } else if (strcmp(kind, "checkpoint") == 0) {
        if (json_is_true(json_object_get(d, "ok")))
            a->written++;
        else
            a->failed++;
    }
    pthread_mutex_unlock(&a->mu);
    json_decref(d);
}

int main(int argc, char **argv)
{
    int steps = argc > 1 ? atoi(argv[1]) : 60;
    const char *src = getenv("TD_SOURCE_ROOT");
    char models[1024], dir[] = "/tmp/traind-ckpt-bench-XXXXXX", err[1024];
    snprintf(models, sizeof models, "%s/config/models", src ? src : ".");
    if (!mkdtemp(dir))
        return 1;
    json_t *root = json_pack(
        "{s:s, s:{s:i}, s:{s:[i,i], s:i, s:s, s:{s:[f,f,f], s:[f,f,f]}},"
        " s:s, s:{s:s, s:f, s:f}, s:i, s:i, s:i, s:{s:i, s:i, s:b},"
        " s:{s:i, s:i}}",
        "name", "ckpt-stall", "data", "classes", 10, "input", "size", 32, 32,
        "channels", 3, "source", "synthetic", "normalize", "mean", 0.5, 0.5,
        0.5, "std", 0.25, 0.25, 0.25, "model", "resnet18", "optimizer",
        "type", "sgd", "lr", 0.01, "momentum", 0.9, "batch_size", 16,
        "epochs", 1, "seed", 1, "checkpoint", "every_steps", 5, "keep", 2,
        "at_epoch_end", 0, "metrics", "warmup_steps", 0, "window_steps", 10);
    td_job_spec spec;
    if (td_spec_parse(root, NULL, &spec, err, sizeof err)) {
        fprintf(stderr, "spec: %s\n", err);
        return 1;
    }
    json_decref(root);
    acc a = {.mu = PTHREAD_MUTEX_INITIALIZER};
    td_runner_opts o = {.spec = &spec, .models_dir = models, .ckpt_dir = dir,
                        .synthetic_steps = steps, .event = on_event,
                        .user = &a};
    td_runner *r;
    td_runner_result res;
    if (td_runner_create(&o, &r, err, sizeof err) ||
        td_runner_run(r, &res, err, sizeof err)) {
        fprintf(stderr, "run: %s\n", err);
        return 1;
    }
    td_runner_free(r);
    td_spec_free(&spec);
    double mc = td_median(a.ckpt, a.nckpt), mp = td_median(a.plain, a.nplain);
    double copy = td_median(a.copy, a.nckpt);
    double sc = 0, sp = 0;
    for (int i = 0; i < a.nckpt; i++)
        sc += a.ckpt[i];
    for (int i = 0; i < a.nplain; i++)
        sp += a.plain[i];
    printf("resnet18 32x32 batch 16, %d steps, checkpoint every 5 steps "
           "(94 MB snapshots): %d written, %d failed, %lld skipped\n", steps,
           a.written, a.failed, (long long)res.checkpoints_skipped);
    printf("step time: %.1f ms on checkpoint steps (%d), %.1f ms on the "
           "others (%d): %.3fx (target <= 1.05x)\n", mc * 1e3, a.nckpt,
           mp * 1e3, a.nplain, mc / mp);
    printf("means: %.1f ms vs %.1f ms: %.3fx\n", sc / a.nckpt * 1e3,
           sp / a.nplain * 1e3, (sc / a.nckpt) / (sp / a.nplain));
    printf("trainer time per checkpoint (snapshot + hand-off): %.1f ms "
           "median\n", copy * 1e3);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return 0;
}
