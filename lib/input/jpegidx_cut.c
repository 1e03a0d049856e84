/* jpegidx_cut.c - reading the JPEG bitstream (see jpegidx.h): the header
 * scan, the restart grid and the crop index reader, and the cut-out JPEGs
 * of just the MCUs a crop box covers, which decode.c then decodes.
 * Every check the file or its index fails gives TD_CUT_FALLBACK: the
 * caller decodes the file whole, so a bad index never costs pixels.
 * Owns: the reader's scratch.  Never: decodes pixels, allocates once the
 * scratch has grown to the largest cut-out seen.
 */
#include "input/jpegidx.h"

#include <errno.h>
#include <stdio.h> /* jpeglib.h needs FILE and size_t first */
#include <string.h>

#include <jpeglib.h>

void td_jpegidx_forget(td_jpegidx_reader *r)
{
    if (r->ix_n) /* 4 KiB of pointers: cleared only when used */
        memset(r->ix, 0, sizeof r->ix);
    r->ix_n = 0;
}

/* Walks the header markers libjpeg has parsed (SOI to the end of SOS) for
 * what the cut-outs need: where SOF and SOS are, and the crop index. */
void td_jpegidx_scan(td_jpegidx_reader *r, const uint8_t *src, size_t len,
                     size_t sos_end)
{
    const uint8_t *p = src;
    size_t pos = 2, end = sos_end;
    r->src = src;
    r->src_len = len;
    r->sos_end = sos_end;
    r->sof_at = r->sos_at = 0;
    td_jpegidx_forget(r);
    while (pos + 4 <= end && p[pos] == 0xff) {
        uint8_t m = p[pos + 1];
        if (m == 0xff) {
            pos++;
            continue;
        }
        size_t l = (size_t)p[pos + 2] << 8 | p[pos + 3];
        if (l < 2 || pos + 2 + l > end)
            break;
        const uint8_t *q = p + pos + 4;
        if (m == 0xc0 || m == 0xc1)
            r->sof_at = pos;
        else if (m == 0xda)
            r->sos_at = pos;
        else if (m == TD_JPEGIDX_MARKER && l - 2 >= TD_JPEGIDX_HEAD &&
                 memcmp(q, "TDIX", 4) == 0 && q[4] == TD_JPEGIDX_VERSION &&
                 q[5] < q[6] && !r->ix[q[5]]) {
            r->ix[q[5]] = q;
            r->ix_len[q[5]] = l - 2;
            r->ix_n++;
        }
        pos += 2 + l;
    }
}

void td_jpegidx_free(td_jpegidx_reader *r)
{
    td_buf_free(&r->syn);
    td_buf_free(&r->marks);
    td_buf_free(&r->unst);
    td_buf_free(&r->ixb);
    td_buf_free(&r->ixrows);
}

/* ---- Restart segments: entropy-decode only the MCUs a box needs --------
 * A baseline JPEG whose restart interval R divides the MCUs of a row
 * (`trainctl pack --restart`) is a grid of independently coded segments of
 * R MCUs: Huffman state and DC predictors restart at each.  For a box we
 * copy the headers (SOF's size patched), the segments covering it with
 * their markers renumbered in order, and an EOI into a small JPEG of its
 * own, and decode that: rows above and columns beside the box are never
 * entropy-decoded.  Anything unexpected: TD_CUT_FALLBACK (decode.c then
 * decodes the file itself). */

struct td__grid {
    int mcu_w, mcu_h, R, spr; /* MCU in pixels, MCUs/segment, segments/row */
    int r0, r1, s0, s1;       /* the cut: MCU rows, segment columns */
};

/* The MCU of a single-scan image in pixels (one block for a single
 * component, else the largest sampling factors' blocks); the MCUs per row. */
static int td__mcu_size(const struct jpeg_decompress_struct *ci, int *mcu_w,
                        int *mcu_h)
{
    int one = ci->num_components == 1;
    *mcu_w = one ? DCTSIZE : ci->max_h_samp_factor * DCTSIZE;
    *mcu_h = one ? DCTSIZE : ci->max_v_samp_factor * DCTSIZE;
    return ((int)ci->image_width + *mcu_w - 1) / *mcu_w;
}

