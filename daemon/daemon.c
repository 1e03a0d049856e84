/* daemon.c - the loop thread's life: start-up, signals, the inbox from
 * other threads, job persistence, shutdown.
 *
 * Persistence: each job's record is state_dir/jobs/<id>.json, written off
 * the loop on libuv's threadpool (write tmp, fsync, rename, fsync dir) so
 * the loop never waits for the disk.  At start-up the records are read
 * back (before the loop runs); jobs that were running are queued again.
 */
#define _GNU_SOURCE
#include "daemon.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "clock.h"
#include "device.h"
#include "error.h"
#include "log.h"
#include "settings.h"

enum { TD_INBOX_MAX = 4096 }; /* step events beyond this are dropped */

double td_daemon_ts(const td_daemon *d)
{
    return (double)(td_now_ns() - d->started_ns) / 1e9;
}

/* ---- persistence ------------------------------------------------------ */

typedef struct td_persist_req {
    uv_work_t work;
    char dir[4096];
    char name[64];
    char *text;
    int rc;
} td_persist_req;

/* Durable replace of dir/name with text (runs on a threadpool thread). */
static int td__write_durable(const char *dir, const char *name,
                             const char *text)
{
    char path[4200], tmp[4210];
    int rc = 0;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
    if (fd < 0)
        return -errno;
    size_t len = strlen(text), off = 0;
    while (off < len) {
        ssize_t w = write(fd, text + off, len - off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            rc = -errno;
            break;
        }
        off += (size_t)w;
    }
    if (rc == 0 && fsync(fd) != 0)
        rc = -errno;
    if (close(fd) != 0 && rc == 0)
        rc = -errno;
    if (rc == 0 && rename(tmp, path) != 0)
        rc = -errno;
    if (rc) {
        unlink(tmp);
        return rc;
    }
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    return 0;
}

static void td__persist_work(uv_work_t *w)
{
    td_persist_req *r = w->data;
    r->rc = td__write_durable(r->dir, r->name, r->text);
}

static void td__persist_done(uv_work_t *w, int status)
{
    td_persist_req *r = w->data;
    if (status == 0 && r->rc)
        td_error("cannot save %s/%s: %s", r->dir, r->name, td_strerror(r->rc));
    free(r->text);
    free(r);
}

void td_daemon_persist_job(td_daemon *d, const td_job *j)
{
    json_t *rec = td_job_record(j);
    td_persist_req *r = calloc(1, sizeof *r);
    if (!rec || !r)
        goto oom;
    r->text = json_dumps(rec, JSON_INDENT(1) | JSON_SORT_KEYS);
    if (!r->text)
        goto oom;
    snprintf(r->dir, sizeof r->dir, "%s/jobs", d->state_dir);
    snprintf(r->name, sizeof r->name, "%lld.json", (long long)j->id);
    r->work.data = r;
    json_decref(rec);
    if (uv_queue_work(d->loop, &r->work, td__persist_work,
                      td__persist_done) == 0)
        return;
    free(r->text);
    free(r);
    td_error("job %lld: cannot queue its record for saving", (long long)j->id);
    return;
oom:
    json_decref(rec);
    free(r);
    td_error("job %lld: out of memory saving its record", (long long)j->id);
}

/* Reads every jobs/<id>.json (start-up only, before the loop runs). */
static void td__load_jobs(td_daemon *d)
{
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/jobs", d->state_dir);
    DIR *dp = opendir(dir);
    if (!dp)
        return;
    struct dirent *e;
    while ((e = readdir(dp))) {
        size_t n = strlen(e->d_name);
        if (n < 6 || strcmp(e->d_name + n - 5, ".json") != 0)
            continue;
        char path[4500], err[256];
        json_error_t je;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        json_t *rec = json_load_file(path, 0, &je);
        td_job *j = rec ? td_job_from_record(rec, err, sizeof err) : NULL;
        if (!rec)
            snprintf(err, sizeof err, "%s", je.text);
        json_decref(rec);
        if (!j) {
            td_warn("ignoring %s: %s", path, err);
            continue;
        }
        if (td_jobs_find(&d->jobs, j->id)) {
            td_warn("ignoring %s: duplicate job id %lld", path,
                    (long long)j->id);
            json_decref(j->spec);
            json_decref(j->checkpoints);
            json_decref(j->last_window);
            json_decref(j->last_epoch);
            free(j);
            continue;
        }
        if (j->state == TD_JOB_RUNNING) {
            j->state = TD_JOB_PENDING;
            snprintf(j->reason, sizeof j->reason,
                     "interrupted by a daemon restart; resumes from its last "
                     "checkpoint");
        }
        td_jobs_insert(&d->jobs, j);
    }
    closedir(dp);
    /* Keep submission order: the directory order is arbitrary. */
    td_job *sorted = NULL;
    while (d->jobs.head) {
        td_job *j = d->jobs.head;
        d->jobs.head = j->next;
        td_job **pp = &sorted;
        while (*pp && (*pp)->id < j->id)
            pp = &(*pp)->next;
        j->next = *pp;
        *pp = j;
    }
    d->jobs.head = sorted;
    d->jobs.tail = NULL;
    for (td_job *j = sorted; j; j = j->next)
        d->jobs.tail = j;
    if (d->jobs.count)
        td_info("restored %zu job record(s) from %s", d->jobs.count, dir);
}

