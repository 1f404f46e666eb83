/* mv_expo: Prometheus text 0.0.4 / OpenMetrics 1.0 renderer and Accept negotiation. */
#include "mv_expo.h"

#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mv_log.h"

#define NAME_MAX_LEN  1024 /* longest metric family name accepted */
#define INITIAL_ALLOC 4096
#define OM_EOF        "# EOF\n"
#define OM_EOF_LEN    6

struct mv_expo {
    mv_expo_format fmt;
    char *buf;
    size_t len, alloc, cap;
    size_t fam_start;            /* offset where the current family began */
    int fail;                    /* 0, ENOSPC or ENOMEM: sticky until reset */
    int finished;                /* mv_expo_finish() was called */
    int have_family;             /* a valid family is open */
    mv_expo_type type;           /* its type */
    char base[NAME_MAX_LEN + 1]; /* sample base name (OM counters: without _total) */
    size_t base_len;
    char errmsg[160];
};

/* ---- Errors ------------------------------------------------------------------------- */

static int fail_inval(mv_expo *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int fail_inval(mv_expo *e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->errmsg, sizeof e->errmsg, fmt, ap);
    va_end(ap);
    return -EINVAL;
}

/* Drops the family being written and refuses further output. */
static void overflow(mv_expo *e, int code)
{
    if (e->fail)
        return;
    e->fail = code;
    e->len = e->fam_start;
    e->have_family = 0;
    snprintf(e->errmsg, sizeof e->errmsg, "%s",
             code == ENOMEM ? "out of memory while rendering"
                            : "exposition reached its size cap; later families dropped");
    MV_WARN("expo_truncated", "cap=%zu kept_bytes=%zu reason=%s", e->cap, e->len,
            code == ENOMEM ? "enomem" : "cap");
}

/* ---- Buffer ------------------------------------------------------------------------- */

static size_t usable(const mv_expo *e)
{
    size_t reserve = (e->fmt == MV_EXPO_OPENMETRICS && !e->finished) ? OM_EOF_LEN : 0;
    return e->cap - reserve;
}

static int ensure(mv_expo *e, size_t need_total, size_t limit)
{
    if (need_total > limit) {
        overflow(e, ENOSPC);
        return -1;
    }
    if (need_total <= e->alloc)
        return 0;
    size_t n = e->alloc ? e->alloc : INITIAL_ALLOC;
    while (n < need_total)
        n = n > e->cap / 2 ? e->cap : n * 2;
    if (n > e->cap)
        n = e->cap;
    char *p = realloc(e->buf, n);
    if (!p) {
        overflow(e, ENOMEM);
        return -1;
    }
    e->buf = p;
    e->alloc = n;
    return 0;
}

static void put(mv_expo *e, const char *s, size_t n)
{
    if (e->fail || n == 0)
        return;
    if (ensure(e, e->len + n, usable(e)) < 0)
        return;
    memcpy(e->buf + e->len, s, n);
    e->len += n;
}

static void puts_(mv_expo *e, const char *s)
{
    put(e, s, strlen(s));
}

static void putc_(mv_expo *e, char c)
{
    put(e, &c, 1);
}

/* ---- Names -------------------------------------------------------------------------- */

