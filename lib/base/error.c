/* error.c - names and messages for traind's error codes (see error.h). */
#define _GNU_SOURCE /* strerrordesc_np: thread-safe, static strings */
#include "base/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const struct {
    int code;
    const char *name;
    const char *msg;
} td__errors[] = {
    {TD_E_CORRUPT, "TD_E_CORRUPT", "corrupt or undecodable data"},
    {TD_E_SPEC, "TD_E_SPEC", "invalid job spec or model definition"},
    {TD_E_DEVICE, "TD_E_DEVICE", "compute device error"},
    {TD_E_PROTO, "TD_E_PROTO", "malformed protocol message"},
    {TD_E_CRC, "TD_E_CRC", "checksum mismatch"},
    {TD_E_CLOSED, "TD_E_CLOSED", "closed"},
    {TD_E_TIMEDOUT, "TD_E_TIMEDOUT", "timed out"},
    {TD_E_BADDATA, "TD_E_BADDATA", "too many bad samples"},
    {TD_E_NOTSUP, "TD_E_NOTSUP", "not supported by this build or device"},
    {TD_E_SHRUNK, "TD_E_SHRUNK", "the file was cut short while in use "
                                 "(truncated or overwritten in place)"},
    {TD_E_NOTREG, "TD_E_NOTREG", "not a regular file (a FIFO, a device or "
                                 "a folder)"},
    {TD_E_RETRY, "TD_E_RETRY", "not possible for now (the cause may pass)"},
};

/* errno names worth printing symbolically; the message comes from libc. */
static const struct {
    int code;
    const char *name;
} td__errnos[] = {
    {EPERM, "EPERM"},   {ENOENT, "ENOENT"},   {EIO, "EIO"},
    {E2BIG, "E2BIG"},   {EBADF, "EBADF"},     {EAGAIN, "EAGAIN"},
    {ENOMEM, "ENOMEM"}, {EACCES, "EACCES"},   {EBUSY, "EBUSY"},
    {EEXIST, "EEXIST"}, {ENOTDIR, "ENOTDIR"}, {EISDIR, "EISDIR"},
    {EINVAL, "EINVAL"}, {EMFILE, "EMFILE"},   {EFBIG, "EFBIG"},
    {ENOSPC, "ENOSPC"}, {EPIPE, "EPIPE"},     {ERANGE, "ERANGE"},
    {ENAMETOOLONG, "ENAMETOOLONG"},           {ENOSYS, "ENOSYS"},
    {ENOTEMPTY, "ENOTEMPTY"},                 {ENODEV, "ENODEV"},
    {EMSGSIZE, "EMSGSIZE"}, {ECONNREFUSED, "ECONNREFUSED"},
    {ECONNRESET, "ECONNRESET"}, {ETIMEDOUT, "ETIMEDOUT"},
    {ECANCELED, "ECANCELED"}, {EOVERFLOW, "EOVERFLOW"},
};

#define TD__COUNT(a) (sizeof(a) / sizeof((a)[0]))

const char *td_strerror(int err)
{
    if (err == 0)
        return "success";
    for (size_t i = 0; i < TD__COUNT(td__errors); i++)
        if (td__errors[i].code == err)
            return td__errors[i].msg;
    if (err < 0 && err > TD_E_BASE + 1000) {
        const char *m = strerrordesc_np(-err);
        if (m)
            return m;
    }
    return "unknown error";
}

const char *td_errname(int err)
{
    if (err == 0)
        return "OK";
    for (size_t i = 0; i < TD__COUNT(td__errors); i++)
        if (td__errors[i].code == err)
            return td__errors[i].name;
    for (size_t i = 0; i < TD__COUNT(td__errnos); i++)
        if (-td__errnos[i].code == err)
            return td__errnos[i].name;
    return "UNKNOWN";
}

int td_set_error(char *err, size_t cap, int rc, const char *fmt, ...)
{
    if (err && cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, cap, fmt, ap);
        va_end(ap);
    }
    return rc;
}
