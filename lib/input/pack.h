/* pack.h - writing WebDataset tar shards (<key>.jpg + <key>.cls).
 *
 * From IDX files (MNIST-style: images n x h x w, or n x h x w x 3, labels
 * n) the pixels are JPEG-encoded with TurboJPEG (grayscale stays
 * single-channel); from an ImageFolder tree the JPEG files are copied as
 * they are or rewritten losslessly with a crop index (the default) or
 * restart markers, with the class index as label.  Shards are
 * named <prefix>-000000.tar, ... in the output directory, each at most
 * shard_bytes (one sample larger than that gets a shard of its own),
 * written as .tmp and renamed when complete, each with its index cache
 * (<shard>.tdidx, see dataset.h).
 * Owns: shard files.  Never: overwrites existing shards (refuses).
 */
#ifndef TD_PACK_H
#define TD_PACK_H

#include <stddef.h>
#include <stdint.h>

/* IDX pixels: 0 = lossless PNG (exact), 1..100 = JPEG at that quality */
#define TD_PACK_DEFAULT_QUALITY 0
#define TD_PACK_DEFAULT_SHARD_BYTES (UINT64_C(256) << 20)

typedef struct td_pack_options {
    int quality;           /* IDX only: 0 (default) PNG, 1..100 JPEG */
    uint64_t shard_bytes;  /* cap per shard, default 256 MiB */
    const char *prefix;    /* shard name prefix, default "shard" */
    /* ImageFolder only: 0 copies the JPEGs as they are; N > 0 rewrites
     * each losslessly (same DCT coefficients, optimized Huffman tables)
     * with a restart marker every R MCUs, R the largest divisor of the
     * MCUs per row <= N, so decoders can skip to any segment (decode.h). */
    int restart;
    /* ImageFolder only, before `restart`: N > 0 rewrites each losslessly
     * without restart markers and with a crop index every R MCUs (R as
     * above; td_pack_add_index), so decoders can start at any R-th MCU on
     * the fast Huffman path.  Default 4; 0: see `restart`. */
    int index;
    /* ImageFolder rewrites run on this many threads (0: one per online
     * CPU); the shards are the same whatever the count. */
    int threads;
    /* Called every few hundred samples and at the end; may be NULL. */
    void (*progress)(void *user, size_t done, size_t total);
    void *user;
} td_pack_options;

typedef struct td_pack_result {
    size_t samples;
    int shards;
    uint64_t bytes;      /* total size of the shards written */
    int classes;         /* 1 + the largest label */
    size_t rewritten;    /* ImageFolder files given restart markers or a
                            crop index; the others (damaged, not
                            decodable, too large) were copied */
    int width, height, channels; /* IDX only; 0 for ImageFolder */
} td_pack_result;

void td_pack_options_default(td_pack_options *o);

/* Errors: those of td_idx_load, TD_E_CORRUPT when the two files disagree
 * (counts) or the images are not n x h x w[x3], -EEXIST when outdir already
 * holds .tar files, -errno for I/O.  err names the file and the problem. */
int td_pack_idx(const char *images, const char *labels, const char *outdir,
                const td_pack_options *opt, td_pack_result *res, char *err,
                size_t errcap);

/* Packs an ImageFolder tree (see dataset.h for its rules). */
int td_pack_folder(const char *root, const char *outdir,
                   const td_pack_options *opt, td_pack_result *res, char *err,
                   size_t errcap);

/* Lossless rewrite of one JPEG with restart markers every R MCUs (R =
 * td_pack_restart_interval(MCUs per row, max_mcus)) into *out (malloc'd).
 * 0, or TD_E_CORRUPT (not a JPEG, damaged or truncated: libjpeg warned). */
int td_pack_add_restarts(const uint8_t *in, size_t len, int max_mcus,
                         uint8_t **out, size_t *out_len);

/* Lossless rewrite of one JPEG without restart markers (same DCT
 * coefficients, optimized Huffman tables, one baseline scan) carrying a
 * crop index (cropidx.h) with a checkpoint every R MCUs, R =
 * td_pack_restart_interval(MCUs per row, max_mcus), into *out (malloc'd).
 * td_decoder_region then decodes crops from just the MCUs they cover, on
 * libjpeg-turbo's fast Huffman path.  0, TD_E_CORRUPT (not a JPEG,
 * damaged or truncated), TD_E_NOTSUP (too large to index), -ENOMEM. */
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

/* The largest divisor of mcus_per_row that is <= max_mcus (at least 1). */
int td_pack_restart_interval(int mcus_per_row, int max_mcus);

#endif
