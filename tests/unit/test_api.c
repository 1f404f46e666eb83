/* Unit tests for pkg/collector/api: the /api/v1/value query parser (a table of queries and
 * what they parse to) and every route over loopback HTTP against a table holding one segment. */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "microview.h"
#include "mv_api.h"
#include "mv_collect.h"
#include "mv_httpd.h"
#include "mv_log.h"
#include "mv_test.h"
#include "mv_util.h"
#include "query_kv.h"

/* ---- The value query parser ------------------------------------------------------------ */

/* want: "!<error substring>" or "metric|agg|k=v,k=v" ("-" for no agg). */
static const struct {
    const char *query, *want;
} value_cases[] = {
    {"", "!give ?metric=NAME"},
    {"metric=", "!give ?metric=NAME"},
    {"pod=a", "!give ?metric=NAME"},
    {"metric=up", "up|-|"},
    {"metric=up&agg=sum", "up|sum|"},
    {"metric=up&agg=nonsense", "up|nonsense|"}, /* checked by the renderer: 400 there */
    {"metric=up&namespace=ns&pod=p&container=c", "up|-|namespace=ns,pod=p,container=c"},
    {"metric=up&job=j&le=0.5&quantile=0.9", "up|-|quantile=0.9,le=0.5,job=j"},
    {"metric=up&zone=a", "up|-|"}, /* unknown keys are not filters */
    {"metric=up&label=zone=eu-1", "up|-|zone=eu-1"},
    {"metric=up&label=zone=", "up|-|zone="},
    {"metric=up&label=k=v=w", "up|-|k=v=w"},
    {"metric=up&label=zone", "!label wants KEY=VALUE"},
    {"metric=up&label==v", "!label wants KEY=VALUE"},
    {"metric=up&pod=p&label=pod=q", "up|-|pod=p,pod=q"},
    {"metric=up&selector=app=x,tier in (a,b)", "up|-|"}, /* a predicate, not a filter */
    {"metric=up&selector=", "!selector: selector requirement 1 at byte 0: the selector is empty"},
    {"metric=up&selector=app in ()", "!the value set is empty"},
    {"metric=up&selector=a=\"b", "!unexpected character '?'"}, /* quote kept out of the JSON */
};

static void format_query(const mv_api_value_query *q, char *buf, size_t len)
{
    size_t off = 0;
    off += (size_t)snprintf(buf + off, len - off, "%s|%s|", q->metric, q->agg ? q->agg : "-");
    for (size_t i = 0; i < q->nfilters && off < len; i++)
        off += (size_t)snprintf(buf + off, len - off, "%s%s=%s", i ? "," : "", q->filters[i].key,
                                q->filters[i].value);
}

static void test_value_parse(void)
{
    for (size_t i = 0; i < sizeof value_cases / sizeof value_cases[0]; i++) {
        char s[256], got[512];
        snprintf(s, sizeof s, "%s", value_cases[i].query);
        query_kv kv;
        query_kv_split(&kv, s);
        mv_api_value_query q;
        const char *err = NULL;
        int rc = mv_api_value_parse(query_kv_get, &kv, &q, &err);
        const char *want = value_cases[i].want;
        if (want[0] == '!') {
            CU_ASSERT_EQUAL(rc, -EINVAL);
            CU_ASSERT(err && strstr(err, want + 1) && err[0] == '{');
            if (!(rc == -EINVAL && err && strstr(err, want + 1)))
                fprintf(stderr, "query %s: rc=%d err=%s\n", value_cases[i].query, rc,
                        err ? err : "(none)");
            continue;
        }
        CU_ASSERT_EQUAL(rc, 0);
        if (rc != 0)
            continue;
        format_query(&q, got, sizeof got);
        CU_ASSERT_STRING_EQUAL(got, want);
        if (strcmp(got, want) != 0)
            fprintf(stderr, "query %s: got %s want %s\n", value_cases[i].query, got, want);
    }
}

