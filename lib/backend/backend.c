/* backend.c - picks a backend implementation by name (see backend.h). */
#include "backend/backend.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

static _Atomic(const td_gpu_backend *) td__gpu;

void td_backend_register_gpu(const td_gpu_backend *gpu)
{
    atomic_store(&td__gpu, gpu);
}

const td_gpu_backend *td_backend_gpu(void)
{
    return atomic_load(&td__gpu);
}

int td_backend_create(const char *kind, const td_model *model,
                      const td_backend_config *cfg, td_backend **out,
                      char *err, size_t errcap)
{
    *out = NULL;
    if (strcmp(kind, "cpu") == 0)
        return td_backend_cpu_create(model, cfg, out, err, errcap);
    if (strcmp(kind, "cuda") == 0 || strncmp(kind, "cuda:", 5) == 0) {
        long dev = 0;
        if (kind[4] == ':') {
            char *end;
            errno = 0;
            dev = strtol(kind + 5, &end, 10);
            if (end == kind + 5 || *end || errno || dev < 0 || dev > 1024) {
                snprintf(err, errcap, "device \"%s\": expected cuda or "
                         "cuda:N", kind);
                return -EINVAL;
            }
        }
        const td_gpu_backend *gpu = td_backend_gpu();
        if (gpu)
            return gpu->create(model, cfg, (int)dev, out, err, errcap);
        snprintf(err, errcap, "device %s: this traind was built without "
                 "CUDA", kind);
        return TD_E_NOTSUP;
    }
    snprintf(err, errcap, "device: unknown backend \"%s\"", kind);
    return -EINVAL;
}

size_t td_backend_snapshot_floats(const td_model *m, const td_optim_config *o)
{
    return m->param_count * (1 + (size_t)td_optim_slots(o)) +
           td_model_state_count(m);
}

int td_backend_snapshot_layout(const td_model *m, const td_optim_config *o,
                               td_snapshot_entry *out, int cap)
{
    static const char *const sgd[] = {"", ".momentum_buffer"};
    static const char *const adamw[] = {"", ".exp_avg", ".exp_avg_sq"};
    const char *const *suffix = o->type == TD_OPT_ADAMW ? adamw : sgd;
    int slots = td_optim_slots(o), k = 0;
    size_t off = 0;
    for (int s = 0; s <= slots; s++)
        for (int p = 0; p < m->nparams; p++, k++) {
            const td_param *pr = &m->params[p];
            if (k < cap) {
                td_snapshot_entry *e = &out[k];
                snprintf(e->name, sizeof e->name, "%s%s", pr->name,
                         suffix[s]);
                e->ndims = pr->ndims;
                memcpy(e->dims, pr->dims, sizeof e->dims);
                e->offset = off;
                e->count = pr->count;
            }
            off += pr->count;
        }
    for (int i = 0; i < m->nstate; i++, k++) {
        if (k < cap) {
            td_snapshot_entry *e = &out[k];
            snprintf(e->name, sizeof e->name, "%s", m->state[i].name);
            e->ndims = 1;
            e->dims[0] = (int)m->state[i].count;
            e->offset = off;
            e->count = m->state[i].count;
        }
        off += m->state[i].count;
    }
    return k;
}

int td_backend_check_config(const td_model *m, const td_backend_config *cfg,
                            char *err, size_t errcap)
{
    if (cfg->batch < 1 || cfg->batch > 65536) {
        snprintf(err, errcap, "batch_size: must be 1..65536");
        return -EINVAL;
    }
    for (int c = 0; c < m->layers[0].out.c; c++)
        if (!(cfg->std[c] > 0)) {
            snprintf(err, errcap, "input.normalize.std[%d]: must be > 0", c);
            return -EINVAL;
        }
    if (!(cfg->label_smoothing >= 0 && cfg->label_smoothing < 1)) {
        snprintf(err, errcap, "label_smoothing: must be >= 0 and < 1");
        return -EINVAL;
    }
    if (!(cfg->loss_scale >= 0 && cfg->loss_scale <= TD_LS_MAX)) {
        snprintf(err, errcap, "loss_scale: %g: must be 0 (off) or in (0, "
                 "%g]", (double)cfg->loss_scale, (double)TD_LS_MAX);
        return -EINVAL;
    }
    return td_optim_validate(&cfg->optim, err, errcap);
}
