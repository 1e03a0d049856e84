/* test_dropord.c - the CPU backend's dropout masks are drawn by each
 * element's canonical NCHW index (kernels/eltwise.h, the CUDA backend's
 * draw), whatever physical layout oneDNN keeps the tensor in: the same
 * seed and step drop the same activations in fp32 (blocked nChw16c /
 * nChw8c, with pad channels), in bf16 (channels-last nhwc on AMX), for
 * 2-D tensors, after a flatten and on the plain nchw input; a resumed
 * backend continues the masks (the draw is by global step).  The CPU
 * against the simulated GPU: test_sim_dropord.
 *
 * The models and how a mask is read: tests/support/dropord_kit.h.  One
 * OpenMP thread unless said.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/caps.h"
#include "base/log.h"
#include "dropord_kit.h"
#include "tdtest.h"

/* The dropout's plan line ("cpu backend: dr dropout: LAYOUT ..."). */
static char g_plan[256];
static void sink(void *user, int level, long job, const char *line)
{
    (void)user;
    (void)level;
    (void)job;
    const char *at = strstr(line, "cpu backend: dr dropout: ");
    if (at)
        snprintf(g_plan, sizeof g_plan, "%s", at);
}

static td_backend *make(const td_model *m, enum td_dtype dt, int threads)
{
    td_backend_config cfg = {.threads = threads, .dtype = dt};
    dk_config(&cfg);
    td_optim_defaults(&cfg.optim, TD_OPT_SGD);
    td_backend *be = NULL;
    char err[256];
    g_plan[0] = 0;
    td_log_set_level(TD_LOG_DEBUG);
    td_log_set_sink(sink, NULL);
    int rc = td_backend_create("cpu", m, &cfg, &be, err, sizeof err);
    td_log_set_sink(NULL, NULL);
    td_log_set_level(TD_LOG_INFO);
    ck_assert_msg(rc == 0, "%s", err);
    ck_assert_msg(g_plan[0], "no plan line for the dropout");
    dk_params(be, m);
    return be;
}

/* The plan line's layout part. */
static const char *layout_of(const char *plan)
{
    return plan + strlen("cpu backend: dr dropout: ");
}

/* The integer threshold decides exactly as the double compare, for every
 * keep a float rate gives (1 - rate), at the edges of its range too. */
START_TEST(test_threshold_is_the_double_compare)
{
    const float keeps[] = {1.0f, 0.75f, 0.5f, 0.7f, 0.1f, 1.0f / 3,
                           0x1p-24f, 1.0f - 0x1p-24f, 0.999f};
    for (size_t k = 0; k < sizeof keeps / sizeof *keeps; k++) {
        uint64_t thr = td_dropout_threshold(keeps[k]);
        /* bits thr - 1 is below keep, thr is not */
        ck_assert((double)(thr - 1) * 0x1p-53 < (double)keeps[k]);
        ck_assert((double)thr * 0x1p-53 >= (double)keeps[k]);
        for (uint64_t i = 0; i < 200000; i++)
            ck_assert_int_eq(td_dropout_keep_thr(DK_SEED, 7, i, thr),
                             td_dropout_keep(DK_SEED, 7, i, keeps[k]));
    }
}
END_TEST

/* fp32: each model's mask is the NCHW-index draw, on 1 and 2 threads,
 * at steps 1 and 1000; the 32-channel conv is blocked (so the check
 * reaches the mapping). */
START_TEST(test_fp32_masks_by_nchw_index)
{
    for (int k = 0; k < DK_NMODELS; k++) {
        td_model *m = dk_model(k);
        int dr = td_model_find(m, "dr");
        size_t n = dk_count(m), kept;
        uint8_t *got = malloc(n), *want = malloc(n);
        for (int threads = 1; threads <= 2; threads++) {
            td_backend *be = make(m, TD_F32, threads);
            if (k == 0)
                ck_assert_msg(strstr(g_plan, "blocked"), "conv32 in fp32 is "
                              "not blocked: %s", g_plan);
            const int64_t steps[2] = {1, 1000};
            for (int s = 0; s < 2; s++) {
                dk_step_mask(be, m, steps[s], got);
                dk_expected_mask(m, steps[s], want);
                size_t d = dk_diff(got, want, n, &kept);
                ck_assert_msg(d == 0, "%s fp32 (%s), %d threads, step %lld: "
                              "%zu of %zu masks differ from the NCHW draw",
                              dk_name[k], g_plan, threads,
                              (long long)steps[s], d, n);
                /* the rate is really applied: kept within 5 sigma */
                double p = 1.0 - m->layers[dr].rate;
                double sd = sqrt(n * p * (1 - p));
                ck_assert_msg(fabs((double)kept - n * p) < 5 * sd,
                              "%s: %zu of %zu kept, rate %.2f", dk_name[k],
                              kept, n, (double)m->layers[dr].rate);
            }
            if (threads == 1)
                printf("%s fp32: %s; %zu of %zu kept at step 1000, "
                       "0 differ from the NCHW draw\n", dk_name[k],
                       layout_of(g_plan), kept, n);
            td_backend_destroy(be);
        }
        free(got);
        free(want);
        td_model_free(m);
    }
}
END_TEST

/* bf16 (channels-last on AMX) against fp32 (blocked): bitwise the same
 * masks, and the NCHW draw. */
