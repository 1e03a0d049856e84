/* jsontext.c - JSON text for people and pipes: every real in its
 * shortest form that reads back to the same double.
 *
 * jansson prints reals with "%.17g" (JSON_REAL_PRECISION(17)), exact but
 * noisy: 0.35 comes out as 0.34999999999999998.  td_json_dumps prints
 * through jansson, then rewrites each real number token to the fewest
 * digits (1..17) that strtod turns back into the same value, so nothing
 * is lost.  Owns: that rewrite.  Never does: change what is hashed (the
 * spec hash uses jansson's own text, which checkpoints record).
 */
#include "base/jsontext.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The shortest "%.*g" of v that reads back as v, kept a real ("1.0"). */
static int td__shortest(double v, char *buf, size_t cap)
{
    int n = 0;
    for (int p = 1; p <= 17; p++) {
        n = snprintf(buf, cap, "%.*g", p, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    if (n > 0 && (size_t)n + 2 < cap && !strpbrk(buf, ".eEni")) {
        buf[n++] = '.';
        buf[n++] = '0';
        buf[n] = '\0';
    }
    return n;
}

char *td_json_dumps(const json_t *o, size_t flags)
{
    char *in = json_dumps(o, flags);
    if (!in)
        return NULL;
    size_t len = strlen(in);
    char *out = malloc(len + 1); /* never longer than jansson's text */
    if (!out) {
        free(in);
        return NULL;
    }
    size_t i = 0, k = 0;
    while (i < len) {
        char c = in[i];
        if (c == '"') { /* copy a string, escapes included */
            out[k++] = in[i++];
            while (i < len && in[i] != '"') {
                if (in[i] == '\\' && i + 1 < len)
                    out[k++] = in[i++];
                out[k++] = in[i++];
            }
            if (i < len)
                out[k++] = in[i++];
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            size_t j = i;
            int real = 0;
            while (j < len && strchr("0123456789+-.eE", in[j])) {
                real |= in[j] == '.' || in[j] == 'e' || in[j] == 'E';
                j++;
            }
            char tok[64], s[40];
            if (real && j - i < sizeof tok) {
                memcpy(tok, in + i, j - i);
                tok[j - i] = '\0';
                int n = td__shortest(strtod(tok, NULL), s, sizeof s);
                if (n > 0 && (size_t)n <= j - i) {
                    memcpy(out + k, s, (size_t)n);
                    k += (size_t)n;
                    i = j;
                    continue;
                }
            }
            memcpy(out + k, in + i, j - i);
            k += j - i;
            i = j;
        } else {
            out[k++] = in[i++];
        }
    }
    out[k] = '\0';
    free(in);
    return out;
}
