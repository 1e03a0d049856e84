/* test_memplan.c - the host-side device memory plan (backend/memplan.h).
 *
 * The plan is checked by replaying one training step over the arena, as
 * the CUDA backend runs it (cuda_step.c: forward in layer order, the loss,
 * backward in reverse, each gradient written by its input's last reader and
 * accumulated by the others): every 256-byte block remembers which buffer
 * last wrote it, and every read must find the buffer it expects.  The
 * replay does not use the plan's lifetimes, only its offsets, so a wrong
 * lifetime shows up as a clobbered read.
 */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/memplan.h"
#include "model/model.h"
#include "tdtest.h"

static td_model *load(const char *name, td_shape in, int classes)
{
    char zoo[4096], err[512];
    const char *root = getenv("TD_SOURCE_ROOT");
    snprintf(zoo, sizeof zoo, "%s/config/models", root ? root : ".");
    td_model *m = NULL;
    int rc = td_model_load(zoo, name, in, classes, &m, err, sizeof err);
    ck_assert_msg(rc == 0, "%s: %s", name, err);
    return m;
}

static td_memplan plan(const td_model *m, int batch, int act, int reuse)
{
    td_memplan_config c = {.batch = batch, .act_bytes = act,
                           .optim_slots = 1, .reuse = reuse, .nbuf = 2,
                           .workspace = 1 << 20, .blas_workspace = 1 << 20,
                           .headroom_min = 0};
    td_memplan p;
    char err[256];
    ck_assert_msg(td_memplan_build(m, &c, &p, err, sizeof err) == 0, "%s",
                  err);
    return p;
}

/* ---- the replay ---------------------------------------------------------- */

typedef struct replay {
    const td_model *m;
    const td_memplan *p;
    int *owner;     /* per 256-byte block: buffer index (after aliasing) */
    size_t blocks;
    int *root;
    int failures;
} replay;

static int canon(const replay *r, int i)
{
    return r->p->bufs[i].alias >= 0 ? r->p->bufs[i].alias : i;
}

static int find(const replay *r, enum td_membuf_kind k, int layer)
{
    for (int i = 0; i < r->p->nbufs; i++)
        if (r->p->bufs[i].kind == k && r->p->bufs[i].layer == layer)
            return i;
    return -1;
}

static void wr(replay *r, int i)
{
    const td_membuf *b = &r->p->bufs[i];
    for (size_t k = b->offset / 256; k < (b->offset + b->bytes + 255) / 256;
         k++)
        r->owner[k] = canon(r, i);
}

static void rd(replay *r, int i, const char *when, int L)
{
    const td_membuf *b = &r->p->bufs[i];
    for (size_t k = b->offset / 256; k < (b->offset + b->bytes + 255) / 256;
         k++)
        if (r->owner[k] != canon(r, i)) {
            if (r->failures++ < 5)
                fprintf(stderr, "%s of layer %d: buffer %d (kind %d of layer "
                        "%d) was overwritten by buffer %d\n", when, L, i,
                        b->kind, b->layer, r->owner[k]);
            return;
        }
}

static int reads_x(enum td_layer_kind k)
{
    return k == TD_L_CONV || k == TD_L_DENSE || k == TD_L_BN ||
           k == TD_L_RELU || k == TD_L_MAXPOOL || k == TD_L_AVGPOOL ||
           k == TD_L_GAP;
}

