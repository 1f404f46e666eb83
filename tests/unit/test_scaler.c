/* Unit and fault tests for pkg/scaler/core: trigger metadata (each bad field named) and the
 * fan-out to stand-in collectors on loopback (mv_httpd): sum and max with the empty value, a
 * collector down, slow, refusing the token or answering garbage, under both policies; the
 * selector and token as the collectors receive them; bounds on the collector count. */
#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keda/externalscaler/externalscaler.pb-c.h"
#include "mv_httpd.h"
#include "mv_kubec.h"
#include "mv_log.h"
#include "mv_scaler.h"
#include "mv_test.h"

/* ---- metadata ----------------------------------------------------------------------------- */

static int parse_kv(const char *spec, mv_scaler_meta *m, char *err, size_t errlen)
{
    /* spec: "k=v|k=v" */
    char buf[1024], *keys[16], *vals[16];
    size_t n = 0;
    snprintf(buf, sizeof buf, "%s", spec);
    for (char *save = NULL, *p = strtok_r(buf, "|", &save); p && n < 16;
         p = strtok_r(NULL, "|", &save)) {
        char *eq = strchr(p, '=');
        keys[n] = p;
        vals[n] = eq ? eq + 1 : (char *)"";
        if (eq)
            *eq = '\0';
        n++;
    }
    return mv_scaler_meta_parse((const char *const *)keys, (const char *const *)vals, n, m, err,
                                errlen);
}

#define GOOD "metric=gen_requests_rate_short|namespace=shop|selector=app=checkout|targetValue=150"

