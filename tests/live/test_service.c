/* test_service.c - traind as a systemd service: sd_notify messages in
 * order, the watchdog, socket activation, the config file and SIGHUP. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon_harness.h"
#include "settings.h"
#include "tdtest.h"

static char tmpdir[64];

static void mk_tmp(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/traind-svc-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void rm_tmp(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
}

/* A bound datagram socket standing in for systemd's notify socket. */
static int notify_socket(char *path, size_t cap)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(path, cap, "%s/notify", tmpdir);
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    return fd;
}

/* Collects datagrams for up to ms milliseconds (or until `until` is seen)
 * into one '|'-separated string. */
static void collect(int fd, char *out, size_t cap, int ms, const char *until)
{
    size_t len = strlen(out);
    for (int waited = 0; waited < ms; waited += 10) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 10) <= 0)
            continue;
        char msg[600];
        ssize_t n = recv(fd, msg, sizeof msg - 1, 0);
        if (n <= 0)
            continue;
        msg[n] = '\0';
        len += (size_t)snprintf(out + len, cap - len, "%s|", msg);
        if (until && strstr(msg, until))
            return;
    }
}

START_TEST(test_notify_sequence)
{
    td_harness h;
    char path[128], env1[160], log[8192] = "";
    mk_tmp();
    int fd = notify_socket(path, sizeof path);
    snprintf(env1, sizeof env1, "NOTIFY_SOCKET=%s", path);
    const char *env[] = {env1, "WATCHDOG_USEC=200000", NULL};
    ck_assert_int_eq(th_start_env(&h, NULL, env), 0);
    collect(fd, log, sizeof log, 1500, "WATCHDOG=1");
    ck_assert_int_eq(th_stop(&h), 0);
    collect(fd, log, sizeof log, 2000, "STOPPING=1");
    th_cleanup(&h);
    close(fd);
    rm_tmp();
    char *ready = strstr(log, "READY=1"), *status = strstr(log, "STATUS=idle");
    char *dog = strstr(log, "WATCHDOG=1"), *stop = strstr(log, "STOPPING=1");
    ck_assert_msg(ready && status && dog && stop, "messages: %s", log);
    ck_assert_msg(ready < status && status < dog && dog < stop,
                  "out of order: %s", log);
}
END_TEST

/* A start with job records to read says so in the unit's status before
 * READY=1 (a load of thousands of records also reports its progress
 * every second and extends systemd's start timeout: load.c). */
START_TEST(test_loading_records_in_status)
{
    td_harness h;
    char path[128], env1[160], log[8192] = "";
    mk_tmp();
    int fd = notify_socket(path, sizeof path);
    snprintf(env1, sizeof env1, "NOTIFY_SOCKET=%s", path);
    const char *env[] = {env1, NULL};
    ck_assert_int_eq(th_start_env(&h, NULL, env), 0);
    collect(fd, log, sizeof log, 5000, "READY=1");
    ck_assert_msg(!strstr(log, "STATUS=loading"), "messages: %s", log);
    int c = th_connect(&h, NULL);
    for (int i = 0; i < 2; i++)
        ck_assert(th_wait_state(c, th_submit(c, th_tiny_spec(1, 0)),
                                "completed", 60000));
    close(c);
    ck_assert_int_eq(th_restart(&h), 0);
    log[0] = '\0';
    collect(fd, log, sizeof log, 5000, "READY=1");
    ck_assert_int_eq(th_stop(&h), 0);
    th_cleanup(&h);
    close(fd);
    rm_tmp();
    char *loading = strstr(log, "STATUS=loading 2 job record(s) from ");
    char *ready = strstr(log, "READY=1");
    ck_assert_msg(loading && ready && loading < ready, "messages: %s", log);
}
END_TEST

