/* bounds.c - resource bounds at submit (see bounds.h).
 *
 * Owns: the CPU count the daemon may use, the memory cap, and the host
 * memory estimate of a job.  The estimate is deliberately simple and on
 * the high side: what the runner allocates up front (batch slots, the
 * model and its optimizer state) plus what a step touches (activations
 * and their gradients, one float input batch) plus decode scratch.  A
 * job on a GPU is also billed by the memory planner (memplan.h) against
 * the device's memory.
 * Never: allocates what it estimates, or reads files.
 */
#define _GNU_SOURCE
#include "bounds.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "backend/memplan.h"
#include "base/error.h"
#include "input/pipeline.h"
#include "settings.h"

int td_limits_cpus(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0)
            return n;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static uint64_t td__mem_total(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    unsigned long long kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemTotal: %llu kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    if (kb == 0) {
        long pages = sysconf(_SC_PHYS_PAGES), ps = sysconf(_SC_PAGESIZE);
        return pages > 0 && ps > 0 ? (uint64_t)pages * (uint64_t)ps
                                   : (uint64_t)4 << 30;
    }
    return (uint64_t)kb * 1024;
}

uint64_t td_limits_memory_cap(const json_t *settings)
{
    long long mb = td_settings_int(settings, "max_job_memory_mb");
    if (mb > 0)
        return (uint64_t)mb << 20;
    return td__mem_total() / 2;
}

int td_limits_check_file_size(const json_t *settings, const char *field,
                              const char *path, char *err, size_t errcap)
{
    struct stat st;
    uint64_t most = td_limits_memory_cap(settings);
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) ||
        (uint64_t)st.st_size <= most)
        return 0;
    snprintf(err, errcap, "%s: %.1000s is %.1f MB, more than a job may hold "
             "in memory (max_job_memory_mb: %.1f MB)", field, path,
             (double)st.st_size / 1e6, (double)most / 1e6);
    return TD_E_SPEC;
}

/* Slots the runner allocates for one pipeline (runner.c: a fixed prefetch,
 * or room for the autotuner: 4..16 slots within 512 MiB). */
static uint64_t td__slots(const td_job_spec *s)
{
    uint64_t B = (uint64_t)s->batch_size;
    uint64_t slot = B * (uint64_t)s->input.size[0] *
                    (uint64_t)s->input.size[1] * (uint64_t)s->input.channels +
                    B * 4;
    uint64_t n = (uint64_t)s->input.prefetch;
    if (s->input.prefetch == 0) {
        uint64_t fit = slot ? ((uint64_t)512 << 20) / slot : 16;
        n = fit > 16 ? 16 : fit < 4 ? 4 : fit;
    }
    return n * slot;
}

void td_limits_estimate(const td_job_spec *s, const td_model *model,
                        int on_gpu, td_mem_estimate *e)
{
    memset(e, 0, sizeof *e);
    uint64_t B = (uint64_t)s->batch_size;
    uint64_t px = (uint64_t)s->input.size[0] * (uint64_t)s->input.size[1] *
                  (uint64_t)s->input.channels;
    if (s->input.source == TD_SOURCE_FILES) {
        e->slots = td__slots(s) * (s->data.val.n ? 2 : 1);
        int workers = s->input.workers > 0 ? s->input.workers
                                           : td_limits_cpus();
        if (workers > TD_PIPELINE_MAX_WORKERS) /* auto, as runner.c */
            workers = TD_PIPELINE_MAX_WORKERS;
        /* A worker's decoded source image and resampler rows: at least
         * the output image in floats, and 8 MiB for the source. */
        e->scratch = (uint64_t)workers * (px * 4 + ((uint64_t)8 << 20));
    } else {
        e->slots = B * px + B * 4; /* the synthetic batch */
    }
    if (model && on_gpu) {
        e->model = (model->param_count + td_model_state_count(model)) * 4;
    } else if (model) {
        uint64_t params = model->param_count + td_model_state_count(model);
        e->model = params * 4 * 4; /* values, gradients, two moments */
        uint64_t act = px;
        for (int i = 1; i < model->nlayers; i++) {
            const td_shape *o = &model->layers[i].out;
            act += (uint64_t)o->c * (uint64_t)o->h * (uint64_t)o->w;
        }
        e->activations = B * act * 4 * 2; /* outputs and their gradients */
    }
    e->total = e->slots + e->scratch + e->model + e->activations;
}

