/* Unit tests for mv_collect: tick, catalog reload, quarantine, recovery, SIGBUS guard. */
#include <CUnit/Basic.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "microview.h"
#include "mv_collect.h"
#include "mv_test.h"

static char *g_dir;

/* A blank file of `size` bytes in g_dir; the path is valid until the next call. */
static char *make_segment(const char *name, size_t size)
{
    static char path[256];
    CU_ASSERT_FATAL(mv_test_blank_file(g_dir, name, size, path, sizeof path) == 0);
    return path;
}

/* A segment file `name` of `size` bytes in g_dir with one counter `metric`; its path in
 * path[256]. */
static void counter_segment(const char *name, size_t size, const char *metric, char *path,
                            mv_segment **seg, mv_counter *ctr)
{
    snprintf(path, 256, "%s", make_segment(name, size));
    CU_ASSERT_FATAL(mv_open(path, seg) == MV_OK);
    CU_ASSERT_FATAL(mv_counter_register(*seg, metric, NULL, NULL, NULL, 0, ctr) == MV_OK);
}

static mv_coll *new_coll(uint32_t quarantine_ms, uint32_t recheck_ms)
{
    mv_coll_opts o;
    mv_coll *c;
    mv_coll_opts_default(&o);
    o.quarantine_after_ms = quarantine_ms;
    o.recheck_ms = recheck_ms;
    CU_ASSERT_FATAL(mv_coll_create(&o, &c) == 0);
    return c;
}

static void add_path(mv_coll *c, const char *id, const char *path)
{
    void *src;
    uint64_t size;
    char err[256];
    mv_seg_label l = {"service", id};
    CU_ASSERT_FATAL(mv_coll_shm_open(path, 0, &src, &size, err, sizeof err) == 0);
    CU_ASSERT_FATAL(mv_coll_add(c, id, size, &l, 1, mv_coll_shm_transport(), src) == 0);
}

/* Value of the first metric named `name` in segment `id`, via a snapshot. */
static int snap_value(mv_coll *c, const char *id, const char *name, double *out,
                      mv_coll_state *state)
{
    mv_coll_snap *s = mv_coll_snapshot(c);
    int found = 0;
    for (size_t i = 0; i < mv_coll_snap_count(s); i++) {
        const mv_coll_seg_view *v = mv_coll_snap_seg(s, i);
        if (strcmp(v->id, id) != 0)
            continue;
        if (state)
            *state = v->state;
        if (!v->cat || !v->hot)
            break;
        for (size_t k = 0; k < mv_seg_catalog_count(v->cat); k++) {
            const mv_seg_metric *m = mv_seg_catalog_metric(v->cat, k);
            if (strcmp(m->name, name) != 0)
                continue;
            if (m->type == MV_SEG_COUNTER)
                *out = (double)mv_seg_read_counter(v->hot, m);
            else if (m->type == MV_SEG_COUNTER_F)
                *out = mv_seg_read_counter_f(v->hot, m);
            else if (m->type == MV_SEG_GAUGE)
                *out = mv_seg_read_gauge(v->hot, m);
            else {
                mv_seg_hist_view hv;
                CU_ASSERT(mv_seg_read_histogram(v->hot, m, &hv) == MV_SEG_OK);
                *out = (double)hv.count;
            }
            found = 1;
            break;
        }
    }
    mv_coll_snap_free(s);
    return found;
}

static void test_tick_and_reload(void)
{
    char *path = make_segment("a.seg", 16384);
    mv_segment *seg;
    mv_counter ctr;
    mv_gauge g;
    CU_ASSERT_FATAL(mv_open(path, &seg) == MV_OK);
    CU_ASSERT_FATAL(mv_counter_register(seg, "reqs_total", "r", NULL, NULL, 0, &ctr) == MV_OK);
    mv_counter_add(ctr, 41);
    mv_coll *c = new_coll(1000, 5000);
    add_path(c, "a", path);
    mv_coll_tick(c);
    double v = 0;
    mv_coll_state st;
    CU_ASSERT(snap_value(c, "a", "reqs_total", &v, &st));
    CU_ASSERT_EQUAL(st, MV_COLL_OK);
    CU_ASSERT_EQUAL(v, 41);
    mv_counter_inc(ctr);
    mv_coll_tick(c);
    CU_ASSERT(snap_value(c, "a", "reqs_total", &v, NULL));
    CU_ASSERT_EQUAL(v, 42);

    /* A metric registered later appears after the next tick (generation moved). */
    CU_ASSERT(!snap_value(c, "a", "temp", &v, NULL));
    CU_ASSERT_FATAL(mv_gauge_register(seg, "temp", NULL, NULL, NULL, 0, &g) == MV_OK);
    mv_gauge_set(g, 21.5);
    mv_coll_tick(c);
    CU_ASSERT(snap_value(c, "a", "temp", &v, NULL));
    CU_ASSERT_EQUAL(v, 21.5);
    mv_coll_snap *s = mv_coll_snapshot(c);
    CU_ASSERT(mv_coll_snap_stats(s)->catalog_reads >= 2);
    /* Bytes delivered: at least a full copy per catalog read (2) plus a hot copy (header +
     * values) per published read (3), and never more than the segment per read. */
    const mv_coll_seg_view *sv = mv_coll_snap_seg(s, 0);
    CU_ASSERT_EQUAL(sv->reads, 3u);
    CU_ASSERT(sv->read_bytes >= 2 * 16384u + 3u * sv->hot_len);
    CU_ASSERT(sv->read_bytes <= (2 * 2 + 3) * 16384u);
    mv_coll_snap_free(s);

    CU_ASSERT_EQUAL(mv_coll_remove(c, "a"), 0);
    CU_ASSERT_EQUAL(mv_coll_remove(c, "a"), -ENOENT);
    mv_coll_destroy(c);
    mv_close(seg);
}

