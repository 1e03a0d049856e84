/* pack.c - the shard writer and the two packers (see pack.h). */
#define _GNU_SOURCE
#include "pack.h"

#include <errno.h>
#include <glob.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <setjmp.h>
#include <time.h>
#include <turbojpeg.h>
#include <unistd.h>

#include <jpeglib.h>

#include "dataset.h"
#include "error.h"
#include "idx.h"
#include "tar.h"

void td_pack_options_default(td_pack_options *o)
{
    memset(o, 0, sizeof *o);
    o->quality = TD_PACK_DEFAULT_QUALITY;
    o->shard_bytes = TD_PACK_DEFAULT_SHARD_BYTES;
    o->prefix = "shard";
}

static int td__perr(char *err, size_t cap, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int td__perr(char *err, size_t cap, int rc, const char *fmt, ...)
{
    if (err && cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, cap, fmt, ap);
        va_end(ap);
    }
    return rc;
}

int td_mkdirs(const char *path)
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
        if (mkdir(buf, 0755) && errno != EEXIST)
            return -errno;
        *p = '/';
    }
    if (mkdir(buf, 0755) && errno != EEXIST)
        return -errno;
    struct stat st;
    if (stat(buf, &st))
        return -errno;
    return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

/* ---- the rotating shard writer ---------------------------------------- */

struct td__writer {
    char dir[4096];
    const char *prefix;
    uint64_t cap;
    FILE *f;
    char tmp[4300], final[4200];
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
    int ok = fwrite(zeros, sizeof zeros, 1, w->f) == 1;
    ok = fflush(w->f) == 0 && ok;
    ok = fsync(fileno(w->f)) == 0 && ok;
    ok = fclose(w->f) == 0 && ok;
    w->f = NULL;
    if (!ok || rename(w->tmp, w->final)) {
        int rc = errno ? -errno : -EIO;
        unlink(w->tmp);
        return td__perr(w->err, w->ecap, rc, "%s: %s", w->final,
                        td_strerror(rc));
    }
    w->total += w->bytes + sizeof zeros;
    w->shards++;
    return td_dataset_index_shard(w->final, w->err, w->ecap);
}

static int td__writer_member(struct td__writer *w, const char *name,
                             const void *data, size_t len)
{
    uint8_t hdr[TD_TAR_BLOCK];
    static const uint8_t pad[TD_TAR_BLOCK];
    int rc = td_tar_header(hdr, name, len, w->mtime);
    if (rc)
        return td__perr(w->err, w->ecap, rc, "%s: %s", name, td_strerror(rc));
    size_t padn = (TD_TAR_BLOCK - len % TD_TAR_BLOCK) % TD_TAR_BLOCK;
    if (fwrite(hdr, sizeof hdr, 1, w->f) != 1 ||
        (len && fwrite(data, len, 1, w->f) != 1) ||
        (padn && fwrite(pad, padn, 1, w->f) != 1))
        return td__perr(w->err, w->ecap, errno ? -errno : -EIO, "%s: %s",
                        w->tmp, strerror(errno ? errno : EIO));
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
        snprintf(w->final, sizeof w->final, "%s/%s-%06d.tar", w->dir,
                 w->prefix, w->shards);
        snprintf(w->tmp, sizeof w->tmp, "%s.tmp", w->final);
        w->f = fopen(w->tmp, "wb");
        if (!w->f)
            return td__perr(w->err, w->ecap, -errno, "%s: %s", w->tmp,
                            strerror(errno));
        setvbuf(w->f, NULL, _IOFBF, 1 << 20);
        w->bytes = 0;
        w->count = 0;
    }
    snprintf(name, sizeof name, "%09zu.jpg", index);
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
        unlink(w->tmp);
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
        return td__perr(err, ecap, -ENAMETOOLONG, "%s: path too long", outdir);
    snprintf(w->dir, sizeof w->dir, "%s", outdir);
    int rc = td_mkdirs(outdir);
    if (rc)
        return td__perr(err, ecap, rc, "%s: %s", outdir, td_strerror(rc));
    char pattern[4200];
    glob_t g;
    snprintf(pattern, sizeof pattern, "%s/*.tar", outdir);
    if (glob(pattern, 0, NULL, &g) == 0) {
        globfree(&g);
        return td__perr(err, ecap, -EEXIST,
                        "%s already holds .tar shards; remove them or pick "
                        "another output directory", outdir);
    }
    return 0;
}

