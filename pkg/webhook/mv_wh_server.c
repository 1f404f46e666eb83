/* mv_wh_server: the webhook's HTTPS endpoints on the project's HTTP layer (mv_httpd: TLS 1.2+,
 * key pair rotation, connection limits, request deadline, body cap): POST /mutate, GET /healthz
 * and GET /metrics. */
#include "mv_webhook.h"

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "mv_expo.h"
#include "mv_httpd.h"
#include "mv_log.h"
#include "mv_util.h"

enum { R_ALLOWED, R_PATCHED, R_DENIED, R_ERROR, R_COUNT };
static const char *const RESULT_NAMES[R_COUNT] = {"allowed", "patched", "denied", "error"};

struct mv_wh_server {
    mv_wh_server_config cfg;
    char *cert_file, *key_file, *listen;
    char host[64];
    uint16_t port;
    mv_httpd *h;
    int started;
    atomic_ullong results[R_COUNT];
    atomic_ullong http_rejected; /* refused by the handlers (415); the layer counts its own */
};

/* ---- HTTP ----------------------------------------------------------------------------------- */

static int reply(mv_httpd_response *resp, unsigned status, const char *ctype, const char *body,
                 size_t len)
{
    mv_httpd_set_status(resp, status);
    int rc = mv_httpd_set_content_type(resp, ctype);
    return rc ? rc : mv_httpd_copy_body(resp, body, len);
}

static int reply_text(mv_wh_server *s, mv_httpd_response *resp, unsigned status, const char *text)
{
    if (status >= 400) {
        char m[256];
        snprintf(m, sizeof m, "%s", text);
        size_t n = strlen(m);
        while (n && m[n - 1] == '\n')
            m[--n] = '\0';
        atomic_fetch_add(&s->http_rejected, 1);
        MV_WARN("http.rejected", "status=%u msg=%s", status, mv_log_q(m));
    }
    return reply(resp, status, "text/plain; charset=utf-8", text, strlen(text));
}

/* application/json, optionally with parameters ("; charset=utf-8"). */
static int is_json(const char *ct)
{
    static const char want[] = "application/json";
    if (!ct)
        return 0;
    while (*ct == ' ' || *ct == '\t')
        ct++;
    if (strncasecmp(ct, want, sizeof want - 1) != 0)
        return 0;
    ct += sizeof want - 1;
    while (*ct == ' ' || *ct == '\t')
        ct++;
    return *ct == '\0' || *ct == ';';
}

/* One family with one sample (no labels) or none. */
static void expo_one(mv_expo *e, const char *name, mv_expo_type type, const char *help, uint64_t v)
{
    mv_expo_family(e, name, type, help, NULL);
    mv_expo_sample_u64(e, NULL, NULL, 0, NULL, 0, NULL, 0, v, MV_EXPO_NO_TS);
}

/* The webhook's /metrics through the project's one exposition writer (pkg/common/exposition):
 * text 0.0.4 or OpenMetrics as the Accept header asks. Returns a malloc'd body or NULL. */
