/* Unit tests of adaptive sampling through mv_collect: a calm segment backs off and a change
 * brings it back to every tick; the shm probe reads a backed-off segment at the next tick
 * after a write or a new metric. */
#include <stdio.h>
#include <stdlib.h>

#include "microview.h"
#include "mv_collect.h"
#include "mv_test.h"

static char *g_dir;

/* A segment file written through libmicroview. */
typedef struct fixture {
    char path[256];
    mv_segment *seg;
} fixture;

static void fx_open(fixture *f, const char *name, size_t size)
{
    CU_ASSERT_FATAL(mv_test_blank_file(g_dir, name, size, f->path, sizeof f->path) == 0);
    CU_ASSERT_FATAL(mv_open(f->path, &f->seg) == MV_OK);
}

static void fx_close(fixture *f)
{
    mv_close(f->seg);
}

static const mv_coll_seg_view *first(mv_coll_snap *s)
{
    CU_ASSERT_FATAL(mv_coll_snap_count(s) == 1);
    return mv_coll_snap_seg(s, 0);
}

/* A collector ticking every 1 ms with analytics and a 64 ms back-off bound, reading f's
 * segment (id "a") through t. */
static mv_coll *adaptive_coll(const fixture *f, const mv_coll_transport *t)
{
    mv_coll_opts o;
    mv_coll_opts_default(&o);
    o.tick_us = 1000;
    o.analytics = 1;
    o.max_interval_us = 64000;
    mv_coll *coll;
    CU_ASSERT_FATAL(mv_coll_create(&o, &coll) == 0);
    void *src;
    uint64_t size;
    char err[256];
    CU_ASSERT_FATAL(mv_coll_shm_open(f->path, 0, &src, &size, err, sizeof err) == 0);
    CU_ASSERT_FATAL(mv_coll_add(coll, "a", size, NULL, 0, t, src) == 0);
    return coll;
}

static void test_adaptive_sampling(void)
{
    fixture f;
    mv_gauge g;
    mv_counter c;
    fx_open(&f, "adaptive.seg", 16384);
    CU_ASSERT_FATAL(mv_gauge_register(f.seg, "level", NULL, NULL, NULL, 0, &g) == MV_OK);
    CU_ASSERT_FATAL(mv_counter_register(f.seg, "n_total", NULL, NULL, NULL, 0, &c) == MV_OK);
    mv_gauge_set(g, 5);
    mv_coll *coll = adaptive_coll(&f, mv_coll_shm_transport());

    /* A calm segment: 1500 ticks of ~1 ms - its detectors' warm-up (50 detection steps of
     * 10 ms) held at every tick, then backing off - and 1000 more, backed off. */
    int ticks = 0;
    for (; ticks < 1500; ticks++) {
        mv_coll_tick(coll);
        mv_test_sleep_ms(1);
    }
    mv_coll_snap *s = mv_coll_snapshot(coll);
    uint64_t warm_reads = first(s)->reads;
    mv_coll_snap_free(s);
    for (; ticks < 2500; ticks++) {
        mv_coll_tick(coll);
        mv_test_sleep_ms(1);
    }
    s = mv_coll_snapshot(coll);
    uint64_t calm_reads = first(s)->reads, calm_iv = first(s)->read_interval_ns;
    printf("\n  calm: %llu reads in the first 1500 ticks (warm-up at every tick), %llu in the "
           "next 1000, interval %.0f ms ",
           (unsigned long long)warm_reads, (unsigned long long)(calm_reads - warm_reads),
           calm_iv / 1e6);
    CU_ASSERT(calm_reads - warm_reads < 1000 / 5);
    CU_ASSERT_EQUAL(calm_iv, 64000000ull);
    CU_ASSERT(first(s)->reads_skipped > 0);
    /* Backed off, it was probed (shm offers a probe) and no probe saw a change. */
    CU_ASSERT(first(s)->probes > 0);
    CU_ASSERT_EQUAL(first(s)->probe_reads, 0);
    mv_coll_snap_free(s);

    /* A step: the probe sees it at the next tick, the read that follows brings the segment
     * back to every tick. */
    mv_gauge_set(g, 500);
    uint64_t reads = calm_reads;
    int waited = 0;
    while (reads == calm_reads && waited < 200) {
        mv_coll_tick(coll);
        mv_test_sleep_ms(1);
        waited++;
        s = mv_coll_snapshot(coll);
        reads = first(s)->reads;
        mv_coll_snap_free(s);
    }
    printf("step read after %d tick(s) ", waited);
    CU_ASSERT_EQUAL(waited, 1);
    s = mv_coll_snapshot(coll);
    CU_ASSERT_EQUAL(first(s)->read_interval_ns, 1000000ull);
    CU_ASSERT(first(s)->probe_reads <= 1); /* 0 when the read was due anyway */
    mv_coll_snap_free(s);
    for (int i = 0; i < 8; i++) {
        mv_counter_add(c, 1000); /* keeps moving */
        mv_coll_tick(coll);
        mv_test_sleep_ms(1);
    }
    s = mv_coll_snapshot(coll);
    printf("after step: %llu reads in 8 ticks ", (unsigned long long)(first(s)->reads - reads));
    CU_ASSERT(first(s)->reads - reads >= 7);
    mv_coll_snap_free(s);
    mv_coll_destroy(coll);
    fx_close(&f);
}

