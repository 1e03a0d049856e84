/* test_sim_memplan.c - the CUDA backend's activations placed by the memory
 * plan (issue 15), on the simulated device.
 *
 * What is checked, for fmnist-cnn, resnet20 (3x16x16: three stages,
 * strided shortcuts, residual adds), tiny-dropout (dropout at rate 0.5),
 * tiny-all (every layer kind, both gradient-summing cases) and tiny-all
 * with every batch norm kept in inference mode (bn_eval):
 *   - the same training steps (2 or 3) on two backends, one with the plan
 *     (TD_MEM_PLANNED: buffers share memory, ReLU in place) and one with a
 *     buffer per layer (TD_MEM_PER_LAYER), give BITWISE the same losses
 *     and counters at every step, parameter gradients, parameters,
 *     optimizer state and running statistics (the snapshot), and the same
 *     evaluation (a partial batch: counters and logits);
 *   - every value and gradient the planned backend still lets read_tensor
 *     read after a step is bitwise the per-layer one (the others are
 *     refused with a reason; some must be readable, some refused);
 *   - the arena is exactly the plan's bill (total less headroom) for both
 *     layouts, the planned one smaller by exactly the difference of the
 *     plans' activation figures, and those figures are td_memplan_build's
 *     for the model, batch and element size (an independent build);
 *   - the backend points every value and gradient at the plan's offset,
 *     and in that placement no two buffers live at the same time share a
 *     byte (aliases: only a ReLU on the buffers of the one layer it reads);
 *   - the race detector (TD_SIM_RACE=strict, sim_env) reports nothing;
 *   - the simulator allows cuDNN's documented in-place activations and
 *     refuses any other overlap of an output with an operand.
 * No tolerance anywhere: the two layouts run the same kernels and library
 * calls in the same order on the same values, only at other addresses.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "backend/backend.h"
#include "backend/cuda/backend_cuda.h"
#include "backend/memplan.h"
#include "base/error.h"
#include "base/rng.h"
#include "model/model.h"
#include "ref_models.h"
#include "sim.h"
#include "tdtest.h"

typedef struct mcase {
    const char *model;
    td_shape in;
    int classes, batch, steps;
    enum td_optim_type opt;
    int bn_eval;             /* every batch norm in inference mode */
} mcase;

static td_backend_config config(const mcase *k, enum td_mem_layout lay,
                                const uint8_t *bn)
{
    td_backend_config c;
    memset(&c, 0, sizeof c);
    c.batch = k->batch;
    c.threads = 1;
    c.dtype = TD_F32;
    for (int i = 0; i < 4; i++)
        c.mean[i] = 0.45f + 0.02f * (float)i, c.std[i] = 0.25f;
    c.seed = 23;
    td_optim_defaults(&c.optim, k->opt);
    c.optim.lr = k->opt == TD_OPT_SGD ? 0.01 : 1e-3;
    c.optim.weight_decay = k->opt == TD_OPT_SGD ? 5e-4 : 0.01;
    c.label_smoothing = k->opt == TD_OPT_ADAMW ? 0.1f : 0.0f;
    c.bn_eval = bn;
    c.mem_layout = lay;
    return c;
}

typedef struct batch {
    uint8_t *px;
    int32_t *labels;
    td_batch b;
} batch;

static void batch_fill(batch *b, const td_model *m, int cap, int n,
                       uint64_t salt)
{
    td_shape in = m->layers[0].out;
    size_t per = (size_t)in.c * in.h * in.w;
    if (!b->px) {
        b->px = malloc(per * (size_t)cap);
        b->labels = malloc(sizeof *b->labels * (size_t)cap);
        ck_assert(b->px && b->labels);
    }
    for (size_t i = 0; i < per * (size_t)n; i++)
        b->px[i] = (uint8_t)td_rng_below(salt, 1, i, 256);
    for (int i = 0; i < n; i++)
        b->labels[i] = (int32_t)td_rng_below(salt, 2, (uint64_t)i,
                                             (uint64_t)m->classes);
    b->b = (td_batch){.data = b->px, .labels = b->labels, .n = n, .h = in.h,
                      .w = in.w, .c = in.c, .layout = TD_LAYOUT_NHWC};
}

