/* test_sim_bnshortcut.c - cuDNN's BN_ADD_ACTIVATION when the add's other
 * input (the shortcut) has other readers (issue 15, cudafix 3), on the
 * simulated device.
 *
 * The fused backward writes the shortcut's gradient summand (dz) with no
 * blend, so it must be that gradient's first summand: the backend fuses
 * a batch norm with its add only when the add is the shortcut's last
 * reader (td_memplan_bn_add_relu, through td_memplan_bn_fuse), whose
 * backward runs first; readers before the add sum into it afterwards.
 * The model: a stem (conv, bn, relu = S), two blocks ending in
 * add(bn1, S) and add(bn2, S) - S read by block 1's convolution, by both
 * adds (the first add is not its last reader) -, a flatten and a dense
 * layer.
 *
 * What is checked:
 *   - the fusion decisions on the host: bn0 with its ReLU
 *     (BN_ACTIVATION), bn1 unfused (S is read again after its add), bn2
 *     with the second add (BN_ADD_ACTIVATION: that add is S's last reader
 *     and its dz the first of S's three summands);
 *   - the fp16 backend makes 2 fused forward and 2 fused backward calls
 *     a step, with the same decisions (its plan has reserve spaces for
 *     bn0 and bn2 only);
 *   - every parameter gradient of one fp16 step, fused, against the
 *     unfused fp16 job (TD_TEST_NO_BNFUSE) and against the fp32 job, per
 *     parameter relative to its largest gradient, within the tolerances
 *     below: a dz that overwrote S's gradient (or a plan that let a
 *     buffer clobber it) would drop the summands of block 1 and of its
 *     convolution, changing the stem's gradients by their order of
 *     magnitude;
 *   - 3 steps' losses of the fused job against the fp32 one within
 *     test_sim_lowp.c's fp16 loss tolerance.
 * BNSHORTCUT_VERBOSE=1 prints the figures.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cuda/backend_cuda.h"
#include "backend/memplan.h"
#include "model/model.h"
#include "sim.h"
#include "sim_bnex.h"
#include "sim_testkit.h"
#include "tdtest.h"

#define BATCH 4
#define STEPS 3
#define LR 0.01f

/* Tolerances of one step's parameter gradients, relative to each
 * parameter's largest gradient, as test_sim_lowp.c counts them in units
 * of the type's roundoff u: 4 + 2 k u after k products, here up to 4
 * convolutions and the dense layer forward and back to the stem
 * (k = 10: 24 u = 1.2e-2 in fp16).  Against the unfused fp16 job, whose
 * only difference is the fused add's single rounding at bn2 (docs/cuda.md
 * "NHWC": half an ulp of bn2's output plus one of the result) carried
 * back through the backward: a quarter of that. */
#define GRAD_TOL_F32 (24.0 * 0x1p-11)
#define GRAD_TOL_UNFUSED (6.0 * 0x1p-11)
/* test_sim_lowp.c's fp16 loss tolerance (|fp16 - fp32| / max(fp32, 1)) */
#define LOSS_TOL_F16 2.5e-2

