/* checkpoint.h - durable safetensors checkpoints, written off the trainer.
 *
 * File format (safetensors, readable by numpy and PyTorch):
 *   u64 little-endian N | N bytes of JSON header, space-padded so that
 *   8 + N is a multiple of 8 | the data region, tensors packed back to back
 *   in little-endian, no holes.
 * The header maps each tensor name to {"dtype","shape","data_offsets"}
 * (offsets relative to the data region) and "__metadata__" to a map of
 * strings: traind.format ("1"), spec_hash (16 hex), step, epoch,
 * sampler_pos, seed (decimal), data_crc32 (8 hex, zlib CRC-32 of the whole
 * data region), format ("pt") and, since traind kept them, the epoch's
 * sums so far: epoch_loss_sum, epoch_correct, epoch_samples (decimal).
 *
 * Files are named ckpt-<step, 12 digits>.safetensors in the job's
 * checkpoint directory.  A write goes to <name>.tmp, is fsynced, renamed
 * and the directory fsynced; only then are checkpoints beyond the newest
 * `keep` deleted.  A .tmp a crash left behind is removed before each
 * write (and by pruning).  A failed write (ENOSPC, EACCES, ...) removes
 * its .tmp and leaves the older checkpoints as they were.
 *
 * The writer thread (td_ckpt_writer) takes snapshots through a td_queue
 * of capacity 1: one write runs while at most one more waits.  A further
 * submit returns -EBUSY at once (the trainer skips that checkpoint and
 * counts a stall).  Completion is reported by a callback on the writer
 * thread, which must not block (the daemon forwards it with
 * uv_async_send).  The writer never touches the device.
 */
#ifndef TD_CHECKPOINT_H
#define TD_CHECKPOINT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

#include "base/fsio.h"

#define TD_CKPT_MAX_DIMS 8
#define TD_CKPT_NAME_MAX 128
#define TD_CKPT_FORMAT_VERSION 2

enum td_st_dtype {
    TD_DT_F32 = 0, TD_DT_F64, TD_DT_F16, TD_DT_BF16,
    TD_DT_I8, TD_DT_U8, TD_DT_I32, TD_DT_I64, TD_DT_BOOL,
    TD_DT_COUNT
};

/* "F32" etc. (safetensors names) and byte sizes. */
const char *td_dtype_name(enum td_st_dtype dt);
size_t td_dtype_size(enum td_st_dtype dt);
/* -EINVAL for a name that is not a known dtype. */
int td_dtype_parse(const char *name, enum td_st_dtype *out);

typedef struct td_ckpt_tensor {
    char name[TD_CKPT_NAME_MAX];
    enum td_st_dtype dtype;
    int ndim;
    int64_t shape[TD_CKPT_MAX_DIMS];
    size_t offset;          /* in the snapshot's data / the data region */
    size_t nbytes;
} td_ckpt_tensor;

typedef struct td_ckpt_meta {
    uint64_t spec_hash;
    int64_t step, epoch;
    int64_t sampler_pos;    /* next sample index within the epoch */
    uint64_t seed;
    /* The epoch so far (td_train_position): epoch_loss_sum (the sum of
     * per-sample train losses, %.17g), epoch_correct, epoch_samples.
     * Optional on read: older checkpoints have none (has_epoch_sums 0). */
    int has_epoch_sums;
    double epoch_loss_sum;
    int64_t epoch_correct, epoch_samples;
} td_ckpt_meta;

/* A host snapshot: named tensors in one contiguous allocation. */
typedef struct td_ckpt_snapshot {
    td_ckpt_tensor *tensors;
    int n_tensors, max_tensors;
    uint8_t *data;
    size_t used, cap;       /* bytes taken / allocated in data */
    td_ckpt_meta meta;
    /* More __metadata__ entries, key -> JSON string (the self-describing
     * keys of store/ckpt_meta.h), or NULL.  Borrowed: it must outlive the
     * write and not change while one runs (the writer thread reads it). */
    const json_t *extra_meta;
    void *user;             /* the caller's; untouched */
    int64_t submit_ns;      /* set by td_ckpt_writer_submit */
    /* Called by the writer thread before it reads data: waits until the
     * data is there (a device-to-host copy the trainer enqueued and did
     * not wait for).  0, or a negative code with a message in err: that
     * checkpoint then fails like a failed write.  NULL: data is ready. */
    int (*ready)(void *ready_arg, char *err, size_t errcap);
    void *ready_arg;
} td_ckpt_snapshot;

/* Allocates room for data_bytes and max_tensors, pages touched up front.
 * 0 or -ENOMEM/-EINVAL. */
int td_ckpt_snapshot_init(td_ckpt_snapshot *s, size_t data_bytes,
                          int max_tensors);
void td_ckpt_snapshot_destroy(td_ckpt_snapshot *s);
/* Forgets the tensors (keeps the memory) for the next snapshot. */
void td_ckpt_snapshot_reset(td_ckpt_snapshot *s);
/* Appends a tensor; *dst receives where to copy its bytes.  -EINVAL
 * (bad dims/dtype/duplicate name), -ENAMETOOLONG, -ENOSPC (no room). */
int td_ckpt_snapshot_add(td_ckpt_snapshot *s, const char *name,
                         enum td_st_dtype dtype, int ndim, const int64_t *shape,
                         void **dst);

/* I/O hooks for tests (fault injection); NULL members use write/fsync. */
typedef td_fs_io td_ckpt_io;

/* "ckpt-000000000500.safetensors" into out. */
void td_ckpt_filename(int64_t step, char *out, size_t cap);

/* Writes s durably as dir/ckpt-<step>.safetensors and then keeps only the
 * newest `keep` (0 = keep all) at or below its step; checkpoints above it
 * (unusable ones a resume skipped) are left, never counted, so the new one
 * is never pruned.  io may be NULL.  path (may be NULL)
 * receives the file's path.  Returns 0 or -errno with err filled. */
