/* dataset.c - ImageFolder and WebDataset tar-shard sources (see dataset.h).
 *
 * A sample table (labels, and per sample either a path offset or a shard
 * number + offset + length) is built once at open.  Samples are read with
 * pread (folder) or straight from the shard's read-only map.
 */
#define _GNU_SOURCE
#include "input/dataset.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/fsio.h"
#include "base/log.h"
#include "base/mapcopy.h"
#include "base/tally.h"
#include "input/classes.h"
#include "input/tar.h"

/* ---- growable arrays -------------------------------------------------- */

static int td__grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap * 2 : 256;
    while (n < need)
        n *= 2;
    void *q = realloc(*p, n * elem);
    if (!q)
        return -ENOMEM;
    *p = q;
    *cap = n;
    return 0;
}

/* ---- the handle ------------------------------------------------------- */

struct td__shard {
    char *path;
    const uint8_t *map;
    size_t len;
};

struct td_dataset {
    enum td_dataset_kind kind;
    size_t n, cap;
    int32_t *labels;
    int classes;
    /* folder */
    char *root;
    uint32_t *path_off; /* into names */
    char *names;
    size_t names_len, names_cap;
    char **class_names;
    int nclass_names;
    size_t left_out;        /* entries not taken (td_dataset_left_out) */
    char left_first[600];   /* the first of them and why */
    /* shards */
    struct td__shard *shards;
    int nshards;
    uint32_t *shard_of;
    uint64_t *off;
    uint32_t *len;
    td_tally *tally; /* counts samples while opening, or NULL */
};

static int td__add_sample(td_dataset *ds, int32_t label)
{
    size_t old = ds->cap;
    if (td__grow((void **)&ds->labels, &ds->cap, ds->n + 1, sizeof(int32_t)))
        return -ENOMEM;
    size_t nc = ds->cap;
    if (ds->kind == TD_DATASET_FOLDER) {
        size_t c = old;
        if (td__grow((void **)&ds->path_off, &c, nc, sizeof(uint32_t)))
            return -ENOMEM;
    } else {
        size_t c1 = old, c2 = old, c3 = old;
        if (td__grow((void **)&ds->shard_of, &c1, nc, sizeof(uint32_t)) ||
            td__grow((void **)&ds->off, &c2, nc, sizeof(uint64_t)) ||
            td__grow((void **)&ds->len, &c3, nc, sizeof(uint32_t)))
            return -ENOMEM;
    }
    ds->labels[ds->n] = label;
    if (label + 1 > ds->classes)
        ds->classes = label + 1;
    ds->n++;
    if (ds->kind == TD_DATASET_SHARDS) /* a folder's count as it lists */
        td_tally_add(ds->tally, 1);
    return 0;
}

void td_dataset_close(td_dataset *ds)
{
    if (!ds)
        return;
    for (int i = 0; i < ds->nshards; i++) {
        if (ds->shards[i].map && ds->shards[i].len)
            munmap((void *)ds->shards[i].map, ds->shards[i].len);
        free(ds->shards[i].path);
    }
    for (int i = 0; i < ds->nclass_names; i++)
        free(ds->class_names[i]);
    free(ds->class_names);
    free(ds->shards);
    free(ds->labels);
    free(ds->path_off);
    free(ds->names);
    free(ds->root);
    free(ds->shard_of);
    free(ds->off);
    free(ds->len);
    free(ds);
}

enum td_dataset_kind td_dataset_kind(const td_dataset *ds) { return ds->kind; }
size_t td_dataset_count(const td_dataset *ds) { return ds->n; }
int td_dataset_classes(const td_dataset *ds) { return ds->classes; }
int32_t td_dataset_label(const td_dataset *ds, size_t i)
{
    return i < ds->n ? ds->labels[i] : -1;
}

const char *td_dataset_class_name(const td_dataset *ds, int label)
{
    if (label < 0 || label >= ds->nclass_names)
        return NULL;
    return ds->class_names[label];
}

int td_dataset_named_classes(const td_dataset *ds)
{
    return ds->nclass_names;
}

