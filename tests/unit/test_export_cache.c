/* Unit tests for the exposition cache (mv_export_cache): every cached render is byte for byte
 * the uncached render of the same snapshot, through label, catalog, selection, analytics and
 * table changes, truncation, random changes, and scrapes in parallel with ticks. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "microview.h"
#include "mv_collect.h"
#include "mv_export.h"
#include "mv_test.h"
#include "prometheus/client/metrics.pb-c.h"

#define NFORMATS 3 /* text, OpenMetrics, protobuf: each has its plan */

static char *g_dir;
static uint64_t g_serial; /* catalog serials of the views built here */

/* ---- Comparing cached and uncached renders -------------------------------------------------- */

/* Renders the views both ways in format f (cap 0 = default) and checks bytes, return code
 * and counts. Returns 1 when they agree; the cached body stays in *out (free()). */
static int same_render(mv_export_cache *c, const mv_coll_seg_view *const *v, size_t n,
                       const mv_coll_stats *cs, const mv_export_sel *sel, mv_expo_format f,
                       size_t cap, char **out)
{
    mv_expo *a = mv_expo_create(f, cap), *b = mv_expo_create(f, cap);
    mv_export_stats sa = {0}, sb = {0};
    int ra = mv_export_render_views_sel(a, v, n, cs, sel, &sa);
    int rb = mv_export_render_views_cached(c, b, v, n, cs, sel, &sb);
    size_t la, lb;
    const char *da = mv_expo_data(a, &la), *db = mv_expo_data(b, &lb);
    /* microview_segment_busy_seconds reads the clock: both renders show 0 for a segment
     * that is not busy, which is all these views are. */
    int same = ra == rb && la == lb && memcmp(da, db, la) == 0 && sa.series == sb.series &&
               sa.dropped_type == sb.dropped_type && sa.dropped_collision == sb.dropped_collision &&
               sa.renamed_labels == sb.renamed_labels && sa.dropped_invalid == sb.dropped_invalid &&
               sa.truncated == sb.truncated;
    if (!same) {
        size_t at = 0;
        while (at < la && at < lb && da[at] == db[at])
            at++;
        size_t from = at > 120 ? at - 120 : 0;
        printf("\n  cached render differs (format %d, cap %zu, rc %d/%d, len %zu/%zu, series "
               "%llu/%llu) at byte %zu:\n  uncached: %.*s\n  cached:   %.*s\n",
               (int)f, cap, ra, rb, la, lb, (unsigned long long)sa.series,
               (unsigned long long)sb.series, at, (int)(la - from < 240 ? la - from : 240),
               da + from, (int)(lb - from < 240 ? lb - from : 240), db + from);
    }
    if (out) {
        *out = malloc(lb + 1);
        memcpy(*out, db, lb);
        (*out)[lb] = '\0';
    }
    mv_expo_destroy(a);
    mv_expo_destroy(b);
    return same;
}

/* Every format (protobuf, OpenMetrics, text); returns the cached text-format body (free()). */
static char *check_same(mv_export_cache *c, const mv_coll_seg_view *const *v, size_t n,
                        const mv_coll_stats *cs, const mv_export_sel *sel, const char *what)
{
    char *text = NULL;
    for (int f = NFORMATS - 1; f >= 0; f--) {
        char *body = NULL;
        int ok = same_render(c, v, n, cs, sel, (mv_expo_format)f, 0, &body);
        if (!ok)
            printf("  (step: %s)\n", what);
        CU_ASSERT(ok);
        if (f == 0)
            text = body;
        else
            free(body);
    }
    return text;
}

/* ---- A segment of every metric type ------------------------------------------------------------
 */

typedef struct tseg {
    char path[256];
    mv_segment *seg;
    void *map;
    size_t size;
    mv_seg_catalog *cat;
    mv_pipe_view *pipe;
    mv_seg_label ids[3];
    char pod[32];
    mv_coll_seg_view view;
    mv_counter c1, c2;
    mv_gauge g, coll;
    mv_histogram *h;
    uint8_t omitted[64];
    uint64_t native_total; /* tseg_native: the native buckets' counts together */
} tseg;

/* Fills the analytics of every metric with figures derived from k. */
static void tseg_pipe(tseg *s, unsigned k)
{
    size_t n = mv_seg_catalog_count(s->cat);
    free(s->pipe);
    s->pipe = calloc(1, sizeof *s->pipe + n * sizeof(mv_pipe_out));
    s->pipe->cat = s->cat;
    s->pipe->n = n;
    s->pipe->window_start_ns = 1700000000000000000ull;
    s->pipe->window_end_ns = 1700000015000000000ull;
    s->pipe->anomaly_score = 0.125 * k;
    s->pipe->mem_bytes = 6144 + k;
    s->pipe->collapses = k;
    s->pipe->window_max_interval_ns = 1000000000ull + k;
    for (size_t j = 0; j < n; j++) {
        const mv_seg_metric *m = mv_seg_catalog_metric(s->cat, j);
        mv_pipe_out *o = &s->pipe->m[j];
        *o = (mv_pipe_out){.type = m->type,
                           .has_window = 1,
                           .changes = k + j,
                           .resets = k,
                           .rate = 12.5 + k,
                           .rate_max = 250.0 / (k + 3),
                           .rate_short = 20 + 0.1 * k,
                           .q = {6, 7 + k, 9.5, 1e-9 * k},
                           .sum = 700.25 * k,
                           .count = 100 + k,
                           .min = -3,
                           .max = 10.0 / 3,
                           .mean = 7 + k,
                           .last = 7e22};
    }
    s->view.pipe = s->pipe;
}

static void tseg_parse(tseg *s)
{
    mv_seg_error err;
    mv_seg_catalog_free(s->cat);
    s->cat = NULL;
    CU_ASSERT_FATAL(mv_seg_catalog_parse(s->map, s->size, s->size, &s->cat, &err) == MV_SEG_OK);
    s->view.cat = s->cat;
    s->view.cat_serial = ++g_serial;
    tseg_pipe(s, 1);
}