static void td__progress(const td_pack_options *opt, size_t done,
                         size_t total)
{
    if (opt->progress && (done % 512 == 0 || done == total))
        opt->progress(opt->user, done, total);
}

/* ---- Restart markers (lossless transcoding) --------------------------- */

struct td__tjerr {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    int warned;
};

static void td__tj_exit(j_common_ptr ci)
{
    longjmp(((struct td__tjerr *)(void *)ci->err)->jb, 1);
}

static void td__tj_emit(j_common_ptr ci, int level)
{
    if (level < 0)
        ((struct td__tjerr *)(void *)ci->err)->warned = 1;
}

int td_pack_restart_interval(int mcus_per_row, int max_mcus)
{
    for (int r = max_mcus < mcus_per_row ? max_mcus : mcus_per_row; r > 1;
         r--)
        if (mcus_per_row % r == 0)
            return r;
    return 1;
}

/* Copies the APPn/COM markers libjpeg does not write itself. */
static void td__copy_markers(struct jpeg_decompress_struct *d,
                             struct jpeg_compress_struct *c)
{
    for (jpeg_saved_marker_ptr m = d->marker_list; m; m = m->next) {
        if ((m->marker == JPEG_APP0 && m->data_length >= 4 &&
             memcmp(m->data, "JFIF", 4) == 0) ||
            (m->marker == JPEG_APP0 + 14 && m->data_length >= 5 &&
             memcmp(m->data, "Adobe", 5) == 0))
            continue;
        jpeg_write_marker(c, m->marker, m->data, m->data_length);
    }
}

int td_pack_add_restarts(const uint8_t *in, size_t len, int max_mcus,
                         uint8_t **out, size_t *out_len)
{
    struct jpeg_decompress_struct d;
    struct jpeg_compress_struct c;
    struct td__tjerr ed = {0}, ec = {0};
    unsigned long olen = 0;
    volatile int rc = TD_E_CORRUPT;
    *out = NULL;
    d.err = jpeg_std_error(&ed.pub);
    c.err = jpeg_std_error(&ec.pub);
    ed.pub.error_exit = ec.pub.error_exit = td__tj_exit;
    ed.pub.emit_message = ec.pub.emit_message = td__tj_emit;
    jpeg_create_decompress(&d);
    jpeg_create_compress(&c);
    if (setjmp(ed.jb) || setjmp(ec.jb))
        goto out;
    jpeg_mem_src(&d, in, (unsigned long)len);
    for (int k = 0; k < 16; k++)
        jpeg_save_markers(&d, JPEG_APP0 + k, 0xffff);
    jpeg_save_markers(&d, JPEG_COM, 0xffff);
    jpeg_read_header(&d, TRUE);
    jvirt_barray_ptr *coef = jpeg_read_coefficients(&d);
    if (ed.warned)
        goto out;
    jpeg_copy_critical_parameters(&d, &c);
    int one = d.num_components == 1;
    int mcu_w = one ? DCTSIZE : d.max_h_samp_factor * DCTSIZE;
    int mpr = ((int)d.image_width + mcu_w - 1) / mcu_w;
    c.restart_interval = (unsigned)td_pack_restart_interval(mpr, max_mcus);
    c.optimize_coding = TRUE;
    jpeg_mem_dest(&c, out, &olen);
    jpeg_write_coefficients(&c, coef);
    td__copy_markers(&d, &c);
    jpeg_finish_compress(&c);
    jpeg_finish_decompress(&d);
    rc = ed.warned ? TD_E_CORRUPT : 0;
out:
    jpeg_destroy_compress(&c);
    jpeg_destroy_decompress(&d);
    if (rc) {
        free(*out);
        *out = NULL;
    }
    *out_len = rc ? 0 : (size_t)olen;
    return rc;
}

/* ---- Restart segment index ---------------------------------------------
 *
 * The bit layout of every restart segment, worked out from the quantized
 * coefficients and the file's Huffman code lengths instead of by decoding
 * the entropy-coded data: the rewrite above is plain baseline sequential
 * Huffman coding, so each block's bit length follows from its coefficients
 * and the code length of each symbol.
 */

/* JPEG zigzag order: zigzag index -> natural (row-major) index. */
static const uint8_t td__zigzag[DCTSIZE2] = {
    0,  1,  8,  16, 9,  2,  3,  10, 17, 24, 32, 25, 18, 11, 4,  5,
    12, 19, 26, 33, 40, 48, 41, 34, 27, 20, 13, 6,  7,  14, 21, 28,
    35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51,
    58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63,
};

