/* Tick workers (mv_coll_opts.tick_workers): many segments read and published every tick with
 * exact values by 1, 2 and 4 workers, stats (ticks, torn retries, bytes read) summed over the
 * workers; segments added and removed while workers run; a transport that is not `concurrent`
 * never entered by two threads at once; create/destroy of the helpers. Workers that stop,
 * poll, or meet "gone" and SIGBUS are test_collect_workers_faults.c. */
#include <CUnit/Basic.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "microview.h"
#include "mv_collect.h"
#include "mv_test.h"
#include "workers_fixture.h"

/* ---- Many segments, exact values, stats summed over the workers ---------------------------- */

/* Breaks every histogram of the fleet for good (a writer that died mid-update): each tick
 * then finds it torn and re-reads it TORN_RETRIES (3) times. */
static void fleet_break_histograms(mv_coll *c, fleet *f, const char *tag)
{
    mv_coll_snap *s = mv_coll_snapshot(c);
    for (size_t k = 0; k < mv_coll_snap_count(s); k++) {
        const mv_coll_seg_view *v = mv_coll_snap_seg(s, k);
        int i = fleet_index(v, tag);
        const mv_seg_metric *m = fleet_metric(v, "h", NULL);
        if (i < 0 || !m || !v->hot)
            continue;
        const mv_seg_header *h = v->hot;
        f->hist_off[i] = (uint64_t)h->values_offset + m->value_offset;
        f->hist_len = m->value_size;
        int fd = open(f->path[i], O_RDWR);
        uint64_t w;
        CU_ASSERT_FATAL(fd >= 0);
        CU_ASSERT_FATAL(pread(fd, &w, 8, (off_t)f->hist_off[i]) == 8);
        w += 1;
        CU_ASSERT_FATAL(pwrite(fd, &w, 8, (off_t)f->hist_off[i]) == 8);
        close(fd);
    }
    mv_coll_snap_free(s);
}

static void many_segments(uint32_t workers)
{
    const unsigned rounds = 20, hist_every = 10;
    fleet f;
    fleet_open(&f, "m", NSEG, hist_every);
    mv_coll *c = new_coll(workers, 1);
    fleet_add(c, &f, "m", NULL, NULL);
    mv_coll_tick(c); /* catalogs, and where the histograms live */
    CU_ASSERT_EQUAL(fleet_exact(c, "m", 0), NSEG);
    fleet_break_histograms(c, &f, "m");
    CU_ASSERT_FATAL(f.hist_len > 0);
    for (unsigned r = 1; r <= rounds; r++) {
        fleet_set(&f, r);
        mv_coll_tick(c);
        unsigned exact = fleet_exact(c, "m", r);
        CU_ASSERT_EQUAL(exact, NSEG);
        if (exact != NSEG)
            printf("\n  workers=%u round=%u: %u of %u segments exact\n", workers, r, exact, NSEG);
    }

    /* Per segment: one catalog read (whole segment + header re-read), then one hot copy per
     * tick; a broken histogram adds 3 re-reads of its record per tick after the first. */
    mv_coll_snap *s = mv_coll_snapshot(c);
    const mv_coll_stats *st = mv_coll_snap_stats(s);
    const uint64_t ticks = rounds + 1;
    uint64_t torn_segs = 0, sum_bytes = 0, want_bytes = 0;
    CU_ASSERT_EQUAL(mv_coll_snap_count(s), NSEG);
    for (size_t k = 0; k < mv_coll_snap_count(s); k++) {
        const mv_coll_seg_view *v = mv_coll_snap_seg(s, k);
        int i = fleet_index(v, "m");
        CU_ASSERT_FATAL(i >= 0 && (unsigned)i < NSEG);
        int broken = i % (int)hist_every == 0;
        uint64_t want = SEG_SIZE + MV_SEG_HEADER_SIZE + ticks * v->hot_len +
                        (broken ? rounds * 3u * f.hist_len : 0);
        CU_ASSERT_EQUAL(v->reads, ticks);
        CU_ASSERT_EQUAL(v->read_errors, 0);
        CU_ASSERT_EQUAL(v->read_bytes, want);
        CU_ASSERT_EQUAL(v->torn, broken ? rounds : 0);
        /* served from its last consistent copy (tick 0), never as zeros */
        CU_ASSERT_EQUAL(v->stale_histograms + v->omitted_histograms, broken ? 1u : 0u);
        CU_ASSERT_PTR_NOT_NULL(v->pipe); /* analysed on its worker */
        torn_segs += broken;
        sum_bytes += v->read_bytes;
        want_bytes += want;
    }
    CU_ASSERT_EQUAL(torn_segs, NSEG / hist_every);
    CU_ASSERT_EQUAL(sum_bytes, want_bytes);
    CU_ASSERT_EQUAL(st->ticks, ticks);
    CU_ASSERT_EQUAL(st->torn_retries, torn_segs * rounds);
    CU_ASSERT_EQUAL(st->catalog_reads, NSEG);
    CU_ASSERT_EQUAL(st->segments_added, NSEG);
    uint64_t in_hist = 0;
    for (size_t b = 0; b <= MV_COLL_TICK_BUCKETS; b++)
        in_hist += st->tick_buckets[b];
    CU_ASSERT_EQUAL(in_hist, ticks);
    for (size_t r = 0; r < MV_SEG_REASON_COUNT_; r++)
        CU_ASSERT_EQUAL(st->errors[r], 0);
    mv_coll_snap_free(s);
    mv_coll_destroy(c);
    fleet_close(&f);
}

