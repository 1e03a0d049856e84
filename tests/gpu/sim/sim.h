/* sim.h - the simulated CUDA device's own interface: what tests use to
 * configure and inspect it, and the two entry points through which the
 * project's kernels (sim_kernel.h) and the simulated cuBLAS and cuDNN put
 * work on a stream.
 *
 * Owns: nothing but declarations.  The simulator implements the CUDA
 * runtime, cuBLAS and cuDNN functions the backend calls, with the
 * prototypes of the real headers; see docs/cuda.md ("The simulated
 * device") for what it checks and what it cannot.
 * Never does: exist outside test executables.
 *
 * Environment (read at the first CUDA call and by td_sim_reset):
 *   TD_SIM_DEVICES=N        simulated GPUs (default 1; 0: cudaErrorNoDevice)
 *   TD_SIM_MEM_MB=M         capacity of each device (default 4096)
 *   TD_SIM_JITTER=SEED      delay stream work at random (seeded)
 *   TD_SIM_OOM_AT=N         the Nth cudaMalloc fails (out of memory)
 *   TD_SIM_FAULT_KERNEL=N   the Nth kernel launch makes a sticky
 *                           cudaErrorIllegalAddress on its device
 *   TD_SIM_CC=M.m[,M.m...]  compute capability of device 0, 1, ... (the
 *                           last one given repeats; default 8.0: TF32
 *                           math in the libraries; below 8.0 TF32 modes
 *                           compute in fp32)
 *   TD_SIM_PINNED_KB=M      page-locked host memory the "driver" grants
 *                           (cudaHostAlloc, cudaHostRegister past it:
 *                           cudaErrorMemoryAllocation); default unlimited
 *   TD_SIM_RACE=off|report|strict   the stream-order race detector
 *                           (default report; strict aborts after a report)
 *   TD_SIM_REPORT=FILE      at exit, appended to FILE: "host page_locked
 *                           A live L" (cudaHostAlloc and cudaHostRegister
 *                           calls, ranges still page-locked), then per
 *                           device "device D calls C launches L peak_bytes P
 *                           pageable_d2h N"
 *                           (what td_sim_calls, td_sim_launches, td_sim_peak
 *                           and td_sim_pageable_d2h say), for tests of a
 *                           whole process
 *                           such as the daemon
 */
#ifndef TD_SIM_H
#define TD_SIM_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One pointer an operation reads or writes, with its extent in bytes. */
typedef struct td_sim_range {
    const void *p;
    size_t bytes;
    int write;
} td_sim_range;

typedef struct td_sim_grid {
    unsigned gx, gy, gz, bx, by, bz;
    size_t smem;
} td_sim_grid;

/* A kernel launch: run(ctx) executes the whole grid on the stream's
 * worker; drop(ctx) frees ctx afterwards.  args are the kernel's pointer
 * arguments (the race detector and the device check see them).  Errors
 * (bad configuration, dead stream) also become the thread's last error,
 * as with <<<>>>; a pointer that is not memory of the stream's device
 * makes the kernel fault (sticky cudaErrorIllegalAddress) when it runs. */
cudaError_t td_sim_launch(const td_sim_grid *g, cudaStream_t s,
                          const char *name, void (*run)(void *),
                          void (*drop)(void *), void *ctx,
                          const td_sim_range *args, int nargs,
                          const void *caller);

/* Library work (cuBLAS, cuDNN) on stream s: every range must lie in an
 * allocation of the stream's device (else cudaErrorInvalidValue, with a
 * diagnostic); the race detector sees each. */
cudaError_t td_sim_submit(cudaStream_t s, const char *what,
                          void (*run)(void *), void (*drop)(void *),
                          void *ctx, const td_sim_range *ranges, int n,
                          const void *caller);

/* Re-reads the environment and forgets every handle; -EBUSY while a
 * stream, device allocation or pinned range is alive. */
int td_sim_reset(void);
long td_sim_races(void);       /* race reports so far */
long td_sim_spin_waits(void);  /* host waits that would busy-wait a core */
size_t td_sim_used(int dev);   /* bytes allocated on a device */
/* Activity on a device since the last reset: CUDA calls made while it was
 * current (cudaSetDevice to it included: since CUDA 12 that creates its
 * context), kernel and library launches on its streams, and the most
 * device memory allocated at once.  0 0 0: the process never touched it. */
