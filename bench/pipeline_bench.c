/* pipeline_bench.c: analytics pipeline samples/s/core, exposition time and bytes, freshness. */
#include "bench_util.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sys/mman.h>
#include <zlib.h>

#include "microview.h"
#include "mv_collect.h"
#include "mv_export.h"
#include "mv_pipeline.h"

#define MS 1000000ull

typedef struct mseg {
    int fd;
    size_t size;
    void *map;
    mv_segment *w;
    mv_seg_catalog *cat;
} mseg;

static int mseg_open(mseg *s, size_t size)
{
    char path[64];
    s->size = size;
    s->fd = memfd_create("mvbench", 0);
    if (s->fd < 0 || ftruncate(s->fd, (off_t)size) != 0)
        return -1;
    snprintf(path, sizeof path, "/proc/self/fd/%d", s->fd);
    if (mv_open(path, &s->w) != MV_OK)
        return -1;
    s->map = mmap(NULL, size, PROT_READ, MAP_SHARED, s->fd, 0);
    return s->map == MAP_FAILED ? -1 : 0;
}

static int mseg_parse(mseg *s)
{
    mv_seg_error err;
    if (mv_seg_catalog_parse(s->map, s->size, s->size, &s->cat, &err) != MV_SEG_OK) {
        fprintf(stderr, "pipeline_bench: catalog: %s\n", err.detail);
        return -1;
    }
    return 0;
}

static void mseg_close(mseg *s)
{
    mv_seg_catalog_free(s->cat);
    munmap(s->map, s->size);
    mv_close(s->w);
    close(s->fd);
}

/* ---- Pipeline throughput ------------------------------------------------------------------ */

enum { KIND_COUNTER, KIND_GAUGE, KIND_HIST };
static const char *const kind_names[3] = {"counter", "gauge", "histogram"};

/* --cpu-time: time feeds by the thread's CPU clock, so that a machine shared
 * with other jobs does not count their time slices as ours. */
static int g_cpu_time;
static int g_native; /* --native-gauges: gauge windows published as native buckets (schema 6) */