static void run_step(replay *r)
{
    const td_model *m = r->m;
    const int N = m->nlayers;
    int *written = calloc((size_t)N, sizeof *written);
    r->root = malloc(sizeof *r->root * (size_t)N);
    for (int L = 0; L < N; L++)
        r->root[L] = m->layers[L].kind == TD_L_FLATTEN
                         ? r->root[m->layers[L].in[0]] : L;
    wr(r, find(r, TD_MB_Y, 0)); /* the normalise kernel */
    for (int L = 1; L < N; L++) {
        const td_layer *l = &m->layers[L];
        if (r->root[L] != L)
            continue;
        for (int i = 0; i < 2 && l->in[i] >= 0; i++)
            rd(r, find(r, TD_MB_Y, r->root[l->in[i]]), "forward", L);
        wr(r, find(r, TD_MB_Y, L));
        if (l->kind == TD_L_DROPOUT)
            wr(r, find(r, TD_MB_MASK, L));
    }
    int top = r->root[N - 1];
    rd(r, find(r, TD_MB_Y, top), "loss", N);
    wr(r, find(r, TD_MB_DY, top));
    written[top] = 1;
    for (int L = N - 1; L >= 1; L--) {
        const td_layer *l = &m->layers[L];
        if (r->root[L] != L)
            continue;
        rd(r, find(r, TD_MB_DY, L), "backward (dy)", L);
        if (reads_x(l->kind))
            rd(r, find(r, TD_MB_Y, r->root[l->in[0]]), "backward (x)", L);
        if (l->kind == TD_L_RELU || l->kind == TD_L_MAXPOOL ||
            l->kind == TD_L_AVGPOOL || l->kind == TD_L_GAP)
            rd(r, find(r, TD_MB_Y, L), "backward (y)", L);
        if (l->kind == TD_L_DROPOUT)
            rd(r, find(r, TD_MB_MASK, L), "backward (mask)", L);
        for (int i = 0; i < 2 && l->in[i] >= 0; i++) {
            int P = r->root[l->in[i]];
            if (P == 0)
                continue;
            int d = find(r, TD_MB_DY, P);
            if (written[P]++)
                rd(r, d, "backward (accumulate)", L);
            wr(r, d);
        }
    }
    free(written);
    free(r->root);
}

static int replay_plan(const td_model *m, const td_memplan *p)
{
    size_t end = 0;
    for (int i = 0; i < p->nbufs; i++)
        if (p->bufs[i].offset + p->bufs[i].bytes > end)
            end = p->bufs[i].offset + p->bufs[i].bytes;
    replay r = {m, p, NULL, end / 256 + 1, NULL, 0};
    r.owner = malloc(sizeof *r.owner * r.blocks);
    for (size_t k = 0; k < r.blocks; k++)
        r.owner[k] = -1;
    run_step(&r);
    free(r.owner);
    return r.failures;
}

/* ---- tests ----------------------------------------------------------------- */

