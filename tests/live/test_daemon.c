/* test_daemon.c - traind live: started by each test on its own socket and
 * state dir, driven over the control protocol. */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon_harness.h"
#include "tdtest.h"

/* Every test ends with a clean SIGTERM exit: status 0 also means no
 * sanitizer report (ASan, LSan and TSan exit non-zero when they find one). */
TH_FIXTURE(H)

/* A job that trains until it is cancelled, keeping later jobs pending. */
static int64_t submit_blocker(int fd)
{
    int64_t id = th_submit(fd, th_tiny_spec(100000, 0));
    ck_assert(th_wait_state(fd, id, "running", 10000));
    return id;
}

/* A tiny job; pending while a blocker runs. */
static int64_t submit(int fd) { return th_submit(fd, th_tiny_spec(1, 0)); }

static void cancel_and_wait(int fd, int64_t id)
{
    json_t *r = th_job_request(fd, "cancel", id);
    ck_assert_ptr_nonnull(th_ok(r));
    json_decref(r);
    ck_assert(th_wait_state(fd, id, "cancelled", 20000));
}

START_TEST(test_hello_and_version)
{
    json_t *hello;
    int fd = th_connect(&H, &hello);
    ck_assert_int_ge(fd, 0);
    json_t *h = json_object_get(hello, "hello");
    ck_assert_int_eq(json_integer_value(json_object_get(h, "proto")), 1);
    ck_assert_ptr_nonnull(json_string_value(json_object_get(h, "version")));
    ck_assert_str_eq(json_string_value(json_object_get(h, "device")), "cpu");
    json_t *r = th_request(fd, "version", NULL);
    ck_assert_int_eq(json_integer_value(json_object_get(th_ok(r), "proto")), 1);
    /* the CPU's bf16 support, for trainctl version */
    json_t *cpu = json_object_get(json_object_get(th_ok(r), "devices"), "cpu");
    ck_assert_ptr_nonnull(json_string_value(json_object_get(cpu, "isa")));
    ck_assert(json_is_boolean(json_object_get(cpu, "bf16")));
    ck_assert(json_is_boolean(json_object_get(cpu, "bf16_auto")));
    const json_t *rate = json_object_get(cpu, "dot_rate");
    ck_assert(json_is_null(rate) || json_number_value(rate) > 0);
    json_decref(r);
    json_decref(hello);
    close(fd);
}
END_TEST

START_TEST(test_socket_mode)
{
    struct stat st;
    ck_assert_int_eq(stat(H.sock, &st), 0);
    ck_assert(S_ISSOCK(st.st_mode));
    ck_assert_int_eq(st.st_mode & 0777, 0660);
}
END_TEST

START_TEST(test_malformed_then_valid)
{
    int fd = th_connect(&H, NULL);
    const char *bad = "{\"id\":1,\"cmd\":\n";
    th_send_raw(fd, bad, strlen(bad));
    json_t *r = th_read_json(fd, 5000);
    ck_assert_str_eq(th_err_class(r), "bad_request");
    json_decref(r);
    r = th_request(fd, "explode", NULL);
    ck_assert_str_eq(th_err_class(r), "unknown_command");
    json_decref(r);
    r = th_request(fd, "list", json_pack("{s:b}", "all", 1));
    ck_assert_str_eq(th_err_class(r), "invalid_args");
    json_decref(r);
    r = th_request(fd, "version", NULL); /* the connection still works */
    ck_assert_ptr_nonnull(th_ok(r));
    json_decref(r);
    close(fd);
}
END_TEST

START_TEST(test_oversized_line_closes_only_that_client)
{
    int other = th_connect(&H, NULL);
    int fd = th_connect(&H, NULL);
    size_t n = 1024 * 1024 + 100;
    char *big = malloc(n);
    memset(big, 'a', n);
    th_send_raw(fd, big, n);
    free(big);
    json_t *r = th_read_json(fd, 5000);
    ck_assert_str_eq(th_err_class(r), "too_large");
    json_decref(r);
    ck_assert_ptr_null(th_read_line(fd, 5000)); /* then EOF */
    close(fd);
    r = th_request(other, "version", NULL);
    ck_assert_ptr_nonnull(th_ok(r));
    json_decref(r);
    close(other);
}
END_TEST

