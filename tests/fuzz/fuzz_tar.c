/* fuzz_tar.c - a WebDataset shard's tar headers (lib/tar.c's walk).
 *
 * Input: the tar image.  Every member the walk yields must lie inside the
 * image, start on a block boundary right after its header, have a name of
 * at most TD_TAR_NAME_MAX bytes, and have the size its header says: the
 * size field is decoded again here, in 128 bits for GNU base-256, so a
 * size that does not fit 64 bits cannot pass for a small one.
 */
#include <string.h>

#include "base/error.h"
#include "fuzz.h"
#include "input/tar.h"

struct td__walk {
    const uint8_t *base;
    uint64_t len;
    unsigned members;
};

/* The header's size field as 128 bits (all ones when not a number). */
static unsigned __int128 td__size_field(const uint8_t *h)
{
    const uint8_t *p = h + 124;
    unsigned __int128 v = 0;
    if (p[0] & 0x80) {
        if (p[0] & 0x40) /* negative */
            return ~(unsigned __int128)0;
        v = p[0] & 0x3f;
        for (int i = 1; i < 12; i++)
            v = v << 8 | p[i];
        return v;
    }
    for (int i = 0; i < 12; i++)
        if (p[i] >= '0' && p[i] <= '7')
            v = v << 3 | (unsigned)(p[i] - '0');
    return v;
}

static int td__member(void *user, const char *name, uint64_t off,
                      uint64_t size)
{
    struct td__walk *w = user;
    TD_FUZZ_CHECK(strlen(name) <= TD_TAR_NAME_MAX);
    TD_FUZZ_CHECK(off >= TD_TAR_BLOCK && off % TD_TAR_BLOCK == 0);
    TD_FUZZ_CHECK(off <= w->len && size <= w->len - off);
    TD_FUZZ_CHECK(td__size_field(w->base + off - TD_TAR_BLOCK) == size);
    td_fuzz_touch(w->base + off, size);
    w->members++;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct td__walk w = {data, size, 0};
    uint64_t at = UINT64_MAX;
    int rc = td_tar_walk(data, size, td__member, &w, &at);
    TD_FUZZ_CHECK(rc == 0 || rc == TD_E_CORRUPT);
    /* the bad header's offset: a block boundary, at most one block past
     * the end (a last member whose padding is cut off) */
    if (rc == TD_E_CORRUPT)
        TD_FUZZ_CHECK(at % TD_TAR_BLOCK == 0 && at < size + TD_TAR_BLOCK);
    return 0;
}
