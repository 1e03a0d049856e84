/* daemon_harness.c - see daemon_harness.h. */
#define _GNU_SOURCE
#include "daemon_harness.h"

#include "base/clock.h"
#include "store/checkpoint.h"

#include <check.h>

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <sys/stat.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void th__sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int th__spawn(td_harness *h, const char *const *extra)
{
    const char *root = getenv("TD_BUILD_ROOT");
    const char *other = getenv("TD_TRAIND"); /* e.g. the simulated-GPU one */
    char exe[512];
    if (other && *other)
        snprintf(exe, sizeof exe, "%s", other);
    else
        snprintf(exe, sizeof exe, "%s/daemon/traind", root ? root : "build");
    const char *argv[32] = {exe, "--foreground", "--config", "/dev/null",
                            "--socket", h->sock, "--state-dir", h->state,
                            "--log-level", "debug"};
    int n = 10;
    for (int i = 0; extra && extra[i] && n < 31; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    h->pid = fork();
    if (h->pid < 0)
        return -errno;
    if (h->pid == 0) {
        char models[600];
        const char *src = getenv("TD_SOURCE_ROOT");
        snprintf(models, sizeof models, "%s/config/models", src ? src : ".");
        setenv("TD_MODELS_DIR", models, 0);
        for (int i = 0; h->env && h->env[i]; i++)
            putenv((char *)h->env[i]);
        if (h->as_uid && (setgroups(0, NULL) ||
                          setresgid(h->as_gid, h->as_gid, h->as_gid) ||
                          setresuid(h->as_uid, h->as_uid, h->as_uid)))
            _exit(126);
        execv(exe, (char *const *)argv);
        _exit(127);
    }
    for (int i = 0; i < 500; i++) { /* up to 10 s */
        int fd = th_connect(h, NULL);
        if (fd >= 0) {
            close(fd);
            return 0;
        }
        int st;
        if (waitpid(h->pid, &st, WNOHANG) == h->pid) {
            h->pid = 0;
            return -ECHILD;
        }
        th__sleep_ms(20);
    }
    return -ETIMEDOUT;
}

int th_start(td_harness *h, const char *const *extra_args)
{
    return th_start_env(h, extra_args, NULL);
}

int th_start_env(td_harness *h, const char *const *extra_args,
                 const char *const *env)
{
    memset(h, 0, sizeof *h);
    h->env = env;
    h->extra = extra_args;
    snprintf(h->dir, sizeof h->dir, "/tmp/traind-test-XXXXXX");
    if (!mkdtemp(h->dir))
        return -errno;
    snprintf(h->sock, sizeof h->sock, "%s/traind.sock", h->dir);
    snprintf(h->state, sizeof h->state, "%s/state", h->dir);
    return th__spawn(h, extra_args);
}

int th_start_as(td_harness *h, uid_t uid, gid_t gid,
                const char *const *extra_args)
{
    memset(h, 0, sizeof *h);
    h->extra = extra_args;
    h->as_uid = uid;
    h->as_gid = gid;
    snprintf(h->dir, sizeof h->dir, "/tmp/traind-test-XXXXXX");
    if (!mkdtemp(h->dir))
        return -errno;
    if (chown(h->dir, uid, gid) != 0 || chmod(h->dir, 0755) != 0)
        return -errno;
    snprintf(h->sock, sizeof h->sock, "%s/traind.sock", h->dir);
    snprintf(h->state, sizeof h->state, "%s/state", h->dir);
    return th__spawn(h, extra_args);
}

int th_stop(td_harness *h)
{
    int st = 0;
    if (h->pid <= 0)
        return -1;
    kill(h->pid, SIGTERM);
    for (int i = 0; i < 1000; i++) { /* up to 20 s */
        if (waitpid(h->pid, &st, WNOHANG) == h->pid) {
            h->pid = 0;
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        }
        th__sleep_ms(20);
    }
    kill(h->pid, SIGKILL);
    waitpid(h->pid, &st, 0);
    h->pid = 0;
    return -1;
}

int th_restart(td_harness *h)
{
    if (h->pid > 0)
        th_stop(h);
    return th__spawn(h, h->extra);
}

void th_cleanup(td_harness *h)
{
    char cmd[400];
    if (h->pid > 0)
        th_stop(h);
    if (h->dir[0]) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", h->dir);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", h->dir);
    }
}

