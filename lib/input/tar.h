/* tar.h - the ustar format, as far as WebDataset shards need it.
 *
 * Writing: one 512-byte ustar header per member, data padded to 512, two
 * zero blocks at the end.  Reading: a walk over the headers of a tar held
 * in memory (an mmap), yielding each regular file's name, data offset and
 * size; GNU long names ('L') and pax 'path' records are honoured, other
 * member types (directories, links, pax globals) are stepped over.
 * Owns: the byte layout.  Never: I/O, allocation.
 */
#ifndef TD_TAR_H
#define TD_TAR_H

#include <stddef.h>
#include <stdint.h>

#define TD_TAR_BLOCK 512
#define TD_TAR_NAME_MAX 255

/* Fills hdr with a ustar header for a regular file (mode 0644, owner 0,
 * GNU tar's field layout).  name is split into prefix/name when longer
 * than 100 bytes.  Returns 0, -ENAMETOOLONG (no split fits, or longer
 * than TD_TAR_NAME_MAX), or -EFBIG (size of 8 GiB or more: ustar's 11
 * octal digits cannot hold it). */
int td_tar_header(uint8_t hdr[TD_TAR_BLOCK], const char *name, uint64_t size,
                  int64_t mtime);

/* Bytes a member of `size` bytes takes, header and padding included. */
static inline uint64_t td_tar_member_bytes(uint64_t size)
{
    return TD_TAR_BLOCK + (size + TD_TAR_BLOCK - 1) / TD_TAR_BLOCK *
                              TD_TAR_BLOCK;
}

/* Called for each regular file; return non-zero to stop the walk (that
 * value is returned by td_tar_walk). */
typedef int (*td_tar_member_fn)(void *user, const char *name, uint64_t off,
                                uint64_t size);

/* Walks a tar image of len bytes.  Returns 0 at the end-of-archive blocks
 * (or at the end of the buffer on a block boundary), TD_E_CORRUPT for a bad
 * checksum, a size past the end or a truncated header (errat, if given,
 * receives the offset of the bad header), or the callback's value. */
int td_tar_walk(const uint8_t *base, uint64_t len, td_tar_member_fn fn,
                void *user, uint64_t *errat);

#endif
