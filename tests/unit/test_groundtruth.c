/* Ground truth for the collector's analytics: known signals written through libmicroview, read
 * by the collector table (mv_collect, the module microview-collector runs) and checked in what
 * /metrics and /api/v1/value serve over HTTP (mv_httpd on loopback, bodies rendered by
 * mv_export as in the collector) against exact figures. Reads are stepped in lockstep with the
 * writes (mv_coll_tick), so the truth is the exact multiset of values the collector read; read
 * times come from its snapshots. Fixed seeds, bounded loops, no sleep used to wait for anything
 * (waits poll a clock or a snapshot). */
#include <CUnit/Basic.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "analytics_rng.h"
#include "microview.h"
#include "mv_collect.h"
#include "mv_export.h"
#include "mv_httpd.h"
#include "mv_test.h"

#define MS 1000000ull

static char *g_dir;

/* The collector under test is served on loopback like microview-collector serves it. */
static mv_coll *g_coll;
static mv_export_sel *g_default_sel;
static mv_httpd *g_httpd;
static char g_base[64];
static const mv_seg_label g_id[1] = {{"pod", "gt"}};

static uint64_t wall_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Paces a signal (not a wait for an event): one step per `ns`. */
static void pace(uint64_t ns)
{
    struct timespec ts = {0, (long)ns};
    nanosleep(&ts, NULL);
}

/* Polls the wall clock until `t` (bounded by the caller's choice of t). */
static void until_wall(uint64_t t)
{
    while (wall_ns() < t)
        sched_yield();
}

/* Polls until a fresh window of `w` ns has just begun (at most 3 windows). */
static uint64_t window_start(uint64_t w)
{
    uint64_t now = wall_ns(), start = (now / w + 1) * w;
    until_wall(start);
    return start;
}

static mv_segment *seg_new(const char *name, char *path, size_t plen)
{
    snprintf(path, plen, "%s/%s", g_dir, name);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    CU_ASSERT_FATAL(fd >= 0);
    CU_ASSERT_FATAL(ftruncate(fd, 1 << 20) == 0);
    close(fd);
    mv_segment *s = NULL;
    CU_ASSERT_FATAL(mv_open(path, &s) == MV_OK);
    return s;
}

/* The collector's detection period (10 ms) unless coll_new_detect says otherwise. */
static mv_coll *coll_new_detect(uint64_t window_ns, uint32_t max_interval_us, uint64_t fd_period_ns,
                                uint64_t detect_period_ns);

static mv_coll *coll_new(uint64_t window_ns, uint32_t max_interval_us, uint64_t fd_period_ns)
{
    mv_coll_opts o;
    mv_coll_opts_default(&o);
    return coll_new_detect(window_ns, max_interval_us, fd_period_ns, o.pipe.detect_period_ns);
}

static mv_coll *coll_new_detect(uint64_t window_ns, uint32_t max_interval_us, uint64_t fd_period_ns,
                                uint64_t detect_period_ns)
{
    mv_coll_opts o;
    mv_coll_opts_default(&o);
    o.pipe.detect_period_ns = detect_period_ns;
    o.tick_us = 1000;
    o.analytics = 1;
    o.pipe.window_ns = window_ns;
    o.window_aligned = 1; /* the truths are taken over wall-clock windows (window_start) */
    if (fd_period_ns)
        o.pipe.fd_period_ns = fd_period_ns;
    o.max_interval_us = max_interval_us;
    mv_coll *c = NULL;
    CU_ASSERT_FATAL(mv_coll_create(&o, &c) == 0);
    return c;
}

static void coll_attach(mv_coll *c, const char *id, const char *path)
{
    void *src;
    uint64_t size;
    char err[256];
    CU_ASSERT_FATAL(mv_coll_shm_open(path, 0, &src, &size, err, sizeof err) == 0);
    CU_ASSERT_FATAL(mv_coll_add(c, id, size, g_id, 1, mv_coll_shm_transport(), src) == 0);
}

/* /metrics (every derived series) and /metrics/default (the collector's
 * default choice): the text format, rendered from a snapshot. */
