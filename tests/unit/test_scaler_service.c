/* Unit and fault tests for pkg/scaler/service (microview-scaler): a real gRPC client (mv_rpc
 * over loopback TCP) against the service on port 0, with stand-in collectors on 127.0.0.1 and
 * 127.0.0.2 (one port, as a DaemonSet's collectors share one) and a stand-in API server
 * (mv_httpd). One case per fault: unknown metric, malformed metadata, a selector
 * matching nothing, a collector down or slow under both policies, the API server unreachable, a
 * call storm, a stream's change, the scale target's selector and a kind without one. */
#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keda/externalscaler/externalscaler.pb-c.h"
#include "mv_httpd.h"
#include "mv_log.h"
#include "mv_rpc.h"
#include "mv_scsvc.h"
#include "mv_test.h"
#include "mv_util.h"

#define SVC "/externalscaler.ExternalScaler/"

/* ---- stand-in collectors ------------------------------------------------------------------ */

typedef struct collector {
    mv_httpd *h;
    char ip[16];
    atomic_int value_x100; /* the answer's value, hundredths */
    atomic_int delay_ms;
    atomic_int requests;
} collector;

static int h_value(void *arg, const mv_httpd_request *req, mv_httpd_response *resp)
{
    (void)req;
    collector *c = arg;
    atomic_fetch_add(&c->requests, 1);
    int d = atomic_load(&c->delay_ms);
    if (d)
        mv_test_sleep_ms((unsigned)d);
    char body[256];
    snprintf(body, sizeof body, "{\"metric\":\"m\",\"value\":%.2f,\"count\":1,\"series\":[]}",
             atomic_load(&c->value_x100) / 100.0);
    mv_httpd_set_status(resp, 200);
    mv_httpd_set_content_type(resp, "application/json");
    return mv_httpd_copy_body(resp, body, strlen(body));
}

static int collector_start(collector *c, const char *ip, uint16_t port, int value_x100)
{
    c->h = NULL;
    snprintf(c->ip, sizeof c->ip, "%s", ip);
    atomic_store(&c->value_x100, value_x100);
    atomic_store(&c->delay_ms, 0);
    atomic_store(&c->requests, 0);
    mv_httpd_config hc;
    mv_httpd_config_default(&hc);
    hc.addr = ip;
    hc.port = port;
    hc.threads = 4;
    if (mv_httpd_create(&hc, &c->h) || mv_httpd_route(c->h, "/api/v1/value", h_value, c) ||
        mv_httpd_start(c->h)) {
        mv_httpd_destroy(c->h);
        c->h = NULL;
        return -1;
    }
    return 0;
}

static void collector_stop(collector *c)
{
    mv_httpd_destroy(c->h);
    c->h = NULL;
}

/* ---- stand-in API server ------------------------------------------------------------------ */

#define POD(name, node, app, ip)                                                                   \
    "{\"metadata\":{\"name\":\"" name "\",\"labels\":{\"app\":\"" app "\"}},\"spec\":{"            \
    "\"nodeName\":\"" node "\"},\"status\":{\"phase\":\"Running\",\"podIP\":\"" ip "\"}}"

static const char WORKLOAD[] = "{\"kind\":\"PodList\",\"items\":[" POD(
    "c-1", "node-a", "checkout", "10.1.0.5") "," POD("c-2", "node-b", "checkout", "10.1.1.5") "]}";
static const char COLLECTORS[] =
    "{\"kind\":\"PodList\",\"items\":[" POD("mc-a", "node-a", "collector", "127.0.0.1") "," POD(
        "mc-b", "node-b", "collector", "127.0.0.2") "]}";
static const char SO_DEPLOY[] =
    "{\"apiVersion\":\"keda.sh/v1alpha1\",\"kind\":\"ScaledObject\",\"metadata\":{\"name\":"
    "\"checkout-so\"},\"spec\":{\"scaleTargetRef\":{\"name\":\"checkout\"},\"triggers\":[]}}";
static const char SO_JOB[] =
    "{\"spec\":{\"scaleTargetRef\":{\"apiVersion\":\"batch/v1\",\"kind\":\"Job\",\"name\":"
    "\"nightly\"}}}";
static const char SCALE[] = "{\"kind\":\"Scale\",\"apiVersion\":\"autoscaling/v1\",\"spec\":{"
                            "\"replicas\":2},\"status\":{\"replicas\":2,\"selector\":"
                            "\"app=checkout\"}}";

typedef struct api {
    mv_httpd *h;
    char url[64];
    atomic_int requests;
} api;

