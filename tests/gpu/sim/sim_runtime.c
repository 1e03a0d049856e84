/* sim_runtime.c - the simulated CUDA runtime: configuration, devices,
 * errors, device and pinned host memory.
 *
 * Owns: the global state's initialisation from the environment (sim.h),
 * the per-thread current device and last error, sticky errors, device
 * allocations (each a separate host allocation within the device's
 * capacity, filled with 0xff bytes - a NaN in every float - when made),
 * pinned host ranges (cudaHostAlloc, cudaHostRegister; within the
 * page-locked limit TD_SIM_PINNED_KB), each device's compute capability
 * (TD_SIM_CC, in cudaGetDeviceProperties), and the tables of both, which
 * the copies and memsets (sim_copy.c) look their pointers up in.
 * Never does: run outside tests.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim_int.h"

td_sim_state td__sim = {.mu = PTHREAD_MUTEX_INITIALIZER,
                        .cv = PTHREAD_COND_INITIALIZER};

static __thread int td__sim_device;
static __thread cudaError_t td__sim_last;

/* ---- configuration ------------------------------------------------------- */

static long td__env_long(const char *name, long def, long lo, long hi)
{
    const char *v = getenv(name);
    char *end;
    if (!v || !*v)
        return def;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || *end || x < lo || x > hi) {
        fprintf(stderr, "td-sim: %s=%s: expected an integer in %ld..%ld\n",
                name, v, lo, hi);
        abort();
    }
    return x;
}

/* TD_SIM_REPORT: what each device saw, appended at exit. */
static void td__report(void)
{
    const char *path = getenv("TD_SIM_REPORT");
    FILE *f = path && *path ? fopen(path, "a") : NULL;
    if (!f)
        return;
    td__sim_lock();
    fprintf(f, "host page_locked %ld live %d\n", td__sim.host_allocs,
            td__sim.nhmem);
    for (int d = 0; d < td__sim.ndev; d++)
        fprintf(f, "device %d calls %ld launches %ld peak_bytes %zu "
                "pageable_d2h %ld\n", d, td__sim.dev[d].calls,
                td__sim.dev[d].launches, td__sim.dev[d].peak,
                td__sim.dev[d].pageable_d2h);
    td__sim_unlock();
    fclose(f);
}

/* TD_SIM_CC=8.0,7.5: device 0 is an 8.0, device 1 and the rest 7.5. */
static void td__compute_capability(void)
{
    const char *v = getenv("TD_SIM_CC");
    int major = 8, minor = 0;
    for (int d = 0; d < TD_SIM_MAX_DEVICES; d++) {
        if (v && *v) {
            char *end;
            long M = strtol(v, &end, 10), m = -1;
            if (*end == '.')
                m = strtol(end + 1, &end, 10);
            if (M < 1 || M > 99 || m < 0 || m > 9 ||
                (*end && *end != ',')) {
                fprintf(stderr, "td-sim: TD_SIM_CC=%s: expected "
                        "MAJOR.MINOR[,MAJOR.MINOR...]\n", getenv("TD_SIM_CC"));
                abort();
            }
            major = (int)M;
            minor = (int)m;
            v = *end ? end + 1 : end;
        }
        td__sim.dev[d].cc_major = major;
        td__sim.dev[d].cc_minor = minor;
    }
}

