/* cpu_cfwd.c - bf16 channels-last convolution forward on AMX tiles (see
 * cpu_cfwd.h for what it computes and why).
 *
 * Per thread: xg, one sample of x on its zero-bordered grid (hp x wp
 * positions of ic channels, then zero rows for the last blocks' reads),
 * and cb, one 32-position x 32-channel (or 64 x 16) fp32 block of C.  Weights wv
 * [tap][ic chunk][oc / 16][kk / 2][16][2], kk = min(ic, 32) channels per
 * chunk: one B tile per (tap, chunk, 16 output channels).  Tiles: C 0-3
 * (two 16-position blocks x two 16-channel blocks, or x one), A 4-5 (the
 * two position blocks), B 6-7 (the channel blocks).  Every A row is
 * ic * 2 bytes at a multiple of that: no tile row crosses a cache line.
 *
 * Owns: the plan's buffers and weights, the AMX tile configuration of
 * the threads it runs on (loaded per sample range, released after).
 * Never does: vector or tile code inside an OpenMP region (regions call
 * target functions), sums across threads.
 */
#include "backend/cpu/cpu_cfwd.h"

#include <immintrin.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_amx.h"
#include "backend/cpu/cpu_bwdw.h"
#include "layout.h"

#define TD__AMX TD_AMX_FN

struct td_cfwd {
    int n, h, w, ic, oc, k, pad;
    int wp;            /* grid width w + 2 pad */
    int kk, nicc;      /* channels per chunk, chunks */
    int pairs;         /* ic 16: grid rows hold positions q and q + 1 (32
                          channels), taps (kh, kw) and (kh, kw + 1) one
                          product ("virtual tap"; an odd last one with
                          zero weights): 6 full products for 3x3, not 9
                          half ones */
    int rw;            /* channels per grid row: ic, or 32 with pairs */
    size_t nq;         /* output grid positions per sample, to 32 */
    size_t xrows;      /* rows of xg: the grid and the last reads */
    int ntap, nbuf;    /* (virtual) taps, buffers */
    long *off;         /* per (virtual) tap: grid offset */
    td_bf16 *wv;       /* the weights in B tiles */
    uint32_t *wmap;    /* per source weight [o][i][kh][kw] (of this plan's
                          convolution, or flipped: the one whose backward
                          data this is): its element of wv */
    int flip;          /* wmap is for the flipped source */
    td_bf16 *xg;       /* per buffer: xrows x rw */
    float *cb;         /* per buffer: 32 x 32 fp32 */
};

static void td__wmap(td_cfwd *p, int flip);

int td_cfwd_ok(int k, int stride, int pad, int ic, int oc)
{
    return k >= 1 && k <= 7 && k % 2 == 1 && stride == 1 &&
           pad == (k - 1) / 2 && (ic == 16 || (ic > 0 && ic % 32 == 0)) &&
           oc > 0 && oc % 16 == 0 && td_bwdw_amx();
}

