/* jpeggen.c - see jpeggen.h. */
#define _GNU_SOURCE
#include "jpeggen.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <jpeglib.h>

#include "base/fsio.h"
#include "input/pack.h"
#include "philox.h"

static void td__die(const char *what)
{
    fprintf(stderr, "jpeggen: %s\n", what);
    abort();
}

void td_test_photo(uint8_t *px, int w, int h, int c, uint32_t seed)
{
    uint64_t s = seed;
    float base[4], gx[4], gy[4];
    for (int k = 0; k < 4; k++) {
        base[k] = 40.0f + 150.0f * (float)td_rng_uniform(s, 1, (uint64_t)k);
        gx[k] = 80.0f * ((float)td_rng_uniform(s, 2, (uint64_t)k) - 0.5f);
        gy[k] = 80.0f * ((float)td_rng_uniform(s, 3, (uint64_t)k) - 0.5f);
    }
    /* A few discs of flat colour on top of the gradient, then noise. */
    float cx[3], cy[3], r2[3], col[3][4];
    for (int d = 0; d < 3; d++) {
        cx[d] = (float)(td_rng_uniform(s, 4, (uint64_t)d) * w);
        cy[d] = (float)(td_rng_uniform(s, 5, (uint64_t)d) * h);
        float r = (float)(0.1 + 0.25 * td_rng_uniform(s, 6, (uint64_t)d)) *
                  (float)(w < h ? w : h);
        r2[d] = r * r;
        for (int k = 0; k < 4; k++)
            col[d][k] =
                (float)(255.0 * td_rng_uniform(s, 7, (uint64_t)(d * 4 + k)));
    }
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            float fx = (float)x / (float)w, fy = (float)y / (float)h;
            int disc = -1;
            for (int d = 0; d < 3; d++) {
                float dx = (float)x - cx[d], dy = (float)y - cy[d];
                if (dx * dx + dy * dy < r2[d])
                    disc = d;
            }
            uint32_t nz =
                td_rng4(s, 8, (uint64_t)y * (uint64_t)w + (uint64_t)x).v[0];
            for (int k = 0; k < c; k++) {
                float v = disc >= 0 ? col[disc][k]
                                    : base[k] + gx[k] * fx + gy[k] * fy +
                                          20.0f * sinf(6.0f * fx + (float)k);
                v += (float)((nz >> (8 * k)) & 15) - 7.5f;
                px[((size_t)y * (size_t)w + (size_t)x) * (size_t)c +
                   (size_t)k] = (uint8_t)(v < 0     ? 0
                                          : v > 255 ? 255
                                                    : v);
            }
        }
}

static void td__encode(const uint8_t *px, int w, int h, int c,
                       J_COLOR_SPACE in, J_COLOR_SPACE jcs, int subsamp,
                       int quality, int progressive, uint8_t **out,
                       size_t *len)
{
    struct jpeg_compress_struct ci;
    struct jpeg_error_mgr jerr;
    unsigned char *mem = NULL;
    unsigned long mlen = 0;
    ci.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&ci);
    jpeg_mem_dest(&ci, &mem, &mlen);
    ci.image_width = (JDIMENSION)w;
    ci.image_height = (JDIMENSION)h;
    ci.input_components = c;
    ci.in_color_space = in;
    jpeg_set_defaults(&ci);
    jpeg_set_colorspace(&ci, jcs);
    jpeg_set_quality(&ci, quality, TRUE);
    if (jcs == JCS_YCbCr) {
        ci.comp_info[0].h_samp_factor = subsamp == 444 ? 1 : 2;
        ci.comp_info[0].v_samp_factor = subsamp == 420 ? 2 : 1;
    }
    if (progressive)
        jpeg_simple_progression(&ci);
    jpeg_start_compress(&ci, TRUE);
    while (ci.next_scanline < ci.image_height) {
        JSAMPROW row = (JSAMPROW)(px + (size_t)ci.next_scanline *
                                           (size_t)w * (size_t)c);
        jpeg_write_scanlines(&ci, &row, 1);
    }
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
    *out = malloc(mlen);
    if (!*out)
        td__die("out of memory");
    memcpy(*out, mem, mlen);
    *len = mlen;
    free(mem);
}

void td_test_jpeg(int w, int h, enum td_test_cs cs, int subsamp, int quality,
                  int progressive, uint32_t seed, uint8_t **out, size_t *len)
{
    int c = cs == TD_TEST_GRAY ? 1 : cs == TD_TEST_RGB ? 3 : 4;
    uint8_t *px = malloc((size_t)w * (size_t)h * (size_t)c);
    if (!px)
        td__die("out of memory");
    td_test_photo(px, w, h, c, seed);
    if (cs == TD_TEST_RGB)
        td__encode(px, w, h, 3, JCS_RGB, JCS_YCbCr, subsamp, quality,
                   progressive, out, len);
    else if (cs == TD_TEST_GRAY)
        td__encode(px, w, h, 1, JCS_GRAYSCALE, JCS_GRAYSCALE, 444, quality,
                   progressive, out, len);
    else
        td__encode(px, w, h, 4, JCS_CMYK, cs == TD_TEST_CMYK ? JCS_CMYK
                                                             : JCS_YCCK,
                   444, quality, progressive, out, len);
    free(px);
}