static uint64_t clock_ns(clockid_t clk)
{
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The clock of the exposition timings: the thread's CPU clock with --cpu-time, else wall. */
static uint64_t feed_clock_ns(void)
{
    return clock_ns(g_cpu_time ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC);
}

/* Issue goals 3 (samples/s/core) and 6 (analytics bytes per gauge), from the full
 * pipeline (detection and scorer on). */
typedef struct goal_fig {
    double rate;       /* samples/s/core, thread CPU clock, all batches */
    double heap_bytes; /* per metric, from the allocator */
    double acct_bytes; /* per metric, mv_pipe view's mem_bytes */
} goal_fig;
static goal_fig g_goal[3];

#define BATCH 16 /* reads per timed batch */

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* same_every > 1: the values move before one read in same_every only; the reads between
 * are of unchanged values, fed as the collector feeds them (mv_pipe_seg_feed_same, same_batch
 * 8 as when no adaptive sampling reads the flags). Every read counts as nmetrics samples. */
static void bench_pipeline(int kind, unsigned nmetrics, int detect, int fd, unsigned reads,
                           unsigned same_every)
{
    mseg s;
    if (mseg_open(&s, 8u << 20) != 0) {
        fprintf(stderr, "pipeline_bench: cannot create a segment\n");
        return;
    }
    mv_counter *cs = calloc(nmetrics, sizeof *cs);
    mv_gauge *gs = calloc(nmetrics, sizeof *gs);
    mv_histogram **hs = calloc(nmetrics, sizeof *hs);
    double bounds[16];
    mv_exponential_buckets(0.001, 2.0, 16, bounds);
    char name[64];
    for (unsigned i = 0; i < nmetrics; i++) {
        snprintf(name, sizeof name, "m%u", i);
        int rc = kind == KIND_COUNTER ? mv_counter_register(s.w, name, NULL, NULL, NULL, 0, &cs[i])
                 : kind == KIND_GAUGE
                     ? mv_gauge_register(s.w, name, NULL, NULL, NULL, 0, &gs[i])
                     : mv_histogram_register(s.w, name, NULL, NULL, NULL, 0, bounds, 16, &hs[i]);
        if (rc != MV_OK) {
            fprintf(stderr, "pipeline_bench: register: %s\n", mv_strerror(rc));
            return;
        }
    }
    if (mseg_parse(&s) != 0)
        return;
    /* The collector feeds a copy it has just made: so does the benchmark, BATCH copies
     * made (untimed) before each timed batch of reads. */
    size_t hot = mv_seg_catalog_hot_size(s.cat);
    char *snap = aligned_alloc(64, BATCH * ((hot + 63) & ~(size_t)63));
    size_t stride = (hot + 63) & ~(size_t)63;
    unsigned nbatch = reads / BATCH;
    double *wall_b = calloc(nbatch, sizeof *wall_b), *cpu_b = calloc(nbatch, sizeof *cpu_b);
    if (!snap || !wall_b || !cpu_b)
        return;
    mv_pipe_config cfg;
    mv_pipe_config_default(&cfg);
    cfg.window_ns = 1000 * MS;
    cfg.detect = detect;
    cfg.fd = fd;
    cfg.same_batch = same_every > 1 ? 8 : 0;
    cfg.native_schema = g_native ? 6 : MV_PIPE_NATIVE_OFF;
    unsigned nread = 0;
    mv_pipe_seg *p;
    size_t heap0 = bench_heap_in_use();
    if (mv_pipe_seg_create(&cfg, s.cat, NULL, &p) != 0)
        return;
    uint64_t t = 1000000ull * 1000 * MS, wall_total = 0, cpu_total = 0;
    uint64_t rng = 1;
    for (unsigned bt = 0; bt < nbatch; bt++) {
        for (unsigned r = 0; r < BATCH; r++) {
            /* The writer moves every value a little between reads (not timed). */
            for (unsigned i = 0; (same_every < 2 || (nread + r) % same_every == 0) && i < nmetrics;
                 i++) {
                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                double u = (double)(rng >> 11) * (1.0 / 9007199254740992.0);
                if (kind == KIND_COUNTER)
                    mv_counter_add(cs[i], 1 + (rng >> 60));
                else if (kind == KIND_GAUGE)
                    mv_gauge_set(gs[i], 100 + 10 * u);
                else
                    mv_histogram_observe(hs[i], 0.001 + 0.1 * u);
            }
            memcpy(snap + r * stride, s.map, hot);
        }
        uint64_t c0 = clock_ns(CLOCK_THREAD_CPUTIME_ID), w0 = clock_ns(CLOCK_MONOTONIC);
        unsigned f = 0;
        for (unsigned r = 0; r < BATCH; r++, t += MS)
            f |= same_every > 1 && (nread + r) % same_every != 0
                     ? mv_pipe_seg_feed_same(p, snap + r * stride, t)
                     : mv_pipe_seg_feed(p, snap + r * stride, t);
        nread += BATCH;
        uint64_t w1 = clock_ns(CLOCK_MONOTONIC), c1 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
        BENCH_KEEP(f);
        wall_b[bt] = (double)(w1 - w0) / ((double)nmetrics * BATCH);
        cpu_b[bt] = (double)(c1 - c0) / ((double)nmetrics * BATCH);
        wall_total += w1 - w0;
        cpu_total += c1 - c0;
    }
    double samples = (double)nmetrics * nbatch * BATCH;
    mv_pipe_view *pv = mv_pipe_seg_view(p);
    double used = pv ? (double)pv->mem_bytes / nmetrics : NAN;
    free(pv);
    double heap = (double)(bench_heap_in_use() - heap0) / nmetrics;
    double mean = (double)(g_cpu_time ? cpu_total : wall_total) / samples;
    qsort(wall_b, nbatch, sizeof *wall_b, cmp_dbl);
    qsort(cpu_b, nbatch, sizeof *cpu_b, cmp_dbl);
    double med = g_cpu_time ? cpu_b[nbatch / 2] : wall_b[nbatch / 2];
    double goal = kind == KIND_HIST ? 2e7 : 4e7;
    printf("bench=pipeline clock=%s kind=%s metrics=%u reads=%u same_every=%u detect=%d fd=%d "
           "native=%d ns_per_sample=%.2f "
           "ns_per_sample_median=%.2f samples_per_s_core=%.3g samples_per_s_core_median=%.3g "
           "heap_bytes_per_metric=%.0f state_bytes_used_per_metric=%.0f "
           "state_bytes_per_metric_max=%zu goal_samples_per_s_core=%.0e\n",
           g_cpu_time ? "thread_cpu" : "wall", kind_names[kind], nmetrics, nbatch * BATCH,
           same_every > 1 ? same_every : 1, detect, fd, g_native, mean, med, 1e9 / mean, 1e9 / med,
           heap, used,
           mv_pipe_metric_bytes(&cfg,
                                kind == KIND_COUNTER ? MV_SEG_COUNTER
                                : kind == KIND_GAUGE ? MV_SEG_GAUGE
                                                     : MV_SEG_HISTOGRAM,
                                16),
           goal);
    if (detect && fd && same_every < 2) {
        g_goal[kind].rate = samples / ((double)cpu_total / 1e9);
        g_goal[kind].heap_bytes = heap;
        g_goal[kind].acct_bytes = used;
    }
    mv_pipe_seg_destroy(p);
    mseg_close(&s);
    free(snap);
    free(wall_b);
    free(cpu_b);
    free(cs);
    free(gs);
    free(hs);
}

/* The goal lines bench/run.sh collects (issue goals 3 and 6). */
static void print_goals(void)
{
    for (int k = 0; k < 3; k++) {
        if (!(g_goal[k].rate > 0))
            continue;
        double target = k == KIND_HIST ? 2e7 : 4e7;
        printf("goal=pipeline.%s issue_goal=3 figure=%.3g target=%.0e unit=samples_per_s_core "
               "clock=thread_cpu stat=mean detect=1 fd=1 met=%s\n",
               kind_names[k], g_goal[k].rate, target, g_goal[k].rate >= target ? "yes" : "no");
    }
    for (int k = 0; k < 3; k++) {
        if (!(g_goal[k].rate > 0))
            continue;
        /* Only the gauge has a target (1 KiB); counters and histograms are reported. */
        if (k == KIND_GAUGE)
            printf("goal=memory.gauge issue_goal=6 figure=%.0f target=1024 "
                   "unit=analytics_bytes_per_gauge source=allocator accounted=%.0f "
                   "values=narrow_range met=%s\n",
                   g_goal[k].heap_bytes, g_goal[k].acct_bytes,
                   g_goal[k].heap_bytes <= 1024 ? "yes" : "no");
        else
            printf("goal=memory.%s issue_goal=6 figure=%.0f target=report "
                   "unit=analytics_bytes_per_%s source=allocator accounted=%.0f met=yes\n",
                   kind_names[k], g_goal[k].heap_bytes, kind_names[k], g_goal[k].acct_bytes);
    }
}

/* ---- Exposition ------------------------------------------------------------------------------ */

/* Series i: family bench_gauge_<i % 10>, the same 10 labels as the client_golang
 * and prometheus_client peers (bench/peers), carried as the metric's own labels
 * in segments of up to 50000 series with no identity labels. */
static void label_values(unsigned i, char v[10][32])
{
    snprintf(v[0], 32, "ns-%u", i % 50);
    snprintf(v[1], 32, "pod-%07u", i);
    snprintf(v[2], 32, "c-%u", i % 4);
    snprintf(v[3], 32, "node-%03u", i % 200);
    snprintf(v[4], 32, "zone-%c", 'a' + i % 3);
    snprintf(v[5], 32, "cluster-1");
    snprintf(v[6], 32, "kubernetes-pods");
    snprintf(v[7], 32, "10.%u.%u.%u:9100", i >> 16 & 255, i >> 8 & 255, i & 255);
    snprintf(v[8], 32, "app-%u", i % 100);
    snprintf(v[9], 32, "v1.%u", i % 10);
}

static void bench_expo(unsigned n, int runs, int analytics)
{
    static const char *const keys[10] = {"namespace", "pod", "container", "node", "zone",
                                         "cluster",   "job", "instance",  "app",  "version"};
    const unsigned per = 50000;
    unsigned nseg = (n + per - 1) / per;
    mseg *segs = calloc(nseg, sizeof *segs);
    mv_coll_seg_view *views = calloc(nseg, sizeof *views);
    const mv_coll_seg_view **vp = calloc(nseg, sizeof *vp);
    char(*ids)[24] = calloc(nseg, sizeof *ids);
    uint64_t t_setup = bench_now_ns();
    for (unsigned s = 0; s < nseg; s++) {
        /* Records are appended with the format's writer primitives (what
         * libmicroview's registration does, without its duplicate check). */
        size_t size = 32u << 20;
        void *base = aligned_alloc(64, size);
        mv_seg_error err;
        if (!base)
            return;
        memset(base, 0, size);
        if (mv_seg_format(base, size, 1u << 20, &err) != MV_SEG_OK) {
            fprintf(stderr, "pipeline_bench: format: %s\n", err.detail);
            return;
        }
        mv_seg_header *h = base;
        char v[10][32], name[32];
        for (unsigned j = 0; j < per && s * per + j < n; j++) {
            unsigned i = s * per + j;
            label_values(i, v);
            mv_seg_label l[10];
            for (int k = 0; k < 10; k++)
                l[k] = (mv_seg_label){keys[k], v[k]};
            snprintf(name, sizeof name, "bench_gauge_%u", i % 10);
            mv_seg_metric_desc d = {.type = MV_SEG_GAUGE,
                                    .name = name,
                                    .help = "Benchmark gauge.",
                                    .labels = l,
                                    .label_count = 10};
            uint32_t rs = mv_seg_record_size(&d), vs = mv_seg_value_size(&d);
            mv_seg_record_encode((char *)base + h->catalog_offset + h->catalog_used, &d,
                                 h->values_used);
            double val = (double)i * 0.5;
            memcpy((char *)base + h->values_offset + h->values_used, &val, 8);
            h->values_used += vs;
            h->catalog_used += rs;
            h->metric_count++;
        }
        h->generation = 2;
        segs[s].map = base;
        segs[s].size = size;
        segs[s].fd = -1;
        if (mseg_parse(&segs[s]) != 0)
            return;
        snprintf(ids[s], sizeof ids[s], "bench-%u", s);
        views[s] = (mv_coll_seg_view){.id = ids[s],
                                      .state = MV_COLL_OK,
                                      .cat = segs[s].cat,
                                      .cat_serial = s + 1,
                                      .hot = segs[s].map,
                                      .transport = "shm"};
        vp[s] = &views[s];
    }
    /* With analytics: a pipeline view per segment after one window of reads. */
    mv_pipe_seg **pipes = calloc(nseg, sizeof *pipes);
    if (analytics) {
        mv_pipe_config cfg;
        mv_pipe_config_default(&cfg);
        cfg.window_ns = 1000 * MS;
        cfg.sketch_buckets = 64;
        cfg.fd = 0;
        for (unsigned s = 0; s < nseg; s++) {
            if (mv_pipe_seg_create(&cfg, segs[s].cat, NULL, &pipes[s]) != 0)
                return;
            uint64_t t = 5000000ull * 1000 * MS;
            mv_pipe_seg_feed(pipes[s], segs[s].map, t);
            mv_pipe_seg_feed(pipes[s], segs[s].map, t + 500 * MS);
            mv_pipe_seg_feed(pipes[s], segs[s].map, t + 1000 * MS);
            views[s].pipe = mv_pipe_seg_view(pipes[s]);
        }
    }
    double setup = (double)(bench_now_ns() - t_setup) / 1e9;
    mv_coll_stats cs = {0};
    mv_expo *e = mv_expo_create(MV_EXPO_TEXT, 1ull << 31);
    mv_export_stats st = {0};
    /* analytics 1: every derived series; 2: the collector's default choice. */
    mv_export_sel *sel = analytics == 2 ? mv_export_sel_create() : NULL;
    double secs[16], first[16], unc[16];
    size_t len = 0, ulen = 0;
    /* Uncached (every render walks, sorts and escapes everything): the way before the cache. */
    mv_export_render_views_sel(e, vp, nseg, &cs, sel, &st); /* warm-up, sizes the buffer */
    char *want = NULL;
    for (int r = 0; r < runs; r++) {
        mv_expo_reset(e, MV_EXPO_TEXT);
        uint64_t t0 = feed_clock_ns();
        mv_export_render_views_sel(e, vp, nseg, &cs, sel, &st);
        unc[r] = (double)(feed_clock_ns() - t0) / 1e9;
    }
    const char *d = mv_expo_data(e, &ulen);
    want = malloc(ulen ? ulen : 1);
    if (want)
        memcpy(want, d, ulen);
    /* First render through a new cache (what the scrape after a catalog, label or selection
     * change pays; the output buffer is warm), then warm renders (steady state). */
    mv_export_cache *cache = NULL;
    for (int r = 0; r < runs; r++) {
        mv_export_cache_destroy(cache);
        cache = mv_export_cache_create();
        mv_expo_reset(e, MV_EXPO_TEXT);
        uint64_t t0 = feed_clock_ns();
        mv_export_render_views_cached(cache, e, vp, nseg, &cs, sel, &st);
        first[r] = (double)(feed_clock_ns() - t0) / 1e9;
    }
    for (int r = 0; r < runs; r++) {
        mv_expo_reset(e, MV_EXPO_TEXT);
        uint64_t t0 = feed_clock_ns();
        mv_export_render_views_cached(cache, e, vp, nseg, &cs, sel, &st);
        secs[r] = (double)(feed_clock_ns() - t0) / 1e9;
    }
    /* A rebuild: every catalog re-read (new serials), the plans' memory reused. */
    double rebuild[16];
    for (int r = 0; r < runs; r++) {
        for (unsigned s = 0; s < nseg; s++)
            views[s].cat_serial += nseg;
        mv_expo_reset(e, MV_EXPO_TEXT);
        uint64_t t0 = feed_clock_ns();
        mv_export_render_views_cached(cache, e, vp, nseg, &cs, sel, &st);
        rebuild[r] = (double)(feed_clock_ns() - t0) / 1e9;
    }
    d = mv_expo_data(e, &len);
    if (!want || len != ulen || memcmp(d, want, len) != 0) {
        fprintf(stderr, "pipeline_bench: the cached exposition differs from the uncached one\n");
        exit(1);
    }
    free(want);
    /* gzip (the HTTP layer's, level 6, when the scraper accepts it) is not part of the render
     * nor of the peers' figures; timed apart, once, on the rendered body, up to 100k series. */
    double gz = NAN;
    size_t gzlen = 0;
    if (n <= 100000) {
        z_stream z = {0};
        size_t cap = deflateBound(&z, len) + 64;
        unsigned char *zb = malloc(cap);
        if (zb && deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK) {
            uint64_t t0 = feed_clock_ns();
            z.next_in = (unsigned char *)d;
            z.avail_in = (uInt)len;
            z.next_out = zb;
            z.avail_out = (uInt)cap;
            if (deflate(&z, Z_FINISH) == Z_STREAM_END) {
                gz = (double)(feed_clock_ns() - t0) / 1e9;
                gzlen = z.total_out;
            }
            deflateEnd(&z);
        }
        free(zb);
    }
    mv_export_cache_stats ks;
    mv_export_cache_get_stats(cache, &ks);
    double med = bench_median(secs, (size_t)runs), fmed = bench_median(first, (size_t)runs),
           umed = bench_median(unc, (size_t)runs), rmed = bench_median(rebuild, (size_t)runs);
    printf("bench=expo impl=microview series=%u analytics=%d derived=%s samples=%llu seconds=%.4f "
           "bytes=%zu ns_per_series=%.0f first_seconds=%.4f first_ns_per_series=%.0f "
           "rebuild_seconds=%.4f rebuild_ns_per_series=%.0f uncached_seconds=%.4f "
           "uncached_ns_per_series=%.0f cache_bytes=%zu gzip_seconds=%.4f gzip_bytes=%zu "
           "setup_seconds=%.2f runs=%d\n",
           n, analytics != 0,
           analytics == 2 ? "default"
           : analytics    ? "all"
                          : "none",
           (unsigned long long)st.series, med, len, med * 1e9 / n, fmed, fmed * 1e9 / n, rmed,
           rmed * 1e9 / n, umed, umed * 1e9 / n, ks.bytes, gz, gzlen, setup, runs);
    mv_export_cache_destroy(cache);
    mv_export_sel_destroy(sel);
    mv_expo_destroy(e);
    for (unsigned s = 0; s < nseg; s++) {
        free((void *)views[s].pipe);
        mv_pipe_seg_destroy(pipes[s]);
        mv_seg_catalog_free(segs[s].cat);
        free(segs[s].map);
    }
    free(pipes);
    free(segs);
    free(views);
    free(vp);
    free(ids);
}

/* ---- Freshness ------------------------------------------------------------------------------ */

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* A write into the segment until a rendered exposition (what /metrics serves)
 * shows it, with the collector's tick thread at 1 ms. */
static void bench_freshness(int samples, int adaptive)
{
    /* A real file: the shm transport refuses symlinks such as /proc/self/fd. */
    char path[64] = "/dev/shm/mvbench-fresh-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) {
        snprintf(path, sizeof path, "/tmp/mvbench-fresh-XXXXXX");
        fd = mkstemp(path);
    }
    mv_segment *w;
    if (fd < 0 || ftruncate(fd, 1 << 16) != 0 || mv_open(path, &w) != MV_OK) {
        fprintf(stderr, "pipeline_bench: cannot create a segment file\n");
        return;
    }
    close(fd);
    mv_gauge g;
    mv_gauge_register(w, "fresh_value", NULL, NULL, NULL, 0, &g);
    mv_coll_opts o;
    mv_coll_opts_default(&o);
    o.tick_us = 1000;
    o.analytics = 1;
    o.max_interval_us = adaptive ? 1000000 : 0;
    mv_coll *c;
    if (mv_coll_create(&o, &c) != 0)
        return;
    void *src;
    uint64_t size;
    char err[256];
    if (mv_coll_shm_open(path, 0, &src, &size, err, sizeof err) != 0 ||
        mv_coll_add(c, "fresh", size, NULL, 0, mv_coll_shm_transport(), src) != 0 ||
        mv_coll_start(c) != 0) {
        fprintf(stderr, "pipeline_bench: freshness setup: %s\n", err);
        return;
    }
    uint64_t *lat = calloc((size_t)samples, sizeof *lat);
    mv_expo *e = mv_expo_create(MV_EXPO_TEXT, 0);
    char want[64];
    usleep(200000);
    for (int k = 0; k < samples; k++) {
        usleep(2000 + (unsigned)(k * 7919 % 5000)); /* desynchronise from the tick */
        int n = snprintf(want, sizeof want, "fresh_value %d\n", k + 1);
        uint64_t t0 = bench_now_ns();
        mv_gauge_set(g, k + 1);
        for (;;) {
            mv_coll_snap *sn = mv_coll_snapshot(c);
            mv_expo_reset(e, MV_EXPO_TEXT);
            mv_export_render(e, sn, NULL);
            mv_coll_snap_free(sn);
            size_t len;
            const char *d = mv_expo_data(e, &len);
            if (memmem(d, len, want, (size_t)n))
                break;
            usleep(100);
        }
        lat[k] = bench_now_ns() - t0;
    }
    qsort(lat, (size_t)samples, sizeof *lat, cmp_u64);
    printf("bench=freshness tick_ms=1 adaptive=%d samples=%d p50_ms=%.3f p99_ms=%.3f max_ms=%.3f\n",
           adaptive, samples, lat[samples / 2] / 1e6, lat[samples * 99 / 100] / 1e6,
           lat[samples - 1] / 1e6);
    if (adaptive)
        printf("goal=freshness.adaptive_p99 issue_goal=5 figure=%.3fms target=<=2ms met=%s\n",
               lat[samples * 99 / 100] / 1e6, lat[samples * 99 / 100] <= 2000000 ? "yes" : "no");
    free(lat);
    mv_expo_destroy(e);
    mv_coll_destroy(c);
    mv_close(w);
    unlink(path);
}