/* The restart grid of the file: 0, or TD_CUT_FALLBACK when it has none
 * a cut-out can use. */
static int td__grid_init(const struct jpeg_decompress_struct *ci,
                         struct td__grid *g)
{
    if (ci->progressive_mode || ci->arith_code || ci->restart_interval == 0 ||
        ci->data_precision != 8 ||
        (ci->num_components > 1 && ci->comps_in_scan != ci->num_components))
        return TD_CUT_FALLBACK;
    int mpr = td__mcu_size(ci, &g->mcu_w, &g->mcu_h);
    g->R = (int)ci->restart_interval;
    if (mpr % g->R)
        return TD_CUT_FALLBACK;
    g->spr = mpr / g->R;
    return 0;
}

/* Finds segments 0..need-1 of the entropy data: marks[2k] is where
 * segment k starts, marks[2k+1] where its marker begins.  0,
 * TD_CUT_FALLBACK when the markers are not where they should be, -ENOMEM. */
static int td__find_segments(td_jpegidx_reader *r, size_t need)
{
    if (td_buf_reserve(&r->marks, need * 2 * sizeof(size_t)))
        return -ENOMEM;
    size_t *m = (size_t *)(void *)r->marks.p, pos = r->sos_end, k = 0;
    const uint8_t *p = r->src;
    m[0] = pos;
    while (k < need) {
        const uint8_t *f = memchr(p + pos, 0xff, r->src_len - pos);
        if (!f || (size_t)(f - p) + 1 >= r->src_len)
            return TD_CUT_FALLBACK;
        size_t at = (size_t)(f - p);
        uint8_t b = p[at + 1];
        if (b == 0x00 || b == 0xff) { /* stuffed zero, fill byte */
            pos = at + (b == 0x00 ? 2 : 1);
            continue;
        }
        m[2 * k + 1] = at;
        int rst = b >= 0xd0 && b <= 0xd7;
        if (rst && b != 0xd0 + (k & 7))
            return TD_CUT_FALLBACK;
        if (!rst && k + 1 < need) /* EOI or another marker too early */
            return TD_CUT_FALLBACK;
        if (++k < need)
            m[2 * k] = pos = at + 2;
    }
    return 0;
}

/* Writes the cut-out JPEG of g's segments to r->syn, given the source's
 * W x H.  0, TD_CUT_FALLBACK (no SOF found), -ENOMEM. */
static int td__cut(td_jpegidx_reader *r, const struct td__grid *g, int W,
                   int H, size_t *len)
{
    const size_t *m = (const size_t *)(const void *)r->marks.p;
    size_t sof = r->sof_at, n = r->sos_end + 2;
    if (!sof)
        return TD_CUT_FALLBACK;
    for (int y = g->r0; y < g->r1; y++)
        for (int s = g->s0; s < g->s1; s++) {
            size_t k = (size_t)y * (size_t)g->spr + (size_t)s;
            n += m[2 * k + 1] - m[2 * k] + 2;
        }
    if (td_buf_reserve(&r->syn, n))
        return -ENOMEM;
    uint8_t *o = r->syn.p;
    memcpy(o, r->src, r->sos_end);
    int segw = g->R * g->mcu_w;
    int cw = (g->s1 * segw < W ? g->s1 * segw : W) - g->s0 * segw;
    int ch = (g->r1 * g->mcu_h < H ? g->r1 * g->mcu_h : H) - g->r0 * g->mcu_h;
    o[sof + 5] = (uint8_t)(ch >> 8);
    o[sof + 6] = (uint8_t)ch;
    o[sof + 7] = (uint8_t)(cw >> 8);
    o[sof + 8] = (uint8_t)cw;
    size_t at = r->sos_end;
    unsigned count = 0;
    for (int y = g->r0; y < g->r1; y++)
        for (int s = g->s0; s < g->s1; s++) {
            size_t k = (size_t)y * (size_t)g->spr + (size_t)s;
            size_t sl = m[2 * k + 1] - m[2 * k];
            if (count++)
                o[at++] = 0xff, o[at++] = (uint8_t)(0xd0 + ((count - 2) & 7));
            memcpy(o + at, r->src + m[2 * k], sl);
            at += sl;
        }
    o[at++] = 0xff;
    o[at++] = 0xd9;
    *len = at;
    return 0;
}

