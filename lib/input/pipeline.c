/* pipeline.c - worker pool and batch ring (see pipeline.h).
 *
 * One mutex guards the ring and the work cursor; it is taken twice per
 * chunk of samples (claim, done), never per pixel.  Batches have a global
 * sequence number seq = epoch * batches_per_epoch + step; slot seq % S
 * holds batch seq.  A slot is "assigned" to seq when slots[seq % S].seq ==
 * seq; release() reassigns it to seq + S.  Workers claim chunks of the
 * batch at the work cursor only when its slot is assigned, fill them with
 * the lock dropped, then count them done; the consumer waits for the
 * batch at its cursor to have all chunks done.
 */
#include "input/pipeline.h"
#include "input/png.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/fscred.h"
#include "base/log.h"
#include "base/rng.h"
#include "input/dataset.h"
#include "input/decode.h"
#include "input/preprocess.h"
#include "obs/trace.h"

#define TD__CHUNK 8 /* samples per work item */

struct td__slot {
    uint8_t *data;
    int32_t *labels;
    int64_t seq;   /* the batch this slot is assigned to */
    int done;      /* chunks completed */
    int out;       /* held by the consumer */
};

struct td__worker {
    td_pipeline *p;
    int id;
    pthread_t th;
    td_decoder *dec;
    td_png png;     /* PNG samples (png.h) */
    td_buf buf;
    td_resampler rs;
    _Atomic int64_t read_ns, decode_ns, augment_ns, slot_wait_ns, samples,
        bytes;
} __attribute__((aligned(64)));

struct td__perm {
    int64_t epoch;
    uint32_t *perm;
};

struct td_pipeline {
    td_pipeline_config cfg;
    td_dataset *ds;
    size_t n;
    int64_t bpe;          /* batches per epoch */
    size_t sample_bytes;  /* h * w * c */
    pthread_mutex_t mu;
    pthread_cond_t work_cv, ready_cv;
    struct td__slot *slots;
    int nslots;
    struct td__perm *perms;
    int nperms;
    int64_t claim_seq;    /* work cursor: next chunk to hand out */
    int claim_chunk;
    int64_t next_seq;     /* consumer cursor */
    int running, stopped, quitting;
    int fatal;            /* an error every next() returns */
    int cred_rc;          /* a worker could not take the user's identity:
                             nothing more is read, every start fails */
    int active, nthreads, busy, held;
    int depth;            /* batches prepared ahead of next_seq */
    struct td__worker *workers;
    _Atomic uint8_t *bad;
    _Atomic int64_t bad_count, consumer_wait_ns, starved_ns, batches;
    char last_bad[640];   /* the latest bad sample and why (mu) */
};

void td_pipeline_config_default(td_pipeline_config *c)
{
    memset(c, 0, sizeof *c);
    c->size[0] = c->size[1] = 224;
    c->channels = 3;
    c->batch_size = 128;
    c->workers = 2;
    c->prefetch = 4;
    c->seed = 1;
    c->max_bad_ratio = 0.01;
    c->layout = TD_LAYOUT_NHWC;
    c->train = 1;
    c->drop_last = 1;
}

/* ---- batch geometry --------------------------------------------------- */

static int td__batch_n(const td_pipeline *p, int64_t seq)
{
    int64_t step = seq % p->bpe;
    size_t B = (size_t)p->cfg.batch_size;
    size_t first = (size_t)step * B;
    return (int)(p->n - first < B ? p->n - first : B);
}

static int td__chunks(const td_pipeline *p, int64_t seq)
{
    return (td__batch_n(p, seq) + TD__CHUNK - 1) / TD__CHUNK;
}

static struct td__slot *td__slot_of(td_pipeline *p, int64_t seq)
{
    return &p->slots[seq % p->nslots];
}

/* The permutation of an epoch; computed under p->mu by the first worker
 * that needs it.  Epochs in flight span fewer than nperms, so an entry in
 * use is never overwritten. */
