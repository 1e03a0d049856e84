/* test_model.c - model definitions: the zoo builds with the right shapes,
 * parameter counts and FLOPs; bad definitions fail naming the path. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "model/model.h"
#include "store/weights.h"
#include "tdtest.h"

static char zoo[4096];

static void setup(void)
{
    const char *root = getenv("TD_SOURCE_ROOT");
    snprintf(zoo, sizeof zoo, "%s/config/models", root ? root : ".");
}

static td_model *load(const char *name, td_shape in, int classes)
{
    td_model *m = NULL;
    char err[256] = "";
    int rc = td_model_load(zoo, name, in, classes, &m, err, sizeof err);
    ck_assert_msg(rc == 0, "%s: %s", name, err);
    return m;
}

START_TEST(test_fmnist_cnn_shapes)
{
    td_model *m = load("fmnist-cnn", (td_shape){1, 28, 28}, 10);
    int pool2 = td_model_find(m, "pool2");
    ck_assert_int_ge(pool2, 0);
    ck_assert_int_eq(m->layers[pool2].out.c, 64);
    ck_assert_int_eq(m->layers[pool2].out.h, 7);
    ck_assert_int_eq(m->layers[pool2].out.w, 7);
    ck_assert_int_eq(m->layers[m->nlayers - 1].out.c, 10);
    /* 4 convs (no bias), 4 BN (scale, shift), dense (weight, bias) */
    ck_assert_int_eq(m->nparams, 4 + 8 + 2);
    size_t want = 9 * 32 + 9 * 32 * 32 + 9 * 32 * 64 + 9 * 64 * 64 +
                  2 * (32 + 32 + 64 + 64) + 64 * 7 * 7 * 10 + 10;
    ck_assert_uint_eq(m->param_count, want);
    ck_assert_int_eq(m->nstate, 8);
    /* docs/design.md#compute: 36.6 MFLOP forward per sample */
    ck_assert_double_eq_tol(m->fwd_flops / 1e6, 36.6, 0.05);
    td_model_free(m);
}
END_TEST

/* torchvision's counts for 1000 classes; resnet20 from He et al. with
 * 1x1-conv shortcuts. */
START_TEST(test_resnet_param_counts)
{
    td_model *m = load("resnet18", (td_shape){3, 224, 224}, 1000);
    ck_assert_uint_eq(m->param_count, 11689512);
    ck_assert_double_eq_tol(m->fwd_flops / 1e9, 3.64, 0.05);
    td_model_free(m);
    m = load("resnet50", (td_shape){3, 224, 224}, 1000);
    ck_assert_uint_eq(m->param_count, 25557032);
    td_model_free(m);
    m = load("resnet20", (td_shape){3, 32, 32}, 10);
    int pool = td_model_find(m, "avgpool");
    ck_assert_int_eq(m->layers[pool - 1].out.c, 64);
    ck_assert_int_eq(m->layers[pool - 1].out.h, 8);
    ck_assert_uint_gt(m->param_count, 270000);
    ck_assert_uint_lt(m->param_count, 280000);
    td_model_free(m);
}
END_TEST

START_TEST(test_residual_wiring)
{
    td_model *m = load("resnet20", (td_shape){3, 32, 32}, 10);
    int add = td_model_find(m, "layer1.0.add");
    int stem = td_model_find(m, "relu");
    ck_assert_int_ge(add, 0);
    ck_assert_int_eq(m->layers[add].in[1], stem);
    ck_assert_int_eq(m->layers[stem].consumers, 2);
    td_model_free(m);
}
END_TEST

static const td_param *param(const td_model *m, const char *name)
{
    for (int p = 0; p < m->nparams; p++)
        if (strcmp(m->params[p].name, name) == 0)
            return &m->params[p];
    ck_abort_msg("no parameter %s", name);
    return NULL;
}

static int has_state(const td_model *m, const char *name)
{
    for (int s = 0; s < m->nstate; s++)
        if (strcmp(m->state[s].name, name) == 0)
            return 1;
    return 0;
}

/* torchvision's state_dict keys: resnet18 has 62 parameters and 60
 * buffers (running_mean, running_var, num_batches_tracked of 20 batch
 * norms), resnet50 161 and 159.  (tests/ref/check_torchvision.py loads
 * them into torchvision itself with strict=True.) */