/* The MCU rows span[0]..span[1]-1 (mcu_h pixels each) and columns
 * span[2]..span[3]-1 (segw pixels each) that cover `need`; TD_CUT_FALLBACK
 * when it is empty or starts outside the image (decode.c never asks for
 * that). */
static int td__span(const struct jpeg_decompress_struct *ci,
                    const td_pixbox *need, int mcu_h, int segw, int span[4])
{
    int W = (int)ci->image_width, H = (int)ci->image_height;
    if (need->x0 < 0 || need->y0 < 0 || need->x0 >= W || need->y0 >= H ||
        need->x1 <= need->x0 || need->y1 <= need->y0 || need->x1 > W ||
        need->y1 > H)
        return TD_CUT_FALLBACK;
    span[0] = need->y0 / mcu_h;
    span[1] = (need->y1 + mcu_h - 1) / mcu_h;
    span[2] = need->x0 / segw;
    span[3] = (need->x1 + segw - 1) / segw;
    return 0;
}

int td_jpegidx_cut_restart(td_jpegidx_reader *r,
                           const struct jpeg_decompress_struct *ci,
                           const td_pixbox *need, td_jpegidx_cut *out)
{
    struct td__grid g;
    int span[4];
    if (td__grid_init(ci, &g))
        return TD_CUT_FALLBACK;
    int W = (int)ci->image_width, H = (int)ci->image_height;
    int segw = g.R * g.mcu_w;
    if (td__span(ci, need, g.mcu_h, segw, span))
        return TD_CUT_FALLBACK;
    g.r0 = span[0];
    g.r1 = span[1];
    g.s0 = span[2];
    g.s1 = span[3];
    if (g.r0 == 0 && g.s0 == 0 && g.s1 == g.spr)
        return TD_CUT_FALLBACK; /* whole rows from the top: nothing to skip */
    size_t len;
    int rc = td__find_segments(r, (size_t)(g.r1 - 1) * (size_t)g.spr +
                                      (size_t)g.s1);
    if (rc == 0)
        rc = td__cut(r, &g, W, H, &len);
    if (rc)
        return rc;
    out->jpeg = r->syn.p;
    out->len = len;
    out->x0 = g.s0 * segw;
    out->y0 = g.r0 * g.mcu_h;
    return 0;
}

/* ---- Crop index: start anywhere on the fast Huffman path ---------------
 * A JPEG that carries a crop index (jpegidx.h, `trainctl pack`) has no
 * restart markers, so libjpeg-turbo decodes it on its fast Huffman path,
 * which restart markers turn off.  For a box we build a cut-out JPEG of
 * the MCUs it covers: per MCU row, the bits between two checkpoints,
 * copied with a 56-bit shift (the rows' bits do not start on byte
 * boundaries) and with each component's first DC difference re-coded
 * against the predictor the previous row of the cut-out leaves.  The new
 * difference may need a DC category the file's (optimized) table has no
 * code for; such categories get codes appended after the table's longest
 * ones (existing codes keep their bits), in a DHT of the cut-out's own. */

/* jdhuff.c: decode_mcu uses the fast path only while bytes_in_buffer >=
 * BUFSIZE (DCTSIZE2 * 8) * blocks_in_MCU (at most D_MAX_BLOCKS_IN_MCU). */
#define TD__FAST_TAIL (DCTSIZE2 * 8 * D_MAX_BLOCKS_IN_MCU)
/* MCU rows of a cut-out whose layout fits on the stack. */
#define TD__IX_ROWS 64

static inline uint64_t td__be64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return __builtin_bswap64(v);
}

/* One DC Huffman table: canonical decoding and encoding, extended. */
struct td__dct {
    int32_t maxcode[17], valoff[17];
    uint8_t bits[17], val[32];
    int nval, extended;
    uint16_t ecode[16];
    uint8_t esize[16];
};