static const uint32_t *td__perm(td_pipeline *p, int64_t epoch)
{
    if (!p->cfg.train)
        return NULL;
    struct td__perm *e = &p->perms[epoch % p->nperms];
    if (e->epoch != epoch) {
        td_rng_permutation(p->cfg.seed,
                           td_rng_stream(TD_RNG_PERMUTE, (uint64_t)epoch),
                           e->perm, p->n);
        e->epoch = epoch;
    }
    return e->perm;
}

/* ---- one sample ------------------------------------------------------- */

/* Decodes and augments sample idx into dst.  0, TD_E_CORRUPT / -errno for
 * a bad sample (msg says why), -ENOMEM. */
static int td__sample(td_pipeline *p, struct td__worker *w, int64_t epoch,
                      size_t idx, uint8_t *dst, const char **msg)
{
    const td_pipeline_config *c = &p->cfg;
    const uint8_t *data;
    size_t len;
    int oh = c->size[0], ow = c->size[1];
    int64_t t0 = td_now_ns();
    int rc = td_dataset_read(p->ds, idx, &w->buf, &data, &len);
    if (rc) {
        *msg = td_strerror(rc);
        return rc;
    }
    /* the bytes are in w->buf, read or copied out of the shard's map:
     * every page is in, and the read's time is counted until here */
    int64_t t1 = td_now_ns(), t2;
    if (td_png_is(data, len)) /* else JPEG */
        rc = td_preprocess_png(&w->png, &w->rs, c->augment, c->n_augment,
                               c->train, c->seed, epoch, idx, data, len, ow,
                               oh, c->channels, c->layout, dst, &t2, msg);
    else
        rc = td_preprocess_jpeg(w->dec, &w->rs, c->augment, c->n_augment,
                                c->train, c->seed, epoch, idx, data, len, ow,
                                oh, c->channels, c->layout, dst, &t2, msg);
    if (rc && td_dataset_shrunk(p->ds, idx)) {
        /* read as zeros from the page of the shard's new end */
        *msg = td_strerror(TD_E_SHRUNK);
        return TD_E_SHRUNK;
    }
    if (rc)
        return rc;
    int64_t t3 = td_now_ns();
    atomic_fetch_add_explicit(&w->read_ns, t1 - t0, memory_order_relaxed);
    atomic_fetch_add_explicit(&w->decode_ns, t2 - t1, memory_order_relaxed);
    atomic_fetch_add_explicit(&w->augment_ns, t3 - t2, memory_order_relaxed);
    atomic_fetch_add_explicit(&w->bytes, (int64_t)len, memory_order_relaxed);
    if (td_trace_on(c->trace)) {
        int tr = TD_TRACK_WORKER0 + w->id;
        td_trace_slice(c->trace, tr, "read", t0, t1, -1);
        td_trace_slice(c->trace, tr, "decode", t1, t2, -1);
        td_trace_slice(c->trace, tr, "augment", t2, t3, -1);
    }
    return 0;
}

/* Records a bad sample once; returns TD_E_BADDATA past the limit. */
static int td__bad(td_pipeline *p, size_t idx, int rc, const char *msg)
{
    char name[512];
    if (atomic_exchange_explicit(&p->bad[idx], 1, memory_order_relaxed))
        return 0;
    int64_t n = atomic_fetch_add_explicit(&p->bad_count, 1,
                                          memory_order_relaxed) + 1;
    const char *why = msg && *msg ? msg : td_strerror(rc);
    td_dataset_sample_name(p->ds, idx, name, sizeof name);
    td_logf(TD_LOG_WARN, p->cfg.job, "bad sample %s: %s (%s); skipped, the "
            "next sample in order takes its place", name, why,
            td_errname(rc));
    pthread_mutex_lock(&p->mu);
    snprintf(p->last_bad, sizeof p->last_bad, "%.400s: %.200s", name, why);
    pthread_mutex_unlock(&p->mu);
    if ((double)n > p->cfg.max_bad_ratio * (double)p->n) {
        td_logf(TD_LOG_ERROR, p->cfg.job, "%lld bad samples out of %zu: past "
                "the limit of %.4g of the dataset", (long long)n, p->n,
                p->cfg.max_bad_ratio);
        return TD_E_BADDATA;
    }
    return 0;
}