static int h_api(void *arg, const mv_httpd_request *req, mv_httpd_response *resp)
{
    api *a = arg;
    atomic_fetch_add(&a->requests, 1);
    const char *path = mv_httpd_path(req), *body = "{}";
    if (strcmp(path, "/api/v1/namespaces/shop/pods") == 0)
        body = WORKLOAD;
    else if (strcmp(path, "/api/v1/namespaces/microview/pods") == 0)
        body = COLLECTORS;
    else if (strstr(path, "/scaledobjects/checkout-so"))
        body = SO_DEPLOY;
    else if (strstr(path, "/scaledobjects/job-so"))
        body = SO_JOB;
    else if (strstr(path, "/deployments/checkout/scale"))
        body = SCALE;
    mv_httpd_set_status(resp, 200);
    mv_httpd_set_content_type(resp, "application/json");
    return mv_httpd_copy_body(resp, body, strlen(body));
}

static int api_start(api *a)
{
    static const char *const paths[] = {
        "/api/v1/namespaces/shop/pods", "/api/v1/namespaces/microview/pods",
        "/apis/keda.sh/v1alpha1/namespaces/shop/scaledobjects/checkout-so",
        "/apis/keda.sh/v1alpha1/namespaces/shop/scaledobjects/job-so",
        "/apis/apps/v1/namespaces/shop/deployments/checkout/scale"};
    mv_httpd_config hc;
    mv_httpd_config_default(&hc);
    atomic_store(&a->requests, 0);
    if (mv_httpd_create(&hc, &a->h))
        return -1;
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++)
        if (mv_httpd_route(a->h, paths[i], h_api, a))
            return -1;
    if (mv_httpd_start(a->h))
        return -1;
    snprintf(a->url, sizeof a->url, "http://127.0.0.1:%u", (unsigned)mv_httpd_port(a->h));
    return 0;
}

/* ---- the service and a client ------------------------------------------------------------- */

typedef struct env {
    api api;
    collector a, b;
    mv_scsvc *svc;
    mv_rpc_channel *ch;
    char target[64];
} env;

/* Starts the stand-ins and the service; `tune` may change the configuration first. */
static void env_start(env *e, void (*tune)(mv_scsvc_config *c))
{
    memset(e, 0, sizeof *e);
    CU_ASSERT_EQUAL_FATAL(api_start(&e->api), 0);
    CU_ASSERT_EQUAL_FATAL(collector_start(&e->a, "127.0.0.1", 0, 500), 0);
    uint16_t port = mv_httpd_port(e->a.h);
    if (collector_start(&e->b, "127.0.0.2", port, 725) != 0) {
        mv_test_skip("127.0.0.2 is not usable on this host's loopback");
        return;
    }
    mv_scsvc_config c;
    mv_scsvc_config_default(&c);
    c.listen = "127.0.0.1:0";
    c.metrics_listen = "127.0.0.1:0";
    c.api_server = e->api.url;
    c.collector_namespace = "microview";
    c.collector_selector = "app=collector";
    c.collector_port = port;
    c.api_timeout_ms = 1000;
    if (tune)
        tune(&c);
    char err[MV_ERR_MAX];
    int rc = mv_scsvc_start(&c, &e->svc, err, sizeof err);
    if (rc)
        fprintf(stderr, "mv_scsvc_start: %s\n", err);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    snprintf(e->target, sizeof e->target, "127.0.0.1:%u", mv_scsvc_grpc_port(e->svc));
    CU_ASSERT_EQUAL_FATAL(mv_rpc_channel_open(e->target, 0, &e->ch), 0);
}

static void env_stop(env *e)
{
    mv_rpc_channel_close(e->ch);
    mv_scsvc_stop(e->svc);
    collector_stop(&e->a);
    collector_stop(&e->b);
    mv_httpd_destroy(e->api.h);
}

/* A ScaledObjectRef of ScaledObject shop/NAME with "k=v|k=v" metadata. Returns its length. */
static size_t ref_pack(const char *name, const char *spec, uint8_t *buf, size_t cap)
{
    Externalscaler__ScaledObjectRef r = EXTERNALSCALER__SCALED_OBJECT_REF__INIT;
    Externalscaler__ScaledObjectRef__ScalerMetadataEntry e[16], *ep[16];
    char copy[1024], *save = NULL;
    size_t n = 0;
    snprintf(copy, sizeof copy, "%s", spec);
    for (char *p = strtok_r(copy, "|", &save); p && n < 16; p = strtok_r(NULL, "|", &save)) {
        char *eq = strchr(p, '=');
        externalscaler__scaled_object_ref__scaler_metadata_entry__init(&e[n]);
        *eq = '\0';
        e[n].key = p;
        e[n].value = eq + 1;
        ep[n] = &e[n];
        n++;
    }
    r.name = (char *)name;
    r.namespace_ = (char *)"shop";
    r.n_scalermetadata = n;
    r.scalermetadata = ep;
    size_t len = externalscaler__scaled_object_ref__get_packed_size(&r);
    CU_ASSERT_FATAL(len <= cap);
    return externalscaler__scaled_object_ref__pack(&r, buf);
}