static int td__dct_build(const JHUFF_TBL *t, struct td__dct *o)
{
    int32_t code = 0;
    int k = 0, lmax = 0;
    memset(o, 0, sizeof *o);
    if (!t)
        return TD_CUT_FALLBACK;
    /* (a table without codes gets lmax 0 and is refused below) */
    for (int l = 1; l <= 16; l++) {
        o->bits[l] = t->bits[l];
        o->valoff[l] = k - code;
        o->maxcode[l] = t->bits[l] ? code + t->bits[l] - 1 : -1;
        for (int i = 0; i < t->bits[l]; i++, k++, code++) {
            if (k >= 16 || t->huffval[k] > 15)
                return TD_CUT_FALLBACK; /* not a DC table */
            o->val[k] = t->huffval[k];
            o->ecode[t->huffval[k]] = (uint16_t)code;
            o->esize[t->huffval[k]] = (uint8_t)l;
        }
        if (code >= (1 << l)) /* all ones: libjpeg refuses it too */
            return TD_CUT_FALLBACK;
        if (t->bits[l])
            lmax = l;
        if (l < 16)
            code <<= 1;
    }
    o->nval = k;
    if (!lmax)
        return TD_CUT_FALLBACK;
    /* code: the next free code of length 16; back to length lmax. */
    uint32_t next = (uint32_t)code >> (16 - lmax);
    int l = lmax;
    for (int cat = 0; cat <= 11; cat++) {
        if (o->esize[cat])
            continue;
        next <<= 1; /* one length longer: never all ones */
        if (++l > 16 || next >= (1u << l) - 1)
            break;
        o->ecode[cat] = (uint16_t)next;
        o->esize[cat] = (uint8_t)l;
        o->bits[l]++;
        o->val[o->nval++] = (uint8_t)cat;
        o->extended = 1;
        next++;
    }
    return 0;
}

/* Decodes the DC difference coded at bit p of u (8 readable bytes past
 * it): 0 and its value and length, or TD_CUT_FALLBACK (no such code). */
static int td__dc_decode(const struct td__dct *t, const uint8_t *u,
                         uint64_t p, int *diff, int *len)
{
    uint64_t v = td__be64(u + (p >> 3)) << (p & 7);
    for (int l = 1; l <= 16; l++) {
        int32_t code = (int32_t)(v >> (64 - l));
        if (code > t->maxcode[l])
            continue;
        int cat = t->val[code + t->valoff[l]];
        if (cat > 11)
            return TD_CUT_FALLBACK;
        int e = cat ? (int)((v << l) >> (64 - cat)) : 0;
        *diff = cat && e < (1 << (cat - 1)) ? e - (1 << cat) + 1 : e;
        *len = l + cat;
        return 0;
    }
    return TD_CUT_FALLBACK;
}

/* Bit writer with byte stuffing; at most 7 bits pending between calls. */
struct td__bw {
    uint8_t *o;
    uint64_t acc;
    int n;
};

static inline void td__bw_byte(struct td__bw *w, unsigned b)
{
    *w->o++ = (uint8_t)b;
    if (b == 0xff)
        *w->o++ = 0;
}

static inline void td__bw_put(struct td__bw *w, uint32_t v, int len)
{
    w->acc = (w->acc << len) | (v & ((UINT64_C(1) << len) - 1));
    w->n += len;
    while (w->n >= 8) {
        w->n -= 8;
        td__bw_byte(w, (unsigned)(w->acc >> w->n) & 0xff);
    }
}

