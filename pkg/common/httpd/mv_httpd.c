/* mv_httpd: libmicrohttpd wrapper with exact-path routes, limits, an absolute request deadline,
 * TLS (mv_httpd_tls.c) and gzip. */
#include "mv_httpd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <zlib.h>

#include <gnutls/abstract.h>
#include <gnutls/gnutls.h>

#include "mv_httpd_int.h"
#include "mv_log.h"

#define MAX_HEADERS   16
#define MAX_ROUTES    32
#define DISCARD_MAX   (16u << 20) /* an oversized chunked body is read (and dropped) up to this */
#define SWEEP_MS      200         /* how often the deadline sweeper looks */
#define STREAM_SNDBUF (64 * 1024) /* socket send buffer of a streamed response */

typedef struct {
    char *path;
    unsigned methods;
    mv_httpd_handler fn;
    void *arg;
} route;

/* One open connection, for the request deadline (h->mu). */
typedef struct conn_track {
    struct conn_track *prev, *next;
    int fd;
    uint64_t deadline_ms; /* monotonic; 0 while a request is being answered */
} conn_track;

/* One request, from its request line to its completion. */
typedef struct reqctx {
    int started;         /* the headers were seen by on_request */
    int too_many_params; /* the query was dropped unparsed: answer 414 */
    unsigned nparams;
    const route *rt;
    int too_big; /* the body exceeded max_body_bytes: being discarded */
    size_t discarded;
    char *body;
    size_t len, cap;
} reqctx;

/* A streamed response (mv_httpd_set_stream). Two references: the caller's handle and the
 * layer's (dropped when libmicrohttpd frees the response, or by resp_clear when it was never
 * sent). Suspend and resume happen under mu, so a wake never races a park. */
struct mv_httpd_stream {
    pthread_mutex_t mu;
    int refs;                            /* under mu */
    struct mv_httpd *h;                  /* set when queued */
    struct MHD_Connection *c;            /* set when queued */
    struct mv_httpd_stream *prev, *next; /* h->streams, under h->mu */
    int suspended, pending, done, stopping, linked, fin_done;
    uint64_t end_ms; /* monotonic end of its lifetime */
    unsigned lifetime_s;
    mv_httpd_stream_read_fn rd;
    void (*fin)(void *arg);
    void *arg;
};

struct mv_httpd {
    mv_httpd_config cfg;
    char addr[INET6_ADDRSTRLEN];
    struct sockaddr_storage sa;
    int v6, any6;
    route routes[MAX_ROUTES];
    size_t nroutes;
    struct MHD_Daemon *d;
    uint16_t port;
    mv_httpd__tls *tls;
    /* Connections per client address (open addressing on the address bytes;
     * a slot with n == 0 is free once its key is cleared), under mu. */
    pthread_mutex_t mu;
    struct client {
        unsigned char key[17]; /* family byte + up to 16 address bytes */
        unsigned n;
    } * clients;
    size_t nclients_cap;
    conn_track conns;               /* list head of open connections, under mu */
    struct mv_httpd_stream streams; /* list head of queued streams, under mu */
    mv_httpd_stats st;
    time_t last_refusal_log, last_deadline_log;
    uint64_t refusals_at_log, deadline_at_log;
    /* The deadline sweeper. */
    pthread_t sweeper;
    int sweeping, stopping;
    pthread_mutex_t stop_mu;
    pthread_cond_t stop_cond;
};

struct mv_httpd_request {
    struct MHD_Connection *conn;
    const char *method;
    const char *path;
    const char *body;
    size_t body_len;
};

struct mv_httpd_response {
    unsigned status;
    char *ctype;
    char *body;
    size_t len;
    char *hname[MAX_HEADERS];
    char *hvalue[MAX_HEADERS];
    size_t nhdr;
    mv_httpd_stream *stream; /* a streamed body (the layer's reference) */
};

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* ---- Config ------------------------------------------------------------------------- */

void mv_httpd_config_default(mv_httpd_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->addr = "127.0.0.1";
    cfg->port = 0;
    cfg->threads = 2;
    cfg->max_conns = 8192;
    cfg->max_conns_per_client = 64;
    cfg->max_request_bytes = 32 * 1024;
    cfg->timeout_s = 10;
    cfg->gzip_level = 6;
    cfg->gzip_min_bytes = 1024;
    cfg->request_deadline_s = 10;
    cfg->max_query_params = 64;
    cfg->max_body_bytes = 1u << 20;
    cfg->tls_reload_ms = 1000;
}

