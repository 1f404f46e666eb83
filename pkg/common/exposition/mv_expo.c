/* mv_expo: Prometheus text 0.0.4 / OpenMetrics 1.0 renderer and Accept negotiation (the
 * protobuf format's encoding is in mv_expo_pb.c). */
#include "mv_expo_internal.h"

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
    size_t room_end;             /* len may grow to this without a check: min(alloc, usable) */
    size_t fam_start;            /* offset where the current family began */
    int fail;                    /* 0, ENOSPC or ENOMEM: sticky until reset */
    int finished;                /* mv_expo_finish() was called */
    int have_family;             /* a valid family is open */
    mv_expo_type type;           /* its type */
    char base[NAME_MAX_LEN + 1]; /* sample base name (OM counters: without _total) */
    size_t base_len;
    char errmsg[160];
    mv_expo__pb *pb;   /* MV_EXPO_PROTOBUF: the family being built (created on first use) */
    int pb_open;       /* a protobuf family is open in pb */
    int32_t nh_schema; /* mv_expo_set_native */
    uint32_t nh_max;
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
    e->room_end = 0;
    snprintf(e->errmsg, sizeof e->errmsg, "%s",
             code == ENOMEM ? "out of memory while rendering"
                            : "exposition reached its size cap; later families dropped");
    MV_WARN("expo.truncated", "cap=%zu kept_bytes=%zu reason=%s", e->cap, e->len,
            code == ENOMEM ? "enomem" : "cap");
}

/* ---- Buffer ------------------------------------------------------------------------- */

static size_t usable(const mv_expo *e)
{
    size_t reserve = (e->fmt == MV_EXPO_OPENMETRICS && !e->finished) ? OM_EOF_LEN : 0;
    return e->cap - reserve;
}

/* Recomputes room_end after the buffer, the format, the finish flag or the failure changed. */
static void update_room(mv_expo *e)
{
    size_t u = usable(e);
    e->room_end = e->fail ? 0 : (e->alloc < u ? e->alloc : u);
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
    update_room(e);
    return 0;
}

static void put_slow(mv_expo *e, const char *s, size_t n)
{
    if (e->fail || n == 0)
        return;
    if (ensure(e, e->len + n, usable(e)) < 0)
        return;
    memcpy(e->buf + e->len, s, n);
    e->len += n;
}

