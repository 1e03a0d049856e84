/* jpegidx.h - the JPEG bitstream module: the crop index traind stores
 * inside a JPEG, the lossless rewrites `trainctl pack` stores, and the
 * cut-out JPEGs decode.c decodes crops through.
 *
 * A baseline JPEG without restart markers can only be entropy-decoded
 * from its start.  The crop index lets a decoder start anywhere: every R
 * MCUs of the scan ("checkpoints", R dividing the MCUs of a row) it gives
 * where that MCU's bits start in the entropy-coded data, the DC predictor
 * of each component there, and where each component's first block starts
 * inside the MCU.  With it, td_jpegidx_cut_index builds a small JPEG of
 * just the MCUs a crop box covers: per MCU row of the box, the bits from
 * checkpoint (row, s0) to checkpoint (row, s1) are copied, the first DC
 * difference of each component re-coded against the predictor the
 * previous row left, and decode.c decodes that JPEG on libjpeg-turbo's
 * fast Huffman path (which restart markers would turn off).  A file with
 * restart markers every R MCUs (`trainctl pack --restart`) gets the same
 * from td_jpegidx_cut_restart, by copying whole restart segments.
 *
 * Files:
 *   jpegidx.c      writing: the lossless rewrite (restart markers or none),
 *                  the per-block bit walk, td_pack_segment_info, the index
 *                  writer (td_pack_add_index)
 *   jpegidx_cut.c  reading: the header scan, the restart grid and the
 *                  index reader, the cut-out assembly
 *   jpegerr.c      the libjpeg error manager both use (and decode.c)
 * The writers keep their td_pack_ names: they are what `trainctl pack`
 * stores per file (pack.h includes this header).
 *
 * The format.  Written by `trainctl pack` (td_pack_add_index) as APP15
 * marker segments right after SOI; decoders that do not know them skip
 * them.  All fixed integers big-endian.  Each APP15 payload is a 20-byte
 * header and a piece of the index (the pieces, in chunk order, make the
 * whole):
 *   0  "TDIX"            magic
 *   4  u8  version       TD_JPEGIDX_VERSION
 *   5  u8  seq           this chunk's number, 0..nchunks-1
 *   6  u8  nchunks
 *   7  u8  ncomp         components in the (single, interleaved) scan
 *   8  u16 R             MCUs per checkpoint interval
 *  10  u16 spr           intervals per MCU row (R * spr = MCUs per row)
 *  12  u16 rows          MCU rows
 *  14  u16 0             reserved
 *  16  u32 scan_len      bytes of entropy-coded data (SOS's end to EOI)
 * The index: a row table of rows + 1 records of TD_JPEGIDX_ROW(ncomp)
 * bytes (record `rows` is the end of the scan), then the checkpoints.
 * Row record r, about the checkpoint that starts MCU row r:
 *   u32 byte    offset in the entropy-coded data (stuffed, as stored) of
 *               the byte holding its first bit
 *   u8  bit     that bit's position in the byte, 0 = most significant
 *   u32 at      where row r's checkpoints start, from the end of the table
 *   i16 pred[c] for c = 0..ncomp-1: the DC predictors there (the DC of
 *               each component's last block coded before it)
 * Checkpoints of row r, s = 0..spr-1, each as LEB128 varints:
 *   len         bits from checkpoint s to the next one (the next row's
 *               first after the last)
 *   z           stuffed zero bytes (after 0xff) between the two
 *               checkpoints' bytes, so that a decoder finds checkpoint
 *               s's byte without scanning: row byte + (row bit + the
 *               lens before s) / 8 + the zs before s
 *   d[c]        for c = 1..ncomp-1: bits from the checkpoint to the DC
 *               code of component c's first block, minus the same for
 *               component c-1 (component 0's is at 0)
 *   dp[c]       for s > 0 and c = 0..ncomp-1: the change of the DC
 *               predictor since checkpoint s-1, zigzag-coded
 * Owns: the byte layout of the index, the rewrites, the cut-out JPEGs
 * (in the reader's scratch).  Never: decodes pixels (decode.c does),
 * touches files, allocates per crop once the scratch has grown.
 */
#ifndef TD_JPEGIDX_H
#define TD_JPEGIDX_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

#define TD_JPEGIDX_MARKER 0xef /* APP15 */
#define TD_JPEGIDX_VERSION 2
#define TD_JPEGIDX_HEAD 20
#define TD_JPEGIDX_ROW(nc) (9 + 2 * (nc))
#define TD_JPEGIDX_MAX_PAYLOAD 65533

static inline unsigned td_jpegidx_u16(const uint8_t *p)
{
    return (unsigned)p[0] << 8 | p[1];
}

static inline uint32_t td_jpegidx_u32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
           (uint32_t)p[2] << 8 | p[3];
}

