/* promwire_bench.c: the protobuf exposition with native histograms (uncached, and through the
 * exposition cache's protobuf plan) against the text exposition (cached, as /metrics serves it,
 * and uncached) for the same 100k series; remote write encoding
 * (1.0 and 2.0: protobuf + snappy) of 100k series per interval; and the quantile error of native
 * histograms per schema. Prints one line per figure; asserts nothing. */
#include "bench_util.h"

#include <fcntl.h>
#include <math.h>
#include <sys/mman.h>

#include "microview.h"
#include "mv_collect.h"
#include "mv_expo.h"
#include "mv_export.h"
#include "mv_rw.h"

#define NBOUNDS 12

static uint64_t cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static const char *const keys[8] = {"namespace", "pod", "container", "node",
                                    "zone",      "app", "version",   "instance"};

static void label_values(unsigned i, char v[8][32])
{
    snprintf(v[0], 32, "ns-%u", i % 50);
    snprintf(v[1], 32, "pod-%07u", i);
    snprintf(v[2], 32, "c-%u", i % 4);
    snprintf(v[3], 32, "node-%03u", i % 200);
    snprintf(v[4], 32, "zone-%c", 'a' + i % 3);
    snprintf(v[5], 32, "app-%u", i % 100);
    snprintf(v[6], 32, "v1.%u", i % 10);
    snprintf(v[7], 32, "10.%u.%u.%u:9100", i >> 16 & 255, i >> 8 & 255, i & 255);
}

typedef struct {
    int fd;
    size_t size;
    void *map;
    mv_segment *w;
    mv_seg_catalog *cat;
} mseg;

/* Gauges: records appended with the format's writer primitives (what libmicroview's
 * registration does, without its duplicate check, which is quadratic in a segment's metrics). */
static int gauge_seg(mseg *s, unsigned first, unsigned ng, size_t size)
{
    void *base = aligned_alloc(64, size);
    mv_seg_error err;
    if (!base)
        return -1;
    memset(base, 0, size);
    if (mv_seg_format(base, size, 16u << 20, &err) != MV_SEG_OK)
        return -1;
    mv_seg_header *h = base;
    for (unsigned j = 0; j < ng; j++) {
        char v[8][32];
        label_values(first + j, v);
        mv_seg_label l[8];
        for (int k = 0; k < 8; k++)
            l[k] = (mv_seg_label){keys[k], v[k]};
        mv_seg_metric_desc d = {.type = MV_SEG_GAUGE,
                                .name = j % 2 ? "bench_queue_depth" : "bench_temp_celsius",
                                .help = "Benchmark gauge.",
                                .labels = l,
                                .label_count = 8};
        uint32_t rs = mv_seg_record_size(&d), vs = mv_seg_value_size(&d);
        mv_seg_record_encode((char *)base + h->catalog_offset + h->catalog_used, &d,
                             h->values_used);
        double val = (double)j * 0.5;
        memcpy((char *)base + h->values_offset + h->values_used, &val, 8);
        h->values_used += vs;
        h->catalog_used += rs;
        h->metric_count++;
    }
    h->generation = 2;
    s->map = base;
    s->size = size;
    s->fd = -1;
    s->w = NULL;
    if (mv_seg_catalog_parse(s->map, size, size, &s->cat, &err) != MV_SEG_OK) {
        fprintf(stderr, "promwire_bench: catalog: %s\n", err.detail);
        return -1;
    }
    return 0;
}

/* Histograms: registered and observed through libmicroview (its checksummed records). */
static int hist_seg(mseg *s, unsigned first, unsigned nh, size_t size)
{
    char path[64];
    s->size = size;
    s->fd = memfd_create("mvbench", 0);
    if (s->fd < 0 || ftruncate(s->fd, (off_t)size) != 0)
        return -1;
    snprintf(path, sizeof path, "/proc/self/fd/%d", s->fd);
    if (mv_open(path, &s->w) != MV_OK)
        return -1;
    double bounds[NBOUNDS];
    for (int k = 0; k < NBOUNDS; k++)
        bounds[k] = exp2((k - 400) / 64.0); /* schema-6 boundaries around 13 ms */
    uint64_t r = 88172645463325252ull;
    for (unsigned i = 0; i < nh; i++) {
        char v[8][32];
        label_values(first + i, v);
        mv_label l[8];
        for (int k = 0; k < 8; k++)
            l[k] = (mv_label){keys[k], v[k]};
        mv_histogram *h;
        if (mv_histogram_register(s->w, "bench_latency_seconds", "Benchmark latency.", "seconds", l,
                                  8, bounds, NBOUNDS, &h) != MV_OK)
            return -1;
        for (int k = 0; k < 40; k++) {
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            mv_histogram_observe(h, exp2((double)(r % 1000) / 6400.0 - 6.3));
        }
    }
    s->map = mmap(NULL, size, PROT_READ, MAP_SHARED, s->fd, 0);
    if (s->map == MAP_FAILED)
        return -1;
    mv_seg_error err;
    if (mv_seg_catalog_parse(s->map, size, size, &s->cat, &err) != MV_SEG_OK) {
        fprintf(stderr, "promwire_bench: catalog: %s\n", err.detail);
        return -1;
    }
    return 0;
}

