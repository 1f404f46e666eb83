/* mv_scsvc_eval: one evaluation of a ScaledObject's value, as a worker runs it: the workload's
 * selector (the metadata's, or the scale target's from the API server, cached), its collectors
 * (discovery, cached), the query under the missing-collector policy, and the logs of state
 * changes. Above the caches and metrics; blocks (the pool's workers call it). */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mv_kubec.h"
#include "mv_log.h"
#include "mv_rpc.h"
#include "mv_scsvc_int.h"
#include "mv_util.h"

#define CACHE_ENTRIES   1024
#define TOKEN_REREAD_MS 60000

int mv_scsvc__ctx_init(mv_scsvc__ctx *c, char *err, size_t errlen)
{
    pthread_mutex_init(&c->token_mu, NULL);
    if (mv_scsvc__kv_init(&c->targets, CACHE_ENTRIES) ||
        mv_scsvc__kv_init(&c->discovery, CACHE_ENTRIES) ||
        mv_scsvc__kv_init(&c->empty_logged, CACHE_ENTRIES) ||
        mv_scsvc__kv_init(&c->failing, CACHE_ENTRIES)) {
        mv_util_err_set(err, errlen, "out of memory");
        return -ENOMEM;
    }
    mv_kubec_cred_opts co = {.token_file = c->cfg.api_token_file,
                             .ca_file = c->cfg.api_ca_file,
                             .log_area = "scaler.api",
                             .effect = "requests are sent with the token read before, if any",
                             .reread_s = 60,
                             .retry_s = 5,
                             .forced_min_s = 1,
                             .refuse_empty = 1};
    if (mv_kubec_cred_create(&co, &c->api_cred) != 0) {
        mv_util_err_set(err, errlen, "out of memory");
        return -ENOMEM;
    }
    mv_kubec_cred_load(c->api_cred);
    c->disc.api = c->cfg.api_server;
    c->disc.cred = c->api_cred;
    c->disc.collector_namespace = c->cfg.collector_namespace;
    c->disc.collector_port = c->cfg.collector_port;
    c->disc.timeout_ms = (int)c->cfg.api_timeout_ms;
    char why[256];
    const char *cs = c->cfg.collector_selector;
    if (mv_lsel_parse(cs, strlen(cs), &c->disc.collector_selector, why, sizeof why) != 0) {
        mv_util_err_set(err, errlen, "--collector-selector: %s", why);
        return -EINVAL;
    }
    return 0;
}

void mv_scsvc__ctx_destroy(mv_scsvc__ctx *c)
{
    mv_kubec_cred_destroy(c->api_cred);
    c->api_cred = NULL;
    mv_scsvc__kv_destroy(&c->targets);
    mv_scsvc__kv_destroy(&c->discovery);
    mv_scsvc__kv_destroy(&c->empty_logged);
    mv_scsvc__kv_destroy(&c->failing);
    if (c->coll_token) {
        memset(c->coll_token, 0, strlen(c->coll_token));
        free(c->coll_token);
        c->coll_token = NULL;
    }
    pthread_mutex_destroy(&c->token_mu);
}

/* ---- the collectors' bearer token ---- */

/* Reads a token file: at most MV_KUBEC_TOKEN_MAX bytes, trailing white space cut, no control
 * bytes. NULL when unusable. */
static char *read_token(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    char *buf = malloc(MV_KUBEC_TOKEN_MAX + 1);
    size_t n = 0;
    ssize_t r = 0;
    while (buf && n <= MV_KUBEC_TOKEN_MAX &&
           (r = read(fd, buf + n, MV_KUBEC_TOKEN_MAX + 1 - n)) > 0)
        n += (size_t)r;
    close(fd);
    if (!buf || r < 0 || n > MV_KUBEC_TOKEN_MAX) {
        free(buf);
        return NULL;
    }
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
        n--;
    buf[n] = '\0';
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)buf[i] < 0x21 || (unsigned char)buf[i] > 0x7e)
            n = 0;
    if (n == 0) {
        memset(buf, 0, MV_KUBEC_TOKEN_MAX + 1);
        free(buf);
        return NULL;
    }
    return buf;
}

