/* fsio.c - durable file writes and folder creation (see fsio.h). */
#include "base/fsio.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"

int td_write_all(int fd, const void *buf, size_t n, const td_fs_io *io)
{
    const unsigned char *p = buf;
    while (n > 0) {
        size_t chunk = n > (64u << 20) ? (64u << 20) : n;
        ssize_t w = io && io->write ? io->write(io->user, fd, p, chunk)
                                    : write(fd, p, chunk);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -errno;
        if (w == 0)
            return -EIO;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int td_read_all(int fd, void *buf, size_t n, size_t *got)
{
    unsigned char *p = buf;
    *got = 0;
    while (*got < n) {
        ssize_t r = pread(fd, p + *got, n - *got, (off_t)*got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -errno;
        if (r == 0)
            break;
        *got += (size_t)r;
    }
    return 0;
}

static int td__fsync(const td_fs_io *io, int fd)
{
    int r = io && io->fsync ? io->fsync(io->user, fd) : fsync(fd);
    return r < 0 ? -errno : 0;
}

int td_fsync_dir(const char *dir, const td_fs_io *io)
{
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return -errno;
    int r = td__fsync(io, dfd);
    close(dfd);
    return r;
}

int td_atomic_open(td_atomic_file *f, const char *path, mode_t mode,
                   int flags, const td_fs_io *io, char *err, size_t errcap)
{
    memset(f, 0, sizeof *f);
    f->fd = -1;
    f->io = io;
    int n = snprintf(f->path, sizeof f->path, "%s", path);
    int t = flags & TD_ATOMIC_PID_TMP
                ? snprintf(f->tmp, sizeof f->tmp, "%s.%ld.tmp", path,
                           (long)getpid())
                : snprintf(f->tmp, sizeof f->tmp, "%s.tmp", path);
    if (n < 0 || (size_t)n >= sizeof f->path || t < 0 ||
        (size_t)t >= sizeof f->tmp)
        return td_set_error(err, errcap, -ENAMETOOLONG, "%s: path too long",
                            path);
    /* A new file of our own, never through what stands at the name: a
     * stale tmp of ours goes, and a link someone else planted there (a
     * folder others can write in) is removed, not followed and truncated.
     * If something is put back in between, the exclusive create fails;
     * an unlink that fails leaves that to the create's error, too. */
    (void)unlink(f->tmp);
    f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                 mode);
    if (f->fd < 0)
        return td_set_error(err, errcap, -errno, "cannot create %s: %s",
                            f->tmp, strerror(errno));
    return 0;
}

void td_atomic_abort(td_atomic_file *f)
{
    if (f->fd >= 0)
        close(f->fd);
    f->fd = -1;
    if (f->tmp[0])
        unlink(f->tmp);
}

int td_atomic_commit(td_atomic_file *f, char *err, size_t errcap)
{
    const char *what = "fsync";
    int r = td__fsync(f->io, f->fd);
    if (r == 0) {
        what = "close";
        r = close(f->fd) < 0 ? -errno : 0;
        f->fd = -1;
    }
    if (r == 0 && (what = "rename", rename(f->tmp, f->path) < 0))
        r = -errno;
    if (r < 0) {
        td_set_error(err, errcap, r, "%s %s: %s", what, f->tmp,
                     td_strerror(r));
        td_atomic_abort(f);
        return r;
    }
    char dir[sizeof f->path];
    snprintf(dir, sizeof dir, "%s", f->path);
    r = td_fsync_dir(dirname(dir), f->io);
    if (r < 0)
        /* The file is complete but its name may not survive a crash. */
        return td_set_error(err, errcap, r, "fsync of the folder of %s: %s",
                            f->path, td_strerror(r));
    return 0;
}

int td_write_atomic(const char *path, mode_t mode, const void *data,
                    size_t len, const td_fs_io *io, char *err, size_t errcap)
{
    td_atomic_file f;
    int r = td_atomic_open(&f, path, mode, 0, io, err, errcap);
    if (r)
        return r;
    if ((r = td_write_all(f.fd, data, len, io)) != 0) {
        td_set_error(err, errcap, r, "write %s: %s", f.tmp, td_strerror(r));
        td_atomic_abort(&f);
        return r;
    }
    return td_atomic_commit(&f, err, errcap);
}

int td_mkdirs(const char *path, mode_t mode)
{
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf)
        return -ENAMETOOLONG;
    memcpy(buf, path, n + 1);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, mode) && errno != EEXIST)
            return -errno;
        *p = '/';
    }
    if (mkdir(buf, mode) && errno != EEXIST)
        return -errno;
    struct stat st;
    if (stat(buf, &st))
        return -errno;
    return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

int td_mkdir_durable(const char *path, mode_t mode, const td_fs_io *io)
{
    char parent[4096];
    if (snprintf(parent, sizeof parent, "%s", path) >= (int)sizeof parent)
        return -ENAMETOOLONG;
    if (mkdir(path, mode) != 0) {
        if (errno != EEXIST)
            return -errno;
        struct stat st;
        if (stat(path, &st))
            return -errno;
        return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
    }
    return td_fsync_dir(dirname(parent), io);
}

int td_open_regular(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return -errno;
    struct stat st;
    int rc = fstat(fd, &st) ? -errno : S_ISREG(st.st_mode) ? 0 : TD_E_NOTREG;
    int fl = rc ? 0 : fcntl(fd, F_GETFL);
    if (rc == 0 && (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0))
        rc = -errno;
    if (rc) {
        close(fd);
        return rc;
    }
    return fd;
}

FILE *td_fopen_regular(const char *path, const char *mode, int *rc)
{
    int fd = td_open_regular(path);
    FILE *f = fd >= 0 ? fdopen(fd, mode) : NULL;
    if (!f) {
        *rc = fd >= 0 ? -errno : fd;
        if (fd >= 0)
            close(fd);
    }
    return f;
}