static int is_alpha_(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static int is_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

static int valid_name(const char *s, int label)
{
    if (!s || !*s)
        return 0;
    for (size_t i = 0; s[i]; i++) {
        unsigned char c = (unsigned char)s[i];
        int ok = is_alpha_(c) || (!label && c == ':') || (i > 0 && is_digit(c));
        if (!ok)
            return 0;
    }
    return 1;
}

size_t mv_expo_sanitize_name(const char *s, int label_name, char *out, size_t outsz)
{
    size_t n = 0;
    if (!out || outsz < 2)
        return 0;
    if (!s)
        s = "";
    if (is_digit((unsigned char)s[0]))
        out[n++] = '_';
    for (size_t i = 0; s[i] && n < outsz - 1; i++) {
        unsigned char c = (unsigned char)s[i];
        int ok = is_alpha_(c) || is_digit(c) || (!label_name && c == ':');
        out[n++] = ok ? (char)c : '_';
    }
    if (n == 0)
        out[n++] = '_';
    out[n] = '\0';
    return n;
}

static int ends_with(const char *s, size_t n, const char *suf)
{
    size_t m = strlen(suf);
    return n >= m && memcmp(s + n - m, suf, m) == 0;
}

/* ---- Escaping ----------------------------------------------------------------------- */

/* Length of the valid UTF-8 sequence at s (1..4), or 0 if the bytes are not valid UTF-8. */
static size_t utf8_len(const unsigned char *s)
{
    unsigned char c = s[0];
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        return (s[1] & 0xC0) == 0x80 ? 2 : 0;
    if (c >= 0xE0 && c <= 0xEF) {
        unsigned char lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
        if (s[1] < lo || s[1] > hi || (s[2] & 0xC0) != 0x80)
            return 0;
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        unsigned char lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
        if (s[1] < lo || s[1] > hi || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80)
            return 0;
        return 4;
    }
    return 0;
}

/* Writes s escaped: backslash and newline always, double quote when esc_quote. */
static void put_escaped(mv_expo *e, const char *str, int esc_quote)
{
    const unsigned char *s = (const unsigned char *)str;
    const unsigned char *run = s;
    while (*s) {
        unsigned char c = *s;
        const char *rep = NULL;
        size_t adv = 1;
        if (c == '\\')
            rep = "\\\\";
        else if (c == '\n')
            rep = "\\n";
        else if (c == '"' && esc_quote)
            rep = "\\\"";
        else if (c >= 0x80) {
            adv = utf8_len(s); /* reads at most up to the NUL, which fails the checks */
            if (adv == 0) {
                rep = "\xEF\xBF\xBD";
                adv = 1;
            }
        }
        if (rep) {
            put(e, (const char *)run, (size_t)(s - run));
            puts_(e, rep);
            s += adv;
            run = s;
        } else {
            s += adv;
        }
    }
    put(e, (const char *)run, (size_t)(s - run));
}

/* ---- Numbers ------------------------------------------------------------------------ */

size_t mv_expo_format_double(double v, int canonical, char *out, size_t outsz)
{
    char tmp[40], digits[24];
    int n;
    if (!out || outsz < 32)
        return 0;
    if (isnan(v))
        return (size_t)snprintf(out, outsz, "NaN");
    if (isinf(v))
        return (size_t)snprintf(out, outsz, "%s", v > 0 ? "+Inf" : "-Inf");
    if (v == 0)
        return (size_t)snprintf(out, outsz, "%s%s", signbit(v) ? "-0" : "0", canonical ? ".0" : "");
    /* Shortest round-trip digits: 15 significant digits round-trip exactly when any
     * representation of <= 15 digits does (DBL_DIG); else try 16, else 17 always works. */
    int prec0 = fabs(v) < DBL_MIN ? 0 : 14; /* subnormals carry fewer digits: search all */
    for (int prec = prec0; prec <= 16; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec, v);
        if (prec == 16 || strtod(tmp, NULL) == v)
            break;
    }
    /* tmp is [-]d.ddde[+-]xx */
    const char *p = tmp;
    int neg = 0, nd = 0;
    if (*p == '-') {
        neg = 1;
        p++;
    }
    for (; *p && *p != 'e'; p++)
        if (is_digit((unsigned char)*p))
            digits[nd++] = *p;
    int exp10 = *p == 'e' ? atoi(p + 1) : 0;
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    digits[nd] = '\0';

    /* Layout as Go's strconv.FormatFloat(v, 'g', -1, 64). */
    size_t o = 0;
    if (neg)
        out[o++] = '-';
    if (exp10 < -4 || exp10 >= 6) {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            memcpy(out + o, digits + 1, (size_t)nd - 1);
            o += (size_t)nd - 1;
        }
        n = snprintf(out + o, outsz - o, "e%c%02d", exp10 < 0 ? '-' : '+', abs(exp10));
        return o + (size_t)n;
    }
    if (exp10 < 0) {
        out[o++] = '0';
        out[o++] = '.';
        for (int i = 0; i < -exp10 - 1; i++)
            out[o++] = '0';
        memcpy(out + o, digits, (size_t)nd);
        o += (size_t)nd;
    } else {
        for (int i = 0; i <= exp10; i++)
            out[o++] = i < nd ? digits[i] : '0';
        if (nd > exp10 + 1) {
            out[o++] = '.';
            memcpy(out + o, digits + exp10 + 1, (size_t)(nd - exp10 - 1));
            o += (size_t)(nd - exp10 - 1);
        } else if (canonical) {
            out[o++] = '.';
            out[o++] = '0';
        }
    }
    out[o] = '\0';
    return o;
}

