/* bench_daemon.c - does a busy control socket slow training?
 *
 * Runs a job on a live traind alone, then with 100 subscribers (reading
 * everything) and one client sending 1,000 `show` requests per second,
 * alternating quiet and loaded runs (A B A B ...).  Prints the job's
 * samples/s both ways, the status round-trip p50/p99 and how much of a
 * core the daemon's loop thread used.  Targets (issue 5): throughput drop
 * < 2%, p99 < 5 ms.  Never fails on speed.
 *
 * Two jobs, both with one compute thread: the trainer thread is pinned to
 * the first CPU, the daemon's loop thread and the load generator to the
 * last, as on a GPU box where clients, the loop and the trainer do not
 * share a core.  What is left of a drop is then the daemon's design (locks,
 * queues, the trainer's event hand-off), not CPU time taken away:
 *   reference  fmnist-cnn on synthetic input, batch 128 (tens of ms a step)
 *   stress     a tiny model with ~1 ms steps, the worst case for the
 *              per-step traffic between the trainer and the loop
 *
 *   bench_daemon [seconds_per_run] [pairs] [shared]
 *                              (TD_BUILD_ROOT, TD_SOURCE_ROOT set by meson
 *                               test --benchmark)
 * "shared" pins nothing: the load generator's threads and the loop then
 * take CPU time from the trainer too, which on 2 cores is most of the drop
 * seen.
 *
 * Last, "long run": a tiny job of 40-odd epochs a second (its record's
 * history grows by one entry each) for 4 x seconds_per_run, a new
 * connection every half second as trainctl makes one: the greeting and a
 * `list` round trip, at the start and at the end.  A daemon that wrote
 * the record (or serialised the dashboard's curves) for every epoch took
 * 7 s to greet after 20 s of such a job; the loop must stay as quick at
 * the end as at the start.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "benchutil.h"
#include "daemon_harness.h"

enum { SUBSCRIBERS = 100 };

static atomic_int stop_load;
static int pin_load = 1;

/* Pins thread tid (0: the calling thread) to the first or the last CPU
 * this process may use; nothing when pinning is off or there is one CPU. */
static void pin_thread(pid_t tid, int last)
{
    cpu_set_t set;
    if (!pin_load || sched_getaffinity(0, sizeof set, &set) != 0)
        return;
    int first = -1, lastc = -1;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set)) {
            if (first < 0)
                first = c;
            lastc = c;
        }
    if (first == lastc)
        return;
    CPU_ZERO(&set);
    CPU_SET(last ? lastc : first, &set);
    sched_setaffinity(tid, sizeof set, &set);
}

/* CPU seconds (user + system) used so far by the thread of process pid
 * named `name` (pthread_setname_np, as /proc shows it), its id in *tid;
 * -1 if not found. */
