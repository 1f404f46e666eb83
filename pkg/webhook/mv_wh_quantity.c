/* mv_wh_quantity: Kubernetes quantities (the apimachinery grammar) to a whole number of bytes. */
#include "mv_webhook.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define I64_MAX 9223372036854775807ull

static int fail(char *why, size_t whylen, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(char *why, size_t whylen, int rc, const char *fmt, ...)
{
    if (why && whylen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, whylen, fmt, ap);
        va_end(ap);
    }
    return rc;
}

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* The characters apimachinery's scanner lets into a suffix before an optional signed integer. */
static int is_suffix_char(char c)
{
    return c && strchr("eEinumkKMGTP", c) != NULL;
}

/* strconv.ParseInt(s, 10, 64): optional sign, at least one digit, digits only, in range. */
static int parse_int64(const char *s, size_t len, int64_t *out)
{
    size_t i = 0;
    int neg = 0;
    if (i < len && (s[i] == '+' || s[i] == '-')) {
        neg = s[i] == '-';
        i++;
    }
    if (i == len)
        return -1;
    uint64_t v = 0;
    uint64_t lim = neg ? I64_MAX + 1 : I64_MAX;
    for (; i < len; i++) {
        if (!is_digit(s[i]))
            return -1;
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (lim - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 0;
}

/* The suffix table of apimachinery's suffixer: decimal SI first, then binary SI, then an
 * exponent (its int64 value truncated to int32, as apimachinery does). */
static int interpret_suffix(const char *s, size_t len, int64_t *pow10, unsigned *pow2)
{
    static const struct {
        const char *name;
        int p10;
        unsigned p2;
    } table[] = {
        {"", 0, 0},    {"n", -9, 0},  {"u", -6, 0},  {"m", -3, 0},  {"k", 3, 0},   {"M", 6, 0},
        {"G", 9, 0},   {"T", 12, 0},  {"P", 15, 0},  {"E", 18, 0},  {"Ki", 0, 10}, {"Mi", 0, 20},
        {"Gi", 0, 30}, {"Ti", 0, 40}, {"Pi", 0, 50}, {"Ei", 0, 60},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        if (strlen(table[i].name) == len && memcmp(table[i].name, s, len) == 0) {
            *pow10 = table[i].p10;
            *pow2 = table[i].p2;
            return 0;
        }
    }
    if (len > 1 && (s[0] == 'e' || s[0] == 'E')) {
        int64_t e;
        if (parse_int64(s + 1, len - 1, &e) != 0)
            return -1;
        *pow10 = (int32_t)(uint32_t)(uint64_t)e;
        *pow2 = 0;
        return 0;
    }
    return -1;
}

/* digits[0..n) (no leading zeros) times 2^p2, written as decimal into out (capacity n + 20);
 * returns the number of digits. */
static size_t mul_pow2(const char *digits, size_t n, unsigned p2, char *out)
{
    uint64_t m = 1ull << p2; /* p2 <= 60, so 10 * m + carry fits in 64 bits */
    size_t cap = n + 20, pos = cap;
    uint64_t carry = 0;
    for (size_t i = n; i-- > 0;) {
        uint64_t v = (uint64_t)(digits[i] - '0') * m + carry;
        out[--pos] = (char)('0' + v % 10);
        carry = v / 10;
    }
    while (carry) {
        out[--pos] = (char)('0' + carry % 10);
        carry /= 10;
    }
    size_t len = cap - pos;
    memmove(out, out + pos, len);
    return len;
}

int mv_wh_quantity_bytes(const char *s, size_t len, uint64_t *bytes, int *rounded, char *why,
                         size_t whylen)
{
    if (len == 0)
        return fail(why, whylen, -EINVAL, "empty");

    /* The scanner: [+-] digits [. digits] suffix-letters [+-] digits, anchored at both ends. */
    size_t pos = 0;
    int negative = 0;
    if (s[0] == '-' || s[0] == '+') {
        negative = s[0] == '-';
        pos++;
    }
    size_t num_start = pos;
    while (pos < len && is_digit(s[pos]))
        pos++;
    size_t num_end = pos, den_start = pos, den_end = pos;
    if (pos < len && s[pos] == '.') {
        pos++;
        den_start = pos;
        while (pos < len && is_digit(s[pos]))
            pos++;
        den_end = pos;
    }
    size_t suf_start = pos;
    while (pos < len && is_suffix_char(s[pos]))
        pos++;
    if (pos < len && (s[pos] == '+' || s[pos] == '-'))
        pos++;
    while (pos < len && is_digit(s[pos]))
        pos++;
    if (pos != len)
        return fail(why, whylen, -EINVAL, "unexpected character '%c' at offset %zu",
                    (s[pos] >= 0x20 && s[pos] < 0x7f) ? s[pos] : '?', pos);

    int64_t p10;
    unsigned p2;
    if (interpret_suffix(s + suf_start, len - suf_start, &p10, &p2) != 0)
        return fail(why, whylen, -EINVAL, "unknown suffix \"%.*s\"",
                    (int)(len - suf_start > 16 ? 16 : len - suf_start), s + suf_start);

    /* The significant digits of the number, and where the decimal point sits among them. */
    size_t nnum = num_end - num_start, nden = den_end - den_start;
    if (nnum + nden == 0)
        return fail(why, whylen, -EINVAL, "has no digits");
    char *digits = malloc(nnum + nden + 1);
    if (!digits)
        return fail(why, whylen, -ENOMEM, "out of memory");
    memcpy(digits, s + num_start, nnum);
    memcpy(digits + nnum, s + den_start, nden);
    size_t n = nnum + nden, lead = 0;
    while (lead < n && digits[lead] == '0')
        lead++;
    if (lead == n) {
        free(digits);
        return fail(why, whylen, -EINVAL, "is zero");
    }
    if (negative) {
        free(digits);
        return fail(why, whylen, -EINVAL, "is negative");
    }
    memmove(digits, digits + lead, n - lead);
    n -= lead;
    /* value = digits * 2^p2 * 10^t */
    int64_t t = p10 - (int64_t)nden;

    char *prod = malloc(n + 20);
    if (!prod) {
        free(digits);
        return fail(why, whylen, -ENOMEM, "out of memory");
    }
    size_t plen = mul_pow2(digits, n, p2, prod);
    free(digits);

    /* Whole part = the first plen + t digits (followed by t zeros when t > 0); any non-zero
     * digit after it rounds up. */
    int64_t whole_len = (int64_t)plen + t;
    uint64_t v = 0;
    int frac = 0;
    if (whole_len > 19) {
        free(prod);
        return fail(why, whylen, -ERANGE, "exceeds 2^63-1 bytes");
    }
    for (int64_t i = 0; i < whole_len; i++)
        v = v * 10 + (i < (int64_t)plen ? (uint64_t)(prod[i] - '0') : 0);
    for (size_t i = whole_len > 0 ? (size_t)whole_len : 0; i < plen; i++) {
        if (prod[i] != '0') {
            frac = 1;
            break;
        }
    }
    free(prod);
    /* 19 digits fit in 64 bits unsigned; the limit is that of int64. */
    if (v > I64_MAX || (frac && v == I64_MAX))
        return fail(why, whylen, -ERANGE, "exceeds 2^63-1 bytes");
    *bytes = v + (uint64_t)frac;
    if (rounded)
        *rounded = frac;
    return 0;
}
