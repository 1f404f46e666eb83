/* Unit tests for sharded metrics (docs/segment-format.md section 5.2): the record flag and
 * shard count as written and validated, per-thread shards in libmicroview, readers that sum
 * them, the fold the collector's pipeline reads, and torn shards under concurrent writers. */
#include "microview.h"
#include "mv_segment.h"
#include "mv_test.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static char *g_dir;
static int g_seq;

#define SEG_SIZE 65536

/* Opens a fresh blank segment file; its path in path[256]. */
static mv_segment *fresh(char *path)
{
    char name[32];
    mv_segment *s;
    snprintf(name, sizeof name, "s%d", g_seq++);
    CU_ASSERT_FATAL(mv_test_blank_file(g_dir, name, SEG_SIZE, path, 256) == 0);
    CU_ASSERT_FATAL(mv_open(path, &s) == MV_OK);
    return s;
}

/* A word-atomic copy of the segment at `path` (as a reader takes it) and its catalog. */
static mv_seg_catalog *copy_of(mv_segment *s, uint64_t **copy)
{
    static uint64_t buf[SEG_SIZE / 8 * 2];
    mv_seg_catalog *c;
    mv_seg_error e;
    FILE *f = fopen(mv_segment_path(s), "rb");
    CU_ASSERT_FATAL(f != NULL);
    void *map = mmap(NULL, SEG_SIZE, PROT_READ, MAP_SHARED, fileno(f), 0);
    fclose(f);
    CU_ASSERT_FATAL(map != MAP_FAILED);
    mv_seg_copy_words(buf, map, SEG_SIZE);
    munmap(map, SEG_SIZE);
    mv_seg_reason r = mv_seg_catalog_parse(buf, SEG_SIZE, SEG_SIZE, &c, &e);
    if (r != MV_SEG_OK)
        fprintf(stderr, "parse: %s\n", e.detail);
    CU_ASSERT_EQUAL_FATAL(r, MV_SEG_OK);
    CU_ASSERT_EQUAL_FATAL(mv_seg_hot_check(c, buf, SEG_SIZE, NULL, &e), MV_SEG_OK);
    *copy = buf;
    return c;
}

static const mv_seg_metric *by_name(const mv_seg_catalog *c, const char *name)
{
    for (size_t i = 0; i < mv_seg_catalog_count(c); i++)
        if (strcmp(mv_seg_catalog_metric(c, i)->name, name) == 0)
            return mv_seg_catalog_metric(c, i);
    CU_FAIL_FATAL("metric not found");
    return NULL;
}

/* The metric as the folded value reads: one value at fold_offset. */
static mv_seg_metric folded(const mv_seg_metric *m)
{
    mv_seg_metric f = *m;
    f.value_offset = m->fold_offset;
    f.shards = 1;
    f.shard_stride = f.shard_size;
    f.value_size = f.shard_size;
    return f;
}

static const double g_bounds[3] = {1, 10, 100};

typedef struct worker {
    mv_counter c;
    mv_gauge g;
    mv_histogram *h;
    int n;
    double v;
} worker;

static void *updater(void *arg)
{
    worker *w = arg;
    for (int i = 0; i < w->n; i++) {
        mv_counter_inc(w->c);
        mv_gauge_add(w->g, 0.5);
        mv_histogram_observe(w->h, w->v);
    }
    return NULL;
}

#define THREADS 4
#define UPDATES 20000

/* Four threads on one sharded counter, gauge and histogram: every update lands (the sum of
 * the shards), the threads used several shards, and the fold holds the same sums. */
