/* test_sim_nhwc.c - the CUDA backend's 16-bit NHWC layout (issue 15:
 * NHWC activations, KRSC filters, the stem padded for tensor cores) on
 * the simulated device.
 *
 * What is checked:
 *   - kernels/layout.h's index maps on the host: NCHW <-> NHWC round
 *     trips with pad channels, and the normalise and bn_eval element
 *     functions of the NHWC layout against the NCHW ones;
 *   - the libraries' calls: every convolution of a bf16 or fp16 job runs
 *     with a KRSC (CUDNN_TENSOR_NHWC) filter and NHWC tensors, with
 *     input and output channels multiples of 8 (fmnist-cnn's 1-channel
 *     stem and resnet20's 3-channel one padded to 8); fp32 stays NCHW;
 *     the simulator refuses NCHW tensors with a KRSC filter;
 *   - the padded batch read back (read_tensor, NCHW) equals the CPU's
 *     normalised input within one 16-bit rounding, and the first
 *     convolution's output within the first-product tolerance of
 *     test_sim_lowp;
 *   - dropout on a spatial tensor read through a flatten by a dense
 *     layer: the same masks as the CPU's, losses within test_sim_lowp's
 *     tolerances;
 *   - a bf16 job's steps as CUDA graphs bitwise equal to eager ones;
 *   - a 16-bit snapshot (canonical layouts) restored at fp32 and back;
 *   - the memory plan bills the padded batch exactly and equals the
 *     arena.
 * NHWC_VERBOSE=1 prints every measured figure.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cudnn.h>

#include "backend/backend.h"
#include "backend/cuda/backend_cuda.h"
#include "backend/memplan.h"
#include "base/rng.h"
#include "bn_eval.h"
#include "layout.h"
#include "model/model.h"
#include "normalize.h"
#include "ref_models.h"
#include "sim.h"
#include "sim_testkit.h"
#include "tdtest.h"

/* as test_sim_lowp.c: stable SGD on fmnist-cnn at batch 4 */
/* test_sim_lowp.c's loss tolerances, |16-bit - cpu| / max(cpu, 1): the
 * 16-bit rounding of activations and gradients, which NHWC does not
 * change (same products, same roundings, another memory order) */
#define LOSS_TOL_BF16 5e-2
#define LOSS_TOL_F16 2.5e-2

/* ---- kernels/layout.h on the host -------------------------------------- */

START_TEST(test_layout_maps)
{
    /* 2 samples, 3 channels stored as 8, 2 x 3 pixels */
    const int n = 2, c = 3, cp = 8;
    const size_t hw = 6, total = (size_t)n * cp * hw;
    size_t seen[2 * 3 * 6] = {0}, pads = 0;
    for (size_t i = 0; i < total; i++) {
        size_t o = td_nhwc_to_nchw(i, c, cp, hw);
        if (o == (size_t)-1) {
            pads++;
            ck_assert_uint_ge(i % (size_t)cp, (size_t)c);
            continue;
        }
        ck_assert_uint_lt(o, (size_t)n * c * hw);
        seen[o]++;
        ck_assert_uint_eq(td_nchw_to_nhwc(o, c, cp, hw), i);
    }
    ck_assert_uint_eq(pads, (size_t)n * (cp - c) * hw);
    for (size_t o = 0; o < (size_t)n * c * hw; o++)
        ck_assert_uint_eq(seen[o], 1);
    /* a known element: sample 1, channel 2, pixel 4 */
    ck_assert_uint_eq(td_nchw_to_nhwc((1 * 3 + 2) * 6 + 4, c, cp, hw),
                      (1 * 6 + 4) * 8 + 2);

    /* the normalise kernel's NHWC element is the NCHW one, pads zero */
    uint8_t px[2 * 6 * 3];
    float scale[3] = {0.1f, 0.2f, 0.3f}, bias[3] = {-1.0f, 0.5f, 2.0f};
    for (size_t i = 0; i < sizeof px; i++)
        px[i] = (uint8_t)(i * 37 + 11);
    for (size_t i = 0; i < total; i++) {
        size_t o = td_nhwc_to_nchw(i, c, cp, hw);
        float v = td_normalize_nhwc_elem(px, i, c, cp, scale, bias);
        if (o == (size_t)-1)
            ck_assert_float_eq(v, 0.0f);
        else
            ck_assert_float_eq(v, td_normalize_elem(px, o, c, 2, 3, scale,
                                                     bias));
    }
    /* bn_eval's plane walk: element j of plane (sample, channel) */
    for (size_t p = 0; p < (size_t)n * c; p++)
        for (size_t j = 0; j < hw; j++) {
            size_t o = p * hw + j;
            ck_assert_uint_eq(td_bn_eval_at(p, j, c, hw, 0), o);
            ck_assert_uint_eq(td_bn_eval_at(p, j, c, hw, 1),
                              td_nchw_to_nhwc(o, c, c, hw));
        }
}
END_TEST

