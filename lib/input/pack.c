/* pack.c - the shard writer and the two packers (see pack.h); the
 * per-file lossless rewrites they store are jpegidx.c's. */
#define _GNU_SOURCE
#include "input/pack.h"
#include "input/png.h"

#include <errno.h>
#include <glob.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <turbojpeg.h>
#include <unistd.h>

#include "base/error.h"
#include "base/fsio.h"
#include "input/dataset.h"
#include "input/idx.h"
#include "input/tar.h"

void td_pack_options_default(td_pack_options *o)
{
    memset(o, 0, sizeof *o);
    o->quality = TD_PACK_DEFAULT_QUALITY;
    o->shard_bytes = TD_PACK_DEFAULT_SHARD_BYTES;
    o->prefix = "shard";
}

/* ---- the rotating shard writer ---------------------------------------- */

struct td__writer {
    char dir[4096];
    const char *prefix;
    uint64_t cap;
    FILE *f;              /* buffered writes into file.fd's duplicate */
    td_atomic_file file;  /* the open shard: tmp until committed */
    uint64_t bytes;       /* in the open shard */
    int count;            /* samples in the open shard */
    int shards;
    uint64_t total;
    int64_t mtime;
    char *err;
    size_t ecap;
};

static int td__writer_finish(struct td__writer *w)
{
    static const uint8_t zeros[2 * TD_TAR_BLOCK];
    if (!w->f)
        return 0;
    errno = 0;
    int ok = fwrite(zeros, sizeof zeros, 1, w->f) == 1;
    ok = fclose(w->f) == 0 && ok; /* flushes; closes the duplicate only */
    w->f = NULL;
    if (!ok) {
        int rc = errno ? -errno : -EIO;
        td_atomic_abort(&w->file);
        return td_set_error(w->err, w->ecap, rc, "%s: %s", w->file.tmp,
                            td_strerror(rc));
    }
    int rc = td_atomic_commit(&w->file, w->err, w->ecap);
    if (rc)
        return rc;
    w->total += w->bytes + sizeof zeros;
    w->shards++;
    return td_dataset_index_shard(w->file.path, w->err, w->ecap);
}

static int td__writer_member(struct td__writer *w, const char *name,
                             const void *data, size_t len)
{
    uint8_t hdr[TD_TAR_BLOCK];
    static const uint8_t pad[TD_TAR_BLOCK];
    int rc = td_tar_header(hdr, name, len, w->mtime);
    if (rc)
        return td_set_error(w->err, w->ecap, rc, "%s: %s", name,
                            td_strerror(rc));
    size_t padn = (TD_TAR_BLOCK - len % TD_TAR_BLOCK) % TD_TAR_BLOCK;
    if (fwrite(hdr, sizeof hdr, 1, w->f) != 1 ||
        (len && fwrite(data, len, 1, w->f) != 1) ||
        (padn && fwrite(pad, padn, 1, w->f) != 1))
        return td_set_error(w->err, w->ecap, errno ? -errno : -EIO, "%s: %s",
                            w->file.tmp, strerror(errno ? errno : EIO));
    w->bytes += td_tar_member_bytes(len);
    return 0;
}

static int td__writer_add(struct td__writer *w, size_t index, const void *jpg,
                          size_t len, int32_t label)
{
    char name[64], cls[16];
    int clen = snprintf(cls, sizeof cls, "%d", (int)label);
    uint64_t need = td_tar_member_bytes(len) +
                    td_tar_member_bytes((uint64_t)clen);
    int rc;
    if (w->f && w->count > 0 && w->bytes + need + 2 * TD_TAR_BLOCK > w->cap)
        if ((rc = td__writer_finish(w)) != 0)
            return rc;
    if (!w->f) {
        char final[4200];
        snprintf(final, sizeof final, "%s/%s-%06d.tar", w->dir, w->prefix,
                 w->shards);
        if ((rc = td_atomic_open(&w->file, final, 0644, 0, NULL, w->err,
                                 w->ecap)) != 0)
            return rc;
        int dupfd = dup(w->file.fd);
        w->f = dupfd < 0 ? NULL : fdopen(dupfd, "wb");
        if (!w->f) {
            rc = -errno;
            if (dupfd >= 0)
                close(dupfd);
            td_atomic_abort(&w->file);
            return td_set_error(w->err, w->ecap, rc, "%s: %s", final,
                                td_strerror(rc));
        }
        setvbuf(w->f, NULL, _IOFBF, 1 << 20);
        w->bytes = 0;
        w->count = 0;
    }
    snprintf(name, sizeof name, "%09zu.%s", index,
             td_png_is(jpg, len) ? "png" : "jpg"); /* named as it is */
    if ((rc = td__writer_member(w, name, jpg, len)) != 0)
        return rc;
    snprintf(name, sizeof name, "%09zu.cls", index);
    if ((rc = td__writer_member(w, name, cls, (size_t)clen)) != 0)
        return rc;
    w->count++;
    return 0;
}

