/* caps.h - what this CPU can compute fast: the instruction sets found by
 * cpuid and the one oneDNN dispatches to.
 *
 * Owns: the probe (once per process; where bf16 would run on AVX512_BF16
 * it times vdpbf16ps against fp32 FMAs for about a millisecond, to decide
 * what precision "auto" means) and its description for people, used
 * by the CPU backend (bf16 only where the CPU has it), by the job's
 * precision check at submit, by `traind --version` and the daemon's
 * version reply (hence `trainctl version`).
 * Never does: change oneDNN's dispatch (ONEDNN_MAX_CPU_ISA is the user's).
 */
#ifndef TD_CPU_CAPS_H
#define TD_CPU_CAPS_H

#include <stddef.h>

typedef struct td_cpu_caps {
    char model[64];     /* cpuid brand string, e.g. "AMD EPYC" */
    int avx512_bf16;    /* cpuid: AVX512_BF16 (vdpbf16ps, vcvtne2ps2bf16) */
    int amx_bf16;       /* cpuid: AMX-BF16 tiles */
    int avx512_fp16;    /* cpuid: AVX512_FP16 */
    char isa[32];       /* oneDNN's effective ISA: "avx512_core_bf16", ... */
    int bf16;           /* oneDNN runs bf16 primitives natively here */
    double dot_rate;    /* FLOP rate of vdpbf16ps / that of fp32 FMAs, one
                           thread, measured when bf16 runs on AVX512_BF16
                           (ISA avx512_core_bf16); 0: not measured */
    int bf16_auto;      /* precision "auto" trains bf16 here */
} td_cpu_caps;

/* Without AMX, "auto" picks bf16 where vdpbf16ps does at least this many
 * times the fp32 FMA's FLOPs per second.  At 0.5 (Sapphire Rapids held
 * to AVX512_BF16) bf16 steps ran 0.78-0.86x fp32's; the bf16 convolutions
 * there reach 80 % of their ceiling and the fp32 ones 46 % of theirs, so
 * bf16 breaks even near 0.58; 0.75 leaves a margin (docs/compute.md). */
#define TD_CPU_DOT_RATE_MIN 0.75

/* The probe's loops, also bench_peak's: iters x 12 independent zmm
 * vfmadd231ps (needs AVX-512F), or vdpbf16ps (needs AVX512_BF16); each
 * returns the FLOPs it did and adds its result to *sink (keep it live).
 * td_cpu_fma_loop_ymm: the same FMAs on ymm (needs AVX2 and FMA: the
 * ceiling of a CPU without AVX-512, bench_peak's only). */
double td_cpu_fma_loop(long iters, float *sink);
double td_cpu_fma_loop_ymm(long iters, float *sink);
double td_cpu_dot_loop(long iters, float *sink);

/* The probe, run once; never NULL. */
const td_cpu_caps *td_cpu_caps_get(void);

/* Whether "auto" trains bf16: oneDNN runs bf16 natively (bf16) and either
 * on AMX tiles (isa "avx512_core_amx") or with dot products at least
 * TD_CPU_DOT_RATE_MIN times as fast as fp32 FMAs (dot_rate). */
int td_cpu_bf16_auto(const char *isa, int bf16, double dot_rate);

/* "Intel(R) Xeon(R) Processor, oneDNN ISA avx512_core_bf16 (AMX-BF16,
 * AVX512_BF16, AVX512_FP16): bf16 yes, auto fp32 (vdpbf16ps 0.50x the fp32
 * FMA rate)" (oneDNN held to AVX512_BF16), "...: bf16 yes, auto bf16
 * (AMX)", "...: bf16 no". */
void td_cpu_caps_describe(const td_cpu_caps *c, char *out, size_t cap);

#endif
