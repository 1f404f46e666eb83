/* mv_api: the collector's HTTP handlers over snapshots of the table. */
#include "mv_api.h"

#include <errno.h>
#include <json-c/json.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "mv_authz.h"
#include "mv_collect.h"
#include "mv_export.h"
#include "mv_expo.h"
#include "mv_httpd.h"
#include "mv_live.h"
#include "mv_log.h"
#include "mv_util.h"

#define GUARDED_MAX 12

/* A route behind the access check: the handler it guards. */
typedef struct guarded {
    mv_api *api;
    mv_httpd_handler fn;
} guarded;

struct mv_api {
    mv_api_opts o;
    guarded guarded[GUARDED_MAX];
    size_t nguarded;
    pthread_mutex_t render_mu;    /* one /metrics render at a time: guards what follows */
    mv_export_stats export_stats; /* under render_mu */
    /* Between scrapes: the rendered names and labels (see mv_export_cache), and the body
     * buffer, kept warm (its memory is reused; the response gets a copy). */
    mv_export_cache *cache;
    uint64_t cache_over_limit; /* the cache's over_limit count last logged */
    mv_expo *body;
};

int mv_api_create(const mv_api_opts *o, mv_api **out)
{
    mv_api *api = calloc(1, sizeof *api);
    *out = NULL;
    if (!api)
        return -ENOMEM;
    api->o = *o;
    if (!api->o.body_cap)
        api->o.body_cap = 64u << 20;
    if (!api->o.cache_cap)
        api->o.cache_cap = 2 * api->o.body_cap;
    api->cache = mv_export_cache_create();
    if (!api->cache) {
        free(api);
        return -ENOMEM;
    }
    mv_export_cache_set_limit(api->cache, api->o.cache_cap);
    pthread_mutex_init(&api->render_mu, NULL);
    *out = api;
    return 0;
}

void mv_api_destroy(mv_api *api)
{
    if (!api)
        return;
    pthread_mutex_destroy(&api->render_mu);
    mv_export_cache_destroy(api->cache);
    mv_expo_destroy(api->body);
    free(api);
}

static int respond(mv_httpd_response *resp, unsigned status, const char *ctype, const void *body,
                   size_t len)
{
    mv_httpd_set_status(resp, status);
    int rc = mv_httpd_set_content_type(resp, ctype);
    return rc ? rc : mv_httpd_copy_body(resp, body, len);
}

static int respond_text(mv_httpd_response *resp, unsigned status, const char *text)
{
    return respond(resp, status, "text/plain; charset=utf-8", text, strlen(text));
}

static int respond_json(mv_httpd_response *resp, unsigned status, const char *json)
{
    return respond(resp, status, "application/json", json, strlen(json));
}

static int h_metrics(void *arg, const mv_httpd_request *req, mv_httpd_response *resp)
{
    mv_api *api = arg;
    mv_expo_format fmt = mv_expo_negotiate(mv_httpd_header(req, "Accept"));
    mv_coll_snap *snap = mv_coll_snapshot(api->o.coll);
    if (!snap)
        return respond_text(resp, 503, "snapshot failed: out of memory\n");
    pthread_mutex_lock(&api->render_mu);
    if (!api->body) {
        api->body = mv_expo_create(fmt, api->o.body_cap);
        if (api->body && api->o.native_set)
            mv_expo_set_native(api->body, api->o.native_schema, api->o.native_max_buckets);
    }
    mv_expo *e = api->body;
    if (!e) {
        pthread_mutex_unlock(&api->render_mu);
        mv_coll_snap_free(snap);
        return respond_text(resp, 503, "out of memory\n");
    }
    mv_expo_reset(e, fmt);
    /* Extra families first: mv_export_render finishes the body. */
    int rc = api->o.render_extra ? api->o.render_extra(api->o.extra_arg, e, snap) : 0;
    if (rc < 0 && rc != -ENOSPC)
        MV_WARN("metrics.partial", "error=%s effect=%s", mv_log_q(strerror(-rc)),
                mv_log_q("RDMA read statistics left out of this scrape"));
    rc = mv_export_render_cached(api->cache, e, snap, api->o.derived, &api->export_stats);
    mv_coll_snap_free(snap);
    mv_export_cache_stats cs;
    mv_export_cache_get_stats(api->cache, &cs);
    if (cs.over_limit != api->cache_over_limit) {
        api->cache_over_limit = cs.over_limit;
        MV_WARN("metrics.cache_over_limit",
                "cache_cap_bytes=%zu needed_bytes_over=%zu effect=%s hint=%s", api->o.cache_cap,
                cs.last_refused_bytes,
                mv_log_q("scrapes of this table render without the exposition cache (slower)"),
                mv_log_q("raise --expo-cache-max-bytes"));
    }
    if (rc == -ENOSPC)
        MV_WARN("metrics.truncated", "cap_bytes=%zu truncated_total=%llu hint=%s", api->o.body_cap,
                (unsigned long long)api->export_stats.truncated,
                mv_log_q("raise --max-body-bytes"));
    size_t len;
    const char *data = mv_expo_data(e, &len);
    rc = respond(resp, 200, mv_expo_content_type(fmt), data, len);
    pthread_mutex_unlock(&api->render_mu);
    return rc;
}

