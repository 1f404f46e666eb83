/* mv_wh_server: the webhook's HTTPS endpoints (libmicrohttpd + GnuTLS) and key pair rotation. */
#include "mv_webhook.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

#include <gnutls/abstract.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <microhttpd.h>

#include "mv_log.h"
#include "mv_util.h"

#define MAX_CHAIN    16
#define MAX_RETIRED  64 /* replaced key pairs kept alive for sessions that may still use them */
#define PEM_FILE_MAX (1u << 20)
#define DISCARD_MAX  (16u << 20) /* an oversized body is read (and dropped) up to this much */

/* One loaded certificate chain and key. Never changed after load; freed at destroy (a TLS
 * session may keep pointers to it after the handshake). */
typedef struct keypair {
    gnutls_pcert_st certs[MAX_CHAIN];
    unsigned ncerts;
    gnutls_privkey_t key;
    time_t not_after;
    struct keypair *older;
} keypair;

/* What identifies the contents of a file without reading it: a Secret volume swaps a symlink,
 * which changes the inode; an in-place rewrite changes mtime or size. */
typedef struct {
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
    int ok;
} file_id;

enum { R_ALLOWED, R_PATCHED, R_DENIED, R_ERROR, R_COUNT };
static const char *const RESULT_NAMES[R_COUNT] = {"allowed", "patched", "denied", "error"};

struct mv_wh_server {
    mv_wh_server_config cfg;
    char *cert_file, *key_file, *listen;
    char host[64];
    uint16_t port;
    struct sockaddr_storage sa;
    int v6, any;
    struct MHD_Daemon *d;

    pthread_mutex_t lock; /* guards current, ids */
    keypair *current;
    unsigned retired;
    file_id cert_id, key_id; /* of the last attempt, good or bad */

    pthread_t watcher;
    int watching;
    pthread_mutex_t stop_lock;
    pthread_cond_t stop_cond;
    int stopping;

    atomic_ullong results[R_COUNT];
    atomic_ullong reload_ok, reload_failed, http_rejected;
};

/* GnuTLS's certificate callback has no user pointer: the one server of the process. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static mv_wh_server *g_server;

/* ---- key pairs ------------------------------------------------------------------------------ */

static int read_file(const char *path, gnutls_datum_t *out, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    unsigned char *buf = malloc(PEM_FILE_MAX + 1);
    size_t n = buf ? fread(buf, 1, PEM_FILE_MAX + 1, f) : 0;
    int bad = ferror(f);
    fclose(f);
    if (!buf || bad || n == 0 || n > PEM_FILE_MAX) {
        snprintf(err, errlen, "%s: %s", path,
                 !buf  ? "out of memory"
                 : bad ? "read error"
                 : n   ? "larger than 1 MiB"
                       : "empty");
        free(buf);
        return -1;
    }
    buf[n] = '\0';
    out->data = buf;
    out->size = (unsigned)n;
    return 0;
}

static void keypair_free(keypair *kp)
{
    while (kp) {
        keypair *older = kp->older;
        for (unsigned i = 0; i < kp->ncerts; i++)
            gnutls_pcert_deinit(&kp->certs[i]);
        if (kp->key)
            gnutls_privkey_deinit(kp->key);
        free(kp);
        kp = older;
    }
}

static void file_stat(const char *path, file_id *id)
{
    struct stat st;
    memset(id, 0, sizeof *id);
    if (stat(path, &st) != 0)
        return;
    id->ok = 1;
    id->dev = st.st_dev;
    id->ino = st.st_ino;
    id->size = st.st_size;
    id->mtime = st.st_mtim;
}

static int file_id_eq(const file_id *a, const file_id *b)
{
    return a->ok == b->ok && a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
           a->mtime.tv_sec == b->mtime.tv_sec && a->mtime.tv_nsec == b->mtime.tv_nsec;
}

