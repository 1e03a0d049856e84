/* load.c - the job records read back at start-up (see daemon.h).
 *
 * A daemon that ran for months has thousands of records, some of a
 * megabyte (a long job's learning curves): reading them can take longer
 * than systemd's start timeout (90 s by default).  The load says where it
 * is, every second, in the log and the unit's status, and asks systemd
 * for more time (EXTEND_TIMEOUT_USEC) as long as it advances.
 */
#include "daemon.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "ended.h"
#include "job/spec.h"
#include "notify.h"
#include "obs.h"
#include "remove.h"
#include "settings.h"
#include "starts.h"
#include "bounds.h"
#include "infer_jobs.h"

/* systemd's start timeout is extended by this much at each progress
 * report (one a second): a load that stalls still times out. */
#define TD__LOAD_EXTEND_USEC 30000000

/* The <id>.json names in dp (rewound after). */
static size_t td__count_records(DIR *dp)
{
    size_t n = 0;
    for (struct dirent *e; (e = readdir(dp));) {
        size_t len = strlen(e->d_name);
        n += len >= 6 && strcmp(e->d_name + len - 5, ".json") == 0;
    }
    rewinddir(dp);
    return n;
}

static void td__progress(const char *dir, size_t done, size_t total,
                         int64_t ns)
{
    td_info("loading job records from %s: %zu of %zu (%.0f s)", dir, done,
            total, td_ns_to_s(ns));
    td_notifyf("EXTEND_TIMEOUT_USEC=%d\nSTATUS=loading job records: %zu of "
               "%zu", TD__LOAD_EXTEND_USEC, done, total);
}

/* The ids read so far (open addressing; 0 is free: ids start at 1) and
 * the jobs in the order read, inserted by id once all are in: with
 * thousands of records, finding each id in the job table and inserting
 * into the sorted list one by one cost time quadratic in their count. */
typedef struct td__loaded {
    int64_t *ids;
    size_t cap, nids; /* cap a power of two, more than twice nids */
    td_job **jobs;
    size_t n, jcap;
} td__loaded;

/* The slot of id in ids, or the free one where it would go. */
static size_t td__slot(const int64_t *ids, size_t cap, int64_t id)
{
    size_t i = ((uint64_t)id * 0x9E3779B97F4A7C15ull) & (cap - 1);
    while (ids[i] && ids[i] != id)
        i = (i + 1) & (cap - 1);
    return i;
}

static int td__loaded_init(td__loaded *l, size_t records)
{
    memset(l, 0, sizeof *l);
    l->cap = 64;
    while (l->cap < 2 * records + 2)
        l->cap *= 2;
    l->ids = calloc(l->cap, sizeof *l->ids);
    return l->ids ? 0 : -1;
}

static int td__loaded_has(const td__loaded *l, int64_t id)
{
    return id > 0 && l->ids[td__slot(l->ids, l->cap, id)] == id;
}

/* 1 if id was seen already, else it is noted (and 0). */
static int td__loaded_seen(td__loaded *l, int64_t id)
{
    if (td__loaded_has(l, id))
        return 1;
    /* More ids than records counted (one written while loading): grow. */
    if (2 * (l->nids + 1) >= l->cap) {
        size_t cap = 2 * l->cap;
        int64_t *ids = calloc(cap, sizeof *ids);
        if (!ids)
            return 0; /* unlikely; a duplicate may then go unseen */
        for (size_t k = 0; k < l->cap; k++)
            if (l->ids[k])
                ids[td__slot(ids, cap, l->ids[k])] = l->ids[k];
        free(l->ids);
        l->ids = ids;
        l->cap = cap;
    }
    l->ids[td__slot(l->ids, l->cap, id)] = id;
    l->nids++;
    return 0;
}

static int td__loaded_add(td__loaded *l, td_job *j)
{
    if (l->n == l->jcap) {
        size_t cap = l->jcap ? 2 * l->jcap : 256;
        td_job **nj = realloc(l->jobs, cap * sizeof *nj);
        if (!nj)
            return -1;
        l->jobs = nj;
        l->jcap = cap;
    }
    l->jobs[l->n++] = j;
    return 0;
}

static int td__by_id(const void *a, const void *b)
{
    const td_job *x = *(td_job *const *)a, *y = *(td_job *const *)b;
    return (x->id > y->id) - (x->id < y->id);
}

/* A record is checked again as it is read back, as if it were submitted
 * now: a name that is not one (control characters) is replaced, and a job
 * not yet finished whose spec no longer parses or fits this machine
 * (threads, workers, memory) is failed instead of started.  1 if j was
 * failed. */
