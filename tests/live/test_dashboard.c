/* test_dashboard.c - the live dashboard (GET /dashboard, issue 18) as a
 * browser shows it: a real traind with the metrics endpoint on the
 * loopback runs a short job with validation, then Debian's headless
 * chromium loads the page; the rendered DOM must hold, for the job, every
 * series with as many points as the job's record (`show`) has, and the
 * verdict timeline.  A screenshot goes to $TD_BUILD_ROOT/dashboard.png.
 *
 * Skips (77) only when no chromium is installed ($TD_CHROMIUM names
 * another binary).  The page's and data.json's own checks without a
 * browser are in test_obs.c.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "daemon_harness.h"
#include "support/jpeggen.h"
#include "tdtest.h"

static td_harness H;
static char data_dir[64], conf[96];
static int port;
static char chromium[512];

/* chromium's path ($TD_CHROMIUM, else chromium or chromium-browser on
 * PATH) into out; 0 if there is none. */
static int find_chromium(char *out, size_t cap)
{
    const char *env = getenv("TD_CHROMIUM");
    if (env && *env) {
        snprintf(out, cap, "%s", env);
        return access(out, X_OK) == 0;
    }
    const char *path = getenv("PATH");
    static const char *const names[] = {"chromium", "chromium-browser"};
    for (size_t k = 0; k < 2; k++) {
        const char *p = path ? path : "/usr/bin:/bin";
        while (*p) {
            size_t n = strcspn(p, ":");
            snprintf(out, cap, "%.*s/%s", (int)n, p, names[k]);
            if (n && access(out, X_OK) == 0)
                return 1;
            p += n + (p[n] == ':');
        }
    }
    return 0;
}

