/* fuzz_tdidx.c - a tar shard with its .tdidx index cache beside it, as
 * td_dataset_open finds them (lib/dataset.c).
 *
 * Input: a little-endian u16 n, then n bytes of .tdidx, then the shard.
 * The cache's size and mtime fields (bytes 8..31) are set to the shard
 * file's, as a cache written for it would have them, so the fuzzer works
 * on the entries and not on matching a timestamp; with n < 32 the cache
 * is just short.  Every sample of a dataset that opens must be readable
 * whole, have a name, and a label below the class count.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "input/dataset.h"
#include "base/error.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    size_t n = (size_t)data[0] | (size_t)data[1] << 8;
    if (n > size - 2)
        n = size - 2;
    const uint8_t *idx = data + 2, *tar = data + 2 + n;
    size_t tlen = size - 2 - n;

    char shard[4200], cache[4300], err[1024] = "";
    snprintf(shard, sizeof shard, "%s/s.tar", td_fuzz_tmpdir());
    snprintf(cache, sizeof cache, "%s.tdidx", shard);
    td_fuzz_write(shard, tar, tlen);
    struct timespec ts[2] = {{1700000000, 123456789}, {1700000000, 123456789}};
    TD_FUZZ_CHECK(utimensat(AT_FDCWD, shard, ts, 0) == 0);
    uint8_t *c = malloc(n + 1);
    TD_FUZZ_CHECK(c != NULL);
    memcpy(c, idx, n);
    if (n >= 32) {
        uint64_t sz = tlen;
        int64_t s = ts[1].tv_sec, ns = ts[1].tv_nsec;
        memcpy(c + 8, &sz, 8);
        memcpy(c + 16, &s, 8);
        memcpy(c + 24, &ns, 8);
    }
    td_fuzz_write(cache, c, n);
    free(c);

    td_dataset *ds = NULL;
    int rc = td_dataset_open(shard, &ds, err, sizeof err);
    if (rc) {
        TD_FUZZ_CHECK(ds == NULL && err[0] != '\0');
        return 0;
    }
    TD_FUZZ_CHECK(td_dataset_kind(ds) == TD_DATASET_SHARDS);
    size_t count = td_dataset_count(ds);
    int classes = td_dataset_classes(ds);
    TD_FUZZ_CHECK(count > 0 && classes > 0);
    td_buf scratch = {0};
    for (size_t i = 0; i < count; i++) {
        const uint8_t *p;
        size_t len;
        char name[600];
        TD_FUZZ_CHECK(td_dataset_read(ds, i, &scratch, &p, &len) == 0);
        TD_FUZZ_CHECK(len <= tlen);
        td_fuzz_touch(p, len);
        int32_t label = td_dataset_label(ds, i);
        TD_FUZZ_CHECK(label >= 0 && label < classes);
        td_dataset_sample_name(ds, i, name, sizeof name);
        TD_FUZZ_CHECK(strncmp(name, shard, strlen(shard)) == 0);
    }
    td_buf_free(&scratch);
    td_dataset_close(ds);
    return 0;
}
