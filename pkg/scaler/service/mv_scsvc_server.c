/* mv_scsvc_server: the gRPC methods of externalscaler.ExternalScaler (requests parsed and
 * checked on the server thread, evaluations handed to the pool), StreamIsActive's streams and
 * their ticker thread, and the HTTP port (/metrics, /healthz). Above the pool. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "keda/externalscaler/externalscaler.pb-c.h"
#include "mv_httpd.h"
#include "mv_log.h"
#include "mv_rpc.h"
#include "mv_scsvc_int.h"
#include "mv_util.h"

#define SVC "/externalscaler.ExternalScaler/"

typedef struct sstream sstream;

struct mv_scsvc {
    mv_scsvc__ctx ctx;
    mv_scsvc__pool *pool;
    mv_rpc_server *rpc;
    mv_httpd *http;
    unsigned grpc_port, metrics_port;
    char *strs[16]; /* the configuration's strings, owned */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t ticker;
    int ticker_started, stopping;
    sstream *streams;
    sstream **due; /* the ticker's scratch: max_streams entries */
    uint64_t busy_logged_ms;
    size_t busy_count;
};

/* ---- requests ---- */

typedef struct request {
    char ns[MV_SCALER_NAMESPACE_MAX + 1];
    char name[MV_SCSVC_NAME_MAX + 1];
    mv_scaler_meta m;
    char *key; /* what decides the value: the ScaledObject and its metadata */
} request;

static int dns_name(const char *s, size_t max, int dots)
{
    size_t n = strlen(s);
    if (n == 0 || n > max || s[0] == '-' || s[n - 1] == '-' || s[0] == '.' || s[n - 1] == '.')
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-' ||
              (dots && s[i] == '.')))
            return 0;
    return 1;
}

/* Parses a ScaledObjectRef's bytes. 0, or -EINVAL / -ENOMEM with err. */
static int parse_ref(const uint8_t *buf, size_t len, request *r, char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    int rc = mv_scaler_meta_from_ref(buf, len, &r->m, err, errlen);
    if (rc)
        return rc;
    Externalscaler__ScaledObjectRef *ref =
        externalscaler__scaled_object_ref__unpack(NULL, len, buf);
    if (!ref) {
        snprintf(err, errlen, "malformed ScaledObjectRef");
        return -EINVAL;
    }
    const char *ns = ref->namespace_ ? ref->namespace_ : "", *name = ref->name ? ref->name : "";
    int ok = strlen(ns) <= MV_SCALER_NAMESPACE_MAX && strlen(name) <= MV_SCSVC_NAME_MAX;
    if (ok) {
        memcpy(r->ns, ns, strlen(ns) + 1);
        memcpy(r->name, name, strlen(name) + 1);
    }
    externalscaler__scaled_object_ref__free_unpacked(ref, NULL);
    /* Without a selector the ScaledObject is read from the API server: its name and
     * namespace go into a URL. */
    if (!ok || (!r->m.has_selector && (!dns_name(r->ns, MV_SCALER_NAMESPACE_MAX, 0) ||
                                       !dns_name(r->name, MV_SCSVC_NAME_MAX, 1)))) {
        snprintf(err, errlen,
                 "ScaledObjectRef name and namespace: an object name and a namespace name are "
                 "needed to find the scale target (no selector in the metadata)");
        return -EINVAL;
    }
    char sel[4 * MV_LSEL_TEXT_MAX];
    sel[0] = '\0';
    if (r->m.has_selector)
        mv_lsel_format(&r->m.selector, sel, sizeof sel);
    size_t klen = strlen(sel) + 1024;
    if (!(r->key = malloc(klen)))
        return -ENOMEM;
    snprintf(r->key, klen, "%s/%s\n%s\n%s\n%s\n%d %d %d", r->ns, r->name, r->m.metric,
             r->m.namespace_, sel, (int)r->m.agg, r->m.timeout_ms, (int)r->m.policy);
    return 0;
}

/* ---- unary calls ---- */

typedef struct ucall {
    mv_scsvc *s;
    mv_rpc_call *call;
    int method;
    double activation;
    char metric[MV_SCALER_METRIC_MAX + 1];
    uint64_t t0_ns;
} ucall;

