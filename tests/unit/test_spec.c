/* test_spec.c - the job spec: the example of docs/design.md#the-job-spec,
 * every default, each kind of error with its exact message, normalisation
 * round trip and hash, overrides, job files and the shipped reference
 * job. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "job/spec.h"
#include "tdtest.h"

static const char *design_example =
    "{\"name\": \"fmnist-cnn\","
    " \"data\": {\"train\": \"/var/lib/traind/data/fmnist/train\","
    "  \"val\": \"/var/lib/traind/data/fmnist/test\", \"classes\": 10},"
    " \"input\": {\"size\": [28, 28], \"channels\": 1, \"workers\": \"auto\","
    "  \"prefetch\": \"auto\","
    "  \"augment\": [{\"op\": \"pad_crop\", \"pad\": 2}, {\"op\": \"flip\"}],"
    "  \"normalize\": {\"mean\": [0.2860], \"std\": [0.3530]}},"
    " \"model\": \"fmnist-cnn\","
    " \"optimizer\": {\"type\": \"sgd\", \"lr\": 0.05, \"momentum\": 0.9,"
    "  \"weight_decay\": 5e-4,"
    "  \"schedule\": {\"type\": \"cosine\", \"warmup_steps\": 100}},"
    " \"batch_size\": 128, \"epochs\": 10, \"seed\": 1,"
    " \"checkpoint\": {\"every_steps\": 500, \"keep\": 3},"
    " \"device\": \"auto\"}";

static json_t *load(const char *text)
{
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    ck_assert_msg(j != NULL, "test JSON: %s", je.text);
    return j;
}

/* Parses the design example with overrides applied (one, or several
 * separated by newlines); returns the code and leaves the message in
 * err. */
static int parse_with(const char *set, char *err, size_t cap)
{
    json_t *j = load(design_example);
    td_job_spec s;
    char one[512];
    int r = 0;
    for (const char *p = set; r == 0 && *p;) {
        size_t n = strcspn(p, "\n");
        snprintf(one, sizeof one, "%.*s", (int)n, p);
        r = td_spec_apply_set(j, one, err, cap);
        p += n + (p[n] == '\n');
    }
    if (r == 0)
        r = td_spec_parse(j, NULL, &s, err, cap);
    if (r == 0)
        td_spec_free(&s);
    json_decref(j);
    return r;
}

#define EXPECT_ERR(set, msg)                                                 \
    do {                                                                     \
        char e_[256];                                                        \
        ck_assert_int_eq(parse_with(set, e_, sizeof e_), TD_E_SPEC);         \
        ck_assert_str_eq(e_, msg);                                           \
    } while (0)

START_TEST(test_design_example)
{
    td_job_spec s;
    char err[256];
    json_t *j = load(design_example);
    ck_assert_int_eq(td_spec_parse(j, NULL, &s, err, sizeof err), 0);
    ck_assert_str_eq(s.name, "fmnist-cnn");
    ck_assert_int_eq(s.data.train.n, 1);
    ck_assert_str_eq(s.data.train.v[0], "/var/lib/traind/data/fmnist/train");
    ck_assert_str_eq(s.data.val.v[0], "/var/lib/traind/data/fmnist/test");
    ck_assert_int_eq(s.data.classes, 10);
    ck_assert_int_eq(s.input.size[0], 28);
    ck_assert_int_eq(s.input.size[1], 28);
    ck_assert_int_eq(s.input.channels, 1);
    ck_assert_int_eq(s.input.workers, TD_SPEC_AUTO);
    ck_assert_int_eq(s.input.prefetch, TD_SPEC_AUTO);
    ck_assert_int_eq(s.input.n_augment, 2);
    ck_assert_int_eq(s.input.augment[0].op, TD_SPEC_AUG_PAD_CROP);
    ck_assert_int_eq(s.input.augment[0].pad, 2);
    ck_assert_int_eq(s.input.augment[1].op, TD_SPEC_AUG_FLIP);
    ck_assert_double_eq(s.input.mean[0], 0.2860);
    ck_assert_double_eq(s.input.std[0], 0.3530);
    ck_assert_str_eq(json_string_value(s.model), "fmnist-cnn");
    ck_assert_int_eq(s.optimizer.type, TD_OPT_SGD);
    ck_assert_double_eq(s.optimizer.lr, 0.05);
    ck_assert_double_eq(s.optimizer.momentum, 0.9);
    ck_assert_double_eq(s.optimizer.weight_decay, 5e-4);
    ck_assert_int_eq(s.optimizer.schedule.type, TD_SCHED_COSINE);
    ck_assert_int_eq(s.optimizer.schedule.warmup_steps, 100);
    ck_assert_int_eq(s.batch_size, 128);
    ck_assert_int_eq(s.epochs, 10);
    ck_assert_uint_eq(s.seed, 1);
    ck_assert_int_eq(s.checkpoint.every_steps, 500);
    ck_assert_int_eq(s.checkpoint.keep, 3);
    ck_assert_str_eq(s.device, "auto");
    td_spec_free(&s);
    json_decref(j);
}
END_TEST

