/* mv_kubec: the parts of a Kubernetes API server client that the agent (pod lookups) and the
 * collector (TokenReview/SubjectAccessReview) share: the bearer credential, one request, and
 * the strict JSON parse of an answer.
 *
 * Credential: the token file is re-read when the token is older than reread_s (sooner while
 * there is none, and after a 401), since projected service-account tokens rotate. Each read
 * logs <area>.token_loaded when the token changed and <area>.token_unreadable when the file
 * cannot be used (the token read before, if any, stays in use). The Authorization header is
 * built per request and wiped after it. Thread-safe: the token is guarded by a lock and each
 * request uses its own curl handle.
 */
#ifndef MV_KUBEC_H
#define MV_KUBEC_H

#include <stddef.h>

#include <json-c/json.h>

#include "mv_util.h"

#define MV_KUBEC_TOKEN_MAX (64u << 10) /* bytes of a token file accepted */

typedef struct mv_kubec_cred_opts {
    const char *token_file; /* NULL = no Authorization header */
    const char *ca_file;    /* NULL = system CAs */
    const char *log_area;   /* prefix of the log events ("kube", "authz") */
    const char *effect;     /* effect= of <area>.token_unreadable; NULL = no such field */
    int reread_s;           /* re-read a token this old */
    int retry_s;            /* re-read this often while there is no token */
    int forced_min_s;       /* after a 401: re-read when older than this (0 = always) */
    int refuse_empty;       /* an empty token or one with NUL bytes is unreadable */
} mv_kubec_cred_opts;

typedef struct mv_kubec_cred mv_kubec_cred;

/* Copies the options (and initialises libcurl once). Returns 0 or -ENOMEM. */
int mv_kubec_cred_create(const mv_kubec_cred_opts *o, mv_kubec_cred **out);
void mv_kubec_cred_destroy(mv_kubec_cred *c); /* NULL-safe; wipes the token */
/* Reads the token file now (no-op without one). */
void mv_kubec_cred_load(mv_kubec_cred *c);

/* One request to `url`: GET, or POST of the JSON `body` when not NULL, with Accept:
 * application/json, the bearer token, `timeout_ms` for connect and for the whole exchange,
 * http/https only. The answer goes to `b` (its cap limits it). A 401 is retried once with the
 * token re-read (when there is a token file). Returns 0 with the HTTP status in *status, or
 * -EIO (-ENOMEM) with "<GET|POST> <what>: <reason>" in err. */
int mv_kubec_request(mv_kubec_cred *c, const char *url, const char *what, const char *body,
                     int timeout_ms, mv_util_buf *b, long *status, char *err, size_t errlen);

/* Parses untrusted JSON: at most `max` bytes, `depth` levels, strict, UTF-8 validated, nothing
 * but white space after the document. Returns 0 with *root (release with json_object_put),
 * -E2BIG (longer than max), -EINVAL (not valid JSON) or -ENOMEM; the caller words the error. */
int mv_kubec_json_parse(const char *json, size_t len, size_t max, int depth, json_object **root);

#endif
