/* Unit tests for mv_expo: data-driven rendering cases, Accept negotiation, numbers, caps.
 *
 * Rendering cases live in tests/data/expo/<case>.in (DSL described in
 * tests/data/expo/README.md) with the expected outputs <case>.prom (text 0.0.4) and
 * <case>.om (OpenMetrics 1.0). Set MV_EXPO_REGEN=1 to rewrite the expected files from the
 * current renderer (then review the diff). */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expo_number_ref.h"
#include "mv_expo.h"
#include "mv_log.h"
#include "mv_test.h"

#define CASE_DIR   "tests/data/expo"
#define MAX_LABELS 32
#define MAX_TOKENS 64

/* ---- DSL tokenizer ------------------------------------------------------------------ */

typedef struct {
    char key[64];
    char val[1024];
} token;

static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Splits "cmd k=v k="quoted \n" ..." into the command and key/value tokens. */
static int tokenize(const char *line, char *cmd, size_t cmdsz, token *toks, int max)
{
    const char *p = line;
    int n = 0;
    size_t i = 0;
    while (*p == ' ')
        p++;
    while (*p && *p != ' ' && *p != '\n' && i < cmdsz - 1)
        cmd[i++] = *p++;
    cmd[i] = '\0';
    for (;;) {
        while (*p == ' ' || *p == '\t')
            p++;
        if (!*p || *p == '\n')
            break;
        if (n == max)
            return -1;
        token *t = &toks[n++];
        i = 0;
        while (*p && *p != '=' && *p != ' ' && *p != '\n' && i < sizeof t->key - 1)
            t->key[i++] = *p++;
        t->key[i] = '\0';
        i = 0;
        if (*p == '=') {
            p++;
            if (*p == '"') {
                p++;
                while (*p && *p != '"' && i < sizeof t->val - 1) {
                    if (*p == '\\' && p[1]) {
                        p++;
                        if (*p == 'n')
                            t->val[i++] = '\n';
                        else if (*p == 't')
                            t->val[i++] = '\t';
                        else if (*p == 'x' && hexval(p[1]) >= 0 && hexval(p[2]) >= 0) {
                            t->val[i++] = (char)(hexval(p[1]) * 16 + hexval(p[2]));
                            p += 2;
                        } else
                            t->val[i++] = *p;
                        p++;
                    } else
                        t->val[i++] = *p++;
                }
                if (*p != '"')
                    return -1;
                p++;
            } else {
                while (*p && *p != ' ' && *p != '\n' && i < sizeof t->val - 1)
                    t->val[i++] = *p++;
            }
        }
        t->val[i] = '\0';
    }
    return n;
}

static mv_expo_type parse_type(const char *s)
{
    if (!strcmp(s, "counter"))
        return MV_EXPO_COUNTER;
    if (!strcmp(s, "gauge"))
        return MV_EXPO_GAUGE;
    if (!strcmp(s, "histogram"))
        return MV_EXPO_HISTOGRAM;
    if (!strcmp(s, "summary"))
        return MV_EXPO_SUMMARY;
    if (!strcmp(s, "unknown"))
        return MV_EXPO_UNKNOWN;
    return (mv_expo_type)99; /* deliberately invalid */
}

/* ---- Case runner -------------------------------------------------------------------- */

typedef struct {
    char *data;
    size_t len;
} blob;

static int read_file(const char *path, blob *out)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    out->data = NULL;
    out->len = 0;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) {
        char *p = realloc(out->data, out->len + n + 1);
        if (!p)
            break;
        out->data = p;
        memcpy(out->data + out->len, buf, n);
        out->len += n;
    }
    if (!out->data)
        out->data = calloc(1, 1);
    out->data[out->len] = '\0';
    fclose(f);
    return 0;
}

