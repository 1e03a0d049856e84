/* test_image_kinds.c - the image files users bring (phones, scanners, the
 * web), decoded by traind and compared with the real tools.
 *
 * tests/support/image_kinds.py (run with /usr/bin/python3) writes PNGs
 * and JPEGs of every kind with Pillow, and for each image file in the
 * folder (also the JPEGs written here with libjpeg, which Pillow cannot
 * write: arithmetic coding, restart markers, YCCK) the pixels Pillow,
 * OpenCV or torchvision give, 3 and 1 channels (which tool for which file,
 * and why: the script's docstring).  Each file is then decoded whole the
 * way a sample is (td_png_decode, or td_decoder_region at full scale) and
 * must match within the manifest's tolerance.  Without that python the
 * pixel tests are left out and the suite exits 77 (SKIP) with a message
 * once the others pass.
 * The folder tests need no python: what an ImageFolder takes as samples
 * (case of the extension aside, whatever a file's name says it is), what
 * it leaves out, and that a job's log says so.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>
#include <jpeglib.h>

#include "base/error.h"
#include "base/log.h"
#include "input/dataset.h"
#include "input/decode.h"
#include "input/pipeline.h"
#include "input/png.h"
#include "job/infer_run.h"
#include "job/runner.h"
#include "job/spec.h"
#include "jpeggen.h"
#include "tdtest.h"

#define PY "/usr/bin/python3"

static int have_python(void)
{
    return system(PY " -c 'import numpy, PIL, cv2, torchvision' "
                  ">/dev/null 2>&1") == 0;
}

/* ---- JPEGs Pillow cannot write ---------------------------------------- */

enum { J_ARITH, J_ARITH_PROG, J_RESTART, J_YCCK };

static void write_jpeg(const char *path, int kind)
{
    enum { W = 45, H = 29 };
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr e;
    c.err = jpeg_std_error(&e);
    jpeg_create_compress(&c);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    jpeg_stdio_dest(&c, f);
    c.image_width = W;
    c.image_height = H;
    int nc = kind == J_YCCK ? 4 : 3;
    c.input_components = nc;
    c.in_color_space = kind == J_YCCK ? JCS_CMYK : JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, 90, TRUE);
    if (kind == J_ARITH || kind == J_ARITH_PROG)
        c.arith_code = TRUE;
    if (kind == J_ARITH_PROG)
        jpeg_simple_progression(&c);
    if (kind == J_RESTART)
        c.restart_interval = 2;
    if (kind == J_YCCK)
        jpeg_set_colorspace(&c, JCS_YCCK);
    jpeg_start_compress(&c, TRUE);
    uint8_t px[W * H * 4];
    td_test_photo(px, W, H, nc, 7);
    for (int y = 0; y < H; y++) {
        JSAMPROW row = px + (size_t)y * W * (size_t)nc;
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    fclose(f);
}

/* A folder of every kind with the tools' pixels (manifest.txt). */
static char *make_kinds(void)
{
    char *dir = td_test_tmpdir("kinds"), p[4200];
    static const char *names[] = {"arith.jpg", "arith_progressive.jpg",
                                  "restart.jpg", "ycck.jpg"};
    for (int k = 0; k < 4; k++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[k]);
        write_jpeg(p, k);
    }
    const char *src = getenv("TD_SOURCE_ROOT");
    ck_assert_msg(src != NULL, "TD_SOURCE_ROOT not set (meson test sets it)");
    td_test_sh(dir, PY " '%s/tests/support/image_kinds.py' .", src);
    return dir;
}

/* ---- decoding a whole file as a sample is decoded ------------------- */

/* The whole image, c channels, w x h (tightly packed) in *px. */
static int decode_whole(const uint8_t *data, size_t len, int c, uint8_t **px,
                        int *w, int *h, char *why, size_t whycap)
{
    td_region r;
    int rc;
    td_png png = {0};
    td_decoder *d = NULL;
    if (td_png_is(data, len)) {
        rc = td_png_header(&png, data, len, w, h);
        if (!rc)
            rc = td_png_decode(&png, data, len, c, &r);
        snprintf(why, whycap, "%s", png.msg);
    } else {
        ck_assert_int_eq(td_decoder_create(&d), 0);
        rc = td_decoder_header(d, data, len, w, h);
        if (!rc)
            rc = td_decoder_region(d, 0, 0, *w, *h, *w, *h, c,
                                   TD_DECODE_FORCE_FULL_SCALE, &r);
        snprintf(why, whycap, "%s", td_decoder_message(d));
    }
    if (rc == 0) {
        ck_assert_int_eq(r.x0, 0);
        ck_assert_int_eq(r.y0, 0);
        ck_assert_int_eq(r.w, *w);
        ck_assert_int_eq(r.h, *h);
        *px = malloc((size_t)*w * (size_t)*h * (size_t)c);
        for (int y = 0; y < *h; y++)
            memcpy(*px + (size_t)y * (size_t)*w * (size_t)c,
                   r.px + (size_t)y * r.stride, (size_t)*w * (size_t)c);
    }
    td_png_free(&png);
    td_decoder_destroy(d);
    return rc;
}

