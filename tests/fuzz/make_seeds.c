/* make_seeds.c - writes the generated seed inputs of the fuzz corpora.
 *
 *   fuzz_make_seeds <source root> <out dir>
 * writes <out dir>/<target>/<name> for every target: small valid inputs
 * made with traind's own writers (tar headers, checkpoints, the crop
 * index, IDX files) and tests/data's model definitions, plus a few near
 * misses.  tests/fuzz/corpus/ holds its output (regenerate with the
 * command in tests/fuzz/README.md).  Test-only code: exits on failure.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <png.h>

#include "fuzz/fuzz.h"
#include "input/dataset.h"
#include "input/pack.h"
#include "input/png.h"
#include "input/tar.h"
#include "job/modelmeta.h"
#include "store/checkpoint.h"
#include "store/weights.h"
#include "support/jpeggen.h"

static const char *out_dir, *src_root;

__attribute__((format(printf, 1, 2))) static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

static void seed(const char *target, const char *name, const void *data,
                 size_t len)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", out_dir, target);
    if (mkdir(p, 0755) && errno != EEXIST)
        die("%s: %s", p, strerror(errno));
    snprintf(p, sizeof p, "%s/%s/%s", out_dir, target, name);
    td_test_write_file(p, data, len);
}

static void seed_str(const char *target, const char *name, const char *s)
{
    seed(target, name, s, strlen(s));
}

static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        die("%s: %s", path, strerror(errno));
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)n + 1);
    if (!b || fread(b, 1, (size_t)n, f) != (size_t)n)
        die("%s: short read", path);
    b[n] = 0;
    fclose(f);
    *len = (size_t)n;
    return b;
}

/* ---- protocol: byte 0 = chunk size - 1, then request lines ------------- */

static void protocol(void)
{
    static const char *const lines[] = {
        "{\"id\":1,\"cmd\":\"version\"}\n",
        "{\"id\":2,\"cmd\":\"submit\",\"args\":{\"name\":\"a\",\"spec\":"
        "{\"model\":\"fmnist-cnn\",\"optimizer\":{\"lr\":0.1},"
        "\"data\":{\"train\":\"/d\"}}}}\n",
        "{\"id\":\"x\",\"cmd\":\"list\",\"args\":{\"state\":\"running\"}}\r\n",
        "{\"id\":3,\"cmd\":\"subscribe\",\"args\":{\"job\":1,\"events\":"
        "[\"step\",\"log\"],\"every_steps\":10,\"every_ms\":250}}\n",
        "{\"id\":4,\"cmd\":\"config_set\",\"args\":{\"key\":\"log_level\","
        "\"value\":\"debug\"}}\n{\"id\":5,\"cmd\":\"logs\",\"args\":{\"job\":1,"
        "\"lines\":5}}\n",
        "{\"id\":6,\"cmd\":\"trace\",\"args\":{\"job\":2,\"steps\":3}}\n"
        "{\"id\":7,\"cmd\":\"show\",\"args\":{\"job\":\"1\"}}\n",
        "{\"id\":8,\"cmd\":\"nope\"}\n[1,2]\n{\"id\":{},\"cmd\":1}\n{bad\n",
    };
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
        char name[32], buf[1024];
        buf[0] = (char)(i * 37 % 256);
        size_t n = strlen(lines[i]);
        memcpy(buf + 1, lines[i], n);
        snprintf(name, sizeof name, "req-%zu", i);
        seed("protocol", name, buf, n + 1);
    }
}

/* ---- spec: a job spec with an inline model, NUL, --set assignments ----- */

