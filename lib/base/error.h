/* error.h - traind's error codes.
 *
 * Every fallible function in libtraind returns 0 on success or a negative
 * code: either a negated errno value (-ENOENT, -ENOMEM, ...) or one of the
 * TD_E* codes below, which live far below the errno range so the two never
 * collide.  td_strerror() turns any of them into a short English phrase.
 * Nothing in libtraind exits the process; errors travel up to the caller.
 */
#ifndef TD_ERROR_H
#define TD_ERROR_H

#include <errno.h>
#include <stddef.h>

enum {
    TD_E_BASE = -20000,
    TD_E_CORRUPT = TD_E_BASE,   /* data failed to decode or verify          */
    TD_E_SPEC = TD_E_BASE - 1,  /* a job spec or model definition is invalid */
    TD_E_DEVICE = TD_E_BASE - 2, /* the compute device failed or is absent   */
    TD_E_PROTO = TD_E_BASE - 3, /* a protocol message is malformed           */
    TD_E_CRC = TD_E_BASE - 4,   /* a checksum did not match                  */
    TD_E_CLOSED = TD_E_BASE - 5, /* the object was closed / shut down        */
    TD_E_TIMEDOUT = TD_E_BASE - 6, /* a timed wait expired                   */
    TD_E_BADDATA = TD_E_BASE - 7, /* too many bad samples in a dataset        */
    TD_E_NOTSUP = TD_E_BASE - 8, /* the build or device lacks a feature       */
    TD_E_SHRUNK = TD_E_BASE - 9, /* a mapped file was cut short while in use */
    TD_E_NOTREG = TD_E_BASE - 10, /* a file to read is not a regular file    */
    TD_E_RETRY = TD_E_BASE - 11, /* failed on a condition that may pass (a
                                    file unreadable for now): try again   */
    TD_E_LAST = TD_E_BASE - 11
};

/* A static string for any code: 0, -errno, or TD_E_*.  Never NULL. */
const char *td_strerror(int err);

/* Formats a message for people into err (when err is not NULL and cap is
 * not 0) and returns rc, so that an error path reads
 *     return td_set_error(err, cap, -ENOENT, "%s: no such file", path);
 * The one such helper in traind: do not write another. */
int td_set_error(char *err, size_t cap, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The symbolic name ("ENOENT", "TD_E_SPEC", "OK"), or "UNKNOWN". Never NULL. */
const char *td_errname(int err);

#endif
