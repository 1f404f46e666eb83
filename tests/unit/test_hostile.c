/* Data-driven hostile-segment test: applies each case of tests/data/hostile-segments.txt to a
 * known-good segment and asserts the reader's rejection reason.
 *
 * Case syntax (one per line, '#' starts a comment line):
 *     name | op; op; ... | expected_reason
 * Offsets are expressions: terms joined by + or -, a term being a number (decimal or 0x hex)
 * or an anchor. Anchors: header, values, catalog, end (segment size), catend (end of the used
 * catalog), header.<field> (offset of a header field), recN (start of catalog record N),
 * recN.name / .help / .unit / .keyK / .valK (the u16 length prefix of that string),
 * recN.bounds, recN.check (checksum word), recN.slot (absolute start of its value slot).
 * Ops:
 *     u8|u16|u32|u64 OFF (=|+=|-=|^=) EXPR   store an integer (little-endian)
 *     f64 OFF = nan|inf|-inf|<number>         store a binary64
 *     fill OFF len N = BYTE                   set N bytes
 *     str OFF = text                          copy raw bytes (\xHH escapes; no terminator)
 *     truncate EXPR                           the copy handed to the reader ends there
 *     expect EXPR                             expected_size given to the reader (default: size)
 *     reseal recN                             recompute record N's checksum (after edits)
 */
#include "microview.h"
#include "mv_segment.h"
#include "mv_test.h"

#include <ctype.h>
#include <fcntl.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BASE_SIZE 4096
#define MAX_RECS  16
#define MIN_CASES 40

static const char *g_corpus = "tests/data/hostile-segments.txt";
static uint64_t g_base[BASE_SIZE / 8];

/* Offsets (from the segment start) of the base segment's records and their parts. */
static struct rec_anchor {
    uint32_t start, name, help, unit, keys[MV_SEG_LABELS_MAX], vals[MV_SEG_LABELS_MAX];
    uint32_t bounds, check, slot, nlabels;
} g_recs[MAX_RECS];
static uint32_t g_nrecs, g_catend;

static const struct {
    const char *name;
    uint32_t off;
} g_fields[] = {
    {"magic", offsetof(mv_seg_header, magic)},
    {"version", offsetof(mv_seg_header, version)},
    {"header_size", offsetof(mv_seg_header, header_size)},
    {"flags", offsetof(mv_seg_header, flags)},
    {"segment_size", offsetof(mv_seg_header, segment_size)},
    {"values_offset", offsetof(mv_seg_header, values_offset)},
    {"values_size", offsetof(mv_seg_header, values_size)},
    {"catalog_offset", offsetof(mv_seg_header, catalog_offset)},
    {"catalog_size", offsetof(mv_seg_header, catalog_size)},
    {"instance", offsetof(mv_seg_header, instance)},
    {"generation", offsetof(mv_seg_header, generation)},
    {"metric_count", offsetof(mv_seg_header, metric_count)},
    {"values_used", offsetof(mv_seg_header, values_used)},
    {"catalog_used", offsetof(mv_seg_header, catalog_used)},
    {"lock", offsetof(mv_seg_header, lock)},
    {"heartbeat_ns", offsetof(mv_seg_header, heartbeat_ns)},
    {"created_ns", offsetof(mv_seg_header, created_ns)},
    {"writer_pid", offsetof(mv_seg_header, writer_pid)},
    {"reserved0", offsetof(mv_seg_header, reserved0)},
    {"reserved", offsetof(mv_seg_header, reserved)},
};