/* A copy of the token to send to the collectors (NULL: none), re-read every minute. */
static char *collector_token(mv_scsvc__ctx *c)
{
    if (!c->cfg.collector_token_file)
        return NULL;
    pthread_mutex_lock(&c->token_mu);
    uint64_t now = mv_util_mono_ms();
    if (!c->coll_token || now - c->coll_token_read_ms >= TOKEN_REREAD_MS) {
        char *t = read_token(c->cfg.collector_token_file);
        c->coll_token_read_ms = now;
        if (t) {
            if (!c->coll_token || strcmp(t, c->coll_token) != 0)
                MV_INFO("scaler.collector_token_loaded", "file=%s",
                        mv_log_q(c->cfg.collector_token_file));
            free(c->coll_token);
            c->coll_token = t;
        } else {
            MV_WARN("scaler.collector_token_unreadable", "file=%s effect=%s",
                    mv_log_q(c->cfg.collector_token_file),
                    mv_log_q(c->coll_token ? "the token read before is sent"
                                           : "collectors are asked without a token"));
        }
    }
    char *out = c->coll_token ? strdup(c->coll_token) : NULL;
    pthread_mutex_unlock(&c->token_mu);
    return out;
}

static void wipe_free(char *s)
{
    if (s) {
        memset(s, 0, strlen(s));
        free(s);
    }
}

/* ---- the scale target's selector ---- */

__attribute__((format(printf, 3, 4))) static void fail(mv_scsvc__result *out, int code,
                                                       const char *fmt, ...)
{
    out->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out->msg, sizeof out->msg, fmt, ap);
    va_end(ap);
}

/* GETs `url` into `b` (cap MV_SCSVC_OBJECT_MAX). 0, or fills `out` with UNAVAILABLE. */
static int api_get(mv_scsvc__ctx *c, const char *url, const char *what, mv_util_buf *b,
                   mv_scsvc__result *out)
{
    char err[512];
    long status = 0;
    b->cap = MV_SCSVC_OBJECT_MAX;
    int rc = mv_kubec_request(c->api_cred, url, what, NULL, (int)c->cfg.api_timeout_ms, b, &status,
                              err, sizeof err);
    if (rc == 0 && status != 200) {
        snprintf(err, sizeof err, "GET %s: HTTP %ld", what, status);
        rc = -EIO;
    }
    if (rc) {
        atomic_fetch_add(&c->metrics.discovery_errors, 1);
        fail(out, MV_RPC_UNAVAILABLE, "API server: %s", err);
    }
    return rc;
}

/* The label selector of ScaledObject ns/name's scale target into sel (MV_SCSVC_SELECTOR_MAX).
 * 0, or -1 with `out` filled. */