static void td__configure(void)
{
    static int reporting;
    if (!reporting && getenv("TD_SIM_REPORT")) {
        reporting = 1;
        atexit(td__report);
    }
    td__sim.ndev = (int)td__env_long("TD_SIM_DEVICES", 1, 0,
                                     TD_SIM_MAX_DEVICES);
    long mb = td__env_long("TD_SIM_MEM_MB", 4096, 1, 1L << 24);
    td__sim.jitter = (uint64_t)td__env_long("TD_SIM_JITTER", 0, 0,
                                            0x7fffffffL);
    td__sim.oom_at = td__env_long("TD_SIM_OOM_AT", 0, 0, 0x7fffffffL);
    td__sim.fault_kernel = td__env_long("TD_SIM_FAULT_KERNEL", 0, 0,
                                        0x7fffffffL);
    /* the error code of the injected fault: any of driver_types.h's
     * (e.g. 810, cudaErrorMpsClientTerminated), sticky like the rest */
    td__sim.fault_error = (cudaError_t)td__env_long(
        "TD_SIM_FAULT_ERROR", cudaErrorIllegalAddress, 1, 10000);
    const char *r = getenv("TD_SIM_RACE");
    if (!r || !*r || strcmp(r, "report") == 0)
        td__sim.race_mode = 1;
    else if (strcmp(r, "strict") == 0)
        td__sim.race_mode = 2;
    else if (strcmp(r, "off") == 0)
        td__sim.race_mode = 0;
    else {
        fprintf(stderr, "td-sim: TD_SIM_RACE=%s: expected off, report or "
                "strict\n", r);
        abort();
    }
    long pin_kb = td__env_long("TD_SIM_PINNED_KB", -1, -1, 1L << 30);
    td__sim.pinned_cap = pin_kb < 0 ? (size_t)-1 : (size_t)pin_kb << 10;
    td__sim.pinned_used = 0;
    td__sim.clock_skew = 0;
    for (int d = 0; d < TD_SIM_MAX_DEVICES; d++) {
        memset(&td__sim.dev[d], 0, sizeof td__sim.dev[d]);
        td__sim.dev[d].cap = (size_t)mb << 20;
    }
    td__compute_capability();
    memset(td__sim.host, 0, sizeof td__sim.host);
    td__sim.mallocs = td__sim.launches = td__sim.host_allocs = 0;
    td__sim.races = td__sim.spin_waits = 0;
    td__sim.host_funcs = td__sim.stream_syncs = 0;
    td__sim.oom_launch_in = 0;
    td__sim.init = 1;
}

void td__sim_lock(void)
{
    pthread_mutex_lock(&td__sim.mu);
    if (!td__sim.init)
        td__configure();
}

void td__sim_unlock(void) { pthread_mutex_unlock(&td__sim.mu); }

int td__sim_cc(int d)
{
    td__sim_lock();
    int cc = d >= 0 && d < TD_SIM_MAX_DEVICES
                 ? 10 * td__sim.dev[d].cc_major + td__sim.dev[d].cc_minor
                 : 0;
    td__sim_unlock();
    return cc;
}

/* ---- math modes: what each GEMM and convolution ran with ----------------- */

/* [0] cuBLAS by cublasMath_t (the low 4 bits), [1] cuDNN by
 * cudnnMathType_t; [.][16]: of all, those computed in TF32.  Process-wide,
 * never reset (tests take differences). */
static long td__math_runs[2][17];

void td__sim_math_count(int blas, int math, int tf32)
{
    int k = blas ? 0 : 1;
    __atomic_add_fetch(&td__math_runs[k][math & 15], 1, __ATOMIC_RELAXED);
    if (tf32)
        __atomic_add_fetch(&td__math_runs[k][16], 1, __ATOMIC_RELAXED);
}

static long td__math_get(int k, int math)
{
    long n = 0;
    if (math >= 0) /* 16: the TF32 count */
        return __atomic_load_n(&td__math_runs[k][math < 16 ? math : 16],
                               __ATOMIC_RELAXED);
    for (int i = 0; i < 16; i++)
        n += __atomic_load_n(&td__math_runs[k][i], __ATOMIC_RELAXED);
    return n;
}

long td_sim_blas_gemms(int math) { return td__math_get(0, math); }
long td_sim_dnn_convs(int math) { return td__math_get(1, math); }
long td_sim_blas_tf32(void) { return td__math_get(0, 16); }
long td_sim_dnn_tf32(void) { return td__math_get(1, 16); }

int td__sim_cur(void) { return td__sim_device; }

cudaError_t td__sim_err(cudaError_t e)
{
    if (e != cudaSuccess)
        td__sim_last = e;
    return e;
}

cudaError_t td__sim_gate(void)
{
    if (td__sim_in_hostfn) {
        td__sim_say("a CUDA call inside a host function (cudaLaunchHostFunc "
                    "forbids it)");
        return cudaErrorNotPermitted;
    }
    if (td__sim_device >= td__sim.ndev)
        return td__sim.ndev ? cudaErrorInvalidDevice : cudaErrorNoDevice;
    td__sim.dev[td__sim_device].calls++;
    return td__sim.dev[td__sim_device].sticky;
}

void td__sim_say(const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "td-sim: %s\n", line);
}

/* Sanitizer builds can name file and line; otherwise module + offset
 * (for addr2line -f -e MODULE OFFSET). */
extern void __sanitizer_symbolize_pc(void *pc, const char *fmt, char *out,
                                     size_t cap) __attribute__((weak));

