/* joblog.c - per-job log files: repetition held back, lines kept while the
 * file cannot be written (joblog.h). */
#define _GNU_SOURCE
#include "joblog.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "daemon.h"

#define TD__KINDS 32                      /* kinds watched per job */
#define TD__WINDOW_NS (60 * TD_NS_PER_S)  /* a kind's minute */
#define TD__QUIET_NS (300 * TD_NS_PER_S)  /* a quiet job is forgotten */
#define TD__KEEP_BYTES (512 * 1024)       /* unwritten bytes per job */

typedef struct td__kind {
    uint64_t key;      /* level and message, numbers masked, hashed */
    int level;
    int64_t since_ns;  /* its minute began */
    int passed;        /* lines written in the minute */
    long long held;    /* lines held back in it */
    char *latest;      /* the latest held back (its message) */
} td__kind;

typedef struct td__jlog {
    int64_t job;
    int64_t last_ns;    /* its latest line */
    td__kind kinds[TD__KINDS];
    int nkinds;
    char **kept;        /* lines not written yet, oldest first */
    size_t nkept, kept_bytes;
    long long lost;     /* lines after the kept ones, not kept */
    int err;            /* why the file cannot be written (0: it can) */
    struct td__jlog *next;
} td__jlog;

struct td_joblog {
    td_daemon *d;
    pthread_mutex_t mu;
    td__jlog *jobs;
    int closing;        /* no more events: the loop is gone */
};

td_joblog *td_joblog_new(td_daemon *d)
{
    td_joblog *l = calloc(1, sizeof *l);
    if (!l)
        return NULL;
    l->d = d;
    pthread_mutex_init(&l->mu, NULL);
    return l;
}

static void td__kind_clear(td__kind *k)
{
    free(k->latest);
    memset(k, 0, sizeof *k);
}

static void td__jlog_free(td__jlog *j)
{
    for (int i = 0; i < j->nkinds; i++)
        td__kind_clear(&j->kinds[i]);
    for (size_t i = 0; i < j->nkept; i++)
        free(j->kept[i]);
    free(j->kept);
    free(j);
}

static td__jlog *td__find(td_joblog *l, int64_t job, int create)
{
    for (td__jlog *j = l->jobs; j; j = j->next)
        if (j->job == job)
            return j;
    td__jlog *j = create ? calloc(1, sizeof *j) : NULL;
    if (j) {
        j->job = job;
        j->next = l->jobs;
        l->jobs = j;
    }
    return j;
}