static void spec(void)
{
    static const char *const models[] = {"tiny-all", "tiny-flat"};
    for (int i = 0; i < 2; i++) {
        char p[4096], *s;
        size_t len;
        snprintf(p, sizeof p, "%s/tests/data/%s.json", src_root, models[i]);
        uint8_t *m = slurp(p, &len);
        int n = asprintf(&s,
            "{\"name\":\"fz%d\",\"data\":{\"train\":[\"a/x-*.tar\",\"/b\"],"
            "\"val\":\"v\",\"classes\":%d},\"input\":{\"size\":[9,9],"
            "\"channels\":%d,\"augment\":[{\"op\":\"random_resized_crop\"},"
            "{\"op\":\"flip\",\"p\":0.5},{\"op\":\"color_jitter\","
            "\"brightness\":0.2}],"
            "\"normalize\":{\"mean\":0.5,\"std\":0.25}},\"model\":%s,"
            "\"optimizer\":{\"type\":\"%s\",\"lr\":0.1,\"momentum\":0.9,"
            "\"schedule\":{\"type\":\"cosine\",\"warmup_steps\":3}},"
            "\"batch_size\":4,\"epochs\":1,\"threads\":2}%c"
            "optimizer.lr=0.05%cinput.augment[1].p=1",
            i, 3 + i, i ? 3 : 1, (char *)m, i ? "adamw" : "sgd", 0, 0);
        if (n < 0)
            die("asprintf");
        snprintf(p, sizeof p, "inline-%s", models[i]);
        seed("spec", p, s, (size_t)n);
        free(s);
        free(m);
    }
    char p[4096];
    size_t len;
    snprintf(p, sizeof p, "%s/config/jobs/fmnist-cnn-synthetic.json",
             src_root);
    uint8_t *j = slurp(p, &len);
    seed("spec", "zoo-synthetic", j, len);
    free(j);
}

/* ---- settings: traind.conf and variations ------------------------------ */

static void settings(void)
{
    char p[4096];
    size_t len;
    snprintf(p, sizeof p, "%s/config/traind.conf", src_root);
    uint8_t *c = slurp(p, &len);
    seed("settings", "traind.conf", c, len);
    free(c);
    seed_str("settings", "values",
             "workers = 4\nprefetch=auto # ring\n  log_level = debug\n"
             "allowed_data_roots = /data:/srv/x\n"
             "allowed_data_roots = [\"/a\", \"/b\"]\nsocket = /tmp/s.sock\n"
             "checkpoint_keep = 7\nsubscriber_max_bytes = 65536\n"
             "metrics_listen = 127.0.0.1:9464\ndevice = \"cuda:1\"\n");
    seed_str("settings", "bad", "workers = 0\n");
}

/* ---- safetensors: a small checkpoint written by td_ckpt_write ---------- */

static void safetensors(void)
{
    char *dir = td_test_tmpdir("fuzz-seeds"), err[512], path[4096];
    td_ckpt_snapshot s;
    if (td_ckpt_snapshot_init(&s, 256, 4))
        die("snapshot");
    void *dst;
    int64_t sh1[2] = {2, 3}, sh2[1] = {4}, sh3[1] = {2};
    if (td_ckpt_snapshot_add(&s, "c1.weight", TD_DT_F32, 2, sh1, &dst))
        die("add");
    for (int i = 0; i < 6; i++)
        ((float *)dst)[i] = (float)i * 0.5f - 1.0f;
    if (td_ckpt_snapshot_add(&s, "c1.bias", TD_DT_F32, 1, sh2, &dst))
        die("add");
    memset(dst, 0x3f, 16);
    if (td_ckpt_snapshot_add(&s, "opt.step", TD_DT_I64, 1, sh3, &dst))
        die("add");
    memset(dst, 1, 16);
    s.meta = (td_ckpt_meta){.spec_hash = 0x0123456789abcdefULL, .step = 500,
                            .epoch = 2, .sampler_pos = 77, .seed = 9};
    if (td_ckpt_write(dir, &s, 0, NULL, path, sizeof path, err, sizeof err))
        die("td_ckpt_write: %s", err);
    size_t len;
    uint8_t *b = slurp(path, &len);
    seed("safetensors", "ckpt-3-tensors", b, len);
    free(b);
    td_ckpt_snapshot_destroy(&s);
    td_test_rmtree(dir);
    free(dir);
}

/* ---- tar: members, a GNU long name, a pax path, a base-256 size -------- */

static size_t member(uint8_t *buf, size_t at, const char *name,
                     const void *data, size_t n, char type)
{
    if (td_tar_header(buf + at, name, n, 1700000000))
        die("tar header %s", name);
    if (type != '0') { /* retype and fix the checksum */
        uint8_t *h = buf + at;
        h[156] = (uint8_t)type;
        memset(h + 148, ' ', 8);
        unsigned sum = 0;
        for (int i = 0; i < TD_TAR_BLOCK; i++)
            sum += h[i];
        snprintf((char *)h + 148, 8, "%06o", sum);
    }
    memcpy(buf + at + TD_TAR_BLOCK, data, n);
    return at + td_tar_member_bytes(n);
}