long td_sim_calls(int dev);
long td_sim_launches(int dev);
size_t td_sim_peak(int dev);
/* cudaMemcpyAsync calls from a device into pageable host memory, which
 * blocked the calling thread until the copy was done (as documented). */
long td_sim_pageable_d2h(int dev);
/* cudaMemcpyAsync calls to a device from pageable host memory: the source
 * was staged at the call, which returned once it was (as documented). */
long td_sim_pageable_h2d(int dev);
/* Host functions enqueued (cudaLaunchHostFunc) in the whole process. */
long td_sim_host_funcs(void);
/* Whole-stream host synchronisations (cudaStreamSynchronize,
 * cudaDeviceSynchronize) in the whole process. */
long td_sim_stream_syncs(void);
/* Kernel runs (TD_LAUNCH launches, and each replay of a captured one in
 * a graph launch) of the kernels whose name (the kernel's, template
 * arguments as written: "sgd_k<T>") starts with `prefix`, in the whole
 * process. */
long td_sim_kernel_runs(const char *prefix);
/* Stream captures that made a graph (cudaStreamEndCapture) and graph
 * launches accepted (cudaGraphLaunch), in the whole process. */
long td_sim_graph_captures(void);
long td_sim_graph_launches(void);
/* Every event recorded from now on carries a time `ns` later than the
 * clock says, as if the process had run that much longer (tests of long
 * jobs' timings).  Cumulative; td_sim_reset sets it back to 0. */
void td_sim_advance_clock(uint64_t ns);
/* cuDNN convolutions run with an algorithm cuDNN documents as
 * non-deterministic (backward data ALGO_0, backward filter ALGO_0 and
 * ALGO_3), in the whole process. */
long td_sim_dnn_nondeterministic(void);
/* cudnnFind*AlgorithmEx searches run, in the whole process. */
long td_sim_dnn_finds(void);
/* algorithm queries (v7 and Find) that left results out: the caller asked
 * for fewer than cudnnGetConvolution*AlgorithmMaxCount */
long td_sim_dnn_truncated(void);
/* The math the libraries ran with, in the whole process, counted when a
 * call is accepted: cublasSgemm calls by the handle's math mode
 * (cublasMath_t, low 4 bits) and convolutions (forward, backward data,
 * backward filter) by the descriptor's cudnnMathType_t; math -1: all.
 * The _tf32 counts are those that computed in TF32 (inputs rounded to
 * 10 mantissa bits, kernels/tf32.h): CUBLAS_TF32_TENSOR_OP_MATH, and
 * CUDNN_TENSOR_OP_MATH, _ALLOW_CONVERSION or CUDNN_DEFAULT_MATH, on a
 * device of compute capability 8.0 or newer. */
long td_sim_blas_gemms(int math);
long td_sim_dnn_convs(int math);
long td_sim_blas_tf32(void);
long td_sim_dnn_tf32(void);
/* The same calls by data type, in the whole process: GEMMs (cublasSgemm,
 * cublasGemmEx) by their A and B type, convolutions by their tensors'
 * type (all three directions).  t: TD_SIM_F32, TD_SIM_BF16, TD_SIM_F16. */
enum { TD_SIM_F32 = 0, TD_SIM_BF16 = 1, TD_SIM_F16 = 2 };
long td_sim_blas_typed(int t);
long td_sim_dnn_typed(int t);
/* Convolutions (all three directions) run with a filter in
 * CUDNN_TENSOR_NHWC format (KRSC; its tensors then NHWC too: mixing
 * layouts is refused), and those of them on 16-bit data whose input or
 * output channels are not a multiple of 8 (cuDNN's condition for
 * tensor-core kernels on fp16/bf16 NHWC data), in the whole process. */
long td_sim_dnn_nhwc(void);
long td_sim_dnn_unaligned(void);
int td_sim_is_pinned(const void *p, size_t bytes);
/* The nth kernel or library launch from now (1: the next one) fails at
 * the call with cudaErrorMemoryAllocation (cuBLAS and cuDNN calls: their
 * ALLOC_FAILED), as a module loaded lazily at its first launch or a
 * library's allocation at first use can fail.  Not sticky: the device
 * stays usable.  0 disarms; td_sim_reset disarms too.  (Out of memory at
 * create, in cudaMalloc: TD_SIM_OOM_AT.) */
void td_sim_oom_launch_in(long n);

#ifdef __cplusplus
}
#endif

#endif
