/* cuda_err.c - how the CUDA backend reports a failed CUDA, cuBLAS or cuDNN
 * call (the TD__CU, TD__BLAS and TD__DNN macros of cuda_int.h end here).
 *
 * Owns: the "cuda:N: file:line: call: reason" message in be->base.err, and
 * telling sticky CUDA errors apart (issue 14 finding 4; docs/cuda.md#sticky-errors):
 * after one, the process's context on that GPU is dead, so the message
 * says the GPU is unusable until traind restarts and the GPU is marked
 * (td_device_mark_unusable), which makes `auto` pass it by and the daemon
 * exit for a restart once the job has ended.
 * Never does: exit, reset the device (cudaDeviceReset would free memory
 * other threads still point at), or clear a sticky error (it cannot be).
 */
#include <stdio.h>
#include <string.h>

#include "backend/cuda/cuda_int.h"
#include "base/error.h"
#include "base/log.h"
#include "job/device.h"

int td__cuda_sticky(cudaError_t e)
{
    switch (e) {
    /* driver_types.h: "This leaves the process in an inconsistent state
     * and any further CUDA work will return the same error.  To continue
     * using CUDA, the process must be terminated and relaunched." */
    case cudaErrorContained:
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchTimeout:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorLaunchFailure:
    case cudaErrorTensorMemoryLeak:
    case cudaErrorExternalDevice:
    /* "the MPS client has been terminated by the server.  To continue
     * using CUDA, the process must be terminated and relaunched." */
    case cudaErrorMpsClientTerminated:
    /* "The device cannot be used again.  All existing allocations are
     * invalid." */
    case cudaErrorAssert:
    /* not documented as sticky, but the context does not survive it */
    case cudaErrorECCUncorrectable:
        return 1;
    default:
        return 0;
    }
}

/* A sticky error: the message says what it means for the job and the
 * daemon, and the GPU is marked unusable for the rest of the process. */
static int td__cuda_lost(td__cuda *be, const char *file, int line,
                         const char *call, cudaError_t e)
{
    int fn = (int)strcspn(call, "( ");
    snprintf(be->base.err, sizeof be->base.err, "cuda:%d: %s (%s, sticky, "
             "at %s:%d %.*s): the GPU is unusable until traind restarts; "
             "docs/cuda.md#sticky-errors says how to find the kernel",
             be->dev, cudaGetErrorString(e), cudaGetErrorName(e), file, line,
             fn, call);
    if (td_device_mark_unusable(be->dev, be->base.err))
        td_error("%s", be->base.err); /* once: later calls fail the same */
    return TD_E_DEVICE;
}

int td__cuda_fail(td__cuda *be, const char *file, int line, const char *call,
                  const char *msg)
{
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    cudaError_t last = cudaPeekAtLastError(); /* under a cuBLAS/cuDNN error */
    if (td__cuda_sticky(last))
        return td__cuda_lost(be, base, line, call, last);
    snprintf(be->base.err, sizeof be->base.err, "cuda:%d: %s:%d: %s: %s",
             be->dev, base, line, call, msg);
    return TD_E_DEVICE;
}

int td__cuda_fail_rt(td__cuda *be, const char *file, int line,
                     const char *call, cudaError_t e)
{
    const char *base = strrchr(file, '/');
    if (td__cuda_sticky(e))
        return td__cuda_lost(be, base ? base + 1 : file, line, call, e);
    /* reported here, so consumed: a failed runtime call also leaves its
     * error as the thread's last error, which the next kernel launcher's
     * cudaGetLastError would return as its own (a refused
     * cudaHostRegister failed the next step in td__k_normalize) */
    if (cudaPeekAtLastError() == e)
        (void)cudaGetLastError();
    return td__cuda_fail(be, file, line, call, cudaGetErrorString(e));
}

int td__cuda_ready(cudaError_t r)
{
    if (r == cudaErrorNotReady && cudaPeekAtLastError() == cudaErrorNotReady)
        (void)cudaGetLastError();
    return r == cudaSuccess;
}

const char *td__cublas_str(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_NOT_INITIALIZED: return "cuBLAS not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "cuBLAS allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "cuBLAS invalid value";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "cuBLAS architecture mismatch";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "cuBLAS execution failed";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "cuBLAS internal error";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "cuBLAS not supported";
    default: return "cuBLAS error";
    }
}