/* Builds the base segment with libmicroview in a temporary file. */
static int build_base(void)
{
    char path[] = "/tmp/mv-hostile-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0 || ftruncate(fd, BASE_SIZE) != 0)
        return -1;
    mv_segment *s;
    int rc = mv_open(path, &s);
    if (rc != MV_OK) {
        fprintf(stderr, "base: %s\n", mv_errdetail());
        return -1;
    }
    mv_counter req, err, miss;
    mv_gauge temp;
    mv_histogram *lat;
    mv_label get[] = {{"method", "GET"}};
    mv_label hl[] = {{"code", "200"}, {"path", "/api"}};
    double bounds[] = {0.01, 0.1, 1};
    rc |= mv_counter_register(s, "requests_total", "Requests served.", NULL, get, 1, &req);
    rc |= mv_counter_register(s, "errors_total", "Errors seen.", NULL, NULL, 0, &err);
    rc |= mv_counter_register(s, "misses_total", "Errors seen.", NULL, NULL, 0, &miss);
    rc |= mv_gauge_register(s, "temperature", "Temperature.", "celsius", NULL, 0, &temp);
    rc |= mv_histogram_register(s, "latency_seconds", "Request latency.", "seconds", hl, 2, bounds,
                                3, &lat);
    mv_counter_add(req, 10);
    mv_counter_add(err, 2);
    mv_gauge_set(temp, 21.5);
    mv_histogram_observe(lat, 0.005);
    mv_histogram_observe(lat, 0.5);
    mv_histogram_observe(lat, 3);
    mv_close(s);
    ssize_t n = pread(fd, g_base, BASE_SIZE, 0);
    close(fd);
    unlink(path);
    return rc == MV_OK && n == BASE_SIZE ? 0 : -1;
}

/* Records anchors by walking the base catalog (trusted: we just wrote it). */
static void compute_anchors(void)
{
    const unsigned char *b = (const unsigned char *)g_base;
    const mv_seg_header *h = (const mv_seg_header *)(const void *)b;
    uint32_t pos = h->catalog_offset;
    g_nrecs = h->metric_count < MAX_RECS ? h->metric_count : MAX_RECS;
    for (uint32_t i = 0; i < g_nrecs; i++) {
        struct rec_anchor *a = &g_recs[i];
        mv_seg_record_head hd;
        uint16_t n;
        memcpy(&hd, b + pos, sizeof hd);
        a->start = pos;
        uint32_t p = pos + MV_SEG_RECORD_HEAD;
        uint32_t *strs[3] = {&a->name, &a->help, &a->unit};
        for (int k = 0; k < 3; k++) {
            *strs[k] = p;
            memcpy(&n, b + p, 2);
            p += 3u + n;
        }
        a->nlabels = hd.label_count;
        for (uint32_t k = 0; k < hd.label_count && k < MV_SEG_LABELS_MAX; k++) {
            a->keys[k] = p;
            memcpy(&n, b + p, 2);
            p += 3u + n;
            a->vals[k] = p;
            memcpy(&n, b + p, 2);
            p += 3u + n;
        }
        a->bounds = pos + ((p - pos + 7u) & ~7u);
        a->check = pos + hd.record_size - 8;
        a->slot = h->values_offset + hd.value_offset;
        pos += hd.record_size;
    }
    g_catend = pos;
}

/* ---- Expression parsing --------------------------------------------------------- */

typedef struct cursor {
    const char *p;
    const char *err;
} cursor;

static void skip_ws(cursor *c)
{
    while (*c->p == ' ' || *c->p == '\t')
        c->p++;
}