/* What adaptive sampling saves on calm segments, and what its probe costs: `nsegs` segments
 * of 64 metrics nobody writes, read by a collector ticking every 1 ms (one tick worker, the
 * calling thread) for `seconds` after the back-off settled, in three modes: every segment
 * read every tick; adaptive with the shm probe; adaptive without a probe. CPU by the
 * thread's clock. Returns the CPU per tick (us) of the mode, or a negative value. */
typedef enum { CALM_EVERY, CALM_PROBE, CALM_NOPROBE } calm_mode;

static double bench_calm(calm_mode mode, unsigned nsegs, double seconds)
{
    static const char *const names[] = {"every_tick", "adaptive_probe", "adaptive_no_probe"};
    char dir[] = "/dev/shm/mvbench-calm-XXXXXX";
    if (!mkdtemp(dir))
        return -1;
    mv_segment **w = calloc(nsegs, sizeof *w);
    char(*paths)[96] = calloc(nsegs, sizeof *paths);
    mv_coll_transport noprobe = *mv_coll_shm_transport();
    noprobe.probe = NULL;
    mv_coll_opts o;
    mv_coll_opts_default(&o);
    o.tick_us = 1000;
    o.analytics = 1;
    o.max_interval_us = mode == CALM_EVERY ? 0 : 1000000;
    mv_coll *c = NULL;
    double res = -1;
    if (!w || !paths || mv_coll_create(&o, &c) != 0)
        goto out;
    for (unsigned i = 0; i < nsegs; i++) {
        snprintf(paths[i], sizeof paths[i], "%s/seg-%04u", dir, i);
        int fd = open(paths[i], O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0 || ftruncate(fd, 32 << 10) != 0 || mv_open(paths[i], &w[i]) != MV_OK) {
            if (fd >= 0)
                close(fd);
            goto out;
        }
        close(fd);
        for (unsigned j = 0; j < 64; j++) {
            char name[48];
            mv_counter ctr;
            mv_gauge g;
            snprintf(name, sizeof name, j % 2 ? "calm_level_%02u" : "calm_%02u_total", j);
            if (j % 2 ? mv_gauge_register(w[i], name, NULL, NULL, NULL, 0, &g)
                      : mv_counter_register(w[i], name, NULL, NULL, NULL, 0, &ctr))
                goto out;
            if (j % 2)
                mv_gauge_set(g, j);
            else
                mv_counter_add(ctr, j);
        }
        void *src;
        uint64_t size;
        char err[256], id[32];
        snprintf(id, sizeof id, "seg-%04u", i);
        if (mv_coll_shm_open(paths[i], 0, &src, &size, err, sizeof err) != 0 ||
            mv_coll_add(c, id, size, NULL, 0,
                        mode == CALM_NOPROBE ? &noprobe : mv_coll_shm_transport(), src) != 0)
            goto out;
    }
    /* Settle: the back-off reaches its longest interval (8 calm reads per doubling from
     * 1 ms to 1 s: about 8 s of ticks). */
    uint64_t until = bench_now_ns() + (mode == CALM_EVERY ? 200000000ull : 9000000000ull);
    while (bench_now_ns() < until) {
        mv_coll_tick(c);
        usleep(1000);
    }
    mv_coll_snap *sn = mv_coll_snapshot(c);
    uint64_t reads0 = 0, probes0 = 0;
    for (size_t i = 0; sn && i < mv_coll_snap_count(sn); i++) {
        reads0 += mv_coll_snap_seg(sn, i)->reads;
        probes0 += mv_coll_snap_seg(sn, i)->probes;
    }
    mv_coll_snap_free(sn);
    uint64_t ticks = 0, cpu = 0, end = bench_now_ns() + (uint64_t)(seconds * 1e9);
    while (bench_now_ns() < end) {
        uint64_t c0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
        mv_coll_tick(c);
        cpu += clock_ns(CLOCK_THREAD_CPUTIME_ID) - c0;
        ticks++;
        usleep(1000);
    }
    sn = mv_coll_snapshot(c);
    uint64_t reads = 0, probes = 0;
    for (size_t i = 0; sn && i < mv_coll_snap_count(sn); i++) {
        reads += mv_coll_snap_seg(sn, i)->reads;
        probes += mv_coll_snap_seg(sn, i)->probes;
    }
    mv_coll_snap_free(sn);
    res = ticks ? (double)cpu / (double)ticks / 1e3 : -1;
    printf("bench=calm mode=%s segments=%u metrics=64 ticks=%llu cpu_us_per_tick=%.1f "
           "reads_per_tick=%.2f probes_per_tick=%.1f\n",
           names[mode], nsegs, (unsigned long long)ticks, res,
           ticks ? (double)(reads - reads0) / (double)ticks : 0.0,
           ticks ? (double)(probes - probes0) / (double)ticks : 0.0);
out:
    mv_coll_destroy(c);
    for (unsigned i = 0; w && i < nsegs; i++) {
        if (w[i])
            mv_close(w[i]);
        if (paths)
            unlink(paths[i]);
    }
    free(w);
    free(paths);
    rmdir(dir);
    return res;
}