static void td__writer_abort(struct td__writer *w)
{
    if (w->f) {
        fclose(w->f);
        td_atomic_abort(&w->file);
        w->f = NULL;
    }
}

static int td__writer_init(struct td__writer *w, const char *outdir,
                           const td_pack_options *opt, char *err, size_t ecap)
{
    memset(w, 0, sizeof *w);
    w->err = err;
    w->ecap = ecap;
    w->prefix = opt->prefix && *opt->prefix ? opt->prefix : "shard";
    w->cap = opt->shard_bytes ? opt->shard_bytes : TD_PACK_DEFAULT_SHARD_BYTES;
    w->mtime = (int64_t)time(NULL);
    if (strlen(outdir) >= sizeof w->dir - 64)
        return td_set_error(err, ecap, -ENAMETOOLONG, "%s: path too long",
                            outdir);
    snprintf(w->dir, sizeof w->dir, "%s", outdir);
    int rc = td_mkdirs(outdir, 0755);
    if (rc)
        return td_set_error(err, ecap, rc, "%s: %s", outdir, td_strerror(rc));
    char pattern[4200];
    glob_t g;
    snprintf(pattern, sizeof pattern, "%s/*.tar", outdir);
    if (glob(pattern, 0, NULL, &g) == 0) {
        globfree(&g);
        return td_set_error(err, ecap, -EEXIST,
                            "%s already holds .tar shards; remove them or "
                            "pick another output directory", outdir);
    }
    return 0;
}

static void td__progress(const td_pack_options *opt, size_t done,
                         size_t total)
{
    if (opt->progress && (done % 512 == 0 || done == total))
        opt->progress(opt->user, done, total);
}

/* ---- IDX -------------------------------------------------------------- */

static int td__idx_shape(const td_idx *im, const td_idx *lb, const char *images,
                         int *h, int *w, int *c, char *err, size_t ecap)
{
    if (lb->ndims != 1)
        return td_set_error(err, ecap, TD_E_CORRUPT,
                            "labels file has %d dimensions, expected 1",
                            lb->ndims);
    if (im->ndims == 3 || (im->ndims == 4 && im->dims[3] == 3)) {
        *h = (int)im->dims[1];
        *w = (int)im->dims[2];
        *c = im->ndims == 4 ? 3 : 1;
    } else {
        return td_set_error(err, ecap, TD_E_CORRUPT,
                            "%s: images must be n x h x w or n x h x w x 3",
                            images);
    }
    if (im->dims[0] != lb->dims[0])
        return td_set_error(err, ecap, TD_E_CORRUPT,
                            "%s has %u images but the labels file has %u "
                            "labels", images, im->dims[0], lb->dims[0]);
    if (*h > 65535 || *w > 65535)
        return td_set_error(err, ecap, TD_E_CORRUPT, "%s: images too large",
                            images);
    return 0;
}

