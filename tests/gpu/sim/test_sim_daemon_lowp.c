/* test_sim_daemon_lowp.c - precision bf16 through the daemon on the
 * simulated cuda:0 (issue 15): traind_sim (traind on the simulated
 * device, as test_sim_daemon.c) runs a job submitted with "precision":
 * "bf16" to completion, its log says what it computed in, its
 * checkpoints hold fp32 master weights that are not all bf16 values;
 * and an "fp16" job completes too, with dynamic loss scaling on by
 * default (its record carries the scale and the skipped steps). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bf16.h"
#include "daemon_harness.h"
#include "store/checkpoint.h"
#include "tdtest.h"

/* th_spec on cuda:0 at a precision, a checkpoint every 20 steps. */
static json_t *spec_at(const char *precision, int epochs)
{
    json_t *s = th_spec(epochs, 20, 8, 4);
    json_object_set_new(s, "device", json_string("cuda:0"));
    json_object_set_new(s, "precision", json_string(precision));
    return s;
}

START_TEST(test_bf16_job_on_cuda0)
{
    td_harness h;
    ck_assert_int_eq(th_start_env(&h, NULL, NULL), 0);
    int fd = th_connect(&h, NULL);
    int64_t id = th_submit(fd, spec_at("bf16", 2));
    ck_assert(th_wait_state(fd, id, "completed", 300000));
    ck_assert_msg(th_log_has(fd, id, "precision: bf16 (asked bf16) on cuda:0"),
                  "no precision line in the job's log");
    /* the checkpoint's weights: fp32 masters, trained off the bf16 grid */
    json_t *r = th_job_request(fd, "show", id);
    json_t *cks = json_object_get(json_object_get(th_ok(r), "job"),
                                  "checkpoints");
    ck_assert_uint_ge(json_array_size(cks), 1);
    const char *path = json_string_value(json_object_get(
        json_array_get(cks, json_array_size(cks) - 1), "path"));
    ck_assert_ptr_nonnull(path);
    char err[512] = "";
    td_ckpt_file *f = NULL;
    ck_assert_msg(td_ckpt_open(path, &f, err, sizeof err) == 0, "%s: %s",
                  path, err);
    const td_ckpt_tensor *t = td_ckpt_file_find(f, "fc.weight");
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->dtype, TD_DT_F32);
    const float *w = td_ckpt_file_data(f, t);
    size_t n = t->nbytes / sizeof *w, off = 0;
    for (size_t i = 0; i < n; i++)
        off += td_bf16_round(w[i]) != w[i];
    ck_assert_msg(off > n / 2, "%zu of %zu fc weights are bf16 values",
                  n - off, n);
    td_ckpt_close(f);
    json_decref(r);
    /* fp16: loss_scale auto = dynamic, starting at 2^16; a window's scale
     * is a power of two in [1, 2^24] (halved on an overflow, if any) */
    int64_t id16 = th_submit(fd, spec_at("fp16", 1));
    ck_assert(th_wait_state(fd, id16, "completed", 300000));
    ck_assert_msg(th_log_has(fd, id16, "precision: fp16 (asked fp16) on cuda:0"),
                  "no precision line in the fp16 job's log");
    r = th_job_request(fd, "show", id16);
    json_t *job = json_object_get(th_ok(r), "job");
    double scale = json_number_value(json_object_get(job, "loss_scale"));
    json_t *skipped = json_object_get(job, "skipped_steps");
    ck_assert_msg(scale >= 1 && scale <= 16777216 &&
                  frexp(scale, &(int){0}) == 0.5 && json_is_integer(skipped),
                  "fp16 job: loss_scale %g, skipped_steps %s", scale,
                  skipped ? "present" : "missing");
    json_decref(r);
    close(fd);
    ck_assert_int_eq(th_stop(&h), 0);
    th_cleanup(&h);
}
END_TEST

static Suite *sim_daemon_lowp_suite(void)
{
    Suite *s = suite_create("sim_daemon_lowp");
    TCase *tc = tcase_create("daemon");
    tcase_set_timeout(tc, 500);
    tcase_add_test(tc, test_bf16_job_on_cuda0);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(sim_daemon_lowp_suite)