int td_daemon_set_job_state(td_daemon *d, td_job *j, enum td_job_state s,
                            const char *reason)
{
    int rc = td_job_set_state(j, s, reason);
    if (rc)
        return rc;
    td_logf(TD_LOG_INFO, j->id, "%s: %s", td_job_state_name(s), j->reason);
    td_daemon_persist_job(d, j);
    json_t *data = json_pack("{s:s, s:s}", "state", td_job_state_name(s),
                             "reason", j->reason);
    td_server_broadcast(d, TD_EV_STATE, j->id, td_daemon_ts(d), data);
    json_decref(data);
    return 0;
}

/* ---- inbox ------------------------------------------------------------ */

void td_daemon_post(td_daemon *d, int kind, int64_t job, json_t *data)
{
    td_inbox_msg *m = malloc(sizeof *m);
    if (!m) {
        json_decref(data);
        return;
    }
    m->kind = kind;
    m->job = job;
    m->ts = td_daemon_ts(d);
    m->data = data;
    m->next = NULL;
    pthread_mutex_lock(&d->inbox_mu);
    if (kind == TD_EV_STEP && d->inbox_len >= TD_INBOX_MAX) {
        d->inbox_dropped++;
        pthread_mutex_unlock(&d->inbox_mu);
        json_decref(data);
        free(m);
        return;
    }
    if (d->inbox_tail)
        d->inbox_tail->next = m;
    else
        d->inbox_head = m;
    d->inbox_tail = m;
    d->inbox_len++;
    pthread_mutex_unlock(&d->inbox_mu);
    uv_async_send(&d->wake);
}

static void td__on_wake(uv_async_t *a)
{
    td_daemon *d = a->data;
    pthread_mutex_lock(&d->inbox_mu);
    td_inbox_msg *m = d->inbox_head;
    d->inbox_head = d->inbox_tail = NULL;
    d->inbox_len = 0;
    pthread_mutex_unlock(&d->inbox_mu);
    while (m) {
        td_inbox_msg *next = m->next;
        td_server_broadcast(d, m->kind, m->job, m->ts, m->data);
        json_decref(m->data);
        free(m);
        m = next;
    }
}

/* ---- job logs --------------------------------------------------------- */

void td_daemon_job_log_path(const td_daemon *d, int64_t job, char *buf,
                            size_t cap)
{
    snprintf(buf, cap, "%s/jobs/%lld.log", d->state_dir, (long long)job);
}

/* Every log line about a job is appended to its log file and sent to
 * subscribers as a `log` event.  Runs on whichever thread logged.  Job
 * lines are rare (state changes, epochs, checkpoints, bad samples), and an
 * O_APPEND write lands in the page cache, so this does not stall the
 * thread that logs. */
static void td__job_log_sink(void *user, int level, long job,
                             const char *line)
{
    td_daemon *d = user;
    char path[3200];
    if (job <= 0)
        return;
    td_daemon_job_log_path(d, job, path, sizeof path);
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
    if (fd >= 0) {
        struct iovec iov[2] = {{(void *)line, strlen(line)}, {"\n", 1}};
        ssize_t w = writev(fd, iov, 2);
        (void)w; /* a lost job-log line must not fail anything */
        close(fd);
    }
    td_daemon_post(d, TD_EV_LOG, job,
                   json_pack("{s:s, s:s}", "level", td_log_level_name(level),
                             "line", line));
}