/* "function file:line" from binutils' addr2line, when it is installed
 * (reports only: a test tool may spawn it). */
static int td__addr2line(const char *file, unsigned long off, char *out,
                         size_t cap)
{
    char cmd[4200], fn[512] = "", line[1024] = "";
    if (strchr(file, '\'') ||
        snprintf(cmd, sizeof cmd, "addr2line -f -C -e '%s' 0x%lx 2>/dev/null",
                 file, off) >= (int)sizeof cmd)
        return -1;
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    int ok = fgets(fn, sizeof fn, p) && fgets(line, sizeof line, p);
    pclose(p);
    if (!ok || fn[0] == '?' || line[0] == '?')
        return -1;
    fn[strcspn(fn, "\n")] = 0;
    line[strcspn(line, "\n")] = 0;
    snprintf(out, cap, "%s %s", fn, line);
    return 0;
}

void td__sim_where(const void *caller, char *out, size_t cap)
{
    Dl_info di;
    if (!caller) {
        snprintf(out, cap, "?");
        return;
    }
    /* the return address points after the call */
    void *pc = (char *)(uintptr_t)caller - 1;
    if (__sanitizer_symbolize_pc) {
        __sanitizer_symbolize_pc(pc, "%f %S", out, cap);
        if (out[0] && strcmp(out, "<null>") != 0)
            return;
    }
    if (dladdr(pc, &di) && di.dli_fname) {
        unsigned long off = (unsigned long)((uintptr_t)pc -
                                            (uintptr_t)di.dli_fbase);
        if (td__addr2line(di.dli_fname, off, out, cap) == 0)
            return;
        snprintf(out, cap, "%s%s(%s+0x%lx)", di.dli_sname ? di.dli_sname : "",
                 di.dli_sname ? " " : "", di.dli_fname, off);
        return;
    }
    snprintf(out, cap, "%p", pc);
}

/* ---- allocation tables (sorted by base) ----------------------------------- */

static td_sim_alloc *td__find(td_sim_alloc *t, int n, const void *p,
                              size_t bytes)
{
    const char *c = p;
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (c < t[mid].base)
            hi = mid - 1;
        else if (c >= t[mid].base + (t[mid].bytes ? t[mid].bytes : 1))
            lo = mid + 1;
        else
            return (size_t)(c - t[mid].base) + bytes <= t[mid].bytes ||
                           (bytes == 0)
                       ? &t[mid]
                       : NULL;
    }
    return NULL;
}

td_sim_alloc *td__sim_dfind(const void *p, size_t n)
{
    return td__find(td__sim.dmem, td__sim.ndmem, p, n);
}

td_sim_alloc *td__sim_hfind(const void *p, size_t n)
{
    return td__find(td__sim.hmem, td__sim.nhmem, p, n);
}

/* Whether p starts inside a device allocation (even if p + n overruns). */
td_sim_alloc *td__sim_dstart(const void *p)
{
    return td__find(td__sim.dmem, td__sim.ndmem, p, 1);
}

static int td__insert(td_sim_alloc **t, int *n, int *cap, td_sim_alloc a)
{
    if (*n == *cap) {
        int nc = *cap ? *cap * 2 : 64;
        td_sim_alloc *g = realloc(*t, (size_t)nc * sizeof *g);
        if (!g)
            return -ENOMEM;
        *t = g;
        *cap = nc;
    }
    int i = *n;
    while (i > 0 && (*t)[i - 1].base > a.base) {
        (*t)[i] = (*t)[i - 1];
        i--;
    }
    (*t)[i] = a;
    (*n)++;
    return 0;
}

static void td__remove(td_sim_alloc *t, int *n, td_sim_alloc *a)
{
    int i = (int)(a - t);
    memmove(&t[i], &t[i + 1], (size_t)(*n - i - 1) * sizeof *t);
    (*n)--;
}

/* ---- errors, devices ------------------------------------------------------ */

const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress:
        return "an illegal memory access was encountered";
    case cudaErrorNotPermitted: return "operation not permitted";
    case cudaErrorHostMemoryAlreadyRegistered:
        return "part or all of the requested memory range is already mapped";
    case cudaErrorHostMemoryNotRegistered:
        return "pointer does not correspond to a registered memory region";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorNotSupported: return "operation not supported";
    case cudaErrorMpsClientTerminated: return "MPS client terminated";
    default: return td__sim_cap_error(e, 0);
    }
}