static int target_selector(mv_scsvc__ctx *c, const char *ns, const char *name, char *sel,
                           mv_scsvc__result *out)
{
    char key[2 * MV_SCSVC_NAME_MAX + 4];
    snprintf(key, sizeof key, "%s/%s", ns, name);
    size_t len;
    char *hit = mv_scsvc__kv_get(&c->targets, key, c->cfg.discovery_ttl_ms, &len);
    if (hit) {
        atomic_fetch_add(&c->metrics.cache_hits[MV_SCSVC__HIT_TARGET], 1);
        snprintf(sel, MV_SCSVC_SELECTOR_MAX, "%s", hit);
        free(hit);
        return 0;
    }
    char url[1024], what[600], err[512];
    mv_util_buf b = {0};
    snprintf(url, sizeof url, "%s/apis/keda.sh/v1alpha1/namespaces/%s/scaledobjects/%s",
             c->cfg.api_server, ns, name);
    snprintf(what, sizeof what, "ScaledObject %s", key);
    if (api_get(c, url, what, &b, out) != 0) {
        mv_util_buf_free(&b);
        return -1;
    }
    mv_scsvc_target_ref t;
    int rc = mv_scsvc_parse_scaledobject(b.data, b.len, &t, err, sizeof err);
    mv_util_buf_free(&b);
    if (rc != 0) {
        atomic_fetch_add(&c->metrics.discovery_errors, 1);
        fail(out, MV_RPC_UNAVAILABLE, "API server: GET %s: %s", what, err);
        return -1;
    }
    const char *res = mv_scsvc_scale_resource(&t);
    if (!res) {
        char k[MV_SCSVC_NAME_MAX + 100];
        snprintf(k, sizeof k, "%.63s (apiVersion %.200s)", t.kind, t.api_version);
        fail(out, MV_RPC_INVALID_ARGUMENT,
             "ScaledObject %s: scale target kind %s has no scale subresource the scaler reads "
             "(Deployment, StatefulSet or ReplicaSet of apps/v1); give a selector in the "
             "metadata",
             key, k);
        return -1;
    }
    snprintf(url, sizeof url, "%s/apis/apps/v1/namespaces/%s/%s/%s/scale", c->cfg.api_server, ns,
             res, t.name);
    snprintf(what, sizeof what, "scale of %s %s/%s", res, ns, t.name);
    if (api_get(c, url, what, &b, out) != 0) {
        mv_util_buf_free(&b);
        return -1;
    }
    rc = mv_scsvc_parse_scale(b.data, b.len, sel, err, sizeof err);
    mv_util_buf_free(&b);
    if (rc != 0) {
        atomic_fetch_add(&c->metrics.discovery_errors, 1);
        fail(out, MV_RPC_UNAVAILABLE, "API server: GET %s: %s", what, err);
        return -1;
    }
    mv_scsvc__kv_put(&c->targets, key, sel, strlen(sel));
    return 0;
}

/* ---- discovery, cached: "nodes uncovered n\nfirst_uncovered\nbase\nbase..." ---- */

static char *targets_pack(const mv_scaler_targets *t, size_t *len)
{
    size_t cap = 128 + strlen(t->first_uncovered);
    for (size_t i = 0; i < t->n; i++)
        cap += strlen(t->bases[i]) + 1;
    char *s = malloc(cap);
    if (!s)
        return NULL;
    size_t at = (size_t)snprintf(s, cap, "%zu %zu %zu\n", t->nodes, t->uncovered, t->n);
    for (const char *p = t->first_uncovered; *p; p++)
        s[at++] = *p == '\n' ? '?' : *p;
    s[at++] = '\n';
    for (size_t i = 0; i < t->n; i++) {
        size_t k = strlen(t->bases[i]);
        memcpy(s + at, t->bases[i], k);
        at += k;
        s[at++] = '\n';
    }
    *len = at;
    return s;
}

/* Unpacks in place: bases point into `s`. 0 or -1. */
static int targets_unpack(char *s, mv_scaler_targets *t, char ***bases)
{
    memset(t, 0, sizeof *t);
    char *line = strchr(s, '\n');
    if (!line || sscanf(s, "%zu %zu %zu", &t->nodes, &t->uncovered, &t->n) != 3 ||
        t->n > MV_SCALER_COLLECTORS_MAX)
        return -1;
    char *p = line + 1, *nl = strchr(p, '\n');
    if (!nl)
        return -1;
    *nl = '\0';
    snprintf(t->first_uncovered, sizeof t->first_uncovered, "%s", p);
    *bases = calloc(t->n ? t->n : 1, sizeof **bases);
    if (!*bases)
        return -1;
    p = nl + 1;
    for (size_t i = 0; i < t->n; i++) {
        nl = strchr(p, '\n');
        if (!nl) {
            free(*bases);
            return -1;
        }
        *nl = '\0';
        (*bases)[i] = p;
        p = nl + 1;
    }
    return 0;
}

