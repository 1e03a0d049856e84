/* bench_bn8.c - cpu_bn8.c's fp32 batch norm + relu against oneDNN's
 * (bnorm_jit with the relu fused, its workspace for the backward) on the
 * same nChw8c data, per batch norm shape of fmnist-cnn and resnet20
 * (batch 128): training forward and backward, timed alternately (oneDNN,
 * cpu_bn8, oneDNN, ...) in one process, with the caches flushed before
 * every call (a 96 MB write) as a step leaves them, or warm (`warm` as
 * the fourth argument).  Prints the median ms of each and the median of
 * the per-round ratios (oneDNN / cpu_bn8, > 1: cpu_bn8 faster).  It is
 * what the plan's rule rests on (cpu_kplan.c: cpu_bn8.c only where an
 * add fuses into it).  Usage: bench_bn8 [rounds] [threads] [warm]; skips
 * (exit 0) without AVX2 + FMA.  Exit status: 0 done, 1 a oneDNN call
 * failed or out of memory.
 */
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cpu/cpu_bn.h"
#include "backend/cpu/cpu_bn8.h"
#include "benchutil.h"

typedef struct shape {
    const char *model;
    int c, hw;
} shape;

static const shape shapes[] = {
    {"fmnist-cnn", 32, 28}, {"fmnist-cnn", 64, 14}, {"resnet20", 16, 32},
    {"resnet20", 32, 16},   {"resnet20", 64, 8},
};