/* ---- the libraries' calls: NHWC, KRSC, the stem padded ---------------- */

/* A 16-bit job's convolutions all NHWC with channels multiples of 8; an
 * fp32 job's none. */
static void layout_case(const char *model, td_shape in, int classes,
                        enum td_dtype dt)
{
    td_model *m = ref_load_model(model, in, classes);
    td_backend_config c = st_config(4, dt, TD_MATH_FP32);
    td_backend *be = st_make("cuda:0", m, &c);
    st_batch b = {.pixel_rows = 1};
    long c0 = td_sim_dnn_convs(-1), n0 = td_sim_dnn_nhwc();
    long u0 = td_sim_dnn_unaligned();
    st_step(be, m, &b, 4, 100, ST_LR, 1);
    long convs = td_sim_dnn_convs(-1) - c0, nhwc = td_sim_dnn_nhwc() - n0;
    long unaligned = td_sim_dnn_unaligned() - u0;
    if (st_verbose("NHWC_VERBOSE"))
        printf("%s %s: %ld convolutions, %ld NHWC, %ld with channels not "
               "a multiple of 8\n", model, st_dt_name(dt), convs, nhwc,
               unaligned);
    ck_assert_int_gt(convs, 0);
    if (dt == TD_F32) {
        ck_assert_int_eq(nhwc, 0);
    } else {
        ck_assert_int_eq(nhwc, convs);
        ck_assert_int_eq(unaligned, 0);
    }
    /* the batch: stored with its channels padded to 8 in 16 bits */
    const td_memplan *p = td_backend_cuda_plan(be);
    int cp = dt == TD_F32 ? in.c : 8;
    size_t esz = dt == TD_F32 ? 4 : 2;
    for (int i = 0; i < p->nbufs; i++)
        if (p->bufs[i].kind == TD_MB_Y && p->bufs[i].layer == 0)
            ck_assert_uint_eq(p->bufs[i].bytes,
                              4 * (size_t)cp * in.h * in.w * esz);
    ck_assert_int_eq(td_memplan_stem_channels(m, (int)esz), cp);
    /* the arena is the plan's bill (cuda_arena.c checks it too) */
    ck_assert_uint_eq(td_backend_cuda_arena_bytes(be), p->total - p->headroom);
    td_backend_destroy(be);
    st_batch_free(&b);
    td_model_free(m);
}

START_TEST(test_convolutions_nhwc_stem_padded)
{
    td_cuda_register();
    layout_case("fmnist-cnn", (td_shape){1, 28, 28}, 10, TD_BF16);
    layout_case("fmnist-cnn", (td_shape){1, 28, 28}, 10, TD_F16);
    layout_case("resnet20", (td_shape){3, 16, 16}, 10, TD_BF16);
    layout_case("fmnist-cnn", (td_shape){1, 28, 28}, 10, TD_F32);
}
END_TEST

static cudnnTensorDescriptor_t tensor(cudnnTensorFormat_t f, int n, int c,
                                      int h, int w)
{
    cudnnTensorDescriptor_t d;
    ck_assert_int_eq(cudnnCreateTensorDescriptor(&d), CUDNN_STATUS_SUCCESS);
    ck_assert_int_eq(cudnnSetTensor4dDescriptor(d, f, CUDNN_DATA_HALF, n, c,
                                                h, w), CUDNN_STATUS_SUCCESS);
    return d;
}

