/* bench_peak.c - what this CPU's arithmetic units can do, per vCPU: the
 * GFLOP/s of a loop of independent fp32 FMAs (vfmadd231ps zmm, and ymm:
 * the AVX2 ceiling, all an AMD EPYC Zen 3 has), of bf16
 * dot products (vdpbf16ps zmm, AVX512_BF16) and of AMX bf16 tile products
 * (tdpbf16ps), on one thread and on every vCPU at once (one pinned thread
 * each).  The ceilings the CPU backend's figures are read against
 * (docs/compute.md): a bf16 convolution can only beat its fp32 twin where
 * the bf16 unit's ceiling is above the FMA's.  Prints figures, never fails;
 * an instruction the CPU (or oneDNN's ISA cap, ONEDNN_MAX_CPU_ISA, for AMX)
 * does not offer is reported as skipped.
 *
 *   bench_peak [SECONDS_PER_RUN=0.5] [ROUNDS=3]
 */
#define _GNU_SOURCE
#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/cpu/caps.h"
#include "backend/cpu/cpu_amx.h"
#include "backend/cpu/cpu_bwdw.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

enum { ITERS = 1 << 16 };

/* Each kernel runs `reps` x ITERS iterations and returns the FLOPs done:
 * caps.c's probe loops (12 independent zmm or ymm FMAs or zmm bf16 dot
 * products per iteration) and AMX tile products below. */
static double k_fma(long reps, float *sink)
{
    return td_cpu_fma_loop(reps * ITERS, sink);
}

static double k_fma_ymm(long reps, float *sink)
{
    return td_cpu_fma_loop_ymm(reps * ITERS, sink);
}

static double k_dpbf16(long reps, float *sink)
{
    return td_cpu_dot_loop(reps * ITERS, sink);
}

/* Tiles 0-3 accumulate 16x16 fp32; 4-7 hold 16 rows of 32 bf16 pairs.
 * One tdpbf16ps: 16 x 16 outputs x 32 products = 16,384 FLOPs. */
TD_AMX_FN static double k_amx(long reps, float *sink)
{
    static const uint8_t rows[8] = {16, 16, 16, 16, 16, 16, 16, 16};
    uint16_t in[16 * 32];
    float out[16 * 16];
    for (int i = 0; i < 16 * 32; i++)
        in[i] = 0x3400;
    td_amx_load(rows);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, in, 64);
    _tile_loadd(5, in, 64);
    _tile_loadd(6, in, 64);
    _tile_loadd(7, in, 64);
    long n = reps * ITERS / 16; /* 16x fewer: each one is 256x an FMA */
    for (long r = 0; r < n; r++) {
        _tile_dpbf16ps(0, 4, 5);
        _tile_dpbf16ps(1, 4, 6);
        _tile_dpbf16ps(2, 7, 5);
        _tile_dpbf16ps(3, 7, 6);
    }
    _tile_stored(0, out, 64);
    _tile_release();
    *sink += out[0];
    return (double)n * 4 * 16384;
}

typedef double (*kernel)(long, float *);

typedef struct run {
    kernel k;
    int cpu;
    long reps;
    double flops, secs;
    float sink;
    pthread_barrier_t *go;
} run;

static void *td__thread(void *p)
{
    run *r = p;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(r->cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    if (r->k == k_amx && !td_bwdw_amx()) /* grants this thread's tiles */
        return NULL;
    pthread_barrier_wait(r->go);
    double t = now();
    r->flops = r->k(r->reps, &r->sink);
    r->secs = now() - t;
    return NULL;
}

/* GFLOP/s of nthreads threads (pinned to CPUs 0..n-1) running k at once:
 * the sum of each thread's own rate. */
static double measure(kernel k, int nthreads, long reps)
{
    pthread_t th[256];
    run r[256];
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, (unsigned)nthreads);
    for (int i = 0; i < nthreads; i++) {
        r[i] = (run){.k = k, .cpu = i, .reps = reps, .go = &go};
        pthread_create(&th[i], NULL, td__thread, &r[i]);
    }
    double g = 0;
    for (int i = 0; i < nthreads; i++) {
        pthread_join(th[i], NULL);
        if (r[i].secs > 0)
            g += r[i].flops / r[i].secs / 1e9;
    }
    pthread_barrier_destroy(&go);
    return g;
}

