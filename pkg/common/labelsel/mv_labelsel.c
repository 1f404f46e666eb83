/* mv_labelsel: label selector text parser and matcher (see mv_labelsel.h). */
#include "mv_labelsel.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

typedef enum tok_kind {
    T_END,
    T_IDENT,
    T_COMMA,
    T_OPEN,
    T_CLOSE,
    T_EQ, /* = or == */
    T_NE,
    T_NOT,
} tok_kind;

typedef struct lexer {
    const char *s;
    size_t len, pos;
    size_t req;  /* 1-based requirement being parsed, for messages */
    size_t tpos; /* offset of the last token */
    size_t tlen; /* length of the last token */
    char *err;
    size_t errlen;
} lexer;

static int fail(lexer *lx, size_t at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int fail(lexer *lx, size_t at, const char *fmt, ...)
{
    if (lx->errlen) {
        int n =
            snprintf(lx->err, lx->errlen, "selector requirement %zu at byte %zu: ", lx->req, at);
        if (n >= 0 && (size_t)n < lx->errlen) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(lx->err + n, lx->errlen - (size_t)n, fmt, ap);
            va_end(ap);
        }
    }
    return -EINVAL;
}

static int is_alnum(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

static int is_ident(unsigned char c)
{
    return is_alnum(c) || c == '.' || c == '_' || c == '-' || c == '/';
}

/* Reads the next token. -EINVAL on a byte no selector holds. */
static int next(lexer *lx, tok_kind *k)
{
    while (lx->pos < lx->len && (lx->s[lx->pos] == ' ' || lx->s[lx->pos] == '\t'))
        lx->pos++;
    lx->tpos = lx->pos;
    lx->tlen = 1;
    if (lx->pos == lx->len) {
        lx->tlen = 0;
        *k = T_END;
        return 0;
    }
    unsigned char c = (unsigned char)lx->s[lx->pos];
    switch (c) {
    case ',':
        *k = T_COMMA;
        break;
    case '(':
        *k = T_OPEN;
        break;
    case ')':
        *k = T_CLOSE;
        break;
    case '=':
        *k = T_EQ;
        if (lx->pos + 1 < lx->len && lx->s[lx->pos + 1] == '=')
            lx->tlen = 2;
        break;
    case '!':
        *k = T_NOT;
        if (lx->pos + 1 < lx->len && lx->s[lx->pos + 1] == '=') {
            *k = T_NE;
            lx->tlen = 2;
        }
        break;
    case '<':
    case '>':
        return fail(lx, lx->pos, "operator '%c' (gt/lt) is not supported", c);
    default:
        if (!is_ident(c)) {
            if (c >= 0x20 && c < 0x7f)
                return fail(lx, lx->pos, "unexpected character '%c'", c);
            return fail(lx, lx->pos, "unexpected byte 0x%02x", c);
        }
        *k = T_IDENT;
        lx->tlen = 0;
        while (lx->pos + lx->tlen < lx->len && is_ident((unsigned char)lx->s[lx->pos + lx->tlen]))
            lx->tlen++;
        break;
    }
    lx->pos += lx->tlen;
    return 0;
}

/* A label name or non-empty value: 1-63 bytes of [A-Za-z0-9._-], alphanumeric at both ends. */
static const char *check_name(const char *p, size_t n)
{
    if (n == 0)
        return "is empty";
    if (n > MV_LSEL_NAME_MAX)
        return "is longer than 63 bytes";
    if (!is_alnum((unsigned char)p[0]) || !is_alnum((unsigned char)p[n - 1]))
        return "must start and end with a letter or digit";
    for (size_t i = 0; i < n; i++)
        if (p[i] == '/')
            return "holds '/'";
    return NULL;
}

/* A DNS-1123 subdomain: dot-separated labels of [a-z0-9-], alphanumeric at both ends. */
static const char *check_prefix(const char *p, size_t n)
{
    if (n == 0)
        return "has an empty prefix before '/'";
    if (n > MV_LSEL_PREFIX_MAX)
        return "has a prefix longer than 253 bytes";
    size_t start = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i < n && p[i] != '.') {
            char c = p[i];
            if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'))
                return "has a prefix that is not a lowercase DNS subdomain";
            continue;
        }
        size_t l = i - start;
        if (l == 0 || l > 63 || p[start] == '-' || p[i - 1] == '-')
            return "has a prefix that is not a lowercase DNS subdomain";
        start = i + 1;
    }
    return NULL;
}