int td_dataset_set_class_names(td_dataset *ds, const char *const *names,
                               int n, char *err, size_t errcap)
{
    if (n < ds->classes)
        return td_set_error(err, errcap, TD_E_CORRUPT, "labels go up to %d but "
                       "classes.txt names %d classes", ds->classes - 1, n);
    char **copy = calloc((size_t)(n > 0 ? n : 1), sizeof *copy);
    if (!copy)
        return -ENOMEM;
    for (int i = 0; i < n; i++)
        if (!(copy[i] = strdup(names[i]))) {
            while (i-- > 0)
                free(copy[i]);
            free(copy);
            return -ENOMEM;
        }
    for (int i = 0; i < ds->nclass_names; i++)
        free(ds->class_names[i]);
    free(ds->class_names);
    ds->class_names = copy;
    ds->nclass_names = n;
    ds->classes = n;
    return 0;
}

int td_dataset_relabel(td_dataset *ds, const int32_t *map, int nmap,
                       const char *const *names, int n)
{
    for (size_t i = 0; i < ds->n; i++)
        if (ds->labels[i] < 0 || ds->labels[i] >= nmap ||
            map[ds->labels[i]] < 0 || map[ds->labels[i]] >= n)
            return -ERANGE;
    for (size_t i = 0; i < ds->n; i++)
        ds->labels[i] = map[ds->labels[i]];
    ds->classes = 0; /* the names say how many there are */
    return td_dataset_set_class_names(ds, names, n, NULL, 0);
}

void td_dataset_keep(td_dataset *ds, const uint8_t *keep)
{
    size_t k = 0;
    for (size_t i = 0; i < ds->n; i++) {
        if (!keep[i])
            continue;
        ds->labels[k] = ds->labels[i];
        if (ds->kind == TD_DATASET_FOLDER) {
            ds->path_off[k] = ds->path_off[i];
        } else {
            ds->shard_of[k] = ds->shard_of[i];
            ds->off[k] = ds->off[i];
            ds->len[k] = ds->len[i];
        }
        k++;
    }
    ds->n = k;
}

/* ---- ImageFolder ------------------------------------------------------ */

static int td__cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* An image the pipeline reads: JPEG, or PNG (png.h). */
static int td__is_jpeg_name(const char *n)
{
    const char *dot = strrchr(n, '.');
    return dot && (strcasecmp(dot, ".jpg") == 0 ||
                   strcasecmp(dot, ".jpeg") == 0 ||
                   strcasecmp(dot, ".png") == 0);
}

/* Why an entry of an ImageFolder is not taken (at_root: where class
 * folders are; else in a class folder, where images are), or NULL when it
 * is.  type: its DT_* after following links, DT_UNKNOWN for what is
 * neither a folder nor a file; err: stat's errno, 0 if it worked.  Hidden
 * entries (.DS_Store, macOS's ._x.jpg, .git) are never looked at. */
static const char *td__why_not(const char *name, int type, int err,
                               int at_root)
{
    if (err)
        return err == ENOENT ? "a broken symbolic link" : "cannot be read";
    if (at_root)
        return type == DT_DIR ? NULL : "not a class folder";
    if (type == DT_DIR)
        return "a folder (class folders are not searched further down)";
    if (!td__is_jpeg_name(name))
        return "not .jpg, .jpeg or .png";
    return type == DT_REG ? NULL : "not a regular file";
}

static int td__type(const struct stat *st)
{
    return S_ISDIR(st->st_mode) ? DT_DIR
           : S_ISREG(st->st_mode) ? DT_REG : DT_UNKNOWN;
}

static const char *td__why_not_entry(DIR *d, const struct dirent *e,
                                     int at_root)
{
    int type = e->d_type;
    if (type == DT_UNKNOWN || type == DT_LNK) {
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, 0))
            return td__why_not(e->d_name, DT_UNKNOWN, errno, at_root);
        type = td__type(&st);
    } else if (type != DT_DIR && type != DT_REG) {
        type = DT_UNKNOWN;
    }
    return td__why_not(e->d_name, type, 0, at_root);
}

const char *td_dataset_folder_why_not(const char *path, int at_root)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    if (base[0] == '.')
        return NULL;
    struct stat st;
    if (stat(path, &st))
        return td__why_not(base, DT_UNKNOWN, errno, at_root);
    return td__why_not(base, td__type(&st), 0, at_root);
}

/* Sorted names of the entries of dir that are directories (want_dir) or
 * image files.  *out is an array of malloc'd strings.  The others (not
 * hidden) are counted in ds's left_out, the first named. */