/* Loads and checks a pair: the PEM parses, the key matches the first certificate. */
static keypair *keypair_load(const char *cert_path, const char *key_path, char *err, size_t errlen)
{
    gnutls_datum_t cert = {0}, key = {0};
    gnutls_certificate_credentials_t check = NULL;
    keypair *kp = NULL;
    int rc;
    if (read_file(cert_path, &cert, err, errlen) != 0 || read_file(key_path, &key, err, errlen))
        goto out;
    /* gnutls compares the key with the certificate here. */
    if (gnutls_certificate_allocate_credentials(&check) < 0) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    rc = gnutls_certificate_set_x509_key_mem2(check, &cert, &key, GNUTLS_X509_FMT_PEM, NULL, 0);
    if (rc < 0) {
        snprintf(err, errlen, "%s + %s: %s", cert_path, key_path, gnutls_strerror(rc));
        goto out;
    }
    kp = calloc(1, sizeof *kp);
    if (!kp) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    kp->ncerts = MAX_CHAIN;
    rc = gnutls_pcert_list_import_x509_raw(kp->certs, &kp->ncerts, &cert, GNUTLS_X509_FMT_PEM, 0);
    if (rc < 0) {
        kp->ncerts = 0;
        snprintf(err, errlen, "%s: %s", cert_path, gnutls_strerror(rc));
        goto fail;
    }
    if ((rc = gnutls_privkey_init(&kp->key)) < 0 ||
        (rc = gnutls_privkey_import_x509_raw(kp->key, &key, GNUTLS_X509_FMT_PEM, NULL, 0)) < 0) {
        snprintf(err, errlen, "%s: %s", key_path, gnutls_strerror(rc));
        goto fail;
    }
    gnutls_x509_crt_t crt;
    if (gnutls_x509_crt_init(&crt) == 0) {
        if (gnutls_x509_crt_import(crt, &kp->certs[0].cert, GNUTLS_X509_FMT_DER) == 0)
            kp->not_after = gnutls_x509_crt_get_expiration_time(crt);
        gnutls_x509_crt_deinit(crt);
    }
    goto out;
fail:
    keypair_free(kp);
    kp = NULL;
out:
    if (check)
        gnutls_certificate_free_credentials(check);
    if (key.data) {
        memset(key.data, 0, key.size);
        free(key.data);
    }
    free(cert.data);
    return kp;
}

