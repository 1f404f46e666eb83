/* mv_authz: bearer tokens checked with TokenReview + SubjectAccessReview, decisions cached. */
#include "mv_authz.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "mv_kubec.h"
#include "mv_log.h"
#include "mv_util.h"

#define WAYS               4
#define OWN_TOKEN_REREAD_S 60

typedef struct slot {
    uint8_t key[32];
    uint64_t expires_ns; /* 0 = empty */
    unsigned status;
} slot;

struct mv_authz {
    char *url;
    mv_kubec_cred *cred; /* the collector's own token and the API server's CA */
    int timeout_ms;
    unsigned max_inflight;
    uint64_t ttl_allow_ns, ttl_deny_ns;
    atomic_uint inflight;

    pthread_mutex_t mu; /* guards everything below */
    slot *slots;
    size_t nsets;
    mv_authz_stats st;
};

int mv_authz_mode_parse(const char *s, mv_authz_mode *out)
{
    if (s && !strcmp(s, "none"))
        *out = MV_AUTHZ_NONE;
    else if (s && !strcmp(s, "kubernetes"))
        *out = MV_AUTHZ_KUBERNETES;
    else
        return -EINVAL;
    return 0;
}

const char *mv_authz_mode_name(mv_authz_mode m)
{
    return m == MV_AUTHZ_KUBERNETES ? "kubernetes" : "none";
}

/* ---- API calls ------------------------------------------------------------------------- */

/* POSTs `body` to url path `api`; returns 0 with the HTTP status and answer in b, or -EIO
 * with a reason. A 401 (our own token rotated) is retried once with the token re-read. */
static int post(mv_authz *a, const char *api, const char *body, mv_util_buf *b, long *status,
                char *err, size_t errlen)
{
    size_t ul = strlen(a->url) + strlen(api) + 1;
    char *url = malloc(ul);
    if (!url)
        return -ENOMEM;
    snprintf(url, ul, "%s%s", a->url, api);
    int rc = mv_kubec_request(a->cred, url, api, body, a->timeout_ms, b, status, err, errlen);
    free(url);
    if (rc == 0 && *status != 200 && *status != 201) {
        mv_util_err_set(err, errlen, "POST %s: HTTP %ld%s", api, *status,
                        *status == 401 || *status == 403
                            ? " (check the collector's token and its RBAC: create tokenreviews and "
                              "subjectaccessreviews)"
                            : "");
        rc = -EIO;
    }
    return rc;
}

/* Asks the API server. Returns the decision's status and sets reason. */
static unsigned review(mv_authz *a, const char *token, const char *path, char *reason, size_t rlen)
{
    char err[MV_ERR_MAX] = "";
    mv_util_buf b = {.cap = MV_AUTHZ_BODY_MAX};
    long status = 0;
    unsigned out = 503;
    mv_authz_user u = {0};
    char *body = mv_authz_token_review_body(token);
    if (!body) {
        mv_util_fmt(reason, rlen, "out of memory");
        return 503;
    }
    pthread_mutex_lock(&a->mu);
    a->st.token_reviews++;
    pthread_mutex_unlock(&a->mu);
    int rc =
        post(a, "/apis/authentication.k8s.io/v1/tokenreviews", body, &b, &status, err, sizeof err);
    explicit_bzero(body, strlen(body));
    free(body);
    if (rc == 0)
        rc = mv_authz_parse_token_review(b.data ? b.data : "", b.len, &u, err, sizeof err);
    mv_util_buf_free(&b);
    if (rc < 0) {
        MV_WARN("authz.review_failed", "review=TokenReview path=%s err=%s", mv_log_q(path),
                mv_log_q(err));
        mv_util_fmt(reason, rlen, "authentication unavailable: the API server could not be asked");
        return 503;
    }
    if (!u.authenticated) {
        MV_DEBUG("authz.unauthenticated", "path=%s error=%s", mv_log_q(path), mv_log_q(u.error));
        mv_util_fmt(reason, rlen, "invalid bearer token");
        mv_authz_user_clear(&u);
        return 401;
    }
    body = mv_authz_access_review_body(&u, path, "get");
    if (!body) {
        mv_authz_user_clear(&u);
        mv_util_fmt(reason, rlen, "out of memory");
        return 503;
    }
    pthread_mutex_lock(&a->mu);
    a->st.access_reviews++;
    pthread_mutex_unlock(&a->mu);
    b = (mv_util_buf){.cap = MV_AUTHZ_BODY_MAX};
    rc = post(a, "/apis/authorization.k8s.io/v1/subjectaccessreviews", body, &b, &status, err,
              sizeof err);
    free(body);
    int allowed = 0;
    char why[MV_AUTHZ_REASON_MAX] = "";
    if (rc == 0)
        rc = mv_authz_parse_access_review(b.data ? b.data : "", b.len, &allowed, why, sizeof why,
                                          err, sizeof err);
    mv_util_buf_free(&b);
    if (rc < 0) {
        MV_WARN("authz.review_failed", "review=SubjectAccessReview path=%s user=%s err=%s",
                mv_log_q(path), mv_log_q(u.username), mv_log_q(err));
        mv_util_fmt(reason, rlen, "authorization unavailable: the API server could not be asked");
    } else if (allowed) {
        out = 200;
        reason[0] = 0;
    } else {
        out = 403;
        MV_INFO("authz.forbidden", "path=%s user=%s reason=%s", mv_log_q(path),
                mv_log_q(u.username), mv_log_q(why));
        mv_util_fmt(reason, rlen, "not allowed to get %.*s", 64, path); /* as when cached */
    }
    mv_authz_user_clear(&u);
    return out;
}