/* Renders case `in` in format f. Returns 0, or -1 with a message in why. */
static int render_case(const char *name, const blob *in, mv_expo_format f, mv_expo **out, char *why,
                       size_t whysz)
{
    size_t cap = 0;
    int want_trunc = 0;
    const char *fmtname = f == MV_EXPO_TEXT ? "prom" : "om";
    /* First pass: the cap line. */
    const char *capline = strstr(in->data, "\ncap ");
    if (!strncmp(in->data, "cap ", 4))
        cap = strtoull(in->data + 4, NULL, 10);
    else if (capline)
        cap = strtoull(capline + 5, NULL, 10);

    mv_expo *e = mv_expo_create(f, cap);
    *out = e;
    char *copy = strdup(in->data), *save = NULL;
    int lineno = 0, rc_all = 0;
    for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char cmd[32];
        token toks[MAX_TOKENS];
        lineno++;
        if (line[0] == '#' || line[strspn(line, " \t")] == '\0')
            continue;
        int nt = tokenize(line, cmd, sizeof cmd, toks, MAX_TOKENS);
        if (nt < 0) {
            snprintf(why, whysz, "%s.in: cannot parse line: %s", name, line);
            rc_all = -1;
            break;
        }
        int want_rc = 0, rc = 0;
        for (int i = 0; i < nt; i++) {
            if (!strcmp(toks[i].key, "rc") ||
                (!strcmp(toks[i].key, "rc_prom") && f == MV_EXPO_TEXT) ||
                (!strcmp(toks[i].key, "rc_om") && f == MV_EXPO_OPENMETRICS))
                want_rc = atoi(toks[i].val);
        }
        if (!strcmp(cmd, "cap")) {
            continue;
        } else if (!strcmp(cmd, "truncated")) {
            for (int i = 0; i < nt; i++)
                if (!strcmp(toks[i].key, fmtname))
                    want_trunc = atoi(toks[i].val);
            continue;
        } else if (!strcmp(cmd, "family")) {
            const char *fname = NULL, *help = NULL, *unit = NULL;
            mv_expo_type type = MV_EXPO_UNKNOWN;
            for (int i = 0; i < nt; i++) {
                if (!strcmp(toks[i].key, "name"))
                    fname = toks[i].val;
                else if (!strcmp(toks[i].key, "type"))
                    type = parse_type(toks[i].val);
                else if (!strcmp(toks[i].key, "help"))
                    help = toks[i].val;
                else if (!strcmp(toks[i].key, "unit"))
                    unit = toks[i].val;
            }
            rc = mv_expo_family(e, fname, type, help, unit);
        } else if (!strcmp(cmd, "sample")) {
            mv_expo_label a[MAX_LABELS], b[MAX_LABELS];
            size_t na = 0, nb = 0;
            const char *suffix = NULL, *extra = NULL;
            double extra_v = 0, v = 0;
            int kind = 0; /* 0 double, 1 u64, 2 i64 */
            uint64_t u = 0;
            int64_t s = 0, ts = MV_EXPO_NO_TS;
            for (int i = 0; i < nt; i++) {
                const char *k = toks[i].key, *val = toks[i].val;
                if (!strcmp(k, "suffix"))
                    suffix = val;
                else if (!strncmp(k, "a.", 2) && na < MAX_LABELS)
                    a[na++] = (mv_expo_label){k + 2, val};
                else if (!strncmp(k, "b.", 2) && nb < MAX_LABELS)
                    b[nb++] = (mv_expo_label){k + 2, val};
                else if (!strcmp(k, "le") || !strcmp(k, "quantile")) {
                    extra = k;
                    extra_v = strtod(val, NULL);
                } else if (!strcmp(k, "value"))
                    v = strtod(val, NULL);
                else if (!strcmp(k, "u64")) {
                    kind = 1;
                    u = strtoull(val, NULL, 10);
                } else if (!strcmp(k, "i64")) {
                    kind = 2;
                    s = strtoll(val, NULL, 10);
                } else if (!strcmp(k, "ts"))
                    ts = strtoll(val, NULL, 10);
            }
            if (kind == 1)
                rc = mv_expo_sample_u64(e, suffix, a, na, b, nb, extra, extra_v, u, ts);
            else if (kind == 2)
                rc = mv_expo_sample_i64(e, suffix, a, na, b, nb, extra, extra_v, s, ts);
            else
                rc = mv_expo_sample(e, suffix, a, na, b, nb, extra, extra_v, v, ts);
        } else {
            snprintf(why, whysz, "%s.in:%d: unknown command %s", name, lineno, cmd);
            rc_all = -1;
            break;
        }
        if (rc != want_rc) {
            snprintf(why, whysz, "%s.in:%d [%s]: rc %d, want %d (%s)", name, lineno, fmtname, rc,
                     want_rc, mv_expo_errmsg(e));
            rc_all = -1;
            break;
        }
    }
    free(copy);
    if (rc_all == 0) {
        mv_expo_finish(e);
        size_t len;
        mv_expo_data(e, &len);
        if (len > (cap ? (cap < MV_EXPO_CAP_MIN ? MV_EXPO_CAP_MIN : cap) : MV_EXPO_CAP_DEFAULT)) {
            snprintf(why, whysz, "%s [%s]: output %zu bytes exceeds cap %zu", name, fmtname, len,
                     cap);
            rc_all = -1;
        } else if (mv_expo_truncated(e) != want_trunc) {
            snprintf(why, whysz, "%s [%s]: truncated=%d, want %d", name, fmtname,
                     mv_expo_truncated(e), want_trunc);
            rc_all = -1;
        }
    }
    return rc_all;
}

