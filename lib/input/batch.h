/* batch.h - the unit that travels from the input pipeline to the trainer.
 *
 * A batch is uint8 pixels plus int32 labels in memory owned by a slot of
 * the producer's ring.  The consumer borrows it with next() and gives it
 * back with release() (on a GPU, once the host-to-device copy's event has
 * completed).  Pixels cross the bus as uint8; cast and normalisation happen
 * on the device.  Slot memory comes from a replaceable allocator so that
 * the CUDA backend can hand in pinned host memory.
 */
#ifndef TD_BATCH_H
#define TD_BATCH_H

#include <stddef.h>
#include <stdint.h>

enum td_layout {
    TD_LAYOUT_NHWC = 0, /* what decoders produce; the CUDA backend's input */
    TD_LAYOUT_NCHW = 1, /* planar, for consumers that want it */
};

typedef struct td_batch {
    uint8_t *data;          /* n * h * w * c bytes in `layout` */
    int32_t *labels;        /* n labels in [0, classes) */
    int n;                  /* samples in this batch (<= batch size) */
    int h, w, c;            /* image height, width, channels */
    enum td_layout layout;
    int64_t epoch;          /* the epoch this batch belongs to (from 0) */
    int64_t step;           /* index of this batch within its epoch */
    int last_in_epoch;      /* 1 on the epoch's final batch */
    void *slot;             /* the producer's handle; do not touch */
} td_batch;

/* Where batch slots come from.  alloc returns NULL on failure. */
typedef struct td_slot_allocator {
    void *(*alloc)(void *user, size_t bytes);
    void (*free)(void *user, void *ptr);
    void *user;
} td_slot_allocator;

/* A producer of batches in a deterministic order, as the trainer sees it.
 *   start(self, epoch, step): (re)position at batch `step` of `epoch`;
 *       batches before it are skipped without being produced.
 *   next(self, b, wait_ns): blocks until the next batch in order is ready;
 *       *wait_ns (may be NULL) receives how long it blocked.  Returns 0,
 *       TD_E_CLOSED when the source was stopped, or another negative code
 *       (e.g. TD_E_BADDATA past the bad-sample limit).  Epochs follow each
 *       other without a call to start().
 *   release(self, b): gives the batch's slot back.
 */
typedef struct td_batch_source {
    int (*start)(void *self, int64_t epoch, int64_t step);
    int (*next)(void *self, td_batch *b, int64_t *wait_ns);
    void (*release)(void *self, td_batch *b);
    void *self;
} td_batch_source;

#endif
