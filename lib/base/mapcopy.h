/* mapcopy.h - copying out of a file mapping that may shrink under us.
 *
 * A shard is read through a shared read-only map of its file.  Whoever
 * truncates that file in place while it is mapped (`cp` over it, an
 * editor, a full disk's partial rewrite) makes every read of a page past
 * the new end raise SIGBUS, whose default action kills the process: the
 * daemon and every job with it.  td_map_copy copies with SIGBUS caught on
 * the calling thread only: a fault there returns TD_E_SHRUNK and the
 * caller treats the sample as bad; a SIGBUS anywhere else keeps the
 * action it had before (default: the process dies with a core).
 *
 * Owns: one SIGBUS handler, installed at the first copy.  Never: any
 * other signal.
 */
#ifndef TD_MAPCOPY_H
#define TD_MAPCOPY_H

#include <stddef.h>

/* Copies n bytes from src (inside a file mapping) to dst.  0, or
 * TD_E_SHRUNK when a page of src is past the end of its file. */
int td_map_copy(void *dst, const void *src, size_t n);

#endif