START_TEST(test_disconnect_mid_line)
{
    int fd = th_connect(&H, NULL);
    const char *part = "{\"id\":1,\"cmd\":\"sub";
    th_send_raw(fd, part, strlen(part));
    close(fd);
    fd = th_connect(&H, NULL);
    json_t *r = th_request(fd, "list", NULL);
    ck_assert_ptr_nonnull(th_ok(r));
    json_decref(r);
    close(fd);
}
END_TEST

START_TEST(test_submit_list_show_cancel)
{
    int fd = th_connect(&H, NULL);
    int64_t blocker = submit_blocker(fd);
    int64_t a = submit(fd), b = submit(fd);
    ck_assert_int_eq(a, blocker + 1);
    ck_assert_int_eq(b, a + 1);
    json_t *r = th_request(fd, "list", NULL);
    json_t *jobs = json_object_get(th_ok(r), "jobs");
    ck_assert_uint_eq(json_array_size(jobs), 3);
    ck_assert_str_eq(json_string_value(json_object_get(
                         json_array_get(jobs, 0), "state")), "running");
    ck_assert_str_eq(json_string_value(json_object_get(
                         json_array_get(jobs, 1), "state")), "pending");
    ck_assert_int_eq(json_integer_value(json_object_get(
                         json_array_get(jobs, 0), "uid")), (int)getuid());
    json_decref(r);
    r = th_job_request(fd, "show", a);
    json_t *job = json_object_get(th_ok(r), "job");
    ck_assert_str_eq(json_string_value(json_object_get(job, "name")), "tiny");
    ck_assert_ptr_nonnull(json_object_get(job, "spec"));
    json_decref(r);
    r = th_job_request(fd, "cancel", a);
    ck_assert_str_eq(json_string_value(json_object_get(th_ok(r), "state")),
                     "cancelled");
    json_decref(r);
    r = th_job_request(fd, "cancel", a);
    ck_assert_str_eq(th_err_class(r), "conflict");
    json_decref(r);
    r = th_request(fd, "list", json_pack("{s:s}", "state", "cancelled"));
    ck_assert_uint_eq(json_array_size(json_object_get(th_ok(r), "jobs")), 1);
    json_decref(r);
    /* Cancelling the running job stops it at a step boundary; then the
     * next pending job runs to completion. */
    cancel_and_wait(fd, blocker);
    ck_assert(th_wait_state(fd, b, "completed", 30000));
    r = th_request(fd, "list", json_pack("{s:s}", "state", "sleeping"));
    ck_assert_str_eq(th_err_class(r), "invalid_args");
    json_decref(r);
    r = th_request(fd, "show", json_pack("{s:i}", "job", 999));
    ck_assert_str_eq(th_err_class(r), "not_found");
    json_decref(r);
    close(fd);
}
END_TEST

/* A precision the device cannot do is refused at submit, naming what the
 * device has; nothing is queued. */
START_TEST(test_submit_refuses_unsupported_precision)
{
    int fd = th_connect(&H, NULL);
    json_t *spec = th_tiny_spec(1, 0);
    json_object_set_new(spec, "precision", json_string("fp16"));
    json_t *r = th_request(fd, "submit", json_pack("{s:o}", "spec", spec));
    ck_assert_str_eq(th_err_class(r), "invalid_spec");
    const char *desc = json_string_value(
        json_object_get(json_object_get(r, "error"), "desc"));
    ck_assert_msg(desc && strstr(desc, "precision: fp16 is not supported on "
                                 "the CPU backend") && strstr(desc, "oneDNN "
                                 "ISA"), "%s", desc ? desc : "(none)");
    json_decref(r);
    r = th_request(fd, "list", NULL);
    ck_assert_uint_eq(json_array_size(json_object_get(th_ok(r), "jobs")), 0);
    json_decref(r);
    close(fd);
}
END_TEST