static int td__list(td_dataset *ds, const char *dir, int want_dir,
                    char ***out, int *n)
{
    DIR *d = opendir(dir);
    char **v = NULL;
    size_t cap = 0;
    int cnt = 0, rc = 0;
    if (!d)
        return -errno;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        const char *why = td__why_not_entry(d, e, want_dir);
        if (why) {
            if (ds->left_out++ == 0)
                snprintf(ds->left_first, sizeof ds->left_first, "%s/%s: %s",
                         dir, e->d_name, why);
            continue;
        }
        if (td__grow((void **)&v, &cap, (size_t)cnt + 1, sizeof *v) ||
            !(v[cnt] = strdup(e->d_name))) {
            rc = -ENOMEM;
            break;
        }
        cnt++;
        if (!want_dir) /* a sample, counted as found (sorted later) */
            td_tally_add(ds->tally, 1);
    }
    closedir(d);
    if (cnt)
        qsort(v, (size_t)cnt, sizeof *v, td__cmp_str);
    if (rc) {
        for (int i = 0; i < cnt; i++)
            free(v[i]);
        free(v);
        return rc;
    }
    *out = v;
    *n = cnt;
    return 0;
}

size_t td_dataset_left_out(const td_dataset *ds, const char **first)
{
    *first = ds->left_first;
    return ds->left_out;
}

void td_dataset_left_out_text(size_t n, const char *first, char *buf,
                              size_t cap)
{
    snprintf(buf, cap, "%zu file(s) or folder(s) left out (only .jpg, .jpeg "
             "and .png files directly in class folders are samples), the "
             "first: %s", n, first);
}

static int td__add_name(td_dataset *ds, const char *cls, const char *file)
{
    size_t need = strlen(cls) + strlen(file) + 2;
    if (ds->names_len + need > UINT32_MAX)
        return -EOVERFLOW;
    if (td__grow((void **)&ds->names, &ds->names_cap, ds->names_len + need, 1))
        return -ENOMEM;
    ds->path_off[ds->n - 1] = (uint32_t)ds->names_len;
    snprintf(ds->names + ds->names_len, need, "%s/%s", cls, file);
    ds->names_len += need;
    return 0;
}

static int td__open_folder(td_dataset *ds, const char *root, char *err,
                           size_t ecap)
{
    char path[4096];
    int rc = td__list(ds, root, 1, &ds->class_names, &ds->nclass_names);
    if (rc)
        return td_set_error(err, ecap, rc, "%s: %s", root, td_strerror(rc));
    if (ds->nclass_names == 0)
        return td_set_error(err, ecap, -ENODATA,
                            "%s: no class folders and no .tar shards", root);
    for (int c = 0; c < ds->nclass_names; c++) {
        /* a folder's name is its class's name, as a classes.txt line is:
         * one that JSON cannot carry dropped out of the checkpoint's
         * traind.classes and shifted the names after it */
        char why[64], quoted[1024];
        const char *bad = td_classes_bad_name(ds->class_names[c],
                                              strlen(ds->class_names[c]),
                                              why, sizeof why);
        if (!bad)
            continue;
        td_classes_quote(ds->class_names[c], quoted, sizeof quoted);
        return td_set_error(err, ecap, TD_E_CORRUPT,
                            "%s: class folder \"%s\" cannot name a class: "
                            "%s (class names are UTF-8 without control "
                            "characters): rename the folder", root, quoted,
                            bad);
    }
    if (!(ds->root = strdup(root)))
        return -ENOMEM;
    for (int c = 0; c < ds->nclass_names; c++) {
        char **files = NULL;
        int nf = 0;
        snprintf(path, sizeof path, "%s/%s", root, ds->class_names[c]);
        rc = td__list(ds, path, 0, &files, &nf);
        if (rc)
            return td_set_error(err, ecap, rc, "%s: %s", path, td_strerror(rc));
        if (nf == 0)
            rc = td_set_error(err, ecap, -ENODATA,
                              "%s: empty class folder (no .jpg/.jpeg/.png files)",
                              path);
        for (int i = 0; i < nf && rc == 0; i++) {
            rc = td__add_sample(ds, c);
            if (rc == 0)
                rc = td__add_name(ds, ds->class_names[c], files[i]);
        }
        for (int i = 0; i < nf; i++)
            free(files[i]);
        free(files);
        if (rc)
            return rc;
    }
    ds->classes = ds->nclass_names;
    return 0;
}

/* ---- tar shards ------------------------------------------------------- */

#define TD__IDX_MAGIC "TDIDX001"

