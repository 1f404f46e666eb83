/* ingest_bench.c: the collector's per-tick copy + validate + read cost over many segments. */
#include "bench_util.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include "microview.h"
#include "mv_segment.h"

#define SEG_SIZE   (64u << 10)
#define NBOUNDS    16
#define MAX_RUNS   32
#define HIST_EVERY 16 /* one metric in 16 is a histogram */

typedef struct seg {
    int fd;
    const void *map; /* read-only mapping, as a same-host collector has it */
    mv_seg_catalog *cat;
    uint32_t hot_size;
    uint64_t *hot; /* this segment's last copy, kept like a collector keeps it */
} seg;

typedef struct totals {
    uint64_t values;  /* metrics read: one per counter, gauge or histogram */
    uint64_t samples; /* exposition samples: histograms count buckets + sum + count */
    uint64_t torn, rejected;
    double sink;
} totals;

/* Writes one segment's metrics with libmicroview into the memfd `fd`. */
static int fill_segment(int fd, unsigned idx, unsigned nmetrics)
{
    char path[64], name[64], pod[32];
    double bounds[NBOUNDS];
    mv_segment *s;
    int rc;

    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    if ((rc = mv_open(path, &s)) != MV_OK) {
        fprintf(stderr, "ingest_bench: mv_open %s: %s: %s\n", path, mv_strerror(rc),
                mv_errdetail());
        return -1;
    }
    mv_exponential_buckets(0.001, 2.0, NBOUNDS, bounds);
    snprintf(pod, sizeof pod, "pod-%04u", idx);
    for (unsigned j = 0; j < nmetrics && rc == MV_OK; j++) {
        mv_label labels[3] = {{"namespace", "bench"}, {"pod", pod}, {"container", "main"}};
        if (j % HIST_EVERY == HIST_EVERY - 1) {
            mv_histogram *h;
            snprintf(name, sizeof name, "app_latency_%02u_seconds", j);
            rc = mv_histogram_register(s, name, "request latency", "seconds", labels, 3, bounds,
                                       NBOUNDS, &h);
            for (unsigned k = 0; rc == MV_OK && k < 100; k++)
                mv_histogram_observe(h, 0.0005 * (double)(k * k + idx % 7));
        } else if (j % 2 == 0) {
            mv_counter c;
            snprintf(name, sizeof name, "app_events_%02u_total", j);
            rc = mv_counter_register(s, name, "events handled", NULL, labels, 3, &c);
            if (rc == MV_OK)
                mv_counter_add(c, (uint64_t)idx * 1000 + j);
        } else {
            mv_gauge g;
            snprintf(name, sizeof name, "app_level_%02u", j);
            rc = mv_gauge_register(s, name, "current level", NULL, labels, 3, &g);
            if (rc == MV_OK)
                mv_gauge_set(g, (double)idx + (double)j / 100.0);
        }
    }
    if (rc != MV_OK)
        fprintf(stderr, "ingest_bench: segment %u register: %s: %s\n", idx, mv_strerror(rc),
                mv_errdetail());
    mv_heartbeat(s);
    mv_close(s);
    return rc == MV_OK ? 0 : -1;
}

