/* cpu_wino_int.h - what cpu_wino.c (the plan, its tile classes, the
 * blocking, the products, the threads) shares with cpu_wino_tr.c (the
 * transforms of every tile class): a class's fields, a block's tile
 * coordinates, and the transforms' entry points.  Internal to those two
 * files.
 */
#ifndef TD_BACKEND_CPU_WINO_INT_H
#define TD_BACKEND_CPU_WINO_INT_H

#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#include "backend/cpu/cpu_wino.h"

#define TD__IN static inline __attribute__((always_inline, target("avx2,fma")))
#define TD__AVX static __attribute__((target("avx2,fma")))
#define TD__AVXG __attribute__((target("avx2,fma")))

enum { TD__TB_MAX = 120 }; /* tiles per block at most */

/* A tile class: the tiles of one shape, mh rows by mw columns of output
 * (each 2 or 4: F(mh x mw, 3x3)), th x tw of them per image on a grid
 * from (ry0, rx0).  A convolution's classes cover its output once
 * (cpu_wino.c's td__classes); they run one after the other and share the
 * plan's scratch, sums and tile sums (sized for the largest class). */
typedef struct td__wc {
    int h, w, ic, oc, threads; /* the convolution's */
    int mh, mw;     /* output tile: rows, columns */
    int np;         /* transformed positions per tile: (mh+2)(mw+2) */
    int ry0, rx0;   /* the class's first tile's output position */
    int th, tw;     /* tiles per image: rows, columns */
    long tiles;     /* n * th * tw */
    int tb;         /* tiles per block of the forward */
    int tbw;        /* tiles per block of the weight gradient */
    int groups;     /* the weight gradient's groups of tiles (td__groups) */
    float *u;       /* [np][ic][oc] transformed weights (the class's own) */
    float *scr;     /* per thread: V [np][tb][ic], M [np][tb][oc] (or
                     * tbw and D [np][tbw][oc]) */
    size_t scr_per; /* floats per thread (per group in td__wide) */
    float *part;    /* [groups][np][oc][ic] then [groups][oc] */
    float *tsum;    /* [groups][tbw][oc]: the tiles' gradient sums
                     * (more threads than groups) */
} td__wc;

/* Tiles g0 .. g0 + cnt - 1 of the batch: per tile its sample and the
 * top-left output position; tb, the block's rows per plane (the stride of
 * its [np][tb][channels] buffers). */
typedef struct td__tiles {
    int n[TD__TB_MAX], y[TD__TB_MAX], x[TD__TB_MAX];
    int tb;
} td__tiles;

/* Rows cnt up to the next multiple of 6 of each of the np planes (stride
 * s floats) of a [np][tb][n] buffer zeroed (the products run 6 rows at a
 * time). */
static inline void td__pad6(float *B, size_t s, int np, int cnt, int n)
{
    for (int i = cnt; i % 6; i++)
        for (int k = 0; k < np; k++)
            memset(B + k * s + (size_t)i * n, 0, (size_t)n * sizeof(float));
}

/* The 9 taps of input channel c for output channels k0 .. k0 + 7, one
 * lane each, of w [K][C][3][3]; flipped, of w [C][K][3][3] with the taps
 * reversed (a backward data's plan). */
TD__IN void td__taps8(const float *w, int flip, int C, int K, int k0, int c,
                      __m256 g[9])
{
    __m256i idx = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6,
                                                       7),
                                     _mm256_set1_epi32(flip ? 9 : C * 9));
    const float *s = flip ? w + ((size_t)c * K + k0) * 9
                          : w + ((size_t)k0 * C + c) * 9;
#pragma GCC unroll 9
    for (int j = 0; j < 9; j++)
        g[j] = _mm256_i32gather_ps(s + (flip ? 8 - j : j), idx, 4);
}

/* A tile's sum s of the output gradient's channels kb*8 .. kb*8 + 7:
 * added into db, or with per_tile stored as tile i's (db + i * K). */
TD__IN void td__dbsum(float *db, int per_tile, int i, int K, int kb,
                      __m256 s)
{
    float *o = per_tile ? db + (size_t)i * K + kb * 8 : db + kb * 8;
    _mm256_storeu_ps(o, per_tile ? s : _mm256_add_ps(_mm256_loadu_ps(o), s));
}

/* The transforms (cpu_wino_tr.c), each for the class's tile shape: U of
 * output channels k0 .. k0 + 15 (nt: by non-temporal stores); rows i0 ..
 * i1 - 1 of V [np][tb][C], the block's input patches (with f, of x's
 * folded values: cpu_fold.h); the outputs of rows i0 .. i1 - 1 (nt: by
 * non-temporal stores, y 32-byte aligned; with mom, their per-channel
 * moments [3][K]: the shift, tile i0's first output, then the sums of (y
 * - shift) and of its square) from M [np][tb][K]; rows i0 .. i1 - 1 of D
 * [np][tb][K], the output gradient's, with db += each tile's sum
 * (per_tile: tile i's sum into db + i * K); dw of the (output, input)
 * channel pairs kc .. kc + 7 from the groups' sums.  The callers zero the
 * rows past a block's last tile (td__pad6). */
void td__t_weights16(td__wc *p, const float *w, int flip, int k0,
                     int nt);
void td__t_input(const td__wc *p, const td__tiles *t, const float *x, int C,
                 int i0, int i1, float *V, const td_fold *f);
void td__t_output(const td__wc *p, const td__tiles *t, const float *M,
                  float *y, const float *bias, int i0, int i1, int nt,
                  float *mom);
void td__t_dy(const td__wc *p, const td__tiles *t, const float *dy, int i0,
              int i1, float *D, float *db, int per_tile);
void td__t_reduce8(const td__wc *p, size_t kc, float *dw, int groups);

#endif