static int td__revalidate(td_daemon *d, td_job *j)
{
    char e[1024];
    td_job_spec sp;
    if (!td_job_name_ok(j->name)) {
        td_warn("job %lld: the saved name is not a valid name; renamed",
                (long long)j->id);
        snprintf(j->name, sizeof j->name, "job-%lld", (long long)j->id);
    }
    if (td_job_state_final(j->state))
        return 0;
    if (td_job_task(j) != TD_TASK_TRAIN ||
        json_object_get(j->spec, "task")) { /* eval, predict (or junk) */
        td_infer_spec is;
        int irc = td_infer_spec_parse(j->spec, &is, e, sizeof e);
        td_infer_spec_free(&is);
        if (irc == 0)
            return 0;
        goto failed;
    }
    int rc = td_spec_parse(j->spec, NULL, &sp, e, sizeof e);
    if (rc == 0) {
        rc = td_limits_check_spec(d->settings, &sp, NULL, NULL, e,
                                  sizeof e);
        td_spec_free(&sp);
    }
    if (rc == 0)
        return 0;
failed:
    j->state = TD_JOB_FAILED;
    snprintf(j->reason, sizeof j->reason, "the saved record is no longer a "
             "valid job: %.200s", e);
    j->ended = (double)td_wall_ns() / 1e9;
    j->stop_requested = 0;
    td_starts_clear(d->state_dir, j->id);
    td_warn("job %lld: %s", (long long)j->id, j->reason);
    return 1;
}

/* Rows in the cache of jobs that are gone (removed, or their records set
 * aside): harmless, but the cache is written again without them. */
static size_t td__stale_rows(const td__loaded *l, json_t *cache)
{
    const char *name;
    json_t *v;
    size_t n = 0;
    json_object_foreach(cache, name, v) {
        long long id = strtoll(name, NULL, 10);
        n += !td__loaded_has(l, id);
    }
    return n;
}

/* A training job traind died under: it resumes from its newest
 * checkpoint, at least the newest its record lists (a newer one may have
 * been written after the record was last saved).  Its step and epoch
 * become that checkpoint's: they were the record's last step, steps the
 * job runs again, so its progress went back when it started. */
static void td__recovered_at_checkpoint(td_job *j)
{
    int64_t at = j->step, ck = 0;
    size_t i;
    json_t *c;
    json_array_foreach(j->checkpoints, i, c) {
        json_int_t s = json_integer_value(json_object_get(c, "step"));
        if (s > ck && s <= at)
            ck = s;
    }
    j->step = ck;
    if (j->epochs_total > 0 && j->steps_total >= j->epochs_total)
        j->epoch = ck / (j->steps_total / j->epochs_total);
    if (ck > 0)
        snprintf(j->reason, sizeof j->reason, "interrupted by a daemon "
                 "restart at step %lld or later; resumes from its newest "
                 "checkpoint (step %lld or later)", (long long)at,
                 (long long)ck);
    else
        snprintf(j->reason, sizeof j->reason, "interrupted by a daemon "
                 "restart at step %lld or later; resumes from its newest "
                 "checkpoint, else from the start (none in its record)",
                 (long long)at);
    char from[96] = "if it has one (none in its record yet)";
    if (ck > 0)
        snprintf(from, sizeof from, ": step %lld in its record, or a newer "
                 "one", (long long)ck);
    td_logf(TD_LOG_WARN, j->id, "recovered after traind stopped without a "
            "shutdown (killed or crashed) at step %lld or later (its record "
            "is saved at most once a second); resumes from its newest "
            "checkpoint%s%s", (long long)at, ck > 0 ? "" : " ", from);
}