static inline void put(mv_expo *e, const char *s, size_t n)
{
    if (e->len + n <= e->room_end) {
        memcpy(e->buf + e->len, s, n);
        e->len += n;
        return;
    }
    put_slow(e, s, n);
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

static int valid_name(const char *s, int label)
{
    if (!s || !*s)
        return 0;
    for (size_t i = 0; s[i]; i++) {
        unsigned char c = (unsigned char)s[i];
        int ok = is_alpha_(c) || (!label && c == ':') || (i > 0 && expo_is_digit(c));
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
    if (expo_is_digit((unsigned char)s[0]))
        out[n++] = '_';
    for (size_t i = 0; s[i] && n < outsz - 1; i++) {
        unsigned char c = (unsigned char)s[i];
        int ok = is_alpha_(c) || expo_is_digit(c) || (!label_name && c == ':');
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

/* clang-format off */
/* Bytes the escaper must look at: 1 backslash or newline, 2 double quote, 4 non-ASCII. */
#define C16(x) x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x
static const unsigned char esc_class[256] = {
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, /* 0x00: newline */
    C16(0),                                         /* 0x10 */
    0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 0x20: " */
    C16(0), C16(0),                                 /* 0x30, 0x40 */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, /* 0x50: backslash */
    C16(0), C16(0),                                 /* 0x60, 0x70 */
    C16(4), C16(4), C16(4), C16(4), C16(4), C16(4), C16(4), C16(4), /* 0x80..0xFF */
};
#undef C16
/* clang-format on */

/* Writes the n bytes at str (NUL-terminated there) escaped: backslash and newline always,
 * double quote when esc_quote, invalid UTF-8 as U+FFFD. Clean runs are copied whole. */
static void put_escaped_n(mv_expo *e, const char *str, size_t n, int esc_quote)
{
    const unsigned char *s = (const unsigned char *)str, *end = s + n;
    unsigned mask = esc_quote ? 7u : 5u;
    while (s < end) {
        const unsigned char *run = s;
        while (s < end && !(esc_class[*s] & mask))
            s++;
        put(e, (const char *)run, (size_t)(s - run));
        if (s == end)
            break;
        unsigned char c = *s;
        if (c == '\\') {
            put(e, "\\\\", 2);
            s++;
        } else if (c == '\n') {
            put(e, "\\n", 2);
            s++;
        } else if (c == '"') {
            put(e, "\\\"", 2);
            s++;
        } else {
            size_t adv = utf8_len(s); /* reads at most up to the NUL, which fails the checks */
            if (adv == 0) {
                put(e, "\xEF\xBF\xBD", 3);
                adv = 1;
            } else {
                put(e, (const char *)s, adv);
            }
            s += adv;
        }
    }
}

static void put_escaped(mv_expo *e, const char *str, int esc_quote)
{
    put_escaped_n(e, str, strlen(str), esc_quote);
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
    e->nh_schema = 6;
    e->nh_max = MV_EXPO_NH_MAX_BUCKETS;
    mv_expo_reset(e, f);
    return e;
}

void mv_expo_set_native(mv_expo *e, int32_t schema, uint32_t max_buckets)
{
    e->nh_schema = schema;
    e->nh_max = max_buckets;
    if (e->pb)
        mv_expo__pb_native(e->pb, schema, max_buckets);
}

/* Ends the open protobuf family: its delimited bytes go to the body (or it is dropped whole
 * at the cap). */
static void pb_end_family(mv_expo *e)
{
    if (!e->pb_open)
        return;
    e->pb_open = 0;
    const char *d;
    size_t n;
    int rc = mv_expo__pb_end(e->pb, &d, &n);
    if (rc == 0) {
        e->fam_start = e->len;
        put(e, d, n);
    } else {
        overflow(e, -rc);
    }
}

void mv_expo_destroy(mv_expo *e)
{
    if (!e)
        return;
    free(e->buf);
    mv_expo__pb_destroy(e->pb);
    free(e);
}

void mv_expo_reset(mv_expo *e, mv_expo_format f)
{
    e->fmt = f == MV_EXPO_OPENMETRICS || f == MV_EXPO_PROTOBUF ? f : MV_EXPO_TEXT;
    e->pb_open = 0;
    e->len = 0;
    e->fam_start = 0;
    e->fail = 0;
    e->finished = 0;
    e->have_family = 0;
    e->errmsg[0] = '\0';
    update_room(e);
}

mv_expo_format mv_expo_get_format(const mv_expo *e)
{
    return e->fmt;
}

const char *mv_expo_content_type(mv_expo_format f)
{
    if (f == MV_EXPO_PROTOBUF)
        return "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; "
               "encoding=delimited";
    return f == MV_EXPO_OPENMETRICS ? "application/openmetrics-text; version=1.0.0; charset=utf-8"
                                    : "text/plain; version=0.0.4; charset=utf-8";
}

const char *mv_expo_data(const mv_expo *e, size_t *len)
{
    if (len)
        *len = e->len;
    return e->buf ? e->buf : "";
}

char *mv_expo_copy(const mv_expo *e, size_t *len)
{
    if (mv_expo_truncated(e))
        return NULL;
    const char *d = mv_expo_data(e, len);
    char *out = malloc(*len ? *len : 1);
    if (out)
        memcpy(out, d, *len);
    return out;
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
    case MV_EXPO_GAUGE_HISTOGRAM:
        return "gaugehistogram";
    case MV_EXPO_UNKNOWN:
        break;
    }
    return f == MV_EXPO_OPENMETRICS ? "unknown" : "untyped";
}

static int valid_unit(const char *u)
{
    for (; *u; u++)
        if (!is_alpha_((unsigned char)*u) && !expo_is_digit((unsigned char)*u) && *u != ':')
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
    if ((unsigned)type > MV_EXPO_GAUGE_HISTOGRAM)
        return fail_inval(e, "family %s: unknown type %d", name ? name : "(null)", (int)type);
    if (type == MV_EXPO_GAUGE_HISTOGRAM && e->fmt != MV_EXPO_PROTOBUF)
        return fail_inval(e, "family %s: gauge histograms exist in the protobuf format only",
                          name ? name : "(null)");
    if (!valid_name(name, 0) || strlen(name) > NAME_MAX_LEN)
        return fail_inval(e, "invalid metric name (want [a-zA-Z_:][a-zA-Z0-9_:]*, max %d bytes)",
                          NAME_MAX_LEN);

    size_t n = strlen(name);
    if (e->fmt == MV_EXPO_PROTOBUF) {
        pb_end_family(e);
        if (e->fail)
            return fail_code(e);
        if (!e->pb) {
            e->pb = mv_expo__pb_create();
            if (!e->pb) {
                overflow(e, ENOMEM);
                return fail_code(e);
            }
            mv_expo__pb_native(e->pb, e->nh_schema, e->nh_max);
        }
        memcpy(e->base, name, n + 1);
        e->base_len = n;
        e->type = type;
        e->fam_start = e->len;
        mv_expo__pb_begin(e->pb, name, type, help, unit, e->cap - e->len);
        e->pb_open = 1;
        e->have_family = 1;
        return 0;
    }
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
    if (t == MV_EXPO_GAUGE_HISTOGRAM)
        return 0; /* its series are written by mv_expo_native */
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

/* ---- Fast label validation ---------------------------------------------------------- */

/* Label sets up to this size (with the extra label) take the hashed duplicate check. */
#define FAST_LABELS 64

/* clang-format off */
/* Label name bytes: 1 may start a name ([a-zA-Z_]), 2 may continue one ([a-zA-Z0-9_]). */
#define Z16 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
static const unsigned char label_class[256] = {
    Z16, Z16, Z16,                                  /* 0x00..0x2F */
    2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, /* 0x30: digits */
    0, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, /* 0x40: A..O */
    3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 0, 0, 0, 0, 3, /* 0x50: P..Z, _ */
    0, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, /* 0x60: a..o */
    3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 0, 0, 0, 0, 0, /* 0x70: p..z */
    Z16, Z16, Z16, Z16, Z16, Z16, Z16, Z16,         /* 0x80..0xFF */
};
#undef Z16
/* clang-format on */

/* Length of s if it is a valid label name, else 0; *h gets a cheap key for the duplicate
 * set (length and a few bytes: equal names give equal keys, the rest is compared). */
static size_t scan_label_name(const char *str, uint64_t *h)
{
    const unsigned char *s = (const unsigned char *)str;
    if (!s || !(label_class[s[0]] & 1))
        return 0;
    unsigned ok = 2;
    size_t i = 1;
    for (; s[i]; i++)
        ok &= label_class[s[i]];
    if (!ok)
        return 0;
    uint64_t k = (uint64_t)i | (uint64_t)s[0] << 16 | (uint64_t)s[i - 1] << 24 |
                 (uint64_t)s[i / 2] << 32 | (uint64_t)s[i / 3] << 40;
    *h = k * 0x9E3779B97F4A7C15ull;
    return i;
}

/* Accepts the label names of a sample (a, b, then extra) in one linear pass: each name is
 * validated and hashed into a 256-bit set; only names whose bit is already set are compared
 * with the earlier names. Fills lens[] (the name lengths, extra last). Returns 1 when all
 * names are valid and distinct, 0 when check_labels() must decide (and say what is wrong). */
static int check_labels_fast(const mv_expo_label *a, size_t na, const mv_expo_label *b, size_t nb,
                             const char *extra, size_t *lens)
{
    size_t n = na + nb;
    if (n >= FAST_LABELS || (na && !a) || (nb && !b))
        return 0;
    uint64_t seen[4] = {0, 0, 0, 0}, keys[FAST_LABELS];
    const char *names[FAST_LABELS];
    size_t total = n + (extra != NULL);
    for (size_t i = 0; i < total; i++) {
        const char *nm = i < na ? a[i].name : i < n ? b[i - na].name : extra;
        uint64_t h = 0;
        size_t len = scan_label_name(nm, &h);
        if (len == 0)
            return 0;
        unsigned slot = (unsigned)(h >> 56);
        uint64_t bit = 1ull << (slot & 63);
        if (seen[slot >> 6] & bit) {
            for (size_t j = 0; j < i; j++)
                if (keys[j] == h && lens[j] == len && !memcmp(names[j], nm, len))
                    return 0;
        }
        seen[slot >> 6] |= bit;
        keys[i] = h;
        names[i] = nm;
        lens[i] = len;
    }
    return 1;
}

/* Writes the n bytes at str escaped like put_escaped_n() to o, which has room for 3n
 * bytes; returns the end. */
static char *escape_to(char *o, const char *str, size_t n)
{
    const unsigned char *s = (const unsigned char *)str, *end = s + n;
    while (s < end) {
        const unsigned char *run = s;
        while (s < end && !esc_class[*s])
            s++;
        memcpy(o, run, (size_t)(s - run));
        o += s - run;
        if (s == end)
            break;
        unsigned char c = *s;
        if (c < 0x80) {
            *o++ = '\\';
            *o++ = c == '\n' ? 'n' : (char)c;
            s++;
        } else {
            size_t adv = utf8_len(s); /* reads at most up to the NUL, which fails the checks */
            if (adv == 0) {
                memcpy(o, "\xEF\xBF\xBD", 3);
                o += 3;
                adv = 1;
            } else {
                memcpy(o, s, adv);
                o += adv;
            }
            s += adv;
        }
    }
    return o;
}

static void put_label(mv_expo *e, const char *name, size_t name_len, const char *value,
                      size_t value_len, int *first)
{
    char sep = *first ? '{' : ',';
    *first = 0;
    /* Direct write when the worst case (every value byte escaped to 3) fits. */
    if (value_len <= SIZE_MAX / 4 && e->len + name_len + 4 + 3 * value_len <= e->room_end) {
        char *o = e->buf + e->len;
        *o++ = sep;
        memcpy(o, name, name_len);
        o += name_len;
        *o++ = '=';
        *o++ = '"';
        o = escape_to(o, value, value_len);
        *o++ = '"';
        e->len = (size_t)(o - e->buf);
        return;
    }
    put(e, &sep, 1);
    put(e, name, name_len);
    put(e, "=\"", 2);
    put_escaped_n(e, value, value_len, 1);
    put(e, "\"", 1);
}

/* Formats " <timestamp>" for the format into out (48 bytes); returns the length. */
static size_t fmt_ts(mv_expo_format f, int64_t ts_ms, char *out)
{
    out[0] = ' ';
    if (f == MV_EXPO_TEXT)
        return 1 + mv_expo__fmt_i64(ts_ms, out + 1);
    uint64_t mag = ts_ms < 0 ? (uint64_t)(-(ts_ms + 1)) + 1 : (uint64_t)ts_ms;
    uint64_t sec = mag / 1000, ms = mag % 1000;
    size_t o = 1;
    if (ts_ms < 0)
        out[o++] = '-';
    o += mv_expo_format_u64(sec, out + o);
    if (ms) {
        out[o++] = '.';
        out[o++] = (char)('0' + ms / 100);
        out[o++] = (char)('0' + ms / 10 % 10);
        out[o++] = (char)('0' + ms % 10);
        while (out[o - 1] == '0')
            o--;
    }
    return o;
}

static int sample_str(mv_expo *e, const char *suffix, const mv_expo_label *a, size_t na,
                      const mv_expo_label *b, size_t nb, const char *extra_name, double extra_value,
                      const char *val, size_t val_len, int64_t ts_ms)
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
    size_t lens[FAST_LABELS];
    int fast = check_labels_fast(a, na, b, nb, extra_name, lens);
    if (!fast) {
        int rc = check_labels(e, a, na, b, nb, extra_name);
        if (rc < 0)
            return rc;
    }

    put(e, e->base, e->base_len);
    if (suffix)
        puts_(e, suffix);
    else if (om && e->type == MV_EXPO_COUNTER)
        put(e, "_total", 6);
    int first = 1;
    size_t n = na + nb;
    for (size_t i = 0; i < n; i++) {
        const mv_expo_label *l = label_at(a, na, b, i);
        const char *v = l->value ? l->value : "";
        put_label(e, l->name, fast ? lens[i] : strlen(l->name), v, strlen(v), &first);
    }
    if (extra_name) {
        char num[40];
        size_t nl = mv_expo_format_double(extra_value, om, num, sizeof num);
        put_label(e, extra_name, fast ? lens[n] : strlen(extra_name), num, nl, &first);
    }
    char tail[96];
    size_t t = 0;
    if (!first)
        tail[t++] = '}';
    tail[t++] = ' ';
    put(e, tail, t);
    put(e, val, val_len);
    t = ts_ms == MV_EXPO_NO_TS ? 0 : fmt_ts(e->fmt, ts_ms, tail);
    tail[t++] = '\n';
    put(e, tail, t);
    return e->fail ? fail_code(e) : 0;
}

/* A protobuf sample: the checks of sample_str, then the family builder. */
static int sample_pb(mv_expo *e, const char *suffix, const mv_expo_label *a, size_t na,
                     const mv_expo_label *b, size_t nb, const char *extra_name, double extra_value,
                     double v, uint64_t u, int is_u, int64_t ts_ms)
{
    if (e->fail)
        return fail_code(e);
    if (!e->have_family)
        return fail_inval(e, "sample without a valid family (call mv_expo_family first)");
    if (!suffix_allowed(e->type, suffix))
        return fail_inval(e, "%s: suffix %s not allowed for type %s", e->base,
                          suffix ? suffix : "(none)", type_word(e->fmt, e->type));
    size_t lens[FAST_LABELS];
    if (!check_labels_fast(a, na, b, nb, extra_name, lens)) {
        int rc = check_labels(e, a, na, b, nb, extra_name);
        if (rc < 0)
            return rc;
    }
    int rc =
        mv_expo__pb_sample(e->pb, suffix, a, na, b, nb, extra_name, extra_value, v, u, is_u, ts_ms);
    if (rc < 0) {
        e->pb_open = 0;
        overflow(e, -rc);
        return fail_code(e);
    }
    return 0;
}

int mv_expo_sample(mv_expo *e, const char *suffix, const mv_expo_label *a, size_t na,
                   const mv_expo_label *b, size_t nb, const char *extra_name, double extra_value,
                   double value, int64_t ts_ms)
{
    if (e->fmt == MV_EXPO_PROTOBUF)
        return sample_pb(e, suffix, a, na, b, nb, extra_name, extra_value, value, 0, 0, ts_ms);
    char num[40];
    size_t n = mv_expo_format_double(value, e->fmt == MV_EXPO_OPENMETRICS, num, sizeof num);
    return sample_str(e, suffix, a, na, b, nb, extra_name, extra_value, num, n, ts_ms);
}

int mv_expo_sample_u64(mv_expo *e, const char *suffix, const mv_expo_label *a, size_t na,
                       const mv_expo_label *b, size_t nb, const char *extra_name,
                       double extra_value, uint64_t value, int64_t ts_ms)
{
    if (e->fmt == MV_EXPO_PROTOBUF)
        return sample_pb(e, suffix, a, na, b, nb, extra_name, extra_value, 0, value, 1, ts_ms);
    char num[32];
    size_t n = mv_expo_format_u64(value, num);
    return sample_str(e, suffix, a, na, b, nb, extra_name, extra_value, num, n, ts_ms);
}

int mv_expo_sample_i64(mv_expo *e, const char *suffix, const mv_expo_label *a, size_t na,
                       const mv_expo_label *b, size_t nb, const char *extra_name,
                       double extra_value, int64_t value, int64_t ts_ms)
{
    if (e->fmt == MV_EXPO_PROTOBUF)
        return sample_pb(e, suffix, a, na, b, nb, extra_name, extra_value, (double)value, 0, 0,
                         ts_ms);
    char num[32];
    size_t n = mv_expo__fmt_i64(value, num);
    return sample_str(e, suffix, a, na, b, nb, extra_name, extra_value, num, n, ts_ms);
}

int mv_expo_finish(mv_expo *e)
{
    if (e->finished)
        return 0;
    e->have_family = 0;
    if (e->fmt == MV_EXPO_PROTOBUF)
        pb_end_family(e);
    if (e->fmt == MV_EXPO_OPENMETRICS) {
        /* The reserve guarantees room, even after a truncation. */
        if (ensure(e, e->len + OM_EOF_LEN, e->cap) < 0)
            return fail_code(e);
        memcpy(e->buf + e->len, OM_EOF, OM_EOF_LEN);
        e->len += OM_EOF_LEN;
    }
    e->finished = 1;
    update_room(e);
    return 0;
}

/* ---- Pre-rendered output -------------------------------------------------------------- */

int mv_expo_raw_family(mv_expo *e, const char *hdr, size_t n)
{
    if (e->fmt == MV_EXPO_PROTOBUF)
        pb_end_family(e);
    if (e->fail)
        return fail_code(e);
    e->have_family = 0;
    if (e->finished)
        return fail_inval(e, "family after finish");
    e->fam_start = e->len;
    put(e, hdr, n);
    return e->fail ? fail_code(e) : 0;
}

void mv_expo_raw_room(mv_expo *e, char **p, size_t *avail)
{
    *p = e->buf ? e->buf + e->len : NULL;
    *avail = e->buf && e->room_end > e->len ? e->room_end - e->len : 0;
}

void mv_expo_raw_commit(mv_expo *e, size_t n)
{
    e->len += n;
}

int mv_expo_raw_put(mv_expo *e, const char *s, size_t n)
{
    if (e->fail)
        return fail_code(e);
    put(e, s, n);
    return e->fail ? fail_code(e) : 0;
}

void mv_expo_raw_truncate(mv_expo *e, size_t len)
{
    if (len >= e->fam_start && len <= e->len)
        e->len = len;
}

/* ---- Protobuf parts --------------------------------------------------------------------- */

static mv_expo__pb *pb_scratch(mv_expo *e)
{
    if (!e->pb) {
        e->pb = mv_expo__pb_create();
        if (e->pb)
            mv_expo__pb_native(e->pb, e->nh_schema, e->nh_max);
    }
    return e->pb;
}

int mv_expo_pb_histogram(mv_expo *e, const double *le, const uint64_t *cum, size_t n, double sum,
                         uint64_t count, const uint8_t **out, size_t *len)
{
    mv_expo__pb *p = pb_scratch(e);
    if (!p)
        return -ENOMEM;
    return mv_expo__pb_hist_part(p, le, cum, n, sum, count, out, len);
}

int mv_expo_native(mv_expo *e, const mv_expo_label *a, size_t na, const mv_expo_label *b, size_t nb,
                   const mv_expo_native_in *in, int64_t ts_ms)
{
    if (e->fail)
        return fail_code(e);
    if (!e->have_family || e->type != MV_EXPO_GAUGE_HISTOGRAM || e->fmt != MV_EXPO_PROTOBUF)
        return fail_inval(e, "native series without a gauge histogram family");
    if (!in || in->schema < MV_EXPO_NH_SCHEMA_MIN || in->schema > MV_EXPO_NH_SCHEMA_MAX ||
        (in->nb && !in->b))
        return fail_inval(e, "%s: invalid native histogram", e->base);
    size_t lens[FAST_LABELS];
    if (!check_labels_fast(a, na, b, nb, NULL, lens)) {
        int rc = check_labels(e, a, na, b, nb, NULL);
        if (rc < 0)
            return rc;
    }
    int rc = mv_expo__pb_native_series(e->pb, a, na, b, nb, in, ts_ms);
    if (rc < 0) {
        e->pb_open = 0;
        overflow(e, -rc);
        return fail_code(e);
    }
    return 0;
}

int mv_expo_pb_native(mv_expo *e, const mv_expo_native_in *in, const uint8_t **out, size_t *len)
{
    if (!in || in->schema < MV_EXPO_NH_SCHEMA_MIN || in->schema > MV_EXPO_NH_SCHEMA_MAX ||
        (in->nb && !in->b))
        return -EINVAL;
    mv_expo__pb *p = pb_scratch(e);
    if (!p)
        return -ENOMEM;
    return mv_expo__pb_native_part(p, in, out, len);
}

int mv_expo_pb_summary(mv_expo *e, const double *q, const double *v, size_t n, double sum,
                       uint64_t count, const uint8_t **out, size_t *len)
{
    mv_expo__pb *p = pb_scratch(e);
    if (!p)
        return -ENOMEM;
    return mv_expo__pb_summary_part(p, q, v, n, sum, count, out, len);
}
