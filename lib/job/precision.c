/* precision.c - resolves a job's "precision" for a device (precision.h).
 *
 * The rules (docs/compute.md "Precision"):
 *   cpu   fp32  fp32 everywhere.
 *         tf32  a GPU notion (tensor-core fp32 with a 10-bit mantissa); the
 *               CPU has no such unit and computes it as fp32.
 *         bf16  needs oneDNN's avx512_core_bf16 or avx512_core_amx ISA
 *               (AVX512_BF16 or AMX-BF16 in cpuid); refused elsewhere.
 *         fp16  refused: the oneDNN this backend uses (Debian's 2.6)
 *               has no fp16 training on the CPU (measured:
 *               docs/compute.md); bf16 is the CPU's fast type.
 *         auto  bf16 where the CPU has it and it is also faster: AMX, or
 *               a probe at start finding bf16 dot products at least
 *               0.75x as fast as fp32 FMAs (caps.c); else fp32.
 *   cuda  fp32  strict fp32: cuDNN FMA math, cuBLAS default math (no TF32).
 *         tf32  TF32 tensor cores for convolutions and GEMMs; needs compute
 *               capability 8.0 (Ampere) or newer, refused below naming
 *               the GPU and its capability.
 *         auto  tf32 on 8.0 and newer, fp32 below (the backend decides at
 *               create from the capability it reads; the check at submit
 *               has nothing to refuse).
 *         bf16  activations in bf16 on tensor cores, fp32 master weights
 *               (docs/cuda.md "Precision"); needs compute capability 8.0
 *               (Ampere), refused below naming the GPU (the backend
 *               checks again at create).
 *         fp16  from compute capability 7.0 (Volta), with dynamic loss
 *               scaling by default (loss_scale auto: gradients below
 *               6e-8 would flush to zero without it); below 7.0 refused
 *               naming the GPU.
 * Never does: pick a slow emulation silently.
 */
#include "job/precision.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/caps.h"
#include "base/error.h"

const char *td_precision_name(enum td_precision p)
{
    static const char *const names[] = {"auto", "fp32", "tf32", "bf16",
                                        "fp16"};
    return (unsigned)p < sizeof names / sizeof names[0] ? names[p] : "?";
}

/* bf16 (8.0) and fp16 (7.0) on a CUDA device; g NULL: the device's
 * details are unknown, the backend checks at create. */
static int td__cuda_low(enum td_precision want, const char *device,
                        const td_gpu_info *g, enum td_dtype *out, char *err,
                        size_t errcap)
{
    int bf16 = want == TD_PREC_BF16;
    int need = bf16 ? TD_BF16_MIN_CC_MAJOR : TD_F16_MIN_CC_MAJOR;
    if (g && g->cc_major < need) {
        snprintf(err, errcap, "precision: %s needs a GPU of compute "
                 "capability %d.0 or newer (%s tensor cores); %s is %s, "
                 "compute capability %d.%d: use %s", bf16 ? "bf16" : "fp16",
                 need, bf16 ? "Ampere" : "Volta", device, g->name,
                 g->cc_major, g->cc_minor,
                 g->cc_major >= TD_TF32_MIN_CC_MAJOR ? "tf32, fp32 or auto"
                                                     : "fp32 or auto");
        return TD_E_NOTSUP;
    }
    *out = bf16 ? TD_BF16 : TD_F16;
    return 0;
}

static int td__cpu(enum td_precision want, enum td_dtype *out, char *err,
                   size_t errcap)
{
    const td_cpu_caps *c = td_cpu_caps_get();
    char d[256];
    td_cpu_caps_describe(c, d, sizeof d);
    switch (want) {
    case TD_PREC_AUTO:
        *out = c->bf16_auto ? TD_BF16 : TD_F32;
        return 0;
    case TD_PREC_FP32:
    case TD_PREC_TF32:
        *out = TD_F32;
        return 0;
    case TD_PREC_BF16:
        if (c->bf16) {
            *out = TD_BF16;
            return 0;
        }
        snprintf(err, errcap, "precision: bf16 needs a CPU with AVX512_BF16 "
                 "or AMX-BF16 that oneDNN uses; this one is %s (use fp32 or "
                 "auto)", d);
        return TD_E_NOTSUP;
    case TD_PREC_FP16:
    default:
        snprintf(err, errcap, "precision: fp16 is not supported on the CPU "
                 "backend (it trains in fp32 or bf16; %s): use %s", d,
                 c->bf16 ? "bf16 or auto" : "fp32 or auto");
        return TD_E_NOTSUP;
    }
}

