/* cmd_predict.c - `trainctl predict (CKPT | JOB) IMAGE... [--top K]`: the
 * top-K classes of each image with their probabilities, computed locally
 * on the CPU backend from the checkpoint alone (its metadata gives the
 * model, classes, input and preprocessing: docs/checkpoints.md).  Each
 * image goes through td_preprocess_jpeg (or td_preprocess_png for a PNG)
 * in evaluation form, the code the validation pass runs, so the prediction
 * is the validation pass's.  A file that cannot be read or is neither a
 * JPEG nor a PNG is named on stderr and the others go on; the exit code is
 * then 1.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "cli.h"
#include "commands.h"
#include "conn.h"
#include "job/infer_run.h"
#include "modelfile.h"

static const char td__usage[] =
    "usage: trainctl predict (CHECKPOINT | JOB) IMAGE... [--top K] [--json]\n"
    "\n"
    "Classifies JPEG and PNG images with the model of a checkpoint or\n"
    "export (or a job's newest checkpoint), locally on the CPU, with the\n"
    "preprocessing of the job's validation pass.  Prints the top K classes\n"
    "(default 5) with their softmax probabilities, one line per image;\n"
    "--json prints {\"file\", \"top\": [{\"class\", \"label\", \"p\"}, ...]}\n"
    "per image.  A file that is unreadable or neither JPEG nor PNG is named\n"
    "on stderr ({\"file\", \"error\"} with --json) and the rest go on; the\n"
    "exit code is then 1.\n";

static void td__item(void *user, const json_t *item)
{
    const td_cli *cli = user;
    td_infer_predict_print_item(item, cli->json, stdout, stderr);
}

int td_cmd_predict(int argc, char **argv)
{
    const char *top_s = NULL;
    td_cli_flag flags[] = {{"--top", "-k", 1, &top_s, NULL, NULL},
                           {NULL, NULL, 0, NULL, NULL, NULL}};
    td_cli cli = {.usage = td__usage};
    char path[4096], err[1200];
    int top = 5;
    json_t *res = NULL;
    int rc = td_cli_parse(&cli, argc, argv, flags, 2, TD_CLI_MAX_POS);
    if (rc)
        return rc < 0 ? TD_EXIT_OK : rc;
    if (top_s) {
        char *end;
        long k = strtol(top_s, &end, 10);
        if (*end || end == top_s || k < 1 || k > 1000)
            return td_cli_usage_error(&cli, "--top: expected 1..1000, not "
                                      "'%s'", top_s);
        top = (int)k;
    }
    if ((rc = td_cli_model_path(&cli, cli.pos[0], path, sizeof path)))
        return rc;
    td_infer_run_opts o = {.checkpoint = path, .device = "cpu",
                           .top_k = top, .item = td__item, .user = &cli};
    if (td_infer_predict(&o, cli.pos + 1, cli.npos - 1, &res, err,
                         sizeof err)) {
        fprintf(stderr, "trainctl predict: %s\n", err);
        return TD_EXIT_REFUSED;
    }
    rc = json_integer_value(json_object_get(res, "failed")) ? TD_EXIT_REFUSED
                                                           : TD_EXIT_OK;
    json_decref(res);
    return rc;
}
