/* test_backend_bwdd.c - the CPU backend's backward data as a forward
 * convolution (cpu_bwdd.c): in the bf16 channels-last (AMX) plan, a
 * stride-1 "same" convolution's dx is conv_fwd(dy, W') with W' its
 * weights flipped and their channels swapped.
 *
 * (a) dx of every such convolution in a plain stack (3x3 and 5x5, 16 to
 *     64 channels), with the new path and with oneDNN's backward-data
 *     primitive (TD_CPU_BWDD=0), against a double-precision dx computed
 *     here from the dy and the bf16 weights the step used: both within
 *     the bound of fp32 accumulation plus one bf16 rounding (below).
 * (b) resnet20 (the zoo's), five bf16 training steps, new path against
 *     TD_CPU_BWDD=0: the losses agree within the tolerance stated there;
 *     and the top convolution's dx (same dy in both paths) differs from
 *     the backward-data primitive's by one bf16 rounding step at most.
 * (c) after training steps, the flipped bf16 weights the forward-as-
 *     backward-data convolution reads (read back by a oneDNN reorder,
 *     td_cpu_bwdd_weights) are bit for bit flip(round_bf16(master)), both
 *     through the weight map and with TD_CPU_WMAP=0 (flip, then reorder).
 * The plan's debug lines are counted, so each test fails if the new path
 * was never planned.  Without arguments: the AMX plan (the only one that
 * uses it by default), skipped where oneDNN's ISA is not avx512_core_amx.
 * With --blocked (the test backend_bwdd_blocked): oneDNN limited to
 * avx512_core_bf16, the blocked nChw16c plan of AMD Zen 4/5, where
 * TD_CPU_BWDD=1 forces the path (for A/B runs there); skipped without
 * AVX512_BF16.
 */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/caps.h"
#include "backend/cpu/cpu_bwdd.h"
#include "base/log.h"
#include "bf16.h"
#include "cpu_ab.h"
#include "model/model.h"
#include "tdtest.h"

static int g_phased; /* layers planned as cpu_bwdd2.c's four phases */

static void sink(void *user, int level, long job, const char *line)
{
    (void)level;
    (void)job;
    if (strstr(line, "conv bwd data as fwd: "))
        (*(int *)user)++;
    if (strstr(line, "conv bwd data as four phases"))
        g_phased++;
}

/* A bf16 CPU backend; bwdd and wmap set TD_CPU_BWDD and TD_CPU_WMAP
 * while it plans; *planned counts its forward-as-backward-data layers. */
static td_backend *make(const td_model *m, int batch, const char *bwdd,
                        const char *wmap, int *planned)
{
    td_backend_config cfg = {.batch = batch, .threads = 2, .seed = 11,
                             .dtype = TD_BF16, .std = {1, 1, 1}};
    td_optim_defaults(&cfg.optim, TD_OPT_SGD);
    td_backend *be = NULL;
    char err[256] = "";
    setenv("TD_CPU_BWDD", bwdd, 1);
    setenv("TD_CPU_WMAP", wmap, 1);
    setenv("TD_CPU_CFWD", "0", 1); /* cpu_cfwd.c would take both paths */
    *planned = 0;
    g_phased = 0;
    td_log_set_level(TD_LOG_DEBUG);
    td_log_set_sink(sink, planned);
    int rc = td_backend_create("cpu", m, &cfg, &be, err, sizeof err);
    td_log_set_sink(NULL, NULL);
    td_log_set_level(TD_LOG_INFO);
    unsetenv("TD_CPU_BWDD");
    unsetenv("TD_CPU_WMAP");
    unsetenv("TD_CPU_CFWD");
    ck_assert_msg(rc == 0, "create: %s", err);
    return be;
}

static void upload(td_backend *be, const td_model *m, int n, int t)
{
    td_shape in = m->layers[0].out;
    size_t sz = (size_t)n * in.c * in.h * in.w;
    uint8_t *px = malloc(sz);
    int32_t *lab = malloc((size_t)n * sizeof *lab);
    for (size_t i = 0; i < sz; i++)
        px[i] = (uint8_t)((i * 2654435761u + (unsigned)t * 977u) >> 24);
    for (int i = 0; i < n; i++)
        lab[i] = (i * 7 + t) % m->classes;
    td_batch bt = {.data = px, .labels = lab, .n = n, .h = in.h, .w = in.w,
                   .c = in.c, .layout = TD_LAYOUT_NHWC};
    ck_assert_int_eq(td_backend_upload(be, &bt), 0);
    free(px);
    free(lab);
}

