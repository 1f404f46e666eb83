/* scaler_bench: latency of one scaler query (mv_scaler_query: 50 collectors asked in parallel
 * with libcurl multi, answers aggregated) against stand-in collectors on loopback, and, as the
 * peer measured in the same run, the same 50 requests asked one after another over one reused
 * connection each (libcurl easy). The stand-ins are the collector's HTTP server (mv_httpd) with
 * a canned /api/v1/value answer, so the figure is the fan-out's cost, not the collectors'
 * rendering.
 *
 * Usage: scaler_bench [COLLECTORS [QUERIES]]   (defaults 50 and 400)
 * Prints p50, p99 and max per method and the p99 ratio. */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "mv_httpd.h"
#include "mv_log.h"
#include "mv_scaler.h"
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
