/* Tick workers (mv_coll_opts.tick_workers): many segments read and published every tick with
 * exact values by 1, 2 and 4 workers; segments added and removed while workers run; a
 * transport that is not `concurrent` never entered by two threads at once; a "gone" read on a
 * helper drops exactly its segment and tells the drop hook once; SIGBUS on helpers; stats
 * (ticks, torn retries, bytes read) summed over the workers; a worker stopped mid-chunk holds
 * back no tick (its segments deferred); create/destroy of the helpers. */
#include <CUnit/Basic.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "microview.h"
#include "mv_collect.h"
#include "mv_test.h"

#define SEG_SIZE 8192u
#define NSEG     200u

static char *g_dir;
static pthread_t g_main; /* the thread that calls mv_coll_tick */

/* ---- A fleet of segment files written with libmicroview ------------------------------------ */

typedef struct fleet {
    unsigned n;
    char (*path)[256];
    mv_segment **seg;
    mv_counter *ctr;
    mv_gauge *gauge;
    uint64_t *hist_off; /* file offset of a histogram's first word; 0 = none */
    uint32_t hist_len;  /* value bytes of each histogram */
} fleet;

static void seg_id(char *out, size_t cap, const char *tag, unsigned i)
{
    snprintf(out, cap, "%s%03u", tag, i);
}

/* `n` segments named TAG000..; every `hist_every`-th (0: none) also has a histogram. */
static void fleet_open(fleet *f, const char *tag, unsigned n, unsigned hist_every)
{
    memset(f, 0, sizeof *f);
    f->n = n;
    f->path = calloc(n, sizeof *f->path);
    f->seg = calloc(n, sizeof *f->seg);
    f->ctr = calloc(n, sizeof *f->ctr);
    f->gauge = calloc(n, sizeof *f->gauge);
    f->hist_off = calloc(n, sizeof *f->hist_off);
    CU_ASSERT_FATAL(f->path && f->seg && f->ctr && f->gauge && f->hist_off);
    for (unsigned i = 0; i < n; i++) {
        snprintf(f->path[i], sizeof f->path[i], "%s/%s%03u.seg", g_dir, tag, i);
        int fd = open(f->path[i], O_RDWR | O_CREAT | O_TRUNC, 0600);
        CU_ASSERT_FATAL(fd >= 0);
        CU_ASSERT_FATAL(ftruncate(fd, SEG_SIZE) == 0);
        close(fd);
        CU_ASSERT_FATAL(mv_open(f->path[i], &f->seg[i]) == MV_OK);
        CU_ASSERT_FATAL(
            mv_counter_register(f->seg[i], "c_total", NULL, NULL, NULL, 0, &f->ctr[i]) == MV_OK);
        CU_ASSERT_FATAL(mv_gauge_register(f->seg[i], "g", NULL, NULL, NULL, 0, &f->gauge[i]) ==
                        MV_OK);
        mv_counter_add(f->ctr[i], i);
        mv_gauge_set(f->gauge[i], (double)i * 1000);
        if (hist_every && i % hist_every == 0) {
            double bounds[] = {1, 10};
            mv_histogram *h;
            CU_ASSERT_FATAL(
                mv_histogram_register(f->seg[i], "h", NULL, NULL, NULL, 0, bounds, 2, &h) == MV_OK);
            mv_histogram_observe(h, 5);
        }
    }
}

static void fleet_close(fleet *f)
{
    for (unsigned i = 0; i < f->n; i++)
        mv_close(f->seg[i]); /* NULL: closed already */
    free(f->path);
    free(f->seg);
    free(f->ctr);
    free(f->gauge);
    free(f->hist_off);
}

/* Round `r`: every counter gains 1 (so it reads i + r), every gauge is set to i * 1000 + r.
 * Segments closed already are left alone. */
static void fleet_set(fleet *f, unsigned r)
{
    for (unsigned i = 0; i < f->n; i++) {
        if (!f->seg[i])
            continue;
        mv_counter_inc(f->ctr[i]);
        mv_gauge_set(f->gauge[i], (double)i * 1000 + r);
    }
}