struct td__idx_entry {
    uint64_t off;
    uint32_t len;
    int32_t label;
};

struct td__idx_head {
    char magic[8];
    uint64_t size;
    int64_t mtime_s, mtime_ns;
    uint64_t count;
};

struct td__scan {
    const uint8_t *base;
    const char *path;
    char key[TD_TAR_NAME_MAX + 1];
    int has_img, has_cls;
    uint64_t img_off;
    uint64_t img_len;
    int32_t label;
    struct td__idx_entry *ents;
    size_t n, cap;
    char *err;
    size_t ecap;
};

static int td__scan_flush(struct td__scan *s)
{
    if (!s->key[0] || (!s->has_img && !s->has_cls))
        goto reset;
    if (!s->has_img || !s->has_cls)
        return td_set_error(s->err, s->ecap, TD_E_CORRUPT,
                            "%s: sample '%s' has %s but no %s", s->path, s->key,
                            s->has_img ? "an image" : ".cls",
                            s->has_img ? ".cls (label)" : "image (.jpg, .png)");
    if (td__grow((void **)&s->ents, &s->cap, s->n + 1, sizeof *s->ents))
        return -ENOMEM;
    s->ents[s->n++] = (struct td__idx_entry){s->img_off, (uint32_t)s->img_len,
                                             s->label};
reset:
    s->has_img = s->has_cls = 0;
    return 0;
}

static int td__parse_label(const uint8_t *p, uint64_t n, int32_t *out)
{
    long v = 0;
    uint64_t i = 0;
    while (i < n && isspace(p[i]))
        i++;
    if (i == n || !isdigit(p[i]))
        return -1;
    while (i < n && isdigit(p[i]) && v < INT32_MAX)
        v = v * 10 + (p[i++] - '0');
    while (i < n && isspace(p[i]))
        i++;
    if (i != n || v >= INT32_MAX)
        return -1;
    *out = (int32_t)v;
    return 0;
}

static int td__scan_member(void *user, const char *name, uint64_t off,
                           uint64_t size)
{
    struct td__scan *s = user;
    const char *base = strrchr(name, '/');
    base = base ? base + 1 : name;
    const char *dot = strchr(base, '.');
    if (!dot)
        return 0;
    size_t klen = (size_t)(dot - name);
    if (strncmp(s->key, name, klen) != 0 || s->key[klen] != '\0') {
        int rc = td__scan_flush(s);
        if (rc)
            return rc;
        memcpy(s->key, name, klen);
        s->key[klen] = '\0';
    }
    if (strcasecmp(dot, ".jpg") == 0 || strcasecmp(dot, ".jpeg") == 0 ||
        strcasecmp(dot, ".png") == 0) {
        if (size > UINT32_MAX)
            return td_set_error(s->err, s->ecap, TD_E_CORRUPT,
                                "%s: member '%s' is larger than 4 GiB", s->path,
                                name);
        s->has_img = 1;
        s->img_off = off;
        s->img_len = size;
    } else if (strcasecmp(dot, ".cls") == 0) {
        if (td__parse_label(s->base + off, size, &s->label))
            return td_set_error(s->err, s->ecap, TD_E_CORRUPT,
                                "%s: '%s' is not a non-negative integer label",
                                s->path, name);
        s->has_cls = 1;
    }
    return 0;
}

static int td__map(const char *path, const uint8_t **map, size_t *len,
                   struct stat *st)
{
    int fd = td_open_regular(path); /* a FIFO: not opened */
    if (fd < 0)
        return fd == TD_E_NOTREG ? -EISDIR : fd;
    int rc = 0;
    if (fstat(fd, st)) {
        rc = -errno;
    } else if (!S_ISREG(st->st_mode)) {
        rc = -EISDIR;
    } else if (st->st_size == 0) {
        *map = NULL;
        *len = 0;
    } else {
        void *m = mmap(NULL, (size_t)st->st_size, PROT_READ, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED)
            rc = -errno;
        else {
            *map = m;
            *len = (size_t)st->st_size;
        }
    }
    close(fd);
    return rc;
}

