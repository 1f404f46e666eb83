/* mv_authz: who may read the collector's HTTP endpoints, decided by the Kubernetes API server
 * the way kube-rbac-proxy and the kubelet protect their metrics endpoints.
 *
 * A request's "Authorization: Bearer TOKEN" is sent to the API server as a TokenReview
 * (authentication.k8s.io/v1); the identity it answers is then checked with a
 * SubjectAccessReview (authorization.k8s.io/v1) on the non-resource URL of the request path
 * with verb "get" (RBAC: a ClusterRole with nonResourceURLs ["/metrics"] and verbs ["get"]).
 * The collector calls the API server with its own service-account token and CA.
 *
 * Answers: 200 allowed; 401 no, malformed or rejected token (send "WWW-Authenticate: Bearer");
 * 403 authenticated but not allowed this path; 503 the API server could not be asked or gave
 * an answer that is not a valid review (fail closed: nothing is served without a decision),
 * or more than max_inflight reviews are already waiting.
 *
 * Cache: decisions are kept under the SHA-256 of token and path (the token itself is not
 * kept): 200 for ttl_allow_s, 401/403 for ttl_deny_s, 503 never. The cache is
 * set-associative with cache_entries slots in all; a full set drops its entry that expires
 * first. Thread-safe: handlers on several threads may call mv_authz_check at once.
 *
 * API server answers are untrusted input: bodies over MV_AUTHZ_BODY_MAX, JSON that is not
 * strict UTF-8, deeper than 32 levels, of the wrong kind, or with fields of the wrong type
 * count as "the API server could not be asked" (503).
 */
#ifndef MV_AUTHZ_H
#define MV_AUTHZ_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MV_AUTHZ_BODY_MAX   (64u << 10) /* bytes of one review answer accepted */
#define MV_AUTHZ_TOKEN_MAX  8192        /* bytes of a bearer token accepted */
#define MV_AUTHZ_GROUPS_MAX 256         /* groups of one identity */
#define MV_AUTHZ_NAME_MAX   1024        /* bytes of a user name, uid or group */
#define MV_AUTHZ_REASON_MAX 200

typedef enum { MV_AUTHZ_NONE = 0, MV_AUTHZ_KUBERNETES = 1 } mv_authz_mode;

/* "none" or "kubernetes" -> 0 with *out set; anything else -EINVAL. */
int mv_authz_mode_parse(const char *s, mv_authz_mode *out);
const char *mv_authz_mode_name(mv_authz_mode m);

typedef struct mv_authz_opts {
    const char *api_server; /* "https://10.0.0.1:443"; NULL: from KUBERNETES_SERVICE_HOST/PORT */
    const char *token_file; /* the collector's own token; NULL = the in-cluster path */
    const char *ca_file;    /* NULL = the in-cluster path if readable, else system CAs */
    int timeout_ms;         /* per API call (connect + answer); 0 = 2000 */
    unsigned max_inflight;  /* reviews waiting at once; more get 503; 0 = 16 */
    unsigned cache_entries; /* cache slots; 0 = 4096 */
    unsigned ttl_allow_s;   /* 0 = 60 */
    unsigned ttl_deny_s;    /* 0 = 10 */
} mv_authz_opts;

#define MV_AUTHZ_IN_CLUSTER_DIR "/var/run/secrets/kubernetes.io/serviceaccount"

typedef struct mv_authz mv_authz;

/* Copies the options. Returns 0, -EINVAL (no API server known, bad URL; logged) or -ENOMEM. */
int mv_authz_create(const mv_authz_opts *o, mv_authz **out);
void mv_authz_destroy(mv_authz *a); /* NULL-safe */
/* The API server URL in use. */
const char *mv_authz_api_server(const mv_authz *a);

typedef struct mv_authz_decision {
    unsigned status;                  /* 200, 401, 403 or 503 */
    int cached;                       /* 1 if the cache answered */
    char reason[MV_AUTHZ_REASON_MAX]; /* short, for the response body and the log */
} mv_authz_decision;

/* Decides one request: `authorization` is the Authorization header (NULL when absent), `path`
 * the request path (the non-resource URL asked about). Always fills *d. */
void mv_authz_check(mv_authz *a, const char *authorization, const char *path, mv_authz_decision *d);

typedef struct mv_authz_stats {
    uint64_t cache_hits, cache_misses;
    uint64_t token_reviews, access_reviews; /* calls made to the API server */
    uint64_t allowed, unauthenticated, forbidden, unavailable, busy;
} mv_authz_stats;

void mv_authz_get_stats(mv_authz *a, mv_authz_stats *out);

/* ---- Review answers (untrusted JSON; exposed for tests and the fuzz driver) ---------- */

typedef struct mv_authz_user {
    int authenticated;
    char *username, *uid; /* malloc'd; uid may be NULL */
    char **groups;
    size_t ngroups;
    char error[MV_AUTHZ_REASON_MAX]; /* status.error of a rejected token, cut */
} mv_authz_user;

/* Parses a TokenReview answer. Returns 0 (u->authenticated tells) or -EINVAL with a reason
 * in err (not a TokenReview, wrong types, authenticated without a user name, too many or too
 * long names), -ENOMEM. On error *u is cleared. */
int mv_authz_parse_token_review(const char *json, size_t len, mv_authz_user *u, char *err,
                                size_t errlen);
void mv_authz_user_clear(mv_authz_user *u);

/* Parses a SubjectAccessReview answer: *allowed = status.allowed && !status.denied. Returns 0
 * or -EINVAL with a reason in err. `reason` (may be NULL) gets status.reason, cut. */
int mv_authz_parse_access_review(const char *json, size_t len, int *allowed, char *reason,
                                 size_t reasonlen, char *err, size_t errlen);

/* Request bodies (malloc'd JSON text, NULL on -ENOMEM). */
char *mv_authz_token_review_body(const char *token);
char *mv_authz_access_review_body(const mv_authz_user *u, const char *path, const char *verb);

/* SHA-256 of data (exposed for its test vector). */
void mv_authz_sha256(const void *data, size_t len, uint8_t out[32]);

#ifdef __cplusplus
}
#endif
#endif