/* ---- Cache ------------------------------------------------------------------------------- */

static slot *set_of(mv_authz *a, const uint8_t key[32])
{
    uint64_t h;
    memcpy(&h, key, sizeof h);
    return &a->slots[(h % a->nsets) * WAYS];
}

/* Caller holds a->mu. */
static int cache_get(mv_authz *a, const uint8_t key[32], uint64_t now, unsigned *status)
{
    slot *s = set_of(a, key);
    for (int i = 0; i < WAYS; i++)
        if (s[i].expires_ns > now && !memcmp(s[i].key, key, 32)) {
            *status = s[i].status;
            return 1;
        }
    return 0;
}

static void cache_put(mv_authz *a, const uint8_t key[32], uint64_t now, unsigned status)
{
    uint64_t ttl = status == 200 ? a->ttl_allow_ns : a->ttl_deny_ns;
    slot *s = set_of(a, key), *v = &s[0];
    for (int i = 0; i < WAYS; i++) {
        if (s[i].expires_ns && !memcmp(s[i].key, key, 32)) {
            v = &s[i];
            break;
        }
        if (s[i].expires_ns < v->expires_ns)
            v = &s[i]; /* the empty, expired or soonest to expire */
    }
    memcpy(v->key, key, 32);
    v->expires_ns = now + ttl;
    v->status = status;
}

/* ---- Check -------------------------------------------------------------------------------- */

/* The token of "Bearer TOKEN" (scheme case-insensitive), or NULL. */
static const char *bearer(const char *h, size_t *len)
{
    if (!h || strncasecmp(h, "Bearer ", 7))
        return NULL;
    h += 7;
    while (*h == ' ')
        h++;
    size_t n = strlen(h);
    while (n && h[n - 1] == ' ')
        n--;
    if (!n || n > MV_AUTHZ_TOKEN_MAX)
        return NULL;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)h[i] <= 0x20 || (unsigned char)h[i] >= 0x7f)
            return NULL; /* tokens are printable ASCII (JWTs: base64url and dots) */
    *len = n;
    return h;
}

static void count(mv_authz *a, unsigned status)
{
    if (status == 200)
        a->st.allowed++;
    else if (status == 401)
        a->st.unauthenticated++;
    else if (status == 403)
        a->st.forbidden++;
    else
        a->st.unavailable++;
}

void mv_authz_check(mv_authz *a, const char *authorization, const char *path, mv_authz_decision *d)
{
    memset(d, 0, sizeof *d);
    size_t tl = 0;
    const char *tok = bearer(authorization, &tl);
    if (!tok) {
        d->status = 401;
        mv_util_fmt(d->reason, sizeof d->reason, "%s",
                    authorization ? "malformed Authorization header: want Bearer TOKEN"
                                  : "bearer token required");
        pthread_mutex_lock(&a->mu);
        a->st.unauthenticated++;
        pthread_mutex_unlock(&a->mu);
        return;
    }
    size_t pl = strlen(path);
    char *token = malloc(tl + 1);
    char *kb = malloc(tl + 1 + pl);
    if (!token || !kb) {
        free(token);
        free(kb);
        d->status = 503;
        mv_util_fmt(d->reason, sizeof d->reason, "out of memory");
        return;
    }
    memcpy(token, tok, tl);
    token[tl] = 0;
    memcpy(kb, tok, tl);
    kb[tl] = '\n'; /* neither a token nor a path holds a line break */
    memcpy(kb + tl + 1, path, pl);
    uint8_t key[32];
    mv_authz_sha256(kb, tl + 1 + pl, key);
    explicit_bzero(kb, tl + 1 + pl);
    free(kb);

    pthread_mutex_lock(&a->mu);
    unsigned st;
    int hit = cache_get(a, key, mv_util_mono_ns(), &st);
    if (hit) {
        a->st.cache_hits++;
        count(a, st);
    } else {
        a->st.cache_misses++;
    }
    pthread_mutex_unlock(&a->mu);
    if (hit) {
        d->status = st;
        d->cached = 1;
        if (st == 401)
            mv_util_fmt(d->reason, sizeof d->reason, "invalid bearer token");
        else if (st == 403)
            mv_util_fmt(d->reason, sizeof d->reason, "not allowed to get %.*s", 64, path);
        goto out;
    }
    if (atomic_fetch_add(&a->inflight, 1) >= a->max_inflight) {
        atomic_fetch_sub(&a->inflight, 1);
        d->status = 503;
        mv_util_fmt(d->reason, sizeof d->reason,
                    "too many authentication reviews waiting (at most %u, --auth-max-inflight)",
                    a->max_inflight);
        pthread_mutex_lock(&a->mu);
        a->st.busy++;
        a->st.unavailable++;
        pthread_mutex_unlock(&a->mu);
        goto out;
    }
    d->status = review(a, token, path, d->reason, sizeof d->reason);
    atomic_fetch_sub(&a->inflight, 1);
    pthread_mutex_lock(&a->mu);
    count(a, d->status);
    if (d->status != 503)
        cache_put(a, key, mv_util_mono_ns(), d->status);
    pthread_mutex_unlock(&a->mu);
out:
    explicit_bzero(token, tl);
    free(token);
}