/* Every file of the manifest whose name ends in ext, both channel counts,
 * against the tools' pixels: one line per mismatch in the message. */
static void compare_kinds(const char *ext)
{
    char *dir = make_kinds(), line[512], report[8192] = "";
    size_t mlen, used = 0;
    char *man = (char *)td_test_slurp(dir, "manifest.txt", &mlen);
    int files = 0;
    for (char *s = strtok(man, "\n"); s; s = strtok(NULL, "\n")) {
        char name[256], tool[128];
        int w, h, tol[2];
        ck_assert_int_eq(sscanf(s, "%255s %d %d %d %d %127s", name, &w, &h,
                                &tol[1], &tol[0], tool), 6);
        if (strlen(name) < strlen(ext) ||
            strcmp(name + strlen(name) - strlen(ext), ext) != 0)
            continue;
        files++;
        size_t len;
        uint8_t *data = td_test_slurp(dir, name, &len);
        for (int c = 1; c <= 3; c += 2) {
            char ref_name[300], why[256];
            snprintf(ref_name, sizeof ref_name, "%s.c%d", name, c);
            size_t rlen;
            uint8_t *ref = td_test_slurp(dir, ref_name, &rlen), *px = NULL;
            int dw = 0, dh = 0, worst = 0, at = 0;
            int rc = decode_whole(data, len, c, &px, &dw, &dh, why,
                                  sizeof why);
            if (rc) {
                snprintf(line, sizeof line, "%.160s (%.60s) c=%d: %.200s "
                         "(%d)\n", name, tool, c, why, rc);
            } else if (dw != w || dh != h) {
                snprintf(line, sizeof line, "%.160s (%.60s) c=%d: %d x %d, "
                         "the tool says %d x %d\n", name, tool, c, dw, dh, w,
                         h);
            } else {
                ck_assert_uint_eq(rlen, (size_t)w * (size_t)h * (size_t)c);
                for (size_t i = 0; i < rlen; i++) {
                    int dv = abs((int)px[i] - (int)ref[i]);
                    if (dv > worst) {
                        worst = dv;
                        at = (int)i;
                    }
                }
                line[0] = '\0';
                if (worst > tol[c == 3])
                    snprintf(line, sizeof line, "%.160s (%.60s) c=%d: off by "
                             "up to %d (tolerance %d; at byte %d: %d, the "
                             "tool %d)\n", name, tool, c, worst, tol[c == 3], at,
                             px[at], ref[at]);
            }
            if (used + strlen(line) < sizeof report - 1) {
                memcpy(report + used, line, strlen(line) + 1);
                used += strlen(line);
            }
            free(px);
            free(ref);
        }
        free(data);
    }
    ck_assert_msg(files >= 4, "only %d %s files in the manifest", files, ext);
    ck_assert_msg(used == 0, "decoded unlike the tools:\n%s", report);
    free(man);
    td_test_rmtree(dir);
    free(dir);
}

/* PNG: 8 and 16 bits, grey (1, 8, 16 bits), palette (4 and 8 bits), with
 * tRNS, grey+alpha, RGBA, Adam7, gAMA and sRGB chunks. */
START_TEST(test_png_kinds_decode_as_the_tools_do)
{
    compare_kinds(".png");
}
END_TEST

/* JPEG: 4:2:0, 4:4:4, progressive, grey, CMYK and YCCK (Adobe), EXIF
 * orientation (not applied, as torchvision's loader), arithmetic coding
 * (baseline and progressive), restart markers. */
START_TEST(test_jpeg_kinds_decode_as_the_tools_do)
{
    compare_kinds(".jpg");
}
END_TEST

/* ---- ImageFolder: what is a sample ------------------------------------ */

static void put(const char *dir, const char *rel, const void *data,
                size_t len)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    td_test_write_file(p, data, len);
}

/* root/cat: a.JPG, b.JPEG, c.PNG, d.jpg (a PNG), e.png (a JPEG), and what
 * is not a sample: .DS_Store, ._a.jpg (hidden), Thumbs.db, README.txt,
 * w.webp, a subfolder 2019/ with an image, a broken link, a link to the
 * folder above (a loop); root/dog: x.jpg and link.jpg, a link to an image
 * outside the tree; root/notes.txt.  7 samples, 7 entries left out. */
