/* test_sim_lowpcopy.c - the 16-bit weight copy written once per step
 * (issue 15, cudafix 1): the fused SGD / AdamW update writes each
 * weight's 16-bit copy straight in the layout the products read (KRSC
 * filters, the padded stem's after the copy, a dense layer over an NHWC
 * input permuted), so no kernel rewrites the filters after it.
 *
 * What is checked:
 *   - kernels/layout.h's td_lowp_index on the host: a map of two
 *     segments (one padded, stored elsewhere) sends every master element
 *     to a distinct place, the segments' elements to their KRSC index,
 *     the others to themselves;
 *   - after N training steps the copy the device holds for every
 *     convolution and dense layer equals round16(master) permuted to
 *     KRSC bitwise (pad channels zero), for bf16 and fp16, SGD with
 *     momentum and AdamW, eager and as CUDA graphs, on fmnist-cnn (the
 *     1-channel stem padded to 8, a dense layer over an NHWC flatten)
 *     and on a chain of 30 convolutions (more filters than one update
 *     launch's map holds: the update splits into two launches);
 *   - and that the copy changed over the steps (so the check can fail);
 *   - the step launches no rewrite: td_sim_kernel_runs("to_krsc_k") does
 *     not move over training steps (eager or graphs), moves at create
 *     and at a restore (the copy rebuilt), and the update kernel runs
 *     once per step (fmnist-cnn) or twice (the chain of 30);
 *   - after a checkpoint of an fp32 job restored into a bf16 one (a
 *     precision change on resume) the copy is round16(master) in KRSC.
 * LOWPCOPY_VERBOSE=1 prints the figures.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cuda/backend_cuda.h"
#include "bf16.h"
#include "fp16.h"
#include "layout.h"
#include "model/model.h"
#include "ref_models.h"
#include "sim.h"
#include "sim_testkit.h"
#include "tdtest.h"

/* A large lr so that a few steps change many rounded 16-bit weights (the
 * suites' ST_LR moves few of them past a rounding boundary). */
#define COPY_LR 0.05f
#define STEPS 3

/* ---- kernels/layout.h's map on the host --------------------------------- */

START_TEST(test_lowp_index_host)
{
    /* elements: 4 plain, a 2 x 3 x 4 filter (stored with 8 channels at
     * 100), 5 plain, a 3 x 2 x 2 filter in place, 2 plain */
    td_lowp_map m = {.at = 0, .n = 2};
    m.s[0] = (td_lowp_seg){.lo = 4, .end = 28, .dst = 100, .rs = 4, .c = 3,
                           .cp = 8};
    m.s[1] = (td_lowp_seg){.lo = 33, .end = 45, .dst = 33, .rs = 2, .c = 2,
                           .cp = 2};
    int seen[200] = {0};
    for (size_t e = 0; e < 47; e++) {
        size_t i = td_lowp_index(&m, e);
        ck_assert_uint_lt(i, 200);
        seen[i]++;
        if (e >= 4 && e < 28)
            ck_assert_uint_eq(i, 100 + td_nchw_to_nhwc(e - 4, 3, 8, 4));
        else if (e >= 33 && e < 45)
            ck_assert_uint_eq(i, 33 + td_nchw_to_nhwc(e - 33, 2, 2, 2));
        else
            ck_assert_uint_eq(i, e);
    }
    for (int i = 0; i < 200; i++)
        ck_assert_int_le(seen[i], 1);
    /* a known one: filter 1, channel 2, tap 3 -> (1 * 4 + 3) * 8 + 2 */
    ck_assert_uint_eq(td_lowp_index(&m, 4 + (1 * 3 + 2) * 4 + 3),
                      100 + (1 * 4 + 3) * 8 + 2);
    /* an empty map is the identity */
    td_lowp_map none = {.at = 0, .n = 0};
    ck_assert_uint_eq(td_lowp_index(&none, 12345), 12345);
}
END_TEST

/* ---- the copy on the device --------------------------------------------- */

/* A stem convolution on 3 channels (padded to 8), then convs-1 more
 * 3x3 convolutions of 8 channels with a batch norm halfway (its scale
 * and shift sit between two filters, copied as they are), a flatten and
 * a dense layer over it (NHWC). */