static int td__idx_load(const char *shard, const struct stat *st,
                        struct td__scan *s)
{
    char path[4096];
    struct td__idx_head h;
    snprintf(path, sizeof path, "%s.tdidx", shard);
    int orc; /* a FIFO planted there: no cache */
    FILE *f = td_fopen_regular(path, "rb", &orc);
    if (!f)
        return -1;
    int rc = -1;
    if (fread(&h, sizeof h, 1, f) != 1 ||
        memcmp(h.magic, TD__IDX_MAGIC, 8) != 0 ||
        h.size != (uint64_t)st->st_size || h.mtime_s != st->st_mtim.tv_sec ||
        h.mtime_ns != st->st_mtim.tv_nsec || h.count > h.size / 1024 + 1)
        goto out;
    if (h.count && td__grow((void **)&s->ents, &s->cap, h.count,
                            sizeof *s->ents))
        goto out;
    if (h.count && fread(s->ents, sizeof *s->ents, h.count, f) != h.count)
        goto out;
    /* Each entry must be where a member's data can be: after its header,
     * on a block boundary, and (without wrapping) inside the shard; the
     * sample's name is read from the header before it. */
    for (uint64_t i = 0; i < h.count; i++) {
        const struct td__idx_entry *e = &s->ents[i];
        if (e->off < TD_TAR_BLOCK || e->off % TD_TAR_BLOCK != 0 ||
            e->off > h.size || e->len > h.size - e->off || e->label < 0 ||
            e->label == INT32_MAX) /* as td__parse_label: 1 + label fits */
            goto out;
    }
    s->n = h.count;
    rc = 0;
out:
    fclose(f);
    return rc;
}

static int td__idx_save(const char *shard, const struct stat *st,
                        const struct td__scan *s)
{
    char path[4096];
    snprintf(path, sizeof path, "%s.tdidx", shard);
    struct td__idx_head h = {TD__IDX_MAGIC, (uint64_t)st->st_size,
                             st->st_mtim.tv_sec, st->st_mtim.tv_nsec, s->n};
    /* Several processes may index the same shard at once: each writes its
     * own temporary, the last rename wins, every version is complete. */
    td_atomic_file f;
    int rc = td_atomic_open(&f, path, 0644, TD_ATOMIC_PID_TMP, NULL, NULL, 0);
    if (rc)
        return rc;
    rc = td_write_all(f.fd, &h, sizeof h, NULL);
    if (rc == 0 && s->n)
        rc = td_write_all(f.fd, s->ents, s->n * sizeof *s->ents, NULL);
    if (rc) {
        td_atomic_abort(&f);
        return rc;
    }
    return td_atomic_commit(&f, NULL, 0);
}

/* Maps one shard and fills s->ents from the cache or a header walk. */
static int td__scan_shard(const char *path, const uint8_t **map, size_t *len,
                          struct td__scan *s, int save)
{
    struct stat st;
    int rc = td__map(path, map, len, &st);
    if (rc)
        return td_set_error(s->err, s->ecap, rc, "%s: %s", path,
                            td_strerror(rc));
    s->base = *map;
    s->path = path;
    s->n = 0;
    if (td__idx_load(path, &st, s) == 0)
        return 0;
    uint64_t at = 0;
    s->key[0] = '\0';
    s->has_img = s->has_cls = 0;
    rc = td_tar_walk(*map, *len, td__scan_member, s, &at);
    if (rc == TD_E_CORRUPT && !(s->err && s->err[0]))
        return td_set_error(s->err, s->ecap, rc,
                            "%s: not a tar file, or corrupt/truncated at byte "
                            "%llu",
                            path, (unsigned long long)at);
    if (rc == 0)
        rc = td__scan_flush(s);
    if (rc)
        return rc;
    if (save && (rc = td__idx_save(path, &st, s)) != 0)
        td_debug("%s: index cache not written: %s", path, td_strerror(rc));
    return 0;
}

int td_dataset_index_shard(const char *shard_path, char *err, size_t errcap)
{
    struct td__scan s = {.err = err, .ecap = errcap};
    const uint8_t *map = NULL;
    size_t len = 0;
    struct stat st;
    if (err && errcap)
        err[0] = '\0';
    int rc = td__map(shard_path, &map, &len, &st);
    if (rc)
        return td_set_error(err, errcap, rc, "%s: %s", shard_path,
                            td_strerror(rc));
    uint64_t at = 0;
    s.base = map;
    s.path = shard_path;
    rc = td_tar_walk(map, len, td__scan_member, &s, &at);
    if (rc == 0)
        rc = td__scan_flush(&s);
    if (rc == 0)
        rc = td__idx_save(shard_path, &st, &s);
    if (rc && !(err && err[0]))
        td_set_error(err, errcap, rc, "%s: %s", shard_path, td_strerror(rc));
    if (map)
        munmap((void *)map, len);
    free(s.ents);
    return rc;
}