/* A warm-up as long as the run is refused at submit, naming how the
 * run's steps were counted (synthetic input: 100 an epoch); one step
 * shorter is accepted, the reply gives the run's steps, and the job runs
 * exactly that many. */
START_TEST(test_submit_refuses_warmup_past_the_run)
{
    int fd = th_connect(&H, NULL);
    json_t *spec = th_tiny_spec(1, 0);
    json_object_set_new(json_object_get(spec, "optimizer"), "schedule",
                        json_pack("{s:i}", "warmup_steps", 100));
    json_t *r = th_request(fd, "submit", json_pack("{s:O}", "spec", spec));
    ck_assert_str_eq(th_err_class(r), "invalid_spec");
    const char *desc = json_string_value(
        json_object_get(json_object_get(r, "error"), "desc"));
    ck_assert_str_eq(desc, "optimizer.schedule.warmup_steps: 100, but the "
                     "run has 100 steps (1 epoch x 100 steps of synthetic "
                     "input): the learning rate would never leave the "
                     "warm-up (set it below 100, or train more epochs)");
    json_decref(r);
    json_object_set_new(json_object_get(json_object_get(spec, "optimizer"),
                                        "schedule"),
                        "warmup_steps", json_integer(99));
    /* the reply says how many steps were asked for */
    r = th_request(fd, "submit", json_pack("{s:o}", "spec", spec));
    ck_assert_ptr_nonnull(th_ok(r));
    int64_t id = json_integer_value(json_object_get(th_ok(r), "job"));
    ck_assert_int_eq(json_integer_value(json_object_get(th_ok(r), "steps")),
                     100);
    json_decref(r);
    ck_assert(th_wait_state(fd, id, "completed", 30000));
    r = th_job_request(fd, "show", id);
    json_t *job = json_object_get(th_ok(r), "job");
    ck_assert_int_eq(json_integer_value(json_object_get(job, "step")), 100);
    ck_assert_int_eq(json_integer_value(json_object_get(job, "steps_total")),
                     100);
    json_decref(r);
    close(fd);
}
END_TEST

/* A submit's checks list and look at every file of its data, here
 * 100,000 (a folder of a million images took seconds): they run on a
 * threadpool thread, so another client is answered meanwhile, and the
 * submitting connection's next request waits for the submit's reply (its
 * list shows the job).  Before, the checks ran on the loop: the other
 * client's reply came after the submit's. */
/* H.dir/big: an ImageFolder of 2 classes of n empty .jpg files each
 * (listed at submit; never decoded), its path in d. */
static void make_big_folder(int n, char *d, size_t cap)
{
    char f[200];
    for (int k = 0; k < 2; k++) {
        snprintf(d, cap, "%s/big/%c", H.dir, "ab"[k]);
        td_test_sh("/", "mkdir -p '%s'", d);
        for (int i = 0; i < n; i++) {
            snprintf(f, sizeof f, "%s/%06d.jpg", d, i);
            int fd = open(f, O_WRONLY | O_CREAT | O_EXCL, 0644);
            ck_assert_int_ge(fd, 0);
            close(fd);
        }
    }
    snprintf(d, cap, "%s/big", H.dir);
}

/* Sends the request req (stolen) and the raw line next ("" for none) on
 * fd in one write, so that next waits in the daemon's buffer. */
static void send_pipelined(int fd, json_t *req, const char *next)
{
    char *line = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    char two[8192];
    snprintf(two, sizeof two, "%s\n%s%s", line, next, *next ? "\n" : "");
    free(line);
    ck_assert_int_eq(th_send_raw(fd, two, strlen(two)), 0);
}

