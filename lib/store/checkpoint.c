/* checkpoint.c - safetensors checkpoints: snapshots, durable writes,
 * validating reads, newest-valid selection (format in checkpoint.h).
 *
 * Owns: the on-disk format and every check a reader makes before trusting
 * a byte of it; the tmp -> fsync -> rename -> fsync(dir) sequence; pruning.
 * Never: touches a device, blocks the trainer (writes run on the writer
 * thread, checkpoint_writer.c), trusts a length or offset it read before
 * checking it against the file size, or deletes an older checkpoint
 * before the new one is durable.
 */
#include "store/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "base/error.h"
#include "base/fsio.h"
#include "base/log.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoint.c writes host memory as little-endian tensors"
#endif

#define TD__HEADER_MAX (100u << 20) /* safetensors' own limit */

/* ---- dtypes ------------------------------------------------------------- */

static const struct {
    const char *name;
    size_t size;
} td__dtypes[TD_DT_COUNT] = {
    [TD_DT_F32] = {"F32", 4}, [TD_DT_F64] = {"F64", 8},
    [TD_DT_F16] = {"F16", 2}, [TD_DT_BF16] = {"BF16", 2},
    [TD_DT_I8] = {"I8", 1},   [TD_DT_U8] = {"U8", 1},
    [TD_DT_I32] = {"I32", 4}, [TD_DT_I64] = {"I64", 8},
    [TD_DT_BOOL] = {"BOOL", 1},
};

const char *td_dtype_name(enum td_st_dtype dt)
{
    return (unsigned)dt < TD_DT_COUNT ? td__dtypes[dt].name : "?";
}

size_t td_dtype_size(enum td_st_dtype dt)
{
    return (unsigned)dt < TD_DT_COUNT ? td__dtypes[dt].size : 0;
}

int td_dtype_parse(const char *name, enum td_st_dtype *out)
{
    for (int i = 0; i < TD_DT_COUNT; i++)
        if (strcmp(td__dtypes[i].name, name) == 0) {
            *out = (enum td_st_dtype)i;
            return 0;
        }
    return -EINVAL;
}

/* Bytes of a tensor, or 0 with *ok = 0 on overflow / bad input. */
static size_t td__tensor_bytes(enum td_st_dtype dt, int ndim,
                               const int64_t *shape, int *ok)
{
    size_t n = td_dtype_size(dt);
    *ok = n > 0 && ndim >= 0 && ndim <= TD_CKPT_MAX_DIMS;
    for (int i = 0; *ok && i < ndim; i++)
        if (shape[i] < 0 || __builtin_mul_overflow(n, (size_t)shape[i], &n))
            *ok = 0;
    return *ok ? n : 0;
}

/* ---- snapshots ---------------------------------------------------------- */

int td_ckpt_snapshot_init(td_ckpt_snapshot *s, size_t data_bytes,
                          int max_tensors)
{
    memset(s, 0, sizeof *s);
    if (max_tensors < 1)
        return -EINVAL;
    s->tensors = calloc((size_t)max_tensors, sizeof *s->tensors);
    s->data = malloc(data_bytes ? data_bytes : 1);
    if (!s->tensors || !s->data) {
        td_ckpt_snapshot_destroy(s);
        return -ENOMEM;
    }
    /* Touch every page now, so the trainer's first snapshot copy does
     * not pay the page faults. */
    memset(s->data, 0, data_bytes);
    s->max_tensors = max_tensors;
    s->cap = data_bytes;
    return 0;
}

void td_ckpt_snapshot_destroy(td_ckpt_snapshot *s)
{
    free(s->tensors);
    free(s->data);
    memset(s, 0, sizeof *s);
}

void td_ckpt_snapshot_reset(td_ckpt_snapshot *s)
{
    s->n_tensors = 0;
    s->used = 0;
    memset(&s->meta, 0, sizeof s->meta);
}

