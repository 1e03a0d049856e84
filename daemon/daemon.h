/* daemon.h - traind's loop thread: the state every daemon file shares.
 *
 * The loop thread owns everything in td_daemon: the listening socket, the
 * clients, the job table, the settings, timers and signals.  It never
 * blocks on disk, decode or compute.  Other threads (the trainer, the
 * checkpoint writer) reach it only through td_daemon_post(), a mutex-
 * protected inbox plus uv_async_send; the loop drains the whole inbox on
 * every wake-up, because async wake-ups coalesce.
 */
#ifndef TD_DAEMON_H
#define TD_DAEMON_H

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>
#include <uv.h>

#include "job/device.h"

#include "jobs.h"
#include "proto/protocol.h"
#include "trainer.h"

/* Event kinds a client can subscribe to (bit flags). */
enum {
    TD_EV_STEP = 1 << 0,
    TD_EV_WINDOW = 1 << 1,
    TD_EV_EPOCH = 1 << 2,
    TD_EV_STATE = 1 << 3,
    TD_EV_LOG = 1 << 4,
    TD_EV_CHECKPOINT = 1 << 5,
    TD_EV_EVAL = 1 << 6, /* an eval or predict job's images done / total */
    TD_EV_ALL = (1 << 7) - 1,
    /* inbox messages that are not events */
    TD_MSG_STARTED = 1 << 8, /* the trainer built the job and trains */
    TD_MSG_DONE = 1 << 9,    /* the trainer thread is done with the job */
    TD_MSG_TRACE = 1 << 10,  /* a recorded timeline (obs.c) */
    TD_MSG_HISTORY = 1 << 11, /* a resumed job's epochs from its
                                 checkpoint (curves.h) */
    TD_MSG_TRACE_PROGRESS = 1 << 12, /* a trace's steps recorded so far,
                                        for its waiters (obs.c) */
};

struct td_daemon;

typedef struct td_client {
    uv_pipe_t pipe;            /* first: handle -> client by cast */
    struct td_daemon *d;
    uint64_t id;               /* unique for the daemon's life */
    td_linebuf in;
    uid_t uid;
    pid_t pid;
    int closing;
    int held;                  /* a request's work is under way off the
                                  loop: later lines wait (td_client_hold) */
    /* subscription */
    unsigned sub_events;       /* 0: not subscribed */
    int64_t sub_job;           /* 0: every job */
    int64_t every_steps;       /* step events: at most one per N steps */
    int64_t every_ms;          /* ... and at most one per T ms */
    int64_t last_step_sent;
    int64_t last_step_ns;
    char *pending_window;      /* newest window held back while slow */
    size_t pending_writes;     /* lines handed to libuv, not yet written */
    uint64_t dropped_steps;
    struct td_client *prev, *next;
} td_client;

/* A message from another thread to the loop. */
typedef struct td_inbox_msg {
    int kind;                  /* TD_EV_* for events; see daemon.c for more */
    int64_t job;
    double ts;
    json_t *data;              /* owned by the message */
    struct td_inbox_msg *next;
} td_inbox_msg;

typedef struct td_daemon_opts {
    const char *config_path;   /* NULL: none; read again on SIGHUP */
    int config_required;       /* a missing config file is an error */
    json_t *overrides;         /* settings from the command line (borrowed);
                                  they win over the config file */
} td_daemon_opts;

typedef struct td_daemon {
    uv_loop_t *loop;
    uv_pipe_t server;
    uv_signal_t sig_term, sig_int, sig_hup;
    uv_async_t wake;
    uv_timer_t watchdog;       /* pings systemd at half WATCHDOG_USEC */
    uv_timer_t status;         /* refreshes systemd's STATUS= line */
    uv_timer_t persist_retry;  /* writes records that failed to save again */
    int watchdog_on;
    int64_t heartbeat_ns;      /* trainer's last sign of life (atomic) */
    char config_path[1024];
    json_t *overrides;
    td_client *clients;
    size_t nclients;
    uint64_t next_client_id;
    td_jobs jobs;
    json_t *settings;
    char socket_path[108];
    char state_dir[3072];
    char device_desc[300];
    td_device_info devices; /* probed at start; the version reply */
    int listening;
    int activated;             /* socket passed by systemd */
    int shutting_down;
    int exit_status;           /* td_daemon_run's result: 0, or
                                  TD_EXIT_GPU_LOST */
    int64_t started_ns;
    td_trainer_slot *trainer;  /* the running job's thread, or NULL */
    struct td_obs *obs;        /* trace waiters, Prometheus (obs.c) */
    struct td_joblog *joblog;  /* the jobs' log files (joblog.c) */
    /* submits whose checks wait for a threadpool thread (submit.c) */
    struct td_submit *submit_head, *submit_tail;
    int submits_checking;
    /* those checking now that asked for progress, and the timer that
     * sends it (submit.c) */
    struct td_submit *submits_shown;
    uv_timer_t submit_progress;
    /* ended_job_retention_days (retention.c) */
    int64_t retention_last_ns;
    int retention_due;
    /* inbox from other threads */
    pthread_mutex_t inbox_mu;
    td_inbox_msg *inbox_head, *inbox_tail;
    size_t inbox_len;
    uint64_t inbox_dropped;
    uint64_t inbox_coalesced;
} td_daemon;

