/* Torture test: writer threads hammer counters, gauges and histograms while reader threads copy
 * the whole hot area with plain memcpy and validate it; no torn value may ever be accepted.
 *
 * Values are chosen so that a torn value is visible: histograms only observe 1.0 (an accepted
 * copy must have sum == count == the one finite bucket that takes 1.0, other buckets 0);
 * counters only grow (a reader must never see one go backwards); gauges only take values from
 * a known set whose bit patterns differ in both 32-bit halves.
 *
 * Environment: MV_TORTURE_READS (total value reads, default 200000000) and
 * MV_TORTURE_SECONDS (time bound, default 20).
 */
#include "microview.h"
#include "mv_segment.h"
#include "mv_test.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define SEG_SIZE    65536
#define NCOUNTERS   8
#define NGAUGES     4
#define NHISTS      2
#define NREADERS    2
#define HIST_BOUNDS 3

static const double g_gauge_set[] = {0.0,       1.0 / 3.0,    -7.5e300,
                                     12345.678, -0.001953125, 6.02214076e23};
#define NGAUGE_VALUES (sizeof g_gauge_set / sizeof g_gauge_set[0])

static mv_segment *g_seg;
static unsigned char *g_live; /* the mapping, read as a reader would */
static mv_counter g_counters[NCOUNTERS];
static mv_gauge g_gauges[NGAUGES];
static mv_histogram *g_hists[NHISTS];
static mv_seg_catalog *g_cat;
static int g_stop;
static uint64_t g_reads_target = 200000000;
static double g_seconds = 20;
static uint64_t g_total_reads;

typedef struct reader_stats {
    uint64_t copies, value_reads;
    uint64_t hist_accepted, hist_rejected, hist_accepted_torn;
    uint64_t counter_backwards, gauge_unknown, header_rejected;
    uint64_t counter_changes, hist_changes;
} reader_stats;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int stopping(void)
{
    return __atomic_load_n(&g_stop, __ATOMIC_RELAXED);
}

/* Histogram writer: observes 1.0 forever. Two of these share histogram 0. */
static void *hist_writer(void *arg)
{
    mv_histogram *h = arg;
    while (!stopping())
        for (int i = 0; i < 64; i++)
            mv_histogram_observe(h, 1.0);
    return NULL;
}

/* Scalar writer: counters up (atomic and single-writer adds), gauges cycle the known set. */
static void *scalar_writer(void *arg)
{
    (void)arg;
    uint64_t n = 0;
    while (!stopping()) {
        for (int i = 0; i < NCOUNTERS; i++) {
            if (i % 2)
                mv_counter_add_local(g_counters[i], (uint64_t)i + 1);
            else
                mv_counter_inc(g_counters[i]);
        }
        for (int i = 0; i < NGAUGES; i++)
            mv_gauge_set(g_gauges[i], g_gauge_set[(n + (uint64_t)i) % NGAUGE_VALUES]);
        /* Histogram 1 has a single writer, interleaved with the scalars. */
        mv_histogram_observe(g_hists[1], 1.0);
        n++;
    }
    return NULL;
}

static int gauge_known(double v)
{
    for (size_t i = 0; i < NGAUGE_VALUES; i++)
        if (memcmp(&v, &g_gauge_set[i], sizeof v) == 0)
            return 1;
    return 0;
}