START_TEST(test_submit_checks_hold_only_their_connection)
{
    char d[160];
    make_big_folder(50000, d, sizeof d);
    int fa = th_connect(&H, NULL), fb = th_connect(&H, NULL);
    ck_assert_int_ge(fa, 0);
    ck_assert_int_ge(fb, 0);
    json_t *req = json_pack("{s:i, s:s, s:{s:o}}", "id", 1, "cmd", "submit",
                            "args", "spec", th_files_spec(d, 1));
    char *line = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    char two[8192];
    snprintf(two, sizeof two, "%s\n{\"id\":2,\"cmd\":\"list\"}\n", line);
    free(line);
    ck_assert_int_eq(th_send_raw(fa, two, strlen(two)), 0);
    /* Three more submits of it from other connections: two checks run at
     * once, the others wait their turn (submit.c). */
    int more[3];
    for (int k = 0; k < 3; k++) {
        more[k] = th_connect(&H, NULL);
        ck_assert_int_ge(more[k], 0);
        ck_assert_int_eq(th_send_raw(more[k], two, strlen(two)), 0);
    }
    json_t *v = th_request(fb, "version", NULL);
    ck_assert_ptr_nonnull(th_ok(v));
    json_decref(v);
    struct pollfd p = {.fd = fa, .events = POLLIN};
    ck_assert_msg(poll(&p, 1, 0) == 0, "the submit was answered before "
                  "another client's version: its checks held the loop");
    json_t *r1 = th_read_json(fa, 60000), *r2 = th_read_json(fa, 60000);
    ck_assert_ptr_nonnull(r1);
    ck_assert_ptr_nonnull(r2);
    ck_assert_int_eq(json_integer_value(json_object_get(r1, "id")), 1);
    ck_assert_int_eq(json_integer_value(json_object_get(r2, "id")), 2);
    json_t *ok = th_ok(r1);
    ck_assert_ptr_nonnull(ok);
    json_int_t id = json_integer_value(json_object_get(ok, "job"));
    json_t *jobs = json_object_get(th_ok(r2), "jobs");
    ck_assert_int_ge(json_array_size(jobs), 1);
    int listed = 0;
    for (size_t k = 0; k < json_array_size(jobs); k++)
        listed += json_integer_value(json_object_get(
                      json_array_get(jobs, k), "id")) == id;
    ck_assert_int_eq(listed, 1);
    json_decref(r1);
    json_decref(r2);
    json_int_t seen[4] = {id};
    for (int k = 0; k < 3; k++) {
        r1 = th_read_json(more[k], 60000);
        r2 = th_read_json(more[k], 60000);
        ck_assert_ptr_nonnull(th_ok(r1));
        ck_assert_ptr_nonnull(th_ok(r2));
        seen[k + 1] = json_integer_value(json_object_get(th_ok(r1), "job"));
        for (int m = 0; m <= k; m++)
            ck_assert_int_ne(seen[m], seen[k + 1]);
        json_decref(r1);
        json_decref(r2);
        close(more[k]);
    }
    close(fa);
    close(fb);
}
END_TEST

/* A submit with args.progress gets "progress" events for its request
 * while its checks run (here every ms), each with the stage and count,
 * and none after its reply; one without asks for none; a progress that
 * is not a boolean is refused. */
