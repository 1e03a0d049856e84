/* caps.c - probes the CPU's bf16 instructions (cpuid) and oneDNN's ISA.
 *
 * Owns: td_cpu_caps_get and td_cpu_caps_describe (see caps.h).  bf16 counts
 * as supported when oneDNN's effective ISA is avx512_core_bf16 or
 * avx512_core_amx: oneDNN then runs bf16 convolutions, inner products,
 * batch norms, pooling and eltwise in native kernels.  Below that it would
 * emulate bf16 or fall back to reference loops, far slower than fp32:
 * traind refuses bf16 there instead of running a silent slow path.
 * "auto" means bf16 only where bf16 is also faster: on AMX, and on
 * AVX512_BF16 where vdpbf16ps does at least TD_CPU_DOT_RATE_MIN times the
 * FLOPs per second of vfmadd231ps.  That rate is a property of the core,
 * not of the ISA: Intel Sapphire Rapids runs vdpbf16ps at half the FMA's
 * FLOPs (tests/bench/bench_peak.c, docs/compute.md), where a bf16 step on
 * those kernels is slower than fp32's, while on AMD Zen 5 bf16 steps ran
 * 1.67-1.84x fp32's (its rate not yet measured).  The probe times both
 * loops (td_cpu_fma_loop, td_cpu_dot_loop: also bench_peak's) for about a
 * millisecond, the best of eight alternated runs; TD_CPU_DOT_RATE=<ratio>
 * in the environment replaces the measurement (tests, diagnosis).
 * Never does: anything per step; the probe runs once.
 */
#include "backend/cpu/caps.h"

#include <cpuid.h>
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <oneapi/dnnl/dnnl.h>

static td_cpu_caps td__caps;
static pthread_once_t td__once = PTHREAD_ONCE_INIT;

static void td__brand(char *out, size_t cap)
{
    unsigned r[12] = {0}, a, b, c, d;
    if (!__get_cpuid(0x80000000u, &a, &b, &c, &d) || a < 0x80000004u) {
        snprintf(out, cap, "unknown CPU");
        return;
    }
    for (unsigned i = 0; i < 3; i++)
        __get_cpuid(0x80000002u + i, &r[4 * i], &r[4 * i + 1], &r[4 * i + 2],
                    &r[4 * i + 3]);
    char s[49];
    memcpy(s, r, 48);
    s[48] = '\0';
    char *p = s;
    while (*p == ' ')
        p++;
    size_t n = strlen(p);
    while (n && p[n - 1] == ' ')
        p[--n] = '\0';
    snprintf(out, cap, "%s", p);
}

static const char *td__isa_name(dnnl_cpu_isa_t isa)
{
    switch (isa) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_mic: return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "other";
    }
}

static double td__now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Twelve independent accumulators, each from another value (so that no
 * compiler merges the chains), hide any latency up to twelve issues. */
#define TD__ACC(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define TD__DECL(i) __m512 c##i = _mm512_set1_ps((float)(i));
#define TD__SUM(i) s = _mm512_add_ps(s, c##i);

__attribute__((target("avx512f"))) double td_cpu_fma_loop(long iters,
                                                          float *sink)
{
    __m512 a = _mm512_set1_ps(1e-7f), s = _mm512_setzero_ps();
    TD__ACC(TD__DECL)
#define TD__FMA(i) c##i = _mm512_fmadd_ps(a, a, c##i);
    for (long r = 0; r < iters; r++) {
        TD__ACC(TD__FMA)
    }
    TD__ACC(TD__SUM)
    *sink += _mm512_reduce_add_ps(s);
    return (double)iters * 12 * 16 * 2;
}

#define TD__DECL8(i) __m256 c##i = _mm256_set1_ps((float)(i));
#define TD__SUM8(i) s = _mm256_add_ps(s, c##i);

__attribute__((target("avx2,fma"))) double td_cpu_fma_loop_ymm(long iters,
                                                               float *sink)
{
    __m256 a = _mm256_set1_ps(1e-7f), s = _mm256_setzero_ps();
    TD__ACC(TD__DECL8)
#define TD__FMA8(i) c##i = _mm256_fmadd_ps(a, a, c##i);
    for (long r = 0; r < iters; r++) {
        TD__ACC(TD__FMA8)
    }
    TD__ACC(TD__SUM8)
    float v[8];
    _mm256_storeu_ps(v, s);
    for (int i = 0; i < 8; i++)
        *sink += v[i];
    return (double)iters * 12 * 8 * 2;
}