const char *mv_lsel_check_key(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!is_ident((unsigned char)p[i]))
            return "holds a byte other than [A-Za-z0-9._/-]";
    const char *slash = memchr(p, '/', n);
    if (!slash)
        return check_name(p, n);
    size_t pl = (size_t)(slash - p);
    const char *why = check_prefix(p, pl);
    return why ? why : check_name(slash + 1, n - pl - 1);
}

const char *mv_lsel_check_value(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!is_ident((unsigned char)p[i]))
            return "holds a byte other than [A-Za-z0-9._-]";
    return n ? check_name(p, n) : NULL;
}

static int check_key(lexer *lx, size_t off, size_t n)
{
    const char *p = lx->s + off;
    const char *why = mv_lsel_check_key(p, n);
    if (why)
        return fail(lx, off, "key '%.*s' %s", (int)(n > 80 ? 80 : n), p, why);
    return 0;
}

static int check_value(lexer *lx, size_t off, size_t n)
{
    const char *why = mv_lsel_check_value(lx->s + off, n);
    if (why)
        return fail(lx, off, "value '%.*s' %s", (int)(n > 80 ? 80 : n), lx->s + off, why);
    return 0;
}

static mv_lsel_str piece(const lexer *lx)
{
    return (mv_lsel_str){(uint16_t)lx->tpos, (uint16_t)lx->tlen};
}

/* `in (a,b)` / `notin (a,b)` after the keyword. */
static int parse_set(lexer *lx, mv_lsel_req *r)
{
    tok_kind k;
    int rc = next(lx, &k);
    if (rc)
        return rc;
    if (k != T_OPEN)
        return fail(lx, lx->tpos, "'(' must follow in/notin");
    for (;;) {
        if ((rc = next(lx, &k)))
            return rc;
        if (k != T_IDENT)
            return fail(lx, lx->tpos,
                        k == T_CLOSE && r->nvalues == 0 ? "the value set is empty"
                                                        : "a value must follow '(' or ','");
        if ((rc = check_value(lx, lx->tpos, lx->tlen)))
            return rc;
        if (r->nvalues == MV_LSEL_VALUES_MAX)
            return fail(lx, lx->tpos, "more than %d values in the set", MV_LSEL_VALUES_MAX);
        r->values[r->nvalues++] = piece(lx);
        if ((rc = next(lx, &k)))
            return rc;
        if (k == T_CLOSE)
            return 0;
        if (k != T_COMMA)
            return fail(lx, lx->tpos, "',' or ')' must follow a value");
    }
}

int mv_lsel_parse(const char *s, size_t len, mv_lsel *out, char *err, size_t errlen)
{
    lexer lx = {.s = out->text, .len = len, .req = 1, .err = err, .errlen = errlen};
    out->nreqs = 0;
    if (errlen)
        err[0] = '\0';
    if (len > MV_LSEL_TEXT_MAX) {
        lx.req = 0;
        out->text[0] = '\0';
        return fail(&lx, MV_LSEL_TEXT_MAX, "the selector is longer than %d bytes",
                    MV_LSEL_TEXT_MAX);
    }
    memcpy(out->text, s, len);
    out->text[len] = '\0';
    tok_kind k;
    int rc;
    for (;;) {
        if ((rc = next(&lx, &k)))
            return rc;
        if (k == T_END)
            return lx.req == 1 ? fail(&lx, lx.tpos, "the selector is empty")
                               : fail(&lx, lx.tpos, "a requirement must follow ','");
        if (out->nreqs == MV_LSEL_REQS_MAX)
            return fail(&lx, lx.tpos, "more than %d requirements", MV_LSEL_REQS_MAX);
        mv_lsel_req *r = &out->reqs[out->nreqs];
        memset(r, 0, sizeof *r);
        if (k == T_NOT) {
            if ((rc = next(&lx, &k)))
                return rc;
            if (k != T_IDENT)
                return fail(&lx, lx.tpos, "a key must follow '!'");
            if ((rc = check_key(&lx, lx.tpos, lx.tlen)))
                return rc;
            r->op = MV_LSEL_NOTEXIST;
            r->key = piece(&lx);
            if ((rc = next(&lx, &k)))
                return rc;
        } else if (k == T_IDENT) {
            if ((rc = check_key(&lx, lx.tpos, lx.tlen)))
                return rc;
            r->key = piece(&lx);
            if ((rc = next(&lx, &k)))
                return rc;
            if (k == T_EQ || k == T_NE) {
                r->op = k == T_EQ ? MV_LSEL_EQ : MV_LSEL_NE;
                size_t opend = lx.pos;
                if ((rc = next(&lx, &k)))
                    return rc;
                if (k == T_IDENT) {
                    if ((rc = check_value(&lx, lx.tpos, lx.tlen)))
                        return rc;
                    r->values[0] = piece(&lx);
                    if ((rc = next(&lx, &k)))
                        return rc;
                } else {
                    r->values[0] = (mv_lsel_str){(uint16_t)opend, 0}; /* key= : empty value */
                }
                r->nvalues = 1;
            } else if (k == T_IDENT &&
                       ((lx.tlen == 2 && memcmp(lx.s + lx.tpos, "in", 2) == 0) ||
                        (lx.tlen == 5 && memcmp(lx.s + lx.tpos, "notin", 5) == 0))) {
                r->op = lx.tlen == 2 ? MV_LSEL_IN : MV_LSEL_NOTIN;
                if ((rc = parse_set(&lx, r)))
                    return rc;
                if ((rc = next(&lx, &k)))
                    return rc;
            } else if (k == T_END || k == T_COMMA) {
                r->op = MV_LSEL_EXISTS;
            } else {
                return fail(&lx, lx.tpos,
                            "an operator (=, ==, !=, in, notin) or ',' must follow "
                            "the key");
            }
        } else {
            return fail(&lx, lx.tpos, "a key or '!key' must start a requirement");
        }
        out->nreqs++;
        if (k == T_END)
            return 0;
        if (k != T_COMMA)
            return fail(&lx, lx.tpos, "',' must separate requirements");
        lx.req++;
    }
}