int mv_httpd_create(const mv_httpd_config *cfg, mv_httpd **out)
{
    mv_httpd_config def;
    *out = NULL;
    if (!cfg) {
        mv_httpd_config_default(&def);
        cfg = &def;
    }
    const char *addr = cfg->addr ? cfg->addr : "127.0.0.1";
    if (cfg->threads < 1 || cfg->threads > 64 || cfg->max_conns < 1 ||
        cfg->max_conns_per_client < 1 || cfg->max_conns_per_client > cfg->max_conns ||
        cfg->max_request_bytes < 1024 || cfg->gzip_level < 1 || cfg->gzip_level > 9 ||
        cfg->max_query_params < 1 || cfg->request_deadline_s > 86400 ||
        !cfg->tls_cert_file != !cfg->tls_key_file) {
        MV_ERROR("httpd.config",
                 "msg=%s threads=%u max_conns=%u max_request_bytes=%zu "
                 "gzip_level=%d max_query_params=%u request_deadline_s=%u",
                 mv_log_q("need threads 1..64, max_conns >= 1, max_request_bytes >= 1024, "
                          "gzip_level 1..9, max_query_params >= 1, request_deadline_s <= "
                          "86400, and both or neither of the TLS certificate and key"),
                 cfg->threads, cfg->max_conns, cfg->max_request_bytes, cfg->gzip_level,
                 cfg->max_query_params, cfg->request_deadline_s);
        return -EINVAL;
    }
    mv_httpd *h = calloc(1, sizeof *h);
    if (!h)
        return -ENOMEM;
    pthread_mutex_init(&h->mu, NULL);
    pthread_mutex_init(&h->stop_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&h->stop_cond, &ca);
    pthread_condattr_destroy(&ca);
    h->conns.next = h->conns.prev = &h->conns;
    h->streams.next = h->streams.prev = &h->streams;
    h->cfg = *cfg;
    h->cfg.tls_cert_file = h->cfg.tls_key_file = NULL; /* not kept: read once here */
    if (!h->cfg.tls_priorities)
        h->cfg.tls_priorities = MV_HTTPD_TLS_PRIORITIES;
    snprintf(h->addr, sizeof h->addr, "%s", addr);
    h->cfg.addr = h->addr;
    struct sockaddr_in *s4 = (struct sockaddr_in *)&h->sa;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&h->sa;
    if (inet_pton(AF_INET, addr, &s4->sin_addr) == 1) {
        s4->sin_family = AF_INET;
        s4->sin_port = htons(cfg->port);
    } else if (inet_pton(AF_INET6, addr, &s6->sin6_addr) == 1) {
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons(cfg->port);
        h->v6 = 1;
        h->any6 = IN6_IS_ADDR_UNSPECIFIED(&s6->sin6_addr);
    } else {
        MV_ERROR("httpd.config", "addr=%s msg=%s", mv_log_q(addr),
                 mv_log_q("listen address must be a numeric IPv4 or IPv6 address, e.g. "
                          "127.0.0.1, 0.0.0.0 or ::"));
        mv_httpd_destroy(h);
        return -EINVAL;
    }
    if (cfg->tls_cert_file) {
        int rc = mv_httpd__tls_create(cfg->tls_cert_file, cfg->tls_key_file, cfg->tls_reload_ms,
                                      &h->tls);
        if (rc) {
            mv_httpd_destroy(h);
            return rc;
        }
    }
    *out = h;
    return 0;
}

int mv_httpd_route(mv_httpd *h, const char *path, mv_httpd_handler fn, void *arg)
{
    return mv_httpd_route_methods(h, path, MV_HTTPD_GET, fn, arg);
}

int mv_httpd_route_methods(mv_httpd *h, const char *path, unsigned methods, mv_httpd_handler fn,
                           void *arg)
{
    if (!path || path[0] != '/' || !fn || !methods ||
        (methods & ~(unsigned)(MV_HTTPD_GET | MV_HTTPD_POST)))
        return -EINVAL;
    if (h->d)
        return -EBUSY;
    for (size_t i = 0; i < h->nroutes; i++)
        if (!strcmp(h->routes[i].path, path))
            return -EEXIST;
    if (h->nroutes == MAX_ROUTES)
        return -ENOSPC;
    char *p = strdup(path);
    if (!p)
        return -ENOMEM;
    h->routes[h->nroutes++] = (route){p, methods, fn, arg};
    return 0;
}

/* ---- Response helpers --------------------------------------------------------------- */

static int has_crlf(const char *s)
{
    return strpbrk(s, "\r\n") != NULL;
}

void mv_httpd_set_status(mv_httpd_response *resp, unsigned status)
{
    resp->status = status;
}

int mv_httpd_set_content_type(mv_httpd_response *resp, const char *ct)
{
    if (!ct || has_crlf(ct))
        return -EINVAL;
    char *c = strdup(ct);
    if (!c)
        return -ENOMEM;
    free(resp->ctype);
    resp->ctype = c;
    return 0;
}

int mv_httpd_set_body(mv_httpd_response *resp, char *body, size_t len)
{
    free(resp->body);
    resp->body = body;
    resp->len = body ? len : 0;
    return 0;
}

int mv_httpd_copy_body(mv_httpd_response *resp, const void *data, size_t len)
{
    char *b = malloc(len ? len : 1);
    if (!b)
        return -ENOMEM;
    if (len)
        memcpy(b, data, len);
    return mv_httpd_set_body(resp, b, len);
}

int mv_httpd_add_header(mv_httpd_response *resp, const char *name, const char *value)
{
    if (!name || !value || !*name || has_crlf(name) || has_crlf(value) || strchr(name, ':'))
        return -EINVAL;
    if (resp->nhdr == MAX_HEADERS)
        return -ENOSPC;
    char *n = strdup(name), *v = strdup(value);
    if (!n || !v) {
        free(n);
        free(v);
        return -ENOMEM;
    }
    resp->hname[resp->nhdr] = n;
    resp->hvalue[resp->nhdr] = v;
    resp->nhdr++;
    return 0;
}

static const char *resp_header(const mv_httpd_response *resp, const char *name)
{
    for (size_t i = 0; i < resp->nhdr; i++)
        if (!strcasecmp(resp->hname[i], name))
            return resp->hvalue[i];
    return NULL;
}

static void stream_finish(mv_httpd_stream *st);

static void resp_clear(mv_httpd_response *resp)
{
    if (resp->stream)
        stream_finish(resp->stream); /* never sent */
    free(resp->ctype);
    free(resp->body);
    for (size_t i = 0; i < resp->nhdr; i++) {
        free(resp->hname[i]);
        free(resp->hvalue[i]);
    }
    memset(resp, 0, sizeof *resp);
}

/* ---- Request accessors -------------------------------------------------------------- */

const char *mv_httpd_method(const mv_httpd_request *req)
{
    return req->method;
}

const char *mv_httpd_path(const mv_httpd_request *req)
{
    return req->path;
}

