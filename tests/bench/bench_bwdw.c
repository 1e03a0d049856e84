/* bench_bwdw.c - cpu_bwdw.c's backward weights alone on resnet20's
 * convolution shapes at batch 128: milliseconds per call (median and
 * range of 15 calls after 3 warm-up calls) on the path TD_BWDW_ISA
 * chooses (default: AMX where the process can use it), in the layout of
 * argv[1] ("nhwc" or "nchw16c", default nchw16c: the AVX512_BF16 plan's),
 * with the OpenMP threads of OMP_NUM_THREADS.  Compare with
 * ONEDNN_VERBOSE=1's per-call times of oneDNN's backward weights in a
 * bench_train run (docs/compute.md).  Prints figures, never fails.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <omp.h>

#include "backend/cpu/cpu_bwdw.h"
#include "benchutil.h"
#include "bf16.h"

typedef struct shape {
    const char *name;
    int h, ic, oc, k, s, p;
} shape;

static const shape shapes[] = {
    {"16->16 3x3 32x32", 32, 16, 16, 3, 1, 1},
    {"16->32 3x3 s2 32x32", 32, 16, 32, 3, 2, 1},
    {"16->32 1x1 s2 32x32", 32, 16, 32, 1, 2, 0},
    {"32->32 3x3 16x16", 16, 32, 32, 3, 1, 1},
    {"32->64 3x3 s2 16x16", 16, 32, 64, 3, 2, 1},
    {"32->64 1x1 s2 16x16", 16, 32, 64, 1, 2, 0},
    {"64->64 3x3 8x8", 8, 64, 64, 3, 1, 1},
};

int main(int argc, char **argv)
{
    enum { N = 128, WARM = 3, RUNS = 15 };
    td_bwdw_layout ly = argc > 1 && strcmp(argv[1], "nhwc") == 0
                            ? TD_BWDW_NHWC : TD_BWDW_NCHW16C;
    const char *isa = td_bwdw_isa();
    if (!isa) {
        printf("bench_bwdw: no cpu_bwdw path in this process\n");
        return 0;
    }
    printf("bench_bwdw: path %s, layout %s, %d threads, batch %d\n", isa,
           ly == TD_BWDW_NHWC ? "nhwc" : "nChw16c", omp_get_max_threads(), N);
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const shape *s = &shapes[i];
        int o = (s->h + 2 * s->p - s->k) / s->s + 1;
        size_t nx = (size_t)N * s->h * s->h * s->ic;
        size_t ny = (size_t)N * o * o * s->oc;
        td_bf16 *x = malloc(nx * sizeof *x), *dy = malloc(ny * sizeof *dy);
        float *dw = malloc((size_t)s->oc * s->ic * s->k * s->k * sizeof *dw);
        for (size_t j = 0; j < nx; j++)
            x[j] = td_bf16_from_f32((float)((j * 2654435761u) >> 20) / 4096);
        for (size_t j = 0; j < ny; j++)
            dy[j] = td_bf16_from_f32((float)((j * 40503u) >> 6) / 1024 - 0.5f);
        td_bwdw *p = td_bwdw_create_layout(N, s->h, s->h, s->ic, s->oc, s->k,
                                           s->s, s->p, omp_get_max_threads(),
                                           ly);
        if (!p) {
            printf("%-22s refused\n", s->name);
            continue;
        }
        double t[RUNS];
        for (int r = 0; r < WARM + RUNS; r++) {
            double t0 = td_now_ms();
            td_bwdw_run(p, x, dy, dw, NULL);
            if (r >= WARM)
                t[r - WARM] = td_now_ms() - t0;
        }
        qsort(t, RUNS, sizeof t[0], td_cmp_double);
        printf("%-22s %7.3f ms (%.3f..%.3f)\n", s->name, t[RUNS / 2], t[0],
               t[RUNS - 1]);
        td_bwdw_destroy(p);
        free(x), free(dy), free(dw);
    }
    return 0;
}