/* The simulator refuses NCHW tensors with a KRSC filter (and the
 * reverse), and computes an NHWC convolution with a KRSC filter as the
 * NCHW one with the same filter in KCRS. */
START_TEST(test_sim_krsc_filters)
{
    cudnnHandle_t h;
    ck_assert_int_eq(cudnnCreate(&h), CUDNN_STATUS_SUCCESS);
    cudnnFilterDescriptor_t wk, wn;
    cudnnConvolutionDescriptor_t cd;
    ck_assert_int_eq(cudnnCreateFilterDescriptor(&wk), 0);
    ck_assert_int_eq(cudnnCreateFilterDescriptor(&wn), 0);
    ck_assert_int_eq(cudnnSetFilter4dDescriptor(wk, CUDNN_DATA_HALF,
                     CUDNN_TENSOR_NHWC, 8, 8, 3, 3), 0);
    ck_assert_int_eq(cudnnSetFilter4dDescriptor(wn, CUDNN_DATA_HALF,
                     CUDNN_TENSOR_NCHW, 8, 8, 3, 3), 0);
    ck_assert_int_eq(cudnnCreateConvolutionDescriptor(&cd), 0);
    ck_assert_int_eq(cudnnSetConvolution2dDescriptor(cd, 1, 1, 1, 1, 1, 1,
                     CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT), 0);
    cudnnTensorDescriptor_t xn = tensor(CUDNN_TENSOR_NCHW, 2, 8, 5, 5);
    cudnnTensorDescriptor_t xh = tensor(CUDNN_TENSOR_NHWC, 2, 8, 5, 5);
    cudnnConvolutionFwdAlgoPerf_t pf[8];
    int got = 0;
    ck_assert_int_eq(cudnnGetConvolutionForwardAlgorithm_v7(h, xn, wk, cd,
                     xn, 8, &got, pf), CUDNN_STATUS_NOT_SUPPORTED);
    ck_assert_int_eq(cudnnGetConvolutionForwardAlgorithm_v7(h, xh, wn, cd,
                     xh, 8, &got, pf), CUDNN_STATUS_NOT_SUPPORTED);
    ck_assert_int_eq(cudnnGetConvolutionForwardAlgorithm_v7(h, xh, wk, cd,
                     xh, 8, &got, pf), CUDNN_STATUS_SUCCESS);
    ck_assert_int_gt(got, 0);
    cudnnDestroyTensorDescriptor(xn);
    cudnnDestroyTensorDescriptor(xh);
    cudnnDestroyFilterDescriptor(wk);
    cudnnDestroyFilterDescriptor(wn);
    cudnnDestroyConvolutionDescriptor(cd);
    cudnnDestroy(h);
}
END_TEST

/* ---- values against the CPU ------------------------------------------- */

/* After one step on the same batch: the batch (padded NHWC, read back as
 * NCHW) within half a 16-bit spacing of the CPU's fp32 normalised input,
 * the first convolution's output within test_sim_lowp's tolerance for one
 * product, u (4 + 2) with u the type's unit roundoff. */
static void stem_case(const char *model, td_shape in, int classes,
                      enum td_dtype dt)
{
    double u = dt == TD_BF16 ? 0x1p-8 : 0x1p-11;
    td_model *m = ref_load_model(model, in, classes);
    td_backend_config c32 = st_config(4, TD_F32, TD_MATH_FP32);
    td_backend_config clo = st_config(4, dt, TD_MATH_FP32);
    clo.mem_layout = c32.mem_layout = TD_MEM_PER_LAYER;
    td_backend *cpu = st_make("cpu", m, &c32);
    td_backend *gpu = st_make("cuda:0", m, &clo);
    st_batch b = {.pixel_rows = 1};
    st_step(cpu, m, &b, 4, 100, ST_LR, 1);
    st_step(gpu, m, &b, 4, 100, ST_LR, 1);
    for (int L = 0; L <= 1; L++) {
        const td_shape *s = &m->layers[L].out;
        size_t cnt = (size_t)4 * s->c * s->h * s->w;
        float *a = malloc(cnt * sizeof *a), *g = malloc(cnt * sizeof *g);
        ck_assert(a && g);
        ck_assert_int_eq(cpu->ops->read_tensor(cpu, TD_T_VALUE, L, a, cnt),
                         0);
        ck_assert_msg(gpu->ops->read_tensor(gpu, TD_T_VALUE, L, g, cnt) == 0,
                      "%s", gpu->err);
        double rel = st_rel_diff(g, a, cnt), tol = L == 0 ? u : u * 6.0;
        if (st_verbose("NHWC_VERBOSE"))
            printf("%s %s layer %s: %.3e of the largest value off "
                   "(tolerance %.1e)\n", model, st_dt_name(dt),
                   m->layers[L].name, rel, tol);
        ck_assert_msg(rel <= tol, "%s %s layer %s: %.3e off (tolerance "
                      "%.1e)", model, st_dt_name(dt), m->layers[L].name, rel,
                      tol);
        free(a);
        free(g);
    }
    td_backend_destroy(cpu);
    td_backend_destroy(gpu);
    st_batch_free(&b);
    td_model_free(m);
}

