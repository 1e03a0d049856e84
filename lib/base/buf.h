/* buf.h - a byte buffer that grows and is reused (read scratch, encoded
 * output).  Owns nothing but its memory; never shrinks until freed. */
#ifndef TD_BUF_H
#define TD_BUF_H

#include <stddef.h>
#include <stdint.h>

typedef struct td_buf {
    uint8_t *p;
    size_t len, cap;
} td_buf;

/* Makes room for at least cap bytes (contents kept): 0 or -ENOMEM. */
int td_buf_reserve(td_buf *b, size_t cap);
/* Frees the memory; the buffer is empty and reusable afterwards. */
void td_buf_free(td_buf *b);

#endif