/* Compares got with the expected file; describes the first differing line. */
static int compare(const char *name, const char *ext, const char *got, size_t glen,
                   const blob *want, char *why, size_t whysz)
{
    if (glen == want->len && memcmp(got, want->data, glen) == 0)
        return 0;
    size_t i = 0, line = 1, ls = 0;
    while (i < glen && i < want->len && got[i] == want->data[i]) {
        if (got[i] == '\n') {
            line++;
            ls = i + 1;
        }
        i++;
    }
    const char *ge = memchr(got + ls, '\n', glen - ls);
    const char *we = memchr(want->data + ls, '\n', want->len - ls);
    int gl = (int)(ge ? (size_t)(ge - got) - ls : glen - ls);
    int wl = (int)(we ? (size_t)(we - want->data) - ls : want->len - ls);
    snprintf(why, whysz, "%s.%s line %zu differs:\n  got:  %.*s\n  want: %.*s", name, ext, line, gl,
             got + ls, wl, want->data + ls);
    return -1;
}

static void test_cases(void)
{
    DIR *d = opendir(CASE_DIR);
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    char *names[512];
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) && n < 512) {
        size_t l = strlen(de->d_name);
        if (l > 3 && !strcmp(de->d_name + l - 3, ".in")) {
            names[n] = strndup(de->d_name, l - 3);
            n++;
        }
    }
    closedir(d);
    CU_ASSERT_TRUE(n >= 10);
    int regen = getenv("MV_EXPO_REGEN") != NULL;
    int failures = 0;
    for (int i = 0; i < n; i++) {
        char path[600], why[2048];
        blob in;
        snprintf(path, sizeof path, "%s/%s.in", CASE_DIR, names[i]);
        CU_ASSERT_EQUAL_FATAL(read_file(path, &in), 0);
        for (int f = 0; f < 2; f++) {
            const char *ext = f == 0 ? "prom" : "om";
            mv_expo *e = NULL;
            why[0] = '\0';
            int rc = render_case(names[i], &in, (mv_expo_format)f, &e, why, sizeof why);
            size_t len = 0;
            const char *got = e ? mv_expo_data(e, &len) : "";
            snprintf(path, sizeof path, "%s/%s.%s", CASE_DIR, names[i], ext);
            if (rc == 0 && regen) {
                FILE *o = fopen(path, "wb");
                if (o) {
                    fwrite(got, 1, len, o);
                    fclose(o);
                }
            } else if (rc == 0) {
                blob want;
                if (read_file(path, &want) < 0) {
                    snprintf(why, sizeof why, "%s: missing expected file %s", names[i], path);
                    rc = -1;
                } else {
                    rc = compare(names[i], ext, got, len, &want, why, sizeof why);
                    free(want.data);
                }
            }
            if (rc != 0) {
                fprintf(stderr, "\nCASE FAILED: %s\n", why);
                failures++;
            }
            mv_expo_destroy(e);
        }
        free(in.data);
        free(names[i]);
    }
    CU_ASSERT_EQUAL(failures, 0);
}

/* ---- Negotiation ------------------------------------------------------------------- */