static inline void td_jpegidx_put16(uint8_t *p, unsigned v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static inline void td_jpegidx_put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* ---- writing (jpegidx.c) ---------------------------------------------- */

/* The largest divisor of mcus_per_row that is <= max_mcus (at least 1). */
int td_pack_restart_interval(int mcus_per_row, int max_mcus);

/* The most pixels the rewrites below take: they hold every DCT
 * coefficient of the image at once (2 bytes a sample, about 400 MB for
 * 64 Mpx at 4:4:4, per pack thread). */
#define TD_PACK_MAX_PIXELS (UINT64_C(1) << 26)

/* Lossless rewrite of one JPEG with restart markers every R MCUs (R =
 * td_pack_restart_interval(MCUs per row, max_mcus)) into *out (malloc'd).
 * 0, TD_E_CORRUPT (not a JPEG, damaged or truncated: libjpeg warned) or
 * TD_E_NOTSUP (over TD_PACK_MAX_PIXELS). */
int td_pack_add_restarts(const uint8_t *in, size_t len, int max_mcus,
                         uint8_t **out, size_t *out_len);

/* Lossless rewrite of one JPEG without restart markers (same DCT
 * coefficients, optimized Huffman tables, one baseline scan) carrying a
 * crop index (above) with a checkpoint every R MCUs, R =
 * td_pack_restart_interval(MCUs per row, max_mcus), into *out (malloc'd).
 * td_decoder_region then decodes crops from just the MCUs they cover, on
 * libjpeg-turbo's fast Huffman path.  0, TD_E_CORRUPT (not a JPEG,
 * damaged or truncated), TD_E_NOTSUP (over TD_PACK_MAX_PIXELS, or too
 * large to index), -ENOMEM. */
int td_pack_add_index(const uint8_t *in, size_t len, int max_mcus,
                      uint8_t **out, size_t *out_len);

/* Per restart segment of a baseline, restart-marked JPEG (as written by
 * td_pack_add_restarts): the entropy-coded bit length without the final
 * 1-bit padding, and per component (up to 4, indexed as in the frame
 * header) the bit offset inside the segment of the first block's DC code,
 * that block's DC value (the segment starts with predictors reset to 0, so
 * the coded difference is the value), the bit length of that DC code plus
 * its extra bits, and the DC value of the component's last block coded in
 * the segment (the DC predictor at the segment's end; in files libjpeg
 * wrote, that of the last block inside the image, as the dummy blocks past
 * the edge repeat it).  Entries of absent components are 0.  Lets a
 * decoder join segments without restart markers by re-coding each
 * segment's first DC differences. */
typedef struct td_seg_info {
    uint32_t bits;
    uint32_t dc_off[4];
    int16_t dc_first[4];
    uint8_t dc_len[4];
    int16_t dc_last[4];
} td_seg_info;

/* *out (malloc'd) gets *nseg entries, one per restart segment in file
 * order (a file without restart markers is one segment).  Computed from
 * the coefficients and the Huffman code lengths, not by decoding the
 * entropy-coded data.  Errors: TD_E_CORRUPT (not a JPEG, damaged,
 * truncated), TD_E_NOTSUP (progressive, arithmetic, 12-bit, more than 4
 * components or more than one scan), -ENOMEM; err says which. */
int td_pack_segment_info(const uint8_t *jpeg, size_t len, td_seg_info **out,
                         size_t *nseg, char *err, size_t errcap);

/* ---- reading and cut-outs (jpegidx_cut.c) ----------------------------- */

struct jpeg_decompress_struct;

/* What the cut-outs know about the JPEG a decoder has read the header of,
 * and their scratch (it only grows).  One per decoder; zero it to start. */
typedef struct td_jpegidx_reader {
    const uint8_t *src;      /* the JPEG */
    size_t src_len;
    size_t sos_end;          /* where its entropy-coded data starts */
    size_t sof_at, sos_at;   /* its SOF0/1 and SOS markers (0: none) */
    const uint8_t *ix[256];  /* crop index chunks by number */
    size_t ix_len[256];      /* their payload lengths */
    int ix_n;                /* chunks seen (0: no index) */
    td_buf syn;              /* the cut-out JPEG */
    td_buf marks;            /* size_t offsets of the restart segments */
    td_buf unst;             /* unstuffed entropy data of one row */
    td_buf ixb;              /* an index in several chunks, put together */
    td_buf ixrows;           /* the layout of a tall cut-out's rows */
} td_jpegidx_reader;

/* Forgets the previous image (cheap when it had no index). */
void td_jpegidx_forget(td_jpegidx_reader *r);

/* Records the JPEG at src (len bytes) whose headers libjpeg has parsed up
 * to sos_end (the end of SOS): where SOF and SOS are, and its crop index
 * chunks (those of the current version; a chunk number seen twice keeps
 * the first).  Forgets the previous image first. */
void td_jpegidx_scan(td_jpegidx_reader *r, const uint8_t *src, size_t len,
                     size_t sos_end);

/* Frees the scratch. */
void td_jpegidx_free(td_jpegidx_reader *r);

/* A cut-out's "not for this box": the file has no usable index (or
 * restart grid), the box needs whole rows from the top, or the file says
 * something the cut-out cannot honour.  The caller decodes the file
 * itself; a positive code, so it is never taken for an error. */
#define TD_CUT_FALLBACK 1

/* Source pixels [x0, x1) x [y0, y1): what a cut-out must hold (the crop
 * box and its margin, clipped to the image). */
typedef struct td_pixbox {
    int x0, y0, x1, y1;
} td_pixbox;

/* A cut-out JPEG (in the reader's syn scratch: valid until the next cut)
 * and where its top-left pixel sits in the source. */
typedef struct td_jpegidx_cut {
    const uint8_t *jpeg;
    size_t len;
    int x0, y0;
} td_jpegidx_cut;

/* Builds the cut-out of the MCUs covering `need` from the crop index of
 * the file scanned last (ci: its decompressor after jpeg_read_header).
 * 0, TD_CUT_FALLBACK, or -ENOMEM. */
int td_jpegidx_cut_index(td_jpegidx_reader *r,
                         const struct jpeg_decompress_struct *ci,
                         const td_pixbox *need, td_jpegidx_cut *out);

/* The same from the restart segments of a baseline file whose restart
 * interval divides the MCUs of a row: the segments covering `need`, their
 * markers renumbered, the SOF's size patched.  0, TD_CUT_FALLBACK, or
 * -ENOMEM. */
int td_jpegidx_cut_restart(td_jpegidx_reader *r,
                           const struct jpeg_decompress_struct *ci,
                           const td_pixbox *need, td_jpegidx_cut *out);

#endif
