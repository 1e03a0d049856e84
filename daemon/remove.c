/* remove.c - an ended job taken off the disk and out of the table
 * (remove.h says what and in which order). */
#define _GNU_SOURCE
#include "remove.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/fsio.h"
#include "base/log.h"
#include "joblog.h"
#include "td_config.h"

typedef struct td_remove_req {
    uv_work_t work;
    td_daemon *d;
    td_job *job;          /* out of the table while its files go */
    int64_t last_id;      /* the highest id given so far */
    uint64_t freed;       /* bytes of the files removed */
    int committed;        /* the record was renamed: the job is gone */
    int rc;
    char err[9000];
} td_remove_req;

/* Removes path, adding its size to *freed; a missing file is fine. */
static int td__unlink_sized(const char *path, uint64_t *freed, char *err,
                            size_t errcap)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? 0 : -errno;
    if (unlink(path) != 0) {
        int rc = -errno;
        if (rc == -ENOENT)
            return 0;
        snprintf(err, errcap, "cannot remove %s: %s", path, td_strerror(rc));
        return rc;
    }
    *freed += (uint64_t)st.st_size;
    return 0;
}

/* The number in "<digits>.removing" (0: not such a name). */
static int64_t td__removing_id(const char *name)
{
    char *end;
    long long id = strtoll(name, &end, 10);
    return end != name && id > 0 && strcmp(end, ".removing") == 0 ? id : 0;
}

/* Everything of job `id` after its record was renamed to <id>.removing:
 * the checkpoints and their folder, the log, the crash counter, then the
 * renamed record.  0, or -errno with err naming the file. */
static int td__remove_rest(const char *state_dir, int64_t id,
                           uint64_t *freed, char *err, size_t errcap)
{
    char dir[3200], path[3600];
    int rc;
    snprintf(dir, sizeof dir, "%s/checkpoints/%" PRId64, state_dir, id);
    DIR *dp = opendir(dir);
    if (dp) {
        struct dirent *e;
        rc = 0;
        while (rc == 0 && (e = readdir(dp))) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            rc = td__unlink_sized(path, freed, err, errcap);
        }
        closedir(dp);
        if (rc)
            return rc;
        if (rmdir(dir) != 0 && errno != ENOENT) {
            rc = -errno;
            snprintf(err, errcap, "cannot remove %s: %s", dir,
                     td_strerror(rc));
            return rc;
        }
    } else if (errno != ENOENT) {
        rc = -errno;
        snprintf(err, errcap, "cannot read %s: %s", dir, td_strerror(rc));
        return rc;
    }
    static const char *const ext[] = {"log", "starts", "removing"};
    for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++) {
        snprintf(path, sizeof path, "%s/jobs/%" PRId64 ".%s", state_dir, id,
                 ext[i]);
        if ((rc = td__unlink_sized(path, freed, err, errcap)))
            return rc;
    }
    snprintf(dir, sizeof dir, "%s/jobs", state_dir);
    td_fsync_dir(dir, NULL);
    return 0;
}

/* The id in state_dir/jobs/last-id (its path in path): 0 when there is
 * none, -1 when it holds something else. */
static long long td__last_id(const char *state_dir, char *path, size_t cap)
{
    snprintf(path, cap, "%s/jobs/last-id", state_dir);
    FILE *f = fopen(path, "re");
    long long id = 0;
    if (f) {
        if (fscanf(f, "%lld", &id) != 1 || id < 0)
            id = -1;
        fclose(f);
    }
    return id;
}

/* state_dir/jobs/last-id: the highest id given, raised to at least id. */
static int td__raise_last_id(const char *state_dir, int64_t id, char *err,
                             size_t errcap)
{
    char path[3300], text[32];
    if (td__last_id(state_dir, path, sizeof path) >= id)
        return 0;
    int n = snprintf(text, sizeof text, "%" PRId64 "\n", id);
    return td_write_atomic(path, 0600, text, (size_t)n, NULL, err, errcap);
}

static void td__remove_work(uv_work_t *w)
{
    td_remove_req *r = w->data;
    const char *sd = r->d->state_dir;
    int64_t id = r->job->id;
    char from[3300], to[3300], dir[3200];
    if ((r->rc = td__raise_last_id(sd, r->last_id, r->err, sizeof r->err)))
        return;
    snprintf(dir, sizeof dir, "%s/jobs", sd);
    snprintf(from, sizeof from, "%s/%" PRId64 ".json", dir, id);
    snprintf(to, sizeof to, "%s/%" PRId64 ".removing", dir, id);
    struct stat st;
    if (stat(from, &st) == 0)
        r->freed += (uint64_t)st.st_size;
    if (rename(from, to) != 0 && errno != ENOENT) {
        r->rc = -errno;
        snprintf(r->err, sizeof r->err, "cannot rename %s: %s", from,
                 td_strerror(r->rc));
        return;
    }
    if ((r->rc = td_fsync_dir(dir, NULL))) {
        snprintf(r->err, sizeof r->err, "fsync %s: %s", dir,
                 td_strerror(r->rc));
        return; /* renamed, but the name may not last: not gone yet */
    }
    r->committed = 1;
    r->rc = td__remove_rest(sd, id, &r->freed, r->err, sizeof r->err);
}

