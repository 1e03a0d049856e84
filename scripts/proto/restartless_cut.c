/* restartless_cut.c - EXPERIMENT (session 2), not built by meson, not used
 * by traind.  Measures the restart-free cut-out idea of docs/pipeline.md
 * on restart-packed shards: for random_resized_crop-like boxes it times
 * (a) td_decoder_region's restart cut-out and (b) a cut-out rebuilt without
 * restart markers from td_pack_segment_info (segments bit-concatenated,
 * first DC differences re-coded, DRI interval patched to 0) decoded on
 * libjpeg-turbo's fast Huffman path.
 *
 * Findings (2026-11-22, /tmp/bi/shards from `bench_input --keep /tmp/bi
 * --restart 4`, taskset -c 1): the restart-free cut-out gives exactly the
 * restart cut-out's pixels (and tjDecompress2's: every compared row
 * equal), and decoding it is ~24% faster on libjpeg-turbo's fast path
 * (about 334 vs 441 us per crop in the last run), but (1) this
 * bit-at-a-time/16-bit copy costs ~130-150 us per crop, far too slow: copy
 * 64 bits at a time; (2) 26% of crops need a DC category the optimized
 * Huffman table has no code for (pack must write DC tables that code
 * every category, e.g. the standard ones); those fall back here.
 *
 * Build: gcc -O2 -std=gnu11 -I lib -I kernels -I build -o /tmp/proto \
 *   scripts/proto/restartless_cut.c build/lib/libtraind.a \
 *   $(pkg-config --libs libjpeg libturbojpeg jansson zlib libuv) -ldnnl \
 *   -fopenmp -lm -lpthread
 * Run:   taskset -c 1 /tmp/proto SHARD_DIR
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <jpeglib.h>
#include <turbojpeg.h>
#include "clock.h"
#include "dataset.h"
#include "decode.h"
#include "pack.h"
#include <math.h>
static double U(uint64_t a, uint64_t b, uint64_t c){ uint64_t x = a * 0x9E3779B97F4A7C15ull ^ b * 0xBF58476D1CE4E5B9ull ^ c * 0x94D049BB133111EBull; x ^= x >> 31; x *= 0xD6E8FEB86659FD93ull; x ^= x >> 32; return (x >> 11) * (1.0 / 9007199254740992.0); }

typedef struct { uint64_t acc; int n; uint8_t *o; size_t at; } bw_t;
static inline void bw_put(bw_t *w, uint32_t v, int len)
{ /* len <= 24 */
    w->acc = (w->acc << len) | (v & ((1u << len) - 1));
    w->n += len;
    while (w->n >= 8) {
        uint8_t b = (uint8_t)(w->acc >> (w->n - 8));
        w->o[w->at++] = b;
        if (b == 0xff) w->o[w->at++] = 0;
        w->n -= 8;
    }
}
/* unstuff segment bytes into buf; returns length */
static size_t unstuff(const uint8_t *p, size_t n, uint8_t *out)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        out[k++] = p[i];
        if (p[i] == 0xff) i++;
    }
    return k;
}
static void copy_bits(bw_t *w, const uint8_t *u, uint64_t from, uint64_t to)
{
    while (from < to && (from & 7)) {
        bw_put(w, (u[from >> 3] >> (7 - (from & 7))) & 1, 1);
        from++;
    }
    while (from + 16 <= to) {
        bw_put(w, (uint32_t)u[from >> 3] << 8 | u[(from >> 3) + 1], 16);
        from += 16;
    }
    while (from < to) {
        bw_put(w, (u[from >> 3] >> (7 - (from & 7))) & 1, 1);
        from++;
    }
}
static int nbits(int v) { unsigned a = (unsigned)(v < 0 ? -v : v); int n = 0; while (a) { n++; a >>= 1; } return n; }