/* Types 4 and 5 through the collector: a fractional counter reads with its fraction; a
 * deleted series goes at the next tick; a histogram after it keeps being served (its
 * per-record state follows the moved index); the series re-created reads from zero. */
static void test_counter_f_and_delete(void)
{
    char *path = make_segment("cf.seg", 16384);
    mv_segment *seg;
    mv_counter_f busy;
    mv_counter gone, again;
    mv_histogram *h;
    double b[] = {1, 2};
    CU_ASSERT_FATAL(mv_open(path, &seg) == MV_OK);
    CU_ASSERT_FATAL(mv_counter_register(seg, "gone_total", NULL, NULL, NULL, 0, &gone) == MV_OK);
    CU_ASSERT_FATAL(mv_counter_f_register(seg, "busy_seconds_total", NULL, NULL, NULL, 0, &busy) ==
                    MV_OK);
    CU_ASSERT_FATAL(mv_histogram_register(seg, "lat", NULL, NULL, NULL, 0, b, 2, &h) == MV_OK);
    mv_counter_add(gone, 7);
    for (int i = 0; i < 6; i++)
        mv_counter_f_add(busy, 0.25);
    mv_histogram_observe(h, 1.5);
    mv_coll *c = new_coll(1000, 5000);
    add_path(c, "cf", path);
    mv_coll_tick(c);
    double v = 0;
    mv_coll_state st;
    CU_ASSERT(snap_value(c, "cf", "busy_seconds_total", &v, &st));
    CU_ASSERT_EQUAL(st, MV_COLL_OK);
    CU_ASSERT_EQUAL(v, 1.5);
    CU_ASSERT(snap_value(c, "cf", "gone_total", &v, NULL));
    CU_ASSERT_EQUAL(v, 7);

    CU_ASSERT_EQUAL(mv_delete(seg, "gone_total", NULL, 0), 1);
    mv_histogram_observe(h, 0.5);
    mv_coll_tick(c);
    CU_ASSERT(!snap_value(c, "cf", "gone_total", &v, &st));
    CU_ASSERT_EQUAL(st, MV_COLL_OK);
    CU_ASSERT(snap_value(c, "cf", "lat", &v, NULL));
    CU_ASSERT_EQUAL(v, 2);
    CU_ASSERT(snap_value(c, "cf", "busy_seconds_total", &v, NULL));
    CU_ASSERT_EQUAL(v, 1.5);

    CU_ASSERT_FATAL(mv_counter_register(seg, "gone_total", NULL, NULL, NULL, 0, &again) == MV_OK);
    mv_counter_inc(again);
    mv_coll_tick(c);
    CU_ASSERT(snap_value(c, "cf", "gone_total", &v, NULL));
    CU_ASSERT_EQUAL(v, 1);
    mv_coll_destroy(c);
    mv_close(seg);
}

static void test_quarantine_and_recover(void)
{
    char path[256];
    mv_segment *seg;
    mv_counter ctr;
    counter_segment("b.seg", 8192, "x_total", path, &seg, &ctr);
    mv_coll *c = new_coll(0, 0);
    add_path(c, "b", path);
    mv_coll_tick(c);

    /* Scribble over the magic like a broken pod would. */
    int fd = open(path, O_RDWR);
    CU_ASSERT_FATAL(fd >= 0);
    char saved[8];
    CU_ASSERT_FATAL(pread(fd, saved, 8, 0) == 8);
    CU_ASSERT_FATAL(pwrite(fd, "garbage!", 8, 0) == 8);
    mv_coll_tick(c);
    mv_coll_tick(c);
    double v;
    mv_coll_state st = MV_COLL_OK;
    CU_ASSERT(!snap_value(c, "b", "x_total", &v, &st));
    CU_ASSERT_EQUAL(st, MV_COLL_QUARANTINED);
    mv_coll_snap *s = mv_coll_snapshot(c);
    CU_ASSERT_EQUAL(mv_coll_snap_stats(s)->errors[MV_SEG_E_MAGIC], 1);
    CU_ASSERT_EQUAL(mv_coll_snap_seg(s, 0)->reason, MV_SEG_E_MAGIC);
    mv_coll_snap_free(s);

    /* Repaired: the recheck brings it back. */
    CU_ASSERT_FATAL(pwrite(fd, saved, 8, 0) == 8);
    close(fd);
    mv_counter_add(ctr, 7);
    mv_coll_tick(c);
    CU_ASSERT(snap_value(c, "b", "x_total", &v, &st));
    CU_ASSERT_EQUAL(st, MV_COLL_OK);
    CU_ASSERT_EQUAL(v, 7);
    mv_coll_destroy(c);
    mv_close(seg);
}