START_TEST(test_submit_progress_events)
{
    static const char *const env[] = {"TD_SUBMIT_PROGRESS_MS=1", NULL};
    char d[160];
    make_big_folder(20000, d, sizeof d);
    H.env = env;
    ck_assert_int_eq(th_restart(&H), 0);
    int fd = th_connect(&H, NULL);
    ck_assert_int_ge(fd, 0);
    send_pipelined(fd, json_pack("{s:i, s:s, s:{s:o, s:b}}", "id", 1, "cmd",
                                 "submit", "args", "spec",
                                 th_files_spec(d, 1), "progress", 1),
                   "{\"id\":2,\"cmd\":\"version\"}");
    int events = 0;
    json_int_t last = -1;
    json_t *m;
    while ((m = th_read_json(fd, 60000)) && json_object_get(m, "event")) {
        json_t *data = json_object_get(m, "data");
        ck_assert_str_eq(json_string_value(json_object_get(m, "event")),
                         "progress");
        ck_assert_int_eq(json_integer_value(json_object_get(m, "request")),
                         1);
        /* no data.val, no val_fraction: one stage, counting up */
        ck_assert_str_eq(json_string_value(json_object_get(data, "stage")),
                         "listing data.train");
        ck_assert_str_eq(json_string_value(json_object_get(data, "unit")),
                         "samples");
        json_int_t done = json_integer_value(json_object_get(data, "done"));
        ck_assert_int_ge(done, last);
        ck_assert_int_le(done, 40000);
        ck_assert(json_number_value(json_object_get(data, "elapsed")) >= 0);
        last = done;
        events++;
        json_decref(m);
    }
    ck_assert_ptr_nonnull(m);
    ck_assert_int_eq(json_integer_value(json_object_get(m, "id")), 1);
    ck_assert_ptr_nonnull(th_ok(m));
    ck_assert_msg(events > 0, "no progress event in the checks of 40,000 "
                  "files, sent every ms");
    json_decref(m);
    m = th_read_json(fd, 10000); /* the version: nothing between */
    ck_assert_int_eq(json_integer_value(json_object_get(m, "id")), 2);
    json_decref(m);
    /* without args.progress: the reply is the first line back */
    send_pipelined(fd, json_pack("{s:i, s:s, s:{s:o}}", "id", 3, "cmd",
                                 "submit", "args", "spec",
                                 th_files_spec(d, 1)), "");
    m = th_read_json(fd, 60000);
    ck_assert_int_eq(json_integer_value(json_object_get(m, "id")), 3);
    ck_assert_ptr_nonnull(th_ok(m));
    json_decref(m);
    m = th_request(fd, "submit", json_pack("{s:o, s:s}", "spec",
                                           th_files_spec(d, 1), "progress",
                                           "yes"));
    ck_assert_str_eq(th_err_class(m), "invalid_args");
    json_decref(m);
    close(fd);
}
END_TEST

START_TEST(test_pause_resume_pending)
{
    int fd = th_connect(&H, NULL);
    int64_t blocker = submit_blocker(fd);
    int64_t a = submit(fd);
    json_t *r = th_job_request(fd, "resume", a);
    ck_assert_str_eq(th_err_class(r), "conflict");
    json_decref(r);
    r = th_job_request(fd, "pause", a);
    ck_assert_str_eq(json_string_value(json_object_get(th_ok(r), "state")),
                     "suspended");
    json_decref(r);
    r = th_job_request(fd, "resume", a);
    ck_assert_str_eq(json_string_value(json_object_get(th_ok(r), "state")),
                     "pending");
    json_decref(r);
    cancel_and_wait(fd, blocker);
    close(fd);
}
END_TEST

/* The row of a job paused before its first metrics window and resumed:
 * queue and top showed the pause's result (samples/s null, verdict
 * "none") for the rest of the run, over the windows it went on to make. */
START_TEST(test_resumed_job_row_shows_its_windows)
{
    int fd = th_connect(&H, NULL);
    json_t *spec = th_tiny_spec(100000, 0);
    json_object_set_new(json_object_get(spec, "metrics"), "warmup_steps",
                        json_integer(400)); /* no window before the pause */
    int64_t id = th_submit(fd, spec);
    ck_assert(th_wait_state(fd, id, "running", 10000));
    json_t *r = th_job_request(fd, "pause", id);
    ck_assert_ptr_nonnull(th_ok(r));
    json_decref(r);
    ck_assert(th_wait_state(fd, id, "suspended", 30000));
    json_t *job = th_show_job(fd, id);
    ck_assert_msg(json_integer_value(json_object_get(job, "step")) < 400,
                  "paused after its first window");
    json_decref(job);
    r = th_job_request(fd, "resume", id);
    ck_assert_ptr_nonnull(th_ok(r));
    json_decref(r);
    double sps = 0;
    for (int t = 0; t < 300 && !(sps > 0); t++) { /* up to 30 s */
        usleep(100000);
        r = th_request(fd, "list", NULL);
        size_t i;
        json_t *row;
        json_array_foreach(json_object_get(th_ok(r), "jobs"), i, row) {
            if (json_integer_value(json_object_get(row, "id")) == id)
                sps = json_number_value(json_object_get(row,
                                                        "samples_per_s"));
        }
        json_decref(r);
    }
    job = th_show_job(fd, id);
    ck_assert_msg(sps > 0, "the resumed job's row has no samples/s (at "
                  "step %lld)", (long long)json_integer_value(
                      json_object_get(job, "step")));
    json_decref(job);
    cancel_and_wait(fd, id);
    close(fd);
}
END_TEST

