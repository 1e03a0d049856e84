/* bench_wino.c - cpu_wino.c's Winograd convolutions, with 4x4 tiles
 * alone ("4x4") and with the plan's tiles of 4 and 2 ("plan": the same
 * where 4 divides the sides, F(4x4) + F(4x2) + F(2x4) + F(2x2) on 14x14),
 * against oneDNN's direct ones on the same fp32 nChw8c data, per shape of
 * resnet20 and fmnist-cnn (batch 128; with "resnet18", resnet18's):
 * forward, backward data, backward
 * weights, each pass timed alternately (4x4, plan, oneDNN, 4x4, ...) in
 * one process.  Prints per pass the median ms of each, the direct
 * convolution's GFLOP/s equivalent (2 * n * h * w * ic * oc * 9 per pass)
 * of the plan and oneDNN, and the medians of the per-round ratios
 * 4x4 / plan and oneDNN / plan (> 1: the plan faster).
 * oneDNN's kernel is whatever it picks for nChw8c (jit:avx2 on an AVX2
 * CPU; on an AVX-512 CPU it may be slower in this layout than in its
 * own).  Usage: bench_wino [rounds] [threads] [batch] [resnet18]; skips
 * (exit 0)
 * where the CPU has no AVX2 + FMA.  Exit status: 0 done, 1 a oneDNN call
 * failed or a plan could not be made.
 */
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cpu/cpu_wino.h"
#include "benchutil.h"

typedef struct shape {
    const char *model;
    int h, w, ic, oc;
} shape;

static const shape small[] = {
    {"resnet20", 32, 32, 16, 16}, {"resnet20", 16, 16, 32, 32},
    {"resnet20", 8, 8, 64, 64},   {"fmnist-cnn", 28, 28, 32, 32},
    {"fmnist-cnn", 14, 14, 32, 64}, {"fmnist-cnn", 14, 14, 64, 64},
};

/* resnet18's (and resnet50's middle) 3x3 stride-1 shapes at 224x224 */
static const shape deep[] = {
    {"resnet18", 56, 56, 64, 64},   {"resnet18", 28, 28, 128, 128},
    {"resnet18", 14, 14, 256, 256}, {"resnet18", 7, 7, 512, 512},
};