static void test_truncated_file_is_an_error_not_a_crash(void)
{
    char path[256];
    mv_segment *seg;
    mv_counter ctr;
    counter_segment("c.seg", 65536, "y_total", path, &seg, &ctr);
    mv_close(seg);
    mv_coll *c = new_coll(0, 60000);
    add_path(c, "c", path);
    mv_coll_tick(c);
    /* Shrink the file under the collector's mapping: touching it raises SIGBUS. */
    CU_ASSERT_FATAL(truncate(path, 0) == 0);
    mv_coll_tick(c);
    mv_coll_tick(c);
    double v;
    mv_coll_state st = MV_COLL_OK;
    snap_value(c, "c", "y_total", &v, &st);
    CU_ASSERT_EQUAL(st, MV_COLL_QUARANTINED);
    mv_coll_snap *s = mv_coll_snapshot(c);
    CU_ASSERT_EQUAL(mv_coll_snap_stats(s)->errors[MV_SEG_E_TRUNCATED], 1);
    mv_coll_snap_free(s);
    mv_coll_destroy(c);
}

static mv_coll *new_coll_stat(uint32_t stat_ms)
{
    mv_coll_opts o;
    mv_coll *c;
    mv_coll_opts_default(&o);
    o.quarantine_after_ms = 0;
    o.recheck_ms = 0;
    o.stat_ms = stat_ms;
    CU_ASSERT_FATAL(mv_coll_create(&o, &c) == 0);
    return c;
}

/* Ticks after the stat interval (1 ms) has passed. */
static void tick_later(mv_coll *c)
{
    usleep(2000);
    mv_coll_tick(c);
}

/* Truncated and re-extended between two reads, the header written back: the pages behind it
 * are zero. The collector validates the segment again and quarantines it, as a fresh one
 * does; the same bytes written back whole are served again. */
static void test_replaced_bytes_validated_again(void)
{
    char path[256];
    mv_segment *seg;
    mv_counter ctr;
    counter_segment("r.seg", 16384, "r_total", path, &seg, &ctr);
    mv_counter_add(ctr, 5);
    mv_close(seg);
    static char saved[16384];
    int fd = open(path, O_RDWR);
    CU_ASSERT_FATAL(fd >= 0);
    CU_ASSERT_FATAL(pread(fd, saved, sizeof saved, 0) == (ssize_t)sizeof saved);
    mv_coll *c = new_coll_stat(1);
    add_path(c, "r", path);
    mv_coll_tick(c);
    double v = 0;
    mv_coll_state st = MV_COLL_PENDING;
    CU_ASSERT(snap_value(c, "r", "r_total", &v, &st));
    CU_ASSERT_EQUAL(st, MV_COLL_OK);

    CU_ASSERT_FATAL(ftruncate(fd, 0) == 0 && ftruncate(fd, sizeof saved) == 0);
    CU_ASSERT_FATAL(pwrite(fd, saved, MV_SEG_HEADER_SIZE, 0) == MV_SEG_HEADER_SIZE);
    tick_later(c);
    tick_later(c);
    st = MV_COLL_OK;
    CU_ASSERT(!snap_value(c, "r", "r_total", &v, &st));
    CU_ASSERT_EQUAL(st, MV_COLL_QUARANTINED);

    /* The same bytes a fresh collector quarantines. */
    mv_coll *fresh = new_coll_stat(1);
    add_path(fresh, "r", path);
    mv_coll_tick(fresh);
    mv_coll_tick(fresh);
    st = MV_COLL_OK;
    snap_value(fresh, "r", "r_total", &v, &st);
    CU_ASSERT_EQUAL(st, MV_COLL_QUARANTINED);
    mv_coll_destroy(fresh);

    /* Everything written back: served again, with its value. */
    CU_ASSERT_FATAL(pwrite(fd, saved, sizeof saved, 0) == (ssize_t)sizeof saved);
    tick_later(c);
    CU_ASSERT(snap_value(c, "r", "r_total", &v, &st));
    CU_ASSERT_EQUAL(st, MV_COLL_OK);
    CU_ASSERT_EQUAL(v, 5);
    close(fd);
    mv_coll_destroy(c);
}

/* A file of another size than the mapping's is failed (a collector opening it now would refuse
 * it), even where the mapping still reads valid bytes, until it has its size again. */
static void test_resized_file_fails_until_restored(void)
{
    char path[256];
    mv_segment *seg;
    mv_counter ctr;
    counter_segment("s.seg", 16384, "s_total", path, &seg, &ctr);
    mv_counter_add(ctr, 9);
    mv_close(seg);
    mv_coll *c = new_coll_stat(1);
    add_path(c, "s", path);
    mv_coll_tick(c);
    double v = 0;
    mv_coll_state st = MV_COLL_PENDING;
    CU_ASSERT(snap_value(c, "s", "s_total", &v, &st));
    CU_ASSERT_EQUAL(st, MV_COLL_OK);

    CU_ASSERT_FATAL(truncate(path, 20480) == 0);
    tick_later(c);
    tick_later(c);
    st = MV_COLL_OK;
    CU_ASSERT(!snap_value(c, "s", "s_total", &v, &st));
    CU_ASSERT_EQUAL(st, MV_COLL_QUARANTINED);
    mv_coll_snap *s = mv_coll_snapshot(c);
    CU_ASSERT_EQUAL(mv_coll_snap_seg(s, 0)->reason, MV_SEG_E_TRUNCATED);
    mv_coll_snap_free(s);

    CU_ASSERT_FATAL(truncate(path, 16384) == 0);
    tick_later(c);
    CU_ASSERT(snap_value(c, "s", "s_total", &v, &st));
    CU_ASSERT_EQUAL(st, MV_COLL_OK);
    CU_ASSERT_EQUAL(v, 9);
    mv_coll_destroy(c);
}

