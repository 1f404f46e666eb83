/* Collector integrity: torn histograms never reach consumers as zeros (last consistent copy
 * within a bound, then omitted; registrations racing histogram updates never make a published
 * count go backwards); a stale "gone" read after a resync drops only the object it read. */
#include <fcntl.h>
#include <pthread.h>
#include <errno.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "microview.h"
#include "mv_collect.h"
#include "mv_expo.h"
#include "mv_export.h"
#include "mv_test.h"

static char *g_dir;

static mv_coll *new_coll(uint32_t torn_stale_ms, const char *path)
{
    mv_coll_opts o;
    mv_coll *c;
    void *src;
    uint64_t size;
    char err[256];
    mv_seg_label l = {"service", "torn"};
    mv_coll_opts_default(&o);
    o.torn_stale_ms = torn_stale_ms;
    CU_ASSERT_FATAL(mv_coll_create(&o, &c) == 0);
    CU_ASSERT_FATAL(mv_coll_shm_open(path, 0, &src, &size, err, sizeof err) == 0);
    CU_ASSERT_FATAL(mv_coll_add(c, "torn", size, &l, 1, mv_coll_shm_transport(), src) == 0);
    return c;
}

typedef struct hist_seen {
    int present;    /* in the published copy and not omitted */
    int consistent; /* its words pass the reader's check */
    uint64_t count;
    uint64_t file_off; /* where its first word lives in the segment file */
    uint32_t stale, omitted;
} hist_seen;

static hist_seen look(mv_coll *c, const char *name)
{
    hist_seen r = {0};
    mv_coll_snap *s = mv_coll_snapshot(c);
    const mv_coll_seg_view *v = mv_coll_snap_seg(s, 0);
    CU_ASSERT_FATAL(v != NULL);
    r.stale = v->stale_histograms;
    r.omitted = v->omitted_histograms;
    for (size_t k = 0; v->cat && v->hot && k < mv_seg_catalog_count(v->cat); k++) {
        const mv_seg_metric *m = mv_seg_catalog_metric(v->cat, k);
        if (strcmp(m->name, name) != 0)
            continue;
        const mv_seg_header *h = v->hot;
        r.file_off = (uint64_t)h->values_offset + m->value_offset;
        if (v->omitted && v->omitted[k])
            break;
        mv_seg_hist_view hv;
        r.present = 1;
        r.consistent = mv_seg_read_histogram(v->hot, m, &hv) == MV_SEG_OK;
        r.count = hv.count;
        break;
    }
    mv_coll_snap_free(s);
    return r;
}

/* Adds `delta` to the 8-byte word at `off` of the file: breaks (or restores) a record's
 * checksum the way a writer that died half-way through an update leaves it. */
static void poke(const char *path, uint64_t off, int64_t delta)
{
    int fd = open(path, O_RDWR);
    uint64_t w;
    CU_ASSERT_FATAL(fd >= 0);
    CU_ASSERT_FATAL(pread(fd, &w, 8, (off_t)off) == 8);
    w += (uint64_t)delta;
    CU_ASSERT_FATAL(pwrite(fd, &w, 8, (off_t)off) == 8);
    close(fd);
}

static char *render(mv_coll *c)
{
    mv_expo *e = mv_expo_create(MV_EXPO_TEXT, 1 << 20);
    CU_ASSERT_FATAL(e != NULL);
    mv_coll_snap *s = mv_coll_snapshot(c);
    CU_ASSERT(mv_export_render(e, s, NULL) == 0);
    mv_coll_snap_free(s);
    size_t len = 0;
    const char *body = mv_expo_data(e, &len);
    char *out = strndup(body, len);
    mv_expo_destroy(e);
    return out;
}

/* A histogram torn on every copy across a catalog change: served from its last consistent
 * copy (never zeros), omitted after the bound, served again once consistent. */
