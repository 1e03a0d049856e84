/* test_sim_bnfuse.c - batch norm + ReLU (+ residual add) fused by cuDNN's
 * extended calls (issue 15), on the simulated cuDNN by hand.
 *
 * What is checked (fp16 NHWC fully packed, 4 x 8 x 5 x 5, random data):
 *   - BN_ACTIVATION: cudnnBatchNormalizationForwardTrainingEx's y, running
 *     and saved statistics bitwise those of batch norm then an in-place
 *     ReLU; BackwardEx's dx, dscale, dbias bitwise those of the ReLU's
 *     backward then batch norm's backward;
 *   - BN_ADD_ACTIVATION: y within the rounding the fused kernel saves
 *     (bound below), dz bitwise the ReLU backward's output, dx, dscale,
 *     dbias bitwise the sequence's;
 *   - the reserve space: a backward given one its forward did not write,
 *     or after y changed, is caught (td_sim_bnex_bad_reserve) and its dx
 *     is NaN;
 *   - the refusals, one check each (sim_cudnn_bnex.c's list), none
 *     counted as a fused call;
 *   - a forward and backward captured in a CUDA graph bitwise equal to
 *     the eager calls.
 * and on the CUDA backend (resnet20 at 3x16x16, batch 4, fp16):
 *   - 10 batch norms fused with their ReLU (the stem's and each block's
 *     first) and 9 with the residual add and ReLU (each block's second),
 *     one ForwardTrainingEx and one BackwardEx each per step, none in
 *     evaluation;
 *   - BN_ACTIVATION alone (TD_TEST_NO_BNADD=1): losses and parameters
 *     after 3 steps bitwise those of the job unfused
 *     (TD_TEST_NO_BNFUSE=1), the activation region larger by exactly
 *     the reserve spaces (the arena is the plan's: cuda_arena.c refuses
 *     to create otherwise);
 *   - both forms: within the single rounding's tolerance of the unfused
 *     job (bounds at the check), the region at least the reserve spaces
 *     larger;
 *   - a graph-captured job bitwise the eager one;
 *   - bf16 and fp32 jobs unfused (cuDNN's fused kernel takes HALF only);
 *   - read_tensor of a fused batch norm's value refused;
 *   - the plan's lifetimes for the fused calls (test_plan_lifetimes).
 * BNFUSE_VERBOSE=1 prints every figure.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#include <cudnn.h>
#pragma GCC diagnostic pop

#include "backend/backend.h"
#include "backend/cuda/backend_cuda.h"
#include "backend/memplan.h"
#include "base/rng.h"
#include "fp16.h"
#include "model/model.h"
#include "ref_models.h"
#include "sim.h"
#include "sim_bnex.h"
#include "sim_testkit.h"
#include "tdtest.h"

enum { N = 4, C = 8, H = 5, W = 5, NE = N * C * H * W };

static const double EPS = 1e-5;
static const double FACTOR = 0.1;

static int verbose(void)
{
    fflush(stdout);
    return getenv("BNFUSE_VERBOSE") != NULL;
}

/* a fixed LCG: the data are the same in every run */
static float rnd(uint32_t *s, float lo, float hi)
{
    *s = *s * 1664525u + 1013904223u;
    return lo + (hi - lo) * (float)(*s >> 8) / 16777216.0f;
}

static void *dev(size_t bytes)
{
    void *p = NULL;
    ck_assert_int_eq(cudaMalloc(&p, bytes), cudaSuccess);
    ck_assert_int_eq(cudaMemset(p, 0, bytes), cudaSuccess);
    return p;
}

static void *dev16(uint32_t *s, float lo, float hi)
{
    td_f16 h[NE];
    for (int i = 0; i < NE; i++)
        h[i] = td_f16_from_f32(rnd(s, lo, hi));
    void *p = dev(sizeof h);
    ck_assert_int_eq(cudaMemcpy(p, h, sizeof h, cudaMemcpyHostToDevice),
                     cudaSuccess);
    return p;
}

/* Device buffers of one fused and one unfused run on the same data. */
typedef struct fix {
    cudnnHandle_t h;
    cudnnTensorDescriptor_t xd, pd;
    cudnnActivationDescriptor_t ad;
    void *x, *z, *dy, *ws, *rs;
    size_t wsb, rsb;
    float *scale, *bias;
    /* [0] fused, [1] unfused */
    void *y[2], *dx[2], *dz[2];
    float *rm[2], *rv[2], *sm[2], *si[2], *ds[2], *db[2];
} fix;

static float *devp(const float *v)
{
    float *p = dev(C * sizeof *p);
    ck_assert_int_eq(cudaMemcpy(p, v, C * sizeof *v, cudaMemcpyHostToDevice),
                     cudaSuccess);
    return p;
}

