/* device.c - device discovery and the "device" field of a job (device.h). */
#include "job/device.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

static _Atomic(int (*)(td_device_info *)) td__probe;

void td_device_register_probe(int (*probe)(td_device_info *info))
{
    atomic_store(&td__probe, probe);
}

int td_device_probe(td_device_info *info)
{
    int (*probe)(td_device_info *) = atomic_load(&td__probe);
    memset(info, 0, sizeof *info);
    if (probe) {
        info->cuda_built = 1;
        return probe(info);
    }
    snprintf(info->reason, sizeof info->reason,
             "this traind was built without CUDA");
    return 0;
}

int td_device_select(const char *want, const td_device_info *info,
                     td_device_choice *out, char *err, size_t errcap)
{
    long idx = 0;
    memset(out, 0, sizeof *out);
    if (err && errcap)
        err[0] = '\0';
    if (!want || strcmp(want, "auto") == 0) {
        if (info->cuda_count > 0)
            goto cuda;
        out->kind = TD_DEVICE_CPU;
        snprintf(out->desc, sizeof out->desc, "cpu");
        return 0;
    }
    if (strcmp(want, "cpu") == 0) {
        out->kind = TD_DEVICE_CPU;
        snprintf(out->desc, sizeof out->desc, "cpu");
        return 0;
    }
    if (strcmp(want, "cuda") == 0) {
        idx = 0;
    } else if (strncmp(want, "cuda:", 5) == 0) {
        char *end;
        errno = 0;
        idx = strtol(want + 5, &end, 10);
        if (end == want + 5 || *end || errno || idx < 0 ||
            idx >= TD_MAX_GPUS) {
            td_set_error(err, errcap, 0,
                         "device \"%s\": expected auto, cpu, cuda or cuda:N",
                         want);
            return -EINVAL;
        }
    } else {
        td_set_error(err, errcap, 0,
                     "device \"%s\": expected auto, cpu, cuda or cuda:N", want);
        return -EINVAL;
    }
    if (idx >= info->cuda_count) {
        td_set_error(err, errcap, 0, "device \"%s\" is not available: %s", want,
                     info->cuda_count > 0 ? "no GPU with that index"
                                          : info->reason);
        return TD_E_DEVICE;
    }
cuda:
    out->kind = TD_DEVICE_CUDA;
    out->index = (int)idx;
    snprintf(out->desc, sizeof out->desc, "cuda:%d %s", (int)idx,
             info->gpus[idx].name);
    return 0;
}