static void test_retain_and_duplicates(void)
{
    char paths[3][256];
    mv_coll *c = new_coll(1000, 5000);
    const char *ids[3] = {"s0", "s1", "s2"};
    for (int i = 0; i < 3; i++) {
        char name[32];
        snprintf(name, sizeof name, "r%d.seg", i);
        snprintf(paths[i], sizeof paths[i], "%s", make_segment(name, 4096));
        add_path(c, ids[i], paths[i]);
    }
    void *src;
    uint64_t size;
    char err[256];
    CU_ASSERT_FATAL(mv_coll_shm_open(paths[0], 0, &src, &size, err, sizeof err) == 0);
    CU_ASSERT_EQUAL(mv_coll_add(c, "s0", size, NULL, 0, mv_coll_shm_transport(), src), -EEXIST);
    const char *keep[1] = {"s1"};
    mv_coll_retain(c, keep, 1);
    mv_coll_snap *s = mv_coll_snapshot(c);
    CU_ASSERT_EQUAL(mv_coll_snap_count(s), 1);
    CU_ASSERT_STRING_EQUAL(mv_coll_snap_seg(s, 0)->id, "s1");
    /* A zero-filled (unformatted) file is pending, not published. */
    mv_coll_snap_free(s);
    mv_coll_tick(c);
    s = mv_coll_snapshot(c);
    CU_ASSERT_EQUAL(mv_coll_snap_seg(s, 0)->state, MV_COLL_PENDING);
    CU_ASSERT_PTR_NULL(mv_coll_snap_seg(s, 0)->hot);
    mv_coll_snap_free(s);
    CU_ASSERT(mv_coll_shm_open("/nonexistent/x", 0, &src, &size, err, sizeof err) == -ENOENT);
    CU_ASSERT(strstr(err, "/nonexistent/x") != NULL);
    mv_coll_destroy(c);
}

static int saw_fifty(void *arg)
{
    double v = 0;
    if (!snap_value(arg, "d", "z_total", &v, NULL) || v != 50)
        return 0;
    mv_coll_snap *s = mv_coll_snapshot(arg);
    int ok = s && mv_coll_snap_stats(s)->ticks >= 50;
    mv_coll_snap_free(s);
    return ok;
}

static void test_background_thread(void)
{
    char path[256];
    mv_segment *seg;
    mv_counter ctr;
    counter_segment("d.seg", 8192, "z_total", path, &seg, &ctr);
    mv_coll_opts o;
    mv_coll *c;
    mv_coll_opts_default(&o);
    o.tick_us = 1000;
    CU_ASSERT_FATAL(mv_coll_create(&o, &c) == 0);
    add_path(c, "d", path);
    CU_ASSERT_FATAL(mv_coll_start(c) == 0);
    for (int i = 1; i <= 50; i++) {
        mv_counter_inc(ctr);
        mv_test_sleep_ms(2); /* let ticks happen between the increments */
    }
    /* the tick thread publishes the last increment within a few ticks */
    CU_ASSERT(mv_test_wait_until(saw_fifty, c, 5000));
    double v = 0;
    CU_ASSERT(snap_value(c, "d", "z_total", &v, NULL));
    CU_ASSERT_EQUAL(v, 50);
    mv_coll_snap *s = mv_coll_snapshot(c);
    CU_ASSERT(mv_coll_snap_stats(s)->ticks >= 50);
    mv_coll_snap_free(s);
    mv_coll_destroy(c);
    mv_close(seg);
}

static int saw_seven(void *arg)
{
    double v = 0;
    return snap_value(arg, "l", "l_total", &v, NULL) && v == 7;
}

/* A long tick (30 s): a segment added after the first tick is read within a few ms (an
 * early tick), a burst of adds costs a few early ticks, not one each, the schedule stays,
 * and destroy does not wait for the next tick. */
static void test_long_tick_early_read(void)
{
    char path[256];
    mv_segment *seg;
    mv_counter ctr;
    counter_segment("l.seg", 8192, "l_total", path, &seg, &ctr);
    mv_counter_add(ctr, 7);
    mv_coll_opts o;
    mv_coll *c;
    mv_coll_opts_default(&o);
    o.tick_us = 30u * 1000u * 1000u;
    CU_ASSERT_FATAL(mv_coll_create(&o, &c) == 0);
    CU_ASSERT_FATAL(mv_coll_start(c) == 0);
    mv_test_sleep_ms(20); /* the first tick, with nothing to read */
    uint64_t t0 = mv_test_mono_ms();
    add_path(c, "l", path);
    CU_ASSERT(mv_test_wait_until(saw_seven, c, 1000));
    uint64_t took = mv_test_mono_ms() - t0;
    /* 20 more adds at once (the same file under other ids): at most a few early ticks. */
    for (int i = 0; i < 20; i++) {
        char id[16];
        snprintf(id, sizeof id, "l%d", i);
        add_path(c, id, path);
    }
    mv_test_sleep_ms(100);
    mv_coll_snap *s = mv_coll_snapshot(c);
    uint64_t ticks = mv_coll_snap_stats(s)->ticks;
    size_t pending = 0;
    for (size_t i = 0; i < mv_coll_snap_count(s); i++)
        pending += mv_coll_snap_seg(s, i)->state == MV_COLL_PENDING;
    mv_coll_snap_free(s);
    uint64_t d0 = mv_test_mono_ms();
    mv_coll_destroy(c);
    uint64_t stop = mv_test_mono_ms() - d0;
    printf("\n  first read %llu ms after the add, %llu ticks, destroy %llu ms ",
           (unsigned long long)took, (unsigned long long)ticks, (unsigned long long)stop);
    CU_ASSERT(took < 1000);
    CU_ASSERT_EQUAL(pending, 0);
    CU_ASSERT(ticks >= 2 && ticks <= 6);
    CU_ASSERT(stop < 1000);
    mv_close(seg);
}

