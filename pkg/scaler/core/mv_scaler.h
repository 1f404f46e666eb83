/* mv_scaler: the core of microview-scaler, KEDA's external scaler over the node collectors.
 *
 * A ScaledObject's trigger metadata (string keys and values) is parsed strictly into an
 * mv_scaler_meta: every key known, every value checked, errors naming the field. A query asks
 * the given collectors' /api/v1/value for the workload (namespace + label selector) in
 * parallel (libcurl multi, one deadline per collector, a bounded number of collectors) and
 * aggregates their answers (sum or max). A collector that does not answer in time, answers an
 * error or an unparsable body is "missing"; the metadata's policy decides:
 *   fail    (default) the query fails and names the first missing collector: never a value
 *           computed without part of the workload, which could scale it down;
 *   partial the value is computed from the collectors that answered; the result counts the
 *           missing ones (for the service's metric and log). With none answering it fails too.
 * A collector that answers the empty value (no matching pod on its node) is not missing.
 *
 * Connections: a query made through an mv_scaler_conns keeps its connections to the collectors
 * open for the next query through it (libcurl's connection cache); one mv_scaler_conns serves
 * one thread at a time. Without one (NULL), each query opens and closes its own.
 */
#ifndef MV_SCALER_H
#define MV_SCALER_H

#include <stddef.h>
#include <stdint.h>

#include "mv_labelsel.h"

#define MV_SCALER_METRIC_MAX     200
#define MV_SCALER_NAMESPACE_MAX  63
#define MV_SCALER_COLLECTORS_MAX 1024 /* collectors one query may ask */
#define MV_SCALER_BODY_MAX       (64u << 10)
#define MV_SCALER_TIMEOUT_MS_MIN 10
#define MV_SCALER_TIMEOUT_MS_MAX 10000
#define MV_SCALER_TIMEOUT_MS_DEF 500

typedef enum mv_scaler_agg { MV_SCALER_SUM = 0, MV_SCALER_MAX = 1 } mv_scaler_agg;
typedef enum mv_scaler_policy { MV_SCALER_FAIL = 0, MV_SCALER_PARTIAL = 1 } mv_scaler_policy;

typedef struct mv_scaler_meta {
    char metric[MV_SCALER_METRIC_MAX + 1];        /* "metric" (required) */
    char namespace_[MV_SCALER_NAMESPACE_MAX + 1]; /* "namespace" (required) */
    mv_lsel selector;                             /* "selector" (optional: see has_selector) */
    int has_selector;  /* 0: no "selector"; the caller takes the ScaledObject's scale target's */
    double target;     /* "targetValue" (required, > 0) */
    double activation; /* "activationValue" (default 0) */
    mv_scaler_agg agg; /* "aggregation": sum (default) | max */
    int timeout_ms;    /* "timeoutMs": per collector */
    mv_scaler_policy policy; /* "missingCollectors": fail | partial */
} mv_scaler_meta;

#define MV_SCALER_REF_MAX          (64u << 10) /* bytes of one ScaledObjectRef accepted */
#define MV_SCALER_META_ENTRIES_MAX 32

/* Unpacks a KEDA ScaledObjectRef (externalscaler.proto, `len` bytes) and parses its
 * scalerMetadata; "namespace" defaults to the ScaledObject's. Returns 0, or -EINVAL with `err`
 * naming the field or saying what is malformed. */
int mv_scaler_meta_from_ref(const uint8_t *req, size_t len, mv_scaler_meta *out, char *err,
                            size_t errlen);

/* Parses `n` metadata entries. Without a "selector" key, has_selector is 0 and `selector`
 * empty: the caller sets both (from the scale target) before mv_scaler_query or
 * mv_scaler_discover, which would otherwise select every pod. Returns 0, or -EINVAL with `err`
 * naming the field (an unknown key, a missing required one, or a bad value and why). */
int mv_scaler_meta_parse(const char *const *keys, const char *const *values, size_t n,
                         mv_scaler_meta *out, char *err, size_t errlen);

typedef struct mv_scaler_result {
    double value;            /* the aggregate over the answering collectors */
    size_t asked;            /* collectors asked */
    size_t answered;         /* of which answered a value (the empty value included) */
    size_t missing;          /* asked - answered */
    size_t series;           /* series summed over the collectors' answers ("count") */
    char first_missing[256]; /* "<url>: <reason>" of the first missing collector, or "" */
} mv_scaler_result;

typedef struct mv_scaler_conns mv_scaler_conns;
/* Returns NULL when out of memory. */
mv_scaler_conns *mv_scaler_conns_create(void);
void mv_scaler_conns_destroy(mv_scaler_conns *c); /* NULL-safe */

/* Asks every collector in `bases` ("http://10.1.2.3:9469", no trailing slash) for the
 * metadata's workload, sending `token` as a bearer token when not NULL. Returns 0 with `out`
 * filled, -EIO when the policy refuses the missing collectors (out->first_missing says which),
 * -E2BIG with more than MV_SCALER_COLLECTORS_MAX collectors, -ENOENT with none, -ENOMEM. */
int mv_scaler_query(mv_scaler_conns *conns, const mv_scaler_meta *m, const char *const *bases,
                    size_t n, const char *token, mv_scaler_result *out);

/* ---- Finding the collectors (the API server) ---- */

typedef struct mv_kubec_cred mv_kubec_cred;

typedef struct mv_scaler_discovery {
    const char *api;     /* "https://10.0.0.1:443" */
    mv_kubec_cred *cred; /* the scaler's ServiceAccount token (borrowed) */
    const char *collector_namespace;
    mv_lsel collector_selector; /* the collector pods' labels */
    unsigned collector_port;
    int timeout_ms; /* per API server request */
} mv_scaler_discovery;

typedef struct mv_scaler_targets {
    char **bases; /* "http://IP:PORT" of each collector to ask */
    size_t n;
    size_t nodes;     /* nodes running a selected (Running) pod of the workload */
    size_t uncovered; /* of which have no running collector: missing, as for the policy */
    char first_uncovered[256];
} mv_scaler_targets;

/* Lists the workload's Running pods (namespace + selector, matched again here) and the
 * collector pods, and returns the collector of each node that runs one of the workload's pods.
 * Returns 0, -EIO (API server unreachable or a bad answer; err says which request), -E2BIG,
 * -ENOMEM. Free with mv_scaler_targets_clear. */
int mv_scaler_discover(const mv_scaler_discovery *d, const mv_scaler_meta *m,
                       mv_scaler_targets *out, char *err, size_t errlen);
void mv_scaler_targets_clear(mv_scaler_targets *t);

#endif