/* ---- logs of state changes per ScaledObject ---- */

/* Logs scaler.query_failed, scaler.partial or scaler.query_recovered when the state of
 * trigger `so` ("ns/name metric") changed since its last evaluation. */
static void log_state(mv_scsvc__ctx *c, const char *ns, const char *name, const char *so,
                      const char *metric, const mv_scsvc__result *r)
{
    char now[600];
    if (r->code != MV_RPC_OK)
        snprintf(now, sizeof now, "failed %.500s", r->msg);
    else if (r->missing)
        snprintf(now, sizeof now, "partial %zu", r->missing);
    else
        now[0] = '\0';
    char *before = mv_scsvc__kv_get(&c->failing, so, UINT64_MAX, NULL);
    if (before ? strcmp(before, now) != 0 : now[0] != '\0') {
        if (r->code != MV_RPC_OK)
            MV_WARN("scaler.query_failed", "namespace=%s name=%s metric=%s code=%s reason=%s",
                    mv_log_q(ns), mv_log_q(name), mv_log_q(metric), mv_rpc_code_name(r->code),
                    mv_log_q(r->msg));
        else if (r->missing)
            MV_WARN("scaler.partial", "namespace=%s name=%s metric=%s missing=%zu reason=%s",
                    mv_log_q(ns), mv_log_q(name), mv_log_q(metric), r->missing, mv_log_q(r->msg));
        else
            MV_INFO("scaler.query_recovered", "namespace=%s name=%s metric=%s", mv_log_q(ns),
                    mv_log_q(name), mv_log_q(metric));
        if (now[0])
            mv_scsvc__kv_put(&c->failing, so, now, strlen(now));
        else
            mv_scsvc__kv_del(&c->failing, so);
    }
    free(before);
}

/* ---- the evaluation ---- */