const char *mv_httpd_query(const mv_httpd_request *req, const char *key)
{
    const char *v = MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, key);
    if (v)
        return v;
    /* "?key" without a value: MHD stores it with a NULL value; tell it apart from absent. */
    if (MHD_lookup_connection_value_n(req->conn, MHD_GET_ARGUMENT_KIND, key, strlen(key), &v,
                                      NULL) == MHD_YES)
        return "";
    return NULL;
}

typedef struct each_ctx {
    int (*fn)(void *arg, const char *key, const char *value);
    void *arg;
    int rc;
} each_ctx;

static enum MHD_Result each_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                                const char *value)
{
    each_ctx *c = cls;
    (void)kind;
    c->rc = c->fn(c->arg, key, value ? value : "");
    return c->rc ? MHD_NO : MHD_YES;
}

int mv_httpd_query_each(const mv_httpd_request *req,
                        int (*fn)(void *arg, const char *key, const char *value), void *arg)
{
    each_ctx c = {fn, arg, 0};
    MHD_get_connection_values(req->conn, MHD_GET_ARGUMENT_KIND, each_arg, &c);
    return c.rc;
}

const char *mv_httpd_header(const mv_httpd_request *req, const char *name)
{
    return MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, name);
}

const char *mv_httpd_body(const mv_httpd_request *req, size_t *len)
{
    *len = req->body ? req->body_len : 0;
    return req->body ? req->body : "";
}

/* ---- Accept-Encoding ---------------------------------------------------------------- */

/* Parses a qvalue; returns -1 if malformed. */
static double parse_q(const char *s, size_t n)
{
    if (n == 0 || (s[0] != '0' && s[0] != '1'))
        return -1;
    double q = s[0] - '0', scale = 0.1;
    size_t i = 1;
    if (i < n && s[i] == '.') {
        for (i++; i < n && i < 5; i++) {
            if (s[i] < '0' || s[i] > '9')
                return -1;
            q += (s[i] - '0') * scale;
            scale /= 10;
        }
    }
    if (i != n)
        return -1;
    return q > 1 ? 1 : q;
}

int mv_httpd_accepts_gzip(const char *ae)
{
    double gzip_q = -1, star_q = -1;
    if (!ae)
        return 0;
    const char *p = ae;
    while (*p) {
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        if (!*p)
            break;
        const char *tok = p;
        while (*p && *p != ',' && *p != ';' && *p != ' ' && *p != '\t')
            p++;
        size_t tl = (size_t)(p - tok);
        double q = 1;
        /* Parameters up to the next comma; only q matters. */
        while (*p && *p != ',') {
            if (*p == ';') {
                p++;
                while (*p == ' ' || *p == '\t')
                    p++;
                if ((p[0] == 'q' || p[0] == 'Q') && p[1] == '=') {
                    const char *v = p + 2;
                    const char *ve = v;
                    while (*ve && *ve != ',' && *ve != ';' && *ve != ' ' && *ve != '\t')
                        ve++;
                    q = parse_q(v, (size_t)(ve - v));
                    p = ve;
                    continue;
                }
            }
            if (*p && *p != ',')
                p++;
        }
        if (q < 0)
            continue; /* malformed entry: ignore it */
        if ((tl == 4 && !strncasecmp(tok, "gzip", 4)) ||
            (tl == 6 && !strncasecmp(tok, "x-gzip", 6)))
            gzip_q = q > gzip_q ? q : gzip_q;
        else if (tl == 1 && tok[0] == '*')
            star_q = q;
    }
    if (gzip_q >= 0)
        return gzip_q > 0;
    return star_q > 0;
}

