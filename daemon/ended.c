/* ended.c - ended jobs held lightly (see ended.h).
 *
 * Owns: the decision to shed an ended job's record from memory and the
 * reads of shed records for `show`.  Never: sheds a job whose record is
 * not known to be on disk as it is in memory, writes a shed job's record
 * (it has none in memory; an ended job does not change), reads a file on
 * the loop (the reads run on libuv's threadpool; the loop parses).
 */
#define _GNU_SOURCE
#include "ended.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/error.h"
#include "base/fsio.h"
#include "base/log.h"
#include "daemon.h"
#include "infer_jobs.h"
#include "reads.h"

/* Ended, and its record on disk as it is in memory: nothing left to
 * write (no write under way or held back, none failed, no removal). */
static int td__settled(const td_job *j)
{
    return j->shed ||
           (td_job_state_final(j->state) && !j->persist_busy &&
            !j->persist_dirty && !j->persist_lazy && !j->persist_failures &&
            !j->removing && !json_array_size(j->persist_waiters));
}

void td_ended_shed(td_daemon *d, td_job *j)
{
    (void)d;
    if (j->shed || !td__settled(j))
        return;
    if (td_job_shed(j, (int)td_job_task(j)))
        td_warn("job %lld: out of memory for its list row; its record "
                "stays in memory", (long long)j->id);
}

void td_ended_shed_all(td_daemon *d)
{
    for (td_job *j = d->jobs.head; j; j = j->next)
        td_ended_shed(d, j);
}