int th_free_port(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    close(fd);
    return ntohs(sa.sin_port);
}

int th_connect(const td_harness *h, json_t **hello)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", h->sock);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        return -1;
    }
    json_t *hl = th_read_json(fd, 5000); /* every connection starts with it */
    if (hello)
        *hello = hl;
    else
        json_decref(hl);
    return fd;
}

int th_connect_as(const td_harness *h, uid_t uid, gid_t gid)
{
    return th_connect_as_hello(h, uid, gid, NULL);
}

int th_connect_as_hello(const td_harness *h, uid_t uid, gid_t gid,
                        json_t **hello)
{
    int sp[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp))
        return -1;
    chmod(h->dir, 0755);
    chmod(h->sock, 0666);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        close(sp[0]);
        if (setgroups(0, NULL) || setresgid(gid, gid, gid) ||
            setresuid(uid, uid, uid))
            _exit(10);
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        int fd = socket(AF_UNIX, SOCK_STREAM, 0);
        snprintf(sa.sun_path, sizeof sa.sun_path, "%s", h->sock);
        if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa))
            _exit(11);
        char byte = 0;
        char ctl[CMSG_SPACE(sizeof(int))];
        struct iovec iov = {&byte, 1};
        struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1,
                           .msg_control = ctl, .msg_controllen = sizeof ctl};
        struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cm), &fd, sizeof fd);
        _exit(sendmsg(sp[1], &m, 0) == 1 ? 0 : 12);
    }
    close(sp[1]);
    char byte;
    char ctl[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {&byte, 1};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl,
                       .msg_controllen = sizeof ctl};
    int fd = -1;
    if (recvmsg(sp[0], &m, 0) == 1) {
        struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
        if (cm && cm->cmsg_type == SCM_RIGHTS)
            memcpy(&fd, CMSG_DATA(cm), sizeof fd);
    }
    close(sp[0]);
    int st;
    waitpid(pid, &st, 0);
    json_t *hl = fd >= 0 ? th_read_json(fd, 5000) : NULL;
    if (hello)
        *hello = hl;
    else
        json_decref(hl);
    return fd;
}

int th_send_raw(int fd, const char *data, size_t len)
{
    while (len > 0) {
        ssize_t w = send(fd, data, len, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        data += w;
        len -= (size_t)w;
    }
    return 0;
}

char *th_read_line(int fd, int timeout_ms)
{
    size_t cap = 65536, len = 0;
    char *buf = malloc(cap);
    while (buf) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, timeout_ms) <= 0)
            break;
        /* Peek, and take exactly up to the newline: the next line stays
         * in the socket for the next call. */
        if (cap - len < 4096) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb)
                break;
            buf = nb;
        }
        ssize_t r = recv(fd, buf + len, cap - len - 1, MSG_PEEK);
        if (r <= 0)
            break;
        char *nl = memchr(buf + len, '\n', (size_t)r);
        size_t take = nl ? (size_t)(nl - (buf + len)) + 1 : (size_t)r;
        if (read(fd, buf + len, take) != (ssize_t)take)
            break;
        len += take;
        if (nl) {
            buf[len - 1] = '\0';
            return buf;
        }
    }
    free(buf);
    return NULL;
}

json_t *th_read_json(int fd, int timeout_ms)
{
    char *line = th_read_line(fd, timeout_ms);
    if (!line)
        return NULL;
    json_t *o = json_loads(line, 0, NULL);
    free(line);
    return o;
}

