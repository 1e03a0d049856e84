/* pack_classes.c - trainctl pack: classes.txt next to the shards, and
 * --val-fraction (a held-out split of an ImageFolder).
 *
 * The split is td_classes_split (stratified by class, chosen by --seed),
 * realised as two trees of symbolic links in a temporary folder under the
 * output, packed as usual into DIR/train and DIR/val, then removed.  Each
 * set gets the classes.txt of its own folders; training maps val onto
 * train by name (lib/input/classes.h), so a class too small to hold one
 * out is simply absent from val.
 * td_pack_survey names, before packing, every file pack leaves out and
 * every image whose headers cannot be read (a bad sample when training),
 * and says when their share would fail a job; it reads every file, so
 * on a terminal it shows how far it is (progress.h).
 * Never: copies or changes an image (the links point at the originals).
 */
#define _GNU_SOURCE
#include "pack_classes.h"

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "input/classes.h"
#include "input/dataset.h"
#include "input/decode.h"
#include "input/png.h"
#include "progress.h"

int td_pack_classes_file(const char *out, const char *folder, int classes,
                         char *err, size_t errcap)
{
    td_dataset *ds = NULL;
    char e[512], **num = NULL;
    const char **names;
    int n = classes, rc;
    if (folder) {
        if ((rc = td_dataset_open(folder, &ds, e, sizeof e))) {
            snprintf(err, errcap, "%s", e);
            return rc;
        }
        n = td_dataset_named_classes(ds);
    }
    names = calloc((size_t)(n > 0 ? n : 1), sizeof *names);
    num = calloc((size_t)(n > 0 ? n : 1), sizeof *num);
    if (!names || !num) {
        rc = -ENOMEM;
        goto out;
    }
    for (int i = 0; i < n; i++) {
        if (ds) {
            names[i] = td_dataset_class_name(ds, i);
        } else { /* IDX: the labels are the only names there are */
            if (asprintf(&num[i], "%d", i) < 0) {
                rc = -ENOMEM;
                goto out;
            }
            names[i] = num[i];
        }
    }
    rc = td_classes_write(out, names, n, err, errcap);
out:
    for (int i = 0; num && i < n; i++)
        free(num[i]);
    free(num);
    free(names);
    td_dataset_close(ds);
    return rc;
}

static int td__rm(const char *p, const struct stat *st, int flag,
                  struct FTW *f)
{
    (void)st;
    (void)flag;
    (void)f;
    return remove(p);
}

void td_pack_remove_tree(const char *dir)
{
    nftw(dir, td__rm, 16, FTW_DEPTH | FTW_PHYS);
}

/* dir/set/<class>/<file> -> the original (absolute). */
static int td__link(const char *tmp, const char *set, const char *cls,
                    const char *src)
{
    char d[PATH_MAX], l[PATH_MAX * 2], abs[PATH_MAX];
    if (!realpath(src, abs))
        return -errno;
    snprintf(d, sizeof d, "%s/%s/%s", tmp, set, cls);
    if (mkdir(d, 0755) != 0 && errno != EEXIST)
        return -errno;
    const char *base = strrchr(src, '/');
    snprintf(l, sizeof l, "%s/%s", d, base ? base + 1 : src);
    return symlink(abs, l) == 0 ? 0 : -errno;
}

int td_pack_split_trees(const char *folder, const char *out, double fraction,
                        uint64_t seed, char *tmp, size_t tmpcap,
                        size_t *nval, char *err, size_t errcap)
{
    td_dataset *ds = NULL;
    char e[512], name[PATH_MAX], d[PATH_MAX];
    int rc;
    uint8_t *mark = NULL;
    *nval = 0;
    if ((rc = td_dataset_open(folder, &ds, e, sizeof e))) {
        snprintf(err, errcap, "%s", e);
        return rc;
    }
    size_t n = td_dataset_count(ds);
    snprintf(tmp, tmpcap, "%s/.split-XXXXXX", out);
    if (mkdir(out, 0755) != 0 && errno != EEXIST) {
        rc = -errno;
        snprintf(err, errcap, "%s: %s", out, strerror(errno));
        goto out;
    }
    if (!mkdtemp(tmp)) {
        rc = -errno;
        snprintf(err, errcap, "%s: %s", tmp, strerror(errno));
        goto out;
    }
    snprintf(d, sizeof d, "%s/train", tmp);
    mkdir(d, 0755);
    snprintf(d, sizeof d, "%s/val", tmp);
    mkdir(d, 0755);
    if (!(mark = malloc(n ? n : 1))) {
        rc = -ENOMEM;
        goto out;
    }
    if ((rc = td_classes_split(ds, fraction, seed, mark)))
        goto out;
    for (size_t i = 0; i < n && !rc; i++) {
        td_dataset_sample_name(ds, i, name, sizeof name);
        rc = td__link(tmp, mark[i] ? "val" : "train",
                      td_dataset_class_name(ds, td_dataset_label(ds, i)),
                      name);
        if (rc)
            snprintf(err, errcap, "%s: cannot link it: %s", name,
                     strerror(-rc));
        *nval += mark[i];
    }
    if (!rc && *nval == 0) {
        snprintf(err, errcap, "--val-fraction %g of %zu images holds out "
                 "none", fraction, n);
        rc = -EINVAL;
    }
out:
    if (rc && tmp[0] && strstr(tmp, "/.split-") && access(tmp, F_OK) == 0)
        td_pack_remove_tree(tmp);
    free(mark);
    td_dataset_close(ds);
    return rc;
}