/* timeoutMs: generous, so that a loaded machine (sanitizers) does not make a collector missing
 * where a case does not want one. */
#define BASE "metric=gen_requests_rate_short|targetValue=150.5|activationValue=10"
#define META BASE "|timeoutMs=3000"
#define SEL  "|selector=app=checkout"

/* GetMetrics of ScaledObject NAME: returns the status code; *value when OK. */
static int get_metrics(env *e, const char *name, const char *spec, const char *metric,
                       double *value, int64_t *ivalue, mv_rpc_status *st)
{
    uint8_t ref[2048];
    size_t rlen = ref_pack(name, spec, ref, sizeof ref);
    Externalscaler__ScaledObjectRef *r = externalscaler__scaled_object_ref__unpack(NULL, rlen, ref);
    Externalscaler__GetMetricsRequest g = EXTERNALSCALER__GET_METRICS_REQUEST__INIT;
    g.scaledobjectref = r;
    g.metricname = (char *)metric;
    uint8_t buf[4096];
    size_t len = externalscaler__get_metrics_request__pack(&g, buf);
    externalscaler__scaled_object_ref__free_unpacked(r, NULL);
    mv_rpc_buf resp = {0};
    int code = mv_rpc_unary(e->ch, SVC "GetMetrics", buf, len, 10000, &resp, st);
    if (code == MV_RPC_OK) {
        Externalscaler__GetMetricsResponse *m =
            externalscaler__get_metrics_response__unpack(NULL, resp.len, resp.data);
        CU_ASSERT_PTR_NOT_NULL_FATAL(m);
        CU_ASSERT_EQUAL_FATAL(m->n_metricvalues, 1);
        CU_ASSERT_STRING_EQUAL(m->metricvalues[0]->metricname, metric);
        if (value)
            *value = m->metricvalues[0]->metricvaluefloat;
        if (ivalue)
            *ivalue = m->metricvalues[0]->metricvalue;
        externalscaler__get_metrics_response__free_unpacked(m, NULL);
    } else
        fprintf(stderr, "GetMetrics %s: %s %s\n", name, mv_rpc_code_name(code), st->message);
    mv_rpc_buf_free(&resp);
    return code;
}

/* IsActive: returns the status code; *active when OK. */
static int is_active(env *e, const char *name, const char *spec, int *active, mv_rpc_status *st)
{
    uint8_t ref[2048];
    size_t rlen = ref_pack(name, spec, ref, sizeof ref);
    mv_rpc_buf resp = {0};
    int code = mv_rpc_unary(e->ch, SVC "IsActive", ref, rlen, 10000, &resp, st);
    if (code == MV_RPC_OK) {
        Externalscaler__IsActiveResponse *m =
            externalscaler__is_active_response__unpack(NULL, resp.len, resp.data);
        CU_ASSERT_PTR_NOT_NULL_FATAL(m);
        *active = m->result;
        externalscaler__is_active_response__free_unpacked(m, NULL);
    } else {
        fprintf(stderr, "IsActive %s: %s %s\n", name, mv_rpc_code_name(code), st->message);
    }
    mv_rpc_buf_free(&resp);
    return code;
}

/* GET /metrics of the service into a malloc'd string. */
static char *scrape(env *e)
{
    char url[96];
    snprintf(url, sizeof url, "http://127.0.0.1:%u/metrics", mv_scsvc_metrics_port(e->svc));
    CURL *h = curl_easy_init();
    mv_util_buf b = {.cap = 1 << 20};
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, mv_util_buf_curl_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    CURLcode rc = curl_easy_perform(h);
    curl_easy_cleanup(h);
    CU_ASSERT_EQUAL(rc, CURLE_OK);
    char *s = malloc(b.len + 1);
    memcpy(s, b.data ? b.data : "", b.len);
    s[b.len] = '\0';
    mv_util_buf_free(&b);
    return s;
}

static int has_line(const char *text, const char *line)
{
    const char *p = strstr(text, line);
    return p && (p == text || p[-1] == '\n') && p[strlen(line)] == '\n';
}

/* ---- cases -------------------------------------------------------------------------------- */

static void long_cache(mv_scsvc_config *c)
{
    c->cache_ms = 10000;
}

