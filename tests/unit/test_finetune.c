/* test_finetune.c - starting a job from weights: a model trained on 5
 * classes, re-headed for 10 with its backbone frozen, trains only the head
 * (every other parameter bitwise unchanged) and beats the same job from
 * scratch after the same steps; frozen batch norms can keep their
 * statistics (freeze_bn_stats); `init` files and `freeze` patterns that
 * do not fit are refused naming them.  Runs small jobs through the
 * runner on generated ImageFolders. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "base/error.h"
#include "job/finetune.h"
#include "job/runner.h"
#include "job/spec.h"
#include "jpeggen.h"
#include "store/checkpoint.h"
#include "tdtest.h"

static char *tmp;

/* A job on DIR/train (+ DIR/val) with `extra` top-level keys. */
#define JOB \
    "{\"name\": \"ft\", \"data\": {\"train\": \"%s/train\"%s}," \
    " \"input\": {\"size\": [24, 24], \"channels\": 3," \
    "   \"augment\": [{\"op\": \"flip\"}]," \
    "   \"normalize\": {\"mean\": [0.5, 0.5, 0.5], \"std\": [0.25, 0.25, 0.25]}}," \
    " \"model\": {\"name\": \"small\", \"layers\": [" \
    "   {\"type\": \"conv2d\", \"name\": \"c1\", \"channels\": 8," \
    "    \"kernel\": 3, \"pad\": 1}," \
    "   {\"type\": \"batchnorm\", \"name\": \"b1\"}, {\"type\": \"relu\"}," \
    "   {\"type\": \"maxpool\", \"kernel\": 2}," \
    "   {\"type\": \"conv2d\", \"name\": \"c2\", \"channels\": 8," \
    "    \"kernel\": 3, \"pad\": 1}," \
    "   {\"type\": \"batchnorm\", \"name\": \"b2\"}, {\"type\": \"relu\"}," \
    "   {\"type\": \"maxpool\", \"kernel\": 3}," \
    "   {\"type\": \"dense\", \"name\": \"fc\", \"units\": \"classes\"}]}," \
    " \"optimizer\": {\"lr\": 0.05, \"momentum\": 0.9}," \
    " \"batch_size\": 20, \"epochs\": %d, \"seed\": 3, \"threads\": 1," \
    " \"checkpoint\": {\"every_steps\": 0}, \"device\": \"cpu\"%s}"

static void setup(void)
{
    char p[512];
    tmp = td_test_tmpdir("finetune");
    snprintf(p, sizeof p, "%s/five/train", tmp);
    td_test_make_labelled_folder(p, 5, 40, 40, 32, 1, NULL);
    snprintf(p, sizeof p, "%s/ten/train", tmp);
    td_test_make_labelled_folder(p, 10, 6, 40, 32, 2001, NULL);
    snprintf(p, sizeof p, "%s/ten/val", tmp);
    td_test_make_labelled_folder(p, 10, 6, 40, 32, 3001, NULL);
}

static void teardown(void)
{
    td_test_rmtree(tmp);
    free(tmp);
}

static void spec_for(td_job_spec *s, const char *set, int val, int epochs,
                     const char *extra)
{
    char txt[8192], dir[512], valk[600] = "", err[512];
    json_error_t je;
    snprintf(dir, sizeof dir, "%s/%s", tmp, set);
    if (val)
        snprintf(valk, sizeof valk, ", \"val\": \"%s/val\"", dir);
    snprintf(txt, sizeof txt, JOB, dir, valk, epochs, extra);
    json_t *j = json_loads(txt, 0, &je);
    ck_assert_msg(j, "%s: %s", je.text, txt);
    ck_assert_msg(td_spec_parse(j, NULL, s, err, sizeof err) == 0, "%s",
                  err);
    json_decref(j);
}

