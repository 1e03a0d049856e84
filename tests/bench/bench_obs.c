/* bench_obs.c - what do the observability exports cost?
 *
 * 1. The trace recorder in-process: ns per appended slice when no trace
 *    is recorded (the hooks' one relaxed load) and while one is.
 * 2. A scrape storm against a live traind: the same synthetic job alone
 *    and with 4 clients scraping GET /metrics together at `rate` requests
 *    per second (0: as fast as they can), alternating quiet and storm
 *    runs (MEASURE.md), with the scrape round-trip p50/p99.
 * 3. Recording cost on a live job: samples/s with no trace and with
 *    traces of 50 steps requested back to back.
 * Prints figures; never fails on speed.
 *
 *   bench_obs [seconds_per_run [rate]]    (defaults 6 s, 1000 scrapes/s)
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/clock.h"
#include "benchutil.h"
#include "daemon_harness.h"
#include "obs/trace.h"

enum { SCRAPERS = 4, RUNS = 3 };

static int port;
static pid_t daemon_pid;

/* The daemon's CPU seconds so far (user + system, all threads). */
static double daemon_cpu_s(void)
{
    char path[64], buf[1024];
    unsigned long ut = 0, st = 0;
    snprintf(path, sizeof path, "/proc/%d/stat", (int)daemon_pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return NAN;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u "
                             "%lu %lu", &ut, &st) != 2)
        return NAN;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}
static atomic_int stop_load;

/* ---- 1: the recorder -------------------------------------------------- */

static void bench_recorder(void)
{
    enum { N = 1 << 20 };
    td_trace *t;
    if (td_trace_create(&t, N))
        return;
    double off[5], on[5];
    for (int r = 0; r < 5; r++) {
        int64_t t0 = td_now_ns();
        for (int i = 0; i < N; i++)
            td_trace_slice(t, TD_TRACK_WORKER0, "decode", i, i + 1, -1);
        off[r] = (double)(td_now_ns() - t0) / N;
        td_trace_arm(t);
        t0 = td_now_ns();
        for (int i = 0; i < N; i++)
            td_trace_slice(t, TD_TRACK_WORKER0, "decode", i, i + 1, -1);
        on[r] = (double)(td_now_ns() - t0) / N;
        td_trace_disarm(t);
    }
    printf("recorder: %.2f ns per hook with no trace, %.1f ns per slice "
           "while recording (medians of 5 x %d)\n", td_median(off, 5),
           td_median(on, 5), N);
    td_trace_free(t);
}

/* ---- 2: scrape storm -------------------------------------------------- */

typedef struct {
    int rate; /* per scraper, per second; 0: flat out */
    double *ms;
    int n, cap;
} scraper;

static int scrape_once(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    static const char req[] = "GET /metrics HTTP/1.0\r\n\r\n";
    char buf[65536];
    int fd = socket(AF_INET, SOCK_STREAM, 0), ok = 0;
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
        write(fd, req, sizeof req - 1) == (ssize_t)(sizeof req - 1)) {
        ssize_t r;
        while ((r = read(fd, buf, sizeof buf)) > 0)
            ok = 1;
    }
    close(fd);
    return ok ? 0 : -1;
}

static void *scrape_loop(void *p)
{
    scraper *s = p;
    int64_t next = td_now_ns();
    while (!atomic_load(&stop_load) && s->n < s->cap) {
        int64_t t0 = td_now_ns();
        if (scrape_once() == 0)
            s->ms[s->n++] = (double)(td_now_ns() - t0) / 1e6;
        if (s->rate > 0) {
            next += TD_NS_PER_S / s->rate;
            int64_t now = td_now_ns();
            if (next > now)
                td_sleep_ns(next - now);
        }
    }
    return NULL;
}

typedef struct {
    const td_harness *h;
    int64_t job;
    int traces;
} tracer;

static void *trace_loop(void *p)
{
    tracer *t = p;
    int fd = th_connect(t->h, NULL);
    while (!atomic_load(&stop_load)) {
        json_t *r = th_request(fd, "trace", json_pack("{s:I, s:i}", "job",
                                                      (json_int_t)t->job,
                                                      "steps", 50));
        t->traces += th_ok(r) != NULL;
        json_decref(r);
    }
    close(fd);
    return NULL;
}

enum { QUIET, STORM, TRACING };

/* Runs a job for ~seconds under `load` and returns its samples/s (the
 * job's own figure, warm-up excluded). */
