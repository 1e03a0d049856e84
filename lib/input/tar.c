/* tar.c - ustar headers and the header walk (see tar.h). */
#include "input/tar.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "base/error.h"

static void td__octal(char *dst, size_t width, uint64_t v)
{
    /* width-1 octal digits and a NUL, as GNU tar writes them. */
    dst[width - 1] = '\0';
    for (size_t i = width - 1; i-- > 0;) {
        dst[i] = (char)('0' + (v & 7));
        v >>= 3;
    }
}

int td_tar_header(uint8_t hdr[TD_TAR_BLOCK], const char *name, uint64_t size,
                  int64_t mtime)
{
    size_t n = strlen(name);
    char *h = (char *)hdr;
    memset(hdr, 0, TD_TAR_BLOCK);
    if (n <= 100) {
        memcpy(h, name, n);
    } else {
        /* Split at a '/' so that prefix <= 155 and name <= 100. */
        const char *cut = NULL;
        for (const char *p = name; *p; p++)
            if (*p == '/' && (size_t)(p - name) <= 155 &&
                n - (size_t)(p - name) - 1 <= 100)
                cut = p;
        if (!cut || n > TD_TAR_NAME_MAX)
            return -ENAMETOOLONG;
        memcpy(h + 345, name, (size_t)(cut - name));
        memcpy(h, cut + 1, n - (size_t)(cut - name) - 1);
    }
    if (size >= (UINT64_C(1) << 33))
        return -EFBIG;
    td__octal(h + 100, 8, 0644);
    td__octal(h + 108, 8, 0);
    td__octal(h + 116, 8, 0);
    td__octal(h + 124, 12, size);
    td__octal(h + 136, 12, mtime > 0 ? (uint64_t)mtime : 0);
    h[156] = '0';
    memcpy(h + 257, "ustar", 6);
    memcpy(h + 263, "00", 2);
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < TD_TAR_BLOCK; i++)
        sum += hdr[i];
    td__octal(h + 148, 7, sum);
    h[155] = ' ';
    return 0;
}

static int td__parse_octal(const uint8_t *p, size_t width, uint64_t *out)
{
    uint64_t v = 0;
    size_t i = 0;
    if (p[0] & 0x80) {
        /* GNU base-256 for large sizes: big-endian, the first byte's top
         * bit the flag and the next one the sign.  Negative numbers and
         * numbers past 64 bits (the field holds 94) are refused, not
         * wrapped into a small size. */
        if (p[0] & 0x40)
            return -1;
        v = p[0] & 0x3f;
        for (i = 1; i < width; i++) {
            if (v >> 56)
                return -1;
            v = v << 8 | p[i];
        }
        *out = v;
        return 0;
    }
    while (i < width && (p[i] == ' ' || p[i] == '\0'))
        i++;
    for (; i < width && p[i] >= '0' && p[i] <= '7'; i++)
        v = v << 3 | (uint64_t)(p[i] - '0');
    for (; i < width; i++)
        if (p[i] != ' ' && p[i] != '\0')
            return -1;
    *out = v;
    return 0;
}

static int td__checksum_ok(const uint8_t *h)
{
    uint64_t want;
    if (td__parse_octal(h + 148, 8, &want))
        return 0;
    unsigned sum = 0;
    for (int i = 0; i < TD_TAR_BLOCK; i++)
        sum += (i >= 148 && i < 156) ? ' ' : h[i];
    return sum == want;
}

static int td__all_zero(const uint8_t *h)
{
    for (int i = 0; i < TD_TAR_BLOCK; i++)
        if (h[i])
            return 0;
    return 1;
}

/* A pax record "LEN path=VALUE\n" in a pax extended header. */
static void td__pax_path(const uint8_t *p, uint64_t size, char *name)
{
    uint64_t off = 0;
    while (off < size) {
        uint64_t len = 0, i = off;
        /* LEN counts the whole record: never more than what is left (a
         * length that wrapped off + len past 2^64 sent the walk back to an
         * earlier record, forever) */
        while (i < size && p[i] >= '0' && p[i] <= '9') {
            len = len * 10 + (uint64_t)(p[i++] - '0');
            if (len > size - off)
                return;
        }
        /* ... nor less than its digits, the space and one byte (a shorter
         * one made the key/value length wrap: memcmp read past the end) */
        if (i >= size || p[i] != ' ' || len < i - off + 2)
            return;
        const uint8_t *kv = p + i + 1;
        uint64_t kvlen = off + len - (i + 1);
        if (kvlen > 6 && memcmp(kv, "path=", 5) == 0 &&
            kvlen - 6 <= TD_TAR_NAME_MAX) {
            memcpy(name, kv + 5, kvlen - 6);
            name[kvlen - 6] = '\0';
        }
        off += len;
    }
}

int td_tar_walk(const uint8_t *base, uint64_t len, td_tar_member_fn fn,
                void *user, uint64_t *errat)
{
    char name[TD_TAR_NAME_MAX + 2], longname[TD_TAR_NAME_MAX + 1] = "";
    uint64_t off = 0;
    while (off + TD_TAR_BLOCK <= len) {
        const uint8_t *h = base + off;
        uint64_t size;
        if (td__all_zero(h))
            return 0;
        if (!td__checksum_ok(h) || td__parse_octal(h + 124, 12, &size))
            goto corrupt;
        uint64_t data = off + TD_TAR_BLOCK;
        if (size > len - data)
            goto corrupt;
        char type = (char)h[156];
        if (type == 'L' || type == 'x') {
            if (type == 'L') {
                uint64_t n = size < TD_TAR_NAME_MAX ? size : TD_TAR_NAME_MAX;
                memcpy(longname, base + data, n);
                longname[n] = '\0';
            } else {
                td__pax_path(base + data, size, longname);
            }
        } else if (type == '0' || type == '\0' || type == '7') {
            if (longname[0]) {
                memcpy(name, longname, sizeof longname);
                longname[0] = '\0';
            } else if (h[345]) {
                snprintf(name, sizeof name, "%.155s/%.100s",
                         (const char *)h + 345, (const char *)h);
            } else {
                snprintf(name, sizeof name, "%.100s", (const char *)h);
            }
            int rc = fn(user, name, data, size);
            if (rc)
                return rc;
        } else {
            longname[0] = '\0';
        }
        off = data + (size + TD_TAR_BLOCK - 1) / TD_TAR_BLOCK * TD_TAR_BLOCK;
    }
    if (off == len)
        return 0;
corrupt:
    if (errat)
        *errat = off;
    return TD_E_CORRUPT;
}