static int anchor_value(const char *w, size_t n, uint64_t *out)
{
    const mv_seg_header *h = (const mv_seg_header *)(const void *)g_base;
#define IS(s) (n == strlen(s) && memcmp(w, s, n) == 0)
    if (IS("header"))
        return *out = 0, 1;
    if (IS("values"))
        return *out = h->values_offset, 1;
    if (IS("catalog"))
        return *out = h->catalog_offset, 1;
    if (IS("end"))
        return *out = BASE_SIZE, 1;
    if (IS("catend"))
        return *out = g_catend, 1;
    if (n > 7 && memcmp(w, "header.", 7) == 0) {
        for (size_t i = 0; i < sizeof g_fields / sizeof g_fields[0]; i++)
            if (n - 7 == strlen(g_fields[i].name) && memcmp(w + 7, g_fields[i].name, n - 7) == 0)
                return *out = g_fields[i].off, 1;
        return 0;
    }
    if (n > 3 && memcmp(w, "rec", 3) == 0 && isdigit((unsigned char)w[3])) {
        char buf[64];
        if (n >= sizeof buf)
            return 0;
        memcpy(buf, w, n);
        buf[n] = 0;
        char *dot;
        unsigned long i = strtoul(buf + 3, &dot, 10);
        if (i >= g_nrecs)
            return 0;
        const struct rec_anchor *a = &g_recs[i];
        if (*dot == 0)
            return *out = a->start, 1;
        if (*dot != '.')
            return 0;
        const char *f = dot + 1;
        unsigned long k = 0;
        if ((strncmp(f, "key", 3) == 0 || strncmp(f, "val", 3) == 0) &&
            isdigit((unsigned char)f[3])) {
            k = strtoul(f + 3, NULL, 10);
            if (k >= a->nlabels)
                return 0;
            return *out = (f[0] == 'k' ? a->keys[k] : a->vals[k]), 1;
        }
        if (strcmp(f, "name") == 0)
            return *out = a->name, 1;
        if (strcmp(f, "help") == 0)
            return *out = a->help, 1;
        if (strcmp(f, "unit") == 0)
            return *out = a->unit, 1;
        if (strcmp(f, "bounds") == 0)
            return *out = a->bounds, 1;
        if (strcmp(f, "check") == 0)
            return *out = a->check, 1;
        if (strcmp(f, "slot") == 0)
            return *out = a->slot, 1;
        return 0;
    }
#undef IS
    return 0;
}

static uint64_t parse_term(cursor *c)
{
    skip_ws(c);
    const char *s = c->p;
    if (isdigit((unsigned char)*s)) {
        char *e;
        uint64_t v = strtoull(s, &e, 0);
        c->p = e;
        return v;
    }
    while (isalnum((unsigned char)*c->p) || *c->p == '_' || *c->p == '.')
        c->p++;
    uint64_t v = 0;
    if (c->p == s || !anchor_value(s, (size_t)(c->p - s), &v))
        c->err = "unknown anchor or number";
    return v;
}

static uint64_t parse_expr(cursor *c)
{
    uint64_t v = parse_term(c);
    for (;;) {
        skip_ws(c);
        if (*c->p == '+' && c->p[1] != '=') {
            c->p++;
            v += parse_term(c);
        } else if (*c->p == '-' && c->p[1] != '=') {
            c->p++;
            v -= parse_term(c);
        } else {
            return v;
        }
    }
}

static int expect_word(cursor *c, const char *w)
{
    skip_ws(c);
    size_t n = strlen(w);
    if (strncmp(c->p, w, n) != 0) {
        c->err = "syntax error";
        return 0;
    }
    c->p += n;
    return 1;
}

/* ---- Applying a case --------------------------------------------------------------- */

typedef struct seg_case {
    uint64_t buf[BASE_SIZE / 8 + 8]; /* slack so writes just past the end stay in bounds */
    size_t len;
    uint64_t expected_size;
} seg_case;

static int in_range(uint64_t off, uint64_t n)
{
    return off <= BASE_SIZE && n <= BASE_SIZE - off;
}

