/* settings.c - the settings table (see settings.h).  Every default of the
 * daemon is written here and nowhere else. */
#include "settings.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"

const td_setting_def td_setting_defs[] = {
    {"workers", TD_SET_AUTO_INT, "\"auto\"", 1, 64, 1,
     "decode workers per job; auto follows the autotuner"},
    {"prefetch", TD_SET_AUTO_INT, "\"auto\"", 1, 256, 1,
     "batches decoded ahead (ring depth) for jobs submitted without "
     "input.prefetch; auto: the autotuner's"},
    {"checkpoint_every_steps", TD_SET_INT, "1000", 0, 1000000000, 1,
     "checkpoint interval for jobs submitted without "
     "checkpoint.every_steps (0: only at epoch ends and on request)"},
    {"checkpoint_keep", TD_SET_INT, "3", 1, 1000, 1,
     "checkpoints kept per job, for jobs submitted without "
     "checkpoint.keep"},
    {"subscriber_soft_bytes", TD_SET_INT, "262144", 4096, 1LL << 30, 1,
     "queued bytes past which a subscriber gets coalesced windows and no "
     "step events"},
    {"subscriber_max_bytes", TD_SET_INT, "4194304", 65536, 1LL << 32, 1,
     "queued bytes past which a subscriber, or any client that does not "
     "read its replies, is disconnected"},
    {"log_level", TD_SET_LEVEL, "\"info\"", 0, 0, 1,
     "error, warn, info or debug"},
    {"device", TD_SET_STRING, "\"auto\"", 0, 0, 0,
     "auto, cpu, cuda or cuda:N"},
    {"socket", TD_SET_STRING, "\"/run/traind/traind.sock\"", 0, 0, 0,
     "the control socket (ignored under socket activation)"},
    {"state_dir", TD_SET_STRING, "\"/var/lib/traind\"", 0, 0, 0,
     "job records, job logs and checkpoints"},
    {"allowed_data_roots", TD_SET_PATHS, "[]", 0, 0, 1,
     "folders datasets must lie under (empty: anywhere the submitting "
     "user can read)"},
    {"metrics_listen", TD_SET_STRING, "\"\"", 0, 0, 0,
     "address:port for the Prometheus endpoint (empty: off)"},
    {"max_job_memory_mb", TD_SET_AUTO_INT, "\"auto\"", 16, 1LL << 40, 1,
     "host memory one job may need, estimated at submit (batch slots, "
     "decode scratch, model, optimizer state, activations); auto: half of "
     "MemTotal"},
    {"max_job_device_memory_mb", TD_SET_AUTO_INT, "\"auto\"", 16,
     1LL << 40, 1,
     "device memory one GPU job may need, billed at submit by the memory "
     "planner (trainctl plan); auto: the GPU's memory"},
    {"max_crash_restarts", TD_SET_INT, "3", 1, 1000, 1,
     "times a job may be found running after the daemon died, with no new "
     "checkpoint in between, before it is failed instead of started again"},
    {"max_queued_per_user", TD_SET_INT, "100", 1, 1000000, 1,
     "pending, running and suspended jobs one uid may have (root: no "
     "limit)"},
    {"max_subscriptions_per_user", TD_SET_INT, "32", 1, 100000, 1,
     "subscribed connections one uid may hold at once (root: no limit)"},
    {"max_connections_per_user", TD_SET_INT, "64", 1, 100000, 1,
     "connections to the control socket one uid may hold at once (root: "
     "no limit)"},
    {"ended_job_retention_days", TD_SET_INT, "0", 0, 36500, 1,
     "ended jobs (completed, failed, cancelled) that ended more than this "
     "many days ago are removed with their records, logs and checkpoints, "
     "as by trainctl rm (0: kept until removed)"},
    {"jobs_visible_to_all", TD_SET_INT, "0", 0, 1, 1,
     "1: every user sees other users' specs and logs; 0: only the owner "
     "and root do (others see the list row)"},
    {NULL, 0, NULL, 0, 0, 0, NULL},
};