static void fix_init(fix *f, cudnnBatchNormOps_t ops)
{
    memset(f, 0, sizeof *f);
    uint32_t s = 12345;
    ck_assert_int_eq(cudnnCreate(&f->h), CUDNN_STATUS_SUCCESS);
    cudnnCreateTensorDescriptor(&f->xd);
    cudnnCreateTensorDescriptor(&f->pd);
    ck_assert_int_eq(cudnnSetTensor4dDescriptor(f->xd, CUDNN_TENSOR_NHWC,
                                                CUDNN_DATA_HALF, N, C, H, W),
                     CUDNN_STATUS_SUCCESS);
    cudnnSetTensor4dDescriptor(f->pd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1,
                               C, 1, 1);
    cudnnCreateActivationDescriptor(&f->ad);
    cudnnSetActivationDescriptor(f->ad, CUDNN_ACTIVATION_RELU,
                                 CUDNN_NOT_PROPAGATE_NAN, 0.0);
    f->x = dev16(&s, -2.0f, 2.0f);
    f->z = dev16(&s, -1.0f, 1.0f);
    f->dy = dev16(&s, -1.0f, 1.0f);
    float sc[C], bi[C], one[C], zero[C];
    for (int c = 0; c < C; c++) {
        sc[c] = rnd(&s, 0.5f, 1.5f), bi[c] = rnd(&s, -0.5f, 0.5f);
        one[c] = 1.0f, zero[c] = 0.0f;
    }
    f->scale = devp(sc), f->bias = devp(bi);
    for (int k = 0; k < 2; k++) {
        f->y[k] = dev(NE * 2), f->dx[k] = dev(NE * 2), f->dz[k] = dev(NE * 2);
        f->rm[k] = devp(zero), f->rv[k] = devp(one);
        f->sm[k] = devp(zero), f->si[k] = devp(zero);
        f->ds[k] = devp(zero), f->db[k] = devp(zero);
    }
    size_t wb = 0;
    ck_assert_int_eq(cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
                         f->h, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, ops, f->xd,
                         f->xd, f->xd, f->pd, f->ad, &f->wsb),
                     CUDNN_STATUS_SUCCESS);
    ck_assert_int_eq(cudnnGetBatchNormalizationBackwardExWorkspaceSize(
                         f->h, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, ops, f->xd,
                         f->xd, f->xd, f->xd, f->xd, f->pd, f->ad, &wb),
                     CUDNN_STATUS_SUCCESS);
    if (wb > f->wsb)
        f->wsb = wb;
    ck_assert_int_eq(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(
                         f->h, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, ops, f->ad,
                         f->xd, &f->rsb),
                     CUDNN_STATUS_SUCCESS);
    ck_assert(f->wsb > 0 && f->rsb > 0);
    f->ws = dev(f->wsb), f->rs = dev(f->rsb);
}

static void fix_free(fix *f)
{
    ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess);
    void *p[] = {f->x, f->z, f->dy, f->ws, f->rs, f->scale, f->bias};
    for (size_t i = 0; i < sizeof p / sizeof *p; i++)
        cudaFree(p[i]);
    for (int k = 0; k < 2; k++) {
        void *q[] = {f->y[k], f->dx[k], f->dz[k], f->rm[k], f->rv[k],
                     f->sm[k], f->si[k], f->ds[k], f->db[k]};
        for (size_t i = 0; i < sizeof q / sizeof *q; i++)
            cudaFree(q[i]);
    }
    cudnnDestroyTensorDescriptor(f->xd);
    cudnnDestroyTensorDescriptor(f->pd);
    cudnnDestroyActivationDescriptor(f->ad);
    cudnnDestroy(f->h);
}

static const float ONE = 1.0f, ZERO = 0.0f;

static cudnnStatus_t fused_fwd(fix *f, cudnnBatchNormOps_t ops, void *rs)
{
    return cudnnBatchNormalizationForwardTrainingEx(
        f->h, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, ops, &ONE, &ZERO, f->xd,
        f->x, f->xd, ops == CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION ? f->z : NULL,
        f->xd, f->y[0], f->pd, f->scale, f->bias, FACTOR, f->rm[0], f->rv[0],
        EPS, f->sm[0], f->si[0], f->ad, f->ws, f->wsb, rs, f->rsb);
}

static cudnnStatus_t fused_bwd(fix *f, cudnnBatchNormOps_t ops, void *rs)
{
    return cudnnBatchNormalizationBackwardEx(
        f->h, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, ops, &ONE, &ZERO, &ONE,
        &ZERO, f->xd, f->x, f->xd, f->y[0], f->xd, f->dy, f->xd,
        ops == CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION ? f->dz[0] : NULL,
        f->xd, f->dx[0], f->pd, f->scale, f->bias, f->ds[0], f->db[0], EPS,
        f->sm[0], f->si[0], f->ad, f->ws, f->wsb, rs, f->rsb);
}

/* The unfused sequence the backend runs today: batch norm, (the add,)
 * the ReLU in place; backward: the ReLU's (into dz[1]), batch norm's.
 * bn_out: batch norm's own output, copied before the add (may be NULL). */
static void unfused(fix *f, int add, td_f16 *bn_out)
{
    ck_assert_int_eq(cudnnBatchNormalizationForwardTraining(
                         f->h, CUDNN_BATCHNORM_SPATIAL, &ONE, &ZERO, f->xd,
                         f->x, f->xd, f->y[1], f->pd, f->scale, f->bias,
                         FACTOR, f->rm[1], f->rv[1], EPS, f->sm[1], f->si[1]),
                     CUDNN_STATUS_SUCCESS);
    if (bn_out)
        st_get(bn_out, f->y[1], NE * 2);
    if (add)
        ck_assert_int_eq(cudnnAddTensor(f->h, &ONE, f->xd, f->z, &ONE, f->xd,
                                        f->y[1]),
                         CUDNN_STATUS_SUCCESS);
    ck_assert_int_eq(cudnnActivationForward(f->h, f->ad, &ONE, f->xd, f->y[1],
                                            &ZERO, f->xd, f->y[1]),
                     CUDNN_STATUS_SUCCESS);
    ck_assert_int_eq(cudnnActivationBackward(f->h, f->ad, &ONE, f->xd,
                                             f->y[1], f->xd, f->dy, f->xd,
                                             f->y[1], &ZERO, f->xd, f->dz[1]),
                     CUDNN_STATUS_SUCCESS);
    ck_assert_int_eq(cudnnBatchNormalizationBackward(
                         f->h, CUDNN_BATCHNORM_SPATIAL, &ONE, &ZERO, &ONE,
                         &ZERO, f->xd, f->x, f->xd, f->dz[1], f->xd, f->dx[1],
                         f->pd, f->scale, f->ds[1], f->db[1], EPS, f->sm[1],
                         f->si[1]),
                     CUDNN_STATUS_SUCCESS);
}