static void stats_same(td_backend *a, td_backend *b, const char *what)
{
    td_step_stats sa, sb;
    memset(&sa, 0, sizeof sa);
    memset(&sb, 0, sizeof sb);
    ck_assert_int_eq(td_backend_read_stats(a, &sa), 0);
    ck_assert_int_eq(td_backend_read_stats(b, &sb), 0);
    ck_assert_int_eq(td_backend_sync(a), 0);
    ck_assert_int_eq(td_backend_sync(b), 0);
    ck_assert_int_gt(sa.samples, 0);
    ck_assert_msg(memcmp(&sa.loss_sum, &sb.loss_sum, sizeof sa.loss_sum) ==
                      0 && sa.correct == sb.correct &&
                      sa.samples == sb.samples,
                  "%s: planned loss %.17g correct %lld of %lld, per layer "
                  "%.17g %lld of %lld", what, sa.loss_sum,
                  (long long)sa.correct, (long long)sa.samples, sb.loss_sum,
                  (long long)sb.correct, (long long)sb.samples);
}

static void floats_same(const float *a, const float *b, size_t n,
                        const char *what)
{
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(memcmp(&a[i], &b[i], sizeof *a) == 0, "%s[%zu]: "
                      "planned %.9g, per layer %.9g", what, i, a[i], b[i]);
}

/* Parameter gradients and the snapshot (parameters, optimizer slots,
 * running statistics), bitwise. */
static void state_same(td_backend *a, td_backend *b)
{
    const td_model *m = a->model;
    for (int q = 0; q < m->nparams; q++) {
        size_t n = m->params[q].count;
        float *ga = malloc(n * sizeof *ga), *gb = malloc(n * sizeof *gb);
        ck_assert_int_eq(a->ops->read_tensor(a, TD_T_PARAM_GRAD, q, ga, n),
                         0);
        ck_assert_int_eq(b->ops->read_tensor(b, TD_T_PARAM_GRAD, q, gb, n),
                         0);
        floats_same(ga, gb, n, m->params[q].name);
        free(ga);
        free(gb);
    }
    size_t n = td_backend_snapshot_floats(m, &a->cfg.optim);
    float *sa = malloc(n * sizeof *sa), *sb = malloc(n * sizeof *sb);
    ck_assert_int_eq(td_backend_snapshot(a, sa, n), 0);
    ck_assert_int_eq(td_backend_snapshot(b, sb, n), 0);
    ck_assert_int_eq(td_backend_sync(a), 0);
    ck_assert_int_eq(td_backend_sync(b), 0);
    floats_same(sa, sb, n, "snapshot");
    free(sa);
    free(sb);
}

/* Every value (and gradient, after training) the planned backend still
 * lets read is the per-layer one; returns how many it refused. */
static int tensors_same(td_backend *a, td_backend *b, int nb, int train,
                        int *read)
{
    const td_model *m = a->model;
    int refused = 0;
    for (int L = 0; L < m->nlayers; L++)
        for (int grad = 0; grad <= train; grad++) {
            const td_shape s = m->layers[L].out;
            size_t n = (size_t)nb * s.c * s.h * s.w;
            enum td_tensor_kind k = grad ? TD_T_GRAD : TD_T_VALUE;
            float *va = malloc(n * sizeof *va), *vb = malloc(n * sizeof *vb);
            if (a->ops->read_tensor(a, k, L, va, n) != 0) {
                ck_assert_msg(strstr(a->err, "not kept") ||
                                  strstr(a->err, "no gradient"), "%s",
                              a->err);
                refused++;
            } else {
                char what[96];
                snprintf(what, sizeof what, "%s of %s", grad ? "gradient"
                         : "value", m->layers[L].name);
                ck_assert_int_eq(b->ops->read_tensor(b, k, L, vb, n), 0);
                floats_same(va, vb, n, what);
                (*read)++;
            }
            free(va);
            free(vb);
        }
    return refused;
}

/* The placement the backend used: offsets as the plan says, and no two
 * buffers live at the same time sharing a byte. */
static void placement_ok(td_backend *be, const td_memplan *p)
{
    ck_assert_uint_eq(p->activations % 256, 0);
    const td_model *m = be->model;
    int pairs = 0;
    for (int i = 0; i < p->nbufs; i++) {
        const td_membuf *a = &p->bufs[i];
        if (a->kind != TD_MB_MASK)
            ck_assert_int_eq(td_backend_cuda_act_offset(be, a->kind ==
                             TD_MB_Y ? TD_T_VALUE : TD_T_GRAD, a->layer),
                             (long long)a->offset);
        ck_assert_uint_le(a->offset + a->bytes,
                          p->activations - p->bn_saves);
        if (a->alias >= 0) {
            const td_layer *l = &m->layers[a->layer];
            ck_assert_int_eq(l->kind, TD_L_RELU);
            ck_assert_int_eq(m->layers[l->in[0]].consumers, 1);
            ck_assert_uint_eq(a->offset, p->bufs[a->alias].offset);
            continue;
        }
        for (int j = i + 1; j < p->nbufs; j++) {
            const td_membuf *b = &p->bufs[j];
            if (b->alias >= 0 || !td_membuf_overlap_in_time(a, b))
                continue;
            pairs++;
            ck_assert_msg(a->offset + a->bytes <= b->offset ||
                              b->offset + b->bytes <= a->offset,
                          "buffers %d (kind %d of %s) and %d (kind %d of "
                          "%s) are live together and share memory", i,
                          a->kind, m->layers[a->layer].name, j, b->kind,
                          m->layers[b->layer].name);
        }
    }
    ck_assert_int_gt(pairs, 0);
}

