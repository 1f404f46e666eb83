/* libFuzzer driver: mv_util_utf8_valid, mv_util_utf8_cut and mv_util_utf8_sanitize on arbitrary
 * bytes. The first byte picks the cut length and the output size; the rest is the text. Every
 * repaired string is valid, every cut is a prefix that stays valid when the text was. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mv_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *s = (const char *)data + 1;
    size_t len = size - 1, max = data[0];
    int valid = mv_util_utf8_valid(s, len);
    size_t cut = mv_util_utf8_cut(s, len, max);
    if (cut > len || cut > max || (len <= max && cut != len))
        abort();
    if (valid && !mv_util_utf8_valid(s, cut))
        abort();
    if (valid && max >= 3 && len > max && cut + 3 < max)
        abort(); /* a cut never drops more than one character */
    size_t outlen = 3 * len + 1;
    char *out = malloc(outlen);
    if (!out)
        return 0;
    size_t n = mv_util_utf8_sanitize(s, len, out, outlen);
    if (n >= outlen || out[n] != '\0' || !mv_util_utf8_valid(out, n))
        abort();
    if (valid && (n != len || memcmp(out, s, len) != 0))
        abort();
    size_t small = (size_t)data[0] % 16 + 1;
    n = mv_util_utf8_sanitize(s, len, out, small);
    if (n >= small || !mv_util_utf8_valid(out, n))
        abort();
    free(out);
    return 0;
}
