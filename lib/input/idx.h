/* idx.h - reader for IDX files (MNIST, Fashion-MNIST), plain or gzip'd.
 *
 * IDX: a 4-byte magic (0, 0, type, ndims), ndims big-endian uint32 sizes,
 * then the data.  traind reads only unsigned-byte files (type 0x08), which
 * is what MNIST-style image (3 dims) and label (1 dim) files are.  The
 * whole file is loaded into memory (Fashion-MNIST train: 47 MB).
 * Owns: parsing and validating IDX.  Never: writes, or guesses a type.
 */
#ifndef TD_IDX_H
#define TD_IDX_H

#include <stddef.h>
#include <stdint.h>

#define TD_IDX_MAX_DIMS 4

typedef struct td_idx {
    int ndims;
    uint32_t dims[TD_IDX_MAX_DIMS];
    uint8_t *data;   /* dims[0] * ... * dims[ndims-1] bytes */
    size_t bytes;
} td_idx;

/* Loads `path` (gzip'd or not, detected by content).  Returns 0, -errno
 * for I/O errors, or TD_E_CORRUPT (bad magic, unsupported type, size that
 * does not match the dims); err (may be NULL) gets a sentence naming the
 * file and what is wrong. */
int td_idx_load(const char *path, td_idx *out, char *err, size_t errcap);
void td_idx_free(td_idx *idx);

#endif
