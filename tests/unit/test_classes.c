/* test_classes.c - class names as identity: val mapped onto train by
 * name, classes.txt, the held-out split, and the checks a job gets at
 * submit (lib/input/classes.c, lib/job/jobdata.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <errno.h>
#include <sys/stat.h>

#include "base/error.h"
#include "base/fscred.h"
#include "base/tally.h"
#include "input/classes.h"
#include "input/pack.h"
#include "jpeggen.h"
#include "job/jobdata.h"
#include "job/spec.h"
#include "tdtest.h"

static char tmp[64];

static void setup(void)
{
    snprintf(tmp, sizeof tmp, "/tmp/td-classes-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmp));
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    ck_assert_int_eq(system(cmd), 0);
}

static td_dataset *open_ds(const char *path)
{
    td_dataset *ds = NULL;
    char err[512];
    ck_assert_msg(td_dataset_open(path, &ds, err, sizeof err) == 0, "%s",
                  err);
    return ds;
}

/* train: class0..class3; val: the same tree without class0, then with an
 * extra class the training set lacks. */
START_TEST(test_val_mapped_by_name)
{
    char train[128], val[128], cmd[400], note[256], err[256];
    snprintf(train, sizeof train, "%s/train", tmp);
    snprintf(val, sizeof val, "%s/val", tmp);
    td_test_make_folder(train, 4, 2, 16, 16);
    td_test_make_folder(val, 4, 2, 16, 16);
    snprintf(cmd, sizeof cmd, "rm -r %s/class0", val);
    ck_assert_int_eq(system(cmd), 0);
    td_dataset *t = open_ds(train), *v = open_ds(val);
    /* Alone, val's folders number class1 as label 0: the shift. */
    ck_assert_str_eq(td_dataset_class_name(v, 0), "class1");
    ck_assert_int_eq(td_classes_align(t, v, note, sizeof note, err,
                                      sizeof err), 0);
    ck_assert_msg(strstr(note, "'class0' (1 of 4 classes) not in data.val"),
                  "%s", note);
    ck_assert_int_eq(td_dataset_classes(v), 4);
    for (size_t i = 0; i < td_dataset_count(v); i++) {
        char name[256];
        td_dataset_sample_name(v, i, name, sizeof name);
        int want = strstr(name, "/class1/") ? 1 : strstr(name, "/class2/")
                                                       ? 2 : 3;
        ck_assert_msg(td_dataset_label(v, i) == want, "%s: %d", name,
                      td_dataset_label(v, i));
        ck_assert_str_eq(td_dataset_class_name(v, want),
                         td_dataset_class_name(t, want));
    }
    td_dataset_close(v);
    /* A class in val that train lacks is an error naming it. */
    snprintf(cmd, sizeof cmd, "mv %s/class3 %s/zebra", val, val);
    ck_assert_int_eq(system(cmd), 0);
    v = open_ds(val);
    ck_assert_int_eq(td_classes_align(t, v, note, sizeof note, err,
                                      sizeof err), TD_E_SPEC);
    ck_assert_msg(strstr(err, "class 'zebra' is not a class of data.train"),
                  "%s", err);
    td_dataset_close(v);
    td_dataset_close(t);
}
END_TEST

