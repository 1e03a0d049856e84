/* logtail.h - the tail of a job's log for `logs`, bounded in lines and in
 * bytes.
 *
 * Owns: reading a log file once, front to back, keeping only its newest
 * lines.  Never: holds more than the bound of line text (however long the
 * file or however many lines are asked for), or touches the daemon's
 * state (it runs on libuv's threadpool). */
#ifndef TD_LOGTAIL_H
#define TD_LOGTAIL_H

#include <stddef.h>

#include <jansson.h>

/* What one `logs` reply holds at most of line text (the JSON around it
 * is more): well under subscriber_max_bytes' default of 4 MiB. */
#define TD_LOGTAIL_MAX_BYTES (1024 * 1024)

/* Lines that follow the file's, asked for once the file is read (a new
 * array of strings, or NULL for none). */
typedef json_t *(*td_logtail_more)(void *arg);

/* The newest `lines` (>= 1) lines of the file at path (no file: none)
 * followed by the strings more(arg) gives (more may be NULL), oldest
 * first, with at most max_bytes of text: older lines past it are left
 * out, their count in *left_out.  A new array, or NULL with -errno in
 * *err. */
json_t *td_logtail(const char *path, td_logtail_more more, void *arg,
                   long lines, size_t max_bytes, long long *left_out,
                   int *err);

#endif