static void same_bytes(const void *a, const void *b, size_t bytes,
                       const char *what)
{
    unsigned char ha[NE * 4], hb[NE * 4];
    ck_assert(bytes <= sizeof ha);
    st_get(ha, a, bytes);
    st_get(hb, b, bytes);
    ck_assert_msg(memcmp(ha, hb, bytes) == 0, "%s: fused and unfused differ",
                  what);
}

/* Everything but y (and dz when there is no add): bitwise. */
static void same_rest(fix *f, int add)
{
    same_bytes(f->rm[0], f->rm[1], C * 4, "running mean");
    same_bytes(f->rv[0], f->rv[1], C * 4, "running variance");
    same_bytes(f->sm[0], f->sm[1], C * 4, "saved mean");
    same_bytes(f->si[0], f->si[1], C * 4, "saved inverse std");
    same_bytes(f->dx[0], f->dx[1], NE * 2, "dx");
    same_bytes(f->ds[0], f->ds[1], C * 4, "dscale");
    same_bytes(f->db[0], f->db[1], C * 4, "dbias");
    if (add)
        same_bytes(f->dz[0], f->dz[1], NE * 2, "dz");
}

START_TEST(test_bn_activation_is_the_sequence)
{
    fix f;
    cudnnBatchNormOps_t ops = CUDNN_BATCHNORM_OPS_BN_ACTIVATION;
    fix_init(&f, ops);
    long f0 = td_sim_bnex_calls(0), b0 = td_sim_bnex_calls(1);
    long bad0 = td_sim_bnex_bad_reserve();
    ck_assert_int_eq(fused_fwd(&f, ops, f.rs), CUDNN_STATUS_SUCCESS);
    ck_assert_int_eq(fused_bwd(&f, ops, f.rs), CUDNN_STATUS_SUCCESS);
    unfused(&f, 0, NULL);
    same_bytes(f.y[0], f.y[1], NE * 2, "y");
    same_rest(&f, 0);
    ck_assert_int_eq(td_sim_bnex_calls(0) - f0, 1);
    ck_assert_int_eq(td_sim_bnex_calls(1) - b0, 1);
    ck_assert_int_eq(td_sim_bnex_bad_reserve(), bad0);
    td_f16 y[NE];
    st_get(y, f.y[0], sizeof y);
    int zeros = 0;
    for (int i = 0; i < NE; i++)
        zeros += y[i] == 0;
    /* the ReLU did clamp something, and not everything */
    ck_assert(zeros > NE / 5 && zeros < NE * 4 / 5);
    if (verbose())
        printf("BN_ACTIVATION: %d of %d outputs clamped, all bitwise\n",
               zeros, NE);
    fix_free(&f);
}
END_TEST

/* Half's unit in the last place at |v| (normal range). */
static double ulp16(double v)
{
    v = fabs(v);
    if (v < 6.103515625e-05)
        return ldexp(1.0, -24);
    return ldexp(1.0, (int)floor(log2(v)) - 10);
}

START_TEST(test_bn_add_activation_rounds_once)
{
    fix f;
    cudnnBatchNormOps_t ops = CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION;
    fix_init(&f, ops);
    ck_assert_int_eq(fused_fwd(&f, ops, f.rs), CUDNN_STATUS_SUCCESS);
    ck_assert_int_eq(fused_bwd(&f, ops, f.rs), CUDNN_STATUS_SUCCESS);
    td_f16 bn[NE], y0[NE], y1[NE];
    unfused(&f, 1, bn);
    st_get(y0, f.y[0], sizeof y0);
    st_get(y1, f.y[1], sizeof y1);
    /* The sequence rounds bn's output to half (error <= ulp(bn) / 2),
     * then the sum (<= ulp(sum) / 2); the fused kernel rounds the sum
     * once (<= ulp / 2).  So they differ by at most ulp(bn) / 2 +
     * ulp(sum), the sum taken at its larger rounding, and the ReLU only
     * shrinks that. */
    int differ = 0;
    double worst = 0;
    for (int i = 0; i < NE; i++) {
        double a = td_f16_to_f32(y0[i]), b = td_f16_to_f32(y1[i]);
        double tol = ulp16(td_f16_to_f32(bn[i])) / 2 +
                     2 * ulp16(fmax(fabs(a), fabs(b)));
        ck_assert_msg(fabs(a - b) <= tol, "y[%d]: fused %g, sequence %g, "
                      "bn %g", i, a, b, (double)td_f16_to_f32(bn[i]));
        differ += y0[i] != y1[i];
        if (fabs(a - b) > worst)
            worst = fabs(a - b);
    }
    same_rest(&f, 1);
    if (verbose())
        printf("BN_ADD_ACTIVATION: y differs from the sequence in %d of %d "
               "elements (largest %g); the rest bitwise\n", differ, NE,
               worst);
    fix_free(&f);
}
END_TEST

