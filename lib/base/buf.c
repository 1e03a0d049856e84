/* buf.c - the growing byte buffer (see buf.h). */
#include "base/buf.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

int td_buf_reserve(td_buf *b, size_t cap)
{
    if (b->cap >= cap)
        return 0;
    size_t n = b->cap ? b->cap : 4096;
    while (n < cap) {
        if (n > SIZE_MAX / 2) /* doubling would wrap to 0: no such size */
            return -ENOMEM;
        n *= 2;
    }
    uint8_t *p = realloc(b->p, n);
    if (!p)
        return -ENOMEM;
    b->p = p;
    b->cap = n;
    return 0;
}

void td_buf_free(td_buf *b)
{
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}
