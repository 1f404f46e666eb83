/* scaler_bench: latency of one scaler query (mv_scaler_query: 50 collectors asked in parallel
 * with libcurl multi, answers aggregated) against stand-in collectors on loopback, and, as the
 * peer measured in the same run, the same 50 requests asked one after another over one reused
 * connection each (libcurl easy). The stand-ins are the collector's HTTP server (mv_httpd) with
 * a canned /api/v1/value answer, so the figure is the fan-out's cost, not the collectors'
 * rendering.
 *
 * Then the same fan-out through microview-scaler's gRPC service (pkg/scaler/service): GetMetrics
 * calls from a real gRPC client over loopback, the workload's collectors found through a
 * stand-in API server (50 nodes, one collector each on 127.0.0.1..127.0.0.50, one port), the
 * result cache off (--cache-ms 0) so that every call asks every collector; discovery is cached
 * (its TTL), as between KEDA's polls. The goal: GetMetrics p99 <= 20 ms at 50 collectors.
 *
 * Usage: scaler_bench [COLLECTORS [QUERIES]]   (defaults 50 and 400)
 * Prints p50, p99 and max per method and the p99 ratio. */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "keda/externalscaler/externalscaler.pb-c.h"
#include "mv_httpd.h"
#include "mv_log.h"
#include "mv_rpc.h"
#include "mv_scaler.h"
#include "mv_scsvc.h"
#include "mv_util.h"

static const char ANSWER[] =
    "{\"metric\":\"gen_requests_rate_short\",\"aggregation\":\"sum\",\"value\":312.5,\"count\":2,"
    "\"series\":[{\"labels\":{\"container\":\"app\",\"namespace\":\"shop\",\"pod\":\"checkout-1\"},"
    "\"value\":150.0},{\"labels\":{\"container\":\"app\",\"namespace\":\"shop\",\"pod\":"
    "\"checkout-2\"},\"value\":162.5}]}";

static int h_value(void *arg, const mv_httpd_request *req, mv_httpd_response *resp)
{
    (void)arg;
    (void)req;
    mv_httpd_set_status(resp, 200);
    mv_httpd_set_content_type(resp, "application/json");
    return mv_httpd_copy_body(resp, ANSWER, sizeof ANSWER - 1);
}

/* ---- the gRPC service: stand-in API server listing nc nodes' pods and collectors ---- */

typedef struct api_lists {
    char *workload, *collectors;
} api_lists;

static int h_pods(void *arg, const mv_httpd_request *req, mv_httpd_response *resp)
{
    api_lists *a = arg;
    const char *body =
        strstr(mv_httpd_path(req), "/namespaces/shop/") ? a->workload : a->collectors;
    mv_httpd_set_status(resp, 200);
    mv_httpd_set_content_type(resp, "application/json");
    return mv_httpd_copy_body(resp, body, strlen(body));
}

static char *pod_list(size_t n, int collectors)
{
    size_t cap = 256 + n * 300, at = 0;
    char *s = malloc(cap);
    if (!s)
        return NULL;
    at += (size_t)snprintf(s + at, cap - at, "{\"kind\":\"PodList\",\"items\":[");
    for (size_t i = 0; i < n; i++)
        at += (size_t)snprintf(
            s + at, cap - at,
            "%s{\"metadata\":{\"name\":\"%s-%zu\",\"labels\":{\"app\":\"%s\"}},\"spec\":"
            "{\"nodeName\":\"node-%zu\"},\"status\":{\"phase\":\"Running\",\"podIP\":"
            "\"%s%zu\"}}",
            i ? "," : "", collectors ? "mc" : "checkout", i, collectors ? "collector" : "checkout",
            i, collectors ? "127.0.0." : "10.1.0.", i + 1);
    snprintf(s + at, cap - at, "]}");
    return s;
}

static void report(const char *what, double *ms, size_t n)
{
    qsort(ms, n, sizeof *ms, bench_cmp_double);
    printf("%-34s p50 %7.3f ms  p99 %7.3f ms  max %7.3f ms  (%zu queries)\n", what, ms[n / 2],
           ms[(n * 99) / 100], ms[n - 1], n);
}