/* The magnitude category of v: the number of bits of |v|. */
static int td__jcat(int v)
{
    unsigned a = (unsigned)(v < 0 ? -v : v);
    int n = 0;
    while (a) {
        n++;
        a >>= 1;
    }
    return n;
}

/* Code length per symbol of a DHT table (0: the symbol has no code). */
static int td__huff_lengths(const JHUFF_TBL *t, uint8_t len[256])
{
    memset(len, 0, 256);
    if (!t)
        return TD_E_CORRUPT;
    int k = 0;
    for (int l = 1; l <= 16; l++)
        for (int i = 0; i < t->bits[l]; i++, k++) {
            if (k >= 256)
                return TD_E_CORRUPT;
            len[t->huffval[k]] = (uint8_t)l;
        }
    return 0;
}

/* The bits of one block's AC codes (with their extra bits) as a baseline
 * encoder writes them, or -1 when the table lacks a symbol it needs. */
static long td__ac_bits(const JCOEF *b, const uint8_t len[256])
{
    long n = 0;
    int run = 0;
    for (int k = 1; k < DCTSIZE2; k++) {
        int v = b[td__zigzag[k]];
        if (v == 0) {
            run++;
            continue;
        }
        for (; run > 15; run -= 16) { /* ZRL per 16 zeros */
            if (!len[0xf0])
                return -1;
            n += len[0xf0];
        }
        int s = td__jcat(v);
        if (s > 15 || !len[run << 4 | s])
            return -1;
        n += len[run << 4 | s] + s;
        run = 0;
    }
    if (run) { /* EOB */
        if (!len[0x00])
            return -1;
        n += len[0x00];
    }
    return n;
}

/* Walks the scan's MCUs in coding order and fills seg[0..nseg).  Every
 * block of an edge MCU is taken from the coefficient arrays, the dummy
 * blocks past the right/bottom image edge included: the arrays are padded
 * to whole MCUs and the decoder stored in them what the file codes there
 * (jpeg_write_coefficients writes zero AC and the DC of the block coded
 * just before, jctrans.c, but other encoders may code anything), so their
 * bit cost is the file's whatever wrote it. */
static int td__seg_walk(struct jpeg_decompress_struct *d, jvirt_barray_ptr *coef,
                        td_seg_info *seg, size_t nseg, char *err,
                        size_t errcap)
{
    uint8_t dclen[MAX_COMPS_IN_SCAN][256], aclen[MAX_COMPS_IN_SCAN][256];
    int ns = d->comps_in_scan;
    for (int i = 0; i < ns; i++) {
        jpeg_component_info *cp = d->cur_comp_info[i];
        if (cp->dc_tbl_no < 0 || cp->dc_tbl_no >= NUM_HUFF_TBLS ||
            cp->ac_tbl_no < 0 || cp->ac_tbl_no >= NUM_HUFF_TBLS ||
            td__huff_lengths(d->dc_huff_tbl_ptrs[cp->dc_tbl_no], dclen[i]) ||
            td__huff_lengths(d->ac_huff_tbl_ptrs[cp->ac_tbl_no], aclen[i]))
            return td__perr(err, errcap, TD_E_CORRUPT,
                            "component %d: Huffman table missing", i);
    }
    size_t mpr = d->MCUs_per_row, mrows = d->MCU_rows_in_scan;
    size_t total = mpr * mrows;
    size_t r = d->restart_interval ? d->restart_interval : total;
    int pred[MAX_COMPS_IN_SCAN] = {0};
    uint64_t pos = 0; /* bit position inside the current segment */
    for (size_t m = 0; m < total; m++) {
        size_t s = m / r, mrow = m / mpr, mcol = m % mpr;
        if (s >= nseg)
            return TD_E_CORRUPT; /* cannot happen: nseg = ceil(total / r) */
        if (m % r == 0) {
            if (s > 0)
                seg[s - 1].bits = (uint32_t)pos;
            memset(pred, 0, sizeof pred);
            pos = 0;
        }
        for (int i = 0; i < ns; i++) {
            jpeg_component_info *cp = d->cur_comp_info[i];
            int ci = cp->component_index;
            for (int y = 0; y < cp->MCU_height; y++) {
                JBLOCKROW row = (*d->mem->access_virt_barray)(
                    (j_common_ptr)d, coef[ci],
                    (JDIMENSION)(mrow * (size_t)cp->MCU_height + (size_t)y),
                    1, FALSE)[0];
                for (int x = 0; x < cp->MCU_width; x++) {
                    const JCOEF *b =
                        row[mcol * (size_t)cp->MCU_width + (size_t)x];
                    int dc = b[0];
                    int cat = td__jcat(dc - pred[i]);
                    long ac = td__ac_bits(b, aclen[i]);
                    if (cat > 15 || !dclen[i][cat] || ac <= 0)
                        return td__perr(err, errcap, TD_E_CORRUPT,
                                        "component %d: coefficient without "
                                        "a Huffman code", ci);
                    if (m % r == 0 && y == 0 && x == 0) {
                        seg[s].dc_off[ci] = (uint32_t)pos;
                        seg[s].dc_first[ci] = (int16_t)dc;
                        seg[s].dc_len[ci] = (uint8_t)(dclen[i][cat] + cat);
                    }
                    seg[s].dc_last[ci] = (int16_t)dc;
                    pred[i] = dc;
                    pos += (uint64_t)dclen[i][cat] + (uint64_t)cat +
                           (uint64_t)ac;
                    if (pos > UINT32_MAX)
                        return td__perr(err, errcap, TD_E_NOTSUP,
                                        "restart segment over 4 Gbit");
                }
            }
        }
    }
    if (nseg)
        seg[nseg - 1].bits = (uint32_t)pos;
    return 0;
}

