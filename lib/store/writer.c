/* checkpoint_writer.c - the checkpoint writer thread (see checkpoint.h).
 *
 * Owns: one pthread that pops snapshots from a td_queue of capacity 1 and
 * writes them with td_ckpt_write, and the writer's counters.  The trainer's
 * submit never blocks: td_queue_try_push either queues the snapshot (one
 * write may run while one waits) or fails, and the trainer hears -EBUSY.
 * Never: touches a device (beyond waiting, through a snapshot's ready
 * callback, for the copy the trainer enqueued into it), calls back into the
 * trainer other than through the done callback, or fails the job - a
 * failed write is a result.
 */
#define _GNU_SOURCE /* gettid */
#include "store/checkpoint.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "base/queue.h"

struct td_ckpt_writer {
    td_queue q;
    pthread_t thread;
    char dir[4096];
    int keep;
    td_ckpt_done_fn done;
    void *user;
    long job;
    td_ckpt_io io;
    int has_io;
    int nice;
    pthread_mutex_t mu;        /* guards everything below */
    td_ckpt_writer_stats st;
    int in_flight;
};

static void td__write_one(td_ckpt_writer *w, td_ckpt_snapshot *s,
                          int64_t submitted)
{
    td_ckpt_result *r = calloc(1, sizeof *r);
    td_ckpt_result fallback;
    if (!r) { /* still report, with less detail */
        memset(&fallback, 0, sizeof fallback);
        r = &fallback;
    }
    int64_t t0 = td_now_ns();
    r->snap = s;
    r->step = s->meta.step;
    r->queued_ns = t0 - submitted;
    r->status = s->ready ? s->ready(s->ready_arg, r->err, sizeof r->err) : 0;
    if (r->status == 0)
        r->status = td_ckpt_write(w->dir, s, w->keep,
                                  w->has_io ? &w->io : NULL, r->path,
                                  sizeof r->path, r->err, sizeof r->err);
    r->write_ns = td_now_ns() - t0;
    if (r->status == 0) {
        r->bytes = s->used; /* data; the header adds a few KB */
        /* The daemon's debug log only: the runner writes the job's line
         * (it was in the job's log twice). */
        td_debug("checkpoint writer, job %ld: step %lld: %s (%.1f MB in "
                 "%.2f s)", w->job, (long long)r->step, r->path,
                 (double)r->bytes / 1e6, td_ns_to_s(r->write_ns));
    } else {
        td_debug("checkpoint writer, job %ld: step %lld failed: %s", w->job,
                 (long long)r->step, r->err);
    }
    pthread_mutex_lock(&w->mu);
    if (r->status == 0) {
        w->st.written++;
        w->st.bytes += r->bytes;
    } else {
        w->st.failed++;
    }
    w->st.write_ns += r->write_ns;
    pthread_mutex_unlock(&w->mu);
    if (w->done)
        w->done(w->user, r);
    pthread_mutex_lock(&w->mu);
    w->in_flight--;
    pthread_mutex_unlock(&w->mu);
    if (r != &fallback)
        free(r);
}

static void *td__writer_main(void *arg)
{
    td_ckpt_writer *w = arg;
    void *item;
    td_log_set_thread_name("ckpt-writer");
    /* Linux: nice is per thread.  Lowering it cannot fail for lack of
     * privilege; if it fails anyway, the writer just runs at normal
     * priority. */
    if (w->nice > 0 && setpriority(PRIO_PROCESS, (id_t)gettid(), w->nice) < 0)
        td_debug("checkpoint writer: setpriority: %s", td_strerror(-errno));
    while (td_queue_pop(&w->q, &item) == 0)
        td__write_one(w, item, ((td_ckpt_snapshot *)item)->submit_ns);
    return NULL;
}

int td_ckpt_writer_start(td_ckpt_writer **out,
                         const td_ckpt_writer_config *cfg)
{
    *out = NULL;
    if (!cfg || !cfg->dir || !cfg->dir[0] || cfg->keep < 0)
        return -EINVAL;
    td_ckpt_writer *w = calloc(1, sizeof *w);
    if (!w)
        return -ENOMEM;
    if (strlen(cfg->dir) >= sizeof w->dir) {
        free(w);
        return -ENAMETOOLONG;
    }
    snprintf(w->dir, sizeof w->dir, "%s", cfg->dir);
    w->keep = cfg->keep;
    w->done = cfg->done;
    w->user = cfg->user;
    w->job = cfg->job;
    w->nice = cfg->nice < 0 ? 0 : cfg->nice > 19 ? 19 : cfg->nice;
    if (cfg->io) {
        w->io = *cfg->io;
        w->has_io = 1;
    }
    int r = td_queue_init(&w->q, 1);
    if (r < 0) {
        free(w);
        return r;
    }
    pthread_mutex_init(&w->mu, NULL);
    if ((r = pthread_create(&w->thread, NULL, td__writer_main, w)) != 0) {
        pthread_mutex_destroy(&w->mu);
        td_queue_destroy(&w->q);
        free(w);
        return -r;
    }
    *out = w;
    return 0;
}

int td_ckpt_writer_submit(td_ckpt_writer *w, td_ckpt_snapshot *s)
{
    /* Under mu so in_flight never drops below 0 when the write is fast. */
    pthread_mutex_lock(&w->mu);
    int64_t prev = s->submit_ns;
    s->submit_ns = td_now_ns(); /* published to the writer by the queue */
    int r = td_queue_try_push(&w->q, s);
    if (r == 0) {
        w->in_flight++;
    } else {
        s->submit_ns = prev;
        if (r == -EAGAIN) {
            w->st.busy++;
            r = -EBUSY;
        }
    }
    pthread_mutex_unlock(&w->mu);
    return r;
}

int td_ckpt_writer_in_flight(td_ckpt_writer *w)
{
    pthread_mutex_lock(&w->mu);
    int n = w->in_flight;
    pthread_mutex_unlock(&w->mu);
    return n;
}

void td_ckpt_writer_get_stats(td_ckpt_writer *w, td_ckpt_writer_stats *st)
{
    pthread_mutex_lock(&w->mu);
    *st = w->st;
    pthread_mutex_unlock(&w->mu);
}

void td_ckpt_writer_stop(td_ckpt_writer *w)
{
    if (!w)
        return;
    td_queue_close(&w->q);
    pthread_join(w->thread, NULL);
    td_queue_destroy(&w->q);
    pthread_mutex_destroy(&w->mu);
    free(w);
}