START_TEST(test_reserve_space_checked)
{
    fix f;
    cudnnBatchNormOps_t ops = CUDNN_BATCHNORM_OPS_BN_ACTIVATION;
    fix_init(&f, ops);
    long bad0 = td_sim_bnex_bad_reserve();
    ck_assert_int_eq(fused_fwd(&f, ops, f.rs), CUDNN_STATUS_SUCCESS);
    /* a reserve space no forward wrote */
    void *other = dev(f.rsb);
    ck_assert_int_eq(fused_bwd(&f, ops, other), CUDNN_STATUS_SUCCESS);
    td_f16 dx[NE];
    st_get(dx, f.dx[0], sizeof dx);
    ck_assert_int_eq(td_sim_bnex_bad_reserve() - bad0, 1);
    for (int i = 0; i < NE; i++)
        ck_assert(isnan(td_f16_to_f32(dx[i])));
    /* the right one, after y changed under it */
    ck_assert_int_eq(cudaMemset(f.y[0], 0x3c, NE * 2), cudaSuccess);
    ck_assert_int_eq(fused_bwd(&f, ops, f.rs), CUDNN_STATUS_SUCCESS);
    st_get(dx, f.dx[0], sizeof dx);
    ck_assert_int_eq(td_sim_bnex_bad_reserve() - bad0, 2);
    /* forward again, then the right one: accepted, dx finite */
    ck_assert_int_eq(fused_fwd(&f, ops, f.rs), CUDNN_STATUS_SUCCESS);
    ck_assert_int_eq(fused_bwd(&f, ops, f.rs), CUDNN_STATUS_SUCCESS);
    st_get(dx, f.dx[0], sizeof dx);
    ck_assert_int_eq(td_sim_bnex_bad_reserve() - bad0, 2);
    for (int i = 0; i < NE; i++)
        ck_assert(isfinite(td_f16_to_f32(dx[i])));
    cudaFree(other);
    fix_free(&f);
}
END_TEST

START_TEST(test_refusals)
{
    fix f;
    cudnnBatchNormOps_t act = CUDNN_BATCHNORM_OPS_BN_ACTIVATION;
    cudnnBatchNormOps_t add = CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION;
    fix_init(&f, add);
    long f0 = td_sim_bnex_calls(0), b0 = td_sim_bnex_calls(1);
    cudnnTensorDescriptor_t keep = f.xd, bad;
    cudnnCreateTensorDescriptor(&bad);
    size_t sz = 1;
    /* bf16, NCHW, C not a multiple of 4 (6 channels of the same bytes) */
    cudnnSetTensor4dDescriptor(bad, CUDNN_TENSOR_NHWC, CUDNN_DATA_BFLOAT16,
                               N, C, H, W);
    f.xd = bad;
    ck_assert_int_eq(fused_fwd(&f, act, f.rs), CUDNN_STATUS_NOT_SUPPORTED);
    ck_assert_int_eq(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(
                         f.h, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, act, f.ad,
                         bad, &sz),
                     CUDNN_STATUS_NOT_SUPPORTED);
    cudnnSetTensor4dDescriptor(bad, CUDNN_TENSOR_NCHW, CUDNN_DATA_HALF, N, C,
                               H, W);
    ck_assert_int_eq(fused_fwd(&f, act, f.rs), CUDNN_STATUS_NOT_SUPPORTED);
    ck_assert_int_eq(fused_bwd(&f, act, f.rs), CUDNN_STATUS_NOT_SUPPORTED);
    cudnnSetTensor4dDescriptor(bad, CUDNN_TENSOR_NHWC, CUDNN_DATA_HALF, N, 6,
                               H, W);
    ck_assert_int_eq(fused_fwd(&f, act, f.rs), CUDNN_STATUS_NOT_SUPPORTED);
    f.xd = keep;
    /* mode SPATIAL with a fused op */
    ck_assert_int_eq(cudnnBatchNormalizationForwardTrainingEx(
                         f.h, CUDNN_BATCHNORM_SPATIAL, act, &ONE, &ZERO, f.xd,
                         f.x, f.xd, NULL, f.xd, f.y[0], f.pd, f.scale, f.bias,
                         FACTOR, f.rm[0], f.rv[0], EPS, f.sm[0], f.si[0],
                         f.ad, f.ws, f.wsb, f.rs, f.rsb),
                     CUDNN_STATUS_NOT_SUPPORTED);
    /* no workspace, too small a one, too small a reserve space */
    void *ws = f.ws;
    size_t wsb = f.wsb, rsb = f.rsb;
    f.ws = NULL;
    ck_assert_int_eq(fused_fwd(&f, act, f.rs), CUDNN_STATUS_BAD_PARAM);
    f.ws = ws, f.wsb = wsb - 1;
    ck_assert_int_eq(fused_fwd(&f, act, f.rs), CUDNN_STATUS_BAD_PARAM);
    f.wsb = wsb, f.rsb = rsb - 1;
    ck_assert_int_eq(fused_bwd(&f, act, f.rs), CUDNN_STATUS_BAD_PARAM);
    f.rsb = rsb;
    /* no activation descriptor; a sigmoid */
    cudnnActivationDescriptor_t ad = f.ad, sig;
    f.ad = NULL;
    ck_assert_int_eq(fused_fwd(&f, act, f.rs), CUDNN_STATUS_BAD_PARAM);
    cudnnCreateActivationDescriptor(&sig);
    cudnnSetActivationDescriptor(sig, CUDNN_ACTIVATION_SIGMOID,
                                 CUDNN_NOT_PROPAGATE_NAN, 0.0);
    f.ad = sig;
    ck_assert_int_eq(fused_fwd(&f, act, f.rs), CUDNN_STATUS_NOT_SUPPORTED);
    f.ad = ad;
    /* BN_ADD_ACTIVATION without z, and without dz */
    ck_assert_int_eq(cudnnBatchNormalizationForwardTrainingEx(
                         f.h, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, add, &ONE,
                         &ZERO, f.xd, f.x, f.xd, NULL, f.xd, f.y[0], f.pd,
                         f.scale, f.bias, FACTOR, f.rm[0], f.rv[0], EPS,
                         f.sm[0], f.si[0], f.ad, f.ws, f.wsb, f.rs, f.rsb),
                     CUDNN_STATUS_BAD_PARAM);
    ck_assert_int_eq(cudnnBatchNormalizationBackwardEx(
                         f.h, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, add, &ONE,
                         &ZERO, &ONE, &ZERO, f.xd, f.x, f.xd, f.y[0], f.xd,
                         f.dy, f.xd, NULL, f.xd, f.dx[0], f.pd, f.scale,
                         f.bias, f.ds[0], f.db[0], EPS, f.sm[0], f.si[0],
                         f.ad, f.ws, f.wsb, f.rs, f.rsb),
                     CUDNN_STATUS_BAD_PARAM);
    ck_assert_int_eq(td_sim_bnex_calls(0), f0);
    ck_assert_int_eq(td_sim_bnex_calls(1), b0);
    /* bnOps BN is the plain call: no reserve space, the SPATIAL mode */
    ck_assert_int_eq(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(
                         f.h, CUDNN_BATCHNORM_SPATIAL, CUDNN_BATCHNORM_OPS_BN,
                         NULL, f.xd, &sz),
                     CUDNN_STATUS_SUCCESS);
    ck_assert_uint_eq(sz, 0);
    ck_assert_int_eq(cudnnBatchNormalizationForwardTrainingEx(
                         f.h, CUDNN_BATCHNORM_SPATIAL, CUDNN_BATCHNORM_OPS_BN,
                         &ONE, &ZERO, f.xd, f.x, NULL, NULL, f.xd, f.y[0],
                         f.pd, f.scale, f.bias, FACTOR, f.rm[0], f.rv[0], EPS,
                         f.sm[0], f.si[0], NULL, NULL, 0, NULL, 0),
                     CUDNN_STATUS_SUCCESS);
    ck_assert_int_eq(td_sim_bnex_calls(0), f0);
    cudnnDestroyTensorDescriptor(bad);
    cudnnDestroyActivationDescriptor(sig);
    fix_free(&f);
}
END_TEST