/* ---- Lifecycle ---------------------------------------------------------------------- */

mv_expo *mv_expo_create(mv_expo_format f, size_t cap)
{
    mv_expo *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    if (cap == 0)
        cap = MV_EXPO_CAP_DEFAULT;
    if (cap < MV_EXPO_CAP_MIN)
        cap = MV_EXPO_CAP_MIN;
    e->cap = cap;
    mv_expo_reset(e, f);
    return e;
}

void mv_expo_destroy(mv_expo *e)
{
    if (!e)
        return;
    free(e->buf);
    free(e);
}

void mv_expo_reset(mv_expo *e, mv_expo_format f)
{
    e->fmt = f == MV_EXPO_OPENMETRICS ? MV_EXPO_OPENMETRICS : MV_EXPO_TEXT;
    e->len = 0;
    e->fam_start = 0;
    e->fail = 0;
    e->finished = 0;
    e->have_family = 0;
    e->errmsg[0] = '\0';
}

mv_expo_format mv_expo_get_format(const mv_expo *e)
{
    return e->fmt;
}

const char *mv_expo_content_type(mv_expo_format f)
{
    return f == MV_EXPO_OPENMETRICS ? "application/openmetrics-text; version=1.0.0; charset=utf-8"
                                    : "text/plain; version=0.0.4; charset=utf-8";
}

const char *mv_expo_data(const mv_expo *e, size_t *len)
{
    if (len)
        *len = e->len;
    return e->buf ? e->buf : "";
}

int mv_expo_truncated(const mv_expo *e)
{
    return e->fail != 0;
}

const char *mv_expo_errmsg(const mv_expo *e)
{
    return e->errmsg;
}

static int fail_code(const mv_expo *e)
{
    return -e->fail;
}

/* ---- Families ----------------------------------------------------------------------- */

static const char *type_word(mv_expo_format f, mv_expo_type t)
{
    switch (t) {
    case MV_EXPO_COUNTER:
        return "counter";
    case MV_EXPO_GAUGE:
        return "gauge";
    case MV_EXPO_HISTOGRAM:
        return "histogram";
    case MV_EXPO_SUMMARY:
        return "summary";
    case MV_EXPO_UNKNOWN:
        break;
    }
    return f == MV_EXPO_OPENMETRICS ? "unknown" : "untyped";
}

static int valid_unit(const char *u)
{
    for (; *u; u++)
        if (!is_alpha_((unsigned char)*u) && !is_digit((unsigned char)*u) && *u != ':')
            return 0;
    return 1;
}

int mv_expo_family(mv_expo *e, const char *name, mv_expo_type type, const char *help,
                   const char *unit)
{
    if (e->fail)
        return fail_code(e);
    e->have_family = 0;
    if (e->finished)
        return fail_inval(e, "family %s after finish", name ? name : "(null)");
    if ((unsigned)type > MV_EXPO_UNKNOWN)
        return fail_inval(e, "family %s: unknown type %d", name ? name : "(null)", (int)type);
    if (!valid_name(name, 0) || strlen(name) > NAME_MAX_LEN)
        return fail_inval(e, "invalid metric name (want [a-zA-Z_:][a-zA-Z0-9_:]*, max %d bytes)",
                          NAME_MAX_LEN);

    size_t n = strlen(name);
    int om = e->fmt == MV_EXPO_OPENMETRICS;
    if (om && type == MV_EXPO_COUNTER && n > 6 && ends_with(name, n, "_total"))
        n -= 6;
    memcpy(e->base, name, n);
    e->base[n] = '\0';
    e->base_len = n;
    e->type = type;
    e->fam_start = e->len;

    const char *fam = e->base; /* the family name shown in metadata */
    if (!om) {
        if (help && *help) {
            puts_(e, "# HELP ");
            puts_(e, fam);
            putc_(e, ' ');
            put_escaped(e, help, 0);
            putc_(e, '\n');
        }
        puts_(e, "# TYPE ");
        puts_(e, fam);
        putc_(e, ' ');
        puts_(e, type_word(e->fmt, type));
        putc_(e, '\n');
    } else {
        puts_(e, "# TYPE ");
        puts_(e, fam);
        putc_(e, ' ');
        puts_(e, type_word(e->fmt, type));
        putc_(e, '\n');
        if (unit && *unit && valid_unit(unit)) {
            size_t ul = strlen(unit);
            if (n > ul + 1 && fam[n - ul - 1] == '_' && memcmp(fam + n - ul, unit, ul) == 0) {
                puts_(e, "# UNIT ");
                puts_(e, fam);
                putc_(e, ' ');
                puts_(e, unit);
                putc_(e, '\n');
            }
        }
        if (help && *help) {
            puts_(e, "# HELP ");
            puts_(e, fam);
            putc_(e, ' ');
            put_escaped(e, help, 1);
            putc_(e, '\n');
        }
    }
    if (e->fail)
        return fail_code(e);
    e->have_family = 1;
    return 0;
}