const td_setting_def *td_setting_find(const char *key)
{
    for (const td_setting_def *s = td_setting_defs; s->key; s++)
        if (strcmp(s->key, key) == 0)
            return s;
    return NULL;
}

json_t *td_settings_defaults(void)
{
    json_t *o = json_object();
    for (const td_setting_def *s = td_setting_defs; o && s->key; s++)
        json_object_set_new(o, s->key, json_loads(s->def, JSON_DECODE_ANY,
                                                  NULL));
    return o;
}

static int td__check(const td_setting_def *s, json_t *v, char *err,
                     size_t errcap)
{
    switch (s->type) {
    case TD_SET_AUTO_INT:
        if (json_is_string(v) && strcmp(json_string_value(v), "auto") == 0)
            return 0;
        /* fall through */
    case TD_SET_INT:
        if (!json_is_integer(v)) {
            snprintf(err, errcap, "%s: must be an integer%s", s->key,
                     s->type == TD_SET_AUTO_INT ? " or \"auto\"" : "");
            return -EINVAL;
        }
        if (json_integer_value(v) < s->min || json_integer_value(v) > s->max) {
            snprintf(err, errcap, "%s: must be in %lld..%lld", s->key,
                     s->min, s->max);
            return -EINVAL;
        }
        return 0;
    case TD_SET_STRING:
        if (!json_is_string(v)) {
            snprintf(err, errcap, "%s: must be a string", s->key);
            return -EINVAL;
        }
        return 0;
    case TD_SET_PATHS: {
        size_t i;
        json_t *x;
        if (!json_is_array(v)) {
            snprintf(err, errcap, "%s: must be a list of absolute paths",
                     s->key);
            return -EINVAL;
        }
        json_array_foreach(v, i, x) {
            const char *p = json_string_value(x);
            if (!p || p[0] != '/') {
                snprintf(err, errcap, "%s: '%s' is not an absolute path",
                         s->key, p ? p : "(not a string)");
                return -EINVAL;
            }
        }
        return 0;
    }
    case TD_SET_LEVEL: {
        int level;
        if (!json_is_string(v) ||
            td_log_parse_level(json_string_value(v), &level)) {
            snprintf(err, errcap,
                     "%s: must be one of error, warn, info, debug", s->key);
            return -EINVAL;
        }
        return 0;
    }
    }
    return -EINVAL;
}

/* "a:b:c" -> ["a","b","c"] for path lists given as one string. */
static json_t *td__split_paths(const char *s)
{
    json_t *arr = json_array();
    const char *p = s;
    while (arr && *p) {
        const char *e = strchr(p, ':');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n)
            json_array_append_new(arr, json_stringn(p, n));
        p += n + (e ? 1 : 0);
    }
    return arr;
}

int td_settings_set(json_t *settings, const char *key, json_t *value,
                    int *live_out, char *err, size_t errcap)
{
    const td_setting_def *s = td_setting_find(key);
    json_t *v = json_incref(value);
    if (!s) {
        snprintf(err, errcap, "%s: unknown setting", key);
        json_decref(v);
        return -EINVAL;
    }
    if (s->type == TD_SET_PATHS && json_is_string(value)) {
        json_decref(v);
        v = td__split_paths(json_string_value(value));
    }
    int rc = td__check(s, v, err, errcap);
    if (rc == 0) {
        if (live_out)
            *live_out = s->live;
        rc = json_object_set(settings, key, v) ? -ENOMEM : 0;
    }
    json_decref(v);
    return rc;
}

/* Reads the whole config file: at most 1 MiB of text with no NUL byte.
 * A directory is an error, not an empty file (/dev/null is empty). */