/* Appends bits [f, f + n) of u (8 readable bytes past them). */
static void td__bw_copy(struct td__bw *w, const uint8_t *u, uint64_t f,
                        uint64_t n)
{
    const uint64_t m56 = (UINT64_C(1) << 56) - 1;
    const uint64_t ones = UINT64_C(0x0101010101010101);
    const uint64_t highs = UINT64_C(0x8080808080808080);
    while (n >= 56) {
        uint64_t v = (td__be64(u + (f >> 3)) << (f & 7)) >> 8;
        uint64_t t = (w->acc << 56) | v;
        uint64_t out = (t >> w->n) & m56;
        /* A 0xff byte among the 7 needs a stuffed zero after it. */
        uint64_t x = (~out & m56) | ~m56;
        if (((x - ones) & ~x & highs) == 0) {
            uint64_t be = __builtin_bswap64(out << 8);
            memcpy(w->o, &be, 8);
            w->o += 7;
        } else {
            for (int i = 48; i >= 0; i -= 8)
                td__bw_byte(w, (unsigned)(out >> i) & 0xff);
        }
        w->acc = t;
        f += 56;
        n -= 56;
    }
    while (n > 0) {
        int k = n > 24 ? 24 : (int)n;
        uint64_t v = td__be64(u + (f >> 3)) << (f & 7);
        td__bw_put(w, (uint32_t)(v >> (64 - k)), k);
        f += (uint64_t)k;
        n -= (uint64_t)k;
    }
}

/* Unstuffs up to n bytes of s from a into u (fewer at the end of s); the
 * count, or (size_t)-1 on a marker. */
static size_t td__unstuff(const uint8_t *s, size_t a, size_t n, size_t slen,
                          uint8_t *u)
{
    size_t k = 0;
    while (k < n && a < slen) {
        size_t want = n - k < slen - a ? n - k : slen - a;
        const uint8_t *f = memchr(s + a, 0xff, want);
        size_t q = f ? (size_t)(f - s) : a + want;
        memcpy(u + k, s + a, q - a);
        k += q - a;
        if (!f)
            break;
        if (q + 1 >= slen || s[q + 1] != 0x00)
            return (size_t)-1;
        u[k++] = 0xff;
        a = q + 2;
    }
    return k;
}

struct td__ix {
    int nc, R, spr, rows;
    size_t rsz, slen, nstream;
    const uint8_t *table, *stream, *scan;
};

/* A varint of p[*at..end); TD_CUT_FALLBACK if it runs past end or over
 * 32 bits. */
static inline int td__ix_varint(const uint8_t *p, size_t *at, size_t end,
                                uint32_t *v)
{
    if (*at < end && p[*at] < 0x80) { /* most are one byte */
        *v = p[(*at)++];
        return 0;
    }
    uint32_t x = 0;
    for (int sh = 0; sh < 35; sh += 7) {
        if (*at >= end)
            return TD_CUT_FALLBACK;
        uint8_t b = p[(*at)++];
        x |= (uint32_t)(b & 0x7f) << sh;
        if (!(b & 0x80)) {
            *v = x;
            return 0;
        }
    }
    return TD_CUT_FALLBACK;
}

/* Validates the index against the file and puts its pieces together
 * (r->ixb when there are several); TD_CUT_FALLBACK if there is none or it
 * does not describe the file. */
