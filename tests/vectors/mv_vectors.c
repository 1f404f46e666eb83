/* mv_vectors: replays a test-vector script (NAME.ops) through libmicroview and writes or checks
 * the exact bytes of the resulting segment (NAME.hex). See tests/vectors/README.md.
 *
 *   mv_vectors gen NAME.ops NAME.hex     write the vector
 *   mv_vectors check DIR                 replay every NAME.ops in DIR, compare with NAME.hex
 */
#include "microview.h"
#include "mv_segment.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define MAX_TOKENS  64
#define MAX_HANDLES 64
#define MAX_SIZE    (1u << 20) /* vectors are small; refuse anything larger */

typedef struct handle {
    char id[32];
    int kind; /* MV_SEG_COUNTER / GAUGE / HISTOGRAM / COUNTER_F */
    mv_counter c;
    mv_counter_f cf;
    /* The series' name and labels, for `delete`. */
    char name[MV_SEG_NAME_MAX + 1];
    char keys[MV_SEG_LABELS_MAX][MV_SEG_LABEL_KEY_MAX + 1];
    char values[MV_SEG_LABELS_MAX][MV_SEG_LABEL_VALUE_MAX + 1];
    size_t nlabels;
    mv_gauge g;
    mv_histogram *h;
} handle;

typedef struct stamp {
    uint32_t off, width;
    uint64_t value;
} stamp;

typedef struct run {
    const char *ops_path;
    int line;
    char path[256];
    uint64_t size;
    mv_segment *seg;
    handle handles[MAX_HANDLES];
    size_t nhandles;
    stamp stamps[8];
    size_t nstamps;
} run;

__attribute__((format(printf, 2, 3))) static int bad(const run *r, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s:%d: ", r->ops_path, r->line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return -1;
}

/* Decodes %XX escapes in place. Returns 0, or -1 on a malformed escape. */
static int unescape(char *s)
{
    char *o = s;
    for (char *p = s; *p; p++) {
        if (*p != '%') {
            *o++ = *p;
            continue;
        }
        unsigned v;
        if (!p[1] || !p[2] || sscanf(p + 1, "%2x", &v) != 1)
            return -1;
        *o++ = (char)v;
        p += 2;
    }
    *o = 0;
    return 0;
}

static int parse_u64(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || end == s || *end)
        return -1;
    *out = v;
    return 0;
}

static int parse_f64(const char *s, double *out)
{
    char *end;
    errno = 0;
    *out = strtod(s, &end);
    return (end == s || *end) ? -1 : 0;
}

static handle *find(run *r, const char *id)
{
    for (size_t i = 0; i < r->nhandles; i++)
        if (strcmp(r->handles[i].id, id) == 0)
            return &r->handles[i];
    return NULL;
}