static int td__read_conf(const char *path, char **out, size_t *len,
                         char *err, size_t errcap)
{
    enum { TD__CONF_MAX = 1 << 20 };
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0) {
        int rc = -errno;
        snprintf(err, errcap, "%s: %s", path, strerror(errno));
        return rc;
    }
    if (fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) {
        snprintf(err, errcap, "%s: is a directory, not a config file", path);
        close(fd);
        return -EISDIR;
    }
    size_t cap = 4096, got = 0;
    char *buf = malloc(cap + 1);
    int rc = buf ? 0 : -ENOMEM;
    while (rc == 0) {
        if (got == cap) {
            char *nb = cap < TD__CONF_MAX ? realloc(buf, cap * 2 + 1) : NULL;
            if (!nb) {
                rc = cap < TD__CONF_MAX ? -ENOMEM : -EFBIG;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        ssize_t r = read(fd, buf + got, cap - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            rc = -errno;
        else if (r == 0)
            break;
        else
            got += (size_t)r;
    }
    close(fd);
    if (rc) {
        snprintf(err, errcap, "%s: %s", path, rc == -EFBIG
                 ? "larger than 1 MiB" : strerror(-rc));
        free(buf);
        return rc;
    }
    buf[got] = '\0';
    if (memchr(buf, '\0', got)) {
        int line = 1;
        for (const char *p = buf; *p; p++)
            line += *p == '\n';
        snprintf(err, errcap, "%s:%d: NUL byte; not a text file", path, line);
        free(buf);
        return -EINVAL;
    }
    *out = buf;
    *len = got;
    return 0;
}

int td_settings_load_file(json_t *settings, const char *path, char *err,
                          size_t errcap)
{
    char *text = NULL, e[300];
    size_t len = 0;
    int lineno = 0;
    int rc = td__read_conf(path, &text, &len, err, errcap);
    if (rc)
        return rc;
    /* Every line is checked before any is applied: a bad file changes
     * nothing (the caller applies to a fresh copy, but be strict). */
    for (char *p = text; rc == 0 && p < text + len;) {
        char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        lineno++;
        if (n > TD_SETTINGS_LINE_MAX) {
            snprintf(err, errcap, "%s:%d: line longer than %d bytes", path,
                     lineno, TD_SETTINGS_LINE_MAX);
            rc = -EINVAL;
            break;
        }
        char line[TD_SETTINGS_LINE_MAX + 1];
        memcpy(line, p, n);
        line[n] = '\0';
        p += n + (nl ? 1 : 0);
        char *hash = strchr(line, '#');
        if (hash && (hash == line || hash[-1] == ' ' || hash[-1] == '\t'))
            *hash = '\0';
        char *k = line + strspn(line, " \t");
        size_t kl = strlen(k);
        while (kl && strchr(" \t\r\n", k[kl - 1]))
            k[--kl] = '\0';
        if (!*k)
            continue;
        char *eq = strchr(k, '=');
        if (!eq) {
            snprintf(err, errcap, "%s:%d: expected 'key = value'", path,
                     lineno);
            rc = -EINVAL;
            break;
        }
        char *v = eq + 1 + strspn(eq + 1, " \t");
        char *ke = eq;
        while (ke > k && (ke[-1] == ' ' || ke[-1] == '\t'))
            ke--;
        *ke = '\0';
        json_t *jv = json_loads(v, JSON_DECODE_ANY, NULL);
        if (!jv)
            jv = json_string(v);
        rc = td_settings_set(settings, k, jv, NULL, e, sizeof e);
        json_decref(jv);
        if (rc)
            snprintf(err, errcap, "%s:%d: %s", path, lineno, e);
    }
    free(text);
    return rc;
}

long long td_settings_int(const json_t *settings, const char *key)
{
    json_t *v = json_object_get(settings, key);
    return json_is_integer(v) ? json_integer_value(v) : -1;
}

const char *td_settings_str(const json_t *settings, const char *key)
{
    json_t *v = json_object_get(settings, key);
    return json_is_string(v) ? json_string_value(v) : "";
}