static char *make_tree(void)
{
    char *dir = td_test_tmpdir("tree");
    uint8_t *jpg, *png = NULL, px[12 * 10 * 3];
    size_t jlen, plen, pcap = 0;
    td_test_jpeg(12, 10, TD_TEST_RGB, 420, 90, 0, 5, &jpg, &jlen);
    td_test_photo(px, 12, 10, 3, 6);
    ck_assert_int_eq(td_png_encode(px, 12, 10, 3, &png, &pcap, &plen), 0);
    td_test_sh(dir, "mkdir -p root/cat/2019 root/dog outside");
    static const char *jpegs[] = {"root/cat/a.JPG", "root/cat/b.JPEG",
                                  "root/cat/e.png", "root/cat/2019/y.jpg",
                                  "root/dog/x.jpg", "outside/o.jpg",
                                  "root/cat/._a.jpg"};
    for (int i = 0; i < 7; i++)
        put(dir, jpegs[i], jpg, jlen);
    put(dir, "root/cat/c.PNG", png, plen);
    put(dir, "root/cat/d.jpg", png, plen);
    put(dir, "root/cat/.DS_Store", "\0\0\0\1Bud1", 8);
    put(dir, "root/cat/Thumbs.db", "\xd0\xcf\x11\xe0", 4);
    put(dir, "root/cat/README.txt", "photos\n", 7);
    put(dir, "root/cat/w.webp", "RIFF\0\0\0\0WEBP", 12);
    put(dir, "root/notes.txt", "notes\n", 6);
    td_test_sh(dir, "ln -s /nonexistent/gone.jpg root/cat/dangling.jpg && "
               "ln -s .. root/cat/loop && "
               "ln -s ../../outside/o.jpg root/dog/link.jpg");
    free(jpg);
    free(png);
    return dir;
}

START_TEST(test_folder_samples_whatever_their_names_say)
{
    char *dir = make_tree(), root[4200], err[512], name[4300];
    snprintf(root, sizeof root, "%s/root", dir);
    td_dataset *ds;
    ck_assert_msg(td_dataset_open(root, &ds, err, sizeof err) == 0, "%s",
                  err);
    static const char *want[] = {"cat/a.JPG", "cat/b.JPEG", "cat/c.PNG",
                                 "cat/d.jpg", "cat/e.png", "dog/link.jpg",
                                 "dog/x.jpg"};
    ck_assert_uint_eq(td_dataset_count(ds), 7);
    for (size_t i = 0; i < 7; i++) {
        char exp[4300];
        snprintf(exp, sizeof exp, "%s/%s", root, want[i]);
        ck_assert_str_eq(td_dataset_sample_name(ds, i, name, sizeof name),
                         exp);
        ck_assert_int_eq(td_dataset_label(ds, i), i < 5 ? 0 : 1);
    }
    td_dataset_close(ds);
    /* every one decodes, by its signature, not its name */
    td_pipeline_config c;
    td_pipeline_config_default(&c);
    c.data = root;
    c.size[0] = c.size[1] = 8;
    c.batch_size = 7;
    c.workers = 1;
    c.train = 0;
    c.drop_last = 0;
    c.max_bad_ratio = 0;
    td_pipeline *p;
    ck_assert_msg(td_pipeline_create(&c, &p, err, sizeof err) == 0, "%s",
                  err);
    ck_assert_int_eq(td_pipeline_start(p, 0, 0), 0);
    td_batch b;
    ck_assert_int_eq(td_pipeline_next(p, &b, NULL), 0);
    ck_assert_int_eq(b.n, 7);
    td_pipeline_release(p, &b);
    td_pipeline_stats s;
    td_pipeline_stats_get(p, &s);
    ck_assert_int_eq(s.bad_samples, 0);
    td_pipeline_destroy(p);
    td_test_rmtree(dir);
    free(dir);
}
END_TEST

static char logged[16384];

static void sink(void *user, int level, long job, const char *line)
{
    (void)user;
    (void)level;
    (void)job;
    size_t n = strlen(logged);
    snprintf(logged + n, sizeof logged - n, "%s\n", line);
}

/* A tiny job (one dense layer on 8 x 8 RGB, 1 epoch) on the ImageFolder
 * at root, parsed into *spec. */