static void test_negotiate(void)
{
    static const struct {
        const char *accept;
        mv_expo_format want;
    } cases[] = {
        {NULL, MV_EXPO_TEXT},
        {"", MV_EXPO_TEXT},
        {"*/*", MV_EXPO_TEXT},
        {"text/plain", MV_EXPO_TEXT},
        {"application/json", MV_EXPO_TEXT},
        {"garbage;;;,,,", MV_EXPO_TEXT},
        /* Prometheus 3 default. */
        {"application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,"
         "application/openmetrics-text;version=0.0.1;q=0.4,"
         "text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,"
         "text/plain;version=0.0.4;q=0.2,*/*;q=0.1",
         MV_EXPO_OPENMETRICS},
        /* Prometheus 3 with native histograms (protobuf first): the protobuf exposition. */
        {"application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;"
         "encoding=delimited;q=0.6,application/openmetrics-text;version=1.0.0;"
         "escaping=allow-utf-8;q=0.5,text/plain;version=0.0.4;q=0.2,*/*;q=0.1",
         MV_EXPO_PROTOBUF},
        /* Prometheus 2 default. */
        {"application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
         "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
         MV_EXPO_OPENMETRICS},
        {"application/openmetrics-text", MV_EXPO_OPENMETRICS},
        {"APPLICATION/OpenMetrics-Text ; Version=\"1.0.0\"", MV_EXPO_OPENMETRICS},
        {"application/openmetrics-text;version=0.0.1", MV_EXPO_TEXT},
        {"application/openmetrics-text;version=2.0.0", MV_EXPO_TEXT},
        {"application/openmetrics-text;q=0", MV_EXPO_TEXT},
        {"application/openmetrics-text;q=0.5, text/plain;q=0.5", MV_EXPO_TEXT},
        {"application/openmetrics-text;q=0.6, text/plain;q=0.5", MV_EXPO_OPENMETRICS},
        {"text/plain;q=0.1, application/*;q=0.2", MV_EXPO_OPENMETRICS},
        {"text/*;q=0.3, application/*;q=0.2", MV_EXPO_TEXT},
        /* The specific range overrides the wildcard for the same format. */
        {"text/plain;q=0, */*", MV_EXPO_OPENMETRICS},
        {"application/openmetrics-text;q=0, */*", MV_EXPO_TEXT},
        {"application/openmetrics-text;q=abc", MV_EXPO_TEXT},
        {"application/openmetrics-text;q=2", MV_EXPO_TEXT},
        {"application/openmetrics-text;version=\"1.0.0", MV_EXPO_OPENMETRICS},
        {"application/openmetrics-text junk", MV_EXPO_TEXT},
        {"application/openmetrics-text;version=1.0.0000000000000000000000", MV_EXPO_TEXT},
        {"\xff\xfe/\x01;q=\"", MV_EXPO_TEXT},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mv_expo_format got = mv_expo_negotiate(cases[i].accept);
        if (got != cases[i].want)
            fprintf(stderr, "\nnegotiate(%s) = %d, want %d\n",
                    cases[i].accept ? cases[i].accept : "NULL", got, cases[i].want);
        CU_ASSERT_EQUAL(got, cases[i].want);
    }
    CU_ASSERT_STRING_EQUAL(mv_expo_content_type(MV_EXPO_TEXT),
                           "text/plain; version=0.0.4; charset=utf-8");
    CU_ASSERT_STRING_EQUAL(mv_expo_content_type(MV_EXPO_OPENMETRICS),
                           "application/openmetrics-text; version=1.0.0; charset=utf-8");
}

/* ---- Numbers and names -------------------------------------------------------------- */

static double pow10_small(int k)
{
    double p = 1;
    while (k-- > 0)
        p *= 10;
    return p;
}

static void test_numbers(void)
{
    static const struct {
        double v;
        const char *plain, *canon;
    } cases[] = {
        {0, "0", "0.0"},
        {1, "1", "1.0"},
        {0.25, "0.25", "0.25"},
        {0.1, "0.1", "0.1"},
        {1e6, "1e+06", "1e+06"},
        {100000, "100000", "100000.0"},
        {1e-5, "1e-05", "1e-05"},
        {0.0001, "0.0001", "0.0001"},
        {-2.5, "-2.5", "-2.5"},
        {123456789, "1.23456789e+08", "1.23456789e+08"},
        {1.0 / 3, "0.3333333333333333", "0.3333333333333333"},
        {5e-324, "5e-324", "5e-324"},
        {1.7976931348623157e308, "1.7976931348623157e+308", "1.7976931348623157e+308"},
        {INFINITY, "+Inf", "+Inf"},
        {-INFINITY, "-Inf", "-Inf"},
        {NAN, "NaN", "NaN"},
    };
    char out[40];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mv_expo_format_double(cases[i].v, 0, out, sizeof out);
        CU_ASSERT_STRING_EQUAL(out, cases[i].plain);
        mv_expo_format_double(cases[i].v, 1, out, sizeof out);
        CU_ASSERT_STRING_EQUAL(out, cases[i].canon);
    }
    /* Round trip over a spread of values. */
    for (int i = -300; i <= 300; i += 7) {
        double v = 1.2345678901234567 * pow(10, i);
        mv_expo_format_double(v, 0, out, sizeof out);
        CU_ASSERT_EQUAL(strtod(out, NULL), v);
    }
}