static int h_segments(void *arg, const mv_httpd_request *req, mv_httpd_response *resp)
{
    mv_api *api = arg;
    mv_coll_snap *snap = mv_coll_snapshot(api->o.coll);
    const char *series = mv_httpd_query(req, "series");
    int with_series = series && strcmp(series, "0") != 0 && strcmp(series, "false") != 0;
    char *json = snap ? mv_export_segments_json(snap, with_series) : NULL;
    mv_coll_snap_free(snap);
    if (!json)
        return respond_text(resp, 503, "out of memory\n");
    int rc = respond_json(resp, 200, json);
    free(json);
    return rc;
}

static const char *req_query(void *ctx, const char *key)
{
    return mv_httpd_query(ctx, key);
}

typedef struct {
    const char *key; /* the first unknown key, or the first key whose key or value is bad */
    int bad_utf8;
} query_check;

/* Stops at the first parameter that is not valid UTF-8 (no series name or label value can
 * match it, and it must not be echoed as is) or whose key is unknown. */
static int first_bad(void *arg, const char *key, const char *value)
{
    query_check *c = arg;
    if (!mv_util_utf8_valid(key, strlen(key)) || !mv_util_utf8_valid(value, strlen(value))) {
        c->key = key;
        c->bad_utf8 = 1;
        return 1;
    }
    if (mv_api_value_known_key(key))
        return 0;
    c->key = key;
    return 1;
}

/* The selector's label lookup on one segment: the pod's labels, then its identity labels. */
static const char *seg_label(void *ctx, const char *key, size_t klen)
{
    const mv_coll_seg_view *v = ctx;
    for (size_t i = 0; i < v->npod_labels; i++)
        if (strlen(v->pod_labels[i].key) == klen && memcmp(v->pod_labels[i].key, key, klen) == 0)
            return v->pod_labels[i].value;
    for (size_t i = 0; i < v->nlabels; i++)
        if (strlen(v->labels[i].key) == klen && memcmp(v->labels[i].key, key, klen) == 0)
            return v->labels[i].value;
    return NULL;
}

static int seg_selected(void *arg, const mv_coll_seg_view *v)
{
    return mv_lsel_match(arg, seg_label, (void *)v);
}

