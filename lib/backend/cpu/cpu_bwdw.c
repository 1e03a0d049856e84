/* cpu_bwdw.c - bf16 convolution backward weights on AMX tiles or
 * AVX512_BF16 (see cpu_bwdw.h for what it computes and why).
 *
 * Layout of one chunk (spc samples, their zero-bordered grids of
 * gw columns back to back, kc positions rounded up to 32):
 *   xt  [phase][ic][kc]: x transposed, position q at column q, zero on
 *                 the grids' borders (the A operand, never shifted, so
 *                 every tile row is one aligned 64-byte line);
 *   dyv [oc / 16][copy][rows][16][2]: dy of positions (u, u + 1)
 *                 interleaved per channel (tdpbf16ps's B layout), u even
 *                 in copy 0 and odd in copy 1, row r holding u = 2r - mr
 *                 + copy, zero on the borders and in the margins (mr >=
 *                 the largest tap offset): tap t's shift -off(t) is whole
 *                 rows of one copy (brow[t]).
 * Tiles: C 16 ic x 16 oc fp32 (the group's accumulator in memory, loaded
 * and stored once per chunk), A 16 ic x 32 positions, B 16 position
 * pairs x 16 oc.  With two or more 16-channel blocks each way a 2 x 2
 * block of C per tap (4 loads per 4 products); with one (resnet's first
 * stage) up to four taps of one x phase at once sharing A (5 loads per 4
 * products).
 * AVX512_BF16 (no AMX): the same operands and accumulators, 8 ic rows x
 * up to 3 (tap, oc block) columns of one x phase in 24 zmm accumulators;
 * per position pair one 64-byte dyv row per column (the B tile's row) and
 * per ic row a 32-bit broadcast of xt's pair (vdpbf16ps's m32bcst).
 * x and dy are read channels-last or nChw16c (td__ten: where a sample, a
 * position and a 16-channel block start); the buffers do not depend on it.
 *
 * Owns: the plan's buffers, the AMX tile configuration of the threads it
 * runs on (loaded per group, released after).
 * Never does: vector or tile code inside an OpenMP region (the clang fuzz
 * build outlines regions without their function's target attribute):
 * regions call target functions.
 */
#include "backend/cpu/cpu_bwdw.h"

#include <immintrin.h>
#include <omp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "backend/cpu/caps.h"
#include "backend/cpu/cpu_amx.h"

#define TD__AMX TD_AMX_FN
#define TD__512                                                              \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
/* the fills: AVX-512 only, run by both paths */
#define TD__FILL __attribute__((target("avx512f,avx512bw,avx512vl")))
#define TD__ARCH_REQ_XCOMP_PERM 0x1023
#define TD__XFEATURE_XTILEDATA 18
#define TD__CHUNK_POSITIONS 1024 /* target positions per chunk */
#define TD__GROUPS 4 /* fixed, whatever the thread count */

enum { TD__PATH_AMX = 1, TD__PATH_512 = 2 };

/* Where a tensor's rows are: row r (position r of sample 0's image,
 * or of the chunk's samples through the position tables) starts at
 * element (n0 * sample + r) * unit; its 16-channel block b bstride
 * elements further. */
typedef struct td__ten {
    size_t sample, unit, bstride;
} td__ten;