/* The exact path gives the bytes the printf/strtod search gave, for doubles of every kind. */
static void test_numbers_unchanged(void)
{
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    long bad = 0, n = 0;
    char got[40], want[40];
    for (long i = 0; i < 600000; i++) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        double v;
        switch (i % 6) {
        case 0: /* any bit pattern */
            memcpy(&v, &rng, sizeof v);
            break;
        case 1: /* log-uniform over the range the exact path covers, and a bit around it */
            v = pow(10, -8 + (double)(rng >> 11) / 9007199254740992.0 * 48);
            break;
        case 2: /* ratios, as rates and means are */
            v = (double)(rng >> 40) / (double)((rng & 0xffff) + 1);
            break;
        case 3: { /* powers of two and their neighbours (the gap below is half) */
            v = ldexp(1, (int)(rng % 200) - 40);
            uint64_t b;
            memcpy(&b, &v, sizeof b);
            b += (rng >> 32) % 3 - 1;
            memcpy(&v, &b, sizeof b);
            break;
        }
        case 4: /* powers of ten and their neighbours */
            v = nextafter(pow(10, (int)(rng % 50) - 10), (rng & 1) ? INFINITY : 0);
            break;
        default: /* short decimals, integers */
            v = (double)(rng % 100000000) / pow10_small((int)((rng >> 40) % 12));
            break;
        }
        if (rng & (1ull << 63))
            v = -v;
        for (int canon = 0; canon < 2; canon++) {
            mv_expo_format_double(v, canon, got, sizeof got);
            ref_format_double(v, canon, want, sizeof want);
            n++;
            if (strcmp(got, want) != 0 && bad++ < 10)
                printf("\n  %.17g (canonical %d): got %s, want %s", v, canon, got, want);
        }
    }
    printf("\n  %ld numbers compared, %ld differ\n", n, bad);
    CU_ASSERT_EQUAL(bad, 0);
}

static void test_sanitize(void)
{
    char out[16];
    mv_expo_sanitize_name("9lives.per-sec", 0, out, sizeof out);
    CU_ASSERT_STRING_EQUAL(out, "_9lives_per_sec");
    mv_expo_sanitize_name("a:b", 1, out, sizeof out);
    CU_ASSERT_STRING_EQUAL(out, "a_b");
    mv_expo_sanitize_name("a:b", 0, out, sizeof out);
    CU_ASSERT_STRING_EQUAL(out, "a:b");
    mv_expo_sanitize_name("", 0, out, sizeof out);
    CU_ASSERT_STRING_EQUAL(out, "_");
    CU_ASSERT_EQUAL(mv_expo_sanitize_name("abcdefghijklmnopqrstuvwxyz", 0, out, sizeof out), 15);
}

/* ---- Caps --------------------------------------------------------------------------- */

/* For every cap from tiny to unbounded, the output never exceeds the cap, is a prefix of
 * complete families of the full output, and OpenMetrics output always ends in # EOF. */
static void test_cap_sweep(void)
{
    for (int f = 0; f < 2; f++) {
        mv_expo *full = mv_expo_create((mv_expo_format)f, 0);
        mv_expo *e = mv_expo_create((mv_expo_format)f, 64);
        mv_expo_label lb[] = {{"pod", "p\"1\\\n"}, {"ns", "default"}};
        for (size_t cap = 64; cap < 2600; cap += 13) {
            mv_expo_destroy(e);
            e = mv_expo_create((mv_expo_format)f, cap);
            for (int pass = 0; pass < 2; pass++) {
                mv_expo *x = pass ? e : full;
                if (pass == 0)
                    mv_expo_reset(full, (mv_expo_format)f);
                for (int fam = 0; fam < 8; fam++) {
                    char name[32];
                    snprintf(name, sizeof name, "fam%d_seconds", fam);
                    int rc =
                        mv_expo_family(x, name, MV_EXPO_HISTOGRAM, "Help \"text\".", "seconds");
                    for (int k = 0; k < 4 && rc == 0; k++)
                        rc = mv_expo_sample_u64(x, "_bucket", lb, 2, NULL, 0, "le",
                                                k == 3 ? INFINITY : k * 0.5, (uint64_t)k, 1000);
                    if (rc == 0)
                        rc = mv_expo_sample(x, "_sum", lb, 2, NULL, 0, NULL, 0, 1.5, 1000);
                    if (rc == 0)
                        rc = mv_expo_sample_u64(x, "_count", lb, 2, NULL, 0, NULL, 0, 3, 1000);
                    CU_ASSERT(rc == 0 || (pass == 1 && rc == -ENOSPC));
                }
                mv_expo_finish(x);
            }
            size_t fl, el;
            const char *fd = mv_expo_data(full, &fl);
            const char *ed = mv_expo_data(e, &el);
            CU_ASSERT(el <= cap);
            CU_ASSERT(el <= fl);
            size_t body = el;
            if (f == MV_EXPO_OPENMETRICS) {
                CU_ASSERT(el >= 6 && !memcmp(ed + el - 6, "# EOF\n", 6));
                body = el - 6;
            }
            CU_ASSERT(memcmp(ed, fd, body) == 0);
            /* The kept part ends at a family boundary. */
            CU_ASSERT(body == fl - (f ? 6 : 0) || !strncmp(fd + body, "# ", 2));
            CU_ASSERT_EQUAL(mv_expo_truncated(e), el < fl);
        }
        mv_expo_destroy(e);
        mv_expo_destroy(full);
    }
}