/* Reads every jobs/<id>.json (start-up only, before the loop runs). */
void td_daemon_load_jobs(td_daemon *d)
{
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/jobs", d->state_dir);
    DIR *dp = opendir(dir);
    if (!dp)
        return;
    int64_t recent = td_ended_recent_floor(dir, TD_OBS_RECENT);
    json_t *cache = td_ended_cache_load(d->state_dir);
    size_t total = td__count_records(dp), done = 0, hits = 0, misses = 0;
    int64_t t0 = td_now_ns(), told = t0;
    td__loaded got;
    if (td__loaded_init(&got, total)) {
        td_error("loading job records from %s: out of memory", dir);
        json_decref(cache);
        closedir(dp);
        return;
    }
    if (total)
        td_notifyf("STATUS=loading %zu job record(s) from %s", total, dir);
    struct dirent *e;
    while ((e = readdir(dp))) {
        size_t n = strlen(e->d_name);
        if (n < 6 || strcmp(e->d_name + n - 5, ".json") != 0)
            continue;
        if (td_now_ns() - told >= TD_NS_PER_S) { /* a long load: progress */
            told = td_now_ns();
            td__progress(dir, done, total, told - t0);
        }
        done++;
        char path[4500], err[256];
        json_error_t je;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        /* An older ended job: its row from the cache, if its record is
         * unchanged (the newest keep curves for obs.c: read in full). */
        long long cid = strtoll(e->d_name, NULL, 10);
        td_job *j = cid > 0 && cid < recent && cache
                        ? td_ended_cache_take(cache, dirfd(dp), e->d_name,
                                              cid)
                        : NULL;
        if (j && !td__loaded_seen(&got, j->id)) {
            if (td__loaded_add(&got, j)) {
                td_job_free(j); /* out of memory: read again next start */
                continue;
            }
            hits++;
            continue;
        }
        if (j) /* a duplicate id: warned below */
            td_job_free(j);
        json_t *rec = json_load_file(path, 0, &je);
        j = rec ? td_job_from_record(rec, err, sizeof err) : NULL;
        if (!rec)
            snprintf(err, sizeof err, "%s", je.text);
        json_decref(rec);
        if (!j) {
            td_remove_set_aside(d, path, e->d_name, err);
            continue;
        }
        if (td__loaded_seen(&got, j->id)) {
            td_warn("ignoring %s: duplicate job id %lld", path,
                    (long long)j->id);
            td_job_free(j);
            continue;
        }
        int crashed = td__revalidate(d, j);
        if (crashed) {
            /* failed by td__revalidate */
        } else if (j->state == TD_JOB_RUNNING && j->stop_requested) {
            /* A cancel or pause that was acknowledged but not yet reached
             * when the daemon died still holds. */
            int pause = j->stop_requested == 2; /* TD_STOP_PAUSE */
            j->state = pause ? TD_JOB_SUSPENDED : TD_JOB_CANCELLED;
            snprintf(j->reason, sizeof j->reason, "%s (asked before the "
                     "daemon stopped)", j->stop_note);
            j->stop_requested = 0;
            if (!pause)
                j->ended = (double)td_wall_ns() / 1e9;
            td_starts_clear(d->state_dir, j->id);
            crashed = 1; /* the record is written again */
        } else if (j->state == TD_JOB_RUNNING) {
            int starts = td_starts_count(d->state_dir, j->id);
            long long max = td_settings_int(d->settings, "max_crash_restarts");
            if (starts >= max) {
                /* It may be what kills the daemon: do not start it again. */
                j->state = TD_JOB_FAILED;
                snprintf(j->reason, sizeof j->reason,
                         "the daemon stopped %d time(s) in a row while this "
                         "job ran%s (max_crash_restarts %lld); not started "
                         "again", starts,
                         td_job_task(j) == TD_TASK_TRAIN
                             ? ", without a new checkpoint in between"
                             : "", /* eval, predict: none to write */
                         max);
                td_starts_clear(d->state_dir, j->id);
                td_warn("job %lld: %s", (long long)j->id, j->reason);
                j->ended = (double)td_wall_ns() / 1e9;
                crashed = 1;
            } else {
                /* A clean shutdown leaves its job pending; running means
                 * traind died under it (kill -9, a crash, power loss). */
                j->state = TD_JOB_PENDING;
                if (td_job_task(j) != TD_TASK_TRAIN) { /* no checkpoint */
                    snprintf(j->reason, sizeof j->reason, "interrupted by "
                             "a daemon restart; runs again from the start");
                    td_logf(TD_LOG_WARN, j->id, "recovered after traind "
                            "stopped without a shutdown (killed or "
                            "crashed); runs again from the start");
                } else {
                    td__recovered_at_checkpoint(j);
                }
            }
        }
        if (td__loaded_add(&got, j)) {
            td_error("job %lld: out of memory loading its record; left "
                     "out until the next start", (long long)j->id);
            td_job_free(j);
            continue;
        }
        if (crashed) /* written once the loop runs */
            td_daemon_persist_job(d, j);
        else if (j->id < recent) { /* the newest keep curves for obs.c */
            td_ended_shed(d, j);
            misses += j->shed;
        }
    }
    closedir(dp);
    /* In id order: submission order, whatever the directory's. */
    if (got.n) /* qsort wants an array, even of none */
        qsort(got.jobs, got.n, sizeof *got.jobs, td__by_id);
    for (size_t i = 0; i < got.n; i++)
        td_jobs_insert(&d->jobs, got.jobs[i]);
    /* Rows read in full this time (or cached rows of records gone) are
     * saved now, not only at shutdown: a daemon killed later starts fast
     * too. */
    if (misses || td__stale_rows(&got, cache))
        td_ended_cache_save(d, NULL);
    free(got.ids);
    free(got.jobs);
    json_decref(cache);
    if (d->jobs.count)
        td_info("restored %zu job record(s) from %s in %.1f s (%zu ended "
                "job(s) from %s, %zu read in full)", d->jobs.count, dir,
                td_ns_to_s(td_now_ns() - t0), hits, TD_ENDED_CACHE_FILE,
                d->jobs.count - hits);
}