START_TEST(test_defaults)
{
    td_job_spec s;
    char err[256];
    json_t *j = load("{\"model\": \"resnet18\", \"data\": {\"train\": \"t\"},"
                     " \"optimizer\": {\"lr\": 0.1},"
                     " \"input\": {\"augment\": [{\"op\": \"random_resized_crop\"},"
                     "  {\"op\": \"flip\"}, {\"op\": \"color_jitter\"}]}}");
    ck_assert_int_eq(td_spec_parse(j, NULL, &s, err, sizeof err), 0);
    ck_assert_str_eq(s.name, "job");
    ck_assert_str_eq(s.data.train.v[0], "t"); /* no base: kept relative */
    ck_assert_int_eq(s.data.val.n, 0);
    ck_assert_int_eq(s.data.classes, TD_SPEC_AUTO);
    ck_assert_int_eq(s.input.size[0], 224);
    ck_assert_int_eq(s.input.size[1], 224);
    ck_assert_int_eq(s.input.channels, 3);
    ck_assert_int_eq(s.input.workers, TD_SPEC_AUTO);
    ck_assert_int_eq(s.input.prefetch, TD_SPEC_AUTO);
    for (int c = 0; c < 3; c++) {
        ck_assert_double_eq(s.input.mean[c], 0.0);
        ck_assert_double_eq(s.input.std[c], 1.0);
    }
    ck_assert_int_eq(s.input.source, TD_SOURCE_FILES);
    ck_assert_int_eq(s.input.layout, TD_SPEC_LAYOUT_AUTO);
    const td_aug_spec *a = s.input.augment;
    ck_assert_int_eq(a[0].size[0], 224); /* 0 = input.size, resolved */
    ck_assert_double_eq(a[0].scale[0], 0.08);
    ck_assert_double_eq(a[0].scale[1], 1.0);
    ck_assert_double_eq(a[0].ratio[0], 0.75);
    ck_assert_double_eq_tol(a[0].ratio[1], 4.0 / 3.0, 1e-15);
    ck_assert_double_eq(a[1].p, 0.5);
    ck_assert_double_eq(a[2].brightness, 0.0);
    ck_assert_double_eq(a[2].saturation, 0.0);
    ck_assert_int_eq(s.optimizer.type, TD_OPT_SGD);
    ck_assert_double_eq(s.optimizer.momentum, 0.0);
    ck_assert_int_eq(s.optimizer.nesterov, 0);
    ck_assert_double_eq(s.optimizer.weight_decay, 0.0);
    ck_assert_double_eq(s.label_smoothing, 0.0);
    ck_assert_double_eq(s.optimizer.betas[0], 0.9);
    ck_assert_double_eq(s.optimizer.betas[1], 0.999);
    ck_assert_double_eq(s.optimizer.eps, 1e-8);
    ck_assert_int_eq(s.optimizer.schedule.type, TD_SCHED_CONSTANT);
    ck_assert_int_eq(s.optimizer.schedule.warmup_steps, 0);
    ck_assert_int_eq(s.optimizer.schedule.step_size, 1000);
    ck_assert_double_eq(s.optimizer.schedule.gamma, 0.1);
    ck_assert_double_eq(s.optimizer.schedule.min_lr, 0.0);
    ck_assert_int_eq(s.batch_size, 64);
    ck_assert_int_eq(s.epochs, 10);
    ck_assert_uint_eq(s.seed, 1);
    ck_assert_int_eq(s.checkpoint.every_steps, 1000);
    ck_assert_int_eq(s.checkpoint.keep, 3);
    ck_assert_int_eq(s.checkpoint.at_epoch_end, 1);
    ck_assert_str_eq(s.device, "auto");
    ck_assert_double_eq(s.max_bad_ratio, 0.01);
    ck_assert_int_eq(s.threads, TD_SPEC_AUTO);
    ck_assert_int_eq(s.metrics.warmup_steps, 20);
    ck_assert_int_eq(s.metrics.window_steps, 100);
    td_spec_free(&s);
    json_decref(j);
    /* the other geometric ops' defaults (one per job) */
    j = load("{\"model\": \"m\", \"data\": {\"train\": \"t\"},"
             " \"optimizer\": {\"lr\": 0.1},"
             " \"input\": {\"augment\": [{\"op\": \"pad_crop\"}]}}");
    ck_assert_int_eq(td_spec_parse(j, NULL, &s, err, sizeof err), 0);
    ck_assert_int_eq(s.input.augment[0].pad, 4);
    td_spec_free(&s);
    json_decref(j);
    j = load("{\"model\": \"m\", \"data\": {\"train\": \"t\"},"
             " \"optimizer\": {\"lr\": 0.1},"
             " \"input\": {\"augment\": [{\"op\": \"center_crop\"}]}}");
    ck_assert_int_eq(td_spec_parse(j, NULL, &s, err, sizeof err), 0);
    ck_assert_int_eq(s.input.augment[0].size[0], 224);
    ck_assert_int_eq(s.input.augment[0].size[1], 224);
    td_spec_free(&s);
    json_decref(j);
}
END_TEST

START_TEST(test_unknown_keys)
{
    EXPECT_ERR("input.augment[1].pads=3",
               "input.augment[1].pads: unknown key");
    EXPECT_ERR("optimizer.momentun=0.9", "optimizer.momentun: unknown key");
    EXPECT_ERR("epoch=3", "epoch: unknown key");
    EXPECT_ERR("checkpoint.dir=\"/x\"", "checkpoint.dir: unknown key");
}
END_TEST

