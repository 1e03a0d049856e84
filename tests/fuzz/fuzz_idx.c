/* fuzz_idx.c - an IDX file (MNIST-style), plain or gzip'd, as `trainctl
 * pack` reads it (lib/idx.c).
 *
 * Input: the file's bytes.  A file that loads must hold exactly the bytes
 * its dimensions say, all readable.
 */
#include <unistd.h>

#include "base/error.h"
#include "fuzz.h"
#include "input/idx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64], err[1024] = "";
    int fd = td_fuzz_memfile(data, size, path, sizeof path);
    td_idx im;
    int rc = td_idx_load(path, &im, err, sizeof err);
    close(fd);
    if (rc) {
        TD_FUZZ_CHECK(im.data == NULL && err[0] != '\0');
        return 0;
    }
    TD_FUZZ_CHECK(im.ndims >= 1 && im.ndims <= TD_IDX_MAX_DIMS);
    size_t total = 1;
    for (int d = 0; d < im.ndims; d++)
        total *= im.dims[d];
    TD_FUZZ_CHECK(total == im.bytes && im.data != NULL);
    td_fuzz_touch(im.data, im.bytes);
    td_idx_free(&im);
    return 0;
}
