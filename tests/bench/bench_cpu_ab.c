/* bench_cpu_ab.c - A/B of two CPU backends of one zoo model, step by
 * step in one process: a backend switch read at plan time (e.g.
 * TD_CPU_BWDD: one arm planned with ENV=A, the other with ENV=B) and/or
 * the precision of each arm (fp32 or bf16, default bf16 for both) and/or
 * its plan (fixed rules or measured choices, cpu_tune.c).  The
 * two train alternately on the same synthetic batch; each step is timed.
 * A load burst on a shared machine then hits both arms alike (whole-run
 * A/B pairs are seconds apart and swing by 2x there).  Prints the median
 * step time of each arm and the median (min..max) of the per-pair ratios
 * A / B (> 1: B faster).
 *   bench_cpu_ab --env TD_CPU_BWDD --a 0 --b 1 [--model resnet20]
 *                [--steps 60] [--warmup 5] [--batch 128] [--threads 2]
 *   bench_cpu_ab --precision-a fp32 --precision-b bf16 [--model M] ...
 *   bench_cpu_ab --plan-b measure [--model M] ...
 * Never fails on speed.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "base/clock.h"
#include "base/log.h"
#include "benchutil.h"
#include "model/model.h"

/* "bf16 TD_CPU_BWDD=1", "bf16 measured", or "fp32" without a switch. */
static const char *label(char *buf, size_t cap, const char *prec,
                         const char *env, const char *val, const char *plan)
{
    snprintf(buf, cap, "%s%s%s%s%s%s", prec, env ? " " : "", env ? env : "",
             env ? "=" : "", env ? val : "",
             strcmp(plan, "measure") == 0 ? " measured" : "");
    return buf;
}

/* One arm: precision prec, plan ("fixed" or "measure"), planned with
 * env=val set (env NULL: none). */
static td_backend *make(const td_model *m, int batch, int threads,
                        const char *prec, const char *env, const char *val,
                        const char *plan)
{
    td_backend_config cfg = {.batch = batch, .threads = threads, .seed = 1,
                             .dtype = strcmp(prec, "fp32") == 0 ? TD_F32
                                                               : TD_BF16,
                             .mean = {0.5f, 0.5f, 0.5f},
                             .std = {0.25f, 0.25f, 0.25f},
                             .plan = strcmp(plan, "measure") == 0
                                         ? TD_PLAN_MEASURE
                                         : TD_PLAN_FIXED};
    td_optim_defaults(&cfg.optim, TD_OPT_SGD);
    td_backend *be = NULL;
    char err[256] = "";
    if (env)
        setenv(env, val, 1);
    int rc = td_backend_create("cpu", m, &cfg, &be, err, sizeof err);
    if (env)
        unsetenv(env);
    if (rc) {
        char l[160];
        fprintf(stderr, "bench_cpu_ab: %s: %s\n",
                label(l, sizeof l, prec, env, val, plan), err);
        exit(1);
    }
    return be;
}

static const char usage[] =
    "usage: bench_cpu_ab [--env NAME --a A --b B] [--precision-a fp32|bf16]\n"
    "                    [--precision-b fp32|bf16] [--plan-a fixed|measure]\n"
    "                    [--plan-b fixed|measure] [--model M] [--steps S]\n"
    "                    [--warmup W] [--batch B] [--threads T] [--debug]\n"
    "Two CPU backends of model M (resnet20 or fmnist-cnn; default resnet20)\n"
    "train alternately, step by step, on one synthetic batch: arm A planned\n"
    "with NAME=A, precision-a and plan-a, arm B with NAME=B, precision-b\n"
    "and plan-b (bf16 and the fixed rules by default; measure: the plan's\n"
    "choices (layout, batch norms, kernels) timed at create; --debug logs\n"
    "their times and the plans).  Prints each arm's median step and the median\n"
    "(min..max) of the per-step ratios A / B (> 1: B faster).  Exit status:\n"
    "0 done, 1 a backend or step failed, 2 bad arguments.\n";

static int prec_ok(const char *p)
{
    return strcmp(p, "fp32") == 0 || strcmp(p, "bf16") == 0;
}

static int plan_ok(const char *p)
{
    return strcmp(p, "fixed") == 0 || strcmp(p, "measure") == 0;
}