static void test_api_errors(void)
{
    mv_expo *e = mv_expo_create(MV_EXPO_TEXT, 0);
    mv_expo_label bad[] = {{"0bad", "x"}};
    mv_expo_label dup[] = {{"a", "x"}, {"a", "y"}};
    mv_expo_label le[] = {{"le", "1"}};
    CU_ASSERT_EQUAL(mv_expo_sample(e, NULL, NULL, 0, NULL, 0, NULL, 0, 1, MV_EXPO_NO_TS), -EINVAL);
    CU_ASSERT_EQUAL(mv_expo_family(e, "ok", MV_EXPO_GAUGE, NULL, NULL), 0);
    CU_ASSERT_EQUAL(mv_expo_sample(e, NULL, bad, 1, NULL, 0, NULL, 0, 1, MV_EXPO_NO_TS), -EINVAL);
    CU_ASSERT(strstr(mv_expo_errmsg(e), "label name") != NULL);
    CU_ASSERT_EQUAL(mv_expo_sample(e, NULL, dup, 1, dup + 1, 1, NULL, 0, 1, MV_EXPO_NO_TS),
                    -EINVAL);
    CU_ASSERT_EQUAL(mv_expo_sample(e, "_bucket", NULL, 0, NULL, 0, NULL, 0, 1, MV_EXPO_NO_TS),
                    -EINVAL);
    CU_ASSERT_EQUAL(mv_expo_family(e, "h", MV_EXPO_HISTOGRAM, NULL, NULL), 0);
    CU_ASSERT_EQUAL(mv_expo_sample(e, "_bucket", le, 1, NULL, 0, "le", 1, 1, MV_EXPO_NO_TS),
                    -EINVAL);
    CU_ASSERT_EQUAL(mv_expo_family(e, NULL, MV_EXPO_GAUGE, NULL, NULL), -EINVAL);
    CU_ASSERT_EQUAL(mv_expo_finish(e), 0);
    CU_ASSERT_EQUAL(mv_expo_family(e, "late", MV_EXPO_GAUGE, NULL, NULL), -EINVAL);
    size_t len;
    const char *d = mv_expo_data(e, &len);
    CU_ASSERT_EQUAL(len, strlen("# TYPE ok gauge\n# TYPE h histogram\n"));
    CU_ASSERT(!memcmp(d, "# TYPE ok gauge\n# TYPE h histogram\n", len));
    /* Reset reuses the renderer for another format. */
    mv_expo_reset(e, MV_EXPO_OPENMETRICS);
    CU_ASSERT_EQUAL(mv_expo_get_format(e), MV_EXPO_OPENMETRICS);
    CU_ASSERT_EQUAL(mv_expo_finish(e), 0);
    d = mv_expo_data(e, &len);
    CU_ASSERT(len == 6 && !memcmp(d, "# EOF\n", 6));
    mv_expo_destroy(e);
}

int main(void)
{
    mv_log_init("test_expo", MV_LOG_ERROR); /* the cap sweep truncates on purpose */
    static const mv_test tests[] = {
        {"data-driven cases", test_cases},
        {"accept negotiation", test_negotiate},
        {"number formatting", test_numbers},
        {"numbers unchanged by the exact path", test_numbers_unchanged},
        {"name sanitizing", test_sanitize},
        {"cap sweep", test_cap_sweep},
        {"api errors", test_api_errors},
    };
    int fails = MV_TEST_RUN("expo", tests);
    return fails;
}
