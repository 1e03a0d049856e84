/* test_sim_backend.c - the CUDA backend under what only the simulated
 * device can arrange or observe (it links nowhere else): a job on cuda:1
 * of two devices never touches device 0; out of memory at create leaves
 * the device usable; a sticky fault in the middle of training fails the
 * step with the runtime's reason; host waits do not busy-wait a core
 * (issue 14 finding 6); an event made on another thread belongs to the
 * backend's GPU (finding 11); snapshot, restore and resume are bitwise
 * those of an uninterrupted run (issue 14).
 * Each test configures the simulator through the environment and
 * td_sim_reset, in its own process. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cuda/backend_cuda.h"
#include "base/error.h"
#include "base/rng.h"
#include "job/device.h"
#include "model/model.h"
#include "sim.h"
#include "tdtest.h"

static void sim_env(const char *name, const char *value)
{
    setenv(name, value, 1);
    ck_assert_int_eq(td_sim_reset(), 0);
}

typedef struct job {
    td_model *m;
    td_backend *be;
    uint8_t px[6 * 2 * 9 * 9];
    int32_t labels[6];
    td_batch b;
} job;

/* job_open's configuration beyond the defaults (set before calling it) */
static int g_warmup, g_adamw, g_deterministic, g_tf32;
static const char *g_model = "tiny-all"; /* tests/data/<g_model>.json */

static int job_open(job *j, const char *kind, char *err, size_t cap)
{
    char path[4096];
    const char *root = getenv("TD_SOURCE_ROOT");
    memset(j, 0, sizeof *j);
    snprintf(path, sizeof path, "%s/tests/data/%s.json", root ? root : ".",
             g_model);
    ck_assert_int_eq(td_model_load(NULL, path, (td_shape){2, 9, 9}, 5, &j->m,
                                   err, cap), 0);
    td_backend_config c;
    memset(&c, 0, sizeof c);
    c.batch = 6;
    c.threads = 1;
    c.dtype = TD_F32;
    for (int i = 0; i < 4; i++)
        c.mean[i] = 0.5f, c.std[i] = 0.25f;
    c.seed = 3;
    td_optim_defaults(&c.optim, g_adamw ? TD_OPT_ADAMW : TD_OPT_SGD);
    c.warmup = g_warmup;
    c.deterministic = g_deterministic;
    c.fp32_math = g_tf32 ? TD_MATH_TF32 : TD_MATH_FP32;
    for (size_t i = 0; i < sizeof j->px; i++)
        j->px[i] = (uint8_t)td_rng_below(9, 1, i, 256);
    for (int i = 0; i < 6; i++)
        j->labels[i] = i % 5;
    j->b = (td_batch){.data = j->px, .labels = j->labels, .n = 6, .h = 9,
                      .w = 9, .c = 2, .layout = TD_LAYOUT_NHWC};
    return td_backend_create(kind, j->m, &c, &j->be, err, cap);
}

static void job_close(job *j)
{
    td_backend_destroy(j->be);
    td_model_free(j->m);
}

/* Upload, step, statistics, an event and a snapshot: what a job does. */
static int job_steps(job *j, int steps)
{
    td_step_stats st;
    size_t n = td_backend_snapshot_floats(j->m, &j->be->cfg.optim);
    float *snap = malloc(n * sizeof *snap);
    td_event *ev = j->be->ops->event_create(j->be);
    int rc = ev ? 0 : TD_E_DEVICE;
    for (int s = 0; !rc && s < steps; s++) {
        rc = td_backend_upload(j->be, &j->b);
        if (!rc)
            rc = td_backend_train_step(j->be, 0.01f, s + 1);
        if (!rc)
            rc = td_backend_read_stats(j->be, &st);
        if (!rc)
            rc = j->be->ops->event_record(j->be, ev);
        if (!rc)
            rc = j->be->ops->event_sync(j->be, ev);
    }
    if (!rc)
        rc = td_backend_snapshot(j->be, snap, n);
    if (!rc)
        rc = td_backend_sync(j->be);
    if (ev)
        j->be->ops->event_destroy(j->be, ev);
    free(snap);
    return rc;
}

START_TEST(test_cuda1_job_never_touches_device0)
{
    char err[256] = "";
    job j;
    sim_env("TD_SIM_DEVICES", "2");
    td_cuda_register();
    ck_assert_msg(job_open(&j, "cuda:1", err, sizeof err) == 0, "%s", err);
    ck_assert_msg(job_steps(&j, 3) == 0, "%s", j.be->err);
    ck_assert_uint_gt(td_sim_used(1), 0);
    ck_assert_uint_eq(td_sim_used(0), 0);
    job_close(&j);
    /* not a call with device 0 current, not a launch, not a byte */
    ck_assert_int_gt(td_sim_calls(1), 0);
    ck_assert_int_gt(td_sim_launches(1), 0);
    ck_assert_int_eq(td_sim_calls(0), 0);
    ck_assert_int_eq(td_sim_launches(0), 0);
    ck_assert_uint_eq(td_sim_peak(0), 0);
}
END_TEST