static int td__open_shards(const char *const *paths, int n, td_tally *t,
                           td_dataset **out, char *err, size_t errcap)
{
    struct td__scan s = {.err = err, .ecap = errcap};
    int rc = 0;
    if (err && errcap)
        err[0] = '\0';
    if (!paths || n <= 0 || !out)
        return td_set_error(err, errcap, -EINVAL, "no shard paths given");
    td_dataset *ds = calloc(1, sizeof *ds);
    if (!ds || !(ds->shards = calloc((size_t)n, sizeof *ds->shards))) {
        free(ds);
        return -ENOMEM;
    }
    ds->kind = TD_DATASET_SHARDS;
    ds->tally = t;
    for (int i = 0; i < n && rc == 0; i++) {
        struct td__shard *sh = &ds->shards[i];
        if (!(sh->path = strdup(paths[i]))) {
            rc = -ENOMEM;
            break;
        }
        ds->nshards++;
        rc = td__scan_shard(paths[i], &sh->map, &sh->len, &s, 1);
        for (size_t k = 0; rc == 0 && k < s.n; k++) {
            rc = td__add_sample(ds, s.ents[k].label);
            if (rc == 0) {
                ds->shard_of[ds->n - 1] = (uint32_t)i;
                ds->off[ds->n - 1] = s.ents[k].off;
                ds->len[ds->n - 1] = s.ents[k].len;
            }
        }
    }
    free(s.ents);
    if (rc == 0 && ds->n == 0)
        rc = td_set_error(
            err, errcap, -ENODATA,
            "%s%s: no samples (<key>.jpg + <key>.cls) in the shards", paths[0],
            n > 1 ? " ..." : "");
    if (rc) {
        td_dataset_close(ds);
        return rc;
    }
    ds->tally = NULL; /* counted while opening only */
    *out = ds;
    return 0;
}

int td_dataset_open_shards(const char *const *paths, int n, td_dataset **out,
                           char *err, size_t errcap)
{
    return td__open_shards(paths, n, NULL, out, err, errcap);
}

/* Opens the shard paths of a glob or a directory listing. */
static int td__open_glob(const char *pattern, td_tally *t, td_dataset **out,
                         char *err, size_t ecap)
{
    glob_t g;
    int grc = glob(pattern, 0, NULL, &g);
    if (grc == GLOB_NOMATCH)
        return td_set_error(err, ecap, -ENOENT, "%s: no file matches", pattern);
    if (grc)
        return td_set_error(err, ecap, -EIO, "%s: glob failed", pattern);
    int rc = td__open_shards((const char *const *)g.gl_pathv,
                             (int)g.gl_pathc, t, out, err, ecap);
    globfree(&g);
    return rc;
}

int td_dataset_open(const char *path, td_dataset **out, char *err,
                    size_t errcap)
{
    return td_dataset_open_tally(path, NULL, out, err, errcap);
}

int td_dataset_open_tally(const char *path, td_tally *t, td_dataset **out,
                          char *err, size_t errcap)
{
    struct stat st;
    if (err && errcap)
        err[0] = '\0';
    if (!path || !*path || !out)
        return td_set_error(err, errcap, -EINVAL, "no dataset path given");
    if (strpbrk(path, "*?[") && stat(path, &st) != 0)
        return td__open_glob(path, t, out, err, errcap);
    if (stat(path, &st) != 0)
        return td_set_error(err, errcap, -errno, "dataset %s: %s", path,
                            strerror(errno));
    if (S_ISREG(st.st_mode)) {
        const char *p[1] = {path};
        return td__open_shards(p, 1, t, out, err, errcap);
    }
    if (!S_ISDIR(st.st_mode))
        return td_set_error(err, errcap, -EINVAL,
                            "dataset %s: neither a directory nor a file", path);
    char pattern[4096];
    int n = snprintf(pattern, sizeof pattern, "%s/*.tar", path);
    if (n < 0 || (size_t)n >= sizeof pattern)
        return td_set_error(err, errcap, -ENAMETOOLONG, "%s: path too long",
                            path);
    glob_t g;
    int grc = glob(pattern, 0, NULL, &g);
    if (grc == 0) {
        int rc = td__open_shards((const char *const *)g.gl_pathv,
                                 (int)g.gl_pathc, t, out, err, errcap);
        globfree(&g);
        return rc;
    }
    td_dataset *ds = calloc(1, sizeof *ds);
    if (!ds)
        return -ENOMEM;
    ds->kind = TD_DATASET_FOLDER;
    ds->tally = t;
    int rc = td__open_folder(ds, path, err, errcap);
    if (rc) {
        td_dataset_close(ds);
        return rc;
    }
    ds->tally = NULL; /* counted while opening only */
    *out = ds;
    return 0;
}