/* Runs a job to its end; returns the last checkpoint's path in out. */
static void run(const char *set, int val, int epochs, const char *extra,
                const char *ckname, td_runner_result *res, char *out,
                size_t cap)
{
    td_job_spec s;
    td_runner *r;
    char err[1024], ck[600];
    snprintf(ck, sizeof ck, "%s/%s", tmp, ckname);
    spec_for(&s, set, val, epochs, extra);
    td_runner_opts o = {.spec = &s, .models_dir = ".", .device = "cpu",
                        .ckpt_dir = ck};
    ck_assert_msg(td_runner_create(&o, &r, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(td_runner_run(r, res, err, sizeof err) == 0, "%s", err);
    snprintf(out, cap, "%s", res->last_checkpoint);
    td_runner_free(r);
    td_spec_free(&s);
}

static int same_tensor(td_ckpt_file *a, td_ckpt_file *b, const char *name)
{
    const td_ckpt_tensor *x = td_ckpt_file_find(a, name);
    const td_ckpt_tensor *y = td_ckpt_file_find(b, name);
    ck_assert_msg(x && y, "%s", name);
    return x->nbytes == y->nbytes &&
           memcmp(td_ckpt_file_data(a, x), td_ckpt_file_data(b, y),
                  x->nbytes) == 0;
}

START_TEST(test_reheaded_frozen_backbone)
{
    td_runner_result pre, ft, scratch;
    char p5[4096], pft[4096], psc[4096], extra[4600], err[512];
    run("five", 0, 6, "", "ck5", &pre, p5, sizeof p5);

    snprintf(extra, sizeof extra, ", \"init\": \"%s\", \"freeze\": "
             "[\"c1.*\", \"b1.*\", \"c2.*\", \"b2.*\"]", p5);
    run("ten", 1, 2, extra, "ckft", &ft, pft, sizeof pft);
    run("ten", 1, 2, "", "cksc", &scratch, psc, sizeof psc);
    ck_assert_int_eq(ft.steps, scratch.steps);

    td_ckpt_file *a, *b;
    ck_assert_int_eq(td_ckpt_open(p5, &a, err, sizeof err), 0);
    ck_assert_int_eq(td_ckpt_open(pft, &b, err, sizeof err), 0);
    const char *frozen[] = {"c1.weight", "b1.weight", "b1.bias", "c2.weight",
                            "b2.weight", "b2.bias"};
    for (size_t i = 0; i < sizeof frozen / sizeof frozen[0]; i++)
        ck_assert_msg(same_tensor(a, b, frozen[i]), "%s changed",
                      frozen[i]);
    /* the head: re-initialised for 10 classes, then trained */
    ck_assert_int_eq(td_ckpt_file_find(a, "fc.weight")->shape[0], 5);
    ck_assert_int_eq(td_ckpt_file_find(b, "fc.weight")->shape[0], 10);
    td_ckpt_close(a);
    td_ckpt_close(b);
    /* a frozen parameter has no momentum either: its buffer stays 0 */
    ck_assert_int_eq(td_ckpt_open(pft, &b, err, sizeof err), 0);
    const td_ckpt_tensor *mb =
        td_ckpt_file_find(b, "optimizer.momentum_buffer.c1.weight");
    ck_assert_ptr_nonnull(mb);
    const float *v = td_ckpt_file_data(b, mb);
    for (size_t i = 0; i < mb->nbytes / 4; i++)
        ck_assert_float_eq(v[i], 0.0f);
    td_ckpt_close(b);

    printf("fine-tune: val acc %.4f after %lld steps; from scratch %.4f\n",
           ft.val_acc, (long long)ft.steps, scratch.val_acc);
    ck_assert_double_gt(ft.val_acc, scratch.val_acc);
}
END_TEST

/* At submit: an init file with no tensor of the model, a file that is
 * not safetensors, and a freeze pattern matching nothing, each named. */
START_TEST(test_init_and_freeze_refused)
{
    td_runner_result pre;
    td_job_spec s;
    char p5[4096], extra[4600], err[1024], bad[600];
    run("five", 0, 1, "", "ck5", &pre, p5, sizeof p5);

    spec_for(&s, "ten", 0, 1, ", \"freeze\": [\"conv1.*\"]");
    ck_assert_int_eq(td_job_check_init(&s, ".", err, sizeof err),
                     TD_E_SPEC);
    ck_assert_msg(strstr(err, "freeze[0]: \"conv1.*\" matches no parameter"),
                  "%s", err);
    td_spec_free(&s);

    /* a checkpoint of another model: nothing matches by name */
    snprintf(extra, sizeof extra, ", \"init\": \"%s\"", p5);
    char txt[9000];
    snprintf(txt, sizeof txt, "{\"data\": {\"train\": \"x\", \"classes\": 3},"
             " \"input\": {\"size\": 8, \"channels\": 1},"
             " \"model\": {\"layers\": [{\"type\": \"flatten\"},"
             " {\"type\": \"dense\", \"name\": \"other\", \"units\": "
             "\"classes\"}]}, \"optimizer\": {\"lr\": 0.1}%s}", extra);
    json_error_t je;
    json_t *j = json_loads(txt, 0, &je);
    ck_assert_int_eq(td_spec_parse(j, NULL, &s, err, sizeof err), 0);
    json_decref(j);
    ck_assert_int_eq(td_job_check_init(&s, ".", err, sizeof err),
                     TD_E_SPEC);
    ck_assert_msg(strstr(err, p5) && strstr(err, "no tensor is named like"),
                  "%s", err);
    td_spec_free(&s);

    /* not a safetensors file */
    snprintf(bad, sizeof bad, "%s/five/train/class0/img000.jpg", tmp);
    snprintf(extra, sizeof extra, ", \"init\": \"%s\"", bad);
    spec_for(&s, "ten", 0, 1, extra);
    ck_assert_int_eq(td_job_check_init(&s, ".", err, sizeof err),
                     TD_E_SPEC);
    ck_assert_msg(strstr(err, "init: ") && strstr(err, bad), "%s", err);
    td_spec_free(&s);

    /* and the same checkpoint fits the 10-class job: fc re-initialised */
    snprintf(extra, sizeof extra, ", \"init\": \"%s\"", p5);
    spec_for(&s, "ten", 0, 1, extra);
    ck_assert_msg(td_job_check_init(&s, ".", err, sizeof err) == 0, "%s",
                  err);
    td_spec_free(&s);
}
END_TEST

/* freeze_bn_stats: the frozen backbone's batch norms keep their running
 * statistics bitwise (without it they move with every batch), and asking
 * for it with no batch norm frozen is refused at submit. */
START_TEST(test_frozen_bn_stats)
{
    td_runner_result pre, ft, moved;
    td_job_spec s;
    char p5[4096], pft[4096], pmv[4096], extra[4600], err[1024];
    run("five", 0, 1, "", "ck5", &pre, p5, sizeof p5);
    snprintf(extra, sizeof extra, ", \"init\": \"%s\", \"freeze\": "
             "[\"c1.*\", \"b1.*\", \"c2.*\", \"b2.*\"], \"freeze_bn_stats\": "
             "true", p5);
    run("ten", 1, 1, extra, "ckbn", &ft, pft, sizeof pft);
    snprintf(extra, sizeof extra, ", \"init\": \"%s\", \"freeze\": "
             "[\"c1.*\", \"b1.*\", \"c2.*\", \"b2.*\"]", p5);
    run("ten", 1, 1, extra, "ckmv", &moved, pmv, sizeof pmv);

    td_ckpt_file *a, *b, *c;
    ck_assert_int_eq(td_ckpt_open(p5, &a, err, sizeof err), 0);
    ck_assert_int_eq(td_ckpt_open(pft, &b, err, sizeof err), 0);
    ck_assert_int_eq(td_ckpt_open(pmv, &c, err, sizeof err), 0);
    const char *stats[] = {"b1.running_mean", "b1.running_var",
                           "b2.running_mean", "b2.running_var"};
    for (size_t i = 0; i < 4; i++) {
        ck_assert_msg(same_tensor(a, b, stats[i]), "%s changed", stats[i]);
        ck_assert_msg(!same_tensor(a, c, stats[i]),
                      "%s did not move without freeze_bn_stats", stats[i]);
    }
    ck_assert_msg(same_tensor(a, b, "c2.weight"), "c2.weight changed");
    td_ckpt_close(a);
    td_ckpt_close(b);
    td_ckpt_close(c);
    ck_assert(isfinite(ft.val_acc));

    /* Nothing to keep: refused at submit, saying why. */
    spec_for(&s, "ten", 0, 1, ", \"freeze\": [\"c1.*\", \"b1.weight\"], "
             "\"freeze_bn_stats\": true");
    ck_assert_int_eq(td_job_check_init(&s, ".", err, sizeof err),
                     TD_E_SPEC);
    ck_assert_msg(strstr(err, "freeze_bn_stats: no batch norm of the model "
                              "has both its weight and bias frozen"),
                  "%s", err);
    td_spec_free(&s);
}
END_TEST

/* lr_mult: the product of the matching patterns' values, 0 where a
 * freeze pattern matches; on the CPU backend a parameter at multiplier m
 * moves m times as far in a plain SGD step, and one at 0 not at all. */
START_TEST(test_lr_mult)
{
    char err[512];
    td_model *m;
    json_t *g = json_pack("{s:[{s:s,s:s,s:i,s:i,s:b},{s:s},{s:s,s:s,s:s}]}",
                          "layers", "type", "conv2d", "name", "c", "channels",
                          2, "kernel", 3, "bias", 1, "type", "global_avgpool",
                          "type", "dense", "name", "fc", "units", "classes");
    ck_assert_int_eq(td_model_build(g, (td_shape){1, 6, 6}, 3, &m, err,
                                    sizeof err), 0);
    /* c.weight c.bias fc.weight fc.bias */
    td_job_spec s;
    memset(&s, 0, sizeof s);
    json_t *lm = json_pack("{s:f, s:f}", "fc.*", 2.0, "*.weight", 3.0);
    s.lr_mult = lm;
    s.freeze.n = 1;
    s.freeze.v[0] = "c.b*";
    float *mult;
    ck_assert_int_eq(td_job_lr_mult(m, &s, &mult, err, sizeof err), 0);
    ck_assert_float_eq(mult[0], 3.0f);
    ck_assert_float_eq(mult[1], 0.0f);
    ck_assert_float_eq(mult[2], 6.0f);
    ck_assert_float_eq(mult[3], 2.0f);

    td_backend_config bc;
    memset(&bc, 0, sizeof bc);
    bc.batch = 4;
    bc.threads = 1;
    bc.mean[0] = 0.5f;
    bc.std[0] = 0.25f;
    bc.seed = 7;
    td_optim_defaults(&bc.optim, TD_OPT_SGD);
    bc.optim.momentum = 0;
    bc.optim.lr = 0.1;
    td_backend *plain, *scaled;
    ck_assert_int_eq(td_backend_create("cpu", m, &bc, &plain, err,
                                       sizeof err), 0);
    bc.lr_mult = mult;
    ck_assert_int_eq(td_backend_create("cpu", m, &bc, &scaled, err,
                                       sizeof err), 0);
    uint8_t px[4 * 36];
    int32_t labels[4] = {0, 1, 2, 1};
    for (int i = 0; i < 4 * 36; i++)
        px[i] = (uint8_t)(i * 37 % 251);
    td_batch b = {.data = px, .labels = labels, .n = 4, .h = 6, .w = 6,
                  .c = 1, .layout = TD_LAYOUT_NHWC};
    float w0[64], wa[64], wb[64];
    ck_assert_int_eq(td_backend_upload(plain, &b), 0);
    ck_assert_int_eq(td_backend_upload(scaled, &b), 0);
    ck_assert_int_eq(td_backend_train_step(plain, 0.1f, 1), 0);
    ck_assert_int_eq(td_backend_train_step(scaled, 0.1f, 1), 0);
    /* the starting values: a fresh backend of the same seed */
    for (int p = 0; p < m->nparams; p++) {
        size_t n = m->params[p].count;
        td_backend *fresh;
        bc.lr_mult = NULL;
        ck_assert_int_eq(td_backend_create("cpu", m, &bc, &fresh, err,
                                           sizeof err), 0);
        ck_assert_int_eq(fresh->ops->read_tensor(fresh, TD_T_PARAM, p, w0,
                                                 n), 0);
        td_backend_destroy(fresh);
        ck_assert_int_eq(plain->ops->read_tensor(plain, TD_T_PARAM, p, wa, n),
                         0);
        ck_assert_int_eq(scaled->ops->read_tensor(scaled, TD_T_PARAM, p, wb,
                                                  n), 0);
        int moved = 0;
        for (size_t i = 0; i < n; i++) {
            double da = (double)wa[i] - w0[i], db = (double)wb[i] - w0[i];
            moved |= da != 0;
            if (mult[p] == 0.0f)
                ck_assert_msg(wb[i] == w0[i], "%s moved", m->params[p].name);
            else
                ck_assert_msg(fabs(db - mult[p] * da) <=
                                  1e-5 * fabs(da) * mult[p] + 1e-7,
                              "%s[%zu]: %g vs %g x %g", m->params[p].name, i,
                              db, (double)mult[p], da);
        }
        ck_assert_msg(moved, "%s: no gradient", m->params[p].name);
    }
    td_backend_destroy(plain);
    td_backend_destroy(scaled);
    free(mult);
    json_decref(lm);
    json_decref(g);
    td_model_free(m);
}
END_TEST

/* early_stopping: val_acc cannot improve by more than 2, so after the
 * first epoch sets the best, the second does not improve and (patience 1)
 * the job ends there, completed, with its final checkpoint written. */
START_TEST(test_early_stopping)
{
    td_runner_result res;
    char path[4096], err[512];
    run("ten", 1, 5, ", \"early_stopping\": {\"metric\": \"val_acc\", "
        "\"patience\": 1, \"min_delta\": 2}", "ckes", &res, path,
        sizeof path);
    ck_assert_int_eq(res.early_stopped, 1);
    ck_assert_int_eq(res.stopped, TD_STOP_NONE);
    ck_assert_int_eq(res.epochs, 2);
    ck_assert_int_eq(res.steps, 2 * 3); /* 60 images, batch 20 */
    td_ckpt_file *f;
    ck_assert_int_eq(td_ckpt_open(path, &f, err, sizeof err), 0);
    ck_assert_int_eq(td_ckpt_file_meta(f)->step, 6);
    td_ckpt_close(f);
    /* patience 3 of 5 epochs: stops after epoch 4 */
    run("ten", 1, 5, ", \"early_stopping\": {\"metric\": \"val_loss\", "
        "\"patience\": 3, \"min_delta\": 1000}", "ckes2", &res, path,
        sizeof path);
    ck_assert_int_eq(res.early_stopped, 1);
    ck_assert_int_eq(res.epochs, 4);
    /* off by default: all 5 epochs */
    run("ten", 1, 5, "", "ckes3", &res, path, sizeof path);
    ck_assert_int_eq(res.early_stopped, 0);
    ck_assert_int_eq(res.epochs, 5);
}
END_TEST

/* The epochs' val_acc and end steps, from the runner's events. */
typedef struct epochs_seen {
    int n;
    double acc[16];
    int64_t step[16];
} epochs_seen;

static void on_event(void *user, const char *kind, json_t *data)
{
    epochs_seen *e = user;
    if (strcmp(kind, "epoch") == 0 && e->n < 16) {
        e->acc[e->n] = json_number_value(json_object_get(data, "val_acc"));
        e->step[e->n++] = json_integer_value(json_object_get(data, "step"));
    }
    json_decref(data);
}

/* checkpoint.keep_best: best.safetensors is the epoch-end checkpoint of the
 * first epoch with the highest val_acc, although keep 1 has pruned its
 * ckpt-* name.  A large learning rate makes the later epochs worse, but
 * where the best epoch falls depends on the CPU's rounding (AVX-512, AVX2
 * and AMX runs differ), so the test takes the first of a few learning rates
 * whose run peaks before its last epoch: only there can keep_best, not the
 * latest checkpoint, be what holds the best.  In fp32 (with precision auto
 * an AMX CPU trains this model in bf16). */
START_TEST(test_keep_best)
{
    static const double lrs[] = {3.0, 5.0, 2.0, 8.0, 1.5, 12.0};
    td_runner_result res;
    epochs_seen seen;
    char err[1024], ck[600], best[700];
    int b = 0;
    for (size_t k = 0; k < sizeof lrs / sizeof lrs[0]; k++) {
        td_job_spec s;
        td_runner *r;
        char extra[512];
        memset(&seen, 0, sizeof seen);
        snprintf(ck, sizeof ck, "%s/ckbest%zu", tmp, k);
        snprintf(extra, sizeof extra,
                 ", \"checkpoint\": {\"every_steps\": 0, \"keep\": 1, "
                 "\"keep_best\": true, \"best_metric\": \"val_acc\"}, "
                 "\"optimizer\": {\"lr\": %g, \"momentum\": 0.9}, "
                 "\"precision\": \"fp32\"", lrs[k]);
        spec_for(&s, "ten", 1, 5, extra);
        td_runner_opts o = {.spec = &s, .models_dir = ".", .device = "cpu",
                            .ckpt_dir = ck, .event = on_event,
                            .user = &seen};
        ck_assert_msg(td_runner_create(&o, &r, err, sizeof err) == 0, "%s",
                      err);
        ck_assert_msg(td_runner_run(r, &res, err, sizeof err) == 0, "%s",
                      err);
        td_runner_free(r);
        td_spec_free(&s);
        ck_assert_int_eq(seen.n, 5);
        b = 0;
        for (int i = 1; i < seen.n; i++)
            if (seen.acc[i] > seen.acc[b])
                b = i;
        printf("keep_best: lr %g, val_acc by epoch %.3f %.3f %.3f %.3f "
               "%.3f, best epoch %d\n", lrs[k], seen.acc[0], seen.acc[1],
               seen.acc[2], seen.acc[3], seen.acc[4], b + 1);
        fflush(stdout);
        if (b < seen.n - 1)
            break;
    }
    ck_assert_msg(b < seen.n - 1, "no learning rate tried made a run whose "
                  "best epoch is not its last");
    snprintf(best, sizeof best, "%s/best.safetensors", ck);
    td_ckpt_file *f;
    ck_assert_msg(td_ckpt_open(best, &f, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(td_ckpt_file_meta(f)->step, seen.step[b]);
    td_ckpt_close(f);
    /* keep 1: one ckpt-* left (the final one), and best beside it */
    char path[4096];
    ck_assert_int_eq(td_ckpt_load_latest(ck, &f, path, sizeof path, err,
                                         sizeof err), 0);
    ck_assert_int_eq(td_ckpt_file_meta(f)->step, res.steps);
    td_ckpt_close(f);
}
END_TEST

static Suite *finetune_suite(void)
{
    Suite *su = suite_create("finetune");
    TCase *tc = tcase_create("finetune");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 280);
    tcase_add_test(tc, test_reheaded_frozen_backbone);
    tcase_add_test(tc, test_init_and_freeze_refused);
    tcase_add_test(tc, test_frozen_bn_stats);
    tcase_add_test(tc, test_lr_mult);
    tcase_add_test(tc, test_early_stopping);
    tcase_add_test(tc, test_keep_best);
    suite_add_tcase(su, tc);
    return su;
}

TD_TEST_MAIN(finetune_suite)
