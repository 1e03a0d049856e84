/* log.c - leveled, thread-safe, allocation-free logging (see log.h).
 *
 * State is a handful of atomics; a line is formatted on the caller's stack
 * and written with one write(2).  It never takes a lock, so it is safe to
 * call from any thread, including while holding other locks.
 */
#define _GNU_SOURCE
#include "base/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/json.h"

static atomic_int td__level = TD_LOG_INFO;
static atomic_int td__style = TD_LOG_STYLE_HUMAN;
static _Atomic(td_log_sink_fn) td__sink;
static void *_Atomic td__sink_user;
static _Thread_local char td__thread_name[16];

void td_log_set_level(int level) { atomic_store(&td__level, level); }
int td_log_get_level(void) { return atomic_load(&td__level); }
void td_log_set_style(enum td_log_style s) { atomic_store(&td__style, (int)s); }

void td_log_set_sink(td_log_sink_fn fn, void *user)
{
    atomic_store(&td__sink_user, user);
    atomic_store(&td__sink, fn);
}

const char *td_log_level_name(int level)
{
    switch (level) {
    case TD_LOG_ERROR: return "ERROR";
    case TD_LOG_WARN: return "WARN";
    case TD_LOG_INFO: return "INFO";
    case TD_LOG_DEBUG: return "DEBUG";
    default: return "?";
    }
}

int td_log_parse_level(const char *name, int *level)
{
    static const struct { const char *name; int level; } map[] = {
        {"error", TD_LOG_ERROR}, {"warn", TD_LOG_WARN},
        {"warning", TD_LOG_WARN}, {"info", TD_LOG_INFO},
        {"debug", TD_LOG_DEBUG},
    };
    if (!name || !level)
        return -EINVAL;
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        if (strcasecmp(name, map[i].name) == 0) {
            *level = map[i].level;
            return 0;
        }
    }
    return -EINVAL;
}

int td_log_detect_journal(void)
{
    const char *js = getenv("JOURNAL_STREAM");
    unsigned long dev, ino;
    struct stat st;
    if (!js || sscanf(js, "%lu:%lu", &dev, &ino) != 2)
        return 0;
    if (fstat(STDERR_FILENO, &st) != 0)
        return 0;
    if ((unsigned long)st.st_dev != dev || (unsigned long)st.st_ino != ino)
        return 0;
    td_log_set_style(TD_LOG_STYLE_JOURNAL);
    return 1;
}

void td_log_set_thread_name(const char *name)
{
    snprintf(td__thread_name, sizeof td__thread_name, "%s", name ? name : "");
    pthread_setname_np(pthread_self(), td__thread_name);
}

const char *td_log_thread_name(void)
{
    return td__thread_name[0] ? td__thread_name : "main";
}

/* A line travels in JSON (log events, `trainctl logs`), which cannot
 * carry bytes that are not UTF-8: a Latin-1 file name in "bad sample
 * caf\xe9.jpg" made the line vanish from both.  Each such byte becomes
 * \xNN (a line too long for that is cut, "..." at its end). */
static int td__utf8_clean(char *buf, int n, int cap)
{
    int i = 0, k;
    while (i < n &&
           (k = td_utf8_seq((unsigned char *)buf + i, (size_t)(n - i))) > 0)
        i += k;
    if (i == n)
        return n;
    char out[TD_LOG_LINE_MAX + 1];
    size_t lim = cap < (int)sizeof out ? (size_t)cap : sizeof out, o;
    if (td_utf8_escape(buf, (size_t)n, out, lim, &o) < (size_t)n) {
        while (o > 0 && o + 4 > lim) /* room for "..." */
            o--;
        while (o > 0 && ((unsigned char)out[o] & 0xc0) == 0x80)
            o--; /* not inside a sequence */
        memcpy(out + o, "...", 3);
        o += 3;
    }
    memcpy(buf, out, o);
    buf[o] = '\0';
    return (int)o;
}

int td_log_format(char *buf, int cap, int level, long job, const char *fmt,
                  va_list ap)
{
    int n = 0;
    if (cap < 8)
        return 0;
    if (atomic_load(&td__style) == TD_LOG_STYLE_JOURNAL) {
        n = snprintf(buf, (size_t)cap, "<%d>[%s] ", level,
                     td_log_thread_name());
    } else {
        struct timespec ts;
        struct tm tm;
        clock_gettime(CLOCK_REALTIME, &ts);
        localtime_r(&ts.tv_sec, &tm);
        n = snprintf(buf, (size_t)cap,
                     "%04d-%02d-%02d %02d:%02d:%02d.%03ld %-5s [%s] ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                     tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000,
                     td_log_level_name(level), td_log_thread_name());
    }
    if (n < 0 || n >= cap)
        n = cap - 1;
    if (job > 0 && n < cap - 1) {
        int m = snprintf(buf + n, (size_t)(cap - n), "job %ld: ", job);
        n = (m < 0 || m >= cap - n) ? cap - 1 : n + m;
    }
    if (n < cap - 1) {
        int m = vsnprintf(buf + n, (size_t)(cap - n), fmt, ap);
        if (m < 0)
            m = 0;
        if (m >= cap - n) { /* truncated: mark it */
            n = cap - 1;
            memcpy(buf + cap - 4, "...", 4);
        } else {
            n += m;
        }
    }
    /* One message, one line: fold embedded newlines. */
    for (int i = 0; i < n; i++)
        if (buf[i] == '\n' || buf[i] == '\r')
            buf[i] = ' ';
    return td__utf8_clean(buf, n, cap);
}

void td_vlogf(int level, long job, const char *fmt, va_list ap)
{
    char line[TD_LOG_LINE_MAX + 1];
    if (level > atomic_load(&td__level))
        return;
    int n = td_log_format(line, TD_LOG_LINE_MAX, level, job, fmt, ap);
    line[n] = '\n';
    ssize_t w = write(STDERR_FILENO, line, (size_t)n + 1);
    (void)w; /* nowhere to report a failed log write */
    line[n] = '\0';
    td_log_sink_fn sink = atomic_load(&td__sink);
    if (sink)
        sink(atomic_load(&td__sink_user), level, job, line);
}

void td_logf(int level, long job, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    td_vlogf(level, job, fmt, ap);
    va_end(ap);
}