struct td_bwdw {
    int n, h, w, ic, oc, k, stride, pad;
    int path;           /* TD__PATH_AMX or TD__PATH_512 */
    td__ten tx, tdy;    /* x's and dy's layout */
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

static int td__amx_on;
static pthread_once_t td__amx_once = PTHREAD_ONCE_INIT;

/* oneDNN's ISA avx512_core_amx means AMX tiles, AMX-BF16 and AVX-512
 * (BW, VL) are there and enabled; the kernel must still grant the tile
 * state to this process. */
static void td__amx_probe(void)
{
    if (strcmp(td_cpu_caps_get()->isa, "avx512_core_amx") != 0)
        return;
    td__amx_on = syscall(SYS_arch_prctl, TD__ARCH_REQ_XCOMP_PERM,
                         TD__XFEATURE_XTILEDATA) == 0;
}

int td_bwdw_amx(void)
{
    pthread_once(&td__amx_once, td__amx_probe);
    return td__amx_on;
}

/* caps->bf16: oneDNN's ISA avx512_core_bf16 or avx512_core_amx, both
 * with AVX-512 BW and VL; plus the cpuid bit of vdpbf16ps. */
int td_bwdw_avx512(void)
{
    const td_cpu_caps *caps = td_cpu_caps_get();
    return caps->bf16 && caps->avx512_bf16;
}

static int td__path(void)
{
    const char *e = getenv("TD_BWDW_ISA");
    if (e && strcmp(e, "avx512_bf16") == 0)
        return td_bwdw_avx512() ? TD__PATH_512 : 0;
    if (e && strcmp(e, "amx") == 0)
        return td_bwdw_amx() ? TD__PATH_AMX : 0;
    return td_bwdw_amx() ? TD__PATH_AMX : td_bwdw_avx512() ? TD__PATH_512 : 0;
}

static const char *td__path_name(int path)
{
    return path == TD__PATH_AMX ? "amx"
           : path == TD__PATH_512 ? "avx512_bf16"
                                  : NULL;
}

const char *td_bwdw_isa(void) { return td__path_name(td__path()); }

const char *td_bwdw_path(const td_bwdw *p) { return td__path_name(p->path); }

int td_bwdw_ok(int k, int stride, int pad, int ic, int oc)
{
    return k >= 1 && k <= 7 && stride >= 1 && stride <= 2 && pad >= 0 &&
           pad < k && ic > 0 && (ic < 16 || ic % 16 == 0) && oc > 0 &&
           oc % 16 == 0 && td__path() != 0;
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
                         ? (int32_t)(smp * p->tdy.sample +
                                     (size_t)gy * (size_t)p->ow + (size_t)gx)
                         : -1;
        for (int a = 0; a < p->nph; a++) {
            int y = gy * s + a / s, x = gx * s + a % s;
            p->xpos[(size_t)a * p->kc + q] =
                in && gy >= 0 && gx >= 0 && y < p->h && x < p->w
                    ? (int32_t)(smp * p->tx.sample + (size_t)y * (size_t)p->w +
                                (size_t)x)
                    : -1;
        }
    }
}

/* x's or dy's rows: img positions per sample, c channels. */
static td__ten td__layout(td_bwdw_layout layout, size_t img, int c)
{
    if (layout == TD_BWDW_NCHW16C)
        return (td__ten){.sample = img * (size_t)(c / 16), .unit = 16,
                         .bstride = img * 16};
    return (td__ten){.sample = img, .unit = (size_t)c, .bstride = 16};
}

td_bwdw *td_bwdw_create(int n, int h, int w, int ic, int oc, int k,
                        int stride, int pad, int threads)
{
    return td_bwdw_create_layout(n, h, w, ic, oc, k, stride, pad, threads,
                                 TD_BWDW_NHWC);
}

