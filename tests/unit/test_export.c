/* Unit tests for mv_export: derived series fixtures in both formats, collisions, value lookup. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "microview.h"
#include "mv_export.h"
#include "mv_test.h"

#define FIXTURES "tests/data/export"

static char *g_dir;

/* One segment with every metric type, a hostile label value, an own label
 * clashing with an identity label, and a raw gauge whose name collides with a
 * derived one; a pipeline view with fixed window figures. */
typedef struct scene {
    mv_segment *seg;
    void *map;
    size_t size;
    mv_seg_catalog *cat;
    mv_pipe_view *pipe;
    mv_seg_label ids[3];
    mv_coll_seg_view view;
    mv_coll_stats stats;
} scene;

static void scene_open(scene *s)
{
    char path[256];
    snprintf(path, sizeof path, "%s/scene.seg", g_dir);
    s->size = 65536;
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    CU_ASSERT_FATAL(fd >= 0);
    CU_ASSERT_FATAL(ftruncate(fd, (off_t)s->size) == 0);
    CU_ASSERT_FATAL(mv_open(path, &s->seg) == MV_OK);
    s->map = mmap(NULL, s->size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    CU_ASSERT_FATAL(s->map != MAP_FAILED);

    mv_counter c1, c2;
    mv_gauge g, coll;
    mv_histogram *h;
    mv_label l200[] = {{"code", "200"}, {"service", "api"}};
    mv_label lbad[] = {{"code", "5\"0\\0\n"}};
    double bounds[] = {0.01, 0.1, 1};
    CU_ASSERT_FATAL(mv_counter_register(s->seg, "http_requests_total", "Requests \"served\".", NULL,
                                        l200, 2, &c1) == MV_OK);
    CU_ASSERT_FATAL(mv_counter_register(s->seg, "http_requests_total", "Requests \"served\".", NULL,
                                        lbad, 1, &c2) == MV_OK);
    CU_ASSERT_FATAL(mv_gauge_register(s->seg, "queue_depth", "Jobs waiting.", NULL, NULL, 0, &g) ==
                    MV_OK);
    CU_ASSERT_FATAL(mv_histogram_register(s->seg, "lat_seconds", "Latency.", "seconds", NULL, 0,
                                          bounds, 3, &h) == MV_OK);
    CU_ASSERT_FATAL(mv_gauge_register(s->seg, "http_requests_rate", "A pod's own rate gauge.", NULL,
                                      NULL, 0, &coll) == MV_OK);
    mv_counter_add(c1, 1027);
    mv_counter_add(c2, 3);
    mv_gauge_set(g, 7);
    mv_gauge_set(coll, 1.5);
    mv_histogram_observe(h, 0.005);
    mv_histogram_observe(h, 0.05);
    mv_histogram_observe(h, 2);
    mv_seg_error err;
    CU_ASSERT_FATAL(mv_seg_catalog_parse(s->map, s->size, s->size, &s->cat, &err) == MV_SEG_OK);
    size_t n = mv_seg_catalog_count(s->cat);
    CU_ASSERT_FATAL(n == 5);

    s->pipe = calloc(1, sizeof *s->pipe + n * sizeof(mv_pipe_out));
    s->pipe->cat = s->cat;
    s->pipe->n = n;
    s->pipe->window_start_ns = 1700000000000000000ull;
    s->pipe->window_end_ns = 1700000015000000000ull;
    s->pipe->anomaly_score = 0.125;
    s->pipe->mem_bytes = 6144;
    s->pipe->collapses = 2;
    s->pipe->window_reads = 15;
    s->pipe->window_max_interval_ns = 1000000000ull;
    mv_pipe_out *o = s->pipe->m;
    o[0] = (mv_pipe_out){.type = MV_SEG_COUNTER,
                         .has_window = 1,
                         .changes = 2,
                         .resets = 1,
                         .rate = 12.5,
                         .rate_max = 250,
                         .rate_short = 20};
    o[1] = (mv_pipe_out){
        .type = MV_SEG_COUNTER, .has_window = 1, .rate = 0.2, .rate_max = 1000, .rate_short = NAN};
    o[2] = (mv_pipe_out){.type = MV_SEG_GAUGE,
                         .has_window = 1,
                         .changes = 1,
                         .q = {6, 7, 9.5, 10},
                         .sum = 700,
                         .count = 100,
                         .min = 3,
                         .max = 10,
                         .mean = 7,
                         .last = 7};
    o[3] = (mv_pipe_out){.type = MV_SEG_HISTOGRAM,
                         .has_window = 1,
                         .q = {0.05, 0.5, 1, 1},
                         .sum = 2.055,
                         .count = 3};
    o[4] = (mv_pipe_out){.type = MV_SEG_GAUGE, .has_window = 0};

    s->ids[0] = (mv_seg_label){"namespace", "shop"};
    s->ids[1] = (mv_seg_label){"pod", "web-7d4b9"};
    s->ids[2] = (mv_seg_label){"service", "web"};
    memset(&s->view, 0, sizeof s->view);
    s->view.id = "seg-1";
    s->view.labels = s->ids;
    s->view.nlabels = 3;
    s->view.state = MV_COLL_OK;
    s->view.cat = s->cat;
    s->view.hot = s->map;
    s->view.reads = 4242;
    s->view.read_interval_ns = 2000000;
    s->view.pipe = s->pipe;
    s->view.transport = "shm";
    memset(&s->stats, 0, sizeof s->stats);
    s->stats.ticks = 99;
    s->stats.last_tick_seconds = 0.000125;
}

static void scene_close(scene *s)
{
    free(s->pipe);
    mv_seg_catalog_free(s->cat);
    munmap(s->map, s->size);
    mv_close(s->seg);
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b) {
        b[n] = '\0';
        *len = (size_t)n;
    }
    return b;
}

