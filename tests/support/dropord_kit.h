/* dropord_kit.h - what test_dropord (CPU layouts) and test_sim_dropord
 * (CPU against the simulated CUDA device) share to compare dropout masks:
 * four small models with a dropout layer named "dr", reading a backend's
 * mask from one training step, and the mask the NCHW-index draw gives.
 *
 * How a mask is read: every parameter is set to 0.05 and the pixels to
 * 255 (with mean 0 and std 1: every input 1), so every input of the
 * dropout is > 0 (checked); one train step at lr 0, and the dropout's
 * output (read in NCHW order) is zero exactly where it dropped.
 * Never does: create backends (each suite has its own configuration).
 */
#ifndef TD_DROPORD_KIT_H
#define TD_DROPORD_KIT_H

#include <check.h>
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "base/rng.h"
#include "eltwise.h"
#include "model/model.h"

enum { DK_BATCH = 4, DK_H = 6, DK_W = 5, DK_CLASSES = 3, DK_NMODELS = 5 };
#define DK_SEED UINT64_C(0x5eed)

/* Dropout on a spatial tensor of 32 channels (blocked by 16 in the CPU's
 * fp32), of 12 (a padded last block), after a flatten (a 4-D memory read
 * as 2-D), after a dense layer (2-D), and on the 3-channel input (plain
 * nchw in the CPU's fp32; the GPU's 16-bit NHWC input has 8 channels,
 * 5 of them padding). */
static const char *const dk_json[DK_NMODELS] = {
    "{\"layers\": [{\"type\": \"conv2d\", \"channels\": 32, \"kernel\": 3, "
    "\"pad\": 1, \"bias\": true}, {\"type\": \"dropout\", \"name\": \"dr\", "
    "\"rate\": 0.5}, {\"type\": \"flatten\"}, {\"type\": \"dense\", "
    "\"units\": \"classes\"}]}",
    "{\"layers\": [{\"type\": \"conv2d\", \"channels\": 12, \"kernel\": 3, "
    "\"pad\": 1, \"bias\": true}, {\"type\": \"dropout\", \"name\": \"dr\", "
    "\"rate\": 0.3}, {\"type\": \"flatten\"}, {\"type\": \"dense\", "
    "\"units\": \"classes\"}]}",
    "{\"layers\": [{\"type\": \"conv2d\", \"channels\": 16, \"kernel\": 3, "
    "\"pad\": 1, \"bias\": true}, {\"type\": \"flatten\"}, {\"type\": "
    "\"dropout\", \"name\": \"dr\", \"rate\": 0.5}, {\"type\": \"dense\", "
    "\"units\": \"classes\"}]}",
    "{\"layers\": [{\"type\": \"dense\", \"units\": 40}, {\"type\": "
    "\"dropout\", \"name\": \"dr\", \"rate\": 0.25}, {\"type\": \"dense\", "
    "\"units\": \"classes\"}]}",
    "{\"layers\": [{\"type\": \"dropout\", \"name\": \"dr\", \"rate\": 0.5}, "
    "{\"type\": \"conv2d\", \"channels\": 8, \"kernel\": 3, \"pad\": 1}, "
    "{\"type\": \"global_avgpool\"}, {\"type\": \"dense\", \"units\": "
    "\"classes\"}]}",
};
static const char *const dk_name[DK_NMODELS] = {"conv32", "conv12",
                                                "flatten", "dense", "input"};

static inline td_model *dk_model(int k)
{
    json_error_t je;
    json_t *def = json_loads(dk_json[k], 0, &je);
    ck_assert_msg(def != NULL, "%s", je.text);
    td_model *m = NULL;
    char err[256];
    ck_assert_msg(td_model_build(def, (td_shape){3, DK_H, DK_W}, DK_CLASSES,
                                 &m, err, sizeof err) == 0, "%s", err);
    json_decref(def);
    return m;
}

/* The configuration fields the masks depend on (mean 0, std 1, seed). */
static inline void dk_config(td_backend_config *c)
{
    for (int i = 0; i < 4; i++)
        c->mean[i] = 0.0f, c->std[i] = 1.0f;
    c->seed = DK_SEED;
    c->batch = DK_BATCH;
    /* reference kernels allowed: on avx512_core_bf16 (AMD Zen 4/5) oneDNN
     * 2.6 has nothing else for conv32's 3-channel stem's backward weights,
     * and these tests are about the masks, not speed */
    c->allow_slow_bf16 = 1;
}

/* Every parameter 0.05. */
static inline void dk_params(td_backend *be, const td_model *m)
{
    for (int p = 0; p < m->nparams; p++) {
        size_t n = m->params[p].count;
        float *v = malloc(n * sizeof *v);
        ck_assert(v != NULL);
        for (size_t i = 0; i < n; i++)
            v[i] = 0.05f;
        ck_assert_int_eq(be->ops->write_param(be, p, v, n), 0);
        free(v);
    }
}

static inline size_t dk_count(const td_model *m)
{
    td_shape s = m->layers[td_model_find(m, "dr")].out;
    return (size_t)DK_BATCH * s.c * s.h * s.w;
}

/* One train step t at lr 0 on white pixels; mask[i] = the dropout kept
 * NCHW element i. */
static inline void dk_step_mask(td_backend *be, const td_model *m, int64_t t,
                                uint8_t *mask)
{
    static uint8_t px[DK_BATCH * 3 * DK_H * DK_W];
    int32_t lab[DK_BATCH] = {0};
    memset(px, 255, sizeof px);
    td_batch b = {.data = px, .labels = lab, .n = DK_BATCH, .h = DK_H,
                  .w = DK_W, .c = 3};
    int dr = td_model_find(m, "dr");
    size_t n = dk_count(m);
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    ck_assert(x && y);
    ck_assert_int_eq(td_backend_upload(be, &b), 0);
    ck_assert_msg(td_backend_train_step(be, 0.0f, t) == 0, "%s", be->err);
    ck_assert_msg(be->ops->read_tensor(be, TD_T_VALUE, dr - 1, x, n) == 0,
                  "%s", be->err);
    ck_assert_msg(be->ops->read_tensor(be, TD_T_VALUE, dr, y, n) == 0, "%s",
                  be->err);
    for (size_t i = 0; i < n; i++) {
        ck_assert_msg(x[i] > 0.0f, "dropout input %zu is %g, not > 0", i,
                      (double)x[i]);
        mask[i] = y[i] != 0.0f;
    }
    free(x);
    free(y);
}

/* The draw by NCHW index (kernels/eltwise.h) at step t (1-based). */
static inline void dk_expected_mask(const td_model *m, int64_t t,
                                    uint8_t *mask)
{
    int dr = td_model_find(m, "dr");
    size_t n = dk_count(m);
    uint64_t stream = td_rng_stream(TD_RNG_DROPOUT, (uint64_t)dr);
    float keep = 1.0f - m->layers[dr].rate;
    for (size_t i = 0; i < n; i++)
        mask[i] = (uint8_t)td_dropout_keep(DK_SEED, stream,
                                           (uint64_t)(t - 1) * n + i, keep);
}

/* Elements where a and b differ; *kept = elements a keeps. */
static inline size_t dk_diff(const uint8_t *a, const uint8_t *b, size_t n,
                             size_t *kept)
{
    size_t d = 0;
    *kept = 0;
    for (size_t i = 0; i < n; i++) {
        d += a[i] != b[i];
        *kept += a[i];
    }
    return d;
}

#endif