/* ---- The tick's analytics, simulated ----------------------------------------------------------
 *
 * --tick-sim: the analytics part of tick_bench's tick alone, on a simulated clock, so that its
 * work is the same on every run and under valgrind (`callgrind --toggle-collect=sim_tick`
 * counts the instructions of the measured ticks only). `nsegs` segments of 64 metrics
 * (counters and gauges alternating), each with the pipeline configuration the collector gives
 * it (mv_coll_opts_default's, and its per-segment phases, close spread and same_batch); every
 * simulated millisecond the writer of tick_bench gives every metric of `pct` % of the segments,
 * the next ones in turn, a new value (not timed), then one tick feeds every segment as the
 * collector does: a copy of the segment's values when it changed (mv_pipe_seg_feed), else a
 * read of unchanged values (mv_pipe_seg_feed_same), with the collector's prefetches. `warm`
 * ticks run first (16,000: one 15 s window and a margin, so the sketches have their pages),
 * then `ticks` measured ones, timed by the thread's CPU clock. */

typedef struct sim_seg {
    mseg m;
    mv_counter ctr[64];
    mv_gauge g[64];
    mv_pipe_seg *p;
    char *snap; /* the collector's copy of the hot area */
    int changed;
} sim_seg;

/* One tick's feeds. */
static inline unsigned sim_feed_all(sim_seg *ss, unsigned n, uint64_t now)
{
    unsigned f = 0;
    /* Unchanged segments first, as the collector serves them in its first phase. */
    for (unsigned i = 0; i < n; i++) {
        if (i + 2 < n && !ss[i + 2].changed)
            mv_pipe_seg_prefetch(ss[i + 2].p, MV_PIPE_PF_STATE);
        if (i + 1 < n && !ss[i + 1].changed)
            mv_pipe_seg_prefetch(ss[i + 1].p, MV_PIPE_PF_SAME);
        if (!ss[i].changed)
            f |= mv_pipe_seg_feed_same(ss[i].p, ss[i].snap, now);
    }
    /* Then the copies, 8 at a time (the collector's LOCAL_GROUP). */
    unsigned grp[8], k = 0;
    for (unsigned i = 0; i <= n; i++) {
        if (i < n && ss[i].changed) {
            grp[k++] = i;
            mv_pipe_seg_prefetch(ss[i].p, MV_PIPE_PF_STATE);
        }
        if (k == 8 || (i == n && k)) {
            for (unsigned j = 0; j < k; j++) {
                if (j + 1 < k)
                    mv_pipe_seg_prefetch(ss[grp[j + 1]].p, MV_PIPE_PF_RECORDS);
                f |= mv_pipe_seg_feed(ss[grp[j]].p, ss[grp[j]].snap, now);
            }
            k = 0;
        }
    }
    return f;
}