static void tiny_job_on(const char *root, td_job_spec *spec)
{
    char err[512];
    json_t *js = json_pack(
        "{s:s, s:{s:s}, s:{s:[i,i], s:i},"
        " s:{s:[{s:s, s:s}, {s:s, s:s, s:s}]},"
        " s:{s:s, s:f}, s:i, s:i, s:i}",
        "name", "t", "data", "train", root, "input", "size", 8, 8,
        "channels", 3, "model", "layers", "type", "flatten", "name", "f",
        "type", "dense", "name", "fc", "units", "classes", "optimizer",
        "type", "sgd", "lr", 0.01, "batch_size", 2, "epochs", 1, "threads",
        1);
    ck_assert_msg(td_spec_parse(js, NULL, spec, err, sizeof err) == 0, "%s",
                  err);
    json_decref(js);
}

/* A job on the folder says what it leaves out: a .webp or a subfolder of
 * photos dropped without a word looked like a smaller data set. */
START_TEST(test_job_log_names_what_the_folder_leaves_out)
{
    char *dir = make_tree(), root[4200], err[512];
    snprintf(root, sizeof root, "%s/root", dir);
    td_job_spec spec;
    tiny_job_on(root, &spec);
    td_log_set_sink(sink, NULL);
    td_runner_opts o = {.spec = &spec, .job = 1};
    td_runner *r;
    ck_assert_msg(td_runner_create(&o, &r, err, sizeof err) == 0, "%s", err);
    td_runner_free(r);
    td_log_set_sink(NULL, NULL);
    ck_assert_msg(strstr(logged, "data.train: 7 file(s) or folder(s) left "
                         "out") && strstr(logged, "the first: "),
                  "the job's log does not say what the folder leaves out:\n"
                  "%s", logged);
    td_spec_free(&spec);
    td_test_rmtree(dir);
    free(dir);
}
END_TEST

/* trainctl pack names the same entries, each with why (a broken link was
 * left out without a word, a subfolder called "not .jpg, .jpeg or .png"). */
START_TEST(test_pack_names_what_the_folder_leaves_out)
{
    char *dir = make_tree();
    const char *build = getenv("TD_BUILD_ROOT");
    ck_assert_msg(build != NULL, "TD_BUILD_ROOT not set (meson test sets it)");
    char cmd[8400];
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s/client/trainctl' pack "
             "--imagefolder root -o out --index 0 2>&1 >/dev/null", dir,
             build);
    int st;
    char *out = td_test_capture(cmd, &st);
    ck_assert_msg(st == 0, "pack failed: %s", out);
    static const char *want[] = {
        "skipped root/notes.txt: not a class folder",
        "skipped root/cat/Thumbs.db: not .jpg, .jpeg or .png",
        "skipped root/cat/README.txt: not .jpg, .jpeg or .png",
        "skipped root/cat/w.webp: not .jpg, .jpeg or .png",
        "skipped root/cat/2019: a folder (class folders are not searched "
        "further down)",
        "skipped root/cat/loop: a folder",
        "skipped root/cat/dangling.jpg: a broken symbolic link"};
    int lines = 0;
    for (const char *q = out; (q = strstr(q, "skipped ")); q++)
        lines++;
    for (int i = 0; i < 7; i++)
        ck_assert_msg(strstr(out, want[i]), "pack does not say '%s':\n%s",
                      want[i], out);
    ck_assert_msg(lines == 7, "%d entries named, not 7:\n%s", lines, out);
    free(out);
    td_test_rmtree(dir);
    free(dir);
}
END_TEST

/* A link at the root to the root itself is a class folder holding only
 * folders: an error naming it, not a loop. */
START_TEST(test_folder_link_to_itself_is_an_empty_class)
{
    char *dir = make_tree(), root[4200], err[512];
    snprintf(root, sizeof root, "%s/root", dir);
    td_test_sh(dir, "ln -s . root/self");
    td_dataset *ds = NULL;
    ck_assert_int_eq(td_dataset_open(root, &ds, err, sizeof err), -ENODATA);
    ck_assert_msg(strstr(err, "root/self: empty class folder"), "%s", err);
    td_test_rmtree(dir);
    free(dir);
}
END_TEST

/* Files named .jpg that are another format (web downloads saved as WebP,
 * iPhone photos in HEIC, GIFs, BMPs, TIFFs from scanners): a bad sample
 * whose message says what the file is. */