static void test_value_label_key_limit(void)
{
    char s[400], key[MV_SEG_LABEL_KEY_MAX + 2];
    memset(key, 'k', sizeof key - 1);
    key[sizeof key - 1] = 0; /* one byte over the limit */
    snprintf(s, sizeof s, "metric=up&label=%s=v", key);
    query_kv kv;
    query_kv_split(&kv, s);
    mv_api_value_query q;
    const char *err = NULL;
    CU_ASSERT_EQUAL(mv_api_value_parse(query_kv_get, &kv, &q, &err), -EINVAL);
    key[MV_SEG_LABEL_KEY_MAX] = 0; /* exactly the limit */
    snprintf(s, sizeof s, "metric=up&label=%s=v", key);
    query_kv_split(&kv, s);
    CU_ASSERT_EQUAL_FATAL(mv_api_value_parse(query_kv_get, &kv, &q, &err), 0);
    CU_ASSERT_EQUAL(strlen(q.filters[0].key), MV_SEG_LABEL_KEY_MAX);
}

/* ---- Routes over HTTP ---------------------------------------------------------------------- */

static char *g_dir;
static mv_segment *g_seg;
static mv_coll *g_coll;
static mv_api *g_api;
static mv_httpd *g_httpd;
static char g_base[64];
static int g_extra_rc;

static int render_extra(void *arg, mv_expo *e, const mv_coll_snap *snap)
{
    (void)arg;
    (void)e;
    (void)snap;
    return g_extra_rc;
}

static int serve_open(void)
{
    g_dir = mv_test_tmpdir("api");
    if (!g_dir)
        return -1;
    char path[512];
    snprintf(path, sizeof path, "%s/seg", g_dir);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || ftruncate(fd, 65536) != 0)
        return -1;
    close(fd);
    mv_gauge g;
    mv_counter big;
    mv_label l = {"queue", "jobs"};
    if (mv_open(path, &g_seg) != MV_OK ||
        mv_gauge_register(g_seg, "queue_depth", "Jobs waiting.", NULL, &l, 1, &g) != MV_OK ||
        mv_counter_register(g_seg, "bytes_total", "Bytes.", NULL, NULL, 0, &big) != MV_OK)
        return -1;
    mv_gauge_set(g, 7);
    mv_counter_add(big, 9007199254740993ull); /* 2^53 + 1: not a double */
    mv_coll_opts co;
    mv_coll_opts_default(&co);
    if (mv_coll_create(&co, &g_coll) != 0)
        return -1;
    void *src;
    uint64_t size;
    char err[MV_ERR_MAX];
    mv_seg_label ids[] = {{"namespace", "team-a"}, {"pod", "web-0"}};
    if (mv_coll_shm_open(path, 0, &src, &size, err, sizeof err) != 0 ||
        mv_coll_add(g_coll, "seg-1", size, ids, 2, mv_coll_shm_transport(), src) != 0)
        return -1;
    mv_seg_label pl[] = {{"app.kubernetes.io/name", "web"}, {"tier", "front"}};
    if (mv_coll_set_pod_labels(g_coll, "seg-1", pl, 2) != 0 ||
        mv_coll_set_pod_labels(g_coll, "nope", pl, 2) != -ENOENT)
        return -1;
    mv_coll_tick(g_coll);
    mv_api_opts ao = {.coll = g_coll, .render_extra = render_extra};
    mv_httpd_config hc;
    mv_httpd_config_default(&hc);
    if (mv_api_create(&ao, &g_api) != 0 || mv_httpd_create(&hc, &g_httpd) != 0 ||
        mv_api_route(g_api, g_httpd) != 0 || mv_httpd_start(g_httpd) != 0)
        return -1;
    snprintf(g_base, sizeof g_base, "http://127.0.0.1:%u", (unsigned)mv_httpd_port(g_httpd));
    return 0;
}

static void serve_close(void)
{
    mv_httpd_destroy(g_httpd);
    mv_api_destroy(g_api);
    mv_coll_destroy(g_coll);
    mv_close(g_seg);
    if (g_dir)
        mv_test_rmrf(g_dir);
    free(g_dir);
}

typedef struct reply {
    long status;
    char ctype[128];
    mv_util_buf body;
} reply;

