/* test_sim.c - the simulated CUDA device's own suite: what the CUDA
 * backend's tests rely on it for.
 *
 * Streams run in order and concurrently with each other; events
 * (record, query, synchronize, elapsed time) and cudaStreamWaitEvent order
 * work across streams; the legacy default stream synchronises with
 * blocking streams only; host functions run in stream order and may not
 * call CUDA; copies block the host exactly where the CUDA documentation
 * says (pageable memory) and stage pageable sources at the call; device
 * memory has a capacity, fails past it, and starts as NaN; the race
 * detector reports an unordered write/read pair across two streams with
 * both call sites and stays quiet when an event or a host sync orders
 * them; injected faults are sticky; pointers and streams of another
 * device are refused.  Its cuBLAS and cuDNN: test_sim_libs.c.
 *
 * A "gate" is a host function that blocks its stream until the test
 * opens it: it makes "not yet" observable without timing assumptions.
 * Each test runs in its own process (Check's fork mode) and configures
 * the simulator through the environment and td_sim_reset. */
#include <cublas_v2.h>
#include <cudnn.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ref_layers.h"
#include "sim.h"
#include "tdtest.h"

#define CU(call) ck_assert_int_eq((call), cudaSuccess)
#define BL(call) ck_assert_int_eq((call), CUBLAS_STATUS_SUCCESS)
#define DN(call) ck_assert_int_eq((call), CUDNN_STATUS_SUCCESS)

static void sim_env(const char *name, const char *value)
{
    if (value)
        setenv(name, value, 1);
    else
        unsetenv(name);
    ck_assert_int_eq(td_sim_reset(), 0);
}

/* ---- gates ------------------------------------------------------------------ */

typedef struct gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int open, entered;
} gate;

static void gate_init(gate *g)
{
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->open = g->entered = 0;
}

static void CUDART_CB gate_fn(void *p)
{
    gate *g = p;
    pthread_mutex_lock(&g->mu);
    g->entered = 1;
    pthread_cond_broadcast(&g->cv);
    while (!g->open)
        pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
}

static void gate_wait_entered(gate *g)
{
    pthread_mutex_lock(&g->mu);
    while (!g->entered)
        pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
}