static void test_meta(void)
{
    static const struct {
        const char *spec, *want; /* want: NULL = accepted, else an error substring */
    } cases[] = {
        {GOOD, NULL},
        {GOOD "|aggregation=max|timeoutMs=250|missingCollectors=partial|activationValue=0.5", NULL},
        {"namespace=shop|selector=a|targetValue=1", "metadata field metric: required"},
        {"metric=m|selector=a|targetValue=1", "metadata field namespace: required"},
        {"metric=m|namespace=shop|targetValue=1", NULL}, /* the scale target's selector */
        {"metric=m|namespace=shop|selector=a", "metadata field targetValue: required"},
        {GOOD "|metric=9bad", "metadata field metric: a series name"},
        {GOOD "|namespace=Shop", "metadata field namespace: a namespace name"},
        {GOOD "|selector=app in ()", "metadata field selector: selector requirement 1"},
        {GOOD "|selector=", "metadata field selector: selector requirement 1 at byte 0"},
        {GOOD "|targetValue=0", "metadata field targetValue: a number above 0"},
        {GOOD "|targetValue=1e999", "metadata field targetValue"},
        {GOOD "|targetValue=12abc", "metadata field targetValue"},
        {GOOD "|activationValue=-1", "metadata field activationValue"},
        {GOOD "|aggregation=average", "metadata field aggregation: sum or max"},
        {GOOD "|timeoutMs=5", "metadata field timeoutMs: whole milliseconds, 10..10000"},
        {GOOD "|timeoutMs=100.5", "metadata field timeoutMs"},
        {GOOD "|missingCollectors=zero", "metadata field missingCollectors: fail or partial"},
        {GOOD "|treshold=5", "metadata field treshold: unknown"},
        /* KEDA's own keys of the external triggers come along and are not ours to refuse. */
        {GOOD "|scalerAddress=microview-scaler.microview.svc:9090|enableTLS=false|unsafeSsl=true",
         NULL},
        /* KEYFromEnv: the value KEDA resolved from the environment variable. */
        {"metric=m|namespace=shop|targetValueFromEnv=150", NULL},
        {"metric=m|namespace=shop|targetValueFromEnv=0", "metadata field targetValue: a number"},
        {GOOD "|targetValueFromEnv=150", "metadata field targetValue: given both directly"},
        {GOOD "|thresholdFromEnv=5", "metadata field threshold: unknown"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mv_scaler_meta m;
        char err[512];
        int rc = parse_kv(cases[i].spec, &m, err, sizeof err);
        int ok = cases[i].want ? rc == -EINVAL && strstr(err, cases[i].want) != NULL : rc == 0;
        if (!ok)
            fprintf(stderr, "%s: rc=%d err=%s\n", cases[i].spec, rc, err);
        CU_ASSERT(ok);
    }
    mv_scaler_meta m;
    char err[256];
    CU_ASSERT_EQUAL_FATAL(parse_kv(GOOD, &m, err, sizeof err), 0);
    CU_ASSERT_EQUAL(m.agg, MV_SCALER_SUM);
    CU_ASSERT_EQUAL(m.policy, MV_SCALER_FAIL);
    CU_ASSERT_EQUAL(m.timeout_ms, MV_SCALER_TIMEOUT_MS_DEF);
    CU_ASSERT_DOUBLE_EQUAL(m.target, 150, 1e-9);
    CU_ASSERT_EQUAL(m.has_selector, 1);
    CU_ASSERT_EQUAL_FATAL(parse_kv("metric=m|namespace=shop|targetValue=1", &m, err, sizeof err),
                          0);
    CU_ASSERT_EQUAL(m.has_selector, 0);
}

/* KEDA's ScaledObjectRef as the scaler receives it: metadata map, namespace default. */
static size_t pack_ref(const char *ns, const char *const *kv, size_t n, uint8_t *buf, size_t cap)
{
    Externalscaler__ScaledObjectRef r = EXTERNALSCALER__SCALED_OBJECT_REF__INIT;
    Externalscaler__ScaledObjectRef__ScalerMetadataEntry e[8], *ep[8];
    r.name = (char *)"checkout";
    r.namespace_ = (char *)ns;
    for (size_t i = 0; i < n; i++) {
        externalscaler__scaled_object_ref__scaler_metadata_entry__init(&e[i]);
        e[i].key = (char *)kv[2 * i];
        e[i].value = (char *)kv[2 * i + 1];
        ep[i] = &e[i];
    }
    r.n_scalermetadata = n;
    r.scalermetadata = ep;
    size_t len = externalscaler__scaled_object_ref__get_packed_size(&r);
    return len <= cap ? externalscaler__scaled_object_ref__pack(&r, buf) : 0;
}

static void test_ref(void)
{
    uint8_t buf[4096];
    char err[256];
    mv_scaler_meta m;
    const char *kv[] = {"metric",      "gen_requests_rate_short",
                        "selector",    "app=checkout",
                        "targetValue", "150",
                        "namespace",   "other"};
    size_t len = pack_ref("shop", kv, 3, buf, sizeof buf);
    CU_ASSERT_EQUAL_FATAL(mv_scaler_meta_from_ref(buf, len, &m, err, sizeof err), 0);
    CU_ASSERT_STRING_EQUAL(m.namespace_, "shop"); /* the ScaledObject's namespace */
    len = pack_ref("shop", kv, 4, buf, sizeof buf);
    CU_ASSERT_EQUAL_FATAL(mv_scaler_meta_from_ref(buf, len, &m, err, sizeof err), 0);
    CU_ASSERT_STRING_EQUAL(m.namespace_, "other"); /* metadata wins */
    const char *bad[] = {"metric", "m", "selector", "app=x", "targetValue", "-3"};
    len = pack_ref("shop", bad, 3, buf, sizeof buf);
    CU_ASSERT_EQUAL(mv_scaler_meta_from_ref(buf, len, &m, err, sizeof err), -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "metadata field targetValue"));
    static const uint8_t junk[] = {0x1a, 0xff, 0xff, 0xff, 0x0f};
    CU_ASSERT_EQUAL(mv_scaler_meta_from_ref(junk, sizeof junk, &m, err, sizeof err), -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "malformed ScaledObjectRef"));
    static uint8_t big[MV_SCALER_REF_MAX + 1];
    CU_ASSERT_EQUAL(mv_scaler_meta_from_ref(big, sizeof big, &m, err, sizeof err), -EINVAL);
}

/* ---- stand-in collectors ------------------------------------------------------------------ */