static void test_many_segments_1(void)
{
    many_segments(1);
}

static void test_many_segments_2(void)
{
    many_segments(2);
}

static void test_many_segments_4(void)
{
    many_segments(4);
}

/* ---- Segments added and removed while the workers run -------------------------------------- */

typedef struct churn {
    mv_coll *c;
    const fleet *f;
    int stop; /* atomic */
    unsigned rounds, failures;
} churn;

static void *churner(void *arg)
{
    churn *ch = arg;
    const char *keep_ids[NSEG];
    char ids[NSEG][32];
    for (unsigned i = 0; i < NSEG / 2; i++) {
        seg_id(ids[i], sizeof ids[i], "k", i);
        keep_ids[i] = ids[i];
    }
    while (!__atomic_load_n(&ch->stop, __ATOMIC_ACQUIRE)) {
        /* The churning half comes and goes one by one, then all at once by retain. */
        for (unsigned i = 0; i < ch->f->n; i++) {
            char id[32], err[256];
            void *src;
            uint64_t size;
            seg_id(id, sizeof id, "x", i);
            if (mv_coll_shm_open(ch->f->path[i], 0, &src, &size, err, sizeof err) != 0 ||
                mv_coll_add(ch->c, id, size, NULL, 0, mv_coll_shm_transport(), src) != 0)
                ch->failures++;
        }
        for (unsigned i = 0; i < ch->f->n; i += 2) {
            char id[32];
            seg_id(id, sizeof id, "x", i);
            ch->failures += mv_coll_remove(ch->c, id) != 0;
        }
        mv_coll_retain(ch->c, keep_ids, NSEG / 2);
        ch->rounds++;
    }
    return NULL;
}

/* The tick keeps running: at least 10 ticks counted (a loaded machine may
 * have run fewer during the churn itself, so this is waited for, bounded). */
static int ticked_10(void *arg)
{
    mv_coll_snap *s = mv_coll_snapshot(arg);
    int ok = mv_coll_snap_stats(s)->ticks >= 10;
    mv_coll_snap_free(s);
    return ok;
}