static int td__ix_init(td_jpegidx_reader *r,
                       const struct jpeg_decompress_struct *ci,
                       struct td__ix *x, int *mcu_w, int *mcu_h)
{
    const uint8_t *h = r->ix[0];
    if (!r->ix_n || !h || r->ix_n != h[6] || !r->sof_at || !r->sos_at ||
        ci->progressive_mode || ci->arith_code || ci->restart_interval ||
        ci->data_precision != 8 || ci->comps_in_scan != ci->num_components ||
        ci->comps_in_scan != h[7] || ci->comps_in_scan > 4)
        return TD_CUT_FALLBACK;
    x->nc = h[7];
    x->R = (int)td_jpegidx_u16(h + 8);
    x->spr = (int)td_jpegidx_u16(h + 10);
    x->rows = (int)td_jpegidx_u16(h + 12);
    x->slen = td_jpegidx_u32(h + 16);
    x->rsz = (size_t)TD_JPEGIDX_ROW(x->nc);
    x->scan = r->src + r->sos_end;
    int mpr = td__mcu_size(ci, mcu_w, mcu_h);
    int mrows = ((int)ci->image_height + *mcu_h - 1) / *mcu_h;
    if (x->R < 1 || (int64_t)x->R * x->spr != mpr || x->rows != mrows ||
        r->src_len < r->sos_end + 2 ||
        x->slen != r->src_len - 2 - r->sos_end ||
        r->src[r->src_len - 2] != 0xff || r->src[r->src_len - 1] != 0xd9)
        return TD_CUT_FALLBACK;
    size_t total = 0;
    for (int c = 0; c < r->ix_n; c++) {
        if (!r->ix[c] || memcmp(r->ix[c] + 6, h + 6, 14) != 0)
            return TD_CUT_FALLBACK;
        total += r->ix_len[c] - TD_JPEGIDX_HEAD;
    }
    const uint8_t *blob = h + TD_JPEGIDX_HEAD;
    if (r->ix_n > 1) { /* pieces in chunk order, one after the other */
        if (td_buf_reserve(&r->ixb, total))
            return TD_CUT_FALLBACK;
        for (int c = 0, at = 0; c < r->ix_n; c++) {
            size_t n = r->ix_len[c] - TD_JPEGIDX_HEAD;
            memcpy(r->ixb.p + at, r->ix[c] + TD_JPEGIDX_HEAD, n);
            at += (int)n;
        }
        blob = r->ixb.p;
    }
    size_t tlen = ((size_t)x->rows + 1) * x->rsz;
    if (total < tlen)
        return TD_CUT_FALLBACK;
    x->table = blob;
    x->stream = blob + tlen;
    x->nstream = total - tlen;
    return 0;
}

/* Where row r's bits from checkpoint s0 to s1 are: the stuffed offset of
 * the byte holding the first and that bit's position in it, the bit
 * count, the first blocks' offsets (off[c], from the first bit), and the
 * DC predictors at both ends.  TD_CUT_FALLBACK if the index says something
 * impossible. */
struct td__ixrow {
    size_t byte;
    unsigned bit;
    uint64_t nbits;
    uint32_t off[4];
    int pred0[4], pred1[4];
};

static int td__ix_row(const struct td__ix *x, int r, int s0, int s1,
                      struct td__ixrow *o)
{
    const uint8_t *rec = x->table + (size_t)r * x->rsz;
    const uint8_t *nxt = rec + x->rsz;
    size_t at = td_jpegidx_u32(rec + 5), end = td_jpegidx_u32(nxt + 5);
    if (at > end || end > x->nstream || rec[4] > 7)
        return TD_CUT_FALLBACK;
    int pred[4];
    for (int c = 0; c < x->nc; c++)
        pred[c] = (int16_t)td_jpegidx_u16(rec + 9 + 2 * c);
    uint64_t pos = 0, start = 0, zs = 0, zstart = 0;
    for (int s = 0; s <= s1 && s < x->spr; s++) {
        uint32_t len, z, off[4] = {0}, dp;
        if (td__ix_varint(x->stream, &at, end, &len) ||
            td__ix_varint(x->stream, &at, end, &z))
            return TD_CUT_FALLBACK;
        for (int c = 1; c < x->nc; c++) {
            if (td__ix_varint(x->stream, &at, end, &dp))
                return TD_CUT_FALLBACK;
            off[c] = off[c - 1] + dp;
        }
        for (int c = 0; s > 0 && c < x->nc; c++) {
            if (td__ix_varint(x->stream, &at, end, &dp))
                return TD_CUT_FALLBACK;
            /* int16 arithmetic, as the writer's predictors (no overflow) */
            pred[c] = (int16_t)(uint16_t)((uint32_t)pred[c] +
                                          ((dp >> 1) ^ -(dp & 1)));
        }
        if (s == s0) {
            start = pos;
            zstart = zs;
            memcpy(o->off, off, sizeof off);
            memcpy(o->pred0, pred, sizeof pred);
        }
        if (s == s1)
            break;
        pos += len;
        zs += z;
    }
    if (s1 == x->spr) /* the next row's first checkpoint */
        for (int c = 0; c < x->nc; c++)
            pred[c] = (int16_t)td_jpegidx_u16(nxt + 9 + 2 * c);
    memcpy(o->pred1, pred, sizeof pred);
    uint64_t first = rec[4] + start;
    uint64_t byte = td_jpegidx_u32(rec) + (first >> 3) + zstart;
    o->byte = (size_t)byte;
    o->bit = (unsigned)(first & 7);
    o->nbits = pos - start;
    /* the bits must lie in the scan (unstuffed bytes <= stuffed ones):
     * this bounds what td_jpegidx_cut_index allocates for them */
    if (byte >= x->slen || (o->bit + o->nbits + 7) / 8 > x->slen - byte)
        return TD_CUT_FALLBACK;
    return 0;
}