START_TEST(test_zoo_torchvision_names)
{
    td_model *m = load("resnet18", (td_shape){3, 224, 224}, 1000);
    ck_assert_int_eq(m->nparams, 62);
    ck_assert_int_eq(m->nstate + td_weights_bn_layers(m), 60);
    ck_assert_str_eq(m->params[0].name, "conv1.weight");
    ck_assert_str_eq(m->params[1].name, "bn1.weight");
    ck_assert_str_eq(m->params[2].name, "bn1.bias");
    const td_param *p = param(m, "layer2.0.downsample.0.weight");
    ck_assert_int_eq(p->ndims, 4);
    ck_assert_int_eq(p->dims[0], 128);
    ck_assert_int_eq(p->dims[1], 64);
    ck_assert_int_eq(p->dims[2], 1);
    p = param(m, "layer4.1.conv2.weight");
    ck_assert_int_eq(p->dims[0], 512);
    ck_assert_int_eq(p->dims[2], 3);
    ck_assert_int_eq(param(m, "fc.weight")->dims[1], 512);
    ck_assert_int_eq(param(m, "fc.bias")->dims[0], 1000);
    ck_assert(has_state(m, "layer4.1.bn2.running_var"));
    ck_assert(has_state(m, "bn1.running_mean"));
    /* v1.5: a basic block strides in its first 3x3 conv */
    ck_assert_int_eq(m->layers[td_model_find(m, "layer3.0.conv1")].stride,
                     2);
    td_model_free(m);

    m = load("resnet50", (td_shape){3, 224, 224}, 1000);
    ck_assert_int_eq(m->nparams, 161);
    ck_assert_int_eq(m->nstate + td_weights_bn_layers(m), 159);
    /* v1.5: a bottleneck strides in its 3x3 conv2, not in conv1 */
    ck_assert_int_eq(m->layers[td_model_find(m, "layer2.0.conv1")].stride,
                     1);
    ck_assert_int_eq(m->layers[td_model_find(m, "layer2.0.conv2")].stride,
                     2);
    ck_assert_int_eq(param(m, "layer1.0.downsample.0.weight")->dims[0], 256);
    ck_assert_int_eq(param(m, "layer4.2.conv3.weight")->dims[0], 2048);
    td_model_free(m);

    m = load("resnet20", (td_shape){3, 32, 32}, 10);
    ck_assert_str_eq(m->params[0].name, "conv1.weight");
    ck_assert_int_eq(param(m, "layer2.0.shortcut.0.weight")->dims[0], 32);
    ck_assert_int_eq(param(m, "layer3.2.bn2.bias")->dims[0], 64);
    ck_assert_int_eq(param(m, "linear.weight")->dims[0], 10);
    td_model_free(m);
}
END_TEST

START_TEST(test_init_seeded_kaiming)
{
    td_model *m = load("fmnist-cnn", (td_shape){1, 28, 28}, 10);
    float *a = malloc(m->param_count * sizeof *a);
    float *b = malloc(m->param_count * sizeof *b);
    td_model_init_params(m, 7, a);
    td_model_init_params(m, 7, b);
    ck_assert_mem_eq(a, b, m->param_count * sizeof *a);
    td_model_init_params(m, 8, b);
    ck_assert(memcmp(a, b, m->param_count * sizeof *a) != 0);
    /* conv4.weight: fan_in 576, so sd sqrt(2/576) = 0.0589 */
    size_t off = 0;
    int p = 0;
    while (strcmp(m->params[p].name, "conv4.weight") != 0)
        off += m->params[p++].count;
    double s2 = 0;
    for (size_t i = 0; i < m->params[p].count; i++)
        s2 += (double)a[off + i] * a[off + i];
    ck_assert_double_eq_tol(sqrt(s2 / m->params[p].count), 0.0589, 0.002);
    /* BN scale starts at 1, shift at 0 */
    off = 0;
    for (p = 0; strcmp(m->params[p].name, "bn1.weight") != 0; p++)
        off += m->params[p].count;
    ck_assert_float_eq(a[off], 1.0f);
    ck_assert_float_eq(a[off + 32], 0.0f);
    free(a);
    free(b);
    td_model_free(m);
}
END_TEST

