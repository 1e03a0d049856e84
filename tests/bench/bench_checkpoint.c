/* bench_checkpoint.c - what a checkpoint costs the trainer.
 *
 * A fake trainer runs fixed-work steps (a float loop calibrated to about
 * STEP_MS) over resnet18-sized state: 11.7M float parameters plus as much
 * momentum (93.6 MB).  Every EVERY steps it copies the state into a host
 * snapshot (the CPU backend's equivalent of the async device-to-host copy)
 * and hands it to the td_ckpt_writer thread.  Prints:
 *   - median time of checkpoint steps (work + snapshot copy + submit) vs
 *     the other steps, and their ratio,
 *   - the snapshot copy time (paid on the trainer thread),
 *   - median step time of steps that ran while a write was in flight vs
 *     steps with the writer idle, and their ratio (target <= 1.05),
 *   - write throughput (write + fsync + rename + dir fsync).
 * Usage: bench_checkpoint [steps=60] [every=10] [step_ms=100] [dir=.]
 *                         [writer nice=10]
 * Never fails on speed.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "store/checkpoint.h"

#define NPARAM 11700000L

static volatile float sink;

/* Fixed work: `iters` passes of a multiply-add over a 64 KiB buffer. */
static void work(float *buf, long iters)
{
    for (long it = 0; it < iters; it++)
        for (int i = 0; i < 16384; i++)
            buf[i] = buf[i] * 0.999f + 0.001f;
    sink = buf[0];
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static double median_ms(int64_t *v, int n)
{
    if (n == 0)
        return 0;
    qsort(v, (size_t)n, sizeof *v, cmp_i64);
    return (double)(n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2) / 1e6;
}

struct done_stats {
    pthread_mutex_t mu;
    int64_t write_ns;
    size_t bytes;
    int ok, failed;
};

static void on_done(void *user, const td_ckpt_result *r)
{
    struct done_stats *d = user;
    pthread_mutex_lock(&d->mu);
    if (r->status == 0) {
        d->ok++;
        d->write_ns += r->write_ns;
        d->bytes += r->bytes;
    } else {
        d->failed++;
    }
    pthread_mutex_unlock(&d->mu);
}

static int fill(td_ckpt_snapshot *s, const float *w, const float *m,
                int64_t step)
{
    void *p;
    int64_t shape[1] = {NPARAM};
    td_ckpt_snapshot_reset(s);
    int r = td_ckpt_snapshot_add(s, "params", TD_DT_F32, 1, shape, &p);
    if (r == 0)
        memcpy(p, w, NPARAM * sizeof(float));
    if (r == 0 && (r = td_ckpt_snapshot_add(s, "momentum", TD_DT_F32, 1,
                                            shape, &p)) == 0)
        memcpy(p, m, NPARAM * sizeof(float));
    s->meta.step = step;
    return r;
}

static long calibrate(float *buf, double step_ms)
{
    int64_t t0 = td_now_ns();
    work(buf, 200);
    double per = (double)(td_now_ns() - t0) / 200.0;
    long iters = (long)(step_ms * 1e6 / per);
    return iters > 0 ? iters : 1;
}

int main(int argc, char **argv)
{
    int steps = argc > 1 ? atoi(argv[1]) : 60;
    int every = argc > 2 ? atoi(argv[2]) : 10;
    double step_ms = argc > 3 ? atof(argv[3]) : 100;
    const char *base = argc > 4 ? argv[4] : ".";
    int nice = argc > 5 ? atoi(argv[5]) : 10;
    char dir[4096];
    td_ckpt_snapshot snap[2];
    td_ckpt_writer *w;
    struct done_stats d = {.ok = 0};
    int busy = 0, r;

    snprintf(dir, sizeof dir, "%s/bench_ckpt_XXXXXX", base);
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    float *wts = malloc(NPARAM * sizeof(float));
    float *mom = malloc(NPARAM * sizeof(float));
    float *buf = calloc(16384, sizeof(float));
    int64_t *busy_t = calloc((size_t)steps, sizeof(int64_t));
    int64_t *idle_t = calloc((size_t)steps, sizeof(int64_t));
    int64_t *copy_t = calloc((size_t)steps, sizeof(int64_t));
    int64_t *ck_t = calloc((size_t)steps, sizeof(int64_t)); /* whole step */
    int64_t *other_t = calloc((size_t)steps, sizeof(int64_t));
    int nb = 0, ni = 0, nc = 0, nk = 0, no = 0;
    if (!wts || !mom || !buf || !busy_t || !idle_t || !copy_t || !ck_t ||
        !other_t)
        return 1;
    for (long i = 0; i < NPARAM; i++)
        wts[i] = mom[i] = (float)i * 1e-7f;
    size_t bytes = 2 * NPARAM * sizeof(float);
    for (int i = 0; i < 2; i++)
        if ((r = td_ckpt_snapshot_init(&snap[i], bytes, 4)) < 0)
            return 1;
    pthread_mutex_init(&d.mu, NULL);
    td_ckpt_writer_config cfg = {.dir = dir, .keep = 2, .done = on_done,
                                 .user = &d, .nice = nice};
    if ((r = td_ckpt_writer_start(&w, &cfg)) < 0) {
        fprintf(stderr, "writer: %s\n", td_strerror(r));
        return 1;
    }
    long iters = calibrate(buf, step_ms);
    int next = 0;
    for (int step = 1; step <= steps; step++) {
        int writing = td_ckpt_writer_in_flight(w) > 0;
        int64_t t0 = td_now_ns();
        work(buf, iters);
        int64_t t1 = td_now_ns();
        if (writing)
            busy_t[nb++] = t1 - t0;
        else
            idle_t[ni++] = t1 - t0;
        if (step % every != 0) {
            other_t[no++] = t1 - t0;
            continue;
        }
        td_ckpt_snapshot *s = &snap[next];
        if (td_ckpt_writer_in_flight(w) == 2) { /* both buffers held */
            busy++;
            continue;
        }
        fill(s, wts, mom, step);
        if (td_ckpt_writer_submit(w, s) == -EBUSY)
            busy++;
        else
            next ^= 1;
        copy_t[nc++] = td_now_ns() - t1;
        ck_t[nk++] = td_now_ns() - t0;
    }
    td_ckpt_writer_stop(w);
    double mi = median_ms(idle_t, ni), mb = median_ms(busy_t, nb);
    double mk = median_ms(ck_t, nk), mo = median_ms(other_t, no);
    printf("checkpoint: %.1f MB state, %d steps of ~%.0f ms, every %d, "
           "writer nice %d (dir %s)\n", (double)bytes / 1e6, steps, step_ms,
           every, nice, dir);
    printf("checkpoint: trainer step median %.2f ms writer idle (%d steps), "
           "%.2f ms while writing (%d steps): ratio %.3f (target <= 1.05)\n",
           mi, ni, mb, nb, mi > 0 ? mb / mi : 0.0);
    printf("checkpoint: checkpoint steps (work + snapshot copy + submit) "
           "median %.2f ms vs other steps %.2f ms: ratio %.3f\n", mk, mo,
           mo > 0 ? mk / mo : 0.0);
    printf("checkpoint: snapshot copy on the trainer: median %.2f ms "
           "(%d copies) = %.1f%% of a step\n", median_ms(copy_t, nc), nc,
           mi > 0 ? 100.0 * median_ms(copy_t, nc) / mi : 0.0);
    printf("checkpoint: %d written, %d failed, %d skipped busy; write "
           "throughput %.0f MB/s (write+fsync+rename+dir fsync)\n", d.ok,
           d.failed, busy,
           d.write_ns > 0 ? (double)d.bytes / 1e6 / td_ns_to_s(d.write_ns)
                          : 0.0);
    td_ckpt_prune(dir, 0); /* keep 0: removes them all */
    rmdir(dir);
    for (int i = 0; i < 2; i++)
        td_ckpt_snapshot_destroy(&snap[i]);
    free(wts);
    free(mom);
    free(buf);
    free(busy_t);
    free(idle_t);
    free(copy_t);
    free(ck_t);
    free(other_t);
    return 0;
}