START_TEST(test_type_errors)
{
    EXPECT_ERR("epochs=\"three\"", "epochs: must be an integer, not a string");
    /* "must be an integer, not a number" (a user's 1e3 is a number) */
    EXPECT_ERR("epochs=2.5", "epochs: must be an integer written without a "
               "decimal point or exponent, not 2.5");
    EXPECT_ERR("epochs=1e12", "epochs: must be an integer written without "
               "a decimal point or exponent, not 1000000000000");
    EXPECT_ERR("optimizer.lr=fast", "optimizer.lr: must be a number, not a string");
    EXPECT_ERR("optimizer.nesterov=1",
               "optimizer.nesterov: must be true or false, not an integer");
    EXPECT_ERR("optimizer=[]", "optimizer: must be an object, not an array");
    EXPECT_ERR("input.workers=many",
               "input.workers: must be \"auto\" or an integer");
    EXPECT_ERR("input.size=[28]",
               "input.size: must be an integer or [height, width]");
    EXPECT_ERR("model=3", "model: must be a model name or a model object");
    EXPECT_ERR("data.train=[]",
               "data.train: must be a path or a non-empty array of paths");
    EXPECT_ERR("data.val=[\"a\", 3]",
               "data.val[1]: must be a non-empty string");
    EXPECT_ERR("input.augment={}", "input.augment: must be an array of ops");
    EXPECT_ERR("input.augment[0]=\"flip\"",
               "input.augment[0]: must be an object with \"op\"");
    EXPECT_ERR("seed=null", "seed: must not be null");
}
END_TEST

START_TEST(test_range_errors)
{
    EXPECT_ERR("optimizer.lr=0", "optimizer.lr: must be in (0, 100]");
    EXPECT_ERR("optimizer.lr=-1", "optimizer.lr: must be in (0, 100]");
    EXPECT_ERR("optimizer.momentum=1", "optimizer.momentum: must be in [0, 1)");
    EXPECT_ERR("label_smoothing=1", "label_smoothing: must be in [0, 1)");
    EXPECT_ERR("label_smoothing=-0.1", "label_smoothing: must be in [0, 1)");
    EXPECT_ERR("batch_size=0", "batch_size: must be an integer in 1..65536");
    EXPECT_ERR("input.workers=0", "input.workers: must be an integer in 1..64");
    EXPECT_ERR("input.channels=2", "input.channels: must be 1 or 3");
    EXPECT_ERR("input.normalize.std=[0]",
               "input.normalize.std[0]: must be > 0");
    /* One number for every channel is checked the same way (found by
     * fuzz_spec: std 0 passed, then its normalised form did not parse). */
    EXPECT_ERR("input.normalize.std=0", "input.normalize.std: must be > 0");
    EXPECT_ERR("input.normalize.std=-1", "input.normalize.std: must be > 0");
    EXPECT_ERR("input.normalize.mean=[0.5, 0.5, 0.5]",
               "input.normalize.mean: needs 1 value per channel (1)");
    EXPECT_ERR("seed=-1", "seed: must be an integer >= 0");
    EXPECT_ERR("input.augment[1].p=1.5",
               "input.augment[1].p: must be in [0, 1]");
    EXPECT_ERR("input.augment[0].pad=0",
               "input.augment[0].pad: must be an integer in 1..1024");
    EXPECT_ERR("optimizer.type=adam",
               "optimizer.type: must be one of sgd, adamw");
    EXPECT_ERR("input.augment[1].op=\"flop\"",
               "input.augment[1].op: must be one of random_resized_crop, "
               "pad_crop, center_crop, resize, flip, color_jitter");
    EXPECT_ERR("device=gpu", "device: must be auto, cpu, cuda or cuda:N");
    EXPECT_ERR("name=\"a b\"",
               "name: must be 1-64 characters of A-Z a-z 0-9 . _ -");
    EXPECT_ERR("input.augment[0]={\"op\":\"random_resized_crop\","
               "\"scale\":[0.9,0.1]}",
               "input.augment[0].scale: needs [lo, hi] with lo <= hi");
}
END_TEST

/* Values the trainer refuses when the job starts are refused at submit:
 * the optimizer's ranges (optim.c) are the spec's. */
START_TEST(test_refused_at_submit_not_start)
{
    char err[256];
    EXPECT_ERR("optimizer.weight_decay=1",
               "optimizer.weight_decay: must be in [0, 1)");
    EXPECT_ERR("optimizer.eps=1", "optimizer.eps: must be in (0, 1)");
    ck_assert_int_eq(parse_with("optimizer.weight_decay=0.9", err,
                                sizeof err), 0);
    ck_assert_int_eq(parse_with("optimizer.eps=0.5", err, sizeof err), 0);
    /* the pipeline starts at most 64 decode workers */
    EXPECT_ERR("input.workers=65", "input.workers: must be an integer in "
               "1..64");
    ck_assert_int_eq(parse_with("input.workers=64", err, sizeof err), 0);
    /* the backends' single precision: 1 there is refused, 0 divides */
    EXPECT_ERR("label_smoothing=0.99999999999",
               "label_smoothing: 0.99999999999 rounds to 1 in single "
               "precision, where the loss is computed: must be at most "
               "0.99999994");
    ck_assert_int_eq(parse_with("label_smoothing=0.99999994", err,
                                sizeof err), 0);
    EXPECT_ERR("input.normalize.std=[1e-50]",
               "input.normalize.std[0]: 1e-50 rounds to 0 "
               "or a denormal in single precision, where the input is "
               "normalised: must be at least 1.17549435e-38");
    /* a std past FLT_MAX was infinite: every pixel normalised to 0, and
     * the model file's traind.input could not be read back */
    EXPECT_ERR("input.normalize.std=[1e39]",
               "input.normalize.std[0]: 1e+39 overflows single precision, "
               "where the input is normalised: must be at most "
               "3.40282347e+38");
    ck_assert_int_eq(parse_with("input.normalize.std=[3e38]", err,
                                sizeof err), 0);
    EXPECT_ERR("input.normalize.mean=1e300",
               "input.normalize.mean[0]: 1e+300 overflows "
               "single precision, where the input is normalised: must be "
               "within +-3.40282347e+38");
    /* x / 255 in [0, 1], less the mean, over the std: a tiny std passed
     * and the run diverged (inf in fp16) */
    char e[512];
    ck_assert_int_eq(parse_with("input.normalize.std=[1e-30]", e, sizeof e),
                     TD_E_SPEC);
    ck_assert_str_eq(e, "input.normalize.std[0]: 1e-30 lets a normalised "
                     "pixel reach 7.14e+29 ((1 - mean 0.286) / std, pixels "
                     "scaled to [0, 1]): beyond +-65504, the largest finite "
                     "fp16 value; with this mean, std must be at least "
                     "1.09002e-05");
    ck_assert_int_eq(parse_with("input.normalize.mean=[-3]\n"
                                "input.normalize.std=[5e-5]", e, sizeof e),
                     TD_E_SPEC);
    ck_assert_str_eq(e, "input.normalize.std[0]: 5e-05 lets a normalised "
                     "pixel reach 80000 ((1 - mean -3) / std, pixels scaled "
                     "to [0, 1]): beyond +-65504, the largest finite fp16 "
                     "value; with this mean, std must be at least "
                     "6.10656e-05");
    ck_assert_int_eq(parse_with("input.normalize.std=[1.1e-5]", e, sizeof e),
                     0);
}
END_TEST