static void setup(void)
{
    port = th_free_port();
    snprintf(data_dir, sizeof data_dir, "/tmp/td_dash_data_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(data_dir));
    td_test_make_folder(data_dir, 2, 100, 16, 16);
    snprintf(conf, sizeof conf, "%s/traind.conf", data_dir);
    FILE *f = fopen(conf, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "metrics_listen = 127.0.0.1:%d\n", port);
    fclose(f);
    const char *args[] = {"--config", conf, NULL};
    ck_assert_int_eq(th_start(&H, args), 0);
}

static void teardown(void)
{
    int st = th_stop(&H);
    th_cleanup(&H);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", data_dir);
    ck_assert_int_eq(system(cmd), 0);
    ck_assert_msg(st == 0, "traind exited with status %d", st);
}

/* Runs chromium headless on the dashboard with `what` (--dump-dom or
 * --screenshot=PATH); its stdout goes to out_path.  A fresh profile dir
 * each run; killed after 120 s.  Returns the exit status. */
static int run_chromium(const char *what, const char *out_path)
{
    char url[96], profile[64], prof_arg[96];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/dashboard", port);
    snprintf(profile, sizeof profile, "/tmp/td_dash_chromium_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(profile));
    snprintf(prof_arg, sizeof prof_arg, "--user-data-dir=%s", profile);
    const char *argv[] = {chromium, "--headless", "--no-sandbox",
                          "--disable-gpu", "--no-first-run",
                          "--disable-dev-shm-usage", prof_arg,
                          "--virtual-time-budget=5000",
                          "--window-size=1280,1000", what, url, NULL};
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int o = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int e = open("/dev/null", O_WRONLY);
        if (o < 0 || e < 0)
            _exit(126);
        dup2(o, 1);
        dup2(e, 2); /* its dbus and GPU complaints */
        setpgid(0, 0);
        execv(chromium, (char *const *)argv);
        _exit(127);
    }
    int st = -1;
    for (int i = 0; i < 1200; i++) {
        if (waitpid(pid, &st, WNOHANG) == pid)
            break;
        if (i == 1199) {
            kill(-pid, SIGKILL);
            waitpid(pid, &st, 0);
            st = -1;
        }
        usleep(100000);
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", profile);
    ck_assert_int_eq(system(cmd), 0);
    return st >= 0 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "%s", path);
    size_t cap = 1 << 16, n = 0, r;
    char *buf = malloc(cap);
    while ((r = fread(buf + n, 1, cap - n - 1, f)) > 0)
        if ((n += r) + 1 >= cap)
            buf = realloc(buf, cap *= 2);
    buf[n] = '\0';
    fclose(f);
    if (len)
        *len = n;
    return buf;
}

/* The value of attribute `name` in the tag [tag, end), or NULL. */
static char *attr(const char *tag, const char *end, const char *name)
{
    char key[64];
    snprintf(key, sizeof key, " %s=\"", name);
    const char *p = memmem(tag, (size_t)(end - tag), key, strlen(key));
    if (!p)
        return NULL;
    p += strlen(key);
    const char *q = memchr(p, '"', (size_t)(end - p));
    return q ? strndup(p, (size_t)(q - p)) : NULL;
}

/* The first `<elem ...>` tag with class `cls` and data-job `job`, with
 * data-series `series` when non-NULL; its attribute `want` (malloc'd) or
 * NULL if there is no such element. */
static char *find_attr(const char *dom, const char *elem, const char *cls,
                       int64_t job, const char *series, const char *want)
{
    char open[32], jobs[24];
    snprintf(open, sizeof open, "<%s ", elem);
    snprintf(jobs, sizeof jobs, "%lld", (long long)job);
    for (const char *p = strstr(dom, open); p; p = strstr(p + 1, open)) {
        const char *end = strchr(p, '>');
        if (!end)
            return NULL;
        char *c = attr(p, end, "class"), *j = attr(p, end, "data-job");
        char *s = series ? attr(p, end, "data-series") : NULL;
        int hit = c && j && strcmp(c, cls) == 0 && strcmp(j, jobs) == 0 &&
                  (!series || (s && strcmp(s, series) == 0));
        free(c);
        free(j);
        free(s);
        if (hit)
            return attr(p, end, want);
    }
    return NULL;
}

/* Entries of arr with a numeric step and a numeric `field`: the points
 * the page draws. */
static int count_points(const json_t *arr, const char *field)
{
    size_t i;
    json_t *e;
    int n = 0;
    json_array_foreach(arr, i, e) {
        if (json_is_number(json_object_get(e, "step")) &&
            json_is_number(json_object_get(e, field)))
            n++;
    }
    return n;
}

START_TEST(test_dashboard_in_a_browser)
{
    int fd = th_connect(&H, NULL);
    json_t *spec = th_files_spec(data_dir, 3);
    json_object_set_new(json_object_get(spec, "data"), "val_fraction",
                        json_real(0.25));
    json_object_set_new(json_object_get(spec, "metrics"), "window_steps",
                        json_integer(5));
    int64_t id = th_submit(fd, spec);
    ck_assert_msg(th_wait_state(fd, id, "completed", 120000),
                  "job %lld did not complete", (long long)id);
    json_t *r = th_job_request(fd, "show", id);
    json_t *rec = json_object_get(th_ok(r), "job");
    json_t *history = json_object_get(rec, "history");
    json_t *curve = json_object_get(rec, "curve");
    ck_assert_int_eq(json_array_size(history), 3);
    ck_assert_int_gt(json_array_size(curve), 3);

    char dom_path[4200], png[4200];
    const char *root = getenv("TD_BUILD_ROOT");
    snprintf(dom_path, sizeof dom_path, "%s/td_dash_dom_%d.html",
             data_dir, (int)getpid());
    ck_assert_int_eq(run_chromium("--dump-dom", dom_path), 0);
    char *dom = slurp(dom_path, NULL);
    ck_assert_msg(strstr(dom, "class=\"series\""),
                  "no series drawn; the page rendered:\n%.2000s", dom);

    static const char *const series[][3] = {
        /* data-series, the record's array, its field */
        {"window_train_loss", "curve", "train_loss"},
        {"train_loss", "history", "train_loss"},
        {"val_loss", "history", "val_loss"},
        {"train_acc", "history", "train_acc"},
        {"val_acc", "history", "val_acc"},
        {"samples_per_s", "curve", "samples_per_s"},
        {"device_idle_ratio", "curve", "device_idle_ratio"},
        {"input_wait_ratio", "curve", "input_wait_ratio"}};
    for (size_t k = 0; k < sizeof series / sizeof series[0]; k++) {
        json_t *arr = strcmp(series[k][1], "curve") == 0 ? curve : history;
        int want = count_points(arr, series[k][2]);
        char *got = find_attr(dom, "path", "series", id, series[k][0],
                              "data-points");
        ck_assert_msg(got, "no <path class=\"series\" data-job=\"%lld\" "
                      "data-series=\"%s\"> in the DOM", (long long)id,
                      series[k][0]);
        ck_assert_msg(atoi(got) == want, "%s: %s points drawn, %d in the "
                      "record", series[k][0], got, want);
        free(got);
    }
    /* the job has a validation set: all these are there in full */
    ck_assert_int_eq(count_points(history, "val_loss"), 3);
    ck_assert_int_eq(count_points(history, "val_acc"), 3);
    ck_assert_int_eq(count_points(curve, "train_loss"),
                     (int)json_array_size(curve));
    ck_assert_int_eq(count_points(curve, "samples_per_s"),
                     (int)json_array_size(curve));

    /* the verdict timeline, naming the last window's verdict */
    char *segs = find_attr(dom, "svg", "verdicts", id, NULL,
                           "data-segments");
    ck_assert_msg(segs, "no verdict timeline for job %lld", (long long)id);
    ck_assert_int_ge(atoi(segs), 1);
    free(segs);
    const char *verdict = json_string_value(json_object_get(
        json_array_get(curve, json_array_size(curve) - 1), "verdict"));
    ck_assert_ptr_nonnull(verdict);
    char needle[128];
    snprintf(needle, sizeof needle, "class=\"verdict\" data-verdict=\"%s\"",
             verdict);
    ck_assert_msg(strstr(dom, needle), "no band of verdict %s", verdict);
    snprintf(needle, sizeof needle, "verdict-name\" x=");
    ck_assert_ptr_nonnull(strstr(dom, needle));
    snprintf(needle, sizeof needle, ">%s</text>", verdict);
    ck_assert_msg(strstr(dom, needle), "verdict %s not named", verdict);
    free(dom);
    unlink(dom_path);

    /* the screenshot: a PNG of the window's size */
    snprintf(png, sizeof png, "%s/dashboard.png", root ? root : data_dir);
    unlink(png);
    char shot[4300], log_path[4200];
    snprintf(shot, sizeof shot, "--screenshot=%s", png);
    snprintf(log_path, sizeof log_path, "%s/td_dash_out.txt", data_dir);
    ck_assert_int_eq(run_chromium(shot, log_path), 0);
    size_t len;
    unsigned char *b = (unsigned char *)slurp(png, &len);
    ck_assert_uint_ge(len, 33);
    ck_assert_int_eq(memcmp(b, "\x89PNG\r\n\x1a\n", 8), 0);
    ck_assert_int_eq(memcmp(b + 12, "IHDR", 4), 0);
    unsigned w = (unsigned)b[16] << 24 | (unsigned)b[17] << 16 |
                 (unsigned)b[18] << 8 | b[19];
    unsigned h = (unsigned)b[20] << 24 | (unsigned)b[21] << 16 |
                 (unsigned)b[22] << 8 | b[23];
    ck_assert_uint_eq(w, 1280);
    ck_assert_uint_eq(h, 1000);
    free(b);
    printf("dashboard screenshot: %s\n", png);
    json_decref(r);
    close(fd);
}
END_TEST

static Suite *dashboard_suite(void)
{
    Suite *s = suite_create("dashboard");
    TCase *tc = tcase_create("browser");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 400);
    tcase_add_test(tc, test_dashboard_in_a_browser);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    if (!find_chromium(chromium, sizeof chromium)) {
        printf("skipped: no chromium on PATH (Debian: apt-get install "
               "chromium; or set TD_CHROMIUM)\n");
        return TD_TEST_SKIP;
    }
    return td_test_run(dashboard_suite());
}
