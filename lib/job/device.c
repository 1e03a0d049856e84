/* device.c - device discovery and the "device" field of a job (device.h). */
#include "job/device.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

static _Atomic(int (*)(td_device_info *)) td__probe;

/* GPUs this process can no longer use (td_device_mark_unusable). */
static pthread_mutex_t td__lost_mu = PTHREAD_MUTEX_INITIALIZER;
static char td__lost_why[TD_MAX_GPUS][256];
static int td__lost[TD_MAX_GPUS];

int td_device_mark_unusable(int index, const char *why)
{
    int marked = 0;
    if (index < 0 || index >= TD_MAX_GPUS)
        return 0;
    pthread_mutex_lock(&td__lost_mu);
    if (!td__lost[index]) {
        td__lost[index] = marked = 1;
        snprintf(td__lost_why[index], sizeof td__lost_why[index], "%s",
                 why && *why ? why : "a sticky CUDA error");
    }
    pthread_mutex_unlock(&td__lost_mu);
    return marked;
}

int td_device_first_unusable(char *why, size_t cap)
{
    int found = -1;
    pthread_mutex_lock(&td__lost_mu);
    for (int i = 0; i < TD_MAX_GPUS && found < 0; i++)
        if (td__lost[i]) {
            found = i;
            if (why && cap)
                snprintf(why, cap, "%s", td__lost_why[i]);
        }
    pthread_mutex_unlock(&td__lost_mu);
    return found;
}

void td_device_unusable_reset(void)
{
    pthread_mutex_lock(&td__lost_mu);
    memset(td__lost, 0, sizeof td__lost);
    memset(td__lost_why, 0, sizeof td__lost_why);
    pthread_mutex_unlock(&td__lost_mu);
}

static void td__mark_info(td_device_info *info)
{
    pthread_mutex_lock(&td__lost_mu);
    for (int i = 0; i < info->cuda_count && i < TD_MAX_GPUS; i++)
        if (td__lost[i]) {
            info->gpus[i].unusable = 1;
            _Static_assert(sizeof info->gpus[i].unusable_why ==
                           sizeof td__lost_why[i], "same size");
            memcpy(info->gpus[i].unusable_why, td__lost_why[i],
                   sizeof td__lost_why[i]);
        }
    pthread_mutex_unlock(&td__lost_mu);
}

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
        int rc = probe(info);
        td__mark_info(info);
        return rc;
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
        while (idx < info->cuda_count && info->gpus[idx].unusable)
            idx++;
        if (idx < info->cuda_count)
            goto cuda;
        out->kind = TD_DEVICE_CPU;
        if (info->cuda_count > 0)
            snprintf(out->desc, sizeof out->desc, "cpu (every GPU is "
                     "unusable until traind restarts: %.200s)",
                     info->gpus[0].unusable_why);
        else
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
    if (info->gpus[idx].unusable) {
        td_set_error(err, errcap, 0, "device \"%s\" is unusable until traind "
                     "restarts: %s", want, info->gpus[idx].unusable_why);
        return TD_E_DEVICE;
    }
cuda:
    out->kind = TD_DEVICE_CUDA;
    out->index = (int)idx;
    snprintf(out->desc, sizeof out->desc, "cuda:%d %s", (int)idx,
             info->gpus[idx].name);
    return 0;
}
