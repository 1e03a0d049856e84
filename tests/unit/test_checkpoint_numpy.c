/* test_checkpoint_numpy.c - checkpoints written by traind are read back in
 * Python, the way a numpy or PyTorch user would:
 *  - a short numpy script reads a hand-made snapshot and compares values;
 *  - the numpy and PyTorch snippets of docs/checkpoints.md, extracted from
 *    the page (so the page cannot drift), read the checkpoints of a real
 *    job (fmnist-cnn, synthetic input, SGD with momentum), and what they
 *    find is compared with traind's own reader, tensor by tensor; the
 *    PyTorch module's forward pass on the loaded weights must give the
 *    logits traind's CPU backend gives in evaluation mode.
 * numpy is required (scripts/deps.sh installs python3-numpy); the PyTorch
 * snippet is skipped, with a message, when /usr/bin/python3 has no torch. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <jansson.h>

#include "backend/backend.h"
#include "ckpt_helpers.h"
#include "job/runner.h"
#include "job/spec.h"
#include "model/model.h"

#define PY "/usr/bin/python3"

/* Prints "ok" when every tensor matches what make_snapshot() stored. */
static const char *script =
    "import json, struct, sys\n"
    "import numpy as np\n"
    "b = open(sys.argv[1], 'rb').read()\n"
    "(n,) = struct.unpack('<Q', b[:8])\n"
    "hdr = json.loads(b[8:8 + n])\n"
    "data = b[8 + n:]\n"
    "dt = {'F32': '<f4', 'I64': '<i8', 'U8': 'u1'}\n"
    "def get(name):\n"
    "    e = hdr[name]\n"
    "    s, t = e['data_offsets']\n"
    "    return np.frombuffer(data[s:t], dtype=dt[e['dtype']]).reshape(e['shape'])\n"
    "w = get('w')\n"
    "assert w.shape == (2, 3), w.shape\n"
    "assert np.array_equal(w, (np.arange(6, dtype=np.float32) * 0.5 - 1).reshape(2, 3))\n"
    "assert get('step').shape == () and int(get('step')) == 77\n"
    "assert list(get('bytes')) == [0, 7, 14, 21, 28]\n"
    "assert get('empty').size == 0\n"
    "m = hdr['__metadata__']\n"
    "assert m['step'] == '77' and m['epoch'] == '2' and m['seed'] == '42', m\n"
    "assert m['spec_hash'] == 'fedcba9876543210', m\n"
    "print('ok')\n";

START_TEST(test_numpy_reads_checkpoint)
{
    char dir[64], path[4096], err[512], cmd[8400], spath[4200], out[64] = "";
    td_ckpt_snapshot s;
    scratch_dir(dir, sizeof dir);
    make_snapshot(&s, 77);
    ck_assert_int_eq(td_ckpt_write(dir, &s, 0, NULL, path, sizeof path, err,
                                   sizeof err), 0);
    snprintf(spath, sizeof spath, "%s/read.py", dir);
    FILE *f = fopen(spath, "w");
    ck_assert_ptr_nonnull(f);
    fputs(script, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, PY " %s %s 2>&1", spath, path);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    int status = pclose(p);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "numpy reader failed: %s", out);
    ck_assert_str_eq(out, "ok\n");
    td_ckpt_snapshot_destroy(&s);
    rm_tree(dir);
}
END_TEST

/* The fenced ```python block after the line "<!-- snippet: NAME" in
 * docs/checkpoints.md, appended to f.  Fails the test when absent. */
static void append_snippet(FILE *f, const char *name)
{
    const char *root = getenv("TD_SOURCE_ROOT");
    char path[4096], marker[64], line[1024];
    snprintf(path, sizeof path, "%s/docs/checkpoints.md", root ? root : ".");
    snprintf(marker, sizeof marker, "<!-- snippet: %s", name);
    FILE *md = fopen(path, "r");
    ck_assert_msg(md != NULL, "cannot read %s", path);
    int state = 0; /* 0: before the marker, 1: before the fence, 2: in it */
    while (state < 3 && fgets(line, sizeof line, md)) {
        if (state == 0 && strncmp(line, marker, strlen(marker)) == 0)
            state = 1;
        else if (state == 1 && strncmp(line, "```python", 9) == 0)
            state = 2;
        else if (state == 2 && strncmp(line, "```", 3) == 0)
            state = 3;
        else if (state == 2)
            fputs(line, f);
    }
    fclose(md);
    ck_assert_msg(state == 3, "%s: no complete ```python block after "
                  "\"%s\"", path, marker);
    fputc('\n', f);
}

/* Trains fmnist-cnn on synthetic input for 5 steps with a checkpoint
 * every 2 steps into dir; returns the newest checkpoint's path. */
