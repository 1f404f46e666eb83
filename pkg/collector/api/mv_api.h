/* mv_api: the collector's HTTP surface: /metrics (content negotiation), /debug/segments,
 * /api/v1/value, /healthz and an index page, served from collector snapshots.
 *
 * Handlers render from a snapshot (copies of the published buffers), so a slow
 * client never delays a tick. The /api/v1/value query is parsed by
 * mv_api_value_parse, which knows nothing of HTTP: it reads parameters through
 * a lookup function (libmicrohttpd's decoded query arguments in the server).
 *
 * Ownership: mv_api borrows the collector table, which must outlive it; routes
 * registered with mv_api_route refer to the mv_api, so destroy the HTTP server
 * first.
 */
#ifndef MV_API_H
#define MV_API_H

#include <stddef.h>

#include "mv_labelsel.h"
#include "mv_segment.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mv_coll mv_coll;
typedef struct mv_coll_snap mv_coll_snap;
typedef struct mv_expo mv_expo;
typedef struct mv_httpd mv_httpd;
typedef struct mv_export_sel mv_export_sel;
typedef struct mv_authz mv_authz;
typedef struct mv_live mv_live;

typedef struct mv_api mv_api;

typedef struct mv_api_opts {
    mv_coll *coll;   /* borrowed */
    size_t body_cap; /* largest /metrics body; 0 = 64 MiB */
    /* Most memory the exposition cache may hold; 0 = 2 * body_cap. Past it, scrapes of that
     * table render without the cache (same bytes, slower) and a warning is logged. */
    size_t cache_cap;
    /* Optional families rendered before the collector's own on /metrics (the
     * RDMA read statistics); a failure is logged and the rest still rendered. */
    int (*render_extra)(void *arg, mv_expo *e, const mv_coll_snap *snap);
    void *extra_arg;
    /* Which derived series /metrics carries (borrowed; NULL = the default choice);
     * /api/v1/value serves them all. */
    const mv_export_sel *derived;
    /* Who may read (borrowed; NULL = everyone): every route but /healthz and the index page
     * asks it first and answers its 401 (with WWW-Authenticate: Bearer), 403 or 503. */
    mv_authz *authz;
    /* Native histograms in the protobuf exposition (mv_expo_set_native): with native_set, the
     * schema (-4..8, or MV_EXPO_NH_OFF) and bucket limit (0: default); else schema 6. */
    int native_set;
    int32_t native_schema;
    uint32_t native_max_buckets;
    /* The live view (borrowed; NULL = none): /api/v1/stream and /api/v1/live/segments behind
     * the access check, the page (/ui, /ui/app.js) open: it is static code that holds no data
     * and asks for a token when the stream answers 401. */
    mv_live *live;
} mv_api_opts;

/* Returns 0 or -ENOMEM. Free with mv_api_destroy. */
int mv_api_create(const mv_api_opts *o, mv_api **out);
/* Registers every route on `h` (before mv_httpd_start). Returns 0 or the
 * first error of mv_httpd_route. */
int mv_api_route(mv_api *api, mv_httpd *h);
/* NULL is a no-op. */
void mv_api_destroy(mv_api *api);

/* ---- /api/v1/value?metric=NAME[&agg=sum|avg|max|min][&LABEL=VALUE...][&label=KEY=VALUE]
 *                   [&selector=SELECTOR] ----
 *
 * selector= names a workload the way Kubernetes does: a label selector (mv_labelsel.h) over the
 * pod's labels (published by the agent) and its identity labels, usually with namespace=. Such a
 * query is a workload query: a collector holding no matching series answers 200 with
 * {"value":0,"count":0,"series":[],"empty":true}, so that the answers of every node's collector
 * can be summed or maxed (KEDA metrics-api with aggregateFromKubeServiceEndpoints). */

/* Label filters taken by name: the identity labels and a few common ones. */
#define MV_API_VALUE_KEYS 9
/* Filters one query can carry: the named ones and one label=KEY=VALUE. */
#define MV_API_FILTERS_MAX (MV_API_VALUE_KEYS + 1)

/* A parsed value query. Its strings point into what the lookup returned and
 * into `extra_key`, so a query must not be copied or outlive the request. */
typedef struct mv_api_value_query {
    const char *metric;
    const char *agg; /* NULL = no aggregation */
    mv_seg_label filters[MV_API_FILTERS_MAX];
    size_t nfilters;
    char extra_key[MV_SEG_LABEL_KEY_MAX + 1];
    int has_selector;
    mv_lsel selector;
    char err_buf[320]; /* a parse error naming the field, when not a static one */
} mv_api_value_query;

/* Returns the value of query parameter `key`, or NULL when absent. */
typedef const char *(*mv_api_query_fn)(void *ctx, const char *key);

/* 1 if `key` is a parameter of the value query (metric, agg, label, or one of the named
 * label filters), else 0: an unknown parameter is refused, since a misspelt filter would
 * otherwise silently widen the query (a whole node summed into an autoscaler's input). */
int mv_api_value_known_key(const char *key);

/* Parses a value query. Returns 0, or -EINVAL with *err_json set to a static
 * JSON error document for a 400 reply. */
int mv_api_value_parse(mv_api_query_fn get, void *ctx, mv_api_value_query *q,
                       const char **err_json);

#ifdef __cplusplus
}
#endif
#endif
