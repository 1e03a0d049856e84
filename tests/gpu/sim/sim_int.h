/* sim_int.h - internals shared by the simulated CUDA device's files.
 *
 * Owns: the simulator's state (devices, device allocations, pinned host
 * ranges, streams with their worker threads and queues, events, vector
 * clocks) and the contracts between its files:
 *   sim_runtime.c  configuration, devices, errors, memory
 *   sim_copy.c     copies and memsets
 *   sim_stream.c   streams, workers, events, host functions, syncs, the
 *                  kernel launch entry (td_sim_launch), jitter, faults
 *   sim_race.c     the stream-order race detector (vector clocks)
 *   sim_graph.c    stream capture, CUDA graphs and their launches, and
 *                  what capture forbids
 *   sim_count.c    kernel runs counted by name
 *   sim_cublas.c   the cuBLAS subset (Sgemm)
 *   sim_cudnn.c    cuDNN handles, descriptors, algorithm queries
 *   sim_cudnn_ops.c cuDNN's arithmetic (convolution, add) and how its
 *                  operations run
 *   sim_cudnn_norm.c cuDNN's batch norm, activation and pooling
 * Never does: anything outside tests.  This code is linked into test
 * executables in place of libcudart, libcublas and libcudnn, never into
 * traind or trainctl.
 *
 * Locking: one mutex (td__sim.mu) guards everything here; one condition
 * variable (td__sim.cv) is broadcast whenever a stream completes an
 * operation.  Stream workers drop the mutex while they run an operation,
 * so device work runs concurrently with the host and with other streams,
 * as on a GPU.
 */
#ifndef TD_SIM_INT_H
#define TD_SIM_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "sim.h"

#define TD_SIM_MAX_DEVICES 8
#define TD_SIM_MAX_STREAMS 256 /* ever created, per reset (vector clocks) */

typedef uint64_t td_sim_vc[TD_SIM_MAX_STREAMS];

/* One access record of the race detector. */
typedef struct td_sim_rec {
    size_t off, len;        /* byte range within the allocation */
    int stream;             /* stream id */
    uint64_t epoch;         /* the stream's operation count at the access */
    int write;
    const char *what;       /* API call or kernel name */
    const void *caller;     /* return address in the caller */
} td_sim_rec;

/* One device allocation (cudaMalloc) or pinned host range. */
typedef struct td_sim_alloc {
    char *base;
    size_t bytes;
    int dev;                /* device allocations: owner; host: -1 */
    int registered;         /* host: cudaHostRegister (not ours to free) */
    td_sim_rec *rec;        /* race records (device allocations) */
    int nrec, caprec;
} td_sim_alloc;

enum td_sim_op_kind { TD_SIM_OP_RUN, TD_SIM_OP_WAIT, TD_SIM_OP_RECORD };

typedef struct td_sim_op {
    struct td_sim_op *next;
    enum td_sim_op_kind kind;
    void (*run)(void *ctx);      /* RUN */
    void (*drop)(void *ctx);     /* RUN: frees ctx afterwards (may be NULL) */
    void *ctx;
    int hostfn;                  /* RUN: a cudaLaunchHostFunc callback */
    int fault;                   /* RUN: illegal address: 1 injected,
                                  * 2 a pointer of no/another device */
    const char *what;
    struct CUstream_st *ws;      /* WAIT: until ws->done >= wseq */
    uint64_t wseq;
    struct CUevent_st *ev;       /* RECORD: timestamp ev if still its seq */
    uint64_t seq;                /* this operation's number on its stream */
    struct td_sim_body *body;    /* RUN of a graph launch: the graph's
                                  * nodes, released after the run */
    uint64_t *after;             /* RUN that raced: runs only once every
                                  * stream i has done after[i] (NULL: no) */
} td_sim_op;

/* A capture in progress (sim_graph.c). */
struct td_sim_capture;

struct CUstream_st {
    int id;                /* index into vector clocks */
    int dev;
    unsigned flags;        /* cudaStreamNonBlocking or 0 */
    int legacy;            /* the device's legacy default stream */
    int dead;              /* destroyed: handle invalid */
    int quit;
    pthread_t th;
    td_sim_op *head, *tail;
    uint64_t enq, done;    /* operations enqueued, completed */
    td_sim_vc vc;          /* what this stream's next operation follows */
    uint64_t rng;          /* jitter state */
    struct td_sim_capture *cap; /* capturing into it; NULL: not */
    uint64_t cap_ops;      /* operations this stream captured */
    int cap_joined;        /* forked stream joined back to the origin */
    td_sim_vc race_after;  /* the operation being enqueued raced with
                            * these (sim_race.c); moved to it at push */
    int race_pending;
};

