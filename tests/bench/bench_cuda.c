/* bench_cuda.c - training speed of the CUDA backend on synthetic batches:
 * samples/s (wall, after 20 warm-up steps), device compute ms per step
 * (median of event pairs, read two steps behind, never synchronising),
 * device idle share, how often a copy overlapped the previous step, and the
 * arena size, for fmnist-cnn (1x28x28) and resnet20 (3x32x32) at batch 128
 * and 256.  Prints figures, never fails on speed; exits 77 (SKIP) without a
 * GPU.  Run: meson test -C build --benchmark cuda -v */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cuda/backend_cuda.h"
#include "base/clock.h"
#include "base/error.h"
#include "job/device.h"
#include "model/model.h"
#include "td_config.h"

#if TD_HAVE_CUDA

enum { WARMUP = 20, STEPS = 200, NBUF = 4 };

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int run(const char *model, td_shape in, int batch)
{
    char dir[4096], err[256] = "";
    const char *root = getenv("TD_SOURCE_ROOT");
    snprintf(dir, sizeof dir, "%s/config/models", root ? root : ".");
    td_model *m = NULL;
    td_backend *be = NULL;
    if (td_model_load(dir, model, in, 10, &m, err, sizeof err)) {
        printf("%s: %s\n", model, err);
        return 1;
    }
    td_backend_config c;
    memset(&c, 0, sizeof c);
    c.batch = batch;
    for (int i = 0; i < 4; i++)
        c.mean[i] = 0.5f, c.std[i] = 0.25f;
    c.seed = 1;
    td_optim_defaults(&c.optim, TD_OPT_SGD);
    c.optim.lr = 0.05;
    if (td_backend_create("cuda:0", m, &c, &be, err, sizeof err)) {
        printf("%s: %s\n", model, err);
        td_model_free(m);
        return 1;
    }
    td_slot_allocator pin = td_cuda_pinned_allocator(0);
    size_t per = (size_t)in.c * in.h * in.w * (size_t)batch;
    uint8_t *px = pin.alloc(pin.user, per * NBUF);
    int32_t *lab = pin.alloc(pin.user, sizeof *lab * (size_t)batch);
    for (size_t i = 0; px && i < per * NBUF; i++)
        px[i] = (uint8_t)(i * 2654435761u >> 24);
    for (int i = 0; lab && i < batch; i++)
        lab[i] = i % 10;
    double *comp = calloc(STEPS, sizeof *comp), busy = 0;
    int overlapped = 0, rc = 0;
    int64_t t0 = 0;
    double dev0 = 0, dev1 = 0;
    for (int s = 0; px && lab && s < WARMUP + STEPS && !rc; s++) {
        td_batch b = {.data = px + per * (size_t)(s % NBUF), .labels = lab,
                      .n = batch, .h = in.h, .w = in.w, .c = in.c,
                      .layout = TD_LAYOUT_NHWC};
        if (s == WARMUP) {
            td_backend_sync(be);
            t0 = td_now_ns();
        }
        if ((rc = td_backend_upload(be, &b)) ||
            (rc = td_backend_train_step(be, 0.05f, s + 1)))
            break;
        td_cuda_step_times t, prev;
        /* two steps behind: usually complete, never waited for */
        if (s >= WARMUP + 2 &&
            td_backend_cuda_step_times(be, s - 2, &t) == 0 &&
            td_backend_cuda_step_times(be, s - 3, &prev) == 0) {
            comp[s - WARMUP - 2] = t.compute_end - t.compute_start;
            busy += t.compute_end - t.compute_start;
            overlapped += t.copy_start < prev.compute_end;
            if (dev0 == 0)
                dev0 = t.compute_start;
            dev1 = t.compute_end;
        }
    }
    if (!rc)
        rc = td_backend_sync(be);
    double wall = (double)(td_now_ns() - t0) / 1e9;
    if (rc || !px || !lab) {
        printf("%s batch %d: %s\n", model, batch,
               rc ? be->err : "cannot pin host memory");
    } else {
        int n = 0;
        for (int i = 0; i < STEPS; i++)
            if (comp[i] > 0)
                comp[n++] = comp[i];
        qsort(comp, (size_t)n, sizeof *comp, cmp_d);
        printf("%-10s batch %4d: %8.0f samples/s, compute %.3f ms/step "
               "(median of %d), device idle %.1f%% (lower bound), copy "
               "overlapped the previous step in %d of %d, arena %.1f MiB\n",
               model, batch, (double)STEPS * batch / wall,
               n ? comp[n / 2] : 0.0, n,
               dev1 > dev0 ? 100.0 * (1 - busy / (dev1 - dev0)) : 0.0,
               overlapped, n, td_backend_cuda_arena_bytes(be) / 1048576.0);
    }
    free(comp);
    pin.free(pin.user, px);
    pin.free(pin.user, lab);
    td_backend_destroy(be);
    td_model_free(m);
    return rc ? 1 : 0;
}

int main(void)
{
    td_device_info info;
    td_device_probe(&info);
    if (info.cuda_count == 0) {
        printf("SKIP: bench_cuda needs a CUDA device: %s\n", info.reason);
        return 77;
    }
    printf("%s, CUDA runtime %d, %d warm-up + %d measured steps\n",
           info.gpus[0].name, info.cuda_runtime, WARMUP, STEPS);
    int bad = 0;
    for (int b = 128; b <= 256; b *= 2) {
        bad |= run("fmnist-cnn", (td_shape){1, 28, 28}, b);
        bad |= run("resnet20", (td_shape){3, 32, 32}, b);
    }
    return bad;
}

#else

int main(void)
{
    printf("SKIP: bench_cuda needs a CUDA device: this build has no CUDA "
           "backend\n");
    return 77;
}

#endif