int td_ckpt_snapshot_add(td_ckpt_snapshot *s, const char *name,
                         enum td_st_dtype dtype, int ndim, const int64_t *shape,
                         void **dst)
{
    int ok;
    size_t n = td__tensor_bytes(dtype, ndim, shape, &ok);
    if (!ok || !name || !name[0] || strcmp(name, "__metadata__") == 0)
        return -EINVAL;
    if (strlen(name) >= TD_CKPT_NAME_MAX)
        return -ENAMETOOLONG;
    for (int i = 0; i < s->n_tensors; i++)
        if (strcmp(s->tensors[i].name, name) == 0)
            return -EINVAL;
    if (s->n_tensors >= s->max_tensors || n > s->cap - s->used)
        return -ENOSPC;
    td_ckpt_tensor *t = &s->tensors[s->n_tensors++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->dtype = dtype;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++)
        t->shape[i] = shape[i];
    t->offset = s->used;
    t->nbytes = n;
    s->used += n;
    if (dst)
        *dst = s->data + t->offset;
    return 0;
}

/* ---- writing ------------------------------------------------------------ */

static uint32_t td__crc(const uint8_t *p, size_t n)
{
    uLong crc = crc32(0L, Z_NULL, 0);
    while (n > 0) {
        uInt chunk = n > (1u << 30) ? (1u << 30) : (uInt)n;
        crc = crc32(crc, p, chunk);
        p += chunk;
        n -= chunk;
    }
    return (uint32_t)crc;
}

/* The JSON header, space-padded so that 8 + *len is a multiple of 8.  With
 * `traind` the checkpoint keys (format version, spec hash, position, CRC);
 * always "format" and the snapshot's extra metadata. */
static char *td__header(const td_ckpt_snapshot *s, int traind, uint32_t crc,
                        size_t *len)
{
    char buf[7][32];
    json_t *h = json_object(), *meta;
    snprintf(buf[0], 32, "%d", TD_CKPT_FORMAT_VERSION);
    snprintf(buf[1], 32, "%016" PRIx64, s->meta.spec_hash);
    snprintf(buf[2], 32, "%" PRId64, s->meta.step);
    snprintf(buf[3], 32, "%" PRId64, s->meta.epoch);
    snprintf(buf[4], 32, "%" PRId64, s->meta.sampler_pos);
    snprintf(buf[5], 32, "%" PRIu64, s->meta.seed);
    snprintf(buf[6], 32, "%08" PRIx32, crc);
    if (traind)
        meta = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:s}", "format",
                         "pt", "traind.format", buf[0], "spec_hash", buf[1],
                         "step", buf[2], "epoch", buf[3], "sampler_pos",
                         buf[4], "seed", buf[5], "data_crc32", buf[6]);
    else
        meta = json_pack("{s:s}", "format", "pt");
    if (traind && meta && s->meta.has_epoch_sums) {
        char sums[3][32];
        snprintf(sums[0], 32, "%.17g", s->meta.epoch_loss_sum);
        snprintf(sums[1], 32, "%" PRId64, s->meta.epoch_correct);
        snprintf(sums[2], 32, "%" PRId64, s->meta.epoch_samples);
        if (json_object_set_new(meta, "epoch_loss_sum", json_string(sums[0])) ||
            json_object_set_new(meta, "epoch_correct", json_string(sums[1])) ||
            json_object_set_new(meta, "epoch_samples", json_string(sums[2])))
            goto fail;
    }
    if (!h || !meta || json_object_set_new(h, "__metadata__", meta) < 0)
        goto fail;
    if (s->extra_meta) {
        const char *key;
        json_t *v;
        /* New strings, never a reference to the caller's values: the
         * trainer may read the same object while this thread writes. */
        json_object_foreach((json_t *)s->extra_meta, key, v) {
            if (json_is_string(v) && !json_object_get(meta, key) &&
                json_object_set_new(meta, key,
                                    json_string(json_string_value(v))) < 0)
                goto fail;
        }
    }
    for (int i = 0; i < s->n_tensors; i++) {
        const td_ckpt_tensor *t = &s->tensors[i];
        json_t *shape = json_array();
        for (int d = 0; shape && d < t->ndim; d++)
            json_array_append_new(shape, json_integer(t->shape[d]));
        json_t *e = json_pack("{s:s, s:o, s:[I,I]}", "dtype",
                              td_dtype_name(t->dtype), "shape", shape,
                              "data_offsets", (json_int_t)t->offset,
                              (json_int_t)(t->offset + t->nbytes));
        if (!e || json_object_set_new(h, t->name, e) < 0)
            goto fail;
    }
    char *txt = json_dumps(h, JSON_COMPACT);
    json_decref(h);
    if (!txt)
        return NULL;
    size_t n = strlen(txt), padded = (n + 7) & ~(size_t)7;
    char *out = realloc(txt, padded + 1);
    if (!out) {
        free(txt);
        return NULL;
    }
    memset(out + n, ' ', padded - n);
    out[padded] = '\0';
    *len = padded;
    return out;