/* A measured tick and a warm-up one, out of line: callgrind's --toggle-collect=sim_tick counts
 * the measured ones only. */
__attribute__((noinline)) static unsigned sim_tick(sim_seg *ss, unsigned n, uint64_t now)
{
    return sim_feed_all(ss, n, now);
}

static unsigned g_sim_warm_ticks; /* keeps sim_tick_warm's code apart from sim_tick's */

__attribute__((noinline)) static unsigned sim_tick_warm(sim_seg *ss, unsigned n, uint64_t now)
{
    g_sim_warm_ticks++;
    return sim_feed_all(ss, n, now);
}

/* Folds what every segment's view publishes (the summaries, the window, the scorer; not the
 * bytes held, which a change of layout may move) into h: equal hashes from two builds say
 * that their analytics gave the same outputs, to the bit. */
static uint64_t sim_views_hash(sim_seg *ss, unsigned n, uint64_t h)
{
    for (unsigned i = 0; i < n; i++) {
        mv_pipe_view *v = mv_pipe_seg_view(ss[i].p);
        if (!v)
            continue;
        uint64_t w[6] = {v->window_start_ns, v->window_end_ns, 0,
                         v->fd_steps,        v->collapses,     v->window_reads};
        memcpy(&w[2], &v->anomaly_score, 8);
        h = h * 0x100000001b3ull ^ mv_seg_fnv1a64(w, sizeof w);
        h = h * 0x100000001b3ull ^ mv_seg_fnv1a64(v->m, v->n * sizeof v->m[0]);
        free(v);
    }
    return h;
}