/* Applies one op (text without the trailing ';'); returns NULL or an error. */
static const char *apply_op(seg_case *sc, const char *op)
{
    unsigned char *b = (unsigned char *)sc->buf;
    cursor c = {op, NULL};
    skip_ws(&c);
    if (*c.p == 0)
        return NULL;
    if (*c.p == 'u' && isdigit((unsigned char)c.p[1])) {
        char *e;
        unsigned long bits = strtoul(c.p + 1, &e, 10);
        if (bits != 8 && bits != 16 && bits != 32 && bits != 64)
            return "width must be u8, u16, u32 or u64";
        c.p = e;
        uint64_t off = parse_expr(&c);
        skip_ws(&c);
        char kind = *c.p;
        if (kind == '=')
            c.p++;
        else if ((kind == '+' || kind == '-' || kind == '^') && c.p[1] == '=')
            c.p += 2;
        else
            return "expected =, +=, -= or ^=";
        uint64_t v = parse_expr(&c);
        if (c.err)
            return c.err;
        size_t n = bits / 8;
        if (!in_range(off, n))
            return "offset outside the segment";
        uint64_t cur = 0;
        memcpy(&cur, b + off, n);
        if (kind == '+')
            v = cur + v;
        else if (kind == '-')
            v = cur - v;
        else if (kind == '^')
            v = cur ^ v;
        memcpy(b + off, &v, n); /* little-endian host: low bytes first */
        return NULL;
    }
    if (strncmp(c.p, "f64", 3) == 0) {
        c.p += 3;
        uint64_t off = parse_expr(&c);
        if (!expect_word(&c, "="))
            return c.err;
        skip_ws(&c);
        double d;
        if (strncmp(c.p, "nan", 3) == 0)
            d = NAN;
        else if (strncmp(c.p, "-inf", 4) == 0)
            d = -INFINITY;
        else if (strncmp(c.p, "inf", 3) == 0)
            d = INFINITY;
        else
            d = strtod(c.p, NULL);
        if (c.err)
            return c.err;
        if (!in_range(off, 8))
            return "offset outside the segment";
        memcpy(b + off, &d, 8);
        return NULL;
    }
    if (strncmp(c.p, "fill", 4) == 0) {
        c.p += 4;
        uint64_t off = parse_expr(&c);
        if (!expect_word(&c, "len"))
            return c.err;
        uint64_t n = parse_expr(&c);
        if (!expect_word(&c, "="))
            return c.err;
        uint64_t v = parse_expr(&c);
        if (c.err)
            return c.err;
        if (!in_range(off, n))
            return "fill outside the segment";
        memset(b + off, (int)(v & 0xff), n);
        return NULL;
    }
    if (strncmp(c.p, "str", 3) == 0) {
        c.p += 3;
        uint64_t off = parse_expr(&c);
        if (!expect_word(&c, "="))
            return c.err;
        skip_ws(&c);
        if (c.err)
            return c.err;
        for (const char *s = c.p; *s && *s != '\n'; off++) {
            unsigned v = (unsigned char)*s++;
            if (v == '\\' && s[0] == 'x' && isxdigit((unsigned char)s[1]) &&
                isxdigit((unsigned char)s[2])) {
                char hex[3] = {s[1], s[2], 0};
                v = (unsigned)strtoul(hex, NULL, 16);
                s += 3;
            }
            if (!in_range(off, 1))
                return "string outside the segment";
            b[off] = (unsigned char)v;
        }
        return NULL;
    }
    if (strncmp(c.p, "truncate", 8) == 0) {
        c.p += 8;
        uint64_t n = parse_expr(&c);
        if (c.err)
            return c.err;
        if (n > BASE_SIZE)
            return "truncate beyond the end";
        sc->len = n;
        return NULL;
    }
    if (strncmp(c.p, "expect", 6) == 0) {
        c.p += 6;
        sc->expected_size = parse_expr(&c);
        return c.err;
    }
    if (strncmp(c.p, "reseal", 6) == 0) {
        c.p += 6;
        uint64_t off = parse_expr(&c);
        if (c.err)
            return c.err;
        uint32_t rs;
        if (!in_range(off, 4))
            return "reseal outside the segment";
        memcpy(&rs, b + off, 4);
        if (rs < 16 || !in_range(off, rs))
            return "reseal: record_size does not fit the segment";
        uint64_t sum = mv_seg_fnv1a64(b + off, rs - 8);
        memcpy(b + off + rs - 8, &sum, 8);
        return NULL;
    }
    return "unknown op";
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = 0;
    return s;
}