typedef struct standin {
    mv_httpd *h;
    char base[64];
    unsigned status;
    const char *body;
    unsigned delay_ms;
    char last_selector[512];
    char last_auth[256];
    char last_agg[16];
} standin;

static int h_value(void *arg, const mv_httpd_request *req, mv_httpd_response *resp)
{
    standin *s = arg;
    const char *sel = mv_httpd_query(req, "selector"), *agg = mv_httpd_query(req, "agg");
    const char *auth = mv_httpd_header(req, "Authorization");
    snprintf(s->last_selector, sizeof s->last_selector, "%s", sel ? sel : "");
    snprintf(s->last_agg, sizeof s->last_agg, "%s", agg ? agg : "");
    snprintf(s->last_auth, sizeof s->last_auth, "%s", auth ? auth : "");
    if (s->delay_ms)
        mv_test_sleep_ms(s->delay_ms);
    mv_httpd_set_status(resp, s->status);
    mv_httpd_set_content_type(resp, "application/json");
    return mv_httpd_copy_body(resp, s->body, strlen(s->body));
}

static int standin_start(standin *s, unsigned status, const char *body, unsigned delay_ms)
{
    memset(s, 0, sizeof *s);
    s->status = status;
    s->body = body;
    s->delay_ms = delay_ms;
    mv_httpd_config c;
    mv_httpd_config_default(&c);
    if (mv_httpd_create(&c, &s->h) || mv_httpd_route(s->h, "/api/v1/value", h_value, s) ||
        mv_httpd_start(s->h))
        return -1;
    snprintf(s->base, sizeof s->base, "http://127.0.0.1:%u", (unsigned)mv_httpd_port(s->h));
    return 0;
}

static void standin_stop(standin *s)
{
    mv_httpd_destroy(s->h);
    s->h = NULL;
}

/* A loopback port nothing listens on: a stand-in started and stopped. */
static void dead_base(char *out, size_t len)
{
    standin s;
    CU_ASSERT_EQUAL_FATAL(standin_start(&s, 200, "{}", 0), 0);
    snprintf(out, len, "%s", s.base);
    standin_stop(&s);
}

static const char *V5 = "{\"metric\":\"m\",\"value\":5,\"count\":2,\"series\":[]}";
static const char *V7 = "{\"metric\":\"m\",\"value\":7.5,\"count\":1,\"series\":[]}";
static const char *EMPTY =
    "{\"metric\":\"m\",\"value\":0,\"count\":0,\"series\":[],\"empty\":true}";

static void meta_for(mv_scaler_meta *m, const char *extra)
{
    char spec[512], err[256];
    snprintf(spec, sizeof spec,
             "metric=gen_requests_rate_short|namespace=shop|targetValue=150"
             "|selector=app=checkout,tier in (web,api),!canary%s",
             extra);
    CU_ASSERT_EQUAL_FATAL(parse_kv(spec, m, err, sizeof err), 0);
}

