/* hd.h - marks functions whose arithmetic is shared by host and device.
 *
 * A function declared `TD_HD static inline` is compiled for both the host
 * and the GPU when the header is included from a .cu file (nvcc), and is a
 * plain static inline C function otherwise.  The CUDA kernels call exactly
 * the code the host tests exercise against the CPU backend.
 */
#ifndef TD_HD_H
#define TD_HD_H

#if defined(__CUDACC__)
#define TD_HD __host__ __device__
#else
#define TD_HD
#endif

#endif