/* Adds the fleet's files as TAG000.. read through `t` (NULL: shm); their sources go to `srcs`
 * unless it is NULL. */
static void fleet_add(mv_coll *c, const fleet *f, const char *tag, const mv_coll_transport *t,
                      void **srcs)
{
    for (unsigned i = 0; i < f->n; i++) {
        char id[32], err[256];
        void *src;
        uint64_t size;
        seg_id(id, sizeof id, tag, i);
        mv_seg_label l = {"service", id};
        CU_ASSERT_FATAL(mv_coll_shm_open(f->path[i], 0, &src, &size, err, sizeof err) == 0);
        CU_ASSERT_FATAL(mv_coll_add(c, id, size, &l, 1, t ? t : mv_coll_shm_transport(), src) == 0);
        if (srcs)
            srcs[i] = src;
    }
}

static mv_coll *new_coll(uint32_t workers, int analytics)
{
    mv_coll_opts o;
    mv_coll *c;
    mv_coll_opts_default(&o);
    o.tick_workers = workers;
    o.analytics = analytics;
    o.quarantine_after_ms = 0;
    o.recheck_ms = 60000;
    CU_ASSERT_FATAL(mv_coll_create(&o, &c) == 0);
    return c;
}

static const mv_seg_metric *metric(const mv_coll_seg_view *v, const char *name, size_t *idx)
{
    for (size_t k = 0; v->cat && k < mv_seg_catalog_count(v->cat); k++) {
        const mv_seg_metric *m = mv_seg_catalog_metric(v->cat, k);
        if (strcmp(m->name, name) == 0) {
            if (idx)
                *idx = k;
            return m;
        }
    }
    return NULL;
}

/* Index of a view's segment in the fleet `tag`, or -1. */
static int fleet_index(const mv_coll_seg_view *v, const char *tag)
{
    size_t tl = strlen(tag);
    if (strncmp(v->id, tag, tl) != 0)
        return -1;
    return atoi(v->id + tl);
}

/* Counts the fleet's segments published with exactly round `r`'s values. */
static unsigned fleet_exact(mv_coll *c, const char *tag, unsigned r)
{
    mv_coll_snap *s = mv_coll_snapshot(c);
    unsigned ok = 0;
    for (size_t k = 0; k < mv_coll_snap_count(s); k++) {
        const mv_coll_seg_view *v = mv_coll_snap_seg(s, k);
        int i = fleet_index(v, tag);
        const mv_seg_metric *mc = metric(v, "c_total", NULL), *mg = metric(v, "g", NULL);
        if (i < 0 || v->state != MV_COLL_OK || !v->hot || !mc || !mg)
            continue;
        ok += mv_seg_read_counter(v->hot, mc) == (uint64_t)i + r &&
              mv_seg_read_gauge(v->hot, mg) == (double)i * 1000 + r;
    }
    mv_coll_snap_free(s);
    return ok;
}

/* ---- Many segments, exact values, stats summed over the workers ---------------------------- */

/* Breaks every histogram of the fleet for good (a writer that died mid-update): each tick
 * then finds it torn and re-reads it TORN_RETRIES (3) times. */