static int td__cmp_desc(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

int64_t td_ended_recent_floor(const char *jobs_dir, int n)
{
    DIR *dp = opendir(jobs_dir);
    int64_t *ids = NULL, floor = 0;
    size_t len = 0, cap = 0;
    struct dirent *e;
    while (dp && (e = readdir(dp))) {
        char *end;
        long long id = strtoll(e->d_name, &end, 10);
        if (id <= 0 || strcmp(end, ".json") != 0)
            continue;
        if (len == cap) {
            int64_t *m = realloc(ids, (cap = cap ? cap * 2 : 256) *
                                          sizeof *ids);
            if (!m)
                break;
            ids = m;
        }
        ids[len++] = id;
    }
    if (dp)
        closedir(dp);
    if (n > 0 && len >= (size_t)n) {
        qsort(ids, len, sizeof *ids, td__cmp_desc);
        floor = ids[n - 1];
    }
    free(ids);
    return floor;
}

/* ---- the row cache ---------------------------------------------------- */

/* A record's file as it was when its row was taken: any rewrite (a new
 * file renamed over it), edit or restore changes one of these. */
static int td__file_key(const struct stat *st, json_t *e)
{
    return json_integer_value(json_object_get(e, "size")) ==
               (json_int_t)st->st_size &&
           json_integer_value(json_object_get(e, "mtime_s")) ==
               (json_int_t)st->st_mtim.tv_sec &&
           json_integer_value(json_object_get(e, "mtime_ns")) ==
               (json_int_t)st->st_mtim.tv_nsec &&
           json_integer_value(json_object_get(e, "ino")) ==
               (json_int_t)st->st_ino;
}

int td_ended_cache_save(td_daemon *d, size_t *rows)
{
    char path[3200], err[512];
    size_t n = 0;
    json_t *all = json_object();
    int rc = all ? 0 : -ENOMEM;
    for (td_job *j = d->jobs.head; j && !rc; j = j->next) {
        if (!td__settled(j) || j->removing)
            continue;
        struct stat st;
        char name[32];
        snprintf(name, sizeof name, "%lld.json", (long long)j->id);
        snprintf(path, sizeof path, "%s/jobs/%s", d->state_dir, name);
        if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
            continue; /* not on disk after all: read in full next time */
        json_t *row = j->shed ? json_incref(j->row) : td_job_summary(j);
        json_t *e = row ? json_pack(
            "{s:I, s:I, s:I, s:I, s:i, s:o}", "size", (json_int_t)st.st_size,
            "mtime_s", (json_int_t)st.st_mtim.tv_sec, "mtime_ns",
            (json_int_t)st.st_mtim.tv_nsec, "ino", (json_int_t)st.st_ino,
            "task", (int)td_job_task(j), "row", row) : NULL;
        if (!e || json_object_set_new(all, name, e))
            rc = -ENOMEM;
        n++;
    }
    json_t *doc = rc ? NULL : json_pack("{s:s, s:O}", "format",
                                        TD_ENDED_CACHE_FORMAT, "rows", all);
    char *text = doc ? json_dumps(doc, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(doc);
    json_decref(all);
    snprintf(path, sizeof path, "%s/%s", d->state_dir, TD_ENDED_CACHE_FILE);
    if (!rc && !text)
        rc = -ENOMEM;
    if (!rc)
        rc = td_write_atomic(path, 0600, text, strlen(text), NULL, err,
                             sizeof err);
    else
        snprintf(err, sizeof err, "%s", td_strerror(rc));
    free(text);
    if (rc) {
        /* Only start-up's speed depends on it.  An older cache stays: its
         * rows are taken only for record files unchanged since, and a
         * removed job's is never looked up. */
        td_warn("cannot save the ended jobs' rows to %s (the next start "
                "reads the records of jobs ended since in full): %s", path,
                err);
        return rc;
    }
    if (rows)
        *rows = n;
    return 0;
}

json_t *td_ended_cache_load(const char *state_dir)
{
    char path[3200];
    json_error_t je;
    snprintf(path, sizeof path, "%s/%s", state_dir, TD_ENDED_CACHE_FILE);
    json_t *c = json_load_file(path, 0, &je);
    if (!c)
        return NULL; /* none yet (or unreadable: the records are) */
    json_t *rows = json_object_get(c, "rows");
    if (!json_is_object(rows) ||
        !json_is_string(json_object_get(c, "format")) ||
        strcmp(json_string_value(json_object_get(c, "format")),
               TD_ENDED_CACHE_FORMAT) != 0) {
        td_warn("ignoring %s: not a row cache of this traind (its records "
                "are read in full)", path);
        json_decref(c);
        return NULL;
    }
    json_incref(rows);
    json_decref(c);
    return rows;
}

td_job *td_ended_cache_take(json_t *cache, int dirfd, const char *name,
                            int64_t id)
{
    json_t *e = json_object_get(cache, name);
    json_t *row = json_object_get(e, "row");
    json_int_t task = json_integer_value(json_object_get(e, "task"));
    struct stat st;
    char err[256];
    if (!json_is_object(row) || fstatat(dirfd, name, &st, 0) != 0 ||
        !td__file_key(&st, e) || task < TD_TASK_TRAIN ||
        task > TD_TASK_PREDICT)
        return NULL; /* stale or odd: the record is read in full */
    td_job *j = td_job_from_row(row, err, sizeof err);
    if (j && (j->id != id || !td_job_state_final(j->state) ||
              !td_job_name_ok(j->name))) {
        td_job_free(j);
        return NULL;
    }
    if (j) {
        j->shed = 1;
        j->shed_task = (int)task;
        j->row = json_incref(row);
    }
    return j;
}

/* ---- show ------------------------------------------------------------- */

typedef struct td__show_req {
    uv_work_t work;
    td_daemon *d;
    uint64_t client;
    uid_t uid;               /* holds a td_reads slot */
    json_t *id;
    int64_t job;
    char name[128];
    char path[3200];
    char *text;              /* the file (worker), or NULL with err */
    size_t len;
    int err;
} td__show_req;

/* Reads the file only: parsed on the loop, whose allocator the parse
 * then reuses.  Parsed here, each of libuv's threads kept an arena as big
 * as the largest record it had read (RSS +22 MB over 16 shows of 0.7 MB
 * records); the parse costs the loop what serialising the record did
 * when it was in memory. */
static void td__show_work(uv_work_t *w)
{
    td__show_req *r = w->data;
    FILE *f = fopen(r->path, "r");
    size_t cap = 0;
    if (!f) {
        r->err = -errno;
        return;
    }
    for (;;) {
        if (cap - r->len < 65536) {
            char *m = realloc(r->text, cap = cap ? cap * 2 : 262144);
            if (!m) {
                r->err = -ENOMEM;
                break;
            }
            r->text = m;
        }
        size_t n = fread(r->text + r->len, 1, cap - r->len, f);
        r->len += n;
        if (n == 0) {
            if (ferror(f))
                r->err = -EIO;
            break;
        }
    }
    fclose(f);
}

static void td__show_done(uv_work_t *w, int status)
{
    td__show_req *r = w->data;
    td_reads_end(r->uid);
    td_client *c = td_server_client(r->d, r->client);
    json_error_t je;
    json_t *rec = NULL;
    char m[3600];
    if (c && status == 0 && !r->err) {
        rec = json_loadb(r->text, r->len, 0, &je);
        if (!json_is_object(rec))
            snprintf(m, sizeof m, "cannot read the record of job %lld, %s: "
                     "%s", (long long)r->job, r->path,
                     rec ? "not a job record" : je.text);
    }
    free(r->text);
    r->text = NULL;
    if (c && json_is_object(rec)) {
        /* The name in memory was checked at start (td_job_name_ok). */
        json_object_set_new(rec, "name", json_string(r->name));
        td_client_send(c, td_proto_ok(r->id, json_pack("{s:O}", "job", rec)));
    } else if (c && r->err == -ENOENT) { /* removed meanwhile */
        snprintf(m, sizeof m, "no job %lld", (long long)r->job);
        td_client_send(c, td_proto_error(r->id, TD_ERR_NOT_FOUND, m));
    } else if (c) {
        if (status < 0 || r->err)
            snprintf(m, sizeof m, "cannot read the record of job %lld, %s: "
                     "%s", (long long)r->job, r->path,
                     status < 0 ? uv_strerror(status) : td_strerror(r->err));
        td_client_send(c, td_proto_error(r->id, TD_ERR_INTERNAL, m));
    }
    json_decref(rec);
    json_decref(r->id);
    free(r);
}

void td_ended_show(td_client *c, json_t *req_id, const td_job *j)
{
    char busy[256];
    if (td_reads_begin(c->uid, "show", busy, sizeof busy)) {
        td_client_send(c, td_proto_error(req_id, TD_ERR_CONFLICT, busy));
        return;
    }
    td__show_req *r = calloc(1, sizeof *r);
    if (!r) {
        td_reads_end(c->uid);
        td_client_send(c, td_proto_error(req_id, TD_ERR_INTERNAL,
                                         "out of memory"));
        return;
    }
    r->d = c->d;
    r->client = c->id;
    r->uid = c->uid;
    r->id = req_id ? json_incref(req_id) : NULL;
    r->job = j->id;
    snprintf(r->name, sizeof r->name, "%s", j->name);
    snprintf(r->path, sizeof r->path, "%s/jobs/%lld.json", c->d->state_dir,
             (long long)j->id);
    r->work.data = r;
    if (uv_queue_work(c->d->loop, &r->work, td__show_work, td__show_done)) {
        td_reads_end(c->uid);
        json_decref(r->id);
        free(r);
        td_client_send(c, td_proto_error(req_id, TD_ERR_INTERNAL,
                                         "cannot queue the record read"));
    }
}
