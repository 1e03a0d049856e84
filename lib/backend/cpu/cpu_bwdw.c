/* cpu_bwdw.c - bf16 channels-last convolution backward weights on AMX
 * tiles (see cpu_bwdw.h for what it computes and why).
 *
 * Layout of one chunk (spc samples, their zero-bordered grids of
 * gw columns back to back, kc positions rounded up to 32):
 *   xt  [phase][ic][ld]: x transposed, position q at column mr + q, zero
 *                 on the grids' borders and in the margins (mr >= the
 *                 largest tap offset), so a tap's operand starts at
 *                 mr + off in its phase's rows;
 *   dyv [oc / 16][kc / 2][16][2]: dy of positions (q, q + 1) interleaved
 *                 per channel (tdpbf16ps's B layout), zero on the borders.
 * Tiles: C 16 ic x 16 oc fp32 (the group's accumulator in memory, loaded
 * and stored once per chunk), A 16 ic x 32 positions, B 16 position
 * pairs x 16 oc.  With two or more 16-channel blocks each way a 2 x 2
 * block of C per tap (4 loads per 4 products); with one (resnet's first
 * stage) up to four taps at once sharing B (5 loads per 4 products).
 *
 * Owns: the plan's buffers, the AMX tile configuration of the threads it
 * runs on (loaded per group, released after).
 * Never does: vector or tile code inside an OpenMP region (the clang fuzz
 * build outlines regions without their function's target attribute):
 * regions call target functions.
 */
#include "backend/cpu/cpu_bwdw.h"

#include <cpuid.h>
#include <immintrin.h>
#include <omp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "backend/cpu/caps.h"

#define TD__AMX                                                              \
    __attribute__((target("avx512f,avx512bw,avx512vl,amx-tile,amx-bf16")))
#define TD__ARCH_REQ_XCOMP_PERM 0x1023
#define TD__XFEATURE_XTILEDATA 18
#define TD__CHUNK_POSITIONS 1024 /* target positions per chunk */
#define TD__GROUPS 4 /* fixed, whatever the thread count */

struct td_bwdw {
    int n, h, w, ic, oc, k, stride, pad;
    int oh, ow;         /* dy's image */
    int gw, gp;         /* grid width; images start at (gp, gp) */
    size_t pg;          /* positions per sample's grid */
    int nph;            /* x phases: stride^2 */
    int spc, nchunk, ngroup, nbuf;
    size_t kc, mr;      /* chunk positions (xt's row length), dy margin */
    size_t rows;        /* rows of one dyv copy: (kc + 2 mr) / 2 */
    int ntap;
    long *off;          /* per tap: position offset of its x operand */
    int *tph;           /* per tap: its x phase */
    int *order;         /* the taps sorted by phase */
    size_t *brow;       /* per tap: dyv row of position pair 0 (its copy) */
    int32_t *dpos;      /* per chunk position: dy row within the chunk's
                           samples, -1 off the image or past the samples */
    int32_t *xpos;      /* [nph][kc]: the same for each phase of x */
    float *acc;         /* [ngroup][ntap][ic][oc] */
    td_bf16 *buf;       /* per buffer: xt [nph * ic][ld] then dyv */
    size_t buf_elems;
};

typedef struct td__tilecfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} td__tilecfg;

static int td__amx_on;
static pthread_once_t td__amx_once = PTHREAD_ONCE_INIT;

static void td__amx_probe(void)
{
    unsigned a, b, c, d;
    const td_cpu_caps *caps = td_cpu_caps_get();
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return;
    int tile = (d >> 24) & 1, bf16 = (d >> 22) & 1, bw = (b >> 30) & 1;
    if (!tile || !bf16 || !bw || strcmp(caps->isa, "avx512_core_amx") != 0)
        return;
    td__amx_on = syscall(SYS_arch_prctl, TD__ARCH_REQ_XCOMP_PERM,
                         TD__XFEATURE_XTILEDATA) == 0;
}

