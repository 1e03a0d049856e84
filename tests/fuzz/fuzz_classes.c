/* fuzz_classes.c - a classes.txt beside tar shards, as a job's data.train
 * or data.val finds it (lib/input/classes.c, td_classes_attach).
 *
 * Input: the file's bytes.  The shard is the target's own (made once: 3
 * samples labelled 0, 1, 2), so what varies is the names.  classes.h
 * promises that line i names label i: an accepted file gives the
 * dataset exactly its lines as names (a final "\r" dropped, the last line
 * with or without its "\n"), each a non-empty UTF-8 string without
 * control characters, no two alike, at least as many as the labels.  A
 * refused file names classes.txt in its error and leaves no names.
 */
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "base/error.h"
#include "fuzz.h"
#include "input/classes.h"
#include "input/tar.h"

static const char *td__shard(void)
{
    static char path[4200];
    if (path[0])
        return path;
    uint8_t buf[16 * TD_TAR_BLOCK] = {0};
    size_t at = 0;
    for (int i = 0; i < 3; i++) {
        char name[32], cls[2] = {(char)('0' + i), 0};
        snprintf(name, sizeof name, "s/%03d.jpg", i);
        TD_FUZZ_CHECK(td_tar_header(buf + at, name, 4, 1700000000) == 0);
        memcpy(buf + at + TD_TAR_BLOCK, "\xff\xd8\xff\xd9", 4);
        at += td_tar_member_bytes(4);
        snprintf(name, sizeof name, "s/%03d.cls", i);
        TD_FUZZ_CHECK(td_tar_header(buf + at, name, 1, 1700000000) == 0);
        memcpy(buf + at + TD_TAR_BLOCK, cls, 1);
        at += td_tar_member_bytes(1);
    }
    snprintf(path, sizeof path, "%s/s.tar", td_fuzz_tmpdir());
    td_fuzz_write(path, buf, at + 2 * TD_TAR_BLOCK);
    return path;
}

/* Whether name (len bytes) is one classes.h allows. */
static int td__valid_name(const char *name, size_t len)
{
    if (len == 0)
        return 0;
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)name[i] < 0x20 || name[i] == 0x7f)
            return 0;
    json_t *s = json_stringn(name, len);
    json_decref(s);
    return s != NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *shard = td__shard();
    char file[4300], err[1024] = "";
    snprintf(file, sizeof file, "%s/%s", td_fuzz_tmpdir(), TD_CLASSES_FILE);
    td_fuzz_write(file, data, size);
    td_dataset *ds = NULL;
    TD_FUZZ_CHECK(td_dataset_open(shard, &ds, err, sizeof err) == 0);
    TD_FUZZ_CHECK(td_dataset_classes(ds) == 3);
    int rc = td_classes_attach(ds, shard, err, sizeof err);
    if (rc) {
        TD_FUZZ_CHECK(rc == TD_E_CORRUPT || rc == -ENOMEM);
        TD_FUZZ_CHECK(rc == -ENOMEM || strstr(err, TD_CLASSES_FILE) != NULL);
        TD_FUZZ_CHECK(td_dataset_named_classes(ds) == 0);
        td_dataset_close(ds);
        return 0;
    }
    /* The lines, as the promise reads them. */
    int n = 0;
    const char *p = (const char *)data, *end = p + size;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        size_t len = (size_t)(le - p);
        if (len && p[len - 1] == '\r')
            len--;
        TD_FUZZ_CHECK(n < td_dataset_named_classes(ds));
        const char *got = td_dataset_class_name(ds, n);
        TD_FUZZ_CHECK(got != NULL && strlen(got) == len &&
                      memcmp(got, p, len) == 0);
        TD_FUZZ_CHECK(td__valid_name(got, len));
        for (int k = 0; k < n; k++)
            TD_FUZZ_CHECK(strcmp(td_dataset_class_name(ds, k), got) != 0);
        n++;
        p = nl ? nl + 1 : end;
    }
    TD_FUZZ_CHECK(n == td_dataset_named_classes(ds));
    TD_FUZZ_CHECK(n >= 3 && td_dataset_classes(ds) == n);
    for (size_t i = 0; i < td_dataset_count(ds); i++)
        TD_FUZZ_CHECK(td_dataset_label(ds, i) < n);
    td_dataset_close(ds);
    return 0;
}
