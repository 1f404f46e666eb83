/* mv_utf8: checks, cuts and repairs UTF-8 (RFC 3629) before a client's bytes are echoed. */
#include <stdlib.h>
#include <string.h>

#include "mv_util.h"

/* The length of the valid UTF-8 sequence at s[0..len) (1..4), or 0 when s starts with an
 * invalid, overlong, surrogate, out-of-range or truncated sequence. */
static size_t seq_len(const unsigned char *s, size_t len)
{
    unsigned char c = s[0];
    if (c < 0x80)
        return 1;
    size_t n;
    unsigned char lo = 0x80, hi = 0xBF; /* the allowed range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        if (c == 0xE0)
            lo = 0xA0; /* overlong */
        else if (c == 0xED)
            hi = 0x9F; /* UTF-16 surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        if (c == 0xF0)
            lo = 0x90; /* overlong */
        else if (c == 0xF4)
            hi = 0x8F; /* above U+10FFFF */
    } else {
        return 0;
    }
    if (len < n || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    return n;
}

size_t mv_util_utf8_char_len(const char *s, size_t len)
{
    return len ? seq_len((const unsigned char *)s, len) : 0;
}

int mv_util_utf8_valid(const char *s, size_t len)
{
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < len;) {
        size_t n = seq_len(p + i, len - i);
        if (!n)
            return 0;
        i += n;
    }
    return 1;
}

size_t mv_util_utf8_cut(const char *s, size_t len, size_t max)
{
    if (len <= max)
        return len;
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < max) {
        size_t n = seq_len(p + i, len - i);
        if (!n)
            n = 1; /* an invalid byte is one unit of its own */
        if (i + n > max)
            break;
        i += n;
    }
    return i;
}

size_t mv_util_utf8_sanitize(const char *in, size_t len, char *out, size_t outlen)
{
    static const char repl[] = "\xEF\xBF\xBD"; /* U+FFFD */
    if (!outlen)
        return 0;
    const unsigned char *p = (const unsigned char *)in;
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        size_t n = seq_len(p + i, len - i);
        const char *src = n ? in + i : repl;
        size_t w = n ? n : 3;
        if (o + w > outlen - 1)
            break;
        memcpy(out + o, src, w);
        o += w;
        i += n ? n : 1;
    }
    out[o] = '\0';
    return o;
}

char *mv_util_utf8_dup(const char *in, size_t len)
{
    if (len > ((size_t)-1 - 1) / 3)
        return NULL;
    char *out = malloc(3 * len + 1);
    if (out)
        mv_util_utf8_sanitize(in, len, out, 3 * len + 1);
    return out;
}