static void test_torn_across_catalog_change(void)
{
    char path[256];
    CU_ASSERT_FATAL(mv_test_blank_file(g_dir, "a.seg", 16384, path, sizeof path) == 0);
    mv_segment *seg;
    mv_histogram *h;
    mv_counter later;
    double bounds[] = {1, 10, 100};
    CU_ASSERT_FATAL(mv_open(path, &seg) == MV_OK);
    CU_ASSERT_FATAL(mv_histogram_register(seg, "lat", NULL, NULL, NULL, 0, bounds, 3, &h) == MV_OK);
    for (int i = 0; i < 7; i++)
        mv_histogram_observe(h, 5);
    mv_coll *c = new_coll(200, path);
    mv_coll_tick(c);
    hist_seen a = look(c, "lat");
    CU_ASSERT(a.present && a.consistent);
    CU_ASSERT_EQUAL(a.count, 7);
    CU_ASSERT_EQUAL(a.stale + a.omitted, 0);

    /* Break the record for good and move the catalog (a registration). */
    poke(path, a.file_off, 1);
    CU_ASSERT_FATAL(mv_counter_register(seg, "later_total", NULL, NULL, NULL, 0, &later) == MV_OK);
    mv_coll_tick(c);
    hist_seen b = look(c, "lat");
    CU_ASSERT(b.present && b.consistent);
    CU_ASSERT_EQUAL(b.count, 7); /* the last consistent copy, not 0 */
    CU_ASSERT_EQUAL(b.stale, 1);
    CU_ASSERT_EQUAL(b.omitted, 0);
    char *body = render(c);
    CU_ASSERT(strstr(body, "lat_count{service=\"torn\"} 7\n") != NULL);
    CU_ASSERT(strstr(body, "microview_segment_stale_histograms{service=\"torn\"} 1\n") != NULL);
    free(body);

    /* Past the bound it is omitted, and the exposition says so. */
    uint64_t t0 = mv_test_mono_ms();
    hist_seen d;
    do {
        mv_coll_tick(c);
        d = look(c, "lat");
    } while (d.present && mv_test_mono_ms() - t0 < 5000);
    CU_ASSERT(!d.present);
    CU_ASSERT_EQUAL(d.omitted, 1);
    CU_ASSERT(mv_test_mono_ms() - t0 >= 150);
    body = render(c);
    CU_ASSERT(strstr(body, "lat_count") == NULL);
    CU_ASSERT(strstr(body, "lat_bucket") == NULL);
    CU_ASSERT(strstr(body, "microview_segment_omitted_histograms{service=\"torn\"} 1\n") != NULL);
    CU_ASSERT(strstr(body, "later_total{service=\"torn\"} 0\n") != NULL);
    free(body);

    /* Consistent again: served with its real value. */
    poke(path, a.file_off, -1);
    mv_histogram_observe(h, 50);
    mv_coll_tick(c);
    hist_seen e = look(c, "lat");
    CU_ASSERT(e.present && e.consistent);
    CU_ASSERT_EQUAL(e.count, 8);
    CU_ASSERT_EQUAL(e.stale + e.omitted, 0);
    mv_coll_destroy(c);
    mv_close(seg);
}

/* A histogram never copied consistently is omitted at once (no zeros). */
static void test_never_consistent_is_omitted(void)
{
    char path[256];
    CU_ASSERT_FATAL(mv_test_blank_file(g_dir, "b.seg", 16384, path, sizeof path) == 0);
    mv_segment *seg;
    mv_histogram *h;
    double bounds[] = {1, 2};
    CU_ASSERT_FATAL(mv_open(path, &seg) == MV_OK);
    CU_ASSERT_FATAL(mv_histogram_register(seg, "h", NULL, NULL, NULL, 0, bounds, 2, &h) == MV_OK);
    mv_histogram_observe(h, 1.5);
    mv_coll *c = new_coll(1000, path);
    mv_coll_tick(c);
    hist_seen a = look(c, "h");
    CU_ASSERT_FATAL(a.present);
    mv_coll_destroy(c);
    poke(path, a.file_off, 3);
    c = new_coll(1000, path); /* a fresh collector has no consistent copy of it */
    mv_coll_tick(c);
    hist_seen b = look(c, "h");
    CU_ASSERT(!b.present);
    CU_ASSERT_EQUAL(b.omitted, 1);
    mv_coll_destroy(c);
    mv_close(seg);
}

typedef struct race {
    mv_segment *seg;
    mv_histogram *h[2];
    int stop; /* atomic */
    int registered;
    uint64_t ticks; /* atomic: collector ticks done */
} race;

