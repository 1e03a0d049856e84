/* json.c - JSON helpers (see json.h). */
#include "base/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *td_json_type_name(json_type t)
{
    switch (t) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "true or false";
    case JSON_NULL: return "null";
    }
    return "an unknown JSON type";
}

int td_utf8_seq(const unsigned char *s, size_t n)
{
    unsigned c = s[0], min;
    size_t len;
    if (c < 0x80)
        return 1;
    if ((c & 0xe0) == 0xc0)
        len = 2, min = 0x80, c &= 0x1f;
    else if ((c & 0xf0) == 0xe0)
        len = 3, min = 0x800, c &= 0x0f;
    else if ((c & 0xf8) == 0xf0)
        len = 4, min = 0x10000, c &= 0x07;
    else
        return 0;
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        c = c << 6 | (s[i] & 0x3f);
    }
    return c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)
               ? 0
               : (int)len;
}

size_t td_utf8_escape(const char *s, size_t n, char *out, size_t cap,
                      size_t *olen)
{
    size_t i = 0, o = 0;
    while (i < n) {
        int k = td_utf8_seq((const unsigned char *)s + i, n - i);
        size_t need = k ? (size_t)k : 4;
        if (o + need > cap - 1)
            break;
        if (k)
            memcpy(out + o, s + i, need);
        else
            snprintf(out + o, 5, "\\x%02x", (unsigned char)s[i]);
        o += need;
        i += k ? (size_t)k : 1;
    }
    out[o] = '\0';
    *olen = o;
    return i;
}

json_t *td_json_text(const char *s)
{
    json_t *j = json_string(s ? s : "");
    if (j)
        return j;
    size_t n = strlen(s), o;
    char *out = malloc(4 * n + 1);
    if (!out)
        return NULL;
    td_utf8_escape(s, n, out, 4 * n + 1, &o);
    j = json_string(out); /* NUL bytes cannot be in s: valid now */
    free(out);
    return j;
}