START_TEST(test_stem_values)
{
    td_cuda_register();
    stem_case("fmnist-cnn", (td_shape){1, 28, 28}, 10, TD_BF16);
    stem_case("fmnist-cnn", (td_shape){1, 28, 28}, 10, TD_F16);
    stem_case("resnet20", (td_shape){3, 16, 16}, 10, TD_F16);
}
END_TEST

/* tiny-dropout-nhwc (dropout at rate 0.5 on an 8 x 9 x 9 tensor, then a
 * flatten and a dense layer) over 5 steps in bf16 and fp16 against the
 * fp32 GPU path (NCHW): the masks are Philox draws by the NCHW index on
 * both, so wherever the dropout's input is not zero on either, its output
 * is zero exactly where the fp32 path's is; the losses within
 * test_sim_lowp's tolerances (the dense layer reads the NHWC flatten
 * through its permuted weights).  Against the CPU backend (which draws
 * by the NCHW index too, whatever oneDNN's layout): test_sim_dropord. */
START_TEST(test_dropout_masks_nhwc)
{
    td_cuda_register();
    td_model *m = ref_load_model("tiny-dropout-nhwc", (td_shape){2, 9, 9}, 5);
    const int drop = 3, in = 2; /* dr and r1 (layer 0 is the batch) */
    ck_assert_int_eq(m->layers[drop].kind, TD_L_DROPOUT);
    size_t cnt = (size_t)8 * 8 * 9 * 9;
    enum td_dtype dts[2] = {TD_BF16, TD_F16};
    for (int k = 0; k < 2; k++) {
        td_backend_config c32 = st_config(8, TD_F32, TD_MATH_FP32);
        td_backend_config clo = st_config(8, dts[k], TD_MATH_FP32);
        /* one buffer per layer: the dropout's input is read after */
        c32.mem_layout = clo.mem_layout = TD_MEM_PER_LAYER;
        td_backend *ref = st_make("cuda:0", m, &c32);
        td_backend *gpu = st_make("cuda:0", m, &clo);
        st_batch b = {.pixel_rows = 1};
        size_t zeros = 0, differ = 0, seen = 0;
        double worst = 0;
        for (int s = 0; s < 5; s++) {
            double lc = st_step(ref, m, &b, 8,
                                500 + (uint64_t)s, 0.05f, s + 1);
            double lg = st_step(gpu, m, &b, 8,
                                500 + (uint64_t)s, 0.05f, s + 1);
            seen += st_masks_compare(ref, gpu, drop, in, cnt, &zeros,
                                     &differ);
            ck_assert_msg(differ == 0, "%s step %d: %zu masks differ",
                          st_dt_name(dts[k]), s, differ);
            double tol = dts[k] == TD_BF16 ? LOSS_TOL_BF16 : LOSS_TOL_F16;
            worst = fmax(worst, st_loss_err(lg, lc));
            ck_assert_msg(st_loss_err(lg, lc) <= tol, "%s step %d: %.6f, fp32 "
                          "%.6f", st_dt_name(dts[k]), s, lg, lc);
        }
        printf("tiny-dropout-nhwc %s: %zu of %zu outputs of nonzero inputs "
               "dropped, %zu differ from the fp32 path; losses %.2e off at "
               "worst\n", st_dt_name(dts[k]), zeros, seen, differ, worst);
        ck_assert_uint_gt(zeros, seen / 4); /* rate 0.5 */
        td_backend_destroy(ref);
        td_backend_destroy(gpu);
        st_batch_free(&b);
    }
    td_model_free(m);
}
END_TEST