static void *make_event(void *be)
{
    return ((td_backend *)be)->ops->event_create(be);
}

/* A td_event made on a thread whose current device is 0 (the trainer may
 * create its events anywhere) still belongs to the backend's GPU. */
START_TEST(test_cuda1_event_made_on_another_thread)
{
    char err[256] = "";
    job j;
    pthread_t th;
    void *ev = NULL;
    sim_env("TD_SIM_DEVICES", "2");
    td_cuda_register();
    ck_assert_msg(job_open(&j, "cuda:1", err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(pthread_create(&th, NULL, make_event, j.be), 0);
    pthread_join(th, &ev);
    ck_assert_ptr_nonnull(ev);
    ck_assert_int_eq(td_backend_upload(j.be, &j.b), 0);
    ck_assert_msg(j.be->ops->event_record(j.be, ev) == 0, "%s", j.be->err);
    ck_assert_msg(j.be->ops->event_sync(j.be, ev) == 0, "%s", j.be->err);
    j.be->ops->event_destroy(j.be, ev);
    ck_assert_uint_eq(td_sim_used(0), 0);
    job_close(&j);
}
END_TEST

START_TEST(test_oom_at_create_leaves_device_usable)
{
    char err[256] = "";
    job j;
    sim_env("TD_SIM_OOM_AT", "1"); /* the arena is the first allocation */
    td_cuda_register();
    ck_assert_int_eq(job_open(&j, "cuda:0", err, sizeof err), TD_E_DEVICE);
    ck_assert_ptr_null(j.be);
    ck_assert_msg(strstr(err, "device arena") && strstr(err, "MiB"), "%s",
                  err);
    /* out of memory is not sticky: the GPU is not marked unusable */
    ck_assert_int_eq(td_device_first_unusable(NULL, 0), -1);
    td_model_free(j.m);
    ck_assert_msg(job_open(&j, "cuda:0", err, sizeof err) == 0, "%s", err);
    ck_assert_msg(job_steps(&j, 2) == 0, "%s", j.be->err);
    job_close(&j);
    ck_assert_uint_eq(td_sim_used(0), 0);
}
END_TEST

START_TEST(test_sticky_fault_fails_the_step)
{
    char err[256] = "";
    job j;
    sim_env("TD_SIM_FAULT_KERNEL", "40"); /* inside the second step */
    td_cuda_register();
    ck_assert_msg(job_open(&j, "cuda:0", err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(td_device_first_unusable(NULL, 0), -1);
    /* an event recorded (and complete) before the fault */
    td_event *ev = j.be->ops->event_create(j.be);
    ck_assert_ptr_nonnull(ev);
    ck_assert_int_eq(j.be->ops->event_record(j.be, ev), 0);
    ck_assert_int_eq(j.be->ops->event_sync(j.be, ev), 0);
    ck_assert_int_eq(j.be->ops->event_query(j.be, ev), 1);
    int rc = job_steps(&j, 4);
    ck_assert_int_eq(rc, TD_E_DEVICE);
    ck_assert_msg(strstr(j.be->err, "illegal memory access"), "%s",
                  j.be->err);
    /* after it, a poller (the checkpoint writer) sees the error, not
     * "not ready" for ever, and no new event can be made */
    ck_assert_int_eq(j.be->ops->event_query(j.be, ev), TD_E_DEVICE);
    ck_assert_ptr_null(j.be->ops->event_create(j.be));
    ck_assert_msg(strstr(j.be->err, "cannot create an event"), "%s",
                  j.be->err);
    j.be->ops->event_destroy(j.be, ev);
    job_close(&j);
}
END_TEST

/* Finding 4: a sticky error is told apart from an ordinary one.  The job's
 * message says the GPU is unusable and how to find the kernel, the GPU is
 * marked (so `auto` passes it by and `cuda:0` is refused), and destroy
 * still gives back every stream, event, device allocation and pinned
 * buffer (td_sim_reset refuses while any is alive). */
START_TEST(test_sticky_fault_marks_the_gpu_unusable)
{
    char err[512] = "";
    job j;
    sim_env("TD_SIM_FAULT_KERNEL", "40");
    td_cuda_register();
    ck_assert_msg(job_open(&j, "cuda:0", err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(job_steps(&j, 4), TD_E_DEVICE);
    ck_assert_msg(strstr(j.be->err, "cudaErrorIllegalAddress, sticky") &&
                  strstr(j.be->err, "unusable until traind restarts") &&
                  strstr(j.be->err, "docs/cuda.md#sticky-errors"), "%s",
                  j.be->err);
    ck_assert_int_eq(td_device_first_unusable(err, sizeof err), 0);
    ck_assert_str_eq(err, j.be->err);
    job_close(&j);
    ck_assert_int_eq(td_sim_reset(), 0);
    td_device_info info;
    td_device_choice ch;
    ck_assert_int_eq(td_device_probe(&info), 0);
    ck_assert_int_eq(info.gpus[0].unusable, 1);
    ck_assert_int_eq(td_device_select("auto", &info, &ch, err, sizeof err), 0);
    ck_assert_int_eq(ch.kind, TD_DEVICE_CPU);
    ck_assert_int_eq(td_device_select("cuda:0", &info, &ch, err, sizeof err),
                     TD_E_DEVICE);
}
END_TEST

/* cudaErrorMpsClientTerminated is sticky too: driver_types.h (CUDA Runtime
 * API, "Data types"): "To continue using CUDA, the process must be
 * terminated and relaunched."  It used to fail the job as an ordinary
 * error, leaving the GPU marked usable for the next job. */
START_TEST(test_mps_client_terminated_is_sticky)
{
    char err[512] = "";
    job j;
    sim_env("TD_SIM_FAULT_KERNEL", "40");
    sim_env("TD_SIM_FAULT_ERROR", "810"); /* cudaErrorMpsClientTerminated */
    td_cuda_register();
    ck_assert_msg(job_open(&j, "cuda:0", err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(job_steps(&j, 4), TD_E_DEVICE);
    ck_assert_msg(strstr(j.be->err, "cudaErrorMpsClientTerminated, sticky") &&
                  strstr(j.be->err, "unusable until traind restarts"), "%s",
                  j.be->err);
    ck_assert_int_eq(td_device_first_unusable(NULL, 0), 0);
    job_close(&j);
}
END_TEST


START_TEST(test_host_waits_do_not_spin)
{
    char err[256] = "";
    job j;
    td_cuda_register();
    ck_assert_msg(job_open(&j, "cuda:0", err, sizeof err) == 0, "%s", err);
    long before = td_sim_spin_waits();
    ck_assert_msg(job_steps(&j, 3) == 0, "%s", j.be->err);
    ck_assert_msg(td_sim_spin_waits() == before, "%ld host waits busy-waited "
                  "a core", td_sim_spin_waits() - before);
    job_close(&j);
}
END_TEST

/* Every step's compute interval starts after its copy's interval ended,
 * however the streams are delayed (finding 11: the event the compute
 * stream waits for was recorded before the copy's end marker). */
START_TEST(test_step_times_order_under_jitter)
{
    enum { STEPS = TD_CUDA_TIMES_KEPT };
    char err[256] = "";
    job j;
    sim_env("TD_SIM_JITTER", "11");
    td_cuda_register();
    ck_assert_msg(job_open(&j, "cuda:0", err, sizeof err) == 0, "%s", err);
    for (int s = 0; s < STEPS; s++) {
        ck_assert_int_eq(td_backend_upload(j.be, &j.b), 0);
        ck_assert_int_eq(td_backend_train_step(j.be, 0.01f, s + 1), 0);
    }
    ck_assert_int_eq(td_backend_sync(j.be), 0);
    for (int s = 0; s < STEPS; s++) {
        td_cuda_step_times t;
        ck_assert_int_eq(td_backend_cuda_step_times(j.be, s, &t), 0);
        ck_assert_msg(t.compute_start >= t.copy_end, "step %d computed at "
                      "%.3f ms, before its copy ended at %.3f ms", s,
                      t.compute_start, t.copy_end);
    }
    job_close(&j);
}
END_TEST

/* The snapshot (parameters, optimizer slots, running statistics) right
 * after create, and the loss sums of `steps` steps after it. */
static float *after_create(int warmup, int steps, double *loss, long *launches)
{
    char err[256] = "";
    job j;
    g_warmup = warmup;
    g_adamw = 1;
    td_cuda_register();
    long before = td_sim_launches(0), finds = td_sim_dnn_finds();
    ck_assert_msg(job_open(&j, "cuda:0", err, sizeof err) == 0, "%s", err);
    /* kernels and library calls, not the algorithm searches */
    *launches = td_sim_launches(0) - before - (td_sim_dnn_finds() - finds);
    size_t n = td_backend_snapshot_floats(j.m, &j.be->cfg.optim);
    float *snap = malloc(n * sizeof *snap);
    ck_assert_int_eq(td_backend_snapshot(j.be, snap, n), 0);
    ck_assert_int_eq(td_backend_sync(j.be), 0);
    for (int s = 0; s < steps; s++) {
        td_step_stats st;
        ck_assert_int_eq(td_backend_upload(j.be, &j.b), 0);
        ck_assert_int_eq(td_backend_train_step(j.be, 0.01f, s + 1), 0);
        ck_assert_int_eq(td_backend_read_stats(j.be, &st), 0);
        ck_assert_int_eq(td_backend_sync(j.be), 0);
        loss[s] = st.loss_sum;
    }
    job_close(&j);
    return snap;
}

/* Finding 3: create runs a step (every kernel of it, so first-use loads
 * and allocations happen there), yet leaves no trace: the state after
 * create and the losses of the steps after it are bitwise those of a
 * create without it (AdamW slots and batch-norm running statistics
 * included). */
START_TEST(test_warmup_step_at_create_leaves_no_trace)
{
    enum { STEPS = 3 };
    double l0[STEPS], l1[STEPS];
    long k0, k1;
    char err[256];
    job j;
    ck_assert_int_eq(job_open(&j, "cpu", err, sizeof err), 0);
    size_t n = td_backend_snapshot_floats(j.m, &j.be->cfg.optim);
    job_close(&j);
    float *s0 = after_create(0, STEPS, l0, &k0);
    float *s1 = after_create(1, STEPS, l1, &k1);
    ck_assert_int_eq(k0, 0);
    ck_assert_msg(k1 > 10, "create launched %ld kernels: no warm-up step", k1);
    ck_assert_msg(memcmp(s0, s1, n * sizeof *s0) == 0, "the warm-up step "
                  "changed parameters, optimizer state or statistics");
    for (int s = 0; s < STEPS; s++)
        ck_assert_msg(l0[s] == l1[s], "step %d: loss %.9g after a warm-up, "
                      "%.9g without", s, l1[s], l0[s]);
    free(s0);
    free(s1);
}
END_TEST

/* Finding 3: the arena is not sized to fill the GPU; at least 512 MiB
 * stay free for what the libraries allocate at first use. */
START_TEST(test_headroom_is_kept_beside_the_arena)
{
    char err[256] = "", mb[32];
    job j;
    td_cuda_register();
    ck_assert_msg(job_open(&j, "cuda:0", err, sizeof err) == 0, "%s", err);
    size_t arena = td_backend_cuda_arena_bytes(j.be);
    job_close(&j);
    /* room for the arena and 100 MiB: refused, naming the headroom */
    snprintf(mb, sizeof mb, "%zu", (arena >> 20) + 101);
    sim_env("TD_SIM_MEM_MB", mb);
    ck_assert_int_eq(job_open(&j, "cuda:0", err, sizeof err), TD_E_DEVICE);
    ck_assert_msg(strstr(err, "device arena") && strstr(err, "headroom") &&
                  strstr(err, "try a smaller batch_size"), "%s", err);
    td_model_free(j.m);
    ck_assert_int_eq(td_device_first_unusable(NULL, 0), -1);
    /* and with 600 MiB beside it, it runs */
    snprintf(mb, sizeof mb, "%zu", (arena >> 20) + 601);
    sim_env("TD_SIM_MEM_MB", mb);
    ck_assert_msg(job_open(&j, "cuda:0", err, sizeof err) == 0, "%s", err);
    ck_assert_msg(job_steps(&j, 2) == 0, "%s", j.be->err);
    job_close(&j);
}
END_TEST

/* Finding 10: deterministic: true keeps to the convolution algorithms
 * cuDNN documents as deterministic (the simulated heuristics put the
 * non-deterministic backward-filter ALGO_3 first, as real ones often do);
 * without it the fastest is taken. */
START_TEST(test_deterministic_setting_is_honoured)
{
    char err[256] = "";
    job j;
    td_cuda_register();
    for (int det = 0; det < 2; det++) {
        g_deterministic = det;
        long before = td_sim_dnn_nondeterministic();
        ck_assert_msg(job_open(&j, "cuda:0", err, sizeof err) == 0, "%s",
                      err);
        ck_assert_msg(job_steps(&j, 2) == 0, "%s", j.be->err);
        job_close(&j);
        long ran = td_sim_dnn_nondeterministic() - before;
        if (det)
            ck_assert_msg(ran == 0, "%ld convolutions ran a "
                          "non-deterministic algorithm", ran);
        else
            ck_assert_int_gt(ran, 0);
    }
}
END_TEST

/* Finding 10: algorithms are measured (cudnnFind*Ex) once per shape and
 * direction: tiny-all's three convolutions make 8 searches (the first
 * one has no backward-data), a second job with the same layers none, and
 * the deterministic setting its own 8.  Training runs after the searches
 * (they overwrite outputs and gradients: the initial values come after). */
START_TEST(test_convolutions_measured_once_per_shape)
{
    char err[256] = "";
    job j;
    long want[3] = {8, 0, 8};
    td_cuda_register();
    for (int round = 0; round < 3; round++) {
        g_deterministic = round == 2;
        long before = td_sim_dnn_finds();
        ck_assert_msg(job_open(&j, "cuda:0", err, sizeof err) == 0, "%s",
                      err);
        ck_assert_int_eq(td_sim_dnn_finds() - before, want[round]);
        ck_assert_msg(job_steps(&j, 2) == 0, "%s", j.be->err);
        job_close(&j);
    }
}
END_TEST

/* The algorithm queries ask for every result cuDNN has: with tensor-op
 * math (TF32 here, cc 8.0) the list holds each algorithm twice, in
 * CUDNN_TENSOR_OP_MATH and CUDNN_DEFAULT_MATH (cuDNN Developer Guide,
 * cudnnFindConvolutionForwardAlgorithm: "The total number of resulting
 * algorithms can be queried through ... MaxCount"), more than
 * CUDNN_CONVOLUTION_*_ALGO_COUNT, which the backend used to ask for: a
 * fitting (or deterministic) algorithm past that count was never seen. */
START_TEST(test_algorithm_queries_see_every_result)
{
    char err[256] = "";
    job j;
    td_cuda_register();
    g_tf32 = 1;
    for (int det = 0; det < 2; det++) {
        g_deterministic = det;
        ck_assert_msg(job_open(&j, "cuda:0", err, sizeof err) == 0, "%s",
                      err);
        ck_assert_int_eq(td_sim_dnn_truncated(), 0);
        job_close(&j);
    }
}
END_TEST

/* Batch `salt` (pixels and labels) into j's buffers. */
static void job_fill(job *j, uint64_t salt)
{
    for (size_t i = 0; i < sizeof j->px; i++)
        j->px[i] = (uint8_t)td_rng_below(salt, 1, i, 256);
    for (int i = 0; i < 6; i++)
        j->labels[i] = (int32_t)td_rng_below(salt, 2, (uint64_t)i, 5);
}

/* Global steps from+1 .. to, each on its own batch (by t), every loss
 * read back into loss[t - 1]. */
static void job_span(job *j, int64_t from, int64_t to, double *loss)
{
    for (int64_t t = from + 1; t <= to; t++) {
        td_step_stats st;
        job_fill(j, 500 + (uint64_t)t);
        ck_assert_int_eq(td_backend_upload(j->be, &j->b), 0);
        ck_assert_msg(td_backend_train_step(j->be, 0.01f, t) == 0, "%s",
                      j->be->err);
        ck_assert_int_eq(td_backend_read_stats(j->be, &st), 0);
        ck_assert_int_eq(td_backend_sync(j->be), 0);
        loss[t - 1] = st.loss_sum;
    }
}

static double job_eval(job *j)
{
    td_step_stats st;
    job_fill(j, 77);
    ck_assert_int_eq(td_backend_upload(j->be, &j->b), 0);
    ck_assert_int_eq(td_backend_eval_step(j->be), 0);
    ck_assert_int_eq(td_backend_read_stats(j->be, &st), 0);
    ck_assert_int_eq(td_backend_sync(j->be), 0);
    return st.loss_sum;
}

/* Issue 14: snapshot, restore and resume on the simulated device, bitwise
 * against itself.  STEPS steps straight, or STEPS/2 steps, a snapshot, a
 * new backend restored from it and STEPS/2 more: the same parameters,
 * AdamW slots and running statistics bit for bit, the same loss at every
 * step of the second half and the same evaluation loss after.  The model
 * has batch norm (running statistics in the snapshot) and dropout at rate
 * 0.5 (masks drawn by the global step: a count of steps since create
 * would draw the first half's masks again after the restore). */
START_TEST(test_resume_is_bitwise)
{
    enum { STEPS = 6 };
    char err[256] = "";
    double straight[STEPS], resumed[STEPS];
    job j;
    g_model = "tiny-dropout";
    g_adamw = 1;
    g_deterministic = 1;
    td_cuda_register();
    ck_assert_msg(job_open(&j, "cuda:0", err, sizeof err) == 0, "%s", err);
    size_t n = td_backend_snapshot_floats(j.m, &j.be->cfg.optim);
    float *a = malloc(n * sizeof *a), *mid = malloc(n * sizeof *mid);
    float *b = malloc(n * sizeof *b);
    job_span(&j, 0, STEPS, straight);
    ck_assert_int_eq(td_backend_snapshot(j.be, a, n), 0);
    ck_assert_int_eq(td_backend_sync(j.be), 0);
    double eval_straight = job_eval(&j);
    job_close(&j);

    ck_assert_msg(job_open(&j, "cuda:0", err, sizeof err) == 0, "%s", err);
    job_span(&j, 0, STEPS / 2, resumed);
    ck_assert_int_eq(td_backend_snapshot(j.be, mid, n), 0);
    ck_assert_int_eq(td_backend_sync(j.be), 0);
    job_close(&j);
    ck_assert_msg(memcmp(mid, a, n * sizeof *a) != 0, "training moved "
                  "nothing in %d steps", STEPS - STEPS / 2);

    ck_assert_msg(job_open(&j, "cuda:0", err, sizeof err) == 0, "%s", err);
    ck_assert_msg(td_backend_restore(j.be, mid, n) == 0, "%s", j.be->err);
    job_span(&j, STEPS / 2, STEPS, resumed);
    ck_assert_int_eq(td_backend_snapshot(j.be, b, n), 0);
    ck_assert_int_eq(td_backend_sync(j.be), 0);
    double eval_resumed = job_eval(&j);
    job_close(&j);

    for (int s = 0; s < STEPS; s++)
        ck_assert_msg(straight[s] == resumed[s], "step %d: loss %.9g "
                      "resumed, %.9g straight", s + 1, resumed[s],
                      straight[s]);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(memcmp(&a[i], &b[i], sizeof *a) == 0, "snapshot float "
                      "%zu of %zu: %.9g resumed, %.9g straight", i, n,
                      b[i], a[i]);
    ck_assert_msg(eval_straight == eval_resumed, "evaluation loss %.9g "
                  "resumed, %.9g straight", eval_resumed, eval_straight);
    free(a);
    free(mid);
    free(b);
}
END_TEST

/* Whether err is an out-of-memory failure of a CUDA, cuBLAS or cuDNN
 * call, worded "cuda:0: FILE.c:LINE: CALL: REASON"; which kind in *kind
 * (0 kernel or runtime, 1 cuBLAS, 2 cuDNN). */
static int oom_message(const char *err, int *kind)
{
    if (strncmp(err, "cuda:0: cuda", 12) != 0 || !strstr(err, ".c:"))
        return 0;
    *kind = strstr(err, "cublas") ? 1 : strstr(err, "cudnn") ? 2 : 0;
    return strstr(err, "out of memory") != NULL ||
           strstr(err, "cuBLAS allocation failed") != NULL ||
           strstr(err, "CUDNN_STATUS_ALLOC_FAILED") != NULL;
}

/* The device after a job that failed without a sticky error: not marked,
 * nothing left allocated, and a new job trains on it. */
static void device_still_usable(void)
{
    char err[256] = "";
    double loss[2];
    job j;
    ck_assert_int_eq(td_device_first_unusable(NULL, 0), -1);
    ck_assert_uint_eq(td_sim_used(0), 0);
    ck_assert_msg(job_open(&j, "cuda:0", err, sizeof err) == 0, "%s", err);
    job_span(&j, 0, 2, loss);
    job_close(&j);
}

/* Out of memory at step N (issue 14): whichever kernel or library launch
 * of a training step runs out of memory (a module loaded lazily at its
 * first launch, a library allocating at first use; what the warm-up step
 * moves to create, and what can still happen later), that step fails with
 * TD_E_DEVICE and a message naming the call and the reason, not as a
 * sticky error; destroy gives everything back and the device trains the
 * next job.  Every launch of the step is tried in turn; kernels, cuBLAS
 * and cuDNN calls are all among them. */
START_TEST(test_oom_at_any_launch_of_a_step)
{
    char err[256] = "";
    double loss[2];
    int seen[3] = {0, 0, 0};
    job j;
    td_cuda_register();
    ck_assert_msg(job_open(&j, "cuda:0", err, sizeof err) == 0, "%s", err);
    long before = td_sim_launches(0);
    job_span(&j, 0, 1, loss);
    long per = td_sim_launches(0) - before;
    job_span(&j, 1, 2, loss);
    ck_assert_int_eq(td_sim_launches(0) - before, 2 * per); /* all alike */
    job_close(&j);
    ck_assert_int_gt(per, 10);
    for (long k = 1; k <= per; k++) {
        int kind = -1;
        ck_assert_msg(job_open(&j, "cuda:0", err, sizeof err) == 0, "%s",
                      err);
        job_fill(&j, 501);
        ck_assert_int_eq(td_backend_upload(j.be, &j.b), 0);
        td_sim_oom_launch_in(k);
        int rc = td_backend_train_step(j.be, 0.01f, 1);
        ck_assert_msg(rc == TD_E_DEVICE, "launch %ld of %ld failed, the step "
                      "returned %d", k, per, rc);
        ck_assert_msg(oom_message(j.be->err, &kind), "launch %ld: %s", k,
                      j.be->err);
        ck_assert_msg(!strstr(j.be->err, "sticky"), "%s", j.be->err);
        seen[kind]++;
        job_close(&j);
        ck_assert_int_eq(td_device_first_unusable(NULL, 0), -1);
        ck_assert_uint_eq(td_sim_used(0), 0);
    }
    ck_assert_msg(seen[0] && seen[1] && seen[2], "kernels %d, cuBLAS %d, "
                  "cuDNN %d failures", seen[0], seen[1], seen[2]);
    device_still_usable();
}
END_TEST

/* Out of memory at create: in the first convolution search (cudnnFind
 * runs every algorithm on the arena), and in the warm-up step's first
 * kernel (finding 3: where lazy loading fails when it fails).  Create
 * fails, names the call, leaves nothing behind, and the device trains the
 * next job. */
START_TEST(test_oom_at_a_launch_fails_create)
{
    char err[256] = "";
    int kind = -1;
    job j;
    td_cuda_register();
    long finds = td_sim_dnn_finds();
    td_sim_oom_launch_in(1);
    ck_assert_int_eq(job_open(&j, "cuda:0", err, sizeof err), TD_E_DEVICE);
    ck_assert_ptr_null(j.be);
    ck_assert_msg(oom_message(err, &kind) && kind == 2 &&
                  strstr(err, "cudnnFindConvolution"), "%s", err);
    ck_assert_int_eq(td_sim_dnn_finds(), finds); /* it never ran */
    td_model_free(j.m);
    ck_assert_int_eq(td_device_first_unusable(NULL, 0), -1);
    ck_assert_uint_eq(td_sim_used(0), 0);

    /* tiny-all's 8 searches, then the warm-up step's first launch (the
     * cast + normalise kernel) */
    g_warmup = 1;
    td_sim_oom_launch_in(8 + 1);
    ck_assert_int_eq(job_open(&j, "cuda:0", err, sizeof err), TD_E_DEVICE);
    ck_assert_int_eq(td_sim_dnn_finds() - finds, 8);
    ck_assert_msg(oom_message(err, &kind) && kind == 0 &&
                  strstr(err, "td__k_normalize"), "%s", err);
    td_model_free(j.m);
    device_still_usable();
}
END_TEST

/* An ordinary (not sticky) failure of a runtime call: page-locking a
 * range twice.  The message names the call and the reason, the GPU is
 * not marked, and training goes on. */
START_TEST(test_host_register_failure_is_reported)
{
    char err[256] = "";
    double loss[2];
    static float buf[1024];
    job j;
    td_cuda_register();
    ck_assert_msg(job_open(&j, "cuda:0", err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(j.be->ops->host_register(j.be, buf, sizeof buf), 0);
    ck_assert_int_eq(td_sim_is_pinned(buf, sizeof buf), 1);
    ck_assert_int_eq(j.be->ops->host_register(j.be, buf, sizeof buf),
                     TD_E_DEVICE);
    ck_assert_msg(strncmp(j.be->err, "cuda:0: cuda.c:", 15) == 0 &&
                  strstr(j.be->err, "cudaHostRegister") &&
                  !strstr(j.be->err, "sticky"), "%s", j.be->err);
    ck_assert_int_eq(td_device_first_unusable(NULL, 0), -1);
    job_span(&j, 0, 2, loss);
    j.be->ops->host_unregister(j.be, buf);
    ck_assert_int_eq(td_sim_is_pinned(buf, sizeof buf), 0);
    j.be->ops->host_unregister(j.be, buf); /* not registered: ignored */
    job_close(&j);
}
END_TEST

/* What the backend refuses, each with a reason: a configuration it
 * cannot run (negative device index, an unknown compute type), an
 * evaluation with nothing uploaded, a tensor read or a parameter write of
 * the wrong size or index.  And write_param puts exactly the given values
 * in place. */
START_TEST(test_refusals_and_write_param)
{
    char err[256] = "";
    job j;
    td_cuda_register();
    ck_assert_msg(job_open(&j, "cuda:0", err, sizeof err) == 0, "%s", err);
    td_backend_config c = j.be->cfg;
    td_backend *be = NULL;
    ck_assert_int_eq(td_backend_cuda_create(j.m, &c, -1, &be, err,
                                            sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "index must be >= 0"), "%s", err);
    /* (frozen parameters run since issue 16: sim_freeze) */
    c.dtype = (enum td_dtype)7; /* bf16 and fp16 run: sim_lowp */
    ck_assert_int_eq(td_backend_cuda_create(j.m, &c, 0, &be, err, sizeof err),
                     -EINVAL);
    ck_assert_msg(strstr(err, "dtype 7"), "%s", err);
    ck_assert_ptr_null(be);
    c.dtype = TD_F32;

    ck_assert_int_eq(td_backend_eval_step(j.be), -EINVAL);
    ck_assert_msg(strstr(j.be->err, "nothing uploaded"), "%s", j.be->err);
    size_t n = j.m->params[0].count;
    float *v = malloc((n + 1) * sizeof *v), *back = malloc(n * sizeof *back);
    ck_assert_int_eq(j.be->ops->read_tensor(j.be, TD_T_PARAM, 0, back, n + 1),
                     -EINVAL);
    ck_assert_msg(strstr(j.be->err, "floats asked"), "%s", j.be->err);
    ck_assert_int_eq(j.be->ops->read_tensor(j.be, TD_T_VALUE, j.m->nlayers,
                                            back, n), -EINVAL);
    for (size_t i = 0; i < n; i++)
        v[i] = (float)i * 0.125f - 1.0f;
    ck_assert_int_eq(j.be->ops->write_param(j.be, 0, v, n + 1), -EINVAL);
    ck_assert_int_eq(j.be->ops->write_param(j.be, j.m->nparams, v, n),
                     -EINVAL);
    ck_assert_int_eq(j.be->ops->write_param(j.be, -1, v, n), -EINVAL);
    ck_assert_int_eq(j.be->ops->write_param(j.be, 0, v, n), 0);
    ck_assert_int_eq(j.be->ops->read_tensor(j.be, TD_T_PARAM, 0, back, n), 0);
    ck_assert_int_eq(memcmp(v, back, n * sizeof *v), 0);
    /* and training starts from them */
    ck_assert_int_eq(job_steps(&j, 1), 0);
    ck_assert_int_eq(j.be->ops->read_tensor(j.be, TD_T_PARAM, 0, back, n), 0);
    ck_assert_int_ne(memcmp(v, back, n * sizeof *v), 0);
    free(v);
    free(back);
    job_close(&j);
}
END_TEST

/* Finding 10's refusal: with deterministic: true and too little free
 * memory for any deterministic algorithm's workspace, create fails naming
 * the layer and the direction (the simulated backward-filter ALGO_1, the
 * only deterministic one, needs C x R x S x P x Q floats: 0.9 MiB for
 * fmnist-cnn's conv2 at 28x28; one algorithm may take free/8, 0.5 MiB of
 * a 4 MiB device).  A refusal, not a failure of the GPU. */
START_TEST(test_no_deterministic_algorithm_fits)
{
    char err[256] = "", dir[4096];
    td_model *m = NULL;
    td_backend *be = NULL;
    const char *root = getenv("TD_SOURCE_ROOT");
    snprintf(dir, sizeof dir, "%s/config/models", root ? root : ".");
    ck_assert_int_eq(td_model_load(dir, "fmnist-cnn", (td_shape){1, 28, 28},
                                   10, &m, err, sizeof err), 0);
    sim_env("TD_SIM_MEM_MB", "4");
    td_cuda_register();
    td_backend_config c;
    memset(&c, 0, sizeof c);
    c.batch = 8;
    c.dtype = TD_F32;
    for (int i = 0; i < 4; i++)
        c.mean[i] = 0.5f, c.std[i] = 0.25f;
    td_optim_defaults(&c.optim, TD_OPT_SGD);
    c.deterministic = 1;
    ck_assert_int_eq(td_backend_create("cuda:0", m, &c, &be, err, sizeof err),
                     TD_E_DEVICE);
    ck_assert_ptr_null(be);
    ck_assert_msg(strstr(err, "layer conv2: no deterministic backward-filter "
                         "convolution algorithm fits a workspace of 0.5 MiB"),
                  "%s", err);
    ck_assert_int_eq(td_device_first_unusable(NULL, 0), -1);
    ck_assert_uint_eq(td_sim_used(0), 0);
    td_model_free(m);
}
END_TEST

static Suite *sim_backend_suite(void)
{
    Suite *s = suite_create("sim_backend");
    TCase *tc = tcase_create("backend");
    tcase_add_test(tc, test_cuda1_job_never_touches_device0);
    tcase_add_test(tc, test_cuda1_event_made_on_another_thread);
    tcase_add_test(tc, test_oom_at_create_leaves_device_usable);
    tcase_add_test(tc, test_sticky_fault_fails_the_step);
    tcase_add_test(tc, test_sticky_fault_marks_the_gpu_unusable);
    tcase_add_test(tc, test_mps_client_terminated_is_sticky);
    tcase_add_test(tc, test_host_waits_do_not_spin);
    tcase_add_test(tc, test_warmup_step_at_create_leaves_no_trace);
    tcase_add_test(tc, test_headroom_is_kept_beside_the_arena);
    tcase_add_test(tc, test_deterministic_setting_is_honoured);
    tcase_add_test(tc, test_convolutions_measured_once_per_shape);
    tcase_add_test(tc, test_algorithm_queries_see_every_result);
    tcase_add_test(tc, test_step_times_order_under_jitter);
    tcase_add_test(tc, test_resume_is_bitwise);
    tcase_add_test(tc, test_oom_at_any_launch_of_a_step);
    tcase_add_test(tc, test_oom_at_a_launch_fails_create);
    tcase_add_test(tc, test_host_register_failure_is_reported);
    tcase_add_test(tc, test_refusals_and_write_param);
    tcase_add_test(tc, test_no_deterministic_algorithm_fits);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(sim_backend_suite)