static int h_metrics(void *arg, const mv_httpd_request *req, mv_httpd_response *resp)
{
    (void)req;
    mv_coll_snap *s = mv_coll_snapshot(g_coll);
    mv_expo *e = mv_expo_create(MV_EXPO_TEXT, 0);
    if (!s || !e) {
        mv_coll_snap_free(s);
        mv_expo_destroy(e);
        return -ENOMEM;
    }
    int rc = mv_export_render_sel(e, s, arg, NULL);
    mv_coll_snap_free(s);
    size_t len;
    const char *d = mv_expo_data(e, &len);
    mv_httpd_set_status(resp, rc == 0 ? 200 : 500);
    mv_httpd_set_content_type(resp, mv_expo_content_type(MV_EXPO_TEXT));
    rc = mv_httpd_copy_body(resp, d, len);
    mv_expo_destroy(e);
    return rc;
}

/* /api/v1/value?metric=NAME&pod=..[&quantile=..] */
static int h_value(void *arg, const mv_httpd_request *req, mv_httpd_response *resp)
{
    (void)arg;
    mv_seg_label f[2];
    size_t nf = 0;
    const char *pod = mv_httpd_query(req, "pod"), *q = mv_httpd_query(req, "quantile");
    if (pod)
        f[nf++] = (mv_seg_label){"pod", pod};
    if (q)
        f[nf++] = (mv_seg_label){"quantile", q};
    const char *metric = mv_httpd_query(req, "metric");
    mv_coll_snap *s = mv_coll_snapshot(g_coll);
    char *json = NULL;
    int rc = metric && s ? mv_export_value_json(s, metric, f, nf, NULL, &json) : -EINVAL;
    mv_coll_snap_free(s);
    mv_httpd_set_status(resp, rc == 0 ? 200 : rc == -ENOENT ? 404 : 400);
    mv_httpd_set_content_type(resp, "application/json");
    rc = json ? mv_httpd_copy_body(resp, json, strlen(json)) : 0;
    free(json);
    return rc;
}

static void serve(mv_coll *c)
{
    g_coll = c;
    if (g_httpd)
        return;
    mv_httpd_config hc;
    mv_httpd_config_default(&hc); /* 127.0.0.1, ephemeral port */
    CU_ASSERT_FATAL(mv_httpd_create(&hc, &g_httpd) == 0);
    g_default_sel = mv_export_sel_create();
    CU_ASSERT_FATAL(g_default_sel != NULL);
    mv_httpd_route(g_httpd, "/metrics", h_metrics, NULL);
    mv_httpd_route(g_httpd, "/metrics/default", h_metrics, g_default_sel);
    mv_httpd_route(g_httpd, "/api/v1/value", h_value, NULL);
    CU_ASSERT_FATAL(mv_httpd_start(g_httpd) == 0);
    snprintf(g_base, sizeof g_base, "http://127.0.0.1:%u", mv_httpd_port(g_httpd));
}

typedef struct buf {
    char *p;
    size_t n;
} buf;

static size_t on_body(char *d, size_t sz, size_t nm, void *arg)
{
    buf *b = arg;
    char *np = realloc(b->p, b->n + sz * nm + 1);
    if (!np)
        return 0;
    memcpy(np + b->n, d, sz * nm);
    b->p = np;
    b->n += sz * nm;
    b->p[b->n] = '\0';
    return sz * nm;
}