static void bench_tick_sim(unsigned nsegs, double pct, unsigned warm, unsigned ticks)
{
    sim_seg *ss = calloc(nsegs, sizeof *ss);
    size_t hot = 0;
    mv_coll_opts co;
    mv_coll_opts_default(&co);
    co.tick_us = 1000;
    if (!ss)
        return;
    size_t heap0 = bench_heap_in_use();
    for (unsigned i = 0; i < nsegs; i++) {
        sim_seg *s = &ss[i];
        char name[48], id[32];
        if (mseg_open(&s->m, 32u << 10) != 0) {
            fprintf(stderr, "pipeline_bench: cannot create segment %u\n", i);
            return;
        }
        for (unsigned j = 0; j < 64; j++) {
            snprintf(name, sizeof name, j % 2 ? "app_level_%02u" : "app_events_%02u_total", j);
            int rc = j % 2 ? mv_gauge_register(s->m.w, name, NULL, NULL, NULL, 0, &s->g[j])
                           : mv_counter_register(s->m.w, name, NULL, NULL, NULL, 0, &s->ctr[j]);
            if (rc != MV_OK) {
                fprintf(stderr, "pipeline_bench: register: %s\n", mv_strerror(rc));
                return;
            }
        }
        if (mseg_parse(&s->m) != 0)
            return;
        /* The collector's configuration for a segment with this id (mv_collect_tick.c). */
        snprintf(id, sizeof id, "seg-%04u", i);
        mv_pipe_config pc = co.pipe;
        uint64_t h = mv_seg_fnv1a64(id, strlen(id));
        pc.close_spread_ns = 8ull * co.tick_us * 1000ull;
        pc.phase_ns = h % pc.fd_period_ns;
        pc.same_batch = 8;
        uint64_t m = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
        m = (m ^ (m >> 27)) * 0x94d049bb133111ebull;
        pc.window_phase_ns = (m ^ (m >> 31)) % pc.window_ns;
        hot = mv_seg_catalog_hot_size(s->m.cat);
        s->snap = aligned_alloc(64, (hot + 63) & ~(size_t)63);
        if (!s->snap || mv_pipe_seg_create(&pc, s->m.cat, NULL, &s->p) != 0) {
            fprintf(stderr, "pipeline_bench: pipeline %u\n", i);
            return;
        }
        close(s->m.fd); /* the mapping stays: 4,000 segments need no 4,000 descriptors */
        s->m.fd = -1;
        s->changed = 1;
    }
    unsigned per = (unsigned)((double)nsegs * pct / 100.0 + 0.5);
    uint64_t t = 1000ull * 1000 * MS, cpu = 0, cursor = 0, hash = 14695981039346656037ull;
    for (unsigned tk = 0; tk < warm + ticks; tk++, t += MS) {
        /* tick_bench's writer: every metric of the next `per` segments. */
        for (unsigned k = 0; k < per; k++) {
            unsigned i = (unsigned)((cursor + k) % nsegs);
            for (unsigned j = 0; j < 64; j++) {
                if (j % 2 == 0)
                    mv_counter_add(ss[i].ctr[j], 1 + (tk + j) % 5);
                else
                    mv_gauge_set(ss[i].g[j], (double)((tk * 7u + i + j) % 1000));
            }
            ss[i].changed = 1;
        }
        cursor += per;
        for (unsigned i = 0; i < nsegs; i++)
            if (ss[i].changed)
                memcpy(ss[i].snap, ss[i].m.map, hot);
        uint64_t c0 = tk >= warm ? clock_ns(CLOCK_THREAD_CPUTIME_ID) : 0;
        unsigned f = tk >= warm ? sim_tick(ss, nsegs, t) : sim_tick_warm(ss, nsegs, t);
        if (tk >= warm)
            cpu += clock_ns(CLOCK_THREAD_CPUTIME_ID) - c0;
        hash = hash * 0x100000001b3ull ^ f; /* every tick's flags */
        if (tk % 1000 == 999)
            hash = sim_views_hash(ss, nsegs, hash);
        for (unsigned i = 0; i < nsegs; i++)
            ss[i].changed = 0;
    }
    BENCH_KEEP(g_sim_warm_ticks);
    hash = sim_views_hash(ss, nsegs, hash);
    uint64_t mem = 0;
    for (unsigned i = 0; i < nsegs; i++) {
        mv_pipe_view *v = mv_pipe_seg_view(ss[i].p);
        mem += v ? v->mem_bytes : 0;
        free(v);
    }
    double us = ticks ? (double)cpu / ticks / 1e3 : 0;
    printf("bench=pipeline_tick segments=%u metrics=64 change_pct=%g warm_ticks=%u ticks=%u "
           "cpu_per_tick_us=%.1f cpu_ns_per_metric=%.2f clock=thread_cpu "
           "analytics_bytes_per_metric=%.0f heap_bytes_per_metric=%.0f outputs_hash=%016llx\n",
           nsegs, pct, warm, ticks, us, us * 1e3 / (64.0 * nsegs), (double)mem / (64.0 * nsegs),
           (double)(bench_heap_in_use() - heap0) / (64.0 * nsegs), (unsigned long long)hash);
    for (unsigned i = 0; i < nsegs; i++) {
        mv_pipe_seg_destroy(ss[i].p);
        free(ss[i].snap);
        mv_seg_catalog_free(ss[i].m.cat);
        munmap(ss[i].m.map, ss[i].m.size);
        mv_close(ss[i].m.w);
    }
    free(ss);
}

