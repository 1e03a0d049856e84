/* idx.c - IDX reader through zlib's gz* calls, which read gzip'd and plain
 * files alike (see idx.h). */
#include "input/idx.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "base/error.h"

static int td__idx_fail(char *err, size_t cap, int rc, const char *path,
                        const char *what)
{
    if (err && cap)
        snprintf(err, cap, "%s: %s", path, what);
    return rc;
}

/* Reads exactly n bytes; 0, or -EIO / TD_E_CORRUPT for a short file. */
static int td__gz_read_all(gzFile f, void *buf, size_t n)
{
    uint8_t *p = buf;
    while (n > 0) {
        unsigned chunk = n > (1u << 30) ? (1u << 30) : (unsigned)n;
        int got = gzread(f, p, chunk);
        if (got < 0)
            return -EIO;
        if (got == 0)
            return TD_E_CORRUPT;
        p += got;
        n -= (size_t)got;
    }
    return 0;
}

/* Reads the total bytes the dims promise into out->data.  The buffer
 * grows with what the file really holds (doubling from 64 KiB), so a
 * header that claims a terabyte costs nothing unless the data is there.
 * 0, -ENOMEM, or td__gz_read_all's errors. */
static int td__read_data(gzFile f, td_idx *out, size_t total)
{
    size_t cap = 0, got = 0;
    while (got < total) {
        if (got == cap) {
            size_t ncap = cap ? cap * 2 : (size_t)64 << 10;
            ncap = ncap < total ? ncap : total;
            uint8_t *p = realloc(out->data, ncap);
            if (!p)
                return -ENOMEM;
            out->data = p;
            cap = ncap;
        }
        int rc = td__gz_read_all(f, out->data + got, cap - got);
        if (rc)
            return rc;
        got = cap;
    }
    out->bytes = total;
    return 0;
}

int td_idx_load(const char *path, td_idx *out, char *err, size_t errcap)
{
    uint8_t head[4], dimb[4];
    int rc;
    if (!path || !out)
        return -EINVAL;
    memset(out, 0, sizeof *out);
    gzFile f = gzopen(path, "rb");
    if (!f)
        return td__idx_fail(err, errcap, errno ? -errno : -ENOMEM, path,
                            errno ? strerror(errno) : "out of memory");
    gzbuffer(f, 1 << 17);
    rc = td__gz_read_all(f, head, 4);
    if (rc || head[0] != 0 || head[1] != 0) {
        rc = td__idx_fail(err, errcap, rc == -EIO ? rc : TD_E_CORRUPT, path,
                          "not an IDX file (bad magic)");
        goto out;
    }
    if (head[2] != 0x08 || head[3] < 1 || head[3] > TD_IDX_MAX_DIMS) {
        rc = td__idx_fail(err, errcap, TD_E_CORRUPT, path,
                          "unsupported IDX type (need unsigned bytes, "
                          "1-4 dimensions)");
        goto out;
    }
    out->ndims = head[3];
    size_t total = 1;
    for (int d = 0; d < out->ndims; d++) {
        rc = td__gz_read_all(f, dimb, 4);
        if (rc) {
            rc = td__idx_fail(err, errcap, TD_E_CORRUPT, path,
                              "truncated IDX header");
            goto out;
        }
        out->dims[d] = (uint32_t)dimb[0] << 24 | (uint32_t)dimb[1] << 16 |
                       (uint32_t)dimb[2] << 8 | dimb[3];
        if (out->dims[d] == 0 || total > ((size_t)1 << 40) / out->dims[d]) {
            rc = td__idx_fail(err, errcap, TD_E_CORRUPT, path,
                              "IDX dimension of 0 or implausibly large");
            goto out;
        }
        total *= out->dims[d];
    }
    rc = td__read_data(f, out, total);
    if (rc == -ENOMEM) {
        rc = td__idx_fail(err, errcap, -ENOMEM, path, "out of memory");
        goto out;
    }
    if (rc) {
        rc = td__idx_fail(err, errcap, rc, path,
                          rc == -EIO ? "read error (corrupt gzip stream?)"
                                     : "file shorter than its IDX dims say");
        goto out;
    }
    uint8_t extra;
    if (gzread(f, &extra, 1) != 0) {
        rc = td__idx_fail(err, errcap, TD_E_CORRUPT, path,
                          "trailing bytes after the IDX data");
        goto out;
    }
out:
    gzclose(f);
    if (rc)
        td_idx_free(out);
    return rc;
}

void td_idx_free(td_idx *idx)
{
    if (!idx)
        return;
    free(idx->data);
    memset(idx, 0, sizeof *idx);
}