/* Shards carry their names in classes.txt; a label beyond it is refused. */
START_TEST(test_classes_txt)
{
    char tree[128], out[128], err[512];
    snprintf(tree, sizeof tree, "%s/tree", tmp);
    snprintf(out, sizeof out, "%s/shards", tmp);
    td_test_make_folder(tree, 3, 2, 16, 16);
    td_pack_options o;
    td_pack_options_default(&o);
    td_pack_result r;
    ck_assert_int_eq(td_pack_folder(tree, out, &o, &r, err, sizeof err), 0);
    td_dataset *ds = open_ds(out);
    ck_assert_ptr_null(td_dataset_class_name(ds, 0));
    ck_assert_int_eq(td_classes_attach(ds, out, err, sizeof err), 0);
    ck_assert_str_eq(td_dataset_class_name(ds, 0), "class0"); /* pack's */
    const char *names[] = {"cat", "dog", "eel"};
    ck_assert_int_eq(td_classes_write(out, names, 3, err, sizeof err), 0);
    ck_assert_int_eq(td_classes_attach(ds, out, err, sizeof err), 0);
    ck_assert_str_eq(td_dataset_class_name(ds, 2), "eel");
    td_dataset_close(ds);
    ds = open_ds(out);
    ck_assert_int_eq(td_classes_write(out, names, 2, err, sizeof err), 0);
    ck_assert_int_eq(td_classes_attach(ds, out, err, sizeof err),
                     TD_E_CORRUPT);
    ck_assert_msg(strstr(err, "classes.txt: labels go up to 2 but "
                              "classes.txt names 2 classes"), "%s", err);
    td_dataset_close(ds);
}
END_TEST

/* Writes classes.txt into dir with the given bytes, then attaches it. */
static int attach_text(td_dataset *ds, const char *dir, const char *text,
                       char *err, size_t errcap)
{
    char path[256];
    snprintf(path, sizeof path, "%s/classes.txt", dir);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fwrite(text, 1, strlen(text), f), strlen(text));
    ck_assert_int_eq(fclose(f), 0);
    err[0] = '\0';
    return td_classes_attach(ds, dir, err, errcap);
}

/* Line i names label i, or the file is refused naming the line: a blank
 * line (a trailing one silently added a class), bytes that are not UTF-8
 * (found by fuzz_classes: the name broke the checkpoint's traind.classes
 * JSON), a control character, a name two lines give (val would map onto
 * the first), and a line past 1023 bytes (read in pieces, it became two
 * names).  CRLF files and a last line without "\n" read as they are. */
