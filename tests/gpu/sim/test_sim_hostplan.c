/* test_sim_hostplan.c - the host's memory plan (`trainctl plan`) bills
 * what the CUDA backend allocates, fused batch norms' reserve spaces
 * included (issue 15, cudafix 2), on the simulated device.
 *
 * What is checked, for fp16 jobs where cuDNN's batch norm fusion applies
 * (resnet20 at 3x16x16: BN_ACTIVATION and BN_ADD_ACTIVATION; fmnist-cnn
 * at 1x12x12: BN_ACTIVATION) and a bf16 one (no fusion):
 *   - td_memplan_fp16_bn_reserves names exactly the batch norms the
 *     backend fused, with the reserve-space bytes the simulated cuDNN
 *     asked for (the plan's TD_MB_RESERVE buffers of the backend's plan);
 *   - the host plan's activation region equals the backend's, byte for
 *     byte, and its bill (with the backend's real cuDNN workspace and
 *     per-step bytes, the two figures only the device knows) less the
 *     headroom equals the arena the backend allocated;
 *   - `trainctl plan --json` (the binary) prints that activation region,
 *     and its total less headroom, workspace and scratch equals the
 *     arena's same part;
 *   - a host plan without the reserve spaces (what `trainctl plan`
 *     printed before) is short of the backend's region for the fused
 *     jobs, equal for the bf16 one.
 * HOSTPLAN_VERBOSE=1 prints the figures.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cuda/backend_cuda.h"
#include "backend/memplan.h"
#include "model/model.h"
#include "ref_models.h"
#include "sim_testkit.h"
#include "tdtest.h"

typedef struct plan_case {
    const char *model;
    td_shape in;
    enum td_dtype dt;
    int fused; /* batch norms the backend fuses */
} plan_case;

static const plan_case cases[] = {
    {"resnet20", {3, 16, 16}, TD_F16, 19},
    {"fmnist-cnn", {1, 12, 12}, TD_F16, 4},
    {"resnet20", {3, 16, 16}, TD_BF16, 0},
};

/* The bytes of layer L's reserve buffer in plan p, 0 when it has none. */
static size_t reserve_of(const td_memplan *p, int L)
{
    for (int i = 0; i < p->nbufs; i++)
        if (p->bufs[i].kind == TD_MB_RESERVE && p->bufs[i].layer == L)
            return p->bufs[i].bytes;
    return 0;
}

/* `trainctl plan` of the case as JSON (the built binary); NULL when the
 * build root is not known. */
static json_t *trainctl_plan(const plan_case *pc, int batch)
{
    const char *root = getenv("TD_BUILD_ROOT");
    const char *src = getenv("TD_SOURCE_ROOT");
    if (!root || !src)
        return NULL;
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "TD_MODELS_DIR=%s/config/models "
             "%s/client/trainctl plan %s --batch %d --precision %s "
             "--input %dx%dx%d --classes 10 --optimizer momentum "
             "--workspace-mib 0 --json", src, root, pc->model, batch,
             st_dt_name(pc->dt), pc->in.c, pc->in.h, pc->in.w);
    FILE *f = popen(cmd, "r");
    ck_assert_ptr_nonnull(f);
    json_error_t e;
    json_t *j = json_loadf(f, 0, &e);
    ck_assert_int_eq(pclose(f), 0);
    ck_assert_msg(j != NULL, "trainctl plan: %s", e.text);
    return j;
}

static size_t jsize(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    ck_assert_msg(json_is_integer(v), "no %s", k);
    return (size_t)json_integer_value(v);
}