/* A transport that wraps shm and can refuse reads the way a revoked rkey does. */
static int g_revoked;
static void revoking_read_many(void *ctx, mv_coll_read *reqs, size_t n)
{
    const mv_coll_transport *shm = mv_coll_shm_transport();
    (void)ctx;
    shm->read_many(shm->ctx, reqs, n);
    for (size_t i = 0; g_revoked && i < n; i++)
        reqs[i].status = -EACCES;
}
static void revoking_close(void *ctx, void *src)
{
    const mv_coll_transport *shm = mv_coll_shm_transport();
    (void)ctx;
    shm->src_close(shm->ctx, src);
}
static const mv_coll_transport revoking = {
    .name = "revoking", .read_many = revoking_read_many, .src_close = revoking_close};

static void test_revoked_segment_is_dropped(void)
{
    char *p = make_segment("e.seg", 8192);
    char path[256], err[256];
    snprintf(path, sizeof path, "%s", p);
    mv_segment *seg;
    mv_counter ctr;
    CU_ASSERT_FATAL(mv_open(path, &seg) == MV_OK);
    CU_ASSERT_FATAL(mv_counter_register(seg, "w_total", NULL, NULL, NULL, 0, &ctr) == MV_OK);
    mv_coll *c = new_coll(0, 0);
    void *src;
    uint64_t size;
    CU_ASSERT_FATAL(mv_coll_shm_open(path, 0, &src, &size, err, sizeof err) == 0);
    CU_ASSERT_FATAL(mv_coll_add(c, "e", size, NULL, 0, &revoking, src) == 0);
    add_path(c, "f", path); /* the same file through shm: must keep flowing */
    g_revoked = 0;
    mv_coll_tick(c);
    double v;
    CU_ASSERT(snap_value(c, "e", "w_total", &v, NULL));
    g_revoked = 1;
    mv_counter_inc(ctr);
    mv_coll_tick(c);
    mv_coll_snap *s = mv_coll_snapshot(c);
    CU_ASSERT_EQUAL(mv_coll_snap_count(s), 1);
    CU_ASSERT_STRING_EQUAL(mv_coll_snap_seg(s, 0)->id, "f");
    CU_ASSERT_EQUAL(mv_coll_snap_stats(s)->errors[MV_SEG_E_TRUNCATED], 0);
    mv_coll_snap_free(s);
    CU_ASSERT(snap_value(c, "f", "w_total", &v, NULL));
    CU_ASSERT_EQUAL(v, 1);
    g_revoked = 0;
    mv_coll_destroy(c);
    mv_close(seg);
}

/* Window phases: by default each segment's windows end at its own offset within the
 * window, the same offset in every collector (it comes from the id); with window_aligned
 * every window ends at a multiple of window_ns. */
static void test_window_align(void)
{
    const char *ids[3] = {"ns/web-0/app", "ns/web-1/app", "ns/db-0/app"};
    const uint64_t W = 20000000ull; /* 20 ms */
    mv_segment *segs[3];
    for (int i = 0; i < 3; i++) {
        char name[32];
        snprintf(name, sizeof name, "align%d.seg", i);
        CU_ASSERT_FATAL(mv_open(make_segment(name, 16384), &segs[i]) == MV_OK);
        mv_counter k;
        CU_ASSERT_FATAL(mv_counter_register(segs[i], "x_total", NULL, NULL, NULL, 0, &k) == MV_OK);
    }
    uint64_t phase[2][3];
    for (int run = 0; run < 3; run++) { /* segment, segment again, wall */
        mv_coll_opts o;
        mv_coll *c;
        mv_coll_opts_default(&o);
        o.analytics = 1;
        o.tick_us = 1000;
        o.pipe.window_ns = W;
        o.window_aligned = run == 2;
        CU_ASSERT_FATAL(mv_coll_create(&o, &c) == 0);
        for (int i = 0; i < 3; i++) {
            char path[256];
            snprintf(path, sizeof path, "%s/align%d.seg", g_dir, i);
            add_path(c, ids[i], path);
        }
        for (int t = 0; t < 100; t++) { /* 5 windows or more */
            mv_coll_tick(c);
            usleep(1000);
        }
        mv_coll_snap *sn = mv_coll_snapshot(c);
        CU_ASSERT_FATAL(mv_coll_snap_count(sn) == 3);
        for (size_t j = 0; j < 3; j++) {
            const mv_coll_seg_view *v = mv_coll_snap_seg(sn, j);
            int i = 0;
            while (i < 3 && strcmp(v->id, ids[i]) != 0)
                i++;
            CU_ASSERT_FATAL(i < 3 && v->pipe != NULL);
            CU_ASSERT(v->pipe->window_end_ns != 0);
            CU_ASSERT_EQUAL(v->pipe->window_end_ns - v->pipe->window_start_ns, W);
            uint64_t ph = v->pipe->window_end_ns % W;
            if (run < 2)
                phase[run][i] = ph;
            else
                CU_ASSERT_EQUAL(ph, 0);
        }
        mv_coll_snap_free(sn);
        mv_coll_destroy(c);
    }
    for (int i = 0; i < 3; i++)
        CU_ASSERT_EQUAL(phase[0][i], phase[1][i]);
    CU_ASSERT(phase[0][0] != phase[0][1] && phase[0][1] != phase[0][2] &&
              phase[0][0] != phase[0][2]);
    for (int i = 0; i < 3; i++)
        mv_close(segs[i]);
}