/* The figures `trainctl plan` uses for what it cannot know on the host:
 * cuDNN's largest workspace is chosen on the device (the backend logs the
 * real one), cuBLAS keeps its own, and lazily loaded kernels and engines
 * need room at first use (issue 14 finding 3). */
#define TD__NOMINAL_WORKSPACE ((size_t)256 << 20)
#define TD__BLAS_WORKSPACE ((size_t)32 << 20)
#define TD__HEADROOM_MIN ((size_t)512 << 20)

/* Values the optimizer keeps per parameter: a momentum, AdamW's two
 * moments, or none (plain SGD). */
static int td__optim_slots(const td_job_spec *s)
{
    return s->optimizer.type == TD_OPT_ADAMW ? 2
           : s->optimizer.momentum > 0    ? 1
                                          : 0;
}

uint64_t td_limits_device_estimate(const td_job_spec *s,
                                   const td_model *model)
{
    if (!model)
        return 0;
    int slots = td__optim_slots(s);
    /* auto is tf32 on a GPU (docs/compute.md): 4-byte activations */
    int low = s->precision == TD_PREC_BF16 || s->precision == TD_PREC_FP16;
    td_memplan_config c = {
        .batch = s->batch_size, .act_bytes = low ? 2 : 4,
        .optim_slots = slots,
        /* the CUDA backend's layout: placed by liveness, ReLU in place */
        .reuse = 1, .nbuf = 2, .workspace = TD__NOMINAL_WORKSPACE,
        .blas_workspace = TD__BLAS_WORKSPACE,
        .headroom_min = TD__HEADROOM_MIN,
    };
    /* fp16: the batch norms fused with cuDNN keep reserve spaces, billed
     * as `trainctl plan --precision fp16` bills them */
    td_memplan p;
    char e[256];
    int rc = td_memplan_build_host(model, &c, s->precision == TD_PREC_FP16,
                                   &p, e, sizeof e);
    if (rc != 0)
        return 0;
    uint64_t total = p.total;
    td_memplan_free(&p);
    return total;
}

static double td__gib(uint64_t b) { return (double)b / (double)(1ULL << 30); }

/* The job's GPU (gpu: its choice, NULL when it runs on the CPU): its bill
 * against the card and the configured cap. */
static int td__check_device(const json_t *settings, const td_job_spec *s,
                            const td_model *model,
                            const td_device_info *devices,
                            const td_device_choice *gpu, char *err,
                            size_t errcap)
{
    if (!gpu || !model || gpu->index < 0 || gpu->index >= devices->cuda_count)
        return 0;
    uint64_t need = td_limits_device_estimate(s, model);
    uint64_t have = devices->gpus[gpu->index].mem_bytes;
    long long mb = td_settings_int(settings, "max_job_device_memory_mb");
    uint64_t cap = mb > 0 ? (uint64_t)mb << 20 : have;
    const char *capname = mb > 0 ? "max_job_device_memory_mb allows"
                                 : "the device has";
    if (mb > 0 && have && have < cap) {
        cap = have;
        capname = "the device has";
    }
    if (!need || !cap || need <= cap)
        return 0;
    snprintf(err, errcap, "batch_size: the job would need about %.2f GiB on "
             "cuda:%d (%s), more than %s (%.2f GiB) at batch_size %d and "
             "input.size %dx%dx%d; a smaller batch_size fits, and `trainctl "
             "plan` prints the whole bill", td__gib(need), gpu->index,
             devices->gpus[gpu->index].name, capname, td__gib(cap),
             s->batch_size, s->input.size[0], s->input.size[1],
             s->input.channels);
    return -E2BIG;
}

