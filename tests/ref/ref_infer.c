/* ref_infer.c - traind's side of the torchvision cross-check
 * (check_torchvision.py drives it).
 *
 *   ref_infer logits MODEL C H W CLASSES WEIGHTS IMAGES N OUT
 *       builds zoo model MODEL for C x H x W inputs and CLASSES classes,
 *       loads WEIGHTS (safetensors, by name, strict) through td_infer,
 *       runs the N uint8 NHWC images in IMAGES in evaluation mode on the
 *       CPU backend and writes N x CLASSES float32 logits to OUT
 *   ref_infer export MODEL C H W CLASSES SEED OUT
 *       writes the model's seeded initialisation, with batch-norm scales,
 *       shifts and running statistics drawn away from 1/0 so that they
 *       matter, as a safetensors weights file (td_weights_save) with the
 *       self-describing metadata (so `trainctl export` takes it)
 *   ref_infer file-logits FILE IMAGES N OUT
 *       the same as logits, for a self-describing file (td_infer_open)
 *   ref_infer perm SEED EPOCH N
 *       prints the training pipeline's sample order of epoch EPOCH for a
 *       dataset of N samples, one index a line (pipeline.h: a Philox
 *       permutation of (seed, epoch)), for check_train_torch.py
 * Normalisation: ImageNet's mean and std, as the script uses.
 * Exits 0, or 1 with a message naming what failed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "job/infer.h"
#include "model/model.h"
#include "store/weights.h"

static const float td__mean[3] = {0.485f, 0.456f, 0.406f};
static const float td__std[3] = {0.229f, 0.224f, 0.225f};

static void die(const char *what, const char *err)
{
    fprintf(stderr, "ref_infer: %s: %s\n", what, err);
    exit(1);
}

static json_t *load_def(const char *name)
{
    char dir[4096], err[512];
    const char *root = getenv("TD_SOURCE_ROOT");
    json_t *def;
    snprintf(dir, sizeof dir, "%s/config/models", root ? root : ".");
    if (td_model_load_def(dir, name, &def, err, sizeof err))
        die(name, err);
    return def;
}

static int do_logits(char **a)
{
    json_t *def = load_def(a[0]);
    td_shape in = {atoi(a[1]), atoi(a[2]), atoi(a[3])};
    int classes = atoi(a[4]), n = atoi(a[7]);
    td_model_meta meta;
    td_infer *inf;
    char err[512];
    if (td_model_meta_init(&meta, def, in, classes, NULL, td__mean, td__std,
                           NULL, 0))
        die("meta", "bad arguments");
    if (td_infer_create(&meta, a[5], n, 0, &inf, err, sizeof err))
        die("infer", err);
    size_t px = (size_t)n * in.c * in.h * in.w;
    uint8_t *img = malloc(px);
    float *logits = malloc((size_t)n * classes * sizeof *logits);
    FILE *f = fopen(a[6], "rb");
    if (!img || !logits || !f || fread(img, 1, px, f) != px)
        die(a[6], "cannot read the images");
    fclose(f);
    if (td_infer_logits(inf, img, n, logits, err, sizeof err))
        die("logits", err);
    f = fopen(a[8], "wb");
    if (!f || fwrite(logits, sizeof *logits, (size_t)n * classes, f) !=
                  (size_t)n * classes || fclose(f))
        die(a[8], "cannot write the logits");
    free(img);
    free(logits);
    td_infer_free(inf);
    td_model_meta_free(&meta);
    json_decref(def);
    return 0;
}

static int do_export(char **a)
{
    json_t *def = load_def(a[0]);
    td_shape in = {atoi(a[1]), atoi(a[2]), atoi(a[3])};
    uint64_t seed = strtoull(a[5], NULL, 10);
    td_model *m;
    char err[512];
    if (td_model_build(def, in, atoi(a[4]), &m, err, sizeof err))
        die(a[0], err);
    float *params = malloc(m->param_count * sizeof *params);
    float *state = malloc((td_model_state_count(m) + 1) * sizeof *state);
    if (!params || !state)
        die("export", "out of memory");
    td_model_init_params(m, seed, params);
    uint64_t stream = td_rng_stream(TD_RNG_TEST, 16);
    uint64_t k = 0;
    float *p = params;
    for (int i = 0; i < m->nparams; i++) {
        const td_param *pr = &m->params[i];
        for (size_t j = 0; j < pr->count; j++) {
            double u = td_rng_uniform(seed, stream, k++);
            if (pr->role == TD_P_BN_SCALE)
                p[j] = (float)(0.5 + u);
            else if (pr->role == TD_P_BN_SHIFT || pr->role == TD_P_BIAS)
                p[j] = (float)(0.2 * (u - 0.5));
        }
        p += pr->count;
    }
    float *s = state;
    for (int i = 0; i < m->nstate; i++) {
        int var = strstr(m->state[i].name, "running_var") != NULL;
        for (size_t j = 0; j < m->state[i].count; j++) {
            double u = td_rng_uniform(seed, stream, k++);
            s[j] = (float)(var ? 0.5 + u : 0.2 * (u - 0.5));
        }
        s += m->state[i].count;
    }
    td_model_meta meta;
    const float *mean = td__mean, *std = td__std;
    float gm = 0.5f, gs = 0.25f;
    if (in.c == 1) {
        mean = &gm;
        std = &gs;
    }
    if (td_model_meta_init(&meta, def, in, atoi(a[4]), NULL, mean, std,
                           NULL, 0))
        die("meta", "bad arguments");
    json_t *mj = td_model_meta_to_json(&meta);
    if (td_weights_save(m, params, state, 7, mj, a[6], err, sizeof err))
        die("export", err);
    json_decref(mj);
    td_model_meta_free(&meta);
    free(params);
    free(state);
    td_model_free(m);
    json_decref(def);
    return 0;
}

static int do_file_logits(char **a)
{
    td_infer *inf;
    char err[512];
    int n = atoi(a[2]);
    if (td_infer_open(a[0], n, 0, &inf, err, sizeof err))
        die("infer", err);
    const td_model_meta *meta = td_infer_meta(inf);
    size_t px = (size_t)n * meta->in.c * meta->in.h * meta->in.w;
    size_t nl = (size_t)n * meta->classes;
    uint8_t *img = malloc(px);
    float *logits = malloc(nl * sizeof *logits);
    FILE *f = fopen(a[1], "rb");
    if (!img || !logits || !f || fread(img, 1, px, f) != px)
        die(a[1], "cannot read the images");
    fclose(f);
    if (td_infer_logits(inf, img, n, logits, err, sizeof err))
        die("logits", err);
    f = fopen(a[3], "wb");
    if (!f || fwrite(logits, sizeof *logits, nl, f) != nl || fclose(f))
        die(a[3], "cannot write the logits");
    free(img);
    free(logits);
    td_infer_free(inf);
    return 0;
}

static int do_perm(char **a)
{
    uint64_t seed = strtoull(a[0], NULL, 10);
    uint64_t epoch = strtoull(a[1], NULL, 10);
    size_t n = strtoull(a[2], NULL, 10);
    uint32_t *perm = malloc((n ? n : 1) * sizeof *perm);
    if (!perm)
        die("perm", "out of memory");
    td_rng_permutation(seed, td_rng_stream(TD_RNG_PERMUTE, epoch), perm, n);
    for (size_t i = 0; i < n; i++)
        printf("%u\n", perm[i]);
    free(perm);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 6 && strcmp(argv[1], "file-logits") == 0)
        return do_file_logits(argv + 2);
    if (argc == 11 && strcmp(argv[1], "logits") == 0)
        return do_logits(argv + 2);
    if (argc == 9 && strcmp(argv[1], "export") == 0)
        return do_export(argv + 2);
    if (argc == 5 && strcmp(argv[1], "perm") == 0)
        return do_perm(argv + 2);
    fprintf(stderr, "usage: ref_infer logits MODEL C H W CLASSES WEIGHTS "
            "IMAGES N OUT\n       ref_infer export MODEL C H W CLASSES SEED "
            "OUT\n       ref_infer file-logits FILE IMAGES N OUT\n"
            "       ref_infer perm SEED EPOCH N\n");
    return 2;
}