static void *observer(void *arg)
{
    race *r = arg;
    unsigned x = 1;
    while (!__atomic_load_n(&r->stop, __ATOMIC_ACQUIRE)) {
        x = x * 1103515245u + 12345u;
        mv_histogram_observe(r->h[x >> 31], (double)(x % 200));
    }
    return NULL;
}

static void *registrar(void *arg)
{
    race *r = arg;
    for (int i = 0; i < 150; i++) {
        char name[32];
        mv_counter ctr;
        snprintf(name, sizeof name, "reg_%d_total", i);
        if (mv_counter_register(r->seg, name, NULL, NULL, NULL, 0, &ctr) == MV_OK)
            __atomic_add_fetch(&r->registered, 1, __ATOMIC_RELAXED);
        /* Next registration after the collector ticked twice: each one races a copy. */
        uint64_t t = __atomic_load_n(&r->ticks, __ATOMIC_ACQUIRE);
        for (int spin = 0; spin < 20000 && __atomic_load_n(&r->ticks, __ATOMIC_ACQUIRE) < t + 2;
             spin++) {
            struct timespec ts = {0, 100000};
            nanosleep(&ts, NULL);
        }
    }
    return NULL;
}

/* What the race below saw of h0 and h1 over its ticks. */
typedef struct race_seen {
    uint64_t last[2], backwards, inconsistent, absent;
} race_seen;

/* Ticks once and looks at both histograms; returns how many were published. */
static int tick_and_look(mv_coll *c, race_seen *rs)
{
    int seen = 0;
    mv_coll_tick(c);
    for (int i = 0; i < 2; i++) {
        hist_seen s = look(c, i ? "h1" : "h0");
        if (!s.present) {
            rs->absent++;
            continue;
        }
        rs->inconsistent += !s.consistent;
        rs->backwards += s.count < rs->last[i];
        rs->last[i] = s.count;
        seen++;
    }
    return seen;
}

/* The reported race: registrations while histograms are updated, collector ticking flat out
 * and a snapshot after every tick. Published histogram counts never go backwards. */
static void test_registrations_race_histograms(void)
{
    char path[256];
    CU_ASSERT_FATAL(mv_test_blank_file(g_dir, "c.seg", 1 << 20, path, sizeof path) == 0);
    race r = {0};
    double bounds[] = {10, 50, 100, 150};
    CU_ASSERT_FATAL(mv_open(path, &r.seg) == MV_OK);
    CU_ASSERT_FATAL(mv_histogram_register(r.seg, "h0", NULL, NULL, NULL, 0, bounds, 4, &r.h[0]) ==
                    MV_OK);
    CU_ASSERT_FATAL(mv_histogram_register(r.seg, "h1", NULL, NULL, NULL, 0, bounds, 4, &r.h[1]) ==
                    MV_OK);
    mv_coll *c = new_coll(1000, path);
    pthread_t obs[2], reg;
    for (int i = 0; i < 2; i++)
        CU_ASSERT_FATAL(pthread_create(&obs[i], NULL, observer, &r) == 0);
    CU_ASSERT_FATAL(pthread_create(&reg, NULL, registrar, &r) == 0);

    race_seen rs = {0};
    uint64_t ticks = 0, t0 = mv_test_mono_ms();
    while (__atomic_load_n(&r.registered, __ATOMIC_RELAXED) < 150 &&
           mv_test_mono_ms() - t0 < 60000) {
        tick_and_look(c, &rs);
        ticks++;
        __atomic_store_n(&r.ticks, ticks, __ATOMIC_RELEASE);
    }
    pthread_join(reg, NULL);
    __atomic_store_n(&r.stop, 1, __ATOMIC_RELEASE);
    for (int i = 0; i < 2; i++)
        pthread_join(obs[i], NULL);
    /* While two threads observed flat out, a slow reader (arm64 under qemu on a loaded machine)
     * may have caught one histogram mid-update at every copy, and so omitted it throughout.
     * Quiet now: the next ticks must publish both, consistent, and no lower than before. */
    uint64_t absent = rs.absent, quiet_ticks = 0;
    while (quiet_ticks++ < 50 && tick_and_look(c, &rs) < 2)
        ;
    mv_coll_snap *s = mv_coll_snapshot(c);
    uint64_t catalog_reads = mv_coll_snap_stats(s)->catalog_reads;
    uint64_t torn = mv_coll_snap_stats(s)->torn_retries;
    mv_coll_snap_free(s);
    printf("\n  ticks=%llu catalog_reads=%llu torn_retries=%llu backwards=%llu inconsistent=%llu "
           "absent=%llu quiet_ticks=%llu final=%llu/%llu\n",
           (unsigned long long)ticks, (unsigned long long)catalog_reads, (unsigned long long)torn,
           (unsigned long long)rs.backwards, (unsigned long long)rs.inconsistent,
           (unsigned long long)absent, (unsigned long long)quiet_ticks,
           (unsigned long long)rs.last[0], (unsigned long long)rs.last[1]);
    CU_ASSERT_EQUAL(r.registered, 150);
    CU_ASSERT(catalog_reads >= 100); /* the registrations did race the ticks */
    CU_ASSERT_EQUAL(rs.backwards, 0);
    CU_ASSERT_EQUAL(rs.inconsistent, 0);
    CU_ASSERT(rs.last[0] > 0 && rs.last[1] > 0);
    mv_coll_destroy(c);
    mv_close(r.seg);
}