START_TEST(test_bf16_masks_equal_fp32)
{
    int amx = strcmp(td_cpu_caps_get()->isa, "avx512_core_amx") == 0;
    if (!td_cpu_caps_get()->bf16) {
        printf("SKIP bf16 vs fp32 masks: no native bf16 in oneDNN here\n");
        return;
    }
    for (int k = 0; k < DK_NMODELS; k++) {
        td_model *m = dk_model(k);
        size_t n = dk_count(m), kept;
        uint8_t *a = malloc(n), *b = malloc(n);
        td_backend *f = make(m, TD_F32, 1);
        char fplan[256];
        snprintf(fplan, sizeof fplan, "%s", g_plan);
        td_backend *h = make(m, TD_BF16, 1);
        if (amx && k < 2)
            ck_assert_msg(strstr(g_plan, "channels-last"), "%s bf16 on AMX "
                          "is not channels-last: %s", dk_name[k], g_plan);
        for (int64_t t = 1; t <= 3; t++) {
            dk_step_mask(f, m, t, a);
            dk_step_mask(h, m, t, b);
            size_t d = dk_diff(a, b, n, &kept);
            ck_assert_msg(d == 0, "%s step %lld: %zu of %zu masks differ, "
                          "fp32 (%s) vs bf16 (%s)", dk_name[k],
                          (long long)t, d, n, fplan, g_plan);
        }
        printf("%s: fp32 %s vs bf16 %s: 0 of %zu masks differ (%zu kept at "
               "step 3)\n", dk_name[k],
               layout_of(fplan),
               layout_of(g_plan), n, kept);
        td_backend_destroy(f);
        td_backend_destroy(h);
        free(a);
        free(b);
        td_model_free(m);
    }
}
END_TEST

/* A backend restored from a snapshot taken after step 2 continues with
 * step 3's masks, the uninterrupted run's; the masks move with the step. */
START_TEST(test_resume_continues_masks)
{
    td_model *m = dk_model(0);
    size_t n = dk_count(m), kept;
    uint8_t *a = malloc(n), *b = malloc(n), *a2 = malloc(n);
    td_backend *run = make(m, TD_F32, 1);
    dk_step_mask(run, m, 1, a2);
    dk_step_mask(run, m, 2, a2);
    size_t sn = td_backend_snapshot_floats(m, &run->cfg.optim);
    float *snap = malloc(sn * sizeof *snap);
    ck_assert_int_eq(run->ops->snapshot(run, snap, sn), 0);
    dk_step_mask(run, m, 3, a);
    td_backend *resumed = make(m, TD_F32, 1);
    ck_assert_int_eq(resumed->ops->restore(resumed, snap, sn), 0);
    dk_step_mask(resumed, m, 3, b);
    ck_assert_uint_eq(dk_diff(a, b, n, &kept), 0);
    size_t moved = dk_diff(a, a2, n, &kept);
    ck_assert_msg(moved > n / 4, "steps 2 and 3 differ in only %zu of %zu",
                  moved, n);
    printf("resume: step 3 after a restore: 0 of %zu masks differ; steps 2 "
           "and 3 differ in %zu\n", n, moved);
    td_backend_destroy(run);
    td_backend_destroy(resumed);
    free(snap);
    free(a);
    free(b);
    free(a2);
    td_model_free(m);
}
END_TEST

/* Rate 0 (keep 1: the lanes' keep-all threshold 2^53) keeps every
 * element, blocked in fp32; rate 0.9 keeps about a tenth. */
START_TEST(test_rate_edges)
{
    const char *rates[2] = {"0", "0.9"};
    for (int r = 0; r < 2; r++) {
        char js[512];
        snprintf(js, sizeof js, "{\"layers\": [{\"type\": \"conv2d\", "
                 "\"channels\": 32, \"kernel\": 3, \"pad\": 1}, {\"type\": "
                 "\"dropout\", \"name\": \"dr\", \"rate\": %s}, {\"type\": "
                 "\"flatten\"}, {\"type\": \"dense\", \"units\": 3}]}",
                 rates[r]);
        json_error_t je;
        json_t *def = json_loads(js, 0, &je);
        ck_assert_msg(def != NULL, "%s", je.text);
        td_model *m = NULL;
        char err[256];
        ck_assert_msg(td_model_build(def, (td_shape){3, DK_H, DK_W},
                                     DK_CLASSES, &m, err, sizeof err) == 0,
                      "%s", err);
        json_decref(def);
        size_t n = dk_count(m), kept;
        uint8_t *got = malloc(n), *want = malloc(n);
        td_backend *be = make(m, TD_F32, 2);
        dk_step_mask(be, m, 7, got);
        dk_expected_mask(m, 7, want);
        ck_assert_uint_eq(dk_diff(got, want, n, &kept), 0);
        if (r == 0)
            ck_assert_uint_eq(kept, n);
        else /* binomial(3840, 0.1): 384 +- 19 */
            ck_assert_msg(kept > 384 - 5 * 19 && kept < 384 + 5 * 19,
                          "rate 0.9: %zu of %zu kept", kept, n);
        printf("rate %s: %zu of %zu kept, 0 differ from the NCHW draw\n",
               rates[r], kept, n);
        td_backend_destroy(be);
        free(got);
        free(want);
        td_model_free(m);
    }
}
END_TEST

static Suite *dropord_suite(void)
{
    Suite *s = suite_create("dropord");
    TCase *tc = tcase_create("dropord");
    tcase_add_test(tc, test_threshold_is_the_double_compare);
    tcase_add_test(tc, test_fp32_masks_by_nchw_index);
    tcase_add_test(tc, test_bf16_masks_equal_fp32);
    tcase_add_test(tc, test_resume_continues_masks);
    tcase_add_test(tc, test_rate_edges);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(dropord_suite)