/* A job cancelled before its first metrics window: its row said 0
 * samples/s and verdict "none" (the result of a run that measured
 * nothing), where a job with no window yet has neither. */
START_TEST(test_job_ended_before_a_window_has_no_figures)
{
    int fd = th_connect(&H, NULL);
    json_t *spec = th_tiny_spec(100000, 0);
    json_object_set_new(json_object_get(spec, "metrics"), "warmup_steps",
                        json_integer(1000000));
    int64_t id = th_submit(fd, spec);
    ck_assert(th_wait_state(fd, id, "running", 10000));
    for (int t = 0; t < 100; t++) { /* until it has made steps */
        json_t *job = th_show_job(fd, id);
        int64_t step = json_integer_value(json_object_get(job, "step"));
        json_decref(job);
        if (step > 0)
            break;
        usleep(100000);
    }
    cancel_and_wait(fd, id);
    json_t *r = th_request(fd, "list", NULL);
    size_t i;
    json_t *row, *mine = NULL;
    json_array_foreach(json_object_get(th_ok(r), "jobs"), i, row)
        if (json_integer_value(json_object_get(row, "id")) == id)
            mine = row;
    ck_assert_ptr_nonnull(mine);
    char *txt = json_dumps(mine, 0);
    ck_assert_msg(!json_object_get(mine, "samples_per_s") &&
                  !json_object_get(mine, "verdict"), "%s", txt);
    free(txt);
    json_decref(r);
    close(fd);
}
END_TEST

START_TEST(test_state_events_reach_subscriber)
{
    int sub = th_connect(&H, NULL);
    int fd = th_connect(&H, NULL);
    int64_t blocker = submit_blocker(fd);
    json_t *r = th_request(sub, "subscribe",
                           json_pack("{s:[s]}", "events", "state"));
    ck_assert_ptr_nonnull(th_ok(r));
    json_decref(r);
    r = th_request(sub, "subscribe", json_pack("{s:[s]}", "events", "gossip"));
    ck_assert_str_eq(th_err_class(r), "invalid_args");
    json_decref(r);
    int64_t a = submit(fd);
    r = th_job_request(fd, "cancel", a);
    json_decref(r);
    json_t *ev = th_read_json(sub, 5000);
    ck_assert_str_eq(json_string_value(json_object_get(ev, "event")), "state");
    ck_assert_int_eq(json_integer_value(json_object_get(ev, "job")), a);
    ck_assert_str_eq(json_string_value(json_object_get(
                         json_object_get(ev, "data"), "state")), "cancelled");
    json_decref(ev);
    close(sub);
    /* The daemon does not notice the vanished subscriber beyond closing. */
    int64_t b = submit(fd);
    r = th_job_request(fd, "cancel", b);
    ck_assert_ptr_nonnull(th_ok(r));
    json_decref(r);
    cancel_and_wait(fd, blocker);
    close(fd);
}
END_TEST

START_TEST(test_other_uid_may_not_control)
{
    if (getuid() != 0) {
        printf("skipped: needs root to connect as another uid\n");
        return;
    }
    int fd = th_connect(&H, NULL);
    int64_t a = submit_blocker(fd);
    chmod(H.dir, 0755);
    chmod(H.sock, 0666);
    pid_t pid = fork();
    if (pid == 0) {
        if (setgid(65534) || setuid(65534))
            _exit(10);
        int cfd = th_connect(&H, NULL);
        if (cfd < 0)
            _exit(11);
        json_t *r = th_job_request(cfd, "cancel", a);
        const char *cls = th_err_class(r);
        _exit(cls && strcmp(cls, "permission_denied") == 0 ? 0 : 12);
    }
    int st;
    waitpid(pid, &st, 0);
    ck_assert(WIFEXITED(st));
    ck_assert_int_eq(WEXITSTATUS(st), 0);
    json_t *r = th_job_request(fd, "show", a);
    ck_assert_str_eq(json_string_value(json_object_get(
                         json_object_get(th_ok(r), "job"), "state")),
                     "running");
    json_decref(r);
    cancel_and_wait(fd, a);
    close(fd);
}
END_TEST