/* Compresses in into a new malloc'd gzip buffer; returns 0 or -1. */
static int gzip_body(const char *in, size_t len, int level, char **out, size_t *outlen)
{
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (deflateInit2(&zs, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        return -1;
    uLong bound = deflateBound(&zs, (uLong)len);
    char *buf = malloc(bound);
    if (!buf)
        goto fail_deflate;
    zs.next_in = (Bytef *)(uintptr_t)in;
    zs.avail_in = (uInt)len;
    zs.next_out = (Bytef *)buf;
    zs.avail_out = (uInt)bound;
    if (deflate(&zs, Z_FINISH) != Z_STREAM_END)
        goto fail_buf;
    *out = buf;
    *outlen = zs.total_out;
    deflateEnd(&zs);
    return 0;
fail_buf:
    free(buf);
fail_deflate:
    deflateEnd(&zs);
    return -1;
}

/* ---- Request handling --------------------------------------------------------------- */

/* The connection's deadline tracker (NULL if the connection was not tracked). */
static conn_track *track_of(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* The request is complete and being answered: no deadline until its response is sent. */
static void answering(mv_httpd *h, struct MHD_Connection *c)
{
    conn_track *t = track_of(c);
    if (!t)
        return;
    pthread_mutex_lock(&h->mu);
    t->deadline_ms = 0;
    pthread_mutex_unlock(&h->mu);
}

static enum MHD_Result queue_text(mv_httpd *h, struct MHD_Connection *c, unsigned status,
                                  const char *text, const char *allow)
{
    answering(h, c);
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), (void *)(uintptr_t)text,
                                                             MHD_RESPMEM_MUST_COPY);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; charset=utf-8");
    if (allow)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

/* A 4xx the layer sends itself: counted, logged at debug level. */
static enum MHD_Result reject(mv_httpd *h, struct MHD_Connection *c, unsigned status,
                              const char *text, const char *allow)
{
    pthread_mutex_lock(&h->mu);
    h->st.rejected++;
    pthread_mutex_unlock(&h->mu);
    MV_DEBUG("httpd.rejected", "status=%u msg=%s", status, mv_log_q(text));
    return queue_text(h, c, status, text, allow);
}

static const route *find_route(const mv_httpd *h, const char *path)
{
    for (size_t i = 0; i < h->nroutes; i++)
        if (!strcmp(h->routes[i].path, path))
            return &h->routes[i];
    return NULL;
}

/* ---- Streams ------------------------------------------------------------------------ */

mv_httpd_stream *mv_httpd_set_stream(mv_httpd_response *resp, mv_httpd_stream_read_fn rd,
                                     void (*fin)(void *arg), void *arg, unsigned max_lifetime_s)
{
    if (!rd || !max_lifetime_s || max_lifetime_s > 86400 || resp->stream)
        return NULL;
    mv_httpd_stream *st = calloc(1, sizeof *st);
    if (!st)
        return NULL;
    pthread_mutex_init(&st->mu, NULL);
    st->refs = 2;
    st->rd = rd;
    st->fin = fin;
    st->arg = arg;
    st->lifetime_s = max_lifetime_s;
    st->end_ms = mono_ms() + 1000u * (uint64_t)max_lifetime_s;
    resp->stream = st;
    return st;
}

static void stream_put(mv_httpd_stream *st)
{
    pthread_mutex_lock(&st->mu);
    int last = --st->refs == 0;
    pthread_mutex_unlock(&st->mu);
    if (last) {
        pthread_mutex_destroy(&st->mu);
        free(st);
    }
}

void mv_httpd_stream_release(mv_httpd_stream *st)
{
    if (st)
        stream_put(st);
}

void mv_httpd_stream_wake(mv_httpd_stream *st)
{
    if (!st)
        return;
    pthread_mutex_lock(&st->mu);
    if (!st->done) {
        if (st->suspended) {
            st->suspended = 0;
            MHD_resume_connection(st->c);
        } else {
            st->pending = 1;
        }
    }
    pthread_mutex_unlock(&st->mu);
}

/* The layer is done with the stream: fin once, unlink, drop the layer's reference. */
static void stream_finish(mv_httpd_stream *st)
{
    pthread_mutex_lock(&st->mu);
    st->done = 1;
    int run_fin = !st->fin_done;
    st->fin_done = 1;
    pthread_mutex_unlock(&st->mu);
    if (st->linked) {
        mv_httpd *h = st->h;
        pthread_mutex_lock(&h->mu);
        st->prev->next = st->next;
        st->next->prev = st->prev;
        st->linked = 0;
        if (h->st.streams_open)
            h->st.streams_open--;
        pthread_mutex_unlock(&h->mu);
    }
    if (run_fin && st->fin)
        st->fin(st->arg);
    stream_put(st);
}

static void stream_free_cb(void *cls)
{
    stream_finish(cls);
}

static ssize_t stream_read_cb(void *cls, uint64_t pos, char *buf, size_t max)
{
    mv_httpd_stream *st = cls;
    (void)pos;
    pthread_mutex_lock(&st->mu);
    int end = st->stopping || st->fin_done;
    if (!end && mono_ms() >= st->end_ms) {
        end = 1;
        pthread_mutex_unlock(&st->mu);
        pthread_mutex_lock(&st->h->mu);
        st->h->st.streams_lifetime_ended++;
        pthread_mutex_unlock(&st->h->mu);
        pthread_mutex_lock(&st->mu);
    }
    st->pending = 0;
    pthread_mutex_unlock(&st->mu);
    if (end)
        return MHD_CONTENT_READER_END_OF_STREAM;
    long n = st->rd(st->arg, buf, max);
    if (n > 0)
        return n > (long)max ? (ssize_t)max : (ssize_t)n;
    if (n < 0)
        return MHD_CONTENT_READER_END_OF_STREAM;
    pthread_mutex_lock(&st->mu);
    if (!st->pending && !st->stopping) {
        st->suspended = 1;
        MHD_suspend_connection(st->c);
    }
    pthread_mutex_unlock(&st->mu);
    return 0;
}

/* Queues a streamed response; its connection gets the stream's own deadline. */
static enum MHD_Result send_stream(mv_httpd *h, struct MHD_Connection *c, mv_httpd_response *resp)
{
    mv_httpd_stream *st = resp->stream;
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024,
                                                               stream_read_cb, st, stream_free_cb);
    if (!r)
        return MHD_NO;   /* resp_clear finishes it */
    resp->stream = NULL; /* libmicrohttpd's now: stream_free_cb finishes it */
    st->h = h;
    st->c = c;
    pthread_mutex_lock(&h->mu);
    st->next = &h->streams;
    st->prev = h->streams.prev;
    h->streams.prev->next = st;
    h->streams.prev = st;
    st->linked = 1;
    h->st.streams_open++;
    conn_track *t = track_of(c);
    if (t) { /* the bounded exemption: the lifetime and 10 s for a client that stopped reading */
        t->deadline_ms = st->end_ms + 10000u;
        /* What the kernel may hold for a stream whose client reads slowly: bounded, so a
         * slow client falls behind (and its producer sees it) instead of the kernel
         * buffering megabytes for it. */
        int sndbuf = STREAM_SNDBUF;
        if (t->fd >= 0)
            setsockopt(t->fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
    }
    pthread_mutex_unlock(&h->mu);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                            resp->ctype ? resp->ctype : "text/event-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    for (size_t i = 0; i < resp->nhdr; i++)
        MHD_add_response_header(r, resp->hname[i], resp->hvalue[i]);
    enum MHD_Result ret = MHD_queue_response(c, resp->status ? resp->status : 200, r);
    MHD_destroy_response(r);
    return ret;
}

void mv_httpd_client_addr(const mv_httpd_request *req, char *buf, size_t len)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(req->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const struct sockaddr *sa = ci ? ci->client_addr : NULL;
    snprintf(buf, len, "?");
    if (sa && sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, buf, (socklen_t)len);
    else if (sa && sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, buf, (socklen_t)len);
}

static enum MHD_Result send_response(mv_httpd *h, struct MHD_Connection *c, mv_httpd_response *resp)
{
    if (resp->stream) {
        answering(h, c);
        return send_stream(h, c, resp);
    }
    answering(h, c);
    int vary = 0;
    if (resp->len > h->cfg.gzip_min_bytes && !resp_header(resp, "Content-Encoding")) {
        vary = 1;
        const char *ae =
            MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_ACCEPT_ENCODING);
        char *z;
        size_t zlen;
        if (mv_httpd_accepts_gzip(ae) &&
            gzip_body(resp->body, resp->len, h->cfg.gzip_level, &z, &zlen) == 0) {
            if (zlen < resp->len) {
                mv_httpd_set_body(resp, z, zlen);
                vary = 2;
            } else {
                free(z);
            }
        }
    }
    struct MHD_Response *r;
    if (resp->len) {
        r = MHD_create_response_from_buffer_with_free_callback(resp->len, resp->body, free);
        if (r)
            resp->body = NULL; /* now owned by MHD */
    } else {
        r = MHD_create_response_from_buffer(0, (void *)(uintptr_t) "", MHD_RESPMEM_PERSISTENT);
    }
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                            resp->ctype ? resp->ctype : "text/plain; charset=utf-8");
    for (size_t i = 0; i < resp->nhdr; i++)
        MHD_add_response_header(r, resp->hname[i], resp->hvalue[i]);
    if (vary)
        MHD_add_response_header(r, MHD_HTTP_HEADER_VARY, MHD_HTTP_HEADER_ACCEPT_ENCODING);
    if (vary == 2)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_ENCODING, "gzip");
    enum MHD_Result ret = MHD_queue_response(c, resp->status ? resp->status : 200, r);
    MHD_destroy_response(r);
    return ret;
}