static float *read(td_backend *be, int kind, int i, size_t n)
{
    float *v = malloc(n * sizeof *v);
    int rc = be->ops->read_tensor(be, kind, i, v, n);
    ck_assert_msg(rc == 0, "read_tensor(%d, %d): %d %s", kind, i, rc,
                  be->err);
    return v;
}

/* A plain stack (each convolution's input read by it alone, so the
 * input's gradient is its dx): stride-1 3x3 and 5x5 convolutions on 16,
 * 32 and 64 channels, one stride-2 convolution (old path). */
static td_model *stack(void)
{
    return td_ab_model("{\"layers\": ["
        "{\"type\": \"conv2d\", \"channels\": 16, \"kernel\": 3, "
        "\"pad\": 1}, {\"type\": \"batchnorm\"}, {\"type\": \"relu\"}, "
        "{\"type\": \"conv2d\", \"channels\": 16, \"kernel\": 3, "
        "\"pad\": 1}, {\"type\": \"batchnorm\"}, {\"type\": \"relu\"}, "
        "{\"type\": \"conv2d\", \"channels\": 32, \"kernel\": 3, "
        "\"pad\": 1, \"stride\": 2}, {\"type\": \"batchnorm\"}, "
        "{\"type\": \"relu\"}, "
        "{\"type\": \"conv2d\", \"channels\": 32, \"kernel\": 5, "
        "\"pad\": 2}, {\"type\": \"batchnorm\"}, {\"type\": \"relu\"}, "
        "{\"type\": \"conv2d\", \"channels\": 64, \"kernel\": 3, "
        "\"pad\": 1}, {\"type\": \"batchnorm\"}, {\"type\": \"relu\"}, "
        "{\"type\": \"conv2d\", \"channels\": 64, \"kernel\": 3, "
        "\"pad\": 1}, {\"type\": \"batchnorm\"}, {\"type\": \"relu\"}, "
        "{\"type\": \"global_avgpool\"}, {\"type\": \"flatten\"}, "
        "{\"type\": \"dense\", \"units\": 10}]}", (td_shape){3, 16, 16});
}

static int eligible(const td_model *m, int L)
{
    const td_layer *l = &m->layers[L];
    return l->kind == TD_L_CONV && l->in[0] != 0 && l->stride == 1 &&
           l->pad == (l->kernel - 1) / 2;
}

/* How far dx (bf16 values as floats) is from the double reference, as a
 * fraction of the bound: each dx element is a sum of K = oc * k * k
 * products dy * W of bf16 values (exact in fp32), accumulated in fp32 in
 * some order: |s32 - ref| <= gamma_K * S, S = sum of |dy * W|, gamma_K =
 * K * 2^-24 / (1 - K * 2^-24) (Higham's bound for any summation order,
 * taken as 1.01 * K * 2^-24 for K < 10^4); then rounded once to bf16 (8
 * significant bits): |dx - s32| <= half an ulp <= 2^-8 * |s32| <= 2^-8 *
 * (|ref| + gamma_K * S).  Both paths must meet it; they differ only in
 * the order of the fp32 sums (and so in rare roundings).  A flipped or
 * swapped weight is an error of the order of |dx|, far above it. */
static double worst(const float *dx, const float *dy, const float *w,
                    int N, int C, int O, td_shape in, td_shape out, int k,
                    int st, int *wrong)
{
    int p = (k - 1) / 2, H = in.h, W = in.w, OH = out.h, OW = out.w;
    double frac = 0;
    *wrong = 0;
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++)
            for (int h = 0; h < H; h++)
                for (int x = 0; x < W; x++) {
                    double ref = 0, s = 0;
                    for (int o = 0; o < O; o++)
                        for (int kh = 0; kh < k; kh++)
                            for (int kw = 0; kw < k; kw++) {
                                int oh = h + p - kh, ow = x + p - kw;
                                if (oh < 0 || ow < 0 || oh % st || ow % st)
                                    continue;
                                oh /= st;
                                ow /= st;
                                if (oh >= OH || ow >= OW)
                                    continue;
                                double t =
                                    (double)dy[((n * O + o) * OH + oh) * OW +
                                               ow] *
                                    td_bf16_round(w[((o * C + c) * k + kh) *
                                                    k + kw]);
                                ref += t;
                                s += fabs(t);
                            }
                    double got = dx[((n * C + c) * H + h) * W + x];
                    double gs = 1.01 * O * k * k * ldexp(s, -24);
                    double bound = gs * (1 + ldexp(1, -8)) +
                                   ldexp(fabs(ref), -8) + 1e-30;
                    double f = fabs(got - ref) / bound;
                    if (f > 1)
                        (*wrong)++;
                    if (f > frac)
                        frac = f;
                }
    return frac;
}