json_t *th_request(int fd, const char *cmd, json_t *args)
{
    static int next_id = 1;
    int id = next_id++;
    json_t *req = json_pack("{s:i, s:s}", "id", id, "cmd", cmd);
    if (args)
        json_object_set_new(req, "args", args);
    char *s = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    size_t n = strlen(s);
    s = realloc(s, n + 2);
    s[n] = '\n';
    s[n + 1] = '\0';
    th_send_raw(fd, s, n + 1);
    free(s);
    for (int i = 0; i < 10000; i++) {
        json_t *r = th_read_json(fd, 10000);
        if (!r)
            return NULL;
        if (json_integer_value(json_object_get(r, "id")) == id)
            return r;
        json_decref(r); /* an event: skip */
    }
    return NULL;
}

json_t *th_ok(json_t *reply) { return json_object_get(reply, "ok"); }

const char *th_err_class(json_t *reply)
{
    return json_string_value(
        json_object_get(json_object_get(reply, "error"), "class"));
}

static char *th__slurp(int fd)
{
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    ssize_t r;
    while (buf && (r = read(fd, buf + len, cap - len - 1)) > 0) {
        len += (size_t)r;
        if (cap - len < 2) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb)
                break;
            buf = nb;
        }
    }
    if (buf)
        buf[len] = '\0';
    return buf;
}

int th_cli(const td_harness *h, char **out, char **err, const char *const *argv)
{
    const char *root = getenv("TD_BUILD_ROOT");
    char exe[512];
    int po[2], pe[2], st;
    snprintf(exe, sizeof exe, "%s/client/trainctl", root ? root : "build");
    if (pipe(po) || pipe(pe))
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        const char *args[40] = {exe};
        int n = 1;
        for (int i = 0; argv[i] && n < 39; i++)
            args[n++] = argv[i];
        args[n] = NULL;
        dup2(po[1], 1);
        dup2(pe[1], 2);
        close(po[0]);
        close(pe[0]);
        setenv("TRAIND_SOCKET", h->sock, 1);
        execv(exe, (char *const *)args);
        _exit(127);
    }
    close(po[1]);
    close(pe[1]);
    /* stderr output is small; read stdout fully first, then stderr. */
    char *o = th__slurp(po[0]);
    char *e = th__slurp(pe[0]);
    close(po[0]);
    close(pe[0]);
    waitpid(pid, &st, 0);
    if (out)
        *out = o;
    else
        free(o);
    if (err)
        *err = e;
    else
        free(e);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

json_t *th_tiny_spec(int epochs, int every)
{
    return th_spec(epochs, every, 8, 4);
}

json_t *th_files_spec(const char *path, int epochs)
{
    json_t *s = th_tiny_spec(epochs, 0);
    json_object_set_new(json_object_get(s, "data"), "train", json_string(path));
    json_object_set_new(json_object_get(s, "input"), "source",
                        json_string("files"));
    json_object_set_new(json_object_get(s, "data"), "classes",
                        json_integer(2));
    return s;
}

json_t *th_spec(int epochs, int every, int size, int channels)
{
    return json_pack(
        "{s:s, s:{s:i}, s:{s:[i,i], s:i, s:s, s:{s:[f], s:[f]}},"
        " s:{s:[{s:s, s:s, s:i, s:i, s:i}, {s:s, s:s}, {s:s, s:s},"
        "       {s:s, s:s, s:s}]},"
        " s:{s:s, s:f, s:f}, s:i, s:i, s:i, s:i,"
        " s:{s:i, s:i}, s:{s:i, s:i}}",
        "name", "tiny", "data", "classes", 4,
        "input", "size", size, size, "channels", 1, "source", "synthetic",
        "normalize", "mean", 0.5, "std", 0.25,
        "model", "layers",
        "type", "conv2d", "name", "c1", "channels", channels, "kernel", 3,
        "pad", 1,
        "type", "relu", "name", "r1", "type", "flatten", "name", "f",
        "type", "dense", "name", "fc", "units", "classes",
        "optimizer", "type", "sgd", "lr", 0.01, "momentum", 0.9,
        "batch_size", 8, "epochs", epochs, "seed", 1, "threads", 1,
        "metrics", "warmup_steps", 5, "window_steps", 10,
        "checkpoint", "every_steps", every, "keep", 3);
}

