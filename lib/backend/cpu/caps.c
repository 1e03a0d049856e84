/* caps.c - probes the CPU's bf16 instructions (cpuid) and oneDNN's ISA.
 *
 * Owns: td_cpu_caps_get and td_cpu_caps_describe (see caps.h).  bf16 counts
 * as supported when oneDNN's effective ISA is avx512_core_bf16 or
 * avx512_core_amx: oneDNN then runs bf16 convolutions, inner products,
 * batch norms, pooling and eltwise in native kernels.  Below that it would
 * emulate bf16 or fall back to reference loops, far slower than fp32:
 * traind refuses bf16 there instead of running a silent slow path.
 * Never does: anything per step; the probe runs once.
 */
#include "backend/cpu/caps.h"

#include <cpuid.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

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
    snprintf(out, cap, "%s, oneDNN ISA %s (%s): bf16 %s", c->model, c->isa,
             *has ? has : "no bf16 instructions", c->bf16 ? "yes" : "no");
}