/* ---- Samples ------------------------------------------------------------------------ */

static int suffix_allowed(mv_expo_type t, const char *suffix)
{
    if (!suffix)
        return t != MV_EXPO_HISTOGRAM;
    int created = strcmp(suffix, "_created") == 0;
    switch (t) {
    case MV_EXPO_COUNTER:
        return created;
    case MV_EXPO_HISTOGRAM:
        return created || !strcmp(suffix, "_bucket") || !strcmp(suffix, "_sum") ||
               !strcmp(suffix, "_count");
    case MV_EXPO_SUMMARY:
        return created || !strcmp(suffix, "_sum") || !strcmp(suffix, "_count");
    default:
        return 0;
    }
}

static const mv_expo_label *label_at(const mv_expo_label *a, size_t na, const mv_expo_label *b,
                                     size_t i)
{
    return i < na ? &a[i] : &b[i - na];
}

static int check_labels(mv_expo *e, const mv_expo_label *a, size_t na, const mv_expo_label *b,
                        size_t nb, const char *extra)
{
    if ((na && !a) || (nb && !b))
        return fail_inval(e, "%s: label array is NULL", e->base);
    size_t n = na + nb;
    for (size_t i = 0; i < n; i++) {
        const char *ni = label_at(a, na, b, i)->name;
        if (!valid_name(ni, 1))
            return fail_inval(e, "%s: invalid label name (want [a-zA-Z_][a-zA-Z0-9_]*)", e->base);
        if (extra && !strcmp(ni, extra))
            return fail_inval(e, "%s: label %s given twice", e->base, ni);
        for (size_t j = i + 1; j < n; j++)
            if (!strcmp(ni, label_at(a, na, b, j)->name))
                return fail_inval(e, "%s: label %s given twice", e->base, ni);
    }
    if (extra && !valid_name(extra, 1))
        return fail_inval(e, "%s: invalid extra label name", e->base);
    return 0;
}

static void put_label(mv_expo *e, const char *name, const char *value, int *first)
{
    putc_(e, *first ? '{' : ',');
    *first = 0;
    puts_(e, name);
    puts_(e, "=\"");
    put_escaped(e, value ? value : "", 1);
    putc_(e, '"');
}

static void put_ts(mv_expo *e, int64_t ts_ms)
{
    char tmp[48];
    if (ts_ms == MV_EXPO_NO_TS)
        return;
    if (e->fmt == MV_EXPO_TEXT) {
        snprintf(tmp, sizeof tmp, " %" PRId64, ts_ms);
    } else {
        uint64_t mag = ts_ms < 0 ? (uint64_t)(-(ts_ms + 1)) + 1 : (uint64_t)ts_ms;
        uint64_t sec = mag / 1000, ms = mag % 1000;
        int w = snprintf(tmp, sizeof tmp, " %s%" PRIu64, ts_ms < 0 ? "-" : "", sec);
        if (ms) {
            snprintf(tmp + w, sizeof tmp - (size_t)w, ".%03" PRIu64, ms);
            size_t l = strlen(tmp);
            while (tmp[l - 1] == '0')
                tmp[--l] = '\0';
        }
    }
    puts_(e, tmp);
}

