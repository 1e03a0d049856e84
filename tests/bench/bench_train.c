/* bench_train.c - the compute ceiling: trains a zoo model on synthetic,
 * device-resident input and prints samples/s and GFLOP/s after warm-up.
 *
 *   bench_train [--model fmnist-cnn] [--batch 128] [--threads 2]
 *               [--steps 200] [--warmup 20] [--precision fp32|bf16]
 *               [--plan measure|fixed] [--json]
 * --plan: a bf16 plan's choices (layout, batch norms, kernels) timed at
 * create as a job's are
 * (measure, the default) or the fixed rules (docs/compute.md "Plan
 * choices by measurement").  Training FLOPs are counted as 3x the
 * forward FLOPs (forward, backward data, backward weights).  Prints
 * figures; never fails on speed.  With ONEDNN_VERBOSE set, a line
 * "bench_train: steps start" on stdout separates oneDNN's lines of the
 * plan (creation, timed choices) from the steps' (what
 * scripts/onednn_profile.py reads).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "job/train.h"

static void shape_of(const char *model, td_shape *in, int *classes)
{
    *in = (td_shape){3, 224, 224};
    *classes = 1000;
    if (strcmp(model, "fmnist-cnn") == 0) {
        *in = (td_shape){1, 28, 28};
        *classes = 10;
    } else if (strcmp(model, "resnet20") == 0) {
        *in = (td_shape){3, 32, 32};
        *classes = 10;
    }
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"model", required_argument, NULL, 'm'},
        {"batch", required_argument, NULL, 'b'},
        {"threads", required_argument, NULL, 't'},
        {"steps", required_argument, NULL, 's'},
        {"warmup", required_argument, NULL, 'w'},
        {"json", no_argument, NULL, 'j'},
        {"precision", required_argument, NULL, 'p'},
        {"plan", required_argument, NULL, 'l'},
        {NULL, 0, NULL, 0},
    };
    const char *model = "fmnist-cnn";
    int batch = 128, threads = 2, steps = 200, warmup = 20, json = 0, c;
    const char *prec = "fp32", *plan = "measure";
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 'b': batch = atoi(optarg); break;
        case 't': threads = atoi(optarg); break;
        case 's': steps = atoi(optarg); break;
        case 'w': warmup = atoi(optarg); break;
        case 'j': json = 1; break;
        case 'p': prec = optarg; break;
        case 'l': plan = optarg; break;
        default:
            fprintf(stderr, "usage: bench_train [--model M] [--batch B] "
                    "[--threads T] [--steps N] [--warmup W] "
                    "[--precision fp32|bf16] [--plan measure|fixed] "
                    "[--json]\n");
            return 2;
        }
    }
    char dir[4096], err[512] = "";
    const char *root = getenv("TD_SOURCE_ROOT");
    snprintf(dir, sizeof dir, "%s/config/models", root ? root : ".");
    td_shape in;
    int classes;
    shape_of(model, &in, &classes);
    td_model *m = NULL;
    td_trainer *t = NULL;
    if (td_model_load(dir, model, in, classes, &m, err, sizeof err)) {
        fprintf(stderr, "bench_train: %s (set TD_SOURCE_ROOT)\n", err);
        return 1;
    }
    td_train_config cfg = {
        .model = m, .device = "cpu", .epochs = 1, .synthetic = 1,
        .steps_per_epoch = warmup + steps, .warmup_steps = warmup,
        .backend = {.batch = batch, .threads = threads, .seed = 1,
                    .mean = {0.5f, 0.5f, 0.5f}, .std = {0.25f, 0.25f, 0.25f}}};
    if (strcmp(prec, "bf16") == 0) {
        cfg.backend.dtype = TD_BF16;
    } else if (strcmp(prec, "fp32") != 0) {
        fprintf(stderr, "bench_train: --precision %s: fp32 or bf16\n", prec);
        td_model_free(m);
        return 2;
    }
    if (strcmp(plan, "measure") == 0) {
        cfg.backend.plan = TD_PLAN_MEASURE;
    } else if (strcmp(plan, "fixed") != 0) {
        fprintf(stderr, "bench_train: --plan %s: measure or fixed\n", plan);
        td_model_free(m);
        return 2;
    }
    td_optim_defaults(&cfg.backend.optim, TD_OPT_SGD);
    cfg.backend.optim.lr = 0.01;
    cfg.backend.optim.weight_decay = 5e-4;
    td_train_result res;
    int rc = td_trainer_create(&cfg, &t, err, sizeof err);
    if (rc == 0 && getenv("ONEDNN_VERBOSE")) {
        printf("bench_train: steps start\n");
        fflush(stdout);
    }
    if (rc == 0)
        rc = td_trainer_run(t, NULL, NULL, NULL, &res, err, sizeof err);
    if (rc) {
        fprintf(stderr, "bench_train: %s\n", err);
    } else {
        double gf = res.samples_per_s * 3 * m->fwd_flops / 1e9;
        if (json)
            printf("{\"model\":\"%s\",\"precision\":\"%s\","
                   "\"batch\":%d,\"threads\":%d,"
                   "\"steps\":%d,\"warmup\":%d,\"samples_per_s\":%.1f,"
                   "\"gflop_per_s\":%.1f}\n", model, prec, batch, threads,
                   steps,
                   warmup, res.samples_per_s, gf);
        else
            printf("%s %s batch %d threads %d: %.1f samples/s, %.1f GFLOP/s "
                   "(%d steps after %d warm-up)\n", model, prec, batch, threads,
                   res.samples_per_s, gf, steps, warmup);
    }
    td_trainer_free(t);
    td_model_free(m);
    return rc ? 1 : 0;
}