static void bench_expo(unsigned n, int runs)
{
    /* 90 % gauges in 2 segments, 10 % histograms in 4 (libmicroview's registration check is
     * quadratic in a segment's metrics). */
    unsigned nh = n / 10, ng = n - nh, nseg = 6;
    mseg segs[6];
    mv_coll_seg_view views[6];
    const mv_coll_seg_view *vp[6];
    char ids[6][16];
    for (unsigned s = 0; s < nseg; s++) {
        int rc = s < 2 ? gauge_seg(&segs[s], s * (ng / 2), ng / 2, 64u << 20)
                       : hist_seg(&segs[s], ng + (s - 2) * (nh / 4), nh / 4, 16u << 20);
        if (rc != 0) {
            fprintf(stderr, "promwire_bench: cannot build the segments\n");
            return;
        }
        snprintf(ids[s], sizeof ids[s], "bench-%u", s);
        views[s] = (mv_coll_seg_view){.id = ids[s],
                                      .state = MV_COLL_OK,
                                      .cat = segs[s].cat,
                                      .cat_serial = s + 1,
                                      .hot = segs[s].map,
                                      .transport = "shm"};
        vp[s] = &views[s];
    }
    mv_coll_stats cs = {0};
    mv_export_stats st = {0};
    mv_expo *e = mv_expo_create(MV_EXPO_TEXT, 1ull << 31);
    mv_export_cache *cache = mv_export_cache_create();
    static const struct {
        const char *name;
        mv_expo_format f;
        int cached;
    } modes[] = {{"text_cached", MV_EXPO_TEXT, 1},
                 {"text_uncached", MV_EXPO_TEXT, 0},
                 {"openmetrics_cached", MV_EXPO_OPENMETRICS, 1},
                 {"protobuf_native", MV_EXPO_PROTOBUF, 0},
                 {"protobuf_native_cached", MV_EXPO_PROTOBUF, 1}};
    double ns_text = 0;
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
        double secs[16];
        size_t len = 0;
        for (int r = -1; r < runs; r++) { /* r = -1: warm-up (buffer, cache plan) */
            mv_expo_reset(e, modes[m].f);
            uint64_t t0 = cpu_ns();
            if (modes[m].cached)
                mv_export_render_views_cached(cache, e, vp, nseg, &cs, NULL, &st);
            else
                mv_export_render_views_sel(e, vp, nseg, &cs, NULL, &st);
            if (r >= 0)
                secs[r] = (double)(cpu_ns() - t0) / 1e9;
            mv_expo_data(e, &len);
        }
        double med = bench_median(secs, (size_t)runs);
        if (m == 0)
            ns_text = med * 1e9 / n;
        mv_export_cache_stats cst;
        mv_export_cache_get_stats(cache, &cst);
        printf("bench=promwire_expo mode=%s series=%u histograms=%u seconds=%.4f "
               "ns_per_series=%.0f bytes=%zu bytes_per_series=%.1f ratio_to_text_cached=%.2f "
               "cache_bytes_all_plans=%zu runs=%d\n",
               modes[m].name, n, nh, med, med * 1e9 / n, len, (double)len / n,
               med * 1e9 / n / ns_text, cst.bytes, runs);
    }
    mv_export_cache_destroy(cache);
    mv_expo_destroy(e);
    for (unsigned s = 0; s < nseg; s++) {
        mv_seg_catalog_free(segs[s].cat);
        if (segs[s].w) {
            munmap(segs[s].map, segs[s].size);
            mv_close(segs[s].w);
            close(segs[s].fd);
        } else {
            free(segs[s].map);
        }
    }
}

/* Remote write of n series per interval: label sets of 11 labels (__name__, 8 identity labels,
 * 2 external), encoded in batches of 2000 (protobuf + snappy), CPU per interval. */
