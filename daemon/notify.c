/* notify.c - see notify.h. */
#define _GNU_SOURCE
#include "notify.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int td_notify(const char *msg)
{
    const char *path = getenv("NOTIFY_SOCKET");
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t n;
    if (!path || !*path)
        return 0;
    n = strlen(path);
    if ((path[0] != '/' && path[0] != '@') || n >= sizeof sa.sun_path)
        return -EINVAL;
    memcpy(sa.sun_path, path, n);
    if (path[0] == '@')
        sa.sun_path[0] = '\0'; /* abstract namespace */
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
    ssize_t w = sendto(fd, msg, strlen(msg), MSG_NOSIGNAL,
                       (struct sockaddr *)&sa, len);
    int rc = w < 0 ? -errno : 0;
    close(fd);
    return rc;
}

int td_notifyf(const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return td_notify(buf);
}

static int td__for_us(const char *pid_var)
{
    const char *p = getenv(pid_var);
    if (!p)
        return 1; /* WATCHDOG_PID is optional */
    char *end;
    long v = strtol(p, &end, 10);
    return *end == '\0' && v == (long)getpid();
}

uint64_t td_notify_watchdog_usec(void)
{
    const char *s = getenv("WATCHDOG_USEC");
    if (!s || !td__for_us("WATCHDOG_PID"))
        return 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    return *end == '\0' ? (uint64_t)v : 0;
}

int td_notify_listen_fd(void)
{
    const char *pid = getenv("LISTEN_PID"), *fds = getenv("LISTEN_FDS");
    int fd = -1;
    if (pid && fds && td__for_us("LISTEN_PID") && atoi(fds) >= 1) {
        fd = 3; /* SD_LISTEN_FDS_START */
        fcntl(fd, F_SETFD, FD_CLOEXEC);
    }
    unsetenv("LISTEN_PID");
    unsetenv("LISTEN_FDS");
    unsetenv("LISTEN_FDNAMES");
    return fd;
}