static void tseg_open(tseg *s, const char *name, const char *pod)
{
    memset(s, 0, sizeof *s);
    s->size = 1 << 16;
    CU_ASSERT_FATAL(mv_test_blank_file(g_dir, name, s->size, s->path, sizeof s->path) == 0);
    CU_ASSERT_FATAL(mv_open(s->path, &s->seg) == MV_OK);
    int fd = open(s->path, O_RDONLY);
    CU_ASSERT_FATAL(fd >= 0);
    s->map = mmap(NULL, s->size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    CU_ASSERT_FATAL(s->map != MAP_FAILED);
    mv_label l200[] = {{"code", "200"}, {"service", "api"}};
    mv_label lbad[] = {{"code", "5\"0\\0\n"}};
    double bounds[] = {0.01, 0.1, 1};
    CU_ASSERT_FATAL(mv_counter_register(s->seg, "http_requests_total", "Requests \"served\".", NULL,
                                        l200, 2, &s->c1) == MV_OK);
    CU_ASSERT_FATAL(mv_counter_register(s->seg, "http_requests_total", "Requests \"served\".", NULL,
                                        lbad, 1, &s->c2) == MV_OK);
    CU_ASSERT_FATAL(
        mv_gauge_register(s->seg, "queue_depth", "Jobs waiting.", NULL, NULL, 0, &s->g) == MV_OK);
    CU_ASSERT_FATAL(mv_histogram_register(s->seg, "lat_seconds", "Latency.", "seconds", NULL, 0,
                                          bounds, 3, &s->h) == MV_OK);
    CU_ASSERT_FATAL(mv_gauge_register(s->seg, "http_requests_rate", "A pod's own rate gauge.", NULL,
                                      NULL, 0, &s->coll) == MV_OK);
    mv_counter_add(s->c1, 1027);
    mv_counter_add(s->c2, 3);
    mv_gauge_set(s->g, 7);
    mv_gauge_set(s->coll, 1.5);
    mv_histogram_observe(s->h, 0.005);
    mv_histogram_observe(s->h, 2);
    snprintf(s->pod, sizeof s->pod, "%s", pod);
    s->ids[0] = (mv_seg_label){"namespace", "shop"};
    s->ids[1] = (mv_seg_label){"pod", s->pod};
    s->ids[2] = (mv_seg_label){"service", "web"};
    s->view.id = name;
    s->view.labels = s->ids;
    s->view.nlabels = 3;
    s->view.state = MV_COLL_OK;
    s->view.hot = s->map;
    s->view.reads = 4242;
    s->view.read_interval_ns = 2000000;
    s->view.transport = "shm";
    tseg_parse(s);
}

static void tseg_close(tseg *s)
{
    free(s->pipe);
    mv_seg_catalog_free(s->cat);
    munmap(s->map, s->size);
    mv_close(s->seg);
}

static uint64_t invalidations(mv_export_cache *c)
{
    mv_export_cache_stats st;
    mv_export_cache_get_stats(c, &st);
    return st.invalidations;
}

/* ---- Tests ------------------------------------------------------------------------------------
 */

/* Each change the cache must see: the cached body is the uncached one, and shows the change
 * (a cache that kept its plan would still show the old labels or miss the new series). */
static void test_invalidation(void)
{
    tseg a, b;
    tseg_open(&a, "seg-a", "web-7d4b9");
    tseg_open(&b, "seg-b", "db-0");
    const mv_coll_seg_view *v[2] = {&a.view, &b.view};
    mv_coll_stats cs = {.ticks = 99, .last_tick_seconds = 0.000125};
    mv_export_cache *c = mv_export_cache_create();
    CU_ASSERT_FATAL(c != NULL);
    mv_export_sel *sel = mv_export_sel_create();

    free(check_same(c, v, 1, &cs, NULL, "first render"));
    char *t = check_same(c, v, 1, &cs, NULL, "second render");
    CU_ASSERT(strstr(t, "pod=\"web-7d4b9\"") != NULL);
    free(t);
    mv_export_cache_stats st;
    mv_export_cache_get_stats(c, &st);
    CU_ASSERT_EQUAL(st.builds, NFORMATS); /* one plan per format */
    CU_ASSERT(st.hits >= 2);
    CU_ASSERT(st.bytes > 0);

    /* New values only: the plans stay. */
    uint64_t inv = invalidations(c);
    mv_counter_add(a.c1, 5);
    mv_gauge_set(a.g, -0.1);
    mv_histogram_observe(a.h, 0.05);
    tseg_pipe(&a, 7);
    t = check_same(c, v, 1, &cs, NULL, "values");
    CU_ASSERT(strstr(t, "http_requests_total{namespace=\"shop\",pod=\"web-7d4b9\",service=\"web\","
                        "code=\"200\",exported_service=\"api\"} 1032\n") != NULL);
    free(t);
    CU_ASSERT_EQUAL(invalidations(c), inv);

    /* An identity label changes (an agent's label update: the same id, new labels). */
    snprintf(a.pod, sizeof a.pod, "web-new");
    t = check_same(c, v, 1, &cs, NULL, "identity label value");
    CU_ASSERT(strstr(t, "pod=\"web-new\"") != NULL);
    CU_ASSERT(strstr(t, "web-7d4b9") == NULL);
    free(t);
    a.ids[2] = (mv_seg_label){"team", "blue"};
    t = check_same(c, v, 1, &cs, NULL, "identity label key");
    CU_ASSERT(strstr(t, "team=\"blue\"") != NULL);
    CU_ASSERT(strstr(t, "exported_service") == NULL);
    free(t);
    a.view.nlabels = 2;
    t = check_same(c, v, 1, &cs, NULL, "identity label removed");
    CU_ASSERT(strstr(t, "team=") == NULL);
    free(t);
    a.view.nlabels = 3;
    a.ids[2] = (mv_seg_label){"service", "web"};

    /* The catalog grows (a metric registered): a new catalog, a new serial. */
    mv_gauge ng;
    mv_label nl[] = {{"shard", "7"}};
    CU_ASSERT_FATAL(mv_gauge_register(a.seg, "new_gauge", "Appended.", NULL, nl, 1, &ng) == MV_OK);
    mv_gauge_set(ng, 42);
    tseg_parse(&a);
    t = check_same(c, v, 1, &cs, NULL, "catalog append");
    CU_ASSERT(strstr(t, "new_gauge{namespace=\"shop\",pod=\"web-new\",service=\"web\","
                        "shard=\"7\"} 42\n") != NULL);
    free(t);
    /* A catalog read again with the same records is still another catalog. */
    inv = invalidations(c);
    tseg_parse(&a);
    free(check_same(c, v, 1, &cs, NULL, "catalog re-read"));
    CU_ASSERT_EQUAL(invalidations(c), inv + 1);

    /* The --derived selection. */
    free(check_same(c, v, 1, &cs, sel, "default selection"));
    char err[128];
    CU_ASSERT_EQUAL(mv_export_sel_add(sel, "gauge=min,changes", err, sizeof err), 0);
    t = check_same(c, v, 1, &cs, sel, "selection changed");
    CU_ASSERT(strstr(t, "queue_depth_window_min{") != NULL);
    CU_ASSERT(strstr(t, "queue_depth_window_max{") == NULL);
    free(t);
    CU_ASSERT_EQUAL(mv_export_sel_add(sel, "queue_depth=none", err, sizeof err), 0);
    t = check_same(c, v, 1, &cs, sel, "family selection");
    CU_ASSERT(strstr(t, "queue_depth_window_min{") == NULL);
    free(t);

    /* What the analytics show: read per scrape, no new plan. */
    free(check_same(c, v, 1, &cs, sel, "selection, windows closed"));
    inv = invalidations(c);
    a.pipe->m[0].has_window = 0;
    a.pipe->m[1].rate_short = NAN;
    a.pipe->m[2].has_window = 0;
    a.pipe->m[3].has_window = 0;
    a.pipe->anomaly_score = NAN;
    a.pipe->window_end_ns = 0;
    free(check_same(c, v, 1, &cs, sel, "windows not closed, selection"));
    for (size_t j = 0; j < a.pipe->n; j++) {
        a.pipe->m[j].has_window = 0;
        a.pipe->m[j].rate_short = NAN;
    }
    t = check_same(c, v, 1, &cs, sel, "no window at all");
    CU_ASSERT(strstr(t, "_window") == NULL);
    free(t);
    tseg_pipe(&a, 3);
    free(check_same(c, v, 1, &cs, sel, "windows back"));
    CU_ASSERT_EQUAL(invalidations(c), inv);

    /* Analytics built for another catalog, or none. */
    a.pipe->cat = NULL;
    t = check_same(c, v, 1, &cs, NULL, "analytics of another catalog");
    CU_ASSERT(strstr(t, "_rate_short") == NULL);
    free(t);
    a.pipe->cat = a.cat;
    free(check_same(c, v, 1, &cs, NULL, "analytics match again"));

    /* A histogram omitted (no consistent copy lately), then back. */
    memset(a.omitted, 0, sizeof a.omitted);
    a.omitted[3] = 1;
    a.view.omitted = a.omitted;
    t = check_same(c, v, 1, &cs, NULL, "histogram omitted");
    CU_ASSERT(strstr(t, "lat_seconds_bucket") == NULL);
    free(t);
    a.omitted[3] = 0;
    free(check_same(c, v, 1, &cs, NULL, "histogram back"));
    a.view.omitted = NULL;

    /* A second segment, then one with the same identity labels (microview_segment="..."). */
    free(check_same(c, v, 2, &cs, NULL, "segment added"));
    snprintf(b.pod, sizeof b.pod, "web-new");
    t = check_same(c, v, 2, &cs, NULL, "equal identities");
    CU_ASSERT(strstr(t, "microview_segment=\"seg-b\"") != NULL);
    free(t);
    b.view.state = MV_COLL_QUARANTINED;
    t = check_same(c, v, 2, &cs, NULL, "segment quarantined");
    CU_ASSERT(strstr(t, "seg-b") == NULL || strstr(t, "microview_segment=\"seg-a\"") != NULL);
    free(t);
    b.view.state = MV_COLL_OK;
    v[0] = &b.view;
    v[1] = &a.view;
    free(check_same(c, v, 2, &cs, NULL, "segments in another order"));
    free(check_same(c, v, 1, &cs, NULL, "segment removed"));
    free(check_same(c, v, 0, &cs, NULL, "no segment"));

    /* Views without catalog serials are rendered without the cache. */
    b.view.cat_serial = 0;
    free(check_same(c, v, 1, &cs, NULL, "no serial"));
    mv_export_cache_get_stats(c, &st);
    CU_ASSERT(st.uncached >= 2);

    mv_export_sel_destroy(sel);
    mv_export_cache_destroy(c);
    tseg_close(&a);
    tseg_close(&b);
}

/* Every cap: the cached body is cut where the uncached one is, with the same counts. */
static void test_truncation(void)
{
    tseg a;
    tseg_open(&a, "seg-t", "web-1");
    const mv_coll_seg_view *v[1] = {&a.view};
    mv_coll_stats cs = {0};
    mv_export_cache *c = mv_export_cache_create();
    for (int f = 0; f < NFORMATS; f++) {
        mv_expo *e = mv_expo_create((mv_expo_format)f, 0);
        mv_export_render_views_sel(e, v, 1, &cs, NULL, NULL);
        size_t full;
        mv_expo_data(e, &full);
        mv_expo_destroy(e);
        int bad = 0;
        for (size_t cap = MV_EXPO_CAP_MIN; cap <= full + 8 && !bad; cap += f == 2 ? 1 : 7)
            bad = !same_render(c, v, 1, &cs, NULL, (mv_expo_format)f, cap, NULL);
        CU_ASSERT(!bad);
    }
    mv_export_cache_destroy(c);
    tseg_close(&a);
}

/* A plan past the limit is given up and its memory released; scrapes render uncached (the
 * same bytes) without building it again until the table changes. */
static void test_limit(void)
{
    tseg a, b;
    tseg_open(&a, "seg-l1", "web-1");
    tseg_open(&b, "seg-l2", "web-2");
    const mv_coll_seg_view *v[2] = {&a.view, &b.view};
    mv_coll_stats cs = {0};
    mv_export_cache *c = mv_export_cache_create();
    CU_ASSERT_FATAL(c != NULL);
    mv_export_cache_stats st;
    mv_export_cache_set_limit(c, 1);
    free(check_same(c, v, 2, &cs, NULL, "over the limit"));
    mv_export_cache_get_stats(c, &st);
    CU_ASSERT_EQUAL(st.over_limit, NFORMATS); /* one per format */
    CU_ASSERT_EQUAL(st.builds, 0);
    CU_ASSERT_EQUAL(st.uncached, NFORMATS);
    CU_ASSERT_EQUAL(st.bytes, 0);
    CU_ASSERT(st.last_refused_bytes > 1);
    free(check_same(c, v, 2, &cs, NULL, "over the limit, again"));
    mv_export_cache_get_stats(c, &st);
    CU_ASSERT_EQUAL(st.over_limit, NFORMATS); /* not built again for the same table */
    CU_ASSERT_EQUAL(st.uncached, 2 * NFORMATS);
    free(check_same(c, v, 1, &cs, NULL, "a changed table"));
    mv_export_cache_get_stats(c, &st);
    CU_ASSERT_EQUAL(st.over_limit, 2 * NFORMATS); /* tried again once */
    /* A limit both plans fit in: cached again. */
    mv_export_cache_set_limit(c, 0);
    free(check_same(c, v, 2, &cs, NULL, "no limit"));
    mv_export_cache_get_stats(c, &st);
    size_t both = st.bytes;
    CU_ASSERT_EQUAL(st.builds, NFORMATS);
    CU_ASSERT(both > 0);
    mv_export_cache_destroy(c);
    c = mv_export_cache_create();
    mv_export_cache_set_limit(c, both);
    free(check_same(c, v, 2, &cs, NULL, "at the limit"));
    free(check_same(c, v, 2, &cs, NULL, "at the limit, warm"));
    mv_export_cache_get_stats(c, &st);
    CU_ASSERT_EQUAL(st.builds, NFORMATS);
    CU_ASSERT_EQUAL(st.over_limit, 0);
    CU_ASSERT(st.hits >= 2);
    CU_ASSERT(st.bytes <= both);
    mv_export_cache_destroy(c);
    tseg_close(&a);
    tseg_close(&b);
}

/* Random changes between scrapes, each render checked against the uncached one. */
/* ---- Visits through the cache (mv_export_visit_views_cached) -------------------------------- */

/* A visit written out: per sample shown, its family, name parts, value and time, one line each. */
typedef struct vrec {
    char *buf;
    size_t len, cap;
    const char *family; /* plain visits: the current family */
    char **desc;        /* planned visits: the description of each series number */
    size_t ndesc, cap_desc;
    unsigned begins;
} vrec;

static void vrec_put(vrec *r, const char *s)
{
    size_t n = strlen(s);
    if (r->len + n + 1 > r->cap) {
        r->cap = (r->len + n + 1) * 2;
        r->buf = realloc(r->buf, r->cap);
    }
    memcpy(r->buf + r->len, s, n + 1);
    r->len += n;
}

static void describe_into(char *o, size_t osz, const char *family, const char *suffix,
                          const mv_expo_label *a, size_t na, const mv_expo_label *b, size_t nb,
                          const char *xname, double xval)
{
    int k = snprintf(o, osz, "%s%s{", family, suffix ? suffix : "");
    for (size_t i = 0; i < na + nb && k > 0 && (size_t)k < osz; i++) {
        const mv_expo_label *l = i < na ? &a[i] : &b[i - na];
        k += snprintf(o + k, osz - (size_t)k, "%s=%s,", l->name, l->value ? l->value : "");
    }
    if (xname && k > 0 && (size_t)k < osz)
        k += snprintf(o + k, osz - (size_t)k, "%s=%.17g,", xname, xval);
    if (k > 0 && (size_t)k < osz)
        snprintf(o + k, osz - (size_t)k, "}");
}

static void vrec_value(vrec *r, const char *desc, double v, uint64_t u, int is_u, int64_t ts)
{
    char line[1400];
    if (is_u)
        snprintf(line, sizeof line, "%s %llu %lld\n", desc, (unsigned long long)u, (long long)ts);
    else
        snprintf(line, sizeof line, "%s %.17g %lld\n", desc, v, (long long)ts);
    vrec_put(r, line);
}

static int pv_family(void *arg, const char *name, mv_expo_type t, const char *help,
                     const char *unit)
{
    (void)t;
    (void)help;
    (void)unit;
    ((vrec *)arg)->family = name;
    return 0;
}

static int pv_sample(void *arg, const char *segment_id, const char *suffix, const mv_expo_label *a,
                     size_t na, const mv_expo_label *b, size_t nb, const char *xname, double xval,
                     double v, uint64_t u, int is_u, int64_t ts_ms)
{
    (void)segment_id;
    vrec *r = arg;
    char d[1200];
    describe_into(d, sizeof d, r->family, suffix, a, na, b, nb, xname, xval);
    vrec_value(r, d, v, u, is_u, ts_ms);
    return 0;
}

static int cv_begin(void *arg)
{
    vrec *r = arg;
    for (size_t i = 0; i < r->ndesc; i++)
        free(r->desc[i]);
    r->ndesc = 0;
    r->begins++;
    return 0;
}

static int cv_describe(void *arg, uint32_t series, const char *family, mv_expo_type t,
                       const char *suffix, const mv_expo_label *a, size_t na,
                       const mv_expo_label *b, size_t nb, const char *xname, double xval)
{
    (void)t;
    vrec *r = arg;
    if (series != r->ndesc)
        return -EINVAL; /* numbered 0, 1, ... */
    if (r->ndesc == r->cap_desc) {
        r->cap_desc = r->cap_desc ? 2 * r->cap_desc : 64;
        r->desc = realloc(r->desc, r->cap_desc * sizeof *r->desc);
    }
    char d[1200];
    describe_into(d, sizeof d, family, suffix, a, na, b, nb, xname, xval);
    r->desc[r->ndesc++] = strdup(d);
    return 0;
}

static int cv_value(void *arg, uint32_t series, double v, uint64_t u, int is_u, int64_t ts_ms)
{
    vrec *r = arg;
    if (series >= r->ndesc)
        return -EINVAL;
    vrec_value(r, r->desc[series], v, u, is_u, ts_ms);
    return 0;
}

/* Visits the views plainly and through the cache: the same samples, values and times, in the
 * same order. Returns 1 when they agree. */
static int same_visit(mv_export_cache *c, vrec *planned, const mv_coll_seg_view *const *v, size_t n,
                      const mv_export_sel *sel)
{
    vrec plain = {0};
    mv_export_visitor pv = {.family = pv_family, .sample = pv_sample, .arg = &plain};
    mv_export_plan_visitor cv = {
        .begin = cv_begin, .describe = cv_describe, .value = cv_value, .arg = planned};
    vrec_put(&plain, "");
    planned->len = 0;
    vrec_put(planned, "");
    int ra = mv_export_visit_views(v, n, sel, &pv);
    int rb = mv_export_visit_views_cached(c, v, n, sel, &cv);
    int same = ra == 0 && rb == 0 && strcmp(plain.buf, planned->buf) == 0;
    if (!same)
        printf("\n  planned visit differs (rc %d/%d):\n--- plain\n%s--- planned\n%s", ra, rb,
               plain.buf, planned->buf);
    free(plain.buf);
    return same;
}

static void vrec_free(vrec *r)
{
    cv_begin(r);
    free(r->desc);
    free(r->buf);
}

static void test_random_changes(void)
{
    tseg s[3];
    static const char *const names[3] = {"r-0", "r-1", "r-2"};
    for (int i = 0; i < 3; i++)
        tseg_open(&s[i], names[i], i == 2 ? "pod-0" : "pod-1");
    const mv_coll_seg_view *v[3] = {&s[0].view, &s[1].view, &s[2].view};
    mv_coll_stats cs = {0};
    mv_export_sel *sels[3] = {NULL, mv_export_sel_create(), mv_export_sel_create()};
    char err[128];
    mv_export_sel_add(sels[2], "counter=all", err, sizeof err);
    mv_export_sel_add(sels[2], "lat_seconds=quantiles", err, sizeof err);
    mv_export_cache *c = mv_export_cache_create(), *vc = mv_export_cache_create();
    vrec planned = {0};
    uint64_t rng = 12345;
    size_t n = 3;
    int sel = 0, bad = 0, extra = 0;
    for (int it = 0; it < 300 && !bad; it++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        unsigned r = (unsigned)(rng >> 33);
        tseg *t = &s[r % 3];
        switch ((r >> 4) % 12) {
        case 0:
            snprintf(t->pod, sizeof t->pod, "pod-%u", (r >> 8) % 3);
            break;
        case 1:
            n = 1 + (r >> 8) % 3;
            break;
        case 2:
            sel = (int)((r >> 8) % 3);
            break;
        case 3:
            t->pipe->m[(r >> 8) % t->pipe->n].has_window ^= 1;
            break;
        case 4:
            t->pipe->m[(r >> 8) % t->pipe->n].rate_short = (r & 256) ? NAN : 3.25;
            break;
        case 5:
            t->pipe->anomaly_score = (r & 256) ? NAN : 0.5;
            t->pipe->window_end_ns = (r & 512) ? 0 : 17;
            break;
        case 6:
            t->view.state = (r & 256) ? MV_COLL_OK : MV_COLL_PENDING;
            break;
        case 7:
            if (extra < 8) { /* the catalog grows: sometimes a clash with another family */
                char nm[32];
                mv_gauge g;
                snprintf(nm, sizeof nm, (r & 256) ? "extra_%d" : "queue_depth_window_max", extra++);
                mv_gauge_register(t->seg, nm, NULL, NULL, NULL, 0, &g);
                mv_gauge_set(g, extra);
                tseg_parse(t);
            }
            break;
        case 8:
            t->omitted[3] = (uint8_t)((r >> 8) & 1);
            t->view.omitted = (r & 512) ? t->omitted : NULL;
            break;
        case 9:
            tseg_pipe(t, (r >> 8) % 5);
            break;
        case 10:
            mv_gauge_set(t->g, (double)(r % 1000) / 7);
            mv_histogram_observe(t->h, (double)(r % 100) / 50);
            break;
        default:
            t->view.pipe = (r & 256) ? NULL : t->pipe;
            break;
        }
        for (int f = 0; f < NFORMATS && !bad; f++)
            bad = !same_render(c, v, n, &cs, sels[sel], (mv_expo_format)f, 0, NULL);
        if (!bad)
            bad = !same_visit(vc, &planned, v, n, sels[sel]);
        if (bad)
            printf("  (iteration %d)\n", it);
    }
    CU_ASSERT(!bad);
    /* An unchanged table is visited from the plan: no new description, values still read. */
    n = 3;
    for (int i = 0; i < 3; i++) {
        s[i].view.state = MV_COLL_OK;
        s[i].view.pipe = s[i].pipe;
    }
    CU_ASSERT(same_visit(vc, &planned, v, n, sels[sel]));
    unsigned begins = planned.begins;
    mv_export_cache_stats st0, st1;
    mv_export_cache_get_stats(vc, &st0);
    mv_gauge_set(s[0].g, 123.5);
    CU_ASSERT(same_visit(vc, &planned, v, n, sels[sel]));
    CU_ASSERT(same_visit(vc, &planned, v, n, sels[sel]));
    mv_export_cache_get_stats(vc, &st1);
    CU_ASSERT_EQUAL(planned.begins, begins);
    CU_ASSERT_EQUAL(st1.hits, st0.hits + 2);
    CU_ASSERT(strstr(planned.buf, " 123.5 ") != NULL);
    /* A new catalog: the plan is built again (begin, new numbers). */
    mv_gauge g;
    CU_ASSERT(mv_gauge_register(s[0].seg, "late_gauge", NULL, NULL, NULL, 0, &g) == MV_OK);
    tseg_parse(&s[0]);
    CU_ASSERT(same_visit(vc, &planned, v, n, sels[sel]));
    CU_ASSERT_EQUAL(planned.begins, begins + 1);
    vrec_free(&planned);
    mv_export_cache_destroy(vc);
    mv_export_cache_destroy(c);
    for (int i = 0; i < 3; i++) {
        mv_export_sel_destroy(sels[i]);
        tseg_close(&s[i]);
    }
}

/* ---- The protobuf plan ----------------------------------------------------------------------- */

/* Protobuf: values patched, histograms and summaries packed again at each scrape, a torn
 * histogram left out, native-histogram settings of the renderer followed, a catalog change
 * between scrapes; each render byte for byte the uncached one, and served from the plan. */
static void test_protobuf(void)
{
    tseg a, b;
    tseg_open(&a, "seg-pa", "web-1");
    tseg_open(&b, "seg-pb", "web-2");
    /* a's values are read from a private copy, which this test tears. */
    char *copy = malloc(a.size);
    CU_ASSERT_FATAL(copy != NULL);
    memcpy(copy, a.map, a.size);
    a.view.hot = copy;
    const mv_coll_seg_view *v[2] = {&a.view, &b.view};
    mv_coll_stats cs = {0};
    mv_export_cache *c = mv_export_cache_create();
    mv_export_cache_stats st;
    mv_export_sel *sel = mv_export_sel_create();
    char err[128];
    CU_ASSERT_FATAL(mv_export_sel_add(sel, "lat_seconds=quantiles", err, sizeof err) == 0);
    const mv_export_sel *sels[2] = {NULL, sel};
    for (int k = 0; k < 2; k++) {
        CU_ASSERT(same_render(c, v, 2, &cs, sels[k], MV_EXPO_PROTOBUF, 0, NULL));
        CU_ASSERT(same_render(c, v, 2, &cs, sels[k], MV_EXPO_PROTOBUF, 0, NULL));
        /* Values change (a histogram's bucket counts grow past one varint byte). */
        for (int i = 0; i < 300; i++)
            mv_histogram_observe(b.h, 0.05 * (i % 30));
        mv_gauge_set(b.g, -1e300);
        mv_counter_add(b.c1, 1ull << 40);
        tseg_pipe(&b, 4);
        b.pipe->m[0].rate = NAN;
        CU_ASSERT(same_render(c, v, 2, &cs, sels[k], MV_EXPO_PROTOBUF, 0, NULL));
    }
    mv_export_cache_get_stats(c, &st);
    CU_ASSERT(st.hits >= 4);
    CU_ASSERT_EQUAL(st.uncached, 0);

    /* A torn histogram copy: bucket counts that do not add up to the count. */
    const mv_seg_metric *m = mv_seg_catalog_metric(a.cat, 3);
    CU_ASSERT_FATAL(m->type == MV_SEG_HISTOGRAM);
    const mv_seg_header *h = (const mv_seg_header *)(const void *)copy;
    uint64_t *w = (uint64_t *)(void *)(copy + h->values_offset + m->value_offset);
    w[0] += 5;
    mv_expo *e = mv_expo_create(MV_EXPO_PROTOBUF, 0);
    mv_export_render_views_cached(c, e, v, 2, &cs, NULL, NULL);
    size_t torn_len, full_len;
    mv_expo_data(e, &torn_len);
    CU_ASSERT(same_render(c, v, 2, &cs, NULL, MV_EXPO_PROTOBUF, 0, NULL));
    w[0] -= 5;
    mv_expo_reset(e, MV_EXPO_PROTOBUF);
    mv_export_render_views_cached(c, e, v, 2, &cs, NULL, NULL);
    mv_expo_data(e, &full_len);
    CU_ASSERT(torn_len < full_len); /* the torn series was left out */

    /* The renderer's native-histogram settings: schema, bucket limit, classic only. */
    static const int32_t schemas[] = {0, -4, 8, MV_EXPO_NH_OFF};
    for (size_t i = 0; i < sizeof schemas / sizeof schemas[0]; i++) {
        mv_expo *x = mv_expo_create(MV_EXPO_PROTOBUF, 0), *y = mv_expo_create(MV_EXPO_PROTOBUF, 0);
        mv_expo_set_native(x, schemas[i], 1 + (uint32_t)i);
        mv_expo_set_native(y, schemas[i], 1 + (uint32_t)i);
        mv_export_render_views_sel(x, v, 2, &cs, NULL, NULL);
        mv_export_render_views_cached(c, y, v, 2, &cs, NULL, NULL);
        size_t lx, ly;
        const char *dx = mv_expo_data(x, &lx), *dy = mv_expo_data(y, &ly);
        CU_ASSERT(lx == ly && memcmp(dx, dy, lx) == 0);
        mv_expo_destroy(x);
        mv_expo_destroy(y);
    }

    /* A catalog change between scrapes (a new family, a new series of an existing one). */
    uint64_t builds;
    mv_export_cache_get_stats(c, &st);
    builds = st.builds;
    mv_gauge g2;
    mv_label lq = {"queue", "slow"};
    CU_ASSERT_FATAL(mv_gauge_register(b.seg, "queue_depth", "Jobs waiting.", NULL, &lq, 1, &g2) ==
                    MV_OK);
    mv_gauge_set(g2, 12);
    tseg_parse(&b);
    CU_ASSERT(same_render(c, v, 2, &cs, NULL, MV_EXPO_PROTOBUF, 0, NULL));
    CU_ASSERT(same_render(c, v, 2, &cs, NULL, MV_EXPO_PROTOBUF, 0, NULL));
    mv_export_cache_get_stats(c, &st);
    CU_ASSERT_EQUAL(st.builds, builds + 1);

    mv_expo_destroy(e);
    mv_export_cache_destroy(c);
    mv_export_sel_destroy(sel);
    a.view.hot = a.map;
    free(copy);
    tseg_close(&a);
    tseg_close(&b);
}

/* The analytics of tseg_pipe(s, k) plus native histograms for its gauges (queue_depth with
 * `nb` buckets, http_requests_rate with none: its cond does not hold) as a pipeline with
 * native_schema publishes them. */
static void tseg_native(tseg *s, unsigned k, size_t nb)
{
    tseg_pipe(s, k);
    size_t n = s->pipe->n;
    mv_pipe_view *p =
        calloc(1, sizeof *p + n * sizeof(mv_pipe_out) + (nb + 1) * sizeof(mv_sketch_nbucket));
    CU_ASSERT_FATAL(p != NULL);
    memcpy(p, s->pipe, sizeof *p + n * sizeof(mv_pipe_out));
    free(s->pipe);
    s->pipe = p;
    mv_sketch_nbucket *nat = (mv_sketch_nbucket *)(void *)(p->m + n);
    p->native_on = 1;
    p->native = nat;
    p->nnative = nb + 1;
    uint64_t total = k;
    nat[0] = (mv_sketch_nbucket){.index = 4, .negative = (uint32_t)nb, .count = k};
    for (size_t i = 0; i < nb; i++) {
        /* both signs, counts past one varint byte */
        nat[1 + i] = (mv_sketch_nbucket){(int32_t)(i * 3) - 20, i < nb / 3, 1 + 97 * i * k};
        total += 1 + 97 * i * k;
    }
    p->m[2].native = 1; /* queue_depth: its count and sum are the summary's */
    s->native_total = total;
    s->view.pipe = p;
}

/* Decodes the delimited families of a protobuf body; returns how many (0 on a bad body). */
static size_t pb_decode(const uint8_t *d, size_t len, Io__Prometheus__Client__MetricFamily **out,
                        size_t max)
{
    size_t n = 0, o = 0;
    while (o < len && n < max) {
        uint64_t l = 0;
        int sh = 0;
        while (o < len && (d[o] & 0x80) && sh < 63) {
            l |= (uint64_t)(d[o++] & 0x7f) << sh;
            sh += 7;
        }
        if (o >= len)
            return 0;
        l |= (uint64_t)d[o++] << sh;
        if (l > len - o ||
            !(out[n] = io__prometheus__client__metric_family__unpack(NULL, l, d + o)))
            return 0;
        n++;
        o += l;
    }
    return o == len ? n : 0;
}

/* Gauge windows as native gauge histograms: the cached protobuf body is the uncached one as
 * the buckets come, change and go; the family decodes as GAUGE_HISTOGRAM with the buckets,
 * count and sum published; text and OpenMetrics are the same bytes with or without them; a
 * raw family of the same name wins over it. */
static void test_protobuf_gauge_histograms(void)
{
    tseg a, b;
    tseg_open(&a, "seg-na", "web-1");
    tseg_open(&b, "seg-nb", "web-2");
    const mv_coll_seg_view *v[2] = {&a.view, &b.view};
    mv_coll_stats cs = {0};
    mv_export_cache *c = mv_export_cache_create();
    /* Text and OpenMetrics without native histograms, for the comparison below. */
    char *plain[2];
    for (int f = 0; f < 2; f++)
        CU_ASSERT(same_render(c, v, 2, &cs, NULL, (mv_expo_format)f, 0, &plain[f]));
    static const size_t nbs[] = {5, 5, 40, 0, 2, 200};
    for (size_t step = 0; step < sizeof nbs / sizeof nbs[0]; step++) {
        tseg_native(&a, 2 + (unsigned)step, nbs[step]);
        if (step == 3)
            a.pipe->m[2].native = 0; /* no native histogram this window: not shown */
        tseg_native(&b, 7, 3);
        char *body = NULL;
        CU_ASSERT(same_render(c, v, 2, &cs, NULL, MV_EXPO_PROTOBUF, 0, &body));
        free(body);
        /* Decode the uncached body: the family and a's series. */
        mv_expo *e = mv_expo_create(MV_EXPO_PROTOBUF, 0);
        mv_expo_set_native(e, 6, 1000);
        CU_ASSERT(mv_export_render_views_sel(e, v, 2, &cs, NULL, NULL) == 0);
        size_t len;
        const uint8_t *d = (const uint8_t *)mv_expo_data(e, &len);
        Io__Prometheus__Client__MetricFamily *fam[64];
        size_t nf = pb_decode(d, len, fam, 64);
        CU_ASSERT_FATAL(nf > 0);
        int seen = 0;
        for (size_t i = 0; i < nf; i++) {
            if (strcmp(fam[i]->name, "queue_depth_window_distribution") == 0) {
                seen = 1;
                CU_ASSERT_EQUAL(fam[i]->type, IO__PROMETHEUS__CLIENT__METRIC_TYPE__GAUGE_HISTOGRAM);
                CU_ASSERT_EQUAL(fam[i]->n_metric, step == 3 ? 1 : 2);
                const Io__Prometheus__Client__Histogram *h = fam[i]->metric[0]->histogram;
                CU_ASSERT_FATAL(h != NULL);
                CU_ASSERT_STRING_EQUAL(fam[i]->metric[0]->label[1]->value,
                                       step == 3 ? "web-2" : "web-1");
                if (step == 3)
                    continue;
                CU_ASSERT_EQUAL(h->n_bucket, 0);
                CU_ASSERT_EQUAL(h->schema, 4);
                CU_ASSERT_EQUAL(h->zero_count, 2 + step);
                CU_ASSERT_EQUAL(h->sample_count, a.pipe->m[2].count);
                CU_ASSERT_EQUAL(h->sample_sum, a.pipe->m[2].sum);
                /* Every bucket's count back from the deltas. */
                uint64_t tot = h->zero_count;
                for (int sg = 0; sg < 2; sg++) {
                    int64_t run = 0;
                    size_t nd = sg ? h->n_negative_delta : h->n_positive_delta;
                    for (size_t q = 0; q < nd; q++) {
                        run += sg ? h->negative_delta[q] : h->positive_delta[q];
                        tot += (uint64_t)run;
                    }
                }
                CU_ASSERT_EQUAL(tot, a.native_total);
                CU_ASSERT_EQUAL(h->n_negative_delta ? 1 : 0, nbs[step] / 3 ? 1 : 0);
            }
            CU_ASSERT(strcmp(fam[i]->name, "http_requests_rate_window_distribution") != 0);
        }
        CU_ASSERT(seen);
        for (size_t i = 0; i < nf; i++)
            io__prometheus__client__metric_family__free_unpacked(fam[i], NULL);
        mv_expo_destroy(e);
        /* Text and OpenMetrics: unchanged by the native histograms (same values otherwise). */
        for (int f = 0; f < 2; f++) {
            tseg_pipe(&a, 1);
            tseg_pipe(&b, 1);
            char *t0 = NULL;
            CU_ASSERT(same_render(c, v, 2, &cs, NULL, (mv_expo_format)f, 0, &t0));
            CU_ASSERT(t0 && strcmp(t0, plain[f]) == 0);
            free(t0);
            tseg_native(&a, 1, nbs[step]);
            tseg_native(&b, 1, 3);
            CU_ASSERT(same_render(c, v, 2, &cs, NULL, (mv_expo_format)f, 0, &t0));
            CU_ASSERT(t0 && strcmp(t0, plain[f]) == 0);
            CU_ASSERT(t0 && !strstr(t0, "_window_distribution"));
            free(t0);
        }
    }
    /* A pod's own family of that name wins: the gauge histogram is dropped as a collision. */
    mv_gauge own;
    CU_ASSERT_FATAL(mv_gauge_register(b.seg, "queue_depth_window_distribution", "Own.", NULL, NULL,
                                      0, &own) == MV_OK);
    tseg_parse(&b);
    tseg_native(&a, 3, 4);
    tseg_native(&b, 3, 4);
    char *body = NULL;
    CU_ASSERT(same_render(c, v, 2, &cs, NULL, MV_EXPO_PROTOBUF, 0, &body));
    free(body);
    mv_expo *e = mv_expo_create(MV_EXPO_PROTOBUF, 0);
    mv_export_stats st = {0};
    mv_export_render_views_sel(e, v, 2, &cs, NULL, &st);
    CU_ASSERT(st.dropped_collision >= 2);
    size_t len;
    const uint8_t *d = (const uint8_t *)mv_expo_data(e, &len);
    Io__Prometheus__Client__MetricFamily *fam[64];
    size_t nf = pb_decode(d, len, fam, 64);
    CU_ASSERT_FATAL(nf > 0);
    for (size_t i = 0; i < nf; i++) {
        if (strcmp(fam[i]->name, "queue_depth_window_distribution") == 0)
            CU_ASSERT_EQUAL(fam[i]->type, IO__PROMETHEUS__CLIENT__METRIC_TYPE__GAUGE);
        io__prometheus__client__metric_family__free_unpacked(fam[i], NULL);
    }
    mv_expo_destroy(e);
    free(plain[0]);
    free(plain[1]);
    mv_export_cache_destroy(c);
    tseg_close(&a);
    tseg_close(&b);
}

/* ---- Scrapes in parallel with ticks and table changes ------------------------------------------
 */

typedef struct par {
    mv_coll *coll;
    mv_export_cache *cache;
    mv_export_sel *sel;
    int stop;
    int renders, mismatches;
    pthread_mutex_t mu;
} par;

/* A copy of the body with the value of every microview_segment_busy_seconds line cut. */
static char *without_busy(const char *d, size_t len)
{
    char *out = malloc(len + 1), *o = out;
    if (!out)
        return NULL;
    const char *end = d + len;
    while (d < end) {
        const char *nl = memchr(d, '\n', (size_t)(end - d));
        const char *le = nl ? nl + 1 : end;
        size_t n = (size_t)(le - d);
        if (strncmp(d, "microview_segment_busy_seconds", 30) == 0) {
            const char *sp = le - 1;
            while (sp > d && *sp != ' ')
                sp--;
            n = (size_t)(sp - d);
        }
        memcpy(o, d, n);
        o += n;
        d = le;
    }
    *o = '\0';
    return out;
}

static void *scraper(void *arg)
{
    par *p = arg;
    mv_expo *a = mv_expo_create(MV_EXPO_TEXT, 0), *b = mv_expo_create(MV_EXPO_TEXT, 0);
    for (unsigned k = 0; !__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE); k++) {
        mv_coll_snap *sn = mv_coll_snapshot(p->coll);
        mv_expo_format f = (mv_expo_format)(k & 1);
        mv_expo_reset(a, f);
        mv_expo_reset(b, f);
        mv_export_render_sel(a, sn, p->sel, NULL);
        mv_export_render_cached(p->cache, b, sn, p->sel, NULL);
        mv_coll_snap_free(sn);
        size_t la, lb;
        const char *da = mv_expo_data(a, &la), *db = mv_expo_data(b, &lb);
        /* microview_segment_busy_seconds reads the clock at each render (non-zero while a
         * catalog append is in progress): compare the bodies with its values blanked. */
        char *na = without_busy(da, la), *nb = without_busy(db, lb);
        int same = na && nb && strcmp(na, nb) == 0;
        free(na);
        free(nb);
        pthread_mutex_lock(&p->mu);
        p->renders++;
        p->mismatches += !same;
        pthread_mutex_unlock(&p->mu);
    }
    mv_expo_destroy(a);
    mv_expo_destroy(b);
    return NULL;
}

