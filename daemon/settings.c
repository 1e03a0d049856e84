/* settings.c - the settings table (see settings.h).  Every default of the
 * daemon is written here and nowhere else. */
#include "settings.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "log.h"

const td_setting_def td_setting_defs[] = {
    {"workers", TD_SET_AUTO_INT, "\"auto\"", 1, 256, 1,
     "decode workers per job; auto follows the autotuner"},
    {"prefetch", TD_SET_AUTO_INT, "\"auto\"", 1, 1024, 1,
     "batches decoded ahead (ring depth); auto sizes it from the batch"},
    {"checkpoint_every_steps", TD_SET_INT, "500", 0, 1000000000, 1,
     "default checkpoint interval for jobs that set none (0: only at "
     "epoch ends and on request)"},
    {"checkpoint_keep", TD_SET_INT, "3", 1, 1000, 1,
     "checkpoints kept per job by default"},
    {"subscriber_soft_bytes", TD_SET_INT, "262144", 4096, 1LL << 30, 1,
     "queued bytes past which a subscriber gets coalesced windows and no "
     "step events"},
    {"subscriber_max_bytes", TD_SET_INT, "4194304", 65536, 1LL << 32, 1,
     "queued bytes past which a subscriber is disconnected"},
    {"log_level", TD_SET_LEVEL, "\"info\"", 0, 0, 1,
     "error, warn, info or debug"},
    {"device", TD_SET_STRING, "\"auto\"", 0, 0, 0,
     "auto, cpu, cuda or cuda:N"},
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

int td_settings_set(json_t *settings, const char *key, json_t *value,
                    int *live_out, char *err, size_t errcap)
{
    const td_setting_def *s = td_setting_find(key);
    if (!s) {
        snprintf(err, errcap, "%s: unknown setting", key);
        return -EINVAL;
    }
    int rc = td__check(s, value, err, errcap);
    if (rc)
        return rc;
    if (live_out)
        *live_out = s->live;
    return json_object_set(settings, key, value) ? -ENOMEM : 0;
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