int main(int argc, char **argv)
{
    td_dataset *ds; char err[512];
    if (td_dataset_open(argv[1], &ds, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
    size_t N = td_dataset_count(ds);
    td_buf scratch = {0};
    td_seg_info **si = calloc(N, sizeof *si); size_t *ns = calloc(N, sizeof *ns);
    const uint8_t **dat = calloc(N, sizeof *dat); size_t *len = calloc(N, sizeof *len);
    int *WW = calloc(N, sizeof *WW), *HH = calloc(N, sizeof *HH);
    for (size_t i = 0; i < N; i++) {
        td_dataset_read(ds, i, &scratch, &dat[i], &len[i]);
        if (td_pack_segment_info(dat[i], len[i], &si[i], &ns[i], err, sizeof err)) { fprintf(stderr, "%zu: %s\n", i, err); return 1; }
        { struct jpeg_decompress_struct c0; struct jpeg_error_mgr e0; c0.err = jpeg_std_error(&e0); jpeg_create_decompress(&c0); jpeg_mem_src(&c0, dat[i], len[i]); jpeg_read_header(&c0, TRUE); WW[i] = (int)c0.image_width; HH[i] = (int)c0.image_height; jpeg_destroy_decompress(&c0); }
    }
    td_decoder *d; td_decoder_create(&d);
    uint8_t *out = malloc(1 << 22), *ub = malloc(1 << 22);
    int64_t t_old = 0, t_new = 0, t_build = 0; double diff = 0; long npx = 0; long fallbacks = 0, big = 0; int shown = 0;
    for (int rep = 0; rep < 6; rep++)
    for (size_t i = 0; i < N; i++) {
        int W = WW[i], H = HH[i];
        /* a random_resized_crop-like box */
        double a = 0.08 + 0.92 * U(7, 1, i * 10 + rep), r = 0.75 + 0.58 * U(7, 2, i * 10 + rep);
        int bw = (int)(sqrt(a * W * H * r)), bh = (int)(sqrt(a * W * H / r));
        if (bw > W) bw = W; if (bh > H) bh = H;
        int x = (int)((W - bw) * U(7, 3, i * 10 + rep)), y = (int)((H - bh) * U(7, 4, i * 10 + rep));
        if (getenv("FULL")) { x = 0; y = 0; bw = W; bh = H; }
        td_region reg;
        int64_t t0 = td_now_ns();
        td_decoder_header(d, dat[i], len[i], &W, &H);
        { int rr_ = td_decoder_region(d, x, y, bw, bh, 224, 224, 3, TD_DECODE_NO_FANCY, &reg); if (rr_) { fprintf(stderr, "old %zu rc %d %s box %d,%d %dx%d of %dx%d\n", i, rr_, td_decoder_message(d), x, y, bw, bh, W, H); return 2; } }
        int64_t t1 = td_now_ns();
        /* the region lives in the decoder: keep its middle row before the
         * second decode reuses the buffer */
        static uint8_t saved[8192 * 3];
        int yy_s = y + bh / 2, xx_s = x + 1;
        if (reg.scale_num == 8)
            memcpy(saved, reg.px + (size_t)(yy_s - reg.y0) * reg.stride + (size_t)(xx_s - reg.x0) * 3, (size_t)(bw - 2) * 3);
        t_old += t1 - t0; int64_t t_old_this = t1 - t0;
        /* new: rows r0..r1 (all segments of each row), restart-free */
        struct jpeg_decompress_struct ci; struct jpeg_error_mgr jerr;
        ci.err = jpeg_std_error(&jerr); jpeg_create_decompress(&ci);
        jpeg_mem_src(&ci, dat[i], len[i]); jpeg_read_header(&ci, TRUE);
        int mh = ci.max_v_samp_factor * 8, mw = ci.max_h_samp_factor * 8;
        int mpr = (W + mw - 1) / mw, R = (int)ci.restart_interval, spr = mpr / R;
        int segw = R * mw;
        int r0 = y / mh, r1 = (y + bh + mh - 1) / mh;
        int s0 = x / segw, s1 = (x + bw + segw - 1) / segw;
        /* DC codes */
        uint32_t code[4][16]; uint8_t clen[4][16]; int dct[4];
        for (int c = 0; c < ci.num_components; c++) {
            dct[c] = ci.comp_info[c].dc_tbl_no;
            JHUFF_TBL *t = ci.dc_huff_tbl_ptrs[dct[c]];
            memset(clen[c], 0, 16); uint32_t cd = 0; int k = 0;
            for (int l = 1; l <= 16; l++) { for (int j = 0; j < t->bits[l]; j++, k++) { if (t->huffval[k] < 16) { code[c][t->huffval[k]] = cd; clen[c][t->huffval[k]] = (uint8_t)l; } cd++; } cd <<= 1; }
        }
        /* segment byte ranges: scan markers */
        const uint8_t *p = dat[i]; size_t sos = (size_t)(ci.src->next_input_byte - p);
        size_t need = (size_t)(r1 - 1) * spr + s1;
        size_t *st = malloc(need * sizeof *st), *en = malloc(need * sizeof *en), pos = sos, k = 0;
        st[0] = pos;
        while (k < need) {
            const uint8_t *f = memchr(p + pos, 0xff, len[i] - pos); size_t at = (size_t)(f - p);
            if (p[at + 1] == 0) { pos = at + 2; continue; }
            en[k] = at; k++; if (k < need) st[k] = pos = at + 2;
        }
        /* headers: copy to SOS end, patch SOF dims and DRI to 0 */
        memcpy(out, p, sos);
        size_t q = 2; while (q < sos) { if (p[q] == 0xff && (p[q+1] == 0xc0 || p[q+1] == 0xc1)) { int ch = (r1 - r0) * mh, cw = (s1 - s0) * segw; if (r1 * mh > H) ch = H - r0 * mh; if (s1 * segw > W) cw = W - s0 * segw; out[q+5] = (uint8_t)(ch >> 8); out[q+6] = (uint8_t)ch; out[q+7] = (uint8_t)(cw >> 8); out[q+8] = (uint8_t)cw; }
            if (p[q] == 0xff && p[q+1] == 0xdd) { out[q+4] = 0; out[q+5] = 0; }
            if (p[q] == 0xff && p[q+1] == 0xda) break; q += 2 + ((size_t)p[q+2] << 8 | p[q+3]); }
        bw_t w = {0, 0, out, sos};
        int missing = 0;
        int pred[4] = {0};
        for (int rr = r0; rr < r1; rr++) for (int s = s0; s < s1; s++) {
            size_t kk = (size_t)rr * spr + s; const td_seg_info *g = &si[i][kk];
            unstuff(p + st[kk], en[kk] - st[kk], ub);
            uint64_t at = 0;
            for (int c = 0; c < ci.num_components; c++) {
                copy_bits(&w, ub, at, g->dc_off[c]);
                int dv = g->dc_first[c] - pred[c], cat = nbits(dv);
                if (!clen[c][cat]) missing = 1;
                bw_put(&w, code[c][cat], clen[c][cat]);
                if (cat) bw_put(&w, (uint32_t)(dv >= 0 ? dv : dv + (1 << cat) - 1), cat);
                at = g->dc_off[c] + g->dc_len[c];
                pred[c] = g->dc_last[c];
            }
            copy_bits(&w, ub, at, g->bits);
        }
        if (w.n) bw_put(&w, 0x7f, 8 - w.n);
        out[w.at++] = 0xff; out[w.at++] = 0xd9;
        jpeg_destroy_decompress(&ci); free(st); free(en);
        int64_t t2 = td_now_ns();
        t_build += t2 - t1;
        int cw2, ch2; td_region r2;
        if (missing) { fallbacks++; t_new += t_old_this; continue; }
        if (0) fprintf(stderr, "img5 W %d H %d R %d spr %d mpr %d rows %d-%d segs %d-%d ncomp %d comps_in_scan %d\n", W, H, R, spr, mpr, r0, r1, s0, s1, ci.num_components, ci.comps_in_scan);
        if (td_decoder_header(d, out, w.at, &cw2, &ch2)) { fprintf(stderr, "bad cut %zu: %s\n", i, td_decoder_message(d)); return 3; }
        int X0 = s0 * segw, Y0 = r0 * mh;
        if (td_decoder_region(d, x - X0, y - Y0, bw, bh, 224, 224, 3, TD_DECODE_NO_FANCY | TD_DECODE_NO_CUT, &r2)) { fprintf(stderr, "region %zu: %s\n", i, td_decoder_message(d)); return 4; }
        t_new += td_now_ns() - t1;
        /* compare a row in the middle: region coords are scaled; compare only same scale */
        if (rep == 0 && r2.scale_num == reg.scale_num && reg.scale_num == 8) {
            int yy = y + bh / 2, xx = x + 1;
            const uint8_t *a1 = saved;
            const uint8_t *a2 = r2.px + (size_t)(yy - Y0 - r2.y0) * r2.stride + (size_t)(xx - X0 - r2.x0) * 3;
            int first_big = -1;
            { /* both against a plain full decode (fast upsampling) */
                static tjhandle tj; static uint8_t *full; if (!tj) { tj = tjInitDecompress(); full = malloc(4096 * 4096 * 3); }
                tjDecompress2(tj, dat[i], len[i], full, W, 0, H, TJPF_RGB, TJFLAG_FASTUPSAMPLE);
                const uint8_t *f = full + ((size_t)yy * W + xx) * 3; long bo = 0, bn = 0;
                for (int j = 0; j < (bw - 2) * 3; j++) { bo += abs(a1[j] - f[j]) > 20; bn += abs(a2[j] - f[j]) > 20; }
                if ((bo || bn) && shown < 8) fprintf(stderr, "img %zu vs plain: old path %ld big, new path %ld big\n", i, bo, bn);
            }
            for (int j = 0; j < (bw - 2) * 3; j++) { int dd = abs(a1[j] - a2[j]); diff += dd; npx++; if (dd > 20) { big++; if (first_big < 0) first_big = j / 3; } }
            if (first_big >= 0 && shown++ < 8) fprintf(stderr, "img %zu W%d H%d box %d,%d %dx%d rows %d-%d segs %d-%d spr %d segw %d: first big at x=%d (abs %d), row y=%d (abs row in cut %d)\n", i, W, H, x, y, bw, bh, r0, r1, s0, s1, spr, segw, first_big, xx + first_big, yy, yy - Y0);
        }
    }
    printf("values off by > 20: %ld\n", big);
    printf("fallbacks (a DC category without a code) %ld of %zu\n", fallbacks, N * 6);
    printf("images %zu x6: restart cut %.1f us/img, restart-free %.1f us/img (of which building %.1f us); mean |diff| %.4f over %ld values\n",
           N, t_old / 6e3 / N, t_new / 6e3 / N, t_build / 6e3 / N, npx ? diff / npx : -1, npx);
    return 0;
}
