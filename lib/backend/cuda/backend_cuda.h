/* backend_cuda.h - what the CUDA backend offers beyond backend.h.
 *
 * Owns: the CUDA-only entry points the trainer and the pipeline use: the
 * pinned slot allocator (batch slots the copy engine can read directly),
 * the device arena size, and per-step device timings (copy and compute
 * intervals) read without blocking.  Everything else goes through the
 * generic contract in backend.h.
 * Never does: anything in a build without CUDA (every function here is
 * only declared when TD_HAVE_CUDA is 1).
 */
#ifndef TD_BACKEND_CUDA_H
#define TD_BACKEND_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "backend/memplan.h"
#include "input/batch.h"
#include "job/device.h"
#include "td_config.h"

#if TD_HAVE_CUDA

/* Plugs the CUDA backend and the GPU probe into libtraind
 * (td_backend_register_gpu, td_device_register_probe).  traind and the GPU
 * tests call it once at start; nothing else links this library. */
void td_cuda_register(void);

/* The CUDA runtime's view of the machine (cuda_device.cu). */
int td__cuda_probe(td_device_info *info);
/* Runs the Philox generator on GPU `dev` for n consecutive indices and
 * copies the 4-word blocks to out (4*n words).  TD_E_DEVICE on failure,
 * with the reason in err.  Used by the GPU self-test. */
int td__cuda_philox_selftest(int dev, uint64_t seed, uint64_t stream,
                             uint32_t *out, int n, char *err, size_t errcap);

/* The CUDA backend (cuda.c); through td_backend_create("cuda:N"). */
int td_backend_cuda_create(const td_model *model, const td_backend_config *cfg,
                           int device, td_backend **out, char *err,
                           size_t errcap);

/* Batch slots in page-locked host memory (cudaHostAlloc, portable across
 * devices), so the host-to-device copy is a true asynchronous DMA.  alloc
 * and free make GPU `device` the calling thread's current device first
 * (a CUDA call with no device set would create a context on GPU 0).  When
 * page-locking fails (no driver, the locked-memory limit) alloc falls
 * back to pageable memory (64-byte aligned) and logs a warning, once per
 * process: the copies then stage through the driver and block the caller
 * while they do.  NULL only when malloc fails too. */
td_slot_allocator td_cuda_pinned_allocator(int device);

/* Bytes of the one device allocation made at create (parameters,
 * gradients, optimizer state, activations, workspaces): exactly the
 * plan's total less its headroom (below). */
size_t td_backend_cuda_arena_bytes(const td_backend *be);

/* The memory plan the arena was laid out by (memplan.h, with the
 * backend's real cuDNN workspace; headroom_min 0, the backend keeps its
 * own headroom beside the arena): every value, gradient and mask with its
 * lifetime and its offset in the activation region.  NULL for another
 * backend.  Borrowed: valid until the backend is destroyed. */
const td_memplan *td_backend_cuda_plan(const td_backend *be);

/* Where the backend points layer `layer`'s value (TD_T_VALUE) or gradient
 * (TD_T_GRAD): the byte offset in the activation region, -1 when it has
 * none (the batch's gradient) or the arguments are not those of a CUDA
 * backend's layer.  Tests check it against the plan. */
long long td_backend_cuda_act_offset(const td_backend *be,
                                     enum td_tensor_kind kind, int layer);

/* The 16-bit weight copy of layer `layer`'s weights (a convolution or
 * dense layer of a bf16 or fp16 job) as the device stores it: a
 * filter in KRSC with its stored channels (the padded stem's pad
 * channels included), a dense layer over an NHWC input in [out][h,w,c],
 * other dense layers as they are (kernels/layout.h).  Copies its 16-bit
 * elements into out (cap of them) after the compute stream's work;
 * returns how many, -ENOSPC when cap is too small, -EINVAL when be is
 * not a CUDA backend with a 16-bit copy or the layer has no weights.
 * Tests check the copy against the fp32 masters with it. */
long td_backend_cuda_read_lowp(td_backend *be, int layer, uint16_t *out,
                               size_t cap);

/* Device timings of one training step, in ms since the backend was
 * created: its host-to-device copy on the copy stream and its
 * train_step on the compute stream. */
typedef struct td_cuda_step_times {
    int64_t step;              /* 0-based count of uploads */
    double copy_start, copy_end;
    double compute_start, compute_end;
} td_cuda_step_times;

/* Times of upload number `step`: 0, -EAGAIN while its events have not
 * completed (never blocks: cudaEventQuery), -ENOENT when the step is too
 * old (the backend keeps the last TD_CUDA_TIMES_KEPT) or was never run,
 * TD_E_DEVICE on a device error.  Read one or two steps behind. */
#define TD_CUDA_TIMES_KEPT 8
int td_backend_cuda_step_times(td_backend *be, int64_t step,
                               td_cuda_step_times *out);

/* Whether the host-to-device copy of upload number `upload` has finished,
 * so its batch slot can go back to the pipeline: 1 yes, 0 not yet (never
 * blocks), -ENOENT when older than the last TD_CUDA_TIMES_KEPT uploads,
 * TD_E_DEVICE on a device error.  Unlike a td_event recorded after the
 * upload, this does not also wait for the compute stream. */
int td_backend_cuda_copy_done(td_backend *be, int64_t upload);

/* CUDA graphs (cuda_graph.c, docs/cuda.md): cuda_graphs auto turns them
 * on when the shortest of the first 3 eager full training steps took
 * less than this on the device (k0 to k1). */
#define TD_CUDA_GRAPH_SHORT_MS 5.0
typedef struct td_cuda_graph_info {
    int mode;            /* cfg.cuda_graphs (enum td_cuda_graphs) */
    int on;              /* -1 auto, not decided yet; 0 eager; 1 graphs */
    double eager_ms;     /* auto: the shortest eager step timed; -1 none */
    long captures;       /* graphs captured (one per batch buffer) */
    long launches;       /* training steps run as a graph launch */
} td_cuda_graph_info;
/* 0, or -EINVAL when be is not a CUDA backend. */
int td_backend_cuda_graph_info(td_backend *be, td_cuda_graph_info *out);

#endif
#endif