int td_limits_check_spec(const json_t *settings, const td_job_spec *s,
                         const td_model *model, const td_device_info *devices,
                         char *err, size_t errcap)
{
    int cpus = td_limits_cpus();
    if (s->threads > cpus) {
        snprintf(err, errcap, "threads: %d is more than the %d CPU(s) traind "
                 "may use", s->threads, cpus);
        return -EINVAL;
    }
    if (s->input.workers > cpus) {
        snprintf(err, errcap, "input.workers: %d is more than the %d CPU(s) "
                 "traind may use", s->input.workers, cpus);
        return -EINVAL;
    }
    td_device_choice ch;
    int on_gpu = devices &&
                 td_device_select(s->device, devices, &ch, NULL, 0) == 0 &&
                 ch.kind == TD_DEVICE_CUDA;
    td_mem_estimate e;
    td_limits_estimate(s, model, on_gpu, &e);
    uint64_t cap = td_limits_memory_cap(settings);
    if (e.total <= cap)
        return td__check_device(settings, s, model, devices,
                                on_gpu ? &ch : NULL, err, errcap);
    /* Name the field behind the largest share. */
    const char *field = "input.size";
    uint64_t big = e.slots;
    if (e.scratch > big) {
        big = e.scratch;
        field = "input.workers";
    }
    if (e.model > big) {
        big = e.model;
        field = s->data.classes > 1000 ? "data.classes" : "model";
    }
    if (e.activations > big)
        field = "batch_size";
    snprintf(err, errcap, "%s: the job would need about %.2f GiB of host "
             "memory, more than max_job_memory_mb allows (%.2f GiB): batch "
             "slots %.2f GiB (batch_size %d x input.size %dx%dx%d), decode "
             "scratch %.2f GiB, model and optimizer state %.2f GiB%s, "
             "activations %.2f GiB", field, td__gib(e.total), td__gib(cap),
             td__gib(e.slots), s->batch_size, s->input.size[0],
             s->input.size[1], s->input.channels, td__gib(e.scratch),
             td__gib(e.model),
             s->data.classes > 1000 ? " (data.classes is large)" : "",
             td__gib(e.activations));
    return -E2BIG;
}

uint64_t td_limits_checkpoint_bytes(const td_job_spec *s,
                                    const td_model *model)
{
    if (!model)
        return 0;
    uint64_t slots = (uint64_t)td__optim_slots(s);
    uint64_t values = (uint64_t)model->param_count * (1 + slots) +
                      td_model_state_count(model);
    /* the header: a few KiB of metadata (the model, the preprocessing),
     * each layer's tensors' names, shapes and offsets (about 100 bytes
     * each, up to 4 tensors a layer), an epoch's line of history (about
     * 350 bytes) */
    uint64_t header = 4096 + (uint64_t)model->nlayers * 512 +
                      (uint64_t)s->epochs * 512;
    return values * 4 + header;
}

static double td__mb(uint64_t b) { return (double)b / 1e6; }

int td_limits_check_disk(const char *dir, const td_job_spec *s,
                         const td_model *model, const char *hint, char *err,
                         size_t errcap)
{
    uint64_t one = td_limits_checkpoint_bytes(s, model);
    struct statvfs v;
    if (!one || statvfs(dir, &v) != 0)
        return 0;
    uint64_t files = (uint64_t)s->checkpoint.keep +
                     (s->checkpoint.keep_best ? 1 : 0) + 1;
    uint64_t need = one * files;
    uint64_t have = (uint64_t)v.f_bavail * (uint64_t)v.f_frsize;
    if (need <= have)
        return 0;
    snprintf(err, errcap, "checkpoint.keep: the job's checkpoints take up to "
             "%.1f MB (%llu of about %.2f MB: checkpoint.keep %d%s and the one "
             "being written), but %s has %.1f MB free; free some space%s or "
             "lower checkpoint.keep", td__mb(need), (unsigned long long)files,
             td__mb(one), s->checkpoint.keep,
             s->checkpoint.keep_best ? ", the best one" : "", dir,
             td__mb(have), hint ? hint : "");
    return -ENOSPC;
}