/* Compares a rendering with its fixture; MV_UPDATE_FIXTURES=1 rewrites it. */
static void check_fixture(const char *name, const char *got, size_t len)
{
    char path[256];
    snprintf(path, sizeof path, FIXTURES "/%s", name);
    if (getenv("MV_UPDATE_FIXTURES")) {
        FILE *f = fopen(path, "wb");
        CU_ASSERT_FATAL(f != NULL);
        fwrite(got, 1, len, f);
        fclose(f);
    }
    size_t wlen = 0;
    char *want = slurp(path, &wlen);
    CU_ASSERT_FATAL(want != NULL);
    int same = wlen == len && memcmp(want, got, len) == 0;
    if (!same)
        printf("\n  %s differs; got:\n%.*s\n", path, (int)len, got);
    CU_ASSERT(same);
    free(want);
}

/* Renderings of the scene with a choice of derived series: every series
 * (NULL), the collector's default, and per-type / per-family specs. */
static const struct {
    const char *prom, *om;
    int all;              /* NULL selection: every derived series */
    const char *specs[6]; /* applied to the default selection */
    uint64_t collisions;  /* derived series dropped for a name collision */
} fixture_cases[] = {
    {"derived.prom", "derived.om", 1, {NULL}, 2},
    {"derived_default.prom", "derived_default.om", 0, {NULL}, 2},
    {"derived_custom.prom",
     "derived_custom.om",
     0,
     {"gauge=none", "queue_depth=p99,last,changes", "counter=rate_max,resets",
      "lat_seconds=quantiles", "http_requests_total=none", NULL},
     0},
};

static void test_fixtures(void)
{
    scene s;
    scene_open(&s);
    const mv_coll_seg_view *v[1] = {&s.view};
    for (size_t c = 0; c < sizeof fixture_cases / sizeof fixture_cases[0]; c++) {
        mv_export_sel *sel = NULL;
        char err[256];
        if (!fixture_cases[c].all) {
            sel = mv_export_sel_create();
            CU_ASSERT_FATAL(sel != NULL);
            for (int k = 0; fixture_cases[c].specs[k]; k++)
                CU_ASSERT_EQUAL(mv_export_sel_add(sel, fixture_cases[c].specs[k], err, sizeof err),
                                0);
        }
        for (int f = 0; f < 2; f++) {
            mv_expo *e = mv_expo_create((mv_expo_format)f, 0);
            mv_export_stats st = {0};
            CU_ASSERT_EQUAL_FATAL(mv_export_render_views_sel(e, v, 1, &s.stats, sel, &st), 0);
            /* The derived http_requests_rate collides with the pod's gauge. */
            CU_ASSERT_EQUAL(st.dropped_collision, fixture_cases[c].collisions);
            size_t len;
            const char *d = mv_expo_data(e, &len);
            check_fixture(f ? fixture_cases[c].om : fixture_cases[c].prom, d, len);
            mv_expo_destroy(e);
        }
        mv_export_sel_destroy(sel);
    }
    scene_close(&s);
}

