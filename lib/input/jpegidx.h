/* cropidx.h - the crop index traind stores inside a JPEG.
 *
 * A baseline JPEG without restart markers can only be entropy-decoded
 * from its start.  The crop index lets a decoder start anywhere: every R
 * MCUs of the scan ("checkpoints", R dividing the MCUs of a row) it gives
 * where that MCU's bits start in the entropy-coded data, the DC predictor
 * of each component there, and where each component's first block starts
 * inside the MCU.  With it, td_decoder_region (decode.c) builds a small
 * JPEG of just the MCUs a crop box covers: per MCU row of the box, the
 * bits from checkpoint (row, s0) to checkpoint (row, s1) are copied, the
 * first DC difference of each component re-coded against the predictor
 * the previous row left, and that JPEG is decoded on libjpeg-turbo's fast
 * Huffman path (which restart markers would turn off).
 *
 * Written by `trainctl pack` (td_pack_add_index) as APP15 marker segments
 * right after SOI; decoders that do not know them skip them.  All fixed
 * integers big-endian.  Each APP15 payload is a 20-byte header and a piece
 * of the index (the pieces, in chunk order, make the whole):
 *   0  "TDIX"            magic
 *   4  u8  version       TD_CROPIDX_VERSION
 *   5  u8  seq           this chunk's number, 0..nchunks-1
 *   6  u8  nchunks
 *   7  u8  ncomp         components in the (single, interleaved) scan
 *   8  u16 R             MCUs per checkpoint interval
 *  10  u16 spr           intervals per MCU row (R * spr = MCUs per row)
 *  12  u16 rows          MCU rows
 *  14  u16 0             reserved
 *  16  u32 scan_len      bytes of entropy-coded data (SOS's end to EOI)
 * The index: a row table of rows + 1 records of TD_CROPIDX_ROW(ncomp)
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
 * Owns: nothing; format only.
 */
#ifndef TD_CROPIDX_H
#define TD_CROPIDX_H

#include <stddef.h>
#include <stdint.h>

#define TD_CROPIDX_MARKER 0xef /* APP15 */
#define TD_CROPIDX_VERSION 2
#define TD_CROPIDX_HEAD 20
#define TD_CROPIDX_ROW(nc) (9 + 2 * (nc))
#define TD_CROPIDX_MAX_PAYLOAD 65533

static inline unsigned td_cropidx_u16(const uint8_t *p)
{
    return (unsigned)p[0] << 8 | p[1];
}

static inline uint32_t td_cropidx_u32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
           (uint32_t)p[2] << 8 | p[3];
}

static inline void td_cropidx_put16(uint8_t *p, unsigned v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static inline void td_cropidx_put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

#endif