/* Writes the cut-out's headers: the source's without the index, SOF's
 * size patched, extended DC tables, SOS.  Returns the end. */
static uint8_t *td__ix_headers(const td_jpegidx_reader *r, uint8_t *o,
                               int cw, int ch, const struct td__dct *dct,
                               const int *used)
{
    const uint8_t *p = r->src;
    size_t pos = 2;
    o[0] = 0xff;
    o[1] = 0xd8;
    o += 2;
    while (pos < r->sos_at) {
        size_t l = (size_t)p[pos + 2] << 8 | p[pos + 3];
        if (p[pos + 1] == 0xff) {
            pos++;
            continue;
        }
        if (p[pos + 1] != TD_JPEGIDX_MARKER) {
            memcpy(o, p + pos, l + 2);
            if (pos == r->sof_at) {
                o[5] = (uint8_t)(ch >> 8);
                o[6] = (uint8_t)ch;
                o[7] = (uint8_t)(cw >> 8);
                o[8] = (uint8_t)cw;
            }
            o += l + 2;
        }
        pos += l + 2;
    }
    size_t dl = 2;
    for (int t = 0; t < NUM_HUFF_TBLS; t++)
        if (used[t] && dct[t].extended)
            dl += 17 + (size_t)dct[t].nval;
    if (dl > 2) {
        *o++ = 0xff;
        *o++ = 0xc4;
        *o++ = (uint8_t)(dl >> 8);
        *o++ = (uint8_t)dl;
        for (int t = 0; t < NUM_HUFF_TBLS; t++) {
            if (!used[t] || !dct[t].extended)
                continue;
            *o++ = (uint8_t)t; /* class 0 (DC), table t */
            memcpy(o, dct[t].bits + 1, 16);
            o += 16;
            memcpy(o, dct[t].val, (size_t)dct[t].nval);
            o += dct[t].nval;
        }
    }
    memcpy(o, p + r->sos_at, r->sos_end - r->sos_at);
    return o + (r->sos_end - r->sos_at);
}