static void reply_error(mv_scsvc *s, mv_rpc_call *call, int method, uint64_t t0, int code,
                        const char *msg)
{
    /* Counted first: a client that saw the answer finds it in /metrics. */
    mv_scsvc__metrics_call(&s->ctx.metrics, method, code, mv_util_mono_ns() - t0);
    mv_rpc_reply_error(call, code, msg);
}

/* Logs scaler.busy at most once a second, with the count refused since. */
static void busy(mv_scsvc *s, size_t pending)
{
    atomic_fetch_add(&s->ctx.metrics.rejected_busy, 1);
    pthread_mutex_lock(&s->mu);
    s->busy_count++;
    uint64_t now = mv_util_mono_ms();
    if (now - s->busy_logged_ms >= 1000) {
        MV_WARN("scaler.busy", "refused=%zu pending=%zu max_pending=%u", s->busy_count, pending,
                s->ctx.cfg.max_pending);
        s->busy_logged_ms = now;
        s->busy_count = 0;
    }
    pthread_mutex_unlock(&s->mu);
}

static int64_t to_int64(double v)
{
    if (!(v == v))
        return 0;
    if (v >= 9.2e18)
        return INT64_MAX;
    if (v <= -9.2e18)
        return INT64_MIN;
    return (int64_t)llround(v);
}

static void ucall_done(void *arg, const mv_scsvc__result *r)
{
    ucall *u = arg;
    mv_scsvc *s = u->s;
    if (r->code != MV_RPC_OK) {
        reply_error(s, u->call, u->method, u->t0_ns, r->code, r->msg);
    } else if (u->method == MV_SCSVC__IS_ACTIVE) {
        Externalscaler__IsActiveResponse resp = EXTERNALSCALER__IS_ACTIVE_RESPONSE__INIT;
        resp.result = r->value > u->activation;
        mv_scsvc__metrics_call(&s->ctx.metrics, u->method, MV_RPC_OK, mv_util_mono_ns() - u->t0_ns);
        mv_rpc_reply_msg(u->call, &resp.base);
    } else {
        Externalscaler__MetricValue v = EXTERNALSCALER__METRIC_VALUE__INIT, *vp = &v;
        v.metricname = u->metric;
        v.metricvalue = to_int64(r->value);
        v.metricvaluefloat = r->value;
        Externalscaler__GetMetricsResponse resp = EXTERNALSCALER__GET_METRICS_RESPONSE__INIT;
        resp.n_metricvalues = 1;
        resp.metricvalues = &vp;
        mv_scsvc__metrics_call(&s->ctx.metrics, u->method, MV_RPC_OK, mv_util_mono_ns() - u->t0_ns);
        mv_rpc_reply_msg(u->call, &resp.base);
    }
    free(u);
}