/* Fills positions [lo, hi) of batch seq into slot s. */
static int td__chunk(td_pipeline *p, struct td__worker *w, int64_t seq,
                     const uint32_t *perm, struct td__slot *s, int lo, int hi)
{
    int64_t epoch = seq / p->bpe, step = seq % p->bpe;
    size_t base = (size_t)step * (size_t)p->cfg.batch_size;
    for (int i = lo; i < hi; i++) {
        size_t pos = base + (size_t)i, k;
        uint8_t *dst = s->data + (size_t)i * p->sample_bytes;
        for (k = 0; k < p->n; k++) {
            size_t q = (pos + k) % p->n, idx = perm ? perm[q] : q;
            const char *msg = NULL;
            int rc = td__sample(p, w, epoch, idx, dst, &msg);
            if (rc == 0) {
                s->labels[i] = td_dataset_label(p->ds, idx);
                break;
            }
            if (rc == -ENOMEM)
                return rc;
            if ((rc = td__bad(p, idx, rc, msg)) != 0)
                return rc;
        }
        if (k == p->n)
            return TD_E_BADDATA;
        atomic_fetch_add_explicit(&w->samples, 1, memory_order_relaxed);
    }
    return 0;
}

/* ---- workers ---------------------------------------------------------- */

/* With p->mu held: the number of ready batches, as a trace counter. */
static void td__trace_ready(td_pipeline *p)
{
    int ready = 0;
    if (!td_trace_on(p->cfg.trace))
        return;
    for (int64_t q = p->next_seq; q < p->next_seq + p->nslots; q++) {
        struct td__slot *s = td__slot_of(p, q);
        if (s->seq == q && !s->out && s->done == td__chunks(p, q))
            ready++;
    }
    td_trace_counter(p->cfg.trace, "ready_batches", td_now_ns(), ready);
}

static int td__can_claim(td_pipeline *p, int id)
{
    return p->running && !p->fatal && !p->cred_rc && id < p->active &&
           p->claim_seq < p->next_seq + p->depth &&
           td__slot_of(p, p->claim_seq)->seq == p->claim_seq;
}

static void *td__worker_main(void *arg)
{
    struct td__worker *w = arg;
    td_pipeline *p = w->p;
    char name[16];
    snprintf(name, sizeof name, "decode%d", w->id);
    td_log_set_thread_name(name);
    /* Every sample is read with the submitting user's rights. */
    td_fscred_saved cred;
    int crc = td_fscred_enter(p->cfg.cred, &cred);
    pthread_mutex_lock(&p->mu);
    if (crc) {
        p->cred_rc = p->fatal = crc;
        pthread_cond_broadcast(&p->ready_cv);
    }
    for (;;) {
        int64_t tw = td_now_ns();
        int waited_for_slot = 0;
        while (!p->quitting && !td__can_claim(p, w->id)) {
            waited_for_slot |= p->running && !p->fatal && w->id < p->active;
            pthread_cond_wait(&p->work_cv, &p->mu);
        }
        if (p->quitting)
            break;
        if (waited_for_slot) {
            int64_t now = td_now_ns();
            atomic_fetch_add_explicit(&w->slot_wait_ns, now - tw,
                                      memory_order_relaxed);
            if (td_trace_on(p->cfg.trace))
                td_trace_slice(p->cfg.trace, TD_TRACK_WORKER0 + w->id,
                               "wait_for_slot", tw, now, -1);
        }
        int64_t seq = p->claim_seq;
        int chunk = p->claim_chunk;
        int bn = td__batch_n(p, seq);
        if (++p->claim_chunk == td__chunks(p, seq)) {
            p->claim_seq++;
            p->claim_chunk = 0;
        }
        const uint32_t *perm = td__perm(p, seq / p->bpe);
        struct td__slot *s = td__slot_of(p, seq);
        p->busy++;
        pthread_mutex_unlock(&p->mu);
        int lo = chunk * TD__CHUNK, hi = lo + TD__CHUNK < bn ? lo + TD__CHUNK
                                                             : bn;
        int rc = td__chunk(p, w, seq, perm, s, lo, hi);
        pthread_mutex_lock(&p->mu);
        p->busy--;
        if (rc && !p->fatal)
            p->fatal = rc;
        if (rc == 0 && ++s->done == td__chunks(p, seq)) {
            pthread_cond_broadcast(&p->ready_cv);
            td__trace_ready(p);
        }
        if (rc || (!p->running && p->busy == 0))
            pthread_cond_broadcast(&p->ready_cv);
    }
    pthread_mutex_unlock(&p->mu);
    td_fscred_leave(&cred);
    return NULL;
}