/* Called with the request line, before libmicrohttpd parses the query: counts the parameters
 * and, past max_query_params, empties the query in place so that parsing them cannot use up
 * the connection's memory (libmicrohttpd would then fail to send even its 431). The request
 * is answered 414 by on_request. The line is in libmicrohttpd's own (writable) read buffer and
 * the query is looked for after or before this call depending on the version; emptying the
 * bytes after '?' works for both. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *c)
{
    mv_httpd *h = cls;
    (void)c;
    reqctx *rc = calloc(1, sizeof *rc);
    if (!rc)
        return NULL;
    char *q = strchr(uri, '?');
    if (q && q[1]) {
        unsigned n = 1;
        for (const char *p = q + 1; *p && *p != '#'; p++)
            n += *p == '&';
        rc->nparams = n;
        if (n > h->cfg.max_query_params) {
            rc->too_many_params = 1;
            q[1] = '\0';
        }
    }
    return rc;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    mv_httpd *h = cls;
    (void)toe;
    reqctx *rc = *con_cls;
    if (rc) {
        free(rc->body);
        free(rc);
        *con_cls = NULL;
    }
    /* The next request on this connection has the whole deadline again. */
    conn_track *t = track_of(c);
    if (t && h->cfg.request_deadline_s) {
        pthread_mutex_lock(&h->mu);
        t->deadline_ms = mono_ms() + 1000u * (uint64_t)h->cfg.request_deadline_s;
        pthread_mutex_unlock(&h->mu);
    }
}

static void allow_text(unsigned methods, char *buf, size_t len)
{
    snprintf(buf, len, "%s%s%s", methods & MV_HTTPD_GET ? "GET, HEAD" : "",
             (methods & MV_HTTPD_GET) && (methods & MV_HTTPD_POST) ? ", " : "",
             methods & MV_HTTPD_POST ? "POST" : "");
}

/* The first call for a request (its headers are in): route, method and size checks. */
static enum MHD_Result on_headers(mv_httpd *h, struct MHD_Connection *c, reqctx *rc,
                                  const char *url, const char *method)
{
    char text[160];
    rc->started = 1;
    if (rc->too_many_params) {
        snprintf(text, sizeof text, "too many query parameters: %u, at most %u are accepted\n",
                 rc->nparams, h->cfg.max_query_params);
        return reject(h, c, MHD_HTTP_URI_TOO_LONG, text, NULL);
    }
    const route *rt = find_route(h, url);
    if (!rt)
        return reject(h, c, MHD_HTTP_NOT_FOUND, "not found\n", NULL);
    int get = !strcmp(method, MHD_HTTP_METHOD_GET) || !strcmp(method, MHD_HTTP_METHOD_HEAD);
    int post = !strcmp(method, MHD_HTTP_METHOD_POST);
    if (!((get && (rt->methods & MV_HTTPD_GET)) || (post && (rt->methods & MV_HTTPD_POST)))) {
        char allow[32];
        allow_text(rt->methods, allow, sizeof allow);
        snprintf(text, sizeof text, "method not allowed; use %s\n", allow);
        return reject(h, c, MHD_HTTP_METHOD_NOT_ALLOWED, text, allow);
    }
    if (post) {
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl) {
            char *end;
            errno = 0;
            unsigned long long n = strtoull(cl, &end, 10);
            if (errno || end == cl || n > h->cfg.max_body_bytes) {
                snprintf(text, sizeof text, "request body exceeds %zu bytes\n",
                         h->cfg.max_body_bytes);
                return reject(h, c, 413, text, NULL);
            }
        }
    }
    rc->rt = rt;
    return MHD_YES;
}

