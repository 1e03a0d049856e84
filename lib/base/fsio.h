/* fsio.h - durable file writes and folder creation, for every area.
 *
 * Owns: the one way traind replaces a file so that a crash or a full disk
 * leaves either the old file or the complete new one, never a torn one:
 * write "<path>.tmp", fsync it, close, rename over <path>, fsync the folder
 * (without the last step the rename itself may not survive a power loss).
 * Checkpoints, job records, shards and index caches all go through here.
 * Never does: partial replacement; leaves a .tmp behind on an error it saw
 * (a crash can, and each owner removes its stale ones).
 *
 * Usage, streaming (shards, checkpoints):
 *     td_atomic_file f;
 *     if ((rc = td_atomic_open(&f, path, 0644, 0, NULL, err, cap))) ...;
 *     rc = td_write_all(f.fd, data, n, NULL);      // as often as needed
 *     rc = rc ? (td_atomic_abort(&f), rc) : td_atomic_commit(&f, err, cap);
 * or in one call for a buffer: td_write_atomic(path, 0640, text, len, ...).
 */
#ifndef TD_FSIO_H
#define TD_FSIO_H

#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

/* Hooks for tests that inject failures (a full disk, a failing fsync);
 * NULL or NULL members mean write(2) and fsync(2). */
typedef struct td_fs_io {
    ssize_t (*write)(void *user, int fd, const void *buf, size_t n);
    int (*fsync)(void *user, int fd);
    void *user;
} td_fs_io;

/* td_atomic_open flag: name the temporary "<path>.<pid>.tmp" instead of
 * "<path>.tmp", for files several processes may write at once (caches). */
#define TD_ATOMIC_PID_TMP 1

typedef struct td_atomic_file {
    int fd;                /* write the content here */
    char path[4096];       /* the final name */
    char tmp[4128];        /* where the content goes until commit */
    const td_fs_io *io;
} td_atomic_file;

/* Creates the temporary file (mode) as a new file: whatever stands at its
 * name (a stale tmp, a link planted by someone who can write the folder)
 * is unlinked first, never followed or truncated.  0 or -errno, with err
 * ("cannot create X.tmp: ...") filled when err is not NULL. */
int td_atomic_open(td_atomic_file *f, const char *path, mode_t mode,
                   int flags, const td_fs_io *io, char *err, size_t errcap);

/* fsync, close, rename over the final name, fsync the folder.  On an
 * error before the rename the temporary is removed and the old file is
 * untouched; an error in the folder's fsync leaves the new file in place
 * (complete, but its name may not survive a crash) and is still reported.
 * err names the step and the file: "fsync X.tmp: No space left on device". */
int td_atomic_commit(td_atomic_file *f, char *err, size_t errcap);

/* Closes and removes the temporary; the old file is untouched. */
void td_atomic_abort(td_atomic_file *f);

/* The whole replacement for a buffer in memory. */
int td_write_atomic(const char *path, mode_t mode, const void *data,
                    size_t len, const td_fs_io *io, char *err, size_t errcap);

/* write(2) until all n bytes are written (EINTR retried, 64 MiB at a
 * time); 0 or -errno (-EIO for a write of 0 bytes). */
int td_write_all(int fd, const void *buf, size_t n, const td_fs_io *io);

/* pread(2) from offset 0 until n bytes are read or the file ends (EINTR
 * retried): 0 with *got = the bytes read (< n: the file is shorter), or
 * -errno. */
int td_read_all(int fd, void *buf, size_t n, size_t *got);

/* Opens a file someone else named (a user's data, init, image) for
 * reading: without blocking (a FIFO would block open() until a writer
 * came, a device would be read for ever), then only a regular file is
 * kept, in blocking mode.  The fd, or -errno, or TD_E_NOTREG. */
int td_open_regular(const char *path);
/* The same as a stdio stream (mode "r" or "rb"): NULL with *rc = -errno
 * or TD_E_NOTREG. */
FILE *td_fopen_regular(const char *path, const char *mode, int *rc);

/* fsync of a folder, so that names created or renamed in it last. */
int td_fsync_dir(const char *dir, const td_fs_io *io);

/* mkdir -p with `mode` for the folders it creates; 0, or -errno
 * (-ENOTDIR when the path exists and is not a folder). */
int td_mkdirs(const char *path, mode_t mode);
/* mkdir(path) that survives a power loss: when it creates the folder,
 * its parent is fsynced (a file fsynced inside a new folder is not enough
 * for the folder's own name).  0 when path is a folder now (made or
 * already there), -ENOTDIR when something else stands there, or -errno
 * (the parent's fsync included). */
int td_mkdir_durable(const char *path, mode_t mode, const td_fs_io *io);

#endif
