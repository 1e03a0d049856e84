/* fuzz_util.c - helpers for the fuzz targets (see fuzz.h). */
#define _GNU_SOURCE /* memfd_create */
#include "fuzz.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static void td__write_all(int fd, const void *data, size_t size)
{
    const uint8_t *p = data;
    while (size) {
        ssize_t w = write(fd, p, size);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            perror("fuzz: write");
            abort();
        }
        p += w;
        size -= (size_t)w;
    }
}

int td_fuzz_memfile(const uint8_t *data, size_t size, char *path, size_t cap)
{
    int fd = memfd_create("fuzz", MFD_CLOEXEC);
    if (fd < 0) {
        perror("fuzz: memfd_create");
        abort();
    }
    td__write_all(fd, data, size);
    snprintf(path, cap, "/proc/self/fd/%d", fd);
    return fd;
}

void td_fuzz_write(const char *path, const void *data, size_t size)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        perror(path);
        abort();
    }
    td__write_all(fd, data, size);
    close(fd);
}

static char td__dir[4096];

static int td__rm(const char *p, const struct stat *st, int flag,
                 struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(p);
}

static void td__rmdir(void)
{
    if (td__dir[0] && nftw(td__dir, td__rm, 8, FTW_DEPTH | FTW_PHYS) != 0)
        fprintf(stderr, "fuzz: could not remove %s\n", td__dir);
}

const char *td_fuzz_tmpdir(void)
{
    if (td__dir[0])
        return td__dir;
    /* TMPDIR, else /dev/shm: the targets that write files (dispatch makes
     * and removes a daemon's state dir per input) run 10x faster on a
     * tmpfs than on ext4, whose mkdir/rmdir dominate them. */
    const char *base = getenv("TMPDIR");
    if (!base || !*base)
        base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(td__dir, sizeof td__dir, "%s/td-fuzz-XXXXXX", base);
    if (!mkdtemp(td__dir)) {
        perror("fuzz: mkdtemp");
        abort();
    }
    atexit(td__rmdir);
    return td__dir;
}

unsigned td_fuzz_touch(const uint8_t *p, size_t n)
{
    unsigned sum = 0;
    for (size_t i = 0; i < n; i++)
        sum = sum * 31 + p[i];
    return sum;
}