START_TEST(test_graph_equals_eager)
{
    fix f;
    cudnnBatchNormOps_t ops = CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION;
    fix_init(&f, ops);
    cudaStream_t s;
    ck_assert_int_eq(cudaStreamCreate(&s), cudaSuccess);
    ck_assert_int_eq(cudnnSetStream(f.h, s), CUDNN_STATUS_SUCCESS);
    ck_assert_int_eq(fused_fwd(&f, ops, f.rs), CUDNN_STATUS_SUCCESS);
    ck_assert_int_eq(fused_bwd(&f, ops, f.rs), CUDNN_STATUS_SUCCESS);
    td_f16 y[NE], dx[NE], dz[NE];
    float ds[C], rm[C];
    st_get(y, f.y[0], sizeof y);
    st_get(dx, f.dx[0], sizeof dx);
    st_get(dz, f.dz[0], sizeof dz);
    st_get(ds, f.ds[0], sizeof ds);
    st_get(rm, f.rm[0], sizeof rm);
    /* the same calls captured, from the same starting statistics */
    float zero[C];
    memset(zero, 0, sizeof zero);
    ck_assert_int_eq(cudaMemcpy(f.rm[0], zero, sizeof zero,
                                cudaMemcpyHostToDevice), cudaSuccess);
    ck_assert_int_eq(cudaMemset(f.y[0], 0, NE * 2), cudaSuccess);
    ck_assert_int_eq(cudaMemset(f.dx[0], 0, NE * 2), cudaSuccess);
    ck_assert_int_eq(cudaMemset(f.dz[0], 0, NE * 2), cudaSuccess);
    long f0 = td_sim_bnex_calls(0);
    cudaGraph_t g;
    cudaGraphExec_t ge;
    ck_assert_int_eq(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal),
                     cudaSuccess);
    ck_assert_int_eq(fused_fwd(&f, ops, f.rs), CUDNN_STATUS_SUCCESS);
    ck_assert_int_eq(fused_bwd(&f, ops, f.rs), CUDNN_STATUS_SUCCESS);
    ck_assert_int_eq(cudaStreamEndCapture(s, &g), cudaSuccess);
    ck_assert_int_eq(cudaGraphInstantiate(&ge, g, 0), cudaSuccess);
    ck_assert_int_eq(cudaGraphLaunch(ge, s), cudaSuccess);
    ck_assert_int_eq(cudaStreamSynchronize(s), cudaSuccess);
    ck_assert_int_eq(td_sim_bnex_calls(0) - f0, 1); /* captured once */
    td_f16 y2[NE], dx2[NE], dz2[NE];
    float ds2[C], rm2[C];
    st_get(y2, f.y[0], sizeof y2);
    st_get(dx2, f.dx[0], sizeof dx2);
    st_get(dz2, f.dz[0], sizeof dz2);
    st_get(rm2, f.rm[0], sizeof rm2);
    st_get(ds2, f.ds[0], sizeof ds2);
    ck_assert(memcmp(y, y2, sizeof y) == 0);
    ck_assert(memcmp(dx, dx2, sizeof dx) == 0);
    ck_assert(memcmp(dz, dz2, sizeof dz) == 0);
    ck_assert(memcmp(rm, rm2, sizeof rm) == 0);
    ck_assert(memcmp(ds, ds2, sizeof ds) == 0);
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    cudnnSetStream(f.h, NULL);
    cudaStreamDestroy(s);
    fix_free(&f);
}
END_TEST