static td_model *shortcut_model(void)
{
    const char *def =
        "{\"name\": \"shortcut-twice\", \"layers\": ["
        "{\"type\": \"conv2d\", \"name\": \"conv0\", \"channels\": 8,"
        " \"kernel\": 3, \"pad\": 1},"
        "{\"type\": \"batchnorm\", \"name\": \"bn0\"},"
        "{\"type\": \"relu\", \"name\": \"S\"},"
        "{\"type\": \"conv2d\", \"name\": \"conv1\", \"channels\": 8,"
        " \"kernel\": 3, \"pad\": 1, \"input\": \"S\"},"
        "{\"type\": \"batchnorm\", \"name\": \"bn1\"},"
        "{\"type\": \"add\", \"name\": \"add1\", \"inputs\": [\"bn1\", \"S\"]},"
        "{\"type\": \"relu\", \"name\": \"r1\"},"
        "{\"type\": \"conv2d\", \"name\": \"conv2\", \"channels\": 8,"
        " \"kernel\": 3, \"pad\": 1, \"input\": \"r1\"},"
        "{\"type\": \"batchnorm\", \"name\": \"bn2\"},"
        "{\"type\": \"add\", \"name\": \"add2\", \"inputs\": [\"bn2\", \"S\"]},"
        "{\"type\": \"relu\", \"name\": \"r2\"},"
        "{\"type\": \"flatten\", \"name\": \"flat\"},"
        "{\"type\": \"dense\", \"name\": \"fc\", \"units\": \"classes\"}]}";
    json_error_t je;
    json_t *j = json_loads(def, 0, &je);
    ck_assert_msg(j != NULL, "%s", je.text);
    td_model *m = NULL;
    char err[256];
    int rc = td_model_build(j, (td_shape){3, 8, 8}, 4, &m, err, sizeof err);
    json_decref(j);
    ck_assert_msg(rc == 0, "%s", err);
    return m;
}

static int layer(const td_model *m, const char *name)
{
    for (int L = 0; L < m->nlayers; L++)
        if (!strcmp(m->layers[L].name, name))
            return L;
    ck_abort_msg("no layer %s", name);
    return -1;
}

START_TEST(test_fusion_decisions)
{
    td_model *m = shortcut_model();
    int A;
    ck_assert_int_eq(td_memplan_bn_fuse(m, layer(m, "bn0"), NULL, 0, &A),
                     layer(m, "S"));
    ck_assert_int_eq(A, 0);
    /* S is read by add2 after add1: add1's dz would not be the first
     * summand of S's gradient */
    ck_assert_int_eq(td_memplan_bn_fuse(m, layer(m, "bn1"), NULL, 0, &A),
                     0);
    ck_assert_int_eq(td_memplan_bn_fuse(m, layer(m, "bn2"), NULL, 0, &A),
                     layer(m, "r2"));
    ck_assert_int_eq(A, layer(m, "add2"));
    td_model_free(m);
}
END_TEST

typedef struct job {
    double loss[STEPS];
    float *grad; /* every parameter's gradient after the first step */
    long fwd, bwd; /* fused calls over the steps */
    int reserves;  /* the plan's reserve spaces */
} job;

/* A job of STEPS steps in dt, fused or not (TD_TEST_NO_BNFUSE). */
static void run(const td_model *m, enum td_dtype dt, int fuse, job *j)
{
    td_backend_config c = st_config(BATCH, dt, TD_MATH_FP32);
    c.optim.momentum = 0.9;
    if (!fuse)
        setenv("TD_TEST_NO_BNFUSE", "1", 1);
    td_backend *be = st_make("cuda:0", m, &c);
    unsetenv("TD_TEST_NO_BNFUSE");
    const td_memplan *p = td_backend_cuda_plan(be);
    j->reserves = 0;
    for (int i = 0; i < p->nbufs; i++)
        if (p->bufs[i].kind == TD_MB_RESERVE) {
            j->reserves++;
            ck_assert(p->bufs[i].layer == layer(m, "bn0") ||
                      p->bufs[i].layer == layer(m, "bn2"));
        }
    st_batch b = {.pixel_rows = 1};
    long f0 = td_sim_bnex_calls(0), b0 = td_sim_bnex_calls(1);
    j->grad = malloc(m->param_count * sizeof *j->grad);
    ck_assert_ptr_nonnull(j->grad);
    for (int s = 0; s < STEPS; s++) {
        j->loss[s] = st_step(be, m, &b, BATCH, 300 + (uint64_t)s, LR, s + 1);
        if (s)
            continue;
        size_t off = 0;
        for (int i = 0; i < m->nparams; i++) {
            ck_assert_msg(be->ops->read_tensor(be, TD_T_PARAM_GRAD, i,
                                               j->grad + off,
                                               m->params[i].count) == 0,
                          "%s", be->err);
            off += m->params[i].count;
        }
    }
    j->fwd = td_sim_bnex_calls(0) - f0;
    j->bwd = td_sim_bnex_calls(1) - b0;
    st_batch_free(&b);
    td_backend_destroy(be);
}