static void test_threads_sum(void)
{
    char path[256];
    mv_segment *s = fresh(path);
    worker w[THREADS];
    memset(w, 0, sizeof w);
    CU_ASSERT_EQUAL_FATAL(mv_set_shards(s, 4), MV_OK);
    CU_ASSERT_EQUAL_FATAL(mv_counter_register(s, "c_total", NULL, NULL, NULL, 0, &w[0].c), MV_OK);
    CU_ASSERT_EQUAL_FATAL(mv_gauge_register(s, "g", NULL, NULL, NULL, 0, &w[0].g), MV_OK);
    CU_ASSERT_EQUAL_FATAL(mv_histogram_register(s, "h", NULL, NULL, NULL, 0, g_bounds, 3, &w[0].h),
                          MV_OK);
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = w[0];
        w[i].n = UPDATES;
        w[i].v = 5.0 * (i + 1); /* buckets 1 (5, 10) and 2 (15, 20) */
        CU_ASSERT_FATAL(pthread_create(&t[i], NULL, updater, &w[i]) == 0);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);

    uint64_t *copy;
    mv_seg_catalog *c = copy_of(s, &copy);
    const mv_seg_metric *mc = by_name(c, "c_total"), *mg = by_name(c, "g"), *mh = by_name(c, "h");
    CU_ASSERT_EQUAL(mc->shards, 4);
    CU_ASSERT_EQUAL(mc->shard_stride, 64);
    CU_ASSERT_EQUAL(mc->value_size, 256);
    CU_ASSERT_EQUAL(mc->value_offset % 64, 0);
    CU_ASSERT_EQUAL(mh->shard_size, 8u * 7);
    CU_ASSERT_EQUAL(mh->shard_stride, 64);
    CU_ASSERT_EQUAL(mv_seg_catalog_sharded(c), 3);
    CU_ASSERT_EQUAL(mv_seg_read_counter(copy, mc), (uint64_t)THREADS * UPDATES);
    CU_ASSERT_EQUAL(mv_seg_read_gauge(copy, mg), THREADS * UPDATES * 0.5);
    CU_ASSERT_EQUAL(mv_counter_value(w[0].c), (uint64_t)THREADS * UPDATES); /* the writer's own */
    CU_ASSERT_EQUAL(mv_gauge_value(w[0].g), THREADS * UPDATES * 0.5);
    mv_seg_hist_view hv;
    CU_ASSERT_EQUAL_FATAL(mv_seg_read_histogram(copy, mh, &hv), MV_SEG_OK);
    CU_ASSERT_EQUAL(hv.count, (uint64_t)THREADS * UPDATES);
    CU_ASSERT_EQUAL(hv.sum, UPDATES * (5.0 + 10 + 15 + 20));
    CU_ASSERT_EQUAL(hv.buckets[0], 0);
    CU_ASSERT_EQUAL(hv.buckets[1], 2u * UPDATES);
    CU_ASSERT_EQUAL(hv.buckets[2], 2u * UPDATES);
    CU_ASSERT_EQUAL(hv.buckets[3], 0);
    /* The threads took shards in turn: every shard of the counter has its thread's updates. */
    const uint64_t *cw =
        (const uint64_t *)((const char *)copy + mv_seg_catalog_values_offset(c) + mc->value_offset);
    for (int k = 0; k < 4; k++)
        CU_ASSERT_EQUAL(cw[k * 8], (uint64_t)UPDATES);

    /* The fold: the same sums past the hot size, a histogram that validates. */
    CU_ASSERT(mv_seg_catalog_fold_size(c) == mv_seg_catalog_hot_size(c) + 8 + 8 + mh->shard_size);
    CU_ASSERT(mc->fold_offset + mv_seg_catalog_values_offset(c) >= mv_seg_catalog_hot_size(c));
    CU_ASSERT_EQUAL(mv_seg_fold(c, copy), 0);
    mv_seg_metric fc = folded(mc), fg = folded(mg), fh = folded(mh);
    CU_ASSERT_EQUAL(mv_seg_read_counter(copy, &fc), (uint64_t)THREADS * UPDATES);
    CU_ASSERT_EQUAL(mv_seg_read_gauge(copy, &fg), THREADS * UPDATES * 0.5);
    mv_seg_hist_view fv;
    CU_ASSERT_EQUAL_FATAL(mv_seg_read_histogram(copy, &fh, &fv), MV_SEG_OK);
    CU_ASSERT_EQUAL(fv.count, hv.count);
    CU_ASSERT_EQUAL(fv.sum, hv.sum);
    CU_ASSERT_EQUAL(memcmp(fv.buckets, hv.buckets, 4 * sizeof *fv.buckets), 0);
    /* The copy itself is as read: the shards are still there. */
    CU_ASSERT_EQUAL(mv_seg_read_counter(copy, mc), (uint64_t)THREADS * UPDATES);
    mv_seg_catalog_free(c);
    mv_close(s);
}