json_t *th_wait_event(int fd, const char *kind, int64_t job,
                      const char *state, int timeout_ms, json_t *log)
{
    /* A deadline on the clock, not a count of reads: a busy stream
     * returns many events per 100 ms. */
    int64_t deadline = td_now_ns() + (int64_t)timeout_ms * TD_NS_PER_MS;
    while (td_now_ns() < deadline) {
        json_t *ev = th_read_json(fd, 100);
        if (!ev)
            continue;
        if (log)
            json_array_append(log, ev);
        const char *k = json_string_value(json_object_get(ev, "event"));
        const char *st = json_string_value(json_object_get(
            json_object_get(ev, "data"), "state"));
        if (k && strcmp(k, kind) == 0 &&
            json_integer_value(json_object_get(ev, "job")) == job &&
            (!state || (st && strcmp(st, state) == 0)))
            return ev;
        json_decref(ev);
    }
    return NULL;
}

json_t *th_job_request(int fd, const char *cmd, int64_t job)
{
    return th_request(fd, cmd, json_pack("{s:I}", "job", (json_int_t)job));
}

int th_log_count(int fd, int64_t job, const char *text)
{
    json_t *r = th_request(fd, "logs", json_pack("{s:I, s:i}", "job",
                                                 (json_int_t)job, "lines",
                                                 1000000));
    size_t i;
    json_t *l;
    int n = 0;
    json_array_foreach(json_object_get(th_ok(r), "lines"), i, l)
        n += strstr(json_string_value(l), text) != NULL;
    json_decref(r);
    return n;
}

int th_log_has(int fd, int64_t job, const char *text)
{
    json_t *r = th_job_request(fd, "logs", job);
    size_t i;
    json_t *l;
    int found = 0;
    json_array_foreach(json_object_get(th_ok(r), "lines"), i, l)
        found |= strstr(json_string_value(l), text) != NULL;
    json_decref(r);
    return found;
}

int th_wait_state(int fd, int64_t job, const char *state, int timeout_ms)
{
    int64_t deadline = td_now_ns() + (int64_t)timeout_ms * TD_NS_PER_MS;
    for (int first = 1; first || td_now_ns() < deadline; first = 0) {
        json_t *r = th_job_request(fd, "show", job);
        const char *st = json_string_value(json_object_get(
            json_object_get(th_ok(r), "job"), "state"));
        int ok = st && strcmp(st, state) == 0;
        json_decref(r);
        if (ok)
            return 1;
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return 0;
}

int64_t th_submit(int fd, json_t *spec)
{
    json_t *r = th_request(fd, "submit", json_pack("{s:o}", "spec", spec));
    ck_assert_msg(th_ok(r) != NULL, "submit refused: %s",
                  json_string_value(json_object_get(
                      json_object_get(r, "error"), "desc")));
    int64_t id = json_integer_value(json_object_get(th_ok(r), "job"));
    json_decref(r);
    return id;
}

void th_kill9_restart(td_harness *h)
{
    int st;
    ck_assert_int_eq(kill(h->pid, SIGKILL), 0);
    waitpid(h->pid, &st, 0);
    h->pid = 0;
    ck_assert_int_eq(th_restart(h), 0);
}

json_t *th_show_job(int fd, int64_t id)
{
    json_t *r = th_job_request(fd, "show", id);
    json_t *j = json_incref(json_object_get(th_ok(r), "job"));
    json_decref(r);
    ck_assert_ptr_nonnull(j);
    return j;
}

const char *th_job_state(const json_t *job)
{
    return json_string_value(json_object_get(job, "state"));
}

/* ---- a small tmpfs ---------------------------------------------------- */

static char th__mounted[512];

/* The runner process's list: the test runs in its child. */
static void th__mount_list(char *path, size_t cap, pid_t runner)
{
    snprintf(path, cap, "/tmp/traind-tmpfs-mounts.%d", (int)runner);
}

int th_tmpfs_mount(const char *dir, int kb)
{
    char opts[64], list[64];
    snprintf(opts, sizeof opts, "size=%dk", kb);
    if ((mkdir(dir, 0750) != 0 && errno != EEXIST) || getuid() != 0 ||
        mount("tmpfs", dir, "tmpfs", 0, opts) != 0) {
        printf("skipped: cannot mount a tmpfs at %s: %s\n", dir,
               strerror(errno));
        return -1;
    }
    snprintf(th__mounted, sizeof th__mounted, "%s", dir);
    th__mount_list(list, sizeof list, getppid());
    FILE *f = fopen(list, "a");
    if (f) {
        fprintf(f, "%s\n", dir);
        fclose(f);
    }
    return 0;
}

void th_tmpfs_unmount(void)
{
    if (th__mounted[0])
        umount2(th__mounted, MNT_DETACH);
    th__mounted[0] = '\0';
}

void th_tmpfs_unmount_listed(void)
{
    char list[64], line[600];
    th__mount_list(list, sizeof list, getpid());
    FILE *f = fopen(list, "r");
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        umount2(line, MNT_DETACH);
    }
    if (f)
        fclose(f);
    unlink(list);
}

