/* cmd_eval.c - `trainctl eval (CKPT | JOB) DATA`: top-1, top-5, per-class
 * accuracy and the confusion matrix of a checkpoint's model on a dataset,
 * locally on the CPU backend.  The dataset goes through the input
 * pipeline in evaluation mode with the checkpoint's preprocessing, exactly
 * as the job's validation pass does.  With --daemon the same runs as an
 * eval job of traind on its device (infer_daemon.c) and prints the same.
 * On a terminal, stderr shows the model loading and the images done, then
 * their count, time and rate (progress.h).
 */
#include <errno.h>
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
    "usage: trainctl eval (CHECKPOINT | JOB) DATA [--batch N] [--workers N]\n"
    "                     [--daemon [--device D]] [--json] [--socket PATH]\n"
    "\n"
    "Evaluates the model of a checkpoint or export (or a job's newest\n"
    "checkpoint) on DATA (an ImageFolder, a directory of shards, a shard or\n"
    "a glob, as data.val takes), locally on the CPU, with the preprocessing\n"
    "of the job's validation pass: top-1 and top-5 accuracy, per-class\n"
    "accuracy and the confusion matrix (rows: true class, columns:\n"
    "predicted; printed up to 20 classes, always in --json).\n"
    "  -b, --batch N    images per forward pass (default 32)\n"
    "  --workers N      decode threads (default 2)\n"
    "  --daemon         run it as a job of traind, on its device, queued with\n"
    "                   the other jobs; prints the same (paths made absolute)\n"
    "  --device D       with --daemon: auto (default), cpu, cuda or cuda:N\n";

static int td__int_flag(td_cli *cli, const char *name, const char *s,
                        int lo, int hi, int *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || end == s || v < lo || v > hi)
        return td_cli_usage_error(cli, "%s: expected %d..%d, not '%s'", name,
                                  lo, hi, s);
    *out = (int)v;
    return 0;
}

static void td__progress(void *user, int64_t done, int64_t total)
{
    td_progress_count(user, "eval", done, total, "images");
}

int td_cmd_eval(int argc, char **argv)
{
    const char *batch_s = NULL, *workers_s = NULL, *device = NULL;
    int daemon = 0;
    td_cli_flag flags[] = {{"--batch", "-b", 1, &batch_s, NULL, NULL},
                           {"--workers", NULL, 1, &workers_s, NULL, NULL},
                           {"--daemon", NULL, 0, NULL, &daemon, NULL},
                           {"--device", NULL, 1, &device, NULL, NULL},
                           {NULL, NULL, 0, NULL, NULL, NULL}};
    td_cli cli = {.usage = td__usage};
    char path[4096], err[1200];
    int batch = 32, workers = 2;
    json_t *res = NULL;
    int rc = td_cli_parse(&cli, argc, argv, flags, 2, 2);
    if (rc)
        return rc < 0 ? TD_EXIT_OK : rc;
    if ((batch_s && (rc = td__int_flag(&cli, "--batch", batch_s, 1, 4096,
                                       &batch))) ||
        (workers_s && (rc = td__int_flag(&cli, "--workers", workers_s, 1, 64,
                                         &workers))))
        return rc;
    if (device && !daemon)
        return td_cli_usage_error(&cli, "--device: only with --daemon (the "
                                  "local evaluation runs on the CPU)");
    if ((rc = td_cli_model_path(&cli, cli.pos[0], path, sizeof path)))
        return rc;
    if (daemon) {
        char ck[4096], data[4096];
        if (td_infer_absolute(path, ck, sizeof ck) ||
            td_infer_absolute(cli.pos[1], data, sizeof data))
            return td_cli_usage_error(&cli, "a path is too long");
        json_t *spec = json_pack("{s:s, s:s, s:s, s:s, s:i, s:i}", "task",
                                 "eval", "checkpoint", ck, "data", data,
                                 "device", device ? device : "auto",
                                 "batch_size", batch, "workers", workers);
        if ((rc = td_infer_via_daemon(&cli, "eval", spec, &res)))
            return rc;
        /* printed as the local command prints it: the path as given */
        json_object_set_new(res, "checkpoint", json_string(path));
        td_infer_eval_print(res, cli.json, stdout);
        json_decref(res);
        return TD_EXIT_OK;
    }
    /* on a terminal: the model loading, then images done (stderr) */
    td_progress pr;
    td_progress_init(&pr);
    td_progress_show(&pr, 1, "eval: loading %s", path);
    td_infer_run_opts o = {.checkpoint = path, .device = "cpu",
                           .batch = batch, .workers = workers,
                           .progress = td__progress, .user = &pr};
    if (td_infer_eval(&o, cli.pos[1], &res, err, sizeof err)) {
        td_progress_clear(&pr);
        return td_cli_refuse(&cli, TD_CLI_ERR_FAILED, "%s", err);
    }
    td_progress_done(&pr, "eval", json_integer_value(json_object_get(
                                      res, "samples")), "images");
    td_infer_eval_print(res, cli.json, stdout);
    json_decref(res);
    return TD_EXIT_OK;
}