START_TEST(test_config_get_set)
{
    int fd = th_connect(&H, NULL);
    json_t *r = th_request(fd, "config_get", NULL);
    json_t *s = json_object_get(th_ok(r), "settings");
    ck_assert_str_eq(json_string_value(json_object_get(s, "workers")), "auto");
    json_decref(r);
    r = th_request(fd, "config_set", json_pack("{s:s, s:i}", "key", "workers",
                                               "value", 4));
    ck_assert(json_is_false(json_object_get(th_ok(r), "restart_needed")));
    json_decref(r);
    r = th_request(fd, "config_get", json_pack("{s:s}", "key", "workers"));
    ck_assert_int_eq(json_integer_value(json_object_get(th_ok(r), "value")), 4);
    json_decref(r);
    r = th_request(fd, "config_set", json_pack("{s:s, s:i}", "key", "workers",
                                               "value", 0));
    ck_assert_str_eq(th_err_class(r), "invalid_args");
    json_decref(r);
    r = th_request(fd, "config_set", json_pack("{s:s, s:i}", "key", "colour",
                                               "value", 1));
    ck_assert_str_eq(th_err_class(r), "invalid_args");
    json_decref(r);
    /* A setting read only at start is refused, saying where it goes (a
     * change that a restart would lose helps no one; issue 18). */
    r = th_request(fd, "config_set", json_pack("{s:s, s:s}", "key", "device",
                                               "value", "cpu"));
    ck_assert_str_eq(th_err_class(r), "invalid_args");
    ck_assert_msg(strstr(json_string_value(json_object_get(
                             json_object_get(r, "error"), "desc")),
                         "device: read only when traind starts; set it in "),
                  "%s", json_dumps(r, 0));
    json_decref(r);
    r = th_request(fd, "config_get", json_pack("{s:s}", "key", "device"));
    ck_assert_str_eq(json_string_value(json_object_get(th_ok(r), "value")),
                     "auto");
    json_decref(r);
    close(fd);
}
END_TEST

START_TEST(test_jobs_survive_restart)
{
    int fd = th_connect(&H, NULL);
    int64_t a = submit_blocker(fd);
    int64_t b = submit(fd);
    json_t *r = th_job_request(fd, "cancel", b);
    json_decref(r);
    close(fd);
    ck_assert_int_eq(th_stop(&H), 0); /* SIGTERM: clean exit */
    ck_assert_int_eq(th_restart(&H), 0);
    fd = th_connect(&H, NULL);
    r = th_request(fd, "list", NULL);
    json_t *jobs = json_object_get(th_ok(r), "jobs");
    ck_assert_uint_eq(json_array_size(jobs), 2);
    ck_assert_int_eq(json_integer_value(json_object_get(
                         json_array_get(jobs, 0), "id")), a);
    ck_assert_str_eq(json_string_value(json_object_get(
                         json_array_get(jobs, 1), "state")), "cancelled");
    json_decref(r);
    /* The interrupted job runs again after the restart. */
    ck_assert(th_wait_state(fd, a, "running", 10000));
    ck_assert_int_gt(submit(fd), b); /* ids keep increasing */
    cancel_and_wait(fd, a);
    close(fd);
}
END_TEST