int main(int argc, char **argv)
{
    double want = argc > 1 ? atof(argv[1]) : 0.5;
    int rounds = argc > 2 ? atoi(argv[2]) : 3;
    if (argc > 3 || (argc > 1 && !(want > 0 && want <= 60)) ||
        (argc > 2 && !(rounds >= 1 && rounds <= 100))) {
        fprintf(argc > 1 && strcmp(argv[1], "--help") == 0 ? stdout : stderr,
                "usage: bench_peak [SECONDS_PER_RUN=0.5] [ROUNDS=3]\n"
                "GFLOP/s of fp32 FMAs (zmm, ymm), bf16 dot products (AVX512_BF16) and "
                "AMX bf16 tiles on\none thread and on every vCPU, best of "
                "ROUNDS runs of about SECONDS_PER_RUN\n(0 < seconds <= 60, "
                "1 <= rounds <= 100).  Exit status: 0 done, 2 bad\n"
                "arguments.\n");
        return argc > 1 && strcmp(argv[1], "--help") == 0 ? 0 : 2;
    }
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int nthreads = ncpu < 1 ? 1 : ncpu > 256 ? 256 : (int)ncpu;
    const td_cpu_caps *caps = td_cpu_caps_get();
    char desc[256];
    td_cpu_caps_describe(caps, desc, sizeof desc);
    printf("cpu: %s; %d vCPUs\n", desc, nthreads);

    struct {
        const char *name;
        kernel k;
        int ok;
    } ks[] = {
        {"fp32 FMA (vfmadd231ps zmm)", k_fma, __builtin_cpu_supports("avx512f")},
        {"fp32 FMA (vfmadd231ps ymm)", k_fma_ymm,
         __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")},
        {"bf16 dot (vdpbf16ps zmm)", k_dpbf16, caps->avx512_bf16},
        {"AMX bf16 (tdpbf16ps)", k_amx, td_bwdw_amx()},
    };
    enum { NK = sizeof ks / sizeof ks[0] };
    double best1[NK] = {0}, bestn[NK] = {0};
    for (int i = 0; i < NK; i++) {
        if (!ks[i].ok) {
            printf("%-28s skipped: not available here\n", ks[i].name);
            continue;
        }
        /* size the run to about `want` seconds on one thread */
        long reps = 1;
        for (;;) {
            double t = now();
            measure(ks[i].k, 1, reps);
            double s = now() - t;
            if (s >= want / 4 || reps > (1L << 30))
                break;
            reps *= 2;
        }
        reps *= 4;
        for (int r = 0; r < rounds; r++) { /* alternate 1 and n threads */
            double g1 = measure(ks[i].k, 1, reps);
            double gn = measure(ks[i].k, nthreads, reps);
            if (g1 > best1[i])
                best1[i] = g1;
            if (gn > bestn[i])
                bestn[i] = gn;
            printf("%-28s round %d: 1 thread %8.1f GFLOP/s, %d threads "
                   "%8.1f GFLOP/s\n", ks[i].name, r, g1, nthreads, gn);
        }
        fflush(stdout);
    }
    printf("best of %d rounds, GFLOP/s (1 thread / %d threads):\n", rounds,
           nthreads);
    /* ratios to the widest fp32 FMA this CPU has */
    double base = best1[0] > 0 ? best1[0] : best1[1];
    for (int i = 0; i < NK; i++)
        if (best1[i] > 0)
            printf("  %-28s %8.1f / %8.1f  (%.2fx fp32 FMA)\n", ks[i].name,
                   best1[i], bestn[i], base > 0 ? best1[i] / base : 0);
    return 0;
}
