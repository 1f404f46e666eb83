/* mv_expo_accept: Accept header negotiation between Prometheus text, OpenMetrics and the
 * protobuf exposition (delimited MetricFamily). */
#include "mv_expo_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
            if (!expo_is_digit((unsigned char)*p))
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
    fmt_pref text = {0, -1}, om = {0, -1}, pb = {0, -1};
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
        int has_version = 0, pb_proto = 0, pb_delim = 0;
        for (;;) {
            skip_ows(&c);
            if (c.p >= c.end || *c.p != ';')
                break;
            c.p++;
            skip_ows(&c);
            const char *pn;
            size_t pl = read_token(&c, &pn);
            char val[48];
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
                /* A value longer than any version we know of is no version we know of. */
                size_t vl = strlen(val);
                if (too_long || vl >= sizeof version)
                    memcpy(version, "?", 2);
                else
                    memcpy(version, val, vl + 1);
            } else if (tok_eq(pn, pl, "proto")) {
                pb_proto = !too_long && !strcmp(val, "io.prometheus.client.MetricFamily");
            } else if (tok_eq(pn, pl, "encoding")) {
                pb_delim = !too_long && tok_eq(val, strlen(val), "delimited");
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
            else if (tok_eq(sub, sl, "vnd.google.protobuf") && pb_proto && pb_delim)
                offer(&pb, 2, q); /* binary only when asked for by name, never by a wildcard */
        }
    }
    double qt = text.spec < 0 ? 0 : text.q, qo = om.spec < 0 ? 0 : om.q;
    double qp = pb.spec < 0 ? 0 : pb.q;
    if (qp > 0 && qp > qt && qp > qo)
        return MV_EXPO_PROTOBUF;
    return (qo > 0 && qo > qt) ? MV_EXPO_OPENMETRICS : MV_EXPO_TEXT;
}