/* A transport reading from memory; a source can be made to answer "gone" (a revoked rkey). */
typedef struct fsrc {
    const char *base;
    int gone;
    int closed;
} fsrc;

typedef struct resync {
    mv_coll *c;
    fsrc *old_src, *new_src;
    uint64_t size;
    int armed;
    int dropped_calls;
    void *dropped_src;
} resync;

static resync g_rs;
static const mv_coll_transport g_fake;

static void fake_read_many(void *ctx, mv_coll_read *rq, size_t n)
{
    (void)ctx;
    for (size_t i = 0; i < n; i++) {
        fsrc *f = rq[i].src;
        if (f == g_rs.old_src && g_rs.armed) {
            /* While this READ with the old rkey is in flight, the agent restarts and the
             * catalog resync re-adds the segment under the same id with a new rkey. */
            g_rs.armed = 0;
            mv_seg_label l = {"service", "x"};
            CU_ASSERT(mv_coll_remove(g_rs.c, "x") == 0);
            CU_ASSERT(mv_coll_add(g_rs.c, "x", g_rs.size, &l, 1, &g_fake, g_rs.new_src) == 0);
            f->gone = 1;
        }
        if (f->gone) {
            rq[i].status = -EACCES;
            continue;
        }
        memcpy(rq[i].dst, f->base + rq[i].off, rq[i].len);
        rq[i].status = 0;
    }
}

static void fake_close(void *ctx, void *src)
{
    (void)ctx;
    ((fsrc *)src)->closed = 1;
}

static const mv_coll_transport g_fake = {
    .name = "fake", .read_many = fake_read_many, .src_close = fake_close};

static void on_drop(void *arg, const char *id, void *src)
{
    resync *r = arg;
    CU_ASSERT_STRING_EQUAL(id, "x");
    r->dropped_calls++;
    r->dropped_src = src;
}

static int has_counter(mv_coll *c, const char *id, uint64_t want)
{
    mv_coll_snap *s = mv_coll_snapshot(c);
    int found = 0;
    for (size_t i = 0; i < mv_coll_snap_count(s); i++) {
        const mv_coll_seg_view *v = mv_coll_snap_seg(s, i);
        if (strcmp(v->id, id) != 0 || !v->cat || !v->hot || v->state != MV_COLL_OK)
            continue;
        const mv_seg_metric *m = mv_seg_catalog_metric(v->cat, 0);
        found = m && mv_seg_read_counter(v->hot, m) == want;
    }
    mv_coll_snap_free(s);
    return found;
}

/* The stale completion arrives after the resync re-added the id: only the old object goes;
 * the fresh entry stays and keeps being read. A plain "gone" tells the hook. */
