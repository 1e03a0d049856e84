/* test_backend_bf16_amx.c - on a CPU where oneDNN runs AMX (Intel Sapphire
 * Rapids and later), the bf16 plan puts every convolution on an AMX kernel
 * (channels-last activations, cpu_plan.c), and the fp32 plan stays on the
 * blocked layout.  Reads the implementation names the backend logs at
 * debug level when it plans ("cpu backend: LAYER WHAT: IMPL").  Skipped
 * where oneDNN's ISA is not avx512_core_amx; the numbers of the AMX plan
 * are test_backend_bf16's.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/caps.h"
#include "base/log.h"
#include "cpu_ab.h"
#include "model/model.h"
#include "tdtest.h"

typedef struct plan_log {
    int convs;           /* "conv ..." lines seen */
    int convs_amx;       /* ... whose implementation is an AMX kernel */
    int convs_brg;       /* ... whose implementation is brgconv */
    char other[256];     /* the first non-AMX convolution */
} plan_log;

static void sink(void *user, int level, long job, const char *line)
{
    plan_log *p = user;
    const char *at = strstr(line, "cpu backend: ");
    (void)level;
    (void)job;
    if (!at || !strstr(at, " conv "))
        return;
    p->convs++;
    if (strstr(at, "avx512_core_amx") || strstr(at, "cpu_bwdw (AMX tiles)"))
        p->convs_amx++; /* oneDNN's AMX kernels, or cpu_bwdw.c's */
    else if (!p->other[0])
        snprintf(p->other, sizeof p->other, "%s", at);
    if (strstr(at, "brgconv"))
        p->convs_brg++;
}

/* A resnet-like stack: a 3-channel input, stride-1 and stride-2 3x3
 * convolutions, a 1x1 stride-2 shortcut, batch norm, relu, add. */
static td_model *model(void)
{
    return td_ab_model("{\"layers\": ["
        "{\"type\": \"conv2d\", \"name\": \"c1\", \"channels\": 16, "
        "\"kernel\": 3, \"pad\": 1}, {\"type\": \"batchnorm\"}, "
        "{\"type\": \"relu\", \"name\": \"r1\"}, "
        "{\"type\": \"conv2d\", \"name\": \"c2\", \"channels\": 32, "
        "\"kernel\": 3, \"pad\": 1, \"stride\": 2}, "
        "{\"type\": \"batchnorm\", \"name\": \"b2\"}, "
        "{\"type\": \"conv2d\", \"name\": \"sc\", \"channels\": 32, "
        "\"kernel\": 1, \"stride\": 2, \"input\": \"r1\"}, "
        "{\"type\": \"add\", \"inputs\": [\"b2\", \"sc\"]}, "
        "{\"type\": \"relu\"}, {\"type\": \"maxpool\", \"kernel\": 2}, "
        "{\"type\": \"global_avgpool\"}, {\"type\": \"flatten\"}, "
        "{\"type\": \"dense\", \"units\": 10}]}", (td_shape){3, 32, 32});
}

static plan_log plan(enum td_dtype dt)
{
    plan_log p = {0};
    td_model *m = model();
    td_backend_config cfg = {.batch = 32, .threads = 1, .dtype = dt,
                             .std = {1, 1, 1}};
    td_optim_defaults(&cfg.optim, TD_OPT_SGD);
    td_backend *be = NULL;
    char err[256];
    td_log_set_level(TD_LOG_DEBUG);
    td_log_set_sink(sink, &p);
    int rc = td_backend_create("cpu", m, &cfg, &be, err, sizeof err);
    td_log_set_sink(NULL, NULL);
    ck_assert_msg(rc == 0, "%s", err);
    td_backend_destroy(be);
    td_model_free(m);
    return p;
}

/* 3 convolutions, each forward, backward weights and (but c1) backward
 * data: 8 primitives, all AMX (the backward weights cpu_bwdw.c's). */
START_TEST(test_bf16_convolutions_on_amx)
{
    plan_log p = plan(TD_BF16);
    ck_assert_int_eq(p.convs, 8);
    ck_assert_msg(p.convs_amx == p.convs, "%d of %d convolution primitives "
                  "on AMX; first other: %s", p.convs_amx, p.convs, p.other);
}
END_TEST

/* fp32 keeps the blocked plan (oneDNN's brgconv is its nhwc kernel). */
START_TEST(test_fp32_plan_unchanged)
{
    plan_log p = plan(TD_F32);
    ck_assert_int_eq(p.convs, 8);
    ck_assert_int_eq(p.convs_amx, 0);
    ck_assert_int_eq(p.convs_brg, 0);
}
END_TEST

int main(void)
{
    int skip = td_ab_need_amx("");
    if (skip)
        return skip;
    Suite *s = suite_create("backend_bf16_amx");
    TCase *tc = tcase_create("backend_bf16_amx");
    tcase_add_test(tc, test_bf16_convolutions_on_amx);
    tcase_add_test(tc, test_fp32_plan_unchanged);
    suite_add_tcase(s, tc);
    return td_test_run(s);
}