static void test_sum_max_empty(void)
{
    standin a, b, c;
    CU_ASSERT_EQUAL_FATAL(standin_start(&a, 200, V5, 0), 0);
    CU_ASSERT_EQUAL_FATAL(standin_start(&b, 200, EMPTY, 0), 0);
    CU_ASSERT_EQUAL_FATAL(standin_start(&c, 200, V7, 0), 0);
    const char *bases[] = {a.base, b.base, c.base};
    mv_scaler_meta m;
    mv_scaler_result r;
    meta_for(&m, "");
    mv_scaler_conns *conns = mv_scaler_conns_create();
    CU_ASSERT_PTR_NOT_NULL_FATAL(conns);
    for (int round = 0; round < 3; round++) /* the kept connections serve the next query */
        CU_ASSERT_EQUAL(mv_scaler_query(conns, &m, bases, 3, "tok-1", &r), 0);
    mv_scaler_conns_destroy(conns);
    CU_ASSERT_DOUBLE_EQUAL(r.value, 12.5, 1e-9);
    CU_ASSERT_EQUAL(r.asked, 3);
    CU_ASSERT_EQUAL(r.answered, 3);
    CU_ASSERT_EQUAL(r.missing, 0);
    CU_ASSERT_EQUAL(r.series, 3);
    /* What the collectors received: the canonical selector, agg, the bearer token. */
    CU_ASSERT_STRING_EQUAL(a.last_selector, "app=checkout,tier in (web,api),!canary");
    CU_ASSERT_STRING_EQUAL(a.last_agg, "sum");
    CU_ASSERT_STRING_EQUAL(c.last_auth, "Bearer tok-1");
    meta_for(&m, "|aggregation=max");
    CU_ASSERT_EQUAL(mv_scaler_query(NULL, &m, bases, 3, NULL, &r), 0);
    CU_ASSERT_DOUBLE_EQUAL(r.value, 7.5, 1e-9);
    CU_ASSERT_STRING_EQUAL(a.last_agg, "max");
    CU_ASSERT_STRING_EQUAL(a.last_auth, "");
    /* Only empty answers: the workload has no pod with the metric, a real 0. */
    const char *empties[] = {b.base, b.base};
    meta_for(&m, "");
    CU_ASSERT_EQUAL(mv_scaler_query(NULL, &m, empties, 2, NULL, &r), 0);
    CU_ASSERT_DOUBLE_EQUAL(r.value, 0, 0);
    CU_ASSERT_EQUAL(r.answered, 2);
    standin_stop(&a);
    standin_stop(&b);
    standin_stop(&c);
}

/* Missing collectors: down, refusing, garbage, slow. Never a silent 0. */
static void test_missing(void)
{
    standin ok, denied, garbage, nan_body, slow;
    char dead[64];
    dead_base(dead, sizeof dead);
    CU_ASSERT_EQUAL_FATAL(standin_start(&ok, 200, V5, 0), 0);
    CU_ASSERT_EQUAL_FATAL(standin_start(&denied, 401, "unauthorized\n", 0), 0);
    CU_ASSERT_EQUAL_FATAL(standin_start(&garbage, 200, "{\"value\":", 0), 0);
    CU_ASSERT_EQUAL_FATAL(standin_start(&nan_body, 200, "{\"value\":null,\"count\":3}", 0), 0);
    CU_ASSERT_EQUAL_FATAL(standin_start(&slow, 200, V7, 3000), 0);
    static const struct {
        int which;
        const char *why;
    } cases[] = {
        {0, "Couldn't connect"},           {1, "HTTP 401"},
        {2, "not a value document"},       {3, "not a value document"},
        {4, "no answer within timeoutMs"},
    };
    const char *bad[] = {dead, denied.base, garbage.base, nan_body.base, slow.base};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *bases[] = {ok.base, bad[cases[i].which]};
        mv_scaler_meta m;
        mv_scaler_result r;
        meta_for(&m, "|timeoutMs=200");
        uint64_t t0 = mv_test_mono_ms();
        int rc = mv_scaler_query(NULL, &m, bases, 2, NULL, &r);
        uint64_t took = mv_test_mono_ms() - t0;
        int ok1 = rc == -EIO && r.missing == 1 && r.answered == 1 &&
                  strstr(r.first_missing, bad[cases[i].which]) &&
                  strstr(r.first_missing, cases[i].why);
        if (!ok1)
            fprintf(stderr, "fail policy, case %zu: rc=%d missing=%zu %s\n", i, rc, r.missing,
                    r.first_missing);
        CU_ASSERT(ok1);
        /* The deadline bounds the call whatever the slow collector does (it sleeps 3 s). */
        CU_ASSERT(took < 2000);
        meta_for(&m, "|timeoutMs=200|missingCollectors=partial");
        rc = mv_scaler_query(NULL, &m, bases, 2, NULL, &r);
        CU_ASSERT_EQUAL(rc, 0);
        CU_ASSERT_DOUBLE_EQUAL(r.value, 5, 1e-9);
        CU_ASSERT_EQUAL(r.missing, 1);
        CU_ASSERT_PTR_NOT_NULL(strstr(r.first_missing, cases[i].why));
    }
    /* Partial with nothing answering fails: no value computed from nobody. */
    const char *none[] = {dead, denied.base};
    mv_scaler_meta m;
    mv_scaler_result r;
    meta_for(&m, "|timeoutMs=200|missingCollectors=partial");
    CU_ASSERT_EQUAL(mv_scaler_query(NULL, &m, none, 2, NULL, &r), -EIO);
    CU_ASSERT_EQUAL(r.answered, 0);
    standin_stop(&ok);
    standin_stop(&denied);
    standin_stop(&garbage);
    standin_stop(&nan_body);
    standin_stop(&slow);
}