static void run_case(const mcase *k)
{
    char err[512] = "";
    td_model *m = ref_load_model(k->model, k->in, k->classes);
    uint8_t *bn = calloc((size_t)m->nlayers, 1);
    int nbn = 0;
    for (int L = 0; k->bn_eval && L < m->nlayers; L++)
        if (m->layers[L].kind == TD_L_BN)
            bn[L] = 1, nbn++;
    ck_assert_int_eq(nbn > 0, k->bn_eval != 0);
    td_backend *be[2] = {NULL, NULL}; /* planned, per layer */
    for (int i = 0; i < 2; i++) {
        td_backend_config c = config(k, i ? TD_MEM_PER_LAYER : TD_MEM_PLANNED,
                                     k->bn_eval ? bn : NULL);
        ck_assert_msg(td_backend_create("cuda:0", m, &c, &be[i], err,
                                        sizeof err) == 0, "%s: %s",
                      k->model, err);
    }
    /* the arena is the bill, both ways, and smaller by the plans' figures */
    const td_memplan *pp = td_backend_cuda_plan(be[0]);
    const td_memplan *pl = td_backend_cuda_plan(be[1]);
    ck_assert_ptr_nonnull(pp);
    ck_assert_ptr_nonnull(pl);
    size_t arena_p = td_backend_cuda_arena_bytes(be[0]);
    size_t arena_l = td_backend_cuda_arena_bytes(be[1]);
    ck_assert_uint_eq(arena_p, pp->total - pp->headroom);
    ck_assert_uint_eq(arena_l, pl->total - pl->headroom);
    ck_assert_uint_eq(arena_l - arena_p, pl->activations - pp->activations);
    td_memplan_config mc = {.batch = k->batch, .act_bytes = 4,
                            .optim_slots = td_optim_slots(&be[0]->cfg.optim),
                            .reuse = 1, .nbuf = 2};
    td_memplan ind;
    ck_assert_int_eq(td_memplan_build(m, &mc, &ind, err, sizeof err), 0);
    ck_assert_uint_eq(pp->activations, ind.activations);
    ck_assert_uint_lt(pp->activations, pl->activations);
    td_memplan_free(&ind);
    mc.reuse = 0;
    ck_assert_int_eq(td_memplan_build(m, &mc, &ind, err, sizeof err), 0);
    ck_assert_uint_eq(pl->activations, ind.activations);
    td_memplan_free(&ind);
    printf("%s batch %d: activations %zu bytes planned, %zu per layer "
           "(%.0f%%); arena %zu and %zu bytes\n", k->model, k->batch,
           pp->activations, pl->activations,
           100.0 * (double)pp->activations / (double)pl->activations,
           arena_p, arena_l);
    placement_ok(be[0], pp);
    int inplace = 0;
    for (int i = 0; i < pp->nbufs; i++)
        inplace += pp->bufs[i].alias >= 0 && pp->bufs[i].kind == TD_MB_Y;
    printf("%s: %d ReLUs in place\n", k->model, inplace);
    ck_assert_int_gt(inplace, 0); /* every case has a conv/bn -> relu */

    batch b = {0};
    int refused = 0, read = 0;
    for (int s = 0; s < k->steps; s++) {
        char what[64];
        batch_fill(&b, m, k->batch, k->batch, 300 + (uint64_t)s);
        for (int i = 0; i < 2; i++) {
            ck_assert_msg(td_backend_upload(be[i], &b.b) == 0, "%s",
                          be[i]->err);
            ck_assert_msg(td_backend_train_step(be[i], (float)
                                                be[i]->cfg.optim.lr, s + 1)
                          == 0, "%s", be[i]->err);
        }
        snprintf(what, sizeof what, "%s step %d", k->model, s + 1);
        stats_same(be[0], be[1], what);
        refused += tensors_same(be[0], be[1], k->batch, 1, &read);
    }
    state_same(be[0], be[1]);
    /* evaluation on a partial batch: counters, and what it leaves */
    batch_fill(&b, m, k->batch, k->batch - 1, 999);
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(td_backend_upload(be[i], &b.b), 0);
        ck_assert_msg(td_backend_eval_step(be[i]) == 0, "%s", be[i]->err);
    }
    stats_same(be[0], be[1], "evaluation");
    int eval_read = 0;
    refused += tensors_same(be[0], be[1], k->batch, 0, &eval_read);
    /* the logits, which inference reads after an evaluation step */
    size_t nl = (size_t)k->batch * (size_t)k->classes;
    float *lg = malloc(nl * sizeof *lg);
    ck_assert_msg(be[0]->ops->read_tensor(be[0], TD_T_VALUE, m->nlayers - 1,
                                          lg, nl) == 0, "%s", be[0]->err);
    free(lg);
    printf("%s: %d steps and an evaluation bitwise equal; %d tensors read "
           "and equal after training, %d after evaluation, %d refused\n",
           k->model, k->steps, read, eval_read, refused);
    ck_assert_int_gt(refused, 0); /* the plan does reuse memory */
    ck_assert_int_gt(read, 0);
    ck_assert_int_eq(td_sim_races(), 0);
    fflush(stdout);
    free(b.px);
    free(b.labels);
    td_backend_destroy(be[0]);
    td_backend_destroy(be[1]);
    free(bn);
    td_model_free(m);
}