const char *cudaGetErrorName(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMpsClientTerminated: return "cudaErrorMpsClientTerminated";
    default: return td__sim_cap_error(e, 1);
    }
}

cudaError_t cudaGetLastError(void)
{
    td__sim_lock();
    cudaError_t e = td__sim_last;
    int d = td__sim_device;
    if (d < td__sim.ndev && td__sim.dev[d].sticky)
        e = td__sim.dev[d].sticky; /* sticky errors are not cleared */
    else
        td__sim_last = cudaSuccess;
    td__sim_unlock();
    return e;
}

cudaError_t cudaPeekAtLastError(void)
{
    td__sim_lock();
    cudaError_t e = td__sim_last;
    int d = td__sim_device;
    if (d < td__sim.ndev && td__sim.dev[d].sticky)
        e = td__sim.dev[d].sticky;
    td__sim_unlock();
    return e;
}

cudaError_t cudaRuntimeGetVersion(int *v)
{
    if (!v)
        return td__sim_err(cudaErrorInvalidValue);
    *v = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *v)
{
    if (!v)
        return td__sim_err(cudaErrorInvalidValue);
    *v = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int *n)
{
    td__sim_lock();
    int nd = td__sim.ndev;
    td__sim_unlock();
    if (!n)
        return td__sim_err(cudaErrorInvalidValue);
    *n = 0;
    if (nd == 0)
        return td__sim_err(cudaErrorNoDevice);
    *n = nd;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int d)
{
    td__sim_lock();
    cudaError_t e = td__sim_in_hostfn ? cudaErrorNotPermitted
                    : d < 0 || d >= td__sim.ndev ? cudaErrorInvalidDevice
                                                 : cudaSuccess;
    if (e == cudaSuccess) {
        td__sim_device = d;
        td__sim.dev[d].calls++; /* CUDA 12+: makes the primary context */
    }
    td__sim_unlock();
    return td__sim_err(e);
}

cudaError_t cudaGetDevice(int *d)
{
    if (!d)
        return td__sim_err(cudaErrorInvalidValue);
    *d = td__sim_device;
    return cudaSuccess;
}

cudaError_t cudaSetDeviceFlags(unsigned flags)
{
    td__sim_lock();
    cudaError_t e = td__sim_gate();
    if (e == cudaSuccess)
        td__sim.dev[td__sim_device].flags = flags;
    td__sim_unlock();
    return td__sim_err(e);
}

cudaError_t cudaGetDeviceFlags(unsigned *flags)
{
    td__sim_lock();
    cudaError_t e = td__sim_gate();
    if (e == cudaSuccess && flags)
        *flags = td__sim.dev[td__sim_device].flags;
    td__sim_unlock();
    return td__sim_err(flags ? e : cudaErrorInvalidValue);
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int d)
{
    td__sim_lock();
    int nd = td__sim.ndev;
    size_t cap = d >= 0 && d < nd ? td__sim.dev[d].cap : 0;
    int major = d >= 0 && d < nd ? td__sim.dev[d].cc_major : 0;
    int minor = d >= 0 && d < nd ? td__sim.dev[d].cc_minor : 0;
    td__sim_unlock();
    if (!p)
        return td__sim_err(cudaErrorInvalidValue);
    if (d < 0 || d >= nd)
        return td__sim_err(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "traind simulated GPU %d", d);
    p->totalGlobalMem = cap;
    p->major = major;
    p->minor = minor;
    p->multiProcessorCount = 108;
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024;
    p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 0x7fffffff;
    p->maxGridSize[1] = p->maxGridSize[2] = 65535;
    p->sharedMemPerBlock = 48 << 10;
    p->unifiedAddressing = 1;
    p->asyncEngineCount = 2;
    p->concurrentKernels = 1;
    return cudaSuccess;
}

/* ---- device memory ---------------------------------------------------------- */

