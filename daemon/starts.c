/* starts.c - the crash-loop guard's counter files (see starts.h).
 * Owns: state_dir/jobs/<id>.starts.  Never: decides a job's state. */
#include "starts.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void td__path(const char *dir, int64_t job, char *out, size_t cap)
{
    snprintf(out, cap, "%s/jobs/%lld.starts", dir, (long long)job);
}

int td_starts_count(const char *state_dir, int64_t job)
{
    char path[4200], buf[32];
    td__path(state_dir, job, path, sizeof path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    long v = strtol(buf, NULL, 10);
    return v > 0 && v < 1000000 ? (int)v : 0;
}

int td_starts_raise(const char *state_dir, int64_t job)
{
    char path[4200], dir[4200], buf[32];
    int n = td_starts_count(state_dir, job) + 1;
    td__path(state_dir, job, path, sizeof path);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    int len = snprintf(buf, sizeof buf, "%d\n", n);
    int rc = write(fd, buf, (size_t)len) == len ? 0 : -EIO;
    if (rc == 0 && fsync(fd) != 0)
        rc = -errno;
    close(fd);
    snprintf(dir, sizeof dir, "%s/jobs", state_dir);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    return rc ? rc : n;
}

void td_starts_clear(const char *state_dir, int64_t job)
{
    char path[4200];
    td__path(state_dir, job, path, sizeof path);
    unlink(path);
}