static int td__worker_start(td_pipeline *p, int id)
{
    struct td__worker *w = &p->workers[id];
    w->p = p;
    w->id = id;
    int rc = td_decoder_create(&w->dec);
    if (rc == 0)
        rc = td_resampler_init(&w->rs, p->cfg.size[1], p->cfg.size[0],
                               p->cfg.channels);
    if (rc == 0)
        rc = -pthread_create(&w->th, NULL, td__worker_main, w);
    if (rc) {
        td_decoder_destroy(w->dec);
        td_resampler_free(&w->rs);
        w->dec = NULL;
        return rc;
    }
    p->nthreads++;
    return 0;
}

/* ---- create / destroy ------------------------------------------------- */

static void *td__default_alloc(void *user, size_t bytes)
{
    (void)user;
    return aligned_alloc(64, (bytes + 63) / 64 * 64);
}

static void td__default_free(void *user, void *ptr)
{
    (void)user;
    free(ptr);
}

static int td__check_config(const td_pipeline_config *c, char *err,
                            size_t ecap)
{
    const char *bad = NULL;
    if (!c->dataset && (!c->data || !*c->data))
        bad = "data: no dataset path";
    else if (c->size[0] < 1 || c->size[1] < 1 || c->size[0] > 8192 ||
             c->size[1] > 8192)
        bad = "size: each side must be 1..8192";
    else if (c->channels != 1 && c->channels != 3)
        bad = "channels: must be 1 or 3";
    else if (c->batch_size < 1 || c->batch_size > 65536)
        bad = "batch_size: must be 1..65536";
    else if (c->workers < 1 || c->workers > TD_PIPELINE_MAX_WORKERS ||
             c->max_workers < 0 || c->max_workers > TD_PIPELINE_MAX_WORKERS)
        bad = "workers: must be 1..64";
    else if (c->prefetch < 1 || c->prefetch > 1024 || c->max_prefetch < 0 ||
             c->max_prefetch > 1024 ||
             (c->max_prefetch && c->max_prefetch < c->prefetch))
        bad = "prefetch: must be 1..1024 (and <= max_prefetch)";
    else if (!(c->max_bad_ratio >= 0 && c->max_bad_ratio <= 1))
        bad = "max_bad_ratio: must be 0..1";
    else if (c->layout != TD_LAYOUT_NHWC && c->layout != TD_LAYOUT_NCHW)
        bad = "layout: must be NHWC or NCHW";
    else if (c->n_augment < 0 || c->n_augment > TD_AUG_MAX)
        bad = "augment: too many ops";
    if (bad) {
        snprintf(err, ecap, "input.%s", bad);
        return -EINVAL;
    }
    return td_augment_validate(c->augment, c->n_augment, err, ecap);
}