static void add_remove_while_running(uint32_t workers)
{
    fleet stable, moving;
    fleet_open(&stable, "ks", NSEG / 2, 0);
    fleet_open(&moving, "xs", NSEG / 2, 0);
    mv_coll_opts o;
    mv_coll *c;
    mv_coll_opts_default(&o);
    o.tick_us = 1000;
    o.tick_workers = workers;
    o.analytics = 1;
    CU_ASSERT_FATAL(mv_coll_create(&o, &c) == 0);
    fleet_add(c, &stable, "k", NULL, NULL);
    CU_ASSERT_FATAL(mv_coll_start(c) == 0);
    churn ch = {.c = c, .f = &moving};
    pthread_t th;
    CU_ASSERT_FATAL(pthread_create(&th, NULL, churner, &ch) == 0);
    for (unsigned r = 1; r <= 40; r++) {
        fleet_set(&stable, r);
        fleet_set(&moving, r);
        mv_coll_snap_free(mv_coll_snapshot(c)); /* scrapes meanwhile */
        mv_test_sleep_ms(10);
    }
    __atomic_store_n(&ch.stop, 1, __ATOMIC_RELEASE);
    pthread_join(th, NULL);
    exact_arg a = {c, 40, "k", NSEG / 2};
    CU_ASSERT(mv_test_wait_until(all_exact, &a, 10000));
    CU_ASSERT(mv_test_wait_until(ticked_10, c, 10000));
    mv_coll_snap *s = mv_coll_snapshot(c);
    const mv_coll_stats *st = mv_coll_snap_stats(s);
    CU_ASSERT_EQUAL(mv_coll_snap_count(s), NSEG / 2);
    CU_ASSERT_EQUAL(st->segments_added - st->segments_removed, NSEG / 2);
    CU_ASSERT(st->segments_added >= NSEG / 2 + ch.rounds * moving.n);
    CU_ASSERT(ch.rounds >= 1);
    CU_ASSERT_EQUAL(ch.failures, 0);
    CU_ASSERT(st->ticks >= 10);
    printf("\n  workers=%u churn_rounds=%u ticks=%llu\n", workers, ch.rounds,
           (unsigned long long)st->ticks);
    mv_coll_snap_free(s);
    mv_coll_destroy(c);
    fleet_close(&stable);
    fleet_close(&moving);
}

static void test_add_remove_2(void)
{
    add_remove_while_running(2);
}

static void test_add_remove_4(void)
{
    add_remove_while_running(4);
}

/* ---- Transports that are not concurrent --------------------------------------------------- */

/* A transport over the shm copies that counts callers inside read_many. */
typedef struct probe {
    mv_coll_transport t;
    int inflight, max_inflight; /* atomic */
    unsigned calls;             /* atomic */
    pthread_mutex_t mu;
    pthread_t threads[8];
    unsigned nthreads;
} probe;