/* GET base + path; the body (free()) or NULL; *status gets the HTTP status. */
static char *http_get(const char *path, long *status)
{
    char url[512];
    snprintf(url, sizeof url, "%s%s", g_base, path);
    buf b = {calloc(1, 1), 0};
    CURL *c = curl_easy_init();
    CU_ASSERT_FATAL(c != NULL);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
    curl_easy_setopt(c, CURLOPT_ACCEPT_ENCODING, ""); /* gzip as Prometheus asks for it */
    CURLcode rc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
    curl_easy_cleanup(c);
    if (rc != CURLE_OK) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

/* The /metrics body for the collector being served; sel NULL = every derived
 * series, else the collector's default choice. */
static char *render(mv_coll *c, const mv_export_sel *sel)
{
    serve(c);
    long st = 0;
    char *body = http_get(sel ? "/metrics/default" : "/metrics", &st);
    CU_ASSERT_FATAL(body != NULL);
    CU_ASSERT(st == 200);
    return body;
}

/* Value of the sample whose line starts with `series` + ' '; NAN if absent. */
static double sample(const char *body, const char *series)
{
    size_t n = strlen(series);
    for (const char *p = body; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (strncmp(p, series, n) == 0 && p[n] == ' ')
            return strtod(p + n + 1, NULL);
    return NAN;
}

/* GET /api/v1/value?metric=...&pod=gt[&quantile=q]: the "value" field. */
static double api_value(mv_coll *c, const char *metric, const char *quantile)
{
    char path[256];
    long st = 0;
    serve(c);
    snprintf(path, sizeof path, "/api/v1/value?metric=%s&pod=gt%s%s", metric,
             quantile ? "&quantile=" : "", quantile ? quantile : "");
    char *json = http_get(path, &st);
    double v = NAN;
    json_object *o = st == 200 && json ? json_tokener_parse(json) : NULL, *x;
    if (o && json_object_object_get_ex(o, "value", &x) && x)
        v = json_object_get_double(x);
    json_object_put(o);
    free(json);
    return v;
}

/* Latest read of segment `id`: time, reads, interval. */
static void seg_state(mv_coll *c, const char *id, uint64_t *read_ns, uint64_t *reads,
                      uint64_t *interval_ns)
{
    mv_coll_snap *s = mv_coll_snapshot(c);
    for (size_t i = 0; i < mv_coll_snap_count(s); i++) {
        const mv_coll_seg_view *v = mv_coll_snap_seg(s, i);
        if (strcmp(v->id, id) != 0)
            continue;
        if (read_ns)
            *read_ns = v->read_ns;
        if (reads)
            *reads = v->reads;
        if (interval_ns)
            *interval_ns = v->read_interval_ns;
    }
    mv_coll_snap_free(s);
}

static int dcmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* ---- Quantiles over 1e-9 .. 1e3 ---------------------------------------------------------------
 */

#define NQV 2000
static const char *const qnames[4] = {"0.5", "0.9", "0.99", "0.999"};
static const double qs[4] = {0.5, 0.9, 0.99, 0.999};

static double gen(int dist, test_rng *r)
{
    double x;
    switch (dist) {
    case 0: /* uniform */
        return 1e-9 + (1e3 - 1e-9) * rng_unif(r);
    case 1: /* log-uniform */
        return pow(10.0, -9.0 + 12.0 * rng_unif(r));
    case 2: /* lognormal around 1 ms, sigma 2.5 (e-folds), clipped to the range */
        x = exp(log(1e-3) + 2.5 * rng_gauss(r));
        return x < 1e-9 ? 1e-9 : x > 1e3 ? 1e3 : x;
    default: /* bimodal: ~1 us and ~10 s */
        return (rng_unif(r) < 0.5 ? 1e-6 : 10.0) * exp(0.3 * rng_gauss(r));
    }
}

static void test_quantiles(void)
{
    static const char *const names[4] = {"gt_uniform", "gt_loguniform", "gt_lognormal",
                                         "gt_bimodal"};
    char path[256];
    mv_segment *seg = seg_new("q.seg", path, sizeof path);
    mv_gauge g[4];
    for (int d = 0; d < 4; d++)
        CU_ASSERT_FATAL(mv_gauge_register(seg, names[d], NULL, NULL, NULL, 0, &g[d]) == MV_OK);
    const uint64_t W = 2000 * MS;
    mv_coll *c = coll_new(W, 0, 0);
    coll_attach(c, "q", path);
    static double xs[4][NQV];
    test_rng r = {20261123};
    mv_coll_tick(c); /* catalog and a first read, in the previous window */
    uint64_t w0 = window_start(W), last = 0;
    int n = 0;
    /* Stop early (fewer values) if a loaded machine makes the window too short. */
    for (; n < NQV && wall_ns() < w0 + W - W / 8; n++) {
        for (int d = 0; d < 4; d++)
            mv_gauge_set(g[d], xs[d][n] = gen(d, &r));
        mv_coll_tick(c); /* exactly one read of these values */
    }
    seg_state(c, "q", &last, NULL, NULL);
    CU_ASSERT_FATAL(last < w0 + W); /* every read fell in the window */
    CU_ASSERT(n >= NQV / 4);
    until_wall(w0 + W);
    mv_coll_tick(c); /* the first read after the boundary closes the window */
    char *body = render(c, NULL);
    double worst = 0, worst_api = 0;
    for (int d = 0; d < 4; d++) {
        qsort(xs[d], (size_t)n, sizeof xs[d][0], dcmp);
        char series[128], metric[64];
        snprintf(series, sizeof series, "%s_window_count{pod=\"gt\"}", names[d]);
        CU_ASSERT_EQUAL(sample(body, series), n);
        for (int q = 0; q < 4; q++) {
            double want = xs[d][(size_t)floor(qs[q] * (n - 1))];
            snprintf(series, sizeof series, "%s_window{pod=\"gt\",quantile=\"%s\"}", names[d],
                     qnames[q]);
            double got = sample(body, series), e = fabs(got - want) / want;
            if (!(e <= worst))
                worst = e;
            if (!(e <= 0.01))
                printf("\n  %s q%s: got %.9g want %.9g (rel %.3g)", names[d], qnames[q], got, want,
                       e);
            CU_ASSERT(e <= 0.01);
            snprintf(metric, sizeof metric, "%s_window", names[d]);
            double api = api_value(c, metric, qnames[q]);
            if (!(fabs(api - want) / want <= worst_api))
                worst_api = fabs(api - want) / want;
            CU_ASSERT(api == got); /* the JSON API serves the same figure */
        }
    }
    printf("\n  quantiles of 4 x %d values over 1e-9..1e3: worst relative error %.5f (api %.5f) ",
           n, worst, worst_api);
    free(body);
    g_coll = NULL;
    mv_coll_destroy(c);
    mv_close(seg);
}

/* ---- Rates: exact for the reads made, steady and stepped ------------------------------------- */

static void test_rates(void)
{
    char path[256];
    mv_segment *seg = seg_new("r.seg", path, sizeof path);
    mv_counter cs, cx; /* steady, stepped */
    CU_ASSERT_FATAL(mv_counter_register(seg, "gt_steady_total", NULL, NULL, NULL, 0, &cs) == MV_OK);
    CU_ASSERT_FATAL(mv_counter_register(seg, "gt_step_total", NULL, NULL, NULL, 0, &cx) == MV_OK);
    const uint64_t W = 5000 * MS;
    mv_coll *c = coll_new(W, 0, 0);
    coll_attach(c, "r", path);
    enum { NMAX = 6000 };
    static uint64_t t[NMAX + 2];
    static double inc_s[NMAX + 2], inc_x[NMAX + 2];
    mv_coll_tick(c);
    uint64_t w0 = window_start(W), step_at = w0 + 500 * MS, stop_at = w0 + 3500 * MS;
    seg_state(c, "r", &t[0], NULL, NULL); /* last read of the previous window */
    int N = 0, step_i = 0;
    /* ~1 read per ms: 3 -> 40 per read at 0.5 s, reads until 3.5 s into the window. */
    while (N < NMAX && wall_ns() < stop_at) {
        int i = ++N;
        if (!step_i && wall_ns() >= step_at)
            step_i = i;
        inc_s[i] = 7;
        inc_x[i] = step_i ? 40 : 3;
        mv_counter_add(cs, 7);
        mv_counter_add(cx, (uint64_t)inc_x[i]);
        mv_coll_tick(c);
        seg_state(c, "r", &t[i], NULL, NULL);
        pace(1 * MS);
    }
    CU_ASSERT_FATAL(step_i > 0 && t[N] < w0 + W);
    /* The short rate as of the last read: intervals ending in its last 8 slots of 125 ms. */
    char *now_body = render(c, NULL);
    double rsh = sample(now_body, "gt_step_rate_short{pod=\"gt\"}");
    free(now_body);
    uint64_t last_slot = t[N] / (125 * MS) + 1;
    double sx = 0, sdt = 0;
    int pre = 0;
    for (int i = 1; i <= N; i++) {
        if (t[i] / (125 * MS) + 1 + 8 > last_slot) {
            pre += i < step_i;
            sx += inc_x[i];
            sdt += (double)(t[i] - t[i - 1]) / 1e9;
        }
    }
    until_wall(w0 + W);
    mv_coll_tick(c);
    seg_state(c, "r", &t[N + 1], NULL, NULL);
    /* Truth: increase / elapsed over the read intervals that ended in the window. */
    double is = 0, ix = 0, dt = 0, max_x = 0;
    for (int i = 1; i <= N; i++) {
        double d = (double)(t[i] - t[i - 1]) / 1e9;
        if (t[i] < w0)
            continue;
        is += inc_s[i];
        ix += inc_x[i];
        dt += d;
        if (inc_x[i] / d > max_x)
            max_x = inc_x[i] / d;
    }
    char *body = render(c, NULL);
    double rs = sample(body, "gt_steady_rate{pod=\"gt\"}");
    double rx = sample(body, "gt_step_rate{pod=\"gt\"}");
    double rmx = sample(body, "gt_step_rate_max{pod=\"gt\"}");
    printf("\n  rates: steady %.6g (truth %.6g), stepped %.6g (truth %.6g), max %.6g (%.6g), "
           "short %.6g (%.6g) ",
           rs, is / dt, rx, ix / dt, rmx, max_x, rsh, sdt > 0 ? sx / sdt : NAN);
    CU_ASSERT(fabs(rs - is / dt) <= 1e-9 * is / dt);
    CU_ASSERT(fabs(rx - ix / dt) <= 1e-9 * ix / dt);
    CU_ASSERT(fabs(rmx - max_x) <= 1e-9 * max_x);
    CU_ASSERT(sdt > 0 && fabs(rsh - sx / sdt) <= 1e-9 * (sx / sdt));
    /* A second after the step, the short rate holds only post-step reads. */
    CU_ASSERT(pre == 0 || t[N] - t[step_i - 1] < 1000 * MS);
    CU_ASSERT(api_value(c, "gt_step_rate", NULL) == rx);
    free(body);
    g_coll = NULL;
    mv_coll_destroy(c);
    mv_close(seg);
}

/* ---- Change detection -------------------------------------------------------------------------
 */

static void test_changes(void)
{
    char path[256];
    mv_segment *seg = seg_new("c.seg", path, sizeof path);
    mv_gauge noise, flat;
    CU_ASSERT_FATAL(mv_gauge_register(seg, "gt_noise", NULL, NULL, NULL, 0, &noise) == MV_OK);
    CU_ASSERT_FATAL(mv_gauge_register(seg, "gt_flat", NULL, NULL, NULL, 0, &flat) == MV_OK);
    const uint64_t W = 3000 * MS;
    /* Detection at every read (--detect-ms 0): the lockstep ticks below come microseconds
     * apart, so with the collector's 10 ms steps the number of scored samples would be the
     * machine's speed, not the reads' (steps: tests/unit/test_pipeline.c). */
    mv_coll *c = coll_new_detect(W, 0, 0, 0);
    coll_attach(c, "c", path);
    test_rng r = {99};
    mv_gauge_set(flat, 3.0);
    /* A constant start (the detectors warm up on it), then stationary noise:
     * one change at the onset, none after, over 20,000 reads. */
    mv_gauge_set(noise, 50.0);
    for (int i = 0; i < 100; i++)
        mv_coll_tick(c);
    for (int i = 0; i < 20000; i++) {
        mv_gauge_set(noise, 50.0 + 2.0 * rng_gauss(&r));
        mv_coll_tick(c);
    }
    uint64_t now = wall_ns();
    until_wall((now / W + 1) * W);
    mv_coll_tick(c);
    char *body = render(c, NULL);
    double ch = sample(body, "microview_changes_total{pod=\"gt\",metric=\"gt_noise\"}");
    double chf = sample(body, "microview_changes_total{pod=\"gt\",metric=\"gt_flat\"}");
    printf("\n  constant start then 20000 noisy reads: %g change(s) ", ch);
    CU_ASSERT_EQUAL(ch, 1);
    CU_ASSERT_EQUAL(chf, 0);
    free(body);
    g_coll = NULL;
    mv_coll_destroy(c);
    mv_close(seg);
}

/* ---- Adaptive sampling: backs off when calm, returns at the first read after a step -----------
 */

static void test_adaptive(void)
{
    char path[256];
    mv_segment *seg = seg_new("a.seg", path, sizeof path);
    mv_gauge g;
    CU_ASSERT_FATAL(mv_gauge_register(seg, "gt_level", NULL, NULL, NULL, 0, &g) == MV_OK);
    mv_gauge_set(g, 5.0);
    const uint64_t W = 500 * MS;
    mv_coll *c = coll_new(W, 64000, 0);
    coll_attach(c, "a", path);
    CU_ASSERT_FATAL(mv_coll_start(c) == 0); /* the collector's own tick thread */
    uint64_t iv = 0, reads = 0, reads0 = 0, deadline = wall_ns() + 20000 * MS;
    /* Backed off (after 8 calm detection steps at each interval: 48 steps, a step every
     * 10 ms at the 1 ms tick, at every read from 8 ms on), then 10 more reads at 64 ms: past
     * the detectors' warm-up (50 steps). */
    while (iv != 64 * MS && wall_ns() < deadline) {
        sched_yield();
        seg_state(c, "a", NULL, &reads, &iv);
    }
    uint64_t reads64 = reads;
    while (iv == 64 * MS && reads < reads64 + 10 && wall_ns() < deadline) {
        sched_yield();
        seg_state(c, "a", NULL, &reads, &iv);
    }
    printf("\n  calm: interval %.0f ms after %llu reads", iv / 1e6, (unsigned long long)reads);
    CU_ASSERT_EQUAL(iv, 64 * MS);
    /* A step of 100x the level: the first read after it is back at the tick. */
    seg_state(c, "a", NULL, &reads0, NULL);
    mv_gauge_set(g, 500.0);
    reads = reads0;
    deadline = wall_ns() + 5000 * MS;
    while (reads == reads0 && wall_ns() < deadline) {
        sched_yield();
        seg_state(c, "a", NULL, &reads, &iv);
    }
    printf(", first read after the step: interval %.0f ms ", iv / 1e6);
    CU_ASSERT_EQUAL(iv, 1 * MS);
    /* The change is counted once the window closes; it backs off again. */
    uint64_t end = wall_ns() + 20000 * MS;
    double ch = NAN;
    while (wall_ns() < end) {
        char *body = render(c, NULL);
        ch = sample(body, "microview_changes_total{pod=\"gt\",metric=\"gt_level\"}");
        free(body);
        seg_state(c, "a", NULL, NULL, &iv);
        if (ch == 1 && iv == 64 * MS)
            break;
        sched_yield();
    }
    CU_ASSERT_EQUAL(ch, 1);
    CU_ASSERT_EQUAL(iv, 64 * MS);
    g_coll = NULL;
    mv_coll_destroy(c);
    mv_close(seg);
}

/* ---- Anomaly score ------------------------------------------------------------------------------
 */

static void test_anomaly(void)
{
    char path[256], name[32];
    mv_segment *seg = seg_new("f.seg", path, sizeof path);
    mv_counter k[4];
    for (int i = 0; i < 4; i++) {
        snprintf(name, sizeof name, "gt_work%d_total", i);
        CU_ASSERT_FATAL(mv_counter_register(seg, name, NULL, NULL, NULL, 0, &k[i]) == MV_OK);
    }
    const uint64_t W = 250 * MS;
    mv_coll *c = coll_new(W, 0, 25 * MS); /* scorer step every 25 ms */
    coll_attach(c, "f", path);
    test_rng r = {5};
    const char *series = "microview_anomaly_score{pod=\"gt\"}";
    /* Idle start: nothing learnt, no score (not 1.0). */
    int scored_idle = 0;
    for (int i = 0; i < 750; i++) { /* ~0.75 s, 3 windows */
        mv_coll_tick(c);
        pace(1 * MS);
        if (i % 50 == 49) {
            char *body = render(c, NULL);
            scored_idle += !isnan(sample(body, series));
            free(body);
        }
    }
    /* Correlated load, then counter 2 stalls while the others go on. */
    double low_max = 0, high = 0;
    int low_n = 0;
    uint64_t last_end = 0;
    for (int i = 0; i < 3000; i++) {
        double load = 1.0 + 0.5 * sin(i / 400.0);
        for (int j = 0; j < 4; j++)
            if (!(i >= 2200 && j == 2))
                mv_counter_add(k[j], (uint64_t)((j + 1) * 10 * load + 3 * rng_unif(&r)));
        mv_coll_tick(c);
        pace(1 * MS);
        mv_coll_snap *s = mv_coll_snapshot(c);
        const mv_pipe_view *p = mv_coll_snap_seg(s, 0)->pipe;
        uint64_t end = p ? p->window_end_ns : 0;
        mv_coll_snap_free(s);
        if (end == last_end)
            continue;
        last_end = end;
        char *body = render(c, NULL);
        double v = sample(body, series);
        free(body);
        if (i >= 1000 && i < 2200 && !isnan(v)) { /* learnt, normal mix */
            low_n++;
            if (v > low_max)
                low_max = v;
        }
        if (i >= 2200 && v > high) /* the windows from the break on */
            high = v;
    }
    printf("\n  anomaly: %d idle windows scored, normal max %.3f over %d windows, broken %.3f ",
           scored_idle, low_max, low_n, high);
    CU_ASSERT_EQUAL(scored_idle, 0);
    CU_ASSERT(low_n >= 3 && low_max < 0.2);
    CU_ASSERT(high > 0.3);
    g_coll = NULL;
    mv_coll_destroy(c);
    mv_close(seg);
}

/* ---- Cardinality: the collector's default choice of derived series ----------------------------
 */

static void test_default_cardinality(void)
{
    char path[256];
    mv_segment *seg = seg_new("d.seg", path, sizeof path);
    mv_gauge g;
    mv_counter n;
    CU_ASSERT_FATAL(mv_gauge_register(seg, "gt_depth", NULL, NULL, NULL, 0, &g) == MV_OK);
    CU_ASSERT_FATAL(mv_counter_register(seg, "gt_done_total", NULL, NULL, NULL, 0, &n) == MV_OK);
    const uint64_t W = 100 * MS;
    mv_coll *c = coll_new(W, 0, 0);
    coll_attach(c, "d", path);
    for (int i = 0; i < 5; i++) {
        mv_gauge_set(g, i);
        mv_counter_add(n, 1);
        mv_coll_tick(c);
    }
    /* Past the boundary and the close spread (8 ticks of 1 ms): the summary is out. */
    until_wall((wall_ns() / W + 1) * W + 9 * MS);
    mv_coll_tick(c);
    mv_export_sel *sel = mv_export_sel_create();
    char *def = render(c, sel), *all = render(c, NULL); /* /metrics/default, /metrics */
    int ng = 0, na = 0;
    for (const char *p = def; (p = strstr(p, "\ngt_depth")); p++)
        ng++;
    for (const char *p = all; (p = strstr(p, "\ngt_depth")); p++)
        na++;
    printf("\n  samples per gauge: %d by default, %d with every derived series ", ng, na);
    CU_ASSERT_EQUAL(ng, 3); /* raw, _window_max, _window_mean */
    CU_ASSERT_EQUAL(na, 11);
    CU_ASSERT(!isnan(sample(def, "gt_done_rate{pod=\"gt\"}")));
    CU_ASSERT(!isnan(sample(def, "gt_done_rate_short{pod=\"gt\"}")));
    CU_ASSERT(isnan(sample(def, "gt_done_rate_max{pod=\"gt\"}")));
    /* The JSON API serves every derived series whatever the choice. */
    CU_ASSERT(!isnan(api_value(c, "gt_depth_window", "0.99")));
    free(def);
    free(all);
    mv_export_sel_destroy(sel);
    g_coll = NULL;
    mv_coll_destroy(c);
    mv_close(seg);
}

int main(void)
{
    g_dir = mv_test_tmpdir("test-groundtruth");
    if (!g_dir)
        return 1;
    static const mv_test tests[] = {
        {"quantiles over 1e-9..1e3 within alpha", test_quantiles},
        {"rates exact, steady and stepped", test_rates},
        {"no false change after a constant start", test_changes},
        {"adaptive interval backs off and returns", test_adaptive},
        {"anomaly score: absent, low, high", test_anomaly},
        {"default derived series", test_default_cardinality},
    };
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int fails = MV_TEST_RUN("groundtruth", tests);
    mv_httpd_destroy(g_httpd);
    mv_export_sel_destroy(g_default_sel);
    curl_global_cleanup();
    if (mv_test_rmrf(g_dir) != 0)
        fprintf(stderr, "could not remove %s\n", g_dir);
    free(g_dir);
    return fails;
}