static void evaluate(mv_scsvc__ctx *c, const char *so_ns, const char *so_name, const char *so,
                     mv_scaler_meta *m, mv_scaler_conns *conns, mv_scsvc__result *out)
{
    char why[256];
    if (!m->has_selector) {
        /* The workload is the scale target, in the ScaledObject's namespace. */
        const char *ns = so_ns[0] ? so_ns : m->namespace_;
        static _Thread_local char sel[MV_SCSVC_SELECTOR_MAX];
        if (target_selector(c, ns, so_name, sel, out) != 0)
            return;
        if (mv_lsel_parse(sel, strlen(sel), &m->selector, why, sizeof why) != 0) {
            fail(out, MV_RPC_UNAVAILABLE,
                 "the scale target of ScaledObject %s has a selector the scaler cannot use: %s", so,
                 why);
            return;
        }
        m->has_selector = 1;
        snprintf(m->namespace_, sizeof m->namespace_, "%s", ns);
    }
    static _Thread_local char text[4 * MV_LSEL_TEXT_MAX], dkey[4 * MV_LSEL_TEXT_MAX + 80];
    mv_lsel_format(&m->selector, text, sizeof text);
    snprintf(dkey, sizeof dkey, "%s\n%s", m->namespace_, text);

    mv_scaler_targets t;
    char **bases = NULL,
         *blob = mv_scsvc__kv_get(&c->discovery, dkey, c->cfg.discovery_ttl_ms, NULL);
    int own = 0; /* 1: t owns its bases (fresh from discovery) */
    if (blob && targets_unpack(blob, &t, &bases) == 0) {
        atomic_fetch_add(&c->metrics.cache_hits[MV_SCSVC__HIT_DISCOVERY], 1);
    } else {
        free(blob);
        blob = NULL;
        char err[512];
        int rc = mv_scaler_discover(&c->disc, m, &t, err, sizeof err);
        if (rc != 0) {
            atomic_fetch_add(&c->metrics.discovery_errors, 1);
            fail(out, rc == -EIO ? MV_RPC_UNAVAILABLE : MV_RPC_RESOURCE_EXHAUSTED, "API server: %s",
                 rc == -EIO ? err : strerror(-rc));
            return;
        }
        own = 1;
        bases = t.bases;
        size_t len;
        char *packed = targets_pack(&t, &len);
        if (packed)
            mv_scsvc__kv_put(&c->discovery, dkey, packed, len);
        free(packed);
    }
    if (t.nodes == 0) {
        /* A selector matching no running pod: an empty workload, a real 0. */
        if (mv_scsvc__kv_add(&c->empty_logged, so) == 1)
            MV_INFO("scaler.empty_workload", "namespace=%s name=%s selector=%s value=0",
                    mv_log_q(so_ns), mv_log_q(so_name), mv_log_q(text));
        goto out;
    }
    mv_scsvc__kv_del(&c->empty_logged, so);
    if (t.uncovered && (m->policy == MV_SCALER_FAIL || t.n == 0)) {
        atomic_fetch_add(&c->metrics.collectors_missing, t.uncovered);
        snprintf(out->msg, sizeof out->msg,
                 "collector missing: node %s runs pods of the workload but no running "
                 "collector (%zu of %zu nodes; missingCollectors: %s)",
                 t.first_uncovered, t.uncovered, t.nodes,
                 m->policy == MV_SCALER_FAIL ? "fail" : "partial");
        out->code = MV_RPC_UNAVAILABLE;
        mv_scsvc__kv_del(&c->discovery, dkey); /* the collector may be starting: look again */
        goto out;
    }
    char *token = collector_token(c);
    mv_scaler_result r;
    int rc = mv_scaler_query(conns, m, (const char *const *)bases, t.n, token, &r);
    wipe_free(token);
    atomic_fetch_add(&c->metrics.collectors_asked, r.asked);
    atomic_fetch_add(&c->metrics.collectors_missing, r.missing + t.uncovered);
    if (rc == -EIO) {
        snprintf(out->msg, sizeof out->msg,
                 "collector missing: %s (%zu of %zu missing; missingCollectors: %s)",
                 r.first_missing, r.missing + t.uncovered, r.asked + t.uncovered,
                 m->policy == MV_SCALER_FAIL ? "fail" : "partial");
        out->code = MV_RPC_UNAVAILABLE;
        mv_scsvc__kv_del(&c->discovery, dkey);
        goto out;
    }
    if (rc != 0) {
        snprintf(out->msg, sizeof out->msg, "query failed: %s", strerror(-rc));
        out->code = MV_RPC_INTERNAL;
        goto out;
    }
    out->value = r.value;
    out->missing = r.missing + t.uncovered;
    if (out->missing) {
        atomic_fetch_add(&c->metrics.partial_answers, 1);
        snprintf(out->msg, sizeof out->msg, "%s",
                 r.first_missing[0] ? r.first_missing : t.first_uncovered);
    }
out:
    if (own)
        mv_scaler_targets_clear(&t);
    else
        free(bases);
    free(blob);
}

void mv_scsvc__eval(mv_scsvc__ctx *c, const char *so_ns, const char *so_name, mv_scaler_meta *m,
                    mv_scaler_conns *conns, mv_scsvc__result *out)
{
    memset(out, 0, sizeof *out);
    out->code = MV_RPC_OK;
    char so[2 * MV_SCSVC_NAME_MAX + 4];
    snprintf(so, sizeof so, "%s/%s", so_ns, so_name);
    evaluate(c, so_ns, so_name, so, m, conns, out);
    /* The state is per trigger: a ScaledObject may have several, one per metric. */
    char state[sizeof so + MV_SCALER_METRIC_MAX + 2];
    snprintf(state, sizeof state, "%s %s", so, m->metric);
    log_state(c, so_ns, so_name, state, m->metric, out);
}
