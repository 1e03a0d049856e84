/* jpegerr.c - the input area's libjpeg error manager (see jpegerr.h). */
#include "input/jpegerr.h"

#include <string.h>

#include <jerror.h>

static void td__jpeg_error_exit(j_common_ptr ci)
{
    longjmp(((td_jpeg_err *)(void *)ci->err)->jb, 1);
}

/* level < 0: a warning; >= 0: trace messages, ignored. */
static void td__jpeg_emit_message(j_common_ptr ci, int level)
{
    td_jpeg_err *e = (td_jpeg_err *)(void *)ci->err;
    if (level >= 0)
        return;
    e->warned = 1;
    if (e->pub.msg_code == JWRN_JPEG_EOF ||
        e->pub.msg_code == JWRN_HIT_MARKER ||
        e->pub.msg_code == JWRN_MUST_RESYNC ||
        e->pub.msg_code == JWRN_NOT_SEQUENTIAL)
        e->damaged = 1;
}

struct jpeg_error_mgr *td_jpeg_err_init(td_jpeg_err *e)
{
    memset(e, 0, sizeof *e);
    struct jpeg_error_mgr *pub = jpeg_std_error(&e->pub);
    pub->error_exit = td__jpeg_error_exit;
    pub->emit_message = td__jpeg_emit_message;
    return pub;
}
