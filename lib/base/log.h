/* log.h - leveled logging from any thread.
 *
 * One line per call, written to stderr with a single write(2) so lines from
 * different threads never interleave.  Each line carries a timestamp, the
 * level, the calling thread's name and, when given, the job id:
 *
 *   2026-11-21 21:40:01.123 INFO  [trainer] job 7: epoch 1 done
 *
 * Under systemd (TD_LOG_STYLE_JOURNAL) the timestamp is dropped and the line
 * starts with the syslog priority "<6>", which journald turns into the entry's
 * priority.  A sink can be installed to receive every line as well (the
 * daemon copies job lines into per-job log files; tests capture lines).
 * Logging never allocates and never fails the caller.
 */
#ifndef TD_LOG_H
#define TD_LOG_H

#include <stdarg.h>

/* Levels are syslog priorities, so the journal prefix is the level itself. */
enum td_log_level {
    TD_LOG_ERROR = 3,
    TD_LOG_WARN = 4,
    TD_LOG_INFO = 6,
    TD_LOG_DEBUG = 7,
};

enum td_log_style {
    TD_LOG_STYLE_HUMAN = 0,   /* timestamp + level word */
    TD_LOG_STYLE_JOURNAL = 1, /* "<prio>" prefix, no timestamp */
};

/* Longest line written; longer messages are truncated with "...". */
#define TD_LOG_LINE_MAX 2048

/* Receives each formatted line (no trailing newline) after it was written
 * to stderr.  Called on the logging thread; must be thread-safe. */
typedef void (*td_log_sink_fn)(void *user, int level, long job,
                               const char *line);

void td_log_set_level(int level);
int td_log_get_level(void);
/* "error", "warn"/"warning", "info", "debug" -> level; -EINVAL otherwise. */
int td_log_parse_level(const char *name, int *level);
const char *td_log_level_name(int level);

void td_log_set_style(enum td_log_style style);
/* Install (or with fn == NULL remove) the sink.  Not to be called while
 * other threads are logging through the sink being replaced. */
void td_log_set_sink(td_log_sink_fn fn, void *user);
/* If stderr goes to the journal (JOURNAL_STREAM matches stderr), use the
 * journal style.  Returns 1 if it switched. */
int td_log_detect_journal(void);

/* Names the calling thread in log lines (at most 15 chars are kept) and,
 * on Linux, in /proc (pthread_setname_np). */
void td_log_set_thread_name(const char *name);
const char *td_log_thread_name(void);

/* job <= 0 means "not about a job". */
void td_logf(int level, long job, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void td_vlogf(int level, long job, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

/* Formats a line exactly as td_logf would, into buf; returns its length. */
int td_log_format(char *buf, int cap, int level, long job, const char *fmt,
                  va_list ap) __attribute__((format(printf, 5, 0)));

#define td_error(...) td_logf(TD_LOG_ERROR, 0, __VA_ARGS__)
#define td_warn(...) td_logf(TD_LOG_WARN, 0, __VA_ARGS__)
#define td_info(...) td_logf(TD_LOG_INFO, 0, __VA_ARGS__)
#define td_debug(...) td_logf(TD_LOG_DEBUG, 0, __VA_ARGS__)

#endif