static char *metrics_text(mv_wh_server *s, const char *accept, mv_expo_format *fmt, size_t *len)
{
    mv_httpd_stats st;
    mv_httpd_get_stats(s->h, &st);
    *fmt = mv_expo_negotiate(accept);
    mv_expo *e = mv_expo_create(*fmt, 64u << 10);
    if (!e)
        return NULL;
    mv_expo_family(e, "microview_webhook_admission_reviews_total", MV_EXPO_COUNTER,
                   "AdmissionReview requests answered, by result.", NULL);
    for (int i = 0; i < R_COUNT; i++) {
        mv_expo_label l = {"result", RESULT_NAMES[i]};
        mv_expo_sample_u64(e, NULL, &l, 1, NULL, 0, NULL, 0, atomic_load(&s->results[i]),
                           MV_EXPO_NO_TS);
    }
    expo_one(e, "microview_webhook_http_rejected_total", MV_EXPO_COUNTER,
             "HTTP requests refused before review (wrong path, method, content type, size or "
             "query).",
             atomic_load(&s->http_rejected) + st.rejected);
    expo_one(e, "microview_webhook_http_connections_open", MV_EXPO_GAUGE,
             "HTTPS connections open now.", st.active);
    mv_expo_family(e, "microview_webhook_http_connections_refused_total", MV_EXPO_COUNTER,
                   "Connections refused at accept, by the limit that was reached.", NULL);
    mv_expo_label per_client = {"limit", "per_client"}, total = {"limit", "total"};
    mv_expo_sample_u64(e, NULL, &per_client, 1, NULL, 0, NULL, 0, st.refused_client, MV_EXPO_NO_TS);
    mv_expo_sample_u64(e, NULL, &total, 1, NULL, 0, NULL, 0, st.refused_limit, MV_EXPO_NO_TS);
    expo_one(e, "microview_webhook_http_deadline_closed_total", MV_EXPO_COUNTER,
             "Connections closed because no whole request arrived within the request deadline.",
             st.deadline_closed);
    mv_expo_family(e, "microview_webhook_tls_reloads_total", MV_EXPO_COUNTER,
                   "Key pair reloads after its files changed, by result.", NULL);
    mv_expo_label ok = {"result", "ok"}, bad = {"result", "error"};
    mv_expo_sample_u64(e, NULL, &ok, 1, NULL, 0, NULL, 0, st.tls_reload_ok, MV_EXPO_NO_TS);
    mv_expo_sample_u64(e, NULL, &bad, 1, NULL, 0, NULL, 0, st.tls_reload_failed, MV_EXPO_NO_TS);
    mv_expo_family(e, "microview_webhook_tls_cert_not_after_seconds", MV_EXPO_GAUGE,
                   "Expiry of the served certificate, Unix time.", NULL);
    mv_expo_sample_i64(e, NULL, NULL, 0, NULL, 0, NULL, 0, (int64_t)st.tls_not_after,
                       MV_EXPO_NO_TS);
    mv_expo_finish(e);
    char *out = mv_expo_copy(e, len);
    if (!out)
        MV_ERROR("webhook.metrics_failed", "err=%s",
                 mv_log_q(mv_expo_truncated(e) ? mv_expo_errmsg(e) : "out of memory"));
    mv_expo_destroy(e);
    return out;
}

static int h_healthz(void *arg, const mv_httpd_request *req, mv_httpd_response *resp)
{
    (void)arg;
    (void)req;
    return reply(resp, 200, "text/plain; charset=utf-8", "ok\n", 3);
}

static int h_metrics(void *arg, const mv_httpd_request *req, mv_httpd_response *resp)
{
    mv_wh_server *s = arg;
    size_t len;
    mv_expo_format fmt;
    char *m = metrics_text(s, mv_httpd_header(req, "Accept"), &fmt, &len);
    if (!m)
        return reply_text(s, resp, 500, "could not render the metrics\n");
    mv_httpd_set_status(resp, 200);
    mv_httpd_set_content_type(resp, mv_expo_content_type(fmt));
    return mv_httpd_set_body(resp, m, len);
}