/* Reads of the same values through the shm probe: nothing copied (reads_same), values and
 * read counts as with copies, and a copy as soon as any value or header word moves. */
static void test_same_reads(void)
{
    char *p = make_segment("same.seg", 16384);
    char path[256];
    snprintf(path, sizeof path, "%s", p);
    mv_segment *seg;
    mv_counter ctr;
    mv_gauge g;
    CU_ASSERT_FATAL(mv_open(path, &seg) == MV_OK);
    CU_ASSERT_FATAL(mv_counter_register(seg, "x_total", NULL, NULL, NULL, 0, &ctr) == MV_OK);
    CU_ASSERT_FATAL(mv_gauge_register(seg, "level", NULL, NULL, NULL, 0, &g) == MV_OK);
    mv_counter_add(ctr, 5);
    uint64_t total = 5;
    for (int probe = 1; probe >= 0; probe--) {
        mv_coll_opts o;
        mv_coll *c;
        mv_coll_opts_default(&o);
        o.analytics = 1;
        o.no_probe = !probe;
        CU_ASSERT_FATAL(mv_coll_create(&o, &c) == 0);
        add_path(c, "s", path);
        for (int i = 0; i < 5; i++)
            mv_coll_tick(c);
        mv_coll_snap *sn = mv_coll_snapshot(c);
        const mv_coll_seg_view *v = mv_coll_snap_seg(sn, 0);
        uint64_t bytes = v->read_bytes;
        CU_ASSERT_EQUAL(v->reads, 5);
        CU_ASSERT_EQUAL(v->reads_same, probe ? 4u : 0u);
        mv_coll_snap_free(sn);

        /* A value moves: the next read copies; then a header word alone (heartbeat). */
        mv_counter_add(ctr, 2);
        total += 2;
        mv_coll_tick(c);
        double val = 0;
        CU_ASSERT(snap_value(c, "s", "x_total", &val, NULL) && val == (double)total);
        mv_gauge_set(g, 2.5 + probe);
        mv_coll_tick(c);
        CU_ASSERT(snap_value(c, "s", "level", &val, NULL) && val == 2.5 + probe);
        mv_heartbeat(seg);
        mv_coll_tick(c);
        mv_coll_tick(c);
        sn = mv_coll_snapshot(c);
        v = mv_coll_snap_seg(sn, 0);
        CU_ASSERT_EQUAL(v->reads, 9);
        CU_ASSERT_EQUAL(v->reads_same, probe ? 5u : 0u);
        CU_ASSERT(v->heartbeat_ns != 0);
        /* Copies move bytes, same reads none. */
        CU_ASSERT_EQUAL(v->read_bytes - bytes, (probe ? 3u : 4u) * v->hot_len);
        mv_coll_snap_free(sn);
        mv_coll_destroy(c);
    }
    mv_close(seg);
}

/* Same reads of a segment whose value slots are not evenly spaced (counters, gauges and
 * histograms of several sizes, so the probe's words are not one stride apart): a move of any
 * one metric is copied at the next tick and served, and the tick after is a same read. */