fail:
    json_decref(h);
    return NULL;
}

void td_ckpt_filename(int64_t step, char *out, size_t cap)
{
    snprintf(out, cap, "ckpt-%012" PRId64 ".safetensors", step);
}

/* Writes the file body to fd: length, header, data. */
static int td__write_body(const td_ckpt_io *io, int fd,
                          const td_ckpt_snapshot *s, const char *hdr,
                          size_t hlen)
{
    uint8_t len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
    int r = td_write_all(fd, len8, 8, io);
    if (r == 0)
        r = td_write_all(fd, hdr, hlen, io);
    if (r == 0)
        r = td_write_all(fd, s->data, s->used, io);
    return r;
}

static int td__prune(const char *dir, int keep, int64_t upto);
static void td__remove_stale_tmp(const char *dir);

/* Writes s durably to `final` (tmp, fsync, rename, fsync the folder). */
static int td__write_file(const char *final, const td_ckpt_snapshot *s,
                          int traind, const td_ckpt_io *io, char *err,
                          size_t errcap)
{
    char e[512];
    size_t hlen = 0;
    td_atomic_file f;
    int r;
    char *hdr = td__header(s, traind, traind ? td__crc(s->data, s->used) : 0,
                           &hlen);
    const char *kept = traind ? " (older checkpoints kept)" : "";
    if (!hdr)
        return td_set_error(err, errcap, -ENOMEM,
                            "%s: out of memory for the header", final);
    if ((r = td_atomic_open(&f, final, 0644, 0, io, err, errcap)) != 0) {
        free(hdr);
        return r;
    }
    if ((r = td__write_body(io, f.fd, s, hdr, hlen)) != 0) {
        td_atomic_abort(&f);
        free(hdr);
        return td_set_error(err, errcap, r, "write %s: %s%s", f.tmp,
                            td_strerror(r), kept);
    }
    free(hdr);
    if ((r = td_atomic_commit(&f, e, sizeof e)) != 0) {
        /* Before the rename: the older checkpoints are all there is. */
        int renamed = access(final, F_OK) == 0;
        return td_set_error(err, errcap, r, "%s%s", e, renamed ? "" : kept);
    }
    return 0;
}

int td_ckpt_write(const char *dir, const td_ckpt_snapshot *s, int keep,
                  const td_ckpt_io *io, char *path, size_t pathcap,
                  char *err, size_t errcap)
{
    char name[64], final[4096];
    int r;
    td_ckpt_filename(s->meta.step, name, sizeof name);
    if ((size_t)snprintf(final, sizeof final, "%s/%s", dir, name) >=
        sizeof final)
        return td_set_error(err, errcap, -ENAMETOOLONG, "%s: path too long",
                            dir);
    /* Before, not only after: a crash's leftover may be what would fill
     * the disk, and after a failed write no pruning comes. */
    td__remove_stale_tmp(dir);
    if ((r = td__write_file(final, s, 1, io, err, errcap)) != 0)
        return r;
    if (path)
        snprintf(path, pathcap, "%s", final);
    if (keep > 0 && (r = td__prune(dir, keep, s->meta.step)) < 0)
        td_warn("checkpoint: pruning %s failed: %s", dir, td_strerror(r));
    return 0;
}

int td_st_write(const char *path, const td_ckpt_snapshot *s, char *err,
                size_t errcap)
{
    return td__write_file(path, s, 0, NULL, err, errcap);
}

/* ---- listing and pruning ------------------------------------------------ */

static int td__parse_name(const char *n, int64_t *step)
{
    /* exactly "ckpt-" + 12 digits + ".safetensors" */
    if (strlen(n) != 29 || strncmp(n, "ckpt-", 5) != 0 ||
        strcmp(n + 17, ".safetensors") != 0)
        return 0;
    int64_t v = 0;
    for (int i = 5; i < 17; i++) {
        if (n[i] < '0' || n[i] > '9')
            return 0;
        v = v * 10 + (n[i] - '0');
    }
    *step = v;
    return 1;
}