/* A piece of the body: kept (POST routes, up to max_body_bytes) or dropped. */
static enum MHD_Result on_body(mv_httpd *h, reqctx *rc, const char *data, size_t n, int post)
{
    if (!post)
        return MHD_YES; /* a body on GET is read and dropped */
    if (rc->too_big) {
        /* A chunked body that does not end: stop reading and close the connection. */
        rc->discarded += n;
        if (rc->discarded > DISCARD_MAX) {
            pthread_mutex_lock(&h->mu);
            h->st.rejected++;
            pthread_mutex_unlock(&h->mu);
            MV_WARN("httpd.rejected", "status=413 msg=%s",
                    mv_log_q("chunked request body over 16 MiB; connection closed"));
            return MHD_NO;
        }
        return MHD_YES;
    }
    if (n > h->cfg.max_body_bytes - rc->len) {
        /* libmicrohttpd answers only once the body is read: discard it, then send 413. */
        rc->too_big = 1;
        free(rc->body);
        rc->body = NULL;
        rc->len = rc->cap = 0;
        return MHD_YES;
    }
    if (rc->len + n + 1 > rc->cap) {
        size_t cap = rc->cap ? rc->cap : 16384;
        while (cap < rc->len + n + 1)
            cap *= 2;
        if (cap > h->cfg.max_body_bytes + 1)
            cap = h->cfg.max_body_bytes + 1;
        char *nb = realloc(rc->body, cap);
        if (!nb)
            return MHD_NO;
        rc->body = nb;
        rc->cap = cap;
    }
    memcpy(rc->body + rc->len, data, n);
    rc->len += n;
    rc->body[rc->len] = '\0';
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    (void)version;
    mv_httpd *h = cls;
    reqctx *rc = *con_cls;
    if (!rc)
        return MHD_NO; /* out of memory in on_uri */
    if (!rc->started)
        return on_headers(h, c, rc, url, method);
    int post = !strcmp(method, MHD_HTTP_METHOD_POST);
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        return on_body(h, rc, upload_data, n, post);
    }
    if (rc->too_big) {
        char text[80];
        snprintf(text, sizeof text, "request body exceeds %zu bytes\n", h->cfg.max_body_bytes);
        return reject(h, c, 413, text, NULL);
    }
    const route *rt = rc->rt;
    mv_httpd_request req = {c, method, url, post ? rc->body : NULL, post ? rc->len : 0};
    mv_httpd_response resp;
    memset(&resp, 0, sizeof resp);
    int ret_rc = 0;
    if (h->cfg.authorize)
        ret_rc = h->cfg.authorize(h->cfg.authorize_arg, &req, &resp);
    if (ret_rc == 0)
        ret_rc = rt->fn(rt->arg, &req, &resp);
    enum MHD_Result ret;
    if (ret_rc < 0) {
        MV_WARN("httpd.handler_failed", "path=%s err=%s", mv_log_q(url),
                mv_log_q(strerror(-ret_rc)));
        ret = queue_text(h, c, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal error\n", NULL);
    } else {
        ret = send_response(h, c, &resp);
    }
    resp_clear(&resp);
    return ret;
}

/* ---- Connection limits ----------------------------------------------------------------- */

static size_t client_key(const struct sockaddr *sa, unsigned char key[17])
{
    memset(key, 0, 17);
    if (sa && sa->sa_family == AF_INET) {
        key[0] = 4;
        memcpy(key + 1, &((const struct sockaddr_in *)sa)->sin_addr, 4);
        return 5;
    }
    if (sa && sa->sa_family == AF_INET6) {
        key[0] = 6;
        memcpy(key + 1, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
        return 17;
    }
    return 1; /* unknown family: one shared bucket */
}

/* The slot for `key` (h->mu held): its own, or a free one to take, or NULL if the table is
 * full (cannot happen: it has room for every allowed connection). */
static struct client *client_slot(mv_httpd *h, const unsigned char key[17])
{
    size_t hash = 1469598103934665603ull;
    for (int i = 0; i < 17; i++)
        hash = (hash ^ key[i]) * 1099511628211ull;
    struct client *reuse = NULL;
    for (size_t i = 0, j = hash % h->nclients_cap; i < h->nclients_cap;
         i++, j = (j + 1) % h->nclients_cap) {
        struct client *c = &h->clients[j];
        if (memcmp(c->key, key, 17) == 0)
            return c;
        if (!c->n && !reuse)
            reuse = c; /* free, or a client with no connection left */
        if (c->key[0] == 0)
            break; /* never used: the key is not further along */
    }
    if (reuse)
        memcpy(reuse->key, key, 17);
    return reuse;
}

/* Logs refusals at most every 10 s, with how many there were meanwhile (h->mu held). */
static void note_refusal(mv_httpd *h, const char *why, const char *client)
{
    time_t now = time(NULL);
    uint64_t total = h->st.refused_client + h->st.refused_limit;
    if (now - h->last_refusal_log < 10)
        return;
    MV_WARN("httpd.connection_refused", "reason=%s client=%s refused_since_last_log=%llu %s=%u",
            why, mv_log_q(client), (unsigned long long)(total - h->refusals_at_log),
            strcmp(why, "per_client_limit") == 0 ? "max_conns_per_client" : "max_conns",
            strcmp(why, "per_client_limit") == 0 ? h->cfg.max_conns_per_client : h->cfg.max_conns);
    h->last_refusal_log = now;
    h->refusals_at_log = total;
}

/* Accept policy: refuses a client that already holds max_conns_per_client connections, so
 * one client's idle or slow connections cannot starve the others (Prometheus). */
static enum MHD_Result on_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
    mv_httpd *h = cls;
    unsigned char key[17];
    (void)addrlen;
    client_key(addr, key);
    pthread_mutex_lock(&h->mu);
    struct client *c = client_slot(h, key);
    int ok = c && c->n < h->cfg.max_conns_per_client;
    if (ok)
        c->n++; /* reserved now: worker threads accept concurrently (a connection libmicrohttpd
                 * then fails to set up, out of memory, keeps its slot until restart) */
    if (!ok) {
        char ip[INET6_ADDRSTRLEN] = "?";
        if (addr && addr->sa_family == AF_INET)
            inet_ntop(AF_INET, &((const struct sockaddr_in *)addr)->sin_addr, ip, sizeof ip);
        else if (addr && addr->sa_family == AF_INET6)
            inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)addr)->sin6_addr, ip, sizeof ip);
        h->st.refused_client++;
        note_refusal(h, "per_client_limit", ip);
    }
    pthread_mutex_unlock(&h->mu);
    return ok ? MHD_YES : MHD_NO;
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    mv_httpd *h = cls;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    unsigned char key[17];
    client_key(ci ? ci->client_addr : NULL, key);
    conn_track *t = NULL;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *fi =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        t = calloc(1, sizeof *t);
        if (t) {
            t->fd = fi ? fi->connect_fd : -1;
            if (h->cfg.request_deadline_s)
                t->deadline_ms = mono_ms() + 1000u * (uint64_t)h->cfg.request_deadline_s;
        }
        *socket_context = t;
    }
    pthread_mutex_lock(&h->mu);
    struct client *c = client_slot(h, key);
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        h->st.accepted++;
        h->st.active++; /* its client's slot was taken in on_accept */
        if (t) {
            t->next = &h->conns;
            t->prev = h->conns.prev;
            h->conns.prev->next = t;
            h->conns.prev = t;
        }
    } else if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        if (h->st.active)
            h->st.active--;
        if (c && c->n)
            c->n--;
        /* Unlinked before libmicrohttpd closes the descriptor: the sweeper never shuts down a
         * descriptor number that was reused. */
        t = *socket_context;
        if (t) {
            t->prev->next = t->next;
            t->next->prev = t->prev;
            free(t);
            *socket_context = NULL;
        }
    }
    pthread_mutex_unlock(&h->mu);
}