int td_ckpt_write(const char *dir, const td_ckpt_snapshot *s, int keep,
                  const td_ckpt_io *io, char *path, size_t pathcap,
                  char *err, size_t errcap);

/* Writes s durably to exactly `path` (tmp, fsync, rename, fsync of the
 * folder) as a plain safetensors file: "format" and s->extra_meta in
 * __metadata__, no traind.format/step/CRC keys (a weights file, not a
 * checkpoint to resume from).  0 or -errno with err filled. */
int td_st_write(const char *path, const td_ckpt_snapshot *s, char *err,
                size_t errcap);

/* Deletes all but the newest `keep` checkpoints in dir, and any stale
 * ckpt-*.safetensors.tmp a crash left behind (so it must not run while a
 * write into dir is in progress; td_ckpt_write calls it after its own).
 * Returns how many checkpoints were deleted, or -errno. */
int td_ckpt_prune(const char *dir, int keep);

/* ---- reading ------------------------------------------------------------ */

typedef struct td_ckpt_file td_ckpt_file;

/* Opens and validates everything (header bounds, dtypes, shapes, offsets,
 * overlaps and holes, metadata, CRC).  TD_E_CORRUPT or TD_E_CRC (or
 * -errno) with the reason in err. */
int td_ckpt_open(const char *path, td_ckpt_file **out, char *err,
                 size_t errcap);
/* Opens any safetensors file (a traind checkpoint, an export, a
 * state_dict saved by PyTorch's safetensors writer) with the same checks
 * of the structure; __metadata__ may be absent, and data_crc32 is checked
 * only when present.  td_ckpt_file_meta gives zeros for a file that is not
 * a traind checkpoint. */
int td_st_open(const char *path, td_ckpt_file **out, char *err,
               size_t errcap);
void td_ckpt_close(td_ckpt_file *f);

const td_ckpt_meta *td_ckpt_file_meta(const td_ckpt_file *f);
/* A __metadata__ value, or NULL. */
const char *td_ckpt_file_meta_str(const td_ckpt_file *f, const char *key);
int td_ckpt_file_count(const td_ckpt_file *f);
const td_ckpt_tensor *td_ckpt_file_tensor(const td_ckpt_file *f, int i);
const td_ckpt_tensor *td_ckpt_file_find(const td_ckpt_file *f,
                                        const char *name);
/* The bytes of tensor t (from td_ckpt_file_tensor/find) in the map. */
const void *td_ckpt_file_data(const td_ckpt_file *f, const td_ckpt_tensor *t);
/* Copies tensor `name` into dst, which holds cap bytes; the dtype must
 * match and cap must equal its size.  -ENOENT / -EINVAL with err. */
int td_ckpt_file_read(const td_ckpt_file *f, const char *name,
                      enum td_st_dtype dtype, void *dst, size_t cap, char *err,
                      size_t errcap);

/* Opens the newest checkpoint in dir that validates, logging each newer
 * one that does not and falling back.  path receives its path; err is ""
 * or, after a fall-back, "N newer checkpoint(s) unusable: <why the newest
 * is>".  -ENOENT when there is none (err says how many were unusable and
 * why the newest is). */
int td_ckpt_load_latest(const char *dir, td_ckpt_file **out, char *path,
                        size_t pathcap, char *err, size_t errcap);

/* ---- the writer thread -------------------------------------------------- */

typedef struct td_ckpt_result {
    int status;                 /* 0 or -errno */
    char path[4096];            /* the file written (when status == 0) */
    char err[512];              /* why it failed */
    const td_ckpt_snapshot *snap; /* free for reuse once the callback ran */
    int64_t step;
    size_t bytes;               /* file size */
    int64_t queued_ns;          /* waited behind the previous write */
    int64_t write_ns;           /* write + fsync + rename + dir fsync */
} td_ckpt_result;

/* Called on the writer thread after each write; must not block. */
typedef void (*td_ckpt_done_fn)(void *user, const td_ckpt_result *r);

typedef struct td_ckpt_writer_config {
    const char *dir;            /* copied */
    int keep;                   /* newest checkpoints kept (0 = all) */
    td_ckpt_done_fn done;       /* may be NULL */
    void *user;
    long job;                   /* for log lines; <= 0 = none */
    const td_ckpt_io *io;       /* tests; NULL = real I/O */
    int nice;                   /* 0-19: the writer thread's nice value, so
                                   its CRC and copies yield to the trainer
                                   on a busy machine (0 = unchanged) */
} td_ckpt_writer_config;

typedef struct td_ckpt_writer_stats {
    uint64_t written, failed;
    uint64_t busy;              /* submits refused because one was pending */
    uint64_t bytes;
    int64_t write_ns;           /* total */
} td_ckpt_writer_stats;

typedef struct td_ckpt_writer td_ckpt_writer;

int td_ckpt_writer_start(td_ckpt_writer **out,
                         const td_ckpt_writer_config *cfg);
/* Hands s over without blocking.  0: queued (the writer owns s until the
 * callback for it); -EBUSY: a write is running and another is pending
 * (s stays the caller's; counted in stats.busy); TD_E_CLOSED. */
int td_ckpt_writer_submit(td_ckpt_writer *w, td_ckpt_snapshot *s);
/* Snapshots submitted and not yet reported (0, 1 or 2). */
int td_ckpt_writer_in_flight(td_ckpt_writer *w);
void td_ckpt_writer_get_stats(td_ckpt_writer *w, td_ckpt_writer_stats *st);
/* Finishes queued writes, joins the thread and frees w. */
void td_ckpt_writer_stop(td_ckpt_writer *w);

#endif