static int td__alloc_ring(td_pipeline *p)
{
    size_t B = (size_t)p->cfg.batch_size;
    p->slots = calloc((size_t)p->nslots, sizeof *p->slots);
    p->perms = calloc((size_t)p->nperms, sizeof *p->perms);
    p->bad = calloc(p->n, 1);
    p->workers = aligned_alloc(64, sizeof(struct td__worker) *
                                       TD_PIPELINE_MAX_WORKERS);
    if (!p->slots || !p->perms || !p->bad || !p->workers)
        return -ENOMEM;
    memset(p->workers, 0, sizeof(struct td__worker) * TD_PIPELINE_MAX_WORKERS);
    for (int i = 0; i < p->nslots; i++) {
        struct td__slot *s = &p->slots[i];
        s->data = p->cfg.alloc.alloc(p->cfg.alloc.user, B * p->sample_bytes);
        s->labels = p->cfg.alloc.alloc(p->cfg.alloc.user, B * sizeof(int32_t));
        if (!s->data || !s->labels)
            return -ENOMEM;
        s->seq = -1;
    }
    for (int i = 0; i < p->nperms && p->cfg.train; i++) {
        p->perms[i].epoch = -1;
        if (!(p->perms[i].perm = malloc(p->n * sizeof(uint32_t))))
            return -ENOMEM;
    }
    return 0;
}

int td_pipeline_create(const td_pipeline_config *cfg, td_pipeline **out,
                       char *err, size_t errcap)
{
    char dummy[8];
    if (!err || !errcap) {
        err = dummy;
        errcap = sizeof dummy;
    }
    err[0] = '\0';
    if (!cfg || !out)
        return -EINVAL;
    int rc = td__check_config(cfg, err, errcap);
    td_pipeline *p = rc ? NULL : calloc(1, sizeof *p);
    if (!p) { /* the dataset was given to us: ours to close */
        td_dataset_close(cfg->dataset);
        return rc ? rc : -ENOMEM;
    }
    p->cfg = *cfg;
    p->cfg.dataset = NULL;
    p->cfg.data = NULL; /* not kept: the caller's string */
    if (!p->cfg.alloc.alloc) {
        p->cfg.alloc.alloc = td__default_alloc;
        p->cfg.alloc.free = td__default_free;
    }
    if (!p->cfg.max_workers) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        int mw = 2 * cfg->workers > cpus ? 2 * cfg->workers : (int)cpus;
        p->cfg.max_workers = mw > TD_PIPELINE_MAX_WORKERS
                                 ? TD_PIPELINE_MAX_WORKERS : mw;
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work_cv, NULL);
    pthread_cond_init(&p->ready_cv, NULL);
    td_fscred_saved cred;
    if (cfg->dataset) { /* opened (as the user) by the caller */
        p->ds = cfg->dataset;
    } else if ((rc = td_fscred_enter(cfg->cred, &cred)) != 0) {
        snprintf(err, errcap, "%s: cannot read as uid %u: %s", cfg->data,
                 (unsigned)cfg->cred->uid, td_strerror(rc));
        goto fail;
    } else {
        rc = td_dataset_open(cfg->data, &p->ds, err, errcap);
        td_fscred_leave(&cred);
        if (rc != 0) {
            if ((rc == -EACCES || rc == -EPERM) && cfg->cred &&
                cfg->cred->set)
                snprintf(err, errcap, "%s is not readable by uid %u",
                         cfg->data, (unsigned)cfg->cred->uid);
            goto fail;
        }
    }
    p->n = td_dataset_count(p->ds);
    if (p->n > UINT32_MAX) {
        rc = -EOVERFLOW;
        snprintf(err, errcap, "%s: more than 2^32 samples", cfg->data);
        goto fail;
    }
    size_t B = (size_t)cfg->batch_size;
    p->bpe = (int64_t)(cfg->drop_last ? p->n / B : (p->n + B - 1) / B);
    if (p->bpe == 0) {
        rc = -EINVAL;
        snprintf(err, errcap, "%s%s%zu samples, fewer than one batch of %d "
                 "(drop_last)", cfg->data ? cfg->data : "",
                 cfg->data ? ": " : "", p->n, cfg->batch_size);
        goto fail;
    }
    p->sample_bytes = (size_t)cfg->size[0] * (size_t)cfg->size[1] *
                      (size_t)cfg->channels;
    p->nslots = cfg->max_prefetch ? cfg->max_prefetch : cfg->prefetch;
    p->depth = cfg->prefetch;
    p->nperms = p->nslots + 2;
    p->active = cfg->workers;
    if ((rc = td__alloc_ring(p)) != 0) {
        snprintf(err, errcap, "cannot allocate %d batch slots of %zu bytes",
                 p->nslots, B * p->sample_bytes);
        goto fail;
    }
    pthread_mutex_lock(&p->mu);
    for (int i = 0; i < cfg->workers && rc == 0; i++)
        rc = td__worker_start(p, i);
    pthread_mutex_unlock(&p->mu);
    if (rc) {
        snprintf(err, errcap, "cannot start decode workers: %s",
                 td_strerror(rc));
        goto fail;
    }
    *out = p;
    return 0;
