/* feeder.h - a minimal in-memory batch source for tests and benches.
 *
 * Owns: a dataset held in memory as uint8 NHWC images + int32 labels (read
 * from IDX files such as MNIST / Fashion-MNIST, gzipped or not, through
 * the library's td_idx_load, or built by the caller), and a td_batch_source that serves it in order on the
 * calling thread: a per-epoch permutation from (seed, epoch) as in
 * docs/design.md#from-a-file-on-disk-to-the-device, optional pad+random-
 * crop and horizontal flip drawn from (seed, epoch, sample), and
 * optionally only full batches (drop_last).
 * Never does: start threads, decode images, or allocate per batch.  Its
 * pad+crop and flip are the pipeline's (td_augment_plan and
 * td_augment_apply on the whole image at full scale).
 */
#ifndef TD_FEEDER_H
#define TD_FEEDER_H

#include <stddef.h>
#include <stdint.h>

#include "input/batch.h"

typedef struct td_dataset_mem {
    uint8_t *images; /* n * h * w * c */
    int32_t *labels;
    int n, h, w, c;
    int classes;     /* 1 + the largest label */
} td_dataset_mem;

/* Reads <prefix>-images-idx3-ubyte[.gz] and <prefix>-labels-idx1-ubyte[.gz]
 * (e.g. prefix ".../fashion-mnist/train").  limit > 0 keeps the first
 * `limit` samples.  Errors name the file and what is wrong. */
int td_feeder_load_idx(const char *prefix, int limit, td_dataset_mem *out,
                char *err, size_t errcap);
void td_dataset_mem_free(td_dataset_mem *d);

typedef struct td_feeder_config {
    int batch;
    uint64_t seed;
    int shuffle;     /* permute per epoch (training) or keep file order */
    int drop_last;   /* serve only full batches */
    int pad_crop;    /* pad by this many pixels, then crop at random */
    int flip;        /* random horizontal flip */
} td_feeder_config;

typedef struct td_feeder td_feeder;

/* The dataset is borrowed and must outlive the feeder. */
int td_feeder_create(const td_dataset_mem *d, const td_feeder_config *cfg,
                     td_feeder **out);
void td_feeder_free(td_feeder *f);
td_batch_source td_feeder_source(td_feeder *f);
int64_t td_feeder_batches_per_epoch(const td_feeder *f);

#endif
