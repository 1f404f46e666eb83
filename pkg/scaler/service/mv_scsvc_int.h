/* mv_scsvc internals, shared by the module's files only (see mv_scsvc.h for the stack). */
#ifndef MV_SCSVC_INT_H
#define MV_SCSVC_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "mv_scaler.h"
#include "mv_scsvc.h"

/* ---- mv_scsvc_metrics.c ---- */

enum {
    MV_SCSVC__IS_ACTIVE,
    MV_SCSVC__STREAM_IS_ACTIVE,
    MV_SCSVC__GET_METRIC_SPEC,
    MV_SCSVC__GET_METRICS,
    MV_SCSVC__STREAM_METRIC_SPEC,
    MV_SCSVC__METHODS
};
enum { MV_SCSVC__CODES = 17, MV_SCSVC__BUCKETS = 12 };
enum { MV_SCSVC__HIT_RESULT, MV_SCSVC__HIT_DISCOVERY, MV_SCSVC__HIT_TARGET, MV_SCSVC__HITS };

typedef struct mv_scsvc__metrics {
    atomic_ullong calls[MV_SCSVC__METHODS][MV_SCSVC__CODES];
    atomic_ullong dur_bucket[MV_SCSVC__METHODS][MV_SCSVC__BUCKETS]; /* not cumulative */
    atomic_ullong dur_count[MV_SCSVC__METHODS];
    atomic_ullong dur_sum_ns[MV_SCSVC__METHODS];
    atomic_ullong collectors_asked, collectors_missing, partial_answers;
    atomic_ullong rejected_busy, rejected_streams;
    atomic_ullong discovery_errors;
    atomic_ullong cache_hits[MV_SCSVC__HITS];
    atomic_llong streams_open;
} mv_scsvc__metrics;

extern const char *const mv_scsvc__method_names[MV_SCSVC__METHODS];

/* One answered call: its method, gRPC status code and time from arrival to answer. */
void mv_scsvc__metrics_call(mv_scsvc__metrics *m, int method, int code, uint64_t ns);
/* The exposition for an Accept header: a malloc'd body, its content type and length; NULL when
 * it could not be rendered. */
char *mv_scsvc__metrics_render(mv_scsvc__metrics *m, const char *accept, const char **ctype,
                               size_t *len);

/* ---- mv_scsvc_cache.c: a bounded map of string keys to byte strings with an age ---- */

typedef struct mv_scsvc__kv_entry {
    char *key;
    char *val;
    size_t len;
    uint64_t stamp_ms;
} mv_scsvc__kv_entry;

typedef struct mv_scsvc__kv {
    pthread_mutex_t mu;
    mv_scsvc__kv_entry *e;
    size_t n, cap;
} mv_scsvc__kv;

int mv_scsvc__kv_init(mv_scsvc__kv *kv, size_t cap);
void mv_scsvc__kv_destroy(mv_scsvc__kv *kv);
/* A malloc'd copy of the value of `key` stored at most ttl_ms ago (NUL-terminated after len
 * bytes), or NULL. */
char *mv_scsvc__kv_get(mv_scsvc__kv *kv, const char *key, uint64_t ttl_ms, size_t *len);
/* Stores a copy (replacing the key's value; the oldest entry goes when full). 0 or -ENOMEM. */
int mv_scsvc__kv_put(mv_scsvc__kv *kv, const char *key, const char *val, size_t len);
void mv_scsvc__kv_del(mv_scsvc__kv *kv, const char *key);
/* Adds `key` when absent: 1 added, 0 already there (-ENOMEM). For "logged once" sets. */
int mv_scsvc__kv_add(mv_scsvc__kv *kv, const char *key);

/* ---- mv_scsvc_eval.c: one evaluation ---- */

typedef struct mv_scsvc__result {
    int code;       /* MV_RPC_* */
    double value;   /* with MV_RPC_OK */
    size_t missing; /* collectors missing (partial answers) */
    char msg[512];  /* the status message when not OK */
} mv_scsvc__result;

typedef struct mv_scsvc__ctx {
    mv_scsvc_config cfg; /* strings owned by the service */
    mv_kubec_cred *api_cred;
    mv_scaler_discovery disc;
    pthread_mutex_t token_mu;
    char *coll_token; /* the collectors' bearer token, re-read every minute */
    uint64_t coll_token_read_ms;
    mv_scsvc__kv targets;   /* "ns/name" -> selector text */
    mv_scsvc__kv discovery; /* "ns\nselector" -> targets */
    mv_scsvc__kv empty_logged;
    mv_scsvc__kv failing; /* "ns/name" -> last failure text (logged on change) */
    mv_scsvc__metrics metrics;
} mv_scsvc__ctx;

int mv_scsvc__ctx_init(mv_scsvc__ctx *c, char *err, size_t errlen);
void mv_scsvc__ctx_destroy(mv_scsvc__ctx *c);

/* Evaluates the workload of ScaledObject so_ns/so_name with metadata `m` (a private copy the
 * call may change): its selector, collectors and value. */
void mv_scsvc__eval(mv_scsvc__ctx *c, const char *so_ns, const char *so_name, mv_scaler_meta *m,
                    mv_scaler_conns *conns, mv_scsvc__result *out);

/* ---- mv_scsvc_pool.c: workers, pending calls, result cache with single flight ---- */

/* Called once per submitted call with the evaluation's result (a worker thread, or the
 * submitting one on a cache hit). */
typedef void (*mv_scsvc__done_fn)(void *arg, const mv_scsvc__result *r);

typedef struct mv_scsvc__pool mv_scsvc__pool;

int mv_scsvc__pool_create(mv_scsvc__ctx *c, mv_scsvc__pool **out);
/* Joins the workers (each finishes its evaluation) and answers every call still waiting with
 * UNAVAILABLE; later submits fail with -ESHUTDOWN. NULL-safe, idempotent. */
void mv_scsvc__pool_stop(mv_scsvc__pool *p);
/* Stops, then frees. NULL-safe. */
void mv_scsvc__pool_destroy(mv_scsvc__pool *p);

/* Submits an evaluation for `key` (the ScaledObject and the metadata that decide the value).
 * Returns 0: `fn` will be (or was, on a fresh cached result) called once; -EBUSY with *pending
 * the number of calls waiting (max_pending reached); -ESHUTDOWN when stopping; -ENOMEM. */
int mv_scsvc__pool_submit(mv_scsvc__pool *p, const char *key, const char *so_ns,
                          const char *so_name, const mv_scaler_meta *m, mv_scsvc__done_fn fn,
                          void *arg, size_t *pending);

#endif