/* One step of the stack with TD_CPU_BWDD=bwdd and TD_CPU_BWDD2=bwdd2
 * (want_planned forward-as-backward-data layers and want_phased
 * four-phase ones planned); the dx of every eligible convolution (stride
 * 1) or of the stride-2 one (stride 2) checked against the reference;
 * returns the layers checked. */
static int check_dx(const char *bwdd, const char *bwdd2, int stride,
                    int want_planned, int want_phased)
{
    enum { N = 8 };
    td_model *m = stack();
    int planned = 0, checked = 0;
    setenv("TD_CPU_BWDD2", bwdd2, 1);
    td_backend *be = make(m, N, bwdd, "1", &planned);
    unsetenv("TD_CPU_BWDD2");
    ck_assert_int_eq(planned, want_planned);
    ck_assert_int_eq(g_phased, want_phased);
    float **w = calloc((size_t)m->nlayers, sizeof *w);
    for (int L = 1; L < m->nlayers; L++)
        if (stride == 1 ? eligible(m, L)
                        : m->layers[L].kind == TD_L_CONV &&
                              m->layers[L].stride == stride)
            w[L] = read(be, TD_T_PARAM, m->layers[L].param0,
                        m->params[m->layers[L].param0].count);
    upload(be, m, N, 1);
    ck_assert_int_eq(td_backend_train_step(be, 0.05f, 1), 0);
    for (int L = 1; L < m->nlayers; L++) {
        if (!w[L])
            continue;
        const td_layer *l = &m->layers[L];
        td_shape o = l->out, i = m->layers[l->in[0]].out;
        float *dy = read(be, TD_T_GRAD, L, (size_t)N * o.c * o.h * o.w);
        float *dx = read(be, TD_T_GRAD, l->in[0],
                         (size_t)N * i.c * i.h * i.w);
        int wrong;
        double f = worst(dx, dy, w[L], N, i.c, o.c, i, o, l->kernel, stride,
                         &wrong);
        printf("TD_CPU_BWDD=%s TD_CPU_BWDD2=%s %s (%d->%d, %dx%d, stride "
               "%d, %dx%d -> %dx%d): worst error %.3f of the bound\n", bwdd,
               bwdd2, l->name, i.c, o.c, l->kernel, l->kernel, stride, i.h,
               i.w, o.h, o.w, f);
        ck_assert_msg(wrong == 0, "TD_CPU_BWDD=%s TD_CPU_BWDD2=%s %s: %d dx "
                      "elements outside the bound (worst %.3g times it)",
                      bwdd, bwdd2, l->name, wrong, f);
        checked++;
        free(dy);
        free(dx);
        free(w[L]);
    }
    free(w);
    td_backend_destroy(be);
    td_model_free(m);
    return checked;
}

START_TEST(test_dx_forward_as_backward_data)
{
    /* 4 eligible convolutions: the stride-2 one and the first (reading
     * the input, no dx) are not */
    ck_assert_int_eq(check_dx("1", "0", 1, 4, 0), 4);
}
END_TEST

/* The stack's stride-2 convolution (16 -> 32, 3x3, 16x16 -> 8x8) with
 * TD_CPU_BWDD2=1 (cpu_bwdd2.c: four stride-1 phases, kernels 1x1, 1x2,
 * 2x1, 2x2, interleaved) and without (oneDNN's backward data): its dx
 * against the double reference, the same bound as the stride-1 layers'
 * (the same products summed in fp32 in another order, rounded once).  A
 * phase's tap, padding or interleave wrong is an error of the order of
 * |dx|. */
START_TEST(test_dx_stride2_phases)
{
    ck_assert_int_eq(check_dx("0", "1", 2, 0, 1), 1);
}
END_TEST

START_TEST(test_dx_stride2_primitive)
{
    ck_assert_int_eq(check_dx("0", "0", 2, 0, 0), 1);
}
END_TEST

START_TEST(test_dx_backward_data_primitive)
{
    ck_assert_int_eq(check_dx("0", "0", 1, 0, 0), 4);
}
END_TEST