/* A torn shard makes the whole histogram read torn, and its fold too. */
static void test_torn_shard(void)
{
    char path[256];
    mv_segment *s = fresh(path);
    mv_histogram *h;
    CU_ASSERT_EQUAL_FATAL(mv_set_shards(s, 2), MV_OK);
    CU_ASSERT_EQUAL_FATAL(mv_histogram_register(s, "h", NULL, NULL, NULL, 0, g_bounds, 3, &h),
                          MV_OK);
    mv_histogram_observe(h, 3);
    uint64_t *copy;
    mv_seg_catalog *c = copy_of(s, &copy);
    const mv_seg_metric *m = by_name(c, "h");
    mv_seg_hist_view hv;
    CU_ASSERT_EQUAL(mv_seg_read_histogram(copy, m, &hv), MV_SEG_OK);
    CU_ASSERT_EQUAL(mv_seg_fold(c, copy), 0);
    /* Shard 1 (untouched by this thread's observation or not) gets a bucket without count. */
    uint64_t *w = (uint64_t *)((char *)copy + mv_seg_catalog_values_offset(c) + m->value_offset +
                               m->shard_stride);
    w[3]++;
    CU_ASSERT_EQUAL(mv_seg_read_histogram(copy, m, &hv), MV_SEG_E_TORN);
    CU_ASSERT_EQUAL(mv_seg_fold(c, copy), 1);
    mv_seg_metric f = folded(m);
    CU_ASSERT_EQUAL(mv_seg_read_histogram(copy, &f, &hv), MV_SEG_E_TORN);
    mv_seg_catalog_free(c);
    mv_close(s);
}

static void *adder(void *arg)
{
    mv_gauge_add(*(mv_gauge *)arg, 1.0);
    return NULL;
}

/* A set on a sharded gauge: what other threads' shards held goes; later adds count on top. */
static void test_gauge_set(void)
{
    char path[256];
    mv_segment *s = fresh(path);
    mv_gauge g;
    CU_ASSERT_EQUAL_FATAL(mv_set_shards(s, 8), MV_OK);
    CU_ASSERT_EQUAL_FATAL(mv_gauge_register(s, "g", NULL, NULL, NULL, 0, &g), MV_OK);
    pthread_t t[3];
    for (int i = 0; i < 3; i++) {
        CU_ASSERT_FATAL(pthread_create(&t[i], NULL, adder, &g) == 0);
        pthread_join(t[i], NULL);
    }
    mv_gauge_add(g, 1.0);
    uint64_t *copy;
    mv_seg_catalog *c = copy_of(s, &copy);
    CU_ASSERT_EQUAL(mv_seg_read_gauge(copy, by_name(c, "g")), 4.0);
    mv_seg_catalog_free(c);
    mv_gauge_set(g, -2.5);
    c = copy_of(s, &copy);
    CU_ASSERT_EQUAL(mv_seg_read_gauge(copy, by_name(c, "g")), -2.5);
    CU_ASSERT_EQUAL(mv_gauge_value(g), -2.5);
    mv_seg_catalog_free(c);
    CU_ASSERT_FATAL(pthread_create(&t[0], NULL, adder, &g) == 0);
    pthread_join(t[0], NULL);
    c = copy_of(s, &copy);
    CU_ASSERT_EQUAL(mv_seg_read_gauge(copy, by_name(c, "g")), -1.5);
    mv_seg_catalog_free(c);
    mv_close(s);
}