static const struct {
    const char *json, *msg;
} bad[] = {
    {"{\"layers\": [{\"type\": \"conv2d\", \"channels\": 4, \"kernel\": 13}]}",
     "model.layers[0].kernel: must be an integer 1..11"},
    {"{\"layers\": [{\"type\": \"conv2d\", \"channels\": 4, \"kernel\": 3, "
     "\"strid\": 2}]}",
     "model.layers[0].strid: unknown key for a conv2d layer"},
    {"{\"layers\": [{\"type\": \"conv\"}]}",
     "model.layers[0].type: unknown layer type \"conv\""},
    {"{\"layers\": [{\"type\": \"relu\"}, {\"type\": \"add\", \"inputs\": "
     "[\"relu1\", \"nope\"]}]}",
     "model.layers[1].inputs[1]: no earlier layer named \"nope\""},
    {"{\"layers\": [{\"type\": \"conv2d\", \"name\": \"a\", \"channels\": 4, "
     "\"kernel\": 1}, {\"type\": \"add\", \"inputs\": [\"a\", \"input\"]}]}",
     "model.layers[1] (add2): inputs \"a\" 4x8x8 and \"input\" 1x8x8 differ "
     "in shape"},
    {"{\"layers\": [{\"type\": \"maxpool\", \"kernel\": 9}]}",
     "model.layers[0] (maxpool1): input \"input\" 1x8x8 is too small for "
     "kernel 9, stride 9, pad 0"},
    {"{\"layers\": [{\"type\": \"flatten\"}, {\"type\": \"dense\", "
     "\"units\": 5}]}",
     "model.layers[1] (dense2): the last layer must output 10 classes, not "
     "5x1x1"},
    {"{\"layers\": [{\"type\": \"flatten\"}, {\"type\": \"batchnorm\"}]}",
     "model.layers[1] (batchnorm2): a batchnorm needs an image input, but "
     "\"flatten1\" is flat"},
    {"{\"layers\": [], \"x\": 1}", "model.x: unknown key"},
    {"{\"layers\": [{\"type\": \"dropout\", \"rate\": 1.0}]}",
     "model.layers[0].rate: must be a number in [0, 1)"},
    {"{\"layers\": [{\"type\": \"relu\", \"name\": \"r\"}, {\"type\": "
     "\"relu\", \"name\": \"r\"}]}",
     "model.layers[1].name: \"r\" is already used"},
};

START_TEST(test_bad_definitions)
{
    json_error_t je;
    json_t *def = json_loads(bad[_i].json, 0, &je);
    ck_assert_msg(def != NULL, "test JSON: %s", je.text);
    td_model *m = (td_model *)1;
    char err[256] = "";
    int rc = td_model_build(def, (td_shape){1, 8, 8}, 10, &m, err, sizeof err);
    ck_assert_int_eq(rc, TD_E_SPEC);
    ck_assert_ptr_null(m);
    ck_assert_str_eq(err, bad[_i].msg);
    json_decref(def);
}
END_TEST

START_TEST(test_values_per_sample_fit_an_int)
{
    /* 65536 channels on 3x8192x8192 (the spec's largest input): 2^42
     * values per sample; flatten and dense computed c * h * w of that in
     * an int (signed overflow, UB) and went on with the wrapped size */
    static const char *const defs[] = {
        "{\"layers\": [{\"type\": \"conv2d\", \"channels\": 65536, "
        "\"kernel\": 1}, {\"type\": \"flatten\"}, {\"type\": \"dense\", "
        "\"units\": \"classes\"}]}",
        "{\"layers\": [{\"type\": \"conv2d\", \"channels\": 65536, "
        "\"kernel\": 1}, {\"type\": \"dense\", \"units\": \"classes\"}]}",
    };
    for (int i = 0; i < 2; i++) {
        json_t *def = json_loads(defs[i], 0, NULL);
        ck_assert_ptr_nonnull(def);
        td_model *m = (td_model *)1;
        char err[256] = "";
        int rc = td_model_build(def, (td_shape){3, 8192, 8192}, 10, &m, err,
                                sizeof err);
        ck_assert_int_eq(rc, TD_E_SPEC);
        ck_assert_ptr_null(m);
        ck_assert_str_eq(err, "model.layers[0] (conv2d1): output "
                              "65536x8192x8192 has more than 2147483647 "
                              "values per sample");
        json_decref(def);
    }
    /* the same layers on a small input build */
    json_t *def = json_loads(defs[0], 0, NULL);
    td_model *m = NULL;
    char err[256] = "";
    ck_assert_int_eq(td_model_build(def, (td_shape){3, 8, 8}, 10, &m, err,
                                    sizeof err), 0);
    ck_assert_int_eq(m->layers[2].out.c, 65536 * 64);
    td_model_free(m);
    json_decref(def);
}
END_TEST