/* Selection specs: masks by type and family, later specs win, errors say why. */
static void test_selection(void)
{
    mv_export_sel *sel = mv_export_sel_create();
    char err[256];
    CU_ASSERT_FATAL(sel != NULL);
    CU_ASSERT_EQUAL(mv_export_sel_mask(NULL, MV_SEG_GAUGE, "x"), MV_DERIVED_ALL);
    CU_ASSERT_EQUAL(mv_export_sel_mask(sel, MV_SEG_GAUGE, "x"), MV_EXPORT_DEFAULT_GAUGE);
    CU_ASSERT_EQUAL(mv_export_sel_mask(sel, MV_SEG_COUNTER, "x"), MV_EXPORT_DEFAULT_COUNTER);
    CU_ASSERT_EQUAL(mv_export_sel_add(sel, "gauge=quantiles,min", err, sizeof err), 0);
    CU_ASSERT_EQUAL(mv_export_sel_mask(sel, MV_SEG_GAUGE, "x"),
                    MV_DERIVED_P50 | MV_DERIVED_P90 | MV_DERIVED_P99 | MV_DERIVED_P999 |
                        MV_DERIVED_MIN);
    CU_ASSERT_EQUAL(mv_export_sel_add(sel, "zz_depth=all", err, sizeof err), 0);
    CU_ASSERT_EQUAL(mv_export_sel_add(sel, "aa_depth=max", err, sizeof err), 0);
    CU_ASSERT_EQUAL(mv_export_sel_add(sel, "zz_depth=last", err, sizeof err), 0);
    CU_ASSERT_EQUAL(mv_export_sel_mask(sel, MV_SEG_GAUGE, "zz_depth"), MV_DERIVED_LAST);
    CU_ASSERT_EQUAL(mv_export_sel_mask(sel, MV_SEG_GAUGE, "aa_depth"), MV_DERIVED_MAX);
    CU_ASSERT_EQUAL(mv_export_sel_mask(sel, MV_SEG_HISTOGRAM, "mm"), MV_EXPORT_DEFAULT_HISTOGRAM);
    static const char *const bad[] = {
        "gauge", "=all", "gauge=p42", "gauge=", "9x=all", "a b=all", "gauge=max,,min"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        CU_ASSERT_EQUAL(mv_export_sel_add(sel, bad[i], err, sizeof err), -EINVAL);
        CU_ASSERT(err[0] != '\0');
    }
    mv_export_sel_destroy(sel);
}

/* A tiny cap: the self-metrics come first and the truncation is counted. */
static void test_truncation(void)
{
    scene s;
    scene_open(&s);
    const mv_coll_seg_view *v[1] = {&s.view};
    /* The cap: just past the self-metrics of a full render, so the pod's series are cut. */
    mv_expo *full = mv_expo_create(MV_EXPO_TEXT, 0);
    CU_ASSERT_EQUAL_FATAL(mv_export_render_views(full, v, 1, &s.stats, NULL), 0);
    size_t flen;
    const char *fd = mv_expo_data(full, &flen);
    const char *last = memmem(fd, flen, "microview_exposition_truncated_total 0\n", 39);
    CU_ASSERT_FATAL(last != NULL);
    size_t cap = (size_t)(last - fd) + 39 + 64;
    CU_ASSERT_FATAL(cap < flen);
    mv_expo_destroy(full);
    mv_expo *e = mv_expo_create(MV_EXPO_TEXT, cap);
    mv_export_stats st = {0};
    CU_ASSERT_EQUAL(mv_export_render_views(e, v, 1, &s.stats, &st), -ENOSPC);
    CU_ASSERT_EQUAL(st.truncated, 1);
    mv_expo_reset(e, MV_EXPO_TEXT);
    CU_ASSERT_EQUAL(mv_export_render_views(e, v, 1, &s.stats, &st), -ENOSPC);
    size_t len;
    const char *d = mv_expo_data(e, &len);
    CU_ASSERT(memmem(d, len, "microview_exposition_truncated_total 1\n", 39) != NULL);
    mv_expo_destroy(e);
    scene_close(&s);
}