/* Creates, fills, maps and catalogs segment `idx`. */
static int seg_setup(seg *sg, unsigned idx, unsigned nmetrics)
{
    mv_seg_error err;
    void *copy;

    memset(sg, 0, sizeof *sg);
    sg->fd = memfd_create("mvbench-seg", MFD_CLOEXEC);
    if (sg->fd < 0 || ftruncate(sg->fd, SEG_SIZE) != 0) {
        fprintf(stderr, "ingest_bench: memfd: %s\n", strerror(errno));
        return -1;
    }
    if (fill_segment(sg->fd, idx, nmetrics) != 0)
        return -1;
    sg->map = mmap(NULL, SEG_SIZE, PROT_READ, MAP_SHARED, sg->fd, 0);
    if (sg->map == MAP_FAILED) {
        sg->map = NULL;
        fprintf(stderr, "ingest_bench: mmap: %s\n", strerror(errno));
        return -1;
    }
    /* Catalog once, from a full copy, as the collector does on discovery. */
    if (!(copy = aligned_alloc(64, SEG_SIZE)))
        return -1;
    mv_seg_copy_words(copy, sg->map, SEG_SIZE);
    mv_seg_reason r = mv_seg_catalog_parse(copy, SEG_SIZE, SEG_SIZE, &sg->cat, &err);
    free(copy);
    if (r != MV_SEG_OK) {
        fprintf(stderr, "ingest_bench: segment %u catalog: %s: %s\n", idx, mv_seg_reason_name(r),
                err.detail);
        return -1;
    }
    if (mv_seg_catalog_count(sg->cat) != nmetrics) {
        fprintf(stderr, "ingest_bench: segment %u has %zu metrics, wrote %u\n", idx,
                mv_seg_catalog_count(sg->cat), nmetrics);
        return -1;
    }
    sg->hot_size = mv_seg_catalog_hot_size(sg->cat);
    if (!(sg->hot = aligned_alloc(64, ((size_t)sg->hot_size + 63) & ~(size_t)63)))
        return -1;
    return 0;
}

static void seg_teardown(seg *sg)
{
    free(sg->hot);
    mv_seg_catalog_free(sg->cat);
    if (sg->map)
        munmap((void *)sg->map, SEG_SIZE);
    if (sg->fd >= 0)
        close(sg->fd);
}

/* One collector tick over every segment: copy, check, read all metrics. */
static void tick(seg *segs, unsigned n, totals *t)
{
    for (unsigned i = 0; i < n; i++) {
        seg *sg = &segs[i];
        mv_seg_error err;
        mv_seg_copy_words(sg->hot, sg->map, sg->hot_size);
        if (mv_seg_hot_check(sg->cat, sg->hot, sg->hot_size, NULL, &err) != MV_SEG_OK) {
            t->rejected++;
            continue;
        }
        size_t nm = mv_seg_catalog_count(sg->cat);
        for (size_t j = 0; j < nm; j++) {
            const mv_seg_metric *m = mv_seg_catalog_metric(sg->cat, j);
            mv_seg_hist_view hv;
            switch (m->type) {
            case MV_SEG_COUNTER:
                t->sink += (double)mv_seg_read_counter(sg->hot, m);
                t->samples++;
                break;
            case MV_SEG_GAUGE:
                t->sink += mv_seg_read_gauge(sg->hot, m);
                t->samples++;
                break;
            case MV_SEG_HISTOGRAM:
                if (mv_seg_read_histogram(sg->hot, m, &hv) != MV_SEG_OK) {
                    t->torn++;
                    continue;
                }
                t->sink += hv.sum + (double)hv.count + (double)hv.buckets[m->bucket_count];
                t->samples += m->bucket_count + 3u; /* finite + +Inf buckets, sum, count */
                break;
            }
            t->values++;
        }
    }
}

/* The calling thread's context-switch count, or -1. */
static long switches(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_THREAD, &ru) != 0)
        return -1;
    return ru.ru_nvcsw + ru.ru_nivcsw;
}

static void copy_only(seg *segs, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        mv_seg_copy_words(segs[i].hot, segs[i].map, segs[i].hot_size);
    BENCH_CLOBBER();
}