int main(int argc, char **argv)
{
    size_t nc = argc > 1 ? strtoul(argv[1], NULL, 10) : 50;
    size_t nq = argc > 2 ? strtoul(argv[2], NULL, 10) : 400;
    if (nc == 0 || nc > 512 || nq < 10) {
        fprintf(stderr, "usage: scaler_bench [COLLECTORS 1..512 [QUERIES >= 10]]\n");
        return 2;
    }
    mv_log_init("scaler_bench", MV_LOG_WARN);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    mv_httpd **h = calloc(nc, sizeof *h);
    char(*bases)[64] = calloc(nc, sizeof *bases);
    const char **bp = calloc(nc, sizeof *bp);
    double *ms = calloc(nq, sizeof *ms);
    if (!h || !bases || !bp || !ms)
        return 1;
    for (size_t i = 0; i < nc; i++) {
        mv_httpd_config c;
        mv_httpd_config_default(&c);
        if (mv_httpd_create(&c, &h[i]) || mv_httpd_route(h[i], "/api/v1/value", h_value, NULL) ||
            mv_httpd_start(h[i])) {
            fprintf(stderr, "cannot start stand-in collector %zu\n", i);
            return 1;
        }
        snprintf(bases[i], sizeof bases[i], "http://127.0.0.1:%u", (unsigned)mv_httpd_port(h[i]));
        bp[i] = bases[i];
    }
    const char *keys[] = {"metric", "namespace", "selector", "targetValue"};
    const char *vals[] = {"gen_requests_rate_short", "shop",
                          "app.kubernetes.io/name=checkout,tier in (web)", "150"};
    mv_scaler_meta m;
    char err[256];
    if (mv_scaler_meta_parse(keys, vals, 4, &m, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    printf("scaler_bench: %zu stand-in collectors on loopback, %zu queries per method\n", nc, nq);
    /* Parallel fan-out, as the scaler does it, connections kept between queries. */
    mv_scaler_conns *conns = mv_scaler_conns_create();
    for (size_t q = 0; q < nq + 10; q++) {
        mv_scaler_result r;
        uint64_t t0 = bench_now_ns();
        int rc = mv_scaler_query(conns, &m, bp, nc, "bench-token", &r);
        uint64_t t1 = bench_now_ns();
        if (rc != 0 || r.answered != nc) {
            fprintf(stderr, "query failed: rc=%d %s\n", rc, r.first_missing);
            return 1;
        }
        if (q >= 10) /* warm-up */
            ms[q - 10] = (double)(t1 - t0) / 1e6;
    }
    double p99_par;
    report("parallel, kept connections", ms, nq);
    p99_par = ms[(nq * 99) / 100];
    mv_scaler_conns_destroy(conns);
    /* Peer: one request after another, each collector's connection kept between queries. */
    CURL **e = calloc(nc, sizeof *e);
    mv_util_buf *body = calloc(nc, sizeof *body);
    char url[512];
    for (size_t i = 0; i < nc; i++) {
        e[i] = curl_easy_init();
        snprintf(url, sizeof url,
                 "%s/api/v1/value?metric=gen_requests_rate_short&namespace=shop&agg=sum"
                 "&selector=app.kubernetes.io%%2Fname%%3Dcheckout",
                 bases[i]);
        curl_easy_setopt(e[i], CURLOPT_URL, url);
        curl_easy_setopt(e[i], CURLOPT_WRITEFUNCTION, mv_util_buf_curl_write);
        curl_easy_setopt(e[i], CURLOPT_WRITEDATA, &body[i]);
        body[i].cap = 1 << 16;
    }
    for (size_t q = 0; q < nq + 10; q++) {
        uint64_t t0 = bench_now_ns();
        for (size_t i = 0; i < nc; i++) {
            mv_util_buf_free(&body[i]);
            if (curl_easy_perform(e[i]) != CURLE_OK) {
                fprintf(stderr, "sequential request failed\n");
                return 1;
            }
        }
        uint64_t t1 = bench_now_ns();
        if (q >= 10)
            ms[q - 10] = (double)(t1 - t0) / 1e6;
    }
    report("sequential, kept connections", ms, nq);
    double p99_seq = ms[(nq * 99) / 100];
    printf("p99 ratio sequential/parallel: %.2f\n", p99_seq / p99_par);

    /* Through the gRPC service. */
    if (nc > 250) {
        fprintf(stderr, "the service figure needs at most 250 collectors (127.0.0.x)\n");
        return 1;
    }
    mv_httpd **sh = calloc(nc, sizeof *sh);
    uint16_t port = 0;
    for (size_t i = 0; sh && i < nc; i++) {
        char ip[32];
        snprintf(ip, sizeof ip, "127.0.0.%zu", i + 1);
        mv_httpd_config c;
        mv_httpd_config_default(&c);
        c.addr = ip;
        c.port = port;
        if (mv_httpd_create(&c, &sh[i]) || mv_httpd_route(sh[i], "/api/v1/value", h_value, NULL) ||
            mv_httpd_start(sh[i])) {
            fprintf(stderr, "cannot start stand-in collector on %s:%u\n", ip, port);
            return 1;
        }
        port = mv_httpd_port(sh[i]);
    }
    api_lists lists = {pod_list(nc, 0), pod_list(nc, 1)};
    mv_httpd *api;
    mv_httpd_config ac;
    mv_httpd_config_default(&ac);
    if (!sh || !lists.workload || !lists.collectors || mv_httpd_create(&ac, &api) ||
        mv_httpd_route(api, "/api/v1/namespaces/shop/pods", h_pods, &lists) ||
        mv_httpd_route(api, "/api/v1/namespaces/microview/pods", h_pods, &lists) ||
        mv_httpd_start(api)) {
        fprintf(stderr, "cannot start the stand-in API server\n");
        return 1;
    }
    char api_url[64], target[64];
    snprintf(api_url, sizeof api_url, "http://127.0.0.1:%u", (unsigned)mv_httpd_port(api));
    mv_scsvc_config sc;
    mv_scsvc_config_default(&sc);
    sc.listen = "127.0.0.1:0";
    sc.metrics_listen = NULL;
    sc.api_server = api_url;
    sc.collector_namespace = "microview";
    sc.collector_selector = "app=collector";
    sc.collector_port = port;
    sc.collector_token_file = NULL;
    sc.cache_ms = 0;
    mv_scsvc *svc;
    if (mv_scsvc_start(&sc, &svc, err, sizeof err) != 0) {
        fprintf(stderr, "mv_scsvc_start: %s\n", err);
        return 1;
    }
    snprintf(target, sizeof target, "127.0.0.1:%u", mv_scsvc_grpc_port(svc));
    mv_rpc_channel *ch;
    if (mv_rpc_channel_open(target, 0, &ch) != 0)
        return 1;
    Externalscaler__ScaledObjectRef__ScalerMetadataEntry me[3], *mep[3];
    const char *mk[] = {"metric", "selector", "targetValue"};
    const char *mvv[] = {"gen_requests_rate_short", "app=checkout", "150"};
    for (int i = 0; i < 3; i++) {
        externalscaler__scaled_object_ref__scaler_metadata_entry__init(&me[i]);
        me[i].key = (char *)mk[i];
        me[i].value = (char *)mvv[i];
        mep[i] = &me[i];
    }
    Externalscaler__ScaledObjectRef ref = EXTERNALSCALER__SCALED_OBJECT_REF__INIT;
    ref.name = (char *)"checkout";
    ref.namespace_ = (char *)"shop";
    ref.n_scalermetadata = 3;
    ref.scalermetadata = mep;
    Externalscaler__GetMetricsRequest g = EXTERNALSCALER__GET_METRICS_REQUEST__INIT;
    g.scaledobjectref = &ref;
    g.metricname = (char *)"gen_requests_rate_short";
    uint8_t req[1024];
    size_t rlen = externalscaler__get_metrics_request__pack(&g, req);
    for (size_t q = 0; q < nq + 10; q++) {
        mv_rpc_buf resp = {0};
        mv_rpc_status st;
        uint64_t t0 = bench_now_ns();
        int rc = mv_rpc_unary(ch, "/externalscaler.ExternalScaler/GetMetrics", req, rlen, 10000,
                              &resp, &st);
        uint64_t t1 = bench_now_ns();
        Externalscaler__GetMetricsResponse *gm =
            rc == 0 ? externalscaler__get_metrics_response__unpack(NULL, resp.len, resp.data)
                    : NULL;
        int good = gm && gm->n_metricvalues == 1 &&
                   gm->metricvalues[0]->metricvaluefloat > 312.5 * (double)nc - 1e-6 &&
                   gm->metricvalues[0]->metricvaluefloat < 312.5 * (double)nc + 1e-6;
        if (gm)
            externalscaler__get_metrics_response__free_unpacked(gm, NULL);
        mv_rpc_buf_free(&resp);
        if (!good) {
            fprintf(stderr, "GetMetrics failed: %d %s\n", rc, st.message);
            return 1;
        }
        if (q >= 10)
            ms[q - 10] = (double)(t1 - t0) / 1e6;
    }
    report("gRPC GetMetrics via the service", ms, nq);
    printf("service GetMetrics p99 %.3f ms (goal <= 20 ms)\n", ms[(nq * 99) / 100]);
    mv_rpc_channel_close(ch);
    mv_scsvc_stop(svc);
    mv_httpd_destroy(api);
    for (size_t i = 0; i < nc; i++)
        mv_httpd_destroy(sh[i]);
    free(sh);
    free(lists.workload);
    free(lists.collectors);
    for (size_t i = 0; i < nc; i++) {
        curl_easy_cleanup(e[i]);
        mv_util_buf_free(&body[i]);
        mv_httpd_destroy(h[i]);
    }
    free(e);
    free(body);
    free(h);
    free(bases);
    free(bp);
    free(ms);
    curl_global_cleanup();
    return 0;
}
