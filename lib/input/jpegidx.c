/* jpegidx.c - writing the JPEG bitstream (see jpegidx.h): the lossless
 * rewrite (same coefficients, optimized Huffman tables, restart markers or
 * none), the per-block bit walk computed from the coefficients, the
 * restart segment info and the crop index writer.
 * Owns: nothing between calls.  Never: decodes pixels, touches files.
 */
#include "input/jpegidx.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "input/jpegerr.h"

/* ---- Restart markers (lossless transcoding) --------------------------- */

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
             memcmp(m->data, "Adobe", 5) == 0) ||
            (m->marker == TD_JPEGIDX_MARKER && m->data_length >= 4 &&
             memcmp(m->data, "TDIX", 4) == 0)) /* a stale crop index */
            continue;
        jpeg_write_marker(c, m->marker, m->data, m->data_length);
    }
}

/* Lossless rewrite: same coefficients, optimized Huffman tables, one
 * interleaved baseline scan, a restart marker every R MCUs (R from
 * max_mcus as td_pack_add_restarts says; max_mcus 0: none). */
static int td__rewrite(const uint8_t *in, size_t len, int max_mcus,
                       uint8_t **out, size_t *out_len)
{
    struct jpeg_decompress_struct d;
    struct jpeg_compress_struct c;
    td_jpeg_err ed, ec;
    unsigned long olen = 0;
    volatile int rc = TD_E_CORRUPT;
    *out = NULL;
    d.err = td_jpeg_err_init(&ed);
    c.err = td_jpeg_err_init(&ec);
    jpeg_create_decompress(&d);
    jpeg_create_compress(&c);
    /* two statements: `setjmp(a) || setjmp(b)` is not a context C allows
     * setjmp in (C11 7.13.1.1) */
    if (setjmp(ed.jb))
        goto out;
    if (setjmp(ec.jb))
        goto out;
    jpeg_mem_src(&d, in, (unsigned long)len);
    for (int k = 0; k < 16; k++)
        jpeg_save_markers(&d, JPEG_APP0 + k, 0xffff);
    jpeg_save_markers(&d, JPEG_COM, 0xffff);
    jpeg_read_header(&d, TRUE);
    /* libjpeg allocates every coefficient of the image before it reads
     * the first: a few hundred bytes claiming 50000 x 20000 pixels took
     * 2 GB (found by fuzz_pack).  Larger files are copied as they are. */
    if ((uint64_t)d.image_width * d.image_height > TD_PACK_MAX_PIXELS) {
        rc = TD_E_NOTSUP;
        goto out;
    }
    jvirt_barray_ptr *coef = jpeg_read_coefficients(&d);
    if (ed.warned)
        goto out;
    jpeg_copy_critical_parameters(&d, &c);
    int one = d.num_components == 1;
    int mcu_w = one ? DCTSIZE : d.max_h_samp_factor * DCTSIZE;
    int mpr = ((int)d.image_width + mcu_w - 1) / mcu_w;
    c.restart_interval =
        max_mcus > 0 ? (unsigned)td_pack_restart_interval(mpr, max_mcus) : 0;
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

int td_pack_add_restarts(const uint8_t *in, size_t len, int max_mcus,
                         uint8_t **out, size_t *out_len)
{
    return td__rewrite(in, len, max_mcus > 0 ? max_mcus : 1, out, out_len);
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

/* Walks the scan's MCUs in coding order and calls visit for every block
 * with its DC value and the bit lengths of its DC code (with its extra
 * bits, against the predictor the file codes it with) and AC codes.
 * Every block of an edge MCU is taken from the coefficient arrays, the
 * dummy blocks past the right/bottom image edge included: the arrays are
 * padded to whole MCUs and the decoder stored in them what the file codes
 * there (jpeg_write_coefficients writes zero AC and the DC of the block
 * coded just before, jctrans.c, but other encoders may code anything), so
 * their bit cost is the file's whatever wrote it. */
struct td__blk {
    size_t m;         /* MCU number in the scan */
    int i, ci;        /* component: in the scan, in the frame */
    int first;        /* the component's first block in this MCU */
    int dc;           /* its DC value */
    unsigned dcbits;  /* DC code + extra bits */
    unsigned long ac; /* AC codes + extra bits */
};
typedef int (*td__visit_fn)(void *user, const struct td__blk *b);

static int td__walk(struct jpeg_decompress_struct *d, jvirt_barray_ptr *coef,
                    td__visit_fn visit, void *user, char *err, size_t errcap)
{
    uint8_t dclen[MAX_COMPS_IN_SCAN][256], aclen[MAX_COMPS_IN_SCAN][256];
    int ns = d->comps_in_scan;
    for (int i = 0; i < ns; i++) {
        jpeg_component_info *cp = d->cur_comp_info[i];
        if (cp->dc_tbl_no < 0 || cp->dc_tbl_no >= NUM_HUFF_TBLS ||
            cp->ac_tbl_no < 0 || cp->ac_tbl_no >= NUM_HUFF_TBLS ||
            td__huff_lengths(d->dc_huff_tbl_ptrs[cp->dc_tbl_no], dclen[i]) ||
            td__huff_lengths(d->ac_huff_tbl_ptrs[cp->ac_tbl_no], aclen[i]))
            return td_set_error(err, errcap, TD_E_CORRUPT,
                                "component %d: Huffman table missing", i);
    }
    size_t mpr = d->MCUs_per_row, mrows = d->MCU_rows_in_scan;
    size_t total = mpr * mrows, ri = d->restart_interval;
    int pred[MAX_COMPS_IN_SCAN] = {0};
    struct td__blk b;
    for (size_t m = 0; m < total; m++) {
        size_t mrow = m / mpr, mcol = m % mpr;
        if (ri && m % ri == 0)
            memset(pred, 0, sizeof pred);
        b.m = m;
        for (int i = 0; i < ns; i++) {
            jpeg_component_info *cp = d->cur_comp_info[i];
            b.i = i;
            b.ci = cp->component_index;
            for (int y = 0; y < cp->MCU_height; y++) {
                JBLOCKROW row = (*d->mem->access_virt_barray)(
                    (j_common_ptr)d, coef[b.ci],
                    (JDIMENSION)(mrow * (size_t)cp->MCU_height + (size_t)y),
                    1, FALSE)[0];
                for (int x = 0; x < cp->MCU_width; x++) {
                    const JCOEF *blk =
                        row[mcol * (size_t)cp->MCU_width + (size_t)x];
                    int cat = td__jcat(blk[0] - pred[i]);
                    long ac = td__ac_bits(blk, aclen[i]);
                    if (cat > 15 || !dclen[i][cat] || ac <= 0)
                        return td_set_error(err, errcap, TD_E_CORRUPT,
                                            "component %d: coefficient "
                                            "without a Huffman code", b.ci);
                    b.first = y == 0 && x == 0;
                    b.dc = blk[0];
                    b.dcbits = (unsigned)dclen[i][cat] + (unsigned)cat;
                    b.ac = (unsigned long)ac;
                    pred[i] = blk[0];
                    int rc = visit(user, &b);
                    if (rc)
                        return td_set_error(err, errcap, rc,
                                            "MCU %zu: layout out of range", m);
                }
            }
        }
    }
    return 0;
}

struct td__segw {
    td_seg_info *seg;
    size_t nseg, r;
    uint64_t pos; /* bit position inside the current segment */
};

static int td__seg_visit(void *user, const struct td__blk *b)
{
    struct td__segw *w = user;
    size_t s = b->m / w->r;
    if (s >= w->nseg)
        return TD_E_CORRUPT; /* cannot happen: nseg = ceil(total / r) */
    if (b->m % w->r == 0 && b->i == 0 && b->first) {
        if (s > 0)
            w->seg[s - 1].bits = (uint32_t)w->pos;
        w->pos = 0;
    }
    td_seg_info *g = &w->seg[s];
    if (b->m % w->r == 0 && b->first) {
        g->dc_off[b->ci] = (uint32_t)w->pos;
        g->dc_first[b->ci] = (int16_t)b->dc;
        g->dc_len[b->ci] = (uint8_t)b->dcbits;
    }
    g->dc_last[b->ci] = (int16_t)b->dc;
    w->pos += b->dcbits + b->ac;
    return w->pos > UINT32_MAX ? TD_E_NOTSUP : 0;
}

/* Fills seg[0..nseg) from the restart segments of the scan. */
static int td__seg_walk(struct jpeg_decompress_struct *d,
                        jvirt_barray_ptr *coef, td_seg_info *seg, size_t nseg,
                        char *err, size_t errcap)
{
    size_t total = (size_t)d->MCUs_per_row * (size_t)d->MCU_rows_in_scan;
    struct td__segw w = {seg, nseg,
                         d->restart_interval ? d->restart_interval : total, 0};
    int rc = td__walk(d, coef, td__seg_visit, &w, err, errcap);
    if (rc == 0 && nseg)
        seg[nseg - 1].bits = (uint32_t)w.pos;
    return rc;
}

/* Reads jpg's coefficients into d (error manager ed; the caller holds the
 * setjmp): only one interleaved sequential Huffman scan of at most 4
 * components of 8-bit samples is accepted.  NULL with *rc and err set
 * otherwise; *sos_end gets where the scan's data starts. */
static jvirt_barray_ptr *td__one_scan(struct jpeg_decompress_struct *d,
                                      const td_jpeg_err *ed,
                                      const uint8_t *jpg, size_t len,
                                      size_t *sos_end, int *rc, char *err,
                                      size_t errcap)
{
    jpeg_mem_src(d, jpg, (unsigned long)len);
    jpeg_read_header(d, TRUE);
    *sos_end = (size_t)(d->src->next_input_byte - jpg);
    if (d->progressive_mode || d->arith_code || d->data_precision != 8 ||
        d->num_components > MAX_COMPS_IN_SCAN) {
        *rc = td_set_error(err, errcap, TD_E_NOTSUP,
                           "not a baseline Huffman JPEG of <= 4 components");
        return NULL;
    }
    jvirt_barray_ptr *coef = jpeg_read_coefficients(d);
    if (ed->warned) {
        *rc = td_set_error(err, errcap, TD_E_CORRUPT,
                           "damaged or truncated JPEG");
        return NULL;
    }
    if (d->input_scan_number != 1 || d->comps_in_scan != d->num_components) {
        *rc = td_set_error(err, errcap, TD_E_NOTSUP,
                           "%d scans: one interleaved scan expected",
                           d->input_scan_number);
        return NULL;
    }
    return coef;
}

int td_pack_segment_info(const uint8_t *jpeg, size_t len, td_seg_info **out,
                         size_t *nseg, char *err, size_t errcap)
{
    struct jpeg_decompress_struct d;
    td_jpeg_err ed;
    td_seg_info *volatile seg = NULL;
    volatile size_t n = 0;
    volatile int rc = TD_E_CORRUPT;
    *out = NULL;
    *nseg = 0;
    if (err && errcap)
        err[0] = '\0';
    d.err = td_jpeg_err_init(&ed);
    jpeg_create_decompress(&d);
    if (setjmp(ed.jb)) {
        char msg[JMSG_LENGTH_MAX];
        (*ed.pub.format_message)((j_common_ptr)&d, msg);
        rc = td_set_error(err, errcap, TD_E_CORRUPT, "libjpeg: %s", msg);
        goto out;
    }
    /* Only what td_pack_add_restarts writes. */
    size_t sos_end;
    int r1 = 0;
    jvirt_barray_ptr *coef =
        td__one_scan(&d, &ed, jpeg, len, &sos_end, &r1, err, errcap);
    if (!coef) {
        rc = r1;
        goto out;
    }
    size_t total = (size_t)d.MCUs_per_row * (size_t)d.MCU_rows_in_scan;
    size_t r = d.restart_interval ? d.restart_interval : total;
    n = total ? (total + r - 1) / r : 0;
    seg = calloc(n ? n : 1, sizeof *seg);
    if (!seg) {
        rc = td_set_error(err, errcap, -ENOMEM, "out of memory");
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

/* ---- Crop index (jpegidx.h) ------------------------------------------ */

struct td__ixw {
    size_t R;
    uint64_t pos;  /* bit position in the scan's (unstuffed) data */
    uint64_t *at;  /* per checkpoint: its bit position */
    int16_t *pred; /* per checkpoint: 4 predictors */
    uint32_t *off; /* per checkpoint: 4 first-block offsets */
    size_t *sb;    /* per checkpoint: its stuffed byte offset */
    int cur[MAX_COMPS_IN_SCAN];
};

static int td__ix_visit(void *user, const struct td__blk *b)
{
    struct td__ixw *w = user;
    if (b->m % w->R == 0) {
        size_t k = b->m / w->R;
        if (b->i == 0 && b->first) {
            w->at[k] = w->pos;
            for (int i = 0; i < MAX_COMPS_IN_SCAN; i++)
                w->pred[k * 4 + (size_t)i] = (int16_t)w->cur[i];
        }
        if (b->first) {
            uint64_t o = w->pos - w->at[k];
            if (o > 0xffff)
                return TD_E_NOTSUP;
            w->off[k * 4 + (size_t)b->i] = (uint32_t)o;
        }
    }
    w->cur[b->i] = b->dc;
    w->pos += b->dcbits + b->ac;
    return 0;
}

static uint8_t *td__varint(uint8_t *o, uint32_t v)
{
    while (v >= 0x80) {
        *o++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *o++ = (uint8_t)v;
    return o;
}

static uint32_t td__zz(int v)
{
    return v < 0 ? ((uint32_t)(-(v + 1)) << 1) | 1 : (uint32_t)v << 1;
}

/* The index of jpg (a rewrite without restart markers) as APP15 marker
 * segments in *idx (malloc'd, *idx_len bytes); layout in jpegidx.h. */
static int td__crop_index(const uint8_t *jpg, size_t len, int max_mcus,
                          uint8_t **idx, size_t *idx_len, char *err,
                          size_t errcap)
{
    struct jpeg_decompress_struct d;
    td_jpeg_err ed;
    struct td__ixw w = {0};
    volatile int rc = TD_E_CORRUPT;
    uint8_t *volatile o = NULL, *volatile blob = NULL;
    *idx = NULL;
    d.err = td_jpeg_err_init(&ed);
    jpeg_create_decompress(&d);
    if (setjmp(ed.jb)) {
        rc = td_set_error(err, errcap, TD_E_CORRUPT, "libjpeg failed");
        goto out;
    }
    size_t sos_end;
    int r1 = 0;
    jvirt_barray_ptr *coef =
        td__one_scan(&d, &ed, jpg, len, &sos_end, &r1, err, errcap);
    if (!coef) {
        rc = r1;
        goto out;
    }
    if (d.restart_interval != 0 || len < sos_end + 2 ||
        jpg[len - 2] != 0xff || jpg[len - 1] != 0xd9) {
        rc = td_set_error(err, errcap, TD_E_NOTSUP,
                          "restart markers or data after the scan");
        goto out;
    }
    size_t mpr = d.MCUs_per_row, rows = d.MCU_rows_in_scan;
    int nc = d.comps_in_scan;
    w.R = (size_t)td_pack_restart_interval((int)mpr, max_mcus);
    size_t spr = mpr / w.R, nent = spr * rows + 1;
    size_t rsz = (size_t)TD_JPEGIDX_ROW(nc), slen = len - 2 - sos_end;
    if (spr > 0xffff || rows > 0xffff || w.R > 0xffff || slen > UINT32_MAX) {
        rc = td_set_error(err, errcap, TD_E_NOTSUP,
                          "image too large to index");
        goto out;
    }
    w.at = calloc(nent, sizeof *w.at);
    w.pred = calloc(nent * 4, sizeof *w.pred);
    w.off = calloc(nent * 4, sizeof *w.off);
    w.sb = calloc(nent, sizeof *w.sb);
    size_t bcap = (rows + 1) * rsz + (nent - 1) * (size_t)(2 * nc + 1) * 5;
    blob = malloc(bcap);
    if (!w.at || !w.pred || !w.off || !w.sb || !blob) {
        rc = td_set_error(err, errcap, -ENOMEM, "out of memory");
        goto out;
    }
    if ((rc = td__walk(&d, coef, td__ix_visit, &w, err, errcap)) != 0)
        goto out;
    rc = TD_E_CORRUPT;
    w.at[nent - 1] = w.pos;
    for (int i = 0; i < MAX_COMPS_IN_SCAN; i++)
        w.pred[(nent - 1) * 4 + (size_t)i] = (int16_t)w.cur[i];
    /* Checkpoints -> stuffed byte offsets, checked against the file: the
     * walk must account for every byte of the scan (its last one holds the
     * final padding). */
    const uint8_t *scan = jpg + sos_end;
    size_t sp = 0, up = 0;
    for (size_t k = 0; k <= nent; k++) {
        uint64_t ub = k < nent ? w.at[k] >> 3 : (w.pos + 7) >> 3;
        while (up < ub && sp < slen) {
            if (scan[sp] == 0xff) {
                if (sp + 1 >= slen || scan[sp + 1] != 0x00)
                    break; /* a marker inside the scan */
                sp++;
            }
            sp++;
            up++;
        }
        if (up != ub || (k == nent && sp != slen)) {
            rc = td_set_error(err, errcap, TD_E_CORRUPT,
                              "scan data does not match its coefficients");
            goto out;
        }
        if (k < nent)
            w.sb[k] = sp;
    }
    /* The row table, then the checkpoints of each row. */
    uint8_t *e = blob + (rows + 1) * rsz;
    for (size_t r = 0; r <= rows; r++) {
        uint8_t *q = blob + r * rsz;
        td_jpegidx_put32(q, (uint32_t)w.sb[r * spr]);
        q[4] = (uint8_t)(w.at[r * spr] & 7);
        td_jpegidx_put32(q + 5, (uint32_t)(e - blob) -
                                    (uint32_t)((rows + 1) * rsz));
        for (int i = 0; i < nc; i++)
            td_jpegidx_put16(q + 9 + 2 * i,
                             (unsigned)(uint16_t)w.pred[r * spr * 4 +
                                                        (size_t)i]);
        for (size_t sg = 0; r < rows && sg < spr; sg++) {
            size_t k = r * spr + sg;
            uint64_t n = w.at[k + 1] - w.at[k];
            /* stuffed zero bytes between the two checkpoints' bytes */
            uint64_t z = (w.sb[k + 1] - w.sb[k]) -
                         ((w.at[k + 1] >> 3) - (w.at[k] >> 3));
            if (n > UINT32_MAX || z > UINT32_MAX) {
                rc = td_set_error(err, errcap, TD_E_NOTSUP, "MCU too large");
                goto out;
            }
            e = td__varint(e, (uint32_t)n);
            e = td__varint(e, (uint32_t)z);
            for (int i = 1; i < nc; i++)
                e = td__varint(e, w.off[k * 4 + (size_t)i] -
                                      w.off[k * 4 + (size_t)i - 1]);
            for (int i = 0; sg > 0 && i < nc; i++)
                e = td__varint(e, td__zz(w.pred[k * 4 + (size_t)i] -
                                         w.pred[(k - 1) * 4 + (size_t)i]));
        }
    }
    /* Chunks of at most TD_JPEGIDX_MAX_PAYLOAD bytes. */
    size_t blen = (size_t)(e - blob);
    size_t per = TD_JPEGIDX_MAX_PAYLOAD - TD_JPEGIDX_HEAD;
    size_t nchunks = (blen + per - 1) / per;
    if (nchunks > 255) {
        rc = td_set_error(err, errcap, TD_E_NOTSUP,
                          "image too large to index");
        goto out;
    }
    *idx_len = nchunks * (4 + TD_JPEGIDX_HEAD) + blen;
    o = malloc(*idx_len);
    if (!o) {
        rc = td_set_error(err, errcap, -ENOMEM, "out of memory");
        goto out;
    }
    uint8_t *c = o;
    for (size_t k = 0; k < nchunks; k++) {
        size_t n = blen - k * per < per ? blen - k * per : per;
        c[0] = 0xff;
        c[1] = TD_JPEGIDX_MARKER;
        td_jpegidx_put16(c + 2, (unsigned)(TD_JPEGIDX_HEAD + n + 2));
        memcpy(c + 4, "TDIX", 4);
        c[8] = TD_JPEGIDX_VERSION;
        c[9] = (uint8_t)k;
        c[10] = (uint8_t)nchunks;
        c[11] = (uint8_t)nc;
        td_jpegidx_put16(c + 12, (unsigned)w.R);
        td_jpegidx_put16(c + 14, (unsigned)spr);
        td_jpegidx_put16(c + 16, (unsigned)rows);
        td_jpegidx_put16(c + 18, 0);
        td_jpegidx_put32(c + 20, (uint32_t)slen);
        memcpy(c + 4 + TD_JPEGIDX_HEAD, blob + k * per, n);
        c += 4 + TD_JPEGIDX_HEAD + n;
    }
    rc = 0;
out:
    jpeg_destroy_decompress(&d);
    free(w.at);
    free(w.pred);
    free(w.off);
    free(w.sb);
    free(blob);
    if (rc)
        free(o);
    else
        *idx = o;
    return rc;
}

int td_pack_add_index(const uint8_t *in, size_t len, int max_mcus,
                      uint8_t **out, size_t *out_len)
{
    uint8_t *rw = NULL, *ix = NULL;
    size_t rlen = 0, ixlen = 0;
    char err[128];
    *out = NULL;
    *out_len = 0;
    int rc = td__rewrite(in, len, 0, &rw, &rlen);
    if (rc == 0)
        rc = td__crop_index(rw, rlen, max_mcus > 0 ? max_mcus : 1, &ix,
                            &ixlen, err, sizeof err);
    if (rc == 0) {
        *out = malloc(rlen + ixlen);
        if (!*out) {
            rc = -ENOMEM;
        } else { /* SOI, the index, the rest */
            memcpy(*out, rw, 2);
            memcpy(*out + 2, ix, ixlen);
            memcpy(*out + 2 + ixlen, rw + 2, rlen - 2);
            *out_len = rlen + ixlen;
        }
    }
    free(rw);
    free(ix);
    return rc;
}