static void gate_open(gate *g)
{
    pthread_mutex_lock(&g->mu);
    g->open = 1;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

static void *open_later(void *p)
{
    usleep(20000);
    gate_open(p);
    return NULL;
}

/* ---- streams, events, host functions ------------------------------------------ */

typedef struct order_log {
    int n, seen[64];
} order_log;

typedef struct order_arg {
    order_log *log;
    int i;
} order_arg;

static void CUDART_CB log_fn(void *p)
{
    order_arg *a = p;
    a->log->seen[a->log->n++] = a->i;
}

START_TEST(test_stream_runs_in_order_under_jitter)
{
    sim_env("TD_SIM_JITTER", "7");
    cudaStream_t s;
    order_log log = {0};
    order_arg args[64];
    CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (int i = 0; i < 64; i++) {
        args[i] = (order_arg){&log, i};
        CU(cudaLaunchHostFunc(s, log_fn, &args[i]));
    }
    CU(cudaStreamSynchronize(s));
    ck_assert_int_eq(log.n, 64);
    for (int i = 0; i < 64; i++)
        ck_assert_int_eq(log.seen[i], i);
    CU(cudaStreamDestroy(s));
}
END_TEST

START_TEST(test_streams_are_concurrent)
{
    cudaStream_t a, b;
    gate g;
    gate_init(&g);
    CU(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    CU(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    float *d;
    CU(cudaMalloc((void **)&d, 64));
    CU(cudaLaunchHostFunc(a, gate_fn, &g));
    CU(cudaMemsetAsync(d, 0, 64, b));
    /* b finishes while a is blocked */
    CU(cudaStreamSynchronize(b));
    ck_assert_int_eq(cudaStreamQuery(a), cudaErrorNotReady);
    /* kept as the thread's last error (the strict reading, which
     * PyTorch's queries assume: they clear it), until it is taken */
    ck_assert_int_eq(cudaPeekAtLastError(), cudaErrorNotReady);
    ck_assert_int_eq(cudaGetLastError(), cudaErrorNotReady);
    ck_assert_int_eq(cudaGetLastError(), cudaSuccess);
    gate_open(&g);
    CU(cudaStreamSynchronize(a));
    CU(cudaStreamQuery(a));
    CU(cudaFree(d));
    CU(cudaStreamDestroy(a));
    CU(cudaStreamDestroy(b));
}
END_TEST

START_TEST(test_events_record_query_sync_elapsed)
{
    cudaStream_t s;
    cudaEvent_t e0, e1, never, notime;
    gate g;
    float ms = -1;
    gate_init(&g);
    CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CU(cudaEventCreate(&e0));
    CU(cudaEventCreate(&e1));
    CU(cudaEventCreate(&never));
    CU(cudaEventCreateWithFlags(&notime, cudaEventDisableTiming));
    CU(cudaEventQuery(never)); /* never recorded: complete */
    CU(cudaEventSynchronize(never));
    CU(cudaEventRecord(e0, s));
    CU(cudaLaunchHostFunc(s, gate_fn, &g));
    CU(cudaEventRecord(e1, s));
    CU(cudaEventRecord(notime, s));
    ck_assert_int_eq(cudaEventQuery(e1), cudaErrorNotReady);
    ck_assert_int_eq(cudaEventElapsedTime(&ms, e0, e1), cudaErrorNotReady);
    ck_assert_int_eq(cudaEventElapsedTime(&ms, e0, never),
                     cudaErrorInvalidResourceHandle);
    gate_wait_entered(&g); /* so e0 has run: it precedes the gate */
    usleep(20000);
    gate_open(&g);
    CU(cudaEventSynchronize(e1));
    CU(cudaEventQuery(e1));
    CU(cudaEventElapsedTime(&ms, e0, e1));
    ck_assert_msg(ms >= 19.0f, "elapsed %.3f ms across a 20 ms gate", ms);
    ck_assert_int_eq(cudaEventElapsedTime(&ms, e0, notime),
                     cudaErrorInvalidResourceHandle);
    CU(cudaStreamSynchronize(s));
    cudaEvent_t all[] = {e0, e1, never, notime};
    for (int i = 0; i < 4; i++)
        CU(cudaEventDestroy(all[i]));
    ck_assert_int_eq(cudaEventQuery(e0), cudaErrorInvalidResourceHandle);
    CU(cudaStreamDestroy(s));
}
END_TEST

/* b waits for a's event: b's copy sees what a wrote after its gate. */
START_TEST(test_stream_wait_event_orders_streams)
{
    cudaStream_t a, b;
    cudaEvent_t ev;
    gate g;
    float *x, *y, host[16], out[16];
    gate_init(&g);
    for (int i = 0; i < 16; i++)
        host[i] = (float)i;
    CU(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    CU(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    CU(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    CU(cudaMalloc((void **)&x, sizeof host));
    CU(cudaMalloc((void **)&y, sizeof host));
    CU(cudaLaunchHostFunc(a, gate_fn, &g));
    CU(cudaMemcpyAsync(x, host, sizeof host, cudaMemcpyHostToDevice, a));
    CU(cudaEventRecord(ev, a));
    CU(cudaStreamWaitEvent(b, ev, 0));
    CU(cudaMemcpyAsync(y, x, sizeof host, cudaMemcpyDeviceToDevice, b));
    /* re-recording after the wait does not change what b waits for */
    CU(cudaEventRecord(ev, b));
    ck_assert_int_eq(cudaStreamQuery(b), cudaErrorNotReady);
    gate_open(&g);
    CU(cudaStreamSynchronize(b));
    CU(cudaMemcpy(out, y, sizeof out, cudaMemcpyDeviceToHost));
    ck_assert_int_eq(memcmp(out, host, sizeof out), 0);
    CU(cudaFree(x));
    CU(cudaFree(y));
    CU(cudaEventDestroy(ev));
    CU(cudaStreamDestroy(a));
    CU(cudaStreamDestroy(b));
}
END_TEST

/* The legacy stream waits for blocking streams and they for it; a
 * non-blocking stream does neither. */
START_TEST(test_legacy_stream_semantics)
{
    cudaStream_t blocking, nonblocking;
    gate g;
    float *d;
    gate_init(&g);
    CU(cudaStreamCreate(&blocking));
    CU(cudaStreamCreateWithFlags(&nonblocking, cudaStreamNonBlocking));
    CU(cudaMalloc((void **)&d, 64));
    CU(cudaLaunchHostFunc(0, gate_fn, &g)); /* the legacy stream */
    CU(cudaMemsetAsync(d, 0, 64, nonblocking));
    CU(cudaStreamSynchronize(nonblocking));
    CU(cudaMemsetAsync(d, 1, 64, blocking));
    ck_assert_int_eq(cudaStreamQuery(blocking), cudaErrorNotReady);
    gate_open(&g);
    CU(cudaStreamSynchronize(blocking));
    /* and legacy work waits for a blocked blocking stream */
    gate g2;
    gate_init(&g2);
    CU(cudaLaunchHostFunc(blocking, gate_fn, &g2));
    CU(cudaMemsetAsync(d, 2, 64, 0));
    ck_assert_int_eq(cudaStreamQuery(0), cudaErrorNotReady);
    gate_open(&g2);
    CU(cudaDeviceSynchronize());
    CU(cudaFree(d));
    CU(cudaStreamDestroy(blocking));
    CU(cudaStreamDestroy(nonblocking));
}
END_TEST

typedef struct cb_arg {
    const float *pinned;
    float sum;
    cudaError_t inner;
} cb_arg;

static void CUDART_CB sum_fn(void *p)
{
    cb_arg *a = p;
    for (int i = 0; i < 8; i++)
        a->sum += a->pinned[i];
    void *q = NULL;
    a->inner = cudaMalloc(&q, 16); /* forbidden in a host function */
}

START_TEST(test_host_function_runs_in_stream_order)
{
    cudaStream_t s;
    float *d, *pin, src[8];
    cb_arg arg = {0};
    for (int i = 0; i < 8; i++)
        src[i] = (float)(i + 1);
    CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CU(cudaMalloc((void **)&d, sizeof src));
    CU(cudaHostAlloc((void **)&pin, sizeof src, cudaHostAllocDefault));
    memset(pin, 0, sizeof src);
    CU(cudaMemcpyAsync(d, src, sizeof src, cudaMemcpyHostToDevice, s));
    CU(cudaMemcpyAsync(pin, d, sizeof src, cudaMemcpyDeviceToHost, s));
    arg.pinned = pin;
    CU(cudaLaunchHostFunc(s, sum_fn, &arg));
    CU(cudaStreamSynchronize(s));
    ck_assert_float_eq(arg.sum, 36.0f);
    ck_assert_int_eq(arg.inner, cudaErrorNotPermitted);
    CU(cudaFreeHost(pin));
    CU(cudaFree(d));
    CU(cudaStreamDestroy(s));
}
END_TEST

/* ---- pinned vs pageable ---------------------------------------------------------- */

typedef struct d2h_arg {
    float *dst;
    const float *src;
    cudaStream_t s;
    volatile int returned;
    cudaError_t rc;
} d2h_arg;

static void *d2h_thread(void *p)
{
    d2h_arg *a = p;
    a->rc = cudaMemcpyAsync(a->dst, a->src, 64, cudaMemcpyDeviceToHost,
                            a->s);
    __atomic_store_n(&a->returned, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

START_TEST(test_async_d2h_to_pageable_blocks_the_host)
{
    cudaStream_t s;
    gate g;
    float *d, *pin, pageable[16];
    pthread_t th;
    gate_init(&g);
    CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CU(cudaMalloc((void **)&d, 64));
    CU(cudaMemset(d, 0, 64));
    CU(cudaDeviceSynchronize());
    CU(cudaHostAlloc((void **)&pin, 64, cudaHostAllocPortable));
    ck_assert(td_sim_is_pinned(pin, 64));
    ck_assert(!td_sim_is_pinned(pageable, 64));
    CU(cudaLaunchHostFunc(s, gate_fn, &g));
    /* into pinned memory: returns at once although the stream is blocked */
    CU(cudaMemcpyAsync(pin, d, 64, cudaMemcpyDeviceToHost, s));
    /* into pageable memory: returns only once copied */
    d2h_arg a = {pageable, d, s, 0, cudaErrorUnknown};
    memset(pageable, 0x55, sizeof pageable);
    ck_assert_int_eq(pthread_create(&th, NULL, d2h_thread, &a), 0);
    usleep(50000);
    ck_assert_int_eq(__atomic_load_n(&a.returned, __ATOMIC_SEQ_CST), 0);
    gate_open(&g);
    pthread_join(th, NULL);
    ck_assert_int_eq(a.rc, cudaSuccess);
    for (int i = 0; i < 16; i++)
        ck_assert_float_eq(pageable[i], 0.0f); /* already there on return */
    CU(cudaStreamSynchronize(s));
    CU(cudaFreeHost(pin));
    CU(cudaFree(d));
    CU(cudaStreamDestroy(s));
}
END_TEST

/* H2D from pageable memory is staged at the call; from pinned memory the
 * DMA reads the buffer when it runs. */
START_TEST(test_h2d_pageable_is_staged_pinned_is_not)
{
    cudaStream_t s;
    gate g;
    float *d, *pin, pageable[4] = {1, 1, 1, 1}, out[8];
    gate_init(&g);
    CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CU(cudaMalloc((void **)&d, 8 * sizeof(float)));
    CU(cudaHostAlloc((void **)&pin, 4 * sizeof(float), 0));
    for (int i = 0; i < 4; i++)
        pin[i] = 1;
    CU(cudaLaunchHostFunc(s, gate_fn, &g));
    CU(cudaMemcpyAsync(d, pageable, sizeof pageable, cudaMemcpyHostToDevice,
                       s));
    CU(cudaMemcpyAsync(d + 4, pin, 4 * sizeof(float), cudaMemcpyHostToDevice,
                       s));
    for (int i = 0; i < 4; i++)
        pageable[i] = pin[i] = 2; /* changed before the copies run */
    gate_open(&g);
    CU(cudaStreamSynchronize(s));
    CU(cudaMemcpy(out, d, sizeof out, cudaMemcpyDeviceToHost));
    for (int i = 0; i < 4; i++) {
        ck_assert_float_eq(out[i], 1.0f);
        ck_assert_float_eq(out[4 + i], 2.0f);
    }
    /* a registered pageable buffer counts as pinned until unregistered */
    CU(cudaHostRegister(pageable, sizeof pageable, cudaHostRegisterDefault));
    ck_assert(td_sim_is_pinned(pageable, sizeof pageable));
    ck_assert_int_eq(cudaHostRegister(pageable, 4, 0),
                     cudaErrorHostMemoryAlreadyRegistered);
    CU(cudaHostUnregister(pageable));
    ck_assert(!td_sim_is_pinned(pageable, sizeof pageable));
    CU(cudaFreeHost(pin));
    CU(cudaFree(d));
    CU(cudaStreamDestroy(s));
}
END_TEST

/* ---- memory ---------------------------------------------------------------------- */

START_TEST(test_capacity_and_out_of_memory)
{
    size_t fr = 0, total = 0;
    void *a = NULL, *b = NULL;
    sim_env("TD_SIM_MEM_MB", "8");
    CU(cudaMemGetInfo(&fr, &total));
    ck_assert_uint_eq(total, (size_t)8 << 20);
    ck_assert_uint_eq(fr, total);
    CU(cudaMalloc(&a, (size_t)6 << 20));
    CU(cudaMemGetInfo(&fr, &total));
    ck_assert_uint_eq(fr, (size_t)2 << 20);
    ck_assert_int_eq(cudaMalloc(&b, (size_t)3 << 20),
                     cudaErrorMemoryAllocation);
    ck_assert_ptr_null(b);
    /* not sticky: reported once, then cleared */
    ck_assert_int_eq(cudaGetLastError(), cudaErrorMemoryAllocation);
    CU(cudaGetLastError());
    CU(cudaFree(a));
    CU(cudaMalloc(&b, (size_t)3 << 20));
    CU(cudaFree(b));
    ck_assert_int_eq(cudaFree((char *)b + 1), cudaErrorInvalidValue);
}
END_TEST

START_TEST(test_oom_at_nth_allocation)
{
    void *p[3] = {NULL, NULL, NULL};
    sim_env("TD_SIM_OOM_AT", "3");
    CU(cudaMalloc(&p[0], 16));
    CU(cudaMalloc(&p[1], 16));
    ck_assert_int_eq(cudaMalloc(&p[2], 16), cudaErrorMemoryAllocation);
    CU(cudaMalloc(&p[2], 16)); /* only the 3rd */
    for (int i = 0; i < 3; i++)
        CU(cudaFree(p[i]));
}
END_TEST

START_TEST(test_fresh_memory_is_nan)
{
    float *d, out[256];
    CU(cudaMalloc((void **)&d, sizeof out));
    CU(cudaMemcpy(out, d, sizeof out, cudaMemcpyDeviceToHost));
    for (int i = 0; i < 256; i++)
        ck_assert_msg(isnan(out[i]), "element %d is %g", i, out[i]);
    CU(cudaFree(d));
}
END_TEST

START_TEST(test_copy_checks_kinds_and_bounds)
{
    float *d, h[8];
    CU(cudaMalloc((void **)&d, sizeof h));
    ck_assert_int_eq(cudaMemcpy(d, h, sizeof h, cudaMemcpyDeviceToHost),
                     cudaErrorInvalidValue);
    ck_assert_int_eq(cudaMemcpy(d + 1, h, sizeof h, cudaMemcpyHostToDevice),
                     cudaErrorInvalidValue); /* overruns the allocation */
    ck_assert_int_eq(cudaMemsetAsync(h, 0, sizeof h, 0),
                     cudaErrorInvalidValue);
    CU(cudaMemcpy(d, h, sizeof h, cudaMemcpyDefault));
    CU(cudaFree(d));
}
END_TEST

/* ---- devices -------------------------------------------------------------------------- */

START_TEST(test_two_devices_keep_their_memory_apart)
{
    int n = 0;
    float *d0, *d1, h[4] = {0};
    cudaStream_t s1;
    struct cudaDeviceProp p;
    sim_env("TD_SIM_DEVICES", "2");
    CU(cudaGetDeviceCount(&n));
    ck_assert_int_eq(n, 2);
    CU(cudaGetDeviceProperties(&p, 1));
    ck_assert_msg(strstr(p.name, "simulated"), "%s", p.name);
    ck_assert_int_eq(cudaGetDeviceProperties(&p, 2), cudaErrorInvalidDevice);
    CU(cudaMalloc((void **)&d0, sizeof h));
    CU(cudaSetDevice(1));
    CU(cudaMalloc((void **)&d1, sizeof h));
    CU(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    ck_assert_uint_gt(td_sim_used(1), 0);
    /* device 0's memory while device 1 is current */
    ck_assert_int_eq(cudaMemcpy(h, d0, sizeof h, cudaMemcpyDeviceToHost),
                     cudaErrorInvalidValue);
    CU(cudaSetDevice(0));
    ck_assert_int_eq(cudaMemsetAsync(d0, 0, sizeof h, s1),
                     cudaErrorInvalidResourceHandle);
    ck_assert_int_eq(cudaSetDevice(2), cudaErrorInvalidDevice);
    CU(cudaFree(d0));
    CU(cudaSetDevice(1));
    CU(cudaFree(d1));
    CU(cudaStreamDestroy(s1));
}
END_TEST

/* Activity per device: asking about a device is not using it; making it
 * current (a context since CUDA 12) and every call while it is are. */
START_TEST(test_activity_is_counted_per_device)
{
    int n = 0;
    float *d1;
    struct cudaDeviceProp p;
    sim_env("TD_SIM_DEVICES", "2");
    CU(cudaGetDeviceCount(&n));
    CU(cudaGetDeviceProperties(&p, 0));
    CU(cudaGetDeviceProperties(&p, 1));
    ck_assert_int_eq(td_sim_calls(0), 0);
    ck_assert_int_eq(td_sim_calls(1), 0);
    CU(cudaSetDevice(1));
    ck_assert_int_eq(td_sim_calls(1), 1);
    CU(cudaMalloc((void **)&d1, 1000));
    CU(cudaMemset(d1, 0, 1000));
    CU(cudaFree(d1));
    ck_assert_int_ge(td_sim_calls(1), 4);
    ck_assert_uint_eq(td_sim_peak(1), 1024); /* in 256-byte units */
    ck_assert_uint_eq(td_sim_used(1), 0);
    ck_assert_int_eq(td_sim_calls(0), 0);
    ck_assert_uint_eq(td_sim_peak(0), 0);
    ck_assert_int_eq(td_sim_launches(0) + td_sim_launches(1), 0);
    CU(cudaSetDevice(0));
    ck_assert_int_eq(td_sim_calls(0), 1);
}
END_TEST

START_TEST(test_no_device)
{
    int n = 5;
    sim_env("TD_SIM_DEVICES", "0");
    ck_assert_int_eq(cudaGetDeviceCount(&n), cudaErrorNoDevice);
    ck_assert_int_eq(n, 0);
}
END_TEST

/* ---- the race detector ------------------------------------------------------------------ */

/* a writes x; b reads it: ordered by an event (0), by a host sync (1), or
 * not at all (2). */
static long race_case(int how)
{
    cudaStream_t a, b;
    cudaEvent_t ev;
    float *x, *y;
    CU(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    CU(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    CU(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    CU(cudaMalloc((void **)&x, 4096));
    CU(cudaMalloc((void **)&y, 4096));
    CU(cudaMemset(x, 0, 4096));
    CU(cudaMemset(y, 0, 4096));
    CU(cudaDeviceSynchronize());
    long before = td_sim_races();
    CU(cudaMemsetAsync(x + 256, 1, 1024, a)); /* writes bytes 1024..2047 */
    if (how == 0) {
        CU(cudaEventRecord(ev, a));
        CU(cudaStreamWaitEvent(b, ev, 0));
    } else if (how == 1) {
        CU(cudaStreamSynchronize(a));
    }
    CU(cudaMemcpyAsync(y, x + 300, 64, cudaMemcpyDeviceToDevice, b));
    long races = td_sim_races() - before;
    CU(cudaDeviceSynchronize());
    CU(cudaFree(x));
    CU(cudaFree(y));
    CU(cudaEventDestroy(ev));
    CU(cudaStreamDestroy(a));
    CU(cudaStreamDestroy(b));
    return races;
}

START_TEST(test_race_reported_when_unordered)
{
    sim_env("TD_SIM_RACE", "report");
    ck_assert_int_eq(race_case(2), 1);
}
END_TEST

START_TEST(test_no_race_when_event_orders)
{
    sim_env("TD_SIM_RACE", "report");
    ck_assert_int_eq(race_case(0), 0);
}
END_TEST

START_TEST(test_no_race_after_host_sync)
{
    sim_env("TD_SIM_RACE", "report");
    ck_assert_int_eq(race_case(1), 0);
}
END_TEST

/* Disjoint ranges of one allocation do not conflict (one arena holds
 * everything in the backend). */
START_TEST(test_no_race_on_disjoint_ranges)
{
    cudaStream_t a, b;
    char *x;
    sim_env("TD_SIM_RACE", "report");
    CU(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    CU(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    CU(cudaMalloc((void **)&x, 4096));
    CU(cudaMemsetAsync(x, 1, 2048, a));
    CU(cudaMemsetAsync(x + 2048, 2, 2048, b));
    ck_assert_int_eq(td_sim_races(), 0);
    CU(cudaMemsetAsync(x + 2047, 3, 2, b)); /* touches a's last byte */
    ck_assert_int_eq(td_sim_races(), 1);
    CU(cudaFree(x));
    CU(cudaStreamDestroy(a));
    CU(cudaStreamDestroy(b));
}
END_TEST

START_TEST(test_strict_race_aborts)
{
    sim_env("TD_SIM_RACE", "strict");
    race_case(2);
}
END_TEST

/* ---- kernels and faults ------------------------------------------------------------------- */

typedef struct kctx {
    float *p;
    float v;
} kctx;

static void k_fill(void *c)
{
    kctx *k = c;
    for (int i = 0; i < 4; i++)
        k->p[i] = k->v;
}

static cudaError_t launch_fill(cudaStream_t s, kctx *k, unsigned block)
{
    td_sim_grid g = {1, 1, 1, block, 1, 1, 0};
    td_sim_range r = {k->p, 4 * sizeof(float), 1};
    return td_sim_launch(&g, s, "k_fill", k_fill, NULL, k, &r, 1, NULL);
}

START_TEST(test_sticky_fault_from_nth_kernel)
{
    cudaStream_t s;
    float *d, out[4];
    void *q = NULL;
    sim_env("TD_SIM_FAULT_KERNEL", "2");
    CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CU(cudaMalloc((void **)&d, sizeof out));
    kctx k1 = {d, 1.0f}, k2 = {d, 2.0f}, k3 = {d, 3.0f};
    CU(launch_fill(s, &k1, 1));
    CU(cudaStreamSynchronize(s));
    CU(cudaMemcpy(out, d, sizeof out, cudaMemcpyDeviceToHost));
    ck_assert_float_eq(out[0], 1.0f);
    CU(launch_fill(s, &k2, 1)); /* faults when it runs */
    ck_assert_int_eq(cudaStreamSynchronize(s), cudaErrorIllegalAddress);
    ck_assert_int_eq(launch_fill(s, &k3, 1), cudaErrorIllegalAddress);
    ck_assert_int_eq(cudaMalloc(&q, 16), cudaErrorIllegalAddress);
    ck_assert_int_eq(cudaGetLastError(), cudaErrorIllegalAddress);
    ck_assert_int_eq(cudaGetLastError(), cudaErrorIllegalAddress);
    ck_assert_int_eq(cudaMemcpy(out, d, sizeof out, cudaMemcpyDeviceToHost),
                     cudaErrorIllegalAddress);
}
END_TEST

START_TEST(test_bad_launch_configuration)
{
    float *d;
    CU(cudaMalloc((void **)&d, 16));
    kctx k = {d, 1.0f};
    ck_assert_int_eq(launch_fill(0, &k, 2048), cudaErrorInvalidConfiguration);
    ck_assert_int_eq(cudaGetLastError(), cudaErrorInvalidConfiguration);
    CU(cudaGetLastError());
    CU(cudaFree(d));
}
END_TEST

START_TEST(test_kernel_with_foreign_pointer_faults)
{
    float host[4];
    kctx k = {host, 1.0f};
    ck_assert_int_eq(launch_fill(0, &k, 1), cudaSuccess);
    ck_assert_int_eq(cudaDeviceSynchronize(), cudaErrorIllegalAddress);
}
END_TEST

START_TEST(test_spin_waits_counted)
{
    cudaStream_t s;
    cudaEvent_t spin, block;
    gate g1, g2;
    gate_init(&g1);
    gate_init(&g2);
    CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CU(cudaEventCreateWithFlags(&spin, cudaEventDisableTiming));
    CU(cudaEventCreateWithFlags(&block, cudaEventDisableTiming |
                                            cudaEventBlockingSync));
    CU(cudaLaunchHostFunc(s, gate_fn, &g1));
    CU(cudaEventRecord(block, s));
    gate_open(&g1);
    CU(cudaEventSynchronize(block));
    long base = td_sim_spin_waits();
    ck_assert_int_eq(base, 0);
    CU(cudaLaunchHostFunc(s, gate_fn, &g2));
    CU(cudaEventRecord(spin, s));
    gate_wait_entered(&g2);
    pthread_t th;
    /* opened by another thread while the host waits on the event */
    ck_assert_int_eq(pthread_create(&th, NULL, open_later, &g2), 0);
    CU(cudaEventSynchronize(spin));
    pthread_join(th, NULL);
    ck_assert_int_eq(td_sim_spin_waits(), 1);
    CU(cudaEventDestroy(spin));
    CU(cudaEventDestroy(block));
    CU(cudaStreamDestroy(s));
}
END_TEST

static Suite *sim_suite(void)
{
    Suite *s = suite_create("sim");
    TCase *tc = tcase_create("streams");
    tcase_add_test(tc, test_stream_runs_in_order_under_jitter);
    tcase_add_test(tc, test_streams_are_concurrent);
    tcase_add_test(tc, test_events_record_query_sync_elapsed);
    tcase_add_test(tc, test_stream_wait_event_orders_streams);
    tcase_add_test(tc, test_legacy_stream_semantics);
    tcase_add_test(tc, test_host_function_runs_in_stream_order);
    tcase_add_test(tc, test_spin_waits_counted);
    suite_add_tcase(s, tc);
    tc = tcase_create("memory");
    tcase_add_test(tc, test_async_d2h_to_pageable_blocks_the_host);
    tcase_add_test(tc, test_h2d_pageable_is_staged_pinned_is_not);
    tcase_add_test(tc, test_capacity_and_out_of_memory);
    tcase_add_test(tc, test_oom_at_nth_allocation);
    tcase_add_test(tc, test_fresh_memory_is_nan);
    tcase_add_test(tc, test_copy_checks_kinds_and_bounds);
    tcase_add_test(tc, test_two_devices_keep_their_memory_apart);
    tcase_add_test(tc, test_activity_is_counted_per_device);
    tcase_add_test(tc, test_no_device);
    suite_add_tcase(s, tc);
    tc = tcase_create("races");
    tcase_add_test(tc, test_race_reported_when_unordered);
    tcase_add_test(tc, test_no_race_when_event_orders);
    tcase_add_test(tc, test_no_race_after_host_sync);
    tcase_add_test(tc, test_no_race_on_disjoint_ranges);
    tcase_add_test_raise_signal(tc, test_strict_race_aborts, SIGABRT);
    suite_add_tcase(s, tc);
    tc = tcase_create("faults");
    tcase_add_test(tc, test_sticky_fault_from_nth_kernel);
    tcase_add_test(tc, test_bad_launch_configuration);
    tcase_add_test(tc, test_kernel_with_foreign_pointer_faults);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(sim_suite)
