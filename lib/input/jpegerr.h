/* jpegerr.h - the one libjpeg error manager of the input area.
 *
 * libjpeg reports a fatal error by calling error_exit, which must not
 * return; ours longjmps to the jmp_buf the caller armed with
 * setjmp(e->jb) around its libjpeg calls (setjmp has to be in the caller's
 * own frame, so it cannot be wrapped here).  Warnings (data libjpeg
 * recovered from) are recorded, never printed:
 *   warned   any warning: the lossless rewrites (jpegidx.c) refuse a file
 *            that gave one, since their output would not be the file's;
 *   damaged  a warning that means the data is damaged or truncated (it
 *            ended early, a marker inside the entropy data, a lost restart
 *            marker, a scan out of order): decode.c then calls the sample
 *            bad, and takes other warnings (extraneous bytes before a
 *            marker, ...) in its stride.
 * Used by decode.c (one decompressor per decoder) and jpegidx.c (the
 * rewrites and the index writer).
 * Owns: nothing but the struct.  Never: prints, exits, allocates.
 */
#ifndef TD_JPEGERR_H
#define TD_JPEGERR_H

#include <setjmp.h>
#include <stdio.h> /* jpeglib.h needs FILE and size_t first */

#include <jpeglib.h>

typedef struct td_jpeg_err {
    struct jpeg_error_mgr pub; /* first: libjpeg casts ci->err to this */
    jmp_buf jb;                /* where error_exit longjmps to */
    int warned;                /* any warning since the last clear */
    int damaged;               /* a damaged-data warning since then */
} td_jpeg_err;

/* Sets e up (libjpeg's defaults, our error_exit and emit_message, flags
 * clear) and returns what goes into ci->err. */
struct jpeg_error_mgr *td_jpeg_err_init(td_jpeg_err *e);

/* Forgets the warnings seen so far (before the next image). */
static inline void td_jpeg_err_clear(td_jpeg_err *e)
{
    e->warned = 0;
    e->damaged = 0;
}

#endif