/* mv_set_shards' range, $MICROVIEW_SHARDS, and a registered series keeping its shards. */
static void test_set_shards_and_env(void)
{
    char path[256];
    mv_segment *s = fresh(path);
    mv_counter a, b, a2;
    CU_ASSERT_EQUAL(mv_set_shards(s, 0), MV_ERR_INVALID);
    CU_ASSERT_EQUAL(mv_set_shards(s, 3), MV_ERR_INVALID);
    CU_ASSERT_PTR_NOT_NULL(strstr(mv_errdetail(), "power of two"));
    CU_ASSERT_EQUAL(mv_set_shards(s, 128), MV_ERR_INVALID);
    CU_ASSERT_EQUAL(mv_set_shards(NULL, 2), MV_ERR_INVALID);
    CU_ASSERT_EQUAL_FATAL(mv_set_shards(s, 64), MV_OK);
    CU_ASSERT_EQUAL_FATAL(mv_counter_register(s, "a_total", NULL, NULL, NULL, 0, &a), MV_OK);
    CU_ASSERT_EQUAL_FATAL(mv_set_shards(s, 1), MV_OK);
    CU_ASSERT_EQUAL_FATAL(mv_counter_register(s, "b_total", NULL, NULL, NULL, 0, &b), MV_OK);
    CU_ASSERT_EQUAL_FATAL(mv_counter_register(s, "a_total", NULL, NULL, NULL, 0, &a2), MV_OK);
    CU_ASSERT_PTR_EQUAL(a.slot, a2.slot); /* the same series, still sharded */
    mv_counter_add(a2, 3);
    mv_counter_add(b, 4);
    mv_close(s);

    CU_ASSERT_EQUAL_FATAL(setenv(MICROVIEW_ENV_SHARDS, "2", 1), 0);
    CU_ASSERT_EQUAL_FATAL(mv_open(path, &s), MV_OK);
    mv_counter c;
    CU_ASSERT_EQUAL_FATAL(mv_counter_register(s, "c_total", NULL, NULL, NULL, 0, &c), MV_OK);
    mv_close(s);
    CU_ASSERT_EQUAL_FATAL(setenv(MICROVIEW_ENV_SHARDS, "three", 1), 0);
    CU_ASSERT_EQUAL_FATAL(mv_open(path, &s), MV_OK);
    CU_ASSERT_EQUAL_FATAL(mv_counter_register(s, "d_total", NULL, NULL, NULL, 0, &c), MV_OK);
    unsetenv(MICROVIEW_ENV_SHARDS);

    uint64_t *copy;
    mv_seg_catalog *cat = copy_of(s, &copy);
    CU_ASSERT_EQUAL(by_name(cat, "a_total")->shards, 64);
    CU_ASSERT_EQUAL(by_name(cat, "a_total")->value_size, 64u * 64);
    CU_ASSERT_EQUAL(mv_seg_read_counter(copy, by_name(cat, "a_total")), 3);
    CU_ASSERT_EQUAL(by_name(cat, "b_total")->shards, 1);
    CU_ASSERT_EQUAL(mv_seg_read_counter(copy, by_name(cat, "b_total")), 4);
    CU_ASSERT_EQUAL(by_name(cat, "c_total")->shards, 2);
    CU_ASSERT_EQUAL(by_name(cat, "d_total")->shards, 1);
    mv_seg_catalog_free(cat);
    mv_close(s);
}

/* Patches record 0's head of a copy (byte offset `at`, `len` bytes of `val`) and its
 * checksum, and returns what the reader makes of it. */
static mv_seg_reason patched(const uint64_t *orig, size_t at, uint64_t val, size_t len)
{
    static uint64_t buf[SEG_SIZE / 8];
    memcpy(buf, orig, SEG_SIZE);
    const mv_seg_header *h = (const void *)buf;
    char *rec = (char *)buf + h->catalog_offset;
    uint32_t size;
    memcpy(&size, rec, 4);
    memcpy(rec + at, &val, len);
    uint64_t sum = mv_seg_fnv1a64(rec, size - 8);
    memcpy(rec + size - 8, &sum, 8);
    mv_seg_catalog *c = NULL;
    mv_seg_error e;
    mv_seg_reason r = mv_seg_catalog_parse(buf, SEG_SIZE, SEG_SIZE, &c, &e);
    mv_seg_catalog_free(c);
    return r;
}

/* The reader refuses every shard field that breaks section 5.2. */
static void test_reader_rejects(void)
{
    char path[256];
    mv_segment *s = fresh(path);
    mv_counter k;
    CU_ASSERT_EQUAL_FATAL(mv_set_shards(s, 2), MV_OK);
    CU_ASSERT_EQUAL_FATAL(mv_counter_register(s, "k_total", NULL, NULL, NULL, 0, &k), MV_OK);
    uint64_t *copy;
    mv_seg_catalog *c = copy_of(s, &copy);
    mv_seg_catalog_free(c);
    static uint64_t orig[SEG_SIZE / 8];
    memcpy(orig, copy, SEG_SIZE);
    CU_ASSERT_EQUAL(patched(orig, 18, 2, 2), MV_SEG_OK);         /* as written */
    CU_ASSERT_EQUAL(patched(orig, 18, 3, 2), MV_SEG_E_RECORD);   /* not a power of two */
    CU_ASSERT_EQUAL(patched(orig, 18, 1, 2), MV_SEG_E_RECORD);   /* one shard is no shard */
    CU_ASSERT_EQUAL(patched(orig, 18, 0, 2), MV_SEG_E_RECORD);   /* flag without a count */
    CU_ASSERT_EQUAL(patched(orig, 18, 128, 2), MV_SEG_E_RECORD); /* over 64 */
    CU_ASSERT_EQUAL(patched(orig, 5, 0, 1), MV_SEG_E_RECORD);    /* a count without the flag */
    CU_ASSERT_EQUAL(patched(orig, 5, 3, 1), MV_SEG_E_RECORD);    /* an unknown flag */
    CU_ASSERT_EQUAL(patched(orig, 12, 8, 4), MV_SEG_E_RECORD);   /* value_size of one shard */
    CU_ASSERT_EQUAL(patched(orig, 12, 16, 4), MV_SEG_E_RECORD);  /* shards packed */
    mv_close(s);
}