/* Closes connections past their request deadline (h->mu held): shutting the socket down makes
 * libmicrohttpd see the end of the stream and close the connection in its own thread. */
static void sweep(mv_httpd *h, uint64_t now)
{
    unsigned closed = 0;
    for (conn_track *t = h->conns.next; t != &h->conns; t = t->next) {
        if (!t->deadline_ms || now < t->deadline_ms || t->fd < 0)
            continue;
        shutdown(t->fd, SHUT_RDWR);
        t->deadline_ms = 0; /* once */
        closed++;
    }
    if (!closed)
        return;
    h->st.deadline_closed += closed;
    time_t wall = time(NULL);
    if (wall - h->last_deadline_log >= 10) {
        MV_WARN("httpd.deadline_closed", "closed_since_last_log=%llu request_deadline_s=%u msg=%s",
                (unsigned long long)(h->st.deadline_closed - h->deadline_at_log),
                h->cfg.request_deadline_s,
                mv_log_q("connections that did not send a complete request in time were "
                         "closed"));
        h->last_deadline_log = wall;
        h->deadline_at_log = h->st.deadline_closed;
    }
}

static void *sweeper_main(void *arg)
{
    mv_httpd *h = arg;
    pthread_mutex_lock(&h->stop_mu);
    while (!h->stopping) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_nsec += SWEEP_MS * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&h->stop_cond, &h->stop_mu, &until);
        if (h->stopping)
            break;
        pthread_mutex_unlock(&h->stop_mu);
        pthread_mutex_lock(&h->mu);
        sweep(h, mono_ms());
        pthread_mutex_unlock(&h->mu);
        pthread_mutex_lock(&h->stop_mu);
    }
    pthread_mutex_unlock(&h->stop_mu);
    return NULL;
}

void mv_httpd_get_stats(mv_httpd *h, mv_httpd_stats *out)
{
    pthread_mutex_lock(&h->mu);
    *out = h->st;
    pthread_mutex_unlock(&h->mu);
    if (h->tls)
        mv_httpd__tls_stats(h->tls, &out->tls_reload_ok, &out->tls_reload_failed,
                            &out->tls_not_after);
}

int mv_httpd_tls_check_reload(mv_httpd *h)
{
    return h->tls ? mv_httpd__tls_check_reload(h->tls) : 0;
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    mv_httpd *h = cls;
    char buf[256];
    vsnprintf(buf, sizeof buf, fmt, ap);
    size_t n = strlen(buf);
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        buf[--n] = '\0';
    if (strncmp(buf, "Server reached connection limit", 31) == 0) {
        pthread_mutex_lock(&h->mu);
        h->st.refused_limit++;
        note_refusal(h, "connection_limit", "any");
        pthread_mutex_unlock(&h->mu);
        return;
    }
    /* Oversized requests are answered 414/431 and counted nowhere else: a client can send
     * them at will, so they are not worth a warning each. */
    if (strncmp(buf, "Not enough memory in pool", 25) == 0 ||
        strncmp(buf, "Error processing request", 24) == 0) {
        MV_DEBUG("httpd.mhd", "msg=%s", mv_log_q(buf));
        return;
    }
    MV_WARN("httpd.mhd", "msg=%s", mv_log_q(buf));
}

/* Makes room for max_conns sockets in RLIMIT_NOFILE (raising the soft limit up to the hard
 * one); lowers max_conns with a warning when the hard limit is too small. */
static void fit_fd_limit(mv_httpd *h)
{
    struct rlimit rl;
    rlim_t need = (rlim_t)h->cfg.max_conns + 256; /* agents, segments, logs, ... */
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= need)
        return;
    rlim_t want = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need ? need : rl.rlim_max;
    rl.rlim_cur = want;
    if (setrlimit(RLIMIT_NOFILE, &rl) == 0 && want >= need)
        return;
    unsigned fit = want > 512 ? (unsigned)(want - 256) : 256;
    if (fit < h->cfg.max_conns) {
        MV_WARN("httpd.fd_limit", "max_conns=%u lowered_to=%u nofile_hard=%llu hint=%s",
                h->cfg.max_conns, fit, (unsigned long long)rl.rlim_max,
                mv_log_q("raise the open-files limit (ulimit -n) to serve more connections"));
        h->cfg.max_conns = fit;
        if (h->cfg.max_conns_per_client > fit)
            h->cfg.max_conns_per_client = fit;
    }
}