int td_pack_segment_info(const uint8_t *jpeg, size_t len, td_seg_info **out,
                         size_t *nseg, char *err, size_t errcap)
{
    struct jpeg_decompress_struct d;
    struct td__tjerr ed = {0};
    td_seg_info *volatile seg = NULL;
    volatile size_t n = 0;
    volatile int rc = TD_E_CORRUPT;
    *out = NULL;
    *nseg = 0;
    if (err && errcap)
        err[0] = '\0';
    d.err = jpeg_std_error(&ed.pub);
    ed.pub.error_exit = td__tj_exit;
    ed.pub.emit_message = td__tj_emit;
    jpeg_create_decompress(&d);
    if (setjmp(ed.jb)) {
        char msg[JMSG_LENGTH_MAX];
        (*ed.pub.format_message)((j_common_ptr)&d, msg);
        rc = td__perr(err, errcap, TD_E_CORRUPT, "libjpeg: %s", msg);
        goto out;
    }
    jpeg_mem_src(&d, jpeg, (unsigned long)len);
    jpeg_read_header(&d, TRUE);
    /* Only what td_pack_add_restarts writes: one sequential Huffman scan
     * of all (at most 4) components of 8-bit samples. */
    if (d.progressive_mode || d.arith_code || d.data_precision != 8 ||
        d.num_components > MAX_COMPS_IN_SCAN) {
        rc = td__perr(err, errcap, TD_E_NOTSUP,
                      "not a baseline Huffman JPEG of <= 4 components");
        goto out;
    }
    jvirt_barray_ptr *coef = jpeg_read_coefficients(&d);
    if (ed.warned) {
        rc = td__perr(err, errcap, TD_E_CORRUPT,
                      "damaged or truncated JPEG");
        goto out;
    }
    if (d.input_scan_number != 1 || d.comps_in_scan != d.num_components) {
        rc = td__perr(err, errcap, TD_E_NOTSUP,
                      "%d scans: one interleaved scan expected",
                      d.input_scan_number);
        goto out;
    }
    size_t total = (size_t)d.MCUs_per_row * (size_t)d.MCU_rows_in_scan;
    size_t r = d.restart_interval ? d.restart_interval : total;
    n = total ? (total + r - 1) / r : 0;
    seg = calloc(n ? n : 1, sizeof *seg);
    if (!seg) {
        rc = td__perr(err, errcap, -ENOMEM, "out of memory");
        goto out;
    }
    rc = td__seg_walk(&d, coef, seg, n, err, errcap);
out:
    jpeg_destroy_decompress(&d);
    if (rc) {
        free(seg);
        return rc;
    }
    *out = seg;
    *nseg = n;
    return 0;
}

/* ---- IDX -------------------------------------------------------------- */

