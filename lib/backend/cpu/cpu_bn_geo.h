/* cpu_bn_geo.h - how the CPU backend's hand-written batch norms (cpu_bn.c:
 * bf16 on AVX-512, cpu_bn8.c: fp32 nChw8c on AVX2) cut a tensor into the
 * fixed chunks their parallel loops and sums go by.
 *
 * Owns: the geometry.  A tensor has rows = N*H*W rows of C channels, laid
 * out [rows][C] (nhwc, hw = 0) or blocked [N][C/blk][H*W][blk] (hw = H*W,
 * blk 16 or 8).  A chunk is up to TD_BN_NHWC_ROWS rows: in nhwc a run of
 * rows, blocked whole images up to that many rows or part of one larger
 * image.  The chunks depend on the shape only, never on the thread count,
 * so per-chunk sums reduced in chunk order give the same bits on any
 * number of threads; the per-channel step between a training call's two
 * passes.  Included by those two files only.
 * Never does: vector code, arithmetic on elements.
 */
#ifndef TD_BACKEND_CPU_BN_GEO_H
#define TD_BACKEND_CPU_BN_GEO_H

#include <stddef.h>

#include "backend/cpu/cpu_bn.h"
#include "bn_nhwc.h"

typedef struct {
    size_t rows, hw; /* hw: rows per image when blocked, 0 in nhwc */
    int C, blk;      /* blk: channels per block when blocked */
} td__geo;

static inline size_t td__cdiv(size_t a, size_t b) { return (a + b - 1) / b; }

/* Blocked: images per chunk where an image has at most TD_BN_NHWC_ROWS
 * rows, else 0 (the image split into chunks of up to that many). */
static inline size_t td__ipc(td__geo g)
{
    return g.hw <= TD_BN_NHWC_ROWS ? TD_BN_NHWC_ROWS / g.hw : 0;
}

static inline size_t td__nchunks(td__geo g)
{
    if (!g.hw)
        return td__cdiv(g.rows, TD_BN_NHWC_ROWS);
    size_t n = g.rows / g.hw, ipc = td__ipc(g);
    return ipc ? td__cdiv(n, ipc) : n * td__cdiv(g.hw, TD_BN_NHWC_ROWS);
}

/* A chunk: nimg runs of nr rows of every channel, element (run m, row i,
 * channel c) at off + m*is + i*rs + c*cs for c a multiple of the vector
 * width (+ the lane): nhwc one run, rs = C, cs = 1; blocked a run per
 * image, rs = blk, cs = hw, is = C*hw. */
typedef struct {
    size_t off, nimg, nr, is, rs, cs;
} td__ck;

/* Every row of chunk k, ro its offset from the chunk's channel group. */
#define TD__ROWS(k, ro)                                                      \
    for (size_t td__m = 0, td__r0 = 0; td__m < (k).nimg;                     \
         td__m++, td__r0 += (k).is)                                          \
        for (size_t td__i = 0, ro = td__r0; td__i < (k).nr;                  \
             td__i++, ro += (k).rs)

/* Chunk ch of a tensor. */
static inline td__ck td__chunk(td__geo g, long ch)
{
    td__ck k;
    size_t R = TD_BN_NHWC_ROWS, C = (size_t)g.C, c = (size_t)ch;
    k.is = 0;
    k.nimg = 1;
    if (!g.hw) {
        size_t r0 = c * R;
        k.nr = g.rows - r0 < R ? g.rows - r0 : R;
        k.off = r0 * C;
        k.rs = C;
        k.cs = 1;
        return k;
    }
    size_t n = g.rows / g.hw, ipc = td__ipc(g);
    k.rs = (size_t)g.blk;
    k.cs = g.hw;
    k.is = C * g.hw;
    if (ipc) { /* images [c * ipc, c * ipc + nimg) */
        k.nimg = n - c * ipc < ipc ? n - c * ipc : ipc;
        k.nr = g.hw;
        k.off = c * ipc * C * g.hw;
    } else { /* rows [h0, h0 + nr) of image c / per */
        size_t per = td__cdiv(g.hw, R), h0 = c % per * R;
        k.nr = g.hw - h0 < R ? g.hw - h0 : R;
        k.off = c / per * C * g.hw + h0 * (size_t)g.blk;
    }
    return k;
}

/* Channel c's two sums over the chunks of part ([chunks][2][C]), in chunk
 * order, in double. */
static inline void td__reduce(const float *part, size_t nch, int C, int c,
                              double *s1, double *s2)
{
    double a = 0, b = 0;
    for (size_t ch = 0; ch < nch; ch++) {
        a += part[ch * 2 * (size_t)C + (size_t)c];
        b += part[ch * 2 * (size_t)C + (size_t)C + (size_t)c];
    }
    *s1 = a;
    *s2 = b;
}

/* Channel c's batch statistics and forward scale from the chunks' sums
 * about the shift sh[c] (kernels/bn_nhwc.h's math). */
static inline void td__fwd_coefs(const float *part, size_t nch, int C,
                                 int c, size_t rows, const float *sh,
                                 const float *gamma, float eps, float *mean,
                                 float *var, float *a)
{
    double s1, s2;
    td__reduce(part, nch, C, c, &s1, &s2);
    td_bn_nhwc_stats(s1, s2, (double)rows, sh[c], &mean[c], &var[c]);
    a[c] = td_bn_nhwc_fwd_coef(gamma[c], var[c], eps);
}

/* Channel c's dgamma, dbeta and dx coefficients a, k, d from the chunks'
 * backward sums. */
static inline void td__bwd_coefs(const float *part, size_t nch, int C,
                                 int c, size_t rows, const float *gamma,
                                 const float *var, float eps, float *dgamma,
                                 float *dbeta, float *a, float *k, float *d)
{
    double s1, s2;
    td__reduce(part, nch, C, c, &s1, &s2);
    td_bn_nhwc_bwd_coef((float)s1, (float)s2, (float)rows, gamma[c], var[c],
                        eps, &dgamma[c], &dbeta[c], &a[c], &k[c], &d[c]);
}

/* Element offset of channel c's first row (its shift's value). */
static inline size_t td__first(td__geo g, int c)
{
    return g.hw ? (size_t)(c / g.blk) * g.hw * (size_t)g.blk +
                      (size_t)(c % g.blk)
                : (size_t)c;
}

#endif