td_cfwd *td_cfwd_create(int n, int h, int w, int ic, int oc, int k,
                        int threads)
{
    int pad = (k - 1) / 2;
    if (n < 1 || h < 1 || w < 1 || threads < 1 ||
        !td_cfwd_ok(k, 1, pad, ic, oc))
        return NULL;
    td_cfwd *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    *p = (td_cfwd){.n = n, .h = h, .w = w, .ic = ic, .oc = oc, .k = k,
                   .pad = pad, .wp = w + 2 * pad, .ntap = k * k,
                   .kk = 32, .nbuf = threads, .pairs = ic == 16, .rw = ic};
    if (p->pairs) {
        p->ntap = k * ((k + 1) / 2);
        p->rw = 32;
    }
    p->nicc = p->rw / p->kk;
    p->nq = ((size_t)h * (size_t)p->wp + 31) / 32 * 32;
    if (oc == 16) /* td__four: 64 positions at a time */
        p->nq = (p->nq + 63) / 64 * 64;
    p->xrows = p->nq + (size_t)(k - 1) * (size_t)p->wp + (size_t)k;
    size_t grid = (size_t)(h + 2 * pad) * (size_t)p->wp;
    if (p->xrows < grid)
        p->xrows = grid;
    p->off = malloc((size_t)p->ntap * sizeof *p->off);
    p->wmap = malloc((size_t)oc * ic * k * k * sizeof *p->wmap);
    p->wv = aligned_alloc(64, (size_t)p->ntap * p->rw * oc * sizeof(td_bf16));
    p->xg = aligned_alloc(64, (size_t)threads * p->xrows * p->rw *
                                  sizeof(td_bf16));
    p->cb = aligned_alloc(64, (size_t)threads * 32 * 32 * sizeof(float));
    if (!p->off || !p->wmap || !p->wv || !p->xg || !p->cb) {
        td_cfwd_destroy(p);
        return NULL;
    }
    memset(p->wv, 0, (size_t)p->ntap * p->rw * oc * sizeof(td_bf16));
    /* the borders and the rows past the grid stay zero for good */
    memset(p->xg, 0, (size_t)threads * p->xrows * p->rw * sizeof(td_bf16));
    int per = p->pairs ? (k + 1) / 2 : k; /* (virtual) taps per kernel row */
    for (int t = 0; t < p->ntap; t++)
        p->off[t] = (long)(t / per) * p->wp + (t % per) * (p->pairs ? 2 : 1);
    td__wmap(p, 0);
    return p;
}

void td_cfwd_destroy(td_cfwd *p)
{
    if (!p)
        return;
    free(p->off);
    free(p->wmap);
    free(p->wv);
    free(p->xg);
    free(p->cb);
    free(p);
}

/* The weight B tiles: tile ((virtual) tap, chunk, o / 16), row k / 2 of
 * the tile's K = kk channels, column o % 16, pair element k % 2.  With
 * pairs, K 0-15 are tap (kh, 2j)'s input channels and K 16-31 tap
 * (kh, 2j + 1)'s (zero past the kernel). */
/* The weight B tiles: tile ((virtual) tap, chunk, o / 16), row k / 2 of
 * the tile's K = kk channels, column o % 16, pair element k % 2.  With
 * pairs, K 0-15 are tap (kh, 2j)'s input channels and K 16-31 tap
 * (kh, 2j + 1)'s (zero past the kernel: never written).  wmap gives each
 * source weight's place once, so a refresh is one gather-free pass. */
static void td__wmap(td_cfwd *p, int flip)
{
    int per = p->pairs ? (p->k + 1) / 2 : p->k, nob = p->oc / 16;
    size_t k = (size_t)p->k;
    for (int o = 0; o < p->oc; o++)
        for (int v = 0; v < p->ntap; v++)
            for (int r = 0; r < p->rw; r++) {
                int kh = v / per, kw = p->pairs ? 2 * (v % per) + r / 16
                                                : v % per;
                int i = p->pairs ? r % 16 : r;
                if (kw >= p->k)
                    continue;
                size_t tile = ((size_t)v * (size_t)p->nicc +
                               (size_t)(r / p->kk)) * (size_t)nob +
                              (size_t)(o / 16);
                size_t at = tile * (size_t)p->kk * 16 +
                            (size_t)((r % p->kk) / 2) * 32 +
                            (size_t)(o % 16) * 2 + (size_t)(r % 2);
                size_t src = (((size_t)o * (size_t)p->ic + (size_t)i) * k +
                              (size_t)kh) * k + (size_t)kw;
                if (flip) /* the flip is its own inverse, dims swapped */
                    src = td_conv_flip_index(src, (size_t)p->oc,
                                             (size_t)p->ic, k);
                p->wmap[src] = (uint32_t)at;
            }
    p->flip = flip;
}

size_t td_cfwd_weight_count(const td_cfwd *p)
{
    return (size_t)p->oc * (size_t)p->ic * (size_t)p->k * (size_t)p->k;
}

void td_cfwd_weights_range(td_cfwd *p, const float *w, size_t lo, size_t hi)
{
    for (size_t s = lo; s < hi; s++)
        p->wv[p->wmap[s]] = td_bf16_from_f32(w[s]);
}