static void test_same_reads_mixed(void)
{
    char *p = make_segment("mixed.seg", 65536);
    char path[256];
    snprintf(path, sizeof path, "%s", p);
    mv_segment *seg;
    CU_ASSERT_FATAL(mv_open(path, &seg) == MV_OK);
    enum { N = 24 };
    mv_counter ctr[N];
    mv_gauge g[N];
    mv_histogram *h[N];
    char name[N][32];
    const double bounds[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
    for (int i = 0; i < N; i++) {
        int rc;
        switch (i % 3) {
        case 0:
            snprintf(name[i], sizeof name[i], "c%d_total", i);
            rc = mv_counter_register(seg, name[i], NULL, NULL, NULL, 0, &ctr[i]);
            break;
        case 1:
            snprintf(name[i], sizeof name[i], "g%d", i);
            rc = mv_gauge_register(seg, name[i], NULL, NULL, NULL, 0, &g[i]);
            break;
        default: /* 1 + 7i % 11 buckets: records of several sizes */
            snprintf(name[i], sizeof name[i], "h%d", i);
            rc = mv_histogram_register(seg, name[i], NULL, NULL, NULL, 0, bounds,
                                       1 + (size_t)i * 7 % 11, &h[i]);
        }
        CU_ASSERT_FATAL(rc == MV_OK);
    }
    mv_coll_opts o;
    mv_coll *c;
    mv_coll_opts_default(&o);
    o.analytics = 1;
    CU_ASSERT_FATAL(mv_coll_create(&o, &c) == 0);
    add_path(c, "m", path);
    for (int i = 0; i < 3; i++)
        mv_coll_tick(c);
    for (int round = 1; round <= 2; round++)
        for (int i = 0; i < N; i++) {
            mv_coll_snap *sn = mv_coll_snapshot(c);
            const mv_coll_seg_view *v = mv_coll_snap_seg(sn, 0);
            uint64_t same = v->reads_same, bytes = v->read_bytes, hot = v->hot_len;
            mv_coll_snap_free(sn);
            double want = round * 10.0 + i, val = -1;
            switch (i % 3) {
            case 0:
                mv_counter_add(ctr[i], 10);
                break;
            case 1:
                mv_gauge_set(g[i], want);
                break;
            default:
                mv_histogram_observe(h[i], want);
            }
            mv_coll_tick(c); /* copied */
            mv_coll_tick(c); /* same */
            sn = mv_coll_snapshot(c);
            v = mv_coll_snap_seg(sn, 0);
            CU_ASSERT_EQUAL(v->read_bytes - bytes, hot);
            CU_ASSERT_EQUAL(v->reads_same - same, 1);
            mv_coll_snap_free(sn);
            if (i % 3 == 1)
                CU_ASSERT(snap_value(c, "m", name[i], &val, NULL) && val == want);
            if (i % 3 == 0)
                CU_ASSERT(snap_value(c, "m", name[i], &val, NULL) && val == round * 10.0);
        }
    mv_coll_destroy(c);
    mv_close(seg);
}

/* Word `k` (shard k's first word) of metric `name` in the segment file at `path`, through a
 * mapping of its own (unmapped with munmap(*map, size)): an update as another thread's shard
 * would see it. */
static uint64_t *shard_word(const char *path, size_t size, const char *name, uint32_t k, void **map)
{
    int fd = open(path, O_RDWR);
    CU_ASSERT_FATAL(fd >= 0);
    *map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    CU_ASSERT_FATAL(*map != MAP_FAILED);
    mv_seg_catalog *cat;
    mv_seg_error e;
    CU_ASSERT_FATAL(mv_seg_catalog_parse(*map, size, size, &cat, &e) == MV_SEG_OK);
    uint64_t *w = NULL;
    for (size_t i = 0; i < mv_seg_catalog_count(cat); i++) {
        const mv_seg_metric *m = mv_seg_catalog_metric(cat, i);
        if (strcmp(m->name, name) == 0 && k < m->shards)
            w = (uint64_t *)(void *)((char *)*map + mv_seg_catalog_values_offset(cat) +
                                     m->value_offset + k * m->shard_stride);
    }
    mv_seg_catalog_free(cat);
    CU_ASSERT_PTR_NOT_NULL_FATAL(w);
    return w;
}

/* A relabel (the agent set the segment's labels) keeps the segment: its reads, its analytics
 * window; only the identity labels change, in name order. */
static void test_relabel_keeps_segment(void)
{
    mv_segment *seg;
    mv_counter ctr;
    char path[256];
    counter_segment("relabel.seg", 16384, "reqs_total", path, &seg, &ctr);
    mv_coll_opts o;
    mv_coll *c;
    mv_coll_opts_default(&o);
    o.analytics = 1;
    CU_ASSERT_FATAL(mv_coll_create(&o, &c) == 0);
    add_path(c, "r", path);
    for (int i = 0; i < 3; i++) {
        mv_counter_inc(ctr);
        mv_coll_tick(c);
    }
    mv_coll_snap *sn = mv_coll_snapshot(c);
    const mv_coll_seg_view *v = mv_coll_snap_seg(sn, 0);
    uint64_t reads = v->reads;
    CU_ASSERT_FATAL(v->pipe != NULL);
    uint64_t window_start = v->pipe->window_start_ns;
    mv_coll_snap_free(sn);

    mv_seg_label l[2] = {{"pod", "web-1"}, {"namespace", "team-a"}};
    CU_ASSERT_EQUAL(mv_coll_relabel(c, "r", l, 2), 0);
    CU_ASSERT_EQUAL(mv_coll_relabel(c, "missing", l, 2), -ENOENT);
    mv_counter_inc(ctr);
    mv_coll_tick(c);
    sn = mv_coll_snapshot(c);
    CU_ASSERT_FATAL(mv_coll_snap_count(sn) == 1);
    v = mv_coll_snap_seg(sn, 0);
    CU_ASSERT_STRING_EQUAL(v->id, "r");
    CU_ASSERT_FATAL(v->nlabels == 2);
    CU_ASSERT_STRING_EQUAL(v->labels[0].key, "namespace");
    CU_ASSERT_STRING_EQUAL(v->labels[0].value, "team-a");
    CU_ASSERT_STRING_EQUAL(v->labels[1].key, "pod");
    CU_ASSERT_STRING_EQUAL(v->labels[1].value, "web-1");
    CU_ASSERT_EQUAL(v->reads, reads + 1);
    CU_ASSERT_FATAL(v->pipe != NULL);
    CU_ASSERT_EQUAL(v->pipe->window_start_ns, window_start);
    CU_ASSERT_EQUAL(mv_coll_snap_stats(sn)->segments_removed, 0u);
    CU_ASSERT_EQUAL(mv_coll_snap_stats(sn)->segments_added, 1u);
    mv_coll_snap_free(sn);
    double val = 0;
    CU_ASSERT(snap_value(c, "r", "reqs_total", &val, NULL));
    CU_ASSERT_EQUAL(val, 4);
    mv_coll_destroy(c);
    mv_close(seg);
}

/* Sharded metrics (spec section 5.2) through the collector: snapshots and the pipeline see the
 * sum of the shards, and a move in a shard other than the first ends the same reads. */
static void test_sharded_segment(void)
{
    char path[256];
    snprintf(path, sizeof path, "%s", make_segment("sharded.seg", 16384));
    mv_segment *seg;
    mv_counter ctr;
    mv_gauge g;
    mv_histogram *h;
    const double b[2] = {1, 2};
    CU_ASSERT_FATAL(mv_open(path, &seg) == MV_OK);
    CU_ASSERT_FATAL(mv_set_shards(seg, 4) == MV_OK);
    CU_ASSERT_FATAL(mv_counter_register(seg, "x_total", NULL, NULL, NULL, 0, &ctr) == MV_OK);
    CU_ASSERT_FATAL(mv_gauge_register(seg, "level", NULL, NULL, NULL, 0, &g) == MV_OK);
    CU_ASSERT_FATAL(mv_histogram_register(seg, "lat", NULL, NULL, NULL, 0, b, 2, &h) == MV_OK);
    CU_ASSERT_FATAL(mv_set_shards(seg, 1) == MV_OK);
    mv_counter plain;
    CU_ASSERT_FATAL(mv_counter_register(seg, "plain_total", NULL, NULL, NULL, 0, &plain) == MV_OK);
    mv_counter_add(ctr, 1);
    mv_counter_add(plain, 2);
    mv_gauge_set(g, 1.0); /* shard 0 */
    mv_histogram_observe(h, 1.5);
    mv_histogram_observe(h, 0.5);
    void *map1, *map2;
    uint64_t *x3 = shard_word(path, 16384, "x_total", 3, &map1);
    uint64_t *level2 = shard_word(path, 16384, "level", 2, &map2);

    mv_coll_opts o;
    mv_coll *c;
    mv_coll_opts_default(&o);
    o.analytics = 1;
    o.pipe.window_ns = 20 * 1000000ull;
    CU_ASSERT_FATAL(mv_coll_create(&o, &c) == 0);
    add_path(c, "s", path);
    for (int i = 0; i < 3; i++)
        mv_coll_tick(c);
    __atomic_fetch_add(x3, 10, __ATOMIC_RELAXED); /* shard 3 moves: the probe must see it */
    mv_coll_tick(c);
    double val = 0, quarter = 0.25;
    CU_ASSERT(snap_value(c, "s", "x_total", &val, NULL) && val == 11);
    uint64_t bits;
    memcpy(&bits, &quarter, 8);
    __atomic_store_n(level2, bits, __ATOMIC_RELAXED);
    mv_coll_tick(c);
    CU_ASSERT(snap_value(c, "s", "level", &val, NULL) && val == 1.25);
    CU_ASSERT(snap_value(c, "s", "lat", &val, NULL) && val == 2);
    CU_ASSERT(snap_value(c, "s", "plain_total", &val, NULL) && val == 2);
    mv_coll_snap *sn = mv_coll_snapshot(c);
    const mv_coll_seg_view *v = mv_coll_snap_seg(sn, 0);
    CU_ASSERT_EQUAL(v->state, MV_COLL_OK);
    CU_ASSERT_EQUAL(v->reads, 5);
    CU_ASSERT_EQUAL(v->reads_same, 2); /* ticks 2 and 3; 4 and 5 copied */
    mv_coll_snap_free(sn);

    /* Windows closed since: the pipeline summarised the folded sum, not shard 0 (1.0). */
    for (int i = 0; i < 70; i++) {
        mv_coll_tick(c);
        usleep(1000);
    }
    sn = mv_coll_snapshot(c);
    v = mv_coll_snap_seg(sn, 0);
    CU_ASSERT_FATAL(v->pipe != NULL && v->pipe->cat == v->cat && v->pipe->n == 4);
    int seen = 0;
    for (size_t k = 0; k < v->pipe->n; k++) {
        const mv_seg_metric *m = mv_seg_catalog_metric(v->cat, k);
        const mv_pipe_out *po = &v->pipe->m[k];
        if (strcmp(m->name, "level") == 0) {
            CU_ASSERT(po->has_window);
            CU_ASSERT_EQUAL(po->last, 1.25);
            CU_ASSERT_EQUAL(po->min, 1.25);
            seen++;
        }
    }
    CU_ASSERT_EQUAL(seen, 1);
    mv_coll_snap_free(sn);
    mv_coll_destroy(c);
    munmap(map1, 16384);
    munmap(map2, 16384);
    mv_close(seg);
}

int main(void)
{
    g_dir = mv_test_tmpdir("test-collect");
    if (!g_dir)
        return 1;
    static const mv_test tests[] = {
        {"tick and catalog reload", test_tick_and_reload},
        {"fractional counters and deleted series", test_counter_f_and_delete},
        {"quarantine and recovery", test_quarantine_and_recover},
        {"truncated file (SIGBUS guard)", test_truncated_file_is_an_error_not_a_crash},
        {"bytes replaced under the map: validated again", test_replaced_bytes_validated_again},
        {"resized file: failed until restored", test_resized_file_fails_until_restored},
        {"retain, duplicates, pending", test_retain_and_duplicates},
        {"background tick thread", test_background_thread},
        {"long tick: new segments read early", test_long_tick_early_read},
        {"revoked segment is dropped", test_revoked_segment_is_dropped},
        {"same reads: no copy, same values", test_same_reads},
        {"sharded metrics: sums, pipeline, probe", test_sharded_segment},
        {"same reads of uneven value slots", test_same_reads_mixed},
        {"window phases per segment or aligned", test_window_align},
        {"relabel keeps the segment, its reads and analytics", test_relabel_keeps_segment},
    };
    int failed = MV_TEST_RUN("collect", tests);
    if (mv_test_rmrf(g_dir) != 0)
        fprintf(stderr, "could not remove %s\n", g_dir);
    free(g_dir);
    return failed;
}