cudaError_t cudaMalloc(void **ptr, size_t bytes)
{
    td__sim_lock();
    cudaError_t e = td__sim_gate();
    int d = td__sim_device;
    if (e == cudaSuccess && !ptr)
        e = cudaErrorInvalidValue;
    if (e == cudaSuccess)
        e = td__sim_unsafe("cudaMalloc");
    if (e != cudaSuccess)
        goto out;
    *ptr = NULL;
    if (bytes == 0)
        goto out;
    td__sim.mallocs++;
    td_sim_dev *dv = &td__sim.dev[d];
    size_t charge = (bytes + 255) & ~(size_t)255;
    if (td__sim.mallocs == td__sim.oom_at || charge > dv->cap - dv->used) {
        td__sim_say("cudaMalloc #%ld of %zu bytes on device %d: out of "
                    "memory (%zu of %zu bytes in use%s)", td__sim.mallocs,
                    bytes, d, dv->used, dv->cap,
                    td__sim.mallocs == td__sim.oom_at ? ", TD_SIM_OOM_AT"
                                                      : "");
        e = cudaErrorMemoryAllocation;
        goto out;
    }
    td_sim_alloc a = {.dev = d, .bytes = bytes};
    a.base = aligned_alloc(256, charge);
    if (!a.base || td__insert(&td__sim.dmem, &td__sim.ndmem,
                              &td__sim.capdmem, a)) {
        free(a.base);
        e = cudaErrorMemoryAllocation;
        goto out;
    }
    memset(a.base, 0xff, bytes); /* poison: NaN in every float */
    dv->used += charge;
    if (dv->used > dv->peak)
        dv->peak = dv->used;
    *ptr = a.base;
out:
    td__sim_unlock();
    return td__sim_err(e);
}

/* cudaFree synchronises the device first (documented behaviour). */
cudaError_t cudaFree(void *p)
{
    td__sim_lock();
    cudaError_t e = td__sim_gate();
    if (e == cudaErrorNotPermitted || !p)
        goto out;
    if ((e = td__sim_unsafe("cudaFree")) != cudaSuccess)
        goto out;
    td_sim_alloc *a = td__sim_dfind(p, 0);
    if (!a || a->base != p) {
        td__sim_say("cudaFree(%p): not the start of a device allocation",
                    p);
        e = cudaErrorInvalidValue;
        goto out;
    }
    int d = a->dev;
    td__sim_drain_dev(d);
    a = td__sim_dfind(p, 0); /* the table may have moved while waiting */
    if (!a)
        goto out;
    td__sim.dev[d].used -= (a->bytes + 255) & ~(size_t)255;
    free(a->rec);
    free(a->base);
    td__remove(td__sim.dmem, &td__sim.ndmem, a);
out:
    td__sim_unlock();
    return td__sim_err(e);
}

cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total)
{
    td__sim_lock();
    cudaError_t e = td__sim_gate();
    if (e == cudaSuccess && (!free_b || !total))
        e = cudaErrorInvalidValue;
    if (e == cudaSuccess) {
        td_sim_dev *dv = &td__sim.dev[td__sim_device];
        *free_b = dv->cap - dv->used;
        *total = dv->cap;
    }
    td__sim_unlock();
    return td__sim_err(e);
}

/* ---- pinned host memory -------------------------------------------------------- */

cudaError_t cudaHostAlloc(void **ptr, size_t bytes, unsigned flags)
{
    td__sim_lock();
    cudaError_t e = td__sim_gate();
    if (e == cudaSuccess && !ptr)
        e = cudaErrorInvalidValue;
    if (e != cudaSuccess)
        goto out;
    size_t sz = bytes ? (bytes + 4095) & ~(size_t)4095 : 4096;
    td_sim_alloc a = {.dev = -1, .bytes = bytes ? bytes : 1};
    if (sz > td__sim.pinned_cap - td__sim.pinned_used) {
        td__sim_say("cudaHostAlloc of %zu bytes: past the page-locked limit "
                    "(TD_SIM_PINNED_KB, %zu bytes locked)", bytes,
                    td__sim.pinned_used);
        e = cudaErrorMemoryAllocation;
        goto out;
    }
    a.base = aligned_alloc(4096, sz);
    if (!a.base || td__insert(&td__sim.hmem, &td__sim.nhmem,
                              &td__sim.caphmem, a)) {
        free(a.base);
        e = cudaErrorMemoryAllocation;
        goto out;
    }
    td__sim.host_allocs++;
    td__sim.pinned_used += sz;
    *ptr = a.base;
out:
    td__sim_unlock();
    return td__sim_err(e);
}

cudaError_t cudaMallocHost(void **ptr, size_t bytes)
{
    return cudaHostAlloc(ptr, bytes, cudaHostAllocDefault);
}

