/* daemon_harness.h - start a real traind in a test and talk to it over its
 * socket.  Each test gets its own temporary socket and state dir. */
#ifndef TD_DAEMON_HARNESS_H
#define TD_DAEMON_HARNESS_H

#include <sys/types.h>

#include <jansson.h>

typedef struct td_harness {
    pid_t pid;
    char dir[64];          /* temporary root */
    char sock[96];
    char state[96];
    const char *const *env; /* extra environment for the daemon */
    const char *const *extra; /* th_start's extra args, kept for
                                 th_restart (must outlive the harness) */
    uid_t as_uid;          /* th_start_as: the daemon's user (0: root) */
    gid_t as_gid;
} td_harness;

/* Starts build/daemon/traind (from $TD_BUILD_ROOT; $TD_TRAIND names
 * another build of it, such as tests/gpu/sim's traind_sim) with extra args
 * (NULL-terminated, may be NULL) and waits until its socket accepts.
 * The daemon reads no config file unless extra_args name one. */
int th_start(td_harness *h, const char *const *extra_args);
/* The same with extra environment variables ("NAME=value", NULL-
 * terminated, may be NULL) for the daemon. */
int th_start_env(td_harness *h, const char *const *extra_args,
                 const char *const *env);
/* th_start with the daemon running as uid:gid instead of root (the
 * caller must be root); the temporary dir is theirs. */
int th_start_as(td_harness *h, uid_t uid, gid_t gid,
                const char *const *extra_args);
/* SIGTERM, then waits; returns the exit status (or -1). */
int th_stop(td_harness *h);
/* Restarts on the same dirs, with the same extra args. */
int th_restart(td_harness *h);
void th_cleanup(td_harness *h); /* removes the temporary dir */
/* kill -9, then th_restart (a crash, as the daemon sees it at start). */
void th_kill9_restart(td_harness *h);

/* ---- a small tmpfs: a full or read-only disk (root only) ----------------
 * A failed check ends a test's process before its teardown: the Check
 * runner process unmounts what its tests mounted in th_tmpfs_unmount_
 * listed (give it as the unchecked teardown). */
/* Mounts a tmpfs of kb KiB at dir (made if missing); 0, or prints
 * "skipped: ..." and returns -1 (not root, no CAP_SYS_ADMIN). */
int th_tmpfs_mount(const char *dir, int kb);
/* Unmounts the last th_tmpfs_mount, if any. */
void th_tmpfs_unmount(void);
void th_tmpfs_unmount_listed(void);
/* Fills the file system holding dir until writes fail (ENOSPC), with the
 * file dir/filler (its path in filler). */
void th_tmpfs_fill(const char *dir, char *filler, size_t cap);

/* 1 when the test runs as root (it may connect as another uid), else
 * prints "skipped: ..." and returns 0. */
int th_need_root(void);
/* config_set of an integer setting, asserted to succeed. */
void th_config_set_int(int fd, const char *key, long long v);

/* A connected client.  Reads the hello line, into *hello if non-NULL. */
/* A TCP port on 127.0.0.1 that nothing listens on now (for the metrics
 * endpoint). */
int th_free_port(void);
int th_connect(const td_harness *h, json_t **hello);
/* The job record `show` gives (a new reference; the check fails without
 * one), and its state. */
json_t *th_show_job(int fd, int64_t id);
const char *th_job_state(const json_t *job);
/* A client whose peer credentials are uid/gid (the daemon sees that user):
 * a forked child drops to them, connects and hands the socket back.  Opens
 * the harness dir and socket to everyone first.  Needs root; -1 on
 * failure.  The hello line is read. */
int th_connect_as(const td_harness *h, uid_t uid, gid_t gid);
/* The same, handing back the first line (the hello, or the error of a
 * refused connection; NULL if none came; the caller decrefs). */
int th_connect_as_hello(const td_harness *h, uid_t uid, gid_t gid,
                        json_t **hello);
int th_send_raw(int fd, const char *data, size_t len);
/* Reads one line (without '\n') with a timeout; NULL on EOF/timeout. */
char *th_read_line(int fd, int timeout_ms);
json_t *th_read_json(int fd, int timeout_ms);
/* Sends {"id":N,"cmd":cmd,"args":args} (args stolen, may be NULL) and
 * returns the reply with that id, skipping events. */
json_t *th_request(int fd, const char *cmd, json_t *args);
/* th_request with the one argument {"job": job}. */
json_t *th_job_request(int fd, const char *cmd, int64_t job);
/* Whether a line of the job's log (the "logs" request) contains text. */
int th_log_has(int fd, int64_t job, const char *text);
/* A request (method, path) over HTTP/1.0 to 127.0.0.1:port (the metrics
 * endpoint); the whole response, malloc'd. */
char *th_http(int port, const char *method, const char *path);
struct td_ckpt_file;
/* Every tensor of checkpoint fa bitwise equal to fb's, the same count;
 * a failure names the tensor and `when` ("after the resume"). */
void th_same_tensors(struct td_ckpt_file *fa, struct td_ckpt_file *fb,
                     const char *when);
/* How many lines of the job's whole log contain text. */
int th_log_count(int fd, int64_t job, const char *text);
/* A small valid job: synthetic 8x8 input, a tiny conv net, 100 steps per
 * epoch, one compute thread (deterministic), metrics windows of 10 steps
 * after 5 warm-up steps, checkpoints every `every` steps (0: none). */
json_t *th_tiny_spec(int epochs, int every);
/* The same with an input of size x size and a first conv of `channels`
 * (bigger = slower steps). */
json_t *th_spec(int epochs, int every, int size, int channels);
/* th_tiny_spec reading a 2-class ImageFolder at path (input.source
 * files). */
json_t *th_files_spec(const char *path, int epochs);
/* Reads events from fd until one of `kind` for job arrives whose
 * data.state equals state (state may be NULL: any); returns it or NULL
 * after timeout_ms.  Every event read is appended to log if non-NULL. */
json_t *th_wait_event(int fd, const char *kind, int64_t job,
                      const char *state, int timeout_ms, json_t *log);
/* Polls `show` until the job's state is `state` (or timeout_ms passes);
 * returns 1 if it got there. */
int th_wait_state(int fd, int64_t job, const char *state, int timeout_ms);

/* Submits a spec (stolen); fails the test if it is refused. */
int64_t th_submit(int fd, json_t *spec);

/* Defines a harness H and Check fixtures that start traind before each
 * test and require a clean SIGTERM exit (status 0, so no sanitizer
 * report either) after it. */
#define TH_FIXTURE(H)                                                        \
    static td_harness H;                                                     \
    static void setup(void) { ck_assert_int_eq(th_start(&H, NULL), 0); }     \
    static void teardown(void)                                               \
    {                                                                        \
        int st_ = th_stop(&H);                                               \
        th_cleanup(&H);                                                      \
        ck_assert_msg(st_ == 0, "traind exited with status %d", st_);        \
    }

/* Convenience: the "ok" object of a reply (borrowed from reply) or NULL. */
json_t *th_ok(json_t *reply);
const char *th_err_class(json_t *reply);

#endif

/* Runs build/client/trainctl with argv (NULL-terminated, without the
 * program name) against the harness's socket; captures stdout and stderr
 * (malloc'd, NUL-terminated; may be NULL) and returns the exit status. */
int th_cli(const td_harness *h, char **out, char **err, const char *const *argv);