int main(int argc, char **argv)
{
    int quick = 0, only_fresh = 0, only_expo = 0, only_pipe = 0, tick_sim = 0;
    unsigned sim_segs = 1000, sim_ticks = 2000, sim_warm = 16000;
    double sim_pct = 10;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(argv[i], "--quick") == 0)
            quick = 1;
        else if (strcmp(argv[i], "--tick-sim") == 0)
            tick_sim = 1;
        else if (strcmp(argv[i], "--segments") == 0 && v && atoi(v) > 0 && atoi(v) <= 100000)
            sim_segs = (unsigned)atoi(argv[++i]);
        else if (strcmp(argv[i], "--change-pct") == 0 && v && atof(v) >= 0 && atof(v) <= 100)
            sim_pct = atof(argv[++i]);
        else if (strcmp(argv[i], "--ticks") == 0 && v && atoi(v) > 0)
            sim_ticks = (unsigned)atoi(argv[++i]);
        else if (strcmp(argv[i], "--warm-ticks") == 0 && v && atoi(v) >= 0)
            sim_warm = (unsigned)atoi(argv[++i]);
        else if (strcmp(argv[i], "--freshness") == 0)
            only_fresh = 1;
        else if (strcmp(argv[i], "--expo") == 0)
            only_expo = 1;
        else if (strcmp(argv[i], "--pipeline") == 0)
            only_pipe = 1;
        else if (strcmp(argv[i], "--native-gauges") == 0)
            g_native = 1;
        else if (strcmp(argv[i], "--cpu-time") == 0)
            g_cpu_time = 1;
        else {
            fprintf(stderr,
                    "usage: pipeline_bench [--quick] [--cpu-time] [--native-gauges] [--freshness | "
                    "--expo | "
                    "--pipeline]\n"
                    "       pipeline_bench --tick-sim [--segments N] [--change-pct P] [--ticks T] "
                    "[--warm-ticks W]\n");
            return 2;
        }
    }
    if (tick_sim) {
        setvbuf(stdout, NULL, _IOLBF, 0);
        bench_tick_sim(sim_segs, sim_pct, sim_warm, sim_ticks);
        return 0;
    }
    unsigned reads = quick ? 320 : 3008; /* multiples of BATCH */
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("# pipeline_bench: one core; samples = metric values fed per read; reads timed in "
           "batches of %d copies; _median: the median batch\n",
           BATCH);
    if (only_fresh)
        goto freshness;
    if (only_expo)
        goto expo;
    for (int kind = 0; kind < 3; kind++)
        for (int det = 0; det < 2; det++)
            for (int fd = 0; fd < 2; fd++) {
                if (!det && fd)
                    continue;
                bench_pipeline(kind, kind == KIND_HIST ? 256 : 1024, det, fd, reads, 1);
            }
    /* The collector's common case: a segment whose values move every few ticks. */
    for (int kind = 0; kind < 2; kind++)
        bench_pipeline(kind, 1024, 1, 1, reads, 8);
    print_goals();
    if (only_pipe)
        return 0;