START_TEST(test_missing_and_cross_field)
{
    char err[256];
    td_job_spec s;
    json_t *j = load("{\"data\": {\"train\": \"x\"}, \"optimizer\": {\"lr\": 1}}");
    ck_assert_int_eq(td_spec_parse(j, NULL, &s, err, sizeof err), TD_E_SPEC);
    ck_assert_str_eq(err, "model: missing (required)");
    json_decref(j);
    j = load("{\"model\": \"m\", \"optimizer\": {\"lr\": 1}}");
    ck_assert_int_eq(td_spec_parse(j, NULL, &s, err, sizeof err), TD_E_SPEC);
    ck_assert_str_eq(err, "data.train: missing (required unless "
                          "input.source is \"synthetic\")");
    /* synthetic input needs no data */
    ck_assert_int_eq(td_spec_apply_set(j, "input.source=synthetic", err,
                                       sizeof err), 0);
    ck_assert_int_eq(td_spec_parse(j, NULL, &s, err, sizeof err), 0);
    ck_assert_int_eq(s.input.source, TD_SOURCE_SYNTHETIC);
    td_spec_free(&s);
    json_decref(j);
    EXPECT_ERR("input.augment[0]={\"pad\": 2}",
               "input.augment[0].op: missing (required)");
    EXPECT_ERR("input.augment[0]={\"op\": \"resize\"}",
               "input.augment[0].size: missing (required)");
}
END_TEST

START_TEST(test_cross_field_rules)
{
    char err[256];
    json_t *j = load(design_example);
    td_job_spec s;
    ck_assert_int_eq(td_spec_apply_set(j, "optimizer.momentum=0", err,
                                       sizeof err), 0);
    ck_assert_int_eq(td_spec_apply_set(j, "optimizer.nesterov=true", err,
                                       sizeof err), 0);
    ck_assert_int_eq(td_spec_parse(j, NULL, &s, err, sizeof err), TD_E_SPEC);
    ck_assert_str_eq(err, "optimizer.nesterov: needs optimizer.momentum > 0");
    json_decref(j);
    EXPECT_ERR("optimizer.schedule.min_lr=0.1",
               "optimizer.schedule.min_lr: must be <= optimizer.lr");
    EXPECT_ERR("input.layout=nchw",
               "input.layout: nchw is not available: the batch reaches the "
               "device as uint8 NHWC, and each backend picks its "
               "activations' layout (use auto or nhwc)");
    ck_assert_int_eq(parse_with("input.layout=nhwc", err, sizeof err), 0);
    /* early stopping and keep_best without a validation set did nothing */
    EXPECT_ERR("data.val=null\nearly_stopping.patience=2",
               "early_stopping.patience: needs a validation set (data.val "
               "or data.val_fraction, with input.source \"files\"): it "
               "watches the validation metric");
    EXPECT_ERR("input.source=synthetic\nearly_stopping.patience=2",
               "early_stopping.patience: needs a validation set (data.val "
               "or data.val_fraction, with input.source \"files\"): it "
               "watches the validation metric");
    EXPECT_ERR("data.val=null\ncheckpoint.keep_best=true",
               "checkpoint.keep_best: needs a validation set (data.val or "
               "data.val_fraction, with input.source \"files\"): best is by "
               "the validation metric");
    EXPECT_ERR("checkpoint.at_epoch_end=false\ncheckpoint.keep_best=true",
               "checkpoint.keep_best: needs checkpoint.at_epoch_end: "
               "best.safetensors is an epoch-end checkpoint");
    /* it did not say how to drop the job file's data.val */
    EXPECT_ERR("data.val_fraction=0.1", "data.val_fraction: cannot be used "
               "with data.val (hold out part of data.train, or name a "
               "validation set; --set data.val=null drops a job file's)");
    ck_assert_int_eq(parse_with("data.val=null\ndata.val_fraction=0.1\n"
                                "early_stopping.patience=2\n"
                                "checkpoint.keep_best=true", err, sizeof err),
                     0);
    ck_assert_int_eq(parse_with("early_stopping.patience=2\n"
                                "checkpoint.keep_best=true", err, sizeof err),
                     0);
}
END_TEST