static void test_segments_without_pipe(void)
{
    scene s;
    scene_open(&s);
    s.view.pipe = NULL;
    const mv_coll_seg_view *v[1] = {&s.view};
    mv_expo *e = mv_expo_create(MV_EXPO_TEXT, 0);
    mv_export_stats st = {0};
    CU_ASSERT_EQUAL(mv_export_render_views(e, v, 1, &s.stats, &st), 0);
    size_t len;
    const char *d = mv_expo_data(e, &len);
    CU_ASSERT(memmem(d, len, "_rate", 5) == NULL || memmem(d, len, "http_requests_rate{", 19));
    CU_ASSERT(memmem(d, len, "_window", 7) == NULL);
    CU_ASSERT(memmem(d, len, "microview_anomaly_score", 23) == NULL);
    CU_ASSERT_EQUAL(st.dropped_collision, 0);
    mv_expo_destroy(e);
    scene_close(&s);
}

/* microview_segment_fullness: the writer's own mv_segment_usage figure, read from the header of
 * the copy; not shown for a view without a copy. */
static void test_fullness(void)
{
    scene s;
    scene_open(&s);
    mv_usage u;
    CU_ASSERT_FATAL(mv_segment_usage(s.seg, &u) == MV_OK);
    CU_ASSERT_FATAL(u.fullness > 0 && u.fullness < 1);
    const mv_coll_seg_view *v[1] = {&s.view};
    for (int with_copy = 0; with_copy < 2; with_copy++) {
        s.view.hot_len = with_copy ? (uint32_t)s.size : 0;
        mv_expo *e = mv_expo_create(MV_EXPO_TEXT, 0);
        mv_export_stats st = {0};
        CU_ASSERT_EQUAL_FATAL(mv_export_render_views(e, v, 1, &s.stats, &st), 0);
        size_t len;
        const char *d = mv_expo_data(e, &len);
        static const char key[] =
            "\nmicroview_segment_fullness{namespace=\"shop\",pod=\"web-7d4b9\","
            "service=\"web\"} ";
        const char *at = memmem(d, len, key, sizeof key - 1);
        if (!with_copy) {
            CU_ASSERT_PTR_NULL(at);
        } else {
            CU_ASSERT_PTR_NOT_NULL_FATAL(at);
            double got = strtod(at + sizeof key - 1, NULL);
            CU_ASSERT_DOUBLE_EQUAL(got, u.fullness, 1e-9);
        }
        mv_expo_destroy(e);
    }
    scene_close(&s);
}

/* Occurrences of `needle` at the start of a line of d[0, len). */
static int count_lines(const char *d, size_t len, const char *needle)
{
    int n = 0;
    size_t nl = strlen(needle);
    for (size_t i = 0; i + nl <= len; i++)
        if ((i == 0 || d[i - 1] == '\n') && memcmp(d + i, needle, nl) == 0)
            n++;
    return n;
}

/* A Go service's client_golang counter `c` (stored `c`, type 4) and a Python service's
 * prometheus_client counter `c` (stored `c_total`) in one segment: both claim `c` and
 * `c_total` on the wire, so the second family is dropped, and its derived series with it:
 * never two `c_rate_short` series with the same labels. A deleted series is not shown. */