/* Frees pinned memory; like the real call it synchronises the device. */
cudaError_t cudaFreeHost(void *p)
{
    td__sim_lock();
    cudaError_t e = td__sim_gate();
    if (e == cudaErrorNotPermitted || !p)
        goto out;
    td_sim_alloc *a = td__sim_hfind(p, 0);
    if (!a || a->base != p || a->registered) {
        td__sim_say("cudaFreeHost(%p): not from cudaHostAlloc", p);
        e = cudaErrorInvalidValue;
        goto out;
    }
    for (int d = 0; d < td__sim.ndev; d++)
        td__sim_drain_dev(d);
    a = td__sim_hfind(p, 0);
    if (!a)
        goto out;
    td__sim.pinned_used -= (a->bytes + 4095) & ~(size_t)4095;
    free(a->base);
    td__remove(td__sim.hmem, &td__sim.nhmem, a);
out:
    td__sim_unlock();
    return td__sim_err(e);
}

cudaError_t cudaHostRegister(void *p, size_t bytes, unsigned flags)
{
    td__sim_lock();
    cudaError_t e = td__sim_gate();
    if (e == cudaSuccess && (!p || !bytes))
        e = cudaErrorInvalidValue;
    if (e != cudaSuccess)
        goto out;
    for (int i = 0; i < td__sim.nhmem; i++) {
        td_sim_alloc *h = &td__sim.hmem[i];
        if ((char *)p < h->base + h->bytes && h->base < (char *)p + bytes) {
            e = cudaErrorHostMemoryAlreadyRegistered;
            goto out;
        }
    }
    if (td__sim_dstart(p)) {
        e = cudaErrorInvalidValue;
        goto out;
    }
    size_t sz = (bytes + 4095) & ~(size_t)4095;
    if (sz > td__sim.pinned_cap - td__sim.pinned_used) {
        td__sim_say("cudaHostRegister of %zu bytes: past the page-locked "
                    "limit (TD_SIM_PINNED_KB)", bytes);
        e = cudaErrorMemoryAllocation;
        goto out;
    }
    td_sim_alloc a = {.base = p, .bytes = bytes, .dev = -1, .registered = 1};
    if (td__insert(&td__sim.hmem, &td__sim.nhmem, &td__sim.caphmem, a))
        e = cudaErrorMemoryAllocation;
    else {
        td__sim.host_allocs++;
        td__sim.pinned_used += sz;
    }
out:
    td__sim_unlock();
    return td__sim_err(e);
}

cudaError_t cudaHostUnregister(void *p)
{
    td__sim_lock();
    cudaError_t e = td__sim_gate();
    if (e == cudaErrorNotPermitted)
        goto out;
    td_sim_alloc *a = p ? td__sim_hfind(p, 0) : NULL;
    if (!a || a->base != p || !a->registered) {
        e = cudaErrorHostMemoryNotRegistered;
        goto out;
    }
    for (int d = 0; d < td__sim.ndev; d++)
        td__sim_drain_dev(d);
    a = td__sim_hfind(p, 0);
    if (a) {
        td__sim.pinned_used -= (a->bytes + 4095) & ~(size_t)4095;
        td__remove(td__sim.hmem, &td__sim.nhmem, a);
    }
out:
    td__sim_unlock();
    return td__sim_err(e);
}

int td_sim_is_pinned(const void *p, size_t bytes)
{
    td__sim_lock();
    int r = td__sim_hfind(p, bytes) != NULL;
    td__sim_unlock();
    return r;
}

/* A copy of device dev's state taken under the lock; all zero for no
 * such device (its counters then read 0). */
static td_sim_dev td__dev_snap(int dev)
{
    td_sim_dev d = {0};
    td__sim_lock();
    if (dev >= 0 && dev < td__sim.ndev)
        d = td__sim.dev[dev];
    td__sim_unlock();
    return d;
}

long td_sim_calls(int dev)
{
    return td__dev_snap(dev).calls;
}

long td_sim_launches(int dev)
{
    return td__dev_snap(dev).launches;
}

long td_sim_pageable_d2h(int dev)
{
    return td__dev_snap(dev).pageable_d2h;
}

long td_sim_pageable_h2d(int dev)
{
    return td__dev_snap(dev).pageable_h2d;
}

size_t td_sim_peak(int dev)
{
    return td__dev_snap(dev).peak;
}

size_t td_sim_used(int dev)
{
    return td__dev_snap(dev).used;
}