static void test_methods(void)
{
    env e;
    env_start(&e, long_cache);
    uint8_t ref[2048];
    size_t rlen = ref_pack("checkout-so", META SEL, ref, sizeof ref);
    mv_rpc_buf resp = {0};
    mv_rpc_status st;
    CU_ASSERT_EQUAL(mv_rpc_unary(e.ch, SVC "GetMetricSpec", ref, rlen, 5000, &resp, &st), 0);
    Externalscaler__GetMetricSpecResponse *spec =
        externalscaler__get_metric_spec_response__unpack(NULL, resp.len, resp.data);
    CU_ASSERT_PTR_NOT_NULL_FATAL(spec);
    CU_ASSERT_EQUAL_FATAL(spec->n_metricspecs, 1);
    CU_ASSERT_STRING_EQUAL(spec->metricspecs[0]->metricname, "gen_requests_rate_short");
    CU_ASSERT_EQUAL(spec->metricspecs[0]->targetsize, 151); /* rounded up */
    CU_ASSERT_DOUBLE_EQUAL(spec->metricspecs[0]->targetsizefloat, 150.5, 1e-9);
    externalscaler__get_metric_spec_response__free_unpacked(spec, NULL);
    mv_rpc_buf_free(&resp);

    double v = -1;
    int64_t iv = -1;
    CU_ASSERT_EQUAL(
        get_metrics(&e, "checkout-so", META SEL, "gen_requests_rate_short", &v, &iv, &st), 0);
    CU_ASSERT_DOUBLE_EQUAL(v, 12.25, 1e-9); /* 5 + 7.25 over both nodes */
    CU_ASSERT_EQUAL(iv, 12);
    int active = -1;
    CU_ASSERT_EQUAL(is_active(&e, "checkout-so", META SEL, &active, &st), 0);
    CU_ASSERT_EQUAL(active, 1); /* 12.25 > 10 */
    CU_ASSERT_EQUAL(is_active(&e, "checkout-so", META SEL "|activationValue=20", &active, &st), 0);
    CU_ASSERT_EQUAL(active, 0);

    /* StreamMetricSpec: UNIMPLEMENTED, said clearly. */
    mv_rpc_cstream *cs;
    CU_ASSERT_EQUAL_FATAL(mv_rpc_cstream_open(e.ch, SVC "StreamMetricSpec", ref, rlen, 5000, &cs),
                          0);
    mv_rpc_buf msg = {0};
    CU_ASSERT_EQUAL(mv_rpc_cstream_next(cs, 5000, &msg, &st), 0);
    CU_ASSERT_EQUAL(st.code, MV_RPC_UNIMPLEMENTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(st.message, "StreamMetricSpec is not implemented"));
    mv_rpc_cstream_close(cs);

    char *m = scrape(&e);
    if (getenv("SCSVC_DUMP"))
        fputs(m, stderr);
    CU_ASSERT(has_line(m, "microview_scaler_calls_total{method=\"GetMetrics\",code=\"OK\"} 1"));
    CU_ASSERT(has_line(m, "microview_scaler_calls_total{method=\"IsActive\",code=\"OK\"} 2"));
    CU_ASSERT(has_line(m, "microview_scaler_collectors_asked_total 2"));
    CU_ASSERT(has_line(m, "microview_scaler_cache_hits_total{cache=\"result\"} 2"));
    CU_ASSERT(
        has_line(m, "microview_scaler_call_duration_seconds_count{method=\"GetMetricSpec\"} 1"));
    free(m);
    env_stop(&e);
}

static void test_unknown_metric(void)
{
    env e;
    env_start(&e, NULL);
    mv_rpc_status st;
    CU_ASSERT_EQUAL(get_metrics(&e, "checkout-so", META SEL, "other_metric", NULL, NULL, &st),
                    MV_RPC_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(st.message, "metricName other_metric"));
    CU_ASSERT_PTR_NOT_NULL(strstr(st.message, "gen_requests_rate_short"));
    CU_ASSERT_EQUAL(atomic_load(&e.a.requests), 0); /* refused before any work */
    env_stop(&e);
}

