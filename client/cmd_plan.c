/* cmd_plan.c - `trainctl plan`: the device memory a job will need, before
 * submitting it (lib/backend/memplan.h).  Runs locally, needs no daemon and
 * no GPU: it reads the zoo model and prints the bill of the CUDA backend's
 * one device allocation for a batch and a precision, next to what the same
 * job needs in fp32 with one buffer per layer (the layout before the plan).
 * In fp16 the activations include the reserve spaces of the batch norms
 * the backend fuses with cuDNN (td_memplan_fp16_bn_reserves).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/memplan.h"
#include "base/error.h"
#include "cli.h"
#include "commands.h"
#include "conn.h"
#include "model/model.h"
#include "model/zoo.h"

static const char plan_usage[] =
    "usage: trainctl plan MODEL [--batch N] [--precision P] [--input CxHxW]\n"
    "                     [--classes N] [--optimizer sgd|momentum|adamw]\n"
    "                     [--workspace-mib N] [--json]\n"
    "\n"
    "Prints the device memory the CUDA backend allocates for MODEL (a zoo\n"
    "name such as resnet50, or a model .json file) at a batch size and a\n"
    "precision: parameters, gradients, optimizer state, the low-precision\n"
    "weight copy, activations and their gradients (placed by liveness, ReLU\n"
    "in place), batch buffers, workspaces, the step's scratch and headroom,\n"
    "beside the fp32 layout that keeps every layer's buffers for the whole\n"
    "step.  Pick a batch that fits your card before submitting.  Needs no\n"
    "GPU.\n"
    "\n"
    "  --batch N          batch size (default 128)\n"
    "  --precision P      fp32, tf32, bf16 or fp16 (default bf16)\n"
    "  --input CxHxW      input shape (default 3x224x224)\n"
    "  --classes N        classes (default 1000)\n"
    "  --optimizer O      sgd (no state), momentum (1 slot), adamw (2);\n"
    "                     default momentum\n"
    "  --workspace-mib N  cuDNN workspace to assume (default 256; the\n"
    "                     backend logs the real figure at job start)\n"
    "\n"
    "Exit status: 0 printed, 1 the model could not be built, 2 usage.\n";

static int td__num(const char *s, long lo, long hi, long *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (!*s || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static json_t *td__bill(const td_memplan *p)
{
    return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, "
                     "s:I, s:I}",
                     "params", (json_int_t)p->params, "grads",
                     (json_int_t)p->grads, "optimizer", (json_int_t)p->optim,
                     "weights_low_precision", (json_int_t)p->weights_lp,
                     "bn_state", (json_int_t)p->state, "snapshot_shadow",
                     (json_int_t)p->shadow, "batch_buffers",
                     (json_int_t)p->batches, "activations",
                     (json_int_t)p->activations, "workspace",
                     (json_int_t)p->workspace, "scratch",
                     (json_int_t)p->scratch, "headroom",
                     (json_int_t)p->headroom, "total",
                     (json_int_t)p->total);
}

static void td__row(const char *what, size_t a, size_t b)
{
    printf("  %-26s %12.1f %12.1f\n", what, (double)a / (1 << 20),
           (double)b / (1 << 20));
}

int td_cmd_plan(int argc, char **argv)
{
    const char *batch_s = "128", *prec = "bf16", *input = "3x224x224",
               *classes_s = "1000", *opt = "momentum", *ws_s = "256";
    td_cli_flag flags[] = {
        {"--batch", NULL, 1, &batch_s, NULL, NULL},
        {"--precision", NULL, 1, &prec, NULL, NULL},
        {"--input", NULL, 1, &input, NULL, NULL},
        {"--classes", NULL, 1, &classes_s, NULL, NULL},
        {"--optimizer", NULL, 1, &opt, NULL, NULL},
        {"--workspace-mib", NULL, 1, &ws_s, NULL, NULL},
        {NULL, NULL, 0, NULL, NULL, NULL},
    };
    td_cli cli = {.usage = plan_usage};
    int rc = td_cli_parse(&cli, argc, argv, flags, 1, 1);
    if (rc)
        return rc < 0 ? TD_EXIT_OK : rc;
    long batch, classes, ws;
    int c, h, w, slots, act;
    if (td__num(batch_s, 1, 65536, &batch))
        return td_cli_usage_error(&cli, "--batch: expected 1..65536, not "
                                  "'%s'", batch_s);
    if (td__num(classes_s, 2, 1000000, &classes))
        return td_cli_usage_error(&cli, "--classes: expected 2..1000000, "
                                  "not '%s'", classes_s);
    if (td__num(ws_s, 0, 1 << 20, &ws))
        return td_cli_usage_error(&cli, "--workspace-mib: expected 0..%d, "
                                  "not '%s'", 1 << 20, ws_s);
    int used = -1; /* the whole word: "3x224x224x9" is not a shape */
    if (sscanf(input, "%4dx%5dx%5d%n", &c, &h, &w, &used) != 3 ||
        input[used] || c < 1 || c > 4 || h < 1 || h > 8192 || w < 1 ||
        w > 8192)
        return td_cli_usage_error(&cli, "--input: expected CxHxW such as "
                                  "3x224x224, not '%s'", input);
    if (!strcmp(prec, "fp32") || !strcmp(prec, "tf32"))
        act = 4;
    else if (!strcmp(prec, "bf16") || !strcmp(prec, "fp16"))
        act = 2;
    else
        return td_cli_usage_error(&cli, "--precision: expected fp32, tf32, "
                                  "bf16 or fp16, not '%s'", prec);
    if (!strcmp(opt, "sgd"))
        slots = 0;
    else if (!strcmp(opt, "momentum"))
        slots = 1;
    else if (!strcmp(opt, "adamw"))
        slots = 2;
    else
        return td_cli_usage_error(&cli, "--optimizer: expected sgd, "
                                  "momentum or adamw, not '%s'", opt);

    char dir[4096], err[512];
    td_model *m = NULL;
    td_models_dir(NULL, dir, sizeof dir);
    td_shape in = {c, h, w};
    if ((rc = td_model_load(dir, cli.pos[0], in, (int)classes, &m, err,
                            sizeof err)) != 0)
        return td_cli_refuse(&cli, TD_CLI_ERR_FAILED, "%s", err);
    td_memplan_config pc = {
        .batch = (int)batch, .act_bytes = act, .optim_slots = slots,
        .reuse = 1, .nbuf = 2, .workspace = (size_t)ws << 20,
        .blas_workspace = (size_t)32 << 20, .headroom_min = (size_t)512 << 20,
    };
    td_memplan_config today = pc;
    today.act_bytes = 4;
    today.reuse = 0;
    /* fp16: the batch norms the backend fuses with cuDNN keep a reserve
     * space each from the fused forward to the fused backward (sized as
     * the simulated cuDNN does: memplan.h) */
    td_memplan plan, base;
    rc = td_memplan_build_host(m, &pc, !strcmp(prec, "fp16"), &plan, err,
                               sizeof err);
    if (rc == 0 &&
        (rc = td_memplan_build(m, &today, &base, err, sizeof err)) != 0)
        td_memplan_free(&plan);
    if (rc) {
        td_model_free(m);
        return td_cli_refuse(&cli, TD_CLI_ERR_FAILED, "%s", err);
    }
    double ratio = (double)plan.total / (double)base.total;
    if (cli.json) {
        json_t *o = json_pack("{s:s, s:I, s:s, s:[i,i,i], s:i, s:s, s:I, "
                              "s:o, s:o, s:f}", "model", m->name, "batch",
                              (json_int_t)batch, "precision", prec, "input",
                              c, h, w, "classes", (int)classes, "optimizer",
                              opt, "params", (json_int_t)m->param_count,
                              "plan", td__bill(&plan), "fp32_per_layer",
                              td__bill(&base), "ratio", ratio);
        td_print_json(o);
        json_decref(o);
    } else {
        printf("%s, batch %ld, %s, input %dx%dx%d, %ld classes, %s "
               "(%zu parameters)\n", m->name, batch, prec, c, h, w, classes,
               opt, m->param_count);
        printf("  %-26s %12s %12s\n", "MiB", "this plan", "fp32/layer");
        td__row("parameters (fp32)", plan.params, base.params);
        td__row("gradients", plan.grads, base.grads);
        td__row("optimizer state", plan.optim, base.optim);
        td__row("low-precision weights", plan.weights_lp, base.weights_lp);
        td__row("batch-norm statistics", plan.state, base.state);
        td__row("checkpoint shadow", plan.shadow, base.shadow);
        td__row("batch buffers (x2)", plan.batches, base.batches);
        td__row("activations + gradients", plan.activations,
                base.activations);
        td__row("workspaces", plan.workspace, base.workspace);
        td__row("step scratch", plan.scratch, base.scratch);
        td__row("headroom", plan.headroom, base.headroom);
        td__row("total", plan.total, base.total);
        printf("  this plan is %.0f%% of the fp32 one-buffer-per-layer "
               "layout\n", 100.0 * ratio);
        size_t nres = 0, rbytes = 0;
        for (int i = 0; i < plan.nbufs; i++)
            if (plan.bufs[i].kind == TD_MB_RESERVE)
                nres++, rbytes += plan.bufs[i].bytes;
        if (nres)
            printf("  the activations include %zu fused batch norms' "
                   "reserve spaces (cuDNN, fp16), %.1f KiB\n", nres,
                   (double)rbytes / 1024);
        printf("  the CUDA backend allocates all but the headroom, %.1f "
               "MiB, in one arena (with its real cuDNN\n  workspace) and "
               "keeps max(512 MiB, 1/32 of the GPU) free beside it\n",
               (double)(plan.total - plan.headroom) / (1 << 20));
        const double cards[] = {16, 24, 40, 80};
        for (int i = 0; i < 4; i++)
            printf("  a %2.0f GB card: %s\n", cards[i],
                   (double)plan.total <= cards[i] * 1e9 ? "fits"
                                                        : "does not fit");
    }
    td_memplan_free(&plan);
    td_memplan_free(&base);
    td_model_free(m);
    return TD_EXIT_OK;
}