static void train_a_job(const char *dir, char *newest, size_t cap)
{
    const char *root = getenv("TD_SOURCE_ROOT");
    char models[4096], err[1024];
    snprintf(models, sizeof models, "%s/config/models", root ? root : ".");
    json_error_t je;
    json_t *j = json_loads(
        "{\"model\": \"fmnist-cnn\", \"input\": {\"source\": \"synthetic\","
        " \"size\": [28, 28], \"channels\": 1}, \"data\": {\"classes\": 10},"
        " \"optimizer\": {\"lr\": 0.01, \"momentum\": 0.9},"
        " \"batch_size\": 4, \"epochs\": 1, \"seed\": 5, \"threads\": 1,"
        " \"checkpoint\": {\"every_steps\": 2, \"keep\": 2},"
        " \"metrics\": {\"warmup_steps\": 0, \"window_steps\": 2}}",
        0, &je);
    ck_assert_ptr_nonnull(j);
    td_job_spec spec;
    ck_assert_msg(td_spec_parse(j, NULL, &spec, err, sizeof err) == 0, "%s",
                  err);
    json_decref(j);
    td_runner_opts o = {.spec = &spec, .models_dir = models,
                        .ckpt_dir = dir, .synthetic_steps = 5};
    td_runner *r;
    td_runner_result res;
    ck_assert_msg(td_runner_create(&o, &r, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(td_runner_run(r, &res, err, sizeof err) == 0, "%s", err);
    td_runner_free(r);
    td_spec_free(&spec);
    ck_assert_int_eq(res.steps, 5);
    ck_assert_int_eq(res.checkpoints_failed, 0);
    snprintf(newest, cap, "%s", res.last_checkpoint);
    ck_assert_int_eq(count_files(dir, ".safetensors"), 2); /* keep: 2 */
}

/* traind's CPU backend in evaluation mode on the checkpoint at path: the
 * logits of 2 samples of pixels (i * 37 + 11) % 256, normalised with
 * fmnist-cnn's mean 0.2860 and std 0.3530. */
static void eval_logits(const char *path, float logits[20])
{
    const char *root = getenv("TD_SOURCE_ROOT");
    char models[4096], err[512];
    snprintf(models, sizeof models, "%s/config/models", root ? root : ".");
    td_model *m;
    ck_assert_msg(td_model_load(models, "fmnist-cnn", (td_shape){1, 28, 28},
                                10, &m, err, sizeof err) == 0, "%s", err);
    td_backend_config cfg = {.batch = 2, .threads = 1, .dtype = TD_F32,
                             .mean = {0.2860f}, .std = {0.3530f}, .seed = 1};
    td_optim_defaults(&cfg.optim, TD_OPT_SGD);
    cfg.optim.momentum = 0.9; /* the job's: one optimizer slot */
    td_backend *be;
    ck_assert_msg(td_backend_create("cpu", m, &cfg, &be, err, sizeof err) ==
                  0, "%s", err);
    /* the flat snapshot from the checkpoint's tensors, by name; the
     * optimizer slots (named differently in the layout) stay zero */
    size_t n = td_backend_snapshot_floats(m, &cfg.optim);
    float *flat = calloc(n, sizeof *flat);
    td_snapshot_entry ents[64];
    int ne = td_backend_snapshot_layout(m, &cfg.optim, ents, 64);
    ck_assert_int_le(ne, 64);
    td_ckpt_file *ck;
    ck_assert_msg(td_ckpt_open(path, &ck, err, sizeof err) == 0, "%s", err);
    int loaded = 0;
    for (int i = 0; i < ne; i++)
        if (td_ckpt_file_find(ck, ents[i].name)) {
            ck_assert_int_eq(td_ckpt_file_read(ck, ents[i].name, TD_DT_F32,
                                               flat + ents[i].offset,
                                               ents[i].count * sizeof(float),
                                               err, sizeof err), 0);
            loaded++;
        }
    ck_assert_int_eq(loaded, m->nparams + m->nstate);
    td_ckpt_close(ck);
    ck_assert_int_eq(td_backend_restore(be, flat, n), 0);
    uint8_t px[2 * 28 * 28];
    int32_t labels[2] = {0, 0};
    for (int i = 0; i < 2 * 28 * 28; i++)
        px[i] = (uint8_t)((i * 37 + 11) % 256);
    td_batch b = {.data = px, .labels = labels, .n = 2, .h = 28, .w = 28,
                  .c = 1, .layout = TD_LAYOUT_NHWC};
    ck_assert_int_eq(td_backend_upload(be, &b), 0);
    ck_assert_int_eq(td_backend_eval_step(be), 0);
    ck_assert_int_eq(td_backend_sync(be), 0);
    ck_assert_int_eq(be->ops->read_tensor(be, TD_T_VALUE, m->nlayers - 1,
                                          logits, 20), 0);
    free(flat);
    td_backend_destroy(be);
    td_model_free(m);
}

/* Runs the Python file (cwd dir) and returns its output (stdout and stderr). */
static char *run_python(const char *dir, const char *file, int *status)
{
    char cmd[8400];
    snprintf(cmd, sizeof cmd, "cd %s && " PY " %s 2>&1", dir, file);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    size_t cap = 1 << 20, n = 0, got;
    char *out = malloc(cap);
    ck_assert_ptr_nonnull(out);
    while (n < cap - 1 && (got = fread(out + n, 1, cap - 1 - n, p)) > 0)
        n += got;
    out[n] = '\0';
    *status = pclose(p);
    return out;
}

/* The line after `tag ` in out, parsed as JSON. */
static json_t *tagged_json(const char *out, const char *tag)
{
    char pat[32];
    snprintf(pat, sizeof pat, "%s ", tag);
    const char *at = strstr(out, pat);
    ck_assert_msg(at != NULL, "no \"%s\" line in:\n%s", tag, out);
    at += strlen(pat);
    json_error_t je;
    json_t *j = json_loadb(at, strcspn(at, "\n"), 0, &je);
    ck_assert_msg(j != NULL, "%s line: %s", tag, je.text);
    return j;
}

START_TEST(test_doc_snippets_read_a_real_checkpoint)
{
    char dir[64], newest[4096], spath[4200], err[512];
    scratch_dir(dir, sizeof dir);
    train_a_job(dir, newest, sizeof newest);
    int torch = system(PY " -c 'import torch' >/dev/null 2>&1") == 0;

    snprintf(spath, sizeof spath, "%s/snippets.py", dir);
    FILE *f = fopen(spath, "w");
    ck_assert_ptr_nonnull(f);
    append_snippet(f, "numpy");
    /* what the numpy snippet found, for the comparison below */
    fputs("import json as _json\n"
          "print('NUMPY ' + _json.dumps({'path': path, 'meta': meta, "
          "'tensors': {k: [list(v.shape), str(v.dtype), "
          "float(v.astype(np.float64).sum())] for k, v in tensors.items()}}))\n",
          f);
    if (torch) {
        append_snippet(f, "torch");
        /* the batch eval_logits() feeds traind, normalised as the
         * snippet's last comment says */
        fputs("_sd = model.state_dict()\n"
              "_px = (np.arange(2 * 28 * 28) * 37 + 11) % 256\n"
              "_x = ((_px.astype(np.float32) / 255 - 0.2860) / 0.3530)"
              ".reshape(2, 1, 28, 28)\n"
              "with torch.no_grad():\n"
              "    _y = model(torch.from_numpy(_x))\n"
              "print('TORCH ' + _json.dumps({'shape': list(_y.shape), "
              "'logits': _y.double().flatten().tolist(), "
              "'loaded': {k: float(_sd[k].double().sum()) for k in state}}))\n",
              f);
    } else {
        printf("torch snippet of docs/checkpoints.md skipped: " PY " has no "
               "torch (apt-get install python3-torch)\n");
    }
    fclose(f);
    int status;
    char *out = run_python(dir, "snippets.py", &status);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "the snippets of docs/checkpoints.md failed:\n%s", out);

    /* traind's reader on the same file */
    td_ckpt_file *ck;
    ck_assert_msg(td_ckpt_open(newest, &ck, err, sizeof err) == 0, "%s", err);
    json_t *np_ = tagged_json(out, "NUMPY");
    const char *found = json_string_value(json_object_get(np_, "path"));
    ck_assert_ptr_nonnull(found);
    ck_assert_str_eq(found, strrchr(newest, '/') + 1); /* the newest */
    json_t *meta = json_object_get(np_, "meta");
    ck_assert_str_eq(json_string_value(json_object_get(meta, "step")), "5");
    ck_assert_str_eq(json_string_value(json_object_get(meta, "spec_hash")),
                     td_ckpt_file_meta_str(ck, "spec_hash"));
    json_t *tensors = json_object_get(np_, "tensors");
    ck_assert_int_eq(json_object_size(tensors), td_ckpt_file_count(ck));
    /* the names docs/checkpoints.md promises */
    ck_assert_ptr_nonnull(json_object_get(tensors, "conv1.weight"));
    ck_assert_ptr_nonnull(json_object_get(
        tensors, "optimizer.momentum_buffer.conv1.weight"));
    ck_assert_ptr_nonnull(json_object_get(tensors, "bn1.running_mean"));
    ck_assert_ptr_nonnull(json_object_get(tensors, "fc.bias"));
    for (int i = 0; i < td_ckpt_file_count(ck); i++) {
        const td_ckpt_tensor *t = td_ckpt_file_tensor(ck, i);
        json_t *e = json_object_get(tensors, t->name);
        ck_assert_msg(e != NULL, "numpy did not find %s", t->name);
        json_t *shape = json_array_get(e, 0);
        ck_assert_int_eq((int)json_array_size(shape), t->ndim);
        for (int d = 0; d < t->ndim; d++)
            ck_assert_int_eq(json_integer_value(json_array_get(shape, d)),
                             t->shape[d]);
        /* F32 tensors, and an I64 num_batches_tracked per batch norm */
        int i64 = t->dtype == TD_DT_I64;
        ck_assert_str_eq(json_string_value(json_array_get(e, 1)),
                         i64 ? "int64" : "float32");
        double sum = 0;
        if (i64) {
            int64_t c;
            ck_assert_int_eq(td_ckpt_file_read(ck, t->name, TD_DT_I64, &c, 8,
                                               err, sizeof err), 0);
            ck_assert_int_eq(c, 5); /* the steps taken */
            sum = (double)c;
        } else {
            size_t n = t->nbytes / sizeof(float);
            float *v = malloc(t->nbytes + 1);
            ck_assert_int_eq(td_ckpt_file_read(ck, t->name, TD_DT_F32, v,
                                               t->nbytes, err, sizeof err),
                             0);
            for (size_t k = 0; k < n; k++)
                sum += v[k];
            free(v);
        }
        double got = json_number_value(json_array_get(e, 2));
        ck_assert_msg(fabs(got - sum) <= 1e-9 * (1 + fabs(sum)),
                      "%s: numpy sum %.17g, traind %.17g", t->name, got, sum);
    }
    if (torch) {
        json_t *tj = tagged_json(out, "TORCH");
        json_t *shape = json_object_get(tj, "shape");
        ck_assert_int_eq(json_integer_value(json_array_get(shape, 0)), 2);
        ck_assert_int_eq(json_integer_value(json_array_get(shape, 1)), 10);
        /* PyTorch's forward pass on the loaded module equals traind's:
         * the layouts (conv [out, in, kh, kw], dense over (C, H, W)) and
         * the running statistics mean the same in both */
        float mine[20];
        eval_logits(newest, mine);
        json_t *lg = json_object_get(tj, "logits");
        ck_assert_int_eq((int)json_array_size(lg), 20);
        double scale = 0;
        for (int i = 0; i < 20; i++)
            scale = fmax(scale, fabs(mine[i]));
        for (int i = 0; i < 20; i++) {
            double t = json_number_value(json_array_get(lg, i));
            ck_assert_msg(fabs(t - mine[i]) <= 1e-4 * (1 + scale),
                          "logit %d: PyTorch %.7g, traind %.7g", i, t,
                          (double)mine[i]);
        }
        /* every parameter and running statistic went into the module */
        json_t *loaded = json_object_get(tj, "loaded");
        const char *k;
        json_t *v;
        int nopt = 0;
        json_object_foreach(tensors, k, v) {
            if (strncmp(k, "optimizer.", 10) == 0) {
                nopt++;
                continue;
            }
            json_t *l = json_object_get(loaded, k);
            ck_assert_msg(l != NULL, "torch did not load %s", k);
            double want = json_number_value(json_array_get(v, 2));
            ck_assert_msg(fabs(json_number_value(l) - want) <=
                              1e-9 * (1 + fabs(want)),
                          "%s: torch %.17g, numpy %.17g", k,
                          json_number_value(l), want);
        }
        ck_assert_int_eq(json_object_size(loaded),
                         json_object_size(tensors) - (size_t)nopt);
        json_decref(tj);
    }
    json_decref(np_);
    td_ckpt_close(ck);
    free(out);
    rm_tree(dir);
}
END_TEST

int main(void)
{
    if (system(PY " -c 'import numpy' >/dev/null 2>&1") != 0) {
        printf("FAIL: " PY " with numpy not found; the checkpoint format "
               "is checked with it (scripts/deps.sh installs "
               "python3-numpy)\n");
        return EXIT_FAILURE;
    }
    Suite *su = suite_create("checkpoint_numpy");
    TCase *tc = tcase_create("numpy");
    tcase_add_test(tc, test_numpy_reads_checkpoint);
    tcase_add_test(tc, test_doc_snippets_read_a_real_checkpoint);
    suite_add_tcase(su, tc);
    return td_test_run(su);
}