static size_t small_tar(uint8_t *buf, int base256)
{
    size_t at = 0;
    memset(buf, 0, 16 * TD_TAR_BLOCK);
    at = member(buf, at, "s/000.jpg", "\xff\xd8\xff\xd9", 4, '0');
    at = member(buf, at, "s/000.cls", "3\n", 2, '0');
    static const char longn[] = "a-rather-long-directory-name-to-need-gnu/"
                                "and-more-of-it-beyond-a-hundred-bytes/001";
    char ln[200];
    snprintf(ln, sizeof ln, "%s.jpg", longn);
    at = member(buf, at, "././@LongLink", ln, strlen(ln) + 1, 'L');
    at = member(buf, at, "x", "\xff\xd8\xff\xd9", 4, '0');
    /* "LEN path=VALUE\n", LEN counting itself */
    char pax[160];
    size_t body = strlen(" path=.cls\n") + strlen(longn), total = body + 1;
    while ((size_t)snprintf(pax, sizeof pax, "%zu", total) + body != total)
        total++;
    snprintf(pax, sizeof pax, "%zu path=%s.cls\n", total, longn);
    at = member(buf, at, "PaxHeader/x", pax, strlen(pax), 'x');
    size_t cls = at;
    at = member(buf, at, "y", "1", 1, '0');
    if (base256) { /* the same size (1) in GNU base-256 */
        uint8_t *h = buf + cls;
        memset(h + 124, 0, 12);
        h[124] = 0x80;
        h[135] = 1;
        memset(h + 148, ' ', 8);
        unsigned sum = 0;
        for (int i = 0; i < TD_TAR_BLOCK; i++)
            sum += h[i];
        snprintf((char *)h + 148, 8, "%06o", sum);
    }
    return at + 2 * TD_TAR_BLOCK;
}

static void tar(void)
{
    uint8_t buf[16 * TD_TAR_BLOCK];
    seed("tar", "members", buf, small_tar(buf, 0));
    seed("tar", "base256", buf, small_tar(buf, 1));
}

/* ---- tdidx: u16 n, n bytes of cache, the shard ------------------------- */

static void tdidx(void)
{
    uint8_t buf[16 * TD_TAR_BLOCK];
    size_t tlen = small_tar(buf, 0);
    char *dir = td_test_tmpdir("fuzz-seeds"), p[4096], err[512];
    snprintf(p, sizeof p, "%s/s.tar", dir);
    td_test_write_file(p, buf, tlen);
    if (td_dataset_index_shard(p, err, sizeof err))
        die("index: %s", err);
    snprintf(p, sizeof p, "%s/s.tar.tdidx", dir);
    size_t n;
    uint8_t *c = slurp(p, &n);
    uint8_t *in = malloc(2 + n + tlen);
    in[0] = (uint8_t)n;
    in[1] = (uint8_t)(n >> 8);
    memcpy(in + 2, c, n);
    memcpy(in + 2 + n, buf, tlen);
    seed("tdidx", "shard-with-cache", in, 2 + n + tlen);
    in[0] = in[1] = 0; /* no cache: the header walk */
    memcpy(in + 2, buf, tlen);
    seed("tdidx", "shard-no-cache", in, 2 + tlen);
    free(in);
    free(c);
    td_test_rmtree(dir);
    free(dir);
}

/* ---- jpeg: 8 box bytes, then a small JPEG (crop index, restarts) ------- */

static void jpeg_seed(const char *name, const uint8_t box[8],
                      const uint8_t *j, size_t n)
{
    uint8_t *in = malloc(n + 8);
    memcpy(in, box, 8);
    memcpy(in + 8, j, n);
    seed("jpeg", name, in, n + 8);
    free(in);
}