static int get(const char *path, const char *accept, reply *r)
{
    char url[512];
    snprintf(url, sizeof url, "%s%s", g_base, path);
    memset(r, 0, sizeof *r);
    r->body.cap = 1u << 20;
    CURL *c = curl_easy_init();
    if (!c)
        return -1;
    struct curl_slist *h = NULL;
    char hdr[256];
    if (accept) {
        snprintf(hdr, sizeof hdr, "Accept: %s", accept);
        h = curl_slist_append(h, hdr);
    }
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, mv_util_buf_curl_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &r->body);
    int rc = curl_easy_perform(c) == CURLE_OK ? 0 : -1;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
    char *ct = NULL;
    curl_easy_getinfo(c, CURLINFO_CONTENT_TYPE, &ct);
    snprintf(r->ctype, sizeof r->ctype, "%s", ct ? ct : "");
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    if (!r->body.data)
        mv_util_buf_append(&r->body, "", 0);
    return rc;
}

static void test_routes(void)
{
    reply r;
    CU_ASSERT_EQUAL_FATAL(get("/healthz", NULL, &r), 0);
    CU_ASSERT_EQUAL(r.status, 200);
    CU_ASSERT_STRING_EQUAL(r.body.data, "ok\n");
    mv_util_buf_free(&r.body);

    CU_ASSERT_EQUAL_FATAL(get("/", NULL, &r), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.body.data, "/api/v1/value"));
    mv_util_buf_free(&r.body);

    CU_ASSERT_EQUAL_FATAL(get("/metrics", NULL, &r), 0);
    CU_ASSERT_EQUAL(r.status, 200);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.ctype, "text/plain"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.body.data, "queue_depth{"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.body.data, "pod=\"web-0\""));
    mv_util_buf_free(&r.body);

    CU_ASSERT_EQUAL_FATAL(get("/metrics", "application/openmetrics-text; version=1.0.0", &r), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.ctype, "application/openmetrics-text"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.body.data, "# EOF"));
    mv_util_buf_free(&r.body);

    /* a failing extra renderer leaves the collector's own families in place */
    g_extra_rc = -ENOMEM;
    CU_ASSERT_EQUAL_FATAL(get("/metrics", NULL, &r), 0);
    CU_ASSERT_EQUAL(r.status, 200);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.body.data, "queue_depth{"));
    mv_util_buf_free(&r.body);
    g_extra_rc = 0;

    CU_ASSERT_EQUAL_FATAL(get("/debug/segments", NULL, &r), 0);
    CU_ASSERT_EQUAL(r.status, 200);
    CU_ASSERT_STRING_EQUAL(r.ctype, "application/json");
    CU_ASSERT_PTR_NOT_NULL(strstr(r.body.data, "\"seg-1\""));
    mv_util_buf_free(&r.body);
}

static void test_value_route(void)
{
    reply r;
    CU_ASSERT_EQUAL_FATAL(get("/api/v1/value", NULL, &r), 0);
    CU_ASSERT_EQUAL(r.status, 400);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.body.data, "metric=NAME"));
    mv_util_buf_free(&r.body);

    CU_ASSERT_EQUAL_FATAL(get("/api/v1/value?metric=queue_depth&pod=web-0", NULL, &r), 0);
    CU_ASSERT_EQUAL(r.status, 200);
    CU_ASSERT_STRING_EQUAL(r.ctype, "application/json");
    CU_ASSERT_PTR_NOT_NULL(strstr(r.body.data, "\"value\":7"));
    mv_util_buf_free(&r.body);

    CU_ASSERT_EQUAL_FATAL(get("/api/v1/value?metric=queue_depth&label=queue=jobs", NULL, &r), 0);
    CU_ASSERT_EQUAL(r.status, 200);
    mv_util_buf_free(&r.body);

    CU_ASSERT_EQUAL_FATAL(get("/api/v1/value?metric=queue_depth&pod=other", NULL, &r), 0);
    CU_ASSERT_EQUAL(r.status, 404);
    mv_util_buf_free(&r.body);

    CU_ASSERT_EQUAL_FATAL(get("/api/v1/value?metric=queue_depth&agg=median", NULL, &r), 0);
    CU_ASSERT_EQUAL(r.status, 400);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.body.data, "agg is one of"));
    mv_util_buf_free(&r.body);

    CU_ASSERT_EQUAL_FATAL(get("/api/v1/value?metric=queue_depth&label=queue", NULL, &r), 0);
    CU_ASSERT_EQUAL(r.status, 400);
    mv_util_buf_free(&r.body);

    /* A misspelt filter must not widen the query silently. */
    CU_ASSERT_EQUAL_FATAL(get("/api/v1/value?metric=queue_depth&namspace=team-a", NULL, &r), 0);
    CU_ASSERT_EQUAL(r.status, 400);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.body.data, "unknown parameter namspace"));
    mv_util_buf_free(&r.body);

    /* Integers above 2^53 are exact, per series and aggregated. */
    CU_ASSERT_EQUAL_FATAL(get("/api/v1/value?metric=bytes_total", NULL, &r), 0);
    CU_ASSERT_EQUAL(r.status, 200);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.body.data, "\"value\":9007199254740993,"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.body.data, "\"value\":9007199254740993}"));
    mv_util_buf_free(&r.body);

    /* Per-segment collector series are served; the collector-wide ones say where they are. */
    CU_ASSERT_EQUAL_FATAL(get("/api/v1/value?metric=microview_segment_reads_total", NULL, &r), 0);
    CU_ASSERT_EQUAL(r.status, 200);
    mv_util_buf_free(&r.body);
    CU_ASSERT_EQUAL_FATAL(get("/api/v1/value?metric=microview_collector_ticks_total", NULL, &r), 0);
    CU_ASSERT_EQUAL(r.status, 404);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.body.data, "on /metrics only"));
    mv_util_buf_free(&r.body);
}