START_TEST(test_augment_geometry)
{
    /* One geometric op, decided at submit (the pipeline refused a second
     * only when the job started); every size the model's input size (the
     * pipeline writes input.size whatever an op said). */
    char err[256];
    EXPECT_ERR("input.augment[1]={\"op\":\"random_resized_crop\"}",
               "input.augment[1]: a second geometric op after "
               "input.augment[0] (pad_crop): one of random_resized_crop, "
               "pad_crop, center_crop, resize (a resize right before a "
               "center_crop counts as one)");
    EXPECT_ERR("input.augment[0]={\"op\":\"random_resized_crop\","
               "\"size\":20}",
               "input.augment[0].size: [20, 20] differs from input.size "
               "[28, 28]: the ops' output is the model's input (leave size "
               "out, or change input.size)");
    EXPECT_ERR("input.augment[0]={\"op\":\"resize\",\"size\":[40,30]}",
               "input.augment[0].size: [40, 30] differs from input.size "
               "[28, 28]: the ops' output is the model's input (leave size "
               "out, or change input.size)");
    EXPECT_ERR("input.augment[0]={\"op\":\"center_crop\",\"size\":24}",
               "input.augment[0].size: [24, 24] differs from input.size "
               "[28, 28]: the ops' output is the model's input (leave size "
               "out, or change input.size)");
    EXPECT_ERR("input.augment=[{\"op\":\"resize\",\"size\":[32,40]},"
               "{\"op\":\"center_crop\"}]",
               "input.augment[0].size: before a center_crop, resize takes "
               "one side (the image's shorter side, e.g. 256), not [32, 40]");
    EXPECT_ERR("input.augment=[{\"op\":\"resize\",\"size\":20},"
               "{\"op\":\"center_crop\"}]",
               "input.augment[0].size: 20 is smaller than the crop after it "
               "(input.size [28, 28])");
    EXPECT_ERR("input.augment=[{\"op\":\"resize\",\"size\":32},"
               "{\"op\":\"flip\"},{\"op\":\"center_crop\"}]",
               "input.augment[0].size: [32, 32] differs from input.size "
               "[28, 28]: the ops' output is the model's input (leave size "
               "out, or change input.size)");
    /* accepted: torchvision's Resize(32) + CenterCrop(28), the sizes
     * written out, the flip and jitter anywhere */
    ck_assert_int_eq(parse_with("input.augment=[{\"op\":\"flip\"},"
                                "{\"op\":\"resize\",\"size\":32},"
                                "{\"op\":\"center_crop\",\"size\":28},"
                                "{\"op\":\"color_jitter\"}]",
                                err, sizeof err),
                     0);
    ck_assert_int_eq(parse_with("input.augment=[{\"op\":"
                                "\"random_resized_crop\",\"size\":[28,28]},"
                                "{\"op\":\"flip\"}]",
                                err, sizeof err),
                     0);
    ck_assert_int_eq(parse_with("input.augment=[{\"op\":\"resize\","
                                "\"size\":28}]",
                                err, sizeof err),
                     0);
    /* a pad as large as the crop's side: some crops are all padding */
    char e[512];
    ck_assert_int_eq(parse_with("input.size=[28,32]\n"
                                "input.augment[0].pad=28", e, sizeof e),
                     TD_E_SPEC);
    ck_assert_str_eq(e, "input.augment[0].pad: 28 is not less than the "
                     "crop's side (input.size [28, 32]): a crop shifted by "
                     "up to 28 pixels can miss the image and be all "
                     "padding; must be at most 27");
    ck_assert_int_eq(parse_with("input.augment[0].pad=27", err, sizeof err),
                     0);
}
END_TEST

START_TEST(test_not_an_object)
{
    char err[128];
    td_job_spec s;
    json_t *j = json_array();
    ck_assert_int_eq(td_spec_parse(j, NULL, &s, err, sizeof err), TD_E_SPEC);
    ck_assert_str_eq(err, "(spec): must be a JSON object");
    td_spec_free(&s); /* safe after a failure */
    json_decref(j);
}
END_TEST

/* init, freeze, lr_mult, early_stopping: their checks, and a spec that
 * leaves them at
 * their defaults hashes as it did before they existed (FNV-1a of the
 * normalised JSON without them), so its old checkpoints still resume. */