#define CK(x)                                                              \
    do {                                                                   \
        if ((x) != dnnl_success) {                                         \
            fprintf(stderr, "bench_wino: %s failed\n", #x);               \
            exit(1);                                                       \
        }                                                                  \
    } while (0)

static float *buf(size_t n)
{
    float *p = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
    for (size_t i = 0; i < n; i++)
        p[i] = (float)((i * 2654435761u) % 1000) / 500.0f - 1.0f;
    return p;
}

typedef struct dnn {
    dnnl_engine_t eng;
    dnnl_stream_t strm;
    dnnl_primitive_t p[3]; /* fwd, bwd data, bwd weights */
    dnnl_memory_t x, w, y, dx, dy, dw, wf, wbd, dwb;
    dnnl_primitive_t rw[2], rdw; /* weights into fwd/bwd-data layouts,
                                    bwd weights' layout back */
} dnn;

static dnnl_memory_t mem(dnn *d, const dnnl_memory_desc_t *md, void *ptr)
{
    dnnl_memory_t m;
    CK(dnnl_memory_create(&m, md, d->eng, ptr ? ptr : DNNL_MEMORY_ALLOCATE));
    return m;
}

static const dnnl_memory_desc_t *q(const_dnnl_primitive_desc_t pd,
                                   dnnl_query_t what)
{
    return dnnl_primitive_desc_query_md(pd, what, 0);
}

static void run(dnn *d, dnnl_primitive_t p, int n, const dnnl_exec_arg_t *a)
{
    CK(dnnl_primitive_execute(p, d->strm, n, a));
    CK(dnnl_stream_wait(d->strm));
}

static void dnn_make(dnn *d, int n, const shape *s, int first, float *x,
                     float *w, float *y, float *dx, float *dy, float *dw)
{
    dnnl_dims_t xd = {n, s->ic, s->h, s->w}, yd = {n, s->oc, s->h, s->w};
    dnnl_dims_t wd = {s->oc, s->ic, 3, 3}, st = {1, 1}, pad = {1, 1};
    dnnl_memory_desc_t xm, ym, wany, wplain;
    CK(dnnl_memory_desc_init_by_tag(&xm, 4, xd, dnnl_f32, dnnl_nChw8c));
    CK(dnnl_memory_desc_init_by_tag(&ym, 4, yd, dnnl_f32, dnnl_nChw8c));
    CK(dnnl_memory_desc_init_by_tag(&wany, 4, wd, dnnl_f32,
                                    dnnl_format_tag_any));
    CK(dnnl_memory_desc_init_by_tag(&wplain, 4, wd, dnnl_f32, dnnl_oihw));
    dnnl_convolution_desc_t cd;
    dnnl_primitive_desc_t pd[3];
    CK(dnnl_convolution_forward_desc_init(&cd, dnnl_forward_training,
                                          dnnl_convolution_direct, &xm,
                                          &wany, NULL, &ym, st, pad, pad));
    CK(dnnl_primitive_desc_create(&pd[0], &cd, NULL, d->eng, NULL));
    CK(dnnl_convolution_backward_data_desc_init(
        &cd, dnnl_convolution_direct, &xm, &wany, &ym, st, pad, pad));
    CK(dnnl_primitive_desc_create(&pd[1], &cd, NULL, d->eng, pd[0]));
    CK(dnnl_convolution_backward_weights_desc_init(
        &cd, dnnl_convolution_direct, &xm, &wany, NULL, &ym, st, pad, pad));
    CK(dnnl_primitive_desc_create(&pd[2], &cd, NULL, d->eng, pd[0]));
    for (int i = 0; i < 3; i++)
        CK(dnnl_primitive_create(&d->p[i], pd[i]));
    d->x = mem(d, &xm, x);
    d->y = mem(d, &ym, y);
    d->dx = mem(d, &xm, dx);
    d->dy = mem(d, &ym, dy);
    d->w = mem(d, &wplain, w);
    d->dw = mem(d, &wplain, dw);
    d->wf = mem(d, q(pd[0], dnnl_query_weights_md), NULL);
    d->wbd = mem(d, q(pd[1], dnnl_query_weights_md), NULL);
    d->dwb = mem(d, q(pd[2], dnnl_query_diff_weights_md), NULL);
    dnnl_primitive_desc_t r;
    CK(dnnl_reorder_primitive_desc_create(&r, &wplain, d->eng,
                                          q(pd[0], dnnl_query_weights_md),
                                          d->eng, NULL));
    CK(dnnl_primitive_create(&d->rw[0], r));
    dnnl_primitive_desc_destroy(r);
    CK(dnnl_reorder_primitive_desc_create(&r, &wplain, d->eng,
                                          q(pd[1], dnnl_query_weights_md),
                                          d->eng, NULL));
    CK(dnnl_primitive_create(&d->rw[1], r));
    dnnl_primitive_desc_destroy(r);
    CK(dnnl_reorder_primitive_desc_create(
        &r, q(pd[2], dnnl_query_diff_weights_md), d->eng, &wplain, d->eng,
        NULL));
    CK(dnnl_primitive_create(&d->rdw, r));
    dnnl_primitive_desc_destroy(r);
    for (int i = 0; i < 3; i++) {
        const char *impl = NULL;
        dnnl_primitive_desc_query(pd[i], dnnl_query_impl_info_str, 0, &impl);
        if (first && i == 0)
            printf("oneDNN's kernel for nChw8c: %s\n", impl ? impl : "?");
        dnnl_primitive_desc_destroy(pd[i]);
    }
}

/* One pass of oneDNN as a training step runs it: the weights' reorder
 * with the forward and the backward data, the gradient's back after the
 * backward weights. */
static void dnn_pass(dnn *d, int pass)
{
    if (pass < 2) {
        dnnl_exec_arg_t r[2] = {{DNNL_ARG_FROM, d->w},
                                {DNNL_ARG_TO, pass ? d->wbd : d->wf}};
        run(d, d->rw[pass], 2, r);
    }
    if (pass == 0) {
        dnnl_exec_arg_t a[3] = {{DNNL_ARG_SRC, d->x},
                                {DNNL_ARG_WEIGHTS, d->wf},
                                {DNNL_ARG_DST, d->y}};
        run(d, d->p[0], 3, a);
    } else if (pass == 1) {
        dnnl_exec_arg_t a[3] = {{DNNL_ARG_DIFF_DST, d->dy},
                                {DNNL_ARG_WEIGHTS, d->wbd},
                                {DNNL_ARG_DIFF_SRC, d->dx}};
        run(d, d->p[1], 3, a);
    } else {
        dnnl_exec_arg_t a[3] = {{DNNL_ARG_SRC, d->x},
                                {DNNL_ARG_DIFF_DST, d->dy},
                                {DNNL_ARG_DIFF_WEIGHTS, d->dwb}};
        run(d, d->p[2], 3, a);
        dnnl_exec_arg_t r[2] = {{DNNL_ARG_FROM, d->dwb},
                                {DNNL_ARG_TO, d->dw}};
        run(d, d->rdw, 2, r);
    }
}

/* One pass of cpu_wino.c, the weights' transform included. */
static void wino_pass(td_wino *f, td_wino *b, int pass, const float *x,
                      const float *w, float *y, float *dx, const float *dy,
                      float *dw)
{
    if (pass == 0) {
        td_wino_weights(f, w);
        td_wino_fwd(f, x, y, NULL, NULL);
    } else if (pass == 1) {
        td_wino_weights_flip(b, w);
        td_wino_fwd(b, dy, dx, NULL, NULL);
    } else {
        td_wino_bwdw(f, x, dy, dw, NULL, NULL);
    }
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 15;
    int threads = argc > 2 ? atoi(argv[2]) : 2;
    int n = argc > 3 ? atoi(argv[3]) : 128;
    int r18 = argc > 4 && strcmp(argv[4], "resnet18") == 0;
    if (rounds < 1 || threads < 1 || n < 1 ||
        (argc > 4 && !r18)) {
        fprintf(stderr,
                "usage: bench_wino [rounds] [threads] [batch] [resnet18]\n");
        return 2;
    }
    const shape *shapes = r18 ? deep : small;
    size_t nshapes = r18 ? sizeof deep / sizeof deep[0]
                         : sizeof small / sizeof small[0];
    if (!td_wino_cpu()) {
        printf("bench_wino: skipped: this CPU has no AVX2 + FMA\n");
        return 0;
    }
    omp_set_num_threads(threads);
    printf("batch %d, %d threads, %d rounds after 2 warm-up; ms median per "
           "call; ratios: medians of the per-round 4x4 / plan and "
           "oneDNN / plan\n",
           n, threads, rounds);
    static const char *pn[3] = {"fwd", "bwd data", "bwd weights"};
    dnn d = {0};
    CK(dnnl_engine_create(&d.eng, dnnl_cpu, 0));
    CK(dnnl_stream_create(&d.strm, d.eng, dnnl_stream_default_flags));
    for (size_t si = 0; si < nshapes; si++) {
        const shape *s = &shapes[si];
        size_t nx = (size_t)n * s->ic * s->h * s->w;
        size_t ny = (size_t)n * s->oc * s->h * s->w;
        size_t nw = (size_t)s->oc * s->ic * 9;
        float *x = buf(nx), *dx = buf(nx), *y = buf(ny), *dy = buf(ny);
        float *w = buf(nw), *dw = buf(nw);
        td_wino *f[2], *b[2]; /* 4x4 tiles alone, the plan's */
        for (int t = 0; t < 2; t++) {
            f[t] = td_wino_create_tile(n, s->h, s->w, s->ic, s->oc, threads,
                                       t ? 0 : 4);
            b[t] = td_wino_create_tile(n, s->h, s->w, s->oc, s->ic, threads,
                                       t ? 0 : 4);
        }
        if (!f[0] || !b[0] || !f[1] || !b[1]) {
            fprintf(stderr, "bench_wino: no plan for %dx%d %d->%d\n", s->h,
                    s->w, s->ic, s->oc);
            return 1;
        }
        dnn_make(&d, n, s, si == 0, x, w, y, dx, dy, dw);
        double gf = 2.0 * n * s->h * s->w * s->ic * s->oc * 9 / 1e9;
        for (int pass = 0; pass < 3; pass++) {
            double *t2 = calloc((size_t)rounds, sizeof(double));
            double *t4 = calloc((size_t)rounds, sizeof(double));
            double *td = calloc((size_t)rounds, sizeof(double));
            double *r2 = calloc((size_t)rounds, sizeof(double));
            double *rd = calloc((size_t)rounds, sizeof(double));
            for (int r = -2; r < rounds; r++) {
                double a = td_now_ms();
                wino_pass(f[0], b[0], pass, x, w, y, dx, dy, dw);
                double bt = td_now_ms();
                wino_pass(f[1], b[1], pass, x, w, y, dx, dy, dw);
                double c = td_now_ms();
                dnn_pass(&d, pass);
                double e = td_now_ms();
                if (r >= 0) {
                    t2[r] = bt - a;
                    t4[r] = c - bt;
                    td[r] = e - c;
                    r2[r] = t2[r] / t4[r];
                    rd[r] = td[r] / t4[r];
                }
            }
            double m2 = td_median(t2, rounds), m4 = td_median(t4, rounds);
            double md = td_median(td, rounds);
            printf("%-10s %2dx%-2d %3d->%-3d %-11s 4x4 %6.2f  plan %6.2f ms "
                   "(%4.0f GFLOP/s)  oneDNN %6.2f (%4.0f)  4x4/plan %.2f  "
                   "oneDNN/plan %.2f\n",
                   s->model, s->h, s->w, s->ic, s->oc, pn[pass], m2, m4,
                   gf / m4 * 1e3, md, gf / md * 1e3, td_median(r2, rounds),
                   td_median(rd, rounds));
            fflush(stdout);
            free(t2), free(t4), free(td), free(r2), free(rd);
        }
        for (int i = 0; i < 3; i++)
            dnnl_primitive_destroy(d.p[i]);
        dnnl_primitive_destroy(d.rw[0]);
        dnnl_primitive_destroy(d.rw[1]);
        dnnl_primitive_destroy(d.rdw);
        dnnl_memory_t ms[] = {d.x, d.w, d.y, d.dx, d.dy, d.dw, d.wf, d.wbd,
                              d.dwb};
        for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++)
            dnnl_memory_destroy(ms[i]);
        for (int t = 0; t < 2; t++) {
            td_wino_destroy(f[t]);
            td_wino_destroy(b[t]);
        }
        free(x), free(dx), free(y), free(dy), free(w), free(dw);
    }
    dnnl_stream_destroy(d.strm);
    dnnl_engine_destroy(d.eng);
    return 0;
}