void th_tmpfs_fill(const char *dir, char *filler, size_t cap)
{
    static char block[4096];
    snprintf(filler, cap, "%s/filler", dir);
    int fd = open(filler, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ck_assert_int_ge(fd, 0);
    while (write(fd, block, sizeof block) > 0)
        ;
    while (write(fd, block, 1) > 0)
        ;
    close(fd);
}

void th_same_tensors(td_ckpt_file *fa, td_ckpt_file *fb, const char *when)
{
    ck_assert_int_eq(td_ckpt_file_count(fa), td_ckpt_file_count(fb));
    for (int i = 0; i < td_ckpt_file_count(fa); i++) {
        const td_ckpt_tensor *t = td_ckpt_file_tensor(fa, i);
        char err[256];
        void *x = malloc(t->nbytes), *y = malloc(t->nbytes);
        ck_assert_int_eq(td_ckpt_file_read(fa, t->name, t->dtype, x,
                                           t->nbytes, err, sizeof err), 0);
        ck_assert_msg(td_ckpt_file_read(fb, t->name, t->dtype, y, t->nbytes,
                                        err, sizeof err) == 0, "%s", err);
        ck_assert_msg(memcmp(x, y, t->nbytes) == 0, "%s differs %s",
                      t->name, when);
        free(x);
        free(y);
    }
}

char *th_http(int port, const char *method, const char *path)
{
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    char req[256];
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    int n = snprintf(req, sizeof req, "%s %s HTTP/1.0\r\nHost: x\r\n\r\n",
                     method, path);
    ck_assert_int_eq(write(fd, req, (size_t)n), n);
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    ssize_t r;
    while ((r = read(fd, buf + len, cap - len - 1)) > 0)
        if ((len += (size_t)r) + 1 >= cap)
            buf = realloc(buf, cap *= 2);
    buf[len] = '\0';
    close(fd);
    return buf;
}

int th_need_root(void)
{
    if (getuid() != 0) {
        printf("skipped: needs root to connect as another uid\n");
        return 0;
    }
    return 1;
}

void th_config_set_int(int fd, const char *key, long long v)
{
    json_t *r = th_request(fd, "config_set", json_pack("{s:s, s:I}", "key",
                                                       key, "value",
                                                       (json_int_t)v));
    ck_assert_msg(th_ok(r), "config_set %s failed", key);
    json_decref(r);
}