static void test_bounds(void)
{
    mv_scaler_meta m;
    mv_scaler_result r;
    meta_for(&m, "");
    CU_ASSERT_EQUAL(mv_scaler_query(NULL, &m, NULL, 0, NULL, &r), -ENOENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.first_missing, "no collector"));
    static const char *many[MV_SCALER_COLLECTORS_MAX + 1];
    for (size_t i = 0; i <= MV_SCALER_COLLECTORS_MAX; i++)
        many[i] = "http://127.0.0.1:1";
    CU_ASSERT_EQUAL(mv_scaler_query(NULL, &m, many, MV_SCALER_COLLECTORS_MAX + 1, NULL, &r),
                    -E2BIG);
}

/* ---- discovery against a stand-in API server ------------------------------------------ */

#define POD(ns, name, node, phase, app, ip)                                                        \
    "{\"metadata\":{\"namespace\":\"" ns "\",\"name\":\"" name "\",\"labels\":{\"app\":\"" app     \
    "\"}},\"spec\":{\"nodeName\":\"" node "\"},\"status\":{\"phase\":\"" phase                     \
    "\",\"podIP\":\"" ip "\"}}"

/* The stand-in ignores labelSelector (as a cache might serve more): the scaler matches again. */
static const char WORKLOAD[] = "{\"kind\":\"PodList\",\"items\":[" POD(
    "shop", "c-1", "node-a", "Running", "checkout",
    "10.1.0.5") "," POD("shop", "c-2", "node-b", "Running", "checkout",
                        "10.1.1.5") "," POD("shop", "c-3", "node-c", "Pending", "checkout",
                                            "") "," POD("shop", "o-1", "node-d", "Running", "other",
                                                        "10.1.3.5") "," POD("shop", "c-4", "node-e",
                                                                            "Running", "checkout",
                                                                            "10.1.4.5") "," POD("sh"
                                                                                                "o"
                                                                                                "p",
                                                                                                "c-"
                                                                                                "5",
                                                                                                "no"
                                                                                                "de"
                                                                                                "-"
                                                                                                "a",
                                                                                                "Ru"
                                                                                                "nn"
                                                                                                "in"
                                                                                                "g",
                                                                                                "ch"
                                                                                                "ec"
                                                                                                "ko"
                                                                                                "u"
                                                                                                "t",
                                                                                                "10"
                                                                                                ".1"
                                                                                                ".0"
                                                                                                "."
                                                                                                "6") "]}";
static const char COLLECTORS[] = "{\"kind\":\"PodList\",\"items\":[" POD(
    "microview", "mc-a", "node-a", "Running", "microview-collector",
    "10.0.0.1") "," POD("microview", "mc-b", "node-b", "Running", "microview-collector",
                        "fd00::2") "," POD("microview", "mc-d", "node-d", "Running",
                                           "microview-collector", "10.0.0.4") "]}";

typedef struct apistandin {
    unsigned status;
    const char *workload, *collectors;
} apistandin;

static int h_pods(void *arg, const mv_httpd_request *req, mv_httpd_response *resp)
{
    apistandin *a = arg;
    const char *path = mv_httpd_path(req);
    const char *body = strstr(path, "/namespaces/shop/") ? a->workload : a->collectors;
    mv_httpd_set_status(resp, a->status);
    return mv_httpd_copy_body(resp, body, strlen(body));
}