static int h_value(void *arg, const mv_httpd_request *req, mv_httpd_response *resp)
{
    mv_api *api = arg;
    mv_api_value_query q;
    const char *err_json;
    query_check bad = {NULL, 0};
    if (mv_httpd_query_each(req, first_bad, &bad)) {
        json_object *o = json_object_new_object();
        /* The key is the client's: cut on a character boundary, invalid bytes as U+FFFD. */
        char key[3 * MV_SEG_LABEL_KEY_MAX + 1], msg[sizeof key + 200];
        mv_util_utf8_sanitize(bad.key,
                              mv_util_utf8_cut(bad.key, strlen(bad.key), MV_SEG_LABEL_KEY_MAX), key,
                              sizeof key);
        if (bad.bad_utf8)
            mv_util_fmt(msg, sizeof msg, "parameter %s: key or value is not valid UTF-8", key);
        else
            mv_util_fmt(
                msg, sizeof msg,
                "unknown parameter %s: give metric, agg, selector, label=KEY=VALUE or one of "
                "namespace, pod, container, quantile, le, service, instance, node, job",
                key);
        json_object_object_add(o, "error", json_object_new_string(msg));
        int rc = respond_json(resp, 400,
                              json_object_to_json_string_ext(
                                  o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
        json_object_put(o);
        return rc;
    }
    if (mv_api_value_parse(req_query, (void *)req, &q, &err_json) < 0)
        return respond_json(resp, 400, err_json);
    mv_coll_snap *snap = mv_coll_snapshot(api->o.coll);
    if (!snap)
        return respond_text(resp, 503, "snapshot failed: out of memory\n");
    char *json = NULL;
    mv_export_value_req vr = {.metric = q.metric,
                              .filters = q.filters,
                              .nfilters = q.nfilters,
                              .agg = q.agg,
                              .match = q.has_selector ? seg_selected : NULL,
                              .match_arg = &q.selector,
                              .empty_ok = q.has_selector};
    int rc = mv_export_value_json_req(snap, &vr, &json);
    mv_coll_snap_free(snap);
    if (rc == -EINVAL)
        return respond_json(resp, 400, "{\"error\":\"agg is one of sum, avg, max, min\"}");
    if (!json)
        return respond_text(resp, 503, "out of memory\n");
    rc = respond(resp, rc == -ENOENT ? 404 : 200, "application/json", json, strlen(json));
    free(json);
    return rc;
}

static int h_health(void *arg, const mv_httpd_request *req, mv_httpd_response *resp)
{
    (void)arg;
    (void)req;
    return respond_text(resp, 200, "ok\n");
}

static int h_index(void *arg, const mv_httpd_request *req, mv_httpd_response *resp)
{
    (void)arg;
    (void)req;
    return respond_text(
        resp, 200,
        "microview-collector\n"
        "  /metrics          Prometheus text 0.0.4 / OpenMetrics 1.0\n"
        "  /debug/segments   segments, state, read statistics, anomaly scores\n"
        "                    (JSON; ?series=1 adds every metric's values)\n"
        "  /api/v1/value     ?metric=NAME&namespace=..&pod=..: current value(s)\n"
        "                    of a raw or derived series (JSON, for KEDA);\n"
        "                    &selector=app=x,tier in (a,b): a workload's pods\n"
        "  /ui               live view in the browser (read resolution)\n"
        "  /api/v1/stream    ?seg=ID&m=INDEX...: live series as Server-Sent Events\n"
        "  /healthz          liveness\n");
}

/* The live view (mv_live): its stream and catalog behind the access check; the page itself
 * (static code, no data) open, so that a browser can load it and then ask for a token. */
static int h_stream(void *arg, const mv_httpd_request *req, mv_httpd_response *resp)
{
    mv_api *api = arg;
    return mv_live_handle_stream(api->o.live, req, resp);
}

static int h_live_segments(void *arg, const mv_httpd_request *req, mv_httpd_response *resp)
{
    mv_api *api = arg;
    return mv_live_handle_segments(api->o.live, req, resp);
}

static int h_ui(void *arg, const mv_httpd_request *req, mv_httpd_response *resp)
{
    (void)arg;
    return mv_live_handle_asset(mv_httpd_path(req), resp);
}

/* Runs the access check, then the guarded handler when it allows. */
static int h_guard(void *arg, const mv_httpd_request *req, mv_httpd_response *resp)
{
    const guarded *g = arg;
    mv_authz_decision d;
    mv_authz_check(g->api->o.authz, mv_httpd_header(req, "Authorization"), mv_httpd_path(req), &d);
    if (d.status == 200)
        return g->fn(g->api, req, resp);
    char body[MV_AUTHZ_REASON_MAX + 16];
    mv_util_fmt(body, sizeof body, "%s\n", d.reason);
    int rc = 0;
    if (d.status == 401)
        rc = mv_httpd_add_header(resp, "WWW-Authenticate", "Bearer realm=\"microview-collector\"");
    else if (d.status == 503)
        rc = mv_httpd_add_header(resp, "Retry-After", "1");
    return rc ? rc : respond_text(resp, d.status, body);
}

int mv_api_route(mv_api *api, mv_httpd *h)
{
    static const struct {
        const char *path;
        mv_httpd_handler fn;
        int open; /* served without the access check */
    } routes[] = {
        {"/metrics", h_metrics, 0}, {"/debug/segments", h_segments, 0},
        {"/healthz", h_health, 1},  {"/api/v1/value", h_value, 0},
        {"/", h_index, 1},
    };
    static const struct {
        const char *path;
        mv_httpd_handler fn;
        int open;
    } live_routes[] = {
        {"/api/v1/stream", h_stream, 0},
        {"/api/v1/live/segments", h_live_segments, 0},
        {"/ui", h_ui, 1},
        {"/ui/app.js", h_ui, 1},
    };
    size_t nroutes = sizeof routes / sizeof routes[0];
    size_t nlive = api->o.live ? sizeof live_routes / sizeof live_routes[0] : 0;
    for (size_t k = 0; k < nroutes + nlive; k++) {
        int rc;
        size_t i = k;
        mv_httpd_handler fn = k < nroutes ? routes[k].fn : live_routes[k - nroutes].fn;
        const char *path = k < nroutes ? routes[k].path : live_routes[k - nroutes].path;
        int open = k < nroutes ? routes[k].open : live_routes[k - nroutes].open;
        (void)i;
        if (api->o.authz && !open) {
            if (api->nguarded == GUARDED_MAX)
                return -ENOSPC;
            guarded *g = &api->guarded[api->nguarded++];
            *g = (guarded){api, fn};
            rc = mv_httpd_route(h, path, h_guard, g);
        } else {
            rc = mv_httpd_route(h, path, fn, api);
        }
        if (rc)
            return rc;
    }
    return 0;
}