START_TEST(test_finetune_fields)
{
    EXPECT_ERR("freeze=\"conv1.*\"", "freeze: must be an array of strings");
    EXPECT_ERR("freeze=[\"\"]",
               "freeze[0]: must be a string of 1..200 characters");
    EXPECT_ERR("lr_mult=[1]", "lr_mult: must be an object of pattern: number");
    EXPECT_ERR("lr_mult={\"fc.*\": -1}",
               "lr_mult.fc.*: must be a number in [0, 1000]");
    EXPECT_ERR("init=3", "init: must be a path or a non-empty array of paths");
    EXPECT_ERR("early_stopping.metric=acc",
               "early_stopping.metric: must be one of val_loss, val_acc");
    EXPECT_ERR("early_stopping.patience=-1",
               "early_stopping.patience: must be an integer in 0..100000");

    td_job_spec a, b;
    char err[256];
    json_t *j = load(design_example);
    ck_assert_int_eq(td_spec_parse(j, "/base", &a, err, sizeof err), 0);
    ck_assert_int_eq(a.init.n, 0);
    ck_assert_int_eq(a.freeze.n, 0);
    ck_assert_uint_eq(json_object_size(a.lr_mult), 0);
    json_t *old = json_deep_copy(a.json);
    json_object_del(old, "init");
    json_object_del(old, "freeze");
    json_object_del(old, "freeze_bn_stats");
    json_object_del(old, "lr_mult");
    json_object_del(old, "early_stopping");
    json_object_del(json_object_get(old, "checkpoint"), "keep_best");
    json_object_del(json_object_get(old, "checkpoint"), "best_metric");
    json_object_del(old, "precision"); /* never hashed (precision.h) */
    json_object_del(old, "deterministic"); /* nor this */
    json_object_del(old, "loss_scale"); /* nor this (spec.c) */
    json_object_del(old, "cuda_graphs");   /* nor this */
    char *txt = json_dumps(old, JSON_COMPACT | JSON_SORT_KEYS);
    uint64_t h = UINT64_C(0xcbf29ce484222325);
    for (const unsigned char *p = (const unsigned char *)txt; *p; p++) {
        h ^= *p;
        h *= UINT64_C(0x100000001b3);
    }
    /* (the hash of checkpoints written before 2026-11-28, which still
     * resume; today's also leaves the run's knobs out) */
    ck_assert(td_spec_hash_matches(&a, h));
    ck_assert_uint_ne(td_spec_hash(&a), h);
    free(txt);
    json_decref(old);
    ck_assert_int_eq(td_spec_apply_set(j, "freeze=[\"conv1.*\"]", err,
                                       sizeof err), 0);
    ck_assert_int_eq(td_spec_apply_set(j, "lr_mult={\"fc.*\": 10}", err,
                                       sizeof err), 0);
    ck_assert_int_eq(td_spec_apply_set(j, "init=w.safetensors", err,
                                       sizeof err), 0);
    ck_assert_int_eq(td_spec_parse(j, "/base", &b, err, sizeof err), 0);
    ck_assert_str_eq(b.freeze.v[0], "conv1.*");
    ck_assert_str_eq(b.init.v[0], "/base/w.safetensors");
    ck_assert_double_eq(json_number_value(json_object_get(b.lr_mult,
                                                          "fc.*")), 10);
    ck_assert_uint_ne(td_spec_hash(&b), td_spec_hash(&a));
    td_spec_free(&b);
    /* early stopping set: hashed */
    json_t *k = load(design_example);
    ck_assert_int_eq(td_spec_apply_set(k, "early_stopping.patience=2", err,
                                       sizeof err), 0);
    ck_assert_int_eq(td_spec_parse(k, "/base", &b, err, sizeof err), 0);
    ck_assert_int_eq(b.early_stopping.patience, 2);
    ck_assert_int_eq(b.early_stopping.metric, 0);
    ck_assert_uint_ne(td_spec_hash(&b), td_spec_hash(&a));
    td_spec_free(&b);
    ck_assert_int_eq(td_spec_apply_set(k, "checkpoint.keep_best=true", err,
                                       sizeof err), 0);
    ck_assert_int_eq(td_spec_parse(k, "/base", &b, err, sizeof err), 0);
    ck_assert_int_eq(b.checkpoint.keep_best, 1);
    ck_assert_uint_ne(td_spec_hash(&b), td_spec_hash(&a));
    td_spec_free(&b);
    json_decref(k);
    td_spec_free(&a);
    json_decref(j);
}
END_TEST

START_TEST(test_roundtrip_hash)
{
    td_job_spec a, b;
    char err[256], ha[17], hb[17];
    json_t *j = load(design_example);
    ck_assert_int_eq(td_spec_parse(j, "/base", &a, err, sizeof err), 0);
    json_t *norm = td_spec_to_json(&a);
    /* every default is written out */
    ck_assert_ptr_nonnull(json_object_get(json_object_get(norm, "metrics"),
                                          "window_steps"));
    ck_assert_ptr_nonnull(json_object_get(
        json_object_get(json_object_get(norm, "optimizer"), "schedule"),
        "min_lr"));
    ck_assert_int_eq(td_spec_parse(norm, "/elsewhere", &b, err, sizeof err), 0);
    td_spec_hash_hex(&a, ha);
    td_spec_hash_hex(&b, hb);
    ck_assert_str_eq(ha, hb);
    ck_assert_uint_eq(strlen(ha), 16);
    /* key order does not matter; a changed value does */
    json_t *k = load("{\"seed\": 1, \"model\": \"fmnist-cnn\","
                     " \"epochs\": 10, \"batch_size\": 128}");
    json_object_update(j, k);
    td_job_spec c;
    ck_assert_int_eq(td_spec_parse(j, "/base", &c, err, sizeof err), 0);
    ck_assert_uint_eq(td_spec_hash(&c), td_spec_hash(&a));
    td_spec_free(&c);
    ck_assert_int_eq(td_spec_apply_set(j, "epochs=11", err, sizeof err), 0);
    ck_assert_int_eq(td_spec_parse(j, "/base", &c, err, sizeof err), 0);
    ck_assert_uint_ne(td_spec_hash(&c), td_spec_hash(&a));
    td_spec_free(&c);
    json_decref(k);
    json_decref(norm);
    td_spec_free(&a);
    td_spec_free(&b);
    json_decref(j);
}
END_TEST