static int td__cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The steps of the checkpoints in dir, ascending; *out is malloc'd. */
static int td__list(const char *dir, int64_t **out, int *n)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int64_t *v = NULL, step;
    int len = 0, cap = 0;
    *out = NULL;
    *n = 0;
    if (!d)
        return -errno;
    while ((e = readdir(d))) {
        if (!td__parse_name(e->d_name, &step))
            continue;
        if (len == cap) {
            cap = cap ? 2 * cap : 16;
            int64_t *nv = realloc(v, (size_t)cap * sizeof *v);
            if (!nv) {
                free(v);
                closedir(d);
                return -ENOMEM;
            }
            v = nv;
        }
        v[len++] = step;
    }
    closedir(d);
    if (len)
        qsort(v, (size_t)len, sizeof *v, td__cmp_i64);
    *out = v;
    *n = len;
    return 0;
}

/* Removes ckpt-*.safetensors.tmp left by a crash during a write. */
static void td__remove_stale_tmp(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char base[64], path[4200];
    int64_t step;
    if (!d)
        return;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l != 33 || strcmp(e->d_name + 29, ".tmp") != 0)
            continue;
        memcpy(base, e->d_name, 29);
        base[29] = '\0';
        if (!td__parse_name(base, &step))
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (unlink(path) == 0)
            td_info("checkpoint: removed stale %s", path);
    }
    closedir(d);
}

/* Deletes all but the newest `keep` checkpoints at or below step `upto`.
 * Those above it are left: after a resume that skipped them as unusable
 * the job writes below them, and counting them among the newest would
 * delete the checkpoint just written (the next one at their step
 * replaces them). */
static int td__prune(const char *dir, int keep, int64_t upto)
{
    int64_t *steps;
    int n, deleted = 0;
    char name[64], path[4200];
    int r = td__list(dir, &steps, &n);
    if (r < 0)
        return r;
    td__remove_stale_tmp(dir);
    while (n > 0 && steps[n - 1] > upto)
        n--;
    for (int i = 0; i < n - keep; i++) {
        td_ckpt_filename(steps[i], name, sizeof name);
        snprintf(path, sizeof path, "%s/%s", dir, name);
        if (unlink(path) == 0)
            deleted++;
        else if (r == 0)
            r = -errno;
    }
    free(steps);
    return r < 0 ? r : deleted;
}

int td_ckpt_prune(const char *dir, int keep)
{
    return td__prune(dir, keep, INT64_MAX);
}

/* ---- reading ------------------------------------------------------------ */

struct td_ckpt_file {
    uint8_t *map;
    size_t size;
    const uint8_t *data;     /* the data region */
    size_t data_len;
    td_ckpt_tensor *t;
    int n;
    json_t *meta;            /* __metadata__ */
    td_ckpt_meta m;
};


static int td__cmp_off(const void *a, const void *b)
{
    const td_ckpt_tensor *x = a, *y = b;
    if (x->offset != y->offset)
        return (x->offset > y->offset) - (x->offset < y->offset);
    return (x->nbytes > y->nbytes) - (x->nbytes < y->nbytes);
}