int td_pack_idx(const char *images, const char *labels, const char *outdir,
                const td_pack_options *opt, td_pack_result *res, char *err,
                size_t errcap)
{
    td_idx im = {0}, lb = {0};
    struct td__writer w;
    tjhandle tj = NULL;
    unsigned char *jpg = NULL;
    unsigned long jcap = 0;
    int h = 0, wd = 0, c = 0, rc;
    memset(res, 0, sizeof *res);
    if (opt->quality < 0 || opt->quality > 100)
        return td_set_error(err, errcap, -EINVAL, "quality %d: must be 0 "
                            "(lossless PNG) or 1..100 (JPEG)", opt->quality);
    uint8_t *png = NULL; /* quality 0: every pixel exact (png.h) */
    size_t pcap = 0;
    if ((rc = td_idx_load(images, &im, err, errcap)) != 0 ||
        (rc = td_idx_load(labels, &lb, err, errcap)) != 0 ||
        (rc = td__idx_shape(&im, &lb, images, &h, &wd, &c, err, errcap)) != 0)
        goto out;
    if ((rc = td__writer_init(&w, outdir, opt, err, errcap)) != 0)
        goto out;
    tj = tjInitCompress();
    jcap = tjBufSize(wd, h, c == 1 ? TJSAMP_GRAY : TJSAMP_420);
    jpg = tjAlloc((int)jcap);
    if (!tj || !jpg) {
        rc = td_set_error(err, errcap, -ENOMEM,
                          "cannot start the JPEG encoder");
        goto out;
    }
    size_t n = im.dims[0], per = (size_t)h * (size_t)wd * (size_t)c;
    for (size_t i = 0; i < n; i++) {
        unsigned long jlen = jcap;
        if (opt->quality == 0) {
            size_t plen;
            if ((rc = td_png_encode(im.data + i * per, wd, h, c, &png, &pcap,
                                    &plen)) != 0) {
                td_set_error(err, errcap, rc, "image %zu: cannot encode it as "
                         "PNG", i);
                break;
            }
            if ((rc = td__writer_add(&w, i, png, plen, lb.data[i])) != 0)
                break;
        } else if (tjCompress2(tj, im.data + i * per, wd, 0, h,
                        c == 1 ? TJPF_GRAY : TJPF_RGB, &jpg, &jlen,
                        c == 1 ? TJSAMP_GRAY : TJSAMP_420, opt->quality,
                        TJFLAG_NOREALLOC) != 0) {
            rc = td_set_error(err, errcap, TD_E_CORRUPT, "image %zu: %s", i,
                              tjGetErrorStr2(tj));
            break;
        } else if ((rc = td__writer_add(&w, i, jpg, jlen, lb.data[i])) != 0) {
            break;
        }
        if ((int)lb.data[i] + 1 > res->classes)
            res->classes = lb.data[i] + 1;
        td__progress(opt, i + 1, n);
    }
    if (rc == 0)
        rc = td__writer_finish(&w);
    else
        td__writer_abort(&w);
    res->samples = rc ? 0 : n;
    if (rc)
        res->rewritten = 0;
    res->shards = w.shards;
    res->bytes = w.total;
    res->width = wd;
    res->height = h;
    res->channels = c;
out:
    if (tj)
        tjDestroy(tj);
    tjFree(jpg);
    free(png);
    td_idx_free(&im);
    td_idx_free(&lb);
    return rc;
}

/* ---- ImageFolder ------------------------------------------------------ */

/* One sample as stored: the rewrite (index or restart markers) or, when
 * there is none or the file cannot be rewritten, its bytes as they are. */
static int td__folder_sample(const td_dataset *ds, const td_pack_options *opt,
                             size_t i, td_buf *scratch, uint8_t **out,
                             size_t *len, int *rewritten)
{
    const uint8_t *data;
    size_t n;
    int rc = td_dataset_read(ds, i, scratch, &data, &n);
    if (rc)
        return rc;
    *rewritten = (opt->index > 0 &&
                  td_pack_add_index(data, n, opt->index, out, len) == 0) ||
                 (opt->index <= 0 && opt->restart > 0 &&
                  td_pack_add_restarts(data, n, opt->restart, out, len) ==
                      0);
    if (!*rewritten) {
        *out = malloc(n ? n : 1);
        if (!*out)
            return -ENOMEM;
        memcpy(*out, data, n);
        *len = n;
    }
    return 0;
}

/* Parallel rewriting: workers claim samples in order and leave them in a
 * ring of `cap` slots; the caller's thread writes them in order. */
struct td__pslot {
    uint8_t *out;
    size_t len;
    int rc, rewritten, full;
};

struct td__pfold {
    const td_dataset *ds;
    const td_pack_options *opt;
    size_t n, next, written, cap;
    struct td__pslot *ring;
    int stop;
    pthread_mutex_t mu;
    pthread_cond_t space, ready;
};

static void *td__pfold_worker(void *arg)
{
    struct td__pfold *f = arg;
    td_buf scratch = {0};
    pthread_mutex_lock(&f->mu);
    for (;;) {
        while (!f->stop && f->next < f->n && f->next >= f->written + f->cap)
            pthread_cond_wait(&f->space, &f->mu);
        if (f->stop || f->next >= f->n)
            break;
        size_t i = f->next++;
        pthread_mutex_unlock(&f->mu);
        struct td__pslot s = {0};
        s.rc = td__folder_sample(f->ds, f->opt, i, &scratch, &s.out, &s.len,
                                 &s.rewritten);
        s.full = 1;
        pthread_mutex_lock(&f->mu);
        f->ring[i % f->cap] = s;
        pthread_cond_broadcast(&f->ready);
    }
    pthread_mutex_unlock(&f->mu);
    td_buf_free(&scratch);
    return NULL;
}