START_TEST(test_host_plan_is_the_arena)
{
    const plan_case *pc = &cases[_i];
    const int batch = 4;
    td_cuda_register();
    td_model *m = ref_load_model(pc->model, pc->in, 10);
    td_backend_config c = st_config(batch, pc->dt, TD_MATH_FP32);
    td_backend *be = st_make("cuda:0", m, &c);
    const td_memplan *bp = td_backend_cuda_plan(be);
    ck_assert_ptr_nonnull(bp);
    size_t arena = td_backend_cuda_arena_bytes(be);

    /* the host's reserve spaces: the backend's, layer by layer */
    size_t *rsv = calloc((size_t)m->nlayers, sizeof *rsv);
    ck_assert_ptr_nonnull(rsv);
    if (pc->dt == TD_F16)
        td_memplan_fp16_bn_reserves(m, batch, NULL, rsv);
    int fused = 0;
    size_t rbytes = 0;
    for (int L = 0; L < m->nlayers; L++) {
        ck_assert_msg(rsv[L] == reserve_of(bp, L), "%s: host reserve %zu, "
                      "backend %zu", m->layers[L].name, rsv[L],
                      reserve_of(bp, L));
        fused += rsv[L] != 0;
        rbytes += rsv[L];
    }
    ck_assert_int_eq(fused, pc->fused);

    /* the host plan, with the device's two figures: its cuDNN workspace
     * (bp->workspace, cuBLAS's included) and the per-step bytes (the
     * scratch beyond a plan without them: under 1 KiB) */
    /* the optimizer's slots per parameter (SGD with momentum here: 1) */
    int slots = (int)((td_backend_snapshot_floats(m, &c.optim) -
                       m->param_count - td_model_state_count(m)) /
                      m->param_count);
    ck_assert_int_eq(slots, 1);
    td_memplan_config hc = {
        .batch = batch, .act_bytes = pc->dt == TD_F32 ? 4 : 2,
        .optim_slots = slots, .reuse = 1, .nbuf = 2,
        .workspace = bp->workspace, .blas_workspace = 0,
        .bn_reserve = pc->dt == TD_F16 ? rsv : NULL, .headroom_min = 0,
    };
    td_memplan hp;
    char err[256];
    ck_assert_msg(td_memplan_build(m, &hc, &hp, err, sizeof err) == 0, "%s",
                  err);
    size_t step_bytes = bp->scratch - hp.scratch;
    ck_assert_uint_lt(step_bytes, 1024);
    td_memplan_free(&hp);
    hc.step_bytes = step_bytes;
    ck_assert_int_eq(td_memplan_build(m, &hc, &hp, err, sizeof err), 0);
    ck_assert_uint_eq(hp.activations, bp->activations);
    ck_assert_uint_eq(hp.total - hp.headroom, arena);
    /* what the host billed before (no reserve spaces): short of the
     * backend's region where batch norms are fused */
    td_memplan old;
    hc.bn_reserve = NULL;
    ck_assert_int_eq(td_memplan_build(m, &hc, &old, err, sizeof err), 0);
    size_t short_by = bp->activations - old.activations;
    if (pc->fused)
        ck_assert_uint_gt(short_by, 0);
    else
        ck_assert_uint_eq(short_by, 0);
    td_memplan_free(&old);

    /* trainctl plan itself */
    json_t *j = trainctl_plan(pc, batch);
    if (j) {
        json_t *p = json_object_get(j, "plan");
        size_t part = jsize(p, "total") - jsize(p, "headroom") -
                      jsize(p, "workspace") - jsize(p, "scratch");
        ck_assert_uint_eq(jsize(p, "activations"), bp->activations);
        ck_assert_uint_eq(part, arena - bp->workspace - bp->scratch);
        json_decref(j);
    }
    if (st_verbose("HOSTPLAN_VERBOSE"))
        printf("%s %s batch %d: %d fused batch norms, reserve spaces %zu "
               "bytes; activation region host %zu = backend %zu; host "
               "bill less headroom %zu = arena %zu (cuDNN+cuBLAS "
               "workspace %zu, step bytes %zu)%s; without the reserve "
               "spaces the host's region was %zu bytes short\n", pc->model,
               st_dt_name(pc->dt), batch, fused, rbytes, hp.activations,
               bp->activations, hp.total - hp.headroom, arena, bp->workspace,
               step_bytes, j ? "; trainctl plan --json agrees" : "",
               short_by);
    td_memplan_free(&hp);
    free(rsv);
    td_backend_destroy(be);
    td_model_free(m);
}
END_TEST

static Suite *hostplan_suite(void)
{
    Suite *s = suite_create("sim_hostplan");
    TCase *t = tcase_create("plan");
    tcase_set_timeout(t, 120);
    tcase_add_loop_test(t, test_host_plan_is_the_arena, 0,
                        (int)(sizeof cases / sizeof cases[0]));
    suite_add_tcase(s, t);
    return s;
}

TD_TEST_MAIN(hostplan_suite)