static void td__weights(td_cfwd *p, const float *w, int flip)
{
    if (flip != p->flip)
        td__wmap(p, flip);
    long n = (long)td_cfwd_weight_count(p);
#pragma omp parallel for schedule(static)
    for (long b = 0; b < n; b += 1024)
        td_cfwd_weights_range(p, w, (size_t)b,
                              (size_t)(b + 1024 < n ? b + 1024 : n));
}

void td_cfwd_weights(td_cfwd *p, const float *w) { td__weights(p, w, 0); }

void td_cfwd_weights_flip(td_cfwd *p, const float *w)
{
    td__weights(p, w, 1);
}

/* 16 fp32 (+ bias) rounded as td_bf16_from_f32 (NaN kept quiet). */
TD__AMX static inline __m256i td__bf16x16(__m512 v)
{
    __m512i u = _mm512_castps_si512(v);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16),
                                   _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))),
        16);
    __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16),
                             _mm512_set1_epi32(0x40));
    return _mm512_cvtepi32_epi16(r);
}

/* The block's outputs: cb [rows positions][ld floats] (nb channel blocks
 * of 16) at grid positions q0.. and channels 16 * ob.. of sample n. */
TD__AMX static void td__emit(const td_cfwd *p, const float *cb, int rows,
                             int ld, size_t q0, int ob, int nb, td_bf16 *yn,
                             const float *bias)
{
    int i = (int)(q0 / (size_t)p->wp), j = (int)(q0 % (size_t)p->wp) - 1;
    for (int r = 0; r < rows; r++) {
        if (++j == p->wp) { /* grid position q0 + r is (i, j) */
            j = 0;
            i++;
        }
        if (i >= p->h || j >= p->w)
            continue;
        td_bf16 *d = yn + ((size_t)i * (size_t)p->w + (size_t)j) *
                              (size_t)p->oc + 16 * (size_t)ob;
        for (int b = 0; b < nb; b++) {
            __m512 v = _mm512_load_ps(cb + r * ld + 16 * b);
            if (bias)
                v = _mm512_add_ps(v, _mm512_loadu_ps(bias + 16 * (ob + b)));
            _mm256_storeu_si256((void *)(d + 16 * b), td__bf16x16(v));
        }
    }
}

/* 16 output channels: four 16-position blocks at once (four independent
 * accumulators, as the 2 x 2 blocks elsewhere), sharing B. */
TD__AMX static void td__four(const td_cfwd *p, const td_bf16 *xg, float *cb,
                             td_bf16 *yn, const float *bias)
{
    size_t lda = (size_t)p->rw * sizeof(td_bf16), blk = 16 * (size_t)p->rw;
    for (size_t q0 = 0; q0 < p->nq; q0 += 64) {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        for (int t = 0; t < p->ntap; t++)
            for (int c = 0; c < p->nicc; c++) {
                const td_bf16 *a = xg + (q0 + (size_t)p->off[t]) *
                                            (size_t)p->rw +
                                   (size_t)c * (size_t)p->kk;
                _tile_loadd(6, p->wv + ((size_t)t * (size_t)p->nicc +
                                        (size_t)c) * (size_t)p->kk * 16,
                            64);
                _tile_loadd(4, a, lda);
                _tile_dpbf16ps(0, 4, 6);
                _tile_loadd(5, a + blk, lda);
                _tile_dpbf16ps(1, 5, 6);
                _tile_loadd(4, a + 2 * blk, lda);
                _tile_dpbf16ps(2, 4, 6);
                _tile_loadd(5, a + 3 * blk, lda);
                _tile_dpbf16ps(3, 5, 6);
            }
        _tile_stored(0, cb, 64);
        _tile_stored(1, cb + 16 * 16, 64);
        _tile_stored(2, cb + 32 * 16, 64);
        _tile_stored(3, cb + 48 * 16, 64);
        td__emit(p, cb, 64, 16, q0, 0, 1, yn, bias);
    }
}

