/* cmd_export.c - `trainctl export (CKPT | JOB) -o OUT [--format F]`: the
 * weights of a checkpoint (or of a job's newest checkpoint) for other
 * tools, without the optimizer state:
 *   safetensors  parameters, running statistics and num_batches_tracked
 *                under PyTorch's names (a zoo resnet loads into
 *                torchvision with strict=True), plus the self-describing
 *                metadata, so predict and eval take it like a checkpoint
 *   onnx         the graph and weights, opset 13, normalisation folded in
 *                (lib/store/onnx.h: input "pixels" 0..255 RGB NCHW float,
 *                output "logits")
 * Runs locally: reads the file, writes OUT.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "commands.h"
#include "conn.h"
#include "modelfile.h"
#include "store/onnx.h"
#include "store/weights.h"

static const char td__usage[] =
    "usage: trainctl export (CHECKPOINT | JOB) -o OUT [--format FORMAT]\n"
    "                       [--json] [--socket PATH]\n"
    "\n"
    "Writes the model of a checkpoint (or of a job's newest checkpoint,\n"
    "asked of the daemon) without its optimizer state:\n"
    "  -o, --output OUT      the file to write, required\n"
    "  --format safetensors  (default) weights under PyTorch's names (the\n"
    "                        zoo's resnet18/50: torchvision's state_dict,\n"
    "                        loads with strict=True) and the model's\n"
    "                        metadata, for predict/eval or other tools\n"
    "  --format onnx         ONNX, opset 13: input \"pixels\" float32\n"
    "                        [N, C, H, W], RGB values 0..255 after the\n"
    "                        evaluation preprocessing (normalisation folded\n"
    "                        in); output \"logits\" [N, classes]\n"
    "See docs/checkpoints.md.\n";

int td_cmd_export(int argc, char **argv)
{
    const char *out = NULL, *format = "safetensors";
    td_cli_flag flags[] = {{"--output", "-o", 1, &out, NULL, NULL},
                           {"--format", NULL, 1, &format, NULL, NULL},
                           {NULL, NULL, 0, NULL, NULL, NULL}};
    td_cli cli = {.usage = td__usage};
    td_cli_model mf;
    char err[600];
    int rc = td_cli_parse(&cli, argc, argv, flags, 1, 1);
    if (rc)
        return rc < 0 ? TD_EXIT_OK : rc;
    int onnx = strcmp(format, "onnx") == 0;
    if (!onnx && strcmp(format, "safetensors") != 0)
        return td_cli_usage_error(&cli, "--format: safetensors or onnx, not "
                                  "'%s'", format);
    if (!out)
        return td_cli_usage_error(&cli, "-o OUT is required");
    if ((rc = td_cli_model_open(&cli, cli.pos[0], &mf)))
        return rc;
    json_t *meta = td_model_meta_to_json(&mf.meta);
    if (!meta)
        rc = -ENOMEM;
    else if (onnx)
        rc = td_onnx_save(mf.m, mf.params, mf.state, mf.meta.mean,
                          mf.meta.std, meta, out, err, sizeof err);
    else
        rc = td_weights_save(mf.m, mf.params, mf.state, mf.nbt, meta, out,
                             err, sizeof err);
    json_decref(meta);
    if (rc) {
        td_cli_model_close(&mf);
        return td_cli_refuse(&cli, TD_CLI_ERR_FAILED, "%s",
                             rc == -ENOMEM ? "out of memory" : err);
    }
    struct stat st;
    long long bytes = stat(out, &st) == 0 ? (long long)st.st_size : -1;
    if (cli.json) {
        json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:I, s:I, s:I, s:i}",
                              "source", mf.path, "output", out, "format",
                              format, "model",
                              mf.m->name, "step", (json_int_t)mf.step,
                              "params", (json_int_t)mf.m->param_count,
                              "bytes", (json_int_t)bytes, "classes",
                              mf.m->classes);
        if (onnx)
            json_object_set_new(o, "opset", json_integer(TD_ONNX_OPSET));
        td_print_json(o);
        json_decref(o);
    } else {
        printf("%s (%s, step %lld, %zu parameters, %d classes) -> %s: %s",
               mf.path, mf.m->name, (long long)mf.step, mf.m->param_count,
               mf.m->classes, out, format);
        if (onnx)
            printf(" opset %d", TD_ONNX_OPSET);
        printf(", %.1f MB\n", (double)bytes / 1e6);
    }
    td_cli_model_close(&mf);
    return TD_EXIT_OK;
}