START_TEST(test_stale_socket_and_live_socket)
{
    /* A second daemon on a live socket refuses to steal it. */
    td_harness second = H;
    char exe[512];
    snprintf(exe, sizeof exe, "%s/daemon/traind", getenv("TD_BUILD_ROOT"));
    pid_t pid = fork();
    if (pid == 0) {
        execl(exe, exe, "--socket", H.sock, "--state-dir", H.state, NULL);
        _exit(127);
    }
    int st;
    waitpid(pid, &st, 0);
    ck_assert(WIFEXITED(st));
    ck_assert_int_eq(WEXITSTATUS(st), 1);
    /* The first still answers. */
    int fd = th_connect(&H, NULL);
    ck_assert_int_ge(fd, 0);
    close(fd);
    /* kill -9 leaves a stale socket file; a new daemon replaces it. */
    kill(H.pid, SIGKILL);
    waitpid(H.pid, &st, 0);
    H.pid = 0;
    struct stat sb;
    ck_assert_int_eq(stat(H.sock, &sb), 0);
    ck_assert_int_eq(th_restart(&H), 0);
    fd = th_connect(&H, NULL);
    ck_assert_int_ge(fd, 0);
    close(fd);
    (void)second;
}
END_TEST

/* A subscriber that never reads: it gets no step events past the soft
 * limit and only the newest window; once even the rest passes the hard
 * limit it is disconnected.  Training never waits for it. */
START_TEST(test_subscriber_that_never_reads_is_dropped)
{
    int fd = th_connect(&H, NULL);
    json_t *r = th_request(fd, "config_set", json_pack("{s:s, s:i}", "key",
                           "subscriber_soft_bytes", "value", 4096));
    json_decref(r);
    r = th_request(fd, "config_set", json_pack("{s:s, s:i}", "key",
                   "subscriber_max_bytes", "value", 65536));
    json_decref(r);
    int lazy = th_connect(&H, NULL);
    r = th_request(lazy, "subscribe", json_pack("{s:i}", "every_steps", 1));
    ck_assert_ptr_nonnull(th_ok(r));
    json_decref(r);
    /* 300 epochs of 100 tiny steps: far more epoch events than the socket
     * buffer and 64 KiB hold. */
    int64_t id = th_submit(fd, th_tiny_spec(300, 0));
    ck_assert(th_wait_state(fd, id, "completed", 120000));
    /* Now read: what was queued comes out, then end-of-file, because the
     * daemon closed this connection (a live one would just go quiet). */
    int eof = 0, quiet = 0;
    char buf[65536];
    while (!eof && !quiet) {
        struct pollfd p = {.fd = lazy, .events = POLLIN};
        if (poll(&p, 1, 3000) <= 0) {
            quiet = 1;
            break;
        }
        ssize_t n = read(lazy, buf, sizeof buf);
        if (n <= 0)
            eof = 1;
    }
    ck_assert_msg(eof, "the lazy subscriber was not disconnected");
    r = th_request(fd, "version", NULL); /* the others never noticed */
    ck_assert_ptr_nonnull(th_ok(r));
    json_decref(r);
    close(lazy);
    close(fd);
}
END_TEST

static Suite *daemon_suite(void)
{
    Suite *s = suite_create("daemon");
    TCase *tc = tcase_create("protocol");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_hello_and_version);
    tcase_add_test(tc, test_socket_mode);
    tcase_add_test(tc, test_malformed_then_valid);
    tcase_add_test(tc, test_oversized_line_closes_only_that_client);
    tcase_add_test(tc, test_disconnect_mid_line);
    suite_add_tcase(s, tc);
    tc = tcase_create("jobs");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_submit_list_show_cancel);
    tcase_add_test(tc, test_submit_refuses_unsupported_precision);
    tcase_add_test(tc, test_submit_refuses_warmup_past_the_run);
    tcase_add_test(tc, test_submit_checks_hold_only_their_connection);
    tcase_add_test(tc, test_submit_progress_events);
    tcase_add_test(tc, test_pause_resume_pending);
    tcase_add_test(tc, test_resumed_job_row_shows_its_windows);
    tcase_add_test(tc, test_job_ended_before_a_window_has_no_figures);
    tcase_add_test(tc, test_state_events_reach_subscriber);
    tcase_add_test(tc, test_other_uid_may_not_control);
    tcase_add_test(tc, test_config_get_set);
    tcase_add_test(tc, test_jobs_survive_restart);
    tcase_add_test(tc, test_stale_socket_and_live_socket);
    tcase_add_test(tc, test_subscriber_that_never_reads_is_dropped);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(daemon_suite)