START_TEST(test_classes_txt_refused_lines)
{
    char tree[128], out[128], err[512];
    snprintf(tree, sizeof tree, "%s/tree", tmp);
    snprintf(out, sizeof out, "%s/shards", tmp);
    td_test_make_folder(tree, 3, 1, 16, 16);
    td_pack_options o;
    td_pack_options_default(&o);
    td_pack_result r;
    ck_assert_int_eq(td_pack_folder(tree, out, &o, &r, err, sizeof err), 0);
    static const struct {
        const char *text, *why;
    } bad[] = {
        {"cat\ndog\neel\n\n", "classes.txt: line 4: an empty name"},
        {"cat\n\ndog\neel\n", "classes.txt: line 2: an empty name"},
        {"cat\ndog\nbi\xe9re\n", "classes.txt: line 3: not UTF-8 (byte 0xe9 "
                                  "at byte 3)"},
        {"cat\ndog\ne\tl\n", "classes.txt: line 3: control character 0x09 "
                             "at byte 2"},
        {"cat\ndog\ncat\neel\n", "classes.txt: lines 1 and 3 both name "
                                 "class 'cat'"},
        {"cat\ndog\neel\r\nyak\ndog\n", "classes.txt: lines 2 and 5 both "
                                        "name class 'dog'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        td_dataset *ds = open_ds(out);
        ck_assert_int_eq(attach_text(ds, out, bad[i].text, err, sizeof err),
                         TD_E_CORRUPT);
        ck_assert_msg(strstr(err, bad[i].why), "%zu: %s", i, err);
        ck_assert_int_eq(td_dataset_named_classes(ds), 0);
        td_dataset_close(ds);
    }
    td_dataset *ds = open_ds(out);
    ck_assert_int_eq(attach_text(ds, out, "n1\r\nn2\r\ncaf\xc3\xa9", err,
                                 sizeof err), 0);
    ck_assert_int_eq(td_dataset_classes(ds), 3);
    ck_assert_str_eq(td_dataset_class_name(ds, 1), "n2");
    ck_assert_str_eq(td_dataset_class_name(ds, 2), "caf\xc3\xa9");
    /* One long name is one class, whole. */
    char *text = malloc(5000);
    memset(text, 'x', 3000);
    strcpy(text + 3000, "\ndog\neel\n");
    ck_assert_int_eq(attach_text(ds, out, text, err, sizeof err), 0);
    ck_assert_int_eq(td_dataset_classes(ds), 3);
    ck_assert_uint_eq(strlen(td_dataset_class_name(ds, 0)), 3000);
    ck_assert_str_eq(td_dataset_class_name(ds, 1), "dog");
    free(text);
    td_dataset_close(ds);
    /* The writer (trainctl pack, from folder names) refuses what the
     * reader would, naming the class. */
    const char *names[] = {"cat", "do\rg", "eel"};
    ck_assert_int_eq(td_classes_write(out, names, 3, err, sizeof err),
                     -EINVAL);
    ck_assert_str_eq(err, "class 1 ('do\\x0dg'): control character 0x0d at "
                          "byte 3");
    names[1] = "\xff";
    ck_assert_int_eq(td_classes_write(out, names, 3, err, sizeof err),
                     -EINVAL);
    ck_assert_str_eq(err, "class 1 ('\\xff'): not UTF-8 (byte 0xff at byte "
                          "1)");
}
END_TEST

/* An ImageFolder's folder names are its class names: one that JSON cannot
 * carry dropped out of the checkpoint's traind.classes and shifted the
 * names after it onto the wrong labels.  Refused, the name quoted so that
 * the message itself is JSON-safe. */
START_TEST(test_folder_names_checked)
{
    char tree[128], from[256], to[256], err[512];
    snprintf(tree, sizeof tree, "%s/tree", tmp);
    td_test_make_folder(tree, 3, 1, 16, 16);
    snprintf(from, sizeof from, "%s/class0", tree);
    snprintf(to, sizeof to, "%s/caf\xe9", tree); /* Latin-1 */
    ck_assert_int_eq(rename(from, to), 0);
    td_dataset *ds = NULL;
    ck_assert_int_eq(td_dataset_open(tree, &ds, err, sizeof err),
                     TD_E_CORRUPT);
    char want[600];
    snprintf(want, sizeof want, "%s: class folder \"caf\\xe9\" cannot name "
             "a class: not UTF-8 (byte 0xe9 at byte 4) (class names are UTF-8 "
             "without control "
             "characters): rename the folder", tree);
    ck_assert_str_eq(err, want);
    snprintf(from, sizeof from, "%s/tab\there", tree);
    ck_assert_int_eq(rename(to, from), 0);
    ck_assert_int_eq(td_dataset_open(tree, &ds, err, sizeof err),
                     TD_E_CORRUPT);
    ck_assert_msg(strstr(err, "\"tab\\x09here\" cannot name a class: "
                              "control character 0x09 at byte 4"), "%s", err);
    snprintf(to, sizeof to, "%s/caf\xc3\xa9", tree); /* UTF-8: fine */
    ck_assert_int_eq(rename(from, to), 0);
    ds = open_ds(tree);
    ck_assert_str_eq(td_dataset_class_name(ds, 0), "caf\xc3\xa9");
    td_dataset_close(ds);
}
END_TEST

START_TEST(test_split_is_stratified_and_deterministic)
{
    char tree[128];
    snprintf(tree, sizeof tree, "%s/tree", tmp);
    td_test_make_folder(tree, 3, 10, 8, 8);
    td_dataset *ds = open_ds(tree);
    uint8_t a[30], b[30], c[30];
    ck_assert_int_eq(td_classes_split(ds, 0.2, 7, a), 0);
    ck_assert_int_eq(td_classes_split(ds, 0.2, 7, b), 0);
    ck_assert_int_eq(td_classes_split(ds, 0.2, 8, c), 0);
    ck_assert_mem_eq(a, b, 30);
    ck_assert_int_ne(memcmp(a, c, 30), 0);
    int per[3] = {0};
    for (int i = 0; i < 30; i++)
        per[td_dataset_label(ds, (size_t)i)] += a[i];
    for (int k = 0; k < 3; k++)
        ck_assert_int_eq(per[k], 2); /* 0.2 of 10, in every class */
    td_dataset_close(ds);
}
END_TEST

/* The job's view: data.val_fraction holds out a disjoint part; wrong
 * classes and heads are found before the job runs. */
static int job(const char *json, td_job_data *d, char *err, size_t cap)
{
    td_job_spec s;
    json_t *root = json_loads(json, 0, NULL);
    ck_assert_ptr_nonnull(root);
    ck_assert_msg(td_spec_parse(root, NULL, &s, err, cap) == 0, "%s", err);
    json_decref(root);
    int rc = d ? td_job_data_open(&s, NULL, NULL, d, err, cap)
               : td_job_precheck(&s, ".", NULL, NULL, 0, NULL, err, cap);
    td_spec_free(&s);
    return rc;
}

/* A daemon that cannot take on the submitter's identity checks every
 * file's bits for them, counting into the tally a submit shows: the
 * listing, then the rights, each stage with its count; a file the user
 * may not read is named. */
/* A job spec training on the folder tree, parsed into s. */
static void tree_spec(const char *tree, td_job_spec *s)
{
    char spec[1024], err[512];
    snprintf(spec, sizeof spec, "{\"model\": \"m\", \"optimizer\": {\"lr\": "
             "0.1}, \"data\": {\"train\": \"%s\"}}", tree);
    json_t *root = json_loads(spec, 0, NULL);
    ck_assert_msg(td_spec_parse(root, NULL, s, err, sizeof err) == 0, "%s",
                  err);
    json_decref(root);
}

START_TEST(test_rights_check_counts_its_files)
{
    char tree[128], err[512], f[256];
    snprintf(tree, sizeof tree, "%s/tree", tmp);
    td_test_make_folder(tree, 3, 4, 8, 8);
    ck_assert_int_eq(chmod(tmp, 0755), 0); /* mkdtemp's 0700 */
    td_job_spec s;
    tree_spec(tree, &s);
    td_fscred nobody = {.bits = 1, .uid = 65534, .gid = 65534};
    td_tally t = {0};
    td_job_data d;
    ck_assert_msg(td_job_data_open(&s, &nobody, &t, &d, err, sizeof err) == 0,
                  "%s", err);
    td_tally_seen v = td_tally_read(&t);
    ck_assert_str_eq(v.stage, "checking the submitter's rights to "
                              "data.train");
    ck_assert_str_eq(v.unit, "files");
    ck_assert_uint_eq(v.done, 12);
    ck_assert_uint_eq(v.total, 12);
    td_job_data_close(&d);
    snprintf(f, sizeof f, "%s/class1/img002.jpg", tree);
    ck_assert_int_eq(chmod(f, 0600), 0);
    ck_assert_int_eq(td_job_data_open(&s, &nobody, &t, &d, err, sizeof err),
                     -EACCES);
    ck_assert_msg(strstr(err, "class1/img002.jpg is not readable by uid "
                              "65534"), "%s", err);
    ck_assert_uint_eq(td_tally_read(&t).done, 7); /* 4 + 3, then it */
    /* without a rights check: the listing's count is the last stage */
    ck_assert_int_eq(td_job_data_open(&s, NULL, &t, &d, err, sizeof err), 0);
    v = td_tally_read(&t);
    ck_assert_str_eq(v.stage, "listing data.train");
    ck_assert_uint_eq(v.done, 12);
    ck_assert_uint_eq(v.total, 0);
    td_job_data_close(&d);
    td_spec_free(&s);
}
END_TEST

/* A tally's tick (what a job's start logs while it lists a big dataset)
 * is called on the counting thread as the count passes each 1024, here
 * with no time between ticks; never with nothing counted. */
static uint64_t ticked[16];
static int nticks;
static void on_tick(td_tally *t, void *user)
{
    ck_assert_ptr_eq(user, ticked);
    td_tally_seen v = td_tally_read(t);
    ck_assert_str_eq(v.stage, "listing data.train");
    if (nticks < 16)
        ticked[nticks++] = v.done;
}

START_TEST(test_tally_ticks_while_listing)
{
    char tree[128], f[200], err[512];
    snprintf(tree, sizeof tree, "%s/tree", tmp);
    ck_assert_int_eq(mkdir(tree, 0755), 0);
    for (int c = 0; c < 2; c++) {
        snprintf(tree, sizeof tree, "%s/tree/c%d", tmp, c);
        ck_assert_int_eq(mkdir(tree, 0755), 0);
        for (int i = 0; i < 1500; i++) {
            snprintf(f, sizeof f, "%s/%04d.jpg", tree, i);
            FILE *fp = fopen(f, "w");
            ck_assert_ptr_nonnull(fp);
            fclose(fp);
        }
    }
    snprintf(tree, sizeof tree, "%s/tree", tmp);
    td_job_spec s;
    tree_spec(tree, &s);
    td_tally t = {.tick = on_tick, .tick_user = ticked, .tick_every_ns = 0};
    td_job_data d;
    ck_assert_msg(td_job_data_open(&s, NULL, &t, &d, err, sizeof err) == 0,
                  "%s", err);
    ck_assert_uint_eq(td_dataset_count(d.train), 3000);
    ck_assert_int_eq(nticks, 2); /* past 1024 and 2048 */
    ck_assert_uint_ge(ticked[0], 1024);
    ck_assert_uint_lt(ticked[0], 2048);
    ck_assert_uint_ge(ticked[1], 2048);
    ck_assert_uint_le(ticked[1], 3000);
    td_job_data_close(&d);
    td_spec_free(&s);
}
END_TEST

START_TEST(test_job_data_and_precheck)
{
    char tree[128], spec[2048], err[512];
    snprintf(tree, sizeof tree, "%s/tree", tmp);
    td_test_make_folder(tree, 10, 3, 8, 8);
    td_job_data d;
    snprintf(spec, sizeof spec, "{\"model\": \"m\", \"optimizer\": {\"lr\": "
             "0.1}, \"data\": {\"train\": \"%s\", \"val_fraction\": 0.34}}",
             tree);
    ck_assert_int_eq(job(spec, &d, err, sizeof err), 0);
    ck_assert_int_eq(td_dataset_count(d.train), 20);
    ck_assert_int_eq(td_dataset_count(d.val), 10);
    ck_assert_msg(strstr(d.note, "10 of 30 samples held out"), "%s", d.note);
    for (size_t i = 0; i < 10; i++) {
        char vn[256], tn[256];
        td_dataset_sample_name(d.val, i, vn, sizeof vn);
        for (size_t j = 0; j < 20; j++)
            ck_assert_str_ne(vn, td_dataset_sample_name(d.train, j, tn,
                                                        sizeof tn));
    }
    td_job_data_close(&d);
    /* data.classes 5 with labels up to 9. */
    snprintf(spec, sizeof spec, "{\"model\": \"m\", \"optimizer\": {\"lr\": "
             "0.1}, \"data\": {\"train\": \"%s\", \"classes\": 5}}", tree);
    ck_assert_int_eq(job(spec, &d, err, sizeof err), TD_E_SPEC);
    ck_assert_msg(strstr(err, "data.classes: 5, but data.train has 10 "
                              "classes (labels up to 9, 'class9')"), "%s",
                  err);
    /* A dense head of 7 units for 10 classes. */
    snprintf(spec, sizeof spec, "{\"optimizer\": {\"lr\": 0.1}, \"input\": "
             "{\"size\": [8, 8]}, \"data\": {\"train\": \"%s\"}, \"model\": "
             "{\"layers\": [{\"type\": \"flatten\", \"name\": \"f\"}, "
             "{\"type\": \"dense\", \"name\": \"fc\", \"units\": 7}]}}", tree);
    ck_assert_int_ne(job(spec, NULL, err, sizeof err), 0);
    ck_assert_msg(strstr(err, "fc") && strstr(err, "10"), "%s", err);
    /* More than the training samples in one batch: no step would run
     * (an epoch drops its partial batch), so refused before the job
     * starts; with a held-out share, counted after it. */
    const char *flat = "\"model\": {\"layers\": [{\"type\": \"flatten\", "
                       "\"name\": \"f\"}, {\"type\": \"dense\", \"name\": "
                       "\"fc\", \"units\": \"classes\"}]}";
    snprintf(spec, sizeof spec, "{\"optimizer\": {\"lr\": 0.1}, \"input\": "
             "{\"size\": [8, 8]}, \"data\": {\"train\": \"%s\"}, %s, "
             "\"batch_size\": 31}", tree, flat);
    ck_assert_int_eq(job(spec, NULL, err, sizeof err), TD_E_SPEC);
    ck_assert_str_eq(err, "batch_size: 31 is more than the 30 samples of "
                     "data.train: a training epoch drops its last partial "
                     "batch, so no step would run");
    snprintf(spec, sizeof spec, "{\"optimizer\": {\"lr\": 0.1}, \"input\": "
             "{\"size\": [8, 8]}, \"data\": {\"train\": \"%s\", "
             "\"val_fraction\": 0.34}, %s, \"batch_size\": 21}", tree, flat);
    ck_assert_int_eq(job(spec, NULL, err, sizeof err), TD_E_SPEC);
    ck_assert_str_eq(err, "batch_size: 21 is more than the 20 samples of "
                     "data.train (after data.val_fraction 0.34 holds out 10): "
                     "a training epoch drops its last partial batch, so no "
                     "step would run");
    snprintf(spec, sizeof spec, "{\"optimizer\": {\"lr\": 0.1}, \"input\": "
             "{\"size\": [8, 8]}, \"data\": {\"train\": \"%s\", "
             "\"val_fraction\": 0.34}, %s, \"batch_size\": 20}", tree, flat);
    ck_assert_msg(job(spec, NULL, err, sizeof err) == 0, "%s", err);
}
END_TEST

/* The schedule against the run's length, known once the data is counted:
 * a warm-up as long as the run and a step schedule whose first decay
 * comes after its end are refused, naming how the steps were counted. */
static int sized(const char *json, int synthetic_steps, td_job_size *z,
                 char *err, size_t cap)
{
    td_job_spec s;
    json_t *root = json_loads(json, 0, NULL);
    ck_assert_ptr_nonnull(root);
    ck_assert_msg(td_spec_parse(root, NULL, &s, err, cap) == 0, "%s", err);
    json_decref(root);
    memset(z, 0, sizeof *z);
    int rc = td_job_precheck(&s, ".", NULL, NULL, synthetic_steps, z, err,
                             cap);
    td_spec_free(&s);
    return rc;
}

/* 30 samples, 0.34 held out: 20 left, 3 batches of 6 (2 dropped) */
static void sched(char *out, size_t cap, const char *type, int warm,
                  int size, const char *tree, const char *model)
{
    snprintf(out, cap, "{\"optimizer\": {\"lr\": 0.1, \"schedule\": "
             "{\"type\": \"%s\", \"warmup_steps\": %d, \"step_size\": "
             "%d}}, \"input\": {\"size\": [8, 8]}, \"data\": {\"train\": "
             "\"%s\", \"val_fraction\": 0.34}, %s, \"batch_size\": 6, "
             "\"epochs\": 2}", type, warm, size, tree, model);
}

START_TEST(test_schedule_against_run_length)
{
    char tree[128], spec[2048], err[1024];
    td_job_size z;
    const char *flat = "\"model\": {\"layers\": [{\"type\": \"flatten\", "
                       "\"name\": \"f\"}, {\"type\": \"dense\", \"name\": "
                       "\"fc\", \"units\": \"classes\"}]}";
    snprintf(tree, sizeof tree, "%s/tree", tmp);
    td_test_make_folder(tree, 10, 3, 8, 8);
    sched(spec, sizeof spec, "cosine", 6, 1000, tree, flat);
    ck_assert_int_eq(sized(spec, 0, &z, err, sizeof err), TD_E_SPEC);
    ck_assert_str_eq(err, "optimizer.schedule.warmup_steps: 6, but the run "
                     "has 6 steps (2 epochs x 3 steps of batch_size 6 from "
                     "the 20 samples of data.train left after "
                     "data.val_fraction 0.34): the learning rate would "
                     "never leave the warm-up (set it below 6, or train "
                     "more epochs)");
    sched(spec, sizeof spec, "cosine", 5, 1000, tree, flat);
    ck_assert_msg(sized(spec, 0, &z, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(z.train, 20);
    ck_assert_int_eq(z.held, 10);
    ck_assert_int_eq(z.steps_per_epoch, 3);
    ck_assert_int_eq(z.steps, 6);
    /* step: the first decay after warmup_steps + step_size steps */
    sched(spec, sizeof spec, "step", 2, 4, tree, flat);
    ck_assert_int_eq(sized(spec, 0, &z, err, sizeof err), TD_E_SPEC);
    ck_assert_str_eq(err, "optimizer.schedule.step_size: 4, but the run has "
                     "6 steps (2 epochs x 3 steps of batch_size 6 from the "
                     "20 samples of data.train left after data.val_fraction "
                     "0.34): its first decay would come after 6 steps "
                     "(warmup_steps 2 + step_size 4), so the learning rate "
                     "would never decay");
    sched(spec, sizeof spec, "step", 2, 3, tree, flat);
    ck_assert_msg(sized(spec, 0, &z, err, sizeof err) == 0, "%s", err);
    /* cosine and constant ignore step_size */
    sched(spec, sizeof spec, "constant", 0, 1000, tree, flat);
    ck_assert_msg(sized(spec, 0, &z, err, sizeof err) == 0, "%s", err);
    /* synthetic input: 100 steps an epoch, or as many as asked */
    snprintf(spec, sizeof spec, "{\"optimizer\": {\"lr\": 0.1, "
             "\"schedule\": {\"warmup_steps\": 100}}, \"input\": "
             "{\"size\": [8, 8], \"source\": \"synthetic\"}, %s, "
             "\"epochs\": 1}", flat);
    ck_assert_int_eq(sized(spec, 0, &z, err, sizeof err), TD_E_SPEC);
    ck_assert_str_eq(err, "optimizer.schedule.warmup_steps: 100, but the "
                     "run has 100 steps (1 epoch x 100 steps of synthetic "
                     "input): the learning rate would never leave the "
                     "warm-up (set it below 100, or train more epochs)");
    ck_assert_msg(sized(spec, 101, &z, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(z.steps, 101);
    ck_assert_int_eq(z.train, 0);
}
END_TEST

static Suite *classes_suite(void)
{
    Suite *s = suite_create("classes");
    TCase *tc = tcase_create("classes");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_val_mapped_by_name);
    tcase_add_test(tc, test_classes_txt);
    tcase_add_test(tc, test_classes_txt_refused_lines);
    tcase_add_test(tc, test_folder_names_checked);
    tcase_add_test(tc, test_split_is_stratified_and_deterministic);
    tcase_add_test(tc, test_job_data_and_precheck);
    tcase_add_test(tc, test_rights_check_counts_its_files);
    tcase_add_test(tc, test_tally_ticks_while_listing);
    tcase_add_test(tc, test_schedule_against_run_length);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(classes_suite)