#define CK(x)                                                              \
    do {                                                                   \
        if ((x) != dnnl_success) {                                         \
            fprintf(stderr, "bench_bn8: %s failed\n", #x);                \
            exit(1);                                                       \
        }                                                                  \
    } while (0)

static char *flush_buf;
enum { FLUSH_BYTES = 96 << 20, MAX_ROUNDS = 200 };

static void flush(int warm)
{
    if (warm)
        return;
    for (size_t i = 0; i < FLUSH_BYTES; i += 64)
        flush_buf[i]++;
}

static dnnl_memory_t mem(dnnl_engine_t e, const dnnl_memory_desc_t *md,
                         void *p)
{
    dnnl_memory_t m;
    CK(dnnl_memory_create(&m, md, e, p ? p : DNNL_MEMORY_ALLOCATE));
    return m;
}

static void *falloc(size_t n)
{
    void *p = aligned_alloc(64, (n * 4 + 63) / 64 * 64);
    if (!p) {
        fprintf(stderr, "bench_bn8: out of memory\n");
        exit(1);
    }
    return p;
}

static void run_shape(const shape *s, dnnl_engine_t e, dnnl_stream_t st,
                      int rounds, int warm)
{
    int N = 128, C = s->c, H = s->hw;
    size_t hw = (size_t)H * H, rows = (size_t)N * hw, n = rows * C;
    float *x = falloc(n), *y = falloc(n), *dy = falloc(n), *dx = falloc(n);
    float *v = falloc(6 * (size_t)C);
    float *g = v, *b = v + C, *m = v + 2 * C, *var = v + 3 * C;
    float *dg = v + 4 * C, *db = v + 5 * C;
    float *part = falloc(td_bn_nhwc_part_floats(rows, C, hw));
    uint8_t *mask = malloc(td_bn8_mask_bytes(rows, C));
    for (size_t i = 0; i < n; i++) {
        x[i] = (float)((i * 2654435761u) % 1000) / 500.0f - 0.6f;
        dy[i] = (float)((i * 40503u) % 1000) / 1000.0f - 0.5f;
    }
    for (int c = 0; c < C; c++)
        g[c] = 1.0f, b[c] = 0.1f;
    dnnl_dims_t d = {N, C, H, H}, cd = {C};
    dnnl_memory_desc_t md, vmd;
    CK(dnnl_memory_desc_init_by_tag(&md, 4, d, dnnl_f32, dnnl_nChw8c));
    CK(dnnl_memory_desc_init_by_tag(&vmd, 1, cd, dnnl_f32, dnnl_a));
    unsigned fl = dnnl_use_scale | dnnl_use_shift | dnnl_fuse_norm_relu;
    dnnl_batch_normalization_desc_t fd, bd;
    dnnl_primitive_desc_t fpd, bpd;
    dnnl_primitive_t fp, bp;
    CK(dnnl_batch_normalization_forward_desc_init(&fd, dnnl_forward_training,
                                                  &md, 1e-5f, fl));
    CK(dnnl_primitive_desc_create(&fpd, &fd, NULL, e, NULL));
    CK(dnnl_primitive_create(&fp, fpd));
    CK(dnnl_batch_normalization_backward_desc_init(&bd, dnnl_backward, &md,
                                                   &md, 1e-5f, fl));
    CK(dnnl_primitive_desc_create(&bpd, &bd, NULL, e, fpd));
    CK(dnnl_primitive_create(&bp, bpd));
    const char *impl = NULL;
    dnnl_primitive_desc_query(fpd, dnnl_query_impl_info_str, 0, &impl);
    dnnl_memory_t X = mem(e, &md, x), Y = mem(e, &md, y);
    dnnl_memory_t DY = mem(e, &md, dy), DX = mem(e, &md, dx);
    dnnl_memory_t G = mem(e, &vmd, g), B = mem(e, &vmd, b);
    dnnl_memory_t M = mem(e, &vmd, m), V = mem(e, &vmd, var);
    dnnl_memory_t DG = mem(e, &vmd, dg), DB = mem(e, &vmd, db);
    dnnl_memory_t WS = mem(e, dnnl_primitive_desc_query_md(
                                  fpd, dnnl_query_workspace_md, 0), NULL);
    dnnl_exec_arg_t fa[] = {{DNNL_ARG_SRC, X},   {DNNL_ARG_DST, Y},
                            {DNNL_ARG_SCALE, G}, {DNNL_ARG_SHIFT, B},
                            {DNNL_ARG_MEAN, M},  {DNNL_ARG_VARIANCE, V},
                            {DNNL_ARG_WORKSPACE, WS}};
    dnnl_exec_arg_t ba[] = {
        {DNNL_ARG_SRC, X},        {DNNL_ARG_DIFF_DST, DY},
        {DNNL_ARG_SCALE, G},      {DNNL_ARG_SHIFT, B},
        {DNNL_ARG_MEAN, M},       {DNNL_ARG_VARIANCE, V},
        {DNNL_ARG_WORKSPACE, WS}, {DNNL_ARG_DIFF_SRC, DX},
        {DNNL_ARG_DIFF_SCALE, DG}, {DNNL_ARG_DIFF_SHIFT, DB}};
    double t[4][MAX_ROUNDS], rf[MAX_ROUNDS], rb[MAX_ROUNDS];
    for (int r = -1; r < rounds; r++) { /* round -1: warm-up */
        double q[4], t0;
        flush(warm);
        t0 = td_now_ms();
        CK(dnnl_primitive_execute(fp, st, 7, fa));
        CK(dnnl_stream_wait(st));
        q[0] = td_now_ms() - t0;
        flush(warm);
        t0 = td_now_ms();
        CK(dnnl_primitive_execute(bp, st, 10, ba));
        CK(dnnl_stream_wait(st));
        q[1] = td_now_ms() - t0;
        flush(warm);
        t0 = td_now_ms();
        td_bn8_fwd(x, NULL, y, mask, rows, C, hw, g, b, 1e-5f, 1, m, var,
                   part);
        q[2] = td_now_ms() - t0;
        flush(warm);
        t0 = td_now_ms();
        td_bn8_bwd(x, mask, dy, NULL, dx, NULL, rows, C, hw, g, m, var,
                   1e-5f, dg, db, part);
        q[3] = td_now_ms() - t0;
        if (r < 0)
            continue;
        for (int k = 0; k < 4; k++)
            t[k][r] = q[k];
        rf[r] = q[0] / q[2];
        rb[r] = q[1] / q[3];
    }
    printf("%-10s C%-3d %2dx%-2d fwd+relu  oneDNN %6.3f ms  cpu_bn8 %6.3f ms"
           "  ratio %.2f\n", s->model, C, H, H, td_median(t[0], rounds),
           td_median(t[2], rounds), td_median(rf, rounds));
    printf("%-10s C%-3d %2dx%-2d bwd+relu  oneDNN %6.3f ms  cpu_bn8 %6.3f ms"
           "  ratio %.2f   (oneDNN: %s)\n", s->model, C, H, H,
           td_median(t[1], rounds), td_median(t[3], rounds),
           td_median(rb, rounds),
           impl ? impl : "?");
    dnnl_memory_t mems[] = {X, Y, DY, DX, G, B, M, V, DG, DB, WS};
    for (size_t i = 0; i < sizeof mems / sizeof mems[0]; i++)
        dnnl_memory_destroy(mems[i]);
    dnnl_primitive_destroy(fp);
    dnnl_primitive_destroy(bp);
    dnnl_primitive_desc_destroy(fpd);
    dnnl_primitive_desc_destroy(bpd);
    free(x), free(y), free(dy), free(dx), free(v), free(part), free(mask);
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 15;
    int threads = argc > 2 ? atoi(argv[2]) : 2;
    int warm = argc > 3 && strcmp(argv[3], "warm") == 0;
    if (rounds < 1 || rounds > MAX_ROUNDS || threads < 1) {
        fprintf(stderr, "usage: bench_bn8 [rounds 1..%d] [threads] [warm]\n",
                MAX_ROUNDS);
        return 1;
    }
    if (!td_bn8_ok(8)) {
        printf("bench_bn8: no AVX2 + FMA here, nothing to compare\n");
        return 0;
    }
    flush_buf = calloc(1, FLUSH_BYTES);
    if (!flush_buf) {
        fprintf(stderr, "bench_bn8: out of memory\n");
        return 1;
    }
    omp_set_num_threads(threads);
    dnnl_engine_t e;
    dnnl_stream_t st;
    CK(dnnl_engine_create(&e, dnnl_cpu, 0));
    CK(dnnl_stream_create(&st, e, dnnl_stream_default_flags));
    printf("batch 128, %d threads, %d rounds after 1, caches %s; median ms "
           "per call, ratio = median of per-round oneDNN / cpu_bn8\n",
           threads, rounds, warm ? "warm" : "flushed before every call");
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        run_shape(&shapes[i], e, st, rounds, warm);
    dnnl_stream_destroy(st);
    dnnl_engine_destroy(e);
    free(flush_buf);
    return 0;
}