START_TEST(test_load_errors)
{
    td_model *m = NULL;
    char err[1024] = "";
    int rc = td_model_load(zoo, "no-such-model", (td_shape){1, 28, 28}, 10,
                           &m, err, sizeof err);
    ck_assert_int_eq(rc, TD_E_SPEC);
    ck_assert_ptr_nonnull(strstr(err, "no-such-model.json"));
    /* and names the models there are (a typo's fix is among them) */
    ck_assert_msg(strstr(err, "the zoo there has fmnist-cnn, resnet18, "
                              "resnet20, resnet50"), "%s", err);
    char big[1024];
    rc = td_model_load("/nonexistent/zoo", "resnet-20", (td_shape){3, 32, 32},
                       4, &m, big, sizeof big);
    ck_assert_int_eq(rc, TD_E_SPEC);
    ck_assert_msg(strstr(big, "there is no folder /nonexistent/zoo"), "%s",
                  big);
    rc = td_model_load(zoo, "fmnist-cnn", (td_shape){1, 28, 28}, 1, &m, err,
                       sizeof err);
    ck_assert_int_eq(rc, TD_E_SPEC);
    ck_assert_ptr_nonnull(strstr(err, "1 classes"));
    /* 8x8 input: after two 2x2 pools 2x2, fine; 3x3 input is too small */
    rc = td_model_load(zoo, "fmnist-cnn", (td_shape){1, 3, 3}, 10, &m, err,
                       sizeof err);
    ck_assert_int_eq(rc, TD_E_SPEC);
    ck_assert_ptr_nonnull(strstr(err, "pool2"));
}
END_TEST

/* A model .json is a user's file: a FIFO named as one is refused at once
 * (it blocked the caller in open(): the daemon's loop at submit, until a
 * writer came), and so is a file bigger than a definition can be (a
 * sparse file of GBs was read whole into memory); a missing one says so. */
START_TEST(test_load_def_refuses_odd_files)
{
    char dir[] = "/tmp/td-model-XXXXXX", fifo[64], big[64], err[1024];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(fifo, sizeof fifo, "%s/fifo.json", dir);
    snprintf(big, sizeof big, "%s/big.json", dir);
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    FILE *f = fopen(big, "w");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(ftruncate(fileno(f), TD_MODEL_DEF_MAX + 1), 0);
    fclose(f);
    json_t *def = NULL;
    int rc = td_model_load_def(zoo, fifo, &def, err, sizeof err);
    ck_assert_int_eq(rc, TD_E_SPEC);
    ck_assert_msg(strstr(err, "fifo.json: not a regular file"), "%s", err);
    rc = td_model_load_def(zoo, big, &def, err, sizeof err);
    ck_assert_int_eq(rc, TD_E_SPEC);
    ck_assert_msg(strstr(err, "more than a model definition may be "
                              "(16 MiB)"), "%s", err);
    unlink(fifo);
    rc = td_model_load_def(zoo, fifo, &def, err, sizeof err);
    ck_assert_int_eq(rc, TD_E_SPEC);
    ck_assert_msg(strstr(err, "fifo.json: No such file"), "%s", err);
    ck_assert_ptr_null(def);
    unlink(big);
    rmdir(dir);
}
END_TEST

static Suite *model_suite(void)
{
    Suite *s = suite_create("model");
    TCase *tc = tcase_create("model");
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, test_fmnist_cnn_shapes);
    tcase_add_test(tc, test_resnet_param_counts);
    tcase_add_test(tc, test_residual_wiring);
    tcase_add_test(tc, test_zoo_torchvision_names);
    tcase_add_test(tc, test_init_seeded_kaiming);
    tcase_add_loop_test(tc, test_bad_definitions, 0,
                        (int)(sizeof bad / sizeof bad[0]));
    tcase_add_test(tc, test_values_per_sample_fit_an_int);
    tcase_add_test(tc, test_load_errors);
    tcase_add_test(tc, test_load_def_refuses_odd_files);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(model_suite)
