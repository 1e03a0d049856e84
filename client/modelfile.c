/* modelfile.c - the model trainctl's export, eval and predict work on
 * (see modelfile.h).
 * Owns: source resolution and loading.  Never: writes files.
 */
#include "modelfile.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "commands.h"
#include "conn.h"
#include "store/checkpoint.h"
#include "store/weights.h"

/* The newest checkpoint of job `id`, from the daemon. */
static int td__job_ckpt(const td_cli *cli, const char *src, char *path,
                        size_t cap)
{
    td_conn c;
    int64_t id = td_cli_job_id(cli, src);
    if (id < 0)
        return TD_EXIT_USAGE;
    int rc = td_conn_open(&c, td_cli_socket(cli->socket));
    if (rc)
        return rc;
    json_t *r = td_conn_request(&c, "show",
                                json_pack("{s:I}", "job", (json_int_t)id),
                                NULL, NULL);
    td_conn_close(&c);
    if (!r)
        return TD_EXIT_UNREACHABLE;
    if ((rc = td_conn_check(cli->cmd, r, cli->json)) != TD_EXIT_OK) {
        json_decref(r);
        return rc;
    }
    json_t *job = json_object_get(json_object_get(r, "ok"), "job");
    const char *p = json_string_value(json_object_get(
        json_object_get(job, "result"), "last_checkpoint"));
    /* A job not yet ended has no result: its newest checkpoint on disk
     * (it said "no checkpoint yet" beside show's list of them). */
    json_int_t best = -1;
    size_t i;
    json_t *ck;
    json_array_foreach(json_object_get(job, "checkpoints"), i, ck) {
        json_int_t step = json_integer_value(json_object_get(ck, "step"));
        const char *cp = json_string_value(json_object_get(ck, "path"));
        if (!(p && p[0]) && cp && cp[0] && step > best) {
            best = step;
            snprintf(path, cap, "%s", cp);
        }
    }
    if (!(p && p[0]) && best < 0) {
        const char *state = json_string_value(json_object_get(job, "state"));
        rc = td_cli_refuse(cli, TD_ERR_CONFLICT, "job %lld has no checkpoint "
                           "yet (it is %s); give a checkpoint file",
                           (long long)id, state ? state : "?");
        json_decref(r);
        return rc;
    }
    if (p && p[0]) /* an ended job's last checkpoint */
        snprintf(path, cap, "%s", p);
    json_decref(r);
    return 0;
}

static int td__looks_like_job(const char *s)
{
    if (*s == '#')
        s++;
    if (!*s)
        return 0;
    for (; *s; s++)
        if (!isdigit((unsigned char)*s))
            return 0;
    return 1;
}

static int td__fail(const td_cli *cli, const char *path, const char *why)
{
    return td_cli_refuse(cli, TD_CLI_ERR_FAILED, "%s: %s", path, why);
}

/* src names a job, not a file. */
static int td__job_src(const char *src)
{
    struct stat st;
    return stat(src, &st) != 0 && td__looks_like_job(src);
}

/* A job still running prunes its checkpoints as it writes new ones: the
 * newest its record names can be gone by the time it is opened (its
 * record is saved at most once a second).  Asked again this many times,
 * TD__PRUNED_WAIT_US apart. */
#define TD__PRUNED_TRIES 5
#define TD__PRUNED_WAIT_US 300000

int td_cli_model_path(const td_cli *cli, const char *src, char *path,
                      size_t cap)
{
    if (!td__job_src(src)) {
        snprintf(path, cap, "%s", src);
        return 0;
    }
    for (int tries = 1;; tries++) {
        struct stat st;
        int rc = td__job_ckpt(cli, src, path, cap);
        if (rc || stat(path, &st) == 0 || tries == TD__PRUNED_TRIES)
            return rc; /* a missing one is named by its opener */
        usleep(TD__PRUNED_WAIT_US);
    }
}

int td_cli_model_open(const td_cli *cli, const char *src, td_cli_model *out)
{
    char err[600];
    td_ckpt_file *f = NULL;
    int rc;
    memset(out, 0, sizeof *out);
    for (int tries = 1;; tries++) { /* pruned between the two: again */
        if ((rc = td_cli_model_path(cli, src, out->path, sizeof out->path)))
            return rc;
        rc = td_st_open(out->path, &f, err, sizeof err);
        if (rc == 0)
            break;
        if (rc != -ENOENT || !td__job_src(src) || tries == TD__PRUNED_TRIES)
            return td_cli_refuse(cli, TD_CLI_ERR_FAILED, "%s", err);
        usleep(TD__PRUNED_WAIT_US);
    }
    if (td_model_meta_read(f, &out->meta, err, sizeof err)) {
        rc = td__fail(cli, out->path, err);
        goto fail;
    }
    if (td_model_build(out->meta.graph, out->meta.in, out->meta.classes,
                       &out->m, err, sizeof err)) {
        rc = td__fail(cli, out->path, err);
        goto fail;
    }
    out->params = malloc((out->m->param_count + 1) * sizeof(float));
    out->state = malloc((td_model_state_count(out->m) + 1) * sizeof(float));
    if (!out->params || !out->state) {
        rc = td__fail(cli, out->path, "out of memory");
        goto fail;
    }
    if (td_weights_load(out->m, f, 1, out->params, out->state, NULL, err,
                        sizeof err)) {
        rc = td__fail(cli, out->path, err);
        goto fail;
    }
    for (int L = 1; L < out->m->nlayers; L++)
        if (out->m->layers[L].kind == TD_L_BN) {
            char name[TD_NAME_MAX + 32];
            td_weights_bn_count_name(out->m, L, name, sizeof name);
            td_ckpt_file_read(f, name, TD_DT_I64, &out->nbt, 8, NULL, 0);
            break;
        }
    const char *step = td_ckpt_file_meta_str(f, "step");
    out->step = step ? strtoll(step, NULL, 10) : 0;
    td_ckpt_close(f);
    return 0;
fail:
    td_ckpt_close(f);
    td_cli_model_close(out);
    return rc;
}

void td_cli_model_close(td_cli_model *mf)
{
    td_model_free(mf->m);
    free(mf->params);
    free(mf->state);
    td_model_meta_free(&mf->meta);
    mf->m = NULL;
    mf->params = mf->state = NULL;
}
