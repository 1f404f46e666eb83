/* Unit tests for libmicroview: open, register, update, read back through the segment reader. */
#include "microview.h"
#include "mv_segment.h"
#include "mv_test.h"

#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char g_dir[256];
static int g_seq;

static int suite_init(void)
{
    const char *t = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/mvtest-XXXXXX", t && *t ? t : "/tmp");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int suite_clean(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* A new file of `size` bytes filled with `fill`; returns its path (static buffer). */
static const char *new_file(size_t size, int fill)
{
    static char path[300];
    snprintf(path, sizeof path, "%s/seg%d", g_dir, g_seq++);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    CU_ASSERT_FATAL(fd >= 0);
    unsigned char *buf = malloc(size);
    CU_ASSERT_FATAL(buf != NULL);
    memset(buf, fill, size);
    CU_ASSERT_FATAL(write(fd, buf, size) == (ssize_t)size);
    free(buf);
    close(fd);
    return path;
}

/* Reads the whole file into a malloc'ed, 8-aligned buffer. */
static uint64_t *read_file(const char *path, size_t *len)
{
    struct stat st;
    CU_ASSERT_FATAL(stat(path, &st) == 0);
    uint64_t *buf = calloc(1, ((size_t)st.st_size + 7) & ~(size_t)7);
    int fd = open(path, O_RDONLY);
    CU_ASSERT_FATAL(fd >= 0 && buf);
    CU_ASSERT_FATAL(read(fd, buf, (size_t)st.st_size) == st.st_size);
    close(fd);
    *len = (size_t)st.st_size;
    return buf;
}

static mv_seg_catalog *parse_file(const char *path, uint64_t **copy)
{
    size_t len;
    mv_seg_catalog *c;
    mv_seg_error e;
    *copy = read_file(path, &len);
    mv_seg_reason r = mv_seg_catalog_parse(*copy, len, len, &c, &e);
    if (r != MV_SEG_OK)
        fprintf(stderr, "parse %s: %s: %s\n", path, mv_seg_reason_name(r), e.detail);
    CU_ASSERT_EQUAL_FATAL(r, MV_SEG_OK);
    CU_ASSERT_EQUAL_FATAL(mv_seg_hot_check(c, *copy, len, NULL, &e), MV_SEG_OK);
    return c;
}

static const mv_seg_metric *find(const mv_seg_catalog *c, const char *name, const char *lv)
{
    for (size_t i = 0; i < mv_seg_catalog_count(c); i++) {
        const mv_seg_metric *m = mv_seg_catalog_metric(c, i);
        if (strcmp(m->name, name) == 0 &&
            (!lv || (m->label_count && strcmp(m->labels[0].value, lv) == 0)))
            return m;
    }
    return NULL;
}

static void test_open_errors(void)
{
    mv_segment *s = (mv_segment *)1;
    char path[300];
    snprintf(path, sizeof path, "%s/does-not-exist", g_dir);
    CU_ASSERT_EQUAL(mv_open(path, &s), MV_ERR_NOSEGMENT);
    CU_ASSERT_PTR_NULL(s);
    CU_ASSERT_PTR_NOT_NULL(strstr(mv_errdetail(), "does-not-exist"));
    CU_ASSERT_STRING_EQUAL(mv_strerror(MV_ERR_NOSEGMENT), "segment not found");

    unsetenv(MICROVIEW_ENV_SEGMENT);
    CU_ASSERT_EQUAL(mv_open_from_env(&s), MV_ERR_NOENV);
    CU_ASSERT_PTR_NOT_NULL(strstr(mv_errdetail(), MICROVIEW_ENV_SEGMENT));
    setenv(MICROVIEW_ENV_SEGMENT, "", 1);
    CU_ASSERT_EQUAL(mv_open_from_env(&s), MV_ERR_NOENV);

    /* Garbage, too small, and non-multiple-of-8 files are not segments. */
    CU_ASSERT_EQUAL(mv_open(new_file(4096, 0x5a), &s), MV_ERR_FORMAT);
    CU_ASSERT_PTR_NULL(s);
    CU_ASSERT(strlen(mv_errdetail()) > 0);
    CU_ASSERT_EQUAL(mv_open(new_file(512, 0), &s), MV_ERR_FORMAT);
    CU_ASSERT_EQUAL(mv_open(new_file(4100, 0), &s), MV_ERR_FORMAT);
    /* Zero magic over a non-zero header is not formatted over. */
    const char *p = new_file(4096, 0);
    int fd = open(p, O_WRONLY);
    CU_ASSERT_FATAL(pwrite(fd, "x", 1, 20) == 1);
    close(fd);
    CU_ASSERT_EQUAL(mv_open(p, &s), MV_ERR_FORMAT);
}

static void test_open_formats_zero_file(void)
{
    const char *p = new_file(65536, 0);
    mv_segment *s;
    setenv(MICROVIEW_ENV_SEGMENT, p, 1);
    CU_ASSERT_EQUAL_FATAL(mv_open_from_env(&s), MV_OK);
    CU_ASSERT_EQUAL(mv_segment_size(s), 65536);
    CU_ASSERT_STRING_EQUAL(mv_segment_path(s), p);
    mv_close(s);
    uint64_t *copy;
    mv_seg_catalog *c = parse_file(p, &copy);
    mv_seg_header *h = (mv_seg_header *)(void *)copy;
    CU_ASSERT_EQUAL(h->writer_pid, (uint32_t)getpid());
    CU_ASSERT_NOT_EQUAL(h->heartbeat_ns, 0);
    CU_ASSERT_EQUAL(mv_seg_catalog_count(c), 0);
    uint64_t inst = h->instance;
    mv_seg_catalog_free(c);
    free(copy);
    /* Re-opening keeps the instance (no re-format). */
    CU_ASSERT_EQUAL_FATAL(mv_open(p, &s), MV_OK);
    mv_close(s);
    c = parse_file(p, &copy);
    CU_ASSERT_EQUAL(mv_seg_catalog_instance(c), inst);
    mv_seg_catalog_free(c);
    free(copy);
    mv_close(NULL);
}

static void test_register_update_read(void)
{
    char path[300];
    snprintf(path, sizeof path, "%s", new_file(65536, 0));
    mv_segment *s;
    CU_ASSERT_EQUAL_FATAL(mv_open(path, &s), MV_OK);
    mv_label l_get[] = {{"method", "GET"}}, l_put[] = {{"method", "PUT"}};
    mv_label l_h[] = {{"route", "/api"}, {"code", "200"}};
    mv_counter c1, c2, c1b;
    mv_gauge g;
    mv_histogram *h, *hb;
    double bounds[] = {0.1, 1, 10};

    CU_ASSERT_EQUAL(mv_counter_register(s, "req_total", "Requests.", NULL, l_get, 1, &c1), MV_OK);
    CU_ASSERT_EQUAL(mv_counter_register(s, "req_total", "Requests.", NULL, l_put, 1, &c2), MV_OK);
    CU_ASSERT_PTR_NOT_EQUAL(c1.slot, c2.slot);
    CU_ASSERT_EQUAL(mv_gauge_register(s, "temp", "Temperature.", "celsius", NULL, 0, &g), MV_OK);
    CU_ASSERT_EQUAL(
        mv_histogram_register(s, "lat_seconds", "Latency.", "seconds", l_h, 2, bounds, 3, &h),
        MV_OK);
    /* Same name and labels: same slot. */
    CU_ASSERT_EQUAL(mv_counter_register(s, "req_total", "Other help.", NULL, l_get, 1, &c1b),
                    MV_OK);
    CU_ASSERT_PTR_EQUAL(c1.slot, c1b.slot);
    CU_ASSERT_EQUAL(mv_histogram_register(s, "lat_seconds", NULL, NULL, l_h, 2, bounds, 3, &hb),
                    MV_OK);

    mv_counter_inc(c1);
    mv_counter_add(c1, 41);
    mv_counter_add_local(c2, 7);
    mv_gauge_set(g, 20.5);
    mv_gauge_add(g, -0.25);
    mv_histogram_observe(h, 0.05);
    mv_histogram_observe(h, 1.0); /* le is inclusive */
    mv_histogram_observe(hb, 5);
    mv_histogram_observe(h, 100);
    mv_histogram_observe(h, NAN); /* counted in +Inf, sum NaN (spec section 9.5) */
    mv_heartbeat(s);
    mv_close(s);

    uint64_t *copy;
    mv_seg_catalog *c = parse_file(path, &copy);
    CU_ASSERT_EQUAL(mv_seg_catalog_count(c), 4);
    const mv_seg_metric *m = find(c, "req_total", "GET");
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_STRING_EQUAL(m->help, "Requests.");
    CU_ASSERT_EQUAL(mv_seg_read_counter(copy, m), 42);
    m = find(c, "req_total", "PUT");
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_EQUAL(mv_seg_read_counter(copy, m), 7);
    m = find(c, "temp", NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_EQUAL(m->type, MV_SEG_GAUGE);
    CU_ASSERT_STRING_EQUAL(m->unit, "celsius");
    CU_ASSERT_EQUAL(mv_seg_read_gauge(copy, m), 20.25);
    m = find(c, "lat_seconds", NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_EQUAL_FATAL(m->label_count, 2);
    CU_ASSERT_STRING_EQUAL(m->labels[0].key, "route");
    CU_ASSERT_STRING_EQUAL(m->labels[1].value, "200");
    mv_seg_hist_view hv;
    CU_ASSERT_EQUAL_FATAL(mv_seg_read_histogram(copy, m, &hv), MV_SEG_OK);
    CU_ASSERT_EQUAL(hv.count, 5);
    CU_ASSERT(isnan(hv.sum));
    CU_ASSERT_EQUAL(hv.buckets[0], 1);
    CU_ASSERT_EQUAL(hv.buckets[1], 1);
    CU_ASSERT_EQUAL(hv.buckets[2], 1);
    CU_ASSERT_EQUAL(hv.buckets[3], 2);
    mv_seg_catalog_free(c);
    free(copy);

    /* Values survive a re-open (e.g. a process restart). */
    CU_ASSERT_EQUAL_FATAL(mv_open(path, &s), MV_OK);
    CU_ASSERT_EQUAL(mv_counter_register(s, "req_total", NULL, NULL, l_get, 1, &c1), MV_OK);
    CU_ASSERT_EQUAL(*c1.slot, 42);
    mv_close(s);
}

/* Spec section 5.1: every slot on its own 64-byte line of the value area, in record order;
 * values_used ends at the last slot. */
static void test_placement_lines(void)
{
    char path[300];
    snprintf(path, sizeof path, "%s", new_file(65536, 0));
    mv_segment *s;
    mv_counter c1, c2;
    mv_gauge g;
    mv_histogram *h;
    double b[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512}; /* 14 words: two lines */
    CU_ASSERT_EQUAL_FATAL(mv_open(path, &s), MV_OK);
    CU_ASSERT_EQUAL(mv_counter_register(s, "a_total", NULL, NULL, NULL, 0, &c1), MV_OK);
    CU_ASSERT_EQUAL(mv_histogram_register(s, "h_seconds", NULL, NULL, NULL, 0, b, 10, &h), MV_OK);
    CU_ASSERT_EQUAL(mv_gauge_register(s, "g", NULL, NULL, NULL, 0, &g), MV_OK);
    CU_ASSERT_EQUAL(mv_counter_register(s, "b_total", NULL, NULL, NULL, 0, &c2), MV_OK);
    CU_ASSERT_EQUAL((char *)c2.slot - (char *)c1.slot, 64 + 128 + 64);
    CU_ASSERT_EQUAL((uintptr_t)g.slot % 64, 0);
    mv_close(s);

    uint64_t *copy;
    mv_seg_catalog *c = parse_file(path, &copy);
    static const uint32_t want[] = {0, 64, 192, 256};
    CU_ASSERT_EQUAL_FATAL(mv_seg_catalog_count(c), 4);
    for (size_t i = 0; i < 4; i++)
        CU_ASSERT_EQUAL(mv_seg_catalog_metric(c, i)->value_offset, want[i]);
    CU_ASSERT_EQUAL(mv_seg_catalog_hot_size(c), MV_SEG_HEADER_SIZE + 256 + 8);
    mv_seg_catalog_free(c);
    free(copy);
}

/* Registers counters into a fresh 4 KiB segment (960 value bytes, 3008 catalog bytes) until
 * it is full; returns how many fit and leaves the segment's path in `path`. */
static int fill_4k(char *path, size_t cap, int packed)
{
    snprintf(path, cap, "%s", new_file(4096, 0));
    mv_segment *s;
    mv_counter c;
    char name[32];
    int rc = MV_OK, n;
    if (packed)
        CU_ASSERT_EQUAL_FATAL(setenv(MICROVIEW_ENV_PLACEMENT, "packed", 1), 0);
    rc = mv_open(path, &s);
    unsetenv(MICROVIEW_ENV_PLACEMENT);
    CU_ASSERT_EQUAL_FATAL(rc, MV_OK);
    for (n = 0; n < 200; n++) {
        snprintf(name, sizeof name, "counter_%03d_total", n);
        if ((rc = mv_counter_register(s, name, NULL, NULL, NULL, 0, &c)) != MV_OK)
            break;
    }
    CU_ASSERT_EQUAL(rc, MV_ERR_FULL);
    mv_close(s);
    return n;
}

/* When the value area cannot spare a line per slot (8 value bytes are kept for every further
 * record the catalog area can take), slots are packed: the segment holds as many metrics as
 * with packed slots, and order is kept. */
static void test_placement_fallback(void)
{
    char path[300];
    int packed_n = fill_4k(path, sizeof path, 1);
    int n = fill_4k(path, sizeof path, 0);
    CU_ASSERT_EQUAL(n, packed_n);
    CU_ASSERT(n >= 40);

    uint64_t *copy;
    mv_seg_catalog *cat = parse_file(path, &copy);
    size_t count = mv_seg_catalog_count(cat), lines = 0;
    CU_ASSERT_EQUAL(count, (size_t)n);
    uint32_t prev_end = 0;
    for (size_t i = 0; i < count; i++) {
        const mv_seg_metric *m = mv_seg_catalog_metric(cat, i);
        CU_ASSERT(m->value_offset >= prev_end);
        if (m->value_offset % 64 == 0 && m->value_offset != prev_end)
            lines++;
        prev_end = m->value_offset + m->value_size;
    }
    /* The first ones got lines, later ones are packed right after each other. */
    CU_ASSERT(lines >= 4 && lines < count);
    CU_ASSERT_EQUAL(mv_seg_catalog_metric(cat, 0)->value_offset, 0);
    CU_ASSERT_EQUAL(mv_seg_catalog_metric(cat, 1)->value_offset, 64);
    CU_ASSERT_EQUAL(mv_seg_catalog_metric(cat, count - 1)->value_offset,
                    mv_seg_catalog_metric(cat, count - 2)->value_offset + 8);
    mv_seg_catalog_free(cat);
    free(copy);
}

/* MICROVIEW_PLACEMENT=packed: slots back to back, as before line placement. */
static void test_placement_packed(void)
{
    char path[300];
    snprintf(path, sizeof path, "%s", new_file(65536, 0));
    mv_segment *s;
    mv_counter c1, c2;
    mv_gauge g;
    CU_ASSERT_EQUAL_FATAL(setenv(MICROVIEW_ENV_PLACEMENT, "packed", 1), 0);
    int rc = mv_open(path, &s);
    unsetenv(MICROVIEW_ENV_PLACEMENT);
    CU_ASSERT_EQUAL_FATAL(rc, MV_OK);
    CU_ASSERT_EQUAL(mv_counter_register(s, "a_total", NULL, NULL, NULL, 0, &c1), MV_OK);
    CU_ASSERT_EQUAL(mv_gauge_register(s, "g", NULL, NULL, NULL, 0, &g), MV_OK);
    CU_ASSERT_EQUAL(mv_counter_register(s, "b_total", NULL, NULL, NULL, 0, &c2), MV_OK);
    CU_ASSERT_EQUAL((char *)g.slot - (char *)c1.slot, 8);
    CU_ASSERT_EQUAL((char *)c2.slot - (char *)c1.slot, 16);
    mv_close(s);
    /* A line-placing writer appending later starts on the next line. (Offsets within the new
     * mapping: a_total registered again gives its slot there, as the first metric at 0.) */
    mv_counter a, c3;
    CU_ASSERT_EQUAL_FATAL(mv_open(path, &s), MV_OK);
    CU_ASSERT_EQUAL(mv_counter_register(s, "c_total", NULL, NULL, NULL, 0, &c3), MV_OK);
    CU_ASSERT_EQUAL(mv_counter_register(s, "a_total", NULL, NULL, NULL, 0, &a), MV_OK);
    CU_ASSERT_EQUAL((char *)c3.slot - (char *)a.slot, 64);
    mv_close(s);
}

#define OBSERVERS 2
#define OBSERVES  200000

static void *observer(void *arg)
{
    mv_histogram *h = arg;
    for (int i = 0; i < OBSERVES; i++)
        mv_histogram_observe(h, i % 2 ? 0.5 : 3.0);
    return NULL;
}

/* Concurrent observations lose nothing, whether count and sum share a 16-byte CAS (a slot at
 * a 16-byte boundary) or not (a packed slot 8 bytes past one). */
static void test_histogram_concurrent_exact(void)
{
    for (int packed = 0; packed < 2; packed++) {
        char path[300];
        snprintf(path, sizeof path, "%s", new_file(65536, 0));
        mv_segment *s;
        mv_counter c;
        mv_histogram *h;
        double b[] = {1, 2};
        if (packed)
            CU_ASSERT_EQUAL_FATAL(setenv(MICROVIEW_ENV_PLACEMENT, "packed", 1), 0);
        int rc = mv_open(path, &s);
        unsetenv(MICROVIEW_ENV_PLACEMENT);
        CU_ASSERT_EQUAL_FATAL(rc, MV_OK);
        CU_ASSERT_EQUAL(mv_counter_register(s, "first_total", NULL, NULL, NULL, 0, &c), MV_OK);
        CU_ASSERT_EQUAL_FATAL(mv_histogram_register(s, "h_seconds", NULL, NULL, NULL, 0, b, 2, &h),
                              MV_OK);
        pthread_t t[OBSERVERS];
        for (int i = 0; i < OBSERVERS; i++)
            CU_ASSERT_FATAL(pthread_create(&t[i], NULL, observer, h) == 0);
        for (int i = 0; i < OBSERVERS; i++)
            pthread_join(t[i], NULL);
        /* mv_histogram_read gives the same totals, and a sharded histogram's shards summed */
        mv_histogram *hs;
        CU_ASSERT_EQUAL(mv_set_shards(s, 4), MV_OK);
        CU_ASSERT_EQUAL_FATAL(mv_histogram_register(s, "hs", NULL, NULL, NULL, 0, b, 2, &hs),
                              MV_OK);
        CU_ASSERT_EQUAL(mv_set_shards(s, 1), MV_OK);
        for (int i = 0; i < OBSERVERS; i++)
            CU_ASSERT_FATAL(pthread_create(&t[i], NULL, observer, hs) == 0);
        for (int i = 0; i < OBSERVERS; i++)
            pthread_join(t[i], NULL);
        for (int k = 0; k < 2; k++) {
            uint64_t count, buckets[3];
            double sum;
            CU_ASSERT_EQUAL(mv_histogram_read(k ? hs : h, &count, &sum, buckets, NULL), 2);
            CU_ASSERT_EQUAL(count, (uint64_t)OBSERVERS * OBSERVES);
            CU_ASSERT_EQUAL(sum, OBSERVERS * (OBSERVES / 2) * 3.5);
            CU_ASSERT_EQUAL(buckets[0], (uint64_t)OBSERVERS * OBSERVES / 2);
            CU_ASSERT_EQUAL(buckets[1], 0);
            CU_ASSERT_EQUAL(buckets[2], (uint64_t)OBSERVERS * OBSERVES / 2);
        }
        mv_close(s);

        uint64_t *copy;
        mv_seg_catalog *cat = parse_file(path, &copy);
        const mv_seg_metric *m = find(cat, "h_seconds", NULL);
        CU_ASSERT_PTR_NOT_NULL_FATAL(m);
        CU_ASSERT_EQUAL(m->value_offset % 16, packed ? 8u : 0u);
        mv_seg_hist_view hv;
        CU_ASSERT_EQUAL_FATAL(mv_seg_read_histogram(copy, m, &hv), MV_SEG_OK);
        CU_ASSERT_EQUAL(hv.count, (uint64_t)OBSERVERS * OBSERVES);
        CU_ASSERT_EQUAL(hv.sum, OBSERVERS * (OBSERVES / 2) * 3.5);
        CU_ASSERT_EQUAL(hv.buckets[0], (uint64_t)OBSERVERS * OBSERVES / 2);
        CU_ASSERT_EQUAL(hv.buckets[1], 0);
        CU_ASSERT_EQUAL(hv.buckets[2], (uint64_t)OBSERVERS * OBSERVES / 2);
        mv_seg_catalog_free(cat);
        free(copy);
    }
}

static void test_register_errors(void)
{
    mv_segment *s;
    CU_ASSERT_EQUAL_FATAL(mv_open(new_file(65536, 0), &s), MV_OK);
    mv_counter c;
    mv_gauge g;
    mv_histogram *h;
    double bounds[] = {1, 2}, bad_bounds[] = {2, 1};
    mv_label dup[] = {{"a", "1"}, {"a", "2"}}, bad[] = {{"a-b", "1"}}, le[] = {{"le", "1"}};

    CU_ASSERT_EQUAL(mv_counter_register(s, "x_total", NULL, NULL, NULL, 0, &c), MV_OK);
    CU_ASSERT_EQUAL(mv_gauge_register(s, "x_total", NULL, NULL, NULL, 0, &g), MV_ERR_CONFLICT);
    CU_ASSERT_PTR_NOT_NULL(strstr(mv_errdetail(), "x_total"));
    CU_ASSERT_EQUAL(mv_histogram_register(s, "x_total", NULL, NULL, NULL, 0, bounds, 2, &h),
                    MV_ERR_CONFLICT);
    CU_ASSERT_EQUAL(mv_histogram_register(s, "hh", NULL, NULL, NULL, 0, bounds, 2, &h), MV_OK);
    CU_ASSERT_EQUAL(mv_histogram_register(s, "hh", NULL, NULL, NULL, 0, bounds, 1, &h),
                    MV_ERR_CONFLICT);

    CU_ASSERT_EQUAL(mv_counter_register(s, "9bad", NULL, NULL, NULL, 0, &c), MV_ERR_NAME);
    CU_ASSERT_EQUAL(mv_counter_register(s, "a-b", NULL, NULL, NULL, 0, &c), MV_ERR_NAME);
    CU_ASSERT_EQUAL(mv_counter_register(s, "__x", NULL, NULL, NULL, 0, &c), MV_ERR_NAME);
    CU_ASSERT_EQUAL(mv_counter_register(s, "", NULL, NULL, NULL, 0, &c), MV_ERR_NAME);
    CU_ASSERT_EQUAL(mv_counter_register(s, "ok", NULL, NULL, bad, 1, &c), MV_ERR_NAME);
    CU_ASSERT_EQUAL(mv_histogram_register(s, "hl", NULL, NULL, le, 1, bounds, 2, &h), MV_ERR_NAME);
    char longname[300];
    memset(longname, 'a', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    CU_ASSERT_EQUAL(mv_counter_register(s, longname, NULL, NULL, NULL, 0, &c), MV_ERR_NAME);
    CU_ASSERT_EQUAL(mv_counter_register(s, NULL, NULL, NULL, NULL, 0, &c), MV_ERR_INVALID);
    CU_ASSERT_EQUAL(mv_counter_register(s, "ok", NULL, NULL, dup, 2, &c), MV_ERR_INVALID);
    CU_ASSERT_EQUAL(mv_counter_register(s, "ok", "\xff", NULL, NULL, 0, &c), MV_ERR_INVALID);
    CU_ASSERT_EQUAL(mv_histogram_register(s, "hb", NULL, NULL, NULL, 0, bad_bounds, 2, &h),
                    MV_ERR_INVALID);
    CU_ASSERT_EQUAL(mv_histogram_register(s, "hb", NULL, NULL, NULL, 0, bounds, 0, &h),
                    MV_ERR_INVALID);

    /* A failed registration leaves a handle that is safe to use. */
    CU_ASSERT_EQUAL(mv_counter_register(s, "9bad", NULL, NULL, NULL, 0, &c), MV_ERR_NAME);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c.slot);
    mv_counter_inc(c);
    mv_counter_add_local(c, 3);
    CU_ASSERT_EQUAL(mv_gauge_register(s, "x_total", NULL, NULL, NULL, 0, &g), MV_ERR_CONFLICT);
    mv_gauge_set(g, 1.5);
    mv_gauge_add(g, 1);
    CU_ASSERT_EQUAL(mv_histogram_register(s, "hb", NULL, NULL, NULL, 0, bad_bounds, 2, &h),
                    MV_ERR_INVALID);
    CU_ASSERT_PTR_NOT_NULL_FATAL(h);
    mv_histogram_observe(h, 1.0);
    mv_histogram_observe(NULL, 1.0);
    mv_close(s);
}

static void test_full(void)
{
    mv_segment *s;
    mv_counter c;
    char name[32];
    int rc = MV_OK, n;

    /* 1 KiB: 512 value bytes, 384 catalog bytes: the catalog fills first. */
    CU_ASSERT_EQUAL_FATAL(mv_open(new_file(1024, 0), &s), MV_OK);
    for (n = 0; n < 100 && rc == MV_OK; n++) {
        snprintf(name, sizeof name, "counter_%03d", n);
        rc = mv_counter_register(s, name, NULL, NULL, NULL, 0, &c);
    }
    CU_ASSERT_EQUAL(rc, MV_ERR_FULL);
    CU_ASSERT_PTR_NOT_NULL(strstr(mv_errdetail(), "catalog"));
    CU_ASSERT(n > 1 && n < 100);
    mv_counter_inc(c); /* scratch */
    mv_close(s);

    /* A segment formatted with a 64-byte value area: values fill first. */
    const char *p = new_file(4096, 0);
    int fd = open(p, O_RDWR);
    void *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    CU_ASSERT_FATAL(m != MAP_FAILED);
    mv_seg_error e;
    CU_ASSERT_EQUAL_FATAL(mv_seg_format(m, 4096, 64, &e), MV_SEG_OK);
    munmap(m, 4096);
    CU_ASSERT_EQUAL_FATAL(mv_open(p, &s), MV_OK);
    rc = MV_OK;
    for (n = 0; n < 100 && rc == MV_OK; n++) {
        snprintf(name, sizeof name, "c%d", n);
        rc = mv_counter_register(s, name, NULL, NULL, NULL, 0, &c);
    }
    CU_ASSERT_EQUAL(rc, MV_ERR_FULL);
    CU_ASSERT_EQUAL(n, 9); /* 8 counters fit in 64 bytes */
    CU_ASSERT_PTR_NOT_NULL(strstr(mv_errdetail(), "value area"));
    /* The error names the size to ask for in the pod annotation: twice this one. */
    CU_ASSERT_PTR_NOT_NULL(strstr(mv_errdetail(), "segment full: value area has 64 of 64"));
    CU_ASSERT_PTR_NOT_NULL(strstr(mv_errdetail(), "counter c8 needs 8; this segment is 4Ki"));
    CU_ASSERT_PTR_NOT_NULL(strstr(mv_errdetail(), "microview.io/metrics-memory: 8Ki"));
    mv_usage u;
    CU_ASSERT_EQUAL(mv_segment_usage(s, &u), MV_OK);
    CU_ASSERT_EQUAL(u.segment_size, 4096);
    CU_ASSERT_EQUAL(u.values_used, 64);
    CU_ASSERT_EQUAL(u.values_size, 64);
    CU_ASSERT_EQUAL(u.records, 8);
    CU_ASSERT(u.catalog_used > 0 && u.catalog_used < u.catalog_size);
    CU_ASSERT_EQUAL(u.fullness, 1.0);
    CU_ASSERT_EQUAL(mv_segment_usage(NULL, &u), MV_ERR_INVALID);
    mv_histogram *h;
    double b[] = {1};
    CU_ASSERT_EQUAL(mv_histogram_register(s, "hx", NULL, NULL, NULL, 0, b, 1, &h), MV_ERR_FULL);
    mv_histogram_observe(h, 1);
    mv_close(s);
}

/* Fractional counters (type 4): fractions are kept exactly as client_golang keeps them,
 * integral adds go to word 0, NaN and negative adds are refused, and readers (this
 * process's and the format reader) see f64(int) + frac. */
static void test_counter_f(void)
{
    const char *path = new_file(65536, 0);
    mv_segment *s;
    CU_ASSERT_EQUAL_FATAL(mv_open(path, &s), MV_OK);
    mv_counter_f c, c2, same;
    mv_counter k;
    CU_ASSERT_EQUAL_FATAL(
        mv_counter_f_register(s, "busy_seconds_total", "Busy.", NULL, NULL, 0, &c), MV_OK);
    CU_ASSERT_EQUAL(mv_counter_f_register(s, "busy_seconds_total", NULL, NULL, NULL, 0, &same),
                    MV_OK);
    CU_ASSERT_PTR_EQUAL(c.slot, same.slot);
    /* One name, one type: a type 1 counter of the same name is a conflict. */
    CU_ASSERT_EQUAL(mv_counter_register(s, "busy_seconds_total", NULL, NULL, NULL, 0, &k),
                    MV_ERR_CONFLICT);
    for (int i = 0; i < 6; i++)
        CU_ASSERT_EQUAL(mv_counter_f_add(c, 0.25), MV_OK);
    mv_counter_f_inc(c);
    CU_ASSERT_EQUAL(mv_counter_f_add(c, 2.0), MV_OK);
    CU_ASSERT_EQUAL(mv_counter_f_add(c, -0.0), MV_OK);
    CU_ASSERT_EQUAL(mv_counter_f_add(c, -1.0), MV_ERR_INVALID);
    CU_ASSERT_EQUAL(mv_counter_f_add(c, NAN), MV_ERR_INVALID);
    CU_ASSERT_EQUAL(mv_counter_f_value(c), 4.5);
    uint64_t *w = (uint64_t *)(void *)((uintptr_t)c.slot & ~(uintptr_t)7);
    CU_ASSERT_EQUAL(w[0], 3);
    double frac;
    memcpy(&frac, &w[1], 8);
    CU_ASSERT_EQUAL(frac, 1.5);
    /* Sharded: every shard holds both words, the reader sums them. */
    CU_ASSERT_EQUAL(mv_set_shards(s, 4), MV_OK);
    CU_ASSERT_EQUAL_FATAL(mv_counter_f_register(s, "work_seconds_total", NULL, NULL, NULL, 0, &c2),
                          MV_OK);
    CU_ASSERT_EQUAL(mv_counter_f_add(c2, 0.5), MV_OK);
    CU_ASSERT_EQUAL(mv_counter_f_add(c2, 7), MV_OK);
    CU_ASSERT_EQUAL(mv_counter_f_add(c2, INFINITY), MV_OK);
    CU_ASSERT(isinf(mv_counter_f_value(c2)));
    mv_close(s);

    uint64_t *copy;
    mv_seg_catalog *cat = parse_file(path, &copy);
    const mv_seg_metric *m = find(cat, "busy_seconds_total", NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_EQUAL(m->type, MV_SEG_COUNTER_F);
    CU_ASSERT_EQUAL(m->value_size, 16);
    CU_ASSERT(mv_seg_is_counter(m->type));
    CU_ASSERT_EQUAL(mv_seg_read_counter_f(copy, m), 4.5);
    m = find(cat, "work_seconds_total", NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_EQUAL(m->shards, 4);
    CU_ASSERT_EQUAL(m->value_size, 4 * 64);
    CU_ASSERT(isinf(mv_seg_read_counter_f(copy, m)));
    mv_seg_catalog_free(cat);
    free(copy);
}

/* Deletion (spec section 6.6): a tombstone hides the series, the handle keeps working into
 * the dead slot, re-registering creates it anew from zero, and a name keeps its type. */
static void test_delete(void)
{
    const char *path = new_file(65536, 0);
    mv_segment *s;
    CU_ASSERT_EQUAL_FATAL(mv_open(path, &s), MV_OK);
    mv_label get[] = {{"method", "GET"}}, put[] = {{"method", "PUT"}};
    mv_label two[] = {{"a", "1"}, {"b", "2"}}, two_rev[] = {{"b", "2"}, {"a", "1"}};
    mv_counter c1, c2, again;
    mv_gauge g;
    mv_histogram *h;
    double b[] = {1, 2};
    CU_ASSERT_EQUAL(mv_counter_register(s, "req_total", NULL, NULL, get, 1, &c1), MV_OK);
    CU_ASSERT_EQUAL(mv_counter_register(s, "req_total", NULL, NULL, put, 1, &c2), MV_OK);
    CU_ASSERT_EQUAL(mv_gauge_register(s, "g", NULL, NULL, two, 2, &g), MV_OK);
    CU_ASSERT_EQUAL(mv_histogram_register(s, "h", NULL, NULL, NULL, 0, b, 2, &h), MV_OK);
    mv_counter_add(c1, 10);
    mv_counter_add(c2, 20);
    mv_histogram_observe(h, 1.5);

    CU_ASSERT_EQUAL(mv_delete(s, "req_total", get, 1), 1);
    CU_ASSERT_EQUAL(mv_delete(s, "req_total", get, 1), 0); /* already gone */
    CU_ASSERT_EQUAL(mv_delete(s, "nope", NULL, 0), 0);
    CU_ASSERT_EQUAL(mv_delete(s, "g", two_rev, 2), 0); /* labels in registration order */
    CU_ASSERT_EQUAL(mv_delete(s, "h", NULL, 0), 1);
    CU_ASSERT_EQUAL(mv_delete(NULL, "h", NULL, 0), MV_ERR_INVALID);
    mv_counter_add(c1, 5); /* into the dead slot: invisible */
    mv_usage u;
    CU_ASSERT_EQUAL(mv_segment_usage(s, &u), MV_OK);
    CU_ASSERT_EQUAL(u.records, 6);

    uint64_t *copy;
    mv_seg_catalog *cat = parse_file(path, &copy);
    CU_ASSERT_EQUAL(mv_seg_catalog_count(cat), 2);
    CU_ASSERT_EQUAL(mv_seg_catalog_tombstones(cat), 2);
    CU_ASSERT_PTR_NULL(find(cat, "req_total", "GET"));
    CU_ASSERT_PTR_NULL(find(cat, "h", NULL));
    CU_ASSERT_PTR_NOT_NULL(find(cat, "req_total", "PUT"));
    CU_ASSERT_PTR_NOT_NULL(find(cat, "g", NULL));
    CU_ASSERT_EQUAL(mv_seg_catalog_name_type(cat, "h"), MV_SEG_HISTOGRAM);
    mv_seg_catalog_free(cat);
    free(copy);

    /* Re-created: a new slot from zero, the old handle unchanged. */
    CU_ASSERT_EQUAL(mv_counter_register(s, "req_total", NULL, NULL, get, 1, &again), MV_OK);
    CU_ASSERT_PTR_NOT_EQUAL(again.slot, c1.slot);
    CU_ASSERT_EQUAL(mv_counter_value(again), 0);
    CU_ASSERT_EQUAL(mv_counter_value(c1), 15);
    mv_counter_inc(again);
    /* A deleted name keeps its type; other buckets are allowed. */
    mv_gauge hg;
    CU_ASSERT_EQUAL(mv_gauge_register(s, "h", NULL, NULL, NULL, 0, &hg), MV_ERR_CONFLICT);
    double b2[] = {5};
    CU_ASSERT_EQUAL(mv_histogram_register(s, "h", NULL, NULL, NULL, 0, b2, 1, &h), MV_OK);
    /* Deleted and re-created again. */
    CU_ASSERT_EQUAL(mv_delete(s, "req_total", get, 1), 1);
    CU_ASSERT_EQUAL(mv_counter_register(s, "req_total", NULL, NULL, get, 1, &again), MV_OK);
    mv_counter_add(again, 3);
    mv_close(s);

    cat = parse_file(path, &copy);
    CU_ASSERT_EQUAL(mv_seg_catalog_count(cat), 4);
    CU_ASSERT_EQUAL(mv_seg_catalog_tombstones(cat), 3);
    const mv_seg_metric *m = find(cat, "req_total", "GET");
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_EQUAL(mv_seg_read_counter(copy, m), 3);
    m = find(cat, "h", NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_EQUAL(m->bucket_count, 1);
    /* Live records are listed in record order. */
    CU_ASSERT_STRING_EQUAL(mv_seg_catalog_metric(cat, 0)->labels[0].value, "PUT");
    CU_ASSERT_STRING_EQUAL(mv_seg_catalog_metric(cat, 1)->name, "g");
    mv_seg_catalog_free(cat);
    free(copy);

    /* The repair walk counts tombstones (they have no slot). */
    size_t len;
    uint64_t *raw = read_file(path, &len);
    uint32_t n, cu, vu;
    mv_seg_recount(raw, len, &n, &cu, &vu);
    const mv_seg_header *hd = (const void *)raw;
    CU_ASSERT_EQUAL(n, hd->metric_count);
    CU_ASSERT_EQUAL(cu, hd->catalog_used);
    CU_ASSERT_EQUAL(vu, hd->values_used);
    free(raw);
}

/* A gauge set to NaN stores it; infinities are observed into their buckets. */
static void test_nan_inf(void)
{
    const char *path = new_file(65536, 0);
    mv_segment *s;
    CU_ASSERT_EQUAL_FATAL(mv_open(path, &s), MV_OK);
    mv_gauge g;
    mv_histogram *h;
    double b[] = {1};
    CU_ASSERT_EQUAL(mv_gauge_register(s, "g", NULL, NULL, NULL, 0, &g), MV_OK);
    CU_ASSERT_EQUAL(mv_histogram_register(s, "h", NULL, NULL, NULL, 0, b, 1, &h), MV_OK);
    mv_gauge_set(g, NAN);
    mv_histogram_observe(h, -INFINITY);
    mv_histogram_observe(h, INFINITY);
    mv_histogram_observe(h, NAN);
    /* mv_histogram_read: what this process wrote, as a reader sums it */
    uint64_t count, buckets[2];
    double sum;
    const double *bounds;
    CU_ASSERT_EQUAL(mv_histogram_read(h, &count, &sum, buckets, &bounds), 1);
    CU_ASSERT_EQUAL(count, 3);
    CU_ASSERT(isnan(sum));
    CU_ASSERT_EQUAL(buckets[0], 1);
    CU_ASSERT_EQUAL(buckets[1], 2);
    CU_ASSERT(bounds && bounds[0] == 1);
    mv_close(s);
    uint64_t *copy;
    mv_seg_catalog *cat = parse_file(path, &copy);
    CU_ASSERT(isnan(mv_seg_read_gauge(copy, find(cat, "g", NULL))));
    mv_seg_hist_view hv;
    CU_ASSERT_EQUAL_FATAL(mv_seg_read_histogram(copy, find(cat, "h", NULL), &hv), MV_SEG_OK);
    CU_ASSERT_EQUAL(hv.count, 3);
    CU_ASSERT(isnan(hv.sum));
    CU_ASSERT_EQUAL(hv.buckets[0], 1);
    CU_ASSERT_EQUAL(hv.buckets[1], 2);
    mv_seg_catalog_free(cat);
    free(copy);
}

/* The bucket an observation lands in, by a plain search: the first bound >= v, else the
 * +Inf bucket (NaN too). */
static uint32_t ref_bucket(const double *b, uint32_t n, double v)
{
    uint32_t i = 0;
    while (i < n && !(v <= b[i]))
        i++;
    return i;
}

static uint64_t rng_next(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* A double of any sign, any exponent (denormals included), finite. */
static double rng_double(uint64_t *x)
{
    double d;
    do {
        uint64_t b = rng_next(x);
        memcpy(&d, &b, sizeof d);
    } while (!isfinite(d));
    return d;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Observes each of `vals` into a histogram with `bounds` and checks, after each, that
 * exactly the bucket a plain search picks went up by one. Returns the mismatches. */
static int check_buckets(const double *bounds, uint32_t n, const double *vals, size_t nvals)
{
    const char *path = new_file(65536, 0);
    mv_segment *s;
    mv_histogram *h;
    CU_ASSERT_EQUAL_FATAL(mv_open(path, &s), MV_OK);
    int rc = mv_histogram_register(s, "h", NULL, NULL, NULL, 0, bounds, n, &h);
    if (rc != MV_OK)
        fprintf(stderr, "register %u bounds: %s\n", n, mv_errdetail());
    CU_ASSERT_EQUAL_FATAL(rc, MV_OK);
    uint64_t want[MV_SEG_BUCKETS_MAX + 1] = {0}, got[MV_SEG_BUCKETS_MAX + 1], count;
    double sum;
    int bad = 0;
    for (size_t j = 0; j < nvals; j++) {
        uint32_t r = ref_bucket(bounds, n, vals[j]);
        want[r]++;
        mv_histogram_observe(h, vals[j]);
        mv_histogram_read(h, &count, &sum, got, NULL);
        if (memcmp(got, want, (n + 1) * sizeof got[0]) != 0) {
            if (bad++ < 5)
                fprintf(stderr, "\n  %u bounds [%.17g .. %.17g]: %.17g should land in bucket %u ",
                        n, bounds[0], bounds[n - 1], vals[j], r);
            memcpy(want, got, sizeof want); /* go on from what it did */
        }
    }
    mv_close(s);
    return bad;
}

/* The bucket of an observation: each bound, its neighbouring doubles, the values between
 * bounds, signed zeros, infinities, NaN and random doubles land where a plain search of the
 * bounds puts them, for bounds log-spaced (a Summary's 80), Prometheus' defaults, linear up
 * to the most bounds a record holds, spanning every exponent, packed into a few ulps, and
 * random. */
static void test_histogram_bucket_lookup(void)
{
    static double sets[8][MV_SEG_BUCKETS_MAX];
    uint32_t ns[8] = {0};
    for (int i = 0; i < 80; i++)
        sets[0][i] = 1e-4 * pow(1.25, i);
    ns[0] = 80;
    const double prom[] = {.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10};
    memcpy(sets[1], prom, sizeof prom);
    ns[1] = 11;
    for (int i = 0; i < MV_SEG_BUCKETS_MAX; i++)
        sets[2][i] = i + 1;
    ns[2] = MV_SEG_BUCKETS_MAX;
    const double wide[] = {-DBL_MAX, -1e300,   -5,     -1, -1e-300, -4.9e-324, 0,
                           4.9e-324, 2.2e-308, 1e-300, 1,  1e300,   DBL_MAX};
    memcpy(sets[3], wide, sizeof wide);
    ns[3] = sizeof wide / sizeof wide[0];
    sets[4][0] = 0;
    ns[4] = 1;
    sets[5][0] = 1;
    for (int i = 1; i < 40; i++) /* 40 bounds one ulp apart */
        sets[5][i] = nextafter(sets[5][i - 1], 2);
    ns[5] = 40;
    const double nz[] = {-1, -0.0, 1};
    memcpy(sets[6], nz, sizeof nz);
    ns[6] = 3;
    sets[7][0] = -0.0;
    ns[7] = 1;

    uint64_t x = 0x9e3779b97f4a7c15ull;
    static double vals[8 * MV_SEG_BUCKETS_MAX + 4096];
    int bad = 0, sets_checked = 0;
    for (int k = 0; k < 8 + 120; k++) {
        double rb[MV_SEG_BUCKETS_MAX];
        const double *b = k < 8 ? sets[k] : rb;
        uint32_t n = k < 8 ? ns[k] : 0;
        if (k >= 8) { /* random bounds: any exponent, or a narrow range */
            uint32_t want = 1 + (uint32_t)(rng_next(&x) % MV_SEG_BUCKETS_MAX);
            int narrow = k % 2;
            for (uint32_t i = 0; i < want; i++)
                rb[i] = narrow ? 1000.0 + (double)(rng_next(&x) % 100000) / 97.0 : rng_double(&x);
            qsort(rb, want, sizeof rb[0], cmp_double);
            for (uint32_t i = 0; i < want; i++) /* strictly ascending, one zero */
                if (n == 0 || rb[i] > rb[n - 1])
                    rb[n++] = rb[i];
        }
        size_t nv = 0;
        for (uint32_t i = 0; i < n; i++) {
            vals[nv++] = b[i];
            vals[nv++] = nextafter(b[i], -INFINITY);
            vals[nv++] = nextafter(b[i], INFINITY);
            if (i + 1 < n)
                vals[nv++] = b[i] / 2 + b[i + 1] / 2;
        }
        const double edge[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, DBL_MAX, -DBL_MAX, 4.9e-324};
        for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++)
            vals[nv++] = edge[i];
        for (int i = 0; i < 2000; i++) /* random: anywhere, and within the bounds' range */
            vals[nv++] = i % 2 ? rng_double(&x)
                               : b[0] + (b[n - 1] - b[0]) * ((double)(rng_next(&x) >> 11) / 0x1p53);
        bad += check_buckets(b, n, vals, nv);
        sets_checked++;
    }
    printf("\n  %d bound sets, %d misplaced observations ", sets_checked, bad);
    CU_ASSERT_EQUAL(bad, 0);
}

/* Gauge adds take this thread's last stored value as their first guess: they stay exact
 * when the word changed since (a set, another thread's add, another gauge in between), and
 * when two threads add to one gauge and each to one of its own, interleaved. */
typedef struct adder {
    mv_gauge shared, own;
} adder;

static void *gauge_adder(void *arg)
{
    adder *a = arg;
    for (int i = 0; i < OBSERVES; i++) {
        mv_gauge_add(a->shared, 1.0);
        if (i % 3 == 0)
            mv_gauge_add(a->own, 2.0);
    }
    return NULL;
}

static void *add_ten(void *arg)
{
    mv_gauge_add(*(mv_gauge *)arg, 10.0);
    return NULL;
}

static void test_gauge_add_exact(void)
{
    mv_segment *s;
    mv_gauge g1, g2, own[OBSERVERS];
    CU_ASSERT_EQUAL_FATAL(mv_open(new_file(16384, 0), &s), MV_OK);
    CU_ASSERT_EQUAL(mv_gauge_register(s, "g1", NULL, NULL, NULL, 0, &g1), MV_OK);
    CU_ASSERT_EQUAL(mv_gauge_register(s, "g2", NULL, NULL, NULL, 0, &g2), MV_OK);
    mv_gauge_add(g1, 1.0);
    CU_ASSERT_EQUAL(mv_gauge_value(g1), 1.0);
    mv_gauge_set(g1, 100.0); /* this thread's guess for g1 is stale now */
    mv_gauge_add(g1, 1.0);
    CU_ASSERT_EQUAL(mv_gauge_value(g1), 101.0);
    mv_gauge_add(g2, 2.0); /* another gauge in between */
    mv_gauge_add(g1, 1.0);
    CU_ASSERT_EQUAL(mv_gauge_value(g1), 102.0);
    CU_ASSERT_EQUAL(mv_gauge_value(g2), 2.0);
    pthread_t t;
    CU_ASSERT_FATAL(pthread_create(&t, NULL, add_ten, &g1) == 0); /* another thread's add */
    pthread_join(t, NULL);
    mv_gauge_add(g1, 1.0);
    CU_ASSERT_EQUAL(mv_gauge_value(g1), 113.0);

    adder a[OBSERVERS];
    pthread_t th[OBSERVERS];
    char name[16];
    for (int i = 0; i < OBSERVERS; i++) {
        snprintf(name, sizeof name, "own%d", i);
        CU_ASSERT_EQUAL(mv_gauge_register(s, name, NULL, NULL, NULL, 0, &own[i]), MV_OK);
        a[i] = (adder){g2, own[i]};
        CU_ASSERT_FATAL(pthread_create(&th[i], NULL, gauge_adder, &a[i]) == 0);
    }
    for (int i = 0; i < OBSERVERS; i++)
        pthread_join(th[i], NULL);
    CU_ASSERT_EQUAL(mv_gauge_value(g2), 2.0 + (double)OBSERVERS * OBSERVES);
    for (int i = 0; i < OBSERVERS; i++)
        CU_ASSERT_EQUAL(mv_gauge_value(own[i]), 2.0 * ((OBSERVES + 2) / 3));
    mv_close(s);
}

static void test_exponential_buckets(void)
{
    double b[160];
    CU_ASSERT_EQUAL(mv_exponential_buckets(0.001, 10, 4, b), MV_OK);
    CU_ASSERT_DOUBLE_EQUAL(b[0], 0.001, 1e-15);
    CU_ASSERT_DOUBLE_EQUAL(b[3], 1.0, 1e-12);
    CU_ASSERT_EQUAL(mv_exponential_buckets(1, 2, 160, b), MV_OK);
    CU_ASSERT_EQUAL(b[10], 1024.0);
    CU_ASSERT_EQUAL(mv_exponential_buckets(0, 2, 4, b), MV_ERR_INVALID);
    CU_ASSERT_EQUAL(mv_exponential_buckets(-1, 2, 4, b), MV_ERR_INVALID);
    CU_ASSERT_EQUAL(mv_exponential_buckets(1, 1, 4, b), MV_ERR_INVALID);
    CU_ASSERT_EQUAL(mv_exponential_buckets(1, NAN, 4, b), MV_ERR_INVALID);
    CU_ASSERT_EQUAL(mv_exponential_buckets(1, 2, 0, b), MV_ERR_INVALID);
    CU_ASSERT_EQUAL(mv_exponential_buckets(1, 2, 161, b), MV_ERR_INVALID);
    CU_ASSERT_EQUAL(mv_exponential_buckets(1e300, 1e10, 10, b), MV_ERR_INVALID);
}

#define FORK_METRICS 400

static int child_register(const char *path, const char *who)
{
    mv_segment *s;
    if (mv_open(path, &s) != MV_OK) {
        fprintf(stderr, "child %s: open: %s\n", who, mv_errdetail());
        return 1;
    }
    for (int i = 0; i < FORK_METRICS; i++) {
        mv_label l[] = {{"proc", who}};
        char name[32];
        mv_counter c;
        snprintf(name, sizeof name, "m%d_total", i);
        if (mv_counter_register(s, name, NULL, NULL, l, 1, &c) != MV_OK) {
            fprintf(stderr, "child %s: register %s: %s\n", who, name, mv_errdetail());
            return 1;
        }
        mv_counter_add(c, (uint64_t)i + 1);
    }
    mv_close(s);
    return 0;
}

static void test_fork_concurrent(void)
{
    char path[300];
    snprintf(path, sizeof path, "%s", new_file(1024 * 1024, 0));
    pid_t pids[2];
    const char *who[2] = {"a", "b"};
    for (int k = 0; k < 2; k++) {
        pids[k] = fork();
        CU_ASSERT_FATAL(pids[k] >= 0);
        if (pids[k] == 0)
            _exit(child_register(path, who[k]));
    }
    for (int k = 0; k < 2; k++) {
        int st;
        CU_ASSERT_EQUAL(waitpid(pids[k], &st, 0), pids[k]);
        CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    uint64_t *copy;
    mv_seg_catalog *c = parse_file(path, &copy);
    CU_ASSERT_EQUAL(mv_seg_catalog_count(c), 2 * FORK_METRICS);
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < FORK_METRICS; i++) {
            char name[32];
            snprintf(name, sizeof name, "m%d_total", i);
            const mv_seg_metric *m = find(c, name, who[k]);
            CU_ASSERT_PTR_NOT_NULL_FATAL(m);
            CU_ASSERT_EQUAL(mv_seg_read_counter(copy, m), (uint64_t)i + 1);
        }
    }
    mv_seg_header *h = (mv_seg_header *)(void *)copy;
    CU_ASSERT_EQUAL(h->lock, 0);
    CU_ASSERT_EQUAL(h->generation, 4 * FORK_METRICS);
    mv_seg_catalog_free(c);
    free(copy);
}

int main(void)
{
    static const mv_test tests[] = {
        {"open errors", test_open_errors},
        {"open formats a zero file", test_open_formats_zero_file},
        {"register, update, read back", test_register_update_read},
        {"registration errors", test_register_errors},
        {"full segment", test_full},
        {"fractional counters", test_counter_f},
        {"delete and re-create series", test_delete},
        {"NaN and infinities", test_nan_inf},
        {"slots on their own lines", test_placement_lines},
        {"slots packed when the value area is short", test_placement_fallback},
        {"MICROVIEW_PLACEMENT=packed", test_placement_packed},
        {"concurrent observations are exact", test_histogram_concurrent_exact},
        {"gauge adds exact after a set, another thread, another gauge", test_gauge_add_exact},
        {"exponential buckets", test_exponential_buckets},
        {"bucket lookup equals a search of the bounds", test_histogram_bucket_lookup},
        {"two processes register concurrently", test_fork_concurrent},
    };
    return MV_TEST_RUN_FIXTURE("microview", suite_init, suite_clean, tests);
}