int main(int argc, char **argv)
{
    const char *model = "resnet20", *env = NULL, *va = NULL, *vb = NULL;
    const char *pa = "bf16", *pb = "bf16", *la_ = "fixed", *lb_ = "fixed";
    int steps = 60, warmup = 5, batch = 128, threads = 2;
    static const struct option opts[] = {
        {"model", required_argument, NULL, 'm'},
        {"env", required_argument, NULL, 'e'},
        {"a", required_argument, NULL, 'a'},
        {"b", required_argument, NULL, 'b'},
        {"steps", required_argument, NULL, 's'},
        {"warmup", required_argument, NULL, 'w'},
        {"batch", required_argument, NULL, 'n'},
        {"threads", required_argument, NULL, 't'},
        {"precision-a", required_argument, NULL, 'p'},
        {"precision-b", required_argument, NULL, 'q'},
        {"plan-a", required_argument, NULL, 'x'},
        {"plan-b", required_argument, NULL, 'y'},
        {"debug", no_argument, NULL, 'd'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    for (int o; (o = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        switch (o) {
        case 'm': model = optarg; break;
        case 'e': env = optarg; break;
        case 'a': va = optarg; break;
        case 'b': vb = optarg; break;
        case 's': steps = atoi(optarg); break;
        case 'w': warmup = atoi(optarg); break;
        case 'n': batch = atoi(optarg); break;
        case 't': threads = atoi(optarg); break;
        case 'p': pa = optarg; break;
        case 'q': pb = optarg; break;
        case 'x': la_ = optarg; break;
        case 'y': lb_ = optarg; break;
        case 'd': td_log_set_level(TD_LOG_DEBUG); break;
        case 'h': fputs(usage, stdout); return 0;
        default: fputs(usage, stderr); return 2;
        }
    }
    if ((env && (!va || !vb)) || (!env && (va || vb)) ||
        (!env && strcmp(pa, pb) == 0 && strcmp(la_, lb_) == 0) ||
        !prec_ok(pa) || !prec_ok(pb) || !plan_ok(la_) || !plan_ok(lb_) ||
        steps < 1 || batch < 1) {
        fputs("bench_cpu_ab: give --env NAME with --a and --b, or two "
              "different precisions (fp32, bf16) or plans (fixed, "
              "measure)\n", stderr);
        fputs(usage, stderr);
        return 2;
    }
    int fm = strcmp(model, "fmnist-cnn") == 0;
    td_shape in = fm ? (td_shape){1, 28, 28} : (td_shape){3, 32, 32};
    char dir[4096], err[512] = "";
    const char *root = getenv("TD_SOURCE_ROOT");
    snprintf(dir, sizeof dir, "%s/config/models", root ? root : ".");
    td_model *m = NULL;
    if (td_model_load(dir, model, in, 10, &m, err, sizeof err)) {
        fprintf(stderr, "bench_cpu_ab: %s (set TD_SOURCE_ROOT)\n", err);
        return 1;
    }
    td_backend *be[2] = {make(m, batch, threads, pa, env, va, la_),
                         make(m, batch, threads, pb, env, vb, lb_)};
    size_t px = (size_t)batch * in.c * in.h * in.w;
    uint8_t *pix = malloc(px);
    int32_t *lab = malloc((size_t)batch * sizeof *lab);
    double *t[2] = {malloc((size_t)steps * sizeof(double)),
                    malloc((size_t)steps * sizeof(double))};
    double *ratio = malloc((size_t)steps * sizeof *ratio);
    for (size_t i = 0; i < px; i++)
        pix[i] = (uint8_t)((i * 2654435761u) >> 24);
    for (int i = 0; i < batch; i++)
        lab[i] = i % 10;
    td_batch bt = {.data = pix, .labels = lab, .n = batch, .h = in.h,
                   .w = in.w, .c = in.c, .layout = TD_LAYOUT_NHWC};
    for (int s = 0; s < warmup + steps; s++)
        for (int k = 0; k < 2; k++) {
            int a = s % 2 ? 1 - k : k; /* alternate which arm goes first */
            int64_t t0 = td_now_ns();
            if (td_backend_upload(be[a], &bt) ||
                td_backend_train_step(be[a], 0.01f, s + 1)) {
                fprintf(stderr, "bench_cpu_ab: step failed: %s\n",
                        be[a]->err);
                return 1;
            }
            if (s >= warmup)
                t[a][s - warmup] = td_elapsed_s(t0);
        }
    for (int s = 0; s < steps; s++)
        ratio[s] = t[0][s] / t[1][s];
    double lo = ratio[0], hi = ratio[0];
    for (int s = 1; s < steps; s++) {
        lo = ratio[s] < lo ? ratio[s] : lo;
        hi = ratio[s] > hi ? ratio[s] : hi;
    }
    double ma = td_median(t[0], steps), mb = td_median(t[1], steps);
    char la[160], lb[160];
    printf("%s batch %d threads %d, %d steps after %d warm-up: %s %.1f "
           "ms/step, %s %.1f ms/step, A/B %.3f; per pair %.3f "
           "(%.3f..%.3f)\n", model, batch, threads, steps, warmup,
           label(la, sizeof la, pa, env, va, la_), ma * 1e3,
           label(lb, sizeof lb, pb, env, vb, lb_), mb * 1e3, ma / mb,
           td_median(ratio, steps), lo, hi);
    td_backend_destroy(be[0]);
    td_backend_destroy(be[1]);
    td_model_free(m);
    free(pix);
    free(lab);
    free(t[0]);
    free(t[1]);
    free(ratio);
    return 0;
}