static int sample_str(mv_expo *e, const char *suffix, const mv_expo_label *a, size_t na,
                      const mv_expo_label *b, size_t nb, const char *extra_name, double extra_value,
                      const char *val, int64_t ts_ms)
{
    if (e->fail)
        return fail_code(e);
    if (!e->have_family)
        return fail_inval(e, "sample without a valid family (call mv_expo_family first)");
    if (!suffix_allowed(e->type, suffix))
        return fail_inval(e, "%s: suffix %s not allowed for type %s", e->base,
                          suffix ? suffix : "(none)", type_word(e->fmt, e->type));
    int om = e->fmt == MV_EXPO_OPENMETRICS;
    if (suffix && !strcmp(suffix, "_created") && !om)
        return 0; /* text 0.0.4 has no created samples */
    int rc = check_labels(e, a, na, b, nb, extra_name);
    if (rc < 0)
        return rc;

    put(e, e->base, e->base_len);
    if (suffix)
        puts_(e, suffix);
    else if (om && e->type == MV_EXPO_COUNTER)
        puts_(e, "_total");
    int first = 1;
    for (size_t i = 0; i < na + nb; i++) {
        const mv_expo_label *l = label_at(a, na, b, i);
        put_label(e, l->name, l->value, &first);
    }
    if (extra_name) {
        char num[40];
        mv_expo_format_double(extra_value, om, num, sizeof num);
        put_label(e, extra_name, num, &first);
    }
    if (!first)
        putc_(e, '}');
    putc_(e, ' ');
    puts_(e, val);
    put_ts(e, ts_ms);
    putc_(e, '\n');
    return e->fail ? fail_code(e) : 0;
}

int mv_expo_sample(mv_expo *e, const char *suffix, const mv_expo_label *a, size_t na,
                   const mv_expo_label *b, size_t nb, const char *extra_name, double extra_value,
                   double value, int64_t ts_ms)
{
    char num[40];
    mv_expo_format_double(value, e->fmt == MV_EXPO_OPENMETRICS, num, sizeof num);
    return sample_str(e, suffix, a, na, b, nb, extra_name, extra_value, num, ts_ms);
}

int mv_expo_sample_u64(mv_expo *e, const char *suffix, const mv_expo_label *a, size_t na,
                       const mv_expo_label *b, size_t nb, const char *extra_name,
                       double extra_value, uint64_t value, int64_t ts_ms)
{
    char num[32];
    snprintf(num, sizeof num, "%" PRIu64, value);
    return sample_str(e, suffix, a, na, b, nb, extra_name, extra_value, num, ts_ms);
}

int mv_expo_sample_i64(mv_expo *e, const char *suffix, const mv_expo_label *a, size_t na,
                       const mv_expo_label *b, size_t nb, const char *extra_name,
                       double extra_value, int64_t value, int64_t ts_ms)
{
    char num[32];
    snprintf(num, sizeof num, "%" PRId64, value);
    return sample_str(e, suffix, a, na, b, nb, extra_name, extra_value, num, ts_ms);
}

int mv_expo_finish(mv_expo *e)
{
    if (e->finished)
        return 0;
    e->have_family = 0;
    if (e->fmt == MV_EXPO_OPENMETRICS) {
        /* The reserve guarantees room, even after a truncation. */
        if (ensure(e, e->len + OM_EOF_LEN, e->cap) < 0)
            return fail_code(e);
        memcpy(e->buf + e->len, OM_EOF, OM_EOF_LEN);
        e->len += OM_EOF_LEN;
    }
    e->finished = 1;
    return 0;
}

/* ---- Accept negotiation ------------------------------------------------------------- */

typedef struct {
    const char *p, *end;
} cursor;

static int lc(int c)
{
    return (c >= 'A' && c <= 'Z') ? c + 32 : c;
}

static int tok_eq(const char *s, size_t n, const char *lit)
{
    size_t m = strlen(lit);
    if (n != m)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (lc((unsigned char)s[i]) != lit[i])
            return 0;
    return 1;
}

static void skip_ows(cursor *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t'))
        c->p++;
}

/* Token characters: anything but separators, whitespace and controls. */
static int is_tchar(unsigned char ch)
{
    return ch > 0x20 && ch < 0x7F && !strchr("()<>@,;:\\\"/[]?={}", ch);
}

static size_t read_token(cursor *c, const char **start)
{
    *start = c->p;
    while (c->p < c->end && is_tchar((unsigned char)*c->p))
        c->p++;
    return (size_t)(c->p - *start);
}