int main(int argc, char **argv)
{
    unsigned nsegs = 1000, nmetrics = 64, rounds = 200;
    int runs = 5, rc = 1;
    seg *segs;
    double *clean = NULL; /* ns/segment of each tick the thread ran without a switch */
    size_t nclean = 0;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--quick")) {
            rounds = 40;
            runs = 3;
        } else if (!strcmp(a, "--segments") && v) {
            nsegs = (unsigned)strtoul(argv[++i], NULL, 10);
        } else if (!strcmp(a, "--metrics") && v) {
            nmetrics = (unsigned)strtoul(argv[++i], NULL, 10);
        } else if (!strcmp(a, "--rounds") && v) {
            rounds = (unsigned)strtoul(argv[++i], NULL, 10);
        } else if (!strcmp(a, "--runs") && v) {
            runs = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: ingest_bench [--quick] [--segments N] [--metrics M] "
                            "[--rounds R] [--runs K]\n"
                            "  defaults: --segments 1000 --metrics 64 --rounds 200 --runs 5\n");
            return 2;
        }
    }
    if (nsegs < 1 || nsegs > 100000 || nmetrics < 1 || nmetrics > 512 || rounds < 1 || runs < 1 ||
        runs > MAX_RUNS) {
        fprintf(stderr, "ingest_bench: segments 1..100000, metrics 1..512, rounds >= 1, "
                        "runs 1..32\n");
        return 2;
    }
    if (!(segs = calloc(nsegs, sizeof *segs))) {
        fprintf(stderr, "ingest_bench: out of memory\n");
        return 1;
    }
    unsigned made = 0;
    for (; made < nsegs; made++) {
        if (seg_setup(&segs[made], made, nmetrics) != 0) {
            made++; /* tear down the partly set up one too */
            goto teardown;
        }
    }

    uint64_t hot_total = 0;
    for (unsigned i = 0; i < nsegs; i++)
        hot_total += segs[i].hot_size;
    printf("# ingest_bench segments=%u metrics_per_segment=%u hot_bytes_per_segment=%.0f "
           "rounds=%u runs=%d\n",
           nsegs, nmetrics, (double)hot_total / nsegs, rounds, runs);

    totals t = {0};
    double ns_seg[MAX_RUNS], ns_copy[MAX_RUNS];
    /* Each tick is also timed alone; ticks during which the thread was not switched out
     * ("clean") give a figure that a machine shared with other jobs inflates less. */
    if (!(clean = malloc((size_t)rounds * runs * sizeof *clean))) {
        fprintf(stderr, "ingest_bench: out of memory\n");
        goto teardown;
    }
    tick(segs, nsegs, &t); /* warm-up */
    for (int r = 0; r < runs; r++) {
        memset(&t, 0, sizeof t);
        uint64_t t0 = bench_now_ns();
        for (unsigned k = 0; k < rounds; k++) {
            long s0 = switches();
            uint64_t a = bench_now_ns();
            tick(segs, nsegs, &t);
            uint64_t b = bench_now_ns();
            if (s0 >= 0 && s0 == switches())
                clean[nclean++] = (double)(b - a) / nsegs;
        }
        uint64_t t1 = bench_now_ns();
        for (unsigned k = 0; k < rounds; k++)
            copy_only(segs, nsegs);
        uint64_t t2 = bench_now_ns();
        BENCH_KEEP(t.sink);
        ns_seg[r] = (double)(t1 - t0) / ((double)rounds * nsegs);
        ns_copy[r] = (double)(t2 - t1) / ((double)rounds * nsegs);
        if (t.rejected || t.torn) {
            fprintf(stderr, "ingest_bench: %llu rejected copies, %llu torn histograms\n",
                    (unsigned long long)t.rejected, (unsigned long long)t.torn);
            goto teardown;
        }
    }
    double per_tick_values = (double)t.values / rounds,
           per_tick_samples = (double)t.samples / rounds;
    double med = bench_median(ns_seg, (size_t)runs), med_copy = bench_median(ns_copy, (size_t)runs);
    double values_s = per_tick_values / (med * nsegs) * 1e9;
    double samples_s = per_tick_samples / (med * nsegs) * 1e9;
    double med_clean = nclean ? bench_median(clean, nclean) : 0;
    printf("impl=libmicroview bench=ingest segments=%u metrics_per_segment=%u runs=%d "
           "hot_bytes_per_segment=%.0f ns_per_segment=%.1f copy_only_ns_per_segment=%.1f "
           "clean_ns_per_segment=%.1f clean_ticks=%zu metrics_per_s_core=%.0f "
           "samples_per_s_core=%.0f goal_samples_per_s_core=50000000 goal_met=%s\n",
           nsegs, nmetrics, runs, (double)hot_total / nsegs, med, med_copy, med_clean, nclean,
           values_s, samples_s, samples_s >= 50e6 ? "yes" : "no");
    rc = 0;

teardown:
    free(clean);
    for (unsigned i = 0; i < made; i++)
        seg_teardown(&segs[i]);
    free(segs);
    return rc;
}
