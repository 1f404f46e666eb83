/* Tick workers that meet trouble: a "gone" read on a helper drops exactly its segment and
 * tells the drop hook once; a worker stopped mid-chunk holds back no tick (its segments are
 * deferred); with tick_poll idle workers poll, each on a CPU of its own, and destroy stops
 * them; SIGBUS on helpers quarantines only the segment copied. */
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
#include "workers_fixture.h"

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
        .name = "gone", .ctx = &g_gone, .read_many = gone_read_many, .src_close = shm_src_close};
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
                                        .src_close = shm_src_close,
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
    /* The statistics alone, taken after: the same counters or later ones. */
    mv_coll_stats st2;
    mv_coll_stats_get(c, &st2);
    CU_ASSERT(st2.ticks >= st->ticks && st2.ticks > 0);
    CU_ASSERT(st2.poll_seconds >= st->poll_seconds);
    CU_ASSERT(st2.segments_added == NSEG && st2.segments_added == st->segments_added);
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

int main(void)
{
    g_main = pthread_self();
    g_dir = mv_test_tmpdir("collect-workers-faults");
    if (!g_dir)
        return 1;
    static const mv_test tests[] = {
        {"a worker stopped mid-chunk: ticks go on, its segments deferred", test_stalled_worker},
        {"tick_poll: scheduled ticks, polled time counted, destroy stops it", test_tick_poll},
        {"gone on a helper: dropped once, hook once", test_gone_on_helper},
        {"many gone at once: hook once each", test_many_gone_at_once},
        {"SIGBUS on workers", test_sigbus_on_workers},
    };
    int rc = MV_TEST_RUN("collect_workers_faults", tests);
    mv_test_rmrf(g_dir);
    free(g_dir);
    return rc;
}