static void test_cross_language_collision(void)
{
    char path[256];
    snprintf(path, sizeof path, "%s/collide.seg", g_dir);
    size_t size = 16384;
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    CU_ASSERT_FATAL(fd >= 0 && ftruncate(fd, (off_t)size) == 0);
    mv_segment *seg;
    CU_ASSERT_FATAL(mv_open(path, &seg) == MV_OK);
    void *map = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    CU_ASSERT_FATAL(map != MAP_FAILED);
    mv_counter_f go, py;
    mv_counter gone;
    CU_ASSERT_FATAL(mv_counter_f_register(seg, "c", "Go.", NULL, NULL, 0, &go) == MV_OK);
    CU_ASSERT_FATAL(mv_counter_f_register(seg, "c_total", "Python.", NULL, NULL, 0, &py) == MV_OK);
    CU_ASSERT_FATAL(mv_counter_register(seg, "gone_total", NULL, NULL, NULL, 0, &gone) == MV_OK);
    for (int i = 0; i < 6; i++)
        mv_counter_f_add(go, 0.25);
    mv_counter_f_add(py, 2);
    CU_ASSERT_EQUAL(mv_delete(seg, "gone_total", NULL, 0), 1);
    mv_seg_catalog *cat;
    mv_seg_error err;
    CU_ASSERT_FATAL(mv_seg_catalog_parse(map, size, size, &cat, &err) == MV_SEG_OK);
    CU_ASSERT_FATAL(mv_seg_catalog_count(cat) == 2);
    mv_pipe_view *pipe = calloc(1, sizeof *pipe + 2 * sizeof(mv_pipe_out));
    CU_ASSERT_FATAL(pipe != NULL);
    pipe->cat = cat;
    pipe->n = 2;
    pipe->window_start_ns = 1700000000000000000ull;
    pipe->window_end_ns = 1700000015000000000ull;
    for (int i = 0; i < 2; i++)
        pipe->m[i] = (mv_pipe_out){
            .type = MV_SEG_COUNTER, .has_window = 1, .rate = 1, .rate_max = 2, .rate_short = 3};
    mv_seg_label ids[] = {{"pod", "mixed"}};
    mv_coll_seg_view view = {0};
    view.id = "seg-1";
    view.labels = ids;
    view.nlabels = 1;
    view.state = MV_COLL_OK;
    view.cat = cat;
    view.hot = map;
    view.pipe = pipe;
    view.transport = "shm";
    mv_coll_stats stats = {0};
    const mv_coll_seg_view *v[1] = {&view};
    for (int f = 0; f < 2; f++) {
        mv_expo *e = mv_expo_create(f ? MV_EXPO_OPENMETRICS : MV_EXPO_TEXT, 0);
        mv_export_stats st = {0};
        CU_ASSERT_EQUAL_FATAL(mv_export_render_views(e, v, 1, &stats, &st), 0);
        size_t len;
        const char *d = mv_expo_data(e, &len);
        CU_ASSERT_EQUAL(count_lines(d, len, "c_rate_short{"), 1);
        CU_ASSERT_EQUAL(count_lines(d, len, "c_rate{"), 1);
        CU_ASSERT_EQUAL(count_lines(d, len, "c_rate_max{"), 1);
        CU_ASSERT_EQUAL(count_lines(d, len, "c_resets_total{"), 1);
        CU_ASSERT_EQUAL(count_lines(d, len, "gone_total"), 0);
        /* The kept family is `c` (name order), with its fraction. */
        CU_ASSERT_EQUAL(
            count_lines(d, len, f ? "c_total{pod=\"mixed\"} 1.5" : "c{pod=\"mixed\"} 1.5"), 1);
        CU_ASSERT_EQUAL(count_lines(d, len, "# HELP c_total Python."), 0);
        /* The raw family and its five derived series (rates, resets, changes) are counted. */
        CU_ASSERT_EQUAL(st.dropped_collision, 6);
        mv_expo_destroy(e);
    }
    free(pipe);
    mv_seg_catalog_free(cat);
    munmap(map, size);
    mv_close(seg);
}

int main(void)
{
    g_dir = mv_test_tmpdir("test-export");
    if (!g_dir)
        return 1;
    static const mv_test tests[] = {
        {"derived fixtures (text and OpenMetrics)", test_fixtures},
        {"choice of derived series", test_selection},
        {"truncation is counted", test_truncation},
        {"segment fullness from the copy's header", test_fullness},
        {"no analytics: raw only", test_segments_without_pipe},
        {"a Go and a Python counter of one name: no duplicate derived series",
         test_cross_language_collision},
    };
    int fails = MV_TEST_RUN("export", tests);
    if (mv_test_rmrf(g_dir) != 0)
        fprintf(stderr, "could not remove %s\n", g_dir);
    free(g_dir);
    return fails;
}