/* ---- the CUDA backend ------------------------------------------------- */

#define LR 0.0005f /* as test_sim_nhwc.c: small stable SGD steps */
#define BATCH 4

static td_backend_config bconfig(enum td_dtype dt)
{
    td_backend_config c = st_config(BATCH, dt, TD_MATH_FP32);
    c.optim.lr = LR;
    return c;
}

typedef struct batch {
    uint8_t px[BATCH * 3 * 16 * 16];
    int32_t labels[BATCH];
    td_batch b;
} batch;

/* Learnable batches: noise plus a bright band where the label says. */
static void batch_fill(batch *b, const td_model *m, uint64_t salt)
{
    td_shape in = m->layers[0].out;
    size_t per = (size_t)in.c * in.h * in.w;
    ck_assert(per * BATCH <= sizeof b->px);
    for (int i = 0; i < BATCH; i++) {
        int k = (int)td_rng_below(salt, 2, (uint64_t)i, (uint64_t)m->classes);
        b->labels[i] = k;
        for (size_t e = 0; e < per; e++) {
            int row = (int)(e / (size_t)in.c / (size_t)in.w % (size_t)in.h);
            size_t at = (size_t)i * per + e;
            b->px[at] = (uint8_t)(td_rng_below(salt, 1, at, 96) +
                                  (row * m->classes / in.h == k ? 150 : 0));
        }
    }
    b->b = (td_batch){.data = b->px, .labels = b->labels, .n = BATCH,
                      .h = in.h, .w = in.w, .c = in.c,
                      .layout = TD_LAYOUT_NHWC};
}

static td_backend *make(const td_model *m, const td_backend_config *c,
                        int fuse)
{
    char err[512] = "";
    td_backend *be = NULL;
    if (!fuse)
        setenv("TD_TEST_NO_BNFUSE", "1", 1);
    int rc = td_backend_create("cuda:0", m, c, &be, err, sizeof err);
    unsetenv("TD_TEST_NO_BNFUSE");
    ck_assert_msg(rc == 0, "%s", err);
    return be;
}

static double step(td_backend *be, const td_model *m, uint64_t salt,
                   int64_t t)
{
    batch b;
    td_step_stats st;
    batch_fill(&b, m, salt);
    ck_assert_int_eq(td_backend_upload(be, &b.b), 0);
    ck_assert_msg(td_backend_train_step(be, LR, t) == 0, "%s", be->err);
    ck_assert_int_eq(td_backend_read_stats(be, &st), 0);
    ck_assert_int_eq(td_backend_sync(be), 0);
    return st.loss_sum / (double)st.samples;
}

static float *params(td_backend *be, const td_model *m)
{
    float *p = malloc(m->param_count * sizeof *p);
    ck_assert(p);
    size_t off = 0;
    for (int i = 0; i < m->nparams; i++) {
        ck_assert_int_eq(be->ops->read_tensor(be, TD_T_PARAM, i, p + off,
                                              m->params[i].count), 0);
        off += m->params[i].count;
    }
    return p;
}

/* Batch norms the backend fuses in an fp16 job: only reader a ReLU
 * (*nact), or the residual add and ReLU (*nadd, one per add; unless
 * act_only), and the bytes of their reserve spaces as the plan bills
 * them. */
static size_t fusable(const td_model *m, int act_only, int *nact, int *nadd)
{
    size_t reserve = 0;
    int claimed[512] = {0};
    ck_assert(m->nlayers <= 512);
    *nact = *nadd = 0;
    for (int L = 1; L < m->nlayers; L++) {
        int A = 0, R = td_memplan_bn_relu(m, L);
        if (!R && !act_only) {
            R = td_memplan_bn_add_relu(m, L, &A);
            if (R && claimed[A])
                R = 0;
        }
        if (!R)
            continue;
        if (A)
            claimed[A] = 1, (*nadd)++;
        else
            (*nact)++;
        const td_shape *s = &m->layers[L].out;
        /* the simulator's size: a 64-byte tag, a mask bit an element,
         * billed 256-aligned */
        size_t rs = 64 + ((size_t)BATCH * s->c * s->h * s->w + 7) / 8;
        reserve += (rs + 255) & ~(size_t)255;
    }
    return reserve;
}

#define STEPS 3

/* One job of STEPS steps then an evaluation: mode 0 unfused, 1
 * BN_ACTIVATION only, 2 both forms. */