/* Samples [s0, s1) on this thread's buffers. */
TD__AMX static void td__samples(const td_cfwd *p, const td_bf16 *x,
                                td_bf16 *y, const float *bias, int s0, int s1,
                                td_bf16 *xg, float *cb)
{
    static const uint8_t rows[8] = {16, 16, 16, 16, 16, 16, 16, 16};
    td_amx_load(rows);
    size_t lda = (size_t)p->rw * sizeof(td_bf16), row = (size_t)p->w * p->ic;
    size_t btile = (size_t)p->kk * 16; /* elements of one B tile */
    int nob = p->oc / 16;
    for (int n = s0; n < s1; n++) {
        const td_bf16 *xn = x + (size_t)n * (size_t)p->h * row;
        td_bf16 *yn = y + (size_t)n * (size_t)p->h * (size_t)p->w * p->oc;
        for (int i = 0; i < p->h; i++) {
            td_bf16 *g = xg + ((size_t)(i + p->pad) * (size_t)p->wp +
                               (size_t)p->pad) * (size_t)p->rw;
            const td_bf16 *src = xn + (size_t)i * row;
            if (!p->pairs) {
                memcpy(g, src, row * sizeof(td_bf16));
                continue;
            }
            for (int j = 0; j < p->w; j++) { /* x(j): first half of grid
                                                 row j, second of j - 1 */
                __m256i v = _mm256_loadu_si256((const void *)(src + 16 * j));
                _mm256_store_si256((void *)(g + 32 * j), v);
                if (j > 0 || p->pad > 0) /* k 1: no second tap */
                    _mm256_store_si256((void *)(g + 32 * j - 16), v);
            }
        }
        if (nob == 1) {
            td__four(p, xg, cb, yn, bias);
            continue;
        }
        for (size_t q0 = 0; q0 < p->nq; q0 += 32)
            for (int ob = 0; ob < nob; ob += 2) {
                int two = ob + 1 < nob;
                _tile_zero(0);
                _tile_zero(1);
                _tile_zero(2);
                _tile_zero(3);
                for (int t = 0; t < p->ntap; t++)
                    for (int c = 0; c < p->nicc; c++) {
                        const td_bf16 *a0 =
                            xg + (q0 + (size_t)p->off[t]) * (size_t)p->rw +
                            (size_t)c * (size_t)p->kk;
                        const td_bf16 *b0 =
                            p->wv + (((size_t)t * (size_t)p->nicc +
                                      (size_t)c) * (size_t)nob +
                                     (size_t)ob) * btile;
                        _tile_loadd(4, a0, lda);
                        _tile_loadd(6, b0, 64);
                        _tile_dpbf16ps(0, 4, 6);
                        _tile_loadd(5, a0 + 16 * (size_t)p->rw, lda);
                        _tile_dpbf16ps(2, 5, 6);
                        if (two) {
                            _tile_loadd(7, b0 + btile, 64);
                            _tile_dpbf16ps(1, 4, 7);
                            _tile_dpbf16ps(3, 5, 7);
                        }
                    }
                _tile_stored(0, cb, 128);
                _tile_stored(2, cb + 16 * 32, 128);
                if (two) {
                    _tile_stored(1, cb + 16, 128);
                    _tile_stored(3, cb + 16 * 32 + 16, 128);
                }
                td__emit(p, cb, 32, 32, q0, ob, two ? 2 : 1, yn, bias);
            }
    }
    _tile_release();
}

void td_cfwd_run(td_cfwd *p, const td_bf16 *x, td_bf16 *y, const float *bias)
{
    int nt = omp_get_max_threads();
    if (nt > p->nbuf)
        nt = p->nbuf;
#pragma omp parallel num_threads(nt)
    {
        int me = omp_get_thread_num(), all = omp_get_num_threads();
        int s0 = (int)((long)p->n * me / all);
        int s1 = (int)((long)p->n * (me + 1) / all);
        td__samples(p, x, y, bias, s0, s1,
                    p->xg + (size_t)me * p->xrows * p->rw,
                    p->cb + (size_t)me * 32 * 32);
    }
}