/* Hands a checked request to the pool, or refuses it at once. */
static void submit(mv_scsvc *s, mv_rpc_call *call, int method, request *r, uint64_t t0)
{
    ucall *u = calloc(1, sizeof *u);
    if (!u) {
        reply_error(s, call, method, t0, MV_RPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    *u =
        (ucall){.s = s, .call = call, .method = method, .activation = r->m.activation, .t0_ns = t0};
    memcpy(u->metric, r->m.metric, sizeof u->metric);
    size_t pending = 0;
    int rc = mv_scsvc__pool_submit(s->pool, r->key, r->ns, r->name, &r->m, ucall_done, u, &pending);
    if (rc == 0)
        return;
    free(u);
    char msg[128];
    if (rc == -EBUSY) {
        busy(s, pending);
        snprintf(msg, sizeof msg, "scaler busy: %zu calls pending", pending);
        reply_error(s, call, method, t0, MV_RPC_RESOURCE_EXHAUSTED, msg);
    } else {
        reply_error(s, call, method, t0, MV_RPC_UNAVAILABLE,
                    rc == -ESHUTDOWN ? "scaler stopping" : "out of memory");
    }
}

static request *request_new(void)
{
    return malloc(sizeof(request));
}

static void request_free(request *r)
{
    if (r) {
        free(r->key);
        free(r);
    }
}

static void h_is_active(void *arg, mv_rpc_call *call, const uint8_t *req, size_t len)
{
    mv_scsvc *s = arg;
    uint64_t t0 = mv_util_mono_ns();
    request *r = request_new();
    char err[512];
    int rc = r ? parse_ref(req, len, r, err, sizeof err) : -ENOMEM;
    if (rc)
        reply_error(s, call, MV_SCSVC__IS_ACTIVE, t0,
                    rc == -EINVAL ? MV_RPC_INVALID_ARGUMENT : MV_RPC_RESOURCE_EXHAUSTED,
                    rc == -EINVAL ? err : "out of memory");
    else
        submit(s, call, MV_SCSVC__IS_ACTIVE, r, t0);
    request_free(r);
}

static void h_get_metrics(void *arg, mv_rpc_call *call, const uint8_t *req, size_t len)
{
    mv_scsvc *s = arg;
    uint64_t t0 = mv_util_mono_ns();
    const int M = MV_SCSVC__GET_METRICS;
    Externalscaler__GetMetricsRequest *g =
        len <= MV_SCALER_REF_MAX + 1024
            ? externalscaler__get_metrics_request__unpack(NULL, len, req)
            : NULL;
    if (!g) {
        reply_error(s, call, M, t0, MV_RPC_INVALID_ARGUMENT, "malformed GetMetricsRequest");
        return;
    }
    request *r = request_new();
    uint8_t *ref = NULL;
    char err[800];
    int rc = r ? 0 : -ENOMEM;
    if (rc == 0 && !g->scaledobjectref) {
        snprintf(err, sizeof err, "GetMetricsRequest scaledObjectRef: missing");
        rc = -EINVAL;
    }
    if (rc == 0) {
        size_t n = externalscaler__scaled_object_ref__get_packed_size(g->scaledobjectref);
        ref = malloc(n ? n : 1);
        rc = ref ? parse_ref(ref, externalscaler__scaled_object_ref__pack(g->scaledobjectref, ref),
                             r, err, sizeof err)
                 : -ENOMEM;
    }
    if (rc == 0 && strcmp(g->metricname ? g->metricname : "", r->m.metric) != 0) {
        char got[80];
        snprintf(got, sizeof got, "%.64s", g->metricname ? g->metricname : "");
        for (char *p = got; *p; p++)
            if ((unsigned char)*p < 0x20 || (unsigned char)*p > 0x7e)
                *p = '?';
        snprintf(err, sizeof err,
                 "GetMetricsRequest metricName %s is not this ScaledObject's metric %s", got,
                 r->m.metric);
        rc = -EINVAL;
    }
    if (rc)
        reply_error(s, call, M, t0,
                    rc == -EINVAL ? MV_RPC_INVALID_ARGUMENT : MV_RPC_RESOURCE_EXHAUSTED,
                    rc == -EINVAL ? err : "out of memory");
    else
        submit(s, call, M, r, t0);
    free(ref);
    request_free(r);
    externalscaler__get_metrics_request__free_unpacked(g, NULL);
}

static void h_get_metric_spec(void *arg, mv_rpc_call *call, const uint8_t *req, size_t len)
{
    mv_scsvc *s = arg;
    uint64_t t0 = mv_util_mono_ns();
    const int M = MV_SCSVC__GET_METRIC_SPEC;
    request *r = request_new();
    char err[512];
    int rc = r ? parse_ref(req, len, r, err, sizeof err) : -ENOMEM;
    if (rc) {
        reply_error(s, call, M, t0,
                    rc == -EINVAL ? MV_RPC_INVALID_ARGUMENT : MV_RPC_RESOURCE_EXHAUSTED,
                    rc == -EINVAL ? err : "out of memory");
    } else {
        Externalscaler__MetricSpec spec = EXTERNALSCALER__METRIC_SPEC__INIT, *sp = &spec;
        spec.metricname = r->m.metric;
        double up = ceil(r->m.target);
        spec.targetsize = up < 1 ? 1 : up >= 9.2e18 ? INT64_MAX : (int64_t)up;
        spec.targetsizefloat = r->m.target;
        Externalscaler__GetMetricSpecResponse resp = EXTERNALSCALER__GET_METRIC_SPEC_RESPONSE__INIT;
        resp.n_metricspecs = 1;
        resp.metricspecs = &sp;
        mv_scsvc__metrics_call(&s->ctx.metrics, M, MV_RPC_OK, mv_util_mono_ns() - t0);
        mv_rpc_reply_msg(call, &resp.base);
    }
    request_free(r);
}

/* ---- streams ---- */

struct sstream {
    mv_scsvc *s;
    mv_rpc_stream *st;
    request *r;
    int last; /* -1: nothing sent yet */
    int inflight, closed;
    uint64_t next_ms;
    sstream *next;
};

/* Unlinks and frees. Locked. */
static void sstream_free(mv_scsvc *s, sstream *ss)
{
    for (sstream **pp = &s->streams; *pp; pp = &(*pp)->next)
        if (*pp == ss) {
            *pp = ss->next;
            break;
        }
    mv_rpc_stream_unref(ss->st);
    request_free(ss->r);
    free(ss);
}

static void stream_refuse(mv_scsvc *s, mv_rpc_stream *st, int code, const char *msg)
{
    mv_scsvc__metrics_call(&s->ctx.metrics, MV_SCSVC__STREAM_IS_ACTIVE, code, 0);
    mv_rpc_stream_end(st, code, msg);
    mv_rpc_stream_unref(st);
}

static void h_stream_is_active(void *arg, mv_rpc_stream *st, const uint8_t *req, size_t len)
{
    mv_scsvc *s = arg;
    request *r = request_new();
    char err[512];
    int rc = r ? parse_ref(req, len, r, err, sizeof err) : -ENOMEM;
    if (rc) {
        request_free(r);
        stream_refuse(s, st, rc == -EINVAL ? MV_RPC_INVALID_ARGUMENT : MV_RPC_RESOURCE_EXHAUSTED,
                      rc == -EINVAL ? err : "out of memory");
        return;
    }
    sstream *ss = calloc(1, sizeof *ss);
    pthread_mutex_lock(&s->mu);
    long long open = atomic_load(&s->ctx.metrics.streams_open);
    if (!ss || s->stopping || open >= (long long)s->ctx.cfg.max_streams) {
        pthread_mutex_unlock(&s->mu);
        free(ss);
        request_free(r);
        if (open >= (long long)s->ctx.cfg.max_streams) {
            atomic_fetch_add(&s->ctx.metrics.rejected_streams, 1);
            snprintf(err, sizeof err, "scaler busy: %lld streams open (--max-streams %u)", open,
                     s->ctx.cfg.max_streams);
            stream_refuse(s, st, MV_RPC_RESOURCE_EXHAUSTED, err);
        } else {
            stream_refuse(s, st, MV_RPC_UNAVAILABLE, s->stopping ? "scaler stopping" : "no memory");
        }
        return;
    }
    *ss = (sstream){.s = s, .st = st, .r = r, .last = -1, .next_ms = 0, .next = s->streams};
    s->streams = ss;
    atomic_fetch_add(&s->ctx.metrics.streams_open, 1);
    mv_rpc_stream_set_user(st, ss);
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static void stream_closed(void *arg, mv_rpc_stream *st, int cancelled)
{
    mv_scsvc *s = arg;
    pthread_mutex_lock(&s->mu);
    sstream *ss = mv_rpc_stream_user(st);
    if (ss && !ss->closed) {
        ss->closed = 1;
        atomic_fetch_add(&s->ctx.metrics.streams_open, -1);
        mv_scsvc__metrics_call(&s->ctx.metrics, MV_SCSVC__STREAM_IS_ACTIVE,
                               cancelled ? MV_RPC_CANCELLED : MV_RPC_OK, 0);
        mv_rpc_stream_set_user(st, NULL);
        if (!ss->inflight)
            sstream_free(s, ss);
    }
    pthread_mutex_unlock(&s->mu);
}

/* An evaluation for a stream is back: the first result, then only changes, are sent. Errors
 * keep the stream (KEDA backs off when a stream ends), except bad metadata, which ends it. */
static void stream_done(void *arg, const mv_scsvc__result *r)
{
    sstream *ss = arg;
    mv_scsvc *s = ss->s;
    pthread_mutex_lock(&s->mu);
    ss->inflight = 0;
    if (ss->closed) {
        sstream_free(s, ss);
    } else if (r->code == MV_RPC_INVALID_ARGUMENT) {
        mv_rpc_stream_end(ss->st, r->code, r->msg);
    } else if (r->code == MV_RPC_OK) {
        int active = r->value > ss->r->m.activation;
        if (active != ss->last) {
            Externalscaler__IsActiveResponse resp = EXTERNALSCALER__IS_ACTIVE_RESPONSE__INIT;
            resp.result = active;
            if (mv_rpc_stream_write_msg(ss->st, &resp.base) == 0)
                ss->last = active;
        }
    }
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static void *ticker(void *arg)
{
    mv_scsvc *s = arg;
    mv_util_thread_name("scaler-streams");
    uint64_t interval = s->ctx.cfg.stream_interval_ms;
    pthread_mutex_lock(&s->mu);
    while (!s->stopping) {
        uint64_t now = mv_util_mono_ms(), wake = now + interval;
        size_t n = 0;
        for (sstream *ss = s->streams; ss; ss = ss->next) {
            if (ss->closed || ss->inflight)
                continue;
            if (now >= ss->next_ms && n < s->ctx.cfg.max_streams) {
                ss->inflight = 1;
                ss->next_ms = now + interval;
                s->due[n++] = ss;
            } else if (ss->next_ms < wake) {
                wake = ss->next_ms;
            }
        }
        pthread_mutex_unlock(&s->mu);
        for (size_t i = 0; i < n; i++) {
            sstream *ss = s->due[i];
            size_t pending;
            if (mv_scsvc__pool_submit(s->pool, ss->r->key, ss->r->ns, ss->r->name, &ss->r->m,
                                      stream_done, ss, &pending) != 0) {
                /* Busy: this stream waits for its next interval. */
                pthread_mutex_lock(&s->mu);
                ss->inflight = 0;
                if (ss->closed)
                    sstream_free(s, ss);
                pthread_mutex_unlock(&s->mu);
            }
        }
        pthread_mutex_lock(&s->mu);
        if (n)
            continue; /* look again at once: the next due times changed */
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t left = wake > now ? wake - now : 0;
        ts.tv_sec += (time_t)(left / 1000);
        ts.tv_nsec += (long)(left % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        if (!s->stopping)
            pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static void h_stream_metric_spec(void *arg, mv_rpc_stream *st, const uint8_t *req, size_t len)
{
    (void)req;
    (void)len;
    mv_scsvc *s = arg;
    mv_scsvc__metrics_call(&s->ctx.metrics, MV_SCSVC__STREAM_METRIC_SPEC, MV_RPC_UNIMPLEMENTED, 0);
    mv_rpc_stream_end(st, MV_RPC_UNIMPLEMENTED,
                      "StreamMetricSpec is not implemented: microview-scaler's metric spec "
                      "follows the trigger metadata, read by GetMetricSpec");
    mv_rpc_stream_unref(st);
}

/* ---- HTTP ---- */

static int h_healthz(void *arg, const mv_httpd_request *req, mv_httpd_response *resp)
{
    (void)arg;
    (void)req;
    mv_httpd_set_status(resp, 200);
    mv_httpd_set_content_type(resp, "text/plain; charset=utf-8");
    return mv_httpd_copy_body(resp, "ok\n", 3);
}

static int h_metrics(void *arg, const mv_httpd_request *req, mv_httpd_response *resp)
{
    mv_scsvc *s = arg;
    const char *ctype = NULL;
    size_t len = 0;
    char *body =
        mv_scsvc__metrics_render(&s->ctx.metrics, mv_httpd_header(req, "Accept"), &ctype, &len);
    if (!body) {
        mv_httpd_set_status(resp, 500);
        mv_httpd_set_content_type(resp, "text/plain; charset=utf-8");
        return mv_httpd_copy_body(resp, "could not render the metrics\n", 29);
    }
    mv_httpd_set_status(resp, 200);
    mv_httpd_set_content_type(resp, ctype);
    return mv_httpd_set_body(resp, body, len);
}

/* ---- lifecycle ---- */

void mv_scsvc_config_default(mv_scsvc_config *c)
{
    memset(c, 0, sizeof *c);
    c->listen = ":9090";
    c->metrics_listen = ":9091";
    c->collector_port = 9469;
    c->workers = 4;
    c->max_pending = 64;
    c->max_streams = 100;
    c->cache_ms = 250;
    c->discovery_ttl_ms = 5000;
    c->stream_interval_ms = 1000;
    c->api_timeout_ms = 2000;
}

static const char *own(mv_scsvc *s, size_t i, const char *v)
{
    if (!v)
        return NULL;
    s->strs[i] = strdup(v);
    return s->strs[i] ? s->strs[i] : "";
}

/* gRPC and HTTP take "HOST:PORT" with a host; an empty host means every address. */
static int listen_addr(const char *text, char *out, size_t outlen, char *host, size_t hostlen,
                       uint16_t *port, const char *flag, char *err, size_t errlen)
{
    char why[256];
    if (mv_util_parse_listen(text, MV_LISTEN_ANY_HOST | MV_LISTEN_PORT_ZERO, host, hostlen, port,
                             why, sizeof why) != 0) {
        mv_util_err_set(err, errlen, "%s: %s", flag, why);
        return -EINVAL;
    }
    if (out)
        snprintf(out, outlen, strchr(host, ':') ? "[%s]:%u" : "%s:%u", host[0] ? host : "[::]",
                 (unsigned)*port);
    return 0;
}

int mv_scsvc_start(const mv_scsvc_config *cfg, mv_scsvc **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!cfg->listen || !cfg->api_server || !cfg->collector_namespace || !cfg->collector_selector) {
        mv_util_err_set(err, errlen,
                        "listen, API server, collector namespace and selector "
                        "are required");
        return -EINVAL;
    }
    if (cfg->workers < 1 || cfg->max_pending < 1 || cfg->max_streams < 1 ||
        cfg->stream_interval_ms < 10) {
        mv_util_err_set(err, errlen,
                        "workers, max_pending and max_streams must be at least 1, "
                        "stream_interval_ms at least 10");
        return -EINVAL;
    }
    if (!cfg->tls_cert_file != !cfg->tls_key_file ||
        (cfg->tls_client_ca_file && !cfg->tls_cert_file)) {
        mv_util_err_set(err, errlen,
                        "--tls-cert-file and --tls-key-file go together, and "
                        "--tls-client-ca-file needs them");
        return -EINVAL;
    }
    mv_scsvc *s = calloc(1, sizeof *s);
    if (!s) {
        mv_util_err_set(err, errlen, "out of memory");
        return -ENOMEM;
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    mv_scsvc_config *c = &s->ctx.cfg;
    *c = *cfg;
    c->listen = own(s, 0, cfg->listen);
    c->tls_cert_file = own(s, 1, cfg->tls_cert_file);
    c->tls_key_file = own(s, 2, cfg->tls_key_file);
    c->tls_client_ca_file = own(s, 3, cfg->tls_client_ca_file);
    c->metrics_listen = own(s, 4, cfg->metrics_listen);
    c->api_server = own(s, 5, cfg->api_server);
    c->api_token_file = own(s, 6, cfg->api_token_file);
    c->api_ca_file = own(s, 7, cfg->api_ca_file);
    c->collector_namespace = own(s, 8, cfg->collector_namespace);
    c->collector_selector = own(s, 9, cfg->collector_selector);
    c->collector_token_file = own(s, 10, cfg->collector_token_file);
    if (!c->api_timeout_ms)
        c->api_timeout_ms = 2000;
    int rc = mv_scsvc__ctx_init(&s->ctx, err, errlen);
    if (rc == 0 && !(s->due = calloc(c->max_streams, sizeof *s->due)))
        rc = -ENOMEM;
    if (rc == 0 && (rc = mv_scsvc__pool_create(&s->ctx, &s->pool)) != 0)
        mv_util_err_set(err, errlen, "cannot start the workers");
    char host[128], addr[160];
    uint16_t port = 0;
    if (rc == 0)
        rc = listen_addr(c->listen, addr, sizeof addr, host, sizeof host, &port, "--listen", err,
                         errlen);
    mv_rpc_server_opts ro = {.max_recv_bytes = MV_SCALER_REF_MAX + 1024};
    if (rc == 0 && (rc = mv_rpc_server_create(&ro, &s->rpc)) != 0)
        mv_util_err_set(err, errlen, "cannot create the gRPC server");
    if (rc == 0 &&
        ((rc = mv_rpc_server_add_unary(s->rpc, SVC "IsActive", h_is_active, s)) ||
         (rc = mv_rpc_server_add_unary(s->rpc, SVC "GetMetricSpec", h_get_metric_spec, s)) ||
         (rc = mv_rpc_server_add_unary(s->rpc, SVC "GetMetrics", h_get_metrics, s)) ||
         (rc = mv_rpc_server_add_stream(s->rpc, SVC "StreamIsActive", h_stream_is_active,
                                        stream_closed, s)) ||
         (rc = mv_rpc_server_add_stream(s->rpc, SVC "StreamMetricSpec", h_stream_metric_spec, NULL,
                                        s))))
        mv_util_err_set(err, errlen, "cannot register the gRPC methods");
    if (rc == 0) {
        int p;
        if (c->tls_cert_file) {
            mv_rpc_tls_server_opts t = {.cert_file = c->tls_cert_file,
                                        .key_file = c->tls_key_file,
                                        .client_ca_file = c->tls_client_ca_file,
                                        .require_client_cert = c->tls_client_ca_file != NULL};
            char why[512];
            p = mv_rpc_server_listen_tls(s->rpc, addr, &t, why, sizeof why);
            if (p < 0)
                mv_util_err_set(err, errlen, "--listen %s with TLS: %s", c->listen, why);
        } else {
            p = mv_rpc_server_listen(s->rpc, addr);
            if (p < 0)
                mv_util_err_set(err, errlen, "--listen %s: cannot listen", c->listen);
        }
        rc = p < 0 ? p : 0;
        s->grpc_port = p > 0 ? (unsigned)p : 0;
    }
    if (rc == 0 && c->metrics_listen) {
        rc = listen_addr(c->metrics_listen, NULL, 0, host, sizeof host, &port, "--metrics-listen",
                         err, errlen);
        mv_httpd_config hc;
        mv_httpd_config_default(&hc);
        hc.addr = host[0] ? host : "::";
        hc.port = port;
        hc.threads = 2;
        hc.max_conns = 64;
        if (rc == 0 && ((rc = mv_httpd_create(&hc, &s->http)) != 0 ||
                        (rc = mv_httpd_route(s->http, "/metrics", h_metrics, s)) != 0 ||
                        (rc = mv_httpd_route(s->http, "/healthz", h_healthz, s)) != 0 ||
                        (rc = mv_httpd_start(s->http)) != 0))
            mv_util_err_set(err, errlen, "--metrics-listen %s: cannot serve", c->metrics_listen);
        if (rc == 0)
            s->metrics_port = mv_httpd_port(s->http);
    }
    if (rc == 0 && (rc = mv_rpc_server_start(s->rpc)) != 0)
        mv_util_err_set(err, errlen, "cannot start the gRPC server");
    if (rc == 0) {
        if (pthread_create(&s->ticker, NULL, ticker, s) != 0) {
            mv_util_err_set(err, errlen, "cannot start the streams' thread");
            rc = -EAGAIN;
        } else {
            s->ticker_started = 1;
        }
    }
    if (rc) {
        mv_scsvc_stop(s);
        return rc;
    }
    *out = s;
    return 0;
}

unsigned mv_scsvc_grpc_port(const mv_scsvc *s)
{
    return s->grpc_port;
}

unsigned mv_scsvc_metrics_port(const mv_scsvc *s)
{
    return s->metrics_port;
}

void mv_scsvc_stop(mv_scsvc *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (s->ticker_started)
        pthread_join(s->ticker, NULL);
    /* Calls waiting are answered (UNAVAILABLE) before the server goes; handlers that run
     * meanwhile are refused by the stopped pool. */
    mv_scsvc__pool_stop(s->pool);
    mv_rpc_server_destroy(s->rpc); /* closes the streams (stream_closed frees them) */
    mv_scsvc__pool_destroy(s->pool);
    mv_httpd_destroy(s->http);
    pthread_mutex_lock(&s->mu);
    while (s->streams)
        sstream_free(s, s->streams);
    pthread_mutex_unlock(&s->mu);
    mv_scsvc__ctx_destroy(&s->ctx);
    for (size_t i = 0; i < sizeof s->strs / sizeof s->strs[0]; i++)
        free(s->strs[i]);
    free(s->due);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