static int cert_callback(gnutls_session_t session, const gnutls_datum_t *req_ca_dn, int nreqs,
                         const gnutls_pk_algorithm_t *pk_algos, int pk_algos_length,
                         gnutls_pcert_st **pcert, unsigned int *pcert_length,
                         gnutls_privkey_t *pkey)
{
    (void)session;
    (void)req_ca_dn;
    (void)nreqs;
    (void)pk_algos;
    (void)pk_algos_length;
    int rc = -1;
    pthread_mutex_lock(&g_lock);
    mv_wh_server *s = g_server;
    if (s) {
        pthread_mutex_lock(&s->lock);
        keypair *kp = s->current;
        if (kp) {
            *pcert = kp->certs;
            *pcert_length = kp->ncerts;
            *pkey = kp->key;
            rc = 0;
        }
        pthread_mutex_unlock(&s->lock);
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

int mv_wh_server_check_reload(mv_wh_server *s)
{
    file_id c, k;
    file_stat(s->cert_file, &c);
    file_stat(s->key_file, &k);
    pthread_mutex_lock(&s->lock);
    int same = file_id_eq(&c, &s->cert_id) && file_id_eq(&k, &s->key_id);
    s->cert_id = c;
    s->key_id = k;
    pthread_mutex_unlock(&s->lock);
    if (same)
        return 0;

    char err[512];
    keypair *kp = keypair_load(s->cert_file, s->key_file, err, sizeof err);
    if (!kp) {
        atomic_fetch_add(&s->reload_failed, 1);
        MV_ERROR("tls.reload_failed", "cert=%s key=%s err=%s msg=%s", mv_log_q(s->cert_file),
                 mv_log_q(s->key_file), mv_log_q(err),
                 mv_log_q("still serving the previous key pair; write a matching PEM "
                          "certificate and key"));
        return -EINVAL;
    }
    keypair *drop = NULL;
    pthread_mutex_lock(&s->lock);
    kp->older = s->current;
    s->current = kp;
    if (++s->retired > MAX_RETIRED) {
        /* Cut the oldest pair, replaced MAX_RETIRED rotations ago. */
        keypair *p = kp;
        for (unsigned i = 0; i < MAX_RETIRED && p->older; i++)
            p = p->older;
        drop = p->older;
        p->older = NULL;
        s->retired = MAX_RETIRED;
    }
    pthread_mutex_unlock(&s->lock);
    keypair_free(drop);
    atomic_fetch_add(&s->reload_ok, 1);
    MV_INFO("tls.reloaded", "cert=%s key=%s chain=%u not_after=%lld", mv_log_q(s->cert_file),
            mv_log_q(s->key_file), kp->ncerts, (long long)kp->not_after);
    return 1;
}

static void *watch_main(void *arg)
{
    mv_wh_server *s = arg;
    unsigned ms = s->cfg.reload_interval_ms;
    pthread_mutex_lock(&s->stop_lock);
    while (!s->stopping) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += ms / 1000;
        until.tv_nsec += (long)(ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        while (!s->stopping &&
               pthread_cond_timedwait(&s->stop_cond, &s->stop_lock, &until) != ETIMEDOUT)
            ;
        if (s->stopping)
            break;
        pthread_mutex_unlock(&s->stop_lock);
        mv_wh_server_check_reload(s);
        pthread_mutex_lock(&s->stop_lock);
    }
    pthread_mutex_unlock(&s->stop_lock);
    return NULL;
}

/* ---- HTTP ----------------------------------------------------------------------------------- */

typedef struct {
    char *buf;
    size_t len, cap;
    size_t discarded; /* bytes thrown away after the cap */
    int too_big;
} upload;

static enum MHD_Result reply_allow(struct MHD_Connection *c, unsigned status, const char *ctype,
                                   char *body, size_t len, int owned, const char *allow)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(
        len, body, owned ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (!r) {
        if (owned)
            free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    if (allow)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *ctype,
                             char *body, size_t len, int owned)
{
    return reply_allow(c, status, ctype, body, len, owned, NULL);
}

static enum MHD_Result reply_text_allow(mv_wh_server *s, struct MHD_Connection *c, unsigned status,
                                        const char *text, const char *allow)
{
    if (status >= 400) {
        char m[256];
        snprintf(m, sizeof m, "%s", text);
        size_t n = strlen(m);
        while (n && m[n - 1] == '\n')
            m[--n] = '\0';
        atomic_fetch_add(&s->http_rejected, 1);
        MV_WARN("http.rejected", "status=%u msg=%s", status, mv_log_q(m));
    }
    return reply_allow(c, status, "text/plain; charset=utf-8", (char *)text, strlen(text), 0,
                       allow);
}

static enum MHD_Result reply_text(mv_wh_server *s, struct MHD_Connection *c, unsigned status,
                                  const char *text)
{
    return reply_text_allow(s, c, status, text, NULL);
}

/* application/json, optionally with parameters ("; charset=utf-8"). */
static int is_json(const char *ct)
{
    static const char want[] = "application/json";
    if (!ct)
        return 0;
    while (*ct == ' ' || *ct == '\t')
        ct++;
    if (strncasecmp(ct, want, sizeof want - 1) != 0)
        return 0;
    ct += sizeof want - 1;
    while (*ct == ' ' || *ct == '\t')
        ct++;
    return *ct == '\0' || *ct == ';';
}

static char *metrics_text(mv_wh_server *s, size_t *len)
{
    char *out = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&out, &n);
    if (!f)
        return NULL;
    fputs("# HELP microview_webhook_admission_reviews_total AdmissionReview requests answered, "
          "by result.\n"
          "# TYPE microview_webhook_admission_reviews_total counter\n",
          f);
    for (int i = 0; i < R_COUNT; i++)
        fprintf(f, "microview_webhook_admission_reviews_total{result=\"%s\"} %llu\n",
                RESULT_NAMES[i], (unsigned long long)atomic_load(&s->results[i]));
    fprintf(f,
            "# HELP microview_webhook_http_rejected_total HTTP requests refused before review "
            "(wrong path, method, content type or size).\n"
            "# TYPE microview_webhook_http_rejected_total counter\n"
            "microview_webhook_http_rejected_total %llu\n",
            (unsigned long long)atomic_load(&s->http_rejected));
    fprintf(f,
            "# HELP microview_webhook_tls_reloads_total Key pair reloads after its files "
            "changed, by result.\n"
            "# TYPE microview_webhook_tls_reloads_total counter\n"
            "microview_webhook_tls_reloads_total{result=\"ok\"} %llu\n"
            "microview_webhook_tls_reloads_total{result=\"error\"} %llu\n",
            (unsigned long long)atomic_load(&s->reload_ok),
            (unsigned long long)atomic_load(&s->reload_failed));
    pthread_mutex_lock(&s->lock);
    long long na = s->current ? (long long)s->current->not_after : 0;
    pthread_mutex_unlock(&s->lock);
    fprintf(f,
            "# HELP microview_webhook_tls_cert_not_after_seconds Expiry of the served "
            "certificate, Unix time.\n"
            "# TYPE microview_webhook_tls_cert_not_after_seconds gauge\n"
            "microview_webhook_tls_cert_not_after_seconds %lld\n",
            na);
    if (fclose(f) != 0) {
        free(out);
        return NULL;
    }
    *len = n;
    return out;
}

static enum MHD_Result review(mv_wh_server *s, struct MHD_Connection *c, const upload *u)
{
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    mv_wh_result r;
    if (mv_wh_review(&s->cfg.review, u->buf ? u->buf : "", u->len, &r) != 0) {
        atomic_fetch_add(&s->results[R_ERROR], 1);
        MV_ERROR("admission.failed", "msg=%s", mv_log_q("out of memory"));
        return reply_text(s, c, 500, "out of memory\n");
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    atomic_fetch_add(&s->results[r.kind], 1);
    mv_log_level lvl = r.kind == MV_WH_ERROR ? MV_LOG_WARN : MV_LOG_INFO;
    if (r.kind == MV_WH_PATCHED)
        mv_log(lvl, "admission",
               "result=patched uid=%s namespace=%s pod=%s pages=%" PRIu64
               " containers=%u took_ms=%.3f",
               mv_log_q(r.uid), mv_log_q(r.namespace_), mv_log_q(r.name), r.pages, r.containers,
               ms);
    else
        mv_log(lvl, "admission", "result=%s http=%u uid=%s namespace=%s pod=%s msg=%s took_ms=%.3f",
               RESULT_NAMES[r.kind], r.http_status, mv_log_q(r.uid), mv_log_q(r.namespace_),
               mv_log_q(r.name), mv_log_q(r.message ? r.message : ""), ms);
    char *body = r.body;
    r.body = NULL;
    enum MHD_Result ret = reply(c, r.http_status, r.content_type, body, r.body_len, 1);
    mv_wh_result_free(&r);
    return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *data,
                                  size_t *data_size, void **con_cls)
{
    (void)version;
    mv_wh_server *s = cls;
    upload *u = *con_cls;
    if (!u) {
        int get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
        if (strcmp(url, "/healthz") == 0) {
            if (!get)
                return reply_text_allow(s, c, 405, "use GET\n", "GET, HEAD");
            return reply(c, 200, "text/plain; charset=utf-8", "ok\n", 3, 0);
        }
        if (strcmp(url, "/metrics") == 0) {
            if (!get)
                return reply_text_allow(s, c, 405, "use GET\n", "GET, HEAD");
            size_t len;
            char *m = metrics_text(s, &len);
            if (!m)
                return reply_text(s, c, 500, "out of memory\n");
            return reply(c, 200, "text/plain; version=0.0.4; charset=utf-8", m, len, 1);
        }
        if (strcmp(url, "/mutate") != 0)
            return reply_text(s, c, 404, "not found; the webhook serves POST /mutate\n");
        if (strcmp(method, "POST") != 0)
            return reply_text_allow(s, c, 405, "use POST with an AdmissionReview\n", "POST");
        if (!is_json(MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type")))
            return reply_text(s, c, 415, "Content-Type must be application/json\n");
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl) {
            char *end;
            errno = 0;
            unsigned long long n = strtoull(cl, &end, 10);
            if (errno || end == cl || n > MV_WH_BODY_MAX)
                return reply_text(s, c, 413, "request body exceeds 1048576 bytes\n");
        }
        u = calloc(1, sizeof *u);
        if (!u)
            return MHD_NO;
        *con_cls = u;
        return MHD_YES;
    }
    if (*data_size) {
        size_t n = *data_size;
        *data_size = 0;
        if (u->too_big) {
            /* A chunked body that does not end: stop reading and close the connection. */
            u->discarded += n;
            if (u->discarded > DISCARD_MAX) {
                atomic_fetch_add(&s->http_rejected, 1);
                MV_WARN("http.rejected", "status=413 msg=%s",
                        mv_log_q("chunked request body over 16 MiB; connection closed"));
                return MHD_NO;
            }
            return MHD_YES;
        }
        if (n > MV_WH_BODY_MAX - u->len) {
            /* libmicrohttpd answers only once the body is read: discard it, then send 413. */
            u->too_big = 1;
            free(u->buf);
            u->buf = NULL;
            u->len = u->cap = 0;
            return MHD_YES;
        }
        if (u->len + n > u->cap) {
            size_t cap = u->cap ? u->cap : 16384;
            while (cap < u->len + n)
                cap *= 2;
            if (cap > MV_WH_BODY_MAX)
                cap = MV_WH_BODY_MAX;
            char *nb = realloc(u->buf, cap);
            if (!nb)
                return MHD_NO;
            u->buf = nb;
            u->cap = cap;
        }
        memcpy(u->buf + u->len, data, n);
        u->len += n;
        return MHD_YES;
    }
    if (u->too_big)
        return reply_text(s, c, 413, "request body exceeds 1048576 bytes\n");
    return review(s, c, u);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)c;
    (void)toe;
    upload *u = *con_cls;
    if (u) {
        free(u->buf);
        free(u);
        *con_cls = NULL;
    }
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char buf[512];
    vsnprintf(buf, sizeof buf, fmt, ap);
    size_t n = strlen(buf);
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        buf[--n] = '\0';
    MV_WARN("http.library", "msg=%s", mv_log_q(buf));
}

/* ---- lifecycle ------------------------------------------------------------------------------ */

int mv_wh_server_create(const mv_wh_server_config *cfg, mv_wh_server **out)
{
    char err[512];
    *out = NULL;
    if (!cfg->cert_file || !cfg->key_file || !cfg->listen) {
        MV_ERROR("webhook.config", "msg=%s",
                 mv_log_q("a certificate file, a key file and a listen address are required"));
        return -EINVAL;
    }
    if (mv_wh_config_check(&cfg->review, err, sizeof err) != 0) {
        MV_ERROR("webhook.config", "msg=%s", mv_log_q(err));
        return -EINVAL;
    }
    mv_wh_server *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->cfg = *cfg;
    if (!s->cfg.reload_interval_ms)
        s->cfg.reload_interval_ms = 1000;
    if (!s->cfg.threads)
        s->cfg.threads = 2;
    pthread_mutex_init(&s->lock, NULL);
    pthread_mutex_init(&s->stop_lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->stop_cond, &ca);
    pthread_condattr_destroy(&ca);
    s->cert_file = strdup(cfg->cert_file);
    s->key_file = strdup(cfg->key_file);
    s->listen = strdup(cfg->listen);
    if (!s->cert_file || !s->key_file || !s->listen) {
        mv_wh_server_destroy(s);
        return -ENOMEM;
    }
    s->cfg.cert_file = s->cert_file;
    s->cfg.key_file = s->key_file;
    s->cfg.listen = s->listen;

    char why[MV_ERR_MAX];
    if (mv_parse_listen(cfg->listen, MV_LISTEN_ANY_HOST | MV_LISTEN_PORT_ZERO, s->host,
                        sizeof s->host, &s->port, why, sizeof why) != 0) {
        MV_ERROR("webhook.config", "listen=%s msg=%s", mv_log_q(cfg->listen), mv_log_q(why));
        mv_wh_server_destroy(s);
        return -EINVAL;
    }
    memset(&s->sa, 0, sizeof s->sa);
    if (s->host[0] == '\0') {
        s->any = 1;
    } else {
        struct sockaddr_in *a4 = (struct sockaddr_in *)&s->sa;
        struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&s->sa;
        if (inet_pton(AF_INET, s->host, &a4->sin_addr) == 1) {
            a4->sin_family = AF_INET;
            a4->sin_port = htons(s->port);
        } else if (inet_pton(AF_INET6, s->host, &a6->sin6_addr) == 1) {
            a6->sin6_family = AF_INET6;
            a6->sin6_port = htons(s->port);
            s->v6 = 1;
        } else {
            MV_ERROR("webhook.config", "listen=%s msg=%s", mv_log_q(cfg->listen),
                     mv_log_q("the host must be a numeric IPv4 or IPv6 address"));
            mv_wh_server_destroy(s);
            return -EINVAL;
        }
    }

    file_stat(s->cert_file, &s->cert_id);
    file_stat(s->key_file, &s->key_id);
    s->current = keypair_load(s->cert_file, s->key_file, err, sizeof err);
    if (!s->current) {
        MV_ERROR("tls.load_failed", "cert=%s key=%s err=%s", mv_log_q(s->cert_file),
                 mv_log_q(s->key_file), mv_log_q(err));
        mv_wh_server_destroy(s);
        return -EINVAL;
    }
    pthread_mutex_lock(&g_lock);
    if (g_server) {
        pthread_mutex_unlock(&g_lock);
        MV_ERROR("webhook.config", "msg=%s", mv_log_q("a webhook server already exists"));
        mv_wh_server_destroy(s);
        return -EBUSY;
    }
    g_server = s;
    pthread_mutex_unlock(&g_lock);
    *out = s;
    return 0;
}

int mv_wh_server_start(mv_wh_server *s)
{
    if (s->d)
        return -EBUSY;
    unsigned flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG | MHD_USE_TLS;
    struct sockaddr *sa = (struct sockaddr *)&s->sa;
    if (s->any)
        flags |= MHD_USE_DUAL_STACK;
    for (int attempt = 0; attempt < 2 && !s->d; attempt++) {
        errno = 0;
        if (s->any)
            s->d = MHD_start_daemon(
                flags, s->port, NULL, NULL, on_request, s, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
                MHD_OPTION_HTTPS_CERT_CALLBACK, cert_callback, MHD_OPTION_THREAD_POOL_SIZE,
                s->cfg.threads, MHD_OPTION_CONNECTION_LIMIT, 256u, MHD_OPTION_CONNECTION_TIMEOUT,
                30u, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_END);
        else
            s->d = MHD_start_daemon(
                flags, s->port, NULL, NULL, on_request, s, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
                MHD_OPTION_SOCK_ADDR, sa, MHD_OPTION_HTTPS_CERT_CALLBACK, cert_callback,
                MHD_OPTION_THREAD_POOL_SIZE, s->cfg.threads, MHD_OPTION_CONNECTION_LIMIT, 256u,
                MHD_OPTION_CONNECTION_TIMEOUT, 30u, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                MHD_OPTION_END);
        if (!s->d && s->any) /* no IPv6 on this host: every IPv4 address */
            flags &= ~(unsigned)MHD_USE_DUAL_STACK;
        else
            break;
    }
    if (!s->d) {
        int err = errno == EADDRINUSE || errno == EACCES ? errno : EIO;
        MV_ERROR("webhook.listen_failed", "listen=%s err=%s msg=%s", mv_log_q(s->listen),
                 mv_log_q(strerror(err)),
                 mv_log_q("cannot listen; check that the port is free and the address local"));
        return -err;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    if (info && info->port)
        s->port = info->port;
    if (pthread_create(&s->watcher, NULL, watch_main, s) == 0)
        s->watching = 1;
    else
        MV_WARN("tls.watch_failed", "msg=%s", mv_log_q("key pair rotation will not be noticed"));
    MV_INFO("webhook.listening",
            "listen=%s port=%u resource=%s page_size=%" PRIu64 " max_pages_per_pod=%" PRIu64
            " reload_interval_ms=%u",
            mv_log_q(s->listen), (unsigned)s->port, mv_log_q(s->cfg.review.resource_name),
            s->cfg.review.page_size, s->cfg.review.max_pages_per_pod, s->cfg.reload_interval_ms);
    return 0;
}

uint16_t mv_wh_server_port(const mv_wh_server *s)
{
    return s->d ? s->port : 0;
}

void mv_wh_server_destroy(mv_wh_server *s)
{
    if (!s)
        return;
    if (s->watching) {
        pthread_mutex_lock(&s->stop_lock);
        s->stopping = 1;
        pthread_cond_signal(&s->stop_cond);
        pthread_mutex_unlock(&s->stop_lock);
        pthread_join(s->watcher, NULL);
    }
    if (s->d)
        MHD_stop_daemon(s->d);
    pthread_mutex_lock(&g_lock);
    if (g_server == s)
        g_server = NULL;
    pthread_mutex_unlock(&g_lock);
    keypair_free(s->current);
    pthread_mutex_destroy(&s->lock);
    pthread_mutex_destroy(&s->stop_lock);
    pthread_cond_destroy(&s->stop_cond);
    free(s->cert_file);
    free(s->key_file);
    free(s->listen);
    free(s);
}