/* ---- reading ---------------------------------------------------------- */

static int td__read_file(const char *path, td_buf *b)
{
    /* The scan saw a regular file, but a FIFO put in its place would
     * block open() until a writer came. */
    int fd = td_open_regular(path);
    if (fd < 0)
        return fd;
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st)) {
        rc = -errno;
        goto out;
    }
    if ((uint64_t)st.st_size > TD_DATASET_SAMPLE_MAX) {
        rc = -EFBIG;
        goto out;
    }
    if ((rc = td_buf_reserve(b, (size_t)st.st_size + 1)) != 0)
        goto out;
    size_t got;
    if ((rc = td_read_all(fd, b->p, (size_t)st.st_size, &got)) != 0)
        goto out;
    if (got < (size_t)st.st_size) {
        rc = -EIO;
        goto out;
    }
    b->len = got;
out:
    close(fd);
    return rc;
}

int td_dataset_read(const td_dataset *ds, size_t i, td_buf *scratch,
                    const uint8_t **data, size_t *len)
{
    if (i >= ds->n)
        return -ERANGE;
    if (ds->kind == TD_DATASET_SHARDS) {
        /* Copied out of the map: a shard cut short in place while it is
         * mapped faults on every read past its new end (SIGBUS), and a
         * fault in the copy is a bad sample, not a dead daemon.  The copy
         * also reads every page, as the decode's timing wants. */
        size_t n = ds->len[i];
        if (n > TD_DATASET_SAMPLE_MAX)
            return -EFBIG;
        int rc = td_buf_reserve(scratch, n ? n : 1);
        if (rc)
            return rc;
        if ((rc = td_map_copy(scratch->p, ds->shards[ds->shard_of[i]].map +
                                              ds->off[i], n)))
            return rc;
        scratch->len = n;
        *data = scratch->p;
        *len = n;
        return 0;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", ds->root, ds->names + ds->path_off[i]);
    int rc = td__read_file(path, scratch);
    if (rc)
        return rc;
    *data = scratch->p;
    *len = scratch->len;
    return 0;
}

int td_dataset_shrunk(const td_dataset *ds, size_t i)
{
    struct stat st;
    if (i >= ds->n || ds->kind != TD_DATASET_SHARDS)
        return 0;
    return stat(ds->shards[ds->shard_of[i]].path, &st) == 0 &&
           (uint64_t)st.st_size < ds->off[i] + ds->len[i];
}

const char *td_dataset_file(const td_dataset *ds, size_t i, char *buf,
                            size_t cap)
{
    if (i >= ds->n)
        snprintf(buf, cap, "#%zu (out of range)", i);
    else if (ds->kind == TD_DATASET_FOLDER)
        snprintf(buf, cap, "%s/%s", ds->root, ds->names + ds->path_off[i]);
    else
        snprintf(buf, cap, "%s", ds->shards[ds->shard_of[i]].path);
    return buf;
}

const char *td_dataset_sample_name(const td_dataset *ds, size_t i, char *buf,
                                   size_t cap)
{
    if (i >= ds->n) {
        snprintf(buf, cap, "#%zu (out of range)", i);
    } else if (ds->kind == TD_DATASET_FOLDER) {
        snprintf(buf, cap, "%s/%s", ds->root, ds->names + ds->path_off[i]);
    } else {
        /* The member's ustar name field, just before its data (copied
         * out: the shard may have been cut short, see td_dataset_read). */
        const struct td__shard *sh = &ds->shards[ds->shard_of[i]];
        char name[101] = "";
        if (td_map_copy(name, sh->map + ds->off[i] - TD_TAR_BLOCK, 100))
            snprintf(name, sizeof name, "member at byte %llu",
                     (unsigned long long)(ds->off[i] - TD_TAR_BLOCK));
        name[100] = '\0';
        snprintf(buf, cap, "%s:%s", sh->path, name);
    }
    return buf;
}