static double run_job(td_harness *h, int fd, int seconds, int load, int rate,
                      double *scrape_ms, int *nscrapes, double *cpu_s)
{
    double cpu0 = daemon_cpu_s();
    json_t *spec = th_spec(100000, 0, 32, 32);
    json_object_set_new(json_object_get(spec, "metrics"), "window_steps",
                        json_integer(50));
    json_t *r = th_request(fd, "submit", json_pack("{s:o}", "spec", spec));
    int64_t job = json_integer_value(json_object_get(th_ok(r), "job"));
    json_decref(r);
    th_wait_state(fd, job, "running", 10000);
    pthread_t th[SCRAPERS], tt;
    scraper s[SCRAPERS];
    tracer tr = {h, job, 0};
    atomic_store(&stop_load, 0);
    for (int i = 0; load == STORM && i < SCRAPERS; i++) {
        s[i] = (scraper){rate / SCRAPERS, calloc(1000000, sizeof(double)), 0,
                         1000000};
        pthread_create(&th[i], NULL, scrape_loop, &s[i]);
    }
    if (load == TRACING)
        pthread_create(&tt, NULL, trace_loop, &tr);
    sleep((unsigned)seconds);
    *cpu_s = daemon_cpu_s() - cpu0;
    atomic_store(&stop_load, 1);
    *nscrapes = 0;
    for (int i = 0; load == STORM && i < SCRAPERS; i++) {
        pthread_join(th[i], NULL);
        memcpy(scrape_ms + *nscrapes, s[i].ms, (size_t)s[i].n * sizeof(double));
        *nscrapes += s[i].n;
        free(s[i].ms);
    }
    if (load == TRACING) {
        pthread_join(tt, NULL);
        *nscrapes = tr.traces;
    }
    r = th_job_request(fd, "cancel", job);
    json_decref(r);
    th_wait_state(fd, job, "cancelled", 20000);
    r = th_job_request(fd, "show", job);
    double sps = json_number_value(json_object_get(
        json_object_get(json_object_get(th_ok(r), "job"), "result"),
        "samples_per_s"));
    json_decref(r);
    return sps;
}

static int free_port(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) ||
        getsockname(fd, (struct sockaddr *)&sa, &len))
        return -1;
    close(fd);
    return ntohs(sa.sin_port);
}

int main(int argc, char **argv)
{
    int seconds = argc > 1 ? atoi(argv[1]) : 6;
    int rate = argc > 2 ? atoi(argv[2]) : 1000;
    char conf[] = "/tmp/bench_obs_XXXXXX";
    bench_recorder();
    int cfd = mkstemp(conf);
    port = free_port();
    if (cfd < 0 || port < 0)
        return 1;
    dprintf(cfd, "metrics_listen = 127.0.0.1:%d\n", port);
    close(cfd);
    td_harness h;
    const char *args[] = {"--config", conf, NULL};
    if (th_start(&h, args) != 0) {
        fprintf(stderr, "cannot start traind\n");
        return 1;
    }
    int fd = th_connect(&h, NULL);
    double q[RUNS], st[RUNS], tr[RUNS];
    double *ms = calloc(SCRAPERS * 1000000, sizeof(double));
    int n = 0, traces = 0;
    double cq[RUNS], cs[RUNS], ct[RUNS];
    daemon_pid = h.pid;
    /* A B C A B C ... */
    for (int i = 0; i < RUNS; i++) {
        q[i] = run_job(&h, fd, seconds, QUIET, 0, ms, &n, &cq[i]);
        st[i] = run_job(&h, fd, seconds, STORM, rate, ms, &n, &cs[i]);
        qsort(ms, (size_t)n, sizeof *ms, td_cmp_double);
        printf("run %d: quiet %.1f samples/s; storm %.1f samples/s with %d "
               "scrapes in %d s (p50 %.2f ms, p99 %.2f ms)", i + 1, q[i],
               st[i], n, seconds, n ? ms[n / 2] : NAN,
               n ? ms[(size_t)(n * 0.99)] : NAN);
        tr[i] = run_job(&h, fd, seconds, TRACING, 0, ms, &traces, &ct[i]);
        printf("; tracing %.1f samples/s (%d traces of 50 steps)\n", tr[i],
               traces);
        printf("  daemon CPU: quiet %.2f s, storm %.2f s (%.3f ms per "
               "scrape), tracing %.2f s\n", cq[i], cs[i],
               n ? 1e3 * (cs[i] - cq[i]) / n : NAN, ct[i]);
        fflush(stdout);
    }
    double mq = td_median(q, RUNS), ms_ = td_median(st, RUNS);
    double mt = td_median(tr, RUNS);
    printf("median of %d: quiet %.1f, scrape storm (%s%d/s) %.1f = %.1f%% of "
           "quiet, tracing %.1f = %.1f%% of quiet\n", RUNS, mq,
           rate ? "" : "flat out, ", rate, ms_, 100 * ms_ / mq, mt,
           100 * mt / mq);
    free(ms);
    close(fd);
    th_stop(&h);
    th_cleanup(&h);
    unlink(conf);
    return 0;
}