td_bwdw *td_bwdw_create_layout(int n, int h, int w, int ic, int oc, int k,
                               int stride, int pad, int threads,
                               td_bwdw_layout layout)
{
    int path = td__path();
    if (n < 1 || h < 1 || w < 1 || threads < 1 ||
        !td_bwdw_ok(k, stride, pad, ic, oc) || h + 2 * pad < k ||
        w + 2 * pad < k || !path ||
        (layout != TD_BWDW_NHWC && layout != TD_BWDW_NCHW16C) ||
        (layout == TD_BWDW_NCHW16C && ic % 16 != 0))
        return NULL;
    td_bwdw *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    *p = (td_bwdw){.n = n, .h = h, .w = w, .ic = ic, .oc = oc, .k = k,
                   .stride = stride, .pad = pad, .ntap = k * k,
                   .nph = stride * stride,
                   .oh = (h + 2 * pad - k) / stride + 1,
                   .ow = (w + 2 * pad - k) / stride + 1, .path = path};
    p->tx = td__layout(layout, (size_t)h * (size_t)w, ic);
    p->tdy = td__layout(layout, (size_t)p->oh * (size_t)p->ow, oc);
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
 * position table pos of a tensor laid out as ly: the address of its first
 * 16 channels in t, or NULL (zero; also for q outside the chunk). */
static inline const td_bf16 *td__row(const td_bwdw *p, const int32_t *pos,
                                     const td__ten *ly, const td_bf16 *t,
                                     int n0, int ns, long q)
{
    if (q < 0 || (size_t)q >= (size_t)ns * p->pg)
        return NULL;
    int32_t r = pos[q];
    if (r < 0)
        return NULL;
    return t + ((size_t)n0 * ly->sample + (size_t)r) * ly->unit;
}

TD__FILL static inline __m256i td__ld16(const td_bf16 *a)
{
    return a ? _mm256_loadu_si256((const void *)a)
             : _mm256_setzero_si256();
}

/* The first m (< 16) channels, the rest zero (never read past them). */
TD__FILL static inline __m256i td__ld16m(const td_bf16 *a, __mmask16 m)
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
TD__FILL static void td__fill_x(const td_bwdw *p, const td_bf16 *x, int n0,
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
    size_t bs = p->tx.bstride;
    int rows = p->ic < 16 ? p->ic : 16;
    __mmask16 m = (__mmask16)(p->ic < 16 ? (1u << p->ic) - 1 : 0xffffu);
    for (int ph = 0; ph < p->nph; ph++)
        for (size_t q0 = 0; q0 < kc; q0 += 32) {
            const td_bf16 *src[32];
            for (int j = 0; j < 32; j++)
                src[j] = td__row(p, p->xpos + (size_t)ph * p->kc, &p->tx, x,
                                 n0, ns, (long)(q0 + (size_t)j));
            for (int b = 0; b < (p->ic + 15) / 16; b++) {
                __m512i r[16];
#pragma GCC unroll 16
                for (int j = 0; j < 16; j++) {
                    const td_bf16 *a = src[2 * j], *c = src[2 * j + 1];
                    __m256i va = td__ld16m(a ? a + bs * b : NULL, m);
                    __m256i vc = td__ld16m(c ? c + bs * b : NULL, m);
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
TD__FILL static void td__fill_dy(const td_bwdw *p, const td_bf16 *dy, int n0,
                                int ns, size_t kc, td_bf16 *dyv)
{
    int16_t iv[32] __attribute__((aligned(64)));
    for (int i = 0; i < 32; i++)
        iv[i] = (int16_t)((i & 1) * 16 + (i >> 1));
    __m512i idx = _mm512_load_si512(iv);
    size_t rows = (kc + 2 * p->mr) / 2, bs = p->tdy.bstride;
    const td_bf16 *e = td__row(p, p->dpos, &p->tdy, dy, n0, ns,
                               -(long)p->mr);
    for (size_t r = 0; r < rows; r++) {
        long u = 2 * (long)r - (long)p->mr;
        const td_bf16 *a = e; /* position u: the last row's u + 2 */
        const td_bf16 *c = td__row(p, p->dpos, &p->tdy, dy, n0, ns, u + 1);
        e = td__row(p, p->dpos, &p->tdy, dy, n0, ns, u + 2);
        for (int b = 0; b < p->oc / 16; b++) {
            __m256i va = td__ld16(a ? a + bs * b : NULL);
            __m256i vc = td__ld16(c ? c + bs * b : NULL);
            __m256i ve = td__ld16(e ? e + bs * b : NULL);
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

/* nr (1-8) x rows from a (lda apart) times nb (1-3) B columns b[j]
 * into C blocks c[j] (rows ldc apart) over np position pairs: the
 * accumulators stay in registers (nr, nb constants where inlined). */
TD__512 static inline __attribute__((always_inline)) void
td__dot(const td_bf16 *a, size_t lda, const int nr, const td_bf16 *const *b,
        float *const *c, const int nb, size_t ldc, size_t np)
{
    __m512 acc[8][3];
#pragma GCC unroll 8
    for (int r = 0; r < nr; r++)
#pragma GCC unroll 3
        for (int j = 0; j < nb; j++)
            acc[r][j] = _mm512_loadu_ps(c[j] + (size_t)r * ldc);
    for (size_t k = 0; k < np; k++) {
        __m512i row[3];
#pragma GCC unroll 3
        for (int j = 0; j < nb; j++)
            row[j] = _mm512_load_si512(b[j] + 32 * k);
#pragma GCC unroll 8
        for (int r = 0; r < nr; r++) {
            int32_t v;
            memcpy(&v, a + (size_t)r * lda + 2 * k, sizeof v);
            __m512i xb = _mm512_set1_epi32(v);
#pragma GCC unroll 3
            for (int j = 0; j < nb; j++)
                acc[r][j] = _mm512_dpbf16_ps(acc[r][j], (__m512bh)row[j],
                                             (__m512bh)xb);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < nr; r++)
#pragma GCC unroll 3
        for (int j = 0; j < nb; j++)
            _mm512_storeu_ps(c[j] + (size_t)r * ldc, acc[r][j]);
}

#define TD__DOT(R)                                                           \
    case R * 4 + 1: td__dot(a, lda, R, b, c, 1, ldc, np); break;             \
    case R * 4 + 2: td__dot(a, lda, R, b, c, 2, ldc, np); break;             \
    case R * 4 + 3: td__dot(a, lda, R, b, c, 3, ldc, np); break

/* td__dot with nr in {1, 2, 4, 8} and nb in 1..3 as constants. */
TD__512 static void td__dot_n(const td_bf16 *a, size_t lda, int nr,
                              const td_bf16 *const *b, float *const *c,
                              int nb, size_t ldc, size_t np)
{
    switch (nr * 4 + nb) {
    TD__DOT(1);
    TD__DOT(2);
    TD__DOT(4);
    TD__DOT(8);
    default: break;
    }
}

/* AVX512_BF16: per x phase, its (tap, oc block) columns three at a time,
 * per 8 ic rows (a stem's fewer rows as 4 + 2 + 1). */
TD__512 static void td__dots(const td_bwdw *p, const td_bf16 *xt,
                             const td_bf16 *dyv, size_t kc, float *acc)
{
    size_t ldc = (size_t)p->oc, lda = p->kc, np = kc / 2;
    int nj = p->oc / 16;
    for (int g = 0; g < p->ntap;) {
        int ph = p->tph[p->order[g]], g1 = g;
        while (g1 < p->ntap && p->tph[p->order[g1]] == ph)
            g1++;
        int ncol = (g1 - g) * nj; /* column u: tap order[g + u / nj] */
        for (int i0 = 0; i0 < p->ic;) {
            int nr = p->ic - i0 >= 8 ? 8 : p->ic - i0 >= 4 ? 4
                     : p->ic - i0 >= 2 ? 2 : 1;
            const td_bf16 *a = xt + ((size_t)ph * p->ic + (size_t)i0) * lda;
            for (int u = 0; u < ncol; u += 3) {
                const td_bf16 *b[3];
                float *c[3];
                int nb = ncol - u < 3 ? ncol - u : 3;
                for (int v = 0; v < nb; v++) {
                    int t = p->order[g + (u + v) / nj], j = (u + v) % nj;
                    b[v] = td__b(p, dyv, t, j);
                    c[v] = acc + ((size_t)t * p->ic + (size_t)i0) * ldc +
                           16 * (size_t)j;
                }
                td__dot_n(a, lda, nr, b, c, nb, ldc, np);
            }
            i0 += nr;
        }
        g = g1;
    }
}

TD__AMX static void td__tiles_begin(const td_bwdw *p)
{
    uint8_t rows[8]; /* C 0-3 and A 4-5: ic rows; B 6-7: 16 pairs */
    for (int t = 0; t < 8; t++)
        rows[t] = t < 6 && p->ic < 16 ? (uint8_t)p->ic : 16;
    td_amx_load(rows);
}

TD__AMX static void td__tiles_end(void) { _tile_release(); }

/* AMX: the chunk's products on tiles. */
TD__AMX static void td__tiles(const td_bwdw *p, const td_bf16 *xt,
                              const td_bf16 *dyv, size_t kc, float *acc)
{
    if (p->ic % 32 == 0 && p->oc % 32 == 0) {
        td__tiles22(p, xt, dyv, kc, acc);
        return;
    }
    for (int i = 0; i < (p->ic + 15) / 16; i++)
        for (int j = 0; j < p->oc / 16; j++)
            td__tiles_taps(p, xt, dyv, kc, acc, i, j);
}

/* Group g: its chunks in order into its accumulator. */
static void td__group(const td_bwdw *p, int g, const td_bf16 *x,
                      const td_bf16 *dy, td_bf16 *buf)
{
    size_t per = (size_t)p->ntap * p->ic * p->oc;
    float *acc = p->acc + (size_t)g * per;
    memset(acc, 0, per * sizeof *acc);
    td_bf16 *xt = buf, *dyv = buf + (size_t)p->nph * p->ic * p->kc;
    int c0 = (int)((long)g * p->nchunk / p->ngroup);
    int c1 = (int)((long)(g + 1) * p->nchunk / p->ngroup);
    if (p->path == TD__PATH_AMX)
        td__tiles_begin(p);
    for (int c = c0; c < c1; c++) {
        int n0 = c * p->spc;
        int ns = p->n - n0 < p->spc ? p->n - n0 : p->spc;
        size_t kc = td__round32((size_t)ns * p->pg);
        td__fill_x(p, x, n0, ns, kc, xt);
        td__fill_dy(p, dy, n0, ns, kc, dyv);
        if (p->path == TD__PATH_AMX)
            td__tiles(p, xt, dyv, kc, acc);
        else
            td__dots(p, xt, dyv, kc, acc);
    }
    if (p->path == TD__PATH_AMX)
        td__tiles_end();
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
    size_t img = (size_t)p->oh * p->ow;
    const td_bf16 *d = dy + (size_t)(o / 16) * p->tdy.bstride + (size_t)(o % 16);
    double s = 0;
    for (int n = 0; n < p->n; n++)
        for (size_t r = 0; r < img; r++)
            s += td_bf16_to_f32(
                d[((size_t)n * p->tdy.sample + r) * p->tdy.unit]);
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
