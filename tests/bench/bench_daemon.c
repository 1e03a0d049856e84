/* bench_daemon.c - does a busy control socket slow training?
 *
 * Runs the same synthetic job twice on a live traind: alone, then with
 * 100 subscribers (reading everything, every step event included) and one
 * client sending 1,000 `show` requests per second.  Prints the job's
 * samples/s both ways and the status round-trip p50/p99.  Targets (issue
 * 5): throughput drop < 2%, p99 < 5 ms.  Never fails on speed.
 *
 *   bench_daemon [seconds_per_run]      (TD_BUILD_ROOT, TD_SOURCE_ROOT set
 *                                        by meson test --benchmark)
 */
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "daemon_harness.h"

enum { SUBSCRIBERS = 100 };

static atomic_int stop_load;

typedef struct {
    const td_harness *h;
    int64_t job;
    double *rtt_ms;
    int n, cap;
} status_arg;

static void *status_client(void *p)
{
    status_arg *a = p;
    int fd = th_connect(a->h, NULL);
    int64_t next = td_now_ns();
    while (!atomic_load(&stop_load) && a->n < a->cap) {
        int64_t t0 = td_now_ns();
        json_t *r = th_request(fd, "show", json_pack("{s:I}", "job",
                                                     (json_int_t)a->job));
        a->rtt_ms[a->n++] = (double)(td_now_ns() - t0) / 1e6;
        json_decref(r);
        next += TD_NS_PER_MS; /* 1,000 requests per second */
        int64_t now = td_now_ns();
        if (next > now)
            td_sleep_ns(next - now);
    }
    close(fd);
    return NULL;
}

static void *subscribers(void *p)
{
    const td_harness *h = p;
    int fds[SUBSCRIBERS];
    struct pollfd pfd[SUBSCRIBERS];
    char buf[65536];
    for (int i = 0; i < SUBSCRIBERS; i++) {
        fds[i] = th_connect(h, NULL);
        const char *sub = "{\"id\":1,\"cmd\":\"subscribe\"}\n";
        th_send_raw(fds[i], sub, strlen(sub));
        pfd[i] = (struct pollfd){.fd = fds[i], .events = POLLIN};
    }
    while (!atomic_load(&stop_load)) {
        if (poll(pfd, SUBSCRIBERS, 50) <= 0)
            continue;
        for (int i = 0; i < SUBSCRIBERS; i++)
            if (pfd[i].revents & POLLIN)
                if (read(fds[i], buf, sizeof buf) <= 0)
                    pfd[i].fd = -1;
    }
    for (int i = 0; i < SUBSCRIBERS; i++)
        close(fds[i]);
    return NULL;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Runs a job for ~seconds (cancelled then) and returns its samples/s. */
static double run_job(td_harness *h, int fd, int seconds, int load,
                      double *p50, double *p99)
{
    json_t *spec = th_spec(100000, 0, 32, 32);
    json_object_set_new(json_object_get(spec, "metrics"), "window_steps",
                        json_integer(50));
    json_t *r = th_request(fd, "submit", json_pack("{s:o}", "spec", spec));
    int64_t job = json_integer_value(json_object_get(th_ok(r), "job"));
    json_decref(r);
    th_wait_state(fd, job, "running", 10000);
    pthread_t st, sb;
    status_arg sa = {h, job, calloc(200000, sizeof(double)), 0, 200000};
    atomic_store(&stop_load, 0);
    if (load) {
        pthread_create(&sb, NULL, subscribers, h);
        pthread_create(&st, NULL, status_client, &sa);
    }
    sleep((unsigned)seconds);
    r = th_request(fd, "show", json_pack("{s:I}", "job", (json_int_t)job));
    json_t *w = json_object_get(json_object_get(th_ok(r), "job"),
                                "last_window");
    (void)w;
    json_decref(r);
    atomic_store(&stop_load, 1);
    if (load) {
        pthread_join(st, NULL);
        pthread_join(sb, NULL);
    }
    r = th_request(fd, "cancel", json_pack("{s:I}", "job", (json_int_t)job));
    json_decref(r);
    th_wait_state(fd, job, "cancelled", 20000);
    r = th_request(fd, "show", json_pack("{s:I}", "job", (json_int_t)job));
    double sps = json_number_value(json_object_get(
        json_object_get(json_object_get(th_ok(r), "job"), "result"),
        "samples_per_s"));
    json_decref(r);
    if (load && sa.n > 0) {
        qsort(sa.rtt_ms, (size_t)sa.n, sizeof(double), cmp);
        *p50 = sa.rtt_ms[sa.n / 2];
        *p99 = sa.rtt_ms[(size_t)(sa.n * 0.99)];
        printf("  status requests: %d in %d s\n", sa.n, seconds);
    }
    free(sa.rtt_ms);
    return sps;
}

int main(int argc, char **argv)
{
    int seconds = argc > 1 ? atoi(argv[1]) : 10;
    td_harness h;
    if (th_start(&h, NULL) != 0) {
        fprintf(stderr, "cannot start traind\n");
        return 1;
    }
    int fd = th_connect(&h, NULL);
    double p50 = NAN, p99 = NAN;
    /* Alternate quiet and loaded runs (MEASURE.md): A B A B. */
    double quiet[2], loaded[2];
    for (int i = 0; i < 2; i++) {
        quiet[i] = run_job(&h, fd, seconds, 0, NULL, NULL);
        printf("run %d quiet:  %.1f samples/s\n", i + 1, quiet[i]);
        loaded[i] = run_job(&h, fd, seconds, 1, &p50, &p99);
        printf("run %d loaded: %.1f samples/s (%d subscribers + 1000 "
               "status/s), status p50 %.2f ms, p99 %.2f ms\n", i + 1,
               loaded[i], SUBSCRIBERS, p50, p99);
    }
    double q = (quiet[0] + quiet[1]) / 2, l = (loaded[0] + loaded[1]) / 2;
    printf("throughput under load: %.1f%% of quiet (target: drop < 2%%)\n",
           100 * l / q);
    close(fd);
    th_stop(&h);
    th_cleanup(&h);
    return 0;
}