START_TEST(test_watchdog_for_another_pid_is_ignored)
{
    td_harness h;
    char path[128], env1[160], log[8192] = "";
    mk_tmp();
    int fd = notify_socket(path, sizeof path);
    snprintf(env1, sizeof env1, "NOTIFY_SOCKET=%s", path);
    const char *env[] = {env1, "WATCHDOG_USEC=100000", "WATCHDOG_PID=1", NULL};
    ck_assert_int_eq(th_start_env(&h, NULL, env), 0);
    collect(fd, log, sizeof log, 600, NULL);
    ck_assert_int_eq(th_stop(&h), 0);
    th_cleanup(&h);
    close(fd);
    rm_tmp();
    ck_assert_ptr_nonnull(strstr(log, "READY=1"));
    ck_assert_msg(!strstr(log, "WATCHDOG=1"), "pinged anyway: %s", log);
}
END_TEST

START_TEST(test_socket_activation)
{
    if (access("/usr/bin/systemd-socket-activate", X_OK) != 0) {
        printf("skipped: systemd-socket-activate not installed\n");
        return;
    }
    td_harness h;
    memset(&h, 0, sizeof h);
    mk_tmp();
    snprintf(h.dir, sizeof h.dir, "%s", tmpdir);
    snprintf(h.sock, sizeof h.sock, "%s/act.sock", tmpdir);
    char state[128], exe[512];
    snprintf(state, sizeof state, "%s/state", tmpdir);
    snprintf(exe, sizeof exe, "%s/daemon/traind", getenv("TD_BUILD_ROOT"));
    pid_t pid = fork();
    if (pid == 0) {
        /* --socket names another path: the passed socket must win. */
        execl("/usr/bin/systemd-socket-activate",
              "systemd-socket-activate", "-l", h.sock, exe, "--foreground",
              "--config", "/dev/null", "--socket", "/nonexistent/x.sock",
              "--state-dir", state, NULL);
        _exit(127);
    }
    int fd = -1;
    for (int i = 0; i < 250 && fd < 0; i++) {
        usleep(20000);
        fd = th_connect(&h, NULL); /* connecting starts traind */
    }
    ck_assert_int_ge(fd, 0);
    json_t *r = th_request(fd, "version", NULL);
    ck_assert_ptr_nonnull(th_ok(r));
    json_decref(r);
    close(fd);
    kill(pid, SIGTERM);
    int st;
    waitpid(pid, &st, 0);
    ck_assert(WIFEXITED(st));
    ck_assert_int_eq(WEXITSTATUS(st), 0);
    rm_tmp();
}
END_TEST

static int run_traind_with_config(const char *conf_text, char *err, size_t cap)
{
    char conf[128], exe[512], state[128];
    snprintf(conf, sizeof conf, "%s/traind.conf", tmpdir);
    snprintf(state, sizeof state, "%s/state", tmpdir);
    FILE *f = fopen(conf, "w");
    fputs(conf_text, f);
    fclose(f);
    snprintf(exe, sizeof exe, "%s/daemon/traind", getenv("TD_BUILD_ROOT"));
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(p[1], 2);
        execl(exe, exe, "--config", conf, "--state-dir", state, "--socket",
              "/nonexistent-dir/s.sock", NULL);
        _exit(127);
    }
    close(p[1]);
    size_t len = 0;
    ssize_t n;
    while (len < cap - 1 && (n = read(p[0], err + len, cap - 1 - len)) > 0)
        len += (size_t)n;
    err[len] = '\0';
    close(p[0]);
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

START_TEST(test_config_errors_name_the_key)
{
    char err[4096];
    mk_tmp();
    ck_assert_int_eq(run_traind_with_config("workers = 2\n# fine\ncolour = blue\n",
                                            err, sizeof err), 1);
    ck_assert_msg(strstr(err, "traind.conf:3: colour: unknown setting"), "%s",
                  err);
    ck_assert_int_eq(run_traind_with_config("workers = 0\n", err, sizeof err),
                     1);
    ck_assert_msg(strstr(err, "traind.conf:1: workers: must be in 1..64"),
                  "%s", err);
    ck_assert_int_eq(run_traind_with_config("allowed_data_roots = data\n", err,
                                            sizeof err), 1);
    ck_assert_msg(strstr(err, "'data' is not an absolute path"), "%s", err);
    ck_assert_int_eq(run_traind_with_config("log_level\n", err, sizeof err), 1);
    ck_assert_msg(strstr(err, "traind.conf:1: expected 'key = value'"), "%s",
                  err);
    rm_tmp();
}
END_TEST