int td_jpegidx_cut_index(td_jpegidx_reader *r,
                         const struct jpeg_decompress_struct *ci,
                         const td_pixbox *need, td_jpegidx_cut *out)
{
    struct td__ix ix;
    int mcu_w, mcu_h;
    if (td__ix_init(r, ci, &ix, &mcu_w, &mcu_h))
        return TD_CUT_FALLBACK;
    int W = (int)ci->image_width, H = (int)ci->image_height;
    int segw = ix.R * mcu_w, span[4];
    if (td__span(ci, need, mcu_h, segw, span))
        return TD_CUT_FALLBACK;
    int r0 = span[0], r1 = span[1], s0 = span[2], s1 = span[3];
    if (r0 == 0 && s0 == 0 && s1 == ix.spr)
        return TD_CUT_FALLBACK; /* whole rows from the top: nothing to skip */
    struct td__dct dct[NUM_HUFF_TBLS];
    int used[NUM_HUFF_TBLS] = {0}, tbl[4];
    for (int i = 0; i < ix.nc; i++) {
        int t = ci->cur_comp_info[i]->dc_tbl_no;
        if (t < 0 || t >= NUM_HUFF_TBLS)
            return TD_CUT_FALLBACK;
        if (!used[t] && td__dct_build(ci->dc_huff_tbl_ptrs[t], &dct[t]))
            return TD_CUT_FALLBACK;
        used[t] = 1;
        tbl[i] = t;
    }
    /* Room: the headers, twice each row's bytes (restuffing), slack. */
    size_t room = r->sos_end + 4 + NUM_HUFF_TBLS * (4 + 17 + 32) + 16 +
                  TD__FAST_TAIL;
    size_t umax = 0, tot = 0;
    if (r1 - r0 > TD__IX_ROWS && td_buf_reserve(&r->ixrows,
            (size_t)(r1 - r0) * sizeof(struct td__ixrow)))
        return -ENOMEM;
    struct td__ixrow rowbuf[TD__IX_ROWS];
    struct td__ixrow *rows = r1 - r0 > TD__IX_ROWS
                                 ? (struct td__ixrow *)(void *)r->ixrows.p
                                 : rowbuf;
    for (int y = r0; y < r1; y++) {
        struct td__ixrow *q = &rows[y - r0];
        if (td__ix_row(&ix, y, s0, s1, q))
            return TD_CUT_FALLBACK;
        size_t nb = (size_t)((q->bit + q->nbits + 7) >> 3);
        /* rows of the cut are disjoint in the scan (but for a byte
         * shared by neighbours): the cut-out is at most about 2 scans */
        tot += nb;
        if (tot > ix.slen + (size_t)(y - r0 + 1))
            return TD_CUT_FALLBACK;
        room += 2 * (nb + 8) + 16;
        umax = nb > umax ? nb : umax;
    }
    if (td_buf_reserve(&r->syn, room) || td_buf_reserve(&r->unst, umax + 16))
        return -ENOMEM;
    int cw = (s1 * segw < W ? s1 * segw : W) - s0 * segw;
    int ch = (r1 * mcu_h < H ? r1 * mcu_h : H) - r0 * mcu_h;
    struct td__bw w = {td__ix_headers(r, r->syn.p, cw, ch, dct, used), 0, 0};
    int pred[4] = {0};
    uint8_t *u = r->unst.p;
    for (int y = r0; y < r1; y++) {
        const struct td__ixrow *q = &rows[y - r0];
        uint64_t at = q->bit, end = q->bit + q->nbits;
        size_t nb = (size_t)((end + 7) >> 3);
        size_t n = td__unstuff(ix.scan, q->byte, nb, ix.slen, u);
        if (n == (size_t)-1 || n < nb)
            return TD_CUT_FALLBACK;
        memset(u + n, 0, 16);
        for (int i = 0; i < ix.nc; i++) {
            uint64_t off = (uint64_t)q->bit + q->off[i];
            int diff, len;
            if (off < at || off >= end ||
                td__dc_decode(&dct[tbl[i]], u, off, &diff, &len) ||
                off + (uint64_t)len > end)
                return TD_CUT_FALLBACK;
            int v = q->pred0[i] + diff - pred[i];
            unsigned a_ = (unsigned)(v < 0 ? -v : v);
            int cat = a_ ? 32 - __builtin_clz(a_) : 0;
            if (cat > 11 || !dct[tbl[i]].esize[cat])
                return TD_CUT_FALLBACK;
            td__bw_copy(&w, u, at, off - at);
            td__bw_put(&w, dct[tbl[i]].ecode[cat], dct[tbl[i]].esize[cat]);
            if (cat)
                td__bw_put(&w, (uint32_t)(v < 0 ? v - 1 : v), cat);
            at = off + (uint64_t)len;
        }
        td__bw_copy(&w, u, at, end - at);
        memcpy(pred, q->pred1, sizeof pred);
    }
    if (w.n)
        td__bw_put(&w, 0x7f, 8 - w.n); /* pad with 1 bits */
    *w.o++ = 0xff;
    *w.o++ = 0xd9;
    /* libjpeg-turbo takes its fast Huffman path only while the source
     * holds more than TD__FAST_TAIL bytes; zeros after EOI keep it there
     * to the last MCU (libjpeg stops reading at EOI). */
    memset(w.o, 0, TD__FAST_TAIL);
    w.o += TD__FAST_TAIL;
    out->jpeg = r->syn.p;
    out->len = (size_t)(w.o - r->syn.p);
    out->x0 = s0 * segw;
    out->y0 = r0 * mcu_h;
    return 0;
}