static td_model *chain_model(int convs)
{
    json_t *layers = json_array();
    for (int i = 0; i < convs; i++) {
        char name[32];
        snprintf(name, sizeof name, "conv%d", i);
        json_array_append_new(layers, json_pack("{s:s, s:s, s:i, s:i, s:i}",
                                                "type", "conv2d", "name",
                                                name, "channels", 8, "kernel",
                                                3, "pad", 1));
        if (i == convs / 2)
            json_array_append_new(layers, json_pack("{s:s, s:s}", "type",
                                                    "batchnorm", "name",
                                                    "bn"));
    }
    json_array_append_new(layers, json_pack("{s:s, s:s}", "type", "flatten",
                                            "name", "flat"));
    json_array_append_new(layers, json_pack("{s:s, s:s, s:s}", "type",
                                            "dense", "name", "fc", "units",
                                            "classes"));
    json_t *def = json_pack("{s:s, s:o}", "name", "chain", "layers", layers);
    td_model *m = NULL;
    char err[256];
    int rc = td_model_build(def, (td_shape){3, 6, 6}, 4, &m, err, sizeof err);
    json_decref(def);
    ck_assert_msg(rc == 0, "%s", err);
    return m;
}

static uint16_t round16(float v, enum td_dtype dt)
{
    return dt == TD_BF16 ? td_bf16_from_f32(v) : td_f16_from_f32(v);
}

/* The channels layer L's input is stored with (the stem padded). */
static int stored_c(const td_model *m, int L, int stem_c)
{
    int R = m->layers[L].in[0];
    return R == 0 ? stem_c : m->layers[R].out.c;
}

/* The spatial shape a dense layer reads (through flattens). */
static const td_shape *dense_in(const td_model *m, int L)
{
    int R = m->layers[L].in[0];
    while (m->layers[R].kind == TD_L_FLATTEN)
        R = m->layers[R].in[0];
    return &m->layers[R].out;
}

/* Every convolution's and dense layer's 16-bit copy against the masters
 * (the snapshot's first param_count floats): round16 of each, permuted,
 * bitwise.  Returns how many copy elements differ from before[layer]
 * (where it is not NULL), then stores the copy there when keep. */
static size_t check_copy(td_backend *be, const td_model *m, enum td_dtype dt,
                         uint16_t **before, int keep)
{
    size_t k = td_backend_snapshot_floats(m, &be->cfg.optim);
    float *snap = malloc(k * sizeof *snap);
    ck_assert_ptr_nonnull(snap);
    ck_assert_int_eq(td_backend_snapshot(be, snap, k), 0);
    ck_assert_int_eq(td_backend_sync(be), 0);
    int stem_c = td_memplan_stem_channels(m, 2);
    size_t changed = 0, off = 0, cap = 1 << 20;
    uint16_t *got = malloc(cap * sizeof *got);
    ck_assert_ptr_nonnull(got);
    for (int p = 0, L = 0; L < m->nlayers; L++) {
        const td_layer *l = &m->layers[L];
        if (l->param0 < 0)
            continue;
        for (; p < l->param0; p++)
            off += m->params[p].count;
        if (l->kind != TD_L_CONV && l->kind != TD_L_DENSE)
            continue;
        const float *w = snap + off;
        int c, cp;
        size_t rs;
        if (l->kind == TD_L_CONV) {
            c = m->layers[l->in[0]].out.c;
            cp = stored_c(m, L, stem_c);
            rs = (size_t)l->kernel * l->kernel;
        } else if (td_memplan_dense_nhwc(m, L, 2)) {
            c = cp = dense_in(m, L)->c;
            rs = (size_t)dense_in(m, L)->h * dense_in(m, L)->w;
        } else {
            const td_shape *s = &m->layers[l->in[0]].out;
            c = cp = s->c * s->h * s->w; /* as it is: one "tap" */
            rs = 1;
        }
        size_t n = (size_t)l->channels * rs * (size_t)cp;
        long r = td_backend_cuda_read_lowp(be, L, got, cap);
        ck_assert_msg(r == (long)n, "%s: read %ld, expected %zu", l->name, r,
                      n);
        for (size_t i = 0; i < n; i++) {
            size_t o = td_nhwc_to_nchw(i, c, cp, rs);
            uint16_t want = o == (size_t)-1 ? 0 : round16(w[o], dt);
            ck_assert_msg(got[i] == want, "%s %s: copy element %zu (KRSC) "
                          "is 0x%04x, round16(master) 0x%04x", st_dt_name(dt),
                          l->name, i, got[i], want);
        }
        if (before && before[L])
            for (size_t i = 0; i < n; i++)
                changed += got[i] != before[L][i];
        if (keep) {
            free(before[L]);
            before[L] = malloc(n * sizeof *got);
            ck_assert_ptr_nonnull(before[L]);
            memcpy(before[L], got, n * sizeof *got);
        }
    }
    free(got);
    free(snap);
    return changed;
}