/* The top convolution (the last in layer order) gets the same dy in both
 * paths (the layers above it are unchanged): its two dx differ only by
 * the order of the fp32 sums, i.e. at most by one bf16 rounding step
 * where the sums straddle a rounding boundary (2^-7 of the value, one
 * ulp, as each is within half an ulp plus the tiny fp32 error of the
 * same exact sum). */
START_TEST(test_dx_paths_agree)
{
    enum { N = 8 };
    td_model *m = stack();
    int on, off, top = 0;
    td_backend *a = make(m, N, "1", "1", &on), *b = make(m, N, "0", "1",
                                                         &off);
    for (int L = 1; L < m->nlayers; L++)
        if (eligible(m, L))
            top = L;
    upload(a, m, N, 1);
    upload(b, m, N, 1);
    ck_assert_int_eq(td_backend_train_step(a, 0.05f, 1), 0);
    ck_assert_int_eq(td_backend_train_step(b, 0.05f, 1), 0);
    const td_layer *l = &m->layers[top];
    td_shape o = l->out, i = m->layers[l->in[0]].out;
    size_t ny = (size_t)N * o.c * o.h * o.w, nx = (size_t)N * i.c * i.h * i.w;
    float *dya = read(a, TD_T_GRAD, top, ny), *dyb = read(b, TD_T_GRAD, top,
                                                           ny);
    ck_assert(memcmp(dya, dyb, ny * sizeof *dya) == 0);
    float *dxa = read(a, TD_T_GRAD, l->in[0], nx);
    float *dxb = read(b, TD_T_GRAD, l->in[0], nx);
    size_t differ = 0;
    for (size_t e = 0; e < nx; e++) {
        if (dxa[e] == dxb[e])
            continue;
        differ++;
        ck_assert_msg(fabsf(dxa[e] - dxb[e]) <=
                          ldexpf(fmaxf(fabsf(dxa[e]), fabsf(dxb[e])), -7),
                      "%s dx element %zu: %.9g forward as backward data, "
                      "%.9g backward-data primitive", l->name, e,
                      (double)dxa[e], (double)dxb[e]);
    }
    printf("%s: dx differs in %zu of %zu elements (each by one bf16 "
           "rounding step at most)\n", l->name, differ, nx);
    free(dya);
    free(dyb);
    free(dxa);
    free(dxb);
    td_backend_destroy(a);
    td_backend_destroy(b);
    td_model_free(m);
}
END_TEST

static td_model *resnet20(void)
{
    char zoo[4096], err[512];
    const char *root = getenv("TD_SOURCE_ROOT");
    snprintf(zoo, sizeof zoo, "%s/config/models", root ? root : ".");
    td_model *m = NULL;
    int rc = td_model_load(zoo, "resnet20", (td_shape){3, 32, 32}, 10, &m,
                           err, sizeof err);
    ck_assert_msg(rc == 0, "resnet20: %s", err);
    return m;
}

START_TEST(test_resnet20_losses)
{
    enum { N = 32, STEPS = 5 };
    const float LR = 0.01f; /* bench_train's */
    td_model *m = resnet20();
    int on = 0, off = 0;
    td_backend *a = make(m, N, "1", "1", &on), *b = make(m, N, "0", "1",
                                                          &off);
    /* resnet20: 17 of its 19 3x3 convolutions are stride 1, one of
     * them reads the input (no dx); its two 1x1 shortcuts are stride 2 */
    ck_assert_int_eq(on, 16);
    ck_assert_int_eq(off, 0);
    for (int t = 1; t <= STEPS; t++) {
        td_step_stats sa, sb;
        upload(a, m, N, t);
        upload(b, m, N, t);
        ck_assert_int_eq(td_backend_train_step(a, LR, t), 0);
        ck_assert_int_eq(td_backend_train_step(b, LR, t), 0);
        td_backend_read_stats(a, &sa);
        td_backend_read_stats(b, &sb);
        double la = sa.loss_sum / N, lb = sb.loss_sum / N;
        printf("resnet20 step %d: loss %.6f forward-as-backward-data, "
               "%.6f backward-data primitive\n", t, la, lb);
        fflush(stdout);
        /* Step 1 is the same forward: bitwise.  Later ones differ by
         * the bf16 roundings of dx summed in another order (test_dx_paths_
         * agree: a few elements per layer by one rounding step),
         * compounded through 19 layers and the updates of this noise
         * data: measured 0.04% and 0.07% at steps 2 and 3, 0.34% and
         * 0.27% at 4 and 5 (oneDNN 2.6, AMX, 2 threads).  Tolerances
         * 0.3% for steps 2 and 3, 1% after (chaos grows).  A flip that
         * does not reverse the kernel rows gives 0.4% and 1.9%. */
        double tol = t <= 3 ? 0.003 : 0.01;
        if (t == 1)
            ck_assert_msg(la == lb, "step 1 losses %.9g %.9g", la, lb);
        ck_assert_msg(fabs(la - lb) <= tol * fabs(lb), "step %d: loss %.6f "
                      "with the forward as backward data, %.6f without", t,
                      la, lb);
    }
    td_backend_destroy(a);
    td_backend_destroy(b);
    td_model_free(m);
}
END_TEST

