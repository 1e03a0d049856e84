/* test_prom_parser.c - the exposition read by the reference parser,
 * Debian's python3-prometheus-client (tests/support/prom_families.py),
 * rather than by our own checker: every sample in a family with its TYPE
 * and HELP, each family's lines one group.  Skips (77) without the
 * parser. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "obs/prom.h"
#include "support/jpeggen.h"
#include "tdtest.h"

#define PY "/usr/bin/python3"

static const char *const states[] = {"pending", "running", "suspended",
                                     "completed", "cancelled", "failed"};

/* A job with every optional family: a pipeline, loss scaling, curves. */
static void job(td_prom_job *j, long id, const char *device)
{
    memset(j, 0, sizeof *j);
    j->job = id;
    snprintf(j->device, sizeof j->device, "%s", device);
    j->mc.steps_total = 50;
    j->mc.samples_total = 50 * 32;
    j->mc.step_seconds_total = 2.5;
    j->mc.phase_seconds_total[TD_PHASE_OTHER] = 2.5;
    j->mc.device_idle_known = 1;
    j->mc.device_idle_ratio = 0.125;
    j->mc.verdict = TD_VERDICT_COMPUTE_BOUND;
    j->has_pipeline = 1;
    j->workers = 2;
    j->prefetch = 4;
    j->decoded_samples = 1700;
    j->decoded_bytes = 1 << 20;
    j->has_loss_scale = 1;
    j->loss_scale = 65536;
    j->lr = 0.1;
    j->train_loss = 1.5;
    j->epoch_train_loss = j->epoch_train_acc = NAN;
    j->val_loss = j->val_acc = NAN;
}

/* The parser's verdict on text: its output, exit status in *st. */
static char *parse(const char *text, int *st)
{
    char *dir = td_test_tmpdir("promparse"), path[4200], cmd[8600];
    snprintf(path, sizeof path, "%s/metrics.txt", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, PY " %s/tests/support/prom_families.py < %s",
             getenv("TD_SOURCE_ROOT") ? getenv("TD_SOURCE_ROOT") : ".",
             path);
    char *out = td_test_capture(cmd, st);
    td_test_rmtree(dir);
    free(dir);
    return out;
}

/* Two jobs with input pipelines: the families whose samples came job by
 * job, interleaved with another family's, were read as untyped ones. */
START_TEST(test_two_jobs_parse_into_typed_families)
{
    td_prom_job j[2];
    job(&j[0], 3, "cpu");
    job(&j[1], 4, "cuda:0");
    td_prom_process p = {.uptime_s = 3.5, .jobs = {0, 2}, .state_names =
                         states, .nstates = 6, .clients = 1, .scrapes = 9,
                         .heap_bytes = 1e6};
    char *buf = malloc(1 << 16);
    ck_assert_int_gt(td_prom_render(j, 2, &p, buf, 1 << 16), 0);
    int st;
    char *out = parse(buf, &st);
    ck_assert_msg(st == 0, "the parser says:\n%s", out);
    free(out);
    free(buf);
}
END_TEST

static Suite *prom_parser_suite(void)
{
    Suite *s = suite_create("prom_parser");
    TCase *tc = tcase_create("parser");
    tcase_add_test(tc, test_two_jobs_parse_into_typed_families);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    if (system(PY " -c 'import prometheus_client.parser' 2>/dev/null")) {
        printf("skipped: no prometheus_client for " PY " (Debian: apt-get "
               "install python3-prometheus-client)\n");
        return TD_TEST_SKIP;
    }
    return td_test_run(prom_parser_suite());
}