/* Workload queries: a selector over the pod's labels and identity labels; no match anywhere on
 * this node is the well-formed empty answer, never a 404. */
static void test_value_selector(void)
{
    static const struct {
        const char *query;
        long status;
        const char *body; /* substring */
    } cases[] = {
        {"metric=queue_depth&selector=app.kubernetes.io/name%3Dweb", 200, "\"value\":7"},
        {"metric=queue_depth&namespace=team-a&selector=tier%20in%20(front,back),!canary", 200,
         "\"count\":1"},
        {"metric=queue_depth&selector=pod%3Dweb-0", 200, "\"value\":7"}, /* identity label */
        {"metric=queue_depth&selector=app.kubernetes.io/name%3Dapi", 200,
         "\"value\":0,\"count\":0,\"series\":[],\"empty\":true"},
        {"metric=queue_depth&namespace=team-b&selector=tier", 200, "\"empty\":true"},
        {"metric=queue_depth&selector=tier%20notin%20(front)", 200, "\"empty\":true"},
        /* The metric's own labels are not pod labels: label= filters them. */
        {"metric=queue_depth&selector=queue%3Djobs", 200, "\"empty\":true"},
        /* A node without the workload's pods may not know the metric at all. */
        {"metric=no_such_metric&selector=tier", 200, "\"empty\":true"},
        {"metric=queue_depth&selector=tier%20in%20()", 400,
         "selector requirement 1 at byte 9: the value set is empty"},
        {"metric=queue_depth&selector=replicas%3E3", 400, "(gt/lt) is not supported"},
        {"metric=queue_depth&selector=app%3Dx%22y", 400, "unexpected character '?'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[512];
        reply r;
        snprintf(path, sizeof path, "/api/v1/value?%s", cases[i].query);
        CU_ASSERT_EQUAL_FATAL(get(path, NULL, &r), 0);
        int ok = r.status == cases[i].status && strstr(r.body.data, cases[i].body) != NULL &&
                 r.body.data[0] == '{';
        if (!ok)
            fprintf(stderr, "%s: %ld %s\n", cases[i].query, r.status, r.body.data);
        CU_ASSERT(ok);
        mv_util_buf_free(&r.body);
    }
}

int main(void)
{
    mv_log_init("test_api", MV_LOG_ERROR);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    if (serve_open() != 0) {
        fprintf(stderr, "cannot set up the collector and its HTTP server\n");
        serve_close();
        return 1;
    }
    static const mv_test tests[] = {
        {"value query parser: table of queries", test_value_parse},
        {"value query parser: label key length", test_value_label_key_limit},
        {"routes: health, index, metrics negotiation, segments", test_routes},
        {"route /api/v1/value: 200, 400, 404", test_value_route},
        {"route /api/v1/value: workload selector and the empty answer", test_value_selector},
    };
    int rc = MV_TEST_RUN("api", tests);
    serve_close();
    curl_global_cleanup();
    return rc;
}