/* Frees what a copy case holds: the copies kept per layer (check_copy's
 * before), its batch, its backend and its model. */
static void case_free(uint16_t **before, st_batch *b, td_backend *be,
                      td_model *m)
{
    for (int L = 0; L < m->nlayers; L++)
        free(before[L]);
    free(before);
    st_batch_free(b);
    td_backend_destroy(be);
    td_model_free(m);
}

typedef struct copy_case {
    const char *model;
    enum td_dtype dt;
    int adamw, graphs;
    long updates_per_step; /* update kernel runs a step launches */
} copy_case;

static void copy_run(const copy_case *cc)
{
    td_cuda_register();
    td_model *m = strcmp(cc->model, "chain")
                      ? ref_load_model(cc->model, (td_shape){1, 12, 12}, 10)
                      : chain_model(30);
    td_backend_config c = st_config(4, cc->dt, TD_MATH_FP32);
    td_optim_defaults(&c.optim, cc->adamw ? TD_OPT_ADAMW : TD_OPT_SGD);
    c.optim.lr = COPY_LR;
    if (!cc->adamw)
        c.optim.momentum = 0.9;
    c.cuda_graphs = cc->graphs ? TD_GRAPHS_ON : TD_GRAPHS_OFF;
    long k0 = td_sim_kernel_runs("to_krsc_k");
    td_backend *be = st_make("cuda:0", m, &c);
    long k_create = td_sim_kernel_runs("to_krsc_k") - k0;
    uint16_t **before = calloc((size_t)m->nlayers, sizeof *before);
    ck_assert_ptr_nonnull(before);
    (void)check_copy(be, m, cc->dt, before, 1); /* right after create */
    st_batch b = {.pixel_rows = 1};
    const char *upd = cc->adamw ? "adamw_k" : "sgd_k";
    long k1 = td_sim_kernel_runs("to_krsc_k"), u1 = td_sim_kernel_runs(upd);
    for (int s = 0; s < STEPS; s++)
        st_step(be, m, &b, 4, 100 + (uint64_t)s, COPY_LR, s + 1);
    long rewrites = td_sim_kernel_runs("to_krsc_k") - k1;
    long updates = td_sim_kernel_runs(upd) - u1;
    size_t changed = check_copy(be, m, cc->dt, before, 0);
    td_cuda_graph_info gi;
    ck_assert_int_eq(td_backend_cuda_graph_info(be, &gi), 0);
    if (st_verbose("LOWPCOPY_VERBOSE"))
        printf("%s %s %s %s: to_krsc_k at create %ld, over %d steps %ld; "
               "%s runs %ld; copy elements changed %zu; graph launches "
               "%ld\n", cc->model, st_dt_name(cc->dt),
               cc->adamw ? "adamw" : "sgd", cc->graphs ? "graphs" : "eager",
               k_create, STEPS, rewrites, upd, updates, changed,
               gi.launches);
    ck_assert_int_gt(k_create, 0);  /* the copy built at create */
    ck_assert_int_eq(rewrites, 0);  /* and never rewritten by a step */
    ck_assert_int_eq(updates, STEPS * cc->updates_per_step);
    ck_assert_uint_gt(changed, 0);  /* the steps did move the copy */
    if (cc->graphs) /* the first step captures and launches: all three */
        ck_assert_int_eq(gi.launches, STEPS);
    else
        ck_assert_int_eq(gi.launches, 0);
    case_free(before, &b, be, m);
}