/* Ticks until a segment backed off to its longest interval is read after `change` runs;
 * `t` is the transport it is read through. */
static mv_histogram *g_notice_h;

static int ticks_to_notice(const mv_coll_transport *t, void (*change)(fixture *f), uint64_t *probes)
{
    fixture f;
    mv_gauge g;
    mv_histogram *h;
    double b[] = {1, 2};
    fx_open(&f, "notice.seg", 16384);
    CU_ASSERT_FATAL(mv_gauge_register(f.seg, "level", NULL, NULL, NULL, 0, &g) == MV_OK);
    CU_ASSERT_FATAL(mv_histogram_register(f.seg, "lat_seconds", NULL, NULL, NULL, 0, b, 2, &h) ==
                    MV_OK);
    g_notice_h = h;
    mv_gauge_set(g, 5);
    mv_coll *coll = adaptive_coll(&f, t);
    mv_coll_snap *s;
    uint64_t iv = 0;
    for (int i = 0; i < 3000 && iv != 64000000ull; i++) {
        mv_coll_tick(coll);
        mv_test_sleep_ms(1);
        s = mv_coll_snapshot(coll);
        iv = first(s)->read_interval_ns;
        mv_coll_snap_free(s);
    }
    CU_ASSERT_EQUAL(iv, 64000000ull);
    /* Right after a read, so that the next due read is a whole interval away. */
    s = mv_coll_snapshot(coll);
    uint64_t reads = first(s)->reads, now = reads;
    mv_coll_snap_free(s);
    for (int i = 0; i < 200 && now == reads; i++) {
        mv_coll_tick(coll);
        mv_test_sleep_ms(1);
        s = mv_coll_snapshot(coll);
        now = first(s)->reads;
        mv_coll_snap_free(s);
    }
    reads = now;
    change(&f);
    int waited = 0;
    while (now == reads && waited < 200) {
        mv_coll_tick(coll);
        waited++;
        s = mv_coll_snapshot(coll);
        now = first(s)->reads;
        *probes = first(s)->probes;
        mv_coll_snap_free(s);
        mv_test_sleep_ms(1);
    }
    mv_coll_destroy(coll);
    fx_close(&f);
    return waited;
}

static void change_observe(fixture *f)
{
    (void)f;
    mv_histogram_observe(g_notice_h, 1.5);
}

static void change_register(fixture *f)
{
    mv_counter c;
    CU_ASSERT(mv_counter_register(f->seg, "late_total", NULL, NULL, NULL, 0, &c) == MV_OK);
}

/* The probe sees a histogram observation and a new metric at the next tick; a transport
 * without a probe waits for the backed-off interval. */
static void test_probe_notices(void)
{
    uint64_t probes = 0;
    int w = ticks_to_notice(mv_coll_shm_transport(), change_observe, &probes);
    printf("\n  histogram observed: read after %d tick(s), %llu probes ", w,
           (unsigned long long)probes);
    CU_ASSERT_EQUAL(w, 1);
    CU_ASSERT(probes > 0);
    w = ticks_to_notice(mv_coll_shm_transport(), change_register, &probes);
    printf("new metric: %d tick(s) ", w);
    CU_ASSERT_EQUAL(w, 1);
    mv_coll_transport no_probe = *mv_coll_shm_transport();
    no_probe.probe = NULL;
    no_probe.src_close = mv_coll_shm_transport()->src_close;
    w = ticks_to_notice(&no_probe, change_observe, &probes);
    printf("without a probe: %d tick(s) ", w);
    CU_ASSERT(w > 8);
    CU_ASSERT_EQUAL(probes, 0);
}

int main(void)
{
    g_dir = mv_test_tmpdir("test-adaptive");
    if (!g_dir)
        return 1;
    static const mv_test tests[] = {
        {"adaptive sampling", test_adaptive_sampling},
        {"adaptive sampling: the probe notices changes", test_probe_notices},
    };
    int fails = MV_TEST_RUN("adaptive", tests);
    if (mv_test_rmrf(g_dir) != 0)
        fprintf(stderr, "could not remove %s\n", g_dir);
    free(g_dir);
    return fails;
}