static void td__format(char *buf, int cap, int level, int64_t job,
                       const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void td__format(char *buf, int cap, int level, int64_t job,
                       const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = td_log_format(buf, cap, level, (long)job, fmt, ap);
    va_end(ap);
    buf[n] = '\0';
}

/* Appends one line to the job's file; a line half written (the disk
 * filled under it) is cut off again.  0 or -errno. */
static int td__append(td_joblog *l, int64_t job, const char *line)
{
    char path[3200];
    td_daemon_job_log_path(l->d, job, path, sizeof path);
    /* The daemon's alone: its group is the one that gives users the
     * socket, and `logs` shows a job's lines to its owner and root only.
     * A log an older traind made group-readable is narrowed here. */
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    struct stat st;
    int rc = fstat(fd, &st) == 0 ? 0 : -errno;
    if (!rc && (st.st_mode & 077) && fchmod(fd, st.st_mode & 0700) != 0)
        td_logf(TD_LOG_WARN, 0, "%s: cannot narrow its mode to the "
                "daemon's: %s", path, td_strerror(-errno));
    size_t len = strlen(line);
    struct iovec iov[2] = {{(void *)line, len}, {"\n", 1}};
    ssize_t w = rc ? 0 : writev(fd, iov, 2);
    if (!rc && w < 0)
        rc = -errno;
    else if (!rc && (size_t)w != len + 1)
        rc = -ENOSPC;
    if (rc && w > 0 && ftruncate(fd, st.st_size) != 0)
        td_logf(TD_LOG_WARN, 0, "%s: a half-written line stays: %s", path,
                td_strerror(-errno));
    close(fd);
    return rc;
}

/* Writes the job's kept lines while the file takes them, then the count of
 * those not kept; 0 once all are written. */
static int td__flush(td_joblog *l, td__jlog *j)
{
    size_t done = 0, wrote;
    int rc = 0;
    while (done < j->nkept && !(rc = td__append(l, j->job, j->kept[done]))) {
        j->kept_bytes -= strlen(j->kept[done]);
        free(j->kept[done++]);
    }
    memmove(j->kept, j->kept + done, (j->nkept - done) * sizeof *j->kept);
    j->nkept -= done;
    wrote = done;
    if (!rc && j->lost) {
        char line[TD_LOG_LINE_MAX + 1];
        td__format(line, sizeof line, TD_LOG_WARN, j->job,
                   "%lld line(s) of this job's log were lost here: its file "
                   "could not be written (%s), and at most %d lines are kept "
                   "until it can", j->lost, td_strerror(j->err),
                   TD_JOBLOG_KEEP);
        rc = td__append(l, j->job, line);
    }
    if (rc) {
        j->err = rc;
        return rc;
    }
    if (j->err)
        td_logf(TD_LOG_INFO, 0, "job %lld: its log file takes lines again: "
                "%zu kept line(s) written, %lld lost", (long long)j->job,
                wrote, j->lost);
    j->lost = 0;
    j->err = 0;
    return 0;
}

/* A line into the job's log: posted as an event, written after any kept
 * ones, or kept when the file cannot take it. */
static void td__put(td_joblog *l, td__jlog *j, int level, const char *line)
{
    if (!l->closing)
        td_daemon_post(l->d, TD_EV_LOG, j->job,
                       json_pack("{s:s, s:s}", "level",
                                 td_log_level_name(level), "line", line));
    int rc = j->nkept || j->lost ? td__flush(l, j) : 0;
    if (!rc && (rc = td__append(l, j->job, line)) == 0)
        return;
    if (!j->err) {
        char path[3200];
        td_daemon_job_log_path(l->d, j->job, path, sizeof path);
        td_logf(TD_LOG_ERROR, 0, "job %lld: its log %s cannot be written "
                "(%s): its lines are kept in memory (at most %d) until it "
                "can", (long long)j->job, path, td_strerror(rc),
                TD_JOBLOG_KEEP);
    }
    j->err = rc;
    size_t len = strlen(line);
    char *copy = NULL, **grown = NULL;
    if (j->lost == 0 && j->nkept < TD_JOBLOG_KEEP &&
        j->kept_bytes + len <= TD__KEEP_BYTES && (copy = strdup(line)) &&
        (grown = realloc(j->kept, (j->nkept + 1) * sizeof *j->kept))) {
        j->kept = grown;
        j->kept[j->nkept++] = copy;
        j->kept_bytes += len;
        return;
    }
    free(copy);
    j->lost++;
}

/* The line that ends a kind's minute: how many were held back, and the
 * latest of them. */
static void td__summary(td_joblog *l, td__jlog *j, td__kind *k, int64_t now)
{
    if (k->held > 0) {
        char line[TD_LOG_LINE_MAX + 1];
        td__format(line, sizeof line, k->level, j->job,
                   "%lld more like this in the last %.0f s (at most %d of a "
                   "kind a minute are written): %s", k->held,
                   (double)(now - k->since_ns) / 1e9, TD_JOBLOG_BURST,
                   k->latest ? k->latest : "?");
        td__put(l, j, k->level, line);
    }
    k->held = 0;
    k->passed = 0;
    k->since_ns = now;
    free(k->latest);
    k->latest = NULL;
}

/* The kind of a message: its level and text with each run of digits as
 * one '#' (FNV-1a). */
static uint64_t td__key(int level, const char *msg)
{
    uint64_t h = 1469598103934665603ull;
    h = (h ^ (unsigned)level) * 1099511628211ull;
    for (const char *p = msg; *p; p++) {
        int digit = *p >= '0' && *p <= '9';
        if (digit && p > msg && p[-1] >= '0' && p[-1] <= '9')
            continue;
        h = (h ^ (unsigned char)(digit ? '#' : *p)) * 1099511628211ull;
    }
    return h;
}

/* Whether the line is written now (else it was held back). */
static int td__pass(td_joblog *l, td__jlog *j, int level, const char *msg,
                    int64_t now)
{
    if (strncmp(msg, "bad sample ", 11) == 0)
        return 1;
    uint64_t key = td__key(level, msg);
    td__kind *k = NULL;
    for (int i = 0; i < j->nkinds && !k; i++)
        if (j->kinds[i].key == key)
            k = &j->kinds[i];
    if (!k && j->nkinds < TD__KINDS) {
        k = &j->kinds[j->nkinds++];
    } else if (!k) { /* full: the kind whose minute began first goes */
        k = &j->kinds[0];
        for (int i = 1; i < j->nkinds; i++)
            if (j->kinds[i].since_ns < k->since_ns)
                k = &j->kinds[i];
        td__summary(l, j, k, now);
        td__kind_clear(k);
    }
    if (!k->key) {
        k->key = key;
        k->level = level;
        k->since_ns = now;
    }
    if (now - k->since_ns >= TD__WINDOW_NS)
        td__summary(l, j, k, now);
    if (k->passed < TD_JOBLOG_BURST) {
        k->passed++;
        return 1;
    }
    k->held++;
    char *latest = strdup(msg);
    if (latest) {
        free(k->latest);
        k->latest = latest;
    }
    return 0;
}

void td_joblog_sink(void *user, int level, long job, const char *line)
{
    td_daemon *d = user;
    td_joblog *l = d->joblog;
    if (job <= 0 || !l)
        return;
    char pre[40];
    snprintf(pre, sizeof pre, "job %ld: ", job);
    const char *msg = strstr(line, pre);
    msg = msg ? msg + strlen(pre) : line;
    int64_t now = td_now_ns();
    pthread_mutex_lock(&l->mu);
    td__jlog *j = td__find(l, job, 1);
    if (!j) { /* out of memory: written as before, if it can be */
        if (td__append(l, job, line) != 0)
            td_logf(TD_LOG_ERROR, 0, "job %ld: a line of its log is lost",
                    job);
    } else {
        j->last_ns = now;
        if (td__pass(l, j, level, msg, now))
            td__put(l, j, level, line);
    }
    pthread_mutex_unlock(&l->mu);
}

void td_joblog_tick(td_joblog *l)
{
    int64_t now = td_now_ns();
    pthread_mutex_lock(&l->mu);
    for (td__jlog **pj = &l->jobs; *pj;) {
        td__jlog *j = *pj;
        int busy = 0;
        if (j->nkept || j->lost)
            td__flush(l, j);
        for (int i = 0; i < j->nkinds; i++) {
            td__kind *k = &j->kinds[i];
            if (k->held && now - k->since_ns >= TD__WINDOW_NS)
                td__summary(l, j, k, now);
            busy |= k->held > 0;
        }
        if (!busy && !j->nkept && !j->lost && now - j->last_ns > TD__QUIET_NS) {
            *pj = j->next;
            td__jlog_free(j);
        } else {
            pj = &j->next;
        }
    }
    pthread_mutex_unlock(&l->mu);
}

void td_joblog_settle(td_joblog *l, int64_t job)
{
    if (!l)
        return;
    int64_t now = td_now_ns();
    pthread_mutex_lock(&l->mu);
    td__jlog *j = td__find(l, job, 0);
    for (int i = 0; j && i < j->nkinds; i++) {
        td__summary(l, j, &j->kinds[i], now);
        td__kind_clear(&j->kinds[i]);
    }
    if (j)
        j->nkinds = 0;
    pthread_mutex_unlock(&l->mu);
}

json_t *td_joblog_unwritten(td_joblog *l, int64_t job)
{
    json_t *a = json_array();
    pthread_mutex_lock(&l->mu);
    td__jlog *j = td__find(l, job, 0);
    for (size_t i = 0; a && j && i < j->nkept; i++)
        json_array_append_new(a, json_string(j->kept[i]));
    pthread_mutex_unlock(&l->mu);
    return a;
}

void td_joblog_forget(td_joblog *l, int64_t job)
{
    pthread_mutex_lock(&l->mu);
    for (td__jlog **pj = &l->jobs; *pj; pj = &(*pj)->next) {
        if ((*pj)->job == job) {
            td__jlog *j = *pj;
            *pj = j->next;
            td__jlog_free(j);
            break;
        }
    }
    pthread_mutex_unlock(&l->mu);
}

void td_joblog_free(td_joblog *l)
{
    if (!l)
        return;
    int64_t now = td_now_ns();
    l->closing = 1;
    while (l->jobs) {
        td__jlog *j = l->jobs;
        for (int i = 0; i < j->nkinds; i++)
            td__summary(l, j, &j->kinds[i], now);
        if ((j->nkept || j->lost) && td__flush(l, j) != 0) {
            char path[3200];
            td_daemon_job_log_path(l->d, j->job, path, sizeof path);
            td_logf(TD_LOG_ERROR, 0, "job %lld: %zu line(s) of its log "
                    "could not be written to %s (%s) and are lost, with %lld "
                    "more", (long long)j->job, j->nkept, path,
                    td_strerror(j->err), j->lost);
        }
        l->jobs = j->next;
        td__jlog_free(j);
    }
    pthread_mutex_destroy(&l->mu);
    free(l);
}
