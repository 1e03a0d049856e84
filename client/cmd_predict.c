/* cmd_predict.c - `trainctl predict (CKPT | JOB) IMAGE... [--top K]`: the
 * top-K classes of each image with their probabilities, computed locally
 * on the CPU backend from the checkpoint alone (its metadata gives the
 * model, classes, input and preprocessing: docs/checkpoints.md).  Each
 * image goes through td_preprocess_jpeg (or td_preprocess_png for a PNG)
 * in evaluation form, the code the validation pass runs, so the prediction
 * is the validation pass's.  A file that cannot be read or is neither a
 * JPEG nor a PNG is named on stderr and the others go on; the exit code is
 * then 1.  With --daemon the same runs as a predict job of traind on its
 * device (infer_daemon.c) and prints the same.  On a terminal, stderr
 * shows the model loading and the images done between the lines, then
 * their count, time and rate (progress.h).
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
#include "infer_daemon.h"
#include "job/infer_run.h"
#include "modelfile.h"
#include "progress.h"

static const char td__usage[] =
    "usage: trainctl predict (CHECKPOINT | JOB) IMAGE... [--top K] [--json]\n"
    "                        [--daemon [--device D]] [--socket PATH]\n"
    "\n"
    "Classifies JPEG and PNG images with the model of a checkpoint or\n"
    "export (or a job's newest checkpoint), locally on the CPU, with the\n"
    "preprocessing of the job's validation pass.  Prints the top K classes\n"
    "(default 5) with their softmax probabilities, one line per image;\n"
    "--json prints {\"file\", \"top\": [{\"class\", \"label\", \"p\"}, ...]}\n"
    "per image.  A file that is unreadable or neither JPEG nor PNG is named\n"
    "on stderr ({\"file\", \"error\"} with --json) and the rest go on; the\n"
    "exit code is then 1.\n"
    "  -k, --top K      classes per image, 1..1000 (default 5)\n"
    "  --daemon         run it as a job of traind, on its device, queued with\n"
    "                   the other jobs; prints the same (at most 10000 images,\n"
    "                   each of which must exist)\n"
    "  --device D       with --daemon: auto (default), cpu, cuda or cuda:N\n";

typedef struct td__local {
    const td_cli *cli;
    td_progress pr; /* stderr on a terminal: images done */
} td__local;

static void td__item(void *user, const json_t *item)
{
    td__local *l = user;
    td_progress_clear(&l->pr); /* stdout may be the same terminal */
    td_infer_predict_print_item(item, l->cli->json, stdout, stderr);
    fflush(stdout);
}

static void td__progress(void *user, int64_t done, int64_t total)
{
    td__local *l = user;
    if (done < total) /* the last one gives way to the summary */
        td_progress_count(&l->pr, "predict", done, total, "images");
}

/* --daemon: a predict job; each entry printed with the file named as it
 * was given here (the job has absolute paths, in the same order). */
static int td__via_daemon(const td_cli *cli, const char *path, int top,
                          const char *device)
{
    char buf[4096];
    json_t *images = json_array(), *res = NULL;
    for (int i = 1; i < cli->npos; i++) {
        if (td_infer_absolute(cli->pos[i], buf, sizeof buf)) {
            json_decref(images);
            return td_cli_usage_error(cli, "%s: path too long", cli->pos[i]);
        }
        json_array_append_new(images, json_string(buf));
    }
    if (td_infer_absolute(path, buf, sizeof buf)) {
        json_decref(images);
        return td_cli_usage_error(cli, "%s: path too long", path);
    }
    json_t *spec = json_pack("{s:s, s:s, s:o, s:i, s:s}", "task", "predict",
                             "checkpoint", buf, "images", images, "top_k",
                             top, "device", device ? device : "auto");
    int rc = td_infer_via_daemon(cli, "predict", spec, &res);
    if (rc)
        return rc;
    json_t *list = json_object_get(res, "predictions");
    for (size_t i = 0; i < json_array_size(list); i++) {
        json_t *item = json_array_get(list, i);
        if ((int)i + 1 < cli->npos)
            json_object_set_new(item, "file",
                                json_string(cli->pos[i + 1]));
        td_infer_predict_print_item(item, cli->json, stdout, stderr);
    }
    rc = json_integer_value(json_object_get(res, "failed")) ? TD_EXIT_REFUSED
                                                           : TD_EXIT_OK;
    json_decref(res);
    return rc;
}

int td_cmd_predict(int argc, char **argv)
{
    const char *top_s = NULL, *device = NULL;
    int daemon = 0;
    td_cli_flag flags[] = {{"--top", "-k", 1, &top_s, NULL, NULL},
                           {"--daemon", NULL, 0, NULL, &daemon, NULL},
                           {"--device", NULL, 1, &device, NULL, NULL},
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
    if (device && !daemon)
        return td_cli_usage_error(&cli, "--device: only with --daemon (the "
                                  "local prediction runs on the CPU)");
    if ((rc = td_cli_model_path(&cli, cli.pos[0], path, sizeof path)))
        return rc;
    if (daemon)
        return td__via_daemon(&cli, path, top, device);
    td__local l = {.cli = &cli};
    td_progress_init(&l.pr);
    td_progress_show(&l.pr, 1, "predict: loading %s", path);
    td_infer_run_opts o = {.checkpoint = path, .device = "cpu",
                           .top_k = top, .item = td__item,
                           .progress = td__progress, .user = &l};
    if (td_infer_predict(&o, cli.pos + 1, cli.npos - 1, &res, err,
                         sizeof err)) {
        td_progress_clear(&l.pr);
        return td_cli_refuse(&cli, TD_CLI_ERR_FAILED, "%s", err);
    }
    td_progress_done(&l.pr, "predict", cli.npos - 1, "images");
    rc = json_integer_value(json_object_get(res, "failed")) ? TD_EXIT_REFUSED
                                                           : TD_EXIT_OK;
    json_decref(res);
    return rc;
}