static void test_parallel(void)
{
    mv_coll_opts o;
    mv_coll_opts_default(&o);
    o.tick_us = 1000;
    o.analytics = 1;
    o.pipe.window_ns = 20000000; /* windows close while the test runs */
    mv_coll *coll;
    CU_ASSERT_FATAL(mv_coll_create(&o, &coll) == 0);
    char path[2][256];
    mv_segment *w[2];
    mv_gauge g[2];
    for (int i = 0; i < 2; i++) {
        char name[32];
        snprintf(name, sizeof name, "par-%d.seg", i);
        CU_ASSERT_FATAL(mv_test_blank_file(g_dir, name, 1 << 18, path[i], sizeof path[i]) == 0);
        CU_ASSERT_FATAL(mv_open(path[i], &w[i]) == MV_OK);
        mv_label l = {"worker", i ? "b" : "a"};
        CU_ASSERT_FATAL(mv_gauge_register(w[i], "par_gauge", "G.", NULL, &l, 1, &g[i]) == MV_OK);
    }
    par p = {.coll = coll, .cache = mv_export_cache_create(), .sel = mv_export_sel_create()};
    pthread_mutex_init(&p.mu, NULL);
    CU_ASSERT_FATAL(mv_coll_start(coll) == 0);
    pthread_t th[3];
    for (int i = 0; i < 3; i++)
        pthread_create(&th[i], NULL, scraper, &p);
    uint64_t t0 = mv_test_mono_ms();
    char err[256];
    for (unsigned k = 0; mv_test_mono_ms() - t0 < 1500; k++) {
        int i = (int)(k & 1);
        mv_gauge_set(g[i], k);
        if (k % 7 == 0 && k < 400) { /* the catalog grows */
            char nm[32];
            mv_counter cn;
            snprintf(nm, sizeof nm, "par_count_%u_total", k);
            mv_counter_register(w[i], nm, NULL, NULL, NULL, 0, &cn);
            mv_counter_add(cn, k);
        }
        if (k % 5 == 0) { /* a label update: removed, added again with other labels */
            char id[16], val[16];
            snprintf(id, sizeof id, "par-%d", i);
            snprintf(val, sizeof val, "v%u", k % 3);
            mv_seg_label l[2] = {{"namespace", "ns"}, {"pod", val}};
            mv_coll_remove(coll, id);
            void *src;
            uint64_t size;
            if (mv_coll_shm_open(path[i], 0, &src, &size, err, sizeof err) == 0)
                mv_coll_add(coll, id, size, l, 2, mv_coll_shm_transport(), src);
        }
        mv_test_sleep_ms(2);
    }
    __atomic_store_n(&p.stop, 1, __ATOMIC_RELEASE);
    for (int i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    printf("\n  %d parallel renders, %d mismatches\n", p.renders, p.mismatches);
    CU_ASSERT(p.renders > 0);
    CU_ASSERT_EQUAL(p.mismatches, 0);
    mv_coll_destroy(coll);
    mv_export_cache_destroy(p.cache);
    mv_export_sel_destroy(p.sel);
    pthread_mutex_destroy(&p.mu);
    for (int i = 0; i < 2; i++)
        mv_close(w[i]);
}

int main(void)
{
    g_dir = mv_test_tmpdir("test-export-cache");
    if (!g_dir)
        return 1;
    static const mv_test tests[] = {
        {"cache follows label, catalog, selection and table changes", test_invalidation},
        {"cache truncates where the uncached render does", test_truncation},
        {"cache memory limit", test_limit},
        {"random changes between scrapes and planned visits", test_random_changes},
        {"protobuf plan: patched values, packed histograms, torn copy", test_protobuf},
        {"protobuf gauge histograms: cached, decoded, text unchanged",
         test_protobuf_gauge_histograms},
        {"scrapes in parallel with ticks and table changes", test_parallel},
    };
    int fails = MV_TEST_RUN("export_cache", tests);
    if (mv_test_rmrf(g_dir) != 0)
        fprintf(stderr, "could not remove %s\n", g_dir);
    free(g_dir);
    return fails;
}