START_TEST(test_other_formats_are_named)
{
    static const struct {
        const char *bytes;
        size_t len;
        const char *says;
    } kinds[] = {
        {"RIFF\x24\0\0\0WEBPVP8 ", 16, "a WebP image"},
        {"\0\0\0\x18" "ftypheic\0\0\0\0", 16, "a HEIF/HEIC image"},
        {"\0\0\0\x1c" "ftypavif\0\0\0\0", 16, "an AVIF image"},
        {"GIF89a\x01\0\x01\0\0\0\0\0\0\0", 16, "a GIF image"},
        {"BM\x3a\0\0\0\0\0\0\0\x36\0\0\0\x28\0", 16, "a BMP image"},
        {"II*\0\x08\0\0\0\0\0\0\0\0\0\0\0", 16, "a TIFF image"},
        {"MM\0*\0\0\0\x08\0\0\0\0\0\0\0\0", 16, "a TIFF image"},
    };
    td_decoder *d;
    ck_assert_int_eq(td_decoder_create(&d), 0);
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        int w, h;
        ck_assert_int_eq(td_decoder_header(d, (const uint8_t *)kinds[i].bytes,
                                           kinds[i].len, &w, &h),
                         TD_E_CORRUPT);
        ck_assert_msg(strstr(td_decoder_message(d), kinds[i].says) &&
                      strstr(td_decoder_message(d), "JPEG and PNG"),
                      "%s: the message says '%s'", kinds[i].says,
                      td_decoder_message(d));
    }
    int w, h;
    ck_assert_int_eq(td_decoder_header(d, (const uint8_t *)"hello world",
                                       11, &w, &h), TD_E_CORRUPT);
    ck_assert_str_eq(td_decoder_message(d), "not a JPEG (no SOI marker)");
    td_decoder_destroy(d);
}
END_TEST

/* trainctl eval on the folder says the same: its "N samples" looked like
 * all there was.  A tiny job trained on the folder gives the checkpoint. */
START_TEST(test_eval_names_what_the_folder_leaves_out)
{
    char *dir = make_tree(), root[4200], ck[4200], err[1024];
    snprintf(root, sizeof root, "%s/root", dir);
    snprintf(ck, sizeof ck, "%s/ck", dir);
    td_job_spec spec;
    tiny_job_on(root, &spec);
    td_runner_opts o = {.spec = &spec, .ckpt_dir = ck};
    td_runner *r;
    td_runner_result res;
    ck_assert_msg(td_runner_create(&o, &r, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(td_runner_run(r, &res, err, sizeof err) == 0, "%s", err);
    td_runner_free(r);
    ck_assert_msg(res.last_checkpoint[0], "no checkpoint written");
    td_infer_run_opts io = {.checkpoint = res.last_checkpoint, .threads = 1,
                            .workers = 1};
    json_t *ev = NULL;
    ck_assert_msg(td_infer_eval(&io, root, &ev, err, sizeof err) == 0, "%s",
                  err);
    char *text = NULL;
    size_t tlen = 0;
    FILE *m = open_memstream(&text, &tlen);
    td_infer_eval_print(ev, 0, m);
    fclose(m);
    ck_assert_int_eq(json_integer_value(json_object_get(ev, "samples")), 7);
    ck_assert_msg(json_integer_value(json_object_get(ev, "left_out")) == 7 &&
                  strstr(text, "7 file(s) or folder(s) left out"),
                  "eval does not say what the folder leaves out:\n%s", text);
    free(text);
    json_decref(ev);
    td_spec_free(&spec);
    td_test_rmtree(dir);
    free(dir);
}
END_TEST

int main(void)
{
    int py = have_python();
    Suite *s = suite_create("image_kinds");
    TCase *tc = tcase_create("tools");
    if (py) {
        tcase_add_test(tc, test_png_kinds_decode_as_the_tools_do);
        tcase_add_test(tc, test_jpeg_kinds_decode_as_the_tools_do);
    }
    suite_add_tcase(s, tc);
    TCase *tf = tcase_create("folder");
    tcase_add_test(tf, test_folder_samples_whatever_their_names_say);
    tcase_add_test(tf, test_job_log_names_what_the_folder_leaves_out);
    tcase_add_test(tf, test_pack_names_what_the_folder_leaves_out);
    tcase_add_test(tf, test_folder_link_to_itself_is_an_empty_class);
    tcase_add_test(tf, test_other_formats_are_named);
    tcase_add_test(tf, test_eval_names_what_the_folder_leaves_out);
    suite_add_tcase(s, tf);
    int rc = td_test_run(s);
    if (rc == EXIT_SUCCESS && !py) {
        printf("SKIP: the comparisons with Pillow, OpenCV and torchvision "
               "need " PY " with numpy, PIL, cv2 and torchvision "
               "(apt-get install python3-pil python3-opencv "
               "python3-torchvision)\n");
        return TD_TEST_SKIP;
    }
    return rc;
}
