/* pipeline.h - the input pipeline: dataset -> decode -> augment -> batches.
 *
 * N dedicated worker threads fill a ring of batch slots (the prefetch
 * depth) in order; the consumer takes batch after batch with
 * td_pipeline_next() and gives each back with td_pipeline_release().
 *
 * Determinism: the sample order of epoch e is a Philox permutation of
 * (seed, e) (identity in eval mode), batch s of an epoch holds positions
 * [s*B, s*B+B), and every augmentation draw comes from (seed, e, sample
 * index).  Which worker does what never matters, so the batches of an
 * epoch are the same for any worker count, and td_pipeline_start(e, s)
 * yields exactly the batches an uninterrupted run yields from there.
 *
 * Bad data: a sample that cannot be read or decoded is replaced by the
 * sample at the next position of the epoch's order (then the next, ...),
 * counted once, and named once in the log; past max_bad_ratio of the
 * dataset the pipeline fails with TD_E_BADDATA.
 *
 * Work is handed out in chunks of a few samples; a worker takes the next
 * chunk only once that chunk's batch slot is free, so no more than
 * `prefetch` batches are ever in flight and memory stays at
 * prefetch x batch bytes + per-worker scratch.
 *
 * One consumer thread calls start/next/release; stop, set_workers and
 * stats_get may be called from any thread.
 *
 * Owns: the worker threads, the slots (through the allocator), the
 * decoders.  Never: allocates per image, or blocks the consumer except in
 * td_pipeline_next.
 */
#ifndef TD_PIPELINE_H
#define TD_PIPELINE_H

#include <stddef.h>
#include <stdint.h>

#include "input/augment.h"
#include "input/batch.h"

#define TD_PIPELINE_MAX_WORKERS 64

typedef struct td_pipeline td_pipeline;

typedef struct td_pipeline_config {
    const char *data;       /* dataset path (see dataset.h) */
    struct td_dataset *dataset; /* or a dataset the caller opened (and,
                               e.g., relabelled or split): the pipeline
                               takes it and closes it, even on failure */
    int size[2];            /* output height, width */
    int channels;           /* 1 or 3 */
    td_augment augment[TD_AUG_MAX];
    int n_augment;
    int batch_size;
    int workers;            /* active workers at start, >= 1 */
    int max_workers;        /* upper bound for set_workers; 0: 2 x workers,
                               at least the number of online CPUs */
    int prefetch;           /* batches prepared ahead of the consumer */
    int max_prefetch;       /* slots allocated (upper bound for
                               set_prefetch); 0: = prefetch */
    uint64_t seed;
    double max_bad_ratio;   /* share of the dataset allowed to be bad */
    enum td_layout layout;
    int train;              /* 1: shuffle + random augmentation */
    int drop_last;          /* drop the last partial batch (train default) */
    td_slot_allocator alloc; /* alloc == NULL: aligned malloc */
    long job;               /* for log lines; 0 if none */
    struct td_trace *trace; /* timeline recorder (trace.h); NULL: none */
    const struct td_fscred *cred; /* read the data as this user (fscred.h):
                               the dataset open and every worker; NULL:
                               the process's own rights */
} td_pipeline_config;

/* Defaults: 224x224x3, no augmentation, batch 128, workers 2, prefetch 4,
 * seed 1, max_bad_ratio 0.01, NHWC, train, drop_last. */
void td_pipeline_config_default(td_pipeline_config *cfg);

/* Opens the dataset and checks the config; starts the worker threads
 * (idle until td_pipeline_start).  Errors are those of td_dataset_open,
 * -EINVAL for a bad config (err names the field), -ENOMEM. */
int td_pipeline_create(const td_pipeline_config *cfg, td_pipeline **out,
                       char *err, size_t errcap);
/* Stops and joins the workers and frees everything.  Batches still held
 * by the consumer become invalid.  No thread may be inside a pipeline call
 * (stop the consumer with td_pipeline_stop and let next() return first). */
void td_pipeline_destroy(td_pipeline *p);

/* (Re)positions at batch `step` of `epoch`.  Every batch taken must have
 * been released (else -EBUSY).  0, -EINVAL (step past the epoch). */
int td_pipeline_start(td_pipeline *p, int64_t epoch, int64_t step);
/* Blocks until the next batch in order is complete.  *wait_ns (may be
 * NULL) gets the time spent blocked.  0, TD_E_CLOSED after stop/destroy,
 * TD_E_BADDATA past the bad-sample limit, -EINVAL before start. */
int td_pipeline_next(td_pipeline *p, td_batch *b, int64_t *wait_ns);
void td_pipeline_release(td_pipeline *p, td_batch *b);
/* Wakes a consumer blocked in next(); further next() calls return
 * TD_E_CLOSED. */
void td_pipeline_stop(td_pipeline *p);

/* Changes the number of active workers (1..max_workers) while running;
 * a worker over the limit finishes its chunk and waits.  0 or -EINVAL. */
int td_pipeline_set_workers(td_pipeline *p, int n);

/* Changes how many batches the workers prepare ahead of the consumer
 * (1..max_prefetch) while running.  0 or -EINVAL. */
int td_pipeline_set_prefetch(td_pipeline *p, int n);

/* The trainer's view (see batch.h). */
td_batch_source td_pipeline_source(td_pipeline *p);

/* Per-stage counters: nanoseconds summed over workers, and counts.  Read
 * at any time (relaxed atomics, a few adds per sample). */
typedef struct td_pipeline_stats {
    int64_t read_ns, decode_ns, augment_ns;
    int64_t slot_wait_ns;     /* workers waiting for a free slot */
    int64_t consumer_wait_ns; /* time next() blocked */
    int64_t starved_ns;       /* the part of it spent waiting for a batch
                               * still being made (not for the lock) */
    int64_t samples;          /* samples written into slots */
    int64_t batches;          /* batches handed to the consumer */
    int64_t bad_samples;      /* distinct bad samples seen */
    int64_t decoded_bytes;    /* compressed bytes decoded */
    int workers;              /* active */
    int prefetch;             /* current depth */
} td_pipeline_stats;

void td_pipeline_stats_get(td_pipeline *p, td_pipeline_stats *s);
/* After TD_E_BADDATA: "N bad sample(s) out of M, past max_bad_ratio R;
 * the latest: <sample>: <why>". */
void td_pipeline_bad_summary(td_pipeline *p, char *buf, size_t cap);

/* Runs the pipeline alone: starts at (first_epoch, 0) and takes and
 * releases every batch of `epochs` epochs as fast as they come; for
 * benchmarks (bench-input).  *images and *seconds (start to last batch)
 * may be NULL.  0 or the error next() returned. */
int td_pipeline_drain(td_pipeline *p, int64_t first_epoch, int epochs,
                      int64_t *images, double *seconds);
/* The same, calling progress (when not NULL) with the images taken so far
 * and the run's total after each batch, on the calling thread. */
int td_pipeline_drain_progress(td_pipeline *p, int64_t first_epoch,
                               int epochs, int64_t *images, double *seconds,
                               void (*progress)(void *user, int64_t images,
                                                int64_t total),
                               void *user);

size_t td_pipeline_dataset_size(const td_pipeline *p);
/* The dataset's td_dataset_left_out (an ImageFolder's entries that are
 * not samples). */
size_t td_pipeline_left_out(const td_pipeline *p, const char **first);
int64_t td_pipeline_batches_per_epoch(const td_pipeline *p);
int td_pipeline_classes(const td_pipeline *p);
/* The dataset's name for a label (td_dataset_class_name), or NULL. */
const char *td_pipeline_class_name(const td_pipeline *p, int label);

#endif