/* One header entry -> t.  TD_E_CORRUPT with err on any inconsistency. */
static int td__parse_tensor(const char *name, const json_t *e, size_t dlen,
                            td_ckpt_tensor *t, char *err, size_t cap)
{
    const json_t *dt = json_object_get(e, "dtype");
    const json_t *sh = json_object_get(e, "shape");
    const json_t *off = json_object_get(e, "data_offsets");
    int ok;
    memset(t, 0, sizeof *t);
    if (strlen(name) >= TD_CKPT_NAME_MAX || !json_is_object(e) ||
        json_object_size(e) != 3 || !json_is_string(dt) ||
        !json_is_array(sh) || !json_is_array(off) ||
        json_array_size(off) != 2) {
        td_set_error(err, cap, 0, "tensor \"%.64s\": malformed header entry",
                     name);
        return TD_E_CORRUPT;
    }
    snprintf(t->name, sizeof t->name, "%s", name);
    if (td_dtype_parse(json_string_value(dt), &t->dtype) < 0) {
        td_set_error(err, cap, 0, "tensor \"%s\": unknown dtype \"%.16s\"",
                     name, json_string_value(dt));
        return TD_E_CORRUPT;
    }
    t->ndim = (int)json_array_size(sh);
    for (int i = 0; i < t->ndim && t->ndim <= TD_CKPT_MAX_DIMS; i++) {
        const json_t *d = json_array_get(sh, (size_t)i);
        t->shape[i] = json_is_integer(d) ? json_integer_value(d) : -1;
    }
    size_t nbytes = td__tensor_bytes(t->dtype, t->ndim, t->shape, &ok);
    const json_t *b = json_array_get(off, 0), *en = json_array_get(off, 1);
    if (!ok) {
        td_set_error(err, cap, 0, "tensor \"%s\": bad shape", name);
        return TD_E_CORRUPT;
    }
    if (!json_is_integer(b) || !json_is_integer(en) ||
        json_integer_value(b) < 0 ||
        json_integer_value(en) < json_integer_value(b) ||
        (uint64_t)json_integer_value(en) > dlen) {
        td_set_error(err, cap, 0,
                     "tensor \"%s\": data_offsets outside the data region "
                     "(%zu bytes)",
                     name, dlen);
        return TD_E_CORRUPT;
    }
    t->offset = (size_t)json_integer_value(b);
    t->nbytes = (size_t)(json_integer_value(en) - json_integer_value(b));
    if (t->nbytes != nbytes) {
        td_set_error(err, cap, 0, "tensor \"%s\": %zu bytes but %s%s needs %zu",
                     name, t->nbytes, td_dtype_name(t->dtype), " x shape",
                     nbytes);
        return TD_E_CORRUPT;
    }
    return 0;
}

/* An unsigned decimal (base 10) or hex (16) metadata string. */
static int td__meta_u64(const json_t *meta, const char *key, int base,
                        uint64_t *out, char *err, size_t cap)
{
    const char *s = json_string_value(json_object_get(meta, key));
    char *end;
    if (!s) {
        td_set_error(err, cap, 0, "metadata \"%s\" is missing", key);
        return TD_E_CORRUPT;
    }
    errno = 0;
    *out = strtoull(s, &end, base);
    if (!*s || *end || errno || strspn(s, "0123456789abcdefABCDEF") !=
                                    strlen(s) || (base == 10 &&
                                    strspn(s, "0123456789") != strlen(s))) {
        td_set_error(err, cap, 0, "metadata \"%s\" is not a number: \"%.32s\"",
                     key, s);
        return TD_E_CORRUPT;
    }
    return 0;
}

/* The epoch's sums so far: optional (older checkpoints have none), but
 * all three or none, and well formed. */
static int td__epoch_sums(td_ckpt_file *f, char *err, size_t cap)
{
    const char *ls = json_string_value(json_object_get(f->meta,
                                                       "epoch_loss_sum"));
    uint64_t correct, samples;
    char *end;
    int r;
    if (!ls && !json_object_get(f->meta, "epoch_correct") &&
        !json_object_get(f->meta, "epoch_samples"))
        return 0;
    if (!ls) {
        td_set_error(err, cap, 0, "metadata \"epoch_loss_sum\" is missing");
        return TD_E_CORRUPT;
    }
    if ((r = td__meta_u64(f->meta, "epoch_correct", 10, &correct, err,
                          cap)) < 0 ||
        (r = td__meta_u64(f->meta, "epoch_samples", 10, &samples, err,
                          cap)) < 0)
        return r;
    errno = 0;
    double loss = strtod(ls, &end);
    if (!*ls || *end || errno || !isfinite(loss) || loss < 0 ||
        samples > INT64_MAX || correct > samples) {
        td_set_error(err, cap, 0, "metadata epoch_loss_sum/epoch_correct/"
                     "epoch_samples out of range");
        return TD_E_CORRUPT;
    }
    f->m.has_epoch_sums = 1;
    f->m.epoch_loss_sum = loss;
    f->m.epoch_correct = (int64_t)correct;
    f->m.epoch_samples = (int64_t)samples;
    return 0;
}