static int h_mutate(void *arg, const mv_httpd_request *req, mv_httpd_response *resp)
{
    mv_wh_server *s = arg;
    if (!is_json(mv_httpd_header(req, "Content-Type")))
        return reply_text(s, resp, 415, "Content-Type must be application/json\n");
    size_t blen;
    const char *body = mv_httpd_body(req, &blen);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    mv_wh_result r;
    if (mv_wh_review(&s->cfg.review, body, blen, &r) != 0) {
        atomic_fetch_add(&s->results[R_ERROR], 1);
        MV_ERROR("admission.failed", "msg=%s", mv_log_q("out of memory"));
        return reply_text(s, resp, 500, "out of memory\n");
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    atomic_fetch_add(&s->results[r.kind], 1);
    mv_log_level lvl = r.kind == MV_WH_ERROR ? MV_LOG_WARN : MV_LOG_INFO;
    if (r.kind == MV_WH_PATCHED)
        mv_log(lvl, "admission",
               "result=patched uid=%s namespace=%s pod=%s pages=%" PRIu64
               " containers=%u took_ms=%.3f",
               mv_log_q(r.uid), mv_log_q(r.namespace_), mv_log_q(r.name), r.pages, r.containers,
               ms);
    else
        mv_log(lvl, "admission", "result=%s http=%u uid=%s namespace=%s pod=%s msg=%s took_ms=%.3f",
               RESULT_NAMES[r.kind], r.http_status, mv_log_q(r.uid), mv_log_q(r.namespace_),
               mv_log_q(r.name), mv_log_q(r.message ? r.message : ""), ms);
    mv_httpd_set_status(resp, r.http_status);
    int rc = mv_httpd_set_content_type(resp, r.content_type);
    if (rc == 0) {
        rc = mv_httpd_set_body(resp, r.body, r.body_len);
        r.body = NULL; /* owned by the response now */
    }
    mv_wh_result_free(&r);
    return rc;
}

/* ---- lifecycle ------------------------------------------------------------------------------ */

int mv_wh_server_check_reload(mv_wh_server *s)
{
    return mv_httpd_tls_check_reload(s->h);
}

int mv_wh_server_create(const mv_wh_server_config *cfg, mv_wh_server **out)
{
    char err[512];
    *out = NULL;
    if (!cfg->cert_file || !cfg->key_file || !cfg->listen) {
        MV_ERROR("webhook.config", "msg=%s",
                 mv_log_q("a certificate file, a key file and a listen address are required"));
        return -EINVAL;
    }
    if (mv_wh_config_check(&cfg->review, err, sizeof err) != 0) {
        MV_ERROR("webhook.config", "msg=%s", mv_log_q(err));
        return -EINVAL;
    }
    mv_wh_server *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->cfg = *cfg;
    if (!s->cfg.reload_interval_ms)
        s->cfg.reload_interval_ms = 1000;
    if (!s->cfg.threads)
        s->cfg.threads = 2;
    s->cert_file = strdup(cfg->cert_file);
    s->key_file = strdup(cfg->key_file);
    s->listen = strdup(cfg->listen);
    if (!s->cert_file || !s->key_file || !s->listen) {
        mv_wh_server_destroy(s);
        return -ENOMEM;
    }
    s->cfg.cert_file = s->cert_file;
    s->cfg.key_file = s->key_file;
    s->cfg.listen = s->listen;

    char why[MV_ERR_MAX];
    if (mv_util_parse_listen(cfg->listen, MV_LISTEN_ANY_HOST | MV_LISTEN_PORT_ZERO, s->host,
                             sizeof s->host, &s->port, why, sizeof why) != 0) {
        MV_ERROR("webhook.config", "listen=%s msg=%s", mv_log_q(cfg->listen), mv_log_q(why));
        mv_wh_server_destroy(s);
        return -EINVAL;
    }
    mv_httpd_config hc;
    mv_httpd_config_default(&hc);
    hc.addr = s->host[0] ? s->host : "::"; /* every address; IPv4 only without IPv6 */
    hc.port = s->port;
    hc.threads = s->cfg.threads;
    hc.max_body_bytes = MV_WH_BODY_MAX;
    hc.tls_cert_file = s->cert_file;
    hc.tls_key_file = s->key_file;
    hc.tls_reload_ms = s->cfg.reload_interval_ms;
    int rc = mv_httpd_create(&hc, &s->h);
    if (rc == 0)
        rc = mv_httpd_route(s->h, "/healthz", h_healthz, s);
    if (rc == 0)
        rc = mv_httpd_route(s->h, "/metrics", h_metrics, s);
    if (rc == 0)
        rc = mv_httpd_route_methods(s->h, "/mutate", MV_HTTPD_POST, h_mutate, s);
    if (rc != 0) {
        mv_wh_server_destroy(s);
        return rc;
    }
    *out = s;
    return 0;
}

int mv_wh_server_start(mv_wh_server *s)
{
    if (s->started)
        return -EBUSY;
    int rc = mv_httpd_start(s->h);
    if (rc != 0) {
        MV_ERROR("webhook.listen_failed", "listen=%s err=%s msg=%s", mv_log_q(s->listen),
                 mv_log_q(strerror(-rc)),
                 mv_log_q("cannot listen; check that the port is free and the address local"));
        return rc;
    }
    s->started = 1;
    s->port = mv_httpd_port(s->h);
    MV_INFO("webhook.listening",
            "listen=%s port=%u resource=%s page_size=%" PRIu64 " max_pages_per_pod=%" PRIu64
            " reload_interval_ms=%u",
            mv_log_q(s->listen), (unsigned)s->port, mv_log_q(s->cfg.review.resource_name),
            s->cfg.review.page_size, s->cfg.review.max_pages_per_pod, s->cfg.reload_interval_ms);
    return 0;
}

uint16_t mv_wh_server_port(const mv_wh_server *s)
{
    return s->started ? s->port : 0;
}

void mv_wh_server_destroy(mv_wh_server *s)
{
    if (!s)
        return;
    mv_httpd_destroy(s->h);
    free(s->cert_file);
    free(s->key_file);
    free(s->listen);
    free(s);
}
