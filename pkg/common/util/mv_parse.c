/* mv_parse: the parsers of operator input (command-line flags and configuration values):
 * whole numbers, sizes with binary suffixes, listen addresses, file modes and groups; and
 * of the C library's and the kernel's memory settings the collector reports. */
#include "mv_util.h"

#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Shown in messages: at most this many bytes of what the operator wrote. */
#define SHOWN 64

/* Reads the decimal digits of s[0..n) into *out. Returns 0, -EINVAL (no digits, or
 * something else than a digit) or -ERANGE (above UINT64_MAX). */
static int digits_u64(const char *s, size_t n, uint64_t *out)
{
    uint64_t v = 0;
    if (n == 0)
        return -EINVAL;
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return -EINVAL;
    for (size_t i = 0; i < n; i++) {
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -ERANGE;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

/* Length of the leading run of decimal digits of s. */
static size_t digit_run(const char *s)
{
    size_t n = 0;
    while (s[n] >= '0' && s[n] <= '9')
        n++;
    return n;
}

static const struct {
    const char *suffix;
    unsigned shift;
} UNITS[] = {{"Ki", 10}, {"Mi", 20}, {"Gi", 30}};

/* Writes a byte count the way an operator would: with the largest unit that divides it. */
static void fmt_size(char *buf, size_t len, uint64_t v)
{
    for (size_t i = sizeof UNITS / sizeof UNITS[0]; i-- > 0;)
        if (v && v % (1ull << UNITS[i].shift) == 0) {
            snprintf(buf, len, "%llu%s", (unsigned long long)(v >> UNITS[i].shift),
                     UNITS[i].suffix);
            return;
        }
    snprintf(buf, len, "%llu", (unsigned long long)v);
}

/* "from MIN to MAX", or "of at least MIN" when nothing above matters; sizes with units. */
static void range_text(char *buf, size_t len, uint64_t min, uint64_t max, int size)
{
    char lo[32], hi[32];
    if (size) {
        fmt_size(lo, sizeof lo, min);
        fmt_size(hi, sizeof hi, max);
    } else {
        snprintf(lo, sizeof lo, "%llu", (unsigned long long)min);
        snprintf(hi, sizeof hi, "%llu", (unsigned long long)max);
    }
    if (max == UINT64_MAX)
        snprintf(buf, len, "of at least %s", lo);
    else
        snprintf(buf, len, "from %s to %s", lo, hi);
}

int mv_util_parse_u64(const char *text, uint64_t min, uint64_t max, uint64_t *out, char *err,
                      size_t errlen)
{
    uint64_t v;
    int rc = digits_u64(text, strlen(text), &v);
    if (rc == 0 && (v < min || v > max))
        rc = -ERANGE;
    if (rc < 0) {
        char range[96];
        range_text(range, sizeof range, min, max, 0);
        mv_util_err_set(err, errlen, "'%.*s' is %s: want a whole number %s", SHOWN, text,
                        rc == -ERANGE ? "out of range" : "not a whole number", range);
        return rc;
    }
    *out = v;
    return 0;
}

/* A plain decimal: digits with at most one '.', at least one digit, then optionally e or E,
 * an optional sign and digits. No sign in front, no hexadecimal, no inf or nan. */
static int plain_decimal(const char *s)
{
    size_t i = 0, digits = 0;
    for (; s[i] >= '0' && s[i] <= '9'; i++)
        digits++;
    if (s[i] == '.')
        for (i++; s[i] >= '0' && s[i] <= '9'; i++)
            digits++;
    if (!digits)
        return 0;
    if (s[i] == 'e' || s[i] == 'E') {
        i++;
        if (s[i] == '+' || s[i] == '-')
            i++;
        size_t n = digit_run(s + i);
        if (!n)
            return 0;
        i += n;
    }
    return s[i] == '\0';
}

int mv_util_parse_number(const char *text, double min, double max, double *out, char *err,
                         size_t errlen)
{
    int rc = -EINVAL;
    double v = 0;
    if (plain_decimal(text)) {
        char *end;
        errno = 0;
        v = strtod(text, &end);
        rc = *end || errno == ERANGE || !(v >= min && v <= max) ? -ERANGE : 0;
    }
    if (rc < 0) {
        mv_util_err_set(err, errlen, "'%.*s' is %s: want a decimal number from %g to %g", SHOWN,
                        text, rc == -ERANGE ? "out of range" : "not a decimal number", min, max);
        return rc;
    }
    *out = v;
    return 0;
}

int mv_util_parse_size(const char *text, uint64_t min, uint64_t max, uint64_t *out, char *err,
                       size_t errlen)
{
    size_t n = digit_run(text);
    const char *unit = text + n;
    unsigned shift = 0;
    int known = !*unit;
    for (size_t i = 0; !known && i < sizeof UNITS / sizeof UNITS[0]; i++)
        if (strcmp(unit, UNITS[i].suffix) == 0) {
            shift = UNITS[i].shift;
            known = 1;
        }
    char range[96];
    range_text(range, sizeof range, min, max, 1);
    uint64_t v = 0;
    int rc = known ? digits_u64(text, n, &v) : -EINVAL;
    if (rc == 0 && (v > (UINT64_MAX >> shift) || (v << shift) < min || (v << shift) > max))
        rc = -ERANGE;
    if (rc == -ERANGE) {
        mv_util_err_set(err, errlen, "'%.*s' is out of range: want a size %s", SHOWN, text, range);
        return rc;
    }
    if (rc < 0) {
        mv_util_err_set(err, errlen,
                        "'%.*s' is not a size: want bytes, or a whole number with Ki, Mi or Gi "
                        "(1Ki = 1024; decimal k, M, G are not taken), %s",
                        SHOWN, text, range);
        return rc;
    }
    *out = v << shift;
    return 0;
}

/* The accepted form of a listen address under `flags`, with examples, for messages. */
static void listen_form(char *buf, size_t len, unsigned flags)
{
    int any = (flags & MV_LISTEN_ANY_HOST) != 0, opt = (flags & MV_LISTEN_PORT_OPTIONAL) != 0;
    snprintf(buf, len,
             "want %s%s with PORT %s, IPv6 in brackets%s, e.g. %s127.0.0.1:7470 or [::1]:7470",
             any ? "[HOST]" : "HOST", opt ? "[:PORT]" : ":PORT",
             flags & MV_LISTEN_PORT_ZERO ? "0..65535 (0 = any free port)" : "1..65535",
             any ? ", no HOST = every address" : "",
             any   ? ":7470, "
             : opt ? "127.0.0.1, "
                   : "");
}

int mv_util_parse_listen(const char *text, unsigned flags, char *host, size_t hostlen,
                         uint16_t *port, char *err, size_t errlen)
{
    const char *why = NULL, *h = text, *p = NULL;
    size_t hl;
    if (text[0] == '[') {
        const char *close = strchr(text, ']');
        h = text + 1;
        hl = close ? (size_t)(close - h) : 0;
        if (!close)
            why = "an IPv6 address needs its closing bracket";
        else if (hl == 0)
            why = "nothing between the brackets";
        else if (close[1] == ':')
            p = close + 2;
        else if (close[1] || !(flags & MV_LISTEN_PORT_OPTIONAL))
            why = "a port must follow the bracketed address after a colon";
    } else {
        const char *colon = strchr(text, ':');
        hl = colon ? (size_t)(colon - text) : strlen(text);
        if (colon && strchr(colon + 1, ':'))
            why = "more than one colon: an IPv6 address goes in brackets";
        else if (colon)
            p = colon + 1;
        else if (!(flags & MV_LISTEN_PORT_OPTIONAL))
            why = !hl || digit_run(text) != hl ? "no port"
                  : flags & MV_LISTEN_ANY_HOST ? "a port alone is written with a colon, :PORT"
                                               : "a port alone needs HOST: before it";
    }
    for (size_t i = 0; !why && i < hl; i++)
        if ((unsigned char)h[i] <= ' ' || h[i] == '[' || h[i] == ']' || h[i] == 0x7f)
            why = "the host holds a space, a control character or a bracket";
    if (!why && hl == 0 && !(flags & MV_LISTEN_ANY_HOST))
        why = "no host";
    if (!why && hl >= hostlen)
        why = "the host is too long";
    uint64_t v = 0;
    if (!why && p) {
        int rc = digits_u64(p, strlen(p), &v);
        if (rc == -EINVAL)
            why = "the port is not a number";
        else if (rc < 0 || v > 65535)
            why = "the port is above 65535";
        else if (v == 0 && !(flags & MV_LISTEN_PORT_ZERO))
            why = "port 0 is not taken here";
    }
    if (why) {
        char form[200];
        listen_form(form, sizeof form, flags);
        mv_util_err_set(err, errlen, "'%.*s': %s; %s", SHOWN * 2, text, why, form);
        return -EINVAL;
    }
    memcpy(host, h, hl);
    host[hl] = '\0';
    if (p)
        *port = (uint16_t)v;
    return 0;
}

int mv_util_parse_mode(const char *text, uint32_t *out, char *err, size_t errlen)
{
    static const char form[] = "want permission bits as octal digits 0-7, 0000 to 0777, e.g. 0660";
    size_t n = strlen(text);
    int octal = n >= 1 && n <= 4;
    uint32_t v = 0;
    for (size_t i = 0; octal && i < n; i++) {
        octal = text[i] >= '0' && text[i] <= '7';
        v = v * 8 + (uint32_t)(text[i] - '0');
    }
    if (!octal) {
        mv_util_err_set(err, errlen,
                        "'%.*s' is not an octal mode: %s (symbolic modes are not taken)", SHOWN,
                        text, form);
        return -EINVAL;
    }
    if (v > 0777) {
        mv_util_err_set(err, errlen, "'%.*s' is out of range: %s (no setuid, setgid or sticky bit)",
                        SHOWN, text, form);
        return -ERANGE;
    }
    *out = v;
    return 0;
}

int mv_util_parse_group(const char *text, uint32_t *out, char *err, size_t errlen)
{
    static const char form[] = "want a group name (getent group) or a numeric gid";
    size_t n = strlen(text);
    if (n && digit_run(text) == n) {
        uint64_t v;
        int rc = digits_u64(text, n, &v);
        if (rc < 0 || v >= UINT32_MAX) { /* (gid_t)-1 means "no change" to chown */
            mv_util_err_set(err, errlen, "'%.*s' is out of range: %s from 0 to %u", SHOWN, text,
                            form, UINT32_MAX - 1);
            return -ERANGE;
        }
        *out = (uint32_t)v;
        return 0;
    }
    long sz = sysconf(_SC_GETGR_R_SIZE_MAX);
    size_t cap = sz > 0 ? (size_t)sz : 16384;
    struct group gr, *res = NULL;
    int e = ERANGE;
    char *buf = NULL;
    while (e == ERANGE && cap <= (1u << 20)) {
        char *nb = realloc(buf, cap);
        if (!nb) {
            e = ENOMEM;
            break;
        }
        buf = nb;
        e = n ? getgrnam_r(text, &gr, buf, cap, &res) : 0;
        cap *= 2;
    }
    if (e == 0 && res) {
        *out = (uint32_t)res->gr_gid;
        free(buf);
        return 0;
    }
    free(buf);
    if (e == 0 || e == ENOENT || e == ESRCH || e == EBADF || e == EPERM) {
        mv_util_err_set(err, errlen, "'%.*s' is not a group on this host: %s", SHOWN, text, form);
        return -EINVAL;
    }
    mv_util_err_set(err, errlen, "'%.*s': cannot look the group up: %s; %s", SHOWN, text,
                    strerror(e), form);
    return -e;
}

typedef int (*parse_fn)(const char *, uint64_t, uint64_t, uint64_t *, char *, size_t);

static int flag(parse_fn parse, const char *prog, const char *flag, const char *text, uint64_t min,
                uint64_t max, uint64_t *out)
{
    char err[MV_ERR_MAX];
    if (parse(text, min, max, out, err, sizeof err) < 0) {
        fprintf(stderr, "%s: %s: %s\n", prog, flag, err);
        return -1;
    }
    return 0;
}

int mv_util_flag_u64(const char *prog, const char *name, const char *text, uint64_t min,
                     uint64_t max, uint64_t *out)
{
    return flag(mv_util_parse_u64, prog, name, text, min, max, out);
}

int mv_util_flag_size(const char *prog, const char *name, const char *text, uint64_t min,
                      uint64_t max, uint64_t *out)
{
    return flag(mv_util_parse_size, prog, name, text, min, max, out);
}

int mv_util_flag_number(const char *prog, const char *name, const char *text, double min,
                        double max, double *out)
{
    char err[MV_ERR_MAX];
    if (mv_util_parse_number(text, min, max, out, err, sizeof err) < 0) {
        fprintf(stderr, "%s: %s: %s\n", prog, name, err);
        return -1;
    }
    return 0;
}

int mv_util_flag_mode(const char *prog, const char *name, const char *text, uint32_t *out)
{
    char err[MV_ERR_MAX];
    if (mv_util_parse_mode(text, out, err, sizeof err) < 0) {
        fprintf(stderr, "%s: %s: %s\n", prog, name, err);
        return -1;
    }
    return 0;
}

int mv_util_flag_group(const char *prog, const char *name, const char *text, uint32_t *out)
{
    char err[MV_ERR_MAX];
    if (mv_util_parse_group(text, out, err, sizeof err) < 0) {
        fprintf(stderr, "%s: %s: %s\n", prog, name, err);
        return -1;
    }
    return 0;
}

int mv_util_parse_tunable(const char *tunables, const char *name, char *val, size_t vallen)
{
    size_t nl = strlen(name);
    int found = 0;
    if (vallen)
        val[0] = '\0';
    for (const char *p = tunables; p && *p;) {
        const char *end = strchr(p, ':');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len > nl && memcmp(p, name, nl) == 0 && p[nl] == '=') {
            size_t vl = len - nl - 1;
            if (vl >= vallen) {
                if (vallen)
                    val[0] = '\0';
                found = -ERANGE;
            } else {
                memcpy(val, p + nl + 1, vl);
                val[vl] = '\0';
                found = 1;
            }
        }
        p = end ? end + 1 : NULL;
    }
    return found;
}

int mv_util_parse_bracketed(const char *text, char *word, size_t wordlen)
{
    const char *open = strchr(text, '[');
    const char *close = open ? strchr(open + 1, ']') : NULL;
    if (!close || close == open + 1)
        return -EINVAL;
    for (const char *c = open + 1; c < close; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '_' || *c == '+'))
            return -EINVAL;
    size_t n = (size_t)(close - open - 1);
    if (n >= wordlen)
        return -ERANGE;
    memcpy(word, open + 1, n);
    word[n] = '\0';
    return 0;
}