void mv_authz_get_stats(mv_authz *a, mv_authz_stats *out)
{
    pthread_mutex_lock(&a->mu);
    *out = a->st;
    pthread_mutex_unlock(&a->mu);
}

/* ---- Lifecycle ------------------------------------------------------------------------------ */

const char *mv_authz_api_server(const mv_authz *a)
{
    return a->url;
}

int mv_authz_create(const mv_authz_opts *o, mv_authz **out)
{
    *out = NULL;
    char in_cluster[300] = "";
    const char *url = o->api_server && o->api_server[0] ? o->api_server : NULL;
    if (!url) {
        const char *h = getenv("KUBERNETES_SERVICE_HOST"), *p = getenv("KUBERNETES_SERVICE_PORT");
        if (h && h[0] && strlen(h) < 200 && (!p || strlen(p) < 8)) {
            int v6 = strchr(h, ':') != NULL;
            mv_util_fmt(in_cluster, sizeof in_cluster, "https://%s%s%s:%s", v6 ? "[" : "", h,
                        v6 ? "]" : "", p && p[0] ? p : "443");
            url = in_cluster;
        }
    }
    if (!url || (strncmp(url, "http://", 7) && strncmp(url, "https://", 8))) {
        MV_ERROR("authz.bad_api_server", "api_server=%s detail=%s", mv_log_q(url ? url : ""),
                 mv_log_q("--auth kubernetes needs --kube-api-server http(s)://HOST:PORT or "
                          "KUBERNETES_SERVICE_HOST (in a pod)"));
        return -EINVAL;
    }
    mv_authz *a = calloc(1, sizeof *a);
    if (!a)
        return -ENOMEM;
    pthread_mutex_init(&a->mu, NULL);
    const char *tf = o->token_file ? o->token_file : MV_AUTHZ_IN_CLUSTER_DIR "/token";
    const char *cf = o->ca_file;
    if (!cf && access(MV_AUTHZ_IN_CLUSTER_DIR "/ca.crt", R_OK) == 0)
        cf = MV_AUTHZ_IN_CLUSTER_DIR "/ca.crt";
    /* Re-read at most once a second after a 401, every 5 s while there is no token: not on
     * every request (each failed read logs a warning). Projected tokens rotate. */
    mv_kubec_cred_opts co = {.token_file = tf,
                             .ca_file = cf,
                             .log_area = "authz",
                             .effect = "reviews are sent with the token read before, if any",
                             .reread_s = OWN_TOKEN_REREAD_S,
                             .retry_s = 5,
                             .forced_min_s = 1,
                             .refuse_empty = 1};
    a->url = strdup(url);
    int crc = mv_kubec_cred_create(&co, &a->cred);
    a->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 2000;
    a->max_inflight = o->max_inflight ? o->max_inflight : 16;
    unsigned entries = o->cache_entries ? o->cache_entries : 4096;
    a->nsets = (entries + WAYS - 1) / WAYS;
    a->slots = calloc(a->nsets * WAYS, sizeof *a->slots);
    a->ttl_allow_ns = (uint64_t)(o->ttl_allow_s ? o->ttl_allow_s : 60) * 1000000000ull;
    a->ttl_deny_ns = (uint64_t)(o->ttl_deny_s ? o->ttl_deny_s : 10) * 1000000000ull;
    if (!a->url || crc < 0 || !a->slots) {
        mv_authz_destroy(a);
        return -ENOMEM;
    }
    size_t ul = strlen(a->url);
    while (ul > 8 && a->url[ul - 1] == '/')
        a->url[--ul] = 0;
    mv_kubec_cred_load(a->cred);
    *out = a;
    return 0;
}

void mv_authz_destroy(mv_authz *a)
{
    if (!a)
        return;
    mv_kubec_cred_destroy(a->cred);
    free(a->url);
    free(a->slots);
    pthread_mutex_destroy(&a->mu);
    free(a);
}