/* fmnist-cnn in bf16, 4 full steps as CUDA graphs and eagerly: the same
 * losses and parameters bit for bit (the KRSC rewrite of the weight copy
 * is part of the captured update). */
START_TEST(test_graphs_bitwise_nhwc)
{
    td_cuda_register();
    td_model *m = ref_load_model("fmnist-cnn", (td_shape){1, 28, 28}, 10);
    double loss[2][4];
    float *par[2];
    size_t np = m->param_count;
    for (int gr = 0; gr < 2; gr++) {
        td_backend_config c = st_config(4, TD_BF16, TD_MATH_FP32);
        c.cuda_graphs = gr ? TD_GRAPHS_ON : 0;
        td_backend *be = st_make("cuda:0", m, &c);
        st_batch b = {.pixel_rows = 1};
        for (int s = 0; s < 4; s++)
            loss[gr][s] = st_step(be, m, &b, 4,
                                  100 + (uint64_t)s, ST_LR, s + 1);
        td_cuda_graph_info gi;
        ck_assert_int_eq(td_backend_cuda_graph_info(be, &gi), 0);
        ck_assert_int_eq(gi.captures > 0, gr);
        par[gr] = malloc(np * sizeof(float));
        ck_assert(par[gr]);
        size_t off = 0;
        for (int p = 0; p < m->nparams; p++) {
            ck_assert_int_eq(be->ops->read_tensor(be, TD_T_PARAM, p,
                                                  par[gr] + off,
                                                  m->params[p].count), 0);
            off += m->params[p].count;
        }
        td_backend_destroy(be);
        st_batch_free(&b);
    }
    ck_assert_int_eq(memcmp(loss[0], loss[1], sizeof loss[0]), 0);
    ck_assert_int_eq(memcmp(par[0], par[1], np * sizeof(float)), 0);
    free(par[0]);
    free(par[1]);
    td_model_free(m);
}
END_TEST

/* fmnist-cnn (1-channel stem, a dense layer over a flattened NHWC tensor)
 * trained at `from`, its snapshot (canonical layouts) restored at `to`:
 * the snapshot comes back bitwise and the evaluation loss is the first
 * job's within the 16-bit tolerance, not the initial weights'. */
static void resume_case(enum td_dtype from, enum td_dtype to)
{
    td_model *m = ref_load_model("fmnist-cnn", (td_shape){1, 28, 28}, 10);
    st_batch b = {.pixel_rows = 1};
    double tol = from == TD_BF16 || to == TD_BF16 ? LOSS_TOL_BF16
                                                  : LOSS_TOL_F16;
    /* within the 16-bit tolerance, and 5x farther from the initial
     * weights' */
    td_backend *b2 = st_resume_check(m, from, to, 4, ST_LR, &b, tol, 5,
                                     "fmnist-cnn ", NULL);
    st_batch_free(&b);
    td_backend_destroy(b2);
    td_model_free(m);
}

START_TEST(test_checkpoint_across_layouts)
{
    td_cuda_register();
    resume_case(TD_BF16, TD_F32);
    resume_case(TD_F32, TD_F16);
}
END_TEST

static Suite *sim_nhwc_suite(void)
{
    Suite *s = suite_create("sim_nhwc");
    TCase *tc = tcase_create("layout");
    tcase_add_test(tc, test_layout_maps);
    tcase_add_test(tc, test_convolutions_nhwc_stem_padded);
    tcase_add_test(tc, test_sim_krsc_filters);
    tcase_add_test(tc, test_stem_values);
    tcase_add_test(tc, test_dropout_masks_nhwc);
    tcase_add_test(tc, test_graphs_bitwise_nhwc);
    tcase_add_test(tc, test_checkpoint_across_layouts);
    tcase_set_timeout(tc, 600);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(sim_nhwc_suite)