static int td__pack_samples(td_dataset *ds, struct td__writer *w,
                            const td_pack_options *opt, td_pack_result *res,
                            char *err, size_t errcap)
{
    size_t n = td_dataset_count(ds);
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    int nt = opt->threads > 0 ? opt->threads : (int)online;
    nt = nt < 1 ? 1 : nt > 256 ? 256 : nt;
    if (opt->index <= 0 && opt->restart <= 0)
        nt = 1; /* copying: nothing to spread */
    struct td__pfold f = {.ds = ds, .opt = opt, .n = n, .cap = 4 * (size_t)nt};
    pthread_t th[256];
    int started = 0, rc = 0;
    f.ring = calloc(f.cap, sizeof *f.ring);
    if (!f.ring)
        return td_set_error(err, errcap, -ENOMEM, "out of memory");
    pthread_mutex_init(&f.mu, NULL);
    pthread_cond_init(&f.space, NULL);
    pthread_cond_init(&f.ready, NULL);
    for (; started < nt; started++)
        if (pthread_create(&th[started], NULL, td__pfold_worker, &f) != 0)
            break;
    if (!started)
        rc = td_set_error(err, errcap, -EAGAIN, "cannot start a pack thread");
    for (size_t i = 0; i < n && rc == 0; i++) {
        pthread_mutex_lock(&f.mu);
        while (!f.ring[i % f.cap].full)
            pthread_cond_wait(&f.ready, &f.mu);
        struct td__pslot s = f.ring[i % f.cap];
        f.ring[i % f.cap].full = 0;
        f.written = i + 1;
        pthread_cond_broadcast(&f.space);
        pthread_mutex_unlock(&f.mu);
        char name[512];
        if (s.rc) {
            rc = td_set_error(err, errcap, s.rc, "%s: %s",
                              td_dataset_sample_name(ds, i, name, sizeof name),
                              td_strerror(s.rc));
        } else {
            res->rewritten += (size_t)s.rewritten;
            rc = td__writer_add(w, i, s.out, s.len, td_dataset_label(ds, i));
        }
        free(s.out);
        td__progress(opt, i + 1, n);
    }
    pthread_mutex_lock(&f.mu);
    f.stop = 1;
    pthread_cond_broadcast(&f.space);
    pthread_mutex_unlock(&f.mu);
    for (int t = 0; t < started; t++)
        pthread_join(th[t], NULL);
    for (size_t k = 0; k < f.cap; k++) /* samples done past a failure */
        if (f.ring[k].full)
            free(f.ring[k].out);
    free(f.ring);
    pthread_mutex_destroy(&f.mu);
    pthread_cond_destroy(&f.space);
    pthread_cond_destroy(&f.ready);
    return rc;
}

int td_pack_folder(const char *root, const char *outdir,
                   const td_pack_options *opt, td_pack_result *res, char *err,
                   size_t errcap)
{
    td_dataset *ds = NULL;
    struct td__writer w;
    int rc;
    memset(res, 0, sizeof *res);
    if ((rc = td_dataset_open(root, &ds, err, errcap)) != 0)
        return rc;
    if (td_dataset_kind(ds) != TD_DATASET_FOLDER) {
        rc = td_set_error(err, errcap, -EINVAL,
                          "%s holds tar shards already, not an ImageFolder "
                          "tree", root);
        goto out;
    }
    if ((rc = td__writer_init(&w, outdir, opt, err, errcap)) != 0)
        goto out;
    size_t n = td_dataset_count(ds);
    rc = td__pack_samples(ds, &w, opt, res, err, errcap);
    if (rc == 0)
        rc = td__writer_finish(&w);
    else
        td__writer_abort(&w);
    if (rc == 0) {
        /* classes.txt: the class folder names in label order. */
        char path[4200];
        snprintf(path, sizeof path, "%s/classes.txt", outdir);
        FILE *f = fopen(path, "w");
        for (int c = 0; f && c < td_dataset_classes(ds); c++)
            fprintf(f, "%s\n", td_dataset_class_name(ds, c));
        if (!f || fclose(f) != 0)
            rc = td_set_error(err, errcap, -EIO, "%s: cannot write", path);
    }
    res->samples = rc ? 0 : n;
    if (rc)
        res->rewritten = 0;
    res->shards = w.shards;
    res->bytes = w.total;
    res->classes = td_dataset_classes(ds);
out:
    td_dataset_close(ds);
    return rc;
}