static int value_is(const mv_lsel *sel, mv_lsel_str v, const char *have)
{
    return strlen(have) == v.len && memcmp(sel->text + v.off, have, v.len) == 0;
}

int mv_lsel_match(const mv_lsel *sel, mv_lsel_get_fn get, void *ctx)
{
    for (size_t i = 0; i < sel->nreqs; i++) {
        const mv_lsel_req *r = &sel->reqs[i];
        const char *have = get(ctx, sel->text + r->key.off, r->key.len);
        int in = 0;
        if (have)
            for (size_t j = 0; j < r->nvalues && !in; j++)
                in = value_is(sel, r->values[j], have);
        int ok;
        switch (r->op) {
        case MV_LSEL_EQ:
        case MV_LSEL_IN:
            ok = in;
            break;
        case MV_LSEL_NE:
        case MV_LSEL_NOTIN:
            ok = !in;
            break;
        case MV_LSEL_EXISTS:
            ok = have != NULL;
            break;
        default:
            ok = have == NULL;
            break;
        }
        if (!ok)
            return 0;
    }
    return 1;
}

typedef struct outbuf {
    char *p;
    size_t cap, n;
} outbuf;

static void put(outbuf *o, const char *s, size_t n)
{
    if (o->n < o->cap) {
        size_t room = o->cap - o->n;
        memcpy(o->p + o->n, s, n < room ? n : room);
    }
    o->n += n;
}

static void put_str(outbuf *o, const mv_lsel *sel, mv_lsel_str s)
{
    put(o, sel->text + s.off, s.len);
}

size_t mv_lsel_format(const mv_lsel *sel, char *buf, size_t cap)
{
    outbuf o = {buf, cap ? cap - 1 : 0, 0};
    for (size_t i = 0; i < sel->nreqs; i++) {
        const mv_lsel_req *r = &sel->reqs[i];
        if (i)
            put(&o, ",", 1);
        if (r->op == MV_LSEL_NOTEXIST)
            put(&o, "!", 1);
        put_str(&o, sel, r->key);
        if (r->op == MV_LSEL_EQ || r->op == MV_LSEL_NE) {
            put(&o, r->op == MV_LSEL_EQ ? "=" : "!=", r->op == MV_LSEL_EQ ? 1 : 2);
            put_str(&o, sel, r->values[0]);
        } else if (r->op == MV_LSEL_IN || r->op == MV_LSEL_NOTIN) {
            put(&o, r->op == MV_LSEL_IN ? " in (" : " notin (", r->op == MV_LSEL_IN ? 5 : 8);
            for (size_t j = 0; j < r->nvalues; j++) {
                if (j)
                    put(&o, ",", 1);
                put_str(&o, sel, r->values[j]);
            }
            put(&o, ")", 1);
        }
    }
    if (cap)
        buf[o.n < cap ? o.n : cap - 1] = '\0';
    return o.n;
}
