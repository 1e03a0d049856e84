/* caps.h - what this CPU can compute fast: the instruction sets found by
 * cpuid and the one oneDNN dispatches to.
 *
 * Owns: the probe (once per process) and its description for people, used
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
} td_cpu_caps;

/* The probe, run once; never NULL. */
const td_cpu_caps *td_cpu_caps_get(void);

/* "AMD EPYC, oneDNN ISA avx512_core_bf16 (AVX512_BF16): bf16 yes". */
void td_cpu_caps_describe(const td_cpu_caps *c, char *out, size_t cap);

#endif