static void run_job(const td_model *m, int mode, int nfwd, double *loss,
                    float **par, size_t *acts)
{
    td_backend_config c = bconfig(TD_F16);
    if (mode == 1)
        setenv("TD_TEST_NO_BNADD", "1", 1);
    td_backend *be = make(m, &c, mode > 0);
    unsetenv("TD_TEST_NO_BNADD");
    const td_memplan *plan = td_backend_cuda_plan(be);
    *acts = plan->activations;
    /* one reserve space per fused batch norm, of the simulator's size
     * (a 64-byte tag, a mask bit an element), placed by the plan: the
     * arena is the plan's (cuda_arena.c refuses to create otherwise) */
    int nres = 0;
    for (int i = 0; i < plan->nbufs; i++)
        if (plan->bufs[i].kind == TD_MB_RESERVE) {
            const td_shape *sh = &m->layers[plan->bufs[i].layer].out;
            ck_assert_uint_eq(plan->bufs[i].bytes,
                              64 + ((size_t)BATCH * sh->c * sh->h * sh->w +
                                    7) / 8);
            nres++;
        }
    ck_assert_int_eq(nres, nfwd);
    for (int s = 0; s < STEPS; s++) {
        long f0 = td_sim_bnex_calls(0), b0 = td_sim_bnex_calls(1);
        loss[s] = step(be, m, 100 + (uint64_t)s, s + 1);
        ck_assert_int_eq(td_sim_bnex_calls(0) - f0, nfwd);
        ck_assert_int_eq(td_sim_bnex_calls(1) - b0, nfwd);
    }
    /* evaluation: batch norm in inference mode, then the add, the ReLU */
    long f0 = td_sim_bnex_calls(0);
    batch b;
    td_step_stats st;
    batch_fill(&b, m, 999);
    ck_assert_int_eq(td_backend_upload(be, &b.b), 0);
    ck_assert_msg(td_backend_eval_step(be) == 0, "%s", be->err);
    ck_assert_int_eq(td_backend_read_stats(be, &st), 0);
    ck_assert_int_eq(td_backend_sync(be), 0);
    ck_assert_int_eq(td_sim_bnex_calls(0), f0);
    *par = params(be, m);
    /* after a training step a fused batch norm's value was never
     * written: refused */
    if (mode) {
        step(be, m, 7, STEPS + 1);
        int L = 1;
        while (!td_memplan_bn_relu(m, L))
            L++;
        size_t n = (size_t)BATCH * m->layers[L].out.c * m->layers[L].out.h *
                   m->layers[L].out.w;
        float *v = malloc(n * sizeof *v);
        ck_assert(v);
        ck_assert_int_ne(be->ops->read_tensor(be, TD_T_VALUE, L, v, n), 0);
        if (verbose())
            printf("read_tensor of %s refused: %s\n", m->layers[L].name,
                   be->err);
        free(v);
    }
    td_backend_destroy(be);
}

START_TEST(test_backend_fused_equals_unfused)
{
    td_cuda_register();
    td_model *m = ref_load_model("resnet20", (td_shape){3, 16, 16}, 10);
    int nact, nadd, n1, n2;
    size_t res_act = fusable(m, 1, &n1, &n2);
    ck_assert_int_eq(n1, 10); /* the stem's and each block's first */
    ck_assert_int_eq(n2, 0);
    size_t res_all = fusable(m, 0, &nact, &nadd);
    ck_assert_int_eq(nact, 10);
    ck_assert_int_eq(nadd, 9); /* each block's second */
    double loss[3][STEPS];
    float *par[3];
    size_t acts[3];
    run_job(m, 0, 0, loss[0], &par[0], &acts[0]);
    run_job(m, 1, nact, loss[1], &par[1], &acts[1]);
    run_job(m, 2, nact + nadd, loss[2], &par[2], &acts[2]);
    /* BN_ACTIVATION computes what batch norm then ReLU compute */
    ck_assert_int_eq(memcmp(loss[0], loss[1], sizeof loss[0]), 0);
    ck_assert_int_eq(memcmp(par[0], par[1], m->param_count * sizeof(float)),
                     0);
    (void)res_act; /* placed by liveness: the region need not grow by it */
    /* BN_ADD_ACTIVATION rounds once where batch norm then add round
     * twice (sim_cudnn_bnex.c): one fp16 rounding (2^-11 relative) less
     * per block end, carried through 3 SGD steps.  Bounds: a tenth of
     * test_sim_lowp.c's fp16-vs-CPU loss tolerance (2.5e-2), and for
     * the parameters 1e-3 of the largest (measured below) */
    double lworst = 0;
    for (int s = 0; s < STEPS; s++)
        lworst = fmax(lworst, fabs(loss[2][s] - loss[0][s]) /
                                  fmax(fabs(loss[0][s]), 1.0));
    double pworst = st_rel_diff(par[2], par[0], m->param_count);
    ck_assert_msg(lworst <= 2.5e-3, "losses differ by %g", lworst);
    ck_assert_msg(pworst <= 1e-3, "parameters differ by %g", pworst);
    /* the plan bills every reserve space; the arena is the plan's
     * (cuda_arena.c); the residual form also keeps values longer, so its
     * region is at least the reserve spaces larger */
    (void)res_all;
    if (verbose())
        printf("resnet20 fp16: %d + %d batch norms fused; BN_ACTIVATION "
               "only: losses %.6f %.6f %.6f bitwise the unfused job's, "
               "parameters bitwise, region %+lld bytes (reserve spaces "
               "%zu); both forms: losses within %.3g, parameters within "
               "%.3g of the largest, region %+lld bytes (reserve spaces "
               "%zu)\n", nact, nadd, loss[1][0], loss[1][1], loss[1][2],
               (long long)acts[1] - (long long)acts[0], res_act, lworst,
               pworst, (long long)acts[2] - (long long)acts[0], res_all);
    for (int i = 0; i < 3; i++)
        free(par[i]);
    td_model_free(m);
}
END_TEST

/* The plan's lifetimes with reserve spaces (memplan.c): a fused batch
 * norm's ReLU output lives to the batch norm's backward; at a block's
 * end the add's value lives to the add's backward, and the batch norm's
 * input gradient starts there; each reserve space is a buffer live
 * from the fused forward to the fused backward, the saved statistics
 * unchanged. */
static const td_membuf *buf(const td_memplan *p, int kind, int layer)
{
    for (int i = 0; i < p->nbufs; i++)
        if ((int)p->bufs[i].kind == kind && p->bufs[i].layer == layer)
            return &p->bufs[i];
    ck_abort_msg("no buffer of kind %d for layer %d", kind, layer);
    return NULL;
}

