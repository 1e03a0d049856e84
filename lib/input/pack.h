/* pack.h - writing WebDataset tar shards (<key>.jpg + <key>.cls).
 *
 * Two packers, each writing shards <prefix>-000000.tar, ... into an output
 * directory:
 *   td_pack_idx     from IDX files (MNIST-style: images n x h x w, or
 *                   n x h x w x 3, labels n): the pixels JPEG-encoded with
 *                   TurboJPEG (grayscale stays single-channel);
 *   td_pack_folder  from an ImageFolder tree (dataset.h), the class index
 *                   as label: each JPEG rewritten losslessly with a crop
 *                   index (options.index; td_pack_add_index) or restart
 *                   markers (options.restart; td_pack_add_restarts), or
 *                   copied as it is (neither: td_pack_options_default).
 * Use:
 *   td_pack_options o;
 *   td_pack_options_default(&o);           then change what differs
 *   td_pack_folder(root, outdir, &o, &res, err, sizeof err);
 * Each shard is at most shard_bytes (one sample larger than that gets a
 * shard of its own), written as .tmp and renamed when complete, with its
 * index cache (<shard>.tdidx, see dataset.h).  The per-file rewrites, the
 * crop index format and td_pack_restart_interval are the JPEG bitstream
 * module's (jpegidx.h, included here).
 * Owns: shard files.  Never: overwrites existing shards (refuses), parses
 * JPEG bitstreams itself.
 */
#ifndef TD_PACK_H
#define TD_PACK_H

#include <stddef.h>
#include <stdint.h>

#include "input/jpegidx.h"

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
     * the fast Huffman path.  0 (td_pack_options_default): see
     * `restart`; `trainctl pack` asks for 2 unless given --restart. */
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

#endif