fail:
    td_pipeline_destroy(p);
    return rc;
}

void td_pipeline_destroy(td_pipeline *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->quitting = 1;
    p->stopped = 1;
    pthread_cond_broadcast(&p->work_cv);
    pthread_cond_broadcast(&p->ready_cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; p->workers && i < p->nthreads; i++) {
        pthread_join(p->workers[i].th, NULL);
        td_decoder_destroy(p->workers[i].dec);
        td_png_free(&p->workers[i].png);
        td_resampler_free(&p->workers[i].rs);
        td_buf_free(&p->workers[i].buf);
    }
    for (int i = 0; p->slots && i < p->nslots; i++) {
        if (p->slots[i].data)
            p->cfg.alloc.free(p->cfg.alloc.user, p->slots[i].data);
        if (p->slots[i].labels)
            p->cfg.alloc.free(p->cfg.alloc.user, p->slots[i].labels);
    }
    for (int i = 0; p->perms && i < p->nperms; i++)
        free(p->perms[i].perm);
    free(p->perms);
    free(p->slots);
    free(p->workers);
    free((void *)p->bad);
    td_dataset_close(p->ds);
    pthread_cond_destroy(&p->work_cv);
    pthread_cond_destroy(&p->ready_cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

/* ---- the consumer ----------------------------------------------------- */

int td_pipeline_start(td_pipeline *p, int64_t epoch, int64_t step)
{
    if (epoch < 0 || step < 0 || step >= p->bpe)
        return -EINVAL;
    pthread_mutex_lock(&p->mu);
    if (p->held) {
        pthread_mutex_unlock(&p->mu);
        return -EBUSY;
    }
    p->running = 0;
    while (p->busy)
        pthread_cond_wait(&p->ready_cv, &p->mu);
    int64_t seq = epoch * p->bpe + step;
    for (int i = 0; i < p->nslots; i++) {
        struct td__slot *s = td__slot_of(p, seq + i);
        s->seq = seq + i;
        s->done = 0;
        s->out = 0;
    }
    p->claim_seq = p->next_seq = seq;
    p->claim_chunk = 0;
    p->fatal = p->cred_rc;
    p->stopped = 0;
    p->running = 1;
    pthread_cond_broadcast(&p->work_cv);
    pthread_mutex_unlock(&p->mu);
    return 0;
}

int td_pipeline_next(td_pipeline *p, td_batch *b, int64_t *wait_ns)
{
    int64_t t0 = td_now_ns(), starved_from = 0;
    int rc = 0;
    pthread_mutex_lock(&p->mu);
    struct td__slot *s = td__slot_of(p, p->next_seq);
    for (;;) {
        if (p->stopped) {
            rc = TD_E_CLOSED;
            break;
        }
        if (p->fatal) {
            rc = p->fatal;
            break;
        }
        if (!p->running) {
            rc = -EINVAL;
            break;
        }
        if (s->seq == p->next_seq && !s->out &&
            s->done == td__chunks(p, p->next_seq))
            break;
        if (!starved_from)
            starved_from = td_now_ns();
        pthread_cond_wait(&p->ready_cv, &p->mu);
    }
    int moved = 0;
    if (rc == 0) {
        int64_t seq = p->next_seq++;
        s->out = 1;
        p->held++;
        td__trace_ready(p);
        moved = p->depth < p->nslots; /* the work window moved */
        *b = (td_batch){.data = s->data, .labels = s->labels,
                        .n = td__batch_n(p, seq), .h = p->cfg.size[0],
                        .w = p->cfg.size[1], .c = p->cfg.channels,
                        .layout = p->cfg.layout, .epoch = seq / p->bpe,
                        .step = seq % p->bpe,
                        .last_in_epoch = seq % p->bpe == p->bpe - 1,
                        .slot = s};
    }
    pthread_mutex_unlock(&p->mu);
    /* After the unlock: a woken worker does not block on the lock it
     * would otherwise find held. */
    if (moved)
        pthread_cond_broadcast(&p->work_cv);
    int64_t now = td_now_ns(), waited = now - t0;
    atomic_fetch_add_explicit(&p->consumer_wait_ns, waited,
                              memory_order_relaxed);
    if (starved_from)
        atomic_fetch_add_explicit(&p->starved_ns, now - starved_from,
                                  memory_order_relaxed);
    if (rc == 0)
        atomic_fetch_add_explicit(&p->batches, 1, memory_order_relaxed);
    if (wait_ns)
        *wait_ns = waited;
    return rc;
}

void td_pipeline_release(td_pipeline *p, td_batch *b)
{
    struct td__slot *s = b ? b->slot : NULL;
    if (!s)
        return;
    pthread_mutex_lock(&p->mu);
    if (s->out) {
        s->out = 0;
        s->done = 0;
        s->seq += p->nslots;
        p->held--;
        pthread_cond_broadcast(&p->work_cv);
    }
    pthread_mutex_unlock(&p->mu);
    b->slot = NULL;
}

void td_pipeline_stop(td_pipeline *p)
{
    pthread_mutex_lock(&p->mu);
    p->stopped = 1;
    p->running = 0;
    pthread_cond_broadcast(&p->ready_cv);
    pthread_cond_broadcast(&p->work_cv);
    pthread_mutex_unlock(&p->mu);
}

int td_pipeline_set_workers(td_pipeline *p, int n)
{
    int rc = 0;
    pthread_mutex_lock(&p->mu);
    if (n < 1 || n > p->cfg.max_workers) {
        rc = -EINVAL;
    } else {
        while (p->nthreads < n && rc == 0)
            rc = td__worker_start(p, p->nthreads);
        p->active = rc ? p->nthreads : n;
        pthread_cond_broadcast(&p->work_cv);
    }
    pthread_mutex_unlock(&p->mu);
    return rc;
}

int td_pipeline_set_prefetch(td_pipeline *p, int n)
{
    if (n < 1 || n > p->nslots)
        return -EINVAL;
    pthread_mutex_lock(&p->mu);
    p->depth = n;
    pthread_cond_broadcast(&p->work_cv);
    pthread_mutex_unlock(&p->mu);
    return 0;
}

/* ---- the batch-source adapter and stats ------------------------------- */

static int td__src_start(void *self, int64_t epoch, int64_t step)
{
    return td_pipeline_start(self, epoch, step);
}

static int td__src_next(void *self, td_batch *b, int64_t *wait_ns)
{
    return td_pipeline_next(self, b, wait_ns);
}

static void td__src_release(void *self, td_batch *b)
{
    td_pipeline_release(self, b);
}

td_batch_source td_pipeline_source(td_pipeline *p)
{
    return (td_batch_source){td__src_start, td__src_next, td__src_release, p};
}

void td_pipeline_bad_summary(td_pipeline *p, char *buf, size_t cap)
{
    pthread_mutex_lock(&p->mu);
    snprintf(buf, cap, "%lld bad sample(s) out of %zu, past max_bad_ratio "
             "%.4g; the latest: %s",
             (long long)atomic_load_explicit(&p->bad_count,
                                             memory_order_relaxed),
             p->n, p->cfg.max_bad_ratio, p->last_bad[0] ? p->last_bad : "?");
    pthread_mutex_unlock(&p->mu);
}

void td_pipeline_stats_get(td_pipeline *p, td_pipeline_stats *s)
{
    memset(s, 0, sizeof *s);
    pthread_mutex_lock(&p->mu);
    int nt = p->nthreads;
    s->workers = p->active;
    s->prefetch = p->depth;
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < nt; i++) {
        struct td__worker *w = &p->workers[i];
        s->read_ns += atomic_load_explicit(&w->read_ns, memory_order_relaxed);
        s->decode_ns += atomic_load_explicit(&w->decode_ns,
                                             memory_order_relaxed);
        s->augment_ns += atomic_load_explicit(&w->augment_ns,
                                              memory_order_relaxed);
        s->slot_wait_ns += atomic_load_explicit(&w->slot_wait_ns,
                                                memory_order_relaxed);
        s->samples += atomic_load_explicit(&w->samples, memory_order_relaxed);
        s->decoded_bytes += atomic_load_explicit(&w->bytes,
                                                 memory_order_relaxed);
    }
    s->consumer_wait_ns = atomic_load_explicit(&p->consumer_wait_ns,
                                               memory_order_relaxed);
    s->starved_ns = atomic_load_explicit(&p->starved_ns, memory_order_relaxed);
    s->batches = atomic_load_explicit(&p->batches, memory_order_relaxed);
    s->bad_samples = atomic_load_explicit(&p->bad_count, memory_order_relaxed);
}

int td_pipeline_drain(td_pipeline *p, int64_t first_epoch, int epochs,
                      int64_t *images, double *seconds)
{
    return td_pipeline_drain_progress(p, first_epoch, epochs, images,
                                      seconds, NULL, NULL);
}

int td_pipeline_drain_progress(td_pipeline *p, int64_t first_epoch,
                               int epochs, int64_t *images, double *seconds,
                               void (*progress)(void *user, int64_t images,
                                                int64_t total),
                               void *user)
{
    int64_t n = 0, t0 = td_now_ns();
    /* an epoch's batches hold every sample but the dropped tail */
    int64_t per = p->cfg.drop_last
                      ? p->bpe * (int64_t)p->cfg.batch_size
                      : (int64_t)p->n;
    int rc = td_pipeline_start(p, first_epoch, 0);
    if (rc == 0 && progress)
        progress(user, 0, per * epochs);
    for (int64_t i = 0; rc == 0 && i < epochs * p->bpe; i++) {
        td_batch b;
        rc = td_pipeline_next(p, &b, NULL);
        if (rc == 0) {
            n += b.n;
            td_pipeline_release(p, &b);
            if (progress)
                progress(user, n, per * epochs);
        }
    }
    if (images)
        *images = n;
    if (seconds)
        *seconds = td_elapsed_s(t0);
    return rc;
}

size_t td_pipeline_dataset_size(const td_pipeline *p) { return p->n; }
size_t td_pipeline_left_out(const td_pipeline *p, const char **first)
{
    return td_dataset_left_out(p->ds, first);
}
int64_t td_pipeline_batches_per_epoch(const td_pipeline *p) { return p->bpe; }
int td_pipeline_classes(const td_pipeline *p)
{
    return td_dataset_classes(p->ds);
}

const char *td_pipeline_class_name(const td_pipeline *p, int label)
{
    return td_dataset_class_name(p->ds, label);
}