static int err_code(const char *name)
{
    static const struct {
        const char *n;
        int code;
    } t[] = {{"name", MV_ERR_NAME},          {"invalid", MV_ERR_INVALID},
             {"conflict", MV_ERR_CONFLICT},  {"full", MV_ERR_FULL},
             {"busy", MV_ERR_BUSY},          {"format", MV_ERR_FORMAT},
             {"nosegment", MV_ERR_NOSEGMENT}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (strcmp(t[i].n, name) == 0)
            return t[i].code;
    return 1;
}

/* counter|gauge|histogram ID key=value...; `want` is the expected result code. */
static int do_register(run *r, int kind, char **tok, int ntok, int want)
{
    const char *name = NULL, *help = NULL, *unit = NULL;
    mv_label labels[MV_SEG_LABELS_MAX + 4];
    size_t nl = 0;
    double bounds[MV_SEG_BUCKETS_MAX + 4];
    size_t nb = 0;
    if (ntok < 1)
        return bad(r, "registration needs an id");
    for (int i = 1; i < ntok; i++) {
        char *eq = strchr(tok[i], '=');
        if (!eq)
            return bad(r, "argument %s is not key=value", tok[i]);
        *eq = 0;
        char *k = tok[i], *v = eq + 1;
        if (strcmp(k, "label") == 0) {
            char *eq2 = strchr(v, '=');
            if (!eq2 || nl == sizeof labels / sizeof labels[0])
                return bad(r, "label needs key=value (and at most %zu)",
                           sizeof labels / sizeof labels[0]);
            *eq2 = 0;
            if (unescape(v) || unescape(eq2 + 1))
                return bad(r, "bad %% escape");
            labels[nl].key = v;
            labels[nl++].value = eq2 + 1;
            continue;
        }
        if (strcmp(k, "bounds") == 0) {
            for (char *save, *b = strtok_r(v, ",", &save); b; b = strtok_r(NULL, ",", &save)) {
                if (nb == sizeof bounds / sizeof bounds[0] || parse_f64(b, &bounds[nb++]))
                    return bad(r, "bad bound %s", b);
            }
            continue;
        }
        if (unescape(v))
            return bad(r, "bad %% escape");
        if (strcmp(k, "name") == 0)
            name = v;
        else if (strcmp(k, "help") == 0)
            help = v;
        else if (strcmp(k, "unit") == 0)
            unit = v;
        else
            return bad(r, "unknown argument %s", k);
    }
    handle hd = {.kind = kind};
    snprintf(hd.id, sizeof hd.id, "%s", tok[0]);
    int rc;
    if (kind == MV_SEG_COUNTER)
        rc = mv_counter_register(r->seg, name, help, unit, labels, nl, &hd.c);
    else if (kind == MV_SEG_COUNTER_F)
        rc = mv_counter_f_register(r->seg, name, help, unit, labels, nl, &hd.cf);
    else if (kind == MV_SEG_GAUGE)
        rc = mv_gauge_register(r->seg, name, help, unit, labels, nl, &hd.g);
    else
        rc = mv_histogram_register(r->seg, name, help, unit, labels, nl, bounds, nb, &hd.h);
    if (rc != want)
        return bad(r, "registration of %s returned %s (%s), expected %s", name ? name : "(null)",
                   mv_strerror(rc), mv_errdetail(), mv_strerror(want));
    if (rc == MV_OK) {
        if (r->nhandles == MAX_HANDLES || find(r, hd.id))
            return bad(r, "handle id %s reused (or too many)", hd.id);
        snprintf(hd.name, sizeof hd.name, "%s", name);
        for (size_t i = 0; i < nl && i < MV_SEG_LABELS_MAX; i++) {
            snprintf(hd.keys[i], sizeof hd.keys[i], "%s", labels[i].key);
            snprintf(hd.values[i], sizeof hd.values[i], "%s", labels[i].value);
        }
        hd.nlabels = nl;
        r->handles[r->nhandles++] = hd;
    }
    return 0;
}

static int kind_of(const char *s)
{
    return !strcmp(s, "counter")     ? MV_SEG_COUNTER
           : !strcmp(s, "gauge")     ? MV_SEG_GAUGE
           : !strcmp(s, "histogram") ? MV_SEG_HISTOGRAM
           : !strcmp(s, "counter_f") ? MV_SEG_COUNTER_F
                                     : 0;
}

static int do_line(run *r, char **tok, int ntok)
{
    const char *op = tok[0];
    int kind = kind_of(op);
    if (strcmp(op, "size") == 0) {
        if (ntok != 2 || parse_u64(tok[1], &r->size) || r->size > MAX_SIZE)
            return bad(r, "size N (at most %u)", MAX_SIZE);
        int fd = open(r->path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0 || ftruncate(fd, (off_t)r->size) != 0)
            return bad(r, "%s: %s", r->path, strerror(errno));
        close(fd);
        return 0;
    }
    if (!r->size)
        return bad(r, "the first operation must be `size`");
    if (strcmp(op, "format") == 0) {
        uint64_t inst = 0, created = 0, vsize = 0;
        for (int i = 1; i < ntok; i++) {
            char *eq = strchr(tok[i], '=');
            uint64_t *dst = !eq                                    ? NULL
                            : !strncmp(tok[i], "instance=", 9)     ? &inst
                            : !strncmp(tok[i], "created_ns=", 11)  ? &created
                            : !strncmp(tok[i], "values_size=", 12) ? &vsize
                                                                   : NULL;
            if (!dst || parse_u64(eq + 1, dst))
                return bad(r, "format instance=N created_ns=N [values_size=N]");
        }
        int fd = open(r->path, O_RDWR | O_CLOEXEC);
        void *p =
            fd < 0 ? MAP_FAILED : mmap(NULL, r->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (fd >= 0)
            close(fd);
        if (p == MAP_FAILED)
            return bad(r, "map %s: %s", r->path, strerror(errno));
        mv_seg_error e;
        mv_seg_reason rs = mv_seg_format_with(p, r->size, (uint32_t)vsize, inst, created, &e);
        munmap(p, r->size);
        return rs == MV_SEG_OK ? 0 : bad(r, "format: %s", e.detail);
    }
    if (strcmp(op, "open") == 0) {
        int rc = mv_open(r->path, &r->seg);
        return rc == MV_OK ? 0 : bad(r, "open: %s", mv_errdetail());
    }
    if (strcmp(op, "stamp") == 0) {
        for (int i = 1; i < ntok; i++) {
            static const struct {
                const char *n;
                uint32_t off, width;
            } f[] = {{"instance", 40, 8},
                     {"heartbeat_ns", 72, 8},
                     {"created_ns", 80, 8},
                     {"writer_pid", 88, 4}};
            char *eq = strchr(tok[i], '=');
            size_t k = 0;
            if (eq)
                for (*eq = 0; k < 4 && strcmp(f[k].n, tok[i]); k++)
                    ;
            if (!eq || k == 4 || r->nstamps == 8 || parse_u64(eq + 1, &r->stamps[r->nstamps].value))
                return bad(r, "stamp instance|heartbeat_ns|created_ns|writer_pid=N");
            r->stamps[r->nstamps].off = f[k].off;
            r->stamps[r->nstamps++].width = f[k].width;
        }
        return 0;
    }
    if (!r->seg)
        return bad(r, "`open` must come before %s", op);
    if (strcmp(op, "usage") == 0) { /* usage values_used=N catalog_used=N */
        mv_usage u;
        uint64_t want;
        if (ntok != 3 || mv_segment_usage(r->seg, &u) != MV_OK)
            return bad(r, "usage values_used=N catalog_used=N");
        for (int i = 1; i < 3; i++) {
            char *eq = strchr(tok[i], '=');
            if (!eq || parse_u64(eq + 1, &want))
                return bad(r, "usage values_used=N catalog_used=N");
            *eq = 0;
            uint64_t got = !strcmp(tok[i], "values_used")    ? u.values_used
                           : !strcmp(tok[i], "catalog_used") ? u.catalog_used
                                                             : UINT64_MAX;
            if (got != want)
                return bad(r, "usage: %s is %llu, expected %llu", tok[i], (unsigned long long)got,
                           (unsigned long long)want);
        }
        return 0;
    }
    if (kind)
        return do_register(r, kind, tok + 1, ntok - 1, MV_OK);
    if (strcmp(op, "fail") == 0) {
        int want = ntok >= 3 ? err_code(tok[1]) : 1;
        if (want > 0 || !kind_of(tok[2]))
            return bad(r, "fail name|invalid|conflict|full|busy KIND ID ARGS...");
        return do_register(r, kind_of(tok[2]), tok + 3, ntok - 3, want);
    }
    if (strcmp(op, "refuse") == 0) { /* refuse fadd ID F: the add must be refused */
        handle *h = ntok == 4 ? find(r, tok[2]) : NULL;
        double d;
        if (!h || strcmp(tok[1], "fadd") || h->kind != MV_SEG_COUNTER_F || parse_f64(tok[3], &d))
            return bad(r, "refuse fadd ID F");
        return mv_counter_f_add(h->cf, d) == MV_ERR_INVALID
                   ? 0
                   : bad(r, "fadd %s %s was not refused", tok[2], tok[3]);
    }
    handle *h = ntok >= 2 ? find(r, tok[1]) : NULL;
    if (!h)
        return bad(r, "%s needs a registered handle id", op);
    if (strcmp(op, "inc") == 0 && h->kind == MV_SEG_COUNTER && ntok == 2) {
        mv_counter_inc(h->c);
        return 0;
    }
    if (strcmp(op, "inc") == 0 && h->kind == MV_SEG_COUNTER_F && ntok == 2) {
        mv_counter_f_inc(h->cf);
        return 0;
    }
    if (strcmp(op, "delete") == 0 && ntok == 2) {
        mv_label l[MV_SEG_LABELS_MAX];
        for (size_t i = 0; i < h->nlabels; i++) {
            l[i].key = h->keys[i];
            l[i].value = h->values[i];
        }
        int rc = mv_delete(r->seg, h->name, l, h->nlabels);
        if (rc != 1)
            return bad(r, "delete %s returned %d (%s)", h->id, rc, mv_errdetail());
        h->id[0] = 0; /* the id may name the re-created series */
        return 0;
    }
    uint64_t u;
    double d;
    if (ntok != 3)
        return bad(r, "%s ID VALUE", op);
    if (strcmp(op, "add") == 0 && h->kind == MV_SEG_COUNTER && !parse_u64(tok[2], &u))
        mv_counter_add(h->c, u);
    else if (strcmp(op, "set") == 0 && h->kind == MV_SEG_GAUGE && !parse_f64(tok[2], &d))
        mv_gauge_set(h->g, d);
    else if (strcmp(op, "gadd") == 0 && h->kind == MV_SEG_GAUGE && !parse_f64(tok[2], &d))
        mv_gauge_add(h->g, d);
    else if (strcmp(op, "observe") == 0 && h->kind == MV_SEG_HISTOGRAM && !parse_f64(tok[2], &d))
        mv_histogram_observe(h->h, d);
    else if (strcmp(op, "fadd") == 0 && h->kind == MV_SEG_COUNTER_F && !parse_f64(tok[2], &d)) {
        if (mv_counter_f_add(h->cf, d) != MV_OK)
            return bad(r, "fadd %s %s refused: %s", tok[1], tok[2], mv_errdetail());
    } else
        return bad(r, "unknown operation %s for handle %s (or bad value)", op, tok[1]);
    return 0;
}

/* Replays `ops_path`; on success *out (malloc'ed, *size bytes) is the final segment. */
static int replay(const char *ops_path, unsigned char **out, uint64_t *size)
{
    run *r = calloc(1, sizeof *r);
    FILE *f = fopen(ops_path, "r");
    char line[4096];
    int rc = -1;
    if (!r || !f) {
        fprintf(stderr, "%s: %s\n", ops_path, strerror(errno));
        goto done;
    }
    r->ops_path = ops_path;
    snprintf(r->path, sizeof r->path, "%s/mv_vectors.XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    int tfd = mkstemp(r->path);
    if (tfd < 0) {
        fprintf(stderr, "mkstemp: %s\n", strerror(errno));
        goto done;
    }
    close(tfd);
    while (fgets(line, sizeof line, f)) {
        char *tok[MAX_TOKENS], *save;
        int ntok = 0;
        r->line++;
        for (char *t = strtok_r(line, " \t\r\n", &save); t && *t != '#';
             t = strtok_r(NULL, " \t\r\n", &save)) {
            if (ntok == MAX_TOKENS) {
                bad(r, "more than %d tokens", MAX_TOKENS);
                goto unlink;
            }
            tok[ntok++] = t;
        }
        if (ntok && do_line(r, tok, ntok))
            goto unlink;
    }
    mv_close(r->seg);
    r->seg = NULL;
    unsigned char *buf = malloc(r->size ? r->size : 1);
    int fd = open(r->path, O_RDONLY | O_CLOEXEC);
    if (!buf || fd < 0 || pread(fd, buf, r->size, 0) != (ssize_t)r->size) {
        fprintf(stderr, "%s: reading the segment back failed\n", ops_path);
        free(buf);
        if (fd >= 0)
            close(fd);
        goto unlink;
    }
    close(fd);
    for (size_t i = 0; i < r->nstamps; i++)
        for (uint32_t k = 0; k < r->stamps[i].width; k++)
            buf[r->stamps[i].off + k] = (unsigned char)(r->stamps[i].value >> (8 * k));
    *out = buf;
    *size = r->size;
    rc = 0;
unlink:
    mv_close(r->seg);
    unlink(r->path);
done:
    if (f)
        fclose(f);
    free(r);
    return rc;
}

static int write_hex(const char *path, const char *ops_name, const unsigned char *b, uint64_t n)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return fprintf(stderr, "%s: %s\n", path, strerror(errno)), -1;
    fprintf(f, "# %s replayed through libmicroview by tests/vectors/mv_vectors.c; do not edit.\n",
            ops_name);
    fprintf(f, "# Every byte not listed is zero.\nsize %llu\n", (unsigned long long)n);
    for (uint64_t off = 0; off < n; off += 16) {
        int nz = 0;
        for (int i = 0; i < 16; i++)
            nz |= b[off + i];
        if (!nz)
            continue;
        fprintf(f, "%06llx:", (unsigned long long)off);
        for (int i = 0; i < 16; i++)
            fprintf(f, " %02x", b[off + i]);
        fputc('\n', f);
    }
    return fclose(f) == 0 ? 0 : -1;
}

/* Parses a NAME.hex file. */
static int read_hex(const char *path, unsigned char **out, uint64_t *size)
{
    FILE *f = fopen(path, "r");
    char line[256];
    unsigned char *b = NULL;
    uint64_t n = 0;
    if (!f)
        return fprintf(stderr, "%s: %s\n", path, strerror(errno)), -1;
    while (fgets(line, sizeof line, f)) {
        unsigned long long v;
        unsigned x[16];
        if (line[0] == '#' || line[0] == '\n')
            continue;
        if (!b && sscanf(line, "size %llu", &v) == 1 && v >= 128 && v <= MAX_SIZE && v % 16 == 0) {
            n = v;
            if (!(b = calloc(1, n)))
                break;
            continue;
        }
        if (b &&
            sscanf(line, "%llx: %x %x %x %x %x %x %x %x %x %x %x %x %x %x %x %x", &v, &x[0], &x[1],
                   &x[2], &x[3], &x[4], &x[5], &x[6], &x[7], &x[8], &x[9], &x[10], &x[11], &x[12],
                   &x[13], &x[14], &x[15]) == 17 &&
            v % 16 == 0 && v + 16 <= n) {
            for (int i = 0; i < 16; i++)
                b[v + i] = (unsigned char)x[i];
            continue;
        }
        fprintf(stderr, "%s: cannot parse line: %s", path, line);
        free(b);
        fclose(f);
        return -1;
    }
    fclose(f);
    if (!b)
        return fprintf(stderr, "%s: no size line\n", path), -1;
    *out = b;
    *size = n;
    return 0;
}

static int check_one(const char *dir, const char *ops_name)
{
    char ops[1024], hex[1024];
    unsigned char *got = NULL, *want = NULL;
    uint64_t ng = 0, nw = 0;
    int rc = -1;
    snprintf(ops, sizeof ops, "%s/%s", dir, ops_name);
    snprintf(hex, sizeof hex, "%.*s.hex", (int)(strlen(ops) - 4), ops);
    if (replay(ops, &got, &ng) || read_hex(hex, &want, &nw))
        goto out;
    if (ng != nw) {
        fprintf(stderr, "FAIL %s: segment is %llu bytes, vector %llu\n", ops_name,
                (unsigned long long)ng, (unsigned long long)nw);
        goto out;
    }
    for (uint64_t i = 0; i < ng; i++) {
        if (got[i] != want[i]) {
            fprintf(stderr,
                    "FAIL %s: first difference at byte 0x%llx: libmicroview wrote %02x, "
                    "vector has %02x\n",
                    ops_name, (unsigned long long)i, got[i], want[i]);
            goto out;
        }
    }
    printf("PASS %s (%llu bytes)\n", ops_name, (unsigned long long)ng);
    rc = 0;
out:
    free(got);
    free(want);
    return rc;
}

static int has_suffix(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a > b && strcmp(s + a - b, suf) == 0;
}

int main(int argc, char **argv)
{
    unsetenv(MICROVIEW_ENV_PLACEMENT); /* the vectors pin the default slot placement */
    if (argc == 4 && strcmp(argv[1], "gen") == 0) {
        unsigned char *b;
        uint64_t n;
        const char *base = strrchr(argv[2], '/');
        if (replay(argv[2], &b, &n))
            return 1;
        int rc = write_hex(argv[3], base ? base + 1 : argv[2], b, n);
        free(b);
        return rc ? 1 : 0;
    }
    if (argc == 3 && strcmp(argv[1], "check") == 0) {
        DIR *d = opendir(argv[2]);
        struct dirent *e;
        int fails = 0, n = 0;
        if (!d)
            return fprintf(stderr, "%s: %s\n", argv[2], strerror(errno)), 1;
        while ((e = readdir(d))) {
            if (!has_suffix(e->d_name, ".ops"))
                continue;
            n++;
            fails += check_one(argv[2], e->d_name) != 0;
        }
        closedir(d);
        printf("vectors: %d checked, %d failed\n", n, fails);
        return fails || n == 0 ? 1 : 0;
    }
    fprintf(stderr, "usage: mv_vectors gen NAME.ops NAME.hex | mv_vectors check DIR\n");
    return 2;
}