START_TEST(test_fmnist_cnn_planned_equals_per_layer)
{
    const char *e = getenv("TD_TEST_FMNIST_BATCH");
    mcase k = {"fmnist-cnn", {1, 28, 28}, 10, e ? atoi(e) : 8, 2,
               TD_OPT_SGD, 0};
    td_cuda_register();
    run_case(&k);
}
END_TEST

START_TEST(test_resnet20_planned_equals_per_layer)
{
    mcase k = {"resnet20", {3, 16, 16}, 10, 4, 2, TD_OPT_ADAMW, 0};
    td_cuda_register();
    run_case(&k);
}
END_TEST

START_TEST(test_dropout_planned_equals_per_layer)
{
    mcase k = {"tiny-dropout", {2, 9, 9}, 5, 8, 3, TD_OPT_SGD, 0};
    td_cuda_register();
    run_case(&k);
}
END_TEST

START_TEST(test_every_layer_kind_planned_equals_per_layer)
{
    mcase k = {"tiny-all", {2, 9, 9}, 5, 6, 3, TD_OPT_SGD, 0};
    td_cuda_register();
    run_case(&k);
}
END_TEST

START_TEST(test_bn_eval_planned_equals_per_layer)
{
    mcase k = {"tiny-all", {2, 9, 9}, 5, 6, 3, TD_OPT_ADAMW, 1};
    td_cuda_register();
    run_case(&k);
}
END_TEST

/* The simulator is no more lenient than cuDNN and cuBLAS document: in
 * place only where the routine says so (the activations: same pointer,
 * identical descriptors), any other overlap of an output refused. */