/* __metadata__: all strings; our keys present and well formed. */
static int td__check_crc(td_ckpt_file *f, char *err, size_t cap)
{
    uint64_t crc;
    int r = td__meta_u64(f->meta, "data_crc32", 16, &crc, err, cap);
    if (r < 0)
        return r;
    uint32_t got = td__crc(f->data, f->data_len);
    if (crc != got) {
        td_set_error(err, cap, 0,
                     "data CRC32 %08" PRIx32 " does not match the "
                     "header's %08" PRIx64,
                     got, crc);
        return TD_E_CRC;
    }
    return 0;
}

/* __metadata__: all strings; with `traind`, our keys present and well
 * formed; without, only the CRC is checked when there is one. */
static int td__parse_meta(td_ckpt_file *f, int traind, char *err, size_t cap)
{
    const char *key;
    json_t *v;
    uint64_t ver, step, epoch, pos;
    int r;
    if (!traind && !f->meta)
        return 0;
    if (!json_is_object(f->meta)) {
        td_set_error(err, cap, 0, "no __metadata__ (not a traind checkpoint)");
        return TD_E_CORRUPT;
    }
    json_object_foreach(f->meta, key, v)
    {
        if (!json_is_string(v)) {
            td_set_error(err, cap, 0, "metadata \"%.64s\" is not a string",
                         key);
            return TD_E_CORRUPT;
        }
    }
    if (!traind)
        return json_object_get(f->meta, "data_crc32") ? td__check_crc(f, err,
                                                                      cap)
                                                      : 0;
    if ((r = td__meta_u64(f->meta, "traind.format", 10, &ver, err, cap)) < 0)
        return r;
    if (ver < 1 || ver > TD_CKPT_FORMAT_VERSION) {
        td_set_error(err, cap, 0,
                     "format version %" PRIu64 " (this traind "
                     "reads 1 to %d)",
                     ver, TD_CKPT_FORMAT_VERSION);
        return TD_E_CORRUPT;
    }
    if ((r = td__meta_u64(f->meta, "spec_hash", 16, &f->m.spec_hash, err,
                          cap)) < 0 ||
        (r = td__meta_u64(f->meta, "step", 10, &step, err, cap)) < 0 ||
        (r = td__meta_u64(f->meta, "epoch", 10, &epoch, err, cap)) < 0 ||
        (r = td__meta_u64(f->meta, "sampler_pos", 10, &pos, err, cap)) < 0 ||
        (r = td__meta_u64(f->meta, "seed", 10, &f->m.seed, err, cap)) < 0)
        return r;
    if (step > INT64_MAX || epoch > INT64_MAX || pos > INT64_MAX) {
        td_set_error(err, cap, 0,
                     "metadata step/epoch/sampler_pos out of range");
        return TD_E_CORRUPT;
    }
    f->m.step = (int64_t)step;
    f->m.epoch = (int64_t)epoch;
    f->m.sampler_pos = (int64_t)pos;
    if ((r = td__epoch_sums(f, err, cap)) < 0)
        return r;
    return td__check_crc(f, err, cap);
}

/* Header -> tensors, checked for bounds, overlaps and holes. */
static int td__parse_header(td_ckpt_file *f, const json_t *h, char *err,
                            size_t cap)
{
    const char *key;
    json_t *e;
    int r;
    f->t = calloc(json_object_size(h) + 1, sizeof *f->t);
    if (!f->t)
        return -ENOMEM;
    json_object_foreach((json_t *)h, key, e) {
        if (strcmp(key, "__metadata__") == 0) {
            f->meta = json_incref(e);
            continue;
        }
        if ((r = td__parse_tensor(key, e, f->data_len, &f->t[f->n], err,
                                  cap)) < 0)
            return r;
        f->n++;
    }
    td_ckpt_tensor *sorted = malloc(((size_t)f->n + 1) * sizeof *sorted);
    if (!sorted)
        return -ENOMEM;
    memcpy(sorted, f->t, (size_t)f->n * sizeof *sorted);
    qsort(sorted, (size_t)f->n, sizeof *sorted, td__cmp_off);
    size_t at = 0;
    r = 0;
    for (int i = 0; i < f->n && r == 0; i++) {
        if (sorted[i].offset != at) {
            td_set_error(err, cap, 0,
                         "tensor \"%s\" at byte %zu: %s at byte %zu",
                         sorted[i].name, sorted[i].offset,
                         sorted[i].offset < at ? "overlaps the previous one"
                                               : "a hole in the data",
                         at);
            r = TD_E_CORRUPT;
        }
        at = sorted[i].offset + sorted[i].nbytes;
    }
    free(sorted);
    if (r == 0 && at != f->data_len) {
        td_set_error(err, cap, 0, "%zu bytes of data but tensors cover %zu",
                     f->data_len, at);
        r = TD_E_CORRUPT;
    }
    return r;
}