void td_test_jpeg_from(const uint8_t *px, int w, int h, int c, int quality,
                       uint8_t **out, size_t *len)
{
    td__encode(px, w, h, c, c == 1 ? JCS_GRAYSCALE : JCS_RGB,
               c == 1 ? JCS_GRAYSCALE : JCS_YCbCr, 444, quality, 0, out, len);
}

void td_test_write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f || (len && fwrite(data, len, 1, f) != 1) || fclose(f) != 0)
        td__die(path);
}

void td_test_make_folder(const char *root, int classes, int per_class, int w,
                         int h)
{
    char path[4096];
    for (int k = 0; k < classes; k++) {
        snprintf(path, sizeof path, "%s/class%d", root, k);
        if (td_mkdirs(path, 0755))
            td__die(path);
        for (int i = 0; i < per_class; i++) {
            uint8_t *j;
            size_t n;
            td_test_jpeg(w, h, TD_TEST_RGB, 420, 90, 0,
                         (uint32_t)(k * 1000 + i), &j, &n);
            snprintf(path, sizeof path, "%s/class%d/img%03d.jpg", root, k, i);
            td_test_write_file(path, j, n);
            free(j);
        }
    }
}

void td_test_make_labelled_folder(const char *root, int classes,
                                  int per_class, int w, int h, uint32_t seed,
                                  const char *const *names)
{
    static const uint8_t colours[8][3] = {
        {250, 40, 40}, {40, 240, 60}, {60, 80, 250}, {250, 230, 40},
        {40, 230, 240}, {240, 50, 230}, {250, 250, 250}, {250, 140, 20}};
    char path[4096], name[32];
    uint8_t *px = malloc((size_t)w * h * 3);
    int side = (w < h ? w : h) / 4;
    if (!px)
        td__die("out of memory");
    for (int k = 0; k < classes; k++) {
        const char *cls = names ? names[k] : name;
        snprintf(name, sizeof name, "class%d", k);
        snprintf(path, sizeof path, "%s/%s", root, cls);
        if (td_mkdirs(path, 0755))
            td__die(path);
        for (int i = 0; i < per_class; i++) {
            uint32_t s = seed + (uint32_t)(k * 1000 + i);
            td_test_photo(px, w, h, 3, s);
            for (size_t q = 0; q < (size_t)w * h * 3; q++)
                px[q] /= 2;
            int place = k % 12, jx = (int)(s % 5) - 2,
                jy = (int)((s / 5) % 5) - 2;
            int x0 = (place % 4) * w / 4 + (w / 4 - side) / 2 + jx;
            int y0 = (place / 4) * h / 3 + (h / 3 - side) / 2 + jy;
            for (int y = y0; y < y0 + side; y++)
                for (int x = x0; x < x0 + side; x++)
                    if (x >= 0 && x < w && y >= 0 && y < h)
                        memcpy(px + ((size_t)y * w + x) * 3,
                               colours[(k / 8 + k) % 8], 3);
            uint8_t *j;
            size_t n;
            td_test_jpeg_from(px, w, h, 3, 90, &j, &n);
            snprintf(path, sizeof path, "%s/%s/img%03d.jpg", root, cls, i);
            td_test_write_file(path, j, n);
            free(j);
        }
    }
    free(px);
}

void td_test_write_idx(const char *path, int gz, int ndims,
                       const uint32_t *dims, const uint8_t *data)
{
    uint8_t head[4 + 4 * 4] = {0, 0, 8, (uint8_t)ndims};
    size_t total = 1;
    for (int d = 0; d < ndims; d++) {
        head[4 + 4 * d] = (uint8_t)(dims[d] >> 24);
        head[5 + 4 * d] = (uint8_t)(dims[d] >> 16);
        head[6 + 4 * d] = (uint8_t)(dims[d] >> 8);
        head[7 + 4 * d] = (uint8_t)dims[d];
        total *= dims[d];
    }
    gzFile f = gzopen(path, gz ? "wb" : "wbT");
    if (!f || gzwrite(f, head, (unsigned)(4 + 4 * ndims)) <= 0 ||
        gzwrite(f, data, (unsigned)total) <= 0 || gzclose(f) != Z_OK)
        td__die(path);
}

char *td_test_tmpdir(const char *tag)
{
    const char *t = getenv("TMPDIR");
    char *p = NULL;
    if (asprintf(&p, "%s/td-%s-XXXXXX", t && *t ? t : "/tmp", tag) < 0 ||
        !mkdtemp(p))
        td__die("mkdtemp");
    return p;
}

void td_test_rmtree(const char *path)
{
    char *cmd = NULL;
    if (asprintf(&cmd, "rm -rf '%s'", path) < 0)
        td__die("asprintf");
    if (system(cmd) != 0)
        fprintf(stderr, "jpeggen: could not remove %s\n", path);
    free(cmd);
}