static json_t *setting(int fd, const char *key)
{
    json_t *r = th_request(fd, "config_get", json_pack("{s:s}", "key", key));
    json_t *v = json_incref(json_object_get(th_ok(r), "value"));
    json_decref(r);
    return v;
}

START_TEST(test_sighup_reloads)
{
    td_harness h;
    char conf[128];
    mk_tmp();
    snprintf(conf, sizeof conf, "%s/traind.conf", tmpdir);
    FILE *f = fopen(conf, "w");
    fputs("workers = 2\n", f);
    fclose(f);
    const char *args[] = {"--config", conf, NULL};
    ck_assert_int_eq(th_start(&h, args), 0);
    int fd = th_connect(&h, NULL);
    json_t *v = setting(fd, "workers");
    ck_assert_int_eq(json_integer_value(v), 2);
    json_decref(v);
    f = fopen(conf, "w");
    fputs("workers = 5\ndevice = cpu\nallowed_data_roots = /srv/a:/srv/b\n", f);
    fclose(f);
    kill(h.pid, SIGHUP);
    int got = 0;
    for (int i = 0; i < 250 && got != 5; i++) {
        usleep(20000);
        v = setting(fd, "workers");
        got = (int)json_integer_value(v);
        json_decref(v);
    }
    ck_assert_int_eq(got, 5);
    v = setting(fd, "device"); /* not live: unchanged until a restart */
    ck_assert_str_eq(json_string_value(v), "auto");
    json_decref(v);
    v = setting(fd, "allowed_data_roots");
    ck_assert_uint_eq(json_array_size(v), 2);
    ck_assert_str_eq(json_string_value(json_array_get(v, 1)), "/srv/b");
    json_decref(v);
    /* A broken file keeps the settings in force. */
    f = fopen(conf, "w");
    fputs("workers = many\n", f);
    fclose(f);
    kill(h.pid, SIGHUP);
    usleep(200000);
    v = setting(fd, "workers");
    ck_assert_int_eq(json_integer_value(v), 5);
    json_decref(v);
    close(fd);
    ck_assert_int_eq(th_stop(&h), 0);
    th_cleanup(&h);
    rm_tmp();
}
END_TEST

START_TEST(test_shipped_config_documents_every_key)
{
    char path[1024], line[512], all[16384] = "";
    snprintf(path, sizeof path, "%s/config/traind.conf",
             getenv("TD_SOURCE_ROOT"));
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    while (fgets(line, sizeof line, f))
        strncat(all, line, sizeof all - strlen(all) - 1);
    fclose(f);
    for (const td_setting_def *s = td_setting_defs; s->key; s++) {
        char want[128];
        snprintf(want, sizeof want, "#%s =", s->key);
        ck_assert_msg(strstr(all, want), "config/traind.conf lacks '%s'", want);
    }
    /* And the file as shipped is valid. */
    json_t *st = td_settings_defaults();
    char err[256];
    ck_assert_int_eq(td_settings_load_file(st, path, err, sizeof err), 0);
    json_decref(st);
}
END_TEST

static Suite *service_suite(void)
{
    Suite *s = suite_create("service");
    TCase *tc = tcase_create("systemd");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_notify_sequence);
    tcase_add_test(tc, test_loading_records_in_status);
    tcase_add_test(tc, test_watchdog_for_another_pid_is_ignored);
    tcase_add_test(tc, test_socket_activation);
    suite_add_tcase(s, tc);
    tc = tcase_create("config");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_config_errors_name_the_key);
    tcase_add_test(tc, test_sighup_reloads);
    tcase_add_test(tc, test_shipped_config_documents_every_key);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(service_suite)