/* daemon.c */
int td_daemon_init(td_daemon *d, uv_loop_t *loop, const td_daemon_opts *o);
/* The exit status after a sticky CUDA error left a GPU unusable: the
 * daemon stops (pending jobs stay pending) so that its service manager
 * restarts it with a fresh CUDA context (Restart=on-failure).  75 is
 * EX_TEMPFAIL of sysexits.h: try again later. */
#define TD_EXIT_GPU_LOST 75
/* Until shutdown; 0 on a clean exit, else d->exit_status. */
int td_daemon_run(td_daemon *d);
void td_daemon_shutdown(td_daemon *d, const char *why);
void td_daemon_free(td_daemon *d);
/* Any thread: queue an event for the loop.  Never blocks for long; step
 * events are dropped (and counted) when the inbox is backed up. */
void td_daemon_post(td_daemon *d, int kind, int64_t job, json_t *data);
/* Loop thread: persist a job's record in the state dir (off the loop). */
void td_daemon_persist_job(td_daemon *d, td_job *j);
/* Loop thread: the same for progress (an epoch, a window, a checkpoint):
 * written at once when the job's last write was queued a second ago or
 * more, else at most a second later, so that a fast job (tens of epochs a
 * second, its history growing with each) is not serialised on the loop
 * for every event.  Any write covers what is pending. */
void td_daemon_persist_progress(td_daemon *d, td_job *j);
/* The same; `line` (owned, may be NULL) is sent to client `client` once a
 * write that includes the job's current state has finished. */
void td_daemon_persist_job_reply(td_daemon *d, td_job *j, uint64_t client,
                                 char *line);
/* Loop thread: change a job's state, persist it, tell subscribers. */
int td_daemon_set_job_state(td_daemon *d, td_job *j, enum td_job_state s,
                            const char *reason);
double td_daemon_ts(const td_daemon *d);
/* Loop thread: starts the oldest pending job if the device is free. */
/* Reads every state_dir/jobs/<id>.json (start-up only, before the loop
 * runs): checks each again as if submitted now, recovers a job traind
 * died under, sets aside what does not read (load.c). */
void td_daemon_load_jobs(td_daemon *d);
void td_daemon_schedule(td_daemon *d);
/* Any thread (the trainer, each step): proof of life for the watchdog. */
void td_daemon_heartbeat(td_daemon *d);
/* Path of a job's log file (state_dir/jobs/<id>.log). */
void td_daemon_job_log_path(const td_daemon *d, int64_t job, char *buf,
                            size_t cap);

/* server.c */
int td_server_listen(td_daemon *d);
void td_server_close(td_daemon *d);
/* Sends a reply line (owned) to one client; always queued, never dropped. */
void td_client_send(td_client *c, char *line);
/* Sends an event to every matching subscriber, applying back-pressure. */
void td_server_broadcast(td_daemon *d, int kind, int64_t job, double ts,
                         json_t *data);
void td_client_close(td_client *c, const char *why);
/* A request whose reply comes from work off the loop holds its connection:
 * the client's later request lines are read and answered only after
 * td_client_release, so that replies keep the order of the requests. */
void td_client_hold(td_client *c);
void td_client_release(td_client *c);
/* The client with this id, or NULL if it has gone (for replies that are
 * ready only after work off the loop). */
td_client *td_server_client(td_daemon *d, uint64_t id);
/* May c see j's details (spec, log, checkpoint paths, full reason): its
 * owner, root, or anyone with the jobs_visible_to_all setting. */
int td_client_may_see(const td_client *c, const td_job *j);

/* commands.c */
void td_commands_dispatch(td_client *c, td_request *req);
/* The devices of info and the CPU's bf16 support, as the `version`
 * request gives them (also `traind --version --json`). */
json_t *td_devices_json(const td_device_info *info);

#endif
