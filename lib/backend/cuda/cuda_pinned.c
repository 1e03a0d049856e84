/* cuda_pinned.c - the host batch slots of a job on a GPU: page-locked
 * with the job's GPU current, so the upload's host-to-device copy runs
 * asynchronously on the copy stream (td_cuda_pinned_allocator,
 * backend_cuda.h; the input pipeline fills the slots).
 *
 * Owns: making and freeing one slot, and the fallback to pageable memory
 * (with one warning per process) when page-locking fails.
 * Never does: touch a backend, a stream or the device arena.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_int.h"
#include "base/log.h"

/* Batch slots (finding 11).  Each block starts with a header saying how
 * it was made, so that free gives it back the same way: page-locked by
 * cudaHostAlloc with the job's GPU current, or pageable from aligned_alloc
 * when page-locking failed. */
#define TD__PIN_HDR 64 /* keeps the slot 64-byte aligned */

typedef struct td__pin_hdr {
    int pinned, dev;
} td__pin_hdr;

static atomic_int td__pin_warned;

static void *td__pin_alloc(void *user, size_t bytes)
{
    int dev = (int)(intptr_t)user;
    size_t total = TD__PIN_HDR + (bytes ? bytes : 1);
    char *base = NULL;
    cudaError_t e = cudaSetDevice(dev);
    if (e == cudaSuccess)
        e = cudaHostAlloc((void **)&base, total, cudaHostAllocPortable);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        if (atomic_exchange(&td__pin_warned, 1) == 0)
            td_warn("cuda:%d: cannot page-lock %zu bytes for batch slots "
                    "(%s); using pageable memory: host-to-device copies "
                    "then stage through the driver and block the trainer "
                    "while they do", dev, total, cudaGetErrorString(e));
        base = aligned_alloc(TD__PIN_HDR, (total + TD__PIN_HDR - 1) &
                                              ~(size_t)(TD__PIN_HDR - 1));
        if (!base)
            return NULL;
    }
    td__pin_hdr h = {e == cudaSuccess, dev};
    memcpy(base, &h, sizeof h);
    return base + TD__PIN_HDR;
}

static void td__pin_free(void *user, void *p)
{
    td__pin_hdr h;
    (void)user;
    if (!p)
        return;
    char *base = (char *)p - TD__PIN_HDR;
    memcpy(&h, base, sizeof h);
    if (!h.pinned) {
        free(base);
        return;
    }
    if (cudaSetDevice(h.dev) != cudaSuccess || cudaFreeHost(base) !=
                                                   cudaSuccess)
        (void)cudaGetLastError(); /* after a sticky error: left locked */
}

td_slot_allocator td_cuda_pinned_allocator(int device)
{
    td_slot_allocator a = {td__pin_alloc, td__pin_free,
                           (void *)(intptr_t)device};
    return a;
}