expo:;
    unsigned sizes[3] = {10000, 100000, 1000000};
    for (int i = 0; i < (quick ? 2 : 3); i++) {
        bench_expo(sizes[i], quick ? 3 : 5, 0);
        /* Every derived series at 1M: 12 M samples, ~2.9 GB, past the 2 GiB cap. */
        if (sizes[i] < 1000000)
            bench_expo(sizes[i], quick ? 3 : 5, 1);
        bench_expo(sizes[i], quick ? 3 : 5, 2);
    }
    if (only_expo)
        return 0;
freshness:
    bench_freshness(quick ? 50 : 300, 0);
    bench_freshness(quick ? 50 : 300, 1);
    {
        /* The read savings the probe must keep (issue goal 5: report both). */
        unsigned n = quick ? 200 : 1000;
        double every = bench_calm(CALM_EVERY, n, quick ? 2 : 5);
        double probe = bench_calm(CALM_PROBE, n, quick ? 2 : 5);
        double noprobe = bench_calm(CALM_NOPROBE, n, quick ? 2 : 5);
        if (every > 0 && probe > 0 && noprobe > 0)
            printf("goal=freshness.calm_savings issue_goal=5 figure=%.1fx target=report "
                   "every_tick_cpu_us=%.1f probe_cpu_us=%.1f no_probe_cpu_us=%.1f met=report\n",
                   every / probe, every, probe, noprobe);
    }
    return 0;
}