/* ---- what pack leaves out, and what training would refuse ------------- */

/* What the ImageFolder leaves out (td_dataset_folder_why_not): named on
 * stderr, the same entries a job on the folder counts in its log. */
static size_t td__skipped(const char *root)
{
    size_t n = 0;
    DIR *top = opendir(root);
    struct dirent *c, *e;
    while (top && (c = readdir(top))) {
        char d[PATH_MAX], f[PATH_MAX * 2];
        snprintf(d, sizeof d, "%s/%s", root, c->d_name);
        const char *why = td_dataset_folder_why_not(d, 1);
        if (why) {
            fprintf(stderr, "trainctl pack: skipped %s: %s\n", d, why);
            n++;
        }
        DIR *cd = why || c->d_name[0] == '.' ? NULL : opendir(d);
        while (cd && (e = readdir(cd))) {
            snprintf(f, sizeof f, "%s/%s", d, e->d_name);
            if ((why = td_dataset_folder_why_not(f, 0))) {
                fprintf(stderr, "trainctl pack: skipped %s: %s\n", f, why);
                n++;
            }
        }
        if (cd)
            closedir(cd);
    }
    if (top)
        closedir(top);
    return n;
}

int td_pack_survey(const char *root, double max_bad, size_t *skipped,
                   size_t *bad)
{
    td_dataset *ds = NULL;
    td_decoder *dec = NULL;
    td_png png = {0};
    td_buf buf = {0};
    char e[512], name[PATH_MAX];
    *skipped = td__skipped(root);
    *bad = 0;
    if (td_dataset_open(root, &ds, e, sizeof e) || td_decoder_create(&dec)) {
        td_dataset_close(ds);
        return 0; /* pack itself will say what is wrong */
    }
    size_t n = td_dataset_count(ds);
    td_progress pr; /* it reads every file: on a terminal, how far */
    td_progress_init(&pr);
    for (size_t i = 0; i < n; i++) {
        const uint8_t *data;
        size_t len;
        td_progress_count(&pr, "checking", (int64_t)i, (int64_t)n, "images");
        int w, h, rc = td_dataset_read(ds, i, &buf, &data, &len);
        const char *why = rc ? strerror(-rc) : NULL;
        if (!rc && td_png_is(data, len)) {
            if (td_png_header(&png, data, len, &w, &h))
                why = png.msg;
        } else if (!rc && td_decoder_header(dec, data, len, &w, &h)) {
            why = td_decoder_message(dec);
        }
        if (why) {
            td_progress_clear(&pr);
            fprintf(stderr, "trainctl pack: %s: unreadable (%s): packed as "
                    "it is, a bad sample for training\n",
                    td_dataset_sample_name(ds, i, name, sizeof name), why);
            (*bad)++;
        }
    }
    td_progress_clear(&pr); /* pack's own progress follows */
    if (*bad && (double)*bad > max_bad * (double)n)
        fprintf(stderr, "trainctl pack: %zu of %zu images (%.1f%%) are "
                "unreadable: more than a job's max_bad_ratio (default %g), so "
                "a job on these shards would fail; remove them or set "
                "max_bad_ratio\n", *bad, n, 100.0 * (double)*bad / (double)n,
                max_bad);
    td_buf_free(&buf);
    td_png_free(&png);
    td_decoder_destroy(dec);
    td_dataset_close(ds);
    return 0;
}