/* Worst over parameters of max |a - b| / max |b| within the parameter;
 * its index in *which. */
static double grad_diff(const td_model *m, const float *a, const float *b,
                        int *which)
{
    double worst = 0;
    size_t off = 0;
    for (int i = 0; i < m->nparams; i++) {
        double big = 0, diff = 0;
        for (size_t e = off; e < off + m->params[i].count; e++) {
            big = fmax(big, fabs(b[e]));
            diff = fmax(diff, fabs((double)a[e] - b[e]));
        }
        double r = diff / fmax(big, 1e-30);
        if (r > worst)
            worst = r, *which = i;
        off += m->params[i].count;
    }
    return worst;
}

START_TEST(test_shortcut_gradients)
{
    td_cuda_register();
    td_model *m = shortcut_model();
    job fused, unfused, f32;
    run(m, TD_F16, 1, &fused);
    run(m, TD_F16, 0, &unfused);
    run(m, TD_F32, 1, &f32);
    /* bn0 (BN_ACTIVATION) and bn2 (BN_ADD_ACTIVATION) each step; bn1 not */
    ck_assert_int_eq(fused.reserves, 2);
    ck_assert_int_eq(fused.fwd, 2 * STEPS);
    ck_assert_int_eq(fused.bwd, 2 * STEPS);
    ck_assert_int_eq(unfused.fwd + unfused.bwd + f32.fwd + f32.bwd, 0);
    int w_u = 0, w_f = 0;
    double d_unfused = grad_diff(m, fused.grad, unfused.grad, &w_u);
    double d_f32 = grad_diff(m, fused.grad, f32.grad, &w_f);
    double d_ref = 0; /* the unfused fp16 job against fp32, for scale */
    int w_r = 0;
    d_ref = grad_diff(m, unfused.grad, f32.grad, &w_r);
    double lworst = 0;
    for (int s = 0; s < STEPS; s++)
        lworst = fmax(lworst, st_loss_err(fused.loss[s], f32.loss[s]));
    if (st_verbose("BNSHORTCUT_VERBOSE"))
        printf("shortcut read twice, fp16: fused gradients within %.3g of "
               "the unfused job's (worst %s) and %.3g of fp32's (worst %s; "
               "unfused fp16 vs fp32 %.3g, worst %s); losses fused %.6f "
               "%.6f %.6f, fp32 %.6f %.6f %.6f (within %.3g)\n", d_unfused,
               m->params[w_u].name, d_f32, m->params[w_f].name, d_ref,
               m->params[w_r].name, fused.loss[0], fused.loss[1],
               fused.loss[2], f32.loss[0], f32.loss[1], f32.loss[2],
               lworst);
    ck_assert_msg(d_unfused <= GRAD_TOL_UNFUSED, "fused vs unfused fp16: "
                  "%s off by %g", m->params[w_u].name, d_unfused);
    ck_assert_msg(d_f32 <= GRAD_TOL_F32, "fused fp16 vs fp32: %s off by %g",
                  m->params[w_f].name, d_f32);
    ck_assert_msg(lworst <= LOSS_TOL_F16, "losses off by %g", lworst);
    free(fused.grad);
    free(unfused.grad);
    free(f32.grad);
    td_model_free(m);
}
END_TEST

static Suite *bnshortcut_suite(void)
{
    Suite *s = suite_create("sim_bnshortcut");
    TCase *t = tcase_create("shortcut");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, test_fusion_decisions);
    tcase_add_test(t, test_shortcut_gradients);
    suite_add_tcase(s, t);
    return s;
}

TD_TEST_MAIN(bnshortcut_suite)