/* Reads a token or quoted-string value into out (truncated to outsz-1, flagged by *long_). */
static void read_value(cursor *c, char *out, size_t outsz, int *too_long)
{
    size_t n = 0;
    *too_long = 0;
    if (c->p < c->end && *c->p == '"') {
        c->p++;
        while (c->p < c->end && *c->p != '"') {
            if (*c->p == '\\' && c->p + 1 < c->end)
                c->p++;
            if (n < outsz - 1)
                out[n++] = *c->p;
            else
                *too_long = 1;
            c->p++;
        }
        if (c->p < c->end)
            c->p++; /* closing quote */
    } else {
        const char *s;
        size_t len = read_token(c, &s);
        if (len > outsz - 1) {
            *too_long = 1;
            len = outsz - 1;
        }
        memcpy(out, s, len);
        n = len;
    }
    out[n] = '\0';
}

/* Parses an HTTP qvalue ("0", "0.5", "1.000"); returns -1 if malformed. */
static double parse_q(const char *s)
{
    if (s[0] != '0' && s[0] != '1')
        return -1;
    double q = s[0] - '0', scale = 0.1;
    const char *p = s + 1;
    if (*p == '.') {
        p++;
        for (int i = 0; *p && i < 3; i++, p++) {
            if (!is_digit((unsigned char)*p))
                return -1;
            q += (*p - '0') * scale;
            scale /= 10;
        }
    }
    if (*p)
        return -1;
    return q > 1 ? 1 : q;
}

typedef struct {
    double q;
    int spec; /* -1: no range matched */
} fmt_pref;

static void offer(fmt_pref *f, int spec, double q)
{
    if (spec > f->spec || (spec == f->spec && q > f->q)) {
        f->spec = spec;
        f->q = q;
    }
}

mv_expo_format mv_expo_negotiate(const char *accept)
{
    fmt_pref text = {0, -1}, om = {0, -1};
    if (!accept)
        return MV_EXPO_TEXT;
    cursor c = {accept, accept + strlen(accept)};
    while (c.p < c.end) {
        const char *type, *sub = "";
        size_t tl, sl = 0;
        skip_ows(&c);
        tl = read_token(&c, &type);
        if (c.p < c.end && *c.p == '/') {
            c.p++;
            sl = read_token(&c, &sub);
        }
        int ok = tl > 0 && sl > 0;
        double q = 1;
        char version[16] = "";
        int has_version = 0;
        for (;;) {
            skip_ows(&c);
            if (c.p >= c.end || *c.p != ';')
                break;
            c.p++;
            skip_ows(&c);
            const char *pn;
            size_t pl = read_token(&c, &pn);
            char val[16];
            int too_long = 0;
            val[0] = '\0';
            skip_ows(&c);
            if (c.p < c.end && *c.p == '=') {
                c.p++;
                skip_ows(&c);
                read_value(&c, val, sizeof val, &too_long);
            }
            if (tok_eq(pn, pl, "q")) {
                q = too_long ? -1 : parse_q(val);
                if (q < 0)
                    ok = 0;
            } else if (tok_eq(pn, pl, "version")) {
                has_version = 1;
                if (too_long)
                    snprintf(version, sizeof version, "?");
                else
                    snprintf(version, sizeof version, "%s", val);
            }
        }
        /* Skip anything unparsed up to the next range. */
        while (c.p < c.end && *c.p != ',') {
            c.p++;
            ok = 0;
        }
        if (c.p < c.end)
            c.p++;
        if (!ok)
            continue;
        int exact = has_version ? 3 : 2;
        if (tok_eq(type, tl, "*") && tok_eq(sub, sl, "*")) {
            offer(&text, 0, q);
            offer(&om, 0, q);
        } else if (tok_eq(type, tl, "text")) {
            if (tok_eq(sub, sl, "*"))
                offer(&text, 1, q);
            else if (tok_eq(sub, sl, "plain") && (!has_version || !strcmp(version, "0.0.4")))
                offer(&text, exact, q);
        } else if (tok_eq(type, tl, "application")) {
            if (tok_eq(sub, sl, "*"))
                offer(&om, 1, q);
            else if (tok_eq(sub, sl, "openmetrics-text") &&
                     (!has_version || !strcmp(version, "1.0.0")))
                offer(&om, exact, q);
        }
    }
    double qt = text.spec < 0 ? 0 : text.q, qo = om.spec < 0 ? 0 : om.q;
    return (qo > 0 && qo > qt) ? MV_EXPO_OPENMETRICS : MV_EXPO_TEXT;
}