/* Runs the reader over a case's copy the way a collector would. */
static mv_seg_reason run_reader(seg_case *sc, mv_seg_error *e)
{
    mv_seg_catalog *cat;
    mv_seg_reason r = mv_seg_catalog_parse(sc->buf, sc->len, sc->expected_size, &cat, e);
    if (r != MV_SEG_OK)
        return r;
    r = mv_seg_hot_check(cat, sc->buf, sc->len, NULL, e);
    for (size_t i = 0; r == MV_SEG_OK && i < mv_seg_catalog_count(cat); i++) {
        const mv_seg_metric *m = mv_seg_catalog_metric(cat, i);
        mv_seg_hist_view hv;
        if (m->type == MV_SEG_HISTOGRAM && mv_seg_read_histogram(sc->buf, m, &hv) != MV_SEG_OK) {
            r = MV_SEG_E_TORN;
            snprintf(e->detail, sizeof e->detail, "metric %s: histogram is torn", m->name);
        } else if (m->type == MV_SEG_COUNTER) {
            (void)mv_seg_read_counter(sc->buf, m);
        } else if (m->type == MV_SEG_GAUGE) {
            (void)mv_seg_read_gauge(sc->buf, m);
        }
    }
    mv_seg_catalog_free(cat);
    return r;
}

static void test_corpus(void)
{
    FILE *f = fopen(g_corpus, "r");
    if (!f)
        fprintf(stderr, "cannot open %s (run from the source tree or pass a path)\n", g_corpus);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    static seg_case sc;
    char line[2048];
    int lineno = 0, cases = 0, failures = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        char *l = trim(line);
        if (*l == 0 || *l == '#')
            continue;
        char *bar1 = strchr(l, '|'), *bar2 = bar1 ? strchr(bar1 + 1, '|') : NULL;
        if (!bar2) {
            fprintf(stderr, "%s:%d: expected 'name | ops | reason'\n", g_corpus, lineno);
            failures++;
            continue;
        }
        *bar1 = *bar2 = 0;
        char *name = trim(l), *ops = trim(bar1 + 1), *want = trim(bar2 + 1);
        memset(&sc, 0, sizeof sc);
        memcpy(sc.buf, g_base, BASE_SIZE);
        sc.len = BASE_SIZE;
        sc.expected_size = BASE_SIZE;
        const char *perr = NULL;
        for (char *save = NULL, *op = strtok_r(ops, ";", &save); op && !perr;
             op = strtok_r(NULL, ";", &save)) {
            perr = apply_op(&sc, trim(op));
            if (perr)
                fprintf(stderr, "%s:%d: case %s: op '%s': %s\n", g_corpus, lineno, name, trim(op),
                        perr);
        }
        cases++;
        if (perr) {
            failures++;
            continue;
        }
        mv_seg_error e = {0};
        mv_seg_reason got = run_reader(&sc, &e);
        if (strcmp(mv_seg_reason_name(got), want) != 0) {
            fprintf(stderr, "FAIL case %s (line %d): expected %s, got %s: %s\n", name, lineno, want,
                    mv_seg_reason_name(got), got ? e.detail : "");
            failures++;
        } else if (getenv("MV_HOSTILE_VERBOSE")) {
            fprintf(stderr, "ok   case %-28s %-16s %s\n", name, want, got ? e.detail : "");
        }
    }
    fclose(f);
    fprintf(stderr, "hostile corpus: %d cases, %d failures\n", cases, failures);
    CU_ASSERT_EQUAL(failures, 0);
    CU_ASSERT(cases >= MIN_CASES);
}

int main(int argc, char **argv)
{
    if (argc > 1)
        g_corpus = argv[1];
    if (build_base() != 0) {
        fprintf(stderr, "cannot build the base segment\n");
        return 1;
    }
    compute_anchors();
    static const mv_test tests[] = {
        {"hostile segment corpus", test_corpus},
    };
    int failed = MV_TEST_RUN("hostile", tests);
    return failed;
}