/* Writers on a sharded histogram while a reader copies it word by word: every copy the
 * reader accepts is consistent (count is the sum of the buckets, and never goes back), torn
 * copies are seen as torn, and the final count is exact. On a loaded two-core machine (or
 * under ASan) the reader can see only torn copies while both writers run, so it goes on
 * after they stop until it accepts one: a quiet segment must read clean. */
typedef struct race {
    mv_segment *s;
    mv_histogram *h;
    atomic_int stop;
    uint64_t accepted, torn, bad, after_stop;
} race;

static void *observer(void *arg)
{
    race *r = arg;
    for (int i = 0; i < 200000; i++)
        mv_histogram_observe(r->h, (double)(i % 200));
    return NULL;
}

static void *reader(void *arg)
{
    race *r = arg;
    uint64_t last = 0;
    for (;;) {
        int stopped = atomic_load(&r->stop);
        if (stopped && (r->accepted > 0 || r->after_stop >= 1000))
            break;
        r->after_stop += stopped;
        uint64_t *copy;
        mv_seg_catalog *c = copy_of(r->s, &copy);
        const mv_seg_metric *m = by_name(c, "h");
        mv_seg_hist_view hv;
        if (mv_seg_read_histogram(copy, m, &hv) != MV_SEG_OK) {
            r->torn++;
        } else {
            uint64_t total = 0;
            for (int i = 0; i < 4; i++)
                total += hv.buckets[i];
            r->bad += total != hv.count || hv.count < last;
            last = hv.count;
            r->accepted++;
        }
        mv_seg_catalog_free(c);
    }
    return NULL;
}

static void test_concurrent_reader(void)
{
    char path[256];
    race r = {0};
    r.s = fresh(path);
    CU_ASSERT_EQUAL_FATAL(mv_set_shards(r.s, 2), MV_OK);
    CU_ASSERT_EQUAL_FATAL(mv_histogram_register(r.s, "h", NULL, NULL, NULL, 0, g_bounds, 3, &r.h),
                          MV_OK);
    pthread_t w[2], rd;
    CU_ASSERT_FATAL(pthread_create(&rd, NULL, reader, &r) == 0);
    for (int i = 0; i < 2; i++)
        CU_ASSERT_FATAL(pthread_create(&w[i], NULL, observer, &r) == 0);
    for (int i = 0; i < 2; i++)
        pthread_join(w[i], NULL);
    atomic_store(&r.stop, 1);
    pthread_join(rd, NULL);
    printf("\n  reader: %llu accepted, %llu torn copies, %llu copies after the writers\n",
           (unsigned long long)r.accepted, (unsigned long long)r.torn,
           (unsigned long long)r.after_stop);
    CU_ASSERT(r.accepted > 0);
    CU_ASSERT_EQUAL(r.bad, 0);
    uint64_t *copy;
    mv_seg_catalog *c = copy_of(r.s, &copy);
    mv_seg_hist_view hv;
    CU_ASSERT_EQUAL_FATAL(mv_seg_read_histogram(copy, by_name(c, "h"), &hv), MV_SEG_OK);
    CU_ASSERT_EQUAL(hv.count, 400000u);
    mv_seg_catalog_free(c);
    mv_close(r.s);
}

int main(void)
{
    g_dir = mv_test_tmpdir("test-shards");
    if (!g_dir)
        return 1;
    static const mv_test tests[] = {
        {"threads on sharded metrics: sums, shards, fold", test_threads_sum},
        {"a torn shard: the histogram and its fold read torn", test_torn_shard},
        {"set on a sharded gauge", test_gauge_set},
        {"mv_set_shards, MICROVIEW_SHARDS, registered series", test_set_shards_and_env},
        {"reader rejects bad shard fields", test_reader_rejects},
        {"concurrent writers and a reader", test_concurrent_reader},
    };
    int rc = MV_TEST_RUN("shards", tests);
    mv_test_rmrf(g_dir);
    free(g_dir);
    return rc;
}
