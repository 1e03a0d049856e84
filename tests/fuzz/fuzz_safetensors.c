/* fuzz_safetensors.c - a checkpoint file as resume and `trainctl export`
 * read it (lib/checkpoint.c's reader).
 *
 * Input: the file's bytes.  A file td_ckpt_open accepts must hold what it
 * promises: tensors that fit the file, each readable whole by name, with
 * a dtype and shape that give its byte count.
 */
#include <string.h>
#include <unistd.h>

#include "store/checkpoint.h"
#include "base/error.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64], err[1024] = "";
    int fd = td_fuzz_memfile(data, size, path, sizeof path);
    td_ckpt_file *f = NULL;
    int rc = td_ckpt_open(path, &f, err, sizeof err);
    close(fd);
    if (rc) {
        TD_FUZZ_CHECK(f == NULL && err[0] != '\0');
        TD_FUZZ_CHECK(rc == TD_E_CORRUPT || rc == TD_E_CRC || rc < 0);
        return 0;
    }
    size_t total = 0;
    for (int i = 0; i < td_ckpt_file_count(f); i++) {
        const td_ckpt_tensor *t = td_ckpt_file_tensor(f, i);
        TD_FUZZ_CHECK(t != NULL && t->ndim >= 0 &&
                      t->ndim <= TD_CKPT_MAX_DIMS);
        TD_FUZZ_CHECK(strlen(t->name) < TD_CKPT_NAME_MAX);
        size_t n = td_dtype_size(t->dtype);
        for (int d = 0; d < t->ndim; d++)
            n *= (size_t)t->shape[d];
        TD_FUZZ_CHECK(n == t->nbytes);
        total += t->nbytes;
        TD_FUZZ_CHECK(total <= size);
        const td_ckpt_tensor *byname = td_ckpt_file_find(f, t->name);
        TD_FUZZ_CHECK(byname == t); /* names are unique */
        uint8_t *buf = malloc(t->nbytes + 1);
        TD_FUZZ_CHECK(buf != NULL);
        TD_FUZZ_CHECK(td_ckpt_file_read(f, t->name, t->dtype, buf, t->nbytes,
                                        err, sizeof err) == 0);
        td_fuzz_touch(buf, t->nbytes);
        free(buf);
    }
    const td_ckpt_meta *m = td_ckpt_file_meta(f);
    TD_FUZZ_CHECK(m->step >= 0 && m->epoch >= 0 && m->sampler_pos >= 0);
    TD_FUZZ_CHECK(td_ckpt_file_meta_str(f, "traind.format") != NULL);
    td_ckpt_close(f);
    return 0;
}