struct CUevent_st {
    int dev;
    unsigned flags;
    int dead;
    struct CUstream_st *s; /* stream of the last record; NULL: never */
    uint64_t seq;          /* that record's operation number */
    uint64_t t_ns;         /* when it executed (CLOCK_MONOTONIC) */
    td_sim_vc vc;          /* clock of the stream at the record */
    uint64_t cap_id;       /* last recorded inside capture cap_id; 0: no */
    struct CUstream_st *cap_s; /* ... on this stream */
    uint64_t cap_pos;      /* ... after this many of its captured ops */
};

typedef struct td_sim_dev {
    size_t cap, used;
    struct CUstream_st *legacy;
    cudaError_t sticky;    /* cudaSuccess until a fault */
    unsigned flags;        /* cudaSetDeviceFlags */
    /* activity: calls that need the device's context (cudaSetDevice makes
     * it since CUDA 12, and any call with the device current), kernel
     * and library launches on its streams, the most memory it held */
    long calls, launches;
    long pageable_d2h;     /* cudaMemcpyAsync to pageable memory: blocked */
    long pageable_h2d;     /* cudaMemcpyAsync from pageable memory: staged */
    size_t peak;
    int cc_major, cc_minor; /* compute capability (TD_SIM_CC) */
} td_sim_dev;

typedef struct td_sim_state {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int init;
    int ndev;
    td_sim_dev dev[TD_SIM_MAX_DEVICES];
    struct CUstream_st *streams[TD_SIM_MAX_STREAMS];
    int nstreams;
    struct CUevent_st **events;   /* every event ever created (freed at reset) */
    int nevents, capevents;
    td_sim_alloc *dmem;           /* device allocations, sorted by base */
    int ndmem, capdmem;
    td_sim_alloc *hmem;           /* pinned host ranges, sorted by base */
    int nhmem, caphmem;
    td_sim_vc host;               /* what the host has seen complete */
    /* configuration (environment, read at init and td_sim_reset) */
    uint64_t jitter;              /* 0: off, else the seed */
    long oom_launch_in;           /* td_sim_oom_launch_in: launches until
                                   * one fails (out of memory); 0 off */
    long oom_at;                  /* fail the Nth cudaMalloc (1-based) */
    long fault_kernel;            /* a sticky fault at the Nth launch */
    cudaError_t fault_error;      /* TD_SIM_FAULT_ERROR: which one
                                   * (cudaErrorIllegalAddress) */
    int race_mode;                /* 0 off, 1 report, 2 strict (abort) */
    size_t pinned_cap;            /* TD_SIM_PINNED_KB: page-locked limit */
    size_t pinned_used;           /* bytes page-locked now */
    uint64_t clock_skew;          /* td_sim_advance_clock: ns added to
                                   * every event time */
    /* counters */
    long mallocs, launches, races, spin_waits;
    long host_allocs;             /* cudaHostAlloc and cudaHostRegister */
    long host_funcs;              /* cudaLaunchHostFunc calls */
    long stream_syncs;            /* cudaStreamSynchronize and
                                   * cudaDeviceSynchronize calls */
    long graph_captures;          /* cudaStreamEndCapture that made a graph */
    long graph_launches;          /* cudaGraphLaunch calls accepted */
} td_sim_state;

extern td_sim_state td__sim;

/* ---- sim_runtime.c ------------------------------------------------------- */
/* Lazy initialisation; takes the mutex.  Every API entry starts here. */
void td__sim_lock(void);
void td__sim_unlock(void);
/* sim_count.c: a kernel launch or replay of kernel `name` (under the
 * mutex) */
void td__sim_count_kernel(const char *name);
/* The calling thread's current device. */
int td__sim_cur(void);
/* Sets the calling thread's last error when e is an error; returns e. */
cudaError_t td__sim_err(cudaError_t e);
/* Checks common to every call (called with the mutex held): inside a host
 * function -> cudaErrorNotPermitted; a sticky error on the current device. */
cudaError_t td__sim_gate(void);
/* Device allocation containing [p, p + n), or NULL. */
td_sim_alloc *td__sim_dfind(const void *p, size_t n);
/* Pinned host range containing [p, p + n), or NULL. */
td_sim_alloc *td__sim_hfind(const void *p, size_t n);
/* Device allocation p starts inside (even if p + n overruns), or NULL. */
td_sim_alloc *td__sim_dstart(const void *p);
/* Prints one diagnostic line to stderr ("td-sim: ..."). */
void td__sim_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void td__sim_where(const void *caller, char *out, size_t cap);

/* ---- sim_stream.c --------------------------------------------------------- */
extern __thread int td__sim_in_hostfn;
/* The stream an API call means (NULL / legacy / per-thread -> the current
 * device's legacy stream); NULL for a dead or foreign handle. */
