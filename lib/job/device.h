/* device.h - which compute devices this process can use.
 *
 * traind runs on the CPU backend everywhere and on CUDA GPUs when it was
 * built with CUDA and the runtime finds a device.  A machine with the CUDA
 * libraries but no driver or no GPU is an ordinary CPU machine here: the
 * probe reports the runtime's reason and never fails the process.
 * Programs that never drive a GPU (trainctl) do not link the CUDA
 * runtime: they learn about devices from the daemon's version reply.
 */
#ifndef TD_DEVICE_H
#define TD_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#define TD_MAX_GPUS 16

typedef struct td_gpu_info {
    char name[256];
    uint64_t mem_bytes;
    int cc_major, cc_minor; /* compute capability */
    int unusable;           /* a sticky error killed its context here */
    char unusable_why[256]; /* that error, for people */
} td_gpu_info;

typedef struct td_device_info {
    int cuda_built;      /* compiled with the CUDA backend */
    int cuda_count;      /* usable GPUs found (0 if none or not built) */
    int cuda_runtime;    /* CUDA runtime version, e.g. 13000; 0 if unknown */
    char reason[256];    /* why cuda_count is 0, for people */
    td_gpu_info gpus[TD_MAX_GPUS];
} td_device_info;

enum td_device_kind { TD_DEVICE_CPU = 0, TD_DEVICE_CUDA = 1 };

typedef struct td_device_choice {
    enum td_device_kind kind;
    int index;           /* GPU ordinal for CUDA */
    char desc[300];      /* "cpu" or "cuda:0 NVIDIA A100-SXM4-80GB" */
} td_device_choice;

/* Fills info.  Always returns 0: "no GPU" is a result, not an error.
 * GPUs marked with td_device_mark_unusable say so (unusable, and why). */
int td_device_probe(td_device_info *info);

/* A sticky CUDA error (an illegal address, a launch failure: the CUDA
 * runtime documents that "any further CUDA work will return the same
 * error" until the process ends) makes GPU `index` unusable for the rest
 * of this process.  The backend marks it when it sees one; from then on
 * td_device_probe reports it, `auto` skips it and `cuda:N` naming it is
 * refused, and the daemon exits so that its service manager restarts it
 * with a fresh context.  The mark is process-wide, as the CUDA context
 * is, and thread-safe; the first reason given is kept.  Returns 1 when
 * this call marked it, 0 when it already was (or index is out of range). */
int td_device_mark_unusable(int index, const char *why);
/* The lowest GPU index marked unusable, its reason into why (may be
 * NULL); -1 when every GPU is usable. */
int td_device_first_unusable(char *why, size_t cap);
/* Forgets every mark (tests). */
void td_device_unusable_reset(void);

/* Resolves a job's "device" field: "auto" (the first usable GPU when
 * there is one, else CPU),
 * "cpu", "cuda" (= "cuda:0") or "cuda:N".  Returns 0, -EINVAL for a
 * malformed name, or TD_E_DEVICE when the named GPU is absent; err (may be
 * NULL) receives a message for people in either case. */
int td_device_select(const char *want, const td_device_info *info,
                     td_device_choice *out, char *err, size_t errcap);

/* The GPU runtime's probe, registered by the CUDA backend's library
 * (td_cuda_register() in backend/cuda/backend_cuda.h); without one,
 * td_device_probe reports cuda_built 0. */
void td_device_register_probe(int (*probe)(td_device_info *info));

#endif