int td_precision_resolve(enum td_precision want, const char *device,
                         const td_device_info *info, enum td_dtype *out,
                         char *err, size_t errcap)
{
    if (err && errcap)
        err[0] = '\0';
    if (!device || strncmp(device, "cuda", 4) != 0)
        return td__cpu(want, out, err ? err : (char[1]){0}, err ? errcap : 1);
    int idx = device[4] == ':' ? (int)strtol(device + 5, NULL, 10) : 0;
    const td_gpu_info *g = info && idx >= 0 && idx < info->cuda_count
                               ? &info->gpus[idx] : NULL;
    char gpu[300] = "";
    if (g)
        snprintf(gpu, sizeof gpu, " (%s: %s, compute capability %d.%d)",
                 device, g->name, g->cc_major, g->cc_minor);
    *out = TD_F32;
    if (want == TD_PREC_AUTO || want == TD_PREC_FP32)
        return 0;
    if (want == TD_PREC_TF32) {
        /* without the device's details the backend checks at create */
        if (!g || g->cc_major >= TD_TF32_MIN_CC_MAJOR)
            return 0;
        if (err && errcap)
            snprintf(err, errcap, "precision: tf32 needs a GPU of compute "
                     "capability %d.0 or newer (Ampere); %s is %s, compute "
                     "capability %d.%d: use fp32 or auto",
                     TD_TF32_MIN_CC_MAJOR, device, g->name, g->cc_major,
                     g->cc_minor);
        return TD_E_NOTSUP;
    }
    if (want == TD_PREC_BF16 || want == TD_PREC_FP16)
        return td__cuda_low(want, device, g, out, err ? err : (char[1]){0},
                            err ? errcap : 1);
    if (err && errcap)
        snprintf(err, errcap, "precision: %d is not a precision%s",
                 (int)want, gpu);
    return TD_E_NOTSUP;
}

enum td_precision_advice td_precision_advice(const char *device,
                                             enum td_dtype dt)
{
    if (dt != TD_F32)
        return TD_ADVICE_IN_USE;
    if (device && strncmp(device, "cuda", 4) == 0)
        return TD_ADVICE_MIXED;
    return td_cpu_caps_get()->bf16_auto ? TD_ADVICE_MIXED
                                        : TD_ADVICE_NO_FASTER;
}

enum td_fp32_math td_precision_fp32_math(enum td_precision p)
{
    return p == TD_PREC_TF32 ? TD_MATH_TF32
           : p == TD_PREC_AUTO ? TD_MATH_AUTO : TD_MATH_FP32;
}

int td_precision_check_job(const td_job_spec *spec, const td_device_info *info,
                           char *err, size_t errcap)
{
    td_device_choice ch;
    enum td_dtype dt;
    char dev[32];
    if (td_device_select(spec->device, info, &ch, NULL, 0) != 0)
        return 0;
    if (ch.kind == TD_DEVICE_CUDA)
        snprintf(dev, sizeof dev, "cuda:%d", ch.index);
    else
        snprintf(dev, sizeof dev, "cpu");
    return td_precision_resolve(spec->precision, dev, info, &dt, err, errcap);
}

/* "loss_scale" (docs/compute.md "Loss scaling"): auto is dynamic scaling
 * for fp16 (the type whose small gradients underflow) and off for every
 * other precision; dynamic starts at TD_LS_INIT and adapts; a number is a
 * static scale (interval < 0). */
void td_precision_loss_scale(const td_job_spec *s, float *scale,
                             int *interval)
{
    *interval = 0; /* TD_LS_INTERVAL */
    switch (s->loss_scale.mode) {
    case TD_LS_AUTO:
        *scale = s->precision == TD_PREC_FP16 ? TD_LS_INIT : 0.0f;
        return;
    case TD_LS_DYNAMIC:
        *scale = TD_LS_INIT;
        return;
    case TD_LS_STATIC:
        *scale = (float)s->loss_scale.scale;
        *interval = -1;
        return;
    case TD_LS_OFF:
    default:
        *scale = 0.0f;
        return;
    }
}