static void probe_read_many(void *ctx, mv_coll_read *rq, size_t n)
{
    probe *p = ctx;
    int now = __atomic_add_fetch(&p->inflight, 1, __ATOMIC_ACQ_REL);
    int max = __atomic_load_n(&p->max_inflight, __ATOMIC_RELAXED);
    while (now > max && !__atomic_compare_exchange_n(&p->max_inflight, &max, now, 0,
                                                     __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
    __atomic_add_fetch(&p->calls, 1, __ATOMIC_RELAXED);
    pthread_mutex_lock(&p->mu);
    int known = 0;
    for (unsigned i = 0; i < p->nthreads; i++)
        known |= pthread_equal(p->threads[i], pthread_self());
    if (!known && p->nthreads < 8)
        p->threads[p->nthreads++] = pthread_self();
    pthread_mutex_unlock(&p->mu);
    const mv_coll_transport *shm = mv_coll_shm_transport();
    shm->read_many(shm->ctx, rq, n);
    struct timespec ts = {0, 100000}; /* stay inside a while: a second caller would overlap */
    nanosleep(&ts, NULL);
    __atomic_sub_fetch(&p->inflight, 1, __ATOMIC_ACQ_REL);
}

static void probe_init(probe *p, const char *name, int concurrent)
{
    memset(p, 0, sizeof *p);
    p->t = (mv_coll_transport){.name = name,
                               .ctx = p,
                               .read_many = probe_read_many,
                               .src_close = shm_src_close,
                               .concurrent = concurrent};
    pthread_mutex_init(&p->mu, NULL);
}

static void test_not_concurrent_transport(void)
{
    fleet fa, fb, fc;
    fleet_open(&fa, "na", NSEG / 4, 0);
    fleet_open(&fb, "nb", NSEG / 4, 0);
    fleet_open(&fc, "nc", NSEG / 2, 0);
    probe a, b, cc;
    probe_init(&a, "serial-a", 0);
    probe_init(&b, "serial-b", 0);
    probe_init(&cc, "parallel", 1);
    mv_coll *c = new_coll(4, 0);
    fleet_add(c, &fa, "a", &a.t, NULL);
    fleet_add(c, &fb, "b", &b.t, NULL);
    fleet_add(c, &fc, "c", &cc.t, NULL);
    CU_ASSERT(mv_coll_shm_transport()->concurrent); /* the shm transport says it is */
    for (unsigned r = 1; r <= 30; r++) {
        fleet_set(&fa, r);
        fleet_set(&fb, r);
        fleet_set(&fc, r);
        mv_coll_tick(c);
        CU_ASSERT_EQUAL(fleet_exact(c, "a", r), fa.n);
        CU_ASSERT_EQUAL(fleet_exact(c, "b", r), fb.n);
        CU_ASSERT_EQUAL(fleet_exact(c, "c", r), fc.n);
    }
    printf("\n  serial-a: calls=%u threads=%u max_inflight=%d; serial-b: calls=%u threads=%u "
           "max_inflight=%d; parallel: calls=%u threads=%u max_inflight=%d\n",
           a.calls, a.nthreads, a.max_inflight, b.calls, b.nthreads, b.max_inflight, cc.calls,
           cc.nthreads, cc.max_inflight);
    CU_ASSERT_EQUAL(a.max_inflight, 1);
    CU_ASSERT_EQUAL(b.max_inflight, 1);
    /* The workers did share the ticks: more than one thread called each transport. */
    CU_ASSERT(a.nthreads >= 2 || b.nthreads >= 2 || cc.nthreads >= 2);
    mv_coll_destroy(c);
    fleet_close(&fa);
    fleet_close(&fb);
    fleet_close(&fc);
    pthread_mutex_destroy(&a.mu);
    pthread_mutex_destroy(&b.mu);
    pthread_mutex_destroy(&cc.mu);
}

/* ---- Create and destroy -------------------------------------------------------------------- */

static void test_create_destroy(void)
{
    mv_coll_opts o;
    mv_coll *c = NULL;
    mv_coll_opts_default(&o);
    CU_ASSERT_EQUAL(o.tick_workers, 1);
    o.tick_workers = MV_COLL_MAX_TICK_WORKERS + 1;
    CU_ASSERT_EQUAL(mv_coll_create(&o, &c), -EINVAL);
    o.tick_workers = 0; /* taken as 1 */
    CU_ASSERT_FATAL(mv_coll_create(&o, &c) == 0);
    mv_coll_tick(c);
    mv_coll_destroy(c);
    /* Helpers are joined whether or not a tick ever ran, or the tick thread started. */
    for (int i = 0; i < 20; i++) {
        o.tick_workers = (uint32_t)(i % 2 ? 8 : MV_COLL_MAX_TICK_WORKERS);
        o.tick_us = 1000;
        CU_ASSERT_FATAL(mv_coll_create(&o, &c) == 0);
        if (i % 4 == 1)
            mv_coll_tick(c);
        if (i % 4 == 2)
            CU_ASSERT(mv_coll_start(c) == 0);
        mv_coll_destroy(c);
    }
}

int main(void)
{
    g_main = pthread_self();
    g_dir = mv_test_tmpdir("collect-workers");
    if (!g_dir)
        return 1;
    static const mv_test tests[] = {
        {"1 worker: 200 segments exact, stats", test_many_segments_1},
        {"2 workers: 200 segments exact, stats", test_many_segments_2},
        {"4 workers: 200 segments exact, stats", test_many_segments_4},
        {"2 workers: add/remove while running", test_add_remove_2},
        {"4 workers: add/remove while running", test_add_remove_4},
        {"non-concurrent transport entered by one thread", test_not_concurrent_transport},
        {"create and destroy", test_create_destroy},
    };
    int rc = MV_TEST_RUN("collect_workers", tests);
    mv_test_rmrf(g_dir);
    free(g_dir);
    return rc;
}