static double thread_cpu_s(pid_t pid, const char *name, pid_t *tid)
{
    char path[512], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    double cpu = -1;
    struct dirent *e;
    while (d && cpu < 0 && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "/proc/%d/task/%s/stat", (int)pid,
                 e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = 0;
        char *open = strchr(buf, '('), *close_ = strrchr(buf, ')');
        if (!open || !close_ ||
            (size_t)(close_ - open - 1) != strlen(name) ||
            strncmp(open + 1, name, strlen(name)) != 0)
            continue;
        /* after ") ": state(3) ... utime(14) stime(15) */
        unsigned long ut = 0, st = 0;
        if (sscanf(close_ + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u "
                               "%lu %lu", &ut, &st) == 2) {
            cpu = (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
            if (tid)
                *tid = (pid_t)atoi(e->d_name);
        }
    }
    if (d)
        closedir(d);
    return cpu;
}

typedef struct {
    const td_harness *h;
    int64_t job;
    double *rtt_ms;
    int n, cap;
} status_arg;

static void *status_client(void *p)
{
    status_arg *a = p;
    pin_thread(0, 1);
    int fd = th_connect(a->h, NULL);
    int64_t next = td_now_ns();
    while (!atomic_load(&stop_load) && a->n < a->cap) {
        int64_t t0 = td_now_ns();
        json_t *r = th_job_request(fd, "show", a->job);
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
    pin_thread(0, 1);
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

/* The reference job: fmnist-cnn on synthetic device-resident batches. */
static json_t *reference_spec(void)
{
    return json_pack(
        "{s:s, s:{s:i}, s:{s:[i,i], s:i, s:s, s:{s:[f], s:[f]}}, s:s,"
        " s:{s:s, s:f, s:f}, s:i, s:i, s:i, s:i,"
        " s:{s:i, s:i}, s:{s:i}}",
        "name", "reference", "data", "classes", 10,
        "input", "size", 28, 28, "channels", 1, "source", "synthetic",
        "normalize", "mean", 0.286, "std", 0.353, "model", "fmnist-cnn",
        "optimizer", "type", "sgd", "lr", 0.01, "momentum", 0.9,
        "batch_size", 128, "epochs", 100000, "seed", 1, "threads", 1,
        "metrics", "warmup_steps", 5, "window_steps", 10,
        "checkpoint", "every_steps", 0);
}

/* Pins the daemon's thread `name` to the first or the last CPU. */
static void pin_daemon_thread(pid_t pid, const char *name, int last)
{
    pid_t tid = 0;
    if (thread_cpu_s(pid, name, &tid) >= 0)
        pin_thread(tid, last);
}

static int64_t job_step(int fd, int64_t job)
{
    json_t *r = th_job_request(fd, "show", job);
    int64_t step = json_integer_value(json_object_get(
        json_object_get(th_ok(r), "job"), "step"));
    json_decref(r);
    return step;
}

typedef struct {
    double sps, p50, p99, loop_core; /* loop_core: share of one core */
    double trainer_core;             /* the trainer thread's CPU / wall */
    int requests;
} run_result;

/* One interval of `seconds` on the running job, with or without load;
 * samples/s from the steps done in it. */
static run_result interval(td_harness *h, int fd, int64_t job, double batch,
                           int seconds, int load)
{
    run_result out = {NAN, NAN, NAN, NAN, NAN, 0};
    pthread_t st, sb;
    status_arg sa = {h, job, calloc(200000, sizeof(double)), 0, 200000};
    atomic_store(&stop_load, 0);
    double cpu0 = thread_cpu_s(h->pid, "loop", NULL);
    double tcpu0 = thread_cpu_s(h->pid, "trainer", NULL);
    int64_t step0 = job_step(fd, job), t0 = td_now_ns();
    if (load) {
        pthread_create(&sb, NULL, subscribers, h);
        pthread_create(&st, NULL, status_client, &sa);
    }
    sleep((unsigned)seconds);
    atomic_store(&stop_load, 1);
    if (load) {
        pthread_join(st, NULL);
        pthread_join(sb, NULL);
    }
    double cpu1 = thread_cpu_s(h->pid, "loop", NULL);
    double tcpu1 = thread_cpu_s(h->pid, "trainer", NULL);
    double span = (double)(td_now_ns() - t0) / 1e9;
    int64_t step1 = job_step(fd, job);
    out.loop_core = (cpu1 - cpu0) / span;
    out.trainer_core = (tcpu1 - tcpu0) / span;
    out.sps = (double)(step1 - step0) * batch / span;
    if (load && sa.n > 0) {
        qsort(sa.rtt_ms, (size_t)sa.n, sizeof(double), td_cmp_double);
        out.p50 = sa.rtt_ms[sa.n / 2];
        out.p99 = sa.rtt_ms[(size_t)(sa.n * 0.99)];
        out.requests = sa.n;
    }
    free(sa.rtt_ms);
    return out;
}

/* pairs x (quiet, loaded), alternating; prints each run and the summary. */
static void scenario(td_harness *h, int fd, const char *name, json_t *spec,
                     int seconds, int pairs)
{
    double ratio[16], p99[16], p50[16];
    double loop_q = 0, loop_l = 0, tr_q[16], tr_l[16];
    printf("%s job, %d quiet/loaded pairs of %d s intervals:\n", name,
           pairs, seconds);
    double batch = (double)json_integer_value(json_object_get(spec,
                                                              "batch_size"));
    json_t *r = th_request(fd, "submit", json_pack("{s:O}", "spec", spec));
    int64_t job = json_integer_value(json_object_get(th_ok(r), "job"));
    json_decref(r);
    th_wait_state(fd, job, "running", 10000);
    /* the trainer on the first CPU, the loop with the load on the last */
    pin_daemon_thread(h->pid, "trainer", 0);
    pin_daemon_thread(h->pid, "loop", 1);
    sleep(1); /* past the warm-up steps and the first window */
    /* One job, quiet and loaded intervals alternating: drifts of the
     * machine slower than an interval cancel out of the pair ratios. */
    for (int i = 0; i < pairs; i++) {
        run_result q = interval(h, fd, job, batch, seconds, 0);
        run_result l = interval(h, fd, job, batch, seconds, 1);
        ratio[i] = l.sps / q.sps;
        p50[i] = l.p50;
        p99[i] = l.p99;
        tr_q[i] = q.trainer_core;
        tr_l[i] = l.trainer_core;
        loop_q += q.loop_core / pairs;
        loop_l += l.loop_core / pairs;
        printf("  pair %d: quiet %.1f samples/s, loaded %.1f samples/s "
               "(%.1f%%), %d status requests, p50 %.2f ms, p99 %.2f ms; "
               "trainer on CPU %.1f%% / %.1f%% of the time\n",
               i + 1, q.sps, l.sps, 100 * ratio[i], l.requests, l.p50, l.p99,
               100 * q.trainer_core, 100 * l.trainer_core);
        fflush(stdout);
    }
    r = th_job_request(fd, "cancel", job);
    json_decref(r);
    th_wait_state(fd, job, "cancelled", 20000);
    double rr[16];
    memcpy(rr, ratio, sizeof rr);
    double lo = rr[0], hi = rr[0];
    for (int i = 1; i < pairs; i++) {
        lo = fmin(lo, rr[i]);
        hi = fmax(hi, rr[i]);
    }
    double med = td_median(rr, pairs);
    printf("  %s: throughput under load %.1f%% of quiet (median of %d, min "
           "%.1f%%, max %.1f%%; target: drop < 2%%), status p50 %.2f ms, "
           "p99 %.2f ms (median; target < 5 ms), loop thread %.1f%% of a "
           "core quiet, %.1f%% loaded, trainer thread on CPU %.1f%% of the "
           "time quiet, %.1f%% loaded (medians; off CPU = waiting)\n",
           name, 100 * med, pairs, 100 * lo, 100 * hi, td_median(p50, pairs),
           td_median(p99, pairs), 100 * loop_q, 100 * loop_l,
           100 * td_median(tr_q, pairs), 100 * td_median(tr_l, pairs));
    json_decref(spec);
}

/* The greeting and a `list` round trip on a new connection, in ms. */
static double connect_ms(const td_harness *h)
{
    int64_t t0 = td_now_ns();
    int fd = th_connect(h, NULL);
    if (fd < 0)
        return -1;
    json_decref(th_request(fd, "list", NULL));
    close(fd);
    return (double)(td_now_ns() - t0) / 1e6;
}

static void long_run(const td_harness *h, int fd, int seconds)
{
    json_t *spec = th_spec(100000, 0, 8, 4);
    json_t *r = th_request(fd, "submit", json_pack("{s:o}", "spec", spec));
    int64_t job = json_integer_value(json_object_get(th_ok(r), "job"));
    json_decref(r);
    if (!job || !th_wait_state(fd, job, "running", 20000)) {
        printf("long run: the job did not start\n");
        return;
    }
    int n = seconds * 2, quarter = n / 4 > 0 ? n / 4 : 1;
    double first = 0, last = 0;
    for (int i = 0; i < n; i++) {
        double ms = connect_ms(h);
        if (i < quarter)
            first = fmax(first, ms);
        if (i >= n - quarter)
            last = fmax(last, ms);
        usleep(500000);
    }
    r = th_job_request(fd, "show", job);
    json_t *j = json_object_get(th_ok(r), "job");
    char *text = json_dumps(j, JSON_COMPACT);
    printf("long run: %lld epochs in %d s, record %.2f MB; new connection "
           "(greeting + list) max %.1f ms in the first quarter, %.1f ms in "
           "the last\n",
           (long long)json_array_size(json_object_get(j, "history")),
           seconds, text ? (double)strlen(text) / 1e6 : 0, first, last);
    free(text);
    json_decref(r);
    json_decref(th_job_request(fd, "cancel", job));
    th_wait_state(fd, job, "cancelled", 20000);
}

int main(int argc, char **argv)
{
    int seconds = argc > 1 ? atoi(argv[1]) : 5;
    int pairs = argc > 2 ? atoi(argv[2]) : 3;
    if (seconds < 1)
        seconds = 1;
    if (pairs < 1 || pairs > 16)
        pairs = 3;
    pin_load = !(argc > 3 && strcmp(argv[3], "shared") == 0);
    printf("%s\n", pin_load ? "trainer pinned to the first CPU, loop and "
                                "load generator to the last"
                              : "nothing pinned (shared cores)");
    setvbuf(stdout, NULL, _IOLBF, 0);
    td_harness h;
    if (th_start(&h, NULL) != 0) {
        fprintf(stderr, "cannot start traind\n");
        return 1;
    }
    int fd = th_connect(&h, NULL);
    scenario(&h, fd, "reference", reference_spec(), seconds, pairs);
    json_t *tiny = th_spec(100000, 0, 32, 32);
    json_object_set_new(json_object_get(tiny, "metrics"), "window_steps",
                        json_integer(50));
    scenario(&h, fd, "stress", tiny, seconds, pairs);
    long_run(&h, fd, 4 * seconds);
    close(fd);
    th_stop(&h);
    th_cleanup(&h);
    return 0;
}
