/* settings.h - the daemon's settings: one table of keys with their type,
 * range, default, whether they can change while running, and help text.
 *
 * The same table serves the config file, `config_get`/`config_set` over
 * the socket, and the documentation (`traind --help-config`).  Values are
 * kept in a JSON object; unknown keys are errors naming the key.
 */
#ifndef TD_SETTINGS_H
#define TD_SETTINGS_H

#include <stddef.h>

#include <jansson.h>

enum td_setting_type {
    TD_SET_INT,      /* integer in [min, max] */
    TD_SET_AUTO_INT, /* "auto" or an integer in [min, max] */
    TD_SET_STRING,
    TD_SET_LEVEL,    /* a log level name */
    TD_SET_PATHS,    /* a list of absolute paths (JSON array, or one
                        string with paths separated by ':') */
};

typedef struct td_setting_def {
    const char *key;
    enum td_setting_type type;
    const char *def;  /* default, as JSON text */
    long long min, max;
    int live;         /* 1: takes effect at once; 0: needs a restart */
    const char *help;
} td_setting_def;

extern const td_setting_def td_setting_defs[]; /* ends with key == NULL */

/* A new object holding every default. */
json_t *td_settings_defaults(void);
const td_setting_def *td_setting_find(const char *key);
/* Validates and stores value (borrowed) under key.  *live_out (may be
 * NULL) receives the key's live flag.  -EINVAL with err filled in. */
int td_settings_set(json_t *settings, const char *key, json_t *value,
                    int *live_out, char *err, size_t errcap);
#define TD_SETTINGS_LINE_MAX 4095 /* bytes per config line, comments too */

/* Reads a config file of `key = value` lines ('#' starts a comment; a
 * value is JSON if it parses as JSON, else the text itself) into settings.
 * Errors name the file, the line and the key: "traind.conf:4: colour:
 * unknown setting".  -ENOENT if the file does not exist.  The file must
 * be a regular text file (no NUL byte, at most 1 MiB) of lines of at most
 * TD_SETTINGS_LINE_MAX bytes; anything else is an error, never "empty". */
int td_settings_load_file(json_t *settings, const char *path, char *err,
                          size_t errcap);
/* Convenience readers; "auto" reads as -1. */
long long td_settings_int(const json_t *settings, const char *key);
const char *td_settings_str(const json_t *settings, const char *key);

#endif