/* flip(round_bf16(master)) of layer L, [ic][oc][kh][kw] */
static void flipped(const float *w, float *out, int O, int C, int k)
{
    for (int o = 0; o < O; o++)
        for (int c = 0; c < C; c++)
            for (int h = 0; h < k; h++)
                for (int x = 0; x < k; x++)
                    out[((c * O + o) * k + (k - 1 - h)) * k + (k - 1 - x)] =
                        td_bf16_round(w[((o * C + c) * k + h) * k + x]);
}

static void check_flipped(const char *wmap)
{
    enum { N = 8 };
    td_model *m = stack();
    int planned = 0, checked = 0;
    td_backend *be = make(m, N, "1", wmap, &planned);
    ck_assert_int_eq(planned, 4);
    for (int t = 1; t <= 2; t++) {
        upload(be, m, N, t);
        ck_assert_int_eq(td_backend_train_step(be, 0.05f, t), 0);
    }
    /* the updated masters into the primitives' copies */
    ck_assert_int_eq(td_backend_eval_step(be), 0);
    for (int L = 1; L < m->nlayers; L++) {
        const td_layer *l = &m->layers[L];
        if (!eligible(m, L))
            continue;
        int O = l->out.c, C = m->layers[l->in[0]].out.c, k = l->kernel;
        size_t n = (size_t)O * C * k * k;
        float *w = read(be, TD_T_PARAM, l->param0, n);
        float *want = malloc(n * sizeof *want), *got = malloc(n * sizeof *got);
        flipped(w, want, O, C, k);
        ck_assert_int_eq(td_cpu_bwdd_weights(be, L, got, n), 0);
        size_t i = 0;
        while (i < n && memcmp(&got[i], &want[i], sizeof got[i]) == 0)
            i++;
        ck_assert_msg(i == n, "TD_CPU_WMAP=%s %s: flipped weight %zu is "
                      "%.9g, flip(round_bf16(master)) %.9g", wmap, l->name,
                      i, (double)got[i < n ? i : 0],
                      (double)want[i < n ? i : 0]);
        ck_assert_int_eq(td_cpu_bwdd_weights(be, L, got, n - 1), -EINVAL);
        checked++;
        free(w);
        free(want);
        free(got);
    }
    ck_assert_int_eq(checked, 4);
    /* the stride-2 convolution keeps the backward-data primitive */
    float one;
    for (int L = 1; L < m->nlayers; L++)
        if (m->layers[L].kind == TD_L_CONV && m->layers[L].stride == 2)
            ck_assert_int_eq(td_cpu_bwdd_weights(be, L, &one, 1), -ENOENT);
    td_backend_destroy(be);
    td_model_free(m);
}

START_TEST(test_flipped_weights_through_map) { check_flipped("1"); }
END_TEST

START_TEST(test_flipped_weights_through_reorder) { check_flipped("0"); }
END_TEST

int main(int argc, char **argv)
{
    int skip = argc > 1 && strcmp(argv[1], "--blocked") == 0
                   ? td_ab_need_avx512_bf16()
                   : td_ab_need_amx(": no bf16 channels-last plan");
    if (skip)
        return skip;
    Suite *s = suite_create("backend_bwdd");
    TCase *tc = tcase_create("backend_bwdd");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_dx_forward_as_backward_data);
    tcase_add_test(tc, test_dx_backward_data_primitive);
    tcase_add_test(tc, test_dx_stride2_phases);
    tcase_add_test(tc, test_dx_stride2_primitive);
    tcase_add_test(tc, test_dx_paths_agree);
    tcase_add_test(tc, test_resnet20_losses);
    tcase_add_test(tc, test_flipped_weights_through_map);
    tcase_add_test(tc, test_flipped_weights_through_reorder);
    suite_add_tcase(s, tc);
    return td_test_run(s);
}
