/* bounds.c - resource bounds at submit (see bounds.h).
 *
 * Owns: the CPU count the daemon may use, the memory cap, and the host
 * memory estimate of a job.  The estimate is deliberately simple and on
 * the high side: what the runner allocates up front (batch slots, the
 * model and its optimizer state) plus what a step touches (activations
 * and their gradients, one float input batch) plus decode scratch.
 * Never: allocates what it estimates, or reads files.
 */
#define _GNU_SOURCE
#include "bounds.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

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
                        td_mem_estimate *e)
{
    memset(e, 0, sizeof *e);
    uint64_t B = (uint64_t)s->batch_size;
    uint64_t px = (uint64_t)s->input.size[0] * (uint64_t)s->input.size[1] *
                  (uint64_t)s->input.channels;
    if (s->input.source == TD_SOURCE_FILES) {
        e->slots = td__slots(s) * (s->data.val.n ? 2 : 1);
        int workers = s->input.workers > 0 ? s->input.workers
                                           : td_limits_cpus();
        /* A worker's decoded source image and resampler rows: at least
         * the output image in floats, and 8 MiB for the source. */
        e->scratch = (uint64_t)workers * (px * 4 + ((uint64_t)8 << 20));
    } else {
        e->slots = B * px + B * 4; /* the synthetic batch */
    }
    if (model) {
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

static double td__gib(uint64_t b) { return (double)b / (double)(1ULL << 30); }

int td_limits_check_spec(const json_t *settings, const td_job_spec *s,
                         const td_model *model, char *err, size_t errcap)
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
    td_mem_estimate e;
    td_limits_estimate(s, model, &e);
    uint64_t cap = td_limits_memory_cap(settings);
    if (e.total <= cap)
        return 0;
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