/* ---- signals and life cycle ------------------------------------------- */

static void td__on_signal(uv_signal_t *s, int signum)
{
    td_daemon *d = s->data;
    if (signum == SIGHUP) {
        td_info("SIGHUP: configuration reload is not implemented yet");
        return;
    }
    td_daemon_shutdown(d, signum == SIGTERM ? "SIGTERM" : "SIGINT");
}

static int td__mkdirs(const char *path)
{
    char buf[4300];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0750) != 0 && errno != EEXIST)
            return -errno;
        *p = '/';
    }
    if (mkdir(buf, 0750) != 0 && errno != EEXIST)
        return -errno;
    return 0;
}

int td_daemon_init(td_daemon *d, uv_loop_t *loop, const td_daemon_opts *o)
{
    char sub[4200];
    int rc;
    memset(d, 0, sizeof *d);
    d->loop = loop;
    d->started_ns = td_now_ns();
    if (strlen(o->socket_path) >= sizeof d->socket_path) {
        td_error("socket path too long (max %zu bytes): %s",
                 sizeof d->socket_path - 1, o->socket_path);
        return -ENAMETOOLONG;
    }
    snprintf(d->socket_path, sizeof d->socket_path, "%s", o->socket_path);
    if (strlen(o->state_dir) >= sizeof d->state_dir) {
        td_error("state dir path too long (max %zu bytes)",
                 sizeof d->state_dir - 1);
        return -ENAMETOOLONG;
    }
    snprintf(d->state_dir, sizeof d->state_dir, "%s", o->state_dir);
    snprintf(sub, sizeof sub, "%s/jobs", d->state_dir);
    if ((rc = td__mkdirs(sub)) != 0) {
        td_error("cannot create state dir %s: %s", sub, td_strerror(rc));
        return rc;
    }
    d->settings = td_settings_defaults();
    if (!d->settings)
        return -ENOMEM;
    td_jobs_init(&d->jobs);
    pthread_mutex_init(&d->inbox_mu, NULL);

    td_device_info info;
    td_device_choice ch;
    char err[256];
    td_device_probe(&info);
    if (td_device_select(td_settings_str(d->settings, "device"), &info, &ch,
                         err, sizeof err) != 0) {
        td_warn("%s; using the CPU", err);
        snprintf(ch.desc, sizeof ch.desc, "cpu");
    }
    snprintf(d->device_desc, sizeof d->device_desc, "%s", ch.desc);
    if (ch.kind == TD_DEVICE_CPU && info.cuda_built)
        td_info("device: cpu (%s)", info.reason);
    else
        td_info("device: %s", d->device_desc);

    td__load_jobs(d);
    uv_async_init(loop, &d->wake, td__on_wake);
    d->wake.data = d;
    td_log_set_sink(td__job_log_sink, d);
    uv_signal_init(loop, &d->sig_term);
    uv_signal_init(loop, &d->sig_int);
    uv_signal_init(loop, &d->sig_hup);
    d->sig_term.data = d->sig_int.data = d->sig_hup.data = d;
    uv_signal_start(&d->sig_term, td__on_signal, SIGTERM);
    uv_signal_start(&d->sig_int, td__on_signal, SIGINT);
    uv_signal_start(&d->sig_hup, td__on_signal, SIGHUP);
    return td_server_listen(d);
}

void td_daemon_shutdown(td_daemon *d, const char *why)
{
    if (d->shutting_down)
        return;
    d->shutting_down = 1;
    td_info("shutting down (%s)", why);
    td_server_close(d);
    uv_close((uv_handle_t *)&d->sig_term, NULL);
    uv_close((uv_handle_t *)&d->sig_int, NULL);
    uv_close((uv_handle_t *)&d->sig_hup, NULL);
    uv_close((uv_handle_t *)&d->wake, NULL);
}

int td_daemon_run(td_daemon *d)
{
    uv_run(d->loop, UV_RUN_DEFAULT);
    return 0;
}

void td_daemon_free(td_daemon *d)
{
    td_log_set_sink(NULL, NULL);
    td_inbox_msg *m = d->inbox_head;
    while (m) {
        td_inbox_msg *n = m->next;
        json_decref(m->data);
        free(m);
        m = n;
    }
    td_jobs_free(&d->jobs);
    json_decref(d->settings);
    pthread_mutex_destroy(&d->inbox_mu);
}