static void jpeg(void)
{
    static const uint8_t inner[8] = {96, 128, 96, 96, 8, 8, 0, 1};
    static const uint8_t gray[8] = {160, 64, 64, 128, 4, 4, 1, 0};
    uint8_t *j, *x;
    size_t n, xn;
    td_test_jpeg(64, 48, TD_TEST_RGB, 420, 70, 0, 1, &j, &n);
    if (td_pack_add_index(j, n, 1, &x, &xn))
        die("index 420");
    jpeg_seed("index-420", inner, x, xn);
    free(x);
    if (td_pack_add_restarts(j, n, 1, &x, &xn))
        die("restarts");
    jpeg_seed("restart-420", inner, x, xn);
    free(x);
    free(j);
    td_test_jpeg(40, 40, TD_TEST_GRAY, 444, 70, 0, 2, &j, &n);
    if (td_pack_add_index(j, n, 2, &x, &xn))
        die("index gray");
    jpeg_seed("index-gray", gray, x, xn);
    free(x);
    free(j);
    td_test_jpeg(32, 24, TD_TEST_RGB, 444, 60, 1, 3, &j, &n);
    jpeg_seed("progressive-444", inner, j, n);
    free(j);
    td_test_jpeg(24, 16, TD_TEST_CMYK, 444, 60, 0, 4, &j, &n);
    jpeg_seed("cmyk", gray, j, n);
    free(j);
}

/* ---- idx: small IDX files, plain and gzip'd ----------------------------- */

static void idx(void)
{
    char *dir = td_test_tmpdir("fuzz-seeds"), p[4096];
    uint8_t px[2 * 4 * 5], lb[3] = {1, 0, 9};
    for (size_t i = 0; i < sizeof px; i++)
        px[i] = (uint8_t)(i * 13);
    uint32_t d3[3] = {2, 4, 5}, d1[1] = {3};
    for (int gz = 0; gz < 2; gz++) {
        size_t n;
        snprintf(p, sizeof p, "%s/i", dir);
        td_test_write_idx(p, gz, 3, d3, px);
        uint8_t *b = slurp(p, &n);
        seed("idx", gz ? "images.gz" : "images", b, n);
        free(b);
        td_test_write_idx(p, gz, 1, d1, lb);
        b = slurp(p, &n);
        seed("idx", gz ? "labels.gz" : "labels", b, n);
        free(b);
    }
    td_test_rmtree(dir);
    free(dir);
}

/* ---- classes: classes.txt as `trainctl pack` writes it, and by hand ---- */

static void classes(void)
{
    seed_str("classes", "three", "cat\ndog\nbird\n");
    seed_str("classes", "crlf-no-final-newline", "n01\r\nn02\r\nn03\r\nn04");
    seed_str("classes", "utf8", "caf\xc3\xa9\nna\xc3\xafve\nstra\xc3\x9f" "e\n"
             "\xe7\x8c\xab\n");
}

/* ---- png: 1 option byte, then a small PNG of each kind ----------------- */

static void png_seed(const char *name, uint8_t opt, int w, int h,
                     png_uint_32 format)
{
    png_image im;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    im.width = (png_uint_32)w;
    im.height = (png_uint_32)h;
    im.format = format;
    size_t n = PNG_IMAGE_SIZE(im);
    uint8_t *px = malloc(n), *colormap = NULL;
    for (size_t i = 0; i < n; i++)
        px[i] = (uint8_t)(i * 29 + i / 7);
    if (format & PNG_FORMAT_FLAG_COLORMAP) {
        im.colormap_entries = 16;
        colormap = malloc(PNG_IMAGE_COLORMAP_SIZE(im));
        for (size_t i = 0; i < PNG_IMAGE_COLORMAP_SIZE(im); i++)
            colormap[i] = (uint8_t)(i * 37);
        for (size_t i = 0; i < n; i++)
            px[i] %= 16;
    }
    png_alloc_size_t len = PNG_IMAGE_PNG_SIZE_MAX(im);
    uint8_t *buf = malloc(len + 1);
    if (!png_image_write_to_memory(&im, buf + 1, &len, 0, px, 0, colormap))
        die("png %s: %s", name, im.message);
    buf[0] = opt;
    seed("png", name, buf, len + 1);
    free(buf);
    free(px);
    free(colormap);
}

static void png(void)
{
    png_seed("rgb", 0, 7, 5, PNG_FORMAT_RGB);
    png_seed("grey-train", 3 | 8, 16, 3, PNG_FORMAT_GRAY);
    png_seed("rgba-planar", 2 | 4, 5, 9, PNG_FORMAT_RGBA);
    png_seed("grey-alpha", 1, 3, 3, PNG_FORMAT_GA);
    png_seed("palette", 2 | 16, 10, 6, PNG_FORMAT_RGB_COLORMAP);
}