int td_bwdw_amx(void)
{
    pthread_once(&td__amx_once, td__amx_probe);
    return td__amx_on;
}

int td_bwdw_ok(int k, int stride, int pad, int ic, int oc)
{
    return k >= 1 && k <= 7 && stride >= 1 && stride <= 2 && pad >= 0 &&
           pad < k && ic > 0 && (ic < 16 || ic % 16 == 0) && oc > 0 &&
           oc % 16 == 0 &&
           td_bwdw_amx();
}

static size_t td__round32(size_t v) { return (v + 31) / 32 * 32; }

/* floor(a / b) for b > 0 */
static int td__fdiv(int a, int b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

/* The grid: every sample's dy image and x phases at (P, P) of a gh x gw
 * grid, P the largest tap shift in phase units; per tap its phase and
 * position offset; per position the rows of dy and of each x phase. */
static void td__grid(td_bwdw *p)
{
    int s = p->stride, P = 0;
    for (int t = 0; t < p->ntap; t++) {
        int dh = td__fdiv(t / p->k - p->pad, s);
        int dw = td__fdiv(t % p->k - p->pad, s);
        int ah = t / p->k - p->pad - s * dh, aw = t % p->k - p->pad - s * dw;
        p->tph[t] = ah * s + aw;
        P = dh < -P ? -dh : P, P = dh > P ? dh : P;
        P = dw < -P ? -dw : P, P = dw > P ? dw : P;
        p->off[t] = dh; /* rows for now; positions below */
        p->off[p->ntap + t] = dw;
    }
    int ph = (p->h + s - 1) / s, pw = (p->w + s - 1) / s;
    int gh = (p->oh > ph ? p->oh : ph) + 2 * P;
    p->gw = (p->ow > pw ? p->ow : pw) + 2 * P;
    p->pg = (size_t)gh * (size_t)p->gw;
    p->gp = P;
    p->mr = td__round32((size_t)P * (size_t)p->gw + (size_t)P);
    for (int t = 0; t < p->ntap; t++)
        p->off[t] = p->off[t] * p->gw + p->off[p->ntap + t];
}

static void td__positions(td_bwdw *p)
{
    int s = p->stride, P = p->gp;
    for (size_t q = 0; q < p->kc; q++) {
        size_t smp = q / p->pg, r = q % p->pg;
        int gy = (int)(r / (size_t)p->gw) - P, gx = (int)(r % (size_t)p->gw) - P;
        int in = smp < (size_t)p->spc;
        p->dpos[q] = in && gy >= 0 && gy < p->oh && gx >= 0 && gx < p->ow
                         ? (int32_t)((smp * (size_t)p->oh + (size_t)gy) *
                                         (size_t)p->ow + (size_t)gx)
                         : -1;
        for (int a = 0; a < p->nph; a++) {
            int y = gy * s + a / s, x = gx * s + a % s;
            p->xpos[(size_t)a * p->kc + q] =
                in && gy >= 0 && gx >= 0 && y < p->h && x < p->w
                    ? (int32_t)((smp * (size_t)p->h + (size_t)y) *
                                    (size_t)p->w + (size_t)x)
                    : -1;
        }
    }
}

td_bwdw *td_bwdw_create(int n, int h, int w, int ic, int oc, int k,
                        int stride, int pad, int threads)
{
    if (n < 1 || h < 1 || w < 1 || threads < 1 ||
        !td_bwdw_ok(k, stride, pad, ic, oc) || h + 2 * pad < k ||
        w + 2 * pad < k)
        return NULL;
    td_bwdw *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    *p = (td_bwdw){.n = n, .h = h, .w = w, .ic = ic, .oc = oc, .k = k,
                   .stride = stride, .pad = pad, .ntap = k * k,
                   .nph = stride * stride,
                   .oh = (h + 2 * pad - k) / stride + 1,
                   .ow = (w + 2 * pad - k) / stride + 1};
    p->off = malloc(2 * (size_t)p->ntap * sizeof *p->off);
    p->tph = malloc((size_t)p->ntap * sizeof *p->tph);
    p->order = malloc((size_t)p->ntap * sizeof *p->order);
    p->brow = malloc((size_t)p->ntap * sizeof *p->brow);
    if (!p->off || !p->tph || !p->order || !p->brow) {
        td_bwdw_destroy(p);
        return NULL;
    }
    td__grid(p);
    p->spc = (int)(TD__CHUNK_POSITIONS / p->pg);
    if (p->spc < 1)
        p->spc = 1;
    if (p->spc > n)
        p->spc = n;
    p->nchunk = (n + p->spc - 1) / p->spc;
    p->ngroup = p->nchunk < TD__GROUPS ? p->nchunk : TD__GROUPS;
    p->kc = td__round32((size_t)p->spc * p->pg);
    p->rows = (p->kc + 2 * p->mr) / 2;
    p->nbuf = threads < p->ngroup ? threads : p->ngroup;
    p->buf_elems = (size_t)p->nph * ic * p->kc + (size_t)oc * 2 * p->rows * 2;
    p->dpos = malloc(p->kc * sizeof *p->dpos);
    p->xpos = malloc((size_t)p->nph * p->kc * sizeof *p->xpos);
    p->acc = aligned_alloc(64, (size_t)p->ngroup * (size_t)p->ntap * ic * oc *
                                   sizeof(float));
    p->buf = aligned_alloc(64, (size_t)p->nbuf * p->buf_elems *
                                   sizeof(td_bf16));
    if (!p->dpos || !p->xpos || !p->acc || !p->buf) {
        td_bwdw_destroy(p);
        return NULL;
    }
    memset(p->buf, 0, (size_t)p->nbuf * p->buf_elems * sizeof(td_bf16));
    td__positions(p);
    for (int t = 0, m = 0; t < p->nph; t++) /* taps by phase */
        for (int u = 0; u < p->ntap; u++)
            if (p->tph[u] == t)
                p->order[m++] = u;
    for (int t = 0; t < p->ntap; t++) /* (mr - off - parity) / 2 */
        p->brow[t] = (size_t)(((long)p->mr - p->off[t] - (p->off[t] & 1)) / 2);
    return p;
}

void td_bwdw_destroy(td_bwdw *p)
{
    if (!p)
        return;
    free(p->off);
    free(p->tph);
    free(p->order);
    free(p->brow);
    free(p->dpos);
    free(p->xpos);
    free(p->acc);
    free(p->buf);
    free(p);
}

/* Row q of a chunk starting at sample n0 with ns samples, from the
 * position table pos of a tensor with img rows per sample and c channels
 * per row: the address of its channels in t, or NULL (zero; also for q
 * outside the chunk). */
static inline const td_bf16 *td__row(const td_bwdw *p, const int32_t *pos,
                                     size_t img, const td_bf16 *t, int c,
                                     int n0, int ns, long q)
{
    if (q < 0 || (size_t)q >= (size_t)ns * p->pg)
        return NULL;
    int32_t r = pos[q];
    if (r < 0)
        return NULL;
    return t + ((size_t)n0 * img + (size_t)r) * (size_t)c;
}

TD__AMX static inline __m256i td__ld16(const td_bf16 *a)
{
    return a ? _mm256_loadu_si256((const void *)a)
             : _mm256_setzero_si256();
}

/* The first m (< 16) channels, the rest zero (never read past them). */
TD__AMX static inline __m256i td__ld16m(const td_bf16 *a, __mmask16 m)
{
    return a ? _mm256_maskz_loadu_epi16(m, a) : _mm256_setzero_si256();
}

#define TD__XCH(s, j)                                                        \
    do {                                                                     \
        __m512i a_ = r[j], c_ = r[(j) | (1 << (s))];                         \
        r[j] = _mm512_permutex2var_epi16(a_, lo##s, c_);                     \
        r[(j) | (1 << (s))] = _mm512_permutex2var_epi16(a_, hi##s, c_);      \
    } while (0)
#define TD__XCH8(s, a, b, c, d, e, f, g, h)                                  \
    do {                                                                     \
        TD__XCH(s, a); TD__XCH(s, b); TD__XCH(s, c); TD__XCH(s, d);          \
        TD__XCH(s, e); TD__XCH(s, f); TD__XCH(s, g); TD__XCH(s, h);          \
    } while (0)

/* xt: 32 positions at a time, 16 channels: 16 registers of two positions
 * each, transposed by four exchange stages (register bit s <-> word bit
 * s) and a final word permutation (word j*2 + h <- word h*16 + j); every
 * index a constant, so the 16 registers stay registers. */
TD__AMX static void td__fill_x(const td_bwdw *p, const td_bf16 *x, int n0,
                               int ns, size_t kc, td_bf16 *xt)
{
    int16_t ix[5][32] __attribute__((aligned(64)));
    for (int s = 0; s < 4; s++)
        for (int i = 0; i < 32; i++)
            ix[s][i] = (int16_t)(((i >> s) & 1 ? 32 : 0) + (i & ~(1 << s)));
    for (int i = 0; i < 32; i++)
        ix[4][i] = (int16_t)((i & 1) * 16 + (i >> 1));
    const __m512i lo0 = _mm512_load_si512(ix[0]);
    const __m512i lo1 = _mm512_load_si512(ix[1]);
    const __m512i lo2 = _mm512_load_si512(ix[2]);
    const __m512i lo3 = _mm512_load_si512(ix[3]);
    const __m512i hi0 = _mm512_or_si512(lo0, _mm512_set1_epi16(1));
    const __m512i hi1 = _mm512_or_si512(lo1, _mm512_set1_epi16(2));
    const __m512i hi2 = _mm512_or_si512(lo2, _mm512_set1_epi16(4));
    const __m512i hi3 = _mm512_or_si512(lo3, _mm512_set1_epi16(8));
    const __m512i fin = _mm512_load_si512(ix[4]);
    size_t img = (size_t)p->h * (size_t)p->w;
    int rows = p->ic < 16 ? p->ic : 16;
    __mmask16 m = (__mmask16)(p->ic < 16 ? (1u << p->ic) - 1 : 0xffffu);
    for (int ph = 0; ph < p->nph; ph++)
        for (size_t q0 = 0; q0 < kc; q0 += 32) {
            const td_bf16 *src[32];
            for (int j = 0; j < 32; j++)
                src[j] = td__row(p, p->xpos + (size_t)ph * p->kc, img, x,
                                 p->ic, n0, ns, (long)(q0 + (size_t)j));
            for (int b = 0; b < (p->ic + 15) / 16; b++) {
                __m512i r[16];
#pragma GCC unroll 16
                for (int j = 0; j < 16; j++) {
                    const td_bf16 *a = src[2 * j], *c = src[2 * j + 1];
                    __m256i va = td__ld16m(a ? a + 16 * b : NULL, m);
                    __m256i vc = td__ld16m(c ? c + 16 * b : NULL, m);
                    r[j] = _mm512_inserti64x4(_mm512_castsi256_si512(va), vc,
                                              1);
                }
                TD__XCH8(0, 0, 2, 4, 6, 8, 10, 12, 14);
                TD__XCH8(1, 0, 1, 4, 5, 8, 9, 12, 13);
                TD__XCH8(2, 0, 1, 2, 3, 8, 9, 10, 11);
                TD__XCH8(3, 0, 1, 2, 3, 4, 5, 6, 7);
                td_bf16 *d = xt + ((size_t)ph * p->ic + 16 * (size_t)b) *
                                      p->kc + q0;
                if (rows == 16) {
#pragma GCC unroll 16
                    for (int c = 0; c < 16; c++)
                        _mm512_store_si512(d + (size_t)c * p->kc,
                                           _mm512_permutexvar_epi16(fin, r[c]));
                } else {
                    for (int c = 0; c < rows; c++)
                        _mm512_store_si512(d + (size_t)c * p->kc,
                                           _mm512_permutexvar_epi16(fin, r[c]));
                }
            }
        }
}

/* dyv: per 16-channel block two copies of dy with positions (u, u + 1)
 * interleaved, u even in copy 0 and odd in copy 1, row r holding u = 2r
 * - mr + copy: a tap's shift -off is whole rows of one copy, so every
 * tile row is one aligned 64-byte line.  Zero outside the chunk. */
TD__AMX static void td__fill_dy(const td_bwdw *p, const td_bf16 *dy, int n0,
                                int ns, size_t kc, td_bf16 *dyv)
{
    int16_t iv[32] __attribute__((aligned(64)));
    for (int i = 0; i < 32; i++)
        iv[i] = (int16_t)((i & 1) * 16 + (i >> 1));
    __m512i idx = _mm512_load_si512(iv);
    size_t img = (size_t)p->oh * (size_t)p->ow, rows = (kc + 2 * p->mr) / 2;
    const td_bf16 *e = td__row(p, p->dpos, img, dy, p->oc, n0, ns,
                               -(long)p->mr);
    for (size_t r = 0; r < rows; r++) {
        long u = 2 * (long)r - (long)p->mr;
        const td_bf16 *a = e; /* position u: the last row's u + 2 */
        const td_bf16 *c = td__row(p, p->dpos, img, dy, p->oc, n0, ns, u + 1);
        e = td__row(p, p->dpos, img, dy, p->oc, n0, ns, u + 2);
        for (int b = 0; b < p->oc / 16; b++) {
            __m256i va = td__ld16(a ? a + 16 * b : NULL);
            __m256i vc = td__ld16(c ? c + 16 * b : NULL);
            __m256i ve = td__ld16(e ? e + 16 * b : NULL);
            td_bf16 *d = dyv + ((size_t)b * 2 * p->rows + r) * 32;
            _mm512_store_si512(d, _mm512_permutexvar_epi16(
                idx, _mm512_inserti64x4(_mm512_castsi256_si512(va), vc, 1)));
            _mm512_store_si512(d + p->rows * 32, _mm512_permutexvar_epi16(
                idx, _mm512_inserti64x4(_mm512_castsi256_si512(vc), ve, 1)));
        }
    }
}

/* Tap t's B operand for oc block j at position pair 0 of the chunk. */
static inline const td_bf16 *td__b(const td_bwdw *p, const td_bf16 *dyv,
                                   int t, int j)
{
    return dyv + (((size_t)j * 2 + (size_t)(p->off[t] & 1)) * p->rows +
                  p->brow[t]) * 32;
}

/* 2 x 2 blocks of C per tap: ic blocks i, i + 1 and oc blocks j, j + 1. */
TD__AMX static void td__tiles22(const td_bwdw *p, const td_bf16 *xt,
                                const td_bf16 *dyv, size_t kc, float *acc)
{
    size_t lda = p->kc * sizeof(td_bf16), ldc = (size_t)p->oc * 4;
    for (int t = 0; t < p->ntap; t++)
        for (int i = 0; i < p->ic / 16; i += 2)
            for (int j = 0; j < p->oc / 16; j += 2) {
                float *c0 = acc + ((size_t)t * p->ic + 16 * (size_t)i) *
                                      p->oc + 16 * (size_t)j;
                float *c2 = c0 + 16 * (size_t)p->oc;
                const td_bf16 *a0 =
                    xt + ((size_t)p->tph[t] * p->ic + 16 * (size_t)i) * p->kc;
                const td_bf16 *a1 = a0 + 16 * p->kc;
                const td_bf16 *b0 = td__b(p, dyv, t, j);
                const td_bf16 *b1 = td__b(p, dyv, t, j + 1);
                _tile_loadd(0, c0, ldc);
                _tile_loadd(1, c0 + 16, ldc);
                _tile_loadd(2, c2, ldc);
                _tile_loadd(3, c2 + 16, ldc);
                for (size_t k = 0; k < kc; k += 32) {
                    _tile_loadd(4, a0 + k, lda);
                    _tile_loadd(6, b0 + k * 16, 64);
                    _tile_dpbf16ps(0, 4, 6);
                    _tile_loadd(7, b1 + k * 16, 64);
                    _tile_dpbf16ps(1, 4, 7);
                    _tile_loadd(5, a1 + k, lda);
                    _tile_dpbf16ps(2, 5, 6);
                    _tile_dpbf16ps(3, 5, 7);
                }
                _tile_stored(0, c0, ldc);
                _tile_stored(1, c0 + 16, ldc);
                _tile_stored(2, c2, ldc);
                _tile_stored(3, c2 + 16, ldc);
            }
}

/* One (ic block, oc block) pair, up to four taps of one phase at once
 * sharing A (x), each with its own shifted B (dy). */
TD__AMX static void td__tiles_taps(const td_bwdw *p, const td_bf16 *xt,
                                   const td_bf16 *dyv, size_t kc, float *acc,
                                   int i, int j)
{
    size_t lda = p->kc * sizeof(td_bf16), ldc = (size_t)p->oc * 4;
    size_t tstride = (size_t)p->ic * p->oc;
    float *cb = acc + 16 * (size_t)i * p->oc + 16 * (size_t)j;
    for (int g = 0; g < p->ntap;) {
        int ph = p->tph[p->order[g]], nt = 0, tp[4];
        while (nt < 4 && g < p->ntap && p->tph[p->order[g]] == ph)
            tp[nt++] = p->order[g++];
        for (int u = nt; u < 4; u++)
            tp[u] = tp[0];
        const td_bf16 *a = xt + ((size_t)ph * p->ic + 16 * (size_t)i) * p->kc;
        const td_bf16 *b[4];
        float *c[4];
        for (int u = 0; u < 4; u++) {
            b[u] = td__b(p, dyv, tp[u], j);
            c[u] = cb + (size_t)tp[u] * tstride;
        }
        _tile_loadd(0, c[0], ldc);
        if (nt > 1)
            _tile_loadd(1, c[1], ldc);
        if (nt > 2)
            _tile_loadd(2, c[2], ldc);
        if (nt > 3)
            _tile_loadd(3, c[3], ldc);
        for (size_t k = 0; k < kc; k += 32) {
            _tile_loadd(4, a + k, lda);
            _tile_loadd(6, b[0] + k * 16, 64);
            _tile_dpbf16ps(0, 4, 6);
            if (nt > 1) {
                _tile_loadd(7, b[1] + k * 16, 64);
                _tile_dpbf16ps(1, 4, 7);
            }
            if (nt > 2) {
                _tile_loadd(6, b[2] + k * 16, 64);
                _tile_dpbf16ps(2, 4, 6);
            }
            if (nt > 3) {
                _tile_loadd(7, b[3] + k * 16, 64);
                _tile_dpbf16ps(3, 4, 7);
            }
        }
        _tile_stored(0, c[0], ldc);
        if (nt > 1)
            _tile_stored(1, c[1], ldc);
        if (nt > 2)
            _tile_stored(2, c[2], ldc);
        if (nt > 3)
            _tile_stored(3, c[3], ldc);
    }
}

/* Group g: its chunks in order into its accumulator. */
TD__AMX static void td__group(const td_bwdw *p, int g, const td_bf16 *x,
                              const td_bf16 *dy, td_bf16 *buf)
{
    td__tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) { /* C 0-3 and A 4-5: ic rows */
        cfg.rows[t] = t < 6 && p->ic < 16 ? (uint8_t)p->ic : 16;
        cfg.colsb[t] = 64;
    }
    _tile_loadconfig(&cfg);
    size_t per = (size_t)p->ntap * p->ic * p->oc;
    float *acc = p->acc + (size_t)g * per;
    memset(acc, 0, per * sizeof *acc);
    td_bf16 *xt = buf, *dyv = buf + (size_t)p->nph * p->ic * p->kc;
    int c0 = (int)((long)g * p->nchunk / p->ngroup);
    int c1 = (int)((long)(g + 1) * p->nchunk / p->ngroup);
    int pairs = p->ic % 32 == 0 && p->oc % 32 == 0;
    for (int c = c0; c < c1; c++) {
        int n0 = c * p->spc;
        int ns = p->n - n0 < p->spc ? p->n - n0 : p->spc;
        size_t kc = td__round32((size_t)ns * p->pg);
        td__fill_x(p, x, n0, ns, kc, xt);
        td__fill_dy(p, dy, n0, ns, kc, dyv);
        if (pairs) {
            td__tiles22(p, xt, dyv, kc, acc);
            continue;
        }
        for (int i = 0; i < (p->ic + 15) / 16; i++)
            for (int j = 0; j < p->oc / 16; j++)
                td__tiles_taps(p, xt, dyv, kc, acc, i, j);
    }
    _tile_release();
}

/* Group 0's accumulator += the others', elements [lo, hi), in group
 * order (contiguous: vectorizes). */
static void td__sum_groups(const td_bwdw *p, size_t lo, size_t hi)
{
    size_t per = (size_t)p->ntap * p->ic * p->oc;
    float *a = p->acc;
    for (int g = 1; g < p->ngroup; g++) {
        const float *b = p->acc + (size_t)g * per;
        for (size_t e = lo; e < hi; e++)
            a[e] += b[e];
    }
}

/* dw[o][i][kh][kw] for output channels [o0, o1) from the summed
 * accumulator [tap][ic][oc]. */
static void td__transpose_out(const td_bwdw *p, float *dw, int o0, int o1)
{
    for (int i = 0; i < p->ic; i++)
        for (int t = 0; t < p->ntap; t++) {
            const float *a = p->acc + ((size_t)t * p->ic + (size_t)i) * p->oc;
            for (int o = o0; o < o1; o++)
                dw[((size_t)o * p->ic + (size_t)i) * p->ntap + (size_t)t] =
                    a[o];
        }
}

static void td__bias(const td_bwdw *p, const td_bf16 *dy, float *db, int o)
{
    size_t rows = (size_t)p->n * p->oh * p->ow;
    double s = 0;
    for (size_t r = 0; r < rows; r++)
        s += td_bf16_to_f32(dy[r * (size_t)p->oc + (size_t)o]);
    db[o] = (float)s;
}

void td_bwdw_run(td_bwdw *p, const td_bf16 *x, const td_bf16 *dy, float *dw,
                 float *db)
{
    int nt = omp_get_max_threads();
    if (nt > p->nbuf)
        nt = p->nbuf;
#pragma omp parallel num_threads(nt)
    {
        td_bf16 *buf = p->buf + (size_t)omp_get_thread_num() * p->buf_elems;
#pragma omp for schedule(static)
        for (int g = 0; g < p->ngroup; g++)
            td__group(p, g, x, dy, buf);
        size_t per = (size_t)p->ntap * p->ic * p->oc;
#pragma omp for schedule(static)
        for (size_t e = 0; e < per; e += 1024)
            td__sum_groups(p, e, e + 1024 < per ? e + 1024 : per);
#pragma omp for schedule(static)
        for (int o = 0; o < p->oc; o += 16)
            td__transpose_out(p, dw, o, o + 16 < p->oc ? o + 16 : p->oc);
        if (db) {
#pragma omp for schedule(static)
            for (int o = 0; o < p->oc; o++)
                td__bias(p, dy, db, o);
        }
    }
}