static void td__remove_done(uv_work_t *w, int status)
{
    td_remove_req *r = w->data;
    td_daemon *d = r->d;
    td_job *j = r->job;
    if (status < 0 && !r->rc) {
        r->rc = status;
        snprintf(r->err, sizeof r->err, "%s", td_strerror(status));
    }
    td_client *c = td_server_client(d, j->remove_client);
    char *line;
    if (!r->committed) {
        /* Nothing is gone: the job is back as it was. */
        j->removing = 0;
        j->persist_busy = 0;
        td_jobs_insert(&d->jobs, j);
        td_error("job %lld: cannot remove it: %s", (long long)j->id, r->err);
        char m[9200];
        snprintf(m, sizeof m, "job %lld was not removed: %s",
                 (long long)j->id, r->err);
        line = td_proto_error(j->remove_req, TD_ERR_INTERNAL, m);
        json_decref(j->remove_req); /* a later remove sets its own */
        j->remove_req = NULL;
    } else if (r->rc) {
        td_error("job %lld: removed, but %s; traind tries again at its next "
                 "start", (long long)j->id, r->err);
        char m[9200];
        snprintf(m, sizeof m, "job %lld is removed, but %s; traind tries "
                 "again at its next start", (long long)j->id, r->err);
        line = td_proto_error(j->remove_req, TD_ERR_INTERNAL, m);
    } else {
        td_info("job %lld removed (%" PRIu64 " bytes freed)",
                (long long)j->id, r->freed);
        line = td_proto_ok(j->remove_req,
                           json_pack("{s:I, s:b, s:I}", "job",
                                     (json_int_t)j->id, "removed", 1,
                                     "freed_bytes", (json_int_t)r->freed));
    }
    if (c && line)
        td_client_send(c, line);
    else
        free(line);
    if (r->committed)
        td_job_free(j); /* its remove_req too */
    free(r);
}

void td_remove_start(td_daemon *d, td_job *j)
{
    td_remove_req *r = calloc(1, sizeof *r);
    if (!r) {
        td_error("job %lld: out of memory removing it", (long long)j->id);
        return;
    }
    r->d = d;
    r->job = j;
    r->last_id = d->jobs.next_id - 1;
    td_joblog_forget(d->joblog, j->id); /* its kept lines go with its log */
    r->work.data = r;
    td_jobs_unlink(&d->jobs, j); /* no command or event finds it now */
    j->persist_busy = 1;          /* and no record write starts */
    int rc = uv_queue_work(d->loop, &r->work, td__remove_work,
                           td__remove_done);
    if (rc) {
        snprintf(r->err, sizeof r->err, "cannot queue the removal: %s",
                 uv_strerror(rc));
        r->rc = -EIO;
        td__remove_done(&r->work, 0);
    }
}

void td_remove_job(td_daemon *d, td_job *j, uint64_t client, json_t *req_id)
{
    j->removing = 1;
    j->remove_client = client;
    j->remove_req = json_incref(req_id);
    /* Starts now, or once the record write under way has finished. */
    td_daemon_persist_job(d, j);
}

/* 1 if a string anywhere in v starts with prefix. */
static int td__names(const json_t *v, const char *prefix, size_t n)
{
    const char *k;
    const json_t *x;
    size_t i;
    switch (json_typeof(v)) {
    case JSON_STRING:
        return strncmp(json_string_value(v), prefix, n) == 0;
    case JSON_OBJECT:
        json_object_foreach((json_t *)v, k, x) if (td__names(x, prefix, n))
            return 1;
        return 0;
    case JSON_ARRAY:
        json_array_foreach(v, i, x) if (td__names(x, prefix, n)) return 1;
        return 0;
    default:
        return 0;
    }
}

const td_job *td_remove_needed_by(const td_daemon *d, const td_job *j)
{
    char prefix[3300];
    int n = snprintf(prefix, sizeof prefix, "%s/checkpoints/%lld/",
                     d->state_dir, (long long)j->id);
    for (const td_job *k = d->jobs.head; k; k = k->next)
        if (k != j && !td_job_state_final(k->state) &&
            td__names(k->spec, prefix, (size_t)n))
            return k;
    return NULL;
}

void td_remove_recover(td_daemon *d)
{
    char dir[3200], path[3300], err[9000];
    snprintf(dir, sizeof dir, "%s/jobs", d->state_dir);
    long long last = td__last_id(d->state_dir, path, sizeof path);
    if (last < 0)
        td_warn("%s: not a job id; ignored", path);
    if (last >= d->jobs.next_id)
        d->jobs.next_id = last + 1;
    DIR *dp = opendir(dir);
    if (!dp)
        return;
    struct dirent *e;
    while ((e = readdir(dp))) {
        int64_t id = td__removing_id(e->d_name);
        if (!id)
            continue;
        uint64_t freed = 0;
        if (td__remove_rest(d->state_dir, id, &freed, err, sizeof err))
            td_error("job %lld: finishing its removal: %s", (long long)id,
                     err);
        else
            td_info("job %lld: finished its removal, which a stop "
                    "interrupted (%" PRIu64 " bytes freed)", (long long)id,
                    freed);
        if (id >= d->jobs.next_id)
            d->jobs.next_id = id + 1;
    }
    closedir(dp);
}

void td_remove_set_aside(td_daemon *d, const char *path, const char *name,
                         const char *why)
{
    char *end;
    long long id = strtoll(name, &end, 10);
    if (id <= 0 || strcmp(end, ".json") != 0) {
        td_warn("ignoring %s: %s", path, why);
        return;
    }
    char aside[4200];
    snprintf(aside, sizeof aside, "%s.corrupt", path);
    if (rename(path, aside) != 0) {
        td_error("job %lld: its record %s cannot be read (%s) nor set aside "
                 "(%s); id %lld is not given again", id, path, why,
                 strerror(errno), id);
        snprintf(aside, sizeof aside, "%s", path);
    } else {
        td_error("job %lld: its record %s cannot be read (%s); kept as %s, "
                 "with its log and checkpoints where they are; id %lld is "
                 "not given again", id, path, why, aside, id);
    }
    if (id >= d->jobs.next_id)
        d->jobs.next_id = id + 1;
}