START_TEST(test_overrides)
{
    char err[256];
    td_job_spec s;
    json_t *j = load(design_example);
    ck_assert_int_eq(td_spec_apply_override(j, "optimizer.lr", "0.1", err,
                                            sizeof err), 0);
    ck_assert_int_eq(td_spec_apply_set(j, "epochs=3", err, sizeof err), 0);
    ck_assert_int_eq(td_spec_apply_set(j, "name=demo", err, sizeof err), 0);
    ck_assert_int_eq(td_spec_apply_set(j, "metrics.window_steps=50", err,
                                       sizeof err), 0);
    ck_assert_int_eq(td_spec_apply_set(j, "data.train=[\"a.tar\",\"b.tar\"]",
                                       err, sizeof err), 0);
    ck_assert_int_eq(td_spec_apply_set(j, "input.augment[0].pad=3", err,
                                       sizeof err), 0);
    ck_assert_int_eq(td_spec_apply_set(j, "device=cuda:1", err, sizeof err),
                     0);
    ck_assert_int_eq(td_spec_apply_set(j, "model={\"layers\": [1, 2]}", err,
                                       sizeof err), 0);
    ck_assert_int_eq(td_spec_parse(j, "/data/", &s, err, sizeof err), 0);
    ck_assert_double_eq(s.optimizer.lr, 0.1);
    ck_assert_int_eq(s.epochs, 3);
    ck_assert_str_eq(s.name, "demo");        /* not JSON: taken as a string */
    ck_assert_int_eq(s.metrics.window_steps, 50); /* section created */
    ck_assert_int_eq(s.data.train.n, 2);
    ck_assert_str_eq(s.data.train.v[0], "/data/a.tar");
    ck_assert_str_eq(s.data.train.v[1], "/data/b.tar");
    ck_assert_int_eq(s.input.augment[0].pad, 3);
    ck_assert_str_eq(s.device, "cuda:1");
    /* an inline model is kept whole for the compute core */
    ck_assert(json_is_object(s.model));
    ck_assert_uint_eq(json_array_size(json_object_get(s.model, "layers")), 2);
    td_spec_free(&s);
    json_decref(j);
}
END_TEST

START_TEST(test_override_errors)
{
    char err[256];
    json_t *j = load(design_example);
    ck_assert_int_eq(td_spec_apply_set(j, "epochs", err, sizeof err),
                     TD_E_SPEC);
    ck_assert_str_eq(err, "epochs: expected key.path=value");
    ck_assert_int_eq(td_spec_apply_set(j, "=3", err, sizeof err), TD_E_SPEC);
    ck_assert_int_eq(td_spec_apply_set(j, "epochs.x=3", err, sizeof err),
                     TD_E_SPEC);
    ck_assert_str_eq(err, "epochs: is not an object");
    ck_assert_int_eq(td_spec_apply_set(j, "input.augment[5].p=1", err,
                                       sizeof err), TD_E_SPEC);
    ck_assert_str_eq(err, "input.augment: has no element [5]");
    ck_assert_int_eq(td_spec_apply_set(j, "optimizer..lr=1", err, sizeof err),
                     TD_E_SPEC);
    ck_assert_str_eq(err, "optimizer..lr: malformed key path");
    /* a key that is not UTF-8 is a bad key, not "out of memory" (-ENOMEM
     * with no message), whether it is the last segment or one on the way */
    ck_assert_int_eq(td_spec_apply_set(j, "input.augm\xfcnt[0].p=1", err,
                                       sizeof err), TD_E_SPEC);
    ck_assert_str_eq(err, "(override): key path is not valid UTF-8");
    ck_assert_int_eq(td_spec_apply_set(j, "na\xffme=x", err, sizeof err),
                     TD_E_SPEC);
    ck_assert_str_eq(err, "(override): key path is not valid UTF-8");
    /* nothing was changed by the failed overrides */
    json_t *orig = load(design_example);
    ck_assert(json_equal(j, orig));
    json_decref(orig);
    json_decref(j);
}
END_TEST

static char *write_tmp(char *dir_out, const char *text)
{
    static char path[256];
    char tmpl[] = "/tmp/td_spec_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(tmpl));
    strcpy(dir_out, tmpl);
    snprintf(path, sizeof path, "%s/job.json", tmpl);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
    return path;
}

START_TEST(test_load_file)
{
    char dir[64], err[256], want[300];
    td_job_spec s;
    const char *sets[] = {"data.train=shards/train-{0..3}.tar", "epochs=2"};
    char *path = write_tmp(dir, "{\"model\": \"m\", \"optimizer\": {\"lr\": 1},"
                                " \"data\": {\"train\": \"x\", \"val\": \"./val\"}}");
    ck_assert_int_eq(td_spec_load_file(path, sets, 2, &s, err, sizeof err), 0);
    /* A --set path is relative to the current directory (issue 18), the
     * file's own paths to the file's folder. */
    char cwd[200];
    ck_assert_ptr_nonnull(getcwd(cwd, sizeof cwd));
    snprintf(want, sizeof want, "%s/shards/train-{0..3}.tar", cwd);
    ck_assert_str_eq(s.data.train.v[0], want);
    snprintf(want, sizeof want, "%s/val", dir);
    ck_assert_str_eq(s.data.val.v[0], want);
    ck_assert_int_eq(s.epochs, 2);
    td_spec_free(&s);
    unlink(path);
    rmdir(dir);
}
END_TEST

START_TEST(test_load_file_errors)
{
    char dir[64], err[256];
    td_job_spec s;
    ck_assert_int_eq(td_spec_load_file("/nonexistent/job.json", NULL, 0, &s,
                                       err, sizeof err), -ENOENT);
    ck_assert_str_eq(err, "/nonexistent/job.json: No such file or directory");
    char *path = write_tmp(dir, "{\"model\": \"m\",\n \"epochs\": }");
    ck_assert_int_eq(td_spec_load_file(path, NULL, 0, &s, err, sizeof err),
                     TD_E_SPEC);
    ck_assert_msg(strstr(err, "line 2 column") != NULL, "%s", err);
    unlink(path);
    rmdir(dir);
}
END_TEST

