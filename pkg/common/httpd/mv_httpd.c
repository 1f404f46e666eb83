/* mv_httpd: libmicrohttpd wrapper with exact-path routes, GET/HEAD only and gzip. */
#include "mv_httpd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <pthread.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <time.h>
#include <zlib.h>

#include "mv_log.h"

#define MAX_HEADERS 16
#define MAX_ROUTES  32

typedef struct {
    char *path;
    mv_httpd_handler fn;
    void *arg;
} route;

struct mv_httpd {
    mv_httpd_config cfg;
    char addr[INET6_ADDRSTRLEN];
    struct sockaddr_storage sa;
    int v6;
    route routes[MAX_ROUTES];
    size_t nroutes;
    struct MHD_Daemon *d;
    uint16_t port;
    /* Connections per client address (open addressing on the address bytes;
     * a slot with n == 0 is free once its key is cleared), under mu. */
    pthread_mutex_t mu;
    struct client {
        unsigned char key[17]; /* family byte + up to 16 address bytes */
        unsigned n;
    } * clients;
    size_t nclients_cap;
    mv_httpd_stats st;
    time_t last_refusal_log;
    uint64_t refusals_at_log;
};

struct mv_httpd_request {
    struct MHD_Connection *conn;
    const char *method;
    const char *path;
};

struct mv_httpd_response {
    unsigned status;
    char *ctype;
    char *body;
    size_t len;
    char *hname[MAX_HEADERS];
    char *hvalue[MAX_HEADERS];
    size_t nhdr;
};

/* ---- Config ------------------------------------------------------------------------- */

void mv_httpd_config_default(mv_httpd_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->addr = "127.0.0.1";
    cfg->port = 0;
    cfg->threads = 2;
    cfg->max_conns = 1024;
    cfg->max_conns_per_client = 64;
    cfg->max_request_bytes = 16 * 1024;
    cfg->timeout_s = 10;
    cfg->gzip_level = 6;
    cfg->gzip_min_bytes = 1024;
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
        cfg->max_request_bytes < 1024 || cfg->gzip_level < 1 || cfg->gzip_level > 9) {
        MV_ERROR("httpd.config",
                 "msg=%s threads=%u max_conns=%u max_request_bytes=%zu "
                 "gzip_level=%d",
                 mv_log_q("need threads 1..64, max_conns >= 1, max_request_bytes >= 1024, "
                          "gzip_level 1..9"),
                 cfg->threads, cfg->max_conns, cfg->max_request_bytes, cfg->gzip_level);
        return -EINVAL;
    }
    mv_httpd *h = calloc(1, sizeof *h);
    if (!h)
        return -ENOMEM;
    pthread_mutex_init(&h->mu, NULL);
    h->cfg = *cfg;
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
    } else {
        MV_ERROR("httpd.config", "addr=%s msg=%s", mv_log_q(addr),
                 mv_log_q("listen address must be a numeric IPv4 or IPv6 address, e.g. "
                          "127.0.0.1, 0.0.0.0 or ::"));
        free(h);
        return -EINVAL;
    }
    *out = h;
    return 0;
}

int mv_httpd_route(mv_httpd *h, const char *path, mv_httpd_handler fn, void *arg)
{
    if (!path || path[0] != '/' || !fn)
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
    h->routes[h->nroutes++] = (route){p, fn, arg};
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

static void resp_clear(mv_httpd_response *resp)
{
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

static enum MHD_Result queue_text(struct MHD_Connection *c, unsigned status, const char *text,
                                  const char *allow)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), (void *)(uintptr_t)text,
                                                             MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; charset=utf-8");
    if (allow)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static const route *find_route(const mv_httpd *h, const char *path)
{
    for (size_t i = 0; i < h->nroutes; i++)
        if (!strcmp(h->routes[i].path, path))
            return &h->routes[i];
    return NULL;
}

static enum MHD_Result send_response(mv_httpd *h, struct MHD_Connection *c, mv_httpd_response *resp)
{
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

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    (void)version;
    (void)upload_data;
    mv_httpd *h = cls;
    static int first_call_marker;
    int get = !strcmp(method, MHD_HTTP_METHOD_GET), head = !strcmp(method, MHD_HTTP_METHOD_HEAD);
    if (!get && !head)
        return queue_text(c, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed\n", "GET, HEAD");
    if (*con_cls == NULL) {
        *con_cls = &first_call_marker; /* headers complete; wait for (and drop) any body */
        return MHD_YES;
    }
    if (*upload_data_size) {
        *upload_data_size = 0;
        return MHD_YES;
    }
    const route *rt = find_route(h, url);
    if (!rt)
        return queue_text(c, MHD_HTTP_NOT_FOUND, "not found\n", NULL);

    mv_httpd_request req = {c, method, url};
    mv_httpd_response resp;
    memset(&resp, 0, sizeof resp);
    int rc = rt->fn(rt->arg, &req, &resp);
    enum MHD_Result ret;
    if (rc < 0) {
        MV_WARN("httpd.handler_failed", "path=%s err=%s", mv_log_q(url),
                mv_log_q(strerror(rc < 0 ? -rc : rc)));
        ret = queue_text(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal error\n", NULL);
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
    (void)socket_context;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    unsigned char key[17];
    client_key(ci ? ci->client_addr : NULL, key);
    pthread_mutex_lock(&h->mu);
    struct client *c = client_slot(h, key);
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        h->st.accepted++;
        h->st.active++; /* its client's slot was taken in on_accept */
    } else if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        if (h->st.active)
            h->st.active--;
        if (c && c->n)
            c->n--;
    }
    pthread_mutex_unlock(&h->mu);
}

void mv_httpd_get_stats(mv_httpd *h, mv_httpd_stats *out)
{
    pthread_mutex_lock(&h->mu);
    *out = h->st;
    pthread_mutex_unlock(&h->mu);
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

int mv_httpd_start(mv_httpd *h)
{
    if (h->d)
        return -EBUSY;
    unsigned flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG;
    if (h->v6)
        flags |= MHD_USE_DUAL_STACK;
    fit_fd_limit(h);
    h->nclients_cap = 2 * (size_t)h->cfg.max_conns + 1;
    free(h->clients);
    h->clients = calloc(h->nclients_cap, sizeof *h->clients);
    if (!h->clients)
        return -ENOMEM;
    errno = 0;
    h->d = MHD_start_daemon(
        flags, h->cfg.port, on_accept, h, on_request, h, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, h,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, h, MHD_OPTION_SOCK_ADDR,
        (struct sockaddr *)&h->sa, MHD_OPTION_THREAD_POOL_SIZE, h->cfg.threads,
        MHD_OPTION_CONNECTION_LIMIT, h->cfg.max_conns, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
        h->cfg.max_request_bytes, MHD_OPTION_CONNECTION_TIMEOUT, h->cfg.timeout_s, MHD_OPTION_END);
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
    MV_INFO("httpd.listening",
            "addr=%s port=%u threads=%u max_conns=%u max_conns_per_client=%u idle_timeout_s=%u",
            mv_log_q(h->addr), (unsigned)h->port, h->cfg.threads, h->cfg.max_conns,
            h->cfg.max_conns_per_client, h->cfg.timeout_s);
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
    if (h->d)
        MHD_stop_daemon(h->d);
    for (size_t i = 0; i < h->nroutes; i++)
        free(h->routes[i].path);
    free(h->clients);
    pthread_mutex_destroy(&h->mu);
    free(h);
}