static void *reader(void *arg)
{
    reader_stats *st = arg;
    uint32_t hot = mv_seg_catalog_hot_size(g_cat);
    uint64_t *buf = calloc(1, hot + 8);
    uint64_t last_counter[64] = {0}, last_hist[64] = {0};
    size_t nm = mv_seg_catalog_count(g_cat);
    double deadline = now_s() + g_seconds;
    mv_seg_error e;

    while (!stopping() && buf) {
        memcpy(buf, g_live, hot); /* plain memcpy: no per-word guarantee beyond the hardware's */
        st->copies++;
        if (mv_seg_hot_check(g_cat, buf, hot, NULL, &e) != MV_SEG_OK) {
            st->header_rejected++;
            continue;
        }
        for (size_t i = 0; i < nm && i < 64; i++) {
            const mv_seg_metric *m = mv_seg_catalog_metric(g_cat, i);
            st->value_reads++;
            if (m->type == MV_SEG_COUNTER) {
                uint64_t v = mv_seg_read_counter(buf, m);
                if (v < last_counter[i])
                    st->counter_backwards++;
                if (v != last_counter[i])
                    st->counter_changes++;
                last_counter[i] = v;
            } else if (m->type == MV_SEG_GAUGE) {
                if (!gauge_known(mv_seg_read_gauge(buf, m)))
                    st->gauge_unknown++;
            } else {
                mv_seg_hist_view hv;
                if (mv_seg_read_histogram(buf, m, &hv) != MV_SEG_OK) {
                    st->hist_rejected++;
                    continue;
                }
                st->hist_accepted++;
                uint64_t total = 0;
                for (uint32_t b = 0; b <= m->bucket_count; b++)
                    total += hv.buckets[b];
                /* 1.0 falls in the bucket le=1 (index 1); nothing else is observed. */
                if (hv.sum != (double)hv.count || total != hv.count || hv.buckets[1] != hv.count ||
                    hv.count < last_hist[i]) {
                    st->hist_accepted_torn++;
                    /* The copy's words as the reader took them, to tell which condition broke
                     * and what mixture of updates passed the checksum. */
                    const uint64_t *wd =
                        (const uint64_t *)(const void *)((const char *)buf +
                                                         mv_seg_catalog_values_offset(g_cat) +
                                                         m->value_offset);
                    fprintf(stderr,
                            "TORN metric=%zu count=%llu sum=%.17g total=%llu b0=%llu b1=%llu "
                            "b2=%llu b3=%llu last=%llu words:",
                            i, (unsigned long long)hv.count, hv.sum, (unsigned long long)total,
                            (unsigned long long)hv.buckets[0], (unsigned long long)hv.buckets[1],
                            (unsigned long long)hv.buckets[2], (unsigned long long)hv.buckets[3],
                            (unsigned long long)last_hist[i]);
                    for (uint32_t q = 0; q < m->value_size / 8; q++)
                        fprintf(stderr, " %016llx", (unsigned long long)wd[q]);
                    fprintf(stderr, "\n");
                }
                if (hv.count != last_hist[i])
                    st->hist_changes++;
                last_hist[i] = hv.count;
            }
        }
        if ((st->copies & 4095) == 0)
            sched_yield(); /* more interleavings when cores are fewer than threads */
        if ((st->copies & 1023) == 0) {
            uint64_t t = __atomic_add_fetch(&g_total_reads, st->value_reads, __ATOMIC_RELAXED);
            st->value_reads = 0;
            if (t >= g_reads_target || now_s() > deadline)
                __atomic_store_n(&g_stop, 1, __ATOMIC_RELAXED);
        }
    }
    __atomic_add_fetch(&g_total_reads, st->value_reads, __ATOMIC_RELAXED);
    free(buf);
    return NULL;
}