static void test_stale_gone_after_resync(void)
{
    char p[256];
    CU_ASSERT_FATAL(mv_test_blank_file(g_dir, "r.seg", 8192, p, sizeof p) == 0);
    mv_segment *seg;
    mv_counter ctr;
    CU_ASSERT_FATAL(mv_open(p, &seg) == MV_OK);
    CU_ASSERT_FATAL(mv_counter_register(seg, "up_total", NULL, NULL, NULL, 0, &ctr) == MV_OK);
    mv_counter_add(ctr, 5);
    int fd = open(p, O_RDONLY);
    CU_ASSERT_FATAL(fd >= 0);
    const char *base = mmap(NULL, 8192, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    CU_ASSERT_FATAL(base != MAP_FAILED);
    fsrc *a = calloc(1, sizeof *a), *b = calloc(1, sizeof *b);
    a->base = b->base = base;

    mv_coll_opts o;
    mv_coll_opts_default(&o);
    CU_ASSERT_FATAL(mv_coll_create(&o, &g_rs.c) == 0);
    mv_coll_set_drop_hook(g_rs.c, on_drop, &g_rs);
    g_rs.old_src = a;
    g_rs.new_src = b;
    g_rs.size = 8192;
    mv_seg_label l = {"service", "x"};
    CU_ASSERT_FATAL(mv_coll_add(g_rs.c, "x", 8192, &l, 1, &g_fake, a) == 0);
    mv_coll_tick(g_rs.c);
    CU_ASSERT(has_counter(g_rs.c, "x", 5));

    g_rs.armed = 1;
    mv_coll_tick(g_rs.c); /* old READ fails with -EACCES after the re-add */
    CU_ASSERT_EQUAL(g_rs.armed, 0);
    CU_ASSERT_EQUAL(g_rs.dropped_calls, 0); /* the table had already replaced it */
    CU_ASSERT(a->closed);
    mv_counter_add(ctr, 1);
    mv_coll_tick(g_rs.c);
    CU_ASSERT(has_counter(g_rs.c, "x", 6)); /* the fresh entry survived and is read */

    /* Now the current source is revoked for real: dropped, and the hook hears of it. */
    b->gone = 1;
    mv_coll_tick(g_rs.c);
    CU_ASSERT_EQUAL(g_rs.dropped_calls, 1);
    CU_ASSERT_PTR_EQUAL(g_rs.dropped_src, b);
    CU_ASSERT(!has_counter(g_rs.c, "x", 6));
    CU_ASSERT_EQUAL(mv_coll_remove(g_rs.c, "x"), -ENOENT);
    mv_coll_destroy(g_rs.c);
    munmap((void *)base, 8192);
    free(a);
    free(b);
    mv_close(seg);
}

static void slow_read_many(void *ctx, mv_coll_read *rq, size_t n)
{
    struct timespec ts = {0, 4000000}; /* a 4 ms read against a 1 ms tick period */
    nanosleep(&ts, NULL);
    fake_read_many(ctx, rq, n);
}

/* Overrunning ticks are visible: missed ticks counted, durations in the histogram. */
static void test_tick_overrun_metrics(void)
{
    char p[256];
    CU_ASSERT_FATAL(mv_test_blank_file(g_dir, "slow.seg", 8192, p, sizeof p) == 0);
    mv_segment *seg;
    mv_counter ctr;
    CU_ASSERT_FATAL(mv_open(p, &seg) == MV_OK);
    CU_ASSERT_FATAL(mv_counter_register(seg, "n_total", NULL, NULL, NULL, 0, &ctr) == MV_OK);
    int fd = open(p, O_RDONLY);
    const char *base = mmap(NULL, 8192, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    CU_ASSERT_FATAL(base != MAP_FAILED);
    static fsrc src;
    src = (fsrc){base, 0, 0};
    static const mv_coll_transport slow = {
        .name = "slow", .read_many = slow_read_many, .src_close = fake_close};
    mv_coll_opts o;
    mv_coll *c;
    mv_coll_opts_default(&o);
    o.tick_us = 1000;
    CU_ASSERT_FATAL(mv_coll_create(&o, &c) == 0);
    mv_seg_label l = {"service", "slow"};
    CU_ASSERT_FATAL(mv_coll_add(c, "slow", 8192, &l, 1, &slow, &src) == 0);
    CU_ASSERT_FATAL(mv_coll_start(c) == 0);
    mv_coll_stats st = {0};
    uint64_t t0 = mv_test_mono_ms();
    while (mv_test_mono_ms() - t0 < 10000) {
        mv_coll_snap *s = mv_coll_snapshot(c);
        st = *mv_coll_snap_stats(s);
        mv_coll_snap_free(s);
        if (st.ticks >= 10)
            break;
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
    mv_coll_destroy(c);
    uint64_t in_hist = 0, slow_ticks = 0;
    for (size_t b = 0; b <= MV_COLL_TICK_BUCKETS; b++) {
        in_hist += st.tick_buckets[b];
        if (b == MV_COLL_TICK_BUCKETS || mv_coll_tick_bounds[b] > 0.0035)
            slow_ticks += st.tick_buckets[b];
    }
    CU_ASSERT(st.ticks >= 10);
    CU_ASSERT_EQUAL(in_hist, st.ticks);
    CU_ASSERT_EQUAL(slow_ticks, st.ticks); /* every tick took at least 4 ms */
    CU_ASSERT(st.tick_seconds_sum >= 0.004 * (double)st.ticks);
    CU_ASSERT(st.ticks_missed >= 2 * (st.ticks - 1)); /* ~3 periods lost per 4 ms tick */
    munmap((void *)base, 8192);
    mv_close(seg);
}

static void add_seg(mv_coll *c, const char *id, const char *path, const char *service)
{
    void *src;
    uint64_t size;
    char err[256];
    mv_seg_label l = {"service", service};
    CU_ASSERT_FATAL(mv_coll_shm_open(path, 0, &src, &size, err, sizeof err) == 0);
    CU_ASSERT_FATAL(mv_coll_add(c, id, size, &l, 1, mv_coll_shm_transport(), src) == 0);
}

static char *render_fmt(mv_coll *c, mv_expo_format f, mv_export_stats *st)
{
    mv_expo *e = mv_expo_create(f, 1 << 20);
    CU_ASSERT_FATAL(e != NULL);
    mv_coll_snap *s = mv_coll_snapshot(c);
    CU_ASSERT(mv_export_render(e, s, st) == 0);
    mv_coll_snap_free(s);
    size_t len = 0;
    const char *body = mv_expo_data(e, &len);
    char *out = strndup(body, len);
    mv_expo_destroy(e);
    return out;
}

static int count_lines(const char *body, const char *prefix)
{
    int n = 0;
    size_t pl = strlen(prefix);
    for (const char *l = body; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        n += strncmp(l, prefix, pl) == 0;
    return n;
}

/* Runs promtool's strict parser on a text body; 77 when promtool is missing. */
static int promtool_check(const char *body)
{
    if (access("/usr/bin/promtool", X_OK) != 0)
        return 77;
    char path[300];
    snprintf(path, sizeof path, "%s/body.prom", g_dir);
    FILE *f = fopen(path, "w");
    CU_ASSERT_FATAL(f != NULL);
    fputs(body, f);
    fclose(f);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "/usr/bin/promtool check metrics < %s > /dev/null 2>&1", path);
    int rc = system(cmd);
    /* promtool exits 3 for lint warnings only (e.g. missing unit suffixes): parseable. */
    return WIFEXITED(rc) ? (WEXITSTATUS(rc) == 3 ? 0 : WEXITSTATUS(rc)) : 1;
}

/* One pod must not make the node's body unparseable: colliding families are dropped and
 * counted, clashing label names renamed until free, equal identities told apart. */
static void test_collisions_and_duplicates(void)
{
    char pa[256], pb[256];
    CU_ASSERT_FATAL(mv_test_blank_file(g_dir, "ca.seg", 65536, pa, sizeof pa) == 0);
    CU_ASSERT_FATAL(mv_test_blank_file(g_dir, "cb.seg", 65536, pb, sizeof pb) == 0);
    mv_segment *a, *b;
    mv_histogram *h;
    mv_gauge g1, g2;
    mv_counter c1, c2, c3;
    double bounds[] = {1, 2};
    mv_label own[2] = {{"service", "inner"}, {"exported_service", "other"}};
    CU_ASSERT_FATAL(mv_open(pa, &a) == MV_OK);
    CU_ASSERT_FATAL(mv_open(pb, &b) == MV_OK);
    CU_ASSERT_FATAL(mv_histogram_register(a, "x", NULL, NULL, NULL, 0, bounds, 2, &h) == MV_OK);
    CU_ASSERT_FATAL(mv_gauge_register(a, "x_count", NULL, NULL, NULL, 0, &g1) == MV_OK);
    CU_ASSERT_FATAL(mv_counter_register(a, "y", NULL, NULL, NULL, 0, &c1) == MV_OK);
    CU_ASSERT_FATAL(mv_counter_register(a, "y_total", NULL, NULL, NULL, 0, &c2) == MV_OK);
    CU_ASSERT_FATAL(mv_gauge_register(a, "temp", NULL, NULL, own, 2, &g2) == MV_OK);
    CU_ASSERT_FATAL(mv_counter_register(b, "y_total", NULL, NULL, NULL, 0, &c3) == MV_OK);
    mv_histogram_observe(h, 1.5);
    mv_gauge_set(g1, 7);
    mv_gauge_set(g2, 3);
    mv_counter_add(c1, 1);
    mv_counter_add(c2, 2);
    mv_counter_add(c3, 3);

    mv_coll_opts o;
    mv_coll *c;
    mv_coll_opts_default(&o);
    CU_ASSERT_FATAL(mv_coll_create(&o, &c) == 0);
    add_seg(c, "seg-a", pa, "dup");
    add_seg(c, "seg-b", pb, "dup");
    mv_coll_tick(c);
    mv_export_stats st;
    memset(&st, 0, sizeof st);
    char *text = render_fmt(c, MV_EXPO_TEXT, &st);
    char *om = render_fmt(c, MV_EXPO_OPENMETRICS, &st);

    CU_ASSERT_EQUAL(count_lines(text, "# TYPE x histogram"), 1);
    CU_ASSERT_EQUAL(count_lines(text, "# TYPE x_count"), 0);
    CU_ASSERT_EQUAL(count_lines(text, "# TYPE y counter"), 1);
    CU_ASSERT_EQUAL(count_lines(text, "# TYPE y_total"), 0);
    CU_ASSERT_EQUAL(count_lines(om, "# TYPE y "), 1);
    CU_ASSERT_EQUAL(count_lines(om, "# TYPE x "), 1);
    CU_ASSERT(strstr(text, "microview_series_dropped_total{reason=\"name_collision\"} 3\n") !=
              NULL);
    CU_ASSERT(strstr(text,
                     "temp{service=\"dup\",microview_segment=\"seg-a\","
                     "exported_exported_service=\"inner\",exported_service=\"other\"} 3") != NULL);
    CU_ASSERT(strstr(text, "y{service=\"dup\",microview_segment=\"seg-a\"} 1") != NULL);
    CU_ASSERT_EQUAL(st.dropped_invalid, 0);
    int rc = promtool_check(text);
    if (rc == 77)
        mv_test_skip_case("promtool check (no /usr/bin/promtool)");
    else
        CU_ASSERT_EQUAL(rc, 0);
    if (CU_get_number_of_failures() > 0)
        printf("\n%s\n", text);
    free(text);
    free(om);
    mv_coll_destroy(c);
    mv_close(a);
    mv_close(b);
}

int main(void)
{
    g_dir = mv_test_tmpdir("test-torn");
    if (!g_dir)
        return 1;
    static const mv_test tests[] = {
        {"torn across a catalog change", test_torn_across_catalog_change},
        {"never consistent is omitted", test_never_consistent_is_omitted},
        {"registrations race histogram updates", test_registrations_race_histograms},
        {"stale gone read after a resync", test_stale_gone_after_resync},
        {"name collisions and duplicate identities", test_collisions_and_duplicates},
        {"tick overrun metrics", test_tick_overrun_metrics},
    };
    int rc = MV_TEST_RUN("collect_torn", tests);
    if (mv_test_rmrf(g_dir) != 0)
        fprintf(stderr, "could not remove %s\n", g_dir);
    free(g_dir);
    return rc;
}