static int td__map(const char *path, td_ckpt_file *f, char *err, size_t cap)
{
    struct stat st;
    int r = 0, fd = td_open_regular(path); /* a FIFO: not opened */
    if (fd < 0 || fstat(fd, &st) < 0) {
        r = fd < 0 ? fd : -errno;
        td_set_error(err, cap, 0, "%s", td_strerror(r));
        goto out;
    }
    if (!S_ISREG(st.st_mode) || st.st_size < 16) {
        td_set_error(err, cap, 0, "%lld bytes: too short for a checkpoint",
                     (long long)st.st_size);
        r = TD_E_CORRUPT;
        goto out;
    }
    /* Read, not mapped: a file cut short while mapped (a user's init
     * file overwritten in place as a job starts) would raise SIGBUS in
     * whichever thread touched it, the daemon's loop included; a read
     * sees the short file and says so. */
    f->size = (size_t)st.st_size;
    if (!(f->map = malloc(f->size))) {
        r = -ENOMEM;
        td_set_error(err, cap, 0, "%zu bytes: %s", f->size, td_strerror(r));
        goto out;
    }
    size_t got;
    if ((r = td_read_all(fd, f->map, f->size, &got)) != 0) {
        td_set_error(err, cap, 0, "read: %s", td_strerror(r));
    } else if (got < f->size) {
        r = TD_E_CORRUPT;
        td_set_error(err, cap, 0, "the file shrank from %zu to %zu bytes "
                     "while it was read (overwritten in place?)", f->size,
                     got);
    }
out:
    if (fd >= 0)
        close(fd);
    return r;
}

static int td__open(const char *path, int traind, td_ckpt_file *f, char *err,
                    size_t cap)
{
    json_error_t je;
    uint64_t hlen = 0;
    int r = td__map(path, f, err, cap);
    if (r < 0)
        return r;
    for (int i = 0; i < 8; i++)
        hlen |= (uint64_t)f->map[i] << (8 * i);
    if (hlen < 2 || hlen > TD__HEADER_MAX || hlen > f->size - 8) {
        td_set_error(err, cap, 0,
                     "header length %" PRIu64 " does not fit the "
                     "file's %zu bytes (truncated?)",
                     hlen, f->size);
        return TD_E_CORRUPT;
    }
    f->data = f->map + 8 + hlen;
    f->data_len = f->size - 8 - (size_t)hlen;
    json_t *h = json_loadb((const char *)f->map + 8, (size_t)hlen,
                           JSON_REJECT_DUPLICATES, &je);
    if (!json_is_object(h)) {
        td_set_error(err, cap, 0, "header is not a JSON object: %s",
                     h ? "wrong type" : je.text);
        json_decref(h);
        return TD_E_CORRUPT;
    }
    r = td__parse_header(f, h, err, cap);
    json_decref(h);
    if (r == 0)
        r = td__parse_meta(f, traind, err, cap);
    return r;
}

static int td__open_file(const char *path, int traind, td_ckpt_file **out,
                         char *err, size_t errcap)
{
    char why[400] = "";
    *out = NULL;
    td_ckpt_file *f = calloc(1, sizeof *f);
    if (!f)
        return -ENOMEM;
    int r = td__open(path, traind, f, why, sizeof why);
    if (r < 0) {
        td_set_error(err, errcap, 0, "%s: %s", path, why);
        td_ckpt_close(f);
        return r;
    }
    *out = f;
    return 0;
}

int td_ckpt_open(const char *path, td_ckpt_file **out, char *err,
                 size_t errcap)
{
    return td__open_file(path, 1, out, err, errcap);
}

int td_st_open(const char *path, td_ckpt_file **out, char *err,
               size_t errcap)
{
    return td__open_file(path, 0, out, err, errcap);
}