static void fleet_break_histograms(mv_coll *c, fleet *f, const char *tag)
{
    mv_coll_snap *s = mv_coll_snapshot(c);
    for (size_t k = 0; k < mv_coll_snap_count(s); k++) {
        const mv_coll_seg_view *v = mv_coll_snap_seg(s, k);
        int i = fleet_index(v, tag);
        const mv_seg_metric *m = metric(v, "h", NULL);
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

/* Waits for `want` segments of fleet `tag` to hold round `r`'s values. */
typedef struct exact_arg {
    mv_coll *c;
    unsigned r;
    const char *tag;
    unsigned want;
} exact_arg;

static int all_exact(void *arg)
{
    exact_arg *a = arg;
    return fleet_exact(a->c, a->tag, a->r) == a->want;
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

static void probe_close(void *ctx, void *src)
{
    const mv_coll_transport *shm = mv_coll_shm_transport();
    (void)ctx;
    shm->src_close(shm->ctx, src);
}

static void probe_init(probe *p, const char *name, int concurrent)
{
    memset(p, 0, sizeof *p);
    p->t = (mv_coll_transport){.name = name,
                               .ctx = p,
                               .read_many = probe_read_many,
                               .src_close = probe_close,
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

/* ---- "Gone" reads on helper workers ------------------------------------------------------- */

typedef struct gone {
    pthread_mutex_t mu;
    void *victim_src[NSEG]; /* sources that answer "gone" */
    unsigned nvictims;
    int helper_only; /* gone only when read by a helper (not the mv_coll_tick caller) */
    unsigned hook_calls;
    unsigned hook_count[NSEG];
    void *hook_src[NSEG];
    int hook_on_helper;
    const char *tag;
} gone;

static gone g_gone;

static void gone_read_many(void *ctx, mv_coll_read *rq, size_t n)
{
    gone *g = ctx;
    int on_main = pthread_equal(pthread_self(), g_main);
    const mv_coll_transport *shm = mv_coll_shm_transport();
    shm->read_many(shm->ctx, rq, n);
    for (size_t i = 0; i < n; i++)
        for (unsigned k = 0; k < g->nvictims; k++)
            if (rq[i].src == g->victim_src[k] && !(g->helper_only && on_main))
                rq[i].status = -EACCES;
    if (on_main && g->helper_only) {
        struct timespec ts = {0, 1000000}; /* leave the other chunks to the helpers */
        nanosleep(&ts, NULL);
    }
}

static void on_drop(void *arg, const char *id, void *src)
{
    gone *g = arg;
    pthread_mutex_lock(&g->mu);
    __atomic_add_fetch(&g->hook_calls, 1, __ATOMIC_RELAXED);
    int i = atoi(id + strlen(g->tag));
    if (i >= 0 && i < (int)NSEG) {
        g->hook_count[i]++;
        g->hook_src[i] = src;
    }
    g->hook_on_helper |= !pthread_equal(pthread_self(), g_main);
    pthread_mutex_unlock(&g->mu);
}

static int has_id(mv_coll *c, const char *id)
{
    mv_coll_snap *s = mv_coll_snapshot(c);
    int found = 0;
    for (size_t k = 0; k < mv_coll_snap_count(s); k++)
        found |= strcmp(mv_coll_snap_seg(s, k)->id, id) == 0;
    mv_coll_snap_free(s);
    return found;
}

static void gone_setup(fleet *f, const char *tag, int helper_only, mv_coll **c, void **srcs)
{
    static const mv_coll_transport t = {
        .name = "gone", .ctx = &g_gone, .read_many = gone_read_many, .src_close = probe_close};
    memset(&g_gone, 0, sizeof g_gone);
    pthread_mutex_init(&g_gone.mu, NULL);
    g_gone.tag = tag;
    fleet_open(f, tag, NSEG, 0);
    *c = new_coll(4, 1);
    mv_coll_set_drop_hook(*c, on_drop, &g_gone);
    fleet_add(*c, f, tag, &t, srcs);
    mv_coll_tick(*c);
    CU_ASSERT_EQUAL(fleet_exact(*c, tag, 0), NSEG);
    g_gone.helper_only = helper_only;
}

/* One segment answers "gone" only when a helper reads it: dropped once, on the helper. */
static void test_gone_on_helper(void)
{
    fleet f;
    mv_coll *c;
    void *srcs[NSEG];
    gone_setup(&f, "g", 1, &c, srcs);
    /* The first segment added is the last in the table's list: the last chunk, which the
     * helpers take while the tick's own thread sleeps in its first read. */
    const unsigned victim = 0;
    pthread_mutex_lock(&g_gone.mu);
    g_gone.victim_src[0] = srcs[victim];
    g_gone.nvictims = 1;
    pthread_mutex_unlock(&g_gone.mu);
    unsigned ticks = 0;
    while (ticks < 500 && !__atomic_load_n(&g_gone.hook_calls, __ATOMIC_RELAXED)) {
        mv_coll_tick(c);
        ticks++;
    }
    fleet_set(&f, 1);
    mv_coll_tick(c);
    mv_coll_tick(c);
    printf("\n  dropped after %u ticks\n", ticks);
    CU_ASSERT_EQUAL(g_gone.hook_calls, 1);
    CU_ASSERT_EQUAL(g_gone.hook_count[victim], 1);
    CU_ASSERT_PTR_EQUAL(g_gone.hook_src[victim], srcs[victim]);
    CU_ASSERT(g_gone.hook_on_helper);
    CU_ASSERT(!has_id(c, "g000"));
    CU_ASSERT_EQUAL(fleet_exact(c, "g", 1), NSEG - 1);
    mv_coll_snap *s = mv_coll_snapshot(c);
    CU_ASSERT_EQUAL(mv_coll_snap_count(s), NSEG - 1);
    CU_ASSERT_EQUAL(mv_coll_snap_stats(s)->segments_removed, 1);
    for (size_t r = 0; r < MV_SEG_REASON_COUNT_; r++)
        CU_ASSERT_EQUAL(mv_coll_snap_stats(s)->errors[r], 0);
    mv_coll_snap_free(s);
    mv_coll_destroy(c);
    fleet_close(&f);
    pthread_mutex_destroy(&g_gone.mu);
}

/* Many segments gone in one tick, on every worker: each dropped once, the hook told once each
 * (it runs on several workers at once). */
static void test_many_gone_at_once(void)
{
    fleet f;
    mv_coll *c;
    void *srcs[NSEG];
    gone_setup(&f, "h", 0, &c, srcs);
    pthread_mutex_lock(&g_gone.mu);
    for (unsigned i = 0; i < NSEG; i += 7)
        g_gone.victim_src[g_gone.nvictims++] = srcs[i];
    pthread_mutex_unlock(&g_gone.mu);
    unsigned nv = g_gone.nvictims;
    mv_coll_tick(c);
    fleet_set(&f, 1);
    mv_coll_tick(c);
    CU_ASSERT_EQUAL(g_gone.hook_calls, nv);
    for (unsigned i = 0; i < NSEG; i++) {
        CU_ASSERT_EQUAL(g_gone.hook_count[i], i % 7 == 0 ? 1u : 0u);
        if (i % 7 == 0)
            CU_ASSERT_PTR_EQUAL(g_gone.hook_src[i], srcs[i]);
    }
    CU_ASSERT_EQUAL(fleet_exact(c, "h", 1), NSEG - nv);
    mv_coll_snap *s = mv_coll_snapshot(c);
    CU_ASSERT_EQUAL(mv_coll_snap_count(s), NSEG - nv);
    CU_ASSERT_EQUAL(mv_coll_snap_stats(s)->segments_removed, nv);
    mv_coll_snap_free(s);
    mv_coll_destroy(c);
    fleet_close(&f);
    pthread_mutex_destroy(&g_gone.mu);
}

/* ---- A worker stopped mid-chunk ------------------------------------------------------------- */

/* A transport whose read of one segment blocks, once armed, until released: the worker in it
 * stands for one whose CPU the host took away while it held a chunk of a tick. */
typedef struct stall {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    void *victim;
    int armed, stalled, released;
} stall;

static stall g_stall;

static void stall_read_many(void *ctx, mv_coll_read *rq, size_t n)
{
    stall *st = ctx;
    pthread_mutex_lock(&st->mu);
    int hit = 0;
    for (size_t i = 0; i < n; i++)
        hit |= st->armed && rq[i].src == st->victim;
    if (hit) {
        st->armed = 0;
        st->stalled = 1;
        pthread_cond_broadcast(&st->cv);
        while (!st->released)
            pthread_cond_wait(&st->cv, &st->mu);
    }
    pthread_mutex_unlock(&st->mu);
    const mv_coll_transport *shm = mv_coll_shm_transport();
    shm->read_many(shm->ctx, rq, n);
}

static int is_stalled(void *arg)
{
    stall *st = arg;
    pthread_mutex_lock(&st->mu);
    int v = st->stalled;
    pthread_mutex_unlock(&st->mu);
    return v;
}

typedef struct ticks_past {
    mv_coll *c;
    uint64_t n;
} ticks_past;

static int ticked_past(void *arg)
{
    ticks_past *t = arg;
    mv_coll_snap *s = mv_coll_snapshot(t->c);
    int ok = mv_coll_snap_stats(s)->ticks >= t->n;
    mv_coll_snap_free(s);
    return ok;
}

typedef struct tick_log {
    pthread_mutex_t mu; /* on_tick runs under the table's lock; the test reads under this */
    uint64_t scheduled, unscheduled, bad;
} tick_log;

static void log_tick(void *arg, const mv_coll_tick_info *ti)
{
    tick_log *l = arg;
    pthread_mutex_lock(&l->mu);
    if (ti->due_ns) {
        l->scheduled++;
        l->bad += ti->start_ns < ti->due_ns;
    } else {
        l->unscheduled++;
    }
    l->bad += ti->end_ns < ti->start_ns || ti->deferred > ti->segments;
    pthread_mutex_unlock(&l->mu);
}

static int deferred_summed(void *arg)
{
    mv_coll_snap *s = mv_coll_snapshot(arg);
    uint64_t sum = 0;
    for (size_t k = 0; k < mv_coll_snap_count(s); k++)
        sum += mv_coll_snap_seg(s, k)->reads_deferred;
    int ok = sum > 0 && mv_coll_snap_stats(s)->reads_deferred == sum;
    mv_coll_snap_free(s);
    return ok;
}

/* Scheduled ticks with 2 workers, one of them stopped inside a read: the other goes on
 * starting and ending ticks, defers the segments the stopped one holds (counted, per segment
 * and in all), and reads every other segment; once it resumes, every value is exact. */
static void test_stalled_worker(void)
{
    fleet f;
    void *srcs[NSEG];
    static const mv_coll_transport t = {.name = "stall",
                                        .ctx = &g_stall,
                                        .read_many = stall_read_many,
                                        .src_close = probe_close,
                                        .concurrent = 1,
                                        .local = 1};
    memset(&g_stall, 0, sizeof g_stall);
    pthread_mutex_init(&g_stall.mu, NULL);
    pthread_cond_init(&g_stall.cv, NULL);
    tick_log log = {0};
    pthread_mutex_init(&log.mu, NULL);
    fleet_open(&f, "w", NSEG, 0);
    mv_coll_opts o;
    mv_coll *c;
    mv_coll_opts_default(&o);
    o.tick_workers = 2;
    o.tick_us = 1000;
    o.on_tick = log_tick;
    o.on_tick_arg = &log;
    CU_ASSERT_FATAL(mv_coll_create(&o, &c) == 0);
    fleet_add(c, &f, "w", &t, srcs);
    mv_coll_tick(c);
    CU_ASSERT_EQUAL(fleet_exact(c, "w", 0), NSEG);
    CU_ASSERT_FATAL(mv_coll_start(c) == 0);

    pthread_mutex_lock(&g_stall.mu);
    g_stall.victim = srcs[NSEG / 2];
    g_stall.armed = 1;
    pthread_mutex_unlock(&g_stall.mu);
    CU_ASSERT_FATAL(mv_test_wait_until(is_stalled, &g_stall, 10000));
    mv_coll_snap *s0 = mv_coll_snapshot(c);
    uint64_t reads0[NSEG] = {0};
    for (size_t k = 0; k < mv_coll_snap_count(s0); k++) {
        int i = fleet_index(mv_coll_snap_seg(s0, k), "w");
        if (i >= 0 && i < (int)NSEG)
            reads0[i] = mv_coll_snap_seg(s0, k)->reads;
    }
    ticks_past tp = {c, mv_coll_snap_stats(s0)->ticks + 30};
    mv_coll_snap_free(s0);
    /* Ticks end while the stopped worker holds its chunk. */
    CU_ASSERT(mv_test_wait_until(ticked_past, &tp, 10000));
    CU_ASSERT(is_stalled(&g_stall));

    mv_coll_snap *s1 = mv_coll_snapshot(c);
    unsigned advanced = 0, deferred_segs = 0;
    uint64_t deferred_sum = 0, victim_deferred = 0, victim_reads = 0;
    for (size_t k = 0; k < mv_coll_snap_count(s1); k++) {
        const mv_coll_seg_view *v = mv_coll_snap_seg(s1, k);
        int i = fleet_index(v, "w");
        if (i < 0 || i >= (int)NSEG)
            continue;
        advanced += v->reads >= reads0[i] + 20;
        deferred_segs += v->reads_deferred > 0;
        deferred_sum += v->reads_deferred;
        if (i == (int)NSEG / 2) {
            victim_deferred = v->reads_deferred;
            victim_reads = v->reads - reads0[i];
        }
    }
    printf("\n  stalled: %u segments read on, %u deferred (%llu reads)\n", advanced, deferred_segs,
           (unsigned long long)deferred_sum);
    CU_ASSERT(victim_deferred >= 20);
    CU_ASSERT_EQUAL(victim_reads, 0);
    CU_ASSERT(deferred_segs >= 1 && deferred_segs <= NSEG / 2);
    CU_ASSERT(advanced >= NSEG / 2);
    /* A tick counts its deferred reads in all when it ends: never more than the segments'. */
    CU_ASSERT(mv_coll_snap_stats(s1)->reads_deferred <= deferred_sum);
    mv_coll_snap_free(s1);

    fleet_set(&f, 1);
    pthread_mutex_lock(&g_stall.mu);
    g_stall.released = 1;
    pthread_cond_broadcast(&g_stall.cv);
    pthread_mutex_unlock(&g_stall.mu);
    exact_arg a = {c, 1, "w", NSEG};
    CU_ASSERT(mv_test_wait_until(all_exact, &a, 10000));
    /* Between ticks the total is the segments' sum. */
    CU_ASSERT(mv_test_wait_until(deferred_summed, c, 10000));
    mv_coll_destroy(c);
    pthread_mutex_lock(&log.mu);
    CU_ASSERT(log.scheduled >= 30);
    CU_ASSERT(log.unscheduled >= 1); /* the mv_coll_tick above */
    CU_ASSERT_EQUAL(log.bad, 0);
    pthread_mutex_unlock(&log.mu);
    fleet_close(&f);
    pthread_mutex_destroy(&log.mu);
    pthread_cond_destroy(&g_stall.cv);
    pthread_mutex_destroy(&g_stall.mu);
}

/* The tick workers' threads (named mv-tick*) that may run on one CPU only, and all of them. */
static void pinned_workers(unsigned *pinned, unsigned *all)
{
    *pinned = *all = 0;
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char path[300], line[256], comm[64] = "";
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        int named = fgets(comm, sizeof comm, f) && strncmp(comm, "mv-tick", 7) == 0;
        fclose(f);
        snprintf(path, sizeof path, "/proc/self/task/%s/status", e->d_name);
        if (!named || !(f = fopen(path, "r")))
            continue;
        (*all)++;
        while (fgets(line, sizeof line, f))
            if (strncmp(line, "Cpus_allowed_list:", 18) == 0)
                *pinned += strpbrk(line + 18, ",-") == NULL;
        fclose(f);
    }
    if (d)
        closedir(d);
}

/* tick_poll: idle workers poll instead of sleeping, each on a CPU of its own when there are
 * enough; ticks run on schedule with exact values, the polled time is counted, and destroy
 * stops the pollers at once. */
static void test_tick_poll(void)
{
    fleet f;
    fleet_open(&f, "p", NSEG, 0);
    mv_coll_opts o;
    mv_coll *c;
    mv_coll_opts_default(&o);
    o.tick_workers = 2;
    o.tick_us = 5000;
    o.tick_poll = 1;
    CU_ASSERT_FATAL(mv_coll_create(&o, &c) == 0);
    fleet_add(c, &f, "p", NULL, NULL);
    CU_ASSERT_FATAL(mv_coll_start(c) == 0);
    fleet_set(&f, 1);
    exact_arg a = {c, 1, "p", NSEG};
    CU_ASSERT(mv_test_wait_until(all_exact, &a, 10000));
    ticks_past tp = {c, 20};
    CU_ASSERT(mv_test_wait_until(ticked_past, &tp, 10000));
    mv_coll_snap *s = mv_coll_snapshot(c);
    const mv_coll_stats *st = mv_coll_snap_stats(s);
    /* 20 ticks of 5 ms: most of 100 ms between them was polled, by two workers */
    printf("\n  ticks=%llu poll_seconds=%.3f\n", (unsigned long long)st->ticks, st->poll_seconds);
    CU_ASSERT(st->poll_seconds > 0.02);
    mv_coll_snap_free(s);
    unsigned pinned, all;
    pinned_workers(&pinned, &all);
    cpu_set_t cs;
    CU_ASSERT_FATAL(sched_getaffinity(0, sizeof cs, &cs) == 0);
    CU_ASSERT_EQUAL(all, 2);
    if (CPU_COUNT(&cs) >= 2) { /* one CPU: every thread is on it anyway, nothing to tell */
        CU_ASSERT_EQUAL(pinned, 2);
    } else {
        printf("  (one CPU: the workers' pinning is not checked)\n");
    }
    uint64_t t0 = mv_test_mono_ms();
    mv_coll_destroy(c);
    CU_ASSERT(mv_test_mono_ms() - t0 < 2000);
    fleet_close(&f);
}

/* ---- SIGBUS on helpers --------------------------------------------------------------------- */

/* Files truncated under the collector, spread over every chunk: each SIGBUS is caught on the
 * worker that copied, quarantines that segment only. */
static void test_sigbus_on_workers(void)
{
    fleet f;
    fleet_open(&f, "t", NSEG, 0);
    mv_coll *c = new_coll(4, 0);
    fleet_add(c, &f, "t", NULL, NULL);
    mv_coll_tick(c);
    CU_ASSERT_EQUAL(fleet_exact(c, "t", 0), NSEG);
    unsigned cut = 0;
    for (unsigned i = 0; i < NSEG; i += 10, cut++) {
        mv_close(f.seg[i]); /* the writer must not touch the vanished pages either */
        f.seg[i] = NULL;
        CU_ASSERT_FATAL(truncate(f.path[i], 0) == 0);
    }
    fleet_set(&f, 1);
    mv_coll_tick(c);
    mv_coll_snap *s = mv_coll_snapshot(c);
    unsigned quarantined = 0;
    for (size_t k = 0; k < mv_coll_snap_count(s); k++) {
        const mv_coll_seg_view *v = mv_coll_snap_seg(s, k);
        int i = fleet_index(v, "t");
        CU_ASSERT_EQUAL(v->state, i % 10 == 0 ? MV_COLL_QUARANTINED : MV_COLL_OK);
        quarantined += v->state == MV_COLL_QUARANTINED;
    }
    CU_ASSERT_EQUAL(quarantined, cut);
    CU_ASSERT_EQUAL(mv_coll_snap_stats(s)->errors[MV_SEG_E_TRUNCATED], cut);
    mv_coll_snap_free(s);
    CU_ASSERT_EQUAL(fleet_exact(c, "t", 1), NSEG - cut);
    mv_coll_destroy(c);
    fleet_close(&f);
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
        {"a worker stopped mid-chunk: ticks go on, its segments deferred", test_stalled_worker},
        {"tick_poll: scheduled ticks, polled time counted, destroy stops it", test_tick_poll},
        {"2 workers: add/remove while running", test_add_remove_2},
        {"4 workers: add/remove while running", test_add_remove_4},
        {"non-concurrent transport entered by one thread", test_not_concurrent_transport},
        {"gone on a helper: dropped once, hook once", test_gone_on_helper},
        {"many gone at once: hook once each", test_many_gone_at_once},
        {"SIGBUS on workers", test_sigbus_on_workers},
        {"create and destroy", test_create_destroy},
    };
    int rc = MV_TEST_RUN("collect_workers", tests);
    mv_test_rmrf(g_dir);
    free(g_dir);
    return rc;
}