START_TEST(test_replay_finds_no_clobbered_read)
{
    struct { const char *name; td_shape in; int batch; } cases[] = {
        {"fmnist-cnn", {1, 28, 28}, 8},
        {"resnet20", {3, 32, 32}, 4},
        {"resnet18", {3, 64, 64}, 2},
        {"resnet50", {3, 64, 64}, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        td_model *m = load(cases[i].name, cases[i].in, 10);
        for (int act = 2; act <= 4; act += 2) {
            td_memplan p = plan(m, cases[i].batch, act, 1);
            ck_assert_msg(replay_plan(m, &p) == 0, "%s, %d-byte: the plan "
                          "lets a buffer be overwritten while still needed",
                          cases[i].name, act);
            td_memplan_free(&p);
        }
        td_model_free(m);
    }
}
END_TEST

START_TEST(test_replay_catches_a_broken_plan)
{
    /* The replay must be able to fail: put every buffer at offset 0. */
    td_model *m = load("resnet20", (td_shape){3, 32, 32}, 10);
    td_memplan p = plan(m, 2, 4, 1);
    for (int i = 0; i < p.nbufs; i++)
        p.bufs[i].offset = 0;
    ck_assert_int_gt(replay_plan(m, &p), 0);
    td_memplan_free(&p);
    td_model_free(m);
}
END_TEST

START_TEST(test_live_buffers_never_share_memory)
{
    td_model *m = load("resnet50", (td_shape){3, 224, 224}, 1000);
    td_memplan p = plan(m, 4, 2, 1);
    int pairs = 0;
    for (int i = 0; i < p.nbufs; i++)
        for (int j = i + 1; j < p.nbufs; j++) {
            const td_membuf *a = &p.bufs[i], *b = &p.bufs[j];
            if (a->alias >= 0 || b->alias >= 0 ||
                !td_membuf_overlap_in_time(a, b))
                continue;
            pairs++;
            ck_assert_msg(a->offset + a->bytes <= b->offset ||
                              b->offset + b->bytes <= a->offset,
                          "buffers %d and %d are live together and overlap",
                          i, j);
        }
    ck_assert_int_gt(pairs, 100);
    /* In-place ReLUs: each shares its input's buffer, which nothing else
     * reads. */
    int inplace = 0;
    for (int i = 0; i < p.nbufs; i++) {
        if (p.bufs[i].alias < 0)
            continue;
        const td_layer *l = &m->layers[p.bufs[i].layer];
        ck_assert_int_eq(l->kind, TD_L_RELU);
        ck_assert_int_eq(m->layers[l->in[0]].consumers, 1);
        ck_assert_int_eq(p.bufs[p.bufs[i].alias].layer, l->in[0]);
        inplace += p.bufs[i].kind == TD_MB_Y;
    }
    ck_assert_int_gt(inplace, 30); /* resnet50: every conv-bn-relu */
    td_memplan_free(&p);
    td_model_free(m);
}
END_TEST

START_TEST(test_resnet50_bf16_plan_against_fp32_per_layer)
{
    /* Issue 15's target: resnet50, batch 256, bf16 planned <= 45% of what
     * fp32 needs with a y and a dy per layer for the whole step. */
    td_model *m = load("resnet50", (td_shape){3, 224, 224}, 1000);
    td_memplan_config c = {.batch = 256, .act_bytes = 2, .optim_slots = 1,
                           .reuse = 1, .nbuf = 2, .workspace = 256u << 20,
                           .blas_workspace = 32u << 20,
                           .headroom_min = 512u << 20};
    td_memplan bf, fp;
    ck_assert_int_eq(td_memplan_build(m, &c, &bf, NULL, 0), 0);
    c.act_bytes = 4;
    c.reuse = 0;
    ck_assert_int_eq(td_memplan_build(m, &c, &fp, NULL, 0), 0);
    printf("resnet50 b256: bf16 plan %.2f GiB, fp32 per layer %.2f GiB "
           "(%.1f%%)\n", bf.total / 1073741824.0, fp.total / 1073741824.0,
           100.0 * (double)bf.total / (double)fp.total);
    fflush(stdout);
    ck_assert_double_le((double)bf.total, 0.45 * (double)fp.total);
    /* The per-layer layout is what the CUDA backend carved before: y and
     * dy of every layer, ~288 MiB per sample for resnet50 in fp32. */
    ck_assert_double_gt(fp.activations / 256.0 / 1048576.0, 250);
    ck_assert_double_lt(fp.activations / 256.0 / 1048576.0, 320);
    ck_assert_uint_eq(fp.activations, fp.activations_sum);
    ck_assert_uint_lt(bf.activations, bf.activations_sum / 2);
    td_memplan_free(&bf);
    td_memplan_free(&fp);
    td_model_free(m);
}
END_TEST

START_TEST(test_relu_on_a_shared_flatten_not_in_place)
{
    /* c1's buffers are read by r1 and by d2, both through the flatten fl:
     * r1 in place would overwrite the value d2 reads after it.  (The
     * in-place rule once counted c1's consumers: one, the flatten.) */
    const char *def =
        "{\"name\": \"flat-shared\", \"layers\": ["
        "{\"type\": \"conv2d\", \"name\": \"c1\", \"channels\": 4,"
        " \"kernel\": 3},"
        "{\"type\": \"flatten\", \"name\": \"fl\"},"
        "{\"type\": \"relu\", \"name\": \"r1\"},"
        "{\"type\": \"dense\", \"name\": \"d1\", \"units\": \"classes\"},"
        "{\"type\": \"dense\", \"name\": \"d2\", \"units\": \"classes\","
        " \"input\": \"fl\"},"
        "{\"type\": \"add\", \"name\": \"out\", \"inputs\": [\"d1\","
        " \"d2\"]}]}";
    char err[256] = "";
    json_t *j = json_loads(def, 0, NULL);
    ck_assert_ptr_nonnull(j);
    td_model *m = NULL;
    ck_assert_msg(td_model_build(j, (td_shape){1, 8, 8}, 5, &m, err,
                                 sizeof err) == 0, "%s", err);
    json_decref(j);
    td_memplan p = plan(m, 4, 4, 1);
    for (int i = 0; i < p.nbufs; i++)
        ck_assert_msg(p.bufs[i].alias < 0, "buffer %d (kind %d of layer "
                      "%d) shares its input's in place", i, p.bufs[i].kind,
                      p.bufs[i].layer);
    ck_assert_int_eq(replay_plan(m, &p), 0);
    td_memplan_free(&p);
    td_model_free(m);
}
END_TEST

START_TEST(test_bill_adds_up_and_bad_config)
{
    td_model *m = load("fmnist-cnn", (td_shape){1, 28, 28}, 10);
    td_memplan p = plan(m, 64, 2, 1);
    ck_assert_uint_eq(p.params, (m->param_count * 4 + 255) / 256 * 256);
    /* in 16 bits the 1-channel batch is stored with 8 (NHWC, the stem
     * padded for tensor cores) and conv1's KRSC filter with it: 32 x 3 x
     * 3 x 8 elements after the copy and after the 16-bit gradients */
    ck_assert_int_eq(td_memplan_stem_channels(m, 2), 8);
    ck_assert_int_eq(td_memplan_stem_channels(m, 4), 1);
    size_t extra = td_memplan_stem_extra(m, 2);
    ck_assert_uint_eq(extra, 32 * 3 * 3 * 8);
    ck_assert_uint_eq(p.weights_lp,
                      ((m->param_count + extra) * 2 + 255) / 256 * 256);
    /* fp32 gradients and the 16-bit ones convolutions write */
    ck_assert_uint_eq(p.grads, (m->param_count * 4 + 255) / 256 * 256 +
                                   ((m->param_count + extra) * 2 + 255) /
                                       256 * 256);
    for (int i = 0; i < p.nbufs; i++)
        if (p.bufs[i].layer == 0 && p.bufs[i].kind == TD_MB_Y)
            ck_assert_uint_eq(p.bufs[i].bytes, 64 * 8 * 28 * 28 * 2);
    ck_assert_uint_eq(p.total, p.params + p.grads + p.optim + p.weights_lp +
                                   p.state + p.shadow + p.batches +
                                   p.activations + p.workspace + p.scratch +
                                   p.headroom);
    /* 64 losses (double) and flags (int), the 24-byte counters, 256-byte
     * aligned each; no batch norm in inference mode; in 16 bits the loss's
     * fp32 logits and gradient, 64 x 10 floats each, and the dense
     * layer's permuted fp32 weight gradient (it reads the NHWC flatten of
     * 64 x 7 x 7: 10 x 3136 floats) */
    ck_assert_uint_eq(td_memplan_dense_scratch(m, 2), 10 * 3136);
    ck_assert_uint_eq(p.scratch, 512 + 256 + 256 + 2 * 2560 + 125440);
    td_memplan_free(&p);
    p = plan(m, 64, 4, 1);
    ck_assert_uint_eq(p.grads, (m->param_count * 4 + 255) / 256 * 256);
    ck_assert_uint_eq(p.weights_lp, 0);
    ck_assert_uint_eq(p.scratch, 512 + 256 + 256);
    td_memplan_free(&p);
    td_memplan_config bad = {.batch = 0, .act_bytes = 3, .nbuf = 2};
    char err[256] = "";
    ck_assert_int_eq(td_memplan_build(m, &bad, &p, err, sizeof err),
                     -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "out of range"));
    td_model_free(m);
}
END_TEST

static Suite *memplan_suite(void)
{
    Suite *s = suite_create("memplan");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_replay_finds_no_clobbered_read);
    tcase_add_test(tc, test_replay_catches_a_broken_plan);
    tcase_add_test(tc, test_live_buffers_never_share_memory);
    tcase_add_test(tc, test_resnet50_bf16_plan_against_fp32_per_layer);
    tcase_add_test(tc, test_relu_on_a_shared_flatten_not_in_place);
    tcase_add_test(tc, test_bill_adds_up_and_bad_config);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(memplan_suite)