static void bench_rw(unsigned n, int runs)
{
    const unsigned batch = 2000;
    mv_rw_label *lab = calloc((size_t)n * 11, sizeof *lab);
    char(*val)[8][32] = calloc(n, sizeof *val);
    mv_rw_series *ser = calloc(n, sizeof *ser);
    if (!lab || !val || !ser)
        return;
    for (unsigned i = 0; i < n; i++) {
        label_values(i, val[i]);
        mv_rw_label *l = &lab[(size_t)i * 11];
        /* sorted by name */
        l[0] = (mv_rw_label){"__name__", i % 2 ? "bench_queue_depth" : "bench_temp_celsius"};
        l[1] = (mv_rw_label){"app", val[i][5]};
        l[2] = (mv_rw_label){"cluster", "prod-eu-1"};
        l[3] = (mv_rw_label){"container", val[i][2]};
        l[4] = (mv_rw_label){"instance", val[i][7]};
        l[5] = (mv_rw_label){"namespace", val[i][0]};
        l[6] = (mv_rw_label){"node", val[i][3]};
        l[7] = (mv_rw_label){"pod", val[i][1]};
        l[8] = (mv_rw_label){"replica", "collector-a"};
        l[9] = (mv_rw_label){"version", val[i][6]};
        l[10] = (mv_rw_label){"zone", val[i][4]};
        ser[i] = (mv_rw_series){.labels = l,
                                .nlabels = 11,
                                .value = (double)(i % 1000) * 0.25,
                                .ts_ms = 1764300000000 + i % 7};
    }
    for (int version = 1; version <= 2; version++) {
        double secs[16];
        size_t bytes = 0, raw = 0;
        for (int r = 0; r < runs; r++) {
            bytes = raw = 0;
            uint64_t t0 = cpu_ns();
            for (unsigned o = 0; o < n; o += batch) {
                uint8_t *out;
                size_t len, rl;
                unsigned k = n - o < batch ? n - o : batch;
                if (mv_rw_encode(version, ser + o, k, 6, &out, &len, &rl) != 0)
                    return;
                bytes += len;
                raw += rl;
                free(out);
            }
            secs[r] = (double)(cpu_ns() - t0) / 1e9;
        }
        double med = bench_median(secs, (size_t)runs);
        printf("bench=promwire_rw_encode version=%d series=%u batch=%u cpu_seconds=%.4f "
               "core_share_at_1s=%.2f%% samples_per_core_second=%.0f bytes_per_sample=%.2f "
               "uncompressed_bytes_per_sample=%.1f runs=%d\n",
               version, n, batch, med, med * 100, n / med, (double)bytes / n, (double)raw / n,
               runs);
    }
    free(lab);
    free(val);
    free(ser);
}

/* Quantile error of native histograms per schema: a log-normal sample observed into pod
 * buckets on that schema's boundaries (2^(k 2^-s)), mapped to native buckets, and the p99 taken
 * the way histogram_quantile does (linear in the bucket holding the rank). */
static int cmpd(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void bench_schema_error(void)
{
    enum { N = 200000 };
    double *v = malloc(N * sizeof *v);
    if (!v)
        return;
    uint64_t r = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < N; i++) { /* Box-Muller: median 20 ms, sigma 0.5 */
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        double u1 = ((double)(r >> 11) + 0.5) / 9007199254740992.0;
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        double u2 = ((double)(r >> 11) + 0.5) / 9007199254740992.0;
        v[i] = 0.02 * exp(0.5 * sqrt(-2 * log(u1)) * cos(2 * M_PI * u2));
    }
    qsort(v, N, sizeof *v, cmpd);
    static const double qs[] = {0.5, 0.9, 0.99, 0.999};
    for (int s = 0; s <= 8; s++) {
        mv_expo_nh h = {0};
        mv_expo_nh_begin(&h, s);
        for (int i = 0; i < N; i++)
            mv_expo_nh_add(&h, v[i], 1);
        mv_expo_nh_finish(&h, 100000);
        double worst = 0;
        char detail[256];
        size_t o = 0;
        for (size_t qi = 0; qi < sizeof qs / sizeof qs[0]; qi++) {
            double rank = qs[qi] * N, cum = 0, est = NAN;
            int64_t c = 0;
            size_t d = 0;
            int32_t idx = 0;
            for (size_t sp = 0; sp < h.nspan[0] && isnan(est); sp++) {
                idx += h.span[0][sp].offset;
                for (uint32_t j = 0; j < h.span[0][sp].length; j++, d++, idx++) {
                    c += h.delta[0][d];
                    if (cum + (double)c >= rank && c > 0) {
                        double lo = mv_expo_nh_upper(idx - 1, s), hi = mv_expo_nh_upper(idx, s);
                        est = lo + (hi - lo) * (rank - cum) / (double)c;
                        break;
                    }
                    cum += (double)c;
                }
            }
            double exact = v[(size_t)(qs[qi] * (N - 1))];
            double err = fabs(est - exact) / exact;
            if (err > worst)
                worst = err;
            o += (size_t)snprintf(detail + o, sizeof detail - o, " p%g_error=%.3f%%", qs[qi] * 100,
                                  err * 100);
        }
        printf("bench=promwire_schema_error schema=%d growth=%.5f bound=%.3f%% max_error=%.3f%%%s "
               "buckets=%zu observations=%d\n",
               s, exp2(exp2(-s)), (exp2(exp2(-s)) - 1) * 100, worst * 100, detail, h.ndelta[0], N);
        mv_expo_nh_free(&h);
    }
    free(v);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    bench_schema_error();
    bench_rw(100000, quick ? 3 : 5);
    bench_expo(100000, quick ? 3 : 5);
    return 0;
}