START_TEST(test_plan_lifetimes)
{
    td_model *m = ref_load_model("resnet20", (td_shape){3, 16, 16}, 10);
    const int NL = m->nlayers;
    size_t *rs = calloc((size_t)NL, sizeof *rs);
    int *claimed = calloc((size_t)NL, sizeof *claimed);
    ck_assert(rs && claimed);
    td_memplan_config c;
    memset(&c, 0, sizeof c);
    c.batch = BATCH, c.act_bytes = 2, c.reuse = 1, c.nbuf = 2;
    td_memplan plain, fused;
    char err[200];
    ck_assert_int_eq(td_memplan_build(m, &c, &plain, err, sizeof err), 0);
    size_t total = 0;
    for (int L = 1; L < NL; L++) {
        int A = 0;
        if (td_memplan_bn_relu(m, L) ||
            (td_memplan_bn_add_relu(m, L, &A) && !claimed[A])) {
            rs[L] = 1000; /* any size: billed 256-aligned */
            total += 1024;
            claimed[A] = A != 0;
        }
    }
    c.bn_reserve = rs;
    ck_assert_int_eq(td_memplan_build(m, &c, &fused, err, sizeof err), 0);
    ck_assert_uint_eq(fused.bn_saves, plain.bn_saves);
    ck_assert_int_eq(fused.nbufs - plain.nbufs, 19); /* the reserves */
    (void)total;
    int checked = 0;
    for (int P = 1; P < NL; P++) {
        if (!rs[P])
            continue;
        int A = 0, R = td_memplan_bn_relu(m, P);
        const td_membuf *r = buf(&fused, TD_MB_RESERVE, P);
        ck_assert_uint_eq(r->bytes, 1000);
        if (R) { /* forward to backward of the batch norm */
            ck_assert_int_eq(r->first, P);
            ck_assert_int_eq(r->last, 2 * NL - P);
            /* the ReLU in place on the batch norm's own buffer */
            ck_assert_int_ge(buf(&fused, TD_MB_Y, P)->last, 2 * NL - P);
            ck_assert_int_lt(buf(&plain, TD_MB_Y, P)->last, 2 * NL - P);
        } else {
            R = td_memplan_bn_add_relu(m, P, &A);
            ck_assert_int_eq(r->first, A); /* the add's forward */
            ck_assert_int_eq(r->last, 2 * NL - A); /* and backward */
            ck_assert_int_ge(buf(&fused, TD_MB_Y, A)->last, 2 * NL - A);
            ck_assert_int_lt(buf(&plain, TD_MB_Y, A)->last, 2 * NL - A);
            int X = m->layers[P].in[0];
            ck_assert_int_le(buf(&fused, TD_MB_DY, X)->first, 2 * NL - A);
            ck_assert_int_gt(buf(&plain, TD_MB_DY, X)->first, 2 * NL - A);
        }
        checked++;
    }
    ck_assert_int_eq(checked, 19);
    td_memplan_free(&plain);
    td_memplan_free(&fused);
    free(rs);
    free(claimed);
    td_model_free(m);
}
END_TEST

START_TEST(test_backend_graph_equals_eager)
{
    td_cuda_register();
    td_model *m = ref_load_model("resnet20", (td_shape){3, 16, 16}, 10);
    double loss[2][STEPS];
    float *par[2];
    for (int gr = 0; gr < 2; gr++) {
        td_backend_config c = bconfig(TD_F16);
        c.cuda_graphs = gr ? TD_GRAPHS_ON : 0;
        td_backend *be = make(m, &c, 1);
        for (int s = 0; s < STEPS; s++)
            loss[gr][s] = step(be, m, 200 + (uint64_t)s, s + 1);
        td_cuda_graph_info gi;
        ck_assert_int_eq(td_backend_cuda_graph_info(be, &gi), 0);
        ck_assert_int_eq(gi.captures > 0, gr);
        par[gr] = params(be, m);
        td_backend_destroy(be);
    }
    ck_assert_int_eq(memcmp(loss[0], loss[1], sizeof loss[0]), 0);
    ck_assert_int_eq(memcmp(par[0], par[1], m->param_count * sizeof(float)),
                     0);
    free(par[0]);
    free(par[1]);
    td_model_free(m);
}
END_TEST

START_TEST(test_backend_other_types_unfused)
{
    td_cuda_register();
    td_model *m = ref_load_model("resnet20", (td_shape){3, 16, 16}, 10);
    enum td_dtype dts[2] = {TD_BF16, TD_F32};
    for (int i = 0; i < 2; i++) {
        td_backend_config c = bconfig(dts[i]);
        long f0 = td_sim_bnex_calls(0);
        td_backend *be = make(m, &c, 1);
        step(be, m, 300, 1);
        ck_assert_int_eq(td_sim_bnex_calls(0), f0);
        td_backend_destroy(be);
    }
    td_model_free(m);
}
END_TEST

static Suite *bnfuse_suite(void)
{
    Suite *s = suite_create("sim_bnfuse");
    TCase *tc = tcase_create("sim");
    tcase_add_test(tc, test_bn_activation_is_the_sequence);
    tcase_add_test(tc, test_bn_add_activation_rounds_once);
    tcase_add_test(tc, test_reserve_space_checked);
    tcase_add_test(tc, test_refusals);
    tcase_add_test(tc, test_graph_equals_eager);
    suite_add_tcase(s, tc);
    tc = tcase_create("backend");
    tcase_add_test(tc, test_plan_lifetimes);
    tcase_add_test(tc, test_backend_fused_equals_unfused);
    tcase_add_test(tc, test_backend_graph_equals_eager);
    tcase_add_test(tc, test_backend_other_types_unfused);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(bnfuse_suite)