/* ---- weights: files td_weights_save writes, with and without metadata -- */

static void weights(void)
{
    char *dir = td_test_tmpdir("fuzz-seeds"), err[512], path[4096];
    json_t *g = json_loads(TD_FUZZ_GRAPH, 0, NULL);
    td_shape in = TD_FUZZ_GRAPH_IN;
    td_model *m = NULL;
    if (!g || td_model_build(g, in, TD_FUZZ_GRAPH_CLASSES, &m, err,
                             sizeof err))
        die("model: %s", err);
    size_t np = m->param_count, ns = td_model_state_count(m);
    float *p = malloc(np * sizeof *p), *st = malloc(ns * sizeof *st);
    for (size_t i = 0; i < np; i++)
        p[i] = (float)((int)(i % 13) - 6) * 0.125f;
    for (size_t i = 0; i < ns; i++)
        st[i] = 1.0f + (float)(i % 3);
    static const char *const names[] = {"cat", "dog", "bird"};
    float mean[2] = {0.5f, 0.25f}, std[2] = {0.25f, 0.5f};
    td_augment aug;
    td_augment_default(&aug, TD_AUG_CENTER_CROP);
    td_model_meta meta;
    if (td_model_meta_init(&meta, g, in, TD_FUZZ_GRAPH_CLASSES, names, mean,
                           std, &aug, 1))
        die("meta");
    json_t *mj = td_model_meta_to_json(&meta);
    snprintf(path, sizeof path, "%s/w.safetensors", dir);
    for (int self = 0; self < 2; self++) {
        if (td_weights_save(m, p, st, 7, self ? mj : NULL, path, err,
                            sizeof err))
            die("td_weights_save: %s", err);
        size_t len;
        uint8_t *b = slurp(path, &len);
        seed("weights", self ? "self-describing" : "plain", b, len);
        free(b);
    }
    json_decref(mj);
    td_model_meta_free(&meta);
    td_model_free(m);
    json_decref(g);
    free(p);
    free(st);
    td_test_rmtree(dir);
    free(dir);
}

/* ---- pack: 5 option bytes, then a JPEG of each kind ---------------------- */

static void pack_seed(const char *name, uint8_t opt, const uint8_t *j,
                      size_t n)
{
    uint8_t *in = malloc(n + 5);
    memcpy(in, (uint8_t[5]){opt, 64, 96, 128, 96}, 5);
    memcpy(in + 5, j, n);
    seed("pack", name, in, n + 5);
    free(in);
}

static void pack(void)
{
    uint8_t *j, *x;
    size_t n, xn;
    td_test_jpeg(48, 32, TD_TEST_RGB, 420, 75, 0, 5, &j, &n);
    pack_seed("rgb-420-index", 1, j, n);
    pack_seed("rgb-420-restart", 8 | 2, j, n);
    if (td_pack_add_index(j, n, 2, &x, &xn))
        die("index");
    pack_seed("repack-indexed", 3, x, xn);
    free(x);
    free(j);
    td_test_jpeg(24, 40, TD_TEST_GRAY, 444, 70, 0, 6, &j, &n);
    pack_seed("gray-index", 0, j, n);
    free(j);
    td_test_jpeg(40, 24, TD_TEST_RGB, 422, 80, 1, 7, &j, &n);
    pack_seed("progressive-422", 8, j, n);
    free(j);
    td_test_jpeg(16, 16, TD_TEST_CMYK, 444, 60, 0, 8, &j, &n);
    pack_seed("cmyk", 1, j, n);
    free(j);
}

int main(int argc, char **argv)
{
    if (argc != 3)
        die("usage: %s <source root> <out dir>", argv[0]);
    src_root = argv[1];
    out_dir = argv[2];
    if (mkdir(out_dir, 0755) && errno != EEXIST)
        die("%s: %s", out_dir, strerror(errno));
    protocol();
    spec();
    settings();
    safetensors();
    tar();
    tdidx();
    jpeg();
    idx();
    classes();
    png();
    weights();
    pack();
    return 0;
}
