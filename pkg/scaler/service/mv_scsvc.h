/* mv_scsvc: microview-scaler, KEDA's external scaler (externalscaler.ExternalScaler) as a gRPC
 * service over the scaler core (pkg/scaler/core).
 *
 * Methods: IsActive (value > activationValue), StreamIsActive (re-evaluated every
 * stream_interval_ms; the first result, then only changes), GetMetricSpec (one MetricSpec from
 * the metadata), GetMetrics (the value, exact in metricValueFloat, rounded in metricValue);
 * StreamMetricSpec answers UNIMPLEMENTED. Status codes: INVALID_ARGUMENT for bad metadata (the
 * field named), a metricName that is not the metadata's metric, or a scale target of a kind
 * without a known scale subresource; UNAVAILABLE when the API server cannot be read (the
 * request named) or collectors are missing under missingCollectors=fail (the first named);
 * RESOURCE_EXHAUSTED when max_pending calls wait already ("scaler busy: N calls pending") or
 * max_streams streams are open. A workload whose selector matches no running pod has the
 * value 0 (an empty workload), with OK.
 *
 * Work: handlers never block. A call is answered from the short result cache (cache_ms) when
 * it can be; else it joins the evaluation of the same (namespace, name, metadata) in flight
 * (single flight), or queues one for the fixed pool of `workers` threads. Pending calls
 * (queued or waiting for an evaluation) are at most max_pending. Discovery (workload ->
 * collector URLs) and the scale target's selector are cached for discovery_ttl_ms. Every cache
 * holds a bounded number of entries and evicts the oldest.
 *
 * Without a "selector" in the metadata, the workload is the ScaledObject's scale target:
 * spec.scaleTargetRef of keda.sh/v1alpha1 ScaledObject NAME (apiVersion apps/v1 and kind
 * Deployment by default), then status.selector of that target's scale subresource
 * (Deployment, StatefulSet or ReplicaSet of apps/v1).
 *
 * Files, bottom to top: mv_scsvc_target.c (the API objects' JSON, parsed strictly),
 * mv_scsvc_metrics.c (counters and /metrics), mv_scsvc_cache.c (bounded caches),
 * mv_scsvc_eval.c (one evaluation: selector, discovery, query), mv_scsvc_pool.c (the workers,
 * pending calls and single flight), mv_scsvc_server.c (gRPC methods, streams, HTTP),
 * mv_scsvc_run.c (the daemon's lifecycle).
 */
#ifndef MV_SCSVC_H
#define MV_SCSVC_H

#include <stddef.h>
#include <stdint.h>

typedef struct mv_scsvc_config {
    const char *listen;             /* gRPC "[HOST]:PORT"; port 0 = any free port */
    const char *tls_cert_file;      /* with tls_key_file: TLS on the gRPC port */
    const char *tls_key_file;       /* */
    const char *tls_client_ca_file; /* with TLS: client certificates signed by it required */
    const char *metrics_listen;     /* "[HOST]:PORT" of /metrics and /healthz; NULL: none */
    const char *api_server;         /* "https://10.0.0.1:443" */
    const char *api_token_file;     /* NULL: no bearer token to the API server */
    const char *api_ca_file;        /* NULL: system CAs */
    const char *collector_namespace;
    const char *collector_selector; /* label selector of the collector pods */
    unsigned collector_port;
    const char *collector_token_file; /* NULL: no bearer token to the collectors */
    unsigned workers;                 /* 1..256 */
    unsigned max_pending;             /* 1..100000 */
    unsigned max_streams;             /* 1..100000 */
    unsigned cache_ms;                /* 0: no result cache (single flight still) */
    unsigned discovery_ttl_ms;        /* 0: discover on every evaluation */
    unsigned stream_interval_ms;      /* 10..3600000 */
    unsigned api_timeout_ms;          /* per API server request; 0 = 2000 */
} mv_scsvc_config;

/* Fills the defaults of the flags (listen ":9090", metrics ":9091", port 9469, 4 workers, 64
 * pending, 100 streams, 250 ms cache, 5000 ms discovery TTL, 1000 ms streams); the API server,
 * credentials and collector namespace and selector stay NULL. */
void mv_scsvc_config_default(mv_scsvc_config *c);

typedef struct mv_scsvc mv_scsvc;

/* Checks the configuration, creates the service and starts serving gRPC (and HTTP when
 * metrics_listen is set). Returns 0, or -EINVAL / -EADDRNOTAVAIL / -ENOMEM with `err` saying
 * which setting and why. */
int mv_scsvc_start(const mv_scsvc_config *c, mv_scsvc **out, char *err, size_t errlen);
/* The bound ports (useful with port 0). */
unsigned mv_scsvc_grpc_port(const mv_scsvc *s);
unsigned mv_scsvc_metrics_port(const mv_scsvc *s);
/* Ends every call and stream (UNAVAILABLE), stops the threads and frees. NULL-safe. */
void mv_scsvc_stop(mv_scsvc *s);

/* The daemon: starts, logs scaler.started, waits for SIGTERM or SIGINT, stops. Returns the
 * process's exit status (0, or 1 when it could not start). */
int mv_scsvc_run(const mv_scsvc_config *c);

/* ---- The API objects read (untrusted JSON; fuzzed by tests/fuzz/fuzz_scsvc_target.c) ---- */

#define MV_SCSVC_OBJECT_MAX (1u << 20) /* bytes of one ScaledObject or Scale accepted */
#define MV_SCSVC_NAME_MAX   253

typedef struct mv_scsvc_target_ref {
    char api_version[MV_SCSVC_NAME_MAX + 1]; /* "apps/v1" when absent */
    char kind[64];                           /* "Deployment" when absent */
    char name[MV_SCSVC_NAME_MAX + 1];
} mv_scsvc_target_ref;

/* A keda.sh/v1alpha1 ScaledObject's spec.scaleTargetRef. Returns 0, or -EINVAL with `err`
 * naming the field at fault. */
int mv_scsvc_parse_scaledobject(const char *json, size_t len, mv_scsvc_target_ref *out, char *err,
                                size_t errlen);

/* The resource path segment of a target's scale subresource ("deployments"), or NULL when
 * the apiVersion and kind have none the scaler knows (apps/v1 Deployment, StatefulSet,
 * ReplicaSet). */
const char *mv_scsvc_scale_resource(const mv_scsvc_target_ref *t);

/* An autoscaling/v1 Scale's status.selector (a label selector string) into `sel_text`
 * (MV_SCSVC_SELECTOR_MAX bytes). Returns 0, or -EINVAL with `err` naming the field. */
#define MV_SCSVC_SELECTOR_MAX 2049
int mv_scsvc_parse_scale(const char *json, size_t len, char *sel_text, char *err, size_t errlen);

#endif