struct CUstream_st *td__sim_stream(cudaStream_t s);
/* Mutex held.  A call's first checks: td__sim_gate(), then stream h;
 * NULL with *e set where the gate refuses or h is no stream
 * (cudaErrorInvalidResourceHandle). */
struct CUstream_st *td__sim_gate_stream(cudaStream_t h, cudaError_t *e);
/* Prepares a new operation on s: implicit legacy-stream waits, the host's
 * clock, the stream's own epoch.  Returns the operation (not yet queued);
 * the race detector sees s->vc as it will be for it. */
td_sim_op *td__sim_op_new(struct CUstream_st *s, enum td_sim_op_kind kind);
void td__sim_op_push(struct CUstream_st *s, td_sim_op *op);
/* Blocks the host until s has completed operation seq, then makes the
 * host's clock include vc (may be NULL).  Mutex held. */
void td__sim_wait(struct CUstream_st *s, uint64_t seq, const uint64_t *vc,
                  int spin);
void td__sim_join(uint64_t *dst, const uint64_t *src);
void td__sim_streams_free(void);
/* Waits for every stream of dev and joins their clocks into the host's. */
void td__sim_drain_dev(int dev);

/* ---- sim_graph.c ---------------------------------------------------------- */
/* Mutex held.  cudaSuccess, or cudaErrorStreamCaptureUnsupported (with a
 * diagnostic naming `call`, and the captures that forbid it invalidated)
 * when the calling thread may not make a "potentially unsafe" call now:
 * it has a capture of its own not begun in relaxed mode, or another
 * thread has one begun in global mode. */
cudaError_t td__sim_unsafe(const char *call);
/* Mutex held.  Refuses `call` on the capturing stream s: prints why,
 * invalidates the capture, returns e. */
cudaError_t td__sim_cap_refuse(struct CUstream_st *s, const char *call,
                               const char *why, cudaError_t e);
/* Mutex held, s capturing.  Appends a node to the capture's graph instead
 * of running it (fault: 2 when a kernel pointer is not memory of the
 * device, kernel: counts for TD_SIM_FAULT_KERNEL at each replay).  On an
 * error (the capture was invalidated) the caller still owns ctx. */
cudaError_t td__sim_cap_node(struct CUstream_st *s, const char *what,
                             void (*run)(void *), void (*drop)(void *),
                             void *ctx, const td_sim_range *r, int n,
                             int fault, int kernel, const void *caller);
/* td__sim_cap_node for a copy or memset: dst written and src read when
 * they are device memory (else NULL); on an error ctx is dropped. */
cudaError_t td__sim_cap_copy(struct CUstream_st *s, const char *call,
                             void (*run)(void *), void (*drop)(void *),
                             void *ctx, const void *dst, const void *src,
                             size_t n, const void *caller);
/* Mutex held: cudaEventRecord on a capturing stream (no node: marks ev),
 * and cudaStreamWaitEvent on ev by s when either side is in a capture
 * (*handled = 1; else the caller enqueues an ordinary wait). */
cudaError_t td__sim_cap_record(struct CUevent_st *ev,
                               struct CUstream_st *s);
cudaError_t td__sim_cap_wait(struct CUstream_st *s, struct CUevent_st *ev,
                             unsigned flags, int *handled);
/* Mutex held, from the stream worker: one reference to a launched graph's
 * nodes is done; returns 1 when it was the last (then td__sim_body_free
 * after dropping the mutex). */
int td__sim_body_unref(struct td_sim_body *b);
/* The name (name 1) or description of a stream-capture error (900-908,
 * cudaErrorIllegalState); "cudaErrorUnknown" / "unknown error" else. */
const char *td__sim_cap_error(cudaError_t e, int name);
void td__sim_body_free(struct td_sim_body *b);

/* ---- sim_race.c ----------------------------------------------------------- */
/* Records an access by the operation about to be queued on s and reports
 * (in report or strict mode) an earlier conflicting access on another
 * stream that is not ordered before it.  Mutex held. */
void td__sim_race(td_sim_alloc *a, const void *p, size_t n, int write,
                  struct CUstream_st *s, const char *what,
                  const void *caller);

/* Compute capability (10 major + minor) of device d, read under the
 * simulator's lock: what decides whether a TF32 math mode computes in
 * TF32 (8.0 and newer) or in fp32 (older GPUs have no TF32 units). */
int td__sim_cc(int d);
/* The math counters of sim_cublas.c and sim_cudnn_ops.c (sim.h). */
void td__sim_math_count(int blas, int math, int tf32);
/* A GEMM accepted (sim_cublas.c, sim_cublaslt.c): counted by the math
 * (cublasMath_t) it ran with, whether in TF32, and its A and B type
 * (0 fp32, 1 bf16, 2 fp16: td_sim_blas_typed). */
void td__sim_blas_count(int math, int tf32, int at);

#endif