void td_ckpt_close(td_ckpt_file *f)
{
    if (!f)
        return;
    free(f->map);
    json_decref(f->meta);
    free(f->t);
    free(f);
}

const td_ckpt_meta *td_ckpt_file_meta(const td_ckpt_file *f)
{
    return &f->m;
}

const char *td_ckpt_file_meta_str(const td_ckpt_file *f, const char *key)
{
    return json_string_value(json_object_get(f->meta, key));
}

int td_ckpt_file_count(const td_ckpt_file *f) { return f->n; }

const td_ckpt_tensor *td_ckpt_file_tensor(const td_ckpt_file *f, int i)
{
    return i >= 0 && i < f->n ? &f->t[i] : NULL;
}

const td_ckpt_tensor *td_ckpt_file_find(const td_ckpt_file *f,
                                        const char *name)
{
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->t[i].name, name) == 0)
            return &f->t[i];
    return NULL;
}

const void *td_ckpt_file_data(const td_ckpt_file *f, const td_ckpt_tensor *t)
{
    return f->data + t->offset;
}

int td_ckpt_file_read(const td_ckpt_file *f, const char *name,
                      enum td_st_dtype dtype, void *dst, size_t cap, char *err,
                      size_t errcap)
{
    const td_ckpt_tensor *t = td_ckpt_file_find(f, name);
    if (!t) {
        td_set_error(err, errcap, 0, "tensor \"%s\" is not in the checkpoint",
                     name);
        return -ENOENT;
    }
    if (t->dtype != dtype || t->nbytes != cap) {
        td_set_error(err, errcap, 0,
                     "tensor \"%s\" is %s, %zu bytes; expected %s, %zu bytes",
                     name, td_dtype_name(t->dtype), t->nbytes,
                     td_dtype_name(dtype), cap);
        return -EINVAL;
    }
    memcpy(dst, f->data + t->offset, cap);
    return 0;
}

int td_ckpt_load_latest(const char *dir, td_ckpt_file **out, char *path,
                        size_t pathcap, char *err, size_t errcap)
{
    int64_t *steps;
    int n, bad = 0;
    char name[64], p[4200], why[600], first[600] = "";
    *out = NULL;
    if (errcap)
        err[0] = '\0';
    int r = td__list(dir, &steps, &n);
    if (r < 0) {
        td_set_error(err, errcap, 0, "%s: %s", dir, td_strerror(r));
        return r;
    }
    for (int i = n - 1; i >= 0; i--) {
        td_ckpt_filename(steps[i], name, sizeof name);
        snprintf(p, sizeof p, "%s/%s", dir, name);
        int rc = td_ckpt_open(p, out, why, sizeof why), ok = rc == 0;
        if (rc < 0 && rc > -4096 && rc != -ENOENT && rc != -EIO) {
            /* Not a damaged file (that is TD_E_*, or EIO from the disk)
             * nor one gone since the listing: permission, memory, file
             * descriptors.  Skipping it would throw the steps after an
             * older checkpoint away, or all of them, over a condition
             * that may pass: the caller hears it instead. */
            td_set_error(err, errcap, 0, "%s", why);
            free(steps);
            return rc;
        }
        if (ok && (*out)->m.step != steps[i]) {
            /* The CRC does not cover the header: a damaged step digit
             * would resume the weights at another step. */
            td_set_error(why, sizeof why, 0, "%s: its header says step "
                         "%" PRId64 ", its name step %" PRId64
                         " (a damaged header?)", p, (*out)->m.step,
                         steps[i]);
            td_ckpt_close(*out);
            *out = NULL;
            ok = 0;
        }
        if (ok) {
            if (bad) {
                td_warn("checkpoint: using %s after %d newer unusable "
                        "one(s)", p, bad);
                td_set_error(err, errcap, 0, "%d newer checkpoint(s) "
                             "unusable: %s", bad, first);
            }
            if (path)
                snprintf(path, pathcap, "%s", p);
            free(steps);
            return 0;
        }
        td_warn("checkpoint: skipping %s", why);
        if (!bad++)
            snprintf(first, sizeof first, "%s", why);
    }
    free(steps);
    td_set_error(err, errcap, 0, "%s: no valid checkpoint (%d unusable)%s%s",
                 dir, bad, bad ? "; the newest: " : "", first);
    return -ENOENT;
}