/* fmnist-cnn: 4 convolutions and a dense layer over NHWC, one launch */
static const copy_case fm_cases[] = {
    {"fmnist-cnn", TD_BF16, 0, 0, 1}, {"fmnist-cnn", TD_F16, 0, 0, 1},
    {"fmnist-cnn", TD_BF16, 1, 0, 1}, {"fmnist-cnn", TD_F16, 1, 0, 1},
    {"fmnist-cnn", TD_BF16, 0, 1, 1}, {"fmnist-cnn", TD_F16, 0, 1, 1},
    {"fmnist-cnn", TD_BF16, 1, 1, 1}, {"fmnist-cnn", TD_F16, 1, 1, 1},
};

START_TEST(test_copy_fmnist)
{
    copy_run(&fm_cases[_i]);
}
END_TEST

/* 31 permuted segments (30 filters, the dense layer): TD_LOWP_SEGS (24)
 * in the first launch, the rest in a second */
static const copy_case chain_cases[] = {
    {"chain", TD_BF16, 0, 0, 2}, {"chain", TD_F16, 1, 0, 2},
    {"chain", TD_BF16, 1, 1, 2}, {"chain", TD_F16, 0, 1, 2},
};

START_TEST(test_copy_chain)
{
    copy_run(&chain_cases[_i]);
}
END_TEST

/* A checkpoint of an fp32 job restored into a bf16 one: the copy is
 * rebuilt from the restored masters (to_krsc_k runs at the restore), and
 * stays right over steps after it. */
START_TEST(test_copy_after_precision_change)
{
    td_cuda_register();
    td_model *m = ref_load_model("fmnist-cnn", (td_shape){1, 12, 12}, 10);
    td_backend_config cf = st_config(4, TD_F32, TD_MATH_FP32);
    td_backend_config ct = st_config(4, TD_BF16, TD_MATH_FP32);
    cf.optim.momentum = ct.optim.momentum = 0.9;
    st_batch b = {.pixel_rows = 1};
    double ev[3];
    long k0 = td_sim_kernel_runs("to_krsc_k");
    td_backend *be = st_resume_across(m, &cf, &ct, &b, 4, STEPS, COPY_LR, ev);
    /* create of the bf16 backend and the restore both build the copy */
    long built = td_sim_kernel_runs("to_krsc_k") - k0;
    uint16_t **before = calloc((size_t)m->nlayers, sizeof *before);
    ck_assert_ptr_nonnull(before);
    (void)check_copy(be, m, TD_BF16, before, 1);
    long k1 = td_sim_kernel_runs("to_krsc_k");
    st_step(be, m, &b, 4, 500, COPY_LR, STEPS + 1);
    ck_assert_int_eq(td_sim_kernel_runs("to_krsc_k") - k1, 0);
    size_t changed = check_copy(be, m, TD_BF16, before, 0);
    if (st_verbose("LOWPCOPY_VERBOSE"))
        printf("fp32 -> bf16 restore: to_krsc_k runs %ld (create and "
               "restore), copy elements changed by one step after %zu\n",
               built, changed);
    ck_assert_int_ge(built, 2 * 5); /* 4 convolutions + fc, twice */
    ck_assert_uint_gt(changed, 0);
    case_free(before, &b, be, m);
}
END_TEST

static Suite *lowpcopy_suite(void)
{
    Suite *s = suite_create("sim_lowpcopy");
    TCase *t = tcase_create("host");
    tcase_add_test(t, test_lowp_index_host);
    suite_add_tcase(s, t);
    t = tcase_create("device");
    tcase_set_timeout(t, 120);
    tcase_add_loop_test(t, test_copy_fmnist, 0,
                        (int)(sizeof fm_cases / sizeof fm_cases[0]));
    tcase_add_loop_test(t, test_copy_chain, 0,
                        (int)(sizeof chain_cases / sizeof chain_cases[0]));
    tcase_add_test(t, test_copy_after_precision_change);
    suite_add_tcase(s, t);
    return s;
}

TD_TEST_MAIN(lowpcopy_suite)