static void test_discover(void)
{
    apistandin a = {200, WORKLOAD, COLLECTORS};
    mv_httpd_config c;
    mv_httpd_config_default(&c);
    mv_httpd *h;
    CU_ASSERT_EQUAL_FATAL(mv_httpd_create(&c, &h), 0);
    CU_ASSERT_EQUAL_FATAL(mv_httpd_route(h, "/api/v1/namespaces/shop/pods", h_pods, &a), 0);
    CU_ASSERT_EQUAL_FATAL(mv_httpd_route(h, "/api/v1/namespaces/microview/pods", h_pods, &a), 0);
    CU_ASSERT_EQUAL_FATAL(mv_httpd_start(h), 0);
    char api[64], err[512];
    snprintf(api, sizeof api, "http://127.0.0.1:%u", (unsigned)mv_httpd_port(h));
    mv_kubec_cred_opts co = {.log_area = "scaler"};
    mv_kubec_cred *cred;
    CU_ASSERT_EQUAL_FATAL(mv_kubec_cred_create(&co, &cred), 0);
    mv_scaler_discovery d = {.api = api,
                             .cred = cred,
                             .collector_namespace = "microview",
                             .collector_port = 9469,
                             .timeout_ms = 1000};
    CU_ASSERT_EQUAL_FATAL(
        mv_lsel_parse("app=microview-collector", 23, &d.collector_selector, err, sizeof err), 0);
    mv_scaler_meta m;
    meta_for(&m, "");
    CU_ASSERT_EQUAL_FATAL(mv_lsel_parse("app=checkout", 12, &m.selector, err, sizeof err), 0);
    mv_scaler_targets t;
    CU_ASSERT_EQUAL_FATAL(mv_scaler_discover(&d, &m, &t, err, sizeof err), 0);
    /* node-a (two pods, once), node-b (IPv6 collector), node-e (no collector); not node-c
     * (Pending), not node-d (another app). */
    CU_ASSERT_EQUAL(t.nodes, 3);
    CU_ASSERT_EQUAL(t.n, 2);
    CU_ASSERT(t.n == 2 && strcmp(t.bases[0], "http://10.0.0.1:9469") == 0 &&
              strcmp(t.bases[1], "http://[fd00::2]:9469") == 0);
    CU_ASSERT_EQUAL(t.uncovered, 1);
    CU_ASSERT_STRING_EQUAL(t.first_uncovered, "node-e");
    mv_scaler_targets_clear(&t);
    /* A selector matching nothing: no node, nothing to ask. */
    CU_ASSERT_EQUAL_FATAL(mv_lsel_parse("app=nope", 8, &m.selector, err, sizeof err), 0);
    CU_ASSERT_EQUAL(mv_scaler_discover(&d, &m, &t, err, sizeof err), 0);
    CU_ASSERT_EQUAL(t.nodes, 0);
    CU_ASSERT_EQUAL(t.n, 0);
    mv_scaler_targets_clear(&t);
    /* The API server refusing, answering garbage, unreachable: -EIO naming the request. */
    a.status = 403;
    CU_ASSERT_EQUAL(mv_scaler_discover(&d, &m, &t, err, sizeof err), -EIO);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "pods of namespace shop: HTTP 403"));
    a.status = 200;
    a.workload = "{\"items\":";
    CU_ASSERT_EQUAL(mv_scaler_discover(&d, &m, &t, err, sizeof err), -EIO);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "not a pod list"));
    mv_httpd_destroy(h);
    CU_ASSERT_EQUAL(mv_scaler_discover(&d, &m, &t, err, sizeof err), -EIO);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "pods of namespace shop"));
    mv_kubec_cred_destroy(cred);
}

int main(void)
{
    mv_log_init("test_scaler", MV_LOG_ERROR);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    static const mv_test tests[] = {
        {"metadata: accepted forms, and every bad field named", test_meta},
        {"metadata from KEDA's ScaledObjectRef: namespace default, bad field, malformed bytes",
         test_ref},
        {"query: sum and max over collectors, the empty value, selector and token sent",
         test_sum_max_empty},
        {"query: down, refusing, garbage and slow collectors under fail and partial", test_missing},
        {"query: no collector, too many collectors", test_bounds},
        {"discovery: the workload's nodes and their collectors; API server faults", test_discover},
    };
    int rc = MV_TEST_RUN("scaler", tests);
    curl_global_cleanup();
    return rc;
}