static struct MHD_Daemon *start_daemon(mv_httpd *h, unsigned flags)
{
#define COMMON_OPTIONS                                                                             \
    MHD_OPTION_EXTERNAL_LOGGER, mhd_log, h, MHD_OPTION_NOTIFY_CONNECTION, on_connection, h,        \
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, h, MHD_OPTION_URI_LOG_CALLBACK, on_uri, h,      \
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&h->sa, MHD_OPTION_THREAD_POOL_SIZE,              \
        h->cfg.threads, MHD_OPTION_CONNECTION_LIMIT, h->cfg.max_conns,                             \
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, h->cfg.max_request_bytes,                              \
        MHD_OPTION_CONNECTION_TIMEOUT, h->cfg.timeout_s
    if (h->tls)
        return MHD_start_daemon(
            flags | MHD_USE_TLS, h->cfg.port, on_accept, h, on_request, h, COMMON_OPTIONS,
            MHD_OPTION_HTTPS_CERT_CALLBACK,
            (gnutls_certificate_retrieve_function2 *)mv_httpd__tls_cert_callback(),
            MHD_OPTION_HTTPS_PRIORITIES, h->cfg.tls_priorities, MHD_OPTION_END);
    return MHD_start_daemon(flags, h->cfg.port, on_accept, h, on_request, h, COMMON_OPTIONS,
                            MHD_OPTION_END);
#undef COMMON_OPTIONS
}

int mv_httpd_start(mv_httpd *h)
{
    if (h->d)
        return -EBUSY;
    unsigned flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG | MHD_ALLOW_SUSPEND_RESUME;
    if (h->v6)
        flags |= MHD_USE_DUAL_STACK;
    fit_fd_limit(h);
    h->nclients_cap = 2 * (size_t)h->cfg.max_conns + 1;
    free(h->clients);
    h->clients = calloc(h->nclients_cap, sizeof *h->clients);
    if (!h->clients)
        return -ENOMEM;
    errno = 0;
    h->d = start_daemon(h, flags);
    if (!h->d && h->any6) {
        /* "::" on a host without IPv6: every IPv4 address instead. */
        struct sockaddr_in *s4 = (struct sockaddr_in *)&h->sa;
        memset(&h->sa, 0, sizeof h->sa);
        s4->sin_family = AF_INET;
        s4->sin_port = htons(h->cfg.port);
        s4->sin_addr.s_addr = htonl(INADDR_ANY);
        errno = 0;
        h->d = start_daemon(h, flags & ~(unsigned)MHD_USE_DUAL_STACK);
    }
    if (!h->d) {
        int err = errno == EADDRINUSE || errno == EACCES ? errno : EIO;
        MV_ERROR("httpd.start_failed", "addr=%s port=%u err=%s msg=%s", mv_log_q(h->addr),
                 (unsigned)h->cfg.port, mv_log_q(strerror(err)),
                 mv_log_q("cannot listen; check that the port is free and the address is "
                          "local"));
        return -err;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    h->port = info ? info->port : h->cfg.port;
    if (h->cfg.request_deadline_s) {
        if (pthread_create(&h->sweeper, NULL, sweeper_main, h) == 0)
            h->sweeping = 1;
        else
            MV_WARN("httpd.deadline_off", "msg=%s",
                    mv_log_q("cannot start the deadline thread: slow clients are closed only "
                             "by the idle timeout"));
    }
    if (h->tls)
        mv_httpd__tls_watch(h->tls);
    MV_INFO("httpd.listening",
            "addr=%s port=%u tls=%s threads=%u max_conns=%u max_conns_per_client=%u "
            "request_deadline_s=%u idle_timeout_s=%u max_request_bytes=%zu "
            "max_query_params=%u",
            mv_log_q(h->addr), (unsigned)h->port, h->tls ? "on" : "off", h->cfg.threads,
            h->cfg.max_conns, h->cfg.max_conns_per_client, h->cfg.request_deadline_s,
            h->cfg.timeout_s, h->cfg.max_request_bytes, h->cfg.max_query_params);
    return 0;
}

uint16_t mv_httpd_port(const mv_httpd *h)
{
    return h->d ? h->port : 0;
}

void mv_httpd_destroy(mv_httpd *h)
{
    if (!h)
        return;
    if (h->sweeping) {
        pthread_mutex_lock(&h->stop_mu);
        h->stopping = 1;
        pthread_cond_signal(&h->stop_cond);
        pthread_mutex_unlock(&h->stop_mu);
        pthread_join(h->sweeper, NULL);
    }
    if (h->d) {
        /* libmicrohttpd must not be stopped with suspended connections: resume every stream,
         * whose next read then ends it. */
        pthread_mutex_lock(&h->mu);
        for (mv_httpd_stream *st = h->streams.next; st != &h->streams; st = st->next) {
            pthread_mutex_lock(&st->mu);
            st->stopping = 1;
            if (st->suspended) {
                st->suspended = 0;
                MHD_resume_connection(st->c);
            }
            pthread_mutex_unlock(&st->mu);
        }
        pthread_mutex_unlock(&h->mu);
        MHD_stop_daemon(h->d);
    }
    mv_httpd__tls_destroy(h->tls);
    for (size_t i = 0; i < h->nroutes; i++)
        free(h->routes[i].path);
    while (h->conns.next && h->conns.next != &h->conns) {
        conn_track *t = h->conns.next;
        h->conns.next = t->next;
        free(t);
    }
    free(h->clients);
    pthread_mutex_destroy(&h->mu);
    pthread_mutex_destroy(&h->stop_mu);
    pthread_cond_destroy(&h->stop_cond);
    free(h);
}