static void test_bad_metadata(void)
{
    env e;
    env_start(&e, NULL);
    static const struct {
        const char *spec, *want;
    } cases[] = {
        {"metric=m|targetValue=abc" SEL, "metadata field targetValue"},
        {"metric=m|targetValue=1|treshold=3" SEL, "metadata field treshold: unknown"},
        {"targetValue=1" SEL, "metadata field metric: required"},
        {"metric=m|targetValue=1|selector=app in (", "metadata field selector"},
        {"metric=m|targetValue=1|missingCollectors=zero" SEL, "metadata field missingCollectors"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mv_rpc_status st;
        int active;
        int code = is_active(&e, "checkout-so", cases[i].spec, &active, &st);
        int ok = code == MV_RPC_INVALID_ARGUMENT && strstr(st.message, cases[i].want);
        if (!ok)
            fprintf(stderr, "%s: code %d %s\n", cases[i].spec, code, st.message);
        CU_ASSERT(ok);
    }
    env_stop(&e);
}

static void test_empty_selector(void)
{
    env e;
    env_start(&e, NULL);
    mv_rpc_status st;
    double v = -1;
    CU_ASSERT_EQUAL(get_metrics(&e, "nope-so", META "|selector=app=nope", "gen_requests_rate_short",
                                &v, NULL, &st),
                    MV_RPC_OK);
    CU_ASSERT_DOUBLE_EQUAL(v, 0, 0); /* an empty workload: a real 0, no error */
    int active = -1;
    CU_ASSERT_EQUAL(is_active(&e, "nope-so", META "|selector=app=nope", &active, &st), 0);
    CU_ASSERT_EQUAL(active, 0);
    CU_ASSERT_EQUAL(atomic_load(&e.a.requests) + atomic_load(&e.b.requests), 0);
    env_stop(&e);
}

static void test_collector_down_slow(void)
{
    env e;
    env_start(&e, NULL);
    mv_rpc_status st;
    double v;
    char burl[64];
    snprintf(burl, sizeof burl, "http://127.0.0.2:%u", (unsigned)mv_httpd_port(e.b.h));
    /* Slow: no answer within timeoutMs. */
    atomic_store(&e.b.delay_ms, 4000);
    uint64_t t0 = mv_test_mono_ms();
    CU_ASSERT_EQUAL(get_metrics(&e, "slow-so", BASE SEL "|timeoutMs=200", "gen_requests_rate_short",
                                &v, NULL, &st),
                    MV_RPC_UNAVAILABLE);
    CU_ASSERT(mv_test_mono_ms() - t0 < 3500); /* the deadline, not the collector, ends it */
    CU_ASSERT_PTR_NOT_NULL(strstr(st.message, burl));
    CU_ASSERT_PTR_NOT_NULL(strstr(st.message, "no answer within timeoutMs"));
    CU_ASSERT_EQUAL(get_metrics(&e, "slow-so", BASE SEL "|timeoutMs=200|missingCollectors=partial",
                                "gen_requests_rate_short", &v, NULL, &st),
                    MV_RPC_OK);
    CU_ASSERT_DOUBLE_EQUAL(v, 5, 1e-9);
    /* Down. */
    collector_stop(&e.b);
    CU_ASSERT_EQUAL(get_metrics(&e, "down-so", META SEL, "gen_requests_rate_short", &v, NULL, &st),
                    MV_RPC_UNAVAILABLE);
    CU_ASSERT_PTR_NOT_NULL(strstr(st.message, "collector missing"));
    CU_ASSERT_PTR_NOT_NULL(strstr(st.message, burl));
    CU_ASSERT_EQUAL(get_metrics(&e, "down-so", META SEL "|missingCollectors=partial",
                                "gen_requests_rate_short", &v, NULL, &st),
                    MV_RPC_OK);
    CU_ASSERT_DOUBLE_EQUAL(v, 5, 1e-9);
    char *m = scrape(&e);
    CU_ASSERT(has_line(m, "microview_scaler_partial_answers_total 2"));
    CU_ASSERT(has_line(m, "microview_scaler_collectors_missing_total 4"));
    CU_ASSERT(
        has_line(m, "microview_scaler_calls_total{method=\"GetMetrics\",code=\"UNAVAILABLE\"} 2"));
    free(m);
    env_stop(&e);
}

static void dead_api(mv_scsvc_config *c)
{
    c->api_server = "http://127.0.0.1:1";
}

static void test_api_unreachable(void)
{
    env e;
    env_start(&e, dead_api);
    mv_rpc_status st;
    int active;
    CU_ASSERT_EQUAL(is_active(&e, "checkout-so", META SEL, &active, &st), MV_RPC_UNAVAILABLE);
    CU_ASSERT_PTR_NOT_NULL(strstr(st.message, "API server"));
    CU_ASSERT_PTR_NOT_NULL(strstr(st.message, "pods of namespace shop"));
    /* Without a selector, the ScaledObject read is the request named. */
    CU_ASSERT_EQUAL(is_active(&e, "checkout-so", META, &active, &st), MV_RPC_UNAVAILABLE);
    CU_ASSERT_PTR_NOT_NULL(strstr(st.message, "ScaledObject shop/checkout-so"));
    char *m = scrape(&e);
    CU_ASSERT(has_line(m, "microview_scaler_discovery_errors_total 2"));
    free(m);
    env_stop(&e);
}

/* ---- call storm --------------------------------------------------------------------------- */

static void storm_cfg(mv_scsvc_config *c)
{
    c->workers = 1;
    c->max_pending = 2;
}

typedef struct storm_call {
    env *e;
    char name[32];
    int code;
    char msg[256];
} storm_call;

static void *storm_thread(void *arg)
{
    storm_call *sc = arg;
    mv_rpc_status st;
    double v;
    sc->code = get_metrics(sc->e, sc->name, META SEL, "gen_requests_rate_short", &v, NULL, &st);
    snprintf(sc->msg, sizeof sc->msg, "%s", st.message);
    return NULL;
}

static int one_request_seen(void *arg)
{
    return atomic_load(&((env *)arg)->a.requests) >= 1;
}

static void test_call_storm(void)
{
    env e;
    env_start(&e, storm_cfg);
    atomic_store(&e.a.delay_ms, 700); /* holds the one worker */
    enum { N = 8 };
    storm_call sc[N];
    pthread_t t[N];
    /* The first call occupies the worker; the others arrive while it is held. */
    for (int i = 0; i < N; i++) {
        sc[i] = (storm_call){.e = &e};
        snprintf(sc[i].name, sizeof sc[i].name, "storm-%d", i);
        CU_ASSERT_EQUAL_FATAL(pthread_create(&t[i], NULL, storm_thread, &sc[i]), 0);
        if (i == 0)
            CU_ASSERT_FATAL(mv_test_wait_until(one_request_seen, &e, 5000));
    }
    int ok = 0, busy = 0;
    for (int i = 0; i < N; i++) {
        pthread_join(t[i], NULL);
        if (sc[i].code == MV_RPC_OK)
            ok++;
        else if (sc[i].code == MV_RPC_RESOURCE_EXHAUSTED &&
                 strstr(sc[i].msg, "scaler busy: 2 calls pending"))
            busy++;
        else
            fprintf(stderr, "storm call %d: %d %s\n", i, sc[i].code, sc[i].msg);
    }
    CU_ASSERT_EQUAL(ok, 2); /* the one running and the one queued */
    CU_ASSERT_EQUAL(busy, N - 2);
    /* Recovered: the next call is answered. */
    atomic_store(&e.a.delay_ms, 0);
    mv_rpc_status st;
    double v;
    CU_ASSERT_EQUAL(
        get_metrics(&e, "after-storm", META SEL, "gen_requests_rate_short", &v, NULL, &st), 0);
    char *m = scrape(&e);
    char want[128];
    snprintf(want, sizeof want, "microview_scaler_rejected_calls_total{limit=\"max_pending\"} %d",
             N - 2);
    CU_ASSERT(has_line(m, want));
    free(m);
    env_stop(&e);
}

/* Calls for the same ScaledObject and metadata share one evaluation. */
static void single_cfg(mv_scsvc_config *c)
{
    c->workers = 2;
    c->cache_ms = 0; /* only calls during the evaluation share it */
}

static void test_single_flight(void)
{
    env e;
    env_start(&e, single_cfg);
    atomic_store(&e.a.delay_ms, 500);
    enum { N = 6 };
    storm_call sc[N];
    pthread_t t[N];
    for (int i = 0; i < N; i++) {
        sc[i] = (storm_call){.e = &e};
        snprintf(sc[i].name, sizeof sc[i].name, "same");
        CU_ASSERT_EQUAL_FATAL(pthread_create(&t[i], NULL, storm_thread, &sc[i]), 0);
        if (i == 0)
            CU_ASSERT_FATAL(mv_test_wait_until(one_request_seen, &e, 5000));
    }
    for (int i = 0; i < N; i++) {
        pthread_join(t[i], NULL);
        CU_ASSERT_EQUAL(sc[i].code, MV_RPC_OK);
    }
    CU_ASSERT_EQUAL(atomic_load(&e.a.requests), 1);
    env_stop(&e);
}

/* ---- streams ------------------------------------------------------------------------------ */

#define INTERVAL_MS 200

static void stream_cfg(mv_scsvc_config *c)
{
    c->stream_interval_ms = INTERVAL_MS;
    c->cache_ms = 20;
    c->max_streams = 1;
}

static int next_result(mv_rpc_cstream *cs, int wait_ms, int *result)
{
    mv_rpc_buf msg = {0};
    mv_rpc_status st;
    int rc = mv_rpc_cstream_next(cs, wait_ms, &msg, &st);
    if (rc == 1) {
        Externalscaler__IsActiveResponse *m =
            externalscaler__is_active_response__unpack(NULL, msg.len, msg.data);
        CU_ASSERT_PTR_NOT_NULL_FATAL(m);
        *result = m->result;
        externalscaler__is_active_response__free_unpacked(m, NULL);
    }
    mv_rpc_buf_free(&msg);
    return rc;
}

static void test_stream(void)
{
    env e;
    env_start(&e, stream_cfg);
    atomic_store(&e.a.value_x100, 100);
    atomic_store(&e.b.value_x100, 200); /* 3 < activation 10 */
    uint8_t ref[2048];
    size_t rlen = ref_pack("stream-so", META SEL, ref, sizeof ref);
    mv_rpc_cstream *cs, *cs2;
    CU_ASSERT_EQUAL_FATAL(mv_rpc_cstream_open(e.ch, SVC "StreamIsActive", ref, rlen, 0, &cs), 0);
    int r = -1;
    CU_ASSERT_EQUAL_FATAL(next_result(cs, 5000, &r), 1);
    CU_ASSERT_EQUAL(r, 0); /* the first result is sent */
    /* No change: nothing more is sent. */
    CU_ASSERT_EQUAL(next_result(cs, 3 * INTERVAL_MS, &r), -ETIMEDOUT);
    /* A second stream is over --max-streams. */
    CU_ASSERT_EQUAL_FATAL(mv_rpc_cstream_open(e.ch, SVC "StreamIsActive", ref, rlen, 5000, &cs2),
                          0);
    mv_rpc_buf msg = {0};
    mv_rpc_status st;
    CU_ASSERT_EQUAL(mv_rpc_cstream_next(cs2, 5000, &msg, &st), 0);
    CU_ASSERT_EQUAL(st.code, MV_RPC_RESOURCE_EXHAUSTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(st.message, "streams open"));
    mv_rpc_cstream_close(cs2);
    /* The value crosses the activation: the change is pushed by the first evaluation that
     * reads the new value, or the next one (one may have been under way with the old value):
     * counted in the collector's requests, not in time, so a loaded machine cannot fail it. */
    int asked0 = atomic_load(&e.a.requests);
    atomic_store(&e.a.value_x100, 5000);
    uint64_t t0 = mv_test_mono_ms();
    CU_ASSERT_EQUAL_FATAL(next_result(cs, 5000, &r), 1);
    uint64_t took = mv_test_mono_ms() - t0;
    int asked = atomic_load(&e.a.requests) - asked0;
    CU_ASSERT_EQUAL(r, 1);
    if (asked > 2)
        fprintf(stderr, "change after %d evaluations (%llu ms)\n", asked, (unsigned long long)took);
    CU_ASSERT(asked >= 1 && asked <= 2);
    /* And back. */
    atomic_store(&e.a.value_x100, 0);
    CU_ASSERT_EQUAL_FATAL(next_result(cs, 5000, &r), 1);
    CU_ASSERT_EQUAL(r, 0);
    mv_rpc_cstream_close(cs);
    char *m = scrape(&e);
    CU_ASSERT(has_line(m, "microview_scaler_rejected_calls_total{limit=\"max_streams\"} 1"));
    free(m);
    env_stop(&e);
}

/* ---- the scale target's selector ---------------------------------------------------------- */

static void test_scale_target(void)
{
    env e;
    env_start(&e, NULL);
    mv_rpc_status st;
    double v = -1;
    CU_ASSERT_EQUAL(get_metrics(&e, "checkout-so", META, "gen_requests_rate_short", &v, NULL, &st),
                    0);
    CU_ASSERT_DOUBLE_EQUAL(v, 12.25, 1e-9);
    /* Cached: the next evaluation asks the API server nothing about the target. */
    int before = atomic_load(&e.api.requests);
    CU_ASSERT_EQUAL(get_metrics(&e, "checkout-so", META "|aggregation=max",
                                "gen_requests_rate_short", &v, NULL, &st),
                    0);
    CU_ASSERT_DOUBLE_EQUAL(v, 7.25, 1e-9);
    CU_ASSERT_EQUAL(atomic_load(&e.api.requests), before);
    /* A Job has no scale subresource: the kind is named. */
    int active;
    CU_ASSERT_EQUAL(is_active(&e, "job-so", META, &active, &st), MV_RPC_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(st.message, "kind Job"));
    CU_ASSERT_PTR_NOT_NULL(strstr(st.message, "ScaledObject shop/job-so"));
    /* A ScaledObject the API server does not have ("{}" from the stand-in). */
    CU_ASSERT_EQUAL(is_active(&e, "gone-so", META, &active, &st), MV_RPC_UNAVAILABLE);
    CU_ASSERT_PTR_NOT_NULL(strstr(st.message, "ScaledObject shop/gone-so"));
    env_stop(&e);
}

/* ---- the parsers of the API objects ------------------------------------------------------- */

static void test_parsers(void)
{
    mv_scsvc_target_ref t;
    char err[256], sel[MV_SCSVC_SELECTOR_MAX];
    CU_ASSERT_EQUAL(mv_scsvc_parse_scaledobject(SO_DEPLOY, strlen(SO_DEPLOY), &t, err, sizeof err),
                    0);
    CU_ASSERT_STRING_EQUAL(t.api_version, "apps/v1");
    CU_ASSERT_STRING_EQUAL(t.kind, "Deployment");
    CU_ASSERT_STRING_EQUAL(t.name, "checkout");
    CU_ASSERT_STRING_EQUAL(mv_scsvc_scale_resource(&t), "deployments");
    const char *ss = "{\"spec\":{\"scaleTargetRef\":{\"kind\":\"StatefulSet\",\"name\":\"db\"}}}";
    CU_ASSERT_EQUAL(mv_scsvc_parse_scaledobject(ss, strlen(ss), &t, err, sizeof err), 0);
    CU_ASSERT_STRING_EQUAL(mv_scsvc_scale_resource(&t), "statefulsets");
    CU_ASSERT_EQUAL(mv_scsvc_parse_scaledobject(SO_JOB, strlen(SO_JOB), &t, err, sizeof err), 0);
    CU_ASSERT_PTR_NULL(mv_scsvc_scale_resource(&t));
    static const struct {
        const char *json, *want;
    } bad[] = {
        {"{}", "spec.scaleTargetRef: missing"},
        {"{\"spec\":{\"scaleTargetRef\":{}}}", "scaleTargetRef.name: missing"},
        {"{\"spec\":{\"scaleTargetRef\":{\"name\":\"A/B\"}}}", "name: not an object name"},
        {"{\"spec\":{\"scaleTargetRef\":{\"name\":7}}}", "name: not an object name"},
        {"{\"spec\":{\"scaleTargetRef\":{\"name\":\"x\",\"kind\":\"a b\"}}}", "kind"},
        {"{\"spec\":{\"scaleTargetRef\":{\"name\":\"x\",\"apiVersion\":\"\"}}}", "apiVersion"},
        {"{\"spec\":", "not a JSON object"},
        {"[1]", "not a JSON object"},
        {"{} {}", "not a JSON object"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = mv_scsvc_parse_scaledobject(bad[i].json, strlen(bad[i].json), &t, err, sizeof err);
        int ok = rc == -EINVAL && strstr(err, bad[i].want);
        if (!ok)
            fprintf(stderr, "%s: rc %d %s\n", bad[i].json, rc, err);
        CU_ASSERT(ok);
    }
    CU_ASSERT_EQUAL(mv_scsvc_parse_scale(SCALE, strlen(SCALE), sel, err, sizeof err), 0);
    CU_ASSERT_STRING_EQUAL(sel, "app=checkout");
    const char *nosel = "{\"status\":{\"replicas\":0}}";
    CU_ASSERT_EQUAL(mv_scsvc_parse_scale(nosel, strlen(nosel), sel, err, sizeof err), -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "status.selector: missing"));
}

int main(void)
{
    mv_log_init("test_scaler_service", MV_LOG_ERROR);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    static const mv_test tests[] = {
        {"methods: GetMetricSpec, GetMetrics, IsActive, StreamMetricSpec, /metrics", test_methods},
        {"fault: a metricName that is not the metadata's metric", test_unknown_metric},
        {"fault: malformed trigger metadata, the field named", test_bad_metadata},
        {"fault: a selector matching nothing is an empty workload (0, OK)", test_empty_selector},
        {"fault: a collector slow or down, under fail and partial", test_collector_down_slow},
        {"fault: the API server unreachable", test_api_unreachable},
        {"fault: a call storm is refused while workers are held, then recovers", test_call_storm},
        {"single flight: concurrent calls for one ScaledObject share one query",
         test_single_flight},
        {"StreamIsActive: first result, a change within two intervals, the stream limit",
         test_stream},
        {"scale target: Deployment scale subresource's selector, a kind without one",
         test_scale_target},
        {"parsers: ScaledObject scaleTargetRef and Scale status.selector", test_parsers},
    };
    int rc = MV_TEST_RUN("scaler_service", tests);
    curl_global_cleanup();
    return rc;
}
