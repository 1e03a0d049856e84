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
 * right after SOI; decoders that do not know them skip them.  All
 * integers big-endian.  Each APP15 payload is one chunk:
 *   0  "TDIX"            magic
 *   4  u8  version       TD_CROPIDX_VERSION
 *   5  u8  seq           this chunk's number, 0..nchunks-1
 *   6  u8  nchunks
 *   7  u8  ncomp         components in the (single, interleaved) scan
 *   8  u16 R             MCUs per checkpoint interval
 *  10  u16 spr           intervals per MCU row (R * spr = MCUs per row)
 *  12  u16 rows          MCU rows
 *  14  u16 per_chunk     entries per chunk (the last may hold fewer)
 *  16  u32 scan_len      bytes of entropy-coded data (SOS's end to EOI)
 *  20  entries
 * Entry k (0 <= k <= spr * rows; entry spr * rows is the end of the scan),
 * TD_CROPIDX_ENTRY(ncomp) bytes:
 *   u32 byte    offset in the entropy-coded data (stuffed, as stored) of
 *               the byte holding the checkpoint's first bit
 *   u8  bit     that bit's position in the byte, 0 = most significant
 *   u16 off[c]  for c = 1..ncomp-1: bits from the checkpoint to the DC
 *               code of component c's first block (component 0's is 0)
 *   i16 pred[c] for c = 0..ncomp-1: the DC predictor at the checkpoint
 *               (the DC of the component's last block coded before it)
 * Owns: nothing; format only.
 */
#ifndef TD_CROPIDX_H
#define TD_CROPIDX_H

#include <stddef.h>
#include <stdint.h>

#define TD_CROPIDX_MARKER 0xef /* APP15 */
#define TD_CROPIDX_VERSION 1
#define TD_CROPIDX_HEAD 20
#define TD_CROPIDX_ENTRY(nc) (5 + 2 * ((nc) - 1) + 2 * (nc))
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