START_TEST(test_simulator_refuses_undocumented_overlap)
{
    const float one = 1.0f, zero = 0.0f;
    float *d = NULL;
    cudnnHandle_t h;
    cudnnTensorDescriptor_t t, u;
    cudnnActivationDescriptor_t act;
    cudnnPoolingDescriptor_t pool;
    cublasHandle_t bl;
    ck_assert_int_eq(cudaMalloc((void **)&d, 1024 * sizeof *d), cudaSuccess);
    ck_assert_int_eq(cudaMemset(d, 0, 1024 * sizeof *d), cudaSuccess);
    ck_assert_int_eq(cudnnCreate(&h), CUDNN_STATUS_SUCCESS);
    ck_assert_int_eq(cudnnCreateTensorDescriptor(&t), CUDNN_STATUS_SUCCESS);
    ck_assert_int_eq(cudnnCreateTensorDescriptor(&u), CUDNN_STATUS_SUCCESS);
    ck_assert_int_eq(cudnnSetTensor4dDescriptor(t, CUDNN_TENSOR_NCHW,
                     CUDNN_DATA_FLOAT, 2, 4, 4, 4), CUDNN_STATUS_SUCCESS);
    /* the same sizes, other strides (NHWC) */
    ck_assert_int_eq(cudnnSetTensor4dDescriptor(u, CUDNN_TENSOR_NHWC,
                     CUDNN_DATA_FLOAT, 2, 4, 4, 4), CUDNN_STATUS_SUCCESS);
    ck_assert_int_eq(cudnnCreateActivationDescriptor(&act),
                     CUDNN_STATUS_SUCCESS);
    ck_assert_int_eq(cudnnSetActivationDescriptor(act, CUDNN_ACTIVATION_RELU,
                     CUDNN_PROPAGATE_NAN, 0.0), CUDNN_STATUS_SUCCESS);
    /* 128 floats per tensor: x at 0, y at 128, dy at 256, dx at 384 */
    float *x = d, *y = d + 128, *dy = d + 256, *dx = d + 384;
    ck_assert_int_eq(cudnnActivationForward(h, act, &one, t, x, &zero, t, x),
                     CUDNN_STATUS_SUCCESS);
    ck_assert_int_eq(cudnnActivationForward(h, act, &one, t, x, &zero, t,
                                            x + 8), CUDNN_STATUS_BAD_PARAM);
    ck_assert_int_eq(cudnnActivationForward(h, act, &one, t, x, &zero, u, x),
                     CUDNN_STATUS_BAD_PARAM);
    ck_assert_int_eq(cudnnActivationBackward(h, act, &one, t, y, t, dy, t, y,
                                             &zero, t, dy),
                     CUDNN_STATUS_SUCCESS);
    ck_assert_int_eq(cudnnActivationBackward(h, act, &one, t, y, t, dy, t, x,
                                             &zero, t, x),
                     CUDNN_STATUS_BAD_PARAM); /* dx == x: not documented */
    ck_assert_int_eq(cudnnActivationBackward(h, act, &one, t, y, t, dy, t, x,
                                             &zero, t, dx),
                     CUDNN_STATUS_SUCCESS);
    ck_assert_int_eq(cudnnCreatePoolingDescriptor(&pool),
                     CUDNN_STATUS_SUCCESS);
    ck_assert_int_eq(cudnnSetPooling2dDescriptor(pool, CUDNN_POOLING_MAX,
                     CUDNN_PROPAGATE_NAN, 1, 1, 0, 0, 1, 1),
                     CUDNN_STATUS_SUCCESS);
    ck_assert_int_eq(cudnnPoolingForward(h, pool, &one, t, x, &zero, t, x),
                     CUDNN_STATUS_BAD_PARAM); /* pooling has no in place */
    ck_assert_int_eq(cublasCreate(&bl), CUBLAS_STATUS_SUCCESS);
    ck_assert_int_eq(cublasSgemm(bl, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one,
                                 x, 4, y, 4, &zero, x + 4, 4),
                     CUBLAS_STATUS_INVALID_VALUE);
    ck_assert_int_eq(cublasSgemm(bl, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one,
                                 x, 4, y, 4, &zero, dy, 4),
                     CUBLAS_STATUS_SUCCESS);
    ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess);
    cublasDestroy(bl);
    cudnnDestroyPoolingDescriptor(pool);
    cudnnDestroyActivationDescriptor(act);
    cudnnDestroyTensorDescriptor(t);
    cudnnDestroyTensorDescriptor(u);
    cudnnDestroy(h);
    cudaFree(d);
    ck_assert_int_eq(td_sim_races(), 0);
}
END_TEST

/* A mem_layout that is neither is refused at create, naming the field. */
START_TEST(test_bad_layout_refused)
{
    char err[256] = "";
    mcase k = {"tiny-flat", {2, 9, 9}, 5, 4, 1, TD_OPT_SGD, 0};
    td_model *m = ref_load_model(k.model, k.in, k.classes);
    td_backend_config c = config(&k, (enum td_mem_layout)7, NULL);
    td_backend *be = NULL;
    td_cuda_register();
    ck_assert_int_eq(td_backend_create("cuda:0", m, &c, &be, err, sizeof err),
                     -EINVAL);
    ck_assert_msg(strstr(err, "mem_layout 7"), "%s", err);
    ck_assert_ptr_null(be);
    td_model_free(m);
}
END_TEST

static Suite *memplan_sim_suite(void)
{
    Suite *s = suite_create("sim_memplan");
    TCase *tc = tcase_create("layouts");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_fmnist_cnn_planned_equals_per_layer);
    tcase_add_test(tc, test_resnet20_planned_equals_per_layer);
    tcase_add_test(tc, test_dropout_planned_equals_per_layer);
    tcase_add_test(tc, test_every_layer_kind_planned_equals_per_layer);
    tcase_add_test(tc, test_bn_eval_planned_equals_per_layer);
    tcase_add_test(tc, test_bad_layout_refused);
    tcase_add_test(tc, test_simulator_refuses_undocumented_overlap);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(memplan_sim_suite)