START_TEST(test_reference_job)
{
    char path[512], err[256];
    td_job_spec s;
    const char *root = getenv("TD_SOURCE_ROOT");
    ck_assert_ptr_nonnull(root);
    snprintf(path, sizeof path, "%s/config/jobs/fmnist-cnn.json", root);
    ck_assert_int_eq(td_spec_load_file(path, NULL, 0, &s, err, sizeof err), 0);
    ck_assert_str_eq(json_string_value(s.model), "fmnist-cnn");
    ck_assert_int_eq(s.optimizer.type, TD_OPT_SGD);
    ck_assert_double_eq(s.optimizer.lr, 0.05);
    ck_assert_double_eq(s.optimizer.momentum, 0.9);
    ck_assert_double_eq(s.optimizer.weight_decay, 5e-4);
    ck_assert_int_eq(s.optimizer.schedule.type, TD_SCHED_COSINE);
    ck_assert_int_eq(s.optimizer.schedule.warmup_steps, 100);
    ck_assert_double_eq(s.optimizer.schedule.min_lr, 0.0);
    ck_assert_int_eq(s.batch_size, 128);
    ck_assert_int_eq(s.epochs, 3);
    ck_assert_uint_eq(s.seed, 1);
    ck_assert_int_eq(s.input.channels, 1);
    ck_assert_int_eq(s.input.size[0], 28);
    ck_assert_int_eq(s.input.n_augment, 2);
    ck_assert_int_eq(s.input.augment[0].op, TD_SPEC_AUG_PAD_CROP);
    ck_assert_int_eq(s.input.augment[0].pad, 2);
    ck_assert_int_eq(s.input.augment[1].op, TD_SPEC_AUG_FLIP);
    ck_assert_double_eq(s.input.mean[0], 0.2860);
    ck_assert_double_eq(s.input.std[0], 0.3530);
    ck_assert_str_eq(s.data.train.v[0], "/var/lib/traind/data/fmnist/train");
    ck_assert_str_eq(s.data.val.v[0], "/var/lib/traind/data/fmnist/test");
    td_spec_free(&s);
    /* The 10-epoch job: the same recipe and data, batch 64 (docs/compute.md
     * says why); the synthetic one parses too. */
    snprintf(path, sizeof path, "%s/config/jobs/fmnist-cnn-10.json", root);
    ck_assert_int_eq(td_spec_load_file(path, NULL, 0, &s, err, sizeof err), 0);
    ck_assert_int_eq(s.batch_size, 64);
    ck_assert_int_eq(s.epochs, 10);
    ck_assert_double_eq(s.optimizer.lr, 0.05);
    ck_assert_str_eq(s.data.train.v[0], "/var/lib/traind/data/fmnist/train");
    ck_assert_str_eq(s.data.val.v[0], "/var/lib/traind/data/fmnist/test");
    td_spec_free(&s);
    snprintf(path, sizeof path, "%s/config/jobs/fmnist-cnn-synthetic.json",
             root);
    ck_assert_msg(td_spec_load_file(path, NULL, 0, &s, err, sizeof err) == 0,
                  "%s", err);
    td_spec_free(&s);
}
END_TEST

/* Relative paths joined to a physical base lose their leading ./ and
 * ../: trainctl show printed /tmp/day/jobs/../data/train for a job
 * file's "../data/train". */
START_TEST(test_path_join)
{
    static const char *const cases[][3] = {
        {"/a/jobs", "../data/train", "/a/data/train"},
        {"/a/jobs/", "./../../x", "/x"},
        {"/a/jobs", "train", "/a/jobs/train"},
        {"/a/jobs", "./t/../u", "/a/jobs/t/../u"}, /* only leading ones */
        {"/a", "..", "/"},
        {"/", "../x", "/x"},
        {"/a/b", ".", "/a/b"},
        {".", "../x", "./../x"}, /* a relative base: left alone */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *j = td_spec_path_join(cases[i][0], cases[i][1]);
        ck_assert_msg(j && strcmp(json_string_value(j), cases[i][2]) == 0,
                      "%s + %s: %s, not %s", cases[i][0], cases[i][1],
                      j ? json_string_value(j) : "NULL", cases[i][2]);
        json_decref(j);
    }
}
END_TEST

static Suite *spec_suite(void)
{
    Suite *s = suite_create("spec");
    TCase *tc = tcase_create("spec");
    tcase_add_test(tc, test_design_example);
    tcase_add_test(tc, test_defaults);
    tcase_add_test(tc, test_unknown_keys);
    tcase_add_test(tc, test_type_errors);
    tcase_add_test(tc, test_range_errors);
    tcase_add_test(tc, test_refused_at_submit_not_start);
    tcase_add_test(tc, test_missing_and_cross_field);
    tcase_add_test(tc, test_cross_field_rules);
    tcase_add_test(tc, test_augment_geometry);
    tcase_add_test(tc, test_not_an_object);
    tcase_add_test(tc, test_roundtrip_hash);
    tcase_add_test(tc, test_finetune_fields);
    tcase_add_test(tc, test_overrides);
    tcase_add_test(tc, test_override_errors);
    tcase_add_test(tc, test_load_file);
    tcase_add_test(tc, test_load_file_errors);
    tcase_add_test(tc, test_reference_job);
    tcase_add_test(tc, test_path_join);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(spec_suite)