static int td__idx_shape(const td_idx *im, const td_idx *lb, const char *images,
                         int *h, int *w, int *c, char *err, size_t ecap)
{
    if (lb->ndims != 1)
        return td__perr(err, ecap, TD_E_CORRUPT,
                        "labels file has %d dimensions, expected 1",
                        lb->ndims);
    if (im->ndims == 3 || (im->ndims == 4 && im->dims[3] == 3)) {
        *h = (int)im->dims[1];
        *w = (int)im->dims[2];
        *c = im->ndims == 4 ? 3 : 1;
    } else {
        return td__perr(err, ecap, TD_E_CORRUPT,
                        "%s: images must be n x h x w or n x h x w x 3",
                        images);
    }
    if (im->dims[0] != lb->dims[0])
        return td__perr(err, ecap, TD_E_CORRUPT,
                        "%s has %u images but the labels file has %u labels",
                        images, im->dims[0], lb->dims[0]);
    if (*h > 65535 || *w > 65535)
        return td__perr(err, ecap, TD_E_CORRUPT, "%s: images too large",
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
    if (opt->quality < 1 || opt->quality > 100)
        return td__perr(err, errcap, -EINVAL, "quality %d: must be 1..100",
                        opt->quality);
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
        rc = td__perr(err, errcap, -ENOMEM, "cannot start the JPEG encoder");
        goto out;
    }
    size_t n = im.dims[0], per = (size_t)h * (size_t)wd * (size_t)c;
    for (size_t i = 0; i < n; i++) {
        unsigned long jlen = jcap;
        if (tjCompress2(tj, im.data + i * per, wd, 0, h,
                        c == 1 ? TJPF_GRAY : TJPF_RGB, &jpg, &jlen,
                        c == 1 ? TJSAMP_GRAY : TJSAMP_420, opt->quality,
                        TJFLAG_NOREALLOC) != 0) {
            rc = td__perr(err, errcap, TD_E_CORRUPT, "image %zu: %s", i,
                          tjGetErrorStr2(tj));
            break;
        }
        if ((rc = td__writer_add(&w, i, jpg, jlen, lb.data[i])) != 0)
            break;
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
        res->restarted = 0;
    res->shards = w.shards;
    res->bytes = w.total;
    res->width = wd;
    res->height = h;
    res->channels = c;
out:
    if (tj)
        tjDestroy(tj);
    tjFree(jpg);
    td_idx_free(&im);
    td_idx_free(&lb);
    return rc;
}

/* ---- ImageFolder ------------------------------------------------------ */

int td_pack_folder(const char *root, const char *outdir,
                   const td_pack_options *opt, td_pack_result *res, char *err,
                   size_t errcap)
{
    td_dataset *ds = NULL;
    struct td__writer w;
    td_buf buf = {0};
    int rc;
    memset(res, 0, sizeof *res);
    if ((rc = td_dataset_open(root, &ds, err, errcap)) != 0)
        return rc;
    if (td_dataset_kind(ds) != TD_DATASET_FOLDER) {
        rc = td__perr(err, errcap, -EINVAL,
                      "%s holds tar shards already, not an ImageFolder tree",
                      root);
        goto out;
    }
    if ((rc = td__writer_init(&w, outdir, opt, err, errcap)) != 0)
        goto out;
    size_t n = td_dataset_count(ds);
    for (size_t i = 0; i < n && rc == 0; i++) {
        const uint8_t *data;
        size_t len;
        char name[512];
        rc = td_dataset_read(ds, i, &buf, &data, &len);
        if (rc) {
            td__perr(err, errcap, rc, "%s: %s",
                     td_dataset_sample_name(ds, i, name, sizeof name),
                     td_strerror(rc));
            break;
        }
        uint8_t *rst = NULL;
        size_t rlen = 0;
        if (opt->restart > 0 && td_pack_add_restarts(data, len, opt->restart,
                                                     &rst, &rlen) == 0) {
            data = rst;
            len = rlen;
            res->restarted++;
        }
        rc = td__writer_add(&w, i, data, len, td_dataset_label(ds, i));
        free(rst);
        td__progress(opt, i + 1, n);
    }
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
            rc = td__perr(err, errcap, -EIO, "%s: cannot write", path);
    }
    res->samples = rc ? 0 : n;
    if (rc)
        res->restarted = 0;
    res->shards = w.shards;
    res->bytes = w.total;
    res->classes = td_dataset_classes(ds);
out:
    td_buf_free(&buf);
    td_dataset_close(ds);
    return rc;
}