static void test_torture(void)
{
    char path[] = "/tmp/mv-torture-XXXXXX";
    int fd = mkstemp(path);
    CU_ASSERT_FATAL(fd >= 0);
    CU_ASSERT_FATAL(ftruncate(fd, SEG_SIZE) == 0);
    CU_ASSERT_EQUAL_FATAL(mv_open(path, &g_seg), MV_OK);
    unlink(path);
    /* The reader's view: the same file mapped again, read-only, as a collector on the host. */
    void *map = mmap(NULL, SEG_SIZE, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    CU_ASSERT_FATAL(map != MAP_FAILED);
    g_live = map;

    double bounds[HIST_BOUNDS] = {0.5, 1.0, 2.0};
    char name[32];
    for (int i = 0; i < NCOUNTERS; i++) {
        snprintf(name, sizeof name, "c%d_total", i);
        CU_ASSERT_EQUAL_FATAL(mv_counter_register(g_seg, name, NULL, NULL, NULL, 0, &g_counters[i]),
                              MV_OK);
    }
    for (int i = 0; i < NGAUGES; i++) {
        snprintf(name, sizeof name, "g%d", i);
        CU_ASSERT_EQUAL_FATAL(mv_gauge_register(g_seg, name, NULL, NULL, NULL, 0, &g_gauges[i]),
                              MV_OK);
        mv_gauge_set(g_gauges[i], g_gauge_set[0]);
    }
    for (int i = 0; i < NHISTS; i++) {
        mv_label l[] = {{"which", i ? "single" : "shared"}};
        CU_ASSERT_EQUAL_FATAL(mv_histogram_register(g_seg, "h_seconds", NULL, "seconds", l, 1,
                                                    bounds, HIST_BOUNDS, &g_hists[i]),
                              MV_OK);
    }

    mv_seg_error e;
    CU_ASSERT_EQUAL_FATAL(mv_seg_catalog_parse(g_live, SEG_SIZE, SEG_SIZE, &g_cat, &e), MV_SEG_OK);
    CU_ASSERT_EQUAL_FATAL(mv_seg_catalog_count(g_cat), NCOUNTERS + NGAUGES + NHISTS);

    const char *env = getenv("MV_TORTURE_READS");
    if (env && *env)
        g_reads_target = strtoull(env, NULL, 10);
    env = getenv("MV_TORTURE_SECONDS");
    if (env && *env)
        g_seconds = strtod(env, NULL);

    pthread_t w[3], r[NREADERS];
    reader_stats st[NREADERS];
    memset(st, 0, sizeof st);
    double t0 = now_s();
    CU_ASSERT_FATAL(pthread_create(&w[0], NULL, hist_writer, g_hists[0]) == 0);
    CU_ASSERT_FATAL(pthread_create(&w[1], NULL, hist_writer, g_hists[0]) == 0);
    CU_ASSERT_FATAL(pthread_create(&w[2], NULL, scalar_writer, NULL) == 0);
    for (int i = 0; i < NREADERS; i++)
        CU_ASSERT_FATAL(pthread_create(&r[i], NULL, reader, &st[i]) == 0);
    for (int i = 0; i < NREADERS; i++)
        pthread_join(r[i], NULL);
    __atomic_store_n(&g_stop, 1, __ATOMIC_RELAXED);
    for (int i = 0; i < 3; i++)
        pthread_join(w[i], NULL);
    double secs = now_s() - t0;

    reader_stats sum = {0};
    for (int i = 0; i < NREADERS; i++) {
        sum.copies += st[i].copies;
        sum.hist_accepted += st[i].hist_accepted;
        sum.hist_rejected += st[i].hist_rejected;
        sum.hist_accepted_torn += st[i].hist_accepted_torn;
        sum.counter_backwards += st[i].counter_backwards;
        sum.gauge_unknown += st[i].gauge_unknown;
        sum.header_rejected += st[i].header_rejected;
        sum.counter_changes += st[i].counter_changes;
        sum.hist_changes += st[i].hist_changes;
    }
    printf("\ntorture: %.1f s, %llu copies, %llu value reads; histograms accepted %llu, "
           "rejected-torn %llu, accepted-torn %llu; counters backwards %llu, changes %llu; "
           "gauges unknown %llu; header rejected %llu; histogram changes %llu\n",
           secs, (unsigned long long)sum.copies, (unsigned long long)g_total_reads,
           (unsigned long long)sum.hist_accepted, (unsigned long long)sum.hist_rejected,
           (unsigned long long)sum.hist_accepted_torn, (unsigned long long)sum.counter_backwards,
           (unsigned long long)sum.counter_changes, (unsigned long long)sum.gauge_unknown,
           (unsigned long long)sum.header_rejected, (unsigned long long)sum.hist_changes);

    CU_ASSERT_EQUAL(sum.hist_accepted_torn, 0);
    CU_ASSERT_EQUAL(sum.counter_backwards, 0);
    CU_ASSERT_EQUAL(sum.gauge_unknown, 0);
    CU_ASSERT_EQUAL(sum.header_rejected, 0);
    CU_ASSERT(sum.hist_accepted > 0);
    CU_ASSERT(sum.counter_changes > 0);
    CU_ASSERT(sum.hist_changes > 0);
    CU_ASSERT(g_total_reads >= 1000000);

    /* Quiescent: the final state reads back exactly. */
    uint64_t *buf = calloc(1, SEG_SIZE);
    CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
    mv_seg_copy_words(buf, g_live, mv_seg_catalog_hot_size(g_cat));
    for (size_t i = 0; i < mv_seg_catalog_count(g_cat); i++) {
        const mv_seg_metric *m = mv_seg_catalog_metric(g_cat, i);
        mv_seg_hist_view hv;
        if (m->type == MV_SEG_HISTOGRAM) {
            CU_ASSERT_EQUAL(mv_seg_read_histogram(buf, m, &hv), MV_SEG_OK);
            CU_ASSERT(hv.count > 0 && hv.sum == (double)hv.count);
        }
    }
    free(buf);
    mv_seg_catalog_free(g_cat);
    mv_close(g_seg);
    munmap(map, SEG_SIZE);
}

int main(void)
{
    static const mv_test tests[] = {
        {"concurrent writers and memcpy readers", test_torture},
    };
    int failed = MV_TEST_RUN("torture", tests);
    return failed;
}