__attribute__((target("avx512f,avx512bf16"))) double
td_cpu_dot_loop(long iters, float *sink)
{
    __m512bh a = (__m512bh)_mm512_set1_epi16(0x3400); /* bf16 ~1.7e-7 */
    __m512 s = _mm512_setzero_ps();
    TD__ACC(TD__DECL)
#define TD__DOT(i) c##i = _mm512_dpbf16_ps(c##i, a, a);
    for (long r = 0; r < iters; r++) {
        TD__ACC(TD__DOT)
    }
    TD__ACC(TD__SUM)
    *sink += _mm512_reduce_add_ps(s);
    return (double)iters * 12 * 32 * 2;
}

/* FLOPs per second of loop run for 4,096 iterations (49,152
 * instructions: 10-40 us). */
static double td__rate(double (*loop)(long, float *), float *sink)
{
    double t = td__now();
    double flops = loop(4096, sink);
    t = td__now() - t;
    return t > 0 ? flops / t : 0;
}

/* FLOP rate of vdpbf16ps over vfmadd231ps: the fastest of 8 alternated
 * runs of each (the first ones also wake the 512-bit units up). */
static volatile float td__sink; /* keeps the loops' results live */

static double td__dot_rate(void)
{
    float k = 0;
    double fma = 0, dot = 0;
    for (int i = 0; i < 8; i++) {
        double f = td__rate(td_cpu_fma_loop, &k);
        double d = td__rate(td_cpu_dot_loop, &k);
        fma = f > fma ? f : fma;
        dot = d > dot ? d : dot;
    }
    td__sink = k;
    return fma > 0 ? dot / fma : 0;
}

int td_cpu_bf16_auto(const char *isa, int bf16, double dot_rate)
{
    return bf16 && (strcmp(isa, "avx512_core_amx") == 0 ||
                    dot_rate >= TD_CPU_DOT_RATE_MIN);
}

static void td__probe(void)
{
    td_cpu_caps *c = &td__caps;
    unsigned a, b, cx, d;
    td__brand(c->model, sizeof c->model);
    if (__get_cpuid_count(7, 0, &a, &b, &cx, &d)) {
        c->amx_bf16 = (d >> 22) & 1;
        c->avx512_fp16 = (d >> 23) & 1;
        if (a >= 1 && __get_cpuid_count(7, 1, &a, &b, &cx, &d))
            c->avx512_bf16 = (a >> 5) & 1;
    }
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    snprintf(c->isa, sizeof c->isa, "%s", td__isa_name(isa));
    c->bf16 = isa == dnnl_cpu_isa_avx512_core_bf16 ||
              isa == dnnl_cpu_isa_avx512_core_amx;
    if (c->bf16 && isa == dnnl_cpu_isa_avx512_core_bf16 && c->avx512_bf16) {
        const char *e = getenv("TD_CPU_DOT_RATE");
        char *end = NULL;
        double v = e ? strtod(e, &end) : 0;
        c->dot_rate = e && end != e && *end == '\0' && v > 0 && v < 1e3
                          ? v : td__dot_rate();
    }
    c->bf16_auto = td_cpu_bf16_auto(c->isa, c->bf16, c->dot_rate);
}

const td_cpu_caps *td_cpu_caps_get(void)
{
    pthread_once(&td__once, td__probe);
    return &td__caps;
}

void td_cpu_caps_describe(const td_cpu_caps *c, char *out, size_t cap)
{
    char has[64] = "";
    if (c->amx_bf16)
        strcat(has, "AMX-BF16");
    if (c->avx512_bf16)
        strcat(strcat(has, *has ? ", " : ""), "AVX512_BF16");
    if (c->avx512_fp16)
        strcat(strcat(has, *has ? ", " : ""), "AVX512_FP16");
    char why[96] = "";
    if (c->bf16 && c->dot_rate > 0)
        snprintf(why, sizeof why, " (vdpbf16ps %.2fx the fp32 FMA rate)",
                 c->dot_rate);
    else if (c->bf16)
        snprintf(why, sizeof why, " (AMX)");
    snprintf(out, cap, "%s, oneDNN ISA %s (%s): bf16 %s%s%s%s", c->model,
             c->isa, *has ? has : "no bf16 instructions",
             c->bf16 ? "yes" : "no", c->bf16 ? ", auto " : "",
             c->bf16 ? (c->bf16_auto ? "bf16" : "fp32") : "", why);
}
